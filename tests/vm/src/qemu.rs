//! Booting the VM under qemu (TCG: KVM is not usable on the CI machines)
//! with a hard timeout, streaming the serial console to stdout and a log.

use crate::report;
use crate::tools::Tools;
use crate::util::{describe, err, say, Context, Error, Result};
use std::fs;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::thread;
use std::time::{Duration, Instant};

/// The kernel command line. `tsc=reliable`: under a loaded TCG host the
/// clocksource watchdog once declared the TSC unstable mid-run, and the
/// static key it then flips (sched_clock_stable) is patched into running
/// code with `int3`, which TCG's other vCPU hit as a stray breakpoint: an
/// oops and a panic. Trusting the TSC keeps the key still.
const CMDLINE: &str = "console=ttyS0 panic=-1 loglevel=4 tsc=reliable";

/// How to boot.
pub struct Boot {
    /// The unpacked qemu to run.
    pub tools: Tools,
    /// The kernel image.
    pub kernel: PathBuf,
    /// The gzip initramfs.
    pub initrd: PathBuf,
    /// Guest memory, as qemu's `-m` takes it (e.g. `2G`).
    pub memory: String,
    /// Virtual CPUs (`-smp`).
    pub cpus: u32,
    /// qemu is killed after this long.
    pub timeout: Duration,
    /// The guest's NICs in order (the single guest has none).
    pub nics: Vec<Nic>,
}

/// A virtio NIC on the two-host link: qemu's `dgram` netdev, a UDP socket
/// of each qemu on 127.0.0.1 sending every Ethernet frame of its guest, one
/// datagram each, to the peer's. Nothing else is on that link.
///
/// Not the `socket` (or `stream`) netdev's TCP connection: qemu 7.2 leaves
/// Nagle's algorithm on for it, so a frame that follows an unacknowledged
/// one waits for the host's delayed ACK (tens of ms). rxe sends two
/// frames in a row per message of a ping-pong (the RC ACK, then the
/// reply) and measured a 53 ms median round trip across the guests over
/// that link, perftest's ib_send_lat as much as ours (docs/connection-manager.md).
pub struct Nic {
    /// qemu's name of the netdev (unique per guest).
    pub id: String,
    /// The guest's MAC address.
    pub mac: String,
    /// This qemu's end of the link.
    pub end: LinkEnd,
}

/// A qemu's end of a link: the UDP port on 127.0.0.1 it receives on and
/// the peer's, which it sends to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LinkEnd {
    /// This qemu's port.
    pub local: u16,
    /// The peer qemu's port.
    pub remote: u16,
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

/// The qemu arguments of a NIC.
fn nic_args(nic: &Nic) -> [String; 4] {
    let LinkEnd { local, remote } = nic.end;
    [
        "-netdev".into(),
        format!(
            "dgram,id={},local.type=inet,local.host=127.0.0.1,local.port={local},\
             remote.type=inet,remote.host=127.0.0.1,remote.port={remote}",
            nic.id
        ),
        "-device".into(),
        format!("virtio-net-pci,netdev={},mac={}", nic.id, nic.mac),
    ]
}

