//! Owned posting whose futures resolve with the request's memory.

// A refusal hands the caller's request back by value, as OwnedQp's do;
// the path is cold.
#![allow(clippy::result_large_err)]

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context as TaskContext, Poll};

use parking_lot::Mutex;
use tokio::sync::oneshot;

use super::cq::{drain_dry, task_ended, AsyncCq, CqHandle, Dispatch, Drain};
use crate::command::{QpAttr, QpState, QpType};
use crate::context::Context;
use crate::error::{Errno, Error, Op};
use crate::gid::Gid;
use crate::post::{
    Completed, DeviceReadable, DeviceWritable, Holds, Local, NotDestroyed, OwnedQp, PostRefused,
    PostSendError, RecvRequest, SendRequest,
};
use crate::qp::QpCaps;
use crate::wr::{PostError, Remote};

/// Why [`AsyncQp::new`] refused an [`OwnedQp`], and the QP back.
#[derive(thiserror::Error)]
#[error("{error}")]
#[non_exhaustive]
pub struct NotAsync<M> {
    /// The queue pair, untouched.
    pub qp: OwnedQp<M>,
    /// Why.
    pub error: Error,
}

crate::error::hands_back_with_error! {
    [M] NotAsync<M>, "the queue pair";
}

impl<M> fmt::Debug for NotAsync<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NotAsync")
            .field("qp", &self.qp)
            .field("error", &self.error)
            .finish()
    }
}

type Reply<M> = Result<Completed<M>, Error>;

struct Waiters<M> {
    /// Each waiting future's sender, under the key its request was posted
    /// under ([`OwnedQp::post_send_keyed`]): the QP's own ids, unique
    /// whatever ids the caller gives, so no request can resolve another's
    /// future.
    pending: HashMap<u64, oneshot::Sender<Reply<M>>>,
    /// Set once a CQ's task has ended: posts are refused.
    ended: Option<Errno>,
}

impl<M> Waiters<M> {
    fn new() -> Self {
        Waiters {
            pending: HashMap::new(),
            ended: None,
        }
    }

    /// A waiter for the request posted under `key`, and its future's end.
    fn wait_for(&mut self, key: u64) -> oneshot::Receiver<Reply<M>> {
        let (reply, answer) = oneshot::channel();
        self.pending.insert(key, reply);
        answer
    }

    /// Resolves the future of the request posted under `key`, which ended
    /// as `completed`. A future dropped meanwhile (or a request queued by a
    /// failed doorbell, which has none): the request's memory is dropped
    /// here, now that the device is done with it.
    fn resolve(&mut self, key: u64, completed: Completed<M>) {
        if let Some(reply) = self.pending.remove(&key) {
            let _ = reply.send(Ok(completed));
        }
    }
}

/// What the QP's futures and its CQs' tasks share.
struct Shared<M> {
    qp: OwnedQp<M>,
    waiters: Mutex<Waiters<M>>,
    /// The tasks' room for completions (with their keys), kept between
    /// polls.
    done: Mutex<Vec<(u64, Completed<M>)>>,
}

impl<M> Shared<M> {
    fn new(qp: OwnedQp<M>, waiters: Waiters<M>) -> Arc<Self> {
        Arc::new(Shared {
            qp,
            waiters: Mutex::new(waiters),
            done: Mutex::new(Vec::new()),
        })
    }
}

impl<M: DeviceReadable + Send + Sync + 'static> Drain for Shared<M> {
    fn drain(&self) -> Result<usize, Error> {
        let mut done = self.done.lock();
        let n = self
            .qp
            .poll_each(|key, completed| done.push((key, completed)))?;
        if n == 0 {
            return Ok(0);
        }
        let mut waiters = self.waiters.lock();
        for (key, completed) in done.drain(..) {
            waiters.resolve(key, completed);
        }
        Ok(n)
    }

    fn end(&self, errno: Errno) {
        let mut waiters = self.waiters.lock();
        waiters.ended = Some(errno);
        for (_, reply) in waiters.pending.drain() {
            let _ = reply.send(Err(task_ended(self.qp.context(), errno)));
        }
    }
}

