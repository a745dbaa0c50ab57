//! Mirror of `<rdma/ib_user_verbs.h>`: the legacy `write()` command ABI.
//!
//! Structs ending in a C flexible `driver_data[]` array omit it; the driver-private
//! (UHW) data is placed directly after the struct's bytes. `__aligned_u64` fields are
//! `u64` and every struct holding one is `align(8)`, as the header demands on all
//! architectures.

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

/// Version of the uverbs userspace ABI that this header describes.
pub const IB_USER_VERBS_ABI_VERSION: u32 = 6;
/// First command number of the extended-only commands (`IB_USER_VERBS_EX_CMD_CREATE_FLOW`).
pub const IB_USER_VERBS_CMD_THRESHOLD: u32 = 50;

/// Write command: create a user context (`enum ib_uverbs_write_cmds`).
pub const IB_USER_VERBS_CMD_GET_CONTEXT: u32 = 0;
/// Write command: query device attributes.
pub const IB_USER_VERBS_CMD_QUERY_DEVICE: u32 = 1;
/// Write command: query port attributes.
pub const IB_USER_VERBS_CMD_QUERY_PORT: u32 = 2;
/// Write command: allocate a protection domain.
pub const IB_USER_VERBS_CMD_ALLOC_PD: u32 = 3;
/// Write command: deallocate a protection domain.
pub const IB_USER_VERBS_CMD_DEALLOC_PD: u32 = 4;
/// Write command: create an address handle.
pub const IB_USER_VERBS_CMD_CREATE_AH: u32 = 5;
/// Write command: modify an address handle (never implemented by the kernel).
pub const IB_USER_VERBS_CMD_MODIFY_AH: u32 = 6;
/// Write command: query an address handle (never implemented by the kernel).
pub const IB_USER_VERBS_CMD_QUERY_AH: u32 = 7;
/// Write command: destroy an address handle.
pub const IB_USER_VERBS_CMD_DESTROY_AH: u32 = 8;
/// Write command: register a memory region.
pub const IB_USER_VERBS_CMD_REG_MR: u32 = 9;
/// Write command: register a shared memory region (never implemented by the kernel).
pub const IB_USER_VERBS_CMD_REG_SMR: u32 = 10;
/// Write command: re-register a memory region.
pub const IB_USER_VERBS_CMD_REREG_MR: u32 = 11;
/// Write command: query a memory region (never implemented by the kernel).
pub const IB_USER_VERBS_CMD_QUERY_MR: u32 = 12;
/// Write command: deregister a memory region.
pub const IB_USER_VERBS_CMD_DEREG_MR: u32 = 13;
/// Write command: allocate a memory window.
pub const IB_USER_VERBS_CMD_ALLOC_MW: u32 = 14;
/// Write command: bind a memory window (never implemented by the kernel).
pub const IB_USER_VERBS_CMD_BIND_MW: u32 = 15;
/// Write command: deallocate a memory window.
pub const IB_USER_VERBS_CMD_DEALLOC_MW: u32 = 16;
/// Write command: create a completion channel.
pub const IB_USER_VERBS_CMD_CREATE_COMP_CHANNEL: u32 = 17;
/// Write command: create a completion queue.
pub const IB_USER_VERBS_CMD_CREATE_CQ: u32 = 18;
/// Write command: resize a completion queue.
pub const IB_USER_VERBS_CMD_RESIZE_CQ: u32 = 19;
/// Write command: destroy a completion queue.
pub const IB_USER_VERBS_CMD_DESTROY_CQ: u32 = 20;
/// Write command: poll a completion queue.
pub const IB_USER_VERBS_CMD_POLL_CQ: u32 = 21;
/// Write command: peek a completion queue (never implemented by the kernel).
pub const IB_USER_VERBS_CMD_PEEK_CQ: u32 = 22;
/// Write command: request a completion notification.
pub const IB_USER_VERBS_CMD_REQ_NOTIFY_CQ: u32 = 23;
/// Write command: create a queue pair.
pub const IB_USER_VERBS_CMD_CREATE_QP: u32 = 24;
/// Write command: query a queue pair.
pub const IB_USER_VERBS_CMD_QUERY_QP: u32 = 25;
/// Write command: modify a queue pair.
pub const IB_USER_VERBS_CMD_MODIFY_QP: u32 = 26;
/// Write command: destroy a queue pair.
pub const IB_USER_VERBS_CMD_DESTROY_QP: u32 = 27;
/// Write command: post send work requests.
pub const IB_USER_VERBS_CMD_POST_SEND: u32 = 28;
/// Write command: post receive work requests.
pub const IB_USER_VERBS_CMD_POST_RECV: u32 = 29;
/// Write command: attach a queue pair to a multicast group.
pub const IB_USER_VERBS_CMD_ATTACH_MCAST: u32 = 30;
/// Write command: detach a queue pair from a multicast group.
pub const IB_USER_VERBS_CMD_DETACH_MCAST: u32 = 31;
/// Write command: create a shared receive queue.
pub const IB_USER_VERBS_CMD_CREATE_SRQ: u32 = 32;
/// Write command: modify a shared receive queue.
pub const IB_USER_VERBS_CMD_MODIFY_SRQ: u32 = 33;
/// Write command: query a shared receive queue.
pub const IB_USER_VERBS_CMD_QUERY_SRQ: u32 = 34;
/// Write command: destroy a shared receive queue.
pub const IB_USER_VERBS_CMD_DESTROY_SRQ: u32 = 35;
/// Write command: post receive work requests to a shared receive queue.
pub const IB_USER_VERBS_CMD_POST_SRQ_RECV: u32 = 36;
/// Write command: open an XRC domain.
pub const IB_USER_VERBS_CMD_OPEN_XRCD: u32 = 37;
/// Write command: close an XRC domain.
pub const IB_USER_VERBS_CMD_CLOSE_XRCD: u32 = 38;
/// Write command: create an XRC shared receive queue.
pub const IB_USER_VERBS_CMD_CREATE_XSRQ: u32 = 39;
/// Write command: open a shareable queue pair.
pub const IB_USER_VERBS_CMD_OPEN_QP: u32 = 40;

