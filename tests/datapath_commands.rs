//! The data path's typed commands against the recording fake kernel: what
//! reaches the kernel, what comes back (core response and the rxe UHW
//! answer), and that a bad MODIFY_QP is refused before anything is sent.

mod common;

use std::io::Read;
use std::os::fd::{AsFd, FromRawFd, OwnedFd};
use std::sync::Arc;

use uverbs::command::*;
use uverbs::transport::RecordingTransport;
use uverbs::{uverbs_uapi as sys, AccessFlags, Context};
use zerocopy::FromBytes;

use common::{rc_to_rts, rxe_context_over, RC_PATH_ATTRS};

fn fake_ctx() -> (Arc<RecordingTransport>, Context) {
    let fake = Arc::new(RecordingTransport::new());
    let ctx = rxe_context_over(&fake);
    (fake, ctx)
}

fn cap() -> sys::ib_uverbs_qp_cap {
    sys::ib_uverbs_qp_cap {
        max_send_wr: 10,
        max_recv_wr: 10,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    }
}

/// A PD and a CQ of `cqe` entries with `user_handle`, rxe's UHW answer
/// for the CQ written into `cq_uhw`.
fn pd_and_cq(
    ctx: &Context,
    cqe: u32,
    user_handle: u64,
    cq_uhw: &mut [u8],
) -> (u32, sys::ib_uverbs_create_cq_resp) {
    // SAFETY (each execute of these tests): the fake kernel touches only
    // the buffers given; these objects are owned by nothing else.
    let pd = unsafe { ctx.execute(&AllocPd::new(), &mut []) }
        .unwrap()
        .pd_handle;
    let cq = unsafe { ctx.execute(&CreateCq::new(cqe, user_handle), cq_uhw) }.unwrap();
    (pd, cq)
}

/// An RC QP in `pd` with `cq` for both queues and [`cap`], rxe's UHW
/// answer written into `qp_uhw`.
fn rc_qp(
    ctx: &Context,
    pd: u32,
    cq: &sys::ib_uverbs_create_cq_resp,
    qp_uhw: &mut [u8],
) -> sys::ib_uverbs_create_qp_resp {
    let create = CreateQp::new(QpType::Rc, pd, cq.cq_handle, cq.cq_handle, cap());
    // SAFETY: as in `pd_and_cq`.
    unsafe { ctx.execute(&create, qp_uhw) }.unwrap()
}

/// CQ and QP through `Context::execute` with rxe's UHW buffers: the
/// answers decode, the rings' `mminfo` come back RQ first, and destroying
/// a CQ in use is `EBUSY`.
#[test]
fn cq_and_qp_lifecycle_with_rxe_answers() {
    let (fake, ctx) = fake_ctx();
    let mut cq_uhw = [0u8; 16];
    let (pd, cq) = pd_and_cq(&ctx, 16, 0xabc, &mut cq_uhw);
    assert_eq!(cq.cqe, 31, "rxe rounds 16 + 1 up to 32 slots");
    let cq_mi = sys::rxe_create_cq_resp::read_from_bytes(&cq_uhw[..])
        .unwrap()
        .mi;
    assert!(cq_mi.offset != 0 && cq_mi.size != 0, "{cq_mi:?}");
    let sent = fake.commands().last().cloned().unwrap();
    assert_eq!((sent.core_out_len, sent.uhw_out_len), (8, 16));
    let req: sys::ib_uverbs_create_cq = sent.request().unwrap();
    assert_eq!(
        (req.cqe, req.user_handle, req.comp_channel),
        (16, 0xabc, -1)
    );

    let mut qp_uhw = [0u8; 32];
    let qp = rc_qp(&ctx, pd, &cq, &mut qp_uhw);
    assert_eq!(qp.max_send_wr, 15);
    let rings = sys::rxe_create_qp_resp::read_from_bytes(&qp_uhw[..]).unwrap();
    assert!(
        rings.rq_mi.offset < rings.sq_mi.offset,
        "RQ first: {rings:?}"
    );

    // SAFETY (each execute below): as in `pd_and_cq`.
    let busy = unsafe { ctx.execute(&DestroyCq::new(cq.cq_handle), &mut []) };
    assert_eq!(busy.unwrap_err().errno(), Some(uverbs::error::Errno::BUSY));
    unsafe { ctx.execute(&DestroyQp::new(qp.qp_handle), &mut []) }.unwrap();
    unsafe { ctx.execute(&DestroyCq::new(cq.cq_handle), &mut []) }.unwrap();
}

