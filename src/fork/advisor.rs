//! The `madvise` seam: who applies `MADV_DONTFORK` / `MADV_DOFORK`.

use crate::error::Errno;

/// Fork inheritance advice for a range of pages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Advice {
    /// `MADV_DONTFORK`: a child created by `fork()` does not inherit the pages.
    #[doc(alias = "MADV_DONTFORK")]
    DontFork,
    /// `MADV_DOFORK`: undo [`Advice::DontFork`]; children inherit the pages again.
    #[doc(alias = "MADV_DOFORK")]
    DoFork,
}

impl Advice {
    /// The advice that undoes this one.
    pub fn opposite(self) -> Advice {
        match self {
            Advice::DontFork => Advice::DoFork,
            Advice::DoFork => Advice::DontFork,
        }
    }
}

/// Applies fork advice to page ranges.
///
/// The default is [`MadviseAdvisor`]; tests substitute recording or failing
/// advisors to observe exactly which calls are made or to inject faults.
/// `addr` and `len` passed by the range tracker are always multiples of the
/// tracker's page size.
pub trait Advisor: Send + Sync {
    /// Applies `advice` to `[addr, addr + len)`.
    ///
    /// On Linux an unmapped address inside the range yields `ENOMEM`.
    fn advise(&self, addr: usize, len: usize, advice: Advice) -> Result<(), Errno>;
}

/// The real advisor: `madvise(2)` with `MADV_DONTFORK` / `MADV_DOFORK`.
#[derive(Debug, Clone, Copy, Default)]
#[doc(alias = "madvise")]
pub struct MadviseAdvisor;

impl Advisor for MadviseAdvisor {
    fn advise(&self, addr: usize, len: usize, advice: Advice) -> Result<(), Errno> {
        let advice = match advice {
            Advice::DontFork => rustix::mm::Advice::LinuxDontFork,
            Advice::DoFork => rustix::mm::Advice::LinuxDoFork,
        };
        // SAFETY: MADV_DONTFORK and MADV_DOFORK only change whether the VMAs
        // covering the range are copied into a child at fork(); they never
        // change, free or unmap memory of this process, so no Rust object can
        // be invalidated. The kernel validates the range (EINVAL for an
        // unaligned address, ENOMEM for unmapped parts).
        unsafe { rustix::mm::madvise(addr as *mut std::ffi::c_void, len, advice) }
    }
}
