//! What an mlx5 send WQE holds, written as libmlx5 44 writes it for RC, UC
//! and UD QPs: a control segment, then a datagram segment (UD: the address
//! vector) or a remote-address segment (RDMA and atomics) and an atomic
//! segment, and data segments or one inline segment,
//! in 16-byte units over 64-byte basic blocks that wrap at the SQ's end.
//! Only the bytes libmlx5 writes are written (an FAA leaves the atomic
//! segment's compare word as it was), so that the same posts leave the
//! same SQ bytes (`oracle/`).

use crate::command::QpType;
use crate::wr::{Payload, PostError, SendFlags, SendOp, SendWr};

/// `fm_ce_se`: produce a CQE (`MLX5_WQE_CTRL_CQ_UPDATE`).
pub(crate) const CTRL_CQ_UPDATE: u8 = 2 << 2;
/// `fm_ce_se`: solicited event (`MLX5_WQE_CTRL_SOLICITED`).
const CTRL_SOLICITED: u8 = 1 << 1;
/// `fm_ce_se`: wait for earlier READs and atomics (`MLX5_WQE_CTRL_FENCE`).
pub(crate) const CTRL_FENCE: u8 = 4 << 5;
/// The destination QP word's extended-AV bit (`MLX5_EXTENDED_UD_AV`).
const EXTENDED_UD_AV: u32 = 0x8000_0000;
/// Inline segment marker in its byte count (`MLX5_INLINE_SEG`).
const INLINE_SEG: u32 = 0x8000_0000;

/// Send WQE opcodes (`MLX5_OPCODE_*`).
mod opcode {
    pub(super) const RDMA_WRITE: u8 = 0x08;
    pub(super) const RDMA_WRITE_IMM: u8 = 0x09;
    pub(super) const SEND: u8 = 0x0a;
    pub(super) const SEND_IMM: u8 = 0x0b;
    pub(super) const RDMA_READ: u8 = 0x10;
    pub(super) const ATOMIC_CS: u8 = 0x11;
    pub(super) const ATOMIC_FA: u8 = 0x12;
}

/// What a QP's send requests are checked against and written with.
#[derive(Clone, Copy, Debug)]
pub(crate) struct SendLimits {
    /// The QP's number (in every control segment).
    pub(crate) qpn: u32,
    /// RC, UC or UD.
    pub(crate) qp_type: QpType,
    /// SGEs per request.
    pub(crate) max_sge: u32,
    /// Inline bytes per request.
    pub(crate) max_inline: u32,
}

/// The SQ: `bbs` basic blocks from `start`.
pub(crate) struct Sq {
    pub(crate) start: *mut u8,
    pub(crate) bbs: u32,
}

impl Sq {
    /// Basic block `idx` (< `bbs`).
    pub(crate) fn block(&self, idx: u32) -> *mut u8 {
        debug_assert!(idx < self.bbs);
        // SAFETY: within the SQ's `bbs` blocks.
        unsafe { self.start.add(idx as usize * 64) }
    }

    fn len(&self) -> usize {
        self.bbs as usize * 64
    }

    /// The offset `n` bytes after `at`, wrapping at the end.
    fn after(&self, at: usize, n: usize) -> usize {
        let next = at + n;
        if next >= self.len() {
            next - self.len()
        } else {
            next
        }
    }

    /// Stores a segment of `N` bytes at byte `offset` of block `idx`, which
    /// it does not leave (`offset + N` ≤ 64): no wrap to test.
    #[inline(always)]
    fn put_in_block<const N: usize>(&self, idx: u32, offset: usize, seg: &[u8; N]) {
        assert!(offset + N <= 64, "a segment within its block");
        // SAFETY: within block `idx` of the SQ (asserted above, folded away
        // for the callers' constant offsets); the device does not read
        // these blocks before the doorbell.
        unsafe {
            self.block(idx)
                .add(offset)
                .cast::<[u8; N]>()
                .write_unaligned(*seg)
        };
    }

