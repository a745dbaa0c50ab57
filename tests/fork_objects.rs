//! A forked child holds copies of its parent's contexts, PDs and MRs: it must
//! never send a command on them (over ioctl the kernel would let it destroy
//! the parent's objects), and dropping them there must touch neither the
//! kernel nor the fork tracker (whose lock a parent thread may have held at
//! fork time). On a recording fake kernel: the child checks its own copy of
//! the fake's log and reports through its exit code.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::{fork, ForkResult, Pid};
use uverbs::fork::{Advice, Advisor, ForkMode, ForkSafety, PageSizing};
use uverbs::transport::RecordingTransport;
use uverbs::{AccessFlags, Context, Errno, Error, OpenOptions, ReregOutcome};

const LIMIT: Duration = Duration::from_secs(10);

/// Forks. In the child, runs `$child` (an expression giving the exit code;
/// a panic exits with 99) and leaves with `_exit`, so values it moves stay
/// usable in the parent; the parent gets the child's exit code, waiting at
/// most [`LIMIT`] (then the child is killed and the test fails).
macro_rules! in_child {
    ($child:expr) => {
        // SAFETY: the child runs the expression and leaves with _exit; glibc
        // keeps malloc usable in a forked child, and the fakes it touches
        // are its own copies.
        match unsafe { fork() }.expect("fork") {
            ForkResult::Child => {
                let code =
                    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| $child)).unwrap_or(99);
                // SAFETY: _exit never returns and runs no atexit handlers.
                unsafe { nix::libc::_exit(code) }
            }
            ForkResult::Parent { child } => wait_bounded(child),
        }
    };
}

fn wait_bounded(child: Pid) -> i32 {
    let start = Instant::now();
    loop {
        match waitpid(child, Some(WaitPidFlag::WNOHANG)).expect("waitpid") {
            WaitStatus::StillAlive if start.elapsed() < LIMIT => {
                std::thread::sleep(Duration::from_millis(10))
            }
            WaitStatus::StillAlive => {
                let _ = kill(child, Signal::SIGKILL);
                let _ = waitpid(child, None);
                panic!("the child did not exit within {LIMIT:?} (deadlocked?)");
            }
            WaitStatus::Exited(_, code) => return code,
            other => panic!("unexpected child status {other:?}"),
        }
    }
}

/// A page-aligned mapping of its own, safe to mark `MADV_DONTFORK`.
fn page() -> memmap2::MmapMut {
    memmap2::MmapMut::map_anon(4096).expect("mmap")
}

fn fake_context(options: &OpenOptions) -> (Arc<RecordingTransport>, Context) {
    let fake = Arc::new(RecordingTransport::new());
    let ctx = Context::with_transport("fake0", None, Box::new(fake.clone()), options).unwrap();
    (fake, ctx)
}

fn is_foreign(e: &Error) -> bool {
    matches!(e, Error::ForeignProcess { .. }) && e.errno() == Some(Errno::ACCESS)
}

#[test]
fn a_child_sends_nothing_and_its_drops_leave_the_parents_objects() {
    let (fake, ctx) = fake_context(&OpenOptions::new());
    let pd = ctx.alloc_pd().unwrap();
    let pd2 = ctx.alloc_pd().unwrap();
    // Own pages: with fork safety forced on (UVERBS_FORK_SAFE=force), a
    // registered heap buffer's page would be missing in the child, with
    // whatever else malloc put on it.
    let mut buf = page();
    // SAFETY: `buf` outlives the MR.
    let mut mr =
        unsafe { pd.reg_mr(buf.as_mut_ptr(), buf.len(), AccessFlags::LOCAL_WRITE) }.unwrap();
    let sent = fake.count();

    let code = in_child!({
        assert!(!ctx.is_owned_by_this_process());
        let e = mr.set_pd(&pd2).unwrap_err();
        assert_eq!(
            (e.outcome(), e.errno()),
            (ReregOutcome::Input, Errno::ACCESS),
            "{e}"
        );
        assert!(is_foreign(&ctx.alloc_pd().unwrap_err()));
        assert!(is_foreign(&ctx.query_device().unwrap_err()));
        // SAFETY: never registered: the call is refused first.
        let reg = unsafe { pd.reg_mr(buf.as_mut_ptr(), buf.len(), AccessFlags::LOCAL_WRITE) };
        assert!(is_foreign(&reg.unwrap_err()));
        let err = mr.dereg().unwrap_err();
        assert!(is_foreign(&err.error), "{}", err.error);
        drop(err); // drops the MR copy again: still nothing
        let err = pd2.dealloc().unwrap_err();
        assert!(is_foreign(&err.error));
        drop(err);
        drop((pd, ctx));
        i32::from(fake.count() != sent)
    });
    assert_eq!(
        code, 0,
        "the child sent commands (or an assertion failed: 99)"
    );
    assert!(ctx.is_owned_by_this_process());
    mr.set_access(AccessFlags::LOCAL_WRITE).unwrap();
    mr.dereg().unwrap();
    assert_eq!((fake.live_mrs(), fake.live_pds()), (0, 2));
}

