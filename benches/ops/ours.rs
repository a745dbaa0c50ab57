//! This crate's side: the loops of [`crate::Case`] over
//! `QueuePair::post_send`, `QueuePair::post_recv` and
//! `CompletionQueue::poll` (measured in `post_send_locked`,
//! `post_recv_locked` and `fast_poll`, the driver's functions their inline
//! dispatch calls), the same as [`crate::ibv`]'s.

use uverbs::device::Gid;
use uverbs::qp::{Mtu, QpAttr, QpState, RcConnect, RcPeer};
use uverbs::wr::{
    Payload, RecvWr, Remote, SendFlags, SendOp, SendWr, Sge, WcOpcode, WcStatus, WorkCompletion,
};
use uverbs::{AccessFlags, CompletionQueue, QpInit, QpType, QueuePair};

use crate::{Case, Counts, Pair, BATCH, BYTES, GID_INDEX, PORT, TARGET_OFFSET};

const ACCESS: AccessFlags = AccessFlags::LOCAL_WRITE
    .union(AccessFlags::REMOTE_WRITE)
    .union(AccessFlags::REMOTE_READ);

/// A completion's work request id, status, opcode and QP number: the one
/// place the loops read a [`WorkCompletion`].
fn fields(wc: &WorkCompletion) -> (u64, WcStatus, Option<WcOpcode>, u32) {
    (wc.wr_id(), wc.status(), wc.opcode(), wc.qp_num())
}

/// Fails unless `wc` is the successful `opcode` completion of work request
/// `wr_id` on QP `qp_num`.
fn expect(
    wc: &WorkCompletion,
    what: &str,
    wr_id: u64,
    opcode: WcOpcode,
    qp_num: u32,
) -> Result<(), String> {
    if fields(wc) != (wr_id, WcStatus::Success, Some(opcode), qp_num) {
        return Err(format!(
            "ours: {what}: completion {:?}, expected work request {wr_id} {opcode:?} on QP {qp_num}",
            fields(wc)
        ));
    }
    Ok(())
}

/// RESET -> INIT -> RTR -> RTS towards `dest_qpn` at `gid`: the
/// library's [`RcConnect`] steps (rdma-core's values, as [`crate::ibv`]
/// sends them; RoCE).
fn connect(qp: &QueuePair, dest_qpn: u32, gid: [u8; 16], mtu: Mtu) -> Result<(), String> {
    let how = RcConnect::new(mtu)
        .access(ACCESS)
        .port(PORT)
        .gid_index(GID_INDEX as u8);
    for (step, attr) in how.steps(RcPeer::new(dest_qpn, Gid::from_raw(gid))) {
        qp.modify(&attr)
            .map_err(|e| format!("ours: modify_qp {step}: {e}"))?;
    }
    Ok(())
}

impl crate::cm::CmQp for QueuePair {
    fn qp_num(&self) -> u32 {
        QueuePair::qp_num(self)
    }
    fn modify(&self, _state: QpState, attr: &QpAttr) -> Result<(), String> {
        QueuePair::modify(self, attr).map_err(|e| format!("ours: modify_qp: {e}"))
    }
}

/// The QPs, CQs and MR of one run; fields drop in order (QPs first), then
/// the cm link of an iWARP pair.
struct Objects {
    qp_a: QueuePair,
    qp_b: QueuePair,
    cq_a: CompletionQueue,
    cq_b: CompletionQueue,
    _cm: Option<crate::cm::Link>,
    /// Post through the `&mut self` calls (`post_send_exclusive`,
    /// `post_recv_exclusive`), which take no lock.
    exclusive: bool,
}

impl Objects {
    /// A's CQ and QP, for [`wait_checked`].
    fn a(&self) -> (&CompletionQueue, &QueuePair) {
        (&self.cq_a, &self.qp_a)
    }

    /// B's CQ and QP, for [`wait_checked`].
    fn b(&self) -> (&CompletionQueue, &QueuePair) {
        (&self.cq_b, &self.qp_b)
    }

