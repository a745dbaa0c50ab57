//! Property tests of the siw rings: the user side ([`Producer`],
//! [`CqConsumer`], the writers and `poll` of [`wqe`](super::wqe)) against the
//! in-process model of the kernel's side
//! ([`kernel_model`](super::kernel_model)), on any machine.

use std::collections::VecDeque;
use std::mem::size_of;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use proptest::prelude::*;
use zerocopy::{FromBytes, IntoBytes};

use uverbs_uapi::{
    siw_cqe, siw_rqe, siw_sqe, SIW_MAX_INLINE, SIW_NOTIFY_NEXT_COMPLETION, SIW_NOTIFY_NOT,
    SIW_NOTIFY_SOLICITED, SIW_OP_READ, SIW_OP_RECEIVE, SIW_OP_SEND, SIW_OP_WRITE, SIW_WC_SUCCESS,
    SIW_WC_WR_FLUSH_ERR, SIW_WQE_INLINE, SIW_WQE_READ_FENCE, SIW_WQE_REM_INVAL, SIW_WQE_SIGNALLED,
    SIW_WQE_SOLICITED, SIW_WQE_VALID,
};

use super::kernel_model::{
    CqOverflow, KernelCq, KernelRq, KernelSq, KernelTx, TestMem, GUARD, GUARD_BYTE,
};
use super::queue::{CqConsumer, LayoutError, Posted, Producer, QueueFull, CQE_LEN};
use super::wqe::{
    build_sqe, check_send, completion, poll, post_recv, post_send, wc_opcode, wc_status, Refused,
    SendConfig, SiwPostError, UNKNOWN_TAG,
};
use crate::error::Errno;
use crate::provider::wait_until;
use crate::wr::{
    Payload, PostError, RecvWr, Remote, SendFlags, SendOp, SendWr, Sge, UdDest, WcFlags, WcOpcode,
    WcStatus, WorkCompletion,
};

const SQE: usize = size_of::<siw_sqe>();
const RQE: usize = size_of::<siw_rqe>();

/// A send queue view over `mem` (which must outlive it: declare it first).
fn sq(mem: &TestMem, num: u32) -> Producer<siw_sqe> {
    // SAFETY: mem is a live allocation of mem.len() bytes (plus a guard),
    // declared before the view; only the kernel model and the view touch it.
    unsafe { Producer::from_raw(mem.base(), mem.len(), num) }.expect("valid SQ")
}

/// A receive queue view over `mem`.
fn rq(mem: &TestMem, num: u32) -> Producer<siw_rqe> {
    // SAFETY: as in `sq`.
    unsafe { Producer::from_raw(mem.base(), mem.len(), num) }.expect("valid RQ")
}

/// A completion queue view over `mem`.
fn cq(mem: &TestMem, num: u32) -> CqConsumer {
    // SAFETY: as in `sq`.
    unsafe { CqConsumer::from_raw(mem.base(), mem.len(), num) }.expect("valid CQ")
}

const CFG: SendConfig = SendConfig {
    max_sge: 6,
    max_inline: SIW_MAX_INLINE,
    sig_all: false,
};

pub(super) const SGE: Sge = Sge {
    addr: 0x1000,
    length: 8,
    lkey: 7,
};

/// A signalled SEND of one SGE with `wr_id`.
pub(super) fn send(wr_id: u64) -> SendWr<'static> {
    SendWr::new(
        wr_id,
        SendOp::Send { imm: None },
        Payload::Sges(std::slice::from_ref(&SGE)),
    )
}

/// A request siw refuses (SEND with immediate data).
fn bad(wr_id: u64) -> SendWr<'static> {
    SendWr {
        op: SendOp::Send { imm: Some(1) },
        ..send(wr_id)
    }
}

/// Whether a refused send batch of `n` requests from position `start`
/// handed the kernel nothing, comparing the SQ ring's bytes `before` and
/// `after` it (guard included): no slot's flags word changed (the kernel
/// reads nothing else of a slot whose VALID is clear, and takes any
/// non-zero word for an element when it flushes), the guard is intact,
/// and the only bytes changed lie in the batch's slots, which were free (a
/// send batch writes each slot before it publishes any: see
/// `Producer::stage_then_publish`).
pub(super) fn published_nothing(
    before: &[u8],
    after: &[u8],
    num: u32,
    start: u32,
    n: usize,
) -> Result<(), String> {
    let len = num as usize * SQE;
    if before.len() != after.len() || before[len..] != after[len..] {
        return Err("the guard changed".into());
    }
    let flags =
        |mem: &[u8], slot: usize| u16::from_ne_bytes([mem[slot * SQE + 8], mem[slot * SQE + 9]]);
    let batch: Vec<usize> = (0..n.min(num as usize))
        .map(|k| (start.wrapping_add(k as u32) % num) as usize)
        .collect();
    for slot in 0..num as usize {
        let at = slot * SQE..(slot + 1) * SQE;
        if flags(before, slot) != flags(after, slot) {
            return Err(format!("slot {slot}'s flags word changed"));
        }
        let free = flags(before, slot) & SIW_WQE_VALID == 0;
        if before[at.clone()] != after[at] && !(free && batch.contains(&slot)) {
            return Err(format!("slot {slot} changed, not a free slot of the batch"));
        }
    }
    Ok(())
}

/// Sizes 1, 2, 4, ..., 32.
fn ring_size() -> impl Strategy<Value = u32> {
    (0u32..=5).prop_map(|k| 1 << k)
}

#[derive(Clone, Debug)]
enum SqStep {
    /// Post `n` sends, the one at `bad_at` (if any) refused by siw.
    Post { n: usize, bad_at: Option<usize> },
    /// The kernel runs with a budget of `budget` SQEs.
    Run { budget: u32 },
}

/// Steps per case (fewer under Miri: each element costs milliseconds there).
const MAX_STEPS: usize = if cfg!(miri) { 16 } else { 120 };
const MAX_CQ_STEPS: usize = if cfg!(miri) { 16 } else { 150 };

