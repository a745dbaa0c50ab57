//! `uverbs-vm`: runs the project's tests against real soft-RDMA devices
//! (rxe0 and siw0) inside a qemu VM booting a stock Debian kernel (12's
//! 6.12 by default, its 6.1 with `--kernel 6.1`), with nothing installed on
//! the host and no root needed.
//!
//! Invoked through the cargo alias in `.cargo/config.toml`:
//! `cargo vm setup | test | demo | shell [options]`.
//!
//! The flow of `cargo vm test`:
//!
//! 1. [`setup`] downloads and unpacks qemu and busybox ([`tools`]) and each
//!    kernel asked for ([`apt`]), builds siw.ko out of tree and caches everything under
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
//!    configuration table. The single guest also runs the C-peer pairings
//!    of [`guest::C_PEER_RUNS`] and [`guest::perftest_pairings`]:
//!    `tools/c_peers.rs` against rdma-core's `rdma_server`, `rdma_client`
//!    and `ibv_rc_pingpong` and perftest's programs, unpacked under the
//!    cache ([`peer::C_PEERS`]), each pairing a row of the table.
//! 6. The `two_host_*` binaries (never run in the single guest) run in a
//!    second boot of two guests, A and B, joined by a virtual Ethernet link
//!    ([`qemu::run_two`]), each binary on both at once with its role
//!    ([`guest::two_host_run_all_script`]), then the examples of
//!    [`guest::TWO_HOST_EXAMPLE_RUNS`] (`pingpong --cm` across the guests
//!    on rxe0 and siw0, arguments per host); a run passes when both roles
//!    pass. Its table ends in `vm two-host: N passed, M failed`, and the
//!    last line, `vm: N passed, M failed`, counts both boots' runs.
//!
//! `demo` does steps 3–5 for `tools/rereg_tour.rs`, `tools/pingpong.rs`,
//! `tools/perf.rs` and `tools/syscalls.rs` (the runs of [`guest::DEMO_RUNS`],
//! the last the system-call probe under strace) and the short examples of
//! [`guest::SHORT_EXAMPLES`] on rxe0 and siw0, which `test` runs too;
//! `shell` boots to an interactive busybox shell with the same
//! devices and binaries (`shell --two`: the two-host guests, A on the
//! terminal, B's shell reached from A with `telnet 192.0.2.2`).

mod apt;
mod bench;
mod binaries;
mod cache;
mod guest;
mod initramfs;
mod layering;
mod markers;
mod modinfo;
mod peer;
// The perf tool's tests (tools/perf.rs), each paired with perftest's
// program in the C-peer runs (`guest::perftest_pairings`).
#[allow(dead_code)]
#[path = "../../../tools/perf/test_kind.rs"]
mod perf_test;
mod qemu;
mod report;
mod setup;
mod tools;
mod util;

use binaries::Binary;
use cache::WorkDir;
use guest::{GuestRun, Host, Mode, Net, RunConfig};
use setup::{Kernel, Series};
use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;
use tools::Tools;
use util::{say, tail, Context, Error, Result};

const USAGE: &str = "\
usage: cargo vm <command> [options]

commands:
  setup   fetch qemu, busybox and the kernel, build siw (cached; installs
          nothing on the host, needs no root)
  test    host tests, then every uverbs test binary in the VM per configuration
  demo    run the examples in the VM (ioctl and write transports): the
          short ones (devinfo, loopback, owned, events, rereg, multicast,
          hwcheck, read, tokio_read) on rxe0 and siw0, rereg_tour, pingpong, and the tools
          perf (--self-test) and syscalls (system calls per data-path call,
          under strace)
  shell   boot the VM to an interactive busybox shell (Ctrl-A X quits);
          --two: the two-host guests, host a on this terminal, host b's
          shell reached from a with `telnet 192.0.2.2`
  bench   benchmarks in the VM (ours, bare syscall, libibverbs); writes docs/benchmarks.md

options:
  --timeout SECS   kill qemu after SECS seconds (default 1500; shell: none)
  --memory SIZE    memory of each guest, as qemu -m takes it (default 2G;
                   each of the two-host guests: 1G)
  --keep           keep this run's work directory, target/vm/kept-<pid>-<n>
                   (initramfs, scripts, console log)
  --kernel K[,K]   the kernel(s) to boot: 6.12 (default), 6.1, or all;
                   test and demo run their whole plan on each in turn
  --force          (setup) redo the set-up even if cached
  --two            (shell) boot the two guests of the two-host run

environment:
  UVERBS_VM_CACHE  cache directory (default <workspace>/target/vm)";

/// Parsed command line.
struct Options {
    command: String,
    /// `--timeout`; `None` means the command's default.
    timeout: Option<Duration>,
    /// `--memory`; `None` means the guest's default.
    memory: Option<String>,
    keep: bool,
    force: bool,
    /// `shell --two`.
    two: bool,
    /// `--kernel`: the kernel series to boot, in order.
    kernels: Vec<Series>,
}

