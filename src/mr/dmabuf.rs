//! Memory regions over a DMA-BUF (`ibv_reg_dmabuf_mr`): [`DmaBuf`], the
//! descriptor such a region owns, and its registration
//! ([`ProtectionDomain::reg_dmabuf_mr`]), the native method
//! `UVERBS_METHOD_REG_DMABUF_MR` (Linux 5.12), which has no write()
//! command.

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::{fmt, io};

use rustix::fs::{Mode, OFlags, SealFlags};
use rustix::ioctl::{Ioctl, IoctlOutput, Opcode};

use crate::error::{Error, Op};
use crate::flags::AccessFlags;
use crate::method::RegDmabufMr;
use crate::pd::ProtectionDomain;

use super::MemoryRegion;

/// A DMA-BUF: the descriptor of a buffer another kernel driver exports
/// (a GPU's memory, `/dev/udmabuf` over a memfd, a DMA heap), which a
/// device that can import it registers with
/// [`ProtectionDomain::reg_dmabuf_mr`].
///
/// It owns its descriptor and closes it when dropped; a region registered
/// over it keeps it open until after its `DEREG_MR`. Nothing checks that
/// the descriptor is a DMA-BUF: the kernel refuses a registration over
/// anything else.
pub struct DmaBuf {
    fd: OwnedFd,
}

impl fmt::Debug for DmaBuf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DmaBuf")
            .field("fd", &self.fd.as_raw_fd())
            .finish()
    }
}

/// `struct udmabuf_create` (`<linux/udmabuf.h>`).
#[repr(C)]
struct UdmabufCreate {
    memfd: u32,
    flags: u32,
    offset: u64,
    size: u64,
}

/// `UDMABUF_FLAGS_CLOEXEC`.
const UDMABUF_FLAGS_CLOEXEC: u32 = 0x01;

/// `UDMABUF_CREATE`: `_IOW('u', 0x42, struct udmabuf_create)`.
const UDMABUF_CREATE: Opcode = rustix::ioctl::opcode::write::<UdmabufCreate>(b'u', 0x42);

/// The `UDMABUF_CREATE` ioctl, which answers the new DMA-BUF's descriptor.
struct CreateUdmabuf(UdmabufCreate);

// SAFETY: UDMABUF_CREATE reads one `struct udmabuf_create` (`_IOW`) from
// the pointer and writes nothing there; its return value is a new
// descriptor the caller owns.
unsafe impl Ioctl for CreateUdmabuf {
    type Output = OwnedFd;
    const IS_MUTATING: bool = false;

    fn opcode(&self) -> Opcode {
        UDMABUF_CREATE
    }

    fn as_ptr(&mut self) -> *mut core::ffi::c_void {
        (&mut self.0 as *mut UdmabufCreate).cast()
    }

    unsafe fn output_from_ptr(
        out: IoctlOutput,
        _: *mut core::ffi::c_void,
    ) -> rustix::io::Result<OwnedFd> {
        // SAFETY: a successful UDMABUF_CREATE returns a new descriptor,
        // installed in this process and owned by no one else.
        Ok(unsafe { OwnedFd::from_raw_fd(out) })
    }
}

impl DmaBuf {
    /// Takes `fd` as a DMA-BUF (it is not checked here).
    pub fn from_fd(fd: OwnedFd) -> DmaBuf {
        DmaBuf { fd }
    }

    /// Hands the descriptor back.
    pub fn into_fd(self) -> OwnedFd {
        self.fd
    }

    /// A second descriptor of the same buffer (`dup`), e.g. to register
    /// another range of it.
    pub fn try_clone(&self) -> io::Result<DmaBuf> {
        Ok(DmaBuf {
            fd: self.fd.try_clone()?,
        })
    }

