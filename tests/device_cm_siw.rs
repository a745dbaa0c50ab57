//! Bytes moved on siw: two RC QPs of one process connected through the
//! connection manager (iWARP cannot connect any other way: the kernel hands
//! the QP its TCP stream during connect and accept), then SEND/RECV, RDMA
//! WRITE and RDMA READ through the crate's post/poll with the data checked
//! byte for byte, a completion event after `req_notify` (siw arms by a
//! store to the CQ's control word), and re-registration by the replace
//! fallback (siw refuses every REREG_MR in place) proven by traffic: the
//! new rkey works for WRITE and READ, the old one fails as the kernel makes
//! it fail, and a new connection recovers.
//!
//! Both QPs follow what the iWARP CM answers (`INIT_QP_ATTR`: INIT and RTR
//! STATE|ACCESS_FLAGS|PORT, RTS PORT alone), and learn the RTS the kernel
//! set at establishment with `QueuePair::refresh_state`.
//!
//! Where the cm ids land: rxe0 and siw0 both sit on dummy0, and the kernel
//! (`cma_acquire_dev_by_src_ip`) gives an id the first device in its list
//! whose port matches the source address, rxe0 (added first). When an id
//! for 192.0.2.1 lands on rxe0, this test puts siw on a netdev of its own:
//! a dummy `uvsiwcm0` with 198.51.100.1/24 and `siwcm0` on it, removed at
//! the end (needs `ip` and `rdma`, as the guest's set-up). rxe devices are
//! skipped loudly. Needs `/dev/infiniband/rdma_cm`: with
//! `UVERBS_REQUIRE_DEVICES` set its absence fails the test.

mod common;

use std::net::SocketAddr;
use std::os::fd::{AsRawFd, RawFd};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::*;
use uverbs::cm::{CmId, ConnParam, Event, EventChannel, EventKind, PortSpace};
use uverbs::command::{QpState, TransportType};
use uverbs::{
    AccessFlags, CompletionChannel, CompletionQueue, Context, Device, MemoryRegion,
    ProtectionDomain, QpInit, QueuePair, RecvWr, Remote, ReregPath, SendOp, WcOpcode, WcStatus,
    WorkCompletion,
};

const CM_WAIT: Duration = Duration::from_secs(10);
const DUMMY_ADDR: &str = "192.0.2.1";
const OWN_NETDEV: &str = "uvsiwcm0";
const OWN_DEVICE: &str = "siwcm0";
const OWN_ADDR: &str = "198.51.100.1";
const LEN: usize = 4096;
const MSG: usize = 256;

fn unavailable(test: &str, why: &str) {
    if required_prefixes().is_some() {
        panic!("{test}: {why} (UVERBS_REQUIRE_DEVICES is set)");
    }
    loud(&format!("SKIPPED: {test}: {why}"));
}

fn next(ch: &EventChannel, what: &str) -> Event {
    match ch.wait_event(CM_WAIT) {
        Ok(Some(ev)) => {
            loud(&format!(
                "{what}: {} id {} status {}",
                ev.name(),
                ev.id,
                ev.status
            ));
            ev
        }
        Ok(None) => panic!("{what}: no event within {CM_WAIT:?}"),
        Err(e) => panic!("{what}: {e}"),
    }
}

/// True when the id's device is `ctx`'s: same node GUID and the id's
/// source GID in `ctx`'s table (rxe0 and siw0 share the GUID).
fn landed_on(id: &CmId, ctx: &Context) -> bool {
    let route = id.query_route().expect("query_route");
    let sgid = route.first.sgid;
    let table = ctx.query_gid_table().expect("query_gid_table");
    id.is_on(ctx).expect("is_on") && table.iter().any(|g| g.gid.raw() == sgid)
}

