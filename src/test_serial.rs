//! Unit tests that fork, and unit tests that watch a descriptor close, run
//! one at a time: a forked child holds a copy of every descriptor open in
//! the test binary at `fork()` until it exits, so a pipe another test
//! closed still has a reader (seen in the VM: "no reader left" failed while
//! a fork test's child was alive).

use std::sync::{Mutex, MutexGuard};

static SERIAL: Mutex<()> = Mutex::new(());

/// Held by a test while it forks and waits for its child, or while it
/// expects a descriptor it closed to be gone.
pub(crate) fn fork_or_fd_watch() -> MutexGuard<'static, ()> {
    SERIAL
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}
