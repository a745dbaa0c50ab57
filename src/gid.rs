//! GIDs: the identifier, a GID table's entry and its type, and choosing
//! one: from a local IP address and a GID type to the entry of a port's
//! GID table that RoCE derives from that address. (Reading the table is
//! the context's: `Context::query_gid_table`, `find_gid`, in query.rs.)
//!
//! On RoCE the kernel fills each port's table from the IP addresses of the
//! port's network interface: for every address one entry per GID type the
//! device supports (mlx5: RoCE v1 and v2; rxe: v2 only), the GID being the IPv6
//! address itself or, for IPv4, the mapped `::ffff:a.b.c.d`; besides
//! those, the default GID (`fe80::` and the interface ID from the MAC) at
//! the first indices. Which index an address gets depends on the order in
//! which addresses came and went, so a fixed index names a different
//! address on another machine, or after a reboot: look the address up.
//! InfiniBand GIDs (subnet prefix and port GUID) and iWARP's (siw: one
//! entry, the MAC in its first six bytes, type [`GidType::Ib`]) are not
//! derived from IP addresses, and no address finds them.

use std::fmt;
use std::net::{IpAddr, Ipv6Addr};
use std::str::FromStr;

use uverbs_uapi as sys;
use zerocopy::IntoBytes;

/// A 128-bit global identifier (`union ibv_gid`), in network byte order.
///
/// Displays and parses as sysfs writes it: eight groups of four hex digits
/// (`fe80:0000:0000:0000:0211:22ff:fe33:4455`).
///
/// ```
/// let gid: uverbs::device::Gid = "fe80:0000:0000:0000:0211:22ff:fe33:4455".parse().unwrap();
/// assert_eq!(gid.raw()[..2], [0xfe, 0x80]);
/// assert_eq!(gid.to_string(), "fe80:0000:0000:0000:0211:22ff:fe33:4455");
/// assert!("fe80::1".parse::<uverbs::device::Gid>().is_err());
/// ```
#[doc(alias = "ibv_gid")]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Gid([u8; 16]);

impl Gid {
    /// The GID with these 16 bytes (network order).
    pub fn from_raw(raw: [u8; 16]) -> Self {
        Gid(raw)
    }

    /// The 16 bytes, network order.
    pub fn raw(&self) -> [u8; 16] {
        self.0
    }

    /// True for the all-zero GID (an empty table entry, as sysfs shows one).
    pub fn is_zero(&self) -> bool {
        self.0 == [0; 16]
    }

    /// True for a multicast group's GID, as the kernel judges one
    /// (`rdma_is_multicast_addr`): an IPv4-mapped address in 224.0.0.0/4,
    /// or any other GID in ff00::/8.
    ///
    /// ```
    /// let gid = |s: &str| s.parse::<uverbs::device::Gid>().unwrap();
    /// assert!(gid("0000:0000:0000:0000:0000:ffff:ef01:0203").is_multicast()); // 239.1.2.3
    /// assert!(!gid("0000:0000:0000:0000:0000:ffff:c000:0201").is_multicast()); // 192.0.2.1
    /// assert!(gid("ff0e:0000:0000:0000:0000:0000:0001:0203").is_multicast());
    /// assert!(!gid("fe80:0000:0000:0000:0211:22ff:fe33:4455").is_multicast());
    /// ```
    pub fn is_multicast(&self) -> bool {
        let ip = std::net::Ipv6Addr::from(self.0);
        match ip.to_ipv4_mapped() {
            Some(v4) => v4.is_multicast(),
            None => ip.is_multicast(),
        }
    }
}

impl fmt::Display for Gid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, pair) in self.0.chunks(2).enumerate() {
            if i > 0 {
                f.write_str(":")?;
            }
            write!(f, "{:02x}{:02x}", pair[0], pair[1])?;
        }
        Ok(())
    }
}

/// A GID text that is not eight groups of four hex digits.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not a GID in sysfs form (eight groups of four hex digits): {0:?}")]
pub struct GidParseError(String);

impl FromStr for Gid {
    type Err = GidParseError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || GidParseError(s.to_string());
        let mut raw = [0u8; 16];
        let mut groups = s.trim().split(':');
        for pair in raw.chunks_mut(2) {
            let group = groups.next().ok_or_else(bad)?;
            if group.len() != 4 || !group.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(bad());
            }
            let v = u16::from_str_radix(group, 16).map_err(|_| bad())?;
            pair.copy_from_slice(&v.to_be_bytes());
        }
        if groups.next().is_some() {
            return Err(bad());
        }
        Ok(Gid(raw))
    }
}