fn sq_steps() -> impl Strategy<Value = Vec<SqStep>> {
    let step = prop_oneof![
        (0usize..40, prop::option::weighted(0.2, 0usize..40)).prop_map(|(n, bad)| SqStep::Post {
            n,
            bad_at: bad.filter(|&b| b < n)
        }),
        (0u32..40).prop_map(|budget| SqStep::Run { budget }),
    ];
    prop::collection::vec(step, 1..MAX_STEPS)
}

proptest! {
    #![proptest_config(crate::provider::ring_prop_config(256))]

    /// Send direction over many laps: a ring holds exactly `num` SQEs; a
    /// batch that does not fit, or holds a refused request, writes nothing
    /// (every byte of the ring and guard unchanged); the kernel takes SQEs in
    /// order, intact, and accepts each; the doorbell is rdma-core's rule and
    /// is never missing when the kernel is idle with work queued.
    #[test]
    fn send_queue_against_kernel(num in ring_size(), steps in sq_steps()) {
        let mem = TestMem::sq(num);
        let mut user = sq(&mem, num);
        let mut tx = KernelTx::new(KernelSq::new(&mem, num));
        prop_assert_eq!(user.capacity(), num);
        let (mut next_id, mut want_id) = (0u64, 0u64);
        for step in steps {
            match step {
                SqStep::Post { n, bad_at } => {
                    let wrs: Vec<SendWr<'_>> = (0..n)
                        .map(|i| if Some(i) == bad_at { bad(next_id + i as u64) } else { send(next_id + i as u64) })
                        .collect();
                    let outstanding = user.put() - tx.sq.taken();
                    let free = num - outstanding;
                    let before = mem.snapshot();
                    let start = user.put();
                    let prev_valid = tx.sq.is_valid(start.wrapping_sub(1));
                    match post_send(&mut user, CFG, &wrs) {
                        Ok(Posted { count, needs_doorbell }) => {
                            prop_assert!(bad_at.is_none());
                            prop_assert!(n as u32 <= free, "posted {} with {} free", n, free);
                            prop_assert_eq!(count, n as u32);
                            prop_assert_eq!(user.put(), start + count);
                            let rule = count > 0 && (count >= num || !prev_valid);
                            prop_assert_eq!(needs_doorbell, rule);
                            if needs_doorbell {
                                tx.doorbell();
                            }
                            next_id += n as u64;
                        }
                        Err(Refused { index, error }) => {
                            match bad_at {
                                Some(b) => {
                                    prop_assert_eq!(index, b);
                                    prop_assert_eq!(error, SiwPostError::Unsupported { what: "SEND_WITH_IMM" });
                                }
                                None => {
                                    prop_assert!(n as u32 > free);
                                    prop_assert_eq!(index, free as usize);
                                    prop_assert_eq!(error, SiwPostError::Post(PostError::QueueFull { op: "post_send", capacity: num }));
                                    prop_assert_eq!(error.errno(), Errno::NOMEM);
                                }
                            }
                            prop_assert_eq!(user.put(), start);
                            let published = published_nothing(&before, &mem.snapshot(), num, start, n);
                            prop_assert_eq!(published, Ok(()));
                        }
                    }
                }
                SqStep::Run { budget } => {
                    let mut got = Vec::new();
                    let r = tx.run(budget, |sqe| got.push(sqe));
                    prop_assert_eq!(r, Ok(()));
                    for sqe in got {
                        prop_assert_eq!(sqe.id, want_id, "SQE lost, duplicated or reordered");
                        prop_assert_eq!(sqe.opcode, SIW_OP_SEND);
                        prop_assert_eq!(sqe.flags, SIW_WQE_VALID | SIW_WQE_SIGNALLED);
                        prop_assert_eq!(sqe.num_sge, 1);
                        prop_assert_eq!((sqe.sge[0].laddr, sqe.sge[0].length, sqe.sge[0].lkey), (0x1000, 8, 7));
                        want_id += 1;
                    }
                }
            }
            // No lost wakeup: an idle kernel has nothing VALID waiting for it.
            prop_assert!(tx.busy || !tx.sq.is_valid(tx.sq.taken()), "kernel idle with SQEs queued");
            prop_assert!(mem.snapshot()[mem.len()..].iter().all(|&b| b == GUARD_BYTE));
        }
    }

    /// Receive direction: RQEs carry flags exactly VALID, in order, intact;
    /// exactly `num` fit; refused batches leave nothing.
    #[test]
    fn recv_queue_against_kernel(
        num in ring_size(),
        steps in prop::collection::vec((any::<bool>(), 0usize..40, 0usize..8), 1..MAX_STEPS),
    ) {
        let mem = TestMem::rq(num);
        let mut user = rq(&mem, num);
        let mut kernel = KernelRq::new(&mem, num);
        let sges = [SGE; 7];
        let (mut next_id, mut want_id, mut outstanding) = (0u64, 0u64, 0u32);
        for (produce, n, nsge) in steps {
            if produce {
                let wrs: Vec<RecvWr<'_>> =
                    (0..n).map(|i| RecvWr { wr_id: next_id + i as u64, sges: &sges[..nsge] }).collect();
                let before = mem.snapshot();
                match post_recv(&mut user, 6, &wrs) {
                    Ok(count) => {
                        prop_assert!(nsge <= 6 || n == 0);
                        prop_assert!(outstanding + n as u32 <= num);
                        prop_assert_eq!(count, n as u32);
                        outstanding += count;
                        next_id += n as u64;
                    }
                    Err(Refused { index, error }) => {
                        if nsge > 6 {
                            prop_assert_eq!(index, 0);
                            prop_assert_eq!(error, SiwPostError::Post(PostError::TooManySges { op: "post_recv", n: nsge, max: 6 }));
                        } else {
                            prop_assert_eq!(index, (num - outstanding) as usize);
                            prop_assert_eq!(error, SiwPostError::Post(PostError::QueueFull { op: "post_recv", capacity: num }));
                        }
                        prop_assert!(mem.snapshot() == before);
                    }
                }
            } else {
                for _ in 0..n {
                    match kernel.take() {
                        None => {
                            prop_assert_eq!(outstanding, 0);
                            break;
                        }
                        Some(r) => {
                            let rqe = r.expect("the kernel takes every RQE we post");
                            prop_assert_eq!(rqe.id, want_id);
                            prop_assert_eq!(rqe.flags, SIW_WQE_VALID);
                            prop_assert_eq!(rqe.sge[..rqe.num_sge as usize].as_bytes(), sges[..rqe.num_sge as usize].as_bytes());
                            // The SGEs past num_sge are whatever the slot
                            // held: the kernel reads num_sge of them only.
                            want_id += 1;
                            outstanding -= 1;
                        }
                    }
                }
            }
            prop_assert!(mem.snapshot()[mem.len()..].iter().all(|&b| b == GUARD_BYTE));
        }
    }

    /// Completion direction and arming: CQEs come out in order, intact, each
    /// slot handed back by clearing its flags byte alone; the kernel
    /// overflows exactly when `num` are ready; an event fires exactly when
    /// the arm asks for that completion (any, or solicited SQ completions for
    /// a solicited-only arm), and firing disarms.
    #[test]
    fn completion_queue_and_arming(
        num in ring_size(),
        steps in prop::collection::vec((0u8..4, 0u32..40, any::<bool>()), 1..MAX_CQ_STEPS),
    ) {
        let mem = TestMem::cq(num);
        let mut user = cq(&mem, num);
        let mut kernel = KernelCq::new(&mem, num);
        prop_assert_eq!(user.capacity(), num);
        prop_assert_eq!(user.armed(), SIW_NOTIFY_NOT);
        let mut ready: VecDeque<u64> = VecDeque::new();
        let mut armed = SIW_NOTIFY_NOT;
        let mut next_id = 0u64;
        let mut out = vec![WorkCompletion::default(); 40];
        for (kind, n, flag) in steps {
            match kind {
                // The kernel completes n sends (solicited ones when `flag`).
                0 | 1 => for _ in 0..n {
                    let full = ready.len() as u32 == num;
                    let sqe = siw_sqe {
                        id: next_id,
                        opcode: SIW_OP_SEND,
                        flags: SIW_WQE_SIGNALLED | if flag { SIW_WQE_SOLICITED } else { 0 },
                        ..siw_sqe::default()
                    };
                    let r = if kind == 0 {
                        kernel.complete_send(&sqe, 8, SIW_WC_SUCCESS, 9)
                    } else {
                        let rqe = siw_rqe { id: next_id, ..siw_rqe::default() };
                        kernel.complete_recv(&rqe, 8, SIW_WC_SUCCESS, 9)
                    };
                    if full {
                        prop_assert_eq!(r, Err(CqOverflow));
                        continue;
                    }
                    let solicited = kind == 0 && flag;
                    let fire = armed & SIW_NOTIFY_NEXT_COMPLETION != 0
                        || (armed & SIW_NOTIFY_SOLICITED != 0 && solicited);
                    prop_assert_eq!(r, Ok(fire));
                    if fire {
                        armed = SIW_NOTIFY_NOT;
                    }
                    prop_assert_eq!(user.armed(), armed);
                    ready.push_back(next_id);
                    next_id += 1;
                },
                // User space polls up to n.
                2 => {
                    let before = mem.snapshot();
                    let get = user.get();
                    let got = poll(&mut user, &mut out[..n as usize]);
                    prop_assert_eq!(got, (n as usize).min(ready.len()));
                    let after = mem.snapshot();
                    for (i, wc) in out[..got].iter().enumerate() {
                        prop_assert_eq!(wc.wr_id(), ready.pop_front().unwrap());
                        prop_assert_eq!(wc.byte_len(), 8);
                        prop_assert_eq!(wc.qp_num(), 9);
                        prop_assert_eq!(wc.status(), WcStatus::Success);
                        // Only the flags byte of each polled slot changed, to 0.
                        let slot = ((get + i as u32) % num) as usize * CQE_LEN;
                        prop_assert_eq!(after[slot + 8], 0);
                    }
                    let changed: Vec<usize> = (0..after.len()).filter(|&i| before[i] != after[i]).collect();
                    prop_assert!(changed.iter().all(|&i| i % CQE_LEN == 8 && i < mem.len() - 8));
                    prop_assert_eq!(changed.len(), got);
                }
                // User space arms (solicited only when `flag`).
                _ => {
                    let before = mem.snapshot();
                    user.arm(flag);
                    armed = if flag { SIW_NOTIFY_SOLICITED } else { SIW_NOTIFY_SOLICITED | SIW_NOTIFY_NEXT_COMPLETION };
                    prop_assert_eq!(kernel.ctrl().load(Ordering::Relaxed), armed);
                    let after = mem.snapshot();
                    let ctrl = mem.len() - 8;
                    prop_assert!(before[..ctrl] == after[..ctrl] && before[ctrl + 4..] == after[ctrl + 4..]);
                }
            }
        }
    }

    /// Every supported op lands in the SQE exactly as the kernel reads it:
    /// the head and the `num_sge` SGEs written over stale bytes, the SGEs
    /// after them (which the kernel does not read) left as they were, no
    /// byte of another slot or past the ring touched; the kernel accepts it.
    #[test]
    fn sqe_layout(
        op_kind in 0u8..3,
        sges in prop::collection::vec((any::<u64>(), 0u32..1 << 20, any::<u32>()), 0..=6),
        wr_id in any::<u64>(),
        raddr in any::<u64>(),
        rkey in any::<u32>(),
        flags in 0u32..8,
        sig_all in any::<bool>(),
        slot in 0u32..4,
    ) {
        let remote = Remote { addr: raddr, rkey };
        let op = match op_kind {
            0 => SendOp::Send { imm: None },
            1 => SendOp::RdmaWrite { remote, imm: None },
            _ => SendOp::RdmaRead { remote },
        };
        let mut sges: Vec<Sge> =
            sges.into_iter().map(|(addr, length, lkey)| Sge { addr, length, lkey }).collect();
        let mut flags = SendFlags::from_bits_truncate(flags);
        if op_kind == 2 {
            sges.truncate(1);
            flags.remove(SendFlags::FENCE);
        }
        let num = 4;
        let mem = TestMem::sq(num);
        // Stale bytes everywhere but in the flags words (which stay 0: free).
        for s in 0..num as usize {
            mem.write(s * SQE, &[0xa5; 8]);
            mem.write(s * SQE + 10, &[0xa5; SQE - 10]);
        }
        let mut user = sq(&mem, num);
        let mut kernel = KernelSq::new(&mem, num);
        // Move to `slot` by posting and taking that many.
        for i in 0..slot {
            post_send(&mut user, CFG, &[send(u64::from(i))]).unwrap();
            kernel.take().unwrap().unwrap();
        }
        let cfg = SendConfig { max_sge: 6, max_inline: SIW_MAX_INLINE, sig_all };
        let wr = SendWr { wr_id, op, flags, payload: Payload::Sges(&sges), ud: None };
        let before = mem.snapshot();
        post_send(&mut user, cfg, &[wr]).unwrap();
        let after = mem.snapshot();
        let at = slot as usize * SQE;
        prop_assert!(before[..at] == after[..at], "bytes before the slot changed");
        prop_assert!(before[at + SQE..] == after[at + SQE..], "bytes after the slot changed");
        let sqe = siw_sqe::read_from_bytes(&after[at..at + SQE]).unwrap();
        prop_assert_eq!(sqe.id, wr_id);
        prop_assert_eq!(sqe.opcode, [SIW_OP_SEND, SIW_OP_WRITE, SIW_OP_READ][op_kind as usize]);
        let mut want_flags = SIW_WQE_VALID;
        if flags.contains(SendFlags::SIGNALED) || sig_all { want_flags |= SIW_WQE_SIGNALLED; }
        if flags.contains(SendFlags::SOLICITED) { want_flags |= SIW_WQE_SOLICITED; }
        if flags.contains(SendFlags::FENCE) { want_flags |= SIW_WQE_READ_FENCE; }
        prop_assert_eq!(sqe.flags, want_flags);
        let (want_raddr, want_rkey) = if op_kind == 0 { (0, 0) } else { (raddr, rkey) };
        prop_assert_eq!((sqe.raddr, sqe.rkey), (want_raddr, want_rkey));
        prop_assert_eq!(sqe.num_sge as usize, sges.len());
        prop_assert_eq!(sqe.sge[..sges.len()].as_bytes(), sges.as_bytes());
        let unused = at + std::mem::offset_of!(siw_sqe, sge) + sges.len() * size_of::<Sge>();
        prop_assert!(before[unused..at + SQE] == after[unused..at + SQE], "unused SGEs written");
        let taken = kernel.take().unwrap();
        prop_assert_eq!(taken.map(|s| s.id), Ok(wr_id));
    }

    /// Inline data: packed into sge[1..], total in sge[0].length, INLINE set,
    /// accepted by the kernel's checks; up to 80 bytes in any segmentation,
    /// over a stale slot whose other bytes (`sge[0]`'s address and key,
    /// which the kernel sets itself, and the room after the data) are left
    /// as they were.
    #[test]
    fn inline_layout(
        segs in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..30), 0..8),
        write in any::<bool>(),
    ) {
        let total: usize = segs.iter().map(Vec::len).sum();
        let seg_refs: Vec<&[u8]> = segs.iter().map(Vec::as_slice).collect();
        let remote = Remote { addr: 0x4000, rkey: 3 };
        let op = if write { SendOp::RdmaWrite { remote, imm: None } } else { SendOp::Send { imm: None } };
        let mem = TestMem::sq(2);
        // Stale bytes everywhere but in the flags words (which stay 0: free).
        mem.write(0, &[0xa5; 8]);
        mem.write(10, &[0xa5; SQE - 10]);
        let mut user = sq(&mem, 2);
        let wr = SendWr { wr_id: 5, op, flags: SendFlags::empty(), payload: Payload::Inline(&seg_refs), ud: None };
        let before = mem.snapshot();
        let r = post_send(&mut user, CFG, &[wr]);
        if total > 80 {
            prop_assert_eq!(r, Err(Refused { index: 0, error: SiwPostError::Post(PostError::InlineTooLong { len: total as u64, max: 80 }) }));
            prop_assert!(mem.snapshot() == before);
            return Ok(());
        }
        prop_assert!(r.is_ok());
        let sqe = KernelSq::new(&mem, 2).take().unwrap().expect("kernel accepts the inline SQE");
        prop_assert_eq!(sqe.flags, SIW_WQE_VALID | SIW_WQE_INLINE);
        prop_assert_eq!(sqe.num_sge, 1);
        prop_assert_eq!(sqe.sge[0].length as usize, total);
        prop_assert_eq!((sqe.sge[0].laddr, sqe.sge[0].lkey), (u64::from_ne_bytes([0xa5; 8]), u32::from_ne_bytes([0xa5; 4])));
        let data = sqe.sge[1..].as_bytes();
        let want = segs.concat();
        prop_assert_eq!(&data[..total], want.as_slice());
        prop_assert!(data[total..].iter().all(|&b| b == 0xa5), "room after the data written");
    }
}

