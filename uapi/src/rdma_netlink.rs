//! Mirror of `<rdma/rdma_netlink.h>` (plus `NETLINK_RDMA` from `<linux/netlink.h>`):
//! the RDMA netlink (nldev) constants used to find devices and their char devices.

/// Netlink protocol number of RDMA netlink sockets (`<linux/netlink.h>`).
pub const NETLINK_RDMA: i32 = 20;

/// RDMA netlink client: the device interface (nldev).
pub const RDMA_NL_NLDEV: u16 = 5;

/// Netlink message type of an RDMA netlink client operation: `(client << 10) + op`.
#[allow(non_snake_case)]
pub const fn RDMA_NL_GET_TYPE(client: u16, op: u16) -> u16 {
    (client << 10) + op
}

/// nldev command: get device information (can dump).
pub const RDMA_NLDEV_CMD_GET: u16 = 1;
/// nldev command: get system-wide settings.
pub const RDMA_NLDEV_CMD_SYS_GET: u16 = 6;
/// nldev command: set system-wide settings.
pub const RDMA_NLDEV_CMD_SYS_SET: u16 = 7;
/// nldev command: get the char device of a device/client.
pub const RDMA_NLDEV_CMD_GET_CHARDEV: u16 = 15;

/// nldev attribute: device index (u32).
pub const RDMA_NLDEV_ATTR_DEV_INDEX: u16 = 1;
/// nldev attribute: device name (string).
pub const RDMA_NLDEV_ATTR_DEV_NAME: u16 = 2;
/// nldev attribute: network namespace mode (u8).
pub const RDMA_NLDEV_SYS_ATTR_NETNS_MODE: u16 = 66;
/// nldev attribute: device protocol (string).
pub const RDMA_NLDEV_ATTR_DEV_PROTOCOL: u16 = 67;
/// nldev attribute: char device ABI name, e.g. `"uverbs"` (string).
pub const RDMA_NLDEV_ATTR_CHARDEV_TYPE: u16 = 69;
/// nldev attribute: kernel name of the `/dev` file (string).
pub const RDMA_NLDEV_ATTR_CHARDEV_NAME: u16 = 70;
/// nldev attribute: char device ABI revision (u64).
pub const RDMA_NLDEV_ATTR_CHARDEV_ABI: u16 = 71;
/// nldev attribute: 64-bit `dev_t` of the char device (u64).
pub const RDMA_NLDEV_ATTR_CHARDEV: u16 = 72;
/// nldev attribute: uverbs driver id, `RDMA_DRIVER_*` (u32).
pub const RDMA_NLDEV_ATTR_UVERBS_DRIVER_ID: u16 = 73;
/// nldev attribute: the kernel copies pinned pages on fork (u8).
pub const RDMA_NLDEV_SYS_ATTR_COPY_ON_FORK: u16 = 93;
