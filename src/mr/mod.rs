//! Memory regions: registration, deregistration, and what an MR is; the
//! access flags ([`AccessFlags`]), re-registration ([`Rereg`],
//! [`ReregError`]), registered memory the region owns ([`BufferMr`],
//! [`RemoteBufferMr`], [`PageBuffer`]) and memory windows
//! ([`MemoryWindow`]).
//!
//! Re-registration lives in `rereg` (the change set and the in-place
//! command) and `replace` (the fallback that registers anew); regions over
//! a DMA-BUF in `dmabuf`.

mod attr;
mod dmabuf;
mod replace;
mod rereg;

use std::fmt;
use std::ops::{Bound, Range, RangeBounds};
use std::sync::Arc;

use crate::command::{DeregMr, RegMr};
use crate::context::Context;
use crate::error::{Errno, Error, Op};
use crate::method::{native_refused, MrKeys, QueryMr, RegMr as RegMrMethod};
use crate::pd::{PdInner, ProtectionDomain};
use crate::wr::{Remote, Sge};

pub use attr::MrAttr;
pub use dmabuf::{DmaBuf, RegDmabufError};
pub use rereg::{Rereg, ReregFallback, ReregPath};

pub use crate::buffer::{
    BufferDeregError, BufferMr, RegBufferError, RetargetBuffers, RetargetError, Retargeted,
    StableBuffer,
};
pub use crate::error::{ManPageGuarantee, MrState, ReregError, ReregOutcome};
pub use crate::flags::{AccessFlags, ReregFlags};
pub use crate::mw::{MemoryWindow, MwType};
pub use crate::page_buffer::PageBuffer;
pub use crate::remote_buffer::{OutsideBuffer, RemoteBufferMr, RemoteDeregError};

/// A registered memory region (`struct ibv_mr`).
///
/// Dropping it deregisters it. It keeps its protection domain (and so its
/// context) alive. Its translation, PD and access can be changed in place
/// with [`apply`](Self::apply) (a [`Rereg`] change set), the exact
/// `ibv_rereg_mr` mirror [`rereg`](Self::rereg), and the forms built on
/// them; the kernel handle
/// stays the same, the keys are whatever the kernel answers.
///
/// While a [`MemoryWindow`] is bound to it, rxe
/// refuses its `DEREG_MR` (`EINVAL`): [`dereg`](Self::dereg) hands it back
/// with that error, and a drop hands the registration to its PD, which
/// deregisters it after a window of the PD is deallocated or when the PD
/// is released (the memory stays registered, and reachable through the
/// window, until then).
#[doc(alias = "ibv_mr")]
pub struct MemoryRegion {
    ctx: Context,
    pd: Arc<PdInner>,
    handle: u32,
    lkey: u32,
    rkey: u32,
    addr: usize,
    length: usize,
    access: AccessFlags,
    /// Whether `[addr, addr + length)` is counted in the fork tracker
    /// (decided at registration: not for `ON_DEMAND`, like libibverbs).
    fork_marked: bool,
    /// False once deregistered, so that Drop does nothing.
    live: bool,
    /// The DMA-BUF of a region registered over one
    /// ([`ProtectionDomain::reg_dmabuf_mr`]): closed when the region is
    /// dropped, after Drop's `DEREG_MR` (fields drop after `drop` runs).
    /// (Four bytes: a descriptor's niche; an MR stays small, its errors
    /// carry it.)
    dmabuf: Option<DmaBuf>,
}

impl fmt::Debug for MemoryRegion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryRegion")
            .field("device", &self.ctx.device_name())
            .field("handle", &self.handle)
            .field("lkey", &format_args!("{:#x}", self.lkey))
            .field("rkey", &format_args!("{:#x}", self.rkey))
            .field("addr", &format_args!("{:#x}", self.addr))
            .field("length", &self.length)
            .field("pd", &self.pd.handle)
            .field("access", &self.access)
            .field("dmabuf", &self.dmabuf)
            .finish()
    }
}

/// A failed [`MemoryRegion::dereg`]: the region is handed back, still registered.
#[derive(Debug, thiserror::Error)]
#[error("{error}")]
#[non_exhaustive]
pub struct DeregError {
    /// The region, still registered; dropping it tries again.
    pub mr: MemoryRegion,
    /// Why the kernel refused.
    pub error: Error,
}

