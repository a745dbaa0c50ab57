//! Work requests into siw queue elements, completions out of them.
//!
//! The crate's requests and completions ([`SendWr`], [`RecvWr`],
//! [`WorkCompletion`], defined in [`crate::wr`]) are translated to and from
//! siw's elements:
//!
//! * SQE: `id` = wr_id; `opcode` = [`SIW_OP_WRITE`], [`SIW_OP_READ`] or
//!   [`SIW_OP_SEND`] (the crate has no SEND_WITH_INVALIDATE request, so
//!   `SIW_OP_SEND_REMOTE_INV` is never written); `raddr`/`rkey` the remote
//!   buffer (0 for a SEND); `sge[..num_sge]` the SGEs (the same 16-byte
//!   layout). Inline data (SEND and WRITE only, up to [`SIW_MAX_INLINE`]
//!   bytes, any number of segments) is packed into the bytes of `sge[1..]`,
//!   its total length in `sge[0].length` and `num_sge = 1`: the kernel
//!   (`siw_activate_tx_from_sq`) points `sge[0]` at `sge[1]` itself. The
//!   writers write only what the kernel reads: the `num_sge` SGEs, or the
//!   inline length and bytes; the rest of a reused slot keeps what it held
//!   (the kernel copies the whole SQE but reads `num_sge` SGEs, and for
//!   inline data overwrites `sge[0]`'s address and key and reads `length`
//!   bytes; the same in 6.1 and 6.12). Flags:
//!   SIGNALED (or the QP's sig-all) → [`SIW_WQE_SIGNALLED`], SOLICITED →
//!   [`SIW_WQE_SOLICITED`], FENCE → [`SIW_WQE_READ_FENCE`], inline →
//!   [`SIW_WQE_INLINE`]; VALID is added by [`Producer::post`] last. For user
//!   QPs the kernel does not apply sig-all itself: the writer must.
//! * RQE: `id`, `num_sge`, `sge`, and flags exactly VALID (the kernel's
//!   `siw_rqe_get` takes an RQE only when `flags == SIW_WQE_VALID`).
//! * CQE: `status` is a `siw_wc_status`, `opcode` the `siw_opcode` of the
//!   completed SQE (or [`SIW_OP_RECEIVE`]), `bytes`, `qp_id` the QP number
//!   (`siw_sqe_complete`, `siw_rqe_complete`). The kernel writes no
//!   immediate data and, for user CQs, no invalidated key (neither is read,
//!   as in rdma-core). Each CQE becomes
//!   the kernel's `ib_uverbs_wc` (what rxe's CQ holds, and what a
//!   [`WorkCompletion`] is): status and opcode mapped to the kernel's
//!   values as rdma-core maps them ([`wc_status`], [`wc_opcode`]). A siw
//!   value this crate does not know is kept as is (it reads back as
//!   `Unknown` of itself), unless the kernel's enum gives that number a
//!   meaning (a status from 10 to 21, an opcode 128 or 129, none of which
//!   siw defines): then bit 31 is set ([`UNKNOWN_TAG`]) so that it still
//!   reads as `Unknown`, never as another status.
//!
//! What siw cannot do is refused with a typed error before anything is
//! handed to the kernel (rdma-core returns EINVAL for the same): immediate
//! data, atomics (`atomic_cap` 0), UD destinations (siw is RC only), a
//! fenced READ, a READ into more than one SGE (`max_sge_rd` 1; the kernel
//! would silently use only the first), inline data on a READ. A batch is
//! all or nothing: a send batch is checked as it is written into free slots
//! and published (flags words set, VALID with them) only once every request
//! is written, so a refused one hands the kernel nothing (the slots it wrote
//! stay free, their flags words 0, which is all the kernel reads of them); a
//! receive batch is checked and its free slots counted before the first is
//! written. A refused single request writes nothing. Either way the error
//! names the first refused request, and a full queue only when no request
//! is refused.
//!
//! The writers fill a free slot in place through a [`Slot`] (no element is
//! built aside and copied in): [`write_sqe_op`] any request [`check_send_op`]
//! accepted, and the fast path ([`fast_send`], [`write_fast_send`]) the
//! usual one, a SEND or RDMA WRITE from one SGE or one inline segment, for
//! which every check passes and so none is made; a single request also
//! takes a SEND or WRITE from several SGEs that way ([`single_send`],
//! [`write_gather_send`]). One request, the usual post, is checked and
//! written in one pass; a batch goes through
//! [`post_send_batch`]. `writer_tests` holds the fast path to the general
//! path and both to the whole-element references (`build_sqe`,
//! `build_rqe`, test-only), byte for byte.

use zerocopy::IntoBytes;

use uverbs_uapi::{
    ib_uverbs_wc, siw_cqe, siw_rqe, siw_sge, siw_sqe, SIW_MAX_INLINE, SIW_MAX_SGE,
    SIW_OP_COMP_AND_SWAP, SIW_OP_FETCH_AND_ADD, SIW_OP_INVAL_STAG, SIW_OP_READ,
    SIW_OP_READ_LOCAL_INV, SIW_OP_RECEIVE, SIW_OP_SEND, SIW_OP_SEND_REMOTE_INV,
    SIW_OP_SEND_WITH_IMM, SIW_OP_WRITE, SIW_WC_BAD_RESP_ERR, SIW_WC_GENERAL_ERR,
    SIW_WC_LOC_ACCESS_ERR, SIW_WC_LOC_LEN_ERR, SIW_WC_LOC_PROT_ERR, SIW_WC_LOC_QP_OP_ERR,
    SIW_WC_REM_ACCESS_ERR, SIW_WC_REM_INV_REQ_ERR, SIW_WC_SUCCESS, SIW_WC_WR_FLUSH_ERR,
    SIW_WQE_INLINE, SIW_WQE_READ_FENCE, SIW_WQE_SIGNALLED, SIW_WQE_SOLICITED,
};

