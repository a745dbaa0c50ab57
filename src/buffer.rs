//! Registering memory the region owns, so that it cannot be freed while the
//! device may still use it.

use std::fmt;
use std::ops::Deref;

use crate::error::Error;
use crate::flags::AccessFlags;
use crate::mr::{DeregError, MemoryRegion};
use crate::pd::ProtectionDomain;
use crate::ReregError;

/// A buffer whose bytes stay at one address for as long as it lives, even
/// when the value holding it is moved.
///
/// # Safety
///
/// Implementors promise that `as_mut_ptr()` and `len()` describe one valid,
/// writable allocation that does not move or shrink while the value exists
/// and is not accessed mutably through other means than this trait
/// (`Box<[u8]>`, `Vec<u8>` used only through this trait, an `mmap`).
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

// SAFETY: a boxed slice's heap allocation never moves or changes length.
unsafe impl StableBuffer for Box<[u8]> {
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

// SAFETY: the Vec is owned by the BufferMr and only reached through this
// trait, which never grows or shrinks it, so its allocation stays put.
unsafe impl StableBuffer for Vec<u8> {
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

// SAFETY: a mapping stays at its address until it is unmapped on drop.
#[cfg(feature = "memmap2")]
unsafe impl StableBuffer for memmap2::MmapMut {
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

/// A memory region that owns the buffer it registers.
///
/// The buffer cannot be dropped, moved out or reallocated while registered:
/// it is only handed back by [`dereg`](Self::dereg), after the kernel let go.
///
/// ```compile_fail
/// # fn f(pd: &uverbs::ProtectionDomain) {
/// let mr = pd.reg_buffer(vec![0u8; 4096], uverbs::AccessFlags::LOCAL_WRITE).unwrap();
/// let v: Vec<u8> = mr.buffer; // private: the buffer cannot be taken out
/// # }
/// ```
pub struct BufferMr<B: StableBuffer> {
    // Declared first: dropped (deregistered) before the buffer.
    mr: MemoryRegion,
    buffer: B,
}

impl<B: StableBuffer> fmt::Debug for BufferMr<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BufferMr")
            .field("mr", &self.mr)
            .finish_non_exhaustive()
    }
}

impl<B: StableBuffer> BufferMr<B> {
    pub(crate) fn new(mr: MemoryRegion, buffer: B) -> Self {
        BufferMr { mr, buffer }
    }

    /// The registered bytes.
    pub fn buffer(&self) -> &[u8] {
        self.buffer.as_slice()
    }

    /// The registered bytes, for writing.
    pub fn buffer_mut(&mut self) -> &mut [u8] {
        self.buffer.as_mut_slice()
    }

    /// Changes the access flags in place; see [`MemoryRegion::set_access`].
    pub fn set_access(&mut self, access: AccessFlags) -> Result<(), ReregError> {
        self.mr.set_access(access)
    }

    /// Moves the region to another PD; see [`MemoryRegion::set_pd`].
    pub fn set_pd(&mut self, pd: &ProtectionDomain) -> Result<(), ReregError> {
        self.mr.set_pd(pd)
    }

    /// Deregisters and hands the buffer back; on failure the region comes
    /// back still registered.
    #[doc(alias = "ibv_dereg_mr")]
    pub fn dereg(self) -> Result<B, (Self, Error)> {
        let BufferMr { mr, buffer } = self;
        match mr.dereg() {
            Ok(()) => Ok(buffer),
            Err(DeregError { mr, error }) => Err((BufferMr { mr, buffer }, error)),
        }
    }
}

impl<B: StableBuffer> Deref for BufferMr<B> {
    type Target = MemoryRegion;

    fn deref(&self) -> &MemoryRegion {
        &self.mr
    }
}
