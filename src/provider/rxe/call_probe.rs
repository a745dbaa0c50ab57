//! Instruction-count probes of the whole public calls on rxe
//! (`CompletionQueue::poll`, `QueuePair::post_recv` and
//! `post_recv_exclusive`: process check, locks, QP state, ring), where
//! [`ir_probe`](super::ir_probe) counts the ring code alone. The context
//! runs over the recording fake, whose rings are memfd mappings; the
//! kernel's side of each ring is [`TestRing`]'s model over that same
//! memory, so each iteration the model consumes the posted receive and
//! writes one completion, and the measured call finds it. Run by
//! `tools/ir-budget.sh`, which fails when a call costs more than its budget
//! in [`BUDGETS`](super::super::call_probe::BUDGETS).

use std::ptr::NonNull;
use std::sync::{Arc, Mutex};

use zerocopy::IntoBytes;

use super::kernel_model::TestRing;
use crate::command::{QpAttr, QpState, QpType};
use crate::cq::CompletionQueue;
use crate::provider::call_probe::{
    probe_poll, probe_post_recv, probe_post_recv_exclusive, send_loop, ITERS,
};
use crate::provider::driver::DriverId;
use crate::qp::{QpInit, QueuePair};
use crate::transport::{RawCommand, RecordingTransport, SharedMapping, Transport, TransportKind};
use crate::wr::{RecvWr, Sge, WcStatus, WorkCompletion};
use crate::{AccessFlags, Context};
use uverbs_uapi::ib_uverbs_wc;

/// The recording fake, remembering where each ring it served is mapped.
#[derive(Debug, Default)]
struct Mapped {
    inner: RecordingTransport,
    /// (base address, length) of each mapping, in the order made.
    rings: Mutex<Vec<(usize, usize)>>,
}

// SAFETY: every call is the recording fake's; `map_queue` only notes where
// the mapping it returns lies.
unsafe impl Transport for Mapped {
    fn kind(&self) -> TransportKind {
        self.inner.kind()
    }

    unsafe fn execute(&self, cmd: &mut RawCommand<'_>) -> Result<usize, crate::error::Errno> {
        // SAFETY: the caller's promise, passed on.
        unsafe { self.inner.execute(cmd) }
    }

    unsafe fn invoke(
        &self,
        frame: &mut crate::transport::frame::IoctlFrame,
    ) -> Result<(), crate::error::Errno> {
        // SAFETY: the caller's promise, passed on.
        unsafe { self.inner.invoke(frame) }
    }

    unsafe fn map_queue(
        &self,
        offset: u64,
        len: usize,
    ) -> Result<SharedMapping, crate::error::Errno> {
        // SAFETY: the caller's promise, passed on.
        let mapping = unsafe { self.inner.map_queue(offset, len) }?;
        self.rings
            .lock()
            .unwrap()
            .push((mapping.as_ptr().as_ptr() as usize, mapping.len()));
        Ok(mapping)
    }
}

/// An RC QP in INIT on one CQ of 16 entries, over the fake, taking at most
/// `max_recv_sge` SGEs a receive (as the kernel answers), and the fake.
fn rc_qp_in_init(max_recv_sge: u32) -> (Arc<Mapped>, CompletionQueue, QueuePair) {
    let fake = Arc::new(Mapped::default());
    fake.inner.serve_rings();
    let ctx = Context::over_fake(Some(DriverId::RXE), Box::new(fake.clone()));
    let cq = ctx.create_cq(16, None).unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let mut qp_init = QpInit::new(QpType::Rc, &cq, &cq);
    qp_init.max_recv_sge = max_recv_sge;
    // The send loop's WRITEs of two and three SGEs (`probe_post_write_two`,
    // `probe_post_write_three`).
    qp_init.max_send_sge = 3;
    // And its inline SENDs (`probe_post_inline`).
    qp_init.max_inline = 64;
    let qp = pd.create_qp(&qp_init).unwrap();
    let init = QpAttr::new()
        .state(QpState::Init)
        .pkey_index(0)
        .port(1)
        .access_flags(AccessFlags::LOCAL_WRITE);
    qp.modify(&init).unwrap();
    (fake, cq, qp)
}

/// The wr_ids of the receives the kernel finds in the receive ring of
/// [`rc_qp_in_init`]'s QP (mapped second, after the CQ's), oldest first,
/// each taken.
fn receives_in_ring(fake: &Mapped) -> Vec<u64> {
    let (rq_base, rq_len) = fake.rings.lock().unwrap()[1];
    // SAFETY: the QP's receive ring, which the caller's QP keeps mapped
    // while this view lives; only its ring code and this view touch it.
    let rq_ring = unsafe { TestRing::over_raw(NonNull::new(rq_base as *mut u8).unwrap(), rq_len) };
    let mut kernel_rq = rq_ring.kernel_consumer();
    let mut ids = Vec::new();
    // rxe_recv_wqe starts with wr_id.
    let mut wqe = [0u8; 8];
    while kernel_rq.pop(&mut wqe) {
        ids.push(u64::from_ne_bytes(wqe));
    }
    ids
}

