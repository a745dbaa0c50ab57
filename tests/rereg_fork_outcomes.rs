//! Fault injection for the fork-safety outcomes of `ibv_rereg_mr(3)`: a
//! replaceable advisor fails chosen madvise calls while a recording fake
//! kernel answers the commands. After each outcome the MR's state, its
//! addr/length and the set of advised ranges are what the man page promises.

use std::io;
use std::sync::{Arc, Mutex};

use uverbs::fork::{Advice, Advisor, ForkMode, ForkSafety, PageSizing};
use uverbs::transport::RecordingTransport;
use uverbs::uverbs_uapi as sys;
use uverbs::{
    AccessFlags, Context, Errno, MemoryRegion, MrState, OpenOptions, ProtectionDomain,
    ReregFallback, ReregFlags, ReregOutcome, ReregPath,
};

const PAGE: usize = 4096;
const OLD: usize = 0x1000_0000;
const NEW: usize = 0x2000_0000;
const RW: AccessFlags = AccessFlags::LOCAL_WRITE.union(AccessFlags::REMOTE_WRITE);

/// Records every advice and fails the one that matches `fail`.
#[derive(Clone, Default)]
struct FaultyAdvisor {
    calls: Arc<Mutex<Vec<(usize, usize, Advice)>>>,
    fail: Arc<Mutex<Option<(usize, Advice, i32)>>>,
}

impl Advisor for FaultyAdvisor {
    fn advise(&self, addr: usize, len: usize, advice: Advice) -> io::Result<()> {
        self.calls.lock().unwrap().push((addr, len, advice));
        match *self.fail.lock().unwrap() {
            Some((start, kind, errno)) if kind == advice && addr <= start && start < addr + len => {
                Err(io::Error::from_raw_os_error(errno))
            }
            _ => Ok(()),
        }
    }
}

impl FaultyAdvisor {
    fn fail_on(&self, addr: usize, advice: Advice, errno: i32) {
        *self.fail.lock().unwrap() = Some((addr, advice, errno));
    }
    fn calls(&self) -> Vec<(usize, usize, Advice)> {
        self.calls.lock().unwrap().clone()
    }
    fn clear(&self) {
        self.calls.lock().unwrap().clear();
    }
}

struct Fixture {
    fake: Arc<RecordingTransport>,
    fork: Arc<ForkSafety>,
    advisor: FaultyAdvisor,
    pd: ProtectionDomain,
    pd2: ProtectionDomain,
    _ctx: Context,
}

fn fixture() -> Fixture {
    let advisor = FaultyAdvisor::default();
    let fork = Arc::new(ForkSafety::with_page_sizing(
        ForkMode::Enabled,
        Box::new(advisor.clone()),
        PageSizing::Fixed(PAGE),
    ));
    let fake = Arc::new(RecordingTransport::new());
    let options = OpenOptions::new().fork_safety(fork.clone());
    let ctx = Context::with_transport("fake0", None, Box::new(fake.clone()), &options).unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let pd2 = ctx.alloc_pd().unwrap();
    Fixture {
        fake,
        fork,
        advisor,
        pd,
        pd2,
        _ctx: ctx,
    }
}

impl Fixture {
    fn reg(&self, len: usize) -> MemoryRegion {
        // SAFETY: the fake kernel and the fake advisor never touch memory.
        unsafe { self.pd.reg_mr(OLD as *mut u8, len, RW) }.unwrap()
    }
}

fn ranges(f: &Fixture) -> Vec<(usize, usize, u32)> {
    f.fork.marked_ranges()
}

#[test]
fn dont_fork_new_sends_nothing_and_keeps_the_old_mr() {
    let f = fixture();
    let mut mr = f.reg(PAGE);
    let sent = f.fake.count();
    f.advisor.fail_on(NEW, Advice::DontFork, libc_enomem());
    // SAFETY: fake memory, see `reg`.
    let err = unsafe { mr.set_range(NEW as *mut u8, 2 * PAGE) }.unwrap_err();
    assert_eq!(err.outcome(), ReregOutcome::DontForkNew);
    assert_eq!(err.code(), -2);
    assert_eq!(err.errno(), Errno::NOMEM);
    assert_eq!(err.mr_state(), MrState::Old);
    assert_eq!(f.fake.count(), sent, "no command after a failed DONTFORK");
    assert_eq!((mr.addr() as usize, mr.length()), (OLD, PAGE));
    assert_eq!(
        ranges(&f),
        [(OLD, OLD + PAGE, 1)],
        "only the old range stays marked"
    );
    drop(mr);
    assert_eq!(ranges(&f), []);
}

