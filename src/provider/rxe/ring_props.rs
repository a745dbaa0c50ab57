//! Property tests of the rxe rings: the user side ([`Producer`], [`Consumer`],
//! the WQE writers, `poll`) against the in-process model of the kernel's side
//! ([`kernel_model`](super::kernel_model)), on any machine.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::time::Instant;

use proptest::prelude::*;
use zerocopy::{FromBytes, IntoBytes};

use uverbs_uapi::{
    ib_uverbs_wc, rxe_recv_wqe, rxe_send_wqe, rxe_send_wr_atomic, rxe_send_wr_rdma, rxe_send_wr_ud,
};

use super::kernel_model::TestRing;
use super::queue::{Consumer, LayoutError, Producer, QueueFull, QueueMem, HEADER_LEN};
use super::wqe::{
    completion, poll, write_recv_wqe, write_send_wqe, SendLimits, RECV_WQE_LEN, SEND_WQE_LEN,
    WC_LEN,
};
use crate::provider::wait_until;
use crate::wr::{
    Payload, PostError, RecvWr, Remote, SendFlags, SendOp, SendWr, Sge, UdDest, WcFlags, WcOpcode,
    WcStatus, WorkCompletion,
};

/// A user producer over `ring`; the ring must outlive it (declare it first).
pub(super) fn producer(ring: &TestRing, min_elem: usize) -> Producer {
    // SAFETY: the ring's buffer is a live, writable allocation of ring.len()
    // bytes shaped like an rxe queue, declared before (so dropped after) the
    // producer; only the kernel model and this producer touch it.
    let mem = unsafe { QueueMem::from_raw(ring.base(), ring.len(), min_elem) };
    Producer::over(mem.expect("valid test ring"))
}

/// Send-queue limits of `max_sge` SGEs and `max_inline` inline bytes.
fn send_limits(max_sge: u32, max_inline: u32) -> SendLimits {
    SendLimits {
        max_sge,
        max_inline,
    }
}

/// A user consumer over `ring`; the ring must outlive it.
fn consumer<T: FromBytes>(ring: &TestRing, min_elem: usize) -> Consumer<T> {
    // SAFETY: as in `producer`.
    let mem = unsafe { QueueMem::from_raw(ring.base(), ring.len(), min_elem) };
    Consumer::over(mem.expect("valid test ring")).expect("a T fits every slot")
}

/// Fills a whole slot with a pattern derived from `seq`.
fn fill(slot: &mut [u8], seq: u64) {
    for (i, word) in slot.chunks_exact_mut(8).enumerate() {
        let v = seq.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ (i as u64);
        word.copy_from_slice(&v.to_ne_bytes());
    }
}

/// The sequence number in a slot filled by `fill`, if the whole slot is intact.
fn check(slot: &[u8]) -> Option<u64> {
    let first = u64::from_ne_bytes(slot[..8].try_into().ok()?);
    // Recover seq by the multiplicative inverse of the odd constant mod 2^64.
    let seq = first.wrapping_mul(inverse(0x9e37_79b9_7f4a_7c15));
    let mut expect = vec![0u8; slot.len()];
    fill(&mut expect, seq);
    (expect == slot).then_some(seq)
}

/// Multiplicative inverse of an odd `a` modulo 2^64 (Newton's iteration).
fn inverse(a: u64) -> u64 {
    let mut x = a;
    for _ in 0..6 {
        x = x.wrapping_mul(2u64.wrapping_sub(a.wrapping_mul(x)));
    }
    x
}

#[derive(Clone, Debug)]
enum Step {
    /// User space reserves and fills `n` slots, then publishes them once (or
    /// cancels them).
    Produce { n: u32, publish: bool },
    /// The other side consumes up to `n` elements (and, on the CQ, publishes).
    Consume { n: u32, publish: bool },
}

/// Steps per case (fewer under Miri: each element costs milliseconds there).
const MAX_STEPS: usize = if cfg!(miri) { 16 } else { 150 };

fn steps() -> impl Strategy<Value = Vec<Step>> {
    let step = prop_oneof![
        (1u32..70, any::<bool>(), 0..8u8).prop_map(|(n, p, r)| Step::Produce {
            n,
            publish: p || r > 0
        }),
        (1u32..70, any::<bool>(), 0..8u8).prop_map(|(n, p, r)| Step::Consume {
            n,
            publish: p || r > 0
        }),
    ];
    prop::collection::vec(step, 1..MAX_STEPS)
}

fn ring_shape() -> impl Strategy<Value = (u32, u32)> {
    // Slot sizes 64, 128, 256 from the header; 2 to 64 slots.
    (6u32..=8, 1u32..=6).prop_map(|(log2, k)| (log2, 1 << k))
}

/// Both indices in the shared header are always stored masked.
fn assert_masked(ring: &TestRing, slots: u32) {
    assert!(ring.producer_index().load(Ordering::Relaxed) < slots);
    assert!(ring.consumer_index().load(Ordering::Relaxed) < slots);
}

