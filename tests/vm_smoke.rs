//! Smoke test for the soft-RDMA VM harness (`cargo vm test`), using only std.
//!
//! Inside the VM (where `UVERBS_REQUIRE_DEVICES=rxe,siw` is set) it proves
//! that the kernel's uverbs ABI is 6, that a device of every required driver
//! exists and that every `/dev/infiniband/uverbsN` opens read-write. On a
//! host without RDMA devices and without that variable it reports SKIPPED
//! and passes.

use std::fs::{self, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

const SYSFS: &str = "/sys/class/infiniband_verbs";

/// A uverbs character device and the RDMA device behind it.
#[derive(Debug)]
struct Uverbs {
    /// `uverbsN`
    name: String,
    /// The ibdev name, e.g. `rxe0`.
    ibdev: String,
}

impl Uverbs {
    fn dev_path(&self) -> PathBuf {
        Path::new("/dev/infiniband").join(&self.name)
    }
}

/// The uverbs devices listed in sysfs, sorted by name.
fn uverbs_devices() -> Vec<Uverbs> {
    let Ok(dir) = fs::read_dir(SYSFS) else {
        return Vec::new();
    };
    let mut devs: Vec<Uverbs> = dir
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            if !name.starts_with("uverbs") {
                return None;
            }
            let ibdev = fs::read_to_string(e.path().join("ibdev")).ok()?;
            Some(Uverbs {
                name,
                ibdev: ibdev.trim().to_string(),
            })
        })
        .collect();
    devs.sort_by(|a, b| a.name.cmp(&b.name));
    devs
}

/// Prints to stderr past libtest's output capture (which only catches the
/// print macros), so the message shows even when the test passes.
fn loud(msg: &str) {
    let _ = writeln!(std::io::stderr(), "{msg}");
}

/// The driver names required by `UVERBS_REQUIRE_DEVICES`, if set.
fn required() -> Option<Vec<String>> {
    let v = std::env::var("UVERBS_REQUIRE_DEVICES").ok()?;
    Some(
        v.split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(String::from)
            .collect(),
    )
}

#[test]
fn soft_rdma_devices_are_usable() {
    let required = required();
    let devs = uverbs_devices();
    if required.is_none() && devs.is_empty() {
        loud("SKIPPED: no RDMA devices (set UVERBS_REQUIRE_DEVICES to make this fail)");
        return;
    }

    let abi = fs::read_to_string(Path::new(SYSFS).join("abi_version"))
        .unwrap_or_else(|e| panic!("{SYSFS}/abi_version: {e}"));
    assert_eq!(abi.trim(), "6", "uverbs ABI version");

    loud(&format!(
        "vm_smoke: transport={} devices: {}",
        std::env::var("UVERBS_TRANSPORT").unwrap_or_else(|_| "(unset)".into()),
        devs.iter()
            .map(|d| format!("{}={}", d.name, d.ibdev))
            .collect::<Vec<_>>()
            .join(" ")
    ));

    let Some(required) = required else {
        return;
    };
    for driver in &required {
        assert!(
            devs.iter().any(|d| d.ibdev.starts_with(driver.as_str())),
            "UVERBS_REQUIRE_DEVICES names `{driver}` but no ibdev starts with it (have {devs:?})"
        );
    }
    assert!(
        !devs.is_empty(),
        "UVERBS_REQUIRE_DEVICES is set but there is no uverbs device"
    );
    for d in &devs {
        let path = d.dev_path();
        OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .unwrap_or_else(|e| panic!("opening {} ({}) O_RDWR: {e}", path.display(), d.ibdev));
    }
}
