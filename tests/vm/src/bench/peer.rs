//! The benchmarks' peers, unpacked under the cache, never installed:
//! libibverbs' static archives and libnl (linked into benches/verbs),
//! perftest with libibverbs' rxe and siw providers, and valgrind (run in
//! the guest). Debian's packages, resolved against the host (what it lacks
//! of their dependencies comes along), fetched with `apt-get download` and
//! unpacked with `dpkg -x` into `<cache>/bench-peer/root` ([`crate::apt`]);
//! a stamp lists the versions, so a later bench reuses them. No root is
//! needed and no package of the host changes.

use crate::apt::{self, Apt};
use crate::util::{say, Context, Error, Result};
use std::fs;
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

/// The record of a finished set-up, inside [`dir`].
const STAMP: &str = "stamp";

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
    let stamp = fs::read_to_string(dir(cache).join(STAMP)).ok()?;
    stamp.lines().find_map(|l| {
        let rest = l.strip_prefix("package ")?;
        let (name, version) = rest.split_once(' ')?;
        (name == package).then(|| version.to_string())
    })
}

impl Peer {
    /// The unpacked peers, set up first unless a stamp says they are.
    pub fn ensure(cache: &Path) -> Result<Peer> {
        let dir = dir(cache);
        let root = dir.join("root");
        let stamp = dir.join(STAMP);
        let recorded = fs::read_to_string(&stamp).unwrap_or_default();
        if PACKAGES.iter().all(|p| {
            recorded
                .lines()
                .any(|l| l.starts_with(&format!("package {p} ")))
        }) {
            say(format!(
                "bench: the peers are unpacked in {}",
                root.display()
            ));
            return Ok(Peer { root });
        }
        let step = "bench: unpacking the peers";
        if root.exists() {
            fs::remove_dir_all(&root).context(step)?;
        }
        fs::create_dir_all(&root).context(step)?;
        let apt = Apt::new(cache);
        apt.refresh(false)?;
        say(format!("bench: resolving {}", PACKAGES.join(" ")));
        let packages = apt.closure(PACKAGES)?;
        let debs = apt.download(&cache.join("debs"), &packages)?;
        say(format!(
            "bench: unpacking {} packages into {}",
            debs.len(),
            root.display()
        ));
        for deb in &debs {
            apt::unpack(deb, &root)?;
        }
        let mut text = String::new();
        for p in &packages {
            text.push_str(&format!("package {} {}\n", p.name, p.version));
        }
        fs::write(&stamp, text).context(step)?;
        Ok(Peer { root })
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
