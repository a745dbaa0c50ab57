//! User-space instructions per data-path operation on rxe and siw: this
//! crate against libibverbs' providers (`librxe`, `libsiw`), counted by
//! valgrind's callgrind (deterministic, unlike a clock under the VM's TCG).
//!
//! Both implementations run the same loops on an RC QP pair of one
//! context, A sending to B (rxe: RESET -> INIT -> RTR -> RTS by hand, GID
//! index 0; siw: through the rdma_cm, `cm.rs`, the only way an iWARP QP
//! reaches RTS). One loop per case ([`Case`]), `iters` iterations each:
//!
//! 1. `post_send+poll_cq`: post one signalled 64-byte RDMA WRITE from an
//!    SGE (not inline), poll A's CQ for its completion;
//! 2. `write_batch4`: post 4 such WRITEs (to 4 slots) in one `post_send`,
//!    only the last signalled (siw: all 4, as siw wants every request
//!    signalled), poll until the signalled completions are in;
//! 3. `send_recv`: `post_recv` one 64-byte receive on B, `post_send` one
//!    signalled 64-byte SEND from an SGE on A, poll A's CQ for the SEND,
//!    then B's for the receive;
//! 4. `inline_send`: post one signalled 64-byte SEND with its bytes inline
//!    on A and poll A's CQ for it. B's receives (one per iteration, each
//!    into a slot of its own) are posted before the loop and never polled:
//!    only the sender's `post_send` and poll are measured;
//! 5. `read`: post one signalled 64-byte RDMA READ of B's source into an
//!    SGE on A (slot 0), poll A's CQ for its completion;
//! 6. `write_gather2`: case 1 with the WRITE's 64 bytes gathered from two
//!    SGEs of 32 (the QPs take two send SGEs).
//!
//! Each wait sleeps 5 ms outside the measured functions before it polls
//! (sleeping 1 ms again while the poll does not find all, at most
//! [`WAIT`] in all). callgrind collects only inside the measured functions
//! (`--toggle-collect`, the names in profile.rs), each inclusive of
//! everything it calls in user space (locks, the `write` wrapper of the
//! doorbell, ...); the kernel is not counted. Every case runs in a
//! callgrind run of its own.
//!
//! Run without `--impl` (as `cargo vm bench` does, or `cargo bench -p uverbs-bench --bench
//! ops --features libibverbs-peer` on a host with the devices) it re-runs
//! itself under callgrind once per device, case and implementation, and
//! prints one line each:
//!
//! ```text
//! @@RESULT {"kind":"ops","device":"rxe0","impl":"ours","op":"post_send+poll_cq","ir_per_iter":…,"ir_total":…,"iters":200,"posts":200,"polls":200,"empty_polls":0,"ir_per_post":…,"ir_per_poll":…,"syscalls_per_post":…,"syscalls_per_poll":…,"wrs_per_post":1,"signalled_per_post":1,"valgrind":"3.19.0"}
//! @@RESULT {"kind":"ops","device":"rxe0","impl":"ours","op":"send_recv",…,"post_recvs":200,"ir_per_post_recv":…,"syscalls_per_post_recv":…}
//! @@RESULT {"kind":"ops","device":"siw0","impl":"libibverbs","op":"write_batch4","error":"…"}
//! ```
//!
//! `ir_per_iter` is the total ÷ the iterations; `ir_per_post`, `ir_per_poll` and
//! `ir_per_post_recv` are each function's calls' inclusive Ir ÷ their
//! number. Then, per device and implementation, case 1's functions with the
//! most self (exclusive) instructions inside the measured ones:
//!
//! ```text
//! @@RESULT {"kind":"ops_fn","device":"rxe0","impl":"ours","self_ir_per_pair":…,"fn":"uverbs::cq::fast_poll"}
//! ```
//!
//! Then, the same way on the first device, the control operations
//! (`control.rs`): per implementation one line per pair,
//! `alloc_pd+dealloc_pd` and `reg_mr+dereg_mr` (one 4 KiB page), with
//! `ir_per_pair`.
//!
//! `posts`, `polls` and `post_recvs` are the calls callgrind saw of the
//! measured functions (checked against the loop's own count);
//! `empty_polls` those of the polls that found nothing (counted in the
//! total too). Options: `--device NAME[,NAME…]` (rxe0,siw0), `--iters N`
//! (`UVERBS_OPS_ITERS`, default 200), `--valgrind PATH`, `--cm ADDR` (the
//! address whose cm ids land on an iWARP device; siw0: 198.51.100.1, the
//! VM guest's dummy1).

