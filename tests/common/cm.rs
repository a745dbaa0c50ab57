//! Connection-manager fixtures: an RC connection set up by the rdma_cm
//! (`uverbs::cm`) inside one host, over the device's own address in the VM
//! guest ([`cm_addr`]: 192.0.2.1 on dummy0 for rxe0, 198.51.100.1 on
//! dummy1 for siw0), and its orderly teardown.
//!
//! [`cm_connected_pair`] makes a listener on `0.0.0.0:<free port>` and a
//! client that resolves that address, each with an event channel of its own
//! (so each side's events arrive in order); A (the client, active side) and
//! B (the server, passive side) each get an RC QP and a CQ in the caller's
//! PD, moved to RTS with the attributes `INIT_QP_ATTR` answers and nothing
//! else, in librdmacm's order (the client's QP goes to INIT before the
//! connect and again, INIT -> INIT, once the response came: only then does
//! the cm grant it remote access). [`disconnect_pair`] takes it down and
//! accounts for every event. Every wait is bounded ([`CM_WAIT`]).
//!
//! On iWARP (siw) the kernel's CM drives the QP itself: the client's QP
//! goes to INIT before the connect and nothing more; the server's gets
//! INIT, RTR and an RTS answer without a state (PORT alone); both sides
//! hear ESTABLISHED (there is no CONNECT_RESPONSE), the kernel moves both
//! QPs to RTS (learnt with `refresh_state`), the cm carries no QP numbers,
//! and a disconnect ends in one DISCONNECTED per side without TIMEWAIT_EXIT.
//!
//! The device is a parameter: [`on_each_cm_device`] runs a body on rxe0 and
//! siw0.

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use uverbs::cm::{CmId, ConnParam, Event, EventChannel, EventKind, Param, PortSpace, UdPeer};
use uverbs::cq::CompletionChannel;
use uverbs::device::TransportType;
use uverbs::error::Errno;
use uverbs::qp::QpState;
use uverbs::{CompletionQueue, Context, ProtectionDomain, QpInit, QpType, QueuePair};

use super::devices::{driver, loud, on_each_device, required_prefixes, Driver, HandleCounts};
use super::rc::modify;

/// The address a client reaches rxe0 by: dummy0's in the guest.
pub const CM_ADDR: &str = "192.0.2.1";
/// The address a client reaches siw0 by: dummy1's in the guest (a device
/// of its own netdev: the cm gives an id the first device with its source
/// address, so siw0 beside rxe0 on dummy0 would be unreachable).
pub const SIW_CM_ADDR: &str = "198.51.100.1";

/// The address whose cm ids land on `ctx`'s device in the VM guest.
pub fn cm_addr(ctx: &Context) -> &'static str {
    match driver(ctx) {
        Driver::Siw => SIW_CM_ADDR,
        _ => CM_ADDR,
    }
}
/// The longest any cm event is waited for.
pub const CM_WAIT: Duration = Duration::from_secs(10);
/// Address and route resolution time-outs handed to the kernel (ms).
pub const RESOLVE_MS: u32 = 2000;

/// Skips loudly, or fails under `UVERBS_REQUIRE_DEVICES` (the VM sets it:
/// there the cm and 192.0.2.1 must be there).
pub fn cm_unavailable(test: &str, why: &str) {
    if required_prefixes().is_some() {
        panic!("{test}: {why} (UVERBS_REQUIRE_DEVICES is set)");
    }
    loud(&format!("SKIPPED: {test}: {why}"));
}

/// True when `/dev/infiniband/rdma_cm` exists; otherwise [`cm_unavailable`].
pub fn cm_present(test: &str) -> bool {
    let there = Path::new(uverbs::cm::RDMA_CM_PATH).exists();
    if !there {
        cm_unavailable(test, "no /dev/infiniband/rdma_cm (load rdma_ucm)");
    }
    there
}

/// [`on_each_device`] for the devices the cm fixtures connect, rxe and
/// siw; anything else is noted and skipped. Nothing runs without the
/// rdma_cm device.
pub fn on_each_cm_device(test: &str, mut body: impl FnMut(&str, &Context, &HandleCounts)) {
    if !cm_present(test) {
        return;
    }
    on_each_device(test, |name, dut, counts| match driver(&dut) {
        Driver::Rxe | Driver::Siw => body(name, &dut, counts),
        _ => loud(&format!("NOTE: {test}: {name}: not rxe or siw: skipped")),
    });
}

