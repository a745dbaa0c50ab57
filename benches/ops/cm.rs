//! Connecting the two QPs of a run on an iWARP device (siw), where a QP
//! reaches RTS only through the connection manager: the steps of
//! tests/common/rc.rs's `cm_connect`, over this crate's rdma_cm
//! (`uverbs::cm`), for either implementation's QPs (the cm needs only
//! their numbers; each side moves its QP with what `INIT_QP_ATTR`
//! answers, through the [`CmQp`] it is given).
//!
//! A is the client (the active side, which sends first: siw takes data
//! right behind the passive side's MPA reply for a protocol violation), B
//! the server. A listener on `0.0.0.0:<a free port>`; A's id resolves
//! `addr:port`, A goes to INIT, connects; B's id comes with the request, B
//! goes to INIT, RTR and gets the stateless RTS answer, accepts; both
//! sides hear ESTABLISHED, and the kernel has moved both QPs to RTS.

use std::net::SocketAddr;
use std::time::Duration;

use uverbs::cm::{CmId, ConnParam, Event, EventChannel, EventKind, PortSpace};
use uverbs::qp::{QpAttr, QpState};

/// The longest any cm event is waited for.
const CM_WAIT: Duration = Duration::from_secs(10);
/// Address and route resolution time-outs handed to the kernel (ms).
const RESOLVE_MS: u32 = 2000;

/// One side's QP as the cm connection needs it.
pub trait CmQp {
    /// The QP's number, for the connect request and the accept.
    fn qp_num(&self) -> u32;
    /// Applies the cm's answer for `state` (an RTS answer on iWARP has no
    /// state: PORT alone).
    fn modify(&self, state: QpState, attr: &QpAttr) -> Result<(), String>;
}

/// The cm ids and channels of one connection. Drop it after the QPs:
/// destroying the ids tears the connection down.
pub struct Link {
    _client: CmId,
    _server: CmId,
    _listener: CmId,
    _ch_a: EventChannel,
    _ch_b: EventChannel,
}

/// The next event on `ch` within [`CM_WAIT`].
fn next(ch: &EventChannel, what: &str) -> Result<Event, String> {
    ch.wait_event(CM_WAIT)
        .map_err(|e| format!("cm: {what}: {e}"))?
        .ok_or_else(|| format!("cm: {what}: no event within {CM_WAIT:?}"))
}

fn unexpected(what: &str, ev: &Event) -> String {
    format!("cm: {what}: {} (status {})", ev.name(), ev.status)
}

/// Moves `qp` to `state` with the cm's answer for `id`.
fn step(id: &CmId, qp: &dyn CmQp, state: QpState, what: &str) -> Result<(), String> {
    let attr = id
        .init_qp_attr(state)
        .map_err(|e| format!("cm: {what}: init_qp_attr({state:?}): {e}"))?;
    qp.modify(state, &attr)
        .map_err(|e| format!("cm: {what}: to {state:?}: {e}"))
}

/// Connects RESET QPs `a` (client) and `b` (server) through the cm at
/// `addr` (an address of the device's netdev).
pub fn connect(addr: &str, a: &dyn CmQp, b: &dyn CmQp) -> Result<Link, String> {
    let ip: std::net::IpAddr = addr
        .parse()
        .map_err(|_| format!("cm: {addr:?} is not an IP address"))?;
    let ch_b = EventChannel::open().map_err(|e| format!("cm: opening rdma_cm: {e}"))?;
    let listener = ch_b
        .create_id(PortSpace::Tcp)
        .map_err(|e| format!("cm: create_id (listener): {e}"))?;
    let any: SocketAddr = "0.0.0.0:0".parse().expect("an address");
    listener
        .bind(any)
        .map_err(|e| format!("cm: bind {any}: {e}"))?;
    listener.listen(1).map_err(|e| format!("cm: listen: {e}"))?;
    let port = listener
        .query_addr()
        .map_err(|e| format!("cm: query_addr (listener): {e}"))?
        .src
        .map_or(0, |a| a.port());
    if port == 0 {
        return Err("cm: the kernel gave the listener no port".into());
    }
    let dst = SocketAddr::new(ip, port);
    let ch_a = EventChannel::open().map_err(|e| format!("cm: opening rdma_cm: {e}"))?;
    let client = ch_a
        .create_id(PortSpace::Tcp)
        .map_err(|e| format!("cm: create_id (client): {e}"))?;
    client
        .resolve_addr(None, dst, RESOLVE_MS)
        .map_err(|e| format!("cm: resolve_addr {dst}: {e}"))?;
    let ev = next(&ch_a, "resolve_addr")?;
    if !matches!(ev.kind, EventKind::AddrResolved) {
        return Err(unexpected(&format!("resolve_addr {dst}"), &ev));
    }
    client
        .resolve_route(RESOLVE_MS)
        .map_err(|e| format!("cm: resolve_route {dst}: {e}"))?;
    let ev = next(&ch_a, "resolve_route")?;
    if !matches!(ev.kind, EventKind::RouteResolved) {
        return Err(unexpected(&format!("resolve_route {dst}"), &ev));
    }
    step(&client, a, QpState::Init, "client RESET->INIT")?;
    client
        .connect(&ConnParam::new(a.qp_num()))
        .map_err(|e| format!("cm: connect to {dst}: {e}"))?;
    let ev = next(&ch_b, "the connect request")?;
    let EventKind::ConnectRequest { id: server, .. } = ev.kind else {
        return Err(unexpected("the listener", &ev));
    };
    step(&server, b, QpState::Init, "server RESET->INIT")?;
    step(&server, b, QpState::Rtr, "server INIT->RTR")?;
    step(&server, b, QpState::Rts, "server RTR->RTS")?;
    server
        .accept(&ConnParam::new(b.qp_num()))
        .map_err(|e| format!("cm: accept: {e}"))?;
    for (ch, side) in [(&ch_a, "client"), (&ch_b, "server")] {
        let ev = next(ch, &format!("{side} established"))?;
        if !matches!(ev.kind, EventKind::Established(_)) {
            return Err(unexpected(&format!("{side} established"), &ev));
        }
    }
    Ok(Link {
        _client: client,
        _server: server,
        _listener: listener,
        _ch_a: ch_a,
        _ch_b: ch_b,
    })
}
