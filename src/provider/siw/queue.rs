//! Typed views over siw's shared rings: the send and receive queues user space
//! produces into, the completion queue it consumes from, and the CQ's arming
//! word.
//!
//! A siw ring is a bare array of `num` elements (`num` a power of two, from
//! the create response) with no header and no shared index: each element's
//! `flags` word says who owns it. [`SIW_WQE_VALID`] set: the consumer's;
//! clear: the producer's. Each side keeps a private free-running counter
//! (`put` for the producer, `get` for the consumer) and takes it modulo
//! `num`. So a ring holds up to `num` elements (not `num - 1` as on rxe), and
//! neither side can ever learn the other's position except through the flags.
//!
//! * [`Producer`] (SQ, RQ): the slot at `put` is free iff its flags lack
//!   VALID, loaded with `Acquire` (pairs with the kernel's `smp_store_mb`
//!   clearing it after it copied the element out, so none of our writes to
//!   the slot can happen before the kernel's reads of it). User space writes
//!   every field but `flags` (straight into the slot, through a [`Slot`]),
//!   then stores `flags` (VALID and the others) with `Release` (pairs with
//!   the kernel's `READ_ONCE` of the flags before it copies the element;
//!   see below). The kernel only ever clears VALID,
//!   never sets it, so a slot seen free stays free until we fill it.
//! * [`CqConsumer`]: the slot at `get` is ready iff its `u8` flags have
//!   VALID, loaded with `Acquire`; user space copies the CQE out and then
//!   stores 0 to the flags with `Release`, so the kernel (which writes a CQE
//!   only after a `READ_ONCE` saw its flags 0) cannot overwrite it while we
//!   still read it.
//! * Arming: the `siw_cq_ctrl` word right after the CQE array. User space
//!   stores [`SIW_NOTIFY_SOLICITED`] or `SOLICITED | NEXT_COMPLETION`; the
//!   kernel (`siw_cq_notify_now`, Linux 6.12) reads it after publishing each
//!   CQE, fires the completion event when it asks for this completion, and
//!   then stores [`SIW_NOTIFY_NOT`]: arming is one-shot. No system call.
//!
//! Two decisions need a full barrier on our side, because they pair a store
//! with a later load of a *different* word against the kernel doing the
//! mirror image (store; `smp_mb`; load):
//! * the doorbell ([`Producer::needs_doorbell`]): we publish the new SQEs, then
//!   look at the SQE just before the batch; the kernel clears that SQE
//!   (`smp_store_mb`) and later looks at ours. With a `SeqCst` fence between our
//!   store and our load, at least one side sees the other's store: either the
//!   kernel finds our SQEs, or we find the old one cleared and ring.
//! * arming ([`CqConsumer::arm`]): we store the arm word, then poll once more;
//!   the kernel stores the CQE's flags, `smp_store_mb`s the SQE/RQE flags and
//!   reads the arm word. Either the event fires or our poll sees the CQE.
//!
//! What the kernel does not give us (6.12): it reads an SQE's flags with
//! `READ_ONCE` and then copies the fields without `smp_rmb`; it writes a
//! CQE's fields and then its flags with plain stores and `WRITE_ONCE`, without
//! `smp_wmb`; and it hands an SQE or RQE back with `smp_store_mb(flags, 0)`,
//! which asm-generic defines as `WRITE_ONCE; smp_mb()`: the barrier after
//! the store, so not a release of the kernel's reads of the slot. On x86-64
//! all three are sound: TSO orders loads with loads and stores with stores,
//! and x86's `smp_store_mb` is `xchg`, a locked instruction no earlier load
//! passes, so once we see VALID clear the kernel is done reading. On arm64
//! or POWER the kernel may still be reading a slot we see free, and nothing
//! on our side can order the kernel's accesses: the data path is built for
//! x86-64 only ([`super::DATA_PATH_SOUND`]; creating a siw CQ or QP elsewhere
//! is refused). Our side uses the orderings the protocol needs whatever the
//! machine.
//!
//! Every slot address is the counter masked by `num - 1` times the element
//! size, and the mapping length is checked against `num × size` (+ the arming
//! word) once, when the view is built; nothing is ever read or written outside
//! it. Nothing here allocates or makes a system call.

use std::marker::PhantomData;
use std::mem::{offset_of, size_of};
use std::ptr::NonNull;
use std::sync::atomic::{fence, AtomicU16, AtomicU32, AtomicU8, Ordering};

use zerocopy::{FromBytes, Immutable, IntoBytes};

use uverbs_uapi::{
    siw_cq_ctrl, siw_cqe, siw_rqe, siw_sge, siw_sqe, SIW_MAX_SGE, SIW_NOTIFY_NEXT_COMPLETION,
    SIW_NOTIFY_NOT, SIW_NOTIFY_SOLICITED, SIW_WQE_VALID,
};

