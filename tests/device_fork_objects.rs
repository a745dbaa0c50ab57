//! A forked child must not destroy its parent's kernel objects, on real
//! devices and over both transports. Before the fix, a child's
//! `drop(mr); _exit(0)` made the parent's `dereg()` answer `ENOENT` over
//! ioctl (over `write()` the kernel refuses the child with `EACCES`).

#[macro_use]
mod common;

use std::time::Duration;

use common::{alloc_pd, anon, comp_channel, qp_on};
use uverbs::error::Op;
use uverbs::qp::{QpAttr, QpState};
use uverbs::wr::WorkCompletion;
use uverbs::{AccessFlags, Error, QpType};

/// How long a child may run.
const LIMIT: Duration = Duration::from_secs(30);

/// The parent's dealloc of a PD after the child: it must succeed.
fn parent_dealloc(pd: uverbs::ProtectionDomain, name: &str) {
    pd.dealloc()
        .unwrap_or_else(|e| panic!("{name}: the parent's dealloc: {}", e.error));
}

device_test!(
    a_child_dropping_copies_leaves_the_parents_mr_and_pd,
    |name, ctx, counts| {
        let pd = alloc_pd(&ctx);
        let spare = alloc_pd(&ctx);
        let mut buf = anon(1 << 20);
        // SAFETY: `buf` outlives the MR.
        let mr = unsafe { pd.reg_mr(buf.as_mut_ptr(), buf.len(), AccessFlags::LOCAL_WRITE) }
            .unwrap_or_else(|e| panic!("{name}: reg_mr: {e}"));
        let code = in_child!(LIMIT, {
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
        parent_dealloc(spare, name);
        parent_dealloc(pd, name);
    }
);

device_test!(
    a_child_that_unwinds_leaves_the_parents_buffer_mr,
    |name, ctx, counts| {
        let pd = alloc_pd(&ctx);
        let mut mr = pd
            .reg_buffer(anon(1 << 16), AccessFlags::LOCAL_WRITE)
            .unwrap_or_else(|e| panic!("{name}: reg_buffer: {}", e.error));
        mr.buffer_mut()[0] = 0x5a;
        let code = in_child!(LIMIT, {
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
        parent_dealloc(pd, name);
    }
);

device_test!(
    a_child_reads_no_event_and_touches_no_ring_of_the_parent,
    |name, ctx, _counts| {
        let pd = alloc_pd(&ctx);
        let channel = comp_channel(&ctx, name);
        let cq = ctx
            .create_cq(16, Some(&channel))
            .unwrap_or_else(|e| panic!("{name}: create_cq: {e}"));
        let qp = qp_on(&pd, QpType::Rc, &cq, name);
        cq.req_notify(false)
            .unwrap_or_else(|e| panic!("{name}: req_notify: {e}"));
        // Before the fix the child's get_event read the parent's channel: it
        // blocked here (no event is pending) until the limit killed it, and
        // an event it did get would have been lost to the parent.
        let code = in_child!(LIMIT, {
            let op_of = |r: Result<(), Error>| match r {
                Err(Error::ForeignProcess { op, .. }) => Some(op),
                _ => None,
            };
            let mut wc = [WorkCompletion::default(); 4];
            let got = [
                op_of(channel.get_event().map(|_| ())),
                op_of(cq.poll(&mut wc).map(|_| ())),
                op_of(cq.req_notify(true)),
                op_of(cq.ack_events(0)),
                // SAFETY: refused before anything is written.
                op_of(unsafe { qp.post_recv(&[]) }),
                // SAFETY: as above.
                op_of(unsafe { qp.post_send(&[]) }),
                op_of(qp.modify(&QpAttr::new().state(QpState::Err))),
            ];
            let want = [
                Op::GetCqEvent,
                Op::PollCq,
                Op::ReqNotifyCq,
                Op::AckCqEvents,
                Op::PostRecv,
                Op::PostSend,
                Op::ModifyQp,
            ];
            if let Some(i) = got.iter().zip(want).position(|(g, w)| *g != Some(w)) {
                return i as i32 + 1;
            }
            // No ring of the parent is mapped here (MADV_DONTFORK).
            let maps = std::fs::read_to_string("/proc/self/maps").unwrap_or_default();
            i32::from(maps.contains("/dev/infiniband/uverbs")) * 50
        });
        assert_eq!(
            code, 0,
            "{name}: the child's check {code} failed (50: a ring mapping was inherited)"
        );
        let mut wc = [WorkCompletion::default(); 4];
        assert_eq!(
            cq.poll(&mut wc)
                .unwrap_or_else(|e| panic!("{name}: the parent's poll: {e}")),
            0
        );
        cq.req_notify(false)
            .unwrap_or_else(|e| panic!("{name}: the parent's req_notify: {e}"));
        drop(qp);
        cq.destroy()
            .unwrap_or_else(|e| panic!("{name}: the parent's destroy_cq: {}", e.error));
        parent_dealloc(pd, name);
    }
);
