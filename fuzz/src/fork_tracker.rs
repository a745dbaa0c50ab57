//! The fork range tracker (`uverbs::fork::RangeTracker`) against a model.
//!
//! Input (decoded with `arbitrary`): up to 64 operations, each a mark or an
//! unmark of a byte range (null, near a low base, or at the very top of the
//! address space, where ranges wrap), with faults to inject into the
//! advisor calls it makes (the k-th to (k+n)-th call of the operation fail
//! with `ENOMEM`, `EAGAIN` or `EPERM`, after applying the advice to a
//! prefix of the range, as `madvise` may), or a "remap" of some pages (a
//! new mapping never carries `MADV_DONTFORK`).
//!
//! The fake advisor is a tiny kernel: the set of pages that are
//! `DONTFORK`, and a log of calls. The model is a `BTreeMap` page -> count.
//!
//! Properties, after every operation (the promises of `src/fork/ranges.rs`):
//! * the tracker's counts equal the model's: a mark adds one to each page
//!   of its range rounded out to pages; a failed mark changes nothing; an
//!   unmark of a range with an uncounted page is `EINVAL` and changes
//!   nothing, any other unmark releases its references, even when it
//!   fails; null, empty and wrapping ranges change nothing;
//! * `marked()` is sorted, non-overlapping, page-aligned, with counts > 0,
//!   and touching entries differ in count; `len()` and `is_empty()` agree;
//! * every advisor call is page-aligned, non-empty and does not wrap;
//! * a mark applies `DontFork` once to its whole range; when that fails it
//!   gives `DoFork` back exactly to the maximal runs of uncounted pages, and
//!   returns the advisor's error;
//! * an unmark applies `DoFork` once per maximal run of pages going 1 -> 0;
//!   a run that fails is retried page by page, skipping `ENOMEM`, stopping
//!   at another error; the first such error is returned after all runs;
//! * every page with count > 0 is `DONTFORK` in the fake kernel (had
//!   `DontFork` applied after its last `DoFork`), unless it was remapped
//!   since the last successful mark covering it.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use arbitrary::{Arbitrary, Unstructured};
use uverbs::error::Errno;
use uverbs::fork::{Advice, Advisor, PageSizing, RangeTracker};

const P: usize = 4096;
const LOW: usize = 0x1000_0000;
/// 64 pages below the top of the address space: the last page can never
/// be marked (its rounded end does not fit a `usize`).
const TOP: usize = usize::MAX - 64 * P + 1;
const MAX_OPS: usize = 64;

const ENOMEM: i32 = 12;
const EAGAIN: i32 = 11;
const EPERM: i32 = 1;
const EINVAL: i32 = 22;

/// Runs the target on one input.
pub fn run(data: &[u8]) {
    let mut u = Unstructured::new(data);
    let log = Fake::default();
    let tracker = RangeTracker::new(Box::new(log.clone()), PageSizing::Fixed(P));
    let mut model = Model::default();
    for _ in 0..MAX_OPS {
        if u.is_empty() {
            break;
        }
        let Ok(op) = Op::arbitrary(&mut u) else {
            break;
        };
        model.step(&tracker, &log, &op);
        model.check(&tracker, &log);
    }
}

#[derive(Arbitrary, Debug)]
enum Op {
    Mark(Range, Faults),
    Unmark(Range, Faults),
    Remap { at: Where, page: u8, pages: u8 },
}

#[derive(Arbitrary, Debug, Clone, Copy)]
enum Where {
    Null,
    Low,
    Top,
}

#[derive(Arbitrary, Debug, Clone, Copy)]
struct Range {
    at: Where,
    page: u8,
    offset: u16,
    len: u16,
}

impl Range {
    fn addr_len(self) -> (usize, usize) {
        let page = usize::from(self.page % 64) * P + usize::from(self.offset) % P;
        let addr = match self.at {
            Where::Null => 0,
            Where::Low => LOW + page,
            Where::Top => TOP + page,
        };
        (addr, usize::from(self.len))
    }
}

#[derive(Arbitrary, Debug, Clone, Copy)]
struct Faults {
    /// Calls `skip % 6 .. skip % 6 + count % 4` of the operation fail.
    skip: u8,
    count: u8,
    /// How many pages of a failing call get the advice anyway (modulo).
    partial: u8,
    errno: FaultErrno,
}

#[derive(Arbitrary, Debug, Clone, Copy)]
enum FaultErrno {
    NoMem,
    Again,
    Perm,
}

impl FaultErrno {
    fn raw(self) -> i32 {
        match self {
            FaultErrno::NoMem => ENOMEM,
            FaultErrno::Again => EAGAIN,
            FaultErrno::Perm => EPERM,
        }
    }
}

/// One advisor call and what the fake answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Call {
    addr: usize,
    len: usize,
    advice: Advice,
    /// `None` for success, else the errno.
    failed: Option<i32>,
}

