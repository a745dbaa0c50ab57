//! Memory windows, proven by traffic on rxe0: two RC QPs of one context
//! connected to each other (loopback), A the requester, B owning a region
//! registered with `LOCAL_WRITE | MW_BIND` only (its own rkey grants no
//! remote write). A window over part of it, bound with REMOTE_WRITE, takes
//! A's RDMA WRITE inside its range (bytes checked, and every byte around
//! them untouched). rxe bounds a window's WRITEs only by the *region's*
//! range (its responder's `check_rkey` checks the key, access and state of
//! the window, then `mr_check_range` of the region): a WRITE past the
//! window but inside the region lands, and the test says so; one reaching
//! past the region is refused (remote access error, the target untouched;
//! the pair is recovered). After a type-1 rebind or
//! deallocation, a type-2 LOCAL_INV or a peer's SEND_WITH_INV, the old key
//! is refused. The typed refusals of a bind come before anything is posted.
//! A region dropped while a window is bound to it stays registered (rxe
//! refuses its DEREG_MR) until the window goes, then nothing is left.
//!
//! On siw0 `ALLOC_MW` is refused by the kernel (`EOPNOTSUPP`: its driver
//! has no memory windows) and nothing leaks. The type-2 window is dropped
//! before the QP that bound it in every case: rxe holds that QP until then.

#[macro_use]
mod common;

use common::traffic::{now, REFUSED};
use common::*;
use uverbs::error::{Errno, Op};
use uverbs::mr::MwType;
use uverbs::uverbs_uapi::{UVERBS_OBJECT_MR, UVERBS_OBJECT_MW};
use uverbs::wr::{Payload, RecvWr, Remote, SendOp, SendWr, Sge, WcFlags, WcOpcode, WcStatus};
use uverbs::{AccessFlags, Error, MemoryRegion};

/// B's region: its length, and what it grants (no remote access itself).
const LEN: usize = 4096;
const TARGET: AccessFlags = AccessFlags::LOCAL_WRITE.union(AccessFlags::MW_BIND);
/// The window's range in the region, and what it grants.
const WIN: std::ops::Range<usize> = 1024..2048;
const WRITE: AccessFlags = AccessFlags::REMOTE_WRITE;
/// Bytes of each WRITE.
const MSG: usize = 256;

/// The MWs `ctx` holds in the kernel.
/// siw's object tree has no MW type at all (`ENOENT`): none there.
fn mw_count(ctx: &uverbs::Context) -> u32 {
    match ctx.kernel_handle_count(UVERBS_OBJECT_MW) {
        Ok(n) => n,
        Err(e) if e.errno() == Some(Errno::NOENT) && driver(ctx) == Driver::Siw => 0,
        Err(e) => panic!("{}: counting MW handles: {e}", ctx.device_name()),
    }
}

/// A connected pair, A's source (a pattern) and B's target region.
struct Rig {
    name: String,
    q: TwoQps,
    gid: uverbs::device::Gid,
    mtu: uverbs::qp::Mtu,
    src: traffic::Source,
    /// Deregistered before its memory is unmapped.
    mr: MemoryRegion,
    dst: memmap2::MmapMut,
    next_id: u64,
}

impl Rig {
    fn new(ctx: &uverbs::Context, name: &str) -> Rig {
        let (gid, mtu) = roce_path(ctx, name);
        let q = connected_rc_pair(ctx, name, 16, None);
        let mut src = traffic::Source::new(&q.pd, 2 * LEN);
        src.buf.copy_from_slice(&pattern(7, 2 * LEN));
        let mut dst = anon(LEN);
        let mr = fresh_mr(&q.pd, &mut dst, TARGET);
        Rig {
            name: name.to_owned(),
            q,
            gid,
            mtu,
            src,
            mr,
            dst,
            next_id: 1,
        }
    }

    fn id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    /// B's region at offset `at`, under `rkey`.
    fn remote(&self, at: usize, rkey: u32) -> Remote {
        Remote {
            addr: self.dst.as_ptr() as u64 + at as u64,
            rkey,
        }
    }

