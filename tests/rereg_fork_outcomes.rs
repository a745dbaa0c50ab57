//! Fault injection for the fork-safety outcomes of `ibv_rereg_mr(3)`: a
//! replaceable advisor fails chosen madvise calls while a recording fake
//! kernel answers the commands. After each outcome the MR's state, its
//! addr/length and the set of advised ranges are what the man page promises.

mod common;

use std::sync::Arc;

use common::{
    fork_safety_with, replace_range, FakeKernel, RecordingAdvisor, FAKE_PAGE as PAGE, RW,
};
use uverbs::device::OpenOptions;
use uverbs::error::Errno;
use uverbs::fork::{Advice, ForkMode, ForkSafety};
use uverbs::mr::{MrState, ReregOutcome, ReregPath};
use uverbs::transport::RecordingTransport;
use uverbs::{uverbs_uapi as sys, AccessFlags, MemoryRegion};

const OLD: usize = 0x1000_0000;
const NEW: usize = 0x2000_0000;

/// The fake kernel with a fork safety of its own (enabled), whose advisor
/// records every call.
struct Fixture {
    kernel: FakeKernel,
    fake: Arc<RecordingTransport>,
    fork: Arc<ForkSafety>,
    advisor: RecordingAdvisor,
}

fn fixture_in(mode: ForkMode) -> Fixture {
    let advisor = RecordingAdvisor::default();
    let fork = fork_safety_with(mode, advisor.clone());
    let kernel = FakeKernel::with_options(&OpenOptions::new().fork_safety(fork.clone()));
    Fixture {
        fake: kernel.fake.clone(),
        kernel,
        fork,
        advisor,
    }
}

fn fixture() -> Fixture {
    fixture_in(ForkMode::Enabled)
}

impl Fixture {
    /// An MR over `len` fake bytes at [`OLD`].
    fn reg(&self, len: usize) -> MemoryRegion {
        // SAFETY: the fake kernel and the recording advisor never touch memory.
        unsafe { self.kernel.pd1.reg_mr(OLD as *mut u8, len, RW) }.unwrap()
    }
}

/// The fixture with a one-page MR at [`OLD`], whose next REREG_MR the fake
/// kernel refuses with `EOPNOTSUPP`.
fn rereg_refused() -> (Fixture, MemoryRegion) {
    let f = fixture();
    let mr = f.reg(PAGE);
    f.fake
        .fail_next(sys::IB_USER_VERBS_CMD_REREG_MR, Errno::OPNOTSUPP);
    (f, mr)
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
    f.advisor.heal();
    drop(mr);
    assert_eq!(ranges(&f), [], "dropping releases the new range");
}

#[test]
fn cmd_and_do_fork_new_reports_both_errnos() {
    let (f, mut mr) = rereg_refused();
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
    let (f, mut mr) = rereg_refused();
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
    mr.set_pd(&f.kernel.pd2).unwrap();
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
    let err = unsafe { f.kernel.pd1.reg_mr(OLD as *mut u8, PAGE, RW) }.unwrap_err();
    assert_eq!(err.errno(), Some(Errno::NOMEM));
    assert_eq!(ranges(&f), []);

    f.advisor.fail_on(OLD, Advice::DontFork, libc_enomem());
    let sent = f.fake.count();
    // SAFETY: fake memory.
    let err = unsafe { f.kernel.pd1.reg_mr(OLD as *mut u8, PAGE, RW) }.unwrap_err();
    assert_eq!(err.errno(), Some(Errno::NOMEM));
    assert!(matches!(err, uverbs::Error::ForkSafety { .. }), "{err:?}");
    assert!(err.to_string().contains("MADV_DONTFORK"), "{err}");
    assert_eq!(f.fake.count(), sent, "no REG_MR when DONTFORK fails");
}

#[test]
fn replace_fallback_moves_the_marks_too() {
    let (f, mut mr) = rereg_refused();
    let old_handle = mr.handle();
    // SAFETY: fake memory.
    let path = unsafe { replace_range(&mut mr, NEW as *mut u8, PAGE) }.unwrap();
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
        let f = fixture_in(mode);
        let mut mr = f.reg(PAGE);
        mr.set_access(AccessFlags::LOCAL_WRITE).unwrap();
        // SAFETY: fake memory.
        unsafe { mr.set_range(NEW as *mut u8, PAGE) }.unwrap();
        drop(mr);
        assert_eq!(f.advisor.calls(), [], "{mode:?}: no madvise");
        assert_eq!(f.fork.marked_ranges(), [], "{mode:?}");
        assert_eq!(f.fake.live_mrs(), 0);
    }
}