/// Offset of the `flags` word in every siw element.
const FLAGS_OFFSET: usize = 8;
const _: () = assert!(offset_of!(siw_sqe, flags) == FLAGS_OFFSET);
const _: () = assert!(offset_of!(siw_rqe, flags) == FLAGS_OFFSET);
const _: () = assert!(offset_of!(siw_cqe, flags) == FLAGS_OFFSET);
/// The SQE/RQE flags word is a `u16`, the CQE's a `u8`.
const WQE_FLAGS_LEN: usize = size_of::<u16>();
/// Bytes of a CQE.
pub(crate) const CQE_LEN: usize = size_of::<siw_cqe>();
/// Bytes of the arming word after the CQEs.
pub(crate) const CTRL_LEN: usize = size_of::<siw_cq_ctrl>();
/// The VALID bit as the CQE's `u8` flags hold it.
const CQE_VALID: u8 = SIW_WQE_VALID as u8;

/// An element user space produces into a siw ring: an SQE or an RQE, whose
/// first 8 bytes are the id and whose `u16` flags follow at byte 8.
pub(crate) trait WorkElement:
    IntoBytes + FromBytes + Immutable + Copy + sealed::Sealed
{
    /// The ring's name in errors.
    const RING: &'static str;
    /// The flags this element asks to be published with (VALID is added).
    fn flags(&self) -> u16;
}

mod sealed {
    /// Only siw's two work elements are [`WorkElement`](super::WorkElement)s.
    pub trait Sealed {}
    impl Sealed for uverbs_uapi::siw_sqe {}
    impl Sealed for uverbs_uapi::siw_rqe {}
}

impl WorkElement for siw_sqe {
    const RING: &'static str = "siw send queue";
    fn flags(&self) -> u16 {
        self.flags
    }
}

impl WorkElement for siw_rqe {
    const RING: &'static str = "siw receive queue";
    fn flags(&self) -> u16 {
        self.flags
    }
}

/// The ring's name in CQ errors.
const CQ_RING: &str = "siw completion queue";

/// Why a mapping cannot be used as a siw ring.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum LayoutError {
    /// The mapping does not start on an 8-byte boundary.
    #[error("map {ring}: the mapping at {addr:#x} is not 8-byte aligned")]
    Misaligned {
        /// Which ring.
        ring: &'static str,
        /// Start of the mapping.
        addr: usize,
    },
    /// The element count from the create response is not a power of two
    /// (or is 0).
    #[error("map {ring}: {num} elements is not a power of two >= 1")]
    Count {
        /// Which ring.
        ring: &'static str,
        /// The count given.
        num: u32,
    },
    /// The elements (and, for a CQ, the arming word) do not fit the mapping.
    #[error("map {ring}: {num} elements of {elem} bytes (+ {tail} control bytes) need {need} bytes, the mapping has {len}")]
    TooShort {
        /// Which ring.
        ring: &'static str,
        /// Elements.
        num: u32,
        /// Bytes per element.
        elem: usize,
        /// Bytes after the elements (the CQ's arming word, else 0).
        tail: usize,
        /// Bytes needed (saturated on overflow).
        need: usize,
        /// Bytes mapped.
        len: usize,
    },
}

/// Not enough free slots for a batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("siw queue full: {free} of {capacity} slots free")]
pub(crate) struct QueueFull {
    /// Consecutive free slots at the producer's position: the batch's
    /// elements from this index on did not fit.
    pub(crate) free: u32,
    /// Slots in the ring.
    pub(crate) capacity: u32,
}

/// Why [`Producer::stage_then_publish`] handed nothing to the kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Unpublished<X> {
    /// `fill` refused the item at `index`.
    Refused {
        /// The item's index in the batch.
        index: usize,
        /// `fill`'s refusal.
        error: X,
    },
    /// Not every item found a free slot: those from `free` on did not.
    Full(QueueFull),
}

/// A validated siw ring mapping: `num` elements at `base`, of the size its
/// view's element type has (the view passed it to [`Ring::check`]).
/// Cloned only inside its view's methods, as a local copy.
#[derive(Clone, Debug)]
struct Ring {
    base: NonNull<u8>,
    num: u32,
    /// `num - 1`, kept so that finding a slot is one `and`.
    mask: u32,
}

// SAFETY: a Ring is owned by the one Producer or CqConsumer made over it,
// which is the only user-side accessor of its mapping (from_raw's contract);
// the memory is shared only with the kernel, through the flags protocol, so
// moving the owner to another thread is sound.
unsafe impl Send for Ring {}

