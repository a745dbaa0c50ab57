//! A forked child holds copies of its parent's contexts, PDs and MRs: it must
//! never send a command on them (over ioctl the kernel would let it destroy
//! the parent's objects), and dropping them there must touch neither the
//! kernel nor the fork tracker (whose lock a parent thread may have held at
//! fork time). On a recording fake kernel: the child checks its own copy of
//! the fake's log and reports through its exit code.

#[macro_use]
mod common;

use std::time::Duration;

use common::{
    anon, blocking_advisor, fake_context, fork_safety_with, page_size, rc_qp_in_init,
    rxe_context_over,
};
use uverbs::device::OpenOptions;
use uverbs::error::{Errno, Op};
use uverbs::fork::ForkMode;
use uverbs::mr::ReregOutcome;
use uverbs::qp::{QpAttr, QpState};
use uverbs::transport::RecordingTransport;
use uverbs::wr::{Payload, RecvWr, SendOp, SendWr, Sge, WorkCompletion};
use uverbs::{AccessFlags, Error};

/// How long a child may run, and the blocking advisor may block.
const LIMIT: Duration = Duration::from_secs(10);

/// A page-aligned mapping of its own, safe to mark `MADV_DONTFORK`.
fn page() -> memmap2::MmapMut {
    anon(page_size())
}

fn is_foreign(e: &Error) -> bool {
    matches!(e, Error::ForeignProcess { .. }) && e.errno() == Some(Errno::ACCESS)
}

#[test]
fn a_child_sends_nothing_and_its_drops_leave_the_parents_objects() {
    let (fake, ctx) = fake_context(&OpenOptions::new());
    let pd = ctx.alloc_pd().unwrap();
    let pd2 = ctx.alloc_pd().unwrap();
    // Own pages: with fork safety forced on (UVERBS_FORK_SAFE=force), a
    // registered heap buffer's page would be missing in the child, with
    // whatever else malloc put on it.
    let mut buf = page();
    // SAFETY: `buf` outlives the MR.
    let mut mr =
        unsafe { pd.reg_mr(buf.as_mut_ptr(), buf.len(), AccessFlags::LOCAL_WRITE) }.unwrap();
    let sent = fake.count();

    let code = in_child!(LIMIT, {
        assert!(!ctx.is_owned_by_this_process());
        let e = mr.set_pd(&pd2).unwrap_err();
        assert_eq!(
            (e.outcome(), e.errno()),
            (ReregOutcome::Input, Errno::ACCESS),
            "{e}"
        );
        assert!(is_foreign(&ctx.alloc_pd().unwrap_err()));
        assert!(is_foreign(&ctx.query_device().unwrap_err()));
        // SAFETY: never registered: the call is refused first.
        let reg = unsafe { pd.reg_mr(buf.as_mut_ptr(), buf.len(), AccessFlags::LOCAL_WRITE) };
        assert!(is_foreign(&reg.unwrap_err()));
        let err = mr.dereg().unwrap_err();
        assert!(is_foreign(&err.error), "{}", err.error);
        drop(err); // drops the MR copy again: still nothing
        let err = pd2.dealloc().unwrap_err();
        assert!(is_foreign(&err.error));
        drop(err);
        drop((pd, ctx));
        i32::from(fake.count() != sent)
    });
    assert_eq!(
        code, 0,
        "the child sent commands (or an assertion failed: 99)"
    );
    assert!(ctx.is_owned_by_this_process());
    mr.set_access(AccessFlags::LOCAL_WRITE).unwrap();
    mr.dereg().unwrap();
    assert_eq!((fake.live_mrs(), fake.live_pds()), (0, 2));
}

#[test]
fn a_child_that_unwinds_through_the_objects_sends_nothing() {
    let (fake, ctx) = fake_context(&OpenOptions::new());
    let pd = ctx.alloc_pd().unwrap();
    let mr = pd.reg_buffer(page(), AccessFlags::LOCAL_WRITE).unwrap();
    let sent = fake.count();
    let code = in_child!(LIMIT, {
        let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _owned = (mr, pd);
            panic!("the child unwinds while owning copies of the parent's objects");
        }));
        assert!(unwound.is_err());
        i32::from(fake.count() != sent)
    });
    assert_eq!(code, 0);
    assert_eq!((fake.live_mrs(), fake.live_pds()), (1, 1));
}

