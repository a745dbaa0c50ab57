//! An opened device: the kernel's verbs context for this process.

use std::fmt;
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU8, Ordering};
use std::sync::Arc;

use crate::async_event::file::AsyncEventFile;
use crate::command::{GetContext, QueryDevice, WriteCommand};
use crate::device::Device;
use crate::device_attr::DeviceAttr;
use crate::error::{Errno, Error, Op};
use crate::flags::ReregFlags;
use crate::fork::ForkSafety;
use crate::method::InfoHandles;
use crate::process::Generation;
use crate::provider::driver::DriverId;
use crate::provider::{DriverState, Provider, MAX_GET_CONTEXT_UHW_OUT};
use crate::transport::{self, KernelFile, Transport, TransportKind, TransportMode};

/// The most handles [`Context::kernel_handle_count`] asks for (the list
/// attribute's length is a `u16` of bytes).
const MAX_INFO_HANDLES: usize = 0xfffc / 4;

/// How to open a device.
#[derive(Clone, Debug)]
pub struct OpenOptions {
    transport: TransportMode,
    fork_safety: Option<Arc<ForkSafety>>,
}

impl Default for OpenOptions {
    fn default() -> Self {
        Self::new()
    }
}

impl OpenOptions {
    /// Defaults: the transport named by `UVERBS_TRANSPORT` (else probed) and
    /// the process-wide fork safety ([`ForkSafety::global`]).
    pub fn new() -> Self {
        OpenOptions {
            transport: TransportMode::from_env(),
            fork_safety: None,
        }
    }

    /// Chooses the transport (overrides `UVERBS_TRANSPORT`).
    pub fn transport(mut self, mode: TransportMode) -> Self {
        self.transport = mode;
        self
    }

    /// Uses this fork-safety instance instead of the process-wide one.
    pub fn fork_safety(mut self, fork: Arc<ForkSafety>) -> Self {
        self.fork_safety = Some(fork);
        self
    }
}

pub(crate) struct ContextInner {
    pub(crate) device: Arc<str>,
    pub(crate) driver_id: Option<DriverId>,
    /// What differs per driver, chosen from `driver_id`.
    pub(crate) provider: Provider,
    /// What the driver keeps for this context (mlx5: UAR pages, sizes).
    /// Dropped before the transport (declaration order): its mappings are
    /// of the transport's file.
    pub(crate) driver: DriverState,
    pub(crate) transport: Box<dyn Transport>,
    pub(crate) fork: Arc<ForkSafety>,
    num_comp_vectors: u32,
    /// Flag combinations (bit `1 << flags`) the kernel answered REREG_MR
    /// with `EOPNOTSUPP`.
    rereg_refused: AtomicU8,
    /// Set once the kernel refused the native `UVERBS_METHOD_REG_MR` as
    /// unknown (`EPROTONOSUPPORT`, or `ENOTTY`: no ioctl framework): every
    /// later registration of this context sends the write command only.
    reg_mr_method_absent: AtomicBool,
    /// The process that created the kernel context; in any other (a forked
    /// child) no command is sent and no object is destroyed.
    pub(crate) origin: Generation,
    /// Registrations the kernel refused to release (see
    /// [`Context::abandoned_registrations`]).
    abandoned: AtomicU32,
    /// QPs the kernel refused to destroy when dropped (see
    /// [`Context::abandoned_queue_pairs`]).
    abandoned_qps: AtomicU32,
    /// The async-event file, when the transport gave this process one (the
    /// kernel's file does; test doubles do not). Closed after the
    /// transport's file (declaration order = drop order).
    pub(crate) async_events: Option<AsyncEventFile>,
}

/// An opened RDMA device (`struct ibv_context`).
///
/// Cheap to clone and `Send + Sync`: the PDs and MRs made from a context
/// share it, and the kernel file closes when the last of them is gone.
#[doc(alias = "ibv_context")]
#[derive(Clone)]
#[doc(alias = "ibv_close_device")]
pub struct Context {
    pub(crate) inner: Arc<ContextInner>,
}

