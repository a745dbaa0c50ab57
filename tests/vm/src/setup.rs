//! `cargo vm setup`: everything the VM needs from the host, cached.
//!
//! 1. Host packages (qemu, busybox, kmod, xz, iproute2, strace, gcc, make) are
//!    installed with apt-get when missing; [`crate::apt`] never lets apt
//!    remove a package to do so.
//! 2. The current Debian 6.12 kernel is resolved through apt-cache (the
//!    `linux-image-6.12-amd64` meta package names it), and the image,
//!    headers, kbuild and source packages are fetched with `apt-get download`
//!    and unpacked with `dpkg -x` into the cache. Nothing is installed on the
//!    host.
//! 3. siw (not built in any Debian kernel) is built out of tree from the
//!    source package against the unpacked headers.
//! 4. The modules the guest loads are decompressed and ordered so that every
//!    module's dependencies come before it.
//! 5. A stamp records the result, so later runs go straight to booting.

use crate::apt;
use crate::cache::{self, CacheLock};
use crate::util::{
    err, have_program, run_captured, run_streaming, say, which, Context, Error, Result,
};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The meta package whose dependency names the current 6.12 kernel.
const KERNEL_META: &str = "linux-image-6.12-amd64";
/// The kernel source package (version pinned to the image's version).
const SOURCE_PACKAGE: &str = "linux-source-6.12";

/// Host packages and a program each must provide (used to spot what is missing).
const HOST_PACKAGES: &[(&str, &str)] = &[
    ("qemu-system-x86", "qemu-system-x86_64"),
    ("busybox-static", "busybox"),
    ("kmod", "modinfo"),
    ("xz-utils", "xz"),
    ("gzip", "gzip"),
    ("iproute2", "rdma"),
    // Copied into the guest: `cargo vm demo` counts system calls with it.
    ("strace", "strace"),
    ("make", "make"),
    ("gcc-12", "x86_64-linux-gnu-gcc-12"),
    ("binutils", "ld"),
];

/// The modules loaded in the guest, in load order: (name, required,
/// insmod arguments). Dependencies a future kernel adds are inserted
/// automatically before the module needing them.
///
/// crc32_generic must be loaded explicitly: rxe looks the `crc32` crypto
/// algorithm up by name when a link is created and fails with ENOENT without it.
const MODULES: &[(&str, bool, &str)] = &[
    ("dummy", true, "numdummies=1"),
    ("crc32_generic", true, ""),
    ("crc32-pclmul", false, ""),
    ("crc32c_generic", true, ""),
    ("crc32c-intel", false, ""),
    ("libcrc32c", true, ""),
    ("ib_core", true, ""),
    ("ib_uverbs", true, ""),
    // The connection manager's user interface (/dev/infiniband/rdma_cm);
    // ib_cm and iw_cm come in as its dependencies.
    ("rdma_ucm", true, ""),
    ("udp_tunnel", true, ""),
    ("ip6_udp_tunnel", true, ""),
    ("rdma_rxe", true, ""),
    ("siw", true, ""),
    // The two-host run's NIC (virtio_pci is built in; this pulls in
    // net_failover and failover). Loaded in the single guest too, where it
    // finds no device and does nothing.
    ("virtio_net", true, ""),
];

/// One kernel module ready for `insmod` in the guest.
#[derive(Debug, Clone)]
pub struct Module {
    /// Module name (as in the file name, without `.ko`).
    pub name: String,
    /// The decompressed `.ko` on the host.
    pub path: PathBuf,
    /// Whether the guest may go on if loading it fails.
    pub optional: bool,
    /// insmod arguments, e.g. `numdummies=1`.
    pub args: String,
}

/// The prepared kernel: what a boot needs.
#[derive(Debug, Clone)]
pub struct Kernel {
    /// The kernel release, e.g. `6.12.117+deb12-amd64`.
    pub release: String,
    /// The bootable image.
    pub vmlinuz: PathBuf,
    /// Modules in load order.
    pub modules: Vec<Module>,
}

/// The completion stamp inside the cache.
const STAMP: &str = "setup-complete";

