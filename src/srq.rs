//! Shared receive queues (`struct ibv_srq`): [`SharedReceiveQueue`].

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};

use parking_lot::Mutex;

use crate::command::{CreateSrq, DestroySrq, ModifySrq, QuerySrq};
use crate::context::Context;
use crate::cq::{CompletionQueue, CqInner};
use crate::error::{Errno, Error, Op};
use crate::pd::{debug_object, PdInner, ProtectionDomain};
use crate::process::Generation;
use crate::provider::rings::{RecvQueue, MAX_CREATE_UHW_OUT};
use crate::provider::{StateOf, UhwIn};
use crate::wr::RecvWr;

/// The value each SRQ's async events carry (`user_handle`): unique in the
/// process.
static NEXT_SRQ_EVENT_ID: AtomicU64 = AtomicU64::new(1);

/// What to create a shared receive queue with (`struct ibv_srq_init_attr`).
///
/// ```
/// # fn f(pd: &uverbs::ProtectionDomain) -> Result<(), uverbs::Error> {
/// use uverbs::qp::SrqInit;
/// let srq = pd.create_srq(&SrqInit::new(256, 1).srq_limit(16))?;
/// assert!(srq.max_wr() >= 256);
/// # Ok(()) }
/// ```
#[doc(alias = "ibv_srq_init_attr")]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct SrqInit {
    /// Receive work requests outstanding at once (at least this many).
    pub max_wr: u32,
    /// SGEs per receive work request (at least this many).
    pub max_sge: u32,
    /// Armed from creation at this limit (0: not armed).
    pub srq_limit: u32,
}

impl SrqInit {
    /// An SRQ of at least `max_wr` requests of `max_sge` SGEs, not armed.
    pub fn new(max_wr: u32, max_sge: u32) -> Self {
        SrqInit {
            max_wr,
            max_sge,
            srq_limit: 0,
        }
    }

    setters! {
        /// Armed from creation: report the limit event once fewer than
        /// `srq_limit` requests remain.
        pub fn srq_limit(srq_limit: u32) => srq_limit;
    }
}

/// An SRQ's attributes as the kernel reports them (`struct ibv_srq_attr`).
#[doc(alias = "ibv_srq_attr")]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SrqAttr {
    /// Receive work requests it holds.
    pub max_wr: u32,
    /// SGEs per receive work request.
    pub max_sge: u32,
    /// The armed limit; 0 when not armed (also after the event fired).
    pub srq_limit: u32,
}

/// What the SRQ's handles share; QPs on it hold it too, so the kernel
/// object outlives them.
pub(crate) struct SrqInner {
    pd: Arc<PdInner>,
    pub(crate) handle: u32,
    event_id: u64,
    max_wr: u32,
    max_sge: u32,
    /// The context's process generation (a post's fork check reads it).
    origin: Generation,
    /// The ring, unmapped when this is dropped: after the destroy, the
    /// order of rdma-core's rxe and siw providers for an SRQ.
    ring: Mutex<RecvQueue>,
    /// Set by a successful destroy: the drop sends nothing.
    released: AtomicBool,
    /// Set for good by [`OwnedSrq::new`](crate::post::OwnedSrq::new): the SRQ's
    /// receives are posted by its owner only, and the receive completions
    /// of the QPs on it go to that owner.
    owned: AtomicBool,
    /// What an owner needs kept with the SRQ.
    owner: Mutex<OwnerState>,
}

/// What the owner of an SRQ needs kept with the SRQ itself.
#[derive(Default)]
pub(crate) struct OwnerState {
    /// The receive CQs of the QPs created on the SRQ, where its receive
    /// completions arrive (weak: a CQ goes with its last QP and handle).
    cqs: Vec<Weak<CqInner>>,
    /// The owner's outstanding receives, once the owner was dropped while
    /// QPs still used the SRQ: freed after the SRQ is destroyed, with the
    /// last of them, or leaked if that destroy fails.
    kept: Option<Box<dyn Send>>,
}

impl SrqInner {
    /// The context the SRQ belongs to.
    pub(crate) fn ctx(&self) -> &Context {
        &self.pd.ctx
    }

    /// The id its async events and its owner's routes carry.
    pub(crate) fn event_id(&self) -> u64 {
        self.event_id
    }

