//! Test-only model of the kernel's side of siw's rings (Linux 6.12
//! `siw_qp.c`, `siw_qp_rx.c`, `siw.h`), over memory shaped like the arrays the
//! kernel `vmalloc_user`s.
//!
//! Like the kernel, each part keeps its position in a private counter
//! (`sq_get`, `rq_get`, `cq_put`) and learns the user's only from the flags.
//!
//! **Orderings: the kernel as the CPU compiles it, no stronger.** The model
//! must not promise what the kernel does not, or its tests prove nothing.
//! * `smp_store_mb(x, v)` is [`smp_store_mb`]: asm-generic's
//!   `WRITE_ONCE(x, v); smp_mb()` (arm64, POWER, RISC-V, …), a relaxed
//!   store followed by a `SeqCst` fence. The barrier comes after the store,
//!   so it is not a release: the kernel's earlier reads of the slot are not
//!   ordered before the store that hands the slot back. Only x86 overrides
//!   it, with `xchg`, a locked read-modify-write: a `SeqCst` swap, which is a
//!   release too, then a `SeqCst` fence (a locked instruction is a full
//!   barrier, which a `SeqCst` swap alone is not in Rust's model). So the release the user side relies on exists on x86-64
//!   only, which is why siw's data path is built there only
//!   ([`super::DATA_PATH_SOUND`]).
//! * `READ_ONCE` / `WRITE_ONCE` are volatile accesses, relaxed atomics. On
//!   x86-64 (TSO: no load is reordered with an earlier load, no store with
//!   an earlier access) every such load is an acquire and every store a
//!   release at the CPU; the model uses [`READ_ONCE`] and [`WRITE_ONCE`],
//!   acquire and release there and relaxed elsewhere.

use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::mem::{offset_of, size_of};
use std::ptr::NonNull;
use std::sync::atomic::{fence, AtomicU16, AtomicU32, AtomicU8, Ordering};

use uverbs_uapi::{
    siw_cqe, siw_rqe, siw_sqe, SIW_MAX_INLINE, SIW_MAX_SGE, SIW_NOTIFY_NEXT_COMPLETION,
    SIW_NOTIFY_NOT, SIW_NOTIFY_SOLICITED, SIW_NUM_OPCODES, SIW_OP_READ, SIW_OP_READ_LOCAL_INV,
    SIW_OP_RECEIVE, SIW_OP_SEND, SIW_OP_WRITE, SIW_WQE_INLINE, SIW_WQE_READ_FENCE,
    SIW_WQE_SIGNALLED, SIW_WQE_SOLICITED, SIW_WQE_VALID,
};

/// The ordering of the kernel's `READ_ONCE` on this CPU: x86-64's loads
/// are acquires (TSO); elsewhere a volatile load orders nothing.
#[cfg(target_arch = "x86_64")]
const READ_ONCE: Ordering = Ordering::Acquire;
#[cfg(not(target_arch = "x86_64"))]
const READ_ONCE: Ordering = Ordering::Relaxed;

/// The ordering of the kernel's `WRITE_ONCE` on this CPU: x86-64's stores
/// are releases (TSO); elsewhere a volatile store orders nothing.
#[cfg(target_arch = "x86_64")]
const WRITE_ONCE: Ordering = Ordering::Release;
#[cfg(not(target_arch = "x86_64"))]
const WRITE_ONCE: Ordering = Ordering::Relaxed;

/// The kernel's `smp_store_mb(*flags, value)` on this CPU (see the module
/// text): x86-64's `xchg`, else `WRITE_ONCE` then `smp_mb()`.
fn smp_store_mb(flags: &AtomicU16, value: u16) {
    #[cfg(target_arch = "x86_64")]
    {
        // xchg: a locked RMW, SeqCst (hence a release as well), and a full
        // barrier: no later load passes it. In Rust's (C++'s) model a SeqCst
        // RMW alone does not order a later non-SeqCst load, so the fence
        // says what the locked instruction does; without it Miri (Tree
        // Borrows' schedule) lets the kernel's next READ_ONCE miss the
        // user's VALID while the user misses the clear: a lost doorbell
        // x86 cannot produce.
        flags.swap(value, Ordering::SeqCst);
        fence(Ordering::SeqCst);
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        // asm-generic: the store orders nothing before it; the barrier only
        // orders it (and what came before) against what comes after.
        flags.store(value, WRITE_ONCE);
        fence(Ordering::SeqCst);
    }
}

/// Bytes after every test mapping that no view may write.
pub(super) const GUARD: usize = 64;
/// What the guard bytes hold.
pub(super) const GUARD_BYTE: u8 = 0x5a;

/// A zeroed, 64-aligned heap buffer of `len` bytes standing in for a ring
/// mapping, followed by [`GUARD`] bytes of [`GUARD_BYTE`].
pub(super) struct TestMem {
    base: NonNull<u8>,
    layout: Layout,
    len: usize,
}

