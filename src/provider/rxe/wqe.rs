//! Work requests into rxe queue slots, completions out of them.
//!
//! The requests and completions are the crate's ([`crate::wr`]); this module
//! only encodes them in rxe's layouts.
//!
//! A send WQE is an `rxe_send_wqe` followed by its SGE list or its inline
//! data; a receive WQE is an `rxe_recv_wqe` followed by its SGE list; a
//! completion is an `ib_uverbs_wc`, which a [`WorkCompletion`] is (polling
//! copies it whole). The writers fill a slot exactly as rdma-core's rxe
//! provider does (`init_send_wqe`, `rxe_post_one_recv`): the work request
//! part zeroed then filled, `iova` = the remote address, `dma.length =
//! dma.resid` = the total length, `cur_sge = sge_offset = 0`, `state = 0`;
//! `mask`, `status` and the PSN fields belong to the kernel and are left
//! alone. They validate first, as rdma-core does (`validate_send_wr`), and
//! never write a byte outside the slot.
//!
//! The writers only reserve slots; the caller publishes a batch with
//! [`Producer::publish`] and, for a send queue, then rings the doorbell.

use zerocopy::{FromBytes, IntoBytes};

use uverbs_uapi::{
    ib_uverbs_wc, rxe_dma_info, rxe_recv_wqe, rxe_send_wqe, rxe_send_wr_atomic, rxe_send_wr_rdma,
    rxe_send_wr_ud,
};

use super::queue::{Consumer, Producer, QueueFull};
use crate::wr::{Payload, PostError, RecvWr, SendOp, SendWr, Sge, WorkCompletion};

/// Bytes of a send WQE before its SGE list or inline data.
pub(crate) const SEND_WQE_LEN: usize = std::mem::size_of::<rxe_send_wqe>();
/// Bytes of a receive WQE before its SGE list.
pub(crate) const RECV_WQE_LEN: usize = std::mem::size_of::<rxe_recv_wqe>();
/// Bytes of one completion.
pub(crate) const WC_LEN: usize = std::mem::size_of::<ib_uverbs_wc>();
const SGE_LEN: usize = std::mem::size_of::<Sge>();

/// `IB_SEND_INLINE`: the data is in the WQE, not behind SGEs.
const SEND_INLINE: u32 = 8;

/// What the send queue accepts, from the CREATE_QP response (the kernel
/// rewrites `max_send_sge` and `max_inline_data` to what a slot holds).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SendLimits {
    /// SGEs per WQE.
    pub(crate) max_sge: u32,
    /// Inline bytes per WQE.
    pub(crate) max_inline: u32,
}

/// Total length of `sges`, checked against the WQE's 32-bit length.
fn total_len<I: Iterator<Item = u64>>(op: &'static str, lens: I) -> Result<u32, PostError> {
    let len: u64 = lens.sum();
    u32::try_from(len).map_err(|_| PostError::TooLong { op, len })
}

/// The operation a send WR's error names.
const POST_SEND: &str = "post_send";
/// The operation a receive WR's error names.
const POST_RECV: &str = "post_recv";

/// [`PostError::TooManySges`] when `n` SGEs are more than a WR on `q` may
/// carry: what the QP claims (`claimed`), capped by what a slot holds after
/// its `wqe_len`-byte header, so a wrong claim can never make us write past
/// the slot.
fn check_sges(
    op: &'static str,
    q: &Producer,
    wqe_len: usize,
    claimed: u32,
    n: usize,
) -> Result<(), PostError> {
    let room = q.elem_size().saturating_sub(wqe_len);
    let max = claimed.min(u32::try_from(room / SGE_LEN).unwrap_or(u32::MAX));
    if n > max as usize {
        return Err(PostError::TooManySges { op, n, max });
    }
    Ok(())
}

/// The next free slot of `q`, or [`PostError::QueueFull`] naming `op`.
fn next_slot<'q>(q: &'q mut Producer, op: &'static str) -> Result<&'q mut [u8], PostError> {
    q.reserve()
        .map_err(|QueueFull { capacity }| PostError::QueueFull { op, capacity })
}