    /// Whether an [`OwnedSrq`](crate::post::OwnedSrq) owns it.
    pub(crate) fn is_owned(&self) -> bool {
        // Relaxed: set before any QP can be created on the SRQ (the owner
        // takes the only handle), so every reader is ordered after it.
        self.owned.load(Ordering::Relaxed)
    }

    /// Marks the SRQ owned.
    pub(crate) fn set_owned(&self) {
        self.owned.store(true, Ordering::Relaxed);
    }

    /// Notes `cq` as a CQ where the SRQ's receive completions arrive.
    pub(crate) fn note_cq(&self, cq: &CompletionQueue) {
        let mut owner = self.owner.lock();
        owner.cqs.retain(|w| w.strong_count() > 0);
        if !owner
            .cqs
            .iter()
            .any(|w| w.as_ptr() == Arc::as_ptr(&cq.inner))
        {
            owner.cqs.push(Arc::downgrade(&cq.inner));
        }
    }

    /// Calls `f` on each CQ where the SRQ's receive completions arrive
    /// (those still alive), until one fails. Lock order: this, then the
    /// CQ's.
    pub(crate) fn try_for_each_cq(
        &self,
        mut f: impl FnMut(&CompletionQueue) -> Result<(), Error>,
    ) -> Result<(), Error> {
        let owner = self.owner.lock();
        for inner in owner.cqs.iter().filter_map(Weak::upgrade) {
            f(&CompletionQueue { inner })?;
        }
        Ok(())
    }

    /// Keeps the owner's outstanding receives until the SRQ is destroyed.
    pub(crate) fn keep(&self, kept: Box<dyn Send>) {
        self.owner.lock().kept = Some(kept);
    }

    /// DESTROY_SRQ; on success the SRQ is marked released. Answers the
    /// async events the kernel reported for it.
    fn destroy(&self) -> Result<u32, Error> {
        let ctx = &self.pd.ctx;
        ctx.check_process(Op::DestroySrq)?;
        // The ring lock keeps posts out while the command is in the kernel.
        let _ring = self.ring.lock();
        // SAFETY: our own SRQ, destroyed once (marked released on success);
        // its ring stays mapped until this is dropped.
        let events = unsafe { send_destroy(ctx, self.handle) }?;
        self.released.store(true, Ordering::Release);
        Ok(events)
    }
}

/// DESTROY_SRQ of `handle`; answers the async events reported for it.
///
/// # Safety
///
/// `handle` is an SRQ of `ctx` that nothing uses after a success, sent
/// once.
unsafe fn send_destroy(ctx: &Context, handle: u32) -> Result<u32, Error> {
    // SAFETY: DESTROY_SRQ hands no memory to the device; the handle is
    // the caller's to destroy.
    let (resp, _) = unsafe { ctx.run(Op::DestroySrq, &DestroySrq::new(handle), &mut []) }?;
    Ok(resp.events_reported)
}

impl Drop for SrqInner {
    fn drop(&mut self) {
        let owner = std::mem::take(self.owner.get_mut());
        // Every QP on it held this: none is left. In a forked child the SRQ
        // is the parent's: send nothing.
        let gone = if self.released.load(Ordering::Acquire) {
            true
        } else if !self.pd.ctx.is_owned_by_this_process() {
            false
        } else {
            // A refusal cannot be reported from a drop; the kernel keeps its
            // own reference on the ring's pages, so unmapping after it is
            // sound.
            self.destroy().is_ok()
        };
        if !gone {
            // The device may still write the owner's receive buffers.
            std::mem::forget(owner.kept);
            return;
        }
        drop(owner.kept);
        for cq in owner.cqs.iter().filter_map(Weak::upgrade) {
            CompletionQueue { inner: cq }.drop_srq(self.event_id);
        }
    }
}

