//! Memory regions, and re-registration in place (`ibv_rereg_mr`).

use std::fmt;
use std::sync::Arc;

use crate::command::{DeregMr, RegMr, ReregMr};
use crate::context::Context;
use crate::error::{Errno, Error, MrState, Op, ReregError, ReregOutcome};
use crate::flags::{AccessFlags, ReregFlags};
use crate::pd::{PdInner, ProtectionDomain};

/// A registered memory region (`struct ibv_mr`).
///
/// Dropping it deregisters it. It keeps its protection domain (and so its
/// context) alive. Its translation, PD and access can be changed in place
/// with [`rereg`](Self::rereg) and the forms built on it; the kernel handle
/// stays the same, the keys are whatever the kernel answers.
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
            .finish()
    }
}

/// A failed [`MemoryRegion::dereg`]: the region is handed back, still registered.
#[derive(Debug, thiserror::Error)]
#[error("{error}")]
pub struct DeregError {
    /// The region, still registered; dropping it tries again.
    pub mr: MemoryRegion,
    /// Why the kernel refused.
    pub error: Error,
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
            if let Err(e) = fork.dontfork_range(start, length) {
                let errno = io_errno(&e);
                return Err(RegFailure::DontFork(Error::ForkSafety {
                    op: Op::RegMr,
                    device: device.clone(),
                    errno,
                }));
            }
        }
        let (uhw_in, uhw_out_len) = ctx.inner.provider.reg_mr_uhw();
        let mut uhw_out = [0u8; 8];
        let cmd = RegMr::new(pd.handle, start as u64, length as u64, access.bits()).uhw_in(uhw_in);
        // SAFETY: the caller keeps the range mapped while it is registered.
        match unsafe { ctx.run(Op::RegMr, &cmd, &mut uhw_out[..uhw_out_len]) } {
            Ok((resp, _)) => Ok(MemoryRegion {
                ctx: ctx.clone(),
                pd: pd.clone(),
                handle: resp.mr_handle,
                lkey: resp.lkey,
                rkey: resp.rkey,
                addr: start,
                length,
                access,
                fork_marked,
                live: true,
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

    /// The local key, for work requests of this process.
    pub fn lkey(&self) -> u32 {
        self.lkey
    }

    /// The remote key, for peers' RDMA operations.
    pub fn rkey(&self) -> u32 {
        self.rkey
    }

    /// The first registered byte.
    pub fn addr(&self) -> *mut u8 {
        self.addr as *mut u8
    }

    /// The registered length in bytes.
    pub fn length(&self) -> usize {
        self.length
    }

    /// The access flags as last set (at registration or by a successful
    /// re-registration with [`ReregFlags::ACCESS`]; libibverbs does not track
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
        Arc::ptr_eq(&self.pd, &pd.inner)
    }

    /// The context the MR belongs to.
    pub fn context(&self) -> &Context {
        &self.ctx
    }

    /// Re-registers the MR in place: changes its translation (`addr`,
    /// `length`), PD and/or access, as `flags` says, with one `REREG_MR`
    /// command. Strict, like libibverbs: a device that refuses gives
    /// [`ReregOutcome::Cmd`]; [`rereg_with`](Self::rereg_with) can fall back
    /// to replacing the registration instead.
    ///
    /// This is `ibv_rereg_mr(mr, flags, pd, addr, length, access)`, with
    /// libibverbs' input checks in its order, each failing with
    /// [`ReregOutcome::Input`] before any system call:
    /// 1. `flags` has bits outside [`ReregFlags::all`];
    /// 2. [`TRANSLATION`](ReregFlags::TRANSLATION) with `length == 0` or a
    ///    null `addr`;
    /// 3. non-empty `access` without [`ACCESS`](ReregFlags::ACCESS).
    ///
    /// Then checks libibverbs cannot make, also as `Input`:
    /// [`PD`](ReregFlags::PD) without a `pd`, a `pd` of another context
    /// (its handle would name some other PD in this context), and a range
    /// that wraps around. `flags` empty goes to the kernel, which answers
    /// `EINVAL` ([`ReregOutcome::Cmd`]), as through libibverbs.
    ///
    /// The command carries `addr`, `length`, `hca_va = addr`, the PD's
    /// handle only with `PD` (else 0) and `access`. On success the keys come
    /// from the kernel's answer and the new attributes are recorded; the
    /// handle is unchanged. With fork safety enabled, the new range is
    /// marked before the command ([`ReregOutcome::DontForkNew`] if that
    /// fails), the old one un-marked after success
    /// ([`ReregOutcome::DoForkOld`]: the MR is valid with its new
    /// attributes), and the new one un-marked after a failed command
    /// ([`ReregOutcome::CmdAndDoForkNew`]). After [`ReregOutcome::Cmd`] the
    /// recorded attributes are the old ones, but the man page calls the MR
    /// undefined: drop it.
    ///
    /// # Safety
    ///
    /// With `TRANSLATION`, the new range must stay mapped while registered,
    /// as for [`ProtectionDomain::reg_mr`]. Without it nothing is required.
    #[doc(alias = "ibv_rereg_mr")]
    pub unsafe fn rereg(
        &mut self,
        flags: ReregFlags,
        pd: Option<&ProtectionDomain>,
        addr: *mut u8,
        length: usize,
        access: AccessFlags,
    ) -> Result<(), ReregError> {
        // SAFETY: forwarded to the caller.
        unsafe { self.rereg_with(ReregFallback::Strict, flags, pd, addr, length, access) }.map(drop)
    }

    /// [`rereg`](Self::rereg) with a choice of what to do when the device
    /// cannot re-register in place; returns the path taken, so that new keys
    /// can be published.
    ///
    /// With [`ReregFallback::Replace`], when the kernel answers `EOPNOTSUPP`
    /// (siw always, rxe for `TRANSLATION`), the new (range, PD, access) is
    /// registered first and the old registration deregistered after, inside
    /// this same object: a new handle and new keys. If the new registration
    /// fails, the old MR is untouched and valid ([`MrState::Old`], outcome
    /// `Cmd` with the REG_MR errno, or `DontForkNew`). A refusal is
    /// remembered per context and flag combination
    /// ([`Context::rereg_known_unsupported`]), so later calls skip the doomed
    /// command. `flags == 0` is never replaced.
    ///
    /// # Safety
    ///
    /// As for [`rereg`](Self::rereg).
    pub unsafe fn rereg_with(
        &mut self,
        fallback: ReregFallback,
        flags: ReregFlags,
        pd: Option<&ProtectionDomain>,
        addr: *mut u8,
        length: usize,
        access: AccessFlags,
    ) -> Result<ReregPath, ReregError> {
        let new_pd = self.check_rereg_input(flags, pd, addr, length, access)?;
        if !self.ctx.is_owned_by_this_process() {
            return Err(ReregError {
                reason: Some("the MR belongs to the process that created it, not to this forked child; nothing was sent"),
                ..self.rereg_error(ReregOutcome::Input, Errno::ACCESS)
            });
        }
        let may_replace = fallback == ReregFallback::Replace && !flags.is_empty();
        if may_replace && self.ctx.rereg_known_unsupported(flags) {
            // SAFETY: forwarded to the caller.
            return unsafe { self.replace(flags, new_pd, addr, length, access) };
        }
        // SAFETY: forwarded to the caller.
        let err = match unsafe { self.rereg_in_place(flags, new_pd, addr, length, access) } {
            Ok(()) => return Ok(ReregPath::InPlace),
            Err(e) if e.outcome == ReregOutcome::Cmd && e.mr_state == MrState::Old => e,
            Err(e) => return Err(e),
        };
        if is_capability_refusal(flags, access, err.errno) {
            self.ctx.remember_rereg_unsupported(flags);
        }
        // The kernel refused without changing anything. A refusal of the
        // operation (EOPNOTSUPP) or of making read-only pinned pages
        // writable (EACCES) is what a fresh registration can do instead.
        let replaceable = err.errno == Errno::OPNOTSUPP || err.errno == Errno::ACCESS;
        if may_replace && replaceable {
            // SAFETY: forwarded to the caller.
            unsafe { self.replace(flags, new_pd, addr, length, access) }
        } else {
            Err(err)
        }
    }

    /// libibverbs' input checks in its order, then ours; returns the new PD.
    fn check_rereg_input<'p>(
        &self,
        flags: ReregFlags,
        pd: Option<&'p ProtectionDomain>,
        addr: *mut u8,
        length: usize,
        access: AccessFlags,
    ) -> Result<Option<&'p ProtectionDomain>, ReregError> {
        let translation = flags.contains(ReregFlags::TRANSLATION);
        if !ReregFlags::all().contains(flags) {
            return Err(self.input_error("unknown flag bits"));
        }
        if translation && (length == 0 || addr.is_null()) {
            return Err(self.input_error("CHANGE_TRANSLATION with a zero length or a null address"));
        }
        if !access.is_empty() && !flags.contains(ReregFlags::ACCESS) {
            return Err(self.input_error("access flags given without CHANGE_ACCESS"));
        }
        let new_pd = if flags.contains(ReregFlags::PD) {
            match pd {
                None => return Err(self.input_error("CHANGE_PD without a protection domain")),
                Some(pd) if !pd.context().same_as(&self.ctx) => {
                    return Err(
                        self.input_error("the protection domain belongs to another context")
                    );
                }
                Some(pd) => Some(pd),
            }
        } else {
            None
        };
        if translation && (addr as usize).checked_add(length).is_none() {
            return Err(self.input_error("the new range wraps around the address space"));
        }
        Ok(new_pd)
    }

    /// The REREG_MR command with fork marking at libibverbs' points.
    ///
    /// # Safety
    ///
    /// As for [`rereg`](Self::rereg).
    unsafe fn rereg_in_place(
        &mut self,
        flags: ReregFlags,
        new_pd: Option<&ProtectionDomain>,
        addr: *mut u8,
        length: usize,
        access: AccessFlags,
    ) -> Result<(), ReregError> {
        let translation = flags.contains(ReregFlags::TRANSLATION);
        let new_start = addr as usize;
        let mark_new = translation && self.fork_marked;
        if mark_new {
            if let Err(e) = self.ctx.inner.fork.dontfork_range(new_start, length) {
                return Err(self.rereg_error(ReregOutcome::DontForkNew, io_errno(&e)));
            }
        }

        let mut cmd = ReregMr::new(self.handle, flags.bits())
            .translation(new_start as u64, length as u64)
            .access_flags(access.bits());
        if let Some(pd) = new_pd {
            cmd = cmd.pd_handle(pd.handle());
        }
        // SAFETY: with TRANSLATION the caller keeps the new range mapped;
        // the command otherwise hands no new memory to the device.
        match unsafe { self.ctx.run(Op::ReregMr, &cmd, &mut []) } {
            Ok((resp, _)) => {
                self.lkey = resp.lkey;
                self.rkey = resp.rkey;
                if let Some(pd) = new_pd {
                    self.pd = pd.inner.clone();
                }
                if flags.contains(ReregFlags::ACCESS) {
                    self.access = access;
                }
                if translation {
                    let (old_start, old_length) = (self.addr, self.length);
                    self.addr = new_start;
                    self.length = length;
                    if let Err(errno) = self.unmark(old_start, old_length) {
                        return Err(self.rereg_error(ReregOutcome::DoForkOld, errno));
                    }
                }
                Ok(())
            }
            Err(error) => {
                let errno = error.errno().unwrap_or(Errno::IO);
                if mark_new {
                    if let Err(e) = self.ctx.inner.fork.dofork_range(new_start, length) {
                        let mut err = self.rereg_error(ReregOutcome::CmdAndDoForkNew, errno);
                        err.fork_errno = Some(io_errno(&e));
                        return Err(err);
                    }
                }
                let mut err = self.rereg_error(ReregOutcome::Cmd, errno);
                if self
                    .ctx
                    .inner
                    .provider
                    .rereg_refusal_leaves_mr_unchanged(flags, errno)
                {
                    err.mr_state = MrState::Old;
                }
                Err(err)
            }
        }
    }

    /// The replace fallback: register the new attributes, then deregister
    /// the old registration, keeping this object.
    ///
    /// # Safety
    ///
    /// As for [`rereg`](Self::rereg).
    unsafe fn replace(
        &mut self,
        flags: ReregFlags,
        new_pd: Option<&ProtectionDomain>,
        addr: *mut u8,
        length: usize,
        access: AccessFlags,
    ) -> Result<ReregPath, ReregError> {
        let pd = new_pd.map_or_else(|| self.pd.clone(), |pd| pd.inner.clone());
        let (start, length) = if flags.contains(ReregFlags::TRANSLATION) {
            (addr, length)
        } else {
            (self.addr as *mut u8, self.length)
        };
        let access = if flags.contains(ReregFlags::ACCESS) {
            access
        } else {
            self.access
        };
        // SAFETY: with TRANSLATION the caller keeps the new range mapped;
        // otherwise it is the range already registered, which the caller
        // keeps mapped for this MR.
        let mut old = match unsafe { MemoryRegion::register(&pd, start, length, access) } {
            Ok(new) => new,
            Err(RegFailure::DontFork(e)) => {
                return Err(
                    self.rereg_error(ReregOutcome::DontForkNew, e.errno().unwrap_or(Errno::IO))
                );
            }
            Err(RegFailure::Input(e) | RegFailure::Cmd(e)) => {
                return Err(self.replace_failed(
                    e.errno().unwrap_or(Errno::IO),
                    "replace fallback: registering the new range failed; the old MR is untouched and valid",
                ));
            }
        };
        // `self` becomes the new registration, `old` the previous one.
        std::mem::swap(self, &mut old);
        if let Err(e) = old.dereg_command() {
            // Keep the caller's MR as it was and release the new one.
            std::mem::swap(self, &mut old);
            let mut new = old;
            let errno = e.errno().unwrap_or(Errno::IO);
            if new.dereg_in_place().is_ok() {
                return Err(self.replace_failed(
                    errno,
                    "replace fallback: deregistering the old MR failed; the new registration was released",
                ));
            }
            new.abandon();
            return Err(ReregError {
                new_range_registered: true,
                ..self.replace_failed(
                    errno,
                    "replace fallback: deregistering the old MR failed, and so did releasing the new registration: the new range stays registered until the context is closed",
                )
            });
        }
        if let Err(errno) = old.unmark(old.addr, old.length) {
            return Err(self.rereg_error(ReregOutcome::DoForkOld, errno));
        }
        Ok(ReregPath::Replaced)
    }

    /// Changes the access flags in place (`IBV_REREG_MR_CHANGE_ACCESS`).
    pub fn set_access(&mut self, access: AccessFlags) -> Result<(), ReregError> {
        // SAFETY: without TRANSLATION no new memory is handed to the device.
        unsafe { self.rereg(ReregFlags::ACCESS, None, std::ptr::null_mut(), 0, access) }
    }

    /// Moves the MR to another protection domain of the same context
    /// (`IBV_REREG_MR_CHANGE_PD`).
    pub fn set_pd(&mut self, pd: &ProtectionDomain) -> Result<(), ReregError> {
        // SAFETY: without TRANSLATION no new memory is handed to the device.
        unsafe {
            self.rereg(
                ReregFlags::PD,
                Some(pd),
                std::ptr::null_mut(),
                0,
                AccessFlags::empty(),
            )
        }
    }

    /// Points the MR at a new range (`IBV_REREG_MR_CHANGE_TRANSLATION`).
    ///
    /// # Safety
    ///
    /// The new range must stay mapped while registered, as for
    /// [`ProtectionDomain::reg_mr`]; the old range is released on success.
    pub unsafe fn set_range(&mut self, addr: *mut u8, length: usize) -> Result<(), ReregError> {
        // SAFETY: forwarded to the caller.
        unsafe {
            self.rereg(
                ReregFlags::TRANSLATION,
                None,
                addr,
                length,
                AccessFlags::empty(),
            )
        }
    }

    /// Deregisters now and reports the kernel's answer; on failure the MR is
    /// handed back, still registered (dropping it tries again).
    #[doc(alias = "ibv_dereg_mr")]
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
            self.ctx
                .inner
                .fork
                .dofork_range(start, length)
                .map_err(|e| io_errno(&e))?;
        }
        Ok(())
    }

    fn rereg_error(&self, outcome: ReregOutcome, errno: Errno) -> ReregError {
        ReregError {
            outcome,
            mr_state: outcome.mr_state(),
            errno,
            device: self.ctx.inner.device.clone(),
            reason: None,
            fork_errno: None,
            new_range_registered: false,
        }
    }

    /// The replace fallback failed before touching the old registration:
    /// `Cmd`, but the old MR is known to be valid.
    fn replace_failed(&self, errno: Errno, reason: &'static str) -> ReregError {
        ReregError {
            mr_state: MrState::Old,
            reason: Some(reason),
            ..self.rereg_error(ReregOutcome::Cmd, errno)
        }
    }

    pub(crate) fn input_error(&self, reason: &'static str) -> ReregError {
        ReregError {
            reason: Some(reason),
            ..self.rereg_error(ReregOutcome::Input, Errno::INVAL)
        }
    }
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

