//! How commands reach the kernel.
//!
//! A [`Transport`] executes one uverbs write command given as a
//! [`RawCommand`]: the core request and response, and the driver-private
//! (UHW) tails. The kernel's file, [`KernelFile`], frames it either as
//! `ioctl(RDMA_VERBS_IOCTL)` with `UVERBS_METHOD_INVOKE_WRITE` or as a legacy
//! `write()`; `RecordingTransport` (with the `test-util` feature) is a fake kernel for tests that records
//! every command it is given. The byte layouts of both framings live in
//! [`frame`] and nowhere else.
//!
//! The system calls through which the kernel writes memory that a frame
//! points at (a command's `write()`, [`verbs_ioctl`]) live in one private
//! module, `kernel_writes`, and nowhere else: [`KernelFile`], the data
//! path's doorbell and the rdma_cm's [`EventChannel`](crate::cm::EventChannel)
//! all send their frames through it.
//!
//! Native ioctl methods (`QUERY_PORT`, `QUERY_MR`, …) are framed with the
//! typed builder [`Method`], whose attributes borrow the buffers they point
//! at, and sent with [`Transport::invoke`]; `INVOKE_WRITE` is one of them.

pub mod frame;
mod kernel;
mod kernel_writes;
pub(crate) mod mapping;
mod method;
#[cfg(any(test, feature = "test-util"))]
#[cfg_attr(docsrs, doc(cfg(feature = "test-util")))]
mod recording;

use std::fmt;
use std::os::fd::OwnedFd;

pub use kernel::KernelFile;
pub use kernel_writes::verbs_ioctl;
pub(crate) use kernel_writes::write_command;
pub use mapping::SharedMapping;
pub use method::{
    driver_attr, InvokeWriteOuts, Invoked, Method, NewFd, NewHandle, Out, OutBytes,
    MAX_METHOD_ATTRS,
};
#[cfg(any(test, feature = "test-util"))]
pub use recording::{RecordedAttr, RecordedCommand, RecordedMethod, RecordingTransport};

use crate::command::WriteCommand;
use crate::error::Errno;
use zerocopy::{FromZeros, IntoBytes};

/// Which framing a context uses to send write commands, and whether it
/// sends native ioctl methods.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum TransportKind {
    /// Everything by `ioctl(RDMA_VERBS_IOCTL)`: write commands as
    /// `UVERBS_METHOD_INVOKE_WRITE`, objects created by their native
    /// methods first (needs the driver id).
    Ioctl,
    /// Everything by the legacy `write()` of a command header and body; no
    /// native method is sent.
    Write,
    /// What [`TransportMode::Auto`] picks on a kernel with the ioctl
    /// framework: every write command (objects' creation included) by the
    /// legacy `write()`, which costs less than `INVOKE_WRITE` for the same
    /// command (Linux 6.12: REREG_MR about 15 %, ALLOC_PD + DEALLOC_PD about
    /// 2×; docs/benchmarks.md), and native ioctl methods only where a
    /// method answers what no write command does (the extended port
    /// attributes, the GID table). Needs the driver id.
    ///
    /// libibverbs 44 frames the same operations otherwise: traced by strace
    /// on Linux 6.12 (docs/benchmarks.md, "What each implementation
    /// sends"), its `ibv_alloc_pd`, `ibv_reg_mr`, `ibv_dereg_mr` and
    /// `ibv_dealloc_pd` are one `ioctl` each, where this kind sends one
    /// `write()` each.
    WriteWithMethods,
    /// Not the kernel: a test double such as `RecordingTransport` (only
    /// with the `test-util` feature).
    #[cfg(any(test, feature = "test-util"))]
    #[cfg_attr(docsrs, doc(cfg(feature = "test-util")))]
    Fake,
}

impl TransportKind {
    /// Whether native ioctl methods (queries, and creation on
    /// [`Ioctl`](Self::Ioctl)) may be sent: every kind but `Write`.
    pub fn sends_methods(self) -> bool {
        self != TransportKind::Write
    }

    /// Whether objects are created by their native methods first (with
    /// rdma-core's fallback to the write command): [`Ioctl`](Self::Ioctl)
    /// and fakes.
    pub fn creates_natively(self) -> bool {
        match self {
            TransportKind::Ioctl => true,
            #[cfg(any(test, feature = "test-util"))]
            TransportKind::Fake => true,
            _ => false,
        }
    }
}

impl fmt::Display for TransportKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TransportKind::Ioctl => "ioctl",
            TransportKind::Write => "write",
            TransportKind::WriteWithMethods => "write+methods",
            #[cfg(any(test, feature = "test-util"))]
            TransportKind::Fake => "fake",
        })
    }
}