/// Refuses, before anything is written, a work request that a QP of
/// `qp_type` cannot carry: rxe would take it and fail it on the wire
/// (`LOC_QP_OP_ERR`, the QP in ERR), or send a UD packet nowhere.
pub(crate) fn check_send_for_qp_type(
    qp_type: crate::command::QpType,
    wr: &SendWr<'_>,
) -> Result<(), PostError> {
    use crate::command::QpType;
    let allowed = match qp_type {
        QpType::Rc => true,
        QpType::Uc => matches!(wr.op, SendOp::Send { .. } | SendOp::RdmaWrite { .. }),
        QpType::Ud => matches!(wr.op, SendOp::Send { .. }),
    };
    if !allowed {
        return Err(PostError::OpNotOnQpType {
            opcode: wr.op.name(),
            qp_type,
        });
    }
    let is_ud = qp_type == QpType::Ud;
    if is_ud != wr.ud.is_some() {
        return Err(PostError::UdDestination {
            qp_type,
            missing: is_ud,
        });
    }
    Ok(())
}

/// Checks `wr` against `limits` and the slot size, then writes it into the next
/// free slot of the send queue `sq` (not yet published).
pub(crate) fn write_send_wqe(
    sq: &mut Producer,
    limits: SendLimits,
    wr: &SendWr<'_>,
) -> Result<(), PostError> {
    // What one slot really holds bounds what the QP claims, so a wrong limit
    // can never make us write past the slot.
    let room = sq.elem_size().saturating_sub(SEND_WQE_LEN);
    let max_inline = limits
        .max_inline
        .min(u32::try_from(room).unwrap_or(u32::MAX));
    let (num_sge, length, inline) = match wr.payload {
        Payload::Sges(sges) => {
            let length = total_len(POST_SEND, sges.iter().map(|s| u64::from(s.length)))?;
            (sges.len(), length, false)
        }
        Payload::Inline(segs) => (
            segs.len(),
            total_len(POST_SEND, segs.iter().map(|s| s.len() as u64))?,
            true,
        ),
    };
    check_sges(POST_SEND, sq, SEND_WQE_LEN, limits.max_sge, num_sge)?;
    let (remote_addr, is_atomic) = match wr.op {
        SendOp::Send { .. } => (0, false),
        SendOp::RdmaWrite { remote, .. } | SendOp::RdmaRead { remote } => (remote.addr, false),
        SendOp::CompareSwap { remote, .. } | SendOp::FetchAdd { remote, .. } => (remote.addr, true),
    };
    if is_atomic && (length < 8 || remote_addr % 8 != 0) {
        return Err(PostError::BadAtomic {
            opcode: wr.op.name(),
            len: length.into(),
            remote_addr,
        });
    }
    if inline {
        if !matches!(wr.op, SendOp::Send { .. } | SendOp::RdmaWrite { .. }) {
            return Err(PostError::InlineNotAllowed {
                opcode: wr.op.name(),
            });
        }
        if length > max_inline {
            return Err(PostError::InlineTooLong {
                len: length.into(),
                max: max_inline,
            });
        }
    }
    if wr.ud.is_some() && !matches!(wr.op, SendOp::Send { .. }) {
        return Err(PostError::UdNotSend {
            opcode: wr.op.name(),
        });
    }

    let slot = next_slot(sq, POST_SEND)?;
    // Written in place, field by field, as rdma-core does: no staging copy.
    // The kernel-owned words the slot already holds (status, mask, PSNs)
    // are left alone.
    let (wqe, tail) = rxe_send_wqe::mut_from_prefix(slot).expect(SLOT_HOLDS_WQE);
    let kwr = &mut wqe.wr;
    kwr.wr_id = wr.wr_id;
    kwr.reserved = 0;
    kwr.opcode = wr.op.opcode();
    kwr.send_flags = wr.flags.bits() | if inline { SEND_INLINE } else { 0 };
    kwr.ex = match wr.op {
        // imm_data is __be32.
        SendOp::Send { imm: Some(imm) } | SendOp::RdmaWrite { imm: Some(imm), .. } => imm.to_be(),
        _ => 0,
    };
    // The union zeroed whole, then the member of this opcode written.
    kwr.wr = [0; 15];
    let union = kwr.wr.as_mut_bytes();
    match wr.op {
        SendOp::Send { .. } => {
            if let Some(ud) = wr.ud {
                let m = rxe_send_wr_ud::mut_from_prefix(union)
                    .expect(UNION_HOLDS_MEMBER)
                    .0;
                m.remote_qpn = ud.remote_qpn;
                m.remote_qkey = ud.remote_qkey;
                m.ah_num = ud.ah_num;
            }
        }
        SendOp::RdmaWrite { remote, .. } | SendOp::RdmaRead { remote } => {
            let m = rxe_send_wr_rdma::mut_from_prefix(union)
                .expect(UNION_HOLDS_MEMBER)
                .0;
            m.remote_addr = remote.addr;
            m.rkey = remote.rkey;
        }
        SendOp::CompareSwap {
            remote,
            compare,
            swap,
        } => {
            let m = rxe_send_wr_atomic::mut_from_prefix(union)
                .expect(UNION_HOLDS_MEMBER)
                .0;
            m.remote_addr = remote.addr;
            m.compare_add = compare;
            m.swap = swap;
            m.rkey = remote.rkey;
        }
        SendOp::FetchAdd { remote, add } => {
            let m = rxe_send_wr_atomic::mut_from_prefix(union)
                .expect(UNION_HOLDS_MEMBER)
                .0;
            m.remote_addr = remote.addr;
            m.compare_add = add;
            m.rkey = remote.rkey;
        }
    }
    wqe.state = 0;
    wqe.iova = remote_addr;
    wqe.dma = rxe_dma_info {
        length,
        resid: length,
        cur_sge: 0,
        num_sge: num_sge as u32, // <= max_sge, a u32
        sge_offset: 0,
        reserved: 0,
    };
    match wr.payload {
        Payload::Sges(sges) => tail[..sges.len() * SGE_LEN].copy_from_slice(sges.as_bytes()),
        Payload::Inline(segs) => {
            let mut at = 0;
            for seg in segs {
                tail[at..at + seg.len()].copy_from_slice(seg);
                at += seg.len();
            }
        }
    }
    Ok(())
}

