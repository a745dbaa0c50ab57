//! One side of a perf run: its buffer, MR, CQs and RC QP, and the two ways
//! of connecting it, both perftest's (`wire.rs` has the messages): by hand
//! (RoCE; perftest's exchange over TCP, perftest's default) or through the
//! rdma_cm (`--cm`, perftest's `-R`: a control connection carries the
//! exchange, a second one is the measured QP).
//!
//! The buffer holds two areas, each page-aligned and at least `size` and
//! the agreed cycle buffer long: the *source* (what this side sends or
//! writes from) and the *target* (what the peer writes or reads, and where
//! receives land), then a control page for send_bw's receive credits on
//! iWARP (the word a server's credit WRITEs go from, and the word a
//! client's credits land in; [`Side::credits`]).

use std::io::Write;
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use memmap2::MmapMut;
use uverbs::cm::{CmId, ConnParam, Event, EventChannel, EventKind, PortSpace};
use uverbs::device::{DriverId, GidType, OpenOptions, TransportType};
use uverbs::qp::{Mtu, QpAttr, QpState};
use uverbs::wr::{RecvWr, Remote, Sge};
use uverbs::{AccessFlags, CompletionQueue, Context, MemoryRegion, QpInit, QpType, QueuePair};

use super::accept::accept_within;
use super::wire::{v4_mapped, Control, ControlQp, Dest};
use super::{Options, Result, Test, WAIT};

const PORT: u8 = 1;
/// Address and route resolution time-outs handed to the kernel (ms).
const RESOLVE_MS: u32 = 2000;
/// How long a refused connect waits before it tries again (perftest's
/// client retries every 100 ms; its server may not listen yet).
const RETRY_AFTER: Duration = Duration::from_millis(100);
/// Access for our MR and (by hand) our QP: the peer writes and reads it.
const ACCESS: AccessFlags = AccessFlags::LOCAL_WRITE
    .union(AccessFlags::REMOTE_WRITE)
    .union(AccessFlags::REMOTE_READ);

fn page(n: usize) -> usize {
    n.div_ceil(4096) * 4096
}

/// Opens `name`; only rxe and siw have a data path in uverbs.
pub fn open(name: &str) -> Result<Context> {
    let dev = uverbs::Device::by_name(name)?;
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
    /// perftest's receive credits (`send_rcredit`, send_bw on iWARP,
    /// which has no RNR retry): the server WRITEs its receive count into
    /// the client's credit word every `rx_depth / 3` receives, and the
    /// client keeps fewer than `rx_depth` SENDs beyond the last count. Our
    /// keys then name the credit word, not the target area.
    pub credits: bool,
    /// The length of each area (page-aligned, at least `size` and the
    /// agreed cycle buffer).
    area: usize,
}

/// The control page after the two areas: the count a server WRITEs as
/// its credit (perftest's `ctrl_buf`) and, a cache line on, the word the
/// peer's credit lands in (`credit_buf`).
const CTRL_PAGE: usize = 4096;
const CREDIT_AT: usize = 64;