#[test]
fn a_child_that_unwinds_through_the_objects_sends_nothing() {
    let (fake, ctx) = fake_context(&OpenOptions::new());
    let pd = ctx.alloc_pd().unwrap();
    let mr = pd.reg_buffer(page(), AccessFlags::LOCAL_WRITE).unwrap();
    let sent = fake.count();
    let code = in_child!({
        let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _owned = (mr, pd);
            panic!("the child unwinds while owning copies of the parent's objects");
        }));
        assert!(unwound.is_err());
        i32::from(fake.count() != sent)
    });
    assert_eq!(code, 0);
    assert_eq!((fake.live_mrs(), fake.live_pds()), (1, 1));
}

/// A fork advisor that, once armed, blocks inside `DontFork` (holding the
/// tracker's lock) until released or [`LIMIT`] passes.
struct Blocking {
    armed: Arc<AtomicBool>,
    entered: mpsc::SyncSender<()>,
    release: std::sync::Mutex<mpsc::Receiver<()>>,
}

impl Advisor for Blocking {
    fn advise(&self, _: usize, _: usize, advice: Advice) -> std::io::Result<()> {
        if advice == Advice::DontFork && self.armed.swap(false, Ordering::SeqCst) {
            let _ = self.entered.send(());
            let _ = self.release.lock().unwrap().recv_timeout(LIMIT);
        }
        Ok(())
    }
}

#[test]
fn a_child_forked_while_a_thread_holds_the_tracker_lock_can_drop_its_copies() {
    let armed = Arc::new(AtomicBool::new(false));
    let (entered_tx, entered) = mpsc::sync_channel(1);
    let (release, release_rx) = mpsc::channel();
    let advisor = Blocking {
        armed: armed.clone(),
        entered: entered_tx,
        release: std::sync::Mutex::new(release_rx),
    };
    let fork_safety = Arc::new(ForkSafety::with_page_sizing(
        ForkMode::Enabled,
        Box::new(advisor),
        PageSizing::Fixed(4096),
    ));
    let (_fake, ctx) = fake_context(&OpenOptions::new().fork_safety(fork_safety));
    let pd = ctx.alloc_pd().unwrap();
    let mr = pd
        .reg_buffer(vec![0u8; 4096], AccessFlags::LOCAL_WRITE)
        .unwrap();

    armed.store(true, Ordering::SeqCst);
    let blocked = {
        let pd = ctx.alloc_pd().unwrap();
        std::thread::spawn(move || {
            pd.reg_buffer(vec![0u8; 4096], AccessFlags::LOCAL_WRITE)
                .is_ok()
        })
    };
    entered
        .recv_timeout(LIMIT)
        .expect("the registering thread reached the advisor");
    // That thread now holds the tracker's lock inside madvise.
    let code = in_child!({
        drop(mr);
        drop(pd);
        0
    });
    release.send(()).unwrap();
    assert!(blocked.join().unwrap());
    assert_eq!(code, 0);
}
