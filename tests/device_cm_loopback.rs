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

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use common::*;
use uverbs::cm::{CmId, ConnParam, Event, EventChannel, EventKind, Param, PortSpace};
use uverbs::command::QpState;
use uverbs::{Context, Errno, QueuePair, RecvWr, SendOp, WcOpcode};

const WAIT: Duration = Duration::from_secs(10);
const ADDR: &str = "192.0.2.1";

/// Skips loudly, or fails under `UVERBS_REQUIRE_DEVICES`.
fn unavailable(test: &str, why: &str) {
    if required_prefixes().is_some() {
        panic!("{test}: {why} (UVERBS_REQUIRE_DEVICES is set)");
    }
    loud(&format!("SKIPPED: {test}: {why}"));
}

fn next(ch: &EventChannel, what: &str) -> Event {
    match ch.wait_event(WAIT) {
        Ok(Some(ev)) => {
            loud(&format!(
                "{what}: {} id {} uid {} status {}",
                ev.name(),
                ev.id,
                ev.uid,
                ev.status
            ));
            ev
        }
        Ok(None) => panic!("{what}: no event within {WAIT:?}"),
        Err(e) => panic!("{what}: {e}"),
    }
}

/// Moves `qp` to `state` with the attributes the cm answers for `id`.
fn cm_modify(id: &CmId, qp: &QueuePair, state: QpState, what: &str) {
    let attr = id
        .init_qp_attr(state)
        .unwrap_or_else(|e| panic!("{what}: init_qp_attr({state:?}): {e}"));
    loud(&format!(
        "{what}: INIT_QP_ATTR {state:?} mask {:?}",
        attr.mask()
    ));
    modify(qp, &attr, what);
}

/// True when the id's source GID is in `ctx`'s GID table: the id landed on
/// this RoCE device (rxe0 and siw0 share a node GUID, the GIDs differ).
fn landed_on(id: &CmId, ctx: &Context) -> bool {
    let route = id.query_route().expect("query_route");
    let sgid = route.first.sgid;
    loud(&format!(
        "{}: cm id on node GUID {:x?}, port {}, {} path(s), sgid {sgid:02x?}",
        ctx.device_name(),
        route.node_guid,
        route.port_num,
        route.paths.len()
    ));
    let guid_matches = id.is_on(ctx).expect("is_on");
    let table = ctx.query_gid_table().expect("query_gid_table");
    guid_matches && table.iter().any(|g| g.gid.raw() == sgid)
}

