//! Reading the guest's result markers back from the console log and
//! summarising them as a binary × configuration table.

use crate::markers::{self, RESULT, RETRY, SETUP_FAILED};
use std::collections::BTreeMap;

/// One finished run: a binary under a configuration and its exit code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunResult {
    /// Configuration name.
    pub config: String,
    /// Binary name.
    pub bin: String,
    /// Exit code (non-numeric codes read as -1).
    pub rc: i32,
    /// The two-host run's role (`a`, `b`); `None` in a single guest.
    pub role: Option<String>,
}

/// Finds every result marker in the console output. A marker may follow
/// other text on its line (kernel messages can interleave).
pub fn parse(console: &str) -> Vec<RunResult> {
    parse_marker(console, RESULT)
}

/// Finds every retry marker: the first attempts that failed and ran once
/// more (their [`RESULT`] markers are the second attempts').
pub fn parse_retries(console: &str) -> Vec<RunResult> {
    parse_marker(console, RETRY)
}

fn parse_marker(console: &str, marker: &str) -> Vec<RunResult> {
    console
        .lines()
        .filter_map(|line| {
            let rest = markers::find(line, marker)?;
            let mut config = None;
            let mut bin = None;
            let mut rc = None;
            let mut role = None;
            for word in rest.split_whitespace() {
                match word.split_once('=') {
                    Some(("config", v)) => config = Some(v.to_string()),
                    Some(("bin", v)) => bin = Some(v.to_string()),
                    Some(("rc", v)) => rc = Some(v.parse().unwrap_or(-1)),
                    Some(("role", v)) => role = Some(v.to_string()),
                    _ => {}
                }
            }
            Some(RunResult {
                config: config?,
                bin: bin?,
                rc: rc?,
                role,
            })
        })
        .collect()
}

/// The guest's set-up failure message, if it reported one.
pub fn setup_failure(console: &str) -> Option<String> {
    console
        .lines()
        .find_map(|l| Some(markers::find(l, SETUP_FAILED)?.trim().to_string()))
}

/// Whether the guest kernel panicked before any binary started: a boot
/// that never reached the tests (under TCG, boot-time code patching
/// has been seen to hit a stray `int3` oops, about once in tens of boots
/// on a loaded host), which is worth one more boot rather than a failure.
pub fn panicked_before_any_run(console: &str) -> bool {
    let started = console
        .lines()
        .any(|l| markers::find(l, markers::RUN).is_some());
    !started && kernel_panicked(console)
}

/// Whether the guest kernel panicked (see [`markers::KERNEL_PANIC`]).
pub fn kernel_panicked(console: &str) -> bool {
    console.contains(markers::KERNEL_PANIC)
}

/// The configurations (of `configs`) with a binary of `bins` that reported
/// no result on `console`: after a guest kernel panicked (a TCG oops, a
/// stray `int3` in code the kernel patched at run time, e.g. when the
/// clocksource watchdog flips a static key, ends the boot, not the tests),
/// what that guest, and a two-host peer stopped for it, did not finish.
pub fn unfinished<'a>(console: &str, configs: &[&'a str], bins: &[String]) -> Vec<&'a str> {
    let results = parse(console);
    configs
        .iter()
        .copied()
        .filter(|c| {
            bins.iter()
                .any(|b| !results.iter().any(|r| r.config == *c && r.bin == *b))
        })
        .collect()
}

/// Counts of a finished plan.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Counts {
    /// Runs that exited 0.
    pub passed: usize,
    /// Runs that exited non-zero.
    pub failed: usize,
    /// Planned runs with no marker (the VM died or timed out first).
    pub missing: usize,
    /// The failed and missing runs, `config/bin` and how.
    pub failures: Vec<String>,
    /// The passed runs that failed their first attempt, `config/bin` and
    /// the first exit code.
    pub second_attempt: Vec<String>,
}

impl Counts {
    /// Every planned run reported and passed.
    pub fn all_passed(&self) -> bool {
        self.failed == 0 && self.missing == 0
    }
}

