//! The libibverbs peer: Debian's rdma-core, linked statically (build.rs,
//! feature `libibverbs-peer`), driven over FFI on the same devices and sizes;
//! the calls shared with benches/ops are in benches/libibverbs.rs.

use std::ffi::{c_int, c_void};
use std::time::{Duration, Instant};

use crate::libibverbs::{
    device, errno, ibv_alloc_pd, ibv_close_device, ibv_dealloc_pd, ibv_dereg_mr, ibv_open_device,
    ibv_reg_mr, IbvContext, IbvDevice, IbvMr, IbvPd,
};
use crate::ours::{ACCESS_A, ACCESS_B};
use crate::stats::{measure, timed_cycle, Budget};
use crate::Cell;
use memmap2::MmapMut;
use uverbs::Device;

const IBV_REREG_MR_CHANGE_TRANSLATION: c_int = 1;
const IBV_REREG_MR_CHANGE_PD: c_int = 2;
pub const IBV_REREG_MR_CHANGE_ACCESS: c_int = 4;

extern "C" {
    pub fn ibv_rereg_mr(
        mr: *mut IbvMr,
        flags: c_int,
        pd: *mut IbvPd,
        addr: *mut c_void,
        length: usize,
        access: c_int,
    ) -> c_int;
}

/// A C call's failure: the errno (and the return code, for rereg).
struct Fail(i32, c_int);

/// A created object, or the errno of the call that returned NULL.
fn made<T>(p: *mut T) -> Result<*mut T, Fail> {
    if p.is_null() {
        Err(Fail(errno(), 0))
    } else {
        Ok(p)
    }
}

/// A destroy call's result: 0, or that non-zero number.
fn done(r: c_int) -> Result<(), Fail> {
    match r {
        0 => Ok(()),
        r => Err(Fail(r, r)),
    }
}

/// libibverbs on one device.
pub struct Ibv<'d> {
    name: &'d str,
    dev: Option<*mut IbvDevice>,
    /// The context and two PDs, once [`Ibv::fixed`] ran.
    objs: Option<(*mut IbvContext, *mut IbvPd, *mut IbvPd)>,
}

fn report(c: Cell, r: Result<crate::stats::Summary, Fail>) {
    match r {
        Ok(s) => c.report(None, &s),
        Err(Fail(95, ret)) => c.unsupported(&format!("errno=95 ret={ret}")),
        Err(Fail(e, ret)) => c.failed(&format!("errno={e} ret={ret}")),
    }
}

impl<'d> Ibv<'d> {
    pub fn new(dev: &'d Device) -> Self {
        Ibv {
            name: dev.name(),
            dev: device(dev.name()).ok(),
            objs: None,
        }
    }

