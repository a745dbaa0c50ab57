//! Property tests of the fork-safety range tracker against a naive
//! page-count model: counts, map shape, the exact advice calls issued, and
//! all-or-nothing behaviour under injected advice failures.

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::sync::{Arc, Mutex};

use proptest::prelude::*;
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
}

impl Advisor for Recorder {
    fn advise(&self, addr: usize, len: usize, advice: Advice) -> io::Result<()> {
        let mut s = self.0.lock().unwrap();
        let i = s.seen;
        s.seen += 1;
        if let Some((at, extra)) = s.plan {
            if i == at {
                s.failing = Some((advice, extra));
                return Err(io::Error::from_raw_os_error(s.errno));
            }
            if let Some((adv, left)) = s.failing {
                if adv == advice && left > 0 {
                    s.failing = Some((adv, left - 1));
                    return Err(io::Error::from_raw_os_error(s.errno));
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
    /// tracker must make: maximal runs of pages crossing 0->1 or 1->0.
    fn apply(&mut self, addr: usize, len: usize, mark: bool) -> Vec<Call> {
        let (trigger, advice) = if mark {
            (0, Advice::DontFork)
        } else {
            (1, Advice::DoFork)
        };
        let mut calls: Vec<Call> = Vec::new();
        for page in Self::pages(addr, len) {
            let count = self.0.get(&page).copied().unwrap_or(0);
            if count == trigger {
                let a = BASE + page * P;
                match calls.last_mut() {
                    Some(last) if last.0 + last.1 == a => last.1 += P,
                    _ => calls.push((a, P, advice)),
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
}

fn step() -> impl Strategy<Value = Step> {
    (
        any::<bool>(),
        0..(ARENA_PAGES - 12) * P,
        1..12 * P,
        any::<usize>(),
        proptest::option::weighted(0.3, (0usize..4, 0usize..3, 0usize..3)),
    )
        .prop_map(|(mark, offset, len, pick, fault)| Step {
            mark,
            offset,
            len,
            pick,
            fault,
        })
}

fn safety(rec: &Recorder) -> ForkSafety {
    ForkSafety::with_page_sizing(
        ForkMode::Enabled,
        Box::new(rec.clone()),
        PageSizing::Fixed(P),
    )
}

/// Chooses the operation of a step: a new mark, or the release of one live
/// mark (only what is marked is ever unmarked).
fn choose(step: &Step, live: &[(usize, usize)]) -> (bool, usize, usize, Option<usize>) {
    if step.mark || live.is_empty() {
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
        let rec = Recorder::default();
        let fs = safety(&rec);
        let mut model = Model::default();
        let mut live: Vec<(usize, usize)> = Vec::new();
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
    fn failures_leave_no_trace(steps in proptest::collection::vec(step(), 1..60)) {
        let rec = Recorder::default();
        let fs = safety(&rec);
        let mut model = Model::default();
        let mut live: Vec<(usize, usize)> = Vec::new();
        let errnos = [
            rustix::io::Errno::INVAL.raw_os_error(),
            rustix::io::Errno::AGAIN.raw_os_error(),
            rustix::io::Errno::IO.raw_os_error(),
        ];
        for step in &steps {
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
            match result {
                Ok(()) => {
                    model.apply(addr, len, mark);
                    if mark {
                        live.push((addr, len));
                    } else {
                        live.swap_remove(idx.unwrap());
                    }
                }
                Err(err) => {
                    prop_assert!(step.fault.is_some(), "unexpected error {}", err);
                    prop_assert_eq!(fs.marked_ranges(), snapshot);
                }
            }
            prop_assert_eq!(fs.marked_ranges(), model.rle());
            // Whatever happened, the kernel's view (replayed advice) agrees
            // with the counts.
            prop_assert_eq!(net_dontfork(&rec.log()), model.marked_pages());
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
    assert_eq!(rec.log(), vec![(BASE, P, Advice::DontFork)]);
    fs.dofork_range(BASE + 1000, 200).unwrap();
    assert_eq!(
        rec.log(),
        vec![(BASE, P, Advice::DontFork), (BASE, P, Advice::DoFork)]
    );
}
