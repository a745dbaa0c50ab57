//! Mirror of `<rdma/mlx5-abi.h>`: the ConnectX (mlx5) driver-private (UHW)
//! data of the commands a verbs data path sends: the context's blue-flame
//! registers and limits, the PD number, and the user-allocated CQ and QP
//! buffers and doorbell records handed to CREATE_CQ/CREATE_QP. What goes
//! into those buffers (WQEs, CQEs) is the hardware's format, not kernel
//! ABI, and lives with the provider.
//!
//! Every struct here is the same in Linux 6.1's and 6.12's header (6.12
//! adds only `reg_c0` to the query-device answer, not mirrored).
//!
//! Left out until a provider needs them: XRC, WQ/RSS, flow steering, DEVX,
//! clock info, query-device capabilities.

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

/// ABI version of the mlx5 driver (`MLX5_IB_UVERBS_ABI_VERSION`).
pub const MLX5_IB_UVERBS_ABI_VERSION: u32 = 1;

// `mlx5_ib_create_qp.flags`.
/// The QP's WQEs carry a signature.
pub const MLX5_QP_FLAG_SIGNATURE: u32 = 1 << 0;
/// Small receive payloads are scattered into the CQE.
pub const MLX5_QP_FLAG_SCATTER_CQE: u32 = 1 << 1;
/// Tunnel offloads for a raw packet QP.
pub const MLX5_QP_FLAG_TUNNEL_OFFLOADS: u32 = 1 << 2;
/// `bfreg_index` names a dynamically allocated blue-flame register.
pub const MLX5_QP_FLAG_BFREG_INDEX: u32 = 1 << 3;
/// A DC target.
pub const MLX5_QP_FLAG_TYPE_DCT: u32 = 1 << 4;
/// A DC initiator.
pub const MLX5_QP_FLAG_TYPE_DCI: u32 = 1 << 5;
/// Unicast self loopback allowed on the TIR.
pub const MLX5_QP_FLAG_TIR_ALLOW_SELF_LB_UC: u32 = 1 << 6;
/// Multicast self loopback allowed on the TIR.
pub const MLX5_QP_FLAG_TIR_ALLOW_SELF_LB_MC: u32 = 1 << 7;
/// Scatter to CQE allowed even where the QP type would not.
pub const MLX5_QP_FLAG_ALLOW_SCATTER_CQE: u32 = 1 << 8;
/// Packet-based credit mode for RC.
pub const MLX5_QP_FLAG_PACKET_BASED_CREDIT_MODE: u32 = 1 << 9;
/// `bfreg_index` is a UAR page index.
pub const MLX5_QP_FLAG_UAR_PAGE_INDEX: u32 = 1 << 10;
/// A DCI with streams.
pub const MLX5_QP_FLAG_DCI_STREAM: u32 = 1 << 11;

// `mlx5_ib_alloc_ucontext_req_v2.lib_caps`.
/// The library handles 4 KiB UARs.
pub const MLX5_LIB_CAP_4K_UAR: u64 = 1 << 0;
/// The library allocates UARs dynamically.
pub const MLX5_LIB_CAP_DYN_UAR: u64 = 1 << 1;

/// `mlx5_ib_alloc_ucontext_req_v2.flags`: open the context for DEVX.
pub const MLX5_IB_ALLOC_UCTX_DEVX: u32 = 1 << 0;

// `mlx5_ib_alloc_ucontext_resp.comp_mask`.
/// `hca_core_clock_offset` is valid.
pub const MLX5_IB_ALLOC_UCONTEXT_RESP_MASK_CORE_CLOCK_OFFSET: u32 = 1 << 0;
/// `dump_fill_mkey` is valid.
pub const MLX5_IB_ALLOC_UCONTEXT_RESP_MASK_DUMP_FILL_MKEY: u32 = 1 << 1;
/// The device supports enhanced connection establishment.
pub const MLX5_IB_ALLOC_UCONTEXT_RESP_MASK_ECE: u32 = 1 << 2;
/// SQD to RTS is supported.
pub const MLX5_IB_ALLOC_UCONTEXT_RESP_MASK_SQD2RTS: u32 = 1 << 3;
/// Completion timestamps are real time.
pub const MLX5_IB_ALLOC_UCONTEXT_RESP_MASK_REAL_TIME_TS: u32 = 1 << 4;
/// Memory keys carry an update tag.
pub const MLX5_IB_ALLOC_UCONTEXT_RESP_MASK_MKEY_UPDATE_TAG: u32 = 1 << 5;

