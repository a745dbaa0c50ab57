//! RDMA netlink (placeholder until the netlink client lands).

/// What netlink says about a device's uverbs character device.
#[derive(Clone, Debug, Default)]
pub(crate) struct ChardevInfo {
    pub driver_id: Option<u32>,
    pub dev: Option<(u32, u32)>,
    pub abi: Option<u64>,
    pub name: Option<String>,
}

/// The uverbs chardev of `ibdev` (not implemented yet).
pub(crate) fn uverbs_chardev(_ibdev: &str) -> std::io::Result<Option<ChardevInfo>> {
    Err(std::io::ErrorKind::Unsupported.into())
}
