//! Debian's archive, read without changing the host.
//!
//! Everything the harness takes from Debian (the kernels, qemu, busybox,
//! the benchmarks' peers) is fetched with `apt-get download` and unpacked
//! with `dpkg -x` into the cache, never installed: no package of the host
//! changes, and no step needs root. apt reads package lists of its own,
//! kept under `<cache>/apt` (`-o Dir::State::Lists=…`, `-o Dir::Cache=…`)
//! and refreshed there by `apt-get update`, so the host's lists may be
//! missing or stale and are never touched.
//!
//! Every apt and dpkg command goes through [`Apt::command`] or [`unpack`],
//! which refuse any operation that would change the system ([`refusal`]):
//! `apt-get install` only ever simulates (`-s`), to resolve a dependency
//! closure.

use crate::util::{err, run_captured, run_streaming, say, Context, Error, Result};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, SystemTime};

/// Private package lists older than this are refreshed before a set-up
/// resolves anything (the archive drops superseded versions).
const LISTS_MAX_AGE: Duration = Duration::from_secs(6 * 3600);

/// A package at one version, as apt resolved it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pkg {
    pub name: String,
    pub version: String,
}

impl Pkg {
    /// `name=version`, as `apt-get download` takes it.
    fn pinned(&self) -> String {
        format!("{}={}", self.name, self.version)
    }

    /// The start of the file name `apt-get download` gives it (':' in the
    /// version is escaped).
    fn file_prefix(&self) -> String {
        format!("{}_{}_", self.name, self.version.replace(':', "%3a"))
    }
}

/// Why the harness refuses to run `program args`, if it would change the
/// host's packages: anything but reading (`apt-cache`), refreshing our own
/// lists (`apt-get update`), downloading, simulating an install, and
/// `dpkg -x` / `dpkg-deb -x`.
pub fn refusal(program: &str, args: &[String]) -> Option<Error> {
    let has = |a: &str| args.iter().any(|x| x == a);
    let first = args
        .iter()
        .find(|a| !a.starts_with('-') && !a.contains("::"));
    let allowed = match program {
        "apt-cache" => true,
        "apt-get" => match first.map(String::as_str) {
            Some("update") | Some("download") => true,
            Some("install") => has("-s") || has("--simulate"),
            _ => false,
        },
        "dpkg" | "dpkg-deb" => args.len() == 3 && args[0] == "-x",
        _ => false,
    };
    (!allowed).then(|| {
        Error(format!(
            "uverbs-vm changes no package on the host, so it refused to run `{program} {}`",
            args.join(" ")
        ))
    })
}

/// The packages an install simulation (`apt-get install -s`) would
/// install: its `Inst <name> [<old>] (<version> <suites> [<arch>])` lines.
/// What the host already has at a fitting version is not among them.
pub fn parse_installs(simulation: &str) -> Vec<Pkg> {
    simulation
        .lines()
        .filter_map(|l| l.strip_prefix("Inst "))
        .filter_map(|rest| {
            let name = rest.split_whitespace().next()?;
            let (_, after) = rest.split_once('(')?;
            let version = after.split_whitespace().next()?;
            Some(Pkg {
                name: name.to_string(),
                version: version.to_string(),
            })
        })
        .collect()
}

/// The `Depends:` of `apt-cache depends` output (alternatives included,
/// virtual packages in `<…>` left out).
pub fn parse_depends(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|l| l.trim().trim_start_matches('|').strip_prefix("Depends:"))
        .map(str::trim)
        .filter(|p| !p.starts_with('<'))
        .map(str::to_string)
        .collect()
}

/// The `Version:` of `apt-cache show` output.
pub fn parse_version(show: &str) -> Option<String> {
    show.lines()
        .find_map(|l| l.strip_prefix("Version:"))
        .map(|v| v.trim().to_string())
}

/// Whether we run as root: apt's download sandbox user then cannot write
/// into the cache, so it is told to stay root.
pub fn is_root() -> bool {
    real_uid() == 0
}

/// The real user id, read from /proc (the harness binds no libc).
fn real_uid() -> u32 {
    fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .and_then(|v| v.split_whitespace().next()?.parse().ok())
        })
        .unwrap_or(u32::MAX)
}

/// apt with package lists of our own under `dir` (`<cache>/apt`).
pub struct Apt {
    dir: PathBuf,
}

impl Apt {
    /// apt over the lists kept in `<cache>/apt`.
    pub fn new(cache: &Path) -> Apt {
        Apt {
            dir: cache.join("apt"),
        }
    }

    fn lists(&self) -> PathBuf {
        self.dir.join("lists")
    }

