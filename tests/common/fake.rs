//! The fake-kernel fixture: a context over a [`RecordingTransport`] (which
//! records every command and answers like the kernel, never touching
//! memory), with two PDs and two owned buffers to register.

use std::sync::Arc;

use uverbs::device::OpenOptions;
use uverbs::qp::{QpAttr, QpState};
use uverbs::transport::{RecordingTransport, Transport, TransportKind};
use uverbs::{
    AccessFlags, CompletionQueue, Context, MemoryRegion, ProtectionDomain, QpInit, QpType,
    QueuePair,
};

use super::fresh_mr;

/// The length of [`FakeKernel::buf`].
pub const BUF_LEN: usize = 1 << 20;
/// The length of [`FakeKernel::buf2`].
pub const BUF2_LEN: usize = 2 << 20;

/// A context named `fake0` over `fake`, which may be set up beforehand
/// (its `GET_CONTEXT` answer, for instance).
pub fn context_over(fake: &Arc<RecordingTransport>, options: &OpenOptions) -> Context {
    Context::with_transport("fake0", None, Box::new(fake.clone()), options)
        .unwrap_or_else(|e| panic!("a context over the fake kernel: {e}"))
}

/// A context named `fake0` over `fake` (the recording fake or a transport
/// built on it), posing as an rxe device (the data path's objects are
/// rxe's).
pub fn rxe_context_over<T: Transport + 'static>(fake: &Arc<T>) -> Context {
    Context::with_transport(
        "fake0",
        Some(uverbs::device::DriverId::RXE),
        Box::new(fake.clone()),
        &OpenOptions::new(),
    )
    .unwrap_or_else(|e| panic!("an rxe context over the fake kernel: {e}"))
}

/// The data-path fixture over the fake: the fake (reporting `kind`, rxe's
/// rings served), an rxe context over it, and a PD and an 8-entry CQ in it.
pub type FakeDataPath = (
    Arc<RecordingTransport>,
    Context,
    ProtectionDomain,
    CompletionQueue,
);

/// A [`FakeDataPath`] over a fake reporting `kind`.
pub fn fake_data_path(kind: TransportKind) -> FakeDataPath {
    let fake = Arc::new(RecordingTransport::with_kind(kind));
    fake.serve_rings();
    let ctx = rxe_context_over(&fake);
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(8, None).unwrap();
    (fake, ctx, pd, cq)
}

/// `body` over a fresh [`FakeDataPath`] of each framing, ioctl then
/// write(): QPs and CQs are created and destroyed by native methods in
/// the one, by write commands in the other.
pub fn on_each_fake_framing(mut body: impl FnMut(TransportKind, FakeDataPath)) {
    for kind in [TransportKind::Ioctl, TransportKind::Write] {
        body(kind, fake_data_path(kind));
    }
}

/// An RC QP on `cq` in `pd`, moved to INIT (port 1, LOCAL_WRITE): ready for
/// receives, as the data-path tests over the fake need it.
pub fn rc_qp_in_init(pd: &ProtectionDomain, cq: &CompletionQueue) -> QueuePair {
    let qp = pd
        .create_qp(&QpInit::new(QpType::Rc, cq, cq))
        .expect("create_qp on the fake kernel");
    let init = QpAttr::new()
        .state(QpState::Init)
        .pkey_index(0)
        .port(1)
        .access_flags(AccessFlags::LOCAL_WRITE);
    qp.modify(&init).expect("RESET->INIT on the fake kernel");
    qp
}

/// A context named `fake0` over a fresh fake kernel.
pub fn fake_context(options: &OpenOptions) -> (Arc<RecordingTransport>, Context) {
    let fake = Arc::new(RecordingTransport::new());
    let ctx = context_over(&fake, options);
    (fake, ctx)
}

/// A fresh fake kernel, its context, two PDs in it and two zeroed buffers.
pub struct FakeKernel {
    pub fake: Arc<RecordingTransport>,
    pub ctx: Context,
    pub pd1: ProtectionDomain,
    pub pd2: ProtectionDomain,
    /// [`BUF_LEN`] bytes, what [`FakeKernel::reg`] registers.
    pub buf: Box<[u8]>,
    /// [`BUF2_LEN`] bytes, a second range to move to.
    pub buf2: Box<[u8]>,
}

impl FakeKernel {
    /// With the process-wide fork safety (`OpenOptions::new()`).
    pub fn new() -> FakeKernel {
        FakeKernel::with_options(&OpenOptions::new())
    }

    /// With the given options (a fork safety of its own, for instance).
    pub fn with_options(options: &OpenOptions) -> FakeKernel {
        let (fake, ctx) = fake_context(options);
        let pd1 = ctx.alloc_pd().expect("alloc_pd on the fake kernel");
        let pd2 = ctx.alloc_pd().expect("alloc_pd on the fake kernel");
        FakeKernel {
            fake,
            ctx,
            pd1,
            pd2,
            buf: vec![0; BUF_LEN].into(),
            buf2: vec![0; BUF2_LEN].into(),
        }
    }

    /// A fresh MR over all of `buf`, in `pd1`, with `access`. Every test
    /// keeps the fixture (hence `buf`) until the MR is gone.
    pub fn reg(&mut self, access: AccessFlags) -> MemoryRegion {
        fresh_mr(&self.pd1, &mut self.buf, access)
    }
}