impl Side {
    /// A QP with `tx_depth` send slots, `rx_depth` receive slots and room
    /// for `--inline` bytes, by default perftest's
    /// ([`perftest_default_inline`]); less if the device refuses that: the
    /// largest it accepts.
    pub fn new(
        ctx: &Context,
        opts: &Options,
        tx_depth: usize,
        cycle_buffer: usize,
    ) -> Result<Side> {
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
                // One more for the cm's start signal.
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
        // The peer may address the whole cycle buffer of our target area
        // (perftest's writes walk it when the size is at most half of it).
        let area = page(size.max(cycle_buffer));
        let mut buf = MmapMut::map_anon(2 * area + CTRL_PAGE)?;
        // SAFETY: `buf` is a mapping of its own that outlives the MR (see
        // the field order of `Side`).
        let mr = unsafe { pd.reg_mr(buf.as_mut_ptr(), buf.len(), ACCESS)? };
        // send_bw.c: `if (transport_type == IBV_TRANSPORT_IWARP)
        // ctx.send_rcredit = 1`.
        let credits = opts.test == Test::SendBw && qp.transport_type() == TransportType::Iwarp;
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
            credits,
            area,
        })
    }

    /// Address of the word our credit WRITEs go from (server).
    pub fn ctrl_word(&self) -> u64 {
        self.source() + 2 * self.area as u64
    }

    /// Address of the word the peer's credit WRITEs land in (client).
    pub fn credit_word(&self) -> u64 {
        self.ctrl_word() + CREDIT_AT as u64
    }

    /// Address of the source area.
    pub fn source(&self) -> u64 {
        self.buf.as_ptr() as u64
    }

    /// Address of the target area.
    pub fn target(&self) -> u64 {
        self.source() + self.area as u64
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

    /// Our keys: QP, PSN, the target area (with receive credits the
    /// credit word) and the GID at `gid_index` (LID 0: RoCE and iWARP have
    /// none).
    fn dest(&self, ctx: &Context, gid_index: u32) -> Result<Dest> {
        let gid = ctx
            .query_gid_table()?
            .into_iter()
            .find(|e| e.port_num == PORT && e.gid_index == gid_index)
            .ok_or(format!(
                "{}: no GID {gid_index} on port {PORT}",
                ctx.device_name()
            ))?;
        Ok(Dest {
            lid: 0,
            out_reads: u32::from(self.out_reads),
            qpn: self.qp.qp_num(),
            psn: std::process::id() & 0xff_ffff,
            rkey: self.mr.rkey(),
            // With credits perftest's keys name its credit word
            // (`ctx_alloc_credit`): where the server's credits land.
            vaddr: if self.credits {
                self.credit_word()
            } else {
                self.target()
            },
            gid: gid.gid.raw(),
            srqn: 0,
        })
    }

    /// RESET -> INIT -> RTR -> RTS towards `peer` with perftest's values
    /// (`ctx_connect`): the agreed MTU, the peer's GID from ours at
    /// `gid_index` with hop limit 255, timeout 14 (DEF_QP_TIME), retry 7,
    /// RNR retry 7, min RNR timer 12, our `out_reads` as the READs we
    /// answer and the peer's as those we send.
    fn connect_by_hand(&self, me: &Dest, peer: &Dest, gid_index: u32, mtu: Mtu) -> Result<()> {
        let peer_reads = u8::try_from(peer.out_reads)
            .map_err(|_| format!("the peer's out_reads {} is too large", peer.out_reads))?;
        let sgid = u8::try_from(gid_index).map_err(|_| "the GID index is too large")?;
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
            .av(QpAttr::roce_dest(
                uverbs::device::Gid::from_raw(peer.gid),
                sgid,
                0xff,
                PORT,
            ));
        let rts = QpAttr::new()
            .state(QpState::Rts)
            .timeout(14)
            .retry_cnt(7)
            .rnr_retry(7)
            .sq_psn(me.psn)
            .max_rd_atomic(peer_reads);
        for attr in [init, rtr, rts] {
            self.qp.modify(&attr)?;
        }
        Ok(())
    }
}

/// perftest's choice of GID (`get_best_gid_index`) when `-x` is not given:
/// walking the table from index 1, an IPv4-mapped GID beats one that is
/// not, and otherwise a RoCE v2 GID beats a v1 one.
fn best_gid_index(ctx: &Context) -> Result<u32> {
    let table: Vec<_> = ctx
        .query_gid_table()?
        .into_iter()
        .filter(|e| e.port_num == PORT)
        .collect();
    let mut best = match table.iter().min_by_key(|e| e.gid_index) {
        Some(e) => e,
        None => return Err(format!("{}: the GID table is empty", ctx.device_name()).into()),
    };
    for rival in &table {
        let (b4, r4) = (v4_mapped(&best.gid.raw()), v4_mapped(&rival.gid.raw()));
        if (r4 && !b4)
            || (r4 == b4 && rival.gid_type == GidType::RoceV2 && best.gid_type != GidType::RoceV2)
        {
            best = rival;
        }
    }
    Ok(best.gid_index)
}

