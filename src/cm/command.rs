//! Typed rdma_cm commands and their `write()` framing, as pure encoders.
//!
//! One value per ucma command, in the shape of [`crate::command`]'s uverbs
//! builders: required fields in `new`, a `CODE`, and one
//! [`CmCommand::request`] that fills the kernel's struct. [`encode`] frames
//! it as the kernel's `ucma_write` reads it: [`rdma_ucm_cmd_hdr`](sys::rdma_ucm_cmd_hdr)
//! `{cmd, in, out}` (both lengths in **bytes**) and the struct, with the
//! response pointer stored where the command keeps it. Nothing here makes a
//! system call; `src/cm/golden_tests.rs` pins every command byte for byte.

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};

use uverbs_uapi as sys;
use zerocopy::{FromBytes, FromZeros, Immutable, IntoBytes, KnownLayout};

use crate::command::{QpState, QpType};
use crate::error::Errno;

/// `AF_INET` on Linux.
pub const AF_INET: u16 = 2;
/// `AF_INET6` on Linux.
pub const AF_INET6: u16 = 10;
/// `AF_IB` on Linux (`sockaddr_ib`, what `QUERY` with the GID option answers).
pub const AF_IB: u16 = 27;

/// The most private data `CONNECT` carries in the TCP port space: the IB
/// CM's REQ holds 92 bytes, 36 of which the kernel's `cma_hdr` (version,
/// IP version, port, two addresses) takes (`cma.c`, `cma_user_data_offset`).
/// iWARP's MPA allows more; this is the limit every transport honours.
pub const MAX_CONNECT_PRIVATE_DATA: usize = 56;
/// The most private data a UDP-port-space request carries (SIDR REQ: 216 − 36).
pub const MAX_UD_CONNECT_PRIVATE_DATA: usize = 180;
/// The most private data `ACCEPT` carries (the IB CM's REP).
pub const MAX_ACCEPT_PRIVATE_DATA: usize = 196;
/// The most private data a UD accept carries (SIDR REP).
pub const MAX_UD_ACCEPT_PRIVATE_DATA: usize = 136;
/// The most private data `REJECT` carries (the IB CM's REJ).
pub const MAX_REJECT_PRIVATE_DATA: usize = 148;

/// The Q_Key the kernel gives every UDP-port-space id and multicast group
/// (`RDMA_UDP_QKEY` of the kernel's `rdma_cm.h`; no UAPI header has it).
pub const UDP_QKEY: u32 = 0x0123_4567;

/// A ucma command: its number, its request and response layouts, and where
/// the response pointer goes.
///
/// The bounds make both layouts plain data (proven by zerocopy's derives,
/// which every [`uverbs_uapi`] struct has). What is promised beyond memory
/// safety of the bytes: `Request` mirrors the kernel's struct for
/// [`CODE`](CmCommand::CODE), and `request(response)` stores `response`
/// where the kernel reads the answer's address. A wrong layout or a
/// pointer other than the one given makes the kernel write elsewhere; that
/// is why sending a command, [`EventChannel::execute`](super::EventChannel::execute),
/// is `unsafe`.
pub trait CmCommand {
    /// `RDMA_USER_CM_CMD_*`.
    const CODE: u32;
    /// The kernel's command struct (after the header).
    type Request: Copy + IntoBytes + Immutable;
    /// What the kernel writes at the response pointer, `()` for nothing.
    type Response: Copy + FromBytes + IntoBytes;

    /// The command struct, its response field set to `response` (a user
    /// address; 0 when the command has no response).
    fn request(&self, response: u64) -> Self::Request;

    /// The header's `out`: bytes of room at the response pointer.
    fn out_len(&self) -> usize {
        size_of::<Self::Response>()
    }
}

/// The bytes `write()` hands the kernel for `cmd`: the header
/// `{CODE, in = size_of::<Request>(), out}` and the request with the
/// response address `response`.
pub fn encode<C: CmCommand>(cmd: &C, response: u64) -> Result<Vec<u8>, Errno> {
    let req = cmd.request(response);
    let body = req.as_bytes();
    let hdr = sys::rdma_ucm_cmd_hdr {
        cmd: C::CODE,
        in_: u16::try_from(body.len()).map_err(|_| Errno::INVAL)?,
        out: u16::try_from(cmd.out_len()).map_err(|_| Errno::INVAL)?,
    };
    let mut frame = Vec::with_capacity(size_of::<sys::rdma_ucm_cmd_hdr>() + body.len());
    frame.extend_from_slice(hdr.as_bytes());
    frame.extend_from_slice(body);
    Ok(frame)
}

