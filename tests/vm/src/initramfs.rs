//! The guest's root file system: a gzip-compressed cpio archive in the
//! "newc" format, written here directly (no `cpio` tool needed).
//!
//! Contents: busybox (static), the kernel modules, the `rdma` tool and
//! `strace` with the shared libraries `ldd` names, the binaries to run,
//! `/init` and `/run-all`.

use crate::binaries::Binary;
use crate::guest::{GUEST_BIN_DIR, GUEST_MODULE_DIR};
use crate::setup::Module;
use crate::util::{err, have_program, run_captured, say, which, Context, Result};
use std::collections::BTreeSet;
use std::fs;
use std::io::{BufWriter, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

const S_IFDIR: u32 = 0o040000;
const S_IFREG: u32 = 0o100000;
const S_IFLNK: u32 = 0o120000;
const S_IFCHR: u32 = 0o020000;

/// A writer of newc cpio archives. Parent directories are added
/// automatically before the entries that need them.
pub struct Cpio<W: Write> {
    out: W,
    ino: u32,
    dirs: BTreeSet<String>,
}

impl<W: Write> Cpio<W> {
    /// Starts an archive on `out`.
    pub fn new(out: W) -> Self {
        Cpio {
            out,
            ino: 1,
            dirs: BTreeSet::new(),
        }
    }

    fn pad(&mut self, len: usize) -> std::io::Result<()> {
        let n = (4 - len % 4) % 4;
        self.out.write_all(&[0u8; 3][..n])
    }

    fn entry(
        &mut self,
        name: &str,
        mode: u32,
        rdev: (u32, u32),
        data: &[u8],
    ) -> std::io::Result<()> {
        let ino = self.ino;
        self.ino += 1;
        let nlink = if mode & 0o170000 == S_IFDIR { 2 } else { 1 };
        let header = format!(
            "070701{ino:08x}{mode:08x}{:08x}{:08x}{nlink:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}",
            0, // uid
            0, // gid
            0, // mtime: fixed, for reproducible archives
            data.len(),
            0, // devmajor
            0, // devminor
            rdev.0,
            rdev.1,
            name.len() + 1,
            0, // check
        );
        self.out.write_all(header.as_bytes())?;
        self.out.write_all(name.as_bytes())?;
        self.out.write_all(&[0])?;
        self.pad(header.len() + name.len() + 1)?;
        self.out.write_all(data)?;
        self.pad(data.len())
    }

    /// Adds the parent directories of `path` that are not there yet.
    fn parents(&mut self, path: &str) -> std::io::Result<()> {
        let mut prefix = String::new();
        let parts: Vec<&str> = path.split('/').collect();
        for part in &parts[..parts.len() - 1] {
            if !prefix.is_empty() {
                prefix.push('/');
            }
            prefix.push_str(part);
            if self.dirs.insert(prefix.clone()) {
                let p = prefix.clone();
                self.entry(&p, S_IFDIR | 0o755, (0, 0), &[])?;
            }
        }
        Ok(())
    }

    /// Adds a directory (path relative to the root, e.g. `dev`).
    pub fn dir(&mut self, path: &str) -> std::io::Result<()> {
        self.parents(path)?;
        if self.dirs.insert(path.to_string()) {
            self.entry(path, S_IFDIR | 0o755, (0, 0), &[])?;
        }
        Ok(())
    }

    /// Adds a regular file with permission bits `perm`.
    pub fn file(&mut self, path: &str, perm: u32, data: &[u8]) -> std::io::Result<()> {
        self.parents(path)?;
        self.entry(path, S_IFREG | (perm & 0o7777), (0, 0), data)
    }

    /// Adds a symbolic link pointing at `target`.
    pub fn symlink(&mut self, path: &str, target: &str) -> std::io::Result<()> {
        self.parents(path)?;
        self.entry(path, S_IFLNK | 0o777, (0, 0), target.as_bytes())
    }

    /// Adds a character device node.
    pub fn char_device(
        &mut self,
        path: &str,
        perm: u32,
        major: u32,
        minor: u32,
    ) -> std::io::Result<()> {
        self.parents(path)?;
        self.entry(path, S_IFCHR | (perm & 0o7777), (major, minor), &[])
    }

    /// Writes the trailer and returns the underlying writer.
    pub fn finish(mut self) -> std::io::Result<W> {
        self.entry("TRAILER!!!", 0, (0, 0), &[])?;
        Ok(self.out)
    }
}

/// Everything that goes into one initramfs.
pub struct Contents<'a> {
    /// Kernel modules, in the guest at `/lib/modules/<name>.ko`.
    pub modules: &'a [Module],
    /// Binaries, in the guest at `/tests/<name>`.
    pub binaries: &'a [Binary],
    /// The /init script.
    pub init: String,
    /// The /run-all script.
    pub run_all: String,
    /// The static busybox the guest runs (the harness's own, see
    /// [`crate::tools`]).
    pub busybox: &'a Path,
    /// Host files copied to the same path in the guest (e.g. perftest and
    /// libibverbs' providers for `cargo vm bench`).
    pub host_files: &'a [HostFile],
}

