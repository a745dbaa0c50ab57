//! Reference-counted tracking of `MADV_DONTFORK` page ranges.
//!
//! The tracker keeps a map of non-overlapping, page-aligned ranges, each with
//! the number of live registrations that cover it. Pages not in the map have
//! count 0. Fork advice is issued only when a page's count crosses 0 → 1
//! (`DontFork`) or 1 → 0 (`DoFork`), once per maximal contiguous run of such
//! pages. Neighbouring ranges with equal counts are merged, so the map holds
//! one entry per distinct "count plateau" however many times ranges are
//! marked and unmarked.

use std::collections::BTreeMap;
use std::fmt;
use std::io;
use std::sync::{Mutex, MutexGuard, PoisonError};

use super::advisor::{Advice, Advisor};

/// How the tracker rounds ranges to pages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PageSizing {
    /// The system's base page size (`sysconf(_SC_PAGESIZE)`).
    System,
    /// A fixed page size (a power of two). Useful with fake advisors in tests.
    Fixed(usize),
    /// Per range, the page size of the mapping that contains the range's start
    /// address, read from `/proc/self/smaps` (`KernelPageSize:`), so that
    /// ranges inside huge-page mappings are rounded to whole huge pages. Costs
    /// a read of `/proc/self/smaps` per mark and unmark.
    #[doc(alias = "RDMAV_HUGEPAGES_SAFE")]
    HugePageAware,
}

impl PageSizing {
    /// [`PageSizing::HugePageAware`] when the environment variable
    /// `RDMAV_HUGEPAGES_SAFE` is set (to any value, as in libibverbs),
    /// otherwise [`PageSizing::System`].
    pub fn from_env() -> PageSizing {
        if std::env::var_os("RDMAV_HUGEPAGES_SAFE").is_some() {
            PageSizing::HugePageAware
        } else {
            PageSizing::System
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Span {
    end: usize,
    count: u32,
}

/// A contiguous piece of the requested range with a uniform count.
type Piece = (usize, usize, u32);

/// Reference-counted set of page ranges that must not be inherited across
/// `fork()`, applying `MADV_DONTFORK` / `MADV_DOFORK` through an [`Advisor`].
///
/// This is the data structure behind [`ForkSafety`](super::ForkSafety)
/// (libibverbs keeps the same information in a red-black tree inside
/// `ibv_dontfork_range` / `ibv_dofork_range`). All methods take `&self`; one
/// mutex serialises updates, and it is held while advice is applied so that
/// the kernel's view and the map never disagree between operations.
///
/// Cost of [`mark`](Self::mark) / [`unmark`](Self::unmark): O((1 + k) log n)
/// for n entries in the map and k entries overlapping the range, plus one
/// advisor call per maximal run of pages crossing 0 ↔ 1.
pub struct RangeTracker {
    advisor: Box<dyn Advisor>,
    base_page: usize,
    huge_aware: bool,
    map: Mutex<BTreeMap<usize, Span>>,
}

impl fmt::Debug for RangeTracker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RangeTracker")
            .field("page_size", &self.base_page)
            .field("huge_aware", &self.huge_aware)
            .field("entries", &self.len())
            .finish_non_exhaustive()
    }
}

fn errno(e: rustix::io::Errno) -> io::Error {
    io::Error::from_raw_os_error(e.raw_os_error())
}

impl RangeTracker {
    /// Creates an empty tracker that applies advice through `advisor`.
    ///
    /// # Panics
    ///
    /// If `sizing` is [`PageSizing::Fixed`] with a size that is not a power
    /// of two.
    pub fn new(advisor: Box<dyn Advisor>, sizing: PageSizing) -> RangeTracker {
        let (base_page, huge_aware) = match sizing {
            PageSizing::System => (rustix::param::page_size(), false),
            PageSizing::HugePageAware => (rustix::param::page_size(), true),
            PageSizing::Fixed(size) => {
                assert!(size.is_power_of_two(), "page size must be a power of two");
                (size, false)
            }
        };
        RangeTracker {
            advisor,
            base_page,
            huge_aware,
            map: Mutex::new(BTreeMap::new()),
        }
    }

    /// The base page size ranges are rounded to (huge-page-aware trackers may
    /// round some ranges to larger pages).
    pub fn page_size(&self) -> usize {
        self.base_page
    }

