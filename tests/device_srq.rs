//! Shared receive queues on rxe0 and siw0: several RC QPs take their
//! receives from one SRQ under traffic (every message lands in a request
//! the SRQ held, its completion names the QP it arrived on), the limit
//! event fires exactly when fewer than the limit remain, the kernel refuses
//! to destroy an SRQ a QP still uses (`EBUSY`, the SRQ handed back
//! usable), and bad input gets typed refusals. The kernel's SRQ, QP, CQ,
//! MR and PD counts are back where they started after each test.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use common::*;
use uverbs::device::AsyncEventKind;
use uverbs::error::{Errno, Op};
use uverbs::qp::{SharedReceiveQueue, SrqInit};
use uverbs::wr::{PostError, RecvWr, SendOp};
use uverbs::{CompletionQueue, Error, ProtectionDomain, QpInit, QpType, QueuePair};

/// The work-request refusal inside `e`, if it is one.
fn post_error(e: &Error) -> Option<&PostError> {
    match e {
        Error::Post { why, .. } => Some(why),
        _ => None,
    }
}

/// Bytes of each message and each receive slot.
const SLOT: usize = 64;

/// A QP of `pd` on `cq` receiving from `srq`.
fn qp_on_srq(
    pd: &ProtectionDomain,
    cq: &CompletionQueue,
    srq: &SharedReceiveQueue,
    name: &str,
) -> QueuePair {
    pd.create_qp(&QpInit::new(QpType::Rc, cq, cq).srq(srq))
        .unwrap_or_else(|e| panic!("{name}: create_qp on the SRQ: {e}"))
}

/// Posts one receive of [`SLOT`] bytes per `wr_id`, the slot of wr_id `i`
/// at `addr + i * SLOT`.
fn post_slots(
    srq: &SharedReceiveQueue,
    addr: u64,
    mr: &uverbs::MemoryRegion,
    wr_ids: impl Iterator<Item = u64>,
    name: &str,
) {
    for wr_id in wr_ids {
        let s = sge(addr + wr_id * SLOT as u64, SLOT, mr);
        // SAFETY: the slot stays mapped and registered and is read only
        // after this request's completion is polled (or the SRQ is gone).
        unsafe { srq.post_recv(&[RecvWr { wr_id, sges: &s }]) }
            .unwrap_or_else(|e| panic!("{name}: post_recv to the SRQ ({wr_id}): {e}"));
    }
}

/// Sends `count` messages of [`SLOT`] bytes from `qp` (each `[sender, seq,
/// …]`), each waited for on `cq`.
fn send_messages(
    qp: &QueuePair,
    cq: &CompletionQueue,
    buf: &mut [u8],
    mr: &uverbs::MemoryRegion,
    sender: u8,
    count: u8,
    name: &str,
) {
    for seq in 0..count {
        for (i, b) in buf[..SLOT].iter_mut().enumerate() {
            *b = (i as u8) ^ sender.wrapping_mul(31) ^ seq.wrapping_mul(7);
        }
        buf[0] = sender;
        buf[1] = seq;
        let s = sge(buf.as_ptr() as u64, SLOT, mr);
        let wr_id = u64::from(sender) << 8 | u64::from(seq);
        let send = signalled(wr_id, SendOp::Send { imm: None }, &s);
        // SAFETY: buf[..SLOT] is not written until the send's completion
        // is polled just below.
        unsafe { qp.post_send(&[send]) }
            .unwrap_or_else(|e| panic!("{name}: post_send {sender}/{seq}: {e}"));
        let wc = wait_one(cq, &format!("{name}: send {sender}/{seq}"));
        assert!(wc.is_success(), "{name}: send {sender}/{seq}: {wc:?}");
        assert_eq!(wc.wr_id(), wr_id, "{name}: send completion");
    }
}

