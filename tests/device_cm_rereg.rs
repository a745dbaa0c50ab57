//! Traffic proves re-registration over a connection the rdma_cm set up:
//! the cases of `device_rereg_traffic.rs` (access removed and restored in
//! place, atomics, a PD moved away and back, a new translation by the
//! replace fallback) on rxe0, with the two RC QPs connected by the cm over
//! 192.0.2.1 (`common::cm`) instead of by hand, and the bytes checked; and
//! the same cases on siw0 (over 198.51.100.1), where every REREG_MR is
//! refused in place and each change is made by the replace fallback
//! (`docs/rereg.md`), see "siw" below.
//!
//! A (the cm's client) makes the RDMA WRITEs and atomics; B (the server)
//! owns the memory regions that are re-registered. The QPs' remote access
//! is whatever `INIT_QP_ATTR` grants: with responder resources and
//! initiator depth 1 (`ConnParam`'s defaults) the IB CM grants
//! REMOTE_WRITE, REMOTE_READ and REMOTE_ATOMIC (`cm_init_qp_init_attr`);
//! with initiator depth 0 the passive side gets REMOTE_WRITE only, and an
//! atomic is refused whatever the MR allows.
//!
//! A refused request moves both QPs to ERR (RC). The cm hears nothing of
//! that: no event on either side (asserted), and the connection is still
//! up as far as the cm is concerned (the orderly DREQ/DREP/TIMEWAIT_EXIT
//! teardown works afterwards). So the rig does not recover the QPs by hand:
//! it disconnects and connects a new pair in the same PD, the MRs stay.
//! Every case ends with the kernel's handle counts back where they started.
//!
//! siw: after each replace the new rkey is proven by a WRITE and a READ
//! with the bytes checked. A request with a key the responder refuses (an
//! old rkey, one without the access, one of another PD) ends differently
//! from rxe (measured): siw completes the requester's WRITE successfully
//! (it completes a WRITE once it is on the wire), the responder finds no
//! usable MR for the STag, terminates the stream, and both ids hear
//! DISCONNECTED (iWARP's cm learns of the failure, RoCE's does not); both
//! QPs are in ERR and the target untouched. A new connection in
//! the same PD recovers, with the MRs kept. siw has no atomics: a
//! FETCH_ADD is refused at post, typed, and the connection lives on.

mod common;

use std::time::Duration;

use common::cm::*;
use common::traffic::*;
use common::*;
use uverbs::cm::{ConnParam, EventKind};
use uverbs::mr::ReregFlags;
use uverbs::qp::QpState;
use uverbs::wr::{Remote, WcStatus, WorkCompletion};
use uverbs::{AccessFlags, Context, MemoryRegion, ProtectionDomain};

/// What A sees when B's QP lacks the remote access the operation needs.
const INVALID: WcStatus = WcStatus::RemInvReqErr;
/// How long the cm is watched for an event after a QP error.
const QUIET: Duration = Duration::from_millis(500);

/// A cm connection and A's source buffer, in a PD that outlives
/// reconnections. Fields drop in order: the connection, A's MR, its
/// buffer, the PD.
struct CmRig<'c> {
    ctx: &'c Context,
    name: String,
    client_param: fn(ConnParam) -> ConnParam,
    pair: Option<CmPair>,
    src: Source,
    pd: ProtectionDomain,
    reconnects: u32,
}

impl<'c> CmRig<'c> {
    /// `None` when the environment has no cm address (skipped loudly).
    fn new(ctx: &'c Context, name: &str) -> Option<CmRig<'c>> {
        Self::with(ctx, name, |p| p)
    }

    fn with(
        ctx: &'c Context,
        name: &str,
        client_param: fn(ConnParam) -> ConnParam,
    ) -> Option<CmRig<'c>> {
        let pd = alloc_pd(ctx);
        let src = Source::new(&pd, LEN);
        let setup = CmSetup {
            client_param: &client_param,
            ..CmSetup::default()
        };
        let pair = cm_connected_pair_with(ctx, name, &pd, &setup)?;
        Some(CmRig {
            ctx,
            name: name.to_owned(),
            client_param,
            pair: Some(pair),
            src,
            pd,
            reconnects: 0,
        })
    }

    fn pair(&self) -> &CmPair {
        self.pair.as_ref().expect("connected")
    }

