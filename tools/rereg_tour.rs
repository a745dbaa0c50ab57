//! Re-registers a memory region on every RDMA device, strict and with the
//! replace fallback side by side, and prints what each did.
//!
//! Per device: two PDs, a page-aligned 1 MiB buffer and a 2 MiB one. For
//! each change (access, PD, translation, all three) a fresh MR over the
//! 1 MiB buffer in pd1 is re-registered twice, on two fresh MRs:
//!
//! - `strict` is `ibv_rereg_mr`'s contract: one REREG_MR command; when the
//!   device cannot do it in place the outcome is `Cmd`/`EOPNOTSUPP` and the
//!   MR is undefined (so it is deregistered);
//! - `replace` is `ReregFallback::Replace`: in place when the device can,
//!   else the new registration is made first and the old one deregistered
//!   (path `Replaced`: new handle, new keys, re-publish the rkey).
//!
//! Each row shows the path, the outcome (as `ibv_rereg_mr` would report
//! it), the errno, the handle and keys (`old -> new` when they changed) and
//! the MR afterwards. The remembered refusals are forgotten before each row,
//! so every row shows the kernel's own answer.
//!
//! Then traffic proves each row: before the MR is deregistered, a peer QP
//! in pd1 makes an RDMA WRITE with the rkey the outcome leaves valid (the
//! new one after a replace, else the MR's own), and the demo prints
//! whether it landed or failed and whether that is what the MR's PD and
//! access say; after a replace, a WRITE with the old rkey must fail too.
//! On rxe the peer is a RoCE loopback connection; on siw (iWARP) the
//! rdma_cm connects it at an address of siw's netdev, and a refused WRITE
//! shows as the responder dropping the connection. See `rereg_tour/traffic.rs`.
//!
//! `UVERBS_TRANSPORT=ioctl|write` chooses the transport. Without RDMA
//! hardware, `cargo vm demo` runs this inside a VM with rxe0 and siw0.

// A directory without main.rs is no example target of its own. Shared
// with the mover tool (tools/mover.rs), which uses its streaming WRITE:
// unused here.
#[path = "rereg_tour/traffic.rs"]
#[allow(dead_code)]
mod traffic;

use std::process::ExitCode;

use memmap2::MmapMut;
use traffic::{Peer, Written};
use uverbs::device::OpenOptions;
use uverbs::error::Errno;
use uverbs::mr::{MrState, ReregFallback, ReregFlags, ReregPath};
use uverbs::{AccessFlags, Context, Device, MemoryRegion, ProtectionDomain};

const MIB: usize = 1 << 20;
const RW: AccessFlags = AccessFlags::LOCAL_WRITE
    .union(AccessFlags::REMOTE_READ)
    .union(AccessFlags::REMOTE_WRITE);

/// One line of the table.
struct Row {
    step: &'static str,
    mode: &'static str,
    path: String,
    outcome: String,
    errno: String,
    handle: String,
    lkey: String,
    rkey: String,
    after: String,
    /// What the peer's WRITEs did, one line each.
    writes: Vec<String>,
}

const HEAD: [&str; 9] = [
    "step", "mode", "path", "outcome", "errno", "handle", "lkey", "rkey", "MR after",
];

impl Row {
    fn cells(&self) -> [String; 9] {
        [
            self.step.into(),
            self.mode.into(),
            self.path.clone(),
            self.outcome.clone(),
            self.errno.clone(),
            self.handle.clone(),
            self.lkey.clone(),
            self.rkey.clone(),
            self.after.clone(),
        ]
    }
}

fn errno_text(e: Errno) -> String {
    let name = match e {
        Errno::INVAL => "EINVAL",
        Errno::OPNOTSUPP => "EOPNOTSUPP",
        Errno::FAULT => "EFAULT",
        Errno::NOMEM => "ENOMEM",
        Errno::NOENT => "ENOENT",
        Errno::PERM => "EPERM",
        Errno::BUSY => "EBUSY",
        Errno::ACCESS => "EACCES",
        Errno::NOSYS => "ENOSYS",
        Errno::NOTTY => "ENOTTY",
        _ => return format!("errno {}", e.raw_os_error()),
    };
    format!("{name} ({})", e.raw_os_error())
}

