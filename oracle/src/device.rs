//! What a ConnectX does after a doorbell, for the QPs of one emulated
//! kernel: it reads each QP's doorbell record, executes the send WQEs
//! libmlx5 wrote into the queue buffer since the last run, moves bytes
//! between the memory regions the kernel registered (loopback: every QP
//! is on the same port of the same device), consumes receive WQEs and
//! writes CQEs where libmlx5 polls them. A QP on an SRQ takes the SRQ's
//! WQEs in list order (each WQE's `next_wqe_index` names the next), up to
//! the SRQ's doorbell counter; its CQEs name the WQE by index
//! (`wqe_counter`) and the QP by user index; an SRQ's WQEs are not
//! flushed when a QP on it goes to the error state; the SRQ's limit
//! disarms it once fewer WQEs remain (no async event is delivered).
//!
//! Nothing runs by itself: the tests call [`Mlx5Kernel::run_device`] after
//! posting, as if the doorbell had rung (the UAR pages are plain memory,
//! so a write to them wakes nothing; what libmlx5 wrote there stays for
//! the tests to read).
//!
//! What it checks, as the hardware would: each local key (its PD, bounds,
//! local write for anything the device writes), each remote key (PD,
//! bounds, `REMOTE_WRITE`/`READ`/`ATOMIC` of the region and of the
//! responder QP), the receive buffer's length. A failure completes the WQE
//! with an error CQE (syndrome as mlx5's) and moves the QP to the error
//! state, whose WQEs complete flushed.
//!
//! What it does not model: retries and timers (a SEND to an RC QP with no
//! receive posted waits for the next run, as if the RNR retry count were
//! infinite), PSNs, MTU segmentation, fences (every WQE executes in
//! order anyway), the requester's scatter-to-CQE (READ and atomic
//! results; mlx5_ib enables it only with `sq_sig_all` or
//! `MLX5_QP_FLAG_ALLOW_SCATTER_CQE`), solicited events and
//! CQ arming, CQ overrun (the CQE is written whatever the consumer
//! index), GRHs (UD over InfiniBand without one; over RoCE the GRH bytes
//! are not written either), and any firmware vendor syndrome but the
//! flush's.

use std::os::fd::AsRawFd;
use uverbs_uapi::{
    IB_UVERBS_ACCESS_LOCAL_WRITE, IB_UVERBS_ACCESS_REMOTE_ATOMIC, IB_UVERBS_ACCESS_REMOTE_READ,
    IB_UVERBS_ACCESS_REMOTE_WRITE, MLX5_QP_FLAG_SCATTER_CQE, MLX5_QP_FLAG_SIGNATURE,
};

use crate::cqe::{opcode, syndrome, wqe_opcode, Completion, INLINE_SCATTER_64};
use crate::kernel::Mlx5Kernel;
use crate::qp::{Qp, QpState, QPT_RC, QPT_UD};

/// Bytes of a send queue basic block (`MLX5_SEND_WQE_BB`).
const BB: u64 = 64;
/// `MLX5_WQE_CTRL_CQ_UPDATE` in `fm_ce_se`: a signalled WQE.
const CQ_UPDATE: u8 = 0x08;
/// `MLX5_INLINE_SEG` in an inline segment's byte count.
const INLINE_SEG: u32 = 0x8000_0000;
/// `MLX5_INVALID_LKEY`: ends a receive WQE's scatter list.
const INVALID_LKEY: u32 = 0x100;
/// The bytes a UD receive buffer keeps for the GRH, before the payload.
const GRH_BYTES: usize = 40;

/// One data segment: `byte_count`, `lkey`, `addr`.
#[derive(Clone, Copy, Debug)]
struct Sge {
    len: u32,
    lkey: u32,
    addr: u64,
}

/// A send WQE as the device reads it.
#[derive(Clone, Debug)]
struct SendWqe {
    opcode: u8,
    /// Its index (the control segment's, libmlx5's `cur_post`).
    index: u16,
    /// Basic blocks it spans.
    bbs: u32,
    signalled: bool,
    imm: [u8; 4],
    /// UD: the AV's destination QP and Q_Key.
    dqpn: u32,
    qkey: u32,
    /// The remote address segment.
    raddr: u64,
    rkey: u32,
    /// The atomic segment: swap or add, compare.
    swap_add: u64,
    compare: u64,
    /// Data segments, or the inline data.
    sges: Vec<Sge>,
    inline: Option<Vec<u8>>,
}