/// The key exchanges of perftest's test programs once the resources exist
/// (write_lat.c, read_lat.c, send_lat.c, write_bw.c, send_bw.c): one
/// (two for write_lat and read_lat) before the QPs are connected by hand
/// (`connect`; nothing over the cm), two after, and for the SEND tests one
/// more once the receives are posted. The peer's last keys.
fn hand_shakes(
    ctl: &mut Control,
    client: bool,
    me: &Dest,
    side: &Side,
    test: Test,
    connect: impl FnOnce(&Dest) -> Result<()>,
) -> Result<Dest> {
    let before = if matches!(test, Test::WriteLat | Test::ReadLat) {
        2
    } else {
        1
    };
    let mut peer = Dest::default();
    for _ in 0..before {
        peer = ctl.keys(client, me, "the keys", WAIT)?;
    }
    connect(&peer)?;
    for _ in 0..2 {
        peer = ctl.keys(client, me, "the keys after connecting", WAIT)?;
    }
    if test.uses_recv() {
        side.post_initial_recvs()?;
        peer = ctl.keys(client, me, "the hand shake after posting receives", WAIT)?;
    }
    Ok(peer)
}

/// The peer's target area as its keys name it.
fn remote(peer: &Dest) -> Remote {
    Remote {
        addr: peer.vaddr,
        rkey: peer.rkey,
    }
}

/// The rdma_cm's part of a `--cm` run: the event channel, the control and
/// data connections' ids (and the server's listener).
pub struct CmLink {
    ch: EventChannel,
    data: CmId,
    control: CmId,
    _listener: Option<CmId>,
}

/// How the two sides are connected, and what ends the run.
pub struct Link {
    ctl: Control,
    me: Dest,
    test: Test,
    size: usize,
    iters: usize,
    cm: Option<CmLink>,
}

impl Link {
    pub fn kind(&self) -> &'static str {
        match self.cm {
            None => "loopback",
            Some(_) => "cm",
        }
    }

    /// The end of the run as perftest ends it ([`Ending::of`]), `timeout`
    /// for the peer to get there: for write_bw a key exchange and the
    /// client's report, then (all but write_lat) the closing key exchange
    /// and over TCP "done"; over the cm both connections are
    /// disconnected.
    pub fn finish(mut self, server: bool, timeout: Duration) -> Result<()> {
        let client = !server;
        let side = if client { "client" } else { "server" };
        let ending = Ending::of(self.test);
        if ending == Ending::ReportThenClose {
            self.ctl
                .keys(client, &self.me, "the hand shake after the run", timeout)?;
            let mine = if client {
                let secs = super::run::BW_ELAPSED_NS.load(std::sync::atomic::Ordering::Relaxed)
                    as f64
                    / 1e9;
                let bytes = (self.size * self.iters) as f64;
                let (avg, rate) = if secs > 0.0 {
                    (bytes / 1048576.0 / secs, self.iters as f64 / secs / 1e6)
                } else {
                    (0.0, 0.0)
                };
                // No peak is measured: the average stands in for it.
                ([self.size as u64, self.iters as u64], [avg, avg, rate])
            } else {
                // perftest's server sends its (unmeasured) report too.
                ([0, 0], [0.0; 3])
            };
            let (ints, f) = self.ctl.reports(client, mine, timeout)?;
            if server {
                println!(
                    "perf server: the client reports {} x {} B at {:.2} MiB/s, {:.6} Mpps",
                    ints[1], ints[0], f[1], f[2]
                );
            }
        }
        if ending != Ending::Nothing {
            self.ctl
                .keys(client, &self.me, "the closing hand shake", timeout)?;
            self.ctl.done();
        }
        if let Some(cm) = self.cm.take() {
            cm.disconnect(side);
        }
        println!(
            "perf {side}: the run ended as ib_{}'s does: {}",
            self.test.name(),
            ending.describe()
        );
        Ok(())
    }
}

/// What perftest 4.5's test programs exchange after their measured loop
/// (src/write_lat.c, send_lat.c, read_lat.c, write_bw.c, send_bw.c).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ending {
    /// write_lat: nothing. write_lat.c goes from its report straight to
    /// `destroy_ctx` (no `ctx_close_connection`): no key exchange, no
    /// "done"; the TCP socket closes (or, with `-R`, the cm connections
    /// go) with the process. Its loop is its own end: the server's last
    /// step is seeing the client's last WRITE, the client's the
    /// completion of that WRITE.
    Nothing,
    /// send_lat, read_lat (its server from the start: it only answers
    /// READs), send_bw: `ctx_close_connection`, one key exchange and
    /// over TCP "done".
    Close,
    /// write_bw: a key exchange, the reports (`xchg_bw_reports`), then
    /// `ctx_close_connection`.
    ReportThenClose,
}

