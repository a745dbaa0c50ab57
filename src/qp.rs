//! Queue pairs: creation, state changes, and posting work requests; and
//! what a QP is made with and connected by: its state vocabulary
//! ([`QpAttr`], [`QpState`], [`Mtu`]), address handles for UD
//! ([`AddressHandle`]), shared receive queues ([`SharedReceiveQueue`]) and
//! RC connections made by hand ([`RcConnect`], [`Endpoint`]).
//!
//! A QP's send and receive queues are rings shared with the kernel, each
//! mapped once on the command file where the create answer says (rxe:
//! `rxe_create_qp_resp`, RQ first, then SQ; siw: `siw_uresp_create_qp`, SQ
//! first, then RQ). Posting writes WQEs into them; a send batch is then
//! announced with one `POST_SEND` doorbell write (on siw only when the
//! kernel may have gone idle, rdma-core's rule), a receive batch with no
//! system call at all. The per-driver rings, and the teardown order (rxe
//! destroys, then unmaps; siw unmaps, then destroys), live in
//! `provider::rings`.

use crate::process::Generation;
use parking_lot::Mutex;

use crate::ring_lock::RingLock;
use std::fmt;
use std::os::fd::{AsRawFd, BorrowedFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;

use crate::command::{
    AttachMcast, CreateQp, DestroyQp, DetachMcast, ModifyQp, PostSendDoorbell, QueryQp,
    TransportType,
};
use crate::context::Context;
use crate::cq::{native_driver, CompletionQueue, CqInner, CreatePath};
use crate::error::{Errno, Error, Op};
use crate::gid::Gid;
use crate::method::{native_refused, QpCreate, QpDestroy};
use crate::pd::{debug_object, PdInner, ProtectionDomain};
use crate::provider::rings::{
    PostFailure, QpRingConfig, RecvQueue, RecvRing, Ring, SendQueue, SendRing, SendsQueued,
    MAX_CREATE_UHW_OUT,
};
use crate::provider::{QpRequest, StateOf, UhwIn};
use crate::srq::SrqInner;
use crate::trace::{Modified, ModifiedQp};
use crate::transport::write_command;
use crate::wr::{PostError, RecvWr, SendWr, RECV_TAG};
use uverbs_uapi as sys;

pub use crate::ah::{AddressHandle, AhAttr, AhFromWcError, GRH_LEN};
pub use crate::command::{Mtu, QpAttr, QpAttrMask, QpState, QpTransitionError, QpType};
pub use crate::connect::{RcConnect, RcPeer};
pub use crate::connectable::Connectable;
pub use crate::endpoint::{Endpoint, EndpointParseError};
pub use crate::srq::{DestroySrqError, SharedReceiveQueue, SrqAttr, SrqInit};

/// The value each QP's events carry (`user_handle`): unique in the process.
static NEXT_QP_EVENT_ID: AtomicU64 = AtomicU64::new(1);

/// A fresh [`QueuePair::event_id`] for a QP about to be created.
pub(crate) fn next_qp_event_id() -> u64 {
    NEXT_QP_EVENT_ID.fetch_add(1, Ordering::Relaxed)
}

/// What to create a queue pair with (`struct ibv_qp_init_attr`).
///
/// The capacities are minimums: the kernel may give more, and
/// [`QueuePair::caps`] tells what it gave.
///
/// Built with [`QpInit::new`] and the chained setters; the fields stay
/// public to read and to change. It is `#[non_exhaustive]` (libibverbs'
/// `ibv_qp_init_attr_ex` shows what may come): outside this crate, start
/// from `new`.
///
/// ```
/// # fn f(pd: &uverbs::ProtectionDomain, cq: &uverbs::CompletionQueue) -> Result<(), uverbs::Error> {
/// use uverbs::{QpInit, QpType};
/// let qp = pd.create_qp(&QpInit::new(QpType::Rc, cq, cq).max_send_wr(64).max_inline(64))?;
/// assert!(qp.caps().max_send_wr >= 64);
/// # Ok(()) }
/// ```
#[doc(alias = "ibv_qp_init_attr")]
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub struct QpInit<'a> {
    /// RC, UC or UD.
    pub qp_type: QpType,
    /// Where send completions go.
    pub send_cq: &'a CompletionQueue,
    /// Where receive completions go.
    pub recv_cq: &'a CompletionQueue,
    /// Send work requests outstanding at once.
    pub max_send_wr: u32,
    /// Receive work requests outstanding at once.
    pub max_recv_wr: u32,
    /// SGEs per send work request.
    pub max_send_sge: u32,
    /// SGEs per receive work request.
    pub max_recv_sge: u32,
    /// Inline bytes per send work request.
    pub max_inline: u32,
    /// Every send work request completes, signalled or not (`sq_sig_all`).
    pub sq_sig_all: bool,
    /// Receives come from this shared receive queue: the QP has no receive
    /// ring, and `max_recv_wr` and `max_recv_sge` are ignored.
    pub srq: Option<&'a SharedReceiveQueue>,
}

impl<'a> QpInit<'a> {
    /// A `qp_type` QP on these CQs with 16 send and 16 receive work
    /// requests of one SGE each, no inline data, signalled only on request.
    pub fn new(
        qp_type: QpType,
        send_cq: &'a CompletionQueue,
        recv_cq: &'a CompletionQueue,
    ) -> Self {
        QpInit {
            qp_type,
            send_cq,
            recv_cq,
            max_send_wr: 16,
            max_recv_wr: 16,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline: 0,
            sq_sig_all: false,
            srq: None,
        }
    }

    /// Receives come from `srq` ([`QueuePair::post_recv`] is then refused:
    /// post to the SRQ).
    #[doc(alias = "ibv_qp_init_attr.srq")]
    pub fn srq(mut self, srq: &'a SharedReceiveQueue) -> Self {
        self.srq = Some(srq);
        self
    }

    setters! {
        /// At least this many send work requests outstanding at once.
        pub fn max_send_wr(max_send_wr: u32) => max_send_wr;
        /// At least this many receive work requests outstanding at once.
        pub fn max_recv_wr(max_recv_wr: u32) => max_recv_wr;
        /// At least this many SGEs per send work request.
        pub fn max_send_sge(max_send_sge: u32) => max_send_sge;
        /// At least this many SGEs per receive work request.
        pub fn max_recv_sge(max_recv_sge: u32) => max_recv_sge;
        /// At least this many inline bytes per send work request.
        pub fn max_inline(max_inline: u32) => max_inline;
        /// Whether every send work request completes, signalled or not.
        pub fn sq_sig_all(sq_sig_all: bool) => sq_sig_all;
    }
}

/// The capacities a QP really has, as the kernel answered `CREATE_QP`
/// (`struct ibv_qp_cap`).
#[doc(alias = "ibv_qp_cap")]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QpCaps {
    /// Send work requests outstanding at once.
    pub max_send_wr: u32,
    /// Receive work requests outstanding at once.
    pub max_recv_wr: u32,
    /// SGEs per send work request.
    pub max_send_sge: u32,
    /// SGEs per receive work request.
    pub max_recv_sge: u32,
    /// Inline bytes per send work request.
    pub max_inline: u32,
}

