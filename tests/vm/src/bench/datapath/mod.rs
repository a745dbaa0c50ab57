//! The data-path half of `cargo vm bench`: the `datapath` results of
//! benches/datapath (our `perf` tool and perftest 4.5, interleaved in
//! rounds, the whole set in passes) read into cells, and per cell the
//! per-round ratios ours ÷ perftest, their median and spread per pass, and
//! whether the passes agree.
//!
//! A ratio is reported as *measured* only where every pass's median ratio
//! is within [`AGREE`] of the others (the issue's 10 %); otherwise it is
//! *noisy*, with every pass's value.

pub mod report;

use crate::bench::model::median;
use crate::bench::results::{info_of, Info};
use serde::Deserialize;
use std::collections::BTreeMap;

/// Passes whose median ratios differ by at most this fraction agree.
pub const AGREE: f64 = 0.10;

/// A cell: what both tools were given.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Deserialize)]
pub struct Key {
    pub device: String,
    /// `loopback` or `cm`.
    pub conn: String,
    /// `write_lat`, `send_lat`, `read_lat`, `write_bw`, `send_bw`.
    pub test: String,
    pub size: u64,
    pub qd: u64,
}

impl Key {
    pub fn is_latency(&self) -> bool {
        self.test.ends_with("_lat")
    }
}

/// What one run measured.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Value {
    /// Nanoseconds.
    Latency { median: f64, p10: f64, p90: f64 },
    /// MiB/s.
    Bandwidth(f64),
}

impl Value {
    /// The median, p10 and p90 of a latency; a bandwidth and two NaNs.
    fn parts(self) -> [f64; 3] {
        match self {
            Value::Latency { median, p10, p90 } => [median, p10, p90],
            Value::Bandwidth(b) => [b, f64::NAN, f64::NAN],
        }
    }

    /// The number the ratio compares: the median latency or the bandwidth.
    pub fn headline(self) -> f64 {
        match self {
            Value::Latency { median, .. } => median,
            Value::Bandwidth(b) => b,
        }
    }
}

/// One data-path result (`"kind":"datapath"`): a run of ours or perftest.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Line {
    pub pass: u32,
    pub round: u32,
    /// `ours` or `perftest`.
    #[serde(rename = "impl")]
    pub imp: String,
    #[serde(flatten)]
    pub key: Key,
    pub inline: u64,
    pub iters: u64,
    /// The runner ran it twice: the first attempt failed.
    #[serde(default)]
    pub retried: bool,
    /// A latency test's order statistics (ns), a bandwidth test's MiB/s.
    pub median_ns: Option<f64>,
    pub p10_ns: Option<f64>,
    pub p90_ns: Option<f64>,
    pub mib_per_s: Option<f64>,
    /// Set when the run failed: the runner's message.
    pub error: Option<String>,
}

impl Line {
    /// What the run measured, or why there is no number (a failed run, or
    /// a line without its test's numbers).
    pub fn value(&self) -> Result<Value, String> {
        let need = |v: Option<f64>, name: &str| v.ok_or(format!("the line has no {name}"));
        if let Some(e) = &self.error {
            Err(e.clone())
        } else if self.key.is_latency() {
            Ok(Value::Latency {
                median: need(self.median_ns, "median_ns")?,
                p10: need(self.p10_ns, "p10_ns")?,
                p90: need(self.p90_ns, "p90_ns")?,
            })
        } else {
            Ok(Value::Bandwidth(need(self.mib_per_s, "mib_per_s")?))
        }
    }
}

/// Per pass of a cell: the per-round ratios and both tools' values.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Pass {
    /// ours ÷ perftest of each round where both measured.
    pub ratios: Vec<f64>,
    pub ours: Vec<Value>,
    pub perftest: Vec<Value>,
}

impl Pass {
    /// The median per-round ratio.
    pub fn ratio(&self) -> Option<f64> {
        median(&self.ratios)
    }
}

/// A cell's passes, by pass number, and what failed.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Cell {
    pub passes: BTreeMap<u32, Pass>,
    /// `impl pass/round: error`.
    pub errors: Vec<String>,
    /// Runs that failed once and were run again (`impl pass/round`).
    pub retried: Vec<String>,
    pub inline: u64,
    pub iters: u64,
}

