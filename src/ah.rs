//! Address handles: where a send on a UD queue pair goes.
//!
//! An AH is created in a PD (`CREATE_AH`) from an address vector: on RoCE a
//! GRH to the peer's GID from one of the port's GIDs. rxe answers the
//! number its send WQEs name the AH by (`rxe_create_ah_resp.ah_num`); mlx5's
//! WQEs carry the 48-byte address vector itself, which the provider builds
//! (`provider::mlx5::ah`). A [`UdDest`](crate::wr::UdDest) borrowed from the
//! [`AddressHandle`] carries either.

use std::fmt;
use std::sync::Arc;

use zerocopy::FromBytes;

use crate::command::{CreateAh, DestroyAh};
use crate::error::{Errno, Error, Op};
use crate::gid::{Gid, GidEntry, GidType};
use crate::pd::{debug_object, PdInner, ProtectionDomain};
use crate::provider::AhCreation;
use crate::wr::{UdDest, WcFlags, WorkCompletion};
use crate::Context;
use uverbs_uapi as sys;

/// The address vector of an address handle (`struct ibv_ah_attr` with its
/// `ibv_global_route`).
///
/// RoCE needs the GRH (`is_global`); [`AhAttr::roce`] fills it.
#[doc(alias = "ibv_ah_attr")]
#[doc(alias = "ibv_global_route")]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AhAttr {
    /// The destination GID (the peer port's GID).
    pub dgid: Gid,
    /// The index of the local GID the packets come from.
    pub sgid_index: u8,
    /// The IP hop limit / TTL.
    pub hop_limit: u8,
    /// The traffic class (IPv6) or DSCP and ECN (IPv4).
    pub traffic_class: u8,
    /// The IPv6 flow label, 20 bits.
    pub flow_label: u32,
    /// The local port, 1-based.
    pub port: u8,
    /// The service level, 4 bits.
    pub sl: u8,
    /// A GRH is present (always on RoCE).
    pub is_global: bool,
    /// The destination LID (InfiniBand only; 0 on RoCE).
    pub dlid: u16,
    /// The static rate (`IBV_RATE_*`; 0 = the port's).
    pub static_rate: u8,
    /// The source path bits (InfiniBand only).
    pub src_path_bits: u8,
}

impl AhAttr {
    /// A RoCE address vector: a GRH to `dgid` from local GID `sgid_index`
    /// on `port`, hop limit 64, traffic class, flow label and SL 0.
    pub fn roce(dgid: Gid, sgid_index: u8, port: u8) -> Self {
        AhAttr {
            dgid,
            sgid_index,
            hop_limit: 64,
            traffic_class: 0,
            flow_label: 0,
            port,
            sl: 0,
            is_global: true,
            dlid: 0,
            static_rate: 0,
            src_path_bits: 0,
        }
    }

    /// An InfiniBand address vector within one subnet: destination LID
    /// `dlid` on `port`, no GRH, SL 0. RoCE and iWARP have no LIDs: there
    /// use [`roce`](Self::roce) (the kernel refuses an AH without a GRH on a
    /// RoCE port: `EINVAL`).
    pub fn lid(dlid: u16, port: u8) -> Self {
        AhAttr {
            dgid: Gid::from_raw([0; 16]),
            sgid_index: 0,
            hop_limit: 0,
            traffic_class: 0,
            flow_label: 0,
            port,
            sl: 0,
            is_global: false,
            dlid,
            static_rate: 0,
            src_path_bits: 0,
        }
    }

    /// The address vector the kernel's `ib_uverbs_ah_attr` is: what a cm
    /// event hands a UD id ([`UdPeer::ah_attr`](crate::cm::UdPeer::ah_attr),
    /// see [`UdPeer::to_ah_attr`](crate::cm::UdPeer::to_ah_attr)).
    pub fn from_raw(raw: &sys::ib_uverbs_ah_attr) -> Self {
        AhAttr {
            dgid: Gid::from_raw(raw.grh.dgid),
            sgid_index: raw.grh.sgid_index,
            hop_limit: raw.grh.hop_limit,
            traffic_class: raw.grh.traffic_class,
            flow_label: raw.grh.flow_label,
            port: raw.port_num,
            sl: raw.sl,
            is_global: raw.is_global != 0,
            dlid: raw.dlid,
            static_rate: raw.static_rate,
            src_path_bits: raw.src_path_bits,
        }
    }