use super::queue::{CqConsumer, Posted, Producer, QueueFull, Slot, Unpublished};
use crate::error::Errno;
use crate::provider::rings::FirstPoll;
use crate::wr::{
    Payload, PostError, RecvWr, Remote, SendFlags, SendOp, SendWr, Sge, WcOpcode, WcStatus,
    WorkCompletion,
};

/// SGEs an RDMA READ may scatter into (`SIW_MAX_SGE_RD`: an iWARP READ
/// response lands in one buffer).
const MAX_READ_SGE: u32 = 1;
/// The operation a send WR's error names.
const POST_SEND: &str = "post_send";
/// The operation a receive WR's error names.
const POST_RECV: &str = "post_recv";

/// What the send queue accepts, from the QP's creation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SendConfig {
    /// SGEs per SQE the QP was created with (capped at [`SIW_MAX_SGE`]).
    pub(crate) max_sge: u32,
    /// Inline bytes per SQE the QP was created with (capped at
    /// [`SIW_MAX_INLINE`]).
    pub(crate) max_inline: u32,
    /// The QP signals every request (`sq_sig_all`).
    pub(crate) sig_all: bool,
}

/// Why a siw work request was not queued. Nothing was written to the queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum SiwPostError {
    /// A mistake any provider refuses (too many SGEs, inline too long,
    /// length overflow, queue full).
    #[error(transparent)]
    Post(#[from] PostError),
    /// Something siw cannot do.
    #[error("post_send: siw does not support {what} (EINVAL)")]
    Unsupported {
        /// The opcode or feature.
        what: &'static str,
    },
    /// siw refuses to fence an RDMA READ (`siw_activate_tx_from_sq`: "cannot
    /// fence read"), which would break the QP after posting.
    #[error("post_send: siw cannot fence an RDMA_READ (EINVAL)")]
    FencedRead,
}

impl SiwPostError {
    /// The errno rdma-core's siw provider returns for the same mistake.
    pub(crate) fn errno(&self) -> Errno {
        match self {
            SiwPostError::Post(e) => e.errno(),
            SiwPostError::Unsupported { .. } | SiwPostError::FencedRead => Errno::INVAL,
        }
    }
}

impl From<SiwPostError> for PostError {
    /// The crate's error for a siw refusal: siw's own refusals become
    /// [`PostError::NotSupported`].
    fn from(e: SiwPostError) -> PostError {
        match e {
            SiwPostError::Post(e) => e,
            SiwPostError::Unsupported { what } => PostError::NotSupported {
                driver: "siw",
                what,
            },
            SiwPostError::FencedRead => PostError::NotSupported {
                driver: "siw",
                what: "a fenced RDMA_READ",
            },
        }
    }
}

/// A refused batch: the request at `index` was refused, nothing was queued.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("work request {index}: {error}")]
pub(crate) struct Refused {
    /// Index of the first refused request in the batch.
    pub(crate) index: usize,
    /// Why.
    pub(crate) error: SiwPostError,
}

/// Total of `lens`, checked against the 32-bit message length.
fn total_len(op: &'static str, lens: impl Iterator<Item = u64>) -> Result<u32, PostError> {
    let len: u64 = lens.sum();
    u32::try_from(len).map_err(|_| PostError::TooLong { op, len })
}

/// Checks the total length of `sges` against the 32-bit message length.
/// One SGE's length is a `u32` already: nothing to add up.
#[inline(always)]
fn check_sge_total(op: &'static str, sges: &[Sge]) -> Result<(), PostError> {
    if sges.len() > 1 {
        total_len(op, sges.iter().map(|s| u64::from(s.length)))?;
    }
    Ok(())
}

/// What an SQE says of its operation besides the payload: `opcode`, and
/// the remote buffer (`raddr`, `rkey`; 0 for a SEND, which has none).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct SqeOp {
    opcode: u8,
    rkey: u32,
    raddr: u64,
}

impl SqeOp {
    /// A SEND's words.
    const SEND: SqeOp = SqeOp {
        opcode: SIW_OP_SEND,
        rkey: 0,
        raddr: 0,
    };
}

/// The SQE words of an op siw supports, or the refusal naming the op: one
/// match on the operation for its opcode and its remote side.
#[inline(always)]
fn sqe_op(op: &SendOp) -> Result<SqeOp, SiwPostError> {
    let to = |opcode, remote: Remote| SqeOp {
        opcode,
        rkey: remote.rkey,
        raddr: remote.addr,
    };
    match *op {
        SendOp::Send { imm: None } => Ok(SqeOp::SEND),
        SendOp::RdmaWrite { remote, imm: None } => Ok(to(SIW_OP_WRITE, remote)),
        SendOp::RdmaRead { remote } => Ok(to(SIW_OP_READ, remote)),
        SendOp::Send { imm: Some(_) } => Err(unsupported("SEND_WITH_IMM")),
        SendOp::RdmaWrite { imm: Some(_), .. } => Err(unsupported("RDMA_WRITE_WITH_IMM")),
        SendOp::CompareSwap { .. } => Err(unsupported("ATOMIC_CMP_AND_SWP")),
        SendOp::FetchAdd { .. } => Err(unsupported("ATOMIC_FETCH_AND_ADD")),
        // siw has no memory windows; invalidation is not offered here.
        SendOp::BindMw(_) => Err(unsupported("BIND_MW")),
        SendOp::LocalInv { .. } => Err(unsupported("LOCAL_INV")),
        SendOp::SendWithInv { .. } => Err(unsupported("SEND_WITH_INV")),
    }
}

