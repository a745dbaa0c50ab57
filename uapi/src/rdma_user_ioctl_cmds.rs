//! Mirror of `<rdma/rdma_user_ioctl_cmds.h>`: the `RDMA_VERBS_IOCTL` framing.
//!
//! For convenience this module also re-exports the attribute-namespace constants
//! (`UVERBS_ID_NS_*`, `UVERBS_ATTR_UHW_*`, `UVERBS_ID_DRIVER_NS*`), which the C
//! headers define in `<rdma/ib_user_ioctl_cmds.h>`.

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

pub use crate::ib_user_ioctl_cmds::{
    UVERBS_ATTR_UHW_IN, UVERBS_ATTR_UHW_OUT, UVERBS_ID_DRIVER_NS, UVERBS_ID_DRIVER_NS_WITH_UHW,
    UVERBS_ID_NS_MASK, UVERBS_ID_NS_SHIFT,
};

/// ioctl "type" byte of all RDMA ioctls.
pub const RDMA_IOCTL_MAGIC: u32 = 0x1b;

// The generic `_IOC` encoding. Architectures with other bit positions (powerpc,
// mips, sparc: read 2, write 4, dir shift 29) give the same value for read|write.
const IOC_NRSHIFT: u32 = 0;
const IOC_TYPESHIFT: u32 = 8;
const IOC_SIZESHIFT: u32 = 16;
const IOC_DIRSHIFT: u32 = 30;
const IOC_WRITE: u32 = 1;
const IOC_READ: u32 = 2;

/// ioctl request number of the uverbs ioctl:
/// `_IOWR(RDMA_IOCTL_MAGIC, 1, struct ib_uverbs_ioctl_hdr)` = `0xc0181b01`.
pub const RDMA_VERBS_IOCTL: u32 = ((IOC_READ | IOC_WRITE) << IOC_DIRSHIFT)
    | ((core::mem::size_of::<ib_uverbs_ioctl_hdr>() as u32) << IOC_SIZESHIFT)
    | (RDMA_IOCTL_MAGIC << IOC_TYPESHIFT)
    | (1 << IOC_NRSHIFT);
const _: () = assert!(RDMA_VERBS_IOCTL == 0xc018_1b01);

/// Attribute flag (user input): the kernel must understand this attribute.
pub const UVERBS_ATTR_F_MANDATORY: u16 = 1 << 0;
/// Attribute flag (kernel output): the kernel wrote this output attribute.
pub const UVERBS_ATTR_F_VALID_OUTPUT: u16 = 1 << 1;

/// One attribute of a uverbs ioctl.
#[repr(C, align(8))]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct ib_uverbs_attr {
    /// Command-specific attribute id.
    pub attr_id: u16,
    /// Length in bytes, only for pointers and IDR arrays.
    pub len: u16,
    /// Combination of `UVERBS_ATTR_F_*`.
    pub flags: u16,
    /// The C union `attr_data`: `enum_data { u8 elem_id; u8 reserved; }` (elem_id in
    /// the first byte in memory) or `u16 reserved`.
    pub attr_data: u16,
    /// The C union `data`/`data_s64`: user pointer, inline data (at most 8 bytes),
    /// IDR handle or file descriptor.
    pub data: u64,
}
const _: () = assert!(core::mem::size_of::<ib_uverbs_attr>() == 16);
const _: () = assert!(core::mem::align_of::<ib_uverbs_attr>() == 8);

/// Header of a uverbs ioctl (flexible `attrs[]` array of `ib_uverbs_attr` omitted).
#[repr(C, align(8))]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct ib_uverbs_ioctl_hdr {
    /// Total length in bytes: this header plus all attributes.
    pub length: u16,
    /// Object id (`UVERBS_OBJECT_*`).
    pub object_id: u16,
    /// Method id (`UVERBS_METHOD_*`).
    pub method_id: u16,
    /// Number of attributes that follow.
    pub num_attrs: u16,
    /// Reserved, must be zero.
    pub reserved1: u64,
    /// Driver id (`RDMA_DRIVER_*`) of the device.
    pub driver_id: u32,
    /// Reserved, must be zero.
    pub reserved2: u32,
}
const _: () = assert!(core::mem::size_of::<ib_uverbs_ioctl_hdr>() == 24);
const _: () = assert!(core::mem::align_of::<ib_uverbs_ioctl_hdr>() == 8);
