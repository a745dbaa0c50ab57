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
    rxe_send_wr_ud, IB_UVERBS_WR_ATOMIC_CMP_AND_SWP, IB_UVERBS_WR_ATOMIC_FETCH_AND_ADD,
    IB_UVERBS_WR_BIND_MW, IB_UVERBS_WR_LOCAL_INV, IB_UVERBS_WR_RDMA_READ, IB_UVERBS_WR_RDMA_WRITE,
    IB_UVERBS_WR_RDMA_WRITE_WITH_IMM, IB_UVERBS_WR_SEND, IB_UVERBS_WR_SEND_WITH_IMM,
    IB_UVERBS_WR_SEND_WITH_INV,
};

use super::queue::{Consumer, Producer, QueueFull};
use crate::provider::rings::FirstPoll;
use crate::wr::{Payload, PostError, RecvWr, Remote, SendOp, SendWr, Sge, UdDest, WorkCompletion};

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

/// Total length of a receive's `sges` (any number but one), out of line:
/// its loop would hold registers in the one-SGE post's body.
#[inline(never)]
fn recv_total_len(sges: &[Sge]) -> Result<u32, PostError> {
    total_len(POST_RECV, sges.iter().map(|s| u64::from(s.length)))
}

/// The operation a send WR's error names.
const POST_SEND: &str = "post_send";
/// The operation a receive WR's error names.
const POST_RECV: &str = "post_recv";

/// What a send refused for a full queue answers (the general path's
/// [`next_slot`] says the same). Out of line: a post that does not fail
/// builds no error.
#[cold]
pub(crate) fn send_queue_full(QueueFull { capacity }: QueueFull) -> PostError {
    PostError::QueueFull {
        op: POST_SEND,
        capacity,
    }
}

/// The next free slot of `q`, or [`PostError::QueueFull`] naming `op`.
/// Always inlined: out of line (the guest's benches/ops found it so) a
/// post paid 26 Ir for the call alone.
#[inline(always)]
fn next_slot<'q>(q: &'q mut Producer, op: &'static str) -> Result<&'q mut [u8], PostError> {
    q.reserve()
        .map_err(|QueueFull { capacity }| PostError::QueueFull { op, capacity })
}

/// Bit `opcode` set for each `IB_UVERBS_WR_*` opcode in a set.
const fn ops(opcodes: &[u32]) -> u32 {
    let mut mask = 0;
    let mut i = 0;
    while i < opcodes.len() {
        mask |= 1 << opcodes[i];
        i += 1;
    }
    mask
}
/// SEND and SEND_WITH_IMM: the operations that may carry a UD destination.
const SENDS: u32 = ops(&[IB_UVERBS_WR_SEND, IB_UVERBS_WR_SEND_WITH_IMM]);
/// The operations that carry local data out, and so may take it inline.
const DATA_OUT: u32 = SENDS | ops(&[IB_UVERBS_WR_RDMA_WRITE, IB_UVERBS_WR_RDMA_WRITE_WITH_IMM]);
/// The atomics.
const ATOMICS: u32 = ops(&[
    IB_UVERBS_WR_ATOMIC_CMP_AND_SWP,
    IB_UVERBS_WR_ATOMIC_FETCH_AND_ADD,
]);
/// The operations done on the sending side alone, without payload.
const LOCAL_OPS: u32 = ops(&[IB_UVERBS_WR_LOCAL_INV, IB_UVERBS_WR_BIND_MW]);
/// SEND_WITH_INV, which carries data out like a SEND.
const SEND_INV: u32 = ops(&[IB_UVERBS_WR_SEND_WITH_INV]);

/// The operations a QP of `qp_type` carries: UC has no RDMA READ, atomics,
/// LOCAL_INV or SEND_WITH_INV (rxe binds windows on UC, as on RC); UD only
/// sends.
fn ops_of(qp_type: crate::command::QpType) -> u32 {
    use crate::command::QpType;
    match qp_type {
        QpType::Rc => DATA_OUT | ATOMICS | LOCAL_OPS | SEND_INV | ops(&[IB_UVERBS_WR_RDMA_READ]),
        QpType::Uc => DATA_OUT | ops(&[IB_UVERBS_WR_BIND_MW]),
        QpType::Ud => SENDS,
    }
}

/// [`check_op_for_qp_type`] on its own, for the tests.
#[cfg(test)]
pub(crate) fn check_send_for_qp_type(
    qp_type: crate::command::QpType,
    wr: &SendWr<'_>,
) -> Result<(), PostError> {
    check_op_for_qp_type(qp_type, wr, OpWords::of(&wr.op, wr.ud).opcode)
}

