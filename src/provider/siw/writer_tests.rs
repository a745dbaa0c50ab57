//! siw's posting paths held to each other, byte for byte:
//!
//! * the fast path ([`fast_send`], [`write_fast_send`]: one SGE or one
//!   inline segment, SEND or WRITE) and, for a single request, the gather
//!   ([`single_send`]: up to `max_sge` SGEs) write the general path's
//!   bytes for every request they take, alone or in a batch, and refuse
//!   what the general path refuses the same way (the same error, at the
//!   same index, the ring untouched); every other request falls through
//!   to the general path;
//! * the ring writers, which write straight into the slot, write what the
//!   whole-element references [`build_sqe`] and [`build_rqe`] hold, as the
//!   staging writers before them did (those values copied in by
//!   [`Producer::post`]).

use proptest::prelude::*;

use uverbs_uapi::{siw_rqe, siw_sqe, SIW_MAX_INLINE, SIW_WQE_INLINE};

use super::kernel_model::{KernelSq, TestMem};
use super::queue::Producer;
use super::ring_props::{send, SGE};
use super::wqe::{
    build_rqe, build_sqe, check_send, fast_send, post_recv, post_send, post_send_via, single_send,
    Refused, SendConfig,
};
use crate::wr::{Payload, RecvWr, Remote, SendFlags, SendOp, SendWr, Sge, UdDest};

/// Slots of the test rings.
const NUM: u32 = 4;

/// A send queue view over `mem` (which outlives it).
fn sq(mem: &TestMem) -> Producer<siw_sqe> {
    // SAFETY: mem is a live allocation of mem.len() bytes (plus a guard)
    // that outlives the view; only the view and the kernel model touch it.
    unsafe { Producer::from_raw(mem.base(), mem.len(), NUM) }.expect("valid SQ")
}

/// A receive queue view over `mem` (which outlives it).
fn rq(mem: &TestMem) -> Producer<siw_rqe> {
    // SAFETY: as in `sq`.
    unsafe { Producer::from_raw(mem.base(), mem.len(), NUM) }.expect("valid RQ")
}

/// Every byte of every element but the flags words set to `stale` (the
/// flags stay 0: every slot free), as a kernel leaves used slots.
fn stale_ring(mem: &TestMem, elem: usize, stale: u8) {
    for s in 0..NUM as usize {
        mem.write(s * elem, &[stale; 8]);
        mem.write(s * elem + 10, &vec![stale; elem - 10]);
    }
}

/// The ring after: `taken` one-SGE SENDs posted and taken by the kernel
/// (moving both positions), `busy` more posted and not taken, then
/// `post(producer)`. Answers what `post` answered and every byte of the
/// ring and its guard.
fn sq_after<R>(
    stale: u8,
    taken: u32,
    busy: u32,
    post: impl FnOnce(&mut Producer<siw_sqe>) -> R,
) -> (R, Vec<u8>) {
    let mem = TestMem::sq(NUM);
    stale_ring(&mem, size_of::<siw_sqe>(), stale);
    let mut user = sq(&mem);
    let mut kernel = KernelSq::new(&mem, NUM);
    let cfg = SendConfig {
        max_sge: 1,
        max_inline: 0,
        sig_all: false,
    };
    for i in 0..taken {
        post_send(&mut user, cfg, &[send(i.into())]).expect("room");
        kernel.take().expect("posted").expect("accepted");
    }
    for i in 0..busy {
        post_send(&mut user, cfg, &[send(i.into())]).expect("room");
    }
    let answer = post(&mut user);
    (answer, mem.snapshot())
}

/// One request of any kind, over owned parts (see [`Req::wr`]).
#[derive(Clone, Debug)]
struct Req {
    wr_id: u64,
    op: SendOp,
    flags: u32,
    inline: Option<Vec<Vec<u8>>>,
    sges: Vec<Sge>,
    ud: bool,
}