/// Many laps of a 4-slot SQ, one by one and in full batches.
#[test]
fn wrap_around_many_laps() {
    let mem = TestMem::sq(4);
    let mut user = sq(&mem, 4);
    let mut kernel = KernelSq::new(&mem, 4);
    let (mut id, mut want) = (0u64, 0u64);
    let rounds = crate::provider::ring_test_len(10_000, 40);
    for round in 0..rounds {
        let n = if round % 2 == 0 { 1 } else { 4 };
        let wrs: Vec<SendWr<'_>> = (0..n).map(|i| send(id + i)).collect();
        post_send(&mut user, CFG, &wrs).unwrap();
        id += n;
        if n == 4 {
            // Full: one more does not fit.
            assert_eq!(
                post_send(&mut user, CFG, &[send(id)]).map(|_| ()),
                Err(Refused {
                    index: 0,
                    error: PostError::QueueFull {
                        op: "post_send",
                        capacity: 4
                    }
                    .into()
                })
            );
        }
        while let Some(sqe) = kernel.take() {
            assert_eq!(sqe.unwrap().id, want);
            want += 1;
        }
    }
    assert_eq!(want, rounds / 2 * 5);
    assert_eq!(u64::from(user.put()), rounds / 2 * 5);
}

/// A batch that fills the whole ring always rings (the SQE before it is one
/// of its own); an empty batch never does.
#[test]
fn doorbell_edges() {
    let mem = TestMem::sq(4);
    let mut user = sq(&mem, 4);
    let mut kernel = KernelSq::new(&mem, 4);
    assert_eq!(
        post_send(&mut user, CFG, &[]),
        Ok(Posted {
            count: 0,
            needs_doorbell: false
        })
    );
    // First post ever: the slot "before" (3) is free.
    assert!(
        post_send(&mut user, CFG, &[send(0)])
            .unwrap()
            .needs_doorbell
    );
    // The kernel has not taken SQE 0: no doorbell for SQE 1.
    assert!(
        !post_send(&mut user, CFG, &[send(1)])
            .unwrap()
            .needs_doorbell
    );
    kernel.take().unwrap().unwrap();
    // SQE 0 taken, SQE 1 (before the batch) still VALID: no doorbell.
    assert!(
        !post_send(&mut user, CFG, &[send(2)])
            .unwrap()
            .needs_doorbell
    );
    while kernel.take().is_some() {}
    let four: Vec<SendWr<'_>> = (3..7).map(send).collect();
    assert!(post_send(&mut user, CFG, &four).unwrap().needs_doorbell);
}

