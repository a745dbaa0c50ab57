//! The emulated device as libibverbs discovers it without netlink: a fake
//! `/sys/class/infiniband_verbs` and `/sys/class/infiniband` tree, and the
//! `/dev/infiniband/uverbs0` file, under a root of the test's own. Every
//! file here is one libibverbs 44 or libmlx5 reads (measured, docs/mlx5.md).

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

/// The device's name.
pub const IBDEV: &str = "mlx5_0";
/// Its uverbs device number (`dev`), the character device's major:minor.
pub const DEV: (u32, u32) = (231, 192);
/// The PCI id libmlx5 matches: Mellanox (0x15b3), ConnectX-5 (0x1017).
pub const MODALIAS: &str = "pci:v000015B3d00001017sv000015B3sd00000008bc02sc00i00";
/// The node GUID, as sysfs prints it.
pub const NODE_GUID: &str = "b8ce:f603:00a1:b2c4";

/// Paths libibverbs and libmlx5 open that live under the fake root.
pub const REDIRECTED: &[&str] = &["/sys/class/infiniband", "/dev/infiniband"];

/// `path` under `root` when it is one of [`REDIRECTED`]'s.
pub fn redirect(root: &Path, path: &str) -> Option<PathBuf> {
    REDIRECTED
        .iter()
        .any(|p| path.starts_with(p))
        .then(|| root.join(path.trim_start_matches('/')))
}

/// Writes the tree of one mlx5 device, port 1 an active RoCE port, under
/// `root` (made if missing).
pub fn create(root: &Path) -> io::Result<()> {
    let verbs = root.join("sys/class/infiniband_verbs");
    let ibdev = root.join("sys/class/infiniband").join(IBDEV);
    let files: &[(PathBuf, String)] = &[
        // IB_USER_VERBS_ABI_VERSION: the core's.
        (verbs.join("abi_version"), "6".into()),
        (verbs.join("uverbs0/ibdev"), IBDEV.into()),
        // MLX5_IB_UVERBS_ABI_VERSION: the driver's.
        (verbs.join("uverbs0/abi_version"), "1".into()),
        (verbs.join("uverbs0/dev"), format!("{}:{}", DEV.0, DEV.1)),
        (verbs.join("uverbs0/device/modalias"), MODALIAS.into()),
        (ibdev.join("node_type"), "1: CA".into()),
        (ibdev.join("node_guid"), NODE_GUID.into()),
        (ibdev.join("sys_image_guid"), NODE_GUID.into()),
        (ibdev.join("fw_ver"), "16.35.2000".into()),
        (ibdev.join("hca_type"), "MT4119".into()),
        (ibdev.join("device/vendor"), "0x15b3".into()),
        (ibdev.join("device/device"), "0x1017".into()),
        (ibdev.join("device/modalias"), MODALIAS.into()),
        (ibdev.join("ports/1/state"), "4: ACTIVE".into()),
        (ibdev.join("ports/1/link_layer"), "Ethernet".into()),
        (root.join("dev/infiniband/uverbs0"), String::new()),
    ];
    for (path, text) in files {
        fs::create_dir_all(path.parent().expect("a file has a parent"))?;
        let text = if text.is_empty() {
            String::new()
        } else {
            format!("{text}\n")
        };
        fs::write(path, text)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tree_holds_what_libibverbs_reads_and_only_its_paths_are_redirected() {
        let root = std::env::temp_dir().join(format!("uverbs-oracle-sysfs-{}", std::process::id()));
        create(&root).unwrap();
        let read = |p: &str| fs::read_to_string(redirect(&root, p).unwrap()).unwrap();
        assert_eq!(
            read("/sys/class/infiniband_verbs/uverbs0/ibdev"),
            "mlx5_0\n"
        );
        assert_eq!(read("/sys/class/infiniband_verbs/uverbs0/dev"), "231:192\n");
        assert_eq!(read("/sys/class/infiniband/mlx5_0/node_type"), "1: CA\n");
        assert!(redirect(&root, "/dev/infiniband/uverbs0")
            .unwrap()
            .is_file());
        assert_eq!(redirect(&root, "/proc/cpuinfo"), None);
        assert_eq!(redirect(&root, "/sys/devices/system/cpu"), None);
        fs::remove_dir_all(&root).unwrap();
    }
}