impl fmt::Debug for Context {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Context")
            .field("device", &self.inner.device)
            .field("transport", &self.inner.transport.kind())
            .field("driver_id", &self.inner.driver_id)
            .finish()
    }
}

/// What `QUERY_CONTEXT` answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ContextAttr {
    /// Completion vectors of the device.
    pub num_comp_vectors: u32,
    /// `IB_UVERBS_CORE_SUPPORT_*` bits (`OPTIONAL_MR_ACCESS`: access bits
    /// 20..=29 are optional).
    pub core_support: u64,
}

impl Context {
    /// The driver id for a native method, or `EOPNOTSUPP` (the kernel
    /// refuses a frame with the wrong one).
    pub(crate) fn method_driver(&self, op: Op) -> Result<u32, Error> {
        self.check_process(op)?;
        self.inner
            .driver_id
            .map(|d| d.0)
            .ok_or_else(|| Error::os(op, &self.inner.device, Errno::OPNOTSUPP))
    }

    /// True when native methods go to the kernel: the transport has ioctl
    /// (the kernel's ioctl file, or a fake) and the driver id is known.
    pub(crate) fn prefers_methods(&self) -> bool {
        self.inner.transport.kind().sends_methods() && self.inner.driver_id.is_some()
    }

    /// Opens `device`: checks its ABI and character device, chooses the
    /// transport and creates the kernel context (`GET_CONTEXT`).
    #[doc(alias = "ibv_open_device")]
    pub fn open(device: &Device, options: &OpenOptions) -> Result<Context, Error> {
        let name = device.name_arc();
        let driver_id = device.driver_id();
        if let Some((low, high, supported)) = Provider::for_driver(driver_id).supported_abi() {
            let found = device.driver_abi_version();
            if !(low..=high).contains(&found) {
                return Err(Error::Abi {
                    op: Op::Open,
                    device: name.clone(),
                    what: "driver",
                    found,
                    supported,
                });
            }
        }

        let fd = rustix::fs::open(
            device.path(),
            rustix::fs::OFlags::RDWR | rustix::fs::OFlags::CLOEXEC,
            rustix::fs::Mode::empty(),
        )
        .map_err(|e| Error::os(Op::Open, name, e))?;
        let stat = rustix::fs::fstat(&fd).map_err(|e| Error::os(Op::Open, name, e))?;
        let found = (
            rustix::fs::major(stat.st_rdev),
            rustix::fs::minor(stat.st_rdev),
        );
        if found != device.dev_number() {
            return Err(Error::WrongCharDevice {
                op: Op::Open,
                device: name.clone(),
                path: device.path().display().to_string(),
                found,
                expected: device.dev_number(),
            });
        }

        let kind = match (options.transport, driver_id) {
            (TransportMode::Write, _) => TransportKind::Write,
            (TransportMode::Ioctl, Some(_)) => TransportKind::Ioctl,
            (TransportMode::Ioctl, None) => {
                return Err(Error::input(
                    Op::ProbeTransport,
                    name,
                    "the ioctl transport needs the driver id, which is unknown",
                ));
            }
            (TransportMode::Auto, None) => TransportKind::Write,
            (TransportMode::Auto, Some(id)) => {
                match KernelFile::probe_invoke_write(fd.as_fd(), id.0) {
                    Err(Errno::NOTTY | Errno::PROTONOSUPPORT | Errno::INVAL) => {
                        TransportKind::Write
                    }
                    _ => TransportKind::WriteWithMethods,
                }
            }
        };
        let file = KernelFile::new(fd, kind, driver_id.map(|d| d.0))
            .map_err(|e| Error::os(Op::Open, name, e))?;
        Self::with_transport(name, driver_id, Box::new(file), options)
    }

