//! Golden bytes: every command in both framings, with the expected bytes
//! written out field by field from the kernel headers' layouts. An encoder
//! change that breaks the ABI fails here, on any machine.

use super::frame::{IoctlFrame, WriteFrame};
use crate::command::*;
use uverbs_uapi as sys;
use zerocopy::IntoBytes;

use crate::golden_bytes::Bytes;

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

/// What a command with a request body is in both framings.
struct Framing {
    /// The command number both frames name.
    code: u32,
    /// The write() header's in_words and out_words.
    in_words: u16,
    out_words: u16,
    /// The response room given to write().
    resp_len: usize,
    /// The ioctl frame's CORE_IN (by pointer), CORE_OUT and UHW_OUT lengths.
    core_in: u16,
    core_out: u16,
    uhw_out: u16,
}

/// Checks `cmd` against `body(response)`, its request after the header:
/// write() is the header `{code, in_words, out_words}` then `body(RESP)`;
/// ioctl is WRITE_CMD, CORE_IN pointing at `body(0)`, CORE_OUT, UHW_OUT.
fn both_framings<C: WriteCommand>(cmd: &C, body: impl Fn(Bytes, u64) -> Bytes, f: Framing) {
    let header = Bytes::default()
        .u32(f.code)
        .u16(f.in_words)
        .u16(f.out_words);
    assert_eq!(write_frame(cmd, f.resp_len), body(header, RESP).0);
    let (frame, req) = ioctl_frame(cmd, f.uhw_out.into());
    assert_eq!(req, body(Bytes::default(), 0).0);
    let rest = [
        (0, f.core_in, req.as_ptr() as u64),
        (1, f.core_out, CORE_OUT),
        (0x1001, f.uhw_out, UHW_OUT),
    ];
    assert_eq!(frame, invoke_write(f.code, &rest));
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

/// The invoke-write frame (driver 14): WRITE_CMD = `code` inline, then
/// the mandatory attributes `list`.
fn invoke_write(code: u32, list: &[(u16, u16, u64)]) -> Vec<u8> {
    let hdr = ioctl_hdr(1 + list.len() as u16, 14);
    attrs(attr(hdr, 2, 8, code.into()), list).0
}

/// Mandatory attributes, each `(id, len, data)`, after `b`.
fn attrs(b: Bytes, list: &[(u16, u16, u64)]) -> Bytes {
    list.iter()
        .fold(b, |b, &(id, len, data)| attr(b, id, len, data))
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
    let b = attrs(
        ioctl_hdr(4, 14),
        &[
            (2, 8, 0),            // WRITE_CMD = GET_CONTEXT (0), inline
            (0, 8, 0),            // CORE_IN: the 8-byte request (response = 0) inline
            (1, 8, CORE_OUT),     // CORE_OUT: 8 bytes
            (0x1001, 8, UHW_OUT), // UHW_OUT: siw_uresp_alloc_ctx
        ],
    );
    assert_eq!(frame, b.0);
}

/// A command whose request is only `response`, in both framings: write()
/// is `{code, 4 in_words, out_words}` + RESP; ioctl is WRITE_CMD, CORE_IN
/// (the 8-byte request, response 0, inline) and CORE_OUT of `resp_len`.
fn response_only_both<C: WriteCommand>(cmd: &C, code: u32, out_words: u16, resp_len: u16) {
    let expected = Bytes::default().u32(code).u16(4).u16(out_words).u64(RESP);
    assert_eq!(write_frame(cmd, resp_len.into()), expected.0);
    let (frame, _req) = ioctl_frame(cmd, 0);
    let rest = [(0, 8, 0), (1, resp_len, CORE_OUT)];
    assert_eq!(frame, invoke_write(code, &rest));
}

/// A destroy command without response, in both framings: no response
/// field, out_words 0, the body is just the 4-byte handle (inline in ioctl).
fn handle_only_both<C: WriteCommand>(cmd: &C, code: u32, handle: u32) {
    let expected = Bytes::default().u32(code).u16(3).u16(0).u32(handle);
    assert_eq!(write_frame(cmd, 0), expected.0);
    let (frame, _req) = ioctl_frame(cmd, 0);
    assert_eq!(frame, invoke_write(code, &[(0, 4, handle.into())]));
}

#[test]
fn query_device_both() {
    response_only_both(&QueryDevice::new(), 1, 44, 176);
}

#[test]
fn alloc_pd_both() {
    response_only_both(&AllocPd::new(), 3, 1, 4);
}

#[test]
fn dealloc_pd_both() {
    handle_only_both(&DeallocPd::new(7), 4, 7);
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
    assert_eq!(
        frame,
        invoke_write(
            9,
            &[
                (0, 40, req.as_ptr() as u64), // CORE_IN by pointer (> 8 bytes)
                (1, 12, CORE_OUT),
                (0x1000, 8, inline(&SIW_UHW_IN)), // UHW_IN inline (8 bytes)
                (0x1001, 8, UHW_OUT),
            ]
        )
    );
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
    assert_eq!(
        frame,
        invoke_write(11, &[(0, 48, req.as_ptr() as u64), (1, 8, CORE_OUT)])
    );
}

#[test]
fn dereg_mr_both() {
    handle_only_both(&DeregMr::new(42), 13, 42);
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

// ---- Native methods: header and every attribute, field by field. ----

use super::method::{driver_attr, Method};
use crate::method::{InfoHandles, QueryContext, QueryGidEntry, QueryGidTable, QueryMr, QueryPort};

fn method_hdr(num_attrs: u16, object_id: u16, method_id: u16, driver_id: u32) -> Bytes {
    Bytes::default()
        .u16(24 + 16 * num_attrs) // length
        .u16(object_id)
        .u16(method_id)
        .u16(num_attrs)
        .u64(0) // reserved1
        .u32(driver_id)
        .u32(0) // reserved2
}

/// A method's frame: its header, then the mandatory attributes `list`.
fn method_bytes(
    object_id: u16,
    method_id: u16,
    driver_id: u32,
    list: &[(u16, u16, u64)],
) -> Vec<u8> {
    let hdr = method_hdr(list.len() as u16, object_id, method_id, driver_id);
    attrs(hdr, list).0
}

/// One ib_uverbs_attr with all fields given.
fn attr_full(b: Bytes, id: u16, len: u16, flags: u16, attr_data: u16, data: u64) -> Bytes {
    b.u16(id).u16(len).u16(flags).u16(attr_data).u64(data)
}

/// The address of the `index`th output pointer a method framed.
fn ptr_of(m: &Method<'_>, index: usize) -> u64 {
    m.frame().attrs()[index].data
}

#[test]
fn invoke_write_method_is_byte_identical_to_the_frame_encoder() {
    let cmd = RegMr::new(5, 0x7f12_3456_7000, 1 << 20, 0x7).uhw_in(&SIW_UHW_IN);
    let req = request_bytes(&cmd);
    let (mut core, mut uhw) = ([0xffu8; 12], [0xffu8; 8]);
    let (core_addr, uhw_addr) = (core.as_ptr() as u64, uhw.as_ptr() as u64);
    let (m, outs) = Method::invoke_write(14, 9, &req, &SIW_UHW_IN, &mut core, &mut uhw);
    let expected =
        IoctlFrame::invoke_write(14, 9, &req, &SIW_UHW_IN, (core_addr, 12), (uhw_addr, 8)).unwrap();
    assert_eq!(m.as_bytes(), expected.as_bytes());
    assert!(outs.core.is_some() && outs.uhw.is_some());

    assert_eq!((core, uhw), ([0; 12], [0; 8]), "outputs zeroed when framed");
    // No responses: CORE_OUT and UHW_OUT are left out, as before.
    let (m, outs) = Method::invoke_write(14, 13, &[42, 0, 0, 0], &[], &mut [], &mut []);
    let b = attr(attr(ioctl_hdr(2, 14), 2, 8, 13), 0, 4, 42);
    assert_eq!(m.as_bytes(), &b.0[..]);
    assert!(outs.core.is_none() && outs.uhw.is_none());
}

#[test]
fn info_handles_method() {
    let mut q = InfoHandles::new(sys::UVERBS_OBJECT_MR, 64);
    let (m, _total) = q.method(14);
    // DEVICE, INFO_HANDLES
    let expected = method_bytes(
        0,
        1,
        14,
        &[
            (0, 8, 7),               // OBJECT_ID = UVERBS_OBJECT_MR, const inline
            (1, 4, ptr_of(&m, 1)),   // TOTAL_HANDLES: u32 out
            (2, 256, ptr_of(&m, 2)), // HANDLES_LIST: 64 u32 out
        ],
    );
    assert_eq!(m.as_bytes(), &expected[..]);
    assert_ne!(ptr_of(&m, 1), 0);
    assert_ne!(ptr_of(&m, 2), 0);
}

#[test]
fn query_port_method() {
    let mut q = QueryPort::new(1);
    let (m, _resp) = q.method(18);
    // DEVICE, QUERY_PORT, siw
    let expected = method_bytes(
        0,
        2,
        18,
        &[
            (0, 8, 1),              // PORT_NUM = 1, const inline (8 bytes, as CONST_IN demands)
            (1, 48, ptr_of(&m, 1)), // RESP: ib_uverbs_query_port_resp_ex
        ],
    );
    assert_eq!(m.as_bytes(), &expected[..]);
}

#[test]
fn query_context_method() {
    let mut q = QueryContext::new();
    let (m, _n, _cs) = q.method(14);
    // DEVICE, QUERY_CONTEXT
    let expected = method_bytes(
        0,
        4,
        14,
        &[
            (0, 4, ptr_of(&m, 0)), // NUM_COMP_VECTORS: u32 out
            (1, 8, ptr_of(&m, 1)), // CORE_SUPPORT: u64 out
        ],
    );
    assert_eq!(m.as_bytes(), &expected[..]);
}

#[test]
fn query_gid_entry_method() {
    let mut q = QueryGidEntry::new(1, 3);
    let (m, _entry) = q.method(14);
    // DEVICE, QUERY_GID_ENTRY
    let expected = method_bytes(
        0,
        6,
        14,
        &[
            (0, 8, 1),              // PORT = 1
            (1, 8, 3),              // GID_INDEX = 3
            (2, 4, 0),              // FLAGS: 4 bytes inline, 0
            (3, 32, ptr_of(&m, 3)), // RESP_ENTRY: ib_uverbs_gid_entry
        ],
    );
    assert_eq!(m.as_bytes(), &expected[..]);
}

#[test]
fn query_gid_table_method() {
    let mut q = QueryGidTable::new(3);
    let (m, _entries, _n) = q.method(14);
    // DEVICE, QUERY_GID_TABLE
    let expected = method_bytes(
        0,
        5,
        14,
        &[
            (0, 8, 32),             // ENTRY_SIZE = sizeof(ib_uverbs_gid_entry)
            (2, 96, ptr_of(&m, 1)), // RESP_ENTRIES: 3 entries out
            (3, 8, ptr_of(&m, 2)),  // RESP_NUM_ENTRIES: u64 out
        ],
    );
    assert_eq!(m.as_bytes(), &expected[..]);
}

#[test]
fn query_mr_method() {
    let mut q = QueryMr::new(0x2a);
    let (m, _outs) = q.method(14);
    // MR, QUERY_MR
    let expected = method_bytes(
        7,
        3,
        14,
        &[
            (0, 0, 0x2a),          // HANDLE: IDR, len 0, handle in data
            (1, 4, ptr_of(&m, 1)), // RESP_LKEY: u32 out
            (2, 4, ptr_of(&m, 2)), // RESP_RKEY: u32 out
            (3, 8, ptr_of(&m, 3)), // RESP_LENGTH: u64 out
            (4, 8, ptr_of(&m, 4)), // RESP_IOVA: u64 out
        ],
    );
    assert_eq!(m.as_bytes(), &expected[..]);
    let ptrs: Vec<u64> = (1..5).map(|i| ptr_of(&m, i)).collect();
    assert!(
        ptrs.windows(2).all(|w| w[0] != w[1]),
        "four distinct outputs: {ptrs:x?}"
    );
}

#[test]
fn every_attribute_kind_of_the_builder() {
    let big = [0x11u8; 12];
    let small = 0x0102_0304u32;
    let two = [5u32, 6];
    let three = [5u32, 6, 7];
    let mut out = 0u64;
    let mut uhw = [0u8; 16];
    let (out_addr, uhw_addr) = (&out as *const u64 as u64, uhw.as_ptr() as u64);
    let mut m = Method::new(sys::UVERBS_OBJECT_MR, 0x1234, 14);
    m.const_in(0, 0xdead_beef)
        .ptr_in(1, &small) // 4 bytes: inline
        .ptr_in(2, &big[..]) // 12 bytes: by pointer
        .enum_in(3, 2, &small) // elem_id 2 in attr_data's first byte
        .idr_in(4, 9)
        .idr_destroy(5, 10)
        .idr_array(6, &two) // 8 bytes: inline
        .idr_array(7, &three) // 12 bytes: by pointer
        .inline_in(8, 0x55u16)
        .uhw_in(&SIW_UHW_IN)
        .optional(); // UHW_IN optional
    let new = m.idr_new(9);
    let fd = m.fd_new(10);
    let o = m.ptr_out(11, &mut out);
    let u = m.uhw_out(&mut uhw);
    let _ = (new, fd, o, u);
    let d = driver_attr(5);
    assert_eq!(d, 0x1005);
    m.inline_in(d, 1u8);
    let mut b = method_hdr(15, 7, 0x1234, 14);
    b = attrs(
        b,
        &[
            (0, 8, 0xdead_beef),
            (1, 4, inline(&small.to_ne_bytes())),
            (2, 12, big.as_ptr() as u64),
        ],
    );
    b = attr_full(
        b,
        3,
        4,
        1,
        u16::from_ne_bytes([2, 0]),
        inline(&small.to_ne_bytes()),
    );
    b = attrs(
        b,
        &[
            (4, 0, 9),
            (5, 0, 10),
            (6, 8, inline(two.as_bytes())),
            (7, 12, three.as_ptr() as u64),
            (8, 2, 0x55),
        ],
    );
    b = attr_full(b, 0x1000, 8, 0, 0, inline(&SIW_UHW_IN)); // not mandatory
    b = attrs(
        b,
        &[
            (9, 0, 0),  // IDR new: the kernel writes the handle
            (10, 0, 0), // FD new: the kernel writes the descriptor
            (11, 8, out_addr),
            (0x1001, 16, uhw_addr),
            (0x1005, 1, 1),
        ],
    );
    assert_eq!(m.as_bytes(), &b.0[..]);
    assert_eq!(m.error(), None);
    // The 17th attribute does not fit: remembered, nothing panics.
    m.const_in(20, 0).const_in(21, 0);
    assert_eq!(m.error(), Some(crate::error::Errno::TOOBIG));
}

// ---- The data path's commands: both framings, field by field. ----

#[test]
fn create_comp_channel_both() {
    // 8 + 8 bytes in (4 words), the 4-byte fd out (1 word).
    response_only_both(&CreateCompChannel::new(), 17, 1, 4);
}

#[test]
fn create_cq_write_and_ioctl_rxe() {
    let cmd = CreateCq::new(16, 0xc0ff_ee00)
        .comp_vector(1)
        .comp_channel(9);
    let body = |b: Bytes, response: u64| {
        b.u64(response)
            .u64(0xc0ff_ee00) // user_handle
            .u32(16) // cqe
            .u32(1) // comp_vector
            .u32(9) // comp_channel
            .u32(0) // reserved
    };
    // 40 bytes in (10 words); 8 core + 16 rxe_create_cq_resp out (6 words).
    both_framings(
        &cmd,
        body,
        Framing {
            code: 18,
            in_words: 10,
            out_words: 6,
            resp_len: 24,
            core_in: 32,
            core_out: 8,
            // UHW_OUT: rxe_create_cq_resp
            uhw_out: 16,
        },
    );
    // No channel: -1, as libibverbs sends it.
    let none = request_bytes(&CreateCq::new(1, 0));
    assert_eq!(&none[24..28], &(-1i32).to_le_bytes());
}

#[test]
fn destroy_cq_and_qp_both() {
    for (cmd_code, bytes, resp_len) in [
        (20u32, request_bytes(&DestroyCq::new(6)), 8usize),
        (27, request_bytes(&DestroyQp::new(6)), 4),
    ] {
        assert_eq!(bytes, Bytes::default().u64(0).u32(6).u32(0).0);
        let expected = Bytes::default()
            .u32(cmd_code)
            .u16(6) // (8 + 16) / 4
            .u16((resp_len / 4) as u16)
            .u64(RESP)
            .u32(6)
            .u32(0);
        let framed = WriteFrame::new(cmd_code, &bytes, &[], RESP, resp_len).unwrap();
        assert_eq!(framed.as_bytes(), &expected.0[..]);
    }
    assert_eq!(write_frame(&DestroyCq::new(6), 8).len(), 24);
    let (frame, req) = ioctl_frame(&DestroyQp::new(6), 0);
    assert_eq!(
        frame,
        invoke_write(27, &[(0, 16, req.as_ptr() as u64), (1, 4, CORE_OUT)])
    );
}

#[test]
fn req_notify_cq_both() {
    let expected = Bytes::default().u32(23).u16(4).u16(0).u32(6).u32(1);
    assert_eq!(write_frame(&ReqNotifyCq::new(6, true), 0), expected.0);
    let (frame, _req) = ioctl_frame(&ReqNotifyCq::new(6, false), 0);
    assert_eq!(
        frame,
        invoke_write(
            23,
            &[(0, 8, 6), // {cq_handle 6, solicited_only 0} inline
        ]
        )
    );
}

fn cap() -> sys::ib_uverbs_qp_cap {
    sys::ib_uverbs_qp_cap {
        max_send_wr: 64,
        max_recv_wr: 32,
        max_send_sge: 2,
        max_recv_sge: 1,
        max_inline_data: 64,
    }
}

#[test]
fn create_qp_write_and_ioctl_rxe() {
    let cmd = CreateQp::new(QpType::Rc, 1, 2, 3, cap())
        .user_handle(0x77)
        .sq_sig_all(true);
    let body = |b: Bytes, response: u64| {
        b.u64(response)
            .u64(0x77) // user_handle
            .u32(1) // pd
            .u32(2) // send_cq
            .u32(3) // recv_cq
            .u32(0) // srq_handle
            .u32(64)
            .u32(32)
            .u32(2)
            .u32(1)
            .u32(64)
            .raw(&[1, 2, 0, 0]) // sq_sig_all, qp_type RC, is_srq, reserved
    };
    // 64 bytes in (16 words); 32 core + 32 rxe_create_qp_resp out (16 words).
    both_framings(
        &cmd,
        body,
        Framing {
            code: 24,
            in_words: 16,
            out_words: 16,
            resp_len: 64,
            core_in: 56,
            core_out: 32,
            uhw_out: 32,
        },
    );
}

/// rc_pingpong's RTR, as the kernel reads it: 8 + 112 bytes, no response.
#[test]
fn modify_qp_rtr_write_and_ioctl() {
    let dgid = [0xfe, 0x80, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8];
    let attr_rtr = QpAttr::rc_pingpong_rtr(dgid);
    let cmd = ModifyQp::checked(7, QpType::Rc, QpState::Init, &attr_rtr).unwrap();
    let dest = |b: Bytes, gid: [u8; 16], sgid: u8, hop: u8, global: u8, port: u8| {
        b.raw(&gid)
            .u32(0) // flow_label
            .u16(0) // dlid
            .u16(0) // reserved
            .raw(&[sgid, hop, 0, 0, 0, 0, global, port])
    };
    let mut e = Bytes::default().u32(26).u16(30).u16(0);
    e = dest(e, dgid, 1, 1, 1, 1);
    e = dest(e, [0; 16], 0, 0, 0, 0); // alt_dest
    e = e
        .u32(7) // qp_handle @64
        .u32(0x12_9181) // attr_mask @68
        .u32(0) // qkey
        .u32(0x1234) // rq_psn
        .u32(0) // sq_psn
        .u32(0x11) // dest_qp_num
        .u32(0) // qp_access_flags
        .u16(0) // pkey_index
        .u16(0) // alt_pkey_index
        // qp_state @96, cur_qp_state, path_mtu, path_mig_state,
        // en_sqd_async_notify, max_rd_atomic, max_dest_rd_atomic,
        // min_rnr_timer @103, port_num, timeout, retry_cnt, rnr_retry,
        // alt_port_num, alt_timeout, reserved[2]
        .raw(&[2, 0, 3, 0, 0, 0, 1, 12, 0, 0, 0, 0, 0, 0, 0, 0]);
    assert_eq!(write_frame(&cmd, 0), e.0);
    let (frame, req) = ioctl_frame(&cmd, 0);
    assert_eq!(req.len(), 112);
    assert_eq!(frame, invoke_write(26, &[(0, 112, req.as_ptr() as u64)]));
}

#[test]
fn query_qp_both() {
    let cmd = QueryQp::new(7, QpAttrMask::STATE | QpAttrMask::PORT);
    let expected = Bytes::default()
        .u32(25)
        .u16(6) // (8 + 16) / 4
        .u16(32) // 128 / 4
        .u64(RESP)
        .u32(7)
        .u32(0x21);
    assert_eq!(write_frame(&cmd, 128), expected.0);
    let (frame, req) = ioctl_frame(&cmd, 0);
    assert_eq!(
        frame,
        invoke_write(25, &[(0, 16, req.as_ptr() as u64), (1, 128, CORE_OUT)])
    );
}

#[test]
fn create_and_destroy_ah_both() {
    let dgid = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 192, 0, 2, 1];
    let cmd = CreateAh::roce(4, dgid, 1, 64, 1).user_handle(0x55);
    let body = |b: Bytes, response: u64| {
        b.u64(response)
            .u64(0x55) // user_handle
            .u32(4) // pd_handle
            .u32(0) // reserved
            .raw(&dgid) // grh.dgid
            .u32(0) // grh.flow_label
            .raw(&[1, 64, 0, 0]) // sgid_index, hop_limit, traffic_class, reserved
            .u16(0) // dlid
            .raw(&[0, 0, 0, 1, 1, 0]) // sl, src_path_bits, static_rate, is_global, port_num, reserved
    };
    // 64 bytes in (16 words); 4 core + 8 rxe_create_ah_resp out (3 words).
    both_framings(
        &cmd,
        body,
        Framing {
            code: 5,
            in_words: 16,
            out_words: 3,
            resp_len: 12,
            core_in: 56,
            core_out: 4,
            uhw_out: 8,
        },
    );

    handle_only_both(&DestroyAh::new(12), 8, 12);
}

/// ATTACH_MCAST and DETACH_MCAST: `{gid, qp_handle, mlid, reserved}`, 24
/// bytes, no response.
#[test]
fn attach_and_detach_mcast_both() {
    let gid = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 239, 1, 2, 3];
    let body = |b: Bytes| b.raw(&gid).u32(9).u16(0xc001).u16(0);
    let attach = AttachMcast::new(9, gid, 0xc001);
    let detach = DetachMcast::new(9, gid, 0xc001);
    for (code, frame) in [(30, write_frame(&attach, 0)), (31, write_frame(&detach, 0))] {
        // 8 + 24 bytes in; nothing out.
        assert_eq!(frame, body(Bytes::default().u32(code).u16(8).u16(0)).0);
    }
    let (frame, req) = ioctl_frame(&attach, 0);
    assert_eq!(req, body(Bytes::default()).0);
    assert_eq!(frame, invoke_write(30, &[(0, 24, req.as_ptr() as u64)]));
    let (frame, req) = ioctl_frame(&detach, 0);
    assert_eq!(frame, invoke_write(31, &[(0, 24, req.as_ptr() as u64)]));
}

