//! An mlx5 shared receive queue as libmlx5 44 keeps one: a buffer of WQEs
//! the process allocates (each a 16-byte "next" segment, whose
//! `next_wqe_index` links the free WQEs into a list, then data segments),
//! a doorbell record whose counter says how many WQEs were posted, and
//! the work request ids by WQE index.
//!
//! **The list.** `head` is the next WQE a post fills, `tail` the last free
//! one; a post takes `head` and moves it along `next_wqe_index`; the queue
//! is full when `head == tail` (one WQE is always left as the list's end).
//! The device consumes posted WQEs in list order and names the one a
//! completion used by its index (the CQE's `wqe_counter`); the poll gives
//! that WQE back by linking it after `tail` (`mlx5_free_srq_wqe`), so WQEs
//! may return in any order. libmlx5 allocates about twice the WQEs asked
//! for and links the second half into a "wait queue" of its own (used only
//! to re-post WQEs after on-demand-paging faults, which uverbs does not
//! have); it is laid out the same here, so the buffers agree byte for byte.
//!
//! The list is written by the posting thread and by any CQ's polling
//! thread (a QP on the SRQ may complete into any CQ), so the state is under
//! a lock both take, as libmlx5's `srq->lock`.

use std::sync::atomic::{fence, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use zerocopy::{FromBytes, IntoBytes};

use super::qp::INVALID_LKEY;
use super::{wqe, DeviceBuf, Shared};
use crate::error::Errno;
use crate::provider::rings::{PostFailure, RecvRing, Ring};
use crate::wr::{PostError, RecvWr};
use uverbs_uapi as sys;

/// Bytes of the "next" segment that starts an SRQ WQE
/// (`struct mlx5_wqe_srq_next_seg`).
const NEXT_SEG: u32 = 16;
/// Bytes of a data segment.
const DATA_SEG: u32 = 16;

/// How libmlx5 44 sizes an SRQ (`mlx5_create_srq`, `mlx5_alloc_srq_buf`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SrqLayout {
    /// WQEs in the buffer (a power of two), wait queue included.
    pub(crate) max: u32,
    /// log2 of a WQE's bytes.
    pub(crate) wqe_shift: u32,
    /// Data segments a WQE holds.
    pub(crate) max_gs: u32,
    /// The last WQE of the free list at creation: also how many requests
    /// may be outstanding (what libmlx5 answers as `max_wr`).
    pub(crate) tail: u32,
    /// The wait queue's first and last WQE, if there is one.
    pub(crate) waitq: Option<(u32, u32)>,
}

impl SrqLayout {
    /// The layout for `max_wr` requests of `max_sge` SGEs, or `EINVAL` as
    /// libmlx5 answers (above the context's `max_srq_recv_wr`, or more SGEs
    /// than its largest receive WQE holds).
    pub(crate) fn of(
        max_srq_recv_wr: u32,
        max_rq_desc_sz: u32,
        max_recv_wr: u32,
        max_wr: u32,
        max_sge: u32,
    ) -> Result<SrqLayout, Errno> {
        if max_wr > max_srq_recv_wr || max_sge > max_rq_desc_sz / DATA_SEG {
            return Err(Errno::INVAL);
        }
        // Twice the requests and one, for the wait queue, where the device
        // allows; else one more than asked and no wait queue.
        let (want, waitq) = match max_wr.checked_mul(2).and_then(|n| n.checked_add(1)) {
            Some(n) if n <= max_srq_recv_wr => (n, true),
            _ => (max_wr + 1, false),
        };
        let size = (NEXT_SEG + max_sge * DATA_SEG).max(32).next_power_of_two();
        // libmlx5 compares the WQE's bytes with the context's `max_recv_wr`
        // (not `max_rq_desc_sz`); so does this.
        if size > max_recv_wr {
            return Err(Errno::INVAL);
        }
        let max = want.next_power_of_two();
        let tail = (max_wr + 1).next_power_of_two() - 1;
        Ok(SrqLayout {
            max,
            wqe_shift: size.trailing_zeros(),
            max_gs: (size - NEXT_SEG) / DATA_SEG,
            tail,
            waitq: waitq.then_some((tail + 1, max - 1)),
        })
    }

    /// Bytes of the WQE buffer.
    pub(crate) fn bytes(&self) -> usize {
        (self.max as usize) << self.wqe_shift
    }
}

/// An SRQ's part of CREATE_SRQ, before the command.
pub(crate) struct SrqPrep {
    buf: DeviceBuf,
    layout: SrqLayout,
    req: sys::mlx5_ib_create_srq,
}

impl crate::provider::UhwIn for SrqPrep {
    fn uhw_in(&self) -> &[u8] {
        self.req.as_bytes()
    }
}

