//! A cm id's device (librdmacm's `id->verbs`) on real devices: an id bound
//! to rxe0's address reports rxe0, one bound to siw0's reports siw0 (the
//! kernel's device index decides, not the node GUID, which rxe and siw on
//! one netdev share); the device opens, and `is_on` answers true for the
//! id's own device and false for every other. Before bind an id has no
//! device.

mod common;

use std::net::SocketAddr;

use common::cm::{cm_addr, on_each_cm_device};
use common::*;
use uverbs::cm::{EventChannel, PortSpace};

#[test]
fn a_bound_id_reports_its_own_device() {
    let test = "a_bound_id_reports_its_own_device";
    let all = uverbs::devices().expect("listing devices");
    on_each_cm_device(test, |name, ctx, _counts| {
        let ch = EventChannel::open().unwrap_or_else(|e| panic!("open rdma_cm: {e}"));
        let id = ch.create_id(PortSpace::Tcp).unwrap();
        assert!(
            id.device().unwrap().is_none(),
            "{name}: no device before bind"
        );
        assert!(!id.is_on(ctx).unwrap(), "{name}: not on it before bind");
        let addr: SocketAddr = format!("{}:0", cm_addr(ctx)).parse().unwrap();
        id.bind(addr)
            .unwrap_or_else(|e| panic!("{name}: bind {addr}: {e}"));
        let info = id.query_addr().unwrap();
        let device = id
            .device()
            .unwrap_or_else(|e| panic!("{name}: device of the id bound to {addr}: {e}"))
            .unwrap_or_else(|| panic!("{name}: the id bound to {addr} has no device"));
        loud(&format!(
            "{name}: id bound to {addr}: device {} (index {}, node GUID {:x?})",
            device.name(),
            info.ibdev_index,
            info.node_guid
        ));
        assert_eq!(device.name(), name, "{name}: the id's device");
        let opened = device
            .open()
            .unwrap_or_else(|e| panic!("{name}: opening the id's device: {e}"));
        assert_eq!(opened.device_name(), name);
        assert!(id.is_on(ctx).unwrap(), "{name}: is_on its own device");
        for other in all.iter().filter(|d| d.name() != name) {
            let other_ctx = other
                .open()
                .unwrap_or_else(|e| panic!("opening {}: {e}", other.name()));
            assert!(
                !id.is_on(&other_ctx).unwrap(),
                "{name}: an id on {name} is not on {}",
                other.name()
            );
        }
    });
}