    /// A's WRITE of [`MSG`] bytes of its source (from offset `at`) to
    /// B's offset `at` under `rkey`; its completion.
    fn write(&mut self, at: usize, rkey: u32, what: &str) -> uverbs::wr::WorkCompletion {
        let id = self.id();
        let sge = [self.src.mr.sge(at..at + MSG).unwrap()];
        let op = SendOp::RdmaWrite {
            remote: self.remote(at, rkey),
            imm: None,
        };
        let wr = SendWr::new(id, op, Payload::Sges(&sge));
        // SAFETY: the source stays registered and untouched until the
        // completion is polled, below.
        unsafe { self.q.qp_a.post_send(&[wr]) }
            .unwrap_or_else(|e| panic!("{}: {what}: post WRITE: {e}", self.name));
        let wc = wait_one(&self.q.cq_a, &format!("{}: {what}", self.name));
        assert_eq!(wc.wr_id(), id, "{}: {what}: {wc:?}", self.name);
        wc
    }

    /// A WRITE at `at` under `rkey` that must land: B's bytes there are
    /// A's, all the others as `before` them.
    fn lands(&mut self, at: usize, rkey: u32, what: &str) {
        let before = now(&self.dst);
        let wc = self.write(at, rkey, what);
        assert_eq!(
            (wc.status(), wc.opcode()),
            (WcStatus::Success, Some(WcOpcode::RdmaWrite)),
            "{}: {what}: {wc:?}",
            self.name
        );
        let mut expected = before;
        expected[at..at + MSG].copy_from_slice(&self.src.buf[at..at + MSG]);
        assert!(
            now(&self.dst) == expected,
            "{}: {what}: the bytes are not exactly the WRITE's",
            self.name
        );
        loud(&format!(
            "{}: {what}: WRITE at +{at} with rkey {rkey:#x} landed",
            self.name
        ));
    }

    /// A WRITE at `at` under `rkey` that B must refuse, its bytes
    /// untouched; the pair is recovered after.
    fn refused(&mut self, at: usize, rkey: u32, what: &str) {
        let before = now(&self.dst);
        let wc = self.write(at, rkey, what);
        assert_eq!(wc.status(), REFUSED, "{}: {what}: {wc:?}", self.name);
        assert!(
            now(&self.dst) == before,
            "{}: {what}: a refused WRITE changed B's bytes",
            self.name
        );
        let others = recover_pair(&self.q, self.gid, self.mtu, QP_ACCESS, what);
        assert!(others.is_empty(), "{}: {what}: {others:?}", self.name);
        loud(&format!(
            "{}: {what}: WRITE at +{at} with rkey {rkey:#x} -> remote access error",
            self.name
        ));
    }

    /// Posts `op` (no payload) on B and checks its completion: `opcode`,
    /// SUCCESS.
    fn local_op_on_b(&mut self, op: SendOp, opcode: WcOpcode, what: &str) {
        let id = self.id();
        let wr = SendWr::new(id, op, Payload::Sges(&[]));
        // SAFETY: no SGEs: no local memory is named.
        unsafe { self.q.qp_b.post_send(&[wr]) }
            .unwrap_or_else(|e| panic!("{}: {what}: post: {e}", self.name));
        let wc = wait_one(&self.q.cq_b, &format!("{}: {what}", self.name));
        assert_eq!(
            (wc.wr_id(), wc.status(), wc.opcode()),
            (id, WcStatus::Success, Some(opcode)),
            "{}: {what}: {wc:?}",
            self.name
        );
    }
}

