//! A parsed bench run: its cells, each named by a [`CellKey`] and a region
//! size, and what the guest said about the run.

use super::results::{info_of, nan, Info, Results};
use super::wire::{ForkMode, Implementation, Operation, ReregPath, Status, Transport};
use serde::Deserialize;
use std::collections::BTreeMap;

/// The region sizes, in the order of the tables.
pub const SIZES: &[u64] = &[4 << 10, 64 << 10, 1 << 20, 16 << 20, 256 << 20];

/// The transports of ours and the floor, in the tables' order.
pub const TRANSPORTS: [Transport; 2] = [Transport::Ioctl, Transport::Write];

/// Which series a cell belongs to (a cell is a key and a region size).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CellKey {
    /// The RDMA device, e.g. `rxe0`.
    pub device: String,
    /// Who carried the operation out.
    pub imp: Implementation,
    /// How the commands reached the kernel.
    pub transport: Transport,
    /// Fork safety of the context.
    pub fork: ForkMode,
    /// What was measured.
    pub op: Operation,
}

impl CellKey {
    /// Ours over `transport`, fork safety off.
    pub fn ours(device: &str, transport: Transport, op: Operation) -> CellKey {
        CellKey::off(device, Implementation::Ours, transport, op)
    }

    /// The floor over `transport`, fork safety off.
    pub fn floor(device: &str, transport: Transport, op: Operation) -> CellKey {
        CellKey::off(device, Implementation::Floor, transport, op)
    }

    /// libibverbs (its own transport), fork safety off.
    pub fn libibverbs(device: &str, op: Operation) -> CellKey {
        CellKey::off(device, Implementation::Libibverbs, Transport::Auto, op)
    }

    fn off(device: &str, imp: Implementation, transport: Transport, op: Operation) -> CellKey {
        CellKey {
            device: device.to_string(),
            imp,
            transport,
            fork: ForkMode::Off,
            op,
        }
    }
}

/// One verbs result line (`"kind":"verbs"`) as benches/verbs prints it.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Line {
    /// Lines without pass or round (a single-pass run) are pass 1, round 1.
    #[serde(default = "one")]
    pub pass: u32,
    #[serde(default = "one")]
    pub round: u32,
    pub device: String,
    #[serde(rename = "impl")]
    pub imp: Implementation,
    pub transport: Transport,
    pub fork: ForkMode,
    pub op: Operation,
    pub size: u64,
    pub path: Option<ReregPath>,
    /// A line without one was measured.
    #[serde(default)]
    pub status: Option<Status>,
    #[serde(default = "nan")]
    pub median_ns: f64,
    #[serde(default = "nan")]
    pub p10_ns: f64,
    #[serde(default = "nan")]
    pub p90_ns: f64,
    #[serde(default)]
    pub n: u64,
    /// Why an unsupported or failed cell has no number (`errno=95 ret=-4`).
    #[serde(default)]
    pub detail: String,
}

fn one() -> u32 {
    1
}

impl Line {
    /// The line as a row of its own; `raw` is the line as printed.
    pub fn row(self, raw: &str) -> Row {
        let status = self.status.unwrap_or(Status::Ok);
        Row {
            key: CellKey {
                device: self.device,
                imp: self.imp,
                transport: self.transport,
                fork: self.fork,
                op: self.op,
            },
            size: self.size,
            path: self.path,
            status,
            median: self.median_ns,
            p10: self.p10_ns,
            p90: self.p90_ns,
            n: self.n,
            detail: self.detail,
            raw: raw.to_string(),
            rounds: if status == Status::Ok {
                vec![(self.pass, self.round, self.median_ns)]
            } else {
                Vec::new()
            },
        }
    }
}

/// One cell of the verbs bench: its lines of every pass and round folded.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    /// The cell's series.
    pub key: CellKey,
    /// The region size in bytes; 0 for size-independent operations.
    pub size: u64,
    /// How ours carried out a rereg cell; `None` for other cells.
    pub path: Option<ReregPath>,
    /// Measured, unsupported or failed.
    pub status: Status,
    /// Median latency in ns (NaN unless measured).
    pub median: f64,
    /// 10th percentile in ns.
    pub p10: f64,
    /// 90th percentile in ns.
    pub p90: f64,
    /// Number of samples.
    pub n: u64,
    /// Why an unsupported or failed cell has no number.
    pub detail: String,
    /// The line after the marker, as printed.
    pub raw: String,
    /// Every measured line of this cell as `(pass, round, median ns)`;
    /// the fields above are then the medians over them (the lines of one
    /// cell are folded into one row by [`fold`]).
    pub rounds: Vec<(u32, u32, f64)>,
}

/// Passes whose ratios differ by at most this fraction agree: the ratio is
/// reported as measured; otherwise as noisy.
pub const AGREE: f64 = 0.10;

/// How a ratio of two cells came out.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// Every pass's median per-round ratio within [`AGREE`] of the
    /// others: their mean.
    Measured(f64),
    /// The passes disagree: each pass's ratio.
    Noisy(Vec<f64>),
}

