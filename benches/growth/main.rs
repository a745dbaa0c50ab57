//! Cost as the work grows, on real devices: what one control operation
//! takes while N other objects of its kind are live, ours beside
//! libibverbs (feature `libibverbs-peer`) where it has a counterpart, and
//! how many QPs a device lets one context hold.
//!
//! `cargo vm bench` runs it inside the soft-RDMA VM against rxe0 and siw0
//! and writes the growth section of docs/benchmarks.md from its lines
//! (tests/vm/src/bench/growth.rs). Three parts, per device:
//!
//! 1. **MRs**: with N − 1 one-page regions registered (every other page of
//!    one buffer, so no two touch), the time of `reg_mr` of one more page,
//!    of an ACCESS rereg of it (ours only: libibverbs' rxe and siw
//!    providers have no `rereg_mr`; siw answers `EOPNOTSUPP` and ours
//!    replaces the region, the line's `path` says so) and of its
//!    `dereg_mr`, for N = 1, 100 and 10,000. Ours runs twice, fork safety
//!    off (the default) and on (`madvise` and the fork tracker's mark and
//!    unmark on every registration).
//! 2. **QPs**: with N − 1 RC QPs live on one CQ, the time of `create_qp`
//!    and `destroy_qp` of one more (16 send and receive requests, one SGE),
//!    for N = 1, 10 and 64 (rxe also 1,000).
//! 3. **QP limit**: QPs created in one context until the device refuses
//!    one (or [`LIMIT_CAP`] stand), for several queue sizes; the count, the
//!    errno of the refusal, whether a second context of the same process
//!    gets one more, whether one more fits once one was destroyed, and the
//!    kernel's vmalloc use before and after (`/proc/meminfo`).
//!
//! ```text
//! @@RESULT {"kind":"growth","device":"rxe0","impl":"ours","fork":"off","op":"reg_mr","live":100,"median_ns":…,"p10_ns":…,"p90_ns":…,"n":101}
//! @@RESULT {"kind":"growth_limit","device":"siw0","impl":"libibverbs","max_send_wr":16,"max_recv_wr":16,"created":71,"cap":300,"errno":12,…}
//! ```
//!
//! Each time is one call, taken `UVERBS_GROWTH_SAMPLES` times (default
//! 101, QPs half as many) after one warm-up; the line has the median and
//! the 10th and 90th percentiles. `UVERBS_BENCH_DEVICES` (e.g. `rxe0`)
//! narrows the run.

#[path = "../cli.rs"]
mod cli;
#[cfg(feature = "libibverbs-peer")]
mod ibv;
#[cfg(feature = "libibverbs-peer")]
#[path = "../libibverbs.rs"]
mod libibverbs;
mod ours;
#[path = "../result.rs"]
mod result;

use std::time::Duration;

use serde_json::{json, Value};

/// The live MRs of part 1.
pub const MR_LIVE: &[usize] = &[1, 100, 10_000];
/// The live QPs of part 2 on every device; rxe adds [`QP_LIVE_RXE`].
pub const QP_LIVE: &[usize] = &[1, 10, 64];
/// The live QPs of part 2 only rxe takes (libibverbs' siw provider fails the
/// 72nd QP of a context, so siw's largest N stays 64 for both libraries).
pub const QP_LIVE_RXE: &[usize] = &[1_000];
/// The most QPs part 3 creates in one context before it stops asking.
pub const LIMIT_CAP: usize = 300;
/// The queue sizes of part 3: (max_send_wr, max_recv_wr).
///
/// On siw each ring is an mmap entry of whole pages, handed out first-fit
/// from page offset 0 of the context, and the answer's key is the entry's
/// page offset × 4096; the key 0x90000 (page 0x90) is also siw's "no
/// mapping" value, which both libraries refuse. With one one-page CQ at
/// page 0, one-page rings (1 and 16 requests) put the 72nd QP's receive
/// ring at page 0x90; a two-page send ring and a one-page receive ring
/// (64 × 16) the 48th's; 32-page rings (1,024) never start there.
pub const LIMIT_SIZES: &[(u32, u32)] = &[(1, 1), (16, 16), (64, 16), (1024, 1024)];
/// The send and receive requests of part 2's QPs.
pub const QP_DEPTH: u32 = 16;
/// The page every region covers.
pub const PAGE: usize = 4096;
/// The devices measured without `UVERBS_BENCH_DEVICES`.
const DEVICES: &[&str] = &["rxe0", "siw0"];

