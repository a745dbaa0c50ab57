//! This crate's typed API: what a user of `uverbs` calls.

use std::sync::Arc;
use std::time::{Duration, Instant};

use memmap2::MmapMut;
use uverbs::device::OpenOptions;
use uverbs::fork::{ForkMode, ForkSafety, MadviseAdvisor};
use uverbs::mr::{ReregError, ReregFallback, ReregFlags, ReregPath};
use uverbs::transport::TransportMode;
use uverbs::{AccessFlags, Context, Device, Error};

use crate::stats::{measure, Budget};
use crate::{keep, Cell};

/// The access a region is registered with, and the one rereg ACCESS toggles to.
pub const ACCESS_A: AccessFlags = AccessFlags::LOCAL_WRITE
    .union(AccessFlags::REMOTE_READ)
    .union(AccessFlags::REMOTE_WRITE);
pub const ACCESS_B: AccessFlags = AccessFlags::LOCAL_WRITE.union(AccessFlags::REMOTE_READ);

/// An anonymous, page-aligned, touched buffer (so no sample pays first faults).
pub fn buffer(size: usize) -> MmapMut {
    let mut m = MmapMut::map_anon(size).expect("mmap of a benchmark buffer");
    m.fill(1);
    m
}

fn open(dev: &Device, mode: TransportMode, fork: ForkMode) -> Result<Context, Error> {
    let fork = Arc::new(ForkSafety::new(fork, Box::new(MadviseAdvisor)));
    dev.open_with(&OpenOptions::new().transport(mode).fork_safety(fork))
}

/// Records which paths a series of rereg calls took.
#[derive(Default)]
struct Paths {
    in_place: usize,
    replaced: usize,
}

impl Paths {
    fn note(&mut self, p: ReregPath) {
        match p {
            ReregPath::InPlace => self.in_place += 1,
            ReregPath::Replaced => self.replaced += 1,
        }
    }

    fn name(&self) -> &'static str {
        match (self.in_place, self.replaced) {
            (_, 0) => "inplace",
            (0, _) => "replaced",
            _ => "mixed",
        }
    }
}

/// This crate over one transport, on one device.
pub struct Ours<'d> {
    dev: &'d Device,
    tname: &'static str,
    mode: TransportMode,
    /// Fork safety off, and forced on.
    ctx: Option<(Context, Context)>,
}

impl<'d> Ours<'d> {
    pub fn new(dev: &'d Device, tname: &'static str, mode: TransportMode) -> Self {
        Ours {
            dev,
            tname,
            mode,
            ctx: None,
        }
    }

    fn cell(&self, fork: &'static str, op: &'static str, size: usize) -> Cell<'d> {
        Cell {
            device: self.dev.name(),
            imp: "ours",
            transport: self.tname,
            fork,
            op,
            size,
        }
    }

    /// Two live PDs must have different handles. A transport that hands
    /// back a zeroed response (the kernel's answer lost on the way) gives
    /// both handle 0, and every later number would measure a broken path.
    fn sane(&self) -> Result<(), String> {
        let ctx = open(self.dev, self.mode, ForkMode::Disabled).map_err(|e| format!("{e:?}"))?;
        let (a, b) = (ctx.alloc_pd(), ctx.alloc_pd());
        let (a, b) = (
            a.map_err(|e| format!("{e:?}"))?,
            b.map_err(|e| format!("{e:?}"))?,
        );
        if a.handle() == b.handle() {
            return Err(format!(
                "sanity-check-failed:two-live-PDs-share-handle-{}:the-transport-loses-the-kernel's-response",
                a.handle()
            ));
        }
        Ok(())
    }

    /// The size-independent cells: context open and PD alloc + dealloc.
    pub fn fixed(&mut self, budget: &Budget) {
        let (dev, mode) = (self.dev, self.mode);
        if let Err(e) = self.sane() {
            return self.cell("off", "sanity", 0).failed(&format!("error={e}"));
        }
        // Context open + close (GET_CONTEXT, the async fd, the transport choice).
        let c = self.cell("off", "context_open", 0);
        match measure(budget, || -> Result<Duration, Error> {
            let t = Instant::now();
            let ctx = open(dev, mode, ForkMode::Disabled)?;
            drop(keep(ctx));
            Ok(t.elapsed())
        }) {
            Ok(s) => c.report(None, &s),
            Err(e) => c.failed(&format!("error={e:?}")),
        }
        let ctx = match open(dev, mode, ForkMode::Disabled) {
            Ok(c) => c,
            Err(e) => return self.cell("off", "open", 0).failed(&format!("error={e:?}")),
        };
        let c = self.cell("off", "alloc_dealloc_pd", 0);
        match measure(budget, || -> Result<Duration, String> {
            let t = Instant::now();
            let pd = ctx.alloc_pd().map_err(|e| format!("{e:?}"))?;
            pd.dealloc().map_err(|e| format!("{:?}", e.error))?;
            Ok(t.elapsed())
        }) {
            Ok(s) => c.report(None, &s),
            Err(e) => c.failed(&format!("error={e}")),
        }
        match open(dev, mode, ForkMode::Enabled) {
            Ok(on) => self.ctx = Some((ctx, on)),
            Err(e) => self.cell("on", "open", 0).failed(&format!("error={e:?}")),
        }
    }

    /// The cells of one region size, on the shared buffers `a` and `b`.
    pub fn size(&self, size: usize, a: &mut MmapMut, b: &mut MmapMut, budget: &Budget) {
        let Some((ctx, ctx_on)) = &self.ctx else {
            return;
        };
        let cell = |fork, op, size| self.cell(fork, op, size);
        reg_ops(ctx, size, a, budget, &cell);
        for (fork, ctx) in [("off", ctx), ("on", ctx_on)] {
            rereg_ops(ctx, fork, size, a, b, budget, &cell);
        }
    }
}

