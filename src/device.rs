//! Devices: finding them ([`devices`], [`Device`]), opening them
//! ([`Context`]), and what an opened device answers and owns: its
//! attributes ([`DeviceAttr`]), ports ([`PortAttr`]), GIDs ([`Gid`]),
//! asynchronous events ([`AsyncEvents`]) and protection domains
//! ([`ProtectionDomain`]).
//!
//! This file finds devices in sysfs; the rest of the module's items are
//! defined beside what uses them and gathered here.

use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::error::{Error, Op};
use uverbs_uapi as sys;

pub use crate::async_event::{AsyncElement, AsyncEvent, AsyncEventKind, AsyncEvents};
pub use crate::command::TransportType;
pub use crate::context::{Context, ContextAttr, OpenOptions};
pub use crate::device_attr::{
    CqModerationCaps, DeviceAttr, DeviceAttrEx, OdpCaps, RssCaps, TmCaps,
};
pub use crate::event_fd::EventSource;
pub use crate::gid::{Gid, GidEntry, GidParseError, GidType};
pub use crate::pd::{DeallocError, ProtectionDomain};
pub use crate::port::{LinkLayer, PortAttr, PortState};
pub use crate::provider::driver::DriverId;

/// Where the kernel lists uverbs devices.
pub const SYSFS_UVERBS: &str = "/sys/class/infiniband_verbs";

/// Where their character devices live.
pub const DEV_INFINIBAND: &str = "/dev/infiniband";

/// A uverbs device as sysfs announces it, not yet opened.
#[doc(alias = "ibv_device")]
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Device {
    name: Arc<str>,
    uverbs: String,
    path: PathBuf,
    driver_abi: u32,
    dev: (u32, u32),
    /// The driver id RDMA netlink reported at discovery, if it did.
    netlink_driver_id: Option<DriverId>,
}

impl Device {
    /// The device named `name` (`rxe0`, `mlx5_0`), or
    /// [`Error::NoDevice`] naming those there are, with what to check.
    ///
    /// ```no_run
    /// let ctx = uverbs::Device::by_name("rxe0")?.open()?;
    /// # Ok::<(), uverbs::Error>(())
    /// ```
    pub fn by_name(name: &str) -> Result<Device, Error> {
        let mut all = devices()?;
        match all.iter().position(|d| &*d.name == name) {
            Some(at) => Ok(all.swap_remove(at)),
            None => Err(Error::NoDevice {
                wanted: Some(name.to_owned()),
                found: all.iter().map(|d| d.name.to_string()).collect(),
            }),
        }
    }

    /// The first device [`devices`] lists, or [`Error::NoDevice`] (whose
    /// message says how to add a soft device) when there is none.
    pub fn first() -> Result<Device, Error> {
        devices()?.into_iter().next().ok_or(Error::NoDevice {
            wanted: None,
            found: Vec::new(),
        })
    }

    /// The RDMA device name (`rxe0`, `siw0`, `mlx5_0`), sysfs `ibdev`.
    #[doc(alias = "ibv_get_device_name")]
    pub fn name(&self) -> &str {
        &self.name
    }

    pub(crate) fn name_arc(&self) -> &Arc<str> {
        &self.name
    }

    /// The uverbs node name (`uverbs0`).
    pub fn uverbs_name(&self) -> &str {
        &self.uverbs
    }

    /// The character device path (`/dev/infiniband/uverbs0`).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The driver's ABI version (sysfs `abi_version` of the node).
    pub fn driver_abi_version(&self) -> u32 {
        self.driver_abi
    }

    /// The kernel driver's id, needed by the ioctl transport: the one RDMA
    /// netlink reported when the device was listed, else the one
    /// rdma-core's provider for a device of this name uses.
    pub fn driver_id(&self) -> Option<DriverId> {
        self.netlink_driver_id
            .or_else(|| DriverId::from_device_name(&self.name))
    }

    /// The character device's `(major, minor)` as sysfs announces it.
    pub fn dev_number(&self) -> (u32, u32) {
        self.dev
    }
}

