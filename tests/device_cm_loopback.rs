//! The connection manager inside one host, on rxe0 (over 192.0.2.1, dummy0)
//! and on siw0 (over 198.51.100.1, dummy1; `common::cm::cm_addr`): a
//! listener on 0.0.0.0:port, a client that resolves the device's address,
//! connects an RC QP, and the server accepts with a QP of its own; both QPs
//! reach RTS only through the attributes `INIT_QP_ATTR` answers (and, on
//! iWARP, the kernel's CM), a SEND proves them right, then a disconnect
//! brings both sides down. Every wait is bounded, every event is accounted
//! for, the ids report the events the channel delivered, and no kernel
//! object is left behind. Then the refusals, per transport: a connect where
//! nobody listens, a reject with private data, a listener destroyed with a
//! request pending.
//!
//! Needs `/dev/infiniband/rdma_cm` (modules ib_cm, iw_cm, rdma_cm,
//! rdma_ucm) and the guest's addresses: with `UVERBS_REQUIRE_DEVICES` set
//! their absence fails the test, otherwise it is skipped loudly.

mod common;

use std::time::Duration;

use common::cm::*;
use common::*;
use uverbs::cm::{CmId, ConnParam, EventChannel, EventKind};
use uverbs::error::Errno;
use uverbs::qp::QpState;
use uverbs::{CompletionQueue, Context, ProtectionDomain, QpInit, QpType, QueuePair};

const WAIT: Duration = CM_WAIT;

#[test]
fn cm_connect_accept_send_disconnect() {
    on_each_cm_device("cm_connect_accept_send_disconnect", |name, ctx, counts| {
        let pd = alloc_pd(ctx);
        let Some(pair) = cm_connected_pair(ctx, name, &pd) else {
            return;
        };
        counts.assert_extra_cq_qp(2, 2, "with two CQs and two QPs");
        // The IB CM hands over the REQ's whole private data area (92
        // bytes less the rdma_cm's 36-byte header); iWARP's MPA request
        // carries exactly what was sent (siw hides its MPA v2 IRD/ORD
        // words).
        let want = if pair.iwarp { 15 } else { 56 };
        assert_eq!(
            pair.request.private_data.len(),
            want,
            "{name}: {:?}",
            pair.request.private_data
        );
        loud(&format!(
            "{name}: request private data {} bytes (the REQ's area)",
            pair.request.private_data.len()
        ));

        // A SEND over the connection the cm set up.
        send_64_lands(
            &pd,
            (&pair.qp_a, &pair.cq_a),
            (&pair.qp_b, &pair.cq_b),
            0xc0,
            name,
            "the cm connection",
        );

        // RoCE: the DREQ: the server hears it and answers with the
        // DREP, and only then does the client hear DISCONNECTED; then
        // both TIMEWAIT_EXITs. The counts: `Reported::ROCE` and
        // `Reported::IWARP`.
        let iwarp = pair.iwarp;
        let reported = disconnect_pair(pair, name);
        let want = if iwarp {
            Reported::IWARP
        } else {
            Reported::ROCE
        };
        assert_eq!(reported, want, "{name}");
        drop(pd);
        counts.assert_extra_cq_qp(0, 0, "after dropping everything");
    });
}

/// A client QP in INIT for `id` on `ctx` (iWARP's connect needs a real
/// QP: `iw_cm_connect` looks its number up; the IB CM takes any number).
fn client_qp(
    ctx: &Context,
    pd: &ProtectionDomain,
    cq: &CompletionQueue,
    id: &CmId,
    what: &str,
) -> QueuePair {
    let qp = pd
        .create_qp(&QpInit::new(QpType::Rc, cq, cq))
        .unwrap_or_else(|e| panic!("{}: {what}: create_qp: {e}", ctx.device_name()));
    cm_modify(id, &qp, QpState::Init, what);
    qp
}