proptest! {
    #![proptest_config(crate::provider::ring_prop_config(256))]

    /// Send/receive direction: user produces, the kernel model consumes.
    /// Full exactly at slots − 1 outstanding, nothing visible before publish,
    /// everything visible after one publish, FIFO order, no loss, no
    /// duplicate, contents intact, across many wrap-arounds.
    #[test]
    fn producer_ring_against_kernel((log2, slots) in ring_shape(), steps in steps()) {
        let ring = TestRing::new(log2, slots);
        let mut user = producer(&ring, 8);
        let mut kernel = ring.kernel_consumer();
        prop_assert_eq!(user.elem_size(), 1usize << log2);
        prop_assert_eq!(user.capacity(), slots - 1);
        let mut in_ring: VecDeque<u64> = VecDeque::new();
        let mut next_seq = 0u64;
        let mut next_expected = 0u64;
        let mut buf = vec![0u8; ring.elem_size()];
        for step in steps {
            match step {
                Step::Produce { n, publish } => {
                    let before = kernel.count();
                    let mut reserved = 0;
                    for _ in 0..n {
                        let full = in_ring.len() as u32 + reserved == slots - 1;
                        match user.reserve() {
                            Ok(slot) => {
                                prop_assert!(!full, "reserve succeeded on a full queue");
                                fill(slot, next_seq + u64::from(reserved));
                                reserved += 1;
                            }
                            Err(QueueFull { capacity }) => {
                                prop_assert!(full, "queue full with free slots");
                                prop_assert_eq!(capacity, slots - 1);
                            }
                        }
                        // Batching: nothing is visible before the publish.
                        prop_assert_eq!(kernel.count(), before);
                    }
                    prop_assert_eq!(user.pending(), reserved);
                    if publish {
                        user.publish();
                        for i in 0..reserved {
                            in_ring.push_back(next_seq + u64::from(i));
                        }
                        next_seq += u64::from(reserved);
                        prop_assert_eq!(kernel.count(), before + reserved);
                    } else {
                        user.cancel();
                        prop_assert_eq!(kernel.count(), before);
                    }
                    prop_assert_eq!(user.pending(), 0);
                }
                Step::Consume { n, .. } => {
                    for _ in 0..n {
                        let got = kernel.pop(&mut buf);
                        prop_assert_eq!(got, !in_ring.is_empty());
                        if !got {
                            break;
                        }
                        let want = in_ring.pop_front().unwrap();
                        prop_assert_eq!(check(&buf), Some(want), "element lost, duplicated or torn");
                        prop_assert_eq!(want, next_expected);
                        next_expected += 1;
                    }
                }
            }
            assert_masked(&ring, slots);
            prop_assert_eq!(user.free(), slots - 1 - in_ring.len() as u32);
        }
    }

    /// Completion direction: the kernel model produces, user space consumes.
    /// The kernel sees a full CQ exactly at slots − 1, gets slots back only
    /// when user space publishes its consumer index (once per batch), and user
    /// space reads every element once, in order, intact.
    #[test]
    fn consumer_ring_against_kernel((log2, slots) in ring_shape(), steps in steps()) {
        let ring = TestRing::new(log2, slots);
        let mut user = consumer::<u8>(&ring, 8);
        let mut kernel = ring.kernel_producer();
        prop_assert_eq!(user.capacity(), slots - 1);
        let mut in_ring: VecDeque<u64> = VecDeque::new();
        let mut next_seq = 0u64;
        let mut buf = vec![0u8; ring.elem_size()];
        for step in steps {
            match step {
                Step::Produce { n, .. } => {
                    for _ in 0..n {
                        let full = in_ring.len() as u32 == slots - 1;
                        prop_assert_eq!(kernel.full(), full);
                        fill(&mut buf, next_seq);
                        prop_assert_eq!(kernel.push(&buf), !full);
                        if !full {
                            in_ring.push_back(next_seq);
                            next_seq += 1;
                        }
                    }
                }
                Step::Consume { n, publish } => {
                    let ready = user.ready();
                    prop_assert_eq!(ready, in_ring.len() as u32);
                    let take = n.min(ready);
                    for i in 0..take {
                        let slot = user.get(i).expect("ready element");
                        prop_assert_eq!(check(slot), Some(in_ring[i as usize]));
                    }
                    prop_assert!(user.get(ready).is_none());
                    let was_full = kernel.full();
                    if publish {
                        user.consume(take);
                        in_ring.drain(..take as usize);
                        prop_assert_eq!(kernel.full(), was_full && take == 0);
                    } else {
                        // Read but not handed back: the kernel still may not reuse them.
                        prop_assert_eq!(kernel.full(), was_full);
                    }
                }
            }
            assert_masked(&ring, slots);
        }
    }

    /// Every send opcode lands in the slot exactly as rdma-core's rxe provider
    /// writes it, with an SGE list of any allowed length.
    #[test]
    fn send_wqe_layout(
        op_kind in 0u8..7,
        sges in prop::collection::vec((any::<u64>(), 8u32..1 << 20, any::<u32>()), 1..=3),
        wr_id in any::<u64>(),
        imm in any::<u32>(),
        raddr in any::<u64>(),
        rkey in any::<u32>(),
        a in any::<u64>(),
        b in any::<u64>(),
        signaled in any::<bool>(),
    ) {
        let raddr = raddr & !7;
        let remote = Remote { addr: raddr, rkey };
        let op = match op_kind {
            0 => SendOp::Send { imm: None },
            1 => SendOp::Send { imm: Some(imm) },
            2 => SendOp::RdmaWrite { remote, imm: None },
            3 => SendOp::RdmaWrite { remote, imm: Some(imm) },
            4 => SendOp::RdmaRead { remote },
            5 => SendOp::CompareSwap { remote, compare: a, swap: b },
            _ => SendOp::FetchAdd { remote, add: a },
        };
        let sges: Vec<Sge> =
            sges.into_iter().map(|(addr, length, lkey)| Sge { addr, length, lkey }).collect();
        let flags = if signaled { SendFlags::SIGNALED } else { SendFlags::empty() };
        // A 256-byte slot holds 3 SGEs; the QP says 3.
        let ring = TestRing::new(8, 8);
        // Kernel-owned words already in the slot stay as they are.
        // SAFETY: slot 0 starts at HEADER_LEN inside the buffer, 256 bytes long.
        unsafe { std::ptr::write_bytes(ring.base().as_ptr().add(HEADER_LEN), 0xa5, 256) };
        let mut sq = producer(&ring, SEND_WQE_LEN);
        let limits = send_limits(3, 48);
        let wr = SendWr { wr_id, op, flags, payload: Payload::Sges(&sges), ud: None };
        write_send_wqe(&mut sq, limits, &wr).unwrap();
        sq.publish();
        let mut buf = vec![0u8; 256];
        prop_assert!(ring.kernel_consumer().pop(&mut buf));
        let (wqe, tail) = rxe_send_wqe::read_from_prefix(&buf).unwrap();
        let opcode = [2u32, 3, 0, 1, 4, 5, 6][op_kind as usize];
        prop_assert_eq!(wqe.wr.wr_id, wr_id);
        prop_assert_eq!(wqe.wr.reserved, 0);
        prop_assert_eq!(wqe.wr.opcode, opcode);
        prop_assert_eq!(wqe.wr.send_flags, if signaled { 2 } else { 0 });
        let has_imm = matches!(op_kind, 1 | 3);
        prop_assert_eq!(wqe.wr.ex, if has_imm { imm.to_be() } else { 0 });
        let union = wqe.wr.wr.as_bytes();
        let mut expect_union = [0u8; 120];
        match op_kind {
            2..=4 => {
                let m = rxe_send_wr_rdma { remote_addr: raddr, rkey, reserved: 0 };
                expect_union[..16].copy_from_slice(m.as_bytes());
            }
            5 | 6 => {
                let m = rxe_send_wr_atomic {
                    remote_addr: raddr,
                    compare_add: a,
                    swap: if op_kind == 5 { b } else { 0 },
                    rkey,
                    reserved: 0,
                };
                expect_union[..32].copy_from_slice(m.as_bytes());
            }
            _ => {}
        }
        prop_assert_eq!(union, &expect_union[..]);
        prop_assert_eq!(wqe.iova, if op_kind >= 2 { raddr } else { 0 });
        prop_assert_eq!(wqe.state, 0);
        // Kernel-owned words untouched.
        prop_assert_eq!(wqe.status, 0xa5a5_a5a5);
        prop_assert_eq!(wqe.mask, 0xa5a5_a5a5);
        prop_assert_eq!(wqe.first_psn, 0xa5a5_a5a5);
        let total: u32 = sges.iter().map(|s| s.length).sum();
        prop_assert_eq!(wqe.dma.length, total);
        prop_assert_eq!(wqe.dma.resid, total);
        prop_assert_eq!(wqe.dma.num_sge, sges.len() as u32);
        prop_assert_eq!(wqe.dma.cur_sge, 0);
        prop_assert_eq!(wqe.dma.sge_offset, 0);
        prop_assert_eq!(&tail[..sges.len() * 16], sges.as_bytes());
        // Nothing past the SGE list was written.
        prop_assert!(tail[sges.len() * 16..].iter().all(|&x| x == 0xa5));
    }

    /// Receive WQEs: wr_id, SGEs, dma.{length, resid, num_sge}, zero progress.
    #[test]
    fn recv_wqe_layout(
        sges in prop::collection::vec((any::<u64>(), any::<u32>(), any::<u32>()), 0..=5),
        wr_id in any::<u64>(),
    ) {
        let sges: Vec<Sge> =
            sges.into_iter().map(|(addr, length, lkey)| Sge { addr, length, lkey }).collect();
        // 128-byte slots hold (128 - 40) / 16 = 5 SGEs.
        let ring = TestRing::new(7, 4);
        let mut rq = producer(&ring, RECV_WQE_LEN);
        let total: u64 = sges.iter().map(|s| u64::from(s.length)).sum();
        let r = write_recv_wqe(&mut rq, 5, &RecvWr { wr_id, sges: &sges });
        if total > u64::from(u32::MAX) {
            prop_assert_eq!(r, Err(PostError::TooLong { op: "post_recv", len: total }));
            prop_assert_eq!(rq.pending(), 0);
            return Ok(());
        }
        r.unwrap();
        rq.publish();
        let mut buf = vec![0u8; 128];
        prop_assert!(ring.kernel_consumer().pop(&mut buf));
        let (wqe, tail) = rxe_recv_wqe::read_from_prefix(&buf).unwrap();
        prop_assert_eq!(wqe.wr_id, wr_id);
        prop_assert_eq!(u64::from(wqe.dma.length), total);
        prop_assert_eq!(u64::from(wqe.dma.resid), total);
        prop_assert_eq!(wqe.dma.num_sge, sges.len() as u32);
        prop_assert_eq!((wqe.dma.cur_sge, wqe.dma.sge_offset), (0, 0));
        prop_assert_eq!(&tail[..sges.len() * 16], sges.as_bytes());
    }

    /// Completions: the kernel's ib_uverbs_wc reads back typed, in order, in
    /// batches bounded by the caller's slice; one consumer store per poll.
    #[test]
    fn poll_reads_completions(
        wcs in prop::collection::vec(
            (any::<u64>(), 0u32..25, prop_oneof![Just(0u32), Just(1), Just(4), Just(128), Just(129)],
             any::<u32>(), any::<u32>(), 0u32..8),
            0..40),
        batch in 1usize..10,
    ) {
        let ring = TestRing::new(7, 64);
        let mut cq = consumer(&ring, WC_LEN);
        let mut kernel = ring.kernel_producer();
        let raw = |&(wr_id, status, opcode, byte_len, ex, wc_flags): &(u64, u32, u32, u32, u32, u32)| {
            ib_uverbs_wc {
                wr_id, status, opcode, byte_len, ex, qp_num: 17, src_qp: 3, wc_flags,
                port_num: 1, ..ib_uverbs_wc::default()
            }
        };
        for wc in &wcs {
            prop_assert!(kernel.push(raw(wc).as_bytes()));
        }
        let mut out = vec![WorkCompletion::default(); batch];
        let mut seen = 0;
        loop {
            let before = ring.consumer_index().load(Ordering::Relaxed);
            let n = poll(&mut cq, &mut out);
            prop_assert_eq!(n, batch.min(wcs.len() - seen));
            prop_assert_eq!(ring.consumer_index().load(Ordering::Relaxed), (before + n as u32) & 63);
            for wc in &out[..n] {
                let (wr_id, status, opcode, byte_len, ex, flags) = wcs[seen];
                prop_assert_eq!(wc.wr_id(), wr_id);
                prop_assert_eq!(wc.byte_len(), byte_len);
                prop_assert_eq!(wc.qp_num(), 17);
                prop_assert_eq!(wc.src_qp(), 3);
                prop_assert_eq!(wc.port_num(), 1);
                prop_assert_eq!(wc.wc_flags().bits(), flags);
                // The slot, copied whole.
                prop_assert_eq!(*wc.as_raw(), raw(&wcs[seen]));
                prop_assert_eq!(wc.imm_data(), (flags & 2 != 0).then(|| u32::from_be(ex)));
                prop_assert_eq!(wc.invalidated_rkey(), (flags & 4 != 0).then_some(ex));
                let want_status = match status {
                    0 => WcStatus::Success,
                    4 => WcStatus::LocProtErr,
                    5 => WcStatus::WrFlushErr,
                    10 => WcStatus::RemAccessErr,
                    21 => WcStatus::GeneralErr,
                    22.. => WcStatus::Unknown(status),
                    _ => wc.status(),
                };
                prop_assert_eq!(wc.status(), want_status);
                prop_assert_eq!(status >= 22, matches!(wc.status(), WcStatus::Unknown(_)));
                let want_op = match opcode {
                    0 => WcOpcode::Send, 1 => WcOpcode::RdmaWrite, 4 => WcOpcode::FetchAdd,
                    128 => WcOpcode::Recv, _ => WcOpcode::RecvRdmaWithImm,
                };
                prop_assert_eq!(wc.raw_opcode(), want_op);
                prop_assert_eq!(wc.opcode(), wc.is_success().then_some(want_op));
                seen += 1;
            }
            if n == 0 {
                break;
            }
        }
        prop_assert_eq!(seen, wcs.len());
    }
}

