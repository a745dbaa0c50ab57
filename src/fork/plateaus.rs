//! The fork tracker's ordered set of count plateaus: a sorted sequence of
//! non-overlapping entries kept in blocks of at most [`MAX`] entries, with
//! the first start of every block in a flat array beside them.
//!
//! A lookup is two binary searches over contiguous memory (the block
//! starts, then one block), where a `BTreeMap` descends through a node per
//! level with a linear search in each; the neighbours of a position are the
//! entries next to it in its block. A change replaces the run of entries a
//! range touches with its new entries in one go: in place when as many come
//! as go (a count changed), otherwise by shifting the rest of one block (at
//! most [`MAX`] entries). A range that entries cover without a gap changes
//! their counts where they are ([`Recount`]): no new entries to write but an
//! edge entry split where the range begins or ends inside it.
//!
//! Such a change leaves each entry as it is even where its count now
//! equals its neighbour's, so that a range marked and unmarked again (a
//! registration and its release) moves counts and nothing else; a change
//! that replaces entries merges equal neighbours at its edges. Equal
//! neighbours left so are merged when their block outgrows [`MAX`], before
//! it is split: a block is split only when it holds more than [`MAX`]
//! entries that differ from the one before. Blocks are merged with a
//! neighbour when they shrink below [`MIN`]; only then, and when a change
//! spans blocks, is memory allocated or freed.

/// The most entries a block holds after a change.
const MAX: usize = 64;
/// Below this many entries a block is merged into a neighbour.
const MIN: usize = 16;

/// The extent and count of one entry, as [`Plateaus::insert`] takes it.
#[cfg(test)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Span {
    pub(super) end: usize,
    pub(super) count: u32,
}

/// One entry: `[start, end)` with `count` references (a plateau, or part
/// of one whose neighbours have the same count).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Entry {
    pub(super) start: usize,
    pub(super) end: usize,
    pub(super) count: u32,
}

/// Copies `src` into `dst` (of the same length) entry by entry: the few
/// entries of one change, where `copy_from_slice` would call `memcpy`.
#[inline(always)]
fn copy_entries(dst: &mut [Entry], src: &[Entry]) {
    for (d, s) in dst.iter_mut().zip(src) {
        d.start = s.start;
        d.end = s.end;
        d.count = s.count;
    }
}

/// A place between entries, as (block, index in the block).
pub(super) type Pos = (usize, usize);

/// A change that moves the count of every entry `from..to` of a block by
/// `delta` (1 or `u32::MAX`, i.e. one less, by wrapping addition) and keeps
/// the entries themselves: what a mark or unmark of a range that those
/// entries cover without a gap comes to. An edge entry that the range
/// begins or ends inside is split there (`split_left` at the range's start,
/// `split_right` at its end, which [`Plateaus::recount`] takes): its part
/// outside the range stays at its old count, as a new entry beside it.
/// Nothing merges (see the [module documentation](self)). A `to` past the
/// block's end goes on into the next block (a range over a block's edge);
/// then nothing is split.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Recount {
    pub(super) from: usize,
    pub(super) to: usize,
    pub(super) delta: u32,
    pub(super) split_left: bool,
    pub(super) split_right: bool,
}

/// Entries ascending by start, never overlapping, each with a count of 1 or
/// more; neighbours may have equal counts. Invariants: no block is empty,
/// `firsts[b]` is the start of `blocks[b]`'s first entry, and `len` is the
/// number of entries.
#[derive(Debug, Default)]
pub(super) struct Plateaus {
    blocks: Vec<Vec<Entry>>,
    firsts: Vec<usize>,
    len: usize,
}

