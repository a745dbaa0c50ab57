//! The async tax: the same traffic through the blocking [`OwnedQp`] and
//! through `uverbs::tokio`'s [`AsyncQp`], on one RC QP pair of one
//! context (rxe0: connected by hand; siw0: through the rdma_cm), in one
//! process, so the ratio is measured in one run.
//!
//! - `send_lat`, 64 B: per iteration B posts a receive and A a SEND, both
//!   come back; then the same the other way. One-way latency is half that
//!   round trip (perftest's `ib_send_lat` convention); the median is
//!   reported. Blocking: both QPs polled in a busy loop. Async: `join!` of
//!   the receive's and the send's futures on a current-thread runtime,
//!   with the CQ tasks sleeping on their channels (`async`) or polling up
//!   to 200 times before they do (`async_busy`).
//! - `write_bw`, 64 B and 64 KiB at queue depth 64: signalled WRITEs to
//!   one remote buffer, 64 outstanding at any time. Blocking: post while
//!   fewer than 64 are out, poll. Async: 64 tasks, each awaiting its
//!   writes one after the other.
//!
//! One line per measurement:
//!
//! ```text
//! @@RESULT {"kind":"async","device":"rxe0","test":"send_lat","size":64,"impl":"blocking","iters":300,"median_us":…,"p99_us":…}
//! @@RESULT {"kind":"async","device":"rxe0","test":"write_bw","size":65536,"qd":64,"impl":"async","writes":512,"mb_per_s":…}
//! @@RESULT {"kind":"async","device":"siw0","error":"…"}
//! ```
//!
//! Options: `--device NAME[,NAME…]` (rxe0,siw0), `--iters N` (300),
//! `--bw-bytes N` (16 MiB per bandwidth cell).

#[path = "../cli.rs"]
mod cli;
#[path = "../ops/cm.rs"]
mod cm;
#[path = "../result.rs"]
mod result;

use serde_json::json;
use std::sync::Arc;
use std::time::{Duration, Instant};

use uverbs::post::{Completed, Local, RecvRequest, SendRequest};
use uverbs::qp::{Mtu, QpAttr, QpState, RcConnect};
use uverbs::tokio::{AsyncCq, AsyncCqOptions, AsyncQp};
use uverbs::wr::{Remote, WcStatus};
use uverbs::{AccessFlags, BufferMr, Context, OwnedQp, ProtectionDomain, QpInit, QpType};

type Mem = BufferMr<Vec<u8>>;
type Result<T, E = String> = std::result::Result<T, E>;

const DEVICES: &str = "rxe0,siw0";
/// Where siw0's cm ids land in the VM guest (as benches/ops).
const CM_ADDRS: &[(&str, &str)] = &[("siw0", "198.51.100.1")];
const QD: usize = 64;
const BUSY_POLLS: u32 = 200;
/// The longest a blocking poll loop waits.
const WAIT: Duration = Duration::from_secs(10);
const PORT: u8 = 1;

fn main() {
    use lexopt::ValueExt;
    let (mut devices, mut iters, mut bw_bytes) = (DEVICES.to_string(), 300, 16 << 20);
    let run = cli::parse("async_tax", |name, p| {
        match name {
            "device" => devices = p.value()?.string()?,
            "iters" => iters = p.value()?.parse()?,
            "bw-bytes" => bw_bytes = p.value()?.parse()?,
            _ => return Err(cli::unknown(name)),
        }
        Ok(())
    });
    if !run {
        return;
    }
    let mut failed = false;
    for device in devices.split(',') {
        if let Err(e) = bench_device(device, iters, bw_bytes) {
            result::print("async", [json!({"device": device, "error": e})]);
            failed = true;
        }
    }
    if failed {
        std::process::exit(1);
    }
}

/// One QP of a pair, as the cm needs it.
struct CmSide<'a>(&'a OwnedQp<Mem>);

impl cm::CmQp for CmSide<'_> {
    fn qp_num(&self) -> u32 {
        self.0.qp_num()
    }
    fn modify(&self, _state: QpState, attr: &QpAttr) -> Result<(), String> {
        self.0.modify(attr).map_err(|e| format!("modify_qp: {e}"))
    }
}

