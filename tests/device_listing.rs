//! Device listing over fake sysfs trees: one broken `uverbsN` entry is
//! skipped and reported instead of failing the whole listing, and node
//! names and `dev` numbers are parsed as strictly as the kernel prints them.

use std::fs;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

use uverbs::device::{device_listing_in, devices_in, DeviceListing};
use uverbs::Error;

/// A temporary sysfs class directory, removed when dropped.
struct FakeSysfs {
    root: PathBuf,
}

impl FakeSysfs {
    fn new() -> Self {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let root = std::env::temp_dir().join(format!(
            "uverbs-listing-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = fs::remove_dir_all(&root);
        fs::create_dir_all(&root).unwrap();
        fs::write(root.join("abi_version"), "6\n").unwrap();
        FakeSysfs { root }
    }

    /// A complete node, its files as the kernel prints them.
    fn node(&self, entry: &str, ibdev: &str, dev: &str) -> &Self {
        self.files(
            entry,
            &[
                ("ibdev", &format!("{ibdev}\n")),
                ("abi_version", "1\n"),
                ("dev", dev),
            ],
        )
    }

    /// A node directory with exactly these files.
    fn files(&self, entry: &str, files: &[(&str, &str)]) -> &Self {
        let dir = self.root.join(entry);
        fs::create_dir_all(&dir).unwrap();
        for (name, text) in files {
            fs::write(dir.join(name), text).unwrap();
        }
        self
    }

    fn listing(&self) -> DeviceListing {
        device_listing_in(&self.root, Path::new("/dev/infiniband")).expect("listing")
    }
}

impl Drop for FakeSysfs {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.root);
    }
}

fn names(listing: &DeviceListing) -> Vec<(&str, &str)> {
    listing
        .devices
        .iter()
        .map(|d| (d.uverbs_name(), d.name()))
        .collect()
}

fn skipped(listing: &DeviceListing) -> Vec<&str> {
    listing.skipped.iter().map(|s| s.entry.as_str()).collect()
}

/// The skipped entry's error: a sysfs error about `file` of kind `kind`.
fn assert_skipped_because(listing: &DeviceListing, entry: &str, file: &str, kind: ErrorKind) {
    let skipped = listing
        .skipped
        .iter()
        .find(|s| s.entry == entry)
        .unwrap_or_else(|| panic!("{entry} not skipped: {listing:?}"));
    match &skipped.error {
        Error::Sysfs {
            path,
            error: source,
            ..
        } => {
            assert!(path.ends_with(file), "{entry}: {}", skipped.error);
            assert_eq!(source.kind(), kind, "{entry}: {}", skipped.error);
        }
        other => panic!("{entry}: not a sysfs error: {other}"),
    }
}

#[test]
fn a_half_removed_node_is_skipped_and_the_others_listed() {
    let sysfs = FakeSysfs::new();
    sysfs.node("uverbs0", "rxe0", "231:192\n");
    sysfs.node("uverbs2", "mlx5_0", "231:194\n");
    // Being removed: the directory is there, its files (partly) gone.
    sysfs.files("uverbs1", &[("ibdev", "siw0\n")]);
    sysfs.files("uverbs3", &[]);
    let listing = sysfs.listing();
    assert_eq!(
        names(&listing),
        [("uverbs0", "rxe0"), ("uverbs2", "mlx5_0")]
    );
    assert_eq!(skipped(&listing), ["uverbs1", "uverbs3"]);
    assert_skipped_because(
        &listing,
        "uverbs1",
        "uverbs1/abi_version",
        ErrorKind::NotFound,
    );
    assert_skipped_because(&listing, "uverbs3", "uverbs3/ibdev", ErrorKind::NotFound);
    // The plain listing gives the good devices, where it used to fail.
    let devices = devices_in(&sysfs.root, Path::new("/dev/infiniband")).unwrap();
    assert_eq!(devices, listing.devices);
}

#[test]
fn a_node_that_is_a_file_is_skipped() {
    let sysfs = FakeSysfs::new();
    sysfs.node("uverbs0", "rxe0", "231:192\n");
    fs::write(sysfs.root.join("uverbs1"), "").unwrap();
    let listing = sysfs.listing();
    assert_eq!(names(&listing), [("uverbs0", "rxe0")]);
    assert_eq!(skipped(&listing), ["uverbs1"]);
}