#[derive(Debug, Default)]
struct Kernel {
    dontfork: BTreeSet<usize>,
    calls: Vec<Call>,
    faults: Option<Faults>,
}

/// The recording fake advisor that fails on demand.
#[derive(Clone, Default)]
struct Fake(Arc<Mutex<Kernel>>);

impl Fake {
    fn lock(&self) -> MutexGuard<'_, Kernel> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Starts an operation: its calls are counted from 0.
    fn begin(&self, faults: Option<Faults>) {
        let mut k = self.lock();
        k.calls.clear();
        k.faults = faults;
    }

    fn calls(&self) -> Vec<Call> {
        self.lock().calls.clone()
    }
}

impl Advisor for Fake {
    fn advise(&self, addr: usize, len: usize, advice: Advice) -> Result<(), Errno> {
        assert_eq!(addr % P, 0, "unaligned advice address {addr:#x}");
        assert!(len > 0 && len.is_multiple_of(P), "advice length {len:#x}");
        let end = addr.checked_add(len).expect("advice range wraps");
        let mut k = self.lock();
        let index = k.calls.len();
        let fail = k.faults.and_then(|f| {
            let first = usize::from(f.skip % 6);
            let n = usize::from(f.count % 4);
            (first..first + n)
                .contains(&index)
                .then_some((f.errno.raw(), usize::from(f.partial)))
        });
        let pages = addr / P..end / P;
        let applied = match fail {
            None => pages.clone(),
            Some((_, partial)) => pages.start..pages.start + partial % pages.len(),
        };
        for page in applied {
            match advice {
                Advice::DontFork => k.dontfork.insert(page),
                Advice::DoFork => k.dontfork.remove(&page),
            };
        }
        k.calls.push(Call {
            addr,
            len,
            advice,
            failed: fail.map(|(errno, _)| errno),
        });
        match fail {
            None => Ok(()),
            Some((errno, _)) => Err(Errno::from_raw_os_error(errno)),
        }
    }
}

#[derive(Debug, Default)]
struct Model {
    counts: BTreeMap<usize, u32>,
    /// Counted pages remapped since the last successful mark covering them.
    remapped: BTreeSet<usize>,
}

/// Maximal runs of consecutive pages, as `(addr, len)`.
fn runs(pages: impl IntoIterator<Item = usize>) -> Vec<(usize, usize)> {
    let mut out: Vec<(usize, usize)> = Vec::new();
    for page in pages {
        match out.last_mut() {
            Some((start, len)) if *start + *len == page * P => *len += P,
            _ => out.push((page * P, P)),
        }
    }
    out
}

/// A tracker call that reached the advisor: its result, the advisor calls
/// it made and the pages it covers.
type Called = (Result<(), Errno>, Vec<Call>, std::ops::Range<usize>);

fn errno_of(r: &Result<(), Errno>) -> Option<i32> {
    r.as_ref().err().map(|e| e.raw_os_error())
}

impl Model {
    /// The pages of `[addr, addr + len)` rounded out; `Err(())` for the
    /// ranges the tracker must refuse with `EINVAL`, `Ok(None)` for no-ops.
    fn pages(addr: usize, len: usize) -> Result<Option<std::ops::Range<usize>>, ()> {
        if addr == 0 || len == 0 {
            return Ok(None);
        }
        let end = addr.checked_add(len).ok_or(())?;
        let end = end.checked_add(P - 1).ok_or(())? & !(P - 1);
        Ok(Some(addr / P..end / P))
    }

    /// Runs one tracker call with `faults` armed and checks the cases that
    /// must make no advisor call (a no-op range, a wrapping one); returns the
    /// result, the calls made and the pages covered otherwise.
    fn call(
        fake: &Fake,
        faults: Faults,
        addr: usize,
        len: usize,
        what: &str,
        op: impl FnOnce() -> Result<(), Errno>,
    ) -> Option<Called> {
        fake.begin(Some(faults));
        let result = op();
        let calls = fake.calls();
        match Self::pages(addr, len) {
            Ok(None) => {
                assert!(result.is_ok() && calls.is_empty(), "no-op {what}");
                None
            }
            Err(()) => {
                assert_eq!(errno_of(&result), Some(EINVAL), "wrapping {what}");
                assert!(calls.is_empty(), "wrapping {what} made calls");
                None
            }
            Ok(Some(pages)) => Some((result, calls, pages)),
        }
    }