/// The series `--kernel` names: a comma-separated list of `6.12`, `6.1`,
/// or `all`.
fn parse_kernels(v: &str) -> Result<Vec<Series>> {
    if v == "all" {
        return Ok(setup::SERIES.to_vec());
    }
    let mut out: Vec<Series> = Vec::new();
    for name in v.split(',') {
        let s = setup::series(name).ok_or_else(|| {
            Error(format!(
                "--kernel: unknown kernel `{name}` (one of: {}, all)",
                setup::SERIES
                    .iter()
                    .map(|s| s.name)
                    .collect::<Vec<_>>()
                    .join(", ")
            ))
        })?;
        if !out.contains(&s) {
            out.push(s);
        }
    }
    Ok(out)
}

fn parse_args(args: impl IntoIterator<Item = OsString>) -> Result<Options> {
    use lexopt::prelude::*;
    let mut o = Options {
        command: String::new(),
        timeout: None,
        memory: None,
        keep: false,
        force: false,
        two: false,
        kernels: vec![setup::SERIES[0]],
    };
    let mut p = lexopt::Parser::from_args(args);
    let mut read = || -> std::result::Result<(), lexopt::Error> {
        while let Some(arg) = p.next()? {
            match arg {
                Long("timeout") => o.timeout = Some(Duration::from_secs(p.value()?.parse()?)),
                Long("memory") => o.memory = Some(p.value()?.string()?),
                Long("kernel") => {
                    o.kernels = p
                        .value()?
                        .parse_with(|v| parse_kernels(v).map_err(|e| e.0))?
                }
                Long("keep") => o.keep = true,
                Long("force") => o.force = true,
                Long("two") => o.two = true,
                Short('h') | Long("help") => o.command = "help".into(),
                Value(v) if v == "help" => o.command = "help".into(),
                Value(c) if o.command.is_empty() => o.command = c.string()?,
                _ => return Err(arg.unexpected()),
            }
        }
        Ok(())
    };
    read().map_err(|e| Error(format!("{e}\n\n{USAGE}")))?;
    Ok(o)
}

/// Default hard timeout for a test or demo boot (a normal run takes seconds;
/// this only catches a hung guest).
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(25 * 60);
/// An interactive shell only stops at an explicit `--timeout`.
const SHELL_TIMEOUT: Duration = Duration::from_secs(7 * 24 * 3600);

/// The console log's name, in the work directory and (last run's) in the cache.
pub const CONSOLE_LOG: &str = "console.log";
/// The two-host run's console logs (A's, B's), likewise.
pub const TWO_HOST_CONSOLE_LOGS: [&str; 2] = ["console-a.log", "console-b.log"];

/// The single guest's memory and virtual CPUs.
const SINGLE_MEMORY: &str = "2G";
const SINGLE_CPUS: u32 = 2;
/// Each two-host guest's: one CPU each keeps the two guests to the two
/// host cores the single guest uses (TCG runs one host thread per vCPU),
/// and they hold only the `two_host_*` binaries.
const TWO_HOST_MEMORY: &str = "1G";
const TWO_HOST_CPUS: u32 = 1;

/// How a plan's runs went.
#[derive(Debug, Clone, Default)]
struct Verdict {
    /// Every planned run passed and the boot had no problem.
    ok: bool,
    passed: usize,
    /// Failed and missing runs.
    failed: usize,
    /// Those runs by name (`config/bin` and how).
    failures: Vec<String>,
    /// Passed runs that failed their first attempt.
    second_attempt: Vec<String>,
    /// The plan's table (binary × configuration), as printed.
    table: String,
}

impl Verdict {
    /// The verdict on a plan whose runs counted `counts` (failed and
    /// missing runs both fail); `ok` when they all passed and the boot had
    /// no problem.
    fn new(ok: bool, counts: report::Counts, table: String) -> Verdict {
        Verdict {
            ok,
            passed: counts.passed,
            failed: counts.failed + counts.missing,
            failures: counts.failures,
            second_attempt: counts.second_attempt,
            table,
        }
    }
}

/// `test: N runs × M configurations <place>: <the runs' names>`.
fn plan_line(runs: &[GuestRun], place: &str) -> String {
    format!(
        "test: {} runs × {} configurations {place}: {}",
        runs.len(),
        guest::TEST_CONFIGS.len(),
        GuestRun::names(runs)
    )
}

/// Keeps the runs `only` (`UVERBS_VM_ONLY`, comma-separated) names part
/// of, when set.
fn keep_only(runs: &mut Vec<GuestRun>, only: &Option<String>) {
    if let Some(only) = only {
        runs.retain(|r| only.split(',').any(|o| r.name.contains(o)));
    }
}

