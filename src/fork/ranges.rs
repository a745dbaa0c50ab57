//! Reference-counted tracking of `MADV_DONTFORK` page ranges.
//!
//! The tracker keeps a map of non-overlapping, page-aligned ranges, each with
//! the number of live registrations that cover it. Pages not in the map have
//! count 0. Neighbouring ranges with equal counts are merged where a change
//! adds or removes entries, and at the latest when their block of the map
//! fills up; a change that only moves the counts of entries already there
//! (a second registration of the same pages, its release, a range over
//! several plateaus) leaves them as they are. So a registration and its
//! release move counts and nothing else, and the map holds at most a
//! block's worth of such entries (64) per block however many times ranges
//! are marked and unmarked (`src/fork/plateaus.rs`).
//!
//! # The invariant: a count never claims protection that is not applied
//!
//! A page with count > 0 is `MADV_DONTFORK` in the kernel. To keep it so:
//!
//! * **Every mark applies `DontFork` to its whole range**, also to pages that
//!   are already counted. The kernel cannot tell the tracker that a counted
//!   page was unmapped and mapped anew (a new mapping never carries
//!   `MADV_DONTFORK`), so trusting the count would leave that new page
//!   inheritable while the tracker says it is protected. Re-applying advice a
//!   VMA already has changes nothing in the kernel and costs one system call
//!   (about 0.8 µs, see `docs/fork-safety.md`); registration itself costs
//!   tens of µs. Until the next mark covers it, a page that was remapped while
//!   counted is *not* protected: unmapping registered memory breaks the
//!   registration contract anyway (the device keeps the old pages pinned).
//! * **A failed unmark still releases its references.** When `DoFork` fails
//!   (e.g. `EAGAIN` at `vm.max_map_count`) the pages stay `DONTFORK`, which
//!   is harmless over-protection; had the counts stayed, a later mark of the
//!   reused address would have trusted them and issued no `DontFork` — and a
//!   later munmap + mmap there would have produced an unprotected page with a
//!   count. With the counts down, nothing is claimed.
//! * **A failed mark changes no count** and takes its `DontFork` back from the
//!   pages no registration covers (best effort: if that fails too, those
//!   pages stay over-protected).
//!
//! `DoFork` is issued only when a page's count crosses 1 → 0, once per
//! maximal contiguous run of such pages.
//!
//! # Forked children
//!
//! The state (map and lock) belongs to one process. It lives behind a
//! pointer tagged with the fork [`Generation`] it was created in; the first
//! use in a forked child finds the tag stale and replaces the state with a
//! fresh, empty one with a fresh lock. So a child never waits for a lock that
//! a thread of the parent held at `fork()` (that thread does not exist in
//! the child, and the lock would never be released), and it never trusts the
//! parent's counts, which describe pages the child does not have: pages with
//! `MADV_DONTFORK` are exactly the ones a child does not inherit. The
//! parent's copy of the state is leaked in the child (it may be half-updated),
//! once per fork and tracker. A child created by a raw `clone` system call
//! that bypasses the C library's `fork` is not noticed (see
//! `crate::process`).
//!
//! The lock is held across the advisor call, so that concurrent marks and
//! unmarks of overlapping ranges in one process see the kernel's advice and
//! the counts change together. Releasing it around the system call instead
//! would not make children safe: a fork can also come while another thread
//! holds the lock to update the map, and the parent's counts would still be
//! wrong for the child.

use crate::error::Errno;
use parking_lot::{Mutex, MutexGuard};
use std::fmt;
use std::sync::atomic::{AtomicPtr, Ordering};

use super::advisor::{Advice, Advisor};
#[cfg(test)]
use super::plateaus::Span;
use super::plateaus::{Entry, Plateaus, Pos, Recount};
use crate::process::Generation;

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

/// Reference-counted set of page ranges that must not be inherited across
/// `fork()`, applying `MADV_DONTFORK` / `MADV_DOFORK` through an [`Advisor`].
///
/// This is the data structure behind [`ForkSafety`](super::ForkSafety)
/// (libibverbs keeps the same information in a red-black tree inside
/// `ibv_dontfork_range` / `ibv_dofork_range`). All methods take `&self`; one
/// mutex serialises updates, and it is held while advice is applied so that
/// the kernel's view and the map never disagree between operations. In a
/// forked child the tracker starts empty, with a lock of its own (see the
/// [`fork` module documentation](super)).
///
/// Cost of [`mark`](Self::mark) / [`unmark`](Self::unmark): O(log n + k),
/// plus a shift of at most 64 entries when the number of entries changes,
/// for n entries in the map and k entries overlapping the range; plus one
/// advisor call per mark, and one per maximal run of pages crossing 1 → 0
/// per unmark.
pub struct RangeTracker {
    advisor: Box<dyn Advisor>,
    base_page: usize,
    huge_aware: bool,
    /// Always a valid pointer from `Box::into_raw`. Replaced (never freed
    /// while `self` lives) when its generation is stale.
    state: AtomicPtr<State>,
}

/// The per-process part of a tracker.
struct State {
    generation: Generation,
    map: Mutex<Ranges>,
}

impl State {
    fn fresh() -> *mut State {
        Box::into_raw(Box::new(State {
            generation: Generation::current(),
            map: Mutex::new(Ranges::default()),
        }))
    }
}

