//! Queries on real devices: ports, GIDs and the context against sysfs and
//! the write() command, and every MR's kernel view (`QUERY_MR`) after
//! registration, in-place re-registration and replacement.

#[macro_use]
mod common;

use std::path::PathBuf;

use common::{alloc_pd, anon, driver, loud, rereg_behaviour, Driver};
use uverbs::command::QueryPort;
use uverbs::device::{Gid, GidType, LinkLayer, PortState};
use uverbs::error::{Errno, Op};
use uverbs::mr::{ReregFallback, ReregFlags, ReregPath};
use uverbs::{AccessFlags, MemoryRegion};

const MIB_FOR_QUERY: usize = 1 << 20;

fn port_file(dev: &str, file: &str) -> PathBuf {
    PathBuf::from(format!("/sys/class/infiniband/{dev}/ports/1/{file}"))
}

fn read(path: &PathBuf) -> Result<String, std::io::Error> {
    std::fs::read_to_string(path).map(|s| s.trim().to_string())
}

fn must_read(path: &PathBuf) -> String {
    read(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

/// The number before the colon of sysfs `state` / `phys_state` (`4: ACTIVE`).
fn leading_number(text: &str) -> u8 {
    text.split(':')
        .next()
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no leading number in {text:?}"))
}

device_test!(
    query_port_matches_sysfs_and_the_write_command,
    |name, ctx, _counts| {
        let port = ctx
            .query_port(1)
            .unwrap_or_else(|e| panic!("{name}: query_port(1): {e}"));
        loud(&format!(
            "{name}: port 1 over {}: {port:?}",
            ctx.transport_kind()
        ));
        let state = must_read(&port_file(name, "state"));
        let phys = must_read(&port_file(name, "phys_state"));
        assert_eq!(
            port.state,
            PortState::from(leading_number(&state)),
            "{name}: state vs sysfs {state:?}"
        );
        assert_eq!(
            port.phys_state,
            leading_number(&phys),
            "{name}: phys_state vs {phys:?}"
        );
        let link = must_read(&port_file(name, "link_layer"));
        let expected_link = match link.as_str() {
            "Ethernet" => LinkLayer::Ethernet,
            "InfiniBand" => LinkLayer::InfiniBand,
            other => panic!("{name}: unexpected link_layer {other:?}"),
        };
        assert_eq!(port.link_layer, expected_link, "{name}: link layer");
        let lid = must_read(&port_file(name, "lid"));
        let lid = u16::from_str_radix(lid.trim_start_matches("0x"), 16).unwrap();
        assert_eq!(port.lid, lid, "{name}: lid");
        assert!(
            port.active_mtu_bytes().is_some(),
            "{name}: active MTU {port:?}"
        );
        if driver(&ctx) == Driver::Rxe {
            assert!(port.active_mtu <= port.max_mtu, "{name}: active <= max MTU");
        }
        // (siw derives max_mtu from the netdev's max_mtu, which is 0, "no
        // limit", on the VM's dummy0: it reports 256 (1) below an active
        // 1024 (3), as measured.)
        assert!(port.gid_tbl_len >= 1, "{name}: a GID table");
        if matches!(driver(&ctx), Driver::Rxe | Driver::Siw) {
            // The VM's dummy0 is up: both soft devices are ACTIVE on Ethernet.
            assert_eq!(port.state, PortState::Active, "{name}: state");
            assert_eq!(port.link_layer, LinkLayer::Ethernet, "{name}: link layer");
        }
        // The method answers the extended struct, the write command does not.
        let extended = ctx.transport_kind().sends_methods();
        assert_eq!(port.port_cap_flags2.is_some(), extended, "{name}: {port:?}");
        // Both paths give the same legacy struct.
        // SAFETY: QUERY_PORT hands no memory to the device.
        let raw = unsafe { ctx.execute(&QueryPort::new(1), &mut []) }
            .unwrap_or_else(|e| panic!("{name}: the QUERY_PORT write command: {e}"));
        assert_eq!(
            (
                PortState::from(raw.state),
                raw.max_mtu,
                raw.active_mtu,
                raw.gid_tbl_len,
                LinkLayer::from(raw.link_layer),
                raw.lid,
            ),
            (
                port.state,
                port.max_mtu,
                port.active_mtu,
                port.gid_tbl_len,
                port.link_layer,
                port.lid
            ),
            "{name}: the write command's answer"
        );
        assert_eq!(raw.port_cap_flags, port.port_cap_flags, "{name}: cap flags");
        // A port the device does not have.
        let e = ctx.query_port(2).unwrap_err();
        assert_eq!(e.op(), Op::QueryPort, "{name}: {e}");
        assert!(e.errno().is_some(), "{name}: {e}");
    }
);

device_test!(
    query_gid_of_index_0_equals_the_sysfs_file,
    |name, ctx, _counts| {
        let text = must_read(&port_file(name, "gids/0"));
        let sysfs: Gid = text.parse().unwrap_or_else(|e| panic!("{name}: {e}"));
        let entry = ctx
            .query_gid_entry(1, 0)
            .unwrap_or_else(|e| panic!("{name}: query_gid_entry(1, 0): {e}"));
        loud(&format!(
            "{name}: GID 0 over {}: {entry:?}",
            ctx.transport_kind()
        ));
        assert_eq!(entry.gid, sysfs, "{name}: GID 0 vs sysfs {text}");
        assert_eq!(ctx.query_gid(1, 0).unwrap(), sysfs, "{name}: query_gid");
        assert_eq!((entry.port_num, entry.gid_index), (1, 0), "{name}");
        let types = must_read(&port_file(name, "gid_attrs/types/0"));
        let expected_type = match (types.as_str(), driver(&ctx)) {
            ("RoCE v2", _) => GidType::RoceV2,
            (_, Driver::Siw) => GidType::Ib, // iWARP GIDs are IB type
            _ => GidType::RoceV1,
        };
        if driver(&ctx) != Driver::Other {
            assert_eq!(
                entry.gid_type, expected_type,
                "{name}: type vs sysfs {types:?}"
            );
        }
        // The netdev, when sysfs names one.
        let ifindex = read(&port_file(name, "gid_attrs/ndevs/0"))
            .ok()
            .map(|ndev| must_read(&PathBuf::from(format!("/sys/class/net/{ndev}/ifindex"))))
            .map_or(0, |i| i.parse::<u32>().unwrap());
        assert_eq!(entry.netdev_ifindex, ifindex, "{name}: netdev ifindex");

        let table = ctx
            .query_gid_table()
            .unwrap_or_else(|e| panic!("{name}: query_gid_table: {e}"));
        let gid_tbl_len = ctx.query_port(1).unwrap().gid_tbl_len as usize;
        assert!(
            !table.is_empty() && table.len() <= gid_tbl_len,
            "{name}: {} entries of {gid_tbl_len}",
            table.len()
        );
        assert!(table.iter().all(|e| !e.gid.is_zero()), "{name}: {table:?}");
        assert!(
            table.contains(&entry),
            "{name}: the table has entry 0: {table:?}"
        );
        // Past the table: an error either way (kernel or sysfs).
        assert!(
            ctx.query_gid(1, gid_tbl_len as u32 + 1000).is_err(),
            "{name}"
        );
    }
);

device_test!(
    query_context_agrees_with_get_context_or_is_refused,
    |name, ctx, _counts| {
        match (ctx.query_context(), driver(&ctx)) {
            // Linux 6.12: neither rxe nor siw implements query_ucontext.
            (Err(e), Driver::Rxe | Driver::Siw) => {
                assert_eq!(
                    (e.op(), e.errno()),
                    (Op::QueryContext, Some(Errno::OPNOTSUPP)),
                    "{name}: {e}"
                );
                loud(&format!("{name}: query_context refused as documented: {e}"));
            }
            (Ok(attr), _) => assert_eq!(
                attr.num_comp_vectors,
                ctx.num_comp_vectors(),
                "{name}: num_comp_vectors vs GET_CONTEXT"
            ),
            (Err(e), Driver::Other) => loud(&format!("{name}: query_context: {e}")),
        }
    }
);

/// The kernel's view of `mr` equals what the MR records.
fn assert_kernel_view(name: &str, when: &str, mr: &MemoryRegion) {
    let q = mr
        .query()
        .unwrap_or_else(|e| panic!("{name}: {when}: query_mr: {e}"));
    assert_eq!(
        (q.lkey, q.rkey, q.length, q.iova),
        (mr.lkey(), mr.rkey(), mr.length() as u64, mr.addr()),
        "{name}: {when}: QUERY_MR (lkey, rkey, length, iova) vs the MR"
    );
}

device_test!(
    query_mr_after_reg_and_after_every_rereg,
    |name, ctx, counts| {
        let d = rereg_behaviour(&ctx);
        ctx.forget_rereg_refusals();
        let (pd1, pd2) = (alloc_pd(&ctx), alloc_pd(&ctx));
        let mut buf = anon(MIB_FOR_QUERY);
        let mut other = anon(2 * MIB_FOR_QUERY);
        let rw = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ | AccessFlags::REMOTE_WRITE;
        // SAFETY: both mappings outlive the MR (dropped at the end of the loop body, after it).
        let mut mr = unsafe { pd1.reg_mr(buf.as_mut_ptr(), buf.len(), rw) }
            .unwrap_or_else(|e| panic!("{name}: reg_mr: {e}"));
        assert_kernel_view(name, "after reg", &mr);
        assert_eq!(
            mr.query().unwrap().iova,
            buf.as_ptr() as u64,
            "{name}: iova == addr"
        );

        let steps: [(&str, ReregFlags); 3] = [
            ("ACCESS", ReregFlags::ACCESS),
            ("PD", ReregFlags::PD),
            ("TRANSLATION", ReregFlags::TRANSLATION),
        ];
        for (what, flags) in steps {
            let translation = flags == ReregFlags::TRANSLATION;
            let (addr, len) = if translation {
                (other.as_mut_ptr(), other.len())
            } else {
                (std::ptr::null_mut(), 0)
            };
            let pd = (flags == ReregFlags::PD).then_some(&pd2);
            let access = if flags == ReregFlags::ACCESS {
                AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ
            } else {
                AccessFlags::empty()
            };
            // SAFETY: `other` stays mapped while registered.
            let path =
                unsafe { mr.rereg_with(ReregFallback::Replace, flags, pd, addr, len, access) }
                    .unwrap_or_else(|e| panic!("{name}: rereg {what}: {e}"));
            loud(&format!("{name}: rereg {what}: {path:?}"));
            match (d, translation) {
                // rxe changes PD and access in place; siw and rxe's
                // translation go through the replacement.
                (Driver::Rxe, false) => assert_eq!(path, ReregPath::InPlace, "{name}: {what}"),
                (Driver::Rxe, true) | (Driver::Siw, _) => {
                    assert_eq!(path, ReregPath::Replaced, "{name}: {what}")
                }
                (Driver::Other, _) => {}
            }
            assert_kernel_view(name, &format!("after rereg {what} ({path:?})"), &mr);
            if translation {
                assert_eq!(
                    mr.query().unwrap().iova,
                    other.as_ptr() as u64,
                    "{name}: new iova"
                );
                assert_eq!(
                    mr.query().unwrap().length,
                    other.len() as u64,
                    "{name}: new length"
                );
            }
        }
        counts.assert_extra(1, 2, "one MR, two PDs");
        drop(mr);
        drop((pd1, pd2));
    }
);