/// A port space: which service ids the cm id uses and the QP type it
/// connects (`enum rdma_ucm_port_space`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PortSpace {
    /// TCP port numbers, reliable connected QPs (`RDMA_PS_TCP`).
    Tcp,
    /// UDP port numbers, unreliable datagram QPs (`RDMA_PS_UDP`).
    Udp,
}

impl PortSpace {
    /// The kernel's number.
    pub fn raw(self) -> u16 {
        match self {
            PortSpace::Tcp => sys::RDMA_PS_TCP,
            PortSpace::Udp => sys::RDMA_PS_UDP,
        }
    }

    /// The QP type the kernel gives ids of this port space (`ucma_get_qp_type`).
    pub fn qp_type(self) -> QpType {
        match self {
            PortSpace::Tcp => QpType::Rc,
            PortSpace::Udp => QpType::Ud,
        }
    }
}

/// A socket address in the kernel's `sockaddr_in6`-sized container
/// (`BIND_IP`, `RESOLVE_IP`): a `sockaddr_in` is stored in its first 16 bytes.
pub fn sockaddr_in6_of(addr: &SocketAddr) -> sys::sockaddr_in6 {
    match addr {
        SocketAddr::V4(v4) => {
            let mut out = sys::sockaddr_in6::new_zeroed();
            let sin = sockaddr_in_of(v4);
            out.as_mut_bytes()[..size_of::<sys::sockaddr_in>()].copy_from_slice(sin.as_bytes());
            out
        }
        SocketAddr::V6(v6) => sys::sockaddr_in6 {
            sin6_family: AF_INET6,
            sin6_port: v6.port().to_be(),
            sin6_flowinfo: v6.flowinfo().to_be(),
            sin6_addr: v6.ip().octets(),
            sin6_scope_id: v6.scope_id(),
        },
    }
}

fn sockaddr_in_of(v4: &SocketAddrV4) -> sys::sockaddr_in {
    sys::sockaddr_in {
        sin_family: AF_INET,
        sin_port: v4.port().to_be(),
        sin_addr: u32::from_ne_bytes(v4.ip().octets()),
        __pad: [0; 8],
    }
}

/// A socket address in a `__kernel_sockaddr_storage`, and its size
/// (`BIND`, `RESOLVE_ADDR`): 16 for IPv4, 28 for IPv6.
pub fn sockaddr_storage_of(addr: &SocketAddr) -> (sys::__kernel_sockaddr_storage, u16) {
    let mut out = sys::__kernel_sockaddr_storage::new_zeroed();
    let len = match addr {
        SocketAddr::V4(v4) => {
            let sin = sockaddr_in_of(v4);
            out.as_mut_bytes()[..size_of::<sys::sockaddr_in>()].copy_from_slice(sin.as_bytes());
            size_of::<sys::sockaddr_in>()
        }
        SocketAddr::V6(_) => {
            let sin6 = sockaddr_in6_of(addr);
            out.as_mut_bytes()[..size_of::<sys::sockaddr_in6>()].copy_from_slice(sin6.as_bytes());
            size_of::<sys::sockaddr_in6>()
        }
    };
    (out, len as u16)
}

/// The IP socket address in the first bytes of a kernel socket address
/// (`sockaddr_in`, `sockaddr_in6` or a storage holding one); `None` for
/// family 0 (not set) or a family other than IPv4/IPv6.
pub fn socket_addr_from(bytes: &[u8]) -> Option<SocketAddr> {
    let family = u16::from_ne_bytes([*bytes.first()?, *bytes.get(1)?]);
    match family {
        AF_INET => {
            let (sin, _) = sys::sockaddr_in::read_from_prefix(bytes).ok()?;
            let ip = Ipv4Addr::from(sin.sin_addr.to_ne_bytes());
            Some(SocketAddr::V4(SocketAddrV4::new(
                ip,
                u16::from_be(sin.sin_port),
            )))
        }
        AF_INET6 => {
            let (sin6, _) = sys::sockaddr_in6::read_from_prefix(bytes).ok()?;
            Some(SocketAddr::V6(SocketAddrV6::new(
                Ipv6Addr::from(sin6.sin6_addr),
                u16::from_be(sin6.sin6_port),
                u32::from_be(sin6.sin6_flowinfo),
                sin6.sin6_scope_id,
            )))
        }
        _ => None,
    }
}