// `mlx5_ib_alloc_ucontext_resp.cmds_supp_uhw`.
/// QUERY_DEVICE takes mlx5's UHW data.
pub const MLX5_USER_CMDS_SUPP_UHW_QUERY_DEVICE: u32 = 1 << 0;
/// CREATE_AH answers mlx5's UHW data (the destination MAC).
pub const MLX5_USER_CMDS_SUPP_UHW_CREATE_AH: u32 = 1 << 1;

// `mlx5_ib_alloc_ucontext_resp.eth_min_inline` (one above the firmware's
// value, so that 0 means "not reported").
/// Not reported.
pub const MLX5_USER_INLINE_MODE_NA: u32 = 0;
/// No headers need to be inline.
pub const MLX5_USER_INLINE_MODE_NONE: u32 = 1;
/// The L2 header must be inline.
pub const MLX5_USER_INLINE_MODE_L2: u32 = 2;
/// The L2 and IP headers must be inline.
pub const MLX5_USER_INLINE_MODE_IP: u32 = 3;
/// The L2, IP and TCP/UDP headers must be inline.
pub const MLX5_USER_INLINE_MODE_TCP_UDP: u32 = 4;

// `mlx5_ib_create_cq.flags`.
/// 128-byte CQEs padded to a cache line.
pub const MLX5_IB_CREATE_CQ_FLAGS_CQE_128B_PAD: u32 = 1 << 0;
/// `uar_page_index` is valid.
pub const MLX5_IB_CREATE_CQ_FLAGS_UAR_PAGE_INDEX: u32 = 1 << 1;
/// Real-time completion timestamps.
pub const MLX5_IB_CREATE_CQ_FLAGS_REAL_TIME_TS: u32 = 1 << 2;

// `mlx5_ib_create_qp_resp.comp_mask`.
/// `tirn` is valid.
pub const MLX5_IB_CREATE_QP_RESP_MASK_TIRN: u32 = 1 << 0;
/// `tisn` is valid.
pub const MLX5_IB_CREATE_QP_RESP_MASK_TISN: u32 = 1 << 1;
/// `rqn` is valid.
pub const MLX5_IB_CREATE_QP_RESP_MASK_RQN: u32 = 1 << 2;
/// `sqn` is valid.
pub const MLX5_IB_CREATE_QP_RESP_MASK_SQN: u32 = 1 << 3;
/// `tir_icm_addr` is valid.
pub const MLX5_IB_CREATE_QP_RESP_MASK_TIR_ICM_ADDR: u32 = 1 << 4;

// `enum mlx5_ib_mmap_cmd`: the command in the page offset of an mmap of the
// uverbs file (bits 8 and up of the page index; the low 8 bits are the
// argument, e.g. the UAR index).
/// A UAR page, mapped as the driver decides (write-combining if it can).
pub const MLX5_IB_MMAP_REGULAR_PAGE: u32 = 0;
/// Physically contiguous pages (legacy).
pub const MLX5_IB_MMAP_GET_CONTIGUOUS_PAGES: u32 = 1;
/// A UAR page mapped write-combining (blue flame).
pub const MLX5_IB_MMAP_WC_PAGE: u32 = 2;
/// A UAR page mapped non-cached.
pub const MLX5_IB_MMAP_NC_PAGE: u32 = 3;
/// The HCA's free-running clock.
pub const MLX5_IB_MMAP_CORE_CLOCK: u32 = 5;
/// A dynamically allocated write-combining UAR.
pub const MLX5_IB_MMAP_ALLOC_WC: u32 = 6;
/// The clock-info page.
pub const MLX5_IB_MMAP_CLOCK_INFO: u32 = 7;
/// Device memory.
pub const MLX5_IB_MMAP_DEVICE_MEM: u32 = 8;