#[test]
fn do_fork_old_leaves_the_new_mr_valid() {
    let f = fixture();
    let mut mr = f.reg(PAGE);
    f.advisor
        .fail_on(OLD, Advice::DoFork, Errno::FAULT.raw_os_error());
    // SAFETY: fake memory.
    let err = unsafe { mr.set_range(NEW as *mut u8, 2 * PAGE) }.unwrap_err();
    assert_eq!(err.outcome(), ReregOutcome::DoForkOld);
    assert_eq!(err.code(), -3);
    assert_eq!(err.mr_state(), MrState::New);
    assert_eq!(
        (mr.addr() as usize, mr.length()),
        (NEW, 2 * PAGE),
        "the MR has its new translation"
    );
    assert_eq!(f.fake.count_of(sys::IB_USER_VERBS_CMD_REREG_MR), 1);
    // The old range's DOFORK failed, but its reference is released: the
    // tracker never counts what it cannot vouch for (docs/fork-safety.md).
    assert_eq!(ranges(&f), [(NEW, NEW + 2 * PAGE, 1)]);
    *f.advisor.fail.lock().unwrap() = None;
    drop(mr);
    assert_eq!(ranges(&f), [], "dropping releases the new range");
}

#[test]
fn cmd_and_do_fork_new_reports_both_errnos() {
    let f = fixture();
    let mut mr = f.reg(PAGE);
    f.fake
        .fail_next(sys::IB_USER_VERBS_CMD_REREG_MR, Errno::OPNOTSUPP);
    f.advisor
        .fail_on(NEW, Advice::DoFork, Errno::FAULT.raw_os_error());
    // SAFETY: fake memory.
    let err = unsafe { mr.set_range(NEW as *mut u8, PAGE) }.unwrap_err();
    assert_eq!(err.outcome(), ReregOutcome::CmdAndDoForkNew);
    assert_eq!(err.code(), -5);
    assert_eq!(err.errno(), Errno::OPNOTSUPP, "the command's errno");
    assert_eq!(err.fork_errno(), Some(Errno::FAULT), "madvise's errno");
    assert_eq!(err.mr_state(), MrState::Undefined);
    assert_eq!((mr.addr() as usize, mr.length()), (OLD, PAGE));
    // The failed DOFORK still released the new range's reference.
    assert_eq!(ranges(&f), [(OLD, OLD + PAGE, 1)]);
    drop(mr);
    assert_eq!(f.fake.live_mrs(), 0, "the MR still deregisters");
}

#[test]
fn cmd_rolls_the_new_range_back() {
    let f = fixture();
    let mut mr = f.reg(PAGE);
    f.fake
        .fail_next(sys::IB_USER_VERBS_CMD_REREG_MR, Errno::OPNOTSUPP);
    // SAFETY: fake memory.
    let err = unsafe { mr.set_range(NEW as *mut u8, PAGE) }.unwrap_err();
    assert_eq!(err.outcome(), ReregOutcome::Cmd);
    assert_eq!(err.fork_errno(), None);
    assert_eq!(ranges(&f), [(OLD, OLD + PAGE, 1)]);
}

#[test]
fn madvise_calls_per_operation_when_enabled() {
    let f = fixture();
    let mut mr = f.reg(PAGE);
    assert_eq!(
        f.advisor.calls(),
        [(OLD, PAGE, Advice::DontFork)],
        "reg: one DONTFORK"
    );
    f.advisor.clear();
    mr.set_access(AccessFlags::LOCAL_WRITE).unwrap();
    mr.set_pd(&f.pd2).unwrap();
    assert_eq!(
        f.advisor.calls(),
        [],
        "rereg without TRANSLATION: no madvise"
    );
    // SAFETY: fake memory.
    unsafe { mr.set_range(NEW as *mut u8, PAGE) }.unwrap();
    assert_eq!(
        f.advisor.calls(),
        [(NEW, PAGE, Advice::DontFork), (OLD, PAGE, Advice::DoFork)],
        "rereg TRANSLATION: DONTFORK new before, DOFORK old after"
    );
    f.advisor.clear();
    drop(mr);
    assert_eq!(
        f.advisor.calls(),
        [(NEW, PAGE, Advice::DoFork)],
        "dereg: one DOFORK"
    );
}

