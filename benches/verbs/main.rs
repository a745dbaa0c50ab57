//! Verbs latencies on real devices: this crate, the bare system call (the
//! floor) and, with the `libibverbs-peer` feature, Debian's libibverbs.
//!
//! `cargo vm bench` runs it inside the soft-RDMA VM against rxe0 and siw0 and
//! writes docs/benchmarks.md from its output; on a host with devices,
//! `cargo bench -p uverbs-bench --bench verbs` runs the same code directly (without devices
//! it says so and exits 0).
//!
//! Every measurement is one result line on stdout that the VM harness
//! reads (`result.rs`):
//!
//! ```text
//! @@RESULT {"kind":"verbs","device":"rxe0","impl":"ours","transport":"ioctl","fork":"off","op":"rereg_access","size":1048576,"path":"inplace","median_ns":…,"p10_ns":…,"p90_ns":…,"n":…,"pass":1,"round":1}
//! @@RESULT {"kind":"verbs","device":"siw0","impl":"libibverbs",…,"status":"unsupported","detail":"errno=95 ret=-4"}
//! ```
//!
//! Each cell gets `UVERBS_BENCH_CELL_MS` (default 500) in total, split
//! into `UVERBS_BENCH_ROUNDS` rounds (default 3): the whole set of cells
//! runs round after round, so the rows a ratio compares are measured next
//! to each other in every round and the report takes the ratio per round;
//! odd rounds run ours, the floor, then libibverbs, even rounds the reverse
//! (A B, B A, …). The rounds run `UVERBS_BENCH_PASSES` times (default 2), so
//! the report can tell a ratio that reproduces from a noisy one. Each cell
//! of a round runs one warm-up, then at least 5 and at most 20 000 samples,
//! and reports the median and the 10th and 90th percentiles of single calls
//! (its line carries `pass=` and `round=`). `UVERBS_BENCH_SIZES` (e.g.
//! `4K,1M`) and `UVERBS_BENCH_DEVICES` (e.g. `rxe0`) narrow the run.
//!
//! `--framing` measures no time: it traces which system call each
//! implementation makes for each control operation (`framing` results;
//! see `framing.rs`).

#[path = "../cli.rs"]
mod cli;
mod floor;
#[cfg(feature = "libibverbs-peer")]
mod framing;
#[cfg(feature = "libibverbs-peer")]
mod ibv;
#[cfg(feature = "libibverbs-peer")]
#[path = "../libibverbs.rs"]
mod libibverbs;
mod ours;
#[path = "../result.rs"]
mod result;
mod stats;
#[cfg(feature = "libibverbs-peer")]
mod trace;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use serde_json::json;
use uverbs::transport::TransportMode;

/// The region sizes of the issue: 4 KiB to 256 MiB.
const SIZES: &[usize] = &[4 << 10, 64 << 10, 1 << 20, 16 << 20, 256 << 20];

/// The two framings, as the harness names them (the floor's).
pub const TRANSPORTS: &[(&str, TransportMode)] = &[
    ("ioctl", TransportMode::Ioctl),
    ("write", TransportMode::Write),
];

/// Ours: the two framings, and the default (`auto`: what a context opened
/// without options uses).
pub const OURS_TRANSPORTS: &[(&str, TransportMode)] = &[
    ("ioctl", TransportMode::Ioctl),
    ("write", TransportMode::Write),
    ("auto", TransportMode::Auto),
];

/// The pass and round being measured, printed in every line. Relaxed: only
/// the main thread measures.
static PASS: AtomicUsize = AtomicUsize::new(1);
static ROUND: AtomicUsize = AtomicUsize::new(1);

fn parse_size(s: &str) -> Option<usize> {
    let s = s.trim();
    let (num, mult) = match s.chars().last()? {
        'K' | 'k' => (&s[..s.len() - 1], 1 << 10),
        'M' | 'm' => (&s[..s.len() - 1], 1 << 20),
        'G' | 'g' => (&s[..s.len() - 1], 1 << 30),
        _ => (s, 1),
    };
    num.parse::<usize>().ok().map(|n| n * mult)
}