#[cold]
fn unsupported(what: &'static str) -> SiwPostError {
    SiwPostError::Unsupported { what }
}

/// Checks `wr` against what siw and the QP accept; writes nothing.
pub(crate) fn check_send(cfg: SendConfig, wr: &SendWr<'_>) -> Result<(), SiwPostError> {
    check_send_op(cfg, wr).map(|_| ())
}

/// [`check_send`], answering the SQE words of the request's operation.
#[inline]
fn check_send_op(cfg: SendConfig, wr: &SendWr<'_>) -> Result<SqeOp, SiwPostError> {
    let op = sqe_op(&wr.op)?;
    if wr.ud.is_some() {
        return Err(SiwPostError::Unsupported {
            what: "a UD destination",
        });
    }
    let is_read = op.opcode == SIW_OP_READ;
    if is_read && wr.flags.contains(SendFlags::FENCE) {
        return Err(SiwPostError::FencedRead);
    }
    match wr.payload {
        Payload::Sges(sges) => {
            let max = if is_read {
                MAX_READ_SGE
            } else {
                cfg.max_sge.min(SIW_MAX_SGE)
            };
            if sges.len() > max as usize {
                return Err(PostError::TooManySges {
                    op: POST_SEND,
                    n: sges.len(),
                    max,
                }
                .into());
            }
            check_sge_total(POST_SEND, sges)?;
        }
        Payload::Inline(segs) => {
            if is_read {
                return Err(PostError::InlineNotAllowed {
                    opcode: "RDMA_READ",
                }
                .into());
            }
            let len: u64 = segs.iter().map(|s| s.len() as u64).sum();
            let max = cfg.max_inline.min(SIW_MAX_INLINE);
            if len > u64::from(max) {
                return Err(PostError::InlineTooLong { len, max }.into());
            }
        }
    }
    Ok(op)
}

// The request's flag bits sit where siw's do, shifted: one shift and a
// mask each, no branch (`sqe_flags`).
const _: () = assert!(SendFlags::SIGNALED.bits() << 1 == SIW_WQE_SIGNALLED as u32);
const _: () = assert!(SendFlags::SOLICITED.bits() << 1 == SIW_WQE_SOLICITED as u32);
const _: () = assert!(SendFlags::FENCE.bits() << 4 == SIW_WQE_READ_FENCE as u32);

/// The SQE flags of a request (without VALID, which the producer adds):
/// SIGNALED or the QP's sig-all → SIGNALLED, SOLICITED → SOLICITED,
/// FENCE → READ_FENCE, other bits ignored; INLINE is the payload's to add.
#[inline(always)]
fn sqe_flags(cfg: SendConfig, flags: SendFlags) -> u16 {
    let bits = flags.bits();
    let sig_sol = (bits & (SendFlags::SIGNALED | SendFlags::SOLICITED).bits()) << 1;
    let fence = (bits & SendFlags::FENCE.bits()) << 4;
    let sig_all = if cfg.sig_all { SIW_WQE_SIGNALLED } else { 0 };
    // Both below bit 5: the u16 keeps them.
    (sig_sol | fence) as u16 | sig_all
}

/// The SQE for `wr`, which [`check_send`] accepted (its flags without
/// VALID), built whole as a value, field by field, with none of the ring
/// writers' code: the reference the tests hold [`write_sqe_op`] and
/// [`write_fast_send`] to, byte for byte.
#[cfg(test)]
pub(crate) fn build_sqe(cfg: SendConfig, wr: &SendWr<'_>) -> siw_sqe {
    let mut sqe = siw_sqe {
        id: wr.wr_id,
        ..siw_sqe::default()
    };
    // check_send refused every other op.
    sqe.opcode = match wr.op {
        SendOp::RdmaWrite { .. } => SIW_OP_WRITE,
        SendOp::RdmaRead { .. } => SIW_OP_READ,
        _ => SIW_OP_SEND,
    };
    if let SendOp::RdmaWrite { remote, .. } | SendOp::RdmaRead { remote } = wr.op {
        sqe.raddr = remote.addr;
        sqe.rkey = remote.rkey;
    }
    let mut flags = 0;
    if wr.flags.contains(SendFlags::SIGNALED) || cfg.sig_all {
        flags |= SIW_WQE_SIGNALLED;
    }
    if wr.flags.contains(SendFlags::SOLICITED) {
        flags |= SIW_WQE_SOLICITED;
    }
    if wr.flags.contains(SendFlags::FENCE) {
        flags |= SIW_WQE_READ_FENCE;
    }
    match wr.payload {
        Payload::Sges(sges) => {
            for (dst, s) in sqe.sge.iter_mut().zip(sges) {
                *dst = to_siw_sge(s);
            }
            // <= SIW_MAX_SGE (checked), so it fits a u8.
            sqe.num_sge = sges.len().min(SIW_MAX_SGE as usize) as u8;
        }
        Payload::Inline(segs) => {
            flags |= SIW_WQE_INLINE;
            let data = sqe.sge[1..].as_mut_bytes();
            let mut at = 0;
            for seg in segs {
                // The total is <= SIW_MAX_INLINE = the room of sge[1..] (checked).
                let end = (at + seg.len()).min(data.len());
                data[at..end].copy_from_slice(&seg[..end - at]);
                at = end;
            }
            sqe.sge[0].length = at as u32; // <= 80
            sqe.num_sge = 1;
        }
    }
    sqe.flags = flags;
    sqe
}

