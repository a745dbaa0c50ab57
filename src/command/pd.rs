//! Protection-domain commands: ALLOC_PD and DEALLOC_PD.

use super::WriteCommand;
use uverbs_uapi as sys;

/// `ALLOC_PD`: a new protection domain; the response carries its handle.
#[doc(alias = "ibv_cmd_alloc_pd")]
#[derive(Clone, Copy, Debug, Default)]
pub struct AllocPd;

impl AllocPd {
    /// The command, with no options.
    pub fn new() -> Self {
        AllocPd
    }
}

// Mirrors ib_uverbs_alloc_pd{,_resp}; the request is just `response`.
impl WriteCommand for AllocPd {
    const CODE: u32 = sys::IB_USER_VERBS_CMD_ALLOC_PD;
    type Request = sys::ib_uverbs_alloc_pd;
    type Response = sys::ib_uverbs_alloc_pd_resp;

    fn request(&self) -> Self::Request {
        sys::ib_uverbs_alloc_pd::default()
    }
}

/// `DEALLOC_PD`: frees a protection domain (the kernel answers `EBUSY` while
/// memory regions still use it).
#[doc(alias = "ibv_cmd_dealloc_pd")]
#[derive(Clone, Copy, Debug)]
pub struct DeallocPd {
    pd_handle: u32,
}

impl DeallocPd {
    /// Deallocate the PD with this kernel handle.
    pub fn new(pd_handle: u32) -> Self {
        DeallocPd { pd_handle }
    }
}

// Mirrors ib_uverbs_dealloc_pd (a single u32); no response.
impl WriteCommand for DeallocPd {
    const CODE: u32 = sys::IB_USER_VERBS_CMD_DEALLOC_PD;
    type Request = sys::ib_uverbs_dealloc_pd;
    type Response = ();

    fn request(&self) -> Self::Request {
        sys::ib_uverbs_dealloc_pd {
            pd_handle: self.pd_handle,
        }
    }
}
