//! Safe posting: work requests own the memory the device may touch, and
//! hand it back with their completion. See [`OwnedQp`].

mod memory;
mod outstanding;

use std::fmt;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::command::{QpAttr, QpState, QpType};
use crate::context::Context;
use crate::cq::CompletionQueue;
use crate::error::{Errno, Error, Op};
use crate::qp::{QpCaps, QueuePair};
use crate::wr::{
    Payload, PostError, RecvWr, Remote, SendFlags, SendOp, SendWr, Sge, UdDest, WcStatus,
    WorkCompletion,
};

pub use memory::{DeviceReadable, DeviceWritable, Local, OutOfRange};
use outstanding::{Outstanding, RECV_TAG};

/// A send work request that owns its local memory (or carries inline
/// bytes, copied when it is posted).
#[derive(Debug)]
pub struct SendRequest<'a, M> {
    wr_id: u64,
    op: SendOp,
    flags: SendFlags,
    local: Option<Local<M>>,
    inline: &'a [u8],
    ud: Option<UdDest<'a>>,
}

impl<'a, M: DeviceReadable> SendRequest<'a, M> {
    fn with(wr_id: u64, op: SendOp, local: Option<Local<M>>, inline: &'a [u8]) -> Self {
        SendRequest {
            wr_id,
            op,
            flags: SendFlags::SIGNALED,
            local,
            inline,
            ud: None,
        }
    }

    /// SEND of `local`'s bytes.
    #[doc(alias = "IBV_WR_SEND")]
    pub fn send(wr_id: u64, local: Local<M>) -> Self {
        Self::with(wr_id, SendOp::Send { imm: None }, Some(local), &[])
    }

    /// SEND_WITH_IMM of `local`'s bytes and `imm`.
    #[doc(alias = "IBV_WR_SEND_WITH_IMM")]
    pub fn send_with_imm(wr_id: u64, local: Local<M>, imm: u32) -> Self {
        Self::with(wr_id, SendOp::Send { imm: Some(imm) }, Some(local), &[])
    }

    /// RDMA WRITE of `local`'s bytes to `remote`.
    #[doc(alias = "IBV_WR_RDMA_WRITE")]
    pub fn write(wr_id: u64, local: Local<M>, remote: Remote) -> Self {
        let op = SendOp::RdmaWrite { remote, imm: None };
        Self::with(wr_id, op, Some(local), &[])
    }

    /// RDMA_WRITE_WITH_IMM of `local`'s bytes to `remote`, consuming a
    /// receive of the peer that completes with `imm`.
    #[doc(alias = "IBV_WR_RDMA_WRITE_WITH_IMM")]
    pub fn write_with_imm(wr_id: u64, local: Local<M>, remote: Remote, imm: u32) -> Self {
        let op = SendOp::RdmaWrite {
            remote,
            imm: Some(imm),
        };
        Self::with(wr_id, op, Some(local), &[])
    }

    /// SEND of `bytes`, copied into the work request when it is posted
    /// (`IBV_SEND_INLINE`): at most [`QpCaps::max_inline`] bytes.
    pub fn send_inline(wr_id: u64, bytes: &'a [u8]) -> Self {
        Self::with(wr_id, SendOp::Send { imm: None }, None, bytes)
    }

    /// RDMA WRITE of `bytes` to `remote`, copied when posted (inline).
    pub fn write_inline(wr_id: u64, bytes: &'a [u8], remote: Remote) -> Self {
        let op = SendOp::RdmaWrite { remote, imm: None };
        Self::with(wr_id, op, None, bytes)
    }
}

impl<'a, M: DeviceWritable> SendRequest<'a, M> {
    /// RDMA READ of `remote` into `local`.
    #[doc(alias = "IBV_WR_RDMA_READ")]
    pub fn read(wr_id: u64, local: Local<M>, remote: Remote) -> Self {
        Self::with(wr_id, SendOp::RdmaRead { remote }, Some(local), &[])
    }

