//! Registering memory the region owns, so that it cannot be freed while the
//! device may still use it.

use std::fmt;
use std::mem::ManuallyDrop;
use std::ops::Deref;

use crate::error::{Error, MrState, Op};
use crate::flags::{AccessFlags, ReregFlags};
use crate::mr::{DeregError, MemoryRegion, Rereg, ReregError, ReregFallback, ReregPath};
use crate::pd::ProtectionDomain;

/// Why a [`BufferMr`] refuses access a remote peer could write through.
pub(crate) const PEER_WRITABLE_BUFFER: &str = "a BufferMr hands out plain slices, so remote peers may not write it (REMOTE_WRITE, REMOTE_ATOMIC, MW_BIND): use reg_remote_buffer";

/// A failed [`ProtectionDomain::reg_buffer`]: the buffer is handed back.
#[derive(Debug, thiserror::Error)]
#[error("{error}")]
#[non_exhaustive]
pub struct RegBufferError<B> {
    /// The buffer, not registered.
    pub buffer: B,
    /// Why the registration failed.
    pub error: Error,
}

crate::error::hands_back_with_error! {
    [B] RegBufferError<B>, "the buffer";
}

impl ProtectionDomain {
    /// Registers an owned, address-stable buffer. The buffer is
    /// deregistered before it is dropped, so this is safe.
    ///
    /// A [`BufferMr`] hands out plain slices of its bytes, so no remote peer
    /// may write them: access that lets one
    /// ([`AccessFlags::lets_peers_write`]: `REMOTE_WRITE`, `REMOTE_ATOMIC`,
    /// `MW_BIND`) is refused with [`Error::InvalidInput`], nothing sent and
    /// the buffer handed back. Register such memory with
    /// [`reg_remote_buffer`](Self::reg_remote_buffer).
    ///
    /// ```no_run
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use uverbs::AccessFlags;
    /// let ctx = uverbs::devices()?.first().ok_or("no device")?.open()?;
    /// let pd = ctx.alloc_pd()?;
    /// let buf = vec![0u8; 1 << 20].into_boxed_slice();
    /// let mr = pd.reg_buffer(buf, AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ)?;
    /// println!("lkey {:#x} rkey {:#x}", mr.lkey(), mr.rkey());
    /// # Ok(()) }
    /// ```
    #[doc(alias = "rdma_reg_msgs")]
    #[doc(alias = "rdma_reg_read")]
    #[doc(alias = "rdma_reg_write")]
    pub fn reg_buffer<B: StableBuffer>(
        &self,
        buffer: B,
        access: AccessFlags,
    ) -> Result<BufferMr<B>, RegBufferError<B>> {
        if access.lets_peers_write() {
            let error = Error::input(
                Op::RegMr,
                &self.inner.ctx.inner.device,
                PEER_WRITABLE_BUFFER,
            );
            return Err(RegBufferError { buffer, error });
        }
        self.reg_buffer_unchecked(buffer, access)
    }

    /// [`reg_buffer`](Self::reg_buffer) with any access: the caller gives
    /// plain slices of a remotely writable region to no one.
    pub(crate) fn reg_buffer_unchecked<B: StableBuffer>(
        &self,
        buffer: B,
        access: AccessFlags,
    ) -> Result<BufferMr<B>, RegBufferError<B>> {
        // Leaked, not freed, if registering unwinds (a panicking advisor).
        let mut buffer = std::mem::ManuallyDrop::new(buffer);
        let (addr, len) = (buffer.as_mut_ptr(), buffer.len());
        // SAFETY: the BufferMr owns the buffer and deregisters before
        // dropping it; StableBuffer promises the address does not move.
        let result = unsafe { self.reg_mr(addr, len, access) };
        let buffer = std::mem::ManuallyDrop::into_inner(buffer);
        match result {
            Ok(mr) => Ok(BufferMr::new(mr, buffer)),
            Err(error) => Err(RegBufferError { buffer, error }),
        }
    }
}

