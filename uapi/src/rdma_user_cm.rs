//! Mirror of `<rdma/rdma_user_cm.h>`: the RDMA connection manager's
//! `write()` ABI on `/dev/infiniband/rdma_cm` (the kernel's `ucma.c`).
//!
//! Every command is one `write()` of [`rdma_ucm_cmd_hdr`] followed by the
//! command's struct; `in` and `out` count **bytes** (uverbs counts words).
//! A command with an answer carries a `response` pointer inside its struct
//! (not always first: `CREATE_ID` has `uid` before it), and the kernel
//! copies up to `out` bytes there.
//!
//! Also mirrored here, because only these commands use them: the socket
//! address structs of `<linux/in.h>`, `<linux/in6.h>` and `<linux/socket.h>`,
//! the path records of `<rdma/ib_user_sa.h>`, and `ib_uverbs_qp_attr` of
//! `<rdma/ib_user_verbs.h>` (`INIT_QP_ATTR`'s answer). Event numbers and
//! reject reasons are not in any UAPI header (they are the kernel's
//! `enum rdma_cm_event_type` and `enum ib_cm_rej_reason`); the `uverbs`
//! crate's `cm` module names them.
//!
//! No struct has padding: every `__aligned_u64` struct is `align(8)` and
//! its fields tile it, which the zerocopy derives prove.

use zerocopy::{FromBytes, FromZeros, Immutable, IntoBytes, KnownLayout};

/// `Default` as all-zero bytes, for structs holding arrays longer than 32
/// (which `#[derive(Default)]` cannot build).
macro_rules! zeroed_default {
    ($($t:ident),*) => {
        $(
            impl Default for $t {
                fn default() -> Self {
                    <$t as FromZeros>::new_zeroed()
                }
            }
        )*
    };
}

/// Version of the rdma_cm ABI this header describes (sysfs
/// `/sys/class/misc/rdma_cm/abi_version`).
pub const RDMA_USER_CM_ABI_VERSION: u32 = 4;
/// Room for private data in the connection parameters and `REJECT`.
pub const RDMA_MAX_PRIVATE_DATA: u32 = 256;

/// Command: create a cm id.
pub const RDMA_USER_CM_CMD_CREATE_ID: u32 = 0;
/// Command: destroy a cm id (answers the number of events reported for it).
pub const RDMA_USER_CM_CMD_DESTROY_ID: u32 = 1;
/// Command: bind to a `sockaddr_in6`-sized address (legacy form of `BIND`).
pub const RDMA_USER_CM_CMD_BIND_IP: u32 = 2;
/// Command: resolve a destination IP address (legacy form of `RESOLVE_ADDR`).
pub const RDMA_USER_CM_CMD_RESOLVE_IP: u32 = 3;
/// Command: resolve the route to the resolved destination.
pub const RDMA_USER_CM_CMD_RESOLVE_ROUTE: u32 = 4;
/// Command: query addresses, device and path records in one answer.
pub const RDMA_USER_CM_CMD_QUERY_ROUTE: u32 = 5;
/// Command: connect (active side).
pub const RDMA_USER_CM_CMD_CONNECT: u32 = 6;
/// Command: listen for connection requests.
pub const RDMA_USER_CM_CMD_LISTEN: u32 = 7;
/// Command: accept a connection request (or, active side, send the RTU).
pub const RDMA_USER_CM_CMD_ACCEPT: u32 = 8;
/// Command: reject a connection request.
pub const RDMA_USER_CM_CMD_REJECT: u32 = 9;
/// Command: disconnect.
pub const RDMA_USER_CM_CMD_DISCONNECT: u32 = 10;
/// Command: the QP attributes for a state transition.
pub const RDMA_USER_CM_CMD_INIT_QP_ATTR: u32 = 11;
/// Command: take the next event off the channel.
pub const RDMA_USER_CM_CMD_GET_EVENT: u32 = 12;
/// Command: get an option (no handler in the kernel: `ENOSYS`).
pub const RDMA_USER_CM_CMD_GET_OPTION: u32 = 13;
/// Command: set an option.
pub const RDMA_USER_CM_CMD_SET_OPTION: u32 = 14;
/// Command: report a QP async event to the CM.
pub const RDMA_USER_CM_CMD_NOTIFY: u32 = 15;
/// Command: join an IP multicast group.
pub const RDMA_USER_CM_CMD_JOIN_IP_MCAST: u32 = 16;
/// Command: leave a multicast group.
pub const RDMA_USER_CM_CMD_LEAVE_MCAST: u32 = 17;
/// Command: move a cm id to another channel.
pub const RDMA_USER_CM_CMD_MIGRATE_ID: u32 = 18;
/// Command: query addresses, path records or GIDs (`option` picks).
pub const RDMA_USER_CM_CMD_QUERY: u32 = 19;
/// Command: bind to an address of any family.
pub const RDMA_USER_CM_CMD_BIND: u32 = 20;
/// Command: resolve a destination address of any family.
pub const RDMA_USER_CM_CMD_RESOLVE_ADDR: u32 = 21;
/// Command: join a multicast group of any family.
pub const RDMA_USER_CM_CMD_JOIN_MCAST: u32 = 22;

