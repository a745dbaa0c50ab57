//! Memory a remote peer may write: registered with `REMOTE_WRITE` or
//! `REMOTE_ATOMIC`, reached only through copies and atomic views.
//!
//! Any holder of the rkey may write such memory at any moment, behind the
//! compiler's back. A `&[u8]` over it would be a promise that the bytes do
//! not change while the reference lives, which the peer breaks: the
//! optimizer may hoist a load out of a loop and never see the peer's RDMA
//! WRITE. So a [`RemoteBufferMr`] never hands out a plain reference to its
//! bytes. It offers what a user of RDMA WRITE targets needs instead:
//!
//! - [`copy_out`](RemoteBufferMr::copy_out) / [`copy_in`](RemoteBufferMr::copy_in):
//!   volatile copies, each byte read (or written) exactly once;
//! - [`atomic_u64`](RemoteBufferMr::atomic_u64): an 8-byte-aligned word as
//!   an `AtomicU64`, for a flag or a counter a poller waits on (an
//!   `Acquire` load that sees the peer's last write also sees, on rxe and
//!   siw, the bytes the peer wrote before it in the same or an earlier
//!   RDMA WRITE: both copy a request's payload in order);
//! - [`dereg`](RemoteBufferMr::dereg): the buffer back, as a plain owned
//!   value, once the kernel has let go of the registration. Removing
//!   `REMOTE_WRITE` in place is no such fence (a packet past the access
//!   check may still be copying), so it does not give plain references back.
//!
//! A remotely writable buffer is not [`DeviceReadable`](crate::post::DeviceReadable)
//! memory either: that promises bytes nobody writes.

use std::fmt;
use std::sync::atomic::AtomicU64;

use crate::buffer::{
    BufferDeregError, BufferMr, RegBufferError, RetargetError, Retargeted, StableBuffer,
};
use crate::error::{Error, ReregError};
use crate::flags::{AccessFlags, ReregFlags};
use crate::mr::{MemoryRegion, Rereg, ReregFallback, ReregPath};
use crate::pd::ProtectionDomain;

/// A memory region that owns a buffer a remote peer may write.
///
/// Made by [`ProtectionDomain::reg_remote_buffer`]. Its bytes are read and
/// written only by copying ([`copy_out`](Self::copy_out),
/// [`copy_in`](Self::copy_in)) or through atomic words
/// ([`atomic_u64`](Self::atomic_u64)); [`dereg`](Self::dereg) hands the
/// buffer back once no registration reaches it. Dropping it deregisters,
/// and leaks the buffer if the kernel refuses. Every access takes
/// `&mut self`: share it behind a lock, or give each poller its own region.
///
/// ```no_run
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use std::sync::atomic::Ordering;
/// use uverbs::AccessFlags;
/// let ctx = uverbs::devices()?.first().ok_or("no device")?.open()?;
/// let pd = ctx.alloc_pd()?;
/// let mut target = pd.reg_remote_buffer(
///     vec![0u8; 4096],
///     AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE,
/// )?;
/// // ... publish target.addr() and target.rkey() to the peer ...
/// // The peer RDMA-WRITEs its payload, then a non-zero word at offset 4088:
/// let flag = target.atomic_u64(4088).expect("aligned and inside");
/// while flag.load(Ordering::Acquire) == 0 {
///     std::hint::spin_loop();
/// }
/// let mut payload = [0u8; 64];
/// target.copy_out(0, &mut payload)?;
/// // Plain bytes again only once deregistered:
/// let bytes: Vec<u8> = target.dereg()?;
/// # Ok(()) }
/// ```
///
/// There is no slice view of the bytes:
/// ```compile_fail,E0599
/// # fn f(mr: &uverbs::mr::RemoteBufferMr<Vec<u8>>) {
/// let _ = mr.buffer(); // error: no method `buffer`
/// # }
/// ```
/// And it cannot be the local side of a work request, whose memory must be
/// written by nobody else:
/// ```compile_fail,E0277
/// # fn f(mr: uverbs::mr::RemoteBufferMr<Vec<u8>>) {
/// let _ = uverbs::post::Local::whole(mr); // error: not DeviceReadable
/// # }
/// ```
#[doc(alias = "IBV_ACCESS_REMOTE_WRITE")]
pub struct RemoteBufferMr<B: StableBuffer> {
    /// The region and its buffer. Its plain-slice methods are never called
    /// on a remotely writable region: only `registered_mut` is.
    inner: BufferMr<B>,
}