/// Many wrap-arounds of a 4-slot ring, one by one and in batches of 3.
#[test]
fn wrap_around_many_cycles() {
    let ring = TestRing::new(6, 4);
    let mut user = producer(&ring, 8);
    let mut kernel = ring.kernel_consumer();
    let mut buf = [0u8; 64];
    let (mut seq, mut want) = (0u64, 0u64);
    let rounds = crate::provider::ring_test_len(10_000, 40);
    for round in 0..rounds {
        let batch = if round % 2 == 0 { 1 } else { 3 };
        for _ in 0..batch {
            fill(user.reserve().expect("free slot"), seq);
            seq += 1;
        }
        if batch == 3 {
            assert_eq!(user.reserve().map(|_| ()), Err(QueueFull { capacity: 3 }));
        }
        user.publish();
        while kernel.pop(&mut buf) {
            assert_eq!(check(&buf), Some(want));
            want += 1;
        }
    }
    assert_eq!(want, 2 * rounds);
}

/// A modify into RESET: the kernel flushes what was queued (its consumer
/// index catches up), then `rxe_queue_reset` zeroes every slot but keeps
/// the header. Neither side's index goes back to 0, so the producer's
/// private copy stays right: posting resumes at the next slot, the kernel
/// reads exactly the new elements, and the whole capacity is free again.
#[test]
fn a_reset_zeroes_the_slots_and_keeps_both_indices() {
    let ring = TestRing::new(6, 4);
    let mut user = producer(&ring, 8);
    let mut kernel = ring.kernel_consumer();
    let mut buf = [0u8; 64];
    for seq in 0..2 {
        fill(user.reserve().expect("free slot"), seq);
    }
    user.publish();
    assert!(kernel.pop(&mut buf));
    assert_eq!(check(&buf), Some(0));

    assert_eq!(kernel.flush(), 1, "the second element is flushed");
    ring.reset_slots();
    // Relaxed: single-threaded inspection.
    let prod = ring.producer_index().load(Ordering::Relaxed);
    let cons = ring.consumer_index().load(Ordering::Relaxed);
    assert_eq!((prod, cons), (2, 2), "the header survives the reset");

    // Three new elements (the full capacity) wrap around slot 0.
    for seq in 10..13 {
        fill(user.reserve().expect("the reset freed every slot"), seq);
    }
    assert_eq!(user.reserve().map(|_| ()), Err(QueueFull { capacity: 3 }));
    user.publish();
    for seq in 10..13 {
        assert!(kernel.pop(&mut buf));
        assert_eq!(check(&buf), Some(seq), "the kernel reads the new elements");
    }
    assert!(!kernel.pop(&mut buf));
}

