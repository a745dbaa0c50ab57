//! Protection domains.

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::command::{AllocPd, DeallocMw, DeallocPd, DeregMr};
use crate::context::Context;
use crate::error::{Error, Op};

/// The kernel PD, shared by the [`ProtectionDomain`] and the MRs in it.
pub(crate) struct PdInner {
    pub(crate) ctx: Context,
    pub(crate) handle: u32,
    released: AtomicBool,
    /// Its memory windows, and the regions dropped while one was bound.
    pub(crate) windows: WindowBook,
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
        // Every MR and memory window holds an Arc of this, so none is left
        // in the PD here but the regions dropped while a window was bound
        // to them: their windows are gone now, deregister them first.
        self.windows.release_parked(&self.ctx);
        if !self.released.load(Ordering::Acquire) {
            let _ = self.dealloc();
        }
    }
}

/// The memory windows of a PD, and the regions dropped while a window was
/// bound to them (rxe refuses their `DEREG_MR` then: `EINVAL`). Such a
/// region is parked here and deregistered once the PD's windows allow it:
/// after each window deallocation, and when the PD is released. One lock
/// orders all of it, so that a region is never parked just after the last
/// window went.
#[derive(Default)]
pub(crate) struct WindowBook {
    state: Mutex<BookState>,
}

#[derive(Default)]
struct BookState {
    /// Whether a window was ever allocated in the PD: if not, no region
    /// of it is ever parked (nor its `DEREG_MR` retried).
    windowed: bool,
    /// Windows allocated and not yet deallocated.
    live: usize,
    /// Regions dropped while bound, their `DEREG_MR` still to do.
    parked: Vec<ParkedRegion>,
}

/// What deregistering a dropped region takes.
pub(crate) struct ParkedRegion {
    /// The region's handle.
    pub(crate) handle: u32,
    /// Its range, un-marked for fork once deregistered if `fork_marked`.
    pub(crate) addr: usize,
    pub(crate) length: usize,
    pub(crate) fork_marked: bool,
}

impl ParkedRegion {
    /// `DEREG_MR`, then the fork un-marking; true when the kernel took it.
    fn dereg(&self, ctx: &Context) -> bool {
        // SAFETY: DEREG_MR of a handle the dropped region handed over; sent
        // until the kernel takes it, never after.
        let sent = unsafe { ctx.run(Op::DeregMr, &DeregMr::new(self.handle), &mut []) };
        if sent.is_err() {
            return false;
        }
        if self.fork_marked {
            // The registration is gone; a failure only means a forked
            // child will not inherit these pages.
            let _ = ctx.inner.fork.dofork_range(self.addr, self.length);
        }
        true
    }
}

impl WindowBook {
    /// A region whose `DEREG_MR` the kernel refused as it was dropped: in
    /// a PD that has had windows, tried again under the lock (a window may
    /// have gone meanwhile), then parked if the PD has windows (which may
    /// be bound to it). False when it could be neither deregistered nor
    /// parked: the caller abandons it, as before windows existed.
    pub(crate) fn park(&self, ctx: &Context, region: ParkedRegion) -> bool {
        let mut state = self.state.lock();
        if !state.windowed {
            return false;
        }
        if region.dereg(ctx) {
            return true;
        }
        if state.live == 0 {
            return false;
        }
        state.parked.push(region);
        true
    }

    /// Runs `alloc` (an `ALLOC_MW`) under the lock, counting the window
    /// it made.
    pub(crate) fn allocate<T>(&self, alloc: impl FnOnce() -> Result<T, Error>) -> Result<T, Error> {
        let mut state = self.state.lock();
        let made = alloc()?;
        state.live += 1;
        state.windowed = true;
        Ok(made)
    }

    /// `DEALLOC_MW` of `handle`, then the parked regions' `DEREG_MR`s.
    pub(crate) fn dealloc(&self, ctx: &Context, handle: u32) -> Result<(), Error> {
        let mut state = self.state.lock();
        // SAFETY: DEALLOC_MW of a window handle we own, sent once.
        let sent = unsafe { ctx.run(Op::DeallocMw, &DeallocMw::new(handle), &mut []) };
        state.live = state.live.saturating_sub(1);
        state.parked.retain(|region| !region.dereg(ctx));
        sent.map(drop)
    }

    /// The PD is being released: its windows are gone (each held the PD),
    /// so the parked regions can be deregistered; one the kernel still
    /// refuses is abandoned until the context is closed.
    pub(crate) fn release_parked(&self, ctx: &Context) {
        let mut state = self.state.lock();
        for region in state.parked.drain(..) {
            if !region.dereg(ctx) {
                ctx.note_abandoned_registration();
            }
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

crate::error::hands_back_with_error! {
    [] DeallocError, "the PD (which tries the deallocation again)";
}

impl ProtectionDomain {
    pub(crate) fn new(ctx: Context, handle: u32) -> Self {
        ProtectionDomain {
            inner: Arc::new(PdInner {
                ctx,
                handle,
                released: AtomicBool::new(false),
                windows: WindowBook::default(),
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
