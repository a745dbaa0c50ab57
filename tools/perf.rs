//! A small perftest: latency and bandwidth of RC WRITE, SEND and READ
//! between two processes, with perftest 4.5's semantics and defaults, so
//! its numbers can be put beside `ib_write_lat`, `ib_send_lat`,
//! `ib_read_lat`, `ib_write_bw` and `ib_send_bw` run with the same
//! parameters.
//!
//! ```text
//! perf --server        --device NAME --test TEST [--size B] [--iters N] [--qd N] [--inline B] [--port P] [--cm ADDR]
//! perf --client SERVER --device NAME --test TEST [--size B] [--iters N] [--qd N] [--inline B] [--port P] [--cm ADDR]
//! perf --self-test [--full]  every test once (small; --full: perftest's defaults) on rxe0
//!                            (by hand and --cm 192.0.2.1) and siw0 (--cm 198.51.100.1)
//! ```
//!
//! Both sides speak perftest's wire protocol (`perf/wire.rs`), so either
//! may be perftest's own program (`ib_write_bw`, `ib_send_lat`, ... with the
//! same test, `-s` and `-n`): without `--cm` over TCP to SERVER:P (default
//! 18515, perftest's) with the QPs connected by hand (RoCE; the GID
//! perftest picks, or `--gid-index`, perftest's `-x`); with `--cm ADDR`
//! as perftest's `-R` (the server listens on ADDR:P, the client connects a
//! control QP there for the exchange and then the measured QP).
//! See `perf/run.rs` for what each test measures and `--help` for the
//! defaults. Each test ends as perftest's program does (`perf/side.rs`,
//! `Ending`: write_lat with its loop, the others with a closing key
//! exchange).
//! send_bw on iWARP keeps perftest's receive credits (`perf/run.rs`).
//! Each side prints one `@@PERF key=value ...` line; the exit
//! status is non-zero on any failure. Every wait is bounded (10 s without
//! progress).

use std::error::Error;
use std::ffi::OsString;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, ExitCode, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use test_kind::Test;
use thread_io::read_write_calls;

// Shared with the pingpong tool: its bounded accept.
#[path = "common/accept.rs"]
mod accept;
// Shared with the pingpong tool: the bounded wait for the other side's process.
#[path = "common/reap.rs"]
mod reap;
#[path = "perf/run.rs"]
mod run;
// The device tests' counter of read/write system calls.
#[path = "perf/side.rs"]
mod side;
#[path = "../tests/common/thread_io.rs"]
mod thread_io;
// perftest's messages and its control channel.
#[path = "perf/test_kind.rs"]
mod test_kind;
#[path = "perf/wire.rs"]
mod wire;

type Result<T, E = Box<dyn Error>> = std::result::Result<T, E>;

/// The longest any step waits without progress.
const WAIT: Duration = Duration::from_secs(10);
/// perftest's defaults (src/perftest_parameters.h).
const DEF_PORT: u16 = 18515;
const DEF_SIZE_LAT: usize = 2;
const DEF_SIZE_BW: usize = 65536;
const DEF_ITERS: usize = 1000;
const DEF_TX_BW: usize = 128;
const DEF_CQ_MOD: usize = 100;
/// Receives a send test keeps posted (DEF_RX_SEND), capped at the iterations.
const DEF_RX_SEND: usize = 512;
/// Above this size perftest turns CQ moderation off (MSG_SIZE_CQ_MOD_LIMIT).
const MSG_SIZE_CQ_MOD_LIMIT: usize = 8192;
/// The largest latencies perftest drops before its statistics (LAT_MEASURE_TAIL).
const LAT_MEASURE_TAIL: usize = 2;

const USAGE: &str = "\
usage: perf --server        --device NAME --test TEST [OPTIONS]
       perf --client SERVER --device NAME --test TEST [OPTIONS]
       perf --self-test [--full] [--yield N]

TEST: write_lat | send_lat | read_lat | write_bw | send_bw