    /// Disconnects the pair (asserting the usual events) and connects a
    /// new one in the same PD.
    fn reconnect(&mut self, what: &str) {
        let old = self.pair.take().expect("connected");
        let reported = disconnect_pair(old, &format!("{}: {what}", self.name));
        assert_eq!(
            reported,
            Reported::ROCE,
            "{}: {what}: a connection whose QPs failed ends like any other",
            self.name
        );
        self.connect_again(what);
    }

    /// A new pair in the same PD, with the same parameters.
    fn connect_again(&mut self, what: &str) {
        let setup = CmSetup {
            client_param: &self.client_param,
            ..CmSetup::default()
        };
        let pair = cm_connected_pair_with(self.ctx, &self.name, &self.pd, &setup)
            .unwrap_or_else(|| panic!("{}: {what}: the reconnection", self.name));
        self.pair = Some(pair);
        self.reconnects += 1;
    }

    /// The orderly end; the number of reconnections made.
    fn finish(mut self) -> u32 {
        let pair = self.pair.take().expect("connected");
        disconnect_pair(pair, &self.name);
        self.reconnects
    }
}

impl Requester for CmRig<'_> {
    fn name(&self) -> &str {
        &self.name
    }

    fn qps(&self) -> Qps<'_> {
        let p = self.pair();
        Qps {
            qp_a: &p.qp_a,
            cq_a: &p.cq_a,
            qp_b: &p.qp_b,
            cq_b: &p.cq_b,
        }
    }

    fn source(&self) -> &Source {
        &self.src
    }

    fn source_mut(&mut self) -> &mut Source {
        &mut self.src
    }

    fn pd(&self) -> &ProtectionDomain {
        &self.pd
    }

    /// On siw the WRITE kills the stream instead
    /// ([`CmRig::write_kills_the_stream`]).
    fn write_refused(&mut self, wr_id: u64, remote: Remote, target: &[u8], what: &str) {
        if self.pair().iwarp {
            return self.write_kills_the_stream(wr_id, remote, target, what);
        }
        write_refused_rc(self, wr_id, remote, target, what)
    }

    /// Checks the refusal on both sides; the cm reported nothing on either
    /// side within [`QUIET`]. Then the pair is disconnected (the cm's
    /// orderly teardown still works) and a new one connected.
    fn refused(&mut self, wc: &WorkCompletion, wr_id: u64, status: WcStatus, what: &str) {
        self.assert_refused_on_both(wc, wr_id, status, what);
        let (name, p) = (&self.name, self.pair());
        for (ch, side) in [(&p.ch_a, "client"), (&p.ch_b, "server")] {
            assert_no_event(
                ch,
                QUIET,
                &format!("{name}: {what}: {side} after the QP error"),
            );
        }
        loud(&format!(
            "{name}: {what}: both QPs in ERR; the cm reported nothing within {QUIET:?}; reconnecting"
        ));
        self.reconnect(what);
    }
}

/// REMOTE_WRITE removed in place: the WRITE is refused, the target
/// untouched, the QPs in ERR and the cm silent; over a new connection the
/// region still refuses; restored in place (same keys) the WRITE lands.
#[test]
fn cm_access_removed_and_restored_in_place() {
    on_each_cm_device(
        "cm_access_removed_and_restored_in_place",
        |name, ctx, counts| {
            if is_siw(ctx) {
                return siw_access_removed_and_restored(name, ctx, counts);
            }
            if common::kernel::skip_rxe_without_rereg(
                name,
                "cm_access_removed_and_restored_in_place",
            ) {
                return;
            }
            let Some(mut rig) = CmRig::new(ctx, name) else {
                return;
            };
            let (dst, mut mr, k, remote) = fresh_target(&rig.pd, RW);
            counts.assert_extra(2, 1, "two MRs in the rig's PD");
            counts.assert_extra_cq_qp(2, 2, "two CQs, two QPs");
            remote_write_removed_in_place(&mut rig, &mut mr, &dst, remote);
            counts.assert_extra_cq_qp(2, 2, "after the reconnection: the old pair is gone");
            rig.write_refused(3, remote, &dst, "new connection: still removed");

            mr.set_access(RW)
                .unwrap_or_else(|e| panic!("{name}: set_access(RW) in place: {e}"));
            same_keys(&mr, k, name);
            rig.write_lands(4, remote, &dst, "REMOTE_WRITE restored in place");
            assert_eq!(rig.finish(), 2, "{name}: one reconnection per refusal");

            drop(mr);
            drop(dst);
            assert_all_gone(counts);
        },
    );
}

