//! The data-path objects against the recording fake kernel, where no ring
//! can be mapped: what they send, what they refuse before sending, and
//! that a failed creation leaves no kernel object behind.

use std::sync::Arc;

use uverbs::command::DestroyCq;
use uverbs::device::{DriverId, OpenOptions};
use uverbs::error::{Errno, Op};
use uverbs::transport::{RecordingTransport, TransportKind};
use uverbs::{uverbs_uapi as sys, Context, Error};

fn fake_ctx(driver: Option<DriverId>) -> (Arc<RecordingTransport>, Context) {
    ctx_over(RecordingTransport::new(), driver)
}

/// A fake standing for the legacy write() transport: CQs and QPs are made
/// with the write commands (the native framing is tests/datapath_native.rs's).
fn write_ctx() -> (Arc<RecordingTransport>, Context) {
    ctx_over(
        RecordingTransport::with_kind(TransportKind::Write),
        Some(DriverId::RXE),
    )
}

fn ctx_over(
    fake: RecordingTransport,
    driver: Option<DriverId>,
) -> (Arc<RecordingTransport>, Context) {
    let fake = Arc::new(fake);
    let ctx = Context::with_transport("fake0", driver, Box::new(fake.clone()), &OpenOptions::new())
        .unwrap();
    (fake, ctx)
}

fn assert_os(err: &Error, op: Op, errno: Errno) {
    assert_eq!((err.op(), err.errno()), (op, Some(errno)), "{err}");
    assert!(
        err.to_string().starts_with(op.name()),
        "the message names the operation: {err}"
    );
}

/// A driver without a data path (an unknown one; rxe and siw have theirs)
/// gets `Error::Unsupported` (EOPNOTSUPP) naming create_cq and saying what
/// such a device does get, and nothing reaches the kernel.
#[test]
fn create_cq_on_a_driver_without_data_path_is_refused_before_sending() {
    let (fake, ctx) = fake_ctx(None);
    let before = fake.count();
    let err = ctx.create_cq(16, None).unwrap_err();
    assert_os(&err, Op::CreateCq, Errno::OPNOTSUPP);
    assert!(matches!(err, Error::Unsupported { .. }), "{err:?}");
    let message = err.to_string();
    assert!(
        message.contains("rxe, siw and mlx5 only") && message.contains("control path"),
        "{message}"
    );
    assert_eq!(fake.count(), before, "nothing sent");
}

/// On rxe the CQ is created, its ring cannot be mapped (the fake has no
/// file): the error is the mapping's EOPNOTSUPP for create_cq, and the CQ
/// was destroyed again, so the kernel holds nothing.
#[test]
fn a_cq_whose_ring_cannot_be_mapped_is_destroyed_again() {
    let (fake, ctx) = write_ctx();
    let err = ctx.create_cq(16, None).unwrap_err();
    assert_os(&err, Op::CreateCq, Errno::OPNOTSUPP);
    let codes: Vec<u32> = fake.commands().iter().map(|c| c.code).collect();
    assert_eq!(
        &codes[codes.len() - 2..],
        &[
            sys::IB_USER_VERBS_CMD_CREATE_CQ,
            sys::IB_USER_VERBS_CMD_DESTROY_CQ
        ]
    );
    let created: sys::ib_uverbs_create_cq = fake.commands()[codes.len() - 2].request().unwrap();
    assert_eq!((created.cqe, created.comp_channel), (16, -1));
    // The fake answers a destroy only for a live CQ (else EINVAL) and the
    // destroy above succeeded: that CQ is gone, so a second destroy fails.
    let destroy: sys::ib_uverbs_destroy_cq = fake.commands().last().unwrap().request().unwrap();
    // SAFETY: destroying a handle nothing owns any more.
    let again = unsafe { ctx.execute(&DestroyCq::new(destroy.cq_handle), &mut []) };
    assert_eq!(again.unwrap_err().errno(), Some(Errno::INVAL));
}

/// The fake hands over no descriptor, so a completion channel cannot be
/// owned: a typed EOPNOTSUPP, never a descriptor someone else owns.
#[test]
fn a_completion_channel_needs_a_descriptor_the_transport_hands_over() {
    let (_fake, ctx) = fake_ctx(Some(DriverId::RXE));
    match ctx.create_comp_channel() {
        Err(err) => assert_os(&err, Op::CreateCompChannel, Errno::OPNOTSUPP),
        Ok(ch) => panic!("a channel over the fake kernel: {ch:?}"),
    }
}

/// A failed CREATE_CQ is reported with the kernel's errno and sends no
/// destroy.
#[test]
fn a_refused_create_cq_sends_nothing_more() {
    let (fake, ctx) = write_ctx();
    fake.fail_next(sys::IB_USER_VERBS_CMD_CREATE_CQ, Errno::NOMEM);
    let err = ctx.create_cq(16, None).unwrap_err();
    assert_os(&err, Op::CreateCq, Errno::NOMEM);
    assert_eq!(fake.count_of(sys::IB_USER_VERBS_CMD_DESTROY_CQ), 0);
}
