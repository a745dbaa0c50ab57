//! Test-only model of the kernel's side of an rxe queue (`rxe_queue.h`), over
//! memory shaped like the kernel's `rxe_queue_buf`.
//!
//! Like the kernel, each side of the model keeps the index it owns in a private
//! copy (`q->index`), publishes it with a store-release and never reads it back
//! from shared memory, so user writes to it are ignored; it reads the index user
//! space owns with a load-acquire and masks it.

use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, Ordering};

use uverbs_uapi::rxe_queue_buf;

use super::queue::HEADER_LEN;

/// A zeroed heap buffer laid out like a kernel-created rxe queue: header with
/// `log2_elem_size` and `index_mask`, then `slots` slots (64-byte aligned).
pub(super) struct TestRing {
    base: NonNull<u8>,
    layout: Layout,
    log2_elem_size: u32,
    index_mask: u32,
}

// SAFETY: the buffer is plain memory owned by the ring; every concurrent access
// to it goes through the header atomics or the ring protocol that they order.
unsafe impl Send for TestRing {}
// SAFETY: as for Send: shared access is only through atomics and the protocol.
unsafe impl Sync for TestRing {}

impl TestRing {
    /// A ring as `rxe_queue_init` makes it, with slots of `1 << log2_elem_size`
    /// bytes (`slots` a power of two).
    pub(super) fn new(log2_elem_size: u32, slots: u32) -> Self {
        assert!(slots.is_power_of_two() && slots >= 2);
        let len = HEADER_LEN + (slots as usize) * (1usize << log2_elem_size);
        Self::with_header(log2_elem_size, slots - 1, len)
    }

    /// A buffer of `len` bytes whose header says `log2_elem_size` and
    /// `index_mask`, whatever they are (for layout checks).
    pub(super) fn with_header(log2_elem_size: u32, index_mask: u32, len: usize) -> Self {
        let layout = Layout::from_size_align(len.max(HEADER_LEN), 64).expect("layout");
        // SAFETY: the layout has a non-zero size (at least the header).
        let base = NonNull::new(unsafe { alloc_zeroed(layout) }).expect("allocation");
        let ring = TestRing {
            base,
            layout,
            log2_elem_size,
            index_mask,
        };
        ring.word(std::mem::offset_of!(rxe_queue_buf, log2_elem_size))
            .store(log2_elem_size, Ordering::Relaxed);
        ring.word(std::mem::offset_of!(rxe_queue_buf, index_mask))
            .store(index_mask, Ordering::Relaxed);
        ring
    }

    /// A view of a ring someone else owns (a [`SharedMapping`] of the fake
    /// transport), laid out as [`new`](Self::new) lays one out; its header
    /// says the slot size and index mask. Wrapped so that it is never
    /// dropped: the memory is not this view's to free.
    ///
    /// # Safety
    ///
    /// `base` is the start of `len` bytes of live memory shaped like an rxe
    /// queue, that stay live for as long as the view is used, and that only
    /// user space's ring code and this view touch meanwhile.
    ///
    /// [`SharedMapping`]: crate::transport::SharedMapping
    #[cfg(not(miri))]
    pub(super) unsafe fn over_raw(base: NonNull<u8>, len: usize) -> std::mem::ManuallyDrop<Self> {
        let word = |offset: usize| {
            // SAFETY: the header lies inside the memory (the caller's
            // promise) and its words are 4-aligned; Relaxed: written once
            // before the ring was handed out.
            unsafe { AtomicU32::from_ptr(base.as_ptr().add(offset).cast::<u32>()) }
                .load(Ordering::Relaxed)
        };
        std::mem::ManuallyDrop::new(TestRing {
            base,
            // Never used to free (the view is never dropped).
            layout: Layout::from_size_align(len, 64).expect("layout"),
            log2_elem_size: word(std::mem::offset_of!(rxe_queue_buf, log2_elem_size)),
            index_mask: word(std::mem::offset_of!(rxe_queue_buf, index_mask)),
        })
    }

    /// Start of the buffer.
    pub(super) fn base(&self) -> NonNull<u8> {
        self.base
    }

    /// Bytes allocated.
    pub(super) fn len(&self) -> usize {
        self.layout.size()
    }

    /// Slot size.
    pub(super) fn elem_size(&self) -> usize {
        1 << self.log2_elem_size
    }

    fn word(&self, offset: usize) -> &AtomicU32 {
        assert!(offset + 4 <= HEADER_LEN && offset % 4 == 0);
        // SAFETY: in bounds of the (64-aligned) allocation and 4-aligned; every
        // access to header words is atomic.
        unsafe { AtomicU32::from_ptr(self.base.as_ptr().add(offset).cast()) }
    }

    /// The shared producer index.
    pub(super) fn producer_index(&self) -> &AtomicU32 {
        self.word(std::mem::offset_of!(rxe_queue_buf, producer_index))
    }

    /// The shared consumer index.
    pub(super) fn consumer_index(&self) -> &AtomicU32 {
        self.word(std::mem::offset_of!(rxe_queue_buf, consumer_index))
    }

