//! Host-side loops for counting the instructions of siw's post and poll
//! paths with callgrind, over the kernel model (no device, no system call),
//! as `provider::rxe::ir_probe` does for rxe (the poll: [`poll_loop`]):
//!
//! ```text
//! CARGO_PROFILE_RELEASE_DEBUG=line-tables-only cargo test --release --lib --no-run
//! valgrind --tool=callgrind --callgrind-out-file=cg.out target/release/deps/uverbs-… \
//!     --ignored --exact provider::siw::ir_probe::post_loop --test-threads=1
//! callgrind_annotate --inclusive=yes cg.out | grep -E 'ir_probe::post_[a-z_]+ '
//! ```
//!
//! Each measured function runs [`ITERS`] times: its inclusive count divided
//! by that is its count per call, about 12 of them the probe function's own
//! (the call and the check of the answer). `--dump-instr=yes` and
//! `objdump -d` of `rings::post_sends` show where the rest go.
//!
//! Each iteration posts one signalled 64-byte RDMA WRITE from an SGE
//! (`post_write`), one 64-byte receive (`post_recv_one`), one 64-byte
//! inline SEND (`post_inline`) and a batch of four WRITEs (`post_batch`),
//! the model taking every element after its post so the doorbell is due
//! each time: the ring half of what benches/ops measures on a device,
//! [`post_sends`] and [`post_recvs`], what
//! [`SendRing::post`](crate::provider::rings::SendRing::post) and
//! [`RecvRing::post`](crate::provider::rings::RecvRing::post) run on a mapped ring
//! (the QP's wrapper, its lock and the doorbell's system call add the
//! rest).

use uverbs_uapi::{siw_rqe, siw_sqe};

use super::kernel_model::{KernelCq, KernelRq, KernelSq, TestMem};
use super::queue::{CqConsumer, Producer};
use super::rings::{post_recvs, post_sends};
use super::wqe::{self, SendConfig};
use crate::provider::{probe_write, PROBE_SGE};
use crate::wr::{Payload, RecvWr, SendOp, SendWr, WcOpcode, WcStatus, WorkCompletion};
use uverbs_uapi::{SIW_OP_WRITE, SIW_WC_SUCCESS, SIW_WQE_SIGNALLED};

const ITERS: u64 = 200;
const NUM: u32 = 64;

/// One measured post: not inlined, so callgrind can name it.
#[inline(never)]
fn post_write(sq: &mut Producer<siw_sqe>, cfg: SendConfig, wr: &SendWr<'_>) -> bool {
    matches!(post_sends(sq, cfg, std::slice::from_ref(wr)), Ok(true))
}

/// As [`post_write`], for the inline SEND.
#[inline(never)]
fn post_inline(sq: &mut Producer<siw_sqe>, cfg: SendConfig, wr: &SendWr<'_>) -> bool {
    // Not post_write's body, or the two could be merged into one symbol.
    post_sends(sq, cfg, std::slice::from_ref(wr)).is_ok()
}