/// Requests siw cannot carry are refused with typed errors, alone or in the
/// middle of a batch, and nothing is written.
#[test]
fn refused_requests_leave_nothing_behind() {
    let remote = Remote {
        addr: 0x2000,
        rkey: 2,
    };
    let two = [SGE; 2];
    let seven = [SGE; 7];
    let huge = [
        Sge {
            length: u32::MAX,
            ..SGE
        },
        SGE,
    ];
    let one = std::slice::from_ref(&SGE);
    let wr = |op, flags, payload| SendWr {
        wr_id: 1,
        op,
        flags,
        payload,
        ud: None,
    };
    let sig = SendFlags::SIGNALED;
    let unsupported = |what| SiwPostError::Unsupported { what };
    let cases: Vec<(SendWr<'_>, SiwPostError)> = vec![
        (
            wr(SendOp::Send { imm: Some(5) }, sig, Payload::Sges(one)),
            unsupported("SEND_WITH_IMM"),
        ),
        (
            wr(
                SendOp::RdmaWrite {
                    remote,
                    imm: Some(5),
                },
                sig,
                Payload::Sges(one),
            ),
            unsupported("RDMA_WRITE_WITH_IMM"),
        ),
        (
            wr(
                SendOp::CompareSwap {
                    remote,
                    compare: 1,
                    swap: 2,
                },
                sig,
                Payload::Sges(one),
            ),
            unsupported("ATOMIC_CMP_AND_SWP"),
        ),
        (
            wr(SendOp::FetchAdd { remote, add: 1 }, sig, Payload::Sges(one)),
            unsupported("ATOMIC_FETCH_AND_ADD"),
        ),
        (
            wr(SendOp::LocalInv { rkey: 7 }, sig, Payload::Sges(&[])),
            unsupported("LOCAL_INV"),
        ),
        (
            wr(SendOp::SendWithInv { rkey: 7 }, sig, Payload::Sges(one)),
            unsupported("SEND_WITH_INV"),
        ),
        (
            SendWr {
                ud: Some(UdDest::from_raw(1, 2, 3)),
                ..send(1)
            },
            unsupported("a UD destination"),
        ),
        (
            wr(
                SendOp::RdmaRead { remote },
                sig | SendFlags::FENCE,
                Payload::Sges(one),
            ),
            SiwPostError::FencedRead,
        ),
        (
            wr(SendOp::RdmaRead { remote }, sig, Payload::Sges(&two)),
            PostError::TooManySges {
                op: "post_send",
                n: 2,
                max: 1,
            }
            .into(),
        ),
        (
            wr(SendOp::RdmaRead { remote }, sig, Payload::Inline(&[b"abc"])),
            PostError::InlineNotAllowed {
                opcode: "RDMA_READ",
            }
            .into(),
        ),
        (
            wr(
                SendOp::Send { imm: None },
                sig,
                Payload::Inline(&[&[0; 40], &[0; 41]]),
            ),
            PostError::InlineTooLong { len: 81, max: 80 }.into(),
        ),
        (
            wr(SendOp::Send { imm: None }, sig, Payload::Sges(&seven)),
            PostError::TooManySges {
                op: "post_send",
                n: 7,
                max: 6,
            }
            .into(),
        ),
        (
            wr(SendOp::Send { imm: None }, sig, Payload::Sges(&huge)),
            PostError::TooLong {
                op: "post_send",
                len: u64::from(u32::MAX) + 8,
            }
            .into(),
        ),
    ];
    let mem = TestMem::sq(8);
    let mut user = sq(&mem, 8);
    // One already posted, so the view is not at slot 0.
    post_send(&mut user, CFG, &[send(0)]).unwrap();
    for (wr, error) in cases {
        assert_eq!(check_send(CFG, &wr), Err(error));
        assert_eq!(error.errno(), Errno::INVAL, "{error}");
        let before = mem.snapshot();
        assert_eq!(
            post_send(&mut user, CFG, &[wr]),
            Err(Refused { index: 0, error })
        );
        assert!(mem.snapshot() == before, "{error}: the single post wrote");
        assert_eq!(
            post_send(&mut user, CFG, &[send(1), send(2), wr, send(3)]),
            Err(Refused { index: 2, error })
        );
        let after = mem.snapshot();
        assert_eq!(
            published_nothing(&before, &after, 8, 1, 4),
            Ok(()),
            "{error}"
        );
        // Checked before written: the refused request's slot (3) and the
        // one after it are as they were.
        assert!(
            after[3 * SQE..5 * SQE] == before[3 * SQE..5 * SQE],
            "{error}"
        );
        assert_eq!(user.put(), 1);
    }
    // The QP's own SGE limit caps the 6 of a slot.
    let small = SendConfig {
        max_sge: 1,
        max_inline: 8,
        sig_all: false,
    };
    assert_eq!(
        check_send(
            small,
            &wr(SendOp::Send { imm: None }, sig, Payload::Sges(&two))
        ),
        Err(PostError::TooManySges {
            op: "post_send",
            n: 2,
            max: 1
        }
        .into())
    );
    // ... and the QP's own inline limit caps siw's 80 bytes.
    let nine = [0u8; 9];
    let segs: &[&[u8]] = &[&nine[..]];
    assert_eq!(
        check_send(
            small,
            &wr(SendOp::Send { imm: None }, sig, Payload::Inline(segs))
        ),
        Err(PostError::InlineTooLong { len: 9, max: 8 }.into())
    );
    assert_eq!(
        check_send(
            small,
            &wr(
                SendOp::Send { imm: None },
                sig,
                Payload::Inline(&[&nine[..8]])
            )
        ),
        Ok(())
    );
    // Receives: too many SGEs and length overflow.
    let rmem = TestMem::rq(2);
    let mut r = rq(&rmem, 2);
    let before = rmem.snapshot();
    assert_eq!(
        post_recv(
            &mut r,
            2,
            &[
                RecvWr {
                    wr_id: 1,
                    sges: one
                },
                RecvWr {
                    wr_id: 2,
                    sges: &[SGE; 3]
                }
            ]
        ),
        Err(Refused {
            index: 1,
            error: PostError::TooManySges {
                op: "post_recv",
                n: 3,
                max: 2
            }
            .into()
        })
    );
    assert_eq!(
        post_recv(
            &mut r,
            6,
            &[RecvWr {
                wr_id: 1,
                sges: &huge
            }]
        ),
        Err(Refused {
            index: 0,
            error: PostError::TooLong {
                op: "post_recv",
                len: u64::from(u32::MAX) + 8
            }
            .into()
        })
    );
    assert!(rmem.snapshot() == before);
    assert_eq!(r.put(), 0);
}