    /// Posts `wrs` on QP A, shared or exclusive as the run asks.
    ///
    /// # Safety
    ///
    /// As for `QueuePair::post_send`.
    unsafe fn post_send(&mut self, wrs: &[SendWr<'_>]) -> Result<(), uverbs::Error> {
        if self.exclusive {
            // SAFETY: forwarded to the caller.
            unsafe { self.qp_a.post_send_exclusive(wrs) }
        } else {
            // SAFETY: forwarded to the caller.
            unsafe { self.qp_a.post_send(wrs) }
        }
    }

    /// Posts `wrs` on QP B, as `post_send`.
    ///
    /// # Safety
    ///
    /// As for `QueuePair::post_recv`.
    unsafe fn post_recv(&mut self, wrs: &[RecvWr<'_>]) -> Result<(), uverbs::Error> {
        if self.exclusive {
            // SAFETY: forwarded to the caller.
            unsafe { self.qp_b.post_recv_exclusive(wrs) }
        } else {
            // SAFETY: forwarded to the caller.
            unsafe { self.qp_b.post_recv(wrs) }
        }
    }
}

/// The case's loop: A sends into `buf`'s slots (through QP B), each
/// iteration waited for with [`crate::wait_for`]; the slots checked with
/// [`crate::landed`] before the QPs go.
pub fn run(pair: &Pair, buf: &mut [u8], exclusive: bool) -> Result<Counts, String> {
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
    // after the QPs), and nothing else touches it meanwhile but the loops,
    // which write the source only before posting and read the slots only
    // once their requests completed.
    let mr = unsafe { pd.reg_mr(buf.as_mut_ptr(), buf.len(), ACCESS) }
        .map_err(|e| format!("ours: reg_mr: {e}"))?;
    // The inline case posts every receive before its loop.
    let inline = pair.case == Case::InlineSend;
    let recv_depth = if inline { pair.iters as u32 } else { 16 };
    let cq = |cqe| {
        ctx.create_cq(cqe, None)
            .map_err(|e| format!("ours: create_cq: {e}"))
    };
    let (cq_a, cq_b) = (cq(16)?, cq(recv_depth + 16)?);
    let qp = |cq, max_recv_wr, max_inline| {
        let init = QpInit::new(QpType::Rc, cq, cq)
            .max_recv_wr(max_recv_wr)
            .max_inline(max_inline)
            .max_send_sge(pair.case.send_sges());
        pd.create_qp(&init)
            .map_err(|e| format!("ours: create_qp: {e}"))
    };
    let qp_a = qp(&cq_a, 16, if inline { BYTES as u32 } else { 0 })?;
    let qp_b = qp(&cq_b, recv_depth, 0)?;
    let cm = match &pair.cm {
        Some(addr) => {
            let link = crate::cm::connect(addr, &qp_a, &qp_b)?;
            for qp in [&qp_a, &qp_b] {
                let state = qp
                    .established()
                    .map_err(|e| format!("ours: established: {e}"))?;
                if state != QpState::Rts {
                    return Err(format!("ours: the QP is {state:?} after ESTABLISHED"));
                }
            }
            Some(link)
        }
        None => {
            let gid = ctx
                .query_gid(PORT, GID_INDEX)
                .map_err(|e| format!("ours: query_gid: {e}"))?
                .raw();
            connect(&qp_a, qp_b.qp_num(), gid, pair.mtu)?;
            connect(&qp_b, qp_a.qp_num(), gid, pair.mtu)?;
            None
        }
    };
    let mut objs = Objects {
        qp_a,
        qp_b,
        cq_a,
        cq_b,
        _cm: cm,
        exclusive,
    };
    let base = buf.as_ptr() as u64;
    let source = [Sge {
        addr: base,
        length: BYTES as u32,
        lkey: mr.lkey(),
    }];
    let slot = |k: usize| base + (TARGET_OFFSET + k * BYTES) as u64;
    let remote = |k: usize| Remote {
        addr: slot(k),
        rkey: mr.rkey(),
    };
    // What a READ reads: the source (in the same region, as B's).
    let remote_source = Remote {
        addr: base,
        rkey: mr.rkey(),
    };
    let recv_sge = |k: usize| Sge {
        addr: slot(k),
        length: BYTES as u32,
        lkey: mr.lkey(),
    };
    let counts = match pair.case {
        Case::Write => write(pair, &mut objs, &source, remote(0))?,
        Case::WriteBatch => write_batch(pair, &mut objs, &source, &remote)?,
        Case::SendRecv => send_recv(pair, &mut objs, &source, recv_sge(0))?,
        Case::InlineSend => inline_send(pair, &mut objs, &recv_sge)?,
        Case::Read => read(pair, &mut objs, recv_sge(0), remote_source)?,
        Case::WriteGather2 => {
            let half = BYTES as u32 / 2;
            let halves = [
                Sge {
                    length: half,
                    ..source[0]
                },
                Sge {
                    addr: base + u64::from(half),
                    length: half,
                    ..source[0]
                },
            ];
            write(pair, &mut objs, &halves, remote(0))?
        }
    };
    crate::landed(pair, buf)?;
    drop(objs);
    drop(mr);
    Ok(counts)
}

/// Waits (counted in `counts`) for the one completion of iteration `i` on
/// `cq` and checks it: wr_id `i`, `opcode`, on `qp`.
fn wait_checked(
    counts: &mut Counts,
    (cq, qp): (&CompletionQueue, &QueuePair),
    what: &str,
    i: usize,
    opcode: WcOpcode,
) -> Result<(), String> {
    let mut wc = [WorkCompletion::default(); 1];
    crate::wait_for(counts, what, i, 1, |got| {
        cq.poll(&mut wc[got..])
            .map_err(|e| format!("ours: poll: {e}"))
    })?;
    expect(&wc[0], what, i as u64, opcode, qp.qp_num())
}

/// A signalled SEND or WRITE `wr_id` of `payload`.
fn send_wr<'a>(wr_id: u64, op: SendOp, flags: SendFlags, payload: Payload<'a>) -> SendWr<'a> {
    SendWr::new(wr_id, op, payload).flags(flags)
}

