//! rxe's rings as a CQ and a QP own them: found in the create responses
//! (`rxe_create_cq_resp::mi`; `rxe_create_qp_resp`: RQ first, then SQ),
//! each mapped once on the command file at the offset and size the answer
//! names (the same in both framings), used through the views of
//! [`queue`](super::queue). rxe destroys the object first and unmaps after
//! (see
//! [`Ring::unmap_before_destroy`]).

use std::mem::size_of;

use zerocopy::FromBytes;

use super::queue::{Consumer, Producer, QueueFull, QueueMem};
use super::wqe::{self, SendLimits, RECV_WQE_LEN, SEND_WQE_LEN, WC_LEN};
use crate::command::QpType;
use crate::error::Errno;
use crate::provider::rings::{
    CompletionRing, FirstPoll, PostFailure, RecvRing, Ring, SendRing, Unmapped,
};
use crate::transport::{SharedMapping, Transport};
use crate::wr::{RecvWr, SendWr, WorkCompletion};
use uverbs_uapi as sys;

/// Bytes of rxe's CREATE_CQ answer.
pub(crate) const CREATE_CQ_UHW_OUT: usize = size_of::<sys::rxe_create_cq_resp>();
/// Bytes of rxe's CREATE_QP answer.
pub(crate) const CREATE_QP_UHW_OUT: usize = size_of::<sys::rxe_create_qp_resp>();
/// Bytes of rxe's CREATE_SRQ answer.
pub(crate) const CREATE_SRQ_UHW_OUT: usize = size_of::<sys::rxe_create_srq_resp>();
/// rxe's MODIFY_SRQ input: an `rxe_modify_srq_cmd` naming no `mminfo`
/// (it is read only for a resize, which this crate does not send).
pub(crate) const MODIFY_SRQ_UHW_IN: [u8; size_of::<sys::rxe_modify_srq_cmd>()] =
    [0; size_of::<sys::rxe_modify_srq_cmd>()];

/// The whole driver answer, or `EPROTO`.
fn answer<T: FromBytes>(uhw: &[u8], written: usize) -> Result<T, Errno> {
    match T::read_from_bytes(uhw) {
        Ok(t) if written == uhw.len() => Ok(t),
        _ => Err(Errno::PROTO),
    }
}

/// Maps one ring the answer names, with slots of at least `min_elem` bytes.
fn map<V>(
    transport: &dyn Transport,
    mi: sys::mminfo,
    min_elem: usize,
    over: fn(QueueMem) -> V,
) -> Result<(V, SharedMapping), Errno> {
    let len = usize::try_from(mi.size).map_err(|_| Errno::INVAL)?;
    // SAFETY: an offset and size the create command answered on this
    // transport.
    let mapping = unsafe { transport.map_queue(mi.offset, len) }?;
    // SAFETY: the mapping is one of this object's rings, valid until the
    // mapping drops, which its owner does after the view; nothing else
    // views it.
    let mem = unsafe { QueueMem::from_raw(mapping.as_ptr(), mapping.len(), min_elem) };
    let view = mem.map(over).map_err(|_| Errno::PROTO)?;
    Ok((view, mapping))
}

/// An rxe CQ's ring. The view is declared first: it points into the mapping.
pub(crate) struct CqRing {
    consumer: Consumer<sys::ib_uverbs_wc>,
    _mapping: SharedMapping,
}

impl CqRing {
    /// Reads the CREATE_CQ answer (`written` bytes of `uhw`) and maps the CQ.
    pub(crate) fn map(
        transport: &dyn Transport,
        uhw: &[u8],
        written: usize,
    ) -> Result<CqRing, Errno> {
        let resp: sys::rxe_create_cq_resp = answer(uhw, written)?;
        Self::map_mi(transport, resp.mi)
    }

    /// Maps the CQ ring `mi` names, from the indices its header holds.
    fn map_mi(transport: &dyn Transport, mi: sys::mminfo) -> Result<CqRing, Errno> {
        let (consumer, mapping) = map(transport, mi, WC_LEN, Consumer::over)?;
        // Never None: `map` checked every slot holds WC_LEN bytes.
        let consumer = consumer.ok_or(Errno::PROTO)?;
        Ok(CqRing {
            consumer,
            _mapping: mapping,
        })
    }
}

impl Ring for CqRing {}

impl CompletionRing for CqRing {
    /// Copies completions out; no system call.
    fn poll(&mut self, out: &mut [WorkCompletion]) -> Result<usize, Unmapped> {
        Ok(wqe::poll(&mut self.consumer, out))
    }

    #[inline(always)]
    fn poll_first(&mut self, out: &mut [WorkCompletion]) -> Result<FirstPoll, Unmapped> {
        Ok(wqe::poll_first(&mut self.consumer, out))
    }