/// One ucma command as a small typed value (rustix's `ioctl::patterns`,
/// io-uring's `opcode!`): a public struct of the fields `new` takes, in its
/// order, plus optional ones with their defaults (set by a builder method
/// written beside it); and its [`CmCommand`] impl, whose `request` is the
/// closure's body with `cmd` the command and `response` the response
/// address.
macro_rules! cm_command {
    (
        $(#[$doc:meta])*
        $name:ident { $($field:ident: $t:ty),+ $(; $($opt:ident: $ot:ty = $default:expr),+)? }
        $(#[$new_doc:meta])*
        new;
        $code:ident: $request:ident -> $response:ty,
        |$cmd:ident, $resp:ident| $body:expr
    ) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub struct $name {
            $($field: $t,)+
            $($($opt: $ot,)+)?
        }

        impl $name {
            $(#[$new_doc])*
            pub fn new($($field: $t),+) -> Self {
                $name {
                    $($field,)+
                    $($($opt: $default,)+)?
                }
            }
        }

        impl CmCommand for $name {
            const CODE: u32 = sys::$code;
            type Request = sys::$request;
            type Response = $response;

            fn request(&self, $resp: u64) -> Self::Request {
                let $cmd = self;
                $body
            }
        }
    };
}

/// A command whose struct is exactly `{id}` or `{id, one u32}` and has no
/// response: the handle and the value go in the named fields.
macro_rules! id_command {
    (
        $(#[$doc:meta])*
        $name:ident, $code:ident, $request:ident $(, $field:ident: $t:ty => $raw:ident)?
    ) => {
        cm_command! {
            $(#[$doc])*
            $name { id: u32 $(, $field: $t)? }
            /// The command for the cm id with kernel handle `id`.
            new;
            $code: $request -> (),
            |cmd, _response| sys::$request {
                id: cmd.id,
                $($raw: cmd.$field,)?
            }
        }
    };
}

cm_command! {
    /// `CREATE_ID`: a new cm id in a port space; `uid` comes back in each of
    /// its events (the kernel drops the events of an id whose uid is 0).
    #[doc(alias = "rdma_create_id")]
    CreateId { uid: u64, ps: PortSpace }
    /// A cm id in port space `ps` (its QP type follows: TCP → RC, UDP → UD).
    new;
    RDMA_USER_CM_CMD_CREATE_ID: rdma_ucm_create_id -> sys::rdma_ucm_create_id_resp,
    |cmd, response| sys::rdma_ucm_create_id {
        uid: cmd.uid,
        response,
        ps: cmd.ps.raw(),
        // Read by the kernel only for RDMA_PS_IB; sent as librdmacm does.
        qp_type: cmd.ps.qp_type().raw(),
        reserved: [0; 5],
    }
}

cm_command! {
    /// `DESTROY_ID`: answers the number of events `GET_EVENT` reported for it.
    #[doc(alias = "rdma_destroy_id")]
    DestroyId { id: u32 }
    /// Destroy the cm id with kernel handle `id`.
    new;
    RDMA_USER_CM_CMD_DESTROY_ID: rdma_ucm_destroy_id -> sys::rdma_ucm_destroy_id_resp,
    |cmd, response| sys::rdma_ucm_destroy_id {
        response,
        id: cmd.id,
        reserved: 0,
    }
}

cm_command! {
    /// `JOIN_MCAST`: join the multicast group at `addr` through cm id `id`
    /// (UDP port space, bound or resolved); answers the membership's handle,
    /// and its `MULTICAST_JOIN` or `MULTICAST_ERROR` event carries `uid`.
    #[doc(alias = "rdma_join_multicast")]
    JoinMcast { id: u32, uid: u64, addr: SocketAddr; send_only: bool = false }
    /// Join `addr` as a full member (sends and receives).
    new;
    RDMA_USER_CM_CMD_JOIN_MCAST: rdma_ucm_join_mcast -> sys::rdma_ucm_create_id_resp,
    |cmd, response| {
        let (addr, addr_size) = sockaddr_storage_of(&cmd.addr);
        sys::rdma_ucm_join_mcast {
            response,
            uid: cmd.uid,
            id: cmd.id,
            addr_size,
            join_flags: if cmd.send_only {
                sys::RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER
            } else {
                sys::RDMA_MC_JOIN_FLAG_FULLMEMBER
            },
            addr,
        }
    }
}

impl JoinMcast {
    /// Join as a send-only full member (`RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER`).
    pub fn send_only(mut self) -> Self {
        self.send_only = true;
        self
    }
}

cm_command! {
    /// `LEAVE_MCAST`: leave the membership with handle `id` (what
    /// [`JoinMcast`] answered); answers the events reported for it, as
    /// `DESTROY_ID` does for an id.
    #[doc(alias = "rdma_leave_multicast")]
    LeaveMcast { id: u32 }
    /// Leave the membership with handle `id`.
    new;
    RDMA_USER_CM_CMD_LEAVE_MCAST: rdma_ucm_destroy_id -> sys::rdma_ucm_destroy_id_resp,
    |cmd, response| sys::rdma_ucm_destroy_id {
        response,
        id: cmd.id,
        reserved: 0,
    }
}

cm_command! {
    /// `BIND_IP`: bind to an IPv4 or IPv6 address (port 0: any free port).
    #[doc(alias = "rdma_bind_addr")]
    BindIp { id: u32, addr: SocketAddr }
    /// Bind cm id `id` to `addr`.
    new;
    RDMA_USER_CM_CMD_BIND_IP: rdma_ucm_bind_ip -> (),
    |cmd, _response| sys::rdma_ucm_bind_ip {
        response: 0,
        addr: sockaddr_in6_of(&cmd.addr),
        id: cmd.id,
    }
}

cm_command! {
    /// `BIND`: bind to an address in a `sockaddr_storage` with its size (what
    /// librdmacm sends when the kernel has it).
    #[doc(alias = "rdma_bind_addr")]
    Bind { id: u32, addr: SocketAddr }
    /// Bind cm id `id` to `addr`.
    new;
    RDMA_USER_CM_CMD_BIND: rdma_ucm_bind -> (),
    |cmd, _response| {
        let (addr, addr_size) = sockaddr_storage_of(&cmd.addr);
        sys::rdma_ucm_bind {
            id: cmd.id,
            addr_size,
            reserved: 0,
            addr,
        }
    }
}

cm_command! {
    /// `RESOLVE_IP`: resolve `dst` (and the local device) within `timeout_ms`;
    /// the answer is an `ADDR_RESOLVED` or `ADDR_ERROR` event.
    #[doc(alias = "rdma_resolve_addr")]
    ResolveIp { id: u32, dst: SocketAddr, timeout_ms: u32; src: Option<SocketAddr> = None }
    /// Resolve `dst` from any local address.
    new;
    RDMA_USER_CM_CMD_RESOLVE_IP: rdma_ucm_resolve_ip -> (),
    |cmd, _response| sys::rdma_ucm_resolve_ip {
        src_addr: cmd.src.as_ref().map(sockaddr_in6_of).unwrap_or_default(),
        dst_addr: sockaddr_in6_of(&cmd.dst),
        id: cmd.id,
        timeout_ms: cmd.timeout_ms,
    }
}

impl ResolveIp {
    /// Resolve from this local address (binds the id if it is not bound).
    pub fn src(mut self, src: SocketAddr) -> Self {
        self.src = Some(src);
        self
    }
}

cm_command! {
    /// `RESOLVE_ADDR`: [`ResolveIp`] with `sockaddr_storage` addresses and sizes.
    #[doc(alias = "rdma_resolve_addr")]
    ResolveAddr { id: u32, dst: SocketAddr, timeout_ms: u32; src: Option<SocketAddr> = None }
    /// Resolve `dst` from any local address.
    new;
    RDMA_USER_CM_CMD_RESOLVE_ADDR: rdma_ucm_resolve_addr -> (),
    |cmd, _response| {
        let (src_addr, src_size) = match &cmd.src {
            Some(src) => sockaddr_storage_of(src),
            None => (sys::__kernel_sockaddr_storage::new_zeroed(), 0),
        };
        let (dst_addr, dst_size) = sockaddr_storage_of(&cmd.dst);
        sys::rdma_ucm_resolve_addr {
            id: cmd.id,
            timeout_ms: cmd.timeout_ms,
            src_size,
            dst_size,
            reserved: 0,
            src_addr,
            dst_addr,
        }
    }
}

impl ResolveAddr {
    /// Resolve from this local address.
    pub fn src(mut self, src: SocketAddr) -> Self {
        self.src = Some(src);
        self
    }
}

id_command! {
    /// `RESOLVE_ROUTE`: the path to the resolved destination; the answer is
    /// a `ROUTE_RESOLVED` or `ROUTE_ERROR` event.
    #[doc(alias = "rdma_resolve_route")]
    ResolveRoute, RDMA_USER_CM_CMD_RESOLVE_ROUTE, rdma_ucm_resolve_route,
    timeout_ms: u32 => timeout_ms
}

id_command! {
    /// `LISTEN`: accept connection requests; `backlog` pending ones at most
    /// (0, or more than the `max_backlog` sysctl: the sysctl's value, 1024).
    #[doc(alias = "rdma_listen")]
    Listen, RDMA_USER_CM_CMD_LISTEN, rdma_ucm_listen,
    backlog: u32 => backlog
}

id_command! {
    /// `DISCONNECT`: a DREQ to the peer; both sides then get `DISCONNECTED`.
    #[doc(alias = "rdma_disconnect")]
    Disconnect, RDMA_USER_CM_CMD_DISCONNECT, rdma_ucm_disconnect
}

id_command! {
    /// `NOTIFY`: tell the CM about a QP async event (`enum ib_event_type`,
    /// e.g. 9 = `IB_EVENT_COMM_EST` when data arrives before the RTU).
    #[doc(alias = "rdma_notify")]
    Notify, RDMA_USER_CM_CMD_NOTIFY, rdma_ucm_notify,
    event: u32 => event
}

cm_command! {
    /// `QUERY_ROUTE`: addresses, node GUID, port and path records in one answer.
    #[doc(alias = "rdma_query_route")]
    QueryRoute { id: u32 }
    /// Query cm id `id`.
    new;
    RDMA_USER_CM_CMD_QUERY_ROUTE: rdma_ucm_query -> sys::rdma_ucm_query_route_resp,
    |cmd, response| sys::rdma_ucm_query {
        response,
        id: cmd.id,
        option: 0,
    }
}

/// What [`Query`] asks for (`RDMA_USER_CM_QUERY_*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum QueryOption {
    /// Addresses, node GUID, port, P_Key.
    Addr,
    /// The GIDs (as `sockaddr_ib` addresses), node GUID, port, P_Key.
    Gid,
}

cm_command! {
    /// `QUERY` with the address or GID option.
    Query { id: u32, option: QueryOption }
    /// Query cm id `id` for `option`.
    new;
    RDMA_USER_CM_CMD_QUERY: rdma_ucm_query -> sys::rdma_ucm_query_addr_resp,
    |cmd, response| sys::rdma_ucm_query {
        response,
        id: cmd.id,
        option: match cmd.option {
            QueryOption::Addr => sys::RDMA_USER_CM_QUERY_ADDR,
            QueryOption::Gid => sys::RDMA_USER_CM_QUERY_GID,
        },
    }
}

/// The answer of [`QueryPath`]: the count and room for the primary and
/// alternate path records (the kernel keeps at most these two).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct PathAnswer {
    /// `num_paths`: the records the route has.
    pub head: sys::rdma_ucm_query_path_resp,
    /// The records; the first `min(num_paths, 2)` are filled.
    pub paths: [sys::ib_path_rec_data; 2],
}

cm_command! {
    /// `QUERY` with the path option: the route's path records in wire format.
    QueryPath { id: u32 }
    /// Query cm id `id`'s path records.
    new;
    RDMA_USER_CM_CMD_QUERY: rdma_ucm_query -> PathAnswer,
    |cmd, response| sys::rdma_ucm_query {
        response,
        id: cmd.id,
        option: sys::RDMA_USER_CM_QUERY_PATH,
    }
}

/// Connection parameters of [`Connect`] and [`Accept`] (`struct
/// rdma_conn_param`): the QP, the RDMA read depths, retry counts and up to
/// 255 bytes of private data (each command has its own lower limit, see
/// [`MAX_CONNECT_PRIVATE_DATA`] and the others).
#[doc(alias = "rdma_conn_param")]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnParam {
    raw: sys::rdma_ucm_conn_param,
}

/// Private data longer than a command carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("private data of {len} bytes exceeds the {max} bytes this message carries")]
#[non_exhaustive]
pub struct PrivateDataTooLong {
    /// The length given.
    pub len: usize,
    /// The most the message carries.
    pub max: usize,
}

impl ConnParam {
    /// Parameters for our QP `qp_num` (24 bits; the kernel masks the rest):
    /// responder resources and initiator depth 1, retry and RNR retry 7
    /// (librdmacm's defaults without parameters), no private data.
    ///
    /// On rxe a transport retry count of 7 never runs out (Linux 6.12's
    /// `rxe_comp.c` does not decrement 7): a WRITE over a dead link then
    /// never fails. Ask for [`retry_count(6)`](Self::retry_count) or less to
    /// see `RETRY_EXC_ERR` (measured across the two VMs: about 4.3 s with 6).
    pub fn new(qp_num: u32) -> Self {
        let mut raw = sys::rdma_ucm_conn_param::new_zeroed();
        raw.qp_num = qp_num;
        raw.responder_resources = 1;
        raw.initiator_depth = 1;
        raw.retry_count = 7;
        raw.rnr_retry_count = 7;
        raw.valid = 1;
        ConnParam { raw }
    }

    setters! {
        /// RDMA reads/atomics the peer may have outstanding at our QP.
        pub fn responder_resources(n: u8) => raw.responder_resources;
        /// RDMA reads/atomics our QP may have outstanding at the peer.
        pub fn initiator_depth(n: u8) => raw.initiator_depth;
        /// Transport retries, 0..=7 (rxe: 7 retries forever, see [`new`](Self::new)).
        pub fn retry_count(n: u8) => raw.retry_count;
        /// RNR retries, 0..=7 (7: retry forever).
        pub fn rnr_retry_count(n: u8) => raw.rnr_retry_count;
    }

    /// Whether the QP has hardware flow control (IB CM `flow_control`).
    pub fn flow_control(mut self, on: bool) -> Self {
        self.raw.flow_control = on.into();
        self
    }

    /// Whether the QP receives through an SRQ.
    pub fn srq(mut self, on: bool) -> Self {
        self.raw.srq = on.into();
        self
    }

    /// Private data for the peer; at most 255 bytes here (the length is a
    /// `u8`), less for each message: the command checks its own limit.
    pub fn private_data(mut self, data: &[u8]) -> Result<Self, PrivateDataTooLong> {
        if data.len() > usize::from(u8::MAX) {
            return Err(PrivateDataTooLong {
                len: data.len(),
                max: u8::MAX.into(),
            });
        }
        self.raw.private_data = [0; 256];
        self.raw.private_data[..data.len()].copy_from_slice(data);
        self.raw.private_data_len = data.len() as u8;
        Ok(self)
    }

    /// The private data set.
    pub fn private_data_bytes(&self) -> &[u8] {
        &self.raw.private_data[..usize::from(self.raw.private_data_len)]
    }

    /// The QP number.
    pub fn qp_num(&self) -> u32 {
        self.raw.qp_num
    }

    /// Refuses private data over `max` and retry counts over 7.
    pub(crate) fn check(&self, max_private: usize) -> Result<(), &'static str> {
        if self.private_data_bytes().len() > max_private {
            return Err("private data longer than the message carries");
        }
        if self.raw.retry_count > 7 || self.raw.rnr_retry_count > 7 {
            return Err("retry and RNR retry counts are 3-bit values (0..=7)");
        }
        Ok(())
    }

    /// The kernel's struct.
    pub fn raw(&self) -> &sys::rdma_ucm_conn_param {
        &self.raw
    }
}