/// The kernel keeps its own index: a stray write to the kernel-owned word
/// changes neither what the kernel consumes next nor, on the user side, which
/// slots may be overwritten.
#[test]
fn writes_to_the_other_sides_index_are_ignored() {
    let ring = TestRing::new(6, 8);
    let mut user = producer(&ring, 8);
    let mut kernel = ring.kernel_consumer();
    for seq in 0..3 {
        fill(user.reserve().unwrap(), seq);
    }
    user.publish();
    let mut buf = [0u8; 64];
    assert!(kernel.pop(&mut buf));
    assert_eq!(check(&buf), Some(0));
    // A stray write puts the kernel-owned consumer index outside the window
    // of published elements (0..=3): as if the kernel had consumed slots that
    // were never published.
    ring.consumer_index().store(6, Ordering::Release);
    // The user side keeps its last sane view (consumer 0): 7 - 3 free, never
    // more than the 5 really free, so no unconsumed slot is overwritten.
    assert_eq!(user.free(), 4);
    for seq in 3..7 {
        fill(user.reserve().unwrap(), seq);
    }
    assert_eq!(user.reserve().map(|_| ()), Err(QueueFull { capacity: 7 }));
    user.publish();
    // The kernel ignores the write: it continues from its private index.
    for want in 1..7 {
        assert!(kernel.pop(&mut buf));
        assert_eq!(check(&buf), Some(want));
    }
    assert!(!kernel.pop(&mut buf));
    // And its next publish replaced the stray value.
    assert_eq!(ring.consumer_index().load(Ordering::Relaxed), 7);
    assert_eq!(user.free(), 7);
}

