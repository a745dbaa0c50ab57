//! Property tests of the fork-safety range tracker against a naive
//! page-count model: counts, map shape, the exact advice calls issued, and
//! under injected advice failures and "remapped" pages the invariant that a
//! counted page is `DONTFORK` (no protection claimed that is not applied).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use proptest::prelude::*;
use uverbs::error::Errno;
use uverbs::fork::{Advice, Advisor, ForkMode, ForkSafety, PageSizing};

const P: usize = 4096;
const BASE: usize = 0x4000_0000;
const ARENA_PAGES: usize = 48;

/// One advisor call: (addr, len, advice).
type Call = (usize, usize, Advice);

#[derive(Default)]
struct FaultState {
    /// Successful calls, in order.
    log: Vec<Call>,
    /// Calls seen since the fault plan was armed.
    seen: usize,
    /// Fail call number `at` (counted from arming) and then the next
    /// `extra` calls that carry the same advice. Calls with the opposite
    /// advice (the rollback) always succeed.
    plan: Option<(usize, usize)>,
    failing: Option<(Advice, usize)>,
    errno: i32,
}

#[derive(Clone, Default)]
struct Recorder(Arc<Mutex<FaultState>>);

impl Recorder {
    fn arm(&self, at: usize, extra: usize, errno: i32) {
        let mut s = self.0.lock().unwrap();
        s.seen = 0;
        s.plan = Some((at, extra));
        s.failing = None;
        s.errno = errno;
    }

    fn disarm(&self) {
        let mut s = self.0.lock().unwrap();
        s.plan = None;
        s.failing = None;
    }

    fn log_len(&self) -> usize {
        self.0.lock().unwrap().log.len()
    }

    fn log_since(&self, from: usize) -> Vec<Call> {
        self.0.lock().unwrap().log[from..].to_vec()
    }

    fn log(&self) -> Vec<Call> {
        self.0.lock().unwrap().log.clone()
    }

    /// Simulates munmap + mmap of `[addr, addr + len)` behind the tracker's
    /// back: the new mapping has no `DONTFORK`.
    fn remap(&self, addr: usize, len: usize) {
        self.0.lock().unwrap().log.push((addr, len, Advice::DoFork));
    }
}

impl Advisor for Recorder {
    fn advise(&self, addr: usize, len: usize, advice: Advice) -> Result<(), Errno> {
        let mut s = self.0.lock().unwrap();
        let i = s.seen;
        s.seen += 1;
        if let Some((at, extra)) = s.plan {
            if i == at {
                s.failing = Some((advice, extra));
                return Err(Errno::from_raw_os_error(s.errno));
            }
            if let Some((adv, left)) = s.failing {
                if adv == advice && left > 0 {
                    s.failing = Some((adv, left - 1));
                    return Err(Errno::from_raw_os_error(s.errno));
                }
            }
        }
        s.log.push((addr, len, advice));
        Ok(())
    }
}

/// The naive model: a count per page index.
#[derive(Default, Clone, Debug)]
struct Model(BTreeMap<usize, u32>);

impl Model {
    fn pages(addr: usize, len: usize) -> std::ops::Range<usize> {
        let first = (addr - BASE) / P;
        let last = (addr - BASE + len).div_ceil(P);
        first..last
    }

    /// Applies a mark (+1) or unmark (-1) and returns the advice calls the
    /// tracker must make: one DontFork over the whole range for a mark, and
    /// DoFork for each maximal run of pages crossing 1->0 for an unmark.
    fn apply(&mut self, addr: usize, len: usize, mark: bool) -> Vec<Call> {
        let pages = Self::pages(addr, len);
        let mut calls: Vec<Call> = Vec::new();
        if mark {
            calls.push((BASE + pages.start * P, pages.len() * P, Advice::DontFork));
        }
        for page in pages {
            let count = self.0.get(&page).copied().unwrap_or(0);
            if !mark && count == 1 {
                let a = BASE + page * P;
                match calls.last_mut() {
                    Some(last) if last.0 + last.1 == a => last.1 += P,
                    _ => calls.push((a, P, Advice::DoFork)),
                }
            }
            let new = if mark { count + 1 } else { count - 1 };
            if new == 0 {
                self.0.remove(&page);
            } else {
                self.0.insert(page, new);
            }
        }
        calls
    }

    /// Run-length encoding: what the tracker's merged map must look like.
    fn rle(&self) -> Vec<(usize, usize, u32)> {
        let mut out: Vec<(usize, usize, u32)> = Vec::new();
        for (&page, &count) in &self.0 {
            let a = BASE + page * P;
            match out.last_mut() {
                Some(last) if last.1 == a && last.2 == count => last.1 += P,
                _ => out.push((a, a + P, count)),
            }
        }
        out
    }

    fn marked_pages(&self) -> BTreeSet<usize> {
        self.0.keys().copied().collect()
    }
}

