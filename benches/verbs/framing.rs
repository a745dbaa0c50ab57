//! What each implementation sends the kernel for each control operation:
//! `write()` (and which command) or `ioctl(RDMA_VERBS_IOCTL)`, traced by
//! strace in the guest.
//!
//! `verbs --framing` re-runs itself under `strace -f -e trace=write,ioctl`
//! once per device (`--framing-child DEVICE`). The child performs each
//! operation once with libibverbs and once with ours (the default
//! transport, `Auto`), and before each one writes a marker to fd -1 (a
//! `write` that fails with `EBADF` and does nothing but show up in the
//! trace). The parent reads the trace back and prints, per operation, the
//! calls between two markers that reached a uverbs file:
//!
//! ```text
//! @@RESULT {"kind":"framing","device":"rxe0","impl":"libibverbs","op":"alloc_pd","calls":"write:ALLOC_PD"}
//! @@RESULT {"kind":"framing","device":"rxe0","impl":"libibverbs","op":"dealloc_pd","calls":"ioctl"}
//! @@RESULT {"kind":"framing","device":"rxe0","error":"…"}
//! ```
//!
//! A `write` is named by the command in the first word of its buffer (the
//! `ib_uverbs_cmd_hdr`); strace cannot look inside an ioctl's argument, so
//! an ioctl is only counted (for ours the transport kind says which
//! method it is). The strace binary is `UVERBS_STRACE` or `/usr/bin/strace`.

use std::ffi::{c_int, c_void};
use std::path::Path;
use std::process::Command;

use serde_json::json;
use uverbs::mr::{ReregFallback, ReregFlags};
use uverbs::Device;

use crate::ours::{buffer, ACCESS_A, ACCESS_B};
use crate::trace::{calls_between_marks, MARK};
use crate::{ibv, libibverbs, result};

/// The region each registration covers.
const REGION: usize = 4 << 10;

/// The parent's side: traces one child per device and prints the lines.
pub fn run(devices: &[Device]) {
    let strace = std::env::var("UVERBS_STRACE").unwrap_or_else(|_| "/usr/bin/strace".into());
    let me = match std::env::current_exe() {
        Ok(p) => p,
        Err(e) => return failed(None, format!("current_exe: {e}")),
    };
    for dev in devices {
        let name = dev.name();
        let trace = std::env::temp_dir().join(format!("uverbs-framing-{name}.trace"));
        let status = Command::new(&strace)
            .args(["-f", "-qq", "-x", "-s", "64", "-e", "signal=none"])
            .args(["-e", "trace=write,ioctl", "-o"])
            .arg(&trace)
            .arg("--")
            .arg(&me)
            .args(["--framing-child", name])
            .status();
        match status {
            Ok(s) if s.success() => {}
            Ok(s) => {
                failed(Some(name), format!("traced child: {s}"));
                continue;
            }
            Err(e) => {
                failed(Some(name), format!("running {strace}: {e}"));
                continue;
            }
        }
        match std::fs::read_to_string(&trace) {
            Ok(text) => {
                for (imp, op, calls) in calls_between_marks(&text) {
                    let call = json!({"device": name, "impl": imp, "op": op, "calls": calls});
                    result::print("framing", [call]);
                }
            }
            Err(e) => failed(
                Some(name),
                format!("reading {}: {e}", Path::new(&trace).display()),
            ),
        }
        let _ = std::fs::remove_file(&trace);
    }
}

/// Prints a framing result that says what failed, on `device` or before
/// any.
fn failed(device: Option<&str>, error: String) {
    let device = device.map(|d| json!({ "device": d }));
    result::print(
        "framing",
        [json!({ "error": error })].into_iter().chain(device),
    );
}