#[test]
fn cm_connect_accept_send_disconnect_on_rxe() {
    let test = "cm_connect_accept_send_disconnect_on_rxe";
    if !Path::new(uverbs::cm::RDMA_CM_PATH).exists() {
        return unavailable(test, "no /dev/infiniband/rdma_cm (load rdma_ucm)");
    }
    on_each_device(test, |name, dut, counts| {
        if driver(&dut) != Driver::Rxe {
            return loud(&format!(
                "NOTE: {name}: cm QPs need the data path (siw0: the next issue), or not rxe"
            ));
        }
        let ctx: &Context = &dut;
        let ch = EventChannel::open().unwrap_or_else(|e| panic!("{name}: {e}"));
        let port = 7000 + (std::process::id() % 1000) as u16;
        let server_addr: SocketAddr = format!("{ADDR}:{port}").parse().unwrap();

        let listener = ch.create_id(PortSpace::Tcp).unwrap();
        listener
            .bind(format!("0.0.0.0:{port}").parse().unwrap())
            .unwrap_or_else(|e| panic!("{name}: bind: {e}"));
        listener.listen(4).unwrap();

        let client = ch.create_id(PortSpace::Tcp).unwrap();
        match client.resolve_addr(None, server_addr, 2000) {
            Ok(()) => {}
            Err(e) if e.errno() == Some(Errno::ADDRNOTAVAIL) => {
                return unavailable(test, &format!("{ADDR} is not configured: {e}"))
            }
            Err(e) => panic!("{name}: resolve_addr: {e}"),
        }
        let ev = next(&ch, "client resolve_addr");
        match ev.kind {
            EventKind::AddrResolved => {}
            EventKind::AddrError => {
                return unavailable(test, &format!("{ADDR}: ADDR_ERROR {:?}", ev.errno()))
            }
            other => panic!("{name}: {other:?}"),
        }
        assert_eq!(ev.id, client.handle());
        client.resolve_route(2000).unwrap();
        let ev = next(&ch, "client resolve_route");
        assert!(matches!(ev.kind, EventKind::RouteResolved), "{ev:?}");
        assert!(
            landed_on(&client, ctx),
            "{name}: the client's cm id is not on {name}"
        );

        let TwoQps {
            pd,
            cq_a,
            cq_b,
            qp_a,
            qp_b,
        } = two_rc_qps(ctx, name, 16, None);
        counts.assert_extra_cq_qp(2, 2, "with two CQs and two QPs");
        cm_modify(&client, &qp_a, QpState::Init, "client RESET->INIT");
        let hello = ConnParam::new(qp_a.qp_num())
            .private_data(b"uverbs-cm hello")
            .unwrap();
        client.connect(&hello).unwrap();

        let ev = next(&ch, "listener");
        assert_eq!(
            ev.uid,
            listener.uid(),
            "the request carries the listener's uid"
        );
        let EventKind::ConnectRequest { id: server, param } = ev.kind else {
            panic!("{name}: {:?}", ev.kind)
        };
        assert_eq!(ev.id, server.handle());
        let Param::Conn(peer) = &param else {
            panic!("{param:?}")
        };
        assert_eq!(peer.qp_num, qp_a.qp_num(), "the requester's QP number");
        assert!(
            peer.private_data.starts_with(b"uverbs-cm hello"),
            "{:?}",
            peer.private_data
        );
        loud(&format!(
            "{name}: request private data {} bytes (the REQ's area)",
            peer.private_data.len()
        ));
        assert!(
            landed_on(&server, ctx),
            "{name}: the server's id is not on {name}"
        );

        cm_modify(&server, &qp_b, QpState::Init, "server RESET->INIT");
        cm_modify(&server, &qp_b, QpState::Rtr, "server INIT->RTR");
        cm_modify(&server, &qp_b, QpState::Rts, "server RTR->RTS");
        let welcome = ConnParam::new(qp_b.qp_num())
            .private_data(b"welcome")
            .unwrap();
        server.accept(&welcome).unwrap();

        let ev = next(&ch, "client connect");
        assert_eq!(ev.id, client.handle());
        let EventKind::ConnectResponse(Param::Conn(peer)) = &ev.kind else {
            panic!("{name}: {:?}", ev.kind)
        };
        assert_eq!(peer.qp_num, qp_b.qp_num(), "the acceptor's QP number");
        assert!(peer.private_data.starts_with(b"welcome"));
        cm_modify(&client, &qp_a, QpState::Rtr, "client INIT->RTR");
        cm_modify(&client, &qp_a, QpState::Rts, "client RTR->RTS");
        client.establish().unwrap();

        // Only the passive side hears ESTABLISHED (measured on rxe: the
        // kernel's cma_rep_recv sends the RTU and reports nothing to the
        // active side, whose QP is ours).
        let ev = next(&ch, "server established");
        assert!(matches!(ev.kind, EventKind::Established(_)), "{ev:?}");
        assert_eq!((ev.id, ev.uid), (server.handle(), server.uid()));

        // A SEND over the connection the cm set up.
        let mut a_buf = anon(4096);
        let mut b_buf = anon(4096);
        let a_mr = fresh_mr(&pd, &mut a_buf, RW_READ);
        let b_mr = fresh_mr(&pd, &mut b_buf, RW_READ);
        for (i, byte) in a_buf[..64].iter_mut().enumerate() {
            *byte = 0xc0 ^ i as u8;
        }
        let recv_sge = sge(b_buf.as_ptr() as u64, 64, &b_mr);
        // SAFETY: b_buf[..64] stays mapped and registered and is not touched
        // until the receive's completion is polled below.
        unsafe {
            qp_b.post_recv(&[RecvWr {
                wr_id: 0xb0b,
                sges: &recv_sge,
            }])
        }
        .unwrap_or_else(|e| panic!("{name}: post_recv: {e}"));
        let send_sge = sge(a_buf.as_ptr() as u64, 64, &a_mr);
        let send = signalled(0xa5e, SendOp::Send { imm: None }, &send_sge);
        // SAFETY: a_buf[..64] is only read by the device until the completion.
        unsafe { qp_a.post_send(&[send]) }.unwrap_or_else(|e| panic!("{name}: post_send: {e}"));
        wait_checked(&cq_a, "SEND, client", WcOpcode::Send, &qp_a, 0xa5e);
        let wc = wait_checked(&cq_b, "SEND, server", WcOpcode::Recv, &qp_b, 0xb0b);
        assert_eq!(wc.byte_len, 64);
        assert_eq!(&b_buf[..64], &a_buf[..64], "{name}: the SEND's bytes");
        loud(&format!(
            "{name}: SEND of 64 B over the cm connection landed"
        ));

        // The DREQ: the server hears it and answers with the DREP, and only
        // then does the client hear DISCONNECTED.
        client.disconnect().unwrap();
        let ev = next(&ch, "server disconnected");
        assert!(matches!(ev.kind, EventKind::Disconnected), "{ev:?}");
        assert_eq!(ev.id, server.handle());
        server.disconnect().unwrap();
        let ev = next(&ch, "client disconnected");
        assert!(matches!(ev.kind, EventKind::Disconnected), "{ev:?}");
        assert_eq!(ev.id, client.handle());
        // Drain: only TIMEWAIT_EXIT may still come (the IB CM's timewait).
        while let Some(ev) = ch.wait_event(Duration::from_millis(1500)).unwrap() {
            loud(&format!("drain: {} for id {}", ev.name(), ev.id));
            assert!(matches!(ev.kind, EventKind::TimewaitExit), "{ev:?}");
        }

        let counts_of = |id: &CmId| id.events_received();
        let (s_got, c_got, l_got) = (counts_of(&server), counts_of(&client), counts_of(&listener));
        let s_rep = server.destroy().unwrap();
        let c_rep = client.destroy().unwrap();
        let l_rep = listener.destroy().unwrap();
        loud(&format!(
            "{name}: events reported/received: server {s_rep}/{s_got}, client {c_rep}/{c_got}, listener {l_rep}/{l_got}"
        ));
        assert_eq!((s_rep, c_rep, l_rep), (s_got, c_got, l_got));
        assert_eq!(l_rep, 1, "the listener had one connect request");

        drop((qp_a, qp_b, a_mr, b_mr, cq_a, cq_b, pd));
        counts.assert_extra_cq_qp(0, 0, "after dropping everything");
    });
}

