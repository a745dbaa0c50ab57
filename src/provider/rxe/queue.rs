//! Typed views over one rxe shared queue: the header the kernel writes, and the
//! user side of its two indices.
//!
//! A mapped rxe queue is a `struct rxe_queue_buf` header (384 bytes: the slot
//! size, the index mask, then the producer and the consumer index, each on its
//! own cache line) followed by `index_mask + 1` slots of `1 << log2_elem_size`
//! bytes. Indices are always stored masked; the queue is empty when
//! `producer == consumer` and full when `(producer + 1) & mask == consumer`, so
//! it holds at most `index_mask` elements.
//!
//! Each side owns one index and only reads the other:
//! * [`Producer`] (send and receive queues): user space owns `producer_index`.
//!   It writes elements into free slots, then publishes them with one
//!   store-release of the producer index; the kernel (`QUEUE_TYPE_FROM_CLIENT`)
//!   reads it with `smp_load_acquire` before it reads the elements.
//! * [`Consumer`] (completion queues): the kernel owns `producer_index`
//!   (`QUEUE_TYPE_TO_CLIENT`) and publishes it with `smp_store_release` after
//!   writing an element; user space reads it with acquire, copies the elements
//!   out, then publishes its consumer index with release so the kernel
//!   (`smp_load_acquire`) may reuse the slots.
//!
//! Like the kernel, each side keeps a private copy of the index it owns and
//! never reads it back from shared memory, and it masks every index it loads, so
//! a stray write to the shared header can neither move a side's own position
//! nor make it touch memory outside the slots. Nothing here allocates or makes
//! a system call.

use std::marker::PhantomData;
use std::mem::size_of;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, Ordering};

use uverbs_uapi::rxe_queue_buf;

use crate::provider::rings::FirstPoll;
use zerocopy::FromBytes;

/// Bytes of the queue header before the first slot.
pub(crate) const HEADER_LEN: usize = std::mem::size_of::<rxe_queue_buf>();
const LOG2_ELEM_SIZE_OFFSET: usize = std::mem::offset_of!(rxe_queue_buf, log2_elem_size);
const INDEX_MASK_OFFSET: usize = std::mem::offset_of!(rxe_queue_buf, index_mask);
const PRODUCER_OFFSET: usize = std::mem::offset_of!(rxe_queue_buf, producer_index);
const CONSUMER_OFFSET: usize = std::mem::offset_of!(rxe_queue_buf, consumer_index);

/// Largest slot this crate accepts (1 MiB): far above what rxe creates (a send
/// WQE with the maximum SGEs is a few KiB), small enough that no slot offset
/// can overflow.
const MAX_LOG2_ELEM_SIZE: u32 = 20;

/// Why a mapping cannot be used as an rxe queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum LayoutError {
    /// The mapping cannot even hold the header.
    #[error("map rxe queue: the mapping has {len} bytes, less than the {HEADER_LEN}-byte header")]
    TooShort {
        /// Bytes mapped.
        len: usize,
    },
    /// The mapping does not start on an 8-byte boundary.
    #[error("map rxe queue: the mapping at {addr:#x} is not 8-byte aligned")]
    Misaligned {
        /// Start of the mapping.
        addr: usize,
    },
    /// The header's slot size is too small for the elements, or absurdly large.
    #[error(
        "map rxe queue: header log2_elem_size {log2} gives {elem}-byte slots, need {min}..={max}"
    )]
    ElemSize {
        /// `log2_elem_size` as read.
        log2: u32,
        /// The slot size it gives (0 when it does not fit a `usize`).
        elem: usize,
        /// Bytes the elements of this queue need.
        min: usize,
        /// Largest slot accepted.
        max: usize,
    },
    /// The header's index mask is not `2^k - 1` with `k >= 1`.
    #[error("map rxe queue: header index_mask {mask:#x} is not 2^k - 1 with k >= 1")]
    IndexMask {
        /// `index_mask` as read.
        mask: u32,
    },
    /// The slots the header announces do not fit in the mapping.
    #[error("map rxe queue: {slots} slots of {elem} bytes after the header need {need} bytes, the mapping has {len}")]
    SlotsOutsideMapping {
        /// Number of slots (`index_mask + 1`).
        slots: u64,
        /// Slot size.
        elem: usize,
        /// Bytes needed (saturated on overflow).
        need: usize,
        /// Bytes mapped.
        len: usize,
    },
}

