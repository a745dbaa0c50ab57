//! `uverbs-vm`: runs the project's tests against real soft-RDMA devices
//! (rxe0 and siw0) inside a qemu VM booting a stock Debian 6.12 kernel.
//!
//! Invoked through the cargo alias in `.cargo/config.toml`:
//! `cargo vm setup | test | demo | shell [options]`.
//!
//! The flow of `cargo vm test`:
//!
//! 1. [`setup`] installs missing host packages, downloads and unpacks the
//!    kernel, builds siw.ko out of tree and caches everything under
//!    `target/vm` (or `$UVERBS_VM_CACHE`); a stamp makes later runs skip it.
//!    Concurrent runs share that cache ([`cache`]: a lock around the set-up)
//!    and each boots from its own work directory inside it.
//! 2. [`binaries`] runs the host test suite, then builds every test binary
//!    of the `uverbs` package statically.
//! 3. [`guest`] generates `/init` (modules, rdma links, then every binary
//!    under every configuration of [`guest::TEST_CONFIGS`], each followed by a
//!    result marker) and [`initramfs`] packs it with busybox, the modules,
//!    the `rdma` tool and the binaries into a gzip cpio archive.
//! 4. [`qemu`] boots it with a hard timeout, streaming the console to stdout
//!    and a log, copied to `target/vm/console.log` when qemu exits.
//! 5. [`report`] reads the markers back and prints the binary ×
//!    configuration table; the last line is `vm: N passed, M failed`.
//!
//! `demo` does steps 3–5 for `examples/rereg.rs` and `examples/pingpong.rs`
//! (the runs of [`guest::DEMO_RUNS`], one of them the pingpong probe under
//! strace); `shell` boots to an interactive busybox shell with the same
//! devices and binaries.

mod apt;
mod bench;
mod binaries;
mod cache;
mod guest;
mod initramfs;
mod markers;
mod qemu;
mod report;
mod setup;
mod util;

use binaries::Binary;
use cache::WorkDir;
use guest::{GuestRun, Mode, RunConfig};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;
use util::{say, tail, Context, Error, Result};

const USAGE: &str = "\
usage: cargo vm <command> [options]

commands:
  setup   install host packages, fetch the 6.12 kernel, build siw (cached)
  test    host tests, then every uverbs test binary in the VM per configuration
  demo    run examples/rereg.rs and examples/pingpong.rs (+ its syscall count
          under strace) in the VM (ioctl and write transports)
  shell   boot the VM to an interactive busybox shell (Ctrl-A X quits)
  bench   benchmarks in the VM (ours, bare syscall, libibverbs); writes docs/benchmarks.md

options:
  --timeout SECS   kill qemu after SECS seconds (default 1500; shell: none)
  --memory SIZE    guest memory, as qemu -m takes it (default 2G)
  --keep           keep this run's work directory, target/vm/kept-<pid>-<n>
                   (initramfs, scripts, console log)
  --force          (setup) redo the set-up even if cached

environment:
  UVERBS_VM_CACHE  cache directory (default <workspace>/target/vm)";

/// Parsed command line.
struct Options {
    command: String,
    /// `--timeout`; `None` means the command's default.
    timeout: Option<Duration>,
    memory: String,
    keep: bool,
    force: bool,
}

fn parse_args(args: &[String]) -> Result<Options> {
    let mut o = Options {
        command: String::new(),
        timeout: None,
        memory: "2G".into(),
        keep: false,
        force: false,
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut value = |name: &str| {
            it.next()
                .cloned()
                .ok_or_else(|| Error(format!("{name} needs a value\n\n{USAGE}")))
        };
        match a.as_str() {
            "--timeout" => {
                let v = value("--timeout")?;
                let secs: u64 = v
                    .parse()
                    .map_err(|_| Error(format!("--timeout wants seconds, got `{v}`")))?;
                o.timeout = Some(Duration::from_secs(secs));
            }
            "--memory" => o.memory = value("--memory")?,
            "--keep" => o.keep = true,
            "--force" => o.force = true,
            "-h" | "--help" | "help" => o.command = "help".into(),
            c if !c.starts_with('-') && o.command.is_empty() => o.command = c.into(),
            other => return Err(Error(format!("unknown argument `{other}`\n\n{USAGE}"))),
        }
    }
    Ok(o)
}

