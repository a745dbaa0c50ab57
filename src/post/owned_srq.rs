//! A shared receive queue whose receives own their memory until their
//! completion, whichever attached QP consumed them.

use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};

use super::outstanding::{Outstanding, RECV_TAG};
use super::{Completed, DeviceReadable, Ended, Entry, PostRefused, RecvRequest, POLL_BATCH};
use crate::cq_routing::Reader;
use crate::error::{Error, Op};
use crate::srq::SharedReceiveQueue;
use crate::wr::{PostError, RecvWr, WorkCompletion};

/// A [`SharedReceiveQueue`] whose receive requests own their memory
/// ([`RecvRequest`]) until the device is done with it: the safe
/// counterpart of `ibv_post_srq_recv`, as [`OwnedQp`](crate::OwnedQp) is
/// of `ibv_post_recv`.
///
/// QPs take their receives from it through
/// [`QpInit::srq`](crate::QpInit::srq)`(owned.srq())`, plain
/// [`QueuePair`](crate::QueuePair)s and [`OwnedQp`](crate::OwnedQp)s alike.
/// Whichever of them a message arrives on, the receive's completion goes to
/// that QP's receive CQ, and [`poll`](Self::poll) hands the request back
/// with it: a plain [`CompletionQueue::poll`](crate::CompletionQueue::poll)
/// of that CQ, or an `OwnedQp`'s poll, never sees it. The owner tells its
/// receive completions from the sends of the same QPs by the top bit of
/// the `wr_id`: a raw `post_send` on a QP of this SRQ whose `wr_id` has
/// that bit set is refused ([`PostError::ReservedWrId`]), and
/// [`SharedReceiveQueue::post_recv`] on the owned SRQ is refused too.
///
/// Memory comes back with its completion, or when the SRQ is destroyed
/// ([`destroy`](Self::destroy), [`Ended::Destroyed`]). Dropped while QPs
/// still use the SRQ, the owner leaves its outstanding receives with the
/// SRQ, which the kernel keeps until the last of those QPs is destroyed:
/// they are freed after the SRQ's `DESTROY_SRQ`, and leaked if the kernel
/// refuses it, never freed while the device may write them.
///
/// ```no_run
/// # use uverbs::{BufferMr, post::Local, post::OwnedSrq, post::RecvRequest, qp::SrqInit, QpInit, QpType};
/// # fn f(pd: &uverbs::ProtectionDomain, cq: &uverbs::CompletionQueue,
/// #      bufs: Vec<BufferMr<Vec<u8>>>) -> Result<(), Box<dyn std::error::Error>> {
/// let srq: OwnedSrq<BufferMr<Vec<u8>>> = OwnedSrq::new(pd.create_srq(&SrqInit::new(64, 1))?)?;
/// let qp = pd.create_qp(&QpInit::new(QpType::Rc, cq, cq).srq(srq.srq()))?;
/// for (i, buf) in bufs.into_iter().enumerate() {
///     srq.post_recv(RecvRequest::new(i as u64, Local::whole(buf)))?;
/// }
/// // … connect `qp`, let the peer send …
/// let mut done = Vec::new();
/// srq.poll(&mut done)?;
/// for c in done {
///     let arrived_on = c.completion().map(|wc| wc.qp_num());
///     let buf = c.into_memory(); // the receive buffer, back
/// #   let _ = (arrived_on, buf);
/// }
/// # drop(qp);
/// # Ok(()) }
/// ```
#[doc(alias = "ibv_post_srq_recv")]
pub struct OwnedSrq<M: Send + 'static> {
    /// `Some` until dropped or destroyed.
    srq: Option<SharedReceiveQueue>,
    rq: Mutex<Outstanding<Entry<M>>>,
}

impl<M: Send + 'static> fmt::Debug for OwnedSrq<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OwnedSrq")
            .field("srq", &self.srq)
            .field("recvs_outstanding", &self.lock().len())
            .finish()
    }
}

