//! The emulated mlx5 kernel as a `uverbs` [`Transport`]: write commands
//! framed as `INVOKE_WRITE` by uverbs' own frame builder, native methods
//! as they come, both answered by a [`Mlx5Kernel`] of this file's own.
//! (libibverbs reaches an emulated kernel through its wrapped system calls
//! instead: `tests/libmlx5.rs`.)

use std::sync::{Mutex, MutexGuard};

use std::os::fd::AsFd;
use uverbs::transport::frame::{is_valid_output, user_addr, IoctlFrame};

use uverbs::error::Errno;
use uverbs::transport::{RawCommand, SharedMapping, Transport, TransportKind};
use uverbs_uapi::{RDMA_DRIVER_MLX5, UVERBS_ATTR_UHW_OUT};

use crate::ioctl::Call;
use crate::kernel::Mlx5Kernel;

/// Access to an emulated kernel another owner holds: libibverbs' (the
/// tests' shim), so that uverbs and libmlx5 share one device and the
/// device model moves bytes between their QPs.
pub trait SharedKernel: Send + Sync {
    /// Runs `f` on the kernel, as the owner's own system calls would.
    fn with(&self, f: &mut dyn FnMut(&mut Mlx5Kernel));
}

/// An open uverbs file of the emulated mlx5 device: of a kernel of its own
/// ([`Default`]), or of one shared with libmlx5 ([`EmulatedFile::sharing`]).
#[derive(Default)]
pub struct EmulatedFile {
    kernel: Mutex<Mlx5Kernel>,
    shared: Option<Box<dyn SharedKernel>>,
}

impl std::fmt::Debug for EmulatedFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EmulatedFile")
            .field("shared", &self.shared.is_some())
            .finish()
    }
}

impl EmulatedFile {
    /// A file of the kernel `shared` gives access to.
    pub fn sharing(shared: Box<dyn SharedKernel>) -> EmulatedFile {
        EmulatedFile {
            kernel: Mutex::default(),
            shared: Some(shared),
        }
    }

    /// The kernel behind this file (its log, its objects); for a file of a
    /// shared kernel, an unused one (use the owner's access).
    pub fn kernel(&self) -> MutexGuard<'_, Mlx5Kernel> {
        self.kernel.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Runs `f` on the kernel this file is of.
    fn run<R>(&self, f: impl FnOnce(&mut Mlx5Kernel) -> R) -> R {
        match &self.shared {
            None => f(&mut self.kernel()),
            Some(shared) => {
                let (mut f, mut out) = (Some(f), None);
                shared.with(&mut |k| out = f.take().map(|f| f(k)));
                out.expect("the shared kernel ran the call")
            }
        }
    }
}

// SAFETY: each command runs once, through `invoke`; the kernel writes only
// the frame's attributes and the output buffers they point at, within
// their lengths (`Call::write_output`), marking only those it wrote valid;
// `execute` zeroes both outputs first and reports the driver answer's
// length only when it was written; no descriptor is ever adopted.
unsafe impl Transport for EmulatedFile {
    fn kind(&self) -> TransportKind {
        TransportKind::Ioctl
    }

    unsafe fn execute(&self, cmd: &mut RawCommand<'_>) -> Result<usize, Errno> {
        cmd.core_out.fill(0);
        cmd.uhw_out.fill(0);
        let core_out = (user_addr(cmd.core_out.as_ptr()), cmd.core_out.len());
        let uhw_out = (user_addr(cmd.uhw_out.as_ptr()), cmd.uhw_out.len());
        let mut frame = IoctlFrame::invoke_write(
            RDMA_DRIVER_MLX5,
            cmd.code,
            cmd.core_in,
            cmd.uhw_in,
            core_out,
            uhw_out,
        )?;
        // SAFETY: the frame points at `cmd`'s buffers, live for the call.
        unsafe { self.invoke(&mut frame) }?;
        let written = frame.attr(UVERBS_ATTR_UHW_OUT).is_some_and(is_valid_output);
        Ok(if written { cmd.uhw_out.len() } else { 0 })
    }

    /// A completion channel's read end, which the kernel answered and no
    /// one else owns.
    unsafe fn adopt_fd(&self, fd: u32) -> Option<std::os::fd::OwnedFd> {
        use std::os::fd::FromRawFd;
        let fd = fd as i32;
        let ours = self.run(|kernel| kernel.channels.contains_key(&fd));
        // SAFETY: the read end of a pipe the kernel made for this caller,
        // adopted once (the caller's promise).
        ours.then(|| unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) })
    }

    /// A UAR page: the emulation's memfd, mapped again (as a second mmap
    /// of the kernel's page would be).
    unsafe fn map_queue(&self, offset: u64, len: usize) -> Result<SharedMapping, Errno> {
        self.run(|kernel| {
            let memfd = kernel
                .uar_memfd(offset, len)
                .map_err(Errno::from_raw_os_error)?;
            // SAFETY: the emulation's own memfd of `len` bytes, which no
            // Rust reference covers (its users touch it through raw
            // pointers).
            unsafe { SharedMapping::map(memfd.as_fd(), 0, len) }
        })
    }

    unsafe fn invoke(&self, frame: &mut IoctlFrame) -> Result<(), Errno> {
        // SAFETY: an IoctlFrame is the header followed by its attributes
        // (repr(C)); the caller promises the buffers they point at are
        // valid for the call, and nothing else touches the frame meanwhile.
        let mut call = unsafe { Call::from_raw(std::ptr::from_mut(frame).cast()) };
        self.run(|kernel| kernel.ioctl(&mut call))
            .map_err(Errno::from_raw_os_error)
    }
}