/// Port space IPoIB (`enum rdma_ucm_port_space`; IBTA Annex A11).
pub const RDMA_PS_IPOIB: u16 = 0x0002;
/// Port space IB (native service ids).
pub const RDMA_PS_IB: u16 = 0x013f;
/// Port space TCP: reliable connected QPs.
pub const RDMA_PS_TCP: u16 = 0x0106;
/// Port space UDP: unreliable datagram QPs.
pub const RDMA_PS_UDP: u16 = 0x0111;

/// Multicast join flag: a full member, which sends and receives
/// (`RDMA_MC_JOIN_FLAG_FULLMEMBER`).
pub const RDMA_MC_JOIN_FLAG_FULLMEMBER: u16 = 0;
/// Multicast join flag: a send-only full member
/// (`RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER`).
pub const RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER: u16 = 1;

/// `QUERY` option: addresses, device, port and P_Key.
pub const RDMA_USER_CM_QUERY_ADDR: u32 = 0;
/// `QUERY` option: the path records.
pub const RDMA_USER_CM_QUERY_PATH: u32 = 1;
/// `QUERY` option: the GIDs, as `sockaddr_ib`.
pub const RDMA_USER_CM_QUERY_GID: u32 = 2;

/// `SET_OPTION` level: the cm id.
pub const RDMA_OPTION_ID: u32 = 0;
/// `SET_OPTION` level: InfiniBand.
pub const RDMA_OPTION_IB: u32 = 1;
/// Option: type of service (`u8`).
pub const RDMA_OPTION_ID_TOS: u32 = 0;
/// Option: reuse the address (`int`).
pub const RDMA_OPTION_ID_REUSEADDR: u32 = 1;
/// Option: IPv6 only (`int`).
pub const RDMA_OPTION_ID_AFONLY: u32 = 2;
/// Option: the QP's ACK timeout (`u8`).
pub const RDMA_OPTION_ID_ACK_TIMEOUT: u32 = 3;
/// Option: set the path records (`ib_path_rec_data[]`).
pub const RDMA_OPTION_IB_PATH: u32 = 1;

/// The header of every rdma_cm command.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct rdma_ucm_cmd_hdr {
    /// `RDMA_USER_CM_CMD_*`.
    pub cmd: u32,
    /// Bytes of the command struct after this header.
    pub in_: u16,
    /// Bytes of room at the response pointer.
    pub out: u16,
}
const _: () = assert!(core::mem::size_of::<rdma_ucm_cmd_hdr>() == 8);
const _: () = assert!(core::mem::align_of::<rdma_ucm_cmd_hdr>() == 4);

/// `struct sockaddr_in` of `<linux/in.h>`.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct sockaddr_in {
    /// `AF_INET` (2).
    pub sin_family: u16,
    /// Port, network order.
    pub sin_port: u16,
    /// Address, network order (`struct in_addr`).
    pub sin_addr: u32,
    /// Zero.
    pub __pad: [u8; 8],
}
const _: () = assert!(core::mem::size_of::<sockaddr_in>() == 16);
const _: () = assert!(core::mem::align_of::<sockaddr_in>() == 4);

/// `struct sockaddr_in6` of `<linux/in6.h>`.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct sockaddr_in6 {
    /// `AF_INET6` (10).
    pub sin6_family: u16,
    /// Port, network order.
    pub sin6_port: u16,
    /// Flow information, network order.
    pub sin6_flowinfo: u32,
    /// Address (`struct in6_addr`).
    pub sin6_addr: [u8; 16],
    /// Scope (interface) id.
    pub sin6_scope_id: u32,
}
const _: () = assert!(core::mem::size_of::<sockaddr_in6>() == 28);
const _: () = assert!(core::mem::align_of::<sockaddr_in6>() == 4);