/// Connects two RESET QPs of `ctx`: by hand on RoCE, through the cm where
/// `CM_ADDRS` names an address.
fn connect(ctx: &Context, a: &OwnedQp<Mem>, b: &OwnedQp<Mem>) -> Result<Option<cm::Link>> {
    let name = ctx.device_name();
    if let Some((_, addr)) = CM_ADDRS.iter().find(|(d, _)| *d == name) {
        let link = cm::connect(addr, &CmSide(a), &CmSide(b))?;
        for qp in [a, b] {
            qp.established().map_err(|e| format!("established: {e}"))?;
        }
        return Ok(Some(link));
    }
    let gid = ctx
        .query_gid(PORT, 0)
        .map_err(|e| format!("query_gid: {e}"))?;
    RcConnect::new(Mtu::Mtu1024)
        .port(PORT)
        .access(AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE)
        .connect_pair(a, b, gid)
        .map_err(|e| format!("modify_qp: {e}"))?;
    Ok(None)
}

fn open(device: &str) -> Result<Context> {
    let dev = uverbs::devices()
        .map_err(|e| format!("devices: {e}"))?
        .into_iter()
        .find(|d| d.name() == device)
        .ok_or_else(|| format!("no device {device}"))?;
    dev.open().map_err(|e| format!("open: {e}"))
}

/// Two connected owned QPs, on the given CQs.
fn owned_pair(
    ctx: &Context,
    pd: &ProtectionDomain,
    cqs: [&uverbs::CompletionQueue; 2],
) -> Result<(OwnedQp<Mem>, OwnedQp<Mem>, Option<cm::Link>)> {
    let make = |cq| -> Result<OwnedQp<Mem>> {
        let mut init = QpInit::new(QpType::Rc, cq, cq);
        init.max_send_wr = QD as u32;
        init.max_recv_wr = QD as u32;
        let qp = pd.create_qp(&init).map_err(|e| format!("create_qp: {e}"))?;
        OwnedQp::new(qp).map_err(|e| format!("OwnedQp::new: {e}"))
    };
    let (a, b) = (make(cqs[0])?, make(cqs[1])?);
    let link = connect(ctx, &a, &b)?;
    Ok((a, b, link))
}

fn buffers(pd: &ProtectionDomain, n: usize, size: usize) -> Result<Vec<Mem>> {
    (0..n)
        .map(|_| {
            pd.reg_buffer(vec![0x5a; size], AccessFlags::LOCAL_WRITE)
                .map_err(|e| format!("reg_buffer: {}", e.error))
        })
        .collect()
}

fn memory(c: Completed<Mem>) -> Result<Mem> {
    if c.status() != Some(WcStatus::Success) {
        return Err(format!("completion {:?}", c.ended));
    }
    c.into_memory().ok_or_else(|| "no memory back".into())
}

fn bench_device(device: &str, iters: usize, bw_bytes: usize) -> Result<()> {
    let ctx = open(device)?;
    let pd = ctx.alloc_pd().map_err(|e| format!("alloc_pd: {e}"))?;
    let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;
    for size in [64usize, 64 << 10] {
        let target = pd
            .reg_remote_buffer(vec![0u8; size], access)
            .map_err(|e| format!("reg_remote_buffer: {}", e.error))?;
        let remote = Remote {
            addr: target.addr(),
            rkey: target.rkey(),
        };
        let writes = (bw_bytes / size).clamp(QD * 4, 20_000);
        // Blocking.
        {
            let (cq_a, cq_b) = (create_cq(&ctx)?, create_cq(&ctx)?);
            let (a, b, _link) = owned_pair(&ctx, &pd, [&cq_a, &cq_b])?;
            if size == 64 {
                let lat = lat_blocking(&a, &b, &pd, iters)?;
                print_lat(device, "blocking", &lat);
            }
            let mbs = bw_blocking(&a, &pd, remote, size, writes)?;
            print_bw(device, "blocking", size, writes, mbs);
            drop((a, b, _link));
        }
        // Async, without and with busy polling.
        for (imp, busy) in [("async", 0), ("async_busy", BUSY_POLLS)] {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| format!("runtime: {e}"))?;
            rt.block_on(async {
                let options = AsyncCqOptions::new(2 * QD as u32).busy_poll(busy);
                let cq_a = AsyncCq::with_options(&ctx, &options).map_err(|e| format!("{e}"))?;
                let cq_b = AsyncCq::with_options(&ctx, &options).map_err(|e| format!("{e}"))?;
                let (a, b, link) = owned_pair(&ctx, &pd, [cq_a.cq(), cq_b.cq()])?;
                let a = Arc::new(AsyncQp::new(a, &[&cq_a]).map_err(|e| format!("{e}"))?);
                let b = Arc::new(AsyncQp::new(b, &[&cq_b]).map_err(|e| format!("{e}"))?);
                if size == 64 {
                    let lat = lat_async(&a, &b, &pd, iters).await?;
                    print_lat(device, imp, &lat);
                }
                let mbs = bw_async(&a, &pd, remote, size, writes).await?;
                print_bw(device, imp, size, writes, mbs);
                drop((a, b, link));
                Ok::<(), String>(())
            })?;
        }
        drop(target);
    }
    Ok(())
}