    /// A DMA-BUF over `size` bytes at `offset` of `memfd`, made by
    /// `/dev/udmabuf` (`UDMABUF_CREATE`, close-on-exec), which pins the
    /// memfd's pages while the buffer lives.
    ///
    /// The kernel wants a memfd sealed against shrinking (`F_SEAL_SHRINK`)
    /// and not against writing, and `offset` and `size` page multiples
    /// within it (else `EINVAL`); `/dev/udmabuf` exists where the kernel
    /// has `CONFIG_UDMABUF` (Debian's 6.12 builds it in, its 6.1 does not:
    /// `ENOENT`). [`new_udmabuf`](Self::new_udmabuf) makes the memfd too.
    pub fn from_memfd(memfd: impl AsFd, offset: u64, size: u64) -> io::Result<DmaBuf> {
        let memfd = memfd.as_fd().as_raw_fd();
        let dev = rustix::fs::open(
            "/dev/udmabuf",
            OFlags::RDWR | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        let create = CreateUdmabuf(UdmabufCreate {
            memfd: memfd as u32,
            flags: UDMABUF_FLAGS_CLOEXEC,
            offset,
            size,
        });
        // SAFETY: CreateUdmabuf's contract: the argument is a live
        // `udmabuf_create` owned by `create` for the whole call.
        let fd = unsafe { rustix::ioctl::ioctl(&dev, create) }?;
        Ok(DmaBuf { fd })
    }

    /// A memfd of `size` bytes (a page multiple), sealed against
    /// shrinking, and a DMA-BUF over all of it
    /// ([`from_memfd`](Self::from_memfd)): the buffer, and the memfd (map
    /// it to reach the bytes; dropping it leaves the buffer whole).
    pub fn new_udmabuf(size: u64) -> io::Result<(DmaBuf, OwnedFd)> {
        let memfd = rustix::fs::memfd_create(
            "uverbs-udmabuf",
            rustix::fs::MemfdFlags::CLOEXEC | rustix::fs::MemfdFlags::ALLOW_SEALING,
        )?;
        rustix::fs::ftruncate(&memfd, size)?;
        rustix::fs::fcntl_add_seals(&memfd, SealFlags::SHRINK)?;
        let buf = DmaBuf::from_memfd(&memfd, 0, size)?;
        Ok((buf, memfd))
    }
}

impl From<OwnedFd> for DmaBuf {
    fn from(fd: OwnedFd) -> DmaBuf {
        DmaBuf::from_fd(fd)
    }
}

impl From<DmaBuf> for OwnedFd {
    fn from(buf: DmaBuf) -> OwnedFd {
        buf.fd
    }
}

impl AsFd for DmaBuf {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

impl AsRawFd for DmaBuf {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

/// A failed [`ProtectionDomain::reg_dmabuf_mr`]: the DMA-BUF is handed
/// back, still open.
#[derive(Debug, thiserror::Error)]
#[error("{error}")]
#[non_exhaustive]
pub struct RegDmabufError {
    /// The buffer, unchanged; dropping it closes it.
    pub dmabuf: DmaBuf,
    /// Why the registration was refused.
    pub error: Error,
}

crate::error::hands_back_with_error! {
    [] RegDmabufError, "the DMA-BUF (which closes it)";
}

/// The access a DMA-BUF region may have: the kernel refuses any other
/// bit with `EINVAL`.
const DMABUF_ACCESS: AccessFlags = AccessFlags::LOCAL_WRITE
    .union(AccessFlags::REMOTE_READ)
    .union(AccessFlags::REMOTE_WRITE)
    .union(AccessFlags::REMOTE_ATOMIC)
    .union(AccessFlags::RELAXED_ORDERING);

impl ProtectionDomain {
    /// Registers `length` bytes at `offset` of the DMA-BUF `dmabuf`, which
    /// the device sees at `iova` (`ibv_reg_dmabuf_mr`). The region owns
    /// the descriptor and closes it after its `DEREG_MR`; a refusal hands
    /// it back in the [`RegDmabufError`].
    ///
    /// The region's [`addr`](MemoryRegion::addr) is `iova`, an address in
    /// the device's view and no pointer of this process (libibverbs puts
    /// `offset` in `ibv_mr.addr`); its [`sge`](MemoryRegion::sge) and
    /// [`remote`](MemoryRegion::remote) count from `iova`, as the keys do.
    ///
    /// It is the native method `UVERBS_METHOD_REG_DMABUF_MR`: no write()
    /// command exists, so a context on the [`Write`](crate::transport::TransportKind::Write)
    /// transport (or one whose driver id is unknown) refuses it before
    /// anything is sent, with [`Error::Unsupported`]. The kernel answers
    /// `EOPNOTSUPP` ([`Error::Os`]) where the driver cannot import
    /// DMA-BUFs: rxe and siw (they lack `reg_user_mr_dmabuf`), on every
    /// kernel; `EPROTONOSUPPORT` before Linux 5.12; `EINVAL` where `offset`
    /// and `iova` differ in their offset within a page, the access has a
    /// bit other than `LOCAL_WRITE`, `REMOTE_READ`, `REMOTE_WRITE`,
    /// `REMOTE_ATOMIC` and `RELAXED_ORDERING`, or the range is not inside
    /// the buffer. A range whose end overflows is refused here
    /// ([`Error::InvalidInput`]), as is an access outside that set.
    ///
    /// **No re-registration.** The kernel cannot re-register a DMA-BUF
    /// region, and libibverbs refuses `ibv_rereg_mr` of one with `EINVAL`
    /// before sending; so do [`MemoryRegion::apply`] and the forms built on
    /// it ([`ReregOutcome::Input`](crate::mr::ReregOutcome::Input), nothing
    /// sent). Register anew instead.
    ///
    /// **Fork safety.** Nothing is marked `MADV_DONTFORK`: the region names
    /// no range of this process's address space, only the buffer, whose
    /// pages the exporter owns and a forked child cannot make copy-on-write
    /// under the device. A mapping of the buffer (or of the memfd under a
    /// udmabuf) is `MAP_SHARED`, which fork shares rather than copies.
    ///
    /// Safe, unlike [`reg_mr`](Self::reg_mr): the device gets the buffer's
    /// memory, which the kernel keeps alive with its own reference while
    /// the region is registered, not memory of this process named by a
    /// pointer. Bytes the device writes there show in every mapping of the
    /// buffer, as with any shared mapping another agent writes.
    #[doc(alias = "ibv_reg_dmabuf_mr")]
    pub fn reg_dmabuf_mr(
        &self,
        dmabuf: DmaBuf,
        offset: u64,
        length: usize,
        iova: u64,
        access: AccessFlags,
    ) -> Result<MemoryRegion, RegDmabufError> {
        match self.send_reg_dmabuf_mr(&dmabuf, offset, length, iova, access) {
            Ok(keys) => Ok(MemoryRegion::over_dmabuf(
                &self.inner,
                keys,
                dmabuf,
                iova,
                length,
                access,
            )),
            Err(error) => Err(RegDmabufError { dmabuf, error }),
        }
    }

