//! An mlx5 QP's queues: one buffer the process allocates (the RQ at offset
//! 0, the SQ after it, the doorbell record after both), sized as libmlx5
//! 44 sizes them; [`wqe`](super::wqe) writes what goes in. A CQE names its
//! QP by user index, not by work request id, so the ids posted are kept
//! here ([`WrIds`]) for the CQ to give back.

use std::sync::atomic::{fence, AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

use zerocopy::IntoBytes;

use super::srq::SrqCore;
use super::uar::{BfReg, BF_HALF};
use super::wqe::{self, SendLimits};
use super::{DeviceBuf, Params, Shared};
use crate::command::QpType;
use crate::error::Errno;
use crate::provider::rings::{PostFailure, RecvRing, Ring, SendRing, SendsQueued};
use crate::provider::QpRequest;
use crate::wr::{PostError, RecvWr, SendWr};
use uverbs_uapi as sys;

/// Bytes of a send queue basic block (`MLX5_SEND_WQE_BB`).
pub(crate) const SEND_WQE_BB: usize = 64;
/// Bytes of a data segment (`struct mlx5_wqe_data_seg`).
const DATA_SEG: u32 = 16;
/// The lkey that ends a receive WQE's scatter list (`MLX5_INVALID_LKEY`).
pub(crate) const INVALID_LKEY: u32 = 0x100;

/// The most a send WQE of an RC or UC QP needs before its data: libmlx5
/// sizes for every operation the QP type allows, memory-window binds
/// included (control, UMR control, mkey context and 64 bytes of KLMs).
const RC_UC_OVERHEAD: u32 = 16 + 48 + 64 + 64;
/// The same for UD: control and datagram (address vector) segments.
const UD_OVERHEAD: u32 = 16 + 48;

/// How a QP's queues are laid out, as libmlx5 44 computes it
/// (`mlx5_calc_sq_size`, `mlx5_calc_rq_size`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Layout {
    /// SQ basic blocks (0: no SQ).
    pub(crate) sq_wqe_cnt: u32,
    /// Send requests the SQ holds.
    pub(crate) sq_max_post: u32,
    /// SGEs per send request.
    pub(crate) sq_max_gs: u32,
    /// Inline bytes per send request.
    pub(crate) max_inline: u32,
    /// RQ WQEs (0: no RQ).
    pub(crate) rq_wqe_cnt: u32,
    /// log2 of an RQ WQE's bytes.
    pub(crate) rq_wqe_shift: u32,
    /// SGEs per receive request.
    pub(crate) rq_max_gs: u32,
}

impl Layout {
    /// Bytes of the RQ (the SQ's offset).
    pub(crate) fn rq_bytes(&self) -> usize {
        (self.rq_wqe_cnt as usize) << self.rq_wqe_shift
    }

    /// Bytes of both queues.
    pub(crate) fn bytes(&self) -> usize {
        self.rq_bytes() + self.sq_wqe_cnt as usize * SEND_WQE_BB
    }

