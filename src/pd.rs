//! Protection domains.

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::buffer::{BufferMr, StableBuffer};
use crate::command::DeallocPd;
use crate::context::Context;
use crate::error::{Error, Op};
use crate::flags::AccessFlags;
use crate::mr::MemoryRegion;

/// The kernel PD, shared by the [`ProtectionDomain`] and the MRs in it.
pub(crate) struct PdInner {
    pub(crate) ctx: Context,
    pub(crate) handle: u32,
    released: AtomicBool,
}

impl PdInner {
    fn dealloc(&self) -> Result<(), Error> {
        // SAFETY: DEALLOC_PD of our own handle; it is marked released on
        // success so it is never sent twice.
        unsafe {
            self.ctx
                .run(Op::DeallocPd, &DeallocPd::new(self.handle), &mut [])
        }?;
        self.released.store(true, Ordering::Release);
        Ok(())
    }
}

impl Drop for PdInner {
    fn drop(&mut self) {
        // Every MR holds an Arc of this, so no MR is left in the PD here.
        if !self.released.load(Ordering::Acquire) {
            let _ = self.dealloc();
        }
    }
}

/// A protection domain (`struct ibv_pd`): the scope in which memory regions
/// and queue pairs may be used together.
///
/// Dropping it deallocates it. Memory regions keep their PD alive, so a PD
/// is only released in the kernel after the last MR in it is gone, whatever
/// the drop order.
#[doc(alias = "ibv_pd")]
pub struct ProtectionDomain {
    pub(crate) inner: Arc<PdInner>,
}

impl fmt::Debug for ProtectionDomain {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        debug_object(f, "ProtectionDomain", &self.inner.ctx, self.inner.handle).finish()
    }
}

/// How a kernel object prints: `name { device, handle, … }`; the caller
/// adds its own fields and finishes. One place for the fields every kernel
/// object (PD, CQ, QP) shows first.
pub(crate) fn debug_object<'a, 'b>(
    f: &'a mut fmt::Formatter<'b>,
    name: &str,
    ctx: &Context,
    handle: u32,
) -> fmt::DebugStruct<'a, 'b> {
    let mut d = f.debug_struct(name);
    d.field("device", &ctx.device_name())
        .field("handle", &handle);
    d
}

/// A failed [`ProtectionDomain::dealloc`]: the PD is handed back, still valid.
#[derive(Debug, thiserror::Error)]
#[error("{error}")]
pub struct DeallocError {
    /// The PD, unchanged.
    pub pd: ProtectionDomain,
    /// Why the kernel refused (`EBUSY` while memory regions use it).
    pub error: Error,
}

/// Why a [`BufferMr`] refuses access a remote peer could write through.
pub(crate) const PEER_WRITABLE_BUFFER: &str = "a BufferMr hands out plain slices, so remote peers may not write it (REMOTE_WRITE, REMOTE_ATOMIC, MW_BIND): use reg_remote_buffer";

/// A failed [`ProtectionDomain::reg_buffer`]: the buffer is handed back.
#[derive(Debug, thiserror::Error)]
#[error("{error}")]
pub struct RegBufferError<B> {
    /// The buffer, not registered.
    pub buffer: B,
    /// Why the registration failed.
    pub error: Error,
}

impl ProtectionDomain {
    pub(crate) fn new(ctx: Context, handle: u32) -> Self {
        ProtectionDomain {
            inner: Arc::new(PdInner {
                ctx,
                handle,
                released: AtomicBool::new(false),
            }),
        }
    }

    /// The kernel's handle for this PD.
    pub fn handle(&self) -> u32 {
        self.inner.handle
    }

    /// The context the PD belongs to.
    pub fn context(&self) -> &Context {
        &self.inner.ctx
    }

    /// Deallocates the PD now and reports the kernel's answer. While memory
    /// regions still use the PD the kernel answers `EBUSY`, and the PD comes
    /// back in the error, unchanged.
    #[doc(alias = "ibv_dealloc_pd")]
    pub fn dealloc(self) -> Result<(), DeallocError> {
        match self.inner.dealloc() {
            Ok(()) => Ok(()),
            Err(error) => Err(DeallocError { pd: self, error }),
        }
    }