// Alloc and dealloc of both types; the PD is held (`EBUSY`) while a
// window is in it. siw: `EOPNOTSUPP` from the kernel, nothing made.
device_test!(mw_alloc_and_dealloc, |name, ctx, counts| {
    let pd = alloc_pd(&ctx);
    let before = mw_count(&ctx);
    match driver(&ctx) {
        Driver::Rxe => {
            let one = pd.alloc_mw(MwType::Type1).unwrap();
            let two = pd.alloc_mw(MwType::Type2).unwrap();
            assert_eq!(mw_count(&ctx), before + 2, "{name}");
            assert_eq!(
                (one.mw_type(), two.mw_type()),
                (MwType::Type1, MwType::Type2)
            );
            assert_ne!(one.handle(), two.handle(), "{name}");
            assert_ne!(
                one.rkey() >> 8,
                two.rkey() >> 8,
                "{name}: each has its index"
            );
            assert_eq!(one.pd_handle(), pd.handle());
            let pd = dealloc_refused_busy(pd, "with two memory windows");
            two.dealloc()
                .unwrap_or_else(|e| panic!("{name}: dealloc_mw: {e}"));
            drop(one);
            assert_eq!(mw_count(&ctx), before, "{name}: both windows gone");
            pd.dealloc()
                .unwrap_or_else(|e| panic!("{name}: dealloc_pd: {}", e.error));
            loud(&format!("{name}: type 1 and type 2 allocated and freed"));
        }
        Driver::Siw => {
            for t in [MwType::Type1, MwType::Type2] {
                let e = pd.alloc_mw(t).unwrap_err();
                assert!(
                    matches!(
                        e,
                        Error::Os {
                            op: Op::AllocMw,
                            errno: Errno::OPNOTSUPP,
                            ..
                        }
                    ),
                    "{name}: {t:?}: {e}"
                );
            }
            assert_eq!(mw_count(&ctx), before, "{name}: no window made");
            loud(&format!(
                "{name}: ALLOC_MW refused by the kernel: EOPNOTSUPP"
            ));
        }
        Driver::Other => note_unknown_driver("mw_alloc_and_dealloc", &ctx),
    }
    let _ = counts;
});

/// Runs `body` on rxe only, saying so elsewhere.
fn on_rxe(name: &str, ctx: &uverbs::Context, test: &str, body: impl FnOnce()) {
    if driver(ctx) == Driver::Rxe {
        body();
    } else {
        loud(&format!(
            "NOTE: {test}: {name} binds no memory windows (mw_alloc_and_dealloc checks its refusal)"
        ));
    }
}

// Type 1: bound by the verb through A (any QP of the PD), used through
// B; a WRITE inside lands, one past the end is refused; a rebind
// elsewhere retires the old key; deallocation retires the last.
device_test!(
    type1_window_grants_its_range_until_rebound_or_deallocated,
    |name, ctx, counts| {
        on_rxe(name, &ctx, "type1_window", || {
            let mut rig = Rig::new(&ctx, name);
            let mw = rig.q.pd.alloc_mw(MwType::Type1).unwrap();
            let first = mw.rkey();
            let key = rig.q.qp_a.bind_mw(&mw, &rig.mr, WIN, WRITE, 100).unwrap();
            let wc = wait_one(&rig.q.cq_a, &format!("{name}: bind"));
            assert_eq!(
                (wc.wr_id(), wc.status(), wc.opcode()),
                (100, WcStatus::Success, Some(WcOpcode::BindMw)),
                "{name}: {wc:?}"
            );
            assert_eq!(
                (key, mw.rkey()),
                (first & !0xff | first.wrapping_add(1) & 0xff, key)
            );

            // The region's own key grants no remote write; the window's does,
            // inside its range only.
            rig.lands(WIN.start, key, "type 1: at the window's start");
            rig.lands(WIN.end - MSG, key, "type 1: at the window's end");
            // rxe checks a window's key, access and state, but the range
            // only against the region's (check_rkey: mr_check_range of the
            // MR): past the window, inside the region, lands too.
            rig.lands(
                WIN.end - MSG / 2,
                key,
                "type 1: past the window (rxe: region bounds)",
            );
            rig.lands(
                WIN.start - MSG,
                key,
                "type 1: before the window (rxe: region bounds)",
            );
            rig.refused(LEN - MSG / 2, key, "type 1: reaching past the region");
            let mr_rkey = rig.mr.rkey();
            rig.refused(WIN.start, mr_rkey, "type 1: the region's own rkey");

            // Rebound elsewhere: the new key lands there, the old is refused.
            let moved = rig
                .q
                .qp_b
                .bind_mw(&mw, &rig.mr, 2048..4096, WRITE, 101)
                .unwrap();
            let wc = wait_one(&rig.q.cq_b, &format!("{name}: rebind"));
            assert_eq!(
                (wc.status(), wc.opcode()),
                (WcStatus::Success, Some(WcOpcode::BindMw))
            );
            assert_ne!(moved, key);
            rig.lands(3000, moved, "type 1: rebound, at the new range");
            rig.refused(WIN.start, key, "type 1: the key before the rebind");

            drop(mw);
            rig.refused(3000, moved, "type 1: after deallocation");
        });
        let _ = counts;
    }
);

