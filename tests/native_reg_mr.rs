//! Memory registration by the native `UVERBS_METHOD_REG_MR` (Linux 6.17)
//! with rdma-core's fallback, on the recording fake kernel: a kernel
//! without the method is asked once per context, then gets write commands
//! only; a kernel with it gets the exact native frame, whose answer makes
//! the region; any other refusal is the registration's answer, not retried;
//! transports and drivers that do not go native never send it.

use std::sync::Arc;

use uverbs::device::{DriverId, OpenOptions};
use uverbs::error::{Errno, Op};
use uverbs::transport::{RecordedMethod, RecordingTransport, TransportKind};
use uverbs::{uverbs_uapi as sys, AccessFlags, Context, MemoryRegion, ProtectionDomain};

const REG: u32 = sys::IB_USER_VERBS_CMD_REG_MR;
const DEREG: u32 = sys::IB_USER_VERBS_CMD_DEREG_MR;
const MR: u16 = sys::UVERBS_OBJECT_MR;
const REG_MR: u16 = sys::UVERBS_METHOD_REG_MR;
const RW: AccessFlags = AccessFlags::LOCAL_WRITE.union(AccessFlags::REMOTE_WRITE);

/// A context of `driver` over `fake` (which reports its own kind), and a PD.
fn context(fake: &Arc<RecordingTransport>, driver: DriverId) -> (Context, ProtectionDomain) {
    let ctx = Context::with_transport(
        "fake0",
        Some(driver),
        Box::new(fake.clone()),
        &OpenOptions::new(),
    )
    .expect("a context over the fake");
    let pd = ctx.alloc_pd().expect("ALLOC_PD on the fake");
    (ctx, pd)
}

/// Registers `buf` (the fake never touches memory).
fn reg(pd: &ProtectionDomain, buf: &mut [u8], access: AccessFlags) -> MemoryRegion {
    try_reg(pd, buf, access).expect("registration on the fake")
}

fn try_reg(
    pd: &ProtectionDomain,
    buf: &mut [u8],
    access: AccessFlags,
) -> Result<MemoryRegion, uverbs::Error> {
    // SAFETY: `buf` outlives every region of the tests (they are dropped
    // first); the fake kernel never reads or writes it.
    unsafe { pd.reg_mr(buf.as_mut_ptr(), buf.len(), access) }
}

/// The region's handle and keys are the ones the fake kernel holds for it,
/// over `buf`.
fn assert_is_the_kernels(fake: &RecordingTransport, mr: &MemoryRegion, buf: &[u8]) {
    let attrs = fake.mr_attrs(mr.handle()).expect("a live MR of the fake");
    let addr = buf.as_ptr() as u64;
    assert_eq!(attrs, (mr.lkey(), mr.rkey(), buf.len() as u64, addr));
    assert_eq!((mr.addr(), mr.length()), (addr, buf.len()));
}

fn reg_mr_methods(fake: &RecordingTransport) -> Vec<RecordedMethod> {
    fake.methods()
        .into_iter()
        .filter(|m| (m.object_id, m.method_id) == (MR, REG_MR))
        .collect()
}