/// A queue pair (`struct ibv_qp`).
///
/// Created in RESET by [`ProtectionDomain::create_qp`]; moved through its
/// states with [`modify`](Self::modify), which refuses a transition the
/// kernel's table does not allow (or that lacks an attribute) before any
/// system call. It keeps its PD and CQs alive; dropping it destroys it
/// (`DESTROY_QP`) and unmaps its rings (rxe: after the destroy; siw:
/// before it, as rdma-core does).
///
/// Posting on it is raw and `unsafe` ([`post_send`](Self::post_send),
/// [`post_recv`](Self::post_recv)): the caller promises what the device may
/// touch and until when. For safe posting, hand the QP (in RESET) to an
/// [`OwnedQp`](crate::OwnedQp), whose work requests own their memory.
#[doc(alias = "ibv_qp")]
#[doc(alias = "ibv_create_qp")]
pub struct QueuePair {
    pd: Arc<PdInner>,
    /// Keep the CQs alive (destroyed after this QP).
    send_cq: Arc<CqInner>,
    recv_cq: Arc<CqInner>,
    handle: u32,
    qpn: u32,
    /// The `user_handle` its async events carry.
    event_id: u64,
    qp_type: QpType,
    caps: QpCaps,
    /// The interface that created the QP, and destroys it.
    path: CreatePath,
    /// Set by a successful [`QueuePair::destroy`]: the drop sends nothing.
    destroyed: bool,
    /// The state the last successful `modify` or
    /// [`refresh_state`](QueuePair::refresh_state) set (`QpState as u8`).
    state: AtomicU8,
    /// Serialises `modify` calls, so each is checked against the state the
    /// previous one left.
    modify_lock: Mutex<()>,
    /// The rings and their mappings, unmapped in the driver's teardown
    /// order (see [`Ring::unmap_before_destroy`]).
    sq: RingLock<SendQueue>,
    /// `None` on an SRQ, whose ring the SRQ owns.
    rq: Option<RingLock<RecvQueue>>,
    /// The posts' ring steps with the QP's driver known.
    posts: Posts,
    /// The SRQ it receives from, kept alive (destroyed after this QP).
    srq: Option<Arc<SrqInner>>,
    /// `RECV_TAG` when the SRQ is an [`OwnedSrq`](crate::post::OwnedSrq)'s, else
    /// 0: the `wr_id` bit a raw send must leave clear, since it marks that
    /// owner's receive ids in the shared CQ.
    reserved_wr_id_bits: u64,
    /// Type-2 memory windows tied to this QP (handle, the window's live
    /// flag): deallocated before the QP is destroyed, since rxe holds the
    /// QP while such a window is bound ([`MemoryWindow`](crate::mr::MemoryWindow)).
    windows: Mutex<Vec<(u32, Arc<AtomicBool>)>>,
    doorbell: PostSendDoorbell,
    /// The context's command file, where the doorbell is written directly
    /// (`None` for a transport without one: the doorbell goes through it).
    /// Open as long as the context, which `pd` keeps alive. `-1` for a
    /// transport without one (the doorbell goes through the transport):
    /// a plain word, so the hot path tests its sign and nothing else.
    doorbell_fd: RawFd,
    /// The context's process generation, copied here so that the fork
    /// check of a post reads one word of the QP, not the context's.
    origin: Generation,
    /// The multicast groups (GID, LID) attached through this QP: the drop
    /// detaches them, as the kernel refuses to destroy a QP with any. The
    /// lock is held across each command, so the list is the kernel's.
    multicast: Mutex<Vec<(Gid, u16)>>,
}

impl fmt::Debug for QueuePair {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        debug_object(f, "QueuePair", &self.pd.ctx, self.handle)
            .field("qpn", &self.qpn)
            .field("qp_type", &self.qp_type)
            .field("state", &self.state())
            .field("caps", &self.caps)
            .finish()
    }
}

impl ProtectionDomain {
    /// Creates a queue pair in this PD, in RESET.
    ///
    /// `UVERBS_METHOD_QP_CREATE`, or the write command `CREATE_QP` over the
    /// legacy write() transport or when the kernel refuses the method
    /// (`EPROTONOSUPPORT`, `ENOTTY`), as rdma-core falls back
    /// ([`QueuePair::create_path`] tells which). The kernel answers the
    /// capacities it really gave (kept in [`QueuePair::caps`]) and where the
    /// rings are, the same in both framings (rxe on Linux 6.1 answers the
    /// capacities asked for while its rings hold up to the next power of two
    /// minus one: [`QueuePair::caps`] says what the rings hold): rxe's receive and send
    /// `mminfo`; siw's `sq_key` and `rq_key` (`num_sqe` × 120 and
    /// `num_rqe` × 112 bytes; no receive ring when `num_rqe` is 0). They are
    /// mapped, and if the answer is short (`EPROTO`), names no mapping
    /// (`ENOMEM`) or mapping fails, the QP is destroyed again. siw creates
    /// RC QPs only: another type is `EOPNOTSUPP` before any system call;
    /// other drivers, and siw on a CPU other than x86-64, answer
    /// [`Error::Unsupported`] (errno `EOPNOTSUPP`), nothing sent.
    #[doc(alias = "ibv_create_qp")]
    pub fn create_qp(&self, init: &QpInit<'_>) -> Result<QueuePair, Error> {
        let ctx = &self.inner.ctx;
        let device = &ctx.inner.device;
        let fail = |e| Error::os(Op::CreateQp, device, e);
        ctx.check_process(Op::CreateQp)?;
        let provider = ctx.inner.provider;
        if let Some(reason) = provider.data_path_refusal() {
            return Err(Error::Unsupported {
                op: Op::CreateQp,
                device: device.clone(),
                reason,
            });
        }
        let Some(uhw_len) = provider.create_qp_uhw_out() else {
            return Err(fail(Errno::OPNOTSUPP));
        };
        if !provider.supports_qp_type(init.qp_type) {
            return Err(fail(Errno::OPNOTSUPP));
        }
        if !init.send_cq.inner.ctx.same_as(ctx) || !init.recv_cq.inner.ctx.same_as(ctx) {
            return Err(Error::input(
                Op::CreateQp,
                device,
                "a CQ belongs to another context than the PD",
            ));
        }
        if init.srq.is_some_and(|srq| !srq.inner.ctx().same_as(ctx)) {
            return Err(Error::input(
                Op::CreateQp,
                device,
                "the SRQ belongs to another context than the PD",
            ));
        }
        // On an SRQ the receive sizes are the SRQ's: ask for no ring.
        let (max_recv_wr, max_recv_sge) = match init.srq {
            Some(_) => (0, 0),
            None => (init.max_recv_wr, init.max_recv_sge),
        };
        let cap = sys::ib_uverbs_qp_cap {
            max_send_wr: init.max_send_wr,
            max_recv_wr,
            max_send_sge: init.max_send_sge,
            max_recv_sge,
            max_inline_data: init.max_inline,
        };
        let event_id = next_qp_event_id();
        let req = QpRequest {
            qp_type: init.qp_type,
            cap,
        };
        let ((created, sq, rq, caps), posts) = with_driver!(provider,
            D => (
                self.create_qp_rings::<D>(init, req, event_id, uhw_len)?,
                Posts::of::<D>(),
            ),
            Generic => return Err(fail(Errno::OPNOTSUPP)));
        let owned_srq = init.srq.filter(|srq| srq.inner.is_owned());
        let qp = QueuePair {
            pd: self.inner.clone(),
            send_cq: init.send_cq.inner.clone(),
            recv_cq: init.recv_cq.inner.clone(),
            handle: created.handle,
            qpn: created.qpn,
            event_id,
            qp_type: init.qp_type,
            // What the rings hold: more than the kernel answered on 6.1's
            // rxe (see `ring_capacity`), the same elsewhere.
            caps,
            path: created.path,
            destroyed: false,
            state: AtomicU8::new(QpState::Reset as u8),
            modify_lock: Mutex::new(()),
            multicast: Mutex::new(Vec::new()),
            sq: RingLock::new(sq),
            rq: rq.map(RingLock::new),
            posts,
            srq: init.srq.map(|srq| srq.inner.clone()),
            reserved_wr_id_bits: if owned_srq.is_some() { RECV_TAG } else { 0 },
            windows: Mutex::new(Vec::new()),
            doorbell: PostSendDoorbell::new(created.handle),
            doorbell_fd: ctx
                .inner
                .transport
                .command_fd()
                .map_or(-1, |fd| fd.as_raw_fd()),
            origin: ctx.inner.origin,
        };
        if let Some(srq) = owned_srq {
            // Its receive completions go to the SRQ's owner from the first.
            // Should this fail, the drop destroys the QP again.
            let recv_cq = &init.recv_cq;
            recv_cq.attach_srq(qp.qpn, srq.inner.event_id())?;
            srq.inner.note_cq(recv_cq);
        }
        Ok(qp)
    }

