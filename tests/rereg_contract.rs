//! The `ibv_rereg_mr(3)` contract, proven on a recording fake kernel: input
//! checks in libibverbs' order without any system call, exactly one command
//! per call, the bytes of that command, what each outcome leaves valid, and
//! release order. Runs on any machine.

mod common;

use std::sync::Arc;

use common::{context_over, fresh_mr, snap, FakeKernel, ReregCase, OWNED, RW_READ};
use uverbs::device::{DriverId, OpenOptions};
use uverbs::error::Errno;
use uverbs::mr::{ManPageGuarantee, MrState, ReregFlags, ReregOutcome};
use uverbs::transport::RecordingTransport;
use uverbs::{uverbs_uapi as sys, AccessFlags, Context, MemoryRegion};

/// The fake kernel with a fresh MR over `buf` ([`RW_READ`]).
fn fixture() -> (FakeKernel, MemoryRegion) {
    let mut f = FakeKernel::new();
    let mr = f.reg(RW_READ);
    (f, mr)
}

#[test]
fn input_checks_send_nothing_and_leave_the_mr_unchanged() {
    let (mut f, mut mr) = fixture();
    let other_ctx = context_over(&Arc::new(RecordingTransport::new()), &OpenOptions::new());
    let foreign_pd = other_ctx.alloc_pd().unwrap();
    let new = f.buf2.as_mut_ptr();
    let null = std::ptr::null_mut();
    let none = AccessFlags::empty();
    let cases: Vec<ReregCase> = vec![
        (
            "unknown flag bit 8",
            ReregFlags::from_bits_retain(8),
            None,
            null,
            0,
            none,
        ),
        (
            "unknown bit with valid ones",
            ReregFlags::from_bits_retain(8) | ReregFlags::ACCESS,
            None,
            null,
            0,
            RW_READ,
        ),
        (
            "translation, zero length",
            ReregFlags::TRANSLATION,
            None,
            new,
            0,
            none,
        ),
        (
            "translation, null address",
            ReregFlags::TRANSLATION,
            None,
            null,
            4096,
            none,
        ),
        (
            "access without CHANGE_ACCESS",
            ReregFlags::PD,
            Some(&f.pd2),
            null,
            0,
            AccessFlags::LOCAL_WRITE,
        ),
        (
            "access with flags 0",
            ReregFlags::empty(),
            None,
            null,
            0,
            AccessFlags::LOCAL_WRITE,
        ),
        (
            "CHANGE_PD without a PD",
            ReregFlags::PD,
            None,
            null,
            0,
            none,
        ),
        (
            "PD of another context",
            ReregFlags::PD,
            Some(&foreign_pd),
            null,
            0,
            none,
        ),
        (
            "range wraps around",
            ReregFlags::TRANSLATION,
            None,
            (usize::MAX - 4095) as *mut u8,
            8192,
            none,
        ),
    ];
    let before = snap(&mr);
    let sent = f.fake.count();
    for (name, flags, pd, addr, len, access) in cases {
        // SAFETY: the fake kernel never touches memory.
        let err = unsafe { mr.rereg(flags, pd, addr, len, access) }.unwrap_err();
        assert_eq!(err.outcome(), ReregOutcome::Input, "{name}: {err}");
        assert_eq!(err.code(), -1, "{name}");
        assert_eq!(err.errno(), Errno::INVAL, "{name}");
        assert_eq!(err.mr_state(), MrState::Old, "{name}");
        assert!(err.reason().is_some(), "{name}: an input error says why");
        assert_eq!(
            f.fake.count(),
            sent,
            "{name}: no command may reach the kernel"
        );
        assert_eq!(snap(&mr), before, "{name}: the MR must be unchanged");
    }
    // Precedence follows libibverbs: unknown bits are reported before a bad
    // translation, which is reported before stray access bits.
    // SAFETY: as above.
    let err =
        unsafe { mr.rereg(ReregFlags::from_bits_retain(9), None, null, 0, RW_READ) }.unwrap_err();
    assert_eq!(err.reason(), Some("unknown flag bits"));
    // SAFETY: as above.
    let err = unsafe { mr.rereg(ReregFlags::TRANSLATION, None, null, 0, RW_READ) }.unwrap_err();
    assert!(
        err.reason().unwrap().contains("CHANGE_TRANSLATION"),
        "{err}"
    );

    // Still usable.
    mr.set_access(AccessFlags::LOCAL_WRITE).unwrap();
    assert_eq!(f.fake.count(), sent + 1);
}

