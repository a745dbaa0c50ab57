//! siw's rings as a CQ and a QP own them: found in the create responses
//! (`siw_uresp_create_cq`, `siw_uresp_create_qp`), mapped at their keys on the
//! command file, used through the views of [`queue`](super::queue), and
//! unmapped before the destroy command (see
//! [`Ring::unmap_before_destroy`]).
//!
//! Sizes and order follow rdma-core's `providers/siw/siw.c`: the CQ is
//! `num_cqe × siw_cqe + siw_cq_ctrl` bytes at `cq_key`; the QP's SQ
//! (`num_sqe × siw_sqe` at `sq_key`) is mapped first, then its RQ
//! (`num_rqe × siw_rqe` at `rq_key`). A key of [`SIW_INVAL_UOBJ_KEY`] whose
//! mmap fails means the kernel prepared no mapping: the object is destroyed
//! again (on Linux 6.x that key is also a real ring's, and maps). The kernel
//! (`rdma_user_mmap_entry_get`) accepts a mapping whose page-rounded length
//! is the entry's, so the exact byte length is mapped, as rdma-core does.

use std::mem::size_of;
use std::ptr::NonNull;

use zerocopy::FromBytes;

use super::queue::{CqConsumer, LayoutError, Producer, WorkElement, CQE_LEN, CTRL_LEN};
use super::wqe::{self, SendConfig};
use crate::error::Errno;
use crate::provider::rings::{
    CompletionRing, FirstPoll, PostFailure, RecvRing, Ring, SendRing, SendsQueued, Unmapped,
};
use crate::transport::{SharedMapping, Transport};
use crate::wr::{PostError, RecvWr, SendWr, WorkCompletion};
use uverbs_uapi::{self as sys, siw_rqe, siw_sqe, SIW_INVAL_UOBJ_KEY};

/// Bytes of siw's CREATE_CQ answer (the kernel refuses less room: EINVAL).
pub(crate) const CREATE_CQ_UHW_OUT: usize = size_of::<sys::siw_uresp_create_cq>();
/// Bytes of siw's CREATE_QP answer (the kernel refuses less room: EINVAL).
pub(crate) const CREATE_QP_UHW_OUT: usize = size_of::<sys::siw_uresp_create_qp>();
/// Bytes of siw's CREATE_SRQ answer.
pub(crate) const CREATE_SRQ_UHW_OUT: usize = size_of::<sys::siw_uresp_create_srq>();

/// Why a create response cannot be used; the caller destroys the object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum MapError {
    /// The driver's answer is shorter than its struct.
    Short,
    /// A key is [`SIW_INVAL_UOBJ_KEY`] and no ring is mapped there: the
    /// kernel prepared no mapping. Linux 6.x fails such a create with
    /// ENOMEM instead and answers success only with real keys, one of
    /// which is this value (the ring at page offset 0x90, e.g. the receive
    /// ring of a context's 72nd small QP), so the key is tried first.
    NoMapping,
    /// `mmap` refused.
    Map(Errno),
    /// The mapping cannot hold the elements the answer names.
    Layout(LayoutError),
}

impl MapError {
    /// The errno the failed create reports.
    pub(crate) fn errno(self) -> Errno {
        match self {
            MapError::Short | MapError::Layout(_) => Errno::PROTO,
            MapError::NoMapping => Errno::NOMEM,
            MapError::Map(e) => e,
        }
    }
}

/// The driver's answer, when the kernel wrote all of it.
fn answer<T: FromBytes>(uhw: &[u8], written: usize) -> Result<T, MapError> {
    if written < size_of::<T>() {
        return Err(MapError::Short);
    }
    T::read_from_prefix(uhw)
        .map(|(t, _)| t)
        .map_err(|_| MapError::Short)
}

/// A view made over a ring's mapping, fresh or continuing where an earlier
/// view of the same ring stopped.
trait View: Sized {
    /// # Safety
    /// `base..base + len` is the ring's mapping, alive as long as the view,
    /// and no other view is made over it.
    unsafe fn over(
        base: NonNull<u8>,
        len: usize,
        num: u32,
        resume_at: Option<u32>,
    ) -> Result<Self, LayoutError>;
    /// The view's free-running position.
    fn position(&self) -> u32;
}