fn run(cmd: &str, args: &[&str]) -> Result<(), String> {
    let out = Command::new(cmd)
        .args(args)
        .output()
        .map_err(|e| format!("{cmd} {args:?}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{cmd} {args:?}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// A dummy netdev with siw on it and nothing else; removed on drop.
struct OwnSiw;

impl OwnSiw {
    fn create() -> Result<OwnSiw, String> {
        // Left over from an interrupted run: start clean.
        let _ = run("rdma", &["link", "delete", OWN_DEVICE]);
        let _ = run("ip", &["link", "delete", OWN_NETDEV]);
        run("ip", &["link", "add", OWN_NETDEV, "type", "dummy"])?;
        let guard = OwnSiw;
        run("ip", &["link", "set", OWN_NETDEV, "up"])?;
        run(
            "ip",
            &["addr", "add", &format!("{OWN_ADDR}/24"), "dev", OWN_NETDEV],
        )?;
        run(
            "rdma",
            &[
                "link", "add", OWN_DEVICE, "type", "siw", "netdev", OWN_NETDEV,
            ],
        )?;
        Ok(guard)
    }
}

impl Drop for OwnSiw {
    fn drop(&mut self) {
        let a = run("rdma", &["link", "delete", OWN_DEVICE]);
        let b = run("ip", &["link", "delete", OWN_NETDEV]);
        loud(&format!("{OWN_DEVICE}/{OWN_NETDEV} removed: {a:?} {b:?}"));
    }
}

/// Where the ids for `addr` land, probed with a throw-away id.
fn lands_on_siw(ctx: &Context, addr: &str) -> Result<bool, String> {
    let ch = EventChannel::open().map_err(|e| e.to_string())?;
    let id = ch.create_id(PortSpace::Tcp).unwrap();
    let dst: SocketAddr = format!("{addr}:9").parse().unwrap();
    id.resolve_addr(None, dst, 2000)
        .map_err(|e| format!("resolve_addr {dst}: {e}"))?;
    let ev = next(&ch, "probe resolve_addr");
    if !matches!(ev.kind, EventKind::AddrResolved) {
        return Err(format!("{addr}: {:?} {:?}", ev.kind, ev.errno()));
    }
    let on = landed_on(&id, ctx);
    loud(&format!(
        "probe: an id for {addr} lands on {}",
        if on {
            ctx.device_name()
        } else {
            "another device"
        }
    ));
    Ok(on)
}

/// The siw device and address the cm reaches it by: siw0 over 192.0.2.1
/// when the kernel lands ids there, else a siw-only netdev of our own.
fn siw_target(test: &str) -> Option<(Device, &'static str, Option<OwnSiw>)> {
    if !Path::new(uverbs::cm::RDMA_CM_PATH).exists() {
        unavailable(test, "no /dev/infiniband/rdma_cm (load rdma_ucm)");
        return None;
    }
    let list = uverbs::devices().unwrap_or_default();
    let Some(siw0) = list.iter().find(|d| d.name() == "siw0").cloned() else {
        unavailable(test, "no siw0");
        return None;
    };
    for d in &list {
        if d.name().starts_with("rxe") {
            loud(&format!(
                "NOTE: {test}: {} skipped: this test is siw's",
                d.name()
            ));
        }
    }
    let ctx = open(&siw0);
    match lands_on_siw(&ctx, DUMMY_ADDR) {
        Ok(true) => return Some((siw0, DUMMY_ADDR, None)),
        Ok(false) => {}
        Err(why) => {
            unavailable(test, &why);
            return None;
        }
    }
    drop(ctx);
    loud(&format!(
        "NOTE: {test}: ids for {DUMMY_ADDR} land on rxe0 (first in the kernel's list): siw on {OWN_NETDEV} instead"
    ));
    let own = match OwnSiw::create() {
        Ok(own) => own,
        Err(why) => {
            unavailable(test, &format!("cannot set up {OWN_DEVICE}: {why}"));
            return None;
        }
    };
    let deadline = Instant::now() + CM_WAIT;
    let dev = loop {
        let found = uverbs::devices()
            .unwrap_or_default()
            .into_iter()
            .find(|d| d.name() == OWN_DEVICE);
        match found {
            Some(d) => break d,
            None if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(100)),
            None => panic!("{test}: {OWN_DEVICE} never appeared"),
        }
    };
    let ctx = open(&dev);
    assert!(
        lands_on_siw(&ctx, OWN_ADDR).unwrap_or_else(|e| panic!("{test}: {e}")),
        "{test}: ids for {OWN_ADDR} do not land on {OWN_DEVICE}"
    );
    drop(ctx);
    Some((dev, OWN_ADDR, Some(own)))
}

/// One connection: a listener, the client's and the server's ids and QPs.
struct Conn {
    ch: EventChannel,
    listener: CmId,
    client: CmId,
    server: CmId,
    qp_c: QueuePair,
    qp_s: QueuePair,
}

fn cm_modify(id: &CmId, qp: &QueuePair, state: QpState, what: &str) {
    let attr = id
        .init_qp_attr(state)
        .unwrap_or_else(|e| panic!("{what}: init_qp_attr({state:?}): {e}"));
    loud(&format!(
        "{what}: INIT_QP_ATTR {state:?} mask {:?}",
        attr.mask()
    ));
    qp.modify(&attr)
        .unwrap_or_else(|e| panic!("{what}: modify {:?}: {e}", attr.mask()));
    // The RTS answer carries no state: the QP stays where it was.
    if let Some(to) = attr.target_state() {
        assert_eq!(qp.state(), to, "{what}");
    }
}

fn rc(cq: &CompletionQueue) -> QpInit<'_> {
    let mut init = QpInit::new(uverbs::command::QpType::Rc, cq, cq);
    init.max_send_wr = 16;
    init.max_recv_wr = 16;
    init
}

/// Connects a new client QP (on `cq_c`) to a new server QP (on `cq_s`)
/// in `pd` through the cm at `addr:port`; both QPs end in RTS as the
/// kernel reports it.
fn connect(
    ctx: &Context,
    pd: &ProtectionDomain,
    cq_c: &CompletionQueue,
    cq_s: &CompletionQueue,
    addr: &str,
    port: u16,
    name: &str,
) -> Conn {
    let ch = EventChannel::open().unwrap_or_else(|e| panic!("{name}: {e}"));
    let server_addr: SocketAddr = format!("{addr}:{port}").parse().unwrap();
    let listener = ch.create_id(PortSpace::Tcp).unwrap();
    listener
        .bind(server_addr)
        .unwrap_or_else(|e| panic!("{name}: bind {server_addr}: {e}"));
    listener.listen(4).unwrap();
    let client = ch.create_id(PortSpace::Tcp).unwrap();
    client
        .resolve_addr(None, server_addr, 2000)
        .unwrap_or_else(|e| panic!("{name}: resolve_addr: {e}"));
    let ev = next(&ch, "client resolve_addr");
    assert!(matches!(ev.kind, EventKind::AddrResolved), "{ev:?}");
    client.resolve_route(2000).unwrap();
    let ev = next(&ch, "client resolve_route");
    assert!(matches!(ev.kind, EventKind::RouteResolved), "{ev:?}");
    assert!(
        landed_on(&client, ctx),
        "{name}: the client's id is not on {name}"
    );

    let qp_c = pd
        .create_qp(&rc(cq_c))
        .unwrap_or_else(|e| panic!("{name}: create_qp: {e}"));
    let qp_s = pd
        .create_qp(&rc(cq_s))
        .unwrap_or_else(|e| panic!("{name}: create_qp: {e}"));
    assert_eq!(qp_c.transport_type(), TransportType::Iwarp);
    cm_modify(&client, &qp_c, QpState::Init, "client RESET->INIT");
    client.connect(&ConnParam::new(qp_c.qp_num())).unwrap();

    let ev = next(&ch, "listener");
    let EventKind::ConnectRequest { id: server, .. } = ev.kind else {
        panic!("{name}: {:?}", ev.kind)
    };
    assert!(
        landed_on(&server, ctx),
        "{name}: the server's id is not on {name}"
    );
    cm_modify(&server, &qp_s, QpState::Init, "server RESET->INIT");
    cm_modify(&server, &qp_s, QpState::Rtr, "server INIT->RTR");
    // The RTS answer is PORT alone, no state: the QP stays where it is.
    cm_modify(&server, &qp_s, QpState::Rts, "server RTS answer");
    assert_eq!(qp_s.state(), QpState::Rtr);
    server.accept(&ConnParam::new(qp_s.qp_num())).unwrap();

    // iWARP: both sides hear ESTABLISHED (the active side's connect reply
    // is reported as ESTABLISHED), in either order.
    let (mut c_up, mut s_up) = (false, false);
    while !(c_up && s_up) {
        let ev = next(&ch, "established");
        assert!(matches!(ev.kind, EventKind::Established(_)), "{ev:?}");
        if ev.id == client.handle() {
            c_up = true;
        } else {
            assert_eq!(ev.id, server.handle(), "{ev:?}");
            s_up = true;
        }
    }
    // The kernel moved both QPs to RTS; the crate learns it.
    assert_eq!(
        qp_c.refresh_state().unwrap(),
        QpState::Rts,
        "{name}: client"
    );
    assert_eq!(
        qp_s.refresh_state().unwrap(),
        QpState::Rts,
        "{name}: server"
    );
    Conn {
        ch,
        listener,
        client,
        server,
        qp_c,
        qp_s,
    }
}

impl Conn {
    /// Disconnects (if still up), drains the events and destroys the ids:
    /// the kernel's counts are the ones the channel delivered.
    fn close(self, name: &str) -> (QueuePair, QueuePair) {
        let _ = self.client.disconnect();
        let deadline = Instant::now() + Duration::from_secs(3);
        while Instant::now() < deadline {
            match self.ch.wait_event(Duration::from_millis(500)).unwrap() {
                Some(ev) => loud(&format!("{name}: close: {} for id {}", ev.name(), ev.id)),
                None => break,
            }
        }
        let got = (
            self.server.events_received(),
            self.client.events_received(),
            self.listener.events_received(),
        );
        let rep = (
            self.server.destroy().unwrap(),
            self.client.destroy().unwrap(),
            self.listener.destroy().unwrap(),
        );
        assert_eq!(rep, got, "{name}: events reported = received");
        (self.qp_c, self.qp_s)
    }
}

fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31) ^ seed ^ 0x5a)
        .collect()
}