/// The cm's default parameters grant REMOTE_ATOMIC: with it removed from
/// the MR in place a FETCH_ADD is refused (target and result untouched);
/// restored, it returns the old value and leaves the sum, twice.
#[test]
fn cm_atomic_access_removed_and_restored_in_place() {
    on_each_cm_device(
        "cm_atomic_access_removed_and_restored_in_place",
        |name, ctx, counts| {
            let Some(mut rig) = CmRig::new(ctx, name) else {
                return;
            };
            let mut dst = anon(LEN);
            dst[AT..AT + 8].copy_from_slice(&OLD.to_ne_bytes());
            if is_siw(ctx) {
                // siw: no atomics to remove or restore (module docs).
                let mr = fresh_mr(&rig.pd, &mut dst, ATOMIC.union(RW));
                siw_fetch_add_refused_at_post(&mut rig, &dst, &mr, "FETCH_ADD on siw");
                rig.finish();
                drop(mr);
                drop(dst);
                assert_all_gone(counts);
                return;
            }
            if common::kernel::skip_rxe_without_rereg(
                name,
                "cm_atomic_access_removed_and_restored_in_place",
            ) {
                return;
            }
            let mut mr = fresh_mr(&rig.pd, &mut dst, ATOMIC);
            atomic_removed_and_restored_in_place(&mut rig, &mut mr, &dst);
            rig.finish();
            drop(mr);
            drop(dst);
            assert_all_gone(counts);
        },
    );
}

/// The cm grants the passive side REMOTE_READ and REMOTE_ATOMIC only when
/// the requester asks for an initiator depth: with `initiator_depth(0)`
/// B's QP gets REMOTE_WRITE alone, so a WRITE lands but a FETCH_ADD is
/// refused as an invalid request (rxe checks the QP's access before the
/// MR's), although the MR allows atomics.
#[test]
fn cm_without_initiator_depth_grants_no_atomics() {
    on_each_cm_device(
        "cm_without_initiator_depth_grants_no_atomics",
        |name, ctx, counts| {
            let Some(mut rig) = CmRig::with(ctx, name, |p| p.initiator_depth(0)) else {
                return;
            };
            // The request as the passive side sees it (ib_cm turns the REQ's
            // values round): the responder resources to grant are the
            // requester's initiator depth, 0.
            let req = &rig.pair().request;
            loud(&format!(
                "{name}: request seen by the server: responder resources {}, initiator depth {}",
                req.responder_resources, req.initiator_depth
            ));
            assert_eq!(
                (req.responder_resources, req.initiator_depth),
                (0, 1),
                "{name}: the request's depths, seen from the server"
            );
            let mut dst = anon(LEN);
            dst[AT..AT + 8].copy_from_slice(&OLD.to_ne_bytes());
            let mr = fresh_mr(&rig.pd, &mut dst, ATOMIC.union(AccessFlags::REMOTE_WRITE));
            if is_siw(ctx) {
                // siw: atomics are refused at post whatever the cm granted.
                siw_fetch_add_refused_at_post(
                    &mut rig,
                    &dst,
                    &mr,
                    "FETCH_ADD without an initiator depth",
                );
                rig.finish();
                drop(mr);
                drop(dst);
                assert_all_gone(counts);
                return;
            }
            let remote = at(&dst, mr.rkey());
            rig.write_lands(1, remote, &dst, "WRITE without an initiator depth");
            let what = "FETCH_ADD to a QP the cm gave no REMOTE_ATOMIC";
            rig.fetch_add_refused(2, remote, &dst, INVALID, what);
            rig.finish();
            drop(mr);
            drop(dst);
            assert_all_gone(counts);
        },
    );
}

/// The region moved in place to another PD than the QPs' refuses the
/// WRITE; moved back it accepts it (over the new connection); the PD it
/// was moved to cannot be deallocated while the MR is in it.
#[test]
fn cm_pd_moved_away_and_back() {
    on_each_cm_device("cm_pd_moved_away_and_back", |name, ctx, counts| {
        if is_siw(ctx) {
            return siw_pd_moved_away_and_back(name, ctx, counts);
        }
        if common::kernel::skip_rxe_without_rereg(name, "cm_pd_moved_away_and_back") {
            return;
        }
        let Some(mut rig) = CmRig::new(ctx, name) else {
            return;
        };
        let pd2 = alloc_pd(ctx);
        let (dst, mut mr, k, remote) = fresh_target(&rig.pd, RW);
        rig.write_lands(1, remote, &dst, "in the QPs' PD");

        mr.set_pd(&pd2)
            .unwrap_or_else(|e| panic!("{name}: set_pd(pd2) in place: {e}"));
        same_keys(&mr, k, name);
        rig.write_refused(2, remote, &dst, "moved to another PD");
        let pd2 = dealloc_refused_busy(pd2, "the PD the MR was moved to");

        mr.set_pd(&rig.pd)
            .unwrap_or_else(|e| panic!("{name}: set_pd back in place: {e}"));
        same_keys(&mr, k, name);
        rig.write_lands(3, remote, &dst, "moved back to the QPs' PD");
        rig.finish();

        drop(mr);
        pd2.dealloc()
            .unwrap_or_else(|e| panic!("{name}: dealloc of pd2 once empty: {}", e.error));
        drop(dst);
        assert_all_gone(counts);
    });
}

