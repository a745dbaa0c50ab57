//! Device discovery and QUERY_DEVICE against real devices: rxe0 and siw0 as
//! described in shared/reference/soft-rdma-vm.md (kernel 6.12).

#[macro_use]
mod common;

use common::{alloc_pd, devices_under_test, driver, loud, open, Driver, HandleCounts};
use uverbs::device::DriverId;
use uverbs::uverbs_uapi::{UVERBS_OBJECT_MR, UVERBS_OBJECT_PD};

#[test]
fn devices_have_known_driver_ids_and_abi_versions() {
    let devs = devices_under_test("devices_have_known_driver_ids_and_abi_versions");
    for dev in &devs {
        let name = dev.name();
        assert!(
            dev.path().starts_with(uverbs::device::DEV_INFINIBAND),
            "{name}: path {}",
            dev.path().display()
        );
        assert!(
            dev.uverbs_name().starts_with("uverbs"),
            "{name}: node {}",
            dev.uverbs_name()
        );
        let ctx = open(dev);
        let _counts = HandleCounts::new(&ctx, "discovery");
        assert_eq!(
            ctx.device_name(),
            name,
            "{name}: the context names its device"
        );
        let (major, minor) = dev.dev_number();
        loud(&format!(
            "{name}: {} {major}:{minor} driver id {:?} driver ABI {} transport {}",
            dev.path().display(),
            ctx.driver_id(),
            dev.driver_abi_version(),
            ctx.transport_kind()
        ));
        // uverbs character devices are major 231 (IB_UVERBS_MAJOR), minors from 192.
        assert_eq!(major, 231, "{name}: uverbs major");
        assert!(minor >= 192, "{name}: uverbs minor {minor}");
        if name.starts_with("rxe") {
            assert_eq!(
                ctx.driver_id(),
                Some(DriverId(14)),
                "{name}: RDMA_DRIVER_RXE"
            );
            assert_eq!(dev.driver_abi_version(), 2, "{name}: rxe driver ABI");
        } else if name.starts_with("siw") {
            assert_eq!(
                ctx.driver_id(),
                Some(DriverId(18)),
                "{name}: RDMA_DRIVER_SIW"
            );
            assert_eq!(dev.driver_abi_version(), 1, "{name}: siw driver ABI");
        } else {
            common::note_unknown_driver("devices_have_known_driver_ids_and_abi_versions", &ctx);
        }
    }
    if let Some(prefixes) = common::required_prefixes() {
        for prefix in prefixes {
            assert!(
                devs.iter().any(|d| d.name().starts_with(&prefix)),
                "required `{prefix}` device missing from {devs:?}"
            );
        }
    }
}

#[test]
fn lookup_by_name_finds_the_same_device() {
    for dev in devices_under_test("lookup_by_name_finds_the_same_device") {
        let found = uverbs::device::device(dev.name())
            .unwrap_or_else(|e| panic!("{}: device(): {e}", dev.name()));
        assert_eq!(
            found.as_ref(),
            Some(&dev),
            "{}: uverbs::device::device(name)",
            dev.name()
        );
    }
}

device_test!(
    query_device_reports_the_documented_limits,
    |name, ctx, _| {
        let _counts = HandleCounts::new(&ctx, "query_device");
        let attr = ctx
            .query_device()
            .unwrap_or_else(|e| panic!("{name}: query_device: {e}"));
        loud(&format!(
            "{name}: max_mr_size {:#x} page_size_cap {:#x} max_mr {} max_pd {} rd_atom {}/{} fw {} vendor {:#x}:{:#x} ports {}",
            attr.max_mr_size,
            attr.page_size_cap,
            attr.max_mr,
            attr.max_pd,
            attr.max_qp_rd_atom,
            attr.max_qp_init_rd_atom,
            attr.fw_ver_string(),
            attr.vendor_id,
            attr.vendor_part_id,
            attr.phys_port_cnt
        ));
        assert!(attr.max_mr > 0, "{name}: max_mr");
        assert!(attr.max_pd > 0, "{name}: max_pd");
        assert!(attr.phys_port_cnt >= 1, "{name}: phys_port_cnt");
        // Both soft devices take READs and atomics, so they allow some
        // outstanding (the reference gives no numbers: printed above).
        assert!(attr.max_qp_rd_atom > 0, "{name}: max_qp_rd_atom");
        assert!(attr.max_qp_init_rd_atom > 0, "{name}: max_qp_init_rd_atom");
        match driver(&ctx) {
            Driver::Rxe => {
                assert_eq!(attr.max_mr_size, u64::MAX, "{name}: rxe max_mr_size");
                assert_eq!(attr.page_size_cap, 0xffff_f000, "{name}: rxe page_size_cap");
                assert_eq!(attr.max_mr, 524_287, "{name}: rxe max_mr");
            }
            Driver::Siw => {
                // The reference gives no number for siw's max_mr_size: printed above.
                assert_ne!(attr.max_mr_size, 0, "{name}: siw max_mr_size");
                assert_eq!(attr.page_size_cap, 0x1000, "{name}: siw page_size_cap");
            }
            Driver::Other => {
                assert_ne!(attr.max_mr_size, 0, "{name}: max_mr_size");
                assert_ne!(attr.page_size_cap, 0, "{name}: page_size_cap");
            }
        }
    }
);

device_test!(
    a_device_opens_twice_into_independent_contexts,
    |_, ctx, _| {
        let (a, b) = (ctx.reopen(), ctx.reopen());
        let (ca, cb) = (
            HandleCounts::new(&a, "two contexts (a)"),
            HandleCounts::new(&b, "two contexts (b)"),
        );
        let pd = alloc_pd(&a);
        ca.assert_extra(0, 1, "PD allocated in context a");
        cb.assert_extra(0, 0, "PD allocated in context a, counted in b");
        drop(pd);
    }
);

device_test!(
    kernel_handle_count_follows_the_objects_of_the_context,
    |name, ctx, _| {
        // A fresh context holds no objects; every count below is exact.
        let count = |object: u16, what: &str| {
            ctx.kernel_handle_count(object)
                .unwrap_or_else(|e| panic!("{name}: kernel_handle_count({what}): {e}"))
        };
        assert_eq!(
            (count(UVERBS_OBJECT_MR, "MR"), count(UVERBS_OBJECT_PD, "PD")),
            (0, 0),
            "{name}: fresh context"
        );
        let pd = alloc_pd(&ctx);
        let mut buf = common::anon(1 << 16);
        // More MRs than the first handle-list guess (64), to exercise its growth.
        let mrs: Vec<_> = (0..150)
            .map(|i| {
                // SAFETY: `buf` outlives every MR.
                unsafe {
                    pd.reg_mr(
                        buf.as_mut_ptr(),
                        buf.len(),
                        uverbs::AccessFlags::LOCAL_WRITE,
                    )
                }
                .unwrap_or_else(|e| panic!("{name}: reg_mr #{i}: {e}"))
            })
            .collect();
        assert_eq!(count(UVERBS_OBJECT_MR, "MR"), 150, "{name}: 150 MRs");
        assert_eq!(count(UVERBS_OBJECT_PD, "PD"), 1, "{name}: one PD");
        drop(mrs);
        assert_eq!(count(UVERBS_OBJECT_MR, "MR"), 0, "{name}: all MRs dropped");
        drop(pd);
        assert_eq!(count(UVERBS_OBJECT_PD, "PD"), 0, "{name}: PD dropped");
    }
);