/// The queue is full: every slot but one holds an element the kernel has not
/// consumed yet.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("rxe queue full: {capacity} elements outstanding")]
pub(crate) struct QueueFull {
    /// Elements the queue holds at most (`index_mask`).
    pub(crate) capacity: u32,
}

/// A validated rxe queue mapping: where the header and the slots are. One
/// [`Producer`] or [`Consumer`] is made of it ([`Producer::over`],
/// [`Consumer::over`]).
#[derive(Debug)]
pub(crate) struct QueueMem {
    base: NonNull<u8>,
    log2_elem_size: u32,
    index_mask: u32,
}

// SAFETY: a QueueMem is owned by one value (itself, then the one Producer or
// Consumer made of it, which is then the only user-side owner of its queue's
// own index and, for a Producer, of the free slots it writes); the memory it
// points to is shared only with the kernel, through atomics, so moving it to
// another thread is sound. Producer and Consumer are Send through it.
unsafe impl Send for QueueMem {}

impl QueueMem {
    /// The mapped queue at `base`, whose elements need `min_elem` bytes.
    /// Reads and checks the header.
    ///
    /// # Safety
    /// `base..base + len` must be a readable and writable mapping of one rxe
    /// queue buffer (or memory shaped like one) that stays mapped, and is not
    /// written by anything but the kernel's side of the queue and this value
    /// (or the [`Producer`] or [`Consumer`] made of it), for as long as that
    /// lives. No other `QueueMem` may be made over the same memory.
    pub(crate) unsafe fn from_raw(
        base: NonNull<u8>,
        len: usize,
        min_elem: usize,
    ) -> Result<Self, LayoutError> {
        if len < HEADER_LEN {
            return Err(LayoutError::TooShort { len });
        }
        let addr = base.as_ptr() as usize;
        if addr % 8 != 0 {
            return Err(LayoutError::Misaligned { addr });
        }
        // SAFETY: the header lies inside the mapping (len >= HEADER_LEN) and is
        // 4-aligned (base is 8-aligned, both offsets are multiples of 4); the
        // caller guarantees it stays mapped and readable.
        let (log2, mask) = unsafe {
            (
                Self::word(base, LOG2_ELEM_SIZE_OFFSET).load(Ordering::Relaxed),
                Self::word(base, INDEX_MASK_OFFSET).load(Ordering::Relaxed),
            )
        };
        // Relaxed suffices for both: the kernel wrote them before it returned
        // the mmap offset, and the mmap system call orders them before us.
        let max = 1usize << MAX_LOG2_ELEM_SIZE;
        let elem = if log2 <= MAX_LOG2_ELEM_SIZE {
            1usize << log2
        } else {
            0
        };
        // At least 8 bytes so every slot stays 8-aligned.
        if elem < min_elem.max(8) {
            return Err(LayoutError::ElemSize {
                log2,
                elem,
                min: min_elem.max(8),
                max,
            });
        }
        let Some(slots) = mask
            .checked_add(1)
            .filter(|s| s.is_power_of_two() && *s >= 2)
        else {
            return Err(LayoutError::IndexMask { mask });
        };
        let need = (slots as usize)
            .checked_mul(elem)
            .and_then(|d| d.checked_add(HEADER_LEN));
        match need {
            Some(need) if need <= len => {}
            _ => {
                return Err(LayoutError::SlotsOutsideMapping {
                    slots: slots.into(),
                    elem,
                    need: need.unwrap_or(usize::MAX),
                    len,
                })
            }
        }
        Ok(QueueMem {
            base,
            log2_elem_size: log2,
            index_mask: mask,
        })
    }

    /// The header word at `offset` as an atomic.
    ///
    /// # Safety
    /// `offset + 4 <= HEADER_LEN`, `offset` a multiple of 4, and the mapping at
    /// `base` valid for at least the header for `'a`.
    unsafe fn word<'a>(base: NonNull<u8>, offset: usize) -> &'a AtomicU32 {
        // SAFETY: in bounds and 4-aligned per the contract; AtomicU32 has the
        // layout of u32 and every access to this word (ours and the kernel's)
        // is atomic or happens while no other side runs.
        unsafe { AtomicU32::from_ptr(base.as_ptr().add(offset).cast::<u32>()) }
    }

