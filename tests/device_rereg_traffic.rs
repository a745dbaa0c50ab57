//! Traffic proves every re-registration: rdma-core's seven rereg cases of
//! tests/test_mr.py (which skip on rxe, whose libibverbs provider has no
//! `rereg_mr`), ported to rxe0 with the data checked byte for byte.
//!
//! Two RC QPs of one context are connected to each other (loopback over
//! the port's RoCE v2 GID). A is the requester: it makes the RDMA WRITEs
//! and atomics; B owns the memory regions that are re-registered. After
//! each change the kernel's answer (in place, same keys; or replaced, new
//! keys) is checked against what the next WRITE or FETCH_ADD does: it
//! lands exactly where and what it should, or it is refused with a remote
//! access error and the target bytes are untouched. A refusal moves both
//! QPs to ERR (RC); they are recovered (`common::recover_pair`) and the
//! traffic goes on. The last case toggles REMOTE_WRITE from a second
//! thread under a stream of WRITEs. Every case ends with the kernel's
//! handle counts back where they started.
//!
//! On siw0 the pair is connected through the iWARP connection manager and
//! every `REREG_MR` is refused in place (`Cmd`, `EOPNOTSUPP`, the MR
//! unchanged: its rkey still lands), so each case goes by the replace
//! fallback: the new rkey's WRITE and READ land byte for byte; a refused
//! WRITE completes with SUCCESS on the requester (siw completes a WRITE
//! once it is on the wire; LOC_QP_OP_ERR if the close overtook it), the
//! responder terminates, both cm ids hear
//! DISCONNECTED, the requester's QP is in ERR and the target is untouched;
//! a new cm connection (new QPs in the same PD) is the way back. siw has
//! no atomics (refused before the ring); the live toggling stream needs
//! in-place changes and runs on rxe only (said loudly).

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::traffic::*;
use common::*;
use uverbs::error::Errno;
use uverbs::mr::{MrState, ReregFallback, ReregFlags, ReregOutcome, ReregPath, RetargetBuffers};
use uverbs::qp::Mtu;
use uverbs::wr::{Remote, Sge, WcOpcode, WcStatus, WorkCompletion};
use uverbs::{AccessFlags, Context, MemoryRegion, ProtectionDomain};

/// Two connected RC QPs, how to reconnect them, and A's source buffer.
struct Rig {
    name: String,
    /// For a new cm connection on siw.
    ctx: Context,
    cqe: u32,
    q: TwoQps,
    gid: uverbs::device::Gid,
    mtu: Mtu,
    access: AccessFlags,
    src: Source,
}

impl Rig {
    fn new(ctx: &Context, name: &str, access: AccessFlags, src_len: usize, cqe: u32) -> Rig {
        let (gid, mtu) = roce_path(ctx, name);
        let q = connected_rc_pair_with(ctx, name, cqe, None, access);
        let src = Source::new(&q.pd, src_len);
        Rig {
            name: name.to_owned(),
            ctx: ctx.clone(),
            cqe,
            q,
            gid,
            mtu,
            access,
            src,
        }
    }

    /// True on siw: the pair is connected through the cm.
    fn siw(&self) -> bool {
        self.q.iwarp()
    }

    /// siw's refusal of a WRITE (measured on Linux 6.12 in every
    /// configuration, as `device_cm_siw` found for an old rkey): the
    /// requester completes the WRITE with SUCCESS (siw completes a WRITE
    /// once it is on the wire), or LOC_QP_OP_ERR when the connection closed
    /// under it while it was being sent; the responder finds no usable MR for the
    /// STag (unknown key, no REMOTE_WRITE, another PD), terminates, and the
    /// connection drops: both ids hear DISCONNECTED, the requester's QP is
    /// in ERR as the kernel reports it, and the target is untouched. Then a
    /// new connection ([`cm_reconnect`]) carries a WRITE that lands: the
    /// way back on iWARP.
    fn siw_write_refused(&mut self, wr_id: u64, remote: Remote, target: &[u8], what: &str) {
        let name = self.name.clone();
        let before = now(target);
        let (_, wc) = self.write(wr_id, remote, what);
        let link = self.q.cm.as_ref().expect("siw pairs have a cm link");
        let events = cm_events(link, Duration::from_secs(3));
        let state =
            common::kernel::reported_state(self.q.qp_a.refresh_state(), &format!("{name}: {what}"));
        let mut b = [WorkCompletion::default(); 8];
        let nb = self.q.cq_b.poll(&mut b).unwrap();
        loud(&format!(
            "{name}: {what}: WRITE with rkey {:#x}: {:?}; cm events {events:?}; QP A {state:?}; B saw {:?}",
            remote.rkey,
            wc.status(),
            &b[..nb]
        ));
        assert!(
            now(target) == before,
            "{name}: {what}: a refused WRITE changed the target bytes"
        );
        assert_siw_refused_write_completion(&wc, wr_id, &self.q.qp_a, &format!("{name}: {what}"));
        assert_disconnected(link, &events, &format!("{name}: {what}"));
        if let Some(state) = state {
            assert_eq!(state, uverbs::qp::QpState::Err, "{name}: {what}: QP A");
        }
        assert_eq!(
            nb,
            0,
            "{name}: {what}: B completed something: {:?}",
            &b[..nb]
        );
        cm_reconnect(&mut self.q, &self.ctx, &name, self.cqe);
        // The new connection works (into A's own source buffer's second half).
        let mut scratch = anon(LEN);
        let scratch_mr = fresh_mr(&self.q.pd, &mut scratch, RW);
        let to = at(&scratch, scratch_mr.rkey());
        self.write_lands(
            wr_id | 0x8000,
            to,
            &scratch,
            &format!("{what}: after the new connection"),
        );
        drop(scratch_mr);
    }
}