/// A shared receive queue (`struct ibv_srq`): one receive ring that many
/// queue pairs take their receives from.
///
/// The ring is the kernel's, mapped like a QP's receive ring and written
/// by the same code (rxe: `rxe_queue` indices; siw: the per-element VALID
/// flag): [`SharedReceiveQueue::post_recv`] makes no system call. A QP
/// created with [`QpInit::srq`](crate::QpInit::srq) has no receive ring of
/// its own; whichever attached QP a message arrives on consumes the oldest
/// request, and its completion goes to that QP's receive CQ with that
/// QP's number.
///
/// The limit ([`SharedReceiveQueue::modify_limit`]) arms the SRQ: once
/// fewer than `limit` requests remain, the kernel reports
/// [`AsyncEventKind::SrqLimitReached`](crate::device::AsyncEventKind::SrqLimitReached)
/// once, about [`AsyncElement::Srq`](crate::device::AsyncElement::Srq) with this
/// SRQ's [`event_id`](SharedReceiveQueue::event_id), and disarms it.
///
/// Created by [`ProtectionDomain::create_srq`]; QPs use it through
/// [`QpInit::srq`](crate::QpInit::srq) and keep it alive, so the kernel
/// object is destroyed (`DESTROY_SRQ`) after the last of them whatever the
/// drop order. [`destroy`](Self::destroy) destroys it now: while a QP uses
/// it the kernel answers `EBUSY` and the SRQ comes back, usable.
///
/// rxe, siw and mlx5 have SRQs; other drivers answer [`Error::Unsupported`].
/// On mlx5 the ring is the process's (libmlx5's linked list of WQEs, see
/// docs/mlx5.md), not the kernel's.
#[doc(alias = "ibv_srq")]
#[doc(alias = "ibv_create_srq")]
pub struct SharedReceiveQueue {
    pub(crate) inner: Arc<SrqInner>,
}

impl fmt::Debug for SharedReceiveQueue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        debug_object(
            f,
            "SharedReceiveQueue",
            &self.inner.pd.ctx,
            self.inner.handle,
        )
        .field("max_wr", &self.inner.max_wr)
        .field("max_sge", &self.inner.max_sge)
        .finish()
    }
}

/// A failed [`SharedReceiveQueue::destroy`]: the SRQ is handed back,
/// intact and usable.
#[derive(Debug, thiserror::Error)]
#[error("{error}")]
#[non_exhaustive]
pub struct DestroySrqError {
    /// The SRQ, unchanged.
    pub srq: SharedReceiveQueue,
    /// Why the kernel refused: `EBUSY` while a queue pair uses the SRQ.
    pub error: Error,
}

crate::error::hands_back_with_error! {
    [] DestroySrqError, "the SRQ (which tries the destroy again)";
}

impl ProtectionDomain {
    /// Creates a shared receive queue in this PD (`CREATE_SRQ`, the write
    /// command, as rdma-core 44 sends it) and maps its ring where the
    /// driver's answer says: rxe's `mminfo`; siw's `srq_key`, `num_rqe` ×
    /// 112 bytes. If the answer is short (`EPROTO`), names no mapping
    /// (`ENOMEM`) or mapping fails, the SRQ is destroyed again.
    ///
    /// The kernel checks the sizes: `max_wr` 0 or above the device's
    /// `max_srq_wr`, `max_sge` above `max_srq_sge`, or (siw) a limit above
    /// `max_wr` answer `EINVAL`. The SRQ holds at least what was asked
    /// ([`max_wr`](SharedReceiveQueue::max_wr) says how many).
    ///
    /// mlx5: the process allocates the ring and names it in the driver
    /// data, as libmlx5 44 does; Linux's mlx5_ib does not pass a limit
    /// given here to the device (arm it with
    /// [`modify_limit`](SharedReceiveQueue::modify_limit)).
    ///
    /// Drivers without SRQs here: [`Error::Unsupported`],
    /// nothing sent. In a forked child: [`Error::ForeignProcess`].
    #[doc(alias = "ibv_create_srq")]
    pub fn create_srq(&self, init: &SrqInit) -> Result<SharedReceiveQueue, Error> {
        let ctx = &self.inner.ctx;
        ctx.check_process(Op::CreateSrq)?;
        let provider = ctx.inner.provider;
        let uhw_len = match (provider.data_path_refusal(), provider.create_srq_uhw_out()) {
            (None, Some(uhw_len)) => uhw_len,
            (refusal, _) => {
                return Err(Error::Unsupported {
                    op: Op::CreateSrq,
                    device: ctx.inner.device.clone(),
                    reason: refusal
                        .unwrap_or("uverbs has shared receive queues for rxe, siw and mlx5 only"),
                })
            }
        };
        let event_id = NEXT_SRQ_EVENT_ID.fetch_add(1, Ordering::Relaxed);
        let (resp, ring) = with_driver!(provider,
            D => self.create_srq_ring::<D>(init, event_id, uhw_len)?,
            Generic => return Err(Error::os(Op::CreateSrq, &ctx.inner.device, Errno::OPNOTSUPP)));
        Ok(SharedReceiveQueue {
            inner: Arc::new(SrqInner {
                pd: self.inner.clone(),
                handle: resp.srq_handle,
                event_id,
                // What the ring holds (the driver's `srq_max_wr`): more
                // than the kernel answered on 6.1's rxe (it answers the
                // size asked for and rounds the ring up to a power of two
                // minus one); less on mlx5 (the kernel counts libmlx5's
                // wait queue too).
                max_wr: resp.max_wr,
                max_sge: resp.max_sge,
                origin: ctx.inner.origin,
                ring: Mutex::new(ring),
                released: AtomicBool::new(false),
                owned: AtomicBool::new(false),
                owner: Mutex::new(OwnerState::default()),
            }),
        })
    }

