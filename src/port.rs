//! Ports: a port's attributes, state and link layer, as
//! `Context::query_port` answers them.

use crate::command::Mtu;
use uverbs_uapi as sys;

/// A port's logical state (`enum ibv_port_state`).
#[doc(alias = "ibv_port_state")]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PortState {
    /// `IBV_PORT_NOP` (0).
    Nop,
    /// `IBV_PORT_DOWN` (1).
    Down,
    /// `IBV_PORT_INIT` (2).
    Init,
    /// `IBV_PORT_ARMED` (3).
    Armed,
    /// `IBV_PORT_ACTIVE` (4): the port can carry traffic.
    Active,
    /// `IBV_PORT_ACTIVE_DEFER` (5).
    ActiveDefer,
    /// A value this crate does not know.
    Other(u8),
}

impl From<u8> for PortState {
    fn from(v: u8) -> Self {
        match v {
            0 => PortState::Nop,
            1 => PortState::Down,
            2 => PortState::Init,
            3 => PortState::Armed,
            4 => PortState::Active,
            5 => PortState::ActiveDefer,
            v => PortState::Other(v),
        }
    }
}

/// A port's link layer (`IBV_LINK_LAYER_*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LinkLayer {
    /// `IBV_LINK_LAYER_UNSPECIFIED` (0).
    Unspecified,
    /// `IBV_LINK_LAYER_INFINIBAND` (1).
    InfiniBand,
    /// `IBV_LINK_LAYER_ETHERNET` (2): RoCE (rxe) and iWARP (siw).
    Ethernet,
    /// A value this crate does not know.
    Other(u8),
}

impl From<u8> for LinkLayer {
    fn from(v: u8) -> Self {
        match v {
            0 => LinkLayer::Unspecified,
            1 => LinkLayer::InfiniBand,
            2 => LinkLayer::Ethernet,
            v => LinkLayer::Other(v),
        }
    }
}

/// A port's attributes (`struct ibv_port_attr`), from
/// [`Context::query_port`](crate::Context::query_port).
#[doc(alias = "ibv_port_attr")]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct PortAttr {
    /// Logical state.
    pub state: PortState,
    /// Largest MTU, as `enum ibv_mtu` (1 = 256 … 5 = 4096); typed:
    /// [`max_mtu()`](Self::max_mtu).
    pub max_mtu: u8,
    /// Active MTU, as `enum ibv_mtu`; typed: [`active_mtu()`](Self::active_mtu).
    pub active_mtu: u8,
    /// Entries in the GID table.
    pub gid_tbl_len: u32,
    /// `IB_UVERBS_PCF_*` capability bits.
    pub port_cap_flags: u32,
    /// Largest message, in bytes.
    pub max_msg_sz: u32,
    /// Bad P_Key counter.
    pub bad_pkey_cntr: u32,
    /// Q_Key violation counter.
    pub qkey_viol_cntr: u32,
    /// Entries in the P_Key table.
    pub pkey_tbl_len: u16,
    /// Base LID.
    pub lid: u16,
    /// Subnet manager's LID.
    pub sm_lid: u16,
    /// LID mask control.
    pub lmc: u8,
    /// Virtual lanes.
    pub max_vl_num: u8,
    /// Subnet manager's service level.
    pub sm_sl: u8,
    /// Subnet propagation timeout.
    pub subnet_timeout: u8,
    /// Init type reply.
    pub init_type_reply: u8,
    /// Active link width.
    pub active_width: u8,
    /// Active link speed (the legacy field, capped at NDR).
    pub active_speed: u8,
    /// Physical state (5 = LinkUp).
    pub phys_state: u8,
    /// Link layer.
    pub link_layer: LinkLayer,
    /// `IB_UVERBS_QPF_*` flags (`GRH_REQUIRED`).
    pub flags: u8,
    /// More capability bits; `None` when the write() command answered
    /// (it has no such field).
    pub port_cap_flags2: Option<u16>,
    /// The uncapped active speed; `None` from the write() command. Kernels
    /// up to 6.1 leave it 0.
    pub active_speed_ex: Option<u32>,
}

impl PortAttr {
    pub(crate) fn from_legacy(r: &sys::ib_uverbs_query_port_resp) -> Self {
        PortAttr {
            state: r.state.into(),
            max_mtu: r.max_mtu,
            active_mtu: r.active_mtu,
            gid_tbl_len: r.gid_tbl_len,
            port_cap_flags: r.port_cap_flags,
            max_msg_sz: r.max_msg_sz,
            bad_pkey_cntr: r.bad_pkey_cntr,
            qkey_viol_cntr: r.qkey_viol_cntr,
            pkey_tbl_len: r.pkey_tbl_len,
            lid: r.lid,
            sm_lid: r.sm_lid,
            lmc: r.lmc,
            max_vl_num: r.max_vl_num,
            sm_sl: r.sm_sl,
            subnet_timeout: r.subnet_timeout,
            init_type_reply: r.init_type_reply,
            active_width: r.active_width,
            active_speed: r.active_speed,
            phys_state: r.phys_state,
            link_layer: r.link_layer.into(),
            flags: r.flags,
            port_cap_flags2: None,
            active_speed_ex: None,
        }
    }

    pub(crate) fn from_ex(r: &sys::ib_uverbs_query_port_resp_ex) -> Self {
        let mut speed = [0u8; 4];
        speed.copy_from_slice(&r.reserved[2..6]);
        PortAttr {
            port_cap_flags2: Some(r.port_cap_flags2),
            active_speed_ex: Some(u32::from_ne_bytes(speed)),
            ..Self::from_legacy(&r.legacy_resp)
        }
    }

    /// The largest MTU, if the value is a known `enum ibv_mtu`.
    pub fn max_mtu(&self) -> Option<Mtu> {
        Mtu::from_raw(self.max_mtu)
    }

    /// The active MTU, if the value is a known `enum ibv_mtu`: what a
    /// connected QP's [`path_mtu`](crate::qp::QpAttr::path_mtu) takes. The
    /// kernel answers only known values; `None` would be a device bug.
    ///
    /// ```
    /// # fn f(ctx: &uverbs::Context) -> Result<(), uverbs::Error> {
    /// use uverbs::qp::Mtu;
    /// let port = ctx.query_port(1)?;
    /// // rxe on a 1500-byte netdev: 1024.
    /// let mtu = port.active_mtu().unwrap_or(Mtu::Mtu1024);
    /// println!("path MTU {} bytes", mtu.bytes());
    /// # Ok(()) }
    /// ```
    pub fn active_mtu(&self) -> Option<Mtu> {
        Mtu::from_raw(self.active_mtu)
    }

    /// The largest MTU in bytes, if the value is a known `enum ibv_mtu`.
    pub fn max_mtu_bytes(&self) -> Option<u32> {
        self.max_mtu().map(Mtu::bytes)
    }

    /// The active MTU in bytes, if the value is a known `enum ibv_mtu`.
    pub fn active_mtu_bytes(&self) -> Option<u32> {
        self.active_mtu().map(Mtu::bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mtu_enum_values_map_to_bytes() {
        assert_eq!(
            (0..=6)
                .map(|raw| Mtu::from_raw(raw).map(Mtu::bytes))
                .collect::<Vec<_>>(),
            [
                None,
                Some(256),
                Some(512),
                Some(1024),
                Some(2048),
                Some(4096),
                None
            ]
        );
    }
}