    /// Creates a context over any transport, e.g. a
    /// `transport::RecordingTransport` in tests (`test-util` feature).
    /// Sends `GET_CONTEXT`; the context owns the async-event descriptor only
    /// if the transport hands it over
    /// ([`Transport::adopt_fd`]: the kernel's file does, fakes do not),
    /// so a fake's answer never closes a descriptor someone else owns.
    pub fn with_transport(
        device: &str,
        driver_id: Option<DriverId>,
        transport: Box<dyn Transport>,
        options: &OpenOptions,
    ) -> Result<Context, Error> {
        let device: Arc<str> = Arc::from(device);
        let origin = Generation::current();
        let mut uhw_out = [0u8; MAX_GET_CONTEXT_UHW_OUT];
        let provider = Provider::for_driver(driver_id);
        let uhw_len = provider.get_context_uhw_out_len();
        let cmd = GetContext::new().uhw_in(provider.get_context_uhw_in());
        // SAFETY: GET_CONTEXT hands no memory to the device.
        let (resp, written) =
            unsafe { transport::run(transport.as_ref(), &cmd, &mut uhw_out[..uhw_len]) }
                .map_err(|e| Error::os(Op::GetContext, &device, e))?;
        // SAFETY: the number comes from the successful GET_CONTEXT just sent
        // on this transport, and is adopted only here.
        let async_fd = unsafe { transport.adopt_fd(resp.async_fd) };
        if let Some(fd) = &async_fd {
            // One shape for every event source: non-blocking from creation.
            crate::event_fd::make_nonblocking(fd)
                .map_err(|e| Error::os(Op::GetContext, &device, e))?;
        }
        let driver = DriverState::open(provider, transport.as_ref(), &uhw_out[..written])
            .map_err(|e| Error::os(Op::GetContext, &device, e))?;
        let fork = options
            .fork_safety
            .clone()
            .unwrap_or_else(ForkSafety::global);
        Ok(Context {
            inner: Arc::new(ContextInner {
                device,
                driver_id,
                provider,
                driver,
                transport,
                fork,
                num_comp_vectors: resp.num_comp_vectors,
                rereg_refused: AtomicU8::new(0),
                reg_mr_method_absent: AtomicBool::new(false),
                origin,
                abandoned: AtomicU32::new(0),
                abandoned_qps: AtomicU32::new(0),
                async_events: async_fd.map(AsyncEventFile::new),
            }),
        })
    }

    /// For the unit tests: a context named `fake0` over `transport`, as a
    /// `driver` device, with the default options.
    #[cfg(test)]
    pub(crate) fn over_fake(driver: Option<DriverId>, transport: Box<dyn Transport>) -> Context {
        Context::with_transport("fake0", driver, transport, &OpenOptions::new())
            .expect("GET_CONTEXT over the fake")
    }

    /// The device name (`rxe0`).
    pub fn device_name(&self) -> &str {
        &self.inner.device
    }

    /// The transport this context uses.
    pub fn transport_kind(&self) -> TransportKind {
        self.inner.transport.kind()
    }

    /// The driver id, when known (netlink or the device name).
    pub fn driver_id(&self) -> Option<DriverId> {
        self.inner.driver_id
    }

    /// Completion vectors the device offers.
    pub fn num_comp_vectors(&self) -> u32 {
        self.inner.num_comp_vectors
    }

    /// The fork-safety instance registrations of this context use.
    pub fn fork_safety(&self) -> &Arc<ForkSafety> {
        &self.inner.fork
    }

    /// The device's attributes (`QUERY_DEVICE`).
    #[doc(alias = "ibv_query_device")]
    pub fn query_device(&self) -> Result<DeviceAttr, Error> {
        // SAFETY: QUERY_DEVICE hands no memory to the device.
        let (resp, _) = unsafe { self.run(Op::QueryDevice, &QueryDevice::new(), &mut []) }?;
        Ok(DeviceAttr::from(&resp))
    }

