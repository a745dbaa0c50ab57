//! Mirror of `<rdma/siw-abi.h>`: the soft-iWARP (siw) driver-private (UHW)
//! data, and the queue, completion and arming elements siw shares with user
//! space (mapped arrays without headers or indices; see the crate's
//! `provider::siw` for the protocol).

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

/// ABI version of the siw driver.
pub const SIW_ABI_VERSION: u32 = 1;

/// siw UHW output of `GET_CONTEXT`.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct siw_uresp_alloc_ctx {
    /// siw device id.
    pub dev_id: u32,
    /// Padding, zero.
    pub pad: u32,
}
const _: () = assert!(core::mem::size_of::<siw_uresp_alloc_ctx>() == 8);
const _: () = assert!(core::mem::align_of::<siw_uresp_alloc_ctx>() == 4);

/// siw UHW input of `REG_MR`.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct siw_ureq_reg_mr {
    /// User-chosen low 8 bits of the memory key (stag).
    pub stag_key: u8,
    /// Reserved, zero.
    pub reserved: [u8; 3],
    /// Padding, zero.
    pub pad: u32,
}
const _: () = assert!(core::mem::size_of::<siw_ureq_reg_mr>() == 8);
const _: () = assert!(core::mem::align_of::<siw_ureq_reg_mr>() == 4);

/// siw UHW output of `REG_MR`.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct siw_uresp_reg_mr {
    /// The memory key (stag) of the new region.
    pub stag: u32,
    /// Padding, zero.
    pub pad: u32,
}
const _: () = assert!(core::mem::size_of::<siw_uresp_reg_mr>() == 8);
const _: () = assert!(core::mem::align_of::<siw_uresp_reg_mr>() == 4);

/// Scatter/gather elements a send or receive queue element holds.
pub const SIW_MAX_SGE: u32 = 6;
/// Largest mmap key the driver hands out.
pub const SIW_UOBJ_MAX_KEY: u64 = 0x08_ffff;
/// The mmap key of a create response whose queue could not be prepared for
/// mapping (the object must then be destroyed).
pub const SIW_INVAL_UOBJ_KEY: u64 = SIW_UOBJ_MAX_KEY + 1;
/// Inline bytes a send queue element holds: the room of `sge[1..]`.
pub const SIW_MAX_INLINE: u32 = 16 * (SIW_MAX_SGE - 1);

// `enum siw_opcode`: the `opcode` byte of an SQE and of a CQE.

/// RDMA WRITE.
pub const SIW_OP_WRITE: u8 = 0;
/// RDMA READ.
pub const SIW_OP_READ: u8 = 1;
/// RDMA READ, then invalidate the local key.
pub const SIW_OP_READ_LOCAL_INV: u8 = 2;
/// SEND.
pub const SIW_OP_SEND: u8 = 3;
/// SEND with immediate data (not supported by siw).
pub const SIW_OP_SEND_WITH_IMM: u8 = 4;
/// SEND that invalidates the peer's key `rkey`.
pub const SIW_OP_SEND_REMOTE_INV: u8 = 5;
/// Atomic fetch-and-add (not supported by siw).
pub const SIW_OP_FETCH_AND_ADD: u8 = 6;
/// Atomic compare-and-swap (not supported by siw).
pub const SIW_OP_COMP_AND_SWAP: u8 = 7;
/// A receive (CQE opcode of a receive completion).
pub const SIW_OP_RECEIVE: u8 = 8;
/// Provider-internal READ response.
pub const SIW_OP_READ_RESPONSE: u8 = 9;
/// Invalidate a memory key (kernel clients only).
pub const SIW_OP_INVAL_STAG: u8 = 10;
/// Register a memory region (kernel clients only).
pub const SIW_OP_REG_MR: u8 = 11;
/// Number of opcodes.
pub const SIW_NUM_OPCODES: u8 = 12;

// `enum siw_wqe_flags`: the `flags` word of SQEs and RQEs (u16) and of CQEs (u8).

