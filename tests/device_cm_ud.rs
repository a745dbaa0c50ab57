//! UD through the connection manager (`PortSpace::Udp`, librdmacm's
//! `udaddy`): on rxe0 a UDP client resolves a UDP listener's address and
//! route and connects (the IB CM's SIDR request, private data carried);
//! the listener's connect request brings a new id, whose QP takes the
//! cm's INIT attributes and RTR/RTS by hand, and its accept (the SIDR
//! reply) answers the client with `ESTABLISHED` carrying the server's QP
//! number, the Q_Key and an address vector; a SEND through an AH of that
//! vector reaches the server's posted receive from the client's QP. siw0:
//! iWARP has no UD, and the kernel refuses the connect (`EINVAL`).

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use common::cm::{cm_addr, cm_modify, next_event, on_rxe_and_siw};
use common::*;
use uverbs::cm::{
    CmId, ConnParam, EventChannel, EventKind, Param, PortSpace, MAX_UD_CONNECT_PRIVATE_DATA,
    UDP_QKEY,
};
use uverbs::error::Errno;
use uverbs::qp::{QpAttr, QpState};
use uverbs::wr::{UdDest, WcOpcode};
use uverbs::{CompletionQueue, Context, Error, ProtectionDomain, QueuePair};

/// What rxe puts in front of every UD receive (the packet's IP header).
const GRH: usize = 40;
/// The SEND's payload.
const LEN: usize = 64;
/// The client's private data in its request.
const HELLO: &[u8] = b"udaddy-like hello";

/// A UDP listener on `ctx`'s address (a port the kernel picks), on a
/// channel of its own; and its address.
fn ud_listener(ctx: &Context, name: &str) -> (CmId, SocketAddr) {
    let ch = EventChannel::open().unwrap_or_else(|e| panic!("{name}: open: {e}"));
    let listener = ch.create_id(PortSpace::Udp).unwrap();
    let local: SocketAddr = format!("{}:0", cm_addr(ctx)).parse().unwrap();
    listener
        .bind(local)
        .unwrap_or_else(|e| panic!("{name}: bind {local}: {e}"));
    listener
        .listen(1)
        .unwrap_or_else(|e| panic!("{name}: listen: {e}"));
    let at = listener.query_addr().unwrap().src.expect("a bound address");
    (listener, at)
}

/// A UDP client on a channel of its own, its address and route to `dst`
/// resolved.
fn ud_client(dst: SocketAddr, name: &str) -> CmId {
    let ch = EventChannel::open().unwrap_or_else(|e| panic!("{name}: open: {e}"));
    let client = ch.create_id(PortSpace::Udp).unwrap();
    client
        .resolve(None, dst, Duration::from_secs(2))
        .unwrap_or_else(|e| panic!("{name}: resolve {dst}: {e}"));
    client
}

/// A UD QP of `pd` on `cq`, in RTS: INIT with the attributes the cm
/// answers for `id` (its Q_Key among them), RTR and RTS by hand.
fn ud_qp_for(id: &CmId, pd: &ProtectionDomain, cq: &CompletionQueue, name: &str) -> QueuePair {
    let qp = qp_on(pd, uverbs::QpType::Ud, cq, name);
    cm_modify(id, &qp, QpState::Init, name);
    modify(&qp, &QpAttr::new().state(QpState::Rtr), "INIT->RTR");
    modify(
        &qp,
        &QpAttr::new().state(QpState::Rts).sq_psn(0),
        "RTR->RTS",
    );
    qp
}

