//! A forked child must be able to use a `ForkSafety` whose tracker lock was
//! held by another thread of the parent at the moment of `fork()`.
//!
//! A thread of this process blocks inside a custom [`Advisor`] (so inside
//! `dontfork_range`, with the tracker's lock held) while the main thread
//! forks. In the child that thread does not exist, so a lock it held would
//! stay locked forever; the child's own `dontfork_range` / `dofork_range`
//! must still finish. The parent gives the child 10 s, then kills it.
//!
//! This file holds a single test, so no other test forks or blocks while the
//! child runs.

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::{fork, ForkResult};
use uverbs::fork::{Advice, Advisor, ForkMode, ForkSafety, PageSizing};

const P: usize = 4096;
/// Fake addresses: the gate advisor never calls madvise.
const PARENT_RANGE: usize = 0x7000_0000;
const CHILD_RANGE: usize = 0x7100_0000;

/// Blocks the first advice call until released; every later call returns
/// at once without touching any lock.
struct Gate {
    armed: AtomicBool,
    entered: Sender<()>,
    release: Mutex<Receiver<()>>,
}

struct GateRef(Arc<Gate>);

impl Advisor for GateRef {
    fn advise(&self, _: usize, _: usize, _: Advice) -> io::Result<()> {
        if self.0.armed.swap(false, Ordering::SeqCst) {
            let _ = self.0.entered.send(());
            // Bounded: the parent releases us, or we give up after 30 s.
            let _ = self
                .0
                .release
                .lock()
                .unwrap()
                .recv_timeout(Duration::from_secs(30));
        }
        Ok(())
    }
}

/// What the child reports through its exit code.
fn child_main(fs: &ForkSafety) -> i32 {
    if fs.dontfork_range(CHILD_RANGE, P).is_err() {
        return 2;
    }
    // The parent's half-done registration is not the child's business: the
    // child starts with an empty tracker.
    if fs.marked_ranges() != [(CHILD_RANGE, CHILD_RANGE + P, 1)] {
        return 3;
    }
    if fs.dofork_range(CHILD_RANGE, P).is_err() {
        return 4;
    }
    if !fs.marked_ranges().is_empty() {
        return 5;
    }
    0
}

#[test]
fn child_does_not_deadlock_on_a_lock_held_at_fork() {
    let (entered_tx, entered_rx) = mpsc::channel();
    let (release_tx, release_rx) = mpsc::channel();
    let gate = Arc::new(Gate {
        armed: AtomicBool::new(true),
        entered: entered_tx,
        release: Mutex::new(release_rx),
    });
    let fs = Arc::new(ForkSafety::with_page_sizing(
        ForkMode::Enabled,
        Box::new(GateRef(gate.clone())),
        PageSizing::Fixed(P),
    ));

    let holder = {
        let fs = fs.clone();
        std::thread::spawn(move || fs.dontfork_range(PARENT_RANGE, P))
    };
    entered_rx
        .recv_timeout(Duration::from_secs(10))
        .expect("the holder thread never reached the advisor");

    // SAFETY: the child runs the tracker (which allocates; glibc's malloc is
    // fork-safe) and _exit; it never returns into the test harness.
    let child = match unsafe { fork() }.expect("fork") {
        ForkResult::Child => {
            let code = child_main(&fs);
            // SAFETY: _exit never returns and runs no atexit handlers.
            unsafe { nix::libc::_exit(code) }
        }
        ForkResult::Parent { child } => child,
    };

    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        match waitpid(child, Some(WaitPidFlag::WNOHANG)).expect("waitpid") {
            WaitStatus::StillAlive if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(10));
            }
            WaitStatus::StillAlive => {
                let _ = kill(child, Signal::SIGKILL);
                let _ = waitpid(child, None);
                break None;
            }
            other => break Some(other),
        }
    };

    release_tx.send(()).unwrap();
    holder.join().unwrap().expect("the parent's mark");
    // The parent's state is its own, untouched by the child.
    assert_eq!(fs.marked_ranges(), [(PARENT_RANGE, PARENT_RANGE + P, 1)]);
    fs.dofork_range(PARENT_RANGE, P).unwrap();

    match status {
        None => panic!("the child deadlocked: still running after 10 s, killed"),
        Some(WaitStatus::Exited(_, 0)) => {}
        Some(other) => panic!("the child failed: {other:?}"),
    }
}
