//! The kernel's uverbs file as a transport.

use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

use super::frame::{user_addr, IoctlFrame, WriteFrame};
use super::kernel_writes::{verbs_ioctl, write_command};
use super::method::Method;
use super::{RawCommand, SharedMapping, Transport, TransportKind};
use crate::error::Errno;
use uverbs_uapi as sys;

/// The largest response (core and UHW out) the write() path receives:
/// room for `EX_QUERY_DEVICE`'s 304-byte answer, with some to spare.
const MAX_RESPONSE_BYTES: usize = 512;

/// An open `/dev/infiniband/uverbsN` and the framing its context uses.
#[derive(Debug)]
pub struct KernelFile {
    fd: OwnedFd,
    kind: TransportKind,
    driver_id: Option<u32>,
}

impl KernelFile {
    /// Wraps an opened uverbs file. `kind` must be `Ioctl`, `Write` or
    /// `WriteWithMethods`; `Ioctl`, `WriteWithMethods` (and
    /// [`Transport::invoke`]) need the device's driver id.
    pub fn new(fd: OwnedFd, kind: TransportKind, driver_id: Option<u32>) -> Result<Self, Errno> {
        match kind {
            TransportKind::Write => {}
            TransportKind::Ioctl | TransportKind::WriteWithMethods if driver_id.is_some() => {}
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
        let answer = unsafe { verbs_ioctl(fd, &mut frame) };
        crate::trace::method(
            sys::UVERBS_OBJECT_DEVICE,
            sys::UVERBS_METHOD_INVOKE_WRITE,
            &answer,
        );
        answer
    }

    fn execute_write(&self, cmd: &mut RawCommand<'_>) -> Result<usize, Errno> {
        let core_len = cmd.core_out.len();
        let resp_len = core_len + cmd.uhw_out.len();
        if resp_len > MAX_RESPONSE_BYTES {
            return Err(Errno::TOOBIG);
        }
        // The header counts the response in words and the kernel puts UHW
        // out right after the core response: a core response that is not
        // whole words cannot be framed (the frame checks the total).
        // (Extended commands count in 64-bit words; their frame checks.)
        if core_len % 4 != 0 {
            return Err(Errno::INVAL);
        }
        // The kernel writes core response and UHW out as one buffer; only
        // the part it may write is zeroed (the rest is never read).
        let mut response = MaybeUninit::<[u8; MAX_RESPONSE_BYTES]>::uninit();
        let response = response.as_mut_ptr().cast::<u8>();
        // SAFETY: `resp_len <= MAX_RESPONSE_BYTES` bytes of the local buffer.
        unsafe { std::ptr::write_bytes(response, 0, resp_len) };
        let mut frame = WriteFrame::default();
        // `user_addr` exposes the buffer's provenance: `write_command` may
        // write through it.
        let bytes = if cmd.code & sys::IB_USER_VERBS_CMD_FLAG_EXTENDED != 0 {
            frame.encode_extended(
                cmd.code,
                cmd.core_in,
                cmd.uhw_in,
                user_addr(response),
                (core_len, cmd.uhw_out.len()),
            )?
        } else {
            frame.encode(
                cmd.code,
                cmd.core_in,
                cmd.uhw_in,
                user_addr(response),
                resp_len,
            )?
        };
        // SAFETY: the only pointer in the frame is `response`, exposed above
        // and valid for `resp_len` bytes (the frame's `out_words`), which is
        // all the kernel writes; only this raw pointer refers to the buffer.
        if unsafe { write_command(self.fd.as_fd(), bytes) }? != bytes.len() {
            return Err(Errno::IO);
        }
        // SAFETY: the first `resp_len` bytes were zeroed and since then at
        // most rewritten by the kernel; nothing else refers to them.
        let answer = unsafe { std::slice::from_raw_parts(response, resp_len) };
        let (core, uhw) = answer.split_at(core_len);
        cmd.core_out.copy_from_slice(core);
        cmd.uhw_out.copy_from_slice(uhw);
        Ok(cmd.uhw_out.len())
    }

    fn execute_ioctl(&self, driver_id: u32, cmd: &mut RawCommand<'_>) -> Result<usize, Errno> {
        let (method, outs) = Method::invoke_write(
            driver_id,
            cmd.code,
            cmd.core_in,
            cmd.uhw_in,
            cmd.core_out,
            cmd.uhw_out,
        );
        // SAFETY: the builder framed only `cmd`'s slices, borrowed across
        // the call; what the command does is the caller's promise
        // (`Transport::execute`).
        let done = unsafe { method.invoke(self) }?;
        if let Some(core) = outs.core {
            if done.read_bytes(core).is_none() {
                // The kernel said success but did not write the answer.
                return Err(Errno::PROTO);
            }
        }
        Ok(outs
            .uhw
            .and_then(|uhw| done.read_bytes(uhw))
            .map_or(0, |uhw| uhw.len()))
    }
}

// SAFETY: execute() runs each command once, writes only into the command's
// output slices (the write() path through a zeroed bounce buffer of which it
// copies exactly the output lengths; the ioctl path zeroes them first) and
// returns at most `uhw_out.len()`. adopt_fd() returns only the
// descriptor the kernel's GET_CONTEXT installed (the caller's promise).
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