/// RESET -> INIT -> RTR -> RTS with masks derived from the fields; the
/// fake's QUERY_QP then says RTS. A transition the table refuses sends
/// nothing.
#[test]
fn modify_qp_walks_to_rts_and_refuses_before_sending() {
    let (fake, ctx) = fake_ctx();
    let (pd, cq) = pd_and_cq(&ctx, 4, 0, &mut [0; 16]);
    let qp = rc_qp(&ctx, pd, &cq, &mut [0; 32]);
    let h = qp.qp_handle;

    let before = fake.count();
    let skip = QpAttr::new().state(QpState::Rts).sq_psn(1);
    let refused = ModifyQp::checked(h, QpType::Rc, QpState::Reset, &skip);
    assert!(matches!(
        refused,
        Err(QpTransitionError::InvalidTransition { .. })
    ));
    assert_eq!(
        fake.count(),
        before,
        "nothing sent for a refused transition"
    );

    let steps = rc_to_rts(
        AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE,
        1,
        Mtu::Mtu1024,
        qp.qpn,
        QpAttr::roce_dest(uverbs::device::Gid::default(), 1, 1, 1),
    );
    let mut state = QpState::Reset;
    for ((_, attr), mask) in steps.into_iter().zip([0x39, 0x12_9181, 0x1_2E01]) {
        let cmd = ModifyQp::checked(h, QpType::Rc, state, &attr).unwrap();
        // SAFETY: as in `pd_and_cq`.
        unsafe { ctx.execute(&cmd, &mut []) }.unwrap();
        let sent: sys::ib_uverbs_modify_qp = fake.commands().last().unwrap().request().unwrap();
        assert_eq!((sent.qp_handle, sent.attr_mask), (h, mask));
        state = attr.target_state().unwrap();
    }
    // SAFETY: as in `pd_and_cq`.
    let q = QueryQp::new(h, QpAttrMask::STATE);
    let answer = unsafe { ctx.execute(&q, &mut []) }.unwrap();
    assert_eq!(QpState::from_raw(answer.qp_state), Some(QpState::Rts));
}

/// Ringing the doorbell is one write() of the bytes prepared at creation:
/// into a pipe, they arrive exactly, twice in a row.
#[test]
fn doorbell_rings_with_one_write_of_the_prepared_bytes() {
    let bell = PostSendDoorbell::new(3);
    let mut fds = [0; 2];
    // SAFETY: pipe() writes two new descriptors into the array.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    // SAFETY: both descriptors are new and owned by nothing else.
    let (reader, writer) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    let mut reader = std::fs::File::from(reader);
    // SAFETY: a pipe is not a uverbs file: no device runs any WQE.
    unsafe { bell.ring(writer.as_fd()) }.unwrap();
    unsafe { bell.ring(writer.as_fd()) }.unwrap();
    drop(writer);
    let mut got = Vec::new();
    reader.read_to_end(&mut got).unwrap();
    let mut expected = bell.as_bytes().to_vec();
    expected.extend_from_slice(bell.as_bytes());
    assert_eq!(got, expected);
    assert_eq!(got.len(), 2 * DOORBELL_LEN);
}