/// How a context chooses its transport when it is opened.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum TransportMode {
    /// Probe like rdma-core: an `INVOKE_WRITE` that carries only
    /// `WRITE_CMD = QUERY_DEVICE`; `ENOTTY` or `EPROTONOSUPPORT` (no ioctl
    /// framework) and `EINVAL` (driver id not accepted) choose
    /// [`TransportKind::Write`], any other answer chooses
    /// [`TransportKind::WriteWithMethods`] (not rdma-core's all-ioctl: the
    /// write commands by `write()`, which is cheaper, the native methods by
    /// ioctl). An unknown driver id chooses `Write`.
    #[default]
    Auto,
    /// Always ioctl; opening fails when the driver id is unknown.
    Ioctl,
    /// Always the legacy `write()`.
    Write,
}

impl TransportMode {
    /// The mode named by the `UVERBS_TRANSPORT` environment variable
    /// (`auto`, `ioctl` or `write`); `Auto` when it is unset or unrecognised.
    pub fn from_env() -> Self {
        match std::env::var("UVERBS_TRANSPORT").as_deref() {
            Ok("ioctl") => TransportMode::Ioctl,
            Ok("write") => TransportMode::Write,
            _ => TransportMode::Auto,
        }
    }
}

/// One write command in raw form: what goes in and where the answer goes.
///
/// `core_in` is the kernel's request struct *after* the 8-byte command
/// header; when `core_out` is not empty it starts with the `u64 response`
/// field, which the write() framing fills with the response pointer. An
/// extended command (`code` with `IB_USER_VERBS_CMD_FLAG_EXTENDED`) has no
/// such field: write() sends the pointer in `ib_uverbs_ex_cmd_hdr`, and its
/// lengths are whole 64-bit words.
#[derive(Debug)]
pub struct RawCommand<'a> {
    /// `IB_USER_VERBS_CMD_*`, or `IB_USER_VERBS_EX_CMD_*` with
    /// `IB_USER_VERBS_CMD_FLAG_EXTENDED`.
    pub code: u32,
    /// The core request.
    pub core_in: &'a [u8],
    /// Driver-private input (UHW in), possibly empty.
    pub uhw_in: &'a [u8],
    /// The core response buffer, possibly empty.
    pub core_out: &'a mut [u8],
    /// Driver-private output buffer (UHW out), possibly empty.
    pub uhw_out: &'a mut [u8],
}

/// Something that executes uverbs commands: the kernel's file, or a double.
///
/// # Safety
///
/// Implementors must execute each command at most once, write only inside
/// the given output buffers, zero the output buffers before the call, and
/// return from [`execute`](Transport::execute) the number of leading
/// `uhw_out` bytes that were really written (at most `uhw_out.len()`). On
/// success the whole `core_out` must hold the kernel's answer.
/// [`invoke`](Transport::invoke) runs each method at most once and writes
/// only the frame (attribute flags, and the `data` of attributes that
/// receive a new handle or descriptor) and the memory behind output
/// attributes, within their lengths; it sets `UVERBS_ATTR_F_VALID_OUTPUT`
/// only on outputs it wrote.
/// [`adopt_fd`](Transport::adopt_fd) may return a descriptor
/// only if this process owns it and nothing else does.
pub unsafe trait Transport: Send + Sync + fmt::Debug {
    /// The framing this transport uses.
    fn kind(&self) -> TransportKind;