    fn poll_more(&mut self, out: &mut [WorkCompletion]) -> usize {
        wqe::poll_more(&mut self.consumer, out)
    }

    /// rxe answers the new ring's `mminfo` (`rxe_resize_cq_resp`).
    fn resize_uhw_out(&self) -> Result<usize, &'static str> {
        Ok(size_of::<sys::rxe_resize_cq_resp>())
    }

    /// rxe's resize (`rxe_queue_resize`) copies the completions not yet
    /// consumed (as far as the consumer index published in the old ring's
    /// header says) into a new ring and fills only that one from then on:
    /// the new ring is mapped and the old one unmapped. The old mapping
    /// stays valid until then (it holds its own reference on the kernel's
    /// buffer).
    fn adopt_resized(
        &mut self,
        transport: &dyn Transport,
        uhw: &[u8],
        written: usize,
    ) -> Result<(), Errno> {
        let resp: sys::rxe_resize_cq_resp = answer(uhw, written)?;
        // The old view drops before its mapping (field order).
        *self = Self::map_mi(transport, resp.mi)?;
        Ok(())
    }
}

/// An rxe QP's send queue.
pub(crate) struct SendQueue {
    producer: Producer,
    qp_type: QpType,
    /// Capped to the slot when mapped.
    limits: SendLimits,
    _mapping: SharedMapping,
}

/// An rxe QP's receive queue.
pub(crate) struct RecvQueue {
    producer: Producer,
    /// Capped to the slot when mapped.
    max_sge: u32,
    _mapping: SharedMapping,
}

/// Reads the CREATE_QP answer and maps the RQ, then the SQ (rxe's order).
/// A QP on an SRQ (`has_srq`) has no receive ring: the answer's `rq_mi`
/// is left zero and nothing is mapped for it.
pub(crate) fn map_qp(
    transport: &dyn Transport,
    uhw: &[u8],
    written: usize,
    qp_type: QpType,
    limits: SendLimits,
    max_recv_sge: u32,
    has_srq: bool,
) -> Result<(SendQueue, Option<RecvQueue>), Errno> {
    let resp: sys::rxe_create_qp_resp = answer(uhw, written)?;
    let rq = match has_srq {
        true => None,
        false => Some(RecvQueue::map(transport, resp.rq_mi, max_recv_sge)?),
    };
    let (sq, sq_map) = map(transport, resp.sq_mi, SEND_WQE_LEN, Producer::over)?;
    Ok((
        SendQueue {
            limits: limits.within_slot(sq.elem_size()),
            producer: sq,
            qp_type,
            _mapping: sq_map,
        },
        rq,
    ))
}

impl RecvQueue {
    /// Maps the receive ring `mi` names (a QP's or an SRQ's: the same
    /// ring), of requests of at most `max_sge` SGEs.
    fn map(transport: &dyn Transport, mi: sys::mminfo, max_sge: u32) -> Result<Self, Errno> {
        let (rq, rq_map) = map(transport, mi, RECV_WQE_LEN, Producer::over)?;
        Ok(RecvQueue {
            max_sge: wqe::recv_sges_within_slot(max_sge, rq.elem_size()),
            producer: rq,
            _mapping: rq_map,
        })
    }

    /// Reads the CREATE_SRQ answer and maps the SRQ's ring: the kernel
    /// consumes it as it does a QP's receive ring (`get_srq_wqe`).
    pub(crate) fn map_srq(
        transport: &dyn Transport,
        uhw: &[u8],
        written: usize,
        max_sge: u32,
    ) -> Result<Self, Errno> {
        let resp: sys::rxe_create_srq_resp = answer(uhw, written)?;
        Self::map(transport, resp.mi, max_sge)
    }
}

impl Ring for SendQueue {}

