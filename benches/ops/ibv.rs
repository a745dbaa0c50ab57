//! The libibverbs side: Debian's static libibverbs and its rxe and siw
//! providers (linked by benches/build.rs with `libibverbs-peer`), driven over FFI
//! through the same loops as ours.
//!
//! `ibv_post_send`, `ibv_post_recv` and `ibv_poll_cq` are static inline in
//! verbs.h: they call `context->ops.post_send` / `ops.post_recv` /
//! `ops.poll_cq`, which are the provider's `rxe_post_send` /
//! `rxe_post_recv` / `rxe_poll_cq` (siw: `siw_…`; local symbols of the
//! archives; callgrind sees them by name). So do we. The structs are the
//! parts of verbs.h we touch, `#[repr(C)]`; their sizes and offsets are
//! checked at compile time against the numbers a gcc-compiled probe of
//! /usr/include/infiniband/verbs.h (rdma-core 52, x86_64) printed.

use std::ffi::{c_int, c_void};
use std::mem::{offset_of, size_of};

use uverbs::qp::{QpAttr, QpAttrMask, QpState};

use crate::libibverbs::{
    self, fail, ibv_alloc_pd, ibv_close_device, ibv_dealloc_pd, ibv_dereg_mr, ibv_open_device,
    ibv_reg_mr, IbvContext, IbvCq, IbvDevice, IbvQp, IbvQpCap, Objects,
};
use crate::{Case, Counts, Pair, BATCH, BYTES, TARGET_OFFSET};

type PollCq = unsafe extern "C" fn(*mut IbvCq, c_int, *mut IbvWc) -> c_int;
type PostSend = unsafe extern "C" fn(*mut IbvQp, *mut IbvSendWr, *mut *mut IbvSendWr) -> c_int;
type PostRecv = unsafe extern "C" fn(*mut IbvQp, *mut IbvRecvWr, *mut *mut IbvRecvWr) -> c_int;

