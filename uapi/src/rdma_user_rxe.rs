//! Mirror of `<rdma/rdma_user_rxe.h>`: the soft-RoCE (rxe) driver-private
//! create responses (where each queue is mapped), the shared rings and the
//! work-queue element layouts that user space writes into them.
//!
//! rxe shares each queue (send, receive, completion) with user space as one
//! mapping: a [`rxe_queue_buf`] header (the element size, the index mask and the two
//! indices, each on its own cache line) followed by the slots.
//!
//! C unions are mirrored without unions (which could not be proven plain data):
//! * `rxe_send_wr.ex` (`imm_data` / `invalidate_rkey`) is one `u32`;
//! * `rxe_send_wr.wr` is 120 raw bytes ([`rxe_send_wr::wr`]); the members that user
//!   space writes have their own structs, named after their path in C
//!   ([`rxe_send_wr_rdma`] is `wr.rdma`, [`rxe_send_wr_atomic`] is `wr.atomic`,
//!   [`rxe_send_wr_ud`] is `wr.ud`), whose bytes are placed at the start of `wr`;
//! * the flexible `sge[]` / `inline_data[]` tail of `rxe_dma_info` is omitted: it
//!   starts right after the struct, i.e. after the whole `rxe_send_wqe` or
//!   `rxe_recv_wqe`.
//!
//! The completion layout (`ib_uverbs_wc`) and the work-request and completion
//! opcodes come from `<rdma/ib_user_verbs.h>`; they live here, next to the only
//! rings that use them, until the CQ commands need them in
//! [`ib_user_verbs`](crate::ib_user_verbs).

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

/// Header at the start of every rxe queue mapping (`data[]` tail omitted: slot *i*
/// starts at byte `size_of::<rxe_queue_buf>() + (i << log2_elem_size)`).
///
/// The indices are shared with the kernel and must be accessed atomically; this
/// struct only fixes their offsets.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct rxe_queue_buf {
    /// log2 of the slot size in bytes (the kernel rounds it up to a power of two).
    pub log2_elem_size: u32,
    /// Number of slots minus one (slots are a power of two).
    pub index_mask: u32,
    /// Padding to the next cache line.
    pub pad_1: [u32; 30],
    /// Producer index (always stored masked).
    pub producer_index: u32,
    /// Padding to the next cache line.
    pub pad_2: [u32; 31],
    /// Consumer index (always stored masked).
    pub consumer_index: u32,
    /// Padding to the first slot.
    pub pad_3: [u32; 31],
}
const _: () = assert!(core::mem::size_of::<rxe_queue_buf>() == 384);
const _: () = assert!(core::mem::align_of::<rxe_queue_buf>() == 4);

/// One scatter/gather element (same layout as `ibv_sge`).
#[repr(C, align(8))]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct rxe_sge {
    /// Virtual address of the local buffer.
    pub addr: u64,
    /// Length in bytes.
    pub length: u32,
    /// Local key of the memory region holding the buffer.
    pub lkey: u32,
}
const _: () = assert!(core::mem::size_of::<rxe_sge>() == 16);
const _: () = assert!(core::mem::align_of::<rxe_sge>() == 8);

/// Progress of a WQE's data transfer (flexible `sge[]` / `inline_data[]` tail
/// omitted; it follows the struct).
#[repr(C, align(8))]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct rxe_dma_info {
    /// Total length of the message in bytes.
    pub length: u32,
    /// Bytes still to transfer (user space sets it to `length`).
    pub resid: u32,
    /// Index of the SGE being transferred (user space sets 0).
    pub cur_sge: u32,
    /// Number of SGEs (or of inline segments) in the tail.
    pub num_sge: u32,
    /// Offset in the current SGE (user space sets 0).
    pub sge_offset: u32,
    /// Reserved.
    pub reserved: u32,
}
const _: () = assert!(core::mem::size_of::<rxe_dma_info>() == 24);
const _: () = assert!(core::mem::align_of::<rxe_dma_info>() == 8);