impl<E: WorkElement> View for Producer<E> {
    unsafe fn over(
        base: NonNull<u8>,
        len: usize,
        num: u32,
        resume_at: Option<u32>,
    ) -> Result<Self, LayoutError> {
        // SAFETY: the caller's promise, passed on.
        unsafe { Producer::resume(base, len, num, resume_at.unwrap_or(0)) }
    }
    fn position(&self) -> u32 {
        self.put()
    }
}

impl View for CqConsumer {
    unsafe fn over(
        base: NonNull<u8>,
        len: usize,
        num: u32,
        resume_at: Option<u32>,
    ) -> Result<Self, LayoutError> {
        // SAFETY: the caller's promise, passed on. A fresh CQ starts unarmed
        // (from_raw); a resumed one keeps its arming word.
        unsafe {
            match resume_at {
                None => CqConsumer::from_raw(base, len, num),
                Some(get) => CqConsumer::resume(base, len, num, get),
            }
        }
    }
    fn position(&self) -> u32 {
        self.get()
    }
}

/// A view and the mapping it points into. The view is declared first, so it
/// is dropped before the mapping is unmapped.
struct Mapped<V> {
    view: V,
    _mapping: SharedMapping,
}

/// One siw ring: where it is mapped, and its view while it is.
struct RingMap<V> {
    key: u64,
    len: usize,
    num: u32,
    /// `None` while unmapped for a destroy (or when mapping it again after a
    /// refused destroy failed).
    mapped: Option<Mapped<V>>,
    /// The view's position when it was unmapped.
    at: u32,
}

impl<V: View> RingMap<V> {
    /// Maps `len` bytes at `key` and makes a fresh view of `num` elements.
    fn map(transport: &dyn Transport, key: u64, len: usize, num: u32) -> Result<Self, MapError> {
        let mapped = match Self::map_at(transport, key, len, num, None) {
            Err(MapError::Map(_)) if key == SIW_INVAL_UOBJ_KEY => return Err(MapError::NoMapping),
            mapped => mapped?,
        };
        Ok(RingMap {
            key,
            len,
            num,
            mapped: Some(mapped),
            at: 0,
        })
    }

    fn map_at(
        transport: &dyn Transport,
        key: u64,
        len: usize,
        num: u32,
        resume_at: Option<u32>,
    ) -> Result<Mapped<V>, MapError> {
        // SAFETY: a key and length the create command answered on this
        // transport (siw's mmap entry of the ring).
        let mapping = unsafe { transport.map_queue(key, len) }.map_err(MapError::Map)?;
        // SAFETY: the mapping is this ring, alive until `Mapped` drops it
        // after the view; nothing else views it.
        let view = unsafe { V::over(mapping.as_ptr(), mapping.len(), num, resume_at) }
            .map_err(MapError::Layout)?;
        Ok(Mapped {
            view,
            _mapping: mapping,
        })
    }

    fn unmap(&mut self) {
        if let Some(m) = self.mapped.take() {
            self.at = m.view.position();
        }
    }

    fn remap(&mut self, transport: &dyn Transport) -> Result<(), Errno> {
        if self.mapped.is_none() {
            let m = Self::map_at(transport, self.key, self.len, self.num, Some(self.at))
                .map_err(MapError::errno)?;
            self.mapped = Some(m);
        }
        Ok(())
    }

    /// The view; `EBADF` while unmapped (the object is being or was
    /// destroyed).
    fn view(&mut self) -> Result<&mut V, Errno> {
        self.mapped.as_mut().map(|m| &mut m.view).ok_or(Errno::BADF)
    }
}

/// A siw CQ's ring and arming word.
pub(crate) struct CqRing {
    ring: RingMap<CqConsumer>,
}

impl CqRing {
    /// Reads the CREATE_CQ answer (`written` bytes of `uhw`) and maps the CQ.
    pub(crate) fn map(
        transport: &dyn Transport,
        uhw: &[u8],
        written: usize,
    ) -> Result<CqRing, MapError> {
        let resp: sys::siw_uresp_create_cq = answer(uhw, written)?;
        let len = (resp.num_cqe as usize)
            .checked_mul(CQE_LEN)
            .and_then(|n| n.checked_add(CTRL_LEN))
            .ok_or(MapError::Short)?;
        Ok(CqRing {
            ring: RingMap::map(transport, resp.cq_key, len, resp.num_cqe)?,
        })
    }
}

