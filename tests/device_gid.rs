//! GID selection on real devices: [`Context::find_gid`] from the host's own
//! addresses (read with `getifaddrs`, independently of the GID table).
//!
//! - rxe (RoCE v2 only: its port capability is `ROCE_UDP_ENCAP`, so its
//!   table has no RoCE v1 entries): every IPv4 address of the netdev under
//!   the port finds its mapped RoCE v2 GID, equal to the table's entry at
//!   that index; the netdev's IPv6 link-local address finds the GID equal
//!   to it; an address the host does not have, the loopback address and
//!   an address of another netdev find nothing, nor does any address as
//!   type RoCE v1 or IB.
//! - siw (iWARP): the port's GID is its netdev's MAC in the first six bytes
//!   (type IB), derived from no address: no address of the host finds a
//!   GID of any type.

#[macro_use]
mod common;

use std::ffi::CStr;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use common::{loud, Driver};
use uverbs::device::{Gid, GidEntry, GidType};
use uverbs::Context;

const PORT: u8 = 1;

/// Every (interface index, address) of the host, from `getifaddrs`.
fn host_addrs() -> Vec<(u32, IpAddr)> {
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs writes the head of a list it allocates into
    // `head`; the list is freed below and nothing read from it outlives it.
    let rc = unsafe { libc::getifaddrs(&mut head) };
    assert_eq!(rc, 0, "getifaddrs: {}", std::io::Error::last_os_error());
    let mut found = Vec::new();
    let mut node = head;
    while !node.is_null() {
        // SAFETY: `node` is a node of the list getifaddrs made, not freed yet.
        let ifa = unsafe { &*node };
        node = ifa.ifa_next;
        if ifa.ifa_addr.is_null() {
            continue;
        }
        // SAFETY: a non-null `ifa_addr` points to a sockaddr whose family
        // says its full type (sockaddr_in for AF_INET, sockaddr_in6 for
        // AF_INET6); `ifa_name` is a NUL-terminated name.
        let (addr, name) = unsafe {
            let addr = match i32::from((*ifa.ifa_addr).sa_family) {
                libc::AF_INET => {
                    let sin = &*(ifa.ifa_addr as *const libc::sockaddr_in);
                    IpAddr::V4(Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr)))
                }
                libc::AF_INET6 => {
                    let sin6 = &*(ifa.ifa_addr as *const libc::sockaddr_in6);
                    IpAddr::V6(Ipv6Addr::from(sin6.sin6_addr.s6_addr))
                }
                _ => continue,
            };
            (addr, CStr::from_ptr(ifa.ifa_name).to_owned())
        };
        // SAFETY: `name` is a NUL-terminated C string.
        let index = unsafe { libc::if_nametoindex(name.as_ptr()) };
        found.push((index, addr));
    }
    // SAFETY: `head` came from getifaddrs and is freed once.
    unsafe { libc::freeifaddrs(head) };
    found
}

/// The netdev behind `port`'s RoCE GIDs (their common `netdev_ifindex`).
fn roce_netdev(name: &str, table: &[GidEntry]) -> u32 {
    let mut ifindexes: Vec<u32> = table
        .iter()
        .filter(|e| e.port_num == PORT)
        .map(|e| e.netdev_ifindex)
        .collect();
    ifindexes.dedup();
    assert!(
        ifindexes.len() == 1 && ifindexes[0] != 0,
        "{name}: port {PORT}'s GIDs should all be on one netdev: {table:?}"
    );
    ifindexes[0]
}

