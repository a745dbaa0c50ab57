//! Memory-window commands: ALLOC_MW and DEALLOC_MW.

use uverbs_uapi as sys;

/// `ALLOC_MW`: a new memory window in a PD; the response carries its
/// handle and its first rkey.
#[doc(alias = "ibv_cmd_alloc_mw")]
#[derive(Clone, Copy, Debug)]
pub struct AllocMw {
    // The kernel's request, filled in place (`response` stays 0).
    req: sys::ib_uverbs_alloc_mw,
}

impl AllocMw {
    /// A window of type `mw_type` (`IB_MW_TYPE_1` = 1, `IB_MW_TYPE_2` = 2)
    /// in the PD `pd_handle`.
    pub fn new(pd_handle: u32, mw_type: u8) -> Self {
        AllocMw {
            req: sys::ib_uverbs_alloc_mw {
                pd_handle,
                mw_type,
                ..Default::default()
            },
        }
    }
}

// Mirrors ib_uverbs_alloc_mw{,_resp}; the request starts with `response`.
write_command_of_request!(
    AllocMw,
    IB_USER_VERBS_CMD_ALLOC_MW,
    ib_uverbs_alloc_mw,
    uverbs_uapi::ib_uverbs_alloc_mw_resp
);

destroy_by_handle!(
    /// `DEALLOC_MW`: frees a memory window (and unbinds it).
    #[doc(alias = "ibv_cmd_dealloc_mw")]
    DeallocMw,
    IB_USER_VERBS_CMD_DEALLOC_MW,
    ib_uverbs_dealloc_mw,
    mw_handle,
    "MW"
);