/// [`on_each_cm_device`] with a body per driver: `rxe(name, ctx, counts)`
/// on rxe, `siw(name, ctx)` on siw (where the test checks what iWARP
/// refuses); any other device is noted and skipped.
pub fn on_rxe_and_siw(
    test: &str,
    mut rxe: impl FnMut(&str, &Context, &HandleCounts),
    mut siw: impl FnMut(&str, &Context),
) {
    on_each_cm_device(test, |name, ctx, counts| match driver(ctx) {
        Driver::Rxe => rxe(name, ctx, counts),
        Driver::Siw => siw(name, ctx),
        Driver::Other => loud(&format!("NOTE: {test}: {name}: not rxe or siw")),
    });
}

/// A UDP id on a channel of its own, bound to `local`.
pub fn bound_udp_id(local: SocketAddr, what: &str) -> CmId {
    let ch = EventChannel::open().unwrap_or_else(|e| panic!("{what}: open: {e}"));
    let id = ch
        .create_id(PortSpace::Udp)
        .unwrap_or_else(|e| panic!("{what}: create_id: {e}"));
    id.bind(local)
        .unwrap_or_else(|e| panic!("{what}: bind {local}: {e}"));
    id
}

/// A [`bound_udp_id`] that has joined `group` (send-only or not), and the
/// group's parameters from its `MULTICAST_JOIN` event (printed), which
/// must be the membership's.
pub fn join_group(
    local: SocketAddr,
    group: SocketAddr,
    send_only: bool,
    what: &str,
) -> (CmId, UdPeer) {
    let id = bound_udp_id(local, what);
    let (_, joined) = id
        .join_group(group, send_only, CM_WAIT)
        .unwrap_or_else(|e| panic!("{what}: join_group {group} (send-only {send_only}): {e}"));
    let av = joined.to_ah_attr();
    loud(&format!(
        "{what}: joined {group} (send-only {send_only}): qp_num {:#x} qkey {:#x} dgid {} dlid {:#x} sgid_index {} port {}",
        joined.qp_num, joined.qkey, av.dgid, av.dlid, av.sgid_index, av.port
    ));
    (id, joined)
}

/// The next event on `ch` within [`CM_WAIT`], printed; fails the test
/// without one.
pub fn next_event(ch: &EventChannel, what: &str) -> Event {
    match ch.wait_event(CM_WAIT) {
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
        Ok(None) => panic!("{what}: no cm event within {CM_WAIT:?}"),
        Err(e) => panic!("{what}: {e}"),
    }
}

/// Fails if an event arrives on `ch` within `quiet`.
pub fn assert_no_event(ch: &EventChannel, quiet: Duration, what: &str) {
    if let Some(ev) = ch
        .wait_event(quiet)
        .unwrap_or_else(|e| panic!("{what}: {e}"))
    {
        panic!("{what}: an unexpected cm event within {quiet:?}: {ev:?}");
    }
}

/// Moves `qp` to `state` with exactly the attributes the cm answers for
/// `id`. An answer without a state (iWARP's RTS: PORT alone) is applied
/// and leaves the QP where it was.
pub fn cm_modify(id: &CmId, qp: &QueuePair, state: QpState, what: &str) {
    let attr = id
        .init_qp_attr(state)
        .unwrap_or_else(|e| panic!("{what}: init_qp_attr({state:?}): {e}"));
    loud(&format!("{what}: INIT_QP_ATTR {state:?}: {attr:?}"));
    if attr.target_state().is_some() {
        modify(qp, &attr, what);
    } else {
        let before = qp.state();
        qp.modify(&attr)
            .unwrap_or_else(|e| panic!("{what}: modify {:?}: {e}", attr.mask()));
        assert_eq!(qp.state(), before, "{what}: an answer without a state");
    }
}

