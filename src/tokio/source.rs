//! Any [`EventSource`] under tokio: its descriptor registered with the
//! runtime's reactor, read when the reactor says it is readable.

use std::fmt;
use std::mem::ManuallyDrop;
use std::pin::Pin;
use std::task::{Context as TaskContext, Poll};

use tokio::io::unix::AsyncFd;

use crate::error::{Errno, Error};
use crate::event_fd::EventSource;

/// An event source ([`CompletionChannel`](crate::cq::CompletionChannel),
/// [`AsyncEvents`](crate::device::AsyncEvents) or
/// [`EventChannel`](crate::cm::EventChannel)) whose events are awaited:
/// [`next_event`](Self::next_event), or the [`Stream`](futures_core::Stream)
/// of them.
///
/// Waiting never blocks a thread: the descriptor (non-blocking from its
/// creation) is registered with the runtime, and `next_event` reads only
/// when the runtime reports it readable. Dropping a pending `next_event` is
/// harmless: nothing was read, the event stays queued for the next call.
///
/// ```no_run
/// # async fn f(ctx: uverbs::Context) -> Result<(), uverbs::Error> {
/// use uverbs::tokio::AsyncSource;
/// let events = AsyncSource::new(ctx.async_events()?)?;
/// loop {
///     let event = events.next_event().await?;
///     println!("{:?} about {:?}", event.kind, event.element);
/// }
/// # }
/// ```
pub struct AsyncSource<S: EventSource> {
    /// Dropped (deregistered) only in the process that registered it: see
    /// the `Drop` impl.
    fd: ManuallyDrop<AsyncFd<S>>,
}

/// In a forked child the runtime's epoll instance is the parent's (the
/// child inherited the descriptor), and deregistering would remove the
/// parent's registration from it: the parent would never be woken again.
/// There the registration and the source are leaked instead (the child's
/// copies; the parent's objects are untouched).
impl<S: EventSource> Drop for AsyncSource<S> {
    fn drop(&mut self) {
        if self.fd.get_ref().owned_here() {
            // SAFETY: `fd` is not used again: this is the value's drop.
            unsafe { ManuallyDrop::drop(&mut self.fd) }
        }
    }
}

impl<S: EventSource> fmt::Debug for AsyncSource<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use std::os::fd::AsRawFd;
        f.debug_struct("AsyncSource")
            .field("fd", &self.fd.as_raw_fd())
            .finish()
    }
}

/// The error of a failed reactor call, in the source's terms.
pub(crate) fn reactor_error<S: EventSource>(source: &S, e: &std::io::Error) -> Error {
    source.wait_error(Errno::from_io_error(e).unwrap_or(Errno::IO))
}

impl<S: EventSource> AsyncSource<S> {
    /// Registers `source` with the current tokio runtime. Outside one the
    /// answer is `ENOSYS` (naming the source's operation), and if the
    /// reactor refuses the descriptor, its errno.
    pub fn new(source: S) -> Result<Self, Error> {
        if tokio::runtime::Handle::try_current().is_err() {
            // Registering outside a runtime would panic.
            return Err(source.wait_error(Errno::NOSYS));
        }
        // SAFETY: the descriptor of every EventSource (a sealed trait, this
        // crate's three sources only) is an OwnedFd the source holds
        // unchanged for its whole life, so it stays open and names the same
        // file while the AsyncFd owns the source.
        match unsafe { AsyncFd::register_with_interest(source, tokio::io::Interest::READABLE) } {
            Ok(fd) => Ok(AsyncSource {
                fd: ManuallyDrop::new(fd),
            }),
            Err(e) => {
                let (source, io) = e.into_parts();
                Err(reactor_error(&source, &io))
            }
        }
    }

    /// The source.
    pub fn get_ref(&self) -> &S {
        self.fd.get_ref()
    }

    /// The next event, waiting (without blocking the thread) until one is
    /// queued. Cancel-safe: dropping the future reads nothing.
    pub async fn next_event(&self) -> Result<S::Event, Error> {
        std::future::poll_fn(|cx| self.poll_next_event(cx)).await
    }

    /// The next event if one is queued, else `Ok(None)` at once.
    pub fn try_next_event(&self) -> Result<Option<S::Event>, Error> {
        self.fd.get_ref().try_get_event()
    }

    /// [`next_event`](Self::next_event) as a poll function (what the
    /// [`Stream`](futures_core::Stream) impl calls).
    pub fn poll_next_event(&self, cx: &mut TaskContext<'_>) -> Poll<Result<S::Event, Error>> {
        loop {
            let mut ready = match self.fd.poll_read_ready(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Err(e)) => {
                    return Poll::Ready(Err(reactor_error(self.fd.get_ref(), &e)))
                }
                Poll::Ready(Ok(ready)) => ready,
            };
            match ready.get_inner().try_get_event() {
                Ok(Some(event)) => return Poll::Ready(Ok(event)),
                Ok(None) => ready.clear_ready(),
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
    }
}

/// Every event, in order; never ends (an error is an item: the source may
/// still deliver after it).
impl<S: EventSource> futures_core::Stream for AsyncSource<S> {
    type Item = Result<S::Event, Error>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<Option<Self::Item>> {
        self.poll_next_event(cx).map(Some)
    }
}
