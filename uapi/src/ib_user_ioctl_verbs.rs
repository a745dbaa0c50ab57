//! Mirror of `<rdma/ib_user_ioctl_verbs.h>`: access flags, core support bits and
//! driver ids.
//!
//! Items marked "newer than the 6.1 header" come from later kernels and are not
//! checked against the locally installed C header.

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

/// First bit of the optional access-flag range (drivers ignore unknown optional bits).
pub const IB_UVERBS_ACCESS_OPTIONAL_FIRST: u32 = 1 << 20;
/// Last bit of the optional access-flag range.
pub const IB_UVERBS_ACCESS_OPTIONAL_LAST: u32 = 1 << 29;

/// Core support bit: the kernel accepts optional MR access flags.
pub const IB_UVERBS_CORE_SUPPORT_OPTIONAL_MR_ACCESS: u64 = 1 << 0;
/// Core support bit: robust udata handling (newer than the 6.1 header).
pub const IB_UVERBS_CORE_SUPPORT_ROBUST_UDATA: u64 = 1 << 1;

/// Access flag: local write access.
pub const IB_UVERBS_ACCESS_LOCAL_WRITE: u32 = 1 << 0;
/// Access flag: remote write access.
pub const IB_UVERBS_ACCESS_REMOTE_WRITE: u32 = 1 << 1;
/// Access flag: remote read access.
pub const IB_UVERBS_ACCESS_REMOTE_READ: u32 = 1 << 2;
/// Access flag: remote atomic access.
pub const IB_UVERBS_ACCESS_REMOTE_ATOMIC: u32 = 1 << 3;
/// Access flag: memory windows may be bound.
pub const IB_UVERBS_ACCESS_MW_BIND: u32 = 1 << 4;
/// Access flag: zero-based addressing.
pub const IB_UVERBS_ACCESS_ZERO_BASED: u32 = 1 << 5;
/// Access flag: on-demand paging.
pub const IB_UVERBS_ACCESS_ON_DEMAND: u32 = 1 << 6;
/// Access flag: the memory is backed by huge pages.
pub const IB_UVERBS_ACCESS_HUGETLB: u32 = 1 << 7;
/// Access flag: global flush (newer than the 6.1 header).
pub const IB_UVERBS_ACCESS_FLUSH_GLOBAL: u32 = 1 << 8;
/// Access flag: persistent flush (newer than the 6.1 header).
pub const IB_UVERBS_ACCESS_FLUSH_PERSISTENT: u32 = 1 << 9;
/// Access flag (optional): relaxed PCIe ordering.
pub const IB_UVERBS_ACCESS_RELAXED_ORDERING: u32 = IB_UVERBS_ACCESS_OPTIONAL_FIRST;
/// Mask of all optional access-flag bits (20..=29).
pub const IB_UVERBS_ACCESS_OPTIONAL_RANGE: u32 =
    ((IB_UVERBS_ACCESS_OPTIONAL_LAST << 1) - 1) & !(IB_UVERBS_ACCESS_OPTIONAL_FIRST - 1);

/// Driver id: unknown.
pub const RDMA_DRIVER_UNKNOWN: u32 = 0;
/// Driver id: Mellanox mlx5.
pub const RDMA_DRIVER_MLX5: u32 = 1;
/// Driver id: Mellanox mlx4.
pub const RDMA_DRIVER_MLX4: u32 = 2;
/// Driver id: Chelsio cxgb3 (driver removed, value kept).
pub const RDMA_DRIVER_CXGB3: u32 = 3;
/// Driver id: Chelsio cxgb4.
pub const RDMA_DRIVER_CXGB4: u32 = 4;
/// Driver id: Mellanox mthca.
pub const RDMA_DRIVER_MTHCA: u32 = 5;
/// Driver id: Broadcom bnxt_re.
pub const RDMA_DRIVER_BNXT_RE: u32 = 6;
/// Driver id: Emulex ocrdma.
pub const RDMA_DRIVER_OCRDMA: u32 = 7;
/// Driver id: Intel nes (driver removed, value kept).
pub const RDMA_DRIVER_NES: u32 = 8;
/// Driver id: Intel i40iw.
pub const RDMA_DRIVER_I40IW: u32 = 9;
/// Driver id: Intel irdma (same value as i40iw).
pub const RDMA_DRIVER_IRDMA: u32 = RDMA_DRIVER_I40IW;
/// Driver id: VMware pvrdma.
pub const RDMA_DRIVER_VMW_PVRDMA: u32 = 10;
/// Driver id: QLogic qedr.
pub const RDMA_DRIVER_QEDR: u32 = 11;
/// Driver id: HiSilicon hns.
pub const RDMA_DRIVER_HNS: u32 = 12;
/// Driver id: Cisco usnic.
pub const RDMA_DRIVER_USNIC: u32 = 13;
/// Driver id: soft RoCE (rxe).
pub const RDMA_DRIVER_RXE: u32 = 14;
/// Driver id: Intel hfi1.
pub const RDMA_DRIVER_HFI1: u32 = 15;
/// Driver id: QLogic qib.
pub const RDMA_DRIVER_QIB: u32 = 16;
/// Driver id: Amazon efa.
pub const RDMA_DRIVER_EFA: u32 = 17;
/// Driver id: soft iWARP (siw).
pub const RDMA_DRIVER_SIW: u32 = 18;
/// Driver id: Alibaba erdma.
pub const RDMA_DRIVER_ERDMA: u32 = 19;
/// Driver id: Microsoft mana (newer than the 6.1 header).
pub const RDMA_DRIVER_MANA: u32 = 20;
/// Driver id: AMD ionic (newer than the 6.1 header).
pub const RDMA_DRIVER_IONIC: u32 = 21;