/// The work request part of a send WQE.
#[repr(C, align(8))]
#[derive(Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct rxe_send_wr {
    /// User's work request id, returned in the completion.
    pub wr_id: u64,
    /// Reserved.
    pub reserved: u32,
    /// Opcode (`IB_UVERBS_WR_*`).
    pub opcode: u32,
    /// Send flags (`IB_SEND_*` of the kernel's `ib_verbs.h`: fence, signaled, ...).
    pub send_flags: u32,
    /// Union `ex`: `imm_data` (big-endian) or `invalidate_rkey`.
    pub ex: u32,
    /// Union `wr`: the bytes of [`rxe_send_wr_rdma`], [`rxe_send_wr_atomic`] or
    /// [`rxe_send_wr_ud`] (or the `mw` / `flush` members), from its start.
    pub wr: [u64; 15],
}
const _: () = assert!(core::mem::size_of::<rxe_send_wr>() == 144);
const _: () = assert!(core::mem::align_of::<rxe_send_wr>() == 8);

/// Member `wr.rdma` of [`rxe_send_wr`] (RDMA WRITE / READ).
#[repr(C, align(8))]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct rxe_send_wr_rdma {
    /// Remote virtual address.
    pub remote_addr: u64,
    /// Remote key.
    pub rkey: u32,
    /// Reserved.
    pub reserved: u32,
}
const _: () = assert!(core::mem::size_of::<rxe_send_wr_rdma>() == 16);
const _: () = assert!(core::mem::align_of::<rxe_send_wr_rdma>() == 8);

/// Member `wr.atomic` of [`rxe_send_wr`] (compare-and-swap, fetch-and-add).
#[repr(C, align(8))]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct rxe_send_wr_atomic {
    /// Remote virtual address (8-byte aligned).
    pub remote_addr: u64,
    /// Compare value (compare-and-swap) or addend (fetch-and-add).
    pub compare_add: u64,
    /// Swap value (compare-and-swap).
    pub swap: u64,
    /// Remote key.
    pub rkey: u32,
    /// Reserved.
    pub reserved: u32,
}
const _: () = assert!(core::mem::size_of::<rxe_send_wr_atomic>() == 32);
const _: () = assert!(core::mem::align_of::<rxe_send_wr_atomic>() == 8);

/// Member `wr.ud` of [`rxe_send_wr`] (sends on a UD QP). 8-aligned like C, whose
/// `rxe_av` holds a GID union with `__be64` members.
#[repr(C, align(8))]
#[derive(Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct rxe_send_wr_ud {
    /// Destination QP number.
    pub remote_qpn: u32,
    /// Destination Q_Key.
    pub remote_qkey: u32,
    /// P_Key index.
    pub pkey_index: u16,
    /// Reserved.
    pub reserved: u16,
    /// Address handle number (from `rxe_create_ah_resp`).
    pub ah_num: u32,
    /// Padding.
    pub pad: [u32; 4],
    /// `struct rxe_av`, copied by providers for kernels without `ah_num` only.
    pub av: [u32; 22],
}
const _: () = assert!(core::mem::size_of::<rxe_send_wr_ud>() == 120);
const _: () = assert!(core::mem::align_of::<rxe_send_wr_ud>() == 8);

/// A send queue element (its `sge[]` or `inline_data[]` follows `dma`).
#[repr(C, align(8))]
#[derive(Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct rxe_send_wqe {
    /// The work request.
    pub wr: rxe_send_wr,
    /// Completion status (kernel-owned).
    pub status: u32,
    /// Processing state (user space sets 0).
    pub state: u32,
    /// Remote address of the operation.
    pub iova: u64,
    /// Opcode mask (kernel-owned; user space does not set it).
    pub mask: u32,
    /// First PSN (kernel-owned).
    pub first_psn: u32,
    /// Last PSN (kernel-owned).
    pub last_psn: u32,
    /// Acknowledged length (kernel-owned).
    pub ack_length: u32,
    /// Send sequence number (kernel-owned).
    pub ssn: u32,
    /// Read/atomic resource held (kernel-owned).
    pub has_rd_atomic: u32,
    /// Data transfer state; the SGE list or inline data follows it.
    pub dma: rxe_dma_info,
}
const _: () = assert!(core::mem::size_of::<rxe_send_wqe>() == 208);
const _: () = assert!(core::mem::align_of::<rxe_send_wqe>() == 8);

