//! The connection manager between two hosts: host A connects to host B
//! with the rdma_cm (`uverbs::cm`) on rxe0, over the link between them.
//!
//! `cargo vm test` runs this binary on both guests of its two-host run at
//! once (tests/vm/README.md; `UVERBS_HOST_ROLE`, `UVERBS_LOCAL_ADDR`,
//! `UVERBS_PEER_ADDR`, `UVERBS_TWO_HOST_PORT`, `UVERBS_TWO_HOST_RUN`).
//! Without a role (the host suite) it says SKIPPED loudly and passes.
//!
//! As in `two_host_rc.rs`, the two processes meet on a plain TCP control
//! connection (A listens, B connects) that orders every step, and every
//! wait is bounded. Unlike it, the QPs are connected by the cm alone: B
//! listens on its own address (port [`CM_PORT_OFFSET`] above the run's
//! control port, so runs never meet each other's listener); A resolves B's
//! address and route, and the QPs go to RTS with exactly the attributes
//! `INIT_QP_ATTR` answers, in librdmacm's order (`common::cm`). Each side
//! hands the other the address, rkey and length of its peer-addressable
//! memory, and its QP number, in the connect request's and the accept's
//! private data (the cm's reported QP number must agree).
//!
//! Then, each in both directions with every byte checked where it lands:
//! SEND/RECV, RDMA WRITE, RDMA READ; a re-registration on B while A
//! writes (a WRITE lands; B removes REMOTE_WRITE in place, same keys; A's
//! next WRITE fails REM_ACCESS_ERR, B's memory untouched, the cm reports
//! nothing of the dead QPs; both sides disconnect in order and A connects
//! again with new QPs, the MRs stay; B restores REMOTE_WRITE in place and
//! A's WRITE lands). Every disconnect is the orderly one (A's DREQ, B's
//! DISCONNECTED and DREP, A's DISCONNECTED, both TIMEWAIT_EXITs, then
//! nothing), each id destroyed with the kernel's count of its events equal
//! to what its channel delivered, and the handle counts are back where they
//! started on both hosts.
//!
//! Then the link taken down during traffic: B takes its NIC down while A
//! streams WRITEs; A's WRITE fails RETRY_EXC_ERR within a bound (A asks
//! for a transport retry count of 6: rxe retries forever at 7), no cm
//! event on either side, B brings the link back up (also when it panics),
//! and the orderly disconnect works over it.
//!
//! Then the same on siw0 over its own link (eth1, B's listener on the
//! control port + [`SIW_CM_PORT_OFFSET`]; every cm id for an address on
//! eth0 lands on rxe0), with iWARP's sequence: the kernel's CM drives the
//! QPs (A's QP to INIT before the connect and nothing more; B's INIT, RTR
//! and an RTS answer without a state; both sides hear ESTABLISHED, A's
//! carrying the accept's private data, no QP numbers in the cm; the
//! kernel reports both QPs in RTS; a disconnect ends in one DISCONNECTED
//! per side and no TIMEWAIT_EXIT). siw refuses re-registration in place,
//! so B re-registers by the replace fallback under A's WRITEs: the new
//! rkey works (WRITE and READ), the old one writes nothing and ends the
//! connection (A's WRITE completes SUCCESS on the wire, both ids hear
//! DISCONNECTED, both QPs are in ERR), and A connects again. Then siw's
//! deregistration under a peer's READ (issue 38 item 5): B READs 8 MiB of
//! A's memory, A deregisters it as soon as the request is in and
//! overwrites it, and B's successful READ brings the bytes written after
//! `DEREG_MR` returned; a `BufferMr` with REMOTE_READ refuses `dereg` until
//! A is told B's READ completed. The link going
//! down is rxe-only: siw's TCP retransmits for minutes before its QP
//! learns anything. One control connection (over eth0) orders both parts.

mod common;

use std::net::SocketAddr;
use std::process::Command;
use std::time::{Duration, Instant};

use common::cm::*;
use common::two_host::*;
use common::*;
use uverbs::cm::{CmId, ConnParam, EventChannel, EventKind, Param};
use uverbs::mr::{ReregFlags, ReregPath};
use uverbs::qp::QpState;
use uverbs::wr::{Remote, SendOp, WcOpcode, WcStatus, WorkCompletion};
use uverbs::{CompletionQueue, Context, ProtectionDomain, QpType, QueuePair};

/// The test's name, for the device gate and the notes.
const TEST_NAME: &str = "cm_connect_send_write_read_and_rereg_between_two_hosts";
/// B's cm listener on rxe0 is on the control port plus this.
const CM_PORT_OFFSET: u16 = 1000;
/// B's cm listener on siw0 is on the control port plus this (iWARP's
/// listener is a kernel TCP socket on eth1's address).
const SIW_CM_PORT_OFFSET: u16 = 2000;
/// How long the cm is watched for an event after the QPs died.
const QUIET: Duration = Duration::from_millis(500);
/// B's NIC (rxe0's netdev in the two-host guests).
const NIC: &str = "eth0";
/// How long B keeps its link down: longer than [`RETRY_WAIT`], so A's
/// retries all fall into it.
const LINK_DOWN_FOR: Duration = Duration::from_secs(12);
/// The transport retry count A asks for in its connect. Not
/// `ConnParam`'s default 7: rxe takes 7 to mean "retry forever"
/// (`rxe_comp.c` never decrements it; seen in the VM: no error within
/// 20 s of the link going down).
const RETRY_COUNT: u8 = 6;
/// How long A's WRITEs may take to fail once the link is down: the cm's
/// RoCE local ACK timeout (packet lifetime 16, so 2^17 * 4.096 us, about
/// 0.5 s) times 1 + [`RETRY_COUNT`] is 3.8 s (measured in the VM: 4.3 s
/// after B's notice, which comes 0.5 s before the link goes), and a margin.
const RETRY_WAIT: Duration = Duration::from_secs(10);

/// [`RETRY_WAIT`] on this kernel: Linux 6.1's rxe fails the first WRITE
/// later (measured in the VM: 16.5 s and 16.6 s after B's notice), so it
/// gets 40 s there (the time it took is printed).
fn retry_wait() -> Duration {
    if common::kernel::answers_as_6_1() {
        Duration::from_secs(40)
    } else {
        RETRY_WAIT
    }
}

