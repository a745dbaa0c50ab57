//! `cargo vm bench`: runs benches/verbs (ours, the bare system call and a
//! statically linked libibverbs) inside the VM against rxe0 and siw0, then
//! writes `docs/benchmarks.md` and `docs/benchmarks.svg` from the `@@BENCH`
//! lines the guest printed.
//!
//! 1. Installs what the libibverbs peer links against (`libibverbs-dev`,
//!    `libnl-3-dev`, `libnl-route-3-dev`) with apt-get when missing.
//! 2. Builds the bench statically with `--features libibverbs-peer`.
//! 3. Boots it once; the bench picks both devices
//!    and both transports itself.
//! 4. Parses the console, prints the headline table and writes the docs.
//!
//! `UVERBS_BENCH_CELL_MS` and `UVERBS_BENCH_SIZES` are passed to the guest
//! (a quicker, rougher run); `UVERBS_BENCH_FROM_LOG=<console.log>` skips the
//! build and the boot and only regenerates the docs from a saved log.

use crate::apt;
use crate::binaries::{build_collect, Binary, TARGET};
use crate::guest::{Mode, RunConfig};
use crate::markers::{self, BENCH, BENCH_INFO, BOOTED};
use crate::util::{cargo, err, run_captured, say, Context, Error, Result};
use crate::Ctx;
use cargo_metadata::TargetKind;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;
use std::process::Command;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// Debian packages the libibverbs peer links against (static archives).
const PEER_PACKAGES: &[&str] = &["libibverbs-dev", "libnl-3-dev", "libnl-route-3-dev"];

/// The region sizes, in the order of the tables.
const SIZES: &[u64] = &[4 << 10, 64 << 10, 1 << 20, 16 << 20, 256 << 20];

/// Guest environment passed through from the host when set.
const PASS_THROUGH: &[&str] = &[
    "UVERBS_BENCH_CELL_MS",
    "UVERBS_BENCH_SIZES",
    "UVERBS_BENCH_DEVICES",
];

/// `cargo vm bench`: entry point from main.rs.
pub fn run(ctx: &Ctx, kernel: &crate::setup::Kernel) -> Result<bool> {
    let start = Instant::now();
    let (console, vm_secs) = match std::env::var_os("UVERBS_BENCH_FROM_LOG") {
        Some(log) => {
            say(format!(
                "bench: regenerating the docs from {}",
                Path::new(&log).display()
            ));
            let text = std::fs::read_to_string(&log).context("bench: reading the saved log")?;
            (text, None)
        }
        None => {
            ensure_peer_packages()?;
            let bin = build(&ctx.workspace)?;
            let env: Vec<(&'static str, &'static str)> = PASS_THROUGH
                .iter()
                .filter_map(|k| {
                    let v = std::env::var(k).ok()?;
                    Some((*k, &*Box::leak(v.into_boxed_str())))
                })
                .collect();
            let configs = [RunConfig {
                name: "bench",
                env: Box::leak(env.into_boxed_slice()),
            }];
            let outcome = ctx
                .boot(kernel, &[bin], &configs, Mode::Run)?
                .expect("run mode has an outcome");
            if outcome.status.is_none() {
                say("bench: qemu was killed at the timeout; reporting what finished");
            }
            (outcome.console, Some(outcome.elapsed.as_secs_f64()))
        }
    };
    let run = parse(&console);
    if run.rows.is_empty() {
        return Err(Error(format!(
            "bench: the guest printed no {} lines; see {}",
            BENCH,
            ctx.cache.join(crate::CONSOLE_LOG).display()
        )));
    }
    let errors: Vec<&Row> = run.rows.iter().filter(|r| r.status == "error").collect();
    let rc_ok = crate::report::parse(&console)
        .iter()
        .any(|r| r.config == "bench" && r.bin == "verbs" && r.rc == 0);
    let meta = Meta::collect(&run, vm_secs, start.elapsed().as_secs_f64());
    let docs = ctx.workspace.join("docs");
    let md = markdown(&run, &meta);
    std::fs::write(docs.join("benchmarks.md"), &md).context("bench: writing docs/benchmarks.md")?;
    std::fs::write(docs.join("benchmarks.svg"), svg(&run))
        .context("bench: writing docs/benchmarks.svg")?;
    println!();
    print!("{}", headline(&run));
    say(format!(
        "bench: {} cells ({} unsupported, {} failed); wrote docs/benchmarks.md and docs/benchmarks.svg",
        run.rows.len(),
        run.rows.iter().filter(|r| r.status == "unsupported").count(),
        errors.len()
    ));
    for e in &errors {
        say(format!("bench: failed cell: {}", e.raw));
    }
    if !rc_ok && vm_secs.is_some() {
        say("bench: the bench binary did not exit 0 (see the console log)");
    }
    Ok(errors.is_empty() && (rc_ok || vm_secs.is_none()))
}

/// Installs the peer's packages when missing (apt never removes any).
fn ensure_peer_packages() -> Result<()> {
    let missing: Vec<&str> = PEER_PACKAGES
        .iter()
        .copied()
        .filter(|p| !apt::installed(p))
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    say(format!(
        "bench: installing the libibverbs peer's packages: {}",
        missing.join(" ")
    ));
    apt::install("bench: installing packages", &missing)
}