/// Judges a plan of `planned` runs that counted `counts`: the problems
/// besides failed runs (each boot's, its host named by the prefix it comes
/// with: the guest's set-up failed, qemu was killed or failed; then the
/// planned runs without a result, `lack` saying how), and whether every
/// run passed with no problem.
fn judge<'o>(
    boots: impl IntoIterator<Item = (String, &'o qemu::Outcome)>,
    counts: &report::Counts,
    planned: usize,
    lack: &str,
) -> (bool, Vec<String>) {
    let mut problems = Vec::new();
    for (host, o) in boots {
        if let Some(f) = report::setup_failure(&o.console) {
            problems.push(format!("{host}the guest's set-up failed: {f}"));
        }
        match o.status {
            None => problems.push(format!(
                "{host}qemu was killed at the timeout (see --timeout)"
            )),
            Some(s) if !s.success() => problems.push(format!("{host}qemu exited with {s}")),
            Some(_) => {}
        }
    }
    if counts.missing > 0 {
        problems.push(format!(
            "{} of {planned} planned runs {lack}",
            counts.missing
        ));
    }
    (counts.all_passed() && problems.is_empty(), problems)
}

/// The lines CI reads last: per kernel, which runs failed, which passed
/// only on a second attempt, and `vm <kernel>: N passed, M failed, K on a
/// second attempt`; then `vm: N passed, M failed` of all of them together
/// (the tables above may be out of a short log's view). Whether all passed.
fn final_lines(per_kernel: &[(&Kernel, Vec<Verdict>)]) -> bool {
    let (mut passed, mut failed) = (0, 0);
    for (kernel, verdicts) in per_kernel {
        // The named runs of one kind, across the kernel's plans.
        let runs = |of: fn(&Verdict) -> &Vec<String>| -> Vec<&str> {
            verdicts
                .iter()
                .flat_map(|v| of(v).iter().map(String::as_str))
                .collect()
        };
        let second = runs(|v| &v.second_attempt);
        let failures = runs(|v| &v.failures);
        for (what, named) in [
            ("passed only on the second attempt", &second),
            ("failed", &failures),
        ] {
            if !named.is_empty() {
                say(format!("{}: {what}: {}", kernel.series, named.join(", ")));
            }
        }
        let p: usize = verdicts.iter().map(|v| v.passed).sum();
        let f: usize = verdicts.iter().map(|v| v.failed).sum();
        println!(
            "vm {}: {p} passed, {f} failed, {} on a second attempt ({})",
            kernel.series,
            second.len(),
            kernel.release
        );
        passed += p;
        failed += f;
    }
    say(format!("{passed} passed, {failed} failed"));
    per_kernel.iter().all(|(_, vs)| vs.iter().all(|v| v.ok))
}

/// What one boot runs: the kernel, the programs put in `/tests`, the
/// runs of `/run-all` under each configuration, and the host files added
/// to the guest (`cargo vm test`'s C peers, `cargo vm bench`'s perftest).
#[derive(Clone, Copy)]
struct GuestPlan<'a> {
    kernel: &'a Kernel,
    binaries: &'a [Binary],
    runs: &'a [GuestRun],
    configs: &'a [RunConfig],
    host_files: &'a [initramfs::HostFile],
}

/// Paths and tools shared by the commands.
struct Ctx {
    workspace: PathBuf,
    cache: PathBuf,
    opts: Options,
    /// The unpacked qemu and busybox.
    tools: Tools,
    /// Boot with the console only in the log (`cargo vm demo`, which
    /// prints an overview instead).
    quiet: bool,
}

impl Ctx {
    /// Boots the single guest with `plan`, qemu's timeout set when
    /// `timeout` is given (and `--timeout` is not).
    fn boot_single(
        &self,
        plan: GuestPlan,
        mode: Mode,
        timeout: Option<Duration>,
    ) -> Result<Option<qemu::Outcome>> {
        // Private to this run: concurrent runs share only the cache.
        let work = WorkDir::create(&self.cache, self.opts.keep)?;
        let work_path = work.path();
        let initrd = self.initramfs(
            work_path,
            "",
            initramfs::Contents {
                modules: &plan.kernel.modules,
                busybox: &self.tools.busybox(),
                binaries: plan.binaries,
                host_files: plan.host_files,
                init: guest::init_script(&plan.kernel.modules, mode, Net::Dummy),
                run_all: guest::run_all_script(plan.configs, plan.runs),
            },
        )?;
        let mut boot = self.qemu_boot(
            plan.kernel,
            initrd,
            mode,
            SINGLE_MEMORY,
            SINGLE_CPUS,
            Vec::new(),
        );
        if let (Some(t), None) = (timeout, self.opts.timeout) {
            boot.timeout = t;
        }
        let outcome = match mode {
            Mode::Run => {
                let outcome = qemu::run(&boot, &work_path.join(CONSOLE_LOG), self.quiet)?;
                // The cache's copies are the last finished run's, and the
                // last one's on this kernel.
                work.publish(CONSOLE_LOG, &self.cache.join(CONSOLE_LOG))?;
                work.publish(CONSOLE_LOG, &self.cache.join(series_log(plan.kernel)))?;
                Some(outcome)
            }
            Mode::Shell => {
                qemu::interactive(&boot)?;
                None
            }
        };
        Ok(outcome)
    }

