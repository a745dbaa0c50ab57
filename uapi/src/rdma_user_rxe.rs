//! Mirror of `<rdma/rdma_user_rxe.h>`: the driver-private (UHW) responses of
//! soft RoCE (rxe) that the data path needs (where each queue is mapped).

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

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