/// Default hard timeout for a test or demo boot (a normal run takes seconds;
/// this only catches a hung guest).
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(25 * 60);
/// An interactive shell only stops at an explicit `--timeout`.
const SHELL_TIMEOUT: Duration = Duration::from_secs(7 * 24 * 3600);

/// The console log's name, in the work directory and (last run's) in the cache.
pub const CONSOLE_LOG: &str = "console.log";

/// Paths shared by the commands.
struct Ctx {
    workspace: PathBuf,
    cache: PathBuf,
    opts: Options,
}

impl Ctx {
    /// Builds the initramfs for `binaries` and boots it; each binary runs
    /// once per configuration, without arguments.
    fn boot(
        &self,
        kernel: &setup::Kernel,
        binaries: &[Binary],
        configs: &[RunConfig],
        mode: Mode,
    ) -> Result<Option<qemu::Outcome>> {
        self.boot_runs(kernel, binaries, &plain_runs(binaries), configs, mode)
    }

    /// [`boot`](Self::boot) with the runs given (binaries with arguments).
    fn boot_runs(
        &self,
        kernel: &setup::Kernel,
        binaries: &[Binary],
        runs: &[GuestRun],
        configs: &[RunConfig],
        mode: Mode,
    ) -> Result<Option<qemu::Outcome>> {
        // Private to this run: concurrent runs share only the cache.
        let work = WorkDir::create(&self.cache, self.opts.keep)?;
        let work_path = work.path();
        let contents = initramfs::Contents {
            modules: &kernel.modules,
            binaries,
            init: guest::init_script(&kernel.modules, mode),
            run_all: guest::run_all_script(configs, runs),
        };
        // Copies of the scripts, for reading with --keep.
        std::fs::write(work_path.join("init"), &contents.init)
            .context("writing the init script")?;
        std::fs::write(work_path.join("run-all"), &contents.run_all)
            .context("writing the run-all script")?;
        let initrd = work_path.join("initramfs.cpio.gz");
        initramfs::build(&initrd, &work_path.join("bin"), &contents)?;
        let boot = qemu::Boot {
            kernel: kernel.vmlinuz.clone(),
            initrd,
            memory: self.opts.memory.clone(),
            timeout: self.opts.timeout.unwrap_or(match mode {
                Mode::Run => DEFAULT_TIMEOUT,
                Mode::Shell => SHELL_TIMEOUT,
            }),
        };
        let outcome = match mode {
            Mode::Run => {
                let outcome = qemu::run(&boot, &work_path.join(CONSOLE_LOG))?;
                // The cache's copy is the last finished run's.
                work.publish(CONSOLE_LOG, &self.cache.join(CONSOLE_LOG))?;
                Some(outcome)
            }
            Mode::Shell => {
                qemu::interactive(&boot)?;
                None
            }
        };
        Ok(outcome)
    }

    /// Boots a run plan and reports; Ok(true) when every run passed.
    fn run_plan(
        &self,
        kernel: &setup::Kernel,
        binaries: &[Binary],
        runs: &[GuestRun],
        configs: &[RunConfig],
    ) -> Result<bool> {
        let mut outcome = self
            .boot_runs(kernel, binaries, runs, configs, Mode::Run)?
            .expect("run mode has an outcome");
        if report::panicked_before_any_run(&outcome.console) {
            say("the guest kernel panicked before any test started (see the console above); booting once more");
            outcome = self
                .boot_runs(kernel, binaries, runs, configs, Mode::Run)?
                .expect("run mode has an outcome");
        }
        let names: Vec<String> = runs.iter().map(|r| r.name.clone()).collect();
        let config_names: Vec<&str> = configs.iter().map(|c| c.name).collect();
        let results = report::parse(&outcome.console);
        let (table, counts) = report::summarize(&config_names, &names, &results);
        let mut problems = Vec::new();
        if let Some(f) = report::setup_failure(&outcome.console) {
            problems.push(format!("the guest's set-up failed: {f}"));
        }
        match outcome.status {
            None => problems.push("qemu was killed at the timeout (see --timeout)".to_string()),
            Some(s) if !s.success() => problems.push(format!("qemu exited with {s}")),
            Some(_) => {}
        }
        if counts.missing > 0 {
            problems.push(format!(
                "{} of {} planned runs reported no result (the VM stopped early?)",
                counts.missing,
                names.len() * configs.len()
            ));
        }
        let ok = counts.all_passed() && problems.is_empty();
        println!();
        if !ok {
            println!(
                "vm: ---- last 60 console lines ({}) ----",
                self.cache.join(CONSOLE_LOG).display()
            );
            println!("{}", tail(&outcome.console, 60));
            println!("vm: ----");
            for p in &problems {
                say(format!("problem: {p}"));
            }
        }
        say(format!(
            "results after {:.1} s in the VM:",
            outcome.elapsed.as_secs_f64()
        ));
        print!("{table}");
        say(format!(
            "{} passed, {} failed",
            counts.passed,
            counts.failed + counts.missing
        ));
        Ok(ok)
    }
}