/// A consumer that copies whole completions out is refused over slots
/// smaller than one: `copy_first` and `copy_rest` rely on it and check
/// nothing per call.
#[test]
fn a_completion_consumer_needs_slots_that_hold_a_completion() {
    let small = TestRing::new(5, 8); // 32-byte slots
                                     // SAFETY: as in `producer`.
    let mem = unsafe { QueueMem::from_raw(small.base(), small.len(), 8) };
    assert!(Consumer::<ib_uverbs_wc>::over(mem.expect("valid test ring")).is_none());
    let fits = TestRing::new(6, 8); // 64-byte slots
                                    // SAFETY: as in `producer`.
    let mem = unsafe { QueueMem::from_raw(fits.base(), fits.len(), 8) };
    assert!(Consumer::<ib_uverbs_wc>::over(mem.expect("valid test ring")).is_some());
}

/// A garbage producer index from the kernel side is masked: the consumer
/// never reads outside its slots.
#[test]
fn garbage_kernel_index_stays_in_bounds() {
    let ring = TestRing::new(7, 8);
    let mut cq = consumer::<ib_uverbs_wc>(&ring, WC_LEN);
    ring.producer_index().store(u32::MAX, Ordering::Release);
    assert_eq!(cq.elem_size(), 128);
    assert_eq!(cq.ready(), 7);
    assert_eq!(cq.get(6).map(<[u8]>::len), Some(128));
    assert!(cq.get(7).is_none());
}

#[test]
fn header_is_validated() {
    let check = |ring: &TestRing, len: usize, min: usize| {
        assert!(len <= ring.len());
        // SAFETY: `len` never exceeds the ring's allocation (asserted), which
        // lives past the call; the result is dropped at once.
        unsafe { QueueMem::from_raw(ring.base(), len, min) }
            .map(Producer::over)
            .map(|_| ())
    };
    let ok = TestRing::new(8, 4);
    assert_eq!(check(&ok, ok.len(), SEND_WQE_LEN), Ok(()));
    assert_eq!(check(&ok, 100, 8), Err(LayoutError::TooShort { len: 100 }));
    assert_eq!(
        check(&ok, ok.len() - 1, 8),
        Err(LayoutError::SlotsOutsideMapping {
            slots: 4,
            elem: 256,
            need: 384 + 1024,
            len: 384 + 1023
        })
    );
    let small = TestRing::new(6, 4);
    assert!(matches!(
        check(&small, small.len(), SEND_WQE_LEN),
        Err(LayoutError::ElemSize {
            log2: 6,
            elem: 64,
            min: 208,
            ..
        })
    ));
    let bad_mask = TestRing::with_header(6, 5, 384 + 6 * 64);
    assert_eq!(
        check(&bad_mask, bad_mask.len(), 8),
        Err(LayoutError::IndexMask { mask: 5 })
    );
    let zero_mask = TestRing::with_header(6, 0, 384 + 64);
    assert_eq!(
        check(&zero_mask, zero_mask.len(), 8),
        Err(LayoutError::IndexMask { mask: 0 })
    );
    let huge_mask = TestRing::with_header(6, u32::MAX, 4096);
    assert_eq!(
        check(&huge_mask, huge_mask.len(), 8),
        Err(LayoutError::IndexMask { mask: u32::MAX })
    );
    let huge_elem = TestRing::with_header(40, 3, 4096);
    assert!(matches!(
        check(&huge_elem, huge_elem.len(), 8),
        Err(LayoutError::ElemSize {
            log2: 40,
            elem: 0,
            ..
        })
    ));
    // SAFETY: one byte into a live allocation, still inside it; from_raw must
    // refuse before reading anything.
    let odd = unsafe { std::ptr::NonNull::new_unchecked(ok.base().as_ptr().add(1)) };
    // SAFETY: as above; the range lies inside the allocation.
    let r = unsafe { QueueMem::from_raw(odd, ok.len() - 1, 8) }
        .map(Producer::over)
        .map(|_| ());
    assert_eq!(
        r,
        Err(LayoutError::Misaligned {
            addr: odd.as_ptr() as usize
        })
    );
}