/// How a WQE ended.
enum Outcome {
    /// Done; the requester completes it (if signalled).
    Done { byte_cnt: u32 },
    /// Failed with this syndrome: an error CQE, the QP to error.
    Failed(u8),
    /// Not executable yet (no receive posted at an RC responder): left
    /// for the next run.
    Wait,
}

fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

fn be64(b: &[u8], at: usize) -> u64 {
    u64::from_be_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

/// Reads `len` bytes of user memory.
///
/// # Safety
///
/// `addr..addr + len` is readable (the caller of `run_device` promised
/// that for the queues, doorbell records and registered regions; every
/// region access is bounds-checked against its MR first).
unsafe fn read_mem(addr: u64, len: usize) -> Vec<u8> {
    let mut out = vec![0; len];
    // SAFETY: the caller's promise; `out` has `len` bytes.
    unsafe { std::ptr::copy_nonoverlapping(addr as *const u8, out.as_mut_ptr(), len) };
    out
}

/// Writes `bytes` to user memory.
///
/// # Safety
///
/// `addr..addr + bytes.len()` is writable (as [`read_mem`]).
unsafe fn write_mem(addr: u64, bytes: &[u8]) {
    // SAFETY: the caller's promise.
    unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), addr as *mut u8, bytes.len()) };
}

/// `len` bytes of a ring of `size` bytes at `base`, from `offset`,
/// wrapping at its end (a WQE, or its inline data, may run past the
/// SQ's end into its start).
///
/// # Safety
///
/// `base..base + size` is readable.
unsafe fn read_ring(base: u64, size: u64, offset: u64, len: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(len);
    let mut at = offset % size;
    while out.len() < len {
        let n = ((size - at) as usize).min(len - out.len());
        // SAFETY: `at + n <= size`: inside the ring (the caller's promise).
        out.extend(unsafe { read_mem(base + at, n) });
        at = (at + n as u64) % size;
    }
    out
}

/// The doorbell record's two big-endian counters: receive, send.
///
/// # Safety
///
/// `db` is the 8 readable bytes of a live QP's doorbell record.
unsafe fn doorbell(db: u64) -> (u16, u16) {
    // SAFETY: the caller's promise.
    let b = unsafe { read_mem(db, 8) };
    (be32(&b, 0) as u16, be32(&b, 4) as u16)
}

impl Mlx5Kernel {
    /// Runs the device until nothing more can execute: for every QP (in
    /// handle order), its send WQEs up to its doorbell record's counter if
    /// it is ready to send, or every posted WQE flushed if it is in the
    /// error state. Returns the WQEs executed or flushed (send and
    /// receive).
    ///
    /// # Safety
    ///
    /// Every live QP's queue buffer and doorbell record, every live CQ's
    /// buffer and every registered memory region are mapped, readable and
    /// writable, as they were when the kernel accepted them (libmlx5 keeps
    /// its queues until it destroys the object; the test keeps its
    /// buffers until after deregistering), and nothing else writes them
    /// during the call.
    pub unsafe fn run_device(&mut self) -> usize {
        let mut total = 0;
        loop {
            let handles: Vec<u32> = self.qps.keys().copied().collect();
            let mut progress = 0;
            for h in handles {
                // SAFETY: the caller's promise, passed on.
                progress += unsafe { self.run_qp(h) };
            }
            if progress == 0 {
                return total;
            }
            total += progress;
        }
    }

