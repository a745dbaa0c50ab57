//! Protection domains.

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::command::{AllocPd, DeallocPd};
use crate::context::Context;
use crate::error::{Error, Op};

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
#[non_exhaustive]
pub struct DeallocError {
    /// The PD, unchanged.
    pub pd: ProtectionDomain,
    /// Why the kernel refused (`EBUSY` while memory regions use it).
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
}

impl Context {
    /// Allocates a protection domain.
    #[doc(alias = "ibv_alloc_pd")]
    pub fn alloc_pd(&self) -> Result<ProtectionDomain, Error> {
        // Room for the driver's answer, which mlx5 writes whether or not
        // there is any (and fails with EFAULT where there is none).
        let mut uhw_out = [0u8; crate::provider::MAX_ALLOC_PD_UHW_OUT];
        let uhw_len = self.inner.provider.alloc_pd_uhw_out_len();
        // SAFETY: ALLOC_PD hands no memory to the device.
        let (resp, _) = unsafe { self.run(Op::AllocPd, &AllocPd::new(), &mut uhw_out[..uhw_len]) }?;
        Ok(ProtectionDomain::new(self.clone(), resp.pd_handle))
    }
}