impl Requester for Rig {
    fn name(&self) -> &str {
        &self.name
    }

    fn qps(&self) -> Qps<'_> {
        Qps {
            qp_a: &self.q.qp_a,
            cq_a: &self.q.cq_a,
            qp_b: &self.q.qp_b,
            cq_b: &self.q.cq_b,
        }
    }

    fn source(&self) -> &Source {
        &self.src
    }

    fn source_mut(&mut self) -> &mut Source {
        &mut self.src
    }

    fn pd(&self) -> &ProtectionDomain {
        &self.q.pd
    }

    /// On siw the WRITE kills the stream instead ([`Rig::siw_write_refused`]).
    fn write_refused(&mut self, wr_id: u64, remote: Remote, target: &[u8], what: &str) {
        if self.siw() {
            return self.siw_write_refused(wr_id, remote, target, what);
        }
        write_refused_rc(self, wr_id, remote, target, what)
    }

    /// Checks the refusal on both sides, then takes both QPs back to RTS.
    fn refused(&mut self, wc: &WorkCompletion, wr_id: u64, status: WcStatus, what: &str) {
        self.assert_refused_on_both(wc, wr_id, status, what);
        let others = recover_pair(&self.q, self.gid, self.mtu, self.access, what);
        assert!(
            others.is_empty(),
            "{}: {what}: recovery saw {others:?}",
            self.name
        );
    }
}

/// [`on_each_data_path_device_counted`] with a new [`Rig`] (QP access,
/// source length, CQ size) handed to `body`; an rxe without REREG_MR is
/// skipped loudly, as there is nothing in place to prove.
fn on_each_rereg_rig(
    test: &str,
    (access, src_len, cqe): (AccessFlags, usize, u32),
    mut body: impl FnMut(&str, &HandleCounts, Rig),
) {
    on_each_data_path_device_counted(test, |name, ctx, counts| {
        let rig = Rig::new(ctx, name, access, src_len, cqe);
        if !rig.siw() && common::kernel::skip_rxe_without_rereg(name, test) {
            return;
        }
        body(name, counts, rig)
    });
}

/// test_mr_rereg_access_bad_flow: traffic on a region that allows it, then
/// REMOTE_WRITE removed in place: the peer's WRITE is refused with a remote
/// access error, the target untouched, and both QPs went to ERR; once
/// recovered they carry traffic again (to another region), while this one
/// keeps refusing.
#[test]
fn access_bad_flow_remote_write_removed_in_place_is_refused() {
    on_each_rereg_rig(
        "access_bad_flow_remote_write_removed_in_place_is_refused",
        (QP_ACCESS, LEN, 32),
        |_, counts, mut rig| {
            if rig.siw() {
                return siw_access_removed(rig, counts);
            }
            let (dst, mut mr, _, remote) = fresh_target(&rig.q.pd, RW);
            counts.assert_extra(2, 1, "two MRs in the pair's PD");
            counts.assert_extra_cq_qp(2, 2, "two CQs, two QPs");
            remote_write_removed_in_place(&mut rig, &mut mr, &dst, remote);
            recovered_elsewhere(rig, counts, 3, (dst, mr, remote), "still removed");
        },
    );
}