    /// The advisor this tracker applies advice through.
    pub fn advisor(&self) -> &dyn Advisor {
        &*self.advisor
    }

    /// Adds one reference to every page overlapping `[addr, addr + len)`,
    /// applying `DontFork` to the pages whose count goes 0 → 1.
    ///
    /// `len == 0` or `addr == 0` is a successful no-op. On error nothing has
    /// changed: counts are untouched and advice already applied during this
    /// call has been undone. `EINVAL` if the range wraps around the address
    /// space, `EOVERFLOW` if a page's count would exceed `u32::MAX`, or the
    /// advisor's error.
    pub fn mark(&self, addr: usize, len: usize) -> io::Result<()> {
        self.apply(addr, len, true)
    }

    /// Removes one reference from every page overlapping `[addr, addr + len)`,
    /// applying `DoFork` to the pages whose count goes 1 → 0.
    ///
    /// `len == 0` or `addr == 0` is a successful no-op. `EINVAL` (and no
    /// change) if any of the pages is not marked. A `DoFork` that fails is
    /// retried page by page; pages that are no longer mapped (`ENOMEM`) are
    /// skipped, since an unmapped page is inherited by nobody. Any other
    /// failure undoes the advice applied during this call, leaves the counts
    /// untouched and is returned.
    pub fn unmark(&self, addr: usize, len: usize) -> io::Result<()> {
        self.apply(addr, len, false)
    }

    /// Snapshot of the marked ranges as `(start, end_exclusive, count)`,
    /// ascending and non-overlapping; adjacent entries have different counts.
    pub fn marked(&self) -> Vec<(usize, usize, u32)> {
        self.lock()
            .iter()
            .map(|(&start, span)| (start, span.end, span.count))
            .collect()
    }

    /// Number of entries in the map (distinct count plateaus).
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether no page is marked.
    pub fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }

    fn lock(&self) -> MutexGuard<'_, BTreeMap<usize, Span>> {
        // The map is only modified after all fallible work (advice) is done,
        // so a panic in an advisor cannot leave it half-updated: recovering a
        // poisoned lock is sound.
        self.map.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Rounds `[addr, addr + len)` out to whole pages; `None` for the no-op
    /// cases. Returns `(start, end, granule)`.
    fn align(&self, addr: usize, len: usize) -> io::Result<Option<(usize, usize, usize)>> {
        if addr == 0 || len == 0 {
            return Ok(None);
        }
        let end = addr
            .checked_add(len)
            .ok_or_else(|| errno(rustix::io::Errno::INVAL))?;
        let granule = if self.huge_aware {
            kernel_page_size(addr)
                .unwrap_or(self.base_page)
                .max(self.base_page)
        } else {
            self.base_page
        };
        let start = addr & !(granule - 1);
        let end = end
            .checked_add(granule - 1)
            .ok_or_else(|| errno(rustix::io::Errno::INVAL))?
            & !(granule - 1);
        Ok(Some((start, end, granule)))
    }

    fn apply(&self, addr: usize, len: usize, mark: bool) -> io::Result<()> {
        let Some((start, end, granule)) = self.align(addr, len)? else {
            return Ok(());
        };
        let mut map = self.lock();
        let pieces = pieces(&map, start, end);

        let (trigger, advice) = if mark {
            if pieces.iter().any(|&(_, _, c)| c == u32::MAX) {
                return Err(errno(rustix::io::Errno::OVERFLOW));
            }
            (0, Advice::DontFork)
        } else {
            if pieces.iter().any(|&(_, _, c)| c == 0) {
                return Err(errno(rustix::io::Errno::INVAL));
            }
            (1, Advice::DoFork)
        };

        let mut applied = Vec::new();
        for (s, e) in runs(&pieces, trigger) {
            if let Err(err) = self.advise_run(s, e, granule, advice, &mut applied) {
                for &(a, l, adv) in applied.iter().rev() {
                    // Best effort: if undoing fails too there is nothing
                    // better to do than report the original error.
                    let _ = self.advisor.advise(a, l, adv.opposite());
                }
                return Err(err);
            }
        }

        update(&mut map, start, end, &pieces, mark);
        Ok(())
    }

