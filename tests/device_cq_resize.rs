//! `CompletionQueue::resize` (`RESIZE_CQ`) on real devices.
//!
//! rxe: completions waiting in the ring survive a resize up, in order, and
//! the CQ keeps working on the new ring; the kernel refuses (`EINVAL`, the
//! CQ unchanged and usable) a size below the completions waiting, 0, or
//! above `max_cqe` (`rxe_cq_chk_attr`); a shrink that fits is done.
//! siw: no `resize_cq` in the kernel (its answer to the raw command is
//! `EOPNOTSUPP`): `resize` refuses typed before sending, the CQ works on.
//! Every kernel object is gone at the end (the handle counts).

#[macro_use]
mod common;

use common::*;
use uverbs::command::ResizeCq;
use uverbs::error::{Errno, Op};
use uverbs::wr::{Payload, RecvWr, SendOp, SendWr, WcOpcode};
use uverbs::{CompletionQueue, Context, Error, QueuePair};

/// Posts `ids.len()` receives on `b` and as many zero-byte SENDs (one
/// batch) on `a`, and waits for the receives on `b`'s CQ: the sends'
/// completions then are (or are about to be) in `a`'s CQ, unpolled.
fn sends_without_polling(name: &str, q: &TwoQps, ids: &[u64]) {
    for &id in ids {
        // SAFETY: a receive without buffers.
        unsafe {
            q.qp_b.post_recv(&[RecvWr {
                wr_id: id,
                sges: &[],
            }])
        }
        .unwrap_or_else(|e| panic!("{name}: post_recv {id}: {e}"));
    }
    let sends: Vec<SendWr<'_>> = ids
        .iter()
        .map(|&id| SendWr::new(id, SendOp::Send { imm: None }, Payload::Sges(&[])))
        .collect();
    // SAFETY: the sends carry no memory.
    unsafe { q.qp_a.post_send(&sends) }.unwrap_or_else(|e| panic!("{name}: post_send: {e}"));
    let mut got = 0;
    let deadline = std::time::Instant::now() + WAIT;
    let mut wc = vec![uverbs::wr::WorkCompletion::default(); ids.len()];
    while got < ids.len() {
        got += q.cq_b.poll(&mut wc[got..]).unwrap();
        assert!(
            std::time::Instant::now() < deadline,
            "{name}: {got} of {} receives",
            ids.len()
        );
    }
    for (wc, &id) in wc.iter().zip(ids) {
        assert!(wc.is_success() && wc.wr_id() == id, "{name}: {wc:?}");
    }
    // The sender's completion follows the responder's ACK.
    std::thread::sleep(std::time::Duration::from_millis(200));
}

/// Polls exactly `ids.len()` completions from `cq`: successful SENDs of
/// `qp` with these wr_ids, in this order.
fn expect_sends(name: &str, cq: &CompletionQueue, qp: &QueuePair, ids: &[u64]) {
    let mut wc = Vec::new();
    let deadline = std::time::Instant::now() + WAIT;
    let mut buf = [uverbs::wr::WorkCompletion::default(); 16];
    while wc.len() < ids.len() && std::time::Instant::now() < deadline {
        wc.extend_from_slice(cq.poll_into(&mut buf).unwrap());
    }
    let seen: Vec<u64> = wc.iter().map(|w| w.wr_id()).collect();
    assert_eq!(seen, ids, "{name}: the senders' completions: {wc:?}");
    for w in &wc {
        assert!(w.is_success(), "{name}: {w:?}");
        assert_eq!(w.opcode(), Some(WcOpcode::Send), "{name}: {w:?}");
        assert_eq!(w.qp_num(), qp.qp_num(), "{name}: {w:?}");
    }
    assert_eq!(cq.poll(&mut buf).unwrap(), 0, "{name}: an extra completion");
}

fn kernel_errno(name: &str, what: &str, r: Result<u32, Error>) -> Errno {
    match r {
        Err(e @ Error::Os { .. }) => {
            assert_eq!(e.op(), Op::ResizeCq, "{name}: {what}: {e}");
            e.errno().unwrap()
        }
        other => panic!("{name}: {what}: {other:?}"),
    }
}