    /// The driver's part of [`create_qp`](Self::create_qp): prepares what
    /// the driver hands the kernel, sends the create and maps the rings
    /// (destroying the QP again if that fails).
    fn create_qp_rings<D: StateOf>(
        &self,
        init: &QpInit<'_>,
        req: QpRequest,
        event_id: u64,
        uhw_len: usize,
    ) -> Result<(QpCreatedAs, SendQueue, Option<RecvQueue>, QpCaps), Error> {
        let ctx = &self.inner.ctx;
        let fail = |e| Error::os(Op::CreateQp, &ctx.inner.device, e);
        let state = D::state_of(&ctx.inner.driver).ok_or_else(|| fail(Errno::OPNOTSUPP))?;
        if let Some(reason) = D::state_refusal(state) {
            return Err(Error::Unsupported {
                op: Op::CreateQp,
                device: ctx.inner.device.clone(),
                reason,
            });
        }
        let (prep, ask) = D::prepare_qp(state, ctx.inner.transport.as_ref(), req).map_err(fail)?;
        let mut uhw_buf = [0u8; MAX_CREATE_UHW_OUT];
        let uhw = &mut uhw_buf[..uhw_len];
        // SAFETY: the preparation holds the memory its driver data names,
        // and the rings that own it are dropped after the destroy.
        let created = unsafe { self.send_create_qp(init, ask.cap, event_id, prep.uhw_in(), uhw) }?;
        let kernel = created.cap;
        let ring_cfg = QpRingConfig {
            qp_type: init.qp_type,
            max_send_sge: kernel.max_send_sge,
            max_inline: kernel.max_inline_data,
            max_recv_sge: kernel.max_recv_sge,
            sq_sig_all: init.sq_sig_all,
            has_srq: init.srq.is_some(),
            srq: init.srq.map(|srq| srq.inner.handle),
        };
        let transport = ctx.inner.transport.as_ref();
        match D::map_qp(
            state,
            prep,
            transport,
            uhw,
            created.uhw_written,
            created.qpn,
            ring_cfg,
        ) {
            Ok((sq, rq)) => {
                let c = D::qp_caps(&sq, rq.as_ref(), kernel);
                let caps = QpCaps {
                    max_send_wr: c.max_send_wr,
                    max_recv_wr: c.max_recv_wr,
                    max_send_sge: c.max_send_sge,
                    max_recv_sge: c.max_recv_sge,
                    max_inline: c.max_inline_data,
                };
                let (sq, rq) = D::queues(sq, rq);
                Ok((created, sq, rq, caps))
            }
            Err(e) => {
                // Nothing is mapped any more: both orders agree here.
                let _ = send_destroy_qp(ctx, created.path, created.handle);
                Err(fail(e))
            }
        }
    }

    /// Sends the create, native first (see [`create_qp`](Self::create_qp)).
    /// A driver with data for the create (`uhw_in`) needs the native
    /// method: the write command is refused (`EOPNOTSUPP`) unsent.
    ///
    /// # Safety
    ///
    /// Memory `uhw_in` names for the device stays valid until the QP is
    /// destroyed.
    unsafe fn send_create_qp(
        &self,
        init: &QpInit<'_>,
        cap: sys::ib_uverbs_qp_cap,
        event_id: u64,
        uhw_in: &[u8],
        uhw: &mut [u8],
    ) -> Result<QpCreatedAs, Error> {
        let ctx = &self.inner.ctx;
        let (pd, send_cq, recv_cq) = (
            self.inner.handle,
            init.send_cq.inner.handle,
            init.recv_cq.inner.handle,
        );
        if let Some(driver) = native_driver(ctx) {
            let mut method = QpCreate::new(init.qp_type, pd, send_cq, recv_cq, cap, uhw)
                .sq_sig_all(init.sq_sig_all)
                .user_handle(event_id)
                .uhw_in(uhw_in);
            if let Some(srq) = init.srq {
                method = method.srq(srq.inner.handle);
            }
            // SAFETY: the memory the driver data names outlives the QP (the
            // caller's promise; rxe's and siw's rings are the kernel's); the
            // handles are this context's.
            match unsafe { method.run(ctx.inner.transport.as_ref(), driver) } {
                Ok(done) => {
                    return Ok(QpCreatedAs {
                        path: CreatePath::NativeMethod,
                        handle: done.handle,
                        qpn: done.qp_num,
                        cap: done.cap,
                        // The kernel marks the whole UHW out written.
                        uhw_written: uhw.len(),
                    });
                }
                Err(e) if native_refused(e) => {}
                Err(e) => return Err(Error::os(Op::CreateQp, &ctx.inner.device, e)),
            }
        }
        if !uhw_in.is_empty() {
            return Err(Error::os(Op::CreateQp, &ctx.inner.device, Errno::OPNOTSUPP));
        }
        let mut cmd = CreateQp::new(init.qp_type, pd, send_cq, recv_cq, cap)
            .sq_sig_all(init.sq_sig_all)
            .user_handle(event_id);
        if let Some(srq) = init.srq {
            cmd = cmd.srq(srq.inner.handle);
        }
        // SAFETY: CREATE_QP hands no user memory to the device; the rings
        // are the kernel's.
        let (resp, written) = unsafe { ctx.run(Op::CreateQp, &cmd, uhw) }?;
        Ok(QpCreatedAs {
            path: CreatePath::WriteCommand,
            handle: resp.qp_handle,
            qpn: resp.qpn,
            cap: sys::ib_uverbs_qp_cap {
                max_send_wr: resp.max_send_wr,
                max_recv_wr: resp.max_recv_wr,
                max_send_sge: resp.max_send_sge,
                max_recv_sge: resp.max_recv_sge,
                max_inline_data: resp.max_inline_data,
            },
            uhw_written: written,
        })
    }
}

/// What either framing of CREATE_QP answered.
struct QpCreatedAs {
    path: CreatePath,
    handle: u32,
    qpn: u32,
    cap: sys::ib_uverbs_qp_cap,
    uhw_written: usize,
}

/// DESTROY_QP of `handle` through `path`; answers the async events the
/// kernel reported for it.
fn send_destroy_qp(ctx: &Context, path: CreatePath, handle: u32) -> Result<u32, Error> {
    match (path, ctx.inner.driver_id) {
        (CreatePath::NativeMethod, Some(driver)) => {
            // SAFETY: the caller owns the QP and destroys it once; its rings
            // are unmapped only after.
            unsafe { QpDestroy::new(handle).run(ctx.inner.transport.as_ref(), driver.0) }
                .map(|r| r.events_reported)
                .map_err(|e| Error::os(Op::DestroyQp, &ctx.inner.device, e))
        }
        _ => {
            // SAFETY: as above.
            let (resp, _) = unsafe { ctx.run(Op::DestroyQp, &DestroyQp::new(handle), &mut []) }?;
            Ok(resp.events_reported)
        }
    }
}

/// A failed [`QueuePair::destroy`]: the kernel refused `DESTROY_QP`, so the
/// QP still exists there, and it is handed back.
///
/// On rxe it is intact and usable. On siw its rings were unmapped before
/// the destroy (the driver's order) and are mapped again after the refusal;
/// should mapping one of them again fail too (the mapping error is not
/// reported), that queue stays unmapped: posting requests to it with
/// [`post_send`](QueuePair::post_send) (send ring) or
/// [`post_recv`](QueuePair::post_recv) (receive ring) answers
/// [`Error::Os`] with `EBADF` and queues nothing, until another refused
/// [`destroy`](QueuePair::destroy) manages to map it again. The QP's
/// commands (modify, query, another destroy) still reach the kernel's QP.
/// Either way the QP was not destroyed: the device may still run the
/// requests posted before, and their memory stays under the posting rules
/// until the QP is destroyed or, if that never succeeds, until the context
/// is closed (see [`Context::abandoned_queue_pairs`](crate::Context::abandoned_queue_pairs)).
#[derive(Debug, thiserror::Error)]
#[error("{error}")]
#[non_exhaustive]
pub struct DestroyQpError {
    /// The QP, still in the kernel (boxed: the error stays small); see the
    /// type's docs for what a failed siw remap leaves of it.
    pub qp: Box<QueuePair>,
    /// Why the kernel refused.
    pub error: Error,
}

crate::error::hands_back_with_error! {
    [] DestroyQpError, "the QP (which tries the destroy again)";
}

impl ModifiedQp for QueuePair {
    fn qp_num(&self) -> u32 {
        QueuePair::qp_num(self)
    }

    fn handle(&self) -> u32 {
        QueuePair::handle(self)
    }

    fn state(&self) -> QpState {
        QueuePair::state(self)
    }
}

impl QueuePair {
    /// The kernel's handle.
    pub fn handle(&self) -> u32 {
        self.handle
    }

    /// The QP number the peer addresses (`qp_num`).
    pub fn qp_num(&self) -> u32 {
        self.qpn
    }

    /// What this QP's async events name it by (the `user_handle` it was
    /// created with; unique within the process): see
    /// [`AsyncEvent::is_about_qp`](crate::device::AsyncEvent::is_about_qp).
    pub fn event_id(&self) -> u64 {
        self.event_id
    }

    /// RC, UC or UD.
    pub fn qp_type(&self) -> QpType {
        self.qp_type
    }

    /// The capacities the kernel gave.
    pub fn caps(&self) -> QpCaps {
        self.caps
    }