/// siw's access_bad_flow: traffic (WRITE and READ) on a region that allows
/// it; REMOTE_WRITE removed in place is refused (the rkey still lands:
/// nothing changed); removed by replace: the new rkey's WRITE is refused
/// the iWARP way (connection dropped, target untouched), a new connection
/// carries traffic to another region, and the region keeps refusing.
fn siw_access_removed(mut rig: Rig, counts: &HandleCounts) {
    let name = rig.name.clone();
    let (dst, mut mr, k, remote) = fresh_target(&rig.q.pd, RW_READ);
    counts.assert_extra(2, 1, "two MRs in the pair's PD");
    rig.write_lands(1, remote, &dst, "REMOTE_WRITE granted");
    rig.read_lands(2, remote, &dst, "REMOTE_READ granted");
    let err = mr.set_access(AccessFlags::LOCAL_WRITE).unwrap_err();
    refused_in_place(
        &mr,
        k,
        err,
        &format!("{name}: REMOTE_WRITE removed in place"),
    );
    assert_eq!(mr.access(), RW_READ, "{name}: unchanged");
    rig.write_lands(3, remote, &dst, "after the refused in-place change");
    replaced(
        &mut mr,
        ReregFlags::ACCESS,
        None,
        AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ,
        &format!("{name}: REMOTE_WRITE removed by replace"),
    );
    let new = at(&dst, mr.rkey());
    rig.read_lands(4, new, &dst, "the new rkey still reads");
    rig.write_refused(5, new, &dst, "the new rkey without REMOTE_WRITE");
    rig.write_refused(6, remote, &dst, "the old rkey after the replace");
    let without = "still without REMOTE_WRITE";
    recovered_elsewhere(rig, counts, 7, (dst, mr, new), without);
}

/// The end of a bad flow, once the pair is recovered: WRITE `wr_id` to
/// another region lands, WRITE `wr_id + 1` to `remote` (`mr`'s, over
/// `dst`) is `still` refused; then everything is dropped and no kernel
/// object is left.
fn recovered_elsewhere(
    mut rig: Rig,
    counts: &HandleCounts,
    wr_id: u64,
    (dst, mr, remote): (memmap2::MmapMut, MemoryRegion, Remote),
    still: &str,
) {
    let (other, other_mr, _, to_other) = fresh_target(&rig.q.pd, RW);
    rig.write_lands(wr_id, to_other, &other, "recovered: another MR");
    rig.write_refused(wr_id + 1, remote, &dst, &format!("recovered: {still}"));
    drop((other_mr, mr, rig));
    drop((other, dst));
    assert_all_gone(counts);
}

/// test_mr_rereg_access: a region registered LOCAL_WRITE only refuses the
/// peer's WRITE; REMOTE_WRITE granted in place (same keys) lets it land;
/// removed and restored in place, the same again.
#[test]
fn access_restored_in_place_lets_the_write_land() {
    on_each_rereg_rig(
        "access_restored_in_place_lets_the_write_land",
        (QP_ACCESS, LEN, 32),
        |name, counts, mut rig| {
            let (dst, mut mr, k, remote) = fresh_target(&rig.q.pd, AccessFlags::LOCAL_WRITE);
            rig.write_refused(1, remote, &dst, "registered LOCAL_WRITE only");

            if rig.siw() {
                // siw: granted in place is refused (the rkey keeps refusing),
                // granted by replace the new rkey writes and reads, and the
                // old one is refused; each refusal costs the connection.
                let err = mr.set_access(RW_READ).unwrap_err();
                refused_in_place(
                    &mr,
                    k,
                    err,
                    &format!("{name}: REMOTE_WRITE granted in place"),
                );
                rig.write_refused(2, remote, &dst, "after the refused in-place grant");
                replaced(
                    &mut mr,
                    ReregFlags::ACCESS,
                    None,
                    RW_READ,
                    &format!("{name}: granted by replace"),
                );
                let new = at(&dst, mr.rkey());
                rig.write_lands(3, new, &dst, "the new rkey with REMOTE_WRITE");
                rig.read_lands(4, new, &dst, "the new rkey with REMOTE_READ");
                rig.write_refused(5, remote, &dst, "the old rkey after the replace");
                rig.write_lands(6, new, &dst, "the new rkey on the new connection");
                drop((mr, rig));
                drop(dst);
                assert_all_gone(counts);
                return;
            }
            mr.set_access(RW)
                .unwrap_or_else(|e| panic!("{name}: set_access(RW) in place: {e}"));
            same_keys(&mr, k, name);
            rig.write_lands(2, remote, &dst, "REMOTE_WRITE granted in place");

            mr.set_access(AccessFlags::LOCAL_WRITE).unwrap();
            rig.write_refused(3, remote, &dst, "REMOTE_WRITE removed in place");
            mr.set_access(RW).unwrap();
            same_keys(&mr, k, name);
            rig.write_lands(4, remote, &dst, "REMOTE_WRITE restored in place");

            drop((mr, rig));
            drop(dst);
            assert_all_gone(counts);
        },
    );
}