/// [`LINK_DOWN_FOR`] on this kernel: longer than [`retry_wait`].
fn link_down_for() -> Duration {
    retry_wait() + (LINK_DOWN_FOR - RETRY_WAIT)
}
/// The WRITEs A keeps in flight while the link goes down, each of
/// [`STREAM_LEN`] bytes, into B's memory at [`STREAM_AT`].
const STREAM_DEPTH: usize = 8;
const STREAM_LEN: usize = 4096;
const STREAM_AT: usize = 224 << 10;

/// The tag that opens this binary's private data.
const TAG: &[u8; 4] = b"uvcm";

/// What a side tells its peer in its private data: its QP number and the
/// place, rkey and length of its peer-addressable memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Target {
    qpn: u32,
    addr: u64,
    rkey: u32,
    len: u32,
}

impl Target {
    /// `uvcm`, then qpn, addr, rkey, len, little-endian: 24 bytes (the IB
    /// CM's request carries 56).
    fn encode(&self) -> Vec<u8> {
        let mut v = TAG.to_vec();
        v.extend_from_slice(&self.qpn.to_le_bytes());
        v.extend_from_slice(&self.addr.to_le_bytes());
        v.extend_from_slice(&self.rkey.to_le_bytes());
        v.extend_from_slice(&self.len.to_le_bytes());
        v
    }

    /// The target in a peer's private data (the IB CM pads it with zeros).
    fn decode(bytes: &[u8], what: &str) -> Target {
        assert!(
            bytes.len() >= 24 && &bytes[..4] == TAG,
            "{what}: private data without our target: {bytes:02x?}"
        );
        let u32_at = |i: usize| u32::from_le_bytes(bytes[i..i + 4].try_into().unwrap());
        Target {
            qpn: u32_at(4),
            addr: u64::from_le_bytes(bytes[8..16].try_into().unwrap()),
            rkey: u32_at(16),
            len: u32_at(20),
        }
    }
}

/// One connection the cm set up. Fields drop in order: QP, CQ, then the id.
struct Conn {
    qp: QueuePair,
    cq: CompletionQueue,
    id: CmId,
}

/// One side: its cm channel (B: and listener), the current connection,
/// and its memory.
struct Side<'a> {
    me: String,
    role: Role,
    ctx: &'a Context,
    pd: &'a ProtectionDomain,
    /// B's listener's address (A connects to it, B listens on it).
    cm_addr: SocketAddr,
    /// iWARP (siw): the kernel's CM drives the QPs (`common::cm`).
    iwarp: bool,
    conn: Option<Conn>,
    /// B's listener.
    listener: Option<CmId>,
    ch: EventChannel,
    bufs: Buffers,
    /// The peer's memory, from its private data.
    peer: Target,
    connects: u32,
}

