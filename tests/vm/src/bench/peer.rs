//! The benchmarks' peers, unpacked under the cache, never installed:
//! libibverbs' static archives and libnl (linked into benches/verbs),
//! perftest with libibverbs' rxe and siw providers, and valgrind (run in
//! the guest). Debian's packages, resolved against the host (what it lacks
//! of their dependencies comes along), fetched with `apt-get download` and
//! unpacked with `dpkg -x` into `<cache>/bench-peer/root` ([`crate::apt`]);
//! a stamp lists the versions, so a later bench reuses them. No root is
//! needed and no package of the host changes.

use crate::apt::{self, Apt};
use crate::util::{say, Error, Result};
use std::path::{Path, PathBuf};

/// The packages unpacked (with what the host lacks for them).
pub const PACKAGES: &[&str] = &[
    "libibverbs-dev",
    "libnl-3-dev",
    "libnl-route-3-dev",
    "perftest",
    "ibverbs-providers",
    "valgrind",
];

fn dir(cache: &Path) -> PathBuf {
    cache.join("bench-peer")
}

/// The unpacked peers: paths below [`Peer::root`] are the packages' own.
pub struct Peer {
    pub root: PathBuf,
}

/// The version of `package` a set-up of the peers under `cache` unpacked
/// (from its stamp), if any.
pub fn unpacked_version(cache: &Path, package: &str) -> Option<String> {
    let u = apt::read_unpacked(&dir(cache), &[]).ok()?;
    u.packages
        .into_iter()
        .find(|p| p.name == package)
        .map(|p| p.version)
}

impl Peer {
    /// The unpacked peers, set up first unless their stamp lists them.
    pub fn ensure(cache: &Path) -> Result<Peer> {
        if let Ok(u) = apt::read_unpacked(&dir(cache), PACKAGES) {
            say(format!(
                "bench: the peers are unpacked in {}",
                u.root.display()
            ));
            return Ok(Peer { root: u.root });
        }
        let apt = Apt::new(cache);
        apt.refresh(false)?;
        let u = apt.unpack_fresh(cache, &dir(cache), PACKAGES)?;
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
                "bench: {path} is not in the unpacked {package} ({})",
                f.display()
            )))
        }
    }
}
