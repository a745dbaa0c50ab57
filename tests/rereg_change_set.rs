//! Re-registration as a change set (`Rereg` + `apply`), on a recording fake
//! kernel: the flags follow from the fields set, the command carries exactly
//! them, ACCESS and PD changes with the replace fallback need no `unsafe`,
//! and an owned buffer refuses a translation without sending anything.

mod common;

use std::sync::Arc;

use uverbs::device::OpenOptions;
use uverbs::error::Errno;
use uverbs::mr::{Rereg, ReregFallback, ReregFlags, ReregOutcome, ReregPath};
use uverbs::transport::RecordingTransport;
use uverbs::{uverbs_uapi as sys, AccessFlags, BufferMr, Context, ProtectionDomain};

const REREG: u32 = sys::IB_USER_VERBS_CMD_REREG_MR;

fn fake() -> (Arc<RecordingTransport>, Context) {
    common::fake_context(&OpenOptions::new())
}

/// A PD of `ctx` and a page registered in it as an owned buffer.
fn owned_page(ctx: &Context) -> (ProtectionDomain, BufferMr<Vec<u8>>) {
    let pd = ctx.alloc_pd().unwrap();
    let mr = pd
        .reg_buffer(vec![0u8; 4096], AccessFlags::LOCAL_WRITE)
        .unwrap();
    (pd, mr)
}

fn last_rereg(fake: &RecordingTransport) -> sys::ib_uverbs_rereg_mr {
    let cmd = fake.commands().into_iter().rev().find(|c| c.code == REREG);
    cmd.expect("a REREG_MR was sent").request().unwrap()
}

#[test]
fn flags_follow_from_the_fields_set() {
    let (_, ctx) = fake();
    let pd = ctx.alloc_pd().unwrap();
    assert_eq!(Rereg::new().flags(), ReregFlags::empty());
    assert_eq!(Rereg::default().flags(), ReregFlags::empty());
    assert_eq!(
        Rereg::new().access(AccessFlags::empty()).flags(),
        ReregFlags::ACCESS
    );
    assert_eq!(Rereg::new().pd(&pd).flags(), ReregFlags::PD);
    let mut buf = vec![0u8; 64];
    // SAFETY: never applied.
    let t = unsafe { Rereg::new().translation(buf.as_mut_ptr(), buf.len()) };
    assert_eq!(t.flags(), ReregFlags::TRANSLATION);
    assert_eq!(
        t.access(AccessFlags::LOCAL_WRITE).pd(&pd).flags(),
        ReregFlags::all()
    );
}

#[test]
fn apply_sends_one_command_with_exactly_the_change() {
    let (fake, ctx) = fake();
    let (pd1, pd2) = (ctx.alloc_pd().unwrap(), ctx.alloc_pd().unwrap());
    let mut buf = vec![0u8; 8192];
    // SAFETY: `buf` outlives the MR.
    let mut mr =
        unsafe { pd1.reg_mr(buf.as_mut_ptr(), buf.len(), AccessFlags::LOCAL_WRITE) }.unwrap();
    let handle = mr.handle();
    let sent = fake.count();
    let change = Rereg::new()
        .access(AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ)
        .pd(&pd2);
    let path = mr.apply(&change, ReregFallback::Strict).unwrap();
    assert_eq!((path, fake.count()), (ReregPath::InPlace, sent + 1));
    let req = last_rereg(&fake);
    assert_eq!(
        (
            req.mr_handle,
            req.flags,
            req.pd_handle,
            req.access_flags,
            req.start,
            req.length
        ),
        (
            handle,
            (ReregFlags::ACCESS | ReregFlags::PD).bits(),
            pd2.handle(),
            (AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ).bits(),
            0,
            0
        )
    );
    assert!(mr.is_in(&pd2));
    assert_eq!(
        mr.access(),
        AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ
    );
}

#[test]
fn a_pd_change_with_the_replace_fallback_is_safe_and_replaces_on_refusal() {
    let (fake, ctx) = fake();
    let (pd1, pd2) = (ctx.alloc_pd().unwrap(), ctx.alloc_pd().unwrap());
    let mut mr = pd1
        .reg_buffer(vec![7u8; 4096], AccessFlags::LOCAL_WRITE)
        .unwrap();
    let handle = mr.handle();
    fake.fail_next(REREG, Errno::OPNOTSUPP);
    let path = mr
        .apply(&Rereg::new().pd(&pd2), ReregFallback::Replace)
        .unwrap();
    assert_eq!(path, ReregPath::Replaced);
    assert_ne!(mr.handle(), handle);
    assert!(mr.is_in(&pd2));
    assert_eq!(mr.buffer()[0], 7);
    assert_eq!(fake.live_mrs(), 1);
}

#[test]
fn an_owned_buffer_refuses_a_translation_change_set_without_sending() {
    let (fake, ctx) = fake();
    let (_pd, mut mr) = owned_page(&ctx);
    let mut other = vec![0u8; 4096];
    // SAFETY: refused before anything is sent; `other` is never registered.
    let change = unsafe { Rereg::new().translation(other.as_mut_ptr(), other.len()) };
    let sent = fake.count();
    let err = mr.apply(&change, ReregFallback::Replace).unwrap_err();
    assert_eq!(
        (err.outcome(), err.errno()),
        (ReregOutcome::Input, Errno::INVAL)
    );
    assert_eq!(fake.count(), sent);
}

#[test]
fn an_empty_change_set_goes_to_the_kernel_like_flags_zero() {
    let (fake, ctx) = fake();
    let (_pd, mut mr) = owned_page(&ctx);
    fake.fail_next(REREG, Errno::INVAL);
    let err = mr.apply(&Rereg::new(), ReregFallback::Replace).unwrap_err();
    assert_eq!(
        (err.outcome(), err.errno()),
        (ReregOutcome::Cmd, Errno::INVAL)
    );
    assert_eq!(last_rereg(&fake).flags, 0);
    assert_eq!(
        fake.count_of(sys::IB_USER_VERBS_CMD_REG_MR),
        1,
        "never replaced"
    );
}