impl Side<'_> {
    fn conn(&self) -> &Conn {
        self.conn.as_ref().expect("connected")
    }

    fn target(&self, qpn: u32) -> Target {
        Target {
            qpn,
            addr: self.bufs.mem.as_ptr() as u64,
            rkey: self.bufs.mem_mr.rkey(),
            len: LEN as u32,
        }
    }

    fn new_qp(&self) -> (CompletionQueue, QueuePair) {
        let cq = self
            .ctx
            .create_cq(64, None)
            .unwrap_or_else(|e| panic!("{}: create_cq: {e}", self.me));
        let qp = qp_on(self.pd, QpType::Rc, &cq, &self.me);
        (cq, qp)
    }

    /// A new CQ and QP for `id` (the `side`'s id, which must be on this
    /// device), moved to INIT with exactly what the cm answers.
    fn new_qp_in_init(&self, id: &CmId, side: &str, what: &str) -> (CompletionQueue, QueuePair) {
        assert!(
            landed_on(id, self.ctx),
            "{what}: the {side}'s cm id is not on {}",
            self.ctx.device_name()
        );
        let (cq, qp) = self.new_qp();
        cm_modify(
            id,
            &qp,
            QpState::Init,
            &format!("{what}: {side} RESET->INIT"),
        );
        (cq, qp)
    }

    /// The connect's or accept's parameters for `qp`: its number, and our
    /// [`Target`] as the private data.
    fn conn_param(&self, qp: &QueuePair) -> ConnParam {
        ConnParam::new(qp.qp_num())
            .private_data(&self.target(qp.qp_num()).encode())
            .unwrap()
    }

    /// A's half up to the accept: an id with its route to B's listener
    /// (on this device), a new QP in INIT, the connect carrying our
    /// [`Target`]; and the event that answered it, on the id.
    fn client_connect(&self, what: &str) -> (CmId, QueuePair, CompletionQueue, uverbs::cm::Event) {
        let id = resolved_client_to(&self.ch, self.cm_addr)
            .unwrap_or_else(|why| panic!("{what}: resolving {}: {why}", self.cm_addr));
        let (cq, qp) = self.new_qp_in_init(&id, "client", what);
        let param = self.conn_param(&qp).retry_count(RETRY_COUNT);
        id.connect(&param)
            .unwrap_or_else(|e| panic!("{what}: connect to {}: {e}", self.cm_addr));
        let ev = next_event(&self.ch, &format!("{what}: client connect"));
        assert_eq!(ev.id, id.handle(), "{what}");
        (id, qp, cq, ev)
    }

    /// A connects to B's listener with the cm; B accepts. Both sides end
    /// with an RTS QP whose attributes all came from `INIT_QP_ATTR`, and
    /// the peer's [`Target`].
    fn connect(&mut self, ctl: &mut Control) {
        assert!(self.conn.is_none(), "{}: connect twice", self.me);
        self.connects += 1;
        let what = format!("{}: connection {}", self.me, self.connects);
        ctl.barrier("connect");
        let conn = match self.role {
            Role::A if !self.iwarp => {
                let (id, qp, cq, ev) = self.client_connect(&what);
                assert_eq!(ev.id, id.handle(), "{what}");
                let EventKind::ConnectResponse(Param::Conn(response)) = ev.kind else {
                    panic!("{what}: expected CONNECT_RESPONSE: {:?}", ev.kind)
                };
                self.peer = Target::decode(&response.private_data, &what);
                assert_eq!(
                    response.qp_num, self.peer.qpn,
                    "{what}: the cm's QP number of the acceptor is the one it sent"
                );
                cm_modify(
                    &id,
                    &qp,
                    QpState::Init,
                    &format!("{what}: client INIT->INIT"),
                );
                cm_modify(&id, &qp, QpState::Rtr, &format!("{what}: client INIT->RTR"));
                cm_modify(&id, &qp, QpState::Rts, &format!("{what}: client RTR->RTS"));
                id.establish()
                    .unwrap_or_else(|e| panic!("{what}: establish: {e}"));
                Conn { qp, cq, id }
            }
            Role::A => {
                let (id, qp, cq, ev) = self.client_connect(&what);
                // iWARP: no CONNECT_RESPONSE; ESTABLISHED carries the
                // accept's private data, and the kernel moved the QP to RTS.
                let EventKind::Established(Param::Conn(response)) = ev.kind else {
                    panic!("{what}: expected ESTABLISHED: {:?}", ev.kind)
                };
                self.peer = Target::decode(&response.private_data, &what);
                assert_eq!(
                    response.qp_num, 0,
                    "{what}: iWARP's MPA reply carries no QP number"
                );
                assert_rts(&qp, &what);
                Conn { qp, cq, id }
            }
            Role::B => {
                let listener = self.listener.as_ref().expect("b listens");
                let ev = next_event(&self.ch, &format!("{what}: listener"));
                assert_eq!(ev.uid, listener.uid(), "{what}: the listener's uid");
                let EventKind::ConnectRequest { id, param } = ev.kind else {
                    panic!("{what}: expected CONNECT_REQUEST: {:?}", ev.kind)
                };
                let Param::Conn(request) = param else {
                    panic!("{what}: {param:?}")
                };
                self.peer = Target::decode(&request.private_data, &what);
                // iWARP's MPA request carries no QP number: the cm reports 0.
                let want_qpn = if self.iwarp { 0 } else { self.peer.qpn };
                assert_eq!(
                    request.qp_num, want_qpn,
                    "{what}: the cm's QP number of the requester"
                );
                let (cq, qp) = self.new_qp_in_init(&id, "server", &what);
                cm_modify(&id, &qp, QpState::Rtr, &format!("{what}: server INIT->RTR"));
                // On iWARP this answer has no state: RTS comes at establishment.
                cm_modify(&id, &qp, QpState::Rts, &format!("{what}: server RTR->RTS"));
                id.accept(&self.conn_param(&qp))
                    .unwrap_or_else(|e| panic!("{what}: accept: {e}"));
                let ev = next_event(&self.ch, &format!("{what}: server established"));
                assert!(
                    matches!(ev.kind, EventKind::Established(_)),
                    "{what}: {ev:?}"
                );
                assert_eq!((ev.id, ev.uid), (id.handle(), id.uid()), "{what}");
                if self.iwarp {
                    assert_rts(&qp, &what);
                }
                Conn { qp, cq, id }
            }
        };
        assert_eq!(
            self.peer.len, LEN as u32,
            "{what}: the peer's memory length"
        );
        loud(&format!(
            "{what}: up: our QP {} <-> the peer's QP {} (its memory {:#x}, rkey {:#x})",
            conn.qp.qp_num(),
            self.peer.qpn,
            self.peer.addr,
            self.peer.rkey
        ));
        self.conn = Some(conn);
        ctl.barrier("connected");
    }

    /// The orderly end of the connection: A's DREQ, B's DISCONNECTED and
    /// DREP, A's DISCONNECTED, each side's TIMEWAIT_EXIT, then nothing; the
    /// QP and CQ go, and the id is destroyed with the kernel's count of its
    /// events equal to the channel's.
    fn disconnect(&mut self, ctl: &mut Control) {
        let what = format!("{}: disconnecting connection {}", self.me, self.connects);
        let Conn { qp, cq, id } = self.conn.take().expect("connected");
        ctl.barrier("disconnect");
        if self.role == Role::A {
            id.disconnect()
                .unwrap_or_else(|e| panic!("{what}: client disconnect: {e}"));
        }
        let ev = next_event(&self.ch, &format!("{what}: disconnected"));
        assert!(matches!(ev.kind, EventKind::Disconnected), "{what}: {ev:?}");
        assert_eq!(ev.id, id.handle(), "{what}");
        if self.role == Role::B {
            id.disconnect()
                .unwrap_or_else(|e| panic!("{what}: server disconnect (the DREP): {e}"));
        }
        // iWARP has no time-wait state in the cm (cma_iw_handler reports
        // the stream's close as DISCONNECTED and nothing after it).
        if !self.iwarp {
            let ev = next_event(&self.ch, &format!("{what}: timewait"));
            assert!(matches!(ev.kind, EventKind::TimewaitExit), "{what}: {ev:?}");
            assert_eq!(ev.id, id.handle(), "{what}");
        }
        assert_no_event(&self.ch, Duration::from_millis(200), &what);
        self.destroy(Conn { qp, cq, id }, &what);
        ctl.barrier("disconnected");
    }

    /// Destroys a connection whose cm events are all in: the QP and CQ,
    /// then the id, with the kernel's count of its events equal to the
    /// channel's.
    fn destroy(&self, conn: Conn, what: &str) {
        let Conn { qp, cq, id } = conn;
        drop((qp, cq));
        let received = id.events_received();
        let reported = id
            .destroy()
            .unwrap_or_else(|e| panic!("{what}: destroy_id: {e}"));
        assert_eq!(
            reported, received,
            "{what}: the kernel's count of events is the channel's"
        );
        loud(&format!(
            "{what}: done, {reported} events reported and received"
        ));
    }
}

impl Traffic for Side<'_> {
    fn me(&self) -> &str {
        &self.me
    }
    fn qp(&self) -> &QueuePair {
        &self.conn().qp
    }
    fn role(&self) -> Role {
        self.role
    }
    fn bufs(&self) -> &Buffers {
        &self.bufs
    }
    fn cq(&self) -> &CompletionQueue {
        &self.conn().cq
    }
    fn bufs_mut(&mut self) -> &mut Buffers {
        &mut self.bufs
    }
    fn peer_mem(&self) -> (u64, u32) {
        (self.peer.addr, self.peer.rkey)
    }
}

