//! `pingpong --cm`: the connection made by the RDMA connection manager
//! (`uverbs::cm`, the kernel's rdma_cm) instead of rc_pingpong's exchange
//! over TCP. Roles by address:
//!
//! ```text
//! pingpong --cm --server --bind ADDR:PORT       listens (0.0.0.0:PORT: on every device)
//! pingpong --cm --client --connect ADDR:PORT    resolves ADDR, connects
//! pingpong --cm                                 both here: a listener on 0.0.0.0, a client
//!                                               spawned that connects to 192.0.2.1
//! ```
//!
//! The cm picks the device: the one whose address ADDR is (the id's node
//! GUID and source GID, among rxe and siw devices). Both QPs follow the
//! attributes `INIT_QP_ATTR` answers. On RoCE (rxe) the client takes its
//! QP to RTS after the CONNECT_RESPONSE and sends the RTU (`establish`); on
//! iWARP (siw) the kernel's CM drives the QPs: the client's goes to INIT
//! before the connect and nothing more, the server's RTS answer carries no
//! state, both sides hear ESTABLISHED (the client's carries the accept's
//! private data) and the kernel has moved both QPs to RTS. A client whose
//! connect is rejected or refused (the server not listening yet: the two sides start
//! independently) tries again, a new id each time, within [`WAIT`]. The
//! server's accept carries its
//! WRITE area's address and rkey as private data. With no side channel,
//! the end of the WRITE stream is a SEND from the client (RC delivers it
//! after the WRITEs), the server answers with its verdict as a SEND, and
//! the client disconnects. Every wait is bounded ([`WAIT`]).

use std::net::SocketAddr;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use uverbs::cm::{CmId, ConnParam, Event, EventChannel, EventKind, Param, PortSpace};
use uverbs::device::{DriverId, OpenOptions, TransportType};
use uverbs::error::Errno;
use uverbs::qp::QpState;
use uverbs::wr::{Remote, SendOp, WcOpcode, WorkCompletion};
use uverbs::{Context, Device};

use super::{
    answer_pings, check_write_area, devices, measure_latency, ping, reap, report, stream_writes,
    Layout, Options, Result, Side, WAIT,
};

/// Where the self-spawned client connects: dummy0's address in the VM
/// guest (127.0.0.1 fails at route resolution: no RDMA device has it).
const GUEST_ADDR: &str = "192.0.2.1";
/// Address and route resolution time-outs (ms).
const RESOLVE_MS: u32 = 2000;

/// The numbers stamped into the messages after the pings (which carry
/// 0..iters): the client's "stream done", the server's verdicts.
fn done(opts: &Options) -> usize {
    opts.iters
}
fn verified(opts: &Options) -> usize {
    opts.iters + 1
}
fn mismatch(opts: &Options) -> usize {
    opts.iters + 2
}

/// The next event within [`WAIT`].
fn next(ch: &EventChannel, what: &str) -> Result<Event> {
    ch.wait_event(WAIT)?
        .ok_or_else(|| format!("{what}: no cm event within {WAIT:?}").into())
}

/// An error for an event other than the one `what` waits for.
fn unexpected(what: &str, ev: &Event) -> Box<dyn std::error::Error> {
    format!("{what}: {} (status {})", ev.name(), ev.status).into()
}

/// The devices `--cm` runs on: rxe (RoCE v2) and siw (iWARP), the ones
/// with a data path in uverbs.
fn has_cm_data_path(dev: &Device) -> bool {
    matches!(dev.driver_id(), Some(DriverId::RXE) | Some(DriverId::SIW))
}

/// Opens the device the id landed on: of the rxe and siw devices whose
/// node GUID is the id's (devices on netdevs with one MAC share it), the
/// one whose GID table holds the id's source GID.
fn context_of(id: &CmId, opts: &Options) -> Result<Context> {
    let sgid = id.query_route()?.first.sgid;
    for dev in id.matching_devices(&devices(opts)?)? {
        if !has_cm_data_path(&dev) {
            continue;
        }
        let ctx = dev.open_with(&OpenOptions::new())?;
        if ctx.query_gid_table()?.iter().any(|g| g.gid.raw() == sgid) {
            return Ok(ctx);
        }
    }
    Err("the cm id is on no rxe or siw device (the devices with a data path in uverbs)".into())
}

