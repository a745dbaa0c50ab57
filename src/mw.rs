//! Memory windows (`ibv_mw`): remote access to part of a memory region
//! under a key of their own, granted by a bind and taken back by an
//! invalidation, a rebind or the window's deallocation.
//!
//! Only rxe binds them here. siw's kernel has no memory windows (its
//! `ALLOC_MW` answers `EOPNOTSUPP`); on other drivers this crate has no
//! data path to bind them with, so [`ProtectionDomain::alloc_mw`] answers
//! [`Error::Unsupported`] there, nothing sent.
//!
//! A window bound to a region makes rxe refuse the region's `DEREG_MR`
//! (`EINVAL`). [`MemoryRegion::dereg`] reports that, handing the region
//! back; a [`MemoryRegion`] *dropped* then is handed to its PD
//! ([`WindowBook`]), which deregisters it once a window of the PD is
//! deallocated, or when the PD itself is released: nothing stays in the
//! kernel past the PD.

use std::fmt;
use std::ops::RangeBounds;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;

use crate::command::AllocMw;
use crate::context::Context;
use crate::error::{Error, Op};
use crate::flags::AccessFlags;
use crate::mr::MemoryRegion;
use crate::pd::{debug_object, PdInner, ProtectionDomain};
use crate::qp::QueuePair;
use crate::wr::{MwBind, Payload, SendOp, SendWr};

/// The type of a memory window (the kernel's `enum ib_mw_type`).
#[doc(alias = "ibv_mw_type")]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MwType {
    /// Type 1: bound with [`QueuePair::bind_mw`](crate::QueuePair::bind_mw)
    /// through any QP of its PD, usable through any QP of the PD; a new
    /// bind replaces the old one. Not invalidated by LOCAL_INV or
    /// SEND_WITH_INV.
    #[doc(alias = "IBV_MW_TYPE_1")]
    Type1 = 1,
    /// Type 2 (rxe's type 2B): bound by a BIND_MW work request
    /// ([`SendOp::BindMw`](crate::wr::SendOp::BindMw)) and then usable only
    /// through the QP that bound it; it must be invalidated
    /// ([`SendOp::LocalInv`](crate::wr::SendOp::LocalInv), or a peer's
    /// [`SendOp::SendWithInv`](crate::wr::SendOp::SendWithInv)) before it is
    /// bound again.
    #[doc(alias = "IBV_MW_TYPE_2")]
    Type2 = 2,
}

/// A memory window (`struct ibv_mw`): remote access to a range of a
/// [`MemoryRegion`] under the window's own rkey, once bound.
///
/// Allocated by [`ProtectionDomain::alloc_mw`], it keeps its PD alive (the
/// kernel refuses to deallocate a PD with windows: `EBUSY`). Dropping it
/// deallocates it, which also unbinds it.
///
/// **What a bind grants on rxe.** rxe's responder checks a window's key,
/// access and state, and then the addresses against the *region* the
/// window is bound to, not against the window's own range (Linux 6.12,
/// `check_rkey`: `mr_check_range` of the region): a peer holding a bound
/// window's key may reach any byte of that region with the window's
/// access. Bind windows to regions that hold only what the peer may see.
///
/// **A type-2 window goes with its QP.** rxe holds the QP a type-2 window
/// is bound through until the window is invalidated or deallocated, and
/// its `DESTROY_QP` would wait for that (50 s, then a kernel warning and a
/// failed destroy). So building a type-2 bind request for a QP
/// ([`bind_request`](Self::bind_request)) ties the window to that QP:
/// destroying or dropping the QP deallocates the window first (as IBA
/// invalidates a QP's type-2 windows with it), bound or not by then. The
/// window object stays, deallocated: its bind requests are refused.
#[doc(alias = "ibv_mw")]
pub struct MemoryWindow {
    pd: Arc<PdInner>,
    handle: u32,
    mw_type: MwType,
    /// The key as of the last bind request built.
    rkey: AtomicU32,
    /// False once deallocated (by [`dealloc`](Self::dealloc), or by the
    /// destroy of a QP it is tied to), so that nothing deallocates it
    /// again; shared with those QPs.
    live: Arc<AtomicBool>,
}

impl fmt::Debug for MemoryWindow {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        debug_object(f, "MemoryWindow", &self.pd.ctx, self.handle)
            .field("type", &self.mw_type)
            .field("rkey", &format_args!("{:#x}", self.rkey()))
            .field("pd", &self.pd.handle)
            .finish()
    }
}

/// The window access a bind may grant: the remote ones.
const WINDOW_ACCESS: AccessFlags = AccessFlags::REMOTE_READ
    .union(AccessFlags::REMOTE_WRITE)
    .union(AccessFlags::REMOTE_ATOMIC);

impl MemoryWindow {
    /// The kernel's handle for this window.
    pub fn handle(&self) -> u32 {
        self.handle
    }

    /// Type 1 or type 2.
    pub fn mw_type(&self) -> MwType {
        self.mw_type
    }