/// Extended write command: query device attributes (extended response).
pub const IB_USER_VERBS_EX_CMD_QUERY_DEVICE: u32 = IB_USER_VERBS_CMD_QUERY_DEVICE;
/// Extended write command: create a completion queue.
pub const IB_USER_VERBS_EX_CMD_CREATE_CQ: u32 = IB_USER_VERBS_CMD_CREATE_CQ;
/// Extended write command: create a queue pair.
pub const IB_USER_VERBS_EX_CMD_CREATE_QP: u32 = IB_USER_VERBS_CMD_CREATE_QP;
/// Extended write command: modify a queue pair.
pub const IB_USER_VERBS_EX_CMD_MODIFY_QP: u32 = IB_USER_VERBS_CMD_MODIFY_QP;
/// Extended write command: create a flow steering rule.
pub const IB_USER_VERBS_EX_CMD_CREATE_FLOW: u32 = IB_USER_VERBS_CMD_THRESHOLD;
/// Extended write command: destroy a flow steering rule.
pub const IB_USER_VERBS_EX_CMD_DESTROY_FLOW: u32 = 51;
/// Extended write command: create a work queue.
pub const IB_USER_VERBS_EX_CMD_CREATE_WQ: u32 = 52;
/// Extended write command: modify a work queue.
pub const IB_USER_VERBS_EX_CMD_MODIFY_WQ: u32 = 53;
/// Extended write command: destroy a work queue.
pub const IB_USER_VERBS_EX_CMD_DESTROY_WQ: u32 = 54;
/// Extended write command: create a receive work queue indirection table.
pub const IB_USER_VERBS_EX_CMD_CREATE_RWQ_IND_TBL: u32 = 55;
/// Extended write command: destroy a receive work queue indirection table.
pub const IB_USER_VERBS_EX_CMD_DESTROY_RWQ_IND_TBL: u32 = 56;
/// Extended write command: modify completion queue moderation.
pub const IB_USER_VERBS_EX_CMD_MODIFY_CQ: u32 = 57;

/// Mask selecting the command number in `ib_uverbs_cmd_hdr::command`.
pub const IB_USER_VERBS_CMD_COMMAND_MASK: u32 = 0xff;
/// Flag in `ib_uverbs_cmd_hdr::command` marking an extended command.
pub const IB_USER_VERBS_CMD_FLAG_EXTENDED: u32 = 0x8000_0000;

/// An asynchronous event as read from the async event file descriptor.
#[repr(C, align(8))]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct ib_uverbs_async_event_desc {
    /// User handle of the object the event is about (CQ, QP, SRQ, WQ or port number).
    pub element: u64,
    /// Event type (`enum ib_event_type`).
    pub event_type: u32,
    /// Reserved.
    pub reserved: u32,
}
const _: () = assert!(core::mem::size_of::<ib_uverbs_async_event_desc>() == 16);
const _: () = assert!(core::mem::align_of::<ib_uverbs_async_event_desc>() == 8);

/// Header that starts every legacy `write()` command.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct ib_uverbs_cmd_hdr {
    /// Command number, optionally OR-ed with `IB_USER_VERBS_CMD_FLAG_EXTENDED`.
    pub command: u32,
    /// Length of the command block (non-extended: in 32-bit words including this header).
    pub in_words: u16,
    /// Length of the response buffer (non-extended: in 32-bit words).
    pub out_words: u16,
}
const _: () = assert!(core::mem::size_of::<ib_uverbs_cmd_hdr>() == 8);
const _: () = assert!(core::mem::align_of::<ib_uverbs_cmd_hdr>() == 4);

/// Second header of an extended `write()` command, after `ib_uverbs_cmd_hdr`.
#[repr(C, align(8))]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct ib_uverbs_ex_cmd_hdr {
    /// User pointer to the response buffer.
    pub response: u64,
    /// Length of the driver-private input, in 64-bit words.
    pub provider_in_words: u16,
    /// Length of the driver-private output, in 64-bit words.
    pub provider_out_words: u16,
    /// Reserved, must be zero.
    pub cmd_hdr_reserved: u32,
}
const _: () = assert!(core::mem::size_of::<ib_uverbs_ex_cmd_hdr>() == 16);
const _: () = assert!(core::mem::align_of::<ib_uverbs_ex_cmd_hdr>() == 8);

/// `GET_CONTEXT` command body (flexible `driver_data[]` tail omitted).
#[repr(C, align(8))]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct ib_uverbs_get_context {
    /// User pointer to the response buffer.
    pub response: u64,
}
const _: () = assert!(core::mem::size_of::<ib_uverbs_get_context>() == 8);
const _: () = assert!(core::mem::align_of::<ib_uverbs_get_context>() == 8);

/// `GET_CONTEXT` response (flexible `driver_data[]` tail omitted).
#[repr(C, align(8))]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct ib_uverbs_get_context_resp {
    /// File descriptor for asynchronous events.
    pub async_fd: u32,
    /// Number of completion vectors.
    pub num_comp_vectors: u32,
}
const _: () = assert!(core::mem::size_of::<ib_uverbs_get_context_resp>() == 8);
const _: () = assert!(core::mem::align_of::<ib_uverbs_get_context_resp>() == 8);

/// `QUERY_DEVICE` command body (flexible `driver_data[]` tail omitted).
#[repr(C, align(8))]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct ib_uverbs_query_device {
    /// User pointer to the response buffer.
    pub response: u64,
}
const _: () = assert!(core::mem::size_of::<ib_uverbs_query_device>() == 8);
const _: () = assert!(core::mem::align_of::<ib_uverbs_query_device>() == 8);