#[path = "../cli.rs"]
mod cli;
mod cm;
mod control;
#[cfg(feature = "libibverbs-peer")]
mod ibv;
#[cfg(feature = "libibverbs-peer")]
#[path = "../libibverbs.rs"]
mod libibverbs;
mod ours;
mod profile;
#[path = "../result.rs"]
mod result;

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use uverbs::qp::Mtu;

/// The port and GID index used (on the VM's rxe0 index 0 is the RoCE v2
/// link-local GID).
const PORT: u8 = 1;
const GID_INDEX: u32 = 0;
/// The length of every WRITE, SEND and receive, and where in the buffer
/// they land: slot `k` is `BYTES` bytes at `TARGET_OFFSET + k * BYTES`
/// (64-byte slots of a page-aligned buffer: none crosses a page).
const BYTES: usize = 64;
const TARGET_OFFSET: usize = 4096;
/// WRITEs per `post_send` of case 2.
const BATCH: usize = 4;
/// How long a completion (or a WRITE's bytes) may take before the run
/// fails.
const WAIT: Duration = Duration::from_secs(10);
/// The devices measured without `--device`.
const DEVICES: &str = "rxe0,siw0";
/// The address whose cm ids land on an iWARP device, per device name, in
/// the VM guest (siw0 on dummy1; benches/datapath uses the same).
const CM_ADDRS: &[(&str, &str)] = &[("siw0", "198.51.100.1")];

/// One measured loop (the module docs describe each).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Case {
    Write,
    WriteBatch,
    SendRecv,
    InlineSend,
    Read,
    WriteGather2,
}

impl Case {
    pub const ALL: [Case; 6] = [
        Case::Write,
        Case::WriteBatch,
        Case::SendRecv,
        Case::InlineSend,
        Case::Read,
        Case::WriteGather2,
    ];

    /// Its `op=` in the result lines (case 1 keeps the name it always had).
    pub fn op(self) -> &'static str {
        match self {
            Case::Write => "post_send+poll_cq",
            Case::WriteBatch => "write_batch4",
            Case::SendRecv => "send_recv",
            Case::InlineSend => "inline_send",
            Case::Read => "read",
            Case::WriteGather2 => "write_gather2",
        }
    }

    fn from_op(op: &str) -> Option<Case> {
        Case::ALL.into_iter().find(|c| c.op() == op)
    }

    /// Work requests per `post_send`.
    pub fn wrs(self) -> usize {
        match self {
            Case::WriteBatch => BATCH,
            _ => 1,
        }
    }

    /// Of those, the signalled ones: all on iWARP, else only the last.
    pub fn signalled(self, iwarp: bool) -> usize {
        if iwarp {
            self.wrs()
        } else {
            1
        }
    }

    /// Send SGEs the QPs take: two for case 6.
    pub fn send_sges(self) -> u32 {
        if self == Case::WriteGather2 {
            2
        } else {
            1
        }
    }

    /// Whether `post_recv` is among the measured functions.
    pub fn measures_post_recv(self) -> bool {
        self == Case::SendRecv
    }

    /// The target slots the loop writes (checked after it).
    fn slots(self, iters: usize) -> usize {
        match self {
            Case::WriteBatch => BATCH,
            Case::InlineSend => iters,
            _ => 1,
        }
    }
}

/// What one measured run is given.
pub struct Pair {
    device: String,
    iters: usize,
    /// Path MTU.
    mtu: Mtu,
    case: Case,
    /// The cm address of an iWARP device: connect through the rdma_cm
    /// and signal every request. `None`: RoCE, connected by hand.
    cm: Option<String>,
}