    /// 64-bit fetch-and-add of `add` at `remote` (8-byte aligned); the old
    /// value lands in `local`'s first 8 bytes.
    #[doc(alias = "IBV_WR_ATOMIC_FETCH_AND_ADD")]
    pub fn fetch_add(wr_id: u64, local: Local<M>, remote: Remote, add: u64) -> Self {
        Self::with(wr_id, SendOp::FetchAdd { remote, add }, Some(local), &[])
    }

    /// 64-bit compare-and-swap at `remote` (8-byte aligned); the old value
    /// lands in `local`'s first 8 bytes.
    #[doc(alias = "IBV_WR_ATOMIC_CMP_AND_SWP")]
    pub fn compare_swap(
        wr_id: u64,
        local: Local<M>,
        remote: Remote,
        compare: u64,
        swap: u64,
    ) -> Self {
        let op = SendOp::CompareSwap {
            remote,
            compare,
            swap,
        };
        Self::with(wr_id, op, Some(local), &[])
    }
}

impl<'a, M> SendRequest<'a, M> {
    /// No completion of its own on success (`IBV_SEND_SIGNALED` unset): its
    /// memory comes back with the completion of a later signalled request of
    /// the QP (queues complete in order), or with [`OwnedQp::flush`].
    /// Requests are signalled unless this is called.
    pub fn unsignaled(mut self) -> Self {
        self.flags.remove(SendFlags::SIGNALED);
        self
    }

    /// Waits for earlier RDMA READs and atomics first (`IBV_SEND_FENCE`).
    pub fn fence(mut self) -> Self {
        self.flags.insert(SendFlags::FENCE);
        self
    }

    /// Sets the solicited-event bit for the receiver (`IBV_SEND_SOLICITED`).
    pub fn solicited(mut self) -> Self {
        self.flags.insert(SendFlags::SOLICITED);
        self
    }

    /// Its destination, on a UD QP.
    pub fn ud(mut self, dest: UdDest<'a>) -> Self {
        self.ud = Some(dest);
        self
    }

    /// The caller's id, returned in [`Completed::wr_id`].
    pub fn wr_id(&self) -> u64 {
        self.wr_id
    }

    /// Gives the local memory back (none for an inline request).
    pub fn into_local(self) -> Option<Local<M>> {
        self.local
    }
}

/// A receive work request that owns the memory the message lands in.
#[derive(Debug)]
pub struct RecvRequest<M> {
    wr_id: u64,
    local: Local<M>,
}

impl<M: DeviceWritable> RecvRequest<M> {
    /// A receive into `local`.
    pub fn new(wr_id: u64, local: Local<M>) -> Self {
        RecvRequest { wr_id, local }
    }

    /// The caller's id, returned in [`Completed::wr_id`].
    pub fn wr_id(&self) -> u64 {
        self.wr_id
    }

    /// Gives the memory back.
    pub fn into_local(self) -> Local<M> {
        self.local
    }
}

/// A request refused before the device saw it, handed back with why.
#[derive(thiserror::Error)]
#[error("{error}")]
pub struct PostRefused<T> {
    /// The request, untouched.
    pub request: T,
    /// Why.
    #[source]
    pub error: Error,
}

impl<T> fmt::Debug for PostRefused<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostRefused")
            .field("error", &self.error)
            .finish_non_exhaustive()
    }
}

/// A request the device is done with, and its memory.
#[derive(Debug)]
pub struct Completed<M> {
    /// The id the caller gave the request.
    pub wr_id: u64,
    /// The request's own completion, with `wr_id` set to the caller's.
    /// `None` for an unsignalled send that completed without one: a later
    /// request of the QP completed, so it succeeded.
    pub completion: Option<WorkCompletion>,
    /// Its memory (none for an inline send).
    pub local: Option<Local<M>>,
    /// Whether it was a receive.
    pub is_recv: bool,
}

impl<M> Completed<M> {
    /// The completion's status: success for a request that completed
    /// without a completion of its own.
    pub fn status(&self) -> WcStatus {
        self.completion
            .as_ref()
            .map_or(WcStatus::Success, |wc| wc.status)
    }