/// A host file the guest gets at the same absolute path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostFile {
    /// The path in the guest (and on the host, under `root`).
    pub path: PathBuf,
    /// Where packages holding the file were unpacked (`dpkg -x`), or `None`
    /// for the host's own file system. Its libraries are looked for there
    /// first, and those found there go into the guest at their paths below
    /// it.
    pub root: Option<PathBuf>,
    /// Also copy the shared libraries `ldd` names for it (programs and
    /// shared objects; not for data files).
    pub with_libraries: bool,
}

impl HostFile {
    /// Where the file is on the host.
    pub fn source(&self) -> PathBuf {
        match &self.root {
            Some(root) => root.join(self.path.strip_prefix("/").unwrap_or(&self.path)),
            None => self.path.clone(),
        }
    }
}

/// Where a host file goes in the guest (relative to its root): a file of
/// packages unpacked at `root` where it is below that root, any other where
/// it is on the host.
fn guest_path(host: &Path, root: Option<&Path>) -> String {
    let in_guest = root.and_then(|r| host.strip_prefix(r).ok()).unwrap_or(host);
    in_guest
        .to_string_lossy()
        .trim_start_matches('/')
        .to_string()
}

/// The shared libraries (and the loader) a dynamic executable needs, as
/// `ldd` reports them, those of packages unpacked at `root` first.
fn shared_libraries(exe: &Path, root: Option<&Path>) -> Result<Vec<PathBuf>> {
    let mut ldd = Command::new("ldd");
    if let Some(root) = root {
        ldd.env("LD_LIBRARY_PATH", crate::tools::library_path(root));
    }
    let out = run_captured(
        "initramfs: listing a host program's libraries",
        ldd.arg(exe),
    )?;
    Ok(out
        .lines()
        .filter_map(|l| {
            let l = l.trim();
            let path = match l.split_once("=>") {
                Some((_, rest)) => rest.trim(),
                None => l,
            };
            let path = path.split(" (").next()?.trim();
            path.starts_with('/').then(|| PathBuf::from(path))
        })
        .collect())
}

/// Copies a test binary without its debug info (symbols stay, so
/// backtraces still name functions): a much smaller initramfs boots faster.
fn stripped(bin: &Binary, scratch: &Path) -> Result<Vec<u8>> {
    if have_program("strip") {
        let out = scratch.join(&bin.name);
        let status = Command::new("strip")
            .arg("--strip-debug")
            .arg("-o")
            .arg(&out)
            .arg(&bin.path)
            .stderr(Stdio::null())
            .status();
        if matches!(status, Ok(s) if s.success()) {
            return fs::read(&out).context("initramfs: reading a stripped binary");
        }
    }
    fs::read(&bin.path).map_err(|e| {
        err(
            "initramfs: reading a binary",
            format!("{}: {e}", bin.path.display()),
        )
    })
}

/// Adds a host file at the same absolute path in the guest.
fn add_host_file<W: Write>(cpio: &mut Cpio<W>, host: &Path, guest: &str) -> Result<()> {
    let step = format!("initramfs: adding {}", host.display());
    let data = fs::read(host).context(&step)?;
    let perm = fs::metadata(host).context(&step)?.permissions().mode();
    cpio.file(guest, perm, &data).context(&step)
}

