//! An mlx5 CQ: a buffer of 64-byte CQEs the process allocates and the
//! device writes, a doorbell record the process writes (consumer index,
//! arm word), and the context's non-cached UAR page whose CQ doorbell arms
//! it. Unlike rxe and siw, a CQE carries no work request id: it names its
//! QP by the user index the QP was created with (CQE version 1), and the
//! QP's [`WrIds`] give the id back.
//!
//! **Ownership of a CQE.** The device writes CQE `n` with owner bit
//! `(n / entries) & 1` (the lap's parity), then the byte holding it last;
//! the CQ starts with every CQE's opcode invalid (0xf) and owner 0. A CQE is
//! the process's when its opcode is valid and its owner bit is the parity
//! of the consumer index's lap; it is read after that check (an acquire
//! fence: rdma-core's `udma_from_device_barrier`), and handed back by the
//! consumer index in the doorbell record.

use std::marker::PhantomData;
use std::sync::atomic::{fence, Ordering};
use std::sync::Arc;

use zerocopy::{FromBytes, IntoBytes};

use super::qp::WrIds;
use super::uar::UarPage;
use super::{DeviceBuf, Shared};
use crate::error::Errno;
use crate::provider::rings::{CompletionRing, FirstPoll, Ring, Unmapped};
use crate::wr::WorkCompletion;
use uverbs_uapi as sys;

/// Bytes of a CQE (`cqe_size`; 128-byte CQEs are not used here).
pub(crate) const CQE_LEN: usize = 64;
/// The invalid CQE opcode a CQ starts with (`MLX5_CQE_INVALID`).
const CQE_INVALID: u8 = 0xf;

/// CQE opcodes (`op_own >> 4`).
mod opcode {
    pub(super) const REQ: u8 = 0x0;
    pub(super) const RESP_WR_IMM: u8 = 0x1;
    pub(super) const RESP_SEND: u8 = 0x2;
    pub(super) const RESP_SEND_IMM: u8 = 0x3;
    pub(super) const RESP_SEND_INV: u8 = 0x4;
    pub(super) const REQ_ERR: u8 = 0xd;
    pub(super) const RESP_ERR: u8 = 0xe;
}

/// Send WQE opcodes as a requester CQE repeats them (`sop_drop_qpn >> 24`).
mod send_opcode {
    pub(super) const RDMA_WRITE: u8 = 0x08;
    pub(super) const RDMA_WRITE_IMM: u8 = 0x09;
    pub(super) const SEND: u8 = 0x0a;
    pub(super) const SEND_IMM: u8 = 0x0b;
    pub(super) const SEND_INVAL: u8 = 0x01;
    pub(super) const RDMA_READ: u8 = 0x10;
    pub(super) const ATOMIC_CS: u8 = 0x11;
    pub(super) const ATOMIC_FA: u8 = 0x12;
}

/// The kernel's `IB_WC_*` flags, which [`WorkCompletion`] holds.
const WC_GRH: u32 = 1;
const WC_WITH_IMM: u32 = 2;
const WC_WITH_INVALIDATE: u32 = 4;

/// The CQ's part of a CREATE_CQ, before the command: the buffer (CQEs,
/// then the doorbell record) and the driver data naming it.
pub(crate) struct CqPrep {
    buf: DeviceBuf,
    entries: u32,
    req: sys::mlx5_ib_create_cq,
}

impl crate::provider::UhwIn for CqPrep {
    fn uhw_in(&self) -> &[u8] {
        self.req.as_bytes()
    }
}