/// How a cell's ratio is reported.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// Every pass agrees within [`AGREE`]: their mean.
    Measured(f64),
    /// The passes disagree: each pass's median ratio.
    Noisy(Vec<f64>),
    /// Some pass has no ratio (a run failed).
    Missing,
}

impl Cell {
    pub fn verdict(&self) -> Verdict {
        let r: Option<Vec<f64>> = self.passes.values().map(Pass::ratio).collect();
        let Some(r) = r.filter(|r| !r.is_empty()) else {
            return Verdict::Missing;
        };
        let (lo, hi) = r
            .iter()
            .fold((f64::MAX, f64::MIN), |(lo, hi), &x| (lo.min(x), hi.max(x)));
        if hi <= lo * (1.0 + AGREE) {
            Verdict::Measured(r.iter().sum::<f64>() / r.len() as f64)
        } else {
            Verdict::Noisy(r)
        }
    }

    /// Median over every run (all passes and rounds) of `imp`'s headline
    /// number, and of its p10 and p90 for latency.
    pub fn summary(&self, ours: bool) -> Option<Value> {
        let vals: Vec<Value> = self
            .passes
            .values()
            .flat_map(|p| if ours { &p.ours } else { &p.perftest })
            .copied()
            .collect();
        let pick = |i: usize| median(&vals.iter().map(|v| v.parts()[i]).collect::<Vec<_>>());
        Some(match vals.first()? {
            Value::Latency { .. } => Value::Latency {
                median: pick(0)?,
                p10: pick(1)?,
                p90: pick(2)?,
            },
            Value::Bandwidth(_) => Value::Bandwidth(pick(0)?),
        })
    }
}

/// The data-path part of a console.
#[derive(Debug, Default)]
pub struct DataPath {
    pub cells: BTreeMap<Key, Cell>,
    /// The `datapath_info` lines, in order.
    pub info: Vec<Info>,
}

impl DataPath {
    pub fn is_empty(&self) -> bool {
        self.cells.is_empty()
    }

    /// The `key=` of the first info line that has it.
    pub fn info(&self, key: &str) -> Option<&str> {
        info_of(&self.info, key)
    }

    /// The targets (`device conn`) in first-seen order of the cells' keys.
    pub fn targets(&self) -> Vec<(String, String)> {
        let mut out = crate::bench::units::distinct(
            self.cells
                .keys()
                .map(|k| (k.device.clone(), k.conn.clone())),
        );
        // rxe before siw, loopback before cm.
        out.sort_by(|a, b| (&a.0, a.1 != "loopback").cmp(&(&b.0, b.1 != "loopback")));
        out
    }
}

/// The cells of the data-path `lines`; rounds pair ours with perftest
/// by (pass, round).
pub fn cells(lines: &[Line], info: &[Info]) -> DataPath {
    let mut dp = DataPath {
        info: info.to_vec(),
        ..DataPath::default()
    };
    // (key, pass, round) -> (ours, perftest)
    type Round = (Option<Value>, Option<Value>);
    let mut rounds: BTreeMap<(Key, u32, u32), Round> = BTreeMap::new();
    for line in lines {
        let cell = dp.cells.entry(line.key.clone()).or_default();
        cell.inline = line.inline;
        cell.iters = line.iters;
        if line.retried {
            cell.retried.push(format!(
                "{} pass {} round {}",
                line.imp, line.pass, line.round
            ));
        }
        let pass = cell.passes.entry(line.pass).or_default();
        let ours = line.imp == "ours";
        match line.value() {
            Ok(v) => {
                if ours {
                    pass.ours.push(v)
                } else {
                    pass.perftest.push(v)
                }
                let slot = rounds
                    .entry((line.key.clone(), line.pass, line.round))
                    .or_default();
                if ours {
                    slot.0 = Some(v)
                } else {
                    slot.1 = Some(v)
                }
            }
            Err(e) => cell.errors.push(format!(
                "{} pass {} round {}: {e}",
                line.imp, line.pass, line.round
            )),
        }
    }
    for ((key, pass, _), pair) in rounds {
        if let (Some(o), Some(p)) = pair {
            let ratio = o.headline() / p.headline();
            if ratio.is_finite() {
                let cell = dp.cells.get_mut(&key).expect("seen above");
                cell.passes.entry(pass).or_default().ratios.push(ratio);
            }
        }
    }
    dp
}