impl Ring {
    /// Checks that `num` elements of `elem` bytes and `tail` more fit in
    /// `len` bytes at `base`.
    fn check(
        ring: &'static str,
        base: NonNull<u8>,
        len: usize,
        num: u32,
        elem: usize,
        tail: usize,
    ) -> Result<Ring, LayoutError> {
        let addr = base.as_ptr() as usize;
        if addr % 8 != 0 {
            return Err(LayoutError::Misaligned { ring, addr });
        }
        if !num.is_power_of_two() {
            return Err(LayoutError::Count { ring, num });
        }
        let need = (num as usize)
            .checked_mul(elem)
            .and_then(|n| n.checked_add(tail));
        match need {
            Some(need) if need <= len => Ok(Ring {
                base,
                num,
                mask: num - 1,
            }),
            _ => Err(LayoutError::TooShort {
                ring,
                num,
                elem,
                tail,
                need: need.unwrap_or(usize::MAX),
                len,
            }),
        }
    }
}

/// The user side of a siw send or receive queue.
///
/// [`post`](Self::post) writes a batch into free slots and hands each to the
/// kernel by setting its VALID flag; for a send queue the caller then rings
/// the doorbell when [`Posted::needs_doorbell`] says so.
#[derive(Debug)]
pub(crate) struct Producer<E> {
    ring: Ring,
    /// Elements posted so far (free-running; the slot is `put % num`).
    put: u32,
    _elem: PhantomData<fn(&E)>,
}

/// What one [`Producer::post`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Posted {
    /// Elements handed to the kernel.
    pub(crate) count: u32,
    /// For a send queue: the kernel may be idle, so the caller must write
    /// the POST_SEND doorbell. False when nothing was posted, or when the
    /// element before the batch was still VALID (the kernel has yet to take
    /// it, and will walk on to ours).
    pub(crate) needs_doorbell: bool,
}

impl<E: WorkElement> Producer<E> {
    /// The producer over `num` elements mapped at `base..base + len`, from
    /// slot 0 (where the kernel starts too).
    ///
    /// # Safety
    /// `base..base + len` must be a readable and writable mapping of the
    /// ring (or memory shaped like one) that stays mapped for as long as the
    /// producer lives, and nothing but the kernel's side of the ring and this
    /// producer may access it; no other view may be made over it.
    pub(crate) unsafe fn from_raw(
        base: NonNull<u8>,
        len: usize,
        num: u32,
    ) -> Result<Self, LayoutError> {
        // SAFETY: the caller's promise, passed on.
        unsafe { Self::resume(base, len, num, 0) }
    }

    /// The producer over a ring mapped again (after a refused destroy had
    /// unmapped it), continuing at the position `put` the previous view had
    /// reached: the kernel's own position is unchanged.
    ///
    /// # Safety
    /// As [`from_raw`](Self::from_raw).
    pub(crate) unsafe fn resume(
        base: NonNull<u8>,
        len: usize,
        num: u32,
        put: u32,
    ) -> Result<Self, LayoutError> {
        Ok(Producer {
            ring: Ring::check(E::RING, base, len, num, size_of::<E>(), 0)?,
            put,
            _elem: PhantomData,
        })
    }

    /// Slots in the ring (all of them can be outstanding at once).
    pub(crate) fn capacity(&self) -> u32 {
        self.ring.num
    }

    /// Elements posted since the view was made (free-running).
    pub(crate) fn put(&self) -> u32 {
        self.put
    }

    /// The element of free-running counter `counter`. The ring's `elem` is
    /// `size_of::<E>()` (`resume` made it so), which, as a constant here,
    /// spares the multiplication by a loaded value.
    #[inline(always)]
    fn elem_ptr(&self, counter: u32) -> NonNull<E> {
        Self::elem_in(&self.ring, counter)
    }

    /// [`elem_ptr`](Self::elem_ptr) in `ring`, this producer's ring or a
    /// copy of it (a loop keeps a copy in registers: see
    /// [`flags_of`](Self::flags_of)).
    #[inline(always)]
    fn elem_in(ring: &Ring, counter: u32) -> NonNull<E> {
        let index = (counter & ring.mask) as usize;
        // SAFETY: index < num and `Ring::check` proved num * size_of::<E>()
        // <= len (the producer's element size, as `ring` is its ring), so
        // the element lies inside the mapping (which is not at address 0, so
        // neither is the element).
        unsafe { ring.base.add(index * size_of::<E>()).cast() }
    }

    /// The `u16` flags word of the element of `counter`.
    ///
    /// [`put_one`](Self::put_one) (under `post_one` and `fill_one`) takes
    /// every such reference (and element address) it needs before its
    /// first atomic access: the compiler does not move a load of
    /// `self.ring` after an acquire load or a fence back before it, and
    /// would load the ring's base and size again for each.
    #[inline(always)]
    fn flags_of(&self, counter: u32) -> &AtomicU16 {
        Self::flags_in(&self.ring, counter)
    }

