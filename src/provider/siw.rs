//! Soft iWARP (`siw`).

use crate::error::Errno;
use uverbs_uapi as sys;

/// The only driver ABI version the siw kernel and rdma-core speak.
pub(crate) const ABI: (u32, u32, &str) = (sys::SIW_ABI_VERSION, sys::SIW_ABI_VERSION, "1");

/// siw refuses a context without room for `siw_uresp_alloc_ctx`.
pub(crate) const GET_CONTEXT_UHW_OUT: usize = size_of::<sys::siw_uresp_alloc_ctx>();

/// A zeroed `siw_ureq_reg_mr`: asks for key byte 0.
pub(crate) const REG_MR_UHW_IN: [u8; size_of::<sys::siw_ureq_reg_mr>()] =
    [0; size_of::<sys::siw_ureq_reg_mr>()];

/// Room for `siw_uresp_reg_mr`.
pub(crate) const REG_MR_UHW_OUT: usize = size_of::<sys::siw_uresp_reg_mr>();

/// siw has no `rereg_user_mr`: the kernel refuses every REREG_MR before
/// looking at the MR, so no refusal can have changed it.
pub(crate) fn rereg_refusal_leaves_mr_unchanged(_errno: Errno) -> bool {
    true
}