/// The doorbell: 32 bytes fixed at creation, response pointing at its own
/// 4-byte buffer, wqe_size 56, no work request.
#[test]
fn post_send_doorbell_bytes() {
    let bell = PostSendDoorbell::new(0x2a);
    let bytes = bell.as_bytes().to_vec();
    let resp = u64::from_le_bytes(bytes[8..16].try_into().unwrap());
    let expected = Bytes::default()
        .u32(28) // POST_SEND
        .u16(8) // 32 / 4
        .u16(1) // bad_wr
        .u64(resp)
        .u32(0x2a) // qp_handle
        .u32(0) // wr_count
        .u32(0) // sge_count
        .u32(56); // wqe_size = sizeof(ib_uverbs_send_wr)
    assert_eq!(bytes, expected.0);
    assert_ne!(resp, 0);
    assert_eq!(resp % 4, 0);
    // Moving the doorbell moves neither the frame nor its response.
    let moved = bell;
    assert_eq!(moved.as_bytes(), &bytes[..]);
    assert_eq!(DOORBELL_LEN, 32);
}

// ---- The data path's native methods. ----

use crate::method::{CqCreate, CqDestroy, QpCreate, QpDestroy};

#[test]
fn cq_create_method_rxe() {
    let mut uhw = [0u8; 16];
    let mut q = CqCreate::new(16, 0xc0ff_ee00, &mut uhw)
        .comp_channel(9)
        .comp_vector(1)
        .event_fd(5);
    let (m, _outs) = q.method(14);
    let mut b = method_hdr(8, 3, 0, 14); // CQ, CQ_CREATE, rxe
    b = attrs(
        b,
        &[
            (0, 0, 0),             // HANDLE: IDR new
            (1, 4, 16),            // CQE: u32 inline
            (2, 8, 0xc0ff_ee00),   // USER_HANDLE: u64 inline
            (3, 0, 9),             // COMP_CHANNEL: FD 9
            (4, 4, 1),             // COMP_VECTOR
            (6, 4, ptr_of(&m, 5)), // RESP_CQE: u32 out
        ],
    );
    b = attr_full(b, 7, 0, 0, 0, 5); // EVENT_FD: optional
    b = attr(b, 0x1001, 16, ptr_of(&m, 7)); // UHW_OUT: rxe_create_cq_resp
    assert_eq!(m.as_bytes(), &b.0[..]);
}

