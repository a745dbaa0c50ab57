//! The answers of `QUERY_DEVICE` and `EX_QUERY_DEVICE`.

use std::mem::{offset_of, size_of, size_of_val};

use crate::command::{QueryDevice, QueryDeviceEx};
use crate::context::Context;
use crate::error::{Errno, Error, Op};
use uverbs_uapi as sys;

/// A device's attributes and limits (`struct ibv_device_attr`).
#[doc(alias = "ibv_device_attr")]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct DeviceAttr {
    /// Firmware version, as the driver encodes it.
    pub fw_ver: u64,
    /// Node GUID (host byte order).
    #[doc(alias = "ibv_get_device_guid")]
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

/// On-demand paging capabilities (`struct ibv_odp_caps`, and the XRC
/// part of `ibv_device_attr_ex`).
#[doc(alias = "ibv_odp_caps")]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct OdpCaps {
    /// `IBV_ODP_SUPPORT` (1) and `IBV_ODP_SUPPORT_IMPLICIT` (2) bits.
    pub general_caps: u64,
    /// `IBV_ODP_SUPPORT_*` operations on RC QPs.
    pub rc_odp_caps: u32,
    /// `IBV_ODP_SUPPORT_*` operations on UC QPs.
    pub uc_odp_caps: u32,
    /// `IBV_ODP_SUPPORT_*` operations on UD QPs.
    pub ud_odp_caps: u32,
}

/// Receive-side scaling capabilities (`struct ibv_rss_caps`).
#[doc(alias = "ibv_rss_caps")]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RssCaps {
    /// One bit per QP type (`1 << IBV_QPT_*`) that supports RSS.
    pub supported_qpts: u32,
    /// Maximum receive work queue indirection tables.
    pub max_rwq_indirection_tables: u32,
    /// Maximum entries per indirection table.
    pub max_rwq_indirection_table_size: u32,
}

/// Tag-matching capabilities (`struct ibv_tm_caps`).
#[doc(alias = "ibv_tm_caps")]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct TmCaps {
    /// Largest rendezvous request header, in bytes.
    pub max_rndv_hdr_size: u32,
    /// Entries in the tag matching list.
    pub max_num_tags: u32,
    /// `IBV_TM_CAP_*` flags.
    pub flags: u32,
    /// Outstanding list operations.
    pub max_ops: u32,
    /// Scatter/gather entries per tag matching entry.
    pub max_sge: u32,
}

/// CQ moderation capabilities (`struct ibv_cq_moderation_caps`).
#[doc(alias = "ibv_cq_moderation_caps")]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct CqModerationCaps {
    /// Largest completion count before an event.
    pub max_cq_count: u16,
    /// Largest moderation period, in microseconds.
    pub max_cq_period: u16,
}

/// A device's attributes with the extended ones (`struct
/// ibv_device_attr_ex`), the answer of `EX_QUERY_DEVICE`.
///
/// The kernel writes only the first `response_length` bytes of its answer
/// (an older kernel knows fewer fields); a field it did not write is
/// `None`, never a made-up zero. A kernel without `EX_QUERY_DEVICE` gives
/// the base attributes only, every extended field `None`.
#[doc(alias = "ibv_device_attr_ex")]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct DeviceAttrEx {
    /// What [`Context::query_device`] answers.
    pub base: DeviceAttr,
    /// How many bytes of `ib_uverbs_ex_query_device_resp` the kernel wrote
    /// (176, the base, when the kernel has no `EX_QUERY_DEVICE`).
    pub response_length: u32,
    /// On-demand paging capabilities.
    pub odp_caps: Option<OdpCaps>,
    /// Which bits of a completion timestamp are valid; 0 when the device
    /// stamps no completions.
    pub completion_timestamp_mask: Option<u64>,
    /// Frequency of the clock completion timestamps count, in kHz.
    pub hca_core_clock: Option<u64>,
    /// All 64 `IBV_DEVICE_*` capability bits (the base has the lower 32).
    pub device_cap_flags_ex: Option<u64>,
    /// Receive-side scaling capabilities.
    pub rss_caps: Option<RssCaps>,
    /// Maximum receive work queues.
    pub max_wq_type_rq: Option<u32>,
    /// `IBV_RAW_PACKET_CAP_*` bits.
    pub raw_packet_caps: Option<u32>,
    /// Tag-matching capabilities.
    pub tm_caps: Option<TmCaps>,
    /// CQ moderation capabilities.
    pub cq_moderation_caps: Option<CqModerationCaps>,
    /// Largest device memory allocation, in bytes.
    pub max_dm_size: Option<u64>,
    /// `IBV_ODP_SUPPORT_*` operations on XRC QPs.
    pub xrc_odp_caps: Option<u32>,
}