/// The element is owned by its consumer: set by the producer last, cleared by
/// the consumer when done with it.
pub const SIW_WQE_VALID: u16 = 1;
/// The data is inline in `sge[1..]`, its length in `sge[0].length`.
pub const SIW_WQE_INLINE: u16 = 1 << 1;
/// Produce a completion on success.
pub const SIW_WQE_SIGNALLED: u16 = 1 << 2;
/// Set the solicited-event bit for the receiver.
pub const SIW_WQE_SOLICITED: u16 = 1 << 3;
/// Wait for earlier RDMA READs to complete first.
pub const SIW_WQE_READ_FENCE: u16 = 1 << 4;
/// CQE: a key was invalidated (`inval_stag`; kernel CQs only).
pub const SIW_WQE_REM_INVAL: u16 = 1 << 5;
/// Completed (kernel-internal).
pub const SIW_WQE_COMPLETED: u16 = 1 << 6;

// `enum siw_notify_flags`: the `flags` word of `siw_cq_ctrl`.

/// Not armed.
pub const SIW_NOTIFY_NOT: u32 = 0;
/// Armed for the next solicited completion.
pub const SIW_NOTIFY_SOLICITED: u32 = 1 << 0;
/// Armed for the next completion.
pub const SIW_NOTIFY_NEXT_COMPLETION: u32 = 1 << 1;
/// Report missed events (kernel clients only).
pub const SIW_NOTIFY_MISSED_EVENTS: u32 = 1 << 2;
/// All notify flags.
pub const SIW_NOTIFY_ALL: u32 =
    SIW_NOTIFY_SOLICITED | SIW_NOTIFY_NEXT_COMPLETION | SIW_NOTIFY_MISSED_EVENTS;

// `enum siw_wc_status`: the `status` of a CQE.

/// Success.
pub const SIW_WC_SUCCESS: u16 = 0;
/// Local length error.
pub const SIW_WC_LOC_LEN_ERR: u16 = 1;
/// Local protection error.
pub const SIW_WC_LOC_PROT_ERR: u16 = 2;
/// Local QP operation error.
pub const SIW_WC_LOC_QP_OP_ERR: u16 = 3;
/// Flushed: the QP went to the error state.
pub const SIW_WC_WR_FLUSH_ERR: u16 = 4;
/// Bad response.
pub const SIW_WC_BAD_RESP_ERR: u16 = 5;
/// Local access error.
pub const SIW_WC_LOC_ACCESS_ERR: u16 = 6;
/// Remote access error.
pub const SIW_WC_REM_ACCESS_ERR: u16 = 7;
/// Remote invalid request.
pub const SIW_WC_REM_INV_REQ_ERR: u16 = 8;
/// General error.
pub const SIW_WC_GENERAL_ERR: u16 = 9;
/// Number of statuses.
pub const SIW_NUM_WC_STATUS: u16 = 10;

/// siw UHW output of `CREATE_CQ`: where the CQ array is mapped.
#[repr(C, align(8))]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct siw_uresp_create_cq {
    /// CQ id.
    pub cq_id: u32,
    /// CQEs in the array (a power of two).
    pub num_cqe: u32,
    /// mmap offset of `num_cqe` × [`siw_cqe`] followed by a [`siw_cq_ctrl`]
    /// ([`SIW_INVAL_UOBJ_KEY`]: none).
    pub cq_key: u64,
}
const _: () = assert!(core::mem::size_of::<siw_uresp_create_cq>() == 16);
const _: () = assert!(core::mem::align_of::<siw_uresp_create_cq>() == 8);

/// siw UHW output of `CREATE_QP`: where the SQ and RQ arrays are mapped.
#[repr(C, align(8))]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct siw_uresp_create_qp {
    /// QP id (the QP number).
    pub qp_id: u32,
    /// SQEs in the send queue (a power of two).
    pub num_sqe: u32,
    /// RQEs in the receive queue (a power of two; 0 with an SRQ).
    pub num_rqe: u32,
    /// Padding.
    pub pad: u32,
    /// mmap offset of `num_sqe` × [`siw_sqe`].
    pub sq_key: u64,
    /// mmap offset of `num_rqe` × [`siw_rqe`].
    pub rq_key: u64,
}
const _: () = assert!(core::mem::size_of::<siw_uresp_create_qp>() == 32);
const _: () = assert!(core::mem::align_of::<siw_uresp_create_qp>() == 8);

/// One scatter/gather element (the layout of `ibv_sge`).
#[repr(C, align(8))]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct siw_sge {
    /// Virtual address of the local buffer.
    pub laddr: u64,
    /// Length in bytes.
    pub length: u32,
    /// Local key of the region holding the buffer.
    pub lkey: u32,
}
const _: () = assert!(core::mem::size_of::<siw_sge>() == 16);
const _: () = assert!(core::mem::align_of::<siw_sge>() == 8);

