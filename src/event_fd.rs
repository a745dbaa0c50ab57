//! The one shape of every event source (completion channel, async events,
//! cm event channel): a non-blocking, close-on-exec descriptor from
//! creation, read by a `try_get_event` that answers `None` at once when
//! nothing is queued; the blocking `get_event` and `wait_event(timeout)` are
//! that read plus [`wait_readable`], so epoll or tokio's `AsyncFd` can wait
//! on the same descriptor instead.

use std::os::fd::{AsFd, AsRawFd};
use std::time::{Duration, Instant};

use rustix::event::{PollFd, PollFlags, Timespec};
use rustix::io::Errno;
use zerocopy::{FromBytes, IntoBytes};

/// A source of events on a non-blocking descriptor: the
/// [`CompletionChannel`](crate::cq::CompletionChannel), the context's
/// [`AsyncEvents`](crate::device::AsyncEvents) and the connection manager's
/// [`EventChannel`](crate::cm::EventChannel). Each also has an inherent
/// `try_get_event`, `get_event` and `wait_event`; the trait is what lets one
/// event loop (epoll, or the `tokio` feature's `AsyncSource`) serve all
/// three. Sealed: implemented by this crate only, by types whose descriptor
/// is one the value owns, unchanged for its whole life (what the
/// `tokio` feature's registration with the reactor relies on).
pub trait EventSource: AsFd + AsRawFd + sealed::Sealed {
    /// What one read yields.
    type Event;

    /// The next event if one is queued, else `Ok(None)` at once.
    fn try_get_event(&self) -> Result<Option<Self::Event>, crate::Error>;

    /// The error to report when waiting on the descriptor fails with
    /// `errno` (naming the source's operation and device).
    fn wait_error(&self, errno: Errno) -> crate::Error;

    /// False in a child forked since the source was made: there its
    /// descriptor (and any epoll registration of it) is the parent's.
    #[doc(hidden)]
    fn owned_here(&self) -> bool;
}

pub(crate) mod sealed {
    pub trait Sealed {}
}

/// Makes `fd` non-blocking and close-on-exec (the kernel's uverbs files are
/// created `O_CLOEXEC` already; a descriptor from elsewhere may not be).
pub(crate) fn make_nonblocking(fd: impl AsFd) -> Result<(), Errno> {
    let flags = rustix::fs::fcntl_getfl(&fd)?;
    if !flags.contains(rustix::fs::OFlags::NONBLOCK) {
        rustix::fs::fcntl_setfl(&fd, flags | rustix::fs::OFlags::NONBLOCK)?;
    }
    let fd_flags = rustix::io::fcntl_getfd(&fd)?;
    if !fd_flags.contains(rustix::io::FdFlags::CLOEXEC) {
        rustix::io::fcntl_setfd(&fd, fd_flags | rustix::io::FdFlags::CLOEXEC)?;
    }
    Ok(())
}

/// Waits until `fd` is readable or `timeout` has passed (`None`: no
/// limit); true when readable. A signal does not end the wait early: the
/// poll is resumed with the time left.
pub(crate) fn wait_readable(fd: impl AsFd, timeout: Option<Duration>) -> Result<bool, Errno> {
    let deadline = timeout.map(|t| Instant::now() + t);
    loop {
        let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
        let ts = left.map(|l| Timespec {
            tv_sec: l.as_secs().try_into().unwrap_or(i64::MAX),
            tv_nsec: l.subsec_nanos().into(),
        });
        let mut fds = [PollFd::new(&fd, PollFlags::IN)];
        match rustix::event::poll(&mut fds, ts.as_ref()) {
            Ok(0) => return Ok(false),
            // Readable, or an error or hang-up the next read reports.
            Ok(_) => return Ok(true),
            Err(Errno::INTR) => continue,
            Err(e) => return Err(e),
        }
    }
}