cm_command! {
    /// `CONNECT`: send the connection request (active side). The answer is a
    /// `CONNECT_RESPONSE` (the QP is ours: move it to RTR and RTS, then
    /// [`Accept::establish`]), `REJECTED`, `UNREACHABLE` or `CONNECT_ERROR`.
    #[doc(alias = "rdma_connect")]
    Connect { id: u32, param: ConnParam }
    /// Connect cm id `id` with `param`.
    new;
    RDMA_USER_CM_CMD_CONNECT: rdma_ucm_connect -> (),
    |cmd, _response| sys::rdma_ucm_connect {
        conn_param: cmd.param.raw,
        id: cmd.id,
        reserved: 0,
        ece: sys::rdma_ucm_ece::default(),
    }
}

/// `ACCEPT`: passive side, accept a connection request with our parameters
/// (the id's later events then carry `uid`); active side, [`establish`](Self::establish)
/// sends the RTU after `CONNECT_RESPONSE`.
#[doc(alias = "rdma_accept")]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Accept {
    id: u32,
    uid: u64,
    param: Option<ConnParam>,
}

impl Accept {
    /// Accept the request of cm id `id`; its later events carry `uid`
    /// (which must not be 0: the kernel drops the events of a uid-0 id).
    pub fn new(id: u32, uid: u64, param: ConnParam) -> Self {
        Accept {
            id,
            uid,
            param: Some(param),
        }
    }

