//! Native-first creation of CQs and QPs, against the recording fake kernel
//! with its rings served (so creation succeeds end to end): which framing
//! each transport uses, the fallback to the write command exactly when
//! rdma-core falls back, that both framings give the same object, and the
//! explicit destroys (EBUSY hands the CQ back, usable).

mod common;

use std::sync::Arc;

use uverbs::cq::{CqDestroyed, CreatePath};
use uverbs::device::DriverId;
use uverbs::error::{Errno, Op};
use uverbs::transport::{RecordedMethod, RecordingTransport, TransportKind};
use uverbs::wr::WorkCompletion;
use uverbs::{uverbs_uapi as sys, Context, Error, ProtectionDomain, QpInit, QpType};
use zerocopy::FromBytes;

use common::{destroy_cq_refused_busy, rxe_context_over};

/// A context over a fake reporting `kind`, rxe, rings served, and a PD.
fn fake(kind: TransportKind) -> (Arc<RecordingTransport>, Context, ProtectionDomain) {
    let fake = Arc::new(RecordingTransport::with_kind(kind));
    fake.serve_rings();
    let ctx = rxe_context_over(&fake);
    let pd = ctx.alloc_pd().unwrap();
    (fake, ctx, pd)
}

fn last_method(fake: &RecordingTransport, object: u16, method: u16) -> RecordedMethod {
    fake.methods()
        .into_iter()
        .rev()
        .find(|m| (m.object_id, m.method_id) == (object, method))
        .unwrap_or_else(|| panic!("no method {object}/{method} was sent"))
}

fn input_u32(m: &RecordedMethod, attr: u16) -> u32 {
    u32::read_from_bytes(&m.attr(attr).unwrap().input[..]).unwrap()
}

fn input_u64(m: &RecordedMethod, attr: u16) -> u64 {
    u64::read_from_bytes(&m.attr(attr).unwrap().input[..]).unwrap()
}

const CQ_CREATE: (u16, u16) = (sys::UVERBS_OBJECT_CQ, sys::UVERBS_METHOD_CQ_CREATE);
const CQ_DESTROY: (u16, u16) = (sys::UVERBS_OBJECT_CQ, sys::UVERBS_METHOD_CQ_DESTROY);
const QP_CREATE: (u16, u16) = (sys::UVERBS_OBJECT_QP, sys::UVERBS_METHOD_QP_CREATE);
const QP_DESTROY: (u16, u16) = (sys::UVERBS_OBJECT_QP, sys::UVERBS_METHOD_QP_DESTROY);

fn methods_of(fake: &RecordingTransport, (object, method): (u16, u16)) -> usize {
    fake.count_of_method(object, method)
}

/// Over the ioctl transport a CQ and a QP are created and destroyed with
/// the native methods only: no write command CREATE_/DESTROY_CQ/QP. The
/// frames carry what was asked; the answers (handle, cqe, caps, qpn) are
/// the method's outputs.
#[test]
fn the_ioctl_transport_creates_and_destroys_natively() {
    let (fake, ctx, pd) = fake(TransportKind::Ioctl);
    let cq = ctx.create_cq(16, None).unwrap();
    assert_eq!(cq.create_path(), CreatePath::NativeMethod);
    assert_eq!(
        cq.cqe(),
        31,
        "RESP_CQE: 16 + 1 rounded up to 32 slots, minus one"
    );
    let m = last_method(&fake, CQ_CREATE.0, CQ_CREATE.1);
    assert_eq!(m.driver_id, DriverId::RXE.0);
    assert_eq!(input_u32(&m, sys::UVERBS_ATTR_CREATE_CQ_CQE), 16);
    assert_eq!(
        input_u64(&m, sys::UVERBS_ATTR_CREATE_CQ_USER_HANDLE),
        cq.event_id()
    );
    assert_eq!(input_u32(&m, sys::UVERBS_ATTR_CREATE_CQ_COMP_VECTOR), 0);
    assert!(m.attr(sys::UVERBS_ATTR_CREATE_CQ_COMP_CHANNEL).is_none());
    assert_eq!(
        m.attr(sys::UVERBS_ATTR_UHW_OUT).map(|a| a.len),
        Some(16),
        "room for rxe_create_cq_resp"
    );

    let mut init = QpInit::new(QpType::Rc, &cq, &cq);
    init.max_send_wr = 10;
    init.max_inline = 64;
    init.sq_sig_all = true;
    let qp = pd.create_qp(&init).unwrap();
    assert_eq!(qp.create_path(), CreatePath::NativeMethod);
    let m = last_method(&fake, QP_CREATE.0, QP_CREATE.1);
    let cap = sys::ib_uverbs_qp_cap::read_from_bytes(
        &m.attr(sys::UVERBS_ATTR_CREATE_QP_CAP).unwrap().input[..],
    )
    .unwrap();
    assert_eq!((cap.max_send_wr, cap.max_inline_data), (10, 64));
    let handle_of = |attr| m.attr(attr).unwrap().data;
    assert_eq!(
        handle_of(sys::UVERBS_ATTR_CREATE_QP_PD_HANDLE),
        pd.handle().into()
    );
    assert_eq!(
        handle_of(sys::UVERBS_ATTR_CREATE_QP_SEND_CQ_HANDLE),
        cq.handle().into()
    );
    assert_eq!(
        input_u32(&m, sys::UVERBS_ATTR_CREATE_QP_FLAGS),
        sys::IB_UVERBS_QP_CREATE_SQ_SIG_ALL
    );
    assert_eq!(qp.caps().max_send_wr, 15, "RESP_CAP");
    assert_eq!(qp.caps().max_inline, 64, "RESP_CAP");
    assert_eq!(qp.qp_num(), 0x10 + qp.handle(), "RESP_QP_NUM");

    drop(qp);
    drop(cq);
    assert_eq!(fake.live_cqs_qps(), (0, 0), "both destroyed");
    assert_sent(&fake, 1, 0);
}