/// A send queue element. The C unions are mirrored by their first member:
/// `raddr` shares its bytes with `base_mr`, `sge` with `access` (kernel
/// clients only).
///
/// `flags` is shared with the kernel and must be accessed atomically; this
/// struct only fixes the offsets.
#[repr(C, align(8))]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct siw_sqe {
    /// User's work request id, returned in the completion.
    pub id: u64,
    /// `SIW_WQE_*` flags; [`SIW_WQE_VALID`] hands the element to the kernel.
    pub flags: u16,
    /// SGEs in `sge` (ignored with [`SIW_WQE_INLINE`]).
    pub num_sge: u8,
    /// `SIW_OP_*`.
    pub opcode: u8,
    /// Remote key (WRITE, READ), or the key to invalidate (SEND_REMOTE_INV).
    pub rkey: u32,
    /// Union: remote address (WRITE, READ) / `base_mr`.
    pub raddr: u64,
    /// Union: the SGEs, or the inline data in `sge[1..]` with its length in
    /// `sge[0].length` / `access`.
    pub sge: [siw_sge; SIW_MAX_SGE as usize],
}
const _: () = assert!(core::mem::size_of::<siw_sqe>() == 120);
const _: () = assert!(core::mem::align_of::<siw_sqe>() == 8);

/// A receive queue element.
///
/// `flags` is shared with the kernel and must be accessed atomically.
#[repr(C, align(8))]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct siw_rqe {
    /// User's work request id, returned in the completion.
    pub id: u64,
    /// Exactly [`SIW_WQE_VALID`] hands the element to the kernel.
    pub flags: u16,
    /// SGEs in `sge`.
    pub num_sge: u8,
    /// Used by the kernel only; ignored when set by user space.
    pub opcode: u8,
    /// Unused.
    pub unused: u32,
    /// The SGEs the message is scattered into.
    pub sge: [siw_sge; SIW_MAX_SGE as usize],
}
const _: () = assert!(core::mem::size_of::<siw_rqe>() == 112);
const _: () = assert!(core::mem::align_of::<siw_rqe>() == 8);

/// A completion queue element. The C unions are mirrored by their larger
/// member: `imm_data` shares its first four bytes with `inval_stag`, `qp_id`
/// its bytes with `base_qp` (a kernel pointer, for kernel clients only).
///
/// `flags` is shared with the kernel and must be accessed atomically.
#[repr(C, align(8))]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct siw_cqe {
    /// Work request id of the completed request.
    pub id: u64,
    /// `SIW_WQE_*` flags (low byte); [`SIW_WQE_VALID`] hands it to user space.
    pub flags: u8,
    /// `SIW_OP_*` of the completed request ([`SIW_OP_RECEIVE`] for receives).
    pub opcode: u8,
    /// `SIW_WC_*` status.
    pub status: u16,
    /// Bytes transferred.
    pub bytes: u32,
    /// Union: immediate data / `inval_stag` (its first four bytes).
    pub imm_data: u64,
    /// Union: the QP number (user CQs) / `base_qp`.
    pub qp_id: u64,
}
const _: () = assert!(core::mem::size_of::<siw_cqe>() == 32);
const _: () = assert!(core::mem::align_of::<siw_cqe>() == 8);

/// The CQ's arming word, right after the CQE array in the CQ mapping.
///
/// `flags` is shared with the kernel and must be accessed atomically.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct siw_cq_ctrl {
    /// `SIW_NOTIFY_*`: what the next completion should signal.
    pub flags: u32,
    /// Padding.
    pub pad: u32,
}
const _: () = assert!(core::mem::size_of::<siw_cq_ctrl>() == 8);
const _: () = assert!(core::mem::align_of::<siw_cq_ctrl>() == 4);

/// siw UHW output of `CREATE_SRQ`: where the receive array is mapped.
#[repr(C, align(8))]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct siw_uresp_create_srq {
    /// Elements in the array (a power of two).
    pub num_rqe: u32,
    /// Padding.
    pub pad: u32,
    /// mmap offset of `num_rqe` × [`siw_rqe`] ([`SIW_INVAL_UOBJ_KEY`]: none).
    pub srq_key: u64,
}
const _: () = assert!(core::mem::size_of::<siw_uresp_create_srq>() == 16);
