//! ConnectX (`mlx5_ib`): the driver data without which mlx5 refuses a
//! context (`mlx5_ib_alloc_ucontext` answers `EINVAL` to a GET_CONTEXT
//! without it) and a PD (`mlx5_ib_alloc_pd` writes the PD number whether or
//! not there is room), and the data path of RC and UC QPs as libmlx5 44
//! drives a ConnectX: queues in memory the process allocates and hands the
//! kernel at create ([`cq`], [`qp`]), WQEs written there ([`wqe`]), CQEs
//! read from there, doorbells written to UAR pages ([`uar`]); no system
//! call on the data path. What it sends and writes is compared byte for
//! byte with rdma-core 44's libmlx5 on an emulated device (`oracle/`,
//! docs/mlx5.md).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};
use uverbs_uapi as sys;
use zerocopy::{FromBytes, IntoBytes};

use crate::error::Errno;
use crate::provider::driver::DriverId;
use crate::provider::rings::QpRingConfig;
use crate::provider::{AhCreation, Driver, QpRequest};
use crate::transport::Transport;

pub(crate) mod ah;
pub(crate) mod cq;
pub(crate) mod qp;
pub(crate) mod srq;
pub(crate) mod uar;
pub(crate) mod wqe;

use crate::provider::rings::{PostFailure, RecvRing, Ring};
use crate::wr::RecvWr;
use qp::WrIds;
use srq::SrqCore;
use uar::{BfReg, UarPage, BFREGS_PER_UAR};

/// Why mlx5's data path is refused on this CPU: its doorbells are written
/// with x86-64's store ordering and `sfence` (see [`uar`]).
pub(crate) const NOT_X86_64: &str =
    "uverbs' mlx5 data path is written for x86-64's memory ordering (its doorbells use sfence); \
     on this CPU it offers the control path";

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

/// Why a context's mlx5 data path is off: the kernel's answer.
pub(crate) const NO_DYNAMIC_UARS: &str =
    "uverbs' mlx5 data path needs a kernel that answers GET_CONTEXT with dynamic UARs and \
     CQE version 1 (Linux 5.x and later); this context offers the control path";

/// Why a context's mlx5 data path is off: no UAR page for CQ doorbells.
pub(crate) const NO_CQ_UAR: &str =
    "the kernel refused uverbs' mlx5 provider a non-cached UAR page (UAR_OBJ_ALLOC), \
     which arms CQs; this context offers the control path";

/// What GET_CONTEXT answered that the data path uses.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Params {
    /// Largest send WQE, in bytes.
    pub(crate) max_sq_desc_sz: u16,
    /// Largest receive WQE, in bytes.
    pub(crate) max_rq_desc_sz: u16,
    /// Largest SQ, in basic blocks.
    pub(crate) max_send_wqebb: u32,
    /// Largest RQ, in WQEs.
    pub(crate) max_recv_wr: u32,
    /// Largest SRQ, in WQEs.
    pub(crate) max_srq_recv_wr: u32,
    /// The kernel takes ECE options (`MLX5_IB_ALLOC_UCONTEXT_RESP_MASK_ECE`).
    pub(crate) ece: bool,
}

/// What an mlx5 context keeps: the answer's sizes, the non-cached UAR page
/// that arms CQs, free BlueFlame registers, and each QP's work request ids
/// by user index (the CQs look them up).
pub(crate) struct Shared {
    /// `None` when GET_CONTEXT's answer was short or the kernel granted
    /// static blue-flame registers (no dynamic UARs): CQs and QPs are then
    /// refused (`EOPNOTSUPP`).
    params: Option<Params>,
    nc_uar: Option<Arc<UarPage>>,
    bfregs: Mutex<Vec<BfReg>>,
    qps: RwLock<HashMap<u32, Arc<WrIds>>>,
    /// SRQs by kernel handle (a QP created on one names it so).
    srqs: RwLock<HashMap<u32, Arc<SrqCore>>>,
    /// The SRQ of each QP gone from `qps` that received from one, by user
    /// index, while the SRQ lives: a CQE such a QP left in a CQ is dropped
    /// at poll, but the SRQ WQE it names goes back to the SRQ (libmlx5
    /// removes those CQEs at destroy, freeing their WQEs the same way).
    retired: Mutex<HashMap<u32, Arc<SrqCore>>>,
    next_uidx: AtomicU32,
}