/// A zero-SGE receive is posted (the kernel accepts it: a zero-length
/// message), with flags exactly VALID.
#[test]
fn empty_receive_is_posted() {
    let mem = TestMem::rq(2);
    let mut r = rq(&mem, 2);
    assert_eq!(
        post_recv(
            &mut r,
            6,
            &[RecvWr {
                wr_id: 4,
                sges: &[]
            }]
        ),
        Ok(1)
    );
    let rqe = KernelRq::new(&mem, 2).take().unwrap().unwrap();
    assert_eq!((rqe.id, rqe.flags, rqe.num_sge), (4, SIW_WQE_VALID, 0));
}

/// CQEs as the kernel fills them map to the crate's completions.
#[test]
fn cqe_to_work_completion() {
    let statuses = [
        WcStatus::Success,
        WcStatus::LocLenErr,
        WcStatus::LocProtErr,
        WcStatus::LocQpOpErr,
        WcStatus::WrFlushErr,
        WcStatus::BadRespErr,
        WcStatus::LocAccessErr,
        WcStatus::RemAccessErr,
        WcStatus::RemInvReqErr,
        WcStatus::GeneralErr,
    ];
    for (raw, want) in statuses.iter().enumerate() {
        assert_eq!(wc_status(raw as u16), *want);
    }
    assert_eq!(wc_status(10), WcStatus::Unknown(10));
    assert_eq!(wc_status(0xffff), WcStatus::Unknown(0xffff));
    let opcodes = [
        (0, WcOpcode::RdmaWrite),
        (1, WcOpcode::RdmaRead),
        (2, WcOpcode::RdmaRead),
        (3, WcOpcode::Send),
        (4, WcOpcode::Send),
        (5, WcOpcode::Send),
        (6, WcOpcode::FetchAdd),
        (7, WcOpcode::CompSwap),
        (8, WcOpcode::Recv),
        (9, WcOpcode::Unknown(9)),
        (10, WcOpcode::LocalInv),
        (11, WcOpcode::Unknown(11)),
        (200, WcOpcode::Unknown(200)),
    ];
    for (raw, want) in opcodes {
        assert_eq!(wc_opcode(raw), want, "opcode {raw}");
    }
    let cqe = siw_cqe {
        id: 0xdead_beef,
        flags: SIW_WQE_VALID as u8,
        opcode: SIW_OP_RECEIVE,
        status: SIW_WC_WR_FLUSH_ERR,
        bytes: 77,
        imm_data: 0,
        qp_id: 0x1_0000_0011,
    };
    let wc = completion(&cqe);
    assert_eq!(wc.wr_id(), 0xdead_beef);
    assert_eq!(wc.raw_opcode(), WcOpcode::Recv);
    assert_eq!(wc.status(), WcStatus::WrFlushErr);
    assert_eq!(wc.byte_len(), 77);
    assert_eq!(wc.qp_num(), 0x11);
    assert_eq!(
        (wc.wc_flags(), wc.imm_data(), wc.vendor_err()),
        (WcFlags::empty(), None, 0)
    );
    assert_eq!(wc.invalidated_rkey(), None);
    // The union's bytes and REM_INVAL, which the kernel sets only for
    // kernel CQs, are not read: no flags, no key, no immediate data.
    let mut inv = siw_cqe {
        flags: (SIW_WQE_VALID | SIW_WQE_REM_INVAL) as u8,
        ..cqe
    };
    inv.as_mut_bytes()[16..24].copy_from_slice(&0x1234_5678_9abc_def0u64.to_ne_bytes());
    let wc = completion(&inv);
    assert_eq!(wc.wc_flags(), WcFlags::empty());
    assert_eq!(wc.invalidated_rkey(), None);
    assert_eq!(wc.imm_data(), None);
    assert_eq!(wc.as_raw(), completion(&cqe).as_raw());
}

