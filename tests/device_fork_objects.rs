//! A forked child must not destroy its parent's kernel objects, on real
//! devices and over both transports. Before the fix, a child's
//! `drop(mr); _exit(0)` made the parent's `dereg()` answer `ENOENT` over
//! ioctl (over `write()` the kernel refuses the child with `EACCES`).

mod common;

use std::time::{Duration, Instant};

use common::{alloc_pd, anon, devices_under_test, open, HandleCounts};
use nix::sys::signal::{kill, Signal};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::{fork, ForkResult, Pid};
use uverbs::{AccessFlags, Error};

const LIMIT: Duration = Duration::from_secs(30);

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
                panic!("the child did not exit within {LIMIT:?}");
            }
            WaitStatus::Exited(_, code) => return code,
            other => panic!("unexpected child status {other:?}"),
        }
    }
}

/// Forks; the child evaluates `$child` (its exit code; a panic gives 99)
/// and `_exit`s, so what it moves stays usable in the parent.
macro_rules! in_child {
    ($child:expr) => {
        // SAFETY: the child runs the expression and leaves with _exit;
        // glibc keeps malloc usable in a forked child.
        match unsafe { fork() }.expect("fork") {
            ForkResult::Child => {
                let code =
                    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| $child)).unwrap_or(99);
                // SAFETY: _exit never returns.
                unsafe { nix::libc::_exit(code) }
            }
            ForkResult::Parent { child } => wait_bounded(child),
        }
    };
}

#[test]
fn a_child_dropping_copies_leaves_the_parents_mr_and_pd() {
    for dev in devices_under_test("a_child_dropping_copies_leaves_the_parents_mr_and_pd") {
        let name = dev.name();
        let ctx = open(&dev);
        let counts = HandleCounts::new(&ctx, "fork: child drops");
        let pd = alloc_pd(&ctx);
        let spare = alloc_pd(&ctx);
        let mut buf = anon(1 << 20);
        // SAFETY: `buf` outlives the MR.
        let mr = unsafe { pd.reg_mr(buf.as_mut_ptr(), buf.len(), AccessFlags::LOCAL_WRITE) }
            .unwrap_or_else(|e| panic!("{name}: reg_mr: {e}"));
        let code = in_child!({
            let foreign = |e: &Error| matches!(e, Error::ForeignProcess { .. });
            let err = spare.dealloc().unwrap_err();
            assert!(foreign(&err.error), "{}", err.error);
            drop(err);
            drop(mr);
            drop(pd);
            0
        });
        assert_eq!(code, 0, "{name}: the child's checks failed");
        counts.assert_extra(1, 2, "after the child exited");
        mr.dereg()
            .unwrap_or_else(|e| panic!("{name}: the parent's dereg after the child's drop: {e}"));
        spare
            .dealloc()
            .unwrap_or_else(|e| panic!("{name}: the parent's dealloc: {}", e.error));
        pd.dealloc()
            .unwrap_or_else(|e| panic!("{name}: the parent's dealloc: {}", e.error));
        drop(counts);
    }
}

#[test]
fn a_child_that_unwinds_leaves_the_parents_buffer_mr() {
    for dev in devices_under_test("a_child_that_unwinds_leaves_the_parents_buffer_mr") {
        let name = dev.name();
        let ctx = open(&dev);
        let counts = HandleCounts::new(&ctx, "fork: child unwinds");
        let pd = alloc_pd(&ctx);
        let mut mr = pd
            .reg_buffer(anon(1 << 16), AccessFlags::LOCAL_WRITE)
            .unwrap_or_else(|e| panic!("{name}: reg_buffer: {}", e.error));
        mr.buffer_mut()[0] = 0x5a;
        let code = in_child!({
            let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                let _copies = (mr, pd);
                panic!("the child unwinds through copies of the parent's objects");
            }));
            i32::from(unwound.is_ok())
        });
        assert_eq!(code, 0, "{name}: the child did not unwind as planned");
        counts.assert_extra(1, 1, "after the child exited");
        let buf = mr
            .dereg()
            .unwrap_or_else(|e| panic!("{name}: the parent's dereg after the child: {e}"));
        assert_eq!(buf[0], 0x5a);
        pd.dealloc()
            .unwrap_or_else(|e| panic!("{name}: the parent's dealloc: {}", e.error));
        drop(counts);
    }
}