/// rxe: the netdev's addresses find their GIDs, others find none.
fn rxe_finds_the_netdevs_addresses(name: &str, ctx: &Context) {
    let table = ctx
        .query_gid_table()
        .unwrap_or_else(|e| panic!("{name}: query_gid_table: {e}"));
    let ifindex = roce_netdev(name, &table);
    let host = host_addrs();
    let own: Vec<IpAddr> = host
        .iter()
        .filter(|(i, _)| *i == ifindex)
        .map(|(_, a)| *a)
        .collect();
    loud(&format!(
        "{name}: netdev {ifindex} has {own:?}; the table: {table:?}"
    ));
    let v4: Vec<Ipv4Addr> = own
        .iter()
        .filter_map(|a| match a {
            IpAddr::V4(v4) => Some(*v4),
            IpAddr::V6(_) => None,
        })
        .collect();
    assert!(
        !v4.is_empty(),
        "{name}: its netdev (ifindex {ifindex}) has no IPv4 address (the VM gives it one)"
    );
    for a in &v4 {
        let addr = IpAddr::V4(*a);
        let v2 = ctx
            .find_gid(PORT, addr, GidType::RoceV2)
            .unwrap_or_else(|e| panic!("{name}: find_gid({a}): {e}"))
            .unwrap_or_else(|| panic!("{name}: no RoCE v2 GID for {a} in {table:?}"));
        assert_eq!(v2.gid, Gid::from_ip(addr), "{name}: {a}'s v2 GID");
        assert_eq!(
            v2.gid.raw(),
            a.to_ipv6_mapped().octets(),
            "{name}: {a}'s GID is ::ffff:{a}"
        );
        assert_eq!((v2.port_num, v2.gid_type), (PORT, GidType::RoceV2));
        assert_eq!(v2.netdev_ifindex, ifindex, "{name}: {a}'s GID's netdev");
        let entry = ctx
            .query_gid_entry(PORT, v2.gid_index)
            .unwrap_or_else(|e| panic!("{name}: query_gid_entry({}): {e}", v2.gid_index));
        assert_eq!(entry, v2, "{name}: the table's entry at {}", v2.gid_index);
        // The pure lookup over the same table agrees.
        assert_eq!(
            GidEntry::find(&table, PORT, addr, GidType::RoceV2),
            Some(&v2),
            "{name}: GidEntry::find({a})"
        );
        // rxe is RoCE v2 only: the same address as v1 or IB finds nothing.
        for ty in [GidType::RoceV1, GidType::Ib] {
            assert_eq!(
                ctx.find_gid(PORT, addr, ty).unwrap(),
                None,
                "{name}: {a} as a {ty:?} GID (rxe has RoCE v2 GIDs only)"
            );
        }
        // Written as an IPv4-mapped IPv6 address: the same entry.
        let mapped = IpAddr::V6(a.to_ipv6_mapped());
        assert_eq!(
            ctx.find_gid(PORT, mapped, GidType::RoceV2).unwrap(),
            Some(v2),
            "{name}: {mapped}"
        );
        loud(&format!("{name}: {a}: RoCE v2 GID index {}", v2.gid_index));
    }

    let link_local = own.iter().find_map(|a| match a {
        // fe80::/10 (`is_unicast_link_local` is newer than the MSRV).
        IpAddr::V6(v6) if v6.segments()[0] & 0xffc0 == 0xfe80 => Some(*v6),
        _ => None,
    });
    match link_local {
        Some(ll) => {
            let addr = IpAddr::V6(ll);
            let e = ctx
                .find_gid(PORT, addr, GidType::RoceV2)
                .unwrap()
                .unwrap_or_else(|| panic!("{name}: no RoCE v2 GID for {ll} in {table:?}"));
            assert_eq!(e.gid.raw(), ll.octets(), "{name}: {ll}'s GID");
            assert_eq!((e.gid_type, e.netdev_ifindex), (GidType::RoceV2, ifindex));
            assert_eq!(ctx.query_gid_entry(PORT, e.gid_index).unwrap(), e);
            assert_eq!(ctx.find_gid(PORT, addr, GidType::RoceV1).unwrap(), None);
            loud(&format!("{name}: {ll}: RoCE v2 GID index {}", e.gid_index));
        }
        // Without IPv6 on the netdev the default GID is still there (from
        // the MAC), but no address of the host is it.
        None => loud(&format!(
            "{name}: its netdev has no IPv6 link-local address: that part is not checked"
        )),
    }

    let elsewhere: Vec<IpAddr> = host
        .iter()
        .filter(|(i, _)| *i != ifindex)
        .map(|(_, a)| *a)
        .filter(|a| !own.contains(a))
        .collect();
    let absent = [
        "203.0.113.77".parse().unwrap(),
        "2001:db8::dead".parse().unwrap(),
        IpAddr::V4(Ipv4Addr::LOCALHOST),
        IpAddr::V6(Ipv6Addr::LOCALHOST),
        IpAddr::V4(Ipv4Addr::UNSPECIFIED),
        IpAddr::V6(Ipv6Addr::UNSPECIFIED),
    ];
    for addr in absent.iter().chain(&elsewhere) {
        for ty in [GidType::RoceV1, GidType::RoceV2, GidType::Ib] {
            assert_eq!(
                ctx.find_gid(PORT, *addr, ty).unwrap(),
                None,
                "{name}: {addr} ({ty:?}) is not on its netdev"
            );
        }
    }
    // Another port of a one-port device: nothing.
    let v4 = IpAddr::V4(v4[0]);
    assert_eq!(ctx.find_gid(PORT + 1, v4, GidType::RoceV2).unwrap(), None);
    assert_eq!(ctx.find_gid(0, v4, GidType::RoceV2).unwrap(), None);
}

/// siw: the MAC-based GID is found by no address.
fn siw_finds_nothing(name: &str, ctx: &Context) {
    let table = ctx
        .query_gid_table()
        .unwrap_or_else(|e| panic!("{name}: query_gid_table: {e}"));
    assert!(!table.is_empty(), "{name}: a GID");
    let macs: Vec<[u8; 6]> = std::fs::read_dir("/sys/class/net")
        .expect("/sys/class/net")
        .filter_map(|d| std::fs::read_to_string(d.ok()?.path().join("address")).ok())
        .filter_map(|text| {
            let bytes: Vec<u8> = text
                .trim()
                .split(':')
                .map(|b| u8::from_str_radix(b, 16))
                .collect::<Result<_, _>>()
                .ok()?;
            bytes.try_into().ok()
        })
        .collect();
    for e in &table {
        assert_eq!(e.gid_type, GidType::Ib, "{name}: iWARP GIDs are IB type");
        let raw = e.gid.raw();
        assert_eq!(raw[6..], [0; 10], "{name}: the MAC and zeros: {}", e.gid);
        assert!(
            macs.iter().any(|m| raw[..6] == m[..]),
            "{name}: {} is no netdev's MAC ({macs:02x?})",
            e.gid
        );
    }
    let host = host_addrs();
    assert!(!host.is_empty(), "{name}: the host has addresses");
    for (_, addr) in &host {
        for ty in [GidType::RoceV1, GidType::RoceV2, GidType::Ib] {
            assert_eq!(
                ctx.find_gid(PORT, *addr, ty).unwrap(),
                None,
                "{name}: iWARP GIDs are derived from no address ({addr}, {ty:?})"
            );
        }
    }
    loud(&format!(
        "{name}: GIDs {table:?}; none of the host's {} addresses finds one",
        host.len()
    ));
}

known_device_test!(
    find_gid_from_the_hosts_addresses,
    |name, ctx, _counts, driver| {
        match driver {
            Driver::Rxe => rxe_finds_the_netdevs_addresses(name, &ctx),
            Driver::Siw => siw_finds_nothing(name, &ctx),
            Driver::Other => unreachable!("known_device_test! skips other drivers"),
        }
    }
);