    /// The active side's RTU after `CONNECT_RESPONSE` (`rdma_establish`):
    /// no parameters (`valid` 0), uid unchanged.
    #[doc(alias = "rdma_establish")]
    pub fn establish(id: u32) -> Self {
        Accept {
            id,
            uid: 0,
            param: None,
        }
    }
}

impl CmCommand for Accept {
    const CODE: u32 = sys::RDMA_USER_CM_CMD_ACCEPT;
    type Request = sys::rdma_ucm_accept;
    type Response = ();

    fn request(&self, _response: u64) -> Self::Request {
        sys::rdma_ucm_accept {
            uid: self.uid,
            conn_param: self
                .param
                .map(|p| p.raw)
                .unwrap_or_else(sys::rdma_ucm_conn_param::new_zeroed),
            id: self.id,
            reserved: 0,
            ece: sys::rdma_ucm_ece::default(),
        }
    }
}

/// Why a connection request is rejected: the two reasons `ucma_reject`
/// lets user space send (`enum ib_cm_rej_reason`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RejectReason {
    /// `IB_CM_REJ_CONSUMER_DEFINED` (28), what `rdma_reject` sends.
    ConsumerDefined,
    /// `IB_CM_REJ_VENDOR_OPTION_NOT_SUPPORTED` (35), `rdma_reject_ece`'s.
    #[doc(alias = "rdma_reject_ece")]
    VendorOptionNotSupported,
}