    /// The address vector back to the sender of a UD message received on
    /// `port`: from its completion `wc` and the [`GRH_LEN`] bytes its
    /// receive buffer starts with (`grh`), as `ibv_init_ah_from_wc` makes
    /// it. Reply to [`wc.src_qp()`](WorkCompletion::src_qp) through an AH
    /// made of it ([`ProtectionDomain::create_ah_from_wc`] does both).
    ///
    /// The LID, SL and path bits come from `wc`. With a GRH
    /// ([`WcFlags::GRH`]; always on RoCE) the GRH area holds the packet's
    /// IPv6 header, or for an IPv4 packet (RoCE v2 between IPv4-mapped
    /// GIDs) its IPv4 header in the last 20 bytes; source and destination
    /// swap: the peer's address becomes `dgid`, and the port's GID the
    /// packet was sent to (of the type the header says: RoCE v2 for IPv4
    /// and UDP, IB or RoCE v1 otherwise) gives `sgid_index`, looked up in
    /// the port's GID table ([`Context::query_gid_table`]; to answer many
    /// messages read it once and use [`from_wc_in`](Self::from_wc_in)).
    ///
    /// A malformed GRH, a message sent to a multicast address, or a
    /// destination GID not in the table is an [`Error::InvalidInput`]
    /// naming why.
    #[doc(alias = "ibv_init_ah_from_wc")]
    pub fn from_wc(
        ctx: &Context,
        port: u8,
        wc: &WorkCompletion,
        grh: &[u8],
    ) -> Result<Self, Error> {
        let refused = |e: AhFromWcError| Error::input(Op::CreateAh, &ctx.inner.device, e.reason());
        let has_grh = wc.wc_flags().contains(WcFlags::GRH);
        if has_grh && grh.len() < GRH_LEN {
            // Before reading the table: nothing to look up.
            return Err(refused(AhFromWcError::ShortGrh(grh.len())));
        }
        let table = if has_grh {
            ctx.query_gid_table()?
        } else {
            Vec::new()
        };
        Self::from_wc_in(&table, port, wc, grh).map_err(refused)
    }

    /// [`from_wc`](Self::from_wc) against a GID table already read
    /// (entries of any port: those of `port` are searched).
    pub fn from_wc_in(
        table: &[GidEntry],
        port: u8,
        wc: &WorkCompletion,
        grh: &[u8],
    ) -> Result<Self, AhFromWcError> {
        let mut attr = AhAttr {
            dlid: wc.slid(),
            sl: wc.sl(),
            src_path_bits: wc.dlid_path_bits(),
            is_global: false,
            hop_limit: 0,
            ..AhAttr::roce(Gid::default(), 0, port)
        };
        if !wc.wc_flags().contains(WcFlags::GRH) {
            return Ok(attr);
        }
        let grh: &[u8; GRH_LEN] = grh
            .get(..GRH_LEN)
            .and_then(|g| g.try_into().ok())
            .ok_or(AhFromWcError::ShortGrh(grh.len()))?;
        let word = u32::from_be_bytes([grh[0], grh[1], grh[2], grh[3]]);
        attr.is_global = true;
        attr.flow_label = word & 0xf_ffff;
        // The index of the port's GID `gid` of one of `types`.
        let ours = |gid: [u8; 16], types: &[GidType]| {
            table
                .iter()
                .filter(|e| e.port_num == port && types.contains(&e.gid_type))
                .filter(|e| e.gid.raw() == gid)
                .find_map(|e| u8::try_from(e.gid_index).ok())
                .ok_or(AhFromWcError::NotOurGid)
        };
        let ip4 = &grh[20..];
        match grh_version(grh) {
            Some(4) => {
                let (src, dst) = (&ip4[12..16], &ip4[16..20]);
                if dst[0] & 0xf0 == 0xe0 {
                    return Err(AhFromWcError::Multicast);
                }
                attr.sgid_index = ours(ipv4_mapped(dst), &[GidType::RoceV2])?;
                attr.dgid = Gid::from_raw(ipv4_mapped(src));
                (attr.hop_limit, attr.traffic_class) = (ip4[8], ip4[1]);
            }
            Some(_) => {
                let mut src = [0u8; 16];
                src.copy_from_slice(&grh[8..24]);
                let mut dst = [0u8; 16];
                dst.copy_from_slice(&grh[24..40]);
                if dst[0] == 0xff {
                    return Err(AhFromWcError::Multicast);
                }
                let types: &[GidType] = match grh[6] {
                    IPPROTO_UDP => &[GidType::RoceV2],
                    IB_NEXT_HDR => &[GidType::Ib, GidType::RoceV1],
                    other => return Err(AhFromWcError::NextHeader(other)),
                };
                attr.sgid_index = ours(dst, types)?;
                attr.dgid = Gid::from_raw(src);
                (attr.hop_limit, attr.traffic_class) = (grh[7], (word >> 20) as u8);
            }
            None => return Err(AhFromWcError::UnknownHeader),
        }
        Ok(attr)
    }

