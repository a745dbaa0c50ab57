//! `OwnedSrq` on rxe0 and siw0: receive buffers posted to one shared
//! receive queue come back with the completion of whichever attached QP
//! consumed them (a plain `QueuePair` and an `OwnedQp` on one receive CQ),
//! holding exactly the message that QP's peer sent; the plain poll of that
//! CQ and the `OwnedQp`'s poll get their sends and nothing of the SRQ's; a
//! raw send with the SRQ's tag bit and a raw SRQ post are refused, typed;
//! an SRQ a QP already uses is not taken. Dropped before its QPs, the owner
//! leaves its buffers with the SRQ until the last QP is gone (counted
//! drops); `destroy` is refused (`EBUSY`) while a QP uses the SRQ and hands
//! every buffer back after. The kernel's counts are back at their start
//! after each test.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use uverbs::mr::StableBuffer;
use uverbs::post::{Completed, Ended, Local, OwnedSrq, RecvRequest};
use uverbs::qp::SrqInit;
use uverbs::wr::{PostError, RecvWr, SendOp, WorkCompletion};
use uverbs::{
    AccessFlags, BufferMr, CompletionQueue, Error, OwnedQp, ProtectionDomain, QpInit, QpType,
    QueuePair,
};

/// Bytes of each message and receive buffer.
const SLOT: usize = 64;

/// A QP of `pd` on `cq` receiving from `srq`'s SRQ.
fn qp_on_srq<M: Send + 'static>(
    pd: &ProtectionDomain,
    cq: &CompletionQueue,
    srq: &OwnedSrq<M>,
    name: &str,
) -> QueuePair {
    pd.create_qp(&QpInit::new(QpType::Rc, cq, cq).srq(srq.srq()))
        .unwrap_or_else(|e| panic!("{name}: create_qp on the owned SRQ: {e}"))
}

/// The message `seq` of `sender`: `[sender, seq, pattern…]`.
fn message(sender: u8, seq: u8) -> Vec<u8> {
    let mut m: Vec<u8> = (0..SLOT)
        .map(|i| (i as u8) ^ sender.wrapping_mul(31) ^ seq.wrapping_mul(7))
        .collect();
    m[0] = sender;
    m[1] = seq;
    m
}

/// Sends `count` messages from the plain `qp`, each waited for on `cq`.
fn send_from(
    qp: &QueuePair,
    cq: &CompletionQueue,
    pd: &ProtectionDomain,
    sender: u8,
    count: u8,
    name: &str,
) {
    let mut buf = anon(SLOT);
    let mr = fresh_mr(pd, &mut buf, RW_READ);
    for seq in 0..count {
        buf[..SLOT].copy_from_slice(&message(sender, seq));
        let s = sge(buf.as_ptr() as u64, SLOT, &mr);
        let wr_id = u64::from(sender) << 8 | u64::from(seq);
        // SAFETY: buf is not written until the send's completion is polled
        // just below.
        unsafe { qp.post_send(&[signalled(wr_id, SendOp::Send { imm: None }, &s)]) }
            .unwrap_or_else(|e| panic!("{name}: send {sender}/{seq}: {e}"));
        let wc = wait_one(cq, &format!("{name}: send {sender}/{seq}"));
        assert!(
            wc.is_success() && wc.wr_id() == wr_id,
            "{name}: send {sender}/{seq}: {wc:?}"
        );
    }
}