/// The atomic case: with REMOTE_ATOMIC removed in place a FETCH_ADD is
/// refused (target and local result untouched); restored, it returns the
/// old value and leaves the sum, twice in a row. The QPs grant
/// REMOTE_ATOMIC themselves ([`QP_ACCESS_ATOMIC`]).
#[test]
fn atomic_access_removed_and_restored_in_place() {
    on_each_rereg_rig(
        "atomic_access_removed_and_restored_in_place",
        (QP_ACCESS_ATOMIC, LEN, 32),
        |name, counts, mut rig| {
            let mut dst = anon(LEN);
            dst[AT..AT + 8].copy_from_slice(&OLD.to_ne_bytes());
            let mut mr = fresh_mr(&rig.q.pd, &mut dst, ATOMIC);
            let k = keys(&mr);
            let remote = at(&dst, mr.rkey());
            if rig.siw() {
                // siw has no atomics: the FETCH_ADD is refused before the
                // ring, and the in-place access change is refused too.
                // Nothing completes, nothing changes, the QP still works.
                rig.siw_fetch_add_refused_at_post(remote, &dst, "FETCH_ADD on siw");
                let err = mr.set_access(AccessFlags::LOCAL_WRITE).unwrap_err();
                refused_in_place(
                    &mr,
                    k,
                    err,
                    &format!("{name}: REMOTE_ATOMIC removed in place"),
                );
                let (other, other_mr, _, to) = fresh_target(&rig.q.pd, RW);
                rig.write_lands(2, to, &other, "a WRITE after the refused atomic");
                drop((other_mr, mr, rig));
                drop((other, dst));
                assert_all_gone(counts);
                return;
            }
            atomic_removed_and_restored_in_place(&mut rig, &mut mr, &dst);

            drop((mr, rig));
            drop(dst);
            assert_all_gone(counts);
        },
    );
}

/// test_mr_rereg_pd: the region moved in place to another PD than the
/// QPs' refuses the peer's WRITE; moved back it accepts it; moved again
/// it refuses again, and its new PD cannot be deallocated while it is in
/// there.
#[test]
fn pd_moved_away_back_and_away_again() {
    on_each_rereg_rig(
        "pd_moved_away_back_and_away_again",
        (QP_ACCESS, LEN, 32),
        |name, counts, mut rig| {
            let pd2 = alloc_pd(&rig.ctx);
            let (dst, mut mr, k, remote) = fresh_target(&rig.q.pd, RW_READ);
            rig.write_lands(1, remote, &dst, "in the QPs' PD");
            if rig.siw() {
                // siw: moved in place is refused (the rkey still lands); moved
                // by replace to pd2 the new rkey is refused (connection lost)
                // and pd2 cannot go; moved back by replace, the newest rkey
                // writes and reads, the pd2 one is refused.
                let err = mr.set_pd(&pd2).unwrap_err();
                refused_in_place(&mr, k, err, &format!("{name}: moved to pd2 in place"));
                assert!(mr.is_in(&rig.q.pd), "{name}: still in the QPs' PD");
                rig.write_lands(2, remote, &dst, "after the refused in-place move");
                replaced(
                    &mut mr,
                    ReregFlags::PD,
                    Some(&pd2),
                    AccessFlags::empty(),
                    &format!("{name}: moved to pd2 by replace"),
                );
                assert!(mr.is_in(&pd2));
                let in_pd2 = at(&dst, mr.rkey());
                rig.write_refused(3, in_pd2, &dst, "moved to another PD");
                let pd2 = dealloc_refused_busy(pd2, "the PD the MR was moved to");
                replaced(
                    &mut mr,
                    ReregFlags::PD,
                    Some(&rig.q.pd),
                    AccessFlags::empty(),
                    &format!("{name}: moved back by replace"),
                );
                let back = at(&dst, mr.rkey());
                rig.write_lands(4, back, &dst, "moved back to the QPs' PD");
                rig.read_lands(5, back, &dst, "moved back to the QPs' PD");
                rig.write_refused(6, in_pd2, &dst, "the pd2 rkey after moving back");
                drop((mr, rig));
                pd2.dealloc()
                    .unwrap_or_else(|e| panic!("{name}: dealloc of pd2 once empty: {}", e.error));
                drop(dst);
                assert_all_gone(counts);
                return;
            }

            mr.set_pd(&pd2)
                .unwrap_or_else(|e| panic!("{name}: set_pd(pd2) in place: {e}"));
            same_keys(&mr, k, name);
            assert!(mr.is_in(&pd2));
            rig.write_refused(2, remote, &dst, "moved to another PD");

            mr.set_pd(&rig.q.pd)
                .unwrap_or_else(|e| panic!("{name}: set_pd back in place: {e}"));
            same_keys(&mr, k, name);
            rig.write_lands(3, remote, &dst, "moved back to the QPs' PD");

            mr.set_pd(&pd2).unwrap();
            rig.write_refused(4, remote, &dst, "moved to another PD again");
            let pd2 = dealloc_refused_busy(pd2, "the PD the MR was moved to");

            drop((mr, rig));
            pd2.dealloc()
                .unwrap_or_else(|e| panic!("{name}: dealloc of pd2 once empty: {}", e.error));
            drop(dst);
            assert_all_gone(counts);
        },
    );
}

