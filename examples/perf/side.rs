//! One side of a perf run: its buffer, MR, CQs and RC QP, and the two ways
//! of connecting it: by hand (RoCE, Endpoint lines over TCP, perftest's
//! default) or through the rdma_cm (`--cm`, perftest's `-R`).
//!
//! The buffer holds two areas of `size` bytes, each page-aligned: the
//! *source* (what this side sends or writes from) and the *target* (what
//! the peer writes or reads, and where receives land).

use std::io::Write;
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use memmap2::MmapMut;
use uverbs::cm::{CmId, ConnParam, Event, EventChannel, EventKind, Param, PortSpace};
use uverbs::{
    AccessFlags, CompletionQueue, Context, DriverId, Endpoint, MemoryRegion, OpenOptions, QpInit,
    QueuePair, RecvWr, Remote, Sge,
};
use uverbs::{QpAttr, QpState, QpType, TransportType};

use super::line_channel::{accept_within, LineChannel};
use super::{Options, Result, Test, WAIT};

const PORT: u8 = 1;
/// Address and route resolution time-outs handed to the kernel (ms).
const RESOLVE_MS: u32 = 2000;
/// Access for our MR and (by hand) our QP: the peer writes and reads it.
const ACCESS: AccessFlags = AccessFlags::LOCAL_WRITE
    .union(AccessFlags::REMOTE_WRITE)
    .union(AccessFlags::REMOTE_READ);

fn page(n: usize) -> usize {
    n.div_ceil(4096) * 4096
}

/// Opens `name`; only rxe and siw have a data path in uverbs.
pub fn open(name: &str) -> Result<Context> {
    let dev = uverbs::device(name)?.ok_or(format!("no RDMA device {name}"))?;
    match dev.driver_id() {
        Some(DriverId::RXE) | Some(DriverId::SIW) => {}
        other => return Err(format!("{name}: driver {other:?} has no data path in uverbs").into()),
    }
    Ok(dev.open_with(&OpenOptions::new())?)
}

/// The inline size perftest 4.5 picks by default (`ctx_set_max_inline` in
/// src/perftest_parameters.c): 0 for a device `ib_dev_name` does not
/// recognise by vendor id / part id, which rxe (vendor 0xffffff) and siw
/// (vendor 0x626d74) are; otherwise 220 for WRITE latency, 236 for RC SEND
/// latency, 0 for bandwidth and READ.
pub fn perftest_default_inline(ctx: &Context, test: Test) -> Result<usize> {
    let soft = matches!(ctx.driver_id(), Some(DriverId::RXE) | Some(DriverId::SIW));
    Ok(match test {
        _ if soft => 0,
        Test::WriteLat => 220,
        Test::SendLat => 236,
        _ => 0,
    })
}

/// Everything one side owns. Fields drop in order: the QP first (it stops
/// using the buffer), the CQs, the MR before the memory it covers.
pub struct Side {
    pub qp: QueuePair,
    pub scq: CompletionQueue,
    pub rcq: CompletionQueue,
    pub mr: MemoryRegion,
    pub buf: MmapMut,
    pub size: usize,
    /// Inline bytes the QP takes (what we asked for and got).
    pub inline: usize,
    /// Receives kept posted (send tests), 0 otherwise.
    pub rx_depth: usize,
    /// RDMA READs outstanding each way, perftest's `out_reads`: the
    /// device's `max_qp_rd_atom` for read_lat (perftest's default for its
    /// READ tests, `ctx_set_out_reads`), 1 for the others.
    pub out_reads: u8,
}

