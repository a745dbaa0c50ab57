//! Bad input on rxe0's data path gets a typed error and loses nothing:
//! every refused post leaves the rings as they were (the next valid post
//! works and its completion is the only one), a foreign lkey fails in the
//! completion and flushes what follows, a CQ in use refuses to be
//! destroyed and stays usable, a channel dropped with unacked events
//! closes without hanging. Each case ends with the kernel's MR, PD, CQ and
//! QP counts back at their start. Also: which interface created the CQs
//! and QPs (native method over ioctl, write command over write()). On
//! siw0 the pairs are connected through the iWARP connection manager; where
//! siw answers differently (no RNR: a full send queue is shown by one batch
//! over its size; a local protection error drops the connection), the
//! siw branch asserts what siw really does.

mod common;

use std::os::fd::{AsRawFd, RawFd};
use std::time::{Duration, Instant};

use common::*;
use uverbs::cq::CreatePath;
use uverbs::error::Errno;
use uverbs::qp::QpState;
use uverbs::transport::TransportKind;
use uverbs::wr::{
    Payload, PostError, RecvWr, Remote, SendOp, SendWr, Sge, WcOpcode, WcStatus, WorkCompletion,
};
use uverbs::{CompletionQueue, Context, Error, MemoryRegion, ProtectionDomain, QpInit, QpType};

/// `body(name, ctx, counts)` on each data-path device (rxe, siw); others
/// are skipped loudly. The tests of this binary run one at a time (they
/// count descriptors).
fn on_rxe_and_siw(test: &str, body: impl FnMut(&str, &Context, &HandleCounts)) {
    let _serial = serial();
    on_each_data_path_device_counted(test, body);
}