/// Makes sure host packages and the cached kernel, modules and siw exist,
/// setting them up if not (or if `force`). With a valid completion stamp
/// only the cheap host-package check runs.
///
/// Safe for concurrent runs on one cache (see [`crate::cache`]): the set-up
/// happens at most once, under the cache's exclusive lock. The returned
/// shared lock keeps a later `--force` from rewriting the cache while the
/// caller boots from it; hold it until done.
pub fn ensure(cache: &Path, force: bool) -> Result<(Kernel, CacheLock)> {
    let stamp = cache.join(STAMP);
    let (kernel, lock) =
        cache::read_or_set_up(cache, force, || ready(&stamp), || set_up(cache, &stamp))?;
    say(format!(
        "setup: cached kernel {} (delete {} or run `cargo vm setup --force` to redo)",
        kernel.release,
        stamp.display()
    ));
    Ok((kernel, lock))
}

/// The cached kernel, if the host packages are there and the stamp is valid;
/// else why not.
fn ready(stamp: &Path) -> Result<Kernel> {
    let missing = missing_host_packages();
    if !missing.is_empty() {
        return Err(Error(format!(
            "host packages missing: {}",
            missing.join(" ")
        )));
    }
    if !stamp.is_file() {
        return Err(Error(format!(
            "no completed set-up ({} absent)",
            stamp.display()
        )));
    }
    let kernel =
        read_stamp(stamp).map_err(|e| Error(format!("stale stamp {} ({e})", stamp.display())))?;
    let missing = missing_modules(&kernel, MODULES);
    if !missing.is_empty() {
        return Err(Error(format!(
            "stale stamp {} (set up before {} joined the guest's modules)",
            stamp.display(),
            missing.join(", ")
        )));
    }
    Ok(kernel)
}

/// The required modules of `wanted` that a cached kernel lacks: a cache set
/// up before a module was added to [`MODULES`] is set up again (the full
/// module tree is gone after a set-up, so nothing can be added in place).
fn missing_modules(kernel: &Kernel, wanted: &[(&str, bool, &str)]) -> Vec<String> {
    let norm = |s: &str| s.replace('-', "_");
    wanted
        .iter()
        .filter(|(name, required, _)| {
            *required && !kernel.modules.iter().any(|m| norm(&m.name) == norm(name))
        })
        .map(|(name, _, _)| name.to_string())
        .collect()
}

/// The whole set-up; ends by writing the stamp.
fn set_up(cache: &Path, stamp: &Path) -> Result<()> {
    ensure_host_packages()?;
    fs::create_dir_all(cache).context("setup: creating the cache directory")?;
    let _ = fs::remove_file(stamp);

    let (image_pkg, version) = resolve_kernel()?;
    let abi = image_pkg
        .strip_prefix("linux-image-")
        .and_then(|s| s.strip_suffix("-amd64"))
        .ok_or_else(|| {
            err(
                "setup: resolving the kernel",
                format!("unexpected package name {image_pkg}"),
            )
        })?
        .to_string();
    let release = format!("{abi}-amd64");
    say(format!(
        "setup: kernel {release} (package version {version})"
    ));

    let debs = cache.join("debs");
    let packages = [
        image_pkg.clone(),
        format!("linux-headers-{abi}-amd64"),
        format!("linux-headers-{abi}-common"),
        format!("linux-kbuild-{abi}"),
        SOURCE_PACKAGE.to_string(),
    ];
    let files = download(&debs, &packages, &version)?;

    let kdir = cache.join(format!("kernel-{release}"));
    let root = kdir.join("root");
    unpack(&root, &files[..4])?;
    let siw_src = extract_siw_source(&kdir, &files[4])?;
    let siw_ko = build_siw(&root, &release, &abi, &siw_src)?;
    let kernel = prepare_modules(&kdir, &root, &release, &siw_ko)?;
    // The full module tree (~190 MB) is no longer needed: the guest's
    // modules are decompressed into kdir/modules.
    fs::remove_dir_all(root.join("lib/modules"))
        .context("setup: removing the unpacked module tree")?;
    write_stamp(stamp, cache, &kernel)?;
    say("setup: done");
    Ok(())
}

/// Installs whichever host packages are missing (apt never removes any).
fn ensure_host_packages() -> Result<()> {
    let missing = missing_host_packages();
    if missing.is_empty() {
        return Ok(());
    }
    if !have_program("apt-get") {
        return Err(Error(format!(
            "setup: host packages missing ({}) and there is no apt-get to install them",
            missing.join(" ")
        )));
    }
    say(format!(
        "setup: installing host packages: {}",
        missing.join(" ")
    ));
    apt::install("setup: installing host packages", &missing)
}

