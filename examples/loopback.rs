//! Loopback: two RC queue pairs of one device, connected to each other; A
//! makes an RDMA WRITE into B's memory and a SEND into a receive B posted;
//! both are polled and their bytes checked. Works on RoCE (rxe) and iWARP
//! (siw) alike: the connection is made by the connection manager
//! (`uverbs::cm::connect_pair`), over an IP address of the device's
//! network interface.
//!
//! ```text
//! cargo run --example loopback -- [--device rxe0] [--addr 192.0.2.1]
//! cargo vm demo    # runs it on rxe0 (192.0.2.1) and siw0 (198.51.100.1) in a VM
//! ```
//!
//! Prints `loopback: <device>: WRITE and SEND verified`, or exits non-zero
//! with the reason.

use std::error::Error;
use std::time::Duration;

use uverbs::post::{Completed, Local, RecvRequest, SendRequest};
use uverbs::wr::WcStatus;
use uverbs::{AccessFlags, BufferMr, Device, OwnedQp, PageBuffer, QpInit, QpType};

/// Registered memory is whole pages of its own, not `Vec`s: with fork
/// safety forced (`UVERBS_FORK_SAFE=force`) a registered range is marked
/// `MADV_DONTFORK`, and a heap page so marked would be missing in a forked
/// child that reuses it for something else.
type Mem = BufferMr<PageBuffer>;

const MESSAGE: &[u8] = b"hello over RDMA";
const WAIT: Duration = Duration::from_secs(10);

/// The value after `name` on the command line.
fn arg(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .cloned()
}

/// The memory of a request that succeeded.
fn succeeded(done: Completed<Mem>, what: &str) -> Result<Mem, Box<dyn Error>> {
    if done.status() != Some(WcStatus::Success) {
        return Err(format!("{what}: {:?}", done.ended).into());
    }
    Ok(done.into_memory().ok_or("no memory came back")?)
}

fn main() -> Result<(), Box<dyn Error>> {
    let ctx = arg("--device")
        .map_or_else(Device::first, |d| Device::by_name(&d))?
        .open()?;
    let addr = arg("--addr")
        .unwrap_or_else(|| "192.0.2.1".into())
        .parse()?;
    let (pd, cq) = (ctx.alloc_pd()?, ctx.create_cq(16, None)?);
    let init = QpInit::new(QpType::Rc, &cq, &cq);
    let a: OwnedQp<Mem> = OwnedQp::create(&pd, &init)?;
    let b: OwnedQp<Mem> = OwnedQp::create(&pd, &init)?;
    let _connection = uverbs::cm::connect_pair(&ctx, &a, &b, addr, WAIT)?;
    let map = || PageBuffer::new(4096);

    // B's WRITE target: memory a peer may write is a RemoteBufferMr, read
    // only by copies (never a plain slice the device could change under us).
    let rw = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;
    let mut target = pd.reg_remote_buffer(map()?, rw)?;
    // B's receive: the buffer belongs to the request until it completes.
    let inbox = pd.reg_buffer(map()?, AccessFlags::LOCAL_WRITE)?;
    b.post_recv(RecvRequest::new(1, Local::whole(inbox)))?;

    let mut out = pd.reg_buffer(map()?, AccessFlags::LOCAL_WRITE)?;
    out.buffer_mut()[..MESSAGE.len()].copy_from_slice(MESSAGE);
    let local = Local::slice(out, 0..MESSAGE.len())?;
    a.post_send(SendRequest::write(2, local, target.region().remote()))?;
    let out = succeeded(a.wait(WAIT)?, "WRITE")?; // back with its completion
    let mut landed = vec![0u8; MESSAGE.len()];
    target.copy_out(0, &mut landed)?;
    if landed != MESSAGE {
        return Err(format!("the WRITE left {landed:?}").into());
    }

    a.post_send(SendRequest::send(3, Local::slice(out, 0..MESSAGE.len())?))?;
    succeeded(a.wait(WAIT)?, "SEND")?;
    let inbox = succeeded(b.wait(WAIT)?, "RECV")?;
    if &inbox.buffer()[..MESSAGE.len()] != MESSAGE {
        return Err(format!("the SEND delivered {:?}", &inbox.buffer()[..16]).into());
    }
    println!("loopback: {}: WRITE and SEND verified", ctx.device_name());
    Ok(())
}
