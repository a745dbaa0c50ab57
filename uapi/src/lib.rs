//! Plain-data mirror of the Linux RDMA uverbs UAPI headers.
//!
//! Like `linux-raw-sys`, this crate holds no logic: only constants and `#[repr(C)]`
//! structs named exactly as in the C headers (`/usr/include/rdma/*.h`). One module
//! mirrors one header and everything is re-exported at the crate root.
//!
//! Conventions:
//! * C flexible array tails (`driver_data[]`, `attrs[]`) are omitted; the trailing
//!   data is placed right after the struct's bytes.
//! * `__u64`/`__aligned_u64` become `u64`; structs holding one are `align(8)` on every
//!   architecture, like `__aligned_u64`. `__be64` becomes a raw `u64` holding
//!   big-endian bytes.
//! * No struct has implicit padding and every bit pattern of every struct is valid.
//!   Each derives zerocopy's `FromBytes`, `IntoBytes`, `Immutable` and `KnownLayout`,
//!   whose derives refuse to compile a struct with padding (or a field that is not
//!   plain data), so the claim is checked by the compiler; byte views of a struct
//!   go through zerocopy's safe methods (`as_bytes`, `read_from_bytes`, ...).
//! * The layouts and values are checked against the installed C headers by
//!   `tests/c_layout.rs`.
//! * `<rdma/rdma_user_rxe.h>` defines no ABI version constant; its create
//!   responses, shared-ring and WQE layouts are in [`rdma_user_rxe`].
#![no_std]
#![allow(non_camel_case_types)]
#![deny(missing_docs)]

pub mod ib_user_ioctl_cmds;
pub mod ib_user_ioctl_verbs;
pub mod ib_user_verbs;
pub mod mlx5_abi;
pub mod mlx5_user_ioctl_cmds;
pub mod rdma_netlink;
pub mod rdma_user_cm;
pub mod rdma_user_ioctl_cmds;
pub mod rdma_user_rxe;
pub mod siw_abi;

pub use ib_user_ioctl_cmds::*;
pub use ib_user_ioctl_verbs::*;
pub use ib_user_verbs::*;
pub use mlx5_abi::*;
pub use mlx5_user_ioctl_cmds::*;
pub use rdma_netlink::*;
pub use rdma_user_cm::*;
pub use rdma_user_ioctl_cmds::*;
pub use rdma_user_rxe::*;
pub use siw_abi::*;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ioctl_number_and_netlink_type() {
        assert_eq!(RDMA_VERBS_IOCTL, 0xc018_1b01);
        assert_eq!(RDMA_NL_GET_TYPE(5, 6), 0x1406);
        assert_eq!(
            RDMA_NL_GET_TYPE(RDMA_NL_NLDEV, RDMA_NLDEV_CMD_SYS_GET),
            0x1406
        );
    }

    /// Items newer than Debian's 6.1 headers cannot be checked against C here;
    /// pin them to the values of the current kernel UAPI instead.
    #[test]
    fn newer_than_local_headers() {
        assert_eq!(UVERBS_ID_DRIVER_NS, 0x1000);
        assert_eq!(UVERBS_ID_DRIVER_NS_WITH_UHW, 0x1002);
        assert_eq!(UVERBS_ATTR_GET_CONTEXT_FD_ARR, 2);
        assert_eq!(IB_UVERBS_ACCESS_FLUSH_GLOBAL, 0x100);
        assert_eq!(IB_UVERBS_ACCESS_FLUSH_PERSISTENT, 0x200);
        assert_eq!(IB_UVERBS_CORE_SUPPORT_ROBUST_UDATA, 2);
        assert_eq!(RDMA_DRIVER_MANA, 20);
        assert_eq!(RDMA_DRIVER_IONIC, 21);
        // Linux 6.17: the method follows REG_DMABUF_MR in enum
        // uverbs_methods_mr, its attributes count from 0 with DMA_HANDLE at 2.
        assert_eq!(UVERBS_METHOD_REG_MR, UVERBS_METHOD_REG_DMABUF_MR + 1);
        assert_eq!(UVERBS_METHOD_REG_MR, 5);
        let reg_mr_attrs = [
            UVERBS_ATTR_REG_MR_HANDLE,
            UVERBS_ATTR_REG_MR_PD_HANDLE,
            UVERBS_ATTR_REG_MR_DMA_HANDLE,
            UVERBS_ATTR_REG_MR_IOVA,
            UVERBS_ATTR_REG_MR_ADDR,
            UVERBS_ATTR_REG_MR_LENGTH,
            UVERBS_ATTR_REG_MR_ACCESS_FLAGS,
            UVERBS_ATTR_REG_MR_FD,
            UVERBS_ATTR_REG_MR_FD_OFFSET,
            UVERBS_ATTR_REG_MR_RESP_LKEY,
            UVERBS_ATTR_REG_MR_RESP_RKEY,
        ];
        assert_eq!(reg_mr_attrs, [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10]);
    }

    #[test]
    fn reexports_resolve_to_one_item() {
        assert_eq!(
            rdma_user_ioctl_cmds::UVERBS_ATTR_UHW_IN,
            ib_user_ioctl_cmds::UVERBS_ATTR_UHW_IN
        );
        assert_eq!(UVERBS_ATTR_UHW_IN, 0x1000);
        assert_eq!(UVERBS_ATTR_UHW_OUT, 0x1001);
        assert_eq!(IB_UVERBS_ACCESS_OPTIONAL_RANGE, 0x3ff0_0000);
    }
}