impl Req {
    fn wr<'a>(&self, segs: &'a [&'a [u8]], sges: &'a [Sge]) -> SendWr<'a> {
        SendWr {
            wr_id: self.wr_id,
            op: self.op,
            flags: SendFlags::from_bits_retain(self.flags),
            payload: match self.inline {
                Some(_) => Payload::Inline(segs),
                None => Payload::Sges(sges),
            },
            ud: self.ud.then(|| UdDest::from_raw(1, 2, 3)),
        }
    }
}

/// Calls `f` with the requests of `reqs` as work requests.
fn with_wrs<R>(reqs: &[Req], f: impl FnOnce(&[SendWr<'_>]) -> R) -> R {
    let segs: Vec<Vec<&[u8]>> = reqs
        .iter()
        .map(|r| {
            r.inline
                .iter()
                .flatten()
                .map(Vec::as_slice)
                .collect::<Vec<_>>()
        })
        .collect();
    let wrs: Vec<SendWr<'_>> = reqs
        .iter()
        .zip(&segs)
        .map(|(r, s)| r.wr(s, &r.sges))
        .collect();
    f(&wrs)
}

fn remote() -> impl Strategy<Value = Remote> {
    (any::<u64>(), any::<u32>()).prop_map(|(addr, rkey)| Remote { addr, rkey })
}

fn sge() -> impl Strategy<Value = Sge> {
    (any::<u64>(), any::<u32>(), any::<u32>()).prop_map(|(addr, length, lkey)| Sge {
        addr,
        length,
        lkey,
    })
}

/// SEND or WRITE without immediate data: what the fast path takes.
fn plain_op() -> impl Strategy<Value = SendOp> {
    prop_oneof![
        Just(SendOp::Send { imm: None }),
        remote().prop_map(|remote| SendOp::RdmaWrite { remote, imm: None }),
    ]
}

/// Any op, siw's or not.
fn any_op() -> impl Strategy<Value = SendOp> {
    prop_oneof![
        4 => plain_op(),
        2 => remote().prop_map(|remote| SendOp::RdmaRead { remote }),
        1 => any::<u32>().prop_map(|imm| SendOp::Send { imm: Some(imm) }),
        1 => (remote(), any::<u32>())
            .prop_map(|(remote, imm)| SendOp::RdmaWrite { remote, imm: Some(imm) }),
        1 => remote().prop_map(|remote| SendOp::FetchAdd { remote, add: 1 }),
        1 => remote().prop_map(|remote| SendOp::CompareSwap { remote, compare: 1, swap: 2 }),
    ]
}

/// Any request: mostly one SGE or one short inline segment, and every
/// other shape (no SGE, up to 7, several segments, over 80 bytes, a UD
/// destination).
fn any_req() -> impl Strategy<Value = Req> {
    let inline = prop_oneof![
        3 => prop::collection::vec(any::<u8>(), 0..=96).prop_map(|s| vec![s]),
        1 => prop::collection::vec(prop::collection::vec(any::<u8>(), 0..40), 0..4),
    ];
    let sges = prop_oneof![
        3 => sge().prop_map(|s| vec![s]),
        1 => prop::collection::vec(sge(), 0..=7),
    ];
    (
        any::<u64>(),
        any_op(),
        any::<u32>(),
        prop::option::weighted(0.4, inline),
        sges,
        prop::bool::weighted(0.1),
    )
        .prop_map(|(wr_id, op, flags, inline, sges, ud)| Req {
            wr_id,
            op,
            flags,
            inline,
            sges,
            ud,
        })
}

/// A QP's send limits, around siw's own (6 SGEs, 80 inline bytes).
fn any_cfg() -> impl Strategy<Value = SendConfig> {
    (0u32..=8, 0u32..=100, any::<bool>()).prop_map(|(max_sge, max_inline, sig_all)| SendConfig {
        max_sge,
        max_inline,
        sig_all,
    })
}

/// A request the single-request path takes under `cfg`'s limits: what
/// the fast path takes, and SGEs up to `max_sge` whose total fits a `u32`.
fn fast_req(cfg: SendConfig) -> impl Strategy<Value = Req> {
    let room = cfg.max_inline.min(SIW_MAX_INLINE) as usize;
    let max_sge = cfg.max_sge.min(6) as usize;
    // Lengths whose sum, for up to 6 SGEs, stays within a u32.
    let gather = prop::collection::vec(
        (sge(), 0..=u32::MAX / 6).prop_map(|(s, length)| Sge { length, ..s }),
        0..=max_sge,
    )
    .prop_map(|sges| (None, sges));
    let payload = if cfg.max_sge == 0 {
        prop_oneof![
            prop::collection::vec(any::<u8>(), 0..=room).prop_map(|s| (Some(vec![s]), Vec::new())),
            gather,
        ]
        .boxed()
    } else {
        prop_oneof![
            2 => sge().prop_map(|s| (None, vec![s])),
            2 => prop::collection::vec(any::<u8>(), 0..=room)
                .prop_map(|s| (Some(vec![s]), Vec::new())),
            1 => gather,
        ]
        .boxed()
    };
    let plain = (any::<u64>(), plain_op(), any::<u32>(), payload).prop_map(
        |(wr_id, op, flags, (inline, sges))| Req {
            wr_id,
            op,
            flags,
            inline,
            sges,
            ud: false,
        },
    );
    if cfg.max_sge == 0 {
        return plain.boxed();
    }
    // A READ into one SGE, without a fence.
    let read =
        (any::<u64>(), remote(), any::<u32>(), sge()).prop_map(|(wr_id, remote, flags, s)| Req {
            wr_id,
            op: SendOp::RdmaRead { remote },
            flags: flags & !SendFlags::FENCE.bits(),
            inline: None,
            sges: vec![s],
            ud: false,
        });
    prop_oneof![3 => plain, 1 => read].boxed()
}

proptest! {
    #![proptest_config(super::super::ring_prop_config(512))]

    /// Every request the single-request path takes (it says so) lands as
    /// the general path writes it: the same answer, every byte of the ring
    /// the same, wherever the ring stands.
    #[test]
    fn the_fast_path_writes_the_general_paths_bytes(
        (cfg, req) in any_cfg().prop_flat_map(|cfg| (Just(cfg), fast_req(cfg))),
        stale in any::<u8>(),
        taken in 0..NUM,
        busy in 0..NUM,
    ) {
        with_wrs(std::slice::from_ref(&req), |wrs| {
            prop_assert!(single_send(cfg, &wrs[0]).is_some(), "{:?}", wrs[0]);
            prop_assert_eq!(check_send(cfg, &wrs[0]), Ok(()));
            let fast = sq_after(stale, taken, busy, |sq| post_send_via::<true>(sq, cfg, wrs));
            let general = sq_after(stale, taken, busy, |sq| post_send_via::<false>(sq, cfg, wrs));
            prop_assert!(fast.0.is_ok(), "{:?}", fast.0);
            prop_assert_eq!(fast, general);
            Ok(())
        })?;
    }

    /// Batches of any requests, siw's or not, on rings with any room:
    /// `post_send` and the general path alone answer the same and leave
    /// the same bytes (refusals, queue full and all).
    #[test]
    fn batches_post_alike_with_and_without_the_fast_path(
        reqs in prop::collection::vec(any_req(), 0..=5),
        cfg in any_cfg(),
        stale in any::<u8>(),
        taken in 0..NUM,
        busy in 0..=NUM,
    ) {
        with_wrs(&reqs, |wrs| {
            let fast = sq_after(stale, taken, busy, |sq| post_send(sq, cfg, wrs));
            let general = sq_after(stale, taken, busy, |sq| post_send_via::<false>(sq, cfg, wrs));
            prop_assert_eq!(fast, general);
            Ok(())
        })?;
    }

    /// Both SQE writers, the general one and the fast path, straight into
    /// the slot, write what the whole-SQE reference holds, copied in whole
    /// but for the flags (the staging writer they replaced), in every byte
    /// the kernel reads: every request siw accepts, alone or in a batch, on
    /// stale slots anywhere in the ring.
    #[test]
    fn the_sqe_writers_write_the_reference(
        reqs in prop::collection::vec(any_req(), 1..=4),
        cfg in any_cfg(),
        stale in any::<u8>(),
        taken in 0..NUM,
    ) {
        with_wrs(&reqs, |wrs| {
            if wrs.iter().any(|wr| check_send(cfg, wr).is_err()) {
                return Ok(());
            }
            let reference: Vec<siw_sqe> = wrs.iter().map(|wr| build_sqe(cfg, wr)).collect();
            let want = sq_after(stale, taken, 0, |sq| sq.post(reference.into_iter()));
            for fast in [false, true] {
                let got = sq_after(stale, taken, 0, |sq| match fast {
                    true => post_send_via::<true>(sq, cfg, wrs),
                    false => post_send_via::<false>(sq, cfg, wrs),
                });
                prop_assert_eq!(got.0, Ok(want.0.expect("room")));
                prop_assert!(
                    sq_as_the_kernel_reads(&got.1) == sq_as_the_kernel_reads(&want.1),
                    "fast path {fast}: the ring differs"
                );
            }
            Ok(())
        })?;
    }

    /// The RQE writer writes what the whole-RQE reference holds (flags
    /// exactly VALID), for every accepted receive, alone or in a batch;
    /// the SGEs past a request's count are not compared (the kernel never
    /// reads them, and the writer leaves them as they were).
    #[test]
    fn the_rqe_writer_writes_the_reference(
        sges in prop::collection::vec(prop::collection::vec(sge(), 0..=6), 1..=4),
        wr_id in any::<u64>(),
        stale in any::<u8>(),
        taken in 0..NUM,
    ) {
        let wrs: Vec<RecvWr<'_>> = sges
            .iter()
            .enumerate()
            .map(|(i, s)| RecvWr { wr_id: wr_id.wrapping_add(i as u64), sges: s })
            .collect();
        if wrs.iter().any(|wr| wr.sges.iter().map(|s| u64::from(s.length)).sum::<u64>() > u64::from(u32::MAX)) {
            return Ok(());
        }
        let ring = |post: &dyn Fn(&mut Producer<siw_rqe>) -> Result<u32, ()>| {
            let mem = TestMem::rq(NUM);
            stale_ring(&mem, size_of::<siw_rqe>(), stale);
            let mut user = rq(&mem);
            // Move the position on: post and let a model kernel take
            // receives (its flags cleared as smp_store_mb does).
            let mut kernel = super::kernel_model::KernelRq::new(&mem, NUM);
            for i in 0..taken {
                post_recv(&mut user, 6, &[RecvWr { wr_id: i.into(), sges: &[] }]).expect("room");
                kernel.take().expect("posted").expect("accepted");
            }
            (post(&mut user), mem.snapshot())
        };
        let reference: Vec<siw_rqe> = wrs.iter().map(build_rqe).collect();
        let want = ring(&|rq| rq.post(reference.iter().copied()).map(|p| p.count).map_err(|_| ()));
        let got = ring(&|rq| post_recv(rq, 6, &wrs).map_err(|_| ()));
        prop_assert_eq!(got.0, Ok(wrs.len() as u32));
        prop_assert_eq!(want.0, Ok(wrs.len() as u32));
        prop_assert!(as_the_kernel_reads(&got.1) == as_the_kernel_reads(&want.1), "the ring differs");
    }
}

/// A receive ring's bytes as the kernel reads them: each RQE's SGEs past
/// its `num_sge` zeroed (`siw_rqe_get` reads `num_sge` of them and no more,
/// so the writer leaves the rest as they were), every other byte as is.
fn as_the_kernel_reads(ring: &[u8]) -> Vec<u8> {
    use std::mem::offset_of;
    let mut out = ring.to_vec();
    for rqe in out.chunks_exact_mut(size_of::<siw_rqe>()) {
        zero_sges_past_count(rqe, offset_of!(siw_rqe, num_sge), offset_of!(siw_rqe, sge));
    }
    out
}

/// Zeroes the SGEs of one element (`elem`, its bytes) past its SGE count
/// (the byte at `num_sge_at`), the SGE array starting at `sges_at`.
fn zero_sges_past_count(elem: &mut [u8], num_sge_at: usize, sges_at: usize) {
    let n = usize::from(elem[num_sge_at]).min(6);
    elem[sges_at + n * size_of::<uverbs_uapi::siw_sge>()..].fill(0);
}

/// A send ring's bytes as the kernel reads them (`siw_activate_tx_from_sq`
/// copies the SQE, then reads `num_sge` SGEs, or for inline data only
/// `sge[0].length` and that many bytes from `sge[1]` on, setting `sge[0]`'s
/// address and key itself): every other SGE byte zeroed, the rest as is.
fn sq_as_the_kernel_reads(ring: &[u8]) -> Vec<u8> {
    use std::mem::offset_of;
    let mut out = ring.to_vec();
    let sges_at = offset_of!(siw_sqe, sge);
    let sge_len = size_of::<uverbs_uapi::siw_sge>();
    for sqe in out.chunks_exact_mut(size_of::<siw_sqe>()) {
        let flags = u16::from_ne_bytes([
            sqe[offset_of!(siw_sqe, flags)],
            sqe[offset_of!(siw_sqe, flags) + 1],
        ]);
        let sges = &mut sqe[sges_at..];
        if flags & SIW_WQE_INLINE != 0 {
            let length_at = offset_of!(uverbs_uapi::siw_sge, length);
            let length = u32::from_ne_bytes(sges[length_at..length_at + 4].try_into().unwrap());
            let (first, data) = sges.split_at_mut(sge_len);
            first[..length_at].fill(0);
            first[length_at + 4..].fill(0);
            let used = (length as usize).min(data.len());
            data[used..].fill(0);
        } else {
            zero_sges_past_count(sqe, offset_of!(siw_sqe, num_sge), sges_at);
        }
    }
    out
}

/// A full queue is refused alike by both paths, the ring untouched.
#[test]
fn a_full_queue_is_refused_alike() {
    let cfg = SendConfig {
        max_sge: 6,
        max_inline: 80,
        sig_all: false,
    };
    let data = [7u8; 64];
    let segs: &[&[u8]] = &[&data];
    let inline = SendWr {
        payload: Payload::Inline(segs),
        ..send(9)
    };
    for wr in [send(9), inline] {
        assert!(fast_send(cfg, &wr).is_some());
        let fast = sq_after(0x5a, 1, NUM, |sq| post_send(sq, cfg, &[wr]));
        let general = sq_after(0x5a, 1, NUM, |sq| post_send_via::<false>(sq, cfg, &[wr]));
        let untouched = sq_after(0x5a, 1, NUM, |_| ()).1;
        assert_eq!(fast, general);
        assert_eq!(
            fast.0,
            Err(Refused {
                index: 0,
                error: crate::wr::PostError::QueueFull {
                    op: "post_send",
                    capacity: NUM
                }
                .into()
            })
        );
        assert!(fast.1 == untouched, "a refused post wrote into the ring");
    }
}

/// Every request but a SEND or WRITE without immediate data, with no UD
/// destination, from exactly one SGE (on a QP taking one) or one inline
/// segment within the QP's inline limit (or a READ into one SGE), goes the
/// general way in a batch; alone, so does every request but those and a
/// SEND or WRITE from up to `max_sge` SGEs whose total fits a `u32`.
#[test]
fn other_requests_take_the_general_path() {
    let cfg = SendConfig {
        max_sge: 6,
        max_inline: 64,
        sig_all: false,
    };
    let remote = Remote { addr: 8, rkey: 3 };
    let one = [SGE];
    let two = [SGE, SGE];
    let seven = [SGE; 7];
    let past_u32 = [
        Sge {
            length: u32::MAX,
            ..SGE
        },
        SGE,
    ];
    let short = [1u8; 64];
    let long = [1u8; 65];
    let one_seg: &[&[u8]] = &[&short];
    let two_segs: &[&[u8]] = &[&short[..8], &short[..8]];
    let no_segs: &[&[u8]] = &[];
    let long_seg: &[&[u8]] = &[&long];
    let over = [0u8; 81];
    let over_siw: &[&[u8]] = &[&over];
    let wr = |op, payload| SendWr::new(1, op, payload);
    let send = SendOp::Send { imm: None };
    let write = SendOp::RdmaWrite { remote, imm: None };
    let read = SendOp::RdmaRead { remote };
    // Taken: the two shapes, for both ops, and a READ into one SGE.
    for op in [send, write] {
        assert!(fast_send(cfg, &wr(op, Payload::Sges(&one))).is_some());
        assert!(fast_send(cfg, &wr(op, Payload::Inline(one_seg))).is_some());
    }
    assert!(fast_send(cfg, &wr(read, Payload::Sges(&one))).is_some());
    let no_sge = SendConfig { max_sge: 0, ..cfg };
    let wide = SendConfig {
        max_inline: 1000,
        ..cfg
    };
    let cases = [
        // A fenced READ (siw refuses it), an inline one, one into two SGEs.
        (wr(read, Payload::Sges(&one)).flags(SendFlags::FENCE), cfg),
        (wr(read, Payload::Inline(one_seg)), cfg),
        (wr(read, Payload::Sges(&two)), cfg),
        (wr(SendOp::Send { imm: Some(1) }, Payload::Sges(&one)), cfg),
        (
            wr(
                SendOp::RdmaWrite {
                    remote,
                    imm: Some(1),
                },
                Payload::Inline(one_seg),
            ),
            cfg,
        ),
        (
            wr(SendOp::FetchAdd { remote, add: 1 }, Payload::Sges(&one)),
            cfg,
        ),
        (
            wr(
                SendOp::CompareSwap {
                    remote,
                    compare: 1,
                    swap: 2,
                },
                Payload::Sges(&one),
            ),
            cfg,
        ),
        (wr(write, Payload::Inline(two_segs)), cfg),
        (wr(write, Payload::Inline(no_segs)), cfg),
        // Over the QP's inline limit, and over siw's 80 bytes whatever the QP says.
        (wr(send, Payload::Inline(long_seg)), cfg),
        (wr(send, Payload::Inline(over_siw)), wide),
        (wr(send, Payload::Sges(&one)), no_sge),
        (
            SendWr {
                ud: Some(UdDest::from_raw(1, 2, 3)),
                ..wr(send, Payload::Sges(&one))
            },
            cfg,
        ),
    ];
    for (wr, cfg) in cases {
        assert!(fast_send(cfg, &wr).is_none(), "{wr:?} under {cfg:?}");
        assert!(single_send(cfg, &wr).is_none(), "{wr:?} under {cfg:?}");
    }
    // A single request's gather: none, or several SGEs within max_sge.
    let one_sge = SendConfig { max_sge: 1, ..cfg };
    let gathers: [(&[Sge], SendConfig, bool); 5] = [
        (&two, cfg, true),
        (&[], cfg, true),
        (&seven, cfg, false),
        (&past_u32, cfg, false),
        (&two, one_sge, false),
    ];
    for op in [send, write] {
        for (sges, cfg, taken) in gathers {
            let wr = wr(op, Payload::Sges(sges));
            assert!(fast_send(cfg, &wr).is_none(), "{wr:?} under {cfg:?}");
            let single = single_send(cfg, &wr).is_some();
            assert_eq!(single, taken, "{wr:?} under {cfg:?}");
        }
    }
}