impl RejectReason {
    /// The kernel's number.
    pub fn raw(self) -> u8 {
        match self {
            RejectReason::ConsumerDefined => 28,
            RejectReason::VendorOptionNotSupported => 35,
        }
    }
}

/// `REJECT`: refuse a connection request, with private data for the peer.
#[doc(alias = "rdma_reject")]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reject {
    raw: sys::rdma_ucm_reject,
}

impl Reject {
    /// Reject cm id `id`'s request with `private_data`
    /// (at most [`MAX_REJECT_PRIVATE_DATA`] bytes).
    pub fn new(
        id: u32,
        reason: RejectReason,
        private_data: &[u8],
    ) -> Result<Self, PrivateDataTooLong> {
        if private_data.len() > MAX_REJECT_PRIVATE_DATA {
            return Err(PrivateDataTooLong {
                len: private_data.len(),
                max: MAX_REJECT_PRIVATE_DATA,
            });
        }
        let mut raw = sys::rdma_ucm_reject::new_zeroed();
        raw.id = id;
        raw.reason = reason.raw();
        raw.private_data_len = private_data.len() as u8;
        raw.private_data[..private_data.len()].copy_from_slice(private_data);
        Ok(Reject { raw })
    }
}

impl CmCommand for Reject {
    const CODE: u32 = sys::RDMA_USER_CM_CMD_REJECT;
    type Request = sys::rdma_ucm_reject;
    type Response = ();