#[test]
fn cm_connect_send_write_read_and_rereg_between_two_hosts() {
    const TEST: &str = "cm_connect_send_write_read_and_rereg_between_two_hosts";
    let Some(p) = peer_from_env(TEST) else {
        return;
    };
    let me = format!("{} ({})", p.role.name(), p.local);
    if !cm_present(TEST) {
        return;
    }
    let devices = devices_under_test(TEST);
    let find = |prefix: &str| devices.iter().find(|d| d.name().starts_with(prefix));
    // The plan, the same on both hosts: rxe0, then siw0, each where there.
    // (The gate above has failed already if a device was required.)
    let plan: Vec<(Link, &uverbs::Device)> = [(Link::Rxe, "rxe"), (Link::Siw, "siw")]
        .into_iter()
        .filter_map(|(link, prefix)| match find(prefix) {
            Some(d) => Some((link, d)),
            None => {
                loud(&format!("SKIPPED: {TEST}: {me}: no {prefix} device"));
                None
            }
        })
        .collect();
    let names: Vec<&str> = plan.iter().map(|(_, d)| d.name()).collect();

    let mut ctl = Control::meet_and_greet(&p, &names.join(","));
    for (link, dev) in plan {
        on_device(&p, &mut ctl, link, dev);
    }
    // A leaves last: B's last message is its answer to A's.
    ctl.barrier("bye");
}

/// Which device and link a part of the plan runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Link {
    /// rxe0 over eth0 (RoCE v2; B's cm listener on the control port +
    /// [`CM_PORT_OFFSET`]).
    Rxe,
    /// siw0 over eth1 (iWARP; B's listener on the control port +
    /// [`SIW_CM_PORT_OFFSET`]).
    Siw,
}

/// The whole plan on one device: connect, traffic both ways, the rereg
/// case (rxe: in place; siw: by replace), on rxe the link going down, the
/// last orderly disconnect, and every handle accounted for.
fn on_device(p: &Peer, ctl: &mut Control, link: Link, dev: &uverbs::Device) {
    let (local, peer, offset) = match link {
        Link::Rxe => (p.local, p.peer, CM_PORT_OFFSET),
        Link::Siw => (p.siw_local, p.siw_peer, SIW_CM_PORT_OFFSET),
    };
    let me = format!("{} ({local}, {})", p.role.name(), dev.name());
    let dut = open(dev);
    let ctx: &Context = &dut;
    let counts = HandleCounts::new(&dut, TEST_NAME);
    let cm_port = p
        .port
        .checked_add(offset)
        .unwrap_or_else(|| panic!("{me}: UVERBS_TWO_HOST_PORT {} is too high", p.port));
    let b_addr = match p.role {
        Role::A => peer,
        Role::B => local,
    };
    let cm_addr = SocketAddr::from((b_addr, cm_port));

    // B listens before the first connect barrier: A connects only after it.
    let (ch, listener) = match p.role {
        Role::A => (
            EventChannel::open().unwrap_or_else(|e| panic!("{me}: open rdma_cm: {e}")),
            None,
        ),
        Role::B => {
            let (ch, listener, port) = cm_listener_on(cm_addr, 4);
            assert_eq!(port, cm_port, "{me}: the listener's port");
            (ch, Some(listener))
        }
    };
    loud(&format!(
        "{me}: cm on {} over {}, b listens on {cm_addr}",
        ctx.device_name(),
        ctx.transport_kind()
    ));

    let pd = alloc_pd(ctx);
    let bufs = Buffers::new(&pd);
    counts.assert_extra(2, 1, "two MRs in one PD");
    let mut s = Side {
        me: me.clone(),
        role: p.role,
        ctx,
        pd: &pd,
        cm_addr,
        iwarp: link == Link::Siw,
        conn: None,
        listener,
        ch,
        bufs,
        peer: Target {
            qpn: 0,
            addr: 0,
            rkey: 0,
            len: 0,
        },
        connects: 0,
    };
    s.connect(ctl);
    counts.assert_extra_cq_qp(1, 1, "one connection: one CQ, one QP");

    // SEND/RECV, RDMA WRITE, RDMA READ: A to B, then B to A.
    for (step, sender) in [(1u64, Role::A), (2, Role::B)] {
        send_recv(&mut s, ctl, sender, step);
        write(
            &mut s,
            ctl,
            sender,
            step,
            WRITE_AT + step as usize * RDMA_LEN,
        );
        read(&mut s, ctl, sender, step);
    }
    // The rereg steps reconnect once; where rxe has none, nothing does.
    let mut reconnected = true;
    match link {
        Link::Rxe => {
            // Both hosts boot the same kernel, so both skip or neither.
            if common::kernel::skip_rxe_without_rereg(
                &me,
                "two_host_cm rereg_while_the_peer_writes",
            ) {
                reconnected = false;
            } else {
                rereg_while_the_peer_writes(&mut s, ctl);
                counts.assert_extra_cq_qp(
                    1,
                    1,
                    "after the reconnection: the old QP and CQ are gone",
                );
            }
            link_down_during_writes(&mut s, ctl);
        }
        Link::Siw => {
            replace_while_the_peer_writes(&mut s, ctl);
            counts.assert_extra_cq_qp(1, 1, "after the reconnection: the old QP and CQ are gone");
            dereg_while_the_peer_reads(&mut s, ctl);
            loud(&format!(
                "NOTE: {TEST_NAME}: {me}: the link going down is covered on rxe0 only: siw's QP \
                 rides a kernel TCP socket without keepalive or TCP_USER_TIMEOUT, so with eth1 \
                 down TCP retransmits for minutes (tcp_retries2) before the QP learns anything: \
                 no outcome within a bounded wait"
            ));
        }
    }

    assert_no_completion(
        &s.conn().cq,
        &format!("{me}: a stray completion at the end"),
    );
    s.disconnect(ctl);
    counts.assert_extra_cq_qp(0, 0, "after the last disconnect");
    assert_eq!(
        s.connects,
        if reconnected { 2 } else { 1 },
        "{me}: one reconnection, after the refusal (none without the rereg steps)"
    );
    loud(&format!(
        "{me}: cm connect to {cm_addr}, SEND/RECV {SEND_LEN} B, RDMA WRITE and READ {RDMA_LEN} B both ways, rereg on b under a's WRITEs (where the device has it), orderly disconnects: all checked"
    ));
    let Side {
        listener, ch, bufs, ..
    } = s;
    if let Some(l) = listener {
        let received = l.events_received();
        let reported = l
            .destroy()
            .unwrap_or_else(|e| panic!("{me}: destroy the listener: {e}"));
        let connections = if reconnected { 2 } else { 1 };
        assert_eq!(
            (reported, received),
            (connections, connections),
            "{me}: the listener: one connect request per connection, reported and received"
        );
    }
    assert_no_event(
        &ch,
        Duration::from_millis(100),
        &format!("{me}: at the end"),
    );
    drop(ch);
    bufs.release(pd);
    counts.assert_extra(0, 0, "after dropping everything");
    counts.assert_extra_cq_qp(0, 0, "after dropping everything");
    ctl.barrier("device-done");
}