    fn advise_run(
        &self,
        start: usize,
        end: usize,
        granule: usize,
        advice: Advice,
        applied: &mut Vec<(usize, usize, Advice)>,
    ) -> io::Result<()> {
        let err = match self.advisor.advise(start, end - start, advice) {
            Ok(()) => {
                applied.push((start, end - start, advice));
                return Ok(());
            }
            Err(err) => err,
        };
        if advice == Advice::DontFork {
            return Err(err);
        }
        // DoFork failed, possibly because part of the range is already
        // unmapped (ENOMEM). Apply it page by page to reach every page that is
        // still mapped, skipping the ones that are gone.
        let mut page = start;
        while page < end {
            match self.advisor.advise(page, granule, Advice::DoFork) {
                Ok(()) => applied.push((page, granule, Advice::DoFork)),
                Err(e) if e.raw_os_error() == Some(rustix::io::Errno::NOMEM.raw_os_error()) => {}
                Err(e) => return Err(e),
            }
            page += granule;
        }
        Ok(())
    }
}

/// Splits `[start, end)` into pieces of uniform count (0 for gaps).
fn pieces(map: &BTreeMap<usize, Span>, start: usize, end: usize) -> Vec<Piece> {
    let mut out = Vec::new();
    let mut cur = start;
    if let Some((_, span)) = map.range(..start).next_back() {
        if span.end > start {
            cur = span.end.min(end);
            out.push((start, cur, span.count));
        }
    }
    for (&s, span) in map.range(start..end) {
        if s > cur {
            out.push((cur, s, 0));
        }
        let e = span.end.min(end);
        out.push((s, e, span.count));
        cur = e;
    }
    if cur < end {
        out.push((cur, end, 0));
    }
    out
}

/// Maximal contiguous runs of pieces whose count equals `trigger`.
fn runs(pieces: &[Piece], trigger: u32) -> Vec<(usize, usize)> {
    let mut out: Vec<(usize, usize)> = Vec::new();
    for &(s, e, c) in pieces {
        if c != trigger {
            continue;
        }
        match out.last_mut() {
            Some(last) if last.1 == s => last.1 = e,
            _ => out.push((s, e)),
        }
    }
    out
}

/// Applies the count change to the map, splitting entries at the range
/// boundaries and merging equal neighbours (including ones that only touch
/// the range).
fn update(map: &mut BTreeMap<usize, Span>, start: usize, end: usize, pieces: &[Piece], mark: bool) {
    let mut removed: Vec<Piece> = Vec::new();
    if let Some((&s, span)) = map.range(..start).next_back() {
        if span.end >= start {
            removed.push((s, span.end, span.count));
        }
    }
    removed.extend(
        map.range(start..=end)
            .map(|(&s, span)| (s, span.end, span.count)),
    );
    for &(s, _, _) in &removed {
        map.remove(&s);
    }

    let mut seq: Vec<Piece> = Vec::with_capacity(pieces.len() + 2);
    if let Some(&(s, e, c)) = removed.first() {
        if s < start {
            seq.push((s, e.min(start), c));
        }
    }
    for &(s, e, c) in pieces {
        let c = if mark { c + 1 } else { c - 1 };
        seq.push((s, e, c));
    }
    if let Some(&(s, e, c)) = removed.last() {
        if e > end {
            seq.push((s.max(end), e, c));
        }
    }

    let mut merged: Option<Piece> = None;
    for (s, e, c) in seq {
        if c == 0 {
            if let Some((ms, me, mc)) = merged.take() {
                map.insert(ms, Span { end: me, count: mc });
            }
            continue;
        }
        merged = match merged {
            Some((ms, me, mc)) if me == s && mc == c => Some((ms, e, c)),
            Some((ms, me, mc)) => {
                map.insert(ms, Span { end: me, count: mc });
                Some((s, e, c))
            }
            None => Some((s, e, c)),
        };
    }
    if let Some((ms, me, mc)) = merged {
        map.insert(ms, Span { end: me, count: mc });
    }
}

/// The `KernelPageSize` of the mapping containing `addr`, from
/// `/proc/self/smaps`.
pub(crate) fn kernel_page_size(addr: usize) -> Option<usize> {
    let smaps = std::fs::read_to_string("/proc/self/smaps").ok()?;
    parse_kernel_page_size(&smaps, addr)
}

