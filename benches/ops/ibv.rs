//! The libibverbs side: Debian's static libibverbs and its rxe provider
//! (linked by build.rs with `libibverbs-peer`), driven over FFI through the
//! same loop as ours.
//!
//! `ibv_post_send` and `ibv_poll_cq` are static inline in verbs.h: they
//! call `context->ops.post_send` / `context->ops.poll_cq`, which are the
//! provider's `rxe_post_send` / `rxe_poll_cq` (local symbols of the
//! archive; callgrind sees them by name). So do we. The structs are the
//! parts of verbs.h we touch, `#[repr(C)]`; their sizes and offsets are
//! checked at compile time against the numbers a gcc-compiled probe of
//! /usr/include/infiniband/verbs.h (rdma-core 52, x86_64) printed.

use std::ffi::{c_char, c_int, c_void, CStr};
use std::mem::{offset_of, size_of};

use crate::{Counts, Pair, BYTES, TARGET_OFFSET};

#[repr(C)]
struct IbvDevice(c_void);
#[repr(C)]
struct IbvPd(c_void);
#[repr(C)]
struct IbvCompChannel(c_void);
#[repr(C)]
struct IbvSrq(c_void);

/// `struct ibv_mr`: the keys follow context, pd, addr, length, handle.
#[repr(C)]
struct IbvMr {
    context: *mut IbvContext,
    pd: *mut IbvPd,
    addr: *mut c_void,
    length: usize,
    handle: u32,
    lkey: u32,
    rkey: u32,
}

type PollCq = unsafe extern "C" fn(*mut IbvCq, c_int, *mut IbvWc) -> c_int;
type PostSend = unsafe extern "C" fn(*mut IbvQp, *mut IbvSendWr, *mut *mut IbvSendWr) -> c_int;

/// `struct ibv_context` up to and including `ops.post_send`: the device
/// pointer, then `struct ibv_context_ops`, 11 entries before `poll_cq`
/// and 16 between `poll_cq` and `post_send`.
#[repr(C)]
struct IbvContext {
    device: *mut IbvDevice,
    ops_before_poll_cq: [*const c_void; 11],
    poll_cq: Option<PollCq>,
    ops_between: [*const c_void; 13],
    post_send: Option<PostSend>,
}

/// `struct ibv_cq` (its first field; we only pass it back).
#[repr(C)]
struct IbvCq {
    context: *mut IbvContext,
}

/// `struct ibv_qp` up to `qp_num`.
#[repr(C)]
struct IbvQp {
    context: *mut IbvContext,
    qp_context: *mut c_void,
    pd: *mut IbvPd,
    send_cq: *mut IbvCq,
    recv_cq: *mut IbvCq,
    srq: *mut IbvSrq,
    handle: u32,
    qp_num: u32,
}