    /// The kernel's `ib_uverbs_ah_attr`, or why the fields do not fit it.
    fn to_raw(self) -> Result<sys::ib_uverbs_ah_attr, &'static str> {
        if self.flow_label > 0xf_ffff {
            return Err("the flow label has 20 bits");
        }
        if self.sl > 15 {
            return Err("the service level has 4 bits");
        }
        if self.port == 0 {
            return Err("ports are numbered from 1");
        }
        Ok(sys::ib_uverbs_ah_attr {
            grh: sys::ib_uverbs_global_route {
                dgid: self.dgid.raw(),
                flow_label: self.flow_label,
                sgid_index: self.sgid_index,
                hop_limit: self.hop_limit,
                traffic_class: self.traffic_class,
                ..Default::default()
            },
            dlid: self.dlid,
            sl: self.sl,
            src_path_bits: self.src_path_bits,
            static_rate: self.static_rate,
            is_global: self.is_global.into(),
            port_num: self.port,
            ..Default::default()
        })
    }
}

/// The bytes a UD receive's buffer starts with: the GRH area (`struct
/// ibv_grh`), reserved in every UD receive and filled when the packet had
/// a GRH (always on RoCE: [`WcFlags::GRH`]).
pub const GRH_LEN: usize = 40;

/// The GRH's next header of RoCE v2 (UDP).
const IPPROTO_UDP: u8 = 17;
/// The GRH's next header of InfiniBand and RoCE v1 (the BTH).
const IB_NEXT_HDR: u8 = 0x1b;

/// Why a received completion and its GRH give no address vector back
/// ([`AhAttr::from_wc_in`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AhFromWcError {
    /// Fewer than [`GRH_LEN`] bytes were given.
    #[error("the GRH area is {0} bytes, not 40")]
    ShortGrh(usize),
    /// The area holds neither an IPv6 header nor an IPv4 one
    /// (`EPROTONOSUPPORT` in libibverbs).
    #[error("the GRH area holds neither an IPv6 nor an IPv4 header")]
    UnknownHeader,
    /// The IPv6 header's next header is neither UDP (RoCE v2) nor the
    /// BTH (InfiniBand, RoCE v1).
    #[error("the GRH's next header {0:#x} is neither UDP nor the BTH")]
    NextHeader(u8),
    /// The message was sent to a multicast address: no GID of the port's
    /// to answer from.
    #[error("the message was sent to a multicast address")]
    Multicast,
    /// The address the message was sent to is not a GID of the port's
    /// (of the type the header implies) with an index below 256.
    #[error("the message's destination GID is not in the port's GID table")]
    NotOurGid,
}

impl AhFromWcError {
    /// The message, as the reason of an [`Error::InvalidInput`].
    fn reason(self) -> &'static str {
        match self {
            AhFromWcError::ShortGrh(_) => "the GRH area is shorter than 40 bytes",
            AhFromWcError::UnknownHeader => "the GRH area holds neither an IPv6 nor an IPv4 header",
            AhFromWcError::NextHeader(_) => "the GRH's next header is neither UDP nor the BTH",
            AhFromWcError::Multicast => "the message was sent to a multicast address",
            AhFromWcError::NotOurGid => {
                "the message's destination GID is not in the port's GID table"
            }
        }
    }
}

/// `::ffff:a.b.c.d`, the GID of an IPv4 address.
fn ipv4_mapped(addr: &[u8]) -> [u8; 16] {
    let mut gid = [0u8; 16];
    gid[10..12].copy_from_slice(&[0xff, 0xff]);
    gid[12..].copy_from_slice(addr);
    gid
}

/// Which header the GRH area holds: 6 (IPv6, the whole area), 4 (IPv4, its
/// last 20 bytes), or `None`. libibverbs' rule: an area whose first word
/// does not say IPv6 holds IPv4 if its second half says so; one that says
/// IPv6 is still IPv4 when its second half is a 20-byte IPv4 header with
/// a correct checksum.
fn grh_version(grh: &[u8; GRH_LEN]) -> Option<u8> {
    let ip4 = &grh[20..];
    if grh[0] >> 4 != 6 {
        return (ip4[0] >> 4 == 4).then_some(4);
    }
    if ip4[0] & 0x0f != 5 {
        return Some(6);
    }
    // The ones' complement sum of a correct header, checksum included, is
    // all ones.
    let mut sum: u32 = ip4
        .chunks_exact(2)
        .map(|w| u32::from(u16::from_be_bytes([w[0], w[1]])))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    Some(if sum == 0xffff { 4 } else { 6 })
}

/// An address handle (`struct ibv_ah`): the destination of UD sends,
/// named in a work request by a [`UdDest`](crate::wr::UdDest) made from it.
///
/// It keeps its PD alive; dropping it destroys it (`DESTROY_AH`), except in
/// a forked child, where it is the parent's and nothing is sent. Keep it
/// until the completions of the sends that name it have been polled: see
/// [`UdDest`](crate::wr::UdDest).
#[doc(alias = "ibv_ah")]
#[doc(alias = "ibv_create_ah")]
pub struct AddressHandle {
    pd: Arc<PdInner>,
    /// The kernel's handle; `None` for an AH the driver keeps in user
    /// space alone (mlx5 on InfiniBand, as libmlx5 does).
    handle: Option<u32>,
    ah_num: u32,
    /// The address vector the driver's WQEs carry (mlx5).
    av: Option<[u8; 48]>,
    attr: AhAttr,
}