    /// The checks, then `REG_DMABUF_MR`.
    fn send_reg_dmabuf_mr(
        &self,
        dmabuf: &DmaBuf,
        offset: u64,
        length: usize,
        iova: u64,
        access: AccessFlags,
    ) -> Result<crate::method::DmabufMrKeys, Error> {
        const OP: Op = Op::RegDmabufMr;
        let ctx = &self.inner.ctx;
        let device = &ctx.inner.device;
        ctx.check_process(OP)?;
        let length64 = length as u64;
        if offset.checked_add(length64).is_none() || iova.checked_add(length64).is_none() {
            return Err(Error::input(
                OP,
                device,
                "offset + length or iova + length overflows",
            ));
        }
        if !DMABUF_ACCESS.contains(access) {
            return Err(Error::input(
                OP,
                device,
                "a DMA-BUF region takes only LOCAL_WRITE, REMOTE_READ, REMOTE_WRITE, REMOTE_ATOMIC and RELAXED_ORDERING",
            ));
        }
        let transport = ctx.inner.transport.as_ref();
        let driver = match ctx.inner.driver_id {
            Some(d) if transport.kind().sends_methods() => d.0,
            _ => {
                return Err(Error::Unsupported {
                    op: OP,
                    device: device.clone(),
                    reason: "REG_DMABUF_MR is a native ioctl method (no write() command exists): this context sends none (write() transport, or the driver id is unknown)",
                })
            }
        };
        let fd = dmabuf.as_raw_fd() as u32;
        let cmd = RegDmabufMr::new(self.inner.handle, offset, length64, iova, fd, access.bits());
        // SAFETY: the method names only the PD, the buffer's descriptor
        // (alive: borrowed) and its own outputs; the memory the device
        // gets is the buffer's, which the kernel holds by its own reference.
        unsafe { cmd.run(transport, driver) }.map_err(|e| Error::os(OP, device, e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::context::Context;
    use crate::error::Errno;
    use crate::mr::{ReregFlags, ReregOutcome};
    use crate::provider::driver::DriverId;
    use crate::transport::{RecordingTransport, TransportKind};
    use std::sync::Arc;
    use uverbs_uapi as sys;

    /// A descriptor that stands for a DMA-BUF: the fakes never look at it.
    fn fake_buf() -> DmaBuf {
        let fd = rustix::fs::memfd_create("fake-dmabuf", rustix::fs::MemfdFlags::CLOEXEC)
            .expect("memfd_create");
        DmaBuf::from_fd(fd)
    }

    fn method_count(fake: &RecordingTransport) -> usize {
        fake.count_of_method(sys::UVERBS_OBJECT_MR, sys::UVERBS_METHOD_REG_DMABUF_MR)
    }

    #[test]
    fn the_method_carries_every_input_and_a_refusal_hands_the_buffer_back() {
        let fake = Arc::new(RecordingTransport::new());
        let ctx = Context::over_fake(Some(DriverId::RXE), Box::new(fake.clone()));
        let pd = ctx.alloc_pd().unwrap();
        let buf = fake_buf();
        let raw = buf.as_raw_fd();
        let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ;
        // The fake kernel knows no REG_DMABUF_MR: a kernel before 5.12.
        let err = pd
            .reg_dmabuf_mr(buf, 0x1000, 0x3000, 0x7f00_0000_1000, access)
            .unwrap_err();
        assert_eq!(err.error.op(), Op::RegDmabufMr);
        assert_eq!(
            err.error.errno(),
            Some(Errno::PROTONOSUPPORT),
            "{}",
            err.error
        );
        assert_eq!(
            err.dmabuf.as_raw_fd(),
            raw,
            "the same descriptor, still open"
        );
        let m = fake.methods().pop().unwrap();
        let input = |id| m.attr(id).map(|a| (a.len, a.data));
        assert_eq!(input(1), Some((0, u64::from(pd.handle()))), "PD_HANDLE");
        assert_eq!(input(2), Some((8, 0x1000)), "OFFSET");
        assert_eq!(input(3), Some((8, 0x3000)), "LENGTH");
        assert_eq!(input(4), Some((8, 0x7f00_0000_1000)), "IOVA");
        assert_eq!(input(5), Some((4, raw as u64)), "FD");
        assert_eq!(
            input(6),
            Some((4, u64::from(access.bits()))),
            "ACCESS_FLAGS"
        );
        assert_eq!(fake.live_mrs(), 0);

        // The kernel's EOPNOTSUPP (rxe, siw) comes back as it is.
        fake.fail_next_method(
            sys::UVERBS_OBJECT_MR,
            sys::UVERBS_METHOD_REG_DMABUF_MR,
            Errno::OPNOTSUPP,
        );
        let err = pd
            .reg_dmabuf_mr(err.dmabuf, 0, 4096, 0, AccessFlags::empty())
            .unwrap_err();
        assert!(
            matches!(
                err.error,
                Error::Os {
                    errno: Errno::OPNOTSUPP,
                    op: Op::RegDmabufMr,
                    ..
                }
            ),
            "{:?}",
            err.error
        );
        assert_eq!(Error::from(err).op(), Op::RegDmabufMr);
    }

    #[test]
    fn refused_before_sending_over_write_and_for_bad_input() {
        let fake = Arc::new(RecordingTransport::with_kind(TransportKind::Write));
        let ctx = Context::over_fake(Some(DriverId::RXE), Box::new(fake.clone()));
        let pd = ctx.alloc_pd().unwrap();
        let err = pd
            .reg_dmabuf_mr(fake_buf(), 0, 4096, 0, AccessFlags::LOCAL_WRITE)
            .unwrap_err();
        assert!(
            matches!(
                err.error,
                Error::Unsupported {
                    op: Op::RegDmabufMr,
                    ..
                }
            ),
            "{:?}",
            err.error
        );
        assert_eq!(err.error.errno(), Some(Errno::OPNOTSUPP));

        let fake = Arc::new(RecordingTransport::new());
        let ctx = Context::over_fake(Some(DriverId::RXE), Box::new(fake.clone()));
        let pd = ctx.alloc_pd().unwrap();
        let mut buf = fake_buf();
        for (offset, length, iova, access) in [
            (u64::MAX, 1, 0, AccessFlags::empty()),
            (0, 2, u64::MAX - 1, AccessFlags::empty()),
            (0, 4096, 0, AccessFlags::MW_BIND),
            (0, 4096, 0, AccessFlags::ON_DEMAND),
        ] {
            let err = pd
                .reg_dmabuf_mr(buf, offset, length, iova, access)
                .unwrap_err();
            assert!(
                matches!(err.error, Error::InvalidInput { .. }),
                "{offset:#x} {length} {iova:#x} {access:?}: {:?}",
                err.error
            );
            buf = err.dmabuf;
        }
        assert_eq!(method_count(&fake), 0, "nothing sent");

        // No driver id: no native method.
        let fake = Arc::new(RecordingTransport::new());
        let ctx = Context::over_fake(None, Box::new(fake.clone()));
        let pd = ctx.alloc_pd().unwrap();
        let err = pd
            .reg_dmabuf_mr(buf, 0, 4096, 0, AccessFlags::empty())
            .unwrap_err();
        assert!(
            matches!(err.error, Error::Unsupported { .. }),
            "{:?}",
            err.error
        );
        assert_eq!(method_count(&fake), 0);
    }

    #[test]
    fn a_dmabuf_region_owns_its_buffer_and_refuses_rereg() {
        let fake = Arc::new(RecordingTransport::new());
        let ctx = Context::over_fake(Some(DriverId::RXE), Box::new(fake.clone()));
        let pd = ctx.alloc_pd().unwrap();
        let buf = fake_buf();
        let raw = buf.as_raw_fd();
        // The file itself, to tell it from another opened under the same
        // number once it is closed (tests run on parallel threads).
        let identity = |fd: BorrowedFd<'_>| rustix::fs::fstat(fd).map(|st| (st.st_dev, st.st_ino));
        let ours = identity(buf.as_fd()).unwrap();
        let keys = crate::method::DmabufMrKeys {
            handle: 77,
            lkey: 0x11,
            rkey: 0x22,
        };
        let mut mr = MemoryRegion::over_dmabuf(
            &pd.inner,
            keys,
            buf,
            0x10_0000,
            0x4000,
            AccessFlags::LOCAL_WRITE,
        );
        assert_eq!(mr.dmabuf().map(AsRawFd::as_raw_fd), Some(raw));
        assert_eq!((mr.lkey(), mr.rkey(), mr.handle()), (0x11, 0x22, 77));
        let sge = mr.sge(0x100..0x200).unwrap();
        assert_eq!((sge.addr, sge.length, sge.lkey), (0x10_0100, 0x100, 0x11));
        assert_eq!(mr.remote(0x10..).unwrap().addr, 0x10_0010);

        let before = fake.count();
        let err = mr.set_access(AccessFlags::empty()).unwrap_err();
        assert_eq!(err.outcome(), ReregOutcome::Input);
        assert_eq!(err.errno(), Errno::INVAL);
        // SAFETY: refused before anything is done with the range.
        let err = unsafe {
            mr.rereg(
                ReregFlags::ACCESS,
                None,
                std::ptr::null_mut(),
                0,
                AccessFlags::empty(),
            )
        }
        .unwrap_err();
        assert_eq!(err.outcome(), ReregOutcome::Input);
        assert_eq!(fake.count(), before, "no REREG_MR sent");

        // Dropped: DEREG_MR, then the descriptor is closed.
        drop(mr);
        assert_eq!(fake.count_of(sys::IB_USER_VERBS_CMD_DEREG_MR), 1);
        // SAFETY: only asks which file the number names now (none, or one
        // another test opened since); nothing uses it.
        let fd = unsafe { BorrowedFd::borrow_raw(raw) };
        assert_ne!(identity(fd), Ok(ours), "closed with the region");
    }
}