/// The samples per cell.
pub fn samples() -> usize {
    std::env::var("UVERBS_GROWTH_SAMPLES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(101)
        .max(3)
}

/// Median and 10th and 90th percentiles of `times`, as result fields.
pub fn summary(times: &mut [Duration]) -> Value {
    times.sort_unstable();
    let at = |q: f64| {
        let i = ((times.len() - 1) as f64 * q).round() as usize;
        times[i].as_nanos() as u64
    };
    json!({"median_ns": at(0.5), "p10_ns": at(0.1), "p90_ns": at(0.9), "n": times.len()})
}

/// Prints one `growth` line: `key`'s fields and the summary of `times`, or
/// the error.
pub fn report(key: Value, times: Result<Vec<Duration>, String>) {
    let fields = match times {
        Ok(mut t) if !t.is_empty() => summary(&mut t),
        Ok(_) => json!({"error": "no samples"}),
        Err(e) => json!({ "error": e }),
    };
    result::print("growth", [key, fields]);
}

/// The times of one MR cell: reg, rereg and dereg of one page.
#[derive(Default)]
pub struct MrTimes {
    pub reg: Vec<Duration>,
    pub rereg: Vec<Duration>,
    pub dereg: Vec<Duration>,
    /// The rereg's path (ours): `inplace`, `replaced` or `mixed`.
    pub path: Option<&'static str>,
}

/// Prints the lines of one MR cell.
pub fn report_mrs(device: &str, imp: &str, fork: &str, live: usize, r: Result<MrTimes, String>) {
    let key =
        |op: &str| json!({"device": device, "impl": imp, "fork": fork, "op": op, "live": live});
    match r {
        Ok(t) => {
            report(key("reg_mr"), Ok(t.reg));
            if !t.rereg.is_empty() {
                let mut k = key("rereg_access");
                if let (Some(p), Value::Object(m)) = (t.path, &mut k) {
                    m.insert("path".into(), p.into());
                }
                report(k, Ok(t.rereg));
            }
            report(key("dereg_mr"), Ok(t.dereg));
        }
        Err(e) => report(key("reg_mr"), Err(e)),
    }
}

/// Prints the lines of one QP cell: create and destroy.
pub fn report_qps(device: &str, imp: &str, live: usize, r: Result<[Vec<Duration>; 2], String>) {
    let key =
        |op: &str| json!({"device": device, "impl": imp, "fork": "off", "op": op, "live": live});
    match r {
        Ok([create, destroy]) => {
            report(key("create_qp"), Ok(create));
            report(key("destroy_qp"), Ok(destroy));
        }
        Err(e) => report(key("create_qp"), Err(e)),
    }
}

/// What part 3 found for one implementation and queue size.
pub struct Limit {
    /// QPs created before the refusal (or the cap).
    pub created: usize,
    /// The refusal's errno, none when the cap was reached first.
    pub errno: Option<i32>,
    /// One more QP in a second context of this process: `ok` or the errno.
    pub other_context: String,
    /// One more QP in the first context once one of its QPs was destroyed.
    pub after_destroy: String,
}

/// The kernel's vmalloc use in KiB (`/proc/meminfo`'s `VmallocUsed`).
pub fn vmalloc_kib() -> Option<u64> {
    let m = std::fs::read_to_string("/proc/meminfo").ok()?;
    m.lines()
        .find_map(|l| l.strip_prefix("VmallocUsed:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

/// Prints one `growth_limit` line.
pub fn report_limit(
    device: &str,
    imp: &str,
    (send, recv): (u32, u32),
    f: impl FnOnce() -> Result<Limit, String>,
) {
    let before = vmalloc_kib();
    let r = f();
    let key = json!({"device": device, "impl": imp, "max_send_wr": send, "max_recv_wr": recv, "cap": LIMIT_CAP});
    let fields = match r {
        Ok(l) => json!({
            "created": l.created,
            "errno": l.errno,
            "other_context": l.other_context,
            "after_destroy": l.after_destroy,
            "vmalloc_kib_before": before,
            "vmalloc_kib_at_limit": l_vmalloc(),
        }),
        Err(e) => json!({ "error": e }),
    };
    result::print("growth_limit", [key, fields]);
}

/// The vmalloc use read while the QPs of a limit run are still live (set
/// by the run just before it lets them go).
static AT_LIMIT: std::sync::Mutex<Option<u64>> = std::sync::Mutex::new(None);

/// Records the vmalloc use at the limit.
pub fn note_vmalloc_at_limit() {
    *AT_LIMIT.lock().unwrap_or_else(|e| e.into_inner()) = vmalloc_kib();
}

fn l_vmalloc() -> Option<u64> {
    AT_LIMIT.lock().unwrap_or_else(|e| e.into_inner()).take()
}

/// `ok`, or the errno as text, for [`Limit`]'s two follow-up attempts.
pub fn outcome(r: Result<(), Option<i32>>) -> String {
    match r {
        Ok(()) => "ok".into(),
        Err(Some(e)) => format!("errno {e}"),
        Err(None) => "failed without an errno".into(),
    }
}

fn main() {
    if !cli::parse("growth", |name, _| Err(cli::unknown(name))) {
        return;
    }
    let wanted = std::env::var("UVERBS_BENCH_DEVICES").ok();
    let present = match uverbs::devices() {
        Ok(d) => d,
        Err(e) => {
            eprintln!("growth: listing devices: {e}");
            std::process::exit(1);
        }
    };
    let devices: Vec<&str> = DEVICES
        .iter()
        .copied()
        .filter(|d| {
            wanted
                .as_deref()
                .map_or(true, |w| w.split(',').any(|x| x == *d))
        })
        .filter(|d| present.iter().any(|p| p.name() == *d))
        .collect();
    if devices.is_empty() {
        println!("growth: none of {DEVICES:?} present; nothing measured");
        return;
    }
    let n = samples();
    for device in devices {
        // One throwaway cell per implementation first: the first context of
        // a device in a process pays for what later ones find warm.
        let _ = ours::mrs(device, 1, false, 10);
        #[cfg(feature = "libibverbs-peer")]
        let _ = ibv::mrs(device, 1, 10);
        let _ = ours::qps(device, 1, 5);
        #[cfg(feature = "libibverbs-peer")]
        let _ = ibv::qps(device, 1, 5);
        for &live in MR_LIVE {
            for fork in ["off", "on"] {
                report_mrs(
                    device,
                    "ours",
                    fork,
                    live,
                    ours::mrs(device, live, fork == "on", n),
                );
            }
            #[cfg(feature = "libibverbs-peer")]
            report_mrs(device, "libibverbs", "off", live, ibv::mrs(device, live, n));
        }
        let extra = if device.starts_with("rxe") {
            QP_LIVE_RXE
        } else {
            &[]
        };
        for &live in QP_LIVE.iter().chain(extra) {
            report_qps(device, "ours", live, ours::qps(device, live, n / 2));
            #[cfg(feature = "libibverbs-peer")]
            report_qps(device, "libibverbs", live, ibv::qps(device, live, n / 2));
        }
        for &size in LIMIT_SIZES {
            report_limit(device, "ours", size, || ours::limit(device, size));
            #[cfg(feature = "libibverbs-peer")]
            report_limit(device, "libibverbs", size, || ibv::limit(device, size));
        }
    }
}
