//! Data-path latency and bandwidth, the `perf` tool (tools/perf.rs) against
//! perftest 4.5 (over libibverbs and its rxe/siw providers), with the same
//! parameters, in one run.
//!
//! `cargo vm bench` runs it inside the soft-RDMA VM after benches/verbs and
//! writes the data-path half of docs/benchmarks.md from its lines. Per cell
//! (device and connection, test, message size, queue depth; see
//! [`cells`]) it runs both tools `UVERBS_DP_ROUNDS` times, alternating
//! which goes first (A B, B A, …), each run a fresh server and client
//! process pair; the ratio ours ÷ perftest is then taken per round, so
//! slow drift of the emulated machine cancels. The whole set of cells runs
//! `UVERBS_DP_PASSES` times, so the report can tell a ratio that
//! reproduces from a noisy one.
//!
//! One line per run:
//!
//! ```text
//! @@RESULT {"kind":"datapath","pass":1,"round":2,"impl":"ours","device":"rxe0","conn":"loopback","test":"write_lat","size":2,"qd":1,"inline":220,"iters":300,"median_ns":…,"p10_ns":…,"p90_ns":…,"n":…}
//! @@RESULT {"kind":"datapath","pass":1,"round":2,"impl":"perftest","device":"siw0","conn":"cm","test":"write_bw","size":65536,"qd":64,"inline":0,"iters":512,"mib_per_s":…}
//! @@RESULT {"kind":"datapath","pass":1,"round":1,"impl":"ours",…,"error":"…"}
//! ```
//!
//! A run that fails is run once more (its line then says `"retried":true`);
//! only a second failure is reported as an error.
//!
//! Knobs: `UVERBS_DP_ROUNDS` (3), `UVERBS_DP_PASSES` (2),
//! `UVERBS_DP_LAT_ITERS` (300), `UVERBS_DP_BW_BYTES` (32 MiB per run),
//! `UVERBS_DP_ONLY` (words that must all appear in a cell's key, e.g.
//! `test=write_lat device=siw0`), `UVERBS_DP_PERF` (our tool's path,
//! default `/tests/perf`), `UVERBS_DP_PERFTEST_DIR` (default `/usr/bin`).
//! Without perftest or our tool it says so and exits 0.

mod cells;
// perf's tests, the same names (parse and uses_recv are perf's alone).
#[path = "../cli.rs"]
mod cli;
mod parse;
#[path = "../result.rs"]
mod result;
mod run;
#[allow(dead_code)]
#[path = "../../tools/perf/test_kind.rs"]
mod test_kind;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use cells::{Cell, Conn};
use parse::Measured;
use run::Ready;
use serde_json::json;

/// The longest one run (server and client) may take.
const RUN_TIMEOUT: Duration = Duration::from_secs(120);
/// How long an rdma_cm server gets before its client starts.
const CM_SETTLE: Duration = Duration::from_millis(300);

fn env_or<T: std::str::FromStr>(key: &str, default: T) -> T {
    std::env::var(key)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The two implementations.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Impl {
    Ours,
    Perftest,
}

impl Impl {
    fn name(self) -> &'static str {
        match self {
            Impl::Ours => "ours",
            Impl::Perftest => "perftest",
        }
    }
}

struct Tools {
    perf: PathBuf,
    perftest_dir: PathBuf,
}

impl Tools {
    /// Our `perf`'s server and client command lines for `cell` on `port`.
    fn ours(&self, cell: &Cell, port: u16) -> (Command, Command) {
        let common = |c: &mut Command| {
            c.args(["--device", cell.device, "--test", cell.test.name()])
                .args(["--size", &cell.size.to_string()])
                .args(["--iters", &cell.iters.to_string()])
                .args(["--qd", &cell.qd.to_string()])
                .args(["--inline", &cell.inline.to_string()])
                .args(["--port", &port.to_string()]);
            match cell.conn {
                // The GID perftest is given (`-x 0`): perf would otherwise
                // pick as perftest does without `-x`.
                Conn::Loopback => c.args(["--gid-index", "0"]),
                Conn::Cm(addr) => c.args(["--cm", addr]),
            };
        };
        let mut server = Command::new(&self.perf);
        server.arg("--server");
        common(&mut server);
        let mut client = Command::new(&self.perf);
        client.args(["--client", server_addr(cell)]);
        common(&mut client);
        (server, client)
    }

