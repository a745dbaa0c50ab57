//! uverbs: RDMA verbs over the kernel's uverbs interface.

pub(crate) mod netlink;
