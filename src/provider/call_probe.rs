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
//! [`probe_poll`] takes.

use crate::cq::CompletionQueue;
use crate::qp::QueuePair;
use crate::wr::{RecvWr, WorkCompletion};

/// Iterations of each loop, per kind of post.
pub(crate) const ITERS: u64 = 200;

/// (driver, measured function, budget in Ir per call). The driver names
/// the loop (`rxe`: `provider::rxe::call_probe::rxe_calls_loop`, `siw`:
/// `provider::siw::wiring_tests::siw_calls_loop`); the function is the
/// symbol callgrind sees.
#[allow(dead_code)] // read by tools/ir-budget.sh, from this source
pub(crate) const BUDGETS: &[(&str, &str, u32)] = &[
    ("rxe", "probe_poll", 60),
    ("rxe", "probe_post_recv", 125),
    ("rxe", "probe_post_recv_exclusive", 115),
    ("siw", "probe_poll", 91),
    ("siw", "probe_post_recv", 89),
    ("siw", "probe_post_recv_exclusive", 72),
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
