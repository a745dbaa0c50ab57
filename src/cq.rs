//! Completion channels and completion queues.
//!
//! On rxe a CQ is a ring the kernel shares with this process: `CREATE_CQ`
//! answers where it is (`rxe_create_cq_resp::mi`), the CQ maps it once on
//! the command file, and [`CompletionQueue::poll`] copies completions out of
//! it with no system call. Dropping the CQ destroys it first and unmaps the
//! ring after.

use std::fmt;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use zerocopy::FromBytes;

use crate::command::{CreateCompChannel, CreateCq, DestroyCq, ReqNotifyCq};
use crate::context::Context;
use crate::error::{Errno, Error, Op};
use crate::pd::debug_object;
use crate::provider::rxe::queue::{Consumer, QueueMem};
use crate::provider::rxe::wqe::{self, WorkCompletion, WC_LEN};
use crate::provider::Provider;
use crate::transport::SharedMapping;
use uverbs_uapi as sys;

/// The value each CQ's events carry (`user_handle`): unique in the process.
static NEXT_CQ_EVENT_ID: AtomicU64 = AtomicU64::new(1);

/// A completion channel (`struct ibv_comp_channel`): a descriptor on which
/// the CQs created with it report completion events, once per
/// [`CompletionQueue::req_notify`].
///
/// It implements [`AsFd`], so epoll or tokio's `AsyncFd` can wait on it;
/// [`get_event`](Self::get_event) reads one event. The descriptor is closed
/// when the channel and every CQ made with it are gone.
#[doc(alias = "ibv_comp_channel")]
#[doc(alias = "ibv_create_comp_channel")]
pub struct CompletionChannel {
    inner: Arc<ChannelInner>,
}

struct ChannelInner {
    ctx: Context,
    fd: OwnedFd,
}

impl fmt::Debug for CompletionChannel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CompletionChannel")
            .field("device", &self.inner.ctx.device_name())
            .field("fd", &self.inner.fd.as_raw_fd())
            .finish()
    }
}

impl CompletionChannel {
    /// The context the channel belongs to.
    pub fn context(&self) -> &Context {
        &self.inner.ctx
    }

    /// Waits for one completion event (blocking, unless the descriptor was
    /// made non-blocking: then `EAGAIN` when none is pending) and returns
    /// the [`event_id`](CompletionQueue::event_id) of the CQ it is about.
    /// Re-arm that CQ with [`req_notify`](CompletionQueue::req_notify) and
    /// poll it.
    #[doc(alias = "ibv_get_cq_event")]
    pub fn get_event(&self) -> Result<u64, Error> {
        let mut desc = [0u8; size_of::<sys::ib_uverbs_comp_event_desc>()];
        let fail = |e| Error::os(Op::GetCqEvent, &self.inner.ctx.inner.device, e);
        let n = loop {
            match rustix::io::read(&self.inner.fd, &mut desc) {
                Err(Errno::INTR) => continue,
                other => break other.map_err(fail)?,
            }
        };
        if n != desc.len() {
            return Err(fail(Errno::IO));
        }
        let event = sys::ib_uverbs_comp_event_desc::read_from_bytes(&desc[..])
            .map_err(|_| fail(Errno::IO))?;
        Ok(event.cq_handle)
    }
}

impl AsFd for CompletionChannel {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.inner.fd.as_fd()
    }
}

impl AsRawFd for CompletionChannel {
    fn as_raw_fd(&self) -> RawFd {
        self.inner.fd.as_raw_fd()
    }
}

/// The kernel CQ, shared by the [`CompletionQueue`] and the QPs using it.
pub(crate) struct CqInner {
    pub(crate) ctx: Context,
    pub(crate) handle: u32,
    cqe: u32,
    event_id: u64,
    /// The user side of the ring. Declared before `mapping`: it points into it.
    ring: Mutex<Consumer>,
    /// Keeps the channel's descriptor open while the CQ may report on it.
    _channel: Option<Arc<ChannelInner>>,
    /// Unmapped after `Drop::drop` has destroyed the CQ.
    _mapping: SharedMapping,
}

