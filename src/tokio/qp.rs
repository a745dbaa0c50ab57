//! Owned posting whose futures resolve with the request's memory.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::oneshot;

use super::cq::{task_ended, AsyncCq, CqHandle, Drain};
use crate::command::{QpAttr, QpState, QpType};
use crate::context::Context;
use crate::error::{Errno, Error, Op};
use crate::post::{
    Completed, DeviceReadable, DeviceWritable, Local, OwnedQp, PostRefused, PostSendError,
    RecvRequest, SendRequest,
};
use crate::qp::QpCaps;
use crate::wr::{PostError, Remote};

/// A posted request's future failed, or the post was refused.
#[derive(thiserror::Error)]
pub enum AsyncPostError<T> {
    /// Refused before the device saw it: the request is handed back.
    #[error("{0}")]
    Refused(PostRefused<T>),
    /// Posted, but its completion will not come to this future: the
    /// doorbell failed after it was queued, or the CQ's task ended
    /// ([`error`](Self::error) says which). The request's memory stays
    /// with the QP until the device is done with it (its completion, a
    /// flush, or the QP's destruction), then it is dropped.
    #[error("{error}")]
    Posted {
        /// The caller's id of the request.
        wr_id: u64,
        /// Why.
        error: Error,
    },
}

impl<T> AsyncPostError<T> {
    /// The error, whichever way the request went.
    pub fn error(&self) -> &Error {
        match self {
            AsyncPostError::Refused(r) => &r.error,
            AsyncPostError::Posted { error, .. } => error,
        }
    }

    /// The request, if it was refused before the device saw it.
    pub fn into_request(self) -> Option<T> {
        match self {
            AsyncPostError::Refused(r) => Some(r.request),
            AsyncPostError::Posted { .. } => None,
        }
    }
}

impl<T> fmt::Debug for AsyncPostError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AsyncPostError::Refused(r) => f.debug_tuple("Refused").field(&r.error).finish(),
            AsyncPostError::Posted { wr_id, error } => f
                .debug_struct("Posted")
                .field("wr_id", wr_id)
                .field("error", error)
                .finish(),
        }
    }
}

impl<T> From<AsyncPostError<T>> for Error {
    fn from(e: AsyncPostError<T>) -> Error {
        match e {
            AsyncPostError::Refused(r) => r.error,
            AsyncPostError::Posted { error, .. } => error,
        }
    }
}

/// Why [`AsyncQp::new`] refused an [`OwnedQp`], and the QP back.
#[derive(thiserror::Error)]
#[error("{error}")]
pub struct NotAsync<M> {
    /// The queue pair, untouched.
    pub qp: OwnedQp<M>,
    /// Why.
    pub error: Error,
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

/// A posted request's future, as the CQ's task finds it.
struct Waiter<M> {
    /// The caller's id, given back in the completion.
    wr_id: u64,
    reply: oneshot::Sender<Reply<M>>,
}

struct Waiters<M> {
    /// The key the next request is posted under.
    next_key: u64,
    pending: HashMap<u64, Waiter<M>>,
    /// Set once a CQ's task has ended: posts are refused.
    ended: Option<Errno>,
}

/// What the QP's futures and its CQs' tasks share.
struct Shared<M> {
    qp: OwnedQp<M>,
    waiters: Mutex<Waiters<M>>,
    /// The tasks' room for completions, kept between polls.
    done: Mutex<Vec<Completed<M>>>,
}

impl<M: DeviceReadable + Send + Sync + 'static> Drain for Shared<M> {
    fn drain(&self) -> Result<usize, Error> {
        let mut done = self.done.lock();
        let n = self.qp.poll(&mut done)?;
        if n == 0 {
            return Ok(0);
        }
        let mut waiters = self.waiters.lock();
        for mut completed in done.drain(..) {
            if let Some(waiter) = waiters.pending.remove(&completed.wr_id) {
                completed.wr_id = waiter.wr_id;
                // A future dropped meanwhile: the request's memory is
                // dropped here, now that the device is done with it.
                let _ = waiter.reply.send(Ok(completed));
            }
        }
        Ok(n)
    }