/// Builds benches/verbs statically with the libibverbs peer.
fn build(workspace: &Path) -> Result<Binary> {
    say(format!(
        "bench: building benches/verbs statically for {TARGET} with libibverbs-peer"
    ));
    let mut cmd = cargo();
    cmd.current_dir(workspace)
        .args(["bench", "--no-run", "-p", "uverbs", "--bench", "verbs"])
        .args(["--features", "libibverbs-peer", "--target", TARGET])
        .arg("--message-format=json-render-diagnostics");
    let bins = build_collect("bench: static build", &mut cmd, |a| {
        a.target.kind.contains(&TargetKind::Bench)
    })?;
    bins.into_iter().find(|b| b.name == "verbs").ok_or_else(|| {
        err(
            "bench: static build",
            "cargo reported no executable for bench verbs",
        )
    })
}

/// One `@@BENCH` line.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    pub device: String,
    pub imp: String,
    pub transport: String,
    pub fork: String,
    pub op: String,
    pub size: u64,
    /// `inplace`, `replaced` or `mixed` for rereg cells of ours.
    pub path: String,
    /// `ok`, `unsupported` or `error`.
    pub status: String,
    pub median: f64,
    pub p10: f64,
    pub p90: f64,
    pub n: u64,
    pub raw: String,
}

/// Everything the guest printed about the run.
#[derive(Debug, Default)]
pub struct Run {
    pub rows: Vec<Row>,
    pub info: Vec<BTreeMap<String, String>>,
    pub guest_kernel: String,
}

impl Run {
    /// The cell with these keys.
    pub fn get(
        &self,
        device: &str,
        imp: &str,
        transport: &str,
        fork: &str,
        op: &str,
        size: u64,
    ) -> Option<&Row> {
        self.rows.iter().find(|r| {
            r.device == device
                && r.imp == imp
                && r.transport == transport
                && r.fork == fork
                && r.op == op
                && r.size == size
        })
    }

    /// Its median, when it was measured.
    fn median(&self, key: (&str, &str, &str, &str, &str), size: u64) -> Option<f64> {
        self.get(key.0, key.1, key.2, key.3, key.4, size)
            .filter(|r| r.status == "ok")
            .map(|r| r.median)
    }

    pub fn devices(&self) -> Vec<String> {
        let mut d: Vec<String> = Vec::new();
        for r in &self.rows {
            if !d.contains(&r.device) {
                d.push(r.device.clone());
            }
        }
        d
    }

    fn info(&self, key: &str) -> Option<&str> {
        self.info
            .iter()
            .find_map(|m| m.get(key))
            .map(String::as_str)
    }
}

fn words(s: &str) -> BTreeMap<String, String> {
    s.split_whitespace()
        .filter_map(|w| w.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// Reads every `@@BENCH` and `@@BENCH-INFO` line (markers may follow kernel
/// text on the same line).
pub fn parse(console: &str) -> Run {
    let mut run = Run::default();
    for line in console.lines() {
        if let Some(kernel) = markers::find(line, BOOTED).and_then(|r| r.strip_prefix("kernel=")) {
            run.guest_kernel = kernel.trim().to_string();
        }
        if let Some(info) = markers::find(line, BENCH_INFO) {
            run.info.push(words(info));
            continue;
        }
        let Some(measurement) = markers::find(line, BENCH) else {
            continue;
        };
        let raw = measurement.trim().to_string();
        let w = words(&raw);
        let s = |k: &str| w.get(k).cloned().unwrap_or_default();
        let f = |k: &str| {
            w.get(k)
                .and_then(|v| v.parse::<f64>().ok())
                .unwrap_or(f64::NAN)
        };
        let (Some(size), false) = (
            w.get("size").and_then(|v| v.parse().ok()),
            s("op").is_empty(),
        ) else {
            continue;
        };
        run.rows.push(Row {
            device: s("device"),
            imp: s("impl"),
            transport: s("transport"),
            fork: s("fork"),
            op: s("op"),
            size,
            path: s("path"),
            status: w.get("status").cloned().unwrap_or_else(|| "ok".into()),
            median: f("median_ns"),
            p10: f("p10_ns"),
            p90: f("p90_ns"),
            n: w.get("n").and_then(|v| v.parse().ok()).unwrap_or(0),
            raw,
        });
    }
    run
}

/// Facts about the machine and the run, for the report's header.
struct Meta {
    date: String,
    host_cpu: String,
    host_cores: usize,
    host_kernel: String,
    qemu: String,
    rustc: String,
    libibverbs: String,
    vm_secs: Option<f64>,
    total_secs: f64,
}

fn first_line(cmd: &mut Command) -> String {
    run_captured("bench: version", cmd)
        .ok()
        .and_then(|s| s.lines().next().map(str::to_string))
        .unwrap_or_else(|| "unknown".into())
}

impl Meta {
    fn collect(_run: &Run, vm_secs: Option<f64>, total_secs: f64) -> Meta {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let host_cpu = cpuinfo
            .lines()
            .find_map(|l| l.strip_prefix("model name"))
            .map(|l| l.trim_start_matches([' ', '\t', ':']).to_string())
            .unwrap_or_else(|| "unknown CPU".into());
        Meta {
            date: utc_now(),
            host_cpu,
            host_cores: std::thread::available_parallelism().map_or(0, |n| n.get()),
            host_kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
                .map(|s| s.trim().to_string())
                .unwrap_or_default(),
            qemu: first_line(Command::new("qemu-system-x86_64").arg("--version")),
            rustc: first_line(Command::new("rustc").arg("--version")),
            libibverbs: first_line(Command::new("dpkg-query").args([
                "-W",
                "-f",
                "${Version}",
                "libibverbs-dev",
            ])),
            vm_secs,
            total_secs,
        }
    }
}

/// Today's UTC date and time, `YYYY-MM-DD HH:MM UTC`.
fn utc_now() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs()) as i64;
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02} UTC",
        rem / 3600,
        rem % 3600 / 60
    )
}