/// True when the kernel's CM drives the QP (iWARP).
fn is_iwarp(side: &Side) -> bool {
    side.qp.transport_type() == TransportType::Iwarp
}

/// Moves the side's QP to `state` with the cm's attributes.
fn to(id: &CmId, side: &Side, state: QpState) -> Result<()> {
    side.qp.modify(&id.init_qp_attr(state)?)?;
    Ok(())
}

/// Polls until a completion of `opcode` (any other is an error).
fn wait_for(side: &Side, opcode: WcOpcode, what: &str) -> Result<WorkCompletion> {
    let mut wcs = [WorkCompletion::default(); 1];
    let wc = side.poll(&mut wcs, what)?[0];
    if wc.opcode() != Some(opcode) {
        return Err(format!("{what}: unexpected completion {:?}", wc.opcode()).into());
    }
    Ok(wc)
}

/// A listener bound to `addr` (port 0: the kernel picks one), and where.
pub fn listen(addr: &str) -> Result<(EventChannel, CmId, SocketAddr)> {
    let ch = EventChannel::open()?;
    let listener = ch.create_id(PortSpace::Tcp)?;
    listener.bind(addr.parse()?)?;
    listener.listen(1)?;
    let local = listener
        .query_addr()?
        .src
        .ok_or("the listener has no address")?;
    Ok((ch, listener, local))
}

/// The default `--cm` run: a listener here on `0.0.0.0`, a copy of this
/// program spawned as the client of [`GUEST_ADDR`].
pub fn both(opts: &Options) -> Result<()> {
    let (ch, listener, local) = listen("0.0.0.0:0")?;
    let target = format!("{GUEST_ADDR}:{}", local.port());
    println!(
        "pingpong --cm: server here (pid {}) listening on {local}, client spawned, connecting to {target}",
        std::process::id()
    );
    let mut child = Command::new(std::env::current_exe()?)
        .args(opts.client_args(opts.device.as_deref(), GUEST_ADDR, local.port()))
        .spawn()?;
    let served = server(opts, &ch, &listener, Some(&mut child));
    let status = reap(&mut child)?;
    served?;
    if !status.success() {
        return Err(format!("the client failed ({status})").into());
    }
    Ok(())
}