/// A failed [`RemoteBufferMr::dereg`]: the region is handed back, still
/// registered and still owning its buffer.
#[derive(Debug, thiserror::Error)]
#[error("{error}")]
#[non_exhaustive]
pub struct RemoteDeregError<B: StableBuffer> {
    /// The region, still registered.
    pub mr: RemoteBufferMr<B>,
    /// Why the kernel refused.
    pub error: Error,
}

crate::error::hands_back_with_error! {
    [B: StableBuffer] RemoteDeregError<B>, "the region (which tries again, and leaks the buffer if that fails)";
}

/// A byte range outside the registered buffer; nothing was copied.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("bytes {start}..{end} are outside the {len} registered bytes")]
#[non_exhaustive]
pub struct OutsideBuffer {
    /// First byte asked for.
    pub start: usize,
    /// One past the last byte asked for (saturated on overflow).
    pub end: usize,
    /// Bytes registered.
    pub len: usize,
}

impl<B: StableBuffer> fmt::Debug for RemoteBufferMr<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RemoteBufferMr")
            .field("mr", self.mr())
            .finish_non_exhaustive()
    }
}

impl ProtectionDomain {
    /// Registers an owned, address-stable buffer that remote peers may
    /// write (`REMOTE_WRITE`, `REMOTE_ATOMIC`) or read. The bytes are then
    /// reached only by copies and atomic views; see [`RemoteBufferMr`].
    /// Any access flags are accepted: this is the safe form for every
    /// registration a peer may write through. [`reg_buffer`](Self::reg_buffer)
    /// refuses those flags because it hands out plain slices.
    #[doc(alias = "ibv_reg_mr")]
    #[doc(alias = "rdma_reg_write")]
    pub fn reg_remote_buffer<B: StableBuffer>(
        &self,
        buffer: B,
        access: AccessFlags,
    ) -> Result<RemoteBufferMr<B>, RegBufferError<B>> {
        self.reg_buffer_unchecked(buffer, access)
            .map(|inner| RemoteBufferMr { inner })
    }
}

impl<B: StableBuffer> RemoteBufferMr<B> {
    /// Registered bytes.
    pub fn len(&self) -> usize {
        self.mr().length()
    }

    /// True for an empty buffer.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The region: keys, address, access.
    pub fn mr(&self) -> &MemoryRegion {
        &self.inner
    }

    /// The local key.
    pub fn lkey(&self) -> u32 {
        self.mr().lkey()
    }

    /// The remote key a peer writes through.
    pub fn rkey(&self) -> u32 {
        self.mr().rkey()
    }

    /// The address a peer names in its RDMA requests.
    pub fn addr(&self) -> u64 {
        self.mr().addr()
    }

    /// The region as a peer needs to know it: address, rkey and length
    /// ([`MemoryRegion::region`]).
    pub fn region(&self) -> crate::wr::RemoteRegion {
        self.mr().region()
    }

    /// A pointer to the byte range `start..start + n` with write
    /// permission, or why not.
    fn range(&mut self, start: usize, n: usize) -> Result<*mut u8, OutsideBuffer> {
        let (ptr, len) = self.inner.registered_mut();
        match start.checked_add(n) {
            // SAFETY: start <= end <= len: inside (or one past) the buffer.
            Some(end) if end <= len => Ok(unsafe { ptr.add(start) }),
            end => Err(OutsideBuffer {
                start,
                end: end.unwrap_or(usize::MAX),
                len,
            }),
        }
    }