/// A new translation ([`translation_replaced`]) over the cm connection:
/// refused in place, replaced; the old rkey is refused (rxe: remote
/// access error; siw: the stream killed), which costs one reconnection.
#[test]
fn cm_translation_replaced() {
    on_each_cm_device("cm_translation_replaced", |name, ctx, counts| {
        let Some(mut rig) = CmRig::new(ctx, name) else {
            return;
        };
        translation_replaced(&mut rig, counts);
        assert_eq!(rig.finish(), 1, "{name}: one reconnection");
        assert_all_gone(counts);
    });
}

// ---------------------------------------------------------------------
// siw: every change by the replace fallback.

fn is_siw(ctx: &Context) -> bool {
    driver(ctx) == Driver::Siw
}

impl CmRig<'_> {
    /// siw's answer to a WRITE with a key the responder refuses (module
    /// docs): the WRITE completes successfully (or, when the close
    /// overtakes the send, with LOC_QP_OP_ERR), both sides hear
    /// DISCONNECTED and nothing else, both QPs are in ERR,
    /// `target` is untouched. Then the dead pair's ids are destroyed (the
    /// kernel's counts are the channels': address, route, established,
    /// disconnected; established, disconnected; the request) and a new
    /// pair is connected.
    fn write_kills_the_stream(&mut self, wr_id: u64, remote: Remote, target: &[u8], what: &str) {
        let name = self.name.clone();
        let before = now(target);
        let (_, wc) = self.write(wr_id, remote, what);
        let p = self.pair();
        assert_siw_refused_write_completion(&wc, wr_id, &p.qp_a, &format!("{name}: {what}"));
        for (ch, id, side) in [
            (&p.ch_a, &p.client, "client"),
            (&p.ch_b, &p.server, "server"),
        ] {
            let ev = next_event(ch, &format!("{name}: {what}: {side}"));
            assert!(
                matches!(ev.kind, EventKind::Disconnected),
                "{name}: {what}: {side}: {ev:?}"
            );
            assert_eq!(ev.id, id.handle(), "{name}: {what}: {side}");
        }
        for (ch, side) in [(&p.ch_a, "client"), (&p.ch_b, "server")] {
            assert_no_event(
                ch,
                Duration::from_millis(200),
                &format!("{name}: {what}: {side}"),
            );
        }
        let (a, b) = (
            common::kernel::reported_state(p.qp_a.refresh_state(), &format!("{name}: {what}: A")),
            common::kernel::reported_state(p.qp_b.refresh_state(), &format!("{name}: {what}: B")),
        );
        loud(&format!(
            "{name}: {what}: WRITE with rkey {:#x} -> {:?}, then DISCONNECTED on both sides; QPs {a:?} (client) {b:?} (server)",
            remote.rkey, wc.status()
        ));
        if let (Some(a), Some(b)) = (a, b) {
            assert_eq!(
                (a, b),
                (QpState::Err, QpState::Err),
                "{name}: {what}: the requester's and the responder's QP"
            );
        }
        assert!(
            now(target) == before,
            "{name}: {what}: the refused WRITE changed the target"
        );
        assert_no_completion(&p.cq_a, &format!("{name}: {what}: A"));
        let pair = self.pair.take().expect("connected");
        let reported = pair.destroy(&format!("{name}: {what}"));
        assert_eq!(reported, Reported::IWARP, "{name}: {what}");
        self.connect_again(what);
    }
}