    /// Adds to `bins` the static build of each example or tool `runs`
    /// run that is not among them yet ([`binaries::Program::named`]).
    fn add_example_bins(&self, bins: &mut Vec<Binary>, runs: &[GuestRun]) -> Result<()> {
        for run in runs {
            if !bins.iter().any(|b| b.name == run.bin) {
                bins.push(binaries::static_program(&self.workspace, &run.bin)?);
            }
        }
        Ok(())
    }

    /// The C peers' programs (built statically: the `c_peers` tool, the
    /// `pingpong` tool it runs against `ibv_rc_pingpong` and the `perf`
    /// tool it runs against perftest) and what the guest
    /// needs of rdma-core for them: the C programs with their libraries
    /// and the providers, unpacked under the cache ([`peer::C_PEERS`]).
    fn c_peers(&self) -> Result<(Vec<Binary>, Vec<initramfs::HostFile>)> {
        let peer = peer::Peer::ensure(&self.cache, &peer::C_PEERS)?;
        let files = peer.c_peer_files()?;
        let programs = guest::C_PEERS_PROGRAMS
            .iter()
            .map(|name| binaries::static_program(&self.workspace, name))
            .collect::<Result<_>>()?;
        Ok((programs, files))
    }

    /// Writes the scripts (copies for reading with --keep, named
    /// `init<suffix>` and `run-all<suffix>`) and the initramfs
    /// `initramfs<suffix>.cpio.gz` into `work`; returns the initramfs.
    fn initramfs(
        &self,
        work: &std::path::Path,
        suffix: &str,
        contents: initramfs::Contents,
    ) -> Result<PathBuf> {
        std::fs::write(work.join(format!("init{suffix}")), &contents.init)
            .context("writing the init script")?;
        std::fs::write(work.join(format!("run-all{suffix}")), &contents.run_all)
            .context("writing the run-all script")?;
        let initrd = work.join(format!("initramfs{suffix}.cpio.gz"));
        initramfs::build(&initrd, &work.join("bin"), &contents)?;
        Ok(initrd)
    }

    /// A qemu boot of `initrd` with the options' memory and timeout (or
    /// the given defaults).
    fn qemu_boot(
        &self,
        kernel: &Kernel,
        initrd: PathBuf,
        mode: Mode,
        memory: &str,
        cpus: u32,
        nics: Vec<qemu::Nic>,
    ) -> qemu::Boot {
        qemu::Boot {
            tools: self.tools.clone(),
            kernel: kernel.vmlinuz.clone(),
            initrd,
            memory: self.opts.memory.clone().unwrap_or_else(|| memory.into()),
            cpus,
            timeout: self.opts.timeout.unwrap_or(match mode {
                Mode::Run => DEFAULT_TIMEOUT,
                Mode::Shell => SHELL_TIMEOUT,
            }),
            nics,
        }
    }

    /// Boots the two-host guests with `plan`, each with its own `/init`
    /// and `/run-all` (every run under every configuration, with its role)
    /// and the host files added to both, and returns A's and B's outcomes
    /// (`None` for the interactive shell).
    fn boot_two(&self, plan: GuestPlan, mode: Mode) -> Result<Option<[qemu::Outcome; 2]>> {
        let work = WorkDir::create(&self.cache, self.opts.keep)?;
        let work_path = work.path();
        // One link per device (rxe0's eth0, siw0's eth1), each a UDP port
        // of each qemu ([`qemu::Nic`]): A's and B's of link i are
        // ports[2i] and ports[2i + 1].
        let ports = qemu::free_ports(2 * guest::LINK_KINDS.len())?;
        let mut boots = Vec::new();
        for host in Host::BOTH {
            let initrd = self.initramfs(
                work_path,
                &format!("-{}", host.role()),
                initramfs::Contents {
                    modules: &plan.kernel.modules,
                    busybox: &self.tools.busybox(),
                    binaries: plan.binaries,
                    host_files: plan.host_files,
                    init: guest::init_script(&plan.kernel.modules, mode, Net::Link(host)),
                    run_all: guest::two_host_run_all_script(plan.configs, plan.runs, host),
                },
            )?;
            let nics = guest::LINK_KINDS
                .iter()
                .zip(ports.chunks(2))
                .map(|(&kind, pair)| qemu::Nic {
                    id: format!("{kind:?}").to_lowercase(),
                    mac: host.mac(kind),
                    end: qemu::LinkEnd {
                        local: pair[host.index()],
                        remote: pair[host.peer().index()],
                    },
                })
                .collect();
            boots.push(self.qemu_boot(
                plan.kernel,
                initrd,
                mode,
                TWO_HOST_MEMORY,
                TWO_HOST_CPUS,
                nics,
            ));
        }
        let logs = TWO_HOST_CONSOLE_LOGS.map(|l| work_path.join(l));
        match mode {
            Mode::Run => {
                let outcomes = qemu::run_two(&boots[0], &boots[1], [&logs[0], &logs[1]])?;
                for l in TWO_HOST_CONSOLE_LOGS {
                    work.publish(l, &self.cache.join(l))?;
                }
                Ok(Some(outcomes))
            }
            Mode::Shell => {
                say(format!(
                    "shell --two: host a ({}) is this terminal; host b ({}) runs in the background, \
                     its console in {} (--keep keeps it); in host a, `telnet {}` opens a shell on host b",
                    Host::A.addr(),
                    Host::B.addr(),
                    logs[1].display(),
                    Host::B.addr()
                ));
                qemu::interactive_two(&boots[0], &boots[1], &logs[1])?;
                Ok(None)
            }
        }
    }

