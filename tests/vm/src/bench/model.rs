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

    /// The ratio `a / b` at `size`, when both were measured.
    pub fn ratio(&self, a: &CellKey, b: &CellKey, size: u64) -> Option<f64> {
        Some(self.median(a, size)? / self.median(b, size)?)
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