/// A buffer whose bytes stay at one address for as long as it lives, even
/// when the value holding it is moved.
///
/// # Safety
///
/// A registered buffer's bytes are read and written by the device behind
/// the compiler's back ([`DeviceWritable`](crate::post::DeviceWritable) relies on
/// this), so implementors promise, for as long as the value exists:
///
/// - `as_mut_ptr()` and `len()` describe one valid, writable allocation
///   that does not move, shrink or grow, even when the value is moved;
/// - `as_slice()` and `as_mut_slice()` are exactly those bytes: the same
///   first byte and the same length, every time;
/// - the value is the only way to the bytes: no other owner, clone, shared
///   handle or interior mutability reaches them (a `Box<[u8]>`, a `Vec<u8>`
///   used only through this trait, a private `mmap`; not an `Arc<[u8]>`,
///   nor a mapping shared with another process).
pub unsafe trait StableBuffer {
    /// The first byte.
    fn as_mut_ptr(&mut self) -> *mut u8;
    /// The length in bytes.
    fn len(&self) -> usize;
    /// True for an empty buffer.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The bytes, for reading.
    fn as_slice(&self) -> &[u8];
    /// The bytes, for writing.
    fn as_mut_slice(&mut self) -> &mut [u8];
}

/// Implements [`StableBuffer`] for an owner that dereferences to `[u8]`.
/// Each use carries a `// SAFETY:` comment saying why the bytes never move.
macro_rules! stable_deref_buffer {
    ($(#[$attr:meta])* $owner:ty) => {
        $(#[$attr])*
        // SAFETY: stated at the macro's use; every method goes through the
        // `[u8]` the owner dereferences to, and none can grow or shrink it.
        unsafe impl StableBuffer for $owner {
            fn as_mut_ptr(&mut self) -> *mut u8 {
                <[u8]>::as_mut_ptr(self)
            }
            fn len(&self) -> usize {
                <[u8]>::len(self)
            }
            fn as_slice(&self) -> &[u8] {
                self
            }
            fn as_mut_slice(&mut self) -> &mut [u8] {
                self
            }
        }
    };
}

// SAFETY: a boxed slice's heap allocation never moves or changes length.
stable_deref_buffer!(Box<[u8]>);
// SAFETY: the Vec is owned by the BufferMr and only reached through this
// trait, which never grows or shrinks it, so its allocation stays put.
stable_deref_buffer!(Vec<u8>);
// SAFETY: its mapping stays at its address until it is unmapped on drop.
stable_deref_buffer!(crate::PageBuffer);
// SAFETY: a mapping stays at its address until it is unmapped on drop.
stable_deref_buffer!(
    #[cfg(feature = "memmap2")]
    memmap2::MmapMut
);

/// A memory region that owns the buffer it registers.
///
/// The buffer cannot be dropped, moved out or reallocated while registered:
/// it is handed back only by [`dereg`](Self::dereg) and
/// [`retarget`](Self::retarget), once the kernel no longer references it.
/// If deregistration fails when the region is dropped, the buffer is leaked
/// rather than freed under the device.
///
/// **Peers' READs on siw.** siw keeps sending an RDMA READ response from
/// the registered pages after `DEREG_MR` returned (measured between two
/// hosts: 99 % of an 8 MiB READ carried bytes written after the dereg, and
/// the READ succeeded). So on siw a region that has had
/// [`AccessFlags::REMOTE_READ`] hands its buffer back ([`dereg`](Self::dereg),
/// [`retarget`](Self::retarget)) only after
/// [`assume_peer_reads_done`](Self::assume_peer_reads_done), the caller's
/// word that the peers' READs completed; dropping it before deregisters it
/// and leaks the buffer. [`peer_reads_outlive_dereg`](Self::peer_reads_outlive_dereg)
/// says whether this applies; on rxe and hardware it never does.
///
/// The buffer moved into the region is gone from the caller's hands:
/// ```compile_fail,E0382
/// # fn f(pd: &uverbs::ProtectionDomain) {
/// let buf = vec![0u8; 4096];
/// let mr = pd.reg_buffer(buf, uverbs::AccessFlags::LOCAL_WRITE).unwrap();
/// drop(buf); // error: use of moved value
/// # }
/// ```
/// It cannot be taken out of the region:
/// ```compile_fail,E0616
/// # fn f(pd: &uverbs::ProtectionDomain) {
/// let mr = pd.reg_buffer(vec![0u8; 4096], uverbs::AccessFlags::LOCAL_WRITE).unwrap();
/// let v: Vec<u8> = mr.buffer; // error: field `buffer` is private
/// # }
/// ```
/// Nor reallocated: writing goes through a fixed-size slice.
/// ```compile_fail,E0599
/// # fn f(pd: &uverbs::ProtectionDomain) {
/// let mut mr = pd.reg_buffer(vec![0u8; 4096], uverbs::AccessFlags::LOCAL_WRITE).unwrap();
/// mr.buffer_mut().push(1); // error: no method `push` on `[u8]`
/// # }
/// ```
pub struct BufferMr<B: StableBuffer> {
    // Always `Some` outside of `Drop` and the consuming methods.
    parts: Option<Parts<B>>,
    /// Set when a replacement by [`apply`](BufferMr::apply) left a
    /// registration of the buffer behind that no object owns
    /// ([`ReregError::new_range_still_registered`]): it reaches the buffer
    /// until the context is closed, which this region keeps open, so the
    /// buffer is never handed back nor freed.
    reached_elsewhere: bool,
    /// Set while a peer may have READs of the buffer that deregistration
    /// would not stop: the driver's `DEREG_MR` does not fence READ
    /// responses (siw) and the region has let peers read. The buffer is
    /// then handed back only after
    /// [`assume_peer_reads_done`](BufferMr::assume_peer_reads_done).
    peer_reads_unfenced: bool,
}

/// Why a [`BufferMr`] whose buffer an abandoned registration still reaches
/// hands it back no more.
const REACHED_ELSEWHERE: &str = "a failed replacement left a registration of this buffer in the kernel until the context is closed (ReregError::new_range_still_registered): the buffer is never handed back; dropping the region leaks it";

/// Why a [`BufferMr`] that peers may still be reading through siw hands its
/// buffer back no more.
const PEER_READS_UNFENCED: &str = "siw sends an RDMA READ response from the registered pages even after DEREG_MR returns (it checks the key once per READ and TCP holds the pages until acknowledged), so a buffer peers could read comes back only after `assume_peer_reads_done` (the peers' READs of it have completed); dropping the region deregisters it and leaks the buffer";

/// The region and its buffer. The buffer is in a `ManuallyDrop` so that it
/// is freed only where the code says so, after the kernel let go of it: a
/// panic (say, in a user's fork [`Advisor`](crate::fork::Advisor)) that
/// unwinds through a registration leaks the buffer instead of freeing it
/// under the device.
struct Parts<B> {
    mr: MemoryRegion,
    buffer: ManuallyDrop<B>,
}

/// A successful [`BufferMr::retarget`] (or
/// [`RemoteBufferMr::retarget`](crate::mr::RemoteBufferMr::retarget), with `M`
/// that region type).
#[derive(Debug)]
pub struct Retargeted<B: StableBuffer, M = BufferMr<B>> {
    /// The region, now over the new buffer.
    pub mr: M,
    /// The previous buffer; the kernel no longer references it.
    pub old: B,
    /// In place or replaced (then publish the new keys).
    pub path: ReregPath,
    /// Set when un-marking the old buffer's pages for fork failed
    /// ([`ReregOutcome::DoForkOld`](crate::mr::ReregOutcome::DoForkOld)): the
    /// region is valid, the old pages stay excluded from forked children.
    pub fork_warning: Option<ReregError>,
}

/// A failed [`BufferMr::dereg`]: the region is handed back, still
/// registered and still owning its buffer (dropping it tries again, and
/// leaks the buffer if that fails too).
#[derive(Debug, thiserror::Error)]
#[error("{error}")]
#[non_exhaustive]
pub struct BufferDeregError<B: StableBuffer> {
    /// The region, still registered.
    pub mr: BufferMr<B>,
    /// Why the kernel refused.
    pub error: Error,
}

crate::error::hands_back_with_error! {
    [B: StableBuffer] BufferDeregError<B>, "the region (which tries again, and leaks the buffer if that fails)";
}

/// A failed [`BufferMr::retarget`]: the outcome, and both buffers.
#[derive(Debug, thiserror::Error)]
#[error("{error}")]
#[non_exhaustive]
pub struct RetargetError<B: StableBuffer, M: fmt::Debug = BufferMr<B>> {
    /// What failed (one of `ibv_rereg_mr`'s outcomes).
    pub error: ReregError,
    /// Where the two buffers are now.
    pub buffers: RetargetBuffers<B, M>,
}

/// Where the buffers are after a failed retarget.
#[derive(Debug)]
pub enum RetargetBuffers<B: StableBuffer, M = BufferMr<B>> {
    /// The region still holds its buffer (unchanged when the error's
    /// [`mr_state`](ReregError::mr_state) is `Old`; otherwise the kernel
    /// also refused to deregister it).
    Kept {
        /// The region with its old buffer.
        mr: M,
        /// The buffer that was to be registered; `None` when a registration
        /// may still reach it (the region is undefined and could not be
        /// deregistered, or [`ReregError::new_range_still_registered`]): it
        /// is then leaked, never freed under the device.
        new: Option<B>,
    },
    /// The failed command left the region undefined, so it was
    /// deregistered: both buffers come back, unregistered.
    Released {
        /// The previously registered buffer.
        old: B,
        /// The buffer that was to be registered.
        new: B,
    },
}

impl<B: StableBuffer, M> Retargeted<B, M> {
    /// The same, with the region wrapped by `f`.
    pub(crate) fn map_region<N>(self, f: impl FnOnce(M) -> N) -> Retargeted<B, N> {
        Retargeted {
            mr: f(self.mr),
            old: self.old,
            path: self.path,
            fork_warning: self.fork_warning,
        }
    }
}

impl<B: StableBuffer, M: fmt::Debug> RetargetError<B, M> {
    /// Why: the outcome (also the field `error`; re-registration's errors
    /// are [`ReregError`]s, not [`Error`]s).
    pub fn error(&self) -> &ReregError {
        &self.error
    }

    /// The outcome, dropping both buffers (a region still holding one
    /// deregisters it as its drop does).
    pub fn into_error(self) -> ReregError {
        self.error
    }

    /// The same, with the kept region (if any) wrapped by `f`.
    pub(crate) fn map_region<N: fmt::Debug>(self, f: impl FnOnce(M) -> N) -> RetargetError<B, N> {
        let buffers = match self.buffers {
            RetargetBuffers::Kept { mr, new } => RetargetBuffers::Kept { mr: f(mr), new },
            RetargetBuffers::Released { old, new } => RetargetBuffers::Released { old, new },
        };
        RetargetError {
            error: self.error,
            buffers,
        }
    }
}

impl<B: StableBuffer> fmt::Debug for BufferMr<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BufferMr")
            .field("mr", &self.parts().mr)
            .finish_non_exhaustive()
    }
}