    /// Boots the two-host plan and reports: its table, then
    /// `vm two-host: N passed, M failed`.
    fn run_two_host_plan(&self, plan: GuestPlan) -> Result<Verdict> {
        let GuestPlan { runs, configs, .. } = plan;
        let boot_runs = |runs: &[GuestRun], configs: &[RunConfig]| {
            let boot = |configs: &[RunConfig]| -> Result<[qemu::Outcome; 2]> {
                Ok(self
                    .boot_two(
                        GuestPlan {
                            configs,
                            runs,
                            ..plan
                        },
                        Mode::Run,
                    )?
                    .expect("run mode has outcomes"))
            };
            let names: Vec<String> = runs.iter().map(|r| r.name.clone()).collect();
            boot_past_panics("both guests", configs, &names, boot)
        };
        let names: Vec<String> = runs.iter().map(|r| r.name.clone()).collect();
        let config_names: Vec<&str> = configs.iter().map(|c| c.name).collect();
        let (mut outcomes, mut results) = boot_runs(runs, configs)?;
        let mut retries: Vec<report::RunResult> = outcomes
            .iter()
            .flat_map(|o| report::parse_retries(&o.console))
            .collect();
        // A run that failed on both attempts may have failed for the
        // guest's state, not its own (a link or a device left wedged by an
        // earlier run): both guests boot once more for those runs, and
        // what they report there counts, the first boot's as their first
        // attempt. Only for runs that are retried (`cargo vm test`'s).
        let failed = report::two_host_unpassed(&config_names, &names, &results[0], &results[1]);
        if !failed.is_empty() && runs.iter().all(|r| r.retry_once) {
            let listed: Vec<String> = failed.iter().map(|(c, b)| format!("{c}/{b}")).collect();
            say(format!(
                "two-host: {} run(s) did not pass ({}); booting both guests once more for them",
                failed.len(),
                listed.join(" ")
            ));
            let is_failed =
                |r: &report::RunResult| failed.contains(&(r.config.clone(), r.bin.clone()));
            let again_configs: Vec<RunConfig> = configs
                .iter()
                .filter(|c| failed.iter().any(|(f, _)| f == c.name))
                .copied()
                .collect();
            let again_runs: Vec<GuestRun> = runs
                .iter()
                .filter(|r| failed.iter().any(|(_, b)| *b == r.name))
                .cloned()
                .collect();
            let (again, fresh) = boot_runs(&again_runs, &again_configs)?;
            retries.retain(|r| !is_failed(r));
            for (res, fresh) in results.iter_mut().zip(fresh) {
                retries.extend(res.iter().filter(|r| is_failed(r)).cloned());
                res.retain(|r| !is_failed(r));
                res.extend(fresh.into_iter().filter(|r| is_failed(r)));
            }
            outcomes = again;
        }
        let [a, b] = &outcomes;
        let (table, counts) =
            report::summarize_two_host(&config_names, &names, &results[0], &results[1], &retries);
        let hosts = Host::BOTH.iter().map(|h| format!("host {}: ", h.role()));
        let (ok, problems) = judge(
            hosts.zip(&outcomes),
            &counts,
            names.len() * configs.len(),
            "lack a result from one or both hosts (a VM stopped early?)",
        );
        println!();
        if !ok {
            for (host, (o, log)) in Host::BOTH
                .iter()
                .zip(outcomes.iter().zip(TWO_HOST_CONSOLE_LOGS))
            {
                println!(
                    "vm two-host: ---- host {}: last 40 console lines ({}) ----",
                    host.role(),
                    self.cache.join(log).display()
                );
                println!("{}", tail(&o.console, 40));
            }
            println!("vm two-host: ----");
            for p in &problems {
                println!("vm two-host: problem: {p}");
            }
        }
        println!(
            "vm two-host: results after {:.1} s (host a) and {:.1} s (host b) in the VMs; a run passes when both hosts pass:",
            a.elapsed.as_secs_f64(),
            b.elapsed.as_secs_f64()
        );
        print!("{table}");
        let failed = counts.failed + counts.missing;
        println!("vm two-host: {} passed, {failed} failed", counts.passed);
        Ok(Verdict::new(ok, counts, table.to_string()))
    }

