//! The connection handshakes with a queue pair, as blocking calls on a
//! [`CmId`]: [`resolve`](CmId::resolve), [`connect_qp`](CmId::connect_qp),
//! [`get_request`](CmId::get_request) and [`accept_qp`](CmId::accept_qp)
//! (librdmacm's synchronous `rdma_resolve_addr`/`_route`, `rdma_connect`,
//! `rdma_get_request`, `rdma_accept`), and [`join_group`](CmId::join_group)
//! (its synchronous `rdma_join_multicast`).
//!
//! The QP's steps around each event are here once, and the futures of
//! `uverbs::tokio::cm` take them too: only how the event is awaited
//! differs.
//!
//! RoCE/IB, active side: the QP to INIT, `CONNECT`, `CONNECT_RESPONSE`, the
//! QP to INIT again (now with the peer's resources), RTR and RTS, then
//! `establish` (the RTU). Passive side: the QP to INIT, RTR, RTS, `ACCEPT`,
//! `ESTABLISHED`. iWARP: the same commands, but the active side's answer is
//! `ESTABLISHED`, the RTS step carries no state, and the kernel's cm moves
//! each QP to RTS itself once the stream is up (learnt with
//! [`Connectable::established`]).

use std::net::SocketAddr;
use std::time::Duration;

use super::{CmError, CmId, ConnParam, Event, EventKind, Membership, Param, PeerParam, UdPeer};
use crate::command::{QpState, TransportType};
use crate::connectable::Connectable;
use crate::error::{Error, Op};

/// How much longer than the kernel's own time-out a resolve waits, so that
/// the kernel's `ADDR_ERROR`/`ROUTE_ERROR` (which says why) comes first.
const RESOLVE_SLACK: Duration = Duration::from_secs(1);

/// Moves `qp` with the attributes the cm answers for `state` (an answer
/// without a state, iWARP's RTS, is applied as it is).
fn move_qp<Q: Connectable + ?Sized>(id: &CmId, qp: &Q, state: QpState) -> Result<(), Error> {
    qp.modify(&id.init_qp_attr(state)?)
}

/// Before `CONNECT`: a QP in RESET goes to INIT (iWARP's connect looks the
/// QP up in the kernel; RoCE's request carries its number and PSN).
pub(crate) fn before_connect<Q: Connectable + ?Sized>(id: &CmId, qp: &Q) -> Result<(), Error> {
    if qp.state() == QpState::Reset {
        move_qp(id, qp, QpState::Init)?;
    }
    Ok(())
}

/// The answer to `CONNECT`: RoCE's `CONNECT_RESPONSE` (the QP to INIT, RTR,
/// RTS, then the RTU), iWARP's `ESTABLISHED` (the QP's RTS learnt); any
/// other event is the typed failure.
pub(crate) fn on_connect_answer<Q: Connectable + ?Sized>(
    id: &CmId,
    qp: &Q,
    ev: Event,
) -> Result<PeerParam, CmError> {
    match ev.kind {
        EventKind::ConnectResponse(Param::Conn(peer)) => {
            for state in [QpState::Init, QpState::Rtr, QpState::Rts] {
                move_qp(id, qp, state)?;
            }
            id.establish()?;
            Ok(peer)
        }
        EventKind::Established(Param::Conn(peer)) => {
            learn_established(qp)?;
            Ok(peer)
        }
        _ => Err(CmError::from_event(Op::CmConnect, ev)),
    }
}

/// Before `ACCEPT`: the QP through the states it has not reached yet of
/// INIT, RTR and RTS, with the request id's attributes.
pub(crate) fn before_accept<Q: Connectable + ?Sized>(id: &CmId, qp: &Q) -> Result<(), Error> {
    let steps: &[QpState] = match qp.state() {
        QpState::Reset => &[QpState::Init, QpState::Rtr, QpState::Rts],
        QpState::Init => &[QpState::Rtr, QpState::Rts],
        QpState::Rtr => &[QpState::Rts],
        _ => &[],
    };
    for &state in steps {
        move_qp(id, qp, state)?;
    }
    Ok(())
}