/// Fails unless `qp` is in RTS after ESTABLISHED (on iWARP the kernel's CM
/// moved it there; `established` learns it).
fn assert_rts(qp: &QueuePair, what: &str) {
    let state = qp
        .established()
        .unwrap_or_else(|e| panic!("{what}: established: {e}"));
    assert_eq!(state, QpState::Rts, "{what}: the QP after ESTABLISHED");
}

/// B re-registers its memory in place while A writes to it: a WRITE
/// lands; REMOTE_WRITE removed (same keys): the next WRITE is refused with
/// a remote access error, B's QP goes to ERR (its probe receive is
/// flushed), B's memory is untouched and the cm reports nothing on either
/// side. The dead connection is disconnected in order and A connects
/// again (new QPs, the same MRs and keys); REMOTE_WRITE restored in place:
/// the next WRITE lands.
fn rereg_while_the_peer_writes(s: &mut Side, ctl: &mut Control) {
    let me = s.me.clone();
    let k = rereg_refused(s, ctl);
    assert_no_event(&s.ch, QUIET, &format!("{me}: the cm after the refusal"));
    if s.role == Role::A {
        assert_no_completion(&s.conn().cq, &format!("{me}: after the refusal"));
    }
    loud(&format!(
        "{me}: rereg: both QPs dead, the cm reported nothing within {QUIET:?}: disconnecting and connecting again"
    ));
    let before = s.peer;
    s.disconnect(ctl);
    s.connect(ctl);
    assert_eq!(
        (s.peer.addr, s.peer.rkey, s.peer.len),
        (before.addr, before.rkey, before.len),
        "{me}: the peer's memory and rkey are the same over the new connection"
    );
    assert_ne!(s.peer.qpn, before.qpn, "{me}: the peer has a new QP");
    rereg_restored(s, ctl, k, "reconnected; ");
}

/// `ip link set <NIC> down` on B, undone (`up`) when dropped, also when
/// the test panics: the runs after this one need the link.
struct LinkDown {
    me: String,
}