/// `a`, or `a -> b` when it changed.
fn change(a: u32, b: u32, hex: bool) -> String {
    let f = |v: u32| {
        if hex {
            format!("{v:#x}")
        } else {
            v.to_string()
        }
    };
    if a == b {
        f(a)
    } else {
        format!("{} -> {}", f(a), f(b))
    }
}

fn describe(mr: &MemoryRegion) -> String {
    let access = format!("{:?}", mr.access());
    let access = access
        .trim_start_matches("AccessFlags(")
        .trim_end_matches(')');
    format!("pd {}, {} KiB, {access}", mr.pd_handle(), mr.length() >> 10)
}

fn print_table(rows: &[Row]) {
    let cells: Vec<[String; 9]> = rows.iter().map(Row::cells).collect();
    let mut width = HEAD.map(str::len);
    for row in &cells {
        for (w, c) in width.iter_mut().zip(row) {
            *w = (*w).max(c.chars().count());
        }
    }
    let line = |row: &[String]| {
        let parts: Vec<String> = row
            .iter()
            .zip(width)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        println!("  {}", parts.join(" | ").trim_end());
    };
    line(&HEAD.map(String::from));
    println!("  {}", width.map(|w| "-".repeat(w)).join("-+-"));
    let mut last_step = "";
    for (row, cell) in rows.iter().zip(&cells) {
        if !last_step.is_empty() && row.step != last_step {
            println!("  {}", width.map(|w| " ".repeat(w)).join(" | ").trim_end());
        }
        last_step = row.step;
        line(cell);
    }
}

/// A change to make: its name, flags, whether it moves to pd2 and/or the
/// 2 MiB buffer, and the new access.
struct Step {
    name: &'static str,
    flags: ReregFlags,
    access: AccessFlags,
}

const STEPS: [Step; 4] = [
    Step {
        name: "access -> LOCAL_WRITE",
        flags: ReregFlags::ACCESS,
        access: AccessFlags::LOCAL_WRITE,
    },
    Step {
        name: "PD -> pd2",
        flags: ReregFlags::PD,
        access: AccessFlags::empty(),
    },
    Step {
        name: "translation -> 2 MiB",
        flags: ReregFlags::TRANSLATION,
        access: AccessFlags::empty(),
    },
    Step {
        name: "all three",
        flags: ReregFlags::all(),
        access: AccessFlags::LOCAL_WRITE,
    },
];

/// What a device demo works with.
struct Bench<'a> {
    ctx: &'a Context,
    pd1: &'a ProtectionDomain,
    pd2: &'a ProtectionDomain,
    buf1: (*mut u8, usize),
    buf2: (*mut u8, usize),
}

/// A row for something that failed before or after the re-registration.
fn failed_row(step: &'static str, mode: &'static str, what: &str, e: &uverbs::Error) -> Row {
    Row {
        step,
        mode,
        path: "-".into(),
        outcome: "FAILED".into(),
        errno: e.errno().map_or_else(|| "-".into(), errno_text),
        handle: "-".into(),
        lkey: "-".into(),
        rkey: "-".into(),
        after: format!("{what}: {e}"),
        writes: Vec::new(),
    }
}

/// The peer's WRITE to `target` with `rkey` (`which`: " (new)", " (old)"
/// or ""), as one line, and whether it did what `expect` says.
fn write_line(
    peer: &mut Peer,
    target: *mut u8,
    rkey: u32,
    which: &str,
    expect: Result<(), &str>,
) -> (String, bool) {
    // SAFETY: `target` is the first byte of buf1 or buf2, which live until
    // the end of `demo` and which nothing else uses meanwhile.
    let written = unsafe { peer.write(target, rkey) };
    let head = format!("WRITE with rkey {rkey:#x}{which} ->");
    match (written, expect) {
        (Ok(Written::Landed), Ok(())) => (format!("{head} landed (expected)"), true),
        (Ok(w @ (Written::Failed(_) | Written::Terminated)), Err(why)) => {
            (format!("{head} {w} (expected: {why})"), true)
        }
        (Ok(w), Ok(())) => (format!("{head} {w} (UNEXPECTED: it should land)"), false),
        (Ok(w), Err(why)) => (
            format!("{head} {w} (UNEXPECTED: it should fail: {why})"),
            false,
        ),
        (Err(e), _) => (format!("{head} the traffic failed: {e}"), false),
    }
}