/// RoCE: the IB CM answers a REQ nobody listens for with a REJ, reason 8
/// (invalid service id), as a REJECTED event. iWARP: siw makes the TCP
/// connection inside the connect call (`siw_connect`: a blocking
/// `kernel_bindconnect`), the RST refuses it, and the connect call itself
/// fails with ECONNREFUSED: no event at all.
#[test]
fn cm_connect_where_nobody_listens_is_rejected() {
    let test = "cm_connect_where_nobody_listens_is_rejected";
    on_each_cm_device(test, |name, ctx, counts| {
        let ch = EventChannel::open().unwrap();
        let port = 8000 + (std::process::id() % 1000) as u16;
        let dst = format!("{}:{port}", cm_addr(ctx)).parse().unwrap();
        let client = match resolved_client_to(&ch, dst) {
            Ok(c) => c,
            Err(why) => return cm_unavailable(test, &why),
        };
        assert!(landed_on(&client, ctx), "{name}: the id is not on {name}");
        let pd = alloc_pd(ctx);
        let cq = ctx.create_cq(4, None).unwrap();
        let qp = client_qp(ctx, &pd, &cq, &client, "client RESET->INIT");
        let connected = client.connect(&ConnParam::new(qp.qp_num()));
        if is_iwarp(&qp) {
            let err = connected.expect_err("siw: a connect nobody listens to fails");
            loud(&format!("{name}: connect refused in the call: {err}"));
            assert_eq!(err.errno(), Some(Errno::CONNREFUSED), "{name}: {err}");
            assert_no_event(&ch, Duration::from_millis(500), name);
        } else {
            connected.unwrap_or_else(|e| panic!("{name}: connect: {e}"));
            let ev = next_event(&ch, "connect");
            let EventKind::Rejected { reason, .. } = ev.kind else {
                panic!("{name}: {:?}", ev.kind)
            };
            loud(&format!("{name}: rejected, reason {reason}"));
            assert_eq!(reason, 8, "{name}: IB_CM_REJ_INVALID_SERVICE_ID");
        }
        // Address, route, and (RoCE) the answer to the connect.
        let got = client.events_received();
        assert_eq!(got, if is_iwarp(&qp) { 2 } else { 3 }, "{name}");
        drop(qp);
        assert_eq!(client.destroy().unwrap(), got, "the kernel's count is ours");
        drop((cq, pd));
        counts.assert_extra_cq_qp(0, 0, "after dropping everything");
    });
}

/// A reject with private data: the requester hears REJECTED with the
/// bytes. Then a second request, never read: destroying the listener
/// discards it and its new id, whose destruction rejects the requester.
///
/// RoCE: REJECTED carries the IB CM's reason, 28 (consumer defined), and
/// the REJ's whole private data area (148 bytes). iWARP: the reject is an
/// MPA reply with the reject bit and exactly the private data; siw reports
/// it as a CONNECT_REPLY with -ECONNRESET, which the rdma_cm turns into
/// REJECTED with that status (no reason travels in MPA); the listener's
/// destruction sends an MPA reject without private data.
#[test]
fn cm_reject_with_private_data_and_listener_destroyed_with_a_pending_request() {
    let test = "cm_reject_with_private_data_and_listener_destroyed_with_a_pending_request";
    on_each_cm_device(test, |name, ctx, counts| {
        // The requesters' ids go on the listener's channel: one stream of
        // events for all three.
        let (ch, listener, port) = cm_listener(2);
        let dst = format!("{}:{port}", cm_addr(ctx)).parse().unwrap();
        let pd = alloc_pd(ctx);
        let cq = ctx.create_cq(4, None).unwrap();

        let first = match resolved_client_to(&ch, dst) {
            Ok(c) => c,
            Err(why) => return cm_unavailable(test, &why),
        };
        assert!(landed_on(&first, ctx), "{name}: the id is not on {name}");
        let qp1 = client_qp(ctx, &pd, &cq, &first, "first RESET->INIT");
        let iwarp = is_iwarp(&qp1);
        first.connect(&ConnParam::new(qp1.qp_num())).unwrap();
        let ev = next_event(&ch, "listener");
        let EventKind::ConnectRequest { id: server, .. } = ev.kind else {
            panic!("{name}: {:?}", ev.kind)
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
            panic!("{name}: {:?}", ev.kind)
        };
        let data = param.private_data();
        loud(&format!(
            "{name}: rejected, reason {reason}, {} bytes of private data",
            data.len()
        ));
        if iwarp {
            assert_eq!(
                *reason,
                -Errno::CONNRESET.raw_os_error(),
                "{name}: MPA reject"
            );
            assert_eq!(
                data, b"busy, try later",
                "{name}: exactly the MPA reject's bytes"
            );
        } else {
            assert_eq!(*reason, 28, "{name}: IB_CM_REJ_CONSUMER_DEFINED");
            assert_eq!(data.len(), 148, "{name}: the REJ's private data area");
            assert!(data.starts_with(b"busy, try later"), "{name}: {data:?}");
        }
        drop(server);

        let second = resolved_client_to(&ch, dst).unwrap();
        let qp2 = client_qp(ctx, &pd, &cq, &second, "second RESET->INIT");
        second.connect(&ConnParam::new(qp2.qp_num())).unwrap();
        assert!(
            ch.poll_readable(WAIT).unwrap(),
            "{name}: the request arrived"
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
            "{name}: the second requester got {} (status {})",
            ev.name(),
            ev.status
        ));
        let EventKind::Rejected { reason, param } = &ev.kind else {
            panic!("{name}: {ev:?}")
        };
        if iwarp {
            assert_eq!(*reason, -Errno::CONNRESET.raw_os_error(), "{name}");
            assert!(param.private_data().is_empty(), "{name}: {param:?}");
        } else {
            assert_eq!(*reason, 28, "{name}");
        }
        let got = (first.events_received(), second.events_received());
        drop((qp1, qp2));
        assert_eq!((first.destroy().unwrap(), second.destroy().unwrap()), got);
        drop((cq, pd));
        counts.assert_extra_cq_qp(0, 0, "after dropping everything");
    });
}
