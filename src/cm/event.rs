//! Typed rdma_cm events, decoded from `GET_EVENT`'s `rdma_ucm_event_resp`.
//!
//! # Acknowledging
//!
//! The kernel has no acknowledgement: `GET_EVENT` removes the event from
//! the channel, counts it for its id (`events_reported`, answered by
//! `DESTROY_ID`) and, for a connect request, gives the listener's backlog
//! slot back at once. librdmacm's `rdma_ack_cm_event` is a user-space
//! counter that lets `rdma_destroy_id` wait for the events it handed out.
//! Here an [`Event`] is an owned copy, so there is nothing to acknowledge
//! and nothing to wait for: [`CmId::destroy`](super::CmId::destroy) returns
//! the kernel's count, and [`CmId::events_received`](super::CmId::events_received)
//! the channel's, which are equal unless events were lost. A connect
//! request owns its new [`CmId`]: dropping the event without accepting
//! destroys that id (the kernel then rejects the peer).

use uverbs_uapi as sys;
use zerocopy::FromBytes;

use super::command::PortSpace;
use super::CmId;
use crate::error::Errno;

/// The kernel's event numbers (`enum rdma_cm_event_type`,
/// `include/rdma/rdma_cm.h`; not in any UAPI header).
pub mod raw {
    /// The address resolved; the id has a device.
    pub const ADDR_RESOLVED: u32 = 0;
    /// Address resolution failed.
    pub const ADDR_ERROR: u32 = 1;
    /// The route resolved.
    pub const ROUTE_RESOLVED: u32 = 2;
    /// Route resolution failed.
    pub const ROUTE_ERROR: u32 = 3;
    /// A connection request reached a listener.
    pub const CONNECT_REQUEST: u32 = 4;
    /// The peer accepted (the QP is the user's: RTR, RTS, then establish).
    pub const CONNECT_RESPONSE: u32 = 5;
    /// Connecting failed.
    pub const CONNECT_ERROR: u32 = 6;
    /// The peer did not answer.
    pub const UNREACHABLE: u32 = 7;
    /// The peer rejected.
    pub const REJECTED: u32 = 8;
    /// The connection is up.
    pub const ESTABLISHED: u32 = 9;
    /// The connection is down.
    pub const DISCONNECTED: u32 = 10;
    /// The device went away.
    pub const DEVICE_REMOVAL: u32 = 11;
    /// Joined a multicast group.
    pub const MULTICAST_JOIN: u32 = 12;
    /// Multicast error.
    pub const MULTICAST_ERROR: u32 = 13;
    /// The bound address changed.
    pub const ADDR_CHANGE: u32 = 14;
    /// The QP left timewait: it may be reused.
    pub const TIMEWAIT_EXIT: u32 = 15;
}

/// The peer's connection parameters, as a connection event reports them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PeerParam {
    /// The peer's QP number (RC; 0 when the event does not carry it).
    pub qp_num: u32,
    /// The peer's private data. The IB CM always reports its message's
    /// whole private-data area (e.g. 56 bytes for a request, zero-padded),
    /// iWARP the bytes sent.
    pub private_data: Vec<u8>,
    /// The responder resources for this side, in its own terms: the
    /// RDMA reads and atomics the peer issues at once (the IB CM reports
    /// the peer's initiator depth here, and vice versa).
    pub responder_resources: u8,
    /// The initiator depth for this side: the RDMA reads and atomics the
    /// peer accepts at once (the peer's responder resources).
    pub initiator_depth: u8,
    /// Flow control.
    pub flow_control: u8,
    /// Retry count.
    pub retry_count: u8,
    /// RNR retry count.
    pub rnr_retry_count: u8,
    /// Whether the peer's QP uses an SRQ.
    pub srq: bool,
}

/// The peer of a UD (UDP port space) event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UdPeer {
    /// The peer's QP number.
    pub qp_num: u32,
    /// The peer's Q_Key.
    pub qkey: u32,
    /// How to address the peer.
    pub ah_attr: sys::ib_uverbs_ah_attr,
    /// The peer's private data.
    pub private_data: Vec<u8>,
}

impl UdPeer {
    fn decode(bytes: &[u8; 304]) -> UdPeer {
        // `param` is exactly `rdma_ucm_ud_param`'s 304 bytes: never fails.
        let u = sys::rdma_ucm_ud_param::read_from_bytes(bytes).unwrap_or_default();
        let len = usize::from(u.private_data_len).min(u.private_data.len());
        UdPeer {
            qp_num: u.qp_num,
            qkey: u.qkey,
            ah_attr: u.ah_attr,
            private_data: u.private_data[..len].to_vec(),
        }
    }

    /// [`ah_attr`](Self::ah_attr) as an [`AhAttr`](crate::qp::AhAttr), for
    /// [`create_ah`](crate::ProtectionDomain::create_ah): where to send the
    /// peer's datagrams (with [`qp_num`](Self::qp_num) and
    /// [`qkey`](Self::qkey)).
    pub fn to_ah_attr(&self) -> crate::qp::AhAttr {
        crate::qp::AhAttr::from_raw(&self.ah_attr)
    }
}