/// mlx5 UHW input of `GET_CONTEXT`, first version (libmlx5 sends
/// [`mlx5_ib_alloc_ucontext_req_v2`]).
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct mlx5_ib_alloc_ucontext_req {
    /// Blue-flame registers asked for.
    pub total_num_bfregs: u32,
    /// Of those, the ones reserved for one QP each (low latency).
    pub num_low_latency_bfregs: u32,
}
const _: () = assert!(core::mem::size_of::<mlx5_ib_alloc_ucontext_req>() == 8);

/// mlx5 UHW input of `GET_CONTEXT`.
#[repr(C, align(8))]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct mlx5_ib_alloc_ucontext_req_v2 {
    /// Blue-flame registers asked for.
    pub total_num_bfregs: u32,
    /// Of those, the ones reserved for one QP each (low latency).
    pub num_low_latency_bfregs: u32,
    /// `MLX5_IB_ALLOC_UCTX_*`.
    pub flags: u32,
    /// Reserved, zero.
    pub comp_mask: u32,
    /// The highest CQE version the library parses.
    pub max_cqe_version: u8,
    /// Reserved, zero.
    pub reserved0: u8,
    /// Reserved, zero.
    pub reserved1: u16,
    /// Reserved, zero.
    pub reserved2: u32,
    /// `MLX5_LIB_CAP_*`.
    pub lib_caps: u64,
}
const _: () = assert!(core::mem::size_of::<mlx5_ib_alloc_ucontext_req_v2>() == 32);

/// mlx5 UHW output of `GET_CONTEXT`: the context's limits and its
/// blue-flame registers (UARs).
#[repr(C, align(8))]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct mlx5_ib_alloc_ucontext_resp {
    /// Size of the QP number table.
    pub qp_tab_size: u32,
    /// Bytes of one blue-flame register (a half of a UAR's blue-flame area).
    pub bf_reg_size: u32,
    /// Blue-flame registers the context got.
    pub tot_bfregs: u32,
    /// The CPU cache line the device was configured for.
    pub cache_line_size: u32,
    /// Largest send WQE, in bytes.
    pub max_sq_desc_sz: u16,
    /// Largest receive WQE, in bytes.
    pub max_rq_desc_sz: u16,
    /// Largest send queue, in 64-byte basic blocks.
    pub max_send_wqebb: u32,
    /// Largest receive queue, in WQEs.
    pub max_recv_wr: u32,
    /// Largest SRQ, in WQEs.
    pub max_srq_recv_wr: u32,
    /// Ports of the device.
    pub num_ports: u16,
    /// `MLX5_USER_ALLOC_UCONTEXT_FLOW_ACTION_FLAGS_*`.
    pub flow_action_flags: u16,
    /// `MLX5_IB_ALLOC_UCONTEXT_RESP_MASK_*`: the valid optional fields.
    pub comp_mask: u32,
    /// Bytes of this response the kernel filled.
    pub response_length: u32,
    /// The CQE version the CQs use (0 or 1).
    pub cqe_version: u8,
    /// `MLX5_USER_CMDS_SUPP_UHW_*`.
    pub cmds_supp_uhw: u8,
    /// `MLX5_USER_INLINE_MODE_*`: headers a raw Ethernet send must inline.
    pub eth_min_inline: u8,
    /// Bitmap of the clock-info page versions offered.
    pub clock_info_versions: u8,
    /// Offset of the HCA's clock in its page.
    pub hca_core_clock_offset: u64,
    /// log2 of a UAR's size in pages (0: 4 KiB UARs share a system page).
    pub log_uar_size: u32,
    /// UARs in one system page.
    pub num_uars_per_page: u32,
    /// Blue-flame registers that can be allocated dynamically.
    pub num_dyn_bfregs: u32,
    /// The memory key that scatters to a dump (fills nothing).
    pub dump_fill_mkey: u32,
}
const _: () = assert!(core::mem::size_of::<mlx5_ib_alloc_ucontext_resp>() == 72);

/// DC initiator stream limits (part of the query-device answer).
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct mlx5_ib_dci_streams_caps {
    /// log2 of the concurrent streams of a DCI.
    pub max_log_num_concurent: u8,
    /// log2 of the errored streams a DCI keeps.
    pub max_log_num_errored: u8,
}
const _: () = assert!(core::mem::size_of::<mlx5_ib_dci_streams_caps>() == 2);

