//! Waiting for an `OwnedQp`'s next request to come back: the loop the
//! short examples (loopback, multicast) share. Copy it along with them.

use std::error::Error;
use std::time::{Duration, Instant};

use uverbs::{DeviceReadable, OwnedQp, WcStatus};

/// The memory of `qp`'s next request to come back, which must have
/// succeeded within 10 s.
pub fn wait<M: DeviceReadable>(qp: &OwnedQp<M>, what: &str) -> Result<M, Box<dyn Error>> {
    let (mut done, deadline) = (Vec::new(), Instant::now() + Duration::from_secs(10));
    while done.is_empty() {
        if Instant::now() > deadline {
            return Err(format!("{what}: no completion within 10 s").into());
        }
        qp.poll(&mut done)?; // no system call: it reads the CQ's ring
    }
    let completed = done.remove(0);
    if completed.status() != Some(WcStatus::Success) {
        return Err(format!("{what}: {:?}", completed.ended).into());
    }
    Ok(completed.into_memory().ok_or("no memory came back")?)
}
