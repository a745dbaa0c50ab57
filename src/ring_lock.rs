//! The lock of a CQ's ring, with the CQ's "routed" flag in the same byte.
//!
//! A plain poll must take the ring lock and then check that no `OwnedQp`
//! routes the CQ's completions. With the flag a bit of the lock's word,
//! one compare-and-swap from "free, not routed" does both. Only the holder
//! changes the word (the flag is set under the lock too), so the release is
//! a plain store of the word without LOCKED, no second atomic
//! read-modify-write (libibverbs' providers take a spinlock here: a
//! compare-and-swap and a store, without the flag).
//!
//! A QP's rings use the same lock without the flag
//! ([`RingLock::lock_unflagged`]): their release is the constant "free".
//!
//! Holders keep the lock for one read of the ring, or for one command
//! (destroy, resize) on the rare paths, so a waiter spins briefly and then
//! yields; nothing sleeps while holding it.

use std::cell::UnsafeCell;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicU8, Ordering};

/// The lock is held.
const LOCKED: u8 = 1;
/// The CQ is routed (for good): every read goes through its routing.
const ROUTED: u8 = 2;

/// Spins before a waiter starts yielding its time slice.
const SPINS: u32 = 64;

/// A value behind a lock whose word also carries the CQ's routed flag.
pub(crate) struct RingLock<T> {
    word: AtomicU8,
    value: UnsafeCell<T>,
}

// SAFETY: a `RingLock` hands out access to its value only through a
// `RingGuard`, and at most one guard exists at a time (the LOCKED bit, set
// by a successful compare-and-swap and cleared by the guard's drop), so
// sharing the lock between threads moves exclusive access to `T` between
// them: `T: Send` is what that needs, as for `std::sync::Mutex`.
unsafe impl<T: Send> Sync for RingLock<T> {}

impl<T> RingLock<T> {
    /// `value`, unlocked and not routed.
    pub(crate) fn new(value: T) -> Self {
        RingLock {
            word: AtomicU8::new(0),
            value: UnsafeCell::new(value),
        }
    }

    /// The lock, if it is free and the CQ is not routed: one
    /// compare-and-swap. `None` when another thread holds it or the CQ is
    /// routed; [`lock`](Self::lock) and [`is_routed`](Self::is_routed)
    /// then tell which.
    #[inline(always)]
    pub(crate) fn try_lock_unrouted(&self) -> Option<RingGuard<'_, T>> {
        // Acquire on success: the previous holder's writes to the value
        // (its Release in `RingGuard::drop`) happen-before ours.
        self.word
            .compare_exchange(0, LOCKED, Ordering::Acquire, Ordering::Relaxed)
            .ok()
            .map(|_| RingGuard {
                lock: self,
                release: 0,
            })
    }

    /// The lock, waiting for it: a few spins, then yielding. The common
    /// case (free, not routed) inline; the rest out of line, so that a
    /// post's or poll's body holds no loop or registers for it.
    #[inline(always)]
    pub(crate) fn lock(&self) -> RingGuard<'_, T> {
        match self.try_lock_unrouted() {
            Some(guard) => guard,
            None => RingGuard {
                lock: self,
                release: self.wait(),
            },
        }
    }

    /// A lock past its first try: takes it, waiting, and answers the word
    /// it found (what the release restores).
    #[cold]
    #[inline(never)]
    fn wait(&self) -> u8 {
        let mut spins = 0;
        loop {
            // Relaxed: only a successful compare-and-swap below takes the
            // lock, with Acquire; the load only picks the value to try.
            let word = self.word.load(Ordering::Relaxed);
            if word & LOCKED == 0
                && self
                    .word
                    .compare_exchange_weak(
                        word,
                        word | LOCKED,
                        Ordering::Acquire,
                        Ordering::Relaxed,
                    )
                    .is_ok()
            {
                // The word stays `word | LOCKED` while we hold the lock:
                // nobody else writes it then.
                return word;
            }
            if spins < SPINS {
                spins += 1;
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
    }

    /// [`lock`](Self::lock) for a lock whose routed flag is never set (a
    /// QP's rings): the release is the constant "free", so the holder
    /// keeps no word in a register for it. Waits out of line, as `lock`.
    #[inline(always)]
    pub(crate) fn lock_unflagged(&self) -> RingGuard<'_, T> {
        match self.try_lock_unrouted() {
            Some(guard) => guard,
            None => {
                let word = self.wait();
                debug_assert_eq!(word & ROUTED, 0, "lock_unflagged on a routed lock");
                RingGuard {
                    lock: self,
                    release: 0,
                }
            }
        }
    }

    /// [`lock_unflagged`](Self::lock_unflagged)'s first try alone: `None`
    /// when another thread holds the lock (the caller then waits out of
    /// line, so that its own body holds nothing across the wait).
    #[inline(always)]
    pub(crate) fn try_lock_unflagged(&self) -> Option<RingGuard<'_, T>> {
        // Acquire on success: as in `try_lock_unrouted`; a QP's word is
        // never routed, so this is the same compare-and-swap.
        self.try_lock_unrouted()
    }

    /// Marks the CQ routed, for good: takes the lock (so that only a
    /// holder ever writes the word) and releases it with the flag set. The
    /// release's Release: what the caller set up for routing before (its
    /// owner registered) happens-before the read of a holder that sees the
    /// flag ([`is_routed`](Self::is_routed)'s Acquire, or the next lock's);
    /// and a plain poll that tries the lock after it fails its
    /// [`try_lock_unrouted`](Self::try_lock_unrouted).
    pub(crate) fn set_routed(&self) {
        let mut guard = self.lock();
        guard.release |= ROUTED;
    }

    /// Whether the CQ is routed. Acquire: pairs with
    /// [`set_routed`](Self::set_routed).
    pub(crate) fn is_routed(&self) -> bool {
        self.word.load(Ordering::Acquire) & ROUTED != 0
    }

    /// The value, for a caller that holds the lock's owner exclusively: no
    /// lock to take.
    pub(crate) fn get_mut(&mut self) -> &mut T {
        self.value.get_mut()
    }
}

