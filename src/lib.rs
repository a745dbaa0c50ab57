//! uverbs: RDMA verbs over the kernel's uverbs interface.