crate::error::hands_back_with_error! {
    [] DeregError, "the region (which tries the deregistration again)";
}

/// A range that does not lie inside the memory; the memory is handed back
/// (`()` from [`MemoryRegion::sge`](crate::MemoryRegion::sge) and
/// [`MemoryRegion::remote`](crate::MemoryRegion::remote), which take none).
#[derive(thiserror::Error)]
#[error("range {start}..{end} is outside the {len} registered bytes")]
#[non_exhaustive]
pub struct OutOfRange<M> {
    /// The memory, untouched.
    pub mem: M,
    /// Start of the range asked for.
    pub start: usize,
    /// End of the range asked for.
    pub end: usize,
    /// Bytes the memory has.
    pub len: usize,
}

impl<M> fmt::Debug for OutOfRange<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OutOfRange")
            .field("start", &self.start)
            .field("end", &self.end)
            .field("len", &self.len)
            .finish_non_exhaustive()
    }
}

impl MemoryRegion {
    /// REG_MR with fork marking at libibverbs' points.
    ///
    /// # Safety
    ///
    /// As for [`ProtectionDomain::reg_mr`].
    pub(crate) unsafe fn register(
        pd: &Arc<PdInner>,
        addr: *mut u8,
        length: usize,
        access: AccessFlags,
    ) -> Result<MemoryRegion, RegFailure> {
        let ctx = &pd.ctx;
        let device = &ctx.inner.device;
        // Before the fork tracker is touched: a forked child leaves it alone.
        ctx.check_process(Op::RegMr).map_err(RegFailure::Input)?;
        let start = addr as usize;
        if start.checked_add(length).is_none() {
            let error = Error::input(
                Op::RegMr,
                device,
                "the range wraps around the address space",
            );
            return Err(RegFailure::Input(error));
        }
        let fork = &ctx.inner.fork;
        let fork_marked = !access.contains(AccessFlags::ON_DEMAND);
        if fork_marked {
            if let Err(errno) = fork.dontfork_range(start, length) {
                crate::trace::error(Op::RegMr, device, errno);
                return Err(RegFailure::DontFork(Error::ForkSafety {
                    op: Op::RegMr,
                    device: device.clone(),
                    errno,
                }));
            }
        }
        // SAFETY: the caller keeps the range mapped while it is registered.
        match unsafe { reg_mr_keys(ctx, pd.handle, start as u64, length as u64, access) } {
            Ok(keys) => Ok(MemoryRegion {
                ctx: ctx.clone(),
                pd: pd.clone(),
                handle: keys.handle,
                lkey: keys.lkey,
                rkey: keys.rkey,
                addr: start,
                length,
                access,
                fork_marked,
                live: true,
                dmabuf: None,
            }),
            Err(error) => {
                if fork_marked {
                    // Undo the marking; the command's error is what matters.
                    let _ = fork.dofork_range(start, length);
                }
                Err(RegFailure::Cmd(error))
            }
        }
    }

    /// The region `REG_DMABUF_MR` answered: at `iova` (its `addr`), nothing
    /// marked for fork, owning the buffer.
    pub(crate) fn over_dmabuf(
        pd: &Arc<PdInner>,
        keys: crate::method::DmabufMrKeys,
        buf: DmaBuf,
        iova: u64,
        length: usize,
        access: AccessFlags,
    ) -> MemoryRegion {
        MemoryRegion {
            ctx: pd.ctx.clone(),
            pd: pd.clone(),
            handle: keys.handle,
            lkey: keys.lkey,
            rkey: keys.rkey,
            addr: iova as usize,
            length,
            access,
            fork_marked: false,
            live: true,
            dmabuf: Some(buf),
        }
    }

    /// The DMA-BUF this region is registered over, if it is one
    /// ([`ProtectionDomain::reg_dmabuf_mr`]); it stays open as long as the
    /// region.
    pub fn dmabuf(&self) -> Option<&DmaBuf> {
        self.dmabuf.as_ref()
    }

