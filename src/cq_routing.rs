//! Routing a shared CQ's completions to the reader that owns them.
//!
//! Several QPs may complete into one CQ. An [`OwnedQp`](crate::OwnedQp) or
//! an [`OwnedSrq`](crate::post::OwnedSrq) hands a request's memory back only with
//! that request's completion, so a completion read by anyone else must
//! reach it, never be dropped. Every reader of a CQ on which an owner is
//! registered reads through [`Routing`]: it takes the completions meant for
//! it and holds the others for their reader, oldest first:
//!
//! - an `OwnedSrq` ([`Reader::Srq`]) gets the receive completions of the
//!   QPs attached to it: those whose `wr_id` carries its receive tag (the
//!   opcode cannot tell: rxe reports a failed receive with opcode 0);
//! - an `OwnedQp` ([`Reader::Owner`]) gets the other completions of its QP;
//! - [`CompletionQueue::poll`](crate::CompletionQueue::poll) gets the rest.
//!
//! Finding a completion's reader is one lookup of its QP number in a map,
//! whose entry also holds that QP owner's queue of held completions (plain
//! polls and SRQ owners have queues of their own), so a completion costs
//! the same whatever the number of owners on the CQ. What is held is
//! bounded by what is outstanding: each held completion ends a request
//! some reader still waits for.

use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasherDefault, Hasher};

use crate::wr::{WorkCompletion, RECV_TAG};

/// Completions read at a time from the ring while routing.
pub(crate) const BATCH: usize = 16;

/// Who a routed read is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Reader {
    /// The owner of this QP number.
    Owner(u32),
    /// The owner of the SRQ with this event id: the receive completions of
    /// the QPs attached to it.
    Srq(u64),
    /// A plain poll: every completion no owner takes.
    Unowned,
    /// Nobody: a read that only sorts what the ring holds into the held
    /// queues (before a QP's route changes).
    Settle,
}

/// Who takes a QP's completions, and what is held for its owner.
#[derive(Debug, Default)]
struct Route {
    /// An `OwnedQp` owns the QP.
    owned: bool,
    /// The QP receives from the owned SRQ with this event id.
    srq: Option<u64>,
    /// Completions read by another reader for the QP's owner, oldest
    /// first: here, so that the lookup that finds a completion's route
    /// also finds where to hold it. Empty unless `owned`.
    held: VecDeque<WorkCompletion>,
}

/// A hasher for the small integer keys of the maps here (QP numbers, SRQ
/// ids): one multiply per word. The keys come from the kernel and this
/// crate, not from a peer, so no defence against chosen collisions is
/// needed, and std's SipHash would cost more than the rest of a routed
/// completion.
#[derive(Default)]
pub(crate) struct WordHasher(u64);

impl Hasher for WordHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }

    fn write_u32(&mut self, n: u32) {
        self.write_u64(u64::from(n));
    }

    fn write_u64(&mut self, n: u64) {
        // Fibonacci hashing: the multiply spreads every input bit into the
        // high bits, which the rotate brings down to where the table looks.
        self.0 = (self.0 ^ n)
            .wrapping_mul(0x9e37_79b9_7f4a_7c15)
            .rotate_left(26);
    }

    fn write_usize(&mut self, n: usize) {
        self.write_u64(n as u64);
    }

    fn write_isize(&mut self, n: isize) {
        self.write_u64(n as u64);
    }
}

type WordMap<K, V> = HashMap<K, V, BuildHasherDefault<WordHasher>>;

/// The CQ's registered owners and the completions held for readers.
#[derive(Debug, Default)]
pub(crate) struct Routing {
    /// QPs with an owner or an owned SRQ, by number, each with the
    /// completions held for its owner.
    routes: WordMap<u32, Route>,
    /// Completions held in all routes together: while none is, an owner's
    /// read looks up nothing before the ring (one owner alone never has
    /// any held).
    held_for_owners: usize,
    /// Completions held for plain polls, oldest first.
    plain: VecDeque<WorkCompletion>,
    /// Completions held for the owners of SRQs, by event id, oldest first.
    /// A queue goes when its SRQ's owner does.
    srqs: WordMap<u64, VecDeque<WorkCompletion>>,
}

