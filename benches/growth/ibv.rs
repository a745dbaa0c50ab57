//! libibverbs' side of the growth bench: Debian's static libibverbs and its
//! rxe and siw providers over FFI, the same loops as `ours.rs` (no rereg:
//! neither provider has `rereg_mr`).

use std::ffi::{c_int, c_void};
use std::mem::{offset_of, size_of};
use std::time::{Duration, Instant};

use crate::libibverbs::{
    self, errno, ibv_alloc_pd, ibv_close_device, ibv_dealloc_pd, ibv_dereg_mr, ibv_open_device,
    ibv_reg_mr, IbvContext, IbvMr, IbvPd,
};
use crate::{Limit, MrTimes, PAGE, QP_DEPTH};

/// `struct ibv_cq` (only passed back).
#[repr(C)]
struct IbvCq(c_void);
/// `struct ibv_qp` (only passed back).
#[repr(C)]
struct IbvQp(c_void);

/// `struct ibv_qp_cap`.
#[repr(C)]
struct IbvQpCap {
    max_send_wr: u32,
    max_recv_wr: u32,
    max_send_sge: u32,
    max_recv_sge: u32,
    max_inline_data: u32,
}

/// `struct ibv_qp_init_attr`.
#[repr(C)]
struct IbvQpInitAttr {
    qp_context: *mut c_void,
    send_cq: *mut IbvCq,
    recv_cq: *mut IbvCq,
    srq: *mut c_void,
    cap: IbvQpCap,
    qp_type: u32,
    sq_sig_all: c_int,
}

// verbs.h on x86_64 (benches/ops checks the same against a gcc probe).
const _: () = {
    assert!(size_of::<IbvQpInitAttr>() == 64);
    assert!(offset_of!(IbvQpInitAttr, cap) == 32 && offset_of!(IbvQpInitAttr, qp_type) == 52);
};

const IBV_QPT_RC: u32 = 2;
const ACCESS: c_int = 1 | 2 | 4; // LOCAL_WRITE | REMOTE_WRITE | REMOTE_READ

extern "C" {
    fn ibv_create_cq(
        ctx: *mut IbvContext,
        cqe: c_int,
        cq_context: *mut c_void,
        channel: *mut c_void,
        comp_vector: c_int,
    ) -> *mut IbvCq;
    fn ibv_destroy_cq(cq: *mut IbvCq) -> c_int;
    fn ibv_create_qp(pd: *mut IbvPd, attr: *mut IbvQpInitAttr) -> *mut IbvQp;
    fn ibv_destroy_qp(qp: *mut IbvQp) -> c_int;
}

fn fail(what: &str) -> String {
    format!("libibverbs: {what}: errno {}", errno())
}

/// A context, PD and CQ, destroyed (with the QPs and MRs left in them) on
/// drop.
struct Objects {
    ctx: *mut IbvContext,
    pd: *mut IbvPd,
    cq: *mut IbvCq,
    qps: Vec<*mut IbvQp>,
    mrs: Vec<*mut IbvMr>,
}

impl Objects {
    fn open(device: &str) -> Result<Objects, String> {
        let dev = libibverbs::device(device)?;
        // SAFETY: plain libibverbs calls; what they create is destroyed once,
        // by `drop`.
        unsafe {
            let ctx = ibv_open_device(dev);
            if ctx.is_null() {
                return Err(fail("ibv_open_device"));
            }
            let mut o = Objects {
                ctx,
                pd: std::ptr::null_mut(),
                cq: std::ptr::null_mut(),
                qps: Vec::new(),
                mrs: Vec::new(),
            };
            o.pd = ibv_alloc_pd(ctx);
            if o.pd.is_null() {
                return Err(fail("ibv_alloc_pd"));
            }
            o.cq = ibv_create_cq(ctx, 16, std::ptr::null_mut(), std::ptr::null_mut(), 0);
            if o.cq.is_null() {
                return Err(fail("ibv_create_cq"));
            }
            Ok(o)
        }
    }

    /// One RC QP of `send` × `recv` requests on the CQ, not kept: the
    /// caller keeps or destroys it. The errno on failure.
    fn create_qp(&self, send: u32, recv: u32) -> Result<*mut IbvQp, i32> {
        let mut attr = IbvQpInitAttr {
            qp_context: std::ptr::null_mut(),
            send_cq: self.cq,
            recv_cq: self.cq,
            srq: std::ptr::null_mut(),
            cap: IbvQpCap {
                max_send_wr: send,
                max_recv_wr: recv,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: 0,
            },
            qp_type: IBV_QPT_RC,
            sq_sig_all: 0,
        };
        // SAFETY: a live PD and CQ, a whole ibv_qp_init_attr.
        let qp = unsafe { ibv_create_qp(self.pd, &mut attr) };
        if qp.is_null() {
            Err(errno())
        } else {
            Ok(qp)
        }
    }
}