/// `Some(value)` when the kernel's `response_length` bytes cover the field
/// of `ib_uverbs_ex_query_device_resp` at `offset`, of `value`'s size.
fn written<T: Copy>(response_length: u32, offset: usize, value: T) -> Option<T> {
    let end = offset + size_of_val(&value);
    (response_length as usize >= end).then_some(value)
}

impl From<&sys::ib_uverbs_ex_query_device_resp> for DeviceAttrEx {
    fn from(r: &sys::ib_uverbs_ex_query_device_resp) -> Self {
        type R = sys::ib_uverbs_ex_query_device_resp;
        let len = r.response_length;
        let odp = &r.odp_caps;
        let rss = &r.rss_caps;
        let tm = &r.tm_caps;
        let moderation = &r.cq_moderation_caps;
        DeviceAttrEx {
            base: DeviceAttr::from(&r.base),
            response_length: len,
            odp_caps: written(
                len,
                offset_of!(R, odp_caps),
                OdpCaps {
                    general_caps: odp.general_caps,
                    rc_odp_caps: odp.per_transport_caps.rc_odp_caps,
                    uc_odp_caps: odp.per_transport_caps.uc_odp_caps,
                    ud_odp_caps: odp.per_transport_caps.ud_odp_caps,
                },
            ),
            completion_timestamp_mask: written(
                len,
                offset_of!(R, timestamp_mask),
                r.timestamp_mask,
            ),
            hca_core_clock: written(len, offset_of!(R, hca_core_clock), r.hca_core_clock),
            device_cap_flags_ex: written(
                len,
                offset_of!(R, device_cap_flags_ex),
                r.device_cap_flags_ex,
            ),
            rss_caps: written(
                len,
                offset_of!(R, rss_caps),
                RssCaps {
                    supported_qpts: rss.supported_qpts,
                    max_rwq_indirection_tables: rss.max_rwq_indirection_tables,
                    max_rwq_indirection_table_size: rss.max_rwq_indirection_table_size,
                },
            ),
            max_wq_type_rq: written(len, offset_of!(R, max_wq_type_rq), r.max_wq_type_rq),
            raw_packet_caps: written(len, offset_of!(R, raw_packet_caps), r.raw_packet_caps),
            tm_caps: written(
                len,
                offset_of!(R, tm_caps),
                TmCaps {
                    max_rndv_hdr_size: tm.max_rndv_hdr_size,
                    max_num_tags: tm.max_num_tags,
                    flags: tm.flags,
                    max_ops: tm.max_ops,
                    max_sge: tm.max_sge,
                },
            ),
            cq_moderation_caps: written(
                len,
                offset_of!(R, cq_moderation_caps),
                CqModerationCaps {
                    max_cq_count: moderation.max_cq_moderation_count,
                    max_cq_period: moderation.max_cq_moderation_period,
                },
            ),
            max_dm_size: written(len, offset_of!(R, max_dm_size), r.max_dm_size),
            xrc_odp_caps: written(len, offset_of!(R, xrc_odp_caps), r.xrc_odp_caps),
        }
    }
}