/// The host packages that are not installed or lack their program.
fn missing_host_packages() -> Vec<&'static str> {
    HOST_PACKAGES
        .iter()
        .filter(|(pkg, prog)| !apt::installed(pkg) || !have_program(prog))
        .map(|(pkg, _)| *pkg)
        .collect()
}

/// Asks apt-cache which kernel package `linux-image-6.12-amd64` points to
/// today, and that package's version. Returns (package, version).
fn resolve_kernel() -> Result<(String, String)> {
    say(format!(
        "setup: resolving the current kernel behind {KERNEL_META}"
    ));
    let query = || -> Result<(String, String)> {
        let deps = run_captured(
            "setup: resolving the kernel",
            Command::new("apt-cache").args(["depends", KERNEL_META]),
        )?;
        let pkg = deps
            .lines()
            .filter_map(|l| l.trim().trim_start_matches('|').strip_prefix("Depends:"))
            .map(str::trim)
            .find(|p| p.starts_with("linux-image-") && p.ends_with("-amd64"))
            .ok_or_else(|| {
                err(
                    "setup: resolving the kernel",
                    format!(
                        "`apt-cache depends {KERNEL_META}` names no linux-image package:\n{deps}"
                    ),
                )
            })?
            .to_string();
        let show = run_captured(
            "setup: resolving the kernel version",
            Command::new("apt-cache").args(["show", "--no-all-versions", &pkg]),
        )?;
        let version = show
            .lines()
            .find_map(|l| l.strip_prefix("Version:"))
            .map(|v| v.trim().to_string())
            .ok_or_else(|| {
                err(
                    "setup: resolving the kernel version",
                    format!("no Version in `apt-cache show {pkg}`"),
                )
            })?;
        Ok((pkg, version))
    };
    match query() {
        Ok(r) => Ok(r),
        Err(first) => {
            say(format!(
                "setup: {first}\nvm: setup: refreshing package lists and retrying"
            ));
            apt::update()?;
            query().map_err(|e| {
                Error(format!(
                    "{e}\n(the 6.12 kernel for Debian 12 comes from bookworm-security; \
                     make sure it is in the apt sources)"
                ))
            })
        }
    }
}

/// The file name apt-get download gives a package version (':' is escaped).
fn deb_prefix(pkg: &str, version: &str) -> String {
    format!("{pkg}_{}_", version.replace(':', "%3a"))
}

/// Fetches the packages (pinned to `version`) into `dir` unless already
/// there. Returns the .deb paths in the order of `packages`.
fn download(dir: &Path, packages: &[String], version: &str) -> Result<Vec<PathBuf>> {
    fs::create_dir_all(dir).context("setup: creating the download directory")?;
    let find = |pkg: &str| -> Option<PathBuf> {
        let prefix = deb_prefix(pkg, version);
        fs::read_dir(dir)
            .ok()?
            .flatten()
            .map(|e| e.path())
            .find(|p| {
                p.file_name()
                    .map(|n| {
                        let n = n.to_string_lossy();
                        n.starts_with(&prefix) && n.ends_with(".deb")
                    })
                    .unwrap_or(false)
            })
    };
    let wanted: Vec<String> = packages
        .iter()
        .filter(|p| find(p).is_none())
        .map(|p| format!("{p}={version}"))
        .collect();
    if !wanted.is_empty() {
        say(format!(
            "setup: downloading {} into {}",
            wanted.join(" "),
            dir.display()
        ));
        let mut cmd = Command::new("apt-get");
        cmd.current_dir(dir).arg("download");
        if apt::is_root() {
            // apt's download sandbox user cannot write into our cache.
            cmd.args(["-o", "APT::Sandbox::User=root"]);
        }
        run_streaming("setup: downloading the kernel packages", cmd.args(&wanted))?;
    } else {
        say("setup: kernel packages already downloaded");
    }
    packages
        .iter()
        .map(|p| {
            find(p).ok_or_else(|| {
                err(
                    "setup: downloading",
                    format!(
                        "{p} {version} is not in {} after apt-get download",
                        dir.display()
                    ),
                )
            })
        })
        .collect()
}