    /// Boots a run plan and reports its table (the caller prints the
    /// counts).
    fn run_plan(&self, plan: GuestPlan) -> Result<Verdict> {
        let GuestPlan { runs, configs, .. } = plan;
        let boot = |configs: &[RunConfig]| -> Result<[qemu::Outcome; 1]> {
            Ok([self
                .boot_single(GuestPlan { configs, ..plan }, Mode::Run, None)?
                .expect("run mode has an outcome")])
        };
        let names: Vec<String> = runs.iter().map(|r| r.name.clone()).collect();
        let config_names: Vec<&str> = configs.iter().map(|c| c.name).collect();
        let ([outcome], [results]) = boot_past_panics("the guest", configs, &names, boot)?;
        let retries = report::parse_retries(&outcome.console);
        let (table, counts) = report::summarize(&config_names, &names, &results, &retries);
        let (ok, problems) = judge(
            [(String::new(), &outcome)],
            &counts,
            names.len() * configs.len(),
            "reported no result (the VM stopped early?)",
        );
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
            "results after {:.1} s in the VM{}",
            outcome.elapsed.as_secs_f64(),
            // The demo prints the table in its overview.
            if self.quiet { "" } else { ":" }
        ));
        if !self.quiet {
            print!("{table}");
        }
        Ok(Verdict::new(ok, counts, table))
    }
}

/// Boots `configs` through `boot` (one outcome per guest) and reads each
/// guest's results, booting once more where a guest kernel panicked: a TCG
/// oops (a stray `int3` in code the kernel patched at run time, an skb
/// allocation in rxe's receive work) ends the boot, not the tests, and on
/// two hosts the other side is stopped then (`qemu::run_two`), its runs
/// cut short for want of a peer. A panic before any test started boots
/// everything again; one during the runs boots again for the
/// configurations any guest did not finish, and the second boot's results
/// replace those. `guests` names who boots in the message.
fn boot_past_panics<const N: usize>(
    guests: &str,
    configs: &[RunConfig],
    names: &[String],
    boot: impl Fn(&[RunConfig]) -> Result<[qemu::Outcome; N]>,
) -> Result<([qemu::Outcome; N], [Vec<report::RunResult>; N])> {
    let mut outcomes = boot(configs)?;
    if outcomes
        .iter()
        .any(|o| report::panicked_before_any_run(&o.console))
    {
        say(format!("a guest kernel panicked before any test started (see the console above); booting {guests} once more"));
        outcomes = boot(configs)?;
    }
    let config_names: Vec<&str> = configs.iter().map(|c| c.name).collect();
    let mut results = outcomes.each_ref().map(|o| report::parse(&o.console));
    let mut unfinished: Vec<&str> = Vec::new();
    if outcomes.iter().any(|o| report::kernel_panicked(&o.console)) {
        for o in &outcomes {
            for c in report::unfinished(&o.console, &config_names, names) {
                if !unfinished.contains(&c) {
                    unfinished.push(c);
                }
            }
        }
    }
    if !unfinished.is_empty() {
        say(format!(
            "a guest kernel panicked during the runs (see the console above); \
             booting {guests} once more for the configurations it did not finish: {}",
            unfinished.join(" ")
        ));
        let again: Vec<RunConfig> = configs
            .iter()
            .filter(|c| unfinished.contains(&c.name))
            .copied()
            .collect();
        outcomes = boot(&again)?;
        for (results, o) in results.iter_mut().zip(&outcomes) {
            results.retain(|r| !unfinished.contains(&r.config.as_str()));
            results.extend(report::parse(&o.console));
        }
    }
    Ok((outcomes, results))
}