    /// The local key, for work requests of this process.
    pub fn lkey(&self) -> u32 {
        self.lkey
    }

    /// The remote key, for peers' RDMA operations.
    pub fn rkey(&self) -> u32 {
        self.rkey
    }

    /// The address of the first registered byte, as work requests and
    /// peers name it (the same type as [`Sge::addr`] and
    /// [`Remote::addr`]). For a region over a DMA-BUF this is its `iova`,
    /// an address in the device's view rather than a pointer of this
    /// process.
    pub fn addr(&self) -> u64 {
        self.addr as u64
    }

    /// The registered length in bytes.
    pub fn length(&self) -> usize {
        self.length
    }

    /// The bytes `range` of the region (offsets from [`addr`](Self::addr))
    /// as an SGE for the raw [`post_send`](crate::QueuePair::post_send) and
    /// [`post_recv`](crate::QueuePair::post_recv): the address, the length
    /// and this region's [`lkey`](Self::lkey). A range past the end, a
    /// reversed one, or one longer than an SGE's 32-bit length is
    /// [`OutOfRange`] (its `len` the registered length).
    ///
    /// ```no_run
    /// # fn f(mr: &uverbs::MemoryRegion) -> Result<(), uverbs::post::OutOfRange<()>> {
    /// let header = mr.sge(0..64)?;
    /// let body = mr.sge(64..)?;
    /// assert!(mr.sge(..mr.length() + 1).is_err());
    /// # Ok(()) }
    /// ```
    pub fn sge(&self, range: impl RangeBounds<usize>) -> Result<Sge, OutOfRange<()>> {
        let r = self.checked(range)?;
        let length = u32::try_from(r.len()).map_err(|_| self.out_of_range(&r))?;
        Ok(Sge {
            addr: (self.addr + r.start) as u64,
            length,
            lkey: self.lkey,
        })
    }

    /// The bytes `range` of the region as the remote side of an RDMA
    /// WRITE, READ or atomic for a peer (or for this process's own raw
    /// posts): the address of its first byte and this region's
    /// [`rkey`](Self::rkey). A range past the end or a reversed one is
    /// [`OutOfRange`]. The peer learns the range's length some other way:
    /// [`Remote`] carries none.
    pub fn remote(&self, range: impl RangeBounds<usize>) -> Result<Remote, OutOfRange<()>> {
        let r = self.checked(range)?;
        Ok(Remote {
            addr: (self.addr + r.start) as u64,
            rkey: self.rkey,
        })
    }

    /// The whole region as a peer needs to know it to READ or WRITE it:
    /// address, rkey and length, with a byte form for a connection's
    /// private data ([`RemoteRegion::to_bytes`](crate::wr::RemoteRegion::to_bytes)).
    pub fn region(&self) -> crate::wr::RemoteRegion {
        crate::wr::RemoteRegion {
            addr: self.addr as u64,
            rkey: self.rkey,
            len: self.length as u64,
        }
    }

    /// `range` as offsets inside the region, or why not.
    pub(crate) fn checked(
        &self,
        range: impl RangeBounds<usize>,
    ) -> Result<Range<usize>, OutOfRange<()>> {
        let start = match range.start_bound() {
            Bound::Included(&s) => s,
            Bound::Excluded(&s) => s.saturating_add(1),
            Bound::Unbounded => 0,
        };
        let end = match range.end_bound() {
            Bound::Included(&e) => e.saturating_add(1),
            Bound::Excluded(&e) => e,
            Bound::Unbounded => self.length,
        };
        let r = start..end;
        if start > end || end > self.length {
            return Err(self.out_of_range(&r));
        }
        Ok(r)
    }

    fn out_of_range(&self, r: &Range<usize>) -> OutOfRange<()> {
        OutOfRange {
            mem: (),
            start: r.start,
            end: r.end,
            len: self.length,
        }
    }

    /// The access flags as last set (at registration or by a successful
    /// re-registration with [`ReregFlags::ACCESS`](crate::mr::ReregFlags::ACCESS); libibverbs does not track
    /// the latter).
    pub fn access(&self) -> AccessFlags {
        self.access
    }

