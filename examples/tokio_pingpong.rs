//! SEND ping-pong over the RDMA connection manager, async on tokio
//! (`--features tokio`): a server and a client in one process, each with
//! its own cm channel, device context and queue pair, connected through
//! the kernel's rdma_cm at ADDR (rxe: RoCE; siw: iWARP).
//!
//! ```text
//! cargo run --features tokio --example tokio_pingpong -- [--addr 192.0.2.1] [--port 7471] [--iters 100] [--busy-poll N]
//! ```
//!
//! Each side posts its first receive before connecting (its QP in INIT),
//! and always posts the next receive before the send the peer answers: on
//! iWARP a SEND that finds no receive breaks the connection. Every wait is
//! bounded (`tokio::time::timeout`). Prints one line with the median round
//! trip; exits non-zero on any failure.

use std::error::Error;
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use memmap2::MmapMut;
use uverbs::cm::ConnParam;
use uverbs::post::Local;
use uverbs::qp::QpState;
use uverbs::tokio::cm::{AsyncCmId, AsyncEventChannel};
use uverbs::tokio::{AsyncCq, AsyncCqOptions, AsyncQp, CompletionFuture};
use uverbs::wr::WcStatus;
use uverbs::{AccessFlags, BufferMr, Context, OwnedQp, ProtectionDomain, QpInit, QpType};

type Result<T, E = Box<dyn Error>> = std::result::Result<T, E>;
/// A mapping, not a Vec: under forced fork safety a registered heap range
/// is not inherited by a forked child, and the child's allocator may need it.
type Mem = BufferMr<MmapMut>;

const WAIT: Duration = Duration::from_secs(20);
const SIZE: usize = 64;

struct Options {
    addr: IpAddr,
    port: u16,
    iters: usize,
    busy_poll: u32,
}

fn options() -> Result<Options> {
    use lexopt::prelude::*;
    let mut o = Options {
        addr: "192.0.2.1".parse()?,
        port: 7471,
        iters: 100,
        busy_poll: 0,
    };
    let mut p = lexopt::Parser::from_env();
    while let Some(arg) = p.next()? {
        match arg {
            Long("addr") => o.addr = p.value()?.parse()?,
            Long("port") => o.port = p.value()?.parse()?,
            Long("iters") => o.iters = p.value()?.parse()?,
            Long("busy-poll") => o.busy_poll = p.value()?.parse()?,
            _ => return Err(arg.unexpected().into()),
        }
    }
    Ok(o)
}

/// What one side holds: fields drop in order (the QP before its CQ, PD and
/// context).
struct Side {
    qp: AsyncQp<Mem>,
    _cq: AsyncCq,
    pd: ProtectionDomain,
    ctx: Context,
}

/// A context on the device `id` landed on, a CQ with its completion task,
/// and a QP moved to INIT with what the cm answers, so receives can be
/// posted before the connection is up.
fn side(id: &AsyncCmId, busy_poll: u32) -> Result<Side> {
    let dev = id
        .matching_devices(&uverbs::devices()?)?
        .into_iter()
        .next()
        .ok_or("no device for the cm id")?;
    let ctx = dev.open()?;
    let pd = ctx.alloc_pd()?;
    let cq = AsyncCq::with_options(&ctx, &AsyncCqOptions::new(16).busy_poll(busy_poll))?;
    let qp = OwnedQp::new(pd.create_qp(&QpInit::new(QpType::Rc, cq.cq(), cq.cq()))?)?;
    qp.modify(&id.init_qp_attr(QpState::Init)?)?;
    let qp = AsyncQp::new(qp, &[&cq])?;
    Ok(Side {
        qp,
        _cq: cq,
        pd,
        ctx,
    })
}

fn buffer(pd: &ProtectionDomain) -> Result<Mem> {
    Ok(pd.reg_buffer(MmapMut::map_anon(SIZE)?, AccessFlags::LOCAL_WRITE)?)
}

/// The memory of a request that must have succeeded.
async fn done(future: CompletionFuture<Mem>, what: &str) -> Result<Mem> {
    let completed = tokio::time::timeout(WAIT, future)
        .await
        .map_err(|_| format!("{what}: no completion within {WAIT:?}"))??;
    if completed.status() != Some(WcStatus::Success) {
        return Err(format!("{what}: {:?}", completed.ended).into());
    }
    Ok(completed.into_memory().ok_or("no memory back")?)
}

