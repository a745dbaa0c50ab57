//! `create_cq_ex` on rxe0 and siw0: a CQ made with the extended
//! attributes (standard fields, a completion vector, a channel) carries
//! traffic; what the devices cannot give is refused typed and leaks
//! nothing: completion timestamps (both report a timestamp mask of 0),
//! creation flags (the kernel's `EOPNOTSUPP` over ioctl, refused unsent over
//! write()), a completion vector past the device's (`EINVAL`).

mod common;

use common::*;
use uverbs::cq::{CqFlags, CqInit, CqWcFlags};
use uverbs::error::{Errno, Op};
use uverbs::{Error, QpType};

#[test]
fn an_extended_cq_carries_traffic_and_refuses_what_the_device_lacks() {
    on_each_data_path_device_counted(
        "an_extended_cq_carries_traffic_and_refuses_what_the_device_lacks",
        |name, ctx, counts| {
            let ex = ctx
                .query_device_ex()
                .unwrap_or_else(|e| panic!("{name}: query_device_ex: {e}"));
            assert_eq!(
                ex.completion_timestamp_mask.unwrap_or(0),
                0,
                "{name}: a timestamp mask"
            );
            let channel = comp_channel(ctx, name);
            let init = CqInit::new(16)
                .channel(&channel)
                .comp_vector(ctx.num_comp_vectors() - 1)
                .wc_flags(CqWcFlags::BYTE_LEN | CqWcFlags::QP_NUM);
            let cq = |init: &CqInit<'_>| {
                let cq = ctx
                    .create_cq_ex(init)
                    .unwrap_or_else(|e| panic!("{name}: create_cq_ex: {e}"));
                assert!(cq.cqe() >= 16, "{name}: {cq:?}");
                cq
            };
            let (cq_a, cq_b) = (cq(&init), cq(&CqInit::new(16)));
            let pd = alloc_pd(ctx);
            let a = qp_on(&pd, QpType::Rc, &cq_a, name);
            let b = qp_on(&pd, QpType::Rc, &cq_b, name);
            let _link = connect_rc_qps(ctx, name, &a, &b);
            send_64_lands(&pd, (&a, &cq_a), (&b, &cq_b), 0x3c, name, "extended CQs");
            counts.assert_extra_cq_qp(2, 2, "with the extended CQs");

            let unsupported =
                |r: Result<uverbs::CompletionQueue, Error>, what: &str| match r.expect_err(what) {
                    Error::Unsupported { op, reason, .. } => {
                        assert_eq!(op, Op::CreateCq, "{name}: {what}");
                        loud(&format!("{name}: {what}: unsupported: {reason}"));
                        reason
                    }
                    other => panic!("{name}: {what}: {other}"),
                };
            for ts in [
                CqWcFlags::COMPLETION_TIMESTAMP,
                CqWcFlags::COMPLETION_TIMESTAMP_WALLCLOCK,
            ] {
                let reason = unsupported(
                    ctx.create_cq_ex(&CqInit::new(4).wc_flags(CqWcFlags::STANDARD | ts)),
                    "a completion timestamp",
                );
                assert!(
                    reason.contains("completion_timestamp_mask 0"),
                    "{name}: {reason}"
                );
            }
            unsupported(
                ctx.create_cq_ex(&CqInit::new(4).wc_flags(CqWcFlags::FLOW_TAG)),
                "a flow tag",
            );
            let flagged = ctx.create_cq_ex(&CqInit::new(4).flags(CqFlags::IGNORE_OVERRUN));
            if ctx.transport_kind().creates_natively() {
                let e = flagged.expect_err("a creation flag");
                assert_eq!(e.errno(), Some(Errno::OPNOTSUPP), "{name}: {e}");
            } else {
                unsupported(flagged, "a creation flag without the native method");
            }
            let far = ctx
                .create_cq_ex(&CqInit::new(4).comp_vector(ctx.num_comp_vectors()))
                .expect_err("a completion vector past the device's");
            assert_eq!(far.errno(), Some(Errno::INVAL), "{name}: {far}");
            counts.assert_extra_cq_qp(2, 2, "after the refusals (nothing leaked)");
        },
    );
}
