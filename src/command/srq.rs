//! Shared-receive-queue commands: CREATE_SRQ, MODIFY_SRQ, QUERY_SRQ and
//! DESTROY_SRQ (the write() forms; rdma-core 44 sends these as write
//! commands too, through `UVERBS_METHOD_INVOKE_WRITE` on the ioctl path).

use uverbs_uapi as sys;

/// `ib_srq_attr_mask` (the kernel's, also libibverbs' `ibv_srq_attr_mask`):
/// [`ModifySrq`] changes the size.
pub const SRQ_MAX_WR: u32 = 1;
/// `ib_srq_attr_mask`: [`ModifySrq`] changes the limit.
pub const SRQ_LIMIT: u32 = 2;

/// `CREATE_SRQ`: a basic shared receive queue of at least `max_wr` receive
/// requests of `max_sge` SGEs in PD `pd_handle`.
///
/// rxe answers `rxe_create_srq_resp` (the ring's `mminfo`, 24 bytes) and siw
/// `siw_uresp_create_srq` (16 bytes) as UHW out; mlx5 takes
/// `mlx5_ib_create_srq` in (the buffer and doorbell record the process
/// allocated) and answers `mlx5_ib_create_srq_resp` (the SRQ number).
#[doc(alias = "ibv_create_srq")]
#[doc(alias = "ibv_cmd_create_srq")]
#[derive(Clone, Copy, Debug)]
pub struct CreateSrq<'a> {
    req: sys::ib_uverbs_create_srq,
    uhw_in: &'a [u8],
}

impl<'a> CreateSrq<'a> {
    /// An SRQ in `pd_handle` whose async events carry `user_handle`, not
    /// armed (limit 0).
    pub fn new(pd_handle: u32, user_handle: u64, max_wr: u32, max_sge: u32) -> Self {
        CreateSrq {
            req: sys::ib_uverbs_create_srq {
                user_handle,
                pd_handle,
                max_wr,
                max_sge,
                ..Default::default()
            },
            uhw_in: &[],
        }
    }

    setters! {
        /// Armed from creation: the SRQ reports `IB_EVENT_SRQ_LIMIT_REACHED`
        /// once when fewer than `limit` receive requests remain.
        pub fn srq_limit(limit: u32) => req.srq_limit;
    }

    /// Driver-private input (mlx5: `mlx5_ib_create_srq`).
    pub fn uhw_in(mut self, uhw_in: &'a [u8]) -> Self {
        self.uhw_in = uhw_in;
        self
    }
}

// Mirrors ib_uverbs_create_srq{,_resp}; the request starts with `response`.
write_command_of_request!(
    CreateSrq<'_>,
    IB_USER_VERBS_CMD_CREATE_SRQ,
    ib_uverbs_create_srq,
    uverbs_uapi::ib_uverbs_create_srq_resp,
    uhw_in = uhw_in
);

/// `MODIFY_SRQ`: changes an SRQ's limit ([`SRQ_LIMIT`]) or size
/// ([`SRQ_MAX_WR`]); no response.
///
/// rxe requires an 8-byte `rxe_modify_srq_cmd` as UHW in whatever the mask
/// (with [`SRQ_MAX_WR`] it writes the new ring's `mminfo` where it points).
#[doc(alias = "ibv_modify_srq")]
#[doc(alias = "ibv_cmd_modify_srq")]
#[derive(Clone, Copy, Debug)]
pub struct ModifySrq<'a> {
    req: sys::ib_uverbs_modify_srq,
    uhw_in: &'a [u8],
}

impl<'a> ModifySrq<'a> {
    /// Sets the limit of SRQ `srq_handle` to `limit` (0 disarms it).
    pub fn limit(srq_handle: u32, limit: u32) -> Self {
        ModifySrq {
            req: sys::ib_uverbs_modify_srq {
                srq_handle,
                attr_mask: SRQ_LIMIT,
                srq_limit: limit,
                ..Default::default()
            },
            uhw_in: &[],
        }
    }

    /// Driver-private input (rxe: `rxe_modify_srq_cmd`).
    pub fn uhw_in(mut self, uhw_in: &'a [u8]) -> Self {
        self.uhw_in = uhw_in;
        self
    }
}

// Mirrors ib_uverbs_modify_srq; no response.
write_command_of_request!(
    ModifySrq<'_>,
    IB_USER_VERBS_CMD_MODIFY_SRQ,
    ib_uverbs_modify_srq,
    (),
    uhw_in = uhw_in,
    handle = srq_handle
);

/// `QUERY_SRQ`: an SRQ's size, SGEs and limit.
#[doc(alias = "ibv_query_srq")]
#[doc(alias = "ibv_cmd_query_srq")]
#[derive(Clone, Copy, Debug)]
pub struct QuerySrq {
    req: sys::ib_uverbs_query_srq,
}

impl QuerySrq {
    /// Query SRQ `srq_handle`.
    pub fn new(srq_handle: u32) -> Self {
        QuerySrq {
            req: sys::ib_uverbs_query_srq {
                srq_handle,
                ..Default::default()
            },
        }
    }
}

// Mirrors ib_uverbs_query_srq{,_resp}; the request starts with `response`.
write_command_of_request!(
    QuerySrq,
    IB_USER_VERBS_CMD_QUERY_SRQ,
    ib_uverbs_query_srq,
    uverbs_uapi::ib_uverbs_query_srq_resp,
    handle = srq_handle
);

destroy_by_handle!(
    /// `DESTROY_SRQ`: destroys an SRQ (`EBUSY` while a QP uses it); the
    /// answer counts the async events reported for it.
    #[doc(alias = "ibv_destroy_srq")]
    #[doc(alias = "ibv_cmd_destroy_srq")]
    DestroySrq,
    IB_USER_VERBS_CMD_DESTROY_SRQ,
    ib_uverbs_destroy_srq,
    ib_uverbs_destroy_srq_resp,
    srq_handle,
    "SRQ"
);