/// Two connected RC QPs in a new PD, each with a CQ of 256 entries of its
/// own, made with `init` (its CQ fields are replaced); on siw connected
/// through the cm.
fn pair_with(ctx: &Context, name: &str, tune: impl Fn(&mut QpInit<'_>)) -> TwoQps {
    let q = two_rc_qps_init(ctx, name, 256, None, &|mut init| {
        tune(&mut init);
        init
    });
    connect_two(q, ctx, name, QP_ACCESS)
}

/// Polls `cq` until exactly `n` completions arrived (bounded by [`WAIT`]),
/// then checks that no other one follows.
fn wait_count(cq: &CompletionQueue, n: usize, what: &str) -> Vec<WorkCompletion> {
    let deadline = Instant::now() + WAIT;
    let mut wc = vec![WorkCompletion::default(); n + 8];
    let mut got = 0;
    while got < n {
        got += cq
            .poll(&mut wc[got..])
            .unwrap_or_else(|e| panic!("{what}: poll_cq: {e}"));
        assert!(
            Instant::now() < deadline || got >= n,
            "{what}: {got} of {n} completions within {WAIT:?}: {:?}",
            &wc[..got]
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    std::thread::sleep(Duration::from_millis(30));
    got += cq.poll(&mut wc[got..]).unwrap();
    assert_eq!(
        got,
        n,
        "{what}: more than {n} completions: {:?}",
        &wc[..got]
    );
    wc.truncate(n);
    wc
}

/// The refusal is `Error::Post` of work request `index` for `why`, with the
/// errno rdma-core's provider gives.
fn assert_refused(err: &Error, index: usize, why: fn(&PostError) -> bool, errno: Errno) {
    match err {
        Error::Post {
            index: i,
            why: source,
            ..
        } if *i == index && why(source) => {}
        other => panic!("expected Error::Post at {index}, got {other}"),
    }
    assert_eq!(err.errno(), Some(errno), "{err}");
}

/// A signalled RDMA WRITE of inline `segs` to `remote`.
fn inline_write<'a>(wr_id: u64, remote: Remote, segs: &'a [&'a [u8]]) -> SendWr<'a> {
    SendWr::new(
        wr_id,
        SendOp::RdmaWrite { remote, imm: None },
        Payload::Inline(segs),
    )
}

fn send(wr_id: u64, sges: &[Sge]) -> SendWr<'_> {
    signalled(wr_id, SendOp::Send { imm: None }, sges)
}

/// One SEND from A's `src` (inside `mr_a`) into B's `dst` (inside `mr_b`;
/// a receive posted first), both completions checked, the bytes compared:
/// the QP pair still works and nothing stale was queued.
fn one_send_lands(q: &TwoQps, mr_a: &MemoryRegion, mr_b: &MemoryRegion, bufs: (&mut [u8], &[u8])) {
    let (dst, src) = bufs;
    let recv_sge = sge(dst.as_ptr() as u64, src.len(), mr_b);
    let send_sge = sge(src.as_ptr() as u64, src.len(), mr_a);
    // SAFETY: dst stays mapped and untouched until the receive completes;
    // src is only read until the send completes (both waited for below).
    unsafe {
        q.qp_b
            .post_recv(&[RecvWr {
                wr_id: 0x77,
                sges: &recv_sge,
            }])
            .expect("a valid post_recv after the refusal");
        q.qp_a
            .post_send(&[send(0x78, &send_sge)])
            .expect("a valid post_send after the refusal");
    }
    wait_checked(&q.cq_a, "the valid SEND", WcOpcode::Send, &q.qp_a, 0x78);
    let wc = wait_checked(&q.cq_b, "the valid receive", WcOpcode::Recv, &q.qp_b, 0x77);
    assert_eq!(wc.byte_len() as usize, src.len());
    assert_eq!(dst, src, "the valid SEND's bytes");
}

/// Over ioctl the CQs and QPs are made with the native methods, over
/// write() with the write commands (the kernel of the VM has both, so no
/// fallback happens); said loudly so the log shows both paths ran.
#[test]
fn cqs_and_qps_are_created_native_over_ioctl_and_by_write_command_over_write() {
    on_rxe_and_siw("creation_path", |name, ctx, counts| {
        let cq = ctx.create_cq(8, None).unwrap();
        let pd = alloc_pd(ctx);
        let qp = pd.create_qp(&QpInit::new(QpType::Rc, &cq, &cq)).unwrap();
        let expected = match ctx.transport_kind() {
            TransportKind::Write | TransportKind::WriteWithMethods => CreatePath::WriteCommand,
            _ => CreatePath::NativeMethod,
        };
        loud(&format!(
            "PATH: {name} over {}: CQ {} created by {:?}, QP {} (qpn {}) by {:?}",
            ctx.transport_kind(),
            cq.handle(),
            cq.create_path(),
            qp.handle(),
            qp.qp_num(),
            qp.create_path()
        ));
        assert_eq!(cq.create_path(), expected, "{name}");
        assert_eq!(qp.create_path(), expected, "{name}");
        counts.assert_extra_cq_qp(1, 1, "with one CQ and one QP");
        assert_eq!(qp.destroy().unwrap(), 0, "{name}: no async event");
        let done = cq.destroy().unwrap();
        assert_eq!((done.comp_events_reported, done.unacked()), (0, 0));
        counts.assert_extra_cq_qp(0, 0, "after both explicit destroys");
    });
}

/// More SGEs than `max_send_sge` / `max_recv_sge`: refused, typed
/// (EINVAL, the request's index), nothing queued.
#[test]
fn more_sges_than_the_caps_are_refused_and_nothing_is_queued() {
    on_rxe_and_siw("too_many_sges", |name, ctx, _counts| {
        let q = pair_with(ctx, name, |_| {});
        let (send_max, recv_max) = (q.qp_a.caps().max_send_sge, q.qp_b.caps().max_recv_sge);
        let mut a = anon(4096);
        let mut b = anon(4096);
        let mr_a = fresh_mr(&q.pd, &mut a, RW_READ);
        let mr_b = fresh_mr(&q.pd, &mut b, RW_READ);
        let many = |mr: &MemoryRegion, base: u64, n: u32| -> Vec<Sge> {
            (0..u64::from(n))
                .map(|i| sge(base + 8 * i, 8, mr)[0])
                .collect()
        };
        let sends = many(&mr_a, a.as_ptr() as u64, send_max + 1);
        let ok = sge(a.as_ptr() as u64, 8, &mr_a);
        // SAFETY: refused before anything is queued.
        let err = unsafe { q.qp_a.post_send(&[send(1, &ok), send(2, &sends)]) }.unwrap_err();
        assert_refused(
            &err,
            1,
            |e| matches!(e, PostError::TooManySges { .. }),
            Errno::INVAL,
        );
        let recvs = many(&mr_b, b.as_ptr() as u64, recv_max + 1);
        // SAFETY: refused before anything is queued.
        let err = unsafe {
            q.qp_b.post_recv(&[RecvWr {
                wr_id: 3,
                sges: &recvs,
            }])
        }
        .unwrap_err();
        assert_refused(
            &err,
            0,
            |e| matches!(e, PostError::TooManySges { .. }),
            Errno::INVAL,
        );
        loud(&format!(
            "{name}: {} SGEs refused (max_send_sge {send_max}, max_recv_sge {recv_max}): {err}",
            recv_max + 1
        ));
        assert_no_completion(&q.cq_a, "after the refused send batch");
        a[..32].copy_from_slice(&[0x5c; 32]);
        one_send_lands(&q, &mr_a, &mr_b, (&mut b[1024..1056], &a[..32]));
        drop((q, mr_a, mr_b));
    });
}

/// A QP made with `max_inline` 64: inline data of exactly the cap lands
/// byte for byte (RDMA WRITE); one byte more is refused, typed, and
/// nothing is queued.
#[test]
fn inline_beyond_max_inline_is_refused_and_within_it_lands() {
    on_rxe_and_siw("inline_limit", |name, ctx, _counts| {
        let q = pair_with(ctx, name, |init| init.max_inline = 64);
        let max = q.qp_a.caps().max_inline;
        assert!(max >= 64, "{name}: asked for 64 inline bytes, got {max}");
        let mut b = anon(4096);
        let mr_b = fresh_mr(&q.pd, &mut b, RW_READ);
        let data: Vec<u8> = (0..max + 1).map(|i| (i * 13 + 1) as u8).collect();
        let remote = remote_in(&b, 512, &mr_b);
        let segs = [&data[..]];
        // SAFETY: refused before anything is queued (inline data is copied anyway).
        let err = unsafe { q.qp_a.post_send(&[inline_write(1, remote, &segs)]) }.unwrap_err();
        assert_refused(
            &err,
            0,
            |e| matches!(e, PostError::InlineTooLong { .. }),
            Errno::INVAL,
        );
        loud(&format!("{name}: {} inline bytes refused: {err}", max + 1));
        assert_no_completion(&q.cq_a, "after the refused inline WRITE");
        let fits = &data[..max as usize];
        let segs = [fits];
        // SAFETY: inline data is copied during the call; the target b[512..]
        // is not touched until the completion.
        unsafe { q.qp_a.post_send(&[inline_write(2, remote, &segs)]) }
            .unwrap_or_else(|e| panic!("{name}: inline WRITE of {max} bytes: {e}"));
        let wcs = wait_count(&q.cq_a, 1, "the inline WRITE");
        check(&wcs[0], "the inline WRITE", WcOpcode::RdmaWrite, &q.qp_a, 2);
        assert_eq!(&b[512..512 + max as usize], fits, "{name}: inline bytes");
        assert!(
            b[..512].iter().all(|&x| x == 0),
            "{name}: before the target"
        );
        assert!(
            b[512 + max as usize..].iter().all(|&x| x == 0),
            "{name}: past the target"
        );
        loud(&format!("{name}: {max} inline bytes landed byte for byte"));
        drop((q, mr_b));
    });
}

/// A full receive queue (B posts `max_recv_wr` receives: one more is
/// refused, ENOMEM) and a full send queue (A posts `max_send_wr` SENDs to
/// a peer with no receive posted, so none completes: one more is
/// refused). Then everything completes, exactly once, in order, and a new
/// post works.
#[test]
fn full_send_and_receive_queues_refuse_one_more_and_lose_nothing() {
    on_rxe_and_siw("full_queues", |name, ctx, _counts| {
        let q = pair_with(ctx, name, |_| {});
        if q.iwarp() {
            return siw_full_queues(&q, name);
        }
        let (s, r) = (q.qp_a.caps().max_send_wr, q.qp_b.caps().max_recv_wr);
        assert!(
            r >= s,
            "{name}: the test needs max_recv_wr {r} >= max_send_wr {s}"
        );
        let (s, r) = (s as usize, r as usize);
        let mut a = anon(8192);
        let mut b = anon(2 * 8 * r + 4096);
        let mr_a = fresh_mr(&q.pd, &mut a, RW_READ);
        let mr_b = fresh_mr(&q.pd, &mut b, RW_READ);
        for (i, x) in a[..8 * s].iter_mut().enumerate() {
            *x = (i / 8) as u8 + 1;
        }
        let (a0, b0) = (a.as_ptr() as u64, b.as_ptr() as u64);
        let src: Vec<[Sge; 1]> = (0..s).map(|i| sge(a0 + 8 * i as u64, 8, &mr_a)).collect();
        let recv_at = |round: usize| -> Vec<[Sge; 1]> {
            (0..r)
                .map(|i| sge(b0 + (8 * (round * r + i)) as u64, 8, &mr_b))
                .collect()
        };
        let post_recvs = |sges: &[[Sge; 1]], first: u64| {
            let wrs: Vec<RecvWr<'_>> = sges
                .iter()
                .enumerate()
                .map(|(i, sg)| RecvWr {
                    wr_id: first + i as u64,
                    sges: sg,
                })
                .collect();
            // SAFETY: b stays mapped and untouched until these receives
            // complete (waited for below, or flushed when the QP goes).
            unsafe { q.qp_b.post_recv(&wrs) }
        };
        let one_more = sge(b0, 8, &mr_b);

        // The receive queue: full after r, the (r+1)th refused.
        let round0 = recv_at(0);
        post_recvs(&round0, 1000).unwrap_or_else(|e| panic!("{name}: {r} receives: {e}"));
        let err = post_recvs(std::slice::from_ref(&one_more), 9999).unwrap_err();
        assert_refused(
            &err,
            0,
            |e| matches!(e, PostError::QueueFull { .. }),
            Errno::NOMEM,
        );
        loud(&format!("{name}: receive {} refused: {err}", r + 1));
        // s SENDs consume s of them, exactly.
        for (i, sg) in src.iter().enumerate() {
            // SAFETY: a is only read until the completions below.
            unsafe { q.qp_a.post_send(&[send(i as u64, sg)]) }
                .unwrap_or_else(|e| panic!("{name}: SEND {i}: {e}"));
        }
        let sent = wait_count(&q.cq_a, s, "the first s SENDs");
        let got = wait_count(&q.cq_b, s, "the first s receives");
        for (i, (wa, wb)) in sent.iter().zip(&got).enumerate() {
            check(wa, "SEND", WcOpcode::Send, &q.qp_a, i as u64);
            check(wb, "receive", WcOpcode::Recv, &q.qp_b, 1000 + i as u64);
        }
        assert_eq!(&b[..8 * s], &a[..8 * s], "{name}: round 0 bytes");
        // r - s receives of round 0 stay posted; use them up so B has none.
        let rest = r - s;
        for i in 0..rest {
            // SAFETY: as above.
            unsafe { q.qp_a.post_send(&[send(500 + i as u64, &src[0])]) }.unwrap();
        }
        wait_count(&q.cq_a, rest, "SENDs using up the receives");
        wait_count(&q.cq_b, rest, "the remaining receives");

        // The send queue: s SENDs towards no receive stay outstanding (RNR,
        // retried forever), so the (s+1)th is refused.
        let batch: Vec<SendWr<'_>> = src
            .iter()
            .enumerate()
            .map(|(i, sg)| send(100 + i as u64, sg))
            .collect();
        // SAFETY: a is only read until the completions below.
        unsafe { q.qp_a.post_send(&batch) }
            .unwrap_or_else(|e| panic!("{name}: {s} SENDs in one batch: {e}"));
        std::thread::sleep(Duration::from_millis(50));
        assert_no_completion(&q.cq_a, "SENDs towards no receive");
        // SAFETY: refused before anything is queued.
        let err = unsafe { q.qp_a.post_send(&[send(999, &src[0])]) }.unwrap_err();
        assert_refused(
            &err,
            0,
            |e| matches!(e, PostError::QueueFull { .. }),
            Errno::NOMEM,
        );
        loud(&format!("{name}: SEND {} refused: {err}", s + 1));
        // Receives arrive: every SEND completes, once, in order.
        let round1 = recv_at(1);
        post_recvs(&round1[..s], 2000).unwrap();
        let sent = wait_count(&q.cq_a, s, "the s outstanding SENDs");
        let got = wait_count(&q.cq_b, s, "their receives");
        for (i, (wa, wb)) in sent.iter().zip(&got).enumerate() {
            check(
                wa,
                "SEND after RNR",
                WcOpcode::Send,
                &q.qp_a,
                100 + i as u64,
            );
            check(
                wb,
                "receive after RNR",
                WcOpcode::Recv,
                &q.qp_b,
                2000 + i as u64,
            );
        }
        let round1_bytes = &b[8 * r..8 * r + 8 * s];
        assert_eq!(round1_bytes, &a[..8 * s], "{name}: round 1 bytes");
        // And a new post works.
        a[4096..4112].copy_from_slice(&[0xe7; 16]);
        let dst = &mut b[8 * 2 * r..8 * 2 * r + 16];
        one_send_lands(&q, &mr_a, &mr_b, (dst, &a[4096..4112]));
        loud(&format!(
            "{name}: full queues ({s} sends, {r} receives): the extra one refused, nothing lost"
        ));
        drop((q, mr_a, mr_b));
    });
}

/// siw's half of [`full_send_and_receive_queues_refuse_one_more_and_lose_nothing`].
/// iWARP has no RNR: a SEND towards no posted receive is fatal to the
/// connection, so SENDs cannot be parked in the send queue as on rxe.
/// Instead: B's receive queue takes `max_recv_wr` receives and refuses one
/// more (ENOMEM); one batch of `max_send_wr + 1` SENDs is refused at index
/// `max_send_wr` (ENOMEM: the free slots are counted before anything is
/// written) and nothing of it runs; then `max_send_wr` SENDs in one
/// batch all complete, once, in order, into the receives, byte for byte,
/// and a new post works.
fn siw_full_queues(q: &TwoQps, name: &str) {
    loud(&format!(
        "NOTE: {name}: siw (iWARP) has no RNR: the send queue is filled by one batch over its \
         size instead of by SENDs waiting for receives"
    ));
    let (s, r) = (
        q.qp_a.caps().max_send_wr as usize,
        q.qp_b.caps().max_recv_wr as usize,
    );
    assert!(
        r >= s,
        "{name}: the test needs max_recv_wr {r} >= max_send_wr {s}"
    );
    let mut a = anon(8192);
    let mut b = anon(8 * r + 4096);
    let mr_a = fresh_mr(&q.pd, &mut a, RW_READ);
    let mr_b = fresh_mr(&q.pd, &mut b, RW_READ);
    for (i, x) in a[..8 * (s + 1)].iter_mut().enumerate() {
        *x = (i / 8) as u8 + 1;
    }
    let (a0, b0) = (a.as_ptr() as u64, b.as_ptr() as u64);
    let src: Vec<[Sge; 1]> = (0..=s).map(|i| sge(a0 + 8 * i as u64, 8, &mr_a)).collect();
    let dst: Vec<[Sge; 1]> = (0..=r).map(|i| sge(b0 + 8 * i as u64, 8, &mr_b)).collect();
    let recvs: Vec<RecvWr<'_>> = dst[..r]
        .iter()
        .enumerate()
        .map(|(i, sg)| RecvWr {
            wr_id: 1000 + i as u64,
            sges: sg,
        })
        .collect();
    // SAFETY: b stays mapped and untouched until these receives complete
    // (waited for below, or flushed when the QP goes).
    unsafe { q.qp_b.post_recv(&recvs) }.unwrap_or_else(|e| panic!("{name}: {r} receives: {e}"));
    let one_more = [RecvWr {
        wr_id: 9999,
        sges: &dst[r],
    }];
    // SAFETY: refused before anything is queued.
    let err = unsafe { q.qp_b.post_recv(&one_more) }.unwrap_err();
    assert_refused(
        &err,
        0,
        |e| matches!(e, PostError::QueueFull { .. }),
        Errno::NOMEM,
    );
    loud(&format!("{name}: receive {} refused: {err}", r + 1));
    let batch: Vec<SendWr<'_>> = src
        .iter()
        .enumerate()
        .map(|(i, sg)| send(100 + i as u64, sg))
        .collect();
    // SAFETY: refused before anything is queued.
    let err = unsafe { q.qp_a.post_send(&batch) }.unwrap_err();
    assert_refused(
        &err,
        s,
        |e| matches!(e, PostError::QueueFull { .. }),
        Errno::NOMEM,
    );
    loud(&format!(
        "{name}: a batch of {} SENDs refused: {err}",
        s + 1
    ));
    std::thread::sleep(Duration::from_millis(50));
    assert_no_completion(&q.cq_a, "after the refused send batch");
    assert_no_completion(&q.cq_b, "after the refused send batch (receiver)");
    // SAFETY: a is only read until the completions below.
    unsafe { q.qp_a.post_send(&batch[..s]) }
        .unwrap_or_else(|e| panic!("{name}: {s} SENDs in one batch: {e}"));
    let sent = wait_count(&q.cq_a, s, "the s SENDs");
    let got = wait_count(&q.cq_b, s, "their receives");
    for (i, (wa, wb)) in sent.iter().zip(&got).enumerate() {
        check(wa, "SEND", WcOpcode::Send, &q.qp_a, 100 + i as u64);
        check(wb, "receive", WcOpcode::Recv, &q.qp_b, 1000 + i as u64);
        assert_eq!(wb.byte_len(), 8, "{wb:?}");
    }
    assert_eq!(&b[..8 * s], &a[..8 * s], "{name}: the batch's bytes");
    assert!(
        b[8 * s..8 * r].iter().all(|&x| x == 0),
        "{name}: past the batch"
    );
    // Use up the r - s receives left, then a new post works.
    for i in 0..r - s {
        // SAFETY: as above.
        unsafe { q.qp_a.post_send(&[send(500 + i as u64, &src[0])]) }.unwrap();
    }
    wait_count(&q.cq_a, r - s, "SENDs using up the receives");
    wait_count(&q.cq_b, r - s, "the remaining receives");
    a[4096..4112].copy_from_slice(&[0xe7; 16]);
    one_send_lands(q, &mr_a, &mr_b, (&mut b[8 * r..8 * r + 16], &a[4096..4112]));
    loud(&format!(
        "{name}: full queues ({s} sends, {r} receives): the extra ones refused, nothing lost"
    ));
    drop((mr_a, mr_b));
}

/// An SGE whose lkey is an MR of another PD: the post is accepted (the
/// key is the device's to check), the completion carries the error rxe
/// gives, the QP goes to the error state, and the next work requests are
/// flushed (WR_FLUSH_ERR). rxe (Linux 6.12) answers an RDMA READ into such
/// an SGE with LOC_PROT_ERR (its completer's copy fails); for a WRITE or
/// SEND out of one, its requester's copy fails (EINVAL: it would record
/// LOC_QP_OP_ERR) and it moves the QP to ERR at once, so the completer
/// flushes that very request too: its completion is WR_FLUSH_ERR, as
/// measured on the VM. Linux 6.1's rxe completes it LOC_QP_OP_ERR
/// (`common::kernel::rxe_requester_failure_status`).
#[test]
fn an_lkey_of_another_pd_fails_in_the_completion_and_flushes_the_rest() {
    on_rxe_and_siw("foreign_lkey", |name, ctx, _counts| {
        if driver(ctx) == Driver::Siw {
            return siw_foreign_lkey(ctx, name);
        }
        for (what, expected) in [
            ("RDMA READ", WcStatus::LocProtErr),
            ("RDMA WRITE", common::kernel::rxe_requester_failure_status()),
        ] {
            let f = post_with_foreign_lkey(ctx, name, what);
            let wc = wait_count(&f.q.cq_a, 1, what)[0];
            loud(&format!("{name}: {what} with another PD's lkey: {wc:?}"));
            assert_eq!(wc.status(), expected, "{name}: {what}: {wc:?}");
            assert_eq!(wc.wr_id(), 1);
            assert!(
                f.foreign.iter().all(|&x| x == 0),
                "{name}: {what}: the foreign MR was written"
            );
            // The QP is in error now: what follows is flushed, in order.
            let next = [
                signalled_write(2, &f.good, f.remote),
                signalled_write(3, &f.good, f.remote),
            ];
            // SAFETY: as for the first request (`post_with_foreign_lkey`);
            // flushed WRs touch no memory.
            unsafe { f.q.qp_a.post_send(&next) }
                .unwrap_or_else(|e| panic!("{name}: posting after the error: {e}"));
            let flushed = wait_count(&f.q.cq_a, 2, "WRs after the error");
            for (wc, id) in flushed.iter().zip([2, 3]) {
                assert_eq!(
                    (wc.status(), wc.wr_id()),
                    (WcStatus::WrFlushErr, id),
                    "{wc:?}"
                );
            }
            assert!(
                f.mine[1024..1088].iter().all(|&x| x == 0),
                "{name}: flushed WRITE landed"
            );
            loud(&format!(
                "{name}: {what}: then WR_FLUSH_ERR for the next two"
            ));
            // Leaving the error state is a modify to RESET.
            let reset = uverbs::qp::QpAttr::new().state(QpState::Reset);
            modify(&f.q.qp_a, &reset, "ERR->RESET");
            drop((f.q, f.mr, f.foreign_mr, f.other_pd));
        }
    });
}

/// A connected pair, a buffer of its PD (`mine`: its first 64 bytes
/// 0x3c, the remote target; `good` an SGE of 64 bytes at 1024 in it) and
/// one of another PD (`foreign`), with `what` (an RDMA READ or WRITE of 64
/// bytes at `remote`) posted signalled as wr_id 1 with `foreign`'s lkey.
/// Fields drop in order: the QPs, the MRs, the PD, the buffers.
struct ForeignLkey {
    q: TwoQps,
    mr: MemoryRegion,
    foreign_mr: MemoryRegion,
    other_pd: ProtectionDomain,
    mine: memmap2::MmapMut,
    foreign: memmap2::MmapMut,
    remote: Remote,
    good: [Sge; 1],
}

fn post_with_foreign_lkey(ctx: &Context, name: &str, what: &str) -> ForeignLkey {
    let q = pair_with(ctx, name, |_| {});
    let other_pd: ProtectionDomain = alloc_pd(ctx);
    let mut mine = anon(4096);
    let mut foreign = anon(4096);
    let mr = fresh_mr(&q.pd, &mut mine, RW_READ);
    let foreign_mr = fresh_mr(&other_pd, &mut foreign, RW_READ);
    mine[..64].copy_from_slice(&[0x3c; 64]);
    let remote = remote_in(&mine, 0, &mr);
    let bad = sge(foreign.as_ptr() as u64, 64, &foreign_mr);
    let good = sge(mine.as_ptr() as u64 + 1024, 64, &mr);
    let op = match what {
        "RDMA READ" => SendOp::RdmaRead { remote },
        _ => SendOp::RdmaWrite { remote, imm: None },
    };
    // SAFETY: both buffers stay mapped and untouched by the program until
    // the caller's completions (they are returned with the QPs, which drop
    // first); the device may write `foreign` for the READ, which the PD
    // check prevents; `mine` is only read or written through the remote
    // side.
    unsafe { q.qp_a.post_send(&[signalled(1, op, &bad)]) }
        .unwrap_or_else(|e| panic!("{name}: {what} with a foreign lkey: {e}"));
    ForeignLkey {
        q,
        mr,
        foreign_mr,
        other_pd,
        mine,
        foreign,
        remote,
        good,
    }
}

/// siw's half of [`an_lkey_of_another_pd_fails_in_the_completion_and_flushes_the_rest`]:
/// siw checks a WRITE's or SEND's SGEs when it starts sending
/// (`siw_check_sgl_tx`); another PD's lkey fails there: the request
/// completes with LOC_QP_OP_ERR, the QP gets QP_FATAL and the connection is
/// dropped (`siw_qp_cm_drop`): both ids hear DISCONNECTED, while the
/// kernel still reports the QP in RTS (measured). A READ's local SGE is
/// checked when the response arrives: LOC_PROT_ERR, the connection
/// dropped, the QP in ERR. Nothing is written to the foreign MR, and what
/// is posted after the error is accepted but never runs nor completes.
/// The way back is a new connection: a WRITE lands there.
fn siw_foreign_lkey(ctx: &Context, name: &str) {
    // (request, its completion, QP A's state as the kernel then reports it),
    // measured on Linux 6.12 in every configuration.
    for (what, expected, state_after) in [
        ("RDMA WRITE", WcStatus::LocQpOpErr, QpState::Rts),
        ("RDMA READ", WcStatus::LocProtErr, QpState::Err),
    ] {
        let ForeignLkey {
            q,
            mr,
            foreign_mr,
            other_pd,
            mut mine,
            foreign,
            remote,
            good,
        } = post_with_foreign_lkey(ctx, name, what);
        let link = q.cm.as_ref().expect("a siw pair has its cm link");
        let wc = wait_count(&q.cq_a, 1, what)[0];
        let events = cm_events(link, Duration::from_secs(3));
        let state =
            common::kernel::reported_state(q.qp_a.refresh_state(), &format!("{name}: {what}"));
        loud(&format!(
            "{name}: {what} with another PD's lkey: {wc:?}; cm events {events:?}; QP A {state:?}"
        ));
        assert_eq!(
            (wc.status(), wc.wr_id()),
            (expected, 1),
            "{name}: {what}: {wc:?}"
        );
        assert!(
            foreign.iter().all(|&x| x == 0),
            "{name}: {what}: the foreign MR was written"
        );
        assert_disconnected(link, &events, &format!("{name}: {what}"));
        // After the WRITE's local error (found by the transmit side) the
        // kernel still reports QP A in RTS although its connection is gone
        // (siw suspends transmitting and has the cm close the stream); the
        // READ's (found by the receive side) leaves it in ERR.
        if let Some(state) = state {
            assert_eq!(state, state_after, "{name}: {what}: QP A");
        }
        let next = [
            signalled_write(2, &good, remote),
            signalled_write(3, &good, remote),
        ];
        // SAFETY: as for the first request (`post_with_foreign_lkey`);
        // requests that never run touch no memory, and
        // the QP is destroyed before the buffers go.
        let posted = unsafe { q.qp_a.post_send(&next) };
        std::thread::sleep(Duration::from_millis(200));
        let mut wc = [WorkCompletion::default(); 8];
        let n = q.cq_a.poll(&mut wc).unwrap();
        loud(&format!(
            "{name}: {what}: posting two WRITEs on the QP ({state:?}, no connection): {posted:?}, then {:?}",
            &wc[..n]
        ));
        // Measured: accepted (the crate allows posting in RTS and ERR), and
        // then nothing: siw has no connection to send them on, and a user
        // QP's doorbell flushes nothing (`siw_sq_flush_wr` with no kernel
        // work request), so they neither run nor complete.
        assert!(posted.is_ok(), "{name}: {what}: {posted:?}");
        assert_eq!(
            n,
            0,
            "{name}: {what}: completions after the error: {:?}",
            &wc[..n]
        );
        assert!(
            mine[1024..1088].iter().all(|&x| x == 0),
            "{name}: a WRITE after the error landed"
        );
        // The way back on iWARP: a new connection (new QPs, same PD); the
        // good WRITE lands there.
        let mut q = q;
        cm_reconnect(&mut q, ctx, name, 256);
        mine[1024..1088].fill(0x77);
        // SAFETY: `mine` stays mapped; bytes 1024..1088 are not touched by
        // the program until the completion.
        unsafe { q.qp_a.post_send(&[signalled_write(4, &good, remote)]) }
            .unwrap_or_else(|e| panic!("{name}: {what}: WRITE on the new connection: {e}"));
        let wc = wait_count(&q.cq_a, 1, "the WRITE on the new connection");
        check(
            &wc[0],
            "the WRITE on the new connection",
            WcOpcode::RdmaWrite,
            &q.qp_a,
            4,
        );
        assert_eq!(
            &mine[..64],
            &[0x77; 64][..],
            "{name}: {what}: the WRITE on the new connection"
        );
        drop((q, mr, foreign_mr, other_pd));
    }
}

/// Destroying a CQ a QP uses: the kernel's EBUSY, typed, the CQ handed
/// back and still working (a WRITE completes on it); after the QP is gone
/// the destroy succeeds.
#[test]
fn destroying_a_cq_in_use_is_ebusy_and_the_cq_still_works() {
    on_rxe_and_siw("destroy_cq_in_use", |name, ctx, counts| {
        let q = pair_with(ctx, name, |_| {});
        let TwoQps {
            pd,
            cq_a,
            cq_b,
            qp_a,
            qp_b,
            cm,
        } = q;
        let cq_a = destroy_cq_refused_busy(cq_a, name);
        counts.assert_extra_cq_qp(2, 2, "after the refused destroy");
        let mut buf = anon(4096);
        let mr = fresh_mr(&pd, &mut buf, RW_READ);
        buf[..128].copy_from_slice(&[0x42; 128]);
        let src = sge(buf.as_ptr() as u64, 128, &mr);
        let remote = remote_in(&buf, 2048, &mr);
        // SAFETY: buf is untouched until the completion below.
        unsafe { qp_a.post_send(&[signalled_write(5, &src, remote)]) }.unwrap();
        wait_checked(
            &cq_a,
            "WRITE on the CQ handed back",
            WcOpcode::RdmaWrite,
            &qp_a,
            5,
        );
        assert_eq!(&buf[2048..2176], &[0x42; 128][..]);
        qp_a.destroy()
            .unwrap_or_else(|e| panic!("{name}: destroy_qp: {e}"));
        let done = cq_a
            .destroy()
            .unwrap_or_else(|e| panic!("{name}: destroy_cq once unused: {e}"));
        assert_eq!(done.unacked(), 0);
        counts.assert_extra_cq_qp(1, 1, "after both explicit destroys");
        drop((qp_b, cq_b, mr, pd, cm));
    });
}

/// The process's open descriptors.
fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count())
}

fn fd_is_open(fd: RawFd) -> bool {
    // SAFETY: F_GETFD reads a descriptor's flags; any number is fine.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFD) };
    flags != -1
}

/// Waits (bounded) until the channel's descriptor is readable.
fn wait_readable(fd: RawFd, name: &str) {
    let ready = poll_in(fd, WAIT);
    assert_eq!(ready, 1, "{name}: no completion event within {WAIT:?}");
}

/// A completion channel whose CQ got two events, one read and never
/// acked, one never read: the explicit destroy reports the kernel's count
/// (the one read) and the unacked one, without waiting; then the channel
/// is dropped (CQ first, and in a second round channel first), nothing
/// hangs, its descriptor is closed and the process has the descriptors it
/// started with.
#[test]
fn a_channel_dropped_with_unacked_events_closes_and_leaks_nothing() {
    on_rxe_and_siw("channel_unacked", |name, ctx, counts| {
        for channel_first in [false, true] {
            let fds_before = open_fds();
            let channel = comp_channel(ctx, name);
            let raw = channel.as_raw_fd();
            let q = connected_rc_pair(ctx, name, 8, Some(&channel));
            let mut buf = anon(4096);
            let mr = fresh_mr(&q.pd, &mut buf, RW_READ);
            let src = sge(buf.as_ptr() as u64, 64, &mr);
            let remote = remote_in(&buf, 1024, &mr);
            for wr_id in [1, 2] {
                q.cq_a.req_notify(false).unwrap();
                // SAFETY: buf is untouched until the completion below.
                unsafe { q.qp_a.post_send(&[signalled_write(wr_id, &src, remote)]) }.unwrap();
                wait_checked(
                    &q.cq_a,
                    "WRITE with an event",
                    WcOpcode::RdmaWrite,
                    &q.qp_a,
                    wr_id,
                );
                if wr_id == 1 {
                    wait_readable(raw, name);
                    assert_eq!(channel.get_event().unwrap(), q.cq_a.event_id());
                }
            }
            // The second event is queued in the kernel, unread.
            wait_readable(raw, name);
            assert_eq!((q.cq_a.events_received(), q.cq_a.unacked_events()), (1, 1));
            drop((q.qp_a, q.qp_b));
            if channel_first {
                drop(channel);
                assert!(fd_is_open(raw), "{name}: the CQ keeps the channel open");
                drop(q.cq_a);
            } else {
                let done = q.cq_a.destroy().unwrap_or_else(|e| panic!("{name}: {e}"));
                loud(&format!("{name}: destroy with unacked events: {done:?}"));
                assert_eq!(
                    done.comp_events_reported, 1,
                    "{name}: the kernel counts reads"
                );
                assert_eq!((done.events_received, done.events_acked), (1, 0));
                assert_eq!(done.unacked(), 1);
                assert!(fd_is_open(raw), "{name}: the channel is still ours");
                drop(channel);
            }
            assert!(
                !fd_is_open(raw),
                "{name}: the channel's fd {raw} is still open"
            );
            drop((q.cq_b, mr, q.pd, q.cm));
            counts.assert_extra_cq_qp(0, 0, "after dropping the channel and its CQ");
            assert_eq!(open_fds(), fds_before, "{name}: descriptors leaked");
            loud(&format!(
                "{name}: channel dropped {} with an unacked and an unread event: fd closed",
                if channel_first {
                    "before its CQ"
                } else {
                    "after its CQ"
                }
            ));
        }
    });
}