    /// The memory, without its range.
    pub fn into_memory(self) -> Option<M> {
        self.local.map(Local::into_inner)
    }
}

/// What an outstanding request keeps until its completion.
struct Entry<M> {
    wr_id: u64,
    local: Option<Local<M>>,
}

struct Tables<M> {
    sq: Outstanding<Entry<M>>,
    rq: Outstanding<Entry<M>>,
    /// Completions of other QPs found on this QP's CQs, oldest first.
    foreign: Vec<WorkCompletion>,
}

/// A queue pair whose work requests own the memory the device may use.
///
/// It owns the [`QueuePair`] (and through it keeps its CQs alive). The
/// QP's CQs may be armed and waited on through the caller's
/// [`CompletionQueue`] handles, but should be polled only through
/// [`poll`](Self::poll): a completion taken elsewhere leaves its memory
/// here until [`flush`](Self::flush) or drop. Completions of other QPs
/// sharing the CQs are kept for [`take_foreign`](Self::take_foreign).
///
/// [`QueuePair::post_send`] is `unsafe` because the compiler cannot see
/// that the device reads and writes the SGEs' bytes until the request has
/// completed. An [`OwnedQp`] makes that visible in types:
///
/// - a request's local side is a [`Local`]: a range of registered memory
///   moved into the request ([`BufferMr`](crate::BufferMr), or an
///   `Arc<BufferMr>` for memory the device only reads), so the program cannot
///   free, reuse or write it while the request is outstanding;
/// - operations in which the device writes local memory (receives, RDMA
///   READ, atomics) take only [`DeviceWritable`] memory, which nothing else
///   can read meanwhile;
/// - [`OwnedQp::poll`] reads the QP's CQs and gives each request's memory
///   back in a [`Completed`], with the completion;
/// - a request the device may still use is never released early: dropping
///   the `OwnedQp` moves the QP to ERR and destroys it before the memory is
///   dropped (and leaks the memory if the destroy fails), and
///   [`OwnedQp::flush`] completes everything outstanding with FLUSH_ERR and
///   hands it back.
///
/// ```no_run
/// use uverbs::{AccessFlags, BufferMr, Local, OwnedQp, QpInit, RecvRequest, SendRequest};
/// use uverbs::command::QpType;
/// # fn f(ctx: &uverbs::Context) -> Result<(), Box<dyn std::error::Error>> {
/// let pd = ctx.alloc_pd()?;
/// let cq = ctx.create_cq(64, None)?;
/// let qp = pd.create_qp(&QpInit::new(QpType::Rc, &cq, &cq))?;
/// let qp: OwnedQp<BufferMr<Vec<u8>>> = OwnedQp::new(qp).map_err(|refused| refused.error)?;
/// // ... connect it (qp.modify to INIT, RTR, RTS) ...
/// let buf = pd.reg_buffer(vec![0u8; 4096], AccessFlags::LOCAL_WRITE)?;
/// qp.post_recv(RecvRequest::new(7, Local::whole(buf))).map_err(|r| r.error)?;
/// // `buf` is gone from our hands until its completion:
/// let mut done = Vec::new();
/// while done.is_empty() {
///     qp.poll(&mut done)?;
/// }
/// let back: BufferMr<Vec<u8>> = done.remove(0).into_memory().unwrap();
/// # Ok(()) }
/// ```
///
/// The memory cannot be used while the request owns it:
/// ```compile_fail,E0382
/// # use uverbs::{BufferMr, Local, OwnedQp, RecvRequest};
/// # fn f(qp: &OwnedQp<BufferMr<Vec<u8>>>, buf: BufferMr<Vec<u8>>) {
/// let _ = qp.post_recv(RecvRequest::new(1, Local::whole(buf)));
/// buf.buffer(); // error: use of moved value
/// # }
/// ```
/// Shared memory (an `Arc`) may be sent or written from, but never received
/// or read into:
/// ```compile_fail,E0277
/// # use std::sync::Arc;
/// # use uverbs::{BufferMr, Local, RecvRequest};
/// # fn f(buf: Arc<BufferMr<Vec<u8>>>) {
/// let _ = RecvRequest::new(1, Local::whole(buf)); // error: not DeviceWritable
/// # }
/// ```
/// ```compile_fail,E0277
/// # use std::sync::Arc;
/// # use uverbs::{BufferMr, Local, Remote, SendRequest};
/// # fn f(buf: Arc<BufferMr<Vec<u8>>>, remote: Remote) {
/// let _ = SendRequest::read(1, Local::whole(buf), remote); // error: not DeviceWritable
/// # }
/// ```
/// Plain slices are not registered memory a request can own:
/// ```compile_fail,E0277
/// # use uverbs::Local;
/// # fn f(bytes: &'static [u8]) {
/// let _ = Local::whole(bytes); // error: &[u8] is not DeviceReadable
/// # }
/// ```
/// And an `OwnedQp` holding memory of one type takes no other:
/// ```compile_fail,E0308
/// # use uverbs::{BufferMr, Local, OwnedQp, SendRequest};
/// # fn f(qp: &OwnedQp<BufferMr<Vec<u8>>>, buf: BufferMr<Box<[u8]>>) {
/// let _ = qp.post_send(SendRequest::send(1, Local::whole(buf))); // error: mismatched types
/// # }
/// ```
///
/// It owns the [`QueuePair`] (and through it keeps its CQs alive). The
/// QP's CQs may be armed and waited on through the caller's
/// [`CompletionQueue`] handles, but should be polled only through
/// [`poll`](Self::poll): a completion taken elsewhere leaves its memory
/// here until [`flush`](Self::flush) or drop. Completions of other QPs
/// sharing the CQs are kept for [`take_foreign`](Self::take_foreign).
#[doc(alias = "ibv_post_send")]
#[doc(alias = "ibv_post_recv")]
pub struct OwnedQp<M> {
    /// `Some` until dropped; destroyed before `tables` lets go of memory.
    qp: Option<QueuePair>,
    tables: Mutex<Tables<M>>,
}