/// Unpacks .deb files into a fresh `root` with `dpkg -x`.
fn unpack(root: &Path, debs: &[PathBuf]) -> Result<()> {
    if root.exists() {
        fs::remove_dir_all(root).context("setup: clearing the old unpacked kernel")?;
    }
    fs::create_dir_all(root).context("setup: creating the unpack directory")?;
    for deb in debs {
        say(format!(
            "setup: unpacking {}",
            deb.file_name().unwrap_or_default().to_string_lossy()
        ));
        run_captured(
            "setup: unpacking",
            Command::new("dpkg").arg("-x").arg(deb).arg(root),
        )?;
    }
    Ok(())
}

/// Takes drivers/infiniband/sw/siw out of the source package's tarball.
/// Returns the directory holding siw's sources.
fn extract_siw_source(kdir: &Path, source_deb: &Path) -> Result<PathBuf> {
    let tmp = kdir.join("source-deb");
    let build = kdir.join("siw");
    for d in [&tmp, &build] {
        if d.exists() {
            fs::remove_dir_all(d).context("setup: clearing old siw sources")?;
        }
    }
    say("setup: unpacking the kernel source package (siw sources only)");
    run_captured(
        "setup: unpacking the source package",
        Command::new("dpkg").arg("-x").arg(source_deb).arg(&tmp),
    )?;
    let srcdir = tmp.join("usr/src");
    let tarball = fs::read_dir(&srcdir)
        .context("setup: reading the source package")?
        .flatten()
        .map(|e| e.path())
        .find(|p| {
            let n = p.file_name().unwrap_or_default().to_string_lossy();
            n.starts_with("linux-source-") && n.ends_with(".tar.xz")
        })
        .ok_or_else(|| {
            err(
                "setup: extracting siw",
                format!("no linux-source-*.tar.xz in {}", srcdir.display()),
            )
        })?;
    let top = tarball
        .file_name()
        .unwrap_or_default()
        .to_string_lossy()
        .trim_end_matches(".tar.xz")
        .to_string();
    fs::create_dir_all(&build).context("setup: creating the siw build directory")?;
    run_captured(
        "setup: extracting siw from the kernel source",
        Command::new("tar")
            .arg("-xJf")
            .arg(&tarball)
            .arg("-C")
            .arg(&build)
            .arg("--strip-components=5")
            .arg(format!("{top}/drivers/infiniband/sw/siw")),
    )?;
    fs::remove_dir_all(&tmp).context("setup: removing the unpacked source package")?;
    if !build.join("siw_main.c").is_file() {
        return Err(err(
            "setup: extracting siw",
            format!("{} has no siw_main.c", build.display()),
        ));
    }
    Ok(build)
}

/// Builds siw.ko out of tree against the unpacked headers.
fn build_siw(root: &Path, release: &str, abi: &str, siw: &Path) -> Result<PathBuf> {
    let headers = root.join(format!("usr/src/linux-headers-{release}"));
    let makefile = headers.join("Makefile");
    // The headers' Makefile includes the common part by its absolute
    // /usr/src path; point it at the unpacked copy instead.
    let text = fs::read_to_string(&makefile).context("setup: reading the headers' Makefile")?;
    let usr_src = root.join("usr/src");
    let fixed = text.replace(" /usr/src/", &format!(" {}/", usr_src.display()));
    if !fixed.contains(&format!("linux-headers-{abi}-common")) {
        return Err(err(
            "setup: patching the headers' Makefile",
            format!("unexpected content:\n{text}"),
        ));
    }
    fs::write(&makefile, fixed).context("setup: patching the headers' Makefile")?;
    say("setup: building siw.ko out of tree (a few seconds)");
    run_captured(
        "setup: building siw",
        Command::new("make")
            .arg("-j2")
            .arg("-C")
            .arg(&headers)
            .arg(format!("M={}", siw.display()))
            .arg("CONFIG_RDMA_SIW=m")
            // Without this the build wants `pahole` for BTF.
            .arg("CONFIG_DEBUG_INFO_BTF_MODULES=")
            .arg("modules"),
    )?;
    let ko = siw.join("siw.ko");
    if !ko.is_file() {
        return Err(err(
            "setup: building siw",
            "make succeeded but produced no siw.ko",
        ));
    }
    // Like the distribution's modules: no debug info (5.8 MB -> well under 1 MB).
    run_captured(
        "setup: stripping siw.ko",
        Command::new("strip").arg("--strip-debug").arg(&ko),
    )?;
    Ok(ko)
}