/// Bad send work requests get typed errors and queue nothing.
#[test]
fn bad_send_wrs_are_refused_and_queue_nothing() {
    let ring = TestRing::new(8, 4);
    let mut sq = producer(&ring, SEND_WQE_LEN);
    let limits = send_limits(2, 32);
    const SGE: Sge = Sge {
        addr: 0x1000,
        length: 8,
        lkey: 1,
    };
    let (one, three, four) = ([SGE], [SGE; 3], [SGE; 4]);
    let short = [Sge { length: 4, ..SGE }];
    let huge = [
        Sge {
            length: u32::MAX,
            ..SGE
        },
        SGE,
    ];
    let remote = Remote {
        addr: 0x2000,
        rkey: 2,
    };
    let wr = |op, payload| SendWr::new(1, op, payload);
    let send = SendOp::Send { imm: None };
    let cases: Vec<(SendWr<'_>, PostError)> = vec![
        (
            wr(send, Payload::Sges(&three)),
            PostError::TooManySges {
                op: "post_send",
                n: 3,
                max: 2,
            },
        ),
        (
            wr(send, Payload::Inline(&[&[0u8; 20], &[0u8; 13]])),
            PostError::InlineTooLong { len: 33, max: 32 },
        ),
        (
            wr(SendOp::RdmaRead { remote }, Payload::Inline(&[&[0u8; 8]])),
            PostError::InlineNotAllowed {
                opcode: "RDMA_READ",
            },
        ),
        (
            wr(SendOp::FetchAdd { remote, add: 1 }, Payload::Sges(&short)),
            PostError::BadAtomic {
                opcode: "ATOMIC_FETCH_AND_ADD",
                len: 4,
                remote_addr: 0x2000,
            },
        ),
        (
            wr(
                SendOp::CompareSwap {
                    remote: Remote {
                        addr: 0x2004,
                        rkey: 2,
                    },
                    compare: 0,
                    swap: 1,
                },
                Payload::Sges(&one),
            ),
            PostError::BadAtomic {
                opcode: "ATOMIC_CMP_AND_SWP",
                len: 8,
                remote_addr: 0x2004,
            },
        ),
        (
            wr(SendOp::Send { imm: None }, Payload::Sges(&huge)),
            PostError::TooLong {
                op: "post_send",
                len: u64::from(u32::MAX) + 8,
            },
        ),
        (
            SendWr {
                ud: Some(UdDest::from_raw(1, 2, 3)),
                ..wr(SendOp::RdmaWrite { remote, imm: None }, Payload::Sges(&one))
            },
            PostError::UdNotSend {
                opcode: "RDMA_WRITE",
            },
        ),
    ];
    for (wr, err) in cases {
        assert_eq!(write_send_wqe(&mut sq, limits, &wr), Err(err));
        assert_eq!(err.errno(), crate::error::Errno::INVAL);
        assert_eq!(sq.pending(), 0, "{err}");
    }
    // The limits the QP claims are capped by what a slot holds: 256-byte slots
    // take (256 - 208) / 16 = 3 SGEs and 48 inline bytes, whatever it claims.
    let generous = send_limits(30, 1000);
    assert_eq!(
        write_send_wqe(&mut sq, generous, &wr(send, Payload::Sges(&four))),
        Err(PostError::TooManySges {
            op: "post_send",
            n: 4,
            max: 3
        })
    );
    assert_eq!(
        write_send_wqe(&mut sq, generous, &wr(send, Payload::Inline(&[&[0u8; 49]]))),
        Err(PostError::InlineTooLong { len: 49, max: 48 })
    );
    // A full queue: 3 fit, the 4th is refused with ENOMEM and nothing changes.
    for _ in 0..3 {
        write_send_wqe(&mut sq, limits, &wr(send, Payload::Sges(&one))).unwrap();
    }
    let full = write_send_wqe(&mut sq, limits, &wr(send, Payload::Sges(&one)));
    assert_eq!(
        full,
        Err(PostError::QueueFull {
            op: "post_send",
            capacity: 3
        })
    );
    assert_eq!(full.unwrap_err().errno(), crate::error::Errno::NOMEM);
    assert_eq!(sq.pending(), 3);
    // Nothing was published by any of it.
    assert_eq!(ring.kernel_consumer().count(), 0);

    let rring = TestRing::new(6, 2);
    let mut rq = producer(&rring, RECV_WQE_LEN);
    // 64-byte slots hold one SGE whatever max_sge says.
    assert_eq!(
        write_recv_wqe(
            &mut rq,
            4,
            &RecvWr {
                wr_id: 1,
                sges: &[SGE; 2]
            }
        ),
        Err(PostError::TooManySges {
            op: "post_recv",
            n: 2,
            max: 1
        })
    );
    write_recv_wqe(
        &mut rq,
        4,
        &RecvWr {
            wr_id: 1,
            sges: &one,
        },
    )
    .unwrap();
    assert_eq!(
        write_recv_wqe(
            &mut rq,
            4,
            &RecvWr {
                wr_id: 2,
                sges: &one
            }
        ),
        Err(PostError::QueueFull {
            op: "post_recv",
            capacity: 1
        })
    );
}