#[test]
fn cm_connect_where_nobody_listens_is_rejected() {
    let test = "cm_connect_where_nobody_listens_is_rejected";
    if !Path::new(uverbs::cm::RDMA_CM_PATH).exists() {
        return unavailable(test, "no /dev/infiniband/rdma_cm (load rdma_ucm)");
    }
    let ch = EventChannel::open().unwrap();
    let client = ch.create_id(PortSpace::Tcp).unwrap();
    let port = 8000 + (std::process::id() % 1000) as u16;
    let dst: SocketAddr = format!("{ADDR}:{port}").parse().unwrap();
    if let Err(e) = client.resolve_addr(None, dst, 2000) {
        return unavailable(test, &format!("resolve_addr {dst}: {e}"));
    }
    let ev = next(&ch, "resolve_addr");
    if !matches!(ev.kind, EventKind::AddrResolved) {
        return unavailable(test, &format!("{ADDR}: {:?} {:?}", ev.kind, ev.errno()));
    }
    client.resolve_route(2000).unwrap();
    assert!(matches!(
        next(&ch, "resolve_route").kind,
        EventKind::RouteResolved
    ));
    // No QP is needed to be refused: the request carries QP number 1.
    client.connect(&ConnParam::new(1)).unwrap();
    let ev = next(&ch, "connect");
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

/// A client whose route to 192.0.2.1:`port` is resolved, or why not.
fn resolved_client(ch: &EventChannel, port: u16) -> Result<CmId, String> {
    let client = ch.create_id(PortSpace::Tcp).unwrap();
    let dst: SocketAddr = format!("{ADDR}:{port}").parse().unwrap();
    client
        .resolve_addr(None, dst, 2000)
        .map_err(|e| format!("resolve_addr {dst}: {e}"))?;
    let ev = next(ch, "resolve_addr");
    if !matches!(ev.kind, EventKind::AddrResolved) {
        return Err(format!("{ADDR}: {:?} {:?}", ev.kind, ev.errno()));
    }
    client.resolve_route(2000).unwrap();
    let ev = next(ch, "resolve_route");
    assert!(matches!(ev.kind, EventKind::RouteResolved), "{ev:?}");
    Ok(client)
}

#[test]
fn cm_reject_with_private_data_and_listener_destroyed_with_a_pending_request() {
    let test = "cm_reject_with_private_data_and_listener_destroyed_with_a_pending_request";
    if !Path::new(uverbs::cm::RDMA_CM_PATH).exists() {
        return unavailable(test, "no /dev/infiniband/rdma_cm (load rdma_ucm)");
    }
    let ch = EventChannel::open().unwrap();
    let port = 9000 + (std::process::id() % 1000) as u16;
    let listener = ch.create_id(PortSpace::Tcp).unwrap();
    listener
        .bind(format!("0.0.0.0:{port}").parse().unwrap())
        .unwrap();
    listener.listen(2).unwrap();

    // Reject with private data: the requester sees reason 28 and the bytes.
    let first = match resolved_client(&ch, port) {
        Ok(c) => c,
        Err(why) => return unavailable(test, &why),
    };
    first.connect(&ConnParam::new(1)).unwrap();
    let ev = next(&ch, "listener");
    let EventKind::ConnectRequest { id: server, .. } = ev.kind else {
        panic!("{test}: {:?}", ev.kind)
    };
    server
        .reject(
            uverbs::cm::RejectReason::ConsumerDefined,
            b"busy, try later",
        )
        .unwrap();
    let ev = next(&ch, "first client");
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
    let second = resolved_client(&ch, port).unwrap();
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
    let ev = next(&ch, "second client");
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