impl Pair {
    fn iwarp(&self) -> bool {
        self.cm.is_some()
    }
}

/// The calls the loop made of the measured functions.
#[derive(Default, Debug, Clone, Copy, PartialEq, Eq)]
pub struct Counts {
    posts: u64,
    polls: u64,
    empty_polls: u64,
    /// Measured `post_recv` calls (case 3 only).
    post_recvs: u64,
}

/// How long a wait sleeps before its first poll: long enough that the
/// completions are usually in (rxe's come back through the kernel's
/// loopback, slower while the VM's host is busy), so that few polls find
/// nothing and the counts stay alike from run to run.
const FIRST_SLEEP: Duration = Duration::from_millis(5);
/// How long it sleeps before each further poll.
const NEXT_SLEEP: Duration = Duration::from_millis(1);

/// Waits for `want` completions of `what` (iteration `i`): sleeps
/// [`FIRST_SLEEP`] (not measured), then polls once with `poll(got)`, which
/// polls for at most `want - got` completions into the slots from `got` on
/// and returns how many it found; sleeps [`NEXT_SLEEP`] and polls again
/// while they are not all in (an empty poll counted), at most [`WAIT`] in
/// all.
pub fn wait_for(
    counts: &mut Counts,
    what: &str,
    i: usize,
    want: usize,
    mut poll: impl FnMut(usize) -> Result<usize, String>,
) -> Result<(), String> {
    let start = Instant::now();
    let mut got = 0;
    let mut sleep = FIRST_SLEEP;
    loop {
        std::thread::sleep(sleep);
        sleep = NEXT_SLEEP;
        counts.polls += 1;
        match poll(got)? {
            0 => counts.empty_polls += 1,
            n if got + n > want => {
                return Err(format!(
                    "{what} {i}: poll found {n} completions, {} were due",
                    want - got
                ))
            }
            n => got += n,
        }
        if got == want {
            return Ok(());
        }
        if start.elapsed() > WAIT {
            return Err(format!(
                "{what} {i}: {got} of {want} completions within {WAIT:?}"
            ));
        }
    }
}

/// The 64 bytes SEND or WRITE `i` carries into its slot: byte `j` is
/// `j + i` (mod 256). The buffer's source holds `pattern(0)`.
pub fn pattern(i: usize) -> [u8; BYTES] {
    std::array::from_fn(|j| (j + i) as u8)
}

/// The buffer one run registers: the source at 0, the slots from
/// [`TARGET_OFFSET`] on, whole pages.
fn buffer_len(case: Case, iters: usize) -> usize {
    TARGET_OFFSET + (case.slots(iters) * BYTES).div_ceil(4096) * 4096
}