/// Renders the binary × configuration table for the planned runs and counts
/// the outcome. Missing runs count as failures in the final line. A run
/// with a retry marker (`retries`) that passed shows `pass (2nd)`.
pub fn summarize(
    configs: &[&str],
    bins: &[String],
    results: &[RunResult],
    retries: &[RunResult],
) -> (String, Counts) {
    let mut seen: BTreeMap<(&str, &str), i32> = BTreeMap::new();
    for r in results {
        seen.insert((r.config.as_str(), r.bin.as_str()), r.rc);
    }
    let first: BTreeMap<(&str, &str), i32> = retries
        .iter()
        .map(|r| ((r.config.as_str(), r.bin.as_str()), r.rc))
        .collect();
    let (mut out, counts) = table(configs, bins, 12, |c, b, counts| {
        let key = (c, b);
        match (seen.get(&key), first.get(&key)) {
            (Some(0), None) => {
                counts.passed += 1;
                "pass".to_string()
            }
            (Some(0), Some(rc)) => {
                counts.passed += 1;
                counts
                    .second_attempt
                    .push(format!("{c}/{b} (first rc={rc})"));
                "pass (2nd)".to_string()
            }
            (Some(rc), _) => {
                counts.failed += 1;
                counts.failures.push(format!("{c}/{b} (rc={rc})"));
                format!("FAIL rc={rc}")
            }
            (None, _) => {
                counts.missing += 1;
                counts.failures.push(format!("{c}/{b} (not run)"));
                "NOT RUN".to_string()
            }
        }
    });
    let planned: Vec<_> = results
        .iter()
        .filter(|r| !configs.contains(&r.config.as_str()) || !bins.contains(&r.bin))
        .map(|r| format!("{}/{}", r.config, r.bin))
        .collect();
    if !planned.is_empty() {
        out.push_str(&format!(
            "(ignored unexpected markers: {})\n",
            planned.join(", ")
        ));
    }
    (out, counts)
}

/// The two-host run's table and counts: one cell per binary and
/// configuration, which passes only if both roles reported rc=0 (`a`'s
/// markers read from A's console, `b`'s from B's). A cell counts as failed
/// if either side failed, as missing if neither failed but one or both
/// never reported. Both hosts retry a run together when either failed
/// its first attempt; a cell that then passed on both, with a retry
/// marker of either (`retries`: both consoles'), shows `pass (2nd)`.
pub fn summarize_two_host(
    configs: &[&str],
    bins: &[String],
    a: &[RunResult],
    b: &[RunResult],
    retries: &[RunResult],
) -> (String, Counts) {
    let (a, b) = (rcs_of_role(a, "a"), rcs_of_role(b, "b"));
    let (first_a, first_b) = (rcs_of_role(retries, "a"), rcs_of_role(retries, "b"));
    let show = |rc: Option<&i32>| rc.map_or("-".to_string(), i32::to_string);
    table(configs, bins, 18, |c, bin, counts| {
        let key = (c.to_string(), bin.to_string());
        let (ra, rb) = (a.get(&key), b.get(&key));
        let (fa, fb) = (first_a.get(&key), first_b.get(&key));
        match (ra, rb) {
            (Some(0), Some(0)) if fa.is_some() || fb.is_some() => {
                counts.passed += 1;
                counts.second_attempt.push(format!(
                    "two-host {c}/{bin} (first a={} b={})",
                    show(fa),
                    show(fb)
                ));
                "pass (2nd)".to_string()
            }
            (Some(0), Some(0)) => {
                counts.passed += 1;
                "pass".to_string()
            }
            _ if ra.is_some_and(|&r| r != 0) || rb.is_some_and(|&r| r != 0) => {
                counts.failed += 1;
                let cell = format!("FAIL a={} b={}", show(ra), show(rb));
                counts.failures.push(format!("two-host {c}/{bin} ({cell})"));
                cell
            }
            _ => {
                counts.missing += 1;
                let cell = format!("NOT RUN a={} b={}", show(ra), show(rb));
                counts.failures.push(format!("two-host {c}/{bin} ({cell})"));
                cell
            }
        }
    })
}