    unsafe fn adopt_fd(&self, fd: u32) -> Option<OwnedFd> {
        // The kernel answers an `int` descriptor in a `__u32`: numbers above
        // `i32::MAX` are negative, never a descriptor.
        let fd = RawFd::try_from(fd).ok()?;
        // SAFETY: the caller passes the number that a successful command on
        // this file answered as a new descriptor: the kernel installed it in
        // this process, and nothing else owns it.
        Some(unsafe { OwnedFd::from_raw_fd(fd) })
    }

    unsafe fn map_queue(&self, offset: u64, len: usize) -> Result<SharedMapping, Errno> {
        // SAFETY: forwarded to the caller (an offset the kernel answered on
        // this file).
        unsafe { SharedMapping::map(self.fd.as_fd(), offset, len) }
    }

    unsafe fn write_prepared(&self, frame: &[u8]) -> Result<usize, Errno> {
        // SAFETY: forwarded to the caller; the fd is this file's, open.
        unsafe { write_command(self.fd.as_fd(), frame) }
    }

    fn command_fd(&self) -> Option<BorrowedFd<'_>> {
        Some(self.fd.as_fd())
    }

    unsafe fn invoke(&self, frame: &mut IoctlFrame) -> Result<(), Errno> {
        // The frame names its driver; a file opened without one (write()
        // only, driver unknown) has no business sending methods.
        if self.driver_id.is_none() {
            return Err(Errno::OPNOTSUPP);
        }
        // SAFETY: the caller guarantees the attributes' pointers.
        unsafe { verbs_ioctl(self.fd.as_fd(), frame) }
    }
}

impl AsFd for KernelFile {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs::File;
    use std::io::{Read, Seek, SeekFrom, Write};
    use std::os::fd::{AsRawFd, IntoRawFd};

    fn write_file(file: File) -> KernelFile {
        KernelFile::new(file.into(), TransportKind::Write, None).unwrap()
    }

    #[test]
    fn kinds_that_send_ioctls_need_the_driver_id() {
        let null = || -> OwnedFd { File::open("/dev/null").unwrap().into() };
        for kind in [TransportKind::Ioctl, TransportKind::WriteWithMethods] {
            assert_eq!(
                KernelFile::new(null(), kind, None).unwrap_err(),
                Errno::INVAL
            );
            let f = KernelFile::new(null(), kind, Some(14)).unwrap();
            assert_eq!(f.kind(), kind);
        }
        assert!(KernelFile::new(null(), TransportKind::Write, None).is_ok());
        assert_eq!(
            KernelFile::new(null(), TransportKind::Fake, Some(14)).unwrap_err(),
            Errno::INVAL
        );
        assert!(TransportKind::WriteWithMethods.sends_methods());
        assert!(!TransportKind::WriteWithMethods.creates_natively());
        assert!(!TransportKind::Write.sends_methods());
        assert!(TransportKind::Ioctl.creates_natively());
    }

    /// A command whose request carries the `u64 response` field and eight
    /// more bytes, answered into `core_out` and `uhw_out`.
    fn exchange(
        file: &KernelFile,
        core_out: &mut [u8],
        uhw_out: &mut [u8],
    ) -> Result<usize, Errno> {
        let core_in = [0x5au8; 16];
        let mut cmd = RawCommand {
            code: sys::IB_USER_VERBS_CMD_QUERY_DEVICE,
            core_in: &core_in,
            uhw_in: &[],
            core_out,
            uhw_out,
        };
        // SAFETY: QUERY_DEVICE hands no memory to anything; the "kernel"
        // here is /dev/null or this process's own memory file.
        unsafe { file.execute(&mut cmd) }
    }

    #[test]
    fn write_path_refuses_a_core_output_not_made_of_words() {
        // 6 + 2 bytes: the total is whole words, the core response is not.
        // This used to be written and then panic while splitting the answer.
        let file = write_file(File::options().write(true).open("/dev/null").unwrap());
        let (mut core, mut uhw) = ([0xffu8; 6], [0xffu8; 2]);
        assert_eq!(exchange(&file, &mut core, &mut uhw), Err(Errno::INVAL));
        let (mut core, mut uhw) = ([0xffu8; 6], [0xffu8; 6]);
        assert_eq!(exchange(&file, &mut core, &mut uhw), Err(Errno::INVAL));
        // Whole words still work: /dev/null swallows the frame and the
        // answer is the zeroed buffer.
        let (mut core, mut uhw) = ([0xffu8; 8], [0xffu8; 4]);
        assert_eq!(exchange(&file, &mut core, &mut uhw), Ok(4));
        assert_eq!((core, uhw), ([0; 8], [0; 4]));
    }