/// What a GID is for (`enum ibv_gid_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GidType {
    /// InfiniBand (also iWARP devices' GIDs).
    Ib,
    /// RoCE v1.
    RoceV1,
    /// RoCE v2 (over UDP/IP).
    RoceV2,
    /// A value this crate does not know.
    Other(u32),
}

impl From<u32> for GidType {
    fn from(v: u32) -> Self {
        match v {
            sys::IB_UVERBS_GID_TYPE_IB => GidType::Ib,
            sys::IB_UVERBS_GID_TYPE_ROCE_V1 => GidType::RoceV1,
            sys::IB_UVERBS_GID_TYPE_ROCE_V2 => GidType::RoceV2,
            v => GidType::Other(v),
        }
    }
}

/// One valid GID table entry (`struct ibv_gid_entry`).
#[doc(alias = "ibv_gid_entry")]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct GidEntry {
    /// The GID.
    pub gid: Gid,
    /// Its index in the port's table (`u32`: tables can be longer than the
    /// 256 entries an address vector's `u8` `sgid_index` reaches; rxe's
    /// has 1024).
    pub gid_index: u32,
    /// The port (`u8`, as everywhere in this crate; the kernel's
    /// `ib_uverbs_gid_entry` carries it in a `u32`).
    pub port_num: u8,
    /// Its type.
    pub gid_type: GidType,
    /// The network interface behind it, 0 if none.
    pub netdev_ifindex: u32,
}

impl From<&sys::ib_uverbs_gid_entry> for GidEntry {
    fn from(e: &sys::ib_uverbs_gid_entry) -> Self {
        let mut raw = [0u8; 16];
        raw.copy_from_slice(e.gid.as_bytes());
        GidEntry {
            gid: Gid(raw),
            gid_index: e.gid_index,
            // Ports are numbered 1..=255 (`phys_port_cnt` is a u8).
            port_num: u8::try_from(e.port_num).unwrap_or(u8::MAX),
            gid_type: e.gid_type.into(),
            netdev_ifindex: e.netdev_ifindex,
        }
    }
}

impl Gid {
    /// The GID RoCE derives from `addr`: an IPv6 address as it is, an IPv4
    /// address mapped (`::ffff:a.b.c.d`), as the kernel's `rdma_ip2gid`.
    ///
    /// ```
    /// use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
    /// let v4 = uverbs::device::Gid::from_ip(IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1)));
    /// assert_eq!(v4.to_string(), "0000:0000:0000:0000:0000:ffff:c000:0201");
    /// let v6 = uverbs::device::Gid::from_ip("fe80::211:22ff:fe33:4455".parse::<IpAddr>().unwrap());
    /// assert_eq!(v6.to_string(), "fe80:0000:0000:0000:0211:22ff:fe33:4455");
    /// ```
    pub fn from_ip(addr: IpAddr) -> Gid {
        match addr {
            IpAddr::V4(v4) => Gid::from_raw(v4.to_ipv6_mapped().octets()),
            IpAddr::V6(v6) => Gid::from_raw(v6.octets()),
        }
    }

    /// The IP address this GID is, read the other way: an IPv4 address
    /// for an IPv4-mapped GID (`::ffff:a.b.c.d`), else the IPv6 address of
    /// the same 16 bytes (for a GID not derived from an address, such as
    /// InfiniBand's or iWARP's, an address nobody has).
    ///
    /// ```
    /// let gid: uverbs::device::Gid = "0000:0000:0000:0000:0000:ffff:c000:0201".parse().unwrap();
    /// assert_eq!(gid.to_ip().to_string(), "192.0.2.1");
    /// ```
    pub fn to_ip(&self) -> IpAddr {
        let v6 = Ipv6Addr::from(self.raw());
        match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(v6),
        }
    }
}