    /// [`put`](Self::put) of a segment of `N` bytes: one unaligned store of
    /// the whole segment where it does not wrap (every segment but inline
    /// data's, which start on 16 bytes and never cross the end).
    #[inline(always)]
    fn put_seg<const N: usize>(&self, at: usize, seg: &[u8; N]) -> usize {
        if at + N <= self.len() {
            // SAFETY: `N` bytes from `at` lie within the SQ; the device does
            // not read these blocks before the doorbell.
            unsafe { self.start.add(at).cast::<[u8; N]>().write_unaligned(*seg) };
            self.after(at, N)
        } else {
            self.put(at, seg)
        }
    }

    /// Copies `bytes` to SQ offset `at`, wrapping at the end; answers the
    /// offset after them.
    fn put(&self, at: usize, bytes: &[u8]) -> usize {
        let first = bytes.len().min(self.len() - at);
        // SAFETY: `first` bytes fit before the end, the rest (shorter than
        // the SQ: a WQE is at most `max_sq_desc_sz`) from the start; the
        // device does not read these blocks before the doorbell.
        unsafe {
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), self.start.add(at), first);
            // Only across the end: a second `memcpy` call costs more than
            // the test.
            if first < bytes.len() {
                std::ptr::copy_nonoverlapping(
                    bytes.as_ptr().add(first),
                    self.start,
                    bytes.len() - first,
                );
            }
        }
        self.after(at, bytes.len())
    }
}

/// Writes a data segment (byte count, lkey, address; big-endian) at `to`.
///
/// # Safety
///
/// `to` is 16 writable bytes of a queue the device does not read yet.
pub(crate) unsafe fn put_data_seg(to: *mut u8, length: u32, lkey: u32, addr: u64) {
    let seg = data_seg(length, lkey, addr);
    // SAFETY: the caller's promise.
    unsafe { std::ptr::copy_nonoverlapping(seg.as_ptr(), to, 16) };
}

/// A data segment (`struct mlx5_wqe_data_seg`): byte count, lkey, address.
fn data_seg(length: u32, lkey: u32, addr: u64) -> [u8; 16] {
    let mut seg = [0u8; 16];
    seg[..4].copy_from_slice(&length.to_be_bytes());
    seg[4..8].copy_from_slice(&lkey.to_be_bytes());
    seg[8..].copy_from_slice(&addr.to_be_bytes());
    seg
}

/// A remote-address segment (`struct mlx5_wqe_raddr_seg`), its reserved
/// word zero.
fn raddr_seg(r: crate::wr::Remote) -> [u8; 16] {
    let mut seg = [0u8; 16];
    seg[..8].copy_from_slice(&r.addr.to_be_bytes());
    seg[8..12].copy_from_slice(&r.rkey.to_be_bytes());
    seg
}

/// The control segment of WQE number `cur_post` (its low 16 bits), of
/// `ds` 16-byte units: the opcode, the QP number, the QP's fence and
/// signal bits `fm_ce_se` with the request's own, the immediate data.
fn ctrl_seg(
    cur_post: u32,
    op: u8,
    limits: &SendLimits,
    ds: u32,
    fm_ce_se: u8,
    wr: &SendWr<'_>,
    imm: Option<u32>,
) -> [u8; 16] {
    let mut ctrl = [0u8; 16];
    ctrl[..4].copy_from_slice(&(((cur_post & 0xffff) << 8) | u32::from(op)).to_be_bytes());
    ctrl[4..8].copy_from_slice(&((limits.qpn << 8) | ds).to_be_bytes());
    let mut bits = fm_ce_se;
    if wr.flags.contains(SendFlags::SIGNALED) {
        bits |= CTRL_CQ_UPDATE;
    }
    if wr.flags.contains(SendFlags::SOLICITED) {
        bits |= CTRL_SOLICITED;
    }
    ctrl[11] = bits;
    ctrl[12..].copy_from_slice(&imm.map_or([0; 4], u32::to_be_bytes));
    ctrl
}