/// Why a slot view cannot fail: the queue was mapped with slots of at least
/// the WQE's size ([`QueueMem::from_raw`](super::queue::QueueMem::from_raw)'s
/// `min_elem`), 8-aligned (an 8-aligned mapping, a 384-byte header, slots of
/// a power of two of at least 8 bytes).
const SLOT_HOLDS_WQE: &str = "an rxe slot holds an aligned WQE (checked at mapping time)";
/// Why a view of the send WR's union cannot fail: each member is at most the
/// union's 120 bytes and 8-aligned (asserted in `uverbs-uapi`).
const UNION_HOLDS_MEMBER: &str = "the rxe send WR union holds each of its members";

/// Checks `wr` against `max_sge` and the slot size, then writes it into the
/// next free slot of the receive queue `rq` (not yet published).
pub(crate) fn write_recv_wqe(
    rq: &mut Producer,
    max_sge: u32,
    wr: &RecvWr<'_>,
) -> Result<(), PostError> {
    check_sges(POST_RECV, rq, RECV_WQE_LEN, max_sge, wr.sges.len())?;
    let length = total_len(POST_RECV, wr.sges.iter().map(|s| u64::from(s.length)))?;
    let slot = next_slot(rq, POST_RECV)?;
    let (wqe, tail) = rxe_recv_wqe::mut_from_prefix(slot).expect(SLOT_HOLDS_WQE);
    wqe.wr_id = wr.wr_id;
    wqe.reserved = 0;
    wqe.padding = 0;
    wqe.dma = rxe_dma_info {
        length,
        resid: length,
        cur_sge: 0,
        num_sge: wr.sges.len() as u32, // <= max_sge, a u32
        sge_offset: 0,
        reserved: 0,
    };
    tail[..wr.sges.len() * SGE_LEN].copy_from_slice(wr.sges.as_bytes());
    Ok(())
}

/// The completion at the start of a CQ slot: its `ib_uverbs_wc`, copied
/// whole, as it is (`None` if the slot is shorter than one).
pub(crate) fn completion(slot: &[u8]) -> Option<WorkCompletion> {
    let (wc, _) = ib_uverbs_wc::read_from_prefix(slot).ok()?;
    Some(WorkCompletion::from_raw(wc))
}