/// Writes the SQE of `wr`, which [`check_send_op`] accepted answering
/// `op`, into `slot`: every byte but the flags, which it answers (without
/// VALID). The general writer: any request siw takes.
#[inline]
fn write_sqe_op(cfg: SendConfig, wr: &SendWr<'_>, op: SqeOp, slot: &mut Slot<'_, siw_sqe>) -> u16 {
    let mut flags = sqe_flags(cfg, wr.flags);
    let sges = slot.sges();
    // Only what the kernel reads is written (see the module's docs).
    let num_sge = match wr.payload {
        Payload::Sges(list) => {
            for (dst, s) in sges.iter_mut().zip(list) {
                *dst = to_siw_sge(s);
            }
            // <= SIW_MAX_SGE (checked), so it fits a u8.
            list.len().min(SIW_MAX_SGE as usize) as u8
        }
        Payload::Inline(segs) => {
            flags |= SIW_WQE_INLINE;
            let data = sges[1..].as_mut_bytes();
            let mut at = 0;
            for seg in segs {
                // The total is <= SIW_MAX_INLINE = the room of sge[1..] (checked).
                let end = (at + seg.len()).min(data.len());
                data[at..end].copy_from_slice(&seg[..end - at]);
                at = end;
            }
            sges[0].length = at as u32; // <= 80
            1
        }
    };
    slot.set_head(wr.wr_id, num_sge, op.opcode, op.rkey, op.raddr);
    flags
}

/// A request the fast path takes: its SQE words and its one payload item.
#[derive(Clone, Copy, Debug)]
pub(crate) struct FastSend<'a> {
    op: SqeOp,
    payload: FastPayload<'a>,
}

/// The one payload item of a [`FastSend`].
#[derive(Clone, Copy, Debug)]
enum FastPayload<'a> {
    /// Exactly one SGE.
    Sge(&'a Sge),
    /// Exactly one inline segment, within the QP's inline limit.
    Inline(&'a [u8]),
}

/// The SQE words of a request the fast paths take, judged by its
/// operation alone: a SEND or RDMA WRITE without immediate data, or an
/// RDMA READ without a fence, with no UD destination; for any other, the
/// caller returns `None`. A macro: as a function answering an `Option`,
/// inlined into a batch's loop, it cost a batch of four 16 Ir.
macro_rules! fast_op {
    ($wr:expr) => {{
        let wr: &SendWr<'_> = $wr;
        if wr.ud.is_some() {
            return None;
        }
        match wr.op {
            SendOp::RdmaWrite { remote, imm: None } => SqeOp {
                opcode: SIW_OP_WRITE,
                rkey: remote.rkey,
                raddr: remote.addr,
            },
            SendOp::Send { imm: None } => SqeOp::SEND,
            // A READ without a fence (siw refuses a fenced READ), into one
            // SGE (below): within its limit of `MAX_READ_SGE`, never inline.
            SendOp::RdmaRead { remote } if !wr.flags.contains(SendFlags::FENCE) => SqeOp {
                opcode: SIW_OP_READ,
                rkey: remote.rkey,
                raddr: remote.addr,
            },
            _ => return None,
        }
    }};
}

/// The fast path: a SEND or RDMA WRITE without immediate data and with no
/// UD destination, whose payload is exactly one SGE (on a QP taking at
/// least one: `max_sge` ≥ 1) or exactly one inline segment of at most the
/// QP's inline limit (capped at [`SIW_MAX_INLINE`]); or an RDMA READ
/// without a fence into exactly one SGE. Every check of [`check_send`]
/// passes for such a request (its op is supported, a READ is neither
/// fenced nor inline and its one SGE within [`MAX_READ_SGE`], one SGE is
/// within the QP's limit and its length a `u32`, the segment is the whole
/// inline length), so it needs none. Answers what [`write_fast_send`]
/// writes, or `None` for any other request (the general path's).
#[inline(always)]
pub(crate) fn fast_send<'a>(cfg: SendConfig, wr: &SendWr<'a>) -> Option<FastSend<'a>> {
    let op = fast_op!(wr);
    // `fast_payload`'s match, written out: called here, as a function
    // answering an `Option`, it cost a batch of four 16 Ir.
    let payload = match wr.payload {
        Payload::Sges([sge]) if cfg.max_sge != 0 => FastPayload::Sge(sge),
        Payload::Inline([seg])
            if op.opcode != SIW_OP_READ
                && seg.len() <= cfg.max_inline.min(SIW_MAX_INLINE) as usize =>
        {
            FastPayload::Inline(seg)
        }
        _ => return None,
    };
    Some(FastSend { op, payload })
}

/// The fast path's payload for a request of operation `op`: one SGE, or
/// one inline segment within the QP's inline limit (not for a READ), as
/// [`fast_send`] takes it.
#[inline(always)]
fn fast_payload<'a>(cfg: SendConfig, op: SqeOp, payload: Payload<'a>) -> Option<FastPayload<'a>> {
    match payload {
        Payload::Sges([sge]) if cfg.max_sge != 0 => Some(FastPayload::Sge(sge)),
        Payload::Inline([seg])
            if op.opcode != SIW_OP_READ
                && seg.len() <= cfg.max_inline.min(SIW_MAX_INLINE) as usize =>
        {
            Some(FastPayload::Inline(seg))
        }
        _ => None,
    }
}

