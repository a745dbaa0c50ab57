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
//!
//! The module: [`wire`] types the words of a `@@BENCH` line,
//! [`parse`](mod@parse) reads the console into a [`model::Run`],
//! [`headline`](mod@headline), [`targets`](mod@targets),
//! [`markdown`](mod@markdown) and [`svg`](mod@svg) render it (with [`units`]
//! for the numbers and [`meta`] for the header's host facts); `golden` keeps
//! the output fixed.

#[cfg(test)]
mod golden;
mod headline;
mod markdown;
mod meta;
mod model;
mod parse;
mod svg;
mod targets;
mod units;
mod wire;

use crate::apt;
use crate::binaries::{build_collect, Binary, TARGET};
use crate::guest::{Mode, RunConfig};
use crate::markers::BENCH;
use crate::util::{cargo, err, say, Context, Error, Result};
use crate::Ctx;
use cargo_metadata::TargetKind;
use headline::headline;
use markdown::markdown;
use meta::Meta;
use model::Row;
use parse::parse;
use std::path::Path;
use std::time::Instant;
use svg::svg;
use wire::Status;

/// Debian packages the libibverbs peer links against (static archives).
const PEER_PACKAGES: &[&str] = &["libibverbs-dev", "libnl-3-dev", "libnl-route-3-dev"];

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
        let unreadable = match run.skipped.first() {
            Some(s) => format!(
                " readable ({} unreadable, the first: {}: {})",
                run.skipped.len(),
                s.error,
                s.line
            ),
            None => String::new(),
        };
        return Err(Error(format!(
            "bench: the guest printed no {BENCH} lines{unreadable}; see {}",
            ctx.cache.join(crate::CONSOLE_LOG).display()
        )));
    }
    let errors: Vec<&Row> = run
        .rows
        .iter()
        .filter(|r| r.status == Status::Error)
        .collect();
    let rc_ok = crate::report::parse(&console)
        .iter()
        .any(|r| r.config == "bench" && r.bin == "verbs" && r.rc == 0);
    let meta = Meta::collect(vm_secs, start.elapsed().as_secs_f64());
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
    // disagree about the format: the report is missing cells.
    for s in &run.skipped {
        say(format!(
            "bench: left out a {BENCH} line ({}): {}",
            s.error, s.line
        ));
    }
    if !rc_ok && vm_secs.is_some() {
        say("bench: the bench binary did not exit 0 (see the console log)");
    }
    Ok(errors.is_empty() && run.skipped.is_empty() && (rc_ok || vm_secs.is_none()))
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