    /// The layout for `cap` on a context with `params`, or `EINVAL` as
    /// libmlx5 answers.
    pub(crate) fn of(
        params: &Params,
        qp_type: QpType,
        cap: &sys::ib_uverbs_qp_cap,
    ) -> Result<Layout, Errno> {
        let overhead = if qp_type == QpType::Ud {
            UD_OVERHEAD
        } else {
            RC_UC_OVERHEAD
        };
        let mut layout = Layout {
            sq_wqe_cnt: 0,
            sq_max_post: 0,
            sq_max_gs: 0,
            max_inline: 0,
            rq_wqe_cnt: 0,
            rq_wqe_shift: 0,
            rq_max_gs: 0,
        };
        let desc = u32::from(params.max_sq_desc_sz);
        if cap.max_send_wr != 0 {
            let inl_size = match cap.max_inline_data {
                0 => 0,
                n => overhead + align(4 + u64::from(n), 16).min(u64::from(u32::MAX)) as u32,
            };
            let max_gather = desc.saturating_sub(overhead) / DATA_SEG;
            if cap.max_send_sge > max_gather {
                return Err(Errno::INVAL);
            }
            let size = overhead + cap.max_send_sge * DATA_SEG;
            let total = size.max(inl_size);
            if total > desc {
                return Err(Errno::INVAL);
            }
            let wqe_size = align(u64::from(total), SEND_WQE_BB as u64) as u32;
            if wqe_size > desc || cap.max_send_wr > 0x7fff_ffff / desc {
                return Err(Errno::INVAL);
            }
            let wq_size = (cap.max_send_wr * wqe_size).next_power_of_two();
            layout.sq_wqe_cnt = wq_size / SEND_WQE_BB as u32;
            if layout.sq_wqe_cnt > params.max_send_wqebb {
                return Err(Errno::INVAL);
            }
            layout.max_inline = wqe_size - overhead - 4;
            layout.sq_max_gs = cap.max_send_sge;
            layout.sq_max_post = wq_size / wqe_size;
        }
        if cap.max_recv_wr != 0 {
            if cap.max_recv_wr > params.max_recv_wr {
                return Err(Errno::INVAL);
            }
            let size = cap.max_recv_sge.max(1).saturating_mul(DATA_SEG);
            if size > u32::from(params.max_rq_desc_sz) {
                return Err(Errno::INVAL);
            }
            let wqe_size = size.next_power_of_two();
            let wq_size = (cap.max_recv_wr.next_power_of_two() * wqe_size).max(SEND_WQE_BB as u32);
            layout.rq_wqe_cnt = wq_size / wqe_size;
            layout.rq_wqe_shift = wqe_size.trailing_zeros();
            layout.rq_max_gs = wqe_size / DATA_SEG;
        }
        Ok(layout)
    }
}

fn align(n: u64, to: u64) -> u64 {
    n.div_ceil(to) * to
}

/// The work request ids of a QP's outstanding requests, which its CQs read
/// to complete them. Written by the posting thread before the doorbell,
/// read by the polling thread after the CQE: atomics, so that the two
/// threads never race on plain memory (the device orders them in time).
pub(crate) struct WrIds {
    sq_wrid: Box<[AtomicU64]>,
    /// Per SQ slot: the send counter after its request (`wqe_head`).
    sq_head: Box<[AtomicU32]>,
    /// Send requests completed (`sq.tail`).
    sq_tail: AtomicU32,
    rq_wrid: Box<[AtomicU64]>,
    /// Receive requests completed (`rq.tail`).
    rq_tail: AtomicU32,
    /// Cleared when the QP leaves the context's table (its SQ dropped):
    /// a CQ that cached these ids drops its later CQEs, as for a QP not
    /// in the table.
    live: AtomicBool,
    /// The SRQ the QP receives from: responder CQEs name its WQEs.
    pub(crate) srq: Option<Arc<SrqCore>>,
}

impl WrIds {
    fn new(layout: &Layout, srq: Option<Arc<SrqCore>>) -> WrIds {
        let n = |c: u32| (0..c.max(1)).map(|_| AtomicU64::new(0)).collect();
        WrIds {
            sq_wrid: n(layout.sq_wqe_cnt),
            sq_head: (0..layout.sq_wqe_cnt.max(1))
                .map(|_| AtomicU32::new(0))
                .collect(),
            sq_tail: AtomicU32::new(0),
            rq_wrid: n(layout.rq_wqe_cnt),
            rq_tail: AtomicU32::new(0),
            live: AtomicBool::new(true),
            srq,
        }
    }

    /// Ids whose send slot 0 and receive slot 0 hold `ids[0]` (the CQE
    /// parsing tests).
    #[cfg(test)]
    pub(crate) fn for_tests(ids: &[u64]) -> WrIds {
        let w = WrIds::new(
            &Layout {
                sq_wqe_cnt: 1,
                sq_max_post: 1,
                sq_max_gs: 1,
                max_inline: 0,
                rq_wqe_cnt: 1,
                rq_wqe_shift: 4,
                rq_max_gs: 1,
            },
            None,
        );
        w.sq_wrid[0].store(ids[0], Ordering::Relaxed);
        w.rq_wrid[0].store(ids[0], Ordering::Relaxed);
        w
    }

    /// Whether the QP is still in its context's table.
    #[inline(always)]
    pub(crate) fn is_live(&self) -> bool {
        self.live.load(Ordering::Acquire)
    }

