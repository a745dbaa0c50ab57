//! What the kernel answers about a memory region (`UVERBS_METHOD_QUERY_MR`):
//! a value the method layer builds, so it needs nothing of the crate.

/// The kernel's view of a memory region (`UVERBS_METHOD_QUERY_MR`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MrAttr {
    /// Local key.
    pub lkey: u32,
    /// Remote key.
    pub rkey: u32,
    /// Length in bytes.
    pub length: u64,
    /// The device address of the first byte (`hca_va`: the start address
    /// unless registered otherwise).
    pub iova: u64,
}