/// Writes the SQE of a request [`fast_send`] took, as [`write_sqe_op`] would:
/// the head, then the SGE, or the inline length in `sge[0]` and the
/// segment packed after it; answers the flags.
#[inline(always)]
fn write_fast_send(
    cfg: SendConfig,
    wr: &SendWr<'_>,
    fast: FastSend<'_>,
    slot: &mut Slot<'_, siw_sqe>,
) -> u16 {
    let mut flags = sqe_flags(cfg, wr.flags);
    let sges = slot.sges();
    match fast.payload {
        FastPayload::Sge(sge) => sges[0] = to_siw_sge(sge),
        FastPayload::Inline(seg) => {
            flags |= SIW_WQE_INLINE;
            // fast_send took at most SIW_MAX_INLINE bytes, the room of
            // sge[1..]: the `get_mut` always answers.
            if let Some(data) = sges[1..].as_mut_bytes().get_mut(..seg.len()) {
                data.copy_from_slice(seg);
            }
            sges[0].length = seg.len() as u32; // <= 80
        }
    }
    slot.set_head(wr.wr_id, 1, fast.op.opcode, fast.op.rkey, fast.op.raddr);
    flags
}

/// A gather [`single_send`] takes: its SQE words and its SGEs.
#[derive(Clone, Copy, Debug)]
pub(crate) struct GatherSend<'a> {
    op: SqeOp,
    sges: &'a [Sge],
}

/// What the single-request path writes without the general checks.
#[derive(Clone, Copy, Debug)]
pub(crate) enum SingleSend<'a> {
    /// What [`fast_send`] takes.
    Fast(FastSend<'a>),
    /// A SEND or RDMA WRITE (as [`fast_send`] takes them) from any other
    /// number of SGEs (none included), up to the QP's `max_sge` (capped at
    /// [`SIW_MAX_SGE`]), their total a `u32`.
    Gather(GatherSend<'a>),
}

/// The single-request path: [`fast_send`]'s requests, and those it
/// declines only for their number of SGEs ([`SingleSend::Gather`]). Every
/// check of [`check_send`] passes for such a request, so it needs none.
/// Not for a batch's loop, where the gather's test and copy would cost
/// each request registers (inside [`fast_send`] they cost a batch of four
/// 29 Ir).
#[inline(always)]
pub(crate) fn single_send<'a>(cfg: SendConfig, wr: &SendWr<'a>) -> Option<SingleSend<'a>> {
    let op = fast_op!(wr);
    if let Some(payload) = fast_payload(cfg, op, wr.payload) {
        return Some(SingleSend::Fast(FastSend { op, payload }));
    }
    match wr.payload {
        Payload::Sges(sges)
            if op.opcode != SIW_OP_READ
                && sges.len() <= cfg.max_sge.min(SIW_MAX_SGE) as usize
                && Sge::total_length(sges).is_some() =>
        {
            Some(SingleSend::Gather(GatherSend { op, sges }))
        }
        _ => None,
    }
}

/// Writes the SQE of a request [`single_send`] took as a gather, as
/// [`write_sqe_op`] would: the SGEs, then the head; answers the flags.
#[inline(always)]
fn write_gather_send(
    cfg: SendConfig,
    wr: &SendWr<'_>,
    gather: GatherSend<'_>,
    slot: &mut Slot<'_, siw_sqe>,
) -> u16 {
    let sges = slot.sges();
    // Two SGEs (the usual gather, a header and its payload) as two stores:
    // through the loop they cost 10 Ir more (probe_post_write_two).
    match gather.sges {
        [first, second] => {
            sges[0] = to_siw_sge(first);
            sges[1] = to_siw_sge(second);
        }
        more => {
            for (dst, s) in sges.iter_mut().zip(more) {
                *dst = to_siw_sge(s);
            }
        }
    }
    // At most SIW_MAX_SGE (single_send), so it fits a u8.
    let num_sge = gather.sges.len() as u8;
    slot.set_head(
        wr.wr_id,
        num_sge,
        gather.op.opcode,
        gather.op.rkey,
        gather.op.raddr,
    );
    sqe_flags(cfg, wr.flags)
}

#[inline(always)]
fn to_siw_sge(s: &Sge) -> siw_sge {
    siw_sge {
        laddr: s.addr,
        length: s.length,
        lkey: s.lkey,
    }
}

/// Checks every request of `wrs`, then writes them all into the send queue
/// `sq` and hands them to the kernel, or writes nothing. On success the
/// caller must write the POST_SEND doorbell iff
/// [`Posted::needs_doorbell`].
#[inline]
pub(crate) fn post_send(
    sq: &mut Producer<siw_sqe>,
    cfg: SendConfig,
    wrs: &[SendWr<'_>],
) -> Result<Posted, Refused> {
    post_send_via::<true>(sq, cfg, wrs)
}

/// The fast path's answer for `wr` if `FAST`, else `None`.
#[inline(always)]
fn fast_if<'a, const FAST: bool>(cfg: SendConfig, wr: &SendWr<'a>) -> Option<FastSend<'a>> {
    if FAST {
        fast_send(cfg, wr)
    } else {
        None
    }
}

/// [`single_send`]'s answer for `wr` if `FAST`, else `None`.
#[inline(always)]
fn single_if<'a, const FAST: bool>(cfg: SendConfig, wr: &SendWr<'a>) -> Option<SingleSend<'a>> {
    if FAST {
        single_send(cfg, wr)
    } else {
        None
    }
}

