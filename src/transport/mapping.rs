//! Memory the kernel shares with this process through the command file:
//! the rxe queues (CQ, SQ, RQ) are `mmap`ed from the uverbs file at offsets
//! the create commands answer.
//!
//! **Not inherited.** Every ring mapping is `MADV_DONTFORK`: a forked child
//! has no mapping at those addresses. The rings are `MAP_SHARED`, so a
//! child that inherited them would share the parent's live rings with the
//! parent and the kernel, and any store there (a stray pointer in unsafe
//! code, or an entry point that forgot its process check) would post, arm
//! or consume on the parent's objects. Without the mapping such a touch
//! faults instead. The crate's entry points refuse a child before touching
//! a ring anyway ([`Error::ForeignProcess`](crate::Error::ForeignProcess)),
//! so no correct program notices. Since the child has no mapping there, its
//! copy of a `SharedMapping` unmaps nothing when dropped: the child's own
//! mappings may since occupy those addresses.

use std::fmt;
use std::ptr::NonNull;

use crate::error::Errno;
use crate::process::Generation;

/// One `MAP_SHARED`, read-write mapping, unmapped on drop; not inherited by
/// forked children (`MADV_DONTFORK`, see the module text).
///
/// The kernel reads and writes it concurrently (it holds its own reference
/// on the pages, so unmapping before or after the object is destroyed is
/// both safe for the kernel). This type only owns the address range; the
/// typed views over it (rings) say how its bytes may be touched.
pub struct SharedMapping {
    ptr: NonNull<u8>,
    len: usize,
    /// The process that mapped it: the only one that has the mapping.
    origin: Generation,
    /// Under Miri only (it cannot map files): the fake kernel's heap pages
    /// this mapping stands for, kept alive by it and never unmapped.
    #[cfg(miri)]
    heap: Option<std::sync::Arc<HeapPages>>,
}

// SAFETY: the mapping is plain memory owned by this value; every access goes
// through raw pointers whose users (ring views) synchronise with atomics.
unsafe impl Send for SharedMapping {}
// SAFETY: as above: `&SharedMapping` hands out only a raw pointer and a length.
unsafe impl Sync for SharedMapping {}

impl SharedMapping {
    /// Maps `len` bytes of `fd` at `offset`, shared and read-write.
    ///
    /// # Safety
    ///
    /// `offset` and `len` must name memory the kernel prepared for this
    /// process on `fd` (an offset a create command answered); the mapping
    /// must not alias memory that Rust code treats as its own. (Public for
    /// transports outside this crate, which answer
    /// [`Transport::map_queue`](super::Transport::map_queue) with it.)
    pub unsafe fn map(
        fd: std::os::fd::BorrowedFd<'_>,
        offset: u64,
        len: usize,
    ) -> Result<SharedMapping, Errno> {
        if len == 0 {
            return Err(Errno::INVAL);
        }
        use rustix::mm::{MapFlags, ProtFlags};
        // SAFETY: a null hint lets the kernel pick fresh addresses, so no
        // existing Rust memory is replaced; what the pages are is the
        // caller's promise.
        let ptr = unsafe {
            rustix::mm::mmap(
                std::ptr::null_mut(),
                len,
                ProtFlags::READ | ProtFlags::WRITE,
                MapFlags::SHARED,
                fd,
                offset,
            )
        }?;
        let ptr = NonNull::new(ptr.cast::<u8>()).ok_or(Errno::FAULT)?;
        let mapping = SharedMapping {
            ptr,
            len,
            origin: Generation::current(),
            #[cfg(miri)]
            heap: None,
        };
        // SAFETY: exactly the fresh mapping above (page-aligned start, as
        // mmap returns it); DONTFORK changes only what a future fork copies,
        // never the pages or their contents here.
        unsafe {
            rustix::mm::madvise(ptr.as_ptr().cast(), len, rustix::mm::Advice::LinuxDontFork)
        }?;
        // On an error `mapping` drops: unmapped again (this process mapped it).
        Ok(mapping)
    }