#[repr(C)]
struct IbvSge {
    addr: u64,
    length: u32,
    lkey: u32,
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

#[repr(C)]
#[derive(Default)]
struct IbvQpCap {
    max_send_wr: u32,
    max_recv_wr: u32,
    max_send_sge: u32,
    max_recv_sge: u32,
    max_inline_data: u32,
}

#[repr(C)]
struct IbvQpInitAttr {
    qp_context: *mut c_void,
    send_cq: *mut IbvCq,
    recv_cq: *mut IbvCq,
    srq: *mut IbvSrq,
    cap: IbvQpCap,
    qp_type: u32,
    sq_sig_all: c_int,
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
    assert!(offset_of!(IbvContext, poll_cq) == 96);
    assert!(offset_of!(IbvContext, post_send) == 208);
    assert!(offset_of!(IbvMr, lkey) == 36 && offset_of!(IbvMr, rkey) == 40);
    assert!(offset_of!(IbvQp, qp_num) == 52);
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
    assert!(size_of::<IbvQpInitAttr>() == 64);
    assert!(offset_of!(IbvQpInitAttr, cap) == 32 && offset_of!(IbvQpInitAttr, qp_type) == 52);
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
const IBV_SEND_SIGNALED: u32 = 2;
const IBV_QPT_RC: u32 = 2;
const IBV_QPS_INIT: u32 = 1;
const IBV_QPS_RTR: u32 = 2;
const IBV_QPS_RTS: u32 = 3;
const IBV_WC_SUCCESS: u32 = 0;
const IBV_WC_RDMA_WRITE: u32 = 1;
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
    static verbs_provider_rxe: u8;
    static verbs_provider_siw: u8;
    fn ibv_static_providers(unused: *mut c_void, ...);
    fn ibv_get_device_list(num: *mut c_int) -> *mut *mut IbvDevice;
    fn ibv_get_device_name(dev: *mut IbvDevice) -> *const c_char;
    fn ibv_open_device(dev: *mut IbvDevice) -> *mut IbvContext;
    fn ibv_close_device(ctx: *mut IbvContext) -> c_int;
    fn ibv_alloc_pd(ctx: *mut IbvContext) -> *mut IbvPd;
    fn ibv_dealloc_pd(pd: *mut IbvPd) -> c_int;
    fn ibv_reg_mr(pd: *mut IbvPd, addr: *mut c_void, length: usize, access: c_int) -> *mut IbvMr;
    fn ibv_dereg_mr(mr: *mut IbvMr) -> c_int;
    fn ibv_create_cq(
        ctx: *mut IbvContext,
        cqe: c_int,
        cq_context: *mut c_void,
        channel: *mut IbvCompChannel,
        comp_vector: c_int,
    ) -> *mut IbvCq;
    fn ibv_destroy_cq(cq: *mut IbvCq) -> c_int;
    fn ibv_create_qp(pd: *mut IbvPd, attr: *mut IbvQpInitAttr) -> *mut IbvQp;
    fn ibv_destroy_qp(qp: *mut IbvQp) -> c_int;
    fn ibv_modify_qp(qp: *mut IbvQp, attr: *mut IbvQpAttr, mask: c_int) -> c_int;
    fn ibv_query_gid(ctx: *mut IbvContext, port: u8, index: c_int, gid: *mut [u8; 16]) -> c_int;
}

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

fn fail(what: &str) -> String {
    format!("libibverbs: {what}: errno {}", errno())
}

/// libibverbs' device named `name`, its providers registered first (a
/// static libibverbs finds none otherwise).
fn find(name: &str) -> Result<*mut IbvDevice, String> {
    let mut n = 0;
    // SAFETY: the provider descriptors are statics of the linked archives
    // and the list ends with NULL; the device list is kept (never freed)
    // so the device stays valid.
    unsafe {
        ibv_static_providers(
            std::ptr::null_mut(),
            std::ptr::addr_of!(verbs_provider_rxe),
            std::ptr::addr_of!(verbs_provider_siw),
            std::ptr::null::<c_void>(),
        );
        let list = ibv_get_device_list(&mut n);
        if list.is_null() {
            return Err(fail("ibv_get_device_list"));
        }
        (0..n as usize)
            .map(|i| *list.add(i))
            .find(|&d| CStr::from_ptr(ibv_get_device_name(d)).to_str() == Ok(name))
            .ok_or_else(|| format!("libibverbs: no device {name}"))
    }
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

/// The objects of one run, destroyed in reverse order on drop.
struct Objects {
    ctx: *mut IbvContext,
    pd: *mut IbvPd,
    mr: *mut IbvMr,
    cqs: Vec<*mut IbvCq>,
    qps: Vec<*mut IbvQp>,
}

impl Drop for Objects {
    fn drop(&mut self) {
        // SAFETY: each was created once by `run` and is destroyed once,
        // users before what they use.
        unsafe {
            for &qp in &self.qps {
                ibv_destroy_qp(qp);
            }
            for &cq in &self.cqs {
                ibv_destroy_cq(cq);
            }
            if !self.mr.is_null() {
                ibv_dereg_mr(self.mr);
            }
            if !self.pd.is_null() {
                ibv_dealloc_pd(self.pd);
            }
            ibv_close_device(self.ctx);
        }
    }
}

/// `pair.iters` signalled 64-byte RDMA WRITEs from QP A into `buf`'s
/// second page through QP B, each waited for with [`crate::wait_for_one`]:
/// the measured calls are `ops.post_send` (`rxe_post_send`) and
/// `ops.poll_cq` (`rxe_poll_cq`).
pub fn run(pair: &Pair, buf: &mut [u8]) -> Result<Counts, String> {
    let dev = find(&pair.device)?;
    // SAFETY (throughout): libibverbs calls on objects created here, live
    // until `objs` drops; `buf` outlives the MR (dropped with `objs` at the
    // end of this function), and the program leaves the WRITE's source and
    // target alone while a WRITE is in flight.
    unsafe {
        let ctx = ibv_open_device(dev);
        if ctx.is_null() {
            return Err(fail("ibv_open_device"));
        }
        let mut objs = Objects {
            ctx,
            pd: std::ptr::null_mut(),
            mr: std::ptr::null_mut(),
            cqs: Vec::new(),
            qps: Vec::new(),
        };
        objs.pd = ibv_alloc_pd(ctx);
        if objs.pd.is_null() {
            return Err(fail("ibv_alloc_pd"));
        }
        let access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
        objs.mr = ibv_reg_mr(objs.pd, buf.as_mut_ptr().cast(), buf.len(), access);
        if objs.mr.is_null() {
            return Err(fail("ibv_reg_mr"));
        }
        let mut gid = [0u8; 16];
        let r = ibv_query_gid(ctx, crate::PORT, crate::GID_INDEX as c_int, &mut gid);
        if r != 0 {
            return Err(fail("ibv_query_gid"));
        }
        for _ in 0..2 {
            let cq = ibv_create_cq(ctx, 16, std::ptr::null_mut(), std::ptr::null_mut(), 0);
            if cq.is_null() {
                return Err(fail("ibv_create_cq"));
            }
            objs.cqs.push(cq);
        }
        for i in 0..2 {
            let mut init = IbvQpInitAttr {
                qp_context: std::ptr::null_mut(),
                send_cq: objs.cqs[i],
                recv_cq: objs.cqs[i],
                srq: std::ptr::null_mut(),
                cap: IbvQpCap {
                    max_send_wr: 16,
                    max_recv_wr: 16,
                    max_send_sge: 1,
                    max_recv_sge: 1,
                    max_inline_data: 0,
                },
                qp_type: IBV_QPT_RC,
                sq_sig_all: 0,
            };
            let qp = ibv_create_qp(objs.pd, &mut init);
            if qp.is_null() {
                return Err(fail("ibv_create_qp"));
            }
            objs.qps.push(qp);
        }
        let (a, b) = (objs.qps[0], objs.qps[1]);
        connect(a, (*b).qp_num, gid, pair.mtu)?;
        connect(b, (*a).qp_num, gid, pair.mtu)?;
        let post_send = (*ctx).post_send.ok_or("libibverbs: no ops.post_send")?;
        let poll_cq = (*ctx).poll_cq.ok_or("libibverbs: no ops.poll_cq")?;
        let (cq_a, qp_a_num) = (objs.cqs[0], (*a).qp_num);
        let (lkey, rkey) = ((*objs.mr).lkey, (*objs.mr).rkey);
        let base = buf.as_mut_ptr() as u64;
        let mut sge = IbvSge {
            addr: base,
            length: BYTES as u32,
            lkey,
        };
        let mut counts = Counts::default();
        let mut wc = [IbvWc::default(); 1];
        for i in 0..pair.iters {
            let mut wr = IbvSendWr {
                wr_id: i as u64,
                next: std::ptr::null_mut(),
                sg_list: &mut sge,
                num_sge: 1,
                opcode: IBV_WR_RDMA_WRITE,
                send_flags: IBV_SEND_SIGNALED,
                imm_data: 0,
                remote_addr: base + TARGET_OFFSET as u64,
                rkey,
                wr_rest: [0; 5],
                qp_type: 0,
                tail: [0; 6],
            };
            let mut bad = std::ptr::null_mut();
            counts.posts += 1;
            let r = post_send(a, &mut wr, &mut bad);
            if r != 0 {
                return Err(format!("libibverbs: post_send {i}: errno {r}"));
            }
            crate::wait_for_one(&mut counts, i, || match poll_cq(cq_a, 1, wc.as_mut_ptr()) {
                n if n < 0 => Err(format!("libibverbs: poll_cq: returned {n}")),
                n => Ok(n as usize),
            })?;
            let c = wc[0];
            if c.status != IBV_WC_SUCCESS
                || c.opcode != IBV_WC_RDMA_WRITE
                || c.wr_id != i as u64
                || c.qp_num != qp_a_num
            {
                return Err(format!("libibverbs: WRITE {i}: completion {c:?}"));
            }
        }
        Ok(counts)
    }
}

/// The control loop of [`crate::control`] over libibverbs: `iters` ×
/// (`ibv_alloc_pd` + `ibv_dealloc_pd`), then on one PD `iters` ×
/// (`ibv_reg_mr` of `region` + `ibv_dereg_mr`).
pub fn control(device: &str, iters: usize, region: &mut [u8]) -> Result<(), String> {
    let dev = find(device)?;
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