/// What listing the uverbs devices found: the usable devices, and the
/// entries that look like uverbs nodes but were skipped.
///
/// One broken entry (a node half-removed while the listing ran, an
/// unreadable or malformed file) does not hide the other devices: it lands
/// in [`skipped`](Self::skipped) with the reason, and the listing goes on.
#[derive(Debug, Default)]
pub struct DeviceListing {
    /// The usable devices, ordered by uverbs index.
    pub devices: Vec<Device>,
    /// The entries named `uverbs…` that were skipped, ordered by name.
    pub skipped: Vec<SkippedDevice>,
}

/// A sysfs entry named like a uverbs node that could not be used.
#[derive(Debug)]
pub struct SkippedDevice {
    /// The entry's name in the class directory (`uverbs3`, `uverbs01`).
    pub entry: String,
    /// Why it was skipped: an [`Error::Sysfs`] naming the file (or the entry
    /// itself, for a malformed name) and what was wrong with it.
    pub error: Error,
}

/// Lists the usable uverbs devices of this machine, ordered by uverbs index.
///
/// An empty list means no RDMA device (or no `ib_uverbs` module). The global
/// uverbs ABI must be 6. Entries that cannot be read or parsed are skipped;
/// [`device_listing`] reports them.
///
/// ```no_run
/// for dev in uverbs::devices()? {
///     println!("{} at {}", dev.name(), dev.path().display());
/// }
/// # Ok::<(), uverbs::Error>(())
/// ```
#[doc(alias = "ibv_get_device_list")]
pub fn devices() -> Result<Vec<Device>, Error> {
    device_listing().map(|listing| listing.devices)
}

/// Lists the uverbs devices of this machine like [`devices`], and also
/// reports the entries it skipped.
///
/// Fails only when the listing as a whole cannot be made: the class
/// directory or its global `abi_version` cannot be read, or that ABI is not 6.
///
/// ```no_run
/// let listing = uverbs::device::device_listing()?;
/// for skipped in &listing.skipped {
///     eprintln!("skipping {}: {}", skipped.entry, skipped.error);
/// }
/// # Ok::<(), uverbs::Error>(())
/// ```
pub fn device_listing() -> Result<DeviceListing, Error> {
    let mut listing = device_listing_in(Path::new(SYSFS_UVERBS), Path::new(DEV_INFINIBAND))?;
    // Like rdma-core, ask RDMA netlink for driver ids once, here, rather
    // than on every open. A kernel without it leaves the name table.
    for device in &mut listing.devices {
        match crate::netlink::uverbs_chardev(&device.name) {
            Ok(info) => device.netlink_driver_id = info.and_then(|i| i.driver_id).map(DriverId),
            Err(_) => break,
        }
    }
    Ok(listing)
}

/// The device with this name, if present.
pub fn device(name: &str) -> Result<Option<Device>, Error> {
    match Device::by_name(name) {
        Ok(device) => Ok(Some(device)),
        Err(Error::NoDevice { .. }) => Ok(None),
        Err(e) => Err(e),
    }
}

/// [`devices`] over another sysfs class directory and device directory
/// (for tests and containers).
pub fn devices_in(sysfs: &Path, dev_dir: &Path) -> Result<Vec<Device>, Error> {
    device_listing_in(sysfs, dev_dir).map(|listing| listing.devices)
}