impl<B: StableBuffer> BufferMr<B> {
    pub(crate) fn new(mr: MemoryRegion, buffer: B) -> Self {
        Self::from_parts(mr, ManuallyDrop::new(buffer))
    }

    fn from_parts(mr: MemoryRegion, buffer: ManuallyDrop<B>) -> Self {
        let mut region = BufferMr {
            parts: Some(Parts { mr, buffer }),
            reached_elsewhere: false,
            peer_reads_unfenced: false,
        };
        region.note_peer_reads();
        region
    }

    /// The region over its old buffer after a refused change (retarget,
    /// dereg): its note of peer READs as before the call, which the caller
    /// had cleared (the methods that hand buffers back refuse otherwise).
    fn kept(mr: MemoryRegion, buffer: ManuallyDrop<B>) -> Self {
        let mut region = BufferMr::from_parts(mr, buffer);
        region.peer_reads_unfenced = false;
        region
    }

    /// Notes that peers may READ the buffer now, where deregistration would
    /// not stop their READs (siw). Called after every registration and
    /// access change: the note stays until
    /// [`assume_peer_reads_done`](Self::assume_peer_reads_done), since a
    /// READ taken under an earlier access may still be sending.
    fn note_peer_reads(&mut self) {
        let mr = &self.parts().mr;
        if mr.access().contains(AccessFlags::REMOTE_READ)
            && !mr.context().inner.provider.dereg_fences_peer_reads()
        {
            self.peer_reads_unfenced = true;
        }
    }

