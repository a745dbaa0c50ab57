//! Time-boxed sampling and order statistics.

use std::time::{Duration, Instant};

/// How long and how often one cell is sampled.
pub struct Budget {
    /// Wall time per cell (set-up between samples included).
    pub cell: Duration,
    /// Samples taken even when the time is up.
    pub min_n: usize,
    /// Samples never exceeded.
    pub max_n: usize,
}

impl Budget {
    /// `UVERBS_BENCH_CELL_MS` (default 500), 5 to 20 000 samples.
    pub fn from_env() -> Budget {
        let ms = std::env::var("UVERBS_BENCH_CELL_MS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(500);
        Budget {
            cell: Duration::from_millis(ms),
            min_n: 5,
            max_n: 20_000,
        }
    }
}

impl Budget {
    /// The budget of one of `rounds` rounds: the cell's time split evenly
    /// (the sample counts stay the same per round).
    pub fn per_round(self, rounds: usize) -> Budget {
        Budget {
            cell: self.cell / rounds.max(1) as u32,
            ..self
        }
    }
}

/// Median and spread of one cell, in nanoseconds.
pub struct Summary {
    pub median: u64,
    pub p10: u64,
    pub p90: u64,
    pub n: usize,
}

/// Runs `sample` once to warm up, then until the budget is spent; each call
/// returns the duration of the one operation it timed (its set-up and
/// clean-up stay outside), or an error that ends the cell.
pub fn measure<E>(
    budget: &Budget,
    mut sample: impl FnMut() -> Result<Duration, E>,
) -> Result<Summary, E> {
    sample()?;
    let start = Instant::now();
    let mut ns = Vec::with_capacity(1024);
    while ns.len() < budget.max_n && (ns.len() < budget.min_n || start.elapsed() < budget.cell) {
        ns.push(sample()?.as_nanos() as u64);
    }
    Ok(summarize(ns))
}

/// `make`, then `undo` of what it made, timed together: one
/// create/destroy cycle (a `measure` sample of the alloc+dealloc PD,
/// reg+dereg and context open+close cells).
#[inline(always)]
pub fn timed_cycle<T, E>(
    make: impl FnOnce() -> Result<T, E>,
    undo: impl FnOnce(T) -> Result<(), E>,
) -> Result<Duration, E> {
    let t = Instant::now();
    undo(make()?)?;
    Ok(t.elapsed())
}

/// Order statistics of the samples (nearest rank).
pub fn summarize(mut ns: Vec<u64>) -> Summary {
    ns.sort_unstable();
    let at = |q: f64| ns[((ns.len() - 1) as f64 * q).round() as usize];
    Summary {
        median: at(0.5),
        p10: at(0.1),
        p90: at(0.9),
        n: ns.len(),
    }
}
