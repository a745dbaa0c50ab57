//! Safe posting: work requests own the memory the device may touch, and
//! hand it back with their completion. See [`OwnedQp`].

mod memory;
mod outstanding;
mod owned_srq;
mod wait;

use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::ah::AddressHandle;
use crate::command::{QpAttr, QpAttrMask, QpState, QpType};
use crate::context::Context;
use crate::cq::CompletionQueue;
use crate::cq_routing::Reader;
use crate::error::{Errno, Error, Op};
use crate::gid::Gid;
use crate::provider::Provider;
use crate::qp::{QpCaps, QueuePair};
use crate::wr::{
    Payload, PostError, RecvWr, Remote, SendFlags, SendOp, SendWr, Sge, UdDest, WcStatus,
    WorkCompletion,
};

pub use crate::mr::OutOfRange;
use crate::wr::RECV_TAG;
pub use memory::{DeviceReadable, DeviceWritable, Holds, Local, OwnedOrShared};
use outstanding::{Ends, Outstanding};
pub use owned_srq::{OwnedSrq, OwnedSrqNotDestroyed, SrqNotOwnable};

/// A send work request that owns its local memory (or carries inline
/// bytes, copied when it is posted).
///
/// "Send" names the queue, as libibverbs' `ibv_send_wr` does: every
/// request the QP starts goes to its send queue, so a SEND
/// ([`send`](Self::send)), an RDMA WRITE ([`write`](Self::write)), an RDMA
/// READ ([`read`](Self::read), which reads *into* its local memory) and the
/// atomics are all `SendRequest`s; only a receive is a [`RecvRequest`].
#[doc(alias = "ibv_send_wr")]
#[derive(Debug)]
pub struct SendRequest<'a, M> {
    wr_id: u64,
    op: SendOp,
    flags: SendFlags,
    local: Option<Local<M>>,
    inline: &'a [u8],
    ud: Option<UdTarget>,
}

/// A UD destination a request keeps alive until its completion.
#[derive(Debug, Clone)]
struct UdTarget {
    ah: Arc<AddressHandle>,
    remote_qpn: u32,
    remote_qkey: u32,
}

impl<'a, M: DeviceReadable> SendRequest<'a, M> {
    fn with(wr_id: u64, op: SendOp, local: Option<Local<M>>, inline: &'a [u8]) -> Self {
        SendRequest {
            wr_id,
            op,
            flags: SendFlags::SIGNALED,
            local,
            inline,
            ud: None,
        }
    }

    /// SEND of `local`'s bytes.
    #[doc(alias = "IBV_WR_SEND")]
    #[doc(alias = "ibv_wr_send")]
    #[doc(alias = "rdma_post_send")]
    pub fn send<R: DeviceReadable>(wr_id: u64, local: Local<R>) -> Self
    where
        M: Holds<R>,
    {
        Self::with(wr_id, SendOp::Send { imm: None }, Some(local.held()), &[])
    }

    /// SEND_WITH_IMM of `local`'s bytes and `imm`.
    #[doc(alias = "IBV_WR_SEND_WITH_IMM")]
    #[doc(alias = "ibv_wr_send_imm")]
    pub fn send_with_imm<R: DeviceReadable>(wr_id: u64, local: Local<R>, imm: u32) -> Self
    where
        M: Holds<R>,
    {
        let op = SendOp::Send { imm: Some(imm) };
        Self::with(wr_id, op, Some(local.held()), &[])
    }

    /// RDMA WRITE of `local`'s bytes to `remote`.
    #[doc(alias = "IBV_WR_RDMA_WRITE")]
    #[doc(alias = "ibv_wr_rdma_write")]
    #[doc(alias = "rdma_post_write")]
    pub fn write<R: DeviceReadable>(wr_id: u64, local: Local<R>, remote: Remote) -> Self
    where
        M: Holds<R>,
    {
        let op = SendOp::RdmaWrite { remote, imm: None };
        Self::with(wr_id, op, Some(local.held()), &[])
    }

    /// RDMA_WRITE_WITH_IMM of `local`'s bytes to `remote`, consuming a
    /// receive of the peer that completes with `imm`.
    #[doc(alias = "IBV_WR_RDMA_WRITE_WITH_IMM")]
    #[doc(alias = "ibv_wr_rdma_write_imm")]
    pub fn write_with_imm<R: DeviceReadable>(
        wr_id: u64,
        local: Local<R>,
        remote: Remote,
        imm: u32,
    ) -> Self
    where
        M: Holds<R>,
    {
        let op = SendOp::RdmaWrite {
            remote,
            imm: Some(imm),
        };
        Self::with(wr_id, op, Some(local.held()), &[])
    }

    /// SEND of `bytes`, copied into the work request when it is posted
    /// (`IBV_SEND_INLINE`): at most [`QpCaps::max_inline`] bytes.
    pub fn send_inline(wr_id: u64, bytes: &'a [u8]) -> Self {
        Self::with(wr_id, SendOp::Send { imm: None }, None, bytes)
    }

    /// RDMA WRITE of `bytes` to `remote`, copied when posted (inline).
    pub fn write_inline(wr_id: u64, bytes: &'a [u8], remote: Remote) -> Self {
        let op = SendOp::RdmaWrite { remote, imm: None };
        Self::with(wr_id, op, None, bytes)
    }

    // The device writes the local memory of the three below: it must be
    // DeviceWritable (the QP's `M` need not be: `Holds`).

    /// RDMA READ of `remote` into `local`.
    #[doc(alias = "IBV_WR_RDMA_READ")]
    #[doc(alias = "ibv_wr_rdma_read")]
    #[doc(alias = "rdma_post_read")]
    pub fn read<W: DeviceWritable>(wr_id: u64, local: Local<W>, remote: Remote) -> Self
    where
        M: Holds<W>,
    {
        let op = SendOp::RdmaRead { remote };
        Self::with(wr_id, op, Some(local.held()), &[])
    }

    /// 64-bit fetch-and-add of `add` at `remote` (8-byte aligned); the old
    /// value lands in `local`'s first 8 bytes.
    #[doc(alias = "IBV_WR_ATOMIC_FETCH_AND_ADD")]
    #[doc(alias = "ibv_wr_atomic_fetch_add")]
    pub fn fetch_add<W: DeviceWritable>(
        wr_id: u64,
        local: Local<W>,
        remote: Remote,
        add: u64,
    ) -> Self
    where
        M: Holds<W>,
    {
        let op = SendOp::FetchAdd { remote, add };
        Self::with(wr_id, op, Some(local.held()), &[])
    }

    /// 64-bit compare-and-swap at `remote` (8-byte aligned); the old value
    /// lands in `local`'s first 8 bytes.
    #[doc(alias = "IBV_WR_ATOMIC_CMP_AND_SWP")]
    #[doc(alias = "ibv_wr_atomic_cmp_swp")]
    pub fn compare_swap<W: DeviceWritable>(
        wr_id: u64,
        local: Local<W>,
        remote: Remote,
        compare: u64,
        swap: u64,
    ) -> Self
    where
        M: Holds<W>,
    {
        let op = SendOp::CompareSwap {
            remote,
            compare,
            swap,
        };
        Self::with(wr_id, op, Some(local.held()), &[])
    }
}