// SAFETY: plain memory owned by the value; concurrent access to it goes
// through the flags atomics or the ring protocol that they order.
unsafe impl Send for TestMem {}
// SAFETY: as for Send.
unsafe impl Sync for TestMem {}

impl TestMem {
    /// `len` zeroed bytes and the guard.
    pub(super) fn new(len: usize) -> Self {
        let layout = Layout::from_size_align(len + GUARD, 64).expect("layout");
        // SAFETY: the size is at least GUARD > 0.
        let base = NonNull::new(unsafe { alloc_zeroed(layout) }).expect("allocation");
        // SAFETY: the guard lies inside the allocation.
        unsafe { std::ptr::write_bytes(base.as_ptr().add(len), GUARD_BYTE, GUARD) };
        TestMem { base, layout, len }
    }

    /// A send queue of `num` SQEs.
    pub(super) fn sq(num: u32) -> Self {
        Self::new(num as usize * size_of::<siw_sqe>())
    }

    /// A receive queue of `num` RQEs.
    pub(super) fn rq(num: u32) -> Self {
        Self::new(num as usize * size_of::<siw_rqe>())
    }

    /// A completion queue of `num` CQEs and the arming word.
    pub(super) fn cq(num: u32) -> Self {
        Self::new(num as usize * size_of::<siw_cqe>() + 8)
    }

    /// Start of the mapping.
    pub(super) fn base(&self) -> NonNull<u8> {
        self.base
    }

    /// Bytes of the mapping (without the guard).
    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// A copy of the mapping and the guard. Only while no other thread
    /// touches the memory.
    pub(super) fn snapshot(&self) -> Vec<u8> {
        let mut out = vec![0u8; self.len + GUARD];
        // SAFETY: inside the allocation; single-threaded use only (above).
        unsafe { std::ptr::copy_nonoverlapping(self.base.as_ptr(), out.as_mut_ptr(), out.len()) };
        out
    }

    /// Overwrites `bytes` at `offset` (test setup, single-threaded).
    pub(super) fn write(&self, offset: usize, bytes: &[u8]) {
        assert!(offset + bytes.len() <= self.len);
        // SAFETY: in bounds (asserted); single-threaded setup.
        unsafe {
            std::ptr::copy_nonoverlapping(
                bytes.as_ptr(),
                self.base.as_ptr().add(offset),
                bytes.len(),
            )
        };
    }

    fn at(&self, offset: usize, size: usize) -> *mut u8 {
        assert!(offset + size <= self.len, "model access outside the ring");
        // SAFETY: in bounds, asserted just above.
        unsafe { self.base.as_ptr().add(offset) }
    }

    fn u16_at(&self, offset: usize) -> &AtomicU16 {
        assert!(offset % 2 == 0);
        // SAFETY: in bounds and aligned; every shared access to it is atomic.
        unsafe { AtomicU16::from_ptr(self.at(offset, 2).cast()) }
    }

    fn u8_at(&self, offset: usize) -> &AtomicU8 {
        // SAFETY: in bounds; every shared access to it is atomic.
        unsafe { AtomicU8::from_ptr(self.at(offset, 1)) }
    }

    fn u32_at(&self, offset: usize) -> &AtomicU32 {
        assert!(offset % 4 == 0);
        // SAFETY: in bounds and aligned; every shared access to it is atomic.
        unsafe { AtomicU32::from_ptr(self.at(offset, 4).cast()) }
    }

    /// Copies the `T` at `offset` out (its owner does not write it now).
    fn read<T: zerocopy::FromBytes>(&self, offset: usize) -> T {
        // SAFETY: in bounds; T is plain data; the protocol gives us the slot.
        unsafe { std::ptr::read_unaligned(self.at(offset, size_of::<T>()).cast::<T>()) }
    }
}

impl Drop for TestMem {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout.
        unsafe { dealloc(self.base.as_ptr(), self.layout) }
    }
}

/// Why the kernel would refuse an element it found VALID (it leaves it in
/// place and moves the QP to an error state).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct KernelRefusal(pub(super) &'static str);

/// The kernel taking SQEs (`sq_get_next`, `siw_activate_tx_from_sq`).
pub(super) struct KernelSq<'a> {
    mem: &'a TestMem,
    num: u32,
    /// Private position (`qp->sq_get`).
    get: u32,
}

impl<'a> KernelSq<'a> {
    /// The kernel's side of the SQ of `num` elements in `mem`.
    pub(super) fn new(mem: &'a TestMem, num: u32) -> Self {
        KernelSq { mem, num, get: 0 }
    }

    fn offset(&self, counter: u32) -> usize {
        (counter % self.num) as usize * size_of::<siw_sqe>()
    }