#[test]
fn cq_create_method_minimal_and_flags() {
    let mut uhw = [0u8; 16];
    let mut q = CqCreate::new(1, 0, &mut uhw).flags(sys::IB_UVERBS_CQ_FLAGS_IGNORE_OVERRUN);
    let (m, _outs) = q.method(14);
    let expected = method_bytes(
        3,
        0,
        14,
        &[
            (0, 0, 0),
            (1, 4, 1),
            (2, 8, 0),
            (4, 4, 0), // no channel: COMP_CHANNEL left out
            (5, 4, 2), // FLAGS: IGNORE_OVERRUN
            (6, 4, ptr_of(&m, 5)),
            (0x1001, 16, ptr_of(&m, 6)),
        ],
    );
    assert_eq!(m.as_bytes(), &expected[..]);
}

#[test]
fn qp_create_method_rxe() {
    let mut uhw = [0u8; 32];
    let mut q = QpCreate::new(QpType::Ud, 1, 2, 3, cap(), &mut uhw)
        .user_handle(0x77)
        .sq_sig_all(true);
    let (m, _outs) = q.method(14);
    let cap_bytes = cap().as_bytes().to_vec();
    // QP, QP_CREATE, rxe
    let expected = method_bytes(
        4,
        0,
        14,
        &[
            (0, 0, 0),                    // HANDLE: IDR new
            (2, 0, 1),                    // PD_HANDLE
            (4, 0, 2),                    // SEND_CQ_HANDLE
            (5, 0, 3),                    // RECV_CQ_HANDLE
            (7, 8, 0x77),                 // USER_HANDLE
            (8, 20, ptr_of(&m, 5)),       // CAP: 20 bytes by pointer
            (9, 8, 4),                    // TYPE: const UD
            (10, 4, 1 << 12),             // FLAGS: SQ_SIG_ALL
            (13, 20, ptr_of(&m, 8)),      // RESP_CAP
            (14, 4, ptr_of(&m, 9)),       // RESP_QP_NUM
            (0x1001, 32, ptr_of(&m, 10)), // UHW_OUT: rxe_create_qp_resp
        ],
    );
    assert_eq!(m.as_bytes(), &expected[..]);
    // CAP points at the builder's copy of the capacities.
    // SAFETY: the pointer is the builder's `cap` field, alive while `m` is.
    let pointed = unsafe { std::slice::from_raw_parts(ptr_of(&m, 5) as usize as *const u8, 20) };
    assert_eq!(pointed, &cap_bytes[..]);
}