    /// Copies the bytes at `offset..offset + out.len()` into `out`, each
    /// read once with a volatile load. A peer writing meanwhile may leave
    /// a mix of old and new bytes: order its writes with a flag word
    /// ([`atomic_u64`](Self::atomic_u64)) or a completion.
    pub fn copy_out(&mut self, offset: usize, out: &mut [u8]) -> Result<(), OutsideBuffer> {
        let src = self.range(offset, out.len())?;
        // SAFETY: the range is inside the registered buffer, which stays
        // allocated while `self` lives; `&mut self` excludes every other
        // access of the program; the device's writes are outside it.
        unsafe { volatile_copy_out(src, out) };
        Ok(())
    }

    /// Writes `bytes` at `offset`, each byte stored once with a volatile
    /// store (for a peer to RDMA READ, or to reset a flag).
    pub fn copy_in(&mut self, offset: usize, bytes: &[u8]) -> Result<(), OutsideBuffer> {
        let dst = self.range(offset, bytes.len())?;
        // SAFETY: as in copy_out; the buffer is writable (StableBuffer).
        unsafe { volatile_copy_in(bytes, dst) };
        Ok(())
    }

    /// The 8 bytes at `offset` as an atomic word, or `None` when they are
    /// not inside the buffer or not 8-byte aligned in memory. A peer's
    /// RDMA WRITE or atomic on the word is seen by a later load.
    pub fn atomic_u64(&mut self, offset: usize) -> Option<&AtomicU64> {
        let p = self.range(offset, 8).ok()?;
        if p as usize % std::mem::align_of::<AtomicU64>() != 0 {
            return None;
        }
        // SAFETY: aligned (checked), inside the buffer and valid for the
        // borrow of `self`, which excludes every other access of the program
        // meanwhile; the device's writes are outside it.
        Some(unsafe { AtomicU64::from_ptr(p.cast()) })
    }

    /// Changes the access flags in place, strictly; see
    /// [`MemoryRegion::set_access`]. A device that cannot (siw; rxe before
    /// Linux 6.12) answers `Cmd`/`EOPNOTSUPP` with the region unchanged:
    /// [`rereg_with`](Self::rereg_with) can replace the registration
    /// instead. Removing `REMOTE_WRITE` does not make the bytes plain again
    /// (a packet past the access check may still be landing): only
    /// [`dereg`](Self::dereg) does.
    pub fn set_access(&mut self, access: AccessFlags) -> Result<(), ReregError> {
        // Through the owned region's change path, which notes what peers
        // may READ after every access change.
        self.inner
            .apply_any_access(&Rereg::new().access(access), ReregFallback::Strict)
            .map(drop)
    }

    /// True while [`dereg`](Self::dereg) and [`retarget`](Self::retarget)
    /// refuse because a peer's RDMA READ of the buffer may outlive
    /// deregistration (siw); see [`BufferMr::peer_reads_outlive_dereg`].
    pub fn peer_reads_outlive_dereg(&self) -> bool {
        self.inner.peer_reads_outlive_dereg()
    }

    /// Says that no RDMA READ of the buffer is in flight or will come; see
    /// [`BufferMr::assume_peer_reads_done`].
    ///
    /// # Safety
    ///
    /// As for [`BufferMr::assume_peer_reads_done`]: every RDMA READ a peer
    /// issued against this region has completed at that peer, and no peer
    /// issues another before the region is deregistered.
    pub unsafe fn assume_peer_reads_done(&mut self) {
        // SAFETY: the caller's promise, passed on.
        unsafe { self.inner.assume_peer_reads_done() }
    }

    /// Moves the region to another PD, strictly; see
    /// [`MemoryRegion::set_pd`] and, for the fallback,
    /// [`rereg_with`](Self::rereg_with).
    pub fn set_pd(&mut self, pd: &ProtectionDomain) -> Result<(), ReregError> {
        self.inner.mr_mut().set_pd(pd)
    }