/// A queue pair whose requests are futures: each resolves with the
/// request's memory and its completion ([`Completed`]) once the device is
/// done with it.
///
/// Built from an [`OwnedQp`] whose CQs are [`AsyncCq`]s; the CQs' tasks
/// route each completion to its future. Many tasks may post on one
/// `AsyncQp` at once (share it in an `Arc`), and many `AsyncQp`s may share
/// one CQ.
///
/// **Cancellation.** Dropping a future before its completion never frees
/// memory the device may still use: the request's memory stays with the
/// QP until its completion comes (then it is dropped), a flush (modify the
/// QP to ERR: every outstanding request completes with `WR_FLUSH_ERR`), or
/// the QP's destruction when the `AsyncQp` is dropped (ERR, then
/// `DESTROY_QP`, then the memory).
///
/// Every awaited request is signalled: an unsignalled one has no
/// completion of its own to resolve its future, and is refused.
///
/// ```no_run
/// use uverbs::tokio::{AsyncCq, AsyncQp};
/// use uverbs::post::Local;
/// use uverbs::wr::Remote;
/// use uverbs::{AccessFlags, BufferMr, OwnedQp, QpInit};
/// use uverbs::command::QpType;
/// # async fn f(ctx: &uverbs::Context, remote: Remote) -> Result<(), Box<dyn std::error::Error>> {
/// let pd = ctx.alloc_pd()?;
/// let cq = AsyncCq::new(ctx, 64)?;
/// let qp = pd.create_qp(&QpInit::new(QpType::Rc, cq.cq(), cq.cq()))?;
/// let qp = OwnedQp::new(qp)?;
/// let qp: AsyncQp<BufferMr<Vec<u8>>> = AsyncQp::new(qp, &[&cq])?;
/// // ... connect it ...
/// let buf = pd.reg_buffer(vec![7u8; 4096], AccessFlags::LOCAL_WRITE)?;
/// let done = qp.write(Local::whole(buf), remote)?.await?;
/// assert_eq!(done.status(), Some(uverbs::wr::WcStatus::Success));
/// let buf = done.into_memory().expect("the buffer comes back");
/// # drop(buf); Ok(()) }
/// ```
pub struct AsyncQp<M> {
    shared: Arc<Shared<M>>,
    /// Keeps the CQs' tasks running while the QP lives.
    _cqs: Vec<Arc<CqHandle>>,
}

impl<M> fmt::Debug for AsyncQp<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AsyncQp")
            .field("qp", &self.shared.qp)
            .field("waiting", &self.shared.waiters.lock().pending.len())
            .finish()
    }
}

