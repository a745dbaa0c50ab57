//! `cargo vm setup`: everything the VM needs, cached, with nothing
//! installed on the host and no root needed.
//!
//! 1. The host programs the set-up itself runs (gcc, make, binutils, xz,
//!    ...) are checked for; one that is missing is named with the package
//!    that provides it ([`HOST_PROGRAMS`]).
//! 2. qemu and busybox are Debian's packages unpacked into the cache
//!    ([`crate::tools`]).
//! 3. Each kernel series ([`SERIES`]: Debian 12's 6.12 and its default 6.1)
//!    is resolved through apt-cache (a meta package names the image), and
//!    the image, headers, kbuild and source packages are fetched with
//!    `apt-get download` and unpacked with `dpkg -x` ([`crate::apt`], over
//!    package lists of the harness's own).
//! 4. siw (not built in any Debian kernel) is built out of tree from the
//!    source package against the unpacked headers.
//! 5. The modules the guest loads are decompressed and ordered so that every
//!    module's dependencies come before it ([`crate::modinfo`] reads them).
//! 6. A stamp per kernel (and one for the tools) records the result, so
//!    later runs go straight to booting.

use crate::apt::{self, Apt, Pkg};
use crate::cache::{self, CacheLock};
use crate::modinfo;
use crate::tools::Tools;
use crate::util::{err, have_program, run_captured, say, Context, Error, Result};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

/// A Debian kernel series the VM can boot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Series {
    /// What `--kernel` takes, e.g. `6.12`.
    pub name: &'static str,
    /// The meta package whose dependency names the current image.
    meta: &'static str,
    /// The kernel source package (pinned to the image's version).
    source: &'static str,
}

/// The kernels `--kernel` offers; the first is the default. 6.12 is
/// Debian 12's newer kernel (from bookworm-security), 6.1 its default
/// (`linux-image-amd64`), the one most Debian 12 machines run.
pub const SERIES: &[Series] = &[
    Series {
        name: "6.12",
        meta: "linux-image-6.12-amd64",
        source: "linux-source-6.12",
    },
    Series {
        name: "6.1",
        meta: "linux-image-amd64",
        source: "linux-source-6.1",
    },
];

/// The series named `name` (`6.12`, `6.1`).
pub fn series(name: &str) -> Option<Series> {
    SERIES.iter().copied().find(|s| s.name == name)
}

/// Host programs the set-up and the boots run, each with the Debian
/// package that provides it (qemu, busybox and the module tools are not
/// among them: the harness brings its own).
pub const HOST_PROGRAMS: &[(&str, &str)] = &[
    ("apt-get", "apt"),
    ("apt-cache", "apt"),
    ("dpkg", "dpkg"),
    ("tar", "tar"),
    ("xz", "xz-utils"),
    ("gzip", "gzip"),
    ("make", "make"),
    ("x86_64-linux-gnu-gcc-12", "gcc-12"),
    ("ld", "binutils"),
    ("strip", "binutils"),
    ("ldd", "libc-bin"),
    // Copied into the guest with their libraries.
    ("rdma", "iproute2"),
    ("strace", "strace"),
];

/// The host programs of `wanted` that cannot be found, as one error that
/// names their packages.
fn check_host_programs(wanted: &[(&str, &str)]) -> Result<()> {
    let missing: Vec<&(&str, &str)> = wanted.iter().filter(|(p, _)| !have_program(p)).collect();
    if missing.is_empty() {
        return Ok(());
    }
    let mut packages: Vec<&str> = missing.iter().map(|(_, pkg)| *pkg).collect();
    packages.dedup();
    Err(Error(format!(
        "setup: host programs missing: {} (packages: {}). uverbs-vm installs nothing on the \
         host; install them yourself, e.g. `apt-get install {}`",
        missing
            .iter()
            .map(|(p, _)| *p)
            .collect::<Vec<_>>()
            .join(", "),
        packages.join(" "),
        packages.join(" ")
    )))
}

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
    // The two-host run's NIC: its PCI transport (built into 6.12, a module
    // on 6.1) and the driver (which pulls in net_failover and failover).
    // Loaded in the single guest too, where they find no device.
    ("virtio_pci", false, ""),
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
    /// The series it was resolved from (`6.12`, `6.1`).
    pub series: String,
    /// The kernel release, e.g. `6.12.117+deb12-amd64`.
    pub release: String,
    /// The bootable image.
    pub vmlinuz: PathBuf,
    /// Modules in load order.
    pub modules: Vec<Module>,
    /// The modules of [`MODULES`] looked for when it was set up (the
    /// optional ones this kernel lacks included).
    pub asked: Vec<String>,
}