impl Context {
    /// The device's attributes with the extended ones (`EX_QUERY_DEVICE`).
    ///
    /// Like libibverbs, a kernel that does not know the extended command
    /// (`EOPNOTSUPP`, `ENOSYS`) is asked `QUERY_DEVICE` instead: the answer
    /// then has the base attributes and no extended field.
    #[doc(alias = "ibv_query_device_ex")]
    pub fn query_device_ex(&self) -> Result<DeviceAttrEx, Error> {
        // SAFETY: EX_QUERY_DEVICE hands no memory to the device.
        match unsafe { self.run(Op::QueryDeviceEx, &QueryDeviceEx::new(), &mut []) } {
            Ok((resp, _)) => Ok(DeviceAttrEx::from(&resp)),
            Err(e) if matches!(e.errno(), Some(Errno::OPNOTSUPP | Errno::NOSYS)) => {
                // SAFETY: QUERY_DEVICE hands no memory to the device.
                let (base, _) =
                    unsafe { self.run(Op::QueryDeviceEx, &QueryDevice::new(), &mut []) }?;
                Ok(DeviceAttrEx::from(&sys::ib_uverbs_ex_query_device_resp {
                    base,
                    response_length: size_of::<sys::ib_uverbs_query_device_resp>() as u32,
                    ..Default::default()
                }))
            }
            Err(e) => Err(e),
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

    /// Each extended field is there only when `response_length` covers
    /// it: a kernel that writes 216 bytes (through `timestamp_mask`) gives
    /// the ODP caps and the mask, and `None` after.
    #[test]
    fn extended_fields_past_the_response_length_are_absent() {
        let mut resp = sys::ib_uverbs_ex_query_device_resp {
            response_length: 304,
            timestamp_mask: 0xffff,
            hca_core_clock: 156_250,
            device_cap_flags_ex: 1 << 40 | 1 << 21,
            max_dm_size: 1 << 20,
            xrc_odp_caps: 3,
            ..Default::default()
        };
        resp.odp_caps.general_caps = 1;
        resp.odp_caps.per_transport_caps.rc_odp_caps = 0x3f;
        resp.cq_moderation_caps.max_cq_moderation_count = 0xffff;
        let full = DeviceAttrEx::from(&resp);
        assert_eq!(full.completion_timestamp_mask, Some(0xffff));
        assert_eq!(full.hca_core_clock, Some(156_250));
        assert_eq!(full.device_cap_flags_ex, Some(1 << 40 | 1 << 21));
        assert_eq!(full.max_dm_size, Some(1 << 20));
        assert_eq!(full.xrc_odp_caps, Some(3));
        let odp = full.odp_caps.unwrap();
        assert_eq!((odp.general_caps, odp.rc_odp_caps), (1, 0x3f));
        assert_eq!(full.cq_moderation_caps.unwrap().max_cq_count, 0xffff);

        resp.response_length = 216;
        let short = DeviceAttrEx::from(&resp);
        assert_eq!(short.odp_caps, full.odp_caps);
        assert_eq!(short.completion_timestamp_mask, Some(0xffff));
        assert_eq!(
            (
                short.hca_core_clock,
                short.device_cap_flags_ex,
                short.max_dm_size
            ),
            (None, None, None)
        );
        assert_eq!(
            (short.rss_caps, short.tm_caps, short.xrc_odp_caps),
            (None, None, None)
        );
        // One byte short of the last field.
        resp.response_length = 299;
        assert_eq!(DeviceAttrEx::from(&resp).xrc_odp_caps, None);
        assert_eq!(DeviceAttrEx::from(&resp).max_dm_size, Some(1 << 20));
    }

    /// A kernel without EX_QUERY_DEVICE (the fake answers EOPNOTSUPP) is
    /// asked QUERY_DEVICE: the base attributes, nothing extended.
    #[test]
    fn without_the_extended_command_the_base_query_answers() {
        use crate::provider::driver::DriverId;
        use crate::transport::RecordingTransport;
        use std::sync::Arc;

        let fake = Arc::new(RecordingTransport::new());
        let ctx = Context::over_fake(Some(DriverId::RXE), Box::new(fake.clone()));
        let ex = ctx.query_device_ex().unwrap();
        let codes: Vec<u32> = fake.commands().iter().map(|c| c.code).collect();
        assert_eq!(
            codes[1..],
            [
                sys::IB_USER_VERBS_CMD_FLAG_EXTENDED | sys::IB_USER_VERBS_EX_CMD_QUERY_DEVICE,
                sys::IB_USER_VERBS_CMD_QUERY_DEVICE
            ]
        );
        assert_eq!(ex.base, ctx.query_device().unwrap());
        assert_eq!(ex.response_length, 176);
        assert_eq!((ex.odp_caps, ex.completion_timestamp_mask), (None, None));
        assert_eq!((ex.device_cap_flags_ex, ex.xrc_odp_caps), (None, None));
    }
}
