//! `fork_init` on the process-wide instance after a registration was handled
//! while fork safety was off is "too late" (`EINVAL`), as in libibverbs.
//!
//! This binary holds a single test so that clearing the environment before
//! the first `ForkSafety::global()` races with nothing.

use uverbs::fork::{self, ForkInitError, ForkMode, ForkSafety};

#[test]
fn global_fork_init_after_registration_is_too_late() {
    for var in ["UVERBS_FORK_SAFE", "RDMAV_FORK_SAFE", "IBV_FORK_SAFE"] {
        std::env::remove_var(var);
    }
    let global = ForkSafety::global();
    let mode = global.mode();
    // Disabled here; Unneeded on a kernel that reports copy-on-fork.
    assert!(
        matches!(mode, ForkMode::Disabled | ForkMode::Unneeded),
        "{mode:?}"
    );

    let buf = [1u8; 100];
    global
        .dontfork_range(buf.as_ptr() as usize, buf.len())
        .unwrap();
    assert!(global.marked_ranges().is_empty());
    assert!(global.too_late());

    match mode {
        ForkMode::Disabled => {
            let err = fork::fork_init().unwrap_err();
            assert!(matches!(err, ForkInitError::TooLate));
            assert_eq!(std::io::Error::from(err).raw_os_error(), Some(22));
        }
        _ => fork::fork_init().unwrap(), // copy-on-fork: nothing to do
    }
    assert!(matches!(
        fork::fork_init_forced(),
        Err(ForkInitError::TooLate)
    ));
    assert_eq!(fork::fork_status(), mode);
    global
        .dofork_range(buf.as_ptr() as usize, buf.len())
        .unwrap();
}
