//! What holds for every driver (from `ib_uverbs_rereg_mr`, Linux 6.12).

use crate::error::Errno;
use crate::flags::ReregFlags;

/// REREG_MR refusals that come before any driver changes anything:
/// - `EINVAL` for empty flags: the core's first check;
/// - `EOPNOTSUPP`: the core refuses unknown flags or a device without the
///   operation, and drivers (rxe, mlx5) refuse unsupported flags or access
///   bits first thing;
/// - `EACCES`: `ib_umem_check_rereg`, which drivers call before changing
///   anything, refuses to make a region pinned read-only writable without a
///   new translation.
pub(crate) fn rereg_refusal_leaves_mr_unchanged(flags: ReregFlags, errno: Errno) -> bool {
    errno == Errno::OPNOTSUPP
        || errno == Errno::ACCESS
        || (flags.is_empty() && errno == Errno::INVAL)
}