/// siw's [`Ring`] for a type whose `ring` is a [`RingMap`]: unmapped
/// before the destroy (the module text), mapped again if it was refused.
macro_rules! ring_unmapped_before_destroy {
    ($ring:ty) => {
        impl Ring for $ring {
            fn unmap_before_destroy(&mut self) -> bool {
                self.ring.unmap();
                true
            }

            fn remap(&mut self, transport: &dyn Transport) -> Result<(), Errno> {
                self.ring.remap(transport)
            }
        }
    };
}

ring_unmapped_before_destroy!(CqRing);

impl CompletionRing for CqRing {
    /// Copies completions out; no system call.
    #[inline]
    fn poll(&mut self, out: &mut [WorkCompletion]) -> Result<usize, Unmapped> {
        // `view`'s one error is EBADF: the ring is not mapped.
        let cq = self.ring.view().map_err(|_| Unmapped)?;
        Ok(wqe::poll(cq, out))
    }

    #[inline(always)]
    fn poll_first(&mut self, out: &mut [WorkCompletion]) -> Result<FirstPoll, Unmapped> {
        let cq = self.ring.view().map_err(|_| Unmapped)?;
        Ok(wqe::poll_first(cq, out))
    }

    #[inline]
    fn poll_more(&mut self, out: &mut [WorkCompletion]) -> usize {
        match self.ring.view() {
            Ok(cq) => wqe::poll_more(cq, out),
            // Not reached: the ring was mapped for `poll_first`, and the
            // caller held it since. The first completion is out.
            Err(_) => 1,
        }
    }

    /// Arms the CQ: one store to its control word; no system call.
    fn arm_in_memory(
        &mut self,
        solicited_only: bool,
        _events_read: u32,
    ) -> Option<Result<(), Errno>> {
        Some(self.ring.view().map(|cq| cq.arm(solicited_only)))
    }

    /// siw has no `resize_cq`: its kernel answers `EOPNOTSUPP`.
    fn resize_uhw_out(&self) -> Result<usize, &'static str> {
        Err("siw cannot resize a CQ (the kernel driver has no resize_cq: EOPNOTSUPP)")
    }
}

/// A siw QP's send queue.
pub(crate) struct SendQueue {
    ring: RingMap<Producer<siw_sqe>>,
    cfg: SendConfig,
}

/// A siw QP's receive queue; `None` when the kernel made none (`num_rqe`
/// 0: `max_recv_wr` 0, or an SRQ).
pub(crate) struct RecvQueue {
    ring: Option<RingMap<Producer<siw_rqe>>>,
    max_sge: u32,
}

/// Reads the CREATE_QP answer and maps the SQ, then the RQ (rdma-core's
/// order). Answers the QP id (its number) too.
pub(crate) fn map_qp(
    transport: &dyn Transport,
    uhw: &[u8],
    written: usize,
    cfg: SendConfig,
    max_recv_sge: u32,
) -> Result<(u32, SendQueue, RecvQueue), MapError> {
    let resp: sys::siw_uresp_create_qp = answer(uhw, written)?;
    let has_rq = resp.num_rqe != 0;
    // With no RQ the kernel leaves rq_key 0 and nothing is mapped for it.
    // rdma-core refuses a key of SIW_INVAL_UOBJ_KEY before mapping; here
    // it is tried (`RingMap::map`): on Linux 6.x it is a real ring's key.
    let bytes = |num: u32, elem: usize| (num as usize).checked_mul(elem).ok_or(MapError::Short);
    let sq = RingMap::map(
        transport,
        resp.sq_key,
        bytes(resp.num_sqe, size_of::<siw_sqe>())?,
        resp.num_sqe,
    )?;
    let rq = if has_rq {
        Some(RingMap::map(
            transport,
            resp.rq_key,
            bytes(resp.num_rqe, size_of::<siw_rqe>())?,
            resp.num_rqe,
        )?)
    } else {
        None
    };
    Ok((
        resp.qp_id,
        SendQueue { ring: sq, cfg },
        RecvQueue {
            ring: rq,
            max_sge: max_recv_sge,
        },
    ))
}

