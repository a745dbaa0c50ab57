//! Safe posting with `OwnedQp`: a work request owns its buffer until the
//! device is done with it, and the buffer comes back in the completion, so
//! no `unsafe` is needed and no buffer can be freed, reused or written
//! while the device may still use it.
//!
//! Two RC queue pairs of one device (connected by the connection manager,
//! `uverbs::cm::connect_pair`; rxe and siw alike) stream numbered SENDs through
//! two small pools: A's send buffers go out with each SEND and come back
//! with its completion to be filled again; B's receive buffers come back
//! with the message in them, are checked and posted again. At the end
//! B's last receives are still posted: `flush` hands them back too (as
//! flushed), and every buffer is accounted for.
//!
//! ```text
//! cargo run --example owned -- [--device rxe0] [--addr 192.0.2.1] [--count 64]
//! cargo vm demo    # runs it on rxe0 (192.0.2.1) and siw0 (198.51.100.1) in a VM
//! ```

use std::error::Error;
use std::time::{Duration, Instant};

use uverbs::post::{Ended, Local, RecvRequest, SendRequest};
use uverbs::wr::WcStatus;
use uverbs::{AccessFlags, BufferMr, Device, OwnedQp, PageBuffer, QpInit, QpType};

/// Pages of its own, not a `Vec`: under forced fork safety a registered
/// heap page is missing in a forked child, which may reuse it for anything.
type Mem = BufferMr<PageBuffer>;

/// Buffers per pool: at most this many SENDs are in flight, and as many
/// receives are posted (on iWARP a SEND that finds no receive breaks the
/// connection).
const POOL: u64 = 4;

/// The value after `name` on the command line.
fn arg(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .cloned()
}

fn main() -> Result<(), Box<dyn Error>> {
    let count: u64 = arg("--count").map_or(Ok(64), |n| n.parse())?;
    let ctx = arg("--device")
        .map_or_else(Device::first, |d| Device::by_name(&d))?
        .open()?;
    let addr = arg("--addr")
        .unwrap_or_else(|| "192.0.2.1".into())
        .parse()?;
    let (pd, cq) = (ctx.alloc_pd()?, ctx.create_cq(4 * POOL as u32, None)?);
    // Two RC QPs of this device, connected to each other through the cm.
    let init = QpInit::new(QpType::Rc, &cq, &cq);
    let a: OwnedQp<Mem> = OwnedQp::create(&pd, &init)?;
    let b: OwnedQp<Mem> = OwnedQp::create(&pd, &init)?;
    let _connection = uverbs::cm::connect_pair(&ctx, &a, &b, addr, Duration::from_secs(10))?;
    let buffer = || -> Result<Mem, Box<dyn Error>> {
        Ok(pd.reg_buffer(PageBuffer::new(4096)?, AccessFlags::LOCAL_WRITE)?)
    };
    // A's pool stays here between SENDs; B's is posted as receives at once.
    let mut free: Vec<Mem> = (0..POOL).map(|_| buffer()).collect::<Result<_, _>>()?;
    for id in 0..POOL {
        let recv = RecvRequest::new(id, Local::whole(buffer()?));
        b.post_recv(recv)?;
    }

    let (mut sent, mut received, mut done) = (0, 0, Vec::new());
    let deadline = Instant::now() + Duration::from_secs(30);
    while received < count || (free.len() as u64) < POOL {
        if Instant::now() > deadline {
            return Err(format!("{received} of {count} messages in 30 s").into());
        }
        // Fill a free buffer and hand it to the device with the SEND.
        if sent < count && sent < received + POOL {
            if let Some(mut out) = free.pop() {
                out.buffer_mut()[..8].copy_from_slice(&sent.to_le_bytes());
                a.post_send(SendRequest::send(sent, Local::slice(out, 0..8)?))?;
                sent += 1;
            }
        }
        // A's buffers come back with their SENDs' completions ...
        a.poll(&mut done)?;
        // ... and B's with the messages, which are checked and reposted.
        b.poll(&mut done)?;
        for c in done.drain(..) {
            if c.status() != Some(WcStatus::Success) {
                return Err(format!("request {}: {:?}", c.wr_id, c.ended).into());
            }
            let (is_recv, wr_id) = (c.is_recv, c.wr_id);
            let mem = c
                .into_memory()
                .ok_or("a request came back without memory")?;
            if !is_recv {
                free.push(mem);
                continue;
            }
            if mem.buffer()[..8] != received.to_le_bytes() {
                return Err(format!("message {received}: got {:?}", &mem.buffer()[..8]).into());
            }
            received += 1;
            let recv = RecvRequest::new(wr_id, Local::whole(mem));
            b.post_recv(recv)?;
        }
    }

    // B's receives are still the device's. Flushing (the QP goes to ERR)
    // completes them with WR_FLUSH_ERR, and each buffer comes back.
    b.flush(Duration::from_secs(10), &mut done)?;
    let flushed = done.iter().filter(
        |c| matches!(c.ended, Ended::Completion(wc) if wc.status() == WcStatus::WrFlushErr),
    );
    let back = flushed.count() as u64 + free.len() as u64;
    if back != 2 * POOL || b.outstanding() != (0, 0) {
        return Err(format!("{back} of {} buffers came back", 2 * POOL).into());
    }
    let name = ctx.device_name();
    println!("owned: {name}: {count} SENDs verified; all {back} buffers came back");
    Ok(())
}
