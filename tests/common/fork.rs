//! Forked children with bounded waits, and fork advisors that record,
//! fail, panic or block on chosen `madvise` calls.

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, Sender, SyncSender};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use nix::sys::resource::{setrlimit, Resource};
use nix::sys::signal::{kill, Signal};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::{fork, ForkResult, Pid};
use uverbs::error::Errno;
use uverbs::fork::{Advice, Advisor, ForkMode, ForkSafety, PageSizing};

/// Forks. In the child, runs `$child` (an expression giving the exit code;
/// a panic exits with 99) and leaves with `_exit`, so values it moves stay
/// usable in the parent; the parent gets the child's exit code, waiting at
/// most `$limit` (then the child is killed and the test fails).
#[allow(unused_macros)]
macro_rules! in_child {
    ($limit:expr, $child:expr) => {
        // SAFETY: the child runs the expression and leaves with _exit; glibc
        // keeps malloc usable in a forked child, and the objects it touches
        // are its own copies.
        match unsafe { nix::unistd::fork() }.expect("fork") {
            nix::unistd::ForkResult::Child => {
                let code =
                    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| $child)).unwrap_or(99);
                // SAFETY: _exit never returns and runs no atexit handlers.
                unsafe { nix::libc::_exit(code) }
            }
            nix::unistd::ForkResult::Parent { child } => {
                $crate::common::fork::wait_exit_code(child, $limit)
            }
        }
    };
}

/// Waits for `child` for at most `limit`, polling; a child still running
/// then is killed and reaped, and the answer is `None`.
pub fn wait_within(child: Pid, limit: Duration) -> Option<WaitStatus> {
    let start = Instant::now();
    loop {
        match waitpid(child, Some(WaitPidFlag::WNOHANG)).expect("waitpid") {
            WaitStatus::StillAlive if start.elapsed() < limit => {
                std::thread::sleep(Duration::from_millis(10))
            }
            WaitStatus::StillAlive => {
                let _ = kill(child, Signal::SIGKILL);
                let _ = waitpid(child, None);
                return None;
            }
            status => return Some(status),
        }
    }
}

/// The exit code of `child`; fails the test if it runs longer than `limit`
/// (it is killed) or dies of a signal.
pub fn wait_exit_code(child: Pid, limit: Duration) -> i32 {
    match wait_within(child, limit) {
        None => panic!("the child did not exit within {limit:?} (deadlocked?)"),
        Some(WaitStatus::Exited(_, code)) => code,
        Some(other) => panic!("unexpected child status {other:?}"),
    }
}

/// What a forked child saw when reading one byte of the parent's memory.
#[derive(Debug, PartialEq, Eq)]
pub enum Seen {
    /// The page was inherited; the child read this value.
    Value(u8),
    /// The page was not inherited: the read faulted.
    Segfault,
}

/// How long [`child_reads`] waits for its child.
pub const READ_LIMIT: Duration = Duration::from_secs(10);

/// Forks a child that reads the byte at `addr` and exits with it.
///
/// The child runs in a copy of a multi-threaded test process, so it makes
/// only async-signal-safe calls: `prctl`/`setrlimit` (no core dump), one
/// volatile read, `_exit`. Nothing it does allocates, so this works even
/// with the process at `vm.max_map_count`.
pub fn child_reads(addr: *const u8) -> Seen {
    // SAFETY: the child only makes async-signal-safe calls (prctl,
    // setrlimit, a volatile load, _exit); no allocation, locking or
    // unwinding happens before it exits.
    match unsafe { fork() }.expect("fork") {
        ForkResult::Child => {
            let _ = nix::sys::prctl::set_dumpable(false);
            let _ = setrlimit(Resource::RLIMIT_CORE, 0, 0);
            // SAFETY: `addr` points into a live mapping of the parent. In the
            // child it is either an inherited copy (a valid read) or absent,
            // in which case the read faults and the kernel kills the child
            // with SIGSEGV, which is exactly what is being observed.
            let value = unsafe { std::ptr::read_volatile(addr) };
            // SAFETY: `_exit` is async-signal-safe and never returns.
            unsafe { nix::libc::_exit(i32::from(value)) }
        }
        ForkResult::Parent { child } => match wait_within(child, READ_LIMIT) {
            Some(WaitStatus::Exited(_, code)) => Seen::Value(code as u8),
            Some(WaitStatus::Signaled(_, Signal::SIGSEGV, _)) => Seen::Segfault,
            None => panic!("the reading child did not exit within {READ_LIMIT:?}"),
            Some(other) => panic!("unexpected child status {other:?}"),
        },
    }
}

/// The page size of [`fork_safety_with`]: fixed, so fake addresses round
/// the same on every machine.
pub const FAKE_PAGE: usize = 4096;

