//! The work requests of one queue that the device may still be using, in
//! the order they were posted, each under the `wr_id` the device will
//! return in its completion.
//!
//! A completion for id `n` ends request `n`. It may also end earlier
//! requests still here, as the caller decides per request
//! ([`Outstanding::complete`]): an unsignalled send completes without a
//! completion of its own, and on a queue that completes in order a
//! signalled request still here was passed over (its completion was lost,
//! say in a CQ overrun). On a queue that may complete out of order (siw's
//! send queue: a SEND completes before an earlier RDMA READ), an earlier
//! signalled request stays until its own completion. Ids are a counter
//! with the queue's tag in the top bit, so a send id is never taken for a
//! receive one.

use std::collections::VecDeque;

pub(crate) use crate::wr::RECV_TAG;

/// How a completion ended a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Ends {
    /// The completion is the request's own.
    Named,
    /// An earlier request the caller let the completion end.
    Earlier,
}

/// Outstanding requests of one queue.
pub(crate) struct Outstanding<T> {
    /// [`RECV_TAG`] or 0.
    tag: u64,
    /// The sequence number the next request gets.
    next: u64,
    /// Oldest first; sequence numbers increase by one from the front. A
    /// `None` is a request already ended out of order; the front is never
    /// `None`.
    entries: VecDeque<Option<T>>,
    /// `Some` entries.
    live: usize,
}

impl<T> Outstanding<T> {
    /// An empty table whose ids carry `tag` ([`RECV_TAG`] or 0).
    pub(crate) fn new(tag: u64) -> Self {
        Outstanding {
            tag,
            next: 0,
            entries: VecDeque::new(),
            live: 0,
        }
    }

    /// The `wr_id` the `i`-th request of the next [`push`](Self::push)es
    /// will carry.
    pub(crate) fn id_of_next(&self, i: usize) -> u64 {
        self.tag | ((self.next + i as u64) & !RECV_TAG)
    }

    /// Records the request the device now owns under
    /// [`id_of_next(0)`](Self::id_of_next).
    pub(crate) fn push(&mut self, entry: T) {
        self.entries.push_back(Some(entry));
        self.next += 1;
        self.live += 1;
    }

    /// Requests outstanding.
    pub(crate) fn len(&self) -> usize {
        self.live
    }

    /// Whether the device may use none of them.
    pub(crate) fn is_empty(&self) -> bool {
        self.live == 0
    }

    /// Whether `wr_id` names a request of this table that is outstanding.
    #[cfg(test)]
    pub(crate) fn holds(&self, wr_id: u64) -> bool {
        self.position(wr_id)
            .is_some_and(|pos| self.entries[pos].is_some())
    }

    fn position(&self, wr_id: u64) -> Option<usize> {
        if wr_id & RECV_TAG != self.tag {
            return None;
        }
        let seq = wr_id & !RECV_TAG;
        let first = (self.next - self.entries.len() as u64) & !RECV_TAG;
        let offset = seq.wrapping_sub(first) & !RECV_TAG;
        (offset < self.entries.len() as u64).then_some(offset as usize)
    }

    /// Ends the request `wr_id` and those earlier ones for which
    /// `ends_earlier(entry)` is true: `f(entry, how)` for each, oldest
    /// first. Returns how many; 0 (and nothing called) if `wr_id` is not
    /// outstanding here.
    pub(crate) fn complete(
        &mut self,
        wr_id: u64,
        mut ends_earlier: impl FnMut(&T) -> bool,
        mut f: impl FnMut(T, Ends),
    ) -> usize {
        let Some(pos) = self.position(wr_id) else {
            return 0;
        };
        if self.entries[pos].is_none() {
            return 0;
        }
        let mut ended = 0;
        for i in 0..=pos {
            let slot = &mut self.entries[i];
            let how = if i == pos {
                Ends::Named
            } else if slot.as_ref().is_some_and(&mut ends_earlier) {
                Ends::Earlier
            } else {
                continue;
            };
            let entry = slot.take().expect("checked above");
            f(entry, how);
            ended += 1;
        }
        self.live -= ended;
        while matches!(self.entries.front(), Some(None)) {
            self.entries.pop_front();
        }
        ended
    }