--self-test runs server and client as two processes here: every TEST (small;
with --full perftest's default sizes and counts), an inline write_lat and a
parameter mismatch that must fail, on rxe0 by hand and through the cm at
192.0.2.1 and on siw0 through the cm at 198.51.100.1 (the VM guest's layout).

OPTIONS (defaults are perftest 4.5's):
  --size BYTES    message size (2 for *_lat, 65536 for *_bw)
  --iters N       iterations (1000)
  --qd N          requests outstanding, perftest's -t (1 for *_lat, 128 for *_bw;
                  at most --iters)
  --inline BYTES  inline SENDs/WRITEs up to this size (perftest's default: 0 on rxe
                  and siw, which it does not recognise; 220 write_lat / 236 send_lat
                  elsewhere); capped at what the device accepts
  --port P        TCP port (by hand) or rdma_cm port (18515)
  --gid-index N   the GID our QP sends from, by hand (perftest's -x; default:
                  the one perftest picks, an IPv4-mapped RoCE v2 GID if any)
  --cm ADDR       connect through the rdma_cm: the server listens on ADDR:P, the
                  client connects to ADDR:P (SERVER is then ignored)
  --yield N       sched_yield after every N empty polls (default 0: never, like
                  perftest). Not perftest's way: for hosts where the two spinning
                  processes leave no CPU to a soft device's kernel work (rxe's
                  tasks run in a workqueue), whose latencies otherwise jump to
                  scheduler ticks (ms)

CQ moderation is perftest's: signal every min(100, qd)-th request, every one
above 8192 bytes. Latency: the time between successive posts (ping-pong
round trip / 2 for write_lat and send_lat, one READ for read_lat), the 2
largest dropped. Bandwidth: size * iters from the first post to the last
completion, mib_per_s in 2^20 bytes/s (perftest's MB/sec). READs outstanding
each way: read_lat the device's max_qp_rd_atom, the others 1 (--cm: 0),
as perftest's out_reads. send_bw on iWARP (siw) uses perftest's receive
credits: the server WRITEs its receive count to the client every
min(iters, 512) / 3 receives, and the client keeps fewer than min(iters, 512)
SENDs beyond the last credit.
Output: one line '@@PERF side=... key=value ...' per side.";

/// `--test`'s error: what it takes.
const TESTS: &str = "--test takes write_lat | send_lat | read_lat | write_bw | send_bw";

#[derive(Clone, Debug, PartialEq, Eq)]
enum Role {
    Server,
    /// The server's address (by hand).
    Client(String),
    /// `--self-test`, with perftest's sizes and counts when `--full`.
    SelfTest {
        full: bool,
    },
}

#[derive(Clone, Debug)]
struct Options {
    role: Role,
    device: String,
    test: Test,
    size: usize,
    iters: usize,
    /// perftest's tx depth, capped at the iterations.
    qd: usize,
    /// `--inline`, or perftest's default for the device.
    inline: Option<usize>,
    port: u16,
    cm: Option<String>,
    /// `--yield N` (0: busy-poll only).
    yield_every: u32,
    /// `--gid-index N`, perftest's `-x` (by hand).
    gid_index: Option<u32>,
}

impl Options {
    /// `None`: `--help` asked for the usage.
    fn parse(args: impl IntoIterator<Item = OsString>) -> Result<Option<Options>, lexopt::Error> {
        use lexopt::prelude::*;
        let (mut role, mut device, mut test) = (None, None, None);
        let (mut size, mut iters, mut qd, mut inline) = (None, DEF_ITERS, None, None);
        let (mut port, mut cm, mut full, mut yield_every) = (DEF_PORT, None, false, 0);
        let (mut gid_index, mut p) = (None, lexopt::Parser::from_args(args));
        while let Some(arg) = p.next()? {
            match arg {
                Long("server") => role = Some(Role::Server),
                Long("client") => role = Some(Role::Client(p.value()?.string()?)),
                Long("self-test") => role = Some(Role::SelfTest { full: false }),
                Long("full") => full = true,
                Long("device") => device = Some(p.value()?.string()?),
                Long("test") => {
                    test = Some(p.value()?.parse_with(|v| Test::parse(v).ok_or(TESTS))?)
                }
                Long("size") => size = Some(p.value()?.parse()?),
                Long("iters") => iters = p.value()?.parse()?,
                Long("qd") => qd = Some(p.value()?.parse()?),
                Long("inline") => inline = Some(p.value()?.parse()?),
                Long("port") => port = p.value()?.parse()?,
                Long("cm") => cm = Some(p.value()?.string()?),
                Long("gid-index") => gid_index = Some(p.value()?.parse()?),
                Long("yield") => yield_every = p.value()?.parse()?,
                Short('h') | Long("help") => return Ok(None),
                _ => return Err(arg.unexpected()),
            }
        }
        let mut role = role.ok_or("--server, --client ADDR or --self-test is needed")?;
        if let Role::SelfTest { full: f } = &mut role {
            *f = full;
            return Ok(Some(Options {
                role,
                device: String::new(),
                test: Test::WriteLat,
                size: 0,
                iters: 0,
                qd: 0,
                inline: None,
                port,
                cm: None,
                yield_every,
                gid_index,
            }));
        }
        let device = device.ok_or("--device is needed")?;
        let test = test.ok_or("--test is needed")?;
        let size = size.unwrap_or(if test.is_lat() {
            DEF_SIZE_LAT
        } else {
            DEF_SIZE_BW
        });
        if size == 0 || size > 1 << 30 {
            return Err("--size must be 1 B ..= 1 GiB".into());
        }
        if !(2..=100_000_000).contains(&iters) {
            return Err("--iters must be 2 ..= 100000000".into());
        }
        let qd = qd.unwrap_or(if test.is_lat() { 1 } else { DEF_TX_BW });
        if qd == 0 || qd > 8192 {
            return Err("--qd must be 1 ..= 8192".into());
        }
        if matches!(test, Test::ReadLat) && inline.is_some_and(|n| n > 0) {
            eprintln!("perf: READ has no inline data; --inline ignored (perftest does the same)");
        }
        Ok(Some(Options {
            role,
            device,
            test,
            size,
            iters,
            // force_dependecies: tx depth at most the iterations.
            qd: qd.min(iters),
            inline,
            port,
            cm,
            yield_every,
            gid_index,
        }))
    }

    fn server(&self) -> bool {
        self.role == Role::Server
    }

    /// perftest's CQ moderation: 100, off above 8 KiB, at most the tx depth.
    fn cq_mod(&self) -> usize {
        let m = if self.size > MSG_SIZE_CQ_MOD_LIMIT {
            1
        } else {
            DEF_CQ_MOD
        };
        m.min(self.qd)
    }

    /// How long the server may wait for the client's whole run: [`WAIT`]
    /// plus 1 ms and 10 ns a byte per message (more than rxe under TCG
    /// takes).
    fn run_budget(&self) -> Duration {
        let per = 1_000_000u64 + 10 * self.size as u64;
        WAIT + Duration::from_nanos(per.saturating_mul(self.iters as u64))
    }
}

fn main() -> ExitCode {
    let opts = match Options::parse(std::env::args_os().skip(1)) {
        Ok(Some(o)) => o,
        Ok(None) => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("perf: {e}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    run::YIELD_EVERY.store(opts.yield_every, std::sync::atomic::Ordering::Relaxed);
    if let Role::SelfTest { full } = opts.role {
        return match self_test(full, opts.yield_every) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("perf --self-test: {e}");
                ExitCode::FAILURE
            }
        };
    }
    match measure(&opts) {
        Ok(line) => {
            println!("{line}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            println!(
                "{} status=error error=\"{}\"",
                prefix(&opts, None),
                e.to_string().replace('"', "'")
            );
            ExitCode::FAILURE
        }
    }
}

/// The `@@PERF` line's first fields; `inline` is what was used (once known).
fn prefix(opts: &Options, inline: Option<usize>) -> String {
    let side = if opts.server() { "server" } else { "client" };
    let conn = if opts.cm.is_some() { "cm" } else { "loopback" };
    let inline = inline.map_or("?".to_string(), |n| n.to_string());
    // Only when asked for: not perftest's way of polling.
    let yielding = match opts.yield_every {
        0 => String::new(),
        n => format!(" yield={n}"),
    };
    format!(
        "@@PERF side={side} device={} conn={conn} test={} size={} iters={} qd={} inline={inline}{yielding}",
        opts.device,
        opts.test.name(),
        opts.size,
        opts.iters,
        opts.qd
    )
}

/// Connects, runs the test, ends the run; the `@@PERF` line.
fn measure(opts: &Options) -> Result<String> {
    let server = opts.server();
    let mut c = match (&opts.cm, &opts.role) {
        (Some(addr), _) => side::by_cm(opts, addr, server, opts.qd)?,
        (None, Role::Client(addr)) => side::by_hand(opts, Some(addr), opts.qd)?,
        (None, _) => side::by_hand(opts, None, opts.qd)?,
    };
    // What a SEND or WRITE of this size goes as (perftest: inline iff
    // size <= inline_size; a READ never).
    let inline_used = if opts.test != Test::ReadLat && c.side.size <= c.side.inline {
        c.side.inline
    } else {
        0
    };
    println!(
        "perf {} {} on {} over {}, QP {}: {} size {} iters {} qd {} cq_mod {} inline {} (the QP takes {}), peer target {:#x}",
        if server { "server" } else { "client" },
        c.link.kind(),
        c.ctx.device_name(),
        c.ctx.transport_kind(),
        c.side.qp.qp_num(),
        opts.test.name(),
        opts.size,
        opts.iters,
        opts.qd,
        opts.cq_mod(),
        inline_used,
        c.side.inline,
        c.peer.addr,
    );
    let head = prefix(opts, Some(inline_used));
    let io_before = read_write_calls();
    let measured = match opts.test {
        Test::WriteLat => {
            Measured::Lat(run::write_lat(&mut c.side, c.peer, opts.iters, server)?, 2)
        }
        Test::SendLat => Measured::Lat(
            run::send_lat(&mut c.side, opts.iters, server, opts.cq_mod())?,
            2,
        ),
        Test::ReadLat if server => Measured::Nothing,
        Test::ReadLat => Measured::Lat(run::read_lat(&mut c.side, c.peer, opts.iters)?, 1),
        Test::WriteBw if server => Measured::Nothing,
        Test::WriteBw | Test::SendBw if !server => Measured::Bw(run::bw_client(
            &mut c.side,
            c.peer,
            opts.iters,
            opts.qd,
            opts.cq_mod(),
            opts.test == Test::WriteBw,
        )?),
        _ => Measured::Bw(run::send_bw_server(
            &mut c.side,
            c.peer,
            opts.iters,
            opts.qd,
            opts.run_budget(),
        )?),
    };
    if let (Some(a), Some(b), Some(overhead)) = (io_before, read_write_calls(), io_overhead()) {
        println!(
            "perf {}: the measured loop made {} read() and {} write() system calls \
             (the writes are POST_SEND doorbells: rxe rings one per post, siw only when its SQ was idle; {} requests posted)",
            if server { "server" } else { "client" },
            b.0.saturating_sub(a.0 + overhead.0),
            b.1.saturating_sub(a.1 + overhead.1),
            match measured {
                Measured::Nothing => 0,
                _ if opts.test == Test::SendBw && server => 0,
                _ => opts.iters,
            }
        );
    }
    let line = match measured {
        Measured::Lat(posted, factor) => {
            format!("{head} {}", LatStats::from_posts(&posted, factor).fields())
        }
        Measured::Bw(elapsed) => format!("{head} {}", bw_fields(opts, elapsed)),
        Measured::Nothing => head,
    };
    c.link.finish(server, opts.run_budget())?;
    Ok(line)
}

/// What a side's loop measured.
enum Measured {
    /// The post time stamps, and the divisor (2 for a round trip).
    Lat(Vec<Instant>, u32),
    /// From the first post (or receive) to the last completion.
    Bw(Duration),
    /// The passive side of read_lat and write_bw.
    Nothing,
}

/// What one [`read_write_calls`] adds to the counts itself.
fn io_overhead() -> Option<(u64, u64)> {
    let (a, b) = (read_write_calls()?, read_write_calls()?);
    Some((b.0 - a.0, b.1 - a.1))
}

/// perftest's latency statistics (print_report_lat): the differences of
/// successive post times (iters - 1 of them), sorted, the
/// [`LAT_MEASURE_TAIL`] largest left out of median, average and
/// percentiles; divided by `factor` (2 for a round trip).
struct LatStats {
    /// Sorted, in ns, before the division (all iters - 1).
    deltas: Vec<u64>,
    /// The samples counted (deltas.len() - tail).
    n: usize,
    factor: f64,
}

impl LatStats {
    fn from_posts(posted: &[Instant], factor: u32) -> LatStats {
        let mut deltas: Vec<u64> = posted
            .windows(2)
            .map(|w| (w[1] - w[0]).as_nanos() as u64)
            .collect();
        deltas.sort_unstable();
        let n = deltas.len().saturating_sub(LAT_MEASURE_TAIL).max(1);
        LatStats {
            deltas,
            n,
            factor: f64::from(factor),
        }
    }

    fn ns(&self, raw: u64) -> u64 {
        (raw as f64 / self.factor).round() as u64
    }

    /// perftest's percentile: the sample at ceil(n * q) (its 99 % index).
    fn at(&self, q: f64) -> u64 {
        let i = ((self.n as f64 * q).ceil() as usize).min(self.deltas.len() - 1);
        self.ns(self.deltas[i])
    }

    /// perftest's get_median over the first n samples.
    fn median(&self) -> u64 {
        let (n, d) = (self.n, &self.deltas);
        let raw = if n >= 2 && (n - 1) % 2 == 1 {
            (d[n / 2] + d[n / 2 - 1]) / 2
        } else {
            d[n / 2]
        };
        self.ns(raw)
    }

    fn fields(&self) -> String {
        let sum: u64 = self.deltas[..self.n].iter().sum();
        let avg = sum as f64 / self.n as f64 / self.factor;
        format!(
            "median_ns={} p10_ns={} p90_ns={} p99_ns={} avg_ns={} min_ns={} max_ns={}",
            self.median(),
            self.at(0.10),
            self.at(0.90),
            self.at(0.99),
            avg.round() as u64,
            self.ns(self.deltas[0]),
            self.ns(self.deltas[self.n.min(self.deltas.len() - 1)]),
        )
    }
}

fn bw_fields(opts: &Options, elapsed: Duration) -> String {
    let bytes = (opts.size * opts.iters) as u64;
    let secs = elapsed.as_secs_f64().max(1e-9);
    format!(
        "bytes={bytes} elapsed_ns={} mib_per_s={:.2} msg_per_s={:.0}",
        elapsed.as_nanos(),
        bytes as f64 / 1048576.0 / secs,
        opts.iters as f64 / secs
    )
}

// ---- --self-test -----------------------------------------------------------

/// One connection of the self-test: device, `--cm` address, port base.
const SELF_TEST_LINKS: &[(&str, Option<&str>)] = &[
    ("rxe0", None),
    ("rxe0", Some("192.0.2.1")),
    ("siw0", Some("198.51.100.1")),
];

/// One self-test case: a test, extra arguments for both sides, extra
/// arguments for the client only, and whether both sides must fail.
struct Case {
    test: Test,
    both: &'static [&'static str],
    client: &'static [&'static str],
    must_fail: bool,
}