impl SendRing for SendQueue {
    /// Writes one WQE per request and publishes them together, or writes
    /// nothing. The caller then writes the doorbell (rxe needs it for every
    /// non-empty batch: answers true). Always inlined into the QP's post
    /// ring step, its one caller per QP kind.
    #[inline(always)]
    fn post(&mut self, wrs: &[SendWr<'_>]) -> Result<bool, PostFailure> {
        post_sends(&mut self.producer, self.qp_type, self.limits, wrs)
    }

    /// Requests the ring holds at most (its slots − 1).
    fn ring_capacity(&self) -> Option<u32> {
        Some(self.producer.capacity())
    }
}

/// [`SendRing::post`] on the ring itself (the instruction probe drives it
/// over the kernel model). `limits` are capped to the slot
/// ([`SendLimits::within_slot`]).
///
/// One request that the common path takes (a WRITE or SEND from SGEs or
/// one inline segment, a READ into SGEs: the usual post) is written here,
/// inlined into the caller, with no call and none of the general loop's
/// set-up; anything else goes to [`post_sends_general`].
#[inline(always)]
pub(super) fn post_sends(
    sq: &mut Producer,
    qp_type: QpType,
    limits: SendLimits,
    wrs: &[SendWr<'_>],
) -> Result<bool, PostFailure> {
    if let [wr] = wrs {
        if let Some(written) = wqe::encode_common_send(sq, qp_type, limits, wr) {
            return published(sq, written);
        }
    }
    post_sends_general(sq, qp_type, limits, wrs)
}

/// Publishes the one request just written, or, refused for a full queue,
/// releases its slot.
#[inline(always)]
fn published(sq: &mut Producer, written: Result<(), QueueFull>) -> Result<bool, PostFailure> {
    match written {
        Ok(()) => {
            sq.publish();
            Ok(true)
        }
        Err(full) => {
            sq.cancel();
            Err(PostFailure::Refused {
                index: 0,
                error: wqe::send_queue_full(full),
            })
        }
    }
}

/// [`post_sends`] for a batch, or a request the common path does not
/// take: one that needs none of the general checks (a UD SEND, an atomic:
/// [`wqe::encode_direct`]) here, without the loop; anything else in a
/// batch's loop, whose general path tries `encode_direct` once more before
/// its checks (calling that path here instead cost such a request one
/// call more).
#[inline(never)]
fn post_sends_general(
    sq: &mut Producer,
    qp_type: QpType,
    limits: SendLimits,
    wrs: &[SendWr<'_>],
) -> Result<bool, PostFailure> {
    if let [wr] = wrs {
        if let Some(written) = wqe::encode_direct(sq, qp_type, limits, wr) {
            return published(sq, written);
        }
    }
    if sq.has_room(wrs.len()) {
        write_batch(sq, qp_type, limits, wrs, |sq| {
            // SAFETY: there was room for `wrs.len()` slots (just above), and
            // `write_batch` reserves at most one per request.
            Ok(unsafe { sq.reserve_in_room() })
        })
    } else {
        // Not room for all: each request checks for its slot, and the
        // first that finds none (unless one before it is refused) says so.
        write_batch(sq, qp_type, limits, wrs, Producer::reserve)
    }
}

/// Writes one WQE per request, the common ones' slots taken by
/// `take`, and publishes them together, or writes nothing. Reserves at
/// most one slot per request.
#[inline(always)]
fn write_batch(
    sq: &mut Producer,
    qp_type: QpType,
    limits: SendLimits,
    wrs: &[SendWr<'_>],
    take: impl Fn(&mut Producer) -> Result<&mut [u8], QueueFull>,
) -> Result<bool, PostFailure> {
    for (index, wr) in wrs.iter().enumerate() {
        let written = match wqe::encode_common_send_with::<false>(sq, qp_type, limits, wr, &take) {
            // Written: on to the next, with no error value made.
            Some(Ok(())) => continue,
            Some(Err(full)) => Err(wqe::send_queue_full(full)),
            None => wqe::check_and_encode_send(sq, qp_type, limits, wr),
        };
        if let Err(error) = written {
            sq.cancel();
            return Err(PostFailure::Refused { index, error });
        }
    }
    sq.publish();
    Ok(!wrs.is_empty())
}

impl Ring for RecvQueue {}

impl RecvRing for RecvQueue {
    /// Writes one WQE per request and publishes them together, or writes
    /// nothing; no system call. Always inlined into the QP's receive post,
    /// its one caller per QP kind.
    #[inline(always)]
    fn post(&mut self, wrs: &[RecvWr<'_>]) -> Result<(), PostFailure> {
        let rq = &mut self.producer;
        for (index, wr) in wrs.iter().enumerate() {
            if let Err(error) = wqe::encode_recv(rq, self.max_sge, wr) {
                rq.cancel();
                return Err(PostFailure::Refused { index, error });
            }
        }
        rq.publish();
        Ok(())
    }

    /// One request of one SGE straight through, answering in a register;
    /// a batch, another number of SGEs, a refusal or a full ring writes
    /// nothing here, and `post` (out of line) then posts it or says why.
    /// The usual post holds no loop and calls nothing.
    #[inline(always)]
    fn try_post(&mut self, wrs: &[RecvWr<'_>]) -> bool {
        let [wr @ RecvWr { sges: [_], .. }] = wrs else {
            return false;
        };
        let rq = &mut self.producer;
        if wqe::encode_recv(rq, self.max_sge, wr).is_err() {
            rq.cancel();
            return false;
        }
        rq.publish();
        true
    }

    /// Requests the ring holds at most (its slots − 1).
    fn ring_capacity(&self) -> Option<u32> {
        Some(self.producer.capacity())
    }
}