impl<'a, M> SendRequest<'a, M> {
    /// No completion of its own on success (`IBV_SEND_SIGNALED` unset): its
    /// memory comes back with the completion of a later signalled request of
    /// the QP (rxe completes a send queue in order), or with
    /// [`OwnedQp::flush`]. Requests are signalled unless this is called.
    ///
    /// [`OwnedQp::post_send`] refuses an unsignalled RDMA READ or atomic
    /// (their memory comes back only with their own completion), and every
    /// unsignalled request on siw: siw completes a SEND or WRITE before an
    /// earlier READ, and sends unsignalled payloads of 4 KiB and more
    /// zero-copy, so TCP may still hold the pages after a later completion
    /// ([`PostError::MustBeSignalled`]).
    pub fn unsignaled(mut self) -> Self {
        self.flags.remove(SendFlags::SIGNALED);
        self
    }

    /// Waits for earlier RDMA READs and atomics first (`IBV_SEND_FENCE`).
    pub fn fence(mut self) -> Self {
        self.flags.insert(SendFlags::FENCE);
        self
    }

    /// Sets the solicited-event bit for the receiver (`IBV_SEND_SOLICITED`).
    pub fn solicited(mut self) -> Self {
        self.flags.insert(SendFlags::SOLICITED);
        self
    }

    /// Its destination, on a UD QP: QP `remote_qpn` with Q_Key
    /// `remote_qkey`, through `ah`. The request holds `ah` until its memory
    /// comes back, so the address handle outlives the send.
    #[doc(alias = "ibv_wr_set_ud_addr")]
    #[doc(alias = "rdma_post_ud_send")]
    pub fn ud(mut self, ah: Arc<AddressHandle>, remote_qpn: u32, remote_qkey: u32) -> Self {
        self.ud = Some(UdTarget {
            ah,
            remote_qpn,
            remote_qkey,
        });
        self
    }

    /// The caller's id, returned in [`Completed::wr_id`].
    pub fn wr_id(&self) -> u64 {
        self.wr_id
    }

    /// Gives the local memory back (none for an inline request).
    pub fn into_local(self) -> Option<Local<M>> {
        self.local
    }

    /// Whether the request has a completion of its own.
    #[cfg_attr(not(feature = "tokio"), allow(dead_code))]
    pub(crate) fn is_signalled(&self) -> bool {
        self.flags.contains(SendFlags::SIGNALED)
    }

    #[cfg_attr(not(feature = "tokio"), allow(dead_code))]
    pub(crate) fn op_name(&self) -> &'static str {
        self.op.name()
    }
}

/// A receive work request that owns the memory the message lands in.
#[derive(Debug)]
pub struct RecvRequest<M> {
    wr_id: u64,
    local: Local<M>,
}

impl<M: DeviceReadable> RecvRequest<M> {
    /// A receive into `local`, which the device writes: it must be
    /// [`DeviceWritable`] (the QP's `M` need not be: [`Holds`]).
    pub fn new<W: DeviceWritable>(wr_id: u64, local: Local<W>) -> Self
    where
        M: Holds<W>,
    {
        RecvRequest {
            wr_id,
            local: local.held(),
        }
    }

    /// The caller's id, returned in [`Completed::wr_id`].
    pub fn wr_id(&self) -> u64 {
        self.wr_id
    }

    /// Gives the memory back.
    pub fn into_local(self) -> Local<M> {
        self.local
    }
}

/// A request refused before the device saw it, handed back with why.
#[derive(thiserror::Error)]
#[error("{error}")]
#[non_exhaustive]
pub struct PostRefused<T> {
    /// The request, untouched.
    pub request: T,
    /// Why: the message (the error itself is not also a `source()`).
    pub error: Error,
}

crate::error::hands_back_with_error! {
    [T] PostRefused<T>, "the request";
}

impl<T> fmt::Debug for PostRefused<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostRefused")
            .field("error", &self.error)
            .finish_non_exhaustive()
    }
}

/// Why [`OwnedQp::post_send`] failed, or a post of `uverbs::tokio`'s
/// `AsyncQp` (sends and receives alike).
#[derive(thiserror::Error)]
#[non_exhaustive]
pub enum PostSendError<T> {
    /// Refused before the device saw it: the request comes back untouched.
    #[error(transparent)]
    Refused(PostRefused<T>),
    /// The request was queued, but the doorbell that announces it failed
    /// ([`Error::Doorbell`]): it belongs to the device, which may still run
    /// it. On an [`OwnedQp`] its memory comes back like any posted
    /// request's (with its completion, a flush, or the drop of the QP); on
    /// an `AsyncQp` no future waits for it, and the QP drops its memory
    /// once the device is done with it. The next successful doorbell, or a
    /// move to ERR, reaches it.
    #[error("{error}")]
    Queued {
        /// The id the caller gave the request.
        wr_id: u64,
        /// The doorbell's error: the message.
        error: Error,
    },
}

impl<T> PostSendError<T> {
    /// The error, either way.
    pub fn error(&self) -> &Error {
        match self {
            PostSendError::Refused(r) => &r.error,
            PostSendError::Queued { error, .. } => error,
        }
    }

    /// The error, dropping a refused request.
    pub fn into_error(self) -> Error {
        match self {
            PostSendError::Refused(r) => r.error,
            PostSendError::Queued { error, .. } => error,
        }
    }

    /// The request back, if it was refused (never if it was queued).
    pub fn into_request(self) -> Option<T> {
        match self {
            PostSendError::Refused(r) => Some(r.request),
            PostSendError::Queued { .. } => None,
        }
    }
}

impl<T> fmt::Debug for PostSendError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PostSendError::Refused(r) => f.debug_tuple("Refused").field(r).finish(),
            PostSendError::Queued { wr_id, error } => f
                .debug_struct("Queued")
                .field("wr_id", wr_id)
                .field("error", error)
                .finish(),
        }
    }
}

impl<T> From<PostSendError<T>> for Error {
    fn from(e: PostSendError<T>) -> Error {
        e.into_error()
    }
}

/// How a request's memory came back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Ended {
    /// With its own completion (success, an error, or a flush).
    Completion(WorkCompletion),
    /// An unsignalled send, ended by the completion of a later request of
    /// its queue, which completes in order: it succeeded.
    AfterLater,
    /// A signalled request whose own completion never came: a later
    /// request of its queue completed (so the device is done with its
    /// memory), but its completion was lost, say in a CQ overrun. Whether
    /// it succeeded is unknown.
    WithoutCompletion,
    /// Outstanding when [`OwnedQp::destroy`] destroyed the QP: the device
    /// reaches its memory no more. Whether it ran is unknown.
    Destroyed,
    /// Outstanding when the QP moved to RESET on rxe, which empties both
    /// queues with no completion ([`OwnedQp::modify`]): the device reaches
    /// its memory no more. Whether it ran is unknown.
    Reset,
}