#[test]
fn cq_and_qp_destroy_methods() {
    let mut d = CqDestroy::new(6);
    let (m, _resp) = d.method(14);
    let b = attrs(method_hdr(2, 3, 1, 14), &[(0, 0, 6), (1, 8, ptr_of(&m, 1))]);
    assert_eq!(m.as_bytes(), &b.0[..]);
    let mut d = QpDestroy::new(6);
    let (m, _resp) = d.method(14);
    let b = attrs(method_hdr(2, 4, 1, 14), &[(0, 0, 6), (1, 4, ptr_of(&m, 1))]);
    assert_eq!(m.as_bytes(), &b.0[..]);
}

#[test]
fn reg_dmabuf_mr_method() {
    use crate::method::RegDmabufMr;
    let mut q = RegDmabufMr::new(5, 0x1000, 0x20_0000, 0x7f00_0000_1000, 9, 0x7);
    let (m, _outs) = q.method(14);
    // MR, REG_DMABUF_MR, in libibverbs 44's order (ibv_cmd_reg_dmabuf_mr)
    let expected = method_bytes(
        7,
        4,
        14,
        &[
            (0, 0, 0),                // HANDLE: IDR new, the kernel writes it
            (7, 4, ptr_of(&m, 1)),    // RESP_LKEY: u32 out
            (8, 4, ptr_of(&m, 2)),    // RESP_RKEY: u32 out
            (1, 0, 5),                // PD_HANDLE: IDR, handle in data
            (2, 8, 0x1000),           // OFFSET: u64 inline
            (3, 8, 0x20_0000),        // LENGTH: u64 inline
            (4, 8, 0x7f00_0000_1000), // IOVA: u64 inline
            (5, 4, 9),                // FD: u32 inline (a PTR_IN, not an FD attribute)
            (6, 4, 0x7),              // ACCESS_FLAGS: u32 inline
        ],
    );
    assert_eq!(m.as_bytes(), &expected[..]);
    assert_ne!(ptr_of(&m, 1), ptr_of(&m, 2), "two distinct outputs");
}

