//! The event channel: the opened `/dev/infiniband/rdma_cm` file.
//!
//! Every ucma command is one `write()` on it, and its events are read with
//! `GET_EVENT` (also a `write()`). The file is opened non-blocking, so
//! `GET_EVENT` answers `EAGAIN` when nothing is queued
//! ([`EventChannel::try_get_event`] makes that `None`) and the blocking
//! calls wait in `poll()`, which reports it readable while an event is
//! queued: the shape of every event source of this crate. All ids created
//! on a channel report their events there.

use std::collections::HashMap;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use uverbs_uapi as sys;
use zerocopy::FromZeros;

use super::command::{encode, CmCommand, CreateId, GetEvent, PortSpace};
use super::event::{decode, Event};
#[cfg(any(test, feature = "test-util"))]
use super::fake::FakeCm;
use super::CmId;
use crate::error::{Errno, Error, Op};
use crate::event_fd;
use crate::process::Generation;
use crate::transport::frame::user_addr;
use crate::transport::write_command;

/// Where the kernel's rdma_cm character device lives.
pub const RDMA_CM_PATH: &str = "/dev/infiniband/rdma_cm";

/// The ABI version file of the rdma_cm misc device.
pub const RDMA_CM_ABI_PATH: &str = "/sys/class/misc/rdma_cm/abi_version";

/// The name errors give as their device.
pub(crate) const CM_DEVICE: &str = "rdma_cm";

/// What the channel's commands go to.
enum Backend {
    /// The kernel's rdma_cm file.
    Kernel(OwnedFd),
    /// An in-process model of the kernel, for host tests.
    #[cfg(any(test, feature = "test-util"))]
    Fake(Arc<FakeCm>),
}

/// What the channel knows about an id that reports events here.
#[derive(Clone, Copy, Debug)]
pub(crate) struct IdInfo {
    pub(crate) ps: PortSpace,
    pub(crate) events: u32,
}

pub(crate) struct Inner {
    backend: Backend,
    name: Arc<str>,
    /// The process that opened the channel: in a child forked since, every
    /// entry point refuses before touching the inherited file.
    origin: Generation,
    /// Ids by uid: their port space (to decode their events' parameters)
    /// and the events delivered for them.
    ids: Mutex<HashMap<u64, IdInfo>>,
}

/// An rdma_cm event channel (`struct rdma_event_channel`): the opened
/// `/dev/infiniband/rdma_cm`, on which ids are created and events read.
///
/// Cloning gives another handle to the same channel; the file is closed
/// when the last handle and the last id are gone (closing it destroys any
/// id left, as the kernel's `ucma_close` does).
#[doc(alias = "rdma_event_channel")]
#[derive(Clone)]
#[doc(alias = "rdma_destroy_event_channel")]
pub struct EventChannel {
    pub(crate) inner: Arc<Inner>,
}

impl std::fmt::Debug for EventChannel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventChannel")
            .field("fd", &self.as_raw_fd())
            .field("fake", &!matches!(self.inner.backend, Backend::Kernel(_)))
            .finish()
    }
}

impl EventChannel {
    /// Opens `/dev/infiniband/rdma_cm` (non-blocking, close-on-exec), after checking that the
    /// kernel speaks ABI version 4 (when sysfs says; librdmacm accepts 3
    /// too, whose commands differ).
    #[doc(alias = "rdma_create_event_channel")]
    pub fn open() -> Result<Self, Error> {
        Self::open_at(Path::new(RDMA_CM_PATH), Path::new(RDMA_CM_ABI_PATH))
    }

    /// [`open`](Self::open) with other paths (tests, containers).
    pub fn open_at(dev: &Path, abi: &Path) -> Result<Self, Error> {
        let name: Arc<str> = Arc::from(CM_DEVICE);
        if let Ok(text) = std::fs::read_to_string(abi) {
            let found = text.trim().parse::<u32>().map_err(|e| Error::Sysfs {
                op: Op::CmOpen,
                path: abi.to_path_buf(),
                error: std::io::Error::new(std::io::ErrorKind::InvalidData, e),
            })?;
            if found != sys::RDMA_USER_CM_ABI_VERSION {
                return Err(Error::Abi {
                    op: Op::CmOpen,
                    device: name,
                    what: "rdma_cm",
                    found,
                    supported: "4",
                });
            }
        }
        let fd = rustix::fs::open(
            dev,
            rustix::fs::OFlags::RDWR | rustix::fs::OFlags::CLOEXEC | rustix::fs::OFlags::NONBLOCK,
            rustix::fs::Mode::empty(),
        )
        .map_err(|e| Error::os(Op::CmOpen, &name, e))?;
        Ok(Self::with_backend(Backend::Kernel(fd), name))
    }