/// `QUERY_DEVICE` response: the device attributes.
#[repr(C, align(8))]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct ib_uverbs_query_device_resp {
    /// Firmware version.
    pub fw_ver: u64,
    /// Node GUID (`__be64`: raw big-endian bytes, not host order).
    pub node_guid: u64,
    /// System image GUID (`__be64`: raw big-endian bytes, not host order).
    pub sys_image_guid: u64,
    /// Largest registrable memory region, in bytes.
    pub max_mr_size: u64,
    /// Supported page sizes (bit mask).
    pub page_size_cap: u64,
    /// Vendor ID.
    pub vendor_id: u32,
    /// Vendor part ID.
    pub vendor_part_id: u32,
    /// Hardware version.
    pub hw_ver: u32,
    /// Maximum number of queue pairs.
    pub max_qp: u32,
    /// Maximum work requests per queue pair.
    pub max_qp_wr: u32,
    /// Device capability flags.
    pub device_cap_flags: u32,
    /// Maximum scatter/gather entries per work request.
    pub max_sge: u32,
    /// Maximum scatter/gather entries per RDMA read.
    pub max_sge_rd: u32,
    /// Maximum number of completion queues.
    pub max_cq: u32,
    /// Maximum entries per completion queue.
    pub max_cqe: u32,
    /// Maximum number of memory regions.
    pub max_mr: u32,
    /// Maximum number of protection domains.
    pub max_pd: u32,
    /// Maximum outstanding RDMA read/atomic operations per QP as target.
    pub max_qp_rd_atom: u32,
    /// Maximum outstanding RDMA read/atomic operations per EE context as target.
    pub max_ee_rd_atom: u32,
    /// Maximum resources for incoming RDMA read/atomic operations.
    pub max_res_rd_atom: u32,
    /// Maximum outstanding RDMA read/atomic operations per QP as initiator.
    pub max_qp_init_rd_atom: u32,
    /// Maximum outstanding RDMA read/atomic operations per EE context as initiator.
    pub max_ee_init_rd_atom: u32,
    /// Atomic operation support level.
    pub atomic_cap: u32,
    /// Maximum number of EE contexts.
    pub max_ee: u32,
    /// Maximum number of reliable datagram domains.
    pub max_rdd: u32,
    /// Maximum number of memory windows.
    pub max_mw: u32,
    /// Maximum number of raw IPv6 datagram QPs.
    pub max_raw_ipv6_qp: u32,
    /// Maximum number of raw Ethertype datagram QPs.
    pub max_raw_ethy_qp: u32,
    /// Maximum number of multicast groups.
    pub max_mcast_grp: u32,
    /// Maximum QPs attached per multicast group.
    pub max_mcast_qp_attach: u32,
    /// Maximum QPs attached to multicast groups in total.
    pub max_total_mcast_qp_attach: u32,
    /// Maximum number of address handles.
    pub max_ah: u32,
    /// Maximum number of fast memory regions.
    pub max_fmr: u32,
    /// Maximum remaps per fast memory region.
    pub max_map_per_fmr: u32,
    /// Maximum number of shared receive queues.
    pub max_srq: u32,
    /// Maximum work requests per shared receive queue.
    pub max_srq_wr: u32,
    /// Maximum scatter/gather entries per shared receive queue work request.
    pub max_srq_sge: u32,
    /// Number of partition keys.
    pub max_pkeys: u16,
    /// Local CA ack delay.
    pub local_ca_ack_delay: u8,
    /// Number of physical ports.
    pub phys_port_cnt: u8,
    /// Reserved.
    pub reserved: [u8; 4],
}
const _: () = assert!(core::mem::size_of::<ib_uverbs_query_device_resp>() == 176);
const _: () = assert!(core::mem::align_of::<ib_uverbs_query_device_resp>() == 8);

/// `EX_QUERY_DEVICE` command body (after the two headers).
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct ib_uverbs_ex_query_device {
    /// Extension mask; must be zero.
    pub comp_mask: u32,
    /// Reserved, must be zero.
    pub reserved: u32,
}
const _: () = assert!(core::mem::size_of::<ib_uverbs_ex_query_device>() == 8);

/// The per-transport part of `ib_uverbs_odp_caps` (an anonymous struct in C,
/// `per_transport_caps`): `IB_ODP_SUPPORT_*` bits per QP type.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct ib_uverbs_odp_caps_per_transport {
    /// ODP operations supported on RC QPs.
    pub rc_odp_caps: u32,
    /// ODP operations supported on UC QPs.
    pub uc_odp_caps: u32,
    /// ODP operations supported on UD QPs.
    pub ud_odp_caps: u32,
}
const _: () = assert!(core::mem::size_of::<ib_uverbs_odp_caps_per_transport>() == 12);

/// On-demand paging capabilities of `EX_QUERY_DEVICE`.
#[repr(C, align(8))]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct ib_uverbs_odp_caps {
    /// `IB_ODP_SUPPORT` and `IB_ODP_SUPPORT_IMPLICIT` bits.
    pub general_caps: u64,
    /// Operations supported per transport.
    pub per_transport_caps: ib_uverbs_odp_caps_per_transport,
    /// Reserved.
    pub reserved: u32,
}
const _: () = assert!(core::mem::size_of::<ib_uverbs_odp_caps>() == 24);

/// Receive-side scaling capabilities of `EX_QUERY_DEVICE`.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct ib_uverbs_rss_caps {
    /// One bit per `ib_qp_type` that supports RSS.
    pub supported_qpts: u32,
    /// Maximum receive work queue indirection tables.
    pub max_rwq_indirection_tables: u32,
    /// Maximum entries per indirection table.
    pub max_rwq_indirection_table_size: u32,
    /// Reserved.
    pub reserved: u32,
}
const _: () = assert!(core::mem::size_of::<ib_uverbs_rss_caps>() == 16);

/// Tag-matching capabilities of `EX_QUERY_DEVICE`.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct ib_uverbs_tm_caps {
    /// Largest rendezvous request header.
    pub max_rndv_hdr_size: u32,
    /// Entries in the tag matching list.
    pub max_num_tags: u32,
    /// Tag matching flags.
    pub flags: u32,
    /// Outstanding list operations.
    pub max_ops: u32,
    /// Scatter/gather entries per tag matching entry.
    pub max_sge: u32,
    /// Reserved.
    pub reserved: u32,
}
const _: () = assert!(core::mem::size_of::<ib_uverbs_tm_caps>() == 24);

/// CQ moderation capabilities of `EX_QUERY_DEVICE`.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct ib_uverbs_cq_moderation_caps {
    /// Largest completion count before an event.
    pub max_cq_moderation_count: u16,
    /// Largest moderation period, in microseconds.
    pub max_cq_moderation_period: u16,
    /// Reserved.
    pub reserved: u32,
}
const _: () = assert!(core::mem::size_of::<ib_uverbs_cq_moderation_caps>() == 8);