    /// The id of the send request a CQE's `wqe_counter` names; every
    /// request up to it is complete (unsignalled ones included).
    ///
    /// The id is read before the tail moves: once it has, the slot is free
    /// and a post on another thread may write the next request's id there.
    #[inline(always)]
    pub(crate) fn complete_send(&self, wqe_counter: u16) -> u64 {
        let idx = usize::from(wqe_counter) & (self.sq_wrid.len() - 1);
        let head = self.sq_head[idx].load(Ordering::Relaxed);
        let wr_id = self.sq_wrid[idx].load(Ordering::Relaxed);
        // Release: the reads above before the slot is seen free.
        self.sq_tail.store(head, Ordering::Release);
        wr_id
    }

    /// The id of the oldest outstanding receive request, now complete (read
    /// before the tail frees its slot, as in
    /// [`complete_send`](Self::complete_send)).
    #[inline(always)]
    pub(crate) fn complete_recv(&self) -> u64 {
        let tail = self.rq_tail.load(Ordering::Relaxed);
        let idx = tail as usize & (self.rq_wrid.len() - 1);
        let wr_id = self.rq_wrid[idx].load(Ordering::Relaxed);
        // Release: the read above before the slot is seen free.
        self.rq_tail.store(tail.wrapping_add(1), Ordering::Release);
        wr_id
    }
}

/// A QP's part of CREATE_QP, before the command.
pub(crate) struct QpPrep {
    buf: Arc<DeviceBuf>,
    layout: Layout,
    bf: BfReg,
    uidx: u32,
    req: sys::mlx5_ib_create_qp,
}

impl crate::provider::UhwIn for QpPrep {
    fn uhw_in(&self) -> &[u8] {
        self.req.as_bytes()
    }
}

/// Prepares a QP: its layout, buffer, user index and BlueFlame register,
/// and the driver data naming them; answers the capacities to send (the
/// inline size libmlx5 computed replaces the one asked for).
pub(crate) fn prepare(
    shared: &Arc<Shared>,
    transport: &dyn crate::transport::Transport,
    req: QpRequest,
) -> Result<(QpPrep, QpRequest), Errno> {
    let params = shared.params()?;
    if !matches!(req.qp_type, QpType::Rc | QpType::Uc | QpType::Ud) {
        return Err(Errno::OPNOTSUPP);
    }
    let layout = Layout::of(params, req.qp_type, &req.cap)?;
    let db = layout.bytes().div_ceil(64) * 64;
    let buf = Arc::new(DeviceBuf::new(db + 64)?);
    let bf = shared.take_bfreg(transport)?;
    let uidx = shared.next_uidx();
    let create = sys::mlx5_ib_create_qp {
        buf_addr: buf.addr(),
        db_addr: buf.addr() + db as u64,
        sq_wqe_count: layout.sq_wqe_cnt,
        rq_wqe_count: layout.rq_wqe_cnt,
        rq_wqe_shift: layout.rq_wqe_shift,
        flags: sys::MLX5_QP_FLAG_UAR_PAGE_INDEX,
        uidx,
        bfreg_index: bf.page().page_id,
        ece_options: if params.ece { 0x1000_0000 } else { 0 },
        ..Default::default()
    };
    let mut ask = req;
    if layout.sq_wqe_cnt != 0 {
        ask.cap.max_inline_data = layout.max_inline;
    }
    Ok((
        QpPrep {
            buf,
            layout,
            bf,
            uidx,
            req: create,
        },
        ask,
    ))
}

/// What the SQ and RQ share: the buffer, and the QP's entry in the
/// context's table (removed, and the BlueFlame register given back, when
/// the SQ goes).
struct QpMem {
    buf: Arc<DeviceBuf>,
    layout: Layout,
    db: usize,
}

impl QpMem {
    /// Doorbell record word `i` (0: receive counter, 1: send counter).
    fn dbrec(&self, i: usize) -> *mut u32 {
        // SAFETY: the record follows the queues, within the buffer.
        unsafe { self.buf.ptr().add(self.db + 4 * i).cast() }
    }
}

/// An mlx5 QP's send queue.
pub(crate) struct SendQueue {
    mem: QpMem,
    /// Basic blocks written (`sq.cur_post`).
    cur_post: u32,
    /// Requests posted (`sq.head`).
    head: u32,
    limits: SendLimits,
    /// `MLX5_WQE_CTRL_CQ_UPDATE` when every request completes.
    sig_all: u8,
    /// The fence the next request carries (`fm_cache`).
    fm_cache: u8,
    bf: Option<BfReg>,
    ids: Arc<WrIds>,
    uidx: u32,
    shared: Arc<Shared>,
}

