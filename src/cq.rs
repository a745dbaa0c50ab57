//! Completion channels and completion queues.
//!
//! A CQ is a ring the kernel shares with this process: `CREATE_CQ` answers
//! where it is (rxe: `rxe_create_cq_resp::mi`; siw: `siw_uresp_create_cq`),
//! the CQ maps it once on the command file, and [`CompletionQueue::poll`]
//! copies completions out of it with no system call. What differs per
//! driver lives in `provider::rings`: the ring's
//! layout, how the CQ is armed (rxe: `REQ_NOTIFY_CQ`; siw: a store to the
//! ring's control word), and the teardown order (rxe destroys, then unmaps;
//! siw unmaps, then destroys, as rdma-core does).
//!
//! Creation goes native first, as rdma-core's `ibv_icmd_create_cq` does:
//! over the ioctl transport (and the recording fake) `UVERBS_METHOD_CQ_CREATE`;
//! when the kernel refuses the method itself (`EPROTONOSUPPORT`: the method
//! or a mandatory attribute is unknown; `ENOTTY`: no ioctl framework) the
//! write command `CREATE_CQ` follows, framed as the context frames write
//! commands. Over the legacy write() transport, and over Auto's
//! write+methods, only the write command is used (by `write()`, the
//! cheaper framing). The object is destroyed through the interface that
//! created it.
//!
//! Completion events are counted per CQ as libibverbs counts them
//! (`ibv_get_cq_event` / `ibv_ack_cq_events`): see
//! [`CompletionQueue::ack_events`].

use crate::process::Generation;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::fmt;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::command::{CreateCompChannel, CreateCq, DestroyCq, ReqNotifyCq, ResizeCq};
use crate::context::Context;
use crate::cq_routing::{Reader, Routing, BATCH};
use crate::error::{Errno, Error, Op};
use crate::event_fd;
use crate::method::{native_refused, CqCreate, CqDestroy};
use crate::pd::debug_object;
use crate::provider::rings::{
    CompletionRing, CqRing, FirstPoll, Ring, Unmapped, MAX_CREATE_UHW_OUT,
};
use crate::provider::{StateOf, UhwIn};
use crate::ring_lock::{RingGuard, RingLock};
use crate::wr::WorkCompletion;
use uverbs_uapi as sys;

/// Which interface created a CQ or QP (and destroys it).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CreatePath {
    /// The native ioctl method (`UVERBS_METHOD_CQ_CREATE`,
    /// `UVERBS_METHOD_QP_CREATE`).
    NativeMethod,
    /// The write command (`CREATE_CQ`, `CREATE_QP`): sent with `write()`
    /// over the legacy transport, as `UVERBS_METHOD_INVOKE_WRITE` over the
    /// ioctl transport.
    WriteCommand,
}

/// The driver id for a native create, when the context goes native first:
/// its transport creates natively ([`TransportKind::creates_natively`]:
/// ioctl, not the legacy write() nor Auto's write+methods) and the driver
/// is known.
pub(crate) fn native_driver(ctx: &Context) -> Option<u32> {
    if !ctx.inner.transport.kind().creates_natively() {
        return None;
    }
    ctx.inner.driver_id.map(|d| d.0)
}

/// The value each CQ's events carry (`user_handle`): unique in the process.
static NEXT_CQ_EVENT_ID: AtomicU64 = AtomicU64::new(1);

/// A completion channel (`struct ibv_comp_channel`): a descriptor on which
/// the CQs created with it report completion events, once per
/// [`CompletionQueue::req_notify`].
///
/// Its descriptor is non-blocking and close-on-exec from creation and it
/// implements [`AsFd`], so epoll or tokio's `AsyncFd` can wait on it and
/// call [`try_get_event`](Self::try_get_event) when it is readable;
/// [`get_event`](Self::get_event) waits for one event (and
/// [`wait_event`](Self::wait_event) for at most a timeout). Each event read
/// is counted on its CQ.
/// The descriptor is closed when the channel and every CQ made with it are
/// gone; events still queued then are discarded by the kernel (each CQ's
/// destroy removes its own), so dropping with unacked events neither hangs
/// nor leaks.
#[doc(alias = "ibv_comp_channel")]
#[doc(alias = "ibv_create_comp_channel")]
#[doc(alias = "ibv_destroy_comp_channel")]
pub struct CompletionChannel {
    inner: Arc<ChannelInner>,
}

struct ChannelInner {
    ctx: Context,
    fd: OwnedFd,
    /// The event counts of each live CQ reporting here, by event id.
    cqs: std::sync::Mutex<HashMap<u64, Arc<EventCounts>>>,
}

impl ChannelInner {
    fn cqs(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Arc<EventCounts>>> {
        // Every holder does one insert, remove or lookup: never half-done.
        self.cqs.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// One CQ's completion events: read by `get_event`, acked by the user.
#[derive(Debug, Default)]
struct EventCounts {
    received: AtomicU32,
    acked: AtomicU32,
}

impl fmt::Debug for CompletionChannel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CompletionChannel")
            .field("device", &self.inner.ctx.device_name())
            .field("fd", &self.inner.fd.as_raw_fd())
            .finish()
    }
}

impl CompletionChannel {
    /// The context the channel belongs to.
    pub fn context(&self) -> &Context {
        &self.inner.ctx
    }

    /// Waits for one completion event and returns the
    /// [`event_id`](CompletionQueue::event_id) of the CQ it is about; a
    /// signal does not end the wait. Re-arm that CQ with
    /// [`req_notify`](CompletionQueue::req_notify) and poll it.
    ///
    /// Like `ibv_get_cq_event`, each event is counted on its CQ
    /// ([`CompletionQueue::events_received`]); acknowledge it with
    /// [`CompletionQueue::ack_events`]. An event about no live CQ of this
    /// channel (one created with raw commands) is returned uncounted.
    ///
    /// In a forked child the channel is the parent's: nothing is read (the
    /// event stays queued for the parent) and the answer is
    /// [`Error::ForeignProcess`].
    #[doc(alias = "ibv_get_cq_event")]
    pub fn get_event(&self) -> Result<u64, Error> {
        event_fd::get_event(self)
    }

    /// [`get_event`](Self::get_event) for at most `timeout`: `None` when
    /// no event came.
    pub fn wait_event(&self, timeout: Duration) -> Result<Option<u64>, Error> {
        event_fd::wait_event_for(self, Some(timeout))
    }

    /// The next event if one is queued, else `Ok(None)` at once (the
    /// descriptor is non-blocking): what to call when epoll or tokio's
    /// `AsyncFd` reports the channel readable.
    pub fn try_get_event(&self) -> Result<Option<u64>, Error> {
        // Before the read: the descriptor is shared with the parent, and an
        // event a child read would be gone for the parent, which may be
        // blocked waiting for it.
        self.inner.ctx.check_process(Op::GetCqEvent)?;
        let read = event_fd::read_desc::<sys::ib_uverbs_comp_event_desc>(&self.inner.fd);
        let Some(event) = read.map_err(|e| self.fail(e))? else {
            return Ok(None);
        };
        if let Some(counts) = self.inner.cqs().get(&event.cq_handle) {
            counts.received.fetch_add(1, Ordering::AcqRel);
        }
        Ok(Some(event.cq_handle))
    }

