//! One context holds 100 small RC QPs on rxe0 and siw0. On siw the 72nd
//! QP's receive ring lands at page offset 0x90, whose mmap key is 0x90000,
//! the value siw's ABI also names "no mapping" (SIW_INVAL_UOBJ_KEY):
//! rdma-core 44 destroys that QP again and fails; this crate maps the key,
//! since Linux 6.x answers a successful create with real keys only (issue
//! 41, docs/growth.md "siw and the 72nd QP"). The kernel's counts are back
//! where they started afterwards.

mod common;

use common::*;
use uverbs::{QpInit, QpType};

/// QPs per context: well past siw's 71 under libibverbs.
const QPS: usize = 100;

#[test]
fn a_context_holds_a_hundred_small_qps() {
    on_each_device("device_many_qps", |name, ctx, counts| {
        let pd = alloc_pd(&ctx);
        let cq = ctx.create_cq(16, None).unwrap();
        let init = QpInit::new(QpType::Rc, &cq, &cq)
            .max_send_wr(1)
            .max_recv_wr(1)
            .max_send_sge(1)
            .max_recv_sge(1);
        let qps: Vec<_> = (0..QPS)
            .map(|i| {
                pd.create_qp(&init)
                    .unwrap_or_else(|e| panic!("{name}: QP {} of {QPS}: {e}", i + 1))
            })
            .collect();
        println!("{name}: {} QPs in one context", qps.len());
        counts.assert_extra_cq_qp(1, QPS as u32, "with the QPs");
        drop(qps);
        counts.assert_extra_cq_qp(1, 0, "after dropping the QPs");
    });
}
