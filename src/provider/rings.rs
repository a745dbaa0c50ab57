//! The rings a [`CompletionQueue`](crate::CompletionQueue) or a
//! [`QueuePair`](crate::QueuePair) owns, one variant per driver with a data
//! path: how they are found in the create answer, mapped, posted to, polled
//! and armed, and in which order they are unmapped around the destroy.
//!
//! **Teardown order.** rdma-core's rxe provider destroys a CQ or QP first
//! and unmaps its rings after; its siw provider unmaps first and destroys
//! after. Each provider here follows its rdma-core order
//! ([`CqRing::unmap_before_destroy`], [`SendQueue::unmap_before_destroy`]),
//! so the kernel sees the sequence it sees under libibverbs. For memory
//! safety both orders are fine on Linux 6.12: siw's queues are
//! `vmalloc_user` memory inserted into our mapping with `vm_insert_page`,
//! which takes a page reference, so the `vfree` in siw's destroy drops only
//! the kernel's reference and the pages live until we unmap; rxe's mapping
//! holds a reference on its `rxe_mmap_info`. What the order changes is the
//! mmap entry: siw's destroy removes it (`rdma_user_mmap_entry_remove`), so
//! after a successful destroy the key cannot be mapped again. A refused
//! destroy (`EBUSY` for a CQ a QP still uses) is refused by the core before
//! siw's destroy runs, so the entry is still there: the rings are mapped
//! again at the same keys, at the positions they had, and the object comes
//! back usable.

use crate::command::QpType;
use crate::error::Errno;
use crate::provider::rxe::wqe::SendLimits;
use crate::provider::{rxe, siw, Provider};
use crate::transport::Transport;
use crate::wr::{PostError, RecvWr, SendWr, WorkCompletion};

/// Why a post did not queue anything.
#[derive(Debug)]
pub(crate) enum PostFailure {
    /// The request at `index` was refused; nothing was written.
    Refused {
        /// Index in the batch.
        index: usize,
        /// Why.
        error: PostError,
    },
    /// The ring is not mapped (`EBADF`: unmapped for a destroy, or mapping
    /// it again after a refused destroy failed).
    Os(Errno),
}

/// Room for the largest driver answer to a CQ or QP create.
pub(crate) const MAX_CREATE_UHW_OUT: usize = 32;
const _: () = assert!(rxe::rings::CREATE_CQ_UHW_OUT <= MAX_CREATE_UHW_OUT);
const _: () = assert!(rxe::rings::CREATE_QP_UHW_OUT <= MAX_CREATE_UHW_OUT);
const _: () = assert!(siw::rings::CREATE_CQ_UHW_OUT <= MAX_CREATE_UHW_OUT);
const _: () = assert!(siw::rings::CREATE_QP_UHW_OUT <= MAX_CREATE_UHW_OUT);

impl Provider {
    /// Bytes of driver answer a CQ create needs room for; `None` for a
    /// driver without a data path here.
    pub(crate) fn create_cq_uhw_out(self) -> Option<usize> {
        match self {
            Provider::Rxe => Some(rxe::rings::CREATE_CQ_UHW_OUT),
            Provider::Siw => Some(siw::rings::CREATE_CQ_UHW_OUT),
            Provider::Generic => None,
        }
    }

    /// Bytes of driver answer a QP create needs room for; `None` for a
    /// driver without a data path here.
    pub(crate) fn create_qp_uhw_out(self) -> Option<usize> {
        match self {
            Provider::Rxe => Some(rxe::rings::CREATE_QP_UHW_OUT),
            Provider::Siw => Some(siw::rings::CREATE_QP_UHW_OUT),
            Provider::Generic => None,
        }
    }

    /// Why this driver's rings cannot be used on this CPU, if they cannot
    /// (siw off x86-64: see [`siw::DATA_PATH_SOUND`]). Creating a CQ or QP
    /// then answers [`Error::Unsupported`](crate::Error::Unsupported) before
    /// any system call.
    pub(crate) fn data_path_refusal(self) -> Option<&'static str> {
        match self {
            Provider::Siw if !siw::DATA_PATH_SOUND => Some(siw::WEAKLY_ORDERED_CPU),
            Provider::Siw | Provider::Rxe | Provider::Generic => None,
        }
    }

    /// The QP types the driver creates; others are refused before any
    /// system call (siw: RC only, `siw_create_qp` answers EOPNOTSUPP).
    pub(crate) fn supports_qp_type(self, qp_type: QpType) -> bool {
        match self {
            Provider::Siw => qp_type == QpType::Rc,
            Provider::Rxe | Provider::Generic => true,
        }
    }
}

