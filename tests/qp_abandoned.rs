//! A QP whose drop the kernel refuses to destroy is abandoned, not
//! destroyed: the device may use what was posted to it until the context
//! is closed. `Context::abandoned_queue_pairs` counts such QPs, as
//! `abandoned_registrations` counts refused DEREG_MRs (issue 18, defect 13).
//! On the recording fake kernel, rxe's rings served, over both framings.

mod common;

use uverbs::error::Errno;
use uverbs::transport::{RecordingTransport, TransportKind};
use uverbs::{uverbs_uapi as sys, CompletionQueue, ProtectionDomain, QpInit, QpType, QueuePair};

fn qp(pd: &ProtectionDomain, cq: &CompletionQueue) -> QueuePair {
    pd.create_qp(&QpInit::new(QpType::Rc, cq, cq)).unwrap()
}

/// Makes the next DESTROY_QP fail with `errno` through the framing `kind`
/// creates (and destroys) QPs with.
fn fail_next_destroy(fake: &RecordingTransport, kind: TransportKind, errno: Errno) {
    match kind {
        TransportKind::Ioctl => {
            fake.fail_next_method(sys::UVERBS_OBJECT_QP, sys::UVERBS_METHOD_QP_DESTROY, errno)
        }
        _ => fake.fail_next(sys::IB_USER_VERBS_CMD_DESTROY_QP, errno),
    }
}

#[test]
fn a_drop_the_kernel_refuses_abandons_the_qp_and_counts_it() {
    common::on_each_fake_framing(|kind, (fake, ctx, pd, cq)| {
        assert_eq!(ctx.abandoned_queue_pairs(), 0, "{kind:?}");

        // An accepted destroy: nothing abandoned.
        drop(qp(&pd, &cq));
        assert_eq!(fake.live_cqs_qps(), (1, 0), "{kind:?}");
        assert_eq!(ctx.abandoned_queue_pairs(), 0, "{kind:?}");

        // A refused one: the QP stays in the kernel, counted.
        let abandoned = qp(&pd, &cq);
        fail_next_destroy(&fake, kind, Errno::IO);
        drop(abandoned);
        assert_eq!(fake.live_cqs_qps(), (1, 1), "{kind:?}: still in the kernel");
        assert_eq!(ctx.abandoned_queue_pairs(), 1, "{kind:?}");
        assert_eq!(
            ctx.abandoned_registrations(),
            0,
            "{kind:?}: a QP is not a registration"
        );

        // Counted per QP, and per context.
        let (a, b) = (qp(&pd, &cq), qp(&pd, &cq));
        fail_next_destroy(&fake, kind, Errno::IO);
        fail_next_destroy(&fake, kind, Errno::BUSY);
        drop(a);
        drop(b);
        assert_eq!(ctx.abandoned_queue_pairs(), 3, "{kind:?}");
        let (_other_fake, other, _other_pd, _other_cq) = common::fake_data_path(kind);
        assert_eq!(other.abandoned_queue_pairs(), 0, "{kind:?}");
    });
}

/// A refused explicit destroy hands the QP back: not abandoned, not
/// counted. Dropping what came back destroys it; if that is refused too,
/// it is counted then.
#[test]
fn a_refused_explicit_destroy_is_not_an_abandoned_qp() {
    common::on_each_fake_framing(|kind, (fake, ctx, pd, cq)| {
        fail_next_destroy(&fake, kind, Errno::IO);
        let refused = qp(&pd, &cq).destroy().unwrap_err();
        assert_eq!(refused.error.errno(), Some(Errno::IO), "{kind:?}");
        assert_eq!(ctx.abandoned_queue_pairs(), 0, "{kind:?}");
        drop(refused);
        assert_eq!(
            fake.live_cqs_qps(),
            (1, 0),
            "{kind:?}: the drop destroyed it"
        );
        assert_eq!(ctx.abandoned_queue_pairs(), 0, "{kind:?}");

        fail_next_destroy(&fake, kind, Errno::IO);
        fail_next_destroy(&fake, kind, Errno::IO);
        let refused = qp(&pd, &cq).destroy().unwrap_err();
        drop(refused);
        assert_eq!(fake.live_cqs_qps(), (1, 1), "{kind:?}");
        assert_eq!(ctx.abandoned_queue_pairs(), 1, "{kind:?}");
    });
}