    /// How many objects of a kind (`UVERBS_OBJECT_MR`, `UVERBS_OBJECT_PD`, …)
    /// this context holds in the kernel (`UVERBS_METHOD_INFO_HANDLES`).
    /// Needs the ioctl interface and the driver id, on either transport;
    /// `EOVERFLOW` above 16 383 handles.
    pub fn kernel_handle_count(&self, object_id: u16) -> Result<u32, Error> {
        self.check_process(Op::InfoHandles)?;
        let fail = |e| Error::os(Op::InfoHandles, &self.inner.device, e);
        let driver = self.inner.driver_id.ok_or(fail(Errno::OPNOTSUPP))?.0;
        // The kernel insists on a non-empty handle list and stops counting
        // when it is full, so grow it until the count fits.
        let mut capacity = 64usize;
        loop {
            let total = InfoHandles::new(object_id, capacity)
                .run(self.inner.transport.as_ref(), driver)
                .map_err(fail)?;
            if (total as usize) < capacity {
                return Ok(total);
            }
            if capacity == MAX_INFO_HANDLES {
                // More handles than one call can list: the count is unknown.
                return Err(fail(Errno::OVERFLOW));
            }
            capacity = (capacity * 4).min(MAX_INFO_HANDLES);
        }
    }

    /// Sends a raw command on this context's transport and returns the
    /// kernel's core response; `uhw_out` receives driver-private output.
    ///
    /// This is the layer the typed API is built on, public for tools and
    /// benchmarks. Objects created this way are not tracked: the caller
    /// destroys them.
    ///
    /// # Safety
    ///
    /// The command must be safe to run: a `REG_MR` range must stay mapped
    /// while registered, and destroying a handle that a [`ProtectionDomain`](crate::ProtectionDomain)
    /// or [`MemoryRegion`](crate::MemoryRegion) owns breaks that object.
    pub unsafe fn execute<C: WriteCommand>(
        &self,
        cmd: &C,
        uhw_out: &mut [u8],
    ) -> Result<C::Response, Error> {
        // SAFETY: forwarded to the caller.
        unsafe { self.run(Op::Raw, cmd, uhw_out) }.map(|(resp, _)| resp)
    }

    /// Runs a typed command, mapping failures to [`Error::Os`] for `op`.
    ///
    /// # Safety
    ///
    /// As for [`Transport::execute`].
    pub(crate) unsafe fn run<C: WriteCommand>(
        &self,
        op: Op,
        cmd: &C,
        uhw_out: &mut [u8],
    ) -> Result<(C::Response, usize), Error> {
        self.check_process(op)?;
        // SAFETY: forwarded to the caller.
        unsafe { transport::run(self.inner.transport.as_ref(), cmd, uhw_out) }
            .map_err(|e| Error::os(op, &self.inner.device, e))
    }

    /// True in the process that opened this context; false in a child
    /// forked since, where its objects belong to the parent.
    pub fn is_owned_by_this_process(&self) -> bool {
        self.inner.origin.is_current()
    }

    /// [`Error::ForeignProcess`] unless this is the process that opened the
    /// context: a forked child must not send commands on the parent's
    /// objects (over ioctl the kernel would let it destroy them).
    #[inline]
    pub(crate) fn check_process(&self, op: Op) -> Result<(), Error> {
        if self.inner.origin.is_current() {
            Ok(())
        } else {
            Err(self.foreign_process(op))
        }
    }

    /// The error [`check_process`](Self::check_process) answers in a
    /// forked child, out of the hot path (for callers that test the
    /// generation themselves, from a copy in the object).
    #[cold]
    #[inline(never)]
    pub(crate) fn foreign_process(&self, op: Op) -> Error {
        Error::ForeignProcess {
            op,
            device: self.inner.device.clone(),
        }
    }

    /// True when the kernel already refused (`EOPNOTSUPP`) a REREG_MR with
    /// exactly this flag combination on this context.
    ///
    /// The memory is per context and per combination of
    /// [`ReregFlags`], not per value: on rxe, one refused access value
    /// (`ZERO_BASED`) marks every `ACCESS` change as refused, so later ones
    /// are replaced, which is slower but still correct. Only
    /// [`ReregFallback::Replace`](crate::mr::ReregFallback::Replace) consults it
    /// (to skip the doomed command); strict calls always ask the kernel.
    pub fn rereg_known_unsupported(&self, flags: ReregFlags) -> bool {
        flags.bits() < 8
            && self.inner.rereg_refused.load(Ordering::Relaxed) & (1 << flags.bits()) != 0
    }

    /// Forgets every refusal remembered by [`rereg_known_unsupported`](Self::rereg_known_unsupported).
    pub fn forget_rereg_refusals(&self) {
        self.inner.rereg_refused.store(0, Ordering::Relaxed);
    }

