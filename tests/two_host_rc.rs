//! RC between two hosts: rxe0 on host A and rxe0 on host B, joined by one
//! Ethernet link, connected without a connection manager over RoCE v2
//! with each NIC's IPv4-mapped GID.
//!
//! `cargo vm test` runs this binary on both guests of its two-host run at
//! once (tests/vm/README.md), telling each its role and addresses:
//! `UVERBS_HOST_ROLE` (`a` or `b`), `UVERBS_LOCAL_ADDR`, `UVERBS_PEER_ADDR`,
//! `UVERBS_TWO_HOST_PORT` and `UVERBS_TWO_HOST_RUN`. Without a role (the
//! host suite) it says SKIPPED loudly and passes.
//!
//! The two processes meet on a plain TCP connection (A listens on its
//! address, B connects, both bounded), check that they run the same
//! configuration, swap `uverbs::qp::Endpoint` lines and bring their QPs to RTS;
//! every later step is coordinated over that connection, and every wait is
//! bounded (a peer that never comes, or dies, fails the run within
//! [`MEET_WAIT`] or [`CONTROL_WAIT`]). Then, each in both directions and
//! with every byte checked where it lands (each side keeps a model of its
//! peer-addressable memory and compares all of it after each remote
//! operation): SEND/RECV, RDMA WRITE, RDMA READ; then a re-registration on
//! B while A writes: a first WRITE lands, B removes REMOTE_WRITE in place
//! (same keys), A's next WRITE fails with a remote access error and B's
//! memory is untouched, both QPs are recovered, B restores REMOTE_WRITE in
//! place, and A's WRITE lands. The kernel's handle counts are back where
//! they started on both hosts at the end.
//!
//! siw0 (on eth1) cannot join: an iWARP QP reaches RTS only through the
//! kernel's iWARP connection manager (`two_host_cm.rs` connects it across
//! the hosts). Before the rxe part each host checks that the crate refuses
//! a siw QP's RTR -> RTS by hand with `RtsOnlyThroughCm`, the kernel
//! reporting the idle QP as INIT.

mod common;

use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use common::two_host::*;
use common::*;
use uverbs::device::{Gid, GidType};
use uverbs::qp::{Endpoint, QpAttr, QpState, QpTransitionError};
use uverbs::wr::{RecvWr, WcStatus, WorkCompletion};
use uverbs::{CompletionQueue, Context, QpType, QueuePair};

/// How long the NIC's IPv4-mapped GID may take to show in the GID table.
const GID_WAIT: Duration = Duration::from_secs(10);

/// The IPv4-mapped GID of `addr` (`::ffff:a.b.c.d`).
fn ipv4_mapped(addr: Ipv4Addr) -> Gid {
    Gid::from_raw(addr.to_ipv6_mapped().octets())
}

/// The index of the RoCE v2 GID of `addr` on [`PORT`], read from the GID
/// table (waiting up to [`GID_WAIT`] for the kernel to add it).
fn roce_v2_gid_index(ctx: &Context, addr: Ipv4Addr, me: &str) -> u32 {
    let want = ipv4_mapped(addr);
    let deadline = Instant::now() + GID_WAIT;
    loop {
        let table = ctx
            .query_gid_table()
            .unwrap_or_else(|e| panic!("{me}: query_gid_table: {e}"));
        let found = table
            .iter()
            .find(|e| e.port_num == PORT && e.gid == want && e.gid_type == GidType::RoceV2);
        if let Some(e) = found {
            loud(&format!(
                "{me}: {}: RoCE v2 GID {} of {addr} at index {}",
                ctx.device_name(),
                e.gid,
                e.gid_index
            ));
            return e.gid_index;
        }
        assert!(
            Instant::now() < deadline,
            "{me}: {}: no RoCE v2 GID {want} for {addr} within {GID_WAIT:?}; the table: {table:?}",
            ctx.device_name()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// One side of the connection.
struct Side<'a> {
    me: String,
    role: Role,
    ctx: &'a Context,
    cq: CompletionQueue,
    qp: QueuePair,
    gid_index: u32,
    bufs: Buffers,
    /// The peer, once known.
    peer: Endpoint,
}

impl Traffic for Side<'_> {
    fn me(&self) -> &str {
        &self.me
    }
    fn qp(&self) -> &QueuePair {
        &self.qp
    }
    fn role(&self) -> Role {
        self.role
    }
    fn bufs(&self) -> &Buffers {
        &self.bufs
    }
    fn cq(&self) -> &CompletionQueue {
        &self.cq
    }
    fn bufs_mut(&mut self) -> &mut Buffers {
        &mut self.bufs
    }
    fn peer_mem(&self) -> (u64, u32) {
        (self.peer.addr, self.peer.rkey)
    }
}

impl Side<'_> {
    /// RESET -> INIT -> RTR -> RTS towards the peer's QP and GID, sent
    /// from our own GID, granting WRITE and READ.
    fn connect(&self) {
        let dest = self.peer.roce_dest(self.gid_index as u8, PORT);
        for (step, attr) in rc_to_rts(QP_ACCESS, PORT, mtu_for(self.ctx), self.peer.qpn, dest) {
            modify(&self.qp, &attr, step);
        }
    }

    /// Posts a receive without SGEs, moves the QP to ERR, waits for that
    /// receive's flush (the QP's own move to ERR is then done too), resets
    /// it and connects it again. Returns the other completions seen.
    fn recover(&self, what: &str) -> Vec<WorkCompletion> {
        const MARKER: u64 = RECOVERY_MARKER;
        // SAFETY: a receive without SGEs names no memory.
        unsafe {
            self.qp.post_recv(&[RecvWr {
                wr_id: MARKER,
                sges: &[],
            }])
        }
        .unwrap_or_else(|e| panic!("{}: {what}: post_recv of the marker: {e}", self.me));
        modify(
            &self.qp,
            &QpAttr::new().state(QpState::Err),
            "->ERR (recovery)",
        );
        let mut others = Vec::new();
        let deadline = Instant::now() + WAIT;
        let mut wc = [WorkCompletion::default(); 8];
        'flushed: loop {
            let n = self
                .cq
                .poll(&mut wc)
                .unwrap_or_else(|e| panic!("{}: {what}: poll_cq: {e}", self.me));
            for c in &wc[..n] {
                if c.wr_id() == MARKER {
                    assert_eq!(
                        c.status(),
                        WcStatus::WrFlushErr,
                        "{}: {what}: {c:?}",
                        self.me
                    );
                    break 'flushed;
                }
                others.push(*c);
            }
            assert!(
                Instant::now() < deadline,
                "{}: {what}: the marker receive was not flushed within {WAIT:?}; seen {others:?}",
                self.me
            );
            std::thread::sleep(Duration::from_micros(200));
        }
        modify(
            &self.qp,
            &QpAttr::new().state(QpState::Reset),
            "->RESET (recovery)",
        );
        self.connect();
        others
    }
}