fn rxe_resize(name: &str, ctx: &Context) {
    let max_cqe = ctx.query_device().unwrap().max_cqe;
    let q = connected_rc_pair(ctx, name, 8, None);
    let first = q.cq_a.cqe();
    loud(&format!(
        "{name} over {}: CQ of {first} entries, max_cqe {max_cqe}",
        ctx.transport_kind()
    ));

    let ids = [11, 12, 13, 14, 15, 16];
    sends_without_polling(name, &q, &ids);
    // Six waiting: the kernel refuses room for two, and nothing changes.
    let errno = kernel_errno(name, "resize below pending", q.cq_a.resize(2));
    assert_eq!(errno, Errno::INVAL, "{name}");
    assert_eq!(q.cq_a.cqe(), first, "{name}: cqe after a refused resize");
    let errno = kernel_errno(name, "resize to 0", q.cq_a.resize(0));
    assert_eq!(errno, Errno::INVAL, "{name}");
    let errno = kernel_errno(name, "resize above max_cqe", q.cq_a.resize(max_cqe + 1));
    assert_eq!(errno, Errno::INVAL, "{name}");

    // Up: the waiting completions come out of the new ring, in order.
    let grown = q
        .cq_a
        .resize(100)
        .unwrap_or_else(|e| panic!("{name}: resize to 100: {e}"));
    assert!(grown >= 100, "{name}: {grown} entries after resize(100)");
    assert_eq!(q.cq_a.cqe(), grown, "{name}");
    expect_sends(name, &q.cq_a, &q.qp_a, &ids);

    // The new ring takes new completions.
    let more = [21, 22, 23];
    sends_without_polling(name, &q, &more);
    expect_sends(name, &q.cq_a, &q.qp_a, &more);

    // Down, with two waiting: fits, and they survive too.
    let pending = [31, 32];
    sends_without_polling(name, &q, &pending);
    let shrunk = q
        .cq_a
        .resize(4)
        .unwrap_or_else(|e| panic!("{name}: resize to 4: {e}"));
    assert!(
        (4..grown).contains(&shrunk),
        "{name}: {shrunk} after resize(4)"
    );
    assert_eq!(q.cq_a.cqe(), shrunk, "{name}");
    expect_sends(name, &q.cq_a, &q.qp_a, &pending);
    let last = [41];
    sends_without_polling(name, &q, &last);
    expect_sends(name, &q.cq_a, &q.qp_a, &last);
}

fn siw_refuses(name: &str, ctx: &Context) {
    let q = connected_rc_pair(ctx, name, 8, None);
    let cqe = q.cq_a.cqe();
    match q.cq_a.resize(64) {
        Err(e @ Error::Unsupported { .. }) => {
            assert_eq!(e.op(), Op::ResizeCq, "{name}: {e}");
            assert_eq!(e.errno(), Some(Errno::OPNOTSUPP), "{name}: {e}");
        }
        other => panic!("{name}: resize on siw: {other:?}"),
    }
    assert_eq!(q.cq_a.cqe(), cqe, "{name}");
    // What the refusal stands for: the kernel's own answer.
    // SAFETY: RESIZE_CQ of a CQ of this context hands no memory over (and
    // siw's kernel does not resize).
    let raw = unsafe { ctx.execute(&ResizeCq::new(q.cq_a.handle(), 64), &mut []) };
    assert_eq!(
        raw.map(|r| r.cqe).unwrap_err().errno(),
        Some(Errno::OPNOTSUPP),
        "{name}: the raw RESIZE_CQ"
    );
    // The CQ works on.
    let ids = [51, 52];
    sends_without_polling(name, &q, &ids);
    expect_sends(name, &q.cq_a, &q.qp_a, &ids);
}

device_test!(
    resize_cq_keeps_completions_or_refuses,
    |name, ctx, counts| {
        match driver(&ctx) {
            Driver::Rxe => rxe_resize(name, &ctx),
            Driver::Siw => siw_refuses(name, &ctx),
            Driver::Other => {
                loud(&format!("{name}: no resize checks for this driver"));
                return;
            }
        }
        counts.assert_extra_cq_qp(0, 0, "after the pair is gone");
    }
);