    /// The kernel's handle for this MR; re-registration never changes it.
    pub fn handle(&self) -> u32 {
        self.handle
    }

    /// The handle of the PD the MR is in.
    pub fn pd_handle(&self) -> u32 {
        self.pd.handle
    }

    /// True when the MR is in `pd`.
    pub fn is_in(&self, pd: &ProtectionDomain) -> bool {
        self.is_in_pd(&pd.inner)
    }

    /// True when the MR is in the PD `pd`.
    pub(crate) fn is_in_pd(&self, pd: &Arc<PdInner>) -> bool {
        Arc::ptr_eq(&self.pd, pd)
    }

    /// The context the MR belongs to.
    pub fn context(&self) -> &Context {
        &self.ctx
    }

    /// Deregisters now and reports the kernel's answer; on failure the MR is
    /// handed back, still registered (dropping it tries again).
    ///
    /// On siw this is no fence for the peers' RDMA READs: a READ response
    /// already started keeps sending from the memory after `DEREG_MR`
    /// returned (TCP may even resend it until acknowledged), so bytes
    /// written there later can still reach the peer. Reuse memory peers
    /// could read only once they said their READs completed. rxe and
    /// hardware stop at deregistration. [`BufferMr`]
    /// enforces this ([`BufferMr::assume_peer_reads_done`](crate::BufferMr::assume_peer_reads_done)).
    #[doc(alias = "ibv_dereg_mr")]
    #[doc(alias = "rdma_dereg_mr")]
    pub fn dereg(mut self) -> Result<(), DeregError> {
        match self.dereg_in_place() {
            Ok(()) => Ok(()),
            Err(error) => Err(DeregError { mr: self, error }),
        }
    }

    fn dereg_in_place(&mut self) -> Result<(), Error> {
        self.dereg_command()?;
        // The registration is gone either way; a failure to un-mark only
        // means a forked child will not inherit these pages.
        let _ = self.unmark(self.addr, self.length);
        Ok(())
    }

    /// DEREG_MR of our own handle, once: `live` is cleared on success.
    fn dereg_command(&mut self) -> Result<(), Error> {
        // SAFETY: DEREG_MR of a handle this object owns; sent once.
        unsafe {
            self.ctx
                .run(Op::DeregMr, &DeregMr::new(self.handle), &mut [])
        }?;
        self.live = false;
        Ok(())
    }

    /// Gives up on a registration the kernel refused to release: it stays
    /// registered until the context is closed, counted by
    /// [`Context::abandoned_registrations`]. Its pages stay marked for fork.
    fn abandon(&mut self) {
        self.live = false;
        self.ctx.note_abandoned_registration();
    }

    /// Un-marks a range this MR had marked (no-op when it marks nothing).
    fn unmark(&self, start: usize, length: usize) -> Result<(), Errno> {
        if self.fork_marked {
            self.ctx.inner.fork.dofork_range(start, length)?;
        }
        Ok(())
    }

    fn rereg_error(&self, outcome: ReregOutcome, errno: Errno) -> ReregError {
        ReregError::new(outcome, errno, self.ctx.inner.device.clone())
    }

    pub(crate) fn input_error(&self, reason: &'static str) -> ReregError {
        ReregError {
            reason: Some(reason),
            ..self.rereg_error(ReregOutcome::Input, Errno::INVAL)
        }
    }
}