/// `4 KiB`, `256 MiB`.
pub fn size_name(size: u64) -> String {
    match size {
        0 => "—".into(),
        s if s >= 1 << 30 && s % (1 << 30) == 0 => format!("{} GiB", s >> 30),
        s if s >= 1 << 20 && s % (1 << 20) == 0 => format!("{} MiB", s >> 20),
        s if s >= 1 << 10 && s % (1 << 10) == 0 => format!("{} KiB", s >> 10),
        s => format!("{s} B"),
    }
}

/// A latency in readable units (3 significant digits).
pub fn time_name(ns: f64) -> String {
    let (v, unit) = if ns >= 1e9 {
        (ns / 1e9, "s")
    } else if ns >= 1e6 {
        (ns / 1e6, "ms")
    } else if ns >= 1e3 {
        (ns / 1e3, "µs")
    } else {
        (ns, "ns")
    };
    let digits = if v >= 100.0 {
        0
    } else if v >= 10.0 {
        1
    } else {
        2
    };
    format!("{v:.digits$} {unit}")
}

/// `10^d` ns as a round label: `1 µs`, `100 ms`.
fn decade_name(d: i32) -> String {
    let units = ["ns", "µs", "ms", "s"];
    let u = (d.max(0) / 3).min(3);
    format!(
        "{} {}",
        10u64.pow((d - u * 3).max(0) as u32),
        units[u as usize]
    )
}

fn ratio_name(r: f64) -> String {
    if r >= 100.0 {
        format!("{r:.0}×")
    } else if r >= 10.0 {
        format!("{r:.1}×")
    } else {
        format!("{r:.2}×")
    }
}

/// A human label for an operation.
fn op_name(op: &str) -> &str {
    match op {
        "reg" => "reg",
        "dereg" => "dereg",
        "reg_dereg" => "reg+dereg",
        "rereg_access" => "rereg ACCESS",
        "rereg_pd" => "rereg PD",
        "rereg_translation" => "rereg TRANSLATION",
        "alloc_dealloc_pd" => "alloc+dealloc PD",
        "context_open" => "context open+close",
        other => other,
    }
}

const IOCTL: &str = "ioctl";
const WRITE: &str = "write";

/// The ratio `a / b` at `size`, when both were measured.
fn ratio(
    run: &Run,
    a: (&str, &str, &str, &str, &str),
    b: (&str, &str, &str, &str, &str),
    size: u64,
) -> Option<f64> {
    Some(run.median(a, size)? / run.median(b, size)?)
}

/// The rows of the headline table: (label, numerator, denominator), per device.
fn headline_rows<'a>(run: &Run, dev: &'a str) -> Vec<(String, [&'a str; 5], [&'a str; 5])> {
    let mut v = Vec::new();
    for t in [IOCTL, WRITE] {
        let path = path_name(run, dev, t, "rereg_access");
        v.push((
            format!("reg+dereg ÷ rereg ACCESS (ours, {t}; {path}): speed-up of rereg"),
            [dev, "ours", t, "off", "reg_dereg"],
            [dev, "ours", t, "off", "rereg_access"],
        ));
    }
    for (op, t) in [
        ("rereg_access", IOCTL),
        ("rereg_access", WRITE),
        ("rereg_pd", IOCTL),
        ("rereg_pd", WRITE),
        ("reg_dereg", IOCTL),
        ("reg_dereg", WRITE),
    ] {
        v.push((
            format!("ours ÷ floor, {} ({t})", op_name(op)),
            [dev, "ours", t, "off", op],
            [dev, "floor", t, "off", op],
        ));
    }
    for t in [IOCTL, WRITE] {
        v.push((
            format!("ours ({t}) ÷ libibverbs, reg+dereg"),
            [dev, "ours", t, "off", "reg_dereg"],
            [dev, "libibverbs", "auto", "off", "reg_dereg"],
        ));
    }
    v
}

/// How ours carried out `op` on `dev` over transport `t` at every size.
fn path_name(run: &Run, dev: &str, t: &str, op: &str) -> &'static str {
    let paths: Vec<&str> = SIZES
        .iter()
        .filter_map(|&z| run.get(dev, "ours", t, "off", op, z))
        .filter(|r| r.status == "ok")
        .map(|r| r.path.as_str())
        .collect();
    if paths.is_empty() {
        "not measured"
    } else if paths.iter().all(|p| *p == "inplace") {
        "in place"
    } else if paths.iter().all(|p| *p == "replaced") {
        "replaced"
    } else {
        "mixed"
    }
}

fn tuple<'a>(k: &[&'a str; 5]) -> (&'a str, &'a str, &'a str, &'a str, &'a str) {
    (k[0], k[1], k[2], k[3], k[4])
}

/// A markdown table header: the `leading` columns, then one right-aligned
/// column per region size.
fn size_table_header(s: &mut String, leading: &[&str]) {
    s.push('|');
    for column in leading {
        let _ = write!(s, " {column} |");
    }
    for &z in SIZES {
        let _ = write!(s, " {} |", size_name(z));
    }
    s.push_str("\n|");
    s.push_str(&"---|".repeat(leading.len()));
    s.push_str(&"---:|".repeat(SIZES.len()));
    s.push('\n');
}

