//! `cargo vm bench`: runs benches/verbs (the control path: ours, the bare
//! system call and a statically linked libibverbs) and benches/datapath
//! (the data path: `tools/perf.rs` against perftest 4.5) inside the VM
//! against rxe0 and siw0, then writes `docs/benchmarks.md`,
//! `docs/benchmarks.svg` and `docs/benchmarks-datapath.svg` from the
//! result lines the guest printed (`@@RESULT {json}`, [`results`]).
//! benches/ops adds the instructions per data-path operation on rxe0 and
//! siw0 (callgrind; [`ops`](mod@ops)), benches/growth the cost of control
//! operations with N live objects and siw's QP limit, beside the host's
//! callgrind counts of CQ routing and the fork tracker
//! (`tools/routing-ir.sh`, `tools/fork-ir.sh`; [`growth`](mod@growth)).
//!
//! 1. Unpacks what the libibverbs peer links against (`libibverbs-dev`,
//!    `libnl-3-dev`, `libnl-route-3-dev`), perftest with its providers
//!    (`perftest`, `ibverbs-providers`) and valgrind under the cache
//!    ([`peer`], its [`BENCH`](peer::BENCH) set):
//!    nothing is installed.
//! 2. Builds both benches statically (`--features libibverbs-peer`, linked
//!    against the unpacked archives) and the `perf` and `mover` tools; perftest,
//!    libibverbs' rxe/siw providers and valgrind go into the guest at their
//!    installed paths, with their shared libraries.
//! 3. Boots once: verbs, then datapath; each picks devices itself.
//! 4. Boots the two-host guests: ours and perftest's latency tests across
//!    them ([`two_host`](mod@two_host)).
//! 5. Parses the consoles, prints the headline tables and writes the docs.
//!
//! `UVERBS_BENCH_CELL_MS` and `UVERBS_BENCH_SIZES` are passed to the guest
//! (a quicker, rougher run), and so are the data-path knobs `UVERBS_DP_*`
//! (see benches/datapath/main.rs); `UVERBS_BENCH_FROM_LOG=<console.log>`
//! skips the build and the boots and only regenerates the docs from a saved
//! log (and `UVERBS_BENCH_TWO_HOST_FROM_LOG=<console-a.log>` the two-host
//! section from host a's).
//!
//! The module: [`results`] reads the console's result lines into typed
//! records (serde), [`wire`] types the verbs cells' words, [`model`] folds
//! the verbs cells into a [`model::Run`]; [`headline`](mod@headline),
//! [`targets`](mod@targets) (docs/bench-targets.json),
//! [`markdown`](mod@markdown) and the other sections render them, [`plot`]
//! draws both figures (with [`units`] for the numbers and [`meta`] for the
//! header's host facts); `golden` keeps the output fixed.

mod async_tax;
mod control_ops;
mod datapath;
mod framing;
#[cfg(test)]
mod golden;
mod growth;
mod headline;
mod markdown;
mod meta;
mod model;
mod mover;
mod ops;
mod plot;
mod results;
mod targets;
mod two_host;
mod units;
mod wire;

use crate::binaries::{build_collect, static_program, Binary, TARGET};
use crate::guest::{GuestRun, Mode, RunConfig};
use crate::initramfs::HostFile;
use crate::peer;
use crate::util::{cargo, err, say, Context, Error, Result};
use crate::{Ctx, GuestPlan};
use cargo_metadata::TargetKind;
use headline::headline;
use markdown::markdown;
use meta::Meta;
use model::{Row, Run};
use std::path::Path;
use std::time::Instant;
use targets::Targets;
use wire::Status;

/// Guest environment passed through from the host when set.
const PASS_THROUGH: &[&str] = &[
    "UVERBS_BENCH_CELL_MS",
    "UVERBS_BENCH_SIZES",
    "UVERBS_BENCH_DEVICES",
    "UVERBS_DP_ROUNDS",
    "UVERBS_DP_PASSES",
    "UVERBS_DP_LAT_ITERS",
    "UVERBS_DP_BW_BYTES",
    "UVERBS_DP_ONLY",
    "UVERBS_GROWTH_SAMPLES",
];

/// perftest's programs the data-path bench runs, in the guest at the same
/// paths, with their libraries.
const PERFTEST_PROGRAMS: &[&str] = &[
    "/usr/bin/ib_write_lat",
    "/usr/bin/ib_send_lat",
    "/usr/bin/ib_read_lat",
    "/usr/bin/ib_write_bw",
    "/usr/bin/ib_send_bw",
];