/// Each of the native methods CQ_CREATE, CQ_DESTROY, QP_CREATE and
/// QP_DESTROY was sent `methods` times, each of the write commands
/// CREATE_CQ, DESTROY_CQ, CREATE_QP and DESTROY_QP `writes` times.
fn assert_sent(fake: &RecordingTransport, methods: usize, writes: usize) {
    for m in [CQ_CREATE, CQ_DESTROY, QP_CREATE, QP_DESTROY] {
        assert_eq!(methods_of(fake, m), methods, "method {m:?}");
    }
    for code in [
        sys::IB_USER_VERBS_CMD_CREATE_CQ,
        sys::IB_USER_VERBS_CMD_DESTROY_CQ,
        sys::IB_USER_VERBS_CMD_CREATE_QP,
        sys::IB_USER_VERBS_CMD_DESTROY_QP,
    ] {
        assert_eq!(fake.count_of(code), writes, "write command {code}");
    }
}

/// Over `kind`, a CQ and an RC QP are created and destroyed by the write
/// commands only, no native method. Returns the fake and its context.
fn created_and_destroyed_by_write_commands(
    kind: TransportKind,
) -> (Arc<RecordingTransport>, Context) {
    let (fake, ctx, pd) = fake(kind);
    let cq = ctx.create_cq(16, None).unwrap();
    let qp = pd.create_qp(&QpInit::new(QpType::Rc, &cq, &cq)).unwrap();
    assert_eq!(cq.create_path(), CreatePath::WriteCommand);
    assert_eq!(qp.create_path(), CreatePath::WriteCommand);
    assert_eq!(cq.cqe(), 31);
    drop(qp);
    drop(cq);
    assert_eq!(fake.live_cqs_qps(), (0, 0));
    assert_sent(&fake, 0, 1);
    (fake, ctx)
}

/// Over the legacy write() transport: the write commands only, no method.
#[test]
fn the_write_transport_creates_and_destroys_with_write_commands() {
    created_and_destroyed_by_write_commands(TransportKind::Write);
}

/// Auto's write+methods: creation and destruction by the write commands
/// (write() is the cheaper framing), queries a write command answers less
/// fully by the native methods (QUERY_PORT's extended attributes).
#[test]
fn write_with_methods_creates_by_write_command_and_queries_by_method() {
    let (fake, ctx) = created_and_destroyed_by_write_commands(TransportKind::WriteWithMethods);
    assert_eq!(ctx.transport_kind().to_string(), "write+methods");
    let _ = ctx.query_port(1);
    assert_eq!(
        methods_of(
            &fake,
            (sys::UVERBS_OBJECT_DEVICE, sys::UVERBS_METHOD_QUERY_PORT)
        ),
        1,
        "QUERY_PORT goes to the native method"
    );
    assert_eq!(fake.count_of(sys::IB_USER_VERBS_CMD_QUERY_PORT), 0);
}