    /// [`flags_of`](Self::flags_of) in `ring`, this producer's ring or a
    /// copy of it, borrowed no longer than the producer.
    #[inline(always)]
    fn flags_in(ring: &Ring, counter: u32) -> &AtomicU16 {
        let flags = Self::elem_in(ring, counter).as_ptr().cast::<u8>();
        // SAFETY: inside the element (FLAGS_OFFSET + 2 <= size_of::<E>()
        // for both element types), 2-aligned (base and the element sizes
        // 120 and 112 are multiples of 8); every access to this word, ours
        // and the kernel's, is atomic, and the mapping lives as long as the
        // producer, which outlives `ring` (its ring, or a copy of it made
        // inside one of its methods).
        unsafe { AtomicU16::from_ptr(flags.add(FLAGS_OFFSET).cast()) }
    }

    /// True when the element whose flags word is `flags` is ours to fill.
    #[inline(always)]
    fn is_free(flags: &AtomicU16) -> bool {
        // Acquire pairs with the kernel's smp_store_mb(flags, 0) made after
        // it copied the element out: once we see VALID clear, the kernel's
        // reads of the slot happen-before our writes to it. That holds only
        // where smp_store_mb is a release, x86-64's xchg (see the module
        // text; siw's rings are not used elsewhere). On x86-64 a plain load.
        flags.load(Ordering::Acquire) & SIW_WQE_VALID == 0
    }

    /// Hands a filled element to the kernel: its flags word gets `flags`
    /// plus VALID.
    #[inline(always)]
    fn publish(flags_word: &AtomicU16, flags: u16) {
        // Release pairs with the kernel's READ_ONCE of the flags before it
        // copies the element (sq_get_next, siw_rqe_get): every byte written
        // into the element before happens-before the kernel's reads of
        // them. On x86-64 a plain store (TSO keeps the earlier stores
        // before it); it is no weaker anywhere.
        flags_word.store(flags | SIW_WQE_VALID, Ordering::Release);
    }

    /// Consecutive free slots from our position, at most `want`.
    #[inline]
    pub(crate) fn free_ahead(&self, want: u32) -> u32 {
        let want = want.min(self.ring.num);
        let mut free = 0;
        while free < want && Self::is_free(self.flags_of(self.put.wrapping_add(free))) {
            free += 1;
        }
        free
    }

    /// Writes `elems` into the next slots and hands each to the kernel, in
    /// order, or writes nothing at all when not all of them fit: whole
    /// elements, each copied but for its flags word, which is then stored
    /// (the element's own, plus VALID) with one release, as
    /// [`fill_one`](Self::fill_one) does.
    pub(crate) fn post<I>(&mut self, elems: I) -> Result<Posted, QueueFull>
    where
        I: ExactSizeIterator<Item = E>,
    {
        let want = u32::try_from(elems.len()).unwrap_or(u32::MAX);
        let free = self.free_ahead(want);
        if free < want {
            return Err(QueueFull {
                free,
                capacity: self.ring.num,
            });
        }
        let start = self.put;
        // At most `want` (an iterator may yield more or fewer than it
        // announced); each of those slots was seen free above.
        for elem in elems.take(want as usize) {
            let filled = self.fill_one(|slot| {
                slot.write(&elem);
                elem.flags()
            });
            if filled.is_err() {
                break; // not reached: the slot was seen free
            }
        }
        let count = self.put.wrapping_sub(start);
        Ok(Posted {
            count,
            needs_doorbell: self.needs_doorbell(start, count),
        })
    }

