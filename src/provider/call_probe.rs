//! The measured calls of the instruction-count probes of the whole public
//! data-path calls (`rxe::call_probe::rxe_calls_loop`,
//! `siw::wiring_tests::siw_calls_loop`), and the budget of each: what it
//! costs, in user-space instructions (callgrind's Ir) per call averaged
//! over the loop, first (cold) call included. `tools/ir-budget.sh` runs
//! each loop under callgrind and fails when a call costs more than its
//! budget here; lower a budget when a change makes a call cheaper, raise
//! it only with the reason in the commit.
//!
//! Each loop posts one receive (one SGE) [`ITERS`] times through
//! [`probe_post_recv`], then as many through [`probe_post_recv_exclusive`];
//! after each the fake kernel consumes it and writes one completion, which
//! [`probe_poll`] takes. Then, the QP moved to a state that takes sends,
//! it posts one signalled one-SGE WRITE [`ITERS`] times through
//! [`probe_post_send`] and as many through [`probe_post_send_exclusive`],
//! then batches of four, READs into one SGE, SENDs of 64 inline bytes and
//! WRITEs from two and from three SGEs ([`send_loop`]), the doorbell written to `/dev/null` (so the count holds the `write`
//! wrapper, as on a device), the fake kernel taking each WQE after it.
//! The host's `write` is the dynamic glibc's, about 50 Ir with its
//! cancellation points where the guest's static one costs 7, and the
//! probes' own frames are counted: a post_send here costs about 60 Ir more
//! than the guest's benches/ops counts for the same function.

use crate::cq::CompletionQueue;
use crate::qp::QueuePair;
use crate::wr::{RecvWr, SendWr, WorkCompletion};

/// Iterations of each loop, per kind of post.
pub(crate) const ITERS: u64 = 200;

/// (driver, measured function, budget in Ir per call). The driver names
/// the loop (`rxe`: `provider::rxe::call_probe::rxe_calls_loop`, `siw`:
/// `provider::siw::wiring_tests::siw_calls_loop`); the function is the
/// symbol callgrind sees.
#[allow(dead_code)] // read by tools/ir-budget.sh, from this source
pub(crate) const BUDGETS: &[(&str, &str, u32)] = &[
    ("rxe", "probe_poll", 60),
    ("rxe", "probe_post_recv", 95),
    ("rxe", "probe_post_recv_exclusive", 92),
    ("siw", "probe_poll", 76),
    ("siw", "probe_post_recv", 75),
    ("siw", "probe_post_recv_exclusive", 71),
    ("rxe", "probe_post_send", 213),
    ("rxe", "probe_post_send_exclusive", 209),
    ("siw", "probe_post_send", 197),
    ("siw", "probe_post_send_exclusive", 192),
    ("rxe", "probe_post_send_batch", 471),
    ("siw", "probe_post_send_batch", 443),
    ("rxe", "probe_post_read", 220),
    ("siw", "probe_post_read", 203),
    ("rxe", "probe_post_inline", 250),
    ("siw", "probe_post_inline", 249),
    ("rxe", "probe_post_write_two", 246),
    ("siw", "probe_post_write_two", 246),
    ("rxe", "probe_post_write_three", 297),
    ("siw", "probe_post_write_three", 275),
];

/// [`CompletionQueue::poll`], not inlined, so callgrind can name it.
#[inline(never)]
pub(crate) fn probe_poll(cq: &CompletionQueue, out: &mut [WorkCompletion]) -> usize {
    cq.poll(out).unwrap_or(0)
}

/// [`QueuePair::post_recv`] of one request, not inlined.
#[inline(never)]
pub(crate) fn probe_post_recv(qp: &QueuePair, wr: &RecvWr<'_>) -> bool {
    // SAFETY: the probes' fake kernels never touch the SGEs' memory.
    unsafe { qp.post_recv(std::slice::from_ref(wr)) }.is_ok()
}

/// [`QueuePair::post_recv_exclusive`] of one request, not inlined.
#[inline(never)]
pub(crate) fn probe_post_recv_exclusive(qp: &mut QueuePair, wr: &RecvWr<'_>) -> bool {
    // SAFETY: as in `probe_post_recv`.
    unsafe { qp.post_recv_exclusive(std::slice::from_ref(wr)) }.is_ok()
}

/// [`QueuePair::post_send`] of one request, not inlined.
#[inline(never)]
pub(crate) fn probe_post_send(qp: &QueuePair, wr: &SendWr<'_>) -> bool {
    // SAFETY: as in `probe_post_recv`.
    unsafe { qp.post_send(std::slice::from_ref(wr)) }.is_ok()
}

/// [`QueuePair::post_send_exclusive`] of one request, not inlined.
#[inline(never)]
pub(crate) fn probe_post_send_exclusive(qp: &mut QueuePair, wr: &SendWr<'_>) -> bool {
    // SAFETY: as in `probe_post_recv`.
    unsafe { qp.post_send_exclusive(std::slice::from_ref(wr)) }.is_ok()
}

