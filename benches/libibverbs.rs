//! Debian's static libibverbs as the libibverbs peers see it (benches/verbs,
//! benches/ops and benches/growth, feature `libibverbs-peer`, linked by
//! benches/build.rs): the calls and structs they share, declared once, the
//! device lookup, and the objects of a run with their teardown.
//!
//! A static libibverbs finds no device unless its providers are registered
//! first: C code gets that from `-DRDMA_STATIC_PROVIDERS=rxe,siw` in
//! verbs.h; [`device`] calls `ibv_static_providers` itself, once.

// Each bench includes this file (`#[path]`) and calls a part of it.
#![allow(dead_code)]

use std::ffi::{c_char, c_int, c_void, CStr};
use std::mem::{offset_of, size_of};
use std::sync::Once;

/// `struct ibv_device` (only passed back).
#[repr(C)]
pub struct IbvDevice(c_void);
/// `struct ibv_context` (only passed back; benches/ops reads its ops table
/// through a view of its own).
#[repr(C)]
pub struct IbvContext(c_void);
/// `struct ibv_pd` (only passed back).
#[repr(C)]
pub struct IbvPd(c_void);

/// `struct ibv_mr`: the keys follow context, pd, addr, length, handle
/// (offsets checked in benches/ops against a gcc-compiled probe).
#[repr(C)]
pub struct IbvMr {
    pub context: *mut IbvContext,
    pub pd: *mut IbvPd,
    pub addr: *mut c_void,
    pub length: usize,
    pub handle: u32,
    pub lkey: u32,
    pub rkey: u32,
}

/// `struct ibv_comp_channel` (only passed back).
#[repr(C)]
pub struct IbvCompChannel(c_void);
/// `struct ibv_srq` (only passed back).
#[repr(C)]
pub struct IbvSrq(c_void);

/// `struct ibv_cq` (its first field; only passed back).
#[repr(C)]
pub struct IbvCq {
    pub context: *mut IbvContext,
}

/// `struct ibv_qp` up to `qp_num`.
#[repr(C)]
pub struct IbvQp {
    pub context: *mut IbvContext,
    pub qp_context: *mut c_void,
    pub pd: *mut IbvPd,
    pub send_cq: *mut IbvCq,
    pub recv_cq: *mut IbvCq,
    pub srq: *mut IbvSrq,
    pub handle: u32,
    pub qp_num: u32,
}

/// `struct ibv_qp_cap`.
#[repr(C)]
#[derive(Default)]
pub struct IbvQpCap {
    pub max_send_wr: u32,
    pub max_recv_wr: u32,
    pub max_send_sge: u32,
    pub max_recv_sge: u32,
    pub max_inline_data: u32,
}

/// `struct ibv_qp_init_attr`.
#[repr(C)]
pub struct IbvQpInitAttr {
    pub qp_context: *mut c_void,
    pub send_cq: *mut IbvCq,
    pub recv_cq: *mut IbvCq,
    pub srq: *mut IbvSrq,
    pub cap: IbvQpCap,
    pub qp_type: u32,
    pub sq_sig_all: c_int,
}

// verbs.h on x86_64, as a gcc-compiled probe of it printed (see benches/ops).
const _: () = {
    assert!(offset_of!(IbvMr, lkey) == 36 && offset_of!(IbvMr, rkey) == 40);
    assert!(offset_of!(IbvQp, qp_num) == 52);
    assert!(size_of::<IbvQpInitAttr>() == 64);
    assert!(offset_of!(IbvQpInitAttr, cap) == 32 && offset_of!(IbvQpInitAttr, qp_type) == 52);
};

/// verbs.h's `IBV_QPT_RC`.
pub const IBV_QPT_RC: u32 = 2;

extern "C" {
    static verbs_provider_rxe: u8;
    static verbs_provider_siw: u8;
    fn ibv_static_providers(unused: *mut c_void, ...);
    fn ibv_get_device_list(num: *mut c_int) -> *mut *mut IbvDevice;
    fn ibv_get_device_name(dev: *mut IbvDevice) -> *const c_char;
    pub fn ibv_open_device(dev: *mut IbvDevice) -> *mut IbvContext;
    pub fn ibv_close_device(ctx: *mut IbvContext) -> c_int;
    pub fn ibv_alloc_pd(ctx: *mut IbvContext) -> *mut IbvPd;
    pub fn ibv_dealloc_pd(pd: *mut IbvPd) -> c_int;
    pub fn ibv_reg_mr(pd: *mut IbvPd, addr: *mut c_void, len: usize, access: c_int) -> *mut IbvMr;
    pub fn ibv_dereg_mr(mr: *mut IbvMr) -> c_int;
    pub fn ibv_create_cq(
        ctx: *mut IbvContext,
        cqe: c_int,
        cq_context: *mut c_void,
        channel: *mut IbvCompChannel,
        comp_vector: c_int,
    ) -> *mut IbvCq;
    pub fn ibv_destroy_cq(cq: *mut IbvCq) -> c_int;
    pub fn ibv_create_qp(pd: *mut IbvPd, attr: *mut IbvQpInitAttr) -> *mut IbvQp;
    pub fn ibv_destroy_qp(qp: *mut IbvQp) -> c_int;
}