impl<M: DeviceReadable + Send + Sync + 'static> AsyncQp<M> {
    /// Serves `qp` through the tasks of `cqs`, which must hold the QP's
    /// send CQ and its receive CQ (the same one, or two). Refused, with the
    /// QP back ([`NotAsync`]), if one of them is missing or its task has
    /// ended, and ([`Error::InvalidInput`]) if `qp` has requests
    /// outstanding: no future would wait for them, and their memory would
    /// be lost with their completions. Take such a QP with
    /// [`adopt`](Self::adopt), which gives each of them a future.
    pub fn new(qp: OwnedQp<M>, cqs: &[&AsyncCq]) -> Result<Self, NotAsync<M>> {
        if qp.holds_requests() {
            let error = Error::input(
                Op::PostSend,
                &qp.context().inner.device,
                "the OwnedQp has requests outstanding: AsyncQp::adopt gives each a future",
            );
            return Err(NotAsync { qp, error });
        }
        Self::serve(qp, cqs, Waiters::new())
    }

    /// [`new`](Self::new) for a QP with requests outstanding (receives
    /// posted before connecting, say): each of them gets a future, oldest
    /// first, sends before receives, so every one resolves with its own
    /// memory and its own completion ([`CompletionFuture::wr_id`] tells
    /// them apart). Refused as `new` is, but for the outstanding requests.
    ///
    /// ```no_run
    /// use uverbs::tokio::{AsyncCq, AsyncQp};
    /// use uverbs::post::{Local, RecvRequest};
    /// use uverbs::{AccessFlags, BufferMr, OwnedQp};
    /// # async fn f(pd: &uverbs::ProtectionDomain, cq: &AsyncCq, qp: OwnedQp<BufferMr<Vec<u8>>>) -> Result<(), Box<dyn std::error::Error>> {
    /// // A receive posted on the OwnedQp before it is wrapped ...
    /// let buf = pd.reg_buffer(vec![0u8; 4096], AccessFlags::LOCAL_WRITE)?;
    /// qp.post_recv(RecvRequest::new(1, Local::whole(buf)))?;
    /// let (qp, earlier) = AsyncQp::adopt(qp, &[cq])?;
    /// // ... resolves with its own buffer, whatever ids later requests use.
    /// let message = earlier.into_iter().next().expect("one future").await?;
    /// assert_eq!(message.wr_id, 1);
    /// # drop(qp); Ok(()) }
    /// ```
    #[allow(clippy::type_complexity)]
    pub fn adopt(
        qp: OwnedQp<M>,
        cqs: &[&AsyncCq],
    ) -> Result<(Self, Vec<CompletionFuture<M>>), NotAsync<M>> {
        let device = qp.context().inner.device.clone();
        let mut waiters = Waiters::new();
        let futures = qp
            .request_ids()
            .into_iter()
            .map(|(key, wr_id)| CompletionFuture {
                wr_id,
                reply: waiters.wait_for(key),
                device: device.clone(),
            })
            .collect();
        let qp = Self::serve(qp, cqs, waiters)?;
        Ok((qp, futures))
    }

    /// Registers `qp`, with `waiters`, with the tasks of the CQs of `cqs`
    /// it uses: with all of them or, refused, with none.
    fn serve(qp: OwnedQp<M>, cqs: &[&AsyncCq], waiters: Waiters<M>) -> Result<Self, NotAsync<M>> {
        let mut used = Vec::new();
        let mut missing = false;
        for cq in qp.cqs() {
            match cqs.iter().find(|a| a.cq().same_as(&cq)) {
                Some(a) => used.push(a.handle.clone()),
                None => missing = true,
            }
        }
        if missing {
            let error = Error::input(
                Op::PostSend,
                &qp.context().inner.device,
                "an AsyncQp's CQs must be AsyncCqs given to AsyncQp::new",
            );
            return Err(NotAsync { qp, error });
        }
        // No task among them can end until the QP is in every list: a
        // refusal hands the QP back before anything holds it.
        let registration = match Dispatch::lock_all(&used) {
            Ok(registration) => registration,
            Err(errno) => {
                let error = task_ended(qp.context(), errno);
                return Err(NotAsync { qp, error });
            }
        };
        let shared = Shared::new(qp, waiters);
        let drain: Arc<dyn Drain> = shared.clone();
        registration.add(&Arc::downgrade(&drain));
        // Completions that came before the tasks knew of the QP (their
        // events may have passed): their futures resolve now.
        if let Err(e) = drain_dry(&*drain) {
            // As the task would: its futures fail, its posts are refused.
            drain.end(e.errno().unwrap_or(Errno::IO));
        }
        Ok(AsyncQp { shared, _cqs: used })
    }

    /// Destroys the QP (`DESTROY_QP`, through [`OwnedQp::destroy`]) and
    /// resolves every waiting future with its request's memory: a request
    /// whose completion had come, with it; every other one with
    /// [`Ended::Destroyed`](crate::post::Ended::Destroyed), its memory out of the
    /// device's reach. The memory of a request whose future was dropped is
    /// dropped here.
    ///
    /// This ends requests that will never complete, such as a send siw
    /// leaves in its ring once its stream has closed (see
    /// [`modify`](Self::modify)). Dropping the `AsyncQp` destroys the QP
    /// too, but its waiting futures then fail with `ECANCELED` and their
    /// memory is freed.
    ///
    /// A failure ([`NotDestroyed`]: the poll failed, or the kernel refused
    /// the destroy) hands the `AsyncQp` back, served by its CQs' tasks as
    /// before; the futures of requests found complete meanwhile have
    /// resolved.
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # use uverbs::{BufferMr, post::Local};
    /// # async fn f(qp: uverbs::tokio::AsyncQp<BufferMr<Vec<u8>>>, buf: BufferMr<Vec<u8>>) -> Result<(), Box<dyn std::error::Error>> {
    /// let mut sent = qp.send(Local::whole(buf))?;
    /// let done = match tokio::time::timeout(Duration::from_secs(1), &mut sent).await {
    ///     Ok(done) => done?,
    ///     // Never completed (siw after its stream closed): the destroy ends it.
    ///     Err(_) => {
    ///         qp.destroy()?;
    ///         sent.await?
    ///     }
    /// };
    /// let buf = done.into_memory().expect("the buffer comes back");
    /// # drop(buf); Ok(()) }
    /// ```
    #[doc(alias = "ibv_destroy_qp")]
    pub fn destroy(self) -> Result<(), NotDestroyed<Self>> {
        let AsyncQp { shared, _cqs: cqs } = self;
        // Out of every task's list first: then no task holds the shared
        // state, and it can be taken apart.
        let key = Arc::as_ptr(&shared).cast::<()>();
        for cq in &cqs {
            cq.dispatch.unregister(key);
        }
        let Shared { qp, waiters, .. } = match Arc::try_unwrap(shared) {
            Ok(s) => s,
            // `unregister` returned: no task holds a strong reference (they
            // take one only under the lock it took), and no future holds any.
            Err(_) => unreachable!("only the AsyncQp holds its state once unregistered"),
        };
        let mut waiters = waiters.into_inner();
        let destroyed = qp.destroy_each(|key, completed| waiters.resolve(key, completed));
        let refused = match destroyed {
            // No waiter is left: each request came back above.
            Ok(()) => return Ok(()),
            Err(refused) => refused,
        };
        let shared = Shared::new(refused.qp, waiters);
        let drain: Arc<dyn Drain> = shared.clone();
        match Dispatch::lock_all(&cqs) {
            Ok(registration) => registration.add(&Arc::downgrade(&drain)),
            Err(errno) => drain.end(errno),
        }
        // Completions that came while no task served the QP (a task
        // draining another QP on the same CQ may have routed them here):
        // their futures resolve now, not at the CQ's next event.
        if let Err(e) = drain_dry(&*drain) {
            // As the task would: its futures fail, its posts are refused.
            drain.end(e.errno().unwrap_or(Errno::IO));
        }
        Err(NotDestroyed {
            qp: AsyncQp { shared, _cqs: cqs },
            error: refused.error,
        })
    }

    /// Changes the QP's attributes and state ([`QueuePair::modify`](crate::QueuePair::modify)).
    /// Moving it to ERR completes every outstanding request with
    /// `WR_FLUSH_ERR`: their futures resolve with their memory. Except on
    /// siw, for a send request posted after the kernel had moved the QP to
    /// ERR itself (its stream closed): siw leaves it in the ring, never
    /// completed ([`OwnedQp::flush`]): [`destroy`](Self::destroy) resolves
    /// its future with its memory (dropping the `AsyncQp` fails it with
    /// `ECANCELED`, the memory dropped after the QP's destruction).
    ///
    /// Moving it to RESET on rxe, which empties both queues with no
    /// completion ([`OwnedQp::modify`]), resolves every waiting future in
    /// this call: with its completion if it was in the CQ already, else
    /// [`Ended::Reset`](crate::post::Ended::Reset), the memory back either way.
    /// siw keeps its rings across RESET: there the futures wait as before.
    #[doc(alias = "ibv_modify_qp")]
    pub fn modify(&self, attr: &QpAttr) -> Result<(), Error> {
        self.shared.qp.modify(attr)?;
        if attr.target_state() == Some(QpState::Reset) {
            // The requests the reset handed back reach their futures now,
            // not at the CQ's next event (a reset raises none).
            if let Err(e) = drain_dry(&*self.shared) {
                self.shared.end(e.errno().unwrap_or(Errno::IO));
                return Err(e);
            }
        }
        Ok(())
    }

    /// Posts `request` now and returns the future of its completion: the
    /// request's memory comes back in the [`Completed`] (with the caller's
    /// `wr_id`), whatever its status. A refusal hands the request back
    /// untouched. The post happens in this call, not at the first poll, so
    /// the order of posts is the order of calls (a receive posted before the
    /// send that answers it, whatever the futures' order of polling).
    #[doc(alias = "ibv_post_send")]
    pub fn post_send<'a>(
        &self,
        request: SendRequest<'a, M>,
    ) -> Result<CompletionFuture<M>, PostSendError<SendRequest<'a, M>>> {
        let mut waiters = self.shared.waiters.lock();
        let refusal = if !request.is_signalled() {
            Some(self.shared.qp.post_error(
                Op::PostSend,
                0,
                PostError::MustBeSignalled {
                    opcode: request.op_name(),
                    why: "an awaited request ends with its own completion",
                },
            ))
        } else {
            waiters
                .ended
                .map(|errno| task_ended(self.shared.qp.context(), errno))
        };
        if let Some(error) = refusal {
            return Err(PostSendError::Refused(PostRefused { request, error }));
        }
        let wr_id = request.wr_id();
        // Posted under the lock: the task cannot look for the waiter before
        // it is there. A request queued by a failed doorbell gets none: the
        // device owns it, and its completion finds no waiter.
        let key = self.shared.qp.post_send_keyed(request)?;
        Ok(self.future(wr_id, waiters.wait_for(key)))
    }

    /// Posts a receive now and returns the future of its message: the
    /// memory comes back with the receive's completion.
    #[doc(alias = "ibv_post_recv")]
    pub fn post_recv(
        &self,
        request: RecvRequest<M>,
    ) -> Result<CompletionFuture<M>, PostSendError<RecvRequest<M>>> {
        let mut waiters = self.shared.waiters.lock();
        if let Some(errno) = waiters.ended {
            let error = task_ended(self.shared.qp.context(), errno);
            return Err(PostSendError::Refused(PostRefused { request, error }));
        }
        let wr_id = request.wr_id();
        let key = self
            .shared
            .qp
            .post_recv_keyed(request)
            .map_err(PostSendError::Refused)?;
        Ok(self.future(wr_id, waiters.wait_for(key)))
    }

    /// SEND of `local`'s bytes ([`post_send`](Self::post_send) of
    /// [`SendRequest::send`], `wr_id` 0).
    pub fn send<R: DeviceReadable>(
        &self,
        local: Local<R>,
    ) -> Result<CompletionFuture<M>, PostSendError<SendRequest<'static, M>>>
    where
        M: Holds<R>,
    {
        self.post_send(SendRequest::send(0, local))
    }

    /// RDMA WRITE of `local`'s bytes to `remote`.
    pub fn write<R: DeviceReadable>(
        &self,
        local: Local<R>,
        remote: Remote,
    ) -> Result<CompletionFuture<M>, PostSendError<SendRequest<'static, M>>>
    where
        M: Holds<R>,
    {
        self.post_send(SendRequest::write(0, local, remote))
    }

    /// RDMA READ of `remote` into `local`.
    pub fn read<W: DeviceWritable>(
        &self,
        local: Local<W>,
        remote: Remote,
    ) -> Result<CompletionFuture<M>, PostSendError<SendRequest<'static, M>>>
    where
        M: Holds<W>,
    {
        self.post_send(SendRequest::read(0, local, remote))
    }

    /// A receive into `local` ([`post_recv`](Self::post_recv), `wr_id` 0).
    pub fn recv<W: DeviceWritable>(
        &self,
        local: Local<W>,
    ) -> Result<CompletionFuture<M>, PostSendError<RecvRequest<M>>>
    where
        M: Holds<W>,
    {
        self.post_recv(RecvRequest::new(0, local))
    }

    fn future(&self, wr_id: u64, reply: oneshot::Receiver<Reply<M>>) -> CompletionFuture<M> {
        CompletionFuture {
            wr_id,
            reply,
            device: self.shared.qp.context().inner.device.clone(),
        }
    }
}