    fn cell(&self, op: &'static str, size: usize) -> Cell<'d> {
        Cell {
            device: self.name,
            imp: "libibverbs",
            transport: "auto",
            fork: "off",
            op,
            size,
        }
    }

    /// ibv_open_device + ibv_close_device, ibv_alloc_pd + ibv_dealloc_pd.
    pub fn fixed(&mut self, budget: &Budget) {
        let Some(d) = self.dev else {
            return self
                .cell("open", 0)
                .failed("error=device-not-found-by-libibverbs");
        };
        // SAFETY (throughout): libibverbs calls on objects created here and
        // destroyed once.
        report(
            self.cell("context_open", 0),
            measure(budget, || unsafe {
                timed_cycle(
                    || made(ibv_open_device(d)),
                    |ctx| done(ibv_close_device(ctx)),
                )
            }),
        );
        let ctx = unsafe { ibv_open_device(d) };
        if ctx.is_null() {
            return self.cell("open", 0).failed(&format!("errno={}", errno()));
        }
        report(
            self.cell("alloc_dealloc_pd", 0),
            measure(budget, || unsafe {
                timed_cycle(|| made(ibv_alloc_pd(ctx)), |pd| done(ibv_dealloc_pd(pd)))
            }),
        );
        let (pd1, pd2) = unsafe { (ibv_alloc_pd(ctx), ibv_alloc_pd(ctx)) };
        if pd1.is_null() || pd2.is_null() {
            return self
                .cell("alloc_pd", 0)
                .failed(&format!("errno={}", errno()));
        }
        self.objs = Some((ctx, pd1, pd2));
    }

    /// reg, dereg, both, and ibv_rereg_mr ACCESS, PD and TRANSLATION.
    pub fn size(&self, size: usize, a: &mut MmapMut, b: &mut MmapMut, budget: &Budget) {
        let Some((_, pd1, pd2)) = self.objs else {
            return;
        };
        let cell = |op, size| self.cell(op, size);
        let acc_a = ACCESS_A.bits() as c_int;
        let acc_b = ACCESS_B.bits() as c_int;
        let pa = a.as_mut_ptr().cast::<c_void>();
        let pb = b.as_mut_ptr().cast::<c_void>();
        let reg = || made(unsafe { ibv_reg_mr(pd1, pa, size, acc_a) });
        let dereg = |mr| done(unsafe { ibv_dereg_mr(mr) });
        report(
            cell("reg", size),
            measure(budget, || {
                let t = Instant::now();
                let mr = reg()?;
                let d = t.elapsed();
                dereg(mr)?;
                Ok(d)
            }),
        );
        report(
            cell("dereg", size),
            measure(budget, || {
                let mr = reg()?;
                let t = Instant::now();
                dereg(mr)?;
                Ok(t.elapsed())
            }),
        );
        report(
            cell("reg_dereg", size),
            measure(budget, || {
                let t = Instant::now();
                dereg(reg()?)?;
                Ok(t.elapsed())
            }),
        );
        // ibv_rereg_mr: rdma-core's rxe and siw providers have no rereg_mr,
        // so these answer EOPNOTSUPP ("unsupported") without a system call.
        let Ok(mr) = reg() else { return };
        type Args = (c_int, *mut IbvPd, *mut c_void, usize, c_int);
        let cases: [(&str, Args, Args); 3] = [
            (
                "rereg_access",
                (
                    IBV_REREG_MR_CHANGE_ACCESS,
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                    0,
                    acc_b,
                ),
                (
                    IBV_REREG_MR_CHANGE_ACCESS,
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                    0,
                    acc_a,
                ),
            ),
            (
                "rereg_pd",
                (IBV_REREG_MR_CHANGE_PD, pd2, std::ptr::null_mut(), 0, 0),
                (IBV_REREG_MR_CHANGE_PD, pd1, std::ptr::null_mut(), 0, 0),
            ),
            (
                "rereg_translation",
                (
                    IBV_REREG_MR_CHANGE_TRANSLATION,
                    std::ptr::null_mut(),
                    pb,
                    size,
                    0,
                ),
                (
                    IBV_REREG_MR_CHANGE_TRANSLATION,
                    std::ptr::null_mut(),
                    pa,
                    size,
                    0,
                ),
            ),
        ];
        let mut mr = mr;
        for (op, x, y) in cases {
            let mut i = 0;
            let r = measure(budget, || -> Result<Duration, Fail> {
                i += 1;
                let (f, pd, addr, len, acc) = if i % 2 == 1 { x } else { y };
                let t = Instant::now();
                let ret = unsafe { ibv_rereg_mr(mr, f, pd, addr, len, acc) };
                let d = t.elapsed();
                if ret != 0 {
                    return Err(Fail(errno(), ret));
                }
                Ok(d)
            });
            let failed = r.is_err();
            report(cell(op, size), r);
            if failed {
                // The man page calls the MR undefined after ERR_CMD: replace it.
                let _ = dereg(mr);
                match reg() {
                    Ok(m) => mr = m,
                    Err(_) => break,
                }
            }
        }
        let _ = dereg(mr);
    }
}

impl Drop for Ibv<'_> {
    fn drop(&mut self) {
        if let Some((ctx, pd1, pd2)) = self.objs.take() {
            // SAFETY: created in `fixed`, destroyed once here.
            unsafe {
                ibv_dealloc_pd(pd1);
                ibv_dealloc_pd(pd2);
                ibv_close_device(ctx);
            }
        }
    }
}
