//! Golden bytes: every command in both framings, with the expected bytes
//! written out field by field from the kernel headers' layouts. An encoder
//! change that breaks the ABI fails here, on any machine.

use super::frame::{IoctlFrame, WriteFrame};
use crate::command::*;
use uverbs_uapi as sys;
use zerocopy::IntoBytes;

/// Little-endian fields, written out by hand in the tests below.
#[derive(Default)]
struct Bytes(Vec<u8>);

impl Bytes {
    fn u16(mut self, v: u16) -> Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn u32(mut self, v: u32) -> Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn u64(mut self, v: u64) -> Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn raw(mut self, v: &[u8]) -> Self {
        self.0.extend_from_slice(v);
        self
    }
}

const RESP: u64 = 0x7f00_1122_3344_5500;
const CORE_OUT: u64 = 0x7f00_aaaa_0000_0000;
const UHW_OUT: u64 = 0x7f00_bbbb_0000_0000;
const SIW_UHW_IN: [u8; 8] = [0xab, 0, 0, 0, 0, 0, 0, 0];

/// The request bytes of a typed command, as the transport receives them.
fn request_bytes<C: WriteCommand>(cmd: &C) -> Vec<u8> {
    cmd.request().as_bytes().to_vec()
}

fn write_frame<C: WriteCommand>(cmd: &C, resp_len: usize) -> Vec<u8> {
    let req = request_bytes(cmd);
    WriteFrame::new(C::CODE, &req, cmd.uhw_in(), RESP, resp_len)
        .unwrap()
        .as_bytes()
        .to_vec()
}

/// The ioctl frame and the request bytes its CORE_IN may point at.
fn ioctl_frame<C: WriteCommand>(cmd: &C, uhw_out_len: usize) -> (Vec<u8>, Vec<u8>) {
    let req = request_bytes(cmd);
    let core_out_len = size_of::<C::Response>();
    let frame = IoctlFrame::invoke_write(
        14,
        C::CODE,
        &req,
        cmd.uhw_in(),
        (CORE_OUT, core_out_len),
        (UHW_OUT, uhw_out_len),
    )
    .unwrap();
    let bytes = frame.as_bytes().to_vec();
    // CORE_IN points into `req` when longer than 8 bytes: keep it alive.
    (bytes, req)
}

fn ioctl_hdr(num_attrs: u16, driver_id: u32) -> Bytes {
    Bytes::default()
        .u16(24 + 16 * num_attrs) // length
        .u16(0) // object_id = UVERBS_OBJECT_DEVICE
        .u16(0) // method_id = UVERBS_METHOD_INVOKE_WRITE
        .u16(num_attrs)
        .u64(0) // reserved1
        .u32(driver_id)
        .u32(0) // reserved2
}

/// One ib_uverbs_attr: id, len, flags (MANDATORY = 1), attr_data 0, data.
fn attr(b: Bytes, id: u16, len: u16, data: u64) -> Bytes {
    b.u16(id).u16(len).u16(1).u16(0).u64(data)
}

fn inline(bytes: &[u8]) -> u64 {
    let mut v = [0u8; 8];
    v[..bytes.len()].copy_from_slice(bytes);
    u64::from_le_bytes(v)
}

#[test]
fn get_context_write() {
    // hdr {command 0, in_words 16/4, out_words 8/4} + {response}
    let expected = Bytes::default().u32(0).u16(4).u16(2).u64(RESP);
    assert_eq!(write_frame(&GetContext::new(), 8), expected.0);
    // siw: the response buffer also holds siw_uresp_alloc_ctx (8 more bytes).
    let expected = Bytes::default().u32(0).u16(4).u16(4).u64(RESP);
    assert_eq!(write_frame(&GetContext::new(), 16), expected.0);
}