/// [`QueuePair::post_send`] of a batch (four WRITEs, each signalled, as
/// siw wants and benches/ops' case 2 posts on siw), not inlined.
#[inline(never)]
pub(crate) fn probe_post_send_batch(qp: &QueuePair, wrs: &[SendWr<'_>]) -> bool {
    // SAFETY: as in `probe_post_recv`.
    unsafe { qp.post_send(wrs) }.is_ok()
}

/// [`QueuePair::post_send`] of one signalled RDMA READ into `sges`, not
/// inlined (the request is made here, so that the body differs from
/// [`probe_post_send`]'s and the two stay separate functions).
#[inline(never)]
pub(crate) fn probe_post_read(qp: &QueuePair, wr_id: u64, sges: &[crate::wr::Sge]) -> bool {
    use crate::wr::{Payload, Remote, SendOp};
    let remote = Remote {
        addr: 0x20000,
        rkey: 9,
    };
    let wr = SendWr::new(wr_id, SendOp::RdmaRead { remote }, Payload::Sges(sges));
    // SAFETY: as in `probe_post_recv`.
    unsafe { qp.post_send(std::slice::from_ref(&wr)) }.is_ok()
}

/// [`QueuePair::post_send`] of one signalled SEND of 64 inline bytes (as
/// benches/ops' case 4), not inlined.
#[inline(never)]
pub(crate) fn probe_post_inline(qp: &QueuePair, wr_id: u64) -> bool {
    use crate::wr::{Payload, SendOp};
    let bytes = [wr_id as u8; 64];
    let segments: [&[u8]; 1] = [&bytes];
    let wr = SendWr::new(
        wr_id,
        SendOp::Send { imm: None },
        Payload::Inline(&segments),
    );
    // SAFETY: as in `probe_post_recv`.
    unsafe { qp.post_send(std::slice::from_ref(&wr)) }.is_ok()
}

/// [`QueuePair::post_send`] of one signalled WRITE gathered from two
/// SGEs, the halves of `sges[0]`, not inlined.
#[inline(never)]
pub(crate) fn probe_post_write_two(qp: &QueuePair, wr_id: u64, sges: &[crate::wr::Sge]) -> bool {
    let two = split::<2>(sges[0]);
    let wr = probe_write(wr_id, &two);
    // SAFETY: as in `probe_post_recv`.
    unsafe { qp.post_send(std::slice::from_ref(&wr)) }.is_ok()
}

/// [`QueuePair::post_send`] of one signalled WRITE gathered from three
/// SGEs, the thirds of `sges[0]`, not inlined: the gather of any number
/// (two SGEs have a writer of their own).
#[inline(never)]
pub(crate) fn probe_post_write_three(qp: &QueuePair, wr_id: u64, sges: &[crate::wr::Sge]) -> bool {
    let three = split::<3>(sges[0]);
    let wr = probe_write(wr_id, &three);
    // SAFETY: as in `probe_post_recv`.
    unsafe { qp.post_send(std::slice::from_ref(&wr)) }.is_ok()
}

/// `sge` cut into `N` consecutive SGEs of equal length (the rest of the
/// division dropped).
fn split<const N: usize>(sge: crate::wr::Sge) -> [crate::wr::Sge; N] {
    let part = sge.length / N as u32;
    std::array::from_fn(|i| crate::wr::Sge {
        addr: sge.addr + u64::from(part) * i as u64,
        length: part,
        ..sge
    })
}

/// The loops' send half: moves `qp` to ERR (which takes sends through the
/// same state check as RTS, and which the fakes reach without a CM or a
/// path), points its doorbell at `/dev/null`, and posts [`probe_write`]
/// from `sges` [`ITERS`] times through [`probe_post_send`], then as many
/// through [`probe_post_send_exclusive`], then [`ITERS`] batches of four
/// through [`probe_post_send_batch`], then [`ITERS`] READs through
/// [`probe_post_read`], then [`ITERS`] inline SENDs through
/// [`probe_post_inline`], then [`ITERS`] WRITEs of two SGEs through
/// [`probe_post_write_two`], then [`ITERS`] of three SGEs through
/// [`probe_post_write_three`]; after each post `taken(n)` has the
/// fake kernel take its `n` WQEs. Not named `probe_*`: tools/ir-budget.sh's
/// `--toggle-collect` pattern would toggle collection on here and off
/// again inside each measured probe.
pub(crate) fn send_loop(qp: &mut QueuePair, sges: &[crate::wr::Sge], mut taken: impl FnMut(u64)) {
    use crate::command::{QpAttr, QpState};
    qp.modify(&QpAttr::new().state(QpState::Err)).unwrap();
    let doorbell = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/null")
        .expect("/dev/null");
    qp.doorbell_to(std::os::fd::AsRawFd::as_raw_fd(&doorbell));
    for exclusive in [false, true] {
        for i in 0..ITERS {
            let wr = probe_write(i, sges);
            let posted = match exclusive {
                false => probe_post_send(qp, &wr),
                true => probe_post_send_exclusive(qp, &wr),
            };
            assert!(posted);
            taken(1);
        }
    }
    for i in 0..ITERS {
        let batch = [0, 1, 2, 3].map(|k| probe_write(4 * i + k, sges));
        assert!(probe_post_send_batch(qp, &batch));
        taken(4);
    }
    for i in 0..ITERS {
        assert!(probe_post_read(qp, i, sges));
        taken(1);
    }
    for i in 0..ITERS {
        assert!(probe_post_inline(qp, i));
        taken(1);
    }
    for i in 0..ITERS {
        assert!(probe_post_write_two(qp, i, sges));
        taken(1);
    }
    for i in 0..ITERS {
        assert!(probe_post_write_three(qp, i, sges));
        taken(1);
    }
    // The doorbell's descriptor closes here: no post follows.
    qp.doorbell_to(-1);
}

/// The probes' WRITE: signalled, one SGE of 64 bytes, as benches/ops'
/// case 1.
pub(crate) fn probe_write<'a>(wr_id: u64, sges: &'a [crate::wr::Sge]) -> SendWr<'a> {
    use crate::wr::{Payload, Remote, SendOp};
    let op = SendOp::RdmaWrite {
        remote: Remote {
            addr: 0x20000,
            rkey: 9,
        },
        imm: None,
    };
    // Signalled, as `new` makes it.
    SendWr::new(wr_id, op, Payload::Sges(sges))
}