/// An mlx5 QP's receive queue.
pub(crate) struct RecvQueue {
    mem: QpMem,
    /// Requests posted (`rq.head`).
    head: u32,
    ids: Arc<WrIds>,
}

/// Takes over the prepared queues once CREATE_QP answered.
pub(crate) fn map(
    shared: &Arc<Shared>,
    prep: QpPrep,
    qpn: u32,
    qp_type: QpType,
    sq_sig_all: bool,
    srq: Option<Arc<SrqCore>>,
) -> Result<(SendQueue, RecvQueue), Errno> {
    let ids = Arc::new(WrIds::new(&prep.layout, srq));
    shared.insert_qp(prep.uidx, ids.clone());
    let db = prep.layout.bytes().div_ceil(64) * 64;
    let mem = || QpMem {
        buf: prep.buf.clone(),
        layout: prep.layout,
        db,
    };
    Ok((
        SendQueue {
            mem: mem(),
            cur_post: 0,
            head: 0,
            limits: SendLimits {
                qpn,
                qp_type,
                max_sge: prep.layout.sq_max_gs,
                max_inline: prep.layout.max_inline,
            },
            sig_all: if sq_sig_all { wqe::CTRL_CQ_UPDATE } else { 0 },
            fm_cache: 0,
            bf: Some(prep.bf),
            ids: ids.clone(),
            uidx: prep.uidx,
            shared: shared.clone(),
        },
        RecvQueue {
            mem: mem(),
            head: 0,
            ids,
        },
    ))
}

impl SendQueue {
    /// The SQ as the WQE writer sees it.
    fn ring(&self) -> wqe::Sq {
        // SAFETY: the SQ part of the buffer.
        let start = unsafe { self.mem.buf.ptr().add(self.mem.layout.rq_bytes()) };
        wqe::Sq {
            start,
            bbs: self.mem.layout.sq_wqe_cnt,
        }
    }
}

impl Drop for SendQueue {
    fn drop(&mut self) {
        self.ids.live.store(false, Ordering::Release);
        self.shared.remove_qp(self.uidx);
        if let Some(srq) = &self.ids.srq {
            // Its CQEs still queued name SRQ WQEs: the CQ gives those back.
            self.shared.retire_srq_qp(self.uidx, srq.clone());
        }
        if let Some(bf) = self.bf.take() {
            self.shared.give_back_bfreg(bf);
        }
    }
}

impl SendQueue {
    /// After the last request of a post, at block `idx` (`ds` 16-byte
    /// units; `posted` requests in all, whose ids are recorded, written up
    /// to the block counter `cur_post`): takes them (the counters move, the
    /// pending fence is spent), publishes them in the doorbell record, then
    /// rings the doorbell or writes the WQE through BlueFlame.
    #[inline(always)]
    fn publish(&mut self, sq: &wqe::Sq, cur_post: u32, posted: u32, (idx, ds): (u32, u32)) {
        self.head = self.head.wrapping_add(posted);
        self.cur_post = cur_post;
        self.fm_cache = 0;
        // The WQEs and ids before the doorbell record
        // (`udma_to_device_barrier`: x86-64 keeps stores in order; this
        // stops the compiler moving them).
        fence(Ordering::Release);
        // SAFETY: the record's send word, which only this queue writes.
        unsafe {
            self.mem
                .dbrec(1)
                .write_volatile((self.cur_post & 0xffff).to_be())
        };
        let bf = self.bf.as_mut().expect("a live SQ has its register");
        // libmlx5's rule (with its default MLX5_POST_SEND_PREFER_BF): one
        // request of more than one 16-byte unit that fits a half register
        // goes whole through BlueFlame; otherwise the doorbell is the
        // control segment's first 8 bytes.
        if posted == 1 && ds > 1 && ds as usize <= BF_HALF / 16 {
            // SAFETY: the SQ's start and size; the WQE's first block; at
            // most 4 blocks (ds ≤ 16).
            unsafe { bf.blue_flame(sq.start, sq.bbs, idx, blocks(ds)) };
        } else {
            // SAFETY: the control segment of the last WQE, within the SQ.
            let ctrl: [u8; 8] = unsafe { sq.block(idx).cast::<[u8; 8]>().read_volatile() };
            bf.ring(ctrl);
        }
    }
}