/// What a boot needs from the cache: the tools and the kernels asked for.
#[derive(Debug, Clone)]
pub struct Prepared {
    pub tools: Tools,
    /// In the order asked for.
    pub kernels: Vec<Kernel>,
}

/// The completion stamp of a kernel series inside the cache.
fn stamp_path(cache: &Path, s: Series) -> PathBuf {
    cache.join(format!("setup-complete-{}", s.name))
}

/// Makes sure the tools and the cached kernels of `series` exist, setting
/// up what is missing (or everything, with `force`). With valid stamps only
/// cheap checks run.
///
/// Safe for concurrent runs on one cache (see [`crate::cache`]): the set-up
/// happens at most once, under the cache's exclusive lock. The returned
/// shared lock keeps a later `--force` from rewriting the cache while the
/// caller boots from it; hold it until done.
pub fn ensure(cache: &Path, force: bool, series: &[Series]) -> Result<(Prepared, CacheLock)> {
    let mut first = true;
    let (prepared, lock) = cache::read_or_set_up(
        cache,
        force,
        || ready(cache, series),
        || {
            let redo = force && std::mem::take(&mut first);
            set_up(cache, series, redo)
        },
    )?;
    for k in &prepared.kernels {
        say(format!(
            "setup: cached kernel {} {} (`cargo vm setup --force` redoes it)",
            k.series, k.release
        ));
    }
    Ok((prepared, lock))
}

/// The cached tools and kernels, if every stamp is valid; else why not.
fn ready(cache: &Path, series: &[Series]) -> Result<Prepared> {
    let tools = Tools::read(cache)?;
    let kernels = series
        .iter()
        .map(|&s| ready_kernel(&stamp_path(cache, s)))
        .collect::<Result<Vec<_>>>()?;
    Ok(Prepared { tools, kernels })
}