    fn fail(&self, errno: Errno) -> Error {
        Error::os(Op::GetCqEvent, &self.inner.ctx.inner.device, errno)
    }
}

impl event_fd::sealed::Sealed for CompletionChannel {}

impl event_fd::EventSource for CompletionChannel {
    /// The [`event_id`](CompletionQueue::event_id) of the CQ.
    type Event = u64;

    fn try_get_event(&self) -> Result<Option<u64>, Error> {
        CompletionChannel::try_get_event(self)
    }

    fn wait_error(&self, errno: Errno) -> Error {
        self.fail(errno)
    }

    fn owned_here(&self) -> bool {
        self.inner.ctx.is_owned_by_this_process()
    }
}

impl AsFd for CompletionChannel {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.inner.fd.as_fd()
    }
}

impl AsRawFd for CompletionChannel {
    fn as_raw_fd(&self) -> RawFd {
        self.inner.fd.as_raw_fd()
    }
}

/// A CQ's plain poll with its driver known: the ring lock tried, the
/// routing flag read and the driver's ring read in one body, which saves
/// only the registers that driver's poll needs, with no dispatch on the
/// driver (picked once, at creation, as libibverbs' `ops.poll_cq` is).
/// `None` hands the poll to the full path (the lock is held elsewhere, the
/// CQ is routed, or the ring is unmapped), which finds out which; an
/// `Option<usize>` comes back in two registers, where a `Result` with a
/// reason came back through memory.
type FastPoll = fn(&CqInner, &mut [WorkCompletion]) -> Option<usize>;

/// [`FastPoll`] for a CQ of driver `D`: every check of a plain poll, in
/// the function the CQ's pointer names (the benchmarks measure it, as they
/// measure libibverbs' `rxe_poll_cq` behind `ibv_poll_cq`'s dispatch).
fn fast_poll<D: StateOf>(inner: &CqInner, out: &mut [WorkCompletion]) -> Option<usize> {
    // Before the ring lock and the ring (see `req_notify`): a child's poll
    // would hand the parent's completions back to the kernel.
    if !inner.origin.is_current() {
        return None;
    }
    // Free and not routed (see `adopt`), in one compare-and-swap.
    let mut ring = inner.ring.try_lock_unrouted()?;
    // A CQ's ring is its driver's from creation on.
    match D::cq_ring_mut(&mut ring)?.poll_first(out).ok()? {
        FirstPoll::Done(n) => Some(n),
        // In tail position, the lock moved in: the common case above keeps
        // nothing across a call, so it saves no registers.
        FirstPoll::More => poll_more::<D>(ring, out),
    }
}

/// [`fast_poll`] past its first completion, out of line; releases the lock.
#[inline(never)]
fn poll_more<D: StateOf>(
    mut ring: RingGuard<'_, CqRing>,
    out: &mut [WorkCompletion],
) -> Option<usize> {
    Some(D::cq_ring_mut(&mut ring)?.poll_more(out))
}

/// The kernel CQ, shared by the [`CompletionQueue`] and the QPs using it.
pub(crate) struct CqInner {
    pub(crate) ctx: Context,
    pub(crate) handle: u32,
    /// Entries the kernel answered (by the create, then by each resize).
    cqe: AtomicU32,
    event_id: u64,
    path: CreatePath,
    events: Arc<EventCounts>,
    /// Set once a destroy succeeded: nothing is sent again.
    released: AtomicBool,
    /// The context's process generation, copied here so that the fork
    /// check of a poll reads one word of the CQ, not the context's.
    origin: Generation,
    /// The ring and its mapping, unmapped in the driver's teardown order
    /// (see [`Ring::unmap_before_destroy`]).
    /// Its lock's word also says whether the CQ is routed: set (for good)
    /// when an `OwnedQp` first registers, before its first drain; from then
    /// on every read goes through `routing`.
    ring: RingLock<CqRing>,
    /// The plain poll of this CQ's driver.
    fast_poll: FastPoll,
    /// Owners of QPs completing here, and completions held for them or for
    /// plain polls. Lock order: `routing`, then `ring`.
    routing: Mutex<Routing>,
    /// Keeps the channel's descriptor open while the CQ may report on it.
    channel: Option<Arc<ChannelInner>>,
}

impl CqInner {
    /// Sends the destroy through the interface that created the CQ and
    /// returns the kernel's event counts; on success the CQ leaves its
    /// channel's table and is never destroyed again.
    ///
    /// The ring lock is held throughout: on siw the ring is unmapped before
    /// the command, and if the kernel refuses it is mapped again (when
    /// `keep_on_refusal`) before anyone polls.
    fn destroy(&self, keep_on_refusal: bool) -> Result<sys::ib_uverbs_destroy_cq_resp, Error> {
        self.ctx.check_process(Op::DestroyCq)?;
        let mut ring = self.ring.lock();
        let unmapped = ring.unmap_before_destroy();
        let resp = match send_destroy(&self.ctx, self.path, self.handle) {
            Ok(resp) => resp,
            Err(e) => {
                if unmapped && keep_on_refusal {
                    // Should this fail, poll and req_notify answer EBADF.
                    let _ = ring.remap(self.ctx.inner.transport.as_ref());
                }
                return Err(e);
            }
        };
        self.released.store(true, Ordering::Release);
        if let Some(ch) = &self.channel {
            ch.cqs().remove(&self.event_id);
        }
        Ok(resp)
    }
}

/// A poll's failure (the ring unmapped: siw after a refused destroy whose
/// remap failed), out of the hot path.
#[cold]
#[inline(never)]
fn poll_error(ctx: &Context) -> Error {
    Error::os(Op::PollCq, &ctx.inner.device, Unmapped::ERRNO)
}

/// DESTROY_CQ of `handle` through `path`.
fn send_destroy(
    ctx: &Context,
    path: CreatePath,
    handle: u32,
) -> Result<sys::ib_uverbs_destroy_cq_resp, Error> {
    let fail = |e| Error::os(Op::DestroyCq, &ctx.inner.device, e);
    match (path, ctx.inner.driver_id) {
        (CreatePath::NativeMethod, Some(driver)) => {
            // SAFETY: the caller owns the CQ and destroys it once; nothing
            // uses it after a success (the ring is unmapped only after).
            unsafe { CqDestroy::new(handle).run(ctx.inner.transport.as_ref(), driver.0) }
                .map_err(fail)
        }
        _ => {
            // SAFETY: as above.
            let (resp, _) = unsafe { ctx.run(Op::DestroyCq, &DestroyCq::new(handle), &mut []) }?;
            Ok(resp)
        }
    }
}

impl Drop for CqInner {
    fn drop(&mut self) {
        // Every QP using this CQ holds an Arc of it: none is left here. In a
        // forked child the CQ is the parent's: send nothing.
        if self.released.load(Ordering::Acquire) || !self.ctx.is_owned_by_this_process() {
            return;
        }
        // A refused destroy cannot be reported from a drop; the kernel keeps
        // its own reference on the ring's pages, so unmapping after it is
        // still sound. Unacked events are no obstacle (see `ack_events`).
        if self.destroy(false).is_err() {
            if let Some(ch) = &self.channel {
                ch.cqs().remove(&self.event_id);
            }
        }
    }
}