/// A CQ's ring.
pub(crate) enum CqRing {
    /// A header-and-indices ring; arming is `REQ_NOTIFY_CQ`.
    Rxe(rxe::rings::CqRing),
    /// A VALID-flag array and its arming word.
    Siw(siw::rings::CqRing),
}

impl CqRing {
    /// Reads the create answer (`written` bytes of `uhw`) and maps the ring
    /// of `provider`'s driver on `transport`. On an error the caller destroys the CQ.
    pub(crate) fn map(
        provider: Provider,
        transport: &dyn Transport,
        uhw: &[u8],
        written: usize,
    ) -> Result<CqRing, Errno> {
        match provider {
            Provider::Rxe => rxe::rings::CqRing::map(transport, uhw, written).map(CqRing::Rxe),
            Provider::Siw => siw::rings::CqRing::map(transport, uhw, written)
                .map(CqRing::Siw)
                .map_err(|e| e.errno()),
            Provider::Generic => Err(Errno::OPNOTSUPP),
        }
    }

    /// Copies up to `out.len()` completions out; no system call.
    #[inline]
    pub(crate) fn poll(&mut self, out: &mut [WorkCompletion]) -> Result<usize, Errno> {
        match self {
            CqRing::Rxe(r) => Ok(r.poll(out)),
            CqRing::Siw(r) => r.poll(out),
        }
    }

    /// Arms the CQ in memory where the driver allows it (siw: a store to
    /// the control word); `None` when arming takes `REQ_NOTIFY_CQ` (rxe).
    pub(crate) fn arm_in_memory(&mut self, solicited_only: bool) -> Option<Result<(), Errno>> {
        match self {
            CqRing::Rxe(_) => None,
            CqRing::Siw(r) => Some(r.arm(solicited_only)),
        }
    }

    /// Unmaps the ring now if the driver's order is unmap-then-destroy
    /// (siw; see the module text) and answers whether it did. rxe's ring
    /// stays mapped until the CQ is dropped, after its destroy.
    pub(crate) fn unmap_before_destroy(&mut self) -> bool {
        match self {
            CqRing::Rxe(_) => false,
            CqRing::Siw(r) => {
                r.unmap();
                true
            }
        }
    }

    /// Maps the ring again after a refused destroy (a no-op if mapped).
    pub(crate) fn remap(&mut self, transport: &dyn Transport) -> Result<(), Errno> {
        match self {
            CqRing::Rxe(_) => Ok(()),
            CqRing::Siw(r) => r.remap(transport),
        }
    }
}

/// A QP's send queue (and, for rxe, the state its writer needs).
pub(crate) enum SendQueue {
    /// rxe's ring.
    Rxe(rxe::rings::SendQueue),
    /// siw's SQE array.
    Siw(siw::rings::SendQueue),
}

/// A QP's receive queue.
pub(crate) enum RecvQueue {
    /// rxe's ring.
    Rxe(rxe::rings::RecvQueue),
    /// siw's RQE array (or none).
    Siw(siw::rings::RecvQueue),
}

/// What a QP's rings are created with.
#[derive(Clone, Copy, Debug)]
pub(crate) struct QpRingConfig {
    /// The QP's type.
    pub(crate) qp_type: QpType,
    /// SGEs per send request (the kernel's answer).
    pub(crate) max_send_sge: u32,
    /// Inline bytes per send request (the kernel's answer).
    pub(crate) max_inline: u32,
    /// SGEs per receive request (the kernel's answer).
    pub(crate) max_recv_sge: u32,
    /// Every send request completes (siw's writer must set SIGNALLED
    /// itself: the kernel does not for user QPs).
    pub(crate) sq_sig_all: bool,
}