    fn request(&self, _response: u64) -> Self::Request {
        self.raw
    }
}

cm_command! {
    /// `INIT_QP_ATTR`: the attributes (and mask) that move our QP to `state`
    /// for this connection; apply them with `MODIFY_QP`.
    #[doc(alias = "rdma_init_qp_attr")]
    InitQpAttr { id: u32, state: QpState }
    /// The attributes for cm id `id`'s QP to enter `state`.
    new;
    RDMA_USER_CM_CMD_INIT_QP_ATTR: rdma_ucm_init_qp_attr -> sys::ib_uverbs_qp_attr,
    |cmd, response| sys::rdma_ucm_init_qp_attr {
        response,
        id: cmd.id,
        qp_state: cmd.state as u32,
    }
}

/// `GET_EVENT`: the next event of the channel (blocks unless the fd is
/// non-blocking: then `EAGAIN`).
#[doc(alias = "rdma_get_cm_event")]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GetEvent;

impl CmCommand for GetEvent {
    const CODE: u32 = sys::RDMA_USER_CM_CMD_GET_EVENT;
    type Request = sys::rdma_ucm_get_event;
    type Response = sys::rdma_ucm_event_resp;

    fn request(&self, response: u64) -> Self::Request {
        sys::rdma_ucm_get_event { response }
    }
}

