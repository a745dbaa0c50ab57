//! rdma-core's C programs and libraries the guest runs or the benches link
//! against, unpacked under the cache, never installed: a [`PeerSet`] each.
//! [`BENCH`]: libibverbs' static archives and libnl (linked into
//! benches/verbs), perftest with libibverbs' rxe and siw providers, and
//! valgrind (`cargo vm bench`). [`C_PEERS`]: librdmacm's `rdma_server` /
//! `rdma_client`, libibverbs' `ibv_rc_pingpong` and perftest's
//! `ib_write_lat`, `ib_send_lat`, `ib_read_lat`, `ib_write_bw` and
//! `ib_send_bw` (every test of `tools/perf.rs`) with their libraries
//! and the providers, the C peers of `tools/c_peers.rs` in `cargo vm
//! test`. Debian's packages, resolved against the host (what it lacks of
//! their dependencies comes along), fetched with `apt-get download` and
//! unpacked with `dpkg -x` into `<cache>/<dir>/root` ([`crate::apt`]); a
//! stamp lists the versions, so a later run reuses them. No root is needed
//! and no package of the host changes.

use crate::apt::{self, Apt};
use crate::initramfs::HostFile;
use crate::util::{say, Error, Result};
use std::path::{Path, PathBuf};

/// Packages unpacked together into a directory of the cache.
pub struct PeerSet {
    /// Names it in messages (`bench`, `c-peers`).
    pub what: &'static str,
    /// Its directory under the cache.
    pub dir: &'static str,
    /// The packages unpacked (with what the host lacks for them).
    pub packages: &'static [&'static str],
}

/// `cargo vm bench`'s peers.
pub const BENCH: PeerSet = PeerSet {
    what: "bench",
    dir: "bench-peer",
    packages: &[
        "libibverbs-dev",
        "libnl-3-dev",
        "libnl-route-3-dev",
        "perftest",
        "ibverbs-providers",
        "valgrind",
    ],
};

/// The mlx5 oracle's archives (`oracle/build.rs` links libmlx5,
/// libibverbs and libnl from here into the oracle's tests, which the host
/// suite of `cargo vm test` runs), and rdma-core's public headers, against
/// which `tests/doc_aliases.rs` checks its list of functions (librdmacm-dev
/// for `rdma/rdma_cma.h` and `rdma/rdma_verbs.h`; libibverbs-dev has
/// `infiniband/verbs.h`).
pub const ORACLE: PeerSet = PeerSet {
    what: "oracle",
    dir: "oracle-peer",
    packages: &[
        "libibverbs-dev",
        "libnl-3-dev",
        "libnl-route-3-dev",
        "librdmacm-dev",
    ],
};

/// The C peers of `cargo vm test` (`tools/c_peers.rs`): the tools and,
/// named so they come along whatever the host has, their libraries.
pub const C_PEERS: PeerSet = PeerSet {
    what: "c-peers",
    dir: "c-peer",
    packages: &[
        "rdmacm-utils",
        "ibverbs-utils",
        "perftest",
        "librdmacm1",
        "libibverbs1",
        "ibverbs-providers",
        "libnl-3-200",
        "libnl-route-3-200",
    ],
};

/// The C programs of [`C_PEERS`] the guest runs, with their packages.
const C_PEER_PROGRAMS: &[(&str, &str)] = &[
    ("/usr/bin/rdma_server", "rdmacm-utils"),
    ("/usr/bin/rdma_client", "rdmacm-utils"),
    ("/usr/bin/ibv_rc_pingpong", "ibverbs-utils"),
    ("/usr/bin/ib_write_lat", "perftest"),
    ("/usr/bin/ib_send_lat", "perftest"),
    ("/usr/bin/ib_read_lat", "perftest"),
    ("/usr/bin/ib_write_bw", "perftest"),
    ("/usr/bin/ib_send_bw", "perftest"),
];