fn command(b: &Boot) -> Command {
    let mut c = b.tools.qemu();
    c.args(["-accel", "tcg", "-cpu", "max", "-smp"])
        .arg(b.cpus.to_string())
        .args(["-m", &b.memory]);
    if b.nics.is_empty() {
        c.args(["-nic", "none"]);
    }
    for nic in &b.nics {
        c.args(nic_args(nic));
    }
    c.args(["-nographic", "-no-reboot"])
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

/// How often a running qemu is looked at.
const POLL: Duration = Duration::from_millis(100);

/// Whether qemu has ended, killing it at `deadline` (`timeout` after its
/// start): `None` while it runs, `Some(None)` if it was killed.
fn ended_by(
    child: &mut Child,
    deadline: Instant,
    timeout: Duration,
    step: &str,
) -> Result<Option<Option<ExitStatus>>> {
    if let Some(s) = child.try_wait().context(step)? {
        return Ok(Some(Some(s)));
    }
    if Instant::now() < deadline {
        return Ok(None);
    }
    say(format!(
        "qemu: timed out after {} s; killing it",
        timeout.as_secs()
    ));
    let _ = child.kill();
    let _ = child.wait();
    Ok(Some(None))
}

/// Waits for qemu, killing it at `deadline` (`timeout` after its start).
/// Returns `None` if killed.
fn wait_until(
    child: &mut Child,
    deadline: Instant,
    timeout: Duration,
    step: &str,
) -> Result<Option<ExitStatus>> {
    loop {
        if let Some(ended) = ended_by(child, deadline, timeout, step)? {
            return Ok(ended);
        }
        thread::sleep(POLL);
    }
}

/// A qemu that is running, its console being read into memory and `log`.
struct Running {
    child: Child,
    console: thread::JoinHandle<Vec<u8>>,
    stderr: thread::JoinHandle<String>,
    start: Instant,
    timeout: Duration,
    log: PathBuf,
}

/// Where a console goes besides memory and the log file.
#[derive(Clone, Copy)]
enum Echo {
    /// To stdout as it comes.
    Raw,
    /// To stdout line by line, each line after this prefix (two guests'
    /// consoles in one output).
    Prefixed(&'static str),
    /// Nowhere (a guest in the background of an interactive session).
    Quiet,
}

/// Starts qemu with its console read by a thread into memory and `log`
/// (and to stdout as `echo` says).
fn start(b: &Boot, log: &Path, echo: Echo) -> Result<Running> {
    spawn(command(b), b.timeout, log, echo)
}

/// [`start`] of any command (a test's stand-in for qemu), killed after
/// `timeout`.
fn spawn(mut cmd: Command, timeout: Duration, log: &Path, echo: Echo) -> Result<Running> {
    let step = "qemu: booting";
    say(format!(
        "qemu: {} (timeout {} s, console log {})",
        describe(&cmd),
        timeout.as_secs(),
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
    let console = thread::spawn(move || {
        let mut all = Vec::new();
        let mut buf = [0u8; 8192];
        let mut clean = ConsoleFilter::default();
        let mut partial = Vec::new();
        let stdout = std::io::stdout();
        loop {
            match out.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    let chunk = clean.feed(&buf[..n]);
                    match echo {
                        Echo::Raw => {
                            let mut lock = stdout.lock();
                            let _ = lock.write_all(&chunk);
                            let _ = lock.flush();
                        }
                        Echo::Prefixed(prefix) => {
                            partial.extend_from_slice(&chunk);
                            let _ =
                                stdout
                                    .lock()
                                    .write_all(&prefix_lines(prefix, &mut partial, false));
                        }
                        Echo::Quiet => {}
                    }
                    let _ = logfile.write_all(&chunk);
                    all.extend_from_slice(&chunk);
                }
            }
        }
        if let Echo::Prefixed(prefix) = echo {
            let _ = stdout
                .lock()
                .write_all(&prefix_lines(prefix, &mut partial, true));
        }
        let _ = logfile.flush();
        all
    });
    let stderr = thread::spawn(move || {
        let mut s = String::new();
        let _ = errs.read_to_string(&mut s);
        s
    });
    Ok(Running {
        child,
        console,
        stderr,
        start,
        timeout,
        log: log.to_path_buf(),
    })
}

/// The complete lines of `partial`, each after `prefix`, removed from it
/// (with `all`, also the incomplete last line, given a newline).
fn prefix_lines(prefix: &str, partial: &mut Vec<u8>, all: bool) -> Vec<u8> {
    let end = if all {
        partial.len()
    } else {
        partial
            .iter()
            .rposition(|&c| c == b'\n')
            .map_or(0, |i| i + 1)
    };
    let mut out = Vec::new();
    for line in partial[..end].split_inclusive(|&c| c == b'\n') {
        out.extend_from_slice(prefix.as_bytes());
        out.extend_from_slice(line);
        if !line.ends_with(b"\n") {
            out.push(b'\n');
        }
    }
    partial.drain(..end);
    out
}

impl Running {
    /// Waits until qemu exits or its timeout passes (then kills it) and
    /// returns the console.
    fn finish(mut self) -> Result<Outcome> {
        let step = "qemu: booting";
        let status = wait_until(
            &mut self.child,
            self.start + self.timeout,
            self.timeout,
            step,
        )?;
        self.collect(status)
    }

    /// Whether qemu has ended (or was killed at its timeout): `None` while
    /// it runs.
    fn ended(&mut self) -> Result<Option<Option<ExitStatus>>> {
        let deadline = self.start + self.timeout;
        ended_by(&mut self.child, deadline, self.timeout, "qemu: booting")
    }

    /// Kills qemu now (the background guest of an interactive session, a
    /// two-host guest whose peer panicked).
    fn kill(mut self) -> Result<Outcome> {
        let _ = self.child.kill();
        let status = self.child.wait().ok();
        self.collect(status)
    }

    fn collect(self, status: Option<ExitStatus>) -> Result<Outcome> {
        let elapsed = self.start.elapsed();
        let console = self.console.join().unwrap_or_default();
        let stderr = self.stderr.join().unwrap_or_default();
        let mut console = String::from_utf8_lossy(&console).into_owned();
        if !stderr.trim().is_empty() {
            say(format!("qemu stderr:\n{}", stderr.trim_end()));
            console.push_str(&format!("\n[qemu stderr]\n{stderr}"));
            let _ = fs::OpenOptions::new()
                .append(true)
                .open(&self.log)
                .and_then(|mut f| writeln!(f, "\n[qemu stderr]\n{stderr}"));
        }
        say(format!("qemu: exited after {:.1} s", elapsed.as_secs_f64()));
        Ok(Outcome {
            console,
            status,
            elapsed,
        })
    }
}

/// Boots, streams the console to `log` (and to stdout unless `quiet`) as
/// it arrives, and returns everything once qemu exits (the guest powers
/// off) or is killed.
pub fn run(b: &Boot, log: &Path, quiet: bool) -> Result<Outcome> {
    start(b, log, if quiet { Echo::Quiet } else { Echo::Raw })?.finish()
}

/// `n` distinct free UDP ports on 127.0.0.1 for the links' qemus (the
/// kernel picks them, and the sockets are held until all are picked, so
/// none comes twice; the moment between closing them here and qemu
/// binding them is the only window for another program to take one, and
/// then that qemu fails to start and says so).
pub fn free_ports(n: usize) -> Result<Vec<u16>> {
    let step = "qemu: finding free ports";
    let sockets = (0..n)
        .map(|_| std::net::UdpSocket::bind("127.0.0.1:0").context(step))
        .collect::<Result<Vec<_>>>()?;
    sockets
        .iter()
        .map(|l| Ok(l.local_addr().context(step)?.port()))
        .collect()
}

/// Whether a UDP socket is bound to 127.0.0.1:`port` (from /proc/net/udp).
fn bound(port: u16) -> bool {
    let Ok(table) = fs::read_to_string("/proc/net/udp") else {
        return false;
    };
    bound_in(&table, port)
}

/// [`bound`] on the text of a /proc/net/udp table.
fn bound_in(table: &str, port: u16) -> bool {
    let local = format!("0100007F:{port:04X}");
    table.lines().skip(1).any(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        f.len() > 1 && f[1] == local
    })
}

/// How long host a's qemu may take to bind its ports.
const LISTEN_WAIT: Duration = Duration::from_secs(30);

/// Waits until `child` (host a's qemu) has bound `port`; fails if it
/// exits first or takes longer than [`LISTEN_WAIT`]. B starts after that,
/// so a qemu that cannot start fails the boot before the other runs.
fn wait_bound(child: &mut Child, port: u16) -> Result<()> {
    let step = "qemu: waiting for host a's qemu to bind its link ports";
    let deadline = Instant::now() + LISTEN_WAIT;
    while !bound(port) {
        if let Some(s) = child.try_wait().context(step)? {
            return Err(err(step, format!("it exited ({s}); its stderr is above")));
        }
        if Instant::now() >= deadline {
            return Err(err(
                step,
                format!(
                    "nothing is bound to 127.0.0.1:{port} (UDP) after {} s",
                    LISTEN_WAIT.as_secs()
                ),
            ));
        }
        thread::sleep(Duration::from_millis(50));
    }
    Ok(())
}

/// The ports host a's NICs receive on (there must be one).
fn link_ports(a: &Boot) -> Result<Vec<u16>> {
    let ports: Vec<u16> = a.nics.iter().map(|n| n.end.local).collect();
    if ports.is_empty() {
        return Err(Error("qemu: host a has no NIC".into()));
    }
    Ok(ports)
}

/// The two-host boot: `a` first, `b` once A's qemu has bound its link
/// ports; both consoles are streamed to stdout,
/// each line marked `a| ` or `b| `, and to their logs. Each qemu has its
/// own hard timeout. Returns A's and B's outcomes.
pub fn run_two(a: &Boot, b: &Boot, logs: [&Path; 2]) -> Result<[Outcome; 2]> {
    let ports = link_ports(a)?;
    let mut ra = start(a, logs[0], Echo::Prefixed("a| "))?;
    if let Err(e) = ports.iter().try_for_each(|&p| wait_bound(&mut ra.child, p)) {
        let _ = ra.kill();
        return Err(e);
    }
    let rb = match start(b, logs[1], Echo::Prefixed("b| ")) {
        Ok(rb) => rb,
        Err(e) => {
            let _ = ra.kill();
            return Err(e);
        }
    };
    finish_pair([ra, rb])
}

/// Waits for both guests of a two-host boot. When one ends with its kernel
/// panicked, the other is killed at once: its remaining runs could only
/// wait out their timeouts for a peer that is gone (minutes each), and the
/// configurations either did not finish are booted again anyway
/// (`boot_past_panics`).
fn finish_pair(running: [Running; 2]) -> Result<[Outcome; 2]> {
    let mut running = running.map(Some);
    let mut outcomes: [Option<Outcome>; 2] = [None, None];
    while running.iter().any(Option::is_some) {
        for i in 0..2 {
            let Some(guest) = running[i].as_mut() else {
                continue;
            };
            let Some(status) = guest.ended()? else {
                continue;
            };
            let outcome = running[i].take().expect("running").collect(status)?;
            if report::kernel_panicked(&outcome.console) {
                if let Some(peer) = running[1 - i].take() {
                    say(format!(
                        "qemu: host {}'s kernel panicked; stopping host {}, whose runs need it",
                        HOSTS[i],
                        HOSTS[1 - i]
                    ));
                    outcomes[1 - i] = Some(peer.kill()?);
                }
            }
            outcomes[i] = Some(outcome);
        }
        thread::sleep(POLL);
    }
    Ok(outcomes.map(|o| o.expect("each guest has an outcome")))
}

/// The two-host guests' names, in [`run_two`]'s order.
const HOSTS: [&str; 2] = ["a", "b"];

/// Boots with the console on this terminal: `-nographic` puts the serial
/// port and qemu's monitor on stdio (`mon:stdio`; Ctrl-A X quits, Ctrl-A C
/// switches to the monitor). Input may also be piped in.
pub fn interactive(b: &Boot) -> Result<()> {
    let step = "qemu: interactive boot";
    let mut cmd = command(b);
    say(format!("qemu: {} (Ctrl-A X quits)", describe(&cmd)));
    let start = Instant::now();
    let mut child = cmd
        .spawn()
        .map_err(|e| err(step, format!("cannot run qemu-system-x86_64: {e}")))?;
    match wait_until(&mut child, start + b.timeout, b.timeout, step)? {
        Some(s) if s.success() => Ok(()),
        Some(s) => Err(err(step, format!("qemu exited with {s}"))),
        None => Err(err(step, "timed out")),
    }
}

/// `cargo vm shell --two`: host a on this terminal as in [`interactive`],
/// host b in the background with its console written only to `b_log`
/// (its shell is reached from A with `telnet`). B is killed when A ends.
pub fn interactive_two(a: &Boot, b: &Boot, b_log: &Path) -> Result<()> {
    let step = "qemu: interactive two-host boot";
    let ports = link_ports(a)?;
    let mut cmd = command(a);
    say(format!(
        "qemu: host a: {} (Ctrl-A X quits both)",
        describe(&cmd)
    ));
    let start_a = Instant::now();
    let mut child = cmd
        .spawn()
        .map_err(|e| err(step, format!("cannot run qemu-system-x86_64: {e}")))?;
    if let Err(e) = ports.iter().try_for_each(|&p| wait_bound(&mut child, p)) {
        let _ = child.kill();
        let _ = child.wait();
        return Err(e);
    }
    let rb = match start(b, b_log, Echo::Quiet) {
        Ok(rb) => rb,
        Err(e) => {
            let _ = child.kill();
            let _ = child.wait();
            return Err(e);
        }
    };
    let ended = wait_until(&mut child, start_a + a.timeout, a.timeout, step);
    say(format!(
        "qemu: host a ended; stopping host b (its console: {})",
        b_log.display()
    ));
    rb.kill()?;
    match ended? {
        Some(s) if s.success() => Ok(()),
        Some(s) => Err(err(step, format!("qemu exited with {s}"))),
        None => Err(err(step, "timed out")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stand-in guest: `sh -c script`, its console logged under the
    /// temporary directory as `name`.
    fn guest(script: &str, name: &str) -> Running {
        let log = std::env::temp_dir().join(format!("uverbs-vm-{}-{name}.log", std::process::id()));
        let mut cmd = Command::new("sh");
        cmd.args(["-c", script]);
        spawn(cmd, Duration::from_secs(120), &log, Echo::Quiet).expect("sh starts")
    }

    /// Whichever side panics (once its peer is up), the other is killed at
    /// once instead of running to its end (here a minute of sleep).
    #[test]
    fn a_guest_whose_kernel_panicked_stops_its_peer() {
        for panicked in 0..2 {
            let up_file = std::env::temp_dir().join(format!(
                "uverbs-vm-{}-peer-up-{panicked}",
                std::process::id()
            ));
            let _ = fs::remove_file(&up_file);
            let up = up_file.display();
            let panics = format!(
                "while [ ! -e {up} ]; do sleep 0.05; done; \
                 echo '[ 94.3] Kernel panic - not syncing: Fatal exception in interrupt'"
            );
            // `exec`: killing the shell must end the sleep too, whose
            // inherited stdout would keep the console open (qemu has no
            // such child).
            let runs = format!("echo started; touch {up}; exec sleep 60");
            let mut scripts = [panics.as_str(), runs.as_str()];
            if panicked == 1 {
                scripts.reverse();
            }
            let begun = Instant::now();
            let outcomes = finish_pair([
                guest(scripts[0], &format!("panic-{panicked}-a")),
                guest(scripts[1], &format!("panic-{panicked}-b")),
            ])
            .unwrap();
            assert!(
                begun.elapsed() < Duration::from_secs(30),
                "host {} was stopped at once, not after {:?}",
                HOSTS[1 - panicked],
                begun.elapsed()
            );
            let peer = &outcomes[1 - panicked];
            assert!(report::kernel_panicked(&outcomes[panicked].console));
            assert!(peer.console.contains("started"), "{}", peer.console);
            assert!(!peer.status.expect("killed, not timed out").success());
            let _ = fs::remove_file(&up_file);
        }
    }

    /// A guest that ends without a panic leaves its peer to end on its own.
    #[test]
    fn a_guest_that_ends_cleanly_waits_for_its_peer() {
        let outcomes = finish_pair([
            guest("echo done", "clean-a"),
            guest("sleep 1; echo finished", "clean-b"),
        ])
        .unwrap();
        assert!(outcomes[1].console.contains("finished"));
        assert!(outcomes
            .iter()
            .all(|o| o.status.is_some_and(|s| s.success())));
    }

    #[test]
    fn filter_drops_escapes_across_chunks() {
        let mut f = ConsoleFilter::default();
        let mut out = f.feed(b"\x1bc\x1b[?7l\x1b[2");
        out.extend(f.feed(b"J\x1b[0mSeaBIOS\r\nok"));
        assert_eq!(out, b"SeaBIOS\nok");
    }

    #[test]
    fn two_consoles_are_told_apart_line_by_line() {
        let mut partial = b"one\ntw".to_vec();
        assert_eq!(prefix_lines("a| ", &mut partial, false), b"a| one\n");
        partial.extend_from_slice(b"o\nthree");
        assert_eq!(prefix_lines("a| ", &mut partial, false), b"a| two\n");
        assert_eq!(prefix_lines("a| ", &mut partial, true), b"a| three\n");
        assert!(partial.is_empty());
        assert_eq!(prefix_lines("a| ", &mut partial, true), b"");
    }

    #[test]
    fn the_link_is_on_the_loopback_address_only() {
        let nic = |end| Nic {
            id: "rxe".into(),
            mac: "52:54:00:00:02:01".into(),
            end,
        };
        let end = LinkEnd {
            local: 4000,
            remote: 4001,
        };
        assert_eq!(
            nic_args(&nic(end)),
            [
                "-netdev",
                "dgram,id=rxe,local.type=inet,local.host=127.0.0.1,local.port=4000,\
                 remote.type=inet,remote.host=127.0.0.1,remote.port=4001",
                "-device",
                "virtio-net-pci,netdev=rxe,mac=52:54:00:00:02:01"
            ]
        );
        // One guest of 1G and one CPU, with tools under /t and these NICs.
        let boot_with = |nics| Boot {
            tools: Tools::unpacked_at("/t"),
            kernel: "k".into(),
            initrd: "i".into(),
            memory: "1G".into(),
            cpus: 1,
            timeout: Duration::from_secs(1),
            nics,
        };
        let two = boot_with(vec![nic(end)]);
        assert_eq!(link_ports(&two).unwrap(), [4000]);
        let boot = boot_with(Vec::new());
        let line = describe(&command(&boot));
        assert!(line.contains("-smp 1 -m 1G -nic none -nographic"), "{line}");
        assert!(line.starts_with("/t/usr/bin/qemu-system-x86_64 "), "{line}");
    }

    #[test]
    fn reads_the_bound_udp_sockets() {
        let table = "   sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode ref pointer drops\n\
           1: 0100007F:1D2E 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 1 2 0 0\n\
           2: 0100007F:0FA0 0100007F:0FA1 01 00000000:00000000 00:00000000 00000000     0        0 2 2 0 0\n\
           3: 00000000:0FA2 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 3 2 0 0\n";
        assert!(bound_in(table, 0x1d2e));
        // Connected to the peer: bound all the same.
        assert!(bound_in(table, 4000));
        // Not on 127.0.0.1, or not there at all.
        assert!(!bound_in(table, 4002));
        assert!(!bound_in(table, 1));
        // Our own socket shows up in the real table.
        let s = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        assert!(bound(s.local_addr().unwrap().port()));
    }
}