impl SendQueue {
    /// Requests posted and not yet completed. Acquire: the CQ read the ids
    /// of the requests it completed before it moved the tail, so their
    /// slots are free to write.
    #[inline(always)]
    fn outstanding(&self) -> u32 {
        self.head
            .wrapping_sub(self.ids.sq_tail.load(Ordering::Acquire))
    }

    /// The control segment's fence and signal bits of `wr`, the `first`
    /// of its post: a fence the request asks for, else (first only) the
    /// one the QP has pending, and the QP's signal-all bit.
    #[inline(always)]
    fn ctrl_bits(&self, wr: &SendWr<'_>, first: bool) -> u8 {
        let fence_bits = if wr.flags.contains(crate::wr::SendFlags::FENCE) {
            wqe::CTRL_FENCE
        } else if first {
            self.fm_cache
        } else {
            0
        };
        self.sig_all | fence_bits
    }

    /// Notes, for the CQ, the request written at block `idx`: its id and
    /// `head`, the send counter after it. The slot is free (the caller
    /// checked the room); the CQ reads it only after the device completed
    /// the request, so after the publication.
    #[inline(always)]
    fn note(&self, idx: u32, head: u32, wr_id: u64) {
        self.ids.sq_wrid[idx as usize].store(wr_id, Ordering::Relaxed);
        self.ids.sq_head[idx as usize].store(head, Ordering::Relaxed);
    }
}

/// Basic blocks a WQE of `ds` 16-byte units takes.
#[inline(always)]
fn blocks(ds: u32) -> u32 {
    (ds * 16).div_ceil(SEND_WQE_BB as u32)
}

/// Checks a request the one-segment writer declined
/// ([`wqe::write_one_segment`]) and writes it: out of line, so that the
/// usual post keeps nothing live for it.
#[inline(never)]
fn write_checked(
    sq: &wqe::Sq,
    idx: u32,
    cur_post: u32,
    limits: &SendLimits,
    fm_ce_se: u8,
    wr: &SendWr<'_>,
) -> Result<u32, PostError> {
    wqe::check_send(limits, wr)?;
    Ok(wqe::write_send(sq, idx, cur_post, limits, fm_ce_se, wr))
}

impl SendQueue {
    /// [`post`](SendRing::post) of one request: several SGEs written as
    /// directly as one (the one-segment writer's gather, which a batch's
    /// loop does not take: it would cost every request of a batch some
    /// instructions), anything else checked and written by
    /// [`write_checked`]. Without a batch's loop.
    #[inline(always)]
    fn post_one(&mut self, wr: &SendWr<'_>) -> Result<bool, PostFailure> {
        if self.outstanding() >= self.mem.layout.sq_max_post {
            return Err(self.queue_full(0));
        }
        let sq = self.ring();
        let idx = self.cur_post & (sq.bbs - 1);
        let bits = self.ctrl_bits(wr, true);
        let cur_post = self.cur_post;
        let ds = match wqe::write_one_segment::<true>(&sq, idx, cur_post, &self.limits, bits, wr) {
            Some(ds) => ds,
            None => write_checked(&sq, idx, cur_post, &self.limits, bits, wr)
                .map_err(|error| PostFailure::Refused { index: 0, error })?,
        };
        self.take_one(&sq, (idx, ds), wr.wr_id);
        Ok(false)
    }

    /// Takes and publishes the one request of a post just written at block
    /// `idx` (`ds` 16-byte units) with id `wr_id`.
    #[inline(always)]
    fn take_one(&mut self, sq: &wqe::Sq, (idx, ds): (u32, u32), wr_id: u64) {
        self.note(idx, self.head.wrapping_add(1), wr_id);
        let cur_post = self.cur_post.wrapping_add(blocks(ds));
        self.publish(sq, cur_post, 1, (idx, ds));
    }