/// `struct ibv_context` up to and including `ops.post_recv`, our view of
/// an [`IbvContext`]: the device pointer, then `struct ibv_context_ops`,
/// 11 entries before `poll_cq`, 13 between `poll_cq` and `post_send`, and
/// `post_recv` right after.
#[repr(C)]
struct ContextOps {
    device: *mut IbvDevice,
    ops_before_poll_cq: [*const c_void; 11],
    poll_cq: Option<PollCq>,
    ops_between: [*const c_void; 13],
    post_send: Option<PostSend>,
    post_recv: Option<PostRecv>,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct IbvSge {
    addr: u64,
    length: u32,
    lkey: u32,
}

/// `struct ibv_recv_wr`.
#[repr(C)]
struct IbvRecvWr {
    wr_id: u64,
    next: *mut IbvRecvWr,
    sg_list: *mut IbvSge,
    num_sge: c_int,
}

/// `struct ibv_send_wr`, whole (the provider reads it by opcode): the
/// `wr` union as its `rdma` member padded to the `atomic` member's 32
/// bytes, then `qp_type` and the 48-byte `bind_mw`/`tso` union.
#[repr(C)]
struct IbvSendWr {
    wr_id: u64,
    next: *mut IbvSendWr,
    sg_list: *mut IbvSge,
    num_sge: c_int,
    opcode: u32,
    send_flags: u32,
    imm_data: u32,
    remote_addr: u64,
    rkey: u32,
    wr_rest: [u32; 5],
    qp_type: u32,
    tail: [u64; 6],
}

#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
struct IbvWc {
    wr_id: u64,
    status: u32,
    opcode: u32,
    vendor_err: u32,
    byte_len: u32,
    imm_data: u32,
    qp_num: u32,
    src_qp: u32,
    wc_flags: u32,
    pkey_index: u16,
    slid: u16,
    sl: u8,
    dlid_path_bits: u8,
}

/// `struct ibv_global_route` (8-aligned by `union ibv_gid`'s u64s).
#[repr(C, align(8))]
#[derive(Default)]
struct IbvGlobalRoute {
    dgid: [u8; 16],
    flow_label: u32,
    sgid_index: u8,
    hop_limit: u8,
    traffic_class: u8,
}

#[repr(C)]
#[derive(Default)]
struct IbvAhAttr {
    grh: IbvGlobalRoute,
    dlid: u16,
    sl: u8,
    src_path_bits: u8,
    static_rate: u8,
    is_global: u8,
    port_num: u8,
}

/// `struct ibv_qp_attr`, whole (modify_qp reads it by mask).
#[repr(C)]
#[derive(Default)]
struct IbvQpAttr {
    qp_state: u32,
    cur_qp_state: u32,
    path_mtu: u32,
    path_mig_state: u32,
    qkey: u32,
    rq_psn: u32,
    sq_psn: u32,
    dest_qp_num: u32,
    qp_access_flags: u32,
    cap: IbvQpCap,
    ah_attr: IbvAhAttr,
    alt_ah_attr: IbvAhAttr,
    pkey_index: u16,
    alt_pkey_index: u16,
    en_sqd_async_notify: u8,
    sq_draining: u8,
    max_rd_atomic: u8,
    max_dest_rd_atomic: u8,
    min_rnr_timer: u8,
    port_num: u8,
    timeout: u8,
    retry_cnt: u8,
    rnr_retry: u8,
    alt_port_num: u8,
    alt_timeout: u8,
    rate_limit: u32,
}

// The probe's numbers (see the module comment).
const _: () = {
    assert!(offset_of!(ContextOps, poll_cq) == 96);
    assert!(offset_of!(ContextOps, post_send) == 208);
    assert!(offset_of!(ContextOps, post_recv) == 216);
    assert!(size_of::<IbvRecvWr>() == 32 && offset_of!(IbvRecvWr, num_sge) == 24);
    assert!(size_of::<IbvSge>() == 16);
    assert!(size_of::<IbvSendWr>() == 128);
    assert!(offset_of!(IbvSendWr, num_sge) == 24);
    assert!(offset_of!(IbvSendWr, opcode) == 28);
    assert!(offset_of!(IbvSendWr, send_flags) == 32);
    assert!(offset_of!(IbvSendWr, remote_addr) == 40);
    assert!(offset_of!(IbvSendWr, rkey) == 48);
    assert!(offset_of!(IbvSendWr, qp_type) == 72);
    assert!(offset_of!(IbvSendWr, tail) == 80);
    assert!(size_of::<IbvWc>() == 48);
    assert!(offset_of!(IbvWc, byte_len) == 20 && offset_of!(IbvWc, qp_num) == 28);
    assert!(offset_of!(IbvWc, dlid_path_bits) == 45);
    assert!(size_of::<IbvGlobalRoute>() == 24 && offset_of!(IbvGlobalRoute, sgid_index) == 20);
    assert!(size_of::<IbvAhAttr>() == 32 && offset_of!(IbvAhAttr, is_global) == 29);
    assert!(offset_of!(IbvAhAttr, port_num) == 30);
    assert!(size_of::<IbvQpAttr>() == 144);
    assert!(offset_of!(IbvQpAttr, qp_access_flags) == 32);
    assert!(offset_of!(IbvQpAttr, ah_attr) == 56 && offset_of!(IbvQpAttr, pkey_index) == 120);
    assert!(offset_of!(IbvQpAttr, max_rd_atomic) == 126);
    assert!(offset_of!(IbvQpAttr, port_num) == 129 && offset_of!(IbvQpAttr, rnr_retry) == 132);
    assert!(offset_of!(IbvQpAttr, rate_limit) == 136);
};

// verbs.h's enum values (the probe printed the same).
const IBV_WR_RDMA_WRITE: u32 = 0;
const IBV_WR_SEND: u32 = 2;
const IBV_WR_RDMA_READ: u32 = 4;
const IBV_SEND_SIGNALED: u32 = 2;
const IBV_SEND_INLINE: u32 = 8;
const IBV_QPS_INIT: u32 = 1;
const IBV_QPS_RTR: u32 = 2;
const IBV_QPS_RTS: u32 = 3;
const IBV_WC_SUCCESS: u32 = 0;
const IBV_WC_SEND: u32 = 0;
const IBV_WC_RDMA_WRITE: u32 = 1;
const IBV_WC_RDMA_READ: u32 = 2;
const IBV_WC_RECV: u32 = 128;
const IBV_ACCESS_LOCAL_WRITE: c_int = 1;
const IBV_ACCESS_REMOTE_WRITE: c_int = 2;
const IBV_ACCESS_REMOTE_READ: c_int = 4;
const IBV_QP_STATE: c_int = 1;
const IBV_QP_ACCESS_FLAGS: c_int = 8;
const IBV_QP_PKEY_INDEX: c_int = 16;
const IBV_QP_PORT: c_int = 32;
const IBV_QP_AV: c_int = 128;
const IBV_QP_PATH_MTU: c_int = 256;
const IBV_QP_TIMEOUT: c_int = 512;
const IBV_QP_RETRY_CNT: c_int = 1024;
const IBV_QP_RNR_RETRY: c_int = 2048;
const IBV_QP_RQ_PSN: c_int = 4096;
const IBV_QP_MAX_QP_RD_ATOMIC: c_int = 8192;
const IBV_QP_MIN_RNR_TIMER: c_int = 32768;
const IBV_QP_SQ_PSN: c_int = 65536;
const IBV_QP_MAX_DEST_RD_ATOMIC: c_int = 131072;
const IBV_QP_DEST_QPN: c_int = 1048576;

extern "C" {
    fn ibv_modify_qp(qp: *mut IbvQp, attr: *mut IbvQpAttr, mask: c_int) -> c_int;
    fn ibv_query_gid(ctx: *mut IbvContext, port: u8, index: c_int, gid: *mut [u8; 16]) -> c_int;
}

/// RESET -> INIT -> RTR -> RTS of `qp` towards `dest_qpn` at `gid`, with
/// the values of tests/common/rc.rs (and rdma-core's rc_pingpong).
///
/// # Safety
/// `qp` is a live QP.
unsafe fn connect(qp: *mut IbvQp, dest_qpn: u32, gid: [u8; 16], mtu: u32) -> Result<(), String> {
    let access = (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ) as u32;
    let mut init = IbvQpAttr {
        qp_state: IBV_QPS_INIT,
        pkey_index: 0,
        port_num: crate::PORT,
        qp_access_flags: access,
        ..Default::default()
    };
    let mut rtr = IbvQpAttr {
        qp_state: IBV_QPS_RTR,
        path_mtu: mtu,
        dest_qp_num: dest_qpn,
        rq_psn: 0,
        max_dest_rd_atomic: 1,
        min_rnr_timer: 12,
        ah_attr: IbvAhAttr {
            grh: IbvGlobalRoute {
                dgid: gid,
                sgid_index: crate::GID_INDEX as u8,
                hop_limit: 1,
                ..Default::default()
            },
            is_global: 1,
            port_num: crate::PORT,
            ..Default::default()
        },
        ..Default::default()
    };
    let mut rts = IbvQpAttr {
        qp_state: IBV_QPS_RTS,
        timeout: 14,
        retry_cnt: 7,
        rnr_retry: 7,
        sq_psn: 0,
        max_rd_atomic: 1,
        ..Default::default()
    };
    let steps = [
        (
            "RESET->INIT",
            &mut init,
            IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS,
        ),
        (
            "INIT->RTR",
            &mut rtr,
            IBV_QP_STATE
                | IBV_QP_AV
                | IBV_QP_PATH_MTU
                | IBV_QP_DEST_QPN
                | IBV_QP_RQ_PSN
                | IBV_QP_MAX_DEST_RD_ATOMIC
                | IBV_QP_MIN_RNR_TIMER,
        ),
        (
            "RTR->RTS",
            &mut rts,
            IBV_QP_STATE
                | IBV_QP_TIMEOUT
                | IBV_QP_RETRY_CNT
                | IBV_QP_RNR_RETRY
                | IBV_QP_SQ_PSN
                | IBV_QP_MAX_QP_RD_ATOMIC,
        ),
    ];
    for (step, attr, mask) in steps {
        // SAFETY: the caller's live QP and a whole ibv_qp_attr.
        let r = unsafe { ibv_modify_qp(qp, attr, mask) };
        if r != 0 {
            return Err(format!("libibverbs: ibv_modify_qp {step}: errno {r}"));
        }
    }
    Ok(())
}

/// A libibverbs QP as the cm connection sees it (iWARP).
struct CmSide(*mut IbvQp);

impl crate::cm::CmQp for CmSide {
    fn qp_num(&self) -> u32 {
        // SAFETY: a live QP of `run`'s.
        unsafe { (*self.0).qp_num }
    }