impl fmt::Debug for AddressHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        debug_object(f, "AddressHandle", &self.pd.ctx, self.handle())
            .field("ah_num", &self.ah_num)
            .field("dgid", &self.attr.dgid)
            .field("sgid_index", &self.attr.sgid_index)
            .field("port", &self.attr.port)
            .finish()
    }
}

impl ProtectionDomain {
    /// Creates an address handle to `attr` in this PD (`CREATE_AH`).
    ///
    /// A field out of its range (flow label above 20 bits, SL above 4
    /// bits, port 0) is an [`Error::InvalidInput`] and nothing is sent; the
    /// kernel refuses a GID index the port does not have, or a missing GRH
    /// on RoCE, with `EINVAL`. rxe must answer the AH's number (every
    /// kernel since 5.10 does), else `EPROTO` and the AH is destroyed again.
    /// mlx5, as libmlx5: on InfiniBand the AH is the address vector its
    /// WQEs carry, kept in user space (no command; [`handle`](AddressHandle::handle)
    /// is 0); on RoCE a GRH is required ([`Error::InvalidInput`] without
    /// one) and CREATE_AH answers the destination MAC. The port is queried
    /// first (QUERY_PORT) for its link layer. Other drivers: `EOPNOTSUPP`
    /// (siw has no UD).
    #[doc(alias = "ibv_create_ah")]
    pub fn create_ah(&self, attr: &AhAttr) -> Result<AddressHandle, Error> {
        let ctx = &self.inner.ctx;
        let device = &ctx.inner.device;
        let fail = |e| Error::os(Op::CreateAh, device, e);
        ctx.check_process(Op::CreateAh)?;
        let raw = attr
            .to_raw()
            .map_err(|reason| Error::input(Op::CreateAh, device, reason))?;
        match ctx.inner.provider.ah_creation() {
            AhCreation::Command => {}
            AhCreation::UserSpace => return self.create_mlx5_ah(attr, raw),
            AhCreation::Unsupported => return Err(fail(Errno::OPNOTSUPP)),
        }
        let cmd = CreateAh::new(self.inner.handle, raw);
        let mut uhw = [0u8; size_of::<sys::rxe_create_ah_resp>()];
        // SAFETY: CREATE_AH hands no memory to the device.
        let (resp, written) = unsafe { ctx.run(Op::CreateAh, &cmd, &mut uhw) }?;
        let ah_num = match sys::rxe_create_ah_resp::read_from_bytes(&uhw[..]) {
            // The kernel writes only `ah_num` (4 of the 8 bytes).
            Ok(r) if written >= size_of_val(&r.ah_num) && r.ah_num != 0 => r.ah_num,
            _ => {
                // SAFETY: the AH just created, owned by nothing else yet.
                let _ = unsafe { ctx.run(Op::DestroyAh, &DestroyAh::new(resp.ah_handle), &mut []) };
                return Err(fail(Errno::PROTO));
            }
        };
        Ok(AddressHandle {
            pd: self.inner.clone(),
            handle: Some(resp.ah_handle),
            ah_num,
            av: None,
            attr: *attr,
        })
    }

    /// mlx5's AH, as libmlx5 44's `mlx5_create_ah` makes it: on
    /// InfiniBand only the address vector, in user space (no command);
    /// on Ethernet (RoCE) a GRH is required, and CREATE_AH answers the
    /// destination MAC (`mlx5_ib_create_ah_resp`) the vector carries, with
    /// a UDP source port for a RoCE v2 source GID.
    fn create_mlx5_ah(
        &self,
        attr: &AhAttr,
        raw: sys::ib_uverbs_ah_attr,
    ) -> Result<AddressHandle, Error> {
        use crate::provider::mlx5::ah::{address_vector, Eth};
        let ctx = &self.inner.ctx;
        let device = &ctx.inner.device;
        let port = ctx.query_port(attr.port)?;
        let eth = port.link_layer == crate::port::LinkLayer::Ethernet;
        let grh_required = port.flags & sys::IB_UVERBS_QPF_GRH_REQUIRED as u8 != 0;
        if !attr.is_global && (eth || grh_required) {
            return Err(Error::input(
                Op::CreateAh,
                device,
                "this port needs a GRH (is_global): RoCE, or GRH_REQUIRED",
            ));
        }
        if !eth {
            return Ok(AddressHandle {
                pd: self.inner.clone(),
                handle: None,
                ah_num: 0,
                av: Some(address_vector(&raw, None)),
                attr: *attr,
            });
        }
        let roce_v2 = ctx
            .query_gid_entry(attr.port, u32::from(attr.sgid_index))?
            .gid_type
            == GidType::RoceV2;
        let cmd = CreateAh::new(self.inner.handle, raw);
        let mut uhw = [0u8; size_of::<sys::mlx5_ib_create_ah_resp>()];
        // SAFETY: CREATE_AH hands no memory to the device.
        let (resp, written) = unsafe { ctx.run(Op::CreateAh, &cmd, &mut uhw) }?;
        let Ok(answer) = sys::mlx5_ib_create_ah_resp::read_from_bytes(&uhw[..]) else {
            unreachable!("the buffer is the answer's size")
        };
        if written < 10 {
            // SAFETY: the AH just created, owned by nothing else yet.
            let _ = unsafe { ctx.run(Op::DestroyAh, &DestroyAh::new(resp.ah_handle), &mut []) };
            return Err(Error::os(Op::CreateAh, device, Errno::PROTO));
        }
        let eth = Eth {
            dmac: answer.dmac,
            roce_v2,
        };
        Ok(AddressHandle {
            pd: self.inner.clone(),
            handle: Some(resp.ah_handle),
            ah_num: 0,
            av: Some(address_vector(&raw, Some(eth))),
            attr: *attr,
        })
    }
}

