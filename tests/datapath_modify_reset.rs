//! `QueuePair::modify` excludes posting (issue 18, defect 8), and an
//! `OwnedQp` moved to RESET hands back what rxe's reset took from the device
//! (issue 38, defect 7).
//!
//! rxe's move to RESET zeroes every slot of both rings (`rxe_queue_reset`
//! memsets the data after the header) while the MODIFY_QP command runs. A
//! receive posted by another thread in that window would be written into the
//! ring and then zeroed under it. Here a fake rxe kernel (the recording fake
//! with its rings served) does that memset in the middle of MODIFY_QP into
//! RESET, after letting another thread try to post: the post must wait for
//! the modify, then find the QP in RESET and be refused, writing nothing.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use uverbs::error::Errno;
use uverbs::qp::{QpAttr, QpState};
use uverbs::transport::{RawCommand, RecordingTransport, SharedMapping, Transport, TransportKind};
use uverbs::uverbs_uapi as sys;
use uverbs::wr::{RecvWr, Sge};
use zerocopy::FromBytes;

/// Bytes of the rxe queue header before the first slot.
const HEADER: usize = size_of::<sys::rxe_queue_buf>();

/// The recording fake, plus rxe's RESET: zeroes every ring's slots during a
/// MODIFY_QP into RESET, after giving a posting thread time to run.
#[derive(Debug, Default)]
struct ResettingFake {
    inner: RecordingTransport,
    /// (address, length) of each ring mapped, in order: CQ, RQ, SQ.
    rings: Mutex<Vec<(usize, usize)>>,
    /// A MODIFY_QP into RESET has started.
    in_reset: AtomicBool,
    /// It has zeroed the rings and is returning.
    reset_done: AtomicBool,
}

// SAFETY: forwards to RecordingTransport, which upholds the contract; the
// one addition writes only into ring mappings this transport handed out,
// which are alive while the QP using them is (the test keeps it).
unsafe impl Transport for ResettingFake {
    fn kind(&self) -> TransportKind {
        TransportKind::Write
    }

    unsafe fn execute(&self, cmd: &mut RawCommand<'_>) -> Result<usize, Errno> {
        let reset = cmd.code == sys::IB_USER_VERBS_CMD_MODIFY_QP
            && sys::ib_uverbs_modify_qp::read_from_prefix(cmd.core_in)
                .map(|(m, _)| m.attr_mask & 1 != 0 && m.qp_state == QpState::Reset as u8)
                .unwrap_or(false);
        if reset {
            self.in_reset.store(true, Ordering::SeqCst);
            // The poster runs now; without the exclusion its WQE lands in
            // the ring within this window.
            std::thread::sleep(Duration::from_millis(200));
            for &(addr, len) in self.rings.lock().unwrap().iter() {
                // SAFETY: a live ring mapping of ours (see the impl's
                // comment); only the slots after the header are zeroed, as
                // rxe_queue_reset does. Nothing in this process writes the
                // ring meanwhile (that is what the test checks).
                unsafe { std::ptr::write_bytes((addr + HEADER) as *mut u8, 0, len - HEADER) };
            }
            self.reset_done.store(true, Ordering::SeqCst);
        }
        // SAFETY: forwarded to the caller.
        unsafe { self.inner.execute(cmd) }
    }

    unsafe fn map_queue(&self, offset: u64, len: usize) -> Result<SharedMapping, Errno> {
        // SAFETY: forwarded to the caller.
        let mapping = unsafe { self.inner.map_queue(offset, len) }?;
        self.rings
            .lock()
            .unwrap()
            .push((mapping.as_ptr().as_ptr() as usize, mapping.len()));
        Ok(mapping)
    }
}