    /// Under Miri, which cannot map a file: a mapping of the first `len`
    /// bytes of heap pages a fake kernel serves as a ring, so the ring views
    /// and the `OwnedQp` stack run on the fakes there. Two mappings of the
    /// same pages see the same bytes, like two `mmap`s of one memfd; the
    /// pages outlive every mapping of them. Never built outside Miri.
    #[cfg(miri)]
    pub(crate) fn over_heap(pages: &std::sync::Arc<HeapPages>, len: usize) -> SharedMapping {
        assert!(len > 0 && len <= pages.len(), "a mapping inside the pages");
        SharedMapping {
            ptr: pages.as_ptr(),
            len,
            origin: Generation::current(),
            heap: Some(pages.clone()),
        }
    }

    /// The first byte.
    pub fn as_ptr(&self) -> NonNull<u8> {
        self.ptr
    }

    /// The mapped length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always false: a mapping has at least one byte.
    pub fn is_empty(&self) -> bool {
        false
    }
}

impl fmt::Debug for SharedMapping {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SharedMapping")
            .field("ptr", &self.ptr)
            .field("len", &self.len)
            .finish()
    }
}

impl Drop for SharedMapping {
    fn drop(&mut self) {
        // In a forked child the range was never inherited (DONTFORK): what
        // is there now, if anything, is the child's own.
        if !self.origin.is_current() {
            return;
        }
        // Heap pages under Miri: only the reference to them goes.
        #[cfg(miri)]
        if self.heap.is_some() {
            return;
        }
        // SAFETY: exactly the range mmap returned, unmapped once; the views
        // borrowing it are gone (they borrow `self`).
        let _ = unsafe { rustix::mm::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

/// Zeroed, page-aligned heap memory a fake kernel serves as a ring under
/// Miri, in place of a memfd (Miri has no shared file mappings). The fake
/// keeps one reference and reads and writes the bytes through
/// [`as_ptr`](Self::as_ptr), as the kernel would through its own mapping;
/// every [`SharedMapping::over_heap`] of it keeps another.
#[cfg(miri)]
#[derive(Debug)]
pub(crate) struct HeapPages {
    ptr: NonNull<u8>,
    layout: std::alloc::Layout,
}

// SAFETY: plain memory owned by this value; like a `SharedMapping`, it is
// only reached through raw pointers whose users synchronise.
#[cfg(miri)]
unsafe impl Send for HeapPages {}
// SAFETY: as above: `&HeapPages` hands out only a raw pointer and a length.
#[cfg(miri)]
unsafe impl Sync for HeapPages {}

#[cfg(miri)]
impl HeapPages {
    /// `len` zeroed bytes (at least one), aligned to a 4 KiB page.
    pub(crate) fn new(len: usize) -> std::sync::Arc<HeapPages> {
        let layout = std::alloc::Layout::from_size_align(len.max(1), 4096).expect("layout");
        // SAFETY: the layout's size is at least 1.
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        let ptr = NonNull::new(ptr).unwrap_or_else(|| std::alloc::handle_alloc_error(layout));
        std::sync::Arc::new(HeapPages { ptr, layout })
    }

    /// The first byte.
    pub(crate) fn as_ptr(&self) -> NonNull<u8> {
        self.ptr
    }

    /// The length in bytes.
    pub(crate) fn len(&self) -> usize {
        self.layout.size()
    }
}

#[cfg(miri)]
impl Drop for HeapPages {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout, freed once; every
        // mapping of it held a reference, so none is left.
        unsafe { std::alloc::dealloc(self.ptr.as_ptr(), self.layout) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Seek, SeekFrom, Write};
    use std::os::fd::AsFd;

    #[test]
    fn a_file_range_is_shared_both_ways_and_unmapped_on_drop() {
        // An anonymous file: nothing to name or remove afterwards.
        let fd = rustix::fs::memfd_create("uverbs-map", rustix::fs::MemfdFlags::CLOEXEC).unwrap();
        let mut file = std::fs::File::from(fd);
        file.write_all(&[7u8; 8192]).unwrap();
        let page = crate::page::page_size();
        // SAFETY: a file of our own; nothing else maps it.
        let map = unsafe { SharedMapping::map(file.as_fd(), page as u64, page) }.unwrap();
        assert_eq!(map.len(), page);
        // SAFETY: inside the mapping, which nothing else references.
        unsafe {
            assert_eq!(*map.as_ptr().as_ptr(), 7);
            *map.as_ptr().as_ptr() = 9;
        }
        file.seek(SeekFrom::Start(page as u64)).unwrap();
        let mut byte = [0u8; 1];
        file.read_exact(&mut byte).unwrap();
        assert_eq!(byte[0], 9, "a store through the mapping reaches the file");
        let inode = rustix::fs::fstat(&file).unwrap().st_ino;
        assert_eq!(mappings_of(inode), 1, "the mapping is in /proc/self/maps");
        drop(map);
        // Not checked by address: another test's thread may map the freed
        // addresses at once. The file is still open, so its inode is ours.
        assert_eq!(mappings_of(inode), 0, "the file range is unmapped");
    }

    /// How many lines of /proc/self/maps map the memfd with this inode.
    fn mappings_of(inode: u64) -> usize {
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        let inode = inode.to_string();
        maps.lines()
            .filter(|line| {
                let mut fields = line.split_whitespace().skip(4);
                fields.next() == Some(inode.as_str())
                    && fields
                        .next()
                        .is_some_and(|path| path.starts_with("/memfd:uverbs-map"))
            })
            .count()
    }

    /// A forked child has no mapping where the parent's ring is (DONTFORK),
    /// and dropping its copy of the `SharedMapping` unmaps nothing, not even
    /// a mapping of the child's own that took the free addresses.
    #[test]
    fn a_forked_child_inherits_no_ring_and_its_copy_unmaps_nothing() {
        let fd =
            rustix::fs::memfd_create("uverbs-map-fork", rustix::fs::MemfdFlags::CLOEXEC).unwrap();
        let page = crate::page::page_size();
        rustix::fs::ftruncate(&fd, page as u64).unwrap();
        // SAFETY: a file of our own; nothing else maps it.
        let map = unsafe { SharedMapping::map(fd.as_fd(), 0, page) }.unwrap();
        let addr = map.as_ptr().as_ptr();
        // The child drops its copy; the parent keeps its own.
        let mut map = Some(map);
        let child = || {
            // SAFETY: madvise(NORMAL) changes nothing; ENOMEM says the
            // range is not mapped here.
            let absent =
                unsafe { rustix::mm::madvise(addr.cast(), page, rustix::mm::Advice::Normal) }
                    == Err(Errno::NOMEM);
            // SAFETY: a fresh anonymous page at the free address
            // (NOREPLACE: fails rather than replace anything).
            let own = unsafe {
                rustix::mm::mmap_anonymous(
                    addr.cast(),
                    page,
                    rustix::mm::ProtFlags::READ,
                    rustix::mm::MapFlags::PRIVATE | rustix::mm::MapFlags::FIXED_NOREPLACE,
                )
            };
            let placed = own.map(|p| p == addr.cast()).unwrap_or(false);
            drop(map.take());
            // SAFETY: as above.
            let kept =
                unsafe { rustix::mm::madvise(addr.cast(), page, rustix::mm::Advice::Normal) }
                    .is_ok();
            match (absent, placed, kept) {
                (true, true, true) => 0,
                (false, _, _) => 1,
                (_, false, _) => 2,
                (_, _, false) => 3,
            }
        };
        // SAFETY: the child makes only system calls (no allocation, no
        // lock).
        let code = unsafe { crate::test_serial::in_child(child) };
        assert_eq!(
            code, 0,
            "1: inherited, 2: could not map there, 3: the copy's drop unmapped it (99: panic)"
        );
        let map = map.expect("the parent's mapping");
        // SAFETY: inside our mapping, which nothing else references.
        unsafe { *map.as_ptr().as_ptr() = 1 };
        drop(map);
    }

    #[test]
    fn an_empty_mapping_is_refused() {
        let file = std::fs::File::open("/dev/zero").unwrap();
        // SAFETY: refused before mmap.
        let err = unsafe { SharedMapping::map(file.as_fd(), 0, 0) }.unwrap_err();
        assert_eq!(err, Errno::INVAL);
    }
}
