//! User-space instructions per `post_send` + `poll_cq` pair on rxe: this
//! crate against libibverbs' rxe provider, counted by valgrind's callgrind
//! (deterministic, unlike a clock under the VM's TCG).
//!
//! Both implementations run the same loop on a loopback-connected RC QP
//! pair of one context (RESET -> INIT -> RTR -> RTS by hand, GID index 0):
//! post one signalled 64-byte RDMA WRITE from an SGE (not inline), sleep a
//! millisecond outside the measured functions, poll once for its
//! completion (sleeping again while the poll finds nothing). callgrind
//! collects only inside the measured functions (`--toggle-collect`), each
//! inclusive of everything it calls in user space (locks, the `write`
//! wrapper of the doorbell, ...); the kernel is not counted.
//!
//! Run without `--impl` (as `cargo vm bench` does, or `cargo bench --bench
//! ops --features libibverbs-peer` on a host with rxe0) it re-runs itself
//! under callgrind once per implementation and prints one line each:
//!
//! ```text
//! @@OPS device=rxe0 impl=ours op=post_send+poll_cq ir_per_pair=… ir_total=… iters=200 posts=200 polls=200 empty_polls=0 valgrind=3.19.0
//! @@OPS device=rxe0 impl=libibverbs op=post_send+poll_cq status=error error="…"
//! ```
//!
//! Then, per implementation, the functions with the most self
//! (exclusive) instructions inside the measured ones:
//!
//! ```text
//! @@OPS-FN device=rxe0 impl=ours self_ir_per_pair=… fn=uverbs::cq::CompletionQueue::poll
//! ```
//!
//! Then, the same way, the control operations (`control.rs`): per
//! implementation one line per pair, `op=alloc_pd+dealloc_pd` and
//! `op=reg_mr+dereg_mr` (one 4 KiB page), with `ir_per_pair`.
//!
//! `posts` and `polls` are the calls callgrind saw of the measured
//! functions; `empty_polls` those of the polls that found nothing (counted
//! in the total too). Options: `--device NAME` (rxe0), `--iters N`
//! (`UVERBS_OPS_ITERS`, default 200), `--valgrind PATH`.

mod control;
#[cfg(feature = "libibverbs-peer")]
mod ibv;
mod ours;
mod profile;

use std::time::{Duration, Instant};

/// The port and GID index used (on the VM's rxe0 index 0 is the RoCE v2
/// link-local GID).
const PORT: u8 = 1;
const GID_INDEX: u32 = 0;
/// The WRITE's length and where in the buffer it lands.
const BYTES: usize = 64;
const TARGET_OFFSET: usize = 4096;
/// How long a completion may take before the run fails.
const WAIT: Duration = Duration::from_secs(10);

/// What one measured run is given.
pub struct Pair {
    device: String,
    iters: usize,
    /// Path MTU, as an IB MTU code (`enum ibv_mtu`).
    mtu: u32,
}

/// The calls the loop made of the measured functions.
#[derive(Default, Debug, Clone, Copy, PartialEq, Eq)]
pub struct Counts {
    posts: u64,
    polls: u64,
    empty_polls: u64,
}

/// Waits for the completion of WRITE `i`: sleeps ~1 ms (not measured),
/// then polls once; `poll` must find exactly one completion, else sleeps
/// again (the empty poll counted), at most [`WAIT`] in all.
pub fn wait_for_one(
    counts: &mut Counts,
    i: usize,
    mut poll: impl FnMut() -> Result<usize, String>,
) -> Result<(), String> {
    let start = Instant::now();
    loop {
        std::thread::sleep(Duration::from_millis(1));
        counts.polls += 1;
        match poll()? {
            1 => return Ok(()),
            0 => counts.empty_polls += 1,
            n => return Err(format!("WRITE {i}: poll found {n} completions, not 1")),
        }
        if start.elapsed() > WAIT {
            return Err(format!("WRITE {i}: no completion within {WAIT:?}"));
        }
    }
}

/// The marker of the result lines (tests/vm/src/bench/ops.rs reads them).
const OPS: &str = "@@OPS";
/// The marker of the per-function lines (self Ir; the name ends the line).
const OPS_FN: &str = "@@OPS-FN";
/// How many functions those lines name per implementation.
const TOP: usize = 12;
/// The child's own count, which the parent checks callgrind's against.
const CHILD: &str = "@@OPS-CHILD";

