//! Debian's static libibverbs as both libibverbs peers see it (benches/verbs
//! and benches/ops, feature `libibverbs-peer`, linked by benches/build.rs):
//! the calls they share, declared once, and the device lookup.
//!
//! A static libibverbs finds no device unless its providers are registered
//! first: C code gets that from `-DRDMA_STATIC_PROVIDERS=rxe,siw` in
//! verbs.h; [`device`] calls `ibv_static_providers` itself, once.

// Each bench includes this file (`#[path]`) and calls a part of it.
#![allow(dead_code)]

use std::ffi::{c_char, c_int, c_void, CStr};
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