    /// The `-o` options that point apt at our lists and caches.
    fn options(&self) -> Vec<String> {
        let mut o = vec![
            "-o".to_string(),
            format!("Dir::State::Lists={}", self.lists().display()),
            "-o".to_string(),
            format!("Dir::Cache={}", self.dir.join("cache").display()),
        ];
        if is_root() {
            o.extend(["-o".to_string(), "APT::Sandbox::User=root".to_string()]);
        }
        o
    }

    /// `program` (`apt-get` or `apt-cache`) with our lists and `args`;
    /// refused if it would change the host ([`refusal`]).
    pub fn command(&self, program: &str, args: &[&str]) -> Result<Command> {
        let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        if let Some(e) = refusal(program, &args) {
            return Err(e);
        }
        let mut c = Command::new(program);
        c.args(self.options())
            .args(&args)
            .env("DEBIAN_FRONTEND", "noninteractive");
        Ok(c)
    }

    /// Whether our lists hold any package index.
    fn lists_age(&self) -> Option<Duration> {
        fs::read_dir(self.lists())
            .ok()?
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().contains("_Packages"))
            .filter_map(|e| e.metadata().ok()?.modified().ok())
            .max()
            .map(|t| SystemTime::now().duration_since(t).unwrap_or_default())
    }

    /// Refreshes our lists (`apt-get update` into `<cache>/apt`) when they
    /// are missing or older than [`LISTS_MAX_AGE`], or always with `force`.
    pub fn refresh(&self, force: bool) -> Result<()> {
        if !force && self.lists_age().is_some_and(|age| age < LISTS_MAX_AGE) {
            return Ok(());
        }
        let step = "apt: refreshing the harness's package lists";
        for d in [
            self.lists().join("partial"),
            self.dir.join("cache/archives/partial"),
        ] {
            fs::create_dir_all(&d).context(step)?;
        }
        say(format!("apt-get update into {}", self.lists().display()));
        run_captured(step, &mut self.command("apt-get", &["update", "-q"])?).map(drop)
    }

    /// The candidate version of `pkg`.
    pub fn version(&self, pkg: &str) -> Result<String> {
        let step = format!("apt: the version of {pkg}");
        let show = run_captured(
            &step,
            &mut self.command("apt-cache", &["show", "--no-all-versions", pkg])?,
        )?;
        parse_version(&show).ok_or_else(|| err(&step, "`apt-cache show` names no Version"))
    }

    /// What `pkg` depends on (`apt-cache depends`).
    pub fn depends(&self, pkg: &str) -> Result<Vec<String>> {
        let out = run_captured(
            &format!("apt: the dependencies of {pkg}"),
            &mut self.command("apt-cache", &["depends", pkg])?,
        )?;
        Ok(parse_depends(&out))
    }

    /// What installing `packages` on this host would bring (themselves,
    /// also where the host has them, and every dependency the host lacks),
    /// from a simulation: nothing is installed. Installed packages apt
    /// would have to remove (a conflict with the host's) do not matter
    /// here: nothing is removed either.
    pub fn closure(&self, packages: &[&str]) -> Result<Vec<Pkg>> {
        let mut args = vec![
            "install",
            "-s",
            "-q",
            "--reinstall",
            "--no-install-recommends",
        ];
        args.extend_from_slice(packages);
        let sim = run_captured(
            &format!("apt: resolving {}", packages.join(" ")),
            &mut self.command("apt-get", &args)?,
        )?;
        let pkgs = parse_installs(&sim);
        if let Some(p) = packages
            .iter()
            .find(|p| !pkgs.iter().any(|q| q.name == **p))
        {
            return Err(Error(format!(
                "apt: resolving {}: the simulation installs no {p}:\n{sim}",
                packages.join(" ")
            )));
        }
        Ok(pkgs)
    }

    /// Downloads `packages` into `dir` unless there already; returns their
    /// files in order.
    pub fn download(&self, dir: &Path, packages: &[Pkg]) -> Result<Vec<PathBuf>> {
        let step = "apt: downloading";
        fs::create_dir_all(dir).context(step)?;
        let find = |p: &Pkg| -> Option<PathBuf> {
            let prefix = p.file_prefix();
            fs::read_dir(dir)
                .ok()?
                .flatten()
                .map(|e| e.path())
                .find(|f| {
                    let n = f.file_name().unwrap_or_default().to_string_lossy();
                    n.starts_with(&prefix) && n.ends_with(".deb")
                })
        };
        let wanted: Vec<String> = packages
            .iter()
            .filter(|p| find(p).is_none())
            .map(Pkg::pinned)
            .collect();
        if !wanted.is_empty() {
            say(format!(
                "apt-get download {} (into {})",
                wanted.join(" "),
                dir.display()
            ));
            let mut args = vec!["download", "-q"];
            args.extend(wanted.iter().map(String::as_str));
            let mut cmd = self.command("apt-get", &args)?;
            run_streaming(step, cmd.current_dir(dir))?;
        }
        packages
            .iter()
            .map(|p| {
                find(p).ok_or_else(|| {
                    err(
                        step,
                        format!(
                            "{} is not in {} after apt-get download",
                            p.pinned(),
                            dir.display()
                        ),
                    )
                })
            })
            .collect()
    }
}