/// rxe0: the SIDR exchange, then a SEND from the client's QP to the
/// server's through the address vector of the client's `ESTABLISHED`.
fn sidr_then_send(name: &str, ctx: &Context, counts: &HandleCounts) {
    let (listener, at) = ud_listener(ctx, name);
    let client = ud_client(at, name);
    let pd = alloc_pd(ctx);
    let [cq_c, cq_s] = [0; 2].map(|_| ctx.create_cq(8, None).unwrap());
    let qp_c = ud_qp_for(&client, &pd, &cq_c, name);
    let param = ConnParam::new(qp_c.qp_num()).private_data(HELLO).unwrap();
    client
        .connect(&param)
        .unwrap_or_else(|e| panic!("{name}: connect: {e}"));

    let ev = next_event(listener.channel(), &format!("{name}: the SIDR request"));
    assert_eq!(ev.uid, listener.uid(), "{name}");
    let EventKind::ConnectRequest { id: server, param } = ev.kind else {
        panic!("{name}: {ev:?}")
    };
    let Param::Ud(request) = param else {
        panic!("{name}: a UDP listener's request carries UD parameters: {param:?}")
    };
    loud(&format!(
        "{name}: SIDR request: qp_num {:#x} qkey {:#x} {} bytes of private data",
        request.qp_num,
        request.qkey,
        request.private_data.len()
    ));
    // The SIDR request's whole private-data area (216 bytes less the
    // kernel's 36-byte header), zero-padded; no QP number or Q_Key yet.
    let data = &request.private_data;
    assert_eq!(data.len(), MAX_UD_CONNECT_PRIVATE_DATA, "{name}");
    assert!(data.starts_with(HELLO), "{name}: {request:?}");
    assert!(data[HELLO.len()..].iter().all(|&b| b == 0), "{name}");
    assert_eq!((request.qp_num, request.qkey), (0, 0), "{name}");

    let qp_s = ud_qp_for(&server, &pd, &cq_s, name);
    let mut buf = anon(2 * 4096);
    buf[4096..4096 + LEN].copy_from_slice(&pattern(0x5d, LEN));
    let mr = fresh_mr(&pd, &mut buf, RW_READ);
    // SAFETY: buf[..GRH + LEN] stays mapped and registered until the QP is
    // destroyed, and is read only after this receive's completion.
    unsafe { post_recv_into(&qp_s, 0x51, &buf[..GRH + LEN], &mr, name) };
    server
        .accept(&ConnParam::new(qp_s.qp_num()))
        .unwrap_or_else(|e| panic!("{name}: accept: {e}"));

    let ev = next_event(client.channel(), &format!("{name}: the SIDR reply"));
    assert_eq!(ev.uid, client.uid(), "{name}");
    let EventKind::Established(Param::Ud(reply)) = ev.kind else {
        panic!("{name}: {ev:?}")
    };
    assert_eq!(
        (reply.qp_num, reply.qkey),
        (qp_s.qp_num(), UDP_QKEY),
        "{name}"
    );
    let ah = pd
        .create_ah(&reply.to_ah_attr())
        .unwrap_or_else(|e| panic!("{name}: create_ah from the reply: {e}"));
    let payload = sge(buf.as_ptr() as u64 + 4096, LEN, &mr);
    let dest = UdDest::new(&ah, reply.qp_num, reply.qkey);
    // SAFETY: buf[4096..][..LEN] is not written again and stays mapped and
    // registered while `send` is used; the AH outlives it.
    let send = unsafe { ud_sender(&qp_c, &cq_c, &payload, dest, format!("{name}: SEND")) };
    send(0xc1);
    let what = format!("{name}: the client's SEND at the server");
    let wc = wait_checked(&cq_s, &what, WcOpcode::Recv, &qp_s, 0x51);
    assert_eq!(wc.src_qp(), qp_c.qp_num(), "{what}: {wc:?}");
    assert!(
        buf[GRH..GRH + LEN] == pattern(0x5d, LEN)[..],
        "{what}: the bytes"
    );
    assert_no_event(listener.channel(), name);
    loud(&format!(
        "{name}: SIDR request and reply through the cm; the client's SEND reached QP {:#x}",
        qp_s.qp_num()
    ));

    drop(send);
    drop((ah, qp_c, qp_s, cq_c, cq_s, mr, pd));
    counts.assert_extra_cq_qp(0, 0, "after destroying the QPs");
    drop((server, client, listener));
}

/// Nothing more on `ch` for a moment (the passive side of SIDR hears no
/// `ESTABLISHED`).
fn assert_no_event(ch: &EventChannel, name: &str) {
    common::cm::assert_no_event(ch, Duration::from_millis(200), name);
}

/// siw0: a UDP id resolves, but iWARP has no UD: the kernel refuses the
/// connect, and no event follows.
fn iwarp_refuses_ud(name: &str, ctx: &Context) {
    let (listener, at) = ud_listener(ctx, name);
    let client = ud_client(at, name);
    let err = client
        .connect(&ConnParam::new(1))
        .expect_err("iWARP has no UD");
    assert!(matches!(err, Error::Os { .. }), "{name}: {err:?}");
    assert_eq!(err.errno(), Some(Errno::INVAL), "{name}: {err}");
    loud(&format!("{name}: the kernel refused a UD connect: {err}"));
    assert_no_event(listener.channel(), name);
}

#[test]
fn a_ud_client_connects_through_the_cm_and_sends() {
    let test = "a_ud_client_connects_through_the_cm_and_sends";
    on_rxe_and_siw(test, sidr_then_send, iwarp_refuses_ud);
}