/// Refuses, before anything is written, a work request that a QP of
/// `qp_type` cannot carry (`opcode` is its `IB_UVERBS_WR_*`): rxe would
/// take it and fail it on the wire (`LOC_QP_OP_ERR`, the QP in ERR), or
/// send a UD packet nowhere.
#[inline]
fn check_op_for_qp_type(
    qp_type: crate::command::QpType,
    wr: &SendWr<'_>,
    opcode: u32,
) -> Result<(), PostError> {
    use crate::command::QpType;
    if ops_of(qp_type) & (1 << opcode) == 0 {
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

/// What a send WQE says about its operation, from one match on it: the
/// opcode, `ex` (immediate data, big-endian), `iova` (the remote address)
/// and the first four words of the WR union (the rest stay zero).
struct OpWords {
    opcode: u32,
    ex: u32,
    iova: u64,
    union: [u64; 4],
}

impl OpWords {
    /// The words of `op`, with `ud` for a send on a UD QP.
    #[inline]
    fn of(op: &SendOp, ud: Option<UdDest<'_>>) -> OpWords {
        // Union layouts (asserted below): RDMA `remote_addr`, `rkey` +
        // reserved; atomics `remote_addr`, `compare_add`, `swap`, `rkey` +
        // reserved; UD `remote_qpn` + `remote_qkey`, `pkey_index` +
        // reserved + `ah_num`.
        let rdma = |opcode, ex, remote: Remote| OpWords {
            opcode,
            ex,
            iova: remote.addr,
            union: [remote.addr, u64::from(remote.rkey), 0, 0],
        };
        match *op {
            SendOp::Send { imm } => OpWords {
                opcode: if imm.is_some() {
                    IB_UVERBS_WR_SEND_WITH_IMM
                } else {
                    IB_UVERBS_WR_SEND
                },
                // imm_data is __be32.
                ex: imm.map_or(0, u32::to_be),
                iova: 0,
                union: match ud {
                    Some(ud) => [
                        u64::from(ud.remote_qpn) | u64::from(ud.remote_qkey) << 32,
                        u64::from(ud.ah_num) << 32,
                        0,
                        0,
                    ],
                    None => [0; 4],
                },
            },
            SendOp::RdmaWrite { remote, imm: None } => rdma(IB_UVERBS_WR_RDMA_WRITE, 0, remote),
            SendOp::RdmaWrite {
                remote,
                imm: Some(imm),
            } => rdma(IB_UVERBS_WR_RDMA_WRITE_WITH_IMM, imm.to_be(), remote),
            SendOp::RdmaRead { remote } => rdma(IB_UVERBS_WR_RDMA_READ, 0, remote),
            SendOp::CompareSwap {
                remote,
                compare,
                swap,
            } => OpWords {
                opcode: IB_UVERBS_WR_ATOMIC_CMP_AND_SWP,
                ex: 0,
                iova: remote.addr,
                union: [remote.addr, compare, swap, u64::from(remote.rkey)],
            },
            SendOp::FetchAdd { remote, add } => OpWords {
                opcode: IB_UVERBS_WR_ATOMIC_FETCH_AND_ADD,
                ex: 0,
                iova: remote.addr,
                union: [remote.addr, add, 0, u64::from(remote.rkey)],
            },
            // The `mw` member: `addr`, `length`, `mr_lkey` + `mw_rkey`,
            // `rkey` + `access` (rdma_user_rxe.h). No remote address.
            SendOp::BindMw(bind) => OpWords {
                opcode: IB_UVERBS_WR_BIND_MW,
                ex: 0,
                iova: 0,
                union: [
                    bind.addr,
                    bind.length,
                    u64::from(bind.mr_lkey) | u64::from(bind.mw_rkey) << 32,
                    u64::from(bind.rkey) | u64::from(bind.access) << 32,
                ],
            },
            // `ex` is `invalidate_rkey`, a host-order u32 (not __be32).
            SendOp::LocalInv { rkey } => OpWords {
                opcode: IB_UVERBS_WR_LOCAL_INV,
                ex: rkey,
                iova: 0,
                union: [0; 4],
            },
            SendOp::SendWithInv { rkey } => OpWords {
                opcode: IB_UVERBS_WR_SEND_WITH_INV,
                ex: rkey,
                iova: 0,
                union: [0; 4],
            },
        }
    }
}

// The union words above, checked against the kernel's member layouts
// (little-endian: a `u32` at an 8-aligned offset is its word's low half).
const _: () = {
    use std::mem::offset_of;
    assert!(cfg!(target_endian = "little"));
    assert!(offset_of!(rxe_send_wr_rdma, remote_addr) == 0);
    assert!(offset_of!(rxe_send_wr_rdma, rkey) == 8);
    assert!(offset_of!(rxe_send_wr_rdma, reserved) == 12);
    assert!(offset_of!(rxe_send_wr_atomic, remote_addr) == 0);
    assert!(offset_of!(rxe_send_wr_atomic, compare_add) == 8);
    assert!(offset_of!(rxe_send_wr_atomic, swap) == 16);
    assert!(offset_of!(rxe_send_wr_atomic, rkey) == 24);
    assert!(offset_of!(rxe_send_wr_atomic, reserved) == 28);
    assert!(offset_of!(rxe_send_wr_ud, remote_qpn) == 0);
    assert!(offset_of!(rxe_send_wr_ud, remote_qkey) == 4);
    assert!(offset_of!(rxe_send_wr_ud, pkey_index) == 8);
    assert!(offset_of!(rxe_send_wr_ud, ah_num) == 12);
};

impl SendLimits {
    /// These limits capped by what one `elem_size`-byte slot holds after
    /// the WQE header, so a wrong claim from the kernel can never make the
    /// writer go past the slot. A send queue caps its limits once, when it
    /// is mapped.
    pub(crate) fn within_slot(self, elem_size: usize) -> SendLimits {
        let room = elem_size.saturating_sub(SEND_WQE_LEN);
        let room = u32::try_from(room).unwrap_or(u32::MAX);
        SendLimits {
            max_sge: self.max_sge.min(room / SGE_LEN as u32),
            max_inline: self.max_inline.min(room),
        }
    }
}

/// The general writer on its own, for the tests: checks `wr` against
/// `limits` and the slot size (but not the QP type), then writes it into
/// the next free slot of the send queue `sq` (not yet published).
#[cfg(test)]
pub(crate) fn write_send_wqe(
    sq: &mut Producer,
    limits: SendLimits,
    wr: &SendWr<'_>,
) -> Result<(), PostError> {
    let capped = limits.within_slot(sq.elem_size());
    encode_op(sq, capped, wr, OpWords::of(&wr.op, wr.ud))
}

/// The total length of one send's SGEs. One SGE (the common case) is its
/// length, with no loop and no overflow check (a `u32` always fits).
#[inline]
fn sge_total(sges: &[Sge]) -> Result<u32, PostError> {
    match sges {
        [one] => Ok(one.length),
        _ => total_len(POST_SEND, sges.iter().map(|s| u64::from(s.length))),
    }
}

/// The general send path: the QP-type check, then [`encode_op`], with one
/// match on the operation for both. `limits` are capped to the slot
/// ([`SendLimits::within_slot`]). Out of line: inlined into a batch's
/// loop, its checks held so many registers that the loop spilled and
/// reloaded its own values for every request, common ones included.
#[inline(never)]
pub(crate) fn check_and_encode_send(
    sq: &mut Producer,
    qp_type: crate::command::QpType,
    limits: SendLimits,
    wr: &SendWr<'_>,
) -> Result<(), PostError> {
    if let Some(written) = encode_direct(sq, qp_type, limits, wr) {
        return written.map_err(send_queue_full);
    }
    let op = OpWords::of(&wr.op, wr.ud);
    check_op_for_qp_type(qp_type, wr, op.opcode)?;
    encode_op(sq, limits, wr, op)
}

/// The most common requests, written without the general path: an RDMA
/// WRITE or a SEND (with or without immediate data) from one to `max_sge`
/// SGEs whose total fits a `u32`, or of one inline segment within
/// `max_inline`, or an RDMA READ (RC) into such SGEs, with no UD
/// destination, on an RC or UC QP whose slots take an SGE. Every check of the general path
/// passes for such a request except a full queue, answered as the bare
/// [`QueueFull`] (small enough for a register, so that a batch's loop
/// keeps no error in memory; [`send_queue_full`] makes it the general
/// path's error); `None` for any other request (the caller takes the
/// general path). The bytes written are the general path's
/// (`common_send_tests.rs` compares them).
#[inline(always)]
pub(crate) fn encode_common_send(
    sq: &mut Producer,
    qp_type: crate::command::QpType,
    limits: SendLimits,
    wr: &SendWr<'_>,
) -> Option<Result<(), QueueFull>> {
    encode_common_send_with::<true>(
        sq,
        qp_type,
        limits,
        wr,
        #[inline(always)]
        |sq| sq.reserve(),
    )
}

/// [`encode_common_send`], its slot taken by `take` (a batch that saw
/// room for all its requests takes each without a check). Several SGEs
/// only with `GATHER`, for a single request: two SGEs (the usual gather, a
/// header and its payload) summed before the slot is taken and copied as
/// 32 constant bytes; more through [`take_and_gather`], where a total past
/// a `u32` is found while the SGEs are copied and gives back every slot
/// reserved since the last publish.
#[inline(always)]
pub(crate) fn encode_common_send_with<const GATHER: bool>(
    sq: &mut Producer,
    qp_type: crate::command::QpType,
    limits: SendLimits,
    wr: &SendWr<'_>,
    take: impl FnOnce(&mut Producer) -> Result<&mut [u8], QueueFull>,
) -> Option<Result<(), QueueFull>> {
    if wr.ud.is_some() || qp_type == crate::command::QpType::Ud || limits.max_sge == 0 {
        return None;
    }
    // A SEND has no remote side: its address and rkey words stay zero.
    let (opcode, ex, iova, rkey) = match wr.op {
        SendOp::RdmaWrite { remote, imm: None } => {
            (IB_UVERBS_WR_RDMA_WRITE, 0, remote.addr, remote.rkey)
        }
        SendOp::RdmaWrite {
            remote,
            imm: Some(imm),
        } => (
            IB_UVERBS_WR_RDMA_WRITE_WITH_IMM,
            imm.to_be(),
            remote.addr,
            remote.rkey,
        ),
        SendOp::Send { imm: None } => (IB_UVERBS_WR_SEND, 0, 0, 0),
        SendOp::Send { imm: Some(imm) } => (IB_UVERBS_WR_SEND_WITH_IMM, imm.to_be(), 0, 0),
        // READ: RC only, never inline (below).
        SendOp::RdmaRead { remote } if qp_type == crate::command::QpType::Rc => {
            (IB_UVERBS_WR_RDMA_READ, 0, remote.addr, remote.rkey)
        }
        _ => return None,
    };
    // The RDMA member (`remote_addr`, `rkey` + reserved).
    let words = OpWords {
        opcode,
        ex,
        iova,
        union: [iova, u64::from(rkey), 0, 0],
    };
    // Each payload's slot is taken and filled in its own arm, so that the
    // usual ones (one SGE, two SGEs) are written with their sizes as
    // constants: two SGEs through the loop of `take_and_gather` cost 30 Ir
    // more (tools/ir-budget.sh, probe_post_write_two).
    match wr.payload {
        Payload::Sges([sge]) => take_and_fill(
            sq,
            take,
            #[inline(always)]
            |slot| {
                let payload = SendPayload::sges(std::slice::from_ref(sge), sge.length);
                fill_send_wqe::<SGE_LEN>(slot, wr, words, payload)
            },
        ),
        Payload::Sges(two @ [first, second]) if GATHER && limits.max_sge >= 2 => {
            let length = first.length.checked_add(second.length)?;
            take_and_fill(
                sq,
                take,
                #[inline(always)]
                |slot| {
                    let payload = SendPayload::sges(two, length);
                    fill_send_wqe::<{ 2 * SGE_LEN }>(slot, wr, words, payload)
                },
            )
        }
        Payload::Sges(sges)
            if GATHER && !sges.is_empty() && sges.len() <= limits.max_sge as usize =>
        {
            take_and_gather(sq, take, wr, words, sges)
        }
        // Within max_inline (a u32), so the length fits.
        Payload::Inline([seg])
            if opcode != IB_UVERBS_WR_RDMA_READ && seg.len() <= limits.max_inline as usize =>
        {
            take_and_fill(
                sq,
                take,
                #[inline(always)]
                |slot| fill_send_wqe::<SGE_LEN>(slot, wr, words, SendPayload::inline(seg)),
            )
        }
        _ => None,
    }
}

/// Takes a slot with `take` and fills it with `fill`; the bare
/// [`QueueFull`] when `take` finds none.
#[inline(always)]
fn take_and_fill(
    sq: &mut Producer,
    take: impl FnOnce(&mut Producer) -> Result<&mut [u8], QueueFull>,
    fill: impl FnOnce(&mut [u8]),
) -> Option<Result<(), QueueFull>> {
    let slot = match take(sq) {
        Ok(slot) => slot,
        Err(full) => return Some(Err(full)),
    };
    fill(slot);
    Some(Ok(()))
}

/// The requests that [`encode_common_send`] leaves to the general path
/// (in a batch, every request of several SGEs) but that need none of its
/// checks, written directly (inline in [`check_and_encode_send`] and the
/// one-request general post, so that the usual post keeps no room for
/// them): a SEND (on UD with its destination) or an RDMA WRITE (RC, UC)
/// from one to `max_sge` SGEs, their total a
/// `u32`, or of one inline segment within `max_inline`; an RDMA READ (RC)
/// into one to `max_sge` SGEs; an atomic (RC) from one SGE of at least 8
/// bytes to an aligned address. Every check of the general path passes for
/// such a request but a full queue. `None` for every other request,
/// nothing reserved.
#[inline(always)]
pub(crate) fn encode_direct(
    sq: &mut Producer,
    qp_type: crate::command::QpType,
    limits: SendLimits,
    wr: &SendWr<'_>,
) -> Option<Result<(), QueueFull>> {
    use crate::command::QpType;
    let payload = match wr.payload {
        Payload::Sges(sges) if !sges.is_empty() && sges.len() <= limits.max_sge as usize => {
            SendPayload::sges(sges, Sge::total_length(sges)?)
        }
        Payload::Inline([seg]) if seg.len() <= limits.max_inline as usize => {
            SendPayload::inline(seg)
        }
        _ => return None,
    };
    let SendPayload {
        length,
        inline_flag,
        ..
    } = payload;
    let ud = qp_type == QpType::Ud;
    if ud != wr.ud.is_some() || limits.max_sge == 0 {
        return None;
    }
    let fetches = qp_type == QpType::Rc && inline_flag == 0;
    let one_sge = matches!(wr.payload, Payload::Sges([_]));
    let aligned = |remote: Remote| one_sge && length >= 8 && remote.addr % 8 == 0;
    let words = match wr.op {
        SendOp::Send { .. } => OpWords::of(&wr.op, wr.ud),
        SendOp::RdmaWrite { .. } if !ud => OpWords::of(&wr.op, None),
        SendOp::RdmaRead { .. } if fetches => OpWords::of(&wr.op, None),
        SendOp::FetchAdd { remote, .. } | SendOp::CompareSwap { remote, .. }
            if fetches && aligned(remote) =>
        {
            OpWords::of(&wr.op, None)
        }
        _ => return None,
    };
    let slot = match sq.reserve() {
        Ok(slot) => slot,
        Err(full) => return Some(Err(full)),
    };
    fill_send_wqe::<SGE_LEN>(slot, wr, words, payload);
    Some(Ok(()))
}

/// Fills `slot` with the WQE of `wr`, whose operation `words` describes and
/// whose payload is `payload` (SGEs or one inline segment), as the general
/// writer does. A payload of exactly `COPY` bytes is copied as an array:
/// `COPY` is the size of the caller's usual payload (one SGE, or two), so
/// that its copy is a few stores with no call and the others keep no test
/// for it (`copy_from_slice` of two SGEs called `memcpy`; a test for them
/// here cost the inline post 3 Ir).
#[inline(always)]
fn fill_send_wqe<const COPY: usize>(
    slot: &mut [u8],
    wr: &SendWr<'_>,
    words: OpWords,
    payload: SendPayload<'_>,
) {
    let SendPayload {
        bytes,
        num_sge,
        length,
        inline_flag,
    } = payload;
    let (wqe, tail) = send_wqe_in(slot);
    fill_head(wqe, wr, words, num_sge, length, inline_flag);
    // The tail holds max_sge SGEs and max_inline bytes
    // (`SendLimits::within_slot`). In this form (the destination's bounds
    // checked first) the one-SGE post measured 12 Ir less than checking
    // only the source's length.
    let dst = &mut tail[..bytes.len()];
    match (
        <&mut [u8; COPY]>::try_from(dst),
        <&[u8; COPY]>::try_from(bytes),
    ) {
        (Ok(dst), Ok(src)) => *dst = *src,
        (Err(_), _) | (_, Err(_)) => tail[..bytes.len()].copy_from_slice(bytes),
    }
}

/// Takes a slot with `take` and writes the WQE of `wr`, a gather of
/// `sges` (1..=`max_sge`), its SGEs copied and summed in one pass; `None`,
/// the slot given back, when their total passes a `u32`. For a single
/// request only (the only slot reserved).
#[inline(always)]
fn take_and_gather(
    sq: &mut Producer,
    take: impl FnOnce(&mut Producer) -> Result<&mut [u8], QueueFull>,
    wr: &SendWr<'_>,
    words: OpWords,
    sges: &[Sge],
) -> Option<Result<(), QueueFull>> {
    let fits = {
        let slot = match take(sq) {
            Ok(slot) => slot,
            Err(full) => return Some(Err(full)),
        };
        let (wqe, tail) = send_wqe_in(slot);
        let dst = &mut tail[..std::mem::size_of_val(sges)];
        let mut total = 0u32;
        let mut fits = true;
        for (to, sge) in dst.chunks_exact_mut(SGE_LEN).zip(sges) {
            match total.checked_add(sge.length) {
                Some(sum) => total = sum,
                None => {
                    fits = false;
                    break;
                }
            }
            to.copy_from_slice(sge.as_bytes());
        }
        if fits {
            // At most max_sge, a u32.
            fill_head(wqe, wr, words, sges.len() as u32, total, 0);
        }
        fits
    };
    if !fits {
        debug_assert_eq!(sq.pending(), 1);
        sq.cancel();
        return None;
    }
    Some(Ok(()))
}

/// Fills the WQE's words but its payload: `wr`'s operation (`words`), its
/// `num_sge`, total `length` and inline flag.
#[inline(always)]
fn fill_head(
    wqe: &mut rxe_send_wqe,
    wr: &SendWr<'_>,
    words: OpWords,
    num_sge: u32,
    length: u32,
    inline_flag: u32,
) {
    let OpWords {
        opcode,
        ex,
        iova,
        union,
    } = words;
    let kwr = &mut wqe.wr;
    kwr.wr_id = wr.wr_id;
    kwr.reserved = 0;
    kwr.opcode = opcode;
    kwr.send_flags = wr.flags.bits() | inline_flag;
    kwr.ex = ex;
    // The operation's member, the rest zero.
    kwr.wr = [0; 15];
    kwr.wr[0] = union[0];
    kwr.wr[1] = union[1];
    kwr.wr[2] = union[2];
    kwr.wr[3] = union[3];
    wqe.state = 0;
    wqe.iova = iova;
    wqe.dma = rxe_dma_info {
        length,
        resid: length,
        cur_sge: 0,
        num_sge,
        sge_offset: 0,
        reserved: 0,
    };
}

/// The payload [`encode_common_send`] and [`encode_direct`] write:
/// the bytes that follow the WQE (its SGEs, or the inline data), the
/// `num_sge` the kernel reads, the total length and the inline flag.
struct SendPayload<'a> {
    bytes: &'a [u8],
    num_sge: u32,
    length: u32,
    inline_flag: u32,
}

impl<'a> SendPayload<'a> {
    /// SGEs (at most `max_sge`, a `u32`) of `length` bytes in all.
    #[inline(always)]
    fn sges(sges: &'a [Sge], length: u32) -> Self {
        SendPayload {
            bytes: sges.as_bytes(),
            num_sge: sges.len() as u32,
            length,
            inline_flag: 0,
        }
    }

    /// One inline segment within `max_inline` (a `u32`), counted by the
    /// kernel as one entry.
    #[inline(always)]
    fn inline(seg: &'a [u8]) -> Self {
        SendPayload {
            bytes: seg,
            num_sge: 1,
            length: seg.len() as u32,
            inline_flag: SEND_INLINE,
        }
    }
}

/// Checks `wr` (operation `op`) against `limits`, in rdma-core's order
/// (`validate_send_wr`): length, SGE count, atomics, inline, UD
/// destination, then a free slot; nothing is written unless all pass. The
/// slot is then filled in place, field by field, with no staging copy.
#[inline]
fn encode_op(
    sq: &mut Producer,
    limits: SendLimits,
    wr: &SendWr<'_>,
    op: OpWords,
) -> Result<(), PostError> {
    let (num_sge, length, inline) = match wr.payload {
        Payload::Sges(sges) => (sges.len(), sge_total(sges)?, false),
        Payload::Inline(segs) => (
            segs.len(),
            total_len(POST_SEND, segs.iter().map(|s| s.len() as u64))?,
            true,
        ),
    };
    if num_sge > limits.max_sge as usize {
        return Err(PostError::TooManySges {
            op: POST_SEND,
            n: num_sge,
            max: limits.max_sge,
        });
    }
    let op_bit = 1 << op.opcode;
    if LOCAL_OPS & op_bit != 0 && num_sge != 0 && !inline {
        return Err(PostError::TooManySges {
            op: POST_SEND,
            n: num_sge,
            max: 0,
        });
    }
    if ATOMICS & op_bit != 0 && (length < 8 || op.iova % 8 != 0) {
        return Err(PostError::BadAtomic {
            opcode: wr.op.name(),
            len: length.into(),
            remote_addr: op.iova,
        });
    }
    if inline {
        if (DATA_OUT | SEND_INV) & op_bit == 0 {
            return Err(PostError::InlineNotAllowed {
                opcode: wr.op.name(),
            });
        }
        if length > limits.max_inline {
            return Err(PostError::InlineTooLong {
                len: length.into(),
                max: limits.max_inline,
            });
        }
    }
    if wr.ud.is_some() && SENDS & op_bit == 0 {
        return Err(PostError::UdNotSend {
            opcode: wr.op.name(),
        });
    }

    let slot = next_slot(sq, POST_SEND)?;
    let (wqe, tail) = send_wqe_in(slot);
    // Written in place, field by field, as rdma-core's `init_send_wqe`
    // does: no staging copy. The kernel-owned words the slot already holds
    // (status, mask, PSNs) are left alone.
    let kwr = &mut wqe.wr;
    kwr.wr_id = wr.wr_id;
    kwr.reserved = 0;
    kwr.opcode = op.opcode;
    kwr.send_flags = wr.flags.bits() | if inline { SEND_INLINE } else { 0 };
    kwr.ex = op.ex;
    // The union: this operation's member, the rest zero.
    let (member, rest) = kwr.wr.split_at_mut(4);
    member.copy_from_slice(&op.union);
    rest.fill(0);
    wqe.state = 0;
    wqe.iova = op.iova;
    wqe.dma = rxe_dma_info {
        length,
        resid: length,
        cur_sge: 0,
        num_sge: num_sge as u32, // <= max_sge, a u32
        sge_offset: 0,
        reserved: 0,
    };
    match wr.payload {
        Payload::Sges(sges) => copy_sges(tail, sges),
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

/// The slot as a send WQE header and the bytes after it.
///
/// Panics if the slot is shorter than the header (it never is: send queues
/// are mapped with slots of at least [`SEND_WQE_LEN`] bytes). Every slot
/// is 8-aligned ([`Producer::reserve`]), as the header needs.
#[inline]
fn send_wqe_in(slot: &mut [u8]) -> (&mut rxe_send_wqe, &mut [u8]) {
    assert!(slot.len() >= SEND_WQE_LEN, "{SLOT_HOLDS_WQE}");
    debug_assert_eq!(
        slot.as_ptr() as usize % std::mem::align_of::<rxe_send_wqe>(),
        0
    );
    let (head, tail) = slot.split_at_mut(SEND_WQE_LEN);
    // SAFETY: `head` is exactly `size_of::<rxe_send_wqe>()` bytes, 8-aligned
    // (every slot of a mapped queue is: `Producer::reserve`), borrowed
    // mutably for the returned lifetime; `rxe_send_wqe` is plain data valid
    // for any bytes (`FromBytes`), so the view is a valid `&mut`.
    let wqe = unsafe { &mut *head.as_mut_ptr().cast::<rxe_send_wqe>() };
    (wqe, tail)
}

/// Copies `sges` to the start of `tail`, as the kernel reads them (the
/// crate's [`Sge`] has the kernel's layout). One SGE is stored directly,
/// more with one `memcpy`.
#[inline(always)]
fn copy_sges(tail: &mut [u8], sges: &[Sge]) {
    let bytes = sges.as_bytes();
    let dst = &mut tail[..bytes.len()];
    match sges {
        [one] => {
            dst[..8].copy_from_slice(&one.addr.to_ne_bytes());
            dst[8..12].copy_from_slice(&one.length.to_ne_bytes());
            dst[12..16].copy_from_slice(&one.lkey.to_ne_bytes());
        }
        _ => dst.copy_from_slice(bytes),
    }
}

/// Why a slot view cannot fail: the queue was mapped with slots of at least
/// the WQE's size ([`QueueMem::from_raw`](super::queue::QueueMem::from_raw)'s
/// `min_elem`), 8-aligned (an 8-aligned mapping, a 384-byte header, slots of
/// a power of two of at least 8 bytes).
const SLOT_HOLDS_WQE: &str = "an rxe slot holds an aligned WQE (checked at mapping time)";

/// `max_sge` capped by what one `elem_size`-byte receive slot holds after
/// the WQE header (a receive queue caps once, when it is mapped).
pub(crate) fn recv_sges_within_slot(max_sge: u32, elem_size: usize) -> u32 {
    let room = elem_size.saturating_sub(RECV_WQE_LEN) / SGE_LEN;
    max_sge.min(u32::try_from(room).unwrap_or(u32::MAX))
}

/// [`encode_recv`] with `max_sge` capped here, for the tests: checks `wr`
/// against `max_sge` and the slot size, then writes it into the next free
/// slot of the receive queue `rq` (not yet published).
#[cfg(test)]
pub(crate) fn write_recv_wqe(
    rq: &mut Producer,
    max_sge: u32,
    wr: &RecvWr<'_>,
) -> Result<(), PostError> {
    let capped = recv_sges_within_slot(max_sge, rq.elem_size());
    encode_recv(rq, capped, wr)
}

/// Writes `wr` into the next free slot of the receive queue `rq` (not yet
/// published), `max_sge` already capped to the slot
/// ([`recv_sges_within_slot`]): the receive queue's hot path, checking in
/// rdma-core's order (SGE count, length, a free slot). Always inlined: the
/// plain hint left it out of line in some builds, a call whose frame cost
/// more than the writer.
#[inline(always)]
pub(crate) fn encode_recv(
    rq: &mut Producer,
    max_sge: u32,
    wr: &RecvWr<'_>,
) -> Result<(), PostError> {
    let n = wr.sges.len();
    if n > max_sge as usize {
        return Err(PostError::TooManySges {
            op: POST_RECV,
            n,
            max: max_sge,
        });
    }
    let length = match wr.sges {
        [one] => one.length,
        sges => recv_total_len(sges)?,
    };
    let slot = next_slot(rq, POST_RECV)?;
    assert!(slot.len() >= RECV_WQE_LEN, "{SLOT_HOLDS_WQE}");
    let (head, tail) = slot.split_at_mut(RECV_WQE_LEN);
    // SAFETY: `head` is exactly `size_of::<rxe_recv_wqe>()` bytes, 8-aligned
    // (every slot of a mapped queue is: `Producer::reserve`), borrowed
    // mutably here; `rxe_recv_wqe` is plain data valid for any bytes.
    let wqe = unsafe { &mut *head.as_mut_ptr().cast::<rxe_recv_wqe>() };
    wqe.wr_id = wr.wr_id;
    wqe.reserved = 0;
    wqe.padding = 0;
    wqe.dma = rxe_dma_info {
        length,
        resid: length,
        cur_sge: 0,
        num_sge: n as u32, // <= max_sge, a u32
        sge_offset: 0,
        reserved: 0,
    };
    copy_sges(tail, wr.sges);
    Ok(())
}

/// The completion at the start of a CQ slot: its `ib_uverbs_wc`, copied
/// whole, as it is (`None` if the slot is shorter than one).
pub(crate) fn completion(slot: &[u8]) -> Option<WorkCompletion> {
    let (wc, _) = ib_uverbs_wc::read_from_prefix(slot).ok()?;
    Some(WorkCompletion::from_raw(wc))
}

/// A poll of the CQ `cq` into `out`, its first step (see
/// [`CompletionRing::poll_first`](crate::provider::rings::CompletionRing::poll_first)):
/// the oldest completion, its slot's `ib_uverbs_wc` whole, into `out[0]`;
/// [`poll_more`] copies the rest, oldest first, and hands all their slots
/// back to the kernel with one store. No allocation, no system call, no
/// decoding: a [`WorkCompletion`] is the kernel's struct.
#[inline(always)]
pub(crate) fn poll_first(cq: &mut Consumer<ib_uverbs_wc>, out: &mut [WorkCompletion]) -> FirstPoll {
    // A WorkCompletion is an ib_uverbs_wc (`#[repr(transparent)]`): view the
    // caller's buffer as the kernel's structs and copy the slots in whole.
    // `copy_first` loads the kernel's producer index with Acquire before it
    // reads, and it or `copy_rest` publishes our consumer index with
    // Release after.
    cq.copy_first(WorkCompletion::as_raw_slice_mut(out))
}

/// Copies up to `out.len()` completions out of the CQ `cq`: [`poll_first`]
/// and, after its [`FirstPoll::More`], [`poll_more`]. Returns how many.
pub(crate) fn poll(cq: &mut Consumer<ib_uverbs_wc>, out: &mut [WorkCompletion]) -> usize {
    poll_first(cq, out).finish(|| poll_more(cq, out))
}

/// [`poll_first`]'s rest, after its [`FirstPoll::More`].
pub(crate) fn poll_more(cq: &mut Consumer<ib_uverbs_wc>, out: &mut [WorkCompletion]) -> usize {
    cq.copy_rest(WorkCompletion::as_raw_slice_mut(out))
}

#[cfg(test)]
mod qp_type_tests {
    use super::*;
    use crate::command::QpType;
    use crate::wr::{Remote, UdDest};

    fn wr(op: SendOp) -> SendWr<'static> {
        SendWr::new(1, op, Payload::Sges(&[]))
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
            (SendOp::BindMw(BIND), [true, true, false]),
            (SendOp::LocalInv { rkey: 5 }, [true, false, false]),
            (SendOp::SendWithInv { rkey: 5 }, [true, false, false]),
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

/// A bind of 0x100 bytes at 0x7000_1000 under the region 0x1122_3301,
/// the window's key going from 0x4455_6601 to 0x4455_6602.
#[cfg(test)]
const BIND: crate::wr::MwBind = crate::wr::MwBind {
    mw_rkey: 0x4455_6601,
    rkey: 0x4455_6602,
    mr_lkey: 0x1122_3301,
    addr: 0x7000_1000,
    length: 0x100,
    access: 2,
};

#[cfg(test)]
mod window_op_tests {
    use zerocopy::FromBytes;

    use super::super::kernel_model::TestRing;
    use super::super::ring_props::producer;
    use super::*;

    /// The WQE `wr` becomes, as the kernel reads it.
    fn written(wr: &SendWr<'_>) -> Result<rxe_send_wqe, PostError> {
        let ring = TestRing::new(9, 4);
        let mut sq = producer(&ring, SEND_WQE_LEN);
        sq.reserve().unwrap().fill(0xee);
        sq.cancel();
        let limits = SendLimits {
            max_sge: 4,
            max_inline: 64,
        };
        write_send_wqe(&mut sq, limits, wr)?;
        sq.publish();
        let mut out = vec![0u8; ring.elem_size()];
        assert!(ring.kernel_consumer().pop(&mut out));
        Ok(rxe_send_wqe::read_from_prefix(&out).unwrap().0)
    }

    #[test]
    fn a_bind_fills_the_mw_member_and_no_payload() {
        let wr = SendWr::new(9, SendOp::BindMw(BIND), Payload::Sges(&[]));
        let wqe = written(&wr).unwrap();
        assert_eq!((wqe.wr.wr_id, wqe.wr.opcode, wqe.wr.ex), (9, 8, 0));
        // addr, length, mr_lkey | mw_rkey << 32, rkey | access << 32.
        assert_eq!(
            wqe.wr.wr[..4],
            [0x7000_1000, 0x100, 0x4455_6601_1122_3301, 0x2_4455_6602]
        );
        assert!(wqe.wr.wr[4..].iter().all(|&w| w == 0));
        assert_eq!((wqe.iova, wqe.dma.length, wqe.dma.num_sge), (0, 0, 0));
    }

    #[test]
    fn invalidations_carry_the_key_in_host_order() {
        for (op, opcode) in [
            (SendOp::LocalInv { rkey: 0x1234_5678 }, 7),
            (SendOp::SendWithInv { rkey: 0x1234_5678 }, 9),
        ] {
            let wqe = written(&SendWr::new(3, op, Payload::Sges(&[]))).unwrap();
            assert_eq!((wqe.wr.opcode, wqe.wr.ex), (opcode, 0x1234_5678));
            assert!(wqe.wr.wr.iter().all(|&w| w == 0));
        }
        // SEND_WITH_INV carries data, inline too.
        let segs: [&[u8]; 1] = [b"hi"];
        let op = SendOp::SendWithInv { rkey: 1 };
        let wqe = written(&SendWr::new(3, op, Payload::Inline(&segs))).unwrap();
        assert_eq!((wqe.dma.length, wqe.wr.send_flags & SEND_INLINE), (2, 8));
    }

    #[test]
    fn local_operations_take_no_payload() {
        let sge = [Sge {
            addr: 1,
            length: 8,
            lkey: 2,
        }];
        let segs: [&[u8]; 1] = [b"hi"];
        for op in [SendOp::BindMw(BIND), SendOp::LocalInv { rkey: 1 }] {
            let e = written(&SendWr::new(1, op, Payload::Sges(&sge))).unwrap_err();
            assert_eq!(
                e,
                PostError::TooManySges {
                    op: POST_SEND,
                    n: 1,
                    max: 0
                }
            );
            let e = written(&SendWr::new(1, op, Payload::Inline(&segs))).unwrap_err();
            assert_eq!(e, PostError::InlineNotAllowed { opcode: op.name() });
        }
    }
}