    /// One QP's turn: execute or flush what its doorbell record announces.
    ///
    /// # Safety
    ///
    /// As [`run_device`](Self::run_device).
    unsafe fn run_qp(&mut self, h: u32) -> usize {
        let mut done = 0;
        loop {
            let Some(&qp) = self.qps.get(&h) else {
                return done;
            };
            // SAFETY: a live QP's doorbell record (the caller's promise).
            let (rq_db, sq_db) = unsafe { doorbell(qp.req.db_addr) };
            if qp.state == QpState::Err {
                // SAFETY: as above.
                return done + unsafe { self.flush(h, rq_db, sq_db) };
            }
            if qp.state != QpState::Rts || qp.sq_ci as u16 == sq_db || qp.req.sq_wqe_count == 0 {
                return done;
            }
            // SAFETY: the QP's buffer (the caller's promise).
            let wqe = unsafe { self.read_send_wqe(&qp) };
            // SAFETY: as above.
            let outcome = unsafe { self.execute(&qp, &wqe) };
            let cqe = |opcode, byte_cnt, syndrome| Completion {
                opcode,
                qpn: qp.qpn,
                wqe_opcode: wqe.opcode,
                wqe_counter: wqe.index,
                uidx: qp.req.uidx,
                byte_cnt,
                syndrome,
                ..Default::default()
            };
            match outcome {
                Outcome::Wait => return done,
                Outcome::Done { byte_cnt } => {
                    if wqe.signalled {
                        // SAFETY: the send CQ's buffer (the caller's promise).
                        unsafe { self.push_cqe(qp.send_cq, cqe(opcode::REQ, byte_cnt, 0)) };
                    }
                }
                Outcome::Failed(synd) => {
                    // SAFETY: as above.
                    unsafe { self.push_cqe(qp.send_cq, cqe(opcode::REQ_ERR, 0, synd)) };
                    self.qps.get_mut(&h).expect("live").state = QpState::Err;
                }
            }
            self.qps.get_mut(&h).expect("live").sq_ci = qp.sq_ci.wrapping_add(wqe.bbs);
            done += 1;
        }
    }

    /// The error state: every send WQE up to the send counter and every
    /// receive WQE up to the receive counter completes with a flush error.
    ///
    /// # Safety
    ///
    /// As [`run_device`](Self::run_device).
    unsafe fn flush(&mut self, h: u32, rq_db: u16, sq_db: u16) -> usize {
        let mut done = 0;
        let qp = self.qps[&h];
        let mut sq_ci = qp.sq_ci;
        while qp.req.sq_wqe_count != 0 && sq_ci as u16 != sq_db {
            let q = Qp { sq_ci, ..qp };
            // SAFETY: the QP's buffer (the caller's promise).
            let wqe = unsafe { self.read_send_wqe(&q) };
            let c = Completion {
                opcode: opcode::REQ_ERR,
                qpn: qp.qpn,
                wqe_opcode: wqe.opcode,
                wqe_counter: wqe.index,
                uidx: qp.req.uidx,
                syndrome: syndrome::WR_FLUSH,
                ..Default::default()
            };
            // SAFETY: the send CQ's buffer.
            unsafe { self.push_cqe(qp.send_cq, c) };
            sq_ci = sq_ci.wrapping_add(wqe.bbs);
            done += 1;
        }
        let mut rq_ci = qp.rq_ci;
        while qp.req.rq_wqe_count != 0 && rq_ci as u16 != rq_db {
            let c = Completion {
                opcode: opcode::RESP_ERR,
                qpn: qp.qpn,
                wqe_counter: rq_ci as u16,
                uidx: qp.req.uidx,
                syndrome: syndrome::WR_FLUSH,
                ..Default::default()
            };
            // SAFETY: the receive CQ's buffer.
            unsafe { self.push_cqe(qp.recv_cq, c) };
            rq_ci = rq_ci.wrapping_add(1);
            done += 1;
        }
        let q = self.qps.get_mut(&h).expect("live");
        (q.sq_ci, q.rq_ci) = (sq_ci, rq_ci);
        done
    }