/// The native REG_MR (Linux 6.17): attributes in id order, no DMA handle,
/// no descriptor, no driver data.
#[test]
fn reg_mr_method() {
    use crate::method::RegMr;
    let mut q = RegMr::new(5, 0x7f12_3456_7010, 0x20_0000, 0x7f12_3456_7010, 0x7);
    let (m, _outs) = q.method(14);
    // MR (7), REG_MR (5), driver 14 (siw)
    let expected = method_bytes(
        7,
        5,
        14,
        &[
            (0, 0, 0),                // HANDLE: IDR new, the kernel writes it
            (1, 0, 5),                // PD_HANDLE: IDR, handle in data
            (3, 8, 0x7f12_3456_7010), // IOVA: u64 inline
            (4, 8, 0x7f12_3456_7010), // ADDR: u64 inline
            (5, 8, 0x20_0000),        // LENGTH: u64 inline
            (6, 4, 0x7),              // ACCESS_FLAGS: u32 inline
            (9, 4, ptr_of(&m, 6)),    // RESP_LKEY: u32 out
            (10, 4, ptr_of(&m, 7)),   // RESP_RKEY: u32 out
        ],
    );
    assert_eq!(m.as_bytes(), &expected[..]);
    assert_eq!(m.as_bytes().len(), 24 + 8 * 16);
    assert_ne!(ptr_of(&m, 6), ptr_of(&m, 7), "two distinct outputs");
    // Every attribute mandatory: DMA_HANDLE (2), FD (7) and FD_OFFSET (8)
    // are absent, not sent as optional.
    let ids: Vec<u16> = m.frame().attrs().iter().map(|a| a.attr_id).collect();
    assert_eq!(ids, [0, 1, 3, 4, 5, 6, 9, 10]);
}

