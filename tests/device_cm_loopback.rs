//! The connection manager on rxe0, inside one host: a listener on
//! 0.0.0.0:port, a client that resolves 192.0.2.1 (an address of dummy0,
//! the netdev rxe0 and siw0 sit on), connects an RC QP, and the server
//! accepts with a QP of its own; both QPs reach RTS only through the
//! attributes `INIT_QP_ATTR` answers, a SEND proves them right, then a
//! disconnect brings both sides down. Every wait is bounded, every event is
//! accounted for, the ids report the events the channel delivered, and no
//! kernel object is left behind. siw0's QPs need its data path (the next
//! issue): skipped loudly.
//!
//! Needs `/dev/infiniband/rdma_cm` (modules ib_cm, iw_cm, rdma_cm,
//! rdma_ucm) and 192.0.2.1/24 on dummy0: with `UVERBS_REQUIRE_DEVICES` set
//! their absence fails the test, otherwise it is skipped loudly.

mod common;

use std::time::Duration;

use common::cm::*;
use common::*;
use uverbs::cm::{ConnParam, EventChannel, EventKind, PortSpace};
use uverbs::{Errno, RecvWr, SendOp, WcOpcode};

const WAIT: Duration = CM_WAIT;

#[test]
fn cm_connect_accept_send_disconnect_on_rxe() {
    on_each_cm_device(
        "cm_connect_accept_send_disconnect_on_rxe",
        |name, ctx, counts| {
            let pd = alloc_pd(ctx);
            let Some(pair) = cm_connected_pair(ctx, name, &pd) else {
                return;
            };
            counts.assert_extra_cq_qp(2, 2, "with two CQs and two QPs");
            assert!(
                pair.request.private_data.len() >= 15,
                "{:?}",
                pair.request.private_data
            );
            loud(&format!(
                "{name}: request private data {} bytes (the REQ's area)",
                pair.request.private_data.len()
            ));

            // A SEND over the connection the cm set up.
            let mut a_buf = anon(4096);
            let mut b_buf = anon(4096);
            let a_mr = fresh_mr(&pd, &mut a_buf, RW_READ);
            let b_mr = fresh_mr(&pd, &mut b_buf, RW_READ);
            for (i, byte) in a_buf[..64].iter_mut().enumerate() {
                *byte = 0xc0 ^ i as u8;
            }
            let recv_sge = sge(b_buf.as_ptr() as u64, 64, &b_mr);
            // SAFETY: b_buf[..64] stays mapped and registered and is not
            // touched until the receive's completion is polled below.
            unsafe {
                pair.qp_b.post_recv(&[RecvWr {
                    wr_id: 0xb0b,
                    sges: &recv_sge,
                }])
            }
            .unwrap_or_else(|e| panic!("{name}: post_recv: {e}"));
            let send_sge = sge(a_buf.as_ptr() as u64, 64, &a_mr);
            let send = signalled(0xa5e, SendOp::Send { imm: None }, &send_sge);
            // SAFETY: a_buf[..64] is only read by the device until the completion.
            unsafe { pair.qp_a.post_send(&[send]) }
                .unwrap_or_else(|e| panic!("{name}: post_send: {e}"));
            wait_checked(
                &pair.cq_a,
                "SEND, client",
                WcOpcode::Send,
                &pair.qp_a,
                0xa5e,
            );
            let wc = wait_checked(
                &pair.cq_b,
                "SEND, server",
                WcOpcode::Recv,
                &pair.qp_b,
                0xb0b,
            );
            assert_eq!(wc.byte_len, 64);
            assert_eq!(&b_buf[..64], &a_buf[..64], "{name}: the SEND's bytes");
            loud(&format!(
                "{name}: SEND of 64 B over the cm connection landed"
            ));

            // The DREQ: the server hears it and answers with the DREP, and
            // only then does the client hear DISCONNECTED; then both
            // TIMEWAIT_EXITs. Address, route, response, disconnected and
            // timewait for the client; established, disconnected and
            // timewait for the server; the one request for the listener.
            let reported = disconnect_pair(pair, name);
            assert_eq!(
                reported,
                Reported {
                    client: 5,
                    server: 3,
                    listener: 1
                },
                "{name}"
            );
            drop((a_mr, b_mr, pd));
            counts.assert_extra_cq_qp(0, 0, "after dropping everything");
        },
    );
}