/// A completion queue (`struct ibv_cq`).
///
/// [`poll`](Self::poll) reads completions from the ring the kernel shares
/// with this process: no allocation and no system call. Queue pairs using
/// the CQ keep it alive, so the kernel object is destroyed (`DESTROY_CQ`)
/// only after the last of them, whatever the drop order; the ring is
/// unmapped after the destroy on rxe, before it on siw (rdma-core's orders).
/// [`destroy`](Self::destroy) destroys it now and reports the kernel's
/// answer.
///
/// rxe and siw are supported: on other drivers [`Context::create_cq`]
/// fails with `EOPNOTSUPP`.
#[doc(alias = "ibv_cq")]
#[doc(alias = "ibv_create_cq")]
pub struct CompletionQueue {
    pub(crate) inner: Arc<CqInner>,
}

impl fmt::Debug for CompletionQueue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        debug_object(f, "CompletionQueue", &self.inner.ctx, self.inner.handle)
            .field("cqe", &self.inner.cqe.load(Ordering::Relaxed))
            .field("path", &self.inner.path)
            .finish()
    }
}

/// A failed [`CompletionQueue::destroy`]: the CQ is handed back, intact
/// and usable.
#[derive(Debug, thiserror::Error)]
#[error("{error}")]
#[non_exhaustive]
pub struct DestroyCqError {
    /// The CQ, unchanged.
    pub cq: CompletionQueue,
    /// Why the kernel refused: `EBUSY` while a queue pair uses the CQ.
    pub error: Error,
}

crate::error::hands_back_with_error! {
    [] DestroyCqError, "the CQ (which tries the destroy again)";
}

/// What a successful [`CompletionQueue::destroy`] reports: the kernel's
/// event counts next to this process's.
///
/// libibverbs' `ibv_destroy_cq` waits until every reported event was acked
/// (`comp_events_completed == comp_events_reported`); here nothing waits
/// and nothing dangles (an event is a value), so a difference is only
/// reported: [`unacked`](Self::unacked) counts events read but never
/// acked, and `comp_events_reported != events_received` means the channel
/// descriptor was read by other code than [`CompletionChannel::get_event`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CqDestroyed {
    /// Completion events the kernel handed to readers of the channel for
    /// this CQ (`ib_uverbs_destroy_cq_resp::comp_events_reported`).
    pub comp_events_reported: u32,
    /// Async events the kernel reported about this CQ
    /// (`async_events_reported`).
    pub async_events_reported: u32,
    /// Events [`CompletionChannel::get_event`] read for this CQ.
    pub events_received: u32,
    /// Events acknowledged with [`CompletionQueue::ack_events`].
    pub events_acked: u32,
}

impl CqDestroyed {
    /// Completion events the kernel reported that were never acked.
    pub fn unacked(&self) -> u32 {
        self.comp_events_reported.saturating_sub(self.events_acked)
    }
}

impl Context {
    /// Creates a completion channel (`CREATE_COMP_CHANNEL`).
    ///
    /// Only the kernel's file hands over a descriptor; over a test double
    /// this fails with `EOPNOTSUPP`.
    #[doc(alias = "ibv_create_comp_channel")]
    pub fn create_comp_channel(&self) -> Result<CompletionChannel, Error> {
        // SAFETY: CREATE_COMP_CHANNEL hands no memory to the device.
        let (resp, _) =
            unsafe { self.run(Op::CreateCompChannel, &CreateCompChannel::new(), &mut []) }?;
        let fail = |e| Error::os(Op::CreateCompChannel, &self.inner.device, e);
        // SAFETY: the number the successful command just answered, adopted once.
        let fd = unsafe { self.inner.transport.adopt_fd(resp.fd) }
            .ok_or_else(|| fail(Errno::OPNOTSUPP))?;
        // On failure `fd` is closed here, and the kernel's channel with it.
        event_fd::make_nonblocking(&fd).map_err(fail)?;
        Ok(CompletionChannel::over(self.clone(), fd))
    }

    /// Creates a completion queue of at least `cqe` entries; with a
    /// `channel`, [`req_notify`](CompletionQueue::req_notify) makes it report
    /// there.
    ///
    /// `UVERBS_METHOD_CQ_CREATE`, or the write command `CREATE_CQ` over the
    /// legacy write() transport or when the kernel refuses the method
    /// (`EPROTONOSUPPORT`, `ENOTTY`), as rdma-core falls back
    /// ([`CompletionQueue::create_path`] tells which); then the ring is
    /// mapped where the driver's answer says (the same in both framings):
    /// rxe's `mminfo`; siw's `cq_key`, `num_cqe` × 32 bytes and the 8-byte
    /// arming word; mlx5: no mapping, the process allocates the CQEs and the
    /// doorbell record and names them in the driver data (the native
    /// method only). If the answer is short (`EPROTO`), names no mapping
    /// (siw's `SIW_INVAL_UOBJ_KEY`: `ENOMEM`) or mapping fails, the CQ is
    /// destroyed again. Other drivers, and siw on a CPU other than x86-64
    /// (its kernel's ring protocol is sound only there):
    /// [`Error::Unsupported`] (errno `EOPNOTSUPP`), nothing sent.
    #[doc(alias = "ibv_create_cq")]
    pub fn create_cq(
        &self,
        cqe: u32,
        channel: Option<&CompletionChannel>,
    ) -> Result<CompletionQueue, Error> {
        let mut init = CqInit::new(cqe);
        init.channel = channel;
        self.create_cq_ex(&init)
    }

    /// Creates a completion queue as [`create_cq`](Self::create_cq) does,
    /// with the extended attributes of `ibv_create_cq_ex`: a completion
    /// vector, the completion fields wanted ([`CqWcFlags`]) and creation
    /// flags ([`CqFlags`]).
    ///
    /// Every [`WorkCompletion`] carries the fields of the kernel's
    /// `ib_uverbs_wc`; wanting another ([`CqWcFlags::COMPLETION_TIMESTAMP`],
    /// …) is [`Error::Unsupported`], nothing sent, with the reason (for a
    /// timestamp: the device's `completion_timestamp_mask` from
    /// [`query_device_ex`](Self::query_device_ex), 0 on rxe and siw).
    /// Creation flags travel only in the native method's `FLAGS`: over the
    /// write() transport a flag is [`Error::Unsupported`], nothing sent;
    /// rxe and siw refuse any (`EOPNOTSUPP`). A completion vector beyond
    /// [`num_comp_vectors`](Self::num_comp_vectors) is the kernel's
    /// `EINVAL`.
    ///
    /// ```
    /// # fn f(ctx: &uverbs::Context) -> Result<(), uverbs::Error> {
    /// use uverbs::cq::{CqInit, CqWcFlags};
    /// let cq = ctx.create_cq_ex(&CqInit::new(64).wc_flags(CqWcFlags::STANDARD))?;
    /// assert!(cq.cqe() >= 64);
    /// # Ok(()) }
    /// ```
    #[doc(alias = "ibv_create_cq_ex")]
    pub fn create_cq_ex(&self, init: &CqInit<'_>) -> Result<CompletionQueue, Error> {
        let channel = init.channel;
        let fail = |e| Error::os(Op::CreateCq, &self.inner.device, e);
        self.check_process(Op::CreateCq)?;
        if let Some(reason) = self.inner.provider.data_path_refusal() {
            return Err(Error::Unsupported {
                op: Op::CreateCq,
                device: self.inner.device.clone(),
                reason,
            });
        }
        let Some(uhw_len) = self.inner.provider.create_cq_uhw_out() else {
            return Err(fail(Errno::OPNOTSUPP));
        };
        if let Some(ch) = channel {
            if !ch.inner.ctx.same_as(self) {
                return Err(Error::input(
                    Op::CreateCq,
                    &self.inner.device,
                    "the completion channel belongs to another context",
                ));
            }
        }
        self.check_cq_init(init)?;
        let event_id = NEXT_CQ_EVENT_ID.fetch_add(1, Ordering::Relaxed);
        let ((path, handle, real_cqe, ring), fast_poll) = with_driver!(self.inner.provider,
            D => (self.create_cq_ring::<D>(init, event_id, uhw_len)?, fast_poll::<D> as FastPoll),
            Generic => return Err(fail(Errno::OPNOTSUPP)));
        let events = Arc::new(EventCounts::default());
        if let Some(ch) = channel {
            ch.inner.cqs().insert(event_id, events.clone());
        }
        Ok(CompletionQueue {
            inner: Arc::new(CqInner {
                ctx: self.clone(),
                handle,
                cqe: AtomicU32::new(real_cqe),
                event_id,
                path,
                events,
                released: AtomicBool::new(false),
                ring: RingLock::new(ring),
                fast_poll,
                origin: self.inner.origin,
                routing: Mutex::new(Routing::default()),
                channel: channel.map(|c| c.inner.clone()),
            }),
        })
    }