    /// The driver's part of [`create_srq`](Self::create_srq): sends the
    /// create (with room for `uhw_len` bytes of driver answer) and maps the
    /// ring (destroying the SRQ again if that fails).
    fn create_srq_ring<D: StateOf>(
        &self,
        init: &SrqInit,
        event_id: u64,
        uhw_len: usize,
    ) -> Result<(uverbs_uapi::ib_uverbs_create_srq_resp, RecvQueue), Error> {
        let ctx = &self.inner.ctx;
        let fail = |e| Error::os(Op::CreateSrq, &ctx.inner.device, e);
        let state = D::state_of(&ctx.inner.driver).ok_or_else(|| fail(Errno::OPNOTSUPP))?;
        if let Some(reason) = D::state_refusal(state) {
            return Err(Error::Unsupported {
                op: Op::CreateSrq,
                device: ctx.inner.device.clone(),
                reason,
            });
        }
        let (prep, max_wr, max_sge) =
            D::prepare_srq(state, init.max_wr, init.max_sge).map_err(fail)?;
        let mut uhw_buf = [0u8; MAX_CREATE_UHW_OUT];
        let uhw = &mut uhw_buf[..uhw_len];
        let cmd = CreateSrq::new(self.inner.handle, event_id, max_wr, max_sge)
            .srq_limit(init.srq_limit)
            .uhw_in(prep.uhw_in());
        // SAFETY: rxe's and siw's rings are the kernel's; memory a driver's
        // preparation names (mlx5's buffer) is owned by the ring that takes
        // the preparation over, dropped after the destroy.
        let (mut resp, written) = unsafe { ctx.run(Op::CreateSrq, &cmd, uhw) }?;
        let transport = ctx.inner.transport.as_ref();
        match D::map_prepared_srq(
            state,
            prep,
            transport,
            uhw,
            written,
            resp.srq_handle,
            resp.max_sge,
        ) {
            Ok(ring) => {
                resp.max_wr = D::srq_max_wr(&ring, resp.max_wr);
                Ok((resp, D::recv_queue(ring)))
            }
            Err(e) => {
                // SAFETY: the SRQ just created, which nothing else knows.
                let _ = unsafe { send_destroy(ctx, resp.srq_handle) };
                Err(fail(e))
            }
        }
    }
}

impl SharedReceiveQueue {
    /// The kernel's handle of the SRQ.
    pub fn handle(&self) -> u32 {
        self.inner.handle
    }

    /// The value its async events carry ([`AsyncElement::Srq`](crate::device::AsyncElement::Srq)).
    pub fn event_id(&self) -> u64 {
        self.inner.event_id
    }

    /// Receive work requests it holds: what the kernel answered the create,
    /// or what its ring holds where that is more (rxe on Linux 6.1); on
    /// mlx5 what its free list holds, as libmlx5 answers (the kernel's
    /// answer, which [`query`](Self::query) gives, counts libmlx5's wait
    /// queue too).
    pub fn max_wr(&self) -> u32 {
        self.inner.max_wr
    }

    /// SGEs per receive work request, as the kernel answered.
    pub fn max_sge(&self) -> u32 {
        self.inner.max_sge
    }

    /// The context it belongs to.
    pub fn context(&self) -> &Context {
        self.inner.ctx()
    }

