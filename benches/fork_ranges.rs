//! Cost of fork-safety range tracking with up to 100 000 live registrations.
//!
//! `cargo bench -p uverbs-bench --bench fork_ranges` prints, per scenario, the median and p90
//! of single mark (`dontfork_range`) and unmark (`dofork_range`) calls in ns.
//!
//! * `noop` scenarios use an advisor that does nothing: pure tracker cost
//!   (map lookup, split, merge) on fake addresses, with 1 000, 10 000 and
//!   100 000 live ranges. The instructions per mark hardly grow with N
//!   (`tools/fork-ir.sh`); the time does once the map (some 5 MB at 100 000
//!   overlapping ranges) outgrows a core's cache (docs/growth.md).
//! * `madvise` scenarios use the real `madvise` advisor on real (untouched,
//!   `MAP_NORESERVE`) memory. Disjoint ranges each become a separate VMA in
//!   the kernel, and `vm.max_map_count` (65 530 by default) caps how many can
//!   exist, so the disjoint madvise scenario keeps 30 000 live ranges.

use std::hint::black_box;
use std::time::Instant;

use uverbs::error::Errno;
use uverbs::fork::{Advice, Advisor, ForkMode, ForkSafety, MadviseAdvisor, PageSizing};

// The untouched `MAP_NORESERVE` memory the fork tests use too.
#[path = "../tests/common/mapping.rs"]
mod mapping;

use mapping::Untouched;

#[path = "common/xorshift.rs"]
mod xorshift;

use xorshift::Rng;

const LIVE: usize = 100_000;
const SAMPLES: usize = 20_000;
const FAKE_BASE: usize = 0x1000_0000_0000;

struct Noop;

impl Advisor for Noop {
    fn advise(&self, _: usize, _: usize, _: Advice) -> Result<(), Errno> {
        Ok(())
    }
}

fn stats(name: &str, what: &str, mut ns: Vec<u64>) {
    ns.sort_unstable();
    let median = ns[ns.len() / 2];
    let p90 = ns[ns.len() * 9 / 10];
    println!("{name:<50} {what:<7} median {median:>7} ns   p90 {p90:>7} ns");
}

/// Times `SAMPLES` mark/unmark pairs of `(addr, len)` drawn by `pick`.
fn run(name: &str, fs: &ForkSafety, mut pick: impl FnMut(&mut Rng) -> (usize, usize)) {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut mark = Vec::with_capacity(SAMPLES);
    let mut unmark = Vec::with_capacity(SAMPLES);
    for _ in 0..SAMPLES {
        let (addr, len) = pick(&mut rng);
        let t0 = Instant::now();
        black_box(fs.dontfork_range(addr, len)).expect("mark");
        let t1 = Instant::now();
        black_box(fs.dofork_range(addr, len)).expect("unmark");
        let t2 = Instant::now();
        mark.push((t1 - t0).as_nanos() as u64);
        unmark.push((t2 - t1).as_nanos() as u64);
    }
    stats(name, "mark", mark);
    stats(name, "unmark", unmark);
}

/// The median cost of the two `Instant::now()` calls that bracket a sample.
fn timer_overhead() -> u64 {
    let mut ns: Vec<u64> = (0..SAMPLES)
        .map(|_| {
            let t0 = Instant::now();
            let t1 = black_box(Instant::now());
            (t1 - t0).as_nanos() as u64
        })
        .collect();
    ns.sort_unstable();
    ns[ns.len() / 2]
}

fn setup(fs: &ForkSafety, ranges: impl Iterator<Item = (usize, usize)>) {
    for (addr, len) in ranges {
        fs.dontfork_range(addr, len).expect("setup mark");
    }
}

fn teardown(fs: &ForkSafety, ranges: impl Iterator<Item = (usize, usize)>) {
    for (addr, len) in ranges {
        fs.dofork_range(addr, len).expect("teardown unmark");
    }
    assert!(fs.marked_ranges().is_empty());
}