/// The completion of a posted request: resolves with the request's memory
/// ([`Completed`]) once the device is done with it, or with an error if
/// the CQ's task ended first (the memory then stays with the QP).
///
/// Dropping it cancels only the wait: the request stays posted, its memory
/// with the QP until its completion comes (then it is dropped there), a
/// flush, or the QP's destruction.
#[must_use = "the request is posted; dropping this only gives up its memory to the QP"]
pub struct CompletionFuture<M> {
    wr_id: u64,
    reply: oneshot::Receiver<Reply<M>>,
    device: Arc<str>,
}

impl<M> CompletionFuture<M> {
    /// The caller's id of the request.
    pub fn wr_id(&self) -> u64 {
        self.wr_id
    }
}

impl<M> fmt::Debug for CompletionFuture<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CompletionFuture")
            .field("wr_id", &self.wr_id)
            .finish_non_exhaustive()
    }
}

impl<M> Future for CompletionFuture<M> {
    type Output = Result<Completed<M>, Error>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<Self::Output> {
        match Pin::new(&mut self.reply).poll(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Ok(reply)) => Poll::Ready(reply),
            // The waiter was dropped unanswered: the QP's tables are gone
            // (the AsyncQp was dropped: its QP destroyed, the memory freed
            // after the destroy).
            Poll::Ready(Err(_)) => {
                Poll::Ready(Err(Error::os(Op::PollCq, &self.device, Errno::CANCELED)))
            }
        }
    }
}

