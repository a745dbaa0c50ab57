//! Loopback: two RC queue pairs of one device, connected to each other; A
//! makes an RDMA WRITE into B's memory and a SEND into a receive B posted;
//! both are polled and their bytes checked. Works on RoCE (rxe) and iWARP
//! (siw) alike: the connection is made by the connection manager
//! (`common/connect.rs`), which finds the device by an IP address of its
//! network interface.
//!
//! ```text
//! cargo run --example loopback -- [--device rxe0] [--addr 192.0.2.1]
//! cargo vm demo    # runs it on rxe0 (192.0.2.1) and siw0 (198.51.100.1) in a VM
//! ```
//!
//! Prints `loopback: <device>: WRITE and SEND verified`, or exits non-zero
//! with the reason.

#[path = "common/completion.rs"]
mod completion;
#[path = "common/connect.rs"]
mod connect;

use std::error::Error;

use memmap2::MmapMut;
use uverbs::{AccessFlags, BufferMr, Local, RecvRequest, Remote, SendRequest};

/// Registered memory comes from anonymous mappings, not `Vec`s: with fork
/// safety forced (`UVERBS_FORK_SAFE=force`) a registered range is marked
/// `MADV_DONTFORK`, and a heap page so marked would be missing in a forked
/// child that reuses it for something else.
type Mem = BufferMr<MmapMut>;

const MESSAGE: &[u8] = b"hello over RDMA";

fn main() -> Result<(), Box<dyn Error>> {
    let args = connect::args(None)?;
    let ctx = connect::open(args.device.as_deref())?;
    let (pd, cq) = (ctx.alloc_pd()?, ctx.create_cq(16, None)?);
    let pair = connect::connect::<Mem>(&ctx, &pd, (&cq, &cq), args.addr)?;
    let map = || MmapMut::map_anon(4096);

    // B's WRITE target: memory a peer may write is a RemoteBufferMr, read
    // only by copies (never a plain slice the device could change under us).
    let rw = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;
    let mut target = pd.reg_remote_buffer(map()?, rw)?;
    // B's receive: the buffer belongs to the request until it completes.
    let inbox = pd.reg_buffer(map()?, AccessFlags::LOCAL_WRITE)?;
    let posted = pair.b.post_recv(RecvRequest::new(1, Local::whole(inbox)));
    posted?;

    let mut out = pd.reg_buffer(map()?, AccessFlags::LOCAL_WRITE)?;
    out.buffer_mut()[..MESSAGE.len()].copy_from_slice(MESSAGE);
    let remote = Remote {
        addr: target.addr(),
        rkey: target.rkey(),
    };
    let local = Local::slice(out, 0..MESSAGE.len())?;
    pair.a.post_send(SendRequest::write(2, local, remote))?;
    let out = completion::wait(&pair.a, "WRITE")?; // back with its completion
    let mut landed = vec![0u8; MESSAGE.len()];
    target.copy_out(0, &mut landed)?;
    if landed != MESSAGE {
        return Err(format!("the WRITE left {landed:?}").into());
    }

    pair.a
        .post_send(SendRequest::send(3, Local::slice(out, 0..MESSAGE.len())?))?;
    completion::wait(&pair.a, "SEND")?;
    let inbox = completion::wait(&pair.b, "RECV")?;
    if &inbox.buffer()[..MESSAGE.len()] != MESSAGE {
        return Err(format!("the SEND delivered {:?}", &inbox.buffer()[..16]).into());
    }
    println!("loopback: {}: WRITE and SEND verified", ctx.device_name());
    Ok(())
}