fn create_cq(ctx: &Context) -> Result<uverbs::CompletionQueue> {
    ctx.create_cq(2 * QD as u32, None)
        .map_err(|e| format!("create_cq: {e}"))
}

fn print_lat(device: &str, imp: &str, one_way_us: &[f64]) {
    let mut v = one_way_us.to_vec();
    v.sort_by(f64::total_cmp);
    let median = v[v.len() / 2];
    let p99 = v[(v.len() * 99 / 100).min(v.len() - 1)];
    let iters = v.len();
    result::print(
        "async",
        [
            json!({"device": device, "test": "send_lat", "size": 64, "impl": imp, "iters": iters, "median_us": median, "p99_us": p99}),
        ],
    );
}

fn print_bw(device: &str, imp: &str, size: usize, writes: usize, mb_per_s: f64) {
    result::print(
        "async",
        [
            json!({"device": device, "test": "write_bw", "size": size, "qd": QD, "impl": imp, "writes": writes, "mb_per_s": mb_per_s}),
        ],
    );
}

/// Polls `qp` until `n` requests are back, within [`WAIT`].
fn poll_back(qp: &OwnedQp<Mem>, done: &mut Vec<Completed<Mem>>, n: usize) -> Result<()> {
    let deadline = Instant::now() + WAIT;
    while done.len() < n {
        qp.poll(done).map_err(|e| format!("poll: {e}"))?;
        if Instant::now() > deadline {
            return Err(format!("{} of {n} completions within {WAIT:?}", done.len()));
        }
    }
    Ok(())
}

/// One message from `from` to `to`: the receive posted first.
fn exchange(
    from: &OwnedQp<Mem>,
    to: &OwnedQp<Mem>,
    msg: Mem,
    buf: Mem,
    done: &mut Vec<Completed<Mem>>,
) -> Result<(Mem, Mem)> {
    to.post_recv(RecvRequest::new(1, Local::whole(buf)))
        .map_err(|e| format!("post_recv: {}", e.error))?;
    from.post_send(SendRequest::send(2, Local::whole(msg)))
        .map_err(|e| format!("post_send: {e}"))?;
    done.clear();
    poll_back(from, done, 1)?;
    poll_back(to, done, 2)?;
    let recv = memory(done.pop().expect("two"))?;
    let sent = memory(done.pop().expect("one"))?;
    Ok((sent, recv))
}

fn lat_blocking(
    a: &OwnedQp<Mem>,
    b: &OwnedQp<Mem>,
    pd: &ProtectionDomain,
    iters: usize,
) -> Result<Vec<f64>> {
    let mut m = buffers(pd, 4, 64)?;
    let (mut ma, mut ra, mut mb, mut rb) = (m.pop(), m.pop(), m.pop(), m.pop());
    let mut done = Vec::with_capacity(4);
    let mut out = Vec::with_capacity(iters);
    for i in 0..iters + 20 {
        let t0 = Instant::now();
        let (s, r) = exchange(a, b, ma.take().unwrap(), rb.take().unwrap(), &mut done)?;
        (ma, rb) = (Some(s), Some(r));
        let (s, r) = exchange(b, a, mb.take().unwrap(), ra.take().unwrap(), &mut done)?;
        (mb, ra) = (Some(s), Some(r));
        if i >= 20 {
            out.push(t0.elapsed().as_secs_f64() * 1e6 / 2.0);
        }
    }
    Ok(out)
}