/// qemu's timeout for the bench boot: the data-path bench runs every cell
/// of both tools several times.
const BENCH_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(4 * 3600);

/// `cargo vm bench`: entry point from main.rs.
pub fn run(ctx: &Ctx, kernel: &crate::setup::Kernel) -> Result<bool> {
    let start = Instant::now();
    // Before the long run: a broken targets file fails at once.
    let targets = Targets::load().map_err(|e| err("bench: the targets", e))?;
    let only = std::env::var("UVERBS_BENCH_ONLY").ok();
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
            let peer = peer::Peer::ensure(&ctx.cache, &peer::BENCH)?;
            let runs = vec![
                GuestRun::plain("verbs"),
                GuestRun::plain("datapath").with_timeout(BENCH_TIMEOUT.as_secs() as u32),
                mover_run("mover_1m", 1 << 20),
                mover_run("mover_64k", 64 << 10),
                GuestRun::plain("ops").with_timeout(OPS_TIMEOUT_SECS),
                framing_run(),
                GuestRun::plain("async_tax"),
                GuestRun::plain("growth").with_timeout(GROWTH_TIMEOUT_SECS),
            ];
            // UVERBS_BENCH_ONLY=ops,framing: only the runs whose names
            // contain one of these (a quick loop while working on one
            // part; the docs it writes then lack the rest).
            let mut runs = runs;
            if let Some(only) = &only {
                runs.retain(|r| selected(only, &r.name));
                say(format!(
                    "bench: UVERBS_BENCH_ONLY={only}: runs {}",
                    GuestRun::names(&runs)
                ));
            }
            if runs.is_empty() {
                say("bench: no single-guest run selected; that guest is not booted");
                (String::new(), None)
            } else {
                let bins = build(&ctx.workspace, &peer)?;
                let mut env: Vec<(&'static str, &'static str)> = PASS_THROUGH
                    .iter()
                    .filter_map(|k| {
                        let v = std::env::var(k).ok()?;
                        Some((*k, &*Box::leak(v.into_boxed_str())))
                    })
                    .collect();
                // Kernel lines must not split the marker lines on the console.
                env.push(("UVERBS_BENCH_QUIET_CONSOLE", "1"));
                let configs = [RunConfig {
                    name: "bench",
                    env: Box::leak(env.into_boxed_slice()),
                }];
                let host_files = [
                    perftest_files(&peer)?,
                    valgrind_files(&peer)?,
                    strace_files()?,
                ]
                .concat();
                let plan = GuestPlan {
                    kernel,
                    binaries: &bins,
                    runs: &runs,
                    configs: &configs,
                    host_files: &host_files,
                };
                let outcome = ctx
                    .boot_single(plan, Mode::Run, Some(BENCH_TIMEOUT))?
                    .expect("run mode has an outcome");
                if outcome.status.is_none() {
                    say("bench: qemu was killed at the timeout; reporting what finished");
                }
                (outcome.console, Some(outcome.elapsed.as_secs_f64()))
            }
        }
    };
    // The two-host part: ours and perftest across two guests.
    let two_host = if only.as_ref().is_none_or(|o| selected(o, "two_host")) {
        Some(two_host_console(ctx, kernel)?)
    } else {
        None
    };
    let results = results::read(&console);
    let run = Run::new(&results);
    let dp = datapath::parse(&results);
    if run.rows.is_empty() && only.as_ref().is_none_or(|o| selected(o, "verbs")) {
        let unreadable = match results.skipped.first() {
            Some(s) => format!(
                " readable ({} unreadable, the first: {s})",
                results.skipped.len()
            ),
            None => String::new(),
        };
        return Err(Error(format!(
            "bench: the guest printed no verbs {} lines{unreadable}; see {}",
            results::MARKER,
            ctx.cache.join(crate::CONSOLE_LOG).display()
        )));
    }
    let errors: Vec<&Row> = run
        .rows
        .iter()
        .filter(|r| r.status == Status::Error)
        .collect();
    let exits = crate::report::parse(&console);
    let rc_of = |bin: &str| {
        exits
            .iter()
            .any(|r| r.config == "bench" && r.bin == bin && r.rc == 0)
    };
    let rc_ok = [
        "verbs",
        "datapath",
        "mover_1m",
        "mover_64k",
        "ops",
        "framing",
        "async_tax",
        "growth",
    ]
    .iter()
    .filter(|b| only.as_ref().is_none_or(|o| selected(o, b)))
    .all(|b| rc_of(b));
    let meta = Meta::collect(
        ctx.tools
            .qemu_version()
            .unwrap_or_else(|_| "unknown".into()),
        peer::unpacked_version(&ctx.cache, &peer::BENCH, "libibverbs-dev")
            .unwrap_or_else(|| "unknown".into()),
        vm_secs,
        start.elapsed().as_secs_f64(),
    );
    // The growth section's host part: callgrind on this host, not from a
    // saved log.
    let growth_host = (std::env::var_os("UVERBS_BENCH_FROM_LOG").is_none()
        && only.as_ref().is_none_or(|o| selected(o, "growth")))
    .then(|| {
        say("bench: growth: counting CQ routing and the fork tracker on the host (callgrind)");
        growth::host_counts(&ctx.workspace)
    });
    if let Some(Err(e)) = &growth_host {
        say(format!("bench: growth: host counts not taken: {e}"));
    }
    let docs = ctx.workspace.join("docs");
    let mut md = markdown(&run, &meta, &targets);
    md.push_str(
        "
![Data path: latency and bandwidth vs message size, log-log](benchmarks-datapath.svg)

",
    );
    md.push_str(&datapath::report::markdown(&dp));
    // The sections of the other benches, each left out without its results.
    md.extend(
        [
            mover::markdown(&results.mover),
            ops::markdown(&ops::cases(&results.ops), &results.ops_fn),
            control_ops::markdown(&results.ops),
            framing::markdown(&results.framing),
            async_tax::markdown(&results.asyncs),
            growth::markdown(
                &results.growth,
                &results.growth_limits,
                growth_host.as_ref(),
            ),
        ]
        .into_iter()
        .flatten(),
    );
    let two_host_runs = two_host
        .as_ref()
        .map(|c| two_host::parse(c))
        .unwrap_or_default();
    md.push_str(&two_host::markdown(&two_host_runs));
    std::fs::write(docs.join("benchmarks.md"), &md).context("bench: writing docs/benchmarks.md")?;
    std::fs::write(docs.join("benchmarks.svg"), plot::verbs(&run))
        .context("bench: writing docs/benchmarks.svg")?;
    std::fs::write(docs.join("benchmarks-datapath.svg"), plot::datapath(&dp))
        .context("bench: writing docs/benchmarks-datapath.svg")?;
    println!();
    print!("{}", headline(&run));
    println!("\ndata path, ours ÷ perftest:");
    for row in datapath::report::headline_rows(&dp) {
        println!("{row}");
    }
    let dp_failed: usize = dp.cells.values().map(|c| c.errors.len()).sum();
    if dp.is_empty() {
        say("bench: the guest printed no datapath results (see the console log)");
    }
    for (device, buffer, r) in mover::speedups(&results.mover) {
        println!(
            "mover {device} {} buffers: rereg-access ÷ dereg-reg throughput {r:.2}×",
            units::size_name(buffer)
        );
    }
    for (device, buffer, r) in mover::rotation_speedups(&results.mover) {
        println!(
            "mover {device} {} buffers: the rotation step alone, dereg-reg ÷ rereg-access (medians) {r:.2}×",
            units::size_name(buffer)
        );
    }
    for (device, op, r) in ops::ratios(&ops::cases(&results.ops)) {
        println!("ops {device} {op}: instructions per iteration, ours ÷ libibverbs {r:.2}×");
    }
    for l in &results.growth_limits {
        println!(
            "growth {} {} QPs of {}×{} requests: {} created, refusal errno {}",
            l.device,
            l.imp,
            l.max_send_wr,
            l.max_recv_wr,
            l.created.map_or("?".into(), |c| c.to_string()),
            l.errno.map_or("none".into(), growth::errno_name)
        );
    }
    let growth_failed = results.growth.iter().filter(|l| l.error.is_some()).count()
        + results
            .growth_limits
            .iter()
            .filter(|l| l.error.is_some())
            .count();
    if growth_failed > 0 {
        say(format!(
            "bench: {growth_failed} growth cells failed (listed in docs/benchmarks.md)"
        ));
    }
    for l in results.framing.iter().filter(|l| l.error.is_some()) {
        say(format!(
            "bench: framing trace failed on {}: {}",
            l.device,
            l.error.as_deref().unwrap_or("")
        ));
    }
    if dp_failed > 0 {
        say(format!(
            "bench: {dp_failed} data-path runs failed (listed in docs/benchmarks.md)"
        ));
    }
    say(format!(
        "bench: {} cells ({} unsupported, {} failed); wrote docs/benchmarks.md and docs/benchmarks.svg",
        run.rows.len(),
        run.rows
            .iter()
            .filter(|r| r.status == Status::Unsupported)
            .count(),
        errors.len()
    ));
    for e in &errors {
        say(format!("bench: failed cell: {}", e.raw));
    }
    // A line the report cannot read means the bench and this module
    // disagree about the format: the report is missing results.
    for s in &results.skipped {
        say(format!("bench: left out a result line: {s}"));
    }
    for r in &two_host_runs {
        if let Some((median, p99)) = r.round_trip() {
            println!(
                "two hosts {} {:?}: round trip median {median:.1} µs, p99 {p99:.1} µs",
                r.device.device(),
                r.program
            );
        }
    }
    let two_host_failures = two_host::failures(&two_host_runs);
    let two_host_ok = match &two_host {
        None => true,
        Some(_) if two_host_runs.is_empty() => {
            say("bench: the two-host guests printed no two_host_bench_* run (see console-a.log)");
            false
        }
        Some(_) => two_host_failures.is_empty(),
    };
    for f in &two_host_failures {
        say(format!("bench: two-host run failed: {f}"));
    }
    if !rc_ok && vm_secs.is_some() {
        say("bench: a bench binary did not exit 0 (see the console log)");
    }
    let growth_ok = growth_failed == 0;
    if only.is_some() {
        return Ok(errors.is_empty() && (rc_ok || vm_secs.is_none()) && two_host_ok && growth_ok);
    }
    Ok(two_host_ok
        && growth_ok
        && errors.is_empty()
        && results.skipped.is_empty()
        && !dp.is_empty()
        && dp_failed == 0
        && (rc_ok || vm_secs.is_none()))
}