impl Ending {
    pub fn of(test: Test) -> Ending {
        match test {
            Test::WriteLat => Ending::Nothing,
            Test::SendLat | Test::ReadLat | Test::SendBw => Ending::Close,
            Test::WriteBw => Ending::ReportThenClose,
        }
    }

    fn describe(self) -> &'static str {
        match self {
            Ending::Nothing => "no closing exchange",
            Ending::Close => "the closing exchange",
            Ending::ReportThenClose => "the report and the closing exchange",
        }
    }
}

impl CmLink {
    /// Disconnects both connections and waits (at most [`WAIT`]) for their
    /// DISCONNECTED events. The run is over: what goes wrong here is
    /// reported, not failed (perftest's server does not even wait).
    fn disconnect(self, side: &str) {
        let mut open = vec![
            (self.data.handle(), "data"),
            (self.control.handle(), "control"),
        ];
        for id in [&self.data, &self.control] {
            if let Err(e) = id.disconnect() {
                println!("perf {side}: rdma_disconnect: {e} (the peer was first)");
            }
        }
        let deadline = Instant::now() + WAIT;
        while !open.is_empty() {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.ch.wait_event(left) {
                Ok(Some(ev)) if matches!(ev.kind, EventKind::Disconnected) => {
                    open.retain(|(h, _)| *h != ev.id);
                }
                Ok(Some(_)) => {}
                Ok(None) | Err(_) => break,
            }
        }
        for (_, what) in open {
            println!("perf {side}: no DISCONNECTED for the {what} connection within {WAIT:?}");
        }
    }
}

/// A connected side: the context, the QP and the peer's target area.
pub struct Connected {
    pub side: Side,
    pub peer: Remote,
    pub link: Link,
    /// Last, so the QPs go before their context's file.
    pub ctx: Context,
}

impl Connected {
    /// The connection of `side` to `peer`, with the control channel `ctl`,
    /// our own end `me`, the run's options and, where the cm connected it,
    /// the cm's ids.
    fn new(
        ctx: Context,
        side: Side,
        peer: &Dest,
        ctl: Control,
        me: Dest,
        opts: &Options,
        cm: Option<CmLink>,
    ) -> Connected {
        Connected {
            side,
            peer: remote(peer),
            link: Link {
                ctl,
                me,
                test: opts.test,
                size: opts.size,
                iters: opts.iters,
                cm,
            },
            ctx,
        }
    }
}

/// The connection parameters perftest's `-R` sends (perftest_communication.c):
/// responder resources and initiator depth `out_reads` for its READ
/// tests, 0 for the others; retry and RNR retry 7; no private data.
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

/// The port's active MTU, what perftest offers by default.
fn port_mtu(ctx: &Context) -> Result<Mtu> {
    ctx.query_port(PORT)?
        .active_mtu()
        .ok_or_else(|| "the port reports an unknown active MTU".into())
}

/// The by-hand connection: the server listens on 0.0.0.0:port, the
/// client connects to `server`; then perftest's exchange over TCP, the
/// QPs connected between its key exchanges.
pub fn by_hand(opts: &Options, server: Option<&str>, tx_depth: usize) -> Result<Connected> {
    let client = server.is_some();
    let stream = match server {
        None => {
            let listener = TcpListener::bind(("0.0.0.0", opts.port))
                .map_err(|e| format!("listen on port {}: {e}", opts.port))?;
            listening(&format!("0.0.0.0:{} (tcp)", opts.port));
            accept_within(&listener, WAIT, || Ok(()))?
        }
        Some(addr) => connect_tcp(addr, opts.port)?,
    };
    let mut ctl = Control::tcp(stream)?;
    let ctx = open(&opts.device)?;
    let agreed = ctl.preamble(client, port_mtu(&ctx)?, WAIT)?;
    let side = Side::new(&ctx, opts, tx_depth, agreed.cycle_buffer)?;
    let gid_index = match opts.gid_index {
        Some(i) => i,
        None => best_gid_index(&ctx)?,
    };
    let me = side.dest(&ctx, gid_index)?;
    let peer = hand_shakes(&mut ctl, client, &me, &side, opts.test, |peer| {
        // perftest's ctx_check_gid_compatibility.
        if v4_mapped(&me.gid) != v4_mapped(&peer.gid) {
            return Err(format!(
                "our GID {} and the peer's {} are not both IPv4-mapped or both not \
                 (perftest refuses that too; pick another --gid-index / -x)",
                uverbs::device::Gid::from_raw(me.gid),
                uverbs::device::Gid::from_raw(peer.gid)
            )
            .into());
        }
        side.connect_by_hand(&me, peer, gid_index, agreed.mtu)
    })?;
    Ok(Connected::new(ctx, side, &peer, ctl, me, opts, None))
}