fn wait_any(cq: &CompletionQueue, what: &str) -> WorkCompletion {
    wait_one(cq, what)
}

fn remote(buf: &[u8], rkey: u32) -> Remote {
    Remote {
        addr: buf.as_ptr() as u64,
        rkey,
    }
}

/// WRITE `seed`'s bytes from `src` into `dst` at `to`, then READ them back
/// into `back`; both verified byte for byte.
#[allow(clippy::too_many_arguments)]
fn write_then_read(
    c: &Conn,
    cq_c: &CompletionQueue,
    src: &mut [u8],
    src_mr: &MemoryRegion,
    dst: &[u8],
    to: Remote,
    seed: u8,
    what: &str,
) {
    let bytes = pattern(seed, MSG);
    src[..MSG].copy_from_slice(&bytes);
    src[MSG..2 * MSG].fill(0);
    let s = sge(src.as_ptr() as u64, MSG, src_mr);
    // SAFETY: src[..MSG] is only read by the device until the completion.
    unsafe { c.qp_c.post_send(&[signalled_write(1, &s, to)]) }
        .unwrap_or_else(|e| panic!("{what}: post WRITE: {e}"));
    wait_checked(cq_c, what, WcOpcode::RdmaWrite, &c.qp_c, 1);
    assert_eq!(&dst[..MSG], &bytes[..], "{what}: the WRITE's bytes");
    let back = sge(src.as_ptr() as u64 + MSG as u64, MSG, src_mr);
    let read = signalled(2, SendOp::RdmaRead { remote: to }, &back);
    // SAFETY: src[MSG..2 MSG] is neither read nor written until the
    // completion.
    unsafe { c.qp_c.post_send(&[read]) }.unwrap_or_else(|e| panic!("{what}: post READ: {e}"));
    wait_checked(cq_c, what, WcOpcode::RdmaRead, &c.qp_c, 2);
    assert_eq!(&src[MSG..2 * MSG], &bytes[..], "{what}: the READ's bytes");
}