/// Packages unpacked into a root of their own under the cache (`<dir>/root`),
/// listed in `<dir>/stamp` as `package <name> <version>` lines.
#[derive(Debug, Clone)]
pub struct Unpacked {
    pub root: PathBuf,
    pub packages: Vec<Pkg>,
}

/// The stamp of an unpacked set inside its directory.
const UNPACKED_STAMP: &str = "stamp";

/// The packages a stamp lists.
fn parse_stamp(text: &str) -> Vec<Pkg> {
    text.lines()
        .filter_map(|l| l.strip_prefix("package "))
        .filter_map(|l| {
            let (name, version) = l.split_once(' ')?;
            Some(Pkg {
                name: name.into(),
                version: version.into(),
            })
        })
        .collect()
}

/// What `dir` holds unpacked, if its stamp lists every package of `wanted`
/// (else why not).
pub fn read_unpacked(dir: &Path, wanted: &[&str]) -> Result<Unpacked> {
    let stamp = dir.join(UNPACKED_STAMP);
    let text = fs::read_to_string(&stamp).map_err(|_| {
        Error(format!(
            "nothing unpacked there ({} absent)",
            stamp.display()
        ))
    })?;
    let packages = parse_stamp(&text);
    if let Some(p) = wanted
        .iter()
        .find(|p| !packages.iter().any(|q| q.name == **p))
    {
        return Err(Error(format!("{} does not list {p}", stamp.display())));
    }
    Ok(Unpacked {
        root: dir.join("root"),
        packages,
    })
}

impl Apt {
    /// Resolves `wanted` and what the host lacks for them
    /// ([`closure`](Self::closure)), downloads them into `<cache>/debs`,
    /// unpacks them into a fresh `<dir>/root` and lists them in
    /// `<dir>/stamp` (written last: a set-up cut short leaves none).
    pub fn unpack_fresh(&self, cache: &Path, dir: &Path, wanted: &[&str]) -> Result<Unpacked> {
        let step = format!("apt: unpacking {}", wanted.join(" "));
        let root = dir.join("root");
        let stamp = dir.join(UNPACKED_STAMP);
        let _ = fs::remove_file(&stamp);
        if root.exists() {
            fs::remove_dir_all(&root).context(&step)?;
        }
        fs::create_dir_all(&root).context(&step)?;
        say(format!(
            "resolving {} (and what the host lacks for them)",
            wanted.join(" ")
        ));
        let packages = self.closure(wanted)?;
        let debs = self.download(&cache.join("debs"), &packages)?;
        say(format!(
            "unpacking {} packages into {}",
            debs.len(),
            root.display()
        ));
        for deb in &debs {
            unpack(deb, &root)?;
        }
        let text: String = packages
            .iter()
            .map(|p| format!("package {} {}\n", p.name, p.version))
            .collect();
        fs::write(&stamp, text).context(&step)?;
        Ok(Unpacked { root, packages })
    }
}