    fn flags(&self, counter: u32) -> &AtomicU16 {
        self.mem
            .u16_at(self.offset(counter) + offset_of!(siw_sqe, flags))
    }

    /// True when the SQE of `counter` is VALID now.
    pub(super) fn is_valid(&self, counter: u32) -> bool {
        self.flags(counter).load(READ_ONCE) & SIW_WQE_VALID != 0
    }

    /// SQEs taken so far.
    pub(super) fn taken(&self) -> u32 {
        self.get
    }

    /// Takes the next SQE if VALID: copies it, makes the kernel's checks,
    /// then clears its flags (`smp_store_mb`). `None` when it is not VALID.
    pub(super) fn take(&mut self) -> Option<Result<siw_sqe, KernelRefusal>> {
        // READ_ONCE(sqe->flags) & SIW_WQE_VALID.
        if !self.is_valid(self.get) {
            return None;
        }
        let sqe: siw_sqe = self.mem.read(self.offset(self.get));
        if let Err(e) = check_sqe(&sqe) {
            // The kernel leaves the SQE VALID and fails the QP.
            return Some(Err(e));
        }
        // smp_store_mb(sqe->flags, 0): the SQE may be reused.
        smp_store_mb(self.flags(self.get), 0);
        self.get = self.get.wrapping_add(1);
        Some(Ok(sqe))
    }
}

/// The checks `siw_activate_tx_from_sq` (6.12) makes on an SQE it copied.
fn check_sqe(sqe: &siw_sqe) -> Result<(), KernelRefusal> {
    if sqe.opcode >= SIW_NUM_OPCODES {
        return Err(KernelRefusal("opcode >= SIW_NUM_OPCODES"));
    }
    if sqe.flags & SIW_WQE_INLINE != 0 {
        if sqe.opcode != SIW_OP_SEND && sqe.opcode != SIW_OP_WRITE {
            return Err(KernelRefusal("inline on an op other than SEND/WRITE"));
        }
        if sqe.sge[0].length > SIW_MAX_INLINE {
            return Err(KernelRefusal("inline longer than SIW_MAX_INLINE"));
        }
    } else if u32::from(sqe.num_sge) > SIW_MAX_SGE {
        return Err(KernelRefusal("num_sge > SIW_MAX_SGE"));
    }
    let read = sqe.opcode == SIW_OP_READ || sqe.opcode == SIW_OP_READ_LOCAL_INV;
    if sqe.flags & SIW_WQE_READ_FENCE != 0 && read {
        return Err(KernelRefusal("cannot fence read"));
    }
    Ok(())
}

/// The kernel's transmit side: takes SQEs while it finds VALID ones, goes
/// idle when it finds none, and only a doorbell (`siw_post_send`) wakes it.
pub(super) struct KernelTx<'a> {
    /// The SQ it takes from.
    pub(super) sq: KernelSq<'a>,
    /// It will look at the SQ again by itself.
    pub(super) busy: bool,
}

impl<'a> KernelTx<'a> {
    /// Idle, at slot 0.
    pub(super) fn new(sq: KernelSq<'a>) -> Self {
        KernelTx { sq, busy: false }
    }

    /// The POST_SEND system call: process the SQ now.
    pub(super) fn doorbell(&mut self) {
        self.busy = true;
    }

    /// Takes at most `budget` SQEs while busy, calling `done` with each;
    /// goes idle on finding the next one not VALID. Stays busy when the
    /// budget ends first (it still processes the last one taken and will
    /// look at the next one after it).
    pub(super) fn run(
        &mut self,
        budget: u32,
        mut done: impl FnMut(siw_sqe),
    ) -> Result<(), KernelRefusal> {
        let mut taken = 0;
        while self.busy && taken < budget {
            match self.sq.take() {
                None => self.busy = false,
                Some(sqe) => {
                    done(sqe?);
                    taken += 1;
                }
            }
        }
        Ok(())
    }
}

/// The kernel taking RQEs (`siw_rqe_get`).
pub(super) struct KernelRq<'a> {
    mem: &'a TestMem,
    num: u32,
    /// Private position (`qp->rq_get`).
    get: u32,
}

impl<'a> KernelRq<'a> {
    /// The kernel's side of the RQ of `num` elements in `mem`.
    pub(super) fn new(mem: &'a TestMem, num: u32) -> Self {
        KernelRq { mem, num, get: 0 }
    }

    fn offset(&self) -> usize {
        (self.get % self.num) as usize * size_of::<siw_rqe>()
    }

