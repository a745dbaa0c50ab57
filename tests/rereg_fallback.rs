//! The opt-in replace fallback, on a recording fake kernel: which commands
//! are sent, which path is reported, what a failure leaves valid, and the
//! per-context memory of refusals.

mod common;

use common::{replace, replace_range, FakeKernel, RW};
use uverbs::error::Errno;
use uverbs::mr::{MrState, ReregFlags, ReregOutcome, ReregPath};
use uverbs::{uverbs_uapi as sys, AccessFlags, MemoryRegion};

const REREG: u32 = sys::IB_USER_VERBS_CMD_REREG_MR;
const REG: u32 = sys::IB_USER_VERBS_CMD_REG_MR;
const DEREG: u32 = sys::IB_USER_VERBS_CMD_DEREG_MR;

/// The fake kernel with a fresh MR over `buf` ([`RW`]).
fn fixture() -> (FakeKernel, MemoryRegion) {
    let mut f = FakeKernel::new();
    let mr = f.reg(RW);
    (f, mr)
}

/// How many (REREG_MR, REG_MR, DEREG_MR) commands the fake kernel got.
fn counts(f: &FakeKernel) -> (usize, usize, usize) {
    (
        f.fake.count_of(REREG),
        f.fake.count_of(REG),
        f.fake.count_of(DEREG),
    )
}

#[test]
fn in_place_when_the_kernel_accepts() {
    let (f, mut mr) = fixture();
    let handle = mr.handle();
    let path = replace(&mut mr, ReregFlags::ACCESS, None, AccessFlags::LOCAL_WRITE).unwrap();
    assert_eq!(path, ReregPath::InPlace);
    assert_eq!(mr.handle(), handle);
    assert_eq!(counts(&f), (1, 1, 0));
}

#[test]
fn strict_mode_fails_like_libibverbs_and_remembers() {
    let (f, mut mr) = fixture();
    f.fake.fail_next(REREG, Errno::OPNOTSUPP);
    assert!(!f.ctx.rereg_known_unsupported(ReregFlags::PD));
    let err = mr.set_pd(&f.pd2).unwrap_err();
    assert_eq!(
        (err.outcome(), err.errno()),
        (ReregOutcome::Cmd, Errno::OPNOTSUPP)
    );
    assert!(f.ctx.rereg_known_unsupported(ReregFlags::PD));
    assert!(
        !f.ctx.rereg_known_unsupported(ReregFlags::ACCESS),
        "remembered per flag combination"
    );
    // Strict calls still ask the kernel.
    mr.set_pd(&f.pd2).unwrap();
    assert_eq!(counts(&f), (2, 1, 0));
    f.ctx.forget_rereg_refusals();
    assert!(!f.ctx.rereg_known_unsupported(ReregFlags::PD));
}

#[test]
fn refused_rereg_is_replaced_and_the_refusal_skips_the_next_command() {
    let (mut f, mut mr) = fixture();
    let (old_handle, old_lkey) = (mr.handle(), mr.lkey());
    f.fake.fail_next(REREG, Errno::OPNOTSUPP);
    let path = replace(
        &mut mr,
        ReregFlags::PD | ReregFlags::ACCESS,
        Some(&f.pd2),
        AccessFlags::LOCAL_WRITE,
    )
    .unwrap();
    assert_eq!(path, ReregPath::Replaced);
    assert_ne!(mr.handle(), old_handle);
    assert_ne!(mr.lkey(), old_lkey);
    assert!(mr.is_in(&f.pd2));
    assert_eq!(mr.access(), AccessFlags::LOCAL_WRITE);
    assert_eq!(
        (mr.addr(), mr.length()),
        (f.buf.as_mut_ptr() as u64, f.buf.len()),
        "same range"
    );
    assert_eq!(f.fake.mr_pd(mr.handle()), Some(f.pd2.handle()));
    assert_eq!(f.fake.live_mrs(), 1, "exactly one live MR");
    // reg new first, then dereg old
    let codes: Vec<u32> = f
        .fake
        .commands()
        .iter()
        .rev()
        .take(3)
        .map(|c| c.code)
        .collect();
    assert_eq!(codes, [DEREG, REG, REREG]);
    let dereg: sys::ib_uverbs_dereg_mr = f.fake.commands().last().unwrap().request().unwrap();
    assert_eq!(dereg.mr_handle, old_handle);

    // The same combination again: no doomed REREG_MR.
    let before = counts(&f);
    let path = replace(
        &mut mr,
        ReregFlags::PD | ReregFlags::ACCESS,
        Some(&f.pd1),
        RW,
    )
    .unwrap();
    assert_eq!(path, ReregPath::Replaced);
    assert_eq!(counts(&f), (before.0, before.1 + 1, before.2 + 1));
}