impl From<RegFailure> for Error {
    fn from(f: RegFailure) -> Error {
        match f {
            RegFailure::Input(e) | RegFailure::DontFork(e) | RegFailure::Cmd(e) => e,
        }
    }
}

/// Access bits every driver that re-registers at all accepts
/// (`RXE_ACCESS_SUPPORTED_MR` and the core's basic set).
const PLAIN_ACCESS: AccessFlags = AccessFlags::LOCAL_WRITE
    .union(AccessFlags::REMOTE_WRITE)
    .union(AccessFlags::REMOTE_READ)
    .union(AccessFlags::REMOTE_ATOMIC)
    .union(AccessFlags::MW_BIND);

/// True when a REREG_MR refusal says the device cannot do this *kind* of
/// change, so that it is worth remembering per flag combination: an
/// `EOPNOTSUPP` for a non-empty change whose access value (if any) has only plain
/// bits. A refusal of one special value (`ZERO_BASED`, `ON_DEMAND`, a flush
/// bit) says nothing about the next value.
fn is_capability_refusal(flags: ReregFlags, access: AccessFlags, errno: Errno) -> bool {
    errno == Errno::OPNOTSUPP
        && !flags.is_empty()
        && (!flags.contains(ReregFlags::ACCESS) || PLAIN_ACCESS.contains(access))
}

/// What to do when the device cannot re-register in place.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum ReregFallback {
    /// Fail like libibverbs (`IBV_REREG_MR_ERR_CMD`, `EOPNOTSUPP`).
    #[default]
    Strict,
    /// Register the new attributes, then deregister the old registration,
    /// in the same object (new handle, new keys).
    Replace,
}

/// How a re-registration was carried out.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReregPath {
    /// The kernel changed the MR in place: same handle; keys as it answered.
    InPlace,
    /// The registration was replaced: new handle and new keys.
    Replaced,
}

impl Drop for MemoryRegion {
    fn drop(&mut self) {
        // In a forked child the registration is the parent's: leave it (and
        // the fork tracker, whose lock a parent thread may have held).
        if !self.live || !self.ctx.is_owned_by_this_process() {
            return;
        }
        if self.dereg_in_place().is_err() {
            self.abandon();
        }
    }
}

fn io_errno(e: &std::io::Error) -> Errno {
    Errno::from_raw_os_error(e.raw_os_error().unwrap_or(Errno::IO.raw_os_error()))
}