/// The tracker's own cost, with an advisor that does nothing, with `live`
/// ranges: disjoint ones (one page every other page) and overlapping ones
/// (3 pages every 2 pages).
fn noop_scenarios(p: usize, live: usize) {
    let n = format!("{}k", live / 1000);
    {
        let fs =
            ForkSafety::with_page_sizing(ForkMode::Enabled, Box::new(Noop), PageSizing::Fixed(p));
        let ranges = (0..live).map(|i| (FAKE_BASE + 2 * i * p, p));
        setup(&fs, ranges.clone());
        println!("  (noop/disjoint: {} map entries)", fs.tracker().len());
        run(
            &format!("noop, {n} disjoint, new range in a gap"),
            &fs,
            |r| (FAKE_BASE + (2 * r.below(live - 1) + 1) * p, p),
        );
        run(
            &format!("noop, {n} disjoint, 2nd ref on a live range"),
            &fs,
            |r| (FAKE_BASE + 2 * r.below(live) * p + 17, 100),
        );
        teardown(&fs, ranges);
    }
    {
        let fs =
            ForkSafety::with_page_sizing(ForkMode::Enabled, Box::new(Noop), PageSizing::Fixed(p));
        let ranges = (0..live).map(|i| (FAKE_BASE + 2 * i * p, 3 * p));
        setup(&fs, ranges.clone());
        println!("  (noop/overlapping: {} map entries)", fs.tracker().len());
        run(&format!("noop, {n} overlapping, 5-page range"), &fs, |r| {
            (FAKE_BASE + r.below(2 * live - 5) * p + 5, 5 * p - 10)
        });
        teardown(&fs, ranges);
    }
}

fn main() {
    let p = mapping::page_size();
    let started = Instant::now();
    println!("fork range tracking, {SAMPLES} samples per line, page size {p}");
    println!(
        "  (each sample includes one Instant::now() pair: median {} ns here)",
        timer_overhead()
    );

    // --- tracker cost, no advisor: the same scenarios with 1k, 10k and
    // 100k live ranges. The instructions per mark hardly grow with N
    // (tools/fork-ir.sh); the time does, once the map outgrows the caches.
    for live in [1_000, 10_000, LIVE] {
        noop_scenarios(p, live);
    }

    // --- real madvise, overlapping: all pages DONTFORK, one VMA -----------
    {
        let fs = ForkSafety::with_page_sizing(
            ForkMode::Enabled,
            Box::new(MadviseAdvisor),
            PageSizing::Fixed(p),
        );
        let live_region = Untouched::new((2 * LIVE + 1) * p);
        let fresh_region = Untouched::new(LIVE * p);
        let base = live_region.addr;
        let live = (0..LIVE).map(|i| (base + 2 * i * p, 3 * p));
        let t = Instant::now();
        setup(&fs, live.clone());
        println!(
            "  (madvise/overlapping: {} map entries, set-up {:?})",
            fs.tracker().len(),
            t.elapsed()
        );
        run("madvise, 100k overlapping, ref on live pages", &fs, |r| {
            (base + r.below(2 * LIVE - 5) * p, 5 * p)
        });
        let fresh = fresh_region.addr;
        run(
            "madvise, 100k overlapping, fresh page (syscall)",
            &fs,
            |r| (fresh + r.below(LIVE) * p, p),
        );
        teardown(&fs, live);
    }

    // --- real madvise, disjoint: limited by vm.max_map_count --------------
    {
        const DISJOINT: usize = 30_000;
        let fs = ForkSafety::with_page_sizing(
            ForkMode::Enabled,
            Box::new(MadviseAdvisor),
            PageSizing::Fixed(p),
        );
        let region = Untouched::new(2 * DISJOINT * p);
        let base = region.addr;
        let live = (0..DISJOINT).map(|i| (base + 2 * i * p, p));
        setup(&fs, live.clone());
        println!("  (madvise/disjoint: {} map entries)", fs.tracker().len());
        run("madvise, 30k disjoint, new range in a gap", &fs, |r| {
            (base + (2 * r.below(DISJOINT - 1) + 1) * p, p)
        });
        run("madvise, 30k disjoint, 2nd ref on a live range", &fs, |r| {
            (base + 2 * r.below(DISJOINT) * p + 17, 100)
        });
        teardown(&fs, live);
    }

    println!("total {:?}", started.elapsed());
}