/// The headline ratios as a markdown table (also printed at the end).
fn headline(run: &Run) -> String {
    let mut s = String::new();
    for dev in run.devices() {
        let _ = writeln!(s, "**{dev}**\n");
        size_table_header(&mut s, &["ratio"]);
        for (label, a, b) in headline_rows(run, &dev) {
            let _ = write!(s, "| {label} |");
            for &z in SIZES {
                let cell = match ratio(run, tuple(&a), tuple(&b), z) {
                    Some(r) => ratio_name(r),
                    None => unsupported_or_dash(run, &a, &b, z),
                };
                let _ = write!(s, " {cell} |");
            }
            s.push('\n');
        }
        for (label, a, b) in [
            (
                "ours (ioctl) ÷ libibverbs, alloc+dealloc PD",
                [dev.as_str(), "ours", IOCTL, "off", "alloc_dealloc_pd"],
                [
                    dev.as_str(),
                    "libibverbs",
                    "auto",
                    "off",
                    "alloc_dealloc_pd",
                ],
            ),
            (
                "ours (write) ÷ libibverbs, alloc+dealloc PD",
                [dev.as_str(), "ours", WRITE, "off", "alloc_dealloc_pd"],
                [
                    dev.as_str(),
                    "libibverbs",
                    "auto",
                    "off",
                    "alloc_dealloc_pd",
                ],
            ),
            (
                "ours (ioctl) ÷ libibverbs, context open+close",
                [dev.as_str(), "ours", IOCTL, "off", "context_open"],
                [dev.as_str(), "libibverbs", "auto", "off", "context_open"],
            ),
        ] {
            let cell = ratio(run, tuple(&a), tuple(&b), 0)
                .map(ratio_name)
                .unwrap_or_else(|| "—".into());
            let _ = writeln!(
                s,
                "| {label} | {cell} (size-independent) |{}",
                " |".repeat(SIZES.len() - 1)
            );
        }
        s.push('\n');
    }
    s
}

/// "unsupported" when either side of a ratio is, else a dash.
fn unsupported_or_dash(run: &Run, a: &[&str; 5], b: &[&str; 5], size: u64) -> String {
    for k in [a, b] {
        if let Some(r) = run.get(k[0], k[1], k[2], k[3], k[4], size) {
            if r.status == "unsupported" {
                return format!("unsupported ({})", k[1]);
            }
        }
    }
    "—".into()
}

/// Targets of issue #6: (label, measured, met).
fn targets(run: &Run) -> Vec<(String, String, Option<bool>)> {
    let mut out = Vec::new();
    let rxe = run
        .devices()
        .into_iter()
        .find(|d| d.starts_with("rxe"))
        .unwrap_or_else(|| "rxe0".into());
    for (size, want) in [(1u64 << 20, 50.0), (256 << 20, 1000.0)] {
        for t in [IOCTL, WRITE] {
            let r = ratio(
                run,
                (&rxe, "ours", t, "off", "reg_dereg"),
                (&rxe, "ours", t, "off", "rereg_access"),
                size,
            );
            out.push((
                format!(
                    "rereg ACCESS on {rxe} ≥ {want:.0}× faster than dereg+reg at {} ({t})",
                    size_name(size)
                ),
                r.map(ratio_name).unwrap_or_else(|| "not measured".into()),
                r.map(|r| r >= want),
            ));
        }
    }
    // ours / floor ≤ 1.05 for rereg, wherever rereg runs in place.
    for op in ["rereg_access", "rereg_pd"] {
        for t in [IOCTL, WRITE] {
            let mut worst: Option<(f64, String)> = None;
            let mut cells = 0;
            for dev in run.devices() {
                for &z in SIZES {
                    let ours = run.get(&dev, "ours", t, "off", op, z);
                    if ours.is_none_or(|r| r.path != "inplace") {
                        continue;
                    }
                    if let Some(r) = ratio(
                        run,
                        (&dev, "ours", t, "off", op),
                        (&dev, "floor", t, "off", op),
                        z,
                    ) {
                        cells += 1;
                        if worst.as_ref().is_none_or(|w| r > w.0) {
                            worst = Some((r, format!("{dev} {}", size_name(z))));
                        }
                    }
                }
            }
            out.push((
                format!("ours ÷ floor ≤ 1.05 for {} in place ({t})", op_name(op)),
                worst
                    .as_ref()
                    .map(|(r, at)| format!("worst {} ({at}) of {cells} cells", ratio_name(*r)))
                    .unwrap_or_else(|| "not measured".into()),
                worst.map(|(r, _)| r <= 1.05),
            ));
        }
    }
    for (op, sizes) in [("reg_dereg", SIZES), ("alloc_dealloc_pd", &[0u64][..])] {
        for t in [IOCTL, WRITE] {
            let mut worst: Option<(f64, String)> = None;
            let mut cells = 0;
            for dev in run.devices() {
                for &z in sizes {
                    if let Some(r) = ratio(
                        run,
                        (&dev, "ours", t, "off", op),
                        (&dev, "libibverbs", "auto", "off", op),
                        z,
                    ) {
                        cells += 1;
                        let at = if z == 0 {
                            dev.clone()
                        } else {
                            format!("{dev} {}", size_name(z))
                        };
                        if worst.as_ref().is_none_or(|w| r > w.0) {
                            worst = Some((r, at));
                        }
                    }
                }
            }
            out.push((
                format!("ours ({t}) ÷ libibverbs ≤ 1.0 for {}", op_name(op)),
                worst
                    .as_ref()
                    .map(|(r, at)| format!("worst {} ({at}) of {cells} cells", ratio_name(*r)))
                    .unwrap_or_else(|| "not measured".into()),
                worst.map(|(r, _)| r <= 1.0),
            ));
        }
    }
    out
}