#[test]
fn flags_zero_reaches_the_kernel_like_libibverbs() {
    let (f, mut mr) = fixture();
    let sent = f.fake.count();
    // SAFETY: no translation change.
    let err = unsafe {
        mr.rereg(
            ReregFlags::empty(),
            None,
            std::ptr::null_mut(),
            0,
            AccessFlags::empty(),
        )
    }
    .unwrap_err();
    assert_eq!(f.fake.count(), sent + 1);
    assert_eq!(err.outcome(), ReregOutcome::Cmd);
    assert_eq!(err.errno(), Errno::INVAL);
    assert_eq!(err.code(), -4);
    // The kernel's first check, before any driver is asked: nothing changed.
    assert_eq!(err.mr_state(), MrState::Old);
}

#[test]
fn change_access_sends_one_command_and_keeps_the_handle() {
    let (f, mut mr) = fixture();
    let (handle, pd) = (mr.handle(), mr.pd_handle());
    let sent = f.fake.count();
    mr.set_access(AccessFlags::LOCAL_WRITE).unwrap();
    let cmds = f.fake.commands();
    assert_eq!(cmds.len(), sent + 1, "exactly one command");
    let last = cmds.last().unwrap();
    assert_eq!(last.code, sys::IB_USER_VERBS_CMD_REREG_MR);
    let req: sys::ib_uverbs_rereg_mr = last.request().unwrap();
    assert_eq!(req.mr_handle, handle);
    assert_eq!(req.flags, 4);
    assert_eq!(req.access_flags, AccessFlags::LOCAL_WRITE.bits());
    assert_eq!(req.pd_handle, 0, "pd_handle is 0 unless CHANGE_PD");
    assert_eq!(mr.handle(), handle);
    assert_eq!(mr.pd_handle(), pd);
    assert_eq!(
        mr.access(),
        AccessFlags::LOCAL_WRITE,
        "we track access, libibverbs does not"
    );
}

#[test]
fn change_pd_moves_the_mr_and_its_pd_reference() {
    let (f, mut mr) = fixture();
    mr.set_pd(&f.pd2).unwrap();
    let req: sys::ib_uverbs_rereg_mr = f.fake.commands().last().unwrap().request().unwrap();
    assert_eq!((req.flags, req.pd_handle), (2, f.pd2.handle()));
    assert!(mr.is_in(&f.pd2));
    assert_eq!(f.fake.mr_pd(mr.handle()), Some(f.pd2.handle()));
    // The kernel refuses to free pd2 while the MR is in it; pd1 is free now.
    let FakeKernel { pd1, pd2, fake, .. } = f;
    pd1.dealloc().unwrap();
    let err = pd2.dealloc().unwrap_err();
    assert_eq!(err.error.errno(), Some(Errno::BUSY), "{}", err.error);
    drop(mr);
    err.pd.dealloc().unwrap();
    assert_eq!((fake.live_mrs(), fake.live_pds()), (0, 0));
}

#[test]
fn change_translation_sends_the_new_range_and_takes_the_new_keys() {
    let (mut f, mut mr) = fixture();
    let handle = mr.handle();
    let (addr, len) = (f.buf2.as_mut_ptr(), f.buf2.len());
    // SAFETY: buf2 outlives the MR.
    unsafe { mr.set_range(addr, len) }.unwrap();
    let req: sys::ib_uverbs_rereg_mr = f.fake.commands().last().unwrap().request().unwrap();
    assert_eq!(
        (req.flags, req.start, req.length, req.hca_va),
        (1, addr as u64, len as u64, addr as u64)
    );
    assert_eq!(
        (mr.addr(), mr.length(), mr.handle()),
        (addr as u64, len, handle)
    );
    let rereg_resp_keys = mr.lkey();
    assert_ne!(rereg_resp_keys, 0);
}