/// One cached kernel, if its stamp is valid.
fn ready_kernel(stamp: &Path) -> Result<Kernel> {
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

/// The modules of `wanted` a cached kernel was not set up with (required
/// or optional): a cache set up before a module was added to [`MODULES`] is
/// set up again (the full module tree is gone after a set-up, so nothing
/// can be added in place).
fn missing_modules(kernel: &Kernel, wanted: &[(&str, bool, &str)]) -> Vec<String> {
    let norm = |s: &str| s.replace('-', "_");
    wanted
        .iter()
        .filter(|(name, _, _)| !kernel.asked.iter().any(|a| norm(a) == norm(name)))
        .map(|(name, _, _)| name.to_string())
        .collect()
}

/// Sets up whatever of the tools and `series` is not ready (all of it with
/// `force`).
fn set_up(cache: &Path, series: &[Series], force: bool) -> Result<()> {
    check_host_programs(HOST_PROGRAMS)?;
    fs::create_dir_all(cache).context("setup: creating the cache directory")?;
    let apt = Apt::new(cache);
    apt.refresh(force)?;
    if force || Tools::read(cache).is_err() {
        Tools::set_up(&apt, cache)?;
    }
    for &s in series {
        let stamp = stamp_path(cache, s);
        if force || ready_kernel(&stamp).is_err() {
            set_up_kernel(&apt, cache, s, &stamp)?;
        }
    }
    say("setup: done");
    Ok(())
}

/// The kernel packages of one series: the image, its headers (with the
/// common headers and kbuild they depend on) and the source, all at the
/// image's version.
fn kernel_packages(apt: &Apt, s: Series) -> Result<(String, Vec<Pkg>)> {
    let step = format!("setup: resolving the {} kernel", s.name);
    say(format!(
        "setup: resolving the current kernel behind {}",
        s.meta
    ));
    let image = apt
        .depends(s.meta)?
        .into_iter()
        .find(|p| p.starts_with(&format!("linux-image-{}", s.name)) && p.ends_with("-amd64"))
        .ok_or_else(|| {
            err(
                &step,
                format!(
                    "`apt-cache depends {}` names no linux-image-{}* package \
                     (the 6.12 kernel for Debian 12 comes from bookworm-security; \
                     is it in the apt sources?)",
                    s.meta, s.name
                ),
            )
        })?;
    let abi = image
        .strip_prefix("linux-image-")
        .and_then(|a| a.strip_suffix("-amd64"))
        .ok_or_else(|| err(&step, format!("unexpected package name {image}")))?
        .to_string();
    let version = apt.version(&image)?;
    let headers = format!("linux-headers-{abi}-amd64");
    let mut names = vec![image.clone(), headers.clone()];
    names.extend(
        apt.depends(&headers)?
            .into_iter()
            .filter(|d| d.starts_with("linux-headers-") || d.starts_with("linux-kbuild-")),
    );
    names.push(s.source.to_string());
    if names.len() != 5 {
        return Err(err(
            &step,
            format!("expected the image, two headers, kbuild and the source, got {names:?}"),
        ));
    }
    let pkgs = names
        .into_iter()
        .map(|name| Pkg {
            name,
            version: version.clone(),
        })
        .collect();
    Ok((abi, pkgs))
}

/// The whole set-up of one kernel series; ends by writing its stamp.
fn set_up_kernel(apt: &Apt, cache: &Path, s: Series, stamp: &Path) -> Result<()> {
    let _ = fs::remove_file(stamp);
    let (abi, pkgs) = kernel_packages(apt, s)?;
    let release = format!("{abi}-amd64");
    say(format!(
        "setup: kernel {release} (package version {})",
        pkgs[0].version
    ));
    let files = apt.download(&cache.join("debs"), &pkgs)?;

    let kdir = cache.join(format!("kernel-{release}"));
    let root = kdir.join("root");
    if root.exists() {
        fs::remove_dir_all(&root).context("setup: clearing the old unpacked kernel")?;
    }
    fs::create_dir_all(&root).context("setup: creating the unpack directory")?;
    for deb in &files[..4] {
        say(format!(
            "setup: unpacking {}",
            deb.file_name().unwrap_or_default().to_string_lossy()
        ));
        apt::unpack(deb, &root)?;
    }
    let siw_src = extract_siw_source(&kdir, &files[4])?;
    let siw_ko = build_siw(&root, &release, &abi, &siw_src)?;
    let kernel = prepare_modules(s, &kdir, &root, &release, &siw_ko)?;
    // The full module tree (~190 MB) is no longer needed: the guest's
    // modules are decompressed into kdir/modules.
    fs::remove_dir_all(root.join("lib/modules"))
        .context("setup: removing the unpacked module tree")?;
    write_stamp(stamp, cache, &kernel)?;
    say(format!("setup: kernel {} ready", s.name));
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
    apt::unpack(source_deb, &tmp)?;
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

/// Finds `<name>.ko.xz` or `<name>.ko` (also with '-' and '_' swapped)
/// under `dir`: 6.12's modules are xz-compressed, other kernels' may not be.
fn find_module(dir: &Path, name: &str) -> Option<PathBuf> {
    let alt = if name.contains('-') {
        name.replace('-', "_")
    } else {
        name.replace('_', "-")
    };
    let names: Vec<String> = [name, alt.as_str()]
        .iter()
        .flat_map(|n| [format!("{n}.ko.xz"), format!("{n}.ko")])
        .collect();
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

/// The modules a module depends on (what `modinfo -F depends` says).
fn module_deps(ko: &Path) -> Result<Vec<String>> {
    let data = fs::read(ko).context("setup: reading a module")?;
    modinfo::depends(&data, &ko.display().to_string())
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
            if src.extension().is_some_and(|e| e == "xz") {
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
            } else {
                fs::copy(&src, &dest).context("setup: copying a module")?;
            }
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
fn prepare_modules(
    s: Series,
    kdir: &Path,
    root: &Path,
    release: &str,
    siw_ko: &Path,
) -> Result<Kernel> {
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
        series: s.name.to_string(),
        release: release.to_string(),
        vmlinuz,
        modules,
        asked: MODULES.iter().map(|(n, _, _)| n.to_string()).collect(),
    })
}

/// Records a finished set-up (paths relative to the cache).
fn write_stamp(stamp: &Path, cache: &Path, k: &Kernel) -> Result<()> {
    let rel = |p: &Path| p.strip_prefix(cache).unwrap_or(p).display().to_string();
    let mut s = format!(
        "series {}\nrelease {}\nvmlinuz {}\nasked {}\n",
        k.series,
        k.release,
        rel(&k.vmlinuz),
        k.asked.join(",")
    );
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
    let mut series = None;
    let mut asked = Vec::new();
    let mut release = None;
    let mut vmlinuz = None;
    let mut modules = Vec::new();
    for line in text.lines() {
        let mut f = line.splitn(5, ' ');
        match f.next() {
            Some("series") => series = f.next().map(str::to_string),
            Some("asked") => {
                asked = f
                    .next()
                    .unwrap_or("")
                    .split(',')
                    .filter(|n| !n.is_empty())
                    .map(str::to_string)
                    .collect()
            }
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
    let (Some(series), Some(release), Some(vmlinuz)) = (series, release, vmlinuz) else {
        return Err(Error("stamp lacks series, release or vmlinuz".into()));
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
        series,
        release,
        vmlinuz,
        modules,
        asked,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_host_programs_name_their_packages() {
        assert!(check_host_programs(&[("sh", "dash")]).is_ok());
        let e = check_host_programs(&[
            ("sh", "dash"),
            ("uverbs-no-such-tool", "uverbs-pkg"),
            ("uverbs-no-such-tool-2", "uverbs-pkg"),
        ])
        .unwrap_err();
        assert!(
            e.0.contains("uverbs-no-such-tool, uverbs-no-such-tool-2 (packages: uverbs-pkg)"),
            "{e}"
        );
        // qemu, busybox and the module tools come from the cache, never the host.
        for p in ["qemu-system-x86_64", "busybox", "modinfo", "insmod", "kmod"] {
            assert!(!HOST_PROGRAMS.iter().any(|(q, _)| *q == p), "{p}");
        }
    }

    #[test]
    fn kernel_series() {
        assert_eq!(SERIES[0].name, "6.12");
        assert_eq!(series("6.1").unwrap().meta, "linux-image-amd64");
        assert_eq!(series("6.1").unwrap().source, "linux-source-6.1");
        assert!(series("5.10").is_none());
    }

    #[test]
    fn a_stamp_set_up_without_a_wanted_module_is_stale() {
        let module = |name: &str| Module {
            name: name.into(),
            path: PathBuf::new(),
            optional: false,
            args: String::new(),
        };
        // Set up when crc32-pclmul (optional) was looked for and not found,
        // and before virtio_pci and virtio_net joined.
        let k = Kernel {
            series: "6.12".into(),
            release: "r".into(),
            vmlinuz: PathBuf::new(),
            modules: vec![module("dummy")],
            asked: vec!["dummy".into(), "crc32-pclmul".into()],
        };
        let wanted = [
            ("dummy", true, "numdummies=1"),
            ("crc32_pclmul", false, ""),
            ("virtio_pci", false, ""),
            ("virtio_net", true, ""),
        ];
        assert_eq!(missing_modules(&k, &wanted), ["virtio_pci", "virtio_net"]);
        assert!(MODULES
            .iter()
            .any(|(n, required, _)| *n == "virtio_net" && *required));
        // 6.1 has virtio_pci as a module, 6.12 built in: optional.
        assert!(MODULES
            .iter()
            .any(|(n, required, _)| *n == "virtio_pci" && !*required));
    }

    #[test]
    fn stamp_round_trip() {
        let dir = std::env::temp_dir().join(format!("uverbs-vm-stamp-{}", std::process::id()));
        fs::create_dir_all(dir.join("k")).unwrap();
        fs::write(dir.join("k/vmlinuz"), b"x").unwrap();
        fs::write(dir.join("k/dummy.ko"), b"x").unwrap();
        let k = Kernel {
            series: "6.12".into(),
            release: "6.12.1+deb12-amd64".into(),
            vmlinuz: dir.join("k/vmlinuz"),
            asked: vec!["dummy".into(), "virtio_pci".into()],
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
        assert_eq!(back.series, "6.12");
        assert_eq!(back.asked, k.asked);
        assert_eq!(back.modules[0].args, "numdummies=1");
        assert_eq!(back.modules[0].path, k.modules[0].path);
        fs::remove_dir_all(&dir).unwrap();
    }
}