/// The held lock of a [`RingLock`]: the value, until dropped.
pub(crate) struct RingGuard<'a, T> {
    lock: &'a RingLock<T>,
    /// The word the drop stores: the one before we locked (only a holder
    /// writes it), with ROUTED added by `set_routed`.
    release: u8,
}

impl<T> Deref for RingGuard<'_, T> {
    type Target = T;

    fn deref(&self) -> &T {
        // SAFETY: this guard is the only one (the LOCKED bit it set stays
        // set until its drop), so nothing else reaches the value meanwhile.
        unsafe { &*self.lock.value.get() }
    }
}

impl<T> DerefMut for RingGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: as in `deref`; `&mut self` makes this borrow the only
        // one through the guard.
        unsafe { &mut *self.lock.value.get() }
    }
}

impl<T> Drop for RingGuard<'_, T> {
    #[inline(always)]
    fn drop(&mut self) {
        // Release: our writes to the value happen-before the next holder's
        // Acquire. A plain store: while LOCKED is set no one else writes
        // the word (a failed compare-and-swap writes nothing), so no flag
        // set meanwhile can be lost.
        self.lock.word.store(self.release, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn one_holder_at_a_time_and_routed_stays() {
        let lock = RingLock::new(5u32);
        let guard = lock.try_lock_unrouted().expect("free");
        assert!(lock.try_lock_unrouted().is_none(), "held");
        drop(guard);
        assert!(!lock.is_routed());
        lock.set_routed();
        assert!(lock.is_routed(), "set_routed's release sets the flag");
        assert!(lock.try_lock_unrouted().is_none(), "routed");
        let mut g = lock.lock();
        *g += 1;
        assert!(lock.is_routed());
        drop(g);
        assert!(lock.is_routed(), "a release keeps the flag");
        assert_eq!(*lock.lock(), 6);
    }

    #[test]
    fn threads_take_turns() {
        let lock = Arc::new(RingLock::new(0u64));
        let threads: Vec<_> = (0..4)
            .map(|i| {
                let lock = lock.clone();
                std::thread::spawn(move || {
                    for n in 0..if cfg!(miri) { 20 } else { 10_000 } {
                        // Set while the others take and release the lock:
                        // their plain-store releases must not lose it.
                        if i == 1 && n == 10 {
                            lock.set_routed();
                        }
                        // Half the threads try the fast way first.
                        if i % 2 == 0 {
                            if let Some(mut g) = lock.try_lock_unrouted() {
                                *g += 1;
                                continue;
                            }
                        }
                        *lock.lock() += 1;
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(*lock.lock(), 4 * if cfg!(miri) { 20 } else { 10_000 });
        assert!(lock.is_routed());
    }

    /// A QP's lock (never routed): contended holders wait their turn out of
    /// line and each release frees the word for the next.
    #[test]
    fn unflagged_holders_take_turns() {
        let lock = Arc::new(RingLock::new(0u64));
        let rounds = if cfg!(miri) { 20 } else { 10_000 };
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let lock = lock.clone();
                std::thread::spawn(move || {
                    for _ in 0..rounds {
                        *lock.lock_unflagged() += 1;
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let guard = lock.lock_unflagged();
        assert_eq!(*guard, 4 * rounds);
        assert!(lock.try_lock_unrouted().is_none(), "held");
        drop(guard);
        assert!(!lock.is_routed());
        assert!(lock.try_lock_unrouted().is_some(), "released to free");
    }
}