    /// Takes the next RQE if its flags are exactly VALID (the kernel's test),
    /// then clears them (`smp_store_mb`). A VALID bit with other flags would
    /// leave the RQE unseen by the kernel: reported as a refusal.
    pub(super) fn take(&mut self) -> Option<Result<siw_rqe, KernelRefusal>> {
        let flags = self.mem.u16_at(self.offset() + offset_of!(siw_rqe, flags));
        let f = flags.load(READ_ONCE);
        if f & SIW_WQE_VALID == 0 {
            return None;
        }
        if f != SIW_WQE_VALID {
            return Some(Err(KernelRefusal("RQE flags not exactly VALID")));
        }
        let rqe: siw_rqe = self.mem.read(self.offset());
        if u32::from(rqe.num_sge) > SIW_MAX_SGE {
            return Some(Err(KernelRefusal("RQE num_sge > SIW_MAX_SGE")));
        }
        // smp_store_mb(rqe->flags, 0): the RQE may be reused.
        smp_store_mb(flags, 0);
        self.get = self.get.wrapping_add(1);
        Some(Ok(rqe))
    }
}

/// The CQ was full: the kernel reports `IB_EVENT_CQ_ERR` and drops the CQE.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct CqOverflow;

/// The kernel writing CQEs and honouring the arming word
/// (`siw_sqe_complete`, `siw_rqe_complete`, `siw_cq_notify_now`).
pub(super) struct KernelCq<'a> {
    mem: &'a TestMem,
    num: u32,
    /// Private position (`cq->cq_put`).
    put: u32,
}

impl<'a> KernelCq<'a> {
    /// The kernel's side of the CQ of `num` CQEs (and the arming word) in `mem`.
    pub(super) fn new(mem: &'a TestMem, num: u32) -> Self {
        KernelCq { mem, num, put: 0 }
    }

    /// The arming word.
    pub(super) fn ctrl(&self) -> &AtomicU32 {
        self.mem.u32_at(self.num as usize * size_of::<siw_cqe>())
    }

    /// Completes a send: the CQE carries the SQE's id and opcode; the SQE's
    /// flags decide a solicited-only arm. Returns whether the completion
    /// event fires.
    pub(super) fn complete_send(
        &mut self,
        sqe: &siw_sqe,
        bytes: u32,
        status: u16,
        qp_id: u32,
    ) -> Result<bool, CqOverflow> {
        self.push(sqe.id, sqe.opcode, status, bytes, qp_id, sqe.flags)
    }

    /// Completes a receive; the kernel checks the arm as for a SIGNALLED,
    /// unsolicited completion.
    pub(super) fn complete_recv(
        &mut self,
        rqe: &siw_rqe,
        bytes: u32,
        status: u16,
        qp_id: u32,
    ) -> Result<bool, CqOverflow> {
        self.push(
            rqe.id,
            SIW_OP_RECEIVE,
            status,
            bytes,
            qp_id,
            SIW_WQE_SIGNALLED,
        )
    }

    /// Writes one CQE if its slot is free, then checks the arm.
    pub(super) fn push(
        &mut self,
        id: u64,
        opcode: u8,
        status: u16,
        bytes: u32,
        qp_id: u32,
        notify_flags: u16,
    ) -> Result<bool, CqOverflow> {
        let offset = (self.put % self.num) as usize * size_of::<siw_cqe>();
        let flags = self.mem.u8_at(offset + offset_of!(siw_cqe, flags));
        // !READ_ONCE(cqe->flags).
        if flags.load(READ_ONCE) != 0 {
            return Err(CqOverflow);
        }
        let cqe = siw_cqe {
            id,
            flags: 0,
            opcode,
            status,
            bytes,
            imm_data: 0,
            qp_id: qp_id.into(),
        };
        let bytes_of = zerocopy::IntoBytes::as_bytes(&cqe);
        let at = self.mem.at(offset, size_of::<siw_cqe>());
        // SAFETY: in bounds (`at` checked); the slot is free, so user space
        // does not read it now. The flags byte is skipped (written below).
        unsafe {
            std::ptr::copy_nonoverlapping(bytes_of.as_ptr(), at, 8);
            std::ptr::copy_nonoverlapping(bytes_of.as_ptr().add(9), at.add(9), 32 - 9);
        }
        // WRITE_ONCE(cqe->flags, SIW_WQE_VALID).
        flags.store(SIW_WQE_VALID as u8, WRITE_ONCE);
        // The smp_store_mb of the SQE/RQE flags that follows in the kernel.
        fence(Ordering::SeqCst);
        self.put = self.put.wrapping_add(1);
        // siw_cq_notify_now: READ_ONCE, then WRITE_ONCE(NOT) when it fires.
        let armed = self.ctrl().load(Ordering::Relaxed);
        let fire = armed & SIW_NOTIFY_NEXT_COMPLETION != 0
            || (armed & SIW_NOTIFY_SOLICITED != 0 && notify_flags & SIW_WQE_SOLICITED != 0);
        if fire {
            self.ctrl().store(SIW_NOTIFY_NOT, Ordering::Relaxed);
        }
        Ok(fire)
    }
}