/// libibverbs loads a provider named by a `.driver` file of this directory
/// from [`PROVIDER_DIR`]`/lib<name>-rdmav34.so`.
const DRIVER_DIR: &str = "/etc/libibverbs.d";
const PROVIDER_DIR: &str = "/usr/lib/x86_64-linux-gnu/libibverbs";
/// The providers of the guest's devices.
const PROVIDERS: &[&str] = &["rxe", "siw"];

/// The unpacked packages: paths below [`Peer::root`] are the packages' own.
pub struct Peer {
    pub root: PathBuf,
}

/// The version of `package` a set-up of `set` under `cache` unpacked
/// (from its stamp), if any.
pub fn unpacked_version(cache: &Path, set: &PeerSet, package: &str) -> Option<String> {
    let u = apt::read_unpacked(&cache.join(set.dir), &[]).ok()?;
    u.packages
        .into_iter()
        .find(|p| p.name == package)
        .map(|p| p.version)
}

impl Peer {
    /// `set`'s packages unpacked, set up first unless their stamp lists
    /// them.
    pub fn ensure(cache: &Path, set: &PeerSet) -> Result<Peer> {
        let dir = cache.join(set.dir);
        if let Ok(u) = apt::read_unpacked(&dir, set.packages) {
            say(format!(
                "{}: the peers are unpacked in {}",
                set.what,
                u.root.display()
            ));
            return Ok(Peer { root: u.root });
        }
        let apt = Apt::new(cache);
        apt.refresh(false)?;
        let u = apt.unpack_fresh(cache, &dir, set.packages)?;
        Ok(Peer { root: u.root })
    }

    /// A file of the packages, by its installed path (e.g. `/usr/bin/x`):
    /// an error naming the package when it is not there.
    pub fn file(&self, path: &str, package: &str) -> Result<PathBuf> {
        let f = self.root.join(path.trim_start_matches('/'));
        if f.exists() {
            Ok(f)
        } else {
            Err(Error(format!(
                "{path} is not in the unpacked {package} ({})",
                f.display()
            )))
        }
    }

    /// The file at `path` of `package` for the guest, at the same path,
    /// with the libraries `ldd` names for it when `with_libraries`.
    pub fn host_file(&self, path: &str, package: &str, with_libraries: bool) -> Result<HostFile> {
        self.file(path, package)?;
        Ok(HostFile {
            path: path.into(),
            root: Some(self.root.clone()),
            with_libraries,
        })
    }

    /// libibverbs' rxe and siw providers (with their libraries) and their
    /// `.driver` files, which a dynamic libibverbs program needs to find
    /// the guest's devices.
    pub fn provider_files(&self) -> Result<Vec<HostFile>> {
        let mut files = Vec::new();
        for p in PROVIDERS {
            let so = format!("{PROVIDER_DIR}/lib{p}-rdmav34.so");
            files.push(self.host_file(&so, "ibverbs-providers", true)?);
            let driver = format!("{DRIVER_DIR}/{p}.driver");
            files.push(self.host_file(&driver, "ibverbs-providers", false)?);
        }
        Ok(files)
    }

    /// What the guest needs of [`C_PEERS`] (unpacked here): the C programs
    /// at their installed paths (on the guest's `PATH`) with their
    /// libraries (librdmacm, libibverbs, libnl), and the providers.
    pub fn c_peer_files(&self) -> Result<Vec<HostFile>> {
        let mut files = C_PEER_PROGRAMS
            .iter()
            .map(|(path, package)| self.host_file(path, package, true))
            .collect::<Result<Vec<_>>>()?;
        files.extend(self.provider_files()?);
        Ok(files)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_c_peers_bring_their_libraries_and_the_providers() {
        for p in [
            "rdmacm-utils",
            "ibverbs-utils",
            "librdmacm1",
            "ibverbs-providers",
        ] {
            assert!(C_PEERS.packages.contains(&p), "{p}");
        }
        assert_ne!(C_PEERS.dir, BENCH.dir);
    }
}