/// Why [`OwnedSrq::new`] refused an SRQ, and the SRQ back.
#[derive(Debug, thiserror::Error)]
#[error("{error}")]
#[non_exhaustive]
pub struct SrqNotOwnable {
    /// The SRQ, untouched.
    pub srq: SharedReceiveQueue,
    /// Why: the message.
    pub error: Error,
}

crate::error::hands_back_with_error! {
    [] SrqNotOwnable, "the SRQ";
}

/// Why [`OwnedSrq::destroy`] failed (the kernel's `EBUSY` while a QP uses
/// the SRQ), and the owner back with its requests still outstanding.
#[derive(Debug, thiserror::Error)]
#[error("{error}")]
#[non_exhaustive]
pub struct OwnedSrqNotDestroyed<M: Send + 'static> {
    /// The owner, unchanged.
    pub srq: OwnedSrq<M>,
    /// Why: the message.
    pub error: Error,
}

crate::error::hands_back_with_error! {
    [M: Send + 'static] OwnedSrqNotDestroyed<M>, "the SRQ's owner (whose drop leaves the buffers with the SRQ until it is destroyed)";
}

impl<M: DeviceReadable + Send + 'static> OwnedSrq<M> {
    /// Takes `srq`, which no QP may use yet (QPs created on it before
    /// would read its receive completions as their own): from now on its
    /// receives are posted here only.
    // The Err hands the caller's resource back by value; the path is cold.
    #[allow(clippy::result_large_err)]
    pub fn new(srq: SharedReceiveQueue) -> Result<Self, SrqNotOwnable> {
        // Each QP on the SRQ holds its inner value; this handle is the only
        // other one, so no QP can be created on it meanwhile.
        if Arc::strong_count(&srq.inner) != 1 {
            let error = Error::input(
                Op::PostSrqRecv,
                &srq.context().inner.device,
                "an OwnedSrq takes a shared receive queue no queue pair uses yet",
            );
            return Err(SrqNotOwnable { srq, error });
        }
        srq.inner.set_owned();
        Ok(OwnedSrq {
            srq: Some(srq),
            rq: Mutex::new(Outstanding::new(RECV_TAG)),
        })
    }

    /// Posts one receive request to the SRQ (no system call): on success
    /// its memory belongs to the device until [`poll`](Self::poll) hands it
    /// back; a refusal (the SRQ full, too many SGEs) hands it back
    /// untouched.
    // The Err hands the caller's resource back by value; the path is cold.
    #[allow(clippy::result_large_err)]
    #[doc(alias = "ibv_post_srq_recv")]
    pub fn post_recv(&self, request: RecvRequest<M>) -> Result<(), PostRefused<RecvRequest<M>>> {
        let mut t = self.lock();
        let sge = match request.local.sge() {
            Ok(sge) => sge,
            Err(e) => {
                let error = self.post_error(e);
                return Err(PostRefused { request, error });
            }
        };
        let sges = [sge];
        let wr = RecvWr {
            wr_id: t.id_of_next(0),
            sges: &sges,
        };
        // SAFETY: the memory was DeviceWritable when the request was made
        // (RecvRequest::new), and `Holds` keeps it so: nothing but the
        // device reaches it while the value lives. The value stays in the
        // table until its completion comes back here (the routing hands the
        // receive completions of this SRQ's QPs to this owner only, and no
        // other post can carry this table's ids: raw SRQ posts are refused,
        // raw sends on its QPs may not set the tag bit) or the SRQ is
        // destroyed (the drop leaves the table with the SRQ until then).
        if let Err(error) = unsafe { self.srq().post(std::slice::from_ref(&wr), true) } {
            return Err(PostRefused { request, error });
        }
        t.push(Entry::recv(wr.wr_id, request.wr_id, request.local));
        Ok(())
    }

    /// Reads the receive CQs of the SRQ's QPs once (up to 16 completions
    /// from each) and pushes a [`Completed`] for every receive of this SRQ
    /// they end onto `done`, with the completion (its `wr_id` the caller's,
    /// its `qp_num` the QP the message arrived on). Returns how many were
    /// pushed. Completions of other readers read meanwhile are held for
    /// them. No system call.
    ///
    /// The QPs of an SRQ consume its requests in the order they were
    /// posted, but complete them on their own CQs: across QPs completions
    /// come in any order, so each completion ends its own request only.
    #[doc(alias = "ibv_poll_cq")]
    pub fn poll(&self, done: &mut Vec<Completed<M>>) -> Result<usize, Error> {
        let mut t = self.lock();
        let srq = self.srq();
        let reader = Reader::Srq(srq.inner.event_id());
        let mut ended = 0;
        srq.inner.try_for_each_cq(|cq| {
            let mut wc = [WorkCompletion::default(); POLL_BATCH];
            let n = cq.poll_routed(reader, &mut wc)?;
            for c in &wc[..n] {
                ended += t.complete(
                    c.wr_id(),
                    |_| false,
                    |entry, _| {
                        let how = Ended::Completion(c.with_wr_id(entry.wr_id));
                        done.push(entry.end(how, true).1);
                    },
                );
            }
            Ok(())
        })?;
        Ok(ended)
    }

    /// Destroys the SRQ now (`DESTROY_SRQ`) and hands back every request
    /// still outstanding, as [`Ended::Destroyed`]. While a QP uses the SRQ
    /// the kernel answers `EBUSY`: the owner comes back in the error,
    /// intact.
    #[doc(alias = "ibv_destroy_srq")]
    // The Err hands the caller's resource back by value; the path is cold.
    #[allow(clippy::result_large_err)]
    pub fn destroy(mut self) -> Result<Vec<Completed<M>>, OwnedSrqNotDestroyed<M>> {
        let srq = self.srq.take().expect("present until dropped");
        match srq.destroy() {
            Ok(_) => {
                let t = self.rq.get_mut().unwrap_or_else(|p| p.into_inner());
                let ended = t.take_all().into_iter();
                Ok(ended.map(|e| e.end(Ended::Destroyed, true).1).collect())
            }
            Err(refused) => {
                self.srq = Some(refused.srq);
                Err(OwnedSrqNotDestroyed {
                    srq: self,
                    error: refused.error,
                })
            }
        }
    }

    fn post_error(&self, source: PostError) -> Error {
        Error::Post {
            op: Op::PostSrqRecv,
            device: self.srq().context().inner.device.clone(),
            index: 0,
            why: Box::new(source),
        }
    }
}