#[test]
fn rc_send_write_read_and_rereg_between_two_hosts() {
    const TEST: &str = "rc_send_write_read_and_rereg_between_two_hosts";
    let Some(p) = peer_from_env(TEST) else {
        return;
    };
    let devices = devices_under_test(TEST);
    let me = format!("{} ({})", p.role.name(), p.local);
    match devices.iter().find(|d| d.name().starts_with("siw")) {
        Some(siw) => siw_refuses_rts_by_hand(siw, &format!("{} ({})", p.role.name(), p.siw_local)),
        None => loud(&format!("SKIPPED: {TEST}: {me}: no siw device")),
    }
    let Some(dut) = open_rxe(devices, TEST, &me) else {
        return;
    };
    let ctx: &Context = &dut;
    let counts = HandleCounts::new(&dut, TEST);
    let mut ctl = Control::meet_and_greet(&p, ctx.device_name());
    loud(&format!(
        "{me}: met the peer {} on port {} for {}; {} over {}",
        p.peer,
        p.port,
        p.run,
        ctx.device_name(),
        ctx.transport_kind()
    ));

    let gid_index = roce_v2_gid_index(ctx, p.local, &me);
    let gid = ctx
        .query_gid(PORT, gid_index)
        .unwrap_or_else(|e| panic!("{me}: query_gid({PORT}, {gid_index}): {e}"));
    assert_eq!(
        gid,
        ipv4_mapped(p.local),
        "{me}: query_gid of the index found"
    );
    let pd = alloc_pd(ctx);
    let cq = ctx
        .create_cq(64, None)
        .unwrap_or_else(|e| panic!("{me}: create_cq: {e}"));
    let qp = qp_on(&pd, QpType::Rc, &cq, &me);
    let bufs = Buffers::new(&pd);
    counts.assert_extra(2, 1, "two MRs in one PD");
    counts.assert_extra_cq_qp(1, 1, "one CQ, one QP");

    let ours = Endpoint::of(&qp, gid, &bufs.mem_mr);
    ctl.send("endpoint", &ours.to_string());
    let line = ctl.expect("endpoint");
    let peer: Endpoint = line
        .parse()
        .unwrap_or_else(|e| panic!("{me}: the peer's endpoint {line:?}: {e}"));
    assert_eq!(
        peer.gid,
        ipv4_mapped(p.peer),
        "{me}: the peer's GID is its link address"
    );
    loud(&format!("{me}: ours {ours}, the peer's {peer}"));
    let mut s = Side {
        me: me.clone(),
        role: p.role,
        ctx,
        cq,
        qp,
        gid_index,
        bufs,
        peer,
    };
    s.connect();
    ctl.barrier("rts");

    // SEND/RECV, RDMA WRITE, RDMA READ: A to B, then B to A.
    for (step, sender) in [(1u64, Role::A), (2, Role::B)] {
        send_recv(&mut s, &mut ctl, sender, step);
        write(
            &mut s,
            &mut ctl,
            sender,
            step,
            WRITE_AT + step as usize * RDMA_LEN,
        );
        read(&mut s, &mut ctl, sender, step);
    }
    // Both hosts boot the same kernel, so both skip or neither.
    if !common::kernel::skip_rxe_without_rereg(&me, "two_host_rc rereg_while_the_peer_writes") {
        rereg_while_the_peer_writes(&mut s, &mut ctl);
    }

    assert_no_completion(&s.cq, &format!("{me}: a stray completion at the end"));
    // A leaves last: B's last message is its answer to A's.
    ctl.barrier("bye");
    loud(&format!(
        "{me}: SEND/RECV {SEND_LEN} B, RDMA WRITE and READ {RDMA_LEN} B both ways, rereg on b under a's WRITEs: all checked"
    ));
    let Side { cq, qp, bufs, .. } = s;
    drop((qp, cq));
    bufs.release(pd);
    counts.assert_extra(0, 0, "after dropping everything");
    counts.assert_extra_cq_qp(0, 0, "after dropping everything");
}

