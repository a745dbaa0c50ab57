//! The mlx5 oracle (issue 39): an emulated mlx5 kernel driver that
//! rdma-core's own provider, Debian's static `libmlx5` and `libibverbs`
//! (rdma-core 44, unmodified), runs against in this package's tests, so
//! that what libmlx5 sends and writes can be compared with what uverbs'
//! mlx5 provider does.
//!
//! - [`sysfs`]: the device as libibverbs discovers it, a fake sysfs tree.
//! - [`ioctl`]: a uverbs ioctl as the caller laid it out in its memory
//!   (header, attributes, the buffers they point at).
//! - [`kernel`]: mlx5_ib's answers (Linux 6.12, `drivers/infiniband/hw/mlx5`)
//!   to the commands a verbs data path sends, and a log of each command.
//! - [`qp`]: mlx5_ib's QPs: CREATE_QP with mlx5's driver data, MODIFY_QP's
//!   state transitions, DESTROY_QP.
//! - [`srq`]: mlx5_ib's SRQs: CREATE_SRQ with mlx5's driver data (both
//!   the ioctl method and the write command), MODIFY/QUERY/DESTROY_SRQ.
//! - [`device`]: what the ConnectX does after a doorbell
//!   ([`kernel::Mlx5Kernel::run_device`]): WQEs executed, bytes moved
//!   between registered regions, CQEs written.
//! - [`cqe`]: the 64-byte CQEs libmlx5 parses.
//! - [`mod@file`]: the same emulated kernel as a `uverbs` transport, so that
//!   uverbs' own mlx5 provider runs against it too.
//!
//! The tests route libibverbs' system calls here with `--wrap`
//! (`build.rs`, `tests/libmlx5.rs`). docs/mlx5.md says what this shows and
//! what it cannot.

pub mod cqe;
pub mod device;
pub mod file;
pub mod fixtures;
pub mod ioctl;
pub mod kernel;
pub mod qp;
pub mod srq;
pub mod sysfs;