// Type 2: bound by a BIND_MW work request through B, used by A's WRITEs
// to B; LOCAL_INV retires its key, a new bind gives another, and A's
// SEND_WITH_INV retires that one (B's completion says so).
device_test!(
    type2_window_invalidated_locally_and_by_the_peer,
    |name, ctx, counts| {
        on_rxe(name, &ctx, "type2_window", || {
            let mut rig = Rig::new(&ctx, name);
            let mw = rig.q.pd.alloc_mw(MwType::Type2).unwrap();
            let bind = mw.bind_request(&rig.q.qp_b, &rig.mr, WIN, WRITE).unwrap();
            assert_eq!((bind.rkey(), mw.rkey()), (bind.rkey(), bind.rkey()));
            assert_eq!(
                (bind.addr(), bind.length()),
                (rig.dst.as_ptr() as u64 + WIN.start as u64, WIN.len() as u64)
            );
            rig.local_op_on_b(SendOp::BindMw(bind), WcOpcode::BindMw, "type 2: bind");
            let key = bind.rkey();
            rig.lands(WIN.start + 100, key, "type 2: inside");
            rig.lands(
                WIN.end - 1,
                key,
                "type 2: past the window (rxe: region bounds)",
            );
            rig.refused(LEN - 1, key, "type 2: reaching past the region");

            rig.local_op_on_b(
                SendOp::LocalInv { rkey: key },
                WcOpcode::LocalInv,
                "type 2: LOCAL_INV",
            );
            rig.refused(WIN.start, key, "type 2: after LOCAL_INV");

            // Bound again (it is free now): a new key, then the peer's
            // SEND_WITH_INV takes it back.
            let again = mw.bind_request(&rig.q.qp_b, &rig.mr, WIN, WRITE).unwrap();
            rig.local_op_on_b(
                SendOp::BindMw(again),
                WcOpcode::BindMw,
                "type 2: bind again",
            );
            let key2 = again.rkey();
            assert_ne!(key2, key);
            rig.lands(WIN.start, key2, "type 2: bound again");

            let mut inbox = anon(64);
            let inbox_mr = fresh_mr(&rig.q.pd, &mut inbox, RW);
            let rsge = [inbox_mr.sge(..).unwrap()];
            // SAFETY: the inbox stays registered and unread until the
            // completion is polled.
            unsafe {
                rig.q.qp_b.post_recv(&[RecvWr {
                    wr_id: 77,
                    sges: &rsge,
                }])
            }
            .unwrap();
            let ssge: [Sge; 1] = [rig.src.mr.sge(0..16).unwrap()];
            let op = SendOp::SendWithInv { rkey: key2 };
            // SAFETY: the source stays registered until the completion.
            unsafe {
                rig.q
                    .qp_a
                    .post_send(&[SendWr::new(78, op, Payload::Sges(&ssge))])
            }
            .unwrap();
            let sent = wait_one(&rig.q.cq_a, &format!("{name}: SEND_WITH_INV"));
            assert_eq!(
                (sent.status(), sent.opcode()),
                (WcStatus::Success, Some(WcOpcode::Send))
            );
            let got = wait_one(&rig.q.cq_b, &format!("{name}: its receive"));
            assert_eq!(
                (got.wr_id(), got.status(), got.opcode(), got.byte_len()),
                (77, WcStatus::Success, Some(WcOpcode::Recv), 16),
                "{name}: {got:?}"
            );
            assert!(
                got.wc_flags().contains(WcFlags::WITH_INVALIDATE),
                "{name}: {got:?}"
            );
            assert_eq!(got.invalidated_rkey(), Some(key2), "{name}: {got:?}");
            assert_eq!(now(&inbox[..16]), &rig.src.buf[..16]);
            loud(&format!(
                "{name}: SEND_WITH_INV invalidated {key2:#x}: the receive says WITH_INVALIDATE"
            ));
            rig.refused(WIN.start, key2, "type 2: after the peer's SEND_WITH_INV");
            // Dropped before the QP that bound it.
            drop(mw);
            drop(inbox_mr);
        });
        let _ = counts;
    }
);