impl GidEntry {
    /// The entry of `entries` (a GID table, as
    /// [`Context::query_gid_table`](crate::Context::query_gid_table) answers it) on port `port` whose GID
    /// is `addr`'s ([`Gid::from_ip`]) and whose type is `gid_type`; the
    /// lowest index if several are, `None` if none is. Zero (empty)
    /// entries never match. An IPv4-mapped IPv6 address finds what its
    /// IPv4 address finds.
    ///
    /// ```
    /// use std::net::{IpAddr, Ipv4Addr};
    /// use uverbs::device::{Gid, GidEntry, GidType};
    /// let addr = IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1));
    /// let entry = |gid_index, gid_type| GidEntry {
    ///     gid: Gid::from_ip(addr),
    ///     gid_index,
    ///     port_num: 1,
    ///     gid_type,
    ///     netdev_ifindex: 2,
    /// };
    /// let table = [entry(2, GidType::RoceV1), entry(3, GidType::RoceV2)];
    /// let v2 = GidEntry::find(&table, 1, addr, GidType::RoceV2).unwrap();
    /// assert_eq!(v2.gid_index, 3);
    /// assert!(GidEntry::find(&table, 2, addr, GidType::RoceV2).is_none()); // another port
    /// ```
    pub fn find(
        entries: &[GidEntry],
        port: u8,
        addr: IpAddr,
        gid_type: GidType,
    ) -> Option<&GidEntry> {
        let want = Gid::from_ip(addr);
        entries
            .iter()
            .filter(|e| {
                e.port_num == port && e.gid_type == gid_type && !e.gid.is_zero() && e.gid == want
            })
            .min_by_key(|e| e.gid_index)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gid_text_round_trips_and_rejects_other_forms() {
        let text = "fe80:0000:0000:0000:5054:00ff:fe12:3456";
        let gid: Gid = text.parse().unwrap();
        assert_eq!(
            gid.raw(),
            [0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x50, 0x54, 0, 0xff, 0xfe, 0x12, 0x34, 0x56]
        );
        assert_eq!(gid.to_string(), text);
        assert_eq!(format!("{text}\n").parse::<Gid>(), Ok(gid), "sysfs newline");
        for bad in [
            "fe80::1",
            "fe80:0000:0000:0000:5054:00ff:fe12",
            "fe80:0000:0000:0000:5054:00ff:fe12:3456:0000",
            "fe80:0000:0000:0000:5054:00ff:fe12:345g",
            "+e80:0000:0000:0000:5054:00ff:fe12:3456",
        ] {
            assert!(bad.parse::<Gid>().is_err(), "{bad}");
        }
    }

    use std::net::Ipv4Addr;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn entry(port_num: u8, gid_index: u32, gid: Gid, gid_type: GidType) -> GidEntry {
        GidEntry {
            gid,
            gid_index,
            port_num,
            gid_type,
            netdev_ifindex: 3,
        }
    }

    /// A RoCE table as mlx5 fills it: the default link-local GID (v1, v2),
    /// then an IPv4 address (v1, v2) and an IPv6 one (v1, v2) on port 1;
    /// port 2 has the same IPv4 address at other indices.
    fn roce_table() -> Vec<GidEntry> {
        let ll = Gid::from_ip(ip("fe80::5054:ff:fe00:201"));
        let v4 = Gid::from_ip(ip("192.0.2.1"));
        let v6 = Gid::from_ip(ip("2001:db8::1"));
        vec![
            entry(1, 0, ll, GidType::RoceV1),
            entry(1, 1, ll, GidType::RoceV2),
            entry(1, 2, v4, GidType::RoceV1),
            entry(1, 3, v4, GidType::RoceV2),
            entry(1, 4, v6, GidType::RoceV1),
            entry(1, 5, v6, GidType::RoceV2),
            entry(2, 0, v4, GidType::RoceV1),
            entry(2, 1, v4, GidType::RoceV2),
        ]
    }

    fn index(table: &[GidEntry], port: u8, addr: &str, ty: GidType) -> Option<u32> {
        GidEntry::find(table, port, ip(addr), ty).map(|e| e.gid_index)
    }

    #[test]
    fn ipv4_finds_its_mapped_gid_of_the_type_asked() {
        let t = roce_table();
        assert_eq!(index(&t, 1, "192.0.2.1", GidType::RoceV2), Some(3));
        assert_eq!(index(&t, 1, "192.0.2.1", GidType::RoceV1), Some(2));
        let found = GidEntry::find(&t, 1, ip("192.0.2.1"), GidType::RoceV2).unwrap();
        assert_eq!(found.gid.raw()[10..], [0xff, 0xff, 192, 0, 2, 1]);
        assert_eq!(found.gid.raw()[..10], [0; 10]);
    }

    #[test]
    fn ipv6_finds_the_gid_equal_to_the_address() {
        let t = roce_table();
        assert_eq!(index(&t, 1, "2001:db8::1", GidType::RoceV2), Some(5));
        assert_eq!(index(&t, 1, "2001:db8::1", GidType::RoceV1), Some(4));
        assert_eq!(
            index(&t, 1, "fe80::5054:ff:fe00:201", GidType::RoceV2),
            Some(1)
        );
        assert_eq!(
            index(&t, 1, "fe80::5054:ff:fe00:201", GidType::RoceV1),
            Some(0)
        );
    }

    #[test]
    fn an_ipv4_mapped_ipv6_address_is_its_ipv4_address() {
        let t = roce_table();
        assert_eq!(index(&t, 1, "::ffff:192.0.2.1", GidType::RoceV2), Some(3));
    }

    #[test]
    fn each_port_answers_for_itself() {
        let t = roce_table();
        assert_eq!(index(&t, 2, "192.0.2.1", GidType::RoceV2), Some(1));
        assert_eq!(index(&t, 2, "2001:db8::1", GidType::RoceV2), None);
        assert_eq!(index(&t, 3, "192.0.2.1", GidType::RoceV2), None);
        assert_eq!(index(&t, 0, "192.0.2.1", GidType::RoceV2), None);
    }

    #[test]
    fn no_match_is_none() {
        let t = roce_table();
        assert_eq!(index(&t, 1, "192.0.2.2", GidType::RoceV2), None);
        assert_eq!(index(&t, 1, "2001:db8::2", GidType::RoceV2), None);
        assert_eq!(index(&t, 1, "192.0.2.1", GidType::Ib), None);
        assert_eq!(index(&t, 1, "192.0.2.1", GidType::Other(7)), None);
        assert_eq!(index(&[], 1, "192.0.2.1", GidType::RoceV2), None);
    }

    #[test]
    fn zero_entries_never_match() {
        // `::` and `0.0.0.0`'s mapped GID: only the all-zero GID is empty.
        let t = [
            entry(1, 0, Gid::default(), GidType::RoceV2),
            entry(1, 1, Gid::default(), GidType::Ib),
        ];
        assert_eq!(index(&t, 1, "::", GidType::RoceV2), None);
        assert_eq!(index(&t, 1, "::", GidType::Ib), None);
        let mapped_zero = Gid::from_ip(IpAddr::V4(Ipv4Addr::UNSPECIFIED));
        assert!(!mapped_zero.is_zero());
        let t = [entry(1, 4, mapped_zero, GidType::RoceV2)];
        assert_eq!(index(&t, 1, "0.0.0.0", GidType::RoceV2), Some(4));
    }

    #[test]
    fn the_lowest_index_wins_whatever_the_order() {
        let v4 = Gid::from_ip(ip("192.0.2.1"));
        let t = [
            entry(1, 9, v4, GidType::RoceV2),
            entry(1, 7, v4, GidType::RoceV2),
            entry(1, 8, v4, GidType::RoceV2),
        ];
        assert_eq!(index(&t, 1, "192.0.2.1", GidType::RoceV2), Some(7));
    }

    #[test]
    fn ib_and_iwarp_gids_are_found_by_no_address() {
        // InfiniBand: subnet prefix fe80::/64 and the port GUID; iWARP
        // (siw): the MAC in the first six bytes, type IB.
        let ib: Gid = "fe80:0000:0000:0000:0002:c903:0001:2345".parse().unwrap();
        let siw: Gid = "5254:0000:0301:0000:0000:0000:0000:0000".parse().unwrap();
        let t = [entry(1, 0, ib, GidType::Ib), entry(1, 0, siw, GidType::Ib)];
        for ty in [GidType::RoceV1, GidType::RoceV2] {
            assert_eq!(index(&t, 1, "198.51.100.1", ty), None);
        }
        assert_eq!(index(&t, 1, "198.51.100.1", GidType::Ib), None);
        // Asked by its own bytes as an IPv6 address, an IB GID is found.
        assert_eq!(index(&t, 1, &ib.to_ip().to_string(), GidType::Ib), Some(0));
    }

    #[test]
    fn from_ip_and_to_ip_are_inverse() {
        for s in ["192.0.2.1", "0.0.0.0", "2001:db8::1", "fe80::1", "::1"] {
            assert_eq!(Gid::from_ip(ip(s)).to_ip(), ip(s), "{s}");
        }
        // `::ffff:a.b.c.d` reads back as IPv4.
        assert_eq!(
            Gid::from_ip(ip("::ffff:192.0.2.1")).to_ip(),
            ip("192.0.2.1")
        );
    }
}