    /// `ibv_modify_qp` with the attributes the cm's answer sets, by its
    /// mask (the bits are libibverbs' `IBV_QP_*`): the state asked for,
    /// and for access flags, port and P_Key index the values the RoCE
    /// connection uses (a `QpAttr` shows only its mask and state; on
    /// iWARP the answers set no other attribute).
    fn modify(&self, state: QpState, attr: &QpAttr) -> Result<(), String> {
        let mask = attr.mask();
        let known = QpAttrMask::STATE
            | QpAttrMask::ACCESS_FLAGS
            | QpAttrMask::PORT
            | QpAttrMask::PKEY_INDEX;
        if !known.contains(mask) {
            return Err(format!(
                "libibverbs: the cm's answer for {state:?} sets {:?}, which this bench does not pass on",
                mask.difference(known)
            ));
        }
        let access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
        let mut a = IbvQpAttr {
            qp_state: attr.target_state().map_or(0, |s| s as u32),
            qp_access_flags: access as u32,
            port_num: crate::PORT,
            pkey_index: 0,
            ..Default::default()
        };
        // SAFETY: a live QP of `run`'s and a whole ibv_qp_attr.
        let r = unsafe { ibv_modify_qp(self.0, &mut a, mask.bits() as c_int) };
        if r != 0 {
            return Err(format!(
                "libibverbs: ibv_modify_qp to {state:?} (mask {:#x}): errno {r}",
                mask.bits()
            ));
        }
        Ok(())
    }
}

/// The two QPs and CQs of a run, their numbers, and the provider's three
/// functions.
struct Qps {
    a: *mut IbvQp,
    b: *mut IbvQp,
    cq_a: *mut IbvCq,
    cq_b: *mut IbvCq,
    qpn_a: u32,
    qpn_b: u32,
    post_send: PostSend,
    post_recv: PostRecv,
    poll_cq: PollCq,
}

impl Qps {
    /// `ops.post_send` of the chain `wr` on A; 0 or an errno.
    ///
    /// # Safety
    /// The objects are live; `wr` heads a valid chain of requests whose
    /// SGEs name registered memory the device may read until the
    /// completions are polled (or, inline, readable bytes).
    unsafe fn post_send(&self, wr: *mut IbvSendWr) -> c_int {
        let mut bad = std::ptr::null_mut();
        (self.post_send)(self.a, wr, &mut bad)
    }

