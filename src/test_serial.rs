//! Unit tests that fork, and unit tests that watch a descriptor close, run
//! one at a time: a forked child holds a copy of every descriptor open in
//! the test binary at `fork()` until it exits, so a pipe another test
//! closed still has a reader (seen in the VM: "no reader left" failed while
//! a fork test's child was alive). [`in_child`] is the fork tests' one way
//! to fork.

use std::sync::{Mutex, MutexGuard};

static SERIAL: Mutex<()> = Mutex::new(());

/// Held by a test while it forks and waits for its child, or while it
/// expects a descriptor it closed to be gone.
pub(crate) fn fork_or_fd_watch() -> MutexGuard<'static, ()> {
    SERIAL
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Forks (holding [`fork_or_fd_watch`]); the child runs `child` (its exit
/// code; a panic is 99) and leaves with `_exit`; the parent gets the code,
/// waiting at most 10 s (then the child is killed and the test fails).
///
/// # Safety
///
/// `child` runs in a forked copy of a multi-threaded process: it may only
/// do what is sound there (no lock another thread may have held at
/// `fork()`; glibc keeps malloc usable). It works on the copies of the
/// parent's values.
pub(crate) unsafe fn in_child(child: impl FnOnce() -> i32) -> i32 {
    use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
    use nix::unistd::{fork, ForkResult};
    use std::time::{Duration, Instant};
    let _serial = fork_or_fd_watch();
    // SAFETY: the child runs `child`, sound in a forked child by the
    // caller's promise, and leaves with _exit.
    match unsafe { fork() }.expect("fork") {
        ForkResult::Child => {
            let code = std::panic::catch_unwind(std::panic::AssertUnwindSafe(child)).unwrap_or(99);
            // SAFETY: _exit never returns and runs no atexit handlers.
            unsafe { libc::_exit(code) }
        }
        ForkResult::Parent { child } => {
            let start = Instant::now();
            loop {
                match waitpid(child, Some(WaitPidFlag::WNOHANG)).expect("waitpid") {
                    WaitStatus::StillAlive if start.elapsed() < Duration::from_secs(10) => {
                        std::thread::sleep(Duration::from_millis(10))
                    }
                    WaitStatus::StillAlive => {
                        let _ = nix::sys::signal::kill(child, nix::sys::signal::SIGKILL);
                        let _ = waitpid(child, None);
                        panic!("the child did not exit within 10 s");
                    }
                    WaitStatus::Exited(_, code) => return code,
                    other => panic!("unexpected child status {other:?}"),
                }
            }
        }
    }
}
