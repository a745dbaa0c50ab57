//! A bounded wait for a child process (the second side that the pingpong
//! and perf tools start in their self-test modes), shared through `#[path]`.

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