/// Prepares an SRQ (libmlx5's `mlx5_create_srq`): its layout, a zeroed
/// buffer with the free list (and wait queue) linked, the doorbell record
/// after it (zero), and the driver data naming both. A basic SRQ carries
/// no user index (`uidx` 0: `mlx5_ib_create_srq` reads one only for XRC
/// and tag-matching SRQs) and no flags (libmlx5 asks for WQE signatures
/// only under `MLX5_SRQ_SIGNATURE`). Answers the `(max_wr, max_sge)` to
/// ask the kernel for: every WQE but one (the kernel's `max` is then the
/// buffer's), and the SGEs the WQE size holds.
pub(crate) fn prepare(
    shared: &Shared,
    max_wr: u32,
    max_sge: u32,
) -> Result<(SrqPrep, u32, u32), Errno> {
    let params = shared.params()?;
    let layout = SrqLayout::of(
        params.max_srq_recv_wr,
        u32::from(params.max_rq_desc_sz),
        params.max_recv_wr,
        max_wr,
        max_sge,
    )?;
    let db = layout.bytes().div_ceil(64) * 64;
    let buf = DeviceBuf::new(db + 64)?;
    let link = |from: u32, to: u32| {
        for i in from..to {
            // SAFETY: WQE `i` < max of the buffer, which no device reads
            // yet; `next_wqe_index` is at bytes 2..4 of its next segment.
            unsafe {
                buf.ptr()
                    .add(((i as usize) << layout.wqe_shift) + 2)
                    .cast::<[u8; 2]>()
                    .write(((i + 1) as u16).to_be_bytes())
            };
        }
    };
    link(0, layout.tail);
    if let Some((first, last)) = layout.waitq {
        link(first, last);
    }
    let req = sys::mlx5_ib_create_srq {
        buf_addr: buf.addr(),
        db_addr: buf.addr() + db as u64,
        ..Default::default()
    };
    Ok((SrqPrep { buf, layout, req }, layout.max - 1, layout.max_gs))
}

/// What posts and polls share of an SRQ (under its lock).
struct State {
    /// The next WQE a post fills.
    head: u32,
    /// The last free WQE.
    tail: u32,
    /// Free WQEs before `tail`: how many requests a post may still take
    /// (libmlx5 walks the list instead; the count lets a post refuse all
    /// its requests before writing any).
    free: u32,
    /// Requests posted (`counter`, 16 bits in the doorbell record).
    counter: u16,
    /// The work request id of each WQE's request.
    wrid: Box<[u64]>,
}

/// An mlx5 SRQ: its buffer and list, which its ring and the CQs of the
/// QPs on it share.
pub(crate) struct SrqCore {
    buf: DeviceBuf,
    layout: SrqLayout,
    /// The doorbell record's offset in `buf`.
    db: usize,
    state: Mutex<State>,
}

impl SrqCore {
    /// WQE `n`'s first byte.
    fn wqe(&self, n: u32) -> *mut u8 {
        // SAFETY: `n` is masked to the buffer's WQEs.
        unsafe {
            self.buf
                .ptr()
                .add(((n & (self.layout.max - 1)) as usize) << self.layout.wqe_shift)
        }
    }

    /// WQE `n`'s `next_wqe_index`.
    fn next_of(&self, n: u32) -> u32 {
        // SAFETY: bytes 2..4 of the WQE; only this process writes them
        // (under the lock), the device only reads them.
        let b = unsafe { self.wqe(n).add(2).cast::<[u8; 2]>().read_volatile() };
        u32::from(u16::from_be_bytes(b))
    }

    /// The work request id of the WQE a responder CQE names
    /// (`wqe_counter`), and that WQE back on the free list, linked after
    /// the tail (libmlx5's `mlx5_free_srq_wqe`): what a poll does for a QP
    /// on this SRQ, success or error.
    pub(crate) fn complete(&self, wqe_counter: u16) -> u64 {
        let ind = u32::from(wqe_counter) & (self.layout.max - 1);
        // The CQE naming the WQE was read after the CQ's acquire fence:
        // the device is done with the WQE. `wrid` was stored under this
        // lock by the post that filled it; the lock orders that store
        // before this load.
        let mut st = self.state.lock();
        let wr_id = st.wrid[ind as usize];
        // A plain store of the old tail's link: the device reads it only
        // after a later post's doorbell record (which follows this under
        // the same lock, and that post's release fence orders both), so it
        // needs no fence of its own (libmlx5 has none either).
        // SAFETY: bytes 2..4 of WQE `tail`, a free WQE the device does not
        // own.
        unsafe {
            self.wqe(st.tail)
                .add(2)
                .cast::<[u8; 2]>()
                .write_volatile((ind as u16).to_be_bytes())
        };
        st.tail = ind;
        st.free += 1;
        wr_id
    }
}

/// The SRQ's ring: what `SharedReceiveQueue::post_recv` writes to.
pub(crate) struct SrqRing {
    pub(crate) core: Arc<SrqCore>,
    handle: u32,
    shared: Arc<Shared>,
}