/// test_mr_rereg_addr with a raw `MemoryRegion`: [`translation_replaced`]
/// over the pair connected by hand (on siw by the cm).
#[test]
fn translation_refused_in_place_then_replaced_raw() {
    on_each_data_path_device_counted(
        "translation_refused_in_place_then_replaced_raw",
        |name, ctx, counts| {
            let mut rig = Rig::new(ctx, name, QP_ACCESS, LEN, 32);
            translation_replaced(&mut rig, counts);
            drop(rig);
            assert_all_gone(counts);
        },
    );
}

/// test_mr_rereg_addr with an owned buffer: `BufferMr::retarget` strict is
/// refused in place on rxe and hands both buffers back with the region
/// unchanged (its rkey still lands); with the replace fallback the region
/// owns the new buffer under new keys: a WRITE with the new rkey lands in
/// it, one with the old rkey is refused, and the old buffer comes back
/// untouched.
#[test]
fn translation_refused_in_place_then_replaced_retarget() {
    on_each_data_path_device_counted(
        "translation_refused_in_place_then_replaced_retarget",
        |name, ctx, counts| {
            let mut rig = Rig::new(ctx, name, QP_ACCESS, LEN, 32);
            let mut mr = rig
                .q
                .pd
                .reg_remote_buffer(vec![0u8; LEN], RW_READ)
                .unwrap_or_else(|e| panic!("{name}: reg_remote_buffer: {}", e.error));
            // SAFETY: nothing has READ the region yet (siw hands a
            // peer-readable buffer back only after this; issue 38).
            unsafe { mr.assume_peer_reads_done() };
            let k = keys(mr.mr());
            let old_remote = at_addr(mr.addr(), mr.rkey());

            let refused = mr
                .retarget(vec![0u8; 2 * LEN], ReregFallback::Strict)
                .expect_err("rxe and siw change translation in place");
            assert_eq!(
                (
                    refused.error.outcome(),
                    refused.error.errno(),
                    refused.error.mr_state()
                ),
                (ReregOutcome::Cmd, Errno::OPNOTSUPP, MrState::Old),
                "{name}: {}",
                refused.error
            );
            let RetargetBuffers::Kept {
                mut mr,
                new: Some(new),
            } = refused.buffers
            else {
                panic!("{name}: a refusal that left the MR unchanged keeps it and hands the new buffer back");
            };
            same_keys(mr.mr(), k, name);
            rig.write_lands(1, old_remote, &mut mr, "retarget refused in place");

            let done = mr
                .retarget(new, ReregFallback::Replace)
                .unwrap_or_else(|e| panic!("{name}: retarget with replace: {}", e.error));
            assert_eq!(done.path, ReregPath::Replaced, "{name}");
            assert!(
                done.fork_warning.is_none(),
                "{name}: {:?}",
                done.fork_warning
            );
            let (mut mr, old) = (done.mr, done.old);
            assert_ne!(
                mr.mr().handle(),
                k.0,
                "{name}: a replaced MR has a new handle"
            );
            assert_ne!(mr.rkey(), k.2, "{name}: a replaced MR has a new rkey");
            assert_eq!(mr.len(), 2 * LEN);
            counts.assert_extra(2, 1, "after the retarget: the old registration is gone");

            let old_bytes = old.clone();
            let new_remote = at_addr(mr.addr(), mr.rkey());
            rig.write_lands(2, new_remote, &mut mr, "the new rkey into the new buffer");
            rig.read_lands(4, new_remote, &mut mr, "the new rkey from the new buffer");
            rig.write_refused(3, old_remote, &old, "the old rkey after the retarget");
            rig.write_lands(5, new_remote, &mut mr, "the new rkey after the refusal");
            assert_eq!(old, old_bytes, "{name}: the old buffer changed");

            // SAFETY: the one READ of the region (`read_lands`) completed:
            // it returns only after its completion was polled.
            unsafe { mr.assume_peer_reads_done() };
            let buffer = mr
                .dereg()
                .unwrap_or_else(|e| panic!("{name}: dereg: {}", e.error));
            assert_eq!(buffer.len(), 2 * LEN);
            drop(rig);
            assert_all_gone(counts);
        },
    );
}