/// A fork safety of its own in `mode`, advised by `advisor`, rounding to
/// [`FAKE_PAGE`].
pub fn fork_safety_with(mode: ForkMode, advisor: impl Advisor + 'static) -> Arc<ForkSafety> {
    Arc::new(ForkSafety::with_page_sizing(
        mode,
        Box::new(advisor),
        PageSizing::Fixed(FAKE_PAGE),
    ))
}

/// One advisor call: (addr, len, advice).
pub type Call = (usize, usize, Advice);

/// What a [`RecordingAdvisor`] does to the calls it is told about.
#[derive(Clone, Copy, Debug)]
enum Fault {
    /// Every call with this advice whose range contains `addr` fails.
    Fail {
        addr: usize,
        advice: Advice,
        errno: i32,
    },
    /// The next call with this advice panics (once).
    PanicOnce(Advice),
}

#[derive(Default)]
struct Recorded {
    calls: Vec<Call>,
    fault: Option<Fault>,
}

/// A fork advisor that records every call (failed ones too) and, when told
/// to, fails or panics on chosen ones; it never calls `madvise`. Clones
/// share the record.
#[derive(Clone, Default)]
pub struct RecordingAdvisor(Arc<Mutex<Recorded>>);

impl RecordingAdvisor {
    fn state(&self) -> MutexGuard<'_, Recorded> {
        // A panic injected by `panic_once_on` never holds the lock, but a
        // failed assertion elsewhere may have: the record is still valid.
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// From now on, every `advice` call whose range contains `addr` fails
    /// with `errno`.
    pub fn fail_on(&self, addr: usize, advice: Advice, errno: i32) {
        self.state().fault = Some(Fault::Fail {
            addr,
            advice,
            errno,
        });
    }

    /// The next `advice` call panics, once.
    pub fn panic_once_on(&self, advice: Advice) {
        self.state().fault = Some(Fault::PanicOnce(advice));
    }

    /// No more failures.
    pub fn heal(&self) {
        self.state().fault = None;
    }

    /// Every call so far.
    pub fn calls(&self) -> Vec<Call> {
        self.state().calls.clone()
    }

    /// Forgets the calls so far.
    pub fn clear(&self) {
        self.state().calls.clear();
    }
}

impl Advisor for RecordingAdvisor {
    fn advise(&self, addr: usize, len: usize, advice: Advice) -> Result<(), Errno> {
        let mut state = self.state();
        state.calls.push((addr, len, advice));
        match state.fault {
            Some(Fault::Fail {
                addr: start,
                advice: kind,
                errno,
            }) if kind == advice && addr <= start && start < addr + len => {
                Err(Errno::from_raw_os_error(errno))
            }
            Some(Fault::PanicOnce(kind)) if kind == advice => {
                state.fault = None;
                drop(state); // never poison the record
                panic!("the advisor panics on {advice:?}, as injected");
            }
            _ => Ok(()),
        }
    }
}

/// A fork advisor that, once armed, blocks inside the first `DontFork`
/// (where the tracker's lock is held) until released or its limit passes.
/// Every other call returns at once without touching any lock, so a forked
/// child can use a copy of it.
pub struct BlockingAdvisor {
    armed: Arc<AtomicBool>,
    entered: SyncSender<()>,
    release: Mutex<Receiver<()>>,
    limit: Duration,
}

/// The test's side of a [`BlockingAdvisor`].
pub struct Blocker {
    armed: Arc<AtomicBool>,
    entered: Receiver<()>,
    release: Sender<()>,
    limit: Duration,
}

/// A disarmed [`BlockingAdvisor`] that blocks for at most `limit`, and its
/// [`Blocker`].
pub fn blocking_advisor(limit: Duration) -> (BlockingAdvisor, Blocker) {
    let armed = Arc::new(AtomicBool::new(false));
    let (entered_tx, entered) = mpsc::sync_channel(1);
    let (release, release_rx) = mpsc::channel();
    let advisor = BlockingAdvisor {
        armed: armed.clone(),
        entered: entered_tx,
        release: Mutex::new(release_rx),
        limit,
    };
    let blocker = Blocker {
        armed,
        entered,
        release,
        limit,
    };
    (advisor, blocker)
}

impl Advisor for BlockingAdvisor {
    fn advise(&self, _: usize, _: usize, advice: Advice) -> Result<(), Errno> {
        if advice == Advice::DontFork && self.armed.swap(false, Ordering::SeqCst) {
            let _ = self.entered.send(());
            let release = self.release.lock().unwrap_or_else(|p| p.into_inner());
            let _ = release.recv_timeout(self.limit);
        }
        Ok(())
    }
}

impl Blocker {
    /// The next `DontFork` blocks.
    pub fn arm(&self) {
        self.armed.store(true, Ordering::SeqCst);
    }

    /// Whether a thread entered the armed advisor within the limit.
    pub fn entered(&self) -> bool {
        self.entered.recv_timeout(self.limit).is_ok()
    }

    /// Lets the blocked thread go on.
    pub fn release(&self) {
        self.release
            .send(())
            .expect("the blocking advisor is still alive");
    }
}
