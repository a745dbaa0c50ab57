//! What an mlx5 send WQE holds, written as libmlx5 44 writes it for RC, UC
//! and UD QPs: a control segment, then a datagram segment (UD: the address
//! vector) or a remote-address segment (RDMA and atomics) and an atomic
//! segment, and data segments or one inline segment,
//! in 16-byte units over 64-byte basic blocks that wrap at the SQ's end.
//! Only the bytes libmlx5 writes are written (an FAA leaves the atomic
//! segment's compare word as it was), so that the same posts leave the
//! same SQ bytes (`oracle/`).

use crate::command::QpType;
use crate::wr::{Payload, PostError, SendFlags, SendOp, SendWr, UdDest};

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

/// A datagram segment (`struct mlx5_wqe_datagram_seg`, `set_datagram_seg`):
/// the AH's address vector `av` with the destination's Q_Key and QP number
/// (extended-AV bit set).
fn datagram_seg(av: &[u8; 48], dest: &UdDest<'_>) -> [u8; 48] {
    let mut seg = *av;
    seg[..4].copy_from_slice(&dest.remote_qkey.to_be_bytes());
    seg[8..12].copy_from_slice(&(dest.remote_qpn | EXTENDED_UD_AV).to_be_bytes());
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
            let len = sge_bytes(sges);
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

/// The usual post, written without the general path: a SEND (on UD
/// through an mlx5 address handle), an RDMA WRITE (RC, UC), an RDMA READ
/// or an atomic (RC, to an aligned address), with or without immediate
/// data, from exactly one non-empty SGE (of at least 8 bytes for an
/// atomic), or (a SEND or WRITE) one inline segment within `max_inline`. Every
/// check of [`check_send`] passes for such a request (the caller checks
/// the queue's room); `None` for any other request, nothing written. The
/// bytes are [`write_send`]'s (the differential suite compares both paths
/// with libmlx5's).
#[inline(always)]
pub(crate) fn write_one_segment<const GATHER: bool>(
    sq: &Sq,
    idx: u32,
    cur_post: u32,
    limits: &SendLimits,
    fm_ce_se: u8,
    wr: &SendWr<'_>,
) -> Option<u32> {
    let ud = limits.qp_type == QpType::Ud;
    // A UD request names its destination by an mlx5 address vector, an
    // RC or UC one names none.
    let datagram = match &wr.ud {
        None if !ud => None,
        Some(dest) if ud => Some((dest.av?, dest)),
        _ => return None,
    };
    let (op, remote, imm) = match wr.op {
        SendOp::Send { imm: None } => (opcode::SEND, None, None),
        SendOp::Send { imm: Some(i) } => (opcode::SEND_IMM, None, Some(i)),
        SendOp::RdmaWrite { remote, imm: None } if !ud => (opcode::RDMA_WRITE, Some(remote), None),
        SendOp::RdmaWrite {
            remote,
            imm: Some(i),
        } if !ud => (opcode::RDMA_WRITE_IMM, Some(remote), Some(i)),
        SendOp::RdmaRead { remote } if limits.qp_type == QpType::Rc => {
            (opcode::RDMA_READ, Some(remote), None)
        }
        SendOp::FetchAdd { .. } | SendOp::CompareSwap { .. } => {
            return write_atomic(sq, idx, cur_post, limits, fm_ce_se, wr)
        }
        _ => return None,
    };
    let applies = match wr.payload {
        Payload::Sges([sge]) => sge.length != 0 && limits.max_sge != 0,
        Payload::Sges(sges) if GATHER => gathers(sges, limits.max_sge),
        Payload::Inline([data]) => {
            op != opcode::RDMA_READ && !data.is_empty() && data.len() <= limits.max_inline as usize
        }
        _ => false,
    };
    if !applies {
        return None;
    }
    // After the control segment: a datagram segment, which fills the rest
    // of the first block (the data goes on in the next, which may be the
    // SQ's first), or a remote address; then a data segment or an inline
    // header, where the block ends at the latest. Each shape with its own
    // constant offsets, so that no store tests its place.
    let ds = match (datagram, remote) {
        (Some((av, dest)), _) => {
            sq.put_in_block(idx, 16, &datagram_seg(av, dest));
            4 + put_payload::<GATHER>(sq, (idx + 1) & (sq.bbs - 1), 0, &wr.payload)
        }
        (None, Some(r)) => {
            sq.put_in_block(idx, 16, &raddr_seg(r));
            2 + put_payload::<GATHER>(sq, idx, 32, &wr.payload)
        }
        (None, None) => 1 + put_payload::<GATHER>(sq, idx, 16, &wr.payload),
    };
    sq.put_in_block(
        idx,
        0,
        &ctrl_seg(cur_post, op, limits, ds, fm_ce_se, wr, imm),
    );
    Some(ds)
}

/// [`write_one_segment`] of an atomic on an RC QP: a remote-address, an
/// atomic and a data segment (of 8 bytes, what the device writes back),
/// 64 bytes in all, one block. `None` where [`check_send`] would refuse it
/// (another QP type, inline data, not one SGE of at least 8 bytes, a
/// misaligned address), nothing written.
#[inline(always)]
fn write_atomic(
    sq: &Sq,
    idx: u32,
    cur_post: u32,
    limits: &SendLimits,
    fm_ce_se: u8,
    wr: &SendWr<'_>,
) -> Option<u32> {
    let (op, remote, swap_add, compare) = match wr.op {
        SendOp::FetchAdd { remote, add } => (opcode::ATOMIC_FA, remote, add, None),
        SendOp::CompareSwap {
            remote,
            compare,
            swap,
        } => (opcode::ATOMIC_CS, remote, swap, Some(compare)),
        _ => return None,
    };
    let Payload::Sges([sge]) = wr.payload else {
        return None;
    };
    if limits.qp_type != QpType::Rc || limits.max_sge == 0 || sge.length < 8 || remote.addr % 8 != 0
    {
        return None;
    }
    sq.put_in_block(idx, 16, &raddr_seg(remote));
    sq.put_in_block(idx, 32, &swap_add.to_be_bytes());
    // FAA: libmlx5 leaves the compare word as it was.
    if let Some(c) = compare {
        sq.put_in_block(idx, 40, &c.to_be_bytes());
    }
    sq.put_in_block(idx, 48, &data_seg(8, sge.lkey, sge.addr));
    sq.put_in_block(
        idx,
        0,
        &ctrl_seg(cur_post, op, limits, 4, fm_ce_se, wr, None),
    );
    Some(4)
}

/// Whether [`write_one_segment`] takes `sges`, several SGEs: at most
/// `max_sge`, none empty (the general writer leaves those out, which
/// changes the WQE's size), their total a `u32` (else `TooLong`).
/// One early-exit pass over them (an `all` and a sum were two loops, the
/// sum unrolled, their set-up dearer than two SGEs' tests).
#[inline]
fn gathers(sges: &[crate::wr::Sge], max_sge: u32) -> bool {
    sges.len() >= 2
        && sges.len() <= max_sge as usize
        && sges
            .iter()
            .try_fold(0u32, |total, s| match s.length {
                0 => None,
                n => total.checked_add(n),
            })
            .is_some()
}

/// The bytes `sges` cover together (a `u64`: more than a request may).
#[inline]
fn sge_bytes(sges: &[crate::wr::Sge]) -> u64 {
    sges.iter().map(|s| u64::from(s.length)).sum()
}

/// The data segments of `sges` from byte `offset` of block `block` on, the
/// next block (wrapping at the SQ's end) where one is full: a segment
/// never crosses a block, since each starts on 16 bytes. Answers their
/// 16-byte units.
#[inline(always)]
fn put_gather(sq: &Sq, mut block: u32, mut offset: usize, sges: &[crate::wr::Sge]) -> u32 {
    if offset + 16 * sges.len() <= 64 {
        // All in this block (a SEND of up to three SGEs): no wrap to test.
        for sge in sges {
            sq.put_in_block(block, offset, &data_seg(sge.length, sge.lkey, sge.addr));
            offset += 16;
        }
        return sges.len() as u32;
    }
    for sge in sges {
        sq.put_in_block(block, offset, &data_seg(sge.length, sge.lkey, sge.addr));
        offset += 16;
        if offset == 64 {
            (block, offset) = ((block + 1) & (sq.bbs - 1), 0);
        }
    }
    sges.len() as u32
}

/// [`write_one_segment`]'s payload, one data segment (several:
/// [`put_gather`]) or one inline segment, at byte `offset` of block
/// `block`; answers its 16-byte units.
#[inline(always)]
fn put_payload<const GATHER: bool>(
    sq: &Sq,
    block: u32,
    offset: usize,
    payload: &Payload<'_>,
) -> u32 {
    match *payload {
        Payload::Sges([sge]) => {
            sq.put_in_block(block, offset, &data_seg(sge.length, sge.lkey, sge.addr));
            1
        }
        Payload::Sges(sges) if GATHER => put_gather(sq, block, offset, sges),
        // Not taken without GATHER (`write_one_segment`).
        Payload::Sges(_) => unreachable!("several SGEs without GATHER"),
        Payload::Inline(segs) => {
            let data = segs[0];
            sq.put_in_block(
                block,
                offset,
                &(data.len() as u32 | INLINE_SEG).to_be_bytes(),
            );
            // The data may cross into the next blocks and the SQ's wrap.
            sq.put(block as usize * 64 + offset + 4, data);
            (data.len() as u32 + 4).div_ceil(16)
        }
    }
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
        let av = dest.av.expect("checked: a UD send has a vector");
        at = sq.put_seg(at, &datagram_seg(av, &dest));
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

#[cfg(test)]
mod one_segment_tests {
    use super::*;
    use crate::wr::{Remote, Sge};

    /// An SQ of `bbs` blocks in `mem`, every byte `fill`.
    fn sq(mem: &mut [u8], fill: u8) -> Sq {
        mem.fill(fill);
        Sq {
            start: mem.as_mut_ptr(),
            bbs: (mem.len() / 64) as u32,
        }
    }

    /// Every request the one-segment writer takes leaves the bytes the
    /// general writer leaves (ds included), in every block of a small SQ,
    /// so also where a UD request's data, or a gather's third segment, goes
    /// on in the next block or the SQ's first; every request it declines is
    /// one the general path handles (a refusal or another shape), and it
    /// wrote nothing. Without GATHER it takes no request of several SGEs.
    #[test]
    fn the_one_segment_writer_writes_what_the_general_writer_does() {
        // SENDs and WRITEs (4) × one SGE, a short one or inline on RC and
        // UC, the SENDs (2) × the same on UD, and on RC the READ × either
        // SGE and the two aligned atomics × the long one, each in 4 blocks.
        let one = 4 * 3 * 2 + 2 * 3 + 2 + 2;
        assert_eq!(each_request::<false>(), one * 4);
        // With GATHER also the SENDs and WRITEs of two and three SGEs on
        // their QP types, and the READs of them on RC.
        assert_eq!(each_request::<true>(), (one + 2 * (2 * 3 + 2 * 2 + 1)) * 4);
    }

    /// The requests [`write_one_segment`] took, each checked as the test
    /// above says.
    fn each_request<const GATHER: bool>() -> usize {
        const BBS: usize = 4;
        let av = [0x5a; 48];
        let remote = Remote {
            addr: 0x1_0000_0040,
            rkey: 0x77,
        };
        let odd = Remote {
            addr: 0x1_0000_0044,
            ..remote
        };
        let one = [Sge {
            addr: 0xabc0,
            length: 64,
            lkey: 0x11,
        }];
        let short = [Sge {
            length: 4,
            ..one[0]
        }];
        let two = [one[0], one[0]];
        let three = [one[0]; 3];
        let four = [one[0]; 4];
        let with_empty = [
            one[0],
            short[0],
            Sge {
                length: 0,
                ..one[0]
            },
        ];
        let data = [7u8; 40];
        let inline: [&[u8]; 1] = [&data];
        let ops = [
            SendOp::Send { imm: None },
            SendOp::Send { imm: Some(9) },
            SendOp::RdmaWrite { remote, imm: None },
            SendOp::RdmaWrite {
                remote,
                imm: Some(3),
            },
            SendOp::RdmaRead { remote },
            SendOp::FetchAdd { remote, add: 5 },
            SendOp::FetchAdd {
                remote: odd,
                add: 5,
            },
            SendOp::CompareSwap {
                remote,
                compare: 1,
                swap: 2,
            },
        ];
        let payloads = [
            Payload::Sges(&one),
            Payload::Sges(&short),
            Payload::Sges(&two),
            Payload::Sges(&three),
            Payload::Sges(&four),
            Payload::Sges(&with_empty),
            Payload::Sges(&[]),
            Payload::Inline(&inline),
        ];
        let (mut taken, mut declined) = (0, 0);
        for qp_type in [QpType::Rc, QpType::Uc, QpType::Ud] {
            let limits = SendLimits {
                qpn: 0x4321,
                qp_type,
                max_sge: 3,
                max_inline: 64,
            };
            for op in ops {
                for payload in payloads {
                    for idx in 0..BBS as u32 {
                        let mut wr = SendWr::new(1, op, payload).flags(SendFlags::SIGNALED);
                        if qp_type == QpType::Ud {
                            let mut dest = UdDest::from_raw(0, 0x99, 0x1234);
                            dest.av = Some(&av);
                            wr.ud = Some(dest);
                        }
                        let (mut a, mut b) = ([0u8; BBS * 64], [0u8; BBS * 64]);
                        let (sa, sb) = (sq(&mut a, 0xee), sq(&mut b, 0xee));
                        let cur_post = 0x1_0000 + idx;
                        match write_one_segment::<GATHER>(&sa, idx, cur_post, &limits, 0, &wr) {
                            Some(ds) => {
                                check_send(&limits, &wr).expect("taken means valid");
                                let want = write_send(&sb, idx, cur_post, &limits, 0, &wr);
                                assert_eq!(ds, want, "{op:?} {payload:?} {qp_type:?} at {idx}");
                                assert_eq!(a, b, "{op:?} {payload:?} {qp_type:?} at {idx}");
                                taken += 1;
                            }
                            None => {
                                assert!(a.iter().all(|&x| x == 0xee), "declined, nothing written");
                                declined += 1;
                            }
                        }
                    }
                }
            }
        }
        assert!(declined > 0);
        taken
    }
}