    /// Parses the send WQE at the QP's consumer counter.
    ///
    /// # Safety
    ///
    /// The QP's queue buffer is readable.
    unsafe fn read_send_wqe(&self, qp: &Qp) -> SendWqe {
        let base = qp.req.buf_addr + qp.sq_offset();
        let size = u64::from(qp.req.sq_wqe_count) * BB;
        let start = u64::from(qp.sq_ci % qp.req.sq_wqe_count) * BB;
        // SAFETY: the SQ is readable (the caller's promise).
        let ctrl = unsafe { read_ring(base, size, start, 16) };
        let ds = (be32(&ctrl, 4) & 0x3f) as usize;
        // SAFETY: as above; at most 63 * 16 bytes, wrapping.
        let w = unsafe { read_ring(base, size, start, ds.max(1) * 16) };
        let op_idx = be32(&w, 0);
        let mut wqe = SendWqe {
            opcode: op_idx as u8,
            index: (op_idx >> 8) as u16,
            bbs: (ds.max(1) * 16).div_ceil(BB as usize) as u32,
            signalled: w[11] & CQ_UPDATE != 0,
            imm: w[12..16].try_into().expect("4 bytes"),
            dqpn: 0,
            qkey: 0,
            raddr: 0,
            rkey: 0,
            swap_add: 0,
            compare: 0,
            sges: Vec::new(),
            inline: None,
        };
        let mut at = 16;
        if qp.qp_type == QPT_UD {
            // struct mlx5_wqe_datagram_seg: the 48-byte address vector.
            wqe.qkey = be32(&w, at);
            wqe.dqpn = be32(&w, at + 8) & 0x00ff_ffff;
            at += 48;
        } else {
            let op = wqe.opcode;
            if matches!(
                op,
                wqe_opcode::RDMA_WRITE
                    | wqe_opcode::RDMA_WRITE_IMM
                    | wqe_opcode::RDMA_READ
                    | wqe_opcode::ATOMIC_CS
                    | wqe_opcode::ATOMIC_FA
            ) {
                wqe.raddr = be64(&w, at);
                wqe.rkey = be32(&w, at + 8);
                at += 16;
            }
            if matches!(op, wqe_opcode::ATOMIC_CS | wqe_opcode::ATOMIC_FA) {
                wqe.swap_add = be64(&w, at);
                wqe.compare = be64(&w, at + 8);
                at += 16;
            }
        }
        while at + 16 <= w.len() {
            let count = be32(&w, at);
            if count & INLINE_SEG != 0 {
                let len = (count & !INLINE_SEG) as usize;
                let end = (at + 4 + len).min(w.len());
                wqe.inline
                    .get_or_insert_with(Vec::new)
                    .extend_from_slice(&w[at + 4..end]);
                at += (4 + len).next_multiple_of(16);
            } else {
                let sge = Sge {
                    len: count,
                    lkey: be32(&w, at + 4),
                    addr: be64(&w, at + 8),
                };
                if sge.len != 0 {
                    wqe.sges.push(sge);
                }
                at += 16;
            }
        }
        wqe
    }

    /// Checks a key for an access of `len` bytes at `addr` by a QP of PD
    /// `pd`: the region it names, in that PD, covering the range, with
    /// `access` (0 for a local read).
    fn check_key(&self, key: u32, pd: u32, addr: u64, len: u64, access: u32) -> bool {
        self.mrs.values().any(|m| {
            m.key == key
                && m.pd == pd
                && addr >= m.start
                && addr
                    .checked_add(len)
                    .is_some_and(|end| end <= m.start + m.length)
                && m.access & access == access
        })
    }

    /// The bytes a WQE sends: its inline data, or its data segments read
    /// through their local keys. `None` for a bad key.
    ///
    /// # Safety
    ///
    /// Registered regions are readable.
    unsafe fn gather(&self, qp: &Qp, wqe: &SendWqe) -> Option<Vec<u8>> {
        if let Some(data) = &wqe.inline {
            return Some(data.clone());
        }
        let mut out = Vec::new();
        for s in &wqe.sges {
            if !self.check_key(s.lkey, qp.pd, s.addr, u64::from(s.len), 0) {
                return None;
            }
            // SAFETY: inside a registered region (checked).
            out.extend(unsafe { read_mem(s.addr, s.len as usize) });
        }
        Some(out)
    }

    /// Writes `data` across `sges` (each checked for local write in PD
    /// `pd`); false for a bad key (nothing written then).
    ///
    /// # Safety
    ///
    /// Registered regions are writable.
    unsafe fn scatter(&self, pd: u32, sges: &[Sge], mut data: &[u8]) -> bool {
        let lw = IB_UVERBS_ACCESS_LOCAL_WRITE;
        let room: u64 = sges.iter().map(|s| u64::from(s.len)).sum();
        if (data.len() as u64) > room {
            return false;
        }
        let mut plan = Vec::new();
        for s in sges {
            if data.is_empty() {
                break;
            }
            let n = (s.len as usize).min(data.len());
            if !self.check_key(s.lkey, pd, s.addr, n as u64, lw) {
                return false;
            }
            plan.push((s.addr, &data[..n]));
            data = &data[n..];
        }
        for (addr, bytes) in plan {
            // SAFETY: inside a registered, locally writable region (checked).
            unsafe { write_mem(addr, bytes) };
        }
        true
    }