/// The data-path part of a console's results.
pub fn parse(results: &crate::bench::results::Results) -> DataPath {
    cells(&results.datapath, &results.datapath_info)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lat(pass: u32, round: u32, imp: &str, size: u64, median: u64) -> String {
        format!(
            r#"@@RESULT {{"kind":"datapath","pass":{pass},"round":{round},"impl":"{imp}","device":"rxe0","conn":"loopback","test":"write_lat","size":{size},"qd":1,"inline":220,"iters":300,"median_ns":{median},"p10_ns":{},"p90_ns":{},"n":300}}"#,
            median - 10,
            median + 10
        )
    }

    #[test]
    fn ratios_per_round_and_passes_that_agree_or_not() {
        let mut console = vec![
            r#"@@RESULT {"kind":"datapath_info","rounds":2,"passes":2,"cells":2}"#.to_string(),
        ];
        // Both tools' medians per round, perftest first in even rounds (as
        // the bench alternates them).
        for (pass, round, size, ours, perftest) in [
            (1, 1, 2, 90, 100),
            (1, 2, 2, 180, 200),
            (2, 1, 2, 95, 100),
            (2, 2, 2, 92, 100),
            // A cell whose passes disagree.
            (1, 1, 8, 100, 100),
            (2, 1, 8, 150, 100),
        ] {
            let mut both = [
                lat(pass, round, "ours", size, ours),
                lat(pass, round, "perftest", size, perftest),
            ];
            if round % 2 == 0 {
                both.reverse();
            }
            console.extend(both);
        }
        console.extend([
            r#"[ 3.1] kernel noise @@RESULT {"kind":"datapath","pass":1,"round":1,"impl":"ours","retried":true,"device":"siw0","conn":"cm","test":"write_bw","size":4096,"qd":64,"inline":0,"iters":32,"mib_per_s":20.5}"#.into(),
            r#"@@RESULT {"kind":"datapath","pass":1,"round":1,"impl":"perftest","device":"siw0","conn":"cm","test":"write_bw","size":4096,"qd":64,"inline":0,"iters":32,"error":"client: exit status: 1"}"#.into(),
            r#"@@RESULT {"kind":"datapath","pass":"x"}"#.into(),
        ]);
        let console = console.join("\n");
        let results = crate::bench::results::read(&console);
        assert_eq!(results.skipped.len(), 1);
        let dp = parse(&results);
        assert_eq!(dp.info("rounds"), Some("2"));
        let key = |size, test: &str, device: &str, conn: &str, qd| Key {
            device: device.into(),
            conn: conn.into(),
            test: test.into(),
            size,
            qd,
        };
        let small = &dp.cells[&key(2, "write_lat", "rxe0", "loopback", 1)];
        assert_eq!(small.passes[&1].ratios, vec![0.9, 0.9]);
        assert_eq!(small.verdict(), Verdict::Measured((0.9 + 0.935) / 2.0));
        match small.summary(true) {
            Some(Value::Latency { median, p10, .. }) => {
                assert_eq!(median, (92.0 + 95.0) / 2.0);
                assert_eq!(p10, (82.0 + 85.0) / 2.0);
            }
            other => panic!("{other:?}"),
        }
        let noisy = &dp.cells[&key(8, "write_lat", "rxe0", "loopback", 1)];
        assert_eq!(noisy.verdict(), Verdict::Noisy(vec![1.0, 1.5]));
        let bw = &dp.cells[&key(4096, "write_bw", "siw0", "cm", 64)];
        assert_eq!(bw.verdict(), Verdict::Missing);
        assert_eq!(
            bw.errors,
            vec!["perftest pass 1 round 1: client: exit status: 1"]
        );
        assert_eq!(bw.summary(true), Some(Value::Bandwidth(20.5)));
        assert_eq!(bw.retried, vec!["ours pass 1 round 1"]);
        assert!(small.retried.is_empty());
        assert_eq!(
            dp.targets(),
            vec![
                ("rxe0".to_string(), "loopback".to_string()),
                ("siw0".to_string(), "cm".to_string())
            ]
        );
    }
}