    /// A send queue's post of one element, the usual post:
    /// [`put_one`](Self::put_one), and the doorbell rule told the element
    /// before, whose address it took with the others.
    #[inline(always)]
    pub(crate) fn post_one<F>(&mut self, fill: F) -> Result<Posted, QueueFull>
    where
        F: FnOnce(&mut Slot<'_, E>) -> u16,
    {
        self.put_one(fill, |num, before| Posted {
            count: 1,
            needs_doorbell: Self::doorbell_rule(num, 1, before),
        })
    }

    /// [`fill_with`](Self::fill_with) for one element (a receive queue's
    /// usual post): [`put_one`](Self::put_one) with no doorbell decision,
    /// and no fence (as there).
    #[inline(always)]
    pub(crate) fn fill_one<F>(&mut self, fill: F) -> Result<(), QueueFull>
    where
        F: FnOnce(&mut Slot<'_, E>) -> u16,
    {
        self.put_one(fill, |_, _| ())
    }

    /// The one-element post, straight-line: the slot check, `fill`'s
    /// writes and the release store of the flags, then `then(num, before)`
    /// (the ring's size and the flags word of the element before this one)
    /// before the position moves on. Every address is taken first (see
    /// [`flags_of`](Self::flags_of)); where `then` ignores `before`, its
    /// address (arithmetic on what is loaded anyway) is dropped.
    #[inline(always)]
    fn put_one<F, T, R>(&mut self, fill: F, then: T) -> Result<R, QueueFull>
    where
        F: FnOnce(&mut Slot<'_, E>) -> u16,
        T: FnOnce(u32, &AtomicU16) -> R,
    {
        let put = self.put;
        let num = self.ring.num;
        // Every address first (see flags_of).
        let mut slot = Slot {
            ptr: self.elem_ptr(put),
            _elem: PhantomData,
        };
        let flags = self.flags_of(put);
        let before = self.flags_of(put.wrapping_sub(1));
        if !Self::is_free(flags) {
            return Err(QueueFull {
                free: 0,
                capacity: num,
            });
        }
        // The slot is free (checked just above) and stays so: the kernel
        // only ever clears VALID, and `&mut self` makes us its only filler.
        Self::publish(flags, fill(&mut slot));
        let answer = then(num, before);
        self.put = put.wrapping_add(1);
        Ok(answer)
    }

    /// Fills the next slots, one per element of `items`, and hands each to
    /// the kernel in order; or, when not all of them fit, calls nothing and
    /// writes nothing. Answers how many were handed over.
    ///
    /// `fill(item, slot)` writes every byte of the element but its flags
    /// word (the [`Slot`] writers reach no other byte) and answers the
    /// element's flags; then the flags, plus VALID, are stored with one
    /// release, so the kernel never sees VALID on a half-written element.
    /// No element is staged: `fill` writes straight into the ring.
    ///
    /// No doorbell decision, hence no fence: a receive queue's post. The
    /// `SeqCst` fence of [`needs_doorbell`](Self::needs_doorbell) orders the
    /// batch's flags stores before its load of the element before the
    /// batch, and only that load's answer needs it; a receive has no
    /// doorbell (the kernel looks at the RQ when a message arrives), so
    /// nothing reads that element and nothing depends on the fence. What
    /// publishes an RQE to the kernel is its release store alone, as
    /// before.
    #[inline(always)]
    pub(crate) fn fill_with<T, F>(&mut self, items: &[T], mut fill: F) -> Result<u32, QueueFull>
    where
        F: FnMut(&T, &mut Slot<'_, E>) -> u16,
    {
        let want = u32::try_from(items.len()).unwrap_or(u32::MAX);
        let free = self.free_ahead(want);
        if free < want {
            return Err(QueueFull {
                free,
                capacity: self.ring.num,
            });
        }
        // Here items.len() == want <= num (a longer slice would not fit),
        // and the `want` slots from `put` on are free.
        let start = self.put;
        for item in items {
            let put = self.put;
            let mut slot = Slot {
                ptr: self.elem_ptr(put),
                _elem: PhantomData,
            };
            let flags = self.flags_of(put);
            // The slot is free (checked above) and stays so: the kernel only
            // ever clears VALID, and `&mut self` makes us its only filler.
            Self::publish(flags, fill(item, &mut slot));
            self.put = put.wrapping_add(1);
        }
        Ok(self.put.wrapping_sub(start))
    }

    /// Fills the next slots, one per element of `items`, then hands them all
    /// to the kernel in order; or hands over none. A send queue's batch:
    /// each request is checked by `fill` as it is written, in one pass.
    ///
    /// Each slot is seen free (acquire) just before `fill(item, slot)`
    /// writes every byte of it but the flags word, or refuses the item. The
    /// flags word stays 0 meanwhile: the kernel reads nothing of a slot
    /// whose VALID is clear but that word, and takes any non-zero word for
    /// an element in places (`siw_sq_flush` flushes it, `siw_sq_empty`
    /// says the queue is not empty), so nothing is staged there. Once every
    /// item is written, each slot's word gets `flags_of(item)` plus VALID
    /// with one release, in order, and rdma-core's doorbell rule is applied
    /// ([`needs_doorbell`](Self::needs_doorbell)).
    ///
    /// On a refusal or a taken slot nothing is published and the position
    /// stays: the slots written so far stay free, their flags words 0,
    /// holding bytes the kernel never reads and the next post overwrites. A
    /// batch longer than the ring is refused before any slot is written (it
    /// would wrap onto its own written slots, which still look free).
    #[inline(always)]
    pub(crate) fn stage_then_publish<T, F, G, X>(
        &mut self,
        items: &[T],
        mut fill: F,
        flags_of: G,
    ) -> Result<Posted, Unpublished<X>>
    where
        F: FnMut(&T, &mut Slot<'_, E>) -> Result<(), X>,
        G: Fn(&T) -> u16,
    {
        let num = self.ring.num;
        if items.len() > num as usize {
            return Err(Unpublished::Full(QueueFull {
                free: self.free_ahead(num),
                capacity: num,
            }));
        }
        // A copy, kept in registers: the acquire loads below would make the
        // compiler load `self.ring` again for every slot (see flags_of).
        let ring = self.ring.clone();
        let start = self.put;
        let mut at = start;
        for (index, item) in items.iter().enumerate() {
            let mut slot = Slot {
                ptr: Self::elem_in(&ring, at),
                _elem: PhantomData,
            };
            if !Self::is_free(Self::flags_in(&ring, at)) {
                return Err(Unpublished::Full(QueueFull {
                    // The slots before this one were free.
                    free: index as u32,
                    capacity: num,
                }));
            }
            // The slot is free (checked just above) and stays so until we
            // publish it: the kernel only ever clears VALID, and `&mut self`
            // makes us its only filler.
            if let Err(error) = fill(item, &mut slot) {
                return Err(Unpublished::Refused { index, error });
            }
            at = at.wrapping_add(1);
        }
        let mut next = start;
        for item in items {
            Self::publish(Self::flags_in(&ring, next), flags_of(item));
            next = next.wrapping_add(1);
        }
        self.put = at;
        let count = at.wrapping_sub(start);
        Ok(Posted {
            count,
            needs_doorbell: self.needs_doorbell(start, count),
        })
    }

    /// rdma-core's doorbell rule for a batch of `count` elements posted from
    /// `start`: ring unless the element just before the batch is still VALID
    /// (then the kernel has yet to take it and will find ours after it);
    /// always ring when the batch filled the whole ring (the element before
    /// it is one of ours), never when it was empty.
    #[inline(always)]
    fn needs_doorbell(&self, start: u32, count: u32) -> bool {
        Self::doorbell_rule(self.ring.num, count, self.flags_of(start.wrapping_sub(1)))
    }

    /// [`needs_doorbell`](Self::needs_doorbell) in a ring of `num`, with
    /// `before` the flags word of the element before the batch.
    #[inline(always)]
    fn doorbell_rule(num: u32, count: u32, before: &AtomicU16) -> bool {
        if count == 0 {
            return false;
        }
        if count >= num {
            return true;
        }
        // SeqCst fence: our release stores of the batch's flags are ordered
        // before the load below, against the kernel's smp_store_mb (store;
        // smp_mb) of the previous element's flags before it looks at the
        // next one. Either the kernel's later READ_ONCE sees our VALID, or
        // this load sees its clear and we ring: no wakeup is lost.
        fence(Ordering::SeqCst);
        // Relaxed: only the value matters; the fence gives the ordering.
        before.load(Ordering::Relaxed) & SIW_WQE_VALID == 0
    }
}

/// A slot of a [`Producer`]'s ring that is ours to fill, handed to the
/// `fill` of [`Producer::stage_then_publish`] and the other posts: its
/// flags lack VALID (seen with acquire), so until we store VALID the kernel
/// reads nothing of it but that flags word, and nothing else writes it. The writers below reach
/// every byte of the element except the flags word, and nothing outside it.
pub(crate) struct Slot<'a, E> {
    /// The element, inside the mapping and aligned (8-aligned base,
    /// element sizes multiples of 8).
    ptr: NonNull<E>,
    _elem: PhantomData<&'a mut E>,
}

impl<E: WorkElement> Slot<'_, E> {
    /// Copies every byte of `elem` but its flags word into the slot.
    #[inline]
    pub(crate) fn write(&mut self, elem: &E) {
        let src = elem.as_bytes();
        let dst = self.ptr.as_ptr().cast::<u8>();
        let after = FLAGS_OFFSET + WQE_FLAGS_LEN;
        // SAFETY: both ranges lie inside the slot (size_of::<E>() bytes,
        // checked against the mapping) and inside `src` (the same size); the
        // slot is ours (see the type), and the flags word is skipped.
        unsafe {
            std::ptr::copy_nonoverlapping(src.as_ptr(), dst, FLAGS_OFFSET);
            std::ptr::copy_nonoverlapping(
                src.as_ptr().add(after),
                dst.add(after),
                src.len() - after,
            );
        }
    }
}

impl Slot<'_, siw_sqe> {
    /// Writes the SQE's words around the flags: `id` (bytes 0..8), then
    /// `num_sge`, `opcode`, `rkey` and `raddr` (bytes 10..24). With
    /// [`sges`](Self::sges) that is every byte but the flags.
    #[inline(always)]
    pub(crate) fn set_head(&mut self, id: u64, num_sge: u8, opcode: u8, rkey: u32, raddr: u64) {
        let p = self.ptr.as_ptr();
        // SAFETY: `p` is an aligned SQE inside the mapping, ours (see the
        // type); addr_of_mut! makes no reference, and none of these fields
        // is the flags word.
        unsafe {
            std::ptr::addr_of_mut!((*p).id).write(id);
            std::ptr::addr_of_mut!((*p).num_sge).write(num_sge);
            std::ptr::addr_of_mut!((*p).opcode).write(opcode);
            std::ptr::addr_of_mut!((*p).rkey).write(rkey);
            std::ptr::addr_of_mut!((*p).raddr).write(raddr);
        }
    }

    /// The SQE's six SGEs (bytes 24..120; inline data lives in `[1..]`).
    #[inline(always)]
    pub(crate) fn sges(&mut self) -> &mut [siw_sge; SIW_MAX_SGE as usize] {
        // SAFETY: an aligned field of an SQE inside the mapping, not the
        // flags word; the slot is ours until it is published, which ends
        // this borrow (`fill` returns first), so nothing else reads or
        // writes these bytes while the reference lives.
        unsafe { &mut *std::ptr::addr_of_mut!((*self.ptr.as_ptr()).sge) }
    }
}

impl Slot<'_, siw_rqe> {
    /// Writes the RQE's words around the flags: `id` (bytes 0..8), then
    /// `num_sge`, and `opcode` and `unused` as 0 (bytes 10..16). With
    /// [`sges`](Self::sges) that is every byte but the flags.
    #[inline(always)]
    pub(crate) fn set_head(&mut self, id: u64, num_sge: u8) {
        let p = self.ptr.as_ptr();
        // SAFETY: as `Slot::<siw_sqe>::set_head`.
        unsafe {
            std::ptr::addr_of_mut!((*p).id).write(id);
            std::ptr::addr_of_mut!((*p).num_sge).write(num_sge);
            std::ptr::addr_of_mut!((*p).opcode).write(0);
            std::ptr::addr_of_mut!((*p).unused).write(0);
        }
    }

    /// The RQE's six SGEs (bytes 16..112).
    #[inline(always)]
    pub(crate) fn sges(&mut self) -> &mut [siw_sge; SIW_MAX_SGE as usize] {
        // SAFETY: as `Slot::<siw_sqe>::sges`.
        unsafe { &mut *std::ptr::addr_of_mut!((*self.ptr.as_ptr()).sge) }
    }
}

const _: () = assert!(std::mem::size_of::<siw_sqe>() % 8 == 0);
const _: () = assert!(std::mem::size_of::<siw_rqe>() % 8 == 0);

/// The user side of a siw completion queue and its arming word.
#[derive(Debug)]
pub(crate) struct CqConsumer {
    ring: Ring,
    /// CQEs taken so far (free-running; the slot is `get % num`).
    get: u32,
}

/// The CQE slot of free-running counter `counter` in a CQ ring at `base`
/// of `num` CQEs ([`CqConsumer::cqe_ptr`], over values the caller holds in
/// registers).
///
/// # Safety
/// `base` and `mask` are a CQ ring's that `Ring::check` accepted with
/// [`CQE_LEN`]-byte elements (so `mask + 1` is a power of two and
/// `(mask + 1) × CQE_LEN` bytes lie inside the mapping).
#[inline(always)]
unsafe fn cqe_slot(base: NonNull<u8>, mask: u32, counter: u32) -> *mut u8 {
    let index = (counter & mask) as usize;
    // SAFETY: index <= mask and, by the caller's promise, (mask + 1) *
    // CQE_LEN bytes from base lie inside the mapping.
    unsafe { base.as_ptr().add(index * CQE_LEN) }
}

impl CqConsumer {
    /// The consumer over `num` CQEs and the arming word mapped at
    /// `base..base + len`, from slot 0 (where the kernel starts too). Leaves
    /// the CQ unarmed, as rdma-core does at creation.
    ///
    /// # Safety
    /// As [`Producer::from_raw`], for a CQ mapping.
    pub(crate) unsafe fn from_raw(
        base: NonNull<u8>,
        len: usize,
        num: u32,
    ) -> Result<Self, LayoutError> {
        // SAFETY: the caller's promise, passed on.
        let cq = unsafe { Self::resume(base, len, num, 0) }?;
        // Relaxed: an initial value; no data is published with it.
        cq.ctrl().store(SIW_NOTIFY_NOT, Ordering::Relaxed);
        Ok(cq)
    }