/// A request's parts as the WQE holds them.
struct Parts {
    opcode: u8,
    remote: Option<crate::wr::Remote>,
    /// The atomic segment: swap (CAS) or add (FAA), and CAS's compare.
    atomic: Option<(u64, Option<u64>)>,
    imm: Option<u32>,
}

fn parts(op: &SendOp) -> Parts {
    let (opcode, remote, atomic, imm) = match *op {
        SendOp::Send { imm: None } => (opcode::SEND, None, None, None),
        SendOp::Send { imm: Some(i) } => (opcode::SEND_IMM, None, None, Some(i)),
        SendOp::RdmaWrite { remote, imm: None } => (opcode::RDMA_WRITE, Some(remote), None, None),
        SendOp::RdmaWrite {
            remote,
            imm: Some(i),
        } => (opcode::RDMA_WRITE_IMM, Some(remote), None, Some(i)),
        SendOp::RdmaRead { remote } => (opcode::RDMA_READ, Some(remote), None, None),
        SendOp::CompareSwap {
            remote,
            compare,
            swap,
        } => (
            opcode::ATOMIC_CS,
            Some(remote),
            Some((swap, Some(compare))),
            None,
        ),
        SendOp::FetchAdd { remote, add } => {
            (opcode::ATOMIC_FA, Some(remote), Some((add, None)), None)
        }
        // Never written: `check_send` refuses them (`window_op`).
        SendOp::BindMw(_) | SendOp::LocalInv { .. } | SendOp::SendWithInv { .. } => {
            (opcode::SEND, None, None, None)
        }
    };
    Parts {
        opcode,
        remote,
        atomic,
        imm,
    }
}

/// Memory-window binds and invalidations, which this crate does not post
/// on mlx5 (it would need UMR WQEs).
fn window_op(op: &SendOp) -> bool {
    matches!(
        op,
        SendOp::BindMw(_) | SendOp::LocalInv { .. } | SendOp::SendWithInv { .. }
    )
}

/// Checks `wr` against the QP before anything is written: what libmlx5
/// refuses (too many SGEs, inline data beyond the WQE) and what this
/// crate's API refuses on every driver (a UD destination, an operation the
/// transport lacks, inline READs and atomics, a short or misaligned atomic).
pub(crate) fn check_send(limits: &SendLimits, wr: &SendWr<'_>) -> Result<(), PostError> {
    let name = wr.op.name();
    if window_op(&wr.op) {
        return Err(PostError::NotSupported {
            driver: "mlx5",
            what: name,
        });
    }
    let ud = limits.qp_type == QpType::Ud;
    match wr.ud {
        Some(dest) if ud && dest.av.is_none() => {
            return Err(PostError::NotSupported {
                driver: "mlx5",
                what: "an address handle of another driver",
            })
        }
        Some(_) if ud => {}
        None if !ud => {}
        given => {
            return Err(PostError::UdDestination {
                qp_type: limits.qp_type,
                missing: given.is_none(),
            })
        }
    }
    let Parts {
        opcode: op,
        remote,
        atomic,
        ..
    } = parts(&wr.op);
    let reads = matches!(
        op,
        opcode::RDMA_READ | opcode::ATOMIC_CS | opcode::ATOMIC_FA
    );
    let writes = matches!(op, opcode::RDMA_WRITE | opcode::RDMA_WRITE_IMM);
    if (limits.qp_type == QpType::Uc && reads) || (ud && (reads || writes)) {
        return Err(PostError::OpNotOnQpType {
            opcode: name,
            qp_type: limits.qp_type,
        });
    }
    match wr.payload {
        Payload::Sges(sges) => {
            if sges.len() > limits.max_sge as usize {
                return Err(PostError::TooManySges {
                    op: "post_send",
                    n: sges.len(),
                    max: limits.max_sge,
                });
            }
            let len: u64 = sges.iter().map(|s| u64::from(s.length)).sum();
            if len > u64::from(u32::MAX) {
                return Err(PostError::TooLong {
                    op: "post_send",
                    len,
                });
            }
            if atomic.is_some() {
                let addr = remote.map_or(0, |r| r.addr);
                if len < 8 || addr % 8 != 0 {
                    return Err(PostError::BadAtomic {
                        opcode: name,
                        len,
                        remote_addr: addr,
                    });
                }
            }
        }
        Payload::Inline(segs) => {
            if reads {
                return Err(PostError::InlineNotAllowed { opcode: name });
            }
            if segs.len() > limits.max_sge.max(1) as usize {
                return Err(PostError::TooManySges {
                    op: "post_send",
                    n: segs.len(),
                    max: limits.max_sge,
                });
            }
            let len: u64 = segs.iter().map(|s| s.len() as u64).sum();
            if len > u64::from(limits.max_inline) {
                return Err(PostError::InlineTooLong {
                    len,
                    max: limits.max_inline,
                });
            }
        }
    }
    Ok(())
}

