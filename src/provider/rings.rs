//! The rings a [`CompletionQueue`](crate::CompletionQueue) or a
//! [`QueuePair`](crate::QueuePair) owns, one variant per driver with a data
//! path: how they are found in the create answer, mapped, posted to, polled
//! and armed, and in which order they are unmapped around the destroy.
//!
//! **Teardown order.** rdma-core's rxe provider destroys a CQ or QP first
//! and unmaps its rings after; its siw provider unmaps first and destroys
//! after. Each provider here follows its rdma-core order
//! ([`Ring::unmap_before_destroy`]), so the kernel sees the sequence it
//! sees under libibverbs. For memory
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
use std::sync::Arc;

use crate::error::{Errno, Error, Op};
use crate::transport::Transport;
use crate::wr::{PostError, RecvWr, SendWr, WorkCompletion};

use super::{Driver, Provider};

pub(crate) use super::{CqRing, RecvQueue, SendQueue};

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
    /// The object is the parent's: this is a forked child.
    ForeignProcess,
}

impl PostFailure {
    /// What a post (`op`, of a QP or SRQ on `device`) reports for this.
    #[cold]
    pub(crate) fn into_error(self, op: Op, device: &Arc<str>) -> Error {
        match self {
            PostFailure::Refused { index, error } => Error::Post {
                op,
                device: device.clone(),
                index,
                why: Box::new(error),
            },
            PostFailure::Os(e) => Error::os(op, device, e),
            PostFailure::ForeignProcess => Error::ForeignProcess {
                op,
                device: device.clone(),
            },
        }
    }
}

/// The refusal for a driver without a data path here: what such a device
/// does get, so that a user with other hardware knows at once.
pub(crate) const NO_DATA_PATH: &str =
    "uverbs has a data path (CQs, QPs, posting) for rxe, siw and mlx5 only; \
     on this driver it offers the control path: discovery, queries, PDs, MRs and rereg";

/// Room for the largest driver answer to a CQ or QP create (checked
/// against each driver's at compile time, in the driver list).
pub(crate) const MAX_CREATE_UHW_OUT: usize = 40;

impl Provider {
    /// Bytes of driver answer a CQ create needs room for; `None` for a
    /// driver without a data path here.
    pub(crate) fn create_cq_uhw_out(self) -> Option<usize> {
        with_driver!(self, D => Some(D::CREATE_CQ_UHW_OUT), Generic => None)
    }

    /// Bytes of driver answer a QP create needs room for; `None` for a
    /// driver without a data path here.
    pub(crate) fn create_qp_uhw_out(self) -> Option<usize> {
        with_driver!(self, D => Some(D::CREATE_QP_UHW_OUT), Generic => None)
    }

    /// Why this driver's rings cannot be used here, if they cannot: a
    /// driver this crate has no data path for (anything but rxe, siw and mlx5),
    /// or siw off x86-64 (see
    /// [`siw::DATA_PATH_SOUND`](super::siw::DATA_PATH_SOUND)). Creating a
    /// CQ or QP then answers [`Error::Unsupported`](crate::Error::Unsupported)
    /// before any system call.
    pub(crate) fn data_path_refusal(self) -> Option<&'static str> {
        with_driver!(self, D => D::DATA_PATH_REFUSAL, Generic => Some(NO_DATA_PATH))
    }

    /// The QP types the driver creates; others are refused before any
    /// system call (siw: RC only, `siw_create_qp` answers EOPNOTSUPP).
    pub(crate) fn supports_qp_type(self, qp_type: QpType) -> bool {
        with_driver!(self, D => D::supports_qp_type(qp_type), Generic => true)
    }
}

/// What every ring does around a destroy. The defaults are the
/// destroy-then-unmap order (rxe's): nothing before the destroy, the ring
/// unmapped when dropped.
pub(crate) trait Ring {
    /// Unmaps the ring now if the driver's order is unmap-then-destroy
    /// (siw; see the module text) and answers whether it did.
    fn unmap_before_destroy(&mut self) -> bool {
        false
    }

    /// Maps the ring again after a refused destroy (a no-op if mapped).
    fn remap(&mut self, _transport: &dyn Transport) -> Result<(), Errno> {
        Ok(())
    }
}

/// Why a ring cannot be polled: it is not mapped (siw after a refused
/// destroy whose remap failed, or after a destroy through another handle):
/// `EBADF`. The only failure of a poll, and a unit, so that a poll's answer
/// comes back in two registers where a `Result<usize, Errno>` would come
/// back through memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Unmapped;

impl Unmapped {
    /// The errno a poll reports for it.
    pub(crate) const ERRNO: Errno = Errno::BADF;
}