fn arg(args: &[String], name: &str) -> Option<String> {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.iter().any(|a| a == "--list") {
        return;
    }
    let device = arg(&args, "--device").unwrap_or_else(|| "rxe0".into());
    let iters = arg(&args, "--iters")
        .or_else(|| std::env::var("UVERBS_OPS_ITERS").ok())
        .and_then(|v| v.parse().ok())
        .unwrap_or(200);
    if args.iter().any(|a| a == "--control") {
        // The control operations' measured child, under callgrind.
        let imp = arg(&args, "--impl").unwrap_or_default();
        if let Err(e) = control::child(&imp, &device, iters) {
            eprintln!("ops --control: {imp}: {e}");
            std::process::exit(1);
        }
        return;
    }
    if let Some(imp) = arg(&args, "--impl") {
        // The measured child, under callgrind.
        let mtu = arg(&args, "--mtu")
            .and_then(|v| v.parse().ok())
            .unwrap_or(3);
        let pair = Pair { device, iters, mtu };
        match measured(&imp, &pair) {
            Ok(c) => println!(
                "{CHILD} posts={} polls={} empty_polls={}",
                c.posts, c.polls, c.empty_polls
            ),
            Err(e) => {
                eprintln!("ops: {imp}: {e}");
                std::process::exit(1);
            }
        }
        return;
    }
    let Some(mtu) = active_mtu(&device) else {
        println!("ops: no device {device}; nothing measured");
        return;
    };
    let valgrind = arg(&args, "--valgrind").unwrap_or_else(profile::default_valgrind);
    for imp in profile::IMPLS {
        let run = profile::run(&valgrind, imp, &device, iters, mtu);
        let line = match &run {
            Ok(r) => format!(
                "device={device} impl={} op=post_send+poll_cq ir_per_pair={:.1} ir_total={} iters={iters} posts={} polls={} empty_polls={} ir_per_post={:.1} ir_per_poll={:.1} syscalls_per_post={:.2} syscalls_per_poll={:.2} valgrind={}",
                imp.name,
                r.ir_total as f64 / iters as f64,
                r.ir_total,
                r.posts,
                r.polls,
                r.empty_polls,
                per(r.post.ir, r.posts),
                per(r.poll.ir, r.polls),
                per(r.post.syscalls, r.posts),
                per(r.poll.syscalls, r.polls),
                r.version
            ),
            Err(e) => format!(
                "device={device} impl={} op=post_send+poll_cq status=error error=\"{}\"",
                imp.name,
                e.replace('"', "'").replace('\n', " | ")
            ),
        };
        println!("{OPS} {line}");
        // Where the instructions go: the functions with the most self Ir.
        for (name, ir) in run.iter().flat_map(|r| r.top.iter().take(TOP)) {
            println!(
                "{OPS_FN} device={device} impl={} self_ir_per_pair={:.1} fn={name}",
                imp.name,
                *ir as f64 / iters as f64
            );
        }
    }
    // The control operations, beside the verbs bench's times.
    for imp in profile::IMPLS {
        control::measure(&valgrind, imp.name, &device, iters);
    }
}

/// `total / n`, 0 for no calls.
fn per(total: u64, n: u64) -> f64 {
    if n == 0 {
        0.0
    } else {
        total as f64 / n as f64
    }
}

/// The active MTU code of `device`'s port (at most 1024, as the device
/// tests use), or `None` without such a device.
fn active_mtu(device: &str) -> Option<u32> {
    let dev = uverbs::devices()
        .ok()?
        .into_iter()
        .find(|d| d.name() == device)?;
    let port = dev.open().ok()?.query_port(PORT).ok()?;
    Some(port.active_mtu.clamp(1, 3) as u32)
}

/// One implementation's measured loop on a fresh two-page buffer.
fn measured(imp: &str, pair: &Pair) -> Result<Counts, String> {
    let mut buf = vec![0u8; 2 * TARGET_OFFSET].into_boxed_slice();
    for (i, b) in buf[..BYTES].iter_mut().enumerate() {
        *b = i as u8;
    }
    let counts = match imp {
        "ours" => ours::run(pair, &mut buf)?,
        #[cfg(feature = "libibverbs-peer")]
        "libibverbs" => ibv::run(pair, &mut buf)?,
        #[cfg(not(feature = "libibverbs-peer"))]
        "libibverbs" => return Err("built without the libibverbs-peer feature".into()),
        other => return Err(format!("unknown implementation {other}")),
    };
    if buf[TARGET_OFFSET..TARGET_OFFSET + BYTES] != buf[..BYTES] {
        return Err("the WRITEs' bytes did not land".into());
    }
    Ok(counts)
}
