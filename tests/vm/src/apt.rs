//! Installing host packages with apt-get: only ever installs.
//!
//! The packages on the host belong to its user. Every install runs with
//! `--no-remove`, so apt aborts instead of removing anything (installing
//! qemu-system-x86 once made apt remove a preinstalled qemu-utils). When
//! apt cannot go on without removing, [`install`] stops with an error naming
//! the packages apt wanted to remove and the command the user can review and
//! run themselves.

use crate::util::{describe, run_captured, run_streaming, say, Error, Result};
use std::fs;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};

/// How long apt waits for another apt or dpkg (for instance a second
/// `cargo vm` run using another cache) to release dpkg's lock.
const DPKG_LOCK_TIMEOUT_SECS: u32 = 300;

/// The arguments of the `apt-get` that installs `packages`: never removes
/// (`--no-remove`), never asks, no recommended extras, waits for dpkg's lock.
pub fn install_args(packages: &[&str]) -> Vec<String> {
    let mut args: Vec<String> = [
        "install",
        "-y",
        "-q",
        "--no-remove",
        "--no-install-recommends",
        "-o",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    args.push(format!("DPkg::Lock::Timeout={DPKG_LOCK_TIMEOUT_SECS}"));
    args.extend(packages.iter().map(|p| p.to_string()));
    args
}

/// The arguments of a simulated install (`-s`: changes nothing, needs no
/// root) without `--no-remove`, whose `Remv` lines name what a real install
/// would have to remove.
pub fn removal_probe_args(packages: &[&str]) -> Vec<String> {
    let mut args: Vec<String> = ["install", "-s", "-q", "--no-install-recommends"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    args.extend(packages.iter().map(|p| p.to_string()));
    args
}

/// The packages a simulated install would remove (its `Remv <pkg> [...]`
/// lines).
pub fn parse_removals(simulation: &str) -> Vec<String> {
    simulation
        .lines()
        .filter_map(|l| l.strip_prefix("Remv "))
        .filter_map(|rest| rest.split_whitespace().next())
        .map(str::to_string)
        .collect()
}

/// The error for an install that apt could only do by removing `removals`:
/// names both lists and the command the user may run themselves.
pub fn removal_refusal(step: &str, packages: &[&str], removals: &[String], root: bool) -> Error {
    let sudo = if root { "" } else { "sudo " };
    Error(format!(
        "{step}: apt-get can install {} only by removing installed packages: {}.\n\
         uverbs-vm never removes your packages, so it stopped here. Either run the \
         install yourself after checking what it removes:\n    \
         {sudo}apt-get install --no-install-recommends {}\n\
         or make versions that fit your installed packages available (apt sources, pinning), \
         then run `cargo vm setup` again.",
        packages.join(" "),
        removals.join(" "),
        packages.join(" "),
    ))
}

static APT_UPDATED: AtomicBool = AtomicBool::new(false);

/// Whether we run as root (apt-get needs it; otherwise we try sudo).
pub fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}

/// A command run as root: directly when we are root, else through sudo.
fn as_root(program: &str) -> Command {
    if is_root() {
        Command::new(program)
    } else {
        let mut c = Command::new("sudo");
        c.arg(program);
        c
    }
}

/// `apt-get update`, at most once per run.
pub fn update() -> Result<()> {
    if APT_UPDATED.swap(true, Ordering::SeqCst) {
        return Ok(());
    }
    say("apt-get update");
    run_streaming(
        "refreshing the package lists",
        as_root("apt-get")
            .args(["update", "-q"])
            .env("DEBIAN_FRONTEND", "noninteractive"),
    )
}

/// Whether apt has any package lists at all (a fresh container has none).
/// They may be stored compressed (`..._Packages.lz4`).
fn lists_present() -> bool {
    fs::read_dir("/var/lib/apt/lists")
        .map(|d| {
            d.flatten()
                .any(|e| e.file_name().to_string_lossy().contains("_Packages"))
        })
        .unwrap_or(false)
}

/// Whether a Debian package is installed.
pub fn installed(pkg: &str) -> bool {
    Command::new("dpkg-query")
        .args(["-W", "-f=${db:Status-Abbrev}", pkg])
        .output()
        .map(|o| o.status.success() && o.stdout.starts_with(b"ii"))
        .unwrap_or(false)
}

/// What a real install of `packages` would remove, by a simulation. Empty
/// when nothing (or when the simulation itself fails: the caller then
/// reports the install's own error).
fn removals_needed(packages: &[&str]) -> Vec<String> {
    let mut probe = Command::new("apt-get");
    probe
        .args(removal_probe_args(packages))
        .env("DEBIAN_FRONTEND", "noninteractive");
    run_captured("simulating the install", &mut probe)
        .map(|out| parse_removals(&out))
        .unwrap_or_default()
}

/// Installs `packages` (none removed, ever). Refreshes the package lists
/// when there are none, or once if the first attempt fails for another
/// reason than needed removals.
pub fn install(step: &str, packages: &[&str]) -> Result<()> {
    if packages.is_empty() {
        return Ok(());
    }
    if !lists_present() {
        update()?;
    }
    let attempt = || {
        let mut cmd = as_root("apt-get");
        cmd.args(install_args(packages))
            .env("DEBIAN_FRONTEND", "noninteractive");
        say(describe(&cmd));
        run_streaming(step, &mut cmd)
    };
    let Err(first) = attempt() else {
        return Ok(());
    };
    if let Some(refusal) = refusal_if_removals_needed(step, packages) {
        return Err(refusal);
    }
    say(format!(
        "{step}: install failed ({first}); refreshing package lists and retrying"
    ));
    update()?;
    attempt().map_err(|e| refusal_if_removals_needed(step, packages).unwrap_or(e))
}

/// The [`removal_refusal`] for `packages` if installing them needs removals.
fn refusal_if_removals_needed(step: &str, packages: &[&str]) -> Option<Error> {
    let removals = removals_needed(packages);
    (!removals.is_empty()).then(|| removal_refusal(step, packages, &removals, is_root()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::util::have_program;

    #[test]
    fn every_install_refuses_removals() {
        for pkgs in [&["qemu-system-x86"][..], &["busybox-static", "kmod"], &[]] {
            let args = install_args(pkgs);
            assert_eq!(args[0], "install");
            assert!(args.iter().any(|a| a == "--no-remove"), "{args:?}");
            assert!(args.ends_with(&pkgs.iter().map(|p| p.to_string()).collect::<Vec<_>>()));
        }
        // The probe only simulates.
        assert!(removal_probe_args(&["x"]).iter().any(|a| a == "-s"));
    }

    #[test]
    fn removals_from_a_simulation() {
        let sim = "Reading package lists...\n\
                   The following packages will be REMOVED:\n  qemu-utils\n\
                   Remv qemu-utils [1:7.2+dfsg-7+deb12u18]\n\
                   Remv libfoo:amd64 [1.0]\n\
                   Inst qemu-system-x86 (1:7.2+dfsg-7+deb12u18+b3 Debian:12 [amd64])\n";
        assert_eq!(parse_removals(sim), ["qemu-utils", "libfoo:amd64"]);
        assert!(parse_removals("Inst a (1 x)\nConf a (1 x)\n").is_empty());
    }

    #[test]
    fn refusal_names_packages_and_command() {
        let e = removal_refusal(
            "setup: installing host packages",
            &["qemu-system-x86", "kmod"],
            &["qemu-utils".to_string()],
            false,
        );
        assert!(
            e.0.contains("removing installed packages: qemu-utils."),
            "{e}"
        );
        assert!(
            e.0.contains("sudo apt-get install --no-install-recommends qemu-system-x86 kmod"),
            "{e}"
        );
        let as_root = removal_refusal("s", &["a"], &["b".to_string()], true);
        assert!(as_root.0.contains("\n    apt-get install"), "{as_root}");
    }

    /// Against the real apt, only simulating (`-s`, nothing changes): on a
    /// host with busybox-static installed, installing busybox (which
    /// conflicts with it) needs a removal. Our install line must make apt
    /// abort, and the probe must name busybox-static.
    #[test]
    fn real_apt_aborts_instead_of_removing() {
        if !have_program("apt-get")
            || !lists_present()
            || !installed("busybox-static")
            || installed("busybox")
        {
            eprintln!("skipped: needs apt lists, busybox-static installed and busybox not");
            return;
        }
        let out = Command::new("apt-get")
            .args(install_args(&["busybox"]))
            .arg("-s")
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "apt-get -s did not abort: {text}");
        assert!(text.contains("remove is disabled"), "{text}");
        assert_eq!(removals_needed(&["busybox"]), ["busybox-static"]);
        let refusal = refusal_if_removals_needed("setup", &["busybox"]).unwrap();
        eprintln!("{refusal}");
        assert!(refusal.0.contains("busybox-static"), "{refusal}");
    }
}