/// Finds `<name>.ko.xz` (also with '-' and '_' swapped) under `dir`.
fn find_module(dir: &Path, name: &str) -> Option<PathBuf> {
    let alt = if name.contains('-') {
        name.replace('-', "_")
    } else {
        name.replace('_', "-")
    };
    let names = [format!("{name}.ko.xz"), format!("{alt}.ko.xz")];
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in fs::read_dir(&d).ok()?.flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if names.iter().any(|n| e.file_name().to_string_lossy() == *n) {
                return Some(p);
            }
        }
    }
    None
}

/// The modules a module depends on (`modinfo -F depends`).
fn module_deps(ko: &Path) -> Result<Vec<String>> {
    let out = run_captured(
        "setup: reading module dependencies",
        Command::new(which("modinfo").unwrap_or_else(|| "modinfo".into()))
            .args(["-F", "depends"])
            .arg(ko),
    )?;
    Ok(out
        .trim()
        .split(',')
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect())
}

/// Modules being collected in load order.
struct ModuleSet {
    /// The unpacked `lib/modules/<release>/kernel` tree.
    tree: PathBuf,
    /// Where decompressed modules go.
    out: PathBuf,
    /// The freshly built siw.ko.
    siw_ko: PathBuf,
    /// Modules so far, each after its dependencies.
    modules: Vec<Module>,
}

impl ModuleSet {
    /// Adds a module after its dependencies (depth first).
    fn add(&mut self, name: &str, required: bool, args: &str, depth: usize) -> Result<()> {
        let norm = |s: &str| s.replace('-', "_");
        if self.modules.iter().any(|m| norm(&m.name) == norm(name)) {
            return Ok(());
        }
        if depth > 20 {
            return Err(err(
                "setup: ordering modules",
                format!("dependency loop at {name}"),
            ));
        }
        let dest = self.out.join(format!("{name}.ko"));
        if name == "siw" {
            fs::copy(&self.siw_ko, &dest).context("setup: copying siw.ko")?;
        } else {
            let Some(src) = find_module(&self.tree, name) else {
                if required {
                    return Err(err(
                        "setup: finding modules",
                        format!("{name}.ko.xz not found under {}", self.tree.display()),
                    ));
                }
                say(format!(
                    "setup: optional module {name} not in this kernel; skipping"
                ));
                return Ok(());
            };
            let data = Command::new("xz")
                .arg("-dc")
                .arg(&src)
                .output()
                .context("setup: running xz")?;
            if !data.status.success() {
                return Err(err(
                    "setup: decompressing modules",
                    format!(
                        "xz -dc {} failed: {}",
                        src.display(),
                        String::from_utf8_lossy(&data.stderr)
                    ),
                ));
            }
            fs::write(&dest, data.stdout).context("setup: writing a module")?;
        }
        for dep in module_deps(&dest)? {
            self.add(&dep, true, "", depth + 1)?;
        }
        self.modules.push(Module {
            name: name.to_string(),
            path: dest,
            optional: !required,
            args: args.to_string(),
        });
        Ok(())
    }
}

/// Decompresses the modules the guest needs and orders them so that each
/// one's dependencies come first.
fn prepare_modules(kdir: &Path, root: &Path, release: &str, siw_ko: &Path) -> Result<Kernel> {
    let vmlinuz = root.join(format!("boot/vmlinuz-{release}"));
    if !vmlinuz.is_file() {
        return Err(err(
            "setup: checking the kernel image",
            format!("{} is missing", vmlinuz.display()),
        ));
    }
    let tree = root.join(format!("lib/modules/{release}/kernel"));
    let out = kdir.join("modules");
    if out.exists() {
        fs::remove_dir_all(&out).context("setup: clearing old modules")?;
    }
    fs::create_dir_all(&out).context("setup: creating the module directory")?;
    say(format!(
        "setup: decompressing modules into {}",
        out.display()
    ));

    let mut set = ModuleSet {
        tree,
        out,
        siw_ko: siw_ko.to_path_buf(),
        modules: Vec::new(),
    };
    for (name, required, args) in MODULES {
        set.add(name, *required, args, 0)?;
    }
    let modules = set.modules;
    Ok(Kernel {
        release: release.to_string(),
        vmlinuz,
        modules,
    })
}