#[test]
fn several_qps_share_one_srq_under_traffic() {
    on_each_data_path_device_counted(
        "several_qps_share_one_srq_under_traffic",
        |name, ctx, counts| {
            const PAIRS: u8 = 3;
            const EACH: u8 = 4;
            let pd = alloc_pd(ctx);
            let srq = pd
                .create_srq(&SrqInit::new(32, 1))
                .unwrap_or_else(|e| panic!("{name}: create_srq: {e}"));
            let attr = srq
                .query()
                .unwrap_or_else(|e| panic!("{name}: query_srq: {e}"));
            loud(&format!(
                "{name} over {}: {srq:?}, {attr:?}",
                ctx.transport_kind()
            ));
            assert!(attr.max_wr >= 32 && attr.max_sge >= 1, "{name}: {attr:?}");
            assert_eq!(attr.max_wr, srq.max_wr(), "{name}: query vs create");
            assert_eq!(attr.srq_limit, 0, "{name}: not armed");
            counts.assert_extra_srq(1, "with one SRQ");

            let recv_cq = ctx.create_cq(64, None).unwrap();
            let send_cqs: Vec<CompletionQueue> = (0..PAIRS)
                .map(|_| ctx.create_cq(16, None).unwrap())
                .collect();
            let senders: Vec<QueuePair> = send_cqs
                .iter()
                .map(|cq| qp_on(&pd, QpType::Rc, cq, name))
                .collect();
            let receivers: Vec<QueuePair> = (0..PAIRS)
                .map(|_| qp_on_srq(&pd, &recv_cq, &srq, name))
                .collect();
            // A QP on an SRQ has no receive ring of its own.
            let mut in_buf = anon(SLOT * 64);
            let in_mr = fresh_mr(&pd, &mut in_buf, RW_READ);
            let in_addr = in_buf.as_ptr() as u64;
            let s = sge(in_addr, SLOT, &in_mr);
            // SAFETY: refused before anything is written.
            let refused = unsafe { receivers[0].post_recv(&[RecvWr { wr_id: 1, sges: &s }]) }
                .expect_err("post_recv on a QP of an SRQ");
            assert_eq!(
                post_error(&refused),
                Some(&PostError::ReceivesFromSrq),
                "{name}: {refused}"
            );
            let links: Vec<_> = senders
                .iter()
                .zip(&receivers)
                .map(|(s, r)| connect_qps(ctx, name, s, r, QP_ACCESS))
                .collect();

            let total = u64::from(PAIRS) * u64::from(EACH);
            post_slots(&srq, in_addr, &in_mr, 0..total, name);
            let mut out_buf = anon(SLOT);
            let out_mr = fresh_mr(&pd, &mut out_buf, RW_READ);
            for (i, (qp, cq)) in senders.iter().zip(&send_cqs).enumerate() {
                send_messages(qp, cq, &mut out_buf, &out_mr, i as u8, EACH, name);
            }
            let mut wcs = Vec::new();
            wait_exactly(
                &recv_cq,
                total as usize,
                &mut wcs,
                &format!("{name}: receives"),
            );
            // Every request consumed once; each message in the slot its
            // completion names, from the sender connected to the QP the
            // completion names, each sender's messages in order.
            let qpn_of_sender: BTreeMap<u32, u8> = receivers
                .iter()
                .enumerate()
                .map(|(i, r)| (r.qp_num(), i as u8))
                .collect();
            let mut used = BTreeSet::new();
            let mut next_seq = [0u8; PAIRS as usize];
            for wc in &wcs {
                assert!(wc.is_success(), "{name}: receive {wc:?}");
                assert_eq!(wc.byte_len() as usize, SLOT, "{name}: {wc:?}");
                assert!(
                    used.insert(wc.wr_id()),
                    "{name}: request {} twice",
                    wc.wr_id()
                );
                let sender = *qpn_of_sender
                    .get(&wc.qp_num())
                    .unwrap_or_else(|| panic!("{name}: completion of an unknown QP: {wc:?}"));
                let at = wc.wr_id() as usize * SLOT;
                let slot = &in_buf[at..at + SLOT];
                assert_eq!(
                    slot[0],
                    sender,
                    "{name}: slot {} from another QP",
                    wc.wr_id()
                );
                let seq = next_seq[sender as usize];
                assert_eq!(slot[1], seq, "{name}: sender {sender} out of order");
                for (i, &b) in slot.iter().enumerate().skip(2) {
                    let want = (i as u8) ^ sender.wrapping_mul(31) ^ seq.wrapping_mul(7);
                    assert_eq!(b, want, "{name}: byte {i} of slot {}", wc.wr_id());
                }
                next_seq[sender as usize] += 1;
            }
            assert_eq!(used.len() as u64, total, "{name}: requests used");
            loud(&format!(
                "{name}: {total} messages from {PAIRS} QPs landed through one SRQ of {}",
                srq.max_wr()
            ));
            drop((senders, receivers, links));
            counts.assert_extra_srq(1, "with the QPs gone");
            let events = srq
                .destroy()
                .unwrap_or_else(|e| panic!("{name}: destroy_srq: {e}"));
            assert_eq!(events, 0, "{name}: async events reported for the SRQ");
            counts.assert_extra_srq(0, "after the destroy");
        },
    );
}