/// Prepares a CQ of at least `cqe` entries (libmlx5's sizing: the next
/// power of two above `cqe`, at most 2^24): answers the preparation and
/// the `cqe` to ask the kernel for (entries − 1).
pub(crate) fn prepare(shared: &Shared, cqe: u32) -> Result<(CqPrep, u32), Errno> {
    let nc = shared.nc_uar()?;
    if cqe == 0 {
        return Err(Errno::INVAL);
    }
    let entries = cqe
        .checked_add(1)
        .and_then(u32::checked_next_power_of_two)
        .filter(|&n| n <= 1 << 24)
        .ok_or(Errno::INVAL)?;
    let cqes = entries as usize * CQE_LEN;
    // The doorbell record after the CQEs, in its own cache line.
    let buf = DeviceBuf::new(cqes + 64)?;
    for n in 0..entries as usize {
        // SAFETY: within the buffer, which no device uses yet.
        unsafe {
            buf.ptr()
                .add(n * CQE_LEN + CQE_LEN - 1)
                .write(CQE_INVALID << 4)
        };
    }
    let req = sys::mlx5_ib_create_cq {
        buf_addr: buf.addr(),
        db_addr: buf.addr() + cqes as u64,
        cqe_size: CQE_LEN as u32,
        flags: sys::MLX5_IB_CREATE_CQ_FLAGS_UAR_PAGE_INDEX as u16,
        uar_page_index: nc.page_id as u16,
        ..Default::default()
    };
    Ok((CqPrep { buf, entries, req }, entries - 1))
}

/// An mlx5 CQ's ring.
pub(crate) struct CqRing {
    buf: DeviceBuf,
    entries: u32,
    /// CQEs consumed so far (`cons_index`).
    consumer: u32,
    cqn: u32,
    uar: Arc<UarPage>,
    shared: Arc<Shared>,
    /// The QP of the last CQE (user index and ids): consecutive CQEs are
    /// mostly of one QP, whose lookup in the context's table is skipped.
    last_qp: Option<(u32, Arc<WrIds>)>,
}

impl CqRing {
    /// Takes over the prepared buffer once CREATE_CQ answered its number.
    pub(crate) fn map(
        shared: &Arc<Shared>,
        prep: CqPrep,
        uhw: &[u8],
        written: usize,
    ) -> Result<CqRing, Errno> {
        let resp = uhw
            .get(..written.min(uhw.len()))
            .and_then(|b| sys::mlx5_ib_create_cq_resp::read_from_prefix(b).ok())
            .map(|(r, _)| r)
            .ok_or(Errno::PROTO)?;
        Ok(CqRing {
            buf: prep.buf,
            entries: prep.entries,
            consumer: 0,
            cqn: resp.cqn,
            uar: shared.nc_uar()?,
            shared: shared.clone(),
            last_qp: None,
        })
    }

    /// The doorbell record's two big-endian words: consumer index, arm.
    fn dbrec(&self, word: usize) -> *mut u32 {
        // SAFETY: the record lies after the CQEs, within the buffer.
        unsafe {
            self.buf
                .ptr()
                .add(self.entries as usize * CQE_LEN + word * 4)
                .cast()
        }
    }
}

/// The CQE number `consumer` of a CQ of `entries` CQEs in `buf`, if the
/// device has handed it over.
#[inline(always)]
fn ready_cqe(buf: &DeviceBuf, entries: u32, consumer: u32) -> Option<Cqe<'_>> {
    let slot = (consumer & (entries - 1)) as usize * CQE_LEN;
    // SAFETY: the owner byte of a CQE of the buffer; the device writes it,
    // so read once, volatile.
    let op_own = unsafe { buf.ptr().add(slot + CQE_LEN - 1).read_volatile() };
    let lap_parity = u8::from(consumer & entries != 0);
    if op_own >> 4 == CQE_INVALID || (op_own & 1) != lap_parity {
        return None;
    }
    // The rest of the CQE after its owner byte (the device wrote that byte
    // last).
    fence(Ordering::Acquire);
    // SAFETY: a whole CQE of the buffer (64-byte aligned), handed over: the
    // device writes it again only after the consumer index passes it, which
    // the ring publishes after its last read of it.
    Some(unsafe { Cqe::at(buf.ptr().add(slot)) })
}