/// The median of `xs` (mean of the middle two for an even count).
pub fn median(xs: &[f64]) -> Option<f64> {
    if xs.is_empty() {
        return None;
    }
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    Some(if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    })
}

/// Folds the rows of one cell (one per pass and round) into one: the
/// first row's status and path (a failed or unsupported line wins), the
/// medians of the measured lines' numbers, every round kept in
/// [`Row::rounds`].
pub fn fold(rows: Vec<Row>) -> Vec<Row> {
    let mut out: Vec<Row> = Vec::new();
    let mut lines: Vec<Vec<Row>> = Vec::new();
    for r in rows {
        match out.iter().position(|o| o.key == r.key && o.size == r.size) {
            Some(i) => lines[i].push(r),
            None => {
                out.push(r.clone());
                lines.push(vec![r]);
            }
        }
    }
    for (row, all) in out.iter_mut().zip(lines) {
        if let Some(bad) = all.iter().find(|r| r.status != Status::Ok) {
            *row = bad.clone();
            continue;
        }
        let pick = |f: fn(&Row) -> f64| median(&all.iter().map(f).collect::<Vec<_>>());
        row.median = pick(|r| r.median).unwrap_or(f64::NAN);
        row.p10 = pick(|r| r.p10).unwrap_or(f64::NAN);
        row.p90 = pick(|r| r.p90).unwrap_or(f64::NAN);
        row.n = all.iter().map(|r| r.n).sum();
        row.path = ReregPath::combined(all.iter().filter_map(|r| r.path));
        row.rounds = all.iter().flat_map(|r| r.rounds.clone()).collect();
    }
    out
}

/// Everything the guest printed about the run.
#[derive(Debug, Default)]
pub struct Run {
    /// The measurements, in the order printed.
    pub rows: Vec<Row>,
    /// The `verbs_info` lines.
    pub info: Vec<Info>,
    /// The guest's kernel release, from the boot marker.
    pub guest_kernel: String,
}

impl Run {
    /// The verbs cells of `results`, one row per cell whatever the
    /// passes and rounds.
    pub fn new(results: &Results) -> Run {
        Run {
            rows: fold(results.verbs.clone()),
            info: results.verbs_info.clone(),
            guest_kernel: results.guest_kernel.clone(),
        }
    }

    /// The cell of `key` at `size`.
    pub fn get(&self, key: &CellKey, size: u64) -> Option<&Row> {
        self.rows.iter().find(|r| r.key == *key && r.size == size)
    }

    /// Its median, when it was measured.
    pub fn median(&self, key: &CellKey, size: u64) -> Option<f64> {
        self.get(key, size)
            .filter(|r| r.status == Status::Ok)
            .map(|r| r.median)
    }

    /// The ratio `a / b` at `size` when both were measured and the passes
    /// agree ([`Verdict::Measured`]); `None` otherwise.
    pub fn ratio(&self, a: &CellKey, b: &CellKey, size: u64) -> Option<f64> {
        match self.verdict(a, b, size)? {
            Verdict::Measured(r) => Some(r),
            Verdict::Noisy(_) => None,
        }
    }

    /// The ratio `a / b` at `size`: per pass the median of the per-round
    /// ratios (`a` and `b` measured in the same pass and round, next to
    /// each other), then whether the passes agree. `None` unless both
    /// cells were measured.
    pub fn verdict(&self, a: &CellKey, b: &CellKey, size: u64) -> Option<Verdict> {
        let ok = |k: &CellKey| self.get(k, size).filter(|r| r.status == Status::Ok);
        let (ra, rb) = (ok(a)?, ok(b)?);
        let mut per_pass: BTreeMap<u32, Vec<f64>> = BTreeMap::new();
        for &(pass, round, ma) in &ra.rounds {
            if let Some(&(_, _, mb)) = rb.rounds.iter().find(|x| (x.0, x.1) == (pass, round)) {
                per_pass.entry(pass).or_default().push(ma / mb);
            }
        }
        let passes: Vec<f64> = per_pass.values().filter_map(|r| median(r)).collect();
        if passes.is_empty() {
            return Some(Verdict::Measured(ra.median / rb.median));
        }
        let lo = passes.iter().copied().fold(f64::MAX, f64::min);
        let hi = passes.iter().copied().fold(f64::MIN, f64::max);
        Some(if hi <= lo * (1.0 + AGREE) {
            Verdict::Measured(passes.iter().sum::<f64>() / passes.len() as f64)
        } else {
            Verdict::Noisy(passes)
        })
    }

    /// How ours carried out `op` on `device` over `transport` (fork safety
    /// off) at every measured size; `None` when none was measured.
    pub fn ours_path(
        &self,
        device: &str,
        transport: Transport,
        op: Operation,
    ) -> Option<ReregPath> {
        let key = CellKey::ours(device, transport, op);
        ReregPath::combined(
            SIZES
                .iter()
                .filter_map(|&z| self.get(&key, z))
                .filter(|r| r.status == Status::Ok)
                .filter_map(|r| r.path),
        )
    }

