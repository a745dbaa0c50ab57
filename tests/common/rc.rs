//! Data-path fixtures: the attribute sequence that takes an RC queue pair
//! from RESET to RTS (the values of rdma-core's tests and rc_pingpong, one
//! place for the device tests that connect QPs and the fake-kernel test
//! that checks the masks each step sends), two connected RC QPs on one
//! context, bounded waits for completions and the checks of their fields.

use std::time::{Duration, Instant};

use uverbs::command::{Mtu, QpAttr, QpState, QpType};
use uverbs::uverbs_uapi as sys;
use uverbs::{
    AccessFlags, CompletionChannel, CompletionQueue, Context, MemoryRegion, Payload,
    ProtectionDomain, QpInit, QueuePair, Remote, SendFlags, SendOp, SendWr, Sge, WcOpcode,
    WcStatus, WorkCompletion,
};

use super::devices::{alloc_pd, driver, loud, on_each_device, Driver};

/// RESET -> INIT -> RTR -> RTS towards `dest_qpn` over `dest` (a RoCE
/// destination from [`QpAttr::roce_dest`]) on `port`, each step with its
/// name.
pub fn rc_to_rts(
    access: AccessFlags,
    port: u8,
    mtu: Mtu,
    dest_qpn: u32,
    dest: sys::ib_uverbs_qp_dest,
) -> [(&'static str, QpAttr); 3] {
    let init = QpAttr::new()
        .state(QpState::Init)
        .pkey_index(0)
        .port(port)
        .access_flags(access);
    let rtr = QpAttr::new()
        .state(QpState::Rtr)
        .path_mtu(mtu)
        .dest_qpn(dest_qpn)
        .rq_psn(0)
        .max_dest_rd_atomic(1)
        .min_rnr_timer(12)
        .av(dest);
    let rts = QpAttr::new()
        .state(QpState::Rts)
        .timeout(14)
        .retry_cnt(7)
        .rnr_retry(7)
        .sq_psn(0)
        .max_rd_atomic(1);
    [("RESET->INIT", init), ("INIT->RTR", rtr), ("RTR->RTS", rts)]
}

/// The GID index used: on the VM's rxe0 (on dummy0, no IPv4) index 0 is
/// the RoCE v2 link-local GID.
pub const GID_INDEX: u32 = 0;
pub const PORT: u8 = 1;
pub const WAIT: Duration = Duration::from_secs(5);

/// Polls `cq` until `N` completions have arrived or [`WAIT`] passes;
/// fails with what was seen (too few, or more than `N`).
pub fn wait_n<const N: usize>(cq: &CompletionQueue, what: &str) -> [WorkCompletion; N] {
    let deadline = Instant::now() + WAIT;
    let mut wc = vec![WorkCompletion::default(); N + 8];
    let mut got = 0;
    loop {
        got += cq
            .poll(&mut wc[got..])
            .unwrap_or_else(|e| panic!("{what}: poll_cq: {e}"));
        if got > N {
            panic!(
                "{what}: {got} completions where {N} were expected: {:?}",
                &wc[..got]
            );
        }
        if got == N {
            // Give a stray extra completion a moment to show.
            std::thread::sleep(Duration::from_millis(20));
            let extra = cq.poll(&mut wc[got..]).unwrap();
            assert_eq!(
                extra,
                0,
                "{what}: more than {N} completions: {:?}",
                &wc[..got + extra]
            );
            return std::array::from_fn(|i| wc[i]);
        }
        if Instant::now() >= deadline {
            panic!(
                "{what}: {got} of {N} completions within {WAIT:?} on CQ {}: {:?}",
                cq.handle(),
                &wc[..got]
            );
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// [`wait_n`] of one.
pub fn wait_one(cq: &CompletionQueue, what: &str) -> WorkCompletion {
    let [wc] = wait_n::<1>(cq, what);
    wc
}

/// Fails loudly with the attributes that were sent.
pub fn modify(qp: &QueuePair, attr: &QpAttr, step: &str) {
    qp.modify(attr).unwrap_or_else(|e| {
        loud(&format!(
            "FAILED: modify_qp {step} of QP {} (qpn {}): {e}; sent mask {:?}: {attr:?}",
            qp.handle(),
            qp.qp_num(),
            attr.mask()
        ));
        panic!("modify_qp {step}: {e}")
    });
    assert_eq!(Some(qp.state()), attr.target_state(), "{step}");
}

/// RESET -> INIT -> RTR -> RTS towards `peer_qpn` at `gid`, with the
/// values of rdma-core's tests and rc_pingpong.
pub fn connect(qp: &QueuePair, peer_qpn: u32, gid: [u8; 16], mtu: Mtu) {
    let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ;
    let dest = QpAttr::roce_dest(gid, GID_INDEX as u8, 1, PORT);
    for (step, attr) in rc_to_rts(access, PORT, mtu, peer_qpn, dest) {
        modify(qp, &attr, step);
    }
}

/// Connects `a` and `b` to each other.
pub fn connect_pair(a: &QueuePair, b: &QueuePair, gid: [u8; 16], mtu: Mtu) {
    connect(a, b.qp_num(), gid, mtu);
    connect(b, a.qp_num(), gid, mtu);
}

/// The port's GID at [`GID_INDEX`] and the path MTU to use.
pub fn roce_path(ctx: &Context, name: &str) -> ([u8; 16], Mtu) {
    let gid = ctx
        .query_gid(u32::from(PORT), GID_INDEX)
        .unwrap_or_else(|e| panic!("{name}: query_gid({PORT}, {GID_INDEX}): {e}"));
    (gid.raw(), mtu_for(ctx))
}

/// Two RC QPs in one new PD, each with a CQ of `cqe` entries of its own
/// for both queues; A's CQ reports to `channel_a` if given. Not connected.
pub struct TwoQps {
    pub pd: ProtectionDomain,
    pub cq_a: CompletionQueue,
    pub cq_b: CompletionQueue,
    pub qp_a: QueuePair,
    pub qp_b: QueuePair,
}

pub fn two_rc_qps(
    ctx: &Context,
    name: &str,
    cqe: u32,
    channel_a: Option<&CompletionChannel>,
) -> TwoQps {
    let pd = alloc_pd(ctx);
    let cq = |channel| {
        ctx.create_cq(cqe, channel)
            .unwrap_or_else(|e| panic!("{name}: create_cq (channel {channel:?}): {e}"))
    };
    let cq_a = cq(channel_a);
    let cq_b = cq(None);
    let qp = |cq: &CompletionQueue, which: &str| {
        pd.create_qp(&QpInit::new(QpType::Rc, cq, cq))
            .unwrap_or_else(|e| panic!("{name}: create_qp {which}: {e}"))
    };
    let qp_a = qp(&cq_a, "A");
    let qp_b = qp(&cq_b, "B");
    TwoQps {
        pd,
        cq_a,
        cq_b,
        qp_a,
        qp_b,
    }
}

/// [`two_rc_qps`] connected to each other over [`roce_path`].
pub fn connected_rc_pair(
    ctx: &Context,
    name: &str,
    cqe: u32,
    channel_a: Option<&CompletionChannel>,
) -> TwoQps {
    let (gid, mtu) = roce_path(ctx, name);
    let q = two_rc_qps(ctx, name, cqe, channel_a);
    connect_pair(&q.qp_a, &q.qp_b, gid, mtu);
    q
}

/// [`on_each_device`] for the devices with a data path (rxe):
/// `body(name, ctx)`; any other is noted loudly and skipped.
pub fn on_each_data_path_device(test: &str, mut body: impl FnMut(&str, &Context)) {
    on_each_device(test, |name, dut, _counts| {
        if driver(&dut) != Driver::Rxe {
            return loud(&format!(
                "NOTE: {name}: the data path is the next issue (siw0), or not rxe"
            ));
        }
        body(name, &dut)
    });
}

pub fn mtu_for(ctx: &Context) -> Mtu {
    let port = ctx
        .query_port(PORT)
        .unwrap_or_else(|e| panic!("{}: query_port: {e}", ctx.device_name()));
    // IB MTU codes: 1 = 256 … 5 = 4096; stay at or below 1024.
    match port.active_mtu {
        1 => Mtu::Mtu256,
        2 => Mtu::Mtu512,
        _ => Mtu::Mtu1024,
    }
}

/// Checks a successful completion of `opcode` for `wr_id` on `qp`.
pub fn check(wc: &WorkCompletion, what: &str, opcode: WcOpcode, qp: &QueuePair, wr_id: u64) {
    loud(&format!("{what}: completion {wc:?}"));
    assert_eq!(wc.status, WcStatus::Success, "{what}: {wc:?}");
    assert_eq!(wc.opcode, opcode, "{what}: {wc:?}");
    assert_eq!(wc.qp_num, qp.qp_num(), "{what}: {wc:?}");
    assert_eq!(wc.wr_id, wr_id, "{what}: {wc:?}");
}

/// [`wait_one`] on `cq`, then [`check`].
pub fn wait_checked(
    cq: &CompletionQueue,
    what: &str,
    opcode: WcOpcode,
    qp: &QueuePair,
    wr_id: u64,
) -> WorkCompletion {
    let wc = wait_one(cq, what);
    check(&wc, what, opcode, qp, wr_id);
    wc
}

/// Fails with `what` and what came if `cq` holds a completion now.
pub fn assert_no_completion(cq: &CompletionQueue, what: &str) {
    let mut more = [WorkCompletion::default(); 4];
    let n = cq.poll(&mut more).unwrap();
    assert_eq!(n, 0, "{what}: {:?}", &more[..n]);
}

/// One SGE of `length` bytes at `addr` in `mr`.
pub fn sge(addr: u64, length: usize, mr: &MemoryRegion) -> [Sge; 1] {
    [Sge {
        addr,
        length: length as u32,
        lkey: mr.lkey(),
    }]
}

/// A signalled RDMA WRITE of `sges` to `remote`.
pub fn signalled_write(wr_id: u64, sges: &[Sge], remote: Remote) -> SendWr<'_> {
    signalled(wr_id, SendOp::RdmaWrite { remote, imm: None }, sges)
}

/// A signalled `op` of `sges`.
pub fn signalled(wr_id: u64, op: SendOp, sges: &[Sge]) -> SendWr<'_> {
    SendWr {
        wr_id,
        op,
        flags: SendFlags::SIGNALED,
        payload: Payload::Sges(sges),
        ud: None,
    }
}