/// A 64-byte CQE the device handed over (`struct mlx5_cqe64`), read where
/// it lies, field by field: each field is one volatile load, made only
/// where a completion needs it (libmlx5 reads a CQE so, and a requester's
/// completion needs five of its fields).
#[derive(Clone, Copy)]
pub(crate) struct Cqe<'a> {
    at: *const u8,
    _cqe: PhantomData<&'a [u8; CQE_LEN]>,
}

/// A CQE's bytes in ordinary memory, aligned as in a CQ (the tests').
#[cfg(test)]
#[repr(C, align(64))]
pub(crate) struct CqeBytes(pub(crate) [u8; CQE_LEN]);

impl<'a> Cqe<'a> {
    /// The CQE at `at`.
    ///
    /// # Safety
    ///
    /// `at` is 64 bytes, 8-byte aligned, readable while `'a` lasts. (Each
    /// field is a volatile load, so a CQE the device writes again is not
    /// undefined behaviour; its fields mean something only until the ring
    /// hands it back, and the ring reads none after.)
    #[inline(always)]
    unsafe fn at(at: *const u8) -> Cqe<'a> {
        Cqe {
            at,
            _cqe: PhantomData,
        }
    }

    /// The CQE in `bytes`.
    #[cfg(test)]
    pub(crate) fn of(bytes: &'a CqeBytes) -> Cqe<'a> {
        // SAFETY: 64 aligned bytes, borrowed for 'a.
        unsafe { Cqe::at(bytes.0.as_ptr()) }
    }

    #[inline(always)]
    fn byte(self, offset: usize) -> u8 {
        debug_assert!(offset < CQE_LEN);
        // SAFETY: within the CQE (the constructor's promise).
        unsafe { self.at.add(offset).read_volatile() }
    }

    #[inline(always)]
    fn be16(self, offset: usize) -> u16 {
        debug_assert!(offset % 2 == 0 && offset + 2 <= CQE_LEN);
        // SAFETY: within the CQE, aligned (its fields are).
        u16::from_be(unsafe { self.at.add(offset).cast::<u16>().read_volatile() })
    }

    #[inline(always)]
    fn be32(self, offset: usize) -> u32 {
        debug_assert!(offset % 4 == 0 && offset + 4 <= CQE_LEN);
        // SAFETY: within the CQE, aligned (its fields are).
        u32::from_be(unsafe { self.at.add(offset).cast::<u32>().read_volatile() })
    }

    /// The CQE's opcode (`op_own >> 4`).
    pub(crate) fn opcode(self) -> u8 {
        self.byte(63) >> 4
    }

    /// The send WQE's opcode a requester CQE repeats.
    fn send_opcode(self) -> u8 {
        self.byte(56)
    }

    /// The QP number.
    pub(crate) fn qpn(self) -> u32 {
        self.be32(56) & 0xff_ffff
    }

    /// The QP's user index (CQE version 1).
    pub(crate) fn uidx(self) -> u32 {
        self.be32(32) & 0xff_ffff
    }

    /// Bytes received or read.
    pub(crate) fn byte_cnt(self) -> u32 {
        self.be32(44)
    }

    /// The immediate data, invalidated rkey or P_Key word, as it lies.
    fn imm_inval_pkey(self) -> [u8; 4] {
        self.be32(36).to_be_bytes()
    }

    /// The WQE counter.
    fn wqe_counter(self) -> u16 {
        self.be16(60)
    }

    /// GRH flags, SL and source QP.
    fn flags_rqpn(self) -> u32 {
        self.be32(24)
    }

    fn slid(self) -> u16 {
        self.be16(22)
    }

    fn ml_path(self) -> u8 {
        self.byte(17)
    }

    /// `struct mlx5_err_cqe`: the syndrome.
    fn syndrome(self) -> u8 {
        self.byte(55)
    }

    /// `struct mlx5_err_cqe`: the vendor syndrome.
    fn vendor_err(self) -> u8 {
        self.byte(54)
    }
}