/// The planned two-host runs (configuration, binary) that did not pass on
/// both hosts: failed on either, or reported by neither or one.
pub fn two_host_unpassed(
    configs: &[&str],
    bins: &[String],
    a: &[RunResult],
    b: &[RunResult],
) -> Vec<(String, String)> {
    let (a, b) = (rcs_of_role(a, "a"), rcs_of_role(b, "b"));
    configs
        .iter()
        .flat_map(|c| bins.iter().map(move |b| (c.to_string(), b.clone())))
        .filter(|key| !(a.get(key) == Some(&0) && b.get(key) == Some(&0)))
        .collect()
}

/// The exit status of each (configuration, binary) that `role` reported
/// in `results`, the last marker of each winning.
fn rcs_of_role(results: &[RunResult], role: &str) -> BTreeMap<(String, String), i32> {
    results
        .iter()
        .filter(|r| r.role.as_deref() == Some(role))
        .map(|r| ((r.config.clone(), r.bin.clone()), r.rc))
        .collect()
}

/// A binary × configuration table, each column `col` wide: `cell` gives
/// the text of one (configuration, binary) cell and counts its outcome.
fn table(
    configs: &[&str],
    bins: &[String],
    col: usize,
    mut cell: impl FnMut(&str, &str, &mut Counts) -> String,
) -> (String, Counts) {
    let width = bins.iter().map(|b| b.len()).chain([6]).max().unwrap_or(6);
    let mut out = format!("{:width$}", "binary");
    for c in configs {
        out.push_str(&format!("  {c:>col$}"));
    }
    out.push('\n');
    let mut counts = Counts::default();
    for b in bins {
        out.push_str(&format!("{b:width$}"));
        for c in configs {
            let text = cell(c, b, &mut counts);
            out.push_str(&format!("  {text:>col$}"));
        }
        out.push('\n');
    }
    (out, counts)
}

#[cfg(test)]
mod tests {
    #[test]
    fn configurations_a_panic_cut_short_are_named() {
        let bins = vec!["a".to_string(), "b".to_string()];
        let configs = ["ioctl", "write", "fork-forced"];
        let mut console = String::new();
        for (c, b) in [("ioctl", "a"), ("ioctl", "b"), ("write", "a")] {
            console.push_str(&format!("@@UVERBS-RESULT config={c} bin={b} rc=0\n"));
        }
        assert_eq!(
            super::unfinished(&console, &configs, &bins),
            ["write", "fork-forced"]
        );
        assert!(!super::kernel_panicked(&console));
        console.push_str("[ 94.3] Kernel panic - not syncing: Fatal exception in interrupt\n");
        assert!(super::kernel_panicked(&console));
        for (c, b) in [("write", "b"), ("fork-forced", "a"), ("fork-forced", "b")] {
            console.push_str(&format!("@@UVERBS-RESULT config={c} bin={b} rc=1\n"));
        }
        assert!(super::unfinished(&console, &configs, &bins).is_empty());
    }

    #[test]
    fn a_panic_before_any_run_is_told_apart() {
        let boot_panic = "[ 2.27] Oops: int3: 0000 [#2] PREEMPT SMP NOPTI\n\
                          [ 2.27] Kernel panic - not syncing: Fatal exception in interrupt\n";
        assert!(super::panicked_before_any_run(boot_panic));
        assert!(!super::panicked_before_any_run(
            "[ 3.8] reboot: Power down\n"
        ));
        let during_a_run = format!("@@UVERBS-RUN config=ioctl bin=device_mr\n{boot_panic}");
        assert!(!super::panicked_before_any_run(&during_a_run));
    }

    use super::*;