/// `struct __kernel_sockaddr_storage` of `<linux/socket.h>`: room for any
/// socket address, aligned like a pointer.
#[repr(C, align(8))]
#[derive(Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct __kernel_sockaddr_storage {
    /// Address family.
    pub ss_family: u16,
    /// The rest of the address.
    pub __data: [u8; 126],
}
const _: () = assert!(core::mem::size_of::<__kernel_sockaddr_storage>() == 128);
const _: () = assert!(core::mem::align_of::<__kernel_sockaddr_storage>() == 8);

/// A path record as `QUERY_ROUTE` answers it (`<rdma/ib_user_sa.h>`).
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct ib_user_path_rec {
    /// Destination GID.
    pub dgid: [u8; 16],
    /// Source GID.
    pub sgid: [u8; 16],
    /// Destination LID, network order.
    pub dlid: u16,
    /// Source LID, network order.
    pub slid: u16,
    /// Raw traffic.
    pub raw_traffic: u32,
    /// Flow label, network order.
    pub flow_label: u32,
    /// Reversible.
    pub reversible: u32,
    /// Path MTU (`enum ib_mtu`).
    pub mtu: u32,
    /// P_Key, network order.
    pub pkey: u16,
    /// Hop limit.
    pub hop_limit: u8,
    /// Traffic class.
    pub traffic_class: u8,
    /// Number of paths.
    pub numb_path: u8,
    /// Service level.
    pub sl: u8,
    /// MTU selector.
    pub mtu_selector: u8,
    /// Rate selector.
    pub rate_selector: u8,
    /// Static rate.
    pub rate: u8,
    /// Packet lifetime selector.
    pub packet_life_time_selector: u8,
    /// Packet lifetime.
    pub packet_life_time: u8,
    /// Preference.
    pub preference: u8,
}
const _: () = assert!(core::mem::size_of::<ib_user_path_rec>() == 64);
const _: () = assert!(core::mem::align_of::<ib_user_path_rec>() == 4);

/// A packed path record with its flags (`<rdma/ib_user_sa.h>`), as
/// `QUERY` with `RDMA_USER_CM_QUERY_PATH` answers them.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct ib_path_rec_data {
    /// `IB_PATH_*` flags.
    pub flags: u32,
    /// Reserved.
    pub reserved: u32,
    /// The record in wire format.
    pub path_rec: [u32; 16],
}
const _: () = assert!(core::mem::size_of::<ib_path_rec_data>() == 72);
const _: () = assert!(core::mem::align_of::<ib_path_rec_data>() == 4);

/// `INIT_QP_ATTR`'s answer (`<rdma/ib_user_verbs.h>`): the attributes and
/// the mask (`enum ib_qp_attr_mask`) of a QP state transition.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct ib_uverbs_qp_attr {
    /// Which attributes are set.
    pub qp_attr_mask: u32,
    /// Target state.
    pub qp_state: u32,
    /// Current state.
    pub cur_qp_state: u32,
    /// Path MTU.
    pub path_mtu: u32,
    /// Path migration state.
    pub path_mig_state: u32,
    /// Q_Key.
    pub qkey: u32,
    /// Receive PSN.
    pub rq_psn: u32,
    /// Send PSN.
    pub sq_psn: u32,
    /// Peer QP number.
    pub dest_qp_num: u32,
    /// Remote access flags.
    pub qp_access_flags: u32,
    /// Primary path.
    pub ah_attr: crate::ib_uverbs_ah_attr,
    /// Alternate path.
    pub alt_ah_attr: crate::ib_uverbs_ah_attr,
    /// Send WRs.
    pub max_send_wr: u32,
    /// Receive WRs.
    pub max_recv_wr: u32,
    /// Send SGEs.
    pub max_send_sge: u32,
    /// Receive SGEs.
    pub max_recv_sge: u32,
    /// Inline data.
    pub max_inline_data: u32,
    /// P_Key index.
    pub pkey_index: u16,
    /// Alternate P_Key index.
    pub alt_pkey_index: u16,
    /// SQD async notification.
    pub en_sqd_async_notify: u8,
    /// SQ draining.
    pub sq_draining: u8,
    /// Outstanding reads as initiator.
    pub max_rd_atomic: u8,
    /// Outstanding reads as target.
    pub max_dest_rd_atomic: u8,
    /// Minimum RNR timer.
    pub min_rnr_timer: u8,
    /// Port number.
    pub port_num: u8,
    /// ACK timeout.
    pub timeout: u8,
    /// Retry count.
    pub retry_cnt: u8,
    /// RNR retry count.
    pub rnr_retry: u8,
    /// Alternate port.
    pub alt_port_num: u8,
    /// Alternate timeout.
    pub alt_timeout: u8,
    /// Reserved.
    pub reserved: [u8; 5],
}
const _: () = assert!(core::mem::size_of::<ib_uverbs_qp_attr>() == 144);
const _: () = assert!(core::mem::align_of::<ib_uverbs_qp_attr>() == 4);