/// Sends one registration of `[start, start + length)` at the same device
/// address, as the context sends it: the native `UVERBS_METHOD_REG_MR`
/// first where [`Context::reg_mr_method_driver`] says so, and the write
/// command `REG_MR` (with the driver's private data) otherwise, or after
/// the kernel refused the method as unknown (`EPROTONOSUPPORT`, `ENOTTY`,
/// as rdma-core's `execute_ioctl_fallback` decides; the refusal is
/// remembered). Any other answer to the method is the registration's
/// answer, not retried. Both answer the handle and keys the same, and
/// their errors become the same [`Error::Os`] of [`Op::RegMr`].
///
/// # Safety
///
/// As for [`ProtectionDomain::reg_mr`]: the range stays mapped while it is
/// registered.
unsafe fn reg_mr_keys(
    ctx: &Context,
    pd_handle: u32,
    start: u64,
    length: u64,
    access: AccessFlags,
) -> Result<MrKeys, Error> {
    if let Some(driver) = ctx.reg_mr_method_driver() {
        let method = RegMrMethod::new(pd_handle, start, length, start, access.bits());
        // SAFETY: the caller's promise (the range stays mapped).
        match unsafe { method.run(ctx.inner.transport.as_ref(), driver) } {
            Ok(keys) => return Ok(keys),
            // Unknown to the kernel: it created nothing; the write command
            // from now on.
            Err(errno) if native_refused(errno) => ctx.remember_reg_mr_method_absent(),
            Err(errno) => return Err(Error::os(Op::RegMr, &ctx.inner.device, errno)),
        }
    }
    let (uhw_in, uhw_out_len) = ctx.inner.provider.reg_mr_uhw();
    let mut uhw_out = [0u8; 8];
    let cmd = RegMr::new(pd_handle, start, length, access.bits()).uhw_in(uhw_in);
    // SAFETY: the caller's promise (the range stays mapped).
    let (resp, _) = unsafe { ctx.run(Op::RegMr, &cmd, &mut uhw_out[..uhw_out_len]) }?;
    Ok(MrKeys {
        handle: resp.mr_handle,
        lkey: resp.lkey,
        rkey: resp.rkey,
    })
}

/// Why [`MemoryRegion::register`] failed, so that re-registration can map
/// each cause to its `ibv_rereg_mr` outcome.
pub(crate) enum RegFailure {
    /// Refused before anything was done.
    Input(Error),
    /// Marking the range `MADV_DONTFORK` failed; nothing was sent.
    DontFork(Error),
    /// The kernel refused REG_MR (the marking was undone).
    Cmd(Error),
}

impl MemoryRegion {
    /// The kernel's lkey, rkey, length and iova of this MR
    /// (`UVERBS_METHOD_QUERY_MR`): a check that what the MR records is what
    /// the kernel holds, e.g. after a re-registration.
    ///
    /// There is no write() command for it (`IB_USER_VERBS_CMD_QUERY_MR` was
    /// never implemented): the method is sent over ioctl on either
    /// transport, as long as the driver id is known (else `EOPNOTSUPP`),
    /// like [`Context::kernel_handle_count`].
    ///
    /// ```no_run
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let ctx = uverbs::devices()?.into_iter().next().ok_or("no device")?.open()?;
    /// # let pd = ctx.alloc_pd()?;
    /// let mut buf = vec![0u8; 4096];
    /// // SAFETY: `buf` outlives the MR.
    /// let mr = unsafe { pd.reg_mr(buf.as_mut_ptr(), buf.len(), uverbs::AccessFlags::LOCAL_WRITE)? };
    /// let attr = mr.query()?;
    /// assert_eq!((attr.lkey, attr.iova), (mr.lkey(), buf.as_ptr() as u64));
    /// # drop(mr); Ok(()) }
    /// ```
    #[doc(alias = "ibv_query_mr")]
    pub fn query(&self) -> Result<MrAttr, Error> {
        let ctx = self.context();
        let driver = ctx.method_driver(Op::QueryMr)?;
        QueryMr::new(self.handle())
            .run(ctx.inner.transport.as_ref(), driver)
            .map_err(|e| Error::os(Op::QueryMr, &ctx.inner.device, e))
    }
}

impl From<RegFailure> for Error {
    fn from(f: RegFailure) -> Error {
        match f {
            RegFailure::Input(e) | RegFailure::DontFork(e) | RegFailure::Cmd(e) => e,
        }
    }
}

impl Drop for MemoryRegion {
    fn drop(&mut self) {
        // In a forked child the registration is the parent's: leave it (and
        // the fork tracker, whose lock a parent thread may have held).
        if !self.live || !self.ctx.is_owned_by_this_process() {
            return;
        }
        if self.dereg_in_place().is_err() {
            // rxe refuses while a memory window is bound to the region
            // (EINVAL): the PD deregisters it once its windows allow.
            let region = crate::pd::ParkedRegion {
                handle: self.handle,
                addr: self.addr,
                length: self.length,
                fork_marked: self.fork_marked,
            };
            if self.pd.windows.park(&self.ctx, region) {
                self.live = false;
            } else {
                self.abandon();
            }
        }
    }
}