fn main() {
    let mut framing = false;
    // The framing run's traced child: `--framing-child DEVICE`.
    #[cfg(feature = "libibverbs-peer")]
    let mut child = None;
    let run = cli::parse("verbs", |name, p| {
        match name {
            "framing" => framing = true,
            #[cfg(feature = "libibverbs-peer")]
            "framing-child" => child = Some(lexopt::ValueExt::string(p.value()?)?),
            _ => return Err(cli::unknown(name)),
        }
        let _ = p; // only --framing-child (libibverbs-peer) takes a value
        Ok(())
    });
    if !run {
        return;
    }
    #[cfg(feature = "libibverbs-peer")]
    if let Some(dev) = child {
        if let Err(e) = framing::child(&dev) {
            eprintln!("verbs --framing-child {dev}: {e}");
            std::process::exit(1);
        }
        return;
    }
    // In the VM the harness asks for a quiet console: rxe logs refused
    // rereg flags at error level, and a kernel line printed into the middle
    // of a result line on the serial console makes it unreadable. Only
    // when asked: on a user's host this would change their console level.
    if std::env::var_os("UVERBS_BENCH_QUIET_CONSOLE").is_some() {
        if let Err(e) = std::fs::write("/proc/sys/kernel/printk", "1") {
            let error = e.kind().to_string();
            result::print(
                "verbs_info",
                [json!({"quiet_console": "failed", "error": error})],
            );
        }
    }
    let rounds: usize = std::env::var("UVERBS_BENCH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3usize)
        .max(1);
    let passes: usize = std::env::var("UVERBS_BENCH_PASSES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2usize)
        .max(1);
    let budget = stats::Budget::from_env().per_round(rounds);
    let sizes: Vec<usize> = match std::env::var("UVERBS_BENCH_SIZES") {
        Ok(v) => v.split(',').filter_map(parse_size).collect(),
        Err(_) => SIZES.to_vec(),
    };
    let only: Option<Vec<String>> = std::env::var("UVERBS_BENCH_DEVICES")
        .ok()
        .map(|v| v.split(',').map(|s| s.trim().to_string()).collect());
    let devices = match uverbs::devices() {
        Ok(d) => d,
        Err(e) => {
            println!("verbs bench: cannot list RDMA devices ({e}); nothing to measure");
            return;
        }
    };
    let devices: Vec<_> = devices
        .into_iter()
        .filter(|d| {
            only.as_ref()
                .map_or(true, |o| o.iter().any(|n| n == d.name()))
        })
        .collect();
    if devices.is_empty() {
        println!(
            "verbs bench: no RDMA device here; nothing to measure (`cargo vm bench` runs it against rxe0 and siw0)"
        );
        return;
    }
    if framing {
        #[cfg(feature = "libibverbs-peer")]
        framing::run(&devices);
        #[cfg(not(feature = "libibverbs-peer"))]
        result::print(
            "framing",
            [json!({"error": "built without the libibverbs-peer feature"})],
        );
        return;
    }
    let start = Instant::now();
    let sizes_list: Vec<String> = sizes.iter().map(|s| s.to_string()).collect();
    result::print(
        "verbs_info",
        [json!({
            "cell_ms": budget.cell.as_millis() as u64 * rounds as u64,
            "rounds": rounds,
            "passes": passes,
            "min_n": budget.min_n,
            "max_n": budget.max_n,
            "sizes": sizes_list.join(","),
            "peer": if cfg!(feature = "libibverbs-peer") { "libibverbs" } else { "none" },
        })],
    );
    for pass in 1..=passes {
        PASS.store(pass, Ordering::Relaxed);
        for round in 1..=rounds {
            ROUND.store(round, Ordering::Relaxed);
            for dev in &devices {
                let t = Instant::now();
                result::print(
                    "verbs_info",
                    [json!({
                        "device": dev.name(),
                        "uverbs": dev.uverbs_name(),
                        "driver_abi": dev.driver_abi_version(),
                    })],
                );
                // Compared cells run next to each other (same size, same buffers),
                // so slow drift of the emulated machine does not bias the ratios.
                let mut ours: Vec<_> = OURS_TRANSPORTS
                    .iter()
                    .map(|&(t, mode)| ours::Ours::new(dev, t, mode))
                    .collect();
                let mut floors: Vec<_> = TRANSPORTS
                    .iter()
                    .map(|&(t, _)| floor::Floor::new(dev, t))
                    .collect();
                #[cfg(feature = "libibverbs-peer")]
                let mut ibv = ibv::Ibv::new(dev);
                // Odd rounds run ours, the floor, then libibverbs; even rounds
                // the reverse, so no implementation always follows the
                // others' set-up and teardown (rxe's PD alloc + dealloc is
                // bimodal, and which mode a cell gets depends on what ran
                // just before it).
                let mut order: Vec<Step> = (0..ours.len())
                    .map(Step::Ours)
                    .chain((0..floors.len()).map(Step::Floor))
                    .collect();
                #[cfg(feature = "libibverbs-peer")]
                order.push(Step::Ibv);
                if round % 2 == 0 {
                    order.reverse();
                }
                for step in &order {
                    match *step {
                        Step::Ours(i) => ours[i].fixed(&budget),
                        Step::Floor(i) => floors[i].fixed(dev, &budget),
                        #[cfg(feature = "libibverbs-peer")]
                        Step::Ibv => ibv.fixed(&budget),
                    }
                }
                for &size in &sizes {
                    let (mut a, mut b) = (ours::buffer(size), ours::buffer(size));
                    for step in &order {
                        match *step {
                            Step::Ours(i) => ours[i].size(size, &mut a, &mut b, &budget),
                            Step::Floor(i) => floors[i].size(size, &mut a, &budget),
                            #[cfg(feature = "libibverbs-peer")]
                            Step::Ibv => ibv.size(size, &mut a, &mut b, &budget),
                        }
                    }
                }
                let seconds = t.elapsed().as_secs_f64();
                result::print(
                    "verbs_info",
                    [json!({"device": dev.name(), "seconds": seconds})],
                );
            }
        }
    }
    let seconds = start.elapsed().as_secs_f64();
    result::print("verbs_info", [json!({"done": true, "seconds": seconds})]);
}

/// One implementation's turn in a round: ours or the floor over the
/// transport at this index, or libibverbs.
#[derive(Clone, Copy)]
enum Step {
    Ours(usize),
    Floor(usize),
    #[cfg(feature = "libibverbs-peer")]
    Ibv,
}

/// Identifies one measured cell in the output line.
pub struct Cell<'a> {
    pub device: &'a str,
    pub imp: &'a str,
    pub transport: &'a str,
    pub fork: &'a str,
    pub op: &'a str,
    pub size: usize,
}

impl Cell<'_> {
    /// The fields that name the cell, with the pass and round.
    fn key(&self) -> serde_json::Value {
        json!({
            "pass": PASS.load(Ordering::Relaxed),
            "round": ROUND.load(Ordering::Relaxed),
            "device": self.device,
            "impl": self.imp,
            "transport": self.transport,
            "fork": self.fork,
            "op": self.op,
            "size": self.size,
        })
    }

    /// Prints a measured cell; `path` says how a rereg was carried out.
    pub fn report(&self, path: Option<&str>, s: &stats::Summary) {
        let numbers = json!({"median_ns": s.median, "p10_ns": s.p10, "p90_ns": s.p90, "n": s.n});
        let path = path.map(|p| json!({ "path": p }));
        result::print("verbs", [self.key(), numbers].into_iter().chain(path));
    }

    /// Prints a cell the device or library does not support.
    pub fn unsupported(&self, detail: &str) {
        let why = json!({"status": "unsupported", "detail": detail});
        result::print("verbs", [self.key(), why]);
    }

    /// Prints a cell that failed unexpectedly.
    pub fn failed(&self, detail: &str) {
        let why = json!({"status": "error", "detail": detail});
        result::print("verbs", [self.key(), why]);
    }
}

/// Keeps the optimiser from dropping a value.
pub fn keep<T>(v: T) -> T {
    std::hint::black_box(v)
}