    fn producer(&self) -> &AtomicU32 {
        // SAFETY: validated header, mapping valid while `self` lives.
        unsafe { Self::word(self.base, PRODUCER_OFFSET) }
    }

    fn consumer(&self) -> &AtomicU32 {
        // SAFETY: validated header, mapping valid while `self` lives.
        unsafe { Self::word(self.base, CONSUMER_OFFSET) }
    }

    fn elem_size(&self) -> usize {
        1usize << self.log2_elem_size
    }

    /// Start of the slot for `index` (masked, so always inside the mapping).
    fn slot(&self, index: u32) -> *mut u8 {
        let offset = HEADER_LEN + (((index & self.index_mask) as usize) << self.log2_elem_size);
        // SAFETY: `from_raw` checked HEADER_LEN + slots * elem <= len and the
        // masked index is below `slots`, so the slot lies inside the mapping.
        unsafe { self.base.as_ptr().add(offset) }
    }

    /// Elements between `cons` and `prod`.
    fn count(&self, prod: u32, cons: u32) -> u32 {
        prod.wrapping_sub(cons) & self.index_mask
    }
}

/// The user side of a queue whose producer index user space owns (send and
/// receive queues).
///
/// Write elements with [`reserve`](Self::reserve) (several if you like), then
/// make them visible to the kernel with one [`publish`](Self::publish).
#[derive(Debug)]
pub(crate) struct Producer {
    mem: QueueMem,
    /// Our producer index as last published (private copy, like the kernel's `q->index`).
    prod: u32,
    /// Slots reserved and filled after `prod` but not yet published.
    pending: u32,
    /// The kernel's consumer index as last loaded.
    cons: u32,
}

impl Producer {
    /// The producer over `mem` (which [`QueueMem::from_raw`] checked), from
    /// the indices its header holds now.
    pub(crate) fn over(mem: QueueMem) -> Self {
        // Relaxed: we are the only writer of this index; the kernel left it at
        // zero on creation. Masked in case the word holds garbage.
        let prod = mem.producer().load(Ordering::Relaxed) & mem.index_mask;
        // Acquire pairs with the kernel's store-release of its consumer index:
        // the kernel is done reading every slot before it.
        let cons = mem.consumer().load(Ordering::Acquire) & mem.index_mask;
        Producer {
            mem,
            prod,
            pending: 0,
            cons,
        }
    }

    /// Bytes of one slot (from the header).
    pub(crate) fn elem_size(&self) -> usize {
        self.mem.elem_size()
    }

    /// Elements the queue holds at most (slots − 1).
    pub(crate) fn capacity(&self) -> u32 {
        self.mem.index_mask
    }

    /// Elements published or reserved that the kernel has not consumed, as of
    /// the last look at its index.
    pub(crate) fn outstanding(&self) -> u32 {
        self.mem
            .count(self.prod.wrapping_add(self.pending), self.cons)
    }

    /// Slots reserved since the last [`publish`](Self::publish).
    pub(crate) fn pending(&self) -> u32 {
        self.pending
    }

    /// Free slots, after loading the kernel's consumer index anew.
    pub(crate) fn free(&mut self) -> u32 {
        self.refresh();
        self.capacity() - self.outstanding()
    }

    fn refresh(&mut self) {
        // Acquire pairs with the kernel's smp_store_release of consumer_index
        // (queue_advance_consumer, FROM_CLIENT): once we see the kernel past a
        // slot, its reads of that slot are done and we may overwrite it.
        let cons = self.mem.consumer().load(Ordering::Acquire) & self.mem.index_mask;
        // A consumer index outside the outstanding window would be a kernel
        // bug or a stray write; keep the old one rather than overwrite slots
        // the kernel may still read.
        let ahead = self.mem.count(cons, self.cons);
        if ahead <= self.mem.count(self.prod, self.cons) {
            self.cons = cons;
        }
    }

    /// The next free slot after those already reserved, as `elem_size` bytes
    /// to fill. It becomes visible to the kernel at the next
    /// [`publish`](Self::publish). Always inline: the common send
    /// writer, once it also took READs, grew past where the compiler
    /// inlined this on its own (some 20 Ir of call and spills per post).
    #[inline(always)]
    pub(crate) fn reserve(&mut self) -> Result<&mut [u8], QueueFull> {
        if !self.has_room(1) {
            return Err(QueueFull {
                capacity: self.capacity(),
            });
        }
        // SAFETY: room for one slot was seen just above.
        Ok(unsafe { self.reserve_in_room() })
    }