    /// perftest's server and client command lines for `cell` on `port`.
    fn perftest(&self, cell: &Cell, port: u16) -> (Command, Command) {
        let program = self.perftest_dir.join(format!("ib_{}", cell.test.name()));
        let common = |c: &mut Command| {
            // -F: do not fail on the emulated CPU's frequency warnings.
            c.args(["-d", cell.device, "-F"])
                .args(["-s", &cell.size.to_string()])
                .args(["-n", &cell.iters.to_string()])
                .args(["-p", &port.to_string()]);
            match cell.conn {
                Conn::Loopback => c.args(["-x", "0"]),
                Conn::Cm(_) => c.arg("-R"),
            };
            // No -I: perftest ignores it on rxe and siw (cells::LAT_INLINE).
            if cell.test.is_lat() {
                // Every sample, sorted, for the percentiles.
                c.arg("-H");
            } else {
                let moderation = cell.qd.min(100);
                c.args(["-t", &cell.qd.to_string()])
                    .args(["-Q", &moderation.to_string()]);
            }
        };
        let mut server = Command::new(&program);
        common(&mut server);
        let mut client = Command::new(&program);
        common(&mut client);
        client.arg(server_addr(cell));
        (server, client)
    }
}

/// The address the client is given: the out-of-band TCP peer for
/// loopback, the cm address otherwise.
fn server_addr(cell: &Cell) -> &'static str {
    match cell.conn {
        Conn::Loopback => "127.0.0.1",
        Conn::Cm(addr) => addr,
    }
}

/// One run of `imp` on `cell`.
fn measure(tools: &Tools, imp: Impl, cell: &Cell, port: u16) -> Result<Measured, String> {
    let (mut server, mut client) = match imp {
        Impl::Ours => tools.ours(cell, port),
        Impl::Perftest => tools.perftest(cell, port),
    };
    let ready = match cell.conn {
        Conn::Loopback => Ready::Listening(port),
        // An iWARP listener is a kernel TCP socket on the cm port: wait
        // for it (perftest's client does not retry a refused connect; it
        // once crashed on one). An rdma_cm listener on RoCE shows nowhere.
        Conn::Cm(_) if cell.device.starts_with("siw") => Ready::Listening(port),
        Conn::Cm(_) => Ready::After(CM_SETTLE),
    };
    let (s, c) = run::pair(&mut server, &mut client, ready, RUN_TIMEOUT)?;
    if !c.ok() {
        return Err(format!(
            "client: {}; server: {}",
            c.describe(),
            s.describe()
        ));
    }
    let got = match imp {
        Impl::Ours => parse::ours(&c.stdout),
        Impl::Perftest => parse::perftest(&c.stdout, cell.test.is_lat()),
    };
    got.map_err(|e| format!("{e}; server: {}", s.describe()))
}

fn report(
    pass: usize,
    round: usize,
    imp: Impl,
    cell: &Cell,
    retried: bool,
    got: &Result<Measured, String>,
) {
    let run = json!({"pass": pass, "round": round, "impl": imp.name(), "retried": retried});
    let measured = match got {
        Ok(Measured::Latency {
            median,
            p10,
            p90,
            n,
        }) => json!({"median_ns": median, "p10_ns": p10, "p90_ns": p90, "n": n}),
        Ok(Measured::Bandwidth { mib_per_s }) => json!({ "mib_per_s": mib_per_s }),
        Err(e) => json!({ "error": e }),
    };
    result::print("datapath", [run, cell.fields(), measured]);
}