    /// The live QP numbered `qpn`.
    fn qp_by_number(&self, qpn: u32) -> Option<Qp> {
        self.qps.values().find(|q| q.qpn == qpn).copied()
    }

    /// Executes one send WQE of `qp`.
    ///
    /// # Safety
    ///
    /// As [`run_device`](Self::run_device).
    unsafe fn execute(&mut self, qp: &Qp, wqe: &SendWqe) -> Outcome {
        let rc = qp.qp_type == QPT_RC;
        // A fault an unreliable transport does not report: the packet is
        // lost, the requester completes successfully.
        let remote_fault = |synd: u8, len: usize| {
            if rc {
                Outcome::Failed(synd)
            } else {
                Outcome::Done {
                    byte_cnt: len as u32,
                }
            }
        };
        let target = if qp.qp_type == QPT_UD {
            wqe.dqpn
        } else {
            qp.dest_qpn
        };
        let peer = self
            .qp_by_number(target)
            .filter(|p| p.qp_type == qp.qp_type && p.state >= QpState::Rtr);
        match wqe.opcode {
            wqe_opcode::NOP => Outcome::Done { byte_cnt: 0 },
            wqe_opcode::SEND | wqe_opcode::SEND_IMM => {
                // SAFETY: registered regions are readable.
                let Some(data) = (unsafe { self.gather(qp, wqe) }) else {
                    return Outcome::Failed(syndrome::LOCAL_PROT);
                };
                let Some(peer) = peer else {
                    // RC: the responder is not there yet: retried.
                    return if rc {
                        Outcome::Wait
                    } else {
                        remote_fault(0, data.len())
                    };
                };
                if peer.state == QpState::Err {
                    return remote_fault(syndrome::REMOTE_OP, data.len());
                }
                if qp.qp_type == QPT_UD && wqe.qkey != peer.qkey {
                    // A wrong Q_Key: the responder drops the datagram.
                    return Outcome::Done {
                        byte_cnt: data.len() as u32,
                    };
                }
                let imm = wqe.opcode == wqe_opcode::SEND_IMM;
                let op = if imm {
                    opcode::RESP_SEND_IMM
                } else {
                    opcode::RESP_SEND
                };
                // SAFETY: the caller's promise, passed on.
                unsafe { self.deliver(qp, &peer, op, wqe.imm, Some(&data), data.len()) }
            }
            wqe_opcode::RDMA_WRITE | wqe_opcode::RDMA_WRITE_IMM => {
                // SAFETY: registered regions are readable.
                let Some(data) = (unsafe { self.gather(qp, wqe) }) else {
                    return Outcome::Failed(syndrome::LOCAL_PROT);
                };
                let Some(peer) = peer else {
                    return if rc {
                        Outcome::Wait
                    } else {
                        remote_fault(0, 0)
                    };
                };
                let allowed = peer.access & IB_UVERBS_ACCESS_REMOTE_WRITE != 0
                    && self.check_key(
                        wqe.rkey,
                        peer.pd,
                        wqe.raddr,
                        data.len() as u64,
                        IB_UVERBS_ACCESS_REMOTE_WRITE,
                    );
                if !allowed {
                    return remote_fault(syndrome::REMOTE_ACCESS, data.len());
                }
                if wqe.opcode == wqe_opcode::RDMA_WRITE_IMM {
                    // It consumes a receive WQE: none posted waits (RC).
                    // SAFETY: a live QP's doorbell record (or its SRQ's).
                    if !unsafe { self.recv_ready(&peer) } {
                        return if rc {
                            Outcome::Wait
                        } else {
                            remote_fault(0, data.len())
                        };
                    }
                }
                // SAFETY: inside a registered, remotely writable region.
                unsafe { write_mem(wqe.raddr, &data) };
                if wqe.opcode == wqe_opcode::RDMA_WRITE_IMM {
                    // SAFETY: the caller's promise, passed on.
                    return unsafe {
                        self.deliver(qp, &peer, opcode::RESP_WR_IMM, wqe.imm, None, data.len())
                    };
                }
                Outcome::Done {
                    byte_cnt: data.len() as u32,
                }
            }
            wqe_opcode::RDMA_READ | wqe_opcode::ATOMIC_CS | wqe_opcode::ATOMIC_FA if rc => {
                let Some(peer) = peer else {
                    return Outcome::Wait;
                };
                let atomic = wqe.opcode != wqe_opcode::RDMA_READ;
                let len: u64 = if atomic {
                    8
                } else {
                    wqe.sges.iter().map(|s| u64::from(s.len)).sum()
                };
                if atomic && (wqe.raddr % 8 != 0 || len != 8) {
                    return Outcome::Failed(syndrome::REMOTE_INVAL_REQ);
                }
                let access = if atomic {
                    IB_UVERBS_ACCESS_REMOTE_ATOMIC
                } else {
                    IB_UVERBS_ACCESS_REMOTE_READ
                };
                if peer.access & access == 0
                    || !self.check_key(wqe.rkey, peer.pd, wqe.raddr, len, access)
                {
                    return Outcome::Failed(syndrome::REMOTE_ACCESS);
                }
                // SAFETY: inside a registered region (checked).
                let old = unsafe { read_mem(wqe.raddr, len as usize) };
                // The local buffer first: a bad local key leaves the
                // remote memory untouched.
                // SAFETY: registered regions are writable.
                if !unsafe { self.scatter(qp.pd, &wqe.sges, &old) } {
                    return Outcome::Failed(syndrome::LOCAL_PROT);
                }
                if atomic {
                    // A ConnectX's atomics treat the target as a
                    // big-endian 64-bit word, and return it so.
                    let value = be64(&old, 0);
                    let new = if wqe.opcode == wqe_opcode::ATOMIC_CS {
                        if value == wqe.compare {
                            wqe.swap_add
                        } else {
                            value
                        }
                    } else {
                        value.wrapping_add(wqe.swap_add)
                    };
                    // SAFETY: inside a registered, atomic-enabled region.
                    unsafe { write_mem(wqe.raddr, &new.to_be_bytes()) };
                }
                Outcome::Done {
                    byte_cnt: len as u32,
                }
            }
            // Reads and atomics on UC/UD, and what the model lacks.
            _ => Outcome::Failed(syndrome::LOCAL_QP_OP),
        }
    }

