//! A line-based TCP side channel between the two processes of an example
//! (pingpong's out-of-band exchange; the perf tool, `tools/perf.rs`, which
//! speaks perftest's protocol, uses only its bounded accept): one line each way, every read
//! and write bounded. Shared through `#[path]`; a directory without
//! main.rs is no example target of its own.

use std::error::Error;
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

use uverbs::Endpoint;

type Result<T, E = Box<dyn Error>> = std::result::Result<T, E>;

/// One line each way (ours first); lines are short, so both may write first.
pub struct LineChannel {
    reader: BufReader<TcpStream>,
    writer: TcpStream,
    /// The bound on each read and write.
    wait: Duration,
}

impl LineChannel {
    /// Wraps a connected stream; every read and write gives up after `wait`.
    pub fn new(stream: TcpStream, wait: Duration) -> Result<LineChannel> {
        stream.set_read_timeout(Some(wait))?;
        stream.set_write_timeout(Some(wait))?;
        stream.set_nodelay(true)?;
        Ok(LineChannel {
            reader: BufReader::new(stream.try_clone()?),
            writer: stream,
            wait,
        })
    }

    pub fn send(&mut self, line: &str) -> Result<()> {
        writeln!(self.writer, "{line}")?;
        Ok(())
    }

    /// The peer's next line; `what` names it in errors.
    pub fn recv(&mut self, what: &str) -> Result<String> {
        let mut line = String::new();
        match self.reader.read_line(&mut line) {
            Ok(0) => Err(format!("{what}: the peer hung up").into()),
            Ok(_) => Ok(line.trim_end().to_string()),
            Err(e) => Err(format!("{what}: {e}").into()),
        }
    }

    /// Sends our endpoint line, reads the peer's.
    pub fn swap(&mut self, me: &Endpoint) -> Result<Endpoint> {
        self.send(&me.to_string())?;
        Ok(self.recv("the peer's endpoint")?.parse()?)
    }

    /// Both sides say `word`, so neither goes on before the other is there;
    /// the peer's word may take up to `timeout` (a run may be long).
    pub fn sync(&mut self, word: &str, timeout: Duration) -> Result<()> {
        self.reader.get_ref().set_read_timeout(Some(timeout))?;
        self.send(word)?;
        let got = self.recv(word);
        self.reader.get_ref().set_read_timeout(Some(self.wait))?;
        let got = got?;
        if got != word {
            return Err(format!("expected {word:?} from the peer, got {got:?}").into());
        }
        Ok(())
    }
}

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