/// `CREATE_ID` command body.
#[repr(C, align(8))]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct rdma_ucm_create_id {
    /// Caller's value, echoed in every event of the id (0: events dropped).
    pub uid: u64,
    /// User pointer to [`rdma_ucm_create_id_resp`].
    pub response: u64,
    /// Port space (`RDMA_PS_*`).
    pub ps: u16,
    /// QP type (`IB_UVERBS_QPT_*`), read for `RDMA_PS_IB` only.
    pub qp_type: u8,
    /// Reserved, zero.
    pub reserved: [u8; 5],
}
const _: () = assert!(core::mem::size_of::<rdma_ucm_create_id>() == 24);
const _: () = assert!(core::mem::align_of::<rdma_ucm_create_id>() == 8);

/// `CREATE_ID` response.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct rdma_ucm_create_id_resp {
    /// The kernel's handle of the new id.
    pub id: u32,
}
const _: () = assert!(core::mem::size_of::<rdma_ucm_create_id_resp>() == 4);
const _: () = assert!(core::mem::align_of::<rdma_ucm_create_id_resp>() == 4);

/// `DESTROY_ID` command body.
#[repr(C, align(8))]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct rdma_ucm_destroy_id {
    /// User pointer to [`rdma_ucm_destroy_id_resp`].
    pub response: u64,
    /// The id.
    pub id: u32,
    /// Reserved, zero.
    pub reserved: u32,
}
const _: () = assert!(core::mem::size_of::<rdma_ucm_destroy_id>() == 16);
const _: () = assert!(core::mem::align_of::<rdma_ucm_destroy_id>() == 8);

/// `DESTROY_ID` response.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct rdma_ucm_destroy_id_resp {
    /// Events `GET_EVENT` delivered for the id.
    pub events_reported: u32,
}
const _: () = assert!(core::mem::size_of::<rdma_ucm_destroy_id_resp>() == 4);
const _: () = assert!(core::mem::align_of::<rdma_ucm_destroy_id_resp>() == 4);

/// `BIND_IP` command body (the kernel reads no response).
#[repr(C, align(8))]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct rdma_ucm_bind_ip {
    /// Unused by the kernel.
    pub response: u64,
    /// The address (a `sockaddr_in` fits in it).
    pub addr: sockaddr_in6,
    /// The id.
    pub id: u32,
}
const _: () = assert!(core::mem::size_of::<rdma_ucm_bind_ip>() == 40);
const _: () = assert!(core::mem::align_of::<rdma_ucm_bind_ip>() == 8);

/// `BIND` command body.
#[repr(C, align(8))]
#[derive(Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct rdma_ucm_bind {
    /// The id.
    pub id: u32,
    /// Bytes of `addr` used; must match its family's size.
    pub addr_size: u16,
    /// Reserved, zero.
    pub reserved: u16,
    /// The address.
    pub addr: __kernel_sockaddr_storage,
}
const _: () = assert!(core::mem::size_of::<rdma_ucm_bind>() == 136);
const _: () = assert!(core::mem::align_of::<rdma_ucm_bind>() == 8);

/// `JOIN_MCAST` command body; the response is a
/// [`rdma_ucm_create_id_resp`] naming the membership.
#[repr(C, align(8))]
#[derive(Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct rdma_ucm_join_mcast {
    /// User pointer to [`rdma_ucm_create_id_resp`].
    pub response: u64,
    /// Caller's value, echoed in the membership's events.
    pub uid: u64,
    /// The id that joins.
    pub id: u32,
    /// Bytes of `addr` used; must match its family's size.
    pub addr_size: u16,
    /// `RDMA_MC_JOIN_FLAG_*`.
    pub join_flags: u16,
    /// The group's address.
    pub addr: __kernel_sockaddr_storage,
}
const _: () = assert!(core::mem::size_of::<rdma_ucm_join_mcast>() == 152);
const _: () = assert!(core::mem::align_of::<rdma_ucm_join_mcast>() == 8);