/// The answer to `ACCEPT`: `ESTABLISHED` (iWARP: the QP's RTS learnt), or
/// the typed failure (the requester gave up).
pub(crate) fn on_accept_answer<Q: Connectable + ?Sized>(
    qp: &Q,
    ev: Event,
) -> Result<PeerParam, CmError> {
    match ev.kind {
        EventKind::Established(Param::Conn(peer)) => {
            learn_established(qp)?;
            Ok(peer)
        }
        _ => Err(CmError::from_event(Op::CmAccept, ev)),
    }
}

/// iWARP: the kernel's cm moved the QP to RTS; the QP learns it.
fn learn_established<Q: Connectable + ?Sized>(qp: &Q) -> Result<(), Error> {
    if qp.transport_type() == TransportType::Iwarp {
        qp.established()?;
    }
    Ok(())
}

/// `ev` is `expected` (of operation `op`), or the typed failure.
pub(crate) fn expect_event(
    op: Op,
    ev: Event,
    expected: fn(&EventKind) -> bool,
) -> Result<(), CmError> {
    if expected(&ev.kind) {
        Ok(())
    } else {
        Err(CmError::from_event(op, ev))
    }
}

/// The kernel's time-out in milliseconds (saturating).
pub(crate) fn millis(timeout: Duration) -> u32 {
    u32::try_from(timeout.as_millis()).unwrap_or(u32::MAX)
}

/// Blocking handshakes. Each reads the id's channel for the next event,
/// waiting at most the `timeout` given ([`CmError::TimedOut`] after it);
/// the channel must carry only this id's events meanwhile (an event of
/// another id is [`CmError::Unexpected`] and is lost): give each side of a
/// connection its own [`EventChannel`](super::EventChannel), as
/// librdmacm's synchronous ids have. Run the two sides of a loopback on
/// two threads: each call returns only when its side is done.
///
/// ```no_run
/// use std::time::Duration;
/// use uverbs::cm::{ConnParam, EventChannel, PortSpace};
/// use uverbs::{ProtectionDomain, QpInit, QpType};
///
/// # fn f(pd: &ProtectionDomain, cq: &uverbs::CompletionQueue) -> Result<(), Box<dyn std::error::Error>> {
/// let wait = Duration::from_secs(5);
/// let id = EventChannel::open()?.create_id(PortSpace::Tcp)?;
/// id.resolve(None, "192.0.2.1:7471".parse()?, wait)?;
/// // A QP of the device the route goes through (`id.device()`).
/// let qp = pd.create_qp(&QpInit::new(QpType::Rc, cq, cq))?;
/// let peer = id.connect_qp(&qp, &ConnParam::new(qp.qp_num()), wait)?;
/// println!("connected to QP {:#x}", peer.qp_num);
/// # Ok(()) }
/// ```
impl CmId {
    /// The next event of this id's channel, which must be this id's.
    fn wait_own(&self, op: Op, timeout: Duration) -> Result<Event, CmError> {
        self.wait_for(self.uid(), op, timeout)
    }

    /// The next event of this id's channel, which must carry `uid` (the
    /// id's, or one of its multicast memberships').
    fn wait_for(&self, uid: u64, op: Op, timeout: Duration) -> Result<Event, CmError> {
        let ev = self.channel().wait_event(timeout)?;
        let ev = ev.ok_or(CmError::TimedOut {
            op,
            waited: timeout,
        })?;
        if ev.uid != uid {
            return Err(CmError::Unexpected {
                op,
                event: ev.name(),
                status: ev.status,
            });
        }
        Ok(ev)
    }

    /// Joins `group` ([`join_multicast`](Self::join_multicast)) and waits up
    /// to `timeout` for the membership's `MULTICAST_JOIN`: the group's
    /// address vector, Q_Key and QP number, for
    /// [`attach_mcast`](crate::QueuePair::attach_mcast) and
    /// [`create_ah`](crate::ProtectionDomain::create_ah). `MULTICAST_ERROR`
    /// is [`CmError::Failed`] with the kernel's errno. On any failure after
    /// the join was sent, the group is left again: no membership remains.
    #[doc(alias = "rdma_join_multicast")]
    pub fn join_group(
        &self,
        group: SocketAddr,
        send_only: bool,
        timeout: Duration,
    ) -> Result<(Membership, UdPeer), CmError> {
        let member = self.join_multicast(group, send_only)?;
        let joined = self
            .wait_for(member.uid(), Op::CmJoinMulticast, timeout)
            .and_then(|ev| match ev.kind {
                EventKind::MulticastJoin(peer) => Ok(peer),
                _ => Err(CmError::from_event(Op::CmJoinMulticast, ev)),
            });
        match joined {
            Ok(peer) => Ok((member, peer)),
            Err(e) => {
                // Best effort: the error that ended the wait is the one
                // worth reporting.
                let _ = self.leave_multicast(group);
                Err(e)
            }
        }
    }