#[test]
fn translation_is_replaced_onto_the_new_range() {
    let (mut f, mut mr) = fixture();
    f.fake.fail_next(REREG, Errno::OPNOTSUPP);
    let (addr, len) = (f.buf2.as_mut_ptr(), f.buf2.len());
    // SAFETY: buf2 outlives the MR.
    let path = unsafe { replace_range(&mut mr, addr, len) }.unwrap();
    assert_eq!(path, ReregPath::Replaced);
    assert_eq!(
        (mr.addr(), mr.length(), mr.access()),
        (addr as u64, len, RW)
    );
    let reg: sys::ib_uverbs_reg_mr = f
        .fake
        .commands()
        .iter()
        .rev()
        .find(|c| c.code == REG)
        .unwrap()
        .request()
        .unwrap();
    assert_eq!(
        (reg.start, reg.length, reg.hca_va, reg.access_flags),
        (addr as u64, len as u64, addr as u64, RW.bits())
    );
}

#[test]
fn failed_new_registration_leaves_the_old_mr_valid() {
    let (f, mut mr) = fixture();
    let (handle, lkey) = (mr.handle(), mr.lkey());
    f.fake.fail_next(REREG, Errno::OPNOTSUPP);
    f.fake.fail_next(REG, Errno::NOMEM);
    let err = replace(&mut mr, ReregFlags::ACCESS, None, AccessFlags::LOCAL_WRITE).unwrap_err();
    assert_eq!(err.outcome(), ReregOutcome::Cmd);
    assert_eq!(err.errno(), Errno::NOMEM, "the REG_MR errno");
    assert_eq!(
        err.mr_state(),
        MrState::Old,
        "the old MR is untouched and valid"
    );
    assert!(
        err.reason().unwrap().contains("old MR is untouched"),
        "{err}"
    );
    assert_eq!((mr.handle(), mr.lkey(), mr.access()), (handle, lkey, RW));
    assert_eq!(f.fake.live_mrs(), 1);
    mr.set_access(AccessFlags::LOCAL_WRITE).unwrap();
}

#[test]
fn failed_old_deregistration_releases_the_new_one() {
    let (f, mut mr) = fixture();
    let handle = mr.handle();
    f.fake.fail_next(REREG, Errno::OPNOTSUPP);
    f.fake.fail_next(DEREG, Errno::BUSY);
    let err = replace(&mut mr, ReregFlags::ACCESS, None, AccessFlags::LOCAL_WRITE).unwrap_err();
    assert_eq!(
        (err.outcome(), err.errno(), err.mr_state()),
        (ReregOutcome::Cmd, Errno::BUSY, MrState::Old)
    );
    assert_eq!(mr.handle(), handle);
    assert_eq!(f.fake.live_mrs(), 1, "the new registration was released");
    drop(mr);
    assert_eq!(f.fake.live_mrs(), 0);
}

#[test]
fn flags_zero_is_never_replaced() {
    let (f, mut mr) = fixture();
    f.fake.fail_next(REREG, Errno::OPNOTSUPP);
    let err = replace(&mut mr, ReregFlags::empty(), None, AccessFlags::empty()).unwrap_err();
    assert_eq!(
        (err.outcome(), err.errno()),
        (ReregOutcome::Cmd, Errno::OPNOTSUPP)
    );
    assert_eq!(counts(&f), (1, 1, 0));
    assert!(!f.ctx.rereg_known_unsupported(ReregFlags::empty()));
}