#[test]
fn shared_pages_are_released_once() {
    let f = fixture();
    let a = f.reg(PAGE);
    let b = f.reg(PAGE);
    assert_eq!(
        f.advisor.calls(),
        [(OLD, PAGE, Advice::DontFork), (OLD, PAGE, Advice::DontFork)],
        "every registration applies DONTFORK (the page may have been remapped)"
    );
    assert_eq!(ranges(&f), [(OLD, OLD + PAGE, 2)]);
    drop(a);
    assert_eq!(
        f.advisor.calls().len(),
        2,
        "still protected for the other MR"
    );
    drop(b);
    assert_eq!(f.advisor.calls().last(), Some(&(OLD, PAGE, Advice::DoFork)));
}

#[test]
fn failed_registration_is_unmarked() {
    let f = fixture();
    f.fake
        .fail_next(sys::IB_USER_VERBS_CMD_REG_MR, Errno::NOMEM);
    // SAFETY: fake memory.
    let err = unsafe { f.pd.reg_mr(OLD as *mut u8, PAGE, RW) }.unwrap_err();
    assert_eq!(err.errno(), Some(Errno::NOMEM));
    assert_eq!(ranges(&f), []);

    f.advisor.fail_on(OLD, Advice::DontFork, libc_enomem());
    let sent = f.fake.count();
    // SAFETY: fake memory.
    let err = unsafe { f.pd.reg_mr(OLD as *mut u8, PAGE, RW) }.unwrap_err();
    assert_eq!(err.errno(), Some(Errno::NOMEM));
    assert!(matches!(err, uverbs::Error::ForkSafety { .. }), "{err:?}");
    assert!(err.to_string().contains("MADV_DONTFORK"), "{err}");
    assert_eq!(f.fake.count(), sent, "no REG_MR when DONTFORK fails");
}

#[test]
fn replace_fallback_moves_the_marks_too() {
    let f = fixture();
    let mut mr = f.reg(PAGE);
    let old_handle = mr.handle();
    f.fake
        .fail_next(sys::IB_USER_VERBS_CMD_REREG_MR, Errno::OPNOTSUPP);
    // SAFETY: fake memory.
    let path = unsafe {
        mr.rereg_with(
            ReregFallback::Replace,
            ReregFlags::TRANSLATION,
            None,
            NEW as *mut u8,
            PAGE,
            AccessFlags::empty(),
        )
    }
    .unwrap();
    assert_eq!(path, ReregPath::Replaced);
    assert_ne!(mr.handle(), old_handle, "a replaced MR has a new handle");
    assert_eq!((mr.addr() as usize, mr.length()), (NEW, PAGE));
    assert_eq!(ranges(&f), [(NEW, NEW + PAGE, 1)]);
    assert_eq!(f.fake.live_mrs(), 1);
}

fn libc_enomem() -> i32 {
    Errno::NOMEM.raw_os_error()
}

#[test]
fn no_madvise_at_all_when_disabled_or_unneeded() {
    for mode in [ForkMode::Disabled, ForkMode::Unneeded] {
        let advisor = FaultyAdvisor::default();
        let fork = Arc::new(ForkSafety::with_page_sizing(
            mode,
            Box::new(advisor.clone()),
            PageSizing::Fixed(PAGE),
        ));
        let fake = Arc::new(RecordingTransport::new());
        let options = OpenOptions::new().fork_safety(fork.clone());
        let ctx = Context::with_transport("fake0", None, Box::new(fake.clone()), &options).unwrap();
        let pd = ctx.alloc_pd().unwrap();
        // SAFETY: fake memory.
        let mut mr = unsafe { pd.reg_mr(OLD as *mut u8, PAGE, RW) }.unwrap();
        mr.set_access(AccessFlags::LOCAL_WRITE).unwrap();
        // SAFETY: fake memory.
        unsafe { mr.set_range(NEW as *mut u8, PAGE) }.unwrap();
        drop(mr);
        assert_eq!(advisor.calls(), [], "{mode:?}: no madvise");
        assert_eq!(fork.marked_ranges(), [], "{mode:?}");
        assert_eq!(fake.live_mrs(), 0);
    }
}