/// Unpacks a `.deb` into `root` (`dpkg -x`: files only, no scripts run,
/// nothing recorded in the host's package database).
pub fn unpack(deb: &Path, root: &Path) -> Result<()> {
    let args = vec![
        "-x".to_string(),
        deb.display().to_string(),
        root.display().to_string(),
    ];
    if let Some(e) = refusal("dpkg", &args) {
        return Err(e);
    }
    run_captured("apt: unpacking", Command::new("dpkg").args(&args)).map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(s: &[&str]) -> Vec<String> {
        s.iter().map(|a| a.to_string()).collect()
    }

    #[test]
    fn only_reading_downloading_and_simulating_are_allowed() {
        for (command, refused) in [
            ("apt-get install -y qemu-system-x86", true),
            ("apt-get -o DPkg::Lock::Timeout=1 install x", true),
            ("apt-get remove qemu-utils", true),
            ("apt-get purge x", true),
            ("apt-get upgrade", true),
            ("dpkg -i x.deb", true),
            ("dpkg --install x.deb", true),
            ("dpkg -r x", true),
            ("sudo apt-get download x", true),
            ("apt-get -o Dir::Cache=/c install -s x", false),
            ("apt-get download x=1", false),
            ("apt-get update -q", false),
            ("apt-cache depends x", false),
            ("dpkg -x a.deb /root", false),
        ] {
            let mut words = command.split_whitespace();
            let program = words.next().unwrap();
            let args: Vec<String> = words.map(String::from).collect();
            assert_eq!(refusal(program, &args).is_some(), refused, "{command}");
        }
        let e = refusal("dpkg", &strings(&["-i", "x.deb"])).unwrap();
        assert!(e.0.contains("refused to run `dpkg -i x.deb`"), "{e}");
    }

    #[test]
    fn every_command_carries_the_private_lists() {
        let apt = Apt::new(Path::new("/c"));
        let cmd = apt.command("apt-cache", &["policy", "x"]).unwrap();
        let args: Vec<String> = cmd
            .get_args()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        assert!(args.contains(&"Dir::State::Lists=/c/apt/lists".to_string()));
        assert!(args.contains(&"Dir::Cache=/c/apt/cache".to_string()));
        assert!(args.ends_with(&strings(&["policy", "x"])));
        assert!(apt.command("apt-get", &["install", "x"]).is_err());
    }

    /// The closure of qemu-system-x86 and busybox-static on a Debian 12
    /// host with qemu-utils 10 from backports: apt would remove
    /// qemu-utils to install, which is irrelevant to a download.
    #[test]
    fn installs_from_a_simulation() {
        let sim = "Reading package lists...\n\
                   Remv qemu-utils [1:10.0.2+ds-2+deb13u1~bpo12+1]\n\
                   Inst busybox-static (1:1.35.0-4+deb12u1+b1 Debian:12.15/oldstable [amd64])\n\
                   Inst libfdt1 [1.6.0-1] (1.6.1-4+b1 Debian:12.15/oldstable [amd64])\n\
                   Inst qemu-system-x86 (1:7.2+dfsg-7+deb12u18+b3 Debian:12.15/oldstable [amd64])\n\
                   Conf busybox-static (1:1.35.0-4+deb12u1+b1 Debian:12.15/oldstable [amd64])\n";
        let pkgs = parse_installs(sim);
        let pairs: Vec<(&str, &str)> = pkgs
            .iter()
            .map(|p| (p.name.as_str(), p.version.as_str()))
            .collect();
        assert_eq!(
            pairs,
            [
                ("busybox-static", "1:1.35.0-4+deb12u1+b1"),
                ("libfdt1", "1.6.1-4+b1"),
                ("qemu-system-x86", "1:7.2+dfsg-7+deb12u18+b3"),
            ]
        );
        assert_eq!(pkgs[2].pinned(), "qemu-system-x86=1:7.2+dfsg-7+deb12u18+b3");
        assert_eq!(
            pkgs[2].file_prefix(),
            "qemu-system-x86_1%3a7.2+dfsg-7+deb12u18+b3_"
        );
    }

    #[test]
    fn an_unpacked_set_is_read_back_from_its_stamp() {
        let dir = std::env::temp_dir().join(format!("uverbs-vm-unpacked-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        assert!(read_unpacked(&dir, &["a"]).is_err(), "no stamp yet");
        fs::write(dir.join(UNPACKED_STAMP), "package a 1:2.0\npackage b 3\n").unwrap();
        let u = read_unpacked(&dir, &["a", "b"]).unwrap();
        assert_eq!(u.root, dir.join("root"));
        assert_eq!(
            u.packages,
            [
                Pkg {
                    name: "a".into(),
                    version: "1:2.0".into()
                },
                Pkg {
                    name: "b".into(),
                    version: "3".into()
                },
            ]
        );
        let e = read_unpacked(&dir, &["a", "c"]).unwrap_err();
        assert!(e.0.contains("does not list c"), "{e}");
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn depends_and_versions() {
        let depends = "linux-headers-6.1.0-57-amd64\n  \
                       Depends: linux-headers-6.1.0-57-common\n  \
                       Depends: linux-kbuild-6.1\n \
                       |Depends: gcc-12\n  \
                       Depends: <linux-compiler-gcc-12-x86>\n";
        assert_eq!(
            parse_depends(depends),
            [
                "linux-headers-6.1.0-57-common",
                "linux-kbuild-6.1",
                "gcc-12"
            ]
        );
        assert_eq!(
            parse_version("Package: x\nVersion: 6.1.192-3\nSize: 1\n").as_deref(),
            Some("6.1.192-3")
        );
        assert_eq!(parse_version("Package: x\n"), None);
    }
}