/// A CQE becomes the kernel's `ib_uverbs_wc`: each status and opcode
/// reads back as `wc_status` / `wc_opcode` map it; an unknown siw value
/// stays `Unknown` of itself, or tagged when the kernel's enum defines its
/// number (it must never read as a status or opcode it is not).
#[test]
fn cqe_statuses_and_opcodes_read_back_from_the_kernels_layout() {
    let cqe = |status: u16, opcode: u8| siw_cqe {
        id: 1,
        flags: SIW_WQE_VALID as u8,
        opcode,
        status,
        bytes: 0,
        imm_data: 0,
        qp_id: 5,
    };
    for status in 0..=u16::MAX {
        let got = completion(&cqe(status, SIW_OP_SEND)).status();
        match wc_status(status) {
            WcStatus::Unknown(v) if (10..=21).contains(&v) => {
                assert_eq!(got, WcStatus::Unknown(v | UNKNOWN_TAG), "status {status}")
            }
            want => assert_eq!(got, want, "status {status}"),
        }
    }
    for opcode in 0..=u8::MAX {
        let got = completion(&cqe(0, opcode)).opcode();
        match wc_opcode(opcode) {
            WcOpcode::Unknown(v @ (128 | 129)) => {
                assert_eq!(
                    got,
                    Some(WcOpcode::Unknown(v | UNKNOWN_TAG)),
                    "opcode {opcode}"
                )
            }
            want => assert_eq!(got, Some(want), "opcode {opcode}"),
        }
    }
    let wc = completion(&cqe(10, 128));
    assert!(!wc.is_success());
    assert_eq!(wc.status(), WcStatus::Unknown(0x8000_000a));
    assert_eq!(wc.raw_opcode(), WcOpcode::Unknown(0x8000_0080));
    assert_eq!(
        completion(&cqe(0xffff, 200)).status(),
        WcStatus::Unknown(0xffff)
    );
    assert_eq!(
        completion(&cqe(0, 200)).opcode(),
        Some(WcOpcode::Unknown(200))
    );
}