/// True on an iWARP QP, where the kernel's CM drives the QP (module docs).
pub fn is_iwarp(qp: &QueuePair) -> bool {
    qp.transport_type() == TransportType::Iwarp
}

/// True when the id's source GID is in `ctx`'s GID table and its node GUID
/// is `ctx`'s: the id landed on this RoCE device (rxe0 and siw0 share a
/// node GUID; the GIDs tell them apart).
pub fn landed_on(id: &CmId, ctx: &Context) -> bool {
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

/// A listener on `0.0.0.0:<a free port>` (the kernel picks it), on a new
/// channel; and the port.
pub fn cm_listener(backlog: u32) -> (EventChannel, CmId, u16) {
    cm_listener_on("0.0.0.0:0".parse().unwrap(), backlog)
}

/// A listener bound to `addr` (port 0: the kernel picks one), on a new
/// channel; and the port it listens on.
pub fn cm_listener_on(addr: SocketAddr, backlog: u32) -> (EventChannel, CmId, u16) {
    let ch = EventChannel::open().unwrap_or_else(|e| panic!("open rdma_cm: {e}"));
    let listener = ch.create_id(PortSpace::Tcp).unwrap();
    listener
        .bind(addr)
        .unwrap_or_else(|e| panic!("listener bind {addr}: {e}"));
    listener
        .listen(backlog)
        .unwrap_or_else(|e| panic!("listen: {e}"));
    let port = listener
        .query_addr()
        .unwrap_or_else(|e| panic!("listener query_addr: {e}"))
        .src
        .map_or(0, |a| a.port());
    assert_ne!(port, 0, "the kernel picked no port for the listener");
    (ch, listener, port)
}

/// A client id on `ch` whose address and route to [`cm_addr`]`(ctx):port`
/// are resolved, or why the environment cannot (the address is not
/// configured).
pub fn resolved_client(ch: &EventChannel, ctx: &Context, port: u16) -> Result<CmId, String> {
    resolved_client_to(ch, format!("{}:{port}", cm_addr(ctx)).parse().unwrap())
}

/// A channel of its own and a client id on it, resolved towards
/// [`cm_addr`]`(ctx):port` ([`resolved_client`]) and on `ctx`'s device;
/// `None` (skipped loudly, [`cm_unavailable`]) where the address is not
/// there.
pub fn client_on(ctx: &Context, name: &str, port: u16) -> Option<(EventChannel, CmId)> {
    let ch = EventChannel::open().unwrap_or_else(|e| panic!("{name}: open rdma_cm: {e}"));
    let client = match resolved_client(&ch, ctx, port) {
        Ok(c) => c,
        Err(why) => {
            cm_unavailable(name, &why);
            return None;
        }
    };
    assert!(
        landed_on(&client, ctx),
        "{name}: the client's cm id is not on {name}"
    );
    Some((ch, client))
}

/// A client id on `ch` whose address and route to `dst` are resolved (the
/// kernel picks the source address), or why the environment cannot.
pub fn resolved_client_to(ch: &EventChannel, dst: SocketAddr) -> Result<CmId, String> {
    let client = ch.create_id(PortSpace::Tcp).unwrap();
    match client.resolve_addr(None, dst, RESOLVE_MS) {
        Ok(()) => {}
        Err(e) if e.errno() == Some(Errno::ADDRNOTAVAIL) => {
            return Err(format!("{} is not configured: {e}", dst.ip()))
        }
        Err(e) => panic!("resolve_addr {dst}: {e}"),
    }
    let ev = next_event(ch, "client resolve_addr");
    match ev.kind {
        EventKind::AddrResolved => {}
        EventKind::AddrError => return Err(format!("{}: ADDR_ERROR {:?}", dst.ip(), ev.errno())),
        other => panic!("resolve_addr {dst}: {other:?}"),
    }
    assert_eq!(ev.id, client.handle());
    client.resolve_route(RESOLVE_MS).unwrap();
    let ev = next_event(ch, "client resolve_route");
    assert!(matches!(ev.kind, EventKind::RouteResolved), "{ev:?}");
    Ok(client)
}

/// An RC connection the cm set up. A is the client (active side), B the
/// server (passive side). Fields drop in order: QPs, then CQs, then the cm
/// ids (each destroyed), then the channels.
pub struct CmPair {
    pub qp_a: QueuePair,
    pub qp_b: QueuePair,
    pub cq_a: CompletionQueue,
    pub cq_b: CompletionQueue,
    /// The client id (A's).
    pub client: CmId,
    /// The id the connect request made (B's).
    pub server: CmId,
    pub listener: CmId,
    /// The client's channel.
    pub ch_a: EventChannel,
    /// The listener's and the server id's channel.
    pub ch_b: EventChannel,
    /// What each side's peer sent with the request/response (on iWARP
    /// the response is what the client's ESTABLISHED carried).
    pub request: Box<uverbs::cm::PeerParam>,
    pub response: Box<uverbs::cm::PeerParam>,
    /// The QPs are iWARP ([`is_iwarp`]): the kernel's CM drives them.
    pub iwarp: bool,
}

/// How a [`cm_connected_pair_with`] connects: the two sides' connection
/// parameters (given the side's QP number), the QP capacities, and the
/// completion channel of the client's CQ, if any.
pub struct CmSetup<'a> {
    pub cqe: u32,
    pub max_send_wr: u32,
    pub client_param: &'a dyn Fn(ConnParam) -> ConnParam,
    pub server_param: &'a dyn Fn(ConnParam) -> ConnParam,
    pub client_channel: Option<&'a CompletionChannel>,
}