#[test]
fn siw_cm_send_write_read_and_an_armed_cq() {
    let test = "siw_cm_send_write_read_and_an_armed_cq";
    let _serial = serial();
    let Some((dev, addr, _own)) = siw_target(test) else {
        return;
    };
    let dut = open(&dev);
    let name = dev.name().to_string();
    let counts = HandleCounts::new(&dut, test);
    let ctx: &Context = &dut;
    let channel: CompletionChannel = ctx
        .create_comp_channel()
        .unwrap_or_else(|e| panic!("{name}: create_comp_channel: {e}"));
    let pd = alloc_pd(ctx);
    let cq_c = ctx.create_cq(16, Some(&channel)).unwrap();
    let cq_s = ctx.create_cq(16, None).unwrap();
    let port = 7100 + (std::process::id() % 900) as u16;
    let c = connect(ctx, &pd, &cq_c, &cq_s, addr, port, &name);
    counts.assert_extra_cq_qp(2, 2, "connected");

    let mut a_buf = anon(LEN);
    let mut b_buf = anon(LEN);
    let a_mr = fresh_mr(&pd, &mut a_buf, RW_READ);
    let b_mr = fresh_mr(&pd, &mut b_buf, RW_READ);

    // SEND/RECV.
    let bytes = pattern(1, 64);
    a_buf[..64].copy_from_slice(&bytes);
    let recv_sge = sge(b_buf.as_ptr() as u64, 64, &b_mr);
    // SAFETY: b_buf[..64] is untouched until the receive's completion.
    unsafe {
        c.qp_s.post_recv(&[RecvWr {
            wr_id: 0xb0b,
            sges: &recv_sge,
        }])
    }
    .unwrap();
    let send_sge = sge(a_buf.as_ptr() as u64, 64, &a_mr);
    // SAFETY: a_buf[..64] is only read until the completion.
    unsafe {
        c.qp_c
            .post_send(&[signalled(0xa5e, SendOp::Send { imm: None }, &send_sge)])
    }
    .unwrap_or_else(|e| panic!("{name}: post SEND: {e}"));
    wait_checked(&cq_c, "SEND", WcOpcode::Send, &c.qp_c, 0xa5e);
    let wc = wait_checked(&cq_s, "RECV", WcOpcode::Recv, &c.qp_s, 0xb0b);
    assert_eq!(wc.byte_len, 64);
    assert_eq!(&b_buf[..64], &bytes[..], "{name}: the SEND's bytes");

    // WRITE and READ into the server's MR.
    let to = remote(&b_buf[1024..], b_mr.rkey());
    write_then_read(
        &c,
        &cq_c,
        &mut a_buf[..],
        &a_mr,
        &b_buf[1024..],
        to,
        2,
        "WRITE+READ",
    );

    // Arming: a store to the control word; the event comes on the channel.
    cq_c.req_notify(false).unwrap();
    let s = sge(a_buf.as_ptr() as u64, 32, &a_mr);
    let to = remote(&b_buf[2048..], b_mr.rkey());
    // SAFETY: a_buf[..32] is only read until the completion.
    unsafe { c.qp_c.post_send(&[signalled_write(7, &s, to)]) }.unwrap();
    wait_readable(channel.as_raw_fd(), &name);
    assert_eq!(channel.get_event().unwrap(), cq_c.event_id(), "{name}");
    wait_checked(&cq_c, "armed WRITE", WcOpcode::RdmaWrite, &c.qp_c, 7);
    cq_c.ack_events(1).unwrap();
    loud(&format!(
        "{name}: SEND, WRITE, READ and a CQ event over the iWARP CM"
    ));

    let (qp_c, qp_s) = c.close(&name);
    drop((qp_c, qp_s, a_mr, b_mr, cq_c, cq_s, pd, channel));
    counts.assert_extra_cq_qp(0, 0, "after dropping everything");
    counts.assert_extra(0, 0, "after dropping everything");
}