/// siw0 without a connection manager: an iWARP QP reaches RTS only when
/// the kernel's CM hands it its TCP stream, so this binary (which connects
/// by hand) cannot connect it to the peer. What it proves instead, on each
/// host by itself: RESET -> INIT (ACCESS_FLAGS, PORT) and INIT -> RTR (no
/// attributes: siw keeps the QP idle) pass, the RC attributes of
/// `rc_to_rts`'s RTR -> RTS are refused by the crate before anything is
/// sent (`QpTransitionError::RtsOnlyThroughCm { from: Rtr }`), and the
/// kernel reports the QP as siw's idle state answers (INIT), not RTS. `two_host_cm.rs` connects siw0
/// across the hosts.
fn siw_refuses_rts_by_hand(dev: &uverbs::Device, me: &str) {
    let me = format!("{me}, {}", dev.name());
    let dut = open(dev);
    let ctx: &Context = &dut;
    let counts = HandleCounts::new(&dut, "rc_send_write_read_and_rereg_between_two_hosts");
    let pd = alloc_pd(ctx);
    let cq = ctx
        .create_cq(8, None)
        .unwrap_or_else(|e| panic!("{me}: create_cq: {e}"));
    let qp = qp_on(&pd, QpType::Rc, &cq, &me);
    let init = QpAttr::new()
        .state(QpState::Init)
        .port(PORT)
        .access_flags(QP_ACCESS);
    modify(&qp, &init, &format!("{me}: RESET->INIT by hand"));
    modify(
        &qp,
        &QpAttr::new().state(QpState::Rtr),
        &format!("{me}: INIT->RTR by hand"),
    );
    let [.., (_, rts)] = rc_to_rts(
        QP_ACCESS,
        PORT,
        uverbs::qp::Mtu::Mtu1024,
        0,
        Default::default(),
    );
    match qp.modify(&rts) {
        Err(uverbs::Error::QpTransition {
            verdict: QpTransitionError::RtsOnlyThroughCm { from: QpState::Rtr },
            ..
        }) => {}
        other => panic!("{me}: RTR->RTS by hand on iWARP: expected RtsOnlyThroughCm: {other:?}"),
    }
    assert_eq!(
        qp.state(),
        QpState::Rtr,
        "{me}: the refusal left the QP in RTR"
    );
    // siw has no RTR of its own: its idle state answers QUERY_QP as INIT
    // (measured, 6.12); what matters is that it is not RTS.
    let state = common::kernel::reported_state(qp.refresh_state(), &me);
    if let Some(state) = state {
        assert_eq!(
            state,
            QpState::Init,
            "{me}: the kernel reports siw's idle QP"
        );
    }
    loud(&format!(
        "{me}: RTR->RTS by hand refused (RtsOnlyThroughCm), the kernel reports {state:?}: \
         siw connects only through the cm (two_host_cm)"
    ));
    drop((qp, cq, pd));
    counts.assert_extra_cq_qp(0, 0, "after the siw check");
    counts.assert_extra(0, 0, "after the siw check");
}

/// B re-registers its memory in place while A writes to it: a WRITE
/// lands; REMOTE_WRITE removed (same keys): the next WRITE is refused with
/// a remote access error and B's memory is untouched; both QPs recovered
/// and REMOTE_WRITE restored (same keys): the next WRITE lands.
fn rereg_while_the_peer_writes(s: &mut Side, ctl: &mut Control) {
    let me = s.me.clone();
    let k = rereg_refused(s, ctl);
    let others = s.recover("rereg: recovery");
    assert!(others.is_empty(), "{me}: recovery saw {others:?}");
    ctl.barrier("rts-again");
    rereg_restored(s, ctl, k, "");
}