    /// The window's remote key: the kernel's at allocation, then the new
    /// key of the last bind request built for it
    /// ([`bind_request`](Self::bind_request), which
    /// [`QueuePair::bind_mw`](crate::QueuePair::bind_mw) uses). Peers use
    /// it, with the bound range's addresses, as the `rkey` of their RDMA
    /// operations once the bind has completed.
    pub fn rkey(&self) -> u32 {
        self.rkey.load(Ordering::Acquire)
    }

    /// The handle of the PD the window is in.
    pub fn pd_handle(&self) -> u32 {
        self.pd.handle
    }

    /// The context the window belongs to.
    pub fn context(&self) -> &Context {
        &self.pd.ctx
    }

    /// The BIND_MW request binding this window to the bytes `range` of `mr`
    /// (offsets from [`MemoryRegion::addr`]) with `access` (a subset of
    /// `REMOTE_READ`, `REMOTE_WRITE` and `REMOTE_ATOMIC`), to post on `qp`
    /// as [`SendOp::BindMw`](crate::wr::SendOp::BindMw) (a type-2 window's
    /// bind), or as [`QueuePair::bind_mw`](crate::QueuePair::bind_mw) does.
    /// A type-2 window is tied to `qp` from now on: `qp`'s destroy
    /// deallocates it (see [`MemoryWindow`]).
    ///
    /// Its new key is the window's key with the low 8 bits (the part the
    /// consumer chooses) advanced by one; the window's
    /// [`rkey`](Self::rkey) is that key from now on. Build one request per
    /// bind and post them in the order built: the device checks each
    /// against the key the previous one left.
    ///
    /// Refused here ([`Error::InvalidInput`], nothing changed), as the
    /// device would refuse the bind with `MW_BIND_ERR` and move the QP to
    /// ERR: a region of another PD, one registered without `MW_BIND`,
    /// `REMOTE_WRITE` or `REMOTE_ATOMIC` on a region without
    /// `LOCAL_WRITE`, a zero-based region; an empty range or one outside
    /// the region; access other than the remote flags; a QP of another PD;
    /// a window already deallocated.
    #[doc(alias = "ibv_bind_mw")]
    #[doc(alias = "ibv_inc_rkey")]
    pub fn bind_request(
        &self,
        qp: &QueuePair,
        mr: &MemoryRegion,
        range: impl RangeBounds<usize>,
        access: AccessFlags,
    ) -> Result<MwBind, Error> {
        let refuse = |reason| Err(Error::input(Op::BindMw, &self.pd.ctx.inner.device, reason));
        if !self.live.load(Ordering::Acquire) {
            return refuse("the window was deallocated (with a QP it was tied to, or by dealloc)");
        }
        if !self.is_in_pd(qp.pd_inner()) {
            return refuse("the window is in another protection domain than the queue pair");
        }
        if !mr.is_in_pd(&self.pd) {
            return refuse("the region is in another protection domain than the window");
        }
        let mr_access = mr.access();
        if !mr_access.contains(AccessFlags::MW_BIND) {
            return refuse("the region was registered without MW_BIND access");
        }
        if mr_access.contains(AccessFlags::ZERO_BASED) {
            return refuse("a window cannot be bound to a zero-based region");
        }
        if !WINDOW_ACCESS.contains(access) {
            return refuse("a window grants only REMOTE_READ, REMOTE_WRITE and REMOTE_ATOMIC");
        }
        let writes = AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_ATOMIC;
        if access.intersects(writes) && !mr_access.contains(AccessFlags::LOCAL_WRITE) {
            return refuse("a writable window needs a region with LOCAL_WRITE access");
        }
        let Ok(r) = mr.checked(range) else {
            return refuse("the range is not inside the region");
        };
        if r.is_empty() {
            return refuse("a window binds at least one byte");
        }
        if self.mw_type == MwType::Type2 {
            qp.tie_window(self.handle, &self.live);
        }
        let mw_rkey = self.rkey();
        let rkey = next_key(mw_rkey);
        self.rkey.store(rkey, Ordering::Release);
        Ok(MwBind {
            mw_rkey,
            rkey,
            mr_lkey: mr.lkey(),
            addr: (mr.addr() as usize + r.start) as u64,
            length: r.len() as u64,
            access: access.bits(),
        })
    }

    /// Takes back a bind request that was never posted: the window's key
    /// is the request's previous one again (if no later request was built).
    pub(crate) fn unbuild(&self, bind: &MwBind) {
        let _ = self.rkey.compare_exchange(
            bind.rkey,
            bind.mw_rkey,
            Ordering::AcqRel,
            Ordering::Acquire,
        );
    }

    /// True when the window is in the same PD as the QP whose PD is `pd`.
    pub(crate) fn is_in_pd(&self, pd: &Arc<PdInner>) -> bool {
        Arc::ptr_eq(&self.pd, pd)
    }