/// The usual post, written without the general path: a SEND or RDMA
/// WRITE (with or without immediate) on an RC or UC QP from exactly one
/// non-empty SGE, or one inline segment within `max_inline`. Every check
/// of [`check_send`] passes for such a request (the caller checks the
/// queue's room); `None` for any other request, nothing written. The bytes
/// are [`write_send`]'s (the differential suite compares both paths with
/// libmlx5's).
#[inline(always)]
pub(crate) fn write_one_segment(
    sq: &Sq,
    idx: u32,
    cur_post: u32,
    limits: &SendLimits,
    fm_ce_se: u8,
    wr: &SendWr<'_>,
) -> Option<u32> {
    if wr.ud.is_some() || limits.qp_type == QpType::Ud {
        return None;
    }
    let (op, remote, imm) = match wr.op {
        SendOp::Send { imm: None } => (opcode::SEND, None, None),
        SendOp::Send { imm: Some(i) } => (opcode::SEND_IMM, None, Some(i)),
        SendOp::RdmaWrite { remote, imm: None } => (opcode::RDMA_WRITE, Some(remote), None),
        SendOp::RdmaWrite {
            remote,
            imm: Some(i),
        } => (opcode::RDMA_WRITE_IMM, Some(remote), Some(i)),
        _ => return None,
    };
    let applies = match wr.payload {
        Payload::Sges([sge]) => sge.length != 0 && limits.max_sge != 0,
        Payload::Inline([data]) => !data.is_empty() && data.len() <= limits.max_inline as usize,
        _ => false,
    };
    if !applies {
        return None;
    }
    // Control, a remote address and a data segment or an inline header:
    // at most 48 bytes, within the WQE's first block.
    let mut offset = 16;
    if let Some(r) = remote {
        sq.put_in_block(idx, offset, &raddr_seg(r));
        offset += 16;
    }
    let mut ds = offset as u32 / 16;
    // One segment of either kind (checked above).
    match wr.payload {
        Payload::Sges(sges) => {
            let sge = &sges[0];
            sq.put_in_block(idx, offset, &data_seg(sge.length, sge.lkey, sge.addr));
            ds += 1;
        }
        Payload::Inline(segs) => {
            let data = segs[0];
            sq.put_in_block(idx, offset, &(data.len() as u32 | INLINE_SEG).to_be_bytes());
            // The data may cross into the next blocks and the SQ's wrap.
            sq.put(idx as usize * 64 + offset + 4, data);
            ds += (data.len() as u32 + 4).div_ceil(16);
        }
    }
    sq.put_in_block(
        idx,
        0,
        &ctrl_seg(cur_post, op, limits, ds, fm_ce_se, wr, imm),
    );
    Some(ds)
}

