//! Reading the guest's result markers back from the console log and
//! summarising them as a binary × configuration table.

use crate::markers::{self, RESULT, SETUP_FAILED};
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
}

/// Finds every result marker in the console output. A marker may follow
/// other text on its line (kernel messages can interleave).
pub fn parse(console: &str) -> Vec<RunResult> {
    console
        .lines()
        .filter_map(|line| {
            let rest = markers::find(line, RESULT)?;
            let mut config = None;
            let mut bin = None;
            let mut rc = None;
            for word in rest.split_whitespace() {
                match word.split_once('=') {
                    Some(("config", v)) => config = Some(v.to_string()),
                    Some(("bin", v)) => bin = Some(v.to_string()),
                    Some(("rc", v)) => rc = Some(v.parse().unwrap_or(-1)),
                    _ => {}
                }
            }
            Some(RunResult {
                config: config?,
                bin: bin?,
                rc: rc?,
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
    !started && console.contains("Kernel panic - not syncing")
}

/// Counts of a finished plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Counts {
    /// Runs that exited 0.
    pub passed: usize,
    /// Runs that exited non-zero.
    pub failed: usize,
    /// Planned runs with no marker (the VM died or timed out first).
    pub missing: usize,
}

impl Counts {
    /// Every planned run reported and passed.
    pub fn all_passed(&self) -> bool {
        self.failed == 0 && self.missing == 0
    }
}

/// Renders the binary × configuration table for the planned runs and counts
/// the outcome. Missing runs count as failures in the final line.
pub fn summarize(configs: &[&str], bins: &[String], results: &[RunResult]) -> (String, Counts) {
    let mut seen: BTreeMap<(&str, &str), i32> = BTreeMap::new();
    for r in results {
        seen.insert((r.config.as_str(), r.bin.as_str()), r.rc);
    }
    let width = bins.iter().map(|b| b.len()).chain([6]).max().unwrap_or(6);
    let mut out = format!("{:width$}", "binary");
    for c in configs {
        out.push_str(&format!("  {c:>12}"));
    }
    out.push('\n');
    let mut counts = Counts {
        passed: 0,
        failed: 0,
        missing: 0,
    };
    for b in bins {
        out.push_str(&format!("{b:width$}"));
        for c in configs {
            let cell = match seen.get(&(*c, b.as_str())) {
                Some(0) => {
                    counts.passed += 1;
                    "pass".to_string()
                }
                Some(rc) => {
                    counts.failed += 1;
                    format!("FAIL rc={rc}")
                }
                None => {
                    counts.missing += 1;
                    "NOT RUN".to_string()
                }
            };
            out.push_str(&format!("  {cell:>12}"));
        }
        out.push('\n');
    }
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

#[cfg(test)]
mod tests {
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
                rc: 101
            }
        );
        assert_eq!(r[2].rc, -1);
    }

    #[test]
    fn counts_missing_and_failed() {
        let (table, c) = summarize(&["ioctl", "write"], &["a".into(), "b".into()], &parse(LOG));
        assert_eq!(
            c,
            Counts {
                passed: 1,
                failed: 2,
                missing: 1
            }
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

    #[test]
    fn finds_setup_failure() {
        assert_eq!(
            setup_failure("x\n@@UVERBS-SETUP-FAILED insmod siw\n"),
            Some("insmod siw".into())
        );
        assert_eq!(setup_failure("ok"), None);
    }
}
