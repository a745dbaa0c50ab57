//! A parsed bench run: its cells, each named by a [`CellKey`] and a region
//! size, and what the guest said about the run.

use super::wire::{ForkMode, Implementation, Operation, ReregPath, Status, Transport};
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

/// One `@@BENCH` line.
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

/// Why a `@@BENCH` line was left out of the run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LineError {
    /// A required `key=` is missing.
    Missing(&'static str),
    /// A word outside its closed set.
    Unknown(super::wire::UnknownWord),
    /// A number that is not one.
    NotANumber {
        /// The key, e.g. `size`.
        key: &'static str,
        /// What followed `key=`.
        word: String,
    },
}

impl std::fmt::Display for LineError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LineError::Missing(key) => write!(f, "no {key}="),
            LineError::Unknown(u) => u.fmt(f),
            LineError::NotANumber { key, word } => write!(f, "{key}={word:?} is not a number"),
        }
    }
}

/// A `@@BENCH` line that could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skipped {
    /// The line after the marker.
    pub line: String,
    /// What is wrong with it.
    pub error: LineError,
}

/// Everything the guest printed about the run.
#[derive(Debug, Default)]
pub struct Run {
    /// The measurements, in the order printed.
    pub rows: Vec<Row>,
    /// The `@@BENCH-INFO` lines' `key=value` words.
    pub info: Vec<BTreeMap<String, String>>,
    /// The guest's kernel release, from the boot marker.
    pub guest_kernel: String,
    /// `@@BENCH` lines left out, with the reason.
    pub skipped: Vec<Skipped>,
}

impl Run {
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
        let mut d: Vec<String> = Vec::new();
        for r in &self.rows {
            if !d.contains(&r.key.device) {
                d.push(r.key.device.clone());
            }
        }
        d
    }

    /// The first `@@BENCH-INFO` value of `key`.
    pub fn info(&self, key: &str) -> Option<&str> {
        self.info
            .iter()
            .find_map(|m| m.get(key))
            .map(String::as_str)
    }
}