impl Default for CmSetup<'_> {
    fn default() -> Self {
        CmSetup {
            cqe: 32,
            max_send_wr: 16,
            client_param: &|p| p,
            server_param: &|p| p,
            client_channel: None,
        }
    }
}

/// [`cm_connected_pair_with`] with [`ConnParam::new`]'s defaults
/// (responder resources and initiator depth 1 on both sides, so the cm
/// grants both QPs REMOTE_WRITE, REMOTE_READ and REMOTE_ATOMIC).
pub fn cm_connected_pair(ctx: &Context, name: &str, pd: &ProtectionDomain) -> Option<CmPair> {
    cm_connected_pair_with(ctx, name, pd, &CmSetup::default())
}

/// Connects a new RC QP pair in `pd` on `ctx` with the cm over
/// [`cm_addr`]; `None` (after [`cm_unavailable`]) when the environment
/// lacks the address. Asserts on the way: the ids landed on `ctx`, each
/// side got the other's private data (and on RoCE the other's QP number),
/// the passive side hears ESTABLISHED (on iWARP both do), both QPs end in
/// RTS as the kernel reports it.
pub fn cm_connected_pair_with(
    ctx: &Context,
    name: &str,
    pd: &ProtectionDomain,
    setup: &CmSetup<'_>,
) -> Option<CmPair> {
    let (ch_b, listener, port) = cm_listener(4);
    let (ch_a, client) = client_on(ctx, name, port)?;

    let cq = |which: &str, channel| {
        ctx.create_cq(setup.cqe, channel)
            .unwrap_or_else(|e| panic!("{name}: create_cq {which}: {e}"))
    };
    let (cq_a, cq_b) = (cq("A", setup.client_channel), cq("B", None));
    let qp = |cq: &CompletionQueue, which: &str| {
        pd.create_qp(&QpInit::new(QpType::Rc, cq, cq).max_send_wr(setup.max_send_wr))
            .unwrap_or_else(|e| panic!("{name}: create_qp {which}: {e}"))
    };
    let (qp_a, qp_b) = (qp(&cq_a, "A"), qp(&cq_b, "B"));
    let iwarp = is_iwarp(&qp_a);
    // A side's connection parameters: its QP number and private data.
    let conn_param = |qp: &QueuePair, data: &[u8]| {
        ConnParam::new(qp.qp_num())
            .private_data(data)
            .unwrap_or_else(|e| panic!("{name}: private data {data:?}: {e}"))
    };
    // INIT (from RESET, or again on the RoCE client), RTR and RTS, each
    // with the attributes the cm gives.
    let up = |id: &CmId, qp: &QueuePair, side: &str, from: &str| {
        cm_modify(id, qp, QpState::Init, &format!("{side} {from}->INIT"));
        cm_modify(id, qp, QpState::Rtr, &format!("{side} INIT->RTR"));
        cm_modify(id, qp, QpState::Rts, &format!("{side} RTR->RTS"));
    };

    cm_modify(&client, &qp_a, QpState::Init, "client RESET->INIT");
    let hello = conn_param(&qp_a, b"uverbs-cm hello");
    client
        .connect(&(setup.client_param)(hello))
        .unwrap_or_else(|e| panic!("{name}: connect: {e}"));

    let ev = next_event(&ch_b, "listener");
    assert_eq!(
        ev.uid,
        listener.uid(),
        "a request carries the listener's uid"
    );
    let EventKind::ConnectRequest { id: server, param } = ev.kind else {
        panic!("{name}: {:?}", ev.kind)
    };
    assert_eq!(ev.id, server.handle());
    let Param::Conn(request) = param else {
        panic!("{name}: {param:?}")
    };
    // iWARP's MPA request carries no QP number: the cm reports 0.
    let want_qpn = if iwarp { 0 } else { qp_a.qp_num() };
    assert_eq!(request.qp_num, want_qpn, "the requester's QP number");
    assert!(
        request.private_data.starts_with(b"uverbs-cm hello"),
        "{name}: request private data {:?}",
        request.private_data
    );
    assert!(
        landed_on(&server, ctx),
        "{name}: the server's id is not on {name}"
    );
    // On iWARP this answer has no state: RTS comes at establishment.
    up(&server, &qp_b, "server", "RESET");
    let welcome = conn_param(&qp_b, b"welcome");
    server
        .accept(&(setup.server_param)(welcome))
        .unwrap_or_else(|e| panic!("{name}: accept: {e}"));

    // The client's half after the accept. RoCE: CONNECT_RESPONSE, then
    // INIT -> INIT (librdmacm's order: only now does the cm know the peer's
    // responder resources and grant remote access), RTR, RTS and ESTABLISH.
    // iWARP: ESTABLISHED, carrying the accept's private data.
    let ev = next_event(
        &ch_a,
        if iwarp {
            "client established"
        } else {
            "client connect"
        },
    );
    assert_eq!(ev.id, client.handle());
    let response = match (iwarp, ev.kind) {
        (false, EventKind::ConnectResponse(Param::Conn(response)))
        | (true, EventKind::Established(Param::Conn(response))) => response,
        (_, kind) => panic!("{name}: {kind:?}"),
    };
    if !iwarp {
        up(&client, &qp_a, "client", "INIT");
        client
            .establish()
            .unwrap_or_else(|e| panic!("{name}: establish: {e}"));
    }
    // The passive side hears ESTABLISHED on both (on RoCE only it:
    // cma_rep_recv reports nothing to an active side whose QP is ours).
    let ev = next_event(&ch_b, "server established");
    assert!(matches!(ev.kind, EventKind::Established(_)), "{ev:?}");
    assert_eq!((ev.id, ev.uid), (server.handle(), server.uid()));
    if iwarp {
        // The kernel has moved both QPs to RTS.
        for (qp, side) in [(&qp_a, "client"), (&qp_b, "server")] {
            let state = qp
                .established()
                .unwrap_or_else(|e| panic!("{name}: {side}: established: {e}"));
            assert_eq!(state, QpState::Rts, "{name}: {side}'s QP after ESTABLISHED");
        }
    }
    assert_eq!(
        response.qp_num,
        if iwarp { 0 } else { qp_b.qp_num() },
        "the acceptor's QP number"
    );
    assert!(
        response.private_data.starts_with(b"welcome"),
        "{name}: response private data {:?}",
        response.private_data
    );
    loud(&format!(
        "{name}: cm connection up on port {port}: QP {} (client) <-> QP {} (server)",
        qp_a.qp_num(),
        qp_b.qp_num()
    ));
    Some(CmPair {
        qp_a,
        qp_b,
        cq_a,
        cq_b,
        client,
        server,
        listener,
        ch_a,
        ch_b,
        request: Box::new(request),
        response: Box::new(response),
        iwarp,
    })
}