/// What an event carries besides its kind.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Param {
    /// An RC (TCP port space) id's connection parameters.
    Conn(PeerParam),
    /// A UD (UDP port space) id's datagram parameters.
    Ud(UdPeer),
}

impl Param {
    fn decode(bytes: &[u8; 304], ps: PortSpace) -> Param {
        match ps {
            PortSpace::Tcp => {
                // `param` is 304 bytes, `rdma_ucm_conn_param` 272: never fails.
                let c = sys::rdma_ucm_conn_param::read_from_prefix(bytes)
                    .map(|(c, _)| c)
                    .unwrap_or_default();
                let len = usize::from(c.private_data_len);
                Param::Conn(PeerParam {
                    qp_num: c.qp_num,
                    private_data: c.private_data[..len].to_vec(),
                    responder_resources: c.responder_resources,
                    initiator_depth: c.initiator_depth,
                    flow_control: c.flow_control,
                    retry_count: c.retry_count,
                    rnr_retry_count: c.rnr_retry_count,
                    srq: c.srq != 0,
                })
            }
            PortSpace::Udp => Param::Ud(UdPeer::decode(bytes)),
        }
    }

    /// The peer's private data.
    pub fn private_data(&self) -> &[u8] {
        match self {
            Param::Conn(c) => &c.private_data,
            Param::Ud(u) => &u.private_data,
        }
    }
}

/// Which event, with what it carries.
#[derive(Debug)]
#[non_exhaustive]
pub enum EventKind {
    /// `ADDR_RESOLVED`: the id has a device and a source address; resolve
    /// the route next.
    AddrResolved,
    /// `ADDR_ERROR`: address resolution failed ([`Event::errno`]).
    AddrError,
    /// `ROUTE_RESOLVED`: ready to connect.
    RouteResolved,
    /// `ROUTE_ERROR`: route resolution failed ([`Event::errno`]).
    RouteError,
    /// `CONNECT_REQUEST` on a listener: a new id for the connection
    /// ([`Event::id`] is its handle; [`Event::uid`] the listener's).
    ConnectRequest {
        /// The new id; accept or reject it (dropping it destroys it).
        id: CmId,
        /// The requester's parameters and private data.
        param: Param,
    },
    /// `CONNECT_RESPONSE`: the peer accepted. Move the QP to RTR and RTS
    /// with `INIT_QP_ATTR`, then [`CmId::establish`](super::CmId::establish);
    /// this is the active side's last event of the handshake: the kernel
    /// reports no `ESTABLISHED` to it (only the passive side gets one).
    ConnectResponse(Param),
    /// `CONNECT_ERROR`: connecting failed ([`Event::errno`]).
    ConnectError,
    /// `UNREACHABLE`: the peer did not answer ([`Event::errno`], e.g.
    /// `ETIMEDOUT`).
    Unreachable,
    /// `REJECTED`: the peer (or its CM, e.g. nobody listens) refused.
    Rejected {
        /// The status: the IB CM's reject reason (8: invalid service id,
        /// nobody listens; 28: consumer defined), or iWARP's negative errno.
        reason: i32,
        /// The rejecter's private data.
        param: Param,
    },
    /// `ESTABLISHED`: the connection is up (the passive side, when the RTU
    /// arrives; librdmacm makes one up for an active side whose QP it owns).
    Established(Param),
    /// `DISCONNECTED`: the connection is down; move the QP to ERR. The
    /// side that did not disconnect hears the DREQ: it must answer with
    /// [`CmId::disconnect`](super::CmId::disconnect) (the DREP), and only
    /// then does the initiator get its `DISCONNECTED` (else after its DREQ
    /// times out, status `-ETIMEDOUT`).
    Disconnected,
    /// `DEVICE_REMOVAL`: the device is going away; destroy the id.
    DeviceRemoval,
    /// `ADDR_CHANGE`: the bound address moved to another device.
    AddrChange,
    /// `TIMEWAIT_EXIT`: the QP may be reused.
    TimewaitExit,
    /// `MULTICAST_JOIN`: the group of a [`Membership`](super::Membership)
    /// is joined ([`Event::uid`] is the membership's, [`Event::id`] its
    /// handle). Attach the UD QP to the group with the address vector's
    /// `grh.dgid` and `dlid`
    /// ([`QueuePair::attach_mcast`](crate::QueuePair::attach_mcast)), and
    /// send to the group through an AH of [`UdPeer::to_ah_attr`], with
    /// its `qp_num` (0xFFFFFF) and `qkey`.
    MulticastJoin(UdPeer),
    /// `MULTICAST_ERROR`: the join failed, or the membership was lost
    /// ([`Event::errno`]); leave the group.
    MulticastError,
    /// Any other event (newer kernels' additions).
    Unknown(u32),
}

/// One event of the channel.
#[derive(Debug)]
pub struct Event {
    /// The kernel handle of the id the event is for.
    pub id: u32,
    /// The uid the id was created (or accepted) with.
    pub uid: u64,
    /// The raw status: 0, a negative errno, or a reject reason.
    pub status: i32,
    /// Which event.
    pub kind: EventKind,
}

