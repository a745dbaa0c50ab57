//! Multicast: a UD queue pair receives what another sends to a group.
//!
//! The connection manager joins the group (`rdma_join_multicast`): on RoCE
//! with an IPv4 group the kernel also makes the network interface a member
//! (IGMP), without which the IP layer would drop the group's packets, and
//! its `MULTICAST_JOIN` event says what to attach to and where to send:
//! the group's address vector, Q_Key and QP number. Runs on RoCE (rxe);
//! iWARP (siw) has no multicast, and the example says so and exits 0.
//!
//! ```text
//! cargo run --example multicast -- [--device rxe0] [--addr 192.0.2.1]
//! cargo vm demo    # runs it on rxe0 (192.0.2.1) and siw0 (198.51.100.1) in a VM
//! ```

use std::error::Error;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use uverbs::cm::{EventChannel, PortSpace};
use uverbs::error::Errno;
use uverbs::post::{Local, RecvRequest, SendRequest};
use uverbs::qp::{QpAttr, QpState};
use uverbs::wr::WcStatus;
use uverbs::{AccessFlags, BufferMr, Device, OwnedQp, PageBuffer, QpInit, QpType};

/// Pages of its own, not a `Vec`: under forced fork safety a registered
/// heap page is missing in a forked child, which may reuse it for anything.
type Mem = BufferMr<PageBuffer>;

const MESSAGE: &[u8] = b"hello, group";
/// What rxe puts in front of every UD receive: the packet's IP header.
const GRH: usize = 40;

/// The value after `name` on the command line.
fn arg(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .cloned()
}

fn main() -> Result<(), Box<dyn Error>> {
    let ctx = arg("--device")
        .map_or_else(Device::first, |d| Device::by_name(&d))?
        .open()?;
    let addr = arg("--addr")
        .unwrap_or_else(|| "192.0.2.1".into())
        .parse()?;
    // A UDP-port-space id, bound to the device's address, joins the group.
    let ch = EventChannel::open()?;
    let id = ch.create_id(PortSpace::Udp)?;
    id.bind(SocketAddr::new(addr, 0))?;
    let group: SocketAddr = "239.1.2.3:0".parse()?;
    // Joined once the kernel's MULTICAST_JOIN came: it carries the group's
    // address vector, Q_Key and QP number.
    let joined = match id.join_group(group, false, Duration::from_secs(10)) {
        Err(e) if e.errno() == Some(Errno::NOSYS) => {
            println!(
                "multicast: {}: no multicast on this device ({e})",
                ctx.device_name()
            );
            return Ok(());
        }
        joined => joined?.1,
    };
    let av = joined.to_ah_attr();

    // Two UD QPs with the group's Q_Key; the receiver attached to the group.
    let (pd, cq) = (ctx.alloc_pd()?, ctx.create_cq(8, None)?);
    let ud = || -> Result<OwnedQp<Mem>, Box<dyn Error>> {
        let qp = OwnedQp::new(pd.create_qp(&QpInit::new(QpType::Ud, &cq, &cq))?)?;
        let init = QpAttr::new()
            .state(QpState::Init)
            .pkey_index(0)
            .port(av.port);
        qp.modify(&init.qkey(joined.qkey))?;
        qp.modify(&QpAttr::new().state(QpState::Rtr))?;
        qp.modify(&QpAttr::new().state(QpState::Rts).sq_psn(0))?;
        Ok(qp)
    };
    let (sender, receiver) = (ud()?, ud()?);
    receiver.attach_mcast(av.dgid, av.dlid)?;
    let buffer = || -> Result<Mem, Box<dyn Error>> {
        Ok(pd.reg_buffer(PageBuffer::new(4096)?, AccessFlags::LOCAL_WRITE)?)
    };
    let inbox = Local::slice(buffer()?, 0..GRH + MESSAGE.len())?;
    receiver.post_recv(RecvRequest::new(1, inbox))?;

    // A SEND to the group: the event's address vector, QP 0xFFFFFF, Q_Key.
    let mut out = buffer()?;
    out.buffer_mut()[..MESSAGE.len()].copy_from_slice(MESSAGE);
    let ah = Arc::new(pd.create_ah(&av)?);
    let send = SendRequest::send(2, Local::slice(out, 0..MESSAGE.len())?);
    sender.post_send(send.ud(ah, joined.qp_num, joined.qkey))?;
    let wait = Duration::from_secs(10);
    let (sent, received) = (sender.wait(wait)?, receiver.wait(wait)?);
    if [sent.status(), received.status()] != [Some(WcStatus::Success); 2] {
        return Err(format!("SEND {:?}, RECV {:?}", sent.ended, received.ended).into());
    }
    let inbox = received.into_memory().ok_or("no memory came back")?;
    if &inbox.buffer()[GRH..GRH + MESSAGE.len()] != MESSAGE {
        return Err("the group's SEND delivered other bytes".into());
    }
    receiver.detach_mcast(av.dgid, av.dlid)?;
    id.leave_multicast(group)?;
    println!(
        "multicast: {}: a SEND to {group} reached the member",
        ctx.device_name()
    );
    Ok(())
}