/// `EX_QUERY_DEVICE` response: the base answer and the extended attributes.
/// The kernel writes `response_length` bytes of it (at most what was asked).
#[repr(C, align(8))]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct ib_uverbs_ex_query_device_resp {
    /// What `QUERY_DEVICE` answers.
    pub base: ib_uverbs_query_device_resp,
    /// Extension mask.
    pub comp_mask: u32,
    /// How many bytes of this struct the kernel wrote.
    pub response_length: u32,
    /// On-demand paging capabilities.
    pub odp_caps: ib_uverbs_odp_caps,
    /// Valid bits of a completion timestamp.
    pub timestamp_mask: u64,
    /// Frequency of the device's core clock, in kHz.
    pub hca_core_clock: u64,
    /// All 64 `IB_DEVICE_*` capability bits.
    pub device_cap_flags_ex: u64,
    /// Receive-side scaling capabilities.
    pub rss_caps: ib_uverbs_rss_caps,
    /// Maximum receive work queues.
    pub max_wq_type_rq: u32,
    /// `IB_RAW_PACKET_CAP_*` bits.
    pub raw_packet_caps: u32,
    /// Tag-matching capabilities.
    pub tm_caps: ib_uverbs_tm_caps,
    /// CQ moderation capabilities.
    pub cq_moderation_caps: ib_uverbs_cq_moderation_caps,
    /// Largest device memory allocation, in bytes.
    pub max_dm_size: u64,
    /// ODP operations supported on XRC QPs.
    pub xrc_odp_caps: u32,
    /// Reserved.
    pub reserved: u32,
}
const _: () = assert!(core::mem::size_of::<ib_uverbs_ex_query_device_resp>() == 304);

/// `QUERY_PORT` command body (flexible `driver_data[]` tail omitted).
#[repr(C, align(8))]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct ib_uverbs_query_port {
    /// User pointer to the response buffer.
    pub response: u64,
    /// Port number (1-based).
    pub port_num: u8,
    /// Reserved, zero.
    pub reserved: [u8; 7],
}
const _: () = assert!(core::mem::size_of::<ib_uverbs_query_port>() == 16);
const _: () = assert!(core::mem::align_of::<ib_uverbs_query_port>() == 8);

/// `QUERY_PORT` response (the write command's, and the legacy part of the
/// `UVERBS_METHOD_QUERY_PORT` answer).
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct ib_uverbs_query_port_resp {
    /// Port capability flags (`IB_UVERBS_PCF_*`).
    pub port_cap_flags: u32,
    /// Largest message size.
    pub max_msg_sz: u32,
    /// Bad P_Key counter.
    pub bad_pkey_cntr: u32,
    /// Q_Key violation counter.
    pub qkey_viol_cntr: u32,
    /// Length of the GID table.
    pub gid_tbl_len: u32,
    /// Length of the P_Key table.
    pub pkey_tbl_len: u16,
    /// Base LID.
    pub lid: u16,
    /// LID of the subnet manager.
    pub sm_lid: u16,
    /// Logical port state (`enum ib_port_state`: 1 DOWN … 4 ACTIVE).
    pub state: u8,
    /// Largest MTU (`enum ib_mtu`: 1 = 256 … 5 = 4096).
    pub max_mtu: u8,
    /// Active MTU (`enum ib_mtu`).
    pub active_mtu: u8,
    /// LID mask control.
    pub lmc: u8,
    /// Number of virtual lanes.
    pub max_vl_num: u8,
    /// Service level of the subnet manager.
    pub sm_sl: u8,
    /// Subnet propagation timeout.
    pub subnet_timeout: u8,
    /// Type of init reply.
    pub init_type_reply: u8,
    /// Active link width.
    pub active_width: u8,
    /// Active link speed (capped at NDR).
    pub active_speed: u8,
    /// Physical port state.
    pub phys_state: u8,
    /// Link layer (`IB_LINK_LAYER_*`: 1 InfiniBand, 2 Ethernet).
    pub link_layer: u8,
    /// `IB_UVERBS_QPF_*` flags.
    pub flags: u8,
    /// Reserved.
    pub reserved: u8,
}
const _: () = assert!(core::mem::size_of::<ib_uverbs_query_port_resp>() == 40);
const _: () = assert!(core::mem::align_of::<ib_uverbs_query_port_resp>() == 4);

/// `ALLOC_PD` command body (flexible `driver_data[]` tail omitted).
#[repr(C, align(8))]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct ib_uverbs_alloc_pd {
    /// User pointer to the response buffer.
    pub response: u64,
}
const _: () = assert!(core::mem::size_of::<ib_uverbs_alloc_pd>() == 8);
const _: () = assert!(core::mem::align_of::<ib_uverbs_alloc_pd>() == 8);

/// `ALLOC_PD` response (flexible `u32 driver_data[]` tail omitted).
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct ib_uverbs_alloc_pd_resp {
    /// Handle of the new protection domain.
    pub pd_handle: u32,
}
const _: () = assert!(core::mem::size_of::<ib_uverbs_alloc_pd_resp>() == 4);
const _: () = assert!(core::mem::align_of::<ib_uverbs_alloc_pd_resp>() == 4);

/// `DEALLOC_PD` command body.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct ib_uverbs_dealloc_pd {
    /// Handle of the protection domain to free.
    pub pd_handle: u32,
}
const _: () = assert!(core::mem::size_of::<ib_uverbs_dealloc_pd>() == 4);
const _: () = assert!(core::mem::align_of::<ib_uverbs_dealloc_pd>() == 4);

/// `REG_MR` command body (flexible `driver_data[]` tail omitted).
#[repr(C, align(8))]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct ib_uverbs_reg_mr {
    /// User pointer to the response buffer.
    pub response: u64,
    /// Start address of the user memory to register.
    pub start: u64,
    /// Length of the region in bytes.
    pub length: u64,
    /// I/O virtual address the HCA uses for the region.
    pub hca_va: u64,
    /// Handle of the protection domain.
    pub pd_handle: u32,
    /// Access flags (`IB_UVERBS_ACCESS_*`).
    pub access_flags: u32,
}
const _: () = assert!(core::mem::size_of::<ib_uverbs_reg_mr>() == 40);
const _: () = assert!(core::mem::align_of::<ib_uverbs_reg_mr>() == 8);

/// `REG_MR` response (flexible `u32 driver_data[]` tail omitted).
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct ib_uverbs_reg_mr_resp {
    /// Handle of the new memory region.
    pub mr_handle: u32,
    /// Local key.
    pub lkey: u32,
    /// Remote key.
    pub rkey: u32,
}
const _: () = assert!(core::mem::size_of::<ib_uverbs_reg_mr_resp>() == 12);
const _: () = assert!(core::mem::align_of::<ib_uverbs_reg_mr_resp>() == 4);

