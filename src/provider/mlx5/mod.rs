//! ConnectX (`mlx5_ib`), so far its control path: the driver-private data
//! without which mlx5 refuses a context (`mlx5_ib_alloc_ucontext` answers
//! `EINVAL` to a GET_CONTEXT without it) and a PD (`mlx5_ib_alloc_pd`
//! writes the PD number whether or not there is room, `EFAULT` without).
//!
//! The data path (user-allocated CQ and QP buffers, CQEs, WQEs, doorbells,
//! blue flame) is issue 39's next step: until it is here, creating a CQ or
//! QP answers [`Error::Unsupported`](crate::Error::Unsupported) before any
//! system call ([`DATA_PATH_REFUSAL`](Driver::DATA_PATH_REFUSAL)), and the
//! ring types are [`NoCq`], [`NoSq`] and [`NoRq`], which have no values. What the requests hold
//! is what rdma-core 44's libmlx5 sends, byte for byte (`oracle/`,
//! docs/mlx5.md).

use uverbs_uapi as sys;
use zerocopy::IntoBytes;

use crate::error::Errno;
use crate::provider::driver::DriverId;
use crate::provider::rings::{CompletionRing, PostFailure, QpRingConfig, RecvRing, Ring, SendRing};
use crate::provider::Driver;
use crate::transport::Transport;
use crate::wr::{RecvWr, SendWr, WorkCompletion};

/// Why mlx5 has no CQs and QPs here yet.
pub(crate) const NO_DATA_PATH_YET: &str =
    "uverbs' mlx5 provider has the control path only so far (contexts, queries, PDs, MRs, \
     rereg); its data path (CQs, QPs, posting) is in progress (docs/mlx5.md)";

/// The context libmlx5 44 asks for (its defaults, with no `MLX5_*`
/// environment): 16 blue-flame registers, 4 of them low-latency, CQE
/// version 1, 4 KiB UARs allocated on demand (so the kernel maps none at
/// open). libmlx5 first adds DEVX and drops it when refused; a verbs
/// context has no use for DEVX, so it is never asked for here.
pub(crate) const GET_CONTEXT_REQ: sys::mlx5_ib_alloc_ucontext_req_v2 =
    sys::mlx5_ib_alloc_ucontext_req_v2 {
        total_num_bfregs: 16,
        num_low_latency_bfregs: 4,
        flags: 0,
        comp_mask: 0,
        max_cqe_version: 1,
        reserved0: 0,
        reserved1: 0,
        reserved2: 0,
        lib_caps: sys::MLX5_LIB_CAP_4K_UAR | sys::MLX5_LIB_CAP_DYN_UAR,
    };

/// The mlx5 provider.
pub(crate) struct Mlx5;

impl Driver for Mlx5 {
    const ID: DriverId = DriverId::MLX5;
    /// `MLX5_IB_UVERBS_ABI_VERSION`, the only one.
    const ABI: (u32, u32, &'static str) = (
        sys::MLX5_IB_UVERBS_ABI_VERSION,
        sys::MLX5_IB_UVERBS_ABI_VERSION,
        "1",
    );
    const GET_CONTEXT_UHW_OUT: usize = size_of::<sys::mlx5_ib_alloc_ucontext_resp>();
    const ALLOC_PD_UHW_OUT: usize = size_of::<sys::mlx5_ib_alloc_pd_resp>();
    const CREATE_CQ_UHW_OUT: usize = size_of::<sys::mlx5_ib_create_cq_resp>();
    const CREATE_QP_UHW_OUT: usize = size_of::<sys::mlx5_ib_create_qp_resp>();
    const DATA_PATH_REFUSAL: Option<&'static str> = Some(NO_DATA_PATH_YET);

    type Cq = NoCq;
    type Sq = NoSq;
    type Rq = NoRq;

    fn get_context_uhw_in() -> &'static [u8] {
        static REQ: sys::mlx5_ib_alloc_ucontext_req_v2 = GET_CONTEXT_REQ;
        REQ.as_bytes()
    }

    /// Not yet read from `mlx5_ib_rereg_user_mr`: only the core's
    /// guarantees count.
    fn rereg_refusal_leaves_mr_unchanged(_errno: Errno) -> bool {
        false
    }

    fn map_cq(_: &dyn Transport, _: &[u8], _: usize) -> Result<NoCq, Errno> {
        Err(Errno::OPNOTSUPP)
    }

    fn map_qp(
        _: &dyn Transport,
        _: &[u8],
        _: usize,
        _: QpRingConfig,
    ) -> Result<(NoSq, NoRq), Errno> {
        Err(Errno::OPNOTSUPP)
    }
}

/// The rings of a driver without a data path here: types without values,
/// so no CQ or QP of mlx5 can hold one (creating them is refused first).
/// Three of them, since one type cannot be both queues of a QP.
pub(crate) enum NoCq {}
/// See [`NoCq`].
pub(crate) enum NoSq {}
/// See [`NoCq`].
pub(crate) enum NoRq {}

impl Ring for NoCq {}
impl Ring for NoSq {}
impl Ring for NoRq {}

impl CompletionRing for NoCq {
    fn poll(&mut self, _: &mut [WorkCompletion]) -> Result<usize, Errno> {
        match *self {}
    }
}

impl SendRing for NoSq {
    fn post(&mut self, _: &[SendWr<'_>]) -> Result<bool, PostFailure> {
        match *self {}
    }
}

impl RecvRing for NoRq {
    fn post(&mut self, _: &[RecvWr<'_>]) -> Result<(), PostFailure> {
        match *self {}
    }
}

#[cfg(test)]
mod tests;