/// A's console of the two-host part: booted here ([`two_host::runs`]:
/// pingpong and perftest's latency tests across the two guests), or read
/// from `UVERBS_BENCH_TWO_HOST_FROM_LOG` when regenerating from saved logs
/// (empty when that is not set).
fn two_host_console(ctx: &Ctx, kernel: &crate::setup::Kernel) -> Result<String> {
    if std::env::var_os("UVERBS_BENCH_FROM_LOG").is_some() {
        return match std::env::var_os("UVERBS_BENCH_TWO_HOST_FROM_LOG") {
            Some(log) => std::fs::read_to_string(&log)
                .context("bench: reading the saved two-host log (host a's console)"),
            None => Ok(String::new()),
        };
    }
    let peer = peer::Peer::ensure(&ctx.cache, &peer::BENCH)?;
    let pingpong = static_program(&ctx.workspace, "pingpong")?;
    let runs = two_host::runs();
    say(format!("bench: two hosts: {}", GuestRun::names(&runs)));
    let configs = [RunConfig {
        name: "bench",
        env: &[],
    }];
    let plan = GuestPlan {
        kernel,
        binaries: &[pingpong],
        runs: &runs,
        configs: &configs,
        host_files: &perftest_files(&peer)?,
    };
    let [a, b] = ctx
        .boot_two(plan, Mode::Run)?
        .expect("run mode has outcomes");
    for (host, o) in [("a", &a), ("b", &b)] {
        if let Some(f) = crate::report::setup_failure(&o.console) {
            say(format!(
                "bench: two hosts: host {host}'s set-up failed: {f}"
            ));
        }
        say(format!(
            "bench: two hosts: host {host} ran {:.1} s{}",
            o.elapsed.as_secs_f64(),
            if o.status.is_none() {
                " (killed at the timeout)"
            } else {
                ""
            }
        ));
    }
    Ok(a.console)
}

