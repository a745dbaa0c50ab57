//! Two RC queue pairs of one device, connected to each other through the
//! RDMA connection manager (`uverbs::cm`): the set-up the short examples
//! (loopback, owned, events) share. Copy it along with them.
//!
//! Why the cm and not `modify` by hand: an iWARP QP (siw) reaches RTS only
//! through the kernel's connection manager, while RoCE (rxe) could be
//! connected by hand; the cm works on both with one code path. It finds the
//! device by an IP address of its network interface, so `addr` must be one
//! (in `cargo vm demo`: 192.0.2.1 is rxe0's, 198.51.100.1 siw0's).
//!
//! Shared through `#[path]`: a directory without main.rs is no example
//! target of its own.

use std::error::Error;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use uverbs::cm::{CmError, CmId, ConnParam, EventChannel, PortSpace};
use uverbs::{CompletionQueue, Context, DeviceReadable, OwnedQp, ProtectionDomain};
use uverbs::{QpInit, QpType};

/// The longest any connection-manager event is waited for (and the
/// kernel's time-out for address and route resolution).
const CM_WAIT: Duration = Duration::from_secs(10);

/// A connected pair. Fields drop in order: the QPs, then the cm ids
/// (which ends the connection), then their channels.
pub struct Pair<M> {
    /// The active side (it connected).
    pub a: OwnedQp<M>,
    /// The passive side (it accepted).
    pub b: OwnedQp<M>,
    _ids: [CmId; 3],
    _channels: [EventChannel; 2],
}

/// The command line these examples share, parsed with `lexopt`.
pub struct Args {
    /// `--device NAME`: the device (default: the first one).
    pub device: Option<String>,
    /// `--addr IP`: an address of the device's network interface.
    pub addr: IpAddr,
    /// `--count N`, only where the example takes one.
    #[allow(dead_code)] // loopback takes none
    pub count: u64,
}

/// The command line; `count` is the default of `--count`, which is refused
/// when `None`.
pub fn args(count: Option<u64>) -> Result<Args, Box<dyn Error>> {
    use lexopt::prelude::*;
    let (mut device, mut addr) = (None, "192.0.2.1".parse::<IpAddr>()?);
    let (mut n, mut parser) = (count.unwrap_or(0), lexopt::Parser::from_env());
    while let Some(arg) = parser.next()? {
        match arg {
            Long("device") => device = Some(parser.value()?.string()?),
            Long("addr") => addr = parser.value()?.parse()?,
            Long("count") if count.is_some() => n = parser.value()?.parse()?,
            _ => return Err(arg.unexpected().into()),
        }
    }
    Ok(Args {
        device,
        addr,
        count: n,
    })
}

/// The open device named `name`, or the first one.
pub fn open(name: Option<&str>) -> Result<Context, Box<dyn Error>> {
    let mut devices = uverbs::devices()?;
    devices.retain(|d| name.map_or(true, |n| n == d.name()));
    let device = devices.first().ok_or("no such RDMA device")?;
    Ok(device.open()?)
}

/// Connects two new RC QPs of `pd` (A on `cq_a`, B on `cq_b`) to each
/// other over `addr`, an address of `ctx`'s device; both end in RTS.
pub fn connect<M: DeviceReadable + Send>(
    ctx: &Context,
    pd: &ProtectionDomain,
    (cq_a, cq_b): (&CompletionQueue, &CompletionQueue),
    addr: IpAddr,
) -> Result<Pair<M>, Box<dyn Error>> {
    // One channel per side, as two programs would have: each side waits
    // for its own events only.
    let (ch_a, ch_b) = (EventChannel::open()?, EventChannel::open()?);
    let listener = ch_b.create_id(PortSpace::Tcp)?;
    listener.bind(SocketAddr::new(addr, 0))?; // port 0: the kernel picks one
    listener.listen(1)?;
    let at = listener
        .query_addr()?
        .src
        .ok_or("the listener has no address")?;
    let client = ch_a.create_id(PortSpace::Tcp)?;
    client.resolve(None, at, CM_WAIT)?;
    if !client.is_on(ctx)? {
        return Err(format!("{addr} is not an address of {}", ctx.device_name()).into());
    }

    let qp = |cq| -> Result<OwnedQp<M>, Box<dyn Error>> {
        let qp = pd.create_qp(&QpInit::new(QpType::Rc, cq, cq))?;
        Ok(OwnedQp::new(qp)?)
    };
    let (a, b) = (qp(cq_a)?, qp(cq_b)?);
    // Each call returns when its side is connected, so the two sides run
    // on two threads. The cm gives every QP transition its attributes (the
    // port, the peer's address and QP number, the access it granted) and
    // takes care of RoCE's and iWARP's differences.
    let server = std::thread::scope(|s| {
        let passive = s.spawn(|| -> Result<CmId, CmError> {
            let (server, _request) = listener.get_request(CM_WAIT)?;
            server.accept_qp(&b, &ConnParam::new(b.qp_num()), CM_WAIT)?;
            Ok(server)
        });
        let active = client.connect_qp(&a, &ConnParam::new(a.qp_num()), CM_WAIT);
        let passive = passive.join().expect("the accepting thread panicked");
        active.and(passive)
    })?;
    Ok(Pair {
        a,
        b,
        _ids: [server, client, listener],
        _channels: [ch_a, ch_b],
    })
}