impl Plateaus {
    /// Number of entries.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// Whether there are no entries.
    pub(super) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// All entries, ascending.
    pub(super) fn iter(&self) -> impl Iterator<Item = &Entry> + '_ {
        self.blocks.iter().flatten()
    }

    /// The plateaus, ascending: the entries with each run of neighbours
    /// that touch and have equal counts merged into one.
    pub(super) fn plateaus(&self) -> impl Iterator<Item = Entry> + '_ {
        let mut entries = self.iter().copied().peekable();
        std::iter::from_fn(move || {
            let mut run = entries.next()?;
            while let Some(e) = entries.next_if(|e| e.start == run.end && e.count == run.count) {
                run.end = e.end;
            }
            Some(run)
        })
    }

    /// The entries of block `b`, none if there is no such block (only when
    /// there are no entries at all).
    #[inline]
    pub(super) fn block(&self, b: usize) -> &[Entry] {
        self.blocks.get(b).map_or(&[], Vec::as_slice)
    }

    /// Whether [`scan`](Self::scan) to `end` goes on from the last entry of
    /// block `b` into the next block (its first entry starts at or before
    /// `end`).
    #[inline]
    pub(super) fn goes_on(&self, b: usize, end: usize) -> bool {
        self.firsts.get(b + 1).is_some_and(|&first| first <= end)
    }

    /// Moves entries between block `b` and the next so that the entries
    /// from `(b, at)` on that start at or before `end` (which go on into
    /// the next block: [`goes_on`](Self::goes_on)) all lie in one block,
    /// and answers where the first of them now is; the entries themselves,
    /// and their order, stay as they are. Either the next block's entries
    /// among them join the end of block `b`, or block `b`'s from `at` on
    /// join the front of the next, whichever keeps both blocks within
    /// [`MIN`] and [`MAX`]; `None` (and nothing moved) if neither does, or
    /// if they reach past the next block.
    ///
    /// A range over a block's edge is then changed as one within a block,
    /// for the cost of moving one block's entries by a few places, where
    /// a change spanning blocks copies them all out and splices them back.
    #[inline]
    pub(super) fn gather(&mut self, b: usize, at: usize, end: usize) -> Option<Pos> {
        let (head, tail) = self.blocks.split_at_mut(b + 1);
        let (first, second) = (&mut head[b], tail.first_mut()?);
        let k = second.iter().take_while(|e| e.start <= end).count();
        if k == second.len() {
            return None;
        }
        let gathered = if first.len() + k <= MAX && second.len() - k >= MIN {
            first.extend_from_slice(&second[..k]);
            second.drain(..k);
            (b, at)
        } else if at >= MIN && second.len() + (first.len() - at) <= MAX {
            second.splice(..0, first.drain(at..));
            (b + 1, 0)
        } else {
            return None;
        };
        self.firsts[b + 1] = second[0].start;
        Some(gathered)
    }

    /// The position of the first entry that ends at or after `start` (so
    /// the first that overlaps or touches a range starting there), or of
    /// the place after all entries.
    #[inline]
    pub(super) fn first_reaching(&self, start: usize) -> Pos {
        // The entries that start before `start` are in blocks up to the last
        // one whose first entry does; the entry sought is the one after the
        // last of them that ends before `start` (ends ascend as starts do).
        let b = self.firsts.partition_point(|&f| f < start);
        if b == 0 {
            return (0, 0);
        }
        let b = b - 1;
        let block = &self.blocks[b];
        let i = block.partition_point(|e| e.end < start);
        if i == block.len() && b + 1 < self.blocks.len() {
            (b + 1, 0)
        } else {
            (b, i)
        }
    }

    /// Calls `f` on each entry from `lo` on that starts at or before `end`,
    /// ascending, and returns the position after the last of them (`lo` if
    /// none). With `lo` from [`first_reaching`]`(start)` these are the
    /// entries that overlap or touch `[start, end)`.
    ///
    /// [`first_reaching`]: Self::first_reaching
    #[inline]
    pub(super) fn scan<'a>(&'a self, lo: Pos, end: usize, mut f: impl FnMut(&'a Entry)) -> Pos {
        let (mut b, mut i) = lo;
        if self.blocks.is_empty() {
            return lo;
        }
        loop {
            let block = &self.blocks[b];
            while let Some(e) = block.get(i) {
                if e.start > end {
                    return (b, i);
                }
                f(e);
                i += 1;
            }
            // Into the next block only if its first entry is scanned too, so
            // that a change within one block stays within it.
            if b + 1 == self.blocks.len() || self.firsts[b + 1] > end {
                return (b, i);
            }
            (b, i) = (b + 1, 0);
        }
    }

    /// Replaces the entries from `lo` to before `hi` (as [`scan`] returned
    /// them) with `new`, which must keep the order: ascending, not
    /// overlapping each other or the entries outside `lo..hi`.
    ///
    /// [`scan`]: Self::scan
    #[inline(always)]
    pub(super) fn replace(&mut self, lo: Pos, hi: Pos, new: &[Entry]) {
        if self.blocks.is_empty() {
            if !new.is_empty() {
                self.blocks.push(Vec::with_capacity(MAX));
                self.firsts.push(0);
                self.splice_one(0, 0, 0, new);
            }
            return;
        }
        if lo.0 == hi.0 && hi.1 - lo.1 == new.len() {
            // As many come as go within one block: the common case of
            // counts and ends that change in place, here rather than in
            // `splice_one`, so that it costs no call.
            let block = &mut self.blocks[lo.0];
            copy_entries(&mut block[lo.1..hi.1], new);
            if lo.1 == 0 && !new.is_empty() {
                self.firsts[lo.0] = new[0].start;
            }
        } else if lo.0 == hi.0 {
            self.splice_one(lo.0, lo.1, hi.1, new);
        } else if lo.0 + 1 == hi.0 && self.blocks[lo.0].len() - lo.1 + hi.1 == new.len() {
            // As many come as go, over the edge of two blocks: in place.
            let (head, tail) = new.split_at(self.blocks[lo.0].len() - lo.1);
            copy_entries(&mut self.blocks[lo.0][lo.1..], head);
            copy_entries(&mut self.blocks[hi.0][..hi.1], tail);
            if lo.1 == 0 {
                self.firsts[lo.0] = self.blocks[lo.0][0].start;
            }
            self.firsts[hi.0] = self.blocks[hi.0][0].start;
        } else {
            self.splice_across(lo, hi, new);
        }
    }

    /// Applies `r` to block `b` for the range `(start, end)`: the counts
    /// change in place, and an edge entry the range begins or ends inside
    /// is split there ([`split_edges`](Self::split_edges)).
    #[inline(always)]
    pub(super) fn recount(&mut self, b: usize, r: Recount, (start, end): (usize, usize)) {
        let Recount { from, to, .. } = r;
        let block = &mut self.blocks[b];
        if to > block.len() {
            return self.recount_across(b, r);
        }
        for e in &mut block[from..to] {
            e.count = e.count.wrapping_add(r.delta);
        }
        if r.split_left || r.split_right {
            self.split_edges(b, r, start, end);
        }
    }

    /// The edges of a [`recount`](Self::recount) with a split, after the
    /// counts moved: the part of entry `to - 1` after `end`, and of entry
    /// `from` before `start`, become entries of their own at the old count
    /// (the block's later entries move up by one place per split).
    #[inline]
    fn split_edges(&mut self, b: usize, r: Recount, start: usize, end: usize) {
        let block = &mut self.blocks[b];
        let old = |e: Entry| e.count.wrapping_sub(r.delta);
        // The right edge first: what it does moves no entry before `to`, so
        // `from` still names the left edge's entry.
        if r.split_right {
            let e = block[r.to - 1];
            block[r.to - 1].end = end;
            let after = Entry {
                start: end,
                end: e.end,
                count: old(e),
            };
            block.insert(r.to, after);
            self.len += 1;
        }
        if r.split_left {
            let e = block[r.from];
            block[r.from].start = start;
            let before = Entry {
                start: e.start,
                end: start,
                count: old(e),
            };
            block.insert(r.from, before);
            self.len += 1;
        }
        // The block's first start is unchanged (a left split leaves the
        // entry's own start in place), but it may now be over `MAX`.
        self.settle(b);
    }

    /// [`recount`](Self::recount) of entries over the edge of block `b`
    /// and the next, where nothing is split.
    #[cold]
    fn recount_across(&mut self, b: usize, r: Recount) {
        debug_assert!(!r.split_left && !r.split_right);
        let (first, second) = self.blocks[b..].split_at_mut(1);
        let first = &mut first[0];
        let rest = r.to - first.len();
        for e in first[r.from..].iter_mut().chain(&mut second[0][..rest]) {
            e.count = e.count.wrapping_add(r.delta);
        }
    }

    /// `replace` within block `b`: its entries `from..to` give way to `new`.
    #[inline]
    fn splice_one(&mut self, b: usize, from: usize, to: usize, new: &[Entry]) {
        let block = &mut self.blocks[b];
        self.len = self.len - (to - from) + new.len();
        if to - from == new.len() {
            // As many come as go: the common case of counts and ends that
            // change in place.
            copy_entries(&mut block[from..to], new);
            if from == 0 && !new.is_empty() {
                self.firsts[b] = new[0].start;
            }
            return;
        }
        let (gone, len) = (to - from, block.len());
        if new.len() < gone {
            // Fewer come: they take the first places, the rest of the
            // block moves down.
            copy_entries(&mut block[from..from + new.len()], new);
            block.copy_within(to.., from + new.len());
            block.truncate(len - (gone - new.len()));
        } else {
            // More come: the rest of the block moves up first.
            let grow = new.len() - gone;
            let filler = new[0];
            block.resize(len + grow, filler);
            block.copy_within(to..len, to + grow);
            copy_entries(&mut block[from..from + new.len()], new);
        }
        self.settle(b);
    }

    /// `replace` of entries in several blocks (entries either side of a
    /// block's edge, or more than a block holds): block `lo.0` keeps its
    /// entries before `lo.1` and takes `new` after them, block `hi.0` keeps
    /// its entries from `hi.1`, and the blocks in between (all of whose
    /// entries go) are removed.
    #[cold]
    fn splice_across(&mut self, lo: Pos, hi: Pos, new: &[Entry]) {
        let between = lo.0 + 1..hi.0;
        let removed = self.blocks[between.clone()]
            .iter()
            .map(Vec::len)
            .sum::<usize>()
            + (self.blocks[lo.0].len() - lo.1)
            + hi.1;
        self.len = self.len - removed + new.len();
        if !between.is_empty() {
            self.blocks.drain(between.clone());
            self.firsts.drain(between);
        }
        self.blocks[lo.0 + 1].drain(..hi.1);
        let block = &mut self.blocks[lo.0];
        block.truncate(lo.1);
        block.extend_from_slice(new);
        // The later block first: merging it may reach into `lo.0`, never
        // the other way round.
        self.settle(lo.0 + 1);
        self.settle(lo.0);
    }

    /// Restores the invariants for block `b` after its entries changed:
    /// drops it when empty, merges it into a neighbour when under [`MIN`],
    /// splits it when over [`MAX`], and sets its first start.
    #[inline]
    fn settle(&mut self, b: usize) {
        let block = &self.blocks[b];
        if (MIN..=MAX).contains(&block.len()) {
            self.firsts[b] = block[0].start;
        } else {
            self.rebalance(b);
        }
    }

    /// [`settle`](Self::settle) of a block with too few or too many
    /// entries.
    #[cold]
    fn rebalance(&mut self, b: usize) {
        if self.blocks[b].len() > MAX {
            self.coalesce(b);
        }
        let n = self.blocks[b].len();
        if n == 0 {
            self.blocks.remove(b);
            self.firsts.remove(b);
        } else if n > MAX {
            self.split(b);
        } else if n < MIN && self.blocks.len() > 1 {
            let (keep, gone) = if b > 0 { (b - 1, b) } else { (b, b + 1) };
            let moved = self.blocks.remove(gone);
            self.firsts.remove(gone);
            self.blocks[keep].extend_from_slice(&moved);
            self.firsts[keep] = self.blocks[keep][0].start;
            if self.blocks[keep].len() > MAX {
                self.split(keep);
            }
        } else {
            self.firsts[b] = self.blocks[b][0].start;
        }
    }

    /// Merges the neighbours in block `b` that touch and have equal counts
    /// (what [`recount`](Self::recount) leaves), before the block is split
    /// for want of room.
    fn coalesce(&mut self, b: usize) {
        let block = &mut self.blocks[b];
        let before = block.len();
        block.dedup_by(|next, kept| {
            let equal = kept.end == next.start && kept.count == next.count;
            if equal {
                kept.end = next.end;
            }
            equal
        });
        self.len -= before - block.len();
    }

    /// Splits block `b` (more than [`MAX`] entries) into blocks of equal
    /// size, at least `MAX / 2` each (so far from [`MIN`] and [`MAX`] both):
    /// halves when it has just outgrown [`MAX`].
    #[cold]
    fn split(&mut self, b: usize) {
        let all = std::mem::take(&mut self.blocks[b]);
        // `parts` blocks, the first `all.len() % parts` one entry longer.
        let parts = all.len() / (MAX / 2);
        let (size, longer) = (all.len() / parts, all.len() % parts);
        let mut rest = &all[..];
        let blocks: Vec<Vec<Entry>> = (0..parts)
            .map(|part| {
                let (chunk, after) = rest.split_at(size + usize::from(part < longer));
                rest = after;
                let mut block = Vec::with_capacity(MAX);
                block.extend_from_slice(chunk);
                block
            })
            .collect();
        let firsts: Vec<usize> = blocks.iter().map(|block| block[0].start).collect();
        self.blocks.splice(b..=b, blocks);
        self.firsts.splice(b..=b, firsts);
    }

    /// Adds the entry `[start, span.end)`, which must overlap none.
    #[cfg(test)]
    pub(super) fn insert(&mut self, start: usize, span: Span) {
        let at = self.first_reaching(start);
        let entry = Entry {
            start,
            end: span.end,
            count: span.count,
        };
        self.replace(at, at, &[entry]);
    }

    /// Checks the invariants (tests only).
    #[cfg(test)]
    fn check(&self) {
        assert_eq!(self.blocks.len(), self.firsts.len());
        for (block, &first) in self.blocks.iter().zip(&self.firsts) {
            assert!(!block.is_empty());
            assert!(block.len() <= MAX);
            assert_eq!(block[0].start, first);
        }
        if self.blocks.len() > 1 {
            assert!(self.blocks.iter().all(|block| block.len() >= MIN));
        }
        assert_eq!(self.iter().count(), self.len);
        let all: Vec<&Entry> = self.iter().collect();
        for pair in all.windows(2) {
            assert!(pair[0].start < pair[0].end && pair[0].end <= pair[1].start);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(start: usize, end: usize, count: u32) -> Entry {
        Entry { start, end, count }
    }

    /// `n` one-unit entries at 0, 2, 4, …
    fn spaced(n: usize) -> Plateaus {
        let mut p = Plateaus::default();
        for i in 0..n {
            p.insert(
                2 * i,
                Span {
                    end: 2 * i + 1,
                    count: 1,
                },
            );
            p.check();
        }
        p
    }

    #[test]
    fn inserts_in_any_order_split_blocks_and_stay_sorted() {
        let mut p = Plateaus::default();
        // A permutation of 0..1000 (7 is coprime to 1000).
        for k in 0..1000 {
            let i = k * 7 % 1000;
            p.insert(
                2 * i,
                Span {
                    end: 2 * i + 1,
                    count: 1,
                },
            );
        }
        p.check();
        assert!(p.blocks.len() > 1000 / MAX);
        let starts: Vec<usize> = p.iter().map(|e| e.start).collect();
        assert_eq!(starts, (0..1000).map(|i| 2 * i).collect::<Vec<_>>());
    }

    /// The entries `scan` visits from `first_reaching(start)` up to `end`,
    /// and where it starts and stops.
    fn near(p: &Plateaus, start: usize, end: usize) -> (Pos, Pos, Vec<Entry>) {
        let lo = p.first_reaching(start);
        let mut seen = Vec::new();
        let hi = p.scan(lo, end, |e| seen.push(*e));
        (lo, hi, seen)
    }

    #[test]
    fn scan_includes_touching_entries_across_blocks() {
        let p = spaced(1000);
        assert!(p.blocks.len() > 2);
        // Every place, also at block edges: [2i + 1, 2i + 2) touches entry
        // i (ends at 2i + 1) and entry i + 1 (starts at 2i + 2).
        for i in 0..999 {
            let (_, _, seen) = near(&p, 2 * i + 1, 2 * i + 2);
            assert_eq!(
                seen,
                vec![entry(2 * i, 2 * i + 1, 1), entry(2 * i + 2, 2 * i + 3, 1)]
            );
            // Within an entry: that one alone.
            let (_, _, seen) = near(&p, 2 * i + 2, 2 * i + 2);
            assert_eq!(seen, vec![entry(2 * i + 2, 2 * i + 3, 1)]);
        }
        // A change that does not reach past a block's last entry stays in
        // that block.
        let last = *p.blocks[0].last().unwrap();
        let (lo, hi, _) = near(&p, last.start, last.end);
        assert_eq!((lo.0, hi), (0, (0, p.blocks[0].len())));
        // After everything: nothing, at the end of the last block.
        let (lo, hi, seen) = near(&p, usize::MAX - 1, usize::MAX);
        assert!(seen.is_empty());
        assert_eq!(
            (lo, hi),
            ((p.blocks.len() - 1, p.blocks.last().unwrap().len()), lo)
        );
        // Before everything: nothing, at the front.
        let mut q = spaced(3);
        q.blocks[0].iter_mut().for_each(|e| {
            e.start += 10;
            e.end += 10;
        });
        q.firsts[0] += 10;
        assert_eq!(near(&q, 0, 9), ((0, 0), (0, 0), Vec::new()));
        assert_eq!(
            near(&Plateaus::default(), 5, 9),
            ((0, 0), (0, 0), Vec::new())
        );
    }

    /// Entries of one unit each from `at` on, with `counts`.
    fn steps(at: usize, counts: &[u32]) -> Vec<Entry> {
        (at..)
            .zip(counts)
            .map(|(i, &c)| entry(i, i + 1, c))
            .collect()
    }

    fn recount(from: usize, to: usize, up: bool) -> Recount {
        Recount {
            from,
            to,
            delta: if up { 1 } else { u32::MAX },
            split_left: false,
            split_right: false,
        }
    }

    fn entries(p: &Plateaus) -> Vec<Entry> {
        p.iter().copied().collect()
    }

    #[test]
    fn recount_changes_counts_in_place_and_merges_nothing() {
        // Counts 2 1 2 1 2 … over 40 units, in one block.
        let counts: Vec<u32> = (0..40).map(|i| 2 - i % 2).collect();
        let all = steps(0, &counts);
        let run = |r: Recount| {
            let mut p = Plateaus::default();
            p.replace((0, 0), (0, 0), &all);
            p.recount(0, r, (0, 0));
            p.check();
            (entries(&p), p.plateaus().collect::<Vec<_>>())
        };
        let with = |from: usize, mid: &[Entry], to: usize| [&all[..from], mid, &all[to..]].concat();
        // Entries 11..14 (1 2 1) up by one: the edges now equal their
        // neighbours (2) and stay entries of their own; as plateaus, five
        // entries are three.
        let (both, plateaus) = run(recount(11, 14, true));
        assert_eq!(both, with(11, &steps(11, &[2, 3, 2]), 14));
        let merged = [entry(10, 12, 2), entry(12, 13, 3), entry(13, 15, 2)];
        assert_eq!(plateaus, with(10, &merged, 15));
        // Down by one: counts change, entries stay.
        let (down, _) = run(recount(10, 15, false));
        assert_eq!(down, with(10, &steps(10, &[1, 0, 1, 0, 1]), 15));
    }

    /// `recount(from, to, up)` with the edges split as `splits`.
    fn split(from: usize, to: usize, up: bool, splits: (bool, bool)) -> Recount {
        Recount {
            split_left: splits.0,
            split_right: splits.1,
            ..recount(from, to, up)
        }
    }

    /// `entries` in one block, changed by `r` over `range`.
    fn recounted(entries_before: &[Entry], r: Recount, range: (usize, usize)) -> Vec<Entry> {
        let mut p = Plateaus::default();
        p.replace((0, 0), (0, 0), entries_before);
        p.recount(0, r, range);
        p.check();
        entries(&p)
    }

    #[test]
    fn recount_splits_edges_inside_entries() {
        // Entries of two units, counts 2 3 2 3 … over 40 units.
        let all: Vec<Entry> = (0..20)
            .map(|i| entry(2 * i, 2 * i + 2, 2 + (i % 2) as u32))
            .collect();
        // Units 11..15 down by one: entry 5 (10..12, 3) is split at 11,
        // entry 7 (14..16, 3) at 15; entry 6 in between just moves.
        let both = recounted(&all, split(5, 8, false, (true, true)), (11, 15));
        let mid = [
            entry(10, 11, 3),
            entry(11, 12, 2),
            entry(12, 14, 1),
            entry(14, 15, 2),
            entry(15, 16, 3),
        ];
        assert_eq!(both, [&all[..5], &mid, &all[8..]].concat());
        // Within one entry: it becomes three.
        let one = [entry(0, 10, 1), entry(20, 30, 2)];
        let within = recounted(&one, split(0, 1, true, (true, true)), (3, 6));
        let three = [
            entry(0, 3, 1),
            entry(3, 6, 2),
            entry(6, 10, 1),
            entry(20, 30, 2),
        ];
        assert_eq!(within, three);
        // A split on the left only: 11..12 goes up to the count of the
        // entry after it, and stays an entry of its own.
        let pair = [entry(10, 12, 3), entry(12, 14, 4)];
        let left = recounted(&pair, split(0, 1, true, (true, false)), (11, 12));
        assert_eq!(left, [entry(10, 11, 3), entry(11, 12, 4), entry(12, 14, 4)]);
        // On the right only.
        let pair = [entry(10, 12, 3), entry(12, 14, 2)];
        let right = recounted(&pair, split(1, 2, true, (false, true)), (12, 13));
        assert_eq!(
            right,
            [entry(10, 12, 3), entry(12, 13, 3), entry(13, 14, 2)]
        );
    }

    #[test]
    fn a_split_that_outgrows_a_block_splits_the_block() {
        // One full block of two-unit entries, counts 2 3 2 3 …; a range
        // with both edges inside entries adds two.
        let all: Vec<Entry> = (0..MAX)
            .map(|i| entry(2 * i, 2 * i + 2, 2 + (i % 2) as u32))
            .collect();
        let mut p = Plateaus::default();
        p.replace((0, 0), (0, 0), &all);
        p.check();
        assert_eq!(p.blocks.len(), 1);
        let (b, i) = p.first_reaching(21);
        assert_eq!(p.block(b)[i], entry(20, 22, 2));
        let before = p.len();
        p.recount(b, split(i, i + 2, true, (true, true)), (21, 23));
        p.check();
        assert_eq!(p.len(), before + 2);
        assert_eq!(p.blocks.len(), 2);
        let got: Vec<Entry> = entries(&p)
            .into_iter()
            .filter(|e| e.end > 19 && e.start < 25)
            .collect();
        assert_eq!(
            got,
            [
                entry(18, 20, 3),
                entry(20, 21, 2),
                entry(21, 22, 3),
                entry(22, 23, 4),
                entry(23, 24, 3),
                entry(24, 26, 2),
            ]
        );
    }

    #[test]
    fn a_full_block_merges_equal_neighbours_before_it_splits() {
        // A block two short of full: a long entry of count 1, then entries
        // of counts 2 3 2 3 …; raising units of the long one one by one and lowering
        // them again leaves entries of count 1 side by side.
        let mut all = vec![entry(0, 1000, 1)];
        all.extend((0..MAX - 3).map(|i| entry(1000 + i, 1001 + i, 2 + (i % 2) as u32)));
        let mut p = Plateaus::default();
        p.replace((0, 0), (0, 0), &all);
        let plateaus: Vec<Entry> = p.plateaus().collect();
        for unit in 0..500 {
            // The entry holding `unit`: the first that ends after it.
            let at = p.first_reaching(unit + 1);
            let e = p.block(at.0)[at.1];
            let splits = (e.start < unit, e.end > unit + 1);
            p.recount(at.0, split(at.1, at.1 + 1, true, splits), (unit, unit + 1));
            p.check();
            let at = p.first_reaching(unit + 1);
            assert_eq!(p.block(at.0)[at.1], entry(unit, unit + 1, 2));
            p.recount(at.0, recount(at.1, at.1 + 1, false), (unit, unit + 1));
            p.check();
            // What the plateaus are does not change.
            assert_eq!(p.plateaus().collect::<Vec<_>>(), plateaus);
        }
        // The block filled up with units of count 1 and merged them each
        // time instead of splitting: still one block.
        assert_eq!(p.blocks.len(), 1);
        assert!(p.len() <= MAX);
    }

    #[test]
    fn recount_goes_on_over_a_blocks_edge() {
        let mut p = spaced(3 * MAX);
        let n0 = p.blocks[0].len();
        let before = entries(&p);
        // The last two entries of block 0 and the first three of block 1.
        p.recount(0, recount(n0 - 2, n0 + 3, true), (0, 0));
        p.check();
        for (i, (b, a)) in before.iter().zip(&entries(&p)).enumerate() {
            let moved = (n0 - 2..n0 + 3).contains(&i);
            assert_eq!(a.count, b.count + u32::from(moved), "entry {i}");
            assert_eq!((a.start, a.end), (b.start, b.end));
        }
    }

    #[test]
    fn replacing_across_blocks_merges_and_resplits() {
        let mut p = spaced(1000);
        // One entry instead of entries 100..900 (they span several blocks).
        let (lo, hi, seen) = near(&p, 200, 1799);
        assert_eq!(seen.len(), 800);
        p.replace(lo, hi, &[entry(200, 1799, 3)]);
        p.check();
        assert_eq!(p.len(), 201);
        // And 800 entries back instead of it.
        let (_, _, seen) = near(&p, 199, 1800);
        assert_eq!(
            seen,
            vec![
                entry(198, 199, 1),
                entry(200, 1799, 3),
                entry(1800, 1801, 1)
            ]
        );
        let (lo, hi, _) = near(&p, 200, 200);
        let back: Vec<Entry> = (100..900).map(|i| entry(2 * i, 2 * i + 1, 2)).collect();
        p.replace(lo, hi, &back);
        p.check();
        assert_eq!(p.len(), 1000);
        // Emptied entirely from the front: blocks shrink, merge and vanish.
        loop {
            let Some(first) = p.iter().next().copied() else {
                break;
            };
            let (lo, hi, seen) = near(&p, first.start, first.start);
            assert_eq!(seen, vec![first]);
            p.replace(lo, hi, &[]);
            p.check();
        }
        assert!(p.blocks.is_empty() && p.is_empty());
    }

    /// Two blocks of one-unit entries at 0, 2, 4, …: `a` of them, then `b`.
    fn two_blocks(a: usize, b: usize) -> Plateaus {
        let all: Vec<Entry> = (0..a + b).map(|i| entry(2 * i, 2 * i + 1, 1)).collect();
        let (first, second) = all.split_at(a);
        Plateaus {
            firsts: vec![first[0].start, second[0].start],
            len: a + b,
            blocks: vec![first.to_vec(), second.to_vec()],
        }
    }

    #[test]
    fn gather_moves_a_range_over_a_blocks_edge_into_one_block() {
        // Entries 30..35 reach from block 0 (32 entries) into block 1: its
        // first three join block 0.
        let mut p = two_blocks(32, 32);
        let before = entries(&p);
        let (lo, end) = ((0, 30), 2 * 34);
        assert!(p.goes_on(0, end));
        assert_eq!(p.gather(lo.0, lo.1, end), Some((0, 30)));
        p.check();
        assert_eq!(entries(&p), before);
        assert_eq!((p.block(0).len(), p.block(1).len()), (35, 29));
        assert!(!p.goes_on(0, end));

        // Block 0 is full: its entries from 60 on join block 1 instead.
        let mut p = two_blocks(MAX, 32);
        let before = entries(&p);
        let end = 2 * (MAX + 2);
        assert_eq!(p.gather(0, 60, end), Some((1, 0)));
        p.check();
        assert_eq!(entries(&p), before);
        assert_eq!((p.block(0).len(), p.block(1).len()), (60, 36));
        assert_eq!(near(&p, 2 * 60, end).0, (1, 0));

        // Neither fits (block 0 full, too few left before the range; block
        // 1 at MIN): nothing moves.
        let mut p = two_blocks(MAX, MIN);
        let before = (entries(&p), p.block(0).len());
        assert_eq!(p.gather(0, MIN - 1, 2 * (MAX + 1)), None);
        assert_eq!((entries(&p), p.block(0).len()), before);
        // The range reaches past all of block 1: nothing moves.
        let mut p = two_blocks(32, 32);
        assert_eq!(p.gather(0, 30, 2 * 64), None);
        assert_eq!(p.block(0).len(), 32);
        p.check();
    }
}