/// A CQ's ring.
pub(crate) trait CompletionRing: Ring {
    /// Copies up to `out.len()` completions out; no system call.
    fn poll(&mut self, out: &mut [WorkCompletion]) -> Result<usize, Unmapped>;

    /// A poll's common case on its own (a CQ's plain poll inlines it): at
    /// most the first completion, into `out[0]`. [`FirstPoll::More`] leaves
    /// the poll to [`poll_more`](Self::poll_more), which the caller calls
    /// out of line so that the common case saves no registers for it.
    /// The default does the whole [`poll`](Self::poll) at once.
    #[inline]
    fn poll_first(&mut self, out: &mut [WorkCompletion]) -> Result<FirstPoll, Unmapped> {
        self.poll(out).map(FirstPoll::Done)
    }

    /// Finishes a poll that [`poll_first`](Self::poll_first) answered
    /// [`FirstPoll::More`] to, with the same `out` and nothing in between:
    /// copies the next completions into `out[1..]` and answers the poll's
    /// total, the first included.
    fn poll_more(&mut self, _out: &mut [WorkCompletion]) -> usize {
        // Only for rings whose `poll_first` answers `More`.
        1
    }

    /// Arms the CQ without a system call where the driver allows it (siw:
    /// a store to the control word; mlx5: the doorbell record and the UAR
    /// doorbell, whose sequence number counts the completion events read,
    /// `events_read`); `None` (the default) when arming takes
    /// `REQ_NOTIFY_CQ` (rxe).
    fn arm_in_memory(
        &mut self,
        _solicited_only: bool,
        _events_read: u32,
    ) -> Option<Result<(), Errno>> {
        None
    }

    /// Bytes of driver answer `RESIZE_CQ` needs room for, or why this ring
    /// is not resized here (nothing is sent then).
    fn resize_uhw_out(&self) -> Result<usize, &'static str>;

    /// Takes over the ring a successful `RESIZE_CQ` answered (`written`
    /// bytes of `uhw`), in place of this one, which the kernel no longer
    /// fills. Called under the CQ's ring lock, only after `RESIZE_CQ`
    /// succeeded, so only for rings whose
    /// [`resize_uhw_out`](Self::resize_uhw_out) is `Ok`.
    fn adopt_resized(
        &mut self,
        _transport: &dyn Transport,
        _uhw: &[u8],
        _written: usize,
    ) -> Result<(), Errno> {
        Err(Errno::OPNOTSUPP)
    }
}

/// What [`CompletionRing::poll_first`] did.
pub(crate) enum FirstPoll {
    /// The poll is over: this many completions were copied and handed back.
    Done(usize),
    /// The first completion is in `out[0]`, not yet handed back where the
    /// ring hands back several with one store (rxe), and more may be
    /// ready: [`CompletionRing::poll_more`] finishes the poll.
    More,
}

impl FirstPoll {
    /// The poll's total: this one's, or `more`'s (the ring's
    /// [`poll_more`](CompletionRing::poll_more)) after [`FirstPoll::More`].
    #[inline(always)]
    pub(crate) fn finish(self, more: impl FnOnce() -> usize) -> usize {
        match self {
            FirstPoll::Done(n) => n,
            FirstPoll::More => more(),
        }
    }
}