impl<M: Send + 'static> OwnedSrq<M> {
    /// The SRQ, to create QPs on ([`QpInit::srq`](crate::QpInit::srq)), arm
    /// its limit or query it. Its [`post_recv`](SharedReceiveQueue::post_recv)
    /// is refused: post here.
    pub fn srq(&self) -> &SharedReceiveQueue {
        self.srq.as_ref().expect("present until dropped")
    }

    /// Receive requests whose memory the device may still use.
    pub fn outstanding(&self) -> usize {
        self.lock().len()
    }

    fn lock(&self) -> MutexGuard<'_, Outstanding<Entry<M>>> {
        // A panic while holding the lock leaves the table consistent (each
        // entry is pushed only after its post succeeded): keep using it.
        self.rq
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl<M: Send + 'static> Drop for OwnedSrq<M> {
    fn drop(&mut self) {
        let Some(srq) = self.srq.take() else { return };
        let t = self.rq.get_mut().unwrap_or_else(|p| p.into_inner());
        // The SRQ keeps the outstanding requests: its own drop (now, or
        // after the last QP on it) frees them once DESTROY_SRQ succeeded,
        // and leaks them otherwise (a refusal, a forked child).
        let outstanding: Vec<Entry<M>> = t.take_all();
        if !outstanding.is_empty() {
            srq.inner.keep(Box::new(outstanding));
        }
    }
}