/// (a) A kernel before 6.17 (the fake by default) answers the method
/// `EPROTONOSUPPORT`: one try, then every registration of the context, by
/// every entry point, is the write command, and the regions are the
/// kernel's. A new context asks again.
#[test]
fn a_kernel_without_the_method_is_asked_once_per_context() {
    let fake = Arc::new(RecordingTransport::new());
    let (ctx, pd) = context(&fake, DriverId::RXE);
    assert!(!ctx.reg_mr_method_refused());
    let mut bufs = vec![vec![0u8; 8192]; 3];
    let mrs: Vec<MemoryRegion> = bufs.iter_mut().map(|b| reg(&pd, b, RW)).collect();
    assert!(ctx.reg_mr_method_refused(), "the refusal is remembered");
    assert_eq!(reg_mr_methods(&fake).len(), 1, "one native try");
    assert_eq!(fake.count_of(REG), 3, "then the write command, each time");
    for (mr, buf) in mrs.iter().zip(&bufs) {
        assert_is_the_kernels(&fake, mr, buf);
    }
    // The owned-buffer forms share the path: write commands only.
    let owned = pd
        .reg_buffer(vec![0u8; 4096].into_boxed_slice(), AccessFlags::LOCAL_WRITE)
        .expect("reg_buffer on the fake");
    let remote = pd
        .reg_remote_buffer(vec![0u8; 4096].into_boxed_slice(), RW)
        .expect("reg_remote_buffer on the fake");
    assert_eq!(reg_mr_methods(&fake).len(), 1);
    assert_eq!(fake.count_of(REG), 5);
    assert_eq!(fake.live_mrs(), 5, "nothing leaked, nothing made twice");
    drop((owned, remote, mrs));
    assert_eq!((fake.live_mrs(), fake.count_of(DEREG)), (0, 5));

    // The memory is the context's: another context tries once more.
    let (ctx2, pd2) = context(&fake, DriverId::RXE);
    let mut buf = vec![0u8; 4096];
    let mr = reg(&pd2, &mut buf, RW);
    assert_is_the_kernels(&fake, &mr, &buf);
    assert_eq!(reg_mr_methods(&fake).len(), 2);
    assert!(ctx2.reg_mr_method_refused() && ctx.reg_mr_method_refused());
}

/// `ENOTTY` (no ioctl framework) falls back and is remembered like
/// `EPROTONOSUPPORT`.
#[test]
fn enotty_falls_back_like_an_unknown_method() {
    let fake = Arc::new(RecordingTransport::new());
    fake.serve_reg_mr_method();
    fake.fail_next_method(MR, REG_MR, Errno::NOTTY);
    let (ctx, pd) = context(&fake, DriverId::RXE);
    let mut a = vec![0u8; 4096];
    let mut b = vec![0u8; 4096];
    let (mr_a, mr_b) = (reg(&pd, &mut a, RW), reg(&pd, &mut b, RW));
    assert!(ctx.reg_mr_method_refused());
    assert_eq!((reg_mr_methods(&fake).len(), fake.count_of(REG)), (1, 2));
    assert_is_the_kernels(&fake, &mr_a, &a);
    assert_is_the_kernels(&fake, &mr_b, &b);
}