/// Whether `UVERBS_BENCH_ONLY`'s comma-separated list selects the run `name`.
fn selected(only: &str, name: &str) -> bool {
    only.split(',').any(|o| name.contains(o))
}

/// Builds benches/verbs, datapath, ops, async_tax and growth statically
/// with the libibverbs peer, and the tools the guest runs next to them:
/// `perf` (the data-path bench's peer of perftest) and `mover`.
fn build(workspace: &Path, peer: &peer::Peer) -> Result<Vec<Binary>> {
    say(format!(
        "bench: building benches/verbs and benches/datapath statically for {TARGET} with libibverbs-peer"
    ));
    let mut cmd = cargo();
    cmd.current_dir(workspace)
        .args(["bench", "--no-run", "-p", "uverbs-bench"])
        .args(["--bench", "verbs", "--bench", "datapath", "--bench", "ops"])
        .args(["--bench", "async_tax", "--bench", "growth"])
        .args(["--features", "libibverbs-peer,tokio", "--target", TARGET])
        // build.rs links the archives found there (the unpacked packages).
        .env(
            "UVERBS_PEER_LIBDIRS",
            crate::tools::library_path(&peer.root),
        )
        .arg("--message-format=json-render-diagnostics");
    let bins = build_collect("bench: static build", &mut cmd, |a| {
        a.target.kind.contains(&TargetKind::Bench)
    })?;
    let mut out = Vec::new();
    for name in ["verbs", "datapath", "ops", "async_tax", "growth"] {
        let b = bins.iter().find(|b| b.name == name).ok_or_else(|| {
            err(
                "bench: static build",
                format!("cargo reported no executable for bench {name}"),
            )
        })?;
        out.push(b.clone());
    }
    out.push(static_program(workspace, "perf")?);
    out.push(static_program(workspace, "mover")?);
    Ok(out)
}