/// Replays successful advice: the set of pages currently `DontFork`.
fn net_dontfork(log: &[Call]) -> BTreeSet<usize> {
    let mut set = BTreeSet::new();
    for &(addr, len, advice) in log {
        for page in Model::pages(addr, len) {
            match advice {
                Advice::DontFork => set.insert(page),
                Advice::DoFork => set.remove(&page),
            };
        }
    }
    set
}

#[derive(Debug, Clone)]
struct Step {
    mark: bool,
    offset: usize,
    len: usize,
    pick: usize,
    /// (failing call index, extra failures with the same advice, errno choice)
    fault: Option<(usize, usize, usize)>,
    /// Before the operation, "remap" `[offset, offset + len)`: drop its
    /// `DONTFORK` behind the tracker's back (only in the failure test).
    remap: bool,
}

fn step() -> impl Strategy<Value = Step> {
    (
        any::<bool>(),
        0..(ARENA_PAGES - 12) * P,
        1..12 * P,
        any::<usize>(),
        proptest::option::weighted(0.3, (0usize..4, 0usize..3, 0usize..3)),
        proptest::bool::weighted(0.1),
    )
        .prop_map(|(mark, offset, len, pick, fault, remap)| Step {
            mark,
            offset,
            len,
            pick,
            fault,
            remap,
        })
}

fn safety(rec: &Recorder) -> ForkSafety {
    ForkSafety::with_page_sizing(
        ForkMode::Enabled,
        Box::new(rec.clone()),
        PageSizing::Fixed(P),
    )
}

/// A recorder, a tracker it advises, an empty model and no live marks.
fn start() -> (Recorder, ForkSafety, Model, Vec<(usize, usize)>) {
    let rec = Recorder::default();
    let fs = safety(&rec);
    (rec, fs, Model::default(), Vec::new())
}