    /// Sends the same command through the same stack frame twice: first to
    /// a plain file, to learn where the response buffer is, then to this process's
    /// own memory file positioned at that buffer, so that `write()` really
    /// writes the response buffer, as the kernel's uverbs file does.
    #[inline(never)]
    fn exchange_at_same_depth(file: &KernelFile) -> ([u8; 8], [u8; 8], Result<usize, Errno>) {
        let (mut core, mut uhw) = ([0u8; 8], [0u8; 8]);
        let result = exchange(file, &mut core, &mut uhw);
        (core, uhw, result)
    }

    /// EX_QUERY_DEVICE's 304-byte answer fits the write() path's response
    /// buffer (it once did not: E2BIG); more than the buffer does not.
    #[test]
    fn write_path_takes_responses_larger_than_a_frame() {
        let file = write_file(File::options().write(true).open("/dev/null").unwrap());
        let mut core = [0xffu8; 304];
        assert_eq!(exchange(&file, &mut core, &mut []), Ok(0));
        assert_eq!(core, [0; 304]);
        let mut core = [0u8; MAX_RESPONSE_BYTES + 8];
        assert_eq!(exchange(&file, &mut core, &mut []), Err(Errno::TOOBIG));
    }

    #[test]
    fn write_path_returns_what_the_write_call_wrote_into_the_response() {
        let path = std::env::temp_dir().join(format!("uverbs-frame-{}", std::process::id()));
        let plain = write_file(File::create(&path).unwrap());
        let (_, _, first) = exchange_at_same_depth(&plain);
        assert_eq!(first, Ok(8));
        let mut frame = [0u8; 24];
        File::open(&path).unwrap().read_exact(&mut frame).unwrap();
        std::fs::remove_file(&path).unwrap();
        let response_ptr = u64::from_ne_bytes(frame[8..16].try_into().unwrap());

        let mut mem = File::options()
            .read(true)
            .write(true)
            .open("/proc/self/mem")
            .unwrap();
        mem.seek(SeekFrom::Start(response_ptr)).unwrap();
        let mem = write_file(mem);
        let (core, uhw, second) = exchange_at_same_depth(&mem);
        assert_eq!(second, Ok(8));
        // The "kernel" wrote the frame itself over the response buffer: the
        // header, then the response pointer (the same one: same stack).
        assert_eq!(core, frame[..8], "core response");
        assert_eq!(uhw, frame[8..16], "uhw response");
    }

    #[test]
    fn prepared_frames_and_queue_mappings_go_to_the_file() {
        let null = write_file(File::options().write(true).open("/dev/null").unwrap());
        // SAFETY: the frame carries no pointers; /dev/null takes any bytes.
        assert_eq!(unsafe { null.write_prepared(&[0u8; 32]) }, Ok(32));
        let zero = File::options()
            .read(true)
            .write(true)
            .open("/dev/zero")
            .unwrap();
        let zero = write_file(zero);
        let page = crate::page::page_size();
        // SAFETY: /dev/zero's shared mapping aliases nothing of ours.
        let map = unsafe { zero.map_queue(0, page) }.unwrap();
        assert_eq!(map.len(), page);
        // SAFETY: inside the fresh mapping.
        assert_eq!(unsafe { *map.as_ptr().as_ptr() }, 0);
    }

    #[test]
    fn kernel_file_adopts_the_async_fd_number_and_nothing_negative() {
        let file = write_file(File::options().write(true).open("/dev/null").unwrap());
        // SAFETY: numbers that cannot be descriptors are never adopted.
        for negative in [u32::MAX, 0x8000_0000] {
            assert!(unsafe { file.adopt_fd(negative) }.is_none());
        }
        // Stands in for the descriptor GET_CONTEXT installs: one nothing
        // else owns.
        let path = std::env::temp_dir().join(format!("uverbs-async-{}", std::process::id()));
        let raw = File::create(&path).unwrap().into_raw_fd();
        // SAFETY: `raw` was released by its File above; only this call owns it.
        let adopted = unsafe { file.adopt_fd(raw as u32) }.expect("a descriptor");
        assert_eq!(adopted.as_raw_fd(), raw);
        File::from(adopted).write_all(b"ok").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"ok");
        std::fs::remove_file(&path).unwrap();
    }
}