#[test]
fn a_refused_special_access_value_is_not_remembered_for_the_flags() {
    // rxe refuses ZERO_BASED with EOPNOTSUPP; that says nothing about the
    // next ACCESS change, which must still be tried in place.
    let (f, mut mr) = fixture();
    f.fake.fail_next(REREG, Errno::OPNOTSUPP);
    let special = RW | AccessFlags::ZERO_BASED;
    let path = replace(&mut mr, ReregFlags::ACCESS, None, special).unwrap();
    assert_eq!(path, ReregPath::Replaced);
    assert!(!f.ctx.rereg_known_unsupported(ReregFlags::ACCESS));
    let handle = mr.handle();
    let path = replace(&mut mr, ReregFlags::ACCESS, None, AccessFlags::LOCAL_WRITE).unwrap();
    assert_eq!((path, mr.handle()), (ReregPath::InPlace, handle));
    assert_eq!(counts(&f), (2, 2, 1), "the second change went to REREG_MR");
}

#[test]
fn a_refused_plain_change_is_remembered() {
    let (f, mut mr) = fixture();
    f.fake.fail_next(REREG, Errno::OPNOTSUPP);
    replace(&mut mr, ReregFlags::ACCESS, None, AccessFlags::LOCAL_WRITE).unwrap();
    assert!(f.ctx.rereg_known_unsupported(ReregFlags::ACCESS));
    replace(&mut mr, ReregFlags::ACCESS, None, RW).unwrap();
    assert_eq!(counts(&f), (1, 3, 2), "the second change skipped REREG_MR");
}

#[test]
fn eacces_from_the_umem_check_falls_back_and_is_not_remembered() {
    // rxe (and mlx5) refuse to make pages pinned read-only writable in place
    // with EACCES before changing anything; a new registration pins them
    // writable.
    let (f, mut mr) = fixture();
    f.fake.fail_next(REREG, Errno::ACCESS);
    let path = replace(&mut mr, ReregFlags::ACCESS, None, RW).unwrap();
    assert_eq!(path, ReregPath::Replaced);
    assert_eq!(mr.access(), RW);
    assert!(!f.ctx.rereg_known_unsupported(ReregFlags::ACCESS));
    // Strict: Cmd with EACCES, and the MR is known to be untouched.
    f.fake.fail_next(REREG, Errno::ACCESS);
    let err = mr.set_access(AccessFlags::LOCAL_WRITE).unwrap_err();
    assert_eq!(
        (err.outcome(), err.errno(), err.mr_state()),
        (ReregOutcome::Cmd, Errno::ACCESS, MrState::Old)
    );
}

#[test]
fn replace_whose_two_deregistrations_fail_says_the_new_range_is_registered() {
    let (f, mut mr) = fixture();
    let handle = mr.handle();
    f.fake.fail_next(REREG, Errno::OPNOTSUPP);
    f.fake.fail_next(DEREG, Errno::IO); // the old registration
    f.fake.fail_next(DEREG, Errno::IO); // the new one
    let err = replace(&mut mr, ReregFlags::ACCESS, None, AccessFlags::LOCAL_WRITE).unwrap_err();
    assert_eq!(
        (err.outcome(), err.errno(), err.mr_state()),
        (ReregOutcome::Cmd, Errno::IO, MrState::Old)
    );
    assert!(err.new_range_still_registered(), "{err}");
    assert_eq!(mr.handle(), handle);
    assert_eq!(f.fake.live_mrs(), 2, "both registrations are live");
    assert_eq!(f.ctx.abandoned_registrations(), 1);
    drop(mr);
    assert_eq!(f.fake.live_mrs(), 1, "the abandoned one is not retried");
}

#[test]
fn a_failed_deregistration_on_drop_is_counted() {
    let (f, mr) = fixture();
    f.fake.fail_next(DEREG, Errno::IO);
    drop(mr);
    assert_eq!(f.fake.live_mrs(), 1);
    assert_eq!(f.ctx.abandoned_registrations(), 1);
}