fn wait_readable(fd: RawFd, name: &str) {
    let mut pfd = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd, for the duration of the call.
    let ready = unsafe { libc::poll(&mut pfd, 1, CM_WAIT.as_millis() as i32) };
    assert_eq!(ready, 1, "{name}: no completion event within {CM_WAIT:?}");
}

/// What an old rkey does after a replace: the WRITE's completion on the
/// requester, the cm events that follow, and the target untouched.
fn old_rkey_fails(
    c: &Conn,
    cq_c: &CompletionQueue,
    a: &[u8],
    a_mr: &MemoryRegion,
    old: Remote,
    target: &[u8],
    what: &str,
) {
    let before = target[..MSG].to_vec();
    let s = sge(a.as_ptr() as u64, MSG, a_mr);
    // SAFETY: a[..MSG] is only read until the completion or the QP's flush.
    unsafe { c.qp_c.post_send(&[signalled_write(9, &s, old)]) }.unwrap();
    let wc = wait_any(cq_c, what);
    let mut events = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(3);
    while Instant::now() < deadline {
        match c.ch.wait_event(Duration::from_millis(500)).unwrap() {
            Some(ev) => events.push(format!("{}@{}", ev.name(), ev.id)),
            None if !events.is_empty() => break,
            None => {}
        }
    }
    let state = c.qp_c.refresh_state().unwrap();
    loud(&format!(
        "{what}: old rkey {:#x}: WRITE completed {:?}, then cm events {events:?}, client QP {state:?}",
        old.rkey, wc.status
    ));
    assert_eq!(
        &target[..MSG],
        &before[..],
        "{what}: the old rkey wrote nothing"
    );
    // Measured on siw (6.12, every configuration): the requester completes
    // the WRITE successfully (siw completes a WRITE once it is on the
    // wire); the responder finds no MR for the STag, terminates, and the
    // connection drops: both ids get DISCONNECTED and the requester's QP
    // is in ERR. The connection is dead: the caller makes a new one.
    assert_eq!(wc.status, WcStatus::Success, "{what}: {wc:?}");
    for (id, side) in [(c.client.handle(), "client"), (c.server.handle(), "server")] {
        assert!(
            events.contains(&format!("RDMA_CM_EVENT_DISCONNECTED@{id}")),
            "{what}: the {side} was not disconnected: {events:?}"
        );
    }
    assert_eq!(state, QpState::Err, "{what}: the requester's QP");
}

