//! Re-registration in place (`ibv_rereg_mr`), described as a change set.
//!
//! A [`Rereg`] says what changes; its flags follow from the fields set, so
//! ACCESS and PD changes need neither `unsafe` nor dummy pointers. Only a new
//! translation hands new memory to the device, and only its setter is
//! `unsafe`. [`MemoryRegion::rereg`] stays the exact C mirror, with
//! libibverbs' input checks for the combinations a change set cannot build.

use crate::command::ReregMr;
use crate::error::{Errno, MrState, Op, ReregError, ReregOutcome};
use crate::flags::{AccessFlags, ReregFlags};
use crate::pd::ProtectionDomain;

use super::MemoryRegion;

/// What a re-registration changes: any of the access flags, the protection
/// domain and the translation (address and length).
///
/// Build one with [`Rereg::new`] and the setters, then [`MemoryRegion::apply`]
/// it; the `IBV_REREG_MR_CHANGE_*` flags follow from what was set.
///
/// ```no_run
/// use uverbs::mr::{Rereg, ReregFallback};
/// use uverbs::AccessFlags;
/// # fn demo(mr: &mut uverbs::MemoryRegion, pd2: &uverbs::ProtectionDomain) -> Result<(), uverbs::mr::ReregError> {
/// // Safe: no new memory is handed to the device.
/// let change = Rereg::new().access(AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ).pd(pd2);
/// let path = mr.apply(&change, ReregFallback::Replace)?;
/// println!("{path:?}: publish rkey {:#x}", mr.rkey());
/// # Ok(()) }
/// ```
#[doc(alias = "ibv_rereg_mr_flags")]
#[derive(Clone, Copy, Debug)]
#[must_use = "a change set does nothing until it is applied"]
pub struct Rereg<'pd> {
    flags: ReregFlags,
    pd: Option<&'pd ProtectionDomain>,
    addr: *mut u8,
    length: usize,
    access: AccessFlags,
}

impl Default for Rereg<'_> {
    fn default() -> Self {
        Self::new()
    }
}

impl<'pd> Rereg<'pd> {
    /// A change set that changes nothing yet (flags 0: applied as is, the
    /// kernel answers `EINVAL`, as through libibverbs).
    pub fn new() -> Self {
        Rereg {
            flags: ReregFlags::empty(),
            pd: None,
            addr: std::ptr::null_mut(),
            length: 0,
            access: AccessFlags::empty(),
        }
    }

    /// Sets new access flags (`IBV_REREG_MR_CHANGE_ACCESS`).
    pub fn access(mut self, access: AccessFlags) -> Self {
        self.flags |= ReregFlags::ACCESS;
        self.access = access;
        self
    }

    /// Moves the region to `pd`, a PD of the same context
    /// (`IBV_REREG_MR_CHANGE_PD`).
    pub fn pd(mut self, pd: &'pd ProtectionDomain) -> Self {
        self.flags |= ReregFlags::PD;
        self.pd = Some(pd);
        self
    }

    /// Points the region at `[addr, addr + length)`
    /// (`IBV_REREG_MR_CHANGE_TRANSLATION`).
    ///
    /// # Safety
    ///
    /// Once applied successfully, the new range must stay mapped while it is
    /// registered, as for [`ProtectionDomain::reg_mr`].
    pub unsafe fn translation(mut self, addr: *mut u8, length: usize) -> Self {
        self.flags |= ReregFlags::TRANSLATION;
        self.addr = addr;
        self.length = length;
        self
    }

    /// The `IBV_REREG_MR_CHANGE_*` flags this change set sends.
    pub fn flags(&self) -> ReregFlags {
        self.flags
    }

    /// Any combination `ibv_rereg_mr` accepts, checked only when applied.
    ///
    /// # Safety
    ///
    /// As for [`translation`](Self::translation) when `flags` has
    /// `TRANSLATION`.
    pub(crate) unsafe fn raw(
        flags: ReregFlags,
        pd: Option<&'pd ProtectionDomain>,
        addr: *mut u8,
        length: usize,
        access: AccessFlags,
    ) -> Self {
        Rereg {
            flags,
            pd,
            addr,
            length,
            access,
        }
    }