    fn step(&mut self, tracker: &RangeTracker, fake: &Fake, op: &Op) {
        match *op {
            Op::Mark(range, faults) => {
                let (addr, len) = range.addr_len();
                let Some((result, calls, pages)) =
                    Self::call(fake, faults, addr, len, "mark", || tracker.mark(addr, len))
                else {
                    return;
                };
                let whole = (pages.start * P, pages.len() * P);
                let Some(first) = calls.first() else {
                    panic!("mark of {addr:#x}+{len:#x} applied no DontFork");
                };
                assert_eq!(
                    (first.addr, first.len, first.advice),
                    (whole.0, whole.1, Advice::DontFork),
                    "a mark applies DontFork to its whole range"
                );
                if let Some(errno) = first.failed {
                    assert_eq!(errno_of(&result), Some(errno), "failed mark's error");
                    let uncounted = pages.clone().filter(|p| !self.counts.contains_key(p));
                    let giveback: Vec<_> = calls[1..]
                        .iter()
                        .map(|c| (c.addr, c.len, c.advice))
                        .collect();
                    let want: Vec<_> = runs(uncounted)
                        .into_iter()
                        .map(|(a, l)| (a, l, Advice::DoFork))
                        .collect();
                    assert_eq!(
                        giveback, want,
                        "a failed mark gives back the uncounted runs"
                    );
                } else {
                    assert!(
                        result.is_ok(),
                        "mark failed without a failed call: {result:?}"
                    );
                    assert_eq!(calls.len(), 1, "one advisor call per mark");
                    for page in pages {
                        *self.counts.entry(page).or_insert(0) += 1;
                        self.remapped.remove(&page);
                    }
                }
            }
            Op::Unmark(range, faults) => {
                let (addr, len) = range.addr_len();
                let Some((result, calls, pages)) =
                    Self::call(fake, faults, addr, len, "unmark", || {
                        tracker.unmark(addr, len)
                    })
                else {
                    return;
                };
                if pages.clone().any(|p| !self.counts.contains_key(&p)) {
                    assert_eq!(errno_of(&result), Some(EINVAL), "unmark of uncounted pages");
                    assert!(calls.is_empty(), "a refused unmark made calls");
                    return;
                }
                let mut released = Vec::new();
                for page in pages {
                    let count = self.counts.get_mut(&page).unwrap();
                    *count -= 1;
                    if *count == 0 {
                        self.counts.remove(&page);
                        self.remapped.remove(&page);
                        released.push(page);
                    }
                }
                // The documented call sequence, and the error it implies.
                let mut calls = calls.iter();
                let mut first_error = None;
                for (start, run_len) in runs(released) {
                    let c = calls.next().expect("a DoFork per released run");
                    assert_eq!(
                        (c.addr, c.len, c.advice),
                        (start, run_len, Advice::DoFork),
                        "DoFork of a whole released run"
                    );
                    if c.failed.is_none() {
                        continue;
                    }
                    for page in (start..start + run_len).step_by(P) {
                        let c = calls.next().expect("page-by-page retry");
                        assert_eq!((c.addr, c.len, c.advice), (page, P, Advice::DoFork));
                        match c.failed {
                            None | Some(ENOMEM) => {}
                            Some(errno) => {
                                first_error.get_or_insert(errno);
                                break;
                            }
                        }
                    }
                }
                assert_eq!(calls.next(), None, "unexpected advisor calls");
                assert_eq!(errno_of(&result), first_error, "unmark's result");
            }
            Op::Remap { at, page, pages } => {
                let base = match at {
                    Where::Null | Where::Low => LOW / P,
                    Where::Top => TOP / P,
                };
                let first = base + usize::from(page % 64);
                let n = usize::from(pages % 16).min(base + 64 - first);
                let mut k = fake.lock();
                for p in first..first + n {
                    k.dontfork.remove(&p);
                    if self.counts.contains_key(&p) {
                        self.remapped.insert(p);
                    }
                }
            }
        }
    }

    fn check(&self, tracker: &RangeTracker, fake: &Fake) {
        let marked = tracker.marked();
        let mut counts = BTreeMap::new();
        for (i, &(start, end, count)) in marked.iter().enumerate() {
            assert!(start < end, "empty entry {start:#x}..{end:#x}");
            assert!(start % P == 0 && end % P == 0, "unaligned entry");
            assert!(count > 0, "entry with count 0");
            if let Some(&(_, prev_end, prev_count)) = i.checked_sub(1).map(|j| &marked[j]) {
                assert!(prev_end <= start, "overlapping or unsorted entries");
                if prev_end == start {
                    assert_ne!(prev_count, count, "touching entries with equal counts");
                }
            }
            for page in start / P..end / P {
                counts.insert(page, count);
            }
        }
        assert_eq!(counts, self.counts, "tracker counts differ from the model");
        assert_eq!(tracker.len(), marked.len());
        assert_eq!(tracker.is_empty(), marked.is_empty());
        let k = fake.lock();
        for &page in self.counts.keys() {
            assert!(
                k.dontfork.contains(&page) || self.remapped.contains(&page),
                "page {:#x} is counted but not DONTFORK",
                page * P
            );
        }
    }
}