/// mlx5 UHW output of `ALLOC_PD`.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct mlx5_ib_alloc_pd_resp {
    /// The device's PD number (the UD datagram segment's and the memory
    /// keys' PD).
    pub pdn: u32,
}
const _: () = assert!(core::mem::size_of::<mlx5_ib_alloc_pd_resp>() == 4);

/// mlx5 UHW input of `CREATE_CQ`: the CQ's buffer and doorbell record, in
/// user memory the kernel pins.
#[repr(C, align(8))]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct mlx5_ib_create_cq {
    /// The CQE buffer (page aligned).
    pub buf_addr: u64,
    /// The doorbell record (8 bytes, consumer index and arm word).
    pub db_addr: u64,
    /// Bytes of one CQE: 64 or 128.
    pub cqe_size: u32,
    /// CQE compression on (1) or off (0).
    pub cqe_comp_en: u8,
    /// `MLX5_IB_CQE_RES_FORMAT_*` of compressed CQEs.
    pub cqe_comp_res_format: u8,
    /// `MLX5_IB_CREATE_CQ_FLAGS_*`.
    pub flags: u16,
    /// The UAR page whose doorbell arms the CQ (with the flag).
    pub uar_page_index: u16,
    /// Reserved, zero.
    pub reserved0: u16,
    /// Reserved, zero.
    pub reserved1: u32,
}
const _: () = assert!(core::mem::size_of::<mlx5_ib_create_cq>() == 32);

/// mlx5 UHW output of `CREATE_CQ`.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct mlx5_ib_create_cq_resp {
    /// The CQ number (the arm doorbell's and the CQEs' own).
    pub cqn: u32,
    /// Reserved.
    pub reserved: u32,
}
const _: () = assert!(core::mem::size_of::<mlx5_ib_create_cq_resp>() == 8);

/// `mlx5_ib_create_srq.flags`: the SRQ's WQEs carry a signature.
pub const MLX5_SRQ_FLAG_SIGNATURE: u32 = 1 << 0;

/// mlx5 UHW input of `CREATE_SRQ`: the SRQ's WQE buffer and doorbell
/// record, in user memory the kernel pins.
#[repr(C, align(8))]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct mlx5_ib_create_srq {
    /// The WQE buffer.
    pub buf_addr: u64,
    /// The doorbell record (4 bytes: WQEs posted).
    pub db_addr: u64,
    /// `MLX5_SRQ_FLAG_*`.
    pub flags: u32,
    /// Reserved, zero.
    pub reserved0: u32,
    /// The user index CQEs carry (XRC and tag-matching SRQs only).
    pub uidx: u32,
    /// Reserved, zero.
    pub reserved1: u32,
}
const _: () = assert!(core::mem::size_of::<mlx5_ib_create_srq>() == 32);

/// mlx5 UHW output of `CREATE_SRQ`.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct mlx5_ib_create_srq_resp {
    /// The SRQ number.
    pub srqn: u32,
    /// Reserved.
    pub reserved: u32,
}
const _: () = assert!(core::mem::size_of::<mlx5_ib_create_srq_resp>() == 8);

/// mlx5 UHW input of `RESIZE_CQ`: the new CQE buffer.
#[repr(C, align(8))]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct mlx5_ib_resize_cq {
    /// The new CQE buffer (page aligned).
    pub buf_addr: u64,
    /// Bytes of one CQE: 64 or 128.
    pub cqe_size: u16,
    /// Reserved, zero.
    pub reserved0: u16,
    /// Reserved, zero.
    pub reserved1: u32,
}
const _: () = assert!(core::mem::size_of::<mlx5_ib_resize_cq>() == 16);

/// DCI stream sizes of a new QP (part of [`mlx5_ib_create_qp`]).
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct mlx5_ib_create_qp_dci_streams {
    /// log2 of the concurrent streams.
    pub log_num_concurent: u8,
    /// log2 of the errored streams kept.
    pub log_num_errored: u8,
}
const _: () = assert!(core::mem::size_of::<mlx5_ib_create_qp_dci_streams>() == 2);