impl Routing {
    /// Registers the owner of `qpn`, forgetting completions held under that
    /// number for it or for plain polls (left by a destroyed QP of the same
    /// number, or by raw posts before the owner took the QP: their ids
    /// would name its requests). Costs the number of completions held for
    /// plain polls.
    pub(crate) fn adopt(&mut self, qpn: u32) {
        self.plain.retain(|wc| wc.qp_num() != qpn);
        let route = self.routes.entry(qpn).or_default();
        self.held_for_owners -= route.held.len();
        route.held.clear();
        route.owned = true;
    }

    /// Unregisters the owner of `qpn`; completions held for it go to plain
    /// polls from now on.
    pub(crate) fn release(&mut self, qpn: u32) {
        if let Some(mine) = self.disown(qpn) {
            self.plain.extend(mine);
        }
    }

    /// Unregisters the owner of the destroyed QP `qpn` and drops what is
    /// held for it: no reader will ever take it.
    pub(crate) fn forget(&mut self, qpn: u32) {
        self.disown(qpn);
    }

    /// Clears the owner flag of `qpn`'s route, dropping a route left empty;
    /// answers what was held for the owner.
    fn disown(&mut self, qpn: u32) -> Option<VecDeque<WorkCompletion>> {
        let route = self.routes.get_mut(&qpn)?;
        route.owned = false;
        let held = std::mem::take(&mut route.held);
        self.held_for_owners -= held.len();
        if route.srq.is_none() {
            self.routes.remove(&qpn);
        }
        Some(held)
    }

    /// From now on the receive completions of `qpn` go to the owner of the
    /// SRQ `srq`.
    pub(crate) fn attach_srq(&mut self, qpn: u32, srq: u64) {
        self.routes.entry(qpn).or_default().srq = Some(srq);
    }

    /// The QP `qpn` left its owned SRQ (it was destroyed): what is held for
    /// the SRQ's owner stays for it.
    pub(crate) fn detach_srq(&mut self, qpn: u32) {
        if let Some(route) = self.routes.get_mut(&qpn) {
            route.srq = None;
            if !route.owned {
                // Nothing is held for a QP without an owner (`disown`).
                self.routes.remove(&qpn);
            }
        }
    }

    /// The owner of SRQ `srq` is gone for good: what is held for it is
    /// dropped (its memory went with the SRQ).
    pub(crate) fn drop_srq(&mut self, srq: u64) {
        self.srqs.remove(&srq);
    }

    /// Whether any owner is registered.
    #[cfg(test)]
    pub(crate) fn has_owners(&self) -> bool {
        !self.routes.is_empty()
    }

    /// Moves the held completions for `reader` into `out`, oldest first, up
    /// to its room; returns how many.
    pub(crate) fn take_held(&mut self, reader: Reader, out: &mut [WorkCompletion]) -> usize {
        let queue = match reader {
            Reader::Owner(qpn) => {
                if self.held_for_owners == 0 {
                    return 0;
                }
                let Some(route) = self.routes.get_mut(&qpn) else {
                    return 0;
                };
                let n = move_out(&mut route.held, out);
                self.held_for_owners -= n;
                return n;
            }
            Reader::Srq(id) => match self.srqs.get_mut(&id) {
                Some(queue) => queue,
                None => return 0,
            },
            Reader::Unowned => &mut self.plain,
            Reader::Settle => return 0,
        };
        move_out(queue, out)
    }

    /// Sorts completions just read from the ring: those for `reader` go to
    /// `out` from index `n` on (there is room for all of `read`), the others
    /// are held. Returns the new `n`. One lookup per completion, of its QP
    /// number, finds both its reader and, for an owner, where to hold it.
    pub(crate) fn sort(
        &mut self,
        reader: Reader,
        read: &[WorkCompletion],
        out: &mut [WorkCompletion],
        mut n: usize,
    ) -> usize {
        for wc in read {
            let qpn = wc.qp_num();
            let held = match self.routes.get_mut(&qpn) {
                Some(Route { srq: Some(id), .. }) if wc.wr_id() & RECV_TAG != 0 => {
                    if reader == Reader::Srq(*id) {
                        None
                    } else {
                        Some(self.srqs.entry(*id).or_default())
                    }
                }
                Some(Route {
                    owned: true, held, ..
                }) if reader != Reader::Owner(qpn) => {
                    self.held_for_owners += 1;
                    Some(held)
                }
                Some(Route { owned: true, .. }) => None,
                _ => (reader != Reader::Unowned).then_some(&mut self.plain),
            };
            match held {
                None => {
                    out[n] = *wc;
                    n += 1;
                }
                Some(queue) => queue.push_back(*wc),
            }
        }
        n
    }