/// siw's counterpart of [`cm_access_removed_and_restored_in_place`]: the
/// region's remote access removed and restored, each by a replace; every
/// key that no longer grants a WRITE kills the stream.
fn siw_access_removed_and_restored(name: &str, ctx: &Context, counts: &HandleCounts) {
    let Some(mut rig) = CmRig::new(ctx, name) else {
        return;
    };
    let (dst, mut mr, k, first) = fresh_target(&rig.pd, RW_READ);
    counts.assert_extra(2, 1, "two MRs in the rig's PD");
    rig.write_read_lands(1, first, &dst, "REMOTE_WRITE|READ granted");

    let err = mr
        .set_access(AccessFlags::LOCAL_WRITE)
        .expect_err("siw: strict");
    refused_in_place(&mr, k, err, &format!("{name}: access strictly"));
    replaced(
        &mut mr,
        ReregFlags::ACCESS,
        None,
        AccessFlags::LOCAL_WRITE,
        &format!("{name}: remote access removed"),
    );
    counts.assert_extra(2, 1, "after the replace: the old registration is gone");
    let removed = at(&dst, mr.rkey());
    rig.write_kills_the_stream(2, first, &dst, "the old rkey after the replace");
    rig.write_kills_the_stream(3, removed, &dst, "the new rkey without REMOTE_WRITE");

    replaced(
        &mut mr,
        ReregFlags::ACCESS,
        None,
        RW_READ,
        &format!("{name}: remote access restored"),
    );
    let restored = at(&dst, mr.rkey());
    rig.write_read_lands(4, restored, &dst, "REMOTE_WRITE|READ restored by a replace");
    rig.write_kills_the_stream(
        5,
        removed,
        &dst,
        "the removed-access rkey after the replace",
    );
    rig.write_read_lands(6, restored, &dst, "the restored rkey, new connection");
    assert_eq!(rig.finish(), 3, "{name}: one reconnection per refusal");
    drop(mr);
    drop(dst);
    assert_all_gone(counts);
}

/// siw's counterpart of [`cm_pd_moved_away_and_back`]: moved to another
/// PD by a replace, the region's new rkey kills the stream of the QPs'
/// PD (siw finds the STag in another PD), as does the old one; moved back
/// by a replace, WRITE and READ land; the PD it was moved to cannot be
/// deallocated while the MR is in it.
fn siw_pd_moved_away_and_back(name: &str, ctx: &Context, counts: &HandleCounts) {
    let Some(mut rig) = CmRig::new(ctx, name) else {
        return;
    };
    let pd2 = alloc_pd(ctx);
    let (dst, mut mr, k, home) = fresh_target(&rig.pd, RW_READ);
    rig.write_read_lands(1, home, &dst, "in the QPs' PD");

    let err = mr.set_pd(&pd2).expect_err("siw: strict");
    refused_in_place(&mr, k, err, &format!("{name}: PD strictly"));
    replaced(
        &mut mr,
        ReregFlags::PD,
        Some(&pd2),
        AccessFlags::empty(),
        &format!("{name}: moved to pd2"),
    );
    let away = at(&dst, mr.rkey());
    rig.write_kills_the_stream(2, away, &dst, "the new rkey, in another PD");
    rig.write_kills_the_stream(3, home, &dst, "the old rkey after the move");
    let pd2 = dealloc_refused_busy(pd2, "the PD the MR was moved to");

    replaced(
        &mut mr,
        ReregFlags::PD,
        Some(&rig.pd),
        AccessFlags::empty(),
        &format!("{name}: moved back"),
    );
    let back = at(&dst, mr.rkey());
    rig.write_read_lands(4, back, &dst, "moved back to the QPs' PD by a replace");
    assert_eq!(rig.finish(), 2, "{name}: one reconnection per refusal");
    drop(mr);
    pd2.dealloc()
        .unwrap_or_else(|e| panic!("{name}: dealloc of pd2 once empty: {}", e.error));
    drop(dst);
    assert_all_gone(counts);
}

/// siw has no atomics: a FETCH_ADD is refused at post, typed, whatever the
/// MR and the cm grant; nothing completes, the target and the result stay,
/// and the connection lives on (a WRITE lands after it).
fn siw_fetch_add_refused_at_post(rig: &mut CmRig<'_>, dst: &[u8], mr: &MemoryRegion, what: &str) {
    let remote = at(dst, mr.rkey());
    rig.siw_fetch_add_refused_at_post(remote, dst, what);
    // Beside the atomic's target: the connection still carries a WRITE.
    let at = Remote {
        addr: remote.addr + 64,
        ..remote
    };
    rig.write_lands(2, at, dst, &format!("{what}: a WRITE after the refusal"));
}