// ---- Through the rdma_cm ----------------------------------------------

/// The next event within `timeout` that `want` accepts; events of other
/// ids are passed over, but a DISCONNECTED of any is an error.
fn next_where(
    ch: &EventChannel,
    what: &str,
    timeout: Duration,
    want: impl Fn(&Event) -> bool,
) -> Result<Event> {
    let deadline = Instant::now() + timeout;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let ev = ch
            .wait_event(left)?
            .ok_or_else(|| format!("{what}: no cm event within {timeout:?}"))?;
        if want(&ev) {
            return Ok(ev);
        }
        if matches!(ev.kind, EventKind::Disconnected) {
            return Err(format!("{what}: the peer disconnected").into());
        }
    }
}

/// The next event of `id`.
fn next_of(ch: &EventChannel, id: &CmId, what: &str) -> Result<Event> {
    let handle = id.handle();
    next_where(ch, what, WAIT, |ev| ev.id == handle)
}

fn unexpected(what: &str, ev: &Event) -> Box<dyn std::error::Error> {
    format!("{what}: {} (status {})", ev.name(), ev.status).into()
}

/// Checks the cm id landed on `ctx`, `--device`: the node GUID (rxe and
/// siw on one host share it) and the id's source GID in its table.
fn check_on(id: &CmId, ctx: &Context, opts: &Options) -> Result<()> {
    let sgid = id.query_route()?.first.sgid;
    let in_table = ctx.query_gid_table()?.iter().any(|g| g.gid.raw() == sgid);
    if !id.is_on(ctx)? || !in_table {
        return Err(format!(
            "the cm id for {} is not on {} (pick the address of that device's netdev)",
            opts.cm.as_deref().unwrap_or("?"),
            opts.device
        )
        .into());
    }
    Ok(())
}

/// Moves the QP with the cm's attributes (an iWARP RTS answer has no
/// state: applied, the QP stays where it is until the CM moves it).
fn to(id: &CmId, qp: &QueuePair, state: QpState) -> Result<()> {
    qp.modify(&id.init_qp_attr(state)?)?;
    Ok(())
}

/// On iWARP the kernel's CM moved the QP to RTS at establishment: learn it.
fn learn_rts(qp: &QueuePair) -> Result<()> {
    if qp.transport_type() == TransportType::Iwarp {
        let state = qp.established()?;
        if state != QpState::Rts {
            return Err(format!("the QP is in {state:?} after ESTABLISHED, not RTS").into());
        }
    }
    Ok(())
}

/// A QP a cm connection is made for.
trait CmQp {
    fn qp(&self) -> &QueuePair;
    /// What is posted before connecting (the control QP's receive).
    fn before_connect(&self) -> Result<()>;
}

impl CmQp for ControlQp {
    fn qp(&self) -> &QueuePair {
        &self.qp
    }
    fn before_connect(&self) -> Result<()> {
        self.post_recv()
    }
}

impl CmQp for Side {
    fn qp(&self) -> &QueuePair {
        &self.qp
    }
    fn before_connect(&self) -> Result<()> {
        Ok(())
    }
}

/// The client's side of one cm connection to `sa`, made again (new id, new
/// QP from `make`) while the server refuses it, within [`WAIT`].
fn cm_connect<Q: CmQp>(
    ch: &EventChannel,
    sa: SocketAddr,
    ctx: &Context,
    opts: &Options,
    what: &str,
    mut make: impl FnMut() -> Result<Q>,
    param: impl Fn(&Q) -> ConnParam,
) -> Result<(CmId, Q)> {
    let deadline = Instant::now() + WAIT;
    let mut attempt = 1;
    loop {
        let id = ch.create_id(PortSpace::Tcp)?;
        let why = match cm_connect_once(ch, &id, sa, ctx, opts, what, &mut make, &param)? {
            Ok(q) => return Ok((id, q)),
            Err(why) => why,
        };
        if Instant::now() + RETRY_AFTER >= deadline {
            return Err(format!("{what} to {sa}: {why} ({attempt} attempts)").into());
        }
        // Said, so that a run whose peer then stays silent shows whether
        // an earlier attempt may have reached it.
        println!("perf client: {what}: attempt {attempt} to {sa}: {why}; trying again");
        attempt += 1;
        std::thread::sleep(RETRY_AFTER);
    }
}