    /// `ops.post_recv` of the chain `wr` on B; 0 or an errno.
    ///
    /// # Safety
    /// The objects are live; `wr` heads a valid chain of requests whose
    /// SGEs name registered memory the device may write until the
    /// completions are polled, or the QP is destroyed.
    unsafe fn post_recv(&self, wr: *mut IbvRecvWr) -> c_int {
        let mut bad = std::ptr::null_mut();
        (self.post_recv)(self.b, wr, &mut bad)
    }

    /// Waits for the one completion of request `i` on A's CQ (`on_b`:
    /// B's) and fails unless it is the successful `opcode` completion of
    /// work request `i` on that QP.
    fn one_completion(
        &self,
        counts: &mut Counts,
        on_b: bool,
        what: &str,
        i: usize,
        opcode: u32,
    ) -> Result<(), String> {
        let (cq, qpn) = match on_b {
            false => (self.cq_a, self.qpn_a),
            true => (self.cq_b, self.qpn_b),
        };
        let mut wc = [IbvWc::default(); 1];
        crate::wait_for(counts, what, i, 1, |got| self.poll(cq, &mut wc[got..]))?;
        expect(&wc[0], what, i as u64, opcode, qpn)
    }

    /// `ops.poll_cq` of `cq` for at most `out.len()` completions.
    fn poll(&self, cq: *mut IbvCq, out: &mut [IbvWc]) -> Result<usize, String> {
        // SAFETY: `cq` is one of this run's live CQs and `out` has room for
        // the number of completions asked for.
        match unsafe { (self.poll_cq)(cq, out.len() as c_int, out.as_mut_ptr()) } {
            n if n < 0 => Err(format!("libibverbs: poll_cq: returned {n}")),
            n => Ok(n as usize),
        }
    }
}

/// Fails unless `c` is the successful `opcode` completion of work request
/// `wr_id` on QP `qp_num`.
fn expect(c: &IbvWc, what: &str, wr_id: u64, opcode: u32, qp_num: u32) -> Result<(), String> {
    if (c.wr_id, c.status, c.opcode, c.qp_num) != (wr_id, IBV_WC_SUCCESS, opcode, qp_num) {
        return Err(format!(
            "libibverbs: {what}: completion {c:?}, expected work request {wr_id} opcode {opcode} on QP {qp_num}"
        ));
    }
    Ok(())
}

/// Fails with the errno `r` a post named `call` answered, unless it is 0.
fn posted(r: c_int, call: std::fmt::Arguments<'_>) -> Result<(), String> {
    match r {
        0 => Ok(()),
        r => Err(format!("libibverbs: {call}: errno {r}")),
    }
}

/// A send work request of one SGE (a WRITE's target at `remote_addr`).
fn send_wr(
    wr_id: u64,
    opcode: u32,
    send_flags: u32,
    sge: *mut IbvSge,
    remote_addr: u64,
    rkey: u32,
) -> IbvSendWr {
    IbvSendWr {
        wr_id,
        next: std::ptr::null_mut(),
        sg_list: sge,
        num_sge: 1,
        opcode,
        send_flags,
        imm_data: 0,
        remote_addr,
        rkey,
        wr_rest: [0; 5],
        qp_type: 0,
        tail: [0; 6],
    }
}

/// The case's loop over `ops.post_send` (`rxe_post_send`, `siw_post_send`),
/// `ops.post_recv` and `ops.poll_cq`: A sends into `buf`'s slots (through
/// QP B), each iteration waited for with [`crate::wait_for`]; the slots
/// checked with [`crate::landed`] before the QPs go.
pub fn run(pair: &Pair, buf: &mut [u8]) -> Result<Counts, String> {
    // Declared before the objects: dropped after the QPs.
    let link: Option<crate::cm::Link>;
    // SAFETY (throughout): libibverbs calls on objects created here, live
    // until `objs` drops; `buf` outlives the MR (dropped with `objs` at the
    // end of this block), and the program writes a request's source and
    // reads its target only before the post and after the completion.
    unsafe {
        let mut objs = Objects::open(&pair.device)?;
        let ctx = objs.ctx;
        let access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
        let mr = ibv_reg_mr(objs.pd, buf.as_mut_ptr().cast(), buf.len(), access);
        if mr.is_null() {
            return Err(fail("ibv_reg_mr"));
        }
        objs.mrs.push(mr);
        // The inline case posts every receive before its loop.
        let inline = pair.case == Case::InlineSend;
        let recv_depth = if inline { pair.iters as u32 } else { 16 };
        for cqe in [16, recv_depth + 16] {
            objs.create_cq(cqe as c_int)?;
        }
        for (i, (max_recv_wr, max_inline_data)) in
            [(16, if inline { BYTES as u32 } else { 0 }), (recv_depth, 0)]
                .into_iter()
                .enumerate()
        {
            let cap = IbvQpCap {
                max_send_wr: 16,
                max_recv_wr,
                max_send_sge: pair.case.send_sges(),
                max_recv_sge: 1,
                max_inline_data,
            };
            let qp = objs
                .create_qp(objs.cqs[i], cap)
                .map_err(|e| format!("libibverbs: ibv_create_qp: errno {e}"))?;
            objs.qps.push(qp);
        }
        let (a, b) = (objs.qps[0], objs.qps[1]);
        link = match &pair.cm {
            Some(addr) => Some(crate::cm::connect(addr, &CmSide(a), &CmSide(b))?),
            None => {
                let mut gid = [0u8; 16];
                let r = ibv_query_gid(ctx, crate::PORT, crate::GID_INDEX as c_int, &mut gid);
                if r != 0 {
                    return Err(fail("ibv_query_gid"));
                }
                connect(a, (*b).qp_num, gid, pair.mtu as u32)?;
                connect(b, (*a).qp_num, gid, pair.mtu as u32)?;
                None
            }
        };
        // The context's first bytes, as verbs.h lays them out (checked above).
        let ops = ctx.cast::<ContextOps>();
        let q = Qps {
            a,
            b,
            qpn_a: (*a).qp_num,
            qpn_b: (*b).qp_num,
            cq_a: objs.cqs[0],
            cq_b: objs.cqs[1],
            post_send: (*ops).post_send.ok_or("libibverbs: no ops.post_send")?,
            post_recv: (*ops).post_recv.ok_or("libibverbs: no ops.post_recv")?,
            poll_cq: (*ops).poll_cq.ok_or("libibverbs: no ops.poll_cq")?,
        };
        let (lkey, rkey) = ((*mr).lkey, (*mr).rkey);
        let base = buf.as_mut_ptr() as u64;
        let source = IbvSge {
            addr: base,
            length: BYTES as u32,
            lkey,
        };
        let slot = |k: usize| base + (TARGET_OFFSET + k * BYTES) as u64;
        let counts = match pair.case {
            Case::Write => write(pair, &q, source, slot(0), rkey)?,
            Case::WriteBatch => write_batch(pair, &q, source, &slot, rkey)?,
            Case::SendRecv => send_recv(pair, &q, source, slot(0), lkey)?,
            Case::InlineSend => inline_send(pair, &q, &slot, lkey)?,
            Case::WriteGather2 => write_gather2(pair, &q, source, slot(0), rkey)?,
            Case::Read => {
                let target = IbvSge {
                    addr: slot(0),
                    length: BYTES as u32,
                    lkey,
                };
                read(pair, &q, target, base, rkey)?
            }
        };
        crate::landed(pair, buf)?;
        drop(objs);
        drop(link);
        Ok(counts)
    }
}

/// Case 1: one signalled WRITE of `source` to `target` per iteration.
fn write(pair: &Pair, q: &Qps, source: IbvSge, target: u64, rkey: u32) -> Result<Counts, String> {
    let op = (IBV_WR_RDMA_WRITE, IBV_WC_RDMA_WRITE, "WRITE");
    rdma(pair, q, op, &mut [source], target, rkey)
}

/// Case 6: case 1 with `source` gathered from its two halves.
fn write_gather2(
    pair: &Pair,
    q: &Qps,
    source: IbvSge,
    target: u64,
    rkey: u32,
) -> Result<Counts, String> {
    let half = source.length / 2;
    let mut halves = [
        IbvSge {
            length: half,
            ..source
        },
        IbvSge {
            addr: source.addr + u64::from(half),
            length: half,
            ..source
        },
    ];
    let op = (IBV_WR_RDMA_WRITE, IBV_WC_RDMA_WRITE, "WRITE");
    rdma(pair, q, op, &mut halves, target, rkey)
}

/// Case 5: one signalled READ of `remote` (the source) into `target` per
/// iteration.
fn read(pair: &Pair, q: &Qps, target: IbvSge, remote: u64, rkey: u32) -> Result<Counts, String> {
    let op = (IBV_WR_RDMA_READ, IBV_WC_RDMA_READ, "READ");
    rdma(pair, q, op, &mut [target], remote, rkey)
}

/// Cases 1, 5 and 6: one signalled RDMA operation (its work request and
/// completion opcodes, and its name) per iteration, between the local
/// `sges` and the peer's `remote_addr`.
fn rdma(
    pair: &Pair,
    q: &Qps,
    (opcode, wc_opcode, what): (u32, u32, &str),
    sges: &mut [IbvSge],
    remote_addr: u64,
    rkey: u32,
) -> Result<Counts, String> {
    let mut counts = Counts::default();
    for i in 0..pair.iters {
        let mut wr = send_wr(
            i as u64,
            opcode,
            IBV_SEND_SIGNALED,
            sges.as_mut_ptr(),
            remote_addr,
            rkey,
        );
        wr.num_sge = sges.len() as c_int;
        counts.posts += 1;
        // SAFETY: the local SGE is registered and left alone until the
        // completion, polled below; the remote address is in the peer's
        // registered region.
        posted(
            unsafe { q.post_send(&mut wr) },
            format_args!("post_send {i}"),
        )?;
        q.one_completion(&mut counts, false, what, i, wc_opcode)?;
    }
    Ok(counts)
}

/// Case 2: [`BATCH`] WRITEs per `post_send` (one chain), into slots
/// 0..BATCH.
fn write_batch(
    pair: &Pair,
    q: &Qps,
    mut source: IbvSge,
    slot: &dyn Fn(usize) -> u64,
    rkey: u32,
) -> Result<Counts, String> {
    let mut counts = Counts::default();
    let signalled = Case::WriteBatch.signalled(pair.iwarp());
    let mut wc = [IbvWc::default(); BATCH];
    let sge: *mut IbvSge = &mut source;
    for i in 0..pair.iters {
        let mut wrs: [IbvSendWr; BATCH] = std::array::from_fn(|k| {
            let flags = if k >= BATCH - signalled {
                IBV_SEND_SIGNALED
            } else {
                0
            };
            let wr_id = (i * BATCH + k) as u64;
            send_wr(wr_id, IBV_WR_RDMA_WRITE, flags, sge, slot(k), rkey)
        });
        for k in 0..BATCH - 1 {
            let next: *mut IbvSendWr = &mut wrs[k + 1];
            wrs[k].next = next;
        }
        counts.posts += 1;
        // SAFETY: the chain lives in `wrs` across the call; the source is
        // registered and left alone until the last (signalled) request's
        // completion, polled below; the targets are the peer's slots.
        let r = unsafe { q.post_send(wrs.as_mut_ptr()) };
        posted(r, format_args!("post_send batch {i}"))?;
        crate::wait_for(&mut counts, "WRITE batch", i, signalled, |got| {
            q.poll(q.cq_a, &mut wc[got..signalled])
        })?;
        for (k, c) in wc[..signalled].iter().enumerate() {
            let wr_id = (i * BATCH + BATCH - signalled + k) as u64;
            expect(c, "WRITE batch", wr_id, IBV_WC_RDMA_WRITE, q.qpn_a)?;
        }
    }
    Ok(counts)
}

/// Case 3: a receive on B into `target`, a SEND on A, both completions
/// polled.
fn send_recv(
    pair: &Pair,
    q: &Qps,
    mut source: IbvSge,
    target: u64,
    lkey: u32,
) -> Result<Counts, String> {
    let mut counts = Counts::default();
    let mut recv_sge = IbvSge {
        addr: target,
        length: BYTES as u32,
        lkey,
    };
    for i in 0..pair.iters {
        let mut rwr = IbvRecvWr {
            wr_id: i as u64,
            next: std::ptr::null_mut(),
            sg_list: &mut recv_sge,
            num_sge: 1,
        };
        counts.post_recvs += 1;
        // SAFETY: the slot is registered and not touched until the
        // receive's completion, polled below.
        posted(
            unsafe { q.post_recv(&mut rwr) },
            format_args!("post_recv {i}"),
        )?;
        let flags = IBV_SEND_SIGNALED;
        let mut wr = send_wr(i as u64, IBV_WR_SEND, flags, &mut source, 0, 0);
        counts.posts += 1;
        // SAFETY: as in `write`.
        posted(
            unsafe { q.post_send(&mut wr) },
            format_args!("post_send {i}"),
        )?;
        q.one_completion(&mut counts, false, "SEND", i, IBV_WC_SEND)?;
        q.one_completion(&mut counts, true, "RECV", i, IBV_WC_RECV)?;
    }
    Ok(counts)
}

/// Case 4: inline SEND `i` of [`crate::pattern`]`(i)` into B's receive
/// `i` at `slot(i)`, all posted before the loop (not measured) and never
/// polled.
fn inline_send(
    pair: &Pair,
    q: &Qps,
    slot: &dyn Fn(usize) -> u64,
    lkey: u32,
) -> Result<Counts, String> {
    for k in 0..pair.iters {
        let mut sge = IbvSge {
            addr: slot(k),
            length: BYTES as u32,
            lkey,
        };
        let mut rwr = IbvRecvWr {
            wr_id: k as u64,
            next: std::ptr::null_mut(),
            sg_list: &mut sge,
            num_sge: 1,
        };
        // SAFETY: slot k is registered and read only (by `crate::landed`)
        // after the loop; the provider copies the request during the call.
        let r = unsafe { q.post_recv(&mut rwr) };
        posted(r, format_args!("post_recv {k} (before the loop)"))?;
    }
    let mut counts = Counts::default();
    for i in 0..pair.iters {
        let data = crate::pattern(i);
        let mut sge = IbvSge {
            addr: data.as_ptr() as u64,
            length: BYTES as u32,
            lkey: 0,
        };
        let flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE;
        let mut wr = send_wr(i as u64, IBV_WR_SEND, flags, &mut sge, 0, 0);
        counts.posts += 1;
        // SAFETY: inline: the provider copies `data`'s bytes during the
        // call.
        posted(
            unsafe { q.post_send(&mut wr) },
            format_args!("post_send {i}"),
        )?;
        q.one_completion(&mut counts, false, "inline SEND", i, IBV_WC_SEND)?;
    }
    Ok(counts)
}

/// The control loop of [`crate::control`] over libibverbs: `iters` ×
/// (`ibv_alloc_pd` + `ibv_dealloc_pd`), then on one PD `iters` ×
/// (`ibv_reg_mr` of `region` + `ibv_dereg_mr`).
pub fn control(device: &str, iters: usize, region: &mut [u8]) -> Result<(), String> {
    let dev = libibverbs::device(device)?;
    let access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
    // SAFETY (throughout): libibverbs calls on objects created here and
    // destroyed once, in order; `region` outlives every MR.
    unsafe {
        let ctx = ibv_open_device(dev);
        if ctx.is_null() {
            return Err(fail("ibv_open_device"));
        }
        let result = (|| {
            for _ in 0..iters {
                let pd = ibv_alloc_pd(ctx);
                if pd.is_null() {
                    return Err(fail("ibv_alloc_pd"));
                }
                if ibv_dealloc_pd(pd) != 0 {
                    return Err(fail("ibv_dealloc_pd"));
                }
            }
            let pd = ibv_alloc_pd(ctx);
            if pd.is_null() {
                return Err(fail("ibv_alloc_pd"));
            }
            let regs = (|| {
                for _ in 0..iters {
                    let mr = ibv_reg_mr(pd, region.as_mut_ptr().cast(), region.len(), access);
                    if mr.is_null() {
                        return Err(fail("ibv_reg_mr"));
                    }
                    if ibv_dereg_mr(mr) != 0 {
                        return Err(fail("ibv_dereg_mr"));
                    }
                }
                Ok(())
            })();
            ibv_dealloc_pd(pd);
            regs
        })();
        ibv_close_device(ctx);
        result
    }
}