    /// The refusal of request `index` of a post for want of room.
    fn queue_full(&self, index: usize) -> PostFailure {
        PostFailure::Refused {
            index,
            error: PostError::QueueFull {
                op: "post_send",
                capacity: self.mem.layout.sq_max_post,
            },
        }
    }
}

impl Ring for SendQueue {}

impl SendRing for SendQueue {
    /// libmlx5's `_mlx5_post_send` for RC and UC, in one pass: each
    /// request checked and written in turn into the free blocks after the
    /// last published one, then, if all were taken, the doorbell record
    /// and the BlueFlame register. A refused request publishes nothing:
    /// what was written before it lies in free blocks, which the device
    /// does not read (it reads up to the doorbell record's counter), and
    /// the next post writes over.
    #[inline(never)]
    fn post(&mut self, wrs: &[SendWr<'_>]) -> Result<bool, PostFailure> {
        if let [wr] = wrs {
            return self.post_one(wr);
        }
        let max_post = self.mem.layout.sq_max_post;
        let room = max_post.saturating_sub(self.outstanding()) as usize;
        let sq = self.ring();
        let mut cur_post = self.cur_post;
        let mut last = (0, 0);
        for (index, wr) in wrs.iter().enumerate() {
            if index >= room {
                return Err(self.queue_full(index));
            }
            let bits = self.ctrl_bits(wr, index == 0);
            let idx = cur_post & (sq.bbs - 1);
            let ds =
                match wqe::write_one_segment::<false>(&sq, idx, cur_post, &self.limits, bits, wr) {
                    Some(ds) => ds,
                    None => write_checked(&sq, idx, cur_post, &self.limits, bits, wr)
                        .map_err(|error| PostFailure::Refused { index, error })?,
                };
            self.note(idx, self.head.wrapping_add(index as u32 + 1), wr.wr_id);
            cur_post = cur_post.wrapping_add(blocks(ds));
            last = (idx, ds);
        }
        if !wrs.is_empty() {
            self.publish(&sq, cur_post, wrs.len() as u32, last);
        }
        Ok(false)
    }

    /// The usual post, inline in the QP's: one request that
    /// [`wqe::write_one_segment`] writes, with room. Anything else is a call
    /// of [`post`](Self::post).
    #[inline(always)]
    fn try_post(&mut self, wrs: &[SendWr<'_>]) -> SendsQueued {
        if let [wr] = wrs {
            if self.outstanding() < self.mem.layout.sq_max_post {
                let sq = self.ring();
                let idx = self.cur_post & (sq.bbs - 1);
                let bits = self.ctrl_bits(wr, true);
                if let Some(ds) =
                    wqe::write_one_segment::<false>(&sq, idx, self.cur_post, &self.limits, bits, wr)
                {
                    self.take_one(&sq, (idx, ds), wr.wr_id);
                    return SendsQueued::Written;
                }
            }
        }
        match self.post(wrs) {
            Ok(_) => SendsQueued::Written,
            Err(_) => SendsQueued::NotWritten,
        }
    }

    fn ring_capacity(&self) -> Option<u32> {
        Some(self.mem.layout.sq_max_post)
    }
}

impl Ring for RecvQueue {}

/// Writes a receive WQE of `max_gs` segments at `wqe`: a data segment per
/// SGE of non-zero length, then an invalid-lkey segment if that leaves
/// room.
///
/// # Safety
///
/// `wqe` is `max_gs` 16-byte segments of a queue the device does not read
/// yet, and `sges.len() <= max_gs`.
#[inline(always)]
unsafe fn write_recv_wqe(wqe: *mut u8, sges: &[crate::wr::Sge], max_gs: u32) {
    let mut next = wqe;
    for sge in sges {
        if sge.length != 0 {
            // SAFETY: one of the first `sges.len()` segments (the caller's
            // promise).
            unsafe {
                wqe::put_data_seg(next, sge.length, sge.lkey, sge.addr);
                next = next.add(16);
            }
        }
    }
    if next < wqe.wrapping_add(max_gs as usize * 16) {
        // SAFETY: a segment of the WQE, before its end.
        unsafe { wqe::put_data_seg(next, 0, INVALID_LKEY, 0) };
    }
}

impl RecvQueue {
    /// Writes `wr` (checked: at most `rq_max_gs` SGEs) into the free WQE
    /// of receive number `head`, and its id for the CQ.
    #[inline(always)]
    fn write(&self, head: u32, wr: &RecvWr<'_>) {
        let layout = self.mem.layout;
        let ind = head & (layout.rq_wqe_cnt - 1);
        // SAFETY: WQE `ind` of the RQ, at the buffer's start.
        let wqe = unsafe {
            self.mem
                .buf
                .ptr()
                .add((ind as usize) << layout.rq_wqe_shift)
        };
        // SAFETY: the WQE's `rq_max_gs` segments, at least as many as
        // `wr.sges` (checked by the caller).
        unsafe { write_recv_wqe(wqe, wr.sges, layout.rq_max_gs) };
        // A free slot, read by the CQ only after the receive completes, so
        // after the publication.
        self.ids.rq_wrid[ind as usize].store(wr.wr_id, Ordering::Relaxed);
    }

    /// Publishes the receives written up to number `head` (exclusive): the
    /// doorbell record's receive counter.
    #[inline(always)]
    fn publish(&mut self, head: u32) {
        self.head = head;
        // The WQEs before the doorbell record.
        fence(Ordering::Release);
        // SAFETY: the record's receive word, which only this queue writes.
        unsafe { self.mem.dbrec(0).write_volatile((head & 0xffff).to_be()) };
    }

    /// Receives posted and not yet completed. Acquire: the CQ read the ids
    /// of the receives it completed before it moved the tail, so their
    /// slots are free to write.
    #[inline(always)]
    fn outstanding(&self) -> u32 {
        self.head
            .wrapping_sub(self.ids.rq_tail.load(Ordering::Acquire))
    }
}

impl RecvRing for RecvQueue {
    /// libmlx5's `mlx5_post_recv`: one WQE of data segments per request
    /// (zero-length SGEs left out, an invalid-lkey segment ending a short
    /// list), then the doorbell record's receive counter. Each request is
    /// checked and written in turn, into the free WQEs after the last
    /// published one; a refused request publishes nothing (what was
    /// written before it lies in free WQEs, which the device does not
    /// read).
    fn post(&mut self, wrs: &[RecvWr<'_>]) -> Result<(), PostFailure> {
        let layout = self.mem.layout;
        let max_post = layout.rq_wqe_cnt;
        let room = max_post.saturating_sub(self.outstanding()) as usize;
        let mut head = self.head;
        for (index, wr) in wrs.iter().enumerate() {
            let error = if index >= room {
                PostError::QueueFull {
                    op: "post_recv",
                    capacity: max_post,
                }
            } else if wr.sges.len() > layout.rq_max_gs as usize {
                PostError::TooManySges {
                    op: "post_recv",
                    n: wr.sges.len(),
                    max: layout.rq_max_gs,
                }
            } else {
                self.write(head, wr);
                head = head.wrapping_add(1);
                continue;
            };
            return Err(PostFailure::Refused { index, error });
        }
        if !wrs.is_empty() {
            self.publish(head);
        }
        Ok(())
    }

    /// The usual post, inline in the QP's: one request with room and SGEs
    /// that fit. Anything else is left to [`post`](Self::post).
    #[inline(always)]
    fn try_post(&mut self, wrs: &[RecvWr<'_>]) -> bool {
        let [wr] = wrs else {
            return false;
        };
        let layout = self.mem.layout;
        if self.outstanding() >= layout.rq_wqe_cnt || wr.sges.len() > layout.rq_max_gs as usize {
            return false;
        }
        self.write(self.head, wr);
        self.publish(self.head.wrapping_add(1));
        true
    }

    fn ring_capacity(&self) -> Option<u32> {
        Some(self.mem.layout.rq_wqe_cnt)
    }
}

/// The capacities of a QP with these queues (libmlx5's answer to
/// `ibv_create_qp`: its own sizing, not the kernel's).
pub(crate) fn caps(sq: &SendQueue) -> sys::ib_uverbs_qp_cap {
    let l = sq.mem.layout;
    sys::ib_uverbs_qp_cap {
        max_send_wr: l.sq_max_post,
        max_recv_wr: l.rq_wqe_cnt,
        max_send_sge: l.sq_max_gs,
        max_recv_sge: l.rq_max_gs,
        max_inline_data: if l.sq_wqe_cnt == 0 { 0 } else { l.max_inline },
    }
}