/// A request the device is done with, and its memory.
#[derive(Debug)]
pub struct Completed<M> {
    /// The id the caller gave the request.
    pub wr_id: u64,
    /// How it ended; its own completion carries `wr_id` set to the caller's.
    pub ended: Ended,
    /// Its memory (none for an inline send).
    pub local: Option<Local<M>>,
    /// Whether it was a receive.
    pub is_recv: bool,
}

impl<M> Completed<M> {
    /// Its own completion, if it had one.
    pub fn completion(&self) -> Option<&WorkCompletion> {
        match &self.ended {
            Ended::Completion(wc) => Some(wc),
            Ended::AfterLater | Ended::WithoutCompletion | Ended::Destroyed | Ended::Reset => None,
        }
    }

    /// The status: its completion's, success for an unsignalled send ended
    /// by a later completion, `None` when its completion was lost
    /// ([`Ended::WithoutCompletion`]) or the QP was destroyed first
    /// ([`Ended::Destroyed`]): never success by default.
    pub fn status(&self) -> Option<WcStatus> {
        match &self.ended {
            Ended::Completion(wc) => Some(wc.status()),
            Ended::AfterLater => Some(WcStatus::Success),
            Ended::WithoutCompletion | Ended::Destroyed | Ended::Reset => None,
        }
    }

    /// The memory, without its range.
    pub fn into_memory(self) -> Option<M> {
        self.local.map(Local::into_inner)
    }
}

/// What an outstanding request keeps until its completion.
struct Entry<M> {
    /// The id it was posted under (the queue's, not the caller's): unique
    /// among the QP's requests, whatever ids the caller gives.
    key: u64,
    wr_id: u64,
    local: Option<Local<M>>,
    /// Whether it produces a completion of its own.
    signalled: bool,
    /// A UD send's address handle, kept alive while the send is queued.
    _ah: Option<Arc<AddressHandle>>,
}

impl<M> Entry<M> {
    fn recv(key: u64, wr_id: u64, local: Local<M>) -> Self {
        Entry {
            key,
            wr_id,
            local: Some(local),
            signalled: true,
            _ah: None,
        }
    }

    fn send(key: u64, r: SendRequest<'_, M>) -> Self {
        Entry {
            key,
            wr_id: r.wr_id,
            signalled: r.flags.contains(SendFlags::SIGNALED),
            local: r.local,
            _ah: r.ud.map(|ud| ud.ah),
        }
    }
}

impl<M> Entry<M> {
    /// Its key and the request handed back, ended as `ended`.
    fn end(self, ended: Ended, is_recv: bool) -> (u64, Completed<M>) {
        let completed = Completed {
            wr_id: self.wr_id,
            ended,
            local: self.local,
            is_recv,
        };
        (self.key, completed)
    }
}

struct Tables<M> {
    sq: Outstanding<Entry<M>>,
    rq: Outstanding<Entry<M>>,
    /// Requests back from the device that no poll has handed over yet,
    /// each with its key, for the next poll: those a move to RESET took
    /// (rxe empties both queues), and those [`OwnedQp::wait`] read beyond
    /// the one it returns.
    reset: Vec<(u64, Completed<M>)>,
    /// Room for a batch's SGEs and work requests, kept between
    /// [`OwnedQp::post_send_batch`] calls (empty between them), so a batch
    /// allocates only when it is larger than every batch before.
    batch_sges: Vec<Option<Sge>>,
    batch_wrs: Vec<SendWr<'static>>,
}

/// An empty vector of work requests of any lifetime, in `wrs`'s allocation:
/// collecting an empty `vec::IntoIter` into a vector of a type of the same
/// layout reuses the buffer (std's in-place collection), so the room
/// [`Tables`] keeps outlives the borrows of one batch. Should std ever
/// allocate anew here, only the reuse is lost.
fn recycle<'b>(mut wrs: Vec<SendWr<'_>>) -> Vec<SendWr<'b>> {
    wrs.clear();
    // Not `filter`: the item type changes (its lifetime), which is the point.
    #[allow(clippy::unnecessary_filter_map)]
    wrs.into_iter().filter_map(|_| None).collect()
}