impl Drop for CqInner {
    fn drop(&mut self) {
        // Every QP using this CQ holds an Arc of it: none is left here. In a
        // forked child the CQ is the parent's: send nothing.
        if !self.ctx.is_owned_by_this_process() {
            return;
        }
        // SAFETY: DESTROY_CQ of the handle this value owns; nothing uses it
        // after (the ring is unmapped only after this).
        let result = unsafe {
            self.ctx
                .run(Op::DestroyCq, &DestroyCq::new(self.handle), &mut [])
        };
        if let Err(e) = result {
            // The kernel keeps its own reference on the ring's pages, so
            // unmapping after a refused destroy is still sound.
            let _ = e;
        }
    }
}

/// A completion queue (`struct ibv_cq`).
///
/// [`poll`](Self::poll) reads completions from the ring the kernel shares
/// with this process: no allocation and no system call. Queue pairs using
/// the CQ keep it alive, so the kernel object is destroyed (`DESTROY_CQ`)
/// only after the last of them, whatever the drop order; the ring is
/// unmapped after the destroy.
///
/// Only rxe is supported for now: on other drivers
/// [`Context::create_cq`] fails with `EOPNOTSUPP`.
#[doc(alias = "ibv_cq")]
#[doc(alias = "ibv_create_cq")]
pub struct CompletionQueue {
    pub(crate) inner: Arc<CqInner>,
}

impl fmt::Debug for CompletionQueue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        debug_object(f, "CompletionQueue", &self.inner.ctx, self.inner.handle)
            .field("cqe", &self.inner.cqe)
            .finish()
    }
}

impl Context {
    /// Creates a completion channel (`CREATE_COMP_CHANNEL`).
    ///
    /// Only the kernel's file hands over a descriptor; over a test double
    /// this fails with `EOPNOTSUPP`.
    #[doc(alias = "ibv_create_comp_channel")]
    pub fn create_comp_channel(&self) -> Result<CompletionChannel, Error> {
        // SAFETY: CREATE_COMP_CHANNEL hands no memory to the device.
        let (resp, _) =
            unsafe { self.run(Op::CreateCompChannel, &CreateCompChannel::new(), &mut []) }?;
        // SAFETY: the number the successful command just answered, adopted once.
        let fd = unsafe { self.inner.transport.adopt_fd(resp.fd) }.ok_or_else(|| {
            Error::os(Op::CreateCompChannel, &self.inner.device, Errno::OPNOTSUPP)
        })?;
        Ok(CompletionChannel {
            inner: Arc::new(ChannelInner {
                ctx: self.clone(),
                fd,
            }),
        })
    }