/// Every test over each of [`SELF_TEST_LINKS`] (small, or with perftest's
/// defaults when `full`), then inline WRITE latency with `--inline 220`
/// (siw's cap is 80: the QP takes the largest the device accepts), then a
/// client whose `--size` differs from the server's, which both must fail
/// (perftest's protocol carries no test parameters: each side's run stalls
/// and gives up after [`WAIT`], as perftest's would hang).
fn self_test(full: bool, yield_every: u32) -> Result<()> {
    let small_lat: &[&str] = if full {
        &[]
    } else {
        &["--size", "2", "--iters", "200"]
    };
    let small_bw: &[&str] = if full {
        &[]
    } else {
        &["--size", "4096", "--iters", "200", "--qd", "16"]
    };
    let mut cases: Vec<Case> = Test::ALL
        .into_iter()
        .map(|test| Case {
            test,
            both: if test.is_lat() { small_lat } else { small_bw },
            client: &[],
            must_fail: false,
        })
        .collect();
    cases.push(Case {
        test: Test::WriteLat,
        both: &["--iters", "200", "--inline", "220"],
        client: &[],
        must_fail: false,
    });
    cases.push(Case {
        test: Test::WriteLat,
        both: &["--iters", "200"],
        client: &["--size", "4"],
        must_fail: true,
    });
    let mut failed = Vec::new();
    let mut runs = 0;
    let mut port = DEF_PORT;
    for &(device, cm) in SELF_TEST_LINKS {
        for case in &cases {
            let mut args: Vec<String> = ["--device", device, "--test", case.test.name()]
                .map(String::from)
                .into();
            args.extend(case.both.iter().map(|a| a.to_string()));
            args.extend(["--port".into(), port.to_string()]);
            if let Some(addr) = cm {
                args.extend(["--cm".into(), addr.into()]);
            }
            if yield_every > 0 {
                args.extend(["--yield".into(), yield_every.to_string()]);
            }
            port += 1;
            runs += 1;
            let what = format!(
                "{device} {} {}{}",
                cm.map_or("loopback".to_string(), |a| format!("cm {a}")),
                case.test.name(),
                if case.must_fail {
                    " (parameters differ: must fail)"
                } else {
                    ""
                }
            );
            println!(
                "perf --self-test: {what}: perf {} [client: {}]",
                args.join(" "),
                case.client.join(" ")
            );
            let client: Vec<String> = case.client.iter().map(|a| a.to_string()).collect();
            let outcome = self_test_one(&args, &client, cm.unwrap_or("127.0.0.1"));
            let verdict = match (outcome, case.must_fail) {
                (Ok((true, true)), false) | (Ok((false, false)), true) => Ok(()),
                (Ok((c, s)), _) => Err(format!(
                    "client {}, server {}",
                    if c { "succeeded" } else { "failed" },
                    if s { "succeeded" } else { "failed" }
                )),
                (Err(e), _) => Err(e.to_string()),
            };
            match verdict {
                Ok(()) => println!("perf --self-test: {what}: ok"),
                Err(e) => {
                    println!("perf --self-test: {what}: FAILED: {e}");
                    failed.push(what);
                }
            }
        }
    }
    if failed.is_empty() {
        println!("perf --self-test: all {runs} runs passed");
        Ok(())
    } else {
        Err(format!("{} of {runs} failed: {}", failed.len(), failed.join(", ")).into())
    }
}

