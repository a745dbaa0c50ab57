//! The context's asynchronous events: errors and state changes of its CQs
//! and QPs, and of the device's ports (`ibv_get_async_event`).
//!
//! `GET_CONTEXT` answers a descriptor (the kernel's async-event file) that
//! the [`Context`] owns. Each `read(2)` of it returns one
//! `ib_uverbs_async_event_desc`: the event type and, for an event about an
//! object, the `user_handle` the object was created with (this crate gives
//! every CQ and QP a process-unique [`CompletionQueue::event_id`] /
//! [`QueuePair::event_id`] there), or the port number for a port event.
//!
//! The descriptor is non-blocking from the context's creation, so that
//! epoll or tokio's `AsyncFd` can wait on it ([`AsyncEvents`] implements
//! [`AsFd`]); [`AsyncEvents::get_event`] still blocks (in poll(2)) until an
//! event arrives, [`AsyncEvents::wait_event`] for at most a timeout, and
//! [`AsyncEvents::try_get_event`] answers `Ok(None)` at once.
//!
//! **Acknowledging.** libibverbs hands out events that point at the
//! `ibv_qp`/`ibv_cq` and makes `ibv_destroy_qp`/`ibv_destroy_cq` wait until
//! every event read for the object has been acked (`ibv_ack_async_event`),
//! comparing with the kernel's count in the DESTROY response
//! (`events_reported`). An [`AsyncEvent`] here is a plain value naming the
//! object by its id, not a reference to it: nothing can dangle, so there is
//! no ack and destroy never waits. Reading an event is what the kernel
//! counts against the object; this crate counts the same reads per object
//! ([`AsyncEvents::reported`], [`CompletionQueue::async_events_reported`],
//! [`QueuePair::async_events_reported`]). Events still queued when their
//! object is destroyed are dropped by the kernel, never read.

use std::fmt;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::time::Duration;

use crate::context::Context;
use crate::cq::CompletionQueue;
use crate::error::{Errno, Error, Op};
use crate::event_fd;
use crate::qp::QueuePair;
use crate::srq::SharedReceiveQueue;
use uverbs_uapi as sys;

pub(crate) mod file;

pub use file::AsyncElement;
use file::AsyncEventFile;

kernel_enum! {
    /// What happened (the kernel's `enum ib_event_type`, equal to libibverbs'
    /// `enum ibv_event_type`).
    #[doc(alias = "ibv_event_type")]
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    #[non_exhaustive]
    pub enum AsyncEventKind {
        /// A value this crate does not know.
        Unknown(u32),
        /// A CQ overran (a completion found it full) or failed (`IB_EVENT_CQ_ERR`).
        CqErr = 0,
        /// A QP error that is not a work request's: the QP went to ERR (`IB_EVENT_QP_FATAL`).
        QpFatal = 1,
        /// An invalid request arrived on the QP (`IB_EVENT_QP_REQ_ERR`).
        QpReqErr = 2,
        /// A request violated the QP's access rights (`IB_EVENT_QP_ACCESS_ERR`).
        QpAccessErr = 3,
        /// The first packet arrived on a QP in RTR (`IB_EVENT_COMM_EST`).
        CommEst = 4,
        /// A QP moved to SQD has no outstanding send left (`IB_EVENT_SQ_DRAINED`).
        SqDrained = 5,
        /// The QP migrated to its alternate path (`IB_EVENT_PATH_MIG`).
        PathMig = 6,
        /// Path migration failed (`IB_EVENT_PATH_MIG_ERR`).
        PathMigErr = 7,
        /// The device failed; the context is unusable (`IB_EVENT_DEVICE_FATAL`).
        DeviceFatal = 8,
        /// A port became active (`IB_EVENT_PORT_ACTIVE`).
        PortActive = 9,
        /// A port went down (`IB_EVENT_PORT_ERR`).
        PortErr = 10,
        /// A port's LID changed (`IB_EVENT_LID_CHANGE`).
        LidChange = 11,
        /// A port's P_Key table changed (`IB_EVENT_PKEY_CHANGE`).
        PkeyChange = 12,
        /// A port's subnet manager changed (`IB_EVENT_SM_CHANGE`).
        SmChange = 13,
        /// An SRQ failed (`IB_EVENT_SRQ_ERR`).
        SrqErr = 14,
        /// An SRQ fell below its limit (`IB_EVENT_SRQ_LIMIT_REACHED`).
        SrqLimitReached = 15,
        /// A QP on an SRQ in ERR consumed its last receive (`IB_EVENT_QP_LAST_WQE_REACHED`).
        QpLastWqeReached = 16,
        /// The subnet manager asks to re-register (`IB_EVENT_CLIENT_REREGISTER`).
        ClientReregister = 17,
        /// A port's GID table changed (`IB_EVENT_GID_CHANGE`).
        GidChange = 18,
        /// A work queue failed (`IB_EVENT_WQ_FATAL`).
        WqFatal = 19,
    }
}