/// `ibv_wc_status` of an error CQE's syndrome (libmlx5's table).
fn error_status(syndrome: u8) -> u32 {
    match syndrome {
        0x01 => 1,  // LOCAL_LENGTH_ERR → IBV_WC_LOC_LEN_ERR
        0x02 => 2,  // LOCAL_QP_OP_ERR → LOC_QP_OP_ERR
        0x04 => 4,  // LOCAL_PROT_ERR → LOC_PROT_ERR
        0x05 => 5,  // WR_FLUSH_ERR → WR_FLUSH_ERR
        0x06 => 6,  // MW_BIND_ERR → MW_BIND_ERR
        0x10 => 7,  // BAD_RESP_ERR → BAD_RESP_ERR
        0x11 => 8,  // LOCAL_ACCESS_ERR → LOC_ACCESS_ERR
        0x12 => 9,  // REMOTE_INVAL_REQ_ERR → REM_INV_REQ_ERR
        0x13 => 10, // REMOTE_ACCESS_ERR → REM_ACCESS_ERR
        0x14 => 11, // REMOTE_OP_ERR → REM_OP_ERR
        0x15 => 12, // TRANSPORT_RETRY_EXC_ERR → RETRY_EXC_ERR
        0x16 => 13, // RNR_RETRY_EXC_ERR → RNR_RETRY_EXC_ERR
        0x22 => 16, // REMOTE_ABORTED_ERR → REM_ABORT_ERR
        _ => 21,    // GENERAL_ERR
    }
}

/// The work completion of `cqe` for a QP whose ids are `ids`, as libmlx5
/// 44's `mlx5_parse_cqe` makes it (CQE version 1, no inline scatter). For
/// a QP on an SRQ, a responder CQE (success or error) names the SRQ WQE it
/// used by `wqe_counter`: its id, and the WQE goes back to the SRQ's free
/// list. `None` for a CQE this provider does not produce a completion
/// for (resize, signature, tag matching). Inlined: an `Option` of 48
/// bytes would come back through memory and be copied again.
#[inline(always)]
pub(crate) fn completion(cqe: &Cqe<'_>, ids: &WrIds) -> Option<sys::ib_uverbs_wc> {
    let mut wc = sys::ib_uverbs_wc {
        qp_num: cqe.qpn(),
        ..Default::default()
    };
    let op = cqe.opcode();
    match op {
        opcode::REQ => {
            wc.wr_id = ids.complete_send(cqe.wqe_counter());
            match cqe.send_opcode() {
                send_opcode::RDMA_WRITE_IMM => {
                    wc.wc_flags = WC_WITH_IMM;
                    wc.opcode = sys::IB_UVERBS_WC_RDMA_WRITE;
                }
                send_opcode::RDMA_WRITE => wc.opcode = sys::IB_UVERBS_WC_RDMA_WRITE,
                send_opcode::SEND_IMM => {
                    wc.wc_flags = WC_WITH_IMM;
                    wc.opcode = sys::IB_UVERBS_WC_SEND;
                }
                send_opcode::SEND | send_opcode::SEND_INVAL => wc.opcode = sys::IB_UVERBS_WC_SEND,
                send_opcode::RDMA_READ => {
                    wc.opcode = sys::IB_UVERBS_WC_RDMA_READ;
                    wc.byte_len = cqe.byte_cnt();
                }
                send_opcode::ATOMIC_CS => {
                    wc.opcode = sys::IB_UVERBS_WC_COMP_SWAP;
                    wc.byte_len = 8;
                }
                send_opcode::ATOMIC_FA => {
                    wc.opcode = sys::IB_UVERBS_WC_FETCH_ADD;
                    wc.byte_len = 8;
                }
                _ => {}
            }
        }
        opcode::RESP_WR_IMM | opcode::RESP_SEND | opcode::RESP_SEND_IMM | opcode::RESP_SEND_INV => {
            wc.wr_id = complete_recv(cqe, ids);
            wc.byte_len = cqe.byte_cnt();
            let imm = cqe.imm_inval_pkey();
            match op {
                opcode::RESP_WR_IMM => {
                    wc.opcode = crate::wr::IB_WC_RECV + 1;
                    wc.wc_flags = WC_WITH_IMM;
                    wc.ex = u32::from_ne_bytes(imm);
                }
                opcode::RESP_SEND => wc.opcode = crate::wr::IB_WC_RECV,
                opcode::RESP_SEND_IMM => {
                    wc.opcode = crate::wr::IB_WC_RECV;
                    wc.wc_flags = WC_WITH_IMM;
                    wc.ex = u32::from_ne_bytes(imm);
                }
                _ => {
                    wc.opcode = crate::wr::IB_WC_RECV;
                    wc.wc_flags = WC_WITH_INVALIDATE;
                    wc.ex = u32::from_be_bytes(imm);
                }
            }
            let flags_rqpn = cqe.flags_rqpn();
            wc.slid = cqe.slid();
            wc.sl = ((flags_rqpn >> 24) & 0xf) as u8;
            wc.src_qp = flags_rqpn & 0xff_ffff;
            wc.dlid_path_bits = cqe.ml_path() & 0x7f;
            if (flags_rqpn >> 28) & 3 != 0 {
                wc.wc_flags |= WC_GRH;
            }
            wc.pkey_index = (u32::from_be_bytes(imm) & 0xffff) as u16;
        }
        opcode::REQ_ERR | opcode::RESP_ERR => {
            wc.status = error_status(cqe.syndrome());
            wc.vendor_err = u32::from(cqe.vendor_err());
            wc.wr_id = if op == opcode::REQ_ERR {
                ids.complete_send(cqe.wqe_counter())
            } else {
                complete_recv(cqe, ids)
            };
        }
        _ => return None,
    }
    Some(wc)
}