/// Records a finished set-up (paths relative to the cache).
fn write_stamp(stamp: &Path, cache: &Path, k: &Kernel) -> Result<()> {
    let rel = |p: &Path| p.strip_prefix(cache).unwrap_or(p).display().to_string();
    let mut s = format!("release {}\nvmlinuz {}\n", k.release, rel(&k.vmlinuz));
    for m in &k.modules {
        s.push_str(&format!(
            "module {} {} {} {}\n",
            m.name,
            if m.optional { "optional" } else { "required" },
            rel(&m.path),
            m.args
        ));
    }
    fs::write(stamp, s).context("setup: writing the completion stamp")
}

/// Reads a stamp back, checking that the files it names still exist.
fn read_stamp(stamp: &Path) -> Result<Kernel> {
    let cache = stamp.parent().unwrap_or(Path::new("."));
    let text = fs::read_to_string(stamp).context("reading the stamp")?;
    let mut release = None;
    let mut vmlinuz = None;
    let mut modules = Vec::new();
    for line in text.lines() {
        let mut f = line.splitn(5, ' ');
        match f.next() {
            Some("release") => release = f.next().map(str::to_string),
            Some("vmlinuz") => vmlinuz = f.next().map(|p| cache.join(p)),
            Some("module") => {
                let (Some(name), Some(kind), Some(path)) = (f.next(), f.next(), f.next()) else {
                    return Err(Error(format!("bad stamp line `{line}`")));
                };
                modules.push(Module {
                    name: name.to_string(),
                    path: cache.join(path),
                    optional: kind == "optional",
                    args: f.next().unwrap_or("").trim().to_string(),
                });
            }
            _ => {}
        }
    }
    let (Some(release), Some(vmlinuz)) = (release, vmlinuz) else {
        return Err(Error("stamp lacks release or vmlinuz".into()));
    };
    for p in std::iter::once(&vmlinuz).chain(modules.iter().map(|m| &m.path)) {
        if !p.is_file() {
            return Err(Error(format!("{} is missing", p.display())));
        }
    }
    if modules.is_empty() {
        return Err(Error("stamp lists no modules".into()));
    }
    Ok(Kernel {
        release,
        vmlinuz,
        modules,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deb_names() {
        assert_eq!(
            deb_prefix("linux-source-6.12", "6.12.117-1~deb12u1"),
            "linux-source-6.12_6.12.117-1~deb12u1_"
        );
        assert_eq!(deb_prefix("x", "1:2.0"), "x_1%3a2.0_");
    }

    #[test]
    fn a_stamp_without_a_required_module_is_stale() {
        let module = |name: &str| Module {
            name: name.into(),
            path: PathBuf::new(),
            optional: false,
            args: String::new(),
        };
        let k = Kernel {
            release: "r".into(),
            vmlinuz: PathBuf::new(),
            modules: vec![module("dummy"), module("crc32-pclmul")],
        };
        let wanted = [
            ("dummy", true, "numdummies=1"),
            ("crc32_pclmul", true, ""),
            ("crc32c-intel", false, ""),
            ("virtio_net", true, ""),
        ];
        assert_eq!(missing_modules(&k, &wanted), ["virtio_net"]);
        assert!(MODULES
            .iter()
            .any(|(n, required, _)| *n == "virtio_net" && *required));
    }

    #[test]
    fn stamp_round_trip() {
        let dir = std::env::temp_dir().join(format!("uverbs-vm-stamp-{}", std::process::id()));
        fs::create_dir_all(dir.join("k")).unwrap();
        fs::write(dir.join("k/vmlinuz"), b"x").unwrap();
        fs::write(dir.join("k/dummy.ko"), b"x").unwrap();
        let k = Kernel {
            release: "6.12.1+deb12-amd64".into(),
            vmlinuz: dir.join("k/vmlinuz"),
            modules: vec![Module {
                name: "dummy".into(),
                path: dir.join("k/dummy.ko"),
                optional: false,
                args: "numdummies=1".into(),
            }],
        };
        let stamp = dir.join("setup-complete");
        write_stamp(&stamp, &dir, &k).unwrap();
        let back = read_stamp(&stamp).unwrap();
        assert_eq!(back.release, k.release);
        assert_eq!(back.modules[0].args, "numdummies=1");
        assert_eq!(back.modules[0].path, k.modules[0].path);
        fs::remove_dir_all(&dir).unwrap();
    }
}
