//! The re-registering data mover: the workload in-place rereg exists for.
//!
//! A writer streams RDMA WRITEs into a pool of target buffers while the
//! target rotates which of them are exposed: after every `--rotate-every`
//! WRITEs it hides the oldest exposed buffer and exposes the next one. The
//! schemes differ only in how a buffer is hidden and exposed:
//!
//! - `rereg-access`: `rereg` ACCESS, REMOTE_WRITE off and on again (in
//!   place on rxe: same keys; on siw the replace fallback: new keys);
//! - `rereg-pd`: `rereg` PD, to a parking PD and back (in place on rxe);
//! - `dereg-reg`: deregister to hide, a new registration to expose;
//! - `fresh-per-write`: no pool of registrations at all, a registration
//!   made for each WRITE and dropped after it.
//!
//! Per scheme it prints the sustained throughput (WRITEs and MiB per
//! second, rotations included) and what each rotation step (hide + expose)
//! cost, median and p10–p90, as one machine-readable line:
//!
//! ```text
//! @@RESULT {"kind":"mover","device":"rxe0","scheme":"rereg-access","path":"inplace","buffer":1048576,"write":4096,"buffers":8,"exposed":4,"rotate_every":1,"writes":2000,"seconds":…,"writes_per_s":…,"mib_per_s":…,"rotate_median_ns":…,"rotate_p10_ns":…,"rotate_p90_ns":…}
//! ```
//!
//! ```text
//! mover [--device NAME] [--buffer BYTES] [--write BYTES] [--writes N]
//!       [--buffers N] [--exposed N] [--rotate-every N] [--scheme NAME]
//! ```
//!
//! Defaults: every device, 1 MiB buffers, 4 KiB WRITEs, 2000 WRITEs, 8
//! buffers of which 4 exposed, a rotation after every WRITE, every scheme.
//! The peer QPs are `tools/rereg_tour/traffic.rs`'s: RoCE loopback on rxe, the rdma_cm
//! on siw. Every WRITE must succeed and land (its stamp is checked at the
//! target); any failure ends the run with exit status 1.
//! `cargo vm bench` runs it on rxe0 and siw0 and reports the lines.

// Shared with the rereg_tour example (a directory without main.rs is no
// example target of its own), which uses its other half (the checked WRITE
// and the recovery): unused here.
#[path = "rereg_tour/traffic.rs"]
#[allow(dead_code)]
mod traffic;

use std::process::ExitCode;
use std::time::Instant;

use memmap2::MmapMut;
use traffic::{Fallible, Peer};
use uverbs::device::OpenOptions;
use uverbs::mr::{Rereg, ReregFallback, ReregPath};
use uverbs::{AccessFlags, Context, Device, MemoryRegion, ProtectionDomain};

/// Exposed: the writer may WRITE.
const EXPOSED: AccessFlags = AccessFlags::LOCAL_WRITE.union(AccessFlags::REMOTE_WRITE);
/// Hidden by ACCESS: registered, but no remote access.
const HIDDEN: AccessFlags = AccessFlags::LOCAL_WRITE;

/// How a buffer is hidden and exposed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Scheme {
    ReregAccess,
    ReregPd,
    DeregReg,
    FreshPerWrite,
}

impl Scheme {
    const ALL: [Scheme; 4] = [
        Scheme::ReregAccess,
        Scheme::ReregPd,
        Scheme::DeregReg,
        Scheme::FreshPerWrite,
    ];

    fn name(self) -> &'static str {
        match self {
            Scheme::ReregAccess => "rereg-access",
            Scheme::ReregPd => "rereg-pd",
            Scheme::DeregReg => "dereg-reg",
            Scheme::FreshPerWrite => "fresh-per-write",
        }
    }
}

struct Options {
    device: Option<String>,
    buffer: usize,
    write: usize,
    writes: usize,
    buffers: usize,
    exposed: usize,
    rotate_every: usize,
    schemes: Vec<Scheme>,
}

/// `None`: `--help` asked for the usage.
fn parse_args() -> Result<Option<Options>, lexopt::Error> {
    use lexopt::prelude::*;
    let mut o = Options {
        device: None,
        buffer: 1 << 20,
        write: 4096,
        writes: 2000,
        buffers: 8,
        exposed: 4,
        rotate_every: 1,
        schemes: Scheme::ALL.to_vec(),
    };
    let mut p = lexopt::Parser::from_env();
    while let Some(arg) = p.next()? {
        match arg {
            Long("device") => o.device = Some(p.value()?.string()?),
            Long("buffer") => o.buffer = p.value()?.parse()?,
            Long("write") => o.write = p.value()?.parse()?,
            Long("writes") => o.writes = p.value()?.parse()?,
            Long("buffers") => o.buffers = p.value()?.parse()?,
            Long("exposed") => o.exposed = p.value()?.parse()?,
            Long("rotate-every") => o.rotate_every = p.value()?.parse::<usize>()?.max(1),
            Long("scheme") => {
                let s = p.value()?.parse_with(|name| {
                    let known = Scheme::ALL.into_iter().find(|s| s.name() == name);
                    known.ok_or(
                        "--scheme takes rereg-access | rereg-pd | dereg-reg | fresh-per-write",
                    )
                })?;
                o.schemes = vec![s];
            }
            Long("help") | Short('h') => return Ok(None),
            _ => return Err(arg.unexpected()),
        }
    }
    if o.write == 0 || o.write > o.buffer {
        return Err("--write must be 1..=--buffer bytes".into());
    }
    if o.exposed == 0 || o.exposed >= o.buffers {
        return Err("--exposed must be at least 1 and fewer than --buffers".into());
    }
    Ok(Some(o))
}