/// A receive queue element (its `sge[]` follows `dma`).
#[repr(C, align(8))]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct rxe_recv_wqe {
    /// User's work request id, returned in the completion.
    pub wr_id: u64,
    /// Reserved.
    pub reserved: u32,
    /// Padding.
    pub padding: u32,
    /// Data transfer state; the SGE list follows it.
    pub dma: rxe_dma_info,
}
const _: () = assert!(core::mem::size_of::<rxe_recv_wqe>() == 40);
const _: () = assert!(core::mem::align_of::<rxe_recv_wqe>() == 8);

/// Work completion as the kernel writes it into a user CQ
/// (`<rdma/ib_user_verbs.h>`).
#[repr(C, align(8))]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct ib_uverbs_wc {
    /// Work request id of the completed request.
    pub wr_id: u64,
    /// Status (`enum ib_wc_status` of the kernel).
    pub status: u32,
    /// Opcode (`IB_UVERBS_WC_*`, or the kernel's `IB_WC_RECV*` for receives).
    pub opcode: u32,
    /// Vendor error syndrome.
    pub vendor_err: u32,
    /// Bytes transferred.
    pub byte_len: u32,
    /// Union `ex`: `imm_data` (big-endian) or `invalidate_rkey`.
    pub ex: u32,
    /// Local QP number.
    pub qp_num: u32,
    /// Source QP number (UD).
    pub src_qp: u32,
    /// Completion flags (the kernel's `IB_WC_*` flags).
    pub wc_flags: u32,
    /// P_Key index (GSI).
    pub pkey_index: u16,
    /// Source LID.
    pub slid: u16,
    /// Service level.
    pub sl: u8,
    /// Destination LID path bits.
    pub dlid_path_bits: u8,
    /// Port number.
    pub port_num: u8,
    /// Reserved.
    pub reserved: u8,
}
const _: () = assert!(core::mem::size_of::<ib_uverbs_wc>() == 48);
const _: () = assert!(core::mem::align_of::<ib_uverbs_wc>() == 8);

/// Completion opcode: send (`enum ib_uverbs_wc_opcode`).
pub const IB_UVERBS_WC_SEND: u32 = 0;
/// Completion opcode: RDMA write.
pub const IB_UVERBS_WC_RDMA_WRITE: u32 = 1;
/// Completion opcode: RDMA read.
pub const IB_UVERBS_WC_RDMA_READ: u32 = 2;
/// Completion opcode: atomic compare-and-swap.
pub const IB_UVERBS_WC_COMP_SWAP: u32 = 3;
/// Completion opcode: atomic fetch-and-add.
pub const IB_UVERBS_WC_FETCH_ADD: u32 = 4;
/// Completion opcode: memory window bind.
pub const IB_UVERBS_WC_BIND_MW: u32 = 5;
/// Completion opcode: local invalidate.
pub const IB_UVERBS_WC_LOCAL_INV: u32 = 6;
/// Completion opcode: TCP segmentation offload send.
pub const IB_UVERBS_WC_TSO: u32 = 7;

