//! libibverbs' side of the growth bench: Debian's static libibverbs and its
//! rxe and siw providers over FFI, the same loops as `ours.rs` (no rereg:
//! neither provider has `rereg_mr`).

use std::ffi::c_int;
use std::time::{Duration, Instant};

use crate::libibverbs::{fail, ibv_dereg_mr, ibv_destroy_qp, ibv_reg_mr, IbvQp, IbvQpCap, Objects};
use crate::{Limit, MrTimes, PAGE, QP_DEPTH};

const ACCESS: c_int = 1 | 2 | 4; // LOCAL_WRITE | REMOTE_WRITE | REMOTE_READ

/// A context and PD with one CQ of 16 entries, for every QP of the run.
fn open(device: &str) -> Result<Objects, String> {
    let mut o = Objects::open(device)?;
    o.create_cq(16)?;
    Ok(o)
}

/// One RC QP of `send` × `recv` requests on the CQ of [`open`], not kept:
/// the caller keeps or destroys it. The errno on failure.
fn create_qp(o: &Objects, send: u32, recv: u32) -> Result<*mut IbvQp, i32> {
    let cap = IbvQpCap {
        max_send_wr: send,
        max_recv_wr: recv,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    o.create_qp(o.cqs[0], cap)
}

/// Part 1 without the rereg: reg and dereg of one page with `live - 1`
/// regions registered.
pub fn mrs(device: &str, live: usize, n: usize) -> Result<MrTimes, String> {
    let mut buf = crate::ours::buffer(2 * live);
    let base = buf.as_mut_ptr();
    // Declared after `buf`: the regions go first.
    let mut o = open(device)?;
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
    let mut o = open(device)?;
    for k in 0..live - 1 {
        let qp = create_qp(&o, QP_DEPTH, QP_DEPTH)
            .map_err(|e| format!("libibverbs: ibv_create_qp of live QP {k}: errno {e}"))?;
        o.qps.push(qp);
    }
    let (mut c, mut d) = (Vec::new(), Vec::new());
    for i in 0..=n {
        let s = Instant::now();
        let qp = create_qp(&o, QP_DEPTH, QP_DEPTH)
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
    let mut o = open(device)?;
    let mut refusal = None;
    while o.qps.len() < crate::LIMIT_CAP {
        match create_qp(&o, send, recv) {
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
    let other = open(device).map_err(|_| None).and_then(|o2| {
        create_qp(&o2, send, recv)
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
    let again = create_qp(&o, send, recv)
        .map(|qp| o.qps.push(qp))
        .map_err(Some);
    Ok(Limit {
        created,
        errno: Some(errno),
        other_context: crate::outcome(other),
        after_destroy: crate::outcome(again),
    })
}