// Bad binds are refused typed, before anything is posted: the window's
// key is unchanged and the QP still in RTS.
device_test!(bad_binds_are_refused_before_posting, |name, ctx, counts| {
    on_rxe(name, &ctx, "bad_binds", || {
        let rig = Rig::new(&ctx, name);
        let mw = rig.q.pd.alloc_mw(MwType::Type1).unwrap();
        let key = mw.rkey();
        let mut plain = anon(LEN);
        let no_bind = fresh_mr(&rig.q.pd, &mut plain, RW);
        let mut ro = anon(LEN);
        let read_only = fresh_mr(&rig.q.pd, &mut ro, AccessFlags::MW_BIND);
        let other_pd = alloc_pd(&ctx);
        let mut elsewhere = anon(LEN);
        let foreign = fresh_mr(&other_pd, &mut elsewhere, TARGET);
        let foreign_mw = other_pd.alloc_mw(MwType::Type1).unwrap();
        let qp = &rig.q.qp_a;
        let cases: [(&str, Result<u32, Error>); 7] = [
            (
                "a region without MW_BIND",
                qp.bind_mw(&mw, &no_bind, WIN, WRITE, 1),
            ),
            (
                "an empty range",
                qp.bind_mw(&mw, &rig.mr, 100..100, WRITE, 1),
            ),
            (
                "a range past the region",
                qp.bind_mw(&mw, &rig.mr, 4000..4100, WRITE, 1),
            ),
            (
                "local access",
                qp.bind_mw(&mw, &rig.mr, WIN, AccessFlags::LOCAL_WRITE, 1),
            ),
            (
                "a writable window on a read-only region",
                qp.bind_mw(&mw, &read_only, WIN, WRITE, 1),
            ),
            (
                "a region of another PD",
                qp.bind_mw(&mw, &foreign, WIN, WRITE, 1),
            ),
            (
                "a window of another PD",
                qp.bind_mw(&foreign_mw, &rig.mr, WIN, WRITE, 1),
            ),
        ];
        for (what, got) in cases {
            match got {
                Err(Error::InvalidInput {
                    op: Op::BindMw,
                    reason,
                    ..
                }) => loud(&format!("{name}: bind with {what}: refused: {reason}")),
                other => panic!("{name}: bind with {what}: {other:?}"),
            }
        }
        assert_eq!(mw.rkey(), key, "{name}: refusals leave the key");
        assert_eq!(qp.refresh_state().unwrap(), uverbs::qp::QpState::Rts);
        // A read-only window on the read-only region is fine.
        let k = qp
            .bind_mw(&mw, &read_only, WIN, AccessFlags::REMOTE_READ, 9)
            .unwrap();
        let wc = wait_one(&rig.q.cq_a, name);
        assert_eq!(
            (wc.status(), wc.opcode()),
            (WcStatus::Success, Some(WcOpcode::BindMw))
        );
        assert_eq!(mw.rkey(), k);
        drop(mw);
        drop(foreign_mw);
    });
    let _ = counts;
});

