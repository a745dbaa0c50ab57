//! A bounded wait for a child process (the second side that the pingpong
//! example and the perf tool, `tools/perf.rs`, start in their self-test
//! modes). Shared through `#[path]`; a directory without main.rs is no
//! example target of its own.

use std::error::Error;
use std::process::{Child, ExitStatus};
use std::time::{Duration, Instant};

/// Waits at most `limit` for `child` to exit, then kills it; `what` names
/// it in the error.
pub fn reap(child: &mut Child, limit: Duration, what: &str) -> Result<ExitStatus, Box<dyn Error>> {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok(status);
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            child.wait()?;
            return Err(format!("{what} did not exit within {limit:?}; killed").into());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}