/// `REREG_MR` command body (flexible `driver_data[]` tail omitted).
#[repr(C, align(8))]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct ib_uverbs_rereg_mr {
    /// User pointer to the response buffer.
    pub response: u64,
    /// Handle of the memory region to re-register.
    pub mr_handle: u32,
    /// What to change (`IB_MR_REREG_TRANS` 1, `_PD` 2, `_ACCESS` 4).
    pub flags: u32,
    /// New start address (with the translation flag).
    pub start: u64,
    /// New length in bytes (with the translation flag).
    pub length: u64,
    /// New I/O virtual address (with the translation flag).
    pub hca_va: u64,
    /// New protection domain handle (with the PD flag).
    pub pd_handle: u32,
    /// New access flags (with the access flag).
    pub access_flags: u32,
}
const _: () = assert!(core::mem::size_of::<ib_uverbs_rereg_mr>() == 48);
const _: () = assert!(core::mem::align_of::<ib_uverbs_rereg_mr>() == 8);

/// `REREG_MR` response (flexible `driver_data[]` tail omitted).
#[repr(C, align(8))]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct ib_uverbs_rereg_mr_resp {
    /// New local key.
    pub lkey: u32,
    /// New remote key.
    pub rkey: u32,
}
const _: () = assert!(core::mem::size_of::<ib_uverbs_rereg_mr_resp>() == 8);
const _: () = assert!(core::mem::align_of::<ib_uverbs_rereg_mr_resp>() == 8);

/// `DEREG_MR` command body.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct ib_uverbs_dereg_mr {
    /// Handle of the memory region to deregister.
    pub mr_handle: u32,
}
const _: () = assert!(core::mem::size_of::<ib_uverbs_dereg_mr>() == 4);
const _: () = assert!(core::mem::align_of::<ib_uverbs_dereg_mr>() == 4);

/// `ALLOC_MW` command body (flexible `driver_data[]` tail omitted).
#[repr(C, align(8))]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct ib_uverbs_alloc_mw {
    /// User address of the response buffer.
    pub response: u64,
    /// Handle of the protection domain of the new window.
    pub pd_handle: u32,
    /// `IB_MW_TYPE_1` (1) or `IB_MW_TYPE_2` (2).
    pub mw_type: u8,
    /// Reserved, zero.
    pub reserved: [u8; 3],
}
const _: () = assert!(core::mem::size_of::<ib_uverbs_alloc_mw>() == 16);
const _: () = assert!(core::mem::align_of::<ib_uverbs_alloc_mw>() == 8);

/// `ALLOC_MW` response (flexible `__aligned_u64 driver_data[]` tail omitted,
/// which makes the struct 8-aligned).
#[repr(C, align(8))]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct ib_uverbs_alloc_mw_resp {
    /// Handle of the new memory window.
    pub mw_handle: u32,
    /// Its remote key.
    pub rkey: u32,
}
const _: () = assert!(core::mem::size_of::<ib_uverbs_alloc_mw_resp>() == 8);
const _: () = assert!(core::mem::align_of::<ib_uverbs_alloc_mw_resp>() == 8);

/// `DEALLOC_MW` command body.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct ib_uverbs_dealloc_mw {
    /// Handle of the memory window to free.
    pub mw_handle: u32,
}
const _: () = assert!(core::mem::size_of::<ib_uverbs_dealloc_mw>() == 4);
const _: () = assert!(core::mem::align_of::<ib_uverbs_dealloc_mw>() == 4);

/// `ib_uverbs_ex_create_cq_flags`: completions carry a timestamp.
pub const IB_UVERBS_CQ_FLAGS_TIMESTAMP_COMPLETION: u32 = 1 << 0;
/// `ib_uverbs_ex_create_cq_flags`: the CQ may be overrun without an error.
pub const IB_UVERBS_CQ_FLAGS_IGNORE_OVERRUN: u32 = 1 << 1;

/// `CREATE_COMP_CHANNEL` command body.
#[repr(C, align(8))]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct ib_uverbs_create_comp_channel {
    /// User pointer to the response buffer.
    pub response: u64,
}
const _: () = assert!(core::mem::size_of::<ib_uverbs_create_comp_channel>() == 8);

/// `CREATE_COMP_CHANNEL` response.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct ib_uverbs_create_comp_channel_resp {
    /// The new completion-event file descriptor.
    pub fd: u32,
}
const _: () = assert!(core::mem::size_of::<ib_uverbs_create_comp_channel_resp>() == 4);

/// One completion event as read from a completion channel.
#[repr(C, align(8))]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct ib_uverbs_comp_event_desc {
    /// The `user_handle` of the CQ the event is about.
    pub cq_handle: u64,
}
const _: () = assert!(core::mem::size_of::<ib_uverbs_comp_event_desc>() == 8);

/// `CREATE_CQ` command body (flexible `driver_data[]` tail omitted).
#[repr(C, align(8))]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct ib_uverbs_create_cq {
    /// User pointer to the response buffer.
    pub response: u64,
    /// Value returned in completion and async events about this CQ.
    pub user_handle: u64,
    /// Minimum number of entries.
    pub cqe: u32,
    /// Completion vector.
    pub comp_vector: u32,
    /// Completion channel descriptor (`__s32`), -1 for none.
    pub comp_channel: i32,
    /// Reserved.
    pub reserved: u32,
}
const _: () = assert!(core::mem::size_of::<ib_uverbs_create_cq>() == 32);

/// `CREATE_CQ` response (flexible `driver_data[]` tail omitted).
#[repr(C, align(8))]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct ib_uverbs_create_cq_resp {
    /// Handle of the new CQ.
    pub cq_handle: u32,
    /// Number of entries the CQ really has.
    pub cqe: u32,
}
const _: () = assert!(core::mem::size_of::<ib_uverbs_create_cq_resp>() == 8);

/// `EX_CREATE_CQ` command body (after the two headers).
#[repr(C, align(8))]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct ib_uverbs_ex_create_cq {
    /// Value reported back in completion events.
    pub user_handle: u64,
    /// Minimum number of entries.
    pub cqe: u32,
    /// Completion vector.
    pub comp_vector: u32,
    /// Completion channel fd, or -1.
    pub comp_channel: i32,
    /// Extension mask.
    pub comp_mask: u32,
    /// `IB_UVERBS_CQ_FLAGS_*` bits.
    pub flags: u32,
    /// Reserved.
    pub reserved: u32,
}
const _: () = assert!(core::mem::size_of::<ib_uverbs_ex_create_cq>() == 32);