/// Reads the QP create answer and maps the rings of the context's driver.
/// On an error the caller destroys the QP (every ring mapped so far is
/// already unmapped).
pub(crate) fn map_qp(
    provider: Provider,
    transport: &dyn Transport,
    uhw: &[u8],
    written: usize,
    cfg: QpRingConfig,
) -> Result<(SendQueue, RecvQueue), Errno> {
    match provider {
        Provider::Rxe => {
            let limits = SendLimits {
                max_sge: cfg.max_send_sge,
                max_inline: cfg.max_inline,
            };
            let (sq, rq) = rxe::rings::map_qp(
                transport,
                uhw,
                written,
                cfg.qp_type,
                limits,
                cfg.max_recv_sge,
            )?;
            Ok((SendQueue::Rxe(sq), RecvQueue::Rxe(rq)))
        }
        Provider::Siw => {
            let send = siw::wqe::SendConfig {
                max_sge: cfg.max_send_sge,
                max_inline: cfg.max_inline,
                sig_all: cfg.sq_sig_all,
            };
            let (_qp_id, sq, rq) =
                siw::rings::map_qp(transport, uhw, written, send, cfg.max_recv_sge)
                    .map_err(|e| e.errno())?;
            Ok((SendQueue::Siw(sq), RecvQueue::Siw(rq)))
        }
        Provider::Generic => Err(Errno::OPNOTSUPP),
    }
}

impl SendQueue {
    /// Writes `wrs` (all or nothing) and answers whether the POST_SEND
    /// doorbell must be written: always after a non-empty batch on rxe,
    /// only when the kernel may be idle on siw.
    #[inline]
    pub(crate) fn post(&mut self, wrs: &[SendWr<'_>]) -> Result<bool, PostFailure> {
        match self {
            SendQueue::Rxe(q) => q.post(wrs),
            SendQueue::Siw(q) => q.post(wrs),
        }
    }

    /// How many requests the ring really holds, where that can exceed the
    /// capacity the kernel answered: Linux 6.1's rxe answers the
    /// `max_send_wr` asked for and sizes the ring to the next power of two
    /// minus one (6.12 answers the ring's size). `None` on siw, whose
    /// answer is its ring's size.
    pub(crate) fn ring_capacity(&self) -> Option<u32> {
        match self {
            SendQueue::Rxe(q) => Some(q.capacity()),
            SendQueue::Siw(_) => None,
        }
    }

    /// As [`CqRing::unmap_before_destroy`].
    pub(crate) fn unmap_before_destroy(&mut self) -> bool {
        match self {
            SendQueue::Rxe(_) => false,
            SendQueue::Siw(q) => {
                q.unmap();
                true
            }
        }
    }

    /// As [`CqRing::remap`].
    pub(crate) fn remap(&mut self, transport: &dyn Transport) -> Result<(), Errno> {
        match self {
            SendQueue::Rxe(_) => Ok(()),
            SendQueue::Siw(q) => q.remap(transport),
        }
    }
}

impl RecvQueue {
    /// Writes `wrs` (all or nothing); no system call.
    pub(crate) fn post(&mut self, wrs: &[RecvWr<'_>]) -> Result<(), PostFailure> {
        match self {
            RecvQueue::Rxe(q) => q.post(wrs),
            RecvQueue::Siw(q) => q.post(wrs),
        }
    }

    /// As [`SendQueue::ring_capacity`], for `max_recv_wr`.
    pub(crate) fn ring_capacity(&self) -> Option<u32> {
        match self {
            RecvQueue::Rxe(q) => Some(q.capacity()),
            RecvQueue::Siw(_) => None,
        }
    }

    /// As [`CqRing::unmap_before_destroy`].
    pub(crate) fn unmap_before_destroy(&mut self) -> bool {
        match self {
            RecvQueue::Rxe(_) => false,
            RecvQueue::Siw(q) => {
                q.unmap();
                true
            }
        }
    }

    /// As [`CqRing::remap`].
    pub(crate) fn remap(&mut self, transport: &dyn Transport) -> Result<(), Errno> {
        match self {
            RecvQueue::Rxe(_) => Ok(()),
            RecvQueue::Siw(q) => q.remap(transport),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// siw's rings are used on x86-64 only; rxe's everywhere.
    #[test]
    fn siw_rings_are_refused_off_x86_64_only() {
        assert_eq!(Provider::Rxe.data_path_refusal(), None);
        let siw = Provider::Siw.data_path_refusal();
        if cfg!(target_arch = "x86_64") {
            assert_eq!(siw, None);
        } else {
            assert!(siw.unwrap().contains("x86-64"), "{siw:?}");
        }
    }
}