#[test]
fn a_child_forked_while_a_thread_holds_the_tracker_lock_can_drop_its_copies() {
    let (advisor, blocker) = blocking_advisor(LIMIT);
    let fork_safety = fork_safety_with(ForkMode::Enabled, advisor);
    let (_fake, ctx) = fake_context(&OpenOptions::new().fork_safety(fork_safety));
    let pd = ctx.alloc_pd().unwrap();
    let mr = pd
        .reg_buffer(vec![0u8; 4096], AccessFlags::LOCAL_WRITE)
        .unwrap();

    blocker.arm();
    let blocked = {
        let pd = ctx.alloc_pd().unwrap();
        std::thread::spawn(move || {
            pd.reg_buffer(vec![0u8; 4096], AccessFlags::LOCAL_WRITE)
                .is_ok()
        })
    };
    assert!(
        blocker.entered(),
        "the registering thread reached the advisor"
    );
    // That thread now holds the tracker's lock inside madvise.
    let code = in_child!(LIMIT, {
        drop(mr);
        drop(pd);
        0
    });
    blocker.release();
    assert!(blocked.join().unwrap());
    assert_eq!(code, 0);
}

/// Every data-path operation of a forked child on its parent's rxe CQ and
/// QP (rings served by the fake) is refused with `ForeignProcess` before
/// any lock, ring or command: poll, req_notify, ack_events, post_send,
/// post_recv, modify, refresh_state, attach_mcast, detach_mcast (before
/// their input checks too: the QP is RC). The child sends nothing; the
/// parent's objects keep working afterwards.
#[test]
fn a_child_polls_arms_posts_and_modifies_nothing_on_the_parents_rings() {
    let fake = std::sync::Arc::new(RecordingTransport::new());
    fake.serve_rings();
    let ctx = rxe_context_over(&fake);
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(8, None).unwrap();
    let qp = rc_qp_in_init(&pd, &cq);
    let sge = [Sge {
        addr: 0x1000,
        length: 8,
        lkey: 1,
    }];
    let group: uverbs::device::Gid = "ff12:0000:0000:0000:0000:0000:0075:7662".parse().unwrap();
    let sent = fake.count();
    let code = in_child!(LIMIT, {
        let op_of = |r: Result<(), Error>| match r {
            Err(Error::ForeignProcess { op, .. }) => Some(op),
            _ => None,
        };
        let mut wc = [WorkCompletion::default(); 4];
        let send = SendWr::new(2, SendOp::Send { imm: None }, Payload::Sges(&sge));
        let got = [
            op_of(cq.poll(&mut wc).map(|_| ())),
            op_of(cq.req_notify(false)),
            op_of(cq.ack_events(0)),
            // SAFETY: refused before anything is written.
            op_of(unsafe {
                qp.post_recv(&[RecvWr {
                    wr_id: 1,
                    sges: &sge,
                }])
            }),
            // SAFETY: as above; an empty batch is refused as well.
            op_of(unsafe { qp.post_recv(&[]) }),
            // SAFETY: as above.
            op_of(unsafe { qp.post_send(&[send]) }),
            // SAFETY: as above.
            op_of(unsafe { qp.post_send(&[]) }),
            op_of(qp.modify(&QpAttr::new().state(QpState::Reset))),
            op_of(qp.refresh_state().map(|_| ())),
            op_of(qp.attach_mcast(group, 0)),
            op_of(qp.detach_mcast(group, 0)),
        ];
        let want = [
            Op::PollCq,
            Op::ReqNotifyCq,
            Op::AckCqEvents,
            Op::PostRecv,
            Op::PostRecv,
            Op::PostSend,
            Op::PostSend,
            Op::ModifyQp,
            Op::QueryQp,
            Op::AttachMcast,
            Op::DetachMcast,
        ];
        match got.iter().zip(want).position(|(g, w)| *g != Some(w)) {
            Some(i) => i as i32 + 1,
            None => i32::from(fake.count() != sent) * 50,
        }
    });
    assert_eq!(
        code, 0,
        "check {code} failed in the child (50: it sent a command)"
    );
    let mut wc = [WorkCompletion::default(); 4];
    assert_eq!(cq.poll(&mut wc).unwrap(), 0);
    // SAFETY: the fake kernel touches no memory.
    unsafe {
        qp.post_recv(&[RecvWr {
            wr_id: 1,
            sges: &sge,
        }])
    }
    .unwrap();
    qp.modify(&QpAttr::new().state(QpState::Reset)).unwrap();
}