/// The map of count plateaus, and the scratch space one change reuses, so
/// that a mark or unmark allocates nothing once warm (the lock is held for
/// the whole change, so one set of scratch vectors serves every caller).
#[derive(Default)]
struct Ranges {
    map: Plateaus,
    /// The entries overlapping or touching the range being changed: from
    /// `lo` to before `hi` in the map, as `prepare` found them (`hi` only
    /// for a change in `next`).
    lo: Pos,
    hi: Pos,
    /// What replaces the entries `lo..hi` when the change is committed,
    /// unless `recount` says how to change them in place.
    next: Vec<Entry>,
    /// For a range that entries from block `lo.0` on cover exactly: the
    /// change in place that `commit` applies instead of `next`.
    recount: Option<Recount>,
    /// A copy of the entries `lo..hi` when they are in several blocks.
    old: Vec<Entry>,
}

impl Drop for RangeTracker {
    fn drop(&mut self) {
        let state = *self.state.get_mut();
        // SAFETY: `state` came from `Box::into_raw` and `&mut self` excludes
        // any other user.
        let current = unsafe { &*state }.generation.is_current();
        if current {
            // SAFETY: as above; nothing refers to the state any more.
            drop(unsafe { Box::from_raw(state) });
        }
        // A stale state is the parent's copy, possibly half-updated by a
        // thread that does not exist here: leak it rather than drop it.
    }
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

impl RangeTracker {
    /// Creates an empty tracker that applies advice through `advisor`.
    ///
    /// # Panics
    ///
    /// If `sizing` is [`PageSizing::Fixed`] with a size that is not a power
    /// of two.
    pub fn new(advisor: Box<dyn Advisor>, sizing: PageSizing) -> RangeTracker {
        let (base_page, huge_aware) = match sizing {
            PageSizing::System => (crate::page::page_size(), false),
            PageSizing::HugePageAware => (crate::page::page_size(), true),
            PageSizing::Fixed(size) => {
                assert!(size.is_power_of_two(), "page size must be a power of two");
                (size, false)
            }
        };
        RangeTracker {
            advisor,
            base_page,
            huge_aware,
            state: AtomicPtr::new(State::fresh()),
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

    /// Adds one reference to every page overlapping `[addr, addr + len)` and
    /// applies `DontFork` to all of them (also to pages already counted, in
    /// case they were unmapped and mapped anew since; see the
    /// [`fork` module documentation](super)).
    ///
    /// `len == 0` or `addr == 0` is a successful no-op. On error no count has
    /// changed, and `DoFork` has been applied (best effort) to the pages of
    /// the range that no registration covers, undoing whatever part of the
    /// `DontFork` the kernel did apply. Errors: `EINVAL` if the range wraps
    /// around the address space, `EOVERFLOW` if a page's count would exceed
    /// `u32::MAX`, or the advisor's error: with `madvise`, `ENOMEM` if part
    /// of the range is not mapped, `EAGAIN` if the process has reached
    /// `vm.max_map_count` mappings (every separate `DONTFORK` range splits
    /// the mapping around it; see [`max_map_count`](super::max_map_count)).
    pub fn mark(&self, addr: usize, len: usize) -> Result<(), Errno> {
        let Some((start, end, _)) = self.align(addr, len)? else {
            return Ok(());
        };
        let mut ranges = self.lock();
        if !ranges.prepare(start, end, true) {
            return Err(Errno::OVERFLOW);
        }
        if let Err(err) = self.advisor.advise(start, end - start, Advice::DontFork) {
            // madvise walks the range VMA by VMA and may have changed some
            // before failing. Take that back where nobody needs it; pages
            // already counted must stay DONTFORK.
            for (s, e) in ranges.uncounted(start, end) {
                // Best effort: if this fails too, the pages stay DONTFORK
                // with count 0, which protects more than needed, never less.
                let _ = self.advisor.advise(s, e - s, Advice::DoFork);
            }
            return Err(err);
        }
        ranges.commit(start, end);
        Ok(())
    }

    /// Removes one reference from every page overlapping `[addr, addr + len)`,
    /// applying `DoFork` to the pages whose count goes 1 → 0.
    ///
    /// `len == 0` or `addr == 0` is a successful no-op. `EINVAL`, and no
    /// change, if any of the pages is not marked.
    ///
    /// Otherwise the references are **always released**, even when an error
    /// is returned. A `DoFork` that fails is retried page by page; pages that
    /// are no longer mapped (`ENOMEM`) are skipped, since there is nothing to
    /// give back. Any other failure (with `madvise`, `EAGAIN`: the process is
    /// at `vm.max_map_count` and giving back part of a `DONTFORK` mapping
    /// would split it) leaves those pages `DONTFORK`, so children do not
    /// inherit them although no registration covers them any more. That is
    /// harmless for the parent and undone by the next mark and unmark of
    /// those pages. The first such error is returned after all runs were
    /// tried. Do not call `unmark` again for the same registration: its
    /// references are gone, so a retry would release another registration's
    /// or fail with `EINVAL`.
    pub fn unmark(&self, addr: usize, len: usize) -> Result<(), Errno> {
        let Some((start, end, granule)) = self.align(addr, len)? else {
            return Ok(());
        };
        let mut ranges = self.lock();
        if !ranges.prepare(start, end, false) {
            return Err(Errno::INVAL);
        }
        let mut first_error = None;
        for (s, e) in ranges.released(start, end) {
            if let Err(err) = self.dofork_run(s, e, granule) {
                first_error.get_or_insert(err);
            }
        }
        ranges.commit(start, end);
        first_error.map_or(Ok(()), Err)
    }

    /// Snapshot of the marked ranges as `(start, end_exclusive, count)`,
    /// ascending and non-overlapping; adjacent ranges that touch have
    /// different counts (one range per count plateau).
    pub fn marked(&self) -> Vec<(usize, usize, u32)> {
        self.lock()
            .map
            .plateaus()
            .map(|e| (e.start, e.end, e.count))
            .collect()
    }

    /// Number of count plateaus: the length of [`marked`](Self::marked).
    /// Counted on each call, O(n) in the entries of the map (which may hold
    /// a plateau in several: a registration and its release move counts
    /// and leave the entries, and a block of 64 entries merges them when
    /// it fills up).
    pub fn len(&self) -> usize {
        self.lock().map.plateaus().count()
    }

    /// Whether no page is marked.
    pub fn is_empty(&self) -> bool {
        self.lock().map.is_empty()
    }

    /// This process's state: the parent's state is replaced by a fresh one
    /// on first use in a forked child.
    fn state(&self) -> &State {
        let mut ptr = self.state.load(Ordering::Acquire);
        loop {
            // SAFETY: the pointer always comes from `Box::into_raw` and is
            // never freed while `self` is alive (stale states are leaked).
            let state = unsafe { &*ptr };
            if state.generation.is_current() {
                return state;
            }
            // A forked child. The stale state's lock may be held by a thread
            // that does not exist here, so never touch it.
            let fresh = State::fresh();
            match self
                .state
                .compare_exchange(ptr, fresh, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => ptr = fresh,
                Err(winner) => {
                    // Another thread of the child was first.
                    // SAFETY: `fresh` was never shared.
                    drop(unsafe { Box::from_raw(fresh) });
                    ptr = winner;
                }
            }
        }
    }

    /// The map, locked. A `parking_lot` lock has no poisoning, which costs
    /// a check on each lock and unlock of `std`'s: the map is only modified
    /// after all fallible work (advice) is done, so a panic in an advisor
    /// cannot leave it half-updated, and taking it after one is sound.
    fn lock(&self) -> MutexGuard<'_, Ranges> {
        self.state().map.lock()
    }

    /// Rounds `[addr, addr + len)` out to whole pages; `None` for the no-op
    /// cases. Returns `(start, end, granule)`.
    ///
    /// Inlined into `mark` and `unmark`; the huge-page lookup is a call of
    /// its own, so that it does not make this a large function that a
    /// user's build (the crate as a dependency) calls instead, which cost
    /// some 40 instructions per call (`oracle/benches/fork_tracker.rs`).
    #[inline(always)]
    fn align(&self, addr: usize, len: usize) -> Result<Option<(usize, usize, usize)>, Errno> {
        if addr == 0 || len == 0 {
            return Ok(None);
        }
        let end = addr.checked_add(len).ok_or(Errno::INVAL)?;
        let granule = if self.huge_aware {
            self.huge_granule(addr)
        } else {
            self.base_page
        };
        let start = addr & !(granule - 1);
        let end = end.checked_add(granule - 1).ok_or(Errno::INVAL)? & !(granule - 1);
        Ok(Some((start, end, granule)))
    }

    /// The page size of the mapping that holds `addr` (at least the base
    /// page), for a huge-page-aware tracker.
    #[cold]
    #[inline(never)]
    fn huge_granule(&self, addr: usize) -> usize {
        kernel_page_size(addr)
            .unwrap_or(self.base_page)
            .max(self.base_page)
    }

    /// `DoFork` on `[start, end)`, page by page if the whole run fails,
    /// skipping unmapped pages (`ENOMEM`). Returns the first other error;
    /// pages up to it have been given back.
    fn dofork_run(&self, start: usize, end: usize, granule: usize) -> Result<(), Errno> {
        if self
            .advisor
            .advise(start, end - start, Advice::DoFork)
            .is_ok()
        {
            return Ok(());
        }
        // Possibly because part of the range is already unmapped (ENOMEM).
        // Apply it page by page to reach every page that is still mapped.
        let mut page = start;
        while page < end {
            match self.advisor.advise(page, granule, Advice::DoFork) {
                Ok(()) => {}
                Err(Errno::NOMEM) => {}
                Err(e) => return Err(e),
            }
            page += granule;
        }
        Ok(())
    }
}

impl Ranges {
    /// Prepares one more (`mark`) or one less reference on every page of
    /// `[start, end)`, changing nothing yet: finds the entries that overlap
    /// or touch the range (one lookup) and computes in `next` what replaces
    /// them (their parts outside the range unchanged, the range's pages with
    /// their new counts, equal neighbours merged, zeros dropped): by a
    /// shortcut for the common shapes, otherwise by [`rebuild`]; or, for a
    /// range that entries cover without a gap (a second registration of the
    /// same pages, the release of one of two, a range over several
    /// plateaus), as a [`Recount`] in place, which copies no entry and only
    /// shifts the block when an edge entry is split. False if the change is
    /// impossible: a count at `u32::MAX` for a mark, a page with count 0 for
    /// an unmark.
    ///
    /// The lookup and the change in place within one block
    /// ([`recount_in`]) are inline in `mark` and `unmark`, so that a
    /// second reference (or its release) and a range over several plateaus
    /// call nothing but the advice; the other shapes are worked out by
    /// [`prepare_shape`](Self::prepare_shape), out of line.
    #[inline(always)]
    fn prepare(&mut self, start: usize, end: usize, mark: bool) -> bool {
        self.recount = None;
        self.lo = self.map.first_reaching(start);
        match recount_in(self.map.block(self.lo.0), self.lo.1, start, end, mark) {
            Ok(r) => {
                self.recount = Some(r);
                true
            }
            Err(past) => self.prepare_shape(past, start, end, mark),
        }
    }