/// Waits for one connect request on `ch` (giving up early when the
/// spawned client has exited) and serves it.
pub fn server(
    opts: &Options,
    ch: &EventChannel,
    listener: &CmId,
    mut client: Option<&mut Child>,
) -> Result<()> {
    let deadline = Instant::now() + WAIT;
    let ev = loop {
        if let Some(ev) = ch.wait_event(Duration::from_millis(50))? {
            break ev;
        }
        if let Some(c) = client.as_deref_mut() {
            if let Some(status) = c.try_wait()? {
                return Err(format!("the client exited before connecting ({status})").into());
            }
        }
        if Instant::now() >= deadline {
            return Err(format!("no connect request within {WAIT:?}").into());
        }
    };
    if ev.uid != listener.uid() {
        return Err(unexpected("the listener", &ev));
    }
    let EventKind::ConnectRequest { id, .. } = ev.kind else {
        return Err(unexpected("the listener", &ev));
    };
    let ctx = context_of(&id, opts)?;
    let mut side = Side::new(&ctx, opts)?;
    to(&id, &side, QpState::Init)?;
    to(&id, &side, QpState::Rtr)?;
    to(&id, &side, QpState::Rts)?;
    side.post_recv()?;
    // Our WRITE area and its rkey, for the client's bandwidth run.
    let mut private = [0u8; 12];
    private[..8].copy_from_slice(&side.addr(side.layout.write_area()).to_le_bytes());
    private[8..].copy_from_slice(&side.mr.rkey().to_le_bytes());
    id.accept(&ConnParam::new(side.qp.qp_num()).private_data(&private)?)?;
    let ev = next(ch, "accept")?;
    if !matches!(ev.kind, EventKind::Established(_)) {
        return Err(unexpected("accept", &ev));
    }
    if is_iwarp(&side) {
        // The kernel moved the QP to RTS when it handed it the stream:
        // learn it, or post_send refuses the QP's last known state (RTR).
        let state = side.qp.established()?;
        if state != QpState::Rts {
            return Err(format!("the QP is {state:?} after ESTABLISHED, not RTS").into());
        }
    }
    let peer = id.query_route()?.dst;
    println!(
        "pingpong server (cm): {} connected from {peer:?}, QP {} on {}",
        ctx.device_name(),
        side.qp.qp_num(),
        ctx.transport_kind()
    );

    let pings = answer_pings(&mut side, opts)?;
    wait_for(
        &side,
        WcOpcode::Recv,
        "the client's end of the WRITE stream",
    )?;
    if !side.stamped(side.layout.recv(), done(opts)) {
        return Err("the client's end of the WRITE stream carries the wrong number".into());
    }
    let verdict = check_write_area(&side, opts);
    let answer = if verdict == "verified" {
        verified(opts)
    } else {
        mismatch(opts)
    };
    side.stamp(Layout::SEND, answer);
    let sge = side.sge(Layout::SEND, opts.size);
    side.post(u64::MAX, SendOp::Send { imm: None }, &sge)?;
    wait_for(&side, WcOpcode::Send, "the verdict")?;

    // The client disconnects; our DISCONNECT answers it (the DREP).
    let ev = next(ch, "the client's disconnect")?;
    if !matches!(ev.kind, EventKind::Disconnected) {
        return Err(unexpected("the client's disconnect", &ev));
    }
    id.disconnect()?;
    println!(
        "pingpong server (cm): {pings} pings answered; the WRITE area was {verdict}; disconnected"
    );
    Ok(())
}

/// A client connection: the id, its channel, the side, its device, the
/// server's WRITE area and what to print for the server's QP.
struct Connected {
    ch: EventChannel,
    id: CmId,
    ctx: Context,
    remote: Remote,
    peer_qp: String,
}

/// How long a rejected client waits before it tries again.
const RETRY_AFTER: Duration = Duration::from_millis(200);

/// Connects to the server (`--connect`, or HOST and `--port`) with the
/// cm and measures.
pub fn client(opts: &Options) -> Result<()> {
    let dst: SocketAddr = opts.cm_addr().parse()?;
    let deadline = Instant::now() + WAIT;
    let mut attempt = 1;
    let (c, mut side) = loop {
        let ch = EventChannel::open()?;
        let id = ch.create_id(PortSpace::Tcp)?;
        match connect(opts, dst, ch, id)? {
            Ok(connected) => break connected,
            Err(why) if Instant::now() + RETRY_AFTER < deadline => {
                println!("pingpong client (cm): attempt {attempt} to {dst}: {why}; trying again");
                attempt += 1;
                std::thread::sleep(RETRY_AFTER);
            }
            Err(why) => {
                return Err(
                    format!("connect to {dst}: {why} ({attempt} attempts within {WAIT:?})").into(),
                )
            }
        }
    };
    let Connected {
        ch,
        id,
        ctx,
        remote,
        peer_qp,
    } = c;
    println!(
        "pingpong client (cm): {} connected to {dst}, QP {} -> {peer_qp} (attempt {attempt})",
        ctx.device_name(),
        side.qp.qp_num(),
    );

    let rtt = measure_latency(&mut side, opts)?;
    let secs = stream_writes(&mut side, opts, remote)?;
    // The end of the stream, then the server's verdict.
    ping(&mut side, u64::MAX, done(opts), opts.size, "the verdict")?;
    let verdict = if side.stamped(side.layout.recv(), verified(opts)) {
        "verified"
    } else if side.stamped(side.layout.recv(), mismatch(opts)) {
        "a mismatch"
    } else {
        return Err("the server's verdict carries the wrong number".into());
    };
    report(&ctx, opts, rtt, secs, verdict);
    drop(ctx);

    id.disconnect()?;
    let ev = next(&ch, "disconnect")?;
    if !matches!(ev.kind, EventKind::Disconnected) {
        return Err(unexpected("disconnect", &ev));
    }
    if verdict != "verified" {
        return Err("the server found a mismatch in its WRITE area".into());
    }
    Ok(())
}