/// [`post_send`], with the fast path (`FAST`) or with every request
/// through the general checks and writer (the tests compare the two).
#[inline(always)]
pub(crate) fn post_send_via<const FAST: bool>(
    sq: &mut Producer<siw_sqe>,
    cfg: SendConfig,
    wrs: &[SendWr<'_>],
) -> Result<Posted, Refused> {
    if let [wr] = wrs {
        // One request, the usual post. Each payload posts in its own arm,
        // so that the usual one (one SGE) is written with its sizes as
        // constants (with one arm for both fast payloads, the one-SGE WRITE
        // cost 7 Ir more).
        let posted = match single_if::<FAST>(cfg, wr) {
            Some(SingleSend::Fast(
                fast @ FastSend {
                    payload: FastPayload::Sge(_),
                    ..
                },
            )) => sq.post_one(
                #[inline(always)]
                |slot| write_fast_send(cfg, wr, fast, slot),
            ),
            Some(SingleSend::Fast(fast)) => sq.post_one(
                #[inline(always)]
                |slot| write_fast_send(cfg, wr, fast, slot),
            ),
            Some(SingleSend::Gather(gather)) => sq.post_one(
                #[inline(always)]
                |slot| write_gather_send(cfg, wr, gather, slot),
            ),
            None => return post_send_general(sq, cfg, wr),
        };
        return posted.map_err(|full| queue_full(POST_SEND, full));
    }
    post_send_batch::<FAST>(sq, cfg, wrs)
}

/// [`post_send_via`] for one request the fast path did not take: checked
/// and written in one pass, its op matched once. Apart from the fast path,
/// whose code it would otherwise crowd (its registers saved on every post).
#[inline(never)]
fn post_send_general(
    sq: &mut Producer<siw_sqe>,
    cfg: SendConfig,
    wr: &SendWr<'_>,
) -> Result<Posted, Refused> {
    let op = check_send_op(cfg, wr).map_err(|error| Refused { index: 0, error })?;
    sq.post_one(|slot| write_sqe_op(cfg, wr, op, slot))
        .map_err(|full| queue_full(POST_SEND, full))
}

/// [`post_send_via`] for any number of requests but one: each request
/// checked as it is written into its slot, in one pass, and all published
/// (their flags words set) once all are written
/// ([`Producer::stage_then_publish`]); a refusal or a full queue publishes
/// none. Apart from the one-request path, as [`post_send_general`].
#[inline(never)]
fn post_send_batch<const FAST: bool>(
    sq: &mut Producer<siw_sqe>,
    cfg: SendConfig,
    wrs: &[SendWr<'_>],
) -> Result<Posted, Refused> {
    sq.stage_then_publish(
        wrs,
        |wr, slot| {
            let flags = match fast_if::<FAST>(cfg, wr) {
                Some(fast) => write_fast_send(cfg, wr, fast, slot),
                None => check_and_write_sqe(cfg, wr, slot)?,
            };
            // What the publish stores, computed there again rather than
            // kept: the same function of the request.
            debug_assert_eq!(flags, send_flags(cfg, wr));
            Ok(())
        },
        |wr| send_flags(cfg, wr),
    )
    .map_err(|unpublished| match unpublished {
        Unpublished::Refused { index, error } => Refused { index, error },
        Unpublished::Full(full) => batch_full(cfg, wrs, full),
    })
}

/// The flags word (without VALID) the writers answer for `wr`, which
/// [`check_send`] accepted: [`sqe_flags`], plus INLINE for inline data.
#[inline(always)]
fn send_flags(cfg: SendConfig, wr: &SendWr<'_>) -> u16 {
    let flags = sqe_flags(cfg, wr.flags);
    match wr.payload {
        Payload::Inline(_) => flags | SIW_WQE_INLINE,
        Payload::Sges(_) => flags,
    }
}

/// A batch's request the fast path did not take, checked and written into
/// `slot`; answers its flags. Apart from the batch's loop, whose registers
/// it would otherwise crowd.
#[inline(never)]
fn check_and_write_sqe(
    cfg: SendConfig,
    wr: &SendWr<'_>,
    slot: &mut Slot<'_, siw_sqe>,
) -> Result<u16, SiwPostError> {
    check_send_op(cfg, wr).map(|op| write_sqe_op(cfg, wr, op, slot))
}

/// The refusal of a batch that did not fit from request `full.free` on: a
/// refused request is named first, as though every request were checked
/// before any slot was looked at. (The requests before `full.free` passed
/// already, unless the batch was longer than the ring and none was looked
/// at: all are checked, on this cold path.)
#[cold]
fn batch_full(cfg: SendConfig, wrs: &[SendWr<'_>], full: QueueFull) -> Refused {
    wrs.iter()
        .enumerate()
        .find_map(|(index, wr)| {
            check_send(cfg, wr)
                .err()
                .map(|error| Refused { index, error })
        })
        .unwrap_or_else(|| queue_full(POST_SEND, full))
}

/// Checks a receive request against `max` SGEs (already capped at
/// [`SIW_MAX_SGE`]) and the 32-bit message length.
#[inline]
fn check_recv(max: u32, wr: &RecvWr<'_>) -> Result<(), SiwPostError> {
    if wr.sges.len() > max as usize {
        return Err(PostError::TooManySges {
            op: POST_RECV,
            n: wr.sges.len(),
            max,
        }
        .into());
    }
    check_sge_total(POST_RECV, wr.sges)?;
    Ok(())
}

/// Writes the RQE of `wr`, which [`check_recv`] accepted, into `slot`:
/// its id, SGE count and its SGEs; the flags stay 0 (the producer publishes
/// exactly VALID). The SGEs past the count are left as they are (zero, or
/// an earlier receive's): the kernel reads `num_sge` of them and no more
/// (`siw_rqe_get` copies `rqe->sge[i]` for `i < num_sge`), as rdma-core's
/// `siw_post_recv` writes `num_sge` of them and no more.
#[inline(always)]
fn write_rqe(wr: &RecvWr<'_>, slot: &mut Slot<'_, siw_rqe>) -> u16 {
    let sges = slot.sges();
    match wr.sges {
        // The usual receive: its SGE stored directly.
        [sge] => sges[0] = to_siw_sge(sge),
        list => {
            for (dst, s) in sges.iter_mut().zip(list) {
                *dst = to_siw_sge(s);
            }
        }
    }
    // <= SIW_MAX_SGE (checked), so it fits a u8.
    slot.set_head(wr.wr_id, wr.sges.len().min(SIW_MAX_SGE as usize) as u8);
    0
}

/// The RQE for `wr`, built whole as a value: the reference the tests hold
/// the ring writer to.
#[cfg(test)]
pub(crate) fn build_rqe(wr: &RecvWr<'_>) -> siw_rqe {
    let mut rqe = siw_rqe {
        id: wr.wr_id,
        num_sge: wr.sges.len().min(SIW_MAX_SGE as usize) as u8,
        ..siw_rqe::default()
    };
    for (dst, s) in rqe.sge.iter_mut().zip(wr.sges) {
        *dst = to_siw_sge(s);
    }
    rqe
}

/// Checks every request of `wrs`, then writes them all into the receive
/// queue `rq` and hands them to the kernel, or writes nothing. Returns how
/// many were posted. No doorbell: the kernel looks at the RQ when a message
/// arrives.
#[inline]
pub(crate) fn post_recv(
    rq: &mut Producer<siw_rqe>,
    max_sge: u32,
    wrs: &[RecvWr<'_>],
) -> Result<u32, Refused> {
    let max = max_sge.min(SIW_MAX_SGE);
    if let [wr] = wrs {
        // One request, the usual post.
        check_recv(max, wr).map_err(|error| Refused { index: 0, error })?;
        return rq
            .fill_one(|slot| write_rqe(wr, slot))
            .map(|()| 1)
            .map_err(|full| queue_full(POST_RECV, full));
    }
    post_recv_batch(rq, max, wrs)
}

/// [`post_recv`] of one request, answering only whether it wrote it (see
/// [`RecvRing::try_post`](crate::provider::rings::RecvRing::try_post)):
/// `false`, with nothing written, for a refused request, a full ring, or
/// any number of requests but one, which [`post_recv`] then posts (out of
/// line: the common case keeps no frame for a batch's call).
#[inline(always)]
pub(crate) fn try_post_recv(rq: &mut Producer<siw_rqe>, max_sge: u32, wrs: &[RecvWr<'_>]) -> bool {
    let [wr] = wrs else {
        return false;
    };
    let max = max_sge.min(SIW_MAX_SGE);
    check_recv(max, wr).is_ok() && rq.fill_one(|slot| write_rqe(wr, slot)).is_ok()
}

/// [`post_recv`] for any number of requests but one (as
/// [`post_send_batch`]); `max` is capped already.
#[inline(never)]
fn post_recv_batch(
    rq: &mut Producer<siw_rqe>,
    max: u32,
    wrs: &[RecvWr<'_>],
) -> Result<u32, Refused> {
    for (index, wr) in wrs.iter().enumerate() {
        check_recv(max, wr).map_err(|error| Refused { index, error })?;
    }
    rq.fill_with(wrs, write_rqe)
        .map_err(|full| queue_full(POST_RECV, full))
}

#[cold]
fn queue_full(op: &'static str, full: QueueFull) -> Refused {
    Refused {
        index: full.free as usize,
        error: PostError::QueueFull {
            op,
            capacity: full.capacity,
        }
        .into(),
    }
}

/// The crate's status for a `siw_wc_status` (rdma-core's `map_cqe_status`);
/// a value siw does not define stays raw in [`WcStatus::Unknown`].
pub(crate) const fn wc_status(status: u16) -> WcStatus {
    match status {
        SIW_WC_SUCCESS => WcStatus::Success,
        SIW_WC_LOC_LEN_ERR => WcStatus::LocLenErr,
        SIW_WC_LOC_PROT_ERR => WcStatus::LocProtErr,
        SIW_WC_LOC_QP_OP_ERR => WcStatus::LocQpOpErr,
        SIW_WC_WR_FLUSH_ERR => WcStatus::WrFlushErr,
        SIW_WC_BAD_RESP_ERR => WcStatus::BadRespErr,
        SIW_WC_LOC_ACCESS_ERR => WcStatus::LocAccessErr,
        SIW_WC_REM_ACCESS_ERR => WcStatus::RemAccessErr,
        SIW_WC_REM_INV_REQ_ERR => WcStatus::RemInvReqErr,
        SIW_WC_GENERAL_ERR => WcStatus::GeneralErr,
        other => WcStatus::Unknown(other as u32),
    }
}

/// The crate's completion opcode for a CQE's `siw_opcode` (rdma-core's
/// `map_cqe_opcode`, plus the kernel's LOCAL_INV); others stay raw in
/// [`WcOpcode::Unknown`].
pub(crate) const fn wc_opcode(opcode: u8) -> WcOpcode {
    match opcode {
        SIW_OP_WRITE => WcOpcode::RdmaWrite,
        SIW_OP_READ | SIW_OP_READ_LOCAL_INV => WcOpcode::RdmaRead,
        SIW_OP_SEND | SIW_OP_SEND_WITH_IMM | SIW_OP_SEND_REMOTE_INV => WcOpcode::Send,
        SIW_OP_FETCH_AND_ADD => WcOpcode::FetchAdd,
        SIW_OP_COMP_AND_SWAP => WcOpcode::CompSwap,
        SIW_OP_RECEIVE => WcOpcode::Recv,
        SIW_OP_INVAL_STAG => WcOpcode::LocalInv,
        other => WcOpcode::Unknown(other as u32),
    }
}

/// Set on a siw status or opcode this crate does not know whose number the
/// kernel's enum defines, so that it still reads as `Unknown`.
pub(crate) const UNKNOWN_TAG: u32 = 1 << 31;

/// The kernel's value for `status`, as a CQE's status maps to it (see
/// [`UNKNOWN_TAG`]).
const fn raw_status(status: WcStatus) -> u32 {
    match status {
        // from_raw answers Unknown(v) itself for a value it does not know.
        WcStatus::Unknown(v) if !matches!(WcStatus::from_raw(v), WcStatus::Unknown(_)) => {
            v | UNKNOWN_TAG
        }
        known => known.to_raw(),
    }
}

/// [`raw_status`] of [`wc_status`] for the siw statuses below 32, made at
/// compile time: the poll's conversion is one load, not a match. From 32
/// on (no status of siw's or the kernel's enum) a status stays as it is.
static RAW_STATUS: [u32; 32] = {
    let mut table = [0; 32];
    let mut status = 0;
    while status < table.len() {
        table[status] = raw_status(wc_status(status as u16));
        status += 1;
    }
    table
};

/// The kernel's value for `opcode`, as a CQE's opcode maps to it (see
/// [`UNKNOWN_TAG`]).
const fn raw_opcode(opcode: WcOpcode) -> u32 {
    match opcode {
        // from_raw answers Unknown(v) itself for a value it does not know.
        WcOpcode::Unknown(v) if !matches!(WcOpcode::from_raw(v), WcOpcode::Unknown(_)) => {
            v | UNKNOWN_TAG
        }
        known => known.to_raw(),
    }
}

/// [`raw_opcode`] of [`wc_opcode`] for every siw opcode byte, made at
/// compile time: the poll's conversion is one load, not a match.
static RAW_OPCODE: [u32; 256] = {
    let mut table = [0; 256];
    let mut op = 0;
    while op < table.len() {
        table[op] = raw_opcode(wc_opcode(op as u8));
        op += 1;
    }
    table
};

/// The completion a CQE is: the kernel's `ib_uverbs_wc`, built from it.
///
/// No flags and no `ex` word: for a user CQ the kernel writes neither
/// immediate data (`imm_data = 0`) nor an invalidated key
/// (`siw_rqe_complete` sets `SIW_WQE_REM_INVAL` and `inval_stag` only for
/// kernel CQs, in 6.1 and 6.12), and rdma-core's `copy_cqe` reads neither.
pub(crate) fn completion(cqe: &siw_cqe) -> WorkCompletion {
    WorkCompletion::from_raw(ib_uverbs_wc {
        wr_id: cqe.id,
        status: match RAW_STATUS.get(cqe.status as usize) {
            Some(&raw) => raw,
            None => cqe.status as u32,
        },
        opcode: RAW_OPCODE[usize::from(cqe.opcode)],
        byte_len: cqe.bytes,
        // qp_id is the u32 QP number widened (qp_id(qp) = base_qp.qp_num).
        qp_num: cqe.qp_id as u32,
        ..ib_uverbs_wc::default()
    })
}

/// Copies up to `out.len()` completions out of the CQ, oldest first, handing
/// each slot back to the kernel. Returns how many. No allocation, no system
/// call.
/// The first completion straight through (most polls take one), the
/// rest out of line, so that the common case saves no registers for the
/// loop.
#[inline]
pub(crate) fn poll(cq: &mut CqConsumer, out: &mut [WorkCompletion]) -> usize {
    poll_first(cq, out).finish(|| 1 + poll_rest(cq, &mut out[1..]))
}

/// [`poll`]'s first step (see
/// [`CompletionRing::poll_first`](crate::provider::rings::CompletionRing::poll_first)):
/// the oldest completion into `out[0]`, [`FirstPoll::More`] if `out` has
/// room for more.
#[inline(always)]
pub(crate) fn poll_first(cq: &mut CqConsumer, out: &mut [WorkCompletion]) -> FirstPoll {
    let Some(first) = out.first_mut() else {
        return FirstPoll::Done(0);
    };
    let Some(cqe) = cq.poll_one() else {
        return FirstPoll::Done(0);
    };
    *first = completion(&cqe);
    if out.len() == 1 {
        return FirstPoll::Done(1);
    }
    FirstPoll::More
}

/// [`poll_first`]'s rest, after its [`FirstPoll::More`]: the poll's total.
/// Its caller is out of line already (`cq::poll_more`), so the loop is
/// inlined there rather than called once more.
#[inline(always)]
pub(crate) fn poll_more(cq: &mut CqConsumer, out: &mut [WorkCompletion]) -> usize {
    1 + take_each(cq, &mut out[1..])
}

/// [`poll`] after its first completion, out of line.
#[inline(never)]
fn poll_rest(cq: &mut CqConsumer, out: &mut [WorkCompletion]) -> usize {
    take_each(cq, out)
}

/// Up to `out.len()` completions into `out`, oldest first: how many.
#[inline(always)]
fn take_each(cq: &mut CqConsumer, out: &mut [WorkCompletion]) -> usize {
    cq.poll_each(out.len(), |i, cqe| {
        if let Some(slot) = out.get_mut(i) {
            *slot = completion(cqe);
        }
    })
}