/// When the kernel refuses the native method itself (EPROTONOSUPPORT: the
/// method or a mandatory attribute unknown; ENOTTY: no ioctl framework),
/// the write command follows, and gives the same object: same caps, the
/// rings mapped, destroyed with the write command.
#[test]
fn a_refused_method_falls_back_to_the_write_command() {
    for errno in [Errno::PROTONOSUPPORT, Errno::NOTTY] {
        let (fake, ctx, pd) = fake(TransportKind::Ioctl);
        let native_cq = ctx.create_cq(16, None).unwrap();
        let native_qp = pd
            .create_qp(&QpInit::new(QpType::Rc, &native_cq, &native_cq))
            .unwrap();

        fake.fail_next_method(CQ_CREATE.0, CQ_CREATE.1, errno);
        let cq = ctx.create_cq(16, None).unwrap();
        assert_eq!(cq.create_path(), CreatePath::WriteCommand, "{errno:?}");
        assert_eq!(cq.cqe(), native_cq.cqe());
        fake.fail_next_method(QP_CREATE.0, QP_CREATE.1, errno);
        let qp = pd.create_qp(&QpInit::new(QpType::Rc, &cq, &cq)).unwrap();
        assert_eq!(qp.create_path(), CreatePath::WriteCommand, "{errno:?}");
        assert_eq!(qp.caps(), native_qp.caps(), "{errno:?}: same driver answer");
        assert_eq!(methods_of(&fake, CQ_CREATE), 2, "tried natively first");
        assert_eq!(fake.count_of(sys::IB_USER_VERBS_CMD_CREATE_CQ), 1);
        assert_eq!(fake.count_of(sys::IB_USER_VERBS_CMD_CREATE_QP), 1);

        drop((qp, cq));
        assert_eq!(fake.count_of(sys::IB_USER_VERBS_CMD_DESTROY_QP), 1);
        assert_eq!(fake.count_of(sys::IB_USER_VERBS_CMD_DESTROY_CQ), 1);
        assert_eq!(methods_of(&fake, CQ_DESTROY), 0, "native CQ still alive");
        drop((native_qp, native_cq));
        assert_eq!(methods_of(&fake, CQ_DESTROY), 1);
        assert_eq!(fake.live_cqs_qps(), (0, 0));
    }
}

/// Any other refusal is the kernel's answer, as in rdma-core (which falls
/// back on ENOTTY and EPROTONOSUPPORT only): EOPNOTSUPP (the driver refused
/// something the method asked), ENOMEM, EINVAL come back as the typed
/// error, and no write command is tried.
#[test]
fn other_refusals_are_the_answer_and_do_not_fall_back() {
    for errno in [Errno::OPNOTSUPP, Errno::NOMEM, Errno::INVAL] {
        let (fake, ctx, pd) = fake(TransportKind::Ioctl);
        fake.fail_next_method(CQ_CREATE.0, CQ_CREATE.1, errno);
        let err = ctx.create_cq(16, None).unwrap_err();
        assert_eq!(
            (err.op(), err.errno()),
            (Op::CreateCq, Some(errno)),
            "{err}"
        );
        assert!(err.to_string().starts_with("create_cq"), "{err}");
        assert_eq!(fake.count_of(sys::IB_USER_VERBS_CMD_CREATE_CQ), 0);

        let cq = ctx.create_cq(16, None).unwrap();
        fake.fail_next_method(QP_CREATE.0, QP_CREATE.1, errno);
        let err = pd
            .create_qp(&QpInit::new(QpType::Rc, &cq, &cq))
            .unwrap_err();
        assert_eq!(
            (err.op(), err.errno()),
            (Op::CreateQp, Some(errno)),
            "{err}"
        );
        assert_eq!(fake.count_of(sys::IB_USER_VERBS_CMD_CREATE_QP), 0);
        drop(cq);
        assert_eq!(fake.live_cqs_qps(), (0, 0), "{errno:?}");
    }
}

/// Explicit destroy of a CQ a QP uses: the kernel's EBUSY, typed, with the
/// CQ handed back intact (same handle, still polls); after the QP's own
/// explicit destroy the CQ's destroy succeeds, exactly once (the drop
/// sends nothing more). Both framings.
#[test]
fn destroying_a_cq_in_use_is_ebusy_and_hands_it_back_usable() {
    for kind in [TransportKind::Ioctl, TransportKind::Write] {
        let (fake, ctx, pd) = fake(kind);
        let cq = ctx.create_cq(8, None).unwrap();
        let qp = pd.create_qp(&QpInit::new(QpType::Rc, &cq, &cq)).unwrap();
        let cq = destroy_cq_refused_busy(cq, &format!("{kind}"));
        let mut wc = [WorkCompletion::default(); 2];
        assert_eq!(cq.poll(&mut wc).unwrap(), 0, "{kind}: the CQ still polls");
        assert_eq!(fake.live_cqs_qps(), (1, 1));

        assert_eq!(qp.destroy().unwrap(), 0, "{kind}: no async events");
        let done = cq.destroy().unwrap();
        assert_eq!(
            done,
            CqDestroyed {
                comp_events_reported: 0,
                async_events_reported: 0,
                events_received: 0,
                events_acked: 0
            }
        );
        assert_eq!(fake.live_cqs_qps(), (0, 0));
        let destroys = match kind {
            TransportKind::Write => fake.count_of(sys::IB_USER_VERBS_CMD_DESTROY_CQ),
            _ => methods_of(&fake, CQ_DESTROY),
        };
        assert_eq!(
            destroys, 2,
            "{kind}: the refused one and the real one, no third"
        );
    }
}