/// `ib_uverbs_query_port_flags`: a GRH is required on this port.
pub const IB_UVERBS_QPF_GRH_REQUIRED: u32 = 1 << 0;

/// GID type: InfiniBand (or RoCE v1 on Ethernet ports, as sysfs says it).
pub const IB_UVERBS_GID_TYPE_IB: u32 = 0;
/// GID type: RoCE v1.
pub const IB_UVERBS_GID_TYPE_ROCE_V1: u32 = 1;
/// GID type: RoCE v2 (RoCE over UDP/IP).
pub const IB_UVERBS_GID_TYPE_ROCE_V2: u32 = 2;

/// Answer of `UVERBS_METHOD_QUERY_PORT`: the legacy response and more.
///
/// Mirrors the 6.1 header, where the tail after `port_cap_flags2` is
/// `reserved[6]`. Later kernels (6.12 among them) split it into
/// `__u8 reserved[2]` and `__u32 active_speed_ex` (host order, at offset
/// 44), which is `reserved[2..6]` here.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct ib_uverbs_query_port_resp_ex {
    /// The write command's response.
    pub legacy_resp: crate::ib_user_verbs::ib_uverbs_query_port_resp,
    /// More port capability flags (`IB_UVERBS_PCF2_*` in libibverbs).
    pub port_cap_flags2: u16,
    /// Reserved in 6.1; `reserved[2]` + `active_speed_ex` in later kernels.
    pub reserved: [u8; 6],
}
const _: () = assert!(core::mem::size_of::<ib_uverbs_query_port_resp_ex>() == 48);
const _: () = assert!(core::mem::align_of::<ib_uverbs_query_port_resp_ex>() == 4);

/// One GID table entry, as `QUERY_GID_ENTRY` and `QUERY_GID_TABLE` answer it.
#[repr(C, align(8))]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct ib_uverbs_gid_entry {
    /// The 16 GID bytes in network order (`__aligned_u64 gid[2]`: raw bytes).
    pub gid: [u64; 2],
    /// Index in the port's GID table.
    pub gid_index: u32,
    /// Port number.
    pub port_num: u32,
    /// `IB_UVERBS_GID_TYPE_*`.
    pub gid_type: u32,
    /// Index of the network device behind the GID, 0 if none.
    pub netdev_ifindex: u32,
}
const _: () = assert!(core::mem::size_of::<ib_uverbs_gid_entry>() == 32);
const _: () = assert!(core::mem::align_of::<ib_uverbs_gid_entry>() == 8);

/// QP type: reliable connected.
pub const IB_UVERBS_QPT_RC: u32 = 2;
/// QP type: unreliable connected.
pub const IB_UVERBS_QPT_UC: u32 = 3;
/// QP type: unreliable datagram.
pub const IB_UVERBS_QPT_UD: u32 = 4;
/// QP type: raw packet.
pub const IB_UVERBS_QPT_RAW_PACKET: u32 = 8;
/// QP type: XRC initiator.
pub const IB_UVERBS_QPT_XRC_INI: u32 = 9;
/// QP type: XRC target.
pub const IB_UVERBS_QPT_XRC_TGT: u32 = 10;
/// QP type: driver-specific.
pub const IB_UVERBS_QPT_DRIVER: u32 = 0xFF;

/// QP create flag: block multicast loopback.
pub const IB_UVERBS_QP_CREATE_BLOCK_MULTICAST_LOOPBACK: u32 = 1 << 1;
/// QP create flag: scatter the FCS.
pub const IB_UVERBS_QP_CREATE_SCATTER_FCS: u32 = 1 << 8;
/// QP create flag: strip C-VLAN.
pub const IB_UVERBS_QP_CREATE_CVLAN_STRIPPING: u32 = 1 << 9;
/// QP create flag: pad PCI writes to the end.
pub const IB_UVERBS_QP_CREATE_PCI_WRITE_END_PADDING: u32 = 1 << 11;
/// QP create flag: every send WR is signalled (the ioctl's `sq_sig_all`).
pub const IB_UVERBS_QP_CREATE_SQ_SIG_ALL: u32 = 1 << 12;

/// A QP's queue capacities, as `QP_CREATE` takes and answers them.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct ib_uverbs_qp_cap {
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
}
const _: () = assert!(core::mem::size_of::<ib_uverbs_qp_cap>() == 20);
