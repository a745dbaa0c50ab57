//! A host-side loop for counting the instructions of the rxe ring code
//! with callgrind, over the kernel model (no device, no system call):
//!
//! ```text
//! cargo test --release --lib --no-run
//! valgrind --tool=callgrind --toggle-collect='*ir_probe*post_one*' \
//!     --toggle-collect='*ir_probe*poll_one*' target/release/deps/uverbs-… \
//!     --ignored --exact provider::rxe::ir_probe::post_poll_loop
//! ```
//!
//! Each iteration posts one signalled 64-byte RDMA WRITE from an SGE, lets
//! the model consume it and write its completion, and polls it: the ring
//! half of what benches/ops measures on a real device (where the wrappers,
//! the lock and the doorbell add the rest). Then it posts four such WRITEs
//! in one call (`post_batch`, add `--toggle-collect='*ir_probe*post_batch*'`),
//! benches/ops' case 2.

use super::kernel_model::TestRing;
use super::queue::{Consumer, Producer, QueueMem};
use super::rings::post_sends;
use super::wqe::{self, SendLimits, SEND_WQE_LEN, WC_LEN};
use crate::command::QpType;
use crate::provider::{probe_write, PROBE_SGE};
use crate::wr::{SendWr, WcStatus, WorkCompletion};
use uverbs_uapi::ib_uverbs_wc;
use zerocopy::IntoBytes;

const ITERS: u64 = 200;

/// The measured poll: not inlined, so callgrind can name it.
#[inline(never)]
fn poll_one(cq: &mut Consumer<ib_uverbs_wc>, out: &mut [WorkCompletion]) -> usize {
    wqe::poll(cq, out)
}

/// The measured post: not inlined, so callgrind can name it.
#[inline(never)]
fn post_one(sq: &mut Producer, limits: SendLimits, wr: &SendWr<'_>) -> bool {
    post_sends(sq, QpType::Rc, limits, std::slice::from_ref(wr)).is_ok()
}

/// As [`post_one`], for a batch (benches/ops' case 2 posts four).
#[inline(never)]
fn post_batch(sq: &mut Producer, limits: SendLimits, wrs: &[SendWr<'_>]) -> bool {
    matches!(post_sends(sq, QpType::Rc, limits, wrs), Ok(true))
}

#[test]
#[ignore = "an instruction-count probe, run under callgrind by hand"]
fn post_poll_loop() {
    let sq_ring = TestRing::new(9, 64); // 512-byte slots, as rxe makes them
    let cq_ring = TestRing::new(6, 16);
    // SAFETY: each ring is a live buffer shaped like an rxe queue, used only
    // by this view and the model's kernel side, for the test's duration.
    let sq_mem = unsafe { QueueMem::from_raw(sq_ring.base(), sq_ring.len(), SEND_WQE_LEN) };
    // SAFETY: as above.
    let cq_mem = unsafe { QueueMem::from_raw(cq_ring.base(), cq_ring.len(), WC_LEN) };
    let mut sq = Producer::over(sq_mem.unwrap());
    let mut cq = Consumer::<ib_uverbs_wc>::over(cq_mem.unwrap()).unwrap();
    let mut kernel_sq = sq_ring.kernel_consumer();
    let mut kernel_cq = cq_ring.kernel_producer();
    let limits = SendLimits {
        max_sge: 8,
        max_inline: 256,
    }
    .within_slot(sq.elem_size());
    let sges = [PROBE_SGE];
    let mut slot = vec![0u8; sq_ring.elem_size()];
    let mut out = [WorkCompletion::default(); 1];
    for i in 0..ITERS {
        let wr = probe_write(i, &sges);
        assert!(post_one(&mut sq, limits, &wr));
        assert!(kernel_sq.pop(&mut slot));
        let wc = ib_uverbs_wc {
            wr_id: i,
            opcode: 1,
            qp_num: 17,
            ..Default::default()
        };
        assert!(kernel_cq.push(wc.as_bytes()));
        assert_eq!(poll_one(&mut cq, &mut out), 1);
        assert_eq!((out[0].wr_id(), out[0].status()), (i, WcStatus::Success));

        let batch = [
            wr,
            probe_write(i + 1, &sges),
            probe_write(i + 2, &sges),
            probe_write(i + 3, &sges),
        ];
        assert!(post_batch(&mut sq, limits, &batch));
        for _ in &batch {
            assert!(kernel_sq.pop(&mut slot));
        }
    }
}