/// The events each id was reported, as `DESTROY_ID` answered them.
#[derive(Debug, PartialEq, Eq)]
pub struct Reported {
    pub client: u32,
    pub server: u32,
    pub listener: u32,
}

impl Reported {
    /// A RoCE connection's ids at their end (the IB CM): address, route,
    /// response, disconnected and timewait for the client; established,
    /// disconnected and timewait for the server; the one request for the
    /// listener.
    pub const ROCE: Reported = Reported {
        client: 5,
        server: 3,
        listener: 1,
    };
    /// An iWARP connection's (measured): the client hears ESTABLISHED
    /// instead of a CONNECT_RESPONSE, and neither side a TIMEWAIT_EXIT
    /// (the stream's close is all there is): address, route, established,
    /// disconnected; established, disconnected; the request.
    pub const IWARP: Reported = Reported {
        client: 4,
        server: 2,
        listener: 1,
    };
}

/// The orderly end of a [`CmPair`]: the client's DREQ, the server's
/// DISCONNECTED and DREP, the client's DISCONNECTED, both TIMEWAIT_EXITs
/// (on iWARP: one DISCONNECTED per side, no TIMEWAIT_EXIT), then nothing
/// more; each id destroyed with the kernel's count of events equal to the
/// channel's. The QPs and CQs are destroyed first.
pub fn disconnect_pair(pair: CmPair, name: &str) -> Reported {
    let (client, server) = (&pair.client, &pair.server);
    let (ch_a, ch_b) = (&pair.ch_a, &pair.ch_b);
    // The client disconnects and the server hears it, then the other way.
    for (id, side, peer_ch, peer, peer_side) in [
        (client, "client", ch_b, server, "server"),
        (server, "server", ch_a, client, "client"),
    ] {
        id.disconnect()
            .unwrap_or_else(|e| panic!("{name}: {side} disconnect: {e}"));
        let ev = next_event(peer_ch, &format!("{peer_side} disconnected"));
        assert!(matches!(ev.kind, EventKind::Disconnected), "{name}: {ev:?}");
        assert_eq!(ev.id, peer.handle(), "{name}: {peer_side} disconnected");
    }
    // iWARP has no time-wait state in the cm (cma_iw_handler reports the
    // stream's close as DISCONNECTED and nothing after it).
    let timewait = if pair.iwarp {
        &[][..]
    } else {
        &[(ch_a, client, "client"), (ch_b, server, "server")][..]
    };
    for &(ch, id, side) in timewait {
        let ev = next_event(ch, &format!("{side} timewait"));
        assert!(matches!(ev.kind, EventKind::TimewaitExit), "{name}: {ev:?}");
        assert_eq!(ev.id, id.handle());
    }
    for (ch, side) in [(ch_a, "client"), (ch_b, "server")] {
        assert_no_event(ch, Duration::from_millis(200), &format!("{name}: {side}"));
    }
    pair.destroy(name)
}