    /// [`prepare`](Self::prepare) past its lookup (`lo` found, `i` past the
    /// entries of its block that overlap or touch the range) for every
    /// shape [`recount_in`] did not take: a range in a gap, one with a gap
    /// in it, one whose entries go on into the next block (moved into one
    /// block where the blocks allow, and then perhaps a recount after
    /// all), one with a count that cannot move.
    #[inline(never)]
    fn prepare_shape(&mut self, mut i: usize, start: usize, end: usize, mark: bool) -> bool {
        let Ranges {
            map,
            lo,
            hi,
            next,
            old,
            recount,
        } = self;
        // Usually all in one block; when they go on into the next, moved
        // into one where the blocks allow.
        if i == map.block(lo.0).len() && map.goes_on(lo.0, end) {
            let Some(at) = map.gather(lo.0, lo.1, end) else {
                old.clear();
                *hi = map.scan(*lo, end, |e| old.push(*e));
                return prepare_across(*lo, *hi, old, start, end, mark, recount, next);
            };
            // Gathered: all in block `at.0` now, the next one starting
            // after `end`.
            *lo = at;
            debug_assert!(!map.goes_on(lo.0, end));
            match recount_in(map.block(lo.0), lo.1, start, end, mark) {
                Ok(r) => {
                    *recount = Some(r);
                    return true;
                }
                Err(past) => i = past,
            }
        }
        *hi = (lo.0, i);
        let old = &map.block(lo.0)[lo.1..i];
        let shortcut = if mark {
            mark_shortcut(old, start, end, next)
        } else {
            unmark_shortcut(old, start, end, next)
        };
        if let Some(possible) = shortcut {
            return possible;
        }
        rebuild_either(mark, old, start, end, next)
    }