/// The WRITEs that prove a row: with the rkey the outcome leaves valid
/// (and, after a replace, the old one, which must fail).
fn prove(
    b: &Bench<'_>,
    peer: &mut Peer,
    mr: &MemoryRegion,
    replaced: bool,
    old_rkey: u32,
) -> (Vec<String>, bool) {
    let expect = traffic::expectation(mr, b.pd1);
    let which = if replaced { " (new)" } else { "" };
    let (line, mut ok) = write_line(peer, mr.addr() as *mut u8, mr.rkey(), which, expect);
    let mut lines = vec![line];
    if replaced {
        let gone = Err("the old registration is gone");
        let (line, fine) = write_line(peer, b.buf1.0, old_rkey, " (old)", gone);
        lines.push(line);
        ok &= fine;
    }
    (lines, ok)
}

/// Registers a fresh MR, re-registers it once with `fallback`, lets `peer`
/// (if any) prove the outcome with traffic, deregisters it. Returns the
/// row and whether everything but the re-registration worked as expected.
fn cell(
    b: &Bench<'_>,
    step: &Step,
    mode: &'static str,
    fallback: ReregFallback,
    peer: Option<&mut Peer>,
) -> (Row, bool) {
    b.ctx.forget_rereg_refusals();
    // SAFETY: both buffers live until the end of `demo`, after every MR.
    let mut mr = match unsafe { b.pd1.reg_mr(b.buf1.0, b.buf1.1, RW) } {
        Ok(mr) => mr,
        Err(e) => return (failed_row(step.name, mode, "reg_mr", &e), false),
    };
    let (h0, l0, r0) = (mr.handle(), mr.lkey(), mr.rkey());
    let (addr, len) = if step.flags.contains(ReregFlags::TRANSLATION) {
        b.buf2
    } else {
        (std::ptr::null_mut(), 0)
    };
    let pd = step.flags.contains(ReregFlags::PD).then_some(b.pd2);
    // SAFETY: buf2 outlives every MR of the demo.
    let result = unsafe { mr.rereg_with(fallback, step.flags, pd, addr, len, step.access) };
    let mut row = Row {
        step: step.name,
        mode,
        path: "-".into(),
        outcome: "OK".into(),
        errno: "-".into(),
        handle: change(h0, mr.handle(), false),
        lkey: change(l0, mr.lkey(), true),
        rkey: change(r0, mr.rkey(), true),
        after: format!("new: {}", describe(&mr)),
        writes: Vec::new(),
    };
    match &result {
        Ok(path) => {
            row.path = match path {
                ReregPath::InPlace => "InPlace".into(),
                ReregPath::Replaced => "Replaced".into(),
            }
        }
        Err(e) => {
            row.outcome = e.outcome().to_string();
            row.errno = errno_text(e.errno());
            row.after = match e.mr_state() {
                MrState::Old => format!("old: {}", describe(&mr)),
                MrState::New => format!("new: {}", describe(&mr)),
                MrState::Undefined => "undefined: deregistered".into(),
            };
        }
    }
    let mut proven = true;
    if let Some(peer) = peer {
        if matches!(&result, Err(e) if e.mr_state() == MrState::Undefined) {
            row.writes.push("no WRITE: the MR is undefined".into());
        } else {
            let replaced = matches!(result, Ok(ReregPath::Replaced));
            let (lines, ok) = prove(b, peer, &mr, replaced, r0);
            row.writes = lines;
            proven = ok;
        }
    }
    match mr.dereg() {
        Ok(()) => (row, proven),
        Err(e) => {
            row.after = format!("{}; dereg failed: {}", row.after, e.error);
            (row, false)
        }
    }
}

