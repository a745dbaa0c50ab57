//! The context's queries: its ports, its GID tables and itself. What they
//! answer lives with what it describes (port.rs, gid.rs, context.rs); a
//! memory region's query is in mr/.
//!
//! The native ioctl methods come first where the kernel has them; the
//! fallbacks are the write() command `QUERY_PORT` and, for GIDs, sysfs
//! (`/sys/class/infiniband/<dev>/ports/<p>/gids/<i>` and
//! `gid_attrs/{types,ndevs}/<i>`), as libibverbs reads them.

use std::net::IpAddr;
use std::path::{Path, PathBuf};

use crate::command;
use crate::context::{Context, ContextAttr};
use crate::error::{Errno, Error, Op};
use crate::gid::{Gid, GidEntry, GidParseError, GidType};
use crate::method::{QueryContext, QueryGidEntry, QueryGidTable, QueryPort};
use crate::port::PortAttr;

/// Where sysfs lists RDMA devices.
pub(crate) const SYSFS_INFINIBAND: &str = "/sys/class/infiniband";

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
    ///     Err(e) if e.errno() == Some(uverbs::error::Errno::OPNOTSUPP) => println!("driver cannot: {e}"),
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
    /// use uverbs::device::GidType;
    /// let ctx = uverbs::Device::by_name("rxe0")?.open()?;
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

#[cfg(test)]
mod tests {
    use super::*;

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