    /// Resolves the address (`RESOLVE_ADDR`, from `src` when given) and the
    /// route (`RESOLVE_ROUTE`) to `dst`, giving the kernel `timeout` for
    /// each; returns once `ROUTE_RESOLVED` came. `ADDR_ERROR` and
    /// `ROUTE_ERROR` are [`CmError::Failed`] with the kernel's errno.
    #[doc(alias = "rdma_resolve_addr")]
    #[doc(alias = "rdma_resolve_route")]
    pub fn resolve(
        &self,
        src: Option<SocketAddr>,
        dst: SocketAddr,
        timeout: Duration,
    ) -> Result<(), CmError> {
        let wait = timeout + RESOLVE_SLACK;
        self.resolve_addr(src, dst, millis(timeout))?;
        let ev = self.wait_own(Op::CmResolveAddr, wait)?;
        expect_event(Op::CmResolveAddr, ev, |k| {
            matches!(k, EventKind::AddrResolved)
        })?;
        self.resolve_route(millis(timeout))?;
        let ev = self.wait_own(Op::CmResolveRoute, wait)?;
        expect_event(Op::CmResolveRoute, ev, |k| {
            matches!(k, EventKind::RouteResolved)
        })
    }

    /// Connects `qp` (RC, on the id's device, in RESET or INIT) with
    /// `param` (its [`ConnParam::new`] number is `qp`'s), and returns what
    /// the peer accepted with; `qp` is in RTS. The steps are in the module
    /// docs of [`crate::cm`]'s handshakes.
    ///
    /// `REJECTED` is [`CmError::Rejected`]; `UNREACHABLE` and
    /// `CONNECT_ERROR` are [`CmError::Failed`]. RoCE's IB CM retries an
    /// unanswered request for over a minute: `timeout` bounds the wait here.
    #[doc(alias = "rdma_connect")]
    #[doc(alias = "rdma_establish")]
    pub fn connect_qp<Q: Connectable + ?Sized>(
        &self,
        qp: &Q,
        param: &ConnParam,
        timeout: Duration,
    ) -> Result<PeerParam, CmError> {
        before_connect(self, qp)?;
        self.connect(param)?;
        let ev = self.wait_own(Op::CmConnect, timeout)?;
        on_connect_answer(self, qp, ev)
    }

    /// On a listening id: the next connection request, as a new id (accept
    /// it with [`accept_qp`](Self::accept_qp), or reject or drop it) and the
    /// requester's parameters.
    #[doc(alias = "rdma_get_request")]
    pub fn get_request(&self, timeout: Duration) -> Result<(CmId, Param), CmError> {
        let ev = self.wait_own(Op::CmListen, timeout)?;
        match ev.kind {
            EventKind::ConnectRequest { id, param } => Ok((id, param)),
            _ => Err(CmError::from_event(Op::CmListen, ev)),
        }
    }

    /// On a request's id: takes `qp` (RC, on the request's device) to RTS
    /// with the cm's attributes, accepts with `param`, and returns once
    /// `ESTABLISHED` came, with what it carried.
    #[doc(alias = "rdma_accept")]
    pub fn accept_qp<Q: Connectable + ?Sized>(
        &self,
        qp: &Q,
        param: &ConnParam,
        timeout: Duration,
    ) -> Result<PeerParam, CmError> {
        before_accept(self, qp)?;
        self.accept(param)?;
        let ev = self.wait_own(Op::CmAccept, timeout)?;
        on_accept_answer(qp, ev)
    }
}
