//! The cache directory that concurrent `cargo vm` runs share, and each
//! run's private work directory inside it.
//!
//! The cache (debs, the unpacked kernel, siw.ko, the modules, the stamp) is
//! written by the set-up and only read afterwards. The lock file
//! [`LOCK_FILE`] guards that: a run holds a shared lock on it for as long as
//! it uses the cache, the set-up holds it exclusively while it writes. A run
//! that starts during another's set-up therefore waits and then reuses the
//! result ([`read_or_set_up`]), and `cargo vm setup --force` waits until
//! running boots are done.
//!
//! Everything one boot writes (initramfs, stripped binaries, scripts, the
//! console log) goes to its own [`WorkDir`], `work-<pid>-<n>`, removed when
//! the run ends, also on errors. One left behind by a killed run is removed
//! by a later run once that process is gone.

use crate::util::{err, say, Context, Error, Result};
use std::fs::{self, File, OpenOptions, TryLockError};
use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

/// The lock file inside the cache.
pub const LOCK_FILE: &str = "cache.lock";

/// A held lock on the cache: shared (using it) or exclusive (setting it up).
/// Released when dropped.
#[derive(Debug)]
pub struct CacheLock {
    _file: File,
}

impl CacheLock {
    /// Takes the shared lock, waiting while a set-up holds it exclusively.
    pub fn shared(cache: &Path) -> Result<CacheLock> {
        Self::acquire(cache, false)
    }

    /// Takes the exclusive lock, waiting while other runs use the cache.
    pub fn exclusive(cache: &Path) -> Result<CacheLock> {
        Self::acquire(cache, true)
    }

    fn acquire(cache: &Path, exclusive: bool) -> Result<CacheLock> {
        let path = cache.join(LOCK_FILE);
        let step = format!("locking the cache ({})", path.display());
        fs::create_dir_all(cache).context(&step)?;
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .context(&step)?;
        let attempt = if exclusive {
            file.try_lock()
        } else {
            file.try_lock_shared()
        };
        match attempt {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                say(format!(
                    "waiting for {} (another cargo vm run is {})",
                    path.display(),
                    if exclusive {
                        "setting the cache up or booting from it"
                    } else {
                        "setting the cache up"
                    }
                ));
                let waited = if exclusive {
                    file.lock()
                } else {
                    file.lock_shared()
                };
                waited.context(&step)?;
            }
            Err(TryLockError::Error(e)) => return Err(err(&step, e)),
        }
        Ok(CacheLock { _file: file })
    }
}

/// Reads what the cache holds with `read`, running `set_up` first when it
/// cannot (or when `force`). Returns the value with a shared [`CacheLock`]
/// for the caller to hold while it uses the cache.
///
/// `set_up` runs under the exclusive lock, and only if `read` still fails
/// once that lock is held: of two runs starting together on an empty cache,
/// one sets up and the other waits, then reuses its result. `read`'s error
/// says why the cache is not usable yet.
pub fn read_or_set_up<T>(
    cache: &Path,
    force: bool,
    read: impl Fn() -> Result<T>,
    mut set_up: impl FnMut() -> Result<()>,
) -> Result<(T, CacheLock)> {
    let mut redo = force;
    // A second round only happens if another run's --force set-up failed
    // between our exclusive and shared locks; do not loop forever on that.
    for _ in 0..3 {
        if !redo {
            let lock = CacheLock::shared(cache)?;
            match read() {
                Ok(v) => return Ok((v, lock)),
                Err(why) => say(format!("setup: {why}; setting up")),
            }
        }
        let lock = CacheLock::exclusive(cache)?;
        if !redo && read().is_ok() {
            say("setup: another cargo vm run has just set the cache up; reusing it");
        } else {
            set_up()?;
        }
        redo = false;
        drop(lock);
    }
    Err(Error(format!(
        "setup: the cache {} was set up but is still not usable",
        cache.display()
    )))
}

/// Distinguishes the work directories of one process.
static NEXT_WORK_DIR: AtomicU32 = AtomicU32::new(0);

/// One boot's private directory in the cache, removed on drop unless kept
/// (`--keep`; kept ones are named `kept-<pid>-<n>` and never cleaned up).
#[derive(Debug)]
pub struct WorkDir {
    path: PathBuf,
    keep: bool,
}