/// Inline data is copied into dma.inline_data with the INLINE flag; UD sends
/// carry ah_num, remote_qpn and remote_qkey.
#[test]
fn inline_and_ud_sends() {
    let ring = TestRing::new(8, 4);
    let mut sq = producer(&ring, SEND_WQE_LEN);
    let limits = send_limits(3, 48);
    let ud = UdDest::from_raw(7, 0x11, 0x1111_2222);
    let segs: [&[u8]; 2] = [b"hello, ", b"rxe"];
    let wr = SendWr {
        wr_id: 9,
        op: SendOp::Send {
            imm: Some(0x0102_0304),
        },
        flags: SendFlags::SIGNALED | SendFlags::SOLICITED,
        payload: Payload::Inline(&segs),
        ud: Some(ud),
    };
    write_send_wqe(&mut sq, limits, &wr).unwrap();
    sq.publish();
    let mut buf = vec![0u8; 256];
    assert!(ring.kernel_consumer().pop(&mut buf));
    let (wqe, tail) = rxe_send_wqe::read_from_prefix(&buf).unwrap();
    assert_eq!(wqe.wr.opcode, 3);
    assert_eq!(wqe.wr.send_flags, 2 | 4 | 8);
    assert_eq!(wqe.wr.ex.to_ne_bytes(), [1, 2, 3, 4]);
    let (m, _) = rxe_send_wr_ud::read_from_prefix(wqe.wr.wr.as_bytes()).unwrap();
    assert_eq!(
        (m.remote_qpn, m.remote_qkey, m.ah_num),
        (0x11, 0x1111_2222, 7)
    );
    assert_eq!(
        (wqe.dma.length, wqe.dma.resid, wqe.dma.num_sge),
        (10, 10, 2)
    );
    assert_eq!(&tail[..10], b"hello, rxe");
}

/// Memory ordering, send direction: user space fills whole slots and
/// publishes in batches from one thread while the kernel model consumes in
/// another; every element arrives complete and in order. (A publish without
/// release, or a consumer load without acquire, may show torn slots on weakly
/// ordered machines and is a data race under Miri or TSan.)
#[test]
fn two_threads_send_direction() {
    on_two_threads(kernel_pops_in_order, user_publishes_in_batches);
}

/// The kernel's side of [`two_threads_send_direction`]: pops `total` WQEs,
/// each whole and in order.
fn kernel_pops_in_order(ring: &TestRing, total: u64, deadline: Instant) {
    let mut k = ring.kernel_consumer();
    let mut buf = vec![0u8; ring.elem_size()];
    for want in 0..total {
        wait_until(deadline, "a WQE", || k.pop(&mut buf));
        assert_eq!(check(&buf), Some(want), "torn or out-of-order element");
    }
}

/// The user's side of [`two_threads_send_direction`]: fills and publishes
/// `total` slots in batches of 1 to 5.
fn user_publishes_in_batches(ring: &TestRing, total: u64, deadline: Instant) {
    let mut user = producer(ring, 8);
    let mut seq = 0u64;
    while seq < total {
        let batch = 1 + (seq % 5);
        for _ in 0..batch.min(total - seq) {
            let mut slot = user.reserve();
            while slot.is_err() {
                assert!(
                    Instant::now() < deadline,
                    "timed out waiting for a free slot"
                );
                std::thread::yield_now();
                slot = user.reserve();
            }
            fill(slot.unwrap(), seq);
            seq += 1;
        }
        user.publish();
    }
}

/// Memory ordering, completion direction: the kernel model writes whole
/// slots from one thread while user space polls in batches in another.
#[test]
fn two_threads_completion_direction() {
    on_two_threads(kernel_pushes_in_order, user_polls_in_batches);
}

/// The user's side of [`two_threads_completion_direction`]: takes the
/// `total` CQEs in batches of 1 to 7, each whole and in order.
fn user_polls_in_batches(ring: &TestRing, total: u64, deadline: Instant) {
    let mut user = consumer::<u8>(ring, 8);
    let mut want = 0u64;
    while want < total {
        let ready = user.ready();
        if ready == 0 {
            assert!(
                Instant::now() < deadline,
                "timed out waiting for completions"
            );
            std::thread::yield_now();
            continue;
        }
        let take = ready.min(1 + (want % 7) as u32);
        for i in 0..take {
            assert_eq!(
                check(user.get(i).unwrap()),
                Some(want),
                "torn or out-of-order CQE"
            );
            want += 1;
        }
        user.consume(take);
    }
}

/// The kernel's side of [`two_threads_completion_direction`]: pushes
/// `total` CQEs.
fn kernel_pushes_in_order(ring: &TestRing, total: u64, deadline: Instant) {
    let mut k = ring.kernel_producer();
    let mut buf = vec![0u8; ring.elem_size()];
    for seq in 0..total {
        fill(&mut buf, seq);
        wait_until(deadline, "a free CQ slot", || k.push(&buf));
    }
}