/// Whether `cqe` completes a receive (successfully or not).
fn is_responder(cqe: &Cqe<'_>) -> bool {
    matches!(
        cqe.opcode(),
        opcode::RESP_WR_IMM
            | opcode::RESP_SEND
            | opcode::RESP_SEND_IMM
            | opcode::RESP_SEND_INV
            | opcode::RESP_ERR
    )
}

/// The id of the receive a responder CQE completes: the QP's oldest, or
/// the SRQ WQE it names (given back to the SRQ).
fn complete_recv(cqe: &Cqe<'_>, ids: &WrIds) -> u64 {
    match &ids.srq {
        Some(srq) => srq.complete(cqe.wqe_counter()),
        None => ids.complete_recv(),
    }
}

impl Ring for CqRing {}

impl CqRing {
    /// The QP of `cqe` from the cache of the last CQE's, if it is that one
    /// and still in the context's table.
    #[inline(always)]
    fn cached_qp(&self, cqe: &Cqe<'_>) -> Option<&Arc<WrIds>> {
        match &self.last_qp {
            Some((uidx, ids)) if *uidx == cqe.uidx() && ids.is_live() => Some(ids),
            _ => None,
        }
    }

    /// Consumes CQEs into `out` until it is full or none is ready; answers
    /// the completions written. Hands nothing back: the caller
    /// [`publish`](Self::publish)es the consumer index.
    fn drain(&mut self, out: &mut [sys::ib_uverbs_wc]) -> usize {
        let mut n = 0;
        while n < out.len() {
            let Some(cqe) = ready_cqe(&self.buf, self.entries, self.consumer) else {
                break;
            };
            self.consumer = self.consumer.wrapping_add(1);
            // A CQE of a QP no longer here (destroyed with completions
            // still queued) is consumed and dropped; the SRQ WQE of a
            // receive it names goes back to its SRQ.
            let ids = match self.cached_qp(&cqe) {
                Some(ids) => ids,
                None => match self.shared.qp(cqe.uidx()) {
                    Some(ids) => &self.last_qp.insert((cqe.uidx(), ids)).1,
                    None => {
                        if is_responder(&cqe) {
                            if let Some(srq) = self.shared.retired_srq(cqe.uidx()) {
                                srq.complete(cqe.wqe_counter());
                            }
                        }
                        continue;
                    }
                },
            };
            if let Some(wc) = completion(&cqe, ids) {
                out[n] = wc;
                n += 1;
            }
        }
        n
    }

