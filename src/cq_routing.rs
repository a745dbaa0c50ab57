//! Routing a shared CQ's completions to the queue pair that owns them.
//!
//! Several QPs may complete into one CQ. An [`OwnedQp`](crate::OwnedQp)
//! hands a request's memory back only with that request's completion, so a
//! completion read by anyone else must reach it, never be dropped. Every
//! reader of a CQ on which an `OwnedQp` is registered reads through
//! [`Routing`]: it takes the completions meant for it and holds the others
//! for their owner, oldest first:
//!
//! - an `OwnedQp` ([`Routing::take_for`]) gets those of its own QP number;
//! - [`CompletionQueue::poll`](crate::CompletionQueue::poll) gets those of
//!   every QP no `OwnedQp` owns.
//!
//! What is held is bounded by what is outstanding: each held completion
//! ends a request some reader still waits for. When an owned QP is
//! destroyed ([`Routing::forget`]), what is held under its number is
//! dropped, and so is what the ring still has of it: a dead QP's
//! completions are kept for nobody.

use std::collections::VecDeque;

use crate::wr::WorkCompletion;

/// Completions read at a time from the ring while routing.
pub(crate) const BATCH: usize = 16;

/// Who a routed read is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Reader {
    /// The owner of this QP number.
    Owner(u32),
    /// A plain poll: every QP without an owner.
    Unowned,
}

/// The CQ's registered owners and the completions held for readers.
#[derive(Debug, Default)]
pub(crate) struct Routing {
    /// QP numbers an `OwnedQp` owns on this CQ.
    owned: Vec<u32>,
    /// Completions read by one reader for another, oldest first.
    held: VecDeque<WorkCompletion>,
}

impl Routing {
    /// Whether `wc` is for `reader`.
    fn is_for(&self, reader: Reader, wc: &WorkCompletion) -> bool {
        match reader {
            Reader::Owner(qpn) => wc.qp_num() == qpn,
            Reader::Unowned => !self.owned.contains(&wc.qp_num()),
        }
    }

    /// Registers the owner of `qpn`, forgetting completions held under that
    /// number (left by a destroyed QP of the same number, or by raw posts
    /// before the owner took the QP: their ids would name its requests).
    pub(crate) fn adopt(&mut self, qpn: u32) {
        self.held.retain(|wc| wc.qp_num() != qpn);
        if !self.owned.contains(&qpn) {
            self.owned.push(qpn);
        }
    }

    /// Unregisters the owner of `qpn`; completions held for it go to plain
    /// polls from now on.
    pub(crate) fn release(&mut self, qpn: u32) {
        self.owned.retain(|&q| q != qpn);
    }

    /// Unregisters the owner of the destroyed QP `qpn` and drops what is
    /// held under its number: no reader will ever take it.
    pub(crate) fn forget(&mut self, qpn: u32) {
        self.release(qpn);
        self.held.retain(|wc| wc.qp_num() != qpn);
    }

    /// Whether any owner is registered.
    #[cfg(test)]
    pub(crate) fn has_owners(&self) -> bool {
        !self.owned.is_empty()
    }

    /// Moves the held completions for `reader` into `out`, oldest first, up
    /// to its room; returns how many.
    pub(crate) fn take_held(&mut self, reader: Reader, out: &mut [WorkCompletion]) -> usize {
        let mut n = 0;
        let mut i = 0;
        while n < out.len() && i < self.held.len() {
            if self.is_for(reader, &self.held[i]) {
                out[n] = self.held.remove(i).expect("i < len");
                n += 1;
            } else {
                i += 1;
            }
        }
        n
    }

    /// Sorts completions just read from the ring: those for `reader` go to
    /// `out` from index `n` on (there is room for all of `read`), the others
    /// are held. Returns the new `n`.
    pub(crate) fn sort(
        &mut self,
        reader: Reader,
        read: &[WorkCompletion],
        out: &mut [WorkCompletion],
        mut n: usize,
    ) -> usize {
        for wc in read {
            if self.is_for(reader, wc) {
                out[n] = *wc;
                n += 1;
            } else {
                self.held.push_back(*wc);
            }
        }
        n
    }

    /// Completions held.
    #[cfg(test)]
    pub(crate) fn held(&self) -> usize {
        self.held.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use uverbs_uapi::ib_uverbs_wc;

    fn wc(qp_num: u32, wr_id: u64) -> WorkCompletion {
        WorkCompletion::from_raw(ib_uverbs_wc {
            qp_num,
            wr_id,
            ..ib_uverbs_wc::default()
        })
    }

    fn ids(out: &[WorkCompletion]) -> Vec<(u32, u64)> {
        out.iter().map(|c| (c.qp_num(), c.wr_id())).collect()
    }

    #[test]
    fn each_reader_gets_its_own_and_holds_the_rest_in_order() {
        let mut r = Routing::default();
        r.adopt(1);
        r.adopt(2);
        let read = [wc(1, 10), wc(2, 20), wc(9, 90), wc(1, 11), wc(2, 21)];
        let mut out = [WorkCompletion::default(); BATCH];
        let n = r.sort(Reader::Owner(1), &read, &mut out, 0);
        assert_eq!(ids(&out[..n]), [(1, 10), (1, 11)]);
        assert_eq!(r.held(), 3);
        // The plain poll gets QP 9's, not the owned QP 2's.
        let n = r.take_held(Reader::Unowned, &mut out);
        assert_eq!(ids(&out[..n]), [(9, 90)]);
        let n = r.take_held(Reader::Owner(2), &mut out);
        assert_eq!(ids(&out[..n]), [(2, 20), (2, 21)]);
        assert_eq!(r.held(), 0);
    }

    #[test]
    fn taking_held_completions_stops_at_the_room_given() {
        let mut r = Routing::default();
        r.adopt(1);
        let read = [wc(2, 1), wc(2, 2), wc(2, 3)];
        let mut out = [WorkCompletion::default(); BATCH];
        assert_eq!(r.sort(Reader::Owner(1), &read, &mut out, 0), 0);
        let mut two = [WorkCompletion::default(); 2];
        assert_eq!(r.take_held(Reader::Unowned, &mut two), 2);
        assert_eq!(ids(&two), [(2, 1), (2, 2)]);
        assert_eq!(r.held(), 1);
    }

    #[test]
    fn adopting_a_number_forgets_what_was_held_under_it() {
        let mut r = Routing::default();
        r.adopt(1);
        let mut out = [WorkCompletion::default(); BATCH];
        r.sort(Reader::Owner(1), &[wc(5, 1), wc(6, 2)], &mut out, 0);
        r.adopt(5);
        assert_eq!(r.held(), 1, "QP 5's stale completion is gone");
        r.release(5);
        r.release(1);
        assert!(!r.has_owners());
        let n = r.take_held(Reader::Unowned, &mut out);
        assert_eq!(ids(&out[..n]), [(6, 2)]);
    }
}