/// A queue pair whose work requests own the memory the device may use.
///
/// It owns the [`QueuePair`] (and through it keeps its CQs alive). The
/// QP's CQs may be shared with other QPs, owned or not, and armed and
/// waited on through the caller's [`CompletionQueue`] handles: each
/// completion reaches its QP's reader, whoever reads the CQ. This QP's go
/// only to [`poll`](Self::poll) (never to [`CompletionQueue::poll`]), and
/// the completions of other QPs it reads are held for their readers.
///
/// [`QueuePair::post_send`] is `unsafe` because the compiler cannot see
/// that the device reads and writes the SGEs' bytes until the request has
/// completed. An [`OwnedQp`] makes that visible in types:
///
/// - a request's local side is a [`Local`]: a range of registered memory
///   moved into the request ([`BufferMr`](crate::BufferMr), or an
///   `Arc<BufferMr>` for memory the device only reads), so the program cannot
///   free, reuse or write it while the request is outstanding;
/// - operations in which the device writes local memory (receives, RDMA
///   READ, atomics) take only [`DeviceWritable`] memory, which nothing else
///   can read meanwhile;
/// - `M`, the memory the queue keeps and hands back, may be wider than one
///   request's: a request is built from any memory `M` [`Holds`], so an
///   `OwnedQp<`[`OwnedOrShared`]`<B>>` takes owned and shared buffers alike.
///   Requests therefore do not fix `M`: name it where nothing else does
///   (`OwnedQp::<BufferMr<MmapMut>>::new(qp)`, a field's type);
/// - [`OwnedQp::poll`] reads the QP's CQs and gives each request's memory
///   back in a [`Completed`], with the completion;
/// - a request the device may still use is never released early: dropping
///   the `OwnedQp` moves the QP to ERR and destroys it before the memory is
///   dropped (and leaks the memory if the destroy fails), and
///   [`OwnedQp::flush`] completes everything outstanding with FLUSH_ERR and
///   hands it back.
///
/// ```no_run
/// use uverbs::post::{Local, RecvRequest, SendRequest};
/// use uverbs::{AccessFlags, BufferMr, OwnedQp, QpInit};
/// use uverbs::command::QpType;
/// # fn f(ctx: &uverbs::Context) -> Result<(), Box<dyn std::error::Error>> {
/// let pd = ctx.alloc_pd()?;
/// let cq = ctx.create_cq(64, None)?;
/// let qp = pd.create_qp(&QpInit::new(QpType::Rc, &cq, &cq))?;
/// let qp: OwnedQp<BufferMr<Vec<u8>>> = OwnedQp::new(qp)?;
/// // ... connect it (qp.modify to INIT, RTR, RTS) ...
/// let buf = pd.reg_buffer(vec![0u8; 4096], AccessFlags::LOCAL_WRITE)?;
/// qp.post_recv(RecvRequest::new(7, Local::whole(buf)))?;
/// // `buf` is gone from our hands until its completion:
/// let mut done = Vec::new();
/// while done.is_empty() {
///     qp.poll(&mut done)?;
/// }
/// let back: BufferMr<Vec<u8>> = done.remove(0).into_memory().unwrap();
/// # Ok(()) }
/// ```
///
/// The memory cannot be used while the request owns it:
/// ```compile_fail,E0382
/// # use uverbs::{BufferMr, post::Local, OwnedQp, post::RecvRequest};
/// # fn f(qp: &OwnedQp<BufferMr<Vec<u8>>>, buf: BufferMr<Vec<u8>>) {
/// let _ = qp.post_recv(RecvRequest::new(1, Local::whole(buf)));
/// buf.buffer(); // error: use of moved value
/// # }
/// ```
/// Shared memory (an `Arc`) may be sent or written from, but never received
/// or read into:
/// ```compile_fail,E0277
/// # use std::sync::Arc;
/// # use uverbs::{BufferMr, post::Local, post::RecvRequest};
/// # fn f(buf: Arc<BufferMr<Vec<u8>>>) {
/// let _ = RecvRequest::new(1, Local::whole(buf)); // error: not DeviceWritable
/// # }
/// ```
/// ```compile_fail,E0277
/// # use std::sync::Arc;
/// # use uverbs::{BufferMr, post::Local, wr::Remote, post::SendRequest};
/// # fn f(buf: Arc<BufferMr<Vec<u8>>>, remote: Remote) {
/// let _ = SendRequest::read(1, Local::whole(buf), remote); // error: not DeviceWritable
/// # }
/// ```
/// Plain slices are not registered memory a request can own:
/// ```compile_fail,E0277
/// # use uverbs::post::Local;
/// # fn f(bytes: &'static [u8]) {
/// let _ = Local::whole(bytes); // error: &[u8] is not DeviceReadable
/// # }
/// ```
/// An `OwnedQp` holding memory of one type takes no other (unless its
/// type [`Holds`] it, as [`OwnedOrShared`] holds both kinds):
/// ```compile_fail,E0277
/// # use uverbs::{BufferMr, post::Local, OwnedQp, post::SendRequest};
/// # fn f(qp: &OwnedQp<BufferMr<Vec<u8>>>, buf: BufferMr<Box<[u8]>>) {
/// let _ = qp.post_send(SendRequest::send(1, Local::whole(buf))); // error: BufferMr<Vec<u8>>: Holds<BufferMr<Box<[u8]>>> unsatisfied
/// # }
/// ```
/// and a QP of both kinds still reads only into owned memory:
/// ```compile_fail,E0277
/// # use std::sync::Arc;
/// # use uverbs::{BufferMr, post::Local, post::OwnedOrShared, OwnedQp, wr::Remote, post::SendRequest};
/// # fn f(qp: &OwnedQp<OwnedOrShared<Vec<u8>>>, buf: Arc<BufferMr<Vec<u8>>>, remote: Remote) {
/// let _ = qp.post_send(SendRequest::read(1, Local::whole(buf), remote)); // error: not DeviceWritable
/// # }
/// ```
#[doc(alias = "ibv_post_send")]
#[doc(alias = "ibv_post_recv")]
pub struct OwnedQp<M> {
    /// `Some` until dropped; destroyed before `tables` lets go of memory.
    qp: Option<QueuePair>,
    tables: Mutex<Tables<M>>,
}

impl<M> fmt::Debug for OwnedQp<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let t = self.lock();
        f.debug_struct("OwnedQp")
            .field("qp", &self.qp)
            .field("sends_outstanding", &t.sq.len())
            .field("recvs_outstanding", &t.rq.len())
            .finish()
    }
}

/// Why [`OwnedQp::new`] refused a queue pair, and the queue pair back.
#[derive(Debug, thiserror::Error)]
#[error("{error}")]
#[non_exhaustive]
pub struct NotOwnable {
    /// The queue pair, untouched.
    pub qp: QueuePair,
    /// Why: the message.
    pub error: Error,
}

crate::error::hands_back_with_error! {
    [] NotOwnable, "the queue pair";
}

/// Why a destroy failed ([`OwnedQp::destroy`], and with the `tokio`
/// feature `AsyncQp::destroy`): the kernel kept the QP (or, in a forked
/// child, it was not sent), so the device may still use the memory of the
/// requests outstanding; the queue pair `Q` comes back with them. On siw
/// see [`DestroyQpError`](crate::qp::DestroyQpError) for what a refusal leaves
/// of the rings.
#[derive(Debug, thiserror::Error)]
#[error("{error}")]
#[non_exhaustive]
pub struct NotDestroyed<Q> {
    /// The queue pair, its requests still outstanding.
    pub qp: Q,
    /// Why: the message.
    pub error: Error,
}

crate::error::hands_back_with_error! {
    [Q] NotDestroyed<Q>, "the queue pair (whose drop destroys it, freeing what it held)";
}

/// Completions read from a CQ at a time.
const POLL_BATCH: usize = 16;

impl<M: DeviceReadable> OwnedQp<M> {
    /// Creates a queue pair in `pd` ([`ProtectionDomain::create_qp`](crate::ProtectionDomain::create_qp))
    /// and takes it ([`new`](Self::new)): the usual way to an owned QP. A
    /// refusal of `new` (a QP on an SRQ no [`OwnedSrq`] owns) destroys the
    /// new QP again and answers its error.
    ///
    /// ```no_run
    /// # use uverbs::{BufferMr, OwnedQp, PageBuffer, QpInit, QpType};
    /// # fn f(pd: &uverbs::ProtectionDomain, cq: &uverbs::CompletionQueue) -> Result<(), uverbs::Error> {
    /// let qp: OwnedQp<BufferMr<PageBuffer>> = OwnedQp::create(pd, &QpInit::new(QpType::Rc, cq, cq))?;
    /// # Ok(()) }
    /// ```
    #[doc(alias = "ibv_create_qp")]
    pub fn create(pd: &crate::ProtectionDomain, init: &crate::QpInit<'_>) -> Result<Self, Error> {
        Ok(OwnedQp::new(pd.create_qp(init)?)?)
    }