/// `QueuePair::query` (and `OwnedQp::query`) over the fake, which answers
/// what the MODIFY_QPs set as rxe does: the request carries the QP's
/// handle and the caller's mask (the capacities' bit too), and each asked
/// attribute reads back through its getter; what was not asked reads
/// `None`. The state asked is remembered.
#[test]
fn query_reads_back_what_modify_set() {
    let fake = Arc::new(RecordingTransport::new());
    fake.serve_rings();
    let ctx = rxe_context_over(&fake);
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(8, None).unwrap();
    let qp = pd
        .create_qp(&uverbs::QpInit::new(QpType::Rc, &cq, &cq))
        .unwrap();
    let dest = QpAttr::roce_dest(
        uverbs::device::Gid::from_raw([0xfe, 0x80, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 9]),
        1,
        64,
        1,
    );
    let [(_, init), (_, rtr), (_, rts)] =
        rc_to_rts(AccessFlags::REMOTE_WRITE, 1, Mtu::Mtu1024, 0x77, dest);
    for attr in [init, rtr.rq_psn(0x12_3456), rts.sq_psn(0xab_cdef)] {
        qp.modify(&attr).unwrap();
    }
    let asked = RC_PATH_ATTRS | QpAttrMask::ACCESS_FLAGS | QpAttrMask::CAP;
    let got = qp.query(asked).unwrap();
    let sent = fake.commands().last().cloned().unwrap();
    assert_eq!(sent.code, sys::IB_USER_VERBS_CMD_QUERY_QP);
    let mut expected = qp.handle().to_ne_bytes().to_vec();
    expected.extend_from_slice(&0x19_1fa9u32.to_ne_bytes());
    assert_eq!(asked.bits(), 0x19_1fa9);
    assert_eq!(&sent.core_in[8..], &expected[..], "handle, then the mask");
    assert_eq!(sent.core_out_len, size_of::<sys::ib_uverbs_query_qp_resp>());
    assert_eq!(got.get_state(), Some(QpState::Rts));
    assert_eq!(got.get_dest_qpn(), Some(0x77));
    assert_eq!(
        (got.get_rq_psn(), got.get_sq_psn()),
        (Some(0x12_3456), Some(0xab_cdef))
    );
    assert_eq!(
        (got.get_path_mtu(), got.get_port()),
        (Some(Mtu::Mtu1024), Some(1))
    );
    assert_eq!(
        (got.get_timeout(), got.get_retry_cnt(), got.get_rnr_retry()),
        (Some(14), Some(7), Some(7))
    );
    assert_eq!(got.get_access_flags(), Some(AccessFlags::REMOTE_WRITE));
    assert_eq!(got.get_av(), Some(dest));
    // Not asked: not answered, whatever the kernel filled.
    assert_eq!((got.get_qkey(), got.get_min_rnr_timer()), (None, None));
    assert_eq!(got.get_max_dest_rd_atomic(), None);
    // The capacities have no place in the attributes: QueuePair::caps.
    assert!(!got.mask().contains(QpAttrMask::CAP));
    assert_eq!(got.mask(), asked - QpAttrMask::CAP);

    // The state asked is remembered: the fake's QP fails behind our back.
    // SAFETY: a MODIFY_QP of our own QP hands the fake no memory.
    let to_err = ModifyQp::new(qp.handle(), &QpAttr::new().state(QpState::Err));
    unsafe { ctx.execute(&to_err, &mut []) }.unwrap();
    assert_eq!(qp.state(), QpState::Rts, "not known yet");
    let got = qp.query(QpAttrMask::STATE).unwrap();
    assert_eq!(
        (got.get_state(), qp.state()),
        (Some(QpState::Err), QpState::Err)
    );

    // A UD QP's Q_Key (udaddy's question), through an OwnedQp.
    let ud = pd
        .create_qp(&uverbs::QpInit::new(QpType::Ud, &cq, &cq))
        .unwrap();
    let owned = uverbs::OwnedQp::<uverbs::BufferMr<Vec<u8>>>::new(ud).unwrap();
    let init = QpAttr::new()
        .state(QpState::Init)
        .pkey_index(0)
        .port(1)
        .qkey(0x1111_1111);
    owned.modify(&init).unwrap();
    let got = owned.query(QpAttrMask::QKEY).unwrap();
    assert_eq!((got.get_qkey(), got.get_state()), (Some(0x1111_1111), None));
}