#[test]
fn all_three_flags_in_one_command() {
    let (mut f, mut mr) = fixture();
    let (addr, len) = (f.buf2.as_mut_ptr(), f.buf2.len());
    let sent = f.fake.count();
    // SAFETY: buf2 outlives the MR.
    unsafe {
        mr.rereg(
            ReregFlags::all(),
            Some(&f.pd2),
            addr,
            len,
            AccessFlags::LOCAL_WRITE,
        )
    }
    .unwrap();
    assert_eq!(f.fake.count(), sent + 1);
    let req: sys::ib_uverbs_rereg_mr = f.fake.commands().last().unwrap().request().unwrap();
    assert_eq!(
        (
            req.flags,
            req.pd_handle,
            req.access_flags,
            req.start,
            req.length
        ),
        (7, f.pd2.handle(), 1, addr as u64, len as u64)
    );
    assert!(mr.is_in(&f.pd2));
    assert_eq!(
        (mr.addr(), mr.length(), mr.access()),
        (addr as u64, len, AccessFlags::LOCAL_WRITE)
    );
}

#[test]
fn a_refused_command_is_cmd_and_the_mr_can_still_be_dropped() {
    let (f, mut mr) = fixture();
    let before = snap(&mr);
    f.fake.fail_next(sys::IB_USER_VERBS_CMD_REREG_MR, Errno::IO);
    let err = mr.set_pd(&f.pd2).unwrap_err();
    assert_eq!(err.outcome(), ReregOutcome::Cmd);
    assert_eq!(err.errno(), Errno::IO);
    // An unknown driver may have failed midway: the man page's undefined.
    assert_eq!(err.mr_state(), MrState::Undefined);
    assert_eq!(
        snap(&mr),
        before,
        "the recorded attributes stay the old ones"
    );
    assert!(
        err.to_string().contains("IBV_REREG_MR_ERR_CMD (-4): EIO"),
        "{err}"
    );
    drop(mr);
    assert_eq!(f.fake.live_mrs(), 0, "dropping after ERR_CMD deregisters");
    assert_eq!(
        f.fake.commands().last().unwrap().code,
        sys::IB_USER_VERBS_CMD_DEREG_MR
    );
}

#[test]
fn refusals_made_before_any_change_leave_the_mr_old() {
    // EOPNOTSUPP (unsupported operation or flags) and EACCES (the umem
    // check) come before any driver changes the MR, on every driver.
    for errno in [Errno::OPNOTSUPP, Errno::ACCESS] {
        let (f, mut mr) = fixture();
        let before = snap(&mr);
        f.fake.fail_next(sys::IB_USER_VERBS_CMD_REREG_MR, errno);
        let err = mr.set_pd(&f.pd2).unwrap_err();
        assert_eq!(
            (err.outcome(), err.errno(), err.mr_state()),
            (ReregOutcome::Cmd, errno, MrState::Old)
        );
        assert_eq!(snap(&mr), before);
    }
}