    /// The responder's side of a SEND or a WRITE with immediate: consume
    /// the next receive WQE of `peer`, scatter `data` into it (UD: after
    /// the 40 bytes kept for a GRH), write the responder CQE.
    ///
    /// # Safety
    ///
    /// As [`run_device`](Self::run_device).
    unsafe fn deliver(
        &mut self,
        qp: &Qp,
        peer: &Qp,
        op: u8,
        imm: [u8; 4],
        data: Option<&[u8]>,
        len: usize,
    ) -> Outcome {
        let rc = qp.qp_type == QPT_RC;
        let ud = qp.qp_type == QPT_UD;
        let sent = Outcome::Done {
            byte_cnt: len as u32,
        };
        // SAFETY: a live QP's doorbell record (or its SRQ's).
        if !unsafe { self.recv_ready(peer) } {
            // Receiver not ready: RC retries, UC and UD drop.
            return if rc { Outcome::Wait } else { sent };
        }
        // A QP on an SRQ takes the SRQ's next WQE (the CQE names it by
        // index); otherwise its RQ's next, by its consumer counter.
        let (counter, srq_sges) = match peer.srq {
            // SAFETY: a live SRQ with a posted WQE (checked above).
            Some(h) => {
                let (index, sges) = unsafe { self.srq_take(h) };
                (index, Some(sges))
            }
            None => (peer.rq_ci as u16, None),
        };
        let mut resp = Completion {
            opcode: op,
            qpn: peer.qpn,
            wqe_counter: counter,
            uidx: peer.req.uidx,
            byte_cnt: (len + if ud { GRH_BYTES } else { 0 }) as u32,
            imm_inval_pkey: if op == opcode::RESP_SEND { [0; 4] } else { imm },
            flags_rqpn: if ud { qp.qpn } else { 0 },
            slid: u16::from(self.infiniband_port),
            ..Default::default()
        };
        let mut failed = None;
        let mut scatter64 = None;
        if let Some(data) = data {
            let sges = match srq_sges {
                Some(sges) => sges
                    .into_iter()
                    .map(|(len, lkey, addr)| Sge { len, lkey, addr })
                    .collect(),
                // SAFETY: the responder's RQ is readable.
                None => unsafe { self.read_recv_wqe(peer) },
            };
            let mut bytes = if ud { vec![0; GRH_BYTES] } else { Vec::new() };
            bytes.extend_from_slice(data);
            let room: u64 = sges.iter().map(|s| u64::from(s.len)).sum();
            if bytes.len() as u64 > room {
                failed = Some((syndrome::LOCAL_LENGTH, syndrome::REMOTE_INVAL_REQ));
            } else if let Some(room) = self.scatter_to_cqe(peer).filter(|&r| data.len() <= r) {
                // The QP's cs_res: a short message goes into the CQE, and
                // libmlx5's poll copies it into the receive buffers.
                if room == 32 {
                    let mut d = [0u8; 32];
                    d[..data.len()].copy_from_slice(data);
                    resp.scatter32 = Some(d);
                } else {
                    scatter64 = Some(data.to_vec());
                }
            } else {
                // The GRH space is skipped, not written: no GRH here.
                let rest = skip_prefix(&sges, if ud { GRH_BYTES } else { 0 });
                // SAFETY: registered regions are writable.
                if !unsafe { self.scatter(peer.pd, &rest, data) } {
                    failed = Some((syndrome::LOCAL_PROT, syndrome::REMOTE_OP));
                }
            }
        }
        let p = self.qps.get_mut(&peer.handle).expect("live");
        if p.srq.is_none() {
            p.rq_ci = p.rq_ci.wrapping_add(1);
        }
        if let Some((theirs, ours)) = failed {
            p.state = QpState::Err;
            resp = Completion {
                opcode: opcode::RESP_ERR,
                syndrome: theirs,
                ..resp
            };
            // SAFETY: the responder's CQ buffer.
            unsafe { self.push_cqe(peer.recv_cq, resp) };
            return if rc { Outcome::Failed(ours) } else { sent };
        }
        if let Some(data) = scatter64 {
            // SAFETY: the responder's CQ buffer.
            unsafe { self.push_cqe_scatter64(peer.recv_cq, resp, &data) };
        } else {
            // SAFETY: the responder's CQ buffer.
            unsafe { self.push_cqe(peer.recv_cq, resp) };
        }
        sent
    }

