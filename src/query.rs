//! Queries: ports, GIDs, the context and memory regions, and what they
//! answer.
//!
//! The native ioctl methods come first where the kernel has them; the
//! fallbacks are the write() command `QUERY_PORT` and, for GIDs, sysfs
//! (`/sys/class/infiniband/<dev>/ports/<p>/gids/<i>` and
//! `gid_attrs/{types,ndevs}/<i>`), as libibverbs reads them.

use std::net::IpAddr;
use std::path::{Path, PathBuf};

use crate::command::{self, Mtu};
use crate::context::Context;
use crate::error::{Errno, Error, Op};
use crate::gid::{Gid, GidEntry, GidParseError, GidType};
use crate::method::{QueryContext, QueryGidEntry, QueryGidTable, QueryMr, QueryPort};
use crate::mr::MemoryRegion;
use uverbs_uapi as sys;

/// Where sysfs lists RDMA devices.
pub(crate) const SYSFS_INFINIBAND: &str = "/sys/class/infiniband";

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
/// [`Context::query_port`].
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
    fn from_legacy(r: &sys::ib_uverbs_query_port_resp) -> Self {
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

    fn from_ex(r: &sys::ib_uverbs_query_port_resp_ex) -> Self {
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
    /// connected QP's [`path_mtu`](crate::QpAttr::path_mtu) takes. The
    /// kernel answers only known values; `None` would be a device bug.
    ///
    /// ```
    /// # fn f(ctx: &uverbs::Context) -> Result<(), uverbs::Error> {
    /// use uverbs::Mtu;
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

/// What `QUERY_CONTEXT` answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ContextAttr {
    /// Completion vectors of the device.
    pub num_comp_vectors: u32,
    /// `IB_UVERBS_CORE_SUPPORT_*` bits (`OPTIONAL_MR_ACCESS`: access bits
    /// 20..=29 are optional).
    pub core_support: u64,
}

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

/// Reads one sysfs attribute file, trimmed.
fn read_sysfs(op: Op, path: PathBuf) -> Result<String, Error> {
    match std::fs::read_to_string(&path) {
        Ok(text) => Ok(text.trim().to_string()),
        Err(error) => Err(Error::Sysfs { op, path, error }),
    }
}

/// One GID entry from sysfs under `root` (normally
/// [`SYSFS_INFINIBAND`]): `gids/<i>`, `gid_attrs/types/<i>` (unreadable,
/// `EINVAL`, for an invalid entry) and `gid_attrs/ndevs/<i>` (unreadable
/// when no netdev: ifindex 0).
pub(crate) fn sysfs_gid_entry(
    op: Op,
    root: &Path,
    device: &str,
    port: u8,
    index: u32,
) -> Result<GidEntry, Error> {
    let port_dir = root.join(device).join("ports").join(port.to_string());
    let gid_path = port_dir.join("gids").join(index.to_string());
    let text = read_sysfs(op, gid_path.clone())?;
    let gid: Gid = text.parse().map_err(|e: GidParseError| Error::Sysfs {
        op,
        path: gid_path,
        error: std::io::Error::new(std::io::ErrorKind::InvalidData, e),
    })?;
    let types = port_dir.join("gid_attrs/types").join(index.to_string());
    let gid_type = match read_sysfs(op, types)?.as_str() {
        "RoCE v2" => GidType::RoceV2,
        // The kernel shows IB and RoCE v1 alike; RoCE is an Ethernet link
        // on a device that is not an iWARP RNIC.
        _ => {
            let ethernet = read_sysfs(op, port_dir.join("link_layer"))
                .is_ok_and(|l| l.eq_ignore_ascii_case("ethernet"));
            let rnic = read_sysfs(op, root.join(device).join("node_type"))
                .is_ok_and(|t| t.contains("RNIC"));
            if ethernet && !rnic {
                GidType::RoceV1
            } else {
                GidType::Ib
            }
        }
    };
    let ndev = port_dir.join("gid_attrs/ndevs").join(index.to_string());
    let netdev_ifindex = read_sysfs(op, ndev)
        .ok()
        .and_then(|name| {
            read_sysfs(op, Path::new("/sys/class/net").join(name).join("ifindex")).ok()
        })
        .and_then(|i| i.parse().ok())
        .unwrap_or(0);
    Ok(GidEntry {
        gid,
        gid_index: index,
        port_num: port,
        gid_type,
        netdev_ifindex,
    })
}

impl Context {
    /// The driver id for a native method, or `EOPNOTSUPP` (the kernel
    /// refuses a frame with the wrong one).
    fn method_driver(&self, op: Op) -> Result<u32, Error> {
        self.check_process(op)?;
        self.inner
            .driver_id
            .map(|d| d.0)
            .ok_or_else(|| Error::os(op, &self.inner.device, Errno::OPNOTSUPP))
    }

    /// True when native methods go to the kernel: the transport has ioctl
    /// (the kernel's ioctl file, or a fake) and the driver id is known.
    fn prefers_methods(&self) -> bool {
        self.inner.transport.kind().sends_methods() && self.inner.driver_id.is_some()
    }

    /// A port's attributes (`ibv_query_port`; ports count from 1).
    ///
    /// Over the ioctl and write+methods transports this is
    /// `UVERBS_METHOD_QUERY_PORT`, which
    /// also answers [`port_cap_flags2`](PortAttr::port_cap_flags2) and
    /// [`active_speed_ex`](PortAttr::active_speed_ex); over write(), or
    /// when the kernel lacks the method (`EPROTONOSUPPORT`), the write
    /// command `QUERY_PORT`, whose answer is the same struct without them.
    /// A port the device does not have gives `EINVAL`.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let ctx = uverbs::devices()?.into_iter().next().ok_or("no device")?.open()?;
    /// let port = ctx.query_port(1)?;
    /// println!("{:?}, MTU {:?}, {:?}", port.state, port.active_mtu_bytes(), port.link_layer);
    /// # Ok(()) }
    /// ```
    #[doc(alias = "ibv_query_port")]
    pub fn query_port(&self, port: u8) -> Result<PortAttr, Error> {
        self.check_process(Op::QueryPort)?;
        if self.prefers_methods() {
            let driver = self.method_driver(Op::QueryPort)?;
            match QueryPort::new(port).run(self.inner.transport.as_ref(), driver) {
                Ok(resp) => return Ok(PortAttr::from_ex(&resp)),
                Err(Errno::PROTONOSUPPORT) => {} // no such method: the write command
                Err(e) => return Err(Error::os(Op::QueryPort, &self.inner.device, e)),
            }
        }
        // SAFETY: QUERY_PORT hands no memory to the device.
        let (resp, _) =
            unsafe { self.run(Op::QueryPort, &command::QueryPort::new(port), &mut []) }?;
        Ok(PortAttr::from_legacy(&resp))
    }

    /// Entry `index` of port `port`'s GID table (`ibv_query_gid_ex`).
    ///
    /// `UVERBS_METHOD_QUERY_GID_ENTRY` over the ioctl and write+methods
    /// transports; sysfs
    /// (`/sys/class/infiniband/<dev>/ports/<port>/gids/<index>`,
    /// `gid_attrs/types/<index>`, `gid_attrs/ndevs/<index>`) over write(),
    /// without a driver id, or when the kernel answers `EOPNOTSUPP` or
    /// `EPROTONOSUPPORT`. An empty entry is an error: `EINVAL` (or
    /// `ENOENT`) from the kernel, [`Error::Sysfs`] from sysfs.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let ctx = uverbs::devices()?.into_iter().next().ok_or("no device")?.open()?;
    /// let entry = ctx.query_gid_entry(1, 0)?;
    /// println!("GID {} ({:?}) on ifindex {}", entry.gid, entry.gid_type, entry.netdev_ifindex);
    /// # Ok(()) }
    /// ```
    #[doc(alias = "ibv_query_gid_ex")]
    pub fn query_gid_entry(&self, port: u8, index: u32) -> Result<GidEntry, Error> {
        self.check_process(Op::QueryGid)?;
        if self.prefers_methods() {
            let driver = self.method_driver(Op::QueryGid)?;
            match QueryGidEntry::new(port.into(), index).run(self.inner.transport.as_ref(), driver)
            {
                Ok(entry) => return Ok(GidEntry::from(&entry)),
                Err(Errno::OPNOTSUPP | Errno::PROTONOSUPPORT) => {}
                Err(e) => return Err(Error::os(Op::QueryGid, &self.inner.device, e)),
            }
        }
        sysfs_gid_entry(
            Op::QueryGid,
            Path::new(SYSFS_INFINIBAND),
            &self.inner.device,
            port,
            index,
        )
    }

    /// The GID at `index` of port `port` (`ibv_query_gid`); see
    /// [`query_gid_entry`](Self::query_gid_entry) for how it is read.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let ctx = uverbs::devices()?.into_iter().next().ok_or("no device")?.open()?;
    /// println!("GID 0: {}", ctx.query_gid(1, 0)?);
    /// # Ok(()) }
    /// ```
    #[doc(alias = "ibv_query_gid")]
    pub fn query_gid(&self, port: u8, index: u32) -> Result<Gid, Error> {
        self.query_gid_entry(port, index).map(|e| e.gid)
    }

    /// Every valid GID entry of every port (`ibv_query_gid_table`).
    ///
    /// `UVERBS_METHOD_QUERY_GID_TABLE`, with room for the sum of the ports'
    /// `gid_tbl_len` (from [`query_device`](Self::query_device) and
    /// [`query_port`](Self::query_port)); over write(), without a driver id
    /// or when the kernel answers `EOPNOTSUPP`/`EPROTONOSUPPORT`, every
    /// index of every port is read from sysfs and the empty ones are left
    /// out, as the kernel leaves them out.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let ctx = uverbs::devices()?.into_iter().next().ok_or("no device")?.open()?;
    /// for e in ctx.query_gid_table()? {
    ///     println!("port {} index {}: {}", e.port_num, e.gid_index, e.gid);
    /// }
    /// # Ok(()) }
    /// ```
    #[doc(alias = "ibv_query_gid_table")]
    pub fn query_gid_table(&self) -> Result<Vec<GidEntry>, Error> {
        self.check_process(Op::QueryGidTable)?;
        let ports = self.query_device()?.phys_port_cnt;
        let mut lens = Vec::with_capacity(ports.into());
        for port in 1..=ports {
            lens.push((port, self.query_port(port)?.gid_tbl_len));
        }
        if self.prefers_methods() {
            let driver = self.method_driver(Op::QueryGidTable)?;
            let capacity = lens.iter().map(|(_, n)| *n as usize).sum::<usize>().max(1);
            match QueryGidTable::new(capacity).run(self.inner.transport.as_ref(), driver) {
                Ok(entries) => return Ok(entries.iter().map(GidEntry::from).collect()),
                Err(Errno::OPNOTSUPP | Errno::PROTONOSUPPORT) => {}
                Err(e) => return Err(Error::os(Op::QueryGidTable, &self.inner.device, e)),
            }
        }
        let root = Path::new(SYSFS_INFINIBAND);
        let mut entries = Vec::new();
        for (port, len) in lens {
            let gids = root
                .join(&*self.inner.device)
                .join("ports")
                .join(port.to_string())
                .join("gids");
            if let Err(source) = std::fs::metadata(&gids) {
                return Err(Error::Sysfs {
                    op: Op::QueryGidTable,
                    path: gids,
                    error: source,
                });
            }
            for index in 0..len {
                let entry =
                    sysfs_gid_entry(Op::QueryGidTable, root, &self.inner.device, port, index);
                // An empty entry reads as the zero GID with no type.
                match entry {
                    Ok(entry) if !entry.gid.is_zero() => entries.push(entry),
                    _ => {}
                }
            }
        }
        Ok(entries)
    }

    /// The context's attributes from the kernel (`UVERBS_METHOD_QUERY_CONTEXT`).
    ///
    /// The method exists only over ioctl; it is sent on either transport
    /// when the driver id is known, like
    /// [`kernel_handle_count`](Self::kernel_handle_count). The kernel answers
    /// `EOPNOTSUPP` unless the driver implements `query_ucontext` (mlx5 and
    /// efa do; rxe and siw do not, up to Linux 6.12 at least), and
    /// `EOPNOTSUPP` is also the answer without a driver id.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let ctx = uverbs::devices()?.into_iter().next().ok_or("no device")?.open()?;
    /// match ctx.query_context() {
    ///     Ok(attr) => assert_eq!(attr.num_comp_vectors, ctx.num_comp_vectors()),
    ///     Err(e) if e.errno() == Some(uverbs::Errno::OPNOTSUPP) => println!("driver cannot: {e}"),
    ///     Err(e) => return Err(e.into()),
    /// }
    /// # Ok(()) }
    /// ```
    #[doc(alias = "ibv_query_context")]
    pub fn query_context(&self) -> Result<ContextAttr, Error> {
        let driver = self.method_driver(Op::QueryContext)?;
        let (num_comp_vectors, core_support) = QueryContext::new()
            .run(self.inner.transport.as_ref(), driver)
            .map_err(|e| Error::os(Op::QueryContext, &self.inner.device, e))?;
        Ok(ContextAttr {
            num_comp_vectors,
            core_support,
        })
    }
}

impl Context {
    /// The entry of port `port`'s GID table that RoCE derives from the
    /// local address `addr` with type `gid_type` (its
    /// [`gid_index`](GidEntry::gid_index) is what an address vector's
    /// `sgid_index` names), or `None` when the port has no such GID: the
    /// address is not on the port's network interface, the device lacks
    /// that GID type, or the port is InfiniBand or iWARP, whose GIDs are
    /// not derived from IP addresses. One
    /// [`query_gid_table`](Self::query_gid_table), then
    /// [`GidEntry::find`]; its errors are that call's.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use uverbs::GidType;
    /// let ctx = uverbs::device("rxe0")?.ok_or("no rxe0")?.open()?;
    /// match ctx.find_gid(1, "192.0.2.1".parse()?, GidType::RoceV2)? {
    ///     Some(e) => println!("192.0.2.1 is GID index {}: {}", e.gid_index, e.gid),
    ///     None => println!("192.0.2.1 has no RoCE v2 GID on rxe0 port 1"),
    /// }
    /// # Ok(()) }
    /// ```
    pub fn find_gid(
        &self,
        port: u8,
        addr: IpAddr,
        gid_type: GidType,
    ) -> Result<Option<GidEntry>, Error> {
        let table = self.query_gid_table()?;
        Ok(GidEntry::find(&table, port, addr, gid_type).copied())
    }
}

impl MemoryRegion {
    /// The kernel's lkey, rkey, length and iova of this MR
    /// (`UVERBS_METHOD_QUERY_MR`): a check that what the MR records is what
    /// the kernel holds, e.g. after a re-registration.
    ///
    /// There is no write() command for it (`IB_USER_VERBS_CMD_QUERY_MR` was
    /// never implemented): the method is sent over ioctl on either
    /// transport, as long as the driver id is known (else `EOPNOTSUPP`),
    /// like [`Context::kernel_handle_count`].
    ///
    /// ```no_run
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let ctx = uverbs::devices()?.into_iter().next().ok_or("no device")?.open()?;
    /// # let pd = ctx.alloc_pd()?;
    /// let mut buf = vec![0u8; 4096];
    /// // SAFETY: `buf` outlives the MR.
    /// let mr = unsafe { pd.reg_mr(buf.as_mut_ptr(), buf.len(), uverbs::AccessFlags::LOCAL_WRITE)? };
    /// let attr = mr.query()?;
    /// assert_eq!((attr.lkey, attr.iova), (mr.lkey(), buf.as_ptr() as u64));
    /// # drop(mr); Ok(()) }
    /// ```
    #[doc(alias = "ibv_query_mr")]
    pub fn query(&self) -> Result<MrAttr, Error> {
        let ctx = self.context();
        let driver = ctx.method_driver(Op::QueryMr)?;
        QueryMr::new(self.handle())
            .run(ctx.inner.transport.as_ref(), driver)
            .map_err(|e| Error::os(Op::QueryMr, &ctx.inner.device, e))
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

    /// A fake sysfs tree: the fallback reads gid, type, link layer, node
    /// type and the netdev, and refuses an entry whose type is unreadable.
    #[test]
    fn sysfs_fallback_reads_the_files_libibverbs_reads() {
        let root = std::env::temp_dir().join(format!("uverbs-gid-{}", std::process::id()));
        let port = root.join("rxe9/ports/1");
        std::fs::create_dir_all(port.join("gids")).unwrap();
        std::fs::create_dir_all(port.join("gid_attrs/types")).unwrap();
        std::fs::create_dir_all(port.join("gid_attrs/ndevs")).unwrap();
        std::fs::write(
            port.join("gids/0"),
            "fe80:0000:0000:0000:0211:22ff:fe33:4455\n",
        )
        .unwrap();
        std::fs::write(port.join("gid_attrs/types/0"), "RoCE v2\n").unwrap();
        std::fs::write(
            port.join("gids/1"),
            "0000:0000:0000:0000:0000:ffff:c000:0201\n",
        )
        .unwrap();
        std::fs::write(port.join("gid_attrs/types/1"), "IB/RoCE v1\n").unwrap();
        std::fs::write(port.join("link_layer"), "Ethernet\n").unwrap();
        std::fs::write(root.join("rxe9/node_type"), "1: CA\n").unwrap();
        std::fs::write(
            port.join("gids/2"),
            "0000:0000:0000:0000:0000:0000:0000:0000\n",
        )
        .unwrap();

        let e0 = sysfs_gid_entry(Op::QueryGid, &root, "rxe9", 1, 0).unwrap();
        assert_eq!(
            e0.gid.to_string(),
            "fe80:0000:0000:0000:0211:22ff:fe33:4455"
        );
        assert_eq!((e0.gid_index, e0.port_num), (0, 1));
        assert_eq!(e0.gid_type, GidType::RoceV2);
        assert_eq!(e0.netdev_ifindex, 0, "no ndevs file: no netdev");
        let e1 = sysfs_gid_entry(Op::QueryGid, &root, "rxe9", 1, 1).unwrap();
        assert_eq!(e1.gid_type, GidType::RoceV1, "Ethernet on a CA: RoCE v1");
        std::fs::write(root.join("rxe9/node_type"), "4: RNIC\n").unwrap();
        let e1 = sysfs_gid_entry(Op::QueryGid, &root, "rxe9", 1, 1).unwrap();
        assert_eq!(e1.gid_type, GidType::Ib, "an iWARP RNIC's GIDs are IB type");
        // Index 2: a zero GID whose type cannot be read is an error naming the file.
        match sysfs_gid_entry(Op::QueryGid, &root, "rxe9", 1, 2) {
            Err(Error::Sysfs { op, path, .. }) => {
                assert_eq!(op, Op::QueryGid);
                assert!(path.ends_with("gid_attrs/types/2"), "{path:?}");
            }
            other => panic!("expected a sysfs error, got {other:?}"),
        }
        std::fs::remove_dir_all(&root).unwrap();
    }
}
