//! Running one server/client pair with bounded waits: the server first,
//! the client once the server is ready, both killed at the deadline.

use std::io::Read;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How the runner knows the server is ready for the client.
#[derive(Clone, Copy, Debug)]
pub enum Ready {
    /// Something listens on TCP `port` (the out-of-band exchange).
    Listening(u16),
    /// A fixed pause (an rdma_cm listener shows nowhere; both clients
    /// retry a rejected connect).
    After(Duration),
}

/// One finished process.
pub struct Finished {
    /// `None` when it was killed at the deadline.
    pub status: Option<ExitStatus>,
    pub stdout: String,
    pub stderr: String,
}

impl Finished {
    pub fn ok(&self) -> bool {
        self.status.is_some_and(|s| s.success())
    }

    /// A one-line account for an error message: the status and the last
    /// lines of stderr.
    pub fn describe(&self) -> String {
        let status = match self.status {
            Some(s) => s.to_string(),
            None => "killed at the deadline".into(),
        };
        let tail: Vec<&str> = self.stderr.lines().rev().take(3).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        format!("{status}; stderr: {}", tail.join(" | "))
    }
}

struct Running {
    child: Child,
    out: JoinHandle<String>,
    err: JoinHandle<String>,
}

fn start(cmd: &mut Command) -> Result<Running, String> {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run {cmd:?}: {e}"))?;
    // Drained on threads, so a chatty process never blocks on a full pipe.
    let drain = |mut r: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut s = String::new();
            let _ = r.read_to_string(&mut s);
            s
        })
    };
    let out = drain(Box::new(child.stdout.take().expect("piped")));
    let err = drain(Box::new(child.stderr.take().expect("piped")));
    Ok(Running { child, out, err })
}

impl Running {
    /// Waits until `deadline`, then kills.
    fn finish(mut self, deadline: Instant) -> Finished {
        let status = loop {
            match self.child.try_wait() {
                Ok(Some(s)) => break Some(s),
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(5))
                }
                _ => {
                    let _ = self.child.kill();
                    let _ = self.child.wait();
                    break None;
                }
            }
        };
        Finished {
            status,
            stdout: self.out.join().unwrap_or_default(),
            stderr: self.err.join().unwrap_or_default(),
        }
    }
}

/// Whether `port` is in LISTEN state in `/proc/net/tcp` or `tcp6`.
fn listening(port: u16) -> bool {
    let suffix = format!(":{port:04X}");
    ["/proc/net/tcp", "/proc/net/tcp6"].iter().any(|f| {
        std::fs::read_to_string(f).is_ok_and(|t| {
            t.lines().skip(1).any(|l| {
                let w: Vec<&str> = l.split_whitespace().collect();
                w.len() > 3 && w[1].ends_with(&suffix) && w[3] == "0A"
            })
        })
    })
}

/// Runs `server`, then `client` once `ready`, each within `timeout`.
/// Returns (server, client).
pub fn pair(
    server: &mut Command,
    client: &mut Command,
    ready: Ready,
    timeout: Duration,
) -> Result<(Finished, Finished), String> {
    let deadline = Instant::now() + timeout;
    let mut srv = start(server)?;
    let ready_by = Instant::now() + Duration::from_secs(15);
    match ready {
        Ready::Listening(port) => {
            while !listening(port) {
                let exited = srv.child.try_wait().ok().flatten().is_some();
                if exited || Instant::now() > ready_by {
                    let s = srv.finish(Instant::now());
                    return Err(format!(
                        "the server never listened on port {port}: {}",
                        s.describe()
                    ));
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        Ready::After(pause) => std::thread::sleep(pause),
    }
    let cli = match start(client) {
        Ok(c) => c,
        Err(e) => {
            srv.finish(Instant::now());
            return Err(e);
        }
    };
    let c = cli.finish(deadline);
    // The server ends with the test; give it a moment after the client.
    let s = srv.finish(Instant::now() + Duration::from_secs(3));
    Ok((s, c))
}