    /// A channel whose commands go to the in-process model `fake` instead
    /// of the kernel (host tests; see [`FakeCm`]). Only with the
    /// `test-util` feature.
    #[cfg(any(test, feature = "test-util"))]
    #[cfg_attr(docsrs, doc(cfg(feature = "test-util")))]
    pub fn with_fake(fake: Arc<FakeCm>) -> Self {
        // Non-blocking, like the kernel's file as `open_at` opens it.
        fake.set_nonblocking(true);
        Self::with_backend(Backend::Fake(fake), Arc::from("fake_rdma_cm"))
    }

    fn with_backend(backend: Backend, name: Arc<str>) -> Self {
        EventChannel {
            inner: Arc::new(Inner {
                backend,
                name,
                origin: Generation::current(),
                ids: Mutex::new(HashMap::new()),
            }),
        }
    }

    /// Creates a cm id in port space `ps` whose events arrive here.
    #[doc(alias = "rdma_create_id")]
    pub fn create_id(&self, ps: PortSpace) -> Result<CmId, Error> {
        let uid = next_uid();
        let resp = self.run(&CreateId::new(uid, ps), Op::CmCreateId)?;
        Ok(CmId::new(self.clone(), resp.id, uid, ps))
    }

    /// Takes the next event, waiting (in `poll()`) until one arrives; a
    /// signal does not end the wait.
    ///
    /// In a forked child: [`Error::ForeignProcess`], nothing read (the
    /// parent's events stay the parent's).
    #[doc(alias = "rdma_get_cm_event")]
    pub fn get_event(&self) -> Result<Event, Error> {
        event_fd::get_event(self)
    }

    /// Takes the next event if one arrives within `timeout`; `None` when
    /// none did.
    pub fn wait_event(&self, timeout: Duration) -> Result<Option<Event>, Error> {
        event_fd::wait_event_for(self, Some(timeout))
    }