    fn slot(&self, index: u32) -> *mut u8 {
        let offset = HEADER_LEN + (((index & self.index_mask) as usize) << self.log2_elem_size);
        assert!(offset + self.elem_size() <= self.len());
        // SAFETY: in bounds, checked just above.
        unsafe { self.base.as_ptr().add(offset) }
    }

    /// `rxe_queue_reset`, run by a modify into RESET: zeroes every slot
    /// (everything after the header) and leaves the header, both indices
    /// included, as it is. Single-threaded: the caller excludes user space,
    /// as `QueuePair::modify` does by holding the ring locks.
    pub(super) fn reset_slots(&self) {
        // SAFETY: the slots lie inside the allocation, after the header;
        // nothing else touches the buffer meanwhile (the caller's promise).
        unsafe {
            std::ptr::write_bytes(
                self.base.as_ptr().add(HEADER_LEN),
                0,
                self.len() - HEADER_LEN,
            )
        };
    }

    /// The kernel's consumer side (`QUEUE_TYPE_FROM_CLIENT`: send and receive queues).
    pub(super) fn kernel_consumer(&self) -> KernelConsumer<'_> {
        KernelConsumer {
            ring: self,
            index: 0,
        }
    }

    /// The kernel's producer side (`QUEUE_TYPE_TO_CLIENT`: completion queues).
    pub(super) fn kernel_producer(&self) -> KernelProducer<'_> {
        KernelProducer {
            ring: self,
            index: 0,
        }
    }
}

impl Drop for TestRing {
    fn drop(&mut self) {
        // SAFETY: allocated in `with_header` with this very layout.
        unsafe { dealloc(self.base.as_ptr(), self.layout) }
    }
}

/// The kernel reading WQEs that user space produced.
pub(super) struct KernelConsumer<'a> {
    ring: &'a TestRing,
    /// Private consumer index (`q->index`).
    index: u32,
}

impl KernelConsumer<'_> {
    /// Elements user space has published and we have not consumed.
    pub(super) fn count(&self) -> u32 {
        // smp_load_acquire of the user-owned producer index, masked.
        let prod = self.ring.producer_index().load(Ordering::Acquire);
        prod.wrapping_sub(self.index) & self.ring.index_mask
    }

    /// Copies the oldest element into `out` (one slot) and advances, or
    /// returns false when the queue is empty.
    pub(super) fn pop(&mut self, out: &mut [u8]) -> bool {
        if self.count() == 0 {
            return false;
        }
        let n = out.len().min(self.ring.elem_size());
        // SAFETY: the slot is inside the buffer; user space finished writing it
        // before its release store of the producer index that count() acquired,
        // and will not write it again until we publish past it.
        unsafe { std::ptr::copy_nonoverlapping(self.ring.slot(self.index), out.as_mut_ptr(), n) };
        self.index = (self.index + 1) & self.ring.index_mask;
        // smp_store_release: our read of the slot is done before user space
        // can see it free.
        self.ring
            .consumer_index()
            .store(self.index, Ordering::Release);
        true
    }
}

impl KernelConsumer<'_> {
    /// Consumes every published element without reading it, as the
    /// kernel's flush in a move to RESET does (`flush_send_queue` /
    /// `flush_recv_queue` with no completions): the consumer index catches up
    /// with the producer's. Answers how many it dropped.
    pub(super) fn flush(&mut self) -> u32 {
        let n = self.count();
        self.index = self.index.wrapping_add(n) & self.ring.index_mask;
        // smp_store_release, as after a read: the slots are free again.
        self.ring
            .consumer_index()
            .store(self.index, Ordering::Release);
        n
    }
}

/// The kernel writing completions for user space.
pub(super) struct KernelProducer<'a> {
    ring: &'a TestRing,
    /// Private producer index (`q->index`).
    index: u32,
}

impl KernelProducer<'_> {
    /// True when every slot but one holds an unconsumed element (`queue_full`).
    pub(super) fn full(&self) -> bool {
        // smp_load_acquire of the user-owned consumer index.
        let cons = self.ring.consumer_index().load(Ordering::Acquire);
        (self.index.wrapping_add(1).wrapping_sub(cons)) & self.ring.index_mask == 0
    }

    /// Copies `elem` into the next slot and publishes it (`rxe_cq_post`), or
    /// returns false when the queue is full (the kernel's CQ overrun).
    pub(super) fn push(&mut self, elem: &[u8]) -> bool {
        if self.full() {
            return false;
        }
        let n = elem.len().min(self.ring.elem_size());
        // SAFETY: the slot is inside the buffer and free: user space published
        // its consumer index past it (acquired in full()) and reads no slot at
        // or after our producer index.
        unsafe { std::ptr::copy_nonoverlapping(elem.as_ptr(), self.ring.slot(self.index), n) };
        self.index = (self.index + 1) & self.ring.index_mask;
        // smp_store_release: the element is complete before user space sees it.
        self.ring
            .producer_index()
            .store(self.index, Ordering::Release);
        true
    }
}