/// The counts the kernel answers DESTROY_CQ with come back from
/// `destroy`: events the kernel reported but this process never acked
/// show as `unacked()`, and nothing waits or panics.
#[test]
fn destroy_reports_the_kernels_event_counts() {
    for kind in [TransportKind::Ioctl, TransportKind::Write] {
        let (fake, ctx, _pd) = fake(kind);
        let cq = ctx.create_cq(8, None).unwrap();
        fake.report_cq_events(cq.handle(), 3, 1);
        let done = cq.destroy().unwrap();
        assert_eq!(
            (done.comp_events_reported, done.async_events_reported),
            (3, 1),
            "{kind}"
        );
        assert_eq!((done.events_received, done.events_acked), (0, 0));
        assert_eq!(done.unacked(), 3);
    }
}

/// A refused explicit QP destroy hands the QP back, usable (it still
/// modifies); its drop then destroys it.
#[test]
fn a_refused_qp_destroy_hands_it_back() {
    let (fake, ctx, pd) = fake(TransportKind::Ioctl);
    let cq = ctx.create_cq(8, None).unwrap();
    let qp = pd.create_qp(&QpInit::new(QpType::Rc, &cq, &cq)).unwrap();
    fake.fail_next_method(QP_DESTROY.0, QP_DESTROY.1, Errno::IO);
    let err = qp.destroy().unwrap_err();
    assert_eq!(err.error.errno(), Some(Errno::IO));
    assert_eq!(err.error.op(), Op::DestroyQp);
    let qp = err.qp;
    let init = uverbs::qp::QpAttr::new()
        .state(uverbs::qp::QpState::Init)
        .pkey_index(0)
        .port(1)
        .access_flags(uverbs::AccessFlags::LOCAL_WRITE);
    qp.modify(&init).unwrap();
    assert_eq!(fake.live_cqs_qps(), (1, 1));
    drop(qp);
    assert_eq!(fake.live_cqs_qps(), (1, 0));
    assert_eq!(methods_of(&fake, QP_DESTROY), 2);
}

/// Linux 6.1's rxe answers CREATE_QP with the capacities asked for while
/// its rings hold up to the next power of two minus one: `caps()` says what
/// the rings hold, as on 6.12, whose answer is the rings' size; and the
/// receive ring takes exactly that many before `QueueFull`.
#[test]
fn caps_are_what_the_rings_hold_when_the_kernel_answers_what_was_asked() {
    for as_asked in [false, true] {
        let (fake, ctx, pd) = fake(TransportKind::Write);
        if as_asked {
            fake.answer_caps_as_asked();
        }
        let cq = ctx.create_cq(16, None).unwrap();
        let init = QpInit::new(QpType::Rc, &cq, &cq)
            .max_send_wr(5)
            .max_recv_wr(9);
        let qp = pd.create_qp(&init).unwrap();
        let caps = qp.caps();
        assert_eq!(
            (caps.max_send_wr, caps.max_recv_wr),
            (7, 15),
            "answered as asked: {as_asked}"
        );
        // Receives are posted from INIT on.
        qp.modify(
            &uverbs::qp::QpAttr::new()
                .state(uverbs::qp::QpState::Init)
                .pkey_index(0)
                .port(1)
                .access_flags(uverbs::AccessFlags::LOCAL_WRITE),
        )
        .unwrap();
        let mut buf = vec![0u8; 64];
        // SAFETY: `buf` outlives the MR (dropped after it below).
        let mr = unsafe {
            pd.reg_mr(
                buf.as_mut_ptr(),
                buf.len(),
                uverbs::AccessFlags::LOCAL_WRITE,
            )
        }
        .unwrap();
        let sge = [uverbs::wr::Sge {
            addr: buf.as_ptr() as u64,
            length: 8,
            lkey: mr.lkey(),
        }];
        for i in 0..15 {
            let wr = uverbs::wr::RecvWr {
                wr_id: i,
                sges: &sge,
            };
            // SAFETY: nothing consumes the fake's receive ring; `buf`
            // outlives the QP.
            unsafe { qp.post_recv(&[wr]) }.unwrap_or_else(|e| panic!("receive {i}: {e}"));
        }
        let wr = uverbs::wr::RecvWr {
            wr_id: 15,
            sges: &sge,
        };
        // SAFETY: as above.
        let full = unsafe { qp.post_recv(&[wr]) }.unwrap_err();
        assert!(
            matches!(&full, Error::Post { why: source, .. } if matches!(**source, uverbs::wr::PostError::QueueFull { .. })),
            "{full}"
        );
        drop(qp);
        drop(mr);
    }
}