fn cell_text(r: Option<&Row>) -> String {
    match r {
        None => "—".into(),
        Some(r) if r.status == "unsupported" => "unsupported".into(),
        Some(r) if r.status != "ok" => "error".into(),
        Some(r) => format!(
            "{} <sub>{}–{}</sub>",
            time_name(r.median),
            time_name(r.p10),
            time_name(r.p90)
        ),
    }
}

fn impl_name(imp: &str, transport: &str) -> String {
    match imp {
        "libibverbs" => "libibverbs".into(),
        "floor" => format!("floor ({transport})"),
        _ => format!("ours ({transport})"),
    }
}

/// The report.
fn markdown(run: &Run, m: &Meta) -> String {
    let mut s = String::new();
    let cell_ms = run.info("cell_ms").unwrap_or("?");
    let _ = writeln!(
        s,
        "# Benchmarks\n\n\
         Generated by `cargo vm bench` on {date} from one run; do not edit by hand, run it again.\n\
         Source: [`benches/verbs`](../benches/verbs) (ours, the floor and the libibverbs peer in one\n\
         static binary) and [`tests/vm/src/bench.rs`](../tests/vm/src/bench.rs) (this report).\n",
        date = m.date
    );
    let _ = writeln!(
        s,
        "**Absolute times are slow**: the devices are soft RDMA (rxe0 = soft RoCE, siw0 = soft iWARP) in a\n\
         qemu guest under TCG (software CPU emulation, no KVM), so every instruction is emulated.\n\
         What counts are the **ratios** between rows measured in the same run.\n"
    );
    let _ = writeln!(s, "| | |\n|---|---|");
    let _ = writeln!(
        s,
        "| host | {} ({} cores), Linux {} |",
        m.host_cpu, m.host_cores, m.host_kernel
    );
    let _ = writeln!(
        s,
        "| guest | Debian kernel {}, {}, `-accel tcg -cpu max -smp 2` |",
        if run.guest_kernel.is_empty() {
            "?"
        } else {
            &run.guest_kernel
        },
        m.qemu
    );
    let _ = writeln!(
        s,
        "| libibverbs | Debian rdma-core {} (`libibverbs.a`, `librxe-rdmav34.a`, `libsiw-rdmav34.a`, libnl), linked statically into the same static-pie binary; providers registered with `ibv_static_providers` |",
        m.libibverbs
    );
    let _ = writeln!(s, "| toolchain | {} |", m.rustc);
    let _ = writeln!(
        s,
        "| sampling | per cell: one warm-up, then single calls for {cell_ms} ms (at least 5, at most 20 000); median, spread p10–p90 |"
    );
    match m.vm_secs {
        Some(vm) => {
            let _ = writeln!(
                s,
                "| wall time | {:.0} s for `cargo vm bench` (build, boot and {:.0} s of qemu) |",
                m.total_secs, vm
            );
        }
        None => {
            let _ = writeln!(s, "| wall time | (regenerated from a saved log) |");
        }
    }
    let _ = writeln!(
        s,
        "\n**Rows.** *ours* = this crate's API (`reg_mr`, `MemoryRegion::dereg`, `rereg_with(ReregFallback::Replace, …)`,\n\
         `alloc_pd`/`dealloc`, `Device::open_with`) over the ioctl or the write() transport. *floor* = the same\n\
         command bytes, built once with `uverbs::command` + `uverbs::transport::frame`, sent with a bare\n\
         `ioctl`/`write` in a loop on a uverbs file opened by hand. *libibverbs* = `ibv_reg_mr`, `ibv_dereg_mr`,\n\
         `ibv_rereg_mr`, `ibv_alloc_pd`/`ibv_dealloc_pd`, `ibv_open_device`/`ibv_close_device` (it picks its\n\
         transport itself). rereg ACCESS toggles `LOCAL_WRITE|REMOTE_READ|REMOTE_WRITE` ↔ `LOCAL_WRITE|REMOTE_READ`;\n\
         rereg PD moves the region between two PDs; rereg TRANSLATION moves it between two buffers of the same\n\
         size. *in place* = one REREG_MR; *replaced* = the kernel answered `EOPNOTSUPP`, so ours registers the new\n\
         range and deregisters the old one (the refusal is remembered, later calls go straight to the replace).\n\
         Fork safety is off unless the row says *fork on* (`ForkMode::Enabled` with `madvise`).\n"
    );
    s.push_str("![Latency vs region size, log-log](benchmarks.svg)\n\n");
    s.push_str("## Headline ratios\n\nAbove 1 means the left side is slower.\n\n");
    s.push_str(&headline(run));
    s.push_str("## Targets of issue #6\n\nReported as measured; the benchmark is not tuned towards them.\n\n");
    s.push_str("| target | measured | met |\n|---|---|---|\n");
    for (label, measured, met) in targets(run) {
        let met = match met {
            Some(true) => "yes",
            Some(false) => "**no**",
            None => "—",
        };
        let _ = writeln!(s, "| {label} | {measured} | {met} |");
    }
    s.push_str("\n## All results\n\nMedian, with p10–p90 in small print.\n\n");
    for dev in run.devices() {
        let _ = writeln!(s, "### {dev}\n");
        size_table_header(&mut s, &["operation", "implementation", "fork", "path"]);
        let mut keys: Vec<(usize, &str, &str, &str, &str)> = Vec::new();
        for r in run.rows.iter().filter(|r| r.device == dev && r.size != 0) {
            let order = [
                "reg",
                "dereg",
                "reg_dereg",
                "rereg_access",
                "rereg_pd",
                "rereg_translation",
            ]
            .iter()
            .position(|o| *o == r.op)
            .unwrap_or(99);
            let k = (
                order,
                r.op.as_str(),
                r.imp.as_str(),
                r.transport.as_str(),
                r.fork.as_str(),
            );
            if !keys.contains(&k) {
                keys.push(k);
            }
        }
        let imp_order = |i: &str| ["ours", "floor", "libibverbs"].iter().position(|x| *x == i);
        keys.sort_by_key(|k| (k.0, imp_order(k.2), k.3 != IOCTL, k.4 != "off"));
        for (_, op, imp, t, fork) in keys {
            let paths: Vec<&str> = SIZES
                .iter()
                .filter_map(|&z| run.get(&dev, imp, t, fork, op, z))
                .map(|r| r.path.as_str())
                .filter(|p| !p.is_empty())
                .collect();
            let measured = SIZES.iter().any(|&z| {
                run.get(&dev, imp, t, fork, op, z)
                    .is_some_and(|r| r.status == "ok")
            });
            let path = if paths.is_empty() {
                // The floor sends REREG_MR itself: in place when it succeeds.
                if op.starts_with("rereg") && imp == "floor" && measured {
                    "in place"
                } else {
                    ""
                }
            } else if paths.iter().all(|p| *p == "inplace") {
                "in place"
            } else if paths.iter().all(|p| *p == "replaced") {
                "replaced"
            } else {
                "mixed"
            };
            let _ = write!(
                s,
                "| {} | {} | {fork} | {path} |",
                op_name(op),
                impl_name(imp, t)
            );
            for &z in SIZES {
                let _ = write!(s, " {} |", cell_text(run.get(&dev, imp, t, fork, op, z)));
            }
            s.push('\n');
        }
        s.push('\n');
    }
    s.push_str("### Size-independent operations\n\n| device | operation | implementation | median | p10–p90 | n |\n|---|---|---|---:|---:|---:|\n");
    for r in run.rows.iter().filter(|r| r.size == 0) {
        let (med, spread, n) = if r.status == "ok" {
            (
                time_name(r.median),
                format!("{}–{}", time_name(r.p10), time_name(r.p90)),
                r.n.to_string(),
            )
        } else {
            (r.status.clone(), String::new(), String::new())
        };
        let _ = writeln!(
            s,
            "| {} | {} | {} | {med} | {spread} | {n} |",
            r.device,
            op_name(&r.op),
            impl_name(&r.imp, &r.transport)
        );
    }
    let failed: Vec<&Row> = run.rows.iter().filter(|r| r.status == "error").collect();
    if !failed.is_empty() {
        let mut kinds: Vec<(String, String, usize)> = Vec::new();
        for r in &failed {
            let what = r
                .raw
                .split(" status=error ")
                .nth(1)
                .unwrap_or("")
                .to_string();
            let who = format!("{} {} ({})", r.device, r.imp, r.transport);
            match kinds.iter_mut().find(|k| k.0 == who && k.1 == what) {
                Some(k) => k.2 += 1,
                None => kinds.push((who, what, 1)),
            }
        }
        let _ = writeln!(
            s,
            "\n### Cells that failed ({})\n\nThese are errors, not measurements; see the run's console log.\n",
            failed.len()
        );
        for (who, what, n) in kinds {
            let _ = writeln!(s, "- {who}, {n} cells: `{what}`");
        }
    }
    s.push_str(
        "\n**Why libibverbs says \"unsupported\" for every rereg:** rdma-core's rxe and siw providers have no\n\
         `rereg_mr`, so `ibv_rereg_mr` answers `IBV_REREG_MR_ERR_CMD` with `EOPNOTSUPP` without reaching the\n\
         kernel. That is a result, not a gap: it is what a libibverbs user gets on these devices. On siw the\n\
         kernel itself has no REREG_MR, so the floor's rereg is unsupported there and ours replaces.\n",
    );
    s
}