/// Copies up to `out.len()` completions out of the CQ `cq`, oldest first,
/// each slot's `ib_uverbs_wc` whole into `out`, then hands their slots back
/// to the kernel with one store. Returns how many. No allocation, no system
/// call, no decoding: a [`WorkCompletion`] is the kernel's struct.
pub(crate) fn poll(cq: &mut Consumer, out: &mut [WorkCompletion]) -> usize {
    // `ready` loads the kernel's producer index with Acquire: every slot
    // before it was completely written before we read it below. `consume`
    // publishes our consumer index with Release only after the copies, so
    // the kernel cannot reuse a slot we are still reading.
    let ready = (cq.ready() as usize).min(out.len());
    let mut n = 0;
    while n < ready {
        // Every slot is at least WC_LEN bytes (checked at mapping time with
        // min_elem = WC_LEN), so `completion` cannot fail here.
        match cq.get(n as u32).and_then(completion) {
            Some(wc) => out[n] = wc,
            None => break,
        }
        n += 1;
    }
    cq.consume(n as u32);
    n
}

#[cfg(test)]
mod qp_type_tests {
    use super::*;
    use crate::command::QpType;
    use crate::wr::{Remote, SendFlags, UdDest};

    fn wr(op: SendOp) -> SendWr<'static> {
        SendWr {
            wr_id: 1,
            op,
            flags: SendFlags::SIGNALED,
            payload: Payload::Sges(&[]),
            ud: None,
        }
    }

    #[test]
    fn each_qp_type_takes_only_its_operations() {
        let remote = Remote { addr: 0, rkey: 1 };
        let ops = [
            (SendOp::Send { imm: None }, [true, true, true]),
            (SendOp::Send { imm: Some(3) }, [true, true, true]),
            (SendOp::RdmaWrite { remote, imm: None }, [true, true, false]),
            (
                SendOp::RdmaWrite {
                    remote,
                    imm: Some(3),
                },
                [true, true, false],
            ),
            (SendOp::RdmaRead { remote }, [true, false, false]),
            (SendOp::FetchAdd { remote, add: 1 }, [true, false, false]),
            (
                SendOp::CompareSwap {
                    remote,
                    compare: 0,
                    swap: 1,
                },
                [true, false, false],
            ),
        ];
        for (op, allowed) in ops {
            for (qp_type, ok) in [QpType::Rc, QpType::Uc, QpType::Ud]
                .into_iter()
                .zip(allowed)
            {
                let got = check_send_for_qp_type(qp_type, &wr(op));
                match got {
                    // A UD send without a destination fails on that instead.
                    Err(PostError::UdDestination { missing: true, .. }) => {
                        assert!(ok && qp_type == QpType::Ud, "{op:?} on {qp_type:?}")
                    }
                    Err(PostError::OpNotOnQpType { opcode, qp_type: t }) => {
                        assert!(!ok, "{op:?} refused on {qp_type:?}");
                        assert_eq!((opcode, t), (op.name(), qp_type));
                    }
                    Ok(()) => assert!(ok && qp_type != QpType::Ud, "{op:?} on {qp_type:?}"),
                    Err(e) => panic!("{op:?} on {qp_type:?}: {e}"),
                }
            }
        }
    }

    #[test]
    fn a_ud_destination_belongs_on_ud_sends_only() {
        let dest = UdDest::from_raw(7, 0x12, 0x1111_1111);
        let with = SendWr {
            ud: Some(dest),
            ..wr(SendOp::Send { imm: None })
        };
        assert_eq!(check_send_for_qp_type(QpType::Ud, &with), Ok(()));
        for qp_type in [QpType::Rc, QpType::Uc] {
            let e = check_send_for_qp_type(qp_type, &with).unwrap_err();
            assert_eq!(
                e,
                PostError::UdDestination {
                    qp_type,
                    missing: false
                }
            );
            assert!(e.to_string().contains("cannot have"), "{e}");
        }
        let e = check_send_for_qp_type(QpType::Ud, &wr(SendOp::Send { imm: None })).unwrap_err();
        assert!(e.to_string().contains("needs a UD destination"), "{e}");
    }
}