    /// The consumer over a CQ mapped again (after a refused destroy had
    /// unmapped it), continuing at the position `get` the previous view had
    /// reached. The arming word is left as it is: an arm made before stays.
    ///
    /// # Safety
    /// As [`Producer::from_raw`], for a CQ mapping.
    pub(crate) unsafe fn resume(
        base: NonNull<u8>,
        len: usize,
        num: u32,
        get: u32,
    ) -> Result<Self, LayoutError> {
        Ok(CqConsumer {
            ring: Ring::check(CQ_RING, base, len, num, CQE_LEN, CTRL_LEN)?,
            get,
        })
    }

    /// CQEs in the ring (all of them can be ready at once).
    pub(crate) fn capacity(&self) -> u32 {
        self.ring.num
    }

    /// CQEs taken since the view was made (free-running).
    pub(crate) fn get(&self) -> u32 {
        self.get
    }

    /// The arming word after the CQE array.
    fn ctrl(&self) -> &AtomicU32 {
        let offset = self.ring.num as usize * CQE_LEN;
        // SAFETY: `check` proved num * CQE_LEN + CTRL_LEN <= len; the offset
        // is a multiple of 32 from an 8-aligned base; every access to the
        // word (ours, the kernel's READ_ONCE / WRITE_ONCE) is atomic.
        unsafe { AtomicU32::from_ptr(self.ring.base.as_ptr().add(offset).cast()) }
    }