impl<M> fmt::Debug for OwnedQp<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let t = self.lock();
        f.debug_struct("OwnedQp")
            .field("qp", &self.qp)
            .field("sends_outstanding", &t.sq.len())
            .field("recvs_outstanding", &t.rq.len())
            .finish()
    }
}

/// Why [`OwnedQp::new`] refused a queue pair, and the queue pair back.
#[derive(Debug, thiserror::Error)]
#[error("{error}")]
pub struct NotOwnable {
    /// The queue pair, untouched.
    pub qp: QueuePair,
    /// Why.
    #[source]
    pub error: Error,
}

/// Completions read from a CQ at a time.
const POLL_BATCH: usize = 16;

impl<M: DeviceReadable> OwnedQp<M> {
    /// Takes `qp`, which must be in RESET (so no request posted before is
    /// outstanding), and drains its CQs of completions that could name it:
    /// those left by a destroyed QP with the same number, or by raw posts
    /// before a reset. Completions of other QPs drained are kept for
    /// [`take_foreign`](Self::take_foreign).
    // The Err hands the caller's resource back by value; the path is cold.
    #[allow(clippy::result_large_err)]
    pub fn new(qp: QueuePair) -> Result<Self, NotOwnable> {
        if qp.state() != QpState::Reset {
            let error = Error::input(
                Op::PostSend,
                &qp.context().inner.device,
                "an OwnedQp takes a queue pair in RESET only",
            );
            return Err(NotOwnable { qp, error });
        }
        let owned = OwnedQp {
            qp: Some(qp),
            tables: Mutex::new(Tables {
                sq: Outstanding::new(0),
                rq: Outstanding::new(RECV_TAG),
                foreign: Vec::new(),
            }),
        };
        let drained = {
            let mut t = owned.lock();
            owned.drain_stale(&mut t)
        };
        match drained {
            Ok(()) => Ok(owned),
            Err(error) => Err(NotOwnable {
                qp: owned.into_parts(),
                error,
            }),
        }
    }