    /// Puts the entries [`prepare`](Self::prepare) computed in place of
    /// those it found.
    #[inline(always)]
    fn commit(&mut self, start: usize, end: usize) {
        match self.recount {
            Some(r) => self.map.recount(self.lo.0, r, (start, end)),
            None => self.map.replace(self.lo, self.hi, &self.next),
        }
    }

    /// The maximal runs of pages of `[start, end)` whose count the prepared
    /// unmark takes from 1 to 0: those that the new entries leave
    /// uncovered (none for a change in place, which keeps every entry).
    fn released(&self, start: usize, end: usize) -> impl Iterator<Item = (usize, usize)> + '_ {
        let end = if self.recount.is_some() { start } else { end };
        uncovered(&self.next, start, end)
    }

    /// The maximal runs of pages of `[start, end)` with count 0, while the
    /// map still holds the entries [`prepare`](Self::prepare) found.
    #[cold]
    fn uncounted(&self, start: usize, end: usize) -> Vec<(usize, usize)> {
        let mut old = Vec::new();
        self.map.scan(self.lo, end, |e| old.push(*e));
        uncovered(&old, start, end).collect()
    }
}

/// The index after the entries of `block` from `at` on that start at or
/// before `end`.
#[inline(always)]
fn past_range(block: &[Entry], at: usize, end: usize) -> usize {
    let mut i = at;
    while i < block.len() && block[i].start <= end {
        i += 1;
    }
    i
}

/// The change in place ([`Recount`]) for a range that `entries` from `at`
/// on (`at` the first that ends at or after `start`) cover without a gap,
/// none of them at a count that cannot move (0 after an unmark, past
/// `u32::MAX` after a mark): a second registration of the same pages, the
/// release of one of several, a range over several plateaus. An entry the
/// range begins or ends inside is split there; none merges with its
/// neighbour, even where their counts are now equal (see the module
/// documentation). Otherwise `Err` with the index past the entries that
/// overlap or touch the range, for [`Ranges::prepare_shape`]: also when
/// `entries` end before the range does (the next block may hold the rest).
#[inline(always)]
fn recount_in(
    entries: &[Entry],
    at: usize,
    start: usize,
    end: usize,
    mark: bool,
) -> Result<Recount, usize> {
    let (delta, floor) = if mark { (1, u32::MAX) } else { (u32::MAX, 1) };
    // An entry ending at `start` touches the range without overlapping it.
    let from = at + usize::from(entries.get(at).is_some_and(|e| e.end == start));
    let Some(&first) = entries.get(from) else {
        return Err(from);
    };
    if first.start >= end {
        // A range in a gap: no entry overlaps it.
        return Err(from + usize::from(first.start == end));
    }
    if (first.start, first.end) == (start, end) && first.count != floor {
        // The commonest shape: the range is one entry (a second reference
        // to a registration's pages, or its release).
        return Ok(Recount {
            from,
            to: from + 1,
            delta,
            split_left: false,
            split_right: false,
        });
    }
    // The entries overlapping the range, each where the one before ends.
    let mut i = from;
    let mut cur = start;
    while let Some(e) = entries.get(i) {
        if e.start >= end {
            break;
        }
        if e.start > cur || e.count == floor {
            return Err(past_range(entries, i, end));
        }
        cur = e.end;
        i += 1;
    }
    if cur < end {
        return Err(past_range(entries, i, end));
    }
    Ok(Recount {
        from,
        to: i,
        delta,
        split_left: first.start < start,
        split_right: cur > end,
    })
}

/// [`rebuild`] for a mark in the common shapes, with fewer tests: a range
/// in a gap (touching no entry, one, or one on each side) or within one
/// entry. `None` for the other shapes.
#[inline(always)]
fn mark_shortcut(old: &[Entry], start: usize, end: usize, next: &mut Vec<Entry>) -> Option<bool> {
    let gap = Entry {
        start,
        end,
        count: 1,
    };
    next.clear();
    match *old {
        [] => next.push(gap),
        [a] if a.end == start => {
            if a.count == 1 {
                next.push(Entry {
                    start: a.start,
                    ..gap
                });
            } else {
                next.extend_from_slice(&[a, gap]);
            }
        }
        [b] if b.start == end => {
            if b.count == 1 {
                next.push(Entry { end: b.end, ..gap });
            } else {
                next.extend_from_slice(&[gap, b]);
            }
        }
        [e] if e.start <= start && end <= e.end => {
            if e.count == u32::MAX {
                return Some(false);
            }
            recount_within(e, start, end, e.count + 1, next);
        }
        [a, b] if a.end == start && b.start == end => match (a.count == 1, b.count == 1) {
            (true, true) => next.push(Entry {
                start: a.start,
                end: b.end,
                count: 1,
            }),
            (true, false) => next.extend_from_slice(&[
                Entry {
                    start: a.start,
                    ..gap
                },
                b,
            ]),
            (false, true) => next.extend_from_slice(&[a, Entry { end: b.end, ..gap }]),
            (false, false) => next.extend_from_slice(&[a, gap, b]),
        },
        _ => return None,
    }
    Some(true)
}

/// [`rebuild`] for an unmark of a range within one entry that no other
/// entry touches. `None` for the other shapes.
#[inline(always)]
fn unmark_shortcut(old: &[Entry], start: usize, end: usize, next: &mut Vec<Entry>) -> Option<bool> {
    let [e] = *old else {
        return None;
    };
    if !(e.start <= start && end <= e.end) {
        return None;
    }
    next.clear();
    recount_within(e, start, end, e.count - 1, next);
    Some(true)
}

/// Pushes to `next` the entry `e`, which holds `[start, end)` and which no
/// other entry touches (so nothing merges), with the range's pages at
/// `count` (dropped at 0) and its parts before and after unchanged.
#[inline(always)]
fn recount_within(e: Entry, start: usize, end: usize, count: u32, next: &mut Vec<Entry>) {
    if e.start < start {
        next.push(Entry { end: start, ..e });
    }
    if count > 0 {
        next.push(Entry { start, end, count });
    }
    if end < e.end {
        next.push(Entry { start: end, ..e });
    }
}

/// [`Ranges::prepare`] for a range whose entries `old` (a copy) lie in
/// several blocks, from `lo` to before `hi`: in place if they are in two
/// blocks and cover the range without a split, otherwise by [`rebuild`].
#[cold]
#[allow(clippy::too_many_arguments)]
fn prepare_across(
    lo: Pos,
    hi: Pos,
    old: &[Entry],
    start: usize,
    end: usize,
    mark: bool,
    recount: &mut Option<Recount>,
    next: &mut Vec<Entry>,
) -> bool {
    if hi.0 == lo.0 + 1 {
        // Indices from the start of block `lo.0`, on into the next.
        *recount = recount_in(old, 0, start, end, mark)
            .ok()
            .filter(|r| !(r.split_left || r.split_right))
            .map(|r| Recount {
                from: lo.1 + r.from,
                to: lo.1 + r.to,
                ..r
            });
    }
    recount.is_some() || rebuild_either(mark, old, start, end, next)
}

/// [`rebuild`] for a mark or an unmark.
#[inline(always)]
fn rebuild_either(
    mark: bool,
    old: &[Entry],
    start: usize,
    end: usize,
    next: &mut Vec<Entry>,
) -> bool {
    if mark {
        rebuild::<true>(old, start, end, next)
    } else {
        rebuild::<false>(old, start, end, next)
    }
}

/// Computes in `next` what replaces `old`, the entries that overlap or
/// touch `[start, end)` (ascending), when a mark (`MARK`) or an unmark
/// adds or removes one reference on every page of the range: their parts
/// outside the range unchanged, the range's pages with their new counts,
/// equal neighbours merged, zeros dropped. False if the change is
/// impossible: a count at `u32::MAX` for a mark, a page with count 0 for
/// an unmark.
///
/// Equal neighbours that the change makes can only meet at the range's two
/// edges: inside it every count moves by one, so entries that differed
/// still differ, and a mark's uncounted pages (count 1) lie between counted
/// ones (now 2 or more). So the pieces are pushed as they come and only the
/// first two and the last two are merged when equal. (Entries that were
/// equal neighbours already, which a [`Recount`] may leave, stay so.)
#[inline(always)]
fn rebuild<const MARK: bool>(
    old: &[Entry],
    start: usize,
    end: usize,
    next: &mut Vec<Entry>,
) -> bool {
    next.clear();
    next.reserve(2 * old.len() + 1);
    let mut possible = true;
    // Only the first entry can start before the range, only the last end
    // after it.
    if let Some(e) = old.first().filter(|e| e.start < start) {
        next.push(Entry {
            start: e.start,
            end: e.end.min(start),
            count: e.count,
        });
    }
    // The first page of the range no entry has covered yet.
    let mut cur = start;
    for e in old {
        let (from, to) = (e.start.max(start), e.end.min(end));
        if from > cur {
            // Uncounted pages: a mark counts them once, an unmark must not
            // meet them.
            possible &= MARK;
            next.push(Entry {
                start: cur,
                end: from,
                count: 1,
            });
        }
        if from < to {
            if MARK {
                possible &= e.count < u32::MAX;
                next.push(Entry {
                    start: from,
                    end: to,
                    count: e.count.wrapping_add(1),
                });
            } else if e.count > 1 {
                next.push(Entry {
                    start: from,
                    end: to,
                    count: e.count - 1,
                });
            }
        }
        cur = cur.max(to);
    }
    if cur < end {
        possible &= MARK;
        next.push(Entry {
            start: cur,
            end,
            count: 1,
        });
    }
    if let Some(e) = old.last().filter(|e| e.end > end) {
        next.push(Entry {
            start: e.start.max(end),
            end: e.end,
            count: e.count,
        });
    }
    merge_edges(next);
    possible
}

/// Merges the first two and the last two of `next` where they touch and
/// have equal counts (see [`rebuild`]). The last two first: when all three
/// of a range in a gap merge, neither merge moves an entry.
#[inline(always)]
fn merge_edges(next: &mut Vec<Entry>) {
    if let [.., a, b] = &mut next[..] {
        if a.end == b.start && a.count == b.count {
            a.end = b.end;
            next.pop();
        }
    }
    if let [a, b, rest @ ..] = &mut next[..] {
        if a.end == b.start && a.count == b.count {
            a.end = b.end;
            if rest.is_empty() {
                next.pop();
            } else {
                next.remove(1);
            }
        }
    }
}

/// The maximal parts of `[start, end)` that none of `entries` (ascending,
/// not overlapping) covers.
fn uncovered(
    entries: &[Entry],
    start: usize,
    end: usize,
) -> impl Iterator<Item = (usize, usize)> + '_ {
    let mut cur = start;
    let mut entries = entries.iter();
    std::iter::from_fn(move || {
        while cur < end {
            let Some(e) = entries.next() else {
                let gap = (cur, end);
                cur = end;
                return Some(gap);
            };
            let (from, to) = (e.start.clamp(start, end), e.end.clamp(start, end));
            let gap = (cur, from);
            cur = cur.max(to);
            if gap.0 < gap.1 {
                return Some(gap);
            }
        }
        None
    })
}