impl Shared {
    /// The sizes, or `EOPNOTSUPP` (see [`Shared::params`]).
    pub(crate) fn params(&self) -> Result<&Params, Errno> {
        self.params.as_ref().ok_or(Errno::OPNOTSUPP)
    }

    /// The CQ doorbell page, or `EOPNOTSUPP`.
    pub(crate) fn nc_uar(&self) -> Result<Arc<UarPage>, Errno> {
        self.params()?;
        self.nc_uar.clone().ok_or(Errno::OPNOTSUPP)
    }

    /// A BlueFlame register for a new QP: a free one, or one of a newly
    /// allocated UAR page (each has two). Every QP has its own register;
    /// libmlx5 shares registers after its first four QPs.
    pub(crate) fn take_bfreg(&self, transport: &dyn Transport) -> Result<BfReg, Errno> {
        let mut free = self.bfregs.lock();
        if free.is_empty() {
            let page = UarPage::alloc(transport, sys::MLX5_IB_UAPI_UAR_ALLOC_TYPE_BF)?;
            // Popped from the end: register 0 first, as libmlx5 does.
            for i in (0..BFREGS_PER_UAR).rev() {
                free.push(BfReg::new(page.clone(), i));
            }
        }
        Ok(free.pop().expect("just filled"))
    }

    /// Takes back the register of a QP gone.
    pub(crate) fn give_back_bfreg(&self, bf: BfReg) {
        self.bfregs.lock().push(bf);
    }

    /// A user index for a new QP: never reused within the context, so a
    /// CQE left by a destroyed QP never names a newer one (libmlx5 reuses
    /// the lowest free index and instead removes such CQEs at destroy).
    pub(crate) fn next_uidx(&self) -> u32 {
        self.next_uidx.fetch_add(1, Ordering::Relaxed) & 0xff_ffff
    }

    pub(crate) fn insert_qp(&self, uidx: u32, ids: Arc<WrIds>) {
        self.qps.write().insert(uidx, ids);
    }

    pub(crate) fn remove_qp(&self, uidx: u32) {
        self.qps.write().remove(&uidx);
    }

    pub(crate) fn insert_srq(&self, handle: u32, srq: Arc<SrqCore>) {
        self.srqs.write().insert(handle, srq);
    }

    /// Takes SRQ `handle` out of the table if it is still `srq` (the
    /// kernel may have given the handle to a newer SRQ already), and the
    /// retired QPs that received from it.
    pub(crate) fn remove_srq(&self, handle: u32, srq: &Arc<SrqCore>) {
        let mut srqs = self.srqs.write();
        if srqs.get(&handle).is_some_and(|s| Arc::ptr_eq(s, srq)) {
            srqs.remove(&handle);
        }
        self.retired.lock().retain(|_, s| !Arc::ptr_eq(s, srq));
    }

    /// Notes that the QP of user index `uidx`, gone, received from `srq`.
    pub(crate) fn retire_srq_qp(&self, uidx: u32, srq: Arc<SrqCore>) {
        self.retired.lock().insert(uidx, srq);
    }

    /// The SRQ of the gone QP of user index `uidx`, if it had one.
    pub(crate) fn retired_srq(&self, uidx: u32) -> Option<Arc<SrqCore>> {
        self.retired.lock().get(&uidx).cloned()
    }

    /// The SRQ with kernel handle `handle`.
    pub(crate) fn srq(&self, handle: u32) -> Option<Arc<SrqCore>> {
        self.srqs.read().get(&handle).cloned()
    }

    /// The ids of the QP with user index `uidx`.
    pub(crate) fn qp(&self, uidx: u32) -> Option<Arc<WrIds>> {
        self.qps.read().get(&uidx).cloned()
    }
}

/// Memory the process hands the device (CQE buffers, queues, doorbell
/// records): anonymous, page-aligned, zeroed, and accessed only through
/// raw pointers, since the device reads and writes it.
pub(crate) struct DeviceBuf {
    ptr: *mut u8,
    _map: memmap2::MmapMut,
}

// SAFETY: plain memory owned by this value, touched only through raw
// pointers by the ring that owns it (under its lock).
unsafe impl Send for DeviceBuf {}
// SAFETY: as above; `&DeviceBuf` hands out only the raw pointer.
unsafe impl Sync for DeviceBuf {}

