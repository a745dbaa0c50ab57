//! Booting the VM under qemu (TCG: KVM is not usable on the CI machines)
//! with a hard timeout, streaming the serial console to stdout and a log.

use crate::util::{describe, err, say, Context, Result};
use std::fs;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::thread;
use std::time::{Duration, Instant};

/// The kernel command line.
const CMDLINE: &str = "console=ttyS0 panic=-1 loglevel=4";

/// How to boot.
pub struct Boot {
    /// The kernel image.
    pub kernel: PathBuf,
    /// The gzip initramfs.
    pub initrd: PathBuf,
    /// Guest memory, as qemu's `-m` takes it (e.g. `2G`).
    pub memory: String,
    /// qemu is killed after this long.
    pub timeout: Duration,
}

/// How a non-interactive boot ended.
pub struct Outcome {
    /// The whole console output (carriage returns removed).
    pub console: String,
    /// qemu's exit status; `None` if it was killed at the timeout.
    pub status: Option<ExitStatus>,
    /// How long qemu ran.
    pub elapsed: Duration,
}

fn command(b: &Boot) -> Command {
    let mut c = Command::new("qemu-system-x86_64");
    c.args(["-accel", "tcg", "-cpu", "max", "-smp", "2", "-m", &b.memory])
        .args(["-nic", "none", "-nographic", "-no-reboot"])
        .arg("-kernel")
        .arg(&b.kernel)
        .arg("-initrd")
        .arg(&b.initrd)
        .args(["-append", CMDLINE]);
    c
}

/// Removes carriage returns and terminal escape sequences (SeaBIOS and the
/// kernel send "reset terminal" and "clear screen", which would wipe the
/// user's or CI's screen) from console output, across chunk boundaries.
#[derive(Default)]
struct ConsoleFilter {
    /// 0: text, 1: after ESC, 2: inside an ESC [ ... sequence.
    state: u8,
}

impl ConsoleFilter {
    fn feed(&mut self, input: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(input.len());
        for &c in input {
            match (self.state, c) {
                (0, 0x1b) => self.state = 1,
                (0, b'\r') => {}
                (0, _) => out.push(c),
                (1, b'[') => self.state = 2,
                (1, _) => self.state = 0,
                (_, 0x40..=0x7e) => self.state = 0,
                _ => {}
            }
        }
        out
    }
}

/// Waits for qemu, killing it at the deadline. Returns `None` if killed.
fn wait_with_timeout(
    child: &mut Child,
    timeout: Duration,
    step: &str,
) -> Result<Option<ExitStatus>> {
    let start = Instant::now();
    loop {
        if let Some(s) = child.try_wait().context(step)? {
            return Ok(Some(s));
        }
        if start.elapsed() >= timeout {
            say(format!(
                "qemu: timed out after {} s; killing it",
                timeout.as_secs()
            ));
            let _ = child.kill();
            let _ = child.wait();
            return Ok(None);
        }
        thread::sleep(Duration::from_millis(100));
    }
}

/// Boots, streams the console to stdout and to `log` as it arrives, and
/// returns everything once qemu exits (the guest powers off) or is killed.
pub fn run(b: &Boot, log: &Path) -> Result<Outcome> {
    let step = "qemu: booting";
    let mut cmd = command(b);
    say(format!(
        "qemu: {} (timeout {} s, console log {})",
        describe(&cmd),
        b.timeout.as_secs(),
        log.display()
    ));
    let mut logfile =
        fs::File::create(log).map_err(|e| err(step, format!("{}: {e}", log.display())))?;
    let start = Instant::now();
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| err(step, format!("cannot run qemu-system-x86_64: {e}")))?;
    let mut out = child.stdout.take().expect("piped stdout");
    let mut errs = child.stderr.take().expect("piped stderr");
    let reader = thread::spawn(move || {
        let mut all = Vec::new();
        let mut buf = [0u8; 8192];
        let mut clean = ConsoleFilter::default();
        let stdout = std::io::stdout();
        loop {
            match out.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    let chunk = clean.feed(&buf[..n]);
                    let mut lock = stdout.lock();
                    let _ = lock.write_all(&chunk);
                    let _ = lock.flush();
                    let _ = logfile.write_all(&chunk);
                    all.extend_from_slice(&chunk);
                }
            }
        }
        let _ = logfile.flush();
        all
    });
    let err_reader = thread::spawn(move || {
        let mut s = String::new();
        let _ = errs.read_to_string(&mut s);
        s
    });
    let status = wait_with_timeout(&mut child, b.timeout, step)?;
    let elapsed = start.elapsed();
    let console = reader.join().unwrap_or_default();
    let stderr = err_reader.join().unwrap_or_default();
    let mut console = String::from_utf8_lossy(&console).into_owned();
    if !stderr.trim().is_empty() {
        say(format!("qemu stderr:\n{}", stderr.trim_end()));
        console.push_str(&format!("\n[qemu stderr]\n{stderr}"));
        let _ = fs::OpenOptions::new()
            .append(true)
            .open(log)
            .and_then(|mut f| writeln!(f, "\n[qemu stderr]\n{stderr}"));
    }
    say(format!("qemu: exited after {:.1} s", elapsed.as_secs_f64()));
    Ok(Outcome {
        console,
        status,
        elapsed,
    })
}

/// Boots with the console on this terminal: `-nographic` puts the serial
/// port and qemu's monitor on stdio (`mon:stdio`; Ctrl-A X quits, Ctrl-A C
/// switches to the monitor). Input may also be piped in.
pub fn interactive(b: &Boot) -> Result<()> {
    let step = "qemu: interactive boot";
    let mut cmd = command(b);
    say(format!("qemu: {} (Ctrl-A X quits)", describe(&cmd)));
    let mut child = cmd
        .spawn()
        .map_err(|e| err(step, format!("cannot run qemu-system-x86_64: {e}")))?;
    match wait_with_timeout(&mut child, b.timeout, step)? {
        Some(s) if s.success() => Ok(()),
        Some(s) => Err(err(step, format!("qemu exited with {s}"))),
        None => Err(err(step, "timed out")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filter_drops_escapes_across_chunks() {
        let mut f = ConsoleFilter::default();
        let mut out = f.feed(b"\x1bc\x1b[?7l\x1b[2");
        out.extend(f.feed(b"J\x1b[0mSeaBIOS\r\nok"));
        assert_eq!(out, b"SeaBIOS\nok");
    }
}