    /// The context the QP belongs to.
    pub fn context(&self) -> &Context {
        &self.pd.ctx
    }

    /// The state the last successful [`modify`](Self::modify) or
    /// [`refresh_state`](Self::refresh_state) set (RESET after creation).
    /// The device may have moved the QP since: to ERR on an error, and on
    /// iWARP to RTS when the connection manager established the
    /// connection (then [`refresh_state`](Self::refresh_state) learns it).
    /// Leaving ERR is a modify to RESET, valid from any state.
    pub fn state(&self) -> QpState {
        QpState::from_raw(self.state.load(Ordering::Acquire)).unwrap_or(QpState::Err)
    }

    /// How this QP's device connects: [`TransportType::Iwarp`] on siw,
    /// [`TransportType::Ib`] (IB and RoCE) otherwise. It chooses the table
    /// [`modify`](Self::modify) checks against.
    pub fn transport_type(&self) -> TransportType {
        self.pd.ctx.inner.provider.transport_type()
    }

    /// Asks the kernel for the QP's state (`QUERY_QP`), remembers it as
    /// [`state`](Self::state) and returns it.
    ///
    /// An iWARP QP enters RTS without a `MODIFY_QP` of ours: the kernel's
    /// connection manager moves it there when the connection is established
    /// (siw: on accept for the passive side, on the MPA reply for the active
    /// side); [`established`](Self::established) learns that after
    /// `ESTABLISHED`. This also learns an ERR the device entered. siw
    /// reports its idle state (RESET, INIT and a QP modified to RTR before
    /// the connection) as INIT; where the kernel fills no state at all
    /// (siw on Linux 6.1) this is [`Error::NotReported`] and
    /// [`state`](Self::state) stays as it was.
    #[doc(alias = "ibv_query_qp")]
    pub fn refresh_state(&self) -> Result<QpState, Error> {
        // Before the lock: a parent thread may have held it at fork time.
        self.pd.ctx.check_process(Op::QueryQp)?;
        let _serial = self.modify_lock.lock();
        self.query_state()
    }

    /// Asks the kernel for the QP's attributes in `mask` (`QUERY_QP`):
    /// each reads back through its [`QpAttr`] getter
    /// ([`get_state`](QpAttr::get_state), [`get_qkey`](QpAttr::get_qkey),
    /// [`get_dest_qpn`](QpAttr::get_dest_qpn),
    /// [`get_sq_psn`](QpAttr::get_sq_psn), …). The state, when asked, is
    /// also remembered as [`state`](Self::state).
    ///
    /// What `ibv_query_qp`'s `init_attr` adds is known without asking:
    /// [`caps`](Self::caps), [`qp_type`](Self::qp_type). Where the driver
    /// does not report the state (siw on Linux 6.1, see
    /// [`refresh_state`](Self::refresh_state)), `get_state` answers `None`;
    /// an attribute a driver does not fill reads as 0 (siw's `QUERY_QP`
    /// answers little beyond the state and the capacities). A state number the kernel should never answer is an
    /// [`Error::InvalidInput`]. In a forked child: [`Error::ForeignProcess`].
    ///
    /// ```no_run
    /// # fn f(qp: &uverbs::QueuePair) -> Result<(), uverbs::Error> {
    /// use uverbs::qp::QpAttrMask;
    /// // udaddy reads its Q_Key back.
    /// let attr = qp.query(QpAttrMask::STATE | QpAttrMask::QKEY)?;
    /// println!("{:?}, Q_Key {:#x?}", attr.get_state(), attr.get_qkey());
    /// # Ok(()) }
    /// ```
    #[doc(alias = "ibv_query_qp")]
    pub fn query(&self, mask: QpAttrMask) -> Result<QpAttr, Error> {
        // Before the lock: a parent thread may have held it at fork time.
        self.pd.ctx.check_process(Op::QueryQp)?;
        let _serial = self.modify_lock.lock();
        self.query_locked(mask)
    }

    /// [`query`](Self::query) under the caller's `modify_lock`.
    fn query_locked(&self, mask: QpAttrMask) -> Result<QpAttr, Error> {
        let ctx = &self.pd.ctx;
        let cmd = QueryQp::new(self.handle, mask);
        // SAFETY: QUERY_QP of our own QP hands no memory to the device; the
        // answer is a plain struct.
        let (resp, _) = unsafe { ctx.run(Op::QueryQp, &cmd, &mut []) }?;
        let attr = QpAttr::from_query(&resp, mask);
        if !mask.contains(QpAttrMask::STATE) {
            return Ok(attr);
        }
        if !ctx.inner.provider.query_qp_reports_state(resp.qp_state) {
            return Ok(attr.without(QpAttrMask::STATE));
        }
        let state = attr.get_state().ok_or_else(|| {
            Error::input(
                Op::QueryQp,
                &ctx.inner.device,
                "QUERY_QP answered an unknown QP state",
            )
        })?;
        self.state.store(state as u8, Ordering::Release);
        Ok(attr)
    }

    /// [`refresh_state`](Self::refresh_state) under the caller's
    /// `modify_lock`.
    fn query_state(&self) -> Result<QpState, Error> {
        let attr = self.query_locked(QpAttrMask::STATE)?;
        attr.get_state().ok_or_else(|| Error::NotReported {
            op: Op::QueryQp,
            device: self.pd.ctx.inner.device.clone(),
            what: "siw's QP state",
        })
    }

    /// Learns the state the connection manager's `ESTABLISHED` left the QP
    /// in, remembers it as [`state`](Self::state) and returns it. Call it
    /// once the connection is up (the passive side's `ESTABLISHED`, the
    /// active side's `CONNECT_RESPONSE` or `ESTABLISHED`), before posting
    /// sends.
    ///
    /// On iWARP the kernel moved the QP to RTS itself. Where it reports the
    /// QP's state (`QUERY_QP`) that answer is returned; where it does not
    /// (siw on Linux 6.1, see [`Error::NotReported`]) the connection
    /// manager's word is the proof: the QP is RTS. On IB and RoCE the QP is
    /// where the caller's own [`modify`](Self::modify) calls put it, and
    /// the kernel's answer is returned.
    pub fn established(&self) -> Result<QpState, Error> {
        // Before the lock: a parent thread may have held it at fork time.
        self.pd.ctx.check_process(Op::QueryQp)?;
        let _serial = self.modify_lock.lock();
        match self.query_state() {
            Err(Error::NotReported { .. }) if self.transport_type() == TransportType::Iwarp => {
                self.state.store(QpState::Rts as u8, Ordering::Release);
                Ok(QpState::Rts)
            }
            other => other,
        }
    }

    /// Changes the QP's attributes and state (`MODIFY_QP`). The attributes
    /// are first checked against the QP's type, its current
    /// [`state`](Self::state) and its [`transport_type`](Self::transport_type)
    /// ([`QpAttr::check_on`]): an invalid transition, a missing or
    /// unexpected attribute, or a field out of range is an
    /// [`Error::QpTransition`] and nothing is sent. On iWARP the attributes
    /// `CmId::init_qp_attr` answers pass, and entering RTS is refused
    /// ([`RtsOnlyThroughCm`](crate::command::QpTransitionError::RtsOnlyThroughCm)).
    ///
    /// No post runs while the command is in the kernel: both ring locks are
    /// held across it (rxe's move to RESET zeroes every slot of both rings,
    /// `rxe_queue_reset`, and a WQE being written meanwhile would be torn).
    /// A post waiting for the locks then sees the state this call left.
    /// In a forked child: [`Error::ForeignProcess`], nothing sent.
    #[doc(alias = "ibv_modify_qp")]
    pub fn modify(&self, attr: &QpAttr) -> Result<(), Error> {
        let ctx = &self.pd.ctx;
        // Before any lock: a parent thread may have held one at fork time,
        // and the child's copy of it would stay locked for ever.
        ctx.check_process(Op::ModifyQp)?;
        // Lock order, the same everywhere: modify_lock, then the send ring,
        // then the receive ring (`send_destroy` takes sq then rq; a post
        // takes one ring lock and never modify_lock), so no cycle exists.
        let _serial = self.modify_lock.lock();
        attr.check_on(self.transport_type(), self.qp_type, self.state())
            .map_err(|source| {
                crate::trace::qp_modify(self, attr, Modified::Refused(&source));
                Error::QpTransition {
                    op: Op::ModifyQp,
                    device: ctx.inner.device.clone(),
                    verdict: source,
                }
            })?;
        // Every modify, not only RESET: an uncontended lock costs tens of
        // nanoseconds next to a system call, and ERR (a flush) or a driver's
        // own reset path then needs no separate rule. The kernel keeps both
        // rings' indices across RESET (it zeroes the slots, not the header,
        // after flushing what was queued), so the rings' own positions stay
        // right and nothing is reset here.
        let _sq = self.sq.lock_unflagged();
        let _rq = self.rq.as_ref().map(RingLock::lock_unflagged);
        let cmd = ModifyQp::new(self.handle, attr);
        // SAFETY: MODIFY_QP of our own QP hands no memory to the device.
        if let Err(e) = unsafe { ctx.run(Op::ModifyQp, &cmd, &mut []) } {
            crate::trace::qp_modify(self, attr, Modified::Sent(Some(&e)));
            return Err(e);
        }
        crate::trace::qp_modify(self, attr, Modified::Sent(None));
        if let Some(to) = attr.target_state() {
            self.state.store(to as u8, Ordering::Release);
        }
        Ok(())
    }