fn real_main(args: impl IntoIterator<Item = OsString>) -> Result<bool> {
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
    // Held to the end: the cache must not be set up anew while we boot from it.
    let (prepared, _cache_in_use) = setup::ensure(&cache, opts.force, &opts.kernels)?;
    let quiet = opts.command == "demo";
    let ctx = Ctx {
        workspace,
        cache,
        opts,
        tools: prepared.tools,
        quiet,
    };
    let kernels = prepared.kernels;
    let one_kernel = || -> Result<&Kernel> {
        match &kernels[..] {
            [k] => Ok(k),
            _ => Err(Error(format!(
                "`cargo vm {}` boots one kernel; name one with --kernel",
                ctx.opts.command
            ))),
        }
    };
    match ctx.opts.command.as_str() {
        "setup" => Ok(true),
        "test" => ctx.test(&kernels),
        "demo" => ctx.demo(&kernels),
        "bench" => bench::run(&ctx, one_kernel()?),
        "shell" => {
            let kernel = one_kernel()?;
            let bins = binaries::static_tests(&ctx.workspace)?;
            let (two_host, single): (Vec<Binary>, Vec<Binary>) =
                bins.into_iter().partition(|b| guest::is_two_host(&b.name));
            if ctx.opts.two {
                let runs = plain_runs(&two_host);
                let plan = GuestPlan {
                    kernel,
                    binaries: &two_host,
                    runs: &runs,
                    configs: guest::TEST_CONFIGS,
                    host_files: &[],
                };
                ctx.boot_two(plan, Mode::Shell)?;
            } else {
                // As `cargo vm test` has it: `/run-all` runs the C peers too.
                let mut single = single;
                let mut runs = plain_runs(&single);
                let (programs, files) = ctx.c_peers()?;
                single.extend(programs);
                runs.extend(GuestRun::c_peers());
                let plan = GuestPlan {
                    kernel,
                    binaries: &single,
                    runs: &runs,
                    configs: guest::TEST_CONFIGS,
                    host_files: &files,
                };
                ctx.boot_single(plan, Mode::Shell, None)?;
            }
            Ok(true)
        }
        _ => unreachable!("checked above"),
    }
}

/// The console log kept in the cache for the last boot of `kernel`.
fn series_log(kernel: &Kernel) -> String {
    format!("console-{}.log", kernel.series)
}

impl Ctx {
    /// `cargo vm test`: the host suite, then on each kernel the single
    /// guest's plan and the two-host plan, a summary line per kernel
    /// (`vm 6.12: N passed, M failed, K on a second attempt`) and the total.
    fn test(&self, kernels: &[Kernel]) -> Result<bool> {
        // UVERBS_VM_ONLY=a,b: only the binaries whose names contain `a`
        // or `b`, and no host suite (a quick loop while writing a device
        // test; CI never sets it).
        let only = std::env::var("UVERBS_VM_ONLY").ok();
        if only.is_none() {
            binaries::host_tests(&self.workspace, &self.cache)?;
        }
        let mut bins = binaries::static_tests(&self.workspace)?;
        if let Some(only) = &only {
            bins.retain(|b| only.split(',').any(|o| b.name.contains(o)));
            say(format!("test: UVERBS_VM_ONLY={only}: host suite skipped"));
        }
        let (mut two_host, mut single): (Vec<Binary>, Vec<Binary>) =
            bins.into_iter().partition(|b| guest::is_two_host(&b.name));
        let mut single_runs = test_runs(&single);
        // The C peers (rdma-core's programs, unpacked under the cache) and
        // the programs that meet them, in the single guest.
        let mut c_peer_runs = GuestRun::c_peers();
        keep_only(&mut c_peer_runs, &only);
        let mut single_files = Vec::new();
        if !c_peer_runs.is_empty() {
            let (programs, files) = self.c_peers()?;
            for program in programs {
                if !single.iter().any(|b| b.name == program.name) {
                    single.push(program);
                }
            }
            single_files = files;
            single_runs.extend(c_peer_runs);
        }
        // The examples the single guest runs (the async pingpong, the
        // short examples).
        let mut example_runs = GuestRun::examples();
        keep_only(&mut example_runs, &only);
        self.add_example_bins(&mut single, &example_runs)?;
        single_runs.extend(example_runs);
        // The two-host plan: the binaries, then the examples across
        // the guests (selected by their run names).
        let mut two_host_runs = test_runs(&two_host);
        let mut examples: Vec<GuestRun> = GuestRun::two_host_examples()
            .into_iter()
            .map(GuestRun::retried_once)
            .collect();
        keep_only(&mut examples, &only);
        self.add_example_bins(&mut two_host, &examples)?;
        two_host_runs.extend(examples);
        say(plan_line(&single_runs, "in one guest"));
        say(plan_line(&two_host_runs, "on two guests"));
        let mut per_kernel: Vec<(&Kernel, Vec<Verdict>)> = Vec::new();
        for kernel in kernels {
            say(format!(
                "test: ==== kernel {} ({}) ====",
                kernel.series, kernel.release
            ));
            let mut verdicts = Vec::new();
            if single_runs.is_empty() {
                say("test: no single-guest run selected; that guest is not booted");
            } else {
                let v = self.run_plan(GuestPlan {
                    kernel,
                    binaries: &single,
                    runs: &single_runs,
                    configs: guest::TEST_CONFIGS,
                    host_files: &single_files,
                })?;
                say(format!(
                    "single guest: {} passed, {} failed",
                    v.passed, v.failed
                ));
                verdicts.push(v);
            }
            if two_host_runs.is_empty() {
                println!(
                    "vm two-host: 0 passed, 0 failed (no two_host_* run selected; not booted)"
                );
            } else {
                verdicts.push(self.run_two_host_plan(GuestPlan {
                    kernel,
                    binaries: &two_host,
                    runs: &two_host_runs,
                    configs: guest::TEST_CONFIGS,
                    host_files: &[],
                })?);
            }
            per_kernel.push((kernel, verdicts));
        }
        Ok(final_lines(&per_kernel))
    }