/// Defect 15 of issue 18: the outcome and the error used to answer "is the
/// MR valid?" differently for the same refusal (`Undefined` from the
/// outcome, `Old` from the error). Now the error's `mr_state()` is the one
/// answer, and what the outcome says (the man page's guarantee for the code)
/// always admits it. Every strict refusal the kernel can answer, on every
/// driver this crate knows (a fake posing as each), against docs/rereg.md's
/// table of refusals that change nothing.
#[test]
fn every_strict_refusal_has_one_answer_the_outcome_cannot_contradict() {
    let drivers = [
        ("generic", None),
        ("rxe", Some(DriverId::RXE)),
        ("siw", Some(DriverId::SIW)),
    ];
    let errnos = [
        Errno::OPNOTSUPP,
        Errno::ACCESS,
        Errno::INVAL,
        Errno::FAULT,
        Errno::IO,
        Errno::NOENT,
        Errno::BUSY,
        Errno::NOMEM,
        Errno::PERM,
    ];
    let all_flags = [
        ReregFlags::ACCESS,
        ReregFlags::PD,
        ReregFlags::TRANSLATION,
        ReregFlags::all(),
        ReregFlags::empty(),
    ];
    let mut cases = 0;
    for (name, driver) in drivers {
        let fake = Arc::new(RecordingTransport::new());
        let ctx =
            Context::with_transport("fake0", driver, Box::new(fake.clone()), &OpenOptions::new())
                .unwrap_or_else(|e| panic!("{name}: a context over the fake kernel: {e}"));
        let (pd1, pd2) = (ctx.alloc_pd().unwrap(), ctx.alloc_pd().unwrap());
        let mut buf = vec![0u8; 1 << 16].into_boxed_slice();
        let mut buf2 = vec![0u8; 1 << 16].into_boxed_slice();
        let mut mr = fresh_mr(&pd1, &mut buf, RW_READ);
        for flags in all_flags {
            for errno in errnos {
                let what = format!("{name}, flags {flags:?}, {errno:?}");
                // docs/rereg.md: refusals that provably change nothing.
                let unchanged = errno == Errno::OPNOTSUPP
                    || errno == Errno::ACCESS
                    || (flags.is_empty() && errno == Errno::INVAL)
                    || (name == "rxe" && errno != Errno::FAULT)
                    || name == "siw";
                let before = snap(&mr);
                fake.fail_next(sys::IB_USER_VERBS_CMD_REREG_MR, errno);
                let pd = flags.contains(ReregFlags::PD).then_some(&pd2);
                let access = match flags.contains(ReregFlags::ACCESS) {
                    true => AccessFlags::LOCAL_WRITE,
                    false => AccessFlags::empty(),
                };
                let (addr, len) = match flags.contains(ReregFlags::TRANSLATION) {
                    true => (buf2.as_mut_ptr(), buf2.len()),
                    false => (std::ptr::null_mut(), 0),
                };
                // SAFETY: the fake kernel never touches memory; buf2
                // outlives the MR.
                let err = unsafe { mr.rereg(flags, pd, addr, len, access) }.unwrap_err();
                cases += 1;
                assert_eq!(
                    (err.outcome(), err.code(), err.errno()),
                    (ReregOutcome::Cmd, -4, errno),
                    "{what}"
                );
                let state = err.mr_state();
                let expected = if unchanged {
                    MrState::Old
                } else {
                    MrState::Undefined
                };
                assert_eq!(state, expected, "{what}: the error's answer");
                assert!(
                    err.outcome().man_page_guarantee().admits(state),
                    "{what}: the outcome's guarantee {:?} contradicts the error's {state:?}",
                    err.outcome().man_page_guarantee()
                );
                assert_eq!(
                    err.outcome().man_page_guarantee(),
                    ManPageGuarantee::Nothing,
                    "{what}"
                );
                assert_eq!(
                    snap(&mr),
                    before,
                    "{what}: the recorded attributes stay the old ones"
                );
                if state == MrState::Undefined {
                    // What the answer tells the caller to do: drop it.
                    drop(std::mem::replace(
                        &mut mr,
                        fresh_mr(&pd1, &mut buf, RW_READ),
                    ));
                }
            }
        }
        // The refusals made before any command: the code promises the old
        // MR, and the error says so.
        // SAFETY: no translation change.
        let err = unsafe {
            mr.rereg(
                ReregFlags::PD,
                None,
                std::ptr::null_mut(),
                0,
                AccessFlags::empty(),
            )
        }
        .unwrap_err();
        assert_eq!(
            (err.outcome(), err.mr_state()),
            (ReregOutcome::Input, MrState::Old),
            "{name}"
        );
        assert_eq!(
            err.outcome().man_page_guarantee(),
            ManPageGuarantee::OldMrValid,
            "{name}"
        );
        drop(mr);
        assert_eq!(fake.live_mrs(), 0, "{name}");
    }
    assert_eq!(cases, 3 * 5 * 9);
}