/// The error of the libibverbs call `what` that just failed.
pub fn fail(what: &str) -> String {
    format!("libibverbs: {what}: errno {}", errno())
}

/// A context and a PD, and the MRs, CQs and QPs a bench makes in them:
/// destroyed on drop, users before what they use (QPs, then CQs and MRs,
/// then the PD and the context).
pub struct Objects {
    pub ctx: *mut IbvContext,
    pub pd: *mut IbvPd,
    pub mrs: Vec<*mut IbvMr>,
    pub cqs: Vec<*mut IbvCq>,
    pub qps: Vec<*mut IbvQp>,
}

impl Objects {
    /// A context of the device `name`, and a PD in it.
    pub fn open(name: &str) -> Result<Objects, String> {
        let dev = device(name)?;
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
                mrs: Vec::new(),
                cqs: Vec::new(),
                qps: Vec::new(),
            };
            o.pd = ibv_alloc_pd(ctx);
            if o.pd.is_null() {
                return Err(fail("ibv_alloc_pd"));
            }
            Ok(o)
        }
    }

    /// A CQ of `cqe` entries, no channel, kept here.
    pub fn create_cq(&mut self, cqe: c_int) -> Result<*mut IbvCq, String> {
        // SAFETY: a live context; the CQ is destroyed once, by `drop`.
        let cq =
            unsafe { ibv_create_cq(self.ctx, cqe, std::ptr::null_mut(), std::ptr::null_mut(), 0) };
        if cq.is_null() {
            return Err(fail("ibv_create_cq"));
        }
        self.cqs.push(cq);
        Ok(cq)
    }

    /// An RC QP on `cq` (both directions) with `cap`, not kept: the caller
    /// keeps it (in `qps`) or destroys it. The errno on failure.
    pub fn create_qp(&self, cq: *mut IbvCq, cap: IbvQpCap) -> Result<*mut IbvQp, i32> {
        let mut attr = IbvQpInitAttr {
            qp_context: std::ptr::null_mut(),
            send_cq: cq,
            recv_cq: cq,
            srq: std::ptr::null_mut(),
            cap,
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
            for &cq in &self.cqs {
                ibv_destroy_cq(cq);
            }
            for &mr in &self.mrs {
                ibv_dereg_mr(mr);
            }
            if !self.pd.is_null() {
                ibv_dealloc_pd(self.pd);
            }
            ibv_close_device(self.ctx);
        }
    }
}

/// The errno of the libibverbs call that just failed.
pub fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// libibverbs' device named `name`, its static providers registered first.
pub fn device(name: &str) -> Result<*mut IbvDevice, String> {
    static PROVIDERS: Once = Once::new();
    // SAFETY: the provider descriptors are statics of the linked archives;
    // the list ends with NULL as the function requires.
    PROVIDERS.call_once(|| unsafe {
        ibv_static_providers(
            std::ptr::null_mut(),
            std::ptr::addr_of!(verbs_provider_rxe),
            std::ptr::addr_of!(verbs_provider_siw),
            std::ptr::null::<c_void>(),
        )
    });
    let mut n = 0;
    // SAFETY: plain libibverbs calls. The list is never freed: a device
    // stays valid only while its list lives, and the benches open theirs
    // again and again, so it lives as long as the process.
    unsafe {
        let list = ibv_get_device_list(&mut n);
        if list.is_null() {
            return Err(format!(
                "libibverbs: ibv_get_device_list: errno {}",
                errno()
            ));
        }
        (0..n as usize)
            .map(|i| *list.add(i))
            .find(|&d| CStr::from_ptr(ibv_get_device_name(d)).to_str() == Ok(name))
            .ok_or_else(|| format!("libibverbs: no device {name}"))
    }
}