    /// The next event if one is queued, else `Ok(None)` at once: what to
    /// call when epoll or tokio's `AsyncFd` reports the channel readable.
    ///
    /// In a forked child: [`Error::ForeignProcess`], nothing read.
    pub fn try_get_event(&self) -> Result<Option<Event>, Error> {
        match self.run(&GetEvent, Op::CmGetEvent) {
            Ok(resp) => Ok(Some(self.decode(&resp))),
            Err(e) if e.errno() == Some(Errno::AGAIN) && matches!(e, Error::Os { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// `poll()` for an event for up to `timeout`.
    ///
    /// In a forked child: [`Error::ForeignProcess`] at once, without
    /// polling.
    pub fn poll_readable(&self, timeout: Duration) -> Result<bool, Error> {
        self.check_process(Op::CmGetEvent)?;
        event_fd::wait_readable(self, Some(timeout)).map_err(|e| self.err(Op::CmGetEvent, e))
    }

    /// Sends `cmd` and returns what the kernel wrote at its response pointer.
    ///
    /// The response pointer is made from a `&mut` of the buffer, which only
    /// that pointer reaches until the call has returned, and the frame goes
    /// out through the crate's one `write()` the compiler must assume writes
    /// memory (see `src/transport/kernel_writes.rs`).
    ///
    /// In a forked child: `EACCES` (what the kernel would answer), and
    /// nothing is sent.
    ///
    /// # Safety
    ///
    /// `C`'s layouts must be the kernel's for `C::CODE`, and its request
    /// must hold no address other than the response pointer it is given
    /// (or memory the command itself keeps alive, like [`SetOption`](super::command::SetOption)'s
    /// value): the kernel writes `out_len()` bytes wherever the request says.
    pub unsafe fn execute<C: CmCommand>(&self, cmd: &C) -> Result<C::Response, Errno> {
        if !self.is_owned_by_this_process() {
            return Err(Errno::ACCESS);
        }
        let mut resp = C::Response::new_zeroed();
        // The one way to the buffer until the call returns: a raw pointer
        // made from a `&mut` (a shared borrow would promise the kernel does
        // not write it), exposed by `user_addr`.
        let out: *mut C::Response = &mut resp;
        let frame = encode(cmd, user_addr(out))?;
        // SAFETY: `out` is valid for `size_of::<C::Response>()` bytes (the
        // header's `out`, all the kernel writes) until `resp` is read below;
        // the caller promises the frame holds no other address the kernel
        // writes through.
        let sent = unsafe { self.exec_frame(&frame, out.cast(), size_of::<C::Response>()) };
        crate::trace::cm_command(C::CODE, &sent);
        sent?;
        Ok(resp)
    }

    /// Sends one of this module's commands; [`Error::ForeignProcess`] in a
    /// forked child, nothing sent.
    pub(crate) fn run<C: CmCommand>(&self, cmd: &C, op: Op) -> Result<C::Response, Error> {
        self.check_process(op)?;
        // SAFETY: this module's commands mirror the kernel's structs
        // (golden-tested) and point only at the response they are given.
        unsafe { self.execute(cmd) }.map_err(|e| self.err(op, e))
    }

    /// One command `write()` of `frame`, whose answer the kernel (or the
    /// fake) writes at `response`.
    ///
    /// # Safety
    ///
    /// The only address in `frame` that the command writes through is
    /// `response`, exposed with [`user_addr`] from a pointer that permits
    /// writes; it is valid for `len` bytes, and nothing else accesses those
    /// bytes until this returns.
    unsafe fn exec_frame(&self, frame: &[u8], response: *mut u8, len: usize) -> Result<(), Errno> {
        // The kernel finds `response` inside `frame`; only the fake reads
        // these two directly.
        #[cfg(not(any(test, feature = "test-util")))]
        let _ = (response, len);
        match &self.inner.backend {
            Backend::Kernel(fd) => loop {
                // SAFETY: the kernel writes the answer through the pointer
                // inside `frame`, `response`, which the caller promises is
                // exposed, writable and ours alone for `len` bytes (the
                // header's `out`); `fd` is the open rdma_cm file.
                match unsafe { write_command(fd.as_fd(), frame) } {
                    Ok(n) if n == frame.len() => return Ok(()),
                    // ucma_write answers the whole length or an error;
                    // librdmacm maps anything else to ENODATA.
                    Ok(_) => return Err(Errno::NODATA),
                    Err(Errno::INTR) => continue,
                    Err(e) => return Err(e),
                }
            },
            #[cfg(any(test, feature = "test-util"))]
            Backend::Fake(fake) => {
                // SAFETY: the caller promises `len` writable bytes at
                // `response` that nothing else accesses during the call
                // (for a response of no bytes, a dangling but aligned
                // pointer, which an empty slice allows).
                let response = unsafe { std::slice::from_raw_parts_mut(response, len) };
                fake.write(frame, response)
            }
        }
    }

    /// True in the process that opened this channel; false in a child
    /// forked since, where every entry point answers
    /// [`Error::ForeignProcess`] and sends nothing (the kernel would answer
    /// the child's commands with `EACCES`, and its `GET_EVENT` and `poll()`
    /// would see the parent's events).
    pub fn is_owned_by_this_process(&self) -> bool {
        self.inner.origin.is_current()
    }

    /// [`Error::ForeignProcess`] unless this is the process that opened the
    /// channel.
    pub(crate) fn check_process(&self, op: Op) -> Result<(), Error> {
        self.inner.origin.check(op, &self.inner.name)
    }

    pub(crate) fn err(&self, op: Op, errno: Errno) -> Error {
        Error::os(op, &self.inner.name, errno)
    }

    pub(crate) fn input(&self, op: Op, reason: &'static str) -> Error {
        Error::input(op, &self.inner.name, reason)
    }

    pub(crate) fn register(&self, uid: u64, ps: PortSpace) {
        self.ids().insert(uid, IdInfo { ps, events: 0 });
    }

    pub(crate) fn unregister(&self, uid: u64) -> Option<IdInfo> {
        self.ids().remove(&uid)
    }

    pub(crate) fn events_received(&self, uid: u64) -> u32 {
        self.ids().get(&uid).map_or(0, |i| i.events)
    }

    fn ids(&self) -> std::sync::MutexGuard<'_, HashMap<u64, IdInfo>> {
        // The map stays consistent even if a holder panicked.
        self.inner.ids.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Decodes an event, counting it for its id; a connect request's new
    /// id inherits the listener's port space.
    fn decode(&self, resp: &sys::rdma_ucm_event_resp) -> Event {
        crate::trace::cm_event(
            super::event_name,
            resp.event,
            resp.status as i32,
            resp.id,
            resp.uid,
        );
        let ps = {
            let mut ids = self.ids();
            match ids.get_mut(&resp.uid) {
                Some(info) => {
                    info.events += 1;
                    info.ps
                }
                None => PortSpace::Tcp,
            }
        };
        decode(resp, ps, |handle| {
            CmId::new(self.clone(), handle, next_uid(), ps)
        })
    }

    /// True when both handles are the same channel.
    pub fn same_as(&self, other: &EventChannel) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }
}

impl event_fd::sealed::Sealed for EventChannel {}

impl event_fd::EventSource for EventChannel {
    type Event = Event;

    fn try_get_event(&self) -> Result<Option<Event>, Error> {
        EventChannel::try_get_event(self)
    }

    fn wait_error(&self, errno: Errno) -> Error {
        self.err(Op::CmGetEvent, errno)
    }

    fn owned_here(&self) -> bool {
        self.is_owned_by_this_process()
    }
}

impl AsFd for EventChannel {
    fn as_fd(&self) -> BorrowedFd<'_> {
        match &self.inner.backend {
            Backend::Kernel(fd) => fd.as_fd(),
            #[cfg(any(test, feature = "test-util"))]
            Backend::Fake(fake) => fake.as_fd(),
        }
    }
}

impl AsRawFd for EventChannel {
    fn as_raw_fd(&self) -> RawFd {
        self.as_fd().as_raw_fd()
    }
}

/// A process-wide unique, non-zero uid for each id (the kernel drops the
/// events of an id whose uid is 0).
pub(crate) fn next_uid() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}