/// Checks that every slot of the case holds its bytes, waiting (bounded)
/// for bytes still on their way: a siw WRITE completes once it has left.
/// Called with the QPs still up.
pub fn landed(pair: &Pair, buf: &[u8]) -> Result<(), String> {
    let start = Instant::now();
    for slot in 0..pair.case.slots(pair.iters) {
        // Inline SEND i carries pattern(i) into slot i; everything else
        // carries the source's pattern(0).
        let want = pattern(if pair.case == Case::InlineSend {
            slot
        } else {
            0
        });
        let at = TARGET_OFFSET + slot * BYTES;
        let read = || -> Vec<u8> {
            buf[at..at + BYTES]
                .iter()
                // SAFETY: a reference into `buf`, read volatile because the
                // device may still write it behind the compiler's back.
                .map(|b| unsafe { std::ptr::read_volatile(b) })
                .collect()
        };
        while read() != want {
            if start.elapsed() > WAIT {
                return Err(format!(
                    "{}: slot {slot} holds {:?}, not the bytes sent, after {WAIT:?}",
                    pair.case.op(),
                    read()
                ));
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    Ok(())
}

/// How many functions those lines name per implementation.
const TOP: usize = 12;
/// The child's own count, which the parent checks callgrind's against.
const CHILD: &str = "@@OPS-CHILD";

fn main() {
    use lexopt::ValueExt;
    let (mut devices, mut iters, mut control, mut imp) = (DEVICES.to_string(), None, false, None);
    let (mut mtu, mut case, mut cm, mut valgrind) = (Mtu::Mtu1024, Case::Write, None, None);
    let run = cli::parse("ops", |name, p| {
        match name {
            "device" => devices = p.value()?.string()?,
            "iters" => iters = Some(p.value()?.parse()?),
            "control" => control = true,
            "impl" => imp = Some(p.value()?.string()?),
            "mtu" => {
                let raw = |v: &str| v.parse().ok().and_then(Mtu::from_raw).ok_or("not an MTU");
                mtu = p.value()?.parse_with(raw)?;
            }
            "case" => {
                let op = |v: &str| Case::from_op(v).ok_or("not a case");
                case = p.value()?.parse_with(op)?;
            }
            "cm" => cm = Some(p.value()?.string()?),
            "valgrind" => valgrind = Some(p.value()?.string()?),
            _ => return Err(cli::unknown(name)),
        }
        Ok(())
    });
    if !run {
        return;
    }
    let iters = iters
        .or_else(|| std::env::var("UVERBS_OPS_ITERS").ok()?.parse().ok())
        .unwrap_or(200);
    if control {
        // The control operations' measured child, under callgrind.
        let imp = imp.unwrap_or_default();
        if let Err(e) = control::child(&imp, &devices, iters) {
            eprintln!("ops --control: {imp}: {e}");
            std::process::exit(1);
        }
        return;
    }
    if let Some(imp) = imp {
        // The measured child, under callgrind.
        let pair = Pair {
            device: devices,
            iters,
            mtu,
            case,
            cm,
        };
        match measured(&imp, &pair) {
            Ok(c) => println!(
                "{CHILD} posts={} polls={} empty_polls={} post_recvs={}",
                c.posts, c.polls, c.empty_polls, c.post_recvs
            ),
            Err(e) => {
                eprintln!("ops: {imp}: {}: {e}", pair.case.op());
                std::process::exit(1);
            }
        }
        return;
    }
    let valgrind = valgrind.unwrap_or_else(profile::default_valgrind);
    let mut first = None;
    for device in devices.split(',').filter(|d| !d.is_empty()) {
        measure_device(&valgrind, device, iters, cm.clone());
        first.get_or_insert(device);
    }
    // The control operations, beside the verbs bench's times (first
    // device only).
    if let Some(device) = first.filter(|d| setup(d, None).is_ok()) {
        // Control operations have no exclusive variant.
        for imp in profile::IMPLS.iter().filter(|i| i.name != "ours-exclusive") {
            control::measure(&valgrind, imp.name, device, iters);
        }
    }
}

/// How a device is driven: its driver's name (for the provider's
/// symbols), its path MTU and, on iWARP, its cm address.
struct Setup {
    driver: &'static str,
    mtu: Mtu,
    cm: Option<String>,
}

/// `device`'s [`Setup`]: its active MTU (at most 1024, as the device tests
/// use), its driver, and on siw the cm address (`cm`, else [`CM_ADDRS`]).
fn setup(device: &str, cm: Option<String>) -> Result<Setup, String> {
    let dev = uverbs::devices()
        .map_err(|e| format!("listing devices: {e}"))?
        .into_iter()
        .find(|d| d.name() == device)
        .ok_or_else(|| format!("no device {device}"))?;
    let ctx = dev.open().map_err(|e| format!("opening {device}: {e}"))?;
    let port = ctx
        .query_port(PORT)
        .map_err(|e| format!("query_port {device} {PORT}: {e}"))?;
    // At most 1024 (the child gets the `enum ibv_mtu` code).
    let mtu = port
        .active_mtu()
        .map_or(Mtu::Mtu1024, |mtu| mtu.min(Mtu::Mtu1024));
    let driver = match ctx.driver_id() {
        Some(uverbs::device::DriverId::RXE) => "rxe",
        Some(uverbs::device::DriverId::SIW) => "siw",
        _ => "other",
    };
    let cm =
        if driver == "siw" {
            let known = CM_ADDRS
                .iter()
                .find(|(d, _)| *d == device)
                .map(|(_, a)| a.to_string());
            Some(cm.or(known).ok_or_else(|| {
                format!("{device} is iWARP: no cm address for it (pass --cm ADDR)")
            })?)
        } else {
            None
        };
    Ok(Setup { driver, mtu, cm })
}

/// Every case of every implementation on `device`, one callgrind run each,
/// and case 1's per-function lines.
fn measure_device(valgrind: &str, device: &str, iters: usize, cm: Option<String>) {
    let setup = setup(device, cm);
    for case in Case::ALL {
        for imp in profile::IMPLS {
            let run = setup
                .as_ref()
                .map_err(|e| e.clone())
                .and_then(|s| profile::run(valgrind, imp, case, device, s, iters));
            let fields = match &run {
                Ok(r) => {
                    result_fields(case, r, iters, setup.as_ref().is_ok_and(|s| s.cm.is_some()))
                }
                Err(e) => json!({ "error": e }),
            };
            let key = json!({"device": device, "impl": imp.name, "op": case.op()});
            result::print("ops", [key, fields]);
            if case != Case::Write {
                continue;
            }
            // Where case 1's instructions go: the functions with the most
            // self Ir.
            for (name, ir) in run.iter().flat_map(|r| r.top.iter().take(TOP)) {
                let self_ir_per_pair = *ir as f64 / iters as f64;
                let f = json!({"device": device, "impl": imp.name, "self_ir_per_pair": self_ir_per_pair, "fn": name});
                result::print("ops_fn", [f]);
            }
        }
    }
}

/// The numbers of a measured case's result.
fn result_fields(case: Case, r: &profile::Measured, iters: usize, iwarp: bool) -> Value {
    let mut f = json!({
        "ir_per_iter": r.ir_total as f64 / iters as f64,
        "ir_total": r.ir_total,
        "iters": iters,
        "posts": r.posts,
        "polls": r.polls,
        "empty_polls": r.empty_polls,
        "ir_per_post": per(r.post.ir, r.posts),
        "ir_per_poll": per(r.poll.ir, r.polls),
        "syscalls_per_post": per(r.post.syscalls, r.posts),
        "syscalls_per_poll": per(r.poll.syscalls, r.polls),
        "wrs_per_post": case.wrs(),
        "signalled_per_post": case.signalled(iwarp),
        "valgrind": r.version,
    });
    if case.measures_post_recv() {
        f["post_recvs"] = r.post_recvs.into();
        f["ir_per_post_recv"] = per(r.post_recv.ir, r.post_recvs).into();
        f["syscalls_per_post_recv"] = per(r.post_recv.syscalls, r.post_recvs).into();
    }
    f
}

/// `total / n`, 0 for no calls.
fn per(total: u64, n: u64) -> f64 {
    if n == 0 {
        0.0
    } else {
        total as f64 / n as f64
    }
}

/// One implementation's measured loop on a fresh page-aligned buffer.
fn measured(imp: &str, pair: &Pair) -> Result<Counts, String> {
    let len = buffer_len(pair.case, pair.iters);
    let mut storage = vec![0u8; len + 4096];
    let at = storage.as_ptr().align_offset(4096);
    let buf = &mut storage[at..at + len];
    buf[..BYTES].copy_from_slice(&pattern(0));
    match imp {
        "ours" => ours::run(pair, buf, false),
        "ours-exclusive" => ours::run(pair, buf, true),
        #[cfg(feature = "libibverbs-peer")]
        "libibverbs" => ibv::run(pair, buf),
        #[cfg(not(feature = "libibverbs-peer"))]
        "libibverbs" => Err("built without the libibverbs-peer feature".into()),
        other => Err(format!("unknown implementation {other}")),
    }
}