impl Side {
    /// A QP with `tx_depth` send slots, `rx_depth` receive slots and room
    /// for `--inline` bytes, by default perftest's
    /// ([`perftest_default_inline`]); less if the device refuses that: the
    /// largest it accepts.
    pub fn new(ctx: &Context, opts: &Options, tx_depth: usize) -> Result<Side> {
        let want_inline = match opts.inline {
            Some(n) => n,
            None => perftest_default_inline(ctx, opts.test)?,
        };
        let size = opts.size;
        let rx_depth = if opts.test.uses_recv() {
            opts.iters.min(super::DEF_RX_SEND)
        } else {
            0
        };
        let out_reads = if opts.test == super::Test::ReadLat {
            u8::try_from(ctx.query_device()?.max_qp_rd_atom).unwrap_or(u8::MAX)
        } else {
            1
        };
        let pd = ctx.alloc_pd()?;
        let scq = ctx.create_cq(tx_depth as u32 + 8, None)?;
        let rcq = ctx.create_cq(rx_depth as u32 + 8, None)?;
        let try_create = |inline: usize| {
            let init = QpInit::new(QpType::Rc, &scq, &rcq)
                .max_send_wr(tx_depth as u32)
                // One more for the cm's start signal (`start_signal`).
                .max_recv_wr(rx_depth as u32 + 1)
                .max_inline(inline as u32);
            pd.create_qp(&init)
        };
        // The device's cap on inline data is known only by asking: the
        // largest value its create accepts (perftest asks with its default
        // and fails; we settle for less and report it).
        let (qp, inline) = match try_create(want_inline) {
            Ok(qp) => (qp, want_inline),
            Err(first) if want_inline > 0 => {
                let (mut lo, mut hi) = (0usize, want_inline - 1);
                while lo < hi {
                    let mid = (lo + hi).div_ceil(2);
                    if try_create(mid).is_ok() {
                        lo = mid;
                    } else {
                        hi = mid - 1;
                    }
                }
                let qp = try_create(lo).map_err(|e| format!("create_qp: {e} (first {first})"))?;
                (qp, lo)
            }
            Err(e) => return Err(format!("create_qp: {e}").into()),
        };
        let mut buf = MmapMut::map_anon(2 * page(size))?;
        // SAFETY: `buf` is a mapping of its own that outlives the MR (see
        // the field order of `Side`).
        let mr = unsafe { pd.reg_mr(buf.as_mut_ptr(), buf.len(), ACCESS)? };
        Ok(Side {
            qp,
            scq,
            rcq,
            mr,
            buf,
            size,
            inline,
            rx_depth,
            out_reads,
        })
    }

    /// Address of the source area.
    pub fn source(&self) -> u64 {
        self.buf.as_ptr() as u64
    }

    /// Address of the target area.
    pub fn target(&self) -> u64 {
        self.source() + page(self.size) as u64
    }

    pub fn sge(&self, addr: u64) -> Sge {
        Sge {
            addr,
            length: self.size as u32,
            lkey: self.mr.lkey(),
        }
    }

    /// Posts one receive into the target area.
    pub fn post_recv(&self, wr_id: u64) -> Result<()> {
        let sge = [self.sge(self.target())];
        // SAFETY: the receives all land in the target area, whose bytes
        // this program never reads while a receive is outstanding (send
        // tests measure time, not contents); the buffer outlives the QP.
        unsafe { self.qp.post_recv(&[RecvWr { wr_id, sges: &sge }])? };
        Ok(())
    }

    /// Posts the `rx_depth` receives a send test starts with.
    pub fn post_initial_recvs(&self) -> Result<()> {
        for i in 0..self.rx_depth {
            self.post_recv(i as u64)?;
        }
        Ok(())
    }

    /// Our endpoint: QP, PSN and the target area.
    fn endpoint(&self) -> Result<Endpoint> {
        let ep = Endpoint::local(&self.qp, u32::from(PORT), 0, &self.mr)?;
        Ok(Endpoint {
            psn: std::process::id() & 0xff_ffff,
            addr: self.target(),
            ..ep
        })
    }