impl WorkDir {
    /// Removes work directories of dead runs, then creates a fresh one.
    pub fn create(cache: &Path, keep: bool) -> Result<WorkDir> {
        let step = "creating the work directory";
        fs::create_dir_all(cache).context(step)?;
        remove_stale(cache);
        let prefix = if keep { "kept" } else { "work" };
        let pid = std::process::id();
        loop {
            let n = NEXT_WORK_DIR.fetch_add(1, Ordering::Relaxed);
            let path = cache.join(format!("{prefix}-{pid}-{n}"));
            // create_dir (not _all) fails if it exists: the name is ours alone.
            match fs::create_dir(&path) {
                Ok(()) => return Ok(WorkDir { path, keep }),
                Err(e) if e.kind() == ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(err(step, format!("{}: {e}", path.display()))),
            }
        }
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Copies `name` from this directory to `dest`, replacing it atomically
    /// (concurrent runs each leave a whole file; the last one wins).
    pub fn publish(&self, name: &str, dest: &Path) -> Result<()> {
        let step = format!("saving {}", dest.display());
        let file_name = self.path.file_name().unwrap_or_default().to_string_lossy();
        let tmp = dest.with_file_name(format!(".{name}.{file_name}.tmp"));
        fs::copy(self.path.join(name), &tmp).context(&step)?;
        fs::rename(&tmp, dest).context(&step)
    }
}

impl Drop for WorkDir {
    fn drop(&mut self) {
        if self.keep {
            say(format!(
                "keeping the work directory {}",
                self.path.display()
            ));
        } else if let Err(e) = fs::remove_dir_all(&self.path) {
            say(format!("could not remove {}: {e}", self.path.display()));
        }
    }
}

/// The pid in a work directory's name `work-<pid>-<n>`.
fn work_dir_pid(name: &str) -> Option<u32> {
    let (pid, n) = name.strip_prefix("work-")?.split_once('-')?;
    n.parse::<u32>().ok()?;
    pid.parse().ok()
}

/// Whether a process with this pid exists (in our pid namespace).
fn process_alive(pid: u32) -> bool {
    Path::new("/proc").join(pid.to_string()).exists()
}

/// Removes the work directories whose process is gone (a killed run's).
/// Does nothing without /proc, where every process would look dead.
fn remove_stale(cache: &Path) {
    if !Path::new("/proc/self").exists() {
        return;
    }
    let Ok(entries) = fs::read_dir(cache) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(pid) = work_dir_pid(&name.to_string_lossy()) else {
            continue;
        };
        if !process_alive(pid) {
            say(format!(
                "removing {} (left by a run that is gone)",
                e.path().display()
            ));
            let _ = fs::remove_dir_all(e.path());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;
    use std::sync::mpsc;
    use std::sync::{Arc, Barrier};
    use std::thread;
    use std::time::Duration;

    /// A fresh, empty directory for one test.
    fn temp_cache(test: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("uverbs-vm-{test}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        dir
    }

    /// A pid that belonged to a process that has exited.
    fn dead_pid() -> u32 {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        pid
    }

    /// The test "cache": a stamp file holding a value.
    fn read_stamp(cache: &Path) -> Result<String> {
        fs::read_to_string(cache.join("stamp")).map_err(|e| Error(format!("no stamp: {e}")))
    }

    /// A run (`force`: a forced set-up, `set_up` its set-up) in a thread
    /// of its own, waiting for a lock held here.
    struct Waiting {
        thread: thread::JoinHandle<()>,
        done: mpsc::Receiver<Result<String>>,
    }

    impl Waiting {
        /// Starts the run and checks that it waits (`what` says why it should).
        fn start(cache: &Path, force: bool, set_up: fn(&Path) -> Result<()>, what: &str) -> Self {
            let (done_tx, done) = mpsc::channel();
            let c = cache.to_path_buf();
            let thread = thread::spawn(move || {
                let r = read_or_set_up(&c, force, || read_stamp(&c), || set_up(&c));
                done_tx.send(r.map(|(v, _)| v)).unwrap();
            });
            assert!(
                done.recv_timeout(Duration::from_millis(300)).is_err(),
                "{what}"
            );
            Waiting { thread, done }
        }

        /// The stamp the run read once the lock here was released.
        fn stamp(self) -> String {
            let got = self.done.recv_timeout(Duration::from_secs(10)).unwrap();
            self.thread.join().unwrap();
            got.unwrap()
        }
    }

    #[test]
    fn concurrent_work_dirs_are_distinct_and_removed() {
        let cache = temp_cache("workdirs");
        let start = Arc::new(Barrier::new(2));
        let threads: Vec<_> = (0..2)
            .map(|_| {
                let (cache, start) = (cache.clone(), start.clone());
                thread::spawn(move || {
                    start.wait();
                    (0..20)
                        .map(|_| WorkDir::create(&cache, false).unwrap())
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        let dirs: Vec<WorkDir> = threads
            .into_iter()
            .flat_map(|t| t.join().unwrap())
            .collect();
        let mut paths: Vec<&Path> = dirs.iter().map(WorkDir::path).collect();
        paths.sort();
        paths.dedup();
        assert_eq!(paths.len(), 40);
        assert!(paths.iter().all(|p| p.is_dir() && p.starts_with(&cache)));
        let kept: Vec<PathBuf> = paths.iter().map(|p| p.to_path_buf()).collect();
        drop(dirs);
        assert!(kept.iter().all(|p| !p.exists()));
        fs::remove_dir_all(&cache).unwrap();
    }

    #[test]
    fn work_dir_is_removed_when_the_run_fails() {
        let cache = temp_cache("workdir-fail");
        let mut seen = PathBuf::new();
        let mut failing_run = || -> Result<()> {
            let work = WorkDir::create(&cache, false)?;
            seen = work.path().to_path_buf();
            fs::write(work.path().join("initramfs"), b"x").context("writing")?;
            Err(Error("qemu failed".into()))
        };
        assert!(failing_run().is_err());
        assert!(seen.starts_with(&cache) && !seen.exists());
        fs::remove_dir_all(&cache).unwrap();
    }

    #[test]
    fn stale_work_dirs_of_dead_runs_are_removed() {
        let cache = temp_cache("stale");
        let dead = cache.join(format!("work-{}-0", dead_pid()));
        let live = cache.join(format!("work-{}-999999", std::process::id()));
        let kept = cache.join(format!("kept-{}-0", dead_pid()));
        for d in [&dead, &live, &kept] {
            fs::create_dir_all(d.join("bin")).unwrap();
        }
        let work = WorkDir::create(&cache, false).unwrap();
        assert!(!dead.exists(), "a dead run's work directory stayed");
        assert!(live.exists(), "a live run's work directory was removed");
        assert!(kept.exists(), "a --keep directory was removed");
        drop(work);
        fs::remove_dir_all(&cache).unwrap();
    }

    #[test]
    fn kept_work_dir_survives() {
        let cache = temp_cache("kept");
        let work = WorkDir::create(&cache, true).unwrap();
        let path = work.path().to_path_buf();
        fs::write(path.join("console.log"), b"boot").unwrap();
        work.publish("console.log", &cache.join("console.log"))
            .unwrap();
        drop(work);
        assert!(path.join("console.log").is_file());
        assert_eq!(fs::read(cache.join("console.log")).unwrap(), b"boot");
        assert_eq!(fs::read_dir(&cache).unwrap().count(), 2); // no temp file left
        fs::remove_dir_all(&cache).unwrap();
    }

    #[test]
    fn names_of_work_dirs() {
        assert_eq!(work_dir_pid("work-123-4"), Some(123));
        assert_eq!(work_dir_pid("work-123"), None);
        assert_eq!(work_dir_pid("work"), None);
        assert_eq!(work_dir_pid("kept-123-4"), None);
        assert_eq!(work_dir_pid("work-x-4"), None);
    }

    /// Two runs start on an empty cache at once: one sets up, the other
    /// waits and reuses the result.
    #[test]
    fn concurrent_runs_set_up_once() {
        let cache = temp_cache("setup-once");
        let set_ups = Arc::new(AtomicUsize::new(0));
        let start = Arc::new(Barrier::new(2));
        let threads: Vec<_> = (0..2)
            .map(|_| {
                let (cache, set_ups, start) = (cache.clone(), set_ups.clone(), start.clone());
                thread::spawn(move || {
                    start.wait();
                    let (v, _lock) = read_or_set_up(
                        &cache,
                        false,
                        || read_stamp(&cache),
                        || {
                            set_ups.fetch_add(1, Ordering::SeqCst);
                            // A set-up takes a while; the other run arrives meanwhile.
                            thread::sleep(Duration::from_millis(300));
                            fs::write(cache.join("stamp"), "kernel").context("stamp")
                        },
                    )
                    .unwrap();
                    v
                })
            })
            .collect();
        for t in threads {
            assert_eq!(t.join().unwrap(), "kernel");
        }
        assert_eq!(set_ups.load(Ordering::SeqCst), 1);
        fs::remove_dir_all(&cache).unwrap();
    }

    /// While one run sets up (holds the exclusive lock), another blocks,
    /// then reuses the cache without setting up itself.
    #[test]
    fn run_waits_for_a_set_up_in_progress() {
        let cache = temp_cache("setup-wait");
        let setting_up = CacheLock::exclusive(&cache).unwrap();
        let waiter = Waiting::start(
            &cache,
            false,
            |_| Err(Error("the second run set up too".into())),
            "the second run did not wait for the set-up",
        );
        fs::write(cache.join("stamp"), "kernel").unwrap();
        drop(setting_up);
        assert_eq!(waiter.stamp(), "kernel");
        fs::remove_dir_all(&cache).unwrap();
    }

    /// A forced set-up waits for a run still using the cache.
    #[test]
    fn forced_set_up_waits_for_running_boots() {
        let cache = temp_cache("setup-force");
        fs::write(cache.join("stamp"), "old").unwrap();
        let (v, in_use) = read_or_set_up(
            &cache,
            false,
            || read_stamp(&cache),
            || Err(Error("must not set up".into())),
        )
        .unwrap();
        assert_eq!(v, "old");
        let forcing = Waiting::start(
            &cache,
            true,
            |c| fs::write(c.join("stamp"), "new").context("stamp"),
            "--force rewrote the cache while a run used it",
        );
        assert_eq!(read_stamp(&cache).unwrap(), "old");
        drop(in_use);
        assert_eq!(forcing.stamp(), "new");
        fs::remove_dir_all(&cache).unwrap();
    }
}