/// One connection attempt on `id`: resolves `dst`, makes the side on the
/// device the id landed on, connects. `Ok(Err(why))` when the server
/// rejected it, refused the stream or was unreachable (worth another
/// attempt, with a new id).
fn connect(
    opts: &Options,
    dst: SocketAddr,
    ch: EventChannel,
    id: CmId,
) -> Result<std::result::Result<(Connected, Side), String>> {
    id.resolve_addr(None, dst, RESOLVE_MS)
        .map_err(|e| format!("{dst} (is the address configured here?): {e}"))?;
    let ev = next(&ch, "resolve_addr")?;
    if !matches!(ev.kind, EventKind::AddrResolved) {
        return Err(unexpected(&format!("resolve_addr {dst}"), &ev));
    }
    id.resolve_route(RESOLVE_MS)?;
    let ev = next(&ch, "resolve_route")?;
    if !matches!(ev.kind, EventKind::RouteResolved) {
        return Err(unexpected(&format!("resolve_route {dst}"), &ev));
    }
    let ctx = context_of(&id, opts)?;
    let side = Side::new(&ctx, opts)?;
    let iwarp = is_iwarp(&side);
    to(&id, &side, QpState::Init)?;
    match id.connect(&ConnParam::new(side.qp.qp_num())) {
        Ok(()) => {}
        // iWARP connects the TCP stream in the call: no listener there
        // answers at once.
        Err(e) if e.errno() == Some(Errno::CONNREFUSED) => {
            drop(side);
            id.destroy()?;
            return Ok(Err(format!("rdma_connect: {e}")));
        }
        Err(e) => return Err(e.into()),
    }
    let ev = next(&ch, "connect")?;
    let peer = match &ev.kind {
        EventKind::ConnectResponse(Param::Conn(peer)) if !iwarp => peer.clone(),
        // iWARP: no CONNECT_RESPONSE; ESTABLISHED carries the accept's data.
        EventKind::Established(Param::Conn(peer)) if iwarp => peer.clone(),
        EventKind::Rejected { .. } | EventKind::Unreachable | EventKind::ConnectError => {
            drop(side);
            drop(ctx);
            let why = format!("{} (status {})", ev.name(), ev.status);
            id.destroy()?;
            return Ok(Err(why));
        }
        _ => return Err(unexpected(&format!("connect to {dst}"), &ev)),
    };
    let data = &peer.private_data;
    if data.len() < 12 {
        return Err("the server's accept carries no WRITE area".into());
    }
    let remote = Remote {
        addr: u64::from_le_bytes(data[..8].try_into()?),
        rkey: u32::from_le_bytes(data[8..12].try_into()?),
    };
    let peer_qp = if iwarp {
        // The kernel moved the QP to RTS when it handed it the stream.
        let state = side.qp.established()?;
        if state != QpState::Rts {
            return Err(format!("the QP is {state:?} after ESTABLISHED, not RTS").into());
        }
        "the server (iWARP: the cm carries no QP number)".to_string()
    } else {
        // INIT again (librdmacm's order): only a connected id's attributes
        // grant the QP remote access.
        to(&id, &side, QpState::Init)?;
        to(&id, &side, QpState::Rtr)?;
        to(&id, &side, QpState::Rts)?;
        id.establish()?;
        format!("QP {}", peer.qp_num)
    };
    side.post_recv()?;
    Ok(Ok((
        Connected {
            ch,
            id,
            ctx,
            remote,
            peer_qp,
        },
        side,
    )))
}