    /// RESET -> INIT -> RTR -> RTS towards `peer` with perftest's values:
    /// the port's active MTU, timeout 14 (DEF_QP_TIME), retry 7, RNR retry
    /// 7, min RNR timer 12, [`out_reads`](Self::out_reads) READs
    /// outstanding each way, GID index 0.
    fn connect_by_hand(&self, ctx: &Context, me: &Endpoint, peer: &Endpoint) -> Result<()> {
        let port = ctx.query_port(PORT)?;
        let mtu = port
            .active_mtu()
            .ok_or("the port reports an unknown active MTU")?;
        let init = QpAttr::new()
            .state(QpState::Init)
            .pkey_index(0)
            .port(PORT)
            .access_flags(ACCESS);
        let rtr = QpAttr::new()
            .state(QpState::Rtr)
            .path_mtu(mtu)
            .dest_qpn(peer.qpn)
            .rq_psn(peer.psn)
            .max_dest_rd_atomic(self.out_reads)
            .min_rnr_timer(12)
            .av(peer.roce_dest(0, PORT));
        let rts = QpAttr::new()
            .state(QpState::Rts)
            .timeout(14)
            .retry_cnt(7)
            .rnr_retry(7)
            .sq_psn(me.psn)
            .max_rd_atomic(self.out_reads);
        for attr in [init, rtr, rts] {
            self.qp.modify(&attr)?;
        }
        Ok(())
    }
}

// ---- What the two sides must agree on ---------------------------------

/// The run's parameters and a side's target area, as one line over TCP or
/// 21 bytes of cm private data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hello {
    pub test: u8,
    pub size: u32,
    pub iters: u32,
    pub remote: Remote,
}

impl Hello {
    pub fn new(opts: &Options, side: &Side) -> Hello {
        Hello {
            test: opts.test as u8,
            size: opts.size as u32,
            iters: opts.iters as u32,
            remote: Remote {
                addr: side.target(),
                rkey: side.mr.rkey(),
            },
        }
    }

    fn to_bytes(self) -> [u8; 21] {
        let mut b = [0u8; 21];
        b[0] = self.test;
        b[1..5].copy_from_slice(&self.size.to_le_bytes());
        b[5..9].copy_from_slice(&self.iters.to_le_bytes());
        b[9..17].copy_from_slice(&self.remote.addr.to_le_bytes());
        b[17..21].copy_from_slice(&self.remote.rkey.to_le_bytes());
        b
    }

    fn from_bytes(b: &[u8]) -> Result<Hello> {
        if b.len() < 21 {
            return Err(format!("the peer's private data is {} bytes, not 21", b.len()).into());
        }
        let u32_at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().unwrap());
        Ok(Hello {
            test: b[0],
            size: u32_at(1),
            iters: u32_at(5),
            remote: Remote {
                addr: u64::from_le_bytes(b[9..17].try_into().unwrap()),
                rkey: u32_at(17),
            },
        })
    }

    /// Fails unless the peer runs the same test, size and iterations.
    fn check(&self, peer: &Hello) -> Result<()> {
        if (self.test, self.size, self.iters) != (peer.test, peer.size, peer.iters) {
            return Err(format!(
                "the peer runs test #{} size {} iters {}, we test #{} size {} iters {}",
                peer.test, peer.size, peer.iters, self.test, self.size, self.iters
            )
            .into());
        }
        Ok(())
    }
}

// ---- By hand: Endpoint lines over TCP ----------------------------------

/// How the two sides are connected, and what ends the run.
pub enum Link {
    Tcp(LineChannel),
    Cm {
        ch: EventChannel,
        id: CmId,
        /// Kept alive until the end (the server's).
        _listener: Option<CmId>,
    },
}

impl Link {
    pub fn kind(&self) -> &'static str {
        match self {
            Link::Tcp(_) => "loopback",
            Link::Cm { .. } => "cm",
        }
    }

    /// The end of the run, `timeout` for the peer to get there: over TCP
    /// both say "done"; over the cm the client disconnects and the server
    /// answers.
    pub fn finish(self, server: bool, timeout: Duration) -> Result<()> {
        match self {
            Link::Tcp(mut chan) => chan.sync("done", timeout),
            Link::Cm { ch, id, .. } => {
                if server {
                    let ev = next(&ch, "the client's disconnect", timeout)?;
                    if !matches!(ev.kind, EventKind::Disconnected) {
                        return Err(unexpected("the client's disconnect", &ev));
                    }
                    id.disconnect()?;
                } else {
                    id.disconnect()?;
                    let ev = next(&ch, "disconnect", WAIT)?;
                    if !matches!(ev.kind, EventKind::Disconnected) {
                        return Err(unexpected("disconnect", &ev));
                    }
                }
                Ok(())
            }
        }
    }
}

