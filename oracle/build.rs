//! Build script: link Debian's static libmlx5, libibverbs and libnl into
//! this package's tests and benches, with the system calls the emulation
//! answers wrapped (`-Wl,--wrap=NAME`: every reference to `NAME` in every
//! linked object, the archives included, goes to `__wrap_NAME`, which the
//! tests' shim defines; `__real_NAME` is the C library's).
//!
//! The archives come from where `cargo vm` unpacked `libibverbs-dev`,
//! `libnl-3-dev` and `libnl-route-3-dev` (`<cache>/oracle-peer/root`,
//! cache `target/vm` or `UVERBS_VM_CACHE`), or the directories of
//! `UVERBS_ORACLE_LIBDIRS`. Where they are not, nothing is linked and the
//! tests say SKIPPED (or fail, with `UVERBS_REQUIRE_ORACLE` set).

use std::path::{Path, PathBuf};

/// The system calls the tests answer for the emulated device.
const WRAPPED: &[&str] = &[
    "open", "openat", "opendir", "stat", "fstat", "fopen", "readlink", "ioctl", "write", "mmap",
    "munmap", "close", "socket",
];

/// Archives in link order: the provider references libibverbs, which
/// references libnl. `-l:NAME` takes the static archive in a dynamic build.
const ARCHIVES: &[&str] = &["libmlx5.a", "libibverbs.a", "libnl-route-3.a", "libnl-3.a"];

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=UVERBS_ORACLE_LIBDIRS");
    println!("cargo:rerun-if-env-changed=UVERBS_VM_CACHE");
    println!("cargo:rerun-if-env-changed=UVERBS_REQUIRE_ORACLE");
    println!("cargo:rustc-check-cfg=cfg(oracle_linked)");
    // Watched whether or not it exists yet: `cargo vm` unpacks it after
    // the first build of a fresh clone (a missing path reruns this script
    // on every build, which costs nothing here).
    println!("cargo:rerun-if-changed={}", peer_root().display());
    let dirs = libdirs();
    let found = |lib: &str| dirs.iter().any(|d| d.join(lib).is_file());
    let missing: Vec<&str> = ARCHIVES.iter().copied().filter(|a| !found(a)).collect();
    if !missing.is_empty() {
        println!(
            "cargo:rustc-env=UVERBS_ORACLE_MISSING=not found in {dirs:?}: {}",
            missing.join(", ")
        );
        return;
    }
    println!("cargo:rustc-cfg=oracle_linked");
    for dir in &dirs {
        link_arg(&format!("-L{}", dir.display()));
    }
    for lib in ARCHIVES {
        link_arg(&format!("-l:{lib}"));
    }
    link_arg("-lpthread");
    for name in WRAPPED {
        link_arg(&format!("-Wl,--wrap={name}"));
    }
}

/// One linker argument for the package's tests and its benches
/// (`benches/mlx5_ops.rs` links the same archives and wrappers); the
/// library itself links none.
fn link_arg(arg: &str) {
    println!("cargo:rustc-link-arg-tests={arg}");
    println!("cargo:rustc-link-arg-benches={arg}");
}

/// Where `cargo vm` unpacks the oracle's packages: `<cache>/oracle-peer/root`.
fn peer_root() -> PathBuf {
    let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("set by cargo"));
    std::env::var_os("UVERBS_VM_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| manifest.join("../target/vm"))
        .join("oracle-peer/root")
}

/// `UVERBS_ORACLE_LIBDIRS`, else the multiarch library directories of the
/// packages `cargo vm` unpacked into its cache.
fn libdirs() -> Vec<PathBuf> {
    if let Some(dirs) = std::env::var_os("UVERBS_ORACLE_LIBDIRS") {
        return std::env::split_paths(&dirs).collect();
    }
    let root = peer_root();
    ["usr/lib/x86_64-linux-gnu", "lib/x86_64-linux-gnu"]
        .iter()
        .map(|d| root.join(d))
        .filter(|d| Path::new(d).is_dir())
        .collect()
}