/// One asynchronous event (`struct ibv_async_event`), decoded from the
/// kernel's `ib_uverbs_async_event_desc`. A plain value: nothing to ack.
#[doc(alias = "ibv_async_event")]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct AsyncEvent {
    /// What happened.
    pub kind: AsyncEventKind,
    /// What it happened to.
    pub element: AsyncElement,
}

impl AsyncEvent {
    /// Decodes the kernel's descriptor: the kind says what `element` is.
    pub fn from_raw(desc: &sys::ib_uverbs_async_event_desc) -> Self {
        use AsyncEventKind::*;
        let kind = AsyncEventKind::from_raw(desc.event_type);
        let id = desc.element;
        let element = match kind {
            CqErr => AsyncElement::Cq(id),
            QpFatal | QpReqErr | QpAccessErr | CommEst | SqDrained | PathMig | PathMigErr
            | QpLastWqeReached => AsyncElement::Qp(id),
            SrqErr | SrqLimitReached => AsyncElement::Srq(id),
            WqFatal => AsyncElement::Wq(id),
            // The kernel copies a u32 port number into the u64.
            PortActive | PortErr | LidChange | PkeyChange | SmChange | ClientReregister
            | GidChange => AsyncElement::Port(id as u32),
            DeviceFatal => AsyncElement::Device,
            Unknown(_) => AsyncElement::Unknown(id),
        };
        AsyncEvent { kind, element }
    }

    /// True if the event is about `cq`.
    pub fn is_about_cq(&self, cq: &CompletionQueue) -> bool {
        self.element == AsyncElement::Cq(cq.event_id())
    }

    /// True if the event is about `qp`.
    pub fn is_about_qp(&self, qp: &QueuePair) -> bool {
        self.element == AsyncElement::Qp(qp.event_id())
    }

    /// True if the event is about `srq`.
    pub fn is_about_srq(&self, srq: &SharedReceiveQueue) -> bool {
        self.element == AsyncElement::Srq(srq.event_id())
    }
}

/// The context's async-event descriptor, to wait on and read events from
/// (from [`Context::async_events`]).
///
/// It implements [`AsFd`] and [`AsRawFd`]: register it with epoll or
/// tokio's `AsyncFd` (the descriptor is non-blocking) and call
/// [`try_get_event`](Self::try_get_event) when it is readable. It holds a
/// clone of the context, which keeps the descriptor open.
#[derive(Clone)]
pub struct AsyncEvents {
    ctx: Context,
}

impl fmt::Debug for AsyncEvents {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AsyncEvents")
            .field("device", &self.ctx.device_name())
            .field("fd", &self.file().fd.as_raw_fd())
            .finish()
    }
}

impl Context {
    /// The context's async-event descriptor (see [`AsyncEvents`]).
    ///
    /// `EOPNOTSUPP` over a transport that handed over no descriptor (the
    /// recording fake); [`Error::ForeignProcess`] in a forked child (the
    /// events are the parent's).
    pub fn async_events(&self) -> Result<AsyncEvents, Error> {
        self.check_process(Op::GetAsyncEvent)?;
        if self.inner.async_events.is_none() {
            return Err(Error::os(
                Op::GetAsyncEvent,
                &self.inner.device,
                Errno::OPNOTSUPP,
            ));
        }
        Ok(AsyncEvents { ctx: self.clone() })
    }

    /// Waits for the next async event and returns it
    /// ([`AsyncEvents::get_event`]).
    #[doc(alias = "ibv_get_async_event")]
    pub fn async_event(&self) -> Result<AsyncEvent, Error> {
        self.async_events()?.get_event()
    }

    /// The next async event if one is pending, else `Ok(None)`, without
    /// waiting ([`AsyncEvents::try_get_event`]).
    pub fn try_async_event(&self) -> Result<Option<AsyncEvent>, Error> {
        self.async_events()?.try_get_event()
    }
}