    fn end(&self, errno: Errno) {
        let mut waiters = self.waiters.lock();
        waiters.ended = Some(errno);
        for (_, waiter) in waiters.pending.drain() {
            let _ = waiter.reply.send(Err(task_ended(self.qp.context(), errno)));
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
/// use uverbs::{AccessFlags, BufferMr, Local, OwnedQp, QpInit, Remote};
/// use uverbs::command::QpType;
/// # async fn f(ctx: &uverbs::Context, remote: Remote) -> Result<(), Box<dyn std::error::Error>> {
/// let pd = ctx.alloc_pd()?;
/// let cq = AsyncCq::new(ctx, 64)?;
/// let qp = pd.create_qp(&QpInit::new(QpType::Rc, cq.cq(), cq.cq()))?;
/// let qp = OwnedQp::new(qp).map_err(|e| e.error)?;
/// let qp: AsyncQp<BufferMr<Vec<u8>>> = AsyncQp::new(qp, &[&cq]).map_err(|e| e.error)?;
/// // ... connect it ...
/// let buf = pd.reg_buffer(vec![7u8; 4096], AccessFlags::LOCAL_WRITE)?;
/// let done = qp.write(Local::whole(buf), remote).await?;
/// assert_eq!(done.status(), Some(uverbs::WcStatus::Success));
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
    /// QP back, if one of them is missing or its task has ended.
    // The Err hands the caller's resource back by value; the path is cold.
    #[allow(clippy::result_large_err)]
    pub fn new(qp: OwnedQp<M>, cqs: &[&AsyncCq]) -> Result<Self, NotAsync<M>> {
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
        let shared = Arc::new(Shared {
            qp,
            waiters: Mutex::new(Waiters {
                next_key: 1,
                pending: HashMap::new(),
                ended: None,
            }),
            done: Mutex::new(Vec::new()),
        });
        let drain: Arc<dyn Drain> = shared.clone();
        for handle in &used {
            if let Err(errno) = handle.dispatch.register(Arc::downgrade(&drain)) {
                drop(drain);
                let error = task_ended(shared.qp.context(), errno);
                let qp = match Arc::try_unwrap(shared) {
                    Ok(s) => s.qp,
                    Err(_) => unreachable!("no task holds a QP it refused"),
                };
                return Err(NotAsync { qp, error });
            }
        }
        Ok(AsyncQp { shared, _cqs: used })
    }

    /// Posts `request` and waits for its completion: the request's memory
    /// comes back in the [`Completed`] (with the caller's `wr_id`), whatever
    /// its status. A refusal hands the request back untouched.
    #[doc(alias = "ibv_post_send")]
    pub async fn post_send<'a>(
        &self,
        mut request: SendRequest<'a, M>,
    ) -> Result<Completed<M>, AsyncPostError<SendRequest<'a, M>>> {
        let (key, wr_id, reply) = {
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
                return Err(AsyncPostError::Refused(PostRefused { request, error }));
            }
            let (key, reply) = Self::wait_under(&mut waiters, request.wr_id());
            let wr_id = request.replace_wr_id(key);
            // Posted under the lock: the task cannot look for the waiter
            // before it is there, nor after it was taken back.
            match self.shared.qp.post_send(request) {
                Ok(()) => (key, wr_id, reply),
                Err(PostSendError::Refused(mut refused)) => {
                    waiters.pending.remove(&key);
                    refused.request.replace_wr_id(wr_id);
                    return Err(AsyncPostError::Refused(refused));
                }
                Err(PostSendError::Queued { error, .. }) => {
                    // The device owns it; its completion finds no waiter.
                    waiters.pending.remove(&key);
                    return Err(AsyncPostError::Posted { wr_id, error });
                }
            }
        };
        self.outcome(key, wr_id, reply).await
    }

    /// Posts a receive into `local` and waits for the message: the memory
    /// comes back with the receive's completion.
    #[doc(alias = "ibv_post_recv")]
    pub async fn post_recv(
        &self,
        mut request: RecvRequest<M>,
    ) -> Result<Completed<M>, AsyncPostError<RecvRequest<M>>>
    where
        M: DeviceWritable,
    {
        let (key, wr_id, reply) = {
            let mut waiters = self.shared.waiters.lock();
            if let Some(errno) = waiters.ended {
                let error = task_ended(self.shared.qp.context(), errno);
                return Err(AsyncPostError::Refused(PostRefused { request, error }));
            }
            let (key, reply) = Self::wait_under(&mut waiters, request.wr_id());
            let wr_id = request.replace_wr_id(key);
            if let Err(mut refused) = self.shared.qp.post_recv(request) {
                waiters.pending.remove(&key);
                refused.request.replace_wr_id(wr_id);
                return Err(AsyncPostError::Refused(refused));
            }
            (key, wr_id, reply)
        };
        self.outcome(key, wr_id, reply).await
    }

    /// SEND of `local`'s bytes ([`post_send`](Self::post_send) of
    /// [`SendRequest::send`], `wr_id` 0).
    pub async fn send(
        &self,
        local: Local<M>,
    ) -> Result<Completed<M>, AsyncPostError<SendRequest<'static, M>>> {
        self.post_send(SendRequest::send(0, local)).await
    }

    /// RDMA WRITE of `local`'s bytes to `remote`.
    pub async fn write(
        &self,
        local: Local<M>,
        remote: Remote,
    ) -> Result<Completed<M>, AsyncPostError<SendRequest<'static, M>>> {
        self.post_send(SendRequest::write(0, local, remote)).await
    }

    /// RDMA READ of `remote` into `local`.
    pub async fn read(
        &self,
        local: Local<M>,
        remote: Remote,
    ) -> Result<Completed<M>, AsyncPostError<SendRequest<'static, M>>>
    where
        M: DeviceWritable,
    {
        self.post_send(SendRequest::read(0, local, remote)).await
    }

    /// A receive into `local` ([`post_recv`](Self::post_recv), `wr_id` 0).
    pub async fn recv(
        &self,
        local: Local<M>,
    ) -> Result<Completed<M>, AsyncPostError<RecvRequest<M>>>
    where
        M: DeviceWritable,
    {
        self.post_recv(RecvRequest::new(0, local)).await
    }

    /// A new key, and the waiter for the request posted under it.
    fn wait_under(waiters: &mut Waiters<M>, wr_id: u64) -> (u64, oneshot::Receiver<Reply<M>>) {
        let key = waiters.next_key;
        waiters.next_key += 1;
        let (reply, answer) = oneshot::channel();
        waiters.pending.insert(key, Waiter { wr_id, reply });
        (key, answer)
    }

    /// The completion the task hands over for the request posted under
    /// `key`. Dropping this future leaves the waiter in place: the task
    /// drops the memory when the completion comes.
    async fn outcome<T>(
        &self,
        key: u64,
        wr_id: u64,
        reply: oneshot::Receiver<Reply<M>>,
    ) -> Result<Completed<M>, AsyncPostError<T>> {
        match reply.await {
            Ok(Ok(completed)) => Ok(completed),
            Ok(Err(error)) => Err(AsyncPostError::Posted { wr_id, error }),
            // The waiter was dropped unanswered: only when the QP's tables
            // are gone, which a borrowed `self` rules out; kept total.
            Err(_) => {
                self.shared.waiters.lock().pending.remove(&key);
                let error = task_ended(self.shared.qp.context(), Errno::CANCELED);
                Err(AsyncPostError::Posted { wr_id, error })
            }
        }
    }
}

impl<M> AsyncQp<M> {
    /// Changes the QP's attributes and state ([`QueuePair::modify`](crate::QueuePair::modify)).
    /// Moving it to ERR completes every outstanding request with
    /// `WR_FLUSH_ERR`: their futures resolve with their memory.
    #[doc(alias = "ibv_modify_qp")]
    pub fn modify(&self, attr: &QpAttr) -> Result<(), Error> {
        self.shared.qp.modify(attr)
    }

    /// The QP number the peer addresses.
    pub fn qp_num(&self) -> u32 {
        self.shared.qp.qp_num()
    }

    /// RC, UC or UD.
    pub fn qp_type(&self) -> QpType {
        self.shared.qp.qp_type()
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