impl<M> AsyncQp<M> {
    /// Attaches the (UD) QP to a multicast group
    /// ([`OwnedQp::attach_mcast`]); [`destroy`](Self::destroy) and the
    /// drop detach it first.
    #[doc(alias = "ibv_attach_mcast")]
    pub fn attach_mcast(&self, mgid: Gid, mlid: u16) -> Result<(), Error> {
        self.shared.qp.attach_mcast(mgid, mlid)
    }

    /// Detaches the QP from a multicast group ([`OwnedQp::detach_mcast`]).
    #[doc(alias = "ibv_detach_mcast")]
    pub fn detach_mcast(&self, mgid: Gid, mlid: u16) -> Result<(), Error> {
        self.shared.qp.detach_mcast(mgid, mlid)
    }

    /// The QP number the peer addresses.
    pub fn qp_num(&self) -> u32 {
        self.shared.qp.qp_num()
    }

    /// RC, UC or UD.
    pub fn qp_type(&self) -> QpType {
        self.shared.qp.qp_type()
    }

    /// How the QP's device connects: [`QueuePair::transport_type`](crate::QueuePair::transport_type).
    pub fn transport_type(&self) -> crate::command::TransportType {
        self.shared.qp.transport_type()
    }

    /// The state the last successful modify set.
    pub fn state(&self) -> QpState {
        self.shared.qp.state()
    }

    /// Learns the state the connection manager left the QP in
    /// ([`OwnedQp::established`]).
    pub fn established(&self) -> Result<QpState, Error> {
        self.shared.qp.established()
    }

    /// The context the QP belongs to.
    pub fn context(&self) -> &Context {
        self.shared.qp.context()
    }

    /// The capacities the kernel gave.
    pub fn caps(&self) -> QpCaps {
        self.shared.qp.caps()
    }

    /// Send and receive requests whose memory the device may still use
    /// (awaited or not).
    pub fn outstanding(&self) -> (usize, usize) {
        self.shared.qp.outstanding()
    }

    /// Futures waiting for a completion (dropped ones whose request is
    /// still outstanding included).
    pub fn waiting(&self) -> usize {
        self.shared.waiters.lock().pending.len()
    }
}
