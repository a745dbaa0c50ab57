//! Soft RoCE (`rdma_rxe`): the driver this crate knows best.

use crate::error::Errno;

/// Driver ABI versions rdma-core's rxe provider accepts.
pub(crate) const ABI: (u32, u32, &str) = (1, 2, "1..=2");

/// `rxe_rereg_user_mr` (Linux 6.12) makes all its checks (flags, the umem
/// check, access bits) before it changes the PD or the access, and the core
/// checks before calling it; the only step after the change that can fail is
/// copying the response back (`EFAULT`).
pub(crate) fn rereg_refusal_leaves_mr_unchanged(errno: Errno) -> bool {
    errno != Errno::FAULT
}
