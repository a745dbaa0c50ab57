//! Mirror of `<rdma/siw-abi.h>`: the soft-iWARP (siw) driver-private (UHW) data.

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
