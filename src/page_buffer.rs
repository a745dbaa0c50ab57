//! [`PageBuffer`]: zeroed, page-aligned anonymous memory of the process's
//! own, the buffer to register when fork safety is on (a heap allocation
//! may share its pages with other data that a forked child then misses).

use std::fmt;
use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;

use rustix::mm::{MapFlags, ProtFlags};

/// A private anonymous mapping of at least `len` bytes, zeroed,
/// page-aligned and unmapped on drop: an address-stable buffer
/// ([`StableBuffer`](crate::mr::StableBuffer)) whose pages hold nothing else.
///
/// Why not a `Vec<u8>`: with fork safety on, a registered range is marked
/// `MADV_DONTFORK`, whole pages at a time; a heap buffer shares its first
/// and last pages with other allocations, which a forked child would then
/// find missing. A `PageBuffer`'s pages are its own.
///
/// ```no_run
/// use uverbs::{AccessFlags, PageBuffer};
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let pd = uverbs::Device::first()?.open()?.alloc_pd()?;
/// let mut buf = PageBuffer::new(1 << 20)?;
/// buf[..5].copy_from_slice(b"hello");
/// let mr = pd.reg_buffer(buf, AccessFlags::LOCAL_WRITE)?;
/// assert_eq!(mr.addr() % 4096, 0);
/// # Ok(()) }
/// ```
pub struct PageBuffer {
    /// The mapping's first byte (dangling, never dereferenced, when
    /// `len` is 0: nothing is mapped then).
    ptr: NonNull<u8>,
    /// The bytes the buffer holds.
    len: usize,
}

// SAFETY: the mapping is private to this value (no other handle reaches
// it), as a Box<[u8]>'s allocation is.
unsafe impl Send for PageBuffer {}
// SAFETY: shared access reads only; writes need &mut.
unsafe impl Sync for PageBuffer {}

impl PageBuffer {
    /// Maps `len` zeroed bytes (rounded up to whole pages in the mapping;
    /// the buffer holds exactly `len`). Fails with the errno of `mmap`
    /// (`ENOMEM`: no memory, or the address space is full).
    pub fn new(len: usize) -> std::io::Result<PageBuffer> {
        if len == 0 {
            return Ok(PageBuffer {
                ptr: NonNull::dangling(),
                len: 0,
            });
        }
        // SAFETY: a new private anonymous mapping at an address the
        // kernel chooses aliases no memory of the process.
        let ptr = unsafe {
            rustix::mm::mmap_anonymous(
                std::ptr::null_mut(),
                len,
                ProtFlags::READ | ProtFlags::WRITE,
                MapFlags::PRIVATE,
            )
        }?;
        let ptr = NonNull::new(ptr.cast::<u8>()).ok_or(std::io::ErrorKind::OutOfMemory)?;
        Ok(PageBuffer { ptr, len })
    }
}

impl PageBuffer {
    /// A buffer holding a copy of `bytes`.
    pub fn copied_from(bytes: &[u8]) -> std::io::Result<PageBuffer> {
        let mut buf = PageBuffer::new(bytes.len())?;
        buf.copy_from_slice(bytes);
        Ok(buf)
    }
}

impl Drop for PageBuffer {
    fn drop(&mut self) {
        if self.len == 0 {
            return;
        }
        // SAFETY: the mapping `new` made, `len` bytes at `ptr`, which no
        // reference outlives (they borrow self). A failure leaves it mapped
        // (leaked), which is safe.
        let _ = unsafe { rustix::mm::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

impl Deref for PageBuffer {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        // SAFETY: `len` readable bytes at `ptr` (none, dangling but aligned,
        // when 0), alive as long as self and written only through &mut self.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl DerefMut for PageBuffer {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in deref, and &mut self makes this the only reference.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl fmt::Debug for PageBuffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PageBuffer")
            .field("addr", &self.ptr)
            .field("len", &self.len)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_page_buffer_is_zeroed_aligned_and_writable() {
        let page = crate::page::page_size();
        for len in [0, 1, page - 1, page, 3 * page + 5] {
            let mut buf = PageBuffer::new(len).unwrap();
            assert_eq!(buf.len(), len);
            assert!(buf.iter().all(|&b| b == 0), "{len}: zeroed");
            if len > 0 {
                assert_eq!(buf.as_ptr() as usize % page, 0, "{len}: aligned");
                buf[len - 1] = 7;
                assert_eq!(buf[len - 1], 7);
            }
        }
        assert_eq!(&PageBuffer::copied_from(b"abc").unwrap()[..], b"abc");
    }
}