    /// Whether `qp` has a receive WQE posted and not yet taken: in its RQ,
    /// or in its SRQ.
    ///
    /// # Safety
    ///
    /// The QP's (or its SRQ's) doorbell record is readable.
    unsafe fn recv_ready(&self, qp: &Qp) -> bool {
        match qp.srq {
            // SAFETY: the caller's promise.
            Some(h) => unsafe { self.srq_ready(h) },
            None => {
                // SAFETY: the caller's promise.
                let (rq_db, _) = unsafe { doorbell(qp.req.db_addr) };
                qp.req.rq_wqe_count != 0 && qp.rq_ci as u16 != rq_db
            }
        }
    }

    /// How many bytes of a received message the device puts into the
    /// responder's CQE instead of its receive buffers: mlx5_ib sets the
    /// QP's `cs_res` for an RC or UC QP created with
    /// `MLX5_QP_FLAG_SCATTER_CQE`, 32 bytes with 64-byte CQEs, 64 with
    /// 128-byte ones.
    fn scatter_to_cqe(&self, qp: &Qp) -> Option<usize> {
        if qp.qp_type == QPT_UD || qp.req.flags & MLX5_QP_FLAG_SCATTER_CQE == 0 {
            return None;
        }
        let cq = self.cqs.get(&qp.recv_cq)?;
        Some(if cq.req.cqe_size == 128 { 64 } else { 32 })
    }