/// Order statistics of nanosecond samples: (median, p10, p90).
fn spread(mut ns: Vec<u64>) -> (u64, u64, u64) {
    if ns.is_empty() {
        return (0, 0, 0);
    }
    ns.sort_unstable();
    let at = |q: f64| ns[((ns.len() - 1) as f64 * q).round() as usize];
    (at(0.5), at(0.1), at(0.9))
}

/// The pool: the buffers (mapped for the whole run) and their registrations.
struct Pool<'a> {
    pd: &'a ProtectionDomain,
    parking: &'a ProtectionDomain,
    /// `None` while a buffer is not registered (dereg-reg, fresh-per-write).
    mrs: Vec<Option<MemoryRegion>>,
    /// Declared after `mrs`: unmapped after every registration is gone.
    bufs: Vec<MmapMut>,
    paths: Vec<ReregPath>,
}

impl Pool<'_> {
    fn ptr(&mut self, i: usize) -> *mut u8 {
        self.bufs[i].as_mut_ptr()
    }

    fn register(&mut self, i: usize, pd: &ProtectionDomain, access: AccessFlags) -> Fallible<()> {
        let (p, len) = (self.ptr(i), self.bufs[i].len());
        // SAFETY: the buffer stays mapped until after its MR (field order).
        self.mrs[i] = Some(unsafe { pd.reg_mr(p, len, access) }?);
        Ok(())
    }

    /// Applies `change` to buffer `i`'s registration, replacing it where
    /// the device cannot change it in place; records the path taken.
    fn rereg(&mut self, i: usize, change: Rereg<'_>) -> Fallible<()> {
        let mr = self.mrs[i]
            .as_mut()
            .ok_or("rereg of an unregistered buffer")?;
        let path = mr
            .apply(&change, ReregFallback::Replace)
            .map_err(|e| format!("rereg: {e}"))?;
        self.paths.push(path);
        Ok(())
    }

    fn hide(&mut self, scheme: Scheme, i: usize) -> Fallible<()> {
        match scheme {
            Scheme::ReregAccess => self.rereg(i, Rereg::new().access(HIDDEN)),
            Scheme::ReregPd => self.rereg(i, Rereg::new().pd(self.parking)),
            Scheme::DeregReg | Scheme::FreshPerWrite => {
                if let Some(mr) = self.mrs[i].take() {
                    mr.dereg().map_err(|e| format!("dereg: {}", e.error))?;
                }
                Ok(())
            }
        }
    }

    fn expose(&mut self, scheme: Scheme, i: usize) -> Fallible<()> {
        match scheme {
            Scheme::ReregAccess => self.rereg(i, Rereg::new().access(EXPOSED)),
            Scheme::ReregPd => self.rereg(i, Rereg::new().pd(self.pd)),
            Scheme::DeregReg | Scheme::FreshPerWrite => self.register(i, self.pd, EXPOSED),
        }
    }

    fn rkey(&self, i: usize) -> Fallible<u32> {
        Ok(self.mrs[i].as_ref().ok_or("no registration")?.rkey())
    }

    fn path_name(&self) -> &'static str {
        let inplace = self
            .paths
            .iter()
            .filter(|p| **p == ReregPath::InPlace)
            .count();
        match (inplace, self.paths.len() - inplace) {
            (0, 0) => "none",
            (_, 0) => "inplace",
            (0, _) => "replaced",
            _ => "mixed",
        }
    }
}