/// A server process, and a client process (with `client_extra`) once the
/// server says it listens; whether each exited 0, both within bounds.
fn self_test_one(
    args: &[String],
    client_extra: &[String],
    server_addr: &str,
) -> Result<(bool, bool)> {
    let exe = std::env::current_exe()?;
    let mut server = Command::new(&exe)
        .arg("--server")
        .args(args)
        .stdout(Stdio::piped())
        .spawn()?;
    let out = server.stdout.take().ok_or("no server stdout")?;
    let (tx, rx) = mpsc::channel();
    // Forwards the server's lines; tells when it listens.
    let forward = std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(|l| l.ok()) {
            if line.starts_with("perf server: listening") {
                let _ = tx.send(());
            }
            println!("  [server] {line}");
            let _ = std::io::stdout().flush();
        }
    });
    if rx.recv_timeout(WAIT).is_err() {
        let _ = server.kill();
        let _ = server.wait();
        let _ = forward.join();
        return Err("the server did not listen".into());
    }
    let client = Command::new(&exe)
        .arg("--client")
        .arg(server_addr)
        .args(args)
        .args(client_extra)
        .status_within(Duration::from_secs(120));
    let served = reap(&mut server, Duration::from_secs(120));
    let _ = forward.join();
    Ok((client?.success(), served?.success()))
}

/// Runs a command to its end, killed after `limit`.
trait StatusWithin {
    fn status_within(&mut self, limit: Duration) -> Result<ExitStatus>;
}

impl StatusWithin for Command {
    fn status_within(&mut self, limit: Duration) -> Result<ExitStatus> {
        let mut child = self.spawn()?;
        reap(&mut child, limit)
    }
}

/// Waits at most `limit` for `child` to exit, then kills it.
fn reap(child: &mut Child, limit: Duration) -> Result<ExitStatus> {
    reap::reap(child, limit, "a process")
}