    pub(crate) fn remember_rereg_unsupported(&self, flags: ReregFlags) {
        if flags.bits() < 8 {
            self.inner
                .rereg_refused
                .fetch_or(1 << flags.bits(), Ordering::Relaxed);
        }
    }

    /// The driver id to send a registration with as the native
    /// `UVERBS_METHOD_REG_MR` (Linux 6.17), or `None` for the write command
    /// `REG_MR`: native only where the context goes native first (its
    /// transport [creates natively](TransportKind::creates_natively): ioctl
    /// and fakes; not the legacy write() nor Auto's write+methods, whose
    /// `write()` is cheaper), the driver's REG_MR needs no driver data
    /// (`Provider::reg_mr_method`), and the kernel has not refused the
    /// method on this context. One relaxed load on the way.
    pub(crate) fn reg_mr_method_driver(&self) -> Option<u32> {
        if self.inner.reg_mr_method_absent.load(Ordering::Relaxed)
            || !self.inner.provider.reg_mr_method()
        {
            return None;
        }
        crate::cq::native_driver(self)
    }

    /// True once the kernel answered this context that it has no native
    /// `UVERBS_METHOD_REG_MR` (`EPROTONOSUPPORT`: before Linux 6.17; or
    /// `ENOTTY`): memory registrations then go as the write command `REG_MR`
    /// only. False while the method was never tried (the legacy write()
    /// transport, Auto's write+methods, a driver that needs REG_MR's driver
    /// data) or worked. See [`ProtectionDomain::reg_mr`](crate::ProtectionDomain::reg_mr).
    pub fn reg_mr_method_refused(&self) -> bool {
        self.inner.reg_mr_method_absent.load(Ordering::Relaxed)
    }

    /// Remembers that the kernel does not have the native `REG_MR`: the
    /// registrations that follow send the write command only.
    pub(crate) fn remember_reg_mr_method_absent(&self) {
        self.inner
            .reg_mr_method_absent
            .store(true, Ordering::Relaxed);
    }

    /// How many memory registrations of this context the kernel refused to
    /// release (a `DEREG_MR` that failed when an MR was dropped, or both
    /// deregistrations of a failed replace fallback). They stay registered
    /// until the context is closed, when the kernel releases every object of
    /// its file: memory under them must stay mapped until then.
    pub fn abandoned_registrations(&self) -> u32 {
        self.inner.abandoned.load(Ordering::Relaxed)
    }

    pub(crate) fn note_abandoned_registration(&self) {
        self.inner.abandoned.fetch_add(1, Ordering::Relaxed);
    }

    /// How many queue pairs of this context the kernel refused to destroy
    /// when they were dropped (a `DESTROY_QP` that failed in
    /// [`QueuePair`](crate::QueuePair)'s drop, which cannot report it). Such
    /// a QP stays in the kernel until the context is closed, when the
    /// kernel releases every object of its file: until then the device may
    /// still run the requests posted to it, so the memory they name must
    /// stay mapped and registered and keep the rules of
    /// [`QueuePair::post_send`](crate::QueuePair::post_send) and
    /// [`QueuePair::post_recv`](crate::QueuePair::post_recv). A refused
    /// [`QueuePair::destroy`](crate::QueuePair::destroy) is not counted: it
    /// hands the QP back.
    pub fn abandoned_queue_pairs(&self) -> u32 {
        self.inner.abandoned_qps.load(Ordering::Relaxed)
    }

    pub(crate) fn note_abandoned_queue_pair(&self) {
        self.inner.abandoned_qps.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn same_as(&self, other: &Context) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }
}

impl Device {
    /// Opens the device with default options (transport from
    /// `UVERBS_TRANSPORT`, else probed; the process-wide fork safety).
    #[doc(alias = "ibv_open_device")]
    pub fn open(&self) -> Result<Context, Error> {
        Context::open(self, &OpenOptions::new())
    }

    /// Opens the device with the given options.
    pub fn open_with(&self, options: &OpenOptions) -> Result<Context, Error> {
        Context::open(self, options)
    }
}
