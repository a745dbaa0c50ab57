//! A completion queue with its completion task: the per-CQ dispatcher.
//!
//! The task loops: poll every async QP of the CQ (each QP's poll reads
//! only its own completions, see [`OwnedQp::poll`](crate::OwnedQp::poll)),
//! hand each completion to the future waiting for it, and when a poll
//! finds nothing, arm the CQ, poll once more (a completion that came
//! before the arm raises no event) and sleep on the completion channel in
//! the runtime's reactor. With a busy-poll budget it first polls that many
//! empty rounds, yielding to the runtime between them, before it arms.

use std::sync::{Arc, Weak};

use parking_lot::Mutex;
use tokio::sync::Notify;

use super::AsyncSource;
use crate::context::Context;
use crate::cq::{CompletionChannel, CompletionQueue};
use crate::error::{Errno, Error, Op};

/// How an [`AsyncCq`] is made.
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub struct AsyncCqOptions {
    /// The CQ's size (at least this many entries).
    pub cqe: u32,
    /// Empty polls before the task arms the CQ and sleeps.
    pub busy_polls: u32,
}

impl AsyncCqOptions {
    /// A CQ of at least `cqe` entries whose task sleeps as soon as a poll
    /// finds nothing (no busy polling).
    pub fn new(cqe: u32) -> Self {
        AsyncCqOptions { cqe, busy_polls: 0 }
    }

    /// Polls `polls` times in a row finding nothing (yielding to the
    /// runtime between them) before arming the CQ and sleeping: lower
    /// latency for a busier worker thread.
    pub fn busy_poll(mut self, polls: u32) -> Self {
        self.busy_polls = polls;
        self
    }
}

/// A completion queue served by a completion task, for [`AsyncQp`](super::AsyncQp)s.
///
/// [`new`](Self::new) creates a completion channel and a CQ reporting
/// there, and spawns the CQ's task on the current tokio runtime. Create
/// queue pairs with [`cq`](Self::cq) as their CQ, then wrap them in
/// [`AsyncQp`](super::AsyncQp). The task ends when this value and every
/// `AsyncQp` using the CQ are dropped.
///
/// Other (non-async) QPs may use the CQ too: their completions are held for
/// their own readers, as with any shared CQ.
#[doc(alias = "ibv_create_cq")]
pub struct AsyncCq {
    pub(super) handle: Arc<CqHandle>,
}

impl std::fmt::Debug for AsyncCq {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AsyncCq")
            .field("cq", &self.handle.cq)
            .finish_non_exhaustive()
    }
}

/// What the CQ's handles share; when the last goes, the task is told to
/// stop.
pub(super) struct CqHandle {
    pub(super) cq: CompletionQueue,
    pub(super) dispatch: Arc<Dispatch>,
}

impl Drop for CqHandle {
    fn drop(&mut self) {
        // Stores a permit if the task is not waiting yet: never lost.
        self.dispatch.stop.notify_one();
    }
}

/// An async QP as its CQ's task sees it.
pub(super) trait Drain: Send + Sync {
    /// Polls the QP's completions and hands each to its future; how many
    /// requests ended.
    fn drain(&self) -> Result<usize, Error>;

    /// The task has ended: every waiting future gets `errno`, and posts
    /// are refused from now on.
    fn end(&self, errno: Errno);
}

/// The task's state, shared with the QPs it serves.
pub(super) struct Dispatch {
    qps: Mutex<Vec<Weak<dyn Drain>>>,
    stop: Notify,
    /// Why the task ended, once it has.
    ended: Mutex<Option<Errno>>,
}

impl Dispatch {
    /// Locks the QP lists of every dispatch of `handles` (in address order,
    /// so two registrations never wait on each other), for a QP to join all
    /// of them or none: `Err(errno)` if one of their tasks has ended, and
    /// then nothing is registered anywhere.
    pub(super) fn lock_all(handles: &[Arc<CqHandle>]) -> Result<Registration<'_>, Errno> {
        let mut dispatches: Vec<&Dispatch> = handles.iter().map(|h| &*h.dispatch).collect();
        dispatches.sort_by_key(|d| std::ptr::from_ref(*d) as usize);
        dispatches.dedup_by_key(|d| std::ptr::from_ref(*d) as usize);
        let mut lists = Vec::with_capacity(dispatches.len());
        for d in dispatches {
            // The order of the two locks is the task's (`end_all`).
            let list = d.qps.lock();
            if let Some(errno) = *d.ended.lock() {
                return Err(errno);
            }
            lists.push(list);
        }
        Ok(Registration { lists })
    }

    /// Removes the QP whose shared state is `qp`. Once this returns, the
    /// task holds no strong reference to it: it upgrades its weak ones only
    /// under the lock taken here.
    pub(super) fn unregister(&self, qp: *const ()) {
        self.qps
            .lock()
            .retain(|w| !std::ptr::addr_eq(w.as_ptr(), qp));
    }

    /// One poll of every live QP, repeated while it finds anything; how
    /// many requests ended.
    fn drain_all(&self) -> Result<usize, Error> {
        let mut qps = self.qps.lock();
        qps.retain(|qp| qp.strong_count() > 0);
        let mut total = 0;
        for qp in qps.iter().filter_map(Weak::upgrade) {
            total += drain_dry(&*qp)?;
        }
        Ok(total)
    }

    fn end_all(&self, errno: Errno) {
        let qps = self.qps.lock();
        *self.ended.lock() = Some(errno);
        for qp in qps.iter().filter_map(Weak::upgrade) {
            qp.end(errno);
        }
    }
}