/// `verbs --framing`: which system call each implementation makes per
/// control operation, traced by strace.
fn framing_run() -> GuestRun {
    GuestRun {
        name: "framing".into(),
        bin: "verbs".into(),
        args: vec!["--framing".into()],
        timeout_secs: crate::guest::PER_BINARY_TIMEOUT_SECS,
        per_host: None,
        retry_once: false,
    }
}

/// A run of the mover tool with `buffer`-byte buffers, on every device.
fn mover_run(name: &str, buffer: usize) -> GuestRun {
    GuestRun {
        name: name.into(),
        bin: "mover".into(),
        args: vec![
            "--buffer".into(),
            buffer.to_string(),
            "--writes".into(),
            "3000".into(),
        ],
        timeout_secs: crate::guest::PER_BINARY_TIMEOUT_SECS,
        per_host: None,
        retry_once: false,
    }
}

/// perftest's programs, libibverbs' rxe and siw providers and their
/// `.driver` files, from the unpacked packages, for the guest.
fn perftest_files(peer: &peer::Peer) -> Result<Vec<HostFile>> {
    let mut files = PERFTEST_PROGRAMS
        .iter()
        .map(|p| peer.host_file(p, "perftest", true))
        .collect::<Result<Vec<_>>>()?;
    files.extend(peer.provider_files()?);
    Ok(files)
}

/// strace for `verbs --framing`, the host's (as `cargo vm test` uses it),
/// in the guest at the same path.
fn strace_files() -> Result<Vec<HostFile>> {
    let f = HostFile {
        path: "/usr/bin/strace".into(),
        root: None,
        with_libraries: true,
    };
    if !f.path.exists() {
        return Err(err(
            "bench: strace for the guest",
            "/usr/bin/strace is missing (package strace)",
        ));
    }
    Ok(vec![f])
}

/// How long benches/growth may take: 10,000 regions registered three times
/// per device and implementation, QPs created up to siw's limit, under TCG.
const GROWTH_TIMEOUT_SECS: u32 = 1800;

/// How long benches/ops may take: 16 loops under callgrind (4 cases × 2
/// implementations × rxe0 and siw0) and the control loops, under TCG
/// (about 3 minutes in all).
const OPS_TIMEOUT_SECS: u32 = 1800;

/// What benches/ops runs callgrind with, from the unpacked valgrind, in
/// the guest at its installed paths: the launcher behind Debian's
/// `valgrind` wrapper script, the tool (a static executable), the core
/// preload and the default suppressions.
fn valgrind_files(peer: &peer::Peer) -> Result<Vec<HostFile>> {
    let dir = "/usr/libexec/valgrind";
    [
        ("/usr/bin/valgrind.bin".to_string(), true),
        (format!("{dir}/callgrind-amd64-linux"), false),
        (format!("{dir}/vgpreload_core-amd64-linux.so"), false),
        (format!("{dir}/default.supp"), false),
    ]
    .into_iter()
    .map(|(path, with_libraries)| {
        peer.file(&path, "valgrind")?;
        Ok(HostFile {
            path: path.into(),
            root: Some(peer.root.clone()),
            with_libraries,
        })
    })
    .collect()
}