/// issue 38, item 4, proven by traffic: a `RemoteBufferMr` registered
/// without REMOTE_WRITE is given it by `rereg_with(Replace, ACCESS)`. On
/// siw, and on rxe under Linux 6.1 (no REREG_MR there), the registration is
/// replaced: a new rkey, under which the peer's WRITE lands byte for byte
/// and a READ brings the same bytes back, the bytes around it (written
/// before the change) kept. On rxe under 6.12 the access changes in place,
/// the rkey stays and the WRITE lands under it: the fallback is not used.
#[test]
fn remote_buffer_given_remote_write_by_the_fallback_takes_the_write() {
    let test = "remote_buffer_given_remote_write_by_the_fallback_takes_the_write";
    on_each_data_path_device_counted(test, |name, ctx, counts| {
        let mut rig = Rig::new(ctx, name, QP_ACCESS, LEN, 32);
        let expected = match rereg_behaviour(ctx) {
            Driver::Rxe => ReregPath::InPlace,
            _ => ReregPath::Replaced,
        };
        let before_bytes = pattern(0x38, LEN);
        let mut mr = rig
            .q
            .pd
            .reg_remote_buffer(
                before_bytes.clone(),
                AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ,
            )
            .unwrap_or_else(|e| panic!("{name}: reg_remote_buffer: {}", e.error));
        let k = keys(mr.mr());
        rig.read_lands(
            1,
            at_addr(mr.addr(), mr.rkey()),
            &mut mr,
            "REMOTE_READ before the change",
        );

        let path = mr
            .rereg_with(ReregFallback::Replace, ReregFlags::ACCESS, None, RW_READ)
            .unwrap_or_else(|e| panic!("{name}: RemoteBufferMr::rereg_with(Replace, ACCESS): {e}"));
        assert_eq!(path, expected, "{name}: the path for this kernel");
        match path {
            ReregPath::InPlace => same_keys(mr.mr(), k, name),
            ReregPath::Replaced => assert_replaced(mr.mr(), k, Ok(path), name),
        }
        assert_eq!(mr.mr().access(), RW_READ, "{name}");
        counts.assert_extra(2, 1, "after the change: one registration of the target");

        let remote = at_addr(mr.addr(), mr.rkey());
        rig.write_lands(
            2,
            remote,
            &mut mr,
            "the WRITE under the rkey the change left",
        );
        rig.read_lands(3, remote, &mut mr, "the READ of it");
        // SAFETY: both READs of the region (`read_lands`) completed: each
        // returns only after its completion was polled.
        unsafe { mr.assume_peer_reads_done() };
        let bytes = mr
            .dereg()
            .unwrap_or_else(|e| panic!("{name}: dereg: {}", e.error));
        assert_eq!(
            bytes[..AT],
            before_bytes[..AT],
            "{name}: bytes before the WRITE kept"
        );
        assert_eq!(
            bytes[AT..AT + MSG],
            pattern(2, MSG)[..],
            "{name}: the WRITE's bytes"
        );
        assert_eq!(
            bytes[AT + MSG..],
            before_bytes[AT + MSG..],
            "{name}: bytes after it kept"
        );
        drop(rig);
        assert_all_gone(counts);
    });
}

/// The stream's length, its window (signalled WRITEs outstanding at once)
/// and the bytes of each WRITE (one slot of the window each, in both the
/// source and the target buffer).
const STREAM: u64 = 50_000;
const WINDOW: usize = 16;
const SLOT: usize = 64;
/// The stream gives up after this long (in the VM it takes about 2 s).
const STREAM_LIMIT: Duration = Duration::from_secs(150);

/// What the WRITE with sequence number `seq` carries: the number itself,
/// then bytes that depend on it.
fn slot_bytes(seq: u64) -> [u8; SLOT] {
    let mut b = [0u8; SLOT];
    b[..8].copy_from_slice(&seq.to_le_bytes());
    for (i, x) in b[8..].iter_mut().enumerate() {
        *x = (seq as u8)
            .wrapping_mul(31)
            .wrapping_add((i as u8).wrapping_mul(7))
            ^ 0x5a;
    }
    b
}