#[test]
fn get_context_ioctl() {
    let (frame, _req) = ioctl_frame(&GetContext::new(), 8);
    let mut b = ioctl_hdr(4, 14);
    b = attr(b, 2, 8, 0); // WRITE_CMD = GET_CONTEXT (0), inline
    b = attr(b, 0, 8, 0); // CORE_IN: the 8-byte request (response = 0) inline
    b = attr(b, 1, 8, CORE_OUT); // CORE_OUT: 8 bytes
    b = attr(b, 0x1001, 8, UHW_OUT); // UHW_OUT: siw_uresp_alloc_ctx
    assert_eq!(frame, b.0);
}

#[test]
fn query_device_write() {
    let expected = Bytes::default().u32(1).u16(4).u16(44).u64(RESP);
    assert_eq!(write_frame(&QueryDevice::new(), 176), expected.0);
}

#[test]
fn query_device_ioctl() {
    let (frame, _req) = ioctl_frame(&QueryDevice::new(), 0);
    let mut b = ioctl_hdr(3, 14);
    b = attr(b, 2, 8, 1);
    b = attr(b, 0, 8, 0);
    b = attr(b, 1, 176, CORE_OUT);
    assert_eq!(frame, b.0);
}

#[test]
fn alloc_pd_write() {
    let expected = Bytes::default().u32(3).u16(4).u16(1).u64(RESP);
    assert_eq!(write_frame(&AllocPd::new(), 4), expected.0);
}

#[test]
fn alloc_pd_ioctl() {
    let (frame, _req) = ioctl_frame(&AllocPd::new(), 0);
    let mut b = ioctl_hdr(3, 14);
    b = attr(b, 2, 8, 3);
    b = attr(b, 0, 8, 0);
    b = attr(b, 1, 4, CORE_OUT);
    assert_eq!(frame, b.0);
}

#[test]
fn dealloc_pd_write() {
    // No response: no response field, out_words 0; body is just pd_handle.
    let expected = Bytes::default().u32(4).u16(3).u16(0).u32(7);
    assert_eq!(write_frame(&DeallocPd::new(7), 0), expected.0);
}

#[test]
fn dealloc_pd_ioctl() {
    let (frame, _req) = ioctl_frame(&DeallocPd::new(7), 0);
    let mut b = ioctl_hdr(2, 14);
    b = attr(b, 2, 8, 4);
    b = attr(b, 0, 4, 7); // 4-byte pd_handle inline
    assert_eq!(frame, b.0);
}

#[test]
fn reg_mr_write_rxe_and_siw() {
    let cmd = RegMr::new(5, 0x7f12_3456_7000, 1 << 20, 0x7);
    let body = |b: Bytes| {
        b.u64(RESP) // response
            .u64(0x7f12_3456_7000) // start
            .u64(1 << 20) // length
            .u64(0x7f12_3456_7000) // hca_va = start
            .u32(5) // pd_handle
            .u32(0x7) // access_flags
    };
    // rxe: 8 + 40 = 48 bytes in (12 words), 12 bytes out (3 words).
    let expected = body(Bytes::default().u32(9).u16(12).u16(3));
    assert_eq!(write_frame(&cmd, 12), expected.0);
    // siw: + siw_ureq_reg_mr in (14 words), + siw_uresp_reg_mr out (5 words).
    let expected = body(Bytes::default().u32(9).u16(14).u16(5)).raw(&SIW_UHW_IN);
    assert_eq!(write_frame(&cmd.uhw_in(&SIW_UHW_IN), 20), expected.0);
}

#[test]
fn reg_mr_ioctl_siw() {
    let cmd = RegMr::new(5, 0x7f12_3456_7000, 1 << 20, 0x7)
        .hca_va(0x1000)
        .uhw_in(&SIW_UHW_IN);
    let (frame, req) = ioctl_frame(&cmd, 8);
    assert_eq!(
        req,
        Bytes::default()
            .u64(0)
            .u64(0x7f12_3456_7000)
            .u64(1 << 20)
            .u64(0x1000)
            .u32(5)
            .u32(7)
            .0,
        "CORE_IN is the request after the header, response field 0"
    );
    let mut b = ioctl_hdr(5, 14);
    b = attr(b, 2, 8, 9);
    b = attr(b, 0, 40, req.as_ptr() as u64); // CORE_IN by pointer (> 8 bytes)
    b = attr(b, 1, 12, CORE_OUT);
    b = attr(b, 0x1000, 8, inline(&SIW_UHW_IN)); // UHW_IN inline (8 bytes)
    b = attr(b, 0x1001, 8, UHW_OUT);
    assert_eq!(frame, b.0);
}

