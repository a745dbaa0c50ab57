//! Access flags of a memory region and the change flags of a re-registration.
//!
//! Both are bit sets whose values are the kernel's (`IB_UVERBS_ACCESS_*`,
//! `IB_MR_REREG_*`), so they go to the kernel unchanged.

use bitflags::bitflags;
use uverbs_uapi as sys;

bitflags! {
    /// What a memory region allows: local writes, remote reads/writes/atomics, ….
    ///
    /// The values are the kernel's `IB_UVERBS_ACCESS_*` bits (identical to
    /// libibverbs' `enum ibv_access_flags`). Bits this type does not name can
    /// still be carried with [`AccessFlags::from_bits_retain`]; the kernel
    /// decides whether it accepts them.
    #[doc(alias = "ibv_access_flags")]
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
    pub struct AccessFlags: u32 {
        /// The local CPU's work requests may write the region (`IBV_ACCESS_LOCAL_WRITE`).
        const LOCAL_WRITE = sys::IB_UVERBS_ACCESS_LOCAL_WRITE;
        /// Remote peers may RDMA-write the region; needs `LOCAL_WRITE`.
        const REMOTE_WRITE = sys::IB_UVERBS_ACCESS_REMOTE_WRITE;
        /// Remote peers may RDMA-read the region.
        const REMOTE_READ = sys::IB_UVERBS_ACCESS_REMOTE_READ;
        /// Remote peers may run atomics on the region; needs `LOCAL_WRITE`.
        const REMOTE_ATOMIC = sys::IB_UVERBS_ACCESS_REMOTE_ATOMIC;
        /// Memory windows may be bound to the region.
        const MW_BIND = sys::IB_UVERBS_ACCESS_MW_BIND;
        /// Addresses on the wire start at 0 instead of the virtual address.
        const ZERO_BASED = sys::IB_UVERBS_ACCESS_ZERO_BASED;
        /// On-demand paging: pages are not pinned at registration.
        const ON_DEMAND = sys::IB_UVERBS_ACCESS_ON_DEMAND;
        /// The memory is backed by huge pages.
        const HUGETLB = sys::IB_UVERBS_ACCESS_HUGETLB;
        /// Remote global-visibility flush.
        const FLUSH_GLOBAL = sys::IB_UVERBS_ACCESS_FLUSH_GLOBAL;
        /// Remote persistence flush.
        const FLUSH_PERSISTENT = sys::IB_UVERBS_ACCESS_FLUSH_PERSISTENT;
        /// Relaxed PCI ordering (an optional bit: devices that lack it ignore it).
        const RELAXED_ORDERING = sys::IB_UVERBS_ACCESS_RELAXED_ORDERING;
    }
}

impl AccessFlags {
    /// True when the kernel pins the pages writable for this access
    /// (`LOCAL_WRITE | REMOTE_WRITE | REMOTE_ATOMIC | MW_BIND`).
    pub fn is_writable(self) -> bool {
        self.intersects(
            Self::LOCAL_WRITE | Self::REMOTE_WRITE | Self::REMOTE_ATOMIC | Self::MW_BIND,
        )
    }

    /// True when a remote peer may write the region's bytes behind the
    /// program's back: `REMOTE_WRITE`, `REMOTE_ATOMIC`, `MW_BIND` (a bound
    /// window may grant remote write), or a bit this type does not name
    /// (which might). Such memory is registered with
    /// [`reg_remote_buffer`](crate::ProtectionDomain::reg_remote_buffer),
    /// never as a [`BufferMr`](crate::BufferMr) with its plain slices.
    pub fn lets_peers_write(self) -> bool {
        self.intersects(Self::REMOTE_WRITE | Self::REMOTE_ATOMIC | Self::MW_BIND)
            || self.bits() & !Self::all().bits() != 0
    }
}

bitflags! {
    /// What a re-registration changes (`enum ibv_rereg_mr_flags`).
    ///
    /// Unknown bits can be carried with [`ReregFlags::from_bits_retain`]; a
    /// re-registration with such bits fails with the INPUT outcome, as in
    /// libibverbs, without reaching the kernel.
    #[doc(alias = "ibv_rereg_mr_flags")]
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
    pub struct ReregFlags: u32 {
        /// Point the region at a new address range (`IBV_REREG_MR_CHANGE_TRANSLATION`).
        #[doc(alias = "IBV_REREG_MR_CHANGE_TRANSLATION")]
        const TRANSLATION = 1 << 0;
        /// Move the region to another protection domain (`IBV_REREG_MR_CHANGE_PD`).
        #[doc(alias = "IBV_REREG_MR_CHANGE_PD")]
        const PD = 1 << 1;
        /// Change the access flags (`IBV_REREG_MR_CHANGE_ACCESS`).
        #[doc(alias = "IBV_REREG_MR_CHANGE_ACCESS")]
        const ACCESS = 1 << 2;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rereg_flag_values_match_libibverbs() {
        assert_eq!(ReregFlags::TRANSLATION.bits(), 1);
        assert_eq!(ReregFlags::PD.bits(), 2);
        assert_eq!(ReregFlags::ACCESS.bits(), 4);
        // IBV_REREG_MR_FLAGS_SUPPORTED = (CHANGE_ACCESS << 1) - 1
        assert_eq!(
            ReregFlags::all().bits(),
            (ReregFlags::ACCESS.bits() << 1) - 1
        );
    }

    #[test]
    fn access_values_match_libibverbs() {
        assert_eq!(AccessFlags::LOCAL_WRITE.bits(), 0x1);
        assert_eq!(AccessFlags::REMOTE_WRITE.bits(), 0x2);
        assert_eq!(AccessFlags::REMOTE_READ.bits(), 0x4);
        assert_eq!(AccessFlags::REMOTE_ATOMIC.bits(), 0x8);
        assert_eq!(AccessFlags::ON_DEMAND.bits(), 0x40);
        assert_eq!(AccessFlags::RELAXED_ORDERING.bits(), 0x10_0000);
        assert!(AccessFlags::MW_BIND.is_writable());
        assert!(!AccessFlags::REMOTE_READ.is_writable());
    }
}