impl DeviceBuf {
    /// `len` bytes, rounded up to whole pages.
    pub(crate) fn new(len: usize) -> Result<DeviceBuf, Errno> {
        let mut map = memmap2::MmapMut::map_anon(len.max(1)).map_err(|e| {
            e.raw_os_error()
                .map_or(Errno::NOMEM, Errno::from_raw_os_error)
        })?;
        let ptr = map.as_mut_ptr();
        Ok(DeviceBuf { ptr, _map: map })
    }

    pub(crate) fn ptr(&self) -> *mut u8 {
        self.ptr
    }

    pub(crate) fn addr(&self) -> u64 {
        self.ptr as u64
    }
}

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
    const AH_CREATION: AhCreation = AhCreation::UserSpace;
    const CREATE_SRQ_UHW_OUT: Option<usize> = Some(size_of::<sys::mlx5_ib_create_srq_resp>());
    const DATA_PATH_REFUSAL: Option<&'static str> = if cfg!(target_arch = "x86_64") {
        None
    } else {
        Some(NOT_X86_64)
    };

    type State = Arc<Shared>;
    type CqPrep = cq::CqPrep;
    type QpPrep = qp::QpPrep;
    type SrqPrep = Option<srq::SrqPrep>;
    type Cq = cq::CqRing;
    type Sq = qp::SendQueue;
    type Rq = Rq;

    fn get_context_uhw_in() -> &'static [u8] {
        static REQ: sys::mlx5_ib_alloc_ucontext_req_v2 = GET_CONTEXT_REQ;
        REQ.as_bytes()
    }

    /// Reads the answer's sizes and, as libmlx5 does at open, allocates
    /// the non-cached UAR page that arms CQs. A short answer, static
    /// blue-flame registers or a refused allocation leave the context
    /// without a data path (CQs and QPs answer `EOPNOTSUPP`), not
    /// unopened: the control path needs none of it.
    fn open_state(transport: &dyn Transport, uhw_out: &[u8]) -> Result<Arc<Shared>, Errno> {
        let resp = sys::mlx5_ib_alloc_ucontext_resp::read_from_prefix(uhw_out)
            .ok()
            .map(|(r, _)| r)
            .filter(|_| uhw_out.len() >= size_of::<sys::mlx5_ib_alloc_ucontext_resp>());
        let params = resp
            .filter(|r| r.tot_bfregs == 0 && r.cqe_version == 1)
            .map(|r| Params {
                max_sq_desc_sz: r.max_sq_desc_sz,
                max_rq_desc_sz: r.max_rq_desc_sz,
                max_send_wqebb: r.max_send_wqebb,
                max_recv_wr: r.max_recv_wr,
                max_srq_recv_wr: r.max_srq_recv_wr,
                ece: r.comp_mask & sys::MLX5_IB_ALLOC_UCONTEXT_RESP_MASK_ECE != 0,
            });
        let nc_uar = match params {
            Some(_) if Self::DATA_PATH_REFUSAL.is_none() => {
                UarPage::alloc(transport, sys::MLX5_IB_UAPI_UAR_ALLOC_TYPE_NC).ok()
            }
            _ => None,
        };
        Ok(Arc::new(Shared {
            params,
            nc_uar,
            bfregs: Mutex::new(Vec::new()),
            qps: RwLock::new(HashMap::new()),
            srqs: RwLock::new(HashMap::new()),
            retired: Mutex::new(HashMap::new()),
            next_uidx: AtomicU32::new(0),
        }))
    }

    fn state_refusal(state: &Arc<Shared>) -> Option<&'static str> {
        if state.params.is_none() {
            Some(NO_DYNAMIC_UARS)
        } else if state.nc_uar.is_none() {
            Some(NO_CQ_UAR)
        } else {
            None
        }
    }

    /// Only the core's guarantees count. `mlx5_ib_rereg_user_mr` (Linux
    /// 6.12) refuses unknown flags (`EOPNOTSUPP`) and runs the umem check
    /// (`EACCES`) before changing anything, which the core's rule covers;
    /// but without a new translation it may revoke the old mkey and then
    /// fail to create the new one (`ENOMEM`, a firmware error), and with
    /// one, fail in `ib_umem_get` (nothing changed) or after the UMR with
    /// the same errnos: an errno cannot tell the two apart.
    fn rereg_refusal_leaves_mr_unchanged(_errno: Errno) -> bool {
        false
    }

    /// RC, UC and UD (the others need mlx5's XRC, raw packet or DC).
    fn supports_qp_type(qp_type: crate::command::QpType) -> bool {
        use crate::command::QpType;
        matches!(qp_type, QpType::Rc | QpType::Uc | QpType::Ud)
    }

    fn prepare_cq(state: &Arc<Shared>, cqe: u32) -> Result<(cq::CqPrep, u32), Errno> {
        cq::prepare(state, cqe)
    }

    fn map_cq(
        state: &Arc<Shared>,
        prep: cq::CqPrep,
        _: &dyn Transport,
        uhw: &[u8],
        written: usize,
    ) -> Result<cq::CqRing, Errno> {
        cq::CqRing::map(state, prep, uhw, written)
    }

    fn prepare_qp(
        state: &Arc<Shared>,
        transport: &dyn Transport,
        req: QpRequest,
    ) -> Result<(qp::QpPrep, QpRequest), Errno> {
        qp::prepare(state, transport, req)
    }

    /// A QP on an SRQ (asked for with no receive WQEs: no RQ in its
    /// buffer, as libmlx5) hands its responder CQEs to the SRQ's list.
    fn map_qp(
        state: &Arc<Shared>,
        prep: qp::QpPrep,
        _: &dyn Transport,
        _uhw: &[u8],
        _written: usize,
        qpn: u32,
        cfg: QpRingConfig,
    ) -> Result<(qp::SendQueue, Option<Rq>), Errno> {
        let srq = match cfg.srq {
            Some(handle) => Some(state.srq(handle).ok_or(Errno::INVAL)?),
            None => None,
        };
        let on_srq = srq.is_some();
        let (sq, rq) = qp::map(state, prep, qpn, cfg.qp_type, cfg.sq_sig_all, srq)?;
        Ok((sq, (!on_srq).then_some(Rq::Qp(rq))))
    }

    fn prepare_srq(
        state: &Arc<Shared>,
        max_wr: u32,
        max_sge: u32,
    ) -> Result<(Option<srq::SrqPrep>, u32, u32), Errno> {
        srq::prepare(state, max_wr, max_sge).map(|(p, w, s)| (Some(p), w, s))
    }

    fn map_prepared_srq(
        state: &Arc<Shared>,
        prep: Option<srq::SrqPrep>,
        _: &dyn Transport,
        uhw: &[u8],
        written: usize,
        handle: u32,
        _max_sge: u32,
    ) -> Result<Rq, Errno> {
        let prep = prep.ok_or(Errno::OPNOTSUPP)?;
        srq::map(state, prep, uhw, written, handle).map(Rq::Srq)
    }

    /// What the free list holds (libmlx5's answer, `srq->tail`): the
    /// kernel's `max_wr` counts libmlx5's wait queue too.
    fn srq_max_wr(rq: &Rq, kernel_max_wr: u32) -> u32 {
        rq.ring_capacity().unwrap_or(kernel_max_wr)
    }

    fn qp_caps(
        sq: &qp::SendQueue,
        _rq: Option<&Rq>,
        _kernel: sys::ib_uverbs_qp_cap,
    ) -> sys::ib_uverbs_qp_cap {
        qp::caps(sq)
    }
}

/// An mlx5 receive queue: a QP's own, or an SRQ's list.
pub(crate) enum Rq {
    /// A QP's RQ.
    Qp(qp::RecvQueue),
    /// An SRQ.
    Srq(srq::SrqRing),
}

impl Ring for Rq {}

impl RecvRing for Rq {
    fn post(&mut self, wrs: &[RecvWr<'_>]) -> Result<(), PostFailure> {
        match self {
            Rq::Qp(r) => r.post(wrs),
            Rq::Srq(r) => r.post(wrs),
        }
    }

    #[inline(always)]
    fn try_post(&mut self, wrs: &[RecvWr<'_>]) -> bool {
        match self {
            Rq::Qp(r) => r.try_post(wrs),
            Rq::Srq(r) => r.try_post(wrs),
        }
    }

    fn ring_capacity(&self) -> Option<u32> {
        match self {
            Rq::Qp(r) => r.ring_capacity(),
            Rq::Srq(r) => r.ring_capacity(),
        }
    }
}

#[cfg(test)]
mod tests;