// A region dropped while a window is bound to it: `dereg` is refused
// (`EINVAL`, the region handed back); dropped, it stays registered (the
// window still lands in it) until the window goes, then it is gone too:
// nothing abandoned, nothing left.
device_test!(
    a_region_dropped_while_bound_goes_with_the_window,
    |name, ctx, counts| {
        on_rxe(name, &ctx, "region_dropped_while_bound", || {
            let mut rig = Rig::new(&ctx, name);
            let mrs = ctx.kernel_handle_count(UVERBS_OBJECT_MR).unwrap();
            let mw = rig.q.pd.alloc_mw(MwType::Type1).unwrap();
            let key = rig.q.qp_a.bind_mw(&mw, &rig.mr, WIN, WRITE, 5).unwrap();
            wait_one(&rig.q.cq_a, name);
            let mut spare = anon(16);
            let spare_mr = fresh_mr(&rig.q.pd, &mut spare, RW);
            let mr = std::mem::replace(&mut rig.mr, spare_mr);
            let e = mr.dereg().unwrap_err();
            assert_eq!(e.error.errno(), Some(Errno::INVAL), "{name}: {}", e.error);
            drop(e.mr);
            assert_eq!(
                ctx.kernel_handle_count(UVERBS_OBJECT_MR).unwrap(),
                mrs + 1,
                "{name}: the dropped region is still registered (and the spare)"
            );
            rig.lands(WIN.start, key, "the window over a dropped region");
            drop(mw);
            assert_eq!(
                ctx.kernel_handle_count(UVERBS_OBJECT_MR).unwrap(),
                mrs,
                "{name}: the dropped region went with the window (the spare stays)"
            );
            assert_eq!(ctx.abandoned_registrations(), 0, "{name}");
            loud(&format!(
            "{name}: DEREG_MR refused (EINVAL) while bound; the dropped region deregistered with its window"
        ));
        });
        let _ = counts;
    }
);

// A type-2 window is tied to the QP its bind was built for: destroying
// that QP first deallocates the window (rxe would otherwise hold the QP,
// and DESTROY_QP would wait 50 s and fail), and the window then refuses
// new binds.
device_test!(
    a_qp_destroyed_first_takes_its_type2_windows_along,
    |name, ctx, counts| {
        on_rxe(name, &ctx, "type2_window_and_its_qp", || {
            let mut rig = Rig::new(&ctx, name);
            let before = mw_count(&ctx);
            let mw = rig.q.pd.alloc_mw(MwType::Type2).unwrap();
            let bind = mw.bind_request(&rig.q.qp_b, &rig.mr, WIN, WRITE).unwrap();
            rig.local_op_on_b(SendOp::BindMw(bind), WcOpcode::BindMw, "type 2: bind");
            rig.lands(WIN.start, bind.rkey(), "type 2: bound");
            assert_eq!(mw_count(&ctx), before + 1, "{name}: the window");
            let qp_b = rig.q.qp_b;
            let started = std::time::Instant::now();
            qp_b.destroy().unwrap_or_else(|e| {
                panic!(
                    "{name}: destroy of the QP the window is bound through: {}",
                    e.error
                )
            });
            let took = started.elapsed();
            assert!(
                took < std::time::Duration::from_secs(5),
                "{name}: the destroy took {took:?}"
            );
            assert_eq!(
                mw_count(&ctx),
                before,
                "{name}: the window went with its QP"
            );
            let refused = mw
                .bind_request(&rig.q.qp_a, &rig.mr, WIN, WRITE)
                .expect_err("a bind of a window deallocated with its QP");
            assert_eq!(refused.op(), uverbs::error::Op::BindMw, "{name}: {refused}");
            mw.dealloc()
                .unwrap_or_else(|e| panic!("{name}: dealloc after its QP: {e}"));
            assert_eq!(mw_count(&ctx), before, "{name}: nothing deallocated twice");
            loud(&format!("{name}: QP destroyed in {took:?} with a type-2 window bound through it; the window went first"));
        });
        let _ = counts;
    }
);