#[test]
fn a_receive_posted_during_a_modify_into_reset_waits_and_survives_the_reset() {
    let fake = Arc::new(ResettingFake::default());
    fake.inner.serve_rings();
    let ctx = common::rxe_context_over(&fake);
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(8, None).unwrap();
    let qp = common::rc_qp_in_init(&pd, &cq);
    assert_eq!(fake.rings.lock().unwrap().len(), 3, "CQ, RQ, SQ");
    let (rq_addr, _) = fake.rings.lock().unwrap()[1];

    let (result, after_reset) = std::thread::scope(|s| {
        let poster = s.spawn(|| {
            let start = Instant::now();
            while !fake.in_reset.load(Ordering::SeqCst) {
                assert!(start.elapsed() < Duration::from_secs(10), "no modify");
                std::thread::yield_now();
            }
            let sge = [Sge {
                addr: 0x1000,
                length: 8,
                lkey: 1,
            }];
            // SAFETY: the fake kernel touches no memory.
            let result = unsafe {
                qp.post_recv(&[RecvWr {
                    wr_id: 0xfeed,
                    sges: &sge,
                }])
            };
            (result, fake.reset_done.load(Ordering::SeqCst))
        });
        qp.modify(&QpAttr::new().state(QpState::Reset)).unwrap();
        poster.join().unwrap()
    });
    assert!(
        after_reset,
        "the post ran while MODIFY_QP(RESET) was in the kernel"
    );
    // It waited for the modify, then saw the QP in RESET: refused, typed.
    match result {
        Err(uverbs::Error::Post { why: source, .. }) => assert!(
            matches!(
                *source,
                uverbs::wr::PostError::WrongState {
                    state: QpState::Reset,
                    ..
                }
            ),
            "{source}"
        ),
        other => panic!("a receive into a QP just reset: {other:?}"),
    }
    // Nothing was written into the ring the reset zeroed.
    // SAFETY: the RQ mapping is alive (the QP is), the header word is
    // 4-aligned; nothing writes it now.
    let prod = unsafe {
        ((rq_addr + std::mem::offset_of!(sys::rxe_queue_buf, producer_index)) as *const u32)
            .read_volatile()
    };
    assert_eq!(prod, 0, "no WQE published into the reset ring");
}

/// An `OwnedQp` moved to RESET on rxe, which empties both queues with no
/// completion (issue 38, defect 7): every request outstanding comes back
/// with the next poll as `Ended::Reset`, each with its own memory, and the
/// QP can be taken back. Before the fix they stayed outstanding for ever
/// (until a destroy), and an `AsyncQp`'s futures waited with them.
#[test]
fn an_owned_qp_moved_to_reset_hands_its_requests_back() {
    let fake = Arc::new(RecordingTransport::new());
    fake.serve_rings();
    let ctx = common::rxe_context_over(&fake);
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(8, None).unwrap();
    let qp = pd
        .create_qp(&uverbs::QpInit::new(uverbs::QpType::Rc, &cq, &cq))
        .unwrap();
    let qp = uverbs::OwnedQp::<uverbs::BufferMr<Vec<u8>>>::new(qp).unwrap();
    let init = QpAttr::new()
        .state(QpState::Init)
        .pkey_index(0)
        .port(1)
        .access_flags(uverbs::AccessFlags::LOCAL_WRITE);
    qp.modify(&init).unwrap();
    for byte in [1u8, 2] {
        let buf = pd
            .reg_buffer(vec![byte; 64], uverbs::AccessFlags::LOCAL_WRITE)
            .unwrap();
        qp.post_recv(uverbs::post::RecvRequest::new(
            u64::from(byte),
            uverbs::post::Local::whole(buf),
        ))
        .unwrap_or_else(|e| panic!("post_recv: {}", e.error));
    }
    assert_eq!(qp.outstanding(), (0, 2));
    qp.modify(&QpAttr::new().state(QpState::Reset)).unwrap();
    assert_eq!(qp.outstanding(), (0, 0), "the device holds none of them");
    let mut back = Vec::new();
    assert_eq!(qp.poll(&mut back).unwrap(), 2);
    let got: Vec<_> = back
        .into_iter()
        .map(|c| {
            assert_eq!(
                (c.ended, c.is_recv, c.status()),
                (uverbs::post::Ended::Reset, true, None)
            );
            (c.wr_id, c.into_memory().expect("its buffer").buffer()[0])
        })
        .collect();
    assert_eq!(got, [(1, 1), (2, 2)]);
    assert!(qp.into_inner().is_ok(), "nothing left outstanding");
}