/// The `KernelPageSize` of the mapping containing `addr`, from
/// `/proc/self/smaps`.
pub(crate) fn kernel_page_size(addr: usize) -> Option<usize> {
    let smaps = std::fs::read_to_string("/proc/self/smaps").ok()?;
    parse_kernel_page_size(&smaps, addr)
}

pub(crate) fn parse_kernel_page_size(smaps: &str, addr: usize) -> Option<usize> {
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
pub(crate) fn mapping_header(line: &str) -> Option<(usize, usize)> {
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
        fn advise(&self, addr: usize, len: usize, advice: Advice) -> Result<(), Errno> {
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
        // Straddling a page boundary covers both pages; the mark applies
        // DontFork to both, also to the page already counted.
        t.mark(BASE + P - 1, 2).unwrap();
        assert_eq!(
            t.marked(),
            vec![(BASE, BASE + P, 2), (BASE + P, BASE + 2 * P, 1)]
        );
        assert_eq!(log.take(), vec![(BASE, 2 * P, Advice::DontFork)]);
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
        assert_eq!(err, Errno::INVAL);
        let err = t.mark(usize::MAX - 10, 5).unwrap_err();
        assert_eq!(err, Errno::INVAL);
        assert!(t.is_empty());
    }

    #[test]
    fn unmarking_unmarked_pages_is_rejected_without_change() {
        let (t, log) = tracker();
        t.mark(BASE, P).unwrap();
        log.take();
        let err = t.unmark(BASE, 2 * P).unwrap_err();
        assert_eq!(err, Errno::INVAL);
        assert_eq!(t.marked(), vec![(BASE, BASE + P, 1)]);
        assert!(log.take().is_empty());
    }

    #[test]
    fn one_dontfork_per_mark_and_one_dofork_per_maximal_run() {
        let (t, log) = tracker();
        t.mark(BASE + P, P).unwrap();
        t.mark(BASE + 3 * P, P).unwrap();
        log.take();
        // Covers gap, marked, gap, marked, gap: one DontFork for all of it.
        t.mark(BASE, 5 * P).unwrap();
        assert_eq!(log.take(), vec![(BASE, 5 * P, Advice::DontFork)]);
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

    /// The entries the map stores (a plateau may take several).
    fn stored(t: &RangeTracker) -> usize {
        t.lock().map.iter().count()
    }

    #[test]
    fn neighbours_merge_and_the_map_stays_small() {
        let (t, _) = tracker();
        // Many adjacent single-page marks collapse into one entry.
        for i in 0..1000 {
            t.mark(BASE + i * P, P).unwrap();
        }
        assert_eq!(t.marked(), vec![(BASE, BASE + 1000 * P, 1)]);
        assert_eq!(stored(&t), 1);
        // Repeated overlapping mark/unmark cycles leave the plateau as it
        // was. Each unmark leaves the three entries its mark split the one
        // into (a recount merges nothing), until the block fills up and
        // merges them: the map never stores more than a block's worth.
        let mut most = 0;
        for round in 0..100 {
            let off = (round * 7 % 900) * P;
            t.mark(BASE + off, 50 * P).unwrap();
            assert!(t.len() <= 3);
            t.unmark(BASE + off, 50 * P).unwrap();
            assert_eq!(t.len(), 1);
            most = most.max(stored(&t));
        }
        // It fills the block: the recounts merged nothing until then.
        assert!((51..=64).contains(&most), "{most} entries stored");
        for i in (0..1000).rev() {
            t.unmark(BASE + i * P, P).unwrap();
            assert!(t.len() <= 1);
            assert!(stored(&t) <= 64);
        }
        assert!(t.is_empty());
        assert_eq!(stored(&t), 0);
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
        assert_eq!(
            log.take(),
            vec![
                (BASE, 10 * P, Advice::DontFork),
                (BASE + 4 * P, 2 * P, Advice::DontFork)
            ]
        );
        t.unmark(BASE + 4 * P, 2 * P).unwrap();
        assert_eq!(t.marked(), vec![(BASE, BASE + 10 * P, 1)]);
        assert!(log.take().is_empty());
    }

    /// Regression: a range whose last pages are uncounted, with an entry
    /// starting right at its end (touching it), counts those pages once and
    /// merges them with both neighbours.
    #[test]
    fn a_gap_before_an_entry_touching_the_end_is_counted_once() {
        let (t, log) = tracker();
        t.mark(BASE, P).unwrap();
        t.mark(BASE + 2 * P, P).unwrap();
        t.mark(BASE + 4 * P, P).unwrap();
        log.take();
        // Pages 1..4: gap, counted, gap; entries touch it on both sides.
        t.mark(BASE + P + 33, 2 * P).unwrap();
        assert_eq!(
            t.marked(),
            vec![
                (BASE, BASE + 2 * P, 1),
                (BASE + 2 * P, BASE + 3 * P, 2),
                (BASE + 3 * P, BASE + 5 * P, 1)
            ]
        );
        assert_eq!(log.take(), vec![(BASE + P, 3 * P, Advice::DontFork)]);
        t.unmark(BASE + P + 33, 2 * P).unwrap();
        assert_eq!(
            log.take(),
            vec![
                (BASE + P, P, Advice::DoFork),
                (BASE + 3 * P, P, Advice::DoFork)
            ]
        );
        assert_eq!(
            t.marked(),
            vec![
                (BASE, BASE + P, 1),
                (BASE + 2 * P, BASE + 3 * P, 1),
                (BASE + 4 * P, BASE + 5 * P, 1)
            ]
        );
    }

    struct FailOn {
        log: Log,
        fail: Advice,
        errno: rustix::io::Errno,
    }

    impl Advisor for FailOn {
        fn advise(&self, addr: usize, len: usize, advice: Advice) -> Result<(), Errno> {
            if advice == self.fail {
                return Err(self.errno);
            }
            self.log.advise(addr, len, advice)
        }
    }

    /// A tracker whose advisor logs every call and fails each `fail` with
    /// `errno`.
    fn failing(fail: Advice, errno: Errno) -> (RangeTracker, Log) {
        let log = Log::default();
        let advisor = FailOn {
            log: log.clone(),
            fail,
            errno,
        };
        (
            RangeTracker::new(Box::new(advisor), PageSizing::Fixed(P)),
            log,
        )
    }

    /// A second reference to each of many separate ranges (entries at every
    /// place in their blocks, the blocks' last ones included) moves only its
    /// entry's count, and so does its release; only the last release gives
    /// the pages back.
    #[test]
    fn second_references_to_exact_entries_in_every_block_place() {
        let (t, log) = tracker();
        let n = 300;
        let range = |k: usize| (BASE + 2 * k * P, P);
        for k in 0..n {
            let (a, l) = range(k);
            t.mark(a, l).unwrap();
        }
        for k in (0..n).rev() {
            let (a, l) = range(k);
            t.mark(a, l).unwrap();
        }
        let twice: Vec<_> = (0..n).map(|k| (range(k).0, range(k).0 + P, 2)).collect();
        assert_eq!(t.marked(), twice);
        log.take();
        for k in 0..n {
            let (a, l) = range(k);
            t.unmark(a, l).unwrap();
        }
        assert!(log.take().is_empty(), "no page went 1 -> 0");
        let once: Vec<_> = (0..n).map(|k| (range(k).0, range(k).0 + P, 1)).collect();
        assert_eq!(t.marked(), once);
        for k in (0..n).rev() {
            let (a, l) = range(k);
            t.unmark(a, l).unwrap();
        }
        assert!(t.is_empty());
        assert_eq!(log.take().len(), n, "one DoFork per range");
    }

    #[test]
    fn failed_dontfork_changes_nothing() {
        let (t, log) = failing(Advice::DontFork, Errno::NOMEM);
        let err = t.mark(BASE, 3 * P).unwrap_err();
        assert_eq!(err, Errno::NOMEM);
        assert!(t.is_empty());
        // Whatever part of the range the kernel did mark is given back.
        assert_eq!(log.take(), vec![(BASE, 3 * P, Advice::DoFork)]);
    }

    #[test]
    fn failed_mark_gives_back_only_uncounted_pages() {
        struct FailAt(Log, Mutex<usize>, usize);
        impl Advisor for FailAt {
            fn advise(&self, addr: usize, len: usize, advice: Advice) -> Result<(), Errno> {
                let mut n = self.1.lock().unwrap();
                *n += 1;
                if *n == self.2 {
                    return Err(Errno::AGAIN);
                }
                self.0.advise(addr, len, advice)
            }
        }
        let log = Log::default();
        let t = RangeTracker::new(
            Box::new(FailAt(log.clone(), Mutex::new(0), 2)),
            PageSizing::Fixed(P),
        );
        t.mark(BASE + P, P).unwrap(); // call 1
        log.take();
        // Call 2, DontFork of [BASE, +3P), fails: the kernel may have marked
        // part of it, so the pages no registration covers get DoFork; the
        // counted page in the middle stays DontFork.
        let err = t.mark(BASE, 3 * P).unwrap_err();
        assert_eq!(err, Errno::AGAIN);
        assert_eq!(t.marked(), vec![(BASE + P, BASE + 2 * P, 1)]);
        assert_eq!(
            log.take(),
            vec![(BASE, P, Advice::DoFork), (BASE + 2 * P, P, Advice::DoFork)]
        );
    }

    /// An advisor that panics leaves the map as it was and the tracker
    /// usable (its lock has no poisoning to recover from).
    #[test]
    fn a_panicking_advisor_changes_nothing() {
        struct PanicOnce(Log, std::sync::atomic::AtomicBool);
        impl Advisor for PanicOnce {
            fn advise(&self, addr: usize, len: usize, advice: Advice) -> Result<(), Errno> {
                if !self.1.swap(true, std::sync::atomic::Ordering::Relaxed) {
                    panic!("advisor panics once");
                }
                self.0.advise(addr, len, advice)
            }
        }
        let log = Log::default();
        let t = RangeTracker::new(
            Box::new(PanicOnce(log.clone(), Default::default())),
            PageSizing::Fixed(P),
        );
        let panicked =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| t.mark(BASE, 2 * P)));
        assert!(panicked.is_err());
        assert!(t.is_empty(), "nothing counted for the mark that panicked");
        t.mark(BASE, 2 * P).unwrap();
        assert_eq!(t.marked(), vec![(BASE, BASE + 2 * P, 1)]);
        t.unmark(BASE, 2 * P).unwrap();
        assert!(t.is_empty());
        assert_eq!(
            log.take(),
            vec![
                (BASE, 2 * P, Advice::DontFork),
                (BASE, 2 * P, Advice::DoFork)
            ]
        );
    }

    #[test]
    fn dofork_enomem_is_ignored_page_by_page() {
        let (t, _log) = failing(Advice::DoFork, Errno::NOMEM);
        t.mark(BASE, 3 * P).unwrap();
        t.unmark(BASE, 3 * P).unwrap();
        assert!(t.is_empty());
    }

    /// Regression (issue 9, defect 6): at `vm.max_map_count` DOFORK fails
    /// with EAGAIN. The reference must be released anyway, so that the next
    /// mark of the page issues DONTFORK again instead of trusting a count
    /// whose protection is unknown, and the next unmark issues DOFORK.
    #[test]
    fn failed_dofork_releases_and_the_next_mark_protects_again() {
        use std::sync::atomic::{AtomicBool, Ordering};
        /// Fails every DoFork with EAGAIN while the flag is set.
        #[derive(Clone)]
        struct AtLimit(Log, Arc<AtomicBool>);
        impl Advisor for AtLimit {
            fn advise(&self, addr: usize, len: usize, advice: Advice) -> Result<(), Errno> {
                if advice == Advice::DoFork && self.1.load(Ordering::SeqCst) {
                    return Err(Errno::AGAIN);
                }
                self.0.advise(addr, len, advice)
            }
        }
        let log = Log::default();
        let at_limit = AtLimit(log.clone(), Arc::new(AtomicBool::new(true)));
        let t = RangeTracker::new(Box::new(at_limit.clone()), PageSizing::Fixed(P));
        t.mark(BASE, P).unwrap();
        assert_eq!(log.take(), vec![(BASE, P, Advice::DontFork)]);
        let err = t.unmark(BASE, P).unwrap_err();
        assert_eq!(err, Errno::AGAIN);
        assert!(t.is_empty(), "the reference is released despite the error");
        at_limit.1.store(false, Ordering::SeqCst);
        t.mark(BASE, P).unwrap();
        assert_eq!(log.take(), vec![(BASE, P, Advice::DontFork)]);
        t.unmark(BASE, P).unwrap();
        assert_eq!(log.take(), vec![(BASE, P, Advice::DoFork)]);
        assert!(t.is_empty());
    }

    #[test]
    fn dofork_other_errors_are_reported() {
        let (t, _log) = failing(Advice::DoFork, Errno::PERM);
        t.mark(BASE, 3 * P).unwrap();
        let err = t.unmark(BASE, 3 * P).unwrap_err();
        assert_eq!(err, Errno::PERM);
        // The reference is released all the same.
        assert!(t.is_empty());
    }

    #[test]
    fn every_run_is_tried_and_the_first_error_returned() {
        /// Fails the first DoFork call (and its page-by-page retry).
        struct FailFirstRun(Log, Mutex<Option<usize>>);
        impl Advisor for FailFirstRun {
            fn advise(&self, addr: usize, len: usize, advice: Advice) -> Result<(), Errno> {
                let mut failing = self.1.lock().unwrap();
                if advice == Advice::DoFork {
                    let start = *failing.get_or_insert(addr);
                    if addr == start {
                        return Err(Errno::AGAIN);
                    }
                }
                self.0.advise(addr, len, advice)
            }
        }
        let log = Log::default();
        let t = RangeTracker::new(
            Box::new(FailFirstRun(log.clone(), Mutex::new(None))),
            PageSizing::Fixed(P),
        );
        // Counts 1, 2, 1: releasing the outer range gives back two runs.
        t.mark(BASE, 3 * P).unwrap();
        t.mark(BASE + P, P).unwrap();
        log.take();
        let err = t.unmark(BASE, 3 * P).unwrap_err();
        assert_eq!(err, Errno::AGAIN);
        assert_eq!(log.take(), vec![(BASE + 2 * P, P, Advice::DoFork)]);
        assert_eq!(t.marked(), vec![(BASE + P, BASE + 2 * P, 1)]);
    }

    #[test]
    fn count_overflow_is_rejected() {
        let (t, _) = tracker();
        {
            let mut ranges = t.lock();
            ranges.map.insert(
                BASE,
                Span {
                    end: BASE + P,
                    count: u32::MAX,
                },
            );
        }
        let err = t.mark(BASE, P).unwrap_err();
        assert_eq!(err, Errno::OVERFLOW);
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
        assert_eq!(size, Some(crate::page::page_size()));
    }

    #[test]
    fn huge_page_aware_tracker_rounds_to_the_mapping_page_size() {
        let log = Log::default();
        let t = RangeTracker::new(Box::new(log.clone()), PageSizing::HugePageAware);
        let v = Box::new([1u8; 100]);
        let addr = v.as_ptr() as usize;
        t.mark(addr, 1).unwrap();
        let p = crate::page::page_size();
        assert_eq!(log.take(), vec![(addr & !(p - 1), p, Advice::DontFork)]);
        t.unmark(addr, 1).unwrap();
        assert!(t.is_empty());
    }
}