impl AsyncEvents {
    fn file(&self) -> &AsyncEventFile {
        // Only built by Context::async_events, which checked it is there.
        match &self.ctx.inner.async_events {
            Some(file) => file,
            None => unreachable!("AsyncEvents over a context without an async-event file"),
        }
    }

    fn fail(&self, errno: Errno) -> Error {
        Error::os(Op::GetAsyncEvent, &self.ctx.inner.device, errno)
    }

    /// The context the events are about.
    pub fn context(&self) -> &Context {
        &self.ctx
    }

    /// Waits for the next event and returns it; a signal does not end the
    /// wait (`EINTR` is retried). `EIO` once the device is gone.
    #[doc(alias = "ibv_get_async_event")]
    pub fn get_event(&self) -> Result<AsyncEvent, Error> {
        event_fd::get_event(self)
    }

    /// [`get_event`](Self::get_event) for at most `timeout`: `None` when
    /// no event came.
    pub fn wait_event(&self, timeout: Duration) -> Result<Option<AsyncEvent>, Error> {
        event_fd::wait_event_for(self, Some(timeout))
    }

    /// The next event if one is pending, else `Ok(None)` at once.
    pub fn try_get_event(&self) -> Result<Option<AsyncEvent>, Error> {
        self.ctx.check_process(Op::GetAsyncEvent)?;
        let file = self.file();
        let read = event_fd::read_desc::<sys::ib_uverbs_async_event_desc>(&file.fd);
        let Some(raw) = read.map_err(|e| self.fail(e))? else {
            return Ok(None);
        };
        let event = AsyncEvent::from_raw(&raw);
        file.count(event.element);
        Ok(Some(event))
    }

    /// How many events about `element` have been read from this context.
    pub fn reported(&self, element: AsyncElement) -> u32 {
        self.file().reported(element)
    }
}

impl event_fd::sealed::Sealed for AsyncEvents {}

impl event_fd::EventSource for AsyncEvents {
    type Event = AsyncEvent;

    fn try_get_event(&self) -> Result<Option<AsyncEvent>, Error> {
        AsyncEvents::try_get_event(self)
    }

    fn wait_error(&self, errno: Errno) -> Error {
        self.fail(errno)
    }

    fn owned_here(&self) -> bool {
        self.ctx.is_owned_by_this_process()
    }
}

impl AsFd for AsyncEvents {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.file().fd.as_fd()
    }
}

impl AsRawFd for AsyncEvents {
    fn as_raw_fd(&self) -> RawFd {
        self.file().fd.as_raw_fd()
    }
}

/// Counts read from the context's file, 0 where there is none (the fake).
fn reported_on(ctx: &Context, element: AsyncElement) -> u32 {
    ctx.inner
        .async_events
        .as_ref()
        .map_or(0, |file| file.reported(element))
}

impl CompletionQueue {
    /// How many async events about this CQ have been read from its
    /// context (what the kernel's `DESTROY_CQ` answers as
    /// `async_events_reported`).
    pub fn async_events_reported(&self) -> u32 {
        reported_on(self.context(), AsyncElement::Cq(self.event_id()))
    }
}