/// The kernel's flush (QP to error) completes the SQEs left VALID with
/// WR_FLUSH_ERR, and user space reads them back as such.
#[test]
fn flushed_sends_read_back() {
    let (smem, cmem) = (TestMem::sq(4), TestMem::cq(4));
    let mut user_sq = sq(&smem, 4);
    let mut user_cq = cq(&cmem, 4);
    let mut ksq = KernelSq::new(&smem, 4);
    let mut kcq = KernelCq::new(&cmem, 4);
    let wrs: Vec<SendWr<'_>> = (10..13).map(send).collect();
    post_send(&mut user_sq, CFG, &wrs).unwrap();
    while let Some(sqe) = ksq.take() {
        kcq.complete_send(&sqe.unwrap(), 0, SIW_WC_WR_FLUSH_ERR, 3)
            .unwrap();
    }
    let mut out = [WorkCompletion::default(); 8];
    assert_eq!(poll(&mut user_cq, &mut out), 3);
    for (wc, id) in out[..3].iter().zip(10..) {
        assert_eq!(
            (wc.wr_id(), wc.status(), wc.raw_opcode(), wc.qp_num()),
            (id, WcStatus::WrFlushErr, WcOpcode::Send, 3)
        );
    }
    assert_eq!(poll(&mut user_cq, &mut out), 0);
}

#[test]
fn mappings_are_checked() {
    let mem = TestMem::cq(4);
    let check_sq = |len, num| {
        assert!(len <= mem.len());
        // SAFETY: len never exceeds the live allocation (asserted); the view
        // is dropped at once.
        unsafe { Producer::<siw_sqe>::from_raw(mem.base(), len, num) }.map(|_| ())
    };
    assert_eq!(check_sq(SQE, 1), Ok(()));
    assert_eq!(
        check_sq(SQE, 0),
        Err(LayoutError::Count {
            ring: "siw send queue",
            num: 0
        })
    );
    assert_eq!(
        check_sq(mem.len(), 3),
        Err(LayoutError::Count {
            ring: "siw send queue",
            num: 3
        })
    );
    assert_eq!(
        check_sq(SQE, 2),
        Err(LayoutError::TooShort {
            ring: "siw send queue",
            num: 2,
            elem: SQE,
            tail: 0,
            need: 2 * SQE,
            len: SQE
        })
    );
    // SAFETY: as above; the length lies inside the allocation.
    let rq = unsafe { Producer::<siw_rqe>::from_raw(mem.base(), RQE - 1, 1) }.map(|_| ());
    assert_eq!(
        rq,
        Err(LayoutError::TooShort {
            ring: "siw receive queue",
            num: 1,
            elem: RQE,
            tail: 0,
            need: RQE,
            len: RQE - 1
        })
    );
    // The CQ needs its arming word after the CQEs.
    let check_cq = |len, num| {
        assert!(len <= mem.len());
        // SAFETY: as above.
        unsafe { CqConsumer::from_raw(mem.base(), len, num) }.map(|_| ())
    };
    assert_eq!(check_cq(4 * CQE_LEN + 8, 4), Ok(()));
    assert_eq!(
        check_cq(4 * CQE_LEN + 7, 4),
        Err(LayoutError::TooShort {
            ring: "siw completion queue",
            num: 4,
            elem: CQE_LEN,
            tail: 8,
            need: 4 * CQE_LEN + 8,
            len: 4 * CQE_LEN + 7
        })
    );
    // SAFETY: as above; 1 + 5 * CQE_LEN < the allocation.
    let odd = unsafe { std::ptr::NonNull::new_unchecked(mem.base().as_ptr().add(1)) };
    // SAFETY: the range lies inside the allocation; refused before any access.
    let r = unsafe { CqConsumer::from_raw(odd, 2 * CQE_LEN, 1) }.map(|_| ());
    assert_eq!(
        r,
        Err(LayoutError::Misaligned {
            ring: "siw completion queue",
            addr: odd.as_ptr() as usize
        })
    );
    // A count whose size overflows is refused, not wrapped.
    assert!(matches!(
        check_sq(mem.len(), 1 << 31),
        Err(LayoutError::TooShort { .. })
    ));
    assert_eq!(mem.snapshot()[mem.len()..], [GUARD_BYTE; GUARD]);
}