    /// Completions held.
    #[cfg(test)]
    pub(crate) fn held(&self) -> usize {
        let owners: usize = self.routes.values().map(|r| r.held.len()).sum();
        assert_eq!(owners, self.held_for_owners);
        let srqs: usize = self.srqs.values().map(VecDeque::len).sum();
        owners + srqs + self.plain.len()
    }
}

/// Moves the oldest of `queue` into `out`, as many as fit; answers how
/// many. An emptied queue keeps its allocation until its reader is
/// unregistered: a reader that is held for once is likely to be again, and
/// a queue made and freed per completion would cost an allocation each.
#[inline]
fn move_out(queue: &mut VecDeque<WorkCompletion>, out: &mut [WorkCompletion]) -> usize {
    let n = queue.len().min(out.len());
    for slot in &mut out[..n] {
        if let Some(wc) = queue.pop_front() {
            *slot = wc;
        }
    }
    n
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
        assert_eq!(r.take_held(Reader::Unowned, &mut two), 1);
        assert_eq!(ids(&two[..1]), [(2, 3)]);
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

    #[test]
    fn a_released_owners_held_completions_go_to_plain_polls() {
        let mut r = Routing::default();
        r.adopt(3);
        let mut out = [WorkCompletion::default(); BATCH];
        r.sort(Reader::Unowned, &[wc(3, 7)], &mut out, 0);
        r.release(3);
        assert_eq!(r.take_held(Reader::Owner(3), &mut out), 0);
        let n = r.take_held(Reader::Unowned, &mut out);
        assert_eq!(ids(&out[..n]), [(3, 7)]);
        // Forgetting drops instead.
        r.adopt(4);
        r.sort(Reader::Unowned, &[wc(4, 8)], &mut out, 0);
        r.forget(4);
        assert_eq!(r.held(), 0);
        assert!(!r.has_owners());
    }

    #[test]
    fn an_owned_srq_takes_the_tagged_completions_of_its_qps() {
        let mut r = Routing::default();
        // QP 7 (plain) and QP 8 (an OwnedQp's) receive from SRQ 100.
        r.attach_srq(7, 100);
        r.attach_srq(8, 100);
        r.adopt(8);
        let read = [
            wc(7, RECV_TAG | 1),
            wc(7, 5),
            wc(8, RECV_TAG | 2),
            wc(8, 6),
            wc(9, RECV_TAG | 3),
        ];
        let mut out = [WorkCompletion::default(); BATCH];
        let n = r.sort(Reader::Srq(100), &read, &mut out, 0);
        assert_eq!(ids(&out[..n]), [(7, RECV_TAG | 1), (8, RECV_TAG | 2)]);
        let n = r.take_held(Reader::Unowned, &mut out);
        assert_eq!(ids(&out[..n]), [(7, 5), (9, RECV_TAG | 3)]);
        let n = r.take_held(Reader::Owner(8), &mut out);
        assert_eq!(ids(&out[..n]), [(8, 6)]);
        // A detached QP's held SRQ completions stay for the SRQ's owner.
        r.sort(Reader::Settle, &[wc(7, RECV_TAG | 4)], &mut out, 0);
        r.detach_srq(7);
        r.forget(8);
        let n = r.take_held(Reader::Srq(100), &mut out);
        assert_eq!(ids(&out[..n]), [(7, RECV_TAG | 4)]);
        // QP 8 still routes to the SRQ until detached.
        r.sort(Reader::Settle, &[wc(8, RECV_TAG | 5)], &mut out, 0);
        r.detach_srq(8);
        assert!(!r.has_owners());
        r.drop_srq(100);
        assert_eq!(r.held(), 0);
    }

    /// What `CompletionQueue::poll_routed` does, over a ring of completions
    /// in memory: the measured call of [`routing_ir_probe`] (the ring's
    /// completions are read by slicing, as the real ring copies them out).
    #[inline(never)]
    fn poll_as(
        r: &mut Routing,
        ring: &mut (Vec<WorkCompletion>, usize),
        reader: Reader,
        out: &mut [WorkCompletion],
    ) -> usize {
        poll_ring(r, ring, reader, out)
    }

    /// [`poll_as`] for the warm-up round, which callgrind does not count
    /// (the first completion held for a reader allocates its queue).
    #[inline(never)]
    fn poll_warming(
        r: &mut Routing,
        ring: &mut (Vec<WorkCompletion>, usize),
        reader: Reader,
        out: &mut [WorkCompletion],
    ) -> usize {
        // Not the same body as `poll_as`, which the compiler would merge.
        std::hint::black_box(poll_ring(r, ring, reader, out))
    }

    #[inline(always)]
    fn poll_ring(
        r: &mut Routing,
        ring: &mut (Vec<WorkCompletion>, usize),
        reader: Reader,
        out: &mut [WorkCompletion],
    ) -> usize {
        let mut n = r.take_held(reader, out);
        while n < out.len() {
            let room = (out.len() - n).min(BATCH);
            let got = room.min(ring.0.len() - ring.1);
            let read = &ring.0[ring.1..ring.1 + got];
            ring.1 += got;
            n = r.sort(reader, read, out, n);
            if got < room {
                break;
            }
        }
        n
    }

    /// Instructions of routing per completion with N owners on one CQ
    /// (`UVERBS_PROBE_OWNERS`, default 1): each round every owner's QP
    /// completes one request, then every owner polls (the first ones read
    /// and hold the others' completions). With `UVERBS_PROBE_DIRECT` set,
    /// each owner polls right after its own QP's completion instead, so
    /// nothing is held: the lookup alone, as the number of owners grows.
    /// Count with
    ///
    /// ```text
    /// cargo test --release -p uverbs --lib --no-run
    /// UVERBS_PROBE_OWNERS=1000 valgrind --tool=callgrind \
    ///     --toggle-collect='*cq_routing*poll_as*' target/release/deps/uverbs-… \
    ///     --ignored --exact cq_routing::tests::routing_ir_probe
    /// ```
    ///
    /// and divide `poll_as`'s inclusive Ir by the completions it printed.
    #[test]
    #[ignore = "an instruction-count loop for callgrind"]
    fn routing_ir_probe() {
        let owners: u32 = std::env::var("UVERBS_PROBE_OWNERS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(1);
        let direct = std::env::var_os("UVERBS_PROBE_DIRECT").is_some();
        let rounds = (20_000 / owners).max(10) + 1;
        let mut r = Routing::default();
        for qpn in 0..owners {
            r.adopt(qpn);
        }
        let mut ring = (Vec::new(), 0);
        let mut out = [WorkCompletion::default(); BATCH];
        let mut routed = 0u64;
        let complete =
            |ring: &mut (Vec<WorkCompletion>, usize), qpns: std::ops::Range<u32>, round| {
                ring.0.clear();
                ring.0.extend(qpns.map(|q| wc(q, u64::from(round))));
                ring.1 = 0;
            };
        for round in 0..rounds {
            if !direct {
                complete(&mut ring, 0..owners, round);
            }
            for q in 0..owners {
                if direct {
                    complete(&mut ring, q..q + 1, round);
                }
                let n = if round == 0 {
                    poll_warming(&mut r, &mut ring, Reader::Owner(q), &mut out)
                } else {
                    routed += 1;
                    poll_as(&mut r, &mut ring, Reader::Owner(q), &mut out)
                };
                assert_eq!(n, 1, "owner {q} gets its own completion");
            }
        }
        assert_eq!(r.held(), 0);
        println!(
            "routing probe: {owners} owners, {routed} completions routed after a warm-up round{}",
            if direct {
                ", each read by its owner"
            } else {
                ""
            }
        );
    }

    #[test]
    fn a_reader_among_ten_thousand_owners_finds_its_completions() {
        // Fewer under Miri, where each map operation is interpreted.
        let owners: u32 = if cfg!(miri) { 300 } else { 10_000 };
        let mut r = Routing::default();
        for qpn in 0..owners {
            r.adopt(qpn);
        }
        let read: Vec<_> = (0..owners).rev().map(|q| wc(q, u64::from(q))).collect();
        let mut out = vec![WorkCompletion::default(); read.len()];
        let me = owners / 2 + 21;
        let n = r.sort(Reader::Owner(me), &read, &mut out, 0);
        assert_eq!(ids(&out[..n]), [(me, u64::from(me))]);
        let n = r.take_held(Reader::Owner(17), &mut out);
        assert_eq!(ids(&out[..n]), [(17, 17)]);
        assert_eq!(r.held(), owners as usize - 2);
    }
}