/// `get_event` of any source: `try_get` until it answers, waiting for the
/// descriptor between tries; `None` when `timeout` passes first.
pub(crate) fn wait_for<T, E>(
    fd: impl AsFd,
    timeout: Option<Duration>,
    mut try_get: impl FnMut() -> Result<Option<T>, E>,
    fail: impl Fn(Errno) -> E,
) -> Result<Option<T>, E> {
    let deadline = timeout.map(|t| Instant::now() + t);
    loop {
        if let Some(event) = try_get()? {
            return Ok(Some(event));
        }
        let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
        if left == Some(Duration::ZERO) {
            return Ok(None);
        }
        // Readable is a hint: another reader may take the event first, so
        // the loop tries again rather than assuming one is there.
        if !wait_readable(&fd, left).map_err(&fail)? {
            return Ok(None);
        }
    }
}

/// `get_event` of every source: [`wait_for`] its descriptor with no
/// deadline, reading with its `try_get_event`.
pub(crate) fn get_event<S: EventSource>(source: &S) -> Result<S::Event, crate::Error> {
    let waited = wait_event_for(source, None)?;
    // With no deadline the wait ends only with an event or an error.
    waited.ok_or_else(|| source.wait_error(Errno::TIMEDOUT))
}

/// `wait_event` of every source: [`get_event`] for at most `timeout`
/// (`None`: no limit); `None` when no event came.
pub(crate) fn wait_event_for<S: EventSource>(
    source: &S,
    timeout: Option<Duration>,
) -> Result<Option<S::Event>, crate::Error> {
    wait_for(
        source,
        timeout,
        || source.try_get_event(),
        |e| source.wait_error(e),
    )
}

/// One `read()` of a `D` from a non-blocking descriptor that the kernel
/// hands events out of whole (the completion channel, the async-event
/// file): `None` at once when nothing is queued (`EAGAIN`); a signal
/// retries; a read of another size is `EIO`.
pub(crate) fn read_desc<D: FromBytes + IntoBytes>(fd: impl AsFd) -> Result<Option<D>, Errno> {
    let mut desc = D::new_zeroed();
    let n = loop {
        match rustix::io::read(&fd, desc.as_mut_bytes()) {
            Err(Errno::INTR) => continue,
            Err(Errno::AGAIN) => return Ok(None),
            other => break other?,
        }
    };
    if n != size_of::<D>() {
        return Err(Errno::IO);
    }
    Ok(Some(desc))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::unix::net::UnixStream;

    #[test]
    fn made_nonblocking_and_cloexec() {
        let (a, _b) = UnixStream::pair().unwrap();
        rustix::io::fcntl_setfd(&a, rustix::io::FdFlags::empty()).unwrap();
        make_nonblocking(&a).unwrap();
        assert!(rustix::fs::fcntl_getfl(&a)
            .unwrap()
            .contains(rustix::fs::OFlags::NONBLOCK));
        assert!(rustix::io::fcntl_getfd(&a)
            .unwrap()
            .contains(rustix::io::FdFlags::CLOEXEC));
    }

    #[test]
    fn waits_are_bounded_and_see_data() {
        let (a, mut b) = UnixStream::pair().unwrap();
        let t0 = Instant::now();
        assert!(!wait_readable(&a, Some(Duration::from_millis(20))).unwrap());
        assert!(t0.elapsed() >= Duration::from_millis(20));
        b.write_all(&[1]).unwrap();
        assert!(wait_readable(&a, Some(Duration::from_secs(5))).unwrap());
    }

    #[test]
    fn wait_for_retries_a_stolen_wakeup_and_times_out() {
        let (a, mut b) = UnixStream::pair().unwrap();
        b.write_all(&[1]).unwrap();
        // Readable, but the first try finds nothing (another reader took it).
        let mut tries = 0;
        let got = wait_for(
            &a,
            Some(Duration::from_millis(30)),
            || {
                tries += 1;
                Ok::<_, Errno>(None::<u8>)
            },
            |e| e,
        )
        .unwrap();
        assert_eq!(got, None);
        assert!(tries >= 2, "{tries}");
        let got = wait_for(&a, Some(Duration::ZERO), || Ok::<_, Errno>(Some(7)), |e| e);
        assert_eq!(got, Ok(Some(7)));
    }
}