/// [`device_listing`] over another sysfs class directory and device
/// directory (for tests and containers). Asks netlink nothing.
///
/// An entry whose name starts with `uverbs` must be `uverbsN`, `N` in
/// decimal without sign or leading zeros (`uverbs0`, `uverbs12`), and hold
/// `ibdev` (a name), `abi_version` (a decimal) and `dev` (`MAJOR:MINOR` in
/// decimal), each with at most one trailing newline; otherwise it is
/// skipped. Other entries (`abi_version` itself) are not devices and are
/// ignored.
pub fn device_listing_in(sysfs: &Path, dev_dir: &Path) -> Result<DeviceListing, Error> {
    let abi_path = sysfs.join("abi_version");
    if !abi_path.exists() {
        return Ok(DeviceListing::default());
    }
    let abi = read_u32(&abi_path)?;
    if abi != sys::IB_USER_VERBS_ABI_VERSION {
        return Err(Error::Abi {
            op: Op::ListDevices,
            device: Arc::from("uverbs"),
            what: "uverbs",
            found: abi,
            supported: "6",
        });
    }
    let entries = fs::read_dir(sysfs).map_err(|source| sysfs_error(sysfs, source))?;
    let mut found = Vec::new();
    let mut skipped = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|source| sysfs_error(sysfs, source))?;
        let file_name = entry.file_name();
        if !file_name.as_bytes().starts_with(b"uverbs") {
            continue;
        }
        let name = file_name.to_string_lossy().into_owned();
        match read_node(&entry.path(), &name, dev_dir) {
            Ok(node) => found.push(node),
            Err(error) => skipped.push(SkippedDevice { entry: name, error }),
        }
    }
    found.sort_by_key(|(index, _)| *index);
    skipped.sort_by(|a, b| a.entry.cmp(&b.entry));
    Ok(DeviceListing {
        devices: found.into_iter().map(|(_, d)| d).collect(),
        skipped,
    })
}

/// One `uverbsN` entry of the class directory and its uverbs index.
fn read_node(dir: &Path, uverbs: &str, dev_dir: &Path) -> Result<(u32, Device), Error> {
    let index = uverbs
        .strip_prefix("uverbs")
        .and_then(parse_decimal)
        .ok_or_else(|| invalid(dir, format!("not a uverbs node name (uverbsN): {uverbs:?}")))?;
    let ibdev_path = dir.join("ibdev");
    let name = read_line(&ibdev_path)?;
    if name.is_empty() || name.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(invalid(&ibdev_path, format!("not a device name: {name:?}")));
    }
    let driver_abi = read_u32(&dir.join("abi_version"))?;
    let dev = read_dev(&dir.join("dev"))?;
    Ok((
        index,
        Device {
            name: Arc::from(name.as_str()),
            path: dev_dir.join(uverbs),
            uverbs: uverbs.to_owned(),
            driver_abi,
            dev,
            netlink_driver_id: None,
        },
    ))
}

fn sysfs_error(path: &Path, source: std::io::Error) -> Error {
    Error::Sysfs {
        op: Op::ListDevices,
        path: path.to_owned(),
        error: source,
    }
}

fn invalid(path: &Path, what: String) -> Error {
    sysfs_error(
        path,
        std::io::Error::new(std::io::ErrorKind::InvalidData, what),
    )
}

/// A sysfs attribute's text without its trailing newline (sysfs prints one;
/// at most one is accepted).
fn read_line(path: &Path) -> Result<String, Error> {
    let mut text = fs::read_to_string(path).map_err(|source| sysfs_error(path, source))?;
    if text.ends_with('\n') {
        text.pop();
    }
    Ok(text)
}

/// A decimal `u32` as the kernel prints one (`%u`): ASCII digits only, no
/// sign, no leading zeros except in `0` itself, no overflow.
pub(crate) fn parse_decimal(text: &str) -> Option<u32> {
    let digits_only = !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit());
    if !digits_only || (text.len() > 1 && text.starts_with('0')) {
        return None;
    }
    text.parse().ok()
}

/// `MAJOR:MINOR`, both as [`parse_decimal`] reads them.
pub(crate) fn parse_dev(text: &str) -> Option<(u32, u32)> {
    let (major, minor) = text.split_once(':')?;
    Some((parse_decimal(major)?, parse_decimal(minor)?))
}

fn read_u32(path: &Path) -> Result<u32, Error> {
    let text = read_line(path)?;
    parse_decimal(&text).ok_or_else(|| invalid(path, format!("not a number: {text:?}")))
}

