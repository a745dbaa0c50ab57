//! The work requests of one queue that the device may still be using, in
//! the order they were posted, each under the `wr_id` the device will
//! return in its completion.
//!
//! A queue completes in order, so a completion for id `n` also ends every
//! earlier request still here: on success those were unsignalled sends
//! that completed without a completion of their own (an error or a flush
//! always produces one). Ids are a counter with the queue's tag in the top
//! bit, so a send id is never taken for a receive one.

use std::collections::VecDeque;

/// Marks receive-queue ids; send-queue ids have the top bit clear.
pub(crate) const RECV_TAG: u64 = 1 << 63;

/// Outstanding requests of one queue.
pub(crate) struct Outstanding<T> {
    /// [`RECV_TAG`] or 0.
    tag: u64,
    /// The sequence number the next request gets.
    next: u64,
    /// Oldest first; sequence numbers increase by one from the front.
    entries: VecDeque<T>,
}

impl<T> Outstanding<T> {
    /// An empty table whose ids carry `tag` ([`RECV_TAG`] or 0).
    pub(crate) fn new(tag: u64) -> Self {
        Outstanding {
            tag,
            next: 0,
            entries: VecDeque::new(),
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
        self.entries.push_back(entry);
        self.next += 1;
    }

    /// Requests outstanding.
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the device may use none of them.
    pub(crate) fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Whether `wr_id` names a request of this table that is outstanding.
    #[cfg(test)]
    pub(crate) fn holds(&self, wr_id: u64) -> bool {
        self.position(wr_id).is_some()
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

    /// Ends the request `wr_id` and every earlier one: `f(entry, named)` for
    /// each, oldest first, `named` true for `wr_id`'s own. Returns how many;
    /// 0 (and nothing called) if `wr_id` is not outstanding here.
    pub(crate) fn complete_through(&mut self, wr_id: u64, mut f: impl FnMut(T, bool)) -> usize {
        let Some(pos) = self.position(wr_id) else {
            return 0;
        };
        for i in 0..=pos {
            let entry = self
                .entries
                .pop_front()
                .expect("position is within entries");
            f(entry, i == pos);
        }
        pos + 1
    }

    /// Takes every entry out, oldest first (for a table whose requests the
    /// device can no longer reach, or that must be leaked).
    pub(crate) fn take_all(&mut self) -> VecDeque<T> {
        std::mem::take(&mut self.entries)
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
            t.complete_through(ids[2], |e, named| seen.push((e, named))),
            3
        );
        assert_eq!(seen, [(0, false), (1, false), (2, true)]);
        assert_eq!(t.len(), 1);
        assert!(t.holds(ids[3]) && !t.holds(ids[2]));
    }

    #[test]
    fn an_id_already_ended_or_never_given_ends_nothing() {
        let (mut t, ids) = pushed(0, 3);
        assert_eq!(t.complete_through(ids[0], |_, _| {}), 1);
        let mut called = false;
        assert_eq!(t.complete_through(ids[0], |_, _| called = true), 0);
        assert_eq!(t.complete_through(t.id_of_next(0), |_, _| called = true), 0);
        assert_eq!(t.complete_through(u64::MAX >> 1, |_, _| called = true), 0);
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
        for round in 0..1000u64 {
            let ids: Vec<u64> = (0..3).map(|i| t.id_of_next(i)).collect();
            for i in 0..3 {
                t.push(round * 3 + i);
            }
            let mut ended = Vec::new();
            assert_eq!(t.complete_through(ids[2], |e, _| ended.push(e)), 3);
            assert_eq!(ended, [round * 3, round * 3 + 1, round * 3 + 2]);
            assert!(t.is_empty());
        }
    }

    #[test]
    fn take_all_empties_oldest_first() {
        let (mut t, _) = pushed(0, 3);
        assert_eq!(Vec::from(t.take_all()), [0, 1, 2]);
        assert!(t.is_empty());
    }
}