/// Runs the steps on one device; returns false if something other than a
/// re-registration failed.
fn demo(dev: &Device) -> bool {
    let ctx: Context = match dev.open_with(&OpenOptions::new()) {
        Ok(ctx) => ctx,
        Err(e) => {
            eprintln!("{}: cannot open: {e}", dev.name());
            return false;
        }
    };
    println!(
        "{} ({}): transport {}, driver id {}",
        dev.name(),
        dev.path().display(),
        ctx.transport_kind(),
        ctx.driver_id()
            .map_or_else(|| "unknown".into(), |d| d.0.to_string())
    );
    let (pd1, pd2) = match (ctx.alloc_pd(), ctx.alloc_pd()) {
        (Ok(a), Ok(b)) => (a, b),
        (Err(e), _) | (_, Err(e)) => {
            eprintln!("{}: alloc_pd: {e}", dev.name());
            return false;
        }
    };
    let (mut buf1, mut buf2) = match (MmapMut::map_anon(MIB), MmapMut::map_anon(2 * MIB)) {
        (Ok(a), Ok(b)) => (a, b),
        (Err(e), _) | (_, Err(e)) => {
            eprintln!("mmap: {e}");
            return false;
        }
    };
    println!(
        "  pd1 = PD {}, pd2 = PD {}; each row starts from a fresh 1 MiB MR in pd1 \
         with LOCAL_WRITE|REMOTE_READ|REMOTE_WRITE",
        pd1.handle(),
        pd2.handle()
    );
    let bench = Bench {
        ctx: &ctx,
        pd1: &pd1,
        pd2: &pd2,
        buf1: (buf1.as_mut_ptr(), buf1.len()),
        buf2: (buf2.as_mut_ptr(), buf2.len()),
    };
    let mut ok = true;
    let mut peer = match Peer::new(&ctx, &pd1) {
        Ok(p) => Some(p),
        Err(e) => {
            eprintln!("{}: setting up the peer QPs: {e}", dev.name());
            ok = false;
            None
        }
    };
    let mut rows = Vec::new();
    for step in &STEPS {
        for (mode, fallback) in [
            ("strict", ReregFallback::Strict),
            ("replace", ReregFallback::Replace),
        ] {
            let (row, fine) = cell(&bench, step, mode, fallback, peer.as_mut());
            rows.push(row);
            ok &= fine;
        }
    }
    print_table(&rows);
    println!();
    match &peer {
        Some(p) => print_writes(&rows, &p.describe()),
        None => println!(
            "  traffic: FAILED: no peer QPs on {} (see the error above)",
            dev.name()
        ),
    }
    println!();
    // Every MR is gone, and the peer's QPs go before the buffers.
    drop(peer);
    drop((buf1, buf2));
    ok
}

/// The peer's WRITEs, per row.
fn print_writes(rows: &[Row], link: &str) {
    println!(
        "  traffic: a peer QP in pd1 ({link}) writes 64 bytes at the MR's first byte, after each row:"
    );
    let step_w = rows.iter().map(|r| r.step.len()).max().unwrap_or(0);
    for row in rows {
        for (i, line) in row.writes.iter().enumerate() {
            let (step, mode) = if i == 0 {
                (row.step, row.mode)
            } else {
                ("", "")
            };
            println!("  {step:<step_w$} | {mode:<7} | {line}");
        }
    }
}

fn main() -> ExitCode {
    let devices = match uverbs::devices() {
        Ok(d) => d,
        Err(e) => {
            eprintln!("cannot list RDMA devices: {e}");
            return ExitCode::FAILURE;
        }
    };
    if devices.is_empty() {
        eprintln!("no RDMA devices found (is ib_uverbs loaded? try cargo vm demo)");
        return ExitCode::FAILURE;
    }
    println!(
        "strict = ibv_rereg_mr (one REREG_MR, fails when the device cannot); \
         replace = ReregFallback::Replace (in place if possible, else register new + deregister old)\n"
    );
    let mut ok = true;
    for dev in &devices {
        ok &= demo(dev);
    }
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
