//! Finding uverbs devices in sysfs.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::context::{Context, OpenOptions};
use crate::driver::DriverId;
use crate::error::{Error, Op};
use uverbs_uapi as sys;

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

    /// Opens the device with default options (transport from
    /// `UVERBS_TRANSPORT`, else probed; the process-wide fork safety).
    #[doc(alias = "ibv_open_device")]
    pub fn open(&self) -> Result<Context, Error> {
        Context::open(self, &OpenOptions::new())
    }

    /// Opens the device with the given options.
    pub fn open_with(&self, options: &OpenOptions) -> Result<Context, Error> {
        Context::open(self, options)
    }
}

/// Lists the uverbs devices of this machine, ordered by uverbs index.
///
/// An empty list means no RDMA device (or no `ib_uverbs` module). The global
/// uverbs ABI must be 6.
///
/// ```no_run
/// for dev in uverbs::devices()? {
///     println!("{} at {}", dev.name(), dev.path().display());
/// }
/// # Ok::<(), uverbs::Error>(())
/// ```
#[doc(alias = "ibv_get_device_list")]
pub fn devices() -> Result<Vec<Device>, Error> {
    let mut devices = devices_in(Path::new(SYSFS_UVERBS), Path::new(DEV_INFINIBAND))?;
    // Like rdma-core, ask RDMA netlink for driver ids once, here, rather
    // than on every open. A kernel without it leaves the name table.
    for device in &mut devices {
        match crate::netlink::uverbs_chardev(&device.name) {
            Ok(info) => device.netlink_driver_id = info.and_then(|i| i.driver_id).map(DriverId),
            Err(_) => break,
        }
    }
    Ok(devices)
}

/// The device with this name, if present.
pub fn device(name: &str) -> Result<Option<Device>, Error> {
    Ok(devices()?.into_iter().find(|d| d.name() == name))
}

/// [`devices`] over another sysfs class directory and device directory
/// (for tests and containers).
pub fn devices_in(sysfs: &Path, dev_dir: &Path) -> Result<Vec<Device>, Error> {
    let abi_path = sysfs.join("abi_version");
    if !abi_path.exists() {
        return Ok(Vec::new());
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
    for entry in entries {
        let entry = entry.map_err(|source| sysfs_error(sysfs, source))?;
        let uverbs = entry.file_name().to_string_lossy().into_owned();
        let Some(index) = uverbs
            .strip_prefix("uverbs")
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let dir = entry.path();
        let name = read_text(&dir.join("ibdev"))?;
        let driver_abi = read_u32(&dir.join("abi_version"))?;
        let dev = parse_dev(&dir.join("dev"))?;
        found.push((
            index,
            Device {
                name: Arc::from(name.as_str()),
                path: dev_dir.join(&uverbs),
                uverbs,
                driver_abi,
                dev,
                netlink_driver_id: None,
            },
        ));
    }
    found.sort_by_key(|(index, _)| *index);
    Ok(found.into_iter().map(|(_, d)| d).collect())
}

fn sysfs_error(path: &Path, source: std::io::Error) -> Error {
    Error::Sysfs {
        op: Op::ListDevices,
        path: path.to_owned(),
        source,
    }
}

fn read_text(path: &Path) -> Result<String, Error> {
    fs::read_to_string(path)
        .map(|s| s.trim().to_owned())
        .map_err(|source| sysfs_error(path, source))
}

fn read_u32(path: &Path) -> Result<u32, Error> {
    let text = read_text(path)?;
    text.parse().map_err(|_| {
        sysfs_error(
            path,
            std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("not a number: {text:?}"),
            ),
        )
    })
}

fn parse_dev(path: &Path) -> Result<(u32, u32), Error> {
    let text = read_text(path)?;
    let parsed = text
        .split_once(':')
        .and_then(|(a, b)| Some((a.parse().ok()?, b.parse().ok()?)));
    parsed.ok_or_else(|| {
        sysfs_error(
            path,
            std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("not major:minor: {text:?}"),
            ),
        )
    })
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
    fn malformed_dev_is_a_sysfs_error_not_a_panic() {
        let root = fake_sysfs(&[("uverbs0", "rxe0", "2", "garbage")], "6");
        let err = devices_in(&root, Path::new("/dev")).unwrap_err();
        assert!(matches!(err, Error::Sysfs { .. }), "{err}");
        assert!(err.to_string().contains("garbage"), "{err}");
        fs::remove_dir_all(root).unwrap();
    }
}