async fn server(ch: &AsyncEventChannel, at: SocketAddr, iters: usize, busy: u32) -> Result<()> {
    let listener = ch.listen(at, 1)?;
    let request = tokio::time::timeout(WAIT, listener.accept()).await??;
    let side = side(request.id(), busy)?;
    let mut recv = Some(side.qp.recv(Local::whole(buffer(&side.pd)?))?);
    let param = ConnParam::new(side.qp.qp_num());
    let (conn, _) = tokio::time::timeout(WAIT, request.accept(&side.qp, param)).await??;
    let mut out = buffer(&side.pd)?;
    for i in 0..iters {
        let mut ping = done(recv.take().ok_or("no receive")?, "server receive").await?;
        if ping.buffer()[..8] != (i as u64).to_le_bytes() {
            return Err(format!("server: ping {i} carries {:?}", &ping.buffer()[..8]).into());
        }
        out.buffer_mut()[..8].copy_from_slice(&ping.buffer()[..8]);
        // The next receive before the pong the client answers.
        if i + 1 < iters {
            ping.buffer_mut().fill(0);
            recv = Some(side.qp.recv(Local::whole(ping))?);
        }
        out = done(side.qp.send(Local::whole(out))?, "server send").await?;
    }
    tokio::time::timeout(WAIT, conn.disconnect()).await??;
    Ok(())
}

async fn client(
    ch: &AsyncEventChannel,
    to: SocketAddr,
    iters: usize,
    busy: u32,
) -> Result<Vec<f64>> {
    let id = tokio::time::timeout(WAIT, ch.resolve(to, Duration::from_secs(2))).await??;
    let side = side(&id, busy)?;
    let mut recv = Some(side.qp.recv(Local::whole(buffer(&side.pd)?))?);
    let param = ConnParam::new(side.qp.qp_num());
    let (conn, _) = tokio::time::timeout(WAIT, id.connect(&side.qp, param)).await??;
    println!(
        "tokio_pingpong: {} connected to {to} over the cm",
        side.ctx.device_name()
    );
    let (mut out, mut rtts) = (buffer(&side.pd)?, Vec::with_capacity(iters));
    for i in 0..iters {
        let t0 = Instant::now();
        out.buffer_mut()[..8].copy_from_slice(&(i as u64).to_le_bytes());
        let sent = side.qp.send(Local::whole(out))?; // posted now
        let mut pong = done(recv.take().ok_or("no receive")?, "client receive").await?;
        out = done(sent, "client send").await?;
        rtts.push(t0.elapsed().as_secs_f64() * 1e6);
        if pong.buffer()[..8] != (i as u64).to_le_bytes() {
            return Err(format!("client: pong {i} carries {:?}", &pong.buffer()[..8]).into());
        }
        // The next receive before the next ping, which the server answers.
        if i + 1 < iters {
            pong.buffer_mut().fill(0);
            recv = Some(side.qp.recv(Local::whole(pong))?);
        }
    }
    tokio::time::timeout(WAIT, conn.disconnect()).await??;
    Ok(rtts)
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<()> {
    let o = options()?;
    let at = SocketAddr::new(o.addr, o.port);
    // One channel each, as two programs would have.
    let (server_ch, client_ch) = (AsyncEventChannel::open()?, AsyncEventChannel::open()?);
    let (served, rtts) = tokio::join!(
        server(&server_ch, at, o.iters, o.busy_poll),
        client(&client_ch, at, o.iters, o.busy_poll)
    );
    served.map_err(|e| format!("server: {e}"))?;
    let mut rtts = rtts.map_err(|e| format!("client: {e}"))?;
    rtts.sort_by(f64::total_cmp);
    let median = rtts.get(rtts.len() / 2).copied().unwrap_or(f64::NAN);
    println!(
        "tokio_pingpong: {} round trips of {SIZE} B over {at}: median {median:.1} us (busy poll {})",
        rtts.len(),
        o.busy_poll
    );
    Ok(())
}