    /// Takes `qp`, which must be in RESET (so no request posted before is
    /// outstanding), registers it as the reader of its completions on its
    /// CQs, and drops the completions there that could name it: those left
    /// by a destroyed QP with the same number, or by raw posts before a
    /// reset. Completions of other QPs read meanwhile are held for their
    /// readers.
    // The Err hands the caller's resource back by value; the path is cold.
    #[allow(clippy::result_large_err)]
    pub fn new(qp: QueuePair) -> Result<Self, NotOwnable> {
        if qp.state() != QpState::Reset {
            let error = Error::input(
                Op::PostSend,
                &qp.context().inner.device,
                "an OwnedQp takes a queue pair in RESET only",
            );
            return Err(NotOwnable { qp, error });
        }
        if qp.has_srq() && !qp.srq_is_owned() {
            // Its receive completions carry the SRQ's wr_ids, which are not
            // this owner's keys: reading them as keys would hand back the
            // wrong memory. On an OwnedSrq's SRQ they go to that owner.
            let error = Error::input(
                Op::PostRecv,
                &qp.context().inner.device,
                "an OwnedQp takes a queue pair on a shared receive queue only if an OwnedSrq owns the SRQ",
            );
            return Err(NotOwnable { qp, error });
        }
        let owned = OwnedQp {
            qp: Some(qp),
            tables: Mutex::new(Tables {
                sq: Outstanding::new(0),
                rq: Outstanding::new(RECV_TAG),
                reset: Vec::new(),
                batch_sges: Vec::new(),
                batch_wrs: Vec::new(),
            }),
        };
        let qpn = owned.qp().qp_num();
        let adopted = owned.cqs().try_for_each(|cq| cq.adopt(qpn));
        match adopted {
            Ok(()) => Ok(owned),
            Err(error) => Err(NotOwnable {
                qp: owned.into_parts(),
                error,
            }),
        }
    }