impl Event {
    /// The errno of a failure event (`status` < 0), e.g. `ETIMEDOUT`.
    pub fn errno(&self) -> Option<Errno> {
        (self.status < 0).then(|| Errno::from_raw_os_error(-self.status))
    }

    /// The event's number (`raw::*`).
    pub fn number(&self) -> u32 {
        match &self.kind {
            EventKind::AddrResolved => raw::ADDR_RESOLVED,
            EventKind::AddrError => raw::ADDR_ERROR,
            EventKind::RouteResolved => raw::ROUTE_RESOLVED,
            EventKind::RouteError => raw::ROUTE_ERROR,
            EventKind::ConnectRequest { .. } => raw::CONNECT_REQUEST,
            EventKind::ConnectResponse(_) => raw::CONNECT_RESPONSE,
            EventKind::ConnectError => raw::CONNECT_ERROR,
            EventKind::Unreachable => raw::UNREACHABLE,
            EventKind::Rejected { .. } => raw::REJECTED,
            EventKind::Established(_) => raw::ESTABLISHED,
            EventKind::Disconnected => raw::DISCONNECTED,
            EventKind::DeviceRemoval => raw::DEVICE_REMOVAL,
            EventKind::AddrChange => raw::ADDR_CHANGE,
            EventKind::TimewaitExit => raw::TIMEWAIT_EXIT,
            EventKind::MulticastJoin(_) => raw::MULTICAST_JOIN,
            EventKind::MulticastError => raw::MULTICAST_ERROR,
            EventKind::Unknown(n) => *n,
        }
    }

    /// The event's name as `rdma_event_str` prints it.
    #[doc(alias = "rdma_event_str")]
    pub fn name(&self) -> &'static str {
        event_name(self.number())
    }
}

/// `rdma_event_str`'s name of event number `n`.
#[doc(alias = "rdma_event_str")]
pub fn event_name(n: u32) -> &'static str {
    const NAMES: [&str; 16] = [
        "RDMA_CM_EVENT_ADDR_RESOLVED",
        "RDMA_CM_EVENT_ADDR_ERROR",
        "RDMA_CM_EVENT_ROUTE_RESOLVED",
        "RDMA_CM_EVENT_ROUTE_ERROR",
        "RDMA_CM_EVENT_CONNECT_REQUEST",
        "RDMA_CM_EVENT_CONNECT_RESPONSE",
        "RDMA_CM_EVENT_CONNECT_ERROR",
        "RDMA_CM_EVENT_UNREACHABLE",
        "RDMA_CM_EVENT_REJECTED",
        "RDMA_CM_EVENT_ESTABLISHED",
        "RDMA_CM_EVENT_DISCONNECTED",
        "RDMA_CM_EVENT_DEVICE_REMOVAL",
        "RDMA_CM_EVENT_MULTICAST_JOIN",
        "RDMA_CM_EVENT_MULTICAST_ERROR",
        "RDMA_CM_EVENT_ADDR_CHANGE",
        "RDMA_CM_EVENT_TIMEWAIT_EXIT",
    ];
    NAMES
        .get(n as usize)
        .copied()
        .unwrap_or("RDMA_CM_EVENT_UNKNOWN")
}

/// Decodes `resp` for an id of port space `ps`; a connect request's new id
/// is built by `new_id(handle)`.
pub(crate) fn decode(
    resp: &sys::rdma_ucm_event_resp,
    ps: PortSpace,
    new_id: impl FnOnce(u32) -> CmId,
) -> Event {
    let param = || Param::decode(&resp.param, ps);
    let status = resp.status as i32;
    let kind = match resp.event {
        raw::ADDR_RESOLVED => EventKind::AddrResolved,
        raw::ADDR_ERROR => EventKind::AddrError,
        raw::ROUTE_RESOLVED => EventKind::RouteResolved,
        raw::ROUTE_ERROR => EventKind::RouteError,
        raw::CONNECT_REQUEST => EventKind::ConnectRequest {
            id: new_id(resp.id),
            param: param(),
        },
        raw::CONNECT_RESPONSE => EventKind::ConnectResponse(param()),
        raw::CONNECT_ERROR => EventKind::ConnectError,
        raw::UNREACHABLE => EventKind::Unreachable,
        raw::REJECTED => EventKind::Rejected {
            reason: status,
            param: param(),
        },
        raw::ESTABLISHED => EventKind::Established(param()),
        raw::DISCONNECTED => EventKind::Disconnected,
        raw::DEVICE_REMOVAL => EventKind::DeviceRemoval,
        raw::ADDR_CHANGE => EventKind::AddrChange,
        raw::TIMEWAIT_EXIT => EventKind::TimewaitExit,
        // Multicast is UD only: the kernel reports a `rdma_ucm_ud_param`.
        raw::MULTICAST_JOIN => EventKind::MulticastJoin(UdPeer::decode(&resp.param)),
        raw::MULTICAST_ERROR => EventKind::MulticastError,
        other => EventKind::Unknown(other),
    };
    Event {
        id: resp.id,
        uid: resp.uid,
        status,
        kind,
    }
}