#[test]
fn errors_name_the_operation_device_and_errno() {
    let mut f = FakeKernel::new();
    f.fake
        .fail_next(sys::IB_USER_VERBS_CMD_REG_MR, Errno::FAULT);
    // SAFETY: the fake kernel never touches memory.
    let err = unsafe { f.pd1.reg_mr(f.buf.as_mut_ptr(), 4096, RW_READ) }.unwrap_err();
    assert_eq!(err.op(), uverbs::error::Op::RegMr);
    assert_eq!(err.errno(), Some(Errno::FAULT));
    assert!(
        err.to_string().starts_with("reg_mr on fake0: EFAULT (14)"),
        "{err}"
    );
    assert_eq!(f.fake.live_mrs(), 0);

    f.fake
        .fail_next(sys::IB_USER_VERBS_CMD_QUERY_DEVICE, Errno::IO);
    let err = f.ctx.query_device().unwrap_err();
    assert!(
        err.to_string()
            .starts_with("query_device on fake0: EIO (5)"),
        "{err}"
    );
    assert_eq!(f.ctx.query_device().unwrap().max_mr_size, u64::MAX);
}

#[test]
fn dereg_failure_hands_the_mr_back() {
    let (f, mr) = fixture();
    f.fake
        .fail_next(sys::IB_USER_VERBS_CMD_DEREG_MR, Errno::BUSY);
    let err = mr.dereg().unwrap_err();
    assert_eq!(err.error.errno(), Some(Errno::BUSY));
    assert_eq!(f.fake.live_mrs(), 1);
    err.mr.dereg().unwrap();
    assert_eq!(f.fake.live_mrs(), 0);
}

#[test]
fn drop_order_is_always_valid() {
    let (f, mr) = fixture();
    let mr_handle = mr.handle();
    let FakeKernel {
        fake,
        ctx,
        pd1,
        pd2,
        buf,
        buf2,
    } = f;
    let pd1_handle = pd1.handle();
    // Drop the context and the PD first: the MR keeps both alive.
    drop(ctx);
    drop(pd1);
    drop(pd2);
    assert_eq!(fake.live_pds(), 1, "pd1 is still used by the MR");
    drop(mr);
    assert_eq!((fake.live_mrs(), fake.live_pds()), (0, 0));
    let tail: Vec<_> = fake
        .commands()
        .iter()
        .rev()
        .take(2)
        .map(|c| c.code)
        .collect();
    assert_eq!(
        tail,
        [
            sys::IB_USER_VERBS_CMD_DEALLOC_PD,
            sys::IB_USER_VERBS_CMD_DEREG_MR
        ]
    );
    let last: sys::ib_uverbs_dealloc_pd = fake.commands().last().unwrap().request().unwrap();
    assert_eq!(last.pd_handle, pd1_handle);
    let _ = (mr_handle, buf, buf2);
}

#[test]
fn owned_buffers_come_back_after_dereg() {
    let f = FakeKernel::new();
    let mut mr = f
        .pd1
        .reg_buffer(vec![7u8; 8192].into_boxed_slice(), OWNED)
        .unwrap();
    mr.buffer_mut()[0] = 1;
    assert_eq!(mr.length(), 8192);
    mr.set_access(AccessFlags::LOCAL_WRITE).unwrap();
    let buf = mr.dereg().unwrap();
    assert_eq!((buf[0], buf[1]), (1, 7));
    assert_eq!(f.fake.live_mrs(), 0);

    f.fake
        .fail_next(sys::IB_USER_VERBS_CMD_REG_MR, Errno::NOMEM);
    let err = f.pd1.reg_buffer(vec![3u8; 16], OWNED).unwrap_err();
    assert_eq!(
        err.buffer,
        vec![3u8; 16],
        "a failed registration hands the buffer back"
    );
    assert_eq!(err.error.errno(), Some(Errno::NOMEM));
}