    /// Posts one send request: on success its memory belongs to the device
    /// until [`poll`](Self::poll) hands it back. A refusal (wrong state, a
    /// full queue, inline data too long, an unsignalled request that must be
    /// signalled, …) hands it back untouched
    /// ([`PostSendError::Refused`]). If the doorbell fails after the request
    /// was queued ([`PostSendError::Queued`]), the request is the device's
    /// as after a success. One doorbell write.
    // The Err hands the caller's resource back by value; the path is cold.
    #[allow(clippy::result_large_err)]
    pub fn post_send<'a>(
        &self,
        request: SendRequest<'a, M>,
    ) -> Result<(), PostSendError<SendRequest<'a, M>>> {
        self.post_send_keyed(request).map(drop)
    }

    /// [`post_send`](Self::post_send), answering the key the request was
    /// posted under: the one its [`Completed`] comes back with from
    /// [`poll_each`](Self::poll_each).
    #[inline]
    #[allow(clippy::result_large_err)]
    pub(crate) fn post_send_keyed<'a>(
        &self,
        request: SendRequest<'a, M>,
    ) -> Result<u64, PostSendError<SendRequest<'a, M>>> {
        let mut t = self.lock();
        let checked = self
            .must_be_signalled(&request)
            .map_or(Ok(()), Err)
            .and_then(|()| request.local.as_ref().map(Local::sge).transpose());
        let sge = match checked {
            Ok(sge) => sge,
            Err(e) => {
                return Err(PostSendError::Refused(self.refused(
                    Op::PostSend,
                    0,
                    e,
                    request,
                )))
            }
        };
        let sges = sge.as_slice();
        let inline = [request.inline];
        let wr = send_wr(&request, t.sq.id_of_next(0), sges, &inline);
        // SAFETY: the request's memory is a Local<M: DeviceReadable>
        // (held from DeviceWritable memory for READ and atomics, by
        // SendRequest's constructors: `Holds` keeps it the only way to its
        // bytes): mapped, registered and unwritten but by the device while
        // the value lives; the value is kept in the table until the device is done
        // with it (its own completion, a later completion of an in-order
        // queue for an unsignalled send, or the QP's destruction), also
        // when the doorbell fails after the request was queued.
        let posted = unsafe { self.qp().post_send(std::slice::from_ref(&wr)) };
        let (wr_id, key) = (request.wr_id, wr.wr_id);
        match posted {
            Ok(()) => {
                t.sq.push(Entry::send(key, request));
                Ok(key)
            }
            Err(error @ Error::Doorbell { .. }) => {
                t.sq.push(Entry::send(key, request));
                Err(PostSendError::Queued { wr_id, error })
            }
            Err(error) => Err(PostSendError::Refused(PostRefused { request, error })),
        }
    }

    /// The reason an unsignalled `r` must not be posted here, if any.
    fn must_be_signalled(&self, r: &SendRequest<'_, M>) -> Option<PostError> {
        if r.flags.contains(SendFlags::SIGNALED) {
            return None;
        }
        let opcode = r.op.name();
        let why = if matches!(
            r.op,
            SendOp::RdmaRead { .. } | SendOp::FetchAdd { .. } | SendOp::CompareSwap { .. }
        ) {
            "its memory comes back only with its own completion"
        } else {
            self.provider().owned_sends_must_be_signalled()?
        };
        Some(PostError::MustBeSignalled { opcode, why })
    }

    /// Posts `requests` with one doorbell, all or nothing: on success the
    /// vector is emptied (the requests belong to the device until
    /// [`poll`](Self::poll)); on a refusal it is as it was and nothing was
    /// queued. On [`Error::Doorbell`] the requests were queued: the vector
    /// is emptied and they are the device's, as after a success.
    /// Allocates only when the batch is larger than every batch this QP
    /// posted before (the room for its work requests is kept).
    pub fn post_send_batch(&self, requests: &mut Vec<SendRequest<'_, M>>) -> Result<(), Error> {
        if requests.is_empty() {
            return Ok(());
        }
        let mut guard = self.lock();
        let t = &mut *guard;
        let mut sges = std::mem::take(&mut t.batch_sges);
        for (i, r) in requests.iter().enumerate() {
            let sge = match self.must_be_signalled(r) {
                Some(e) => Err(e),
                None => r.local.as_ref().map(Local::sge).transpose(),
            };
            match sge {
                Ok(sge) => sges.push(sge),
                Err(e) => {
                    sges.clear();
                    t.batch_sges = sges;
                    return Err(self.post_error(Op::PostSend, i, e));
                }
            }
        }
        let mut wrs: Vec<SendWr<'_>> = recycle(std::mem::take(&mut t.batch_wrs));
        wrs.extend(requests.iter().enumerate().map(|(i, r)| {
            send_wr(
                r,
                t.sq.id_of_next(i),
                sges[i].as_slice(),
                std::array::from_ref(&r.inline),
            )
        }));
        // SAFETY: as in post_send, for each request of the batch; they stay
        // in the table until the device is done with them.
        let posted = unsafe { self.qp().post_send(&wrs) };
        t.batch_wrs = recycle(wrs);
        sges.clear();
        t.batch_sges = sges;
        if matches!(posted, Ok(()) | Err(Error::Doorbell { .. })) {
            for r in requests.drain(..) {
                let key = t.sq.id_of_next(0);
                t.sq.push(Entry::send(key, r));
            }
        }
        posted
    }

    /// Posts one receive request (no system call); on refusal it comes
    /// back untouched.
    // The Err hands the caller's resource back by value; the path is cold.
    #[allow(clippy::result_large_err)]
    #[doc(alias = "rdma_post_recv")]
    pub fn post_recv(&self, request: RecvRequest<M>) -> Result<(), PostRefused<RecvRequest<M>>> {
        self.post_recv_keyed(request).map(drop)
    }

    /// [`post_recv`](Self::post_recv), answering the key the request was
    /// posted under (see [`post_send_keyed`](Self::post_send_keyed)).
    #[inline]
    #[allow(clippy::result_large_err)]
    pub(crate) fn post_recv_keyed(
        &self,
        request: RecvRequest<M>,
    ) -> Result<u64, PostRefused<RecvRequest<M>>> {
        let mut t = self.lock();
        let sge = match request.local.sge() {
            Ok(sge) => sge,
            Err(e) => return Err(self.refused(Op::PostRecv, 0, e, request)),
        };
        let sges = [sge];
        let wr = RecvWr {
            wr_id: t.rq.id_of_next(0),
            sges: &sges,
        };
        // SAFETY: the memory was DeviceWritable when the request was made
        // (RecvRequest::new), and `Holds` keeps it so: nothing but the
        // device reaches it while the value lives, and the value stays in
        // the table until the device is done with it.
        if let Err(error) = unsafe { self.qp().post_recv(std::slice::from_ref(&wr)) } {
            return Err(PostRefused { request, error });
        }
        t.rq.push(Entry::recv(wr.wr_id, request.wr_id, request.local));
        Ok(wr.wr_id)
    }

    /// Reads the QP's CQs once (up to 16 completions from each) and pushes
    /// a [`Completed`] for every request of this QP they end, oldest first,
    /// onto `done`. Returns how many were pushed. No system call; no
    /// allocation beyond `done`'s growth.
    ///
    /// A completion ends its own request and, before it in the same queue,
    /// every unsignalled send ([`Ended::AfterLater`]); on a queue that
    /// completes in order (rxe's send queue, every receive queue) also any
    /// signalled request whose completion was lost
    /// ([`Ended::WithoutCompletion`]). On siw's send queue an earlier
    /// request waits for its own completion: siw completes a SEND or WRITE
    /// before an earlier RDMA READ.
    ///
    /// After a move to RESET on rxe, which empties the queues, it hands
    /// back every request that was outstanding: those whose completions
    /// were in the CQ with them, the rest as [`Ended::Reset`].
    #[doc(alias = "ibv_poll_cq")]
    pub fn poll(&self, done: &mut Vec<Completed<M>>) -> Result<usize, Error> {
        self.poll_each(|_, completed| done.push(completed))
    }

    /// [`poll`](Self::poll), handing each request to `f` with the key it
    /// was posted under.
    #[inline]
    pub(crate) fn poll_each(&self, mut f: impl FnMut(u64, Completed<M>)) -> Result<usize, Error> {
        let mut t = self.lock();
        let handed_back = t.reset.len();
        for (key, completed) in t.reset.drain(..) {
            f(key, completed);
        }
        Ok(handed_back + self.poll_cqs(&mut t, &mut f)?)
    }

    /// Moves the QP to ERR, which completes every outstanding request with
    /// FLUSH_ERR, and polls until all of them are back in `done` or
    /// `timeout` has passed (then `ETIMEDOUT`; what came back is in `done`,
    /// the rest stays owned). The QP is left in ERR: modify it to RESET to
    /// use it again.
    ///
    /// **siw** flushes its send ring once, as the QP enters ERR; when the
    /// kernel moved it there itself (the stream closed: the peer went away
    /// or disconnected), a send request posted after that stays in the
    /// ring, never completed, and this answers `ETIMEDOUT` with it still
    /// owned. [`destroy`](Self::destroy) hands its memory back.
    pub fn flush(&self, timeout: Duration, done: &mut Vec<Completed<M>>) -> Result<(), Error> {
        let qp = self.qp();
        if qp.state() != QpState::Err {
            qp.modify(&QpAttr::new().state(QpState::Err))?;
        }
        let deadline = Instant::now() + timeout;
        loop {
            self.poll(done)?;
            if self.outstanding() == (0, 0) {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(Error::os(
                    Op::PollCq,
                    &qp.context().inner.device,
                    Errno::TIMEDOUT,
                ));
            }
            std::thread::sleep(Duration::from_micros(200));
        }
    }

    /// Destroys the QP (`DESTROY_QP`) and hands back the memory of every
    /// request still outstanding: first, with their completions, those
    /// whose completions are in the CQ already ([`poll`](Self::poll)), then
    /// the rest, each [`Ended::Destroyed`]: after the destroy the device
    /// reaches none of their memory. This gets memory back from requests
    /// that will never complete, such as those siw leaves in its ring (see
    /// [`flush`](Self::flush)); dropping the `OwnedQp` destroys the QP too,
    /// but frees that memory.
    ///
    /// A failure ([`NotDestroyed`]: the poll failed, or the kernel refused
    /// the destroy) hands the `OwnedQp` back, its requests still
    /// outstanding; what came back before it stays in `done`.
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # fn f(qp: uverbs::OwnedQp<uverbs::BufferMr<Vec<u8>>>) -> Result<(), uverbs::Error> {
    /// let mut back = Vec::new();
    /// if qp.flush(Duration::from_secs(1), &mut back).is_err() {
    ///     // Some requests never completed (siw after its stream closed).
    ///     qp.destroy(&mut back)?;
    /// }
    /// // Every request's memory is in `back` now.
    /// # Ok(()) }
    /// ```
    #[doc(alias = "ibv_destroy_qp")]
    // The Err hands the caller's resource back by value; the path is cold.
    #[allow(clippy::result_large_err)]
    pub fn destroy(self, done: &mut Vec<Completed<M>>) -> Result<(), NotDestroyed<Self>> {
        self.destroy_each(|_, completed| done.push(completed))
    }

    /// [`destroy`](Self::destroy), handing each request to `f` with the
    /// key it was posted under.
    #[allow(clippy::result_large_err)]
    pub(crate) fn destroy_each(
        mut self,
        mut f: impl FnMut(u64, Completed<M>),
    ) -> Result<(), NotDestroyed<Self>> {
        if let Err(error) = self.poll_each(&mut f) {
            return Err(NotDestroyed { qp: self, error });
        }
        let qp = self.qp.take().expect("present until dropped");
        let (qpn, cqs) = (qp.qp_num(), qp.cqs());
        let tables = self
            .tables
            .get_mut()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        // Should the destroy unwind, the requests' memory is leaked (as in
        // Drop), never freed while the device may still reach it.
        let leak_on_unwind = LeakOnUnwind(Some(tables));
        let destroyed = qp.destroy();
        let t = leak_on_unwind.disarm();
        match destroyed {
            Ok(_) => {
                forget_routing(qpn, cqs);
                for (key, completed) in t.end_all(Ended::Destroyed) {
                    f(key, completed);
                }
                Ok(())
            }
            Err(refused) => {
                self.qp = Some(*refused.qp);
                Err(NotDestroyed {
                    qp: self,
                    error: refused.error,
                })
            }
        }
    }
}