// ---- Shared receive queues: CREATE/MODIFY/QUERY/DESTROY_SRQ. ----

#[test]
fn create_srq_write_and_ioctl_rxe() {
    let cmd = CreateSrq::new(3, 0x5a5a_0001, 64, 2).srq_limit(8);
    let body = |b: Bytes, response: u64| {
        b.u64(response)
            .u64(0x5a5a_0001) // user_handle
            .u32(3) // pd_handle
            .u32(64) // max_wr
            .u32(2) // max_sge
            .u32(8) // srq_limit
    };
    // 40 bytes in (10 words); 16 core + 24 rxe_create_srq_resp out (10 words).
    both_framings(
        &cmd,
        body,
        Framing {
            code: 32,
            in_words: 10,
            out_words: 10,
            resp_len: 40,
            core_in: 32,
            core_out: 16,
            uhw_out: 24,
        },
    );
}

#[test]
fn modify_srq_limit_carries_rxe_driver_data() {
    let uhw = [0u8; 8];
    let cmd = ModifySrq::limit(6, 4).uhw_in(&uhw);
    // No response: 8 header + 16 core + 8 driver bytes (8 words).
    let expected = Bytes::default()
        .u32(33)
        .u16(8)
        .u16(0)
        .u32(6) // srq_handle
        .u32(SRQ_LIMIT) // attr_mask
        .u32(0) // max_wr
        .u32(4) // srq_limit
        .u64(0); // rxe_modify_srq_cmd: no mminfo
    assert_eq!(write_frame(&cmd, 0), expected.0);
    assert_eq!(WriteCommand::uhw_in(&ModifySrq::limit(6, 0)), &[] as &[u8]);
}