    fn has(&self, flag: ReregFlags) -> bool {
        self.flags.contains(flag)
    }

    /// The PD the change moves the region to, if it changes the PD.
    pub(super) fn new_pd(&self) -> Option<&'pd ProtectionDomain> {
        self.pd.filter(|_| self.has(ReregFlags::PD))
    }

    /// The new range, if the change has a translation.
    pub(super) fn new_range(&self) -> Option<(*mut u8, usize)> {
        self.has(ReregFlags::TRANSLATION)
            .then_some((self.addr, self.length))
    }

    /// The new access flags, if the change sets them.
    pub(crate) fn new_access(&self) -> Option<AccessFlags> {
        self.has(ReregFlags::ACCESS).then_some(self.access)
    }
}

/// Access bits every driver that re-registers at all accepts
/// (`RXE_ACCESS_SUPPORTED_MR` and the core's basic set).
const PLAIN_ACCESS: AccessFlags = AccessFlags::LOCAL_WRITE
    .union(AccessFlags::REMOTE_WRITE)
    .union(AccessFlags::REMOTE_READ)
    .union(AccessFlags::REMOTE_ATOMIC)
    .union(AccessFlags::MW_BIND);

impl Rereg<'_> {
    /// True when a refusal of this change says the device cannot do this
    /// *kind* of change, so that it is worth remembering per flag
    /// combination: an `EOPNOTSUPP` for a non-empty change whose access value
    /// (if any) has only plain bits. A refusal of one special value
    /// (`ZERO_BASED`, `ON_DEMAND`, a flush bit) says nothing about the next.
    fn is_capability_refusal(&self, errno: Errno) -> bool {
        errno == Errno::OPNOTSUPP
            && !self.flags.is_empty()
            && self.new_access().map_or(true, |a| PLAIN_ACCESS.contains(a))
    }
}

impl MemoryRegion {
    /// Applies a change set: changes the region's access, PD and/or
    /// translation with one `REREG_MR` command, or, with
    /// [`ReregFallback::Replace`], by registering anew where the device
    /// cannot change it in place. Returns the path taken, so that new keys
    /// can be published.
    ///
    /// Safe: a change set with a new translation could only be built with
    /// the `unsafe` [`Rereg::translation`], whose caller promised the range.
    /// See [`rereg`](Self::rereg) for the checks, the fork marking and the
    /// outcomes, and [`rereg_with`](Self::rereg_with) for the fallback.
    #[doc(alias = "ibv_rereg_mr")]
    pub fn apply(
        &mut self,
        change: &Rereg<'_>,
        fallback: ReregFallback,
    ) -> Result<ReregPath, ReregError> {
        self.check_rereg_input(change)?;
        if !self.ctx.is_owned_by_this_process() {
            return Err(ReregError {
                reason: Some("the MR belongs to the process that created it, not to this forked child; nothing was sent"),
                ..self.rereg_error(ReregOutcome::Input, Errno::ACCESS)
            });
        }
        let flags = change.flags;
        let may_replace = fallback == ReregFallback::Replace && !flags.is_empty();
        if may_replace && self.ctx.rereg_known_unsupported(flags) {
            return self.replace(change);
        }
        let err = match self.rereg_in_place(change) {
            Ok(()) => return Ok(ReregPath::InPlace),
            Err(e) if e.outcome == ReregOutcome::Cmd && e.mr_state == MrState::Old => e,
            Err(e) => return Err(e),
        };
        if change.is_capability_refusal(err.errno) {
            self.ctx.remember_rereg_unsupported(flags);
        }
        // The kernel refused without changing anything. A refusal of the
        // operation (EOPNOTSUPP) or of making read-only pinned pages
        // writable (EACCES) is what a fresh registration can do instead.
        let replaceable = err.errno == Errno::OPNOTSUPP || err.errno == Errno::ACCESS;
        if may_replace && replaceable {
            self.replace(change)
        } else {
            Err(err)
        }
    }