    /// Registers `length` bytes at `addr` with the given access.
    ///
    /// With fork safety enabled the range is marked `MADV_DONTFORK` before
    /// the command and un-marked again if it fails (not for `ON_DEMAND`).
    ///
    /// # Safety
    ///
    /// The range must stay mapped, and must not be reused for anything the
    /// device must not touch, until the kernel no longer references it: the
    /// device reads (and with write access, writes) it behind the compiler's
    /// back. That is when [`MemoryRegion::dereg`] returns `Ok`, when a
    /// re-registration moved the region elsewhere, or when the region is
    /// dropped and the kernel accepts the `DEREG_MR` that drop sends. If it
    /// refuses (rare: e.g. `EIO` once the device is gone), the registration
    /// is abandoned and lasts until the context is closed (every clone of
    /// the [`Context`](crate::Context) and every PD and MR made from it
    /// dropped); [`Context::abandoned_registrations`](crate::Context::abandoned_registrations)
    /// counts such cases. To free memory right after deregistering, use
    /// `dereg()` and handle its error; or use [`reg_buffer`](Self::reg_buffer),
    /// which leaks the buffer rather than free it under the device.
    ///
    /// In a child forked from the process that opened the context, the
    /// region is the parent's: dropping the child's copy sends nothing, and
    /// the child's copy of the memory is not registered.
    #[doc(alias = "ibv_reg_mr")]
    pub unsafe fn reg_mr(
        &self,
        addr: *mut u8,
        length: usize,
        access: AccessFlags,
    ) -> Result<MemoryRegion, Error> {
        // SAFETY: forwarded to the caller.
        unsafe { MemoryRegion::register(&self.inner, addr, length, access) }.map_err(Error::from)
    }

    /// Registers an owned, address-stable buffer. The buffer is
    /// deregistered before it is dropped, so this is safe.
    ///
    /// A [`BufferMr`] hands out plain slices of its bytes, so no remote peer
    /// may write them: access that lets one
    /// ([`AccessFlags::lets_peers_write`]: `REMOTE_WRITE`, `REMOTE_ATOMIC`,
    /// `MW_BIND`) is refused with [`Error::InvalidInput`], nothing sent and
    /// the buffer handed back. Register such memory with
    /// [`reg_remote_buffer`](Self::reg_remote_buffer).
    ///
    /// ```no_run
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use uverbs::AccessFlags;
    /// let ctx = uverbs::devices()?.first().ok_or("no device")?.open()?;
    /// let pd = ctx.alloc_pd()?;
    /// let buf = vec![0u8; 1 << 20].into_boxed_slice();
    /// let mr = pd.reg_buffer(buf, AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ)?;
    /// println!("lkey {:#x} rkey {:#x}", mr.lkey(), mr.rkey());
    /// # Ok(()) }
    /// ```
    pub fn reg_buffer<B: StableBuffer>(
        &self,
        buffer: B,
        access: AccessFlags,
    ) -> Result<BufferMr<B>, RegBufferError<B>> {
        if access.lets_peers_write() {
            let error = Error::input(
                Op::RegMr,
                &self.inner.ctx.inner.device,
                PEER_WRITABLE_BUFFER,
            );
            return Err(RegBufferError { buffer, error });
        }
        self.reg_buffer_unchecked(buffer, access)
    }

    /// [`reg_buffer`](Self::reg_buffer) with any access: the caller gives
    /// plain slices of a remotely writable region to no one.
    pub(crate) fn reg_buffer_unchecked<B: StableBuffer>(
        &self,
        buffer: B,
        access: AccessFlags,
    ) -> Result<BufferMr<B>, RegBufferError<B>> {
        // Leaked, not freed, if registering unwinds (a panicking advisor).
        let mut buffer = std::mem::ManuallyDrop::new(buffer);
        let (addr, len) = (buffer.as_mut_ptr(), buffer.len());
        // SAFETY: the BufferMr owns the buffer and deregisters before
        // dropping it; StableBuffer promises the address does not move.
        let result = unsafe { self.reg_mr(addr, len, access) };
        let buffer = std::mem::ManuallyDrop::into_inner(buffer);
        match result {
            Ok(mr) => Ok(BufferMr::new(mr, buffer)),
            Err(error) => Err(RegBufferError { buffer, error }),
        }
    }
}