    /// The driver's part of [`create_cq`](Self::create_cq): prepares what
    /// the driver hands the kernel, sends the create and maps the ring
    /// (destroying the CQ again if that fails): (path, handle, real cqe,
    /// ring).
    fn create_cq_ring<D: StateOf>(
        &self,
        init: &CqInit<'_>,
        event_id: u64,
        uhw_len: usize,
    ) -> Result<(CreatePath, u32, u32, CqRing), Error> {
        let fail = |e| Error::os(Op::CreateCq, &self.inner.device, e);
        let state = D::state_of(&self.inner.driver).ok_or_else(|| fail(Errno::OPNOTSUPP))?;
        if let Some(reason) = D::state_refusal(state) {
            return Err(Error::Unsupported {
                op: Op::CreateCq,
                device: self.inner.device.clone(),
                reason,
            });
        }
        let (prep, ask) = D::prepare_cq(state, init.cqe).map_err(fail)?;
        let ask = CqInit { cqe: ask, ..*init };
        let mut uhw_buf = [0u8; MAX_CREATE_UHW_OUT];
        let uhw = &mut uhw_buf[..uhw_len];
        // SAFETY: the driver's preparation holds the memory its driver data
        // names (kept until the ring, which owns it, is dropped after the
        // destroy).
        let (path, handle, real_cqe, written) =
            unsafe { self.send_create_cq(&ask, event_id, prep.uhw_in(), uhw) }?;
        match D::map_cq(state, prep, self.inner.transport.as_ref(), uhw, written) {
            Ok(ring) => Ok((path, handle, real_cqe, D::cq_ring(ring))),
            Err(e) => {
                // Nothing is mapped any more: both orders agree here.
                let _ = send_destroy(self, path, handle);
                Err(fail(e))
            }
        }
    }

    /// Sends the create, native first (see [`create_cq`](Self::create_cq)):
    /// (path, handle, real cqe, UHW bytes written). A driver with data for
    /// the create (`uhw_in`, mlx5's) needs the native method: the write
    /// command is refused (`EOPNOTSUPP`) before it is sent.
    ///
    /// # Safety
    ///
    /// Memory `uhw_in` names for the device stays valid until the CQ is
    /// destroyed.
    unsafe fn send_create_cq(
        &self,
        init: &CqInit<'_>,
        event_id: u64,
        uhw_in: &[u8],
        uhw: &mut [u8],
    ) -> Result<(CreatePath, u32, u32, usize), Error> {
        let (cqe, channel) = (init.cqe, init.channel);
        if let Some(driver) = native_driver(self) {
            let mut method = CqCreate::new(cqe, event_id, uhw)
                .uhw_in(uhw_in)
                .comp_vector(init.comp_vector)
                .flags(init.flags.bits());
            if let Some(ch) = channel {
                method = method.comp_channel(ch.as_raw_fd());
            }
            // SAFETY: the memory the driver data names outlives the CQ (the
            // caller's promise; rxe's and siw's rings are the kernel's); the
            // channel descriptor is this context's.
            match unsafe { method.run(self.inner.transport.as_ref(), driver) } {
                // The kernel marks the whole UHW out written.
                Ok(done) => {
                    return Ok((CreatePath::NativeMethod, done.handle, done.cqe, uhw.len()))
                }
                Err(e) if native_refused(e) => {}
                Err(e) => return Err(Error::os(Op::CreateCq, &self.inner.device, e)),
            }
        }
        if !uhw_in.is_empty() {
            return Err(Error::os(
                Op::CreateCq,
                &self.inner.device,
                Errno::OPNOTSUPP,
            ));
        }
        if !init.flags.is_empty() {
            return Err(Error::Unsupported {
                op: Op::CreateCq,
                device: self.inner.device.clone(),
                reason: "CQ creation flags need the native CQ_CREATE method (ioctl)",
            });
        }
        let mut cmd = CreateCq::new(cqe, event_id).comp_vector(init.comp_vector);
        if let Some(ch) = channel {
            cmd = cmd.comp_channel(ch.as_raw_fd());
        }
        // SAFETY: CREATE_CQ hands no user memory to the device; the ring is
        // the kernel's.
        let (resp, written) = unsafe { self.run(Op::CreateCq, &cmd, uhw) }?;
        Ok((CreatePath::WriteCommand, resp.cq_handle, resp.cqe, written))
    }
}

impl Context {
    /// Refuses, before anything is sent, what a CQ made here cannot give:
    /// completion fields beyond `ib_uverbs_wc`'s.
    fn check_cq_init(&self, init: &CqInit<'_>) -> Result<(), Error> {
        let extra = init.wc_flags.difference(CqWcFlags::STANDARD);
        if extra.is_empty() {
            return Ok(());
        }
        let timestamps =
            CqWcFlags::COMPLETION_TIMESTAMP | CqWcFlags::COMPLETION_TIMESTAMP_WALLCLOCK;
        let reason = if extra.intersects(timestamps)
            && self
                .query_device_ex()
                .ok()
                .and_then(|a| a.completion_timestamp_mask)
                .unwrap_or(0)
                == 0
        {
            "completion timestamps: the device reports none (completion_timestamp_mask 0)"
        } else {
            "a WorkCompletion carries the fields of ib_uverbs_wc only (byte_len, imm, qp_num, \
             src_qp, slid, sl, dlid_path_bits); timestamps, VLAN, flow tag and tag-matching \
             fields are not read here"
        };
        Err(Error::Unsupported {
            op: Op::CreateCq,
            device: self.inner.device.clone(),
            reason,
        })
    }
}

/// What to create a completion queue with (`struct ibv_cq_init_attr_ex`),
/// for [`Context::create_cq_ex`].
#[doc(alias = "ibv_cq_init_attr_ex")]
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub struct CqInit<'a> {
    /// At least this many entries.
    pub cqe: u32,
    /// Where completion events are reported, once per `req_notify`.
    pub channel: Option<&'a CompletionChannel>,
    /// The completion vector (below [`Context::num_comp_vectors`]).
    pub comp_vector: u32,
    /// The completion fields wanted (`wc_flags`).
    pub wc_flags: CqWcFlags,
    /// Creation flags (`IB_UVERBS_CQ_FLAGS_*`).
    pub flags: CqFlags,
}