    fn drain_stale(&self, t: &mut Tables<M>) -> Result<(), Error> {
        let qpn = self.qp().qp_num();
        for cq in self.cqs() {
            let mut wc = [WorkCompletion::default(); POLL_BATCH];
            loop {
                let n = cq.poll(&mut wc)?;
                t.foreign
                    .extend(wc[..n].iter().filter(|c| c.qp_num != qpn).copied());
                if n < POLL_BATCH {
                    break;
                }
            }
        }
        Ok(())
    }

    /// Posts one send request: on success its memory belongs to the device
    /// until [`poll`](Self::poll) hands it back; on refusal (wrong state,
    /// a full queue, inline data too long, …) it comes back untouched.
    /// One doorbell write.
    // The Err hands the caller's resource back by value; the path is cold.
    #[allow(clippy::result_large_err)]
    pub fn post_send<'a>(
        &self,
        request: SendRequest<'a, M>,
    ) -> Result<(), PostRefused<SendRequest<'a, M>>> {
        let mut t = self.lock();
        let sge = match request.local.as_ref().map(Local::sge).transpose() {
            Ok(sge) => sge,
            Err(e) => return Err(self.refused(Op::PostSend, 0, e, request)),
        };
        let sges = sge.as_slice();
        let inline = [request.inline];
        let wr = send_wr(&request, t.sq.id_of_next(0), sges, &inline);
        // SAFETY: the request's memory is a Local<M: DeviceReadable> (or
        // DeviceWritable for READ and atomics, by SendRequest's
        // constructors): mapped, registered and unwritten while the value
        // lives; the value is kept in the table until the device is done
        // with it (its completion, a later completion of the queue, or the
        // QP's destruction).
        if let Err(error) = unsafe { self.qp().post_send(std::slice::from_ref(&wr)) } {
            return Err(PostRefused { request, error });
        }
        t.sq.push(Entry {
            wr_id: request.wr_id,
            local: request.local,
        });
        Ok(())
    }

    /// Posts `requests` with one doorbell, all or nothing: on success the
    /// vector is emptied (the requests belong to the device until
    /// [`poll`](Self::poll)), on error it is as it was and nothing was
    /// queued. Allocates the batch's work-request array.
    pub fn post_send_batch(&self, requests: &mut Vec<SendRequest<'_, M>>) -> Result<(), Error> {
        if requests.is_empty() {
            return Ok(());
        }
        let mut t = self.lock();
        let mut sges = Vec::with_capacity(requests.len());
        for (i, r) in requests.iter().enumerate() {
            let sge = r.local.as_ref().map(Local::sge).transpose();
            sges.push(sge.map_err(|e| self.post_error(Op::PostSend, i, e))?);
        }
        let inlines: Vec<[&[u8]; 1]> = requests.iter().map(|r| [r.inline]).collect();
        let wrs: Vec<SendWr<'_>> = requests
            .iter()
            .enumerate()
            .map(|(i, r)| send_wr(r, t.sq.id_of_next(i), sges[i].as_slice(), &inlines[i]))
            .collect();
        // SAFETY: as in post_send, for each request of the batch; they stay
        // in the table until the device is done with them.
        unsafe { self.qp().post_send(&wrs) }?;
        drop(wrs);
        for r in requests.drain(..) {
            t.sq.push(Entry {
                wr_id: r.wr_id,
                local: r.local,
            });
        }
        Ok(())
    }

    /// Posts one receive request (no system call); on refusal it comes
    /// back untouched.
    // The Err hands the caller's resource back by value; the path is cold.
    #[allow(clippy::result_large_err)]
    pub fn post_recv(&self, request: RecvRequest<M>) -> Result<(), PostRefused<RecvRequest<M>>>
    where
        M: DeviceWritable,
    {
        let mut t = self.lock();
        let sge = match request.local.sge() {
            Ok(sge) => sge,
            Err(e) => return Err(self.refused(Op::PostRecv, 0, e, request)),
        };
        let sges = [sge];
        let wr = RecvWr {
            wr_id: t.rq.id_of_next(0),
            sges: &sges,
        };
        // SAFETY: the memory is a Local<M: DeviceWritable>: nothing but the
        // device reaches it while the value lives, and the value stays in
        // the table until the device is done with it.
        if let Err(error) = unsafe { self.qp().post_recv(std::slice::from_ref(&wr)) } {
            return Err(PostRefused { request, error });
        }
        t.rq.push(Entry {
            wr_id: request.wr_id,
            local: Some(request.local),
        });
        Ok(())
    }

    /// Reads the QP's CQs once (up to 16 completions from each) and pushes
    /// a [`Completed`] for every request of this QP they end, oldest first,
    /// onto `done`. Returns how many were pushed. No system call; no
    /// allocation beyond `done`'s growth.
    #[doc(alias = "ibv_poll_cq")]
    pub fn poll(&self, done: &mut Vec<Completed<M>>) -> Result<usize, Error> {
        let mut t = self.lock();
        let before = done.len();
        let qpn = self.qp().qp_num();
        for cq in self.cqs() {
            let mut wc = [WorkCompletion::default(); POLL_BATCH];
            let n = cq.poll(&mut wc)?;
            for c in &wc[..n] {
                if c.qp_num != qpn {
                    t.foreign.push(*c);
                    continue;
                }
                let (table, is_recv) = if c.wr_id & RECV_TAG != 0 {
                    (&mut t.rq, true)
                } else {
                    (&mut t.sq, false)
                };
                table.complete_through(c.wr_id, |entry, named| {
                    let completion = named.then_some(WorkCompletion {
                        wr_id: entry.wr_id,
                        ..*c
                    });
                    done.push(Completed {
                        wr_id: entry.wr_id,
                        completion,
                        local: entry.local,
                        is_recv,
                    });
                });
            }
        }
        Ok(done.len() - before)
    }

    /// Moves the QP to ERR, which completes every outstanding request with
    /// FLUSH_ERR, and polls until all of them are back in `done` or
    /// `timeout` has passed (then `ETIMEDOUT`; what came back is in `done`,
    /// the rest stays owned). The QP is left in ERR: modify it to RESET to
    /// use it again.
    pub fn flush(&self, timeout: Duration, done: &mut Vec<Completed<M>>) -> Result<(), Error> {
        let qp = self.qp();
        if qp.state() != QpState::Err {
            qp.modify(&QpAttr::new().state(QpState::Err))?;
        }
        let deadline = Instant::now() + timeout;
        loop {
            self.poll(done)?;
            if self.outstanding() == (0, 0) {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(Error::os(
                    Op::PollCq,
                    &qp.context().inner.device,
                    Errno::TIMEDOUT,
                ));
            }
            std::thread::sleep(Duration::from_micros(200));
        }
    }
}