/// mlx5 UHW input of `CREATE_QP`: the work queue buffer (RQ first, then
/// SQ) and the doorbell record, in user memory the kernel pins, and the
/// queues' sizes.
#[repr(C, align(8))]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct mlx5_ib_create_qp {
    /// The queue buffer (page aligned): the RQ at offset 0, the SQ after it.
    pub buf_addr: u64,
    /// The doorbell record (receive counter, then send counter).
    pub db_addr: u64,
    /// Send queue basic blocks (a power of two).
    pub sq_wqe_count: u32,
    /// Receive queue WQEs (a power of two).
    pub rq_wqe_count: u32,
    /// log2 of a receive WQE's size.
    pub rq_wqe_shift: u32,
    /// `MLX5_QP_FLAG_*`.
    pub flags: u32,
    /// The user index reported in CQEs of version 1.
    pub uidx: u32,
    /// The blue-flame register the QP rings (with `MLX5_QP_FLAG_BFREG_INDEX`).
    pub bfreg_index: u32,
    /// The SQ's own buffer (raw packet QPs); in C a union with `access_key`
    /// (DC targets).
    pub sq_buf_addr: u64,
    /// Enhanced connection establishment options.
    pub ece_options: u32,
    /// DCI stream sizes.
    pub dci_streams: mlx5_ib_create_qp_dci_streams,
    /// Reserved, zero.
    pub reserved: u16,
}
const _: () = assert!(core::mem::size_of::<mlx5_ib_create_qp>() == 56);

/// mlx5 UHW output of `CREATE_QP`.
#[repr(C, align(8))]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct mlx5_ib_create_qp_resp {
    /// The blue-flame register the kernel gave the QP.
    pub bfreg_index: u32,
    /// Enhanced connection establishment options.
    pub ece_options: u32,
    /// `MLX5_IB_CREATE_QP_RESP_MASK_*`: the valid fields below.
    pub comp_mask: u32,
    /// The TIR number (raw packet QPs).
    pub tirn: u32,
    /// The TIS number (raw packet QPs).
    pub tisn: u32,
    /// The RQ number (raw packet QPs).
    pub rqn: u32,
    /// The SQ number (raw packet QPs).
    pub sqn: u32,
    /// Reserved.
    pub reserved1: u32,
    /// The TIR's ICM address.
    pub tir_icm_addr: u64,
}
const _: () = assert!(core::mem::size_of::<mlx5_ib_create_qp_resp>() == 40);

/// mlx5 UHW output of `CREATE_AH` (with `MLX5_USER_CMDS_SUPP_UHW_CREATE_AH`):
/// the destination MAC a RoCE UD send puts in its datagram segment.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct mlx5_ib_create_ah_resp {
    /// Bytes of this response the kernel filled.
    pub response_length: u32,
    /// The destination MAC address.
    pub dmac: [u8; 6],
    /// Reserved.
    pub reserved: [u8; 6],
}
const _: () = assert!(core::mem::size_of::<mlx5_ib_create_ah_resp>() == 16);

/// Rate limiting of a raw packet QP (part of [`mlx5_ib_modify_qp`]).
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct mlx5_ib_burst_info {
    /// Largest burst, in bytes.
    pub max_burst_sz: u32,
    /// Typical packet size, in bytes.
    pub typical_pkt_sz: u16,
    /// Reserved, zero.
    pub reserved: u16,
}
const _: () = assert!(core::mem::size_of::<mlx5_ib_burst_info>() == 8);

/// mlx5 UHW input of `MODIFY_QP` (extended command).
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct mlx5_ib_modify_qp {
    /// Which optional fields are valid.
    pub comp_mask: u32,
    /// Rate limiting (raw packet QPs).
    pub burst_info: mlx5_ib_burst_info,
    /// Enhanced connection establishment options.
    pub ece_options: u32,
}
const _: () = assert!(core::mem::size_of::<mlx5_ib_modify_qp>() == 16);

/// mlx5 UHW output of `MODIFY_QP` (extended command).
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct mlx5_ib_modify_qp_resp {
    /// Bytes of this response the kernel filled.
    pub response_length: u32,
    /// The DC target number.
    pub dctn: u32,
    /// Enhanced connection establishment options.
    pub ece_options: u32,
    /// Reserved.
    pub reserved: u32,
}
const _: () = assert!(core::mem::size_of::<mlx5_ib_modify_qp_resp>() == 16);