impl ProtectionDomain {
    /// Registers `length` bytes at `addr` with the given access.
    ///
    /// With fork safety enabled the range is marked `MADV_DONTFORK` before
    /// the command and un-marked again if it fails (not for `ON_DEMAND`).
    ///
    /// **What is sent.** Over the ioctl transport
    /// ([`TransportKind::Ioctl`](crate::transport::TransportKind::Ioctl)), for rxe,
    /// siw and mlx5, the first registration of a context tries the native
    /// `UVERBS_METHOD_REG_MR` (Linux 6.17; no driver data, device address =
    /// `addr`). A kernel without it answers `EPROTONOSUPPORT` (`ENOTTY`
    /// without the ioctl framework): the context remembers that
    /// ([`Context::reg_mr_method_refused`](crate::Context::reg_mr_method_refused))
    /// and sends this and every later registration as the write command
    /// `REG_MR` (with the driver's data: siw's `siw_ureq_reg_mr`), as
    /// libibverbs' fallback does. Any other answer to the method is the
    /// registration's, as the write command's would be (an [`Error::Os`] of
    /// `reg_mr`), and is not retried. The legacy write() transport, Auto's
    /// write+methods (the default: `write()` is cheaper), and drivers this
    /// crate has no provider for send the write command only. Both answer
    /// the same handle and keys; [`BufferMr`],
    /// [`RemoteBufferMr`](crate::mr::RemoteBufferMr) and the replace fallback of
    /// re-registration register the same way. One difference stays: the
    /// 6.17 method's handler, unlike the write command's, does not record
    /// the length and device address in the kernel's MR, so
    /// [`MemoryRegion::query`] then answers whatever the driver recorded.
    ///
    /// **Kernels differ on memory the process cannot read.** A `PROT_NONE`
    /// range registered without write access (no `LOCAL_WRITE`,
    /// `REMOTE_WRITE`, `REMOTE_ATOMIC` or `MW_BIND`) is *registered* by
    /// Linux 6.1 (rxe and siw pin read-only registrations with
    /// `FOLL_FORCE`, which reaches pages the process's own loads would fault
    /// on, so a peer's RDMA READ returns them) and refused with `EFAULT` by
    /// 6.12, which dropped `FOLL_FORCE` in 6.2; with write access both
    /// answer `EFAULT`. Register only memory the program may read.
    ///
    /// # Safety
    ///
    /// The range must stay mapped, and must not be reused for anything the
    /// device must not touch, until the kernel no longer references it: the
    /// device reads (and with write access, writes) it behind the compiler's
    /// back. That is when [`MemoryRegion::dereg`] returns `Ok`, when a
    /// re-registration moved the region elsewhere, or when the region is
    /// dropped and the kernel accepts the `DEREG_MR` that drop sends. If it
    /// refuses (rare: e.g. `EIO` once the device is gone), the registration
    /// is abandoned and lasts until the context is closed (every clone of
    /// the [`Context`](crate::Context) and every PD and MR made from it
    /// dropped); [`Context::abandoned_registrations`](crate::Context::abandoned_registrations)
    /// counts such cases. To free memory right after deregistering, use
    /// `dereg()` and handle its error; or use [`reg_buffer`](Self::reg_buffer),
    /// which leaks the buffer rather than free it under the device.
    ///
    /// In a child forked from the process that opened the context, the
    /// region is the parent's: dropping the child's copy sends nothing, and
    /// the child's copy of the memory is not registered.
    #[doc(alias = "ibv_reg_mr")]
    #[doc(alias = "rdma_reg_msgs")]
    #[doc(alias = "rdma_reg_read")]
    #[doc(alias = "rdma_reg_write")]
    pub unsafe fn reg_mr(
        &self,
        addr: *mut u8,
        length: usize,
        access: AccessFlags,
    ) -> Result<MemoryRegion, Error> {
        // SAFETY: forwarded to the caller.
        unsafe { MemoryRegion::register(&self.inner, addr, length, access) }.map_err(Error::from)
    }
}
