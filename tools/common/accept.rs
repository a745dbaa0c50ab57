//! A bounded TCP accept, shared through `#[path]` by the pingpong and perf
//! tools for their out-of-band exchanges.

use std::error::Error;
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

type Result<T, E = Box<dyn Error>> = std::result::Result<T, E>;

/// Accepts one connection on `listener` within `wait`, asking `still_there`
/// between tries whether to go on waiting (an error from it ends the wait:
/// e.g. the peer process has already exited).
pub fn accept_within(
    listener: &TcpListener,
    wait: Duration,
    mut still_there: impl FnMut() -> Result<()>,
) -> Result<TcpStream> {
    listener.set_nonblocking(true)?;
    let deadline = Instant::now() + wait;
    loop {
        match listener.accept() {
            Ok((stream, _)) => {
                stream.set_nonblocking(false)?;
                return Ok(stream);
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(format!("accept: {e}").into()),
        }
        still_there()?;
        if Instant::now() >= deadline {
            return Err(format!("no client within {wait:?}").into());
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}