/// `build_sqe` and the queue agree with `QueueFull`'s `free` count.
#[test]
fn queue_full_counts_free_slots() {
    let mem = TestMem::sq(4);
    let mut user = sq(&mem, 4);
    let wrs: Vec<SendWr<'_>> = (0..3).map(send).collect();
    post_send(&mut user, CFG, &wrs).unwrap();
    assert_eq!(user.free_ahead(4), 1);
    let sqes = (0..2u32).map(|i| build_sqe(CFG, &send(i.into())));
    assert_eq!(
        user.post(sqes),
        Err(QueueFull {
            free: 1,
            capacity: 4
        })
    );
}

/// Memory ordering and the doorbell, with the kernel model in a second
/// thread that sleeps whenever it finds the SQ empty and wakes only on a
/// doorbell: every SQE arrives whole and in order, and no doorbell is missed
/// (a missed one leaves the kernel asleep with work queued: the deadline
/// fails the test). Without the SeqCst fence in the doorbell decision, the
/// store of VALID may pass the load of the previous SQE even on x86.
#[test]
fn two_threads_send_and_doorbell() {
    for num in [1u32, 4, 16] {
        let mem = TestMem::sq(num);
        let doorbells = AtomicU64::new(0);
        let total = crate::provider::ring_test_len(40_000, 120);
        let deadline = Instant::now() + crate::provider::RING_TEST_PATIENCE;
        std::thread::scope(|s| {
            let kernel = s.spawn(|| {
                let mut k = KernelSq::new(&mem, num);
                let mut want = 0u64;
                while want < total {
                    let rung = doorbells.load(Ordering::Acquire);
                    while let Some(sqe) = k.take() {
                        let sqe = sqe.expect("kernel accepts the SQE");
                        assert_eq!(sqe.id, want, "torn or reordered SQE");
                        assert_eq!(sqe.sge[0].laddr, 0x1000 + want);
                        want += 1;
                    }
                    if want < total {
                        wait_until(deadline, "a doorbell (a missed one hangs here)", || {
                            doorbells.load(Ordering::Acquire) != rung
                        });
                    }
                }
            });
            let mut user = sq(&mem, num);
            let mut id = 0u64;
            while id < total {
                let n = (1 + id % 5).min(total - id).min(u64::from(num));
                let sges: Vec<Sge> = (id..id + n)
                    .map(|i| Sge {
                        addr: 0x1000 + i,
                        ..SGE
                    })
                    .collect();
                let wrs: Vec<SendWr<'_>> = (0..n as usize)
                    .map(|i| SendWr {
                        payload: Payload::Sges(&sges[i..=i]),
                        ..send(id + i as u64)
                    })
                    .collect();
                match post_send(&mut user, CFG, &wrs) {
                    Ok(p) => {
                        if p.needs_doorbell {
                            doorbells.fetch_add(1, Ordering::AcqRel);
                        }
                        id += n;
                    }
                    Err(_) => {
                        assert!(Instant::now() < deadline, "timed out on a full SQ");
                        std::thread::yield_now();
                    }
                }
            }
            kernel.join().expect("kernel thread");
        });
    }
}

/// Memory ordering and arming: the kernel model completes in a second thread
/// and signals an event whenever the arm asks; user space polls, and when it
/// finds nothing arms, polls once more and only then waits for an event.
/// Every CQE arrives whole, in order, and no wait is left without its event
/// (the deadline fails the test otherwise). Without the SeqCst fence after
/// the arm, the poll's load may pass the arm's store.
#[test]
fn two_threads_completions_and_events() {
    for num in [1u32, 4, 16] {
        let mem = TestMem::cq(num);
        let events = AtomicU64::new(0);
        let total = crate::provider::ring_test_len(40_000, 120);
        let deadline = Instant::now() + crate::provider::RING_TEST_PATIENCE;
        std::thread::scope(|s| {
            let kernel = s.spawn(|| {
                let mut k = KernelCq::new(&mem, num);
                for id in 0..total {
                    let mut fired = Err(CqOverflow);
                    wait_until(deadline, "a free CQ slot", || {
                        fired = k.push(
                            id,
                            SIW_OP_SEND,
                            SIW_WC_SUCCESS,
                            id as u32,
                            1,
                            SIW_WQE_SOLICITED,
                        );
                        fired.is_ok()
                    });
                    if fired == Ok(true) {
                        events.fetch_add(1, Ordering::AcqRel);
                    }
                }
            });
            let mut user = cq(&mem, num);
            let mut out = [WorkCompletion::default(); 7];
            let mut want = 0u64;
            while want < total {
                let seen = events.load(Ordering::Acquire);
                let mut n = poll(&mut user, &mut out);
                if n == 0 {
                    // Both kinds of arm: every CQE is a solicited one.
                    user.arm(want % 2 == 0);
                    n = poll(&mut user, &mut out);
                    if n == 0 {
                        wait_until(
                            deadline,
                            "a completion event (a lost one hangs here)",
                            || events.load(Ordering::Acquire) != seen,
                        );
                    }
                }
                for wc in &out[..n] {
                    assert_eq!(
                        (wc.wr_id(), wc.byte_len()),
                        (want, want as u32),
                        "torn or reordered CQE"
                    );
                    want += 1;
                }
            }
            kernel.join().expect("kernel thread");
        });
    }
}