fn ip_link(state: &str, me: &str) -> Result<(), String> {
    let out = Command::new("ip")
        .args(["link", "set", NIC, state])
        .output()
        .map_err(|e| format!("{me}: running `ip link set {NIC} {state}`: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{me}: `ip link set {NIC} {state}`: {}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

impl LinkDown {
    fn take(me: &str) -> LinkDown {
        ip_link("down", me).unwrap_or_else(|e| panic!("{e}"));
        loud(&format!("{me}: {NIC} is down"));
        LinkDown { me: me.to_string() }
    }
}

impl Drop for LinkDown {
    fn drop(&mut self) {
        match ip_link("up", &self.me) {
            Ok(()) => loud(&format!("{}: {NIC} is up again", self.me)),
            // Not a panic in a drop: the runs after this one will fail
            // loudly at their meeting instead.
            Err(e) => loud(&format!("FAILED: {e}")),
        }
    }
}

/// The link taken down during traffic: A streams WRITEs to B
/// ([`STREAM_DEPTH`] in flight) and B takes its NIC down. A's WRITEs
/// then fail RETRY_EXC_ERR (the first one; the rest of the queue is
/// flushed) within [`RETRY_WAIT`], with no cm event on either side; B
/// brings the link back up, and the connection's orderly disconnect
/// (DREQ, DREP) works over the restored link.
fn link_down_during_writes(s: &mut Side, ctl: &mut Control) {
    let me = s.me.clone();
    match s.role {
        Role::A => {
            ctl.expect("link-going-down");
            let data = pattern(400, STREAM_LEN);
            s.bufs.local[..STREAM_LEN].copy_from_slice(&data);
            let c = s.conn();
            let sges = sge(s.bufs.local.as_ptr() as u64, STREAM_LEN, &s.bufs.local_mr);
            let start = Instant::now();
            let (mut posted, mut done, mut ok) = (0u64, 0u64, 0u64);
            let mut first_error: Option<(WorkCompletion, Duration)> = None;
            let mut flushed = 0u64;
            let mut wc = [WorkCompletion::default(); 16];
            loop {
                while first_error.is_none() && posted - done < STREAM_DEPTH as u64 {
                    let at = STREAM_AT + (posted as usize % 8) * STREAM_LEN;
                    let wr = signalled(
                        posted,
                        SendOp::RdmaWrite {
                            remote: s.remote(at),
                            imm: None,
                        },
                        &sges,
                    );
                    // SAFETY: `local[..STREAM_LEN]` stays mapped and
                    // registered and is not written until every WRITE
                    // posted here has completed (the loop ends only then,
                    // or panics, and then the QP goes before the buffer).
                    unsafe { c.qp.post_send(&[wr]) }
                        .unwrap_or_else(|e| panic!("{me}: stream: post_send {posted}: {e}"));
                    posted += 1;
                }
                let n =
                    c.cq.poll(&mut wc)
                        .unwrap_or_else(|e| panic!("{me}: stream: poll_cq: {e}"));
                for w in &wc[..n] {
                    assert_eq!(w.wr_id(), done, "{me}: stream: completions in order: {w:?}");
                    done += 1;
                    match (w.status(), first_error.is_some()) {
                        (WcStatus::Success, false) => ok += 1,
                        (WcStatus::WrFlushErr, true) => flushed += 1,
                        (_, false) => first_error = Some((*w, start.elapsed())),
                        (_, true) => panic!("{me}: stream: after the first error: {w:?}"),
                    }
                }
                if first_error.is_some() && done == posted {
                    break;
                }
                let wait = retry_wait();
                assert!(
                    start.elapsed() < wait,
                    "{me}: stream: no failed WRITE within {wait:?} of b taking its link down \
                     ({ok} succeeded, {posted} posted, {done} completed)"
                );
                std::thread::sleep(Duration::from_micros(200));
            }
            let (err, after) = first_error.unwrap();
            assert_eq!(
                (err.status(), err.qp_num()),
                (WcStatus::RetryExcErr, c.qp.qp_num()),
                "{me}: stream: the link down shows as retries exhausted: {err:?}"
            );
            loud(&format!(
                "{me}: link down: {ok} WRITEs of {STREAM_LEN} B landed, then WRITE {} failed {:?} \
                 {after:?} after b's notice, {flushed} flushed",
                err.wr_id(),
                err.status()
            ));
            assert_no_event(
                &s.ch,
                QUIET,
                &format!("{me}: the cm after retries exhausted"),
            );
            ctl.send("retry-exceeded", &format!("{after:?}"));
            ctl.expect("link-up");
        }
        Role::B => {
            ctl.send("link-going-down", "");
            // A is streaming by the time the link goes.
            std::thread::sleep(Duration::from_millis(500));
            let link = LinkDown::take(&me);
            std::thread::sleep(link_down_for());
            assert_no_event(&s.ch, QUIET, &format!("{me}: the cm with {NIC} down"));
            drop(link);
            // The control connection crosses the same link: A's report
            // arrives once TCP retransmits it.
            let after = ctl.expect("retry-exceeded");
            loud(&format!(
                "{me}: link down: a's WRITEs failed RETRY_EXC_ERR after {after}"
            ));
            assert_no_completion(&s.conn().cq, &format!("{me}: after the link came back"));
            ctl.send("link-up", "");
        }
    }
}

/// Where B's memory is re-registered on siw while A writes.
const REPLACE_AT: usize = 200 << 10;

/// siw refuses re-registration in place, so B re-registers its memory by
/// the replace fallback (`ReregFallback::Replace`: a new MR with the same
/// range and access, then the old one deregistered) while A writes to it:
/// a WRITE lands with the old rkey; B replaces (path `Replaced`, a new
/// rkey, the same range) and tells A the new rkey; A's WRITE and READ with
/// the new rkey land and are checked; A's WRITE with the old rkey writes
/// nothing (B's memory all as it was) and kills the connection as the
/// kernel makes it (measured: siw completes the WRITE with SUCCESS once it
/// is on the wire; B's siw finds no MR for the STag and terminates the
/// stream: each side's id hears DISCONNECTED, both QPs are in ERR). The dead connection's ids are destroyed with every event
/// accounted for, A connects again, and its WRITE with the new rkey (from
/// B's new private data) lands.
fn replace_while_the_peer_writes(s: &mut Side, ctl: &mut Control) {
    let me = s.me.clone();
    let at = REPLACE_AT;
    // A WRITEs pattern(seed) to B's memory at `at` with `rkey`: it
    // succeeds, and A waits until it is placed.
    let write_placed = |s: &mut Side, seed: u64, rkey: u32, what: &str| {
        let data = pattern(seed, RDMA_LEN);
        s.bufs.local[..RDMA_LEN].copy_from_slice(&data);
        let op = SendOp::RdmaWrite {
            remote: Remote {
                addr: s.peer.addr + at as u64,
                rkey,
            },
            imm: None,
        };
        let wc = s.post(seed, op, 0, RDMA_LEN, what);
        check(&wc, what, WcOpcode::RdmaWrite, &s.conn().qp, seed);
        placed(s, at, what);
    };
    let landed = |s: &mut Side, seed: u64, what: &str| {
        s.bufs.model[at..at + RDMA_LEN].copy_from_slice(&pattern(seed, RDMA_LEN));
        s.check_mem(what);
    };
    let old_rkey = match s.role {
        Role::A => s.peer.rkey,
        Role::B => s.bufs.mem_mr.rkey(),
    };
    let new_rkey = match s.role {
        Role::A => {
            let what = "replace: WRITE with the old rkey before";
            write_placed(s, 501, old_rkey, what);
            ctl.send("written", "");
            let told = ctl.expect("replaced");
            let new: u32 = told
                .parse()
                .unwrap_or_else(|e| panic!("{me}: the new rkey {told:?}: {e}"));
            assert_ne!(new, old_rkey, "{me}: a new rkey");
            s.peer.rkey = new;

            let what = "replace: WRITE with the new rkey";
            write_placed(s, 502, new, what);
            ctl.send("written", "");
            ctl.expect("checked");
            new
        }
        Role::B => {
            ctl.expect("written");
            landed(s, 501, "replace: WRITE with the old rkey before");
            let (addr, len) = (s.bufs.mem_mr.addr(), s.bufs.mem_mr.length());
            let path = replace(&mut s.bufs.mem_mr, ReregFlags::ACCESS, None, RW_READ)
                .unwrap_or_else(|e| panic!("{me}: replace (ACCESS, the same access): {e}"));
            assert_eq!(path, ReregPath::Replaced, "{me}: siw refuses in place");
            let new = s.bufs.mem_mr.rkey();
            assert_ne!(new, old_rkey, "{me}: the replacement has a new rkey");
            assert_eq!(
                (s.bufs.mem_mr.addr(), s.bufs.mem_mr.length()),
                (addr, len),
                "{me}: the replacement covers the same range"
            );
            loud(&format!(
                "{me}: replace: {path:?}, rkey {old_rkey:#x} -> {new:#x}"
            ));
            ctl.send("replaced", &new.to_string());
            ctl.expect("written");
            landed(s, 502, "replace: WRITE with the new rkey");
            ctl.send("checked", "");
            new
        }
    };
    // The READ of the shared step, with the new rkey.
    read(s, ctl, Role::A, 3);

    // The old rkey.
    let what = format!("{me}: replace: WRITE with the old rkey {old_rkey:#x}");
    let conn = s.conn.take().expect("connected");
    match s.role {
        Role::A => {
            let data = pattern(503, RDMA_LEN);
            s.bufs.local[..RDMA_LEN].copy_from_slice(&data);
            let sges = sge(s.bufs.local.as_ptr() as u64, RDMA_LEN, &s.bufs.local_mr);
            let wr = signalled(
                503,
                SendOp::RdmaWrite {
                    remote: Remote {
                        addr: s.peer.addr + at as u64,
                        rkey: old_rkey,
                    },
                    imm: None,
                },
                &sges,
            );
            // SAFETY: `local[..RDMA_LEN]` stays mapped and registered and
            // is not touched until the completion is polled just below.
            unsafe { conn.qp.post_send(&[wr]) }
                .unwrap_or_else(|e| panic!("{what}: post_send: {e}"));
            let wc = wait_one(&conn.cq, &what);
            // Measured on siw: the requester completes a WRITE once it is
            // on the wire (SUCCESS); the refusal comes as the stream's
            // termination. When the close overtakes the send it completes
            // LOC_QP_OP_ERR instead (seen in one guest; allowed here too).
            assert!(
                matches!(wc.status(), WcStatus::Success | WcStatus::LocQpOpErr),
                "{what}: the requester's completion: {wc:?}"
            );
            assert_eq!(
                (wc.wr_id(), wc.qp_num()),
                (503, conn.qp.qp_num()),
                "{what}: {wc:?}"
            );
            ctl.send("old-rkey-written", "");
        }
        Role::B => {
            ctl.expect("old-rkey-written");
        }
    }
    let ev = next_event(&s.ch, &format!("{what}: the connection's end"));
    assert!(
        matches!(ev.kind, EventKind::Disconnected),
        "{what}: the peer's termination ends the connection: {ev:?}"
    );
    assert_eq!(ev.id, conn.id.handle(), "{what}");
    assert_no_event(&s.ch, QUIET, &format!("{what}: after DISCONNECTED"));
    let state = common::kernel::reported_state(conn.qp.refresh_state(), &what);
    loud(&format!("{what}: DISCONNECTED, our QP {state:?}"));
    // Measured on siw (6.12): both QPs are in ERR once DISCONNECTED came.
    if let Some(state) = state {
        assert_eq!(state, QpState::Err, "{what}: our QP after the termination");
    }
    match s.role {
        Role::A => {}
        Role::B => {
            s.check_mem(&format!(
                "{what}: the old rkey wrote nothing (all {LEN} bytes as they were)"
            ));
        }
    }
    // Whatever the dead QP flushed goes with it.
    s.destroy(conn, &what);
    ctl.barrier("dead-connection-destroyed");

    let before = s.peer;
    s.connect(ctl);
    // A's view of B's memory has B's new rkey; B's of A's is unchanged.
    let want_rkey = match s.role {
        Role::A => new_rkey,
        Role::B => before.rkey,
    };
    assert_eq!(
        (s.peer.addr, s.peer.rkey, s.peer.len),
        (before.addr, want_rkey, before.len),
        "{me}: over the new connection the peer's memory is the same (B's with the new rkey)"
    );
    match s.role {
        Role::A => {
            let what = "replace: WRITE with the new rkey over the new connection";
            write_placed(s, 504, new_rkey, what);
            ctl.send("written", "");
            ctl.expect("checked");
        }
        Role::B => {
            ctl.expect("written");
            landed(
                s,
                504,
                "replace: WRITE with the new rkey over the new connection",
            );
            loud(&format!(
                "{me}: replace: rkey {old_rkey:#x} -> {new_rkey:#x}: new one WRITE+READ checked, \
                 old one wrote nothing and ended the connection, reconnected, new one WRITE checked"
            ));
            ctl.send("checked", "");
        }
    }
}

/// How much of A's memory B READs while A deregisters it: far more than
/// TCP's send buffer, so most of the response is still to be sent when A's
/// process learns that the request arrived.
const DEREG_READ_LEN: usize = 8 << 20;
/// What A's memory holds while registered, and what A writes after
/// `DEREG_MR` returned.
const BEFORE_DEREG: u8 = 0x11;
const AFTER_DEREG: u8 = 0xee;
/// How long B waits for its READ and SEND to complete.
const DEREG_READ_WAIT: Duration = Duration::from_secs(60);

/// Issue 38 item 5, siw: does `DEREG_MR` fence an RDMA READ response that
/// is being sent? A registers [`DEREG_READ_LEN`] bytes of
/// [`BEFORE_DEREG`] for remote READ; B posts one READ of all of it and
/// watches its landing buffer until the response's first bytes arrive
/// (siw checks the key once, when the response starts: `siw_check_sgl_tx`;
/// a dereg before that fails the READ, as on any device), then tells A,
/// which deregisters the memory at once and fills it with
/// [`AFTER_DEREG`]. On a device whose deregistration fences (mlx5, rxe:
/// `rxe_recheck_mr` per packet) the rest of the READ fails. siw holds a
/// reference to the memory until the last byte is handed to TCP, and
/// hands pages of 4 KiB and more to TCP by reference (`MSG_SPLICE_PAGES`):
/// bytes A writes after `DEREG_MR` returned reach B inside a READ that
/// completes successfully. B counts both kinds of byte and A prints the
/// verdict: every byte is one of the two, the READ succeeds, and some
/// bytes are from after the dereg (measured: 96.9 to 99.7 % of them, in
/// 13 READs on 6.12 and 6.1).
/// Should that ever stop, siw has learnt to fence, and
/// `Siw::DEREG_FENCES_PEER_READS` can say so.
///
/// Then the crate's rule, over the same connection: A's `BufferMr` with
/// REMOTE_READ refuses `dereg` while B READs it (typed, still registered:
/// B's READ brings every byte as it was), and after B's word that its READ
/// completed, `assume_peer_reads_done` and `dereg` hand the buffer back.
fn dereg_while_the_peer_reads(s: &mut Side, ctl: &mut Control) {
    let me = s.me.clone();
    let what = format!("{me}: dereg under a READ of {DEREG_READ_LEN} bytes");
    let mut mem = anon(DEREG_READ_LEN);
    let access = match s.role {
        Role::A => uverbs::AccessFlags::LOCAL_WRITE | uverbs::AccessFlags::REMOTE_READ,
        Role::B => uverbs::AccessFlags::LOCAL_WRITE,
    };
    mem.fill(match s.role {
        Role::A => BEFORE_DEREG,
        Role::B => 0,
    });
    let mr = fresh_mr(s.pd, &mut mem, access);
    match s.role {
        Role::A => {
            ctl.send(
                "dereg-target",
                &format!("{} {}", mem.as_ptr() as u64, mr.rkey()),
            );
            ctl.expect("arriving");
            let took = Instant::now();
            mr.dereg()
                .unwrap_or_else(|e| panic!("{what}: dereg: {}", e.error));
            mem.fill(AFTER_DEREG);
            loud(&format!(
                "{what}: b saw the response start; DEREG_MR returned and {DEREG_READ_LEN} bytes \
                 overwritten {:?} after its word",
                took.elapsed()
            ));
            ctl.send("overwritten", "");
            let verdict = ctl.expect("verdict");
            loud(&format!("NOTE: {what}: b's READ brought {verdict}"));
        }
        Role::B => {
            let remote = expect_target(ctl, "dereg-target", &what);
            let sges = sge(mem.as_ptr() as u64, DEREG_READ_LEN, &mr);
            let wr = signalled(602, SendOp::RdmaRead { remote }, &sges);
            let started = Instant::now();
            let deadline = started + DEREG_READ_WAIT;
            // SAFETY: `mem` stays mapped and registered and is only read
            // (volatile, below) until the completion is polled.
            unsafe { s.conn().qp.post_send(&[wr]) }
                .unwrap_or_else(|e| panic!("{what}: post_send: {e}"));
            // The response's first byte lands at offset 0.
            // SAFETY: the first byte of `mem`, mapped; read volatile, as the
            // device writes it meanwhile.
            while unsafe { std::ptr::read_volatile(mem.as_ptr()) } != BEFORE_DEREG {
                assert!(Instant::now() < deadline, "{what}: no byte of the response");
                std::hint::spin_loop();
            }
            let first = started.elapsed();
            ctl.send("arriving", "");
            read_completed(s, deadline, 602, &what);
            let took = started.elapsed();
            let before = mem.iter().filter(|&&b| b == BEFORE_DEREG).count();
            let after = mem.iter().filter(|&&b| b == AFTER_DEREG).count();
            let first_after = mem.iter().position(|&b| b == AFTER_DEREG);
            assert_eq!(
                before + after,
                DEREG_READ_LEN,
                "{what}: every byte is a's, from before or after its dereg"
            );
            assert!(
                after > 0,
                "{what}: siw's READ response sent nothing written after DEREG_MR ({before} bytes \
                 from before): if siw fences READs now, revisit Siw::DEREG_FENCES_PEER_READS"
            );
            let verdict = format!(
                "{before} bytes from before a's DEREG_MR and {after} written after it \
                 (first at offset {first_after:?}), SUCCESS, in {took:?} (first byte after \
                 {first:?})"
            );
            loud(&format!("NOTE: {what}: {verdict}"));
            ctl.expect("overwritten");
            ctl.send("verdict", &verdict);
            drop(mr);
        }
    }
    drop(mem);
    ctl.barrier("dereg-read-done");
    owned_dereg_after_the_peer_reads(s, ctl);
}

/// Waits until `deadline` for the one completion of the READ `wr_id`
/// (longer than `wait_one`'s bound: 8 MiB under TCG) and checks it.
fn read_completed(s: &Side, deadline: Instant, wr_id: u64, what: &str) {
    let mut wc = [WorkCompletion::default(); 1];
    while s.conn().cq.poll(&mut wc).expect("poll_cq") == 0 {
        assert!(Instant::now() < deadline, "{what}: no READ completion");
        std::thread::sleep(Duration::from_millis(1));
    }
    check(&wc[0], what, WcOpcode::RdmaRead, &s.conn().qp, wr_id);
}

/// The peer's memory that its `tag` message names (`<addr> <rkey>`).
fn expect_target(ctl: &mut Control, tag: &str, what: &str) -> Remote {
    let told = ctl.expect(tag);
    told.split_once(' ')
        .and_then(|(a, k)| {
            Some(Remote {
                addr: a.parse().ok()?,
                rkey: k.parse().ok()?,
            })
        })
        .unwrap_or_else(|| panic!("{what}: the peer's target {told:?}"))
}

/// The second half of [`dereg_while_the_peer_reads`]: the same READ of a
/// `BufferMr`, whose `dereg` refuses until A is told the READ completed.
fn owned_dereg_after_the_peer_reads(s: &mut Side, ctl: &mut Control) {
    let me = s.me.clone();
    let what = format!("{me}: an owned buffer under a READ of {DEREG_READ_LEN} bytes");
    match s.role {
        Role::A => {
            let owned =
                s.pd.reg_buffer(vec![BEFORE_DEREG; DEREG_READ_LEN], OWNED)
                    .unwrap_or_else(|e| panic!("{what}: reg_buffer: {}", e.error));
            assert!(owned.peer_reads_outlive_dereg(), "{what}: on siw");
            ctl.send(
                "owned-target",
                &format!("{} {}", owned.addr(), owned.rkey()),
            );
            ctl.expect("reading");
            let refused = owned.dereg().unwrap_err();
            assert!(
                matches!(refused.error, uverbs::Error::InvalidInput { .. }),
                "{what}: {:?}",
                refused.error
            );
            let mut owned = refused.mr;
            loud(&format!("{what}: dereg while b reads: {}", refused.error));
            ctl.expect("read-done");
            // SAFETY: b's one READ of the region completed (its word just
            // came), and b issues no other.
            unsafe { owned.assume_peer_reads_done() };
            let back = owned
                .dereg()
                .unwrap_or_else(|e| panic!("{what}: dereg after b's word: {}", e.error));
            assert_eq!(back.len(), DEREG_READ_LEN, "{what}");
            ctl.send("owned-back", "");
        }
        Role::B => {
            let remote = expect_target(ctl, "owned-target", &what);
            let mut mem = anon(DEREG_READ_LEN);
            let mr = fresh_mr(s.pd, &mut mem, uverbs::AccessFlags::LOCAL_WRITE);
            let sges = sge(mem.as_ptr() as u64, DEREG_READ_LEN, &mr);
            let wr = signalled(604, SendOp::RdmaRead { remote }, &sges);
            // SAFETY: `mem` stays mapped and registered and is not touched
            // until the completion is polled below.
            unsafe { s.conn().qp.post_send(&[wr]) }
                .unwrap_or_else(|e| panic!("{what}: post_send: {e}"));
            ctl.send("reading", "");
            read_completed(s, Instant::now() + DEREG_READ_WAIT, 604, &what);
            let changed = mem.iter().filter(|&&b| b != BEFORE_DEREG).count();
            assert_eq!(changed, 0, "{what}: every byte as a registered it");
            loud(&format!(
                "{what}: all {DEREG_READ_LEN} bytes as registered (a's dereg was refused)"
            ));
            ctl.send("read-done", "");
            ctl.expect("owned-back");
            drop(mr);
        }
    }
    ctl.barrier("owned-dereg-done");
}