    /// The devices, in the order they first appear.
    pub fn devices(&self) -> Vec<String> {
        super::units::distinct(self.rows.iter().map(|r| r.key.device.clone()))
    }

    /// The first `verbs_info` value of `key`.
    pub fn info(&self, key: &str) -> Option<&str> {
        info_of(&self.info, key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::results::{read, read_all};

    const LOG: &str = r#"@@UVERBS-BOOTED kernel=6.12.117+deb12-amd64
@@RESULT {"kind":"verbs_info","cell_ms":300,"min_n":5}
[ 3.1] x @@RESULT {"kind":"verbs","device":"rxe0","impl":"ours","transport":"ioctl","fork":"off","op":"reg_dereg","size":1048576,"median_ns":200000,"p10_ns":190000,"p90_ns":220000,"n":50}
@@RESULT {"kind":"verbs","device":"rxe0","impl":"ours","transport":"ioctl","fork":"on","op":"rereg_access","size":1048576,"path":"inplace","median_ns":5000,"p10_ns":4900,"p90_ns":5200,"n":900}
@@RESULT {"kind":"verbs","device":"rxe0","impl":"libibverbs","transport":"auto","fork":"off","op":"rereg_access","size":1048576,"status":"unsupported","detail":"errno=95 ret=-4"}
@@RESULT {"kind":"verbs","device":"siw0","impl":"floor","transport":"write","fork":"off","op":"alloc_pd","size":0,"status":"error","detail":"errno=12"}
"#;

    #[test]
    fn reads_typed_rows() {
        let run = Run::new(&read_all(LOG));
        assert_eq!(run.rows.len(), 4);
        assert_eq!(run.guest_kernel, "6.12.117+deb12-amd64");
        assert_eq!(run.info("cell_ms"), Some("300"));
        assert_eq!(run.devices(), ["rxe0", "siw0"]);
        let key = CellKey {
            device: "rxe0".into(),
            imp: Implementation::Ours,
            transport: Transport::Ioctl,
            fork: ForkMode::On,
            op: Operation::ReregAccess,
        };
        let r = run.get(&key, 1 << 20).unwrap();
        assert_eq!(
            (r.path, r.status, r.median, r.n),
            (Some(ReregPath::InPlace), Status::Ok, 5000.0, 900)
        );
        // The same cell with fork safety off was not measured.
        let off = CellKey::ours("rxe0", Transport::Ioctl, Operation::ReregAccess);
        assert!(run.get(&off, 1 << 20).is_none());
        let ibv = CellKey::libibverbs("rxe0", Operation::ReregAccess);
        assert_eq!(run.get(&ibv, 1 << 20).unwrap().status, Status::Unsupported);
        assert_eq!(run.median(&ibv, 1 << 20), None);
        let failed = &run.rows[3];
        assert_eq!(
            (failed.key.op, failed.status, failed.detail.as_str()),
            (Operation::AllocPd, Status::Error, "errno=12")
        );
        let reg = CellKey::ours("rxe0", Transport::Ioctl, Operation::RegDereg);
        assert_eq!(run.ratio(&reg, &reg, 1 << 20), Some(1.0));
    }

    /// A line the report cannot read is not a silent gap: it is kept with
    /// the reason, and the other lines still count.
    #[test]
    fn skips_unreadable_lines_with_the_reason() {
        let cell = r#""kind":"verbs","device":"rxe0","impl":"ours","transport":"ioctl","fork":"off","op":"reg","size":4096,"median_ns":1"#;
        let console = [
            cell.to_string(),
            cell.replace(r#""fork":"off""#, r#""fork":"forced""#),
            cell.replace(r#""impl":"ours""#, r#""impl":"rdma-core""#),
            cell.replace(r#""op":"reg""#, r#""op":"rereg_mw""#),
            format!(r#"{cell},"path":"sideways""#),
            format!(r#"{cell},"status":"flaky""#),
            cell.replace("4096", r#""4K""#),
            cell.replace(r#","transport":"ioctl""#, ""),
            cell.replace(r#""device":"rxe0","#, ""),
        ]
        .map(|l| format!("@@RESULT {{{l}}}"))
        .join("\n");
        let results = read(&console);
        assert_eq!(results.verbs.len(), 1);
        let reasons: Vec<&str> = results
            .skipped
            .iter()
            .map(|s| s.error.split(" at line ").next().unwrap())
            .collect();
        assert_eq!(
            reasons,
            [
                "unknown fork=\"forced\"",
                "unknown impl=\"rdma-core\"",
                "unknown op=\"rereg_mw\"",
                "unknown path=\"sideways\"",
                "unknown status=\"flaky\"",
                "invalid type: string \"4K\", expected u64",
                "missing field `transport`",
                "missing field `device`",
            ]
        );
        assert_eq!(results.skipped[0].line, 2);
        assert!(results.skipped[0].text.contains("forced"));
    }
}