/// `RESOLVE_IP` command body.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct rdma_ucm_resolve_ip {
    /// Source address (family 0: any).
    pub src_addr: sockaddr_in6,
    /// Destination address.
    pub dst_addr: sockaddr_in6,
    /// The id.
    pub id: u32,
    /// Timeout in milliseconds.
    pub timeout_ms: u32,
}
const _: () = assert!(core::mem::size_of::<rdma_ucm_resolve_ip>() == 64);
const _: () = assert!(core::mem::align_of::<rdma_ucm_resolve_ip>() == 4);

/// `RESOLVE_ADDR` command body.
#[repr(C, align(8))]
#[derive(Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct rdma_ucm_resolve_addr {
    /// The id.
    pub id: u32,
    /// Timeout in milliseconds.
    pub timeout_ms: u32,
    /// Bytes of `src_addr` used (0: any source).
    pub src_size: u16,
    /// Bytes of `dst_addr` used.
    pub dst_size: u16,
    /// Reserved, zero.
    pub reserved: u32,
    /// Source address.
    pub src_addr: __kernel_sockaddr_storage,
    /// Destination address.
    pub dst_addr: __kernel_sockaddr_storage,
}
const _: () = assert!(core::mem::size_of::<rdma_ucm_resolve_addr>() == 272);
const _: () = assert!(core::mem::align_of::<rdma_ucm_resolve_addr>() == 8);

/// `RESOLVE_ROUTE` command body.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct rdma_ucm_resolve_route {
    /// The id.
    pub id: u32,
    /// Timeout in milliseconds.
    pub timeout_ms: u32,
}
const _: () = assert!(core::mem::size_of::<rdma_ucm_resolve_route>() == 8);
const _: () = assert!(core::mem::align_of::<rdma_ucm_resolve_route>() == 4);

/// `QUERY` and `QUERY_ROUTE` command body.
#[repr(C, align(8))]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct rdma_ucm_query {
    /// User pointer to the answer.
    pub response: u64,
    /// The id.
    pub id: u32,
    /// `RDMA_USER_CM_QUERY_*` (ignored by `QUERY_ROUTE`).
    pub option: u32,
}
const _: () = assert!(core::mem::size_of::<rdma_ucm_query>() == 16);
const _: () = assert!(core::mem::align_of::<rdma_ucm_query>() == 8);

/// `QUERY_ROUTE` response.
#[repr(C, align(8))]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct rdma_ucm_query_route_resp {
    /// The device's node GUID, network order (0 before the id has a device).
    pub node_guid: u64,
    /// Primary and alternate path.
    pub ib_route: [ib_user_path_rec; 2],
    /// Source address.
    pub src_addr: sockaddr_in6,
    /// Destination address.
    pub dst_addr: sockaddr_in6,
    /// Path records in `ib_route`.
    pub num_paths: u32,
    /// Port number.
    pub port_num: u8,
    /// Reserved.
    pub reserved: [u8; 3],
    /// The device's kernel index.
    pub ibdev_index: u32,
    /// Reserved.
    pub reserved1: u32,
}
const _: () = assert!(core::mem::size_of::<rdma_ucm_query_route_resp>() == 208);
const _: () = assert!(core::mem::align_of::<rdma_ucm_query_route_resp>() == 8);

/// `QUERY` response for `RDMA_USER_CM_QUERY_ADDR` and `_GID`.
#[repr(C, align(8))]
#[derive(Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct rdma_ucm_query_addr_resp {
    /// The device's node GUID, network order (0 before the id has a device).
    pub node_guid: u64,
    /// Port number.
    pub port_num: u8,
    /// Reserved.
    pub reserved: u8,
    /// P_Key, network order.
    pub pkey: u16,
    /// Bytes of `src_addr` used.
    pub src_size: u16,
    /// Bytes of `dst_addr` used.
    pub dst_size: u16,
    /// Source address.
    pub src_addr: __kernel_sockaddr_storage,
    /// Destination address.
    pub dst_addr: __kernel_sockaddr_storage,
    /// The device's kernel index.
    pub ibdev_index: u32,
    /// Reserved.
    pub reserved1: u32,
}
const _: () = assert!(core::mem::size_of::<rdma_ucm_query_addr_resp>() == 280);
const _: () = assert!(core::mem::align_of::<rdma_ucm_query_addr_resp>() == 8);