impl ProtectionDomain {
    /// An address handle back to the sender of a UD message received on
    /// `port` ([`AhAttr::from_wc`], then [`create_ah`](Self::create_ah)):
    /// reply to [`wc.src_qp()`](WorkCompletion::src_qp) through it.
    #[doc(alias = "ibv_create_ah_from_wc")]
    pub fn create_ah_from_wc(
        &self,
        port: u8,
        wc: &WorkCompletion,
        grh: &[u8],
    ) -> Result<AddressHandle, Error> {
        self.create_ah(&AhAttr::from_wc(&self.inner.ctx, port, wc, grh)?)
    }
}

impl AddressHandle {
    /// The kernel's handle (0 for an AH without a kernel object: mlx5 on
    /// InfiniBand keeps it in user space, as libmlx5 does).
    pub fn handle(&self) -> u32 {
        self.handle.unwrap_or(0)
    }

    /// The number rxe's send WQEs name this AH by (`ah_num`).
    pub fn ah_num(&self) -> u32 {
        self.ah_num
    }

    /// The address vector it was created with.
    pub fn attr(&self) -> &AhAttr {
        &self.attr
    }

    /// The handle of the PD it belongs to.
    pub fn pd_handle(&self) -> u32 {
        self.pd.handle
    }

    /// The context it belongs to.
    pub fn context(&self) -> &crate::Context {
        &self.pd.ctx
    }
}

// The constructor lives with the AH, not in `wr`: the work-request model
// does not depend on the objects.
impl<'a> UdDest<'a> {
    /// Sends to QP `remote_qpn` (24 bits) with Q_Key `remote_qkey`, through
    /// `ah`, which the destination borrows (see [`UdDest`]).
    pub fn new(ah: &'a AddressHandle, remote_qpn: u32, remote_qkey: u32) -> Self {
        UdDest::from_raw(ah.ah_num(), remote_qpn, remote_qkey).with_av(ah.av.as_ref())
    }
}

