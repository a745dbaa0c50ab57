//! The process-wide instance honours `UVERBS_FORK_SAFE=force`.
//!
//! This binary holds a single test so that setting the environment before
//! the first `ForkSafety::global()` races with nothing.

// The page size as the other tests take it, without the rest of `common`.
#[path = "common/mapping.rs"]
mod mapping;

use uverbs::fork::{self, ForkMode, ForkSafety};

#[test]
fn force_variable_enables_the_global_instance() {
    std::env::set_var("UVERBS_FORK_SAFE", "force");
    std::env::remove_var("RDMAV_FORK_SAFE");
    std::env::remove_var("IBV_FORK_SAFE");

    let global = ForkSafety::global();
    assert_eq!(global.mode(), ForkMode::Enabled);
    assert_eq!(fork::fork_status(), ForkMode::Enabled);
    // Already enabled: both initialisers are no-ops.
    fork::fork_init().unwrap();
    fork::fork_init_forced().unwrap();

    let buf = vec![1u8; 2 * mapping::page_size()];
    global
        .dontfork_range(buf.as_ptr() as usize, buf.len())
        .unwrap();
    assert!(!global.marked_ranges().is_empty());
    global
        .dofork_range(buf.as_ptr() as usize, buf.len())
        .unwrap();
    assert!(global.marked_ranges().is_empty());
}