    const LOG: &str = "boot\n@@UVERBS-RESULT config=ioctl bin=a rc=0\n[  1.0] x @@UVERBS-RESULT config=write bin=a rc=101\n@@UVERBS-RESULT config=ioctl bin=b rc=x\n@@UVERBS-RESULT config=ioctl\n";

    #[test]
    fn parses_markers() {
        let r = parse(LOG);
        assert_eq!(r.len(), 3);
        assert_eq!(
            r[1],
            RunResult {
                config: "write".into(),
                bin: "a".into(),
                rc: 101,
                role: None,
            }
        );
        assert_eq!(r[2].rc, -1);
    }

    #[test]
    fn counts_missing_and_failed() {
        let (table, c) = summarize(
            &["ioctl", "write"],
            &["a".into(), "b".into()],
            &parse(LOG),
            &[],
        );
        assert_eq!((c.passed, c.failed, c.missing), (1, 2, 1));
        assert_eq!(
            c.failures,
            ["write/a (rc=101)", "ioctl/b (rc=-1)", "write/b (not run)"]
        );
        assert!(!c.all_passed());
        assert!(table.contains("FAIL rc=101"));
        assert!(table.contains("NOT RUN"));
    }

    /// The host reads back exactly what the guest's `/run-all` prints.
    #[test]
    fn reads_what_the_guest_prints() {
        let configs = crate::guest::TEST_CONFIGS;
        let script = crate::guest::run_all_script(configs, &["a".into(), "b".into()]);
        // The console, as the guest's shell echoes it, every binary exiting 3.
        let console: String = script
            .lines()
            .filter_map(|l| l.strip_prefix("echo \"")?.strip_suffix('"'))
            .map(|l| l.replace("$rc", "3") + "\n")
            .collect();
        let results = parse(&console);
        assert_eq!(results.len(), 2 * configs.len());
        for (r, (c, b)) in results
            .iter()
            .zip(configs.iter().flat_map(|c| [(c.name, "a"), (c.name, "b")]))
        {
            assert_eq!((r.config.as_str(), r.bin.as_str(), r.rc), (c, b, 3));
        }
        assert!(console.ends_with(&format!("{}\n", markers::DONE)));
    }

    /// A retried run: the guest prints the first attempt's retry marker,
    /// then the second attempt's result.
    #[test]
    fn a_run_that_passed_on_its_second_attempt_is_named() {
        use crate::guest::GuestRun;
        let configs = crate::guest::TEST_CONFIGS;
        let runs = [GuestRun::plain("a").retried_once(), GuestRun::plain("b")];
        let script = crate::guest::run_all_script(configs, &runs);
        let console: String = script
            .lines()
            .filter_map(|l| l.strip_prefix("echo \"")?.strip_suffix('"'))
            .map(|l| {
                // `a` fails its first attempt (rc 7 in the retry marker)
                // and passes the second; `b` (no retry) passes.
                let rc = if l.starts_with(markers::RETRY) {
                    "7"
                } else {
                    "0"
                };
                l.replace("$rc", rc) + "\n"
            })
            .collect();
        let names: Vec<&str> = configs.iter().map(|c| c.name).collect();
        let bins = ["a".to_string(), "b".to_string()];
        let (table, c) = summarize(&names, &bins, &parse(&console), &parse_retries(&console));
        assert_eq!((c.passed, c.failed), (2 * names.len(), 0));
        assert_eq!(c.second_attempt.len(), names.len(), "{table}");
        assert_eq!(c.second_attempt[0], format!("{}/a (first rc=7)", names[0]));
        assert!(table.contains("pass (2nd)"), "{table}");
        // Only a run that asks for it is retried.
        assert_eq!(script.matches(markers::RETRY).count(), names.len());
    }