impl<'a> CqInit<'a> {
    /// A CQ of at least `cqe` entries, without channel, on vector 0,
    /// with the standard fields ([`CqWcFlags::STANDARD`]) and no flags.
    pub fn new(cqe: u32) -> Self {
        CqInit {
            cqe,
            channel: None,
            comp_vector: 0,
            wc_flags: CqWcFlags::STANDARD,
            flags: CqFlags::empty(),
        }
    }

    /// Completion events go to `channel`.
    pub fn channel(mut self, channel: &'a CompletionChannel) -> Self {
        self.channel = Some(channel);
        self
    }

    setters! {
        /// The completion vector.
        pub fn comp_vector(comp_vector: u32) => comp_vector;
        /// The completion fields wanted.
        pub fn wc_flags(wc_flags: CqWcFlags) => wc_flags;
        /// Creation flags.
        pub fn flags(flags: CqFlags) => flags;
    }
}

bitflags::bitflags! {
    /// The completion fields a CQ is created to report
    /// (`enum ibv_create_cq_wc_flags`, libibverbs' values).
    #[doc(alias = "ibv_create_cq_wc_flags")]
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub struct CqWcFlags: u64 {
        /// `IBV_WC_EX_WITH_BYTE_LEN`.
        const BYTE_LEN = 1 << 0;
        /// `IBV_WC_EX_WITH_IMM`.
        const IMM = 1 << 1;
        /// `IBV_WC_EX_WITH_QP_NUM`.
        const QP_NUM = 1 << 2;
        /// `IBV_WC_EX_WITH_SRC_QP`.
        const SRC_QP = 1 << 3;
        /// `IBV_WC_EX_WITH_SLID`.
        const SLID = 1 << 4;
        /// `IBV_WC_EX_WITH_SL`.
        const SL = 1 << 5;
        /// `IBV_WC_EX_WITH_DLID_PATH_BITS`.
        const DLID_PATH_BITS = 1 << 6;
        /// `IBV_WC_EX_WITH_COMPLETION_TIMESTAMP`.
        const COMPLETION_TIMESTAMP = 1 << 7;
        /// `IBV_WC_EX_WITH_CVLAN`.
        const CVLAN = 1 << 8;
        /// `IBV_WC_EX_WITH_FLOW_TAG`.
        const FLOW_TAG = 1 << 9;
        /// `IBV_WC_EX_WITH_TM_INFO`.
        const TM_INFO = 1 << 10;
        /// `IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK`.
        const COMPLETION_TIMESTAMP_WALLCLOCK = 1 << 11;
        /// What every [`WorkCompletion`] carries (`IBV_WC_STANDARD_FLAGS`).
        const STANDARD = Self::BYTE_LEN.bits() | Self::IMM.bits() | Self::QP_NUM.bits()
            | Self::SRC_QP.bits() | Self::SLID.bits() | Self::SL.bits()
            | Self::DLID_PATH_BITS.bits();
    }
}

bitflags::bitflags! {
    /// CQ creation flags (`IB_UVERBS_CQ_FLAGS_*`).
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub struct CqFlags: u32 {
        /// Completion timestamps taken when the completion is written.
        const TIMESTAMP_COMPLETION = sys::IB_UVERBS_CQ_FLAGS_TIMESTAMP_COMPLETION;
        /// The device may overrun the CQ instead of failing.
        const IGNORE_OVERRUN = sys::IB_UVERBS_CQ_FLAGS_IGNORE_OVERRUN;
    }
}

impl CompletionChannel {
    /// A channel over `fd`, which the caller hands over.
    fn over(ctx: Context, fd: OwnedFd) -> Self {
        CompletionChannel {
            inner: Arc::new(ChannelInner {
                ctx,
                fd,
                cqs: std::sync::Mutex::new(HashMap::new()),
            }),
        }
    }
}

impl CompletionQueue {
    /// The kernel's handle.
    pub fn handle(&self) -> u32 {
        self.inner.handle
    }

    /// Entries the CQ really has (the kernel may round `cqe` up), as the
    /// create or the last [`resize`](Self::resize) answered.
    pub fn cqe(&self) -> u32 {
        self.inner.cqe.load(Ordering::Acquire)
    }

    /// Gives the CQ room for at least `cqe` entries (`RESIZE_CQ`) and
    /// returns how many it really has now (also [`cqe`](Self::cqe) from
    /// then on). Completions not yet polled are kept, in order.
    ///
    /// rxe copies them into a new ring, which is mapped in place of the old
    /// one under the ring lock (polls wait meanwhile). The kernel refuses
    /// (`EINVAL`) a `cqe` of 0, above the device's `max_cqe`, or below the
    /// number of completions waiting; the CQ is unchanged then. siw's kernel
    /// cannot resize a CQ (`EOPNOTSUPP`) and mlx5's resize is not
    /// implemented here: both are refused before anything is sent,
    /// [`Error::Unsupported`] (errno `EOPNOTSUPP`). Should mapping rxe's
    /// new ring fail after the kernel resized, the error is returned and
    /// the CQ reports no completion again: destroy it. In a forked child:
    /// [`Error::ForeignProcess`], nothing sent.
    #[doc(alias = "ibv_resize_cq")]
    pub fn resize(&self, cqe: u32) -> Result<u32, Error> {
        let ctx = &self.inner.ctx;
        ctx.check_process(Op::ResizeCq)?;
        let mut ring = self.inner.ring.lock();
        let uhw_len = ring.resize_uhw_out().map_err(|reason| Error::Unsupported {
            op: Op::ResizeCq,
            device: ctx.inner.device.clone(),
            reason,
        })?;
        let mut uhw_buf = [0u8; MAX_CREATE_UHW_OUT];
        let uhw = &mut uhw_buf[..uhw_len];
        let cmd = ResizeCq::new(self.inner.handle, cqe);
        // SAFETY: RESIZE_CQ hands no user memory to the device (rxe's new
        // ring is the kernel's); the old ring stays mapped until the new
        // one replaces it, under the ring lock held here.
        let (resp, written) = unsafe { ctx.run(Op::ResizeCq, &cmd, uhw) }?;
        ring.adopt_resized(ctx.inner.transport.as_ref(), uhw, written)
            .map_err(|e| Error::os(Op::ResizeCq, &ctx.inner.device, e))?;
        self.inner.cqe.store(resp.cqe, Ordering::Release);
        Ok(resp.cqe)
    }

    /// What [`CompletionChannel::get_event`] returns for this CQ (the
    /// `user_handle` it was created with; unique within the process).
    pub fn event_id(&self) -> u64 {
        self.inner.event_id
    }

    /// This CQ's completion channel, if it has one that no other CQ
    /// reports to: waiting there for this CQ's event takes no other CQ's
    /// ([`OwnedQp::wait`](crate::OwnedQp::wait)).
    pub(crate) fn sole_channel(&self) -> Option<CompletionChannel> {
        let channel = self.inner.channel.as_ref()?;
        let cqs = channel.cqs();
        let sole = cqs.len() == 1 && cqs.contains_key(&self.inner.event_id);
        sole.then(|| CompletionChannel {
            inner: channel.clone(),
        })
    }

    /// The context the CQ belongs to.
    pub fn context(&self) -> &Context {
        &self.inner.ctx
    }

    /// Whether `other` is a handle of this same CQ.
    /// Another handle to the same CQ, for the crate's own holders (the
    /// async layer's completion task).
    #[cfg_attr(not(feature = "tokio"), allow(dead_code))]
    pub(crate) fn share(&self) -> CompletionQueue {
        CompletionQueue {
            inner: self.inner.clone(),
        }
    }

