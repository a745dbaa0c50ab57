//! The answer of `QUERY_DEVICE`.

use uverbs_uapi as sys;

/// A device's attributes and limits (`struct ibv_device_attr`).
#[doc(alias = "ibv_device_attr")]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct DeviceAttr {
    /// Firmware version, as the driver encodes it.
    pub fw_ver: u64,
    /// Node GUID (host byte order).
    pub node_guid: u64,
    /// System image GUID (host byte order).
    pub sys_image_guid: u64,
    /// Largest registrable memory region, in bytes.
    pub max_mr_size: u64,
    /// Supported page sizes, one bit per power of two.
    pub page_size_cap: u64,
    /// IEEE vendor id.
    pub vendor_id: u32,
    /// Vendor part id.
    pub vendor_part_id: u32,
    /// Hardware version.
    pub hw_ver: u32,
    /// Maximum queue pairs.
    pub max_qp: u32,
    /// Maximum outstanding work requests per queue.
    pub max_qp_wr: u32,
    /// `IB_DEVICE_*` capability bits (lower 32).
    pub device_cap_flags: u32,
    /// Maximum scatter/gather entries per work request.
    pub max_sge: u32,
    /// Maximum completion queues.
    pub max_cq: u32,
    /// Maximum entries per completion queue.
    pub max_cqe: u32,
    /// Maximum memory regions.
    pub max_mr: u32,
    /// Maximum protection domains.
    pub max_pd: u32,
    /// RDMA READs and atomics a QP may have outstanding as their target
    /// (the largest `max_dest_rd_atomic`, responder resources).
    pub max_qp_rd_atom: u32,
    /// Resources the device has for incoming READs and atomics in all.
    pub max_res_rd_atom: u32,
    /// RDMA READs and atomics a QP may have outstanding as their
    /// initiator (the largest `max_rd_atomic`, initiator depth).
    pub max_qp_init_rd_atom: u32,
    /// Maximum memory windows.
    pub max_mw: u32,
    /// Atomic capability (`IBV_ATOMIC_*`).
    pub atomic_cap: u32,
    /// Maximum shared receive queues.
    pub max_srq: u32,
    /// Receive work requests an SRQ may hold.
    pub max_srq_wr: u32,
    /// SGEs per receive work request of an SRQ.
    pub max_srq_sge: u32,
    /// Maximum partition keys.
    pub max_pkeys: u16,
    /// Number of physical ports.
    pub phys_port_cnt: u8,
}

impl DeviceAttr {
    /// The firmware version as `ibv_devinfo` prints it (`major.minor.sub`).
    pub fn fw_ver_string(&self) -> String {
        format!(
            "{}.{}.{}",
            self.fw_ver >> 32,
            (self.fw_ver >> 16) & 0xffff,
            self.fw_ver & 0xffff
        )
    }
}

impl From<&sys::ib_uverbs_query_device_resp> for DeviceAttr {
    fn from(r: &sys::ib_uverbs_query_device_resp) -> Self {
        DeviceAttr {
            fw_ver: r.fw_ver,
            node_guid: u64::from_be(r.node_guid),
            sys_image_guid: u64::from_be(r.sys_image_guid),
            max_mr_size: r.max_mr_size,
            page_size_cap: r.page_size_cap,
            vendor_id: r.vendor_id,
            vendor_part_id: r.vendor_part_id,
            hw_ver: r.hw_ver,
            max_qp: r.max_qp,
            max_qp_wr: r.max_qp_wr,
            device_cap_flags: r.device_cap_flags,
            max_sge: r.max_sge,
            max_cq: r.max_cq,
            max_cqe: r.max_cqe,
            max_mr: r.max_mr,
            max_pd: r.max_pd,
            max_qp_rd_atom: r.max_qp_rd_atom,
            max_res_rd_atom: r.max_res_rd_atom,
            max_qp_init_rd_atom: r.max_qp_init_rd_atom,
            max_mw: r.max_mw,
            atomic_cap: r.atomic_cap,
            max_srq: r.max_srq,
            max_srq_wr: r.max_srq_wr,
            max_srq_sge: r.max_srq_sge,
            max_pkeys: r.max_pkeys,
            phys_port_cnt: r.phys_port_cnt,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_answer_maps_field_by_field() {
        let resp = sys::ib_uverbs_query_device_resp {
            fw_ver: (1 << 32) | (2 << 16) | 3,
            node_guid: 0x0102_0304_0506_0708u64.to_be(),
            max_pd: 64,
            max_qp_rd_atom: 128,
            max_res_rd_atom: 258_048,
            max_qp_init_rd_atom: 127,
            phys_port_cnt: 1,
            ..Default::default()
        };
        let attr = DeviceAttr::from(&resp);
        assert_eq!(attr.fw_ver_string(), "1.2.3");
        assert_eq!(attr.node_guid, 0x0102_0304_0506_0708);
        assert_eq!(
            (
                attr.max_pd,
                attr.max_qp_rd_atom,
                attr.max_res_rd_atom,
                attr.max_qp_init_rd_atom
            ),
            (64, 128, 258_048, 127)
        );
        assert_eq!(attr.phys_port_cnt, 1);
    }
}