    /// Applies a change set of PD and/or access with a fallback policy; see
    /// [`MemoryRegion::apply`], and [`rereg_with`](Self::rereg_with) for
    /// the outcomes. Any access is accepted, remotely writable included:
    /// the region stays a `RemoteBufferMr` whatever it grants. The buffer
    /// stays the same, so a change set with a translation is refused
    /// (`Input`, nothing sent): use [`retarget`](Self::retarget).
    ///
    /// ```no_run
    /// # fn f(mr: &mut uverbs::mr::RemoteBufferMr<Vec<u8>>, pd2: &uverbs::ProtectionDomain) -> Result<(), uverbs::mr::ReregError> {
    /// use uverbs::mr::{Rereg, ReregFallback};
    /// use uverbs::AccessFlags;
    /// let rw = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;
    /// let path = mr.apply(&Rereg::new().access(rw).pd(pd2), ReregFallback::Replace)?;
    /// println!("{path:?}: publish rkey {:#x}", mr.rkey());
    /// # Ok(()) }
    /// ```
    #[doc(alias = "ibv_rereg_mr")]
    pub fn apply(
        &mut self,
        change: &Rereg<'_>,
        fallback: ReregFallback,
    ) -> Result<ReregPath, ReregError> {
        self.inner.apply_any_access(change, fallback)
    }

    /// Changes PD and/or access with a fallback policy, with
    /// [`BufferMr::rereg_with`]'s arguments (those of
    /// [`MemoryRegion::rereg_with`] without a range); the same as
    /// [`apply`](Self::apply). [`ReregFlags::TRANSLATION`] is refused
    /// (`Input`, nothing sent): use [`retarget`](Self::retarget).
    ///
    /// With [`ReregFallback::Replace`], where the kernel refuses the change
    /// in place without changing anything (`EOPNOTSUPP`: siw, and rxe
    /// before Linux 6.12; `EACCES`), the same buffer is registered anew with
    /// the new PD and access, then the old registration is deregistered.
    /// The outcomes, as for a [`MemoryRegion`] (docs/rereg.md):
    ///
    /// | result | the region |
    /// |---|---|
    /// | `Ok(ReregPath::InPlace)` | changed in place: same handle and (rxe) keys |
    /// | `Ok(ReregPath::Replaced)` | a new registration: new handle, new lkey and rkey (publish the rkey again), the old keys reach nothing; the same buffer with its bytes |
    /// | `Err`, [`mr_state`](ReregError::mr_state) `Old` | unchanged and valid: an input error (nothing sent), a refusal that provably changed nothing (`Strict`'s `EOPNOTSUPP`), or a failed replacement (its REG_MR's errno, or its DEREG_MR's with the new registration released again) |
    /// | `Err`, `New` (`DoForkOld`) | valid with the new attributes; un-marking pages for fork failed |
    /// | `Err`, `Undefined` | a refusal that may have changed something: drop the region (which deregisters it, and leaks the buffer if that fails too) |
    ///
    /// Nothing leaks: after a replacement exactly one registration is left,
    /// and when releasing a failed replacement's new registration fails too,
    /// it is counted in [`Context::abandoned_registrations`](crate::Context::abandoned_registrations)
    /// ([`ReregError::new_range_still_registered`]) and the buffer, still
    /// owned by the region, is never freed before the context is closed.
    /// Removing `REMOTE_WRITE` this way does not make the bytes plain again
    /// either: only [`dereg`](Self::dereg) does.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use uverbs::mr::{ReregFallback, ReregFlags, ReregPath};
    /// use uverbs::AccessFlags;
    /// let ctx = uverbs::devices()?.first().ok_or("no device")?.open()?;
    /// let pd = ctx.alloc_pd()?;
    /// let mut target = pd.reg_remote_buffer(vec![0u8; 4096], AccessFlags::LOCAL_WRITE)?;
    /// // Let peers write it, on any device: in place, or by replacement.
    /// let rw = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;
    /// let path = target.rereg_with(ReregFallback::Replace, ReregFlags::ACCESS, None, rw)?;
    /// if path == ReregPath::Replaced {
    ///     // ... publish the new target.rkey() to the peer ...
    /// }
    /// # Ok(()) }
    /// ```
    #[doc(alias = "ibv_rereg_mr")]
    pub fn rereg_with(
        &mut self,
        fallback: ReregFallback,
        flags: ReregFlags,
        pd: Option<&ProtectionDomain>,
        access: AccessFlags,
    ) -> Result<ReregPath, ReregError> {
        self.inner
            .rereg_pd_access(fallback, flags, pd, access, true)
    }

