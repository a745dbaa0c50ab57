//! How many system calls `post_recv`, `post_send` and `poll_cq` make,
//! counted by strace rather than believed.
//!
//! ```text
//! syscalls [--device NAME] [--iters N]    N calls of each (1000, at most 4000)
//!                                         on NAME (default: the first rxe device)
//! ```
//!
//! The program runs itself as `--probe` under `strace -f -C -o FILE`. The
//! probe connects two RC QPs of one context to each other by hand (RoCE
//! loopback over GID 0: rxe) and then makes the calls in phases, each
//! opened by a marker line it writes to stderr with exactly one
//! `write(2, "@@PHASE …")`:
//!
//! - `post_recv n=N`: N receives, one per call;
//! - `post_send n=N`: N signalled SENDs, one per call (each rings the
//!   doorbell);
//! - `settle`: a sleep, so the device completes everything (not checked);
//! - `poll_cq n=3N`: 3N polls of one completion each (2N completions are
//!   waiting, then N polls of an empty CQ);
//! - `end`.
//!
//! The trace lines between two markers are that phase's system calls. The
//! expected counts (rxe's provider: the doorbell is one `write()`, the
//! rings are shared memory) are checked, so this also fails if the data
//! path ever starts making system calls. strace's own summary (`-C`) is
//! printed after the per-call table. `cargo vm demo` runs it on rxe0
//! with both transports (`UVERBS_TRANSPORT=ioctl|write`); it needs
//! `strace` on the PATH.

use std::collections::BTreeMap;
use std::error::Error;
use std::io::Write;
use std::process::{Command, ExitCode};
use std::time::{Duration, Instant};

use memmap2::MmapMut;
use uverbs::device::{DriverId, OpenOptions};
use uverbs::qp::{Mtu, RcConnect};
use uverbs::wr::{Payload, RecvWr, SendOp, SendWr, Sge, WcStatus, WorkCompletion};
use uverbs::{AccessFlags, Context, Device, QpInit, QpType};

type Result<T, E = Box<dyn Error>> = std::result::Result<T, E>;

const MARKER: &str = "@@PHASE ";
/// How long the completions may take to arrive after the polled phase.
const WAIT: Duration = Duration::from_secs(10);
const USAGE: &str = "usage: syscalls [--device NAME] [--iters N]";

/// The command line.
struct Options {
    /// `--device`; default: the first rxe device.
    device: Option<String>,
    /// `--iters`: calls of each kind (1 ..= 4000).
    iters: usize,
    /// `--probe`: be the measured program (run by the counting one).
    probe: bool,
}

impl Options {
    /// `Err("")` asks for the usage only.
    fn parse(args: impl IntoIterator<Item = std::ffi::OsString>) -> Result<Options, String> {
        use lexopt::prelude::*;
        let mut o = Options {
            device: None,
            iters: 1000,
            probe: false,
        };
        let mut p = lexopt::Parser::from_args(args);
        while let Some(arg) = p.next().map_err(|e| e.to_string())? {
            match arg {
                Long("device") => {
                    o.device = Some(
                        p.value()
                            .and_then(|v| v.string())
                            .map_err(|e| e.to_string())?,
                    )
                }
                Long("iters") => {
                    o.iters = p
                        .value()
                        .and_then(|v| v.parse())
                        .map_err(|e| format!("--iters: {e}"))?
                }
                Long("probe") => o.probe = true,
                Short('h') | Long("help") => return Err(String::new()),
                other => return Err(other.unexpected().to_string()),
            }
        }
        if !(1..=4000).contains(&o.iters) {
            return Err("--iters must be 1 ..= 4000".into());
        }
        Ok(o)
    }
}