#[test]
fn siw_rereg_by_replace_proven_over_the_cm() {
    let test = "siw_rereg_by_replace_proven_over_the_cm";
    let _serial = serial();
    let Some((dev, addr, _own)) = siw_target(test) else {
        return;
    };
    let dut = open(&dev);
    let name = dev.name().to_string();
    let counts = HandleCounts::new(&dut, test);
    let ctx: &Context = &dut;
    let pd = alloc_pd(ctx);
    let pd2 = alloc_pd(ctx);
    let cq_c = ctx.create_cq(16, None).unwrap();
    let cq_s = ctx.create_cq(16, None).unwrap();
    let mut a_buf = anon(LEN);
    let a_mr = fresh_mr(&pd, &mut a_buf, RW_READ);
    let mut b_buf = anon(LEN);
    let mut b2_buf = anon(2 * LEN);
    let mut mr = fresh_mr(&pd, &mut b_buf, AccessFlags::LOCAL_WRITE);
    let base = 7300 + (std::process::id() % 600) as u16;

    type Change<'a> = (&'a str, Box<dyn Fn(&mut MemoryRegion) -> ReregPath + 'a>);
    let b2_ptr = b2_buf.as_mut_ptr();
    let cases: Vec<Change<'_>> = vec![
        (
            "access LOCAL_WRITE -> remote read+write",
            Box::new(|mr: &mut MemoryRegion| {
                replace(mr, uverbs::ReregFlags::ACCESS, None, RW_READ)
                    .unwrap_or_else(|e| panic!("access replace: {e}"))
            }),
        ),
        (
            "PD change",
            Box::new(|mr: &mut MemoryRegion| {
                replace(mr, uverbs::ReregFlags::PD, Some(&pd2), AccessFlags::empty())
                    .unwrap_or_else(|e| panic!("PD replace: {e}"))
            }),
        ),
        (
            "translation to a new buffer",
            Box::new(move |mr: &mut MemoryRegion| {
                // SAFETY: b2_buf outlives the MR (dropped after it).
                unsafe { replace_range(mr, b2_ptr, 2 * LEN) }
                    .unwrap_or_else(|e| panic!("translation replace: {e}"))
            }),
        ),
    ];
    for (i, (what, change)) in cases.iter().enumerate() {
        let old_rkey = mr.rkey();
        let old_target = if mr.addr() == b2_ptr {
            &b2_buf[..]
        } else {
            &b_buf[..]
        };
        let old = remote(old_target, old_rkey);
        let path = change(&mut mr);
        assert_eq!(
            path,
            ReregPath::Replaced,
            "{name}: {what}: siw refuses in place"
        );
        assert_ne!(mr.rkey(), old_rkey, "{name}: {what}: a new rkey");
        // The MR's PD decides which QPs may use it: the QPs live in it.
        let qp_pd = if i >= 1 { &pd2 } else { &pd };
        let c = connect(ctx, qp_pd, &cq_c, &cq_s, addr, base + i as u16, &name);
        let (target, len) = (mr.addr(), mr.length());
        // SAFETY: the MR covers [addr, addr + len), mapped by one of our buffers.
        let target = unsafe { std::slice::from_raw_parts(target, len) };
        let a_mr_here;
        let a_lkey_mr = if i >= 1 {
            a_mr_here = fresh_mr(qp_pd, &mut a_buf, RW_READ);
            &a_mr_here
        } else {
            &a_mr
        };
        let new = remote(target, mr.rkey());
        write_then_read(
            &c,
            &cq_c,
            &mut a_buf[..],
            a_lkey_mr,
            target,
            new,
            10 + i as u8,
            what,
        );
        loud(&format!(
            "{name}: {what}: new rkey {:#x} WRITE+READ verified",
            mr.rkey()
        ));
        old_rkey_fails(&c, &cq_c, &a_buf, a_lkey_mr, old, old_target, what);
        let (qp_c, qp_s) = c.close(&name);
        drop((qp_c, qp_s));
        // Drain whatever the dead QPs flushed.
        let mut wc = [WorkCompletion::default(); 16];
        while cq_c.poll(&mut wc).unwrap() > 0 {}
        while cq_s.poll(&mut wc).unwrap() > 0 {}
    }
    drop(cases);
    drop((mr, a_mr, cq_c, cq_s, pd, pd2));
    counts.assert_extra_cq_qp(0, 0, "after dropping everything");
    counts.assert_extra(0, 0, "after dropping everything");
}