    /// Executes one write command. Returns how many bytes of `uhw_out` the
    /// kernel wrote.
    ///
    /// # Safety
    ///
    /// A command can give the device access to memory (`REG_MR`) or destroy
    /// objects other code owns: the caller must uphold what the command
    /// needs, e.g. that a registered range stays mapped while registered.
    unsafe fn execute(&self, cmd: &mut RawCommand<'_>) -> Result<usize, Errno>;

    /// Invokes a native ioctl method framed in `frame` (usually built with
    /// [`Method`], whose [`invoke`](Method::invoke) calls this). Transports
    /// without ioctl answer `EOPNOTSUPP`.
    ///
    /// # Safety
    ///
    /// Every pointer carried by the frame's attributes must have had its
    /// provenance exposed ([`frame::user_addr`]) and be valid for the length
    /// and direction the method uses, for the whole call; and the method
    /// must be safe to run (see [`Method::invoke`]).
    unsafe fn invoke(&self, frame: &mut frame::IoctlFrame) -> Result<(), Errno> {
        let _ = frame;
        Err(Errno::OPNOTSUPP)
    }

    /// Maps `len` bytes of the command file at `offset`, shared and
    /// read-write: a queue the kernel prepared (rxe's CQ, SQ, RQ). Transports
    /// without a kernel file answer `EOPNOTSUPP`.
    ///
    /// # Safety
    ///
    /// `offset` and `len` must be what a create command on this transport
    /// answered for this process.
    unsafe fn map_queue(&self, offset: u64, len: usize) -> Result<SharedMapping, Errno> {
        let _ = (offset, len);
        Err(Errno::OPNOTSUPP)
    }

    /// The kernel command file this transport writes to, if it has one:
    /// the data path writes its doorbell there directly, without a call
    /// through the transport. The descriptor stays open as long as the
    /// transport does.
    fn command_fd(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        None
    }

    /// Writes a pre-built `write()` command as it is, e.g. the data path's
    /// `POST_SEND` doorbell, which the kernel takes over `write()` only.
    /// Returns the bytes written. Transports without a kernel file answer
    /// `EOPNOTSUPP`.
    ///
    /// # Safety
    ///
    /// As for [`execute`](Self::execute): pointers inside `frame` must be
    /// exposed ([`frame::user_addr`]) and valid for what the command does,
    /// and the command must be safe to run.
    unsafe fn write_prepared(&self, frame: &[u8]) -> Result<usize, Errno> {
        let _ = frame;
        Err(Errno::OPNOTSUPP)
    }

    /// Takes ownership of a descriptor whose number a command answered: the
    /// async-event file of `GET_CONTEXT`
    /// (`ib_uverbs_get_context_resp::async_fd`), or a completion channel of
    /// `CREATE_COMP_CHANNEL`.
    ///
    /// Only a transport whose commands really install descriptors in this
    /// process, the kernel's file, returns one; a number that cannot be a
    /// descriptor (negative as an `int`) gives `None`. The default, right for
    /// test doubles whose answer is just a number, returns `None`: nothing
    /// here ever closes a descriptor it does not own.
    ///
    /// # Safety
    ///
    /// `fd` must be the number that a successful command on this transport
    /// answered as a new descriptor, passed here at most once.
    unsafe fn adopt_fd(&self, fd: u32) -> Option<OwnedFd> {
        let _ = fd;
        None
    }
}

// SAFETY: forwards every call to the shared transport, whose guarantees hold.
unsafe impl<T: Transport + ?Sized> Transport for std::sync::Arc<T> {
    fn kind(&self) -> TransportKind {
        (**self).kind()
    }

    unsafe fn execute(&self, cmd: &mut RawCommand<'_>) -> Result<usize, Errno> {
        // SAFETY: forwarded to the caller.
        unsafe { (**self).execute(cmd) }
    }

    unsafe fn invoke(&self, frame: &mut frame::IoctlFrame) -> Result<(), Errno> {
        // SAFETY: forwarded to the caller.
        unsafe { (**self).invoke(frame) }
    }

    unsafe fn adopt_fd(&self, fd: u32) -> Option<OwnedFd> {
        // SAFETY: forwarded to the caller.
        unsafe { (**self).adopt_fd(fd) }
    }

    unsafe fn map_queue(&self, offset: u64, len: usize) -> Result<SharedMapping, Errno> {
        // SAFETY: forwarded to the caller.
        unsafe { (**self).map_queue(offset, len) }
    }

    unsafe fn write_prepared(&self, frame: &[u8]) -> Result<usize, Errno> {
        // SAFETY: forwarded to the caller.
        unsafe { (**self).write_prepared(frame) }
    }

    fn command_fd(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        (**self).command_fd()
    }
}

/// Sends a typed command through `transport` and returns the kernel's core
/// response and the number of `uhw_out` bytes it wrote.
///
/// # Safety
///
/// As for [`Transport::execute`]: the command must be safe to run.
pub(crate) unsafe fn run<C: WriteCommand>(
    transport: &dyn Transport,
    cmd: &C,
    uhw_out: &mut [u8],
) -> Result<(C::Response, usize), Errno> {
    let request = cmd.request();
    let mut response = C::Response::new_zeroed();
    let mut raw = RawCommand {
        code: C::CODE,
        core_in: request.as_bytes(),
        uhw_in: cmd.uhw_in(),
        core_out: response.as_mut_bytes(),
        uhw_out,
    };
    // SAFETY: forwarded to the caller.
    let written = unsafe { transport.execute(&mut raw) };
    crate::trace::command(cmd, &written);
    let written = written?;
    Ok((response, written))
}

#[cfg(test)]
mod golden_tests;