impl RecvQueue {
    /// Reads the CREATE_SRQ answer and maps the SRQ's array: `num_rqe` ×
    /// 112-byte `siw_rqe`, the same elements and ownership protocol as a
    /// QP's receive array (`siw_rqe_get` reads both alike).
    pub(crate) fn map_srq(
        transport: &dyn Transport,
        uhw: &[u8],
        written: usize,
        max_sge: u32,
    ) -> Result<RecvQueue, MapError> {
        let resp: sys::siw_uresp_create_srq = answer(uhw, written)?;
        let len = (resp.num_rqe as usize)
            .checked_mul(size_of::<siw_rqe>())
            .ok_or(MapError::Short)?;
        Ok(RecvQueue {
            ring: Some(RingMap::map(transport, resp.srq_key, len, resp.num_rqe)?),
            max_sge,
        })
    }
}

ring_unmapped_before_destroy!(SendQueue);

impl SendRing for SendQueue {
    /// Checks and writes `wrs` (all or nothing); answers whether the
    /// POST_SEND doorbell must be written (rdma-core's rule, see
    /// [`Posted::needs_doorbell`](super::queue::Posted::needs_doorbell)).
    fn post(&mut self, wrs: &[SendWr<'_>]) -> Result<bool, PostFailure> {
        let cfg = self.cfg;
        let sq = self.ring.view().map_err(PostFailure::Os)?;
        post_sends(sq, cfg, wrs)
    }

    /// The same writer, inlined into the QP's post, its answer in a
    /// register: a refusal or an unmapped ring writes nothing, and `post`
    /// then says why.
    #[inline(always)]
    fn try_post(&mut self, wrs: &[SendWr<'_>]) -> SendsQueued {
        let cfg = self.cfg;
        let Ok(sq) = self.ring.view() else {
            return SendsQueued::NotWritten;
        };
        match wqe::post_send_via::<true>(sq, cfg, wrs) {
            Ok(posted) => SendsQueued::written(posted.needs_doorbell),
            Err(_) => SendsQueued::NotWritten,
        }
    }
}

/// [`SendRing::post`] on its mapped send queue `sq`.
pub(super) fn post_sends(
    sq: &mut Producer<siw_sqe>,
    cfg: SendConfig,
    wrs: &[SendWr<'_>],
) -> Result<bool, PostFailure> {
    wqe::post_send(sq, cfg, wrs)
        .map(|posted| posted.needs_doorbell)
        .map_err(|r| PostFailure::Refused {
            index: r.index,
            error: r.error.into(),
        })
}

/// [`RecvRing::post`] on its mapped receive queue `rq`.
pub(super) fn post_recvs(
    rq: &mut Producer<siw_rqe>,
    max_sge: u32,
    wrs: &[RecvWr<'_>],
) -> Result<(), PostFailure> {
    wqe::post_recv(rq, max_sge, wrs)
        .map(|_| ())
        .map_err(|r| PostFailure::Refused {
            index: r.index,
            error: r.error.into(),
        })
}

impl RecvRing for RecvQueue {
    /// Checks and writes `wrs` (all or nothing); no system call.
    fn post(&mut self, wrs: &[RecvWr<'_>]) -> Result<(), PostFailure> {
        let Some(ring) = self.ring.as_mut() else {
            return match wrs.is_empty() {
                true => Ok(()),
                false => Err(PostFailure::Refused {
                    index: 0,
                    error: PostError::QueueFull {
                        op: "post_recv",
                        capacity: 0,
                    },
                }),
            };
        };
        let rq = ring.view().map_err(PostFailure::Os)?;
        post_recvs(rq, self.max_sge, wrs)
    }

    #[inline(always)]
    fn try_post(&mut self, wrs: &[RecvWr<'_>]) -> bool {
        // Unmapped: `post` tells why (or posts nothing, for no requests).
        let Some(Ok(rq)) = self.ring.as_mut().map(|ring| ring.view()) else {
            return false;
        };
        wqe::try_post_recv(rq, self.max_sge, wrs)
    }

    /// The array's elements: the kernel answers them for a QP, but answers
    /// an SRQ's create with the size asked for (`siw_create_srq` rounds
    /// the array up to a power of two).
    fn ring_capacity(&self) -> Option<u32> {
        self.ring.as_ref().map(|r| r.num)
    }
}

impl Ring for RecvQueue {
    fn unmap_before_destroy(&mut self) -> bool {
        if let Some(r) = &mut self.ring {
            r.unmap();
        }
        true
    }

    fn remap(&mut self, transport: &dyn Transport) -> Result<(), Errno> {
        match &mut self.ring {
            Some(r) => r.remap(transport),
            None => Ok(()),
        }
    }
}