/// The kernel's clock source: our tool stamps time with the vDSO clock
/// (`Instant::now`), perftest with the TSC, and the vDSO reads the clock
/// without a system call only from some sources (`tsc`, not `hpet` or
/// `acpi_pm`).
fn clocksource() -> String {
    std::fs::read_to_string("/sys/devices/system/clocksource/clocksource0/current_clocksource")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".into())
}

/// The median cost of one `Instant::now()` here, in ns (1001 calls).
fn clock_read_ns() -> u64 {
    let mut stamps = [Instant::now(); 1001];
    for s in stamps.iter_mut() {
        *s = Instant::now();
    }
    let mut gaps: Vec<u64> = stamps
        .windows(2)
        .map(|w| (w[1] - w[0]).as_nanos() as u64)
        .collect();
    gaps.sort_unstable();
    gaps[gaps.len() / 2]
}

fn main() {
    // No options of its own: the environment sets the run up.
    if !cli::parse("datapath", |name, _| Err(cli::unknown(name))) {
        return;
    }
    let tools = Tools {
        perf: env_or("UVERBS_DP_PERF", PathBuf::from("/tests/perf")),
        perftest_dir: env_or("UVERBS_DP_PERFTEST_DIR", PathBuf::from("/usr/bin")),
    };
    for (what, path) in [
        ("our perf tool", tools.perf.clone()),
        ("perftest", tools.perftest_dir.join("ib_write_lat")),
    ] {
        if !Path::new(&path).exists() {
            println!(
                "datapath bench: {what} is not at {}; nothing to measure (`cargo vm bench` runs it in the VM)",
                path.display()
            );
            return;
        }
    }
    let rounds: usize = env_or("UVERBS_DP_ROUNDS", 3).max(1);
    let passes: usize = env_or("UVERBS_DP_PASSES", 2).max(1);
    let lat_iters: usize = env_or("UVERBS_DP_LAT_ITERS", 300).max(10);
    let bw_bytes: usize = env_or("UVERBS_DP_BW_BYTES", 32 << 20);
    let only: Vec<String> = std::env::var("UVERBS_DP_ONLY")
        .map(|v| v.split_whitespace().map(String::from).collect())
        .unwrap_or_default();
    let cells = cells::all(lat_iters, bw_bytes, |c| {
        let key = c.key();
        only.iter().all(|w| key.split_whitespace().any(|k| k == w))
    });
    let start = Instant::now();
    let info = json!({
        "rounds": rounds,
        "passes": passes,
        "lat_iters": lat_iters,
        "bw_bytes": bw_bytes,
        "cells": cells.len(),
        "clocksource": clocksource(),
        "clock_read_ns": clock_read_ns(),
    });
    result::print("datapath_info", [info]);
    let mut port: u16 = 20000;
    for pass in 1..=passes {
        for cell in &cells {
            for round in 1..=rounds {
                // A B in odd rounds, B A in even ones.
                let order = if round % 2 == 1 {
                    [Impl::Ours, Impl::Perftest]
                } else {
                    [Impl::Perftest, Impl::Ours]
                };
                for imp in order {
                    port = if port >= 60000 { 20000 } else { port + 1 };
                    let mut got = measure(&tools, imp, cell, port);
                    // A run that failed is tried once more on a new port
                    // (the line says so); the second answer stands.
                    let retried = got.is_err();
                    if retried {
                        port = if port >= 60000 { 20000 } else { port + 1 };
                        got = measure(&tools, imp, cell, port);
                    }
                    report(pass, round, imp, cell, retried, &got);
                }
            }
        }
        let seconds = start.elapsed().as_secs_f64();
        result::print("datapath_info", [json!({"pass": pass, "seconds": seconds})]);
    }
    let seconds = start.elapsed().as_secs_f64();
    result::print("datapath_info", [json!({"done": true, "seconds": seconds})]);
}