fn real_main(args: &[String]) -> Result<bool> {
    let opts = parse_args(args)?;
    if opts.command.is_empty() || opts.command == "help" {
        println!("{USAGE}");
        return Ok(!opts.command.is_empty());
    }
    if !matches!(
        opts.command.as_str(),
        "setup" | "test" | "demo" | "shell" | "bench"
    ) {
        return Err(Error(format!(
            "unknown command `{}`\n\n{USAGE}",
            opts.command
        )));
    }
    let workspace = util::workspace_root()?;
    let cache = util::cache_dir(&workspace);
    let ctx = Ctx {
        workspace,
        cache,
        opts,
    };
    // Held to the end: the cache must not be set up anew while we boot from it.
    let (kernel, _cache_in_use) = setup::ensure(&ctx.cache, ctx.opts.force)?;
    match ctx.opts.command.as_str() {
        "setup" => Ok(true),
        "test" => {
            // UVERBS_VM_ONLY=a,b: only the binaries whose names contain `a`
            // or `b`, and no host suite (a quick loop while writing a device
            // test; CI never sets it).
            let only = std::env::var("UVERBS_VM_ONLY").ok();
            if only.is_none() {
                binaries::host_tests(&ctx.workspace)?;
            }
            let mut bins = binaries::static_tests(&ctx.workspace)?;
            if let Some(only) = &only {
                bins.retain(|b| only.split(',').any(|o| b.name.contains(o)));
                say(format!("test: UVERBS_VM_ONLY={only}: host suite skipped"));
            }
            say(format!(
                "test: {} binaries × {} configurations: {}",
                bins.len(),
                guest::TEST_CONFIGS.len(),
                bins.iter()
                    .map(|b| b.name.as_str())
                    .collect::<Vec<_>>()
                    .join(" ")
            ));
            ctx.run_plan(&kernel, &bins, &plain_runs(&bins), guest::TEST_CONFIGS)
        }
        "demo" => {
            let runs = GuestRun::demo();
            let mut bins: Vec<Binary> = Vec::new();
            for run in &runs {
                if !bins.iter().any(|b| b.name == run.bin) {
                    bins.push(binaries::static_example(&ctx.workspace, &run.bin)?);
                }
            }
            ctx.run_plan(&kernel, &bins, &runs, guest::DEMO_CONFIGS)
        }
        "bench" => bench::run(&ctx, &kernel),
        "shell" => {
            let bins = binaries::static_tests(&ctx.workspace)?;
            ctx.boot(&kernel, &bins, guest::TEST_CONFIGS, Mode::Shell)?;
            Ok(true)
        }
        _ => unreachable!("checked above"),
    }
}

/// Each binary once, without arguments, under its own name.
fn plain_runs(binaries: &[Binary]) -> Vec<GuestRun> {
    binaries.iter().map(|b| GuestRun::plain(&b.name)).collect()
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match real_main(&args) {
        Ok(true) => ExitCode::SUCCESS,
        // The report (ending in "vm: N passed, M failed") is already printed.
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("vm: error: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn options() {
        let o = parse_args(&args("test --timeout 60 --memory 1G --keep")).unwrap();
        assert_eq!(o.command, "test");
        assert_eq!(o.timeout, Some(Duration::from_secs(60)));
        assert_eq!(o.memory, "1G");
        assert!(o.keep);
        assert!(parse_args(&args("test --timeout x")).is_err());
        assert!(parse_args(&args("test --bogus")).is_err());
        assert!(parse_args(&args("test --memory")).is_err());
    }
}
