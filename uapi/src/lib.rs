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
//! * No struct has implicit padding, so each can be viewed as plain bytes.
//! * The layouts and values are checked against the installed C headers by
//!   `tests/c_layout.rs`.
#![no_std]
#![allow(non_camel_case_types)]
#![deny(missing_docs)]

pub mod ib_user_ioctl_cmds;
pub mod ib_user_verbs;
pub mod rdma_user_ioctl_cmds;

pub use ib_user_ioctl_cmds::*;
pub use ib_user_verbs::*;
pub use rdma_user_ioctl_cmds::*;