#[test]
fn node_names_must_be_uverbs_and_a_plain_decimal() {
    let sysfs = FakeSysfs::new();
    for good in ["uverbs0", "uverbs7", "uverbs10"] {
        sysfs.node(good, &format!("dev_{good}"), "231:192\n");
    }
    let bad = [
        "uverbs",
        "uverbs+1",
        "uverbs-1",
        "uverbs01",
        "uverbs00",
        "uverbs1a",
        "uverbs 1",
        "uverbs0x1",
        "uverbs4294967296",
    ];
    for entry in bad {
        sysfs.node(entry, &format!("dev_{entry}"), "231:192\n");
    }
    // Not named like a node: not a device, not reported.
    fs::create_dir_all(sysfs.root.join("not-a-device")).unwrap();
    sysfs.node("Uverbs1", "upper", "231:192\n");
    let listing = sysfs.listing();
    assert_eq!(
        names(&listing),
        [
            ("uverbs0", "dev_uverbs0"),
            ("uverbs7", "dev_uverbs7"),
            ("uverbs10", "dev_uverbs10")
        ]
    );
    let mut expected = bad.to_vec();
    expected.sort_unstable();
    assert_eq!(skipped(&listing), expected);
    for entry in bad {
        assert_skipped_because(&listing, entry, entry, ErrorKind::InvalidData);
        let message = listing.skipped.iter().find(|s| s.entry == entry).unwrap();
        assert!(
            message.error.to_string().contains("uverbsN"),
            "{}",
            message.error
        );
    }
}

#[test]
fn dev_must_be_major_colon_minor_in_plain_decimal() {
    let sysfs = FakeSysfs::new();
    let good = [
        ("231:192\n", (231, 192)),
        ("231:193", (231, 193)),
        ("0:0\n", (0, 0)),
    ];
    for (i, (dev, _)) in good.iter().enumerate() {
        sysfs.node(&format!("uverbs{i}"), &format!("good{i}"), dev);
    }
    let bad = [
        "+231:+193\n",
        "231:+193\n",
        "-1:193\n",
        "0231:193\n",
        "231:\n",
        ":193\n",
        "231\n",
        "231:193:0\n",
        "231 :193\n",
        " 231:193\n",
        "231:193 \n",
        "231:193\n\n",
        "0xe7:193\n",
        "4294967296:0\n",
        "\n",
        "",
    ];
    for (i, dev) in bad.iter().enumerate() {
        sysfs.node(&format!("uverbs{}", 100 + i), &format!("bad{i}"), dev);
    }
    let listing = sysfs.listing();
    let found: Vec<_> = listing
        .devices
        .iter()
        .map(|d| (d.name(), d.dev_number()))
        .collect();
    assert_eq!(
        found,
        [
            ("good0", good[0].1),
            ("good1", good[1].1),
            ("good2", good[2].1)
        ]
    );
    assert_eq!(listing.skipped.len(), bad.len(), "{listing:?}");
    for (i, dev) in bad.iter().enumerate() {
        let entry = format!("uverbs{}", 100 + i);
        assert_skipped_because(&listing, &entry, "dev", ErrorKind::InvalidData);
        let error = &listing
            .skipped
            .iter()
            .find(|s| s.entry == entry)
            .unwrap()
            .error;
        assert!(
            error.to_string().contains("not major:minor"),
            "{dev:?}: {error}"
        );
    }
}

#[test]
fn abi_version_and_ibdev_are_checked_too() {
    let sysfs = FakeSysfs::new();
    sysfs.node("uverbs0", "rxe0", "231:192\n");
    sysfs.files(
        "uverbs1",
        &[
            ("ibdev", "siw0\n"),
            ("abi_version", "+1\n"),
            ("dev", "231:193\n"),
        ],
    );
    sysfs.files(
        "uverbs2",
        &[
            ("ibdev", "\n"),
            ("abi_version", "1\n"),
            ("dev", "231:194\n"),
        ],
    );
    sysfs.files(
        "uverbs3",
        &[
            ("ibdev", "a b\n"),
            ("abi_version", "1\n"),
            ("dev", "231:195\n"),
        ],
    );
    let listing = sysfs.listing();
    assert_eq!(names(&listing), [("uverbs0", "rxe0")]);
    assert_skipped_because(&listing, "uverbs1", "abi_version", ErrorKind::InvalidData);
    assert_skipped_because(&listing, "uverbs2", "ibdev", ErrorKind::InvalidData);
    assert_skipped_because(&listing, "uverbs3", "ibdev", ErrorKind::InvalidData);
}

#[test]
fn a_broken_listing_as_a_whole_is_still_an_error() {
    let sysfs = FakeSysfs::new();
    sysfs.node("uverbs0", "rxe0", "231:192\n");
    fs::write(sysfs.root.join("abi_version"), "+6\n").unwrap();
    let err = device_listing_in(&sysfs.root, Path::new("/dev")).unwrap_err();
    assert!(matches!(err, Error::Sysfs { .. }), "{err}");
    fs::write(sysfs.root.join("abi_version"), "7\n").unwrap();
    let err = device_listing_in(&sysfs.root, Path::new("/dev")).unwrap_err();
    assert!(matches!(err, Error::Abi { found: 7, .. }), "{err}");
}
