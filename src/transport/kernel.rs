//! The kernel's uverbs file as a transport.

use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use rustix::ioctl::{Ioctl, IoctlOutput, Opcode};

use super::frame::{is_valid_output, IoctlFrame, WriteFrame, MAX_WRITE_BYTES};
use super::{RawCommand, Transport, TransportKind};
use crate::error::Errno;
use uverbs_uapi as sys;

/// An open `/dev/infiniband/uverbsN` and the framing its context uses.
#[derive(Debug)]
pub struct KernelFile {
    fd: OwnedFd,
    kind: TransportKind,
    driver_id: Option<u32>,
}

impl KernelFile {
    /// Wraps an opened uverbs file. `kind` must be `Ioctl` or `Write`;
    /// `Ioctl` (and [`Transport::invoke`]) need the device's driver id.
    pub fn new(fd: OwnedFd, kind: TransportKind, driver_id: Option<u32>) -> Result<Self, Errno> {
        match kind {
            TransportKind::Write => {}
            TransportKind::Ioctl if driver_id.is_some() => {}
            _ => return Err(Errno::INVAL),
        }
        Ok(KernelFile {
            fd,
            kind,
            driver_id,
        })
    }

    /// The driver id sent in ioctl headers, if known.
    pub fn driver_id(&self) -> Option<u32> {
        self.driver_id
    }

    /// rdma-core's probe: does this file accept `INVOKE_WRITE`? Sends only
    /// `WRITE_CMD = QUERY_DEVICE`; a kernel with the framework answers
    /// `ENOSPC` (CORE_IN missing). Returns what the kernel answered.
    pub fn probe_invoke_write(fd: BorrowedFd<'_>, driver_id: u32) -> Result<(), Errno> {
        let mut frame = IoctlFrame::new(
            sys::UVERBS_OBJECT_DEVICE,
            sys::UVERBS_METHOD_INVOKE_WRITE,
            driver_id,
        );
        let attr = super::frame::attr_const(
            sys::UVERBS_ATTR_WRITE_CMD,
            sys::IB_USER_VERBS_CMD_QUERY_DEVICE.into(),
        );
        frame.push(attr).expect("an empty frame has room");
        // SAFETY: the frame carries no pointers; the kernel reads the header
        // and attributes and at most writes back attribute flags.
        unsafe { verbs_ioctl(fd, &mut frame) }
    }

    fn execute_write(&self, cmd: &mut RawCommand<'_>) -> Result<usize, Errno> {
        let core_len = cmd.core_out.len();
        let resp_len = core_len + cmd.uhw_out.len();
        if resp_len > MAX_WRITE_BYTES {
            return Err(Errno::TOOBIG);
        }
        // The kernel writes core response and UHW out as one buffer; only
        // the part it may write is zeroed (the rest is never read).
        let mut response = MaybeUninit::<[u32; MAX_WRITE_BYTES / 4]>::uninit();
        let response = response.as_mut_ptr().cast::<u32>();
        // SAFETY: `resp_len / 4` words of the local buffer (`resp_len` is
        // a multiple of four, checked by the frame, and at most its size).
        unsafe { std::ptr::write_bytes(response, 0, resp_len / 4) };
        let mut frame = WriteFrame::default();
        let bytes = frame.encode(cmd.code, cmd.core_in, cmd.uhw_in, response as u64, resp_len)?;
        if rustix::io::write(&self.fd, bytes)? != bytes.len() {
            return Err(Errno::IO);
        }
        // The kernel wrote the answer through a pointer hidden in the frame's
        // bytes, during a system call that rustix declares as not writing
        // memory: an optimised build may assume the buffer still holds
        // zeros. Volatile loads make the kernel's words what we read.
        std::sync::atomic::compiler_fence(std::sync::atomic::Ordering::SeqCst);
        for i in 0..resp_len / 4 {
            // SAFETY: `i < resp_len / 4`, within the zeroed part of the buffer.
            let word = unsafe { std::ptr::read_volatile(response.add(i)) }.to_ne_bytes();
            let at = 4 * i;
            let out = if at < core_len {
                &mut cmd.core_out[at..at + 4]
            } else {
                &mut cmd.uhw_out[at - core_len..at - core_len + 4]
            };
            out.copy_from_slice(&word);
        }
        Ok(cmd.uhw_out.len())
    }

    fn execute_ioctl(&self, driver_id: u32, cmd: &mut RawCommand<'_>) -> Result<usize, Errno> {
        cmd.core_out.fill(0);
        cmd.uhw_out.fill(0);
        let core_out = (cmd.core_out.as_mut_ptr() as u64, cmd.core_out.len());
        let uhw_out = (cmd.uhw_out.as_mut_ptr() as u64, cmd.uhw_out.len());
        let mut frame = IoctlFrame::new(
            sys::UVERBS_OBJECT_DEVICE,
            sys::UVERBS_METHOD_INVOKE_WRITE,
            driver_id,
        );
        frame.set_invoke_write(cmd.code, cmd.core_in, cmd.uhw_in, core_out, uhw_out)?;
        // SAFETY: every pointer in the frame comes from the slices of `cmd`,
        // which outlive the call, with their exact lengths and directions.
        unsafe { verbs_ioctl(self.fd.as_fd(), &mut frame) }?;
        if !cmd.core_out.is_empty()
            && !frame
                .attr(sys::UVERBS_ATTR_CORE_OUT)
                .is_some_and(is_valid_output)
        {
            // The kernel said success but did not write the answer.
            return Err(Errno::PROTO);
        }
        let uhw_written = frame
            .attr(sys::UVERBS_ATTR_UHW_OUT)
            .is_some_and(is_valid_output);
        Ok(if uhw_written { cmd.uhw_out.len() } else { 0 })
    }
}

// SAFETY: execute() runs each command once, writes only into the command's
// output slices (the write() path through a zeroed bounce buffer of which it
// copies exactly the output lengths; the ioctl path zeroes them first) and
// returns at most `uhw_out.len()`.
unsafe impl Transport for KernelFile {
    fn kind(&self) -> TransportKind {
        self.kind
    }

    unsafe fn execute(&self, cmd: &mut RawCommand<'_>) -> Result<usize, Errno> {
        match (self.kind, self.driver_id) {
            (TransportKind::Ioctl, Some(driver_id)) => self.execute_ioctl(driver_id, cmd),
            _ => self.execute_write(cmd),
        }
    }

    unsafe fn invoke(
        &self,
        object_id: u16,
        method_id: u16,
        attrs: &mut [sys::ib_uverbs_attr],
    ) -> Result<(), Errno> {
        let driver_id = self.driver_id.ok_or(Errno::OPNOTSUPP)?;
        let mut frame = IoctlFrame::new(object_id, method_id, driver_id);
        for attr in attrs.iter() {
            frame.push(*attr)?;
        }
        // SAFETY: the caller guarantees the attributes' pointers.
        unsafe { verbs_ioctl(self.fd.as_fd(), &mut frame) }?;
        attrs.copy_from_slice(frame.attrs());
        Ok(())
    }
}

impl AsFd for KernelFile {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// `ioctl(fd, RDMA_VERBS_IOCTL, frame)`: one system call, nothing else
/// (public for tools that send pre-built frames, such as the benchmark's
/// floor).
///
/// # Safety
///
/// Every pointer carried by the frame's attributes must be valid for the
/// length and direction the method uses, for the duration of the call.
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