    /// The oldest ready CQE, copied out, its slot handed back to the kernel;
    /// `None` when the next slot is not VALID yet.
    #[inline(always)]
    pub(crate) fn poll_one(&mut self) -> Option<siw_cqe> {
        let get = self.get;
        // The address first: the compiler does not move a load of
        // `self.ring` after the acquire load below back before it, and
        // would load the ring's base and size again.
        let slot = self.cqe_ptr(get);
        // SAFETY: a slot of this consumer's mapping (`cqe_ptr`).
        let cqe = unsafe { Self::take(slot) }?;
        self.get = get.wrapping_add(1);
        Some(cqe)
    }

    /// Up to `max` ready CQEs, oldest first, each copied out, its slot
    /// handed back and the copy given to `each` with its index; stops at
    /// the first slot not VALID and answers how many. [`poll_one`] in a
    /// loop, with the ring's base and size read once and the position
    /// stored once.
    ///
    /// [`poll_one`]: Self::poll_one
    #[inline(always)]
    pub(crate) fn poll_each(&mut self, max: usize, mut each: impl FnMut(usize, &siw_cqe)) -> usize {
        let (base, mask) = (self.ring.base, self.ring.mask);
        let mut get = self.get;
        let mut n = 0;
        while n < max {
            // SAFETY: the consumer's own ring, checked with CQE_LEN
            // (`resume`); so the slot is one of its mapping's, as `take`
            // needs.
            let Some(cqe) = (unsafe { Self::take(cqe_slot(base, mask, get)) }) else {
                break;
            };
            each(n, &cqe);
            get = get.wrapping_add(1);
            n += 1;
        }
        self.get = get;
        n
    }