async fn lat_async(
    a: &AsyncQp<Mem>,
    b: &AsyncQp<Mem>,
    pd: &ProtectionDomain,
    iters: usize,
) -> Result<Vec<f64>> {
    let mut m = buffers(pd, 4, 64)?;
    let (mut ma, mut ra, mut mb, mut rb) = (m.pop(), m.pop(), m.pop(), m.pop());
    let mut out = Vec::with_capacity(iters);
    for i in 0..iters + 20 {
        let t0 = Instant::now();
        let (s, r) = exchange_async(a, b, ma.take().unwrap(), rb.take().unwrap()).await?;
        (ma, rb) = (Some(s), Some(r));
        let (s, r) = exchange_async(b, a, mb.take().unwrap(), ra.take().unwrap()).await?;
        (mb, ra) = (Some(s), Some(r));
        if i >= 20 {
            out.push(t0.elapsed().as_secs_f64() * 1e6 / 2.0);
        }
    }
    Ok(out)
}

/// [`exchange`] through futures: `to` posts a receive into `rx`, then
/// `from` a SEND of `msg` (posted at the calls, in that order); answers
/// both buffers once both have completed.
async fn exchange_async(
    from: &AsyncQp<Mem>,
    to: &AsyncQp<Mem>,
    msg: Mem,
    rx: Mem,
) -> Result<(Mem, Mem)> {
    let r = to
        .recv(Local::whole(rx))
        .map_err(|e| format!("recv: {}", uverbs::Error::from(e)))?;
    let s = from
        .send(Local::whole(msg))
        .map_err(|e| format!("send: {}", uverbs::Error::from(e)))?;
    let (r, s) = tokio::join!(r, s);
    let back =
        |c: Result<Completed<Mem>, uverbs::Error>| c.map_err(|e| e.to_string()).and_then(memory);
    Ok((back(s)?, back(r)?))
}

fn bw_blocking(
    a: &OwnedQp<Mem>,
    pd: &ProtectionDomain,
    remote: Remote,
    size: usize,
    writes: usize,
) -> Result<f64> {
    let mut free = buffers(pd, QD, size)?;
    let mut done = Vec::with_capacity(QD);
    let (mut posted, mut completed) = (0, 0);
    let t0 = Instant::now();
    let mut last_progress = Instant::now();
    while completed < writes {
        while posted < writes {
            let Some(buf) = free.pop() else { break };
            a.post_send(SendRequest::write(posted as u64, Local::whole(buf), remote))
                .map_err(|e| format!("post_send: {e}"))?;
            posted += 1;
        }
        done.clear();
        a.poll(&mut done).map_err(|e| format!("poll: {e}"))?;
        if !done.is_empty() {
            last_progress = Instant::now();
        } else if last_progress.elapsed() > WAIT {
            return Err(format!("write_bw: no completion within {WAIT:?}"));
        }
        for c in done.drain(..) {
            free.push(memory(c)?);
            completed += 1;
        }
    }
    Ok((writes * size) as f64 / t0.elapsed().as_secs_f64() / 1e6)
}

async fn bw_async(
    a: &Arc<AsyncQp<Mem>>,
    pd: &ProtectionDomain,
    remote: Remote,
    size: usize,
    writes: usize,
) -> Result<f64> {
    let bufs = buffers(pd, QD, size)?;
    let t0 = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for (i, buf) in bufs.into_iter().enumerate() {
        let a = a.clone();
        // Writes i, i + QD, i + 2 QD, … of the cell.
        let n = (writes + QD - 1 - i) / QD;
        tasks.spawn(async move {
            let mut buf = buf;
            for _ in 0..n {
                let done = a
                    .write(Local::whole(buf), remote)
                    .map_err(|e| e.error().to_string())?
                    .await
                    .map_err(|e| e.to_string())?;
                buf = memory(done)?;
            }
            Ok::<(), String>(())
        });
    }
    let all = tokio::time::timeout(WAIT * 6, async {
        while let Some(r) = tasks.join_next().await {
            r.map_err(|e| format!("task: {e}"))??;
        }
        Ok::<(), String>(())
    });
    all.await
        .map_err(|_| "write_bw: not done in time".to_string())??;
    Ok((writes * size) as f64 / t0.elapsed().as_secs_f64() / 1e6)
}