/// Case 1: one signalled WRITE per iteration.
fn write(pair: &Pair, o: &mut Objects, source: &[Sge], remote: Remote) -> Result<Counts, String> {
    let mut counts = Counts::default();
    let op = SendOp::RdmaWrite { remote, imm: None };
    for i in 0..pair.iters {
        let wr = send_wr(i as u64, op, SendFlags::SIGNALED, Payload::Sges(source));
        counts.posts += 1;
        // SAFETY: the source bytes stay untouched until the completion is
        // polled below, and the MR outlives the QP's use of them.
        unsafe { o.post_send(&[wr]) }.map_err(|e| format!("ours: post_send {i}: {e}"))?;
        wait_checked(&mut counts, o.a(), "WRITE", i, WcOpcode::RdmaWrite)?;
    }
    Ok(counts)
}

/// Case 5: one signalled READ of `remote` into `target` per iteration.
fn read(pair: &Pair, o: &mut Objects, target: Sge, remote: Remote) -> Result<Counts, String> {
    let mut counts = Counts::default();
    let target = [target];
    let op = SendOp::RdmaRead { remote };
    for i in 0..pair.iters {
        let wr = send_wr(i as u64, op, SendFlags::SIGNALED, Payload::Sges(&target));
        counts.posts += 1;
        // SAFETY: the target slot is read only after the completion, polled
        // below (by `crate::landed`, after the loop); the MR outlives the
        // QP's use of it.
        unsafe { o.post_send(&[wr]) }.map_err(|e| format!("ours: post_send {i}: {e}"))?;
        wait_checked(&mut counts, o.a(), "READ", i, WcOpcode::RdmaRead)?;
    }
    Ok(counts)
}