impl<M> OwnedQp<M> {
    fn lock(&self) -> MutexGuard<'_, Tables<M>> {
        // A panic while holding the lock leaves the tables consistent (each
        // entry is pushed only after its post succeeded): keep using them.
        self.tables
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The queue pair. Not public: a raw post on it could carry an id of
    /// this table's, and its completion would release memory too early.
    fn qp(&self) -> &QueuePair {
        self.qp.as_ref().expect("present until dropped")
    }

    /// The QP's send CQ and, if another, its receive CQ.
    fn cqs(&self) -> impl Iterator<Item = CompletionQueue> + '_ {
        let (send, recv) = self.qp().cqs();
        let recv = (!send.same_as(&recv)).then_some(recv);
        std::iter::once(send).chain(recv)
    }

    /// Changes the QP's attributes and state: [`QueuePair::modify`].
    #[doc(alias = "ibv_modify_qp")]
    pub fn modify(&self, attr: &QpAttr) -> Result<(), Error> {
        self.qp().modify(attr)
    }

    /// The QP number the peer addresses.
    pub fn qp_num(&self) -> u32 {
        self.qp().qp_num()
    }

    /// RC, UC or UD.
    pub fn qp_type(&self) -> QpType {
        self.qp().qp_type()
    }

    /// The state the last successful modify set: [`QueuePair::state`].
    pub fn state(&self) -> QpState {
        self.qp().state()
    }

    /// Asks the kernel for the QP's state: [`QueuePair::refresh_state`].
    #[doc(alias = "ibv_query_qp")]
    pub fn refresh_state(&self) -> Result<QpState, Error> {
        self.qp().refresh_state()
    }

    /// Learns the state the connection manager's `ESTABLISHED` left the QP
    /// in (on iWARP: RTS): [`QueuePair::established`]. Call it once the
    /// connection is up, before posting sends.
    pub fn established(&self) -> Result<QpState, Error> {
        self.qp().established()
    }

    /// The kernel's handle of the QP.
    pub fn handle(&self) -> u32 {
        self.qp().handle()
    }

    /// The context the QP belongs to.
    pub fn context(&self) -> &Context {
        self.qp().context()
    }

    /// The capacities the kernel gave.
    pub fn caps(&self) -> QpCaps {
        self.qp().caps()
    }

    /// Send and receive requests whose memory the device may still use.
    pub fn outstanding(&self) -> (usize, usize) {
        let t = self.lock();
        (t.sq.len(), t.rq.len())
    }

    /// Takes the completions of other QPs that [`poll`](Self::poll) found
    /// on this QP's CQs, oldest first.
    pub fn take_foreign(&self) -> Vec<WorkCompletion> {
        std::mem::take(&mut self.lock().foreign)
    }

    /// The queue pair back, if no request is outstanding; otherwise `self`.
    // The Err hands the caller's resource back by value; the path is cold.
    #[allow(clippy::result_large_err)]
    pub fn into_inner(self) -> Result<QueuePair, Self> {
        if self.outstanding() == (0, 0) {
            Ok(self.into_parts())
        } else {
            Err(self)
        }
    }

    /// The QP out of a value whose tables are empty.
    fn into_parts(mut self) -> QueuePair {
        self.qp.take().expect("present until dropped")
    }

    fn post_error(&self, op: Op, index: usize, source: PostError) -> Error {
        Error::Post {
            op,
            device: self.qp().context().inner.device.clone(),
            index,
            source: Box::new(source),
        }
    }

    fn refused<T>(&self, op: Op, index: usize, source: PostError, request: T) -> PostRefused<T> {
        PostRefused {
            request,
            error: self.post_error(op, index, source),
        }
    }
}