impl Drop for AddressHandle {
    fn drop(&mut self) {
        // In a forked child the AH is the parent's: send nothing. An AH
        // without a kernel object has nothing to destroy.
        let Some(handle) = self.handle else { return };
        if !self.pd.ctx.is_owned_by_this_process() {
            return;
        }
        // SAFETY: DESTROY_AH of the handle this value owns; no UdDest
        // borrows it any more (the borrow checker saw to that).
        let _ = unsafe {
            self.pd
                .ctx
                .run(Op::DestroyAh, &DestroyAh::new(handle), &mut [])
        };
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use zerocopy::IntoBytes;

    use super::*;
    use crate::device::DriverId;
    use crate::transport::{RawCommand, RecordingTransport, Transport, TransportKind};
    use crate::Context;

    /// The recording fake, plus CREATE_AH answered with handle 42 and
    /// `ah_num` (written as rxe does: 4 bytes) and DESTROY_AH; every
    /// command code is logged in order.
    #[derive(Debug)]
    struct FakeAh {
        fake: RecordingTransport,
        ah_num: u32,
        log: Mutex<Vec<(u32, Vec<u8>)>>,
    }

    // SAFETY: CREATE_AH writes only the first 4 bytes of core_out and of
    // uhw_out (after checking their lengths) and returns 4; DESTROY_AH
    // writes nothing; the rest goes to the recording fake.
    unsafe impl Transport for FakeAh {
        fn kind(&self) -> TransportKind {
            self.fake.kind()
        }

        unsafe fn execute(&self, cmd: &mut RawCommand<'_>) -> Result<usize, Errno> {
            self.log
                .lock()
                .unwrap()
                .push((cmd.code, cmd.core_in.to_vec()));
            match cmd.code {
                sys::IB_USER_VERBS_CMD_CREATE_AH => {
                    cmd.core_out.fill(0);
                    cmd.uhw_out.fill(0);
                    if cmd.core_out.len() < 4 || cmd.uhw_out.len() < 4 {
                        return Err(Errno::INVAL);
                    }
                    cmd.core_out[..4].copy_from_slice(&42u32.to_ne_bytes());
                    cmd.uhw_out[..4].copy_from_slice(&self.ah_num.to_ne_bytes());
                    Ok(4)
                }
                sys::IB_USER_VERBS_CMD_DESTROY_AH => Ok(0),
                // SAFETY: forwarded to the caller.
                _ => unsafe { self.fake.execute(cmd) },
            }
        }
    }

    fn rxe_over(ah_num: u32) -> (Context, Arc<FakeAh>) {
        let t = Arc::new(FakeAh {
            fake: RecordingTransport::new(),
            ah_num,
            log: Mutex::new(Vec::new()),
        });
        let ctx = Context::over_fake(Some(DriverId::RXE), Box::new(t.clone()));
        (ctx, t)
    }

    fn codes(t: &FakeAh) -> Vec<u32> {
        t.log.lock().unwrap().iter().map(|(c, _)| *c).collect()
    }

    /// An [`Error::InvalidInput`] of `create_ah`.
    fn assert_refused_input(err: &Error) {
        let refused = matches!(
            err,
            Error::InvalidInput {
                op: Op::CreateAh,
                ..
            }
        );
        assert!(refused, "{err}");
    }

    fn gid() -> Gid {
        Gid::from_raw([0xfe, 0x80, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8])
    }

    /// Fields out of range are refused, typed, before anything is sent.
    #[test]
    fn out_of_range_fields_are_refused_before_sending() {
        let (ctx, t) = rxe_over(5);
        let pd = ctx.alloc_pd().unwrap();
        let sent = codes(&t).len();
        let good = AhAttr::roce(gid(), 0, 1);
        for bad in [
            AhAttr {
                flow_label: 0x10_0000,
                ..good
            },
            AhAttr { sl: 16, ..good },
            AhAttr { port: 0, ..good },
        ] {
            assert_refused_input(&pd.create_ah(&bad).unwrap_err());
        }
        assert_eq!(codes(&t).len(), sent, "nothing sent");
    }

    /// The request carries every field where the kernel reads it; the AH
    /// answers its number, a UdDest made from it carries that number, and
    /// dropping it destroys it before its PD is deallocated.
    #[test]
    fn create_ah_sends_the_vector_and_drop_destroys_before_the_pd() {
        let (ctx, t) = rxe_over(5);
        let pd = ctx.alloc_pd().unwrap();
        let attr = AhAttr {
            hop_limit: 3,
            traffic_class: 0x28,
            flow_label: 0xa_bcde,
            sl: 7,
            ..AhAttr::roce(gid(), 2, 1)
        };
        let ah = pd.create_ah(&attr).unwrap();
        assert_eq!(
            (ah.handle(), ah.ah_num(), ah.pd_handle()),
            (42, 5, pd.handle())
        );
        assert_eq!(ah.attr(), &attr);
        let (_, core_in) = t.log.lock().unwrap().last().cloned().unwrap();
        let req = sys::ib_uverbs_create_ah::read_from_prefix(&core_in)
            .unwrap()
            .0;
        let expected = sys::ib_uverbs_ah_attr {
            grh: sys::ib_uverbs_global_route {
                dgid: gid().raw(),
                flow_label: 0xa_bcde,
                sgid_index: 2,
                hop_limit: 3,
                traffic_class: 0x28,
                reserved: 0,
            },
            sl: 7,
            is_global: 1,
            port_num: 1,
            ..Default::default()
        };
        assert_eq!(req.pd_handle, pd.handle());
        assert_eq!(req.attr.as_bytes(), expected.as_bytes());

        let dest = UdDest::new(&ah, 0x12_3456, 0x1111_2222);
        assert_eq!(
            (dest.ah_num(), dest.remote_qpn(), dest.remote_qkey()),
            (5, 0x12_3456, 0x1111_2222)
        );
        drop(pd); // the AH keeps it alive
        assert!(!codes(&t).contains(&sys::IB_USER_VERBS_CMD_DEALLOC_PD));
        drop(ah);
        let tail = codes(&t);
        assert_eq!(
            &tail[tail.len() - 2..],
            &[
                sys::IB_USER_VERBS_CMD_DESTROY_AH,
                sys::IB_USER_VERBS_CMD_DEALLOC_PD
            ]
        );
        let (_, destroy) = t.log.lock().unwrap()[tail.len() - 2].clone();
        let req = sys::ib_uverbs_destroy_ah::read_from_prefix(&destroy)
            .unwrap()
            .0;
        assert_eq!(req.ah_handle, 42);
    }

    /// An answer without an AH number (a kernel before 5.10) would make
    /// WQEs name AH 0, which rxe reads as "the vector is in the WQE": the
    /// AH is destroyed again and the error is EPROTO.
    #[test]
    fn an_answer_without_ah_num_is_eproto_and_destroys_the_ah() {
        let (ctx, t) = rxe_over(0);
        let pd = ctx.alloc_pd().unwrap();
        let err = pd.create_ah(&AhAttr::roce(gid(), 0, 1)).unwrap_err();
        assert_eq!(
            (err.op(), err.errno()),
            (Op::CreateAh, Some(Errno::PROTO)),
            "{err}"
        );
        let tail = codes(&t);
        assert_eq!(
            &tail[tail.len() - 2..],
            &[
                sys::IB_USER_VERBS_CMD_CREATE_AH,
                sys::IB_USER_VERBS_CMD_DESTROY_AH
            ]
        );
    }

    /// A GID table entry of port 1.
    fn entry(index: u32, gid: [u8; 16], gid_type: GidType) -> GidEntry {
        GidEntry {
            gid: Gid::from_raw(gid),
            gid_index: index,
            port_num: 1,
            gid_type,
            netdev_ifindex: 2,
        }
    }

    fn v4(a: [u8; 4]) -> [u8; 16] {
        let mut g = [0u8; 16];
        g[10..12].copy_from_slice(&[0xff, 0xff]);
        g[12..].copy_from_slice(&a);
        g
    }

    fn link_local(last: u8) -> [u8; 16] {
        let mut g = [0u8; 16];
        (g[0], g[1], g[15]) = (0xfe, 0x80, last);
        g
    }

    /// rxe0's table: the link-local GID and 192.168.0.199 as RoCE v1 and v2.
    fn table() -> Vec<GidEntry> {
        let ours = v4([192, 168, 0, 199]);
        vec![
            entry(0, link_local(1), GidType::RoceV2),
            entry(1, link_local(1), GidType::RoceV1),
            entry(2, ours, GidType::RoceV1),
            entry(3, ours, GidType::RoceV2),
        ]
    }

    /// A UD receive's completion with a GRH (or not), LID 0x1234, SL 5,
    /// path bits 3, from QP 0x77.
    fn wc(grh: bool) -> WorkCompletion {
        WorkCompletion::from_raw(sys::ib_uverbs_wc {
            src_qp: 0x77,
            wc_flags: if grh { WcFlags::GRH.bits() } else { 0 },
            slid: 0x1234,
            sl: 5,
            dlid_path_bits: 3,
            ..Default::default()
        })
    }

    /// What rxe writes for an IPv4 RoCE v2 packet: 20 zero bytes, then
    /// the IPv4 header (192.168.0.1 -> 192.168.0.199, TTL 64, UDP, its
    /// checksum 0xb861 correct).
    const IPV4_GRH: [u8; GRH_LEN] = {
        let mut g = [0u8; GRH_LEN];
        let ip = [
            0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0xb8, 0x61, 192, 168, 0, 1,
            192, 168, 0, 199,
        ];
        let mut i = 0;
        while i < 20 {
            g[20 + i] = ip[i];
            i += 1;
        }
        g
    };

    /// An IPv6 header: traffic class 0x28, flow label 0xabcde, next header
    /// `next`, hop limit 63, fe80::2 -> fe80::1.
    fn ipv6_grh(next: u8) -> [u8; GRH_LEN] {
        let mut g = [0u8; GRH_LEN];
        let word: u32 = (6 << 28) | (0x28 << 20) | 0xa_bcde;
        g[..4].copy_from_slice(&word.to_be_bytes());
        g[4..6].copy_from_slice(&64u16.to_be_bytes());
        (g[6], g[7]) = (next, 63);
        g[8..24].copy_from_slice(&link_local(2));
        g[24..40].copy_from_slice(&link_local(1));
        g
    }

    #[test]
    fn an_ipv4_grh_swaps_addresses_and_finds_the_roce_v2_gid() {
        let a = AhAttr::from_wc_in(&table(), 1, &wc(true), &IPV4_GRH).unwrap();
        let expected = AhAttr {
            dgid: Gid::from_raw(v4([192, 168, 0, 1])),
            sgid_index: 3,
            hop_limit: 64,
            traffic_class: 0,
            flow_label: 0,
            port: 1,
            sl: 5,
            is_global: true,
            dlid: 0x1234,
            static_rate: 0,
            src_path_bits: 3,
        };
        assert_eq!(a, expected);
        // A first word saying IPv6 does not hide an IPv4 header whose
        // checksum is right; a wrong checksum makes it IPv6.
        let mut g = IPV4_GRH;
        (g[0], g[6]) = (0x60, IPPROTO_UDP);
        let a = AhAttr::from_wc_in(&table(), 1, &wc(true), &g).unwrap();
        assert_eq!((a.sgid_index, a.dgid), (3, expected.dgid));
        g[31] ^= 1; // the checksum
        assert_eq!(
            AhAttr::from_wc_in(&table(), 1, &wc(true), &g),
            Err(AhFromWcError::NotOurGid),
            "read as IPv6, whose destination (bytes 24..40) is no GID of ours"
        );
    }

    #[test]
    fn an_ipv6_grh_swaps_gids_by_next_header() {
        let a = AhAttr::from_wc_in(&table(), 1, &wc(true), &ipv6_grh(IPPROTO_UDP)).unwrap();
        assert_eq!((a.dgid, a.sgid_index), (Gid::from_raw(link_local(2)), 0));
        assert_eq!(
            (a.hop_limit, a.traffic_class, a.flow_label),
            (63, 0x28, 0xa_bcde)
        );
        assert!(a.is_global);
        let a = AhAttr::from_wc_in(&table(), 1, &wc(true), &ipv6_grh(IB_NEXT_HDR)).unwrap();
        assert_eq!(a.sgid_index, 1, "RoCE v1: the IB-type entry");
        // Longer buffers are fine: the GRH is their first 40 bytes.
        let mut long = ipv6_grh(IPPROTO_UDP).to_vec();
        long.extend_from_slice(b"payload");
        assert!(AhAttr::from_wc_in(&table(), 1, &wc(true), &long).is_ok());
    }

    #[test]
    fn without_a_grh_only_the_completion_counts() {
        let a = AhAttr::from_wc_in(&[], 2, &wc(false), &[]).unwrap();
        assert!(!a.is_global);
        assert_eq!((a.dlid, a.sl, a.src_path_bits, a.port), (0x1234, 5, 3, 2));
        assert_eq!((a.dgid, a.sgid_index, a.hop_limit), (Gid::default(), 0, 0));
    }

    #[test]
    fn bad_grhs_are_typed_errors() {
        let t = table();
        let from = |grh: &[u8]| AhAttr::from_wc_in(&t, 1, &wc(true), grh).unwrap_err();
        assert_eq!(from(&IPV4_GRH[..39]), AhFromWcError::ShortGrh(39));
        assert_eq!(from(&[0; GRH_LEN]), AhFromWcError::UnknownHeader);
        assert_eq!(from(&ipv6_grh(6)), AhFromWcError::NextHeader(6));
        let mut multicast = ipv6_grh(IPPROTO_UDP);
        multicast[24] = 0xff;
        assert_eq!(from(&multicast), AhFromWcError::Multicast);
        let mut multicast = IPV4_GRH;
        multicast[36] = 224;
        assert_eq!(from(&multicast), AhFromWcError::Multicast);
        let mut stranger = IPV4_GRH;
        stranger[39] = 200;
        assert_eq!(from(&stranger), AhFromWcError::NotOurGid);
        // The GID is port 1's, not port 2's.
        let err = AhAttr::from_wc_in(&t, 2, &wc(true), &IPV4_GRH).unwrap_err();
        assert_eq!(err, AhFromWcError::NotOurGid);
        // Over a context the error is typed and names create_ah.
        let (ctx, _t) = rxe_over(5);
        assert_refused_input(&AhAttr::from_wc(&ctx, 1, &wc(true), &IPV4_GRH[..10]).unwrap_err());
    }

    /// A UD cm event's address vector reads back field by field.
    #[test]
    fn the_kernels_vector_reads_back() {
        let attr = AhAttr {
            hop_limit: 3,
            traffic_class: 0x28,
            flow_label: 0xa_bcde,
            sl: 7,
            dlid: 9,
            static_rate: 2,
            src_path_bits: 1,
            ..AhAttr::roce(gid(), 2, 1)
        };
        assert_eq!(AhAttr::from_raw(&attr.to_raw().unwrap()), attr);
        let peer = crate::cm::UdPeer {
            qp_num: 0x55,
            qkey: 0x1111_1111,
            ah_attr: attr.to_raw().unwrap(),
            private_data: Vec::new(),
        };
        assert_eq!(peer.to_ah_attr(), attr);
    }

    /// A driver without UD support here (siw, unknown) is refused before sending.
    #[test]
    fn other_drivers_are_refused_before_sending() {
        for driver in [Some(DriverId::SIW), None] {
            let t = Arc::new(RecordingTransport::new());
            let ctx = Context::over_fake(driver, Box::new(t.clone()));
            let pd = ctx.alloc_pd().unwrap();
            let before = t.count();
            let err = pd.create_ah(&AhAttr::roce(gid(), 0, 1)).unwrap_err();
            assert_eq!(err.errno(), Some(Errno::OPNOTSUPP), "{err}");
            assert_eq!(t.count(), before);
        }
    }
}
