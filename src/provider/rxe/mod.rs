//! Soft RoCE (`rdma_rxe`): the driver this crate knows best.
//!
//! [`queue`] is the shared-ring protocol (header, indices, memory ordering),
//! [`wqe`] what goes into the rings (send and receive WQEs) and comes out
//! (completions), [`rings`] the rings a CQ or QP owns (the create answers,
//! the mappings). Tests drive `queue` and `wqe` against `kernel_model`, an
//! in-process model of the kernel's side of the same memory.

use crate::error::Errno;

// A few inspection helpers (capacities, counts) serve only the tests.
#[cfg_attr(not(test), allow(dead_code))]
pub(crate) mod queue;
pub(crate) mod rings;
#[cfg_attr(not(test), allow(dead_code))]
pub(crate) mod wqe;

#[cfg(test)]
mod ir_probe;
#[cfg(test)]
mod kernel_model;
#[cfg(test)]
mod one_sge_tests;
#[cfg(test)]
mod ring_props;

/// Driver ABI versions rdma-core's rxe provider accepts.
pub(crate) const ABI: (u32, u32, &str) = (1, 2, "1..=2");

/// `rxe_rereg_user_mr` (Linux 6.12) makes all its checks (flags, the umem
/// check, access bits) before it changes the PD or the access, and the core
/// checks before calling it; the only step after the change that can fail is
/// copying the response back (`EFAULT`).
pub(crate) fn rereg_refusal_leaves_mr_unchanged(errno: Errno) -> bool {
    errno != Errno::FAULT
}