fn parse_kernel_page_size(smaps: &str, addr: usize) -> Option<usize> {
    let mut inside = false;
    for line in smaps.lines() {
        if let Some((lo, hi)) = mapping_header(line) {
            if inside {
                return None; // the containing mapping had no KernelPageSize line
            }
            inside = lo <= addr && addr < hi;
        } else if inside {
            if let Some(rest) = line.strip_prefix("KernelPageSize:") {
                let kb: usize = rest.trim().strip_suffix("kB")?.trim().parse().ok()?;
                return kb.checked_mul(1024).filter(|s| s.is_power_of_two());
            }
        }
    }
    None
}

/// Parses `start-end ...` header lines of `/proc/<pid>/smaps`.
fn mapping_header(line: &str) -> Option<(usize, usize)> {
    let range = line.split_whitespace().next()?;
    let (lo, hi) = range.split_once('-')?;
    let lo = usize::from_str_radix(lo, 16).ok()?;
    let hi = usize::from_str_radix(hi, 16).ok()?;
    Some((lo, hi))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    const P: usize = 4096;
    const BASE: usize = 0x1000_0000;

    #[derive(Default, Clone)]
    struct Log(Arc<Mutex<Vec<(usize, usize, Advice)>>>);

    impl Log {
        fn take(&self) -> Vec<(usize, usize, Advice)> {
            std::mem::take(&mut *self.0.lock().unwrap())
        }
    }

    impl Advisor for Log {
        fn advise(&self, addr: usize, len: usize, advice: Advice) -> io::Result<()> {
            self.0.lock().unwrap().push((addr, len, advice));
            Ok(())
        }
    }

    fn tracker() -> (RangeTracker, Log) {
        let log = Log::default();
        (
            RangeTracker::new(Box::new(log.clone()), PageSizing::Fixed(P)),
            log,
        )
    }

    #[test]
    fn ranges_are_rounded_to_pages() {
        let (t, log) = tracker();
        t.mark(BASE + 10, 1).unwrap();
        assert_eq!(t.marked(), vec![(BASE, BASE + P, 1)]);
        assert_eq!(log.take(), vec![(BASE, P, Advice::DontFork)]);
        // Straddling a page boundary covers both pages.
        t.mark(BASE + P - 1, 2).unwrap();
        assert_eq!(
            t.marked(),
            vec![(BASE, BASE + P, 2), (BASE + P, BASE + 2 * P, 1)]
        );
        assert_eq!(log.take(), vec![(BASE + P, P, Advice::DontFork)]);
        t.unmark(BASE + P - 1, 2).unwrap();
        assert_eq!(log.take(), vec![(BASE + P, P, Advice::DoFork)]);
        t.unmark(BASE + 10, 1).unwrap();
        assert_eq!(log.take(), vec![(BASE, P, Advice::DoFork)]);
        assert!(t.is_empty());
    }

    #[test]
    fn zero_length_and_null_are_noops() {
        let (t, log) = tracker();
        t.mark(0, 100).unwrap();
        t.mark(BASE, 0).unwrap();
        t.unmark(0, 100).unwrap();
        t.unmark(BASE, 0).unwrap();
        assert!(t.is_empty());
        assert!(log.take().is_empty());
    }

    #[test]
    fn wrapping_ranges_are_rejected() {
        let (t, _) = tracker();
        let err = t.mark(usize::MAX - 10, 100).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc_einval()));
        let err = t.mark(usize::MAX - 10, 5).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc_einval()));
        assert!(t.is_empty());
    }

    fn libc_einval() -> i32 {
        rustix::io::Errno::INVAL.raw_os_error()
    }

    #[test]
    fn unmarking_unmarked_pages_is_rejected_without_change() {
        let (t, log) = tracker();
        t.mark(BASE, P).unwrap();
        log.take();
        let err = t.unmark(BASE, 2 * P).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc_einval()));
        assert_eq!(t.marked(), vec![(BASE, BASE + P, 1)]);
        assert!(log.take().is_empty());
    }

    #[test]
    fn one_call_per_maximal_run() {
        let (t, log) = tracker();
        t.mark(BASE + P, P).unwrap();
        t.mark(BASE + 3 * P, P).unwrap();
        log.take();
        // Covers gap, marked, gap, marked, gap: three DontFork runs.
        t.mark(BASE, 5 * P).unwrap();
        assert_eq!(
            log.take(),
            vec![
                (BASE, P, Advice::DontFork),
                (BASE + 2 * P, P, Advice::DontFork),
                (BASE + 4 * P, P, Advice::DontFork)
            ]
        );
        // Removing the big one releases exactly those pages again.
        t.unmark(BASE, 5 * P).unwrap();
        assert_eq!(
            log.take(),
            vec![
                (BASE, P, Advice::DoFork),
                (BASE + 2 * P, P, Advice::DoFork),
                (BASE + 4 * P, P, Advice::DoFork)
            ]
        );
        // Adjacent count-1 plateaus form a single run.
        t.mark(BASE + 2 * P, P).unwrap();
        log.take();
        t.unmark(BASE + P, P).unwrap();
        t.unmark(BASE + 2 * P, P).unwrap();
        t.unmark(BASE + 3 * P, P).unwrap();
        assert!(t.is_empty());
    }

    #[test]
    fn neighbours_merge_and_the_map_stays_small() {
        let (t, _) = tracker();
        // Many adjacent single-page marks collapse into one entry.
        for i in 0..1000 {
            t.mark(BASE + i * P, P).unwrap();
        }
        assert_eq!(t.marked(), vec![(BASE, BASE + 1000 * P, 1)]);
        // Repeated overlapping mark/unmark cycles do not grow the map.
        for round in 0..100 {
            let off = (round * 7 % 900) * P;
            t.mark(BASE + off, 50 * P).unwrap();
            assert!(t.len() <= 3);
            t.unmark(BASE + off, 50 * P).unwrap();
            assert_eq!(t.len(), 1);
        }
        for i in (0..1000).rev() {
            t.unmark(BASE + i * P, P).unwrap();
            assert!(t.len() <= 1);
        }
        assert!(t.is_empty());
    }

    #[test]
    fn a_range_inside_an_entry_splits_it_in_three() {
        let (t, log) = tracker();
        t.mark(BASE, 10 * P).unwrap();
        t.mark(BASE + 4 * P, 2 * P).unwrap();
        assert_eq!(
            t.marked(),
            vec![
                (BASE, BASE + 4 * P, 1),
                (BASE + 4 * P, BASE + 6 * P, 2),
                (BASE + 6 * P, BASE + 10 * P, 1)
            ]
        );
        assert_eq!(log.take(), vec![(BASE, 10 * P, Advice::DontFork)]);
        t.unmark(BASE + 4 * P, 2 * P).unwrap();
        assert_eq!(t.marked(), vec![(BASE, BASE + 10 * P, 1)]);
        assert!(log.take().is_empty());
    }

    struct FailOn {
        log: Log,
        fail: Advice,
        errno: rustix::io::Errno,
    }

    impl Advisor for FailOn {
        fn advise(&self, addr: usize, len: usize, advice: Advice) -> io::Result<()> {
            if advice == self.fail {
                return Err(errno(self.errno));
            }
            self.log.advise(addr, len, advice)
        }
    }

    #[test]
    fn failed_dontfork_changes_nothing() {
        let log = Log::default();
        let t = RangeTracker::new(
            Box::new(FailOn {
                log: log.clone(),
                fail: Advice::DontFork,
                errno: rustix::io::Errno::NOMEM,
            }),
            PageSizing::Fixed(P),
        );
        let err = t.mark(BASE, 3 * P).unwrap_err();
        assert_eq!(
            err.raw_os_error(),
            Some(rustix::io::Errno::NOMEM.raw_os_error())
        );
        assert!(t.is_empty());
        assert!(log.take().is_empty());
    }

    #[test]
    fn failure_after_partial_progress_undoes_applied_runs() {
        struct FailAt(Log, Mutex<usize>, usize);
        impl Advisor for FailAt {
            fn advise(&self, addr: usize, len: usize, advice: Advice) -> io::Result<()> {
                let mut n = self.1.lock().unwrap();
                *n += 1;
                if *n == self.2 {
                    return Err(errno(rustix::io::Errno::AGAIN));
                }
                self.0.advise(addr, len, advice)
            }
        }
        let log = Log::default();
        let t = RangeTracker::new(
            Box::new(FailAt(log.clone(), Mutex::new(0), 3)),
            PageSizing::Fixed(P),
        );
        t.mark(BASE + P, P).unwrap(); // call 1
        log.take();
        // call 2: DontFork [BASE, +P) ok; call 3: [BASE+2P, +P) fails.
        let err = t.mark(BASE, 3 * P).unwrap_err();
        assert_eq!(
            err.raw_os_error(),
            Some(rustix::io::Errno::AGAIN.raw_os_error())
        );
        assert_eq!(t.marked(), vec![(BASE + P, BASE + 2 * P, 1)]);
        assert_eq!(
            log.take(),
            vec![(BASE, P, Advice::DontFork), (BASE, P, Advice::DoFork)]
        );
    }

    #[test]
    fn dofork_enomem_is_ignored_page_by_page() {
        let log = Log::default();
        let t = RangeTracker::new(
            Box::new(FailOn {
                log: log.clone(),
                fail: Advice::DoFork,
                errno: rustix::io::Errno::NOMEM,
            }),
            PageSizing::Fixed(P),
        );
        t.mark(BASE, 3 * P).unwrap();
        t.unmark(BASE, 3 * P).unwrap();
        assert!(t.is_empty());
    }

    #[test]
    fn dofork_other_errors_are_reported() {
        let log = Log::default();
        let t = RangeTracker::new(
            Box::new(FailOn {
                log: log.clone(),
                fail: Advice::DoFork,
                errno: rustix::io::Errno::PERM,
            }),
            PageSizing::Fixed(P),
        );
        t.mark(BASE, 3 * P).unwrap();
        let err = t.unmark(BASE, 3 * P).unwrap_err();
        assert_eq!(
            err.raw_os_error(),
            Some(rustix::io::Errno::PERM.raw_os_error())
        );
        assert_eq!(t.marked(), vec![(BASE, BASE + 3 * P, 1)]);
    }

    #[test]
    fn count_overflow_is_rejected() {
        let (t, _) = tracker();
        {
            let mut map = t.lock();
            map.insert(
                BASE,
                Span {
                    end: BASE + P,
                    count: u32::MAX,
                },
            );
        }
        let err = t.mark(BASE, P).unwrap_err();
        assert_eq!(
            err.raw_os_error(),
            Some(rustix::io::Errno::OVERFLOW.raw_os_error())
        );
    }

    #[test]
    fn smaps_parsing() {
        let smaps = "\
00400000-00452000 r-xp 00000000 08:02 173521      /usr/bin/dbus-daemon
Size:                328 kB
KernelPageSize:        4 kB
MMUPageSize:           4 kB
7f0000000000-7f0000400000 rw-s 00000000 00:0f 1234    /anon_hugepage (deleted)
Size:               4096 kB
KernelPageSize:     2048 kB
MMUPageSize:        2048 kB
7fff00000000-7fff00001000 rw-p 00000000 00:00 0
Size:                  4 kB
";
        assert_eq!(parse_kernel_page_size(smaps, 0x00400000), Some(4096));
        assert_eq!(parse_kernel_page_size(smaps, 0x00451fff), Some(4096));
        assert_eq!(parse_kernel_page_size(smaps, 0x7f0000200000), Some(2 << 20));
        assert_eq!(parse_kernel_page_size(smaps, 0x7f0000400000), None);
        assert_eq!(parse_kernel_page_size(smaps, 0x7fff00000000), None);
        assert_eq!(parse_kernel_page_size(smaps, 0x10), None);
        assert_eq!(
            parse_kernel_page_size("garbage\nKernelPageSize: x kB", 0),
            None
        );
    }

    #[test]
    fn real_smaps_reports_base_pages_for_heap_memory() {
        let v = Box::new([1u8; 100]);
        let size = kernel_page_size(v.as_ptr() as usize);
        assert_eq!(size, Some(rustix::param::page_size()));
    }

    #[test]
    fn huge_page_aware_tracker_rounds_to_the_mapping_page_size() {
        let log = Log::default();
        let t = RangeTracker::new(Box::new(log.clone()), PageSizing::HugePageAware);
        let v = Box::new([1u8; 100]);
        let addr = v.as_ptr() as usize;
        t.mark(addr, 1).unwrap();
        let p = rustix::param::page_size();
        assert_eq!(log.take(), vec![(addr & !(p - 1), p, Advice::DontFork)]);
        t.unmark(addr, 1).unwrap();
        assert!(t.is_empty());
    }
}
