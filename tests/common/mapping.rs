//! Memory to register or mark: page-aligned anonymous mappings, untouched
//! reserved-free regions used by raw address, and a mapping with a hole.
//!
//! Self-contained (no `super::`), so that benches/fork_ranges.rs,
//! oracle/benches/fork_tracker.rs and the single-test binary
//! tests/fork_global_env.rs can use it through `#[path]` as well.

// Each test binary (and the bench) uses a different subset.
#![allow(dead_code)]

use std::ffi::c_void;
use std::ptr::NonNull;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use memmap2::MmapMut;
use uverbs::mr::StableBuffer;

/// The system page size, from libc as the library takes it (src/page.rs:
/// rustix's own auxv reader does not run under valgrind).
pub fn page_size() -> usize {
    // SAFETY: `sysconf` takes a constant and touches no memory of ours.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(size).expect("sysconf(_SC_PAGESIZE)")
}

/// A page-aligned anonymous read-write mapping of `len` bytes.
pub fn anon(len: usize) -> MmapMut {
    let map = MmapMut::map_anon(len)
        .unwrap_or_else(|e| panic!("mmap of {len} anonymous bytes failed: {e}"));
    assert_eq!(
        map.as_ptr() as usize % page_size(),
        0,
        "an anonymous mapping is page-aligned"
    );
    map
}

/// Untouched private anonymous memory (`MAP_NORESERVE`, so it costs nothing
/// until written), used through raw addresses only; unmapped on drop.
pub struct Untouched {
    /// The first byte.
    pub addr: usize,
    /// The length in bytes.
    pub len: usize,
}

impl Untouched {
    /// Maps `len` bytes at an address the kernel chooses.
    pub fn new(len: usize) -> Untouched {
        // SAFETY: a fresh private anonymous mapping at a kernel-chosen
        // address aliases nothing; it is used through raw addresses only and
        // unmapped in Drop.
        let ptr = unsafe {
            rustix::mm::mmap_anonymous(
                std::ptr::null_mut(),
                len,
                rustix::mm::ProtFlags::READ | rustix::mm::ProtFlags::WRITE,
                rustix::mm::MapFlags::PRIVATE | rustix::mm::MapFlags::NORESERVE,
            )
        }
        .unwrap_or_else(|e| panic!("mmap of {len} untouched bytes failed: {e}"));
        Untouched {
            addr: ptr as usize,
            len,
        }
    }
}

impl Drop for Untouched {
    fn drop(&mut self) {
        // SAFETY: exactly the mapping made in `new`, no longer used.
        let _ = unsafe { rustix::mm::munmap(self.addr as *mut _, self.len) };
    }
}

/// A 4-page mapping whose last page is unmapped; unmaps the rest on drop.
pub struct Holed {
    /// The first byte of the mapping.
    pub base: *mut u8,
    /// The page size.
    pub page: usize,
}

impl Holed {
    /// Three mapped pages filled with 0x44, then a hole.
    pub fn new() -> Holed {
        let page = page_size();
        let mut map = anon(4 * page);
        map.fill(0x44);
        let base = map.as_mut_ptr();
        std::mem::forget(map); // unmapped by hand, only what is still ours
        let last = NonNull::new(base.wrapping_add(3 * page).cast::<c_void>()).expect("non-null");
        // SAFETY: the last page of our own mapping, which nothing else uses.
        unsafe { nix::sys::mman::munmap(last, page) }.expect("munmap of the last page");
        Holed { base, page }
    }
}

impl Drop for Holed {
    fn drop(&mut self) {
        let first = NonNull::new(self.base.cast::<c_void>()).expect("non-null");
        // SAFETY: the 3 remaining pages of our own mapping; no MR uses them.
        let _ = unsafe { nix::sys::mman::munmap(first, 3 * self.page) };
    }
}

/// A registrable buffer that counts its drops: a mapping of its own, not
/// heap memory, so that fork safety's MADV_DONTFORK on it (the fork-forced
/// configuration) takes no allocator page from a forked child.
pub struct Watched(MmapMut, Arc<AtomicUsize>);

impl Watched {
    /// A mapping holding `bytes`, counted in `drops` when dropped.
    pub fn new(bytes: &[u8], drops: &Arc<AtomicUsize>) -> Self {
        let mut map = anon(bytes.len());
        map.copy_from_slice(bytes);
        Watched(map, drops.clone())
    }
}

// SAFETY: the mapping is only reached through this trait and never moved
// or resized while it lives.
unsafe impl StableBuffer for Watched {
    fn as_mut_ptr(&mut self) -> *mut u8 {
        self.0.as_mut_ptr()
    }
    fn len(&self) -> usize {
        self.0.len()
    }
    fn as_slice(&self) -> &[u8] {
        &self.0
    }
    fn as_mut_slice(&mut self) -> &mut [u8] {
        &mut self.0
    }
}

impl Drop for Watched {
    fn drop(&mut self) {
        self.1.fetch_add(1, Ordering::SeqCst);
    }
}