    /// Creates a completion queue of at least `cqe` entries; with a
    /// `channel`, [`req_notify`](CompletionQueue::req_notify) makes it report
    /// there.
    ///
    /// On rxe: `CREATE_CQ`, then the ring is mapped (at the offset and size
    /// the kernel answered). If mapping fails the CQ is destroyed again.
    /// Other drivers: `EOPNOTSUPP` (siw's data path is the next step).
    #[doc(alias = "ibv_create_cq")]
    pub fn create_cq(
        &self,
        cqe: u32,
        channel: Option<&CompletionChannel>,
    ) -> Result<CompletionQueue, Error> {
        let fail = |e| Error::os(Op::CreateCq, &self.inner.device, e);
        self.check_process(Op::CreateCq)?;
        if self.inner.provider != Provider::Rxe {
            return Err(fail(Errno::OPNOTSUPP));
        }
        if let Some(ch) = channel {
            if !ch.inner.ctx.same_as(self) {
                return Err(Error::input(
                    Op::CreateCq,
                    &self.inner.device,
                    "the completion channel belongs to another context",
                ));
            }
        }
        let event_id = NEXT_CQ_EVENT_ID.fetch_add(1, Ordering::Relaxed);
        let mut cmd = CreateCq::new(cqe, event_id);
        if let Some(ch) = channel {
            cmd = cmd.comp_channel(ch.as_raw_fd());
        }
        let mut uhw = [0u8; size_of::<sys::rxe_create_cq_resp>()];
        // SAFETY: CREATE_CQ hands no user memory to the device; the ring is
        // the kernel's.
        let (resp, written) = unsafe { self.run(Op::CreateCq, &cmd, &mut uhw) }?;
        let destroy = || {
            // SAFETY: the CQ just created, owned by nothing else yet.
            let _ = unsafe { self.run(Op::DestroyCq, &DestroyCq::new(resp.cq_handle), &mut []) };
        };
        let mi = match sys::rxe_create_cq_resp::read_from_bytes(&uhw[..]) {
            Ok(r) if written == uhw.len() => r.mi,
            _ => {
                destroy();
                return Err(fail(Errno::PROTO));
            }
        };
        let mapped = usize::try_from(mi.size)
            .map_err(|_| Errno::INVAL)
            // SAFETY: the offset and size CREATE_CQ answered on this transport.
            .and_then(|len| unsafe { self.inner.transport.map_queue(mi.offset, len) });
        let mapping = match mapped {
            Ok(m) => m,
            Err(e) => {
                destroy();
                return Err(fail(e));
            }
        };
        // SAFETY: the mapping is the CQ ring, valid until `mapping` drops,
        // which the CqInner does after the Consumer; nothing else views it.
        let mem = unsafe { QueueMem::from_raw(mapping.as_ptr(), mapping.len(), WC_LEN) };
        let ring = match mem.map(Consumer::over) {
            Ok(r) => r,
            Err(_) => {
                destroy();
                return Err(fail(Errno::PROTO));
            }
        };
        Ok(CompletionQueue {
            inner: Arc::new(CqInner {
                ctx: self.clone(),
                handle: resp.cq_handle,
                cqe: resp.cqe,
                event_id,
                ring: Mutex::new(ring),
                _channel: channel.map(|c| c.inner.clone()),
                _mapping: mapping,
            }),
        })
    }
}

impl CompletionQueue {
    /// The kernel's handle.
    pub fn handle(&self) -> u32 {
        self.inner.handle
    }

    /// Entries the CQ really has (the kernel may round `cqe` up).
    pub fn cqe(&self) -> u32 {
        self.inner.cqe
    }

    /// What [`CompletionChannel::get_event`] returns for this CQ (the
    /// `user_handle` it was created with; unique within the process).
    pub fn event_id(&self) -> u64 {
        self.inner.event_id
    }

    /// The context the CQ belongs to.
    pub fn context(&self) -> &Context {
        &self.inner.ctx
    }

    /// Whether `other` is a handle of this same CQ.
    pub(crate) fn same_as(&self, other: &CompletionQueue) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    fn ring(&self) -> MutexGuard<'_, Consumer> {
        // A panic while holding the lock cannot leave the ring half-updated
        // (each index is published with one store): keep using it.
        self.inner
            .ring
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Copies up to `out.len()` completions, oldest first, into `out` and
    /// returns how many. No allocation, no system call. In a forked child
    /// (the CQ is the parent's) it reads nothing and returns
    /// [`Error::ForeignProcess`].
    #[doc(alias = "ibv_poll_cq")]
    pub fn poll(&self, out: &mut [WorkCompletion]) -> Result<usize, Error> {
        self.inner.ctx.check_process(Op::PollCq)?;
        Ok(wqe::poll(&mut self.ring(), out))
    }

    /// Arms the CQ (`REQ_NOTIFY_CQ`): its next completion, or with
    /// `solicited_only` its next solicited one, raises one event on its
    /// completion channel.
    #[doc(alias = "ibv_req_notify_cq")]
    pub fn req_notify(&self, solicited_only: bool) -> Result<(), Error> {
        let cmd = ReqNotifyCq::new(self.inner.handle, solicited_only);
        // SAFETY: REQ_NOTIFY_CQ hands no memory to the device.
        unsafe { self.inner.ctx.run(Op::ReqNotifyCq, &cmd, &mut []) }.map(|_| ())
    }
}