    #[test]
    fn a_two_host_run_passes_only_if_both_roles_pass() {
        use crate::guest::{two_host_run_all_script, GuestRun, Host, TEST_CONFIGS};
        let runs = [GuestRun::plain("two_host_x"), GuestRun::plain("two_host_y")];
        // Each guest's console as its shell echoes its /run-all, with the
        // exit codes given per (config, bin).
        let console = |host: Host, rc: &dyn Fn(&str, &str) -> i32| -> String {
            let script = two_host_run_all_script(TEST_CONFIGS, &runs, host);
            script
                .lines()
                .filter_map(|l| l.strip_prefix("echo \"")?.strip_suffix('"'))
                .map(|l| {
                    let word = |k: &str| {
                        l.split_whitespace()
                            .find_map(|w| w.strip_prefix(k))
                            .unwrap_or("")
                            .to_string()
                    };
                    let code = rc(&word("config="), &word("bin="));
                    l.replace("$rc", &code.to_string()) + "\n"
                })
                .collect()
        };
        // A fails two_host_y under write; B fails nothing.
        let a = parse(&console(Host::A, &|c, b| {
            i32::from(c == "write" && b == "two_host_y") * 101
        }));
        let b = parse(&console(Host::B, &|_, _| 0));
        assert!(a.iter().all(|r| r.role.as_deref() == Some("a")));
        assert!(b.iter().all(|r| r.role.as_deref() == Some("b")));
        let configs: Vec<&str> = TEST_CONFIGS.iter().map(|c| c.name).collect();
        let bins: Vec<String> = runs.iter().map(|r| r.name.clone()).collect();
        let (table, c) = summarize_two_host(&configs, &bins, &a, &b, &[]);
        assert_eq!(
            (c.passed, c.failed, c.missing),
            (2 * configs.len() - 1, 1, 0)
        );
        assert_eq!(c.failures, ["two-host write/two_host_y (FAIL a=101 b=0)"]);
        assert!(table.contains("FAIL a=101 b=0"), "{table}");
        // B's console gone after its first run: the rest is NOT RUN, and a
        // result of the wrong role (A's markers in B's place) counts for nothing.
        let (table, c) = summarize_two_host(&configs, &bins, &b[..0], &b[..1], &[]);
        assert_eq!(c.passed + c.failed, 0);
        assert_eq!(c.missing, 2 * configs.len());
        assert!(table.contains("NOT RUN a=- b=-"), "{table}");
        let (_, c) = summarize_two_host(&configs, &bins, &a, &a, &[]);
        assert_eq!((c.passed, c.failed), (0, 1));
    }

    #[test]
    fn the_two_host_runs_to_boot_again_for_are_those_not_passed_on_both() {
        let r = |config: &str, bin: &str, role: &str, rc: i32| RunResult {
            config: config.into(),
            bin: bin.into(),
            rc,
            role: Some(role.into()),
        };
        let configs = ["ioctl", "write"];
        let bins = ["x".to_string(), "y".to_string()];
        // x passes everywhere; y fails on b under ioctl, and under write
        // b never reported.
        let a = [
            r("ioctl", "x", "a", 0),
            r("ioctl", "y", "a", 0),
            r("write", "x", "a", 0),
            r("write", "y", "a", 0),
        ];
        let b = [
            r("ioctl", "x", "b", 0),
            r("ioctl", "y", "b", 101),
            r("write", "x", "b", 0),
        ];
        let pair = |c: &str, b: &str| (c.to_string(), b.to_string());
        assert_eq!(
            two_host_unpassed(&configs, &bins, &a, &b),
            [pair("ioctl", "y"), pair("write", "y")]
        );
        // A's markers in B's place count for nothing.
        assert_eq!(two_host_unpassed(&configs, &bins, &a, &a).len(), 4);
        assert!(two_host_unpassed(
            &configs,
            &bins,
            &a,
            &[
                b[0].clone(),
                r("ioctl", "y", "b", 0),
                b[2].clone(),
                r("write", "y", "b", 0)
            ]
        )
        .is_empty());
    }

    #[test]
    fn finds_setup_failure() {
        assert_eq!(
            setup_failure("x\n@@UVERBS-SETUP-FAILED insmod siw\n"),
            Some("insmod siw".into())
        );
        assert_eq!(setup_failure("ok"), None);
    }
}