    /// Whether `n` more slots can be reserved after those already are:
    /// against the kernel's consumer index as last loaded, loaded anew only
    /// when that shows too little room. A batch asks once, then takes its
    /// slots with [`reserve_in_room`](Self::reserve_in_room), with no check
    /// each.
    #[inline(always)]
    pub(crate) fn has_room(&mut self, n: usize) -> bool {
        let room = |p: &Self| (p.capacity() - p.outstanding()) as usize;
        if room(self) >= n {
            return true;
        }
        self.refresh();
        room(self) >= n
    }

    /// [`reserve`](Self::reserve) without its check for room.
    ///
    /// # Safety
    /// Room for the slot was seen: [`has_room`](Self::has_room) answered
    /// true for some `n`, and fewer than `n` slots were reserved since (by
    /// either method; a [`publish`](Self::publish) or a
    /// [`cancel`](Self::cancel) in between takes no room).
    #[inline(always)]
    pub(crate) unsafe fn reserve_in_room(&mut self) -> &mut [u8] {
        let slot = self.mem.slot(self.prod.wrapping_add(self.pending));
        self.pending += 1;
        // SAFETY: the slot lies inside the mapping (QueueMem::slot); it is
        // free (the caller saw room for it: it lies between the kernel's
        // consumer index and ours, where the kernel reads no slot), and
        // `&mut self` keeps it ours alone until the next call.
        unsafe { std::slice::from_raw_parts_mut(slot, self.mem.elem_size()) }
    }

    /// Forgets the slots reserved since the last publish (the kernel never saw them).
    pub(crate) fn cancel(&mut self) {
        self.pending = 0;
    }

    /// Makes every reserved slot visible to the kernel with one store (with
    /// none reserved, the index the kernel already has: no test, as the
    /// usual caller has just reserved one).
    pub(crate) fn publish(&mut self) {
        self.prod = self.prod.wrapping_add(self.pending) & self.mem.index_mask;
        self.pending = 0;
        // Release: every write into the slots happens-before the kernel's
        // smp_load_acquire of producer_index (queue_get_producer, FROM_CLIENT)
        // that sees this value, so it never reads a half-written element.
        self.mem.producer().store(self.prod, Ordering::Release);
    }
}

/// The user side of a queue whose producer index the kernel owns (completion
/// queues).
///
/// [`ready`](Self::ready) loads the kernel's index, [`get`](Self::get) reads the
/// ready elements in place, [`consume`](Self::consume) hands their slots back.
///
/// `T` is what a slot holds (an `ib_uverbs_wc` for a CQ): every slot is at
/// least that large, checked once by [`over`](Self::over), so
/// [`copy_first`](Self::copy_first) and [`copy_rest`](Self::copy_rest) read
/// whole `T`s without a check per call.
#[derive(Debug)]
pub(crate) struct Consumer<T> {
    mem: QueueMem,
    /// Our consumer index as last published (private copy).
    cons: u32,
    /// The kernel's producer index as last loaded.
    prod: u32,
    _elem: PhantomData<fn() -> T>,
}

impl<T: FromBytes> Consumer<T> {
    /// The consumer over `mem` (which [`QueueMem::from_raw`] checked), from
    /// the indices its header holds now; `None` if a slot is smaller than a
    /// `T`.
    pub(crate) fn over(mem: QueueMem) -> Option<Self> {
        if size_of::<T>() > mem.elem_size() {
            return None;
        }
        // Relaxed: we are the only writer of this index.
        let cons = mem.consumer().load(Ordering::Relaxed) & mem.index_mask;
        let mut c = Consumer {
            mem,
            cons,
            prod: cons,
            _elem: PhantomData,
        };
        c.ready();
        Some(c)
    }

    /// Bytes of one slot (from the header).
    pub(crate) fn elem_size(&self) -> usize {
        self.mem.elem_size()
    }

    /// Elements the queue holds at most (slots − 1).
    pub(crate) fn capacity(&self) -> u32 {
        self.mem.index_mask
    }