#[test]
fn rereg_mr_write() {
    let cmd = ReregMr::new(3, 0x7)
        .translation(0x7f00_0020_0000, 2 << 20)
        .pd_handle(9)
        .access_flags(0x1);
    let expected = Bytes::default()
        .u32(11) // REREG_MR
        .u16(14) // (8 + 48) / 4
        .u16(2) // 8 / 4
        .u64(RESP)
        .u32(3) // mr_handle
        .u32(0x7) // flags
        .u64(0x7f00_0020_0000) // start
        .u64(2 << 20) // length
        .u64(0x7f00_0020_0000) // hca_va
        .u32(9) // pd_handle
        .u32(0x1); // access_flags
    assert_eq!(write_frame(&cmd, 8), expected.0);
}

#[test]
fn rereg_mr_ioctl() {
    let cmd = ReregMr::new(3, 0x4).access_flags(0x1);
    let (frame, req) = ioctl_frame(&cmd, 0);
    assert_eq!(
        req,
        Bytes::default()
            .u64(0)
            .u32(3)
            .u32(4)
            .u64(0)
            .u64(0)
            .u64(0)
            .u32(0)
            .u32(1)
            .0
    );
    let mut b = ioctl_hdr(3, 14);
    b = attr(b, 2, 8, 11);
    b = attr(b, 0, 48, req.as_ptr() as u64);
    b = attr(b, 1, 8, CORE_OUT);
    assert_eq!(frame, b.0);
}

#[test]
fn dereg_mr_both() {
    let expected = Bytes::default().u32(13).u16(3).u16(0).u32(42);
    assert_eq!(write_frame(&DeregMr::new(42), 0), expected.0);
    let (frame, _req) = ioctl_frame(&DeregMr::new(42), 0);
    let mut b = ioctl_hdr(2, 14);
    b = attr(b, 2, 8, 13);
    b = attr(b, 0, 4, 42);
    assert_eq!(frame, b.0);
}

#[test]
fn probe_frame_carries_only_write_cmd() {
    let mut frame = IoctlFrame::new(
        sys::UVERBS_OBJECT_DEVICE,
        sys::UVERBS_METHOD_INVOKE_WRITE,
        18,
    );
    frame
        .push(super::frame::attr_const(sys::UVERBS_ATTR_WRITE_CMD, 1))
        .unwrap();
    let b = attr(ioctl_hdr(1, 18), 2, 8, 1);
    assert_eq!(frame.as_bytes(), &b.0[..]);
}

#[test]
fn framing_refuses_what_the_kernel_would() {
    use crate::error::Errno;
    // Not a multiple of four bytes.
    assert_eq!(
        WriteFrame::new(9, &[0; 6], &[], 0, 0).unwrap_err(),
        Errno::INVAL
    );
    // Larger than any command.
    assert_eq!(
        WriteFrame::new(9, &[0; 400], &[], 0, 0).unwrap_err(),
        Errno::TOOBIG
    );
    // A response without a response field.
    assert_eq!(
        WriteFrame::new(4, &[0; 4], &[], RESP, 4).unwrap_err(),
        Errno::INVAL
    );
    // Attribute longer than u16.
    assert_eq!(
        super::frame::attr_in(0, &vec![0; 70_000]).unwrap_err(),
        Errno::INVAL
    );
    // Frame full.
    let mut frame = IoctlFrame::new(0, 0, 0);
    for _ in 0..super::frame::MAX_ATTRS {
        frame.push(super::frame::attr_const(2, 0)).unwrap();
    }
    assert_eq!(
        frame.push(super::frame::attr_const(2, 0)).unwrap_err(),
        Errno::TOOBIG
    );
}