/// `EX_CREATE_CQ` response (flexible `driver_data[]` tail omitted).
#[repr(C, align(8))]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct ib_uverbs_ex_create_cq_resp {
    /// What `CREATE_CQ` answers.
    pub base: ib_uverbs_create_cq_resp,
    /// Extension mask.
    pub comp_mask: u32,
    /// How many bytes of this struct the kernel wrote.
    pub response_length: u32,
}
const _: () = assert!(core::mem::size_of::<ib_uverbs_ex_create_cq_resp>() == 16);

/// `RESIZE_CQ` command body (flexible `driver_data[]` tail omitted).
#[repr(C, align(8))]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct ib_uverbs_resize_cq {
    /// User pointer to the response buffer.
    pub response: u64,
    /// Handle of the CQ to resize.
    pub cq_handle: u32,
    /// Minimum number of entries wanted.
    pub cqe: u32,
}
const _: () = assert!(core::mem::size_of::<ib_uverbs_resize_cq>() == 16);

/// `RESIZE_CQ` response (flexible `driver_data[]` tail omitted).
#[repr(C, align(8))]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct ib_uverbs_resize_cq_resp {
    /// Number of entries the CQ really has now.
    pub cqe: u32,
    /// Reserved.
    pub reserved: u32,
}
const _: () = assert!(core::mem::size_of::<ib_uverbs_resize_cq_resp>() == 8);

/// `DESTROY_CQ` command body.
#[repr(C, align(8))]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct ib_uverbs_destroy_cq {
    /// User pointer to the response buffer.
    pub response: u64,
    /// Handle of the CQ to destroy.
    pub cq_handle: u32,
    /// Reserved.
    pub reserved: u32,
}
const _: () = assert!(core::mem::size_of::<ib_uverbs_destroy_cq>() == 16);

/// `DESTROY_CQ` response (also `UVERBS_ATTR_DESTROY_CQ_RESP`).
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct ib_uverbs_destroy_cq_resp {
    /// Completion events delivered for this CQ.
    pub comp_events_reported: u32,
    /// Async events delivered for this CQ.
    pub async_events_reported: u32,
}
const _: () = assert!(core::mem::size_of::<ib_uverbs_destroy_cq_resp>() == 8);

/// `REQ_NOTIFY_CQ` command body (no response).
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct ib_uverbs_req_notify_cq {
    /// Handle of the CQ to arm.
    pub cq_handle: u32,
    /// 1: only solicited completions raise an event.
    pub solicited_only: u32,
}
const _: () = assert!(core::mem::size_of::<ib_uverbs_req_notify_cq>() == 8);

/// `CREATE_QP` command body (flexible `driver_data[]` tail omitted).
#[repr(C, align(8))]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct ib_uverbs_create_qp {
    /// User pointer to the response buffer.
    pub response: u64,
    /// Value returned in async events about this QP.
    pub user_handle: u64,
    /// Protection domain handle.
    pub pd_handle: u32,
    /// Send CQ handle.
    pub send_cq_handle: u32,
    /// Receive CQ handle.
    pub recv_cq_handle: u32,
    /// SRQ handle (read when `is_srq`).
    pub srq_handle: u32,
    /// Requested send queue depth.
    pub max_send_wr: u32,
    /// Requested receive queue depth.
    pub max_recv_wr: u32,
    /// Requested SGEs per send WR.
    pub max_send_sge: u32,
    /// Requested SGEs per receive WR.
    pub max_recv_sge: u32,
    /// Requested inline data bytes.
    pub max_inline_data: u32,
    /// 1: every send WR is signalled.
    pub sq_sig_all: u8,
    /// QP type (`IB_UVERBS_QPT_*`).
    pub qp_type: u8,
    /// 1: the QP uses `srq_handle`.
    pub is_srq: u8,
    /// Reserved.
    pub reserved: u8,
}
const _: () = assert!(core::mem::size_of::<ib_uverbs_create_qp>() == 56);

/// `CREATE_QP` response (flexible `u32 driver_data[]` tail omitted).
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct ib_uverbs_create_qp_resp {
    /// Handle of the new QP.
    pub qp_handle: u32,
    /// QP number.
    pub qpn: u32,
    /// Actual send queue depth.
    pub max_send_wr: u32,
    /// Actual receive queue depth.
    pub max_recv_wr: u32,
    /// Actual SGEs per send WR.
    pub max_send_sge: u32,
    /// Actual SGEs per receive WR.
    pub max_recv_sge: u32,
    /// Actual inline data bytes.
    pub max_inline_data: u32,
    /// Reserved.
    pub reserved: u32,
}
const _: () = assert!(core::mem::size_of::<ib_uverbs_create_qp_resp>() == 32);

/// An address vector as MODIFY_QP and QUERY_QP carry it.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct ib_uverbs_qp_dest {
    /// Destination GID (network order).
    pub dgid: [u8; 16],
    /// Flow label.
    pub flow_label: u32,
    /// Destination LID.
    pub dlid: u16,
    /// Reserved.
    pub reserved: u16,
    /// Source GID index.
    pub sgid_index: u8,
    /// Hop limit.
    pub hop_limit: u8,
    /// Traffic class.
    pub traffic_class: u8,
    /// Service level.
    pub sl: u8,
    /// Source path bits.
    pub src_path_bits: u8,
    /// Static rate.
    pub static_rate: u8,
    /// 1: a GRH is used (always on RoCE).
    pub is_global: u8,
    /// Port number.
    pub port_num: u8,
}
const _: () = assert!(core::mem::size_of::<ib_uverbs_qp_dest>() == 32);

/// `QUERY_QP` command body (flexible `driver_data[]` tail omitted).
#[repr(C, align(8))]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct ib_uverbs_query_qp {
    /// User pointer to the response buffer.
    pub response: u64,
    /// Handle of the QP.
    pub qp_handle: u32,
    /// Attributes asked for (`IB_QP_*` mask bits).
    pub attr_mask: u32,
}
const _: () = assert!(core::mem::size_of::<ib_uverbs_query_qp>() == 16);

