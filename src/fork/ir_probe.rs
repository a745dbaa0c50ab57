//! A host-side loop for counting the instructions of one tracker mark and
//! unmark with callgrind, with N live ranges and an advisor that does
//! nothing (so only the tracker's own work is counted):
//!
//! ```text
//! cargo test --release -p uverbs --lib --no-run
//! valgrind --tool=callgrind --toggle-collect='*fork*ir_probe*probe_*' \
//!     target/release/deps/uverbs-… --ignored --exact fork::ir_probe::live_100k
//! callgrind_annotate --inclusive=yes callgrind.out.<pid> | grep probe_
//! ```
//!
//! (`tools/fork-ir.sh` runs this for N = 1,000, 10,000 and 100,000 and prints
//! Ir per call.) Each `probe_*` function is one `dontfork_range` or
//! `dofork_range` of [`ForkSafety`] and is called [`PAIRS`] times; its
//! inclusive Ir ÷ [`PAIRS`] is the cost of one call. The scenarios are those
//! of `benches/fork_ranges.rs`:
//!
//! * `gap`: N disjoint one-page ranges, one page every other page; a one-page
//!   range in a gap between two of them (the mark merges three entries into
//!   one, the unmark splits them again);
//! * `live`: the same N ranges; a second reference on part of one of them
//!   (in place, no entry added or removed);
//! * `overlap`: N three-page ranges, one every two pages (counts 1, 2, 1, 2…
//!   page by page: an entry per page); a five-page range anywhere among them.

use super::{Advice, Advisor, ForkMode, ForkSafety, PageSizing};
use crate::error::Errno;

const P: usize = 4096;
const BASE: usize = 0x1000_0000_0000;
/// Mark/unmark pairs per scenario.
pub(super) const PAIRS: usize = 1000;

struct Noop;

impl Advisor for Noop {
    fn advise(&self, _: usize, _: usize, _: Advice) -> Result<(), Errno> {
        Ok(())
    }
}

/// A small deterministic generator (xorshift64), as in the bench.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
}

macro_rules! probe {
    ($name:ident, $method:ident) => {
        /// One measured call: not inlined, so callgrind can name it.
        #[inline(never)]
        fn $name(fs: &ForkSafety, addr: usize, len: usize) -> Result<(), Errno> {
            fs.$method(addr, len)
        }
    };
}

probe!(probe_mark_gap, dontfork_range);
probe!(probe_unmark_gap, dofork_range);
probe!(probe_mark_live, dontfork_range);
probe!(probe_unmark_live, dofork_range);
probe!(probe_mark_overlap, dontfork_range);
probe!(probe_unmark_overlap, dofork_range);

type Probe = fn(&ForkSafety, usize, usize) -> Result<(), Errno>;

fn pairs(
    fs: &ForkSafety,
    mark: Probe,
    unmark: Probe,
    mut pick: impl FnMut(&mut Rng) -> (usize, usize),
) {
    let before = fs.marked_ranges();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    for _ in 0..PAIRS {
        let (addr, len) = pick(&mut rng);
        mark(fs, addr, len).expect("mark");
        unmark(fs, addr, len).expect("unmark");
    }
    assert_eq!(fs.marked_ranges(), before, "every pair undoes itself");
}

fn tracker() -> ForkSafety {
    ForkSafety::with_page_sizing(ForkMode::Enabled, Box::new(Noop), PageSizing::Fixed(P))
}

/// Runs the three scenarios with `n` live ranges.
pub(super) fn scenarios(n: usize) {
    let fs = tracker();
    for i in 0..n {
        fs.dontfork_range(BASE + 2 * i * P, P).unwrap();
    }
    assert_eq!(fs.tracker().len(), n);
    pairs(&fs, probe_mark_gap, probe_unmark_gap, |r| {
        (BASE + (2 * r.below(n - 1) + 1) * P, P)
    });
    pairs(&fs, probe_mark_live, probe_unmark_live, |r| {
        (BASE + 2 * r.below(n) * P + 17, 100)
    });

    let fs = tracker();
    for i in 0..n {
        fs.dontfork_range(BASE + 2 * i * P, 3 * P).unwrap();
    }
    assert_eq!(fs.tracker().len(), 2 * n - 1);
    pairs(&fs, probe_mark_overlap, probe_unmark_overlap, |r| {
        (BASE + r.below(2 * n - 5) * P + 5, 5 * P - 10)
    });
}

#[test]
#[ignore = "an instruction-count probe, run under callgrind (tools/fork-ir.sh)"]
fn live_1k() {
    scenarios(1_000);
}

#[test]
#[ignore = "an instruction-count probe, run under callgrind (tools/fork-ir.sh)"]
fn live_10k() {
    scenarios(10_000);
}

#[test]
#[ignore = "an instruction-count probe, run under callgrind (tools/fork-ir.sh)"]
fn live_100k() {
    scenarios(100_000);
}

/// The probe's own checks (each pair undoes itself, the entry counts) at
/// a size the ordinary test run affords.
#[test]
fn scenarios_hold_at_a_small_size() {
    scenarios(50);
}