/// One attempt of [`cm_connect`]: `Ok(Err(why))` when the server is not
/// there yet (refused, rejected, unreachable).
#[allow(clippy::too_many_arguments)]
fn cm_connect_once<Q: CmQp>(
    ch: &EventChannel,
    id: &CmId,
    sa: SocketAddr,
    ctx: &Context,
    opts: &Options,
    what: &str,
    make: &mut impl FnMut() -> Result<Q>,
    param: &impl Fn(&Q) -> ConnParam,
) -> Result<std::result::Result<Q, String>> {
    id.resolve_addr(None, sa, RESOLVE_MS)
        .map_err(|e| format!("{what}: resolve_addr {sa}: {e}"))?;
    let ev = next_of(ch, id, what)?;
    if !matches!(ev.kind, EventKind::AddrResolved) {
        return Err(unexpected(&format!("{what}: resolve_addr {sa}"), &ev));
    }
    id.resolve_route(RESOLVE_MS)?;
    let ev = next_of(ch, id, what)?;
    if !matches!(ev.kind, EventKind::RouteResolved) {
        return Err(unexpected(&format!("{what}: resolve_route {sa}"), &ev));
    }
    check_on(id, ctx, opts)?;
    let q = make()?;
    to(id, q.qp(), QpState::Init)?;
    q.before_connect()?;
    match id.connect(&param(&q)) {
        Ok(()) => {}
        // iWARP connects the TCP stream in the call.
        Err(e) if e.errno() == Some(uverbs::error::Errno::CONNREFUSED) => {
            return Ok(Err(format!("rdma_connect: {e}")));
        }
        Err(e) => return Err(format!("{what}: rdma_connect: {e}").into()),
    }
    let ev = next_of(ch, id, what)?;
    match &ev.kind {
        // RoCE: the response, then INIT again (only a connected id's
        // attributes grant remote access), RTR, RTS and the RTU.
        EventKind::ConnectResponse(_) => {
            to(id, q.qp(), QpState::Init)?;
            to(id, q.qp(), QpState::Rtr)?;
            to(id, q.qp(), QpState::Rts)?;
            id.establish()?;
        }
        // iWARP: the kernel's CM drove the QP.
        EventKind::Established(_) => learn_rts(q.qp())?,
        EventKind::Rejected { .. } | EventKind::Unreachable | EventKind::ConnectError => {
            return Ok(Err(format!("{} (status {})", ev.name(), ev.status)));
        }
        _ => return Err(unexpected(&format!("{what}: connect to {sa}"), &ev)),
    }
    Ok(Ok(q))
}

/// The server's side of one cm connection: the next connect request on
/// the listener's channel, accepted with a QP from `make`.
fn cm_accept<Q: CmQp>(
    ch: &EventChannel,
    ctx: &Context,
    opts: &Options,
    what: &str,
    make: impl FnOnce() -> Result<Q>,
    param: impl Fn(&Q) -> ConnParam,
) -> Result<(CmId, Q)> {
    let ev = next_where(ch, what, WAIT, |ev| {
        matches!(ev.kind, EventKind::ConnectRequest { .. })
    })?;
    let EventKind::ConnectRequest { id, .. } = ev.kind else {
        return Err(unexpected(what, &ev));
    };
    check_on(&id, ctx, opts)?;
    let q = make()?;
    to(&id, q.qp(), QpState::Init)?;
    q.before_connect()?;
    to(&id, q.qp(), QpState::Rtr)?;
    to(&id, q.qp(), QpState::Rts)?;
    id.accept(&param(&q))
        .map_err(|e| format!("{what}: rdma_accept: {e}"))?;
    let ev = next_of(ch, &id, what)?;
    if !matches!(ev.kind, EventKind::Established(_)) {
        return Err(unexpected(&format!("{what}: accept"), &ev));
    }
    learn_rts(q.qp())?;
    Ok((id, q))
}