impl<M> Drop for OwnedQp<M> {
    fn drop(&mut self) {
        let Some(qp) = self.qp.take() else { return };
        let t = self
            .tables
            .get_mut()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if t.sq.is_empty() && t.rq.is_empty() {
            return;
        }
        // Stop the device first (ERR flushes the queues), then destroy the
        // QP: after DESTROY_QP the device reaches none of its requests'
        // memory, which the tables drop after this body.
        if qp.state() != QpState::Err {
            let _ = qp.modify(&QpAttr::new().state(QpState::Err));
        }
        if let Err(refused) = qp.destroy() {
            // The device may still use the memory (or, in a forked child,
            // the parent's device does): leak it, and the QP.
            std::mem::forget(t.sq.take_all());
            std::mem::forget(t.rq.take_all());
            std::mem::forget(refused);
        }
    }
}

/// The work request naming `r` under `id`, over its one SGE (or inline bytes).
fn send_wr<'s, M>(
    r: &SendRequest<'s, M>,
    id: u64,
    sges: &'s [Sge],
    inline: &'s [&'s [u8]; 1],
) -> SendWr<'s> {
    SendWr {
        wr_id: id,
        op: r.op,
        flags: r.flags,
        payload: if r.local.is_some() {
            Payload::Sges(sges)
        } else {
            Payload::Inline(inline)
        },
        ud: r.ud,
    }
}