    /// True while [`dereg`](Self::dereg) and [`retarget`](Self::retarget)
    /// refuse to hand the buffer back because a peer's RDMA READ of it may
    /// outlive deregistration: on siw, once the region has had
    /// [`AccessFlags::REMOTE_READ`], until
    /// [`assume_peer_reads_done`](Self::assume_peer_reads_done). Always
    /// false where `DEREG_MR` fences READs (rxe, hardware).
    pub fn peer_reads_outlive_dereg(&self) -> bool {
        self.peer_reads_unfenced
    }

    /// Says that no RDMA READ of the buffer is in flight or will come, so
    /// that [`dereg`](Self::dereg) and [`retarget`](Self::retarget) may
    /// hand it back (and dropping the region frees it) on siw.
    ///
    /// siw, unlike rxe and hardware, keeps sending a READ response from the
    /// registered pages after `DEREG_MR` returns; TCP may even resend them
    /// until the peer acknowledges. Handed back at once, the buffer could
    /// be refilled (or, freed, reused for anything) while those bytes still
    /// go to the peer. The usual proof is the peer's word: a message it
    /// sends after its READs of the region completed, or its orderly close.
    ///
    /// # Safety
    ///
    /// Every RDMA READ that a peer issued against this region (under any
    /// of its keys) has completed at that peer, and no peer issues another
    /// before the region is deregistered. Nothing in this process can
    /// check it; breaking it does not corrupt this process, but can send
    /// whatever the buffer holds later to the peer.
    ///
    /// ```no_run
    /// # fn f(mut mr: uverbs::BufferMr<Vec<u8>>) -> Result<(), Box<dyn std::error::Error>> {
    /// // ... the peer's message "my READs are done" arrived ...
    /// // SAFETY: the peer READs this region only before that message.
    /// unsafe { mr.assume_peer_reads_done() };
    /// let buffer: Vec<u8> = mr.dereg()?;
    /// # Ok(()) }
    /// ```
    pub unsafe fn assume_peer_reads_done(&mut self) {
        self.peer_reads_unfenced = false;
    }