/// Writes the gzip-compressed initramfs to `out` (via `gzip -1`). `scratch`
/// is a work directory for stripped binaries. Returns the file's size.
pub fn build(out: &Path, scratch: &Path, c: &Contents) -> Result<u64> {
    let step = "initramfs: building";
    say(format!("initramfs: writing {}", out.display()));
    fs::create_dir_all(scratch).context(step)?;
    let busybox = c.busybox;
    let rdma =
        which("rdma").ok_or_else(|| err(step, "the `rdma` tool is missing (package iproute2)"))?;
    // `cargo vm demo` counts the data path's system calls with it.
    let strace = which("strace").ok_or_else(|| err(step, "strace is missing (package strace)"))?;

    let file = fs::File::create(out).context(step)?;
    let mut gzip = Command::new("gzip")
        .args(["-1", "-n", "-c"])
        .stdin(Stdio::piped())
        .stdout(file)
        .spawn()
        .map_err(|e| err(step, format!("cannot run gzip: {e}")))?;
    let stdin = gzip.stdin.take().expect("piped stdin");
    let mut cpio = Cpio::new(BufWriter::with_capacity(1 << 20, stdin));
    let io = |e: std::io::Error| err(step, e);

    for d in [
        "dev", "proc", "sys", "tmp", "run", "bin", "sbin", "usr/bin", "usr/sbin",
    ] {
        cpio.dir(d).map_err(io)?;
    }
    // The kernel opens /dev/console for init before devtmpfs is mounted.
    cpio.char_device("dev/console", 0o600, 5, 1).map_err(io)?;
    cpio.char_device("dev/null", 0o666, 1, 3).map_err(io)?;
    add_host_file(&mut cpio, busybox, "bin/busybox")?;
    cpio.symlink("bin/sh", "busybox").map_err(io)?;
    // Dynamic host programs, each with the libraries ldd names (once each).
    let mut libs_added = BTreeSet::new();
    let mut programs = vec![
        (rdma, "sbin/rdma".to_string(), None),
        (strace, "usr/bin/strace".into(), None),
    ];
    let mut data_files = Vec::new();
    for f in c.host_files {
        let guest = f.path.to_string_lossy().trim_start_matches('/').to_string();
        if f.with_libraries {
            programs.push((f.source(), guest, f.root.clone()));
        } else {
            data_files.push((f.source(), guest));
        }
    }
    for (program, guest, root) in &programs {
        add_host_file(&mut cpio, program, guest)?;
        for lib in shared_libraries(program, root.as_deref())? {
            let guest = guest_path(&lib, root.as_deref());
            if libs_added.insert(guest.clone()) {
                add_host_file(&mut cpio, &lib, &guest)?;
            }
        }
    }
    for (file, guest) in &data_files {
        add_host_file(&mut cpio, file, guest)?;
    }
    for m in c.modules {
        add_host_file(
            &mut cpio,
            &m.path,
            &format!("{GUEST_MODULE_DIR}/{}.ko", m.name),
        )?;
    }
    for b in c.binaries {
        let data = stripped(b, scratch)?;
        cpio.file(&format!("{GUEST_BIN_DIR}/{}", b.name), 0o755, &data)
            .map_err(io)?;
    }
    cpio.file("init", 0o755, c.init.as_bytes()).map_err(io)?;
    cpio.file("run-all", 0o755, c.run_all.as_bytes())
        .map_err(io)?;

    let mut w = cpio.finish().map_err(io)?;
    w.flush().map_err(io)?;
    drop(w);
    let status = gzip.wait().context(step)?;
    if !status.success() {
        return Err(err(step, format!("gzip failed ({status})")));
    }
    let size = fs::metadata(out).context(step)?.len();
    say(format!("initramfs: {:.1} MB", size as f64 / 1e6));
    Ok(size)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn newc_layout() {
        let mut c = Cpio::new(Vec::new());
        c.file("a/b", 0o644, b"hello").unwrap();
        let out = c.finish().unwrap();
        // Entries: dir "a", file "a/b", trailer; every header 4-aligned.
        assert!(out.starts_with(b"070701"));
        assert_eq!(out.len() % 4, 0);
        let text = String::from_utf8_lossy(&out);
        assert_eq!(text.matches("070701").count(), 3);
        let at = text.find("a/b\0").unwrap();
        assert_eq!(at % 4, 2); // entries start 4-aligned; the header is 110 bytes
        let data_at = text.find("hello").unwrap();
        assert_eq!(data_at % 4, 0);
        // File header: mode 0100644, size 5, name size 4.
        let h = &text[at - 110..at];
        assert_eq!(&h[14..22], "000081a4");
        assert_eq!(&h[54..62], "00000005");
        assert_eq!(&h[94..102], "00000004");
        assert!(text.contains("TRAILER!!!\0"));
    }

    #[test]
    fn device_numbers() {
        let mut c = Cpio::new(Vec::new());
        c.char_device("dev/console", 0o600, 5, 1).unwrap();
        let out = String::from_utf8(c.finish().unwrap()).unwrap();
        let at = out.find("dev/console").unwrap();
        let h = &out[at - 110..at];
        assert_eq!(&h[14..22], "00002180");
        assert_eq!(&h[78..86], "00000005");
        assert_eq!(&h[86..94], "00000001");
    }

    #[test]
    fn unpacked_files_go_where_they_would_be_installed() {
        let root = Path::new("/c/bench-peer/root");
        let lib = Path::new("/c/bench-peer/root/usr/lib/x86_64-linux-gnu/libibverbs.so.1");
        assert_eq!(
            guest_path(lib, Some(root)),
            "usr/lib/x86_64-linux-gnu/libibverbs.so.1"
        );
        // A library the host provides stays where it is.
        let libc = Path::new("/lib/x86_64-linux-gnu/libc.so.6");
        assert_eq!(
            guest_path(libc, Some(root)),
            "lib/x86_64-linux-gnu/libc.so.6"
        );
        assert_eq!(guest_path(libc, None), "lib/x86_64-linux-gnu/libc.so.6");
        let f = HostFile {
            path: "/usr/bin/ib_write_lat".into(),
            root: Some(root.into()),
            with_libraries: true,
        };
        assert_eq!(f.source(), root.join("usr/bin/ib_write_lat"));
        let host = HostFile { root: None, ..f };
        assert_eq!(host.source(), Path::new("/usr/bin/ib_write_lat"));
    }

    #[test]
    fn ldd_parsing_is_used_on_real_files() {
        // ldd of a static binary fails; of /bin/sh it names libc (if present).
        if Path::new("/bin/sh").exists() && have_program("ldd") {
            if let Ok(libs) = shared_libraries(Path::new("/bin/sh"), None) {
                assert!(libs.iter().all(|p| p.is_absolute()));
            }
        }
    }
}