fn read_dev(path: &Path) -> Result<(u32, u32), Error> {
    let text = read_line(path)?;
    parse_dev(&text).ok_or_else(|| invalid(path, format!("not major:minor: {text:?}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fake_sysfs(entries: &[(&str, &str, &str, &str)], abi: &str) -> PathBuf {
        let root = std::env::temp_dir().join(format!(
            "uverbs-sysfs-{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos()
        ));
        fs::create_dir_all(&root).unwrap();
        fs::write(root.join("abi_version"), abi).unwrap();
        for (node, ibdev, driver_abi, dev) in entries {
            let dir = root.join(node);
            fs::create_dir_all(&dir).unwrap();
            fs::write(dir.join("ibdev"), format!("{ibdev}\n")).unwrap();
            fs::write(dir.join("abi_version"), format!("{driver_abi}\n")).unwrap();
            fs::write(dir.join("dev"), format!("{dev}\n")).unwrap();
        }
        root
    }

    #[test]
    fn lists_devices_in_uverbs_order() {
        let root = fake_sysfs(
            &[
                ("uverbs10", "mlx5_0", "1", "231:202"),
                ("uverbs1", "siw0", "1", "231:193"),
                ("uverbs0", "rxe0", "2", "231:192"),
            ],
            "6\n",
        );
        fs::create_dir_all(root.join("not-a-device")).unwrap();
        let devs = devices_in(&root, Path::new("/dev/infiniband")).unwrap();
        let names: Vec<_> = devs.iter().map(|d| d.name()).collect();
        assert_eq!(names, ["rxe0", "siw0", "mlx5_0"]);
        assert_eq!(devs[0].path(), Path::new("/dev/infiniband/uverbs0"));
        assert_eq!(devs[0].driver_abi_version(), 2);
        assert_eq!(devs[1].dev_number(), (231, 193));
        fs::remove_dir_all(root).unwrap();
    }

    #[test]
    fn no_sysfs_class_means_no_devices() {
        let devs = devices_in(
            Path::new("/nonexistent/uverbs"),
            Path::new("/dev/infiniband"),
        )
        .unwrap();
        assert!(devs.is_empty());
    }

    #[test]
    fn wrong_global_abi_is_refused() {
        let root = fake_sysfs(&[], "5\n");
        let err = devices_in(&root, Path::new("/dev")).unwrap_err();
        assert!(matches!(err, Error::Abi { found: 5, .. }), "{err}");
        fs::remove_dir_all(root).unwrap();
    }

    #[test]
    fn malformed_dev_is_skipped_with_a_sysfs_error_not_a_panic() {
        let root = fake_sysfs(&[("uverbs0", "rxe0", "2", "garbage")], "6");
        let listing = device_listing_in(&root, Path::new("/dev")).unwrap();
        assert!(listing.devices.is_empty());
        let [skipped] = &listing.skipped[..] else {
            panic!("one entry skipped: {listing:?}");
        };
        assert_eq!(skipped.entry, "uverbs0");
        let err = &skipped.error;
        assert!(matches!(err, Error::Sysfs { .. }), "{err}");
        assert!(err.to_string().contains("garbage"), "{err}");
        fs::remove_dir_all(root).unwrap();
    }

    #[test]
    fn decimals_are_parsed_as_the_kernel_prints_them() {
        for (text, value) in [("0", 0), ("7", 7), ("10", 10), ("4294967295", u32::MAX)] {
            assert_eq!(parse_decimal(text), Some(value), "{text:?}");
        }
        for text in [
            "",
            "+1",
            "-1",
            "01",
            "00",
            " 1",
            "1 ",
            "1\n",
            "0x1",
            "1_0",
            "٣",
            "4294967296",
        ] {
            assert_eq!(parse_decimal(text), None, "{text:?}");
        }
    }

    #[test]
    fn dev_numbers_are_major_colon_minor_in_decimal() {
        assert_eq!(parse_dev("231:193"), Some((231, 193)));
        assert_eq!(parse_dev("0:0"), Some((0, 0)));
        for text in [
            "+231:+193",
            "231:+193",
            "-1:2",
            "231:",
            ":193",
            "231",
            "231:193:1",
            "231 :193",
            " 231:193",
            "231:193 ",
            "0231:193",
            "231;193",
            "4294967296:1",
        ] {
            assert_eq!(parse_dev(text), None, "{text:?}");
        }
    }
}