    /// Points the region at `new`, as [`BufferMr::retarget`] does, and
    /// hands the previous buffer back once no registration reaches it; the
    /// region stays remotely writable. On failure the region (if kept) comes
    /// back as a `RemoteBufferMr` too.
    pub fn retarget(
        self,
        new: B,
        fallback: ReregFallback,
    ) -> Result<Retargeted<B, Self>, RetargetError<B, Self>> {
        let wrap = |inner| RemoteBufferMr { inner };
        match self.inner.retarget(new, fallback) {
            Ok(done) => Ok(done.map_region(wrap)),
            Err(e) => Err(e.map_region(wrap)),
        }
    }

    /// Deregisters and hands the buffer back, now out of every peer's
    /// reach; on failure the region comes back still registered. On siw, a
    /// region peers could READ is refused first (`InvalidInput`, nothing
    /// sent) until [`assume_peer_reads_done`](Self::assume_peer_reads_done);
    /// see [`BufferMr`]'s docs.
    #[doc(alias = "ibv_dereg_mr")]
    pub fn dereg(self) -> Result<B, RemoteDeregError<B>> {
        self.inner
            .dereg()
            .map_err(|BufferDeregError { mr, error }| RemoteDeregError {
                mr: RemoteBufferMr { inner: mr },
                error,
            })
    }
}

/// Volatile copy out of memory another agent may write: 8-byte loads where
/// aligned, single bytes at the edges.
///
/// # Safety
///
/// `src..src + out.len()` is readable, and not reached by the program
/// through references while this runs.
unsafe fn volatile_copy_out(src: *const u8, out: &mut [u8]) {
    let mut i = 0;
    while i < out.len() {
        // SAFETY (both branches): `src + i` is inside the range (i < len).
        let p = unsafe { src.add(i) };
        if p as usize % 8 == 0 && out.len() - i >= 8 {
            // SAFETY: aligned, and 8 bytes remain in the range.
            let word = unsafe { std::ptr::read_volatile(p.cast::<u64>()) };
            out[i..i + 8].copy_from_slice(&word.to_ne_bytes());
            i += 8;
        } else {
            // SAFETY: inside the range.
            out[i] = unsafe { std::ptr::read_volatile(p) };
            i += 1;
        }
    }
}

/// Volatile copy into memory another agent may read or write; the shape of
/// [`volatile_copy_out`].
///
/// # Safety
///
/// `dst..dst + bytes.len()` is writable, and not reached by the program
/// through references while this runs.
unsafe fn volatile_copy_in(bytes: &[u8], dst: *mut u8) {
    let mut i = 0;
    while i < bytes.len() {
        // SAFETY (both branches): `dst + i` is inside the range.
        let p = unsafe { dst.add(i) };
        if p as usize % 8 == 0 && bytes.len() - i >= 8 {
            let mut word = [0u8; 8];
            word.copy_from_slice(&bytes[i..i + 8]);
            // SAFETY: aligned, and 8 bytes remain in the range.
            unsafe { std::ptr::write_volatile(p.cast::<u64>(), u64::from_ne_bytes(word)) };
            i += 8;
        } else {
            // SAFETY: inside the range.
            unsafe { std::ptr::write_volatile(p, bytes[i]) };
            i += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn volatile_copies_round_trip_at_every_alignment() {
        let mut mem = vec![0u8; 64];
        let src: Vec<u8> = (1..=40).collect();
        for start in 0..9 {
            for n in [0, 1, 7, 8, 9, 17, 31] {
                mem.iter_mut().for_each(|b| *b = 0);
                // SAFETY: start + n <= 40 < 64, and `mem` is reached only
                // through this pointer during the call.
                unsafe { volatile_copy_in(&src[..n], mem.as_mut_ptr().add(start)) };
                assert_eq!(&mem[start..start + n], &src[..n]);
                assert!(mem[..start].iter().all(|&b| b == 0));
                assert!(mem[start + n..].iter().all(|&b| b == 0));
                let mut out = vec![0xffu8; n];
                // SAFETY: as above, for reading.
                unsafe { volatile_copy_out(mem.as_ptr().add(start), &mut out) };
                assert_eq!(out, &src[..n]);
            }
        }
    }
}