    /// Attaches this UD QP to the multicast group `mgid` with LID `mlid`
    /// (`ATTACH_MCAST`; on RoCE the LID is ignored, 0 will do): what is
    /// sent to the group then reaches the QP's receives too. Attaching to a
    /// group the QP is in already succeeds and changes nothing.
    ///
    /// The kernel refuses to destroy a QP with a group attached
    /// (`ibv_destroy_qp` answers `EBUSY` until `ibv_detach_mcast`):
    /// [`destroy`](Self::destroy) and the drop detach every group attached
    /// through the QP first, so it is destroyed, never left in the kernel.
    ///
    /// On RoCE the attach is not all: the GID's network interface must be
    /// a member of the group at the IP level too, or the kernel's IP layer
    /// drops the group's packets (and does not loop a local sender's back)
    /// before rxe sees them. For an IPv4 group the connection manager's
    /// join does that part ([`CmId::join_multicast`](crate::cm::CmId::join_multicast),
    /// librdmacm's `rdma_join_multicast`), and its event carries the GID,
    /// LID and Q_Key to attach and send with. Otherwise join the group on
    /// the interface yourself, as below (on rxe0, without a join nothing
    /// arrives). To send to the
    /// group, address an [`AddressHandle`] to `mgid`
    /// and the QP number `0xffffff`.
    ///
    /// Refused here, with [`Error::InvalidInput`] and nothing sent: a QP
    /// that is not UD, or a GID that is not multicast ([`Gid::is_multicast`]).
    /// rxe supports multicast; siw has no UD QPs. In a forked child:
    /// [`Error::ForeignProcess`], nothing sent.
    ///
    /// ```no_run
    /// # fn f(ctx: &uverbs::Context, qp: &uverbs::QueuePair) -> Result<(), Box<dyn std::error::Error>> {
    /// use std::net::{Ipv6Addr, UdpSocket};
    ///
    /// // A link-local IPv6 group, for a port whose GID 0 is IPv6.
    /// let group: uverbs::device::Gid = "ff12:0000:0000:0000:0000:0000:0075:7662".parse()?;
    /// let netdev = ctx.query_gid_entry(1, 0)?.netdev_ifindex;
    /// let member = UdpSocket::bind((Ipv6Addr::UNSPECIFIED, 0))?;
    /// member.join_multicast_v6(&Ipv6Addr::from(group.raw()), netdev)?;
    /// qp.attach_mcast(group, 0)?;
    /// // ... receive what is sent to the group, while `member` is open ...
    /// qp.detach_mcast(group, 0)?;
    /// # Ok(()) }
    /// ```
    #[doc(alias = "ibv_attach_mcast")]
    pub fn attach_mcast(&self, mgid: Gid, mlid: u16) -> Result<(), Error> {
        self.multicast_command(Op::AttachMcast, mgid, mlid)
    }

    /// Detaches this QP from the multicast group `mgid`, `mlid`
    /// (`DETACH_MCAST`): the kernel answers `EINVAL` for a group it is not
    /// attached to. Refused here as [`attach_mcast`](Self::attach_mcast) is.
    #[doc(alias = "ibv_detach_mcast")]
    pub fn detach_mcast(&self, mgid: Gid, mlid: u16) -> Result<(), Error> {
        self.multicast_command(Op::DetachMcast, mgid, mlid)
    }

    /// `ATTACH_MCAST` or `DETACH_MCAST` (`op`), after the checks the kernel
    /// would fail, keeping `multicast` the kernel's list.
    fn multicast_command(&self, op: Op, mgid: Gid, mlid: u16) -> Result<(), Error> {
        let ctx = &self.pd.ctx;
        // Before the lock: a parent thread may have held it at fork time.
        ctx.check_process(op)?;
        let refuse = |reason| Err(Error::input(op, &ctx.inner.device, reason));
        if self.qp_type != QpType::Ud {
            return refuse("multicast needs a UD queue pair");
        }
        if !mgid.is_multicast() {
            return refuse("not a multicast GID (ff00::/8, or IPv4-mapped 224.0.0.0/4)");
        }
        let mut groups = self.multicast.lock();
        let group = (mgid, mlid);
        if op == Op::AttachMcast {
            let cmd = AttachMcast::new(self.handle, mgid.raw(), mlid);
            // SAFETY: ATTACH_MCAST of our own QP hands no memory to the device.
            unsafe { ctx.run(op, &cmd, &mut []) }?;
            if !groups.contains(&group) {
                groups.push(group);
            }
        } else {
            self.detach(group)?;
            groups.retain(|&g| g != group);
        }
        Ok(())
    }

    /// Detaches every group attached through this QP, oldest first; on a
    /// failure the groups not yet detached stay listed (and attached).
    fn detach_all(&self) -> Result<(), Error> {
        let mut groups = self.multicast.lock();
        while let Some(&group) = groups.first() {
            self.detach(group)?;
            groups.remove(0);
        }
        Ok(())
    }

    /// `DETACH_MCAST` of `group` from this QP.
    fn detach(&self, (mgid, mlid): (Gid, u16)) -> Result<(), Error> {
        let cmd = DetachMcast::new(self.handle, mgid.raw(), mlid);
        // SAFETY: DETACH_MCAST of our own QP hands no memory to the device.
        unsafe { self.pd.ctx.run(Op::DetachMcast, &cmd, &mut []) }.map(drop)
    }

    fn post_error(&self, op: Op, index: usize, source: PostError) -> Error {
        Error::Post {
            op,
            device: self.pd.ctx.inner.device.clone(),
            index,
            why: Box::new(source),
        }
    }

    fn post_failure(&self, op: Op, failure: PostFailure) -> Error {
        failure.into_error(op, &self.pd.ctx.inner.device)
    }

    /// Sends the destroy through the interface that created the QP, the
    /// rings unmapped before it where the driver's order says so (siw) and,
    /// when the kernel refuses and `keep_on_refusal`, mapped again. Both
    /// ring locks are held throughout: no post runs meanwhile.
    fn send_destroy(&self, keep_on_refusal: bool) -> Result<u32, Error> {
        let ctx = &self.pd.ctx;
        self.release_windows();
        let mut sq = self.sq.lock_unflagged();
        let mut rq = self.rq.as_ref().map(RingLock::lock_unflagged);
        let unmapped =
            sq.unmap_before_destroy() | rq.as_mut().is_some_and(|rq| rq.unmap_before_destroy());
        let sent = send_destroy_qp(ctx, self.path, self.handle);
        if sent.is_ok() && self.reserved_wr_id_bits != 0 {
            // What the ring still has of its receives goes to the SRQ's
            // owner; then the route goes.
            CompletionQueue {
                inner: self.recv_cq.clone(),
            }
            .detach_srq(self.qpn);
        }
        if sent.is_err() && unmapped && keep_on_refusal {
            // Should this fail, the posts answer EBADF.
            let transport = ctx.inner.transport.as_ref();
            let _ = sq
                .remap(transport)
                .and_then(|()| rq.as_mut().map_or(Ok(()), |rq| rq.remap(transport)));
        }
        sent
    }