/// `QUERY_QP` response (flexible `driver_data[]` tail omitted).
#[repr(C, align(8))]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct ib_uverbs_query_qp_resp {
    /// Primary path.
    pub dest: ib_uverbs_qp_dest,
    /// Alternate path.
    pub alt_dest: ib_uverbs_qp_dest,
    /// Send queue depth.
    pub max_send_wr: u32,
    /// Receive queue depth.
    pub max_recv_wr: u32,
    /// SGEs per send WR.
    pub max_send_sge: u32,
    /// SGEs per receive WR.
    pub max_recv_sge: u32,
    /// Inline data bytes.
    pub max_inline_data: u32,
    /// Q_Key.
    pub qkey: u32,
    /// Receive PSN.
    pub rq_psn: u32,
    /// Send PSN.
    pub sq_psn: u32,
    /// Destination QP number.
    pub dest_qp_num: u32,
    /// Remote access flags.
    pub qp_access_flags: u32,
    /// P_Key index.
    pub pkey_index: u16,
    /// Alternate P_Key index.
    pub alt_pkey_index: u16,
    /// Current state (`enum ib_qp_state`).
    pub qp_state: u8,
    /// Current state as the caller assumed it.
    pub cur_qp_state: u8,
    /// Path MTU (`enum ib_mtu`).
    pub path_mtu: u8,
    /// Path migration state.
    pub path_mig_state: u8,
    /// SQ draining.
    pub sq_draining: u8,
    /// Outstanding RDMA reads/atomics as initiator.
    pub max_rd_atomic: u8,
    /// Outstanding RDMA reads/atomics as target.
    pub max_dest_rd_atomic: u8,
    /// Minimum RNR NAK timer.
    pub min_rnr_timer: u8,
    /// Port number.
    pub port_num: u8,
    /// Local ACK timeout.
    pub timeout: u8,
    /// Retry count.
    pub retry_cnt: u8,
    /// RNR retry count.
    pub rnr_retry: u8,
    /// Alternate port number.
    pub alt_port_num: u8,
    /// Alternate local ACK timeout.
    pub alt_timeout: u8,
    /// 1: every send WR is signalled.
    pub sq_sig_all: u8,
    /// Reserved.
    pub reserved: [u8; 5],
}
const _: () = assert!(core::mem::size_of::<ib_uverbs_query_qp_resp>() == 128);

/// `MODIFY_QP` command body (no response; `driver_data[]` tail omitted).
#[repr(C, align(8))]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct ib_uverbs_modify_qp {
    /// Primary path (with `IB_QP_AV`).
    pub dest: ib_uverbs_qp_dest,
    /// Alternate path (with `IB_QP_ALT_PATH`).
    pub alt_dest: ib_uverbs_qp_dest,
    /// Handle of the QP.
    pub qp_handle: u32,
    /// Which fields the kernel reads (`IB_QP_*` mask bits).
    pub attr_mask: u32,
    /// Q_Key.
    pub qkey: u32,
    /// Receive PSN.
    pub rq_psn: u32,
    /// Send PSN.
    pub sq_psn: u32,
    /// Destination QP number.
    pub dest_qp_num: u32,
    /// Remote access flags.
    pub qp_access_flags: u32,
    /// P_Key index.
    pub pkey_index: u16,
    /// Alternate P_Key index.
    pub alt_pkey_index: u16,
    /// New state.
    pub qp_state: u8,
    /// Assumed current state (with `IB_QP_CUR_STATE`).
    pub cur_qp_state: u8,
    /// Path MTU (`enum ib_mtu`).
    pub path_mtu: u8,
    /// Path migration state.
    pub path_mig_state: u8,
    /// Ask for an event when the SQ has drained.
    pub en_sqd_async_notify: u8,
    /// Outstanding RDMA reads/atomics as initiator.
    pub max_rd_atomic: u8,
    /// Outstanding RDMA reads/atomics as target.
    pub max_dest_rd_atomic: u8,
    /// Minimum RNR NAK timer.
    pub min_rnr_timer: u8,
    /// Port number.
    pub port_num: u8,
    /// Local ACK timeout.
    pub timeout: u8,
    /// Retry count.
    pub retry_cnt: u8,
    /// RNR retry count.
    pub rnr_retry: u8,
    /// Alternate port number.
    pub alt_port_num: u8,
    /// Alternate local ACK timeout.
    pub alt_timeout: u8,
    /// Reserved.
    pub reserved: [u8; 2],
}
const _: () = assert!(core::mem::size_of::<ib_uverbs_modify_qp>() == 112);

/// `DESTROY_QP` command body.
#[repr(C, align(8))]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct ib_uverbs_destroy_qp {
    /// User pointer to the response buffer.
    pub response: u64,
    /// Handle of the QP to destroy.
    pub qp_handle: u32,
    /// Reserved.
    pub reserved: u32,
}
const _: () = assert!(core::mem::size_of::<ib_uverbs_destroy_qp>() == 16);

/// `DESTROY_QP` response (also `UVERBS_ATTR_DESTROY_QP_RESP`).
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct ib_uverbs_destroy_qp_resp {
    /// Async events delivered for this QP.
    pub events_reported: u32,
}
const _: () = assert!(core::mem::size_of::<ib_uverbs_destroy_qp_resp>() == 4);

/// The global route header part of an address handle.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct ib_uverbs_global_route {
    /// Destination GID (network order).
    pub dgid: [u8; 16],
    /// Flow label.
    pub flow_label: u32,
    /// Source GID index.
    pub sgid_index: u8,
    /// Hop limit.
    pub hop_limit: u8,
    /// Traffic class.
    pub traffic_class: u8,
    /// Reserved.
    pub reserved: u8,
}
const _: () = assert!(core::mem::size_of::<ib_uverbs_global_route>() == 24);

/// An address handle's attributes.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct ib_uverbs_ah_attr {
    /// Global route (read when `is_global`).
    pub grh: ib_uverbs_global_route,
    /// Destination LID.
    pub dlid: u16,
    /// Service level.
    pub sl: u8,
    /// Source path bits.
    pub src_path_bits: u8,
    /// Static rate.
    pub static_rate: u8,
    /// 1: `grh` is used (always on RoCE).
    pub is_global: u8,
    /// Port number.
    pub port_num: u8,
    /// Reserved.
    pub reserved: u8,
}
const _: () = assert!(core::mem::size_of::<ib_uverbs_ah_attr>() == 32);

