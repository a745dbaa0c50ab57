//! uverbs: RDMA verbs over the kernel's uverbs interface.

pub mod fork;
pub(crate) mod netlink;