/// One side of perftest's cm connections to `sa`: the server accepts on
/// the listener's channel `ch`, the client connects.
struct CmLinkTo<'a> {
    ch: &'a EventChannel,
    sa: SocketAddr,
    ctx: &'a Context,
    opts: &'a Options,
    server: bool,
}

impl CmLinkTo<'_> {
    /// The next connection, its QP from `make` ([`cm_accept`] or
    /// [`cm_connect`]).
    fn make<Q: CmQp>(
        &self,
        what: &str,
        make: impl FnMut() -> Result<Q>,
        param: impl Fn(&Q) -> ConnParam,
    ) -> Result<(CmId, Q)> {
        if self.server {
            cm_accept(self.ch, self.ctx, self.opts, what, make, param)
        } else {
            cm_connect(self.ch, self.sa, self.ctx, self.opts, what, make, param)
        }
    }
}

/// The cm connection, perftest's `-R`: the server listens on
/// `addr:port`; the client connects a control QP there, the two swap
/// perftest's preamble over it and a (still empty) key exchange, the
/// client connects the measured QP to the same port, another key
/// exchange follows, and then the test's own (`hand_shakes`).
pub fn by_cm(opts: &Options, addr: &str, server: bool, tx_depth: usize) -> Result<Connected> {
    let ip: std::net::IpAddr = addr
        .parse()
        .map_err(|_| format!("--cm wants an IP address, got {addr:?}"))?;
    let sa = SocketAddr::new(ip, opts.port);
    let ch = EventChannel::open()?;
    let ctx = open(&opts.device)?;
    let client = !server;
    // Kept until the end: perftest's client connects twice.
    let listener = if server {
        let listener = ch.create_id(PortSpace::Tcp)?;
        listener
            .bind(sa)
            .map_err(|e| format!("cm bind {sa}: {e}"))?;
        listener.listen(2)?;
        listening(&format!("{sa} (rdma_cm)"));
        Some(listener)
    } else {
        None
    };
    let link = CmLinkTo {
        ch: &ch,
        sa,
        ctx: &ctx,
        opts,
        server,
    };
    let (control, cq) = link.make(
        "the control connection",
        || ControlQp::new(&ctx),
        |q: &ControlQp| ConnParam::new(q.qp.qp_num()),
    )?;
    let mut ctl = Control::Qp(Box::new(cq));
    let agreed = ctl.preamble(client, port_mtu(&ctx)?, WAIT)?;
    let empty = Dest::default();
    ctl.keys(
        client,
        &empty,
        "the hand shake before the data connection",
        WAIT,
    )?;
    let (data, side) = link.make(
        "the data connection",
        || Side::new(&ctx, opts, tx_depth, agreed.cycle_buffer),
        |s: &Side| conn_param(s, opts),
    )?;
    ctl.keys(
        client,
        &empty,
        "the hand shake after the data connection",
        WAIT,
    )?;
    let gid_index = match opts.gid_index {
        Some(i) => i,
        None => best_gid_index(&ctx)?,
    };
    let me = side.dest(&ctx, gid_index)?;
    let peer = hand_shakes(&mut ctl, client, &me, &side, opts.test, |_| Ok(()))?;
    let cm = CmLink {
        ch,
        data,
        control,
        _listener: listener,
    };
    Ok(Connected::new(ctx, side, &peer, ctl, me, opts, Some(cm)))
}

#[cfg(test)]
mod tests {
    use super::{Ending, Test};

    /// perftest 4.5's write_lat.c has no `ctx_close_connection`: a closing
    /// key exchange waited for a peer that had exited (TCP: "the peer hung
    /// up" / "Connection reset by peer"; `-R`: the control QP's SEND
    /// flushed), which is how `ib_write_lat` and perf failed to meet.
    #[test]
    fn each_test_ends_as_perftests_program() {
        assert_eq!(Ending::of(Test::WriteLat), Ending::Nothing);
        assert_eq!(Ending::of(Test::SendLat), Ending::Close);
        assert_eq!(Ending::of(Test::ReadLat), Ending::Close);
        assert_eq!(Ending::of(Test::SendBw), Ending::Close);
        assert_eq!(Ending::of(Test::WriteBw), Ending::ReportThenClose);
    }
}