impl Drop for Objects {
    fn drop(&mut self) {
        // SAFETY: each was created once and is destroyed once, users
        // before what they use.
        unsafe {
            for &qp in &self.qps {
                ibv_destroy_qp(qp);
            }
            for &mr in &self.mrs {
                ibv_dereg_mr(mr);
            }
            if !self.cq.is_null() {
                ibv_destroy_cq(self.cq);
            }
            if !self.pd.is_null() {
                ibv_dealloc_pd(self.pd);
            }
            ibv_close_device(self.ctx);
        }
    }
}

/// Part 1 without the rereg: reg and dereg of one page with `live - 1`
/// regions registered.
pub fn mrs(device: &str, live: usize, n: usize) -> Result<MrTimes, String> {
    let mut buf = crate::ours::buffer(2 * live);
    let base = buf.as_mut_ptr();
    // Declared after `buf`: the regions go first.
    let mut o = Objects::open(device)?;
    for k in 0..live - 1 {
        // SAFETY: inside `buf`, which outlives `o`'s regions.
        let mr = unsafe { ibv_reg_mr(o.pd, base.add(2 * k * PAGE).cast(), PAGE, ACCESS) };
        if mr.is_null() {
            return Err(fail(&format!("ibv_reg_mr of live region {k}")));
        }
        o.mrs.push(mr);
    }
    // SAFETY: inside `buf`.
    let page = unsafe { base.add(2 * (live - 1) * PAGE) }.cast();
    let mut t = MrTimes::default();
    for i in 0..=n {
        let s = Instant::now();
        // SAFETY: as above; deregistered right away.
        let mr = unsafe { ibv_reg_mr(o.pd, page, PAGE, ACCESS) };
        let reg = s.elapsed();
        if mr.is_null() {
            return Err(fail("ibv_reg_mr"));
        }
        let s = Instant::now();
        // SAFETY: the region just registered, deregistered once.
        if unsafe { ibv_dereg_mr(mr) } != 0 {
            return Err(fail("ibv_dereg_mr"));
        }
        if i > 0 {
            t.reg.push(reg);
            t.dereg.push(s.elapsed());
        }
    }
    Ok(t)
}

/// Part 2: create and destroy one QP with `live - 1` on the CQ.
pub fn qps(device: &str, live: usize, n: usize) -> Result<[Vec<Duration>; 2], String> {
    let mut o = Objects::open(device)?;
    for k in 0..live - 1 {
        let qp = o
            .create_qp(QP_DEPTH, QP_DEPTH)
            .map_err(|e| format!("libibverbs: ibv_create_qp of live QP {k}: errno {e}"))?;
        o.qps.push(qp);
    }
    let (mut c, mut d) = (Vec::new(), Vec::new());
    for i in 0..=n {
        let s = Instant::now();
        let qp = o
            .create_qp(QP_DEPTH, QP_DEPTH)
            .map_err(|e| format!("libibverbs: ibv_create_qp: errno {e}"))?;
        let created = s.elapsed();
        let s = Instant::now();
        // SAFETY: the QP just created, destroyed once.
        if unsafe { ibv_destroy_qp(qp) } != 0 {
            return Err(fail("ibv_destroy_qp"));
        }
        if i > 0 {
            c.push(created);
            d.push(s.elapsed());
        }
    }
    Ok([c, d])
}

/// Part 3 over libibverbs.
pub fn limit(device: &str, (send, recv): (u32, u32)) -> Result<Limit, String> {
    let mut o = Objects::open(device)?;
    let mut refusal = None;
    while o.qps.len() < crate::LIMIT_CAP {
        match o.create_qp(send, recv) {
            Ok(qp) => o.qps.push(qp),
            Err(e) => {
                refusal = Some(e);
                break;
            }
        }
    }
    crate::note_vmalloc_at_limit();
    let created = o.qps.len();
    let Some(errno) = refusal else {
        return Ok(Limit {
            created,
            errno: None,
            other_context: "not tried".into(),
            after_destroy: "not tried".into(),
        });
    };
    let other = Objects::open(device).map_err(|_| None).and_then(|o2| {
        o2.create_qp(send, recv)
            .map(|qp| {
                // SAFETY: the QP just created, destroyed once.
                unsafe { ibv_destroy_qp(qp) };
            })
            .map_err(Some)
    });
    if let Some(qp) = o.qps.pop() {
        // SAFETY: one of `o`'s QPs, taken out of its list: destroyed once.
        unsafe { ibv_destroy_qp(qp) };
    }
    let again = o
        .create_qp(send, recv)
        .map(|qp| o.qps.push(qp))
        .map_err(Some);
    Ok(Limit {
        created,
        errno: Some(errno),
        other_context: crate::outcome(other),
        after_destroy: crate::outcome(again),
    })
}
