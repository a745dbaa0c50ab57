//! This crate's side: the same loop as [`crate::ibv::run`] over
//! `QueuePair::post_send` and `CompletionQueue::poll`.

use uverbs::command::{Mtu, QpAttr, QpState, QpType};
use uverbs::{
    AccessFlags, Payload, QpInit, QueuePair, Remote, SendFlags, SendOp, SendWr, Sge, WcOpcode,
    WcStatus, WorkCompletion,
};

use crate::{Counts, Pair, BYTES, GID_INDEX, PORT, TARGET_OFFSET};

const ACCESS: AccessFlags = AccessFlags::LOCAL_WRITE
    .union(AccessFlags::REMOTE_WRITE)
    .union(AccessFlags::REMOTE_READ);

/// The path MTU of ours' `Mtu` for an IB MTU code (`enum ibv_mtu`).
pub fn mtu(code: u32) -> Mtu {
    match code {
        1 => Mtu::Mtu256,
        2 => Mtu::Mtu512,
        _ => Mtu::Mtu1024,
    }
}

/// RESET -> INIT -> RTR -> RTS towards `dest_qpn` at `gid`: the values of
/// tests/common/rc.rs, as [`crate::ibv`] sends them.
fn connect(qp: &QueuePair, dest_qpn: u32, gid: [u8; 16], mtu: Mtu) -> Result<(), String> {
    let dest = QpAttr::roce_dest(gid, GID_INDEX as u8, 1, PORT);
    let steps = [
        (
            "RESET->INIT",
            QpAttr::new()
                .state(QpState::Init)
                .pkey_index(0)
                .port(PORT)
                .access_flags(ACCESS),
        ),
        (
            "INIT->RTR",
            QpAttr::new()
                .state(QpState::Rtr)
                .path_mtu(mtu)
                .dest_qpn(dest_qpn)
                .rq_psn(0)
                .max_dest_rd_atomic(1)
                .min_rnr_timer(12)
                .av(dest),
        ),
        (
            "RTR->RTS",
            QpAttr::new()
                .state(QpState::Rts)
                .timeout(14)
                .retry_cnt(7)
                .rnr_retry(7)
                .sq_psn(0)
                .max_rd_atomic(1),
        ),
    ];
    for (step, attr) in steps {
        qp.modify(&attr)
            .map_err(|e| format!("ours: modify_qp {step}: {e}"))?;
    }
    Ok(())
}

/// `pair.iters` signalled 64-byte RDMA WRITEs from QP A into `buf`'s
/// second page through QP B, each waited for with [`crate::wait_for_one`].
pub fn run(pair: &Pair, buf: &mut [u8]) -> Result<Counts, String> {
    let dev = uverbs::devices()
        .map_err(|e| format!("ours: listing devices: {e}"))?
        .into_iter()
        .find(|d| d.name() == pair.device)
        .ok_or_else(|| format!("ours: no device {}", pair.device))?;
    let ctx = dev
        .open()
        .map_err(|e| format!("ours: opening {}: {e}", pair.device))?;
    let pd = ctx.alloc_pd().map_err(|e| format!("ours: alloc_pd: {e}"))?;
    // SAFETY: `buf` outlives the MR (dropped at the end of this function,
    // after the QPs), and nothing else touches it meanwhile.
    let mr = unsafe { pd.reg_mr(buf.as_mut_ptr(), buf.len(), ACCESS) }
        .map_err(|e| format!("ours: reg_mr: {e}"))?;
    let gid = ctx
        .query_gid(u32::from(PORT), GID_INDEX)
        .map_err(|e| format!("ours: query_gid: {e}"))?
        .raw();
    let cq = || {
        ctx.create_cq(16, None)
            .map_err(|e| format!("ours: create_cq: {e}"))
    };
    let (cq_a, cq_b) = (cq()?, cq()?);
    let qp = |cq| {
        pd.create_qp(&QpInit::new(QpType::Rc, cq, cq))
            .map_err(|e| format!("ours: create_qp: {e}"))
    };
    let (qp_a, qp_b) = (qp(&cq_a)?, qp(&cq_b)?);
    let mtu = mtu(pair.mtu);
    connect(&qp_a, qp_b.qp_num(), gid, mtu)?;
    connect(&qp_b, qp_a.qp_num(), gid, mtu)?;
    let base = buf.as_ptr() as u64;
    let sges = [Sge {
        addr: base,
        length: BYTES as u32,
        lkey: mr.lkey(),
    }];
    let remote = Remote {
        addr: base + TARGET_OFFSET as u64,
        rkey: mr.rkey(),
    };
    let mut counts = Counts::default();
    let mut wc = [WorkCompletion::default(); 1];
    for i in 0..pair.iters {
        let wr = SendWr {
            wr_id: i as u64,
            op: SendOp::RdmaWrite { remote, imm: None },
            flags: SendFlags::SIGNALED,
            payload: Payload::Sges(&sges),
            ud: None,
        };
        counts.posts += 1;
        // SAFETY: the source bytes stay untouched until the completion is
        // polled below, and the MR outlives the QP's use of them.
        unsafe { qp_a.post_send(&[wr]) }.map_err(|e| format!("ours: post_send {i}: {e}"))?;
        crate::wait_for_one(&mut counts, i, || {
            cq_a.poll(&mut wc).map_err(|e| format!("ours: poll: {e}"))
        })?;
        let c = wc[0];
        if c.status() != WcStatus::Success
            || c.opcode() != WcOpcode::RdmaWrite
            || c.wr_id() != i as u64
            || c.qp_num() != qp_a.qp_num()
        {
            return Err(format!("ours: WRITE {i}: completion {c:?}"));
        }
    }
    drop((qp_a, qp_b, cq_a, cq_b, mr));
    Ok(counts)
}

/// The control loop of [`crate::control`] over this crate: `iters` ×
/// (`Context::alloc_pd` + `ProtectionDomain::dealloc`), then on one PD
/// `iters` × (`ProtectionDomain::reg_mr` of `region` +
/// `MemoryRegion::dereg`). The context's default options: the default
/// transport, fork safety off.
pub fn control(device: &str, iters: usize, region: &mut [u8]) -> Result<(), String> {
    let dev = uverbs::devices()
        .map_err(|e| format!("ours: listing devices: {e}"))?
        .into_iter()
        .find(|d| d.name() == device)
        .ok_or_else(|| format!("ours: no device {device}"))?;
    let ctx = dev
        .open()
        .map_err(|e| format!("ours: opening {device}: {e}"))?;
    for _ in 0..iters {
        let pd = ctx.alloc_pd().map_err(|e| format!("ours: alloc_pd: {e}"))?;
        pd.dealloc()
            .map_err(|e| format!("ours: dealloc_pd: {}", e.error))?;
    }
    let pd = ctx.alloc_pd().map_err(|e| format!("ours: alloc_pd: {e}"))?;
    for _ in 0..iters {
        // SAFETY: `region` outlives the MR, deregistered right away.
        let mr = unsafe { pd.reg_mr(region.as_mut_ptr(), region.len(), ACCESS) }
            .map_err(|e| format!("ours: reg_mr: {e}"))?;
        mr.dereg()
            .map_err(|e| format!("ours: dereg_mr: {}", e.error))?;
    }
    Ok(())
}