fn reg_ops<'a>(
    ctx: &Context,
    size: usize,
    a: &mut MmapMut,
    budget: &Budget,
    cell: &impl Fn(&'static str, &'static str, usize) -> Cell<'a>,
) {
    let pd = match ctx.alloc_pd() {
        Ok(pd) => pd,
        Err(e) => return cell("off", "reg", size).failed(&format!("error={e:?}")),
    };
    let ptr = a.as_mut_ptr();
    // SAFETY (all three): `a` outlives every region, each dropped in the sample.
    let reg = || unsafe { pd.reg_mr(ptr, size, ACCESS_A) };

    let c = cell("off", "reg", size);
    match measure(budget, || -> Result<Duration, Error> {
        let t = Instant::now();
        let mr = reg()?;
        let d = t.elapsed();
        mr.dereg()?;
        Ok(d)
    }) {
        Ok(s) => c.report(None, &s),
        Err(e) => c.failed(&format!("error={e:?}")),
    }
    let c = cell("off", "dereg", size);
    match measure(budget, || -> Result<Duration, Error> {
        let mr = reg()?;
        let t = Instant::now();
        mr.dereg()?;
        Ok(t.elapsed())
    }) {
        Ok(s) => c.report(None, &s),
        Err(e) => c.failed(&format!("error={e:?}")),
    }
    let c = cell("off", "reg_dereg", size);
    match measure(budget, || -> Result<Duration, Error> {
        let t = Instant::now();
        let mr = reg()?;
        mr.dereg()?;
        Ok(t.elapsed())
    }) {
        Ok(s) => c.report(None, &s),
        Err(e) => c.failed(&format!("error={e:?}")),
    }
}

/// rereg ACCESS, PD and TRANSLATION with the replace fallback: in place where
/// the kernel can, register-new-then-deregister-old where it answers
/// `EOPNOTSUPP` (the output's `path=` says which).
fn rereg_ops<'a>(
    ctx: &Context,
    fork: &'static str,
    size: usize,
    a: &mut MmapMut,
    b: &mut MmapMut,
    budget: &Budget,
    cell: &impl Fn(&'static str, &'static str, usize) -> Cell<'a>,
) {
    let (pd1, pd2) = match (ctx.alloc_pd(), ctx.alloc_pd()) {
        (Ok(p1), Ok(p2)) => (p1, p2),
        (Err(e), _) | (_, Err(e)) => {
            return cell(fork, "rereg_access", size).failed(&format!("error={e:?}"))
        }
    };
    let bufs = [a.as_mut_ptr(), b.as_mut_ptr()];
    // SAFETY: both buffers outlive the region (dropped at the end of this fn).
    let mut mr = match unsafe { pd1.reg_mr(bufs[0], size, ACCESS_A) } {
        Ok(mr) => mr,
        Err(e) => return cell(fork, "rereg_access", size).failed(&format!("error={e:?}")),
    };
    let rereg = |c: Cell, f: &mut dyn FnMut(usize) -> Result<ReregPath, ReregError>| {
        let mut paths = Paths::default();
        let mut i = 0usize;
        match measure(budget, || -> Result<Duration, ReregError> {
            i += 1;
            let t = Instant::now();
            let p = f(i)?;
            let d = t.elapsed();
            paths.note(p);
            Ok(d)
        }) {
            Ok(s) => c.report(Some(paths.name()), &s),
            Err(e) => c.failed(&format!("error={e:?}")),
        }
    };
    let replace = ReregFallback::Replace;
    let null = std::ptr::null_mut();
    rereg(cell(fork, "rereg_access", size), &mut |i| {
        let acc = if i % 2 == 1 { ACCESS_B } else { ACCESS_A };
        // SAFETY: no TRANSLATION: no new memory reaches the device.
        unsafe { mr.rereg_with(replace, ReregFlags::ACCESS, None, null, 0, acc) }
    });
    rereg(cell(fork, "rereg_pd", size), &mut |i| {
        let pd = if i % 2 == 1 { &pd2 } else { &pd1 };
        // SAFETY: as above.
        unsafe {
            mr.rereg_with(
                replace,
                ReregFlags::PD,
                Some(pd),
                null,
                0,
                AccessFlags::empty(),
            )
        }
    });
    rereg(cell(fork, "rereg_translation", size), &mut |i| {
        let to = bufs[i % 2];
        // SAFETY: `a` and `b` outlive the region.
        unsafe {
            mr.rereg_with(
                replace,
                ReregFlags::TRANSLATION,
                None,
                to,
                size,
                AccessFlags::empty(),
            )
        }
    });
    drop(mr);
}