impl<M> OwnedQp<M> {
    /// Reads the CQs once for this QP's completions and ends the requests
    /// they name (see [`poll`](Self::poll)); how many.
    fn poll_cqs(
        &self,
        t: &mut Tables<M>,
        f: &mut impl FnMut(u64, Completed<M>),
    ) -> Result<usize, Error> {
        let mut ended = 0;
        let qpn = self.qp().qp_num();
        let sq_in_order = self.provider().send_completes_in_order();
        for cq in self.cqs() {
            let mut wc = [WorkCompletion::default(); POLL_BATCH];
            let n = cq.poll_routed(Reader::Owner(qpn), &mut wc)?;
            for c in &wc[..n] {
                let (table, is_recv, in_order) = if c.wr_id() & RECV_TAG != 0 {
                    (&mut t.rq, true, true)
                } else {
                    (&mut t.sq, false, sq_in_order)
                };
                let ends_earlier = |e: &Entry<M>| !e.signalled || in_order;
                ended += table.complete(c.wr_id(), ends_earlier, |entry, how| {
                    let how = match (how, entry.signalled) {
                        (Ends::Named, _) => Ended::Completion(c.with_wr_id(entry.wr_id)),
                        (Ends::Earlier, false) => Ended::AfterLater,
                        (Ends::Earlier, true) => Ended::WithoutCompletion,
                    };
                    let (key, completed) = entry.end(how, is_recv);
                    f(key, completed);
                });
            }
        }
        Ok(ended)
    }

    fn lock(&self) -> MutexGuard<'_, Tables<M>> {
        // A panic while holding the lock leaves the tables consistent (each
        // entry is pushed only after its post succeeded): keep using them.
        self.tables
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The queue pair. Not public: a raw post on it could carry an id of
    /// this table's, and its completion would release memory too early.
    fn qp(&self) -> &QueuePair {
        self.qp.as_ref().expect("present until dropped")
    }

    /// The driver behind the QP.
    fn provider(&self) -> Provider {
        self.qp().context().inner.provider
    }

    /// The QP's send CQ and, if another, its receive CQ.
    pub(crate) fn cqs(&self) -> impl Iterator<Item = CompletionQueue> + '_ {
        let (send, recv) = self.qp().cqs();
        let recv = (!send.same_as(&recv)).then_some(recv);
        std::iter::once(send).chain(recv)
    }

    /// Changes the QP's attributes and state: [`QueuePair::modify`].
    ///
    /// **A move to RESET** on rxe empties both queues with no completion
    /// (the kernel's `rxe_qp_reset`): every request outstanding then comes
    /// back with the next [`poll`](Self::poll), those whose completions
    /// were in the CQ already with them, the rest as [`Ended::Reset`].
    /// siw keeps its rings across RESET (its QP stays in ERR): there the
    /// requests stay outstanding until they complete or the QP is
    /// destroyed ([`destroy`](Self::destroy) hands them back).
    #[doc(alias = "ibv_modify_qp")]
    pub fn modify(&self, attr: &QpAttr) -> Result<(), Error> {
        if attr.target_state() != Some(QpState::Reset) || !self.provider().reset_empties_queues() {
            return self.qp().modify(attr);
        }
        // Under the tables' lock: no request is posted between the reset
        // and the emptying of the tables below.
        let mut t = self.lock();
        self.qp().modify(attr)?;
        let mut reset = std::mem::take(&mut t.reset);
        // Completions already in the CQ keep their status. A failed read
        // loses none: what it did not end comes back as Ended::Reset, and
        // its completion, read later, ends nothing.
        let _ = self.poll_cqs(&mut t, &mut |key, completed| reset.push((key, completed)));
        reset.extend(t.end_all(Ended::Reset));
        t.reset = reset;
        Ok(())
    }

    /// Attaches the (UD) QP to a multicast group:
    /// [`QueuePair::attach_mcast`]. [`destroy`](Self::destroy) and the
    /// drop detach every group first, as the kernel destroys no QP with one
    /// attached.
    #[doc(alias = "ibv_attach_mcast")]
    pub fn attach_mcast(&self, mgid: Gid, mlid: u16) -> Result<(), Error> {
        self.qp().attach_mcast(mgid, mlid)
    }

    /// Detaches the QP from a multicast group: [`QueuePair::detach_mcast`].
    #[doc(alias = "ibv_detach_mcast")]
    pub fn detach_mcast(&self, mgid: Gid, mlid: u16) -> Result<(), Error> {
        self.qp().detach_mcast(mgid, mlid)
    }

    /// The QP number the peer addresses.
    pub fn qp_num(&self) -> u32 {
        self.qp().qp_num()
    }

    /// RC, UC or UD.
    pub fn qp_type(&self) -> QpType {
        self.qp().qp_type()
    }

    /// How the QP's device connects: [`QueuePair::transport_type`].
    pub fn transport_type(&self) -> crate::command::TransportType {
        self.qp().transport_type()
    }

    /// The state the last successful modify set: [`QueuePair::state`].
    pub fn state(&self) -> QpState {
        self.qp().state()
    }

    /// Asks the kernel for the QP's state: [`QueuePair::refresh_state`].
    #[doc(alias = "ibv_query_qp")]
    pub fn refresh_state(&self) -> Result<QpState, Error> {
        self.qp().refresh_state()
    }

    /// Asks the kernel for the QP's attributes in `mask`:
    /// [`QueuePair::query`].
    #[doc(alias = "ibv_query_qp")]
    pub fn query(&self, mask: QpAttrMask) -> Result<QpAttr, Error> {
        self.qp().query(mask)
    }

    /// Learns the state the connection manager's `ESTABLISHED` left the QP
    /// in (on iWARP: RTS): [`QueuePair::established`]. Call it once the
    /// connection is up, before posting sends.
    pub fn established(&self) -> Result<QpState, Error> {
        self.qp().established()
    }

    /// The kernel's handle of the QP.
    pub fn handle(&self) -> u32 {
        self.qp().handle()
    }

    /// The context the QP belongs to.
    pub fn context(&self) -> &Context {
        self.qp().context()
    }

    /// The capacities the kernel gave.
    pub fn caps(&self) -> QpCaps {
        self.qp().caps()
    }

    /// Whether a request is outstanding, or handed back by a reset and not
    /// yet polled.
    #[cfg_attr(not(feature = "tokio"), allow(dead_code))]
    pub(crate) fn holds_requests(&self) -> bool {
        let t = self.lock();
        !(t.is_idle() && t.reset.is_empty())
    }

    /// The keys and caller's ids of the requests [`holds_requests`]
    /// counts: those handed back by a reset, then the sends and then the
    /// receives outstanding, each oldest first.
    ///
    /// [`holds_requests`]: Self::holds_requests
    #[cfg_attr(not(feature = "tokio"), allow(dead_code))]
    pub(crate) fn request_ids(&self) -> Vec<(u64, u64)> {
        let t = self.lock();
        let reset = t.reset.iter().map(|(key, c)| (*key, c.wr_id));
        let queued = t.sq.iter().chain(t.rq.iter()).map(|e| (e.key, e.wr_id));
        reset.chain(queued).collect()
    }

    /// Send and receive requests whose memory the device may still use.
    pub fn outstanding(&self) -> (usize, usize) {
        let t = self.lock();
        (t.sq.len(), t.rq.len())
    }

    /// The queue pair back, if no request is outstanding; otherwise `self`.
    // The Err hands the caller's resource back by value; the path is cold.
    #[allow(clippy::result_large_err)]
    pub fn into_inner(self) -> Result<QueuePair, Self> {
        if !self.holds_requests() {
            Ok(self.into_parts())
        } else {
            Err(self)
        }
    }

    /// The QP out of a value whose tables are empty; its completions go to
    /// plain polls again.
    fn into_parts(mut self) -> QueuePair {
        let qp = self.qp.take().expect("present until dropped");
        release_routing(qp.qp_num(), qp.cqs());
        qp
    }

    pub(crate) fn post_error(&self, op: Op, index: usize, source: PostError) -> Error {
        Error::Post {
            op,
            device: self.qp().context().inner.device.clone(),
            index,
            why: Box::new(source),
        }
    }

    fn refused<T>(&self, op: Op, index: usize, source: PostError, request: T) -> PostRefused<T> {
        PostRefused {
            request,
            error: self.post_error(op, index, source),
        }
    }
}