#[test]
fn query_and_destroy_srq_both() {
    let query = request_bytes(&QuerySrq::new(6));
    assert_eq!(query, Bytes::default().u64(0).u32(6).u32(0).0);
    let expected = Bytes::default()
        .u32(34)
        .u16(6)
        .u16(4)
        .u64(RESP)
        .u32(6)
        .u32(0);
    assert_eq!(write_frame(&QuerySrq::new(6), 16), expected.0);
    let expected = Bytes::default()
        .u32(35)
        .u16(6)
        .u16(1)
        .u64(RESP)
        .u32(6)
        .u32(0);
    assert_eq!(write_frame(&DestroySrq::new(6), 4), expected.0);
    let (frame, req) = ioctl_frame(&DestroySrq::new(6), 0);
    assert_eq!(
        frame,
        invoke_write(35, &[(0, 16, req.as_ptr() as u64), (1, 4, CORE_OUT)])
    );
}

/// An extended command's write() frame: `ib_uverbs_cmd_hdr` counting 64-bit
/// words (without the headers), then `ib_uverbs_ex_cmd_hdr`.
fn ex_write_frame<C: WriteCommand>(cmd: &C, uhw_out_len: usize) -> Vec<u8> {
    let req = request_bytes(cmd);
    let core_out_len = size_of::<C::Response>();
    WriteFrame::default()
        .encode_extended(
            C::CODE,
            &req,
            cmd.uhw_in(),
            RESP,
            (core_out_len, uhw_out_len),
        )
        .unwrap()
        .to_vec()
}