    pub(crate) fn same_as(&self, other: &CompletionQueue) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// Whether the native method or the write command created the CQ (and
    /// will destroy it).
    pub fn create_path(&self) -> CreatePath {
        self.inner.path
    }

    /// Completion events [`CompletionChannel::get_event`] has read for
    /// this CQ (libibverbs' `comp_events_reported` as the library sees it).
    pub fn events_received(&self) -> u32 {
        self.inner.events.received.load(Ordering::Acquire)
    }

    /// Events received and not yet acknowledged with
    /// [`ack_events`](Self::ack_events).
    pub fn unacked_events(&self) -> u32 {
        let acked = self.inner.events.acked.load(Ordering::Acquire);
        self.events_received().saturating_sub(acked)
    }

    /// Acknowledges `n` completion events of this CQ (`ibv_ack_cq_events`).
    ///
    /// libibverbs needs the acks because `ibv_destroy_cq` blocks until
    /// every event it handed out is acked (the event points at the CQ).
    /// Here an event is only a number, so nothing dangles and no destroy
    /// waits; the counts are kept for programs that follow the libibverbs
    /// discipline, and [`destroy`](Self::destroy) reports them next to the
    /// kernel's. Acking more than [`unacked_events`](Self::unacked_events)
    /// is refused ([`Error::InvalidInput`]) and changes nothing. No system
    /// call. In a forked child: [`Error::ForeignProcess`], nothing counted.
    #[doc(alias = "ibv_ack_cq_events")]
    pub fn ack_events(&self, n: u32) -> Result<(), Error> {
        // The counts are the child's own copy; refused all the same, so that
        // a child answers one thing for every operation on a parent's CQ.
        self.inner.ctx.check_process(Op::AckCqEvents)?;
        let counts = &self.inner.events;
        let mut acked = counts.acked.load(Ordering::Acquire);
        loop {
            let received = counts.received.load(Ordering::Acquire);
            let Some(new) = acked.checked_add(n).filter(|new| *new <= received) else {
                return Err(Error::input(
                    Op::AckCqEvents,
                    &self.inner.ctx.inner.device,
                    "more events acked than get_event received for this CQ",
                ));
            };
            match counts
                .acked
                .compare_exchange(acked, new, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return Ok(()),
                Err(now) => acked = now,
            }
        }
    }

    /// Destroys the CQ now (`DESTROY_CQ`, through the interface that
    /// created it) and reports the kernel's event counts next to this
    /// process's ([`CqDestroyed`]; a difference is reported, never waited
    /// for). While a queue pair uses the CQ the kernel answers `EBUSY`:
    /// the CQ comes back in the error, intact and usable. In a forked
    /// child: [`Error::ForeignProcess`], nothing sent.
    #[doc(alias = "ibv_destroy_cq")]
    pub fn destroy(self) -> Result<CqDestroyed, DestroyCqError> {
        match self.inner.destroy(true) {
            Ok(resp) => Ok(CqDestroyed {
                comp_events_reported: resp.comp_events_reported,
                async_events_reported: resp.async_events_reported,
                events_received: self.inner.events.received.load(Ordering::Acquire),
                events_acked: self.inner.events.acked.load(Ordering::Acquire),
            }),
            Err(error) => Err(DestroyCqError { cq: self, error }),
        }
    }

    /// Copies up to `out.len()` completions, oldest first, into `out` and
    /// returns how many. No allocation, no system call. Once an
    /// [`OwnedQp`](crate::OwnedQp) uses this CQ, the completions of its QP
    /// are never returned here (they are held for it, since they hand its
    /// requests' memory back); those of other QPs that it read are held for
    /// this call. In a forked child
    /// (the CQ is the parent's) it reads nothing and returns
    /// [`Error::ForeignProcess`]. On siw, after a successful
    /// [`destroy`](Self::destroy) of another handle of this CQ, the ring is
    /// gone: `EBADF`.
    #[doc(alias = "ibv_poll_cq")]
    #[doc(alias = "ibv_start_poll")]
    #[doc(alias = "ibv_next_poll")]
    // Inline, as libibverbs' `ibv_poll_cq` is: the call site goes straight
    // to the driver's poll through the CQ's pointer.
    #[inline]
    pub fn poll(&self, out: &mut [WorkCompletion]) -> Result<usize, Error> {
        let inner = &*self.inner;
        match (inner.fast_poll)(inner, out) {
            Some(n) => Ok(n),
            None => self.poll_full(out),
        }
    }

    /// [`poll`](Self::poll) where its fast path gave up: refuses a forked
    /// child, waits for the ring lock, reads routed completions through
    /// the routing, or reports the unmapped ring.
    #[cold]
    #[inline(never)]
    fn poll_full(&self, out: &mut [WorkCompletion]) -> Result<usize, Error> {
        let ctx = &self.inner.ctx;
        if !self.inner.origin.is_current() {
            return Err(ctx.foreign_process(Op::PollCq));
        }
        {
            let mut ring = self.inner.ring.lock();
            // Under the ring lock: a CQ routed before we took it is read
            // through the routing (see `adopt`).
            if !self.inner.ring.is_routed() {
                return ring.poll(out).map_err(|_| poll_error(ctx));
            }
        }
        self.poll_routed(Reader::Unowned, out)
    }