#[test]
fn cm_connect_where_nobody_listens_is_rejected() {
    let test = "cm_connect_where_nobody_listens_is_rejected";
    if !cm_present(test) {
        return;
    }
    let ch = EventChannel::open().unwrap();
    let port = 8000 + (std::process::id() % 1000) as u16;
    let client = match resolved_client_to(&ch, format!("{CM_ADDR}:{port}").parse().unwrap()) {
        Ok(c) => c,
        Err(why) => return cm_unavailable(test, &why),
    };
    // No QP is needed to be refused: the request carries QP number 1.
    client.connect(&ConnParam::new(1)).unwrap();
    let ev = next_event(&ch, "connect");
    match ev.kind {
        // The IB CM (rxe, which the id lands on first) rejects with reason
        // 8, invalid service id; iWARP would answer -ECONNREFUSED.
        EventKind::Rejected { reason, .. } => {
            loud(&format!("{test}: rejected, reason {reason}"));
            assert!(
                reason == 8 || reason == -Errno::CONNREFUSED.raw_os_error(),
                "{reason}"
            );
        }
        EventKind::Unreachable => loud(&format!("{test}: unreachable, {:?}", ev.errno())),
        other => panic!("{test}: {other:?}"),
    }
    // Address, route, and the answer to the connect.
    let got = client.events_received();
    assert_eq!(got, 3);
    assert_eq!(client.destroy().unwrap(), got, "the kernel's count is ours");
}

#[test]
fn cm_reject_with_private_data_and_listener_destroyed_with_a_pending_request() {
    let test = "cm_reject_with_private_data_and_listener_destroyed_with_a_pending_request";
    if !cm_present(test) {
        return;
    }
    let ch = EventChannel::open().unwrap();
    let port = 9000 + (std::process::id() % 1000) as u16;
    let listener = ch.create_id(PortSpace::Tcp).unwrap();
    listener
        .bind(format!("0.0.0.0:{port}").parse().unwrap())
        .unwrap();
    listener.listen(2).unwrap();

    // Reject with private data: the requester sees reason 28 and the bytes.
    let first = match resolved_client_to(&ch, format!("{CM_ADDR}:{port}").parse().unwrap()) {
        Ok(c) => c,
        Err(why) => return cm_unavailable(test, &why),
    };
    first.connect(&ConnParam::new(1)).unwrap();
    let ev = next_event(&ch, "listener");
    let EventKind::ConnectRequest { id: server, .. } = ev.kind else {
        panic!("{test}: {:?}", ev.kind)
    };
    server
        .reject(
            uverbs::cm::RejectReason::ConsumerDefined,
            b"busy, try later",
        )
        .unwrap();
    let ev = next_event(&ch, "first client");
    assert_eq!(ev.id, first.handle());
    let EventKind::Rejected { reason, param } = &ev.kind else {
        panic!("{test}: {:?}", ev.kind)
    };
    loud(&format!(
        "{test}: rejected, reason {reason}, {} bytes of private data",
        param.private_data().len()
    ));
    assert_eq!(*reason, 28, "IB_CM_REJ_CONSUMER_DEFINED");
    assert!(param.private_data().starts_with(b"busy, try later"));
    drop(server);

    // A second request, never read: destroying the listener discards it
    // and its new id, whose destruction rejects the requester.
    let second = resolved_client_to(&ch, format!("{CM_ADDR}:{port}").parse().unwrap()).unwrap();
    second.connect(&ConnParam::new(2)).unwrap();
    assert!(
        ch.poll_readable(WAIT).unwrap(),
        "{test}: the request arrived"
    );
    let reported = listener.destroy().unwrap();
    assert_eq!(
        reported, 1,
        "the first request only: the second was never reported"
    );
    let ev = next_event(&ch, "second client");
    assert_eq!(
        ev.id,
        second.handle(),
        "the pending request's event is gone"
    );
    loud(&format!(
        "{test}: the second requester got {} (status {})",
        ev.name(),
        ev.status
    ));
    assert!(
        matches!(ev.kind, EventKind::Rejected { reason: 28, .. }),
        "{ev:?}"
    );
    let got = (first.events_received(), second.events_received());
    assert_eq!((first.destroy().unwrap(), second.destroy().unwrap()), got);
}