    /// Deallocates the window now and reports the kernel's answer (the
    /// window is gone either way: a refused `DEALLOC_MW` is not retried).
    #[doc(alias = "ibv_dealloc_mw")]
    pub fn dealloc(self) -> Result<(), Error> {
        match self.live.swap(false, Ordering::AcqRel) {
            true => self.pd.windows.dealloc(&self.pd.ctx, self.handle),
            // Deallocated already, with a QP it was tied to.
            false => Ok(()),
        }
    }
}

/// The key after `key`: the same index (high 24 bits), the consumer's low
/// 8 bits advanced by one, as `ibv_inc_rkey`.
fn next_key(key: u32) -> u32 {
    (key & !0xff) | (key.wrapping_add(1) & 0xff)
}

impl Drop for MemoryWindow {
    fn drop(&mut self) {
        // In a forked child the window is the parent's: send nothing.
        if self.pd.ctx.is_owned_by_this_process() && self.live.swap(false, Ordering::AcqRel) {
            let _ = self.pd.windows.dealloc(&self.pd.ctx, self.handle);
        }
    }
}

impl QueuePair {
    /// Binds the memory window `mw` to the bytes `range` of `mr` with
    /// `access` (`ibv_bind_mw`; rxe only): posts one signalled BIND_MW work
    /// request, [`MemoryWindow::bind_request`](crate::mr::MemoryWindow::bind_request)'s,
    /// and returns the window's new key ([`MemoryWindow::rkey`](crate::mr::MemoryWindow::rkey)
    /// from now on). The bind is done when its completion
    /// ([`WcOpcode::BindMw`](crate::wr::WcOpcode::BindMw), `wr_id`) is polled
    /// from the send CQ; peers may use the key from then on. A type-1
    /// window rebound drops its old range and key; a type-2 window (which
    /// may be bound this way too, then only usable through this QP) must
    /// be invalidated first. The window must be in this QP's PD; the other
    /// checks are `bind_request`'s. A post refused ([`Error::Post`]) leaves
    /// the window's key as it was.
    #[doc(alias = "ibv_bind_mw")]
    pub fn bind_mw(
        &self,
        mw: &MemoryWindow,
        mr: &MemoryRegion,
        range: impl RangeBounds<usize>,
        access: AccessFlags,
        wr_id: u64,
    ) -> Result<u32, Error> {
        post_bind(self, mw, (mr, range, access), wr_id)
    }
}

/// [`QueuePair::bind_mw`] of the QP `qp`: binds `mw` to `range` of `mr`
/// with `access`.
fn post_bind(
    qp: &QueuePair,
    mw: &MemoryWindow,
    (mr, range, access): (&MemoryRegion, impl RangeBounds<usize>, AccessFlags),
    wr_id: u64,
) -> Result<u32, Error> {
    let bind = mw.bind_request(qp, mr, range, access)?;
    let wr = SendWr::new(wr_id, SendOp::BindMw(bind), Payload::Sges(&[]));
    // SAFETY: a BIND_MW has no SGEs: the device touches no local memory
    // for it; what the window exposes is the region's, which the region's
    // registration already hands to the device.
    match unsafe { qp.post_send(&[wr]) } {
        Ok(()) => Ok(bind.rkey()),
        Err(e) => {
            // Refused: nothing was queued. (A doorbell error comes after
            // the WQE was published: the key stays the new one.)
            if matches!(e, Error::Post { .. }) {
                mw.unbuild(&bind);
            }
            Err(e)
        }
    }
}

impl ProtectionDomain {
    /// Allocates a memory window of type `mw_type` in this PD (rxe only).
    ///
    /// On siw the kernel answers [`Error::Os`] with `EOPNOTSUPP` (its
    /// driver has no memory windows); on a driver without a data path here
    /// (mlx5, …) it is [`Error::Unsupported`], nothing sent.
    #[doc(alias = "ibv_alloc_mw")]
    pub fn alloc_mw(&self, mw_type: MwType) -> Result<MemoryWindow, Error> {
        let pd = &self.inner;
        let ctx = &pd.ctx;
        if !ctx.inner.provider.sends_alloc_mw() {
            return Err(Error::Unsupported {
                op: Op::AllocMw,
                device: ctx.inner.device.clone(),
                reason: "memory windows are bound only on rxe here",
            });
        }
        let cmd = AllocMw::new(pd.handle, mw_type as u8);
        let resp = pd.windows.allocate(|| {
            // SAFETY: ALLOC_MW hands no memory to the device.
            unsafe { ctx.run(Op::AllocMw, &cmd, &mut []) }.map(|(resp, _)| resp)
        })?;
        Ok(MemoryWindow {
            pd: pd.clone(),
            handle: resp.mw_handle,
            mw_type,
            rkey: AtomicU32::new(resp.rkey),
            live: Arc::new(AtomicBool::new(true)),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::next_key;

    #[test]
    fn the_next_key_advances_only_the_low_byte() {
        assert_eq!(next_key(0x0000_1234), 0x0000_1235);
        assert_eq!(next_key(0x0012_34ff), 0x0012_3400);
        assert_eq!(next_key(0xffff_ffff), 0xffff_ff00);
    }
}