impl QueuePair {
    /// How many async events about this QP have been read from its
    /// context (what the kernel's `DESTROY_QP` answers as
    /// `events_reported`).
    pub fn async_events_reported(&self) -> u32 {
        reported_on(self.context(), AsyncElement::Qp(self.event_id()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use zerocopy::FromBytes;

    fn desc(event_type: u32, element: u64) -> sys::ib_uverbs_async_event_desc {
        sys::ib_uverbs_async_event_desc {
            element,
            event_type,
            reserved: 0,
        }
    }

    /// Every kind the kernel defines decodes to its name and the element
    /// its kind implies, and back to the same number.
    #[test]
    fn each_kind_decodes_with_its_element() {
        use AsyncElement as E;
        use AsyncEventKind as K;
        let id = 0x1234_5678_9abc_def0;
        let cases: [(u32, K, E); 20] = [
            (0, K::CqErr, E::Cq(id)),
            (1, K::QpFatal, E::Qp(id)),
            (2, K::QpReqErr, E::Qp(id)),
            (3, K::QpAccessErr, E::Qp(id)),
            (4, K::CommEst, E::Qp(id)),
            (5, K::SqDrained, E::Qp(id)),
            (6, K::PathMig, E::Qp(id)),
            (7, K::PathMigErr, E::Qp(id)),
            (8, K::DeviceFatal, E::Device),
            (9, K::PortActive, E::Port(0x9abc_def0)),
            (10, K::PortErr, E::Port(0x9abc_def0)),
            (11, K::LidChange, E::Port(0x9abc_def0)),
            (12, K::PkeyChange, E::Port(0x9abc_def0)),
            (13, K::SmChange, E::Port(0x9abc_def0)),
            (14, K::SrqErr, E::Srq(id)),
            (15, K::SrqLimitReached, E::Srq(id)),
            (16, K::QpLastWqeReached, E::Qp(id)),
            (17, K::ClientReregister, E::Port(0x9abc_def0)),
            (18, K::GidChange, E::Port(0x9abc_def0)),
            (19, K::WqFatal, E::Wq(id)),
        ];
        for (raw, kind, element) in cases {
            let event = AsyncEvent::from_raw(&desc(raw, id));
            assert_eq!(event, AsyncEvent { kind, element }, "type {raw}");
            assert_eq!(kind.to_raw(), raw, "{kind:?}");
        }
        // A port event as the kernel sends it: port 1.
        assert_eq!(
            AsyncEvent::from_raw(&desc(9, 1)).element,
            AsyncElement::Port(1)
        );
    }

    #[test]
    fn an_unknown_kind_keeps_its_numbers() {
        for raw in [20, 21, 0x8000_0000, u32::MAX] {
            let event = AsyncEvent::from_raw(&desc(raw, 77));
            assert_eq!(event.kind, AsyncEventKind::Unknown(raw));
            assert_eq!(event.kind.to_raw(), raw);
            assert_eq!(event.element, AsyncElement::Unknown(77));
        }
    }

    /// The descriptor bytes as read(2) returns them (element first, little
    /// endian on x86) decode as the struct does.
    #[test]
    fn the_read_bytes_decode() {
        let mut bytes = [0u8; 16];
        bytes[..8].copy_from_slice(&42u64.to_ne_bytes());
        bytes[8..12].copy_from_slice(&5u32.to_ne_bytes());
        let raw = sys::ib_uverbs_async_event_desc::read_from_bytes(&bytes[..]).unwrap();
        assert_eq!(
            AsyncEvent::from_raw(&raw),
            AsyncEvent {
                kind: AsyncEventKind::SqDrained,
                element: AsyncElement::Qp(42)
            }
        );
    }

    use crate::device::OpenOptions;
    use crate::transport::{RawCommand, RecordingTransport, Transport, TransportKind};
    use std::os::fd::{AsFd, OwnedFd};
    use std::sync::Mutex;
    use std::time::Duration;

    /// The recording fake, except that `GET_CONTEXT`'s descriptor is the
    /// read end of a pipe the test writes event descriptors into.
    #[derive(Debug)]
    struct PipeEvents {
        fake: RecordingTransport,
        read_end: Mutex<Option<OwnedFd>>,
    }

    // SAFETY: every command goes to the recording fake, whose guarantees
    // hold; adopt_fd hands over a pipe end that only this value owned.
    unsafe impl Transport for PipeEvents {
        fn kind(&self) -> TransportKind {
            self.fake.kind()
        }

        unsafe fn execute(&self, cmd: &mut RawCommand<'_>) -> Result<usize, Errno> {
            // SAFETY: forwarded to the caller.
            unsafe { self.fake.execute(cmd) }
        }

        unsafe fn adopt_fd(&self, _fd: u32) -> Option<OwnedFd> {
            self.read_end.lock().unwrap().take()
        }
    }

    /// A context whose async-event file is a pipe; the write end.
    fn piped() -> (Context, OwnedFd) {
        let mut fds = [0; 2];
        // SAFETY: pipe2 writes two descriptor numbers into the array.
        assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
        // SAFETY: the two new descriptors, owned by nothing else.
        let (read_end, write_end) = unsafe {
            use std::os::fd::FromRawFd;
            (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1]))
        };
        let transport = PipeEvents {
            fake: RecordingTransport::new(),
            read_end: Mutex::new(Some(read_end)),
        };
        let ctx = Context::with_transport("pipe0", None, Box::new(transport), &OpenOptions::new())
            .unwrap();
        (ctx, write_end)
    }

    fn send(write_end: &OwnedFd, event_type: u32, element: u64) {
        let raw = desc(event_type, element);
        let bytes = zerocopy::IntoBytes::as_bytes(&raw);
        assert_eq!(rustix::io::write(write_end, bytes), Ok(bytes.len()));
    }

    fn readable(events: &AsyncEvents) -> bool {
        let mut fds = [rustix::event::PollFd::new(
            events,
            rustix::event::PollFlags::IN,
        )];
        let zero = rustix::event::Timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        rustix::event::poll(&mut fds, Some(&zero)).unwrap() == 1
    }

    /// Over a transport that handed over no descriptor every entry point
    /// is a typed EOPNOTSUPP naming get_async_event.
    #[test]
    fn over_the_fake_there_is_no_async_file() {
        let ctx = Context::over_fake(None, Box::new(RecordingTransport::new()));
        let errors = [
            ctx.async_events().map(|_| ()).unwrap_err(),
            ctx.async_event().map(|_| ()).unwrap_err(),
            ctx.try_async_event().map(|_| ()).unwrap_err(),
        ];
        for err in errors {
            assert_eq!(err.op(), Op::GetAsyncEvent, "{err}");
            assert_eq!(err.errno(), Some(Errno::OPNOTSUPP), "{err}");
            assert!(err.to_string().starts_with("get_async_event"), "{err}");
        }
    }

    /// The descriptor is non-blocking once handed out; nothing pending is
    /// `Ok(None)` and not readable; a pending event is readable, decoded
    /// and counted against its element, and then gone.
    #[test]
    fn try_get_event_reads_one_pending_event_and_counts_it() {
        let (ctx, write_end) = piped();
        let events = ctx.async_events().unwrap();
        let flags = rustix::fs::fcntl_getfl(events.as_fd()).unwrap();
        assert!(flags.contains(rustix::fs::OFlags::NONBLOCK), "{flags:?}");
        assert!(!readable(&events));
        assert_eq!(events.try_get_event().unwrap(), None);

        send(&write_end, 0, 7);
        assert!(readable(&events), "an event is pending");
        let event = events.try_get_event().unwrap().expect("the event");
        assert_eq!(
            event,
            AsyncEvent {
                kind: AsyncEventKind::CqErr,
                element: AsyncElement::Cq(7)
            }
        );
        assert!(!readable(&events), "the event was consumed");
        assert_eq!(ctx.try_async_event().unwrap(), None);
        send(&write_end, 0, 7);
        send(&write_end, 5, 7);
        assert_eq!(ctx.async_event().unwrap().element, AsyncElement::Cq(7));
        assert_eq!(ctx.async_event().unwrap().element, AsyncElement::Qp(7));
        assert_eq!(events.reported(AsyncElement::Cq(7)), 2);
        assert_eq!(events.reported(AsyncElement::Qp(7)), 1);
        assert_eq!(events.reported(AsyncElement::Cq(8)), 0);
    }

    /// get_event waits (in poll) for an event that arrives later.
    #[test]
    fn get_event_waits_for_the_next_event() {
        let (ctx, write_end) = piped();
        let (tx, rx) = std::sync::mpsc::channel();
        let waiter = std::thread::spawn(move || {
            let _ = tx.send(ctx.async_event());
        });
        std::thread::sleep(Duration::from_millis(50));
        assert!(rx.try_recv().is_err(), "returned before any event");
        send(&write_end, 9, 1);
        let got = rx
            .recv_timeout(Duration::from_secs(5))
            .expect("get_event returned within 5 s of the event")
            .unwrap();
        assert_eq!(
            got,
            AsyncEvent {
                kind: AsyncEventKind::PortActive,
                element: AsyncElement::Port(1)
            }
        );
        waiter.join().unwrap();
    }

    /// A read shorter than a descriptor is EIO, not a made-up event.
    #[test]
    fn a_short_read_is_eio() {
        let (ctx, write_end) = piped();
        assert_eq!(rustix::io::write(&write_end, &[1u8; 8]), Ok(8));
        drop(write_end);
        let err = ctx.try_async_event().unwrap_err();
        assert_eq!(err.errno(), Some(Errno::IO), "{err}");
    }

    #[test]
    fn counts_are_per_element() {
        let fd =
            rustix::fs::memfd_create("uverbs-async-test", rustix::fs::MemfdFlags::CLOEXEC).unwrap();
        let file = AsyncEventFile::new(fd);
        file.count(AsyncElement::Cq(1));
        file.count(AsyncElement::Cq(1));
        file.count(AsyncElement::Qp(1));
        assert_eq!(file.reported(AsyncElement::Cq(1)), 2);
        assert_eq!(file.reported(AsyncElement::Qp(1)), 1);
        assert_eq!(file.reported(AsyncElement::Cq(2)), 0);
    }
}