    /// The CQE in `slot`, copied out and the slot handed back to the
    /// kernel, if the kernel marked it VALID.
    ///
    /// # Safety
    /// `slot` is a CQE slot of this consumer's mapping ([`cqe_ptr`]).
    ///
    /// [`cqe_ptr`]: Self::cqe_ptr
    #[inline(always)]
    unsafe fn take(slot: *mut u8) -> Option<siw_cqe> {
        // SAFETY: the flags byte is inside the slot; every access to it that
        // can race with another is atomic (the kernel's READ_ONCE /
        // WRITE_ONCE, ours here); the copy below happens only while the slot
        // is VALID, when nothing writes it.
        let flags = unsafe { AtomicU8::from_ptr(slot.add(FLAGS_OFFSET)) };
        // Acquire pairs with the kernel's WRITE_ONCE of VALID after it wrote
        // the fields (siw_sqe_complete, siw_rqe_complete): the fields we copy
        // below are the ones it wrote.
        if flags.load(Ordering::Acquire) & CQE_VALID == 0 {
            return None;
        }
        // SAFETY: the slot lies inside the mapping and is 8-aligned (base is,
        // CQE_LEN is 32); while it is VALID the kernel does not write it, so
        // this plain copy races with nothing.
        let cqe = unsafe { std::ptr::read(slot.cast::<siw_cqe>()) };
        // Release: our copy above happens-before the kernel's READ_ONCE that
        // sees the slot free and its writes of the next CQE into it.
        flags.store(0, Ordering::Release);
        Some(cqe)
    }

    /// The CQE of free-running counter `counter`. The slot size is the
    /// constant [`CQE_LEN`] (`resume` checked the ring with it), which
    /// spares the multiplication by a loaded value.
    #[inline(always)]
    fn cqe_ptr(&self, counter: u32) -> *mut u8 {
        // SAFETY: the consumer's own ring, checked with CQE_LEN (`resume`).
        unsafe { cqe_slot(self.ring.base, self.ring.mask, counter) }
    }

    /// Arms the CQ for one completion event: the next solicited one
    /// (`solicited_only`), or the next one of any kind. Poll once more after
    /// arming: a CQE that arrived just before is reported by that poll, not
    /// by an event.
    ///
    /// siw (6.12) fires a solicited-only arm only for a send-queue completion
    /// of a SOLICITED SQE: receive completions are checked as if unsolicited.
    pub(crate) fn arm(&self, solicited_only: bool) {
        let flags = if solicited_only {
            SIW_NOTIFY_SOLICITED
        } else {
            SIW_NOTIFY_SOLICITED | SIW_NOTIFY_NEXT_COMPLETION
        };
        // SeqCst store and fence: the store is ordered before the caller's
        // next poll loads a CQE's flags, against the kernel's store of those
        // flags, smp_mb, then READ_ONCE of this word (siw_cq_notify_now).
        // Either the kernel sees the arm and fires, or the poll sees the CQE.
        self.ctrl().store(flags, Ordering::SeqCst);
        fence(Ordering::SeqCst);
    }

    /// The arming word as it is now (`SIW_NOTIFY_*`; the kernel clears it
    /// when it fires).
    pub(crate) fn armed(&self) -> u32 {
        // Relaxed: a snapshot for inspection; nothing is read because of it.
        self.ctrl().load(Ordering::Relaxed)
    }
}
