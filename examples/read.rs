//! RDMA READ through the connection manager, blocking: the server sends
//! its buffer's address, rkey and length in the connection's private data;
//! the client READs the buffer and prints it. On rxe and siw alike.
//! ```text
//! cargo run --example read -- server 192.0.2.1:7471   # on one host
//! cargo run --example read -- client 192.0.2.1:7471   # on another
//! cargo run --example read -- --addr 192.0.2.1        # both in one process
//! ```

use std::{net::SocketAddr, time::Duration};

use uverbs::cm::{CmId, ConnParam, EventChannel, PortSpace};
use uverbs::post::{Local, SendRequest};
use uverbs::wr::{RemoteRegion, WcStatus};
use uverbs::{AccessFlags, BufferMr, OwnedQp, PageBuffer, QpInit, QpType};

type Result<T, E = Box<dyn std::error::Error + Send + Sync>> = std::result::Result<T, E>;
const WAIT: Duration = Duration::from_secs(10);
const TEXT: &[u8] = b"hello from the server's memory";

fn listen(at: SocketAddr) -> Result<CmId> {
    let listener = EventChannel::open()?.create_id(PortSpace::Tcp)?;
    listener.bind(at)?;
    listener.listen(1)?;
    Ok(listener)
}

fn serve(listener: &CmId) -> Result<()> {
    let (id, _request) = listener.get_request(WAIT)?;
    let ctx = id.open_device()?;
    let (pd, cq) = (ctx.alloc_pd()?, ctx.create_cq(4, None)?);
    let qp = pd.create_qp(&QpInit::new(QpType::Rc, &cq, &cq))?;
    let text = PageBuffer::copied_from(TEXT)?;
    let mr = pd.reg_buffer(text, AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ)?;
    let param = ConnParam::new(qp.qp_num()).private_data(&mr.region().to_bytes())?;
    id.accept_qp(&qp, &param, WAIT)?;
    id.channel().wait_event(WAIT)?; // the client's DISCONNECTED: it has read
    Ok(())
}

fn client(server: SocketAddr) -> Result<()> {
    let id = EventChannel::open()?.create_id(PortSpace::Tcp)?;
    id.resolve(None, server, WAIT)?;
    let ctx = id.open_device()?;
    let (pd, cq) = (ctx.alloc_pd()?, ctx.create_cq(4, None)?);
    let qp: OwnedQp<BufferMr<PageBuffer>> =
        OwnedQp::new(pd.create_qp(&QpInit::new(QpType::Rc, &cq, &cq))?)?;
    let peer = id.connect_qp(&qp, &ConnParam::new(qp.qp_num()), WAIT)?;
    let region = RemoteRegion::from_bytes(&peer.private_data)?;
    let buf = PageBuffer::new(region.len as usize)?;
    let inbox = pd.reg_buffer(buf, AccessFlags::LOCAL_WRITE)?;
    qp.post_send(SendRequest::read(1, Local::whole(inbox), region.remote()))?;
    let done = qp.wait(WAIT)?; // the READ, with the buffer it filled
    if done.status() != Some(WcStatus::Success) {
        return Err(format!("the READ failed: {:?}", done.ended).into());
    }
    let inbox = done.into_memory().ok_or("no buffer came back")?;
    let text = String::from_utf8_lossy(inbox.buffer());
    println!("read: {}: {text:?} from {server}", ctx.device_name());
    id.disconnect()?;
    Ok(())
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        ["server", at] => serve(&listen(at.parse()?)?),
        ["client", server] => client(server.parse()?),
        [.., "--addr", ip] => {
            let at = SocketAddr::new(ip.parse()?, 7471);
            let listener = listen(at)?;
            std::thread::scope(|s| {
                let server = s.spawn(|| serve(&listener));
                client(at)?;
                server.join().map_err(|_| "the server panicked")?
            })
        }
        _ => Err("usage: read server IP:PORT | read client IP:PORT | read --addr IP".into()),
    }
}