    /// The outstanding entries, oldest first.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &T> {
        self.entries.iter().flatten()
    }

    /// Takes every entry out, oldest first (for a table whose requests the
    /// device can no longer reach, or that must be leaked).
    pub(crate) fn take_all(&mut self) -> Vec<T> {
        self.live = 0;
        std::mem::take(&mut self.entries)
            .into_iter()
            .flatten()
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pushed(tag: u64, n: u64) -> (Outstanding<u64>, Vec<u64>) {
        let mut t = Outstanding::new(tag);
        let mut ids = Vec::new();
        for i in 0..n {
            ids.push(t.id_of_next(0));
            t.push(i);
        }
        (t, ids)
    }

    #[test]
    fn a_completion_ends_its_request_and_every_earlier_one() {
        let (mut t, ids) = pushed(0, 4);
        let mut seen = Vec::new();
        assert_eq!(
            t.complete(
                ids[2],
                |_| true,
                |e, how| seen.push((e, how == Ends::Named))
            ),
            3
        );
        assert_eq!(seen, [(0, false), (1, false), (2, true)]);
        assert_eq!(t.len(), 1);
        assert!(t.holds(ids[3]) && !t.holds(ids[2]));
    }

    #[test]
    fn an_id_already_ended_or_never_given_ends_nothing() {
        let (mut t, ids) = pushed(0, 3);
        assert_eq!(t.complete(ids[0], |_| true, |_, _| {}), 1);
        let mut called = false;
        assert_eq!(t.complete(ids[0], |_| true, |_, _| called = true), 0);
        assert_eq!(
            t.complete(t.id_of_next(0), |_| true, |_, _| called = true),
            0
        );
        assert_eq!(t.complete(u64::MAX >> 1, |_| true, |_, _| called = true), 0);
        assert!(!called);
        assert_eq!(t.len(), 2);
    }

    #[test]
    fn send_and_receive_ids_never_match_each_other() {
        let (s, sids) = pushed(0, 2);
        let (r, rids) = pushed(RECV_TAG, 2);
        assert_ne!(sids, rids);
        assert!(sids.iter().all(|&id| s.holds(id) && !r.holds(id)));
        assert!(rids.iter().all(|&id| r.holds(id) && !s.holds(id)));
    }

    #[test]
    fn ids_run_on_across_many_batches() {
        let mut t = Outstanding::new(RECV_TAG);
        // Under Miri 100 rounds (about 10 s there for 1000).
        let rounds = if cfg!(miri) { 100 } else { 1000u64 };
        for round in 0..rounds {
            let ids: Vec<u64> = (0..3).map(|i| t.id_of_next(i)).collect();
            for i in 0..3 {
                t.push(round * 3 + i);
            }
            let mut ended = Vec::new();
            assert_eq!(t.complete(ids[2], |_| true, |e, _| ended.push(e)), 3);
            assert_eq!(ended, [round * 3, round * 3 + 1, round * 3 + 2]);
            assert!(t.is_empty());
        }
    }

    #[test]
    fn take_all_empties_oldest_first() {
        let (mut t, _) = pushed(0, 3);
        assert_eq!(t.take_all(), [0, 1, 2]);
        assert!(t.is_empty());
    }

    #[test]
    fn earlier_requests_the_caller_keeps_wait_for_their_own_completion() {
        // Out of order: 1 (odd: kept) and 2 are passed by 3's completion.
        let (mut t, ids) = pushed(0, 5);
        let mut seen = Vec::new();
        let keep_odd = |e: &u64| e % 2 == 0;
        assert_eq!(t.complete(ids[3], keep_odd, |e, h| seen.push((e, h))), 3);
        assert_eq!(
            seen,
            [(0, Ends::Earlier), (2, Ends::Earlier), (3, Ends::Named)]
        );
        assert_eq!(t.len(), 2);
        assert!(t.holds(ids[1]) && t.holds(ids[4]) && !t.holds(ids[2]));
        // 1's own completion comes later; the front moves past the holes.
        seen.clear();
        assert_eq!(t.complete(ids[1], |_| true, |e, h| seen.push((e, h))), 1);
        assert_eq!(seen, [(1, Ends::Named)]);
        assert_eq!(t.complete(ids[3], |_| true, |_, _| panic!("ended")), 0);
        assert_eq!(t.len(), 1);
        // New ids still map after the holes were dropped.
        let next = t.id_of_next(0);
        t.push(5);
        assert_eq!(t.complete(next, |_| false, |e, h| seen.push((e, h))), 1);
        assert_eq!(t.take_all(), [4]);
        assert!(t.is_empty());
    }
}