    /// Why the buffer may not be handed back now, if it may not: an
    /// abandoned registration still reaches it, or a peer's READ may still
    /// be sending from it (siw). `dereg` and `retarget` ask the same.
    fn hand_back_refusal(&self) -> Option<&'static str> {
        if self.reached_elsewhere {
            Some(REACHED_ELSEWHERE)
        } else {
            self.peer_reads_unfenced.then_some(PEER_READS_UNFENCED)
        }
    }

    fn parts(&self) -> &Parts<B> {
        self.parts
            .as_ref()
            .expect("a BufferMr holds its parts until it is consumed")
    }

    fn parts_mut(&mut self) -> &mut Parts<B> {
        self.parts
            .as_mut()
            .expect("a BufferMr holds its parts until it is consumed")
    }

    fn into_parts(mut self) -> Parts<B> {
        self.parts
            .take()
            .expect("a BufferMr holds its parts until it is consumed")
    }

    /// The region, for changes that cannot make it remotely writable.
    pub(crate) fn mr_mut(&mut self) -> &mut MemoryRegion {
        &mut self.parts_mut().mr
    }

    /// The first byte, with write permission, and the length: for
    /// [`RemoteBufferMr`](crate::mr::RemoteBufferMr), which reaches the bytes
    /// only through volatile and atomic accesses.
    pub(crate) fn registered_mut(&mut self) -> (*mut u8, usize) {
        let buffer = &mut self.parts_mut().buffer;
        (buffer.as_mut_ptr(), buffer.len())
    }

    /// The registered bytes.
    pub fn buffer(&self) -> &[u8] {
        self.parts().buffer.as_slice()
    }

    /// The registered bytes, for writing.
    pub fn buffer_mut(&mut self) -> &mut [u8] {
        self.parts_mut().buffer.as_mut_slice()
    }

    /// Changes the access flags in place; see [`MemoryRegion::set_access`].
    /// Access a remote peer could write through
    /// ([`AccessFlags::lets_peers_write`]) is refused (`Input`, nothing
    /// sent): this region hands out plain slices. Register such memory with
    /// [`ProtectionDomain::reg_remote_buffer`].
    pub fn set_access(&mut self, access: AccessFlags) -> Result<(), ReregError> {
        self.apply(&Rereg::new().access(access), ReregFallback::Strict)
            .map(drop)
    }

    /// Moves the region to another PD; see [`MemoryRegion::set_pd`].
    pub fn set_pd(&mut self, pd: &ProtectionDomain) -> Result<(), ReregError> {
        self.parts_mut().mr.set_pd(pd)
    }

    /// Applies a change set of PD and/or access with a fallback policy; see
    /// [`MemoryRegion::apply`]. The buffer stays the same, so a change set
    /// with a translation is refused (`Input`, nothing sent): use
    /// [`retarget`](Self::retarget). So is access a remote peer could write
    /// through, as in [`set_access`](Self::set_access). A failed replacement
    /// whose new registration of the buffer could not be released
    /// ([`ReregError::new_range_still_registered`]) keeps the buffer for
    /// good: see [`dereg`](Self::dereg).
    ///
    /// ```no_run
    /// # fn f(mr: &mut uverbs::BufferMr<Vec<u8>>, pd2: &uverbs::ProtectionDomain) -> Result<(), uverbs::mr::ReregError> {
    /// use uverbs::mr::{Rereg, ReregFallback};
    /// use uverbs::AccessFlags;
    /// let change = Rereg::new().access(AccessFlags::LOCAL_WRITE).pd(pd2);
    /// let path = mr.apply(&change, ReregFallback::Replace)?;
    /// # Ok(()) }
    /// ```
    pub fn apply(
        &mut self,
        change: &Rereg<'_>,
        fallback: ReregFallback,
    ) -> Result<ReregPath, ReregError> {
        self.refuse_translation(change)?;
        if change
            .new_access()
            .is_some_and(AccessFlags::lets_peers_write)
        {
            return Err(self.parts().mr.input_error(PEER_WRITABLE_BUFFER));
        }
        self.apply_to_region(change, fallback)
    }

    /// [`apply`](Self::apply) with any access, remotely writable included:
    /// for [`RemoteBufferMr`](crate::mr::RemoteBufferMr), which hands out no
    /// plain slices. A translation is still refused (`Input`, nothing sent).
    pub(crate) fn apply_any_access(
        &mut self,
        change: &Rereg<'_>,
        fallback: ReregFallback,
    ) -> Result<ReregPath, ReregError> {
        self.refuse_translation(change)?;
        self.apply_to_region(change, fallback)
    }

    /// [`MemoryRegion::apply`] of a change set without translation, noting
    /// a replacement whose new registration of the buffer was abandoned.
    fn apply_to_region(
        &mut self,
        change: &Rereg<'_>,
        fallback: ReregFallback,
    ) -> Result<ReregPath, ReregError> {
        let result = self.parts_mut().mr.apply(change, fallback);
        if result
            .as_ref()
            .is_err_and(ReregError::new_range_still_registered)
        {
            self.reached_elsewhere = true;
        }
        self.note_peer_reads();
        result
    }

    /// `Input` (nothing sent) for a change set with a translation: the
    /// buffer is owned, so it changes only through [`retarget`](Self::retarget).
    fn refuse_translation(&self, change: &Rereg<'_>) -> Result<(), ReregError> {
        if change.flags().contains(ReregFlags::TRANSLATION) {
            let mr = &self.parts().mr;
            return Err(mr.input_error("an owned buffer changes translation through retarget"));
        }
        Ok(())
    }

    /// Changes PD and/or access with a fallback policy, with
    /// [`MemoryRegion::rereg_with`]'s arguments; the same as
    /// [`apply`](Self::apply). [`ReregFlags::TRANSLATION`] is refused
    /// (`Input`): use [`retarget`](Self::retarget).
    pub fn rereg_with(
        &mut self,
        fallback: ReregFallback,
        flags: ReregFlags,
        pd: Option<&ProtectionDomain>,
        access: AccessFlags,
    ) -> Result<ReregPath, ReregError> {
        self.rereg_pd_access(fallback, flags, pd, access, false)
    }

    /// The body of both regions' `rereg_with`: [`apply`](Self::apply), or
    /// with `any_access` [`apply_any_access`](Self::apply_any_access), of
    /// the change set of `flags`, `pd` and `access`.
    pub(crate) fn rereg_pd_access(
        &mut self,
        fallback: ReregFallback,
        flags: ReregFlags,
        pd: Option<&ProtectionDomain>,
        access: AccessFlags,
        any_access: bool,
    ) -> Result<ReregPath, ReregError> {
        // SAFETY: both `apply`s refuse TRANSLATION before anything is sent,
        // and without it no new memory is handed to the device (a
        // replacement registers the buffer this region owns and keeps
        // registered).
        let change = unsafe { Rereg::raw(flags, pd, std::ptr::null_mut(), 0, access) };
        if any_access {
            self.apply_any_access(&change, fallback)
        } else {
            self.apply(&change, fallback)
        }
    }

    /// Points the region at `new` (`IBV_REREG_MR_CHANGE_TRANSLATION`) and
    /// hands the previous buffer back once the kernel no longer references
    /// it. With [`ReregFallback::Replace`] this works on devices that cannot
    /// change translation in place (rxe, siw).
    ///
    /// On failure both buffers come back with the outcome: the region keeps
    /// its old buffer when it is still valid, and is deregistered when the
    /// failed command left it undefined. On siw, a region peers could READ
    /// is refused first (`Input`, nothing sent, the region kept) until
    /// [`assume_peer_reads_done`](Self::assume_peer_reads_done), as
    /// [`dereg`](Self::dereg) is.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use uverbs::mr::ReregFallback;
    /// use uverbs::AccessFlags;
    /// let ctx = uverbs::devices()?.first().ok_or("no device")?.open()?;
    /// let pd = ctx.alloc_pd()?;
    /// let mr = pd.reg_buffer(vec![0u8; 4096], AccessFlags::LOCAL_WRITE)?;
    /// let done = mr.retarget(vec![0u8; 8192], ReregFallback::Replace)?;
    /// println!("{:?}: rkey {:#x}; old buffer of {} bytes is free", done.path, done.mr.rkey(), done.old.len());
    /// # Ok(()) }
    /// ```
    pub fn retarget(
        self,
        new: B,
        fallback: ReregFallback,
    ) -> Result<Retargeted<B>, RetargetError<B>> {
        if let Some(reason) = self.hand_back_refusal() {
            let error = self.parts().mr.input_error(reason);
            return Err(RetargetError {
                error,
                buffers: RetargetBuffers::Kept {
                    mr: self,
                    new: Some(new),
                },
            });
        }
        let Parts {
            mut mr,
            buffer: old,
        } = self.into_parts();
        // Until the kernel's answer says which registration reaches which
        // buffer, neither may be freed: if anything below unwinds, both leak.
        let mut new = ManuallyDrop::new(new);
        let (addr, length) = (new.as_mut_ptr(), new.len());
        let handle = mr.handle();
        // SAFETY: on success the region owns `new`, whose address is stable
        // (StableBuffer) and which is deregistered before it is dropped; on
        // failure `new` is handed back only where no registration reaches it.
        let result = unsafe {
            mr.rereg_with(
                fallback,
                ReregFlags::TRANSLATION,
                None,
                addr,
                length,
                AccessFlags::empty(),
            )
        };
        // Taking a buffer out of its `ManuallyDrop` says "nothing registered
        // reaches it any more".
        let free = ManuallyDrop::into_inner;
        match result {
            Ok(path) => Ok(Retargeted {
                mr: BufferMr::from_parts(mr, new),
                old: free(old),
                path,
                fork_warning: None,
            }),
            Err(error) if error.mr_state() == MrState::New => {
                let path = if mr.handle() == handle {
                    ReregPath::InPlace
                } else {
                    ReregPath::Replaced
                };
                Ok(Retargeted {
                    mr: BufferMr::from_parts(mr, new),
                    old: free(old),
                    path,
                    fork_warning: Some(error),
                })
            }
            Err(error) if error.mr_state() == MrState::Old => {
                let new = (!error.new_range_still_registered()).then(|| free(new));
                Err(RetargetError {
                    error,
                    buffers: RetargetBuffers::Kept {
                        mr: BufferMr::kept(mr, old),
                        new,
                    },
                })
            }
            // Undefined: the registration may reach either buffer.
            Err(error) => match mr.dereg() {
                Ok(()) => Err(RetargetError {
                    error,
                    buffers: RetargetBuffers::Released {
                        old: free(old),
                        new: free(new),
                    },
                }),
                Err(DeregError { mr, .. }) => Err(RetargetError {
                    error,
                    buffers: RetargetBuffers::Kept {
                        mr: BufferMr::kept(mr, old),
                        new: None,
                    },
                }),
            },
        }
    }

    /// Deregisters and hands the buffer back; on failure the region comes
    /// back still registered, with its buffer. On siw, a region peers could
    /// READ is refused first ([`Error::InvalidInput`], nothing sent, still
    /// registered) until [`assume_peer_reads_done`](Self::assume_peer_reads_done):
    /// see the type's docs. After a failed replacement
    /// that left a registration of the buffer behind
    /// ([`ReregError::new_range_still_registered`] from
    /// [`apply`](Self::apply) or [`rereg_with`](Self::rereg_with)) nothing
    /// is sent and the region comes back with [`Error::InvalidInput`]: that
    /// registration reaches the buffer until the context is closed, so it is
    /// never handed back; dropping the region deregisters it and leaks the
    /// buffer. [`retarget`](Self::retarget) refuses then too.
    #[doc(alias = "ibv_dereg_mr")]
    #[doc(alias = "rdma_dereg_mr")]
    pub fn dereg(self) -> Result<B, BufferDeregError<B>> {
        if let Some(reason) = self.hand_back_refusal() {
            let device = &self.parts().mr.context().inner.device;
            let error = Error::input(Op::DeregMr, device, reason);
            return Err(BufferDeregError { mr: self, error });
        }
        let Parts { mr, buffer } = self.into_parts();
        match mr.dereg() {
            Ok(()) => Ok(ManuallyDrop::into_inner(buffer)),
            Err(DeregError { mr, error }) => Err(BufferDeregError {
                mr: BufferMr::kept(mr, buffer),
                error,
            }),
        }
    }
}

impl<B: StableBuffer> Deref for BufferMr<B> {
    type Target = MemoryRegion;

    fn deref(&self) -> &MemoryRegion {
        &self.parts().mr
    }
}

impl<B: StableBuffer> Drop for BufferMr<B> {
    fn drop(&mut self) {
        if let Some(Parts { mr, buffer }) = self.parts.take() {
            // Freed only once the kernel let go; if it refused (or this is a
            // forked child, where the registration is the parent's), or an
            // abandoned registration still reaches the buffer, or a peer's
            // READ may still be sending from it (siw), the pages may still
            // be reached: leak them.
            if mr.dereg().is_ok() && self.hand_back_refusal().is_none() {
                drop(ManuallyDrop::into_inner(buffer));
            }
        }
    }
}