    /// Re-registers the MR in place: changes its translation (`addr`,
    /// `length`), PD and/or access, as `flags` says, with one `REREG_MR`
    /// command. Strict, like libibverbs: a device that refuses gives
    /// [`ReregOutcome::Cmd`]; [`rereg_with`](Self::rereg_with) can fall back
    /// to replacing the registration instead. [`apply`](Self::apply) takes
    /// the same change as a [`Rereg`] change set, safely.
    ///
    /// This is `ibv_rereg_mr(mr, flags, pd, addr, length, access)`, with
    /// libibverbs' input checks in its order, each failing with
    /// [`ReregOutcome::Input`] before any system call:
    /// 0. the region is over a DMA-BUF
    ///    ([`ProtectionDomain::reg_dmabuf_mr`]: never re-registered);
    /// 1. `flags` has bits outside [`ReregFlags::all`];
    /// 2. [`TRANSLATION`](ReregFlags::TRANSLATION) with `length == 0` or a
    ///    null `addr`;
    /// 3. non-empty `access` without [`ACCESS`](ReregFlags::ACCESS).
    ///
    /// Then checks libibverbs cannot make, also as `Input`:
    /// [`PD`](ReregFlags::PD) without a `pd`, a `pd` of another context
    /// (its handle would name some other PD in this context), and a range
    /// that wraps around. `flags` empty goes to the kernel, which answers
    /// `EINVAL` ([`ReregOutcome::Cmd`]), as through libibverbs. In a child
    /// forked from the process that opened the context nothing is sent:
    /// `Input` with `EACCES`.
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
    /// recorded attributes are the old ones. Whether the MR is usable after
    /// any failure is [`ReregError::mr_state`]'s answer, not the outcome's:
    /// after `Cmd` it says whether the kernel's errno proves the MR
    /// unchanged ([`MrState::Old`]) or the man page's "undefined" applies
    /// (drop it), where the code alone promises nothing
    /// ([`ReregOutcome::man_page_guarantee`]).
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
    /// With [`ReregFallback::Replace`], when the kernel refuses without
    /// changing anything because it cannot do the change in place
    /// (`EOPNOTSUPP`: siw always, rxe for `TRANSLATION`) or cannot make pages
    /// pinned read-only writable (`EACCES`), the new (range, PD, access) is
    /// registered first and the old registration deregistered after, inside
    /// this same object: a new handle and new keys. If the new registration
    /// fails, the old MR is untouched and valid ([`MrState::Old`], outcome
    /// `Cmd` with the REG_MR errno, or `DontForkNew`). A capability refusal
    /// is remembered per context and flag combination
    /// ([`Context::rereg_known_unsupported`](crate::Context::rereg_known_unsupported)),
    /// so later calls skip the doomed command. `flags == 0` is never replaced.
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
        // SAFETY: forwarded to the caller.
        let change = unsafe { Rereg::raw(flags, pd, addr, length, access) };
        self.apply(&change, fallback)
    }

    /// libibverbs' input checks in its order, then ours.
    fn check_rereg_input(&self, change: &Rereg<'_>) -> Result<(), ReregError> {
        let Rereg {
            flags,
            pd,
            addr,
            length,
            access,
        } = *change;
        let translation = flags.contains(ReregFlags::TRANSLATION);
        // libibverbs' first check: only an ordinary MR (not a DMA-BUF one).
        if self.dmabuf.is_some() {
            return Err(
                self.input_error("a region over a DMA-BUF cannot be re-registered; register anew")
            );
        }
        if !ReregFlags::all().contains(flags) {
            return Err(self.input_error("unknown flag bits"));
        }
        if translation && (length == 0 || addr.is_null()) {
            return Err(self.input_error("CHANGE_TRANSLATION with a zero length or a null address"));
        }
        if !access.is_empty() && !flags.contains(ReregFlags::ACCESS) {
            return Err(self.input_error("access flags given without CHANGE_ACCESS"));
        }
        if flags.contains(ReregFlags::PD) {
            match pd {
                None => return Err(self.input_error("CHANGE_PD without a protection domain")),
                Some(pd) if !pd.context().same_as(&self.ctx) => {
                    return Err(
                        self.input_error("the protection domain belongs to another context")
                    );
                }
                Some(_) => {}
            }
        }
        if translation && (addr as usize).checked_add(length).is_none() {
            return Err(self.input_error("the new range wraps around the address space"));
        }
        Ok(())
    }

    /// The REREG_MR command with fork marking at libibverbs' points.
    fn rereg_in_place(&mut self, change: &Rereg<'_>) -> Result<(), ReregError> {
        let flags = change.flags;
        let new_range = change.new_range();
        let mark_new = new_range.filter(|_| self.fork_marked);
        if let Some((addr, length)) = mark_new {
            if let Err(e) = self.ctx.inner.fork.dontfork_range(addr as usize, length) {
                return Err(self.rereg_error(ReregOutcome::DontForkNew, e));
            }
        }

        // The address and length go as given, with or without TRANSLATION,
        // as libibverbs sends them (the kernel reads them only with it; the
        // mlx5 oracle compares the bytes).
        let mut cmd = ReregMr::new(self.handle, flags.bits())
            .translation(change.addr as usize as u64, change.length as u64)
            .access_flags(change.access.bits());
        if let Some(pd) = change.new_pd() {
            cmd = cmd.pd_handle(pd.handle());
        }
        // SAFETY: with TRANSLATION the change set's maker promised the new
        // range (Rereg::translation); otherwise no new memory is handed over.
        match unsafe { self.ctx.run(Op::ReregMr, &cmd, &mut []) } {
            Ok((resp, _)) => {
                self.lkey = resp.lkey;
                self.rkey = resp.rkey;
                if let Some(pd) = change.new_pd() {
                    self.pd = pd.inner.clone();
                }
                if let Some(access) = change.new_access() {
                    self.access = access;
                }
                if let Some((new_start, new_length)) = new_range {
                    let (old_start, old_length) = (self.addr, self.length);
                    self.addr = new_start as usize;
                    self.length = new_length;
                    if let Err(errno) = self.unmark(old_start, old_length) {
                        return Err(self.rereg_error(ReregOutcome::DoForkOld, errno));
                    }
                }
                Ok(())
            }
            Err(error) => {
                let errno = error.errno().unwrap_or(Errno::IO);
                if let Some((addr, length)) = mark_new {
                    if let Err(e) = self.ctx.inner.fork.dofork_range(addr as usize, length) {
                        let mut err = self.rereg_error(ReregOutcome::CmdAndDoForkNew, errno);
                        err.fork_errno = Some(e);
                        return Err(err);
                    }
                }
                let err = self.rereg_error(ReregOutcome::Cmd, errno);
                let provider = self.ctx.inner.provider;
                if provider.rereg_refusal_leaves_mr_unchanged(flags, errno) {
                    return Err(err.known_unchanged());
                }
                Err(err)
            }
        }
    }

    /// Changes the access flags in place (`IBV_REREG_MR_CHANGE_ACCESS`),
    /// strictly; [`apply`](Self::apply) can fall back to replacing.
    pub fn set_access(&mut self, access: AccessFlags) -> Result<(), ReregError> {
        self.apply(&Rereg::new().access(access), ReregFallback::Strict)
            .map(drop)
    }

    /// Moves the MR to another protection domain of the same context
    /// (`IBV_REREG_MR_CHANGE_PD`), strictly.
    pub fn set_pd(&mut self, pd: &ProtectionDomain) -> Result<(), ReregError> {
        self.apply(&Rereg::new().pd(pd), ReregFallback::Strict)
            .map(drop)
    }

    /// Points the MR at a new range (`IBV_REREG_MR_CHANGE_TRANSLATION`),
    /// strictly.
    ///
    /// # Safety
    ///
    /// The new range must stay mapped while registered, as for
    /// [`ProtectionDomain::reg_mr`]; the old range is released on success.
    pub unsafe fn set_range(&mut self, addr: *mut u8, length: usize) -> Result<(), ReregError> {
        // SAFETY: forwarded to the caller.
        let change = unsafe { Rereg::new().translation(addr, length) };
        self.apply(&change, ReregFallback::Strict).map(drop)
    }
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
