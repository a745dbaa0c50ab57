//! Kernel driver ids, needed in every ioctl header. What each driver needs
//! beyond its id lives in the rest of [`crate::provider`].

use uverbs_uapi as sys;

/// A kernel driver id (`enum rdma_driver_id`), needed in every ioctl header.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct DriverId(pub u32);

impl DriverId {
    /// Soft RoCE (`RDMA_DRIVER_RXE`).
    pub const RXE: DriverId = DriverId(sys::RDMA_DRIVER_RXE);
    /// Soft iWARP (`RDMA_DRIVER_SIW`).
    pub const SIW: DriverId = DriverId(sys::RDMA_DRIVER_SIW);
    /// ConnectX (`RDMA_DRIVER_MLX5`).
    pub const MLX5: DriverId = DriverId(sys::RDMA_DRIVER_MLX5);

    /// The id rdma-core's provider for a device of this name would use, for
    /// kernels whose netlink does not report it. Device names are
    /// `<driver-prefix><index>` (`rxe0`, `mlx5_1`); unknown prefixes give `None`.
    pub fn from_device_name(name: &str) -> Option<DriverId> {
        const TABLE: &[(&str, u32)] = &[
            ("rxe", sys::RDMA_DRIVER_RXE),
            ("siw", sys::RDMA_DRIVER_SIW),
            ("mlx5_", sys::RDMA_DRIVER_MLX5),
            ("mlx4_", sys::RDMA_DRIVER_MLX4),
            ("cxgb4_", sys::RDMA_DRIVER_CXGB4),
            ("mthca", sys::RDMA_DRIVER_MTHCA),
            ("bnxt_re", sys::RDMA_DRIVER_BNXT_RE),
            ("ocrdma", sys::RDMA_DRIVER_OCRDMA),
            ("irdma", sys::RDMA_DRIVER_IRDMA),
            ("i40iw", sys::RDMA_DRIVER_I40IW),
            ("vmw_pvrdma", sys::RDMA_DRIVER_VMW_PVRDMA),
            ("qedr", sys::RDMA_DRIVER_QEDR),
            ("hns_", sys::RDMA_DRIVER_HNS),
            ("usnic_", sys::RDMA_DRIVER_USNIC),
            ("hfi1_", sys::RDMA_DRIVER_HFI1),
            ("qib", sys::RDMA_DRIVER_QIB),
            ("efa_", sys::RDMA_DRIVER_EFA),
            ("erdma_", sys::RDMA_DRIVER_ERDMA),
            ("mana_", sys::RDMA_DRIVER_MANA),
            ("ionic_", sys::RDMA_DRIVER_IONIC),
        ];
        TABLE
            .iter()
            .find(|(prefix, _)| {
                name.strip_prefix(prefix)
                    .is_some_and(|rest| rest.chars().next().is_some_and(|c| c.is_ascii_digit()))
            })
            .map(|&(_, id)| DriverId(id))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_map_to_rdma_core_driver_ids() {
        assert_eq!(DriverId::from_device_name("rxe0"), Some(DriverId(14)));
        assert_eq!(DriverId::from_device_name("siw12"), Some(DriverId(18)));
        assert_eq!(DriverId::from_device_name("mlx5_3"), Some(DriverId(1)));
        assert_eq!(DriverId::from_device_name("rxe"), None);
        assert_eq!(DriverId::from_device_name("rxefoo0"), None);
        assert_eq!(DriverId::from_device_name("unknown0"), None);
    }
}