    /// Posts send work requests (`ibv_post_send`): writes one WQE per
    /// element of `wrs` into the send ring, publishes them together, then
    /// rings the doorbell once (one `POST_SEND` write). On siw the doorbell
    /// is written only when the SQE before the batch was already taken by
    /// the kernel (it may be idle); otherwise the kernel walks on to the new
    /// SQEs by itself and no system call is made. siw flushes the ring only
    /// as the QP enters ERR: a request posted after the kernel moved the
    /// QP there itself (its stream closed) is never completed, and its
    /// memory is bound by the rules below until the QP is destroyed.
    ///
    /// All or nothing: if any work request is refused (the QP not in RTS,
    /// SQD, SQE or ERR; more SGEs than [`QpCaps::max_send_sge`]; inline
    /// data beyond [`QpCaps::max_inline`]; the queue full; on siw also
    /// immediate data, atomics, a fenced RDMA READ or one into more than one
    /// SGE: [`PostError::NotSupported`], [`PostError::TooManySges`]), none
    /// of them is queued, and [`Error::Post`] says which and why. An empty
    /// slice does nothing. An error of the doorbell itself
    /// ([`Error::Doorbell`]) comes after the WQEs were published: they are
    /// the device's, exactly as after a success (the kernel may still run
    /// them), and their memory is bound by the rules below. After a
    /// credential change (`setuid`, …) every doorbell answers `EACCES`:
    /// the kernel refuses `write()` on a file opened under other
    /// credentials, while the `ioctl` commands keep working.
    ///
    /// # Safety
    ///
    /// For each work request whose payload is SGEs, the device reads (SEND,
    /// RDMA WRITE) or writes (RDMA READ, atomics) the bytes
    /// `[addr, addr + length)` of every SGE through its lkey, behind the
    /// compiler's back, from this call until the request's completion has
    /// been polled from the send CQ; for an unsignalled request, until a
    /// later signalled request of this QP has completed; in any case at the
    /// latest until this QP has been destroyed: [`destroy`](Self::destroy)
    /// returned `Ok`, or the QP was dropped and the kernel accepted the
    /// `DESTROY_QP` the drop sends. If the kernel refuses it in the drop,
    /// the QP is abandoned, not destroyed: it stays in the kernel and the
    /// device may use that memory until the context is closed (every clone
    /// of the [`Context`] and every object made from it
    /// dropped); [`Context::abandoned_queue_pairs`](crate::Context::abandoned_queue_pairs)
    /// counts such QPs. A refused `destroy` hands the QP back, not
    /// destroyed ([`DestroyQpError`]). Until then that memory must stay
    /// mapped and registered, must not be written by the program, and, for
    /// READ and atomics, not read either. The remote
    /// address and rkey name the peer's memory, which the peer's
    /// registration governs. Inline payloads are copied during the call and
    /// need nothing.
    #[doc(alias = "ibv_post_send")]
    #[inline]
    pub unsafe fn post_send(&self, wrs: &[SendWr<'_>]) -> Result<(), Error> {
        // SAFETY: forwarded to the caller.
        unsafe { (self.posts.send)(self, wrs) }
    }

    /// [`post_send`](Self::post_send) for a caller that holds the QP
    /// exclusively (`&mut self`): the same checks, ring and doorbell, with
    /// no lock taken, since no `modify`, destroy or other post can run
    /// meanwhile. The cheapest way to post; see docs/data-path.md.
    ///
    /// # Safety
    ///
    /// As for [`post_send`](Self::post_send).
    #[doc(alias = "ibv_post_send")]
    #[inline]
    pub unsafe fn post_send_exclusive(&mut self, wrs: &[SendWr<'_>]) -> Result<(), Error> {
        // SAFETY: forwarded to the caller.
        unsafe { (self.posts.send_exclusive)(self, wrs) }
    }

    /// What every post_send checks before its ring: the process (before
    /// the ring lock: in a forked child a parent thread may hold it for
    /// ever), an empty list (nothing to do: `Ok(false)`), and the `wr_id`
    /// bits an owned SRQ reserves.
    #[inline(always)]
    fn check_sends(&self, wrs: &[SendWr<'_>]) -> Result<bool, Error> {
        if !self.origin.is_current() {
            return Err(self.pd.ctx.foreign_process(Op::PostSend));
        }
        if wrs.is_empty() {
            return Ok(false);
        }
        if self.reserved_wr_id_bits != 0 {
            self.check_reserved_wr_ids(wrs)?;
        }
        Ok(true)
    }

    /// Refuses a send whose `wr_id` has a bit the QP's owned SRQ reserves:
    /// its completion would be taken for one of that SRQ's receives.
    #[cold]
    fn check_reserved_wr_ids(&self, wrs: &[SendWr<'_>]) -> Result<(), Error> {
        match wrs
            .iter()
            .position(|wr| wr.wr_id & self.reserved_wr_id_bits != 0)
        {
            None => Ok(()),
            Some(i) => Err(self.post_error(
                Op::PostSend,
                i,
                PostError::ReservedWrId {
                    wr_id: wrs[i].wr_id,
                },
            )),
        }
    }

    /// What follows the driver's ring step ([`try_queue_sends`]): the
    /// doorbell when the ring asks for it; where it wrote nothing, the
    /// detailed post, which says why.
    ///
    /// # Safety
    ///
    /// As for [`post_send`](Self::post_send): the WQEs just published are
    /// the caller's promise.
    #[inline(always)]
    unsafe fn after_queue_sends(
        &self,
        queued: SendsQueued,
        wrs: &[SendWr<'_>],
    ) -> Result<(), Error> {
        match queued {
            SendsQueued::Written => Ok(()),
            // SAFETY: forwarded to the caller.
            SendsQueued::WrittenRing => unsafe { self.ring_doorbell() },
            // SAFETY: forwarded to the caller.
            SendsQueued::NotWritten => unsafe { self.post_send_detailed(wrs) },
        }
    }

    /// The post after the driver's ring step wrote nothing (or found the
    /// lock held): under the lock, waiting for it (free for an exclusive
    /// caller), the state and the requests checked again through the ring
    /// enum, which answers the refusal in detail, or posts after all where
    /// the kernel freed room meanwhile.
    ///
    /// # Safety
    ///
    /// As for [`post_send`](Self::post_send).
    #[cold]
    #[inline(never)]
    unsafe fn post_send_detailed(&self, wrs: &[SendWr<'_>]) -> Result<(), Error> {
        // The state is read under the ring lock, which `modify` holds until
        // it has stored the new state: no post lands in a ring being reset.
        let queued = queue_sends(&self.state, &mut self.sq.lock_unflagged(), wrs);
        match queued {
            Ok(false) => Ok(()),
            // SAFETY: forwarded to the caller.
            Ok(true) => unsafe { self.ring_doorbell() },
            Err(f) => Err(self.post_failure(Op::PostSend, f)),
        }
    }

    /// Writes the `POST_SEND` doorbell: the kernel then walks the send
    /// ring. An error here comes after the WQEs were published.
    ///
    /// # Safety
    ///
    /// As for [`post_send`](Self::post_send).
    ///
    /// Always inlined: with a plain `#[inline]` the compiler has put it out
    /// of line, depending on how the crate fell into codegen units, and a
    /// post then paid about 16 Ir more for the call (tools/ir-budget.sh).
    #[inline(always)]
    unsafe fn ring_doorbell(&self) -> Result<(), Error> {
        let frame = self.doorbell.as_bytes();
        if self.doorbell_fd < 0 {
            // SAFETY: forwarded to the caller.
            return unsafe { self.ring_doorbell_through_transport() };
        }
        // SAFETY: a non-negative fd here is the context's command file, open
        // while the context lives, which `self.pd` keeps alive.
        let fd = unsafe { BorrowedFd::borrow_raw(self.doorbell_fd) };
        // SAFETY: the doorbell frame's only pointer is its own response
        // word, exposed at creation; what the device does with the WQEs just
        // published is the caller's promise.
        self.doorbell_written(unsafe { write_command(fd, frame) })
    }

    /// The doorbell's outcome from what its write answered: every byte of
    /// the frame, or an error.
    #[inline]
    fn doorbell_written(&self, written: Result<usize, Errno>) -> Result<(), Error> {
        match written {
            Ok(n) if n == self.doorbell.as_bytes().len() => Ok(()),
            Ok(_) => Err(self.doorbell_error(Errno::IO)),
            Err(errno) => Err(self.doorbell_error(errno)),
        }
    }

    /// [`ring_doorbell`](Self::ring_doorbell) where the transport has no
    /// command file of its own to write to (the recording fake).
    ///
    /// # Safety
    ///
    /// As for [`post_send`](Self::post_send).
    #[inline(never)]
    unsafe fn ring_doorbell_through_transport(&self) -> Result<(), Error> {
        let frame = self.doorbell.as_bytes();
        // SAFETY: as in `ring_doorbell`.
        self.doorbell_written(unsafe { self.pd.ctx.inner.transport.write_prepared(frame) })
    }

    #[cold]
    fn doorbell_error(&self, errno: Errno) -> Error {
        crate::trace::error(Op::PostSend, &self.pd.ctx.inner.device, errno);
        Error::Doorbell {
            op: Op::PostSend,
            device: self.pd.ctx.inner.device.clone(),
            errno,
        }
    }

    /// Writes the doorbell to `fd` from now on (the instruction probes:
    /// `/dev/null`, so that a post's count includes the `write` wrapper as
    /// on a device, where the fake would record the frame instead).
    #[cfg(test)]
    pub(crate) fn doorbell_to(&mut self, fd: RawFd) {
        self.doorbell_fd = fd;
    }

    /// Whether the QP receives from a shared receive queue
    /// ([`QpInit::srq`]): it then has no receive ring of its own.
    pub fn has_srq(&self) -> bool {
        self.srq.is_some()
    }

    /// Whether the SRQ it receives from is an [`OwnedSrq`](crate::post::OwnedSrq)'s.
    pub(crate) fn srq_is_owned(&self) -> bool {
        self.reserved_wr_id_bits != 0
    }

    /// Posts receive work requests (`ibv_post_recv`): writes one WQE per
    /// element of `wrs` into the receive ring and publishes them together.
    /// No system call.
    ///
    /// All or nothing, as [`post_send`](Self::post_send): the QP must not
    /// be in RESET, each request has at most [`QpCaps::max_recv_sge`] SGEs,
    /// and the queue must have room for all of them.
    ///
    /// # Safety
    ///
    /// The device writes an incoming message into the SGEs' bytes
    /// `[addr, addr + length)` through their lkeys, behind the compiler's
    /// back, from this call until the request's completion (success or
    /// flush) has been polled from the receive CQ, or at the latest until
    /// this QP has been destroyed (as for [`post_send`](Self::post_send):
    /// `destroy` returned `Ok`, or the drop's `DESTROY_QP` was accepted).
    /// A destroy the kernel refuses in the drop abandons the QP: the device
    /// may write that memory until the context is closed
    /// ([`Context::abandoned_queue_pairs`](crate::Context::abandoned_queue_pairs)
    /// counts such QPs). Until then that memory must stay mapped and
    /// registered and must be neither read nor written by the program.
    #[doc(alias = "ibv_post_recv")]
    #[doc(alias = "rdma_post_recv")]
    #[doc(alias = "rdma_post_recvv")]
    #[inline]
    pub unsafe fn post_recv(&self, wrs: &[RecvWr<'_>]) -> Result<(), Error> {
        (self.posts.recv)(self, wrs).map_err(|f| self.post_failure(Op::PostRecv, f))
    }

    /// [`post_recv`](Self::post_recv) for a caller that holds the QP
    /// exclusively (`&mut self`): no lock taken, as
    /// [`post_send_exclusive`](Self::post_send_exclusive).
    ///
    /// # Safety
    ///
    /// As for [`post_recv`](Self::post_recv).
    #[doc(alias = "ibv_post_recv")]
    #[inline]
    pub unsafe fn post_recv_exclusive(&mut self, wrs: &[RecvWr<'_>]) -> Result<(), Error> {
        (self.posts.recv_exclusive)(self, wrs).map_err(|f| self.post_failure(Op::PostRecv, f))
    }
}

/// The states a send may be posted in, as a bit mask over `QpState as u8`:
/// RTS, and the later SQD, SQE and ERR (where the device flushes it).
const SEND_STATES: u32 = 1 << QpState::Rts as u8
    | 1 << QpState::Sqd as u8
    | 1 << QpState::Sqe as u8
    | 1 << QpState::Err as u8;

/// Whether a QP in state `raw` (`QpState as u8`) takes sends: one bit test.
#[inline(always)]
fn takes_sends(raw: u8) -> bool {
    SEND_STATES & (1u32 << (raw & 31)) != 0
}

/// Whether a QP in state `raw` takes receives: any state but RESET.
#[inline(always)]
fn takes_receives(raw: u8) -> bool {
    raw != QpState::Reset as u8
}

/// A QP's posts with its driver known, picked when the QP is made (as
/// libibverbs' inline `ibv_post_send` calls `ops.post_send`): each names
/// one function with every check, the ring lock (or `&mut` access), the
/// state check and the driver's writer in one body, which saves only the
/// registers that driver's writer needs, with no dispatch on the driver.
/// The public posts are inline calls through these pointers; the
/// benchmarks measure the functions they name, as they measure
/// libibverbs' providers behind its dispatch.
#[derive(Clone, Copy)]
struct Posts {
    send: PostSendShared,
    send_exclusive: PostSendExclusive,
    recv: PostRecvShared,
    recv_exclusive: PostRecvExclusive,
}

impl Posts {
    /// The posts of driver `D`.
    fn of<D: StateOf>() -> Posts {
        Posts {
            send: post_send_locked::<D>,
            send_exclusive: post_send_unlocked::<D>,
            recv: post_recv_locked::<D>,
            recv_exclusive: post_recv_unlocked::<D>,
        }
    }
}

/// A QP's `post_send` with its driver known ([`Posts`]).
///
/// # Safety
///
/// As for [`QueuePair::post_send`].
type PostSendShared = unsafe fn(&QueuePair, &[SendWr<'_>]) -> Result<(), Error>;

/// [`PostSendShared`] for a QP of driver `D`: the ring written under its
/// lock. The state is read under it too, which `modify` holds until it has
/// stored the new state: no post lands in a ring being reset.
///
/// # Safety
///
/// As for [`QueuePair::post_send`].
unsafe fn post_send_locked<D: StateOf>(qp: &QueuePair, wrs: &[SendWr<'_>]) -> Result<(), Error> {
    if !qp.check_sends(wrs)? {
        return Ok(());
    }
    let queued = match qp.sq.try_lock_unflagged() {
        Some(mut ring) => try_queue_sends::<D>(&qp.state, &mut ring, wrs),
        // Held by another thread: the detailed post waits for it, out of
        // line, so that this body holds nothing across a wait.
        None => SendsQueued::NotWritten,
    };
    // SAFETY: forwarded to the caller.
    unsafe { qp.after_queue_sends(queued, wrs) }
}

/// [`PostSendShared`] for an exclusive caller (`&mut`): the ring in hand
/// without a lock.
///
/// # Safety
///
/// As for [`QueuePair::post_send`].
type PostSendExclusive = unsafe fn(&mut QueuePair, &[SendWr<'_>]) -> Result<(), Error>;

/// [`PostSendExclusive`] for a QP of driver `D`.
///
/// # Safety
///
/// As for [`QueuePair::post_send`].
unsafe fn post_send_unlocked<D: StateOf>(
    qp: &mut QueuePair,
    wrs: &[SendWr<'_>],
) -> Result<(), Error> {
    if !qp.check_sends(wrs)? {
        return Ok(());
    }
    let queued = try_queue_sends::<D>(&qp.state, qp.sq.get_mut(), wrs);
    // SAFETY: forwarded to the caller.
    unsafe { qp.after_queue_sends(queued, wrs) }
}

/// Writes `wrs` into driver `D`'s send ring `sq` if the QP's `state`
/// allows sends, as [`queue_sends`], answering only whether it wrote them.
#[inline(always)]
fn try_queue_sends<D: StateOf>(
    state: &AtomicU8,
    sq: &mut SendQueue,
    wrs: &[SendWr<'_>],
) -> SendsQueued {
    let sq = D::send_queue_mut(sq);
    // Acquire: as in `queue_sends`.
    let raw = state.load(Ordering::Acquire);
    if !takes_sends(raw) {
        return SendsQueued::NotWritten;
    }
    // A QP's send queue is its driver's from creation on.
    let Some(sq) = sq else {
        return SendsQueued::NotWritten;
    };
    sq.try_post(wrs)
}

/// Writes `wrs` into the send ring `sq` if the QP's `state` allows sends
/// (read with the ring held: `modify` stores a new state with the ring
/// locks held) and answers whether the doorbell must be written, or why
/// not ([`QueuePair::post_send_detailed`]).
#[inline(always)]
fn queue_sends(
    state: &AtomicU8,
    sq: &mut SendQueue,
    wrs: &[SendWr<'_>],
) -> Result<bool, PostFailure> {
    // Acquire: pairs with `modify`'s Release store of the new state.
    let raw = state.load(Ordering::Acquire);
    if !takes_sends(raw) {
        return Err(wrong_state("post_send", raw));
    }
    sq.post(wrs)
}

/// A QP's `post_recv` with its driver known ([`Posts`]).
type PostRecvShared = fn(&QueuePair, &[RecvWr<'_>]) -> Result<(), PostFailure>;

/// [`PostRecvShared`] for a QP of driver `D`: every check of a post_recv
/// (the benchmarks measure this function, as they measure libibverbs'
/// `rxe_post_recv` behind `ibv_post_recv`'s dispatch), the ring written
/// under its lock, as in post_send. The common case calls nothing and so
/// saves no registers; anything else (another process, an SRQ's QP, a
/// held lock, a refusal, a batch, a full ring) ends in a tail call of the
/// cold [`post_recv_slow`], which does the whole post again and says why.
fn post_recv_locked<D: StateOf>(qp: &QueuePair, wrs: &[RecvWr<'_>]) -> Result<(), PostFailure> {
    if qp.origin.is_current() {
        if let Some(rq) = &qp.rq {
            if let Some(mut ring) = rq.try_lock_unflagged() {
                if try_write_recvs::<D>(&qp.state, &mut ring, wrs) {
                    return Ok(());
                }
            }
        }
    }
    post_recv_slow::<D>(qp, wrs)
}

/// A QP's `post_recv_exclusive` with its driver known: as
/// [`PostRecvShared`], the ring in hand without a lock.
type PostRecvExclusive = fn(&mut QueuePair, &[RecvWr<'_>]) -> Result<(), PostFailure>;

/// [`PostRecvExclusive`] for a QP of driver `D` (measured by the
/// benchmarks as [`post_recv_locked`] is).
fn post_recv_unlocked<D: StateOf>(
    qp: &mut QueuePair,
    wrs: &[RecvWr<'_>],
) -> Result<(), PostFailure> {
    if qp.origin.is_current() {
        if let Some(rq) = qp.rq.as_mut() {
            if try_write_recvs::<D>(&qp.state, rq.get_mut(), wrs) {
                return Ok(());
            }
        }
    }
    // The lock is free: `&mut` holds the QP alone.
    post_recv_slow::<D>(qp, wrs)
}

/// A receive posted to a QP that receives from an SRQ.
const RECEIVES_FROM_SRQ: PostFailure = PostFailure::Refused {
    index: 0,
    error: PostError::ReceivesFromSrq,
};

/// Writes `wrs` into driver `D`'s receive ring `rq` if the QP's `state`
/// allows receives ([`check_recv_state`]), answering only whether it
/// wrote them (a `bool` in a register).
#[inline(always)]
fn try_write_recvs<D: StateOf>(state: &AtomicU8, rq: &mut RecvQueue, wrs: &[RecvWr<'_>]) -> bool {
    let rq = D::recv_queue_mut(rq);
    // Acquire: as in `queue_sends`.
    if !takes_receives(state.load(Ordering::Acquire)) {
        return false;
    }
    // A QP's receive queue is its driver's from creation on.
    rq.is_some_and(|rq| rq.try_post(wrs))
}

/// The post after [`post_recv_locked`]'s common case failed: every check
/// again, waiting for the lock, then the ring's detailed
/// [`RecvRing::post`], which posts after all (the kernel freed room, or
/// the lock was only held) or says why not.
#[cold]
#[inline(never)]
fn post_recv_slow<D: StateOf>(qp: &QueuePair, wrs: &[RecvWr<'_>]) -> Result<(), PostFailure> {
    if !qp.origin.is_current() {
        return Err(PostFailure::ForeignProcess);
    }
    let Some(rq) = &qp.rq else {
        return Err(RECEIVES_FROM_SRQ);
    };
    let mut ring = rq.lock_unflagged();
    check_recv_state(&qp.state)?;
    match D::recv_queue_mut(&mut ring) {
        Some(rq) => rq.post(wrs),
        None => Err(PostFailure::Os(Errno::BADF)),
    }
}

/// Whether the QP's `state` allows receives (any but RESET), read as in
/// [`queue_sends`].
#[inline(always)]
fn check_recv_state(state: &AtomicU8) -> Result<(), PostFailure> {
    // Acquire: as in `queue_sends`.
    let raw = state.load(Ordering::Acquire);
    if !takes_receives(raw) {
        return Err(wrong_state("post_recv", raw));
    }
    Ok(())
}

/// The refusal of a post in state `raw`.
#[cold]
fn wrong_state(op: &'static str, raw: u8) -> PostFailure {
    PostFailure::Refused {
        index: 0,
        error: PostError::WrongState {
            op,
            state: QpState::from_raw(raw).unwrap_or(QpState::Err),
        },
    }
}

impl QueuePair {
    /// The send and receive CQs (the same one twice if the QP uses one).
    pub(crate) fn cqs(&self) -> (CompletionQueue, CompletionQueue) {
        (
            CompletionQueue {
                inner: self.send_cq.clone(),
            },
            CompletionQueue {
                inner: self.recv_cq.clone(),
            },
        )
    }

    /// Whether the native method or the write command created the QP (and
    /// will destroy it).
    pub fn create_path(&self) -> CreatePath {
        self.path
    }

    /// Destroys the QP now (`DESTROY_QP`, through the interface that
    /// created it) and returns the async events the kernel reported for it
    /// (`events_reported`). Its rings are unmapped (rxe: after the destroy;
    /// siw: before it), and its CQs and PD are released (a CQ it was the
    /// last user of is destroyed). The multicast groups attached through
    /// this QP are detached first (`DETACH_MCAST` each), since the kernel
    /// refuses to destroy a QP with one attached (`ibv_destroy_qp` answers
    /// its `EBUSY`; here the detach is done for you). Should a detach fail,
    /// the QP comes back with that error, the groups not yet detached still
    /// attached. If the kernel refuses the destroy, the QP comes back
    /// in the error, still in the kernel: on rxe intact and usable, on siw
    /// with its rings mapped again, unless that mapping fails too, when
    /// posts to the queue left unmapped answer `EBADF` ([`DestroyQpError`]
    /// says exactly what holds). In a forked child:
    /// [`Error::ForeignProcess`], nothing sent.
    #[doc(alias = "ibv_destroy_qp")]
    pub fn destroy(mut self) -> Result<u32, DestroyQpError> {
        let sent = self
            .pd
            .ctx
            .check_process(Op::DestroyQp)
            .and_then(|()| self.detach_all())
            .and_then(|()| self.send_destroy(true));
        match sent {
            Ok(events) => {
                self.destroyed = true;
                Ok(events)
            }
            Err(error) => Err(DestroyQpError {
                qp: Box::new(self),
                error,
            }),
        }
    }

    /// The PD the QP is in.
    pub(crate) fn pd_inner(&self) -> &Arc<PdInner> {
        &self.pd
    }

    /// Ties the type-2 window `handle` (whose live flag is `live`) to this
    /// QP: the QP's destroy deallocates it first.
    pub(crate) fn tie_window(&self, handle: u32, live: &Arc<AtomicBool>) {
        let mut windows = self.windows.lock();
        windows.retain(|(_, live)| live.load(Ordering::Acquire));
        if !windows.iter().any(|(h, _)| *h == handle) {
            windows.push((handle, live.clone()));
        }
    }

    /// Deallocates the type-2 windows tied to this QP that nothing else
    /// deallocated: rxe's DESTROY_QP would wait for each still bound.
    fn release_windows(&self) {
        let windows = std::mem::take(&mut *self.windows.lock());
        for (handle, live) in windows {
            if live.swap(false, Ordering::AcqRel) {
                let _ = self.pd.windows.dealloc(&self.pd.ctx, handle);
            }
        }
    }
}

impl Drop for QueuePair {
    fn drop(&mut self) {
        // In a forked child the QP is the parent's: send nothing.
        if self.destroyed || !self.pd.ctx.is_owned_by_this_process() {
            return;
        }
        // The kernel refuses to destroy a QP with a multicast group
        // attached; a detach that fails leaves the destroy to be refused.
        let _ = self.detach_all();
        // rxe's rings are unmapped only after the destroy (field drops
        // follow this body), siw's before it. A refused destroy cannot be
        // reported from a drop: the QP stays in the kernel, abandoned, and
        // the device may use what was posted to it until the context is
        // closed. Count it, as a refused DEREG_MR is counted.
        if self.send_destroy(false).is_err() {
            self.pd.ctx.note_abandoned_queue_pair();
        }
    }
}