/// Case 2: [`BATCH`] WRITEs per `post_send`, into slots 0..BATCH.
fn write_batch(
    pair: &Pair,
    o: &mut Objects,
    source: &[Sge],
    remote: &dyn Fn(usize) -> Remote,
) -> Result<Counts, String> {
    let mut counts = Counts::default();
    let signalled = Case::WriteBatch.signalled(pair.iwarp());
    let mut wc = [WorkCompletion::default(); BATCH];
    for i in 0..pair.iters {
        let wrs: [SendWr; BATCH] = std::array::from_fn(|k| {
            let flags = if k >= BATCH - signalled {
                SendFlags::SIGNALED
            } else {
                SendFlags::empty()
            };
            let op = SendOp::RdmaWrite {
                remote: remote(k),
                imm: None,
            };
            send_wr((i * BATCH + k) as u64, op, flags, Payload::Sges(source))
        });
        counts.posts += 1;
        // SAFETY: as in `write`: the last request is signalled, and its
        // completion (polled below) follows the earlier ones'.
        unsafe { o.post_send(&wrs) }.map_err(|e| format!("ours: post_send batch {i}: {e}"))?;
        crate::wait_for(&mut counts, "WRITE batch", i, signalled, |got| {
            o.cq_a
                .poll(&mut wc[got..signalled])
                .map_err(|e| format!("ours: poll: {e}"))
        })?;
        for (k, c) in wc[..signalled].iter().enumerate() {
            let wr_id = (i * BATCH + BATCH - signalled + k) as u64;
            expect(
                c,
                "WRITE batch",
                wr_id,
                WcOpcode::RdmaWrite,
                o.qp_a.qp_num(),
            )?;
        }
    }
    Ok(counts)
}

/// Case 3: a receive on B, a SEND on A, both completions polled.
fn send_recv(pair: &Pair, o: &mut Objects, source: &[Sge], target: Sge) -> Result<Counts, String> {
    let mut counts = Counts::default();
    let target = [target];
    for i in 0..pair.iters {
        let rwr = RecvWr {
            wr_id: i as u64,
            sges: &target,
        };
        counts.post_recvs += 1;
        // SAFETY: the slot is not touched until the receive's completion
        // is polled below; the MR outlives the QP's use of it.
        unsafe { o.post_recv(&[rwr]) }.map_err(|e| format!("ours: post_recv {i}: {e}"))?;
        let op = SendOp::Send { imm: None };
        let wr = send_wr(i as u64, op, SendFlags::SIGNALED, Payload::Sges(source));
        counts.posts += 1;
        // SAFETY: as in `write`.
        unsafe { o.post_send(&[wr]) }.map_err(|e| format!("ours: post_send {i}: {e}"))?;
        wait_checked(&mut counts, o.a(), "SEND", i, WcOpcode::Send)?;
        wait_checked(&mut counts, o.b(), "RECV", i, WcOpcode::Recv)?;
    }
    Ok(counts)
}

/// Case 4: inline SEND `i` of [`crate::pattern`]`(i)` into B's receive
/// `i`, all posted before the loop (not measured) and never polled.
fn inline_send(
    pair: &Pair,
    o: &mut Objects,
    recv_sge: &dyn Fn(usize) -> Sge,
) -> Result<Counts, String> {
    let sges: Vec<[Sge; 1]> = (0..pair.iters).map(|k| [recv_sge(k)]).collect();
    let rwrs: Vec<RecvWr> = sges
        .iter()
        .enumerate()
        .map(|(k, s)| RecvWr {
            wr_id: k as u64,
            sges: s,
        })
        .collect();
    // SAFETY: slot k is read only by `crate::landed`, after SEND k
    // completed; the MR outlives the QP's use of the slots.
    unsafe { o.post_recv(&rwrs) }.map_err(|e| format!("ours: post_recv (all): {e}"))?;
    let mut counts = Counts::default();
    for i in 0..pair.iters {
        let data = crate::pattern(i);
        let segs: [&[u8]; 1] = [&data];
        let op = SendOp::Send { imm: None };
        let wr = send_wr(i as u64, op, SendFlags::SIGNALED, Payload::Inline(&segs));
        counts.posts += 1;
        // SAFETY: the payload is inline, copied during the call.
        unsafe { o.post_send(&[wr]) }.map_err(|e| format!("ours: post_send {i}: {e}"))?;
        wait_checked(&mut counts, o.a(), "inline SEND", i, WcOpcode::Send)?;
    }
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