/// (b) A kernel with the method: the frame, attribute for attribute, and
/// the region made of its answer; no write command, and the region is
/// deregistered as any other (`DEREG_MR`).
#[test]
fn a_kernel_with_the_method_gets_the_native_frame() {
    let fake = Arc::new(RecordingTransport::new());
    fake.serve_reg_mr_method();
    let (ctx, pd) = context(&fake, DriverId::RXE);
    let mut buf = vec![0u8; 3 * 4096];
    let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ;
    let mr = reg(&pd, &mut buf, access);
    assert_eq!(fake.count_of(REG), 0, "no write command");
    assert!(!ctx.reg_mr_method_refused());
    assert_is_the_kernels(&fake, &mr, &buf);

    let methods = reg_mr_methods(&fake);
    let [m] = &methods[..] else {
        panic!("one REG_MR method: {methods:?}")
    };
    assert_eq!(m.driver_id, sys::RDMA_DRIVER_RXE);
    // The frame's exact bytes: header, then each attribute (id, len,
    // flags MANDATORY, attr_data 0, data); the outputs point at this
    // side's key fields, so their addresses are taken from the frame.
    let out_ptr = |id: u16| m.attr(id).expect("an output attribute").data;
    let (lkey_ptr, rkey_ptr) = (
        out_ptr(sys::UVERBS_ATTR_REG_MR_RESP_LKEY),
        out_ptr(sys::UVERBS_ATTR_REG_MR_RESP_RKEY),
    );
    assert!(lkey_ptr != 0 && rkey_ptr != 0 && lkey_ptr != rkey_ptr);
    let addr = buf.as_ptr() as u64;
    let attrs: [(u16, u16, u64); 8] = [
        (sys::UVERBS_ATTR_REG_MR_HANDLE, 0, 0),
        (sys::UVERBS_ATTR_REG_MR_PD_HANDLE, 0, pd.handle().into()),
        (sys::UVERBS_ATTR_REG_MR_IOVA, 8, addr),
        (sys::UVERBS_ATTR_REG_MR_ADDR, 8, addr),
        (sys::UVERBS_ATTR_REG_MR_LENGTH, 8, buf.len() as u64),
        (
            sys::UVERBS_ATTR_REG_MR_ACCESS_FLAGS,
            4,
            access.bits().into(),
        ),
        (sys::UVERBS_ATTR_REG_MR_RESP_LKEY, 4, lkey_ptr),
        (sys::UVERBS_ATTR_REG_MR_RESP_RKEY, 4, rkey_ptr),
    ];
    let mut expected = Vec::new();
    expected.extend_from_slice(&(24u16 + 16 * 8).to_ne_bytes()); // length
    expected.extend_from_slice(&MR.to_ne_bytes());
    expected.extend_from_slice(&REG_MR.to_ne_bytes());
    expected.extend_from_slice(&8u16.to_ne_bytes()); // num_attrs
    expected.extend_from_slice(&0u64.to_ne_bytes()); // reserved1
    expected.extend_from_slice(&sys::RDMA_DRIVER_RXE.to_ne_bytes());
    expected.extend_from_slice(&0u32.to_ne_bytes()); // reserved2
    for (id, len, data) in attrs {
        expected.extend_from_slice(&id.to_ne_bytes());
        expected.extend_from_slice(&len.to_ne_bytes());
        expected.extend_from_slice(&sys::UVERBS_ATTR_F_MANDATORY.to_ne_bytes());
        expected.extend_from_slice(&0u16.to_ne_bytes()); // attr_data
        expected.extend_from_slice(&data.to_ne_bytes());
    }
    assert_eq!(m.frame, expected);

    // Every later registration is native too; each its own region.
    let mut buf2 = vec![0u8; 4096];
    let mr2 = reg(&pd, &mut buf2, RW);
    assert_is_the_kernels(&fake, &mr2, &buf2);
    assert_ne!(mr.handle(), mr2.handle());
    assert_eq!((reg_mr_methods(&fake).len(), fake.count_of(REG)), (2, 0));
    drop((mr, mr2));
    assert_eq!((fake.live_mrs(), fake.count_of(DEREG)), (0, 2));
}

/// siw's REG_MR carries a driver request and answer (`siw_ureq_reg_mr`,
/// `siw_uresp_reg_mr`) as a write command; the native method carries no
/// driver data at all, and the write command after a refusal still does.
#[test]
fn siw_sends_no_driver_data_natively_and_its_own_in_the_write_command() {
    let fake = Arc::new(RecordingTransport::new());
    fake.serve_reg_mr_method();
    let (_ctx, pd) = context(&fake, DriverId::SIW);
    let mut buf = vec![0u8; 4096];
    let mr = reg(&pd, &mut buf, RW);
    assert_is_the_kernels(&fake, &mr, &buf);
    let methods = reg_mr_methods(&fake);
    let ids: Vec<u16> = methods[0].attrs.iter().map(|a| a.attr_id).collect();
    assert!(!ids.contains(&sys::UVERBS_ATTR_UHW_IN) && !ids.contains(&sys::UVERBS_ATTR_UHW_OUT));
    assert_eq!(methods[0].driver_id, sys::RDMA_DRIVER_SIW);

    let old = Arc::new(RecordingTransport::new());
    let (_ctx, pd) = context(&old, DriverId::SIW);
    let mr = reg(&pd, &mut buf, RW);
    assert_is_the_kernels(&old, &mr, &buf);
    let cmd = old
        .commands()
        .into_iter()
        .find(|c| c.code == REG)
        .expect("the write command after the refusal");
    assert_eq!((cmd.uhw_in, cmd.uhw_out_len), (vec![0u8; 8], 8));
}