/// A QP's send queue.
pub(crate) trait SendRing: Ring {
    /// Writes `wrs` (all or nothing) and answers whether the POST_SEND
    /// doorbell must be written: always after a non-empty batch on rxe,
    /// only when the kernel may be idle on siw.
    fn post(&mut self, wrs: &[SendWr<'_>]) -> Result<bool, PostFailure>;

    /// [`post`](Self::post) for the common case, answering in a register
    /// (see [`RecvRing::try_post`]): on [`SendsQueued::NotWritten`] the
    /// caller calls `post`, out of line, for the reason. The default is
    /// `post` itself.
    #[inline(always)]
    fn try_post(&mut self, wrs: &[SendWr<'_>]) -> SendsQueued {
        match self.post(wrs) {
            Ok(doorbell) => SendsQueued::written(doorbell),
            Err(_) => SendsQueued::NotWritten,
        }
    }

    /// How many requests the ring really holds, where that can exceed the
    /// capacity the kernel answered: Linux 6.1's rxe answers the
    /// `max_send_wr` asked for and sizes the ring to the next power of two
    /// minus one (6.12 answers the ring's size). `None` (the default) where
    /// the answer is the ring's size (siw).
    fn ring_capacity(&self) -> Option<u32> {
        None
    }
}

/// What [`SendRing::try_post`] did: small, so it comes back in a register.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SendsQueued {
    /// Written; the kernel is walking the ring already (siw).
    Written,
    /// Written; the POST_SEND doorbell must be written.
    WrittenRing,
    /// Nothing written: refused, a full ring, or not this driver's ring;
    /// [`SendRing::post`] says which.
    NotWritten,
}

impl SendsQueued {
    /// Written, with the doorbell if `doorbell`.
    #[inline(always)]
    pub(crate) fn written(doorbell: bool) -> SendsQueued {
        match doorbell {
            true => SendsQueued::WrittenRing,
            false => SendsQueued::Written,
        }
    }
}

/// A QP's receive queue.
pub(crate) trait RecvRing: Ring {
    /// Writes `wrs` (all or nothing); no system call.
    fn post(&mut self, wrs: &[RecvWr<'_>]) -> Result<(), PostFailure>;

    /// [`post`](Self::post) for the common case, answering in a register:
    /// `true` when `wrs` are written, `false` when nothing is; the caller
    /// then calls `post`, out of line, for the reason (a refusal is the
    /// same again; a full ring may have room by then). The default is
    /// `post` itself.
    #[inline(always)]
    fn try_post(&mut self, wrs: &[RecvWr<'_>]) -> bool {
        self.post(wrs).is_ok()
    }

    /// As [`SendRing::ring_capacity`], for `max_recv_wr`.
    fn ring_capacity(&self) -> Option<u32> {
        None
    }
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
    /// The QP receives from a shared receive queue: it has no receive ring.
    pub(crate) has_srq: bool,
    /// The kernel handle of that SRQ (mlx5 finds the SRQ's ring by it).
    pub(crate) srq: Option<u32>,
}

impl CqRing {
    /// As [`CompletionRing::poll`], through one out-of-line function per
    /// driver ([`poll_ring`]): each driver's poll then saves only the
    /// registers it needs itself, where one body of every driver's arms
    /// saved, on rxe too, all those siw's needs.
    #[inline(always)]
    pub(crate) fn poll(&mut self, out: &mut [WorkCompletion]) -> Result<usize, Unmapped> {
        each_ring!(self, r => poll_ring(r, out))
    }

    /// As [`CompletionRing::arm_in_memory`].
    pub(crate) fn arm_in_memory(
        &mut self,
        solicited_only: bool,
        events_read: u32,
    ) -> Option<Result<(), Errno>> {
        each_ring!(self, r => r.arm_in_memory(solicited_only, events_read))
    }

    /// As [`CompletionRing::resize_uhw_out`].
    pub(crate) fn resize_uhw_out(&self) -> Result<usize, &'static str> {
        each_ring!(self, r => r.resize_uhw_out())
    }

    /// As [`CompletionRing::adopt_resized`].
    pub(crate) fn adopt_resized(
        &mut self,
        transport: &dyn Transport,
        uhw: &[u8],
        written: usize,
    ) -> Result<(), Errno> {
        each_ring!(self, r => r.adopt_resized(transport, uhw, written))
    }
}

/// [`CompletionRing::poll`] of one driver's ring, never inlined into the
/// enum's dispatch (see [`CqRing::poll`]).
#[inline(never)]
fn poll_ring<R: CompletionRing>(
    ring: &mut R,
    out: &mut [WorkCompletion],
) -> Result<usize, Unmapped> {
    ring.poll(out)
}

/// Each ring enum is a [`Ring`] by its variant's ring: rxe's stays mapped
/// until the object is dropped, after its destroy; siw's is unmapped first.
macro_rules! ring_enum_is_a_ring {
    ($($E:ident),+) => {$(
        impl Ring for $E {
            fn unmap_before_destroy(&mut self) -> bool {
                each_ring!(self, r => r.unmap_before_destroy())
            }

            fn remap(&mut self, transport: &dyn Transport) -> Result<(), Errno> {
                each_ring!(self, r => r.remap(transport))
            }
        }
    )+};
}

ring_enum_is_a_ring!(CqRing, SendQueue, RecvQueue);

impl SendQueue {
    /// As [`SendRing::post`]; always inlined, as [`RecvQueue::post`] is (the
    /// guest's benches/ops found this dispatch out of line, 27 Ir of its own
    /// per siw post_send).
    #[inline(always)]
    pub(crate) fn post(&mut self, wrs: &[SendWr<'_>]) -> Result<bool, PostFailure> {
        each_ring!(self, q => q.post(wrs))
    }
}

impl RecvQueue {
    /// As [`RecvRing::post`]; always inlined (the plain hint left it out of
    /// line, with several callers), so that the driver's arm runs in the
    /// caller's frame instead of a call that saves registers only to jump
    /// on to the driver's writer.
    #[inline(always)]
    pub(crate) fn post(&mut self, wrs: &[RecvWr<'_>]) -> Result<(), PostFailure> {
        each_ring!(self, q => q.post(wrs))
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
