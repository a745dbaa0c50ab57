//! A forked child must be able to use a `ForkSafety` whose tracker lock was
//! held by another thread of the parent at the moment of `fork()`.
//!
//! A thread of this process blocks inside a blocking advisor (so inside
//! `dontfork_range`, with the tracker's lock held) while the main thread
//! forks. In the child that thread does not exist, so a lock it held would
//! stay locked forever; the child's own `dontfork_range` / `dofork_range`
//! must still finish. The parent gives the child 10 s, then kills it and
//! fails.
//!
//! This file holds a single test, so no other test forks or blocks while the
//! child runs.

#[macro_use]
mod common;

use std::time::Duration;

use common::{blocking_advisor, fork_safety_with, FAKE_PAGE as P};
use uverbs::fork::{ForkMode, ForkSafety};

/// Fake addresses: the blocking advisor never calls madvise.
const PARENT_RANGE: usize = 0x7000_0000;
const CHILD_RANGE: usize = 0x7100_0000;

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
    // The holder blocks for at most 30 s; the child gets 10 s.
    let (advisor, blocker) = blocking_advisor(Duration::from_secs(30));
    let fs = fork_safety_with(ForkMode::Enabled, advisor);

    blocker.arm();
    let holder = {
        let fs = fs.clone();
        std::thread::spawn(move || fs.dontfork_range(PARENT_RANGE, P))
    };
    assert!(
        blocker.entered(),
        "the holder thread never reached the advisor"
    );

    // The child runs the tracker (which allocates; glibc's malloc is
    // fork-safe) and _exit; it never returns into the test harness.
    let code = in_child!(Duration::from_secs(10), child_main(&fs));

    blocker.release();
    holder.join().unwrap().expect("the parent's mark");
    // The parent's state is its own, untouched by the child.
    assert_eq!(fs.marked_ranges(), [(PARENT_RANGE, PARENT_RANGE + P, 1)]);
    fs.dofork_range(PARENT_RANGE, P).unwrap();
    assert_eq!(code, 0, "the child failed");
}
