//! Which process an object belongs to.
//!
//! Kernel objects (contexts, PDs, MRs) belong to the process that created
//! them. After `fork()` the child holds copies of the parent's Rust values
//! and, over `ioctl(RDMA_VERBS_IOCTL)`, the kernel would let it destroy the
//! parent's objects through the inherited file (over `write()` it answers
//! `EACCES`). So every object records the [`Generation`] it was made in, and
//! code in any other process leaves the kernel alone.
//!
//! A generation changes in the child of every `fork()` made through the C
//! library (`fork`, `posix_spawn`'s and `system`'s children run no Rust code
//! of ours before `exec`). It is kept in an atomic counter bumped by a
//! `pthread_atfork` child handler, so "is this still my process?" is one
//! relaxed load, cheap enough for every command. A child made with a raw
//! `clone` system call that bypasses the C library is not noticed.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Once};

use crate::error::{Error, Op};

/// Bumped in every forked child (see [`Generation::current`]).
static GENERATION: AtomicU64 = AtomicU64::new(0);
static REGISTER: Once = Once::new();

/// The `pthread_atfork` child handler. Only an atomic add: async-signal-safe,
/// as a child of a multi-threaded process requires.
extern "C" fn in_child() {
    // Relaxed: the child has a single thread when this runs; later loads in
    // that thread see it by program order.
    GENERATION.fetch_add(1, Ordering::Relaxed);
}

/// The process an object was created in, as an opaque token.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Generation(u64);

impl Generation {
    /// The calling process's generation. The first call registers the fork
    /// handler; an object created before it cannot exist, because creating
    /// one calls this.
    pub(crate) fn current() -> Generation {
        REGISTER.call_once(|| {
            // SAFETY: `in_child` is an `extern "C" fn()` that only touches an
            // atomic; no prepare or parent handler is installed.
            let rc = unsafe { libc::pthread_atfork(None, None, Some(in_child)) };
            // pthread_atfork fails only with ENOMEM; without the handler
            // children would pass for their parent, so refuse to go on.
            assert_eq!(rc, 0, "pthread_atfork failed: {rc}");
        });
        // Relaxed: the value only ever changes in a freshly forked child,
        // before any other thread exists there.
        Generation(GENERATION.load(Ordering::Relaxed))
    }

    /// True in the process this generation was taken in, false in any
    /// process forked from it since.
    pub(crate) fn is_current(self) -> bool {
        // Relaxed: see `current`; the handler is registered, because `self`
        // came from `current`.
        GENERATION.load(Ordering::Relaxed) == self.0
    }

    /// [`Error::ForeignProcess`] for `op` on `device` unless this is the
    /// process the generation was taken in: the one check every object that
    /// a forked child inherits makes before it touches anything.
    #[inline]
    pub(crate) fn check(self, op: Op, device: &Arc<str>) -> Result<(), Error> {
        if self.is_current() {
            Ok(())
        } else {
            Err(Error::ForeignProcess {
                op,
                device: device.clone(),
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_forked_child_is_another_generation() {
        let parent = Generation::current();
        assert!(parent.is_current());
        // SAFETY: the child only loads an atomic.
        let code = unsafe { crate::test_serial::in_child(|| i32::from(parent.is_current())) };
        assert_eq!(code, 0, "the child is a generation of its own");
        assert!(parent.is_current(), "the parent stays itself");
    }
}