/// Writes a marker into the trace: a `write` to fd -1, which fails with
/// `EBADF` and changes nothing.
fn mark(imp: &str, op: &str) {
    let text = format!("{MARK}{imp} {op}");
    // SAFETY: write() reads `text.len()` bytes of a live string; fd -1 is
    // never open, so nothing is written anywhere.
    let _ = unsafe { libc::write(-1, text.as_ptr().cast::<c_void>(), text.len()) };
}

/// The child: each operation once per implementation, each after its marker.
pub fn child(dev_name: &str) -> Result<(), String> {
    let dev = uverbs::devices()
        .map_err(|e| format!("listing devices: {e}"))?
        .into_iter()
        .find(|d| d.name() == dev_name)
        .ok_or_else(|| format!("no device {dev_name}"))?;
    let mut buf = buffer(REGION);
    ibv_ops(&dev, &mut buf)?;
    ours_ops(&dev, &mut buf)?;
    mark("end", "end");
    Ok(())
}

fn ibv_ops(dev: &Device, buf: &mut memmap2::MmapMut) -> Result<(), String> {
    let imp = "libibverbs";
    let d = libibverbs::device(dev.name())?;
    let (acc_a, acc_b) = (ACCESS_A.bits() as c_int, ACCESS_B.bits() as c_int);
    // SAFETY (throughout): libibverbs calls on objects created here and
    // destroyed once, in order; `buf` outlives the region.
    unsafe {
        mark(imp, "context_open");
        let ctx = libibverbs::ibv_open_device(d);
        if ctx.is_null() {
            return Err("ibv_open_device failed".into());
        }
        mark(imp, "alloc_pd");
        let pd = libibverbs::ibv_alloc_pd(ctx);
        if pd.is_null() {
            return Err("ibv_alloc_pd failed".into());
        }
        mark(imp, "reg_mr");
        let mr = libibverbs::ibv_reg_mr(pd, buf.as_mut_ptr().cast(), REGION, acc_a);
        if mr.is_null() {
            return Err("ibv_reg_mr failed".into());
        }
        mark(imp, "rereg_access");
        // The rxe and siw providers have no rereg_mr: EOPNOTSUPP without a
        // system call, and the MR stays as it was.
        let flags = ibv::IBV_REREG_MR_CHANGE_ACCESS;
        let _ = ibv::ibv_rereg_mr(
            mr,
            flags,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            0,
            acc_b,
        );
        mark(imp, "dereg_mr");
        libibverbs::ibv_dereg_mr(mr);
        mark(imp, "dealloc_pd");
        libibverbs::ibv_dealloc_pd(pd);
        mark(imp, "context_close");
        libibverbs::ibv_close_device(ctx);
    }
    Ok(())
}

fn ours_ops(dev: &Device, buf: &mut memmap2::MmapMut) -> Result<(), String> {
    let imp = "ours";
    mark(imp, "context_open");
    let ctx = dev.open().map_err(|e| format!("open: {e}"))?;
    mark(imp, "alloc_pd");
    let pd = ctx.alloc_pd().map_err(|e| format!("alloc_pd: {e}"))?;
    mark(imp, "reg_mr");
    // SAFETY: `buf` outlives the region, dropped below.
    let mut mr = unsafe { pd.reg_mr(buf.as_mut_ptr(), REGION, ACCESS_A) }
        .map_err(|e| format!("reg_mr: {e}"))?;
    mark(imp, "rereg_access");
    // Strict: only what the in-place command sends (siw refuses it).
    // SAFETY: no TRANSLATION: no new memory reaches the device.
    let _ = unsafe {
        mr.rereg_with(
            ReregFallback::Strict,
            ReregFlags::ACCESS,
            None,
            std::ptr::null_mut(),
            0,
            ACCESS_B,
        )
    };
    mark(imp, "dereg_mr");
    mr.dereg().map_err(|e| format!("dereg_mr: {}", e.error))?;
    mark(imp, "dealloc_pd");
    pd.dealloc()
        .map_err(|e| format!("dealloc_pd: {}", e.error))?;
    mark(imp, "context_close");
    drop(ctx);
    Ok(())
}
