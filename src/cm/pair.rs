//! [`connect_pair`]: two RC queue pairs of one device connected to each
//! other through the connection manager, in one process: what loopback
//! tests, self-checks and examples need on RoCE and iWARP alike (an
//! iWARP QP reaches RTS only through the cm).

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use super::{CmError, CmId, ConnParam, EventChannel, PortSpace};
use crate::error::{Error, Op};
use crate::qp::Connectable;
use crate::Context;

/// What keeps a [`connect_pair`] connection up: its cm ids (the listener
/// and the two ends) and their two channels. Dropping it destroys the ids,
/// which ends the connection, then closes the channels; drop the queue
/// pairs first (or let them end in ERR).
#[derive(Debug)]
pub struct LocalConnection {
    // Dropped in order: the ids, then the channels they report to.
    _ids: [CmId; 3],
    _channels: [EventChannel; 2],
}

impl LocalConnection {
    /// The active side's id (it connected `a`); its events, such as
    /// `DISCONNECTED`, arrive on its [`channel`](CmId::channel).
    pub fn active(&self) -> &CmId {
        &self._ids[1]
    }

    /// The passive side's id (it accepted `b`), on a channel of its own.
    pub fn passive(&self) -> &CmId {
        &self._ids[0]
    }
}

/// Connects `a` (the active side) and `b` (the passive side), two RC queue
/// pairs of `ctx` in RESET or INIT, to each other through the kernel's
/// connection manager over `addr`, an IP address of `ctx`'s device (its
/// network interface's); both are in RTS when it returns. Each side has a
/// channel of its own, as two programs would; the passive side waits on a
/// thread of its own. Every wait is bounded by `timeout`.
///
/// `addr` on another device than `ctx`'s is [`Error::InvalidInput`],
/// before any QP is touched.
///
/// ```no_run
/// # use std::time::Duration;
/// # use uverbs::{QpInit, QpType};
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let ctx = uverbs::Device::by_name("siw0")?.open()?;
/// let (pd, cq) = (ctx.alloc_pd()?, ctx.create_cq(16, None)?);
/// let a = pd.create_qp(&QpInit::new(QpType::Rc, &cq, &cq))?;
/// let b = pd.create_qp(&QpInit::new(QpType::Rc, &cq, &cq))?;
/// let addr = "198.51.100.1".parse()?; // an address of siw0's interface
/// let connection = uverbs::cm::connect_pair(&ctx, &a, &b, addr, Duration::from_secs(10))?;
/// // a and b are in RTS, connected to each other, while `connection` lives.
/// # drop((a, b, connection)); Ok(()) }
/// ```
pub fn connect_pair<A, B>(
    ctx: &Context,
    a: &A,
    b: &B,
    addr: IpAddr,
    timeout: Duration,
) -> Result<LocalConnection, CmError>
where
    A: Connectable + ?Sized,
    B: Connectable + Sync + ?Sized,
{
    let (ch_a, ch_b) = (EventChannel::open()?, EventChannel::open()?);
    let listener = ch_b.create_id(PortSpace::Tcp)?;
    listener.bind(SocketAddr::new(addr, 0))?; // port 0: the kernel picks one
    listener.listen(1)?;
    let at = listener.query_addr()?.src.ok_or_else(|| {
        Error::input(
            Op::CmListen,
            &ctx.inner.device,
            "the listener reports no address",
        )
    })?;
    let client = ch_a.create_id(PortSpace::Tcp)?;
    client.resolve(None, at, timeout)?;
    if !client.is_on(ctx)? {
        let why = "connect_pair: the address is not one of this device's";
        return Err(Error::input(Op::CmResolveAddr, &ctx.inner.device, why).into());
    }
    let server = std::thread::scope(|s| {
        let passive = s.spawn(|| -> Result<CmId, CmError> {
            let (server, _request) = listener.get_request(timeout)?;
            server.accept_qp(b, &ConnParam::new(b.qp_num()), timeout)?;
            Ok(server)
        });
        let active = client.connect_qp(a, &ConnParam::new(a.qp_num()), timeout);
        // A panic there is a bug of this crate's: pass it on.
        let passive = passive
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        active.and(passive)
    })?;
    Ok(LocalConnection {
        _ids: [server, client, listener],
        _channels: [ch_a, ch_b],
    })
}
