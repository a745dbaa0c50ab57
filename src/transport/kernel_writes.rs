//! The system calls through which the kernel writes this process's memory
//! at addresses it finds inside a frame.
//!
//! A command frame carries the addresses of its response (and, for methods,
//! its output attributes) as integers; the system call itself gets only the
//! frame. The compiler must therefore treat each such call as one that may
//! write any memory whose provenance was exposed, or an optimised build
//! goes on using what it stored in a response buffer before the call. This
//! module is the only place that makes such a call; every command stack
//! sends its frames through it:
//!
//! * [`write_command`]: a `write()` of a frame whose answer the kernel
//!   writes through the frame's response pointer. Used by the uverbs
//!   commands' legacy framing, the data path's doorbell, and every rdma_cm
//!   command (`GET_EVENT` included) of [`EventChannel`](crate::cm::EventChannel).
//! * [`verbs_ioctl`]: `ioctl(RDMA_VERBS_IOCTL)`, whose attributes point at
//!   the buffers the kernel fills.
//!
//! Their callers' part: derive every pointer the kernel writes through from
//! a `&mut` or a raw pointer of the buffer (never from a shared borrow, which
//! promises the memory does not change), expose it with
//! [`user_addr`](super::frame::user_addr), and touch the buffer through no
//! other path until the call has returned. System calls whose buffer is the
//! call's own argument (`read()` into a slice, `poll()`) are not this kind:
//! the compiler sees that pointer.
//!
//! `src/transport/kernel.rs` and `tests/cm_kernel_writes.rs` test both
//! stacks in optimised builds: their "kernel" is `/proc/self/mem`
//! positioned at the response buffer, so that `write()` really writes it.

use std::os::fd::{AsRawFd, BorrowedFd};

use rustix::ioctl::{Ioctl, IoctlOutput, Opcode};

use super::frame::IoctlFrame;
use crate::error::Errno;
use uverbs_uapi as sys;

/// `write(fd, frame)`: sends one command frame to a uverbs or rdma_cm file,
/// through a call the compiler must assume writes memory. Returns the bytes
/// written.
///
/// The kernel writes a command's response through a pointer that reaches it
/// only as an integer inside the frame. rustix's `write` is an asm block
/// marked `readonly` (a promise that the call writes no memory), so an
/// optimised build may go on using what it stored in the response buffer
/// before the call (release builds read back zeros). `libc::write` is a
/// foreign function, opaque to the compiler, which must assume that it
/// reads and writes any memory whose provenance was exposed; the frame's
/// pointers are exposed when they are encoded
/// ([`user_addr`](super::frame::user_addr)). So after the call, the
/// kernel's answer is read with ordinary loads.
///
/// Every command `write()` goes through here: the uverbs commands' legacy
/// framing, the data path's doorbell (a `POST_SEND`-style write whose frame
/// points at work requests and a response), and the rdma_cm commands.
///
/// # Safety
///
/// Every pointer that `frame` carries must have had its provenance exposed
/// (made with [`user_addr`](super::frame::user_addr) or another
/// pointer-to-integer cast) from a pointer that permits the accesses the
/// command on `fd` makes through it (for memory the kernel writes: derived
/// from a `&mut` or a raw pointer of the buffer, not from a shared
/// borrow), and be valid, for the whole call, for each of those reads and
/// writes. Nothing else (no other thread, no reference) may access the
/// memory the kernel writes while the call runs.
pub(crate) unsafe fn write_command(fd: BorrowedFd<'_>, frame: &[u8]) -> Result<usize, Errno> {
    // SAFETY: `frame` is valid for reads of `frame.len()` bytes and `fd` is
    // open (borrowed); the kernel's use of the frame's pointers is the
    // caller's promise.
    let written = unsafe { libc::write(fd.as_raw_fd(), frame.as_ptr().cast(), frame.len()) };
    // A negative return is the only failure, and leaves the code in errno.
    usize::try_from(written).map_err(|_| {
        std::io::Error::last_os_error()
            .raw_os_error()
            .map_or(Errno::IO, Errno::from_raw_os_error)
    })
}

/// `ioctl(fd, RDMA_VERBS_IOCTL, frame)`: one system call, nothing else
/// (public for tools that send pre-built frames, such as the benchmark's
/// floor).
///
/// The kernel writes through pointers that reach it only as integers in the
/// frame's attributes, so this call must be one the compiler assumes writes
/// memory. It is: `IS_MUTATING = true` makes rustix (1.x, `linux_raw`
/// backend) issue the plain `syscall!` asm, whose only options are `nostack`
/// and `preserves_flags` (not `readonly`, not `nomem`), and such an asm
/// block may read and write any memory whose provenance was exposed, like a
/// foreign call. (Its `IS_MUTATING = false` path is the `readonly` asm that
/// `rustix::io::write` uses, which would be wrong here.) The frame itself is
/// the asm's pointer operand; pointers inside it must be exposed, which
/// [`user_addr`](super::frame::user_addr) does.
///
/// # Safety
///
/// Every pointer carried by the frame's attributes must have had its
/// provenance exposed (made with [`user_addr`](super::frame::user_addr) or
/// another pointer-to-integer cast) from a pointer that permits the
/// accesses the method makes (output buffers: not from a shared borrow),
/// and be valid for the length and direction the method uses, for the
/// duration of the call.
pub unsafe fn verbs_ioctl(fd: BorrowedFd<'_>, frame: &mut IoctlFrame) -> Result<(), Errno> {
    struct VerbsIoctl<'a>(&'a mut IoctlFrame);

    // SAFETY: RDMA_VERBS_IOCTL takes a pointer to an ib_uverbs_ioctl_hdr with
    // its attributes behind it; the kernel reads `length` bytes and writes
    // back attribute flags inside that range, which `IoctlFrame` covers.
    unsafe impl Ioctl for VerbsIoctl<'_> {
        type Output = ();
        const IS_MUTATING: bool = true;

        fn opcode(&self) -> Opcode {
            sys::RDMA_VERBS_IOCTL as Opcode
        }

        fn as_ptr(&mut self) -> *mut core::ffi::c_void {
            (self.0 as *mut IoctlFrame).cast()
        }

        unsafe fn output_from_ptr(
            _: IoctlOutput,
            _: *mut core::ffi::c_void,
        ) -> rustix::io::Result<()> {
            Ok(())
        }
    }

    // SAFETY: see VerbsIoctl; pointer validity is the caller's promise.
    unsafe { rustix::ioctl::ioctl(fd, VerbsIoctl(frame)) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs::File;
    use std::os::fd::AsFd;

    #[test]
    fn write_command_reports_the_errno() {
        let read_only = File::open("/dev/null").unwrap();
        // SAFETY: the frame carries no pointers.
        let result = unsafe { write_command(read_only.as_fd(), &[0u8; 8]) };
        assert_eq!(result, Err(Errno::BADF));
    }

    #[test]
    fn write_command_writes_the_whole_frame() {
        let null = File::options().write(true).open("/dev/null").unwrap();
        // SAFETY: the frame carries no pointers; /dev/null takes any bytes.
        assert_eq!(unsafe { write_command(null.as_fd(), &[7u8; 24]) }, Ok(24));
    }
}