/// For rings of 16 slots of 64, 128 and 256 bytes: `kernel(ring, total,
/// deadline)` runs in a second thread while `user(ring, total, deadline)`
/// runs in this one; 50 000 elements, both bounded by a 60 s deadline.
fn on_two_threads(kernel: fn(&TestRing, u64, Instant), user: fn(&TestRing, u64, Instant)) {
    for log2 in [6u32, 7, 8] {
        let ring = TestRing::new(log2, 16);
        let total = crate::provider::ring_test_len(50_000, 120);
        let deadline = Instant::now() + crate::provider::RING_TEST_PATIENCE;
        std::thread::scope(|s| {
            let kernel = s.spawn(|| kernel(&ring, total, deadline));
            user(&ring, total, deadline);
            kernel.join().expect("kernel thread");
        });
    }
}

/// The flags the kernel writes on a receive decode as such.
#[test]
fn wc_flags_are_the_kernels() {
    let wc = ib_uverbs_wc {
        wc_flags: 1 | 2,
        ex: 5u32.to_be(),
        opcode: 128,
        ..Default::default()
    };
    let got = completion(wc.as_bytes()).unwrap();
    assert_eq!(got.wc_flags(), WcFlags::GRH | WcFlags::WITH_IMM);
    assert_eq!(got.imm_data(), Some(5));
    assert_eq!(got.opcode(), Some(WcOpcode::Recv));
    let inv = ib_uverbs_wc {
        wc_flags: 4,
        ex: 0x1234,
        ..Default::default()
    };
    assert_eq!(
        completion(inv.as_bytes()).unwrap().invalidated_rkey(),
        Some(0x1234)
    );
    assert_eq!(completion(&[0u8; 47]), None);
}

/// One request of [`batches_post_whole_or_not_at_all`]'s batches.
#[derive(Clone, Copy, Debug)]
enum BatchReq {
    /// A WRITE from one SGE: the common path's.
    Write,
    /// An RDMA READ: the general path's.
    Read,
    /// Three SGEs where the QP takes two: refused.
    Bad,
}

proptest! {
    #![proptest_config(crate::provider::ring_prop_config(256))]

    /// A batch of sends through `post_sends` with `queued` requests already
    /// in a ring of 7: where there is room for all, every request is
    /// written (taking its slot with no check) and published at once,
    /// unless one is refused; where there is not, the first request that
    /// fails, in order, is named, a refused one before the full queue.
    /// A refused batch publishes nothing.
    #[test]
    fn batches_post_whole_or_not_at_all(
        queued in 0u32..=7,
        reqs in prop::collection::vec(
            prop_oneof![4 => Just(BatchReq::Write), 2 => Just(BatchReq::Read), 1 => Just(BatchReq::Bad)],
            1..=9,
        ),
    ) {
        use super::rings::post_sends;
        use crate::command::QpType;
        use crate::provider::rings::PostFailure;
        let ring = TestRing::new(9, 8);
        let mut sq = producer(&ring, SEND_WQE_LEN);
        let mut kernel = ring.kernel_consumer();
        let limits = send_limits(2, 64).within_slot(sq.elem_size());
        const SGE: Sge = Sge { addr: 0x1000, length: 8, lkey: 1 };
        let (one, three) = ([SGE], [SGE; 3]);
        let remote = Remote { addr: 0x2000, rkey: 2 };
        let write = |id| SendWr::new(id, SendOp::RdmaWrite { remote, imm: None }, Payload::Sges(&one));
        for id in 0..u64::from(queued) {
            prop_assert!(post_sends(&mut sq, QpType::Rc, limits, &[write(id)]).is_ok());
        }
        let wrs: Vec<SendWr<'_>> = reqs
            .iter()
            .enumerate()
            .map(|(i, r)| {
                let id = 100 + i as u64;
                match r {
                    BatchReq::Write => write(id),
                    BatchReq::Read => SendWr::new(id, SendOp::RdmaRead { remote }, Payload::Sges(&one)),
                    BatchReq::Bad => SendWr::new(id, SendOp::Send { imm: None }, Payload::Sges(&three)),
                }
            })
            .collect();
        let room = (7 - queued) as usize;
        let bad = reqs.iter().position(|r| matches!(r, BatchReq::Bad));
        let expected = match bad {
            // A refused request is named if the queue has a slot for it.
            Some(b) if b <= room => Some((b, true)),
            _ if wrs.len() > room => Some((room, false)),
            _ => None,
        };
        let got = post_sends(&mut sq, QpType::Rc, limits, &wrs);
        let mut slot = vec![0u8; ring.elem_size()];
        let mut ids = Vec::new();
        while kernel.pop(&mut slot) {
            ids.push(u64::from_ne_bytes(slot[..8].try_into().unwrap()));
        }
        let mut want: Vec<u64> = (0..u64::from(queued)).collect();
        match (expected, got) {
            (None, Ok(doorbell)) => {
                prop_assert!(doorbell);
                want.extend((0..wrs.len()).map(|i| 100 + i as u64));
            }
            (Some((index, is_bad)), Err(PostFailure::Refused { index: at, error })) => {
                prop_assert_eq!(at, index);
                if is_bad {
                    let too_many = PostError::TooManySges { op: "post_send", n: 3, max: 2 };
                    prop_assert_eq!(error, too_many);
                } else {
                    prop_assert_eq!(error, PostError::QueueFull { op: "post_send", capacity: 7 });
                }
            }
            (expected, got) => prop_assert!(false, "expected {:?}, got {:?}", expected, got),
        }
        prop_assert_eq!(ids, want);
        prop_assert_eq!(sq.pending(), 0);
    }
}
