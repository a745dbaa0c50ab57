//! Re-registers a memory region in place on every RDMA device and prints
//! what each step did.
//!
//! Per device: two PDs, a page-aligned 1 MiB buffer registered in pd1, then
//! change its access, move it to pd2, point it at a new 2 MiB buffer. Each
//! step is one REREG_MR command; the table shows the outcome (as
//! `ibv_rereg_mr` would report it), the errno and what the MR looks like
//! afterwards. A step the kernel refuses leaves the MR undefined (per
//! `ibv_rereg_mr(3)`), so it is deregistered and a fresh one registered
//! before the next step.
//!
//! `UVERBS_TRANSPORT=ioctl|write` chooses the transport. Without RDMA
//! hardware, `cargo vm demo` runs this inside a VM with rxe0 and siw0.

use std::process::ExitCode;

use memmap2::MmapMut;
use uverbs::{
    AccessFlags, Context, Device, Errno, MemoryRegion, MrState, OpenOptions, ProtectionDomain,
    ReregError,
};

const MIB: usize = 1 << 20;

/// One line of the table.
struct Row {
    step: String,
    flags: &'static str,
    outcome: String,
    errno: String,
    mr: Option<(u32, u32, u32)>,
    state: String,
}

fn errno_text(e: Errno) -> String {
    let name = match e {
        Errno::INVAL => "EINVAL",
        Errno::OPNOTSUPP => "EOPNOTSUPP",
        Errno::FAULT => "EFAULT",
        Errno::NOMEM => "ENOMEM",
        Errno::PERM => "EPERM",
        Errno::BUSY => "EBUSY",
        Errno::ACCESS => "EACCES",
        Errno::NOSYS => "ENOSYS",
        Errno::NOTTY => "ENOTTY",
        _ => return format!("errno {}", e.raw_os_error()),
    };
    format!("{name} ({})", e.raw_os_error())
}

fn ids(mr: &MemoryRegion) -> Option<(u32, u32, u32)> {
    Some((mr.handle(), mr.lkey(), mr.rkey()))
}

fn describe(mr: &MemoryRegion) -> String {
    let access = format!("{:?}", mr.access());
    let access = access
        .trim_start_matches("AccessFlags(")
        .trim_end_matches(')');
    format!("pd {}, {} KiB, {access}", mr.pd_handle(), mr.length() >> 10)
}

/// The row for a re-registration step.
fn rereg_row(
    step: &str,
    flags: &'static str,
    mr: &MemoryRegion,
    result: &Result<(), ReregError>,
) -> Row {
    match result {
        Ok(()) => Row {
            step: step.into(),
            flags,
            outcome: "OK".into(),
            errno: "-".into(),
            mr: ids(mr),
            state: format!("new: {}", describe(mr)),
        },
        Err(e) => Row {
            step: step.into(),
            flags,
            outcome: e.outcome().to_string(),
            errno: errno_text(e.errno()),
            mr: ids(mr),
            state: match e.mr_state() {
                MrState::Old => format!("old: {}", describe(mr)),
                MrState::New => format!("new: {}", describe(mr)),
                MrState::Undefined => "undefined: deregister it".into(),
            },
        },
    }
}

fn error_row(step: &str, flags: &'static str, e: &uverbs::Error) -> Row {
    Row {
        step: step.into(),
        flags,
        outcome: "FAILED".into(),
        errno: e.errno().map_or_else(|| "-".into(), errno_text),
        mr: None,
        state: e.to_string(),
    }
}

fn print_table(rows: &[Row]) {
    let head = [
        "step", "flags", "outcome", "errno", "handle", "lkey", "rkey", "MR state",
    ];
    let cells: Vec<[String; 8]> = rows
        .iter()
        .map(|r| {
            let (h, l, k) = match r.mr {
                Some((h, l, k)) => (h.to_string(), format!("{l:#x}"), format!("{k:#x}")),
                None => ("-".into(), "-".into(), "-".into()),
            };
            [
                r.step.clone(),
                r.flags.into(),
                r.outcome.clone(),
                r.errno.clone(),
                h,
                l,
                k,
                r.state.clone(),
            ]
        })
        .collect();
    let mut width = head.map(str::len);
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
    line(&head.map(String::from));
    println!("  {}", width.map(|w| "-".repeat(w)).join("-+-"));
    for row in &cells {
        line(row);
    }
}

/// Registers `buf` in `pd`, adding its row.
fn register(
    rows: &mut Vec<Row>,
    step: &str,
    pd: &ProtectionDomain,
    buf: &mut MmapMut,
) -> Option<MemoryRegion> {
    let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ | AccessFlags::REMOTE_WRITE;
    // SAFETY: every buffer lives until the end of `demo`, after every MR.
    match unsafe { pd.reg_mr(buf.as_mut_ptr(), buf.len(), access) } {
        Ok(mr) => {
            rows.push(Row {
                step: step.into(),
                flags: "-",
                outcome: "OK".into(),
                errno: "-".into(),
                mr: ids(&mr),
                state: describe(&mr),
            });
            Some(mr)
        }
        Err(e) => {
            rows.push(error_row(step, "-", &e));
            None
        }
    }
}

/// Deregisters, adding its row.
fn deregister(rows: &mut Vec<Row>, step: &str, mr: MemoryRegion) {
    let id = ids(&mr);
    match mr.dereg() {
        Ok(()) => rows.push(Row {
            step: step.into(),
            flags: "-",
            outcome: "OK".into(),
            errno: "-".into(),
            mr: id,
            state: "deregistered".into(),
        }),
        Err(e) => {
            let mut row = error_row(step, "-", &e.error);
            row.mr = id;
            rows.push(row);
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
    let mut rows = Vec::new();
    let Some(mut mr) = register(&mut rows, "reg_mr 1 MiB in pd1", &pd1, &mut buf1) else {
        print_table(&rows);
        return false;
    };

    // Each step: a name, its flags, and the call. TRANSLATION hands the
    // device buf2, which outlives every MR.
    type Step<'a> = (
        &'a str,
        &'static str,
        Box<dyn Fn(&mut MemoryRegion) -> Result<(), ReregError> + 'a>,
    );
    let new_range = (buf2.as_mut_ptr(), buf2.len());
    let steps: Vec<Step> = vec![
        (
            "set_access LOCAL_WRITE",
            "ACCESS",
            Box::new(|mr| mr.set_access(AccessFlags::LOCAL_WRITE)),
        ),
        ("set_pd pd2", "PD", Box::new(|mr| mr.set_pd(&pd2))),
        // SAFETY: buf2 stays mapped until after the MR is gone.
        (
            "set_range new 2 MiB",
            "TRANSLATION",
            Box::new(move |mr| unsafe { mr.set_range(new_range.0, new_range.1) }),
        ),
    ];
    let mut ok = true;
    let count = steps.len();
    for (i, (step, flags, call)) in steps.into_iter().enumerate() {
        let result = call(&mut mr);
        rows.push(rereg_row(step, flags, &mr, &result));
        if let Err(e) = result {
            if e.mr_state() == MrState::Undefined && i + 1 < count {
                let pd = if mr.is_in(&pd2) { &pd2 } else { &pd1 };
                deregister(&mut rows, "  dereg (undefined MR)", mr);
                match register(&mut rows, "  reg_mr 1 MiB (fresh)", pd, &mut buf1) {
                    Some(fresh) => mr = fresh,
                    None => {
                        ok = false;
                        break;
                    }
                }
                continue;
            }
        }
        if i + 1 == count {
            deregister(&mut rows, "dereg", mr);
            break;
        }
    }
    print_table(&rows);
    println!();
    ok
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