    /// A 128-byte CQE whose first half holds up to 64 bytes of data
    /// (`MLX5_INLINE_SCATTER_64`).
    ///
    /// # Safety
    ///
    /// The CQ's buffer is writable.
    unsafe fn push_cqe_scatter64(&mut self, cq: u32, c: Completion, data: &[u8]) {
        let Some(q) = self.cqs.get(&cq) else {
            return;
        };
        let slot = u64::from(q.produced & (q.entries - 1));
        let addr = q.req.buf_addr + slot * u64::from(q.req.cqe_size);
        // SAFETY: the first half of a 128-byte CQE of the CQ's buffer.
        unsafe { write_mem(addr, data) };
        // SAFETY: as above.
        unsafe { self.push_cqe(cq, c) };
        let q = &self.cqs[&cq];
        let last = q.produced.wrapping_sub(1) & (q.entries - 1);
        let own = q.req.buf_addr + u64::from(last) * 128 + 127;
        // SAFETY: the op_own byte of the CQE just written.
        unsafe { write_mem(own, &[read_mem(own, 1)[0] | INLINE_SCATTER_64]) };
    }

    /// The data segments of the responder's next receive WQE, up to the
    /// first with `MLX5_INVALID_LKEY` (after the signature segment, where
    /// the QP has one).
    ///
    /// # Safety
    ///
    /// The QP's queue buffer is readable.
    unsafe fn read_recv_wqe(&self, qp: &Qp) -> Vec<Sge> {
        let size = 1usize << qp.req.rq_wqe_shift;
        let at = u64::from(qp.rq_ci % qp.req.rq_wqe_count) << qp.req.rq_wqe_shift;
        // SAFETY: inside the RQ (the caller's promise).
        let w = unsafe { read_mem(qp.req.buf_addr + at, size) };
        let first = usize::from(qp.req.flags & MLX5_QP_FLAG_SIGNATURE != 0);
        w.chunks_exact(16)
            .skip(first)
            .map(|s| Sge {
                len: be32(s, 0),
                lkey: be32(s, 4),
                addr: be64(s, 8),
            })
            .take_while(|s| s.lkey != INVALID_LKEY)
            .collect()
    }

    /// Writes a CQE at the CQ's producer index.
    ///
    /// # Safety
    ///
    /// The CQ's buffer is writable.
    unsafe fn push_cqe(&mut self, cq_handle: u32, c: Completion) {
        let Some(cq) = self.cqs.get_mut(&cq_handle) else {
            return;
        };
        let size = u64::from(cq.req.cqe_size);
        let slot = u64::from(cq.produced & (cq.entries - 1));
        // A 128-byte CQE keeps the 64 bytes libmlx5 parses in its second half.
        let addr = cq.req.buf_addr + slot * size + (size - 64);
        // SAFETY: inside the CQ's buffer of `entries` CQEs (the caller's promise).
        unsafe { write_mem(addr, &c.bytes(cq.produced, cq.entries)) };
        cq.produced = cq.produced.wrapping_add(1);
        // An armed CQ with a channel raises one event. A CQ is armed by a
        // doorbell on its UAR page's CQ register (0x20: the arm word, then
        // the CQ number, big-endian): armed while the register names it
        // with a value other than the one that fired last. The page keeps
        // only the last doorbell written, so of several CQs sharing it
        // only the last one armed is seen (enough for the tests). Not
        // modelled: solicited-only arming fires on any CQE.
        let Some(fd) = cq.channel else { return };
        let page = u32::from(cq.req.uar_page_index);
        let Some(doorbell) = self
            .uar_page(page)
            .map(|p| u64::from_be_bytes(p[0x20..0x28].try_into().expect("8 bytes")))
        else {
            return;
        };
        let cq = self.cqs.get_mut(&cq_handle).expect("looked up above");
        if doorbell & 0xff_ffff != u64::from(cq.cqn) || doorbell == cq.fired_arm {
            return;
        }
        cq.fired_arm = doorbell;
        if let Some(write) = self.channels.get(&fd) {
            let desc = cq.user_handle.to_ne_bytes();
            // SAFETY: 8 bytes from a live array to a pipe this kernel owns.
            let n = unsafe { libc::write(write.as_raw_fd(), desc.as_ptr().cast(), desc.len()) };
            assert_eq!(n, 8, "a completion event written");
        }
    }
}

/// The scatter list less its first `n` bytes.
fn skip_prefix(sges: &[Sge], mut n: usize) -> Vec<Sge> {
    let mut out = Vec::new();
    for s in sges {
        let take = n.min(s.len as usize);
        n -= take;
        if take < s.len as usize {
            out.push(Sge {
                len: s.len - take as u32,
                lkey: s.lkey,
                addr: s.addr + take as u64,
            });
        }
    }
    out
}