/// `QUERY` response head for `RDMA_USER_CM_QUERY_PATH` (the flexible
/// `path_data[]` of [`ib_path_rec_data`] follows).
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct rdma_ucm_query_path_resp {
    /// Path records that follow.
    pub num_paths: u32,
    /// Reserved.
    pub reserved: u32,
}
const _: () = assert!(core::mem::size_of::<rdma_ucm_query_path_resp>() == 8);
const _: () = assert!(core::mem::align_of::<rdma_ucm_query_path_resp>() == 4);

/// Connection parameters of `CONNECT`, `ACCEPT` and connection events.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct rdma_ucm_conn_param {
    /// Our QP number (24 bits).
    pub qp_num: u32,
    /// Q_Key (AF_IB only).
    pub qkey: u32,
    /// Private data for the peer.
    pub private_data: [u8; 256],
    /// Bytes of `private_data` used.
    pub private_data_len: u8,
    /// 1: the QP uses an SRQ.
    pub srq: u8,
    /// Outstanding RDMA reads the peer may issue to us.
    pub responder_resources: u8,
    /// Outstanding RDMA reads we issue.
    pub initiator_depth: u8,
    /// Flow control.
    pub flow_control: u8,
    /// Transport retries (3 bits).
    pub retry_count: u8,
    /// RNR retries (3 bits, 7 = infinite).
    pub rnr_retry_count: u8,
    /// 1: the parameters are given (`CONNECT` requires it).
    pub valid: u8,
}
const _: () = assert!(core::mem::size_of::<rdma_ucm_conn_param>() == 272);
const _: () = assert!(core::mem::align_of::<rdma_ucm_conn_param>() == 4);

/// Datagram parameters of UD events.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct rdma_ucm_ud_param {
    /// The peer's QP number.
    pub qp_num: u32,
    /// The peer's Q_Key.
    pub qkey: u32,
    /// The address handle attributes to reach the peer.
    pub ah_attr: crate::ib_uverbs_ah_attr,
    /// Private data from the peer.
    pub private_data: [u8; 256],
    /// Bytes of `private_data` used.
    pub private_data_len: u8,
    /// Reserved.
    pub reserved: [u8; 7],
}
const _: () = assert!(core::mem::size_of::<rdma_ucm_ud_param>() == 304);
const _: () = assert!(core::mem::align_of::<rdma_ucm_ud_param>() == 4);

/// Enhanced connection establishment data.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct rdma_ucm_ece {
    /// Vendor id.
    pub vendor_id: u32,
    /// Vendor options.
    pub attr_mod: u32,
}
const _: () = assert!(core::mem::size_of::<rdma_ucm_ece>() == 8);
const _: () = assert!(core::mem::align_of::<rdma_ucm_ece>() == 4);

/// `CONNECT` command body.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct rdma_ucm_connect {
    /// The parameters (`valid` must be 1).
    pub conn_param: rdma_ucm_conn_param,
    /// The id.
    pub id: u32,
    /// Reserved, zero.
    pub reserved: u32,
    /// ECE data (read when the command is this long).
    pub ece: rdma_ucm_ece,
}
const _: () = assert!(core::mem::size_of::<rdma_ucm_connect>() == 288);
const _: () = assert!(core::mem::align_of::<rdma_ucm_connect>() == 4);

/// `LISTEN` command body.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct rdma_ucm_listen {
    /// The id.
    pub id: u32,
    /// Pending requests allowed (0 or above the sysctl: the sysctl's 1024).
    pub backlog: u32,
}
const _: () = assert!(core::mem::size_of::<rdma_ucm_listen>() == 8);
const _: () = assert!(core::mem::align_of::<rdma_ucm_listen>() == 4);

/// `ACCEPT` command body.
#[repr(C, align(8))]
#[derive(Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct rdma_ucm_accept {
    /// The uid the id's later events carry (set when `valid`).
    pub uid: u64,
    /// The parameters (`valid` 0: the active side's RTU, no parameters).
    pub conn_param: rdma_ucm_conn_param,
    /// The id.
    pub id: u32,
    /// Reserved, zero.
    pub reserved: u32,
    /// ECE data.
    pub ece: rdma_ucm_ece,
}
const _: () = assert!(core::mem::size_of::<rdma_ucm_accept>() == 296);
const _: () = assert!(core::mem::align_of::<rdma_ucm_accept>() == 8);

