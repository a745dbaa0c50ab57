//! RDMA READ through the connection manager on tokio (`--features
//! tokio`): `read.rs`, async. The server sends its buffer's address, rkey
//! and length in the connection's private data; the client READs it.
//! ```text
//! cargo run --features tokio --example tokio_read -- server 192.0.2.1:7471
//! cargo run --features tokio --example tokio_read -- client 192.0.2.1:7471
//! cargo run --features tokio --example tokio_read -- --addr 192.0.2.1   # both
//! ```

use std::net::SocketAddr;
use std::time::Duration;

use tokio::time::timeout;
use uverbs::cm::ConnParam;
use uverbs::post::Local;
use uverbs::tokio::cm::{AsyncEventChannel, Listener};
use uverbs::tokio::{AsyncCq, AsyncQp};
use uverbs::wr::{RemoteRegion, WcStatus};
use uverbs::{AccessFlags, BufferMr, OwnedQp, PageBuffer, QpInit, QpType};

type Result<T, E = Box<dyn std::error::Error + Send + Sync>> = std::result::Result<T, E>;
const WAIT: Duration = Duration::from_secs(10);
const TEXT: &[u8] = b"hello from the server's memory";

async fn serve(listener: Listener) -> Result<()> {
    let request = timeout(WAIT, listener.accept()).await??;
    let ctx = request.id().open_device()?;
    let (pd, cq) = (ctx.alloc_pd()?, ctx.create_cq(4, None)?);
    let qp = pd.create_qp(&QpInit::new(QpType::Rc, &cq, &cq))?;
    let text = PageBuffer::copied_from(TEXT)?;
    let mr = pd.reg_buffer(text, AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ)?;
    let param = ConnParam::new(qp.qp_num()).private_data(&mr.region().to_bytes())?;
    let (id, _) = timeout(WAIT, request.accept(&qp, param)).await??;
    timeout(WAIT, id.next_event()).await??; // the client's DISCONNECTED: it has read
    Ok(())
}

async fn client(ch: &AsyncEventChannel, server: SocketAddr) -> Result<()> {
    let id = timeout(WAIT, ch.resolve(server, WAIT)).await??;
    let ctx = id.open_device()?;
    let (pd, cq) = (ctx.alloc_pd()?, AsyncCq::new(&ctx, 4)?);
    let qp: OwnedQp<BufferMr<PageBuffer>> =
        OwnedQp::new(pd.create_qp(&QpInit::new(QpType::Rc, cq.cq(), cq.cq()))?)?;
    let qp = AsyncQp::new(qp, &[&cq])?;
    let (id, peer) = timeout(WAIT, id.connect(&qp, ConnParam::new(qp.qp_num()))).await??;
    let region = RemoteRegion::from_bytes(&peer.private_data)?;
    let buf = PageBuffer::new(region.len as usize)?;
    let inbox = pd.reg_buffer(buf, AccessFlags::LOCAL_WRITE)?;
    let done = timeout(WAIT, qp.read(Local::whole(inbox), region.remote())?).await??;
    if done.status() != Some(WcStatus::Success) {
        return Err(format!("the READ failed: {:?}", done.ended).into());
    }
    let inbox = done.into_memory().ok_or("no buffer came back")?;
    let text = String::from_utf8_lossy(inbox.buffer());
    println!("tokio_read: {}: {text:?} from {server}", ctx.device_name());
    timeout(WAIT, id.disconnect()).await??;
    Ok(())
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let ch = AsyncEventChannel::open()?;
    match args.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        ["server", at] => serve(ch.listen(at.parse()?, 1)?).await,
        ["client", server] => client(&ch, server.parse()?).await,
        [.., "--addr", ip] => {
            let at = SocketAddr::new(ip.parse()?, 7471);
            // One channel each, as two programs would have.
            let server = serve(AsyncEventChannel::open()?.listen(at, 1)?);
            let (served, read) = tokio::join!(server, client(&ch, at));
            served.and(read)
        }
        _ => Err("usage: tokio_read server IP:PORT | client IP:PORT | --addr IP".into()),
    }
}