#[test]
fn query_device_ex_both() {
    let code = 0x8000_0001; // FLAG_EXTENDED | EX_QUERY_DEVICE
    let expected = Bytes::default()
        .u32(code)
        .u16(1) // in_words: the 8-byte request, in u64 words
        .u16(38) // out_words: 304 / 8
        .u64(RESP) // ex_hdr.response
        .u16(0) // provider_in_words
        .u16(0) // provider_out_words
        .u32(0) // cmd_hdr_reserved
        .u32(0) // comp_mask
        .u32(0); // reserved
    assert_eq!(ex_write_frame(&QueryDeviceEx::new(), 0), expected.0);
    // ioctl: the same request without any header, inline.
    let (frame, req) = ioctl_frame(&QueryDeviceEx::new(), 0);
    assert_eq!(req, [0u8; 8]);
    assert_eq!(frame, invoke_write(code, &[(0, 8, 0), (1, 304, CORE_OUT)]));
}

#[test]
fn extended_framing_counts_words_of_eight_and_refuses_the_rest() {
    use crate::error::Errno;
    let mut frame = WriteFrame::default();
    // UHW in and out are counted in the ex header, after the core words.
    let bytes = frame
        .encode_extended(0x8000_0003, &[1; 32], &[2; 8], RESP, (16, 24))
        .unwrap();
    let expected = Bytes::default()
        .u32(0x8000_0003)
        .u16(4)
        .u16(2)
        .u64(RESP)
        .u16(1)
        .u16(3)
        .u32(0);
    let mut expected = expected.0;
    expected.extend([1; 32]);
    expected.extend([2; 8]);
    assert_eq!(bytes, &expected[..]);
    // No response room: the kernel wants a null response pointer.
    let bytes = frame
        .encode_extended(0x8000_0001, &[0; 8], &[], RESP, (0, 0))
        .unwrap();
    assert_eq!(&bytes[8..16], &[0; 8]);
    for (core_in, uhw_in, outs) in [
        (&[0u8; 12][..], &[][..], (8, 0)),
        (&[0; 8], &[0; 4], (8, 0)),
        (&[0; 8], &[], (12, 0)),
        (&[0; 8], &[], (8, 4)),
    ] {
        assert_eq!(
            frame.encode_extended(0x8000_0001, core_in, uhw_in, RESP, outs),
            Err(Errno::INVAL)
        );
    }
    assert_eq!(
        frame.encode_extended(0x8000_0001, &[0; 256], &[], RESP, (8, 0)),
        Err(Errno::TOOBIG)
    );
}

#[test]
fn resize_cq_both() {
    // {response, cq_handle 7, cqe 100}; rxe's mminfo (16 bytes) as UHW out.
    both_framings(
        &ResizeCq::new(7, 100),
        |b, response| b.u64(response).u32(7).u32(100),
        Framing {
            code: 19,
            in_words: 6,  // (8 + 16) / 4
            out_words: 6, // (8 + 16) / 4: resize_cq_resp, then rxe's answer
            resp_len: 24,
            core_in: 16,
            core_out: 8,
            uhw_out: 16,
        },
    );
}

#[test]
fn alloc_mw_write() {
    let expected = Bytes::default()
        .u32(14) // ALLOC_MW
        .u16(6) // (8 + 16) / 4
        .u16(2) // 8 / 4: mw_handle, rkey
        .u64(RESP)
        .u32(5) // pd_handle
        .u8(2) // mw_type: IB_MW_TYPE_2
        .u8(0)
        .u8(0)
        .u8(0); // reserved
    assert_eq!(write_frame(&AllocMw::new(5, 2), 8), expected.0);
}

#[test]
fn alloc_mw_ioctl() {
    let (frame, req) = ioctl_frame(&AllocMw::new(5, 1), 0);
    // The request (response 0, pd_handle, type 1, reserved) by pointer.
    assert_eq!(req, Bytes::default().u64(0).u32(5).u32(1).0);
    assert_eq!(
        frame,
        invoke_write(14, &[(0, 16, req.as_ptr() as u64), (1, 8, CORE_OUT)])
    );
}

#[test]
fn dealloc_mw_both() {
    handle_only_both(&DeallocMw::new(9), 16, 9);
}