/// Waits (bounded) for an async event about `srq`; fails with what else came.
fn wait_srq_event(ctx: &uverbs::Context, srq: &SharedReceiveQueue, name: &str) -> AsyncEventKind {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match ctx.try_async_event() {
            Ok(Some(event)) if event.is_about_srq(srq) => return event.kind,
            Ok(Some(other)) => loud(&format!("{name}: other async event {other:?}")),
            Ok(None) => {}
            Err(e) => panic!("{name}: try_async_event: {e}"),
        }
        assert!(
            Instant::now() < deadline,
            "{name}: no SRQ event within 10 s"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn the_limit_event_fires_once_below_the_limit() {
    on_each_data_path_device_counted(
        "the_limit_event_fires_once_below_the_limit",
        |name, ctx, _counts| {
            const POSTED: u64 = 8;
            const LIMIT: u32 = 4;
            let pd = alloc_pd(ctx);
            let srq = pd.create_srq(&SrqInit::new(16, 1)).unwrap();
            let recv_cq = ctx.create_cq(16, None).unwrap();
            let send_cq = ctx.create_cq(16, None).unwrap();
            let sender = qp_on(&pd, QpType::Rc, &send_cq, name);
            let receiver = qp_on_srq(&pd, &recv_cq, &srq, name);
            let _link = connect_qps(ctx, name, &sender, &receiver, QP_ACCESS);
            let mut in_buf = anon(SLOT * POSTED as usize);
            let in_mr = fresh_mr(&pd, &mut in_buf, RW_READ);
            post_slots(&srq, in_buf.as_ptr() as u64, &in_mr, 0..POSTED, name);
            srq.modify_limit(LIMIT)
                .unwrap_or_else(|e| panic!("{name}: modify_srq limit: {e}"));
            assert_eq!(srq.query().unwrap().srq_limit, LIMIT, "{name}: armed");
            let mut out_buf = anon(SLOT);
            let out_mr = fresh_mr(&pd, &mut out_buf, RW_READ);
            // Down to exactly LIMIT left: no event.
            let quiet = (POSTED - u64::from(LIMIT)) as u8;
            send_messages(&sender, &send_cq, &mut out_buf, &out_mr, 0, quiet, name);
            let mut wcs = Vec::new();
            wait_exactly(&recv_cq, quiet as usize, &mut wcs, name);
            std::thread::sleep(Duration::from_millis(50));
            if let Some(event) = ctx.try_async_event().unwrap() {
                panic!("{name}: {LIMIT} requests left, not fewer, yet {event:?}");
            }
            // One more: fewer than LIMIT left.
            send_messages(&sender, &send_cq, &mut out_buf, &out_mr, 1, 1, name);
            wait_exactly(&recv_cq, 1, &mut wcs, name);
            let kind = wait_srq_event(ctx, &srq, name);
            assert_eq!(kind, AsyncEventKind::SrqLimitReached, "{name}");
            // The event disarms the SRQ: the next receive raises none.
            send_messages(&sender, &send_cq, &mut out_buf, &out_mr, 2, 1, name);
            wait_exactly(&recv_cq, 1, &mut wcs, name);
            std::thread::sleep(Duration::from_millis(50));
            if let Some(event) = ctx.try_async_event().unwrap() {
                panic!("{name}: a second event after the first disarmed: {event:?}");
            }
            // rxe zeroes the limit when it fires; siw only disarms and
            // reports the limit it was given.
            let after = srq.query().unwrap().srq_limit;
            let want = match driver(ctx) {
                Driver::Siw => LIMIT,
                _ => 0,
            };
            assert_eq!(after, want, "{name}: the limit after the event");
            loud(&format!(
                "{name}: limit {LIMIT}: no event with {LIMIT} left, one event with {} left, none after; limit reads {after}",
                LIMIT - 1
            ));
        },
    );
}

#[test]
fn an_srq_in_use_is_not_destroyed() {
    on_each_data_path_device_counted("an_srq_in_use_is_not_destroyed", |name, ctx, counts| {
        let pd = alloc_pd(ctx);
        let srq = pd.create_srq(&SrqInit::new(8, 1)).unwrap();
        let cq = ctx.create_cq(8, None).unwrap();
        let qp = qp_on_srq(&pd, &cq, &srq, name);
        assert!(qp.has_srq(), "{name}");
        // An OwnedQp keys receive completions by its own ids: a QP whose
        // receives come from an SRQ is refused, and handed back.
        let not_owned = uverbs::OwnedQp::<uverbs::BufferMr<Vec<u8>>>::new(qp)
            .expect_err("an OwnedQp over a QP on an SRQ");
        assert_eq!(
            not_owned.error.op(),
            Op::PostRecv,
            "{name}: {}",
            not_owned.error
        );
        let qp = not_owned.qp;
        let refused = srq.destroy().expect_err("destroy_srq with a QP on it");
        assert_eq!(
            refused.error.errno(),
            Some(Errno::BUSY),
            "{name}: {}",
            refused.error
        );
        assert_eq!(refused.error.op(), Op::DestroySrq, "{name}");
        let srq = refused.srq;
        // Still usable.
        let mut buf = anon(SLOT);
        let mr = fresh_mr(&pd, &mut buf, RW_READ);
        post_slots(&srq, buf.as_ptr() as u64, &mr, 0..1, name);
        assert_eq!(srq.query().unwrap().max_wr, srq.max_wr(), "{name}");
        counts.assert_extra_srq(1, "after the refused destroy");
        // Dropping the SRQ first: the QP keeps it until it goes.
        drop(srq);
        counts.assert_extra_srq(1, "with the QP still on it");
        drop(qp);
        counts.assert_extra_srq(0, "after the QP");
    });
}

#[test]
fn bad_srq_input_is_refused_typed() {
    on_each_data_path_device_counted("bad_srq_input_is_refused_typed", |name, ctx, counts| {
        let pd = alloc_pd(ctx);
        let os = |r: Result<SharedReceiveQueue, Error>, what: &str| -> Errno {
            let e = r.expect_err(what);
            assert_eq!(e.op(), Op::CreateSrq, "{name}: {what}: {e}");
            e.errno().unwrap_or_else(|| panic!("{name}: {what}: {e}"))
        };
        assert_eq!(
            os(pd.create_srq(&SrqInit::new(0, 1)), "max_wr 0"),
            Errno::INVAL,
            "{name}"
        );
        let attr = ctx.query_device().unwrap();
        assert_eq!(
            os(
                pd.create_srq(&SrqInit::new(4, attr.max_srq_sge + 1)),
                "max_sge above the device's"
            ),
            Errno::INVAL,
            "{name}"
        );
        assert_eq!(
            os(
                pd.create_srq(&SrqInit::new(attr.max_srq_wr + 1, 1)),
                "max_wr above the device's"
            ),
            Errno::INVAL,
            "{name}"
        );
        counts.assert_extra_srq(0, "after the refused creates");
        let srq = pd.create_srq(&SrqInit::new(8, 1)).unwrap();
        let limit = srq
            .modify_limit(srq.max_wr() + 1)
            .expect_err("a limit above the SRQ's size");
        assert_eq!(limit.errno(), Some(Errno::INVAL), "{name}: {limit}");
        let mut buf = anon(SLOT * 2);
        let mr = fresh_mr(&pd, &mut buf, RW_READ);
        let two = [
            sge(buf.as_ptr() as u64, SLOT, &mr)[0],
            sge(buf.as_ptr() as u64 + SLOT as u64, SLOT, &mr)[0],
        ];
        let sges = &two[..(srq.max_sge() as usize + 1).min(2)];
        if srq.max_sge() < 2 {
            // SAFETY: refused before anything is written.
            let e = unsafe { srq.post_recv(&[RecvWr { wr_id: 1, sges }]) }
                .expect_err("more SGEs than the SRQ takes");
            assert!(
                matches!(post_error(&e), Some(PostError::TooManySges { .. })),
                "{name}: {e}"
            );
        }
        // Full: max_wr requests fit, one more is refused whole.
        post_slots(
            &srq,
            buf.as_ptr() as u64,
            &mr,
            (0..u64::from(srq.max_wr())).map(|_| 0),
            name,
        );
        let s = sge(buf.as_ptr() as u64, SLOT, &mr);
        // SAFETY: refused before anything is written.
        let full = unsafe { srq.post_recv(&[RecvWr { wr_id: 9, sges: &s }]) }
            .expect_err("a request beyond the SRQ's size");
        assert!(
            matches!(post_error(&full), Some(PostError::QueueFull { .. })),
            "{name}: {full}"
        );
        assert_eq!(full.op(), Op::PostSrqRecv, "{name}");
        loud(&format!(
            "{name}: max_wr 0, max_sge {} and max_wr {} refused EINVAL; limit {} EINVAL; {} requests filled it",
            attr.max_srq_sge + 1,
            attr.max_srq_wr + 1,
            srq.max_wr() + 1,
            srq.max_wr()
        ));
    });
}