/// `CREATE_AH` command body (flexible `driver_data[]` tail omitted).
#[repr(C, align(8))]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct ib_uverbs_create_ah {
    /// User pointer to the response buffer.
    pub response: u64,
    /// Value kept with the AH.
    pub user_handle: u64,
    /// Protection domain handle.
    pub pd_handle: u32,
    /// Reserved.
    pub reserved: u32,
    /// The address.
    pub attr: ib_uverbs_ah_attr,
}
const _: () = assert!(core::mem::size_of::<ib_uverbs_create_ah>() == 56);

/// `CREATE_AH` response (flexible `u32 driver_data[]` tail omitted).
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct ib_uverbs_create_ah_resp {
    /// Handle of the new AH.
    pub ah_handle: u32,
}
const _: () = assert!(core::mem::size_of::<ib_uverbs_create_ah_resp>() == 4);

/// `DESTROY_AH` command body (no response).
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct ib_uverbs_destroy_ah {
    /// Handle of the AH to destroy.
    pub ah_handle: u32,
}
const _: () = assert!(core::mem::size_of::<ib_uverbs_destroy_ah>() == 4);

/// `ATTACH_MCAST` command body (no response; the flexible `u64
/// driver_data[]` tail omitted, its alignment kept).
#[repr(C, align(8))]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct ib_uverbs_attach_mcast {
    /// The multicast group's GID.
    pub gid: [u8; 16],
    /// Handle of the (UD) QP.
    pub qp_handle: u32,
    /// The multicast group's LID (ignored on RoCE).
    pub mlid: u16,
    /// Reserved.
    pub reserved: u16,
}
const _: () = assert!(core::mem::size_of::<ib_uverbs_attach_mcast>() == 24);

/// `DETACH_MCAST` command body: the kernel's struct has the same fields as
/// [`ib_uverbs_attach_mcast`].
pub type ib_uverbs_detach_mcast = ib_uverbs_attach_mcast;

/// `POST_SEND` command body (the `send_wr[]` tail omitted; the rxe
/// doorbell sends none).
#[repr(C, align(8))]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct ib_uverbs_post_send {
    /// User pointer to the response buffer.
    pub response: u64,
    /// Handle of the QP.
    pub qp_handle: u32,
    /// Number of work requests that follow.
    pub wr_count: u32,
    /// Number of SGEs that follow the work requests.
    pub sge_count: u32,
    /// Size of one work request in the tail.
    pub wqe_size: u32,
}
const _: () = assert!(core::mem::size_of::<ib_uverbs_post_send>() == 24);

/// `POST_SEND` response.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct ib_uverbs_post_send_resp {
    /// Index of the first WR the kernel refused.
    pub bad_wr: u32,
}
const _: () = assert!(core::mem::size_of::<ib_uverbs_post_send_resp>() == 4);

/// `CREATE_SRQ` command body (driver data follows).
#[repr(C, align(8))]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct ib_uverbs_create_srq {
    /// User pointer to the response buffer.
    pub response: u64,
    /// The value the SRQ's async events carry.
    pub user_handle: u64,
    /// Handle of the PD.
    pub pd_handle: u32,
    /// Receive work requests asked for.
    pub max_wr: u32,
    /// SGEs per receive work request asked for.
    pub max_sge: u32,
    /// The limit below which the SRQ reports `IB_EVENT_SRQ_LIMIT_REACHED` (0: not armed).
    pub srq_limit: u32,
}
const _: () = assert!(core::mem::size_of::<ib_uverbs_create_srq>() == 32);

/// `CREATE_SRQ` response (driver data follows).
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct ib_uverbs_create_srq_resp {
    /// Handle of the new SRQ.
    pub srq_handle: u32,
    /// Receive work requests it holds.
    pub max_wr: u32,
    /// SGEs per receive work request.
    pub max_sge: u32,
    /// SRQ number (XRC; 0 here).
    pub srqn: u32,
}
const _: () = assert!(core::mem::size_of::<ib_uverbs_create_srq_resp>() == 16);

/// `MODIFY_SRQ` command body (driver data follows; no response).
#[repr(C, align(8))]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct ib_uverbs_modify_srq {
    /// Handle of the SRQ.
    pub srq_handle: u32,
    /// `IB_SRQ_MAX_WR` (1) and/or `IB_SRQ_LIMIT` (2).
    pub attr_mask: u32,
    /// New size (with `IB_SRQ_MAX_WR`).
    pub max_wr: u32,
    /// New limit (with `IB_SRQ_LIMIT`; 0 disarms).
    pub srq_limit: u32,
}
const _: () = assert!(core::mem::size_of::<ib_uverbs_modify_srq>() == 16);

/// `QUERY_SRQ` command body.
#[repr(C, align(8))]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct ib_uverbs_query_srq {
    /// User pointer to the response buffer.
    pub response: u64,
    /// Handle of the SRQ.
    pub srq_handle: u32,
    /// Reserved.
    pub reserved: u32,
}
const _: () = assert!(core::mem::size_of::<ib_uverbs_query_srq>() == 16);

/// `QUERY_SRQ` response.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct ib_uverbs_query_srq_resp {
    /// Receive work requests the SRQ holds.
    pub max_wr: u32,
    /// SGEs per receive work request.
    pub max_sge: u32,
    /// The armed limit (0: not armed).
    pub srq_limit: u32,
    /// Reserved.
    pub reserved: u32,
}
const _: () = assert!(core::mem::size_of::<ib_uverbs_query_srq_resp>() == 16);

/// `DESTROY_SRQ` command body.
#[repr(C, align(8))]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct ib_uverbs_destroy_srq {
    /// User pointer to the response buffer.
    pub response: u64,
    /// Handle of the SRQ.
    pub srq_handle: u32,
    /// Reserved.
    pub reserved: u32,
}
const _: () = assert!(core::mem::size_of::<ib_uverbs_destroy_srq>() == 16);

/// `DESTROY_SRQ` response.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct ib_uverbs_destroy_srq_resp {
    /// Async events delivered for this SRQ.
    pub events_reported: u32,
}
const _: () = assert!(core::mem::size_of::<ib_uverbs_destroy_srq_resp>() == 4);