#[test]
#[ignore = "an instruction-count probe, run under callgrind by tools/ir-budget.sh"]
fn rxe_calls_loop() {
    let (fake, cq, mut qp) = rc_qp_in_init(1);
    let rings = fake.rings.lock().unwrap().clone();
    // The CQ's ring is mapped first, then the QP's receive ring (rxe maps
    // the RQ before the SQ).
    let [(cq_base, cq_len), (rq_base, rq_len), (sq_base, sq_len)] = rings[..] else {
        panic!("rings mapped: {rings:?}");
    };
    // SAFETY: all three are rings the fake served and the CQ and QP keep
    // mapped until the end of the test; only their ring code and these
    // views touch them.
    let (cq_ring, rq_ring, sq_ring) = unsafe {
        (
            TestRing::over_raw(NonNull::new(cq_base as *mut u8).unwrap(), cq_len),
            TestRing::over_raw(NonNull::new(rq_base as *mut u8).unwrap(), rq_len),
            TestRing::over_raw(NonNull::new(sq_base as *mut u8).unwrap(), sq_len),
        )
    };
    let mut kernel_cq = cq_ring.kernel_producer();
    let mut kernel_rq = rq_ring.kernel_consumer();
    let mut kernel_sq = sq_ring.kernel_consumer();
    let sges = [Sge {
        addr: 0x1000,
        length: 64,
        lkey: 5,
    }];
    let mut out = [WorkCompletion::default(); 1];
    for exclusive in [false, true] {
        for i in 0..ITERS {
            let wr = RecvWr {
                wr_id: i,
                sges: &sges,
            };
            let posted = match exclusive {
                false => probe_post_recv(&qp, &wr),
                true => probe_post_recv_exclusive(&mut qp, &wr),
            };
            assert!(posted);
            assert_eq!(kernel_rq.flush(), 1);
            let wc = ib_uverbs_wc {
                wr_id: i,
                opcode: 128, // IB_UVERBS_WC_RECV
                byte_len: 64,
                qp_num: 17,
                ..Default::default()
            };
            assert!(kernel_cq.push(wc.as_bytes()));
            assert_eq!(probe_poll(&cq, &mut out), 1);
            assert_eq!((out[0].wr_id(), out[0].status()), (i, WcStatus::Success));
        }
    }
    send_loop(&mut qp, &sges, |n| {
        assert_eq!(u64::from(kernel_sq.flush()), n)
    });
}

/// A receive through the QP takes the driver's one-request path; a batch
/// and a refusal take the detailed post, which writes the batch and names
/// the refused request: the kernel finds exactly the receives accepted, in
/// order.
#[test]
fn rxe_receives_one_by_one_batched_and_refused_through_the_qp() {
    use crate::error::Error;
    use crate::wr::PostError;
    let (fake, _cq, qp) = rc_qp_in_init(2);
    let max_sge = qp.caps().max_recv_sge as usize;
    let sge = Sge {
        addr: 0x1000,
        length: 64,
        lkey: 5,
    };
    let too_many = vec![sge; max_sge + 1];
    let wr = |wr_id, sges| RecvWr { wr_id, sges };
    let one = [sge];
    // SAFETY: the fake kernel never touches the SGEs' memory.
    unsafe { qp.post_recv(&[wr(1, &one)]) }.unwrap();
    // SAFETY: as above.
    unsafe { qp.post_recv(&[wr(2, &one), wr(3, &one)]) }.unwrap();
    // SAFETY: as above; refused before anything is written.
    let err = unsafe { qp.post_recv(&[wr(4, &one), wr(5, &too_many)]) }.unwrap_err();
    match &err {
        Error::Post { index, why, .. } => {
            assert_eq!(*index, 1);
            assert!(matches!(**why, PostError::TooManySges { .. }), "{why:?}");
        }
        other => panic!("{other}"),
    }
    // SAFETY: as above.
    let err = unsafe { qp.post_recv(&[wr(6, &too_many)]) }.unwrap_err();
    assert!(matches!(err, Error::Post { index: 0, .. }), "{err}");
    // Two SGEs: not the one-SGE path, posted by the detailed one.
    assert!(max_sge >= 2);
    // SAFETY: as above.
    unsafe { qp.post_recv(&[wr(7, &[sge, sge])]) }.unwrap();
    assert_eq!(receives_in_ring(&fake), [1, 2, 3, 7]);
}

/// Receives posted from several threads at once: a post that finds the
/// ring's lock held waits for it out of line and posts; the kernel finds
/// every receive once.
#[test]
fn rxe_receives_from_racing_threads_all_arrive() {
    const THREADS: u64 = 4;
    const EACH: u64 = 3;
    let (fake, _cq, qp) = rc_qp_in_init(1);
    assert!(u64::from(qp.caps().max_recv_wr) >= THREADS * EACH);
    let sge = [Sge {
        addr: 0x1000,
        length: 64,
        lkey: 5,
    }];
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let (qp, sge) = (&qp, &sge);
            s.spawn(move || {
                for i in 0..EACH {
                    let wr = RecvWr {
                        wr_id: t * EACH + i,
                        sges: sge,
                    };
                    // SAFETY: the fake kernel never touches the SGEs' memory.
                    unsafe { qp.post_recv(std::slice::from_ref(&wr)) }.unwrap();
                }
            });
        }
    });
    let mut ids = receives_in_ring(&fake);
    ids.sort_unstable();
    assert_eq!(ids, (0..THREADS * EACH).collect::<Vec<_>>());
}
