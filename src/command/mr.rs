//! Memory-region commands: REG_MR, REREG_MR and DEREG_MR.

use uverbs_uapi as sys;

/// `REG_MR`: pins `[start, start + length)` and makes it reachable by the
/// device with the given access.
///
/// The device address (`hca_va`) defaults to `start`, as in libibverbs.
#[doc(alias = "ibv_cmd_reg_mr")]
#[derive(Clone, Copy, Debug)]
pub struct RegMr<'a> {
    // The builder fills the kernel's request in place (`response` stays 0
    // for the transport to fill).
    req: sys::ib_uverbs_reg_mr,
    uhw_in: &'a [u8],
}

impl<'a> RegMr<'a> {
    /// Register `length` bytes at `start` in the PD `pd_handle`.
    pub fn new(pd_handle: u32, start: u64, length: u64, access_flags: u32) -> Self {
        RegMr {
            req: sys::ib_uverbs_reg_mr {
                start,
                length,
                hca_va: start,
                pd_handle,
                access_flags,
                ..Default::default()
            },
            uhw_in: &[],
        }
    }

    setters! {
        /// The address the device uses for the first byte (default: `start`).
        pub fn hca_va(hca_va: u64) => req.hca_va;
    }

    /// Driver-private input (siw: an 8-byte `siw_ureq_reg_mr`).
    pub fn uhw_in(mut self, uhw_in: &'a [u8]) -> Self {
        self.uhw_in = uhw_in;
        self
    }
}

// Mirrors ib_uverbs_reg_mr{,_resp}; the request starts with `response`.
write_command_of_request!(
    RegMr<'_>,
    IB_USER_VERBS_CMD_REG_MR,
    ib_uverbs_reg_mr,
    uverbs_uapi::ib_uverbs_reg_mr_resp,
    uhw_in = uhw_in
);

/// `REREG_MR`: changes an MR's translation, PD and/or access in place.
///
/// `flags` says which of the optional fields the kernel reads; the others go
/// as zero, as libibverbs sends them (`pd_handle` is 0 unless the PD changes).
#[doc(alias = "ibv_cmd_rereg_mr")]
#[derive(Clone, Copy, Debug)]
pub struct ReregMr {
    // The kernel's request, filled in place (`response` stays 0).
    req: sys::ib_uverbs_rereg_mr,
}

impl ReregMr {
    /// Re-register the MR `mr_handle`; `flags` are `IB_MR_REREG_*` bits.
    pub fn new(mr_handle: u32, flags: u32) -> Self {
        ReregMr {
            req: sys::ib_uverbs_rereg_mr {
                mr_handle,
                flags,
                ..Default::default()
            },
        }
    }

    /// The new range; the device address defaults to `start`.
    pub fn translation(mut self, start: u64, length: u64) -> Self {
        self.req.start = start;
        self.req.length = length;
        self.req.hca_va = start;
        self
    }

    setters! {
        /// The device address of the new range's first byte.
        pub fn hca_va(hca_va: u64) => req.hca_va;
        /// The handle of the new PD.
        pub fn pd_handle(pd_handle: u32) => req.pd_handle;
        /// The new access flags (`IB_UVERBS_ACCESS_*`).
        pub fn access_flags(access_flags: u32) => req.access_flags;
    }
}

// Mirrors ib_uverbs_rereg_mr{,_resp}; the request starts with `response`.
write_command_of_request!(
    ReregMr,
    IB_USER_VERBS_CMD_REREG_MR,
    ib_uverbs_rereg_mr,
    uverbs_uapi::ib_uverbs_rereg_mr_resp,
    handle = mr_handle
);

destroy_by_handle!(
    /// `DEREG_MR`: unpins and forgets a memory region.
    #[doc(alias = "ibv_cmd_dereg_mr")]
    DeregMr,
    IB_USER_VERBS_CMD_DEREG_MR,
    ib_uverbs_dereg_mr,
    mr_handle,
    "MR"
);