/// One plotted series.
struct Series {
    label: String,
    color: &'static str,
    dash: &'static str,
    points: Vec<(u64, f64)>,
}

fn series(run: &Run, dev: &str) -> Vec<Series> {
    let pts = |imp: &str, t: &str, op: &str| -> Vec<(u64, f64)> {
        SIZES
            .iter()
            .filter_map(|&z| run.median((dev, imp, t, "off", op), z).map(|m| (z, m)))
            .collect()
    };
    let path_of = |op: &str| path_name(run, dev, IOCTL, op);
    vec![
        Series {
            label: "ours reg+dereg".into(),
            color: "#1f77b4",
            dash: "",
            points: pts("ours", IOCTL, "reg_dereg"),
        },
        Series {
            label: "libibverbs reg+dereg".into(),
            color: "#7f7f7f",
            dash: "6,4",
            points: pts("libibverbs", "auto", "reg_dereg"),
        },
        Series {
            label: format!("ours rereg ACCESS ({})", path_of("rereg_access")),
            color: "#2ca02c",
            dash: "",
            points: pts("ours", IOCTL, "rereg_access"),
        },
        Series {
            label: "floor rereg ACCESS".into(),
            color: "#98df8a",
            dash: "2,3",
            points: pts("floor", IOCTL, "rereg_access"),
        },
        Series {
            label: format!("ours rereg TRANSLATION ({})", path_of("rereg_translation")),
            color: "#d62728",
            dash: "",
            points: pts("ours", IOCTL, "rereg_translation"),
        },
    ]
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// The plot: one log-log panel per device, latency vs region size.
pub fn svg(run: &Run) -> String {
    let devices = run.devices();
    let (pw, ph) = (460.0, 330.0);
    let (ml, mr, mt, mb) = (70.0, 30.0, 40.0, 45.0);
    let legend_h = 95.0;
    let width = pw * devices.len().max(1) as f64;
    let height = ph + legend_h;
    let all: Vec<Vec<Series>> = devices.iter().map(|d| series(run, d)).collect();
    let ys: Vec<f64> = all
        .iter()
        .flatten()
        .flat_map(|s| s.points.iter().map(|p| p.1))
        .filter(|v| v.is_finite() && *v > 0.0)
        .collect();
    let lo = ys.iter().cloned().fold(f64::INFINITY, f64::min).max(1.0);
    let hi = ys.iter().cloned().fold(0.0, f64::max).max(lo * 10.0);
    let (dlo, dhi) = (lo.log10().floor(), hi.log10().ceil());
    let (xlo, xhi) = (
        (SIZES[0] as f64).log2(),
        (SIZES[SIZES.len() - 1] as f64).log2(),
    );
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="11">"#
    );
    let _ = writeln!(
        s,
        r#"<rect width="{width}" height="{height}" fill="white"/>"#
    );
    for (i, (dev, ser)) in devices.iter().zip(&all).enumerate() {
        let ox = i as f64 * pw;
        let (x0, x1, y0, y1) = (ox + ml, ox + pw - mr, mt, ph - mb);
        let x = |size: u64| x0 + ((size as f64).log2() - xlo) / (xhi - xlo) * (x1 - x0);
        let y = |ns: f64| y1 - (ns.log10() - dlo) / (dhi - dlo) * (y1 - y0);
        let _ = writeln!(
            s,
            r#"<text x="{:.1}" y="20" text-anchor="middle" font-size="14" font-weight="bold">{} (ioctl transport, fork safety off)</text>"#,
            (x0 + x1) / 2.0,
            esc(dev)
        );
        let _ = writeln!(
            s,
            r##"<rect x="{x0:.1}" y="{y0:.1}" width="{:.1}" height="{:.1}" fill="none" stroke="#333"/>"##,
            x1 - x0,
            y1 - y0
        );
        let mut d = dlo;
        while d <= dhi + 1e-9 {
            let yy = y(10f64.powf(d));
            let _ = writeln!(
                s,
                r##"<line x1="{x0:.1}" y1="{yy:.1}" x2="{x1:.1}" y2="{yy:.1}" stroke="#ddd"/><text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"##,
                x0 - 5.0,
                yy + 4.0,
                decade_name(d as i32)
            );
            d += 1.0;
        }
        for &z in SIZES {
            let xx = x(z);
            let _ = writeln!(
                s,
                r##"<line x1="{xx:.1}" y1="{y0:.1}" x2="{xx:.1}" y2="{y1:.1}" stroke="#eee"/><text x="{xx:.1}" y="{:.1}" text-anchor="middle">{}</text>"##,
                y1 + 16.0,
                size_name(z)
            );
        }
        let _ = writeln!(
            s,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">region size</text>"#,
            (x0 + x1) / 2.0,
            y1 + 34.0
        );
        let _ = writeln!(
            s,
            r#"<text transform="translate({:.1},{:.1}) rotate(-90)" text-anchor="middle">latency per call (median)</text>"#,
            ox + 14.0,
            (y0 + y1) / 2.0
        );
        for se in ser {
            if se.points.is_empty() {
                continue;
            }
            let pts: Vec<String> = se
                .points
                .iter()
                .map(|&(z, v)| format!("{:.1},{:.1}", x(z), y(v)))
                .collect();
            let dash = if se.dash.is_empty() {
                String::new()
            } else {
                format!(r#" stroke-dasharray="{}""#, se.dash)
            };
            let _ = writeln!(
                s,
                r#"<polyline points="{}" fill="none" stroke="{}" stroke-width="2"{dash}/>"#,
                pts.join(" "),
                se.color
            );
            for &(z, v) in &se.points {
                let _ = writeln!(
                    s,
                    r#"<circle cx="{:.1}" cy="{:.1}" r="3" fill="{}"/>"#,
                    x(z),
                    y(v),
                    se.color
                );
            }
        }
        // Legend under the panel.
        for (j, se) in ser.iter().enumerate() {
            let ly = ph + 5.0 + j as f64 * 17.0;
            let dash = if se.dash.is_empty() {
                String::new()
            } else {
                format!(r#" stroke-dasharray="{}""#, se.dash)
            };
            let label = if se.points.is_empty() {
                format!("{} (unsupported)", se.label)
            } else {
                se.label.clone()
            };
            let _ = writeln!(
                s,
                r#"<line x1="{:.1}" y1="{ly:.1}" x2="{:.1}" y2="{ly:.1}" stroke="{}" stroke-width="2"{dash}/><text x="{:.1}" y="{:.1}">{}</text>"#,
                x0,
                x0 + 28.0,
                se.color,
                x0 + 34.0,
                ly + 4.0,
                esc(&label)
            );
        }
    }
    s.push_str("</svg>\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    const LOG: &str = "\
@@UVERBS-BOOTED kernel=6.12.117+deb12-amd64
@@BENCH-INFO cell_ms=300 min_n=5
[ 3.1] x @@BENCH device=rxe0 impl=ours transport=ioctl fork=off op=reg_dereg size=1048576 median_ns=200000 p10_ns=190000 p90_ns=220000 n=50
@@BENCH device=rxe0 impl=ours transport=ioctl fork=off op=rereg_access size=1048576 path=inplace median_ns=5000 p10_ns=4900 p90_ns=5200 n=900
@@BENCH device=rxe0 impl=floor transport=ioctl fork=off op=rereg_access size=1048576 median_ns=4900 p10_ns=4800 p90_ns=5000 n=900
@@BENCH device=rxe0 impl=libibverbs transport=auto fork=off op=rereg_access size=1048576 status=unsupported errno=95 ret=-4
@@BENCH device=rxe0 impl=ours transport=ioctl fork=off op=alloc_dealloc_pd size=0 median_ns=9000 p10_ns=8000 p90_ns=10000 n=100
";

    #[test]
    fn parses_and_reports() {
        let run = parse(LOG);
        assert_eq!(run.rows.len(), 5);
        assert_eq!(run.guest_kernel, "6.12.117+deb12-amd64");
        assert_eq!(run.info("cell_ms"), Some("300"));
        let r = run
            .get("rxe0", "ours", "ioctl", "off", "rereg_access", 1 << 20)
            .unwrap();
        assert_eq!((r.path.as_str(), r.median, r.n), ("inplace", 5000.0, 900));
        assert_eq!(
            run.get("rxe0", "libibverbs", "auto", "off", "rereg_access", 1 << 20)
                .unwrap()
                .status,
            "unsupported"
        );
        let h = headline(&run);
        assert!(h.contains("| 40.0× |"), "{h}");
        let t = targets(&run);
        assert_eq!(t[0].2, Some(false));
        assert!(t
            .iter()
            .any(|(l, m, met)| l.contains("floor") && m.contains("1.02×") && *met == Some(true)));
        let svg = svg(&run);
        assert!(svg.starts_with("<svg") && svg.contains("polyline"));
        let md = markdown(&run, &Meta::collect(&run, Some(60.0), 90.0));
        assert!(md.contains("benchmarks.svg") && md.contains("unsupported"));
    }

    /// The host facts of the golden report, fixed so that it does not
    /// depend on the machine or the clock.
    fn fixed_meta() -> Meta {
        Meta {
            date: "2026-11-29 14:15 UTC".into(),
            host_cpu: "Intel(R) Xeon(R) Processor".into(),
            host_cores: 2,
            host_kernel: "6.18.44-fc-v669".into(),
            qemu: "QEMU emulator version 7.2.22 (Debian 1:7.2+dfsg-7+deb12u18+b3)".into(),
            rustc: "rustc 1.95.0 (59807616e 2026-04-14)".into(),
            libibverbs: "44.0-2".into(),
            vm_secs: Some(142.4),
            total_secs: 145.2,
        }
    }

    /// Compares `actual` with the committed file `testdata/<name>`, or
    /// rewrites that file when `UVERBS_BENCH_BLESS=1`.
    fn check_golden(name: &str, actual: &str) {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("src/bench/testdata")
            .join(name);
        if std::env::var_os("UVERBS_BENCH_BLESS").is_some_and(|v| v == "1") {
            std::fs::write(&path, actual).unwrap();
            return;
        }
        let expected = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
        if let Some((i, (want, got))) = expected
            .lines()
            .zip(actual.lines())
            .enumerate()
            .find(|(_, (a, b))| a != b)
        {
            panic!(
                "{name} differs at line {}:\n  expected: {want}\n  actual:   {got}",
                i + 1
            );
        }
        assert!(
            expected == actual,
            "{name}: {} lines expected, {} rendered (or the line ends differ)",
            expected.lines().count(),
            actual.lines().count()
        );
    }

    /// The report of a fixture console (both devices, every implementation,
    /// transport and fork mode, unsupported and failed cells, a mixed path,
    /// kernel lines in between) is byte for byte the committed markdown and
    /// svg: a refactoring of this module must not change what it writes.
    #[test]
    fn golden_report() {
        let run = parse(include_str!("bench/testdata/console.log"));
        assert_eq!(run.rows.len(), 40);
        let md = markdown(&run, &fixed_meta());
        check_golden("benchmarks.md", &md);
        check_golden("benchmarks.svg", &svg(&run));
        // From a saved log only the wall-time line differs.
        let mut from_log = fixed_meta();
        from_log.vm_secs = None;
        assert_eq!(
            markdown(&run, &from_log),
            md.replace(
                "| wall time | 145 s for `cargo vm bench` (build, boot and 142 s of qemu) |",
                "| wall time | (regenerated from a saved log) |"
            )
        );
    }

    #[test]
    fn units() {
        assert_eq!(size_name(4096), "4 KiB");
        assert_eq!(size_name(256 << 20), "256 MiB");
        assert_eq!(time_name(4_900.0), "4.90 µs");
        assert_eq!(time_name(123_456_789.0), "123 ms");
        assert!(utc_now().ends_with("UTC"));
        assert_eq!(decade_name(3), "1 µs");
        assert_eq!(decade_name(5), "100 µs");
        assert_eq!(decade_name(7), "10 ms");
    }
}