/// Sets `stop` when dropped, also when the stream panics, so that the
/// toggling thread ends and the scope can join it.
struct StopOnDrop<'a>(&'a AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Release);
    }
}

/// Toggles REMOTE_WRITE on `mr` in place until `stop`: on for 1–6 ms,
/// off for 0.2–1.2 ms (a small xorshift picks the lengths; a batch of the
/// stream takes about 0.5 ms in the VM); the keys never change; ends with
/// REMOTE_WRITE on. Returns the number of changes.
fn toggle_remote_write(mr: &mut MemoryRegion, stop: &AtomicBool) -> u64 {
    let k = keys(mr);
    let mut x: u64 = 0x2545_f491_4f6c_dd1d;
    let mut next = |lo_us: u64, span_us: u64| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        Duration::from_micros(lo_us + x % span_us)
    };
    let mut toggles = 0;
    while !stop.load(Ordering::Acquire) {
        std::thread::sleep(next(1000, 5000));
        mr.set_access(AccessFlags::LOCAL_WRITE)
            .unwrap_or_else(|e| panic!("toggler: REMOTE_WRITE off in place: {e}"));
        std::thread::sleep(next(200, 1000));
        mr.set_access(RW)
            .unwrap_or_else(|e| panic!("toggler: REMOTE_WRITE on in place: {e}"));
        toggles += 2;
        same_keys(mr, k, "toggler");
    }
    toggles
}

/// What the stream saw.
#[derive(Debug, Default)]
struct StreamCounts {
    posted: u64,
    landed: u64,
    refused: u64,
    flushed: u64,
    recoveries: u64,
    /// Batches in which a refusal came after successes: REMOTE_WRITE went
    /// off between two WRITEs of one doorbell.
    mixed: u64,
}