/// `REJECT` command body.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct rdma_ucm_reject {
    /// The id.
    pub id: u32,
    /// Bytes of `private_data` used.
    pub private_data_len: u8,
    /// Reason: 0 or 28 (consumer defined), 35 (vendor option not supported).
    pub reason: u8,
    /// Reserved, zero.
    pub reserved: [u8; 2],
    /// Private data for the peer.
    pub private_data: [u8; 256],
}
const _: () = assert!(core::mem::size_of::<rdma_ucm_reject>() == 264);
const _: () = assert!(core::mem::align_of::<rdma_ucm_reject>() == 4);

/// `DISCONNECT` command body.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct rdma_ucm_disconnect {
    /// The id.
    pub id: u32,
}
const _: () = assert!(core::mem::size_of::<rdma_ucm_disconnect>() == 4);
const _: () = assert!(core::mem::align_of::<rdma_ucm_disconnect>() == 4);

/// `INIT_QP_ATTR` command body.
#[repr(C, align(8))]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct rdma_ucm_init_qp_attr {
    /// User pointer to [`ib_uverbs_qp_attr`].
    pub response: u64,
    /// The id.
    pub id: u32,
    /// The state whose attributes are wanted (`enum ib_qp_state`, ≤ ERR).
    pub qp_state: u32,
}
const _: () = assert!(core::mem::size_of::<rdma_ucm_init_qp_attr>() == 16);
const _: () = assert!(core::mem::align_of::<rdma_ucm_init_qp_attr>() == 8);

/// `NOTIFY` command body.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct rdma_ucm_notify {
    /// The id.
    pub id: u32,
    /// The QP async event (`enum ib_event_type`).
    pub event: u32,
}
const _: () = assert!(core::mem::size_of::<rdma_ucm_notify>() == 8);
const _: () = assert!(core::mem::align_of::<rdma_ucm_notify>() == 4);

/// `GET_EVENT` command body.
#[repr(C, align(8))]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct rdma_ucm_get_event {
    /// User pointer to [`rdma_ucm_event_resp`].
    pub response: u64,
}
const _: () = assert!(core::mem::size_of::<rdma_ucm_get_event>() == 8);
const _: () = assert!(core::mem::align_of::<rdma_ucm_get_event>() == 8);

/// `GET_EVENT` response.
#[repr(C, align(8))]
#[derive(Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct rdma_ucm_event_resp {
    /// The uid of the id (for a connect request: the listener's).
    pub uid: u64,
    /// The id (for a connect request: the new id's handle).
    pub id: u32,
    /// `enum rdma_cm_event_type`.
    pub event: u32,
    /// 0, a negative errno, or (rejected) the CM's reject reason.
    pub status: u32,
    /// The C union `{ rdma_ucm_conn_param conn; rdma_ucm_ud_param ud; }`
    /// (4-byte aligned, at offset 20): read either from these bytes.
    pub param: [u8; 304],
    /// Reserved.
    pub reserved: u32,
    /// ECE data.
    pub ece: rdma_ucm_ece,
}
const _: () = assert!(core::mem::size_of::<rdma_ucm_event_resp>() == 336);
const _: () = assert!(core::mem::align_of::<rdma_ucm_event_resp>() == 8);

/// `SET_OPTION` command body.
#[repr(C, align(8))]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct rdma_ucm_set_option {
    /// User pointer to the value.
    pub optval: u64,
    /// The id.
    pub id: u32,
    /// `RDMA_OPTION_ID` or `RDMA_OPTION_IB`.
    pub level: u32,
    /// `RDMA_OPTION_*`.
    pub optname: u32,
    /// Bytes at `optval`.
    pub optlen: u32,
}
const _: () = assert!(core::mem::size_of::<rdma_ucm_set_option>() == 24);
const _: () = assert!(core::mem::align_of::<rdma_ucm_set_option>() == 8);

zeroed_default!(
    __kernel_sockaddr_storage,
    rdma_ucm_bind,
    rdma_ucm_resolve_addr,
    rdma_ucm_query_addr_resp,
    rdma_ucm_conn_param,
    rdma_ucm_ud_param,
    rdma_ucm_connect,
    rdma_ucm_accept,
    rdma_ucm_reject,
    rdma_ucm_event_resp
);