/// Work request opcode: RDMA write (`enum ib_uverbs_wr_opcode`).
pub const IB_UVERBS_WR_RDMA_WRITE: u32 = 0;
/// Work request opcode: RDMA write with immediate data.
pub const IB_UVERBS_WR_RDMA_WRITE_WITH_IMM: u32 = 1;
/// Work request opcode: send.
pub const IB_UVERBS_WR_SEND: u32 = 2;
/// Work request opcode: send with immediate data.
pub const IB_UVERBS_WR_SEND_WITH_IMM: u32 = 3;
/// Work request opcode: RDMA read.
pub const IB_UVERBS_WR_RDMA_READ: u32 = 4;
/// Work request opcode: atomic compare-and-swap.
pub const IB_UVERBS_WR_ATOMIC_CMP_AND_SWP: u32 = 5;
/// Work request opcode: atomic fetch-and-add.
pub const IB_UVERBS_WR_ATOMIC_FETCH_AND_ADD: u32 = 6;
/// Work request opcode: local invalidate.
pub const IB_UVERBS_WR_LOCAL_INV: u32 = 7;
/// Work request opcode: memory window bind.
pub const IB_UVERBS_WR_BIND_MW: u32 = 8;
/// Work request opcode: send with invalidate.
pub const IB_UVERBS_WR_SEND_WITH_INV: u32 = 9;
/// Work request opcode: TCP segmentation offload send.
pub const IB_UVERBS_WR_TSO: u32 = 10;
/// Work request opcode: RDMA read with invalidate.
pub const IB_UVERBS_WR_RDMA_READ_WITH_INV: u32 = 11;
/// Work request opcode: masked atomic compare-and-swap.
pub const IB_UVERBS_WR_MASKED_ATOMIC_CMP_AND_SWP: u32 = 12;
/// Work request opcode: masked atomic fetch-and-add.
pub const IB_UVERBS_WR_MASKED_ATOMIC_FETCH_AND_ADD: u32 = 13;

// The driver-private (UHW) responses of the create commands.

/// Where one rxe queue lives: `mmap(size)` at `offset` on the command fd.
#[repr(C, align(8))]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct mminfo {
    /// The mmap offset of the queue.
    pub offset: u64,
    /// The size of the mapping in bytes.
    pub size: u32,
    /// Padding.
    pub pad: u32,
}
const _: () = assert!(core::mem::size_of::<mminfo>() == 16);

/// rxe's UHW out of `CREATE_CQ`: the completion ring.
#[repr(C, align(8))]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct rxe_create_cq_resp {
    /// The CQ ring.
    pub mi: mminfo,
}
const _: () = assert!(core::mem::size_of::<rxe_create_cq_resp>() == 16);

/// rxe's UHW out of `RESIZE_CQ`: the new completion ring.
#[repr(C, align(8))]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct rxe_resize_cq_resp {
    /// The new CQ ring (the old mapping is stale).
    pub mi: mminfo,
}
const _: () = assert!(core::mem::size_of::<rxe_resize_cq_resp>() == 16);

/// rxe's UHW out of `CREATE_QP`: the receive ring first, then the send ring.
#[repr(C, align(8))]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct rxe_create_qp_resp {
    /// The receive queue ring (zero size with an SRQ).
    pub rq_mi: mminfo,
    /// The send queue ring.
    pub sq_mi: mminfo,
}
const _: () = assert!(core::mem::size_of::<rxe_create_qp_resp>() == 32);

/// rxe's UHW out of `CREATE_AH`.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct rxe_create_ah_resp {
    /// The AH number a UD send WQE names (0: an old kernel).
    pub ah_num: u32,
    /// Reserved.
    pub reserved: u32,
}
const _: () = assert!(core::mem::size_of::<rxe_create_ah_resp>() == 8);

/// rxe's UHW out of `CREATE_SRQ`: the SRQ's ring.
#[repr(C, align(8))]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct rxe_create_srq_resp {
    /// The ring.
    pub mi: mminfo,
    /// The SRQ number.
    pub srq_num: u32,
    /// Reserved.
    pub reserved: u32,
}
const _: () = assert!(core::mem::size_of::<rxe_create_srq_resp>() == 24);

/// rxe's UHW in of `MODIFY_SRQ`: where the kernel writes the new ring's `mminfo` after a resize (`IB_SRQ_MAX_WR`).
#[repr(C, align(8))]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct rxe_modify_srq_cmd {
    /// User pointer to an `mminfo`.
    pub mmap_info_addr: u64,
}
const _: () = assert!(core::mem::size_of::<rxe_modify_srq_cmd>() == 8);