/// A connected side: the context, the QP and the peer's target area.
pub struct Connected {
    pub side: Side,
    pub peer: Remote,
    pub link: Link,
    /// Last, so the QP goes before its context's file.
    pub ctx: Context,
}

/// The connection parameters perftest's `-R` sends (perftest_communication.c):
/// responder resources and initiator depth `out_reads` for its READ
/// tests, 0 for the others; retry and RNR retry 7.
fn conn_param(side: &Side, opts: &Options) -> ConnParam {
    let reads = if opts.test == super::Test::ReadLat {
        side.out_reads
    } else {
        0
    };
    ConnParam::new(side.qp.qp_num())
        .responder_resources(reads)
        .initiator_depth(reads)
}

/// Connects to `addr` within [`WAIT`], retrying while the server is not
/// there yet.
fn connect_tcp(addr: &str, port: u16) -> Result<TcpStream> {
    let target: SocketAddr = (addr, port)
        .to_socket_addrs()
        .map_err(|e| format!("{addr}: {e}"))?
        .next()
        .ok_or(format!("{addr}: no address"))?;
    let deadline = Instant::now() + WAIT;
    loop {
        match TcpStream::connect_timeout(&target, WAIT) {
            Ok(s) => return Ok(s),
            Err(e) if Instant::now() >= deadline => {
                return Err(format!("connect {target}: {e}").into())
            }
            Err(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    }
}

/// Called once the server is listening (the self-test waits for it).
fn listening(what: &str) {
    println!("perf server: listening on {what}");
    let _ = std::io::stdout().flush();
}

/// The by-hand connection: the server listens on 0.0.0.0:port, the
/// client connects to `server`; each sends a Hello line and its Endpoint.
pub fn by_hand(opts: &Options, server: Option<&str>, tx_depth: usize) -> Result<Connected> {
    let stream = match server {
        None => {
            let listener = TcpListener::bind(("0.0.0.0", opts.port))
                .map_err(|e| format!("listen on port {}: {e}", opts.port))?;
            listening(&format!("0.0.0.0:{} (tcp)", opts.port));
            accept_within(&listener, WAIT, || Ok(()))?
        }
        Some(addr) => connect_tcp(addr, opts.port)?,
    };
    let mut chan = LineChannel::new(stream, WAIT)?;
    let ctx = open(&opts.device)?;
    let side = Side::new(&ctx, opts, tx_depth)?;
    let me = side.endpoint()?;
    let hello = Hello::new(opts, &side);
    chan.send(&format!(
        "{} {} {} {}",
        hello.test, hello.size, hello.iters, me
    ))?;
    let line = chan.recv("the peer's hello")?;
    let fields: Vec<&str> = line.split(' ').collect();
    if fields.len() != 4 {
        return Err(format!("the peer's hello {line:?} is not 4 fields").into());
    }
    let num = |s: &str| {
        s.parse::<u32>()
            .map_err(|_| format!("the peer's hello {line:?}"))
    };
    let peer_ep: Endpoint = fields[3].parse()?;
    let peer = Hello {
        test: num(fields[0])? as u8,
        size: num(fields[1])?,
        iters: num(fields[2])?,
        remote: peer_ep.remote(),
    };
    hello.check(&peer)?;
    side.connect_by_hand(&ctx, &me, &peer_ep)?;
    side.post_initial_recvs()?;
    chan.sync("ready", WAIT)?;
    Ok(Connected {
        side,
        peer: peer.remote,
        link: Link::Tcp(chan),
        ctx,
    })
}

// ---- Through the rdma_cm ----------------------------------------------

/// The next event within `timeout`.
fn next(ch: &EventChannel, what: &str, timeout: Duration) -> Result<Event> {
    ch.wait_event(timeout)?
        .ok_or_else(|| format!("{what}: no cm event within {timeout:?}").into())
}

fn unexpected(what: &str, ev: &Event) -> Box<dyn std::error::Error> {
    format!("{what}: {} (status {})", ev.name(), ev.status).into()
}

/// Opens `--device` and checks the cm id landed on it: the node GUID
/// (rxe and siw on one host share it) and the id's source GID in its table.
fn context_for(id: &CmId, opts: &Options) -> Result<Context> {
    let ctx = open(&opts.device)?;
    let sgid = id.query_route()?.first.sgid;
    let in_table = ctx.query_gid_table()?.iter().any(|g| g.gid.raw() == sgid);
    if !id.is_on(&ctx)? || !in_table {
        return Err(format!(
            "the cm id for {} is not on {} (pick the address of that device's netdev)",
            opts.cm.as_deref().unwrap_or("?"),
            opts.device
        )
        .into());
    }
    Ok(ctx)
}

/// Moves the QP with the cm's attributes (an iWARP RTS answer has no
/// state: applied, the QP stays where it is until the CM moves it).
fn to(id: &CmId, side: &Side, state: QpState) -> Result<()> {
    side.qp.modify(&id.init_qp_attr(state)?)?;
    Ok(())
}

/// On iWARP the kernel's CM moved the QP to RTS at establishment: learn it.
fn learn_rts(side: &Side) -> Result<()> {
    if side.qp.transport_type() == TransportType::Iwarp {
        let state = side.qp.established()?;
        if state != QpState::Rts {
            return Err(format!("the QP is in {state:?} after ESTABLISHED, not RTS").into());
        }
    }
    Ok(())
}

/// The id of the server's receive for the client's start signal.
const START_ID: u64 = u64::MAX;

/// Polls `cq` for one successful completion within [`WAIT`].
fn wait_one(cq: &uverbs::CompletionQueue, what: &str) -> Result<uverbs::WorkCompletion> {
    let mut wcs = [uverbs::WorkCompletion::default(); 1];
    let deadline = Instant::now() + WAIT;
    loop {
        if cq.poll(&mut wcs)? == 1 {
            if wcs[0].status() != uverbs::WcStatus::Success {
                return Err(format!("{what}: {:?}", wcs[0]).into());
            }
            return Ok(wcs[0]);
        }
        if Instant::now() >= deadline {
            return Err(format!("{what}: no completion within {WAIT:?}").into());
        }
        std::thread::yield_now();
    }
}

/// The client's one-byte SEND that starts a cm run: the server sends
/// nothing before it arrived. On iWARP the passive side hears ESTABLISHED
/// once its MPA reply is out; a WRITE sent right behind the reply reaches
/// the active side while siw still parses the reply, which it takes for a
/// protocol violation ("peer sent extra data": the connect fails with
/// EINVAL). perftest's rdma_cm runs start with a handshake over the QP too.
fn start_signal(side: &Side) -> Result<()> {
    let sge = [Sge {
        length: 1,
        ..side.sge(side.source())
    }];
    let wr = uverbs::SendWr::new(
        START_ID,
        uverbs::SendOp::Send { imm: None },
        uverbs::Payload::Sges(&sge),
    );
    // SAFETY: the source's first byte, not written before this SEND's
    // completion, polled right here.
    unsafe { side.qp.post_send(&[wr])? };
    wait_one(&side.scq, "the start signal's SEND")?;
    Ok(())
}

fn private(hello: Hello) -> [u8; 21] {
    hello.to_bytes()
}

/// The cm connection: the server listens on `addr:port`, the client
/// resolves and connects to it; the Hellos travel as private data.
pub fn by_cm(opts: &Options, addr: &str, server: bool, tx_depth: usize) -> Result<Connected> {
    let ip: std::net::IpAddr = addr
        .parse()
        .map_err(|_| format!("--cm wants an IP address, got {addr:?}"))?;
    let sa = SocketAddr::new(ip, opts.port);
    let ch = EventChannel::open()?;
    if server {
        let listener = ch.create_id(PortSpace::Tcp)?;
        listener
            .bind(sa)
            .map_err(|e| format!("cm bind {sa}: {e}"))?;
        listener.listen(1)?;
        listening(&format!("{sa} (rdma_cm)"));
        let ev = next(&ch, "the connect request", WAIT)?;
        let EventKind::ConnectRequest { id, param } = ev.kind else {
            return Err(unexpected("the listener", &ev));
        };
        let Param::Conn(request) = param else {
            return Err("the connect request carries no connection parameters".into());
        };
        let peer = Hello::from_bytes(&request.private_data)?;
        let ctx = context_for(&id, opts)?;
        let side = Side::new(&ctx, opts, tx_depth)?;
        let hello = Hello::new(opts, &side);
        hello.check(&peer)?;
        to(&id, &side, QpState::Init)?;
        // First in the queue: the receive the client's start signal takes.
        side.post_recv(START_ID)?;
        side.post_initial_recvs()?;
        to(&id, &side, QpState::Rtr)?;
        to(&id, &side, QpState::Rts)?;
        id.accept(&conn_param(&side, opts).private_data(&private(hello))?)?;
        let ev = next(&ch, "accept", WAIT)?;
        if !matches!(ev.kind, EventKind::Established(_)) {
            return Err(unexpected("accept", &ev));
        }
        learn_rts(&side)?;
        let wc = wait_one(&side.rcq, "the client's start signal")?;
        if wc.wr_id() != START_ID {
            return Err(format!("the start signal landed in receive {}", wc.wr_id()).into());
        }
        Ok(Connected {
            side,
            peer: peer.remote,
            link: Link::Cm {
                ch,
                id,
                _listener: Some(listener),
            },
            ctx,
        })
    } else {
        let id = ch.create_id(PortSpace::Tcp)?;
        id.resolve_addr(None, sa, RESOLVE_MS)
            .map_err(|e| format!("resolve_addr {sa}: {e}"))?;
        let ev = next(&ch, "resolve_addr", WAIT)?;
        if !matches!(ev.kind, EventKind::AddrResolved) {
            return Err(unexpected(&format!("resolve_addr {sa}"), &ev));
        }
        id.resolve_route(RESOLVE_MS)?;
        let ev = next(&ch, "resolve_route", WAIT)?;
        if !matches!(ev.kind, EventKind::RouteResolved) {
            return Err(unexpected(&format!("resolve_route {sa}"), &ev));
        }
        let ctx = context_for(&id, opts)?;
        let side = Side::new(&ctx, opts, tx_depth)?;
        let hello = Hello::new(opts, &side);
        to(&id, &side, QpState::Init)?;
        side.post_initial_recvs()?;
        id.connect(&conn_param(&side, opts).private_data(&private(hello))?)?;
        let ev = next(&ch, "connect", WAIT)?;
        let peer = match &ev.kind {
            // RoCE: the response, then INIT again (only a connected id's
            // attributes grant remote access), RTR, RTS and the RTU.
            EventKind::ConnectResponse(Param::Conn(p)) => {
                let peer = Hello::from_bytes(&p.private_data)?;
                to(&id, &side, QpState::Init)?;
                to(&id, &side, QpState::Rtr)?;
                to(&id, &side, QpState::Rts)?;
                id.establish()?;
                peer
            }
            // iWARP: the kernel's CM drove the QP; ESTABLISHED carries the
            // accept's private data.
            EventKind::Established(Param::Conn(p)) => {
                let peer = Hello::from_bytes(&p.private_data)?;
                learn_rts(&side)?;
                peer
            }
            _ => return Err(unexpected(&format!("connect to {sa}"), &ev)),
        };
        hello.check(&peer)?;
        start_signal(&side)?;
        Ok(Connected {
            side,
            peer: peer.remote,
            link: Link::Cm {
                ch,
                id,
                _listener: None,
            },
            ctx,
        })
    }
}