fn main() -> ExitCode {
    // Exit status 2 for a bad command line, 1 for a failed count.
    let parsed = Options::parse(std::env::args_os().skip(1));
    let Ok(opts) = parsed.inspect_err(|e| match e.as_str() {
        "" => eprintln!("{USAGE}"),
        e => eprintln!("syscalls: {e}\n{USAGE}"),
    }) else {
        return ExitCode::from(2);
    };
    if let Err(e) = run(&opts) {
        eprintln!("syscalls: error: {e}");
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}

/// The count, or (`--probe`) the measured program.
fn run(opts: &Options) -> Result<()> {
    let dev = device(opts)?;
    match opts.probe {
        true => probe(&dev.open_with(&OpenOptions::new())?, opts.iters),
        false => count_under_strace(&dev, opts.iters),
    }
}

/// `--device`, or the first rxe device: the probe connects its QPs by
/// hand, which siw's iWARP QPs cannot do (they reach RTS only through the
/// rdma_cm).
fn device(opts: &Options) -> Result<Device> {
    let found = uverbs::devices()?.into_iter().find(|d| match &opts.device {
        Some(name) => d.name() == name,
        None => d.driver_id() == Some(DriverId::RXE),
    });
    Ok(found.ok_or_else(|| match &opts.device {
        Some(name) => format!("no RDMA device {name}"),
        None => "no rxe device (the probe connects RoCE QPs by hand)".into(),
    })?)
}

/// Runs the probe under strace and reports the system calls per call.
fn count_under_strace(dev: &Device, n: usize) -> Result<()> {
    let trace = std::env::temp_dir().join(format!("syscalls-strace.{}", std::process::id()));
    let status = Command::new("strace")
        .args(["-f", "-C", "-qq", "-s", "64", "-o"])
        .arg(&trace)
        .arg(std::env::current_exe()?)
        .args(["--probe", "--device", dev.name(), "--iters"])
        .arg(n.to_string())
        .status()
        .map_err(|e| format!("running strace (is it installed?): {e}"))?;
    let text = std::fs::read_to_string(&trace)?;
    let _ = std::fs::remove_file(&trace);
    if !status.success() {
        return Err(format!("the probe under strace failed ({status})").into());
    }
    let phases = phases(&text);
    println!(
        "syscalls {}: system calls per call, counted by strace -f:",
        dev.name()
    );
    println!(
        "  {:<10} {:>7} {:>9} {:>9}  by name",
        "phase", "calls", "syscalls", "per call"
    );
    let mut wrong = Vec::new();
    for p in &phases {
        let total: usize = p.syscalls.values().sum();
        let names: Vec<String> = p.syscalls.iter().map(|(k, v)| format!("{k}×{v}")).collect();
        let per = match p.n {
            Some(n) if n > 0 => format!("{:.2}", total as f64 / n as f64),
            _ => "-".into(),
        };
        let calls = p.n.map_or("-".to_string(), |n| n.to_string());
        println!(
            "  {:<10} {calls:>7} {total:>9} {per:>9}  {}",
            p.name,
            names.join(" ")
        );
        // The provider's promise: a doorbell write per post_send call, nothing else.
        let expected: Option<BTreeMap<String, usize>> = match (p.name.as_str(), p.n) {
            ("post_recv" | "poll_cq", Some(_)) => Some(BTreeMap::new()),
            ("post_send", Some(n)) => Some([("write".to_string(), n)].into()),
            _ => None,
        };
        if let Some(want) = expected {
            if want != p.syscalls {
                wrong.push(format!("{}: {:?}, expected {want:?}", p.name, p.syscalls));
            }
        }
    }
    for name in ["post_recv", "post_send", "poll_cq"] {
        if !phases.iter().any(|p| p.name == name) {
            wrong.push(format!("no {name} phase in the trace"));
        }
    }
    if let Some(at) = text.find("% time") {
        println!(
            "strace -c of the whole probe (set-up included):\n{}",
            text[at..].trim_end()
        );
    }
    if !wrong.is_empty() {
        return Err(format!("unexpected system calls: {}", wrong.join("; ")).into());
    }
    Ok(())
}

/// One phase of the trace: its name, its `n=` and the system calls in it.
#[derive(Debug, PartialEq)]
struct Phase {
    name: String,
    n: Option<usize>,
    syscalls: BTreeMap<String, usize>,
}

/// Splits an `strace -f` trace at the marker writes. A call that strace
/// shows in two pieces (`<unfinished ...>`, then `<... resumed>`) counts
/// once; signals and exits (`---`, `+++`) are not calls.
fn phases(trace: &str) -> Vec<Phase> {
    let mut out: Vec<Phase> = Vec::new();
    for line in trace.lines() {
        // With -f each line starts with the thread id.
        let call = line
            .trim_start_matches(|c: char| c.is_ascii_digit())
            .trim_start();
        let Some((name, _)) = call.split_once('(') else {
            continue; // `---`, `+++`, `<... resumed>`, the summary table
        };
        if name.is_empty() || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
            continue;
        }
        if let Some(at) = call.find(MARKER).filter(|_| name == "write") {
            let words = call[at + MARKER.len()..]
                .split(['\\', '"'])
                .next()
                .unwrap_or("");
            let mut words = words.split_whitespace();
            let name = words.next().unwrap_or("?").to_string();
            let n = words.find_map(|w| w.strip_prefix("n=")?.parse().ok());
            out.push(Phase {
                name,
                n,
                syscalls: BTreeMap::new(),
            });
            continue;
        }
        if let Some(p) = out.last_mut() {
            *p.syscalls.entry(name.to_string()).or_default() += 1;
        }
    }
    out.retain(|p| p.name != "end");
    out
}

/// Opens a phase: one `write()` of one line to stderr (formatted first, so
/// that it is a single system call).
fn phase(name: &str, n: Option<usize>) {
    let line = match n {
        Some(n) => format!("{MARKER}{name} n={n}\n"),
        None => format!("{MARKER}{name}\n"),
    };
    let _ = std::io::stderr().write_all(line.as_bytes());
}