/// While armed, leaks the outstanding requests of the tables it holds when
/// dropped: an unwind through [`OwnedQp::destroy`] or the drop's destroy
/// never frees memory the device may still use.
struct LeakOnUnwind<'t, M>(Option<&'t mut Tables<M>>);

impl<'t, M> LeakOnUnwind<'t, M> {
    /// The tables back, the guard gone without leaking anything.
    fn disarm(mut self) -> &'t mut Tables<M> {
        self.0.take().expect("armed until disarmed")
    }
}

impl<M> Drop for LeakOnUnwind<'_, M> {
    fn drop(&mut self) {
        if let Some(t) = self.0.take() {
            t.leak_outstanding();
        }
    }
}

impl<M> Tables<M> {
    /// Whether no request is outstanding.
    fn is_idle(&self) -> bool {
        self.sq.is_empty() && self.rq.is_empty()
    }

    /// Takes every outstanding request out, sends then receives, each
    /// ended as `how` with its key: for when the device reaches none of
    /// them any more.
    fn end_all(&mut self, how: Ended) -> Vec<(u64, Completed<M>)> {
        let sends = self.sq.take_all().into_iter().map(|e| e.end(how, false));
        let recvs = self.rq.take_all().into_iter().map(|e| e.end(how, true));
        sends.chain(recvs).collect()
    }

    /// Leaks the outstanding requests (their memory is never freed): for
    /// when the device may still use it.
    fn leak_outstanding(&mut self) {
        std::mem::forget((self.sq.take_all(), self.rq.take_all()));
    }
}

/// Unregisters the reader of QP `qpn` on its CQs (`QueuePair::cqs`).
fn release_routing(qpn: u32, (send, recv): (CompletionQueue, CompletionQueue)) {
    send.release(qpn);
    recv.release(qpn);
}

/// Unregisters the reader of the destroyed QP `qpn` on its CQs and drops
/// its completions there, held or still in the ring: no reader is left for
/// them, and no more will come.
fn forget_routing(qpn: u32, (send, recv): (CompletionQueue, CompletionQueue)) {
    send.forget(qpn);
    if !recv.same_as(&send) {
        recv.forget(qpn);
    }
}

impl<M> Drop for OwnedQp<M> {
    fn drop(&mut self) {
        let Some(qp) = self.qp.take() else { return };
        let (qpn, cqs) = (qp.qp_num(), qp.cqs());
        let t = self
            .tables
            .get_mut()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if !qp.context().is_owned_by_this_process() {
            // A forked child: the QP and the device are the parent's. Send
            // nothing (the QP's own drop sends nothing either) and free none
            // of what the parent's device may use.
            release_routing(qpn, cqs);
            t.leak_outstanding();
            return;
        }
        let busy = !t.is_idle();
        // The outstanding requests are freed only below, once the QP is
        // destroyed. Should anything unwind before that, they are leaked,
        // never freed under the device.
        let leak_on_unwind = LeakOnUnwind(Some(t));
        // Stop the device first (ERR flushes the queues), then destroy the
        // QP (its multicast groups detached first): after DESTROY_QP the
        // device reaches none of the memory.
        if busy && qp.state() != QpState::Err {
            let _ = qp.modify(&QpAttr::new().state(QpState::Err));
        }
        let destroyed = qp.destroy();
        let t = leak_on_unwind.disarm();
        match destroyed {
            Ok(_) => {
                forget_routing(qpn, cqs);
                drop((
                    t.sq.take_all(),
                    t.rq.take_all(),
                    std::mem::take(&mut t.reset),
                ));
            }
            // The device may still use the memory: leak it, and the QP,
            // which stays in the kernel until the context is closed.
            // Counted, as the drop cannot report it
            // (`Context::abandoned_queue_pairs`); its completions go to
            // plain polls.
            Err(refused) => {
                t.leak_outstanding();
                release_routing(qpn, cqs);
                refused.qp.context().note_abandoned_queue_pair();
                std::mem::forget(refused);
            }
        }
    }
}

/// The work request naming `r` under `id`, over its one SGE (or inline bytes).
fn send_wr<'s, M>(
    r: &'s SendRequest<'s, M>,
    id: u64,
    sges: &'s [Sge],
    inline: &'s [&'s [u8]; 1],
) -> SendWr<'s> {
    SendWr {
        wr_id: id,
        op: r.op,
        flags: r.flags,
        payload: if r.local.is_some() {
            Payload::Sges(sges)
        } else {
            Payload::Inline(inline)
        },
        ud: r
            .ud
            .as_ref()
            .map(|ud| UdDest::new(&ud.ah, ud.remote_qpn, ud.remote_qkey)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The batch room is reused: a vector of work requests borrowing one
    /// batch's SGEs comes back empty in the same allocation, with no
    /// borrow left, on the toolchain that builds the crate.
    #[test]
    fn recycling_keeps_the_allocation() {
        let (kept, ptr, cap): (Vec<SendWr<'static>>, usize, usize) = {
            // Local to this block: the work requests borrow it.
            let sges = [Sge {
                addr: 0x1000,
                length: 64,
                lkey: 7,
            }];
            let mut wrs: Vec<SendWr<'_>> = Vec::with_capacity(8);
            wrs.push(SendWr::new(
                1,
                SendOp::Send { imm: None },
                Payload::Sges(&sges),
            ));
            let (ptr, cap) = (wrs.as_ptr() as usize, wrs.capacity());
            (recycle(wrs), ptr, cap)
        };
        assert!(kept.is_empty());
        assert_eq!((kept.as_ptr() as usize, kept.capacity()), (ptr, cap));
    }
}