    /// Hands the consumed CQEs back: the consumer index in the doorbell
    /// record, after they are read.
    #[inline(always)]
    fn publish(&self) {
        // Release: the CQEs are read before the device may write them again.
        fence(Ordering::Release);
        // SAFETY: the record's first word, which only this ring writes.
        unsafe {
            self.dbrec(0)
                .write_volatile((self.consumer & 0xff_ffff).to_be())
        };
    }

    /// [`CompletionRing::poll`], out of line for [`poll_first`]'s uncommon
    /// cases.
    ///
    /// [`poll_first`]: CompletionRing::poll_first
    #[inline(never)]
    fn poll_all(&mut self, out: &mut [WorkCompletion]) -> usize {
        let start = self.consumer;
        let n = self.drain(WorkCompletion::as_raw_slice_mut(out));
        if self.consumer != start {
            self.publish();
        }
        n
    }
}

impl CompletionRing for CqRing {
    fn poll(&mut self, out: &mut [WorkCompletion]) -> Result<usize, Unmapped> {
        Ok(self.poll_all(out))
    }

    /// The usual poll, inline in the CQ's: the next CQE is of the QP of
    /// the last one and makes a completion. It is consumed into `out[0]`;
    /// with room for more, [`poll_more`](Self::poll_more) goes on. Any
    /// other CQE (a QP to look up or gone, a CQE without a completion)
    /// is left to the whole poll, out of line.
    #[inline(always)]
    fn poll_first(&mut self, out: &mut [WorkCompletion]) -> Result<FirstPoll, Unmapped> {
        let Some(first) = out.first_mut() else {
            return Ok(FirstPoll::Done(0));
        };
        let Some(cqe) = ready_cqe(&self.buf, self.entries, self.consumer) else {
            return Ok(FirstPoll::Done(0));
        };
        let Some(wc) = self.cached_qp(&cqe).and_then(|ids| completion(&cqe, ids)) else {
            return Ok(FirstPoll::Done(self.poll_all(out)));
        };
        *first = WorkCompletion::from_raw(wc);
        self.consumer = self.consumer.wrapping_add(1);
        if out.len() == 1 {
            self.publish();
            Ok(FirstPoll::Done(1))
        } else {
            Ok(FirstPoll::More)
        }
    }

    /// The poll after [`poll_first`](Self::poll_first) consumed one CQE
    /// into `out[0]`: the rest into `out[1..]`, then the consumer index.
    fn poll_more(&mut self, out: &mut [WorkCompletion]) -> usize {
        let n = self.drain(WorkCompletion::as_raw_slice_mut(&mut out[1..]));
        self.publish();
        1 + n
    }

    /// libmlx5's `mlx5_arm_cq`: the arm word (sequence number: completion
    /// events read, mod 4; solicited or not; consumer index) into the
    /// doorbell record, then the same with the CQ number to the UAR's CQ
    /// doorbell.
    fn arm_in_memory(
        &mut self,
        solicited_only: bool,
        events_read: u32,
    ) -> Option<Result<(), Errno>> {
        let sn = events_read & 3;
        let cmd = if solicited_only { 1 << 24 } else { 0 };
        let word = sn << 28 | cmd | (self.consumer & 0xff_ffff);
        // SAFETY: the record's second word, which only this ring writes.
        unsafe { self.dbrec(1).write_volatile(word.to_be()) };
        self.uar
            .ring_cq(u64::from(word) << 32 | u64::from(self.cqn));
        Some(Ok(()))
    }

    /// Not yet: libmlx5 allocates a new CQE buffer, hands it over in
    /// `mlx5_ib_resize_cq` and copies the pending CQEs itself.
    fn resize_uhw_out(&self) -> Result<usize, &'static str> {
        Err("CQ resize is not implemented for mlx5 here")
    }
}