/// The QP lists of one or more dispatches, locked by
/// [`Dispatch::lock_all`]: no task among them can end before
/// [`add`](Self::add).
pub(super) struct Registration<'a> {
    lists: Vec<parking_lot::MutexGuard<'a, Vec<Weak<dyn Drain>>>>,
}

impl Registration<'_> {
    /// Registers `qp` with every dispatch locked, and unlocks them.
    pub(super) fn add(mut self, qp: &Weak<dyn Drain>) {
        for list in &mut self.lists {
            list.push(qp.clone());
        }
    }
}

/// Polls `qp` until a poll finds nothing; how many requests ended.
pub(super) fn drain_dry(qp: &dyn Drain) -> Result<usize, Error> {
    let mut total = 0;
    loop {
        let n = qp.drain()?;
        total += n;
        if n == 0 {
            return Ok(total);
        }
    }
}

/// Ends the dispatch when the task stops, however it stops (an error, the
/// last handle gone, or the runtime dropping the task).
struct EndOnExit {
    dispatch: Arc<Dispatch>,
    errno: Errno,
}

impl Drop for EndOnExit {
    fn drop(&mut self) {
        self.dispatch.end_all(self.errno);
    }
}

impl AsyncCq {
    /// A CQ of at least `cqe` entries, with no busy polling
    /// ([`with_options`](Self::with_options)).
    pub fn new(ctx: &Context, cqe: u32) -> Result<Self, Error> {
        Self::with_options(ctx, &AsyncCqOptions::new(cqe))
    }

    /// Creates a completion channel and a CQ reporting there, and spawns
    /// the CQ's task on the current runtime (outside one: `ENOSYS`).
    pub fn with_options(ctx: &Context, options: &AsyncCqOptions) -> Result<Self, Error> {
        let channel = ctx.create_comp_channel()?;
        let cq = ctx.create_cq(options.cqe, Some(&channel))?;
        let source = AsyncSource::new(channel)?;
        let dispatch = Arc::new(Dispatch {
            qps: Mutex::new(Vec::new()),
            stop: Notify::new(),
            ended: Mutex::new(None),
        });
        let task = Task {
            cq: cq.share(),
            channel: source,
            dispatch: dispatch.clone(),
            busy_polls: options.busy_polls,
        };
        tokio::spawn(task.run());
        Ok(AsyncCq {
            handle: Arc::new(CqHandle { cq, dispatch }),
        })
    }

    /// The CQ, to create queue pairs with. Poll it only for QPs that are
    /// not async: an async QP's completions go to its futures.
    pub fn cq(&self) -> &CompletionQueue {
        &self.handle.cq
    }
}

/// The completion task of one CQ.
struct Task {
    cq: CompletionQueue,
    channel: AsyncSource<CompletionChannel>,
    dispatch: Arc<Dispatch>,
    busy_polls: u32,
}

impl Task {
    /// The task's future. The guard is made here, outside the async
    /// body, so that it lives in the future from the start: a runtime
    /// that drops the task before ever polling it still ends the dispatch.
    fn run(self) -> impl std::future::Future<Output = ()> + Send + 'static {
        // Until the loop says otherwise: the runtime dropped the task.
        let exit = EndOnExit {
            dispatch: self.dispatch.clone(),
            errno: Errno::CANCELED,
        };
        async move {
            // Moves the whole guard in: a use of one field alone would
            // capture (copy) only that field and drop the guard here.
            let mut exit = exit;
            exit.errno = match self.serve().await {
                // The last handle is gone: no QP is left to tell.
                Ok(()) => Errno::CANCELED,
                Err(e) => e.errno().unwrap_or(Errno::IO),
            };
        }
    }

    async fn serve(&self) -> Result<(), Error> {
        loop {
            let mut idle = 0;
            loop {
                if self.dispatch.drain_all()? > 0 {
                    idle = 0;
                } else {
                    idle += 1;
                    if idle > self.busy_polls {
                        break;
                    }
                }
                // Let the futures just completed (and everyone else) run.
                tokio::task::yield_now().await;
            }
            self.cq.req_notify(false)?;
            // A completion that came before the arm raises no event.
            if self.dispatch.drain_all()? > 0 {
                tokio::task::yield_now().await;
                continue;
            }
            tokio::select! {
                biased;
                _ = self.dispatch.stop.notified() => return Ok(()),
                event = self.channel.next_event() => { event?; }
            }
            // Every event queued so far, acknowledged at once.
            let mut events = 1;
            while self.channel.try_next_event()?.is_some() {
                events += 1;
            }
            self.cq.ack_events(events)?;
        }
    }
}

/// The error a future or a post gets once its CQ's task has ended.
pub(super) fn task_ended(ctx: &Context, errno: Errno) -> Error {
    Error::os(Op::PollCq, &ctx.inner.device, errno)
}