    /// Arms the SRQ at `limit` (`MODIFY_SRQ` with `IBV_SRQ_LIMIT`): once
    /// fewer than `limit` requests remain, the kernel reports
    /// [`SrqLimitReached`](crate::device::AsyncEventKind::SrqLimitReached) once and
    /// disarms it. 0 disarms. A limit above what the SRQ holds is the
    /// kernel's `EINVAL`. Changing the size (`IBV_SRQ_MAX_WR`) is not
    /// offered: siw refuses it, and rxe's answer goes through a pointer
    /// the kernel writes behind the ring's back.
    #[doc(alias = "ibv_modify_srq")]
    pub fn modify_limit(&self, limit: u32) -> Result<(), Error> {
        let ctx = self.inner.ctx();
        let cmd = ModifySrq::limit(self.inner.handle, limit)
            .uhw_in(ctx.inner.provider.modify_srq_uhw_in());
        // SAFETY: MODIFY_SRQ of the limit hands no memory to the device
        // (rxe's input names no `mminfo`: it is read only for a resize).
        unsafe { ctx.run(Op::ModifySrq, &cmd, &mut []) }.map(drop)
    }

    /// The SRQ's attributes as the kernel sees them (`QUERY_SRQ`).
    #[doc(alias = "ibv_query_srq")]
    pub fn query(&self) -> Result<SrqAttr, Error> {
        // SAFETY: QUERY_SRQ hands no memory to the device.
        let (resp, _) = unsafe {
            self.inner
                .ctx()
                .run(Op::QuerySrq, &QuerySrq::new(self.inner.handle), &mut [])
        }?;
        Ok(SrqAttr {
            max_wr: resp.max_wr,
            max_sge: resp.max_sge,
            srq_limit: resp.srq_limit,
        })
    }

    /// Posts receive work requests to the SRQ (`ibv_post_srq_recv`): one
    /// WQE per element of `wrs`, published together, or none (each request
    /// has at most [`max_sge`](Self::max_sge) SGEs, and the ring must have
    /// room for all). No system call.
    ///
    /// # Safety
    ///
    /// As for [`QueuePair::post_recv`](crate::QueuePair::post_recv), with
    /// any QP on this SRQ as the writer: the device writes an incoming
    /// message into the SGEs' bytes from this call until the request's
    /// completion has been polled from the receive CQ of the QP that
    /// consumed it, or at the latest until the SRQ has been destroyed
    /// (`destroy` returned `Ok`, or the drop's `DESTROY_SRQ` was accepted).
    /// Until then that memory must stay mapped and registered and must be
    /// neither read nor written by the program.
    #[doc(alias = "ibv_post_srq_recv")]
    pub unsafe fn post_recv(&self, wrs: &[RecvWr<'_>]) -> Result<(), Error> {
        // SAFETY: forwarded to the caller.
        unsafe { self.post(wrs, false) }
    }

    /// Posts `wrs` to the ring after the checks every post makes (the
    /// process first); a caller that is not the SRQ's owner (`by_owner`
    /// false) is refused on an owned SRQ.
    ///
    /// # Safety
    ///
    /// As for [`post_recv`](Self::post_recv).
    pub(crate) unsafe fn post(&self, wrs: &[RecvWr<'_>], by_owner: bool) -> Result<(), Error> {
        let ctx = self.inner.ctx();
        if !self.inner.origin.is_current() {
            return Err(ctx.foreign_process(Op::PostSrqRecv));
        }
        if !by_owner && self.inner.is_owned() {
            return Err(Error::input(
                Op::PostSrqRecv,
                &ctx.inner.device,
                "the SRQ belongs to an OwnedSrq: post through it",
            ));
        }
        self.inner
            .ring
            .lock()
            .post(wrs)
            .map_err(|f| f.into_error(Op::PostSrqRecv, &ctx.inner.device))
    }

    /// Destroys the SRQ now (`DESTROY_SRQ`) and answers the async events
    /// the kernel reported about it. While a QP uses it the kernel answers
    /// `EBUSY`: the SRQ comes back in the error, intact and usable. In a
    /// forked child: [`Error::ForeignProcess`], nothing sent.
    #[doc(alias = "ibv_destroy_srq")]
    pub fn destroy(self) -> Result<u32, DestroySrqError> {
        match self.inner.destroy() {
            Ok(events) => Ok(events),
            Err(error) => Err(DestroySrqError { srq: self, error }),
        }
    }
}