/// Polls `srq` until `n` receives are back (5 s at most).
fn poll_srq<M: uverbs::post::DeviceReadable + Send + 'static>(
    srq: &OwnedSrq<M>,
    n: usize,
    name: &str,
) -> Vec<Completed<M>> {
    let mut done = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(5);
    while done.len() < n {
        srq.poll(&mut done)
            .unwrap_or_else(|e| panic!("{name}: OwnedSrq::poll: {e}"));
        assert!(
            Instant::now() < deadline,
            "{name}: {} of {n} receives back after 5 s",
            done.len()
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(done.len(), n, "{name}: more receives back than expected");
    done
}

fn reg(pd: &ProtectionDomain, bytes: Vec<u8>) -> BufferMr<Vec<u8>> {
    pd.reg_buffer(bytes, AccessFlags::LOCAL_WRITE)
        .unwrap_or_else(|e| panic!("reg_buffer: {}", e.error))
}

#[test]
fn each_buffer_comes_back_with_the_completion_of_the_qp_that_used_it() {
    on_each_data_path_device_counted(
        "each_buffer_comes_back_with_the_completion_of_the_qp_that_used_it",
        |name, ctx, counts| {
            const EACH: u8 = 3;
            let pd = alloc_pd(ctx);
            let srq: OwnedSrq<BufferMr<Vec<u8>>> = OwnedSrq::new(
                pd.create_srq(&SrqInit::new(16, 1))
                    .unwrap_or_else(|e| panic!("{name}: create_srq: {e}")),
            )
            .unwrap_or_else(|e| panic!("{name}: OwnedSrq::new: {e}"));
            counts.assert_extra_srq(1, "with one owned SRQ");

            // Receivers: a plain QP and an OwnedQp, on one receive CQ.
            let rcq = ctx.create_cq(64, None).unwrap();
            let plain = qp_on_srq(&pd, &rcq, &srq, name);
            let owned = OwnedQp::<BufferMr<Vec<u8>>>::new(qp_on_srq(&pd, &rcq, &srq, name))
                .unwrap_or_else(|e| panic!("{name}: OwnedQp::new on the owned SRQ: {e}"));
            let (cq_a, cq_b) = (
                ctx.create_cq(16, None).unwrap(),
                ctx.create_cq(16, None).unwrap(),
            );
            let sender_a = qp_on(&pd, QpType::Rc, &cq_a, name);
            let sender_b = qp_on(&pd, QpType::Rc, &cq_b, name);
            let link_a = connect_qps(ctx, name, &sender_a, &plain, QP_ACCESS);
            let link_b = connect_qps(ctx, name, &sender_b, &owned, QP_ACCESS);

            // Refusals, typed, before anything is queued.
            let mut raw = anon(SLOT);
            let raw_mr = fresh_mr(&pd, &mut raw, RW_READ);
            let s = sge(raw.as_ptr() as u64, SLOT, &raw_mr);
            let tagged = 1u64 << 63 | 5;
            // SAFETY: refused before anything is written.
            let e =
                unsafe { plain.post_send(&[signalled(tagged, SendOp::Send { imm: None }, &s)]) }
                    .expect_err("a raw send with the SRQ's tag bit");
            assert!(
                matches!(&e, Error::Post { why, .. } if **why == PostError::ReservedWrId { wr_id: tagged }),
                "{name}: {e}"
            );
            // SAFETY: refused before anything is written.
            let e = unsafe { srq.srq().post_recv(&[RecvWr { wr_id: 1, sges: &s }]) }
                .expect_err("a raw post to an owned SRQ");
            assert!(matches!(e, Error::InvalidInput { .. }), "{name}: {e}");
            let busy = pd.create_srq(&SrqInit::new(4, 1)).unwrap();
            let on_busy = pd
                .create_qp(&QpInit::new(QpType::Rc, &rcq, &rcq).srq(&busy))
                .unwrap();
            let busy = OwnedSrq::<BufferMr<Vec<u8>>>::new(busy)
                .expect_err("an SRQ a QP already uses")
                .srq;
            let on_busy = OwnedQp::<BufferMr<Vec<u8>>>::new(on_busy)
                .expect_err("an OwnedQp on an SRQ nobody owns")
                .qp;
            drop((on_busy, busy));

            // 2 × EACH messages land in 2 × EACH + 2 posted buffers.
            let posted = 2 * usize::from(EACH) + 2;
            for i in 0..posted {
                srq.post_recv(RecvRequest::new(
                    1000 + i as u64,
                    Local::whole(reg(&pd, vec![0xee; SLOT])),
                ))
                .unwrap_or_else(|e| panic!("{name}: OwnedSrq::post_recv {i}: {}", e.error));
            }
            assert_eq!(srq.outstanding(), posted, "{name}");
            send_from(&sender_a, &cq_a, &pd, 1, EACH, name);
            send_from(&sender_b, &cq_b, &pd, 2, EACH, name);
            // Each receiver also sends one message back: the plain QP raw,
            // the OwnedQp with owned memory. Their completions are sends on
            // the shared receive CQ, not the SRQ's.
            let mut back = anon(SLOT);
            let back_mr = fresh_mr(&pd, &mut back, RW_READ);
            let bs = sge(back.as_ptr() as u64, SLOT, &back_mr);
            // SAFETY: `back` stays mapped, registered and unread until the
            // receive's completion below.
            unsafe {
                sender_a.post_recv(&[RecvWr {
                    wr_id: 77,
                    sges: &bs,
                }])
            }
            .unwrap();
            // SAFETY: `raw` is not written until the send's completion.
            unsafe { plain.post_send(&[signalled(7, SendOp::Send { imm: None }, &s)]) }
                .unwrap_or_else(|e| panic!("{name}: the plain receiver's send: {e}"));
            let back_wc = wait_one(&cq_a, &format!("{name}: the message back"));
            assert!(
                back_wc.is_success() && back_wc.wr_id() == 77,
                "{name}: {back_wc:?}"
            );

            let done = poll_srq(&srq, 2 * usize::from(EACH), name);
            let mut seen = Vec::new();
            for c in done {
                assert!(c.is_recv, "{name}");
                let wc = *c.completion().expect("a receive's own completion");
                assert!(wc.is_success(), "{name}: {wc:?}");
                assert_eq!(wc.byte_len() as usize, SLOT, "{name}: {wc:?}");
                let (wr_id, qpn) = (c.wr_id, wc.qp_num());
                assert_eq!(
                    wc.wr_id(),
                    wr_id,
                    "{name}: the caller's id in the completion"
                );
                let memory = c.into_memory().expect("the buffer");
                let bytes = memory.buffer().to_vec();
                let (sender, seq) = (bytes[0], bytes[1]);
                let expect_qpn = if sender == 1 {
                    plain.qp_num()
                } else {
                    owned.qp_num()
                };
                assert_eq!(
                    qpn, expect_qpn,
                    "{name}: sender {sender}'s message arrived on its peer"
                );
                assert_eq!(
                    bytes,
                    message(sender, seq),
                    "{name}: the buffer holds its message"
                );
                seen.push((sender, seq, wr_id));
            }
            // The SRQ's requests are taken oldest first, and each peer's
            // messages arrive in order.
            seen.sort();
            let ids: Vec<u64> = seen.iter().map(|s| s.2).collect();
            let expect: Vec<(u8, u8)> = (1..=2)
                .flat_map(|s| (0..EACH).map(move |q| (s, q)))
                .collect();
            assert_eq!(
                seen.iter().map(|s| (s.0, s.1)).collect::<Vec<_>>(),
                expect,
                "{name}"
            );
            assert!(
                ids[..3].windows(2).all(|w| w[0] < w[1])
                    && ids[3..].windows(2).all(|w| w[0] < w[1]),
                "{name}: {seen:?}"
            );
            assert_eq!(srq.outstanding(), 2, "{name}: two buffers still posted");

            // The plain poll of the receive CQ saw the plain QP's send only.
            let mut out = [WorkCompletion::default(); 16];
            let n = rcq.poll(&mut out).unwrap();
            assert_eq!(n, 1, "{name}: plain poll: {:?}", &out[..n]);
            assert!(
                out[0].wr_id() == 7 && out[0].qp_num() == plain.qp_num(),
                "{name}: {:?}",
                out[0]
            );
            let mut none = Vec::new();
            assert_eq!(
                owned.poll(&mut none).unwrap(),
                0,
                "{name}: the OwnedQp got nothing"
            );
            assert_eq!(srq.poll(&mut none).unwrap(), 0, "{name}: nothing more");

            drop((plain, owned, sender_a, sender_b, link_a, link_b));
            let left = srq
                .destroy()
                .unwrap_or_else(|e| panic!("{name}: destroy: {}", e.error));
            assert_eq!(left.len(), 2, "{name}");
            assert!(
                left.iter().all(|c| matches!(c.ended, Ended::Destroyed)),
                "{name}"
            );
            drop((raw_mr, back_mr, rcq, cq_a, cq_b, pd));
        },
    );
}

/// A receive buffer that counts its drops.
struct Counted {
    bytes: Vec<u8>,
    drops: Arc<AtomicUsize>,
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.drops.fetch_add(1, Ordering::SeqCst);
    }
}

// SAFETY: the bytes are a Vec's heap allocation, reached only through this
// value and never resized: they stay at one address while it lives, moved
// or not.
unsafe impl StableBuffer for Counted {
    fn as_mut_ptr(&mut self) -> *mut u8 {
        self.bytes.as_mut_ptr()
    }
    fn len(&self) -> usize {
        self.bytes.len()
    }
    fn as_slice(&self) -> &[u8] {
        &self.bytes
    }
    fn as_mut_slice(&mut self) -> &mut [u8] {
        &mut self.bytes
    }
}

#[test]
fn the_owners_buffers_outlive_it_until_the_srq_is_gone() {
    on_each_data_path_device_counted(
        "the_owners_buffers_outlive_it_until_the_srq_is_gone",
        |name, ctx, counts| {
            let pd = alloc_pd(ctx);
            let drops = Arc::new(AtomicUsize::new(0));
            let cq = ctx.create_cq(16, None).unwrap();
            let fill = |srq: &OwnedSrq<BufferMr<Counted>>| {
                for i in 0..4 {
                    let buf = Counted {
                        bytes: vec![0; SLOT],
                        drops: drops.clone(),
                    };
                    let mr = pd
                        .reg_buffer(buf, AccessFlags::LOCAL_WRITE)
                        .unwrap_or_else(|e| panic!("{name}: {}", e.error));
                    srq.post_recv(RecvRequest::new(i, Local::whole(mr)))
                        .unwrap_or_else(|e| panic!("{name}: post_recv: {}", e.error));
                }
            };

            // Dropped first: the buffers stay with the SRQ while a QP uses it.
            let srq = OwnedSrq::new(pd.create_srq(&SrqInit::new(8, 1)).unwrap()).unwrap();
            fill(&srq);
            let qp = qp_on_srq(&pd, &cq, &srq, name);
            drop(srq);
            assert_eq!(
                drops.load(Ordering::SeqCst),
                0,
                "{name}: freed while the SRQ lives"
            );
            counts.assert_extra_srq(1, "the SRQ kept by its QP");
            drop(qp);
            counts.assert_extra_srq(0, "after the last QP");
            counts.assert_extra(0, 1, "the buffers deregistered with the SRQ");
            assert_eq!(
                drops.load(Ordering::SeqCst),
                4,
                "{name}: freed with the SRQ"
            );

            // destroy: EBUSY while a QP uses it, the owner back intact.
            let srq = OwnedSrq::new(pd.create_srq(&SrqInit::new(8, 1)).unwrap()).unwrap();
            fill(&srq);
            let qp = qp_on_srq(&pd, &cq, &srq, name);
            let refused = srq.destroy().expect_err("destroy while a QP uses the SRQ");
            assert_eq!(
                refused.error.errno(),
                Some(uverbs::error::Errno::BUSY),
                "{name}: {}",
                refused.error
            );
            let srq = refused.srq;
            assert_eq!(srq.outstanding(), 4, "{name}");
            assert_eq!(
                drops.load(Ordering::SeqCst),
                4,
                "{name}: nothing freed by the refusal"
            );
            drop(qp);
            let back = srq
                .destroy()
                .unwrap_or_else(|e| panic!("{name}: destroy: {}", e.error));
            assert_eq!(back.len(), 4, "{name}");
            assert_eq!(
                drops.load(Ordering::SeqCst),
                4,
                "{name}: handed back, not freed"
            );
            drop(back);
            assert_eq!(drops.load(Ordering::SeqCst), 8, "{name}");

            // No QP ever: the drop destroys the SRQ and frees at once.
            let srq = OwnedSrq::new(pd.create_srq(&SrqInit::new(8, 1)).unwrap()).unwrap();
            fill(&srq);
            drop(srq);
            assert_eq!(drops.load(Ordering::SeqCst), 12, "{name}");
            counts.assert_extra_srq(0, "at the end");
            drop((cq, pd));
        },
    );
}