    /// `cargo vm demo`: the demo's runs on each kernel, the consoles only
    /// in their logs; then an overview per kernel (what ran, where, the
    /// table, the log) and the total.
    fn demo(&self, kernels: &[Kernel]) -> Result<bool> {
        let runs = GuestRun::demo();
        let mut bins: Vec<Binary> = Vec::new();
        self.add_example_bins(&mut bins, &runs)?;
        let mut per_kernel = Vec::new();
        for kernel in kernels {
            say(format!(
                "demo: booting {} ({}); the console goes to {} only",
                kernel.series,
                kernel.release,
                self.cache.join(series_log(kernel)).display()
            ));
            let v = self.run_plan(GuestPlan {
                kernel,
                binaries: &bins,
                runs: &runs,
                configs: guest::DEMO_CONFIGS,
                host_files: &[],
            })?;
            per_kernel.push((kernel, vec![v]));
        }
        println!();
        say("demo: overview");
        for (kernel, verdicts) in &per_kernel {
            let v = &verdicts[0];
            say(format!(
                "demo on {} ({}), rxe0 and siw0, transports {}: {}",
                kernel.series,
                kernel.release,
                guest::DEMO_CONFIGS
                    .iter()
                    .map(|c| c.name)
                    .collect::<Vec<_>>()
                    .join(", "),
                if v.ok { "all passed" } else { "FAILED" }
            ));
            print!("{}", v.table);
            say(format!(
                "demo: the full console (every run's output): {}",
                self.cache.join(series_log(kernel)).display()
            ));
        }
        Ok(final_lines(&per_kernel))
    }
}

/// Each binary once, without arguments, under its own name.
fn plain_runs(binaries: &[Binary]) -> Vec<GuestRun> {
    binaries.iter().map(|b| GuestRun::plain(&b.name)).collect()
}

/// `cargo vm test`'s runs of `binaries`: each retried once after a
/// failure (in the two-host run, by both hosts when either failed).
fn test_runs(binaries: &[Binary]) -> Vec<GuestRun> {
    binaries
        .iter()
        .map(|b| GuestRun::plain(&b.name).retried_once())
        .collect()
}

fn main() -> ExitCode {
    match real_main(std::env::args_os().skip(1)) {
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

    fn parse(s: &str) -> Result<Options> {
        parse_args(s.split_whitespace().map(OsString::from))
    }

    #[test]
    fn options() {
        let o = parse("test --timeout 60 --memory 1G --keep").unwrap();
        assert_eq!(o.command, "test");
        assert_eq!(o.timeout, Some(Duration::from_secs(60)));
        assert_eq!(o.memory.as_deref(), Some("1G"));
        assert!(o.keep);
        assert!(!o.two);
        assert!(parse("shell --two").unwrap().two);
        assert!(parse("test --timeout x").is_err());
        assert!(parse("test --bogus").is_err());
        assert!(parse("test --memory").is_err());
    }

    #[test]
    fn commands() {
        for command in ["setup", "test", "demo", "shell", "bench"] {
            let o = parse(command).unwrap();
            assert_eq!(o.command, command);
            assert_eq!(
                (o.timeout, o.keep, o.force, o.two),
                (None, false, false, false)
            );
            assert_eq!(o.kernels, [setup::SERIES[0]]);
        }
        // Options before the command, and --flag=value.
        let o = parse("--force --timeout=5 setup").unwrap();
        assert_eq!((o.command.as_str(), o.force), ("setup", true));
        assert_eq!(o.timeout, Some(Duration::from_secs(5)));
        assert_eq!(parse("demo --kernel all").unwrap().kernels, setup::SERIES);
        assert!(parse("demo --kernel 2.6").is_err());
        for help in ["help", "-h", "--help", "test --help", "test help"] {
            assert_eq!(parse(help).unwrap().command, "help", "{help}");
        }
        assert_eq!(parse("").unwrap().command, "");
        // One command only.
        assert!(parse("test demo").is_err());
    }
}