    /// Elements ready to read, after loading the kernel's producer index anew.
    pub(crate) fn ready(&mut self) -> u32 {
        // Acquire pairs with the kernel's smp_store_release of producer_index
        // (queue_advance_producer, TO_CLIENT), made after it copied the
        // element in: every element before that index is complete for us.
        self.prod = self.mem.producer().load(Ordering::Acquire) & self.mem.index_mask;
        self.mem.count(self.prod, self.cons)
    }

    /// Elements ready as of the last [`ready`](Self::ready).
    pub(crate) fn cached_ready(&self) -> u32 {
        self.mem.count(self.prod, self.cons)
    }

    /// The `i`-th ready element (0 = oldest), `None` past the last one seen by
    /// [`ready`](Self::ready).
    pub(crate) fn get(&self, i: u32) -> Option<&[u8]> {
        if i >= self.cached_ready() {
            return None;
        }
        let slot = self.mem.slot(self.cons.wrapping_add(i));
        // SAFETY: inside the mapping (QueueMem::slot); the slot lies between our
        // consumer index and the kernel's published producer index, which the
        // kernel does not write until we publish past it, and the borrow of
        // `self` ends before `consume` (which takes `&mut self`) can do that.
        Some(unsafe { std::slice::from_raw_parts(slot.cast_const(), self.mem.elem_size()) })
    }

    /// Starts copying the oldest ready elements, read as `T`s, into `out`
    /// (as many as are ready and fit): loads the kernel's index and copies
    /// the oldest element into `out[0]`, the common case (most polls find
    /// one), handing it back when it is the only one. [`FirstPoll::More`] when more are ready and fit: the
    /// first is not handed back yet, [`copy_rest`](Self::copy_rest) does
    /// it with the rest (one store for all).
    #[inline(always)]
    pub(crate) fn copy_first(&mut self, out: &mut [T]) -> FirstPoll {
        let n = (self.ready() as usize).min(out.len());
        if n == 0 {
            return FirstPoll::Done(0);
        }
        out[0] = self.read_ready(0);
        if n > 1 {
            return FirstPoll::More;
        }
        self.advance(1);
        FirstPoll::Done(1)
    }

    /// After [`copy_first`](Self::copy_first) answered
    /// [`FirstPoll::More`] for this `out`: copies the ready elements 1, 2,
    /// … into `out[1..]` (as many as its [`ready`](Self::ready) counted and
    /// fit), hands them back with the first, and answers how many in all.
    #[inline(never)]
    pub(crate) fn copy_rest(&mut self, out: &mut [T]) -> usize {
        let n = (self.cached_ready() as usize).min(out.len());
        for (i, slot) in out.iter_mut().enumerate().take(n).skip(1) {
            *slot = self.read_ready(i as u32);
        }
        self.advance(n as u32);
        n
    }

    /// The `i`-th ready element as a `T`, for `i` below the count
    /// [`ready`](Self::ready) answered.
    #[inline(always)]
    fn read_ready(&self, i: u32) -> T {
        debug_assert!(i < self.cached_ready());
        let slot = self.mem.slot(self.cons.wrapping_add(i));
        // SAFETY: the slot lies inside the mapping (QueueMem::slot) and
        // holds at least size_of::<T>() bytes (checked by `over`); it is
        // one of the slots between our consumer index and the producer index
        // `ready` loaded with Acquire, which the kernel wrote completely
        // before that store and does not write again until we publish past
        // it. `T: FromBytes` makes any bytes a valid `T`; the read is
        // unaligned-tolerant.
        unsafe { slot.cast::<T>().read_unaligned() }
    }

    /// Hands the `n` oldest ready slots back to the kernel with one store (at
    /// most [`cached_ready`](Self::cached_ready); more is clamped).
    pub(crate) fn consume(&mut self, n: u32) {
        let n = n.min(self.cached_ready());
        if n != 0 {
            self.advance(n);
        }
    }

    /// Publishes our consumer index `n` (at most ready) slots further.
    #[inline(always)]
    fn advance(&mut self, n: u32) {
        self.cons = self.cons.wrapping_add(n) & self.mem.index_mask;
        // Release: our reads of the consumed slots happen-before the kernel's
        // smp_load_acquire of consumer_index (queue_full, TO_CLIENT) that sees
        // this value, so it never overwrites an element we are still copying.
        self.mem.consumer().store(self.cons, Ordering::Release);
    }
}