/// One scheme's run on `ctx`; prints its line.
fn run_scheme(ctx: &Context, o: &Options, scheme: Scheme) -> Fallible<()> {
    let pd = ctx.alloc_pd()?;
    let parking = ctx.alloc_pd()?;
    let mut peer = Peer::with_source(ctx, &pd, o.write)?;
    let mut pool = Pool {
        pd: &pd,
        parking: &parking,
        mrs: (0..o.buffers).map(|_| None).collect(),
        bufs: (0..o.buffers)
            .map(|_| MmapMut::map_anon(o.buffer))
            .collect::<Result<_, _>>()?,
        paths: Vec::new(),
    };
    for b in &mut pool.bufs {
        b.fill(0); // fault the pages in before anything is timed
    }
    // Start: buffers 0..exposed exposed, the rest hidden (for the rereg
    // schemes registered and hidden; for the others not registered).
    for i in 0..o.buffers {
        match scheme {
            Scheme::ReregAccess => {
                pool.register(i, &pd, if i < o.exposed { EXPOSED } else { HIDDEN })?
            }
            Scheme::ReregPd => {
                let home = if i < o.exposed { &pd } else { &parking };
                pool.register(i, home, EXPOSED)?
            }
            Scheme::DeregReg => {
                if i < o.exposed {
                    pool.register(i, &pd, EXPOSED)?
                }
            }
            Scheme::FreshPerWrite => {}
        }
    }
    let mut rotate_ns = Vec::with_capacity(o.writes / o.rotate_every + 1);
    let (mut oldest, mut next) = (0usize, o.exposed % o.buffers);
    let start = Instant::now();
    for w in 0..o.writes {
        // The writer: round robin over the exposed window [oldest, next).
        let i = (oldest + w % o.exposed) % o.buffers;
        if scheme == Scheme::FreshPerWrite {
            let t = Instant::now();
            pool.expose(scheme, i)?;
            rotate_ns.push(t.elapsed().as_nanos() as u64);
        }
        let rkey = pool.rkey(i)?;
        let offset = (w * o.write) % (o.buffer - o.write + 1);
        let at = pool.ptr(i).wrapping_add(offset);
        // SAFETY: `at..at + write` lies inside buffer i, mapped for the
        // run; nothing else touches it during the WRITE.
        unsafe { peer.stream(at, o.write, rkey) }?;
        if scheme == Scheme::FreshPerWrite {
            let t = Instant::now();
            pool.hide(scheme, i)?;
            let n = rotate_ns.len();
            rotate_ns[n - 1] += t.elapsed().as_nanos() as u64;
            continue;
        }
        if (w + 1) % o.rotate_every == 0 {
            let t = Instant::now();
            pool.hide(scheme, oldest)?;
            pool.expose(scheme, next)?;
            rotate_ns.push(t.elapsed().as_nanos() as u64);
            oldest = (oldest + 1) % o.buffers;
            next = (next + 1) % o.buffers;
        }
    }
    let secs = start.elapsed().as_secs_f64();
    let (med, p10, p90) = spread(rotate_ns);
    // The result `cargo vm bench` reads (tests/vm/src/bench/results.rs).
    let result = serde_json::json!({
        "kind": "mover",
        "device": ctx.device_name(),
        "scheme": scheme.name(),
        "path": pool.path_name(),
        "buffer": o.buffer,
        "write": o.write,
        "buffers": o.buffers,
        "exposed": o.exposed,
        "rotate_every": o.rotate_every,
        "writes": o.writes,
        "seconds": secs,
        "writes_per_s": o.writes as f64 / secs,
        "mib_per_s": (o.writes * o.write) as f64 / secs / (1u64 << 20) as f64,
        "rotate_median_ns": med,
        "rotate_p10_ns": p10,
        "rotate_p90_ns": p90,
    });
    println!("@@RESULT {result}");
    println!(
        "  {} on {}: {} WRITEs of {} B in {secs:.2} s ({:.0}/s), rotation median {:.1} µs (p10 {:.1}, p90 {:.1}), {}",
        scheme.name(),
        ctx.device_name(),
        o.writes,
        o.write,
        o.writes as f64 / secs,
        med as f64 / 1e3,
        p10 as f64 / 1e3,
        p90 as f64 / 1e3,
        pool.path_name()
    );
    // The peer's QPs go first, then the registrations, then the buffers.
    drop(peer);
    drop(pool);
    Ok(())
}

fn device_run(dev: &Device, o: &Options) -> bool {
    let ctx = match dev.open_with(&OpenOptions::new()) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("{}: open: {e}", dev.name());
            return false;
        }
    };
    let mut ok = true;
    for &s in &o.schemes {
        if let Err(e) = run_scheme(&ctx, o, s) {
            let result = serde_json::json!({
                "kind": "mover",
                "device": dev.name(),
                "scheme": s.name(),
                "error": e.to_string(),
            });
            println!("@@RESULT {result}");
            ok = false;
        }
    }
    ok
}

fn main() -> ExitCode {
    let o = match parse_args() {
        Ok(Some(o)) => o,
        failed => {
            if let Err(e) = failed {
                eprintln!("mover: {e}");
            }
            eprintln!(
                "usage: mover [--device NAME] [--buffer BYTES] [--write BYTES] [--writes N] \
                 [--buffers N] [--exposed N] [--rotate-every N] [--scheme rereg-access|rereg-pd|dereg-reg|fresh-per-write]"
            );
            return ExitCode::from(2);
        }
    };
    let devices = match uverbs::devices() {
        Ok(d) => d,
        Err(e) => {
            eprintln!("mover: cannot list RDMA devices: {e}");
            return ExitCode::FAILURE;
        }
    };
    let picked: Vec<&Device> = devices
        .iter()
        .filter(|d| o.device.as_deref().map_or(true, |n| n == d.name()))
        .collect();
    if picked.is_empty() {
        eprintln!("mover: no RDMA device (try cargo vm bench)");
        return ExitCode::FAILURE;
    }
    let mut ok = true;
    for d in picked {
        ok &= device_run(d, &o);
    }
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