/// As [`post_write`], for the batch.
#[inline(never)]
fn post_batch(sq: &mut Producer<siw_sqe>, cfg: SendConfig, wrs: &[SendWr<'_>]) -> bool {
    matches!(post_sends(sq, cfg, wrs), Ok(true))
}

/// As [`post_write`], for a receive.
#[inline(never)]
fn post_recv_one(rq: &mut Producer<siw_rqe>, max_sge: u32, wr: &RecvWr<'_>) -> bool {
    post_recvs(rq, max_sge, std::slice::from_ref(wr)).is_ok()
}

#[test]
#[ignore = "an instruction-count probe, run under callgrind by hand"]
fn post_loop() {
    let sq_mem = TestMem::sq(NUM);
    let rq_mem = TestMem::rq(NUM);
    // SAFETY: each TestMem is a live allocation of len() bytes shaped like
    // a siw queue, declared before the view and outliving it; only the view
    // and the kernel model touch it.
    let mut sq = unsafe { Producer::<siw_sqe>::from_raw(sq_mem.base(), sq_mem.len(), NUM) }
        .expect("valid SQ");
    // SAFETY: as above.
    let mut rq = unsafe { Producer::<siw_rqe>::from_raw(rq_mem.base(), rq_mem.len(), NUM) }
        .expect("valid RQ");
    let mut kernel_sq = KernelSq::new(&sq_mem, NUM);
    let mut kernel_rq = KernelRq::new(&rq_mem, NUM);
    let cfg = SendConfig {
        max_sge: 6,
        max_inline: 80,
        sig_all: false,
    };
    let sges = [PROBE_SGE];
    let payload = [0x42u8; 64];
    let inline: [&[u8]; 1] = [&payload];
    let write = |wr_id| probe_write(wr_id, &sges);
    for i in 0..ITERS {
        assert!(post_write(&mut sq, cfg, &write(i)));
        assert_eq!(kernel_sq.take().map(|s| s.map(|s| s.id)), Some(Ok(i)));

        let recv = RecvWr {
            wr_id: i,
            sges: &sges,
        };
        assert!(post_recv_one(&mut rq, 6, &recv));
        assert_eq!(kernel_rq.take().map(|r| r.map(|r| r.id)), Some(Ok(i)));

        let send = SendWr::new(i, SendOp::Send { imm: None }, Payload::Inline(&inline));
        assert!(post_inline(&mut sq, cfg, &send));
        assert_eq!(kernel_sq.take().map(|s| s.map(|s| s.id)), Some(Ok(i)));

        let batch = [write(i), write(i + 1), write(i + 2), write(i + 3)];
        assert!(post_batch(&mut sq, cfg, &batch));
        for k in 0..4 {
            assert_eq!(kernel_sq.take().map(|s| s.map(|s| s.id)), Some(Ok(i + k)));
        }
    }
}

/// The measured poll, of one CQE into a one-entry array (what benches/ops'
/// case 1 asks of the ring) in [`poll_loop`], of four in
/// [`poll_four_loop`]: not inlined, so callgrind can name it.
#[inline(never)]
fn poll_one(cq: &mut CqConsumer, out: &mut [WorkCompletion]) -> usize {
    wqe::poll(cq, out)
}

/// Each iteration the model completes one WRITE and [`poll_one`] takes it:
/// `--toggle-collect='*ir_probe*poll_one*'` over
/// `--exact provider::siw::ir_probe::poll_loop` counts the ring half of a
/// siw poll (the CQ's wrapper and lock add the rest).
#[test]
#[ignore = "an instruction-count probe, run under callgrind by hand"]
fn poll_loop() {
    poll_rounds::<1>(poll_one);
}

/// As [`poll_loop`], four WRITEs a round, taken by one [`poll_one`] into a
/// four-entry array (benches/ops' case 2, whose four WRITEs siw all
/// signals): `--toggle-collect='*ir_probe*poll_one*'` over
/// `--exact provider::siw::ir_probe::poll_four_loop`.
#[test]
#[ignore = "an instruction-count probe, run under callgrind by hand"]
fn poll_four_loop() {
    poll_rounds::<4>(poll_one);
}

/// [`ITERS`] rounds: the model completes `N` WRITEs, `poll` takes them
/// into an `N`-entry array, and each is checked. (`poll` is a function
/// item, not a pointer: a direct call of the measured function.)
fn poll_rounds<const N: usize>(poll: impl Fn(&mut CqConsumer, &mut [WorkCompletion]) -> usize) {
    let mem = TestMem::cq(NUM);
    // SAFETY: as in post_loop: a live allocation shaped like a siw CQ,
    // outliving the view; only the view and the kernel model touch it.
    let mut cq = unsafe { CqConsumer::from_raw(mem.base(), mem.len(), NUM) }.expect("valid CQ");
    let mut kernel = KernelCq::new(&mem, NUM);
    let mut out = [WorkCompletion::default(); N];
    for round in 0..ITERS {
        let ids = round * N as u64..(round + 1) * N as u64;
        for id in ids.clone() {
            let pushed = kernel.push(id, SIW_OP_WRITE, SIW_WC_SUCCESS, 64, 17, SIW_WQE_SIGNALLED);
            assert!(pushed.is_ok());
        }
        assert_eq!(poll(&mut cq, &mut out), N);
        for (id, wc) in ids.zip(&out) {
            assert_eq!(
                (wc.wr_id(), wc.status(), wc.opcode(), wc.qp_num()),
                (id, WcStatus::Success, Some(WcOpcode::RdmaWrite), 17)
            );
        }
    }
}