/// Takes over the prepared SRQ once CREATE_SRQ answered, and
/// enters it in the context's table under its kernel `handle` (QPs created
/// on it find it there).
pub(crate) fn map(
    shared: &Arc<Shared>,
    prep: SrqPrep,
    uhw: &[u8],
    written: usize,
    handle: u32,
) -> Result<SrqRing, Errno> {
    // The answer names the SRQ number, which a CQE of version 1 does not
    // carry (it names the QP by user index): only its presence is checked.
    uhw.get(..written.min(uhw.len()))
        .and_then(|b| sys::mlx5_ib_create_srq_resp::read_from_prefix(b).ok())
        .ok_or(Errno::PROTO)?;
    let layout = prep.layout;
    let core = Arc::new(SrqCore {
        buf: prep.buf,
        layout,
        db: layout.bytes().div_ceil(64) * 64,
        state: Mutex::new(State {
            head: 0,
            tail: layout.tail,
            free: layout.tail,
            counter: 0,
            wrid: vec![0; layout.max as usize].into_boxed_slice(),
        }),
    });
    shared.insert_srq(handle, core.clone());
    Ok(SrqRing {
        core,
        handle,
        shared: shared.clone(),
    })
}

impl Drop for SrqRing {
    fn drop(&mut self) {
        self.shared.remove_srq(self.handle, &self.core);
    }
}

impl Ring for SrqRing {}

impl RecvRing for SrqRing {
    /// libmlx5's `mlx5_post_srq_recv`, all or nothing: each request fills
    /// the WQE at `head` (every SGE, zero-length ones included, then an
    /// invalid-lkey segment if the list is short) and moves `head` along
    /// its `next_wqe_index`; then the doorbell record's counter.
    fn post(&mut self, wrs: &[RecvWr<'_>]) -> Result<(), PostFailure> {
        let core = &*self.core;
        let max_gs = core.layout.max_gs;
        let mut st = core.state.lock();
        for (index, wr) in wrs.iter().enumerate() {
            let error = if wr.sges.len() > max_gs as usize {
                PostError::TooManySges {
                    op: "post_srq_recv",
                    n: wr.sges.len(),
                    max: max_gs,
                }
            } else if index as u32 >= st.free {
                PostError::QueueFull {
                    op: "post_srq_recv",
                    capacity: core.layout.tail,
                }
            } else {
                continue;
            };
            return Err(PostFailure::Refused { index, error });
        }
        if wrs.is_empty() {
            return Ok(());
        }
        // Ordering, load by load and store by store:
        // - `wrid`, `head`, `free`, `counter`: plain memory under the SRQ's
        //   lock, which every poll that reads or changes them takes too
        //   (the lock's acquire and release order them across threads);
        // - `next_wqe_index` (read below): written only by this process,
        //   under the same lock (at create, or by `complete` linking a
        //   WQE back); the device only reads it; so a plain (volatile)
        //   load under the lock sees the last link;
        // - the data segments: plain stores into WQEs the device does not
        //   own (beyond its consumer count, or given back by a CQE it
        //   wrote after it was done with them), published by the doorbell
        //   record below, after the release fence.
        for wr in wrs {
            let ind = st.head;
            st.wrid[ind as usize] = wr.wr_id;
            st.head = core.next_of(ind);
            // SAFETY: the data segments of WQE `ind`, a free WQE the
            // device does not own (it is past the doorbell counter).
            let scat = unsafe { core.wqe(ind).add(NEXT_SEG as usize) };
            for (j, sge) in wr.sges.iter().enumerate() {
                // SAFETY: segment `j` < max_gs of the WQE.
                unsafe { wqe::put_data_seg(scat.add(j * 16), sge.length, sge.lkey, sge.addr) };
            }
            if wr.sges.len() < max_gs as usize {
                // SAFETY: as above.
                unsafe { wqe::put_data_seg(scat.add(wr.sges.len() * 16), 0, INVALID_LKEY, 0) };
            }
        }
        st.free -= wrs.len() as u32;
        st.counter = st.counter.wrapping_add(wrs.len() as u16);
        // The WQEs (plain stores above) before the doorbell record that
        // hands them to the device: libmlx5's `udma_to_device_barrier`
        // (on x86-64 a compiler barrier: the CPU keeps stores to
        // write-back memory in order); this release fence stops the
        // compiler from moving them after the record's store.
        fence(Ordering::Release);
        // SAFETY: the record's first word, which only this ring writes
        // (under the lock); volatile, as the device reads it.
        unsafe {
            core.buf
                .ptr()
                .add(core.db)
                .cast::<u32>()
                .write_volatile(u32::from(st.counter).to_be())
        };
        Ok(())
    }

    fn ring_capacity(&self) -> Option<u32> {
        Some(self.core.layout.tail)
    }
}