/// Writes the WQE of a checked request at block `idx`, as WQE number
/// `cur_post` (its low 16 bits go in the control segment), with the fence,
/// and signal bits of the QP in `fm_ce_se`.
pub(crate) fn write_send(
    sq: &Sq,
    idx: u32,
    cur_post: u32,
    limits: &SendLimits,
    fm_ce_se: u8,
    wr: &SendWr<'_>,
) -> u32 {
    let Parts {
        opcode: op,
        remote,
        atomic,
        imm,
    } = parts(&wr.op);
    let start = idx as usize * 64;
    // Segments after the control segment; none reaches the SQ's end before
    // the data (the control segment starts a block, and it, a remote
    // address and an atomic segment are 48 bytes).
    let mut at = start + 16;
    let mut ds = 1u32;
    if let Some(dest) = wr.ud {
        // The AH's address vector with the destination QP (extended AV
        // bit set) and Q_Key (`set_datagram_seg`).
        let mut seg = *dest.av.expect("checked: a UD send has a vector");
        seg[..4].copy_from_slice(&dest.remote_qkey.to_be_bytes());
        seg[8..12].copy_from_slice(&(dest.remote_qpn | EXTENDED_UD_AV).to_be_bytes());
        at = sq.put_seg(at, &seg);
        ds += 3;
    }
    if let Some(r) = remote {
        at = sq.put_seg(at, &raddr_seg(r));
        ds += 1;
    }
    if let Some((swap_add, compare)) = atomic {
        at = sq.put_seg(at, &swap_add.to_be_bytes());
        match compare {
            Some(c) => at = sq.put_seg(at, &c.to_be_bytes()),
            // FAA: libmlx5 leaves the compare word as it was.
            None => at = sq.after(at, 8),
        }
        ds += 1;
    }
    match wr.payload {
        Payload::Inline(segs) if !segs.is_empty() => {
            let total: usize = segs.iter().map(|s| s.len()).sum();
            if total != 0 {
                let header = at;
                at = sq.after(at, 4);
                for s in segs {
                    at = sq.put(at, s);
                }
                sq.put_seg(header, &(total as u32 | INLINE_SEG).to_be_bytes());
                ds += (total as u32 + 4).div_ceil(16);
            }
        }
        Payload::Inline(_) => {}
        Payload::Sges(sges) => {
            for sge in sges.iter().filter(|s| s.length != 0) {
                let length = if atomic.is_some() { 8 } else { sge.length };
                at = sq.put_seg(at, &data_seg(length, sge.lkey, sge.addr));
                ds += 1;
            }
        }
    }
    sq.put_seg(
        start,
        &ctrl_seg(cur_post, op, limits, ds, fm_ce_se, wr, imm),
    );
    let _ = at;
    ds
}

#[cfg(test)]
mod window_op_tests {
    use super::*;
    use crate::wr::MwBind;

    /// Memory-window operations are refused before anything is written.
    #[test]
    fn window_operations_are_refused_typed() {
        let limits = SendLimits {
            qpn: 0x12,
            qp_type: QpType::Rc,
            max_sge: 4,
            max_inline: 64,
        };
        let bind = MwBind {
            mw_rkey: 0x101,
            rkey: 0x102,
            mr_lkey: 0x201,
            addr: 0x1000,
            length: 16,
            access: 2,
        };
        for (op, what) in [
            (SendOp::BindMw(bind), "BIND_MW"),
            (SendOp::LocalInv { rkey: 1 }, "LOCAL_INV"),
            (SendOp::SendWithInv { rkey: 1 }, "SEND_WITH_INV"),
        ] {
            let wr = SendWr::new(1, op, Payload::Sges(&[]));
            assert_eq!(
                check_send(&limits, &wr),
                Err(PostError::NotSupported {
                    driver: "mlx5",
                    what
                })
            );
        }
    }
}