/// Chooses the operation of a step: a new mark (in one step of four, of a
/// range already marked: a second registration of the same buffer, which
/// the tracker changes in place), or the release of one live mark (only
/// what is marked is ever unmarked).
fn choose(step: &Step, live: &[(usize, usize)]) -> (bool, usize, usize, Option<usize>) {
    if step.mark && step.pick % 4 == 0 && !live.is_empty() {
        let (addr, len) = live[step.pick / 4 % live.len()];
        (true, addr, len, None)
    } else if step.mark || live.is_empty() {
        (true, BASE + step.offset, step.len, None)
    } else {
        let i = step.pick % live.len();
        (false, live[i].0, live[i].1, Some(i))
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn tracker_matches_page_model(steps in proptest::collection::vec(step(), 1..80)) {
        let (rec, fs, mut model, mut live) = start();
        for step in &steps {
            let (mark, addr, len, idx) = choose(step, &live);
            let before = rec.log_len();
            if mark {
                fs.dontfork_range(addr, len).unwrap();
                live.push((addr, len));
            } else {
                fs.dofork_range(addr, len).unwrap();
                live.swap_remove(idx.unwrap());
            }
            let expected = model.apply(addr, len, mark);
            prop_assert_eq!(rec.log_since(before), expected, "advice for {:?}", (mark, addr, len));
            prop_assert_eq!(fs.marked_ranges(), model.rle());
        }
        prop_assert_eq!(net_dontfork(&rec.log()), model.marked_pages());
        // Releasing everything empties the map and re-enables every page.
        for (addr, len) in live.drain(..) {
            fs.dofork_range(addr, len).unwrap();
            model.apply(addr, len, false);
        }
        prop_assert!(fs.marked_ranges().is_empty());
        prop_assert!(net_dontfork(&rec.log()).is_empty());
    }

    #[test]
    fn counted_pages_are_always_dontfork(steps in proptest::collection::vec(step(), 1..60)) {
        let (rec, fs, mut model, mut live) = start();
        // Pages "remapped" since the last mark that covered them: the one
        // case where a count is known not to be backed by DONTFORK.
        let mut remapped: BTreeSet<usize> = BTreeSet::new();
        // Pages released by a failed unmark: they may stay DONTFORK with
        // count 0 (over-protection, allowed).
        let mut released_by_failure: BTreeSet<usize> = BTreeSet::new();
        let errnos = [
            rustix::io::Errno::INVAL.raw_os_error(),
            rustix::io::Errno::AGAIN.raw_os_error(),
            rustix::io::Errno::IO.raw_os_error(),
        ];
        for step in &steps {
            if step.remap {
                let (addr, len) = (BASE + step.offset, step.len);
                let pages = Model::pages(addr, len);
                rec.remap(BASE + pages.start * P, pages.len() * P);
                remapped.extend(pages);
            }
            let (mark, addr, len, idx) = choose(step, &live);
            if let Some((at, extra, e)) = step.fault {
                rec.arm(at, extra, errnos[e]);
            }
            let snapshot = fs.marked_ranges();
            let result = if mark {
                fs.dontfork_range(addr, len)
            } else {
                fs.dofork_range(addr, len)
            };
            rec.disarm();
            match (mark, result) {
                (true, Ok(())) => {
                    model.apply(addr, len, true);
                    live.push((addr, len));
                    for page in Model::pages(addr, len) {
                        remapped.remove(&page);
                    }
                }
                (true, Err(err)) => {
                    prop_assert!(step.fault.is_some(), "unexpected error {}", err);
                    // A failed mark changes no count.
                    prop_assert_eq!(fs.marked_ranges(), snapshot);
                }
                (false, result) => {
                    if let Err(err) = result {
                        prop_assert!(step.fault.is_some(), "unexpected error {}", err);
                        released_by_failure.extend(Model::pages(addr, len));
                    }
                    // Released either way.
                    model.apply(addr, len, false);
                    live.swap_remove(idx.unwrap());
                }
            }
            prop_assert_eq!(fs.marked_ranges(), model.rle());
            // The kernel's view (replayed advice): every counted page is
            // DONTFORK unless remapped since its last mark; every DONTFORK
            // page is counted or was released by a failed unmark.
            let dontfork = net_dontfork(&rec.log());
            for page in model.marked_pages() {
                prop_assert!(
                    dontfork.contains(&page) || remapped.contains(&page),
                    "page {} is counted but not DONTFORK", page
                );
            }
            for page in &dontfork {
                prop_assert!(
                    model.0.contains_key(page) || released_by_failure.contains(page),
                    "page {} is DONTFORK for no reason", page
                );
            }
        }
    }
}

#[test]
fn unaligned_overlapping_ranges_share_pages() {
    let rec = Recorder::default();
    let fs = safety(&rec);
    // Two buffers in the same page: one DontFork, one DoFork.
    fs.dontfork_range(BASE + 100, 200).unwrap();
    fs.dontfork_range(BASE + 1000, 200).unwrap();
    assert_eq!(fs.marked_ranges(), vec![(BASE, BASE + P, 2)]);
    fs.dofork_range(BASE + 100, 200).unwrap();
    // Each mark applies DontFork (the second is a no-op for the kernel);
    // only the last release gives the page back.
    let dontfork = (BASE, P, Advice::DontFork);
    assert_eq!(rec.log(), vec![dontfork, dontfork]);
    fs.dofork_range(BASE + 1000, 200).unwrap();
    assert_eq!(
        rec.log(),
        vec![dontfork, dontfork, (BASE, P, Advice::DoFork)]
    );
}

/// Pages of the arena of `tracker_matches_page_model_at_scale`: room for
/// many more entries than one block of the tracker's map holds (64), so
/// that blocks split, merge and vanish, and ranges span several of them.
const WIDE_PAGES: usize = 2400;
/// Disjoint one-page marks the wide test starts with (one every other page
/// of the first `2 * WIDE_SEED` pages): a map of several blocks.
const WIDE_SEED: usize = 900;

fn wide_step() -> impl Strategy<Value = Step> {
    (
        any::<bool>(),
        0..(WIDE_PAGES - 700) * P,
        // Mostly small ranges, some that cover hundreds of entries.
        prop_oneof![3 => 1..8 * P, 1 => 1..700 * P],
        any::<usize>(),
    )
        .prop_map(|(mark, offset, len, pick)| Step {
            mark,
            offset,
            len,
            pick,
            fault: None,
            remap: false,
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn tracker_matches_page_model_at_scale(steps in proptest::collection::vec(wide_step(), 1..60)) {
        let (rec, fs, mut model, mut live) = start();
        for i in 0..WIDE_SEED {
            let (addr, len) = (BASE + 2 * i * P, P);
            fs.dontfork_range(addr, len).unwrap();
            model.apply(addr, len, true);
            live.push((addr, len));
        }
        prop_assert_eq!(fs.tracker().len(), WIDE_SEED);
        for step in &steps {
            let (mark, addr, len, idx) = choose(step, &live);
            let before = rec.log_len();
            if mark {
                fs.dontfork_range(addr, len).unwrap();
                live.push((addr, len));
            } else {
                fs.dofork_range(addr, len).unwrap();
                live.swap_remove(idx.unwrap());
            }
            let expected = model.apply(addr, len, mark);
            prop_assert_eq!(rec.log_since(before), expected, "advice for {:?}", (mark, addr, len));
            prop_assert_eq!(fs.marked_ranges(), model.rle());
        }
        // Released in an order of their own: whole blocks empty and merge.
        live.sort_unstable_by_key(|&(addr, len)| (addr.wrapping_mul(0x9e37_79b9), len));
        for (addr, len) in live.drain(..) {
            let before = rec.log_len();
            fs.dofork_range(addr, len).unwrap();
            let expected = model.apply(addr, len, false);
            prop_assert_eq!(rec.log_since(before), expected);
            prop_assert_eq!(fs.marked_ranges(), model.rle());
        }
        prop_assert!(fs.marked_ranges().is_empty());
        prop_assert!(net_dontfork(&rec.log()).is_empty());
    }
}
