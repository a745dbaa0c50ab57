//! Completions by event instead of busy polling: a completion channel, a
//! CQ that reports to it once armed (`req_notify`), a bounded wait for the
//! event, its acknowledgement, and the poll that reads the completions.
//! Two RC queue pairs of one device exchange SENDs over a connection the
//! connection manager made (`uverbs::cm::connect_pair`; rxe and siw alike).
//!
//! ```text
//! cargo run --example events -- [--device rxe0] [--addr 192.0.2.1] [--count 8]
//! cargo vm demo    # runs it on rxe0 (192.0.2.1) and siw0 (198.51.100.1) in a VM
//! ```
//!
//! The loop is the classic one (`ibv_get_cq_event`, `ibv_ack_cq_events`,
//! `ibv_req_notify_cq`, `ibv_poll_cq`): arm, then poll once more, because a
//! completion that arrived before the CQ was armed raises no event.

use std::error::Error;
use std::time::Duration;

use uverbs::post::{Completed, Local, RecvRequest, SendRequest};
use uverbs::wr::WcStatus;
use uverbs::{AccessFlags, BufferMr, Device, OwnedQp, PageBuffer, QpInit, QpType};

/// Pages of its own, not a `Vec`: under forced fork safety a registered
/// heap page is missing in a forked child, which may reuse it for anything.
type Mem = BufferMr<PageBuffer>;

/// The value after `name` on the command line.
fn arg(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .cloned()
}

fn main() -> Result<(), Box<dyn Error>> {
    let count: u64 = arg("--count").map_or(Ok(8), |n| n.parse())?;
    let ctx = arg("--device")
        .map_or_else(Device::first, |d| Device::by_name(&d))?
        .open()?;
    let addr = arg("--addr")
        .unwrap_or_else(|| "192.0.2.1".into())
        .parse()?;
    let pd = ctx.alloc_pd()?;
    // The channel is a file descriptor: it can also be waited on with
    // epoll, or awaited with tokio (`uverbs::tokio`).
    let channel = ctx.create_comp_channel()?;
    let cq = ctx.create_cq(16, Some(&channel))?;
    let init = QpInit::new(QpType::Rc, &cq, &cq);
    let a: OwnedQp<Mem> = OwnedQp::create(&pd, &init)?;
    let b: OwnedQp<Mem> = OwnedQp::create(&pd, &init)?;
    let _connection = uverbs::cm::connect_pair(&ctx, &a, &b, addr, Duration::from_secs(10))?;
    let buffer = || -> Result<Mem, Box<dyn Error>> {
        Ok(pd.reg_buffer(PageBuffer::new(64)?, AccessFlags::LOCAL_WRITE)?)
    };

    let (mut inbox, mut outbox) = (buffer()?, buffer()?);
    let (mut events, mut completions) = (0, 0);
    cq.req_notify(false)?; // armed: the next completion raises an event
    for i in 0..count {
        // One receive before each SEND (on iWARP a SEND that finds none
        // breaks the connection).
        let recv = RecvRequest::new(i, Local::whole(inbox));
        b.post_recv(recv)?;
        outbox.buffer_mut()[..8].copy_from_slice(&i.to_le_bytes());
        a.post_send(SendRequest::send(i, Local::whole(outbox)))?;

        let mut done: Vec<Completed<Mem>> = Vec::new();
        while done.len() < 2 {
            // Sleep until the CQ reports, for at most 10 s.
            let Some(cq_id) = channel.wait_event(Duration::from_secs(10))? else {
                return Err(format!("message {i}: no completion event within 10 s").into());
            };
            assert_eq!(cq_id, cq.event_id(), "our only CQ");
            cq.ack_events(1)?; // every event read is acknowledged
            cq.req_notify(false)?; // re-arm before polling: nothing is missed
            events += 1;
            a.poll(&mut done)?; // each QP takes its own completions
            b.poll(&mut done)?;
        }
        completions += done.len();
        for c in &done {
            if c.status() != Some(WcStatus::Success) {
                return Err(format!("message {i}: request {}: {:?}", c.wr_id, c.ended).into());
            }
        }
        // The buffers come back with their completions: the receive's
        // carries the message.
        let (recv, sent): (Vec<_>, Vec<_>) = done.into_iter().partition(|c| c.is_recv);
        inbox = recv
            .into_iter()
            .next()
            .and_then(Completed::into_memory)
            .ok_or("no inbox")?;
        outbox = sent
            .into_iter()
            .next()
            .and_then(Completed::into_memory)
            .ok_or("no outbox")?;
        if inbox.buffer()[..8] != i.to_le_bytes() {
            return Err(format!("message {i}: received {:?}", &inbox.buffer()[..8]).into());
        }
    }
    let name = ctx.device_name();
    println!("events: {name}: {count} SENDs, {completions} completions from {events} events");
    Ok(())
}