/// Under live traffic: a stream of at least [`STREAM`] RDMA WRITEs, in
/// batches of [`WINDOW`] signalled ones, while another thread toggles
/// REMOTE_WRITE on the target MR in place. Every WRITE completes, in
/// order, as one of: success, and its distinct bytes are in its slot; a
/// remote access error, its slot untouched; or, only behind a remote
/// access error of its batch (RC: the QP is in ERR by then), flushed, its
/// slot untouched. Nothing else. After each refusal both QPs are recovered
/// and the stream goes on; it runs until it has seen at least one refusal
/// and a success after it. Nothing leaks.
#[test]
fn writes_under_live_remote_write_toggling() {
    on_each_rereg_rig(
        "writes_under_live_remote_write_toggling",
        (QP_ACCESS, WINDOW * SLOT, 64),
        |name, counts, mut rig| {
            if rig.siw() {
                // The stream needs REMOTE_WRITE toggled in place under
                // traffic; siw refuses every in-place change (so the keys
                // the stream writes with cannot be toggled), and a refused
                // WRITE costs the connection. Shown, then left to rxe.
                let mut dst = anon(LEN);
                let mut mr = fresh_mr(&rig.q.pd, &mut dst, RW);
                let k = keys(&mr);
                let err = mr.set_access(AccessFlags::LOCAL_WRITE).unwrap_err();
                refused_in_place(&mr, k, err, &format!("{name}: the toggle's first step"));
                let remote = at(&dst, mr.rkey());
                rig.write_lands(1, remote, &dst, "the key the toggle could not change");
                loud(&format!(
                    "NOTE: {name}: siw refuses REMOTE_WRITE toggling in place: the live stream runs on rxe only"
                ));
                drop((mr, rig));
                drop(dst);
                assert_all_gone(counts);
                return;
            }
            assert!(
                rig.q.qp_a.caps().max_send_wr as usize >= WINDOW,
                "{name}: {:?}",
                rig.q.qp_a.caps()
            );
            let mut dst = anon(WINDOW * SLOT);
            let mut mr = fresh_mr(&rig.q.pd, &mut dst, RW);
            let rkey = mr.rkey();
            let dst_addr = dst.as_ptr() as u64;
            let src_addr = rig.src.buf.as_ptr() as u64;
            let stop = AtomicBool::new(false);
            let started = Instant::now();
            let mut c = StreamCounts::default();

            let toggles = std::thread::scope(|s| {
                let toggler = s.spawn(|| toggle_remote_write(&mut mr, &stop));
                let _stop = StopOnDrop(&stop);
                let mut wcs = Vec::with_capacity(WINDOW);
                let mut landed_since_refusal = 0;
                while c.posted < STREAM || c.refused == 0 || landed_since_refusal == 0 {
                    assert!(
                        started.elapsed() < STREAM_LIMIT,
                        "{name}: the stream did not finish within {STREAM_LIMIT:?}: {c:?}"
                    );
                    assert!(
                        !toggler.is_finished(),
                        "{name}: the toggling thread ended: {c:?}"
                    );
                    let first = c.posted;
                    let before: Vec<u8> = dst.to_vec();
                    for i in 0..WINDOW {
                        rig.src.buf[i * SLOT..][..SLOT]
                            .copy_from_slice(&slot_bytes(first + i as u64));
                    }
                    let sges: Vec<[Sge; 1]> = (0..WINDOW)
                        .map(|i| sge(src_addr + (i * SLOT) as u64, SLOT, &rig.src.mr))
                        .collect();
                    let wrs = signalled_writes(first, &sges, dst_addr, SLOT, rkey);
                    // SAFETY: the source slots are not written, and the
                    // target slots not read, until all WINDOW completions
                    // are polled below; both buffers outlive the QPs.
                    unsafe { rig.q.qp_a.post_send(&wrs) }
                        .unwrap_or_else(|e| panic!("{name}: post_send at {first}: {e}"));
                    c.posted += WINDOW as u64;
                    wcs.clear();
                    wait_exactly(
                        &rig.q.cq_a,
                        WINDOW,
                        &mut wcs,
                        &format!("{name}: batch at {first}"),
                    );
                    let mut refused_at = None;
                    for (i, wc) in wcs.iter().enumerate() {
                        let seq = first + i as u64;
                        let slot = &dst[i * SLOT..][..SLOT];
                        let old = &before[i * SLOT..][..SLOT];
                        assert_eq!(
                            (wc.wr_id(), wc.qp_num()),
                            (seq, rig.q.qp_a.qp_num()),
                            "{name}: completions in order: {wc:?}"
                        );
                        match wc.status() {
                            WcStatus::Success if refused_at.is_none() => {
                                assert_eq!(wc.opcode(), Some(WcOpcode::RdmaWrite), "{name}: {wc:?}");
                                assert!(
                                    slot == slot_bytes(seq),
                                    "{name}: WRITE {seq} succeeded but its bytes are not in slot {i}"
                                );
                                c.landed += 1;
                                landed_since_refusal += 1;
                            }
                            REFUSED if refused_at.is_none() => {
                                assert!(slot == old, "{name}: refused WRITE {seq} changed slot {i}");
                                refused_at = Some(seq);
                                c.refused += 1;
                                landed_since_refusal = 0;
                            }
                            WcStatus::WrFlushErr if refused_at.is_some() => {
                                assert!(slot == old, "{name}: flushed WRITE {seq} changed slot {i}");
                                c.flushed += 1;
                            }
                            _ => panic!(
                                "{name}: WRITE {seq}: {wc:?} (refused earlier in the batch: {refused_at:?}); {c:?}"
                            ),
                        }
                    }
                    if refused_at.is_some_and(|seq| seq > first) {
                        c.mixed += 1;
                    }
                    if let Some(seq) = refused_at {
                        let what = format!("{name}: recovery after WRITE {seq}");
                        let others = recover_pair(&rig.q, rig.gid, rig.mtu, rig.access, &what);
                        assert!(others.is_empty(), "{what}: {others:?}");
                        c.recoveries += 1;
                    }
                }
                drop(_stop);
                toggler.join().expect("the toggling thread panicked")
            });
            let elapsed = started.elapsed();
            loud(&format!(
                "{name}: live stream: {} WRITEs of {SLOT} B in {elapsed:.2?} ({:.0}/s), window {WINDOW}: \
                 {} landed, {} remote access errors ({} after successes in their batch), \
                 {} flushed behind them, {} recoveries; {toggles} REMOTE_WRITE toggles in place",
                c.posted,
                c.posted as f64 / elapsed.as_secs_f64(),
                c.landed,
                c.refused,
                c.mixed,
                c.flushed,
                c.recoveries
            ));
            assert_eq!(c.landed + c.refused + c.flushed, c.posted, "{name}: {c:?}");
            assert_eq!(c.refused, c.recoveries, "{name}: {c:?}");
            assert!(toggles >= 2, "{name}: {toggles} toggles");
            assert_eq!(
                mr.access(),
                RW,
                "{name}: the toggler ends with REMOTE_WRITE on"
            );
            assert_eq!(mr.rkey(), rkey, "{name}: in-place changes keep the rkey");

            drop((mr, rig));
            drop(dst);
            assert_all_gone(counts);
        },
    );
}