impl CmPair {
    /// Drops the QPs and CQs, then destroys the three ids as
    /// [`destroy_ids`] does; returns the counts. The channels go last.
    pub fn destroy(self, name: &str) -> Reported {
        drop((self.qp_a, self.qp_b, self.cq_a, self.cq_b));
        destroy_ids(self.client, self.server, self.listener, name)
    }
}

/// Destroys the three ids of a connection (its QPs already gone), each with
/// the kernel's count of events equal to the channel's; returns the counts.
pub fn destroy_ids(client: CmId, server: CmId, listener: CmId, name: &str) -> Reported {
    let got = Reported {
        client: client.events_received(),
        server: server.events_received(),
        listener: listener.events_received(),
    };
    let reported = Reported {
        client: client
            .destroy()
            .unwrap_or_else(|e| panic!("{name}: destroy client id: {e}")),
        server: server
            .destroy()
            .unwrap_or_else(|e| panic!("{name}: destroy server id: {e}")),
        listener: listener
            .destroy()
            .unwrap_or_else(|e| panic!("{name}: destroy listener: {e}")),
    };
    loud(&format!(
        "{name}: events reported {reported:?}, received {got:?}"
    ));
    assert_eq!(
        reported, got,
        "{name}: the kernel's counts are the channel's"
    );
    reported
}
