//! Fork safety (placeholder until the fork-safety module lands): the
//! interface the core calls at libibverbs' points. Every call is a no-op.

use std::sync::{Arc, OnceLock};

/// Whether registered ranges are protected from fork.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ForkMode {
    /// No madvise calls.
    Disabled,
    /// Registered ranges are marked `MADV_DONTFORK`.
    Enabled,
    /// The kernel copies pinned pages at fork; nothing is needed.
    Unneeded,
}

/// The process's fork-safety state.
#[derive(Debug)]
pub struct ForkSafety {
    mode: ForkMode,
}

impl ForkSafety {
    /// The process-wide instance.
    pub fn global() -> Arc<ForkSafety> {
        static GLOBAL: OnceLock<Arc<ForkSafety>> = OnceLock::new();
        GLOBAL
            .get_or_init(|| {
                Arc::new(ForkSafety {
                    mode: ForkMode::Disabled,
                })
            })
            .clone()
    }

    /// The current mode.
    pub fn mode(&self) -> ForkMode {
        self.mode
    }

    /// Marks a range `MADV_DONTFORK` (no-op for now).
    pub fn dontfork_range(&self, _addr: usize, _len: usize) -> std::io::Result<()> {
        Ok(())
    }

    /// Un-marks a range (no-op for now).
    pub fn dofork_range(&self, _addr: usize, _len: usize) -> std::io::Result<()> {
        Ok(())
    }
}