/// An option value of [`SetOption`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CmOption {
    /// Type of service of the id's traffic (`RDMA_OPTION_ID_TOS`, a `u8`).
    Tos(u8),
    /// Let the address be reused (`RDMA_OPTION_ID_REUSEADDR`, an `int`).
    ReuseAddr(bool),
    /// Bind IPv6 only (`RDMA_OPTION_ID_AFONLY`, an `int`).
    AfOnly(bool),
    /// The QP's local ACK timeout (`RDMA_OPTION_ID_ACK_TIMEOUT`, a `u8`).
    AckTimeout(u8),
}

/// `SET_OPTION`: the kernel reads the value through a pointer, which points
/// into this command: it must stay where it is until the write returns
/// (sending borrows it, so it does).
#[doc(alias = "rdma_set_option")]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SetOption {
    id: u32,
    option: CmOption,
    value: [u8; 4],
}

impl SetOption {
    /// Set `option` on cm id `id`.
    pub fn new(id: u32, option: CmOption) -> Self {
        let value = match option {
            CmOption::Tos(v) | CmOption::AckTimeout(v) => [v, 0, 0, 0],
            CmOption::ReuseAddr(on) | CmOption::AfOnly(on) => i32::from(on).to_ne_bytes(),
        };
        SetOption { id, option, value }
    }

    /// The value bytes the kernel reads (`optlen` of them).
    pub fn value(&self) -> &[u8] {
        &self.value[..self.optlen() as usize]
    }

    fn optlen(&self) -> u32 {
        match self.option {
            CmOption::Tos(_) | CmOption::AckTimeout(_) => 1,
            CmOption::ReuseAddr(_) | CmOption::AfOnly(_) => 4,
        }
    }
}

impl CmCommand for SetOption {
    const CODE: u32 = sys::RDMA_USER_CM_CMD_SET_OPTION;
    type Request = sys::rdma_ucm_set_option;
    type Response = ();

    fn request(&self, _response: u64) -> Self::Request {
        sys::rdma_ucm_set_option {
            optval: crate::transport::frame::user_addr(self.value.as_ptr()),
            id: self.id,
            level: sys::RDMA_OPTION_ID,
            optname: match self.option {
                CmOption::Tos(_) => sys::RDMA_OPTION_ID_TOS,
                CmOption::ReuseAddr(_) => sys::RDMA_OPTION_ID_REUSEADDR,
                CmOption::AfOnly(_) => sys::RDMA_OPTION_ID_AFONLY,
                CmOption::AckTimeout(_) => sys::RDMA_OPTION_ID_ACK_TIMEOUT,
            },
            optlen: self.optlen(),
        }
    }
}