/// The measured program (see the module's text).
fn probe(ctx: &Context, n: usize) -> Result<()> {
    let pd = ctx.alloc_pd()?;
    let cq = ctx.create_cq(2 * n as u32 + 8, None)?;
    let init = QpInit::new(QpType::Rc, &cq, &cq)
        .max_send_wr(n as u32)
        .max_recv_wr(n as u32);
    let (a, b) = (pd.create_qp(&init)?, pd.create_qp(&init)?);
    let mut buf = MmapMut::map_anon(8192)?;
    let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;
    // SAFETY: `buf` outlives the MR (dropped after it, at the end).
    let mr = unsafe { pd.reg_mr(buf.as_mut_ptr(), buf.len(), access)? };
    // RoCE loopback, by hand: each QP the other's peer, over GID 0.
    let gid = ctx.query_gid(1, 0)?;
    RcConnect::new(Mtu::Mtu1024).connect_pair(&a, &b, gid)?;
    let base = buf.as_ptr() as u64;
    let recv_sge = [Sge {
        addr: base + 4096,
        length: 64,
        lkey: mr.lkey(),
    }];
    let send_sge = [Sge {
        addr: base,
        length: 64,
        lkey: mr.lkey(),
    }];
    let send = SendWr::new(0, SendOp::Send { imm: None }, Payload::Sges(&send_sge));
    println!(
        "probe {} over {}: {n} × post_recv, {n} × post_send, {} × poll_cq",
        ctx.device_name(),
        ctx.transport_kind(),
        3 * n
    );

    phase("post_recv", Some(n));
    for i in 0..n {
        // SAFETY: the receive area (the second page) is never read or
        // written by this program; every receive lands there.
        unsafe {
            b.post_recv(&[RecvWr {
                wr_id: i as u64,
                sges: &recv_sge,
            }])?
        };
    }
    phase("post_send", Some(n));
    for i in 0..n {
        // SAFETY: the first page is only read by the device and not
        // written by the program.
        unsafe {
            let mut wr = send;
            wr.wr_id = i as u64;
            a.post_send(&[wr])?
        };
    }
    phase("settle", None);
    std::thread::sleep(Duration::from_millis(500));
    phase("poll_cq", Some(3 * n));
    let mut wc = [WorkCompletion::default(); 1];
    let mut got = 0;
    let mut bad = None;
    for _ in 0..3 * n {
        let k = cq.poll(&mut wc)?;
        if k == 1 && wc[0].status() != WcStatus::Success {
            bad.get_or_insert(wc[0]);
        }
        got += k;
    }
    phase("end", None);
    // Outside the phases: anything the sleep was too short for.
    let deadline = Instant::now() + WAIT;
    while got < 2 * n && Instant::now() < deadline {
        got += cq.poll(&mut wc)?;
    }
    if let Some(wc) = bad {
        return Err(format!("probe: a completion failed: {wc:?}").into());
    }
    if got != 2 * n {
        return Err(format!("probe: {got} completions, expected {}", 2 * n).into());
    }
    println!("probe: all {} completions succeeded", 2 * n);
    drop((a, b, mr));
    drop(buf);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_its_command_line() {
        let parse = |s: &str| Options::parse(s.split_whitespace().map(Into::into));
        let o = parse("--device rxe0 --iters 20 --probe").unwrap();
        assert_eq!(
            (o.device.as_deref(), o.iters, o.probe),
            (Some("rxe0"), 20, true)
        );
        let d = parse("").unwrap();
        assert_eq!((d.device, d.iters, d.probe), (None, 1000, false));
        assert!(parse("--iters 0").is_err());
        assert!(parse("--iters 4001").is_err());
        assert!(parse("--count-syscalls").is_err());
        assert_eq!(parse("--help").err().as_deref(), Some(""));
    }

    #[test]
    fn splits_a_trace_at_the_markers() {
        let trace = r#"100 execve("/tests/syscalls", ["syscalls"], 0x7ffd /* 3 vars */) = 0
100 write(2, "@@PHASE post_recv n=2\n", 22) = 22
100 write(2, "@@PHASE post_send n=2\n", 22) = 22
100 write(3, "\0\0\0\0", 24) = 24
100 write(3, "\0\0\0\0", 24 <unfinished ...>
101 futex(0x1, FUTEX_WAKE, 1) = 0
100 <... write resumed>) = 24
100 --- SIGCHLD {si_signo=SIGCHLD} ---
100 write(2, "@@PHASE poll_cq n=6\n", 20) = 20
100 write(2, "@@PHASE end\n", 12) = 12
100 exit_group(0) = ?
100 +++ exited with 0 +++
% time     seconds  usecs/call     calls    errors syscall
"#;
        let p = phases(trace);
        let names: Vec<_> = p.iter().map(|p| (p.name.as_str(), p.n)).collect();
        assert_eq!(
            names,
            [
                ("post_recv", Some(2)),
                ("post_send", Some(2)),
                ("poll_cq", Some(6))
            ]
        );
        assert!(p[0].syscalls.is_empty());
        assert_eq!(
            p[1].syscalls,
            [("write".into(), 2), ("futex".into(), 1)].into()
        );
        assert!(p[2].syscalls.is_empty());
    }
}