/// (c) Any other answer to the method is the registration's, typed as the
/// write command's would be (`Error::Os` of `reg_mr`); nothing is retried
/// or remembered, and nothing is left registered.
#[test]
fn other_refusals_are_the_answer_and_not_retried() {
    for errno in [
        Errno::INVAL,
        Errno::OPNOTSUPP,
        Errno::FAULT,
        Errno::NOMEM,
        Errno::PERM,
    ] {
        let fake = Arc::new(RecordingTransport::new());
        fake.serve_reg_mr_method();
        fake.fail_next_method(MR, REG_MR, errno);
        let (ctx, pd) = context(&fake, DriverId::RXE);
        let mut buf = vec![0u8; 4096];
        let e = try_reg(&pd, &mut buf, RW).unwrap_err();
        assert!(
            matches!(e, uverbs::Error::Os { op: Op::RegMr, .. }),
            "{errno:?}: {e:?}"
        );
        assert_eq!((e.op(), e.errno()), (Op::RegMr, Some(errno)));
        assert_eq!(fake.count_of(REG), 0, "{errno:?}: no write command");
        assert_eq!(fake.live_mrs(), 0);
        assert!(!ctx.reg_mr_method_refused(), "{errno:?}: not remembered");
        // The next registration asks the method again, and it works.
        let mr = reg(&pd, &mut buf, RW);
        assert_is_the_kernels(&fake, &mr, &buf);
        assert_eq!((reg_mr_methods(&fake).len(), fake.count_of(REG)), (2, 0));
    }
}

/// The same errno from the write command and from the method is the same
/// error.
#[test]
fn a_refusal_is_the_same_error_by_either_interface() {
    let native = Arc::new(RecordingTransport::new());
    native.serve_reg_mr_method();
    native.fail_next_method(MR, REG_MR, Errno::FAULT);
    let write = Arc::new(RecordingTransport::new());
    write.fail_next(REG, Errno::FAULT);
    let mut buf = vec![0u8; 4096];
    let errors: Vec<String> = [&native, &write]
        .into_iter()
        .map(|fake| {
            let (_ctx, pd) = context(fake, DriverId::RXE);
            format!("{:?}", try_reg(&pd, &mut buf, RW).unwrap_err())
        })
        .collect();
    assert_eq!(errors[0], errors[1]);
    assert_eq!(reg_mr_methods(&write).len(), 1, "refused, then the command");
}

/// The legacy write() transport and Auto's write+methods send the write
/// command (by `write()`, the cheaper framing) even to a kernel that has
/// the method, as for CQs and QPs; so does a driver this crate has no
/// provider for (its `reg_user_mr` may need the udata the method lacks).
#[test]
fn write_transports_and_unknown_drivers_never_send_the_method() {
    for (kind, driver) in [
        (TransportKind::Write, DriverId::RXE),
        (TransportKind::WriteWithMethods, DriverId::RXE),
        (TransportKind::Ioctl, DriverId(4)),
    ] {
        let fake = Arc::new(RecordingTransport::with_kind(kind));
        fake.serve_reg_mr_method();
        let (ctx, pd) = context(&fake, driver);
        let mut buf = vec![0u8; 4096];
        let mr = reg(&pd, &mut buf, RW);
        assert_is_the_kernels(&fake, &mr, &buf);
        assert_eq!(reg_mr_methods(&fake).len(), 0, "{kind:?} {driver:?}");
        assert_eq!(fake.count_of(REG), 1);
        assert!(!ctx.reg_mr_method_refused());
    }
    // The ioctl transport of a known driver does.
    let fake = Arc::new(RecordingTransport::with_kind(TransportKind::Ioctl));
    fake.serve_reg_mr_method();
    let (_ctx, pd) = context(&fake, DriverId::RXE);
    let mut buf = vec![0u8; 4096];
    let mr = reg(&pd, &mut buf, RW);
    assert_is_the_kernels(&fake, &mr, &buf);
    assert_eq!((reg_mr_methods(&fake).len(), fake.count_of(REG)), (1, 0));
}