    /// [`poll`](Self::poll) into `buf`, returning the completions it filled
    /// in (a prefix of `buf`, oldest first; empty when there were none), so
    /// that a `for` loop walks them. Same rules, no allocation, no system
    /// call.
    ///
    /// ```no_run
    /// # fn f(cq: &uverbs::CompletionQueue) -> Result<(), uverbs::Error> {
    /// use uverbs::wr::WorkCompletion;
    ///
    /// let mut buf = [WorkCompletion::default(); 16];
    /// for wc in cq.poll_into(&mut buf)? {
    ///     if !wc.is_success() {
    ///         eprintln!("request {} failed: {:?}", wc.wr_id(), wc.status());
    ///     }
    /// }
    /// # Ok(()) }
    /// ```
    #[doc(alias = "ibv_poll_cq")]
    pub fn poll_into<'b>(
        &self,
        buf: &'b mut [WorkCompletion],
    ) -> Result<&'b [WorkCompletion], Error> {
        let n = self.poll(buf)?;
        Ok(&buf[..n])
    }

    /// Up to `out.len()` completions for `reader`, oldest first: those held
    /// for it, then the ring's, holding what is for others.
    pub(crate) fn poll_routed(
        &self,
        reader: Reader,
        out: &mut [WorkCompletion],
    ) -> Result<usize, Error> {
        let ctx = &self.inner.ctx;
        ctx.check_process(Op::PollCq)?;
        let mut routing = self.inner.routing.lock();
        let mut n = routing.take_held(reader, out);
        let mut ring = self.inner.ring.lock();
        while n < out.len() {
            let mut read = [WorkCompletion::default(); BATCH];
            let room = (out.len() - n).min(BATCH);
            let got = ring.poll(&mut read[..room]).map_err(|_| poll_error(ctx))?;
            n = routing.sort(reader, &read[..got], out, n);
            if got < room {
                break;
            }
        }
        Ok(n)
    }

    /// Registers the owner of QP `qpn` on this CQ: from now on its
    /// completions reach only [`poll_routed`](Self::poll_routed) for it.
    /// Completions already here under `qpn` (a destroyed QP of that number,
    /// raw posts before) are dropped; others read meanwhile are held.
    pub(crate) fn adopt(&self, qpn: u32) -> Result<(), Error> {
        self.inner.ctx.check_process(Op::PollCq)?;
        {
            let mut routing = self.inner.routing.lock();
            routing.adopt(qpn);
            // Before the drain below takes the ring lock: a reader taking
            // that lock afterwards sees it and routes (see `poll`).
            self.inner.ring.set_routed();
        }
        // What is here under `qpn` now is stale (the owner has posted
        // nothing yet): read it and drop it; the rest is held as usual.
        self.drop_completions_of(qpn)
    }

    /// Reads every completion under `qpn`, held or in the ring, and drops
    /// it; the others read meanwhile are held for their readers.
    fn drop_completions_of(&self, qpn: u32) -> Result<(), Error> {
        let mut dropped = [WorkCompletion::default(); BATCH];
        while self.poll_routed(Reader::Owner(qpn), &mut dropped)? == BATCH {}
        Ok(())
    }

    /// Unregisters the owner of QP `qpn`: what is held for it goes to plain
    /// polls.
    pub(crate) fn release(&self, qpn: u32) {
        self.inner.routing.lock().release(qpn);
    }

    /// Routes the receive completions of QP `qpn`, just created on the
    /// owned SRQ `srq`, to that SRQ's owner. What the ring holds now is
    /// read first, under the routes before (a QP of the same number
    /// destroyed earlier may have left completions whose ids look like
    /// the SRQ's).
    pub(crate) fn attach_srq(&self, qpn: u32, srq: u64) -> Result<(), Error> {
        self.inner.ctx.check_process(Op::PollCq)?;
        {
            // As in `adopt`.
            let _routing = self.inner.routing.lock();
            self.inner.ring.set_routed();
        }
        self.settle()?;
        self.inner.routing.lock().attach_srq(qpn, srq);
        Ok(())
    }

    /// QP `qpn`, on an owned SRQ, was destroyed: its completions still in
    /// the ring are sorted under its route (its receives held for the
    /// SRQ's owner), then the route goes. After `DESTROY_QP` the kernel
    /// adds none of its. A read that fails (a forked child) leaves the
    /// route as it was.
    pub(crate) fn detach_srq(&self, qpn: u32) {
        if self.settle().is_ok() {
            self.inner.routing.lock().detach_srq(qpn);
        }
    }

    /// The owner of SRQ `srq` is gone with the SRQ: drop what is held for
    /// it.
    pub(crate) fn drop_srq(&self, srq: u64) {
        self.inner.routing.lock().drop_srq(srq);
    }

    /// Reads every completion in the ring into the held queues of their
    /// readers.
    fn settle(&self) -> Result<(), Error> {
        let mut none = [WorkCompletion::default(); BATCH];
        self.poll_routed(Reader::Settle, &mut none).map(drop)
    }

    /// Completions held for readers (tests of the routing's bounds).
    #[cfg(test)]
    pub(crate) fn held(&self) -> usize {
        self.inner.routing.lock().held()
    }

    /// Unregisters the owner of QP `qpn`, just destroyed, and drops its
    /// completions: those still in the ring (read now, holding the others
    /// for their readers), then those another reader held for it meanwhile.
    /// After `DESTROY_QP` the kernel adds none of its, so nothing of the
    /// dead QP stays here for a plain poll nobody makes. A read that fails
    /// (a forked child, whose ring is the parent's; siw's ring after a
    /// destroy of the CQ through another handle) leaves nothing more to
    /// drop there.
    pub(crate) fn forget(&self, qpn: u32) {
        // Still the owner while reading: another reader holds what it
        // finds under `qpn`, and the forget below drops that too.
        let _ = self.drop_completions_of(qpn);
        self.inner.routing.lock().forget(qpn);
    }

    /// Arms the CQ: its next completion, or with `solicited_only` its next
    /// solicited one, raises one event on its completion channel.
    ///
    /// rxe: the `REQ_NOTIFY_CQ` command. siw: one store to the CQ's control
    /// word, no system call (the kernel reads it after each completion it
    /// writes and clears it when it fires; siw checks receive completions
    /// as unsolicited, so a `solicited_only` arm fires only for a solicited
    /// send's completion). Either way, poll once more after arming: a
    /// completion that arrived just before raises no event.
    ///
    /// In a forked child (the CQ is the parent's) nothing is stored or sent:
    /// [`Error::ForeignProcess`].
    #[doc(alias = "ibv_req_notify_cq")]
    pub fn req_notify(&self, solicited_only: bool) -> Result<(), Error> {
        let ctx = &self.inner.ctx;
        // First, before the ring lock (a parent thread may have held it at
        // fork time: the child's copy stays locked for ever) and before the
        // siw store, which would arm the parent's live CQ (a child's ring
        // mapping, were it inherited, is the same MAP_SHARED memory).
        ctx.check_process(Op::ReqNotifyCq)?;
        let events_read = self.inner.events.received.load(Ordering::Acquire);
        if let Some(armed) = self
            .inner
            .ring
            .lock()
            .arm_in_memory(solicited_only, events_read)
        {
            return armed.map_err(|e| Error::os(Op::ReqNotifyCq, &ctx.inner.device, e));
        }
        let cmd = ReqNotifyCq::new(self.inner.handle, solicited_only);
        // SAFETY: REQ_NOTIFY_CQ hands no memory to the device.
        unsafe { ctx.run(Op::ReqNotifyCq, &cmd, &mut []) }.map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::driver::DriverId;
    use crate::transport::RecordingTransport;
    use std::os::fd::FromRawFd;
    use zerocopy::IntoBytes;

    /// A context over the fake (rings served) and a channel over the read
    /// end of a pipe, whose write end stands for the kernel's side.
    fn channel_over_pipe() -> (Arc<RecordingTransport>, Context, CompletionChannel, OwnedFd) {
        let fake = Arc::new(RecordingTransport::new());
        fake.serve_rings();
        let ctx = Context::over_fake(Some(DriverId::RXE), Box::new(fake.clone()));
        let mut fds = [0; 2];
        // SAFETY: pipe2() writes two new descriptors into the array.
        assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
        // SAFETY: both descriptors are new and owned by nothing else.
        let (reader, writer) =
            unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        // As create_comp_channel makes the kernel's descriptor.
        event_fd::make_nonblocking(&reader).unwrap();
        let channel = CompletionChannel::over(ctx.clone(), reader);
        (fake, ctx, channel, writer)
    }

    /// The channel has the shape of every event source: `None` at once
    /// when empty, a bounded wait, the event once one is queued.
    #[test]
    fn try_get_and_wait_event_never_block() {
        let (_fake, _ctx, channel, writer) = channel_over_pipe();
        assert_eq!(channel.try_get_event().unwrap(), None);
        let t0 = std::time::Instant::now();
        assert_eq!(channel.wait_event(Duration::from_millis(20)).unwrap(), None);
        assert!(t0.elapsed() >= Duration::from_millis(20));
        assert_eq!(raise(&writer, 77), Ok(8));
        assert_eq!(
            channel.wait_event(Duration::from_secs(5)).unwrap(),
            Some(77)
        );
        assert_eq!(raise(&writer, 78), Ok(8));
        assert_eq!(channel.try_get_event().unwrap(), Some(78));
        assert_eq!(channel.try_get_event().unwrap(), None);
    }

    fn raise(writer: &OwnedFd, event_id: u64) -> Result<usize, Errno> {
        let desc = sys::ib_uverbs_comp_event_desc {
            cq_handle: event_id,
        };
        rustix::io::write(writer, desc.as_bytes())
    }

    /// `get_event` counts each event on its CQ; `ack_events` acks them,
    /// refusing (and changing nothing) beyond what was received; an event
    /// of no CQ of the channel is returned uncounted; `destroy` reports
    /// both counts; after it the CQ's events are no longer counted.
    #[test]
    fn events_are_counted_per_cq_and_acked() {
        let (fake, ctx, channel, writer) = channel_over_pipe();
        let cq = ctx.create_cq(8, Some(&channel)).unwrap();
        let other = ctx.create_cq(8, Some(&channel)).unwrap();
        let sent = fake
            .methods()
            .into_iter()
            .rfind(|m| m.method_id == sys::UVERBS_METHOD_CQ_CREATE)
            .unwrap();
        let attr = sent.attr(sys::UVERBS_ATTR_CREATE_CQ_COMP_CHANNEL).unwrap();
        assert_eq!(attr.data, channel.as_raw_fd() as u64, "the channel's fd");

        for id in [cq.event_id(), cq.event_id(), 0xdead, other.event_id()] {
            raise(&writer, id).unwrap();
        }
        let got: Vec<u64> = (0..4).map(|_| channel.get_event().unwrap()).collect();
        assert_eq!(
            got,
            [cq.event_id(), cq.event_id(), 0xdead, other.event_id()]
        );
        assert_eq!((cq.events_received(), cq.unacked_events()), (2, 2));
        assert_eq!((other.events_received(), other.unacked_events()), (1, 1));

        let err = cq.ack_events(3).unwrap_err();
        assert!(
            matches!(
                err,
                Error::InvalidInput {
                    op: Op::AckCqEvents,
                    ..
                }
            ),
            "{err}"
        );
        assert!(err.to_string().starts_with("ack_cq_events"), "{err}");
        assert_eq!(cq.unacked_events(), 2, "a refused ack changes nothing");
        cq.ack_events(1).unwrap();
        assert_eq!(cq.unacked_events(), 1);
        cq.ack_events(0).unwrap();

        fake.report_cq_events(cq.handle(), 2, 0);
        let done = cq.destroy().unwrap();
        assert_eq!(
            done,
            CqDestroyed {
                comp_events_reported: 2,
                async_events_reported: 0,
                events_received: 2,
                events_acked: 1
            }
        );
        assert_eq!(done.unacked(), 1);
        assert_eq!(
            channel.inner.cqs().len(),
            1,
            "the destroyed CQ left the table"
        );
        other.ack_events(1).unwrap();
        drop(other);
        assert!(channel.inner.cqs().is_empty(), "a dropped CQ leaves it too");
    }

    fn is_foreign(r: Result<impl fmt::Debug, Error>, op: Op) -> bool {
        matches!(r, Err(Error::ForeignProcess { op: o, .. }) if o == op)
    }

    /// A forked child's `get_event` on the parent's channel reads nothing:
    /// the event stays for the parent (before the fix the child took it and
    /// a parent blocked in `get_event` waited for ever). The child's
    /// `ack_events`, `poll` and `req_notify` are refused too, and send
    /// nothing.
    #[test]
    fn a_forked_child_leaves_the_parents_event_and_cq_alone() {
        let (fake, ctx, channel, writer) = channel_over_pipe();
        let cq = ctx.create_cq(8, Some(&channel)).unwrap();
        raise(&writer, cq.event_id()).unwrap();
        raise(&writer, cq.event_id()).unwrap();
        assert_eq!(channel.get_event().unwrap(), cq.event_id());
        let sent = fake.count();
        let child = || {
            let mut wc = [WorkCompletion::default(); 2];
            let checks = [
                is_foreign(channel.get_event(), Op::GetCqEvent),
                is_foreign(cq.ack_events(1), Op::AckCqEvents),
                is_foreign(cq.poll(&mut wc), Op::PollCq),
                is_foreign(cq.req_notify(false), Op::ReqNotifyCq),
                is_foreign(cq.req_notify(true), Op::ReqNotifyCq),
                fake.count() == sent,
            ];
            checks.iter().position(|ok| !ok).map_or(0, |i| i as i32 + 1)
        };
        // SAFETY: the child only calls this crate's entry points (which
        // refuse at once) on its copies; glibc keeps malloc usable.
        let code = unsafe { crate::test_serial::in_child(child) };
        assert_eq!(code, 0, "check {code} failed in the child (0 = all passed)");
        // The second event is still there: readable now, without blocking.
        let mut fds = [rustix::event::PollFd::new(
            &channel,
            rustix::event::PollFlags::IN,
        )];
        let timeout = rustix::event::Timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        assert_eq!(rustix::event::poll(&mut fds, Some(&timeout)).unwrap(), 1);
        assert_eq!(channel.get_event().unwrap(), cq.event_id());
        assert_eq!(cq.events_received(), 2);
        cq.ack_events(2).unwrap();
    }

    /// A channel dropped with its CQ and unacked events: nothing hangs, and
    /// the descriptor is closed once both are gone (the pipe has no reader
    /// left: EPIPE), not before.
    #[test]
    fn a_channel_dropped_with_unacked_events_closes_its_descriptor() {
        let _serial = crate::test_serial::fork_or_fd_watch();
        let (_fake, ctx, channel, writer) = channel_over_pipe();
        let cq = ctx.create_cq(8, Some(&channel)).unwrap();
        raise(&writer, cq.event_id()).unwrap();
        raise(&writer, cq.event_id()).unwrap();
        assert_eq!(channel.get_event().unwrap(), cq.event_id());
        assert_eq!(cq.unacked_events(), 1);
        drop(channel);
        // The CQ keeps the descriptor open: writing still works.
        raise(&writer, cq.event_id()).unwrap();
        drop(cq);
        assert_eq!(raise(&writer, 1), Err(Errno::PIPE), "no reader left");
    }

    /// A refused RESIZE_CQ (the fake, like siw's kernel, has none) is the
    /// kernel's errno under `ResizeCq`; the CQ keeps its size and ring.
    #[test]
    fn a_refused_resize_leaves_the_cq_as_it_was() {
        let (fake, ctx, _channel, _writer) = channel_over_pipe();
        let cq = ctx.create_cq(8, None).unwrap();
        let cqe = cq.cqe();
        let err = cq.resize(64).unwrap_err();
        assert_eq!(
            (err.op(), err.errno()),
            (Op::ResizeCq, Some(Errno::OPNOTSUPP))
        );
        assert!(matches!(err, Error::Os { .. }), "{err:?}");
        let sent = fake.commands().pop().unwrap();
        assert_eq!(sent.code, sys::IB_USER_VERBS_CMD_RESIZE_CQ);
        let req: sys::ib_uverbs_resize_cq = sent.request().unwrap();
        assert_eq!((req.cq_handle, req.cqe), (cq.handle(), 64));
        // rxe's answer (its new ring's mminfo) has room.
        assert_eq!((sent.core_out_len, sent.uhw_out_len), (8, 16));
        assert_eq!(cq.cqe(), cqe);
        let mut wc = [WorkCompletion::default(); 2];
        assert_eq!(cq.poll(&mut wc).unwrap(), 0);
    }
}
