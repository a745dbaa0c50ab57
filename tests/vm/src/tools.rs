//! The programs the VM runs on — qemu and the guest's busybox — as
//! Debian's packages unpacked under the cache (`<cache>/tools/root`), never
//! the host's: a run does not depend on what the host has installed, and
//! nothing is installed to get them (see [`crate::apt`]).
//!
//! qemu is Debian 12's (7.2) with every library the host lacks unpacked
//! beside it; it runs with `LD_LIBRARY_PATH` on those and `-L` on its
//! unpacked firmware (SeaBIOS, the option ROMs). Libraries the host already
//! has come from the host, as for any program.

use crate::apt::{self, Apt};
use crate::util::{err, run_captured, say, Error, Result};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The packages unpacked, with their dependencies the host lacks.
pub const PACKAGES: &[&str] = &["qemu-system-x86", "busybox-static"];

/// Inside the unpacked root.
const QEMU: &str = "usr/bin/qemu-system-x86_64";
const BUSYBOX: &str = "bin/busybox";
/// Where the packages put shared libraries (libnl still ships under /lib).
const LIBRARIES: &[&str] = &["usr/lib/x86_64-linux-gnu", "lib/x86_64-linux-gnu"];

/// The library directories of packages unpacked at `root`, as
/// `LD_LIBRARY_PATH` (or a linker's search path) takes them.
pub fn library_path(root: &Path) -> std::ffi::OsString {
    std::env::join_paths(LIBRARIES.iter().map(|l| root.join(l))).expect("cache paths hold no ':'")
}
/// qemu's firmware: its own data and the BIOS it links to.
const FIRMWARE: &[&str] = &["usr/share/qemu", "usr/share/seabios", "usr/lib/ipxe/qemu"];

/// The unpacked tools.
#[derive(Debug, Clone)]
pub struct Tools {
    root: PathBuf,
}

/// Where the tools live in the cache.
fn dir(cache: &Path) -> PathBuf {
    cache.join("tools")
}

impl Tools {
    /// qemu-system-x86_64 with its libraries and firmware found.
    pub fn qemu(&self) -> Command {
        let mut c = Command::new(self.root.join(QEMU));
        c.env("LD_LIBRARY_PATH", library_path(&self.root));
        for f in FIRMWARE {
            let d = self.root.join(f);
            if d.is_dir() {
                c.arg("-L").arg(d);
            }
        }
        c
    }

    /// Tools unpacked at `root` (for tests of what uses them).
    #[cfg(test)]
    pub fn unpacked_at(root: &str) -> Tools {
        Tools { root: root.into() }
    }

    /// The static busybox the guest runs.
    pub fn busybox(&self) -> PathBuf {
        self.root.join(BUSYBOX)
    }

    /// The cached tools, checked: their stamp lists them and qemu starts
    /// (the host libraries it uses are still there).
    pub fn read(cache: &Path) -> Result<Tools> {
        let u = apt::read_unpacked(&dir(cache), PACKAGES)
            .map_err(|e| Error(format!("no tools set up: {e}")))?;
        let tools = Tools { root: u.root };
        tools.check()?;
        Ok(tools)
    }

    /// The first line of the unpacked qemu's `--version`.
    pub fn qemu_version(&self) -> Result<String> {
        self.check()
    }

    /// Fails unless busybox is there and qemu answers `--version` (its
    /// first line).
    fn check(&self) -> Result<String> {
        let busybox = self.busybox();
        if !busybox.is_file() {
            return Err(Error(format!("{} is missing", busybox.display())));
        }
        let version = run_captured(
            "tools: starting the unpacked qemu",
            self.qemu().arg("--version"),
        )?;
        Ok(version.lines().next().unwrap_or_default().to_string())
    }

    /// Unpacks [`PACKAGES`] and what the host lacks for them into a fresh
    /// `<cache>/tools/root` ([`Apt::unpack_fresh`]), then checks them.
    pub fn set_up(apt: &Apt, cache: &Path) -> Result<Tools> {
        let u = apt.unpack_fresh(cache, &dir(cache), PACKAGES)?;
        let tools = Tools { root: u.root };
        let version = tools.check().map_err(|e| err("setup: tools", e))?;
        say(format!("setup: {version}"));
        Ok(tools)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    #[test]
    fn qemu_runs_on_its_own_libraries_and_firmware() {
        let root = std::env::temp_dir().join(format!("uverbs-vm-tools-{}", std::process::id()));
        fs::create_dir_all(root.join("usr/share/seabios")).unwrap();
        let tools = Tools { root: root.clone() };
        let qemu = tools.qemu();
        assert_eq!(qemu.get_program(), root.join(QEMU).as_os_str());
        let libs = qemu
            .get_envs()
            .find(|(k, _)| *k == "LD_LIBRARY_PATH")
            .and_then(|(_, v)| v)
            .unwrap()
            .to_string_lossy()
            .into_owned();
        assert_eq!(
            libs,
            format!(
                "{}:{}",
                root.join("usr/lib/x86_64-linux-gnu").display(),
                root.join("lib/x86_64-linux-gnu").display()
            )
        );
        // -L only for the firmware directories that were unpacked.
        let args: Vec<String> = qemu
            .get_args()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            args,
            [
                "-L".to_string(),
                root.join("usr/share/seabios").display().to_string()
            ]
        );
        assert_eq!(tools.busybox(), root.join("bin/busybox"));
        // No stamp: not set up, and the error says where it looked.
        let e = Tools::read(&root).unwrap_err();
        assert!(e.0.contains("no tools set up"), "{e}");
        fs::remove_dir_all(&root).unwrap();
    }
}
