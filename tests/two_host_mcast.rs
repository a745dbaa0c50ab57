//! UD multicast between two hosts through the connection manager, on rxe0
//! over the link between them.
//!
//! `cargo vm test` runs this binary on both guests of its two-host run at
//! once (tests/vm/README.md); without a role it says SKIPPED loudly and
//! passes. The two processes meet on the plain TCP control connection of
//! `common::two_host`, which orders every step; every wait is bounded.
//!
//! Both hosts join group [`GROUP`] with `CmId::join_multicast` on a UDP id
//! bound to their rxe0 address: B as a full member, whose UD QP attaches
//! to the `MULTICAST_JOIN` event's GID and LID; A send-only (the kernel
//! sends no IGMP join for it), sending through an AH of its own event's
//! address vector to QP 0xFFFFFF with the event's Q_Key. B receives A's
//! SEND: its bytes, A's QP number, and a GRH whose IPv4 header goes from
//! A's address to the group. Then B leaves the group with its QP still
//! attached, and A's next SEND does not reach it: the kernel's IGMP
//! membership is what lets B's IP layer hand the group's packets to rxe.
//! siw0 has no multicast (`device_cm_mcast.rs` checks the refusal).

mod common;

use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

use common::cm::{cm_present, join_group};
use common::two_host::*;
use common::*;
use uverbs::cm::CmId;
use uverbs::qp::AhAttr;
use uverbs::wr::{UdDest, WcOpcode};
use uverbs::{CompletionQueue, Context, MemoryRegion, QueuePair};

const TEST: &str = "ud_multicast_between_two_hosts_through_the_cm";
/// The group: an administratively scoped address only this test uses.
const GROUP: Ipv4Addr = Ipv4Addr::new(239, 117, 118, 100);
/// What rxe puts in front of every UD receive (the packet's IP header).
const GRH: usize = 40;
/// The SEND's payload.
const LEN: usize = 128;
/// How long B watches for a SEND that must not arrive.
const QUIET: Duration = Duration::from_millis(300);
/// The seed of A's payload (`common::pattern`).
const SEED: u64 = 0x6d63;

#[test]
fn ud_multicast_between_two_hosts_through_the_cm() {
    let Some(p) = peer_from_env(TEST) else {
        return;
    };
    if !cm_present(TEST) {
        return;
    }
    let me = format!("{} ({})", p.role.name(), p.local);
    let Some(dut) = open_rxe(devices_under_test(TEST), TEST, &me) else {
        return;
    };
    let ctx: &Context = &dut;
    let mut ctl = Control::meet_and_greet(&p, ctx.device_name());
    // Checked when dropped, at the end: every kernel object released.
    let _counts = HandleCounts::new(&dut, TEST);

    let send_only = p.role == Role::A;
    let group = SocketAddr::from((GROUP, 0));
    let (id, joined) = join_group(SocketAddr::from((p.local, 0)), group, send_only, &me);
    let (qp_num, qkey, av) = (joined.qp_num, joined.qkey, joined.to_ah_attr());

    let pd = alloc_pd(ctx);
    let cq = ctx.create_cq(8, None).unwrap();
    let qp = ud_qp(&pd, &cq, qkey, 0, &me);
    let mut buf = anon(2 * 4096);
    // A's payload, written before the memory is registered and not again.
    buf[..LEN].copy_from_slice(&pattern(SEED, LEN));
    let mr = fresh_mr(&pd, &mut buf, RW_READ);
    let side = Member {
        me: &me,
        qp: &qp,
        cq: &cq,
        buf: &buf,
        mr: &mr,
    };
    match p.role {
        Role::A => {
            let ah = pd
                .create_ah(&av)
                .unwrap_or_else(|e| panic!("{me}: create_ah from the event: {e}"));
            send_to_the_group(&mut ctl, &side, UdDest::new(&ah, qp_num, qkey));
        }
        Role::B => receive_until_left(&mut ctl, &side, &av, &id, p.peer),
    }
    drop((qp, cq, mr, pd));
    // A's membership goes with its id (the kernel leaves it); B left.
    assert_eq!(id.memberships().len(), usize::from(send_only), "{me}");
    assert_eq!(id.destroy().unwrap(), 1, "{me}: the join's event");
    ctl.barrier("bye");
}

/// One host's UD QP, its CQ and its registered buffer.
struct Member<'a> {
    me: &'a str,
    qp: &'a QueuePair,
    cq: &'a CompletionQueue,
    buf: &'a [u8],
    mr: &'a MemoryRegion,
}

/// A: two SENDs to the group through `dest`, the second after B has left.
fn send_to_the_group(ctl: &mut Control, m: &Member<'_>, dest: UdDest<'_>) {
    let payload = sge(m.buf.as_ptr() as u64, LEN, m.mr);
    // SAFETY: buf[..LEN] is not written while `send` is used, and stays
    // mapped and registered; the AH outlives `send`.
    let send = unsafe { ud_sender(m.qp, m.cq, &payload, dest, format!("{}: SEND", m.me)) };
    ctl.barrier("attached");
    send(0xa1);
    ctl.send("sent", &m.qp.qp_num().to_string());
    ctl.barrier("left");
    send(0xa2);
    ctl.send("sent-again", "");
    ctl.barrier("done");
}

/// B: attached to the group at `av`, the first SEND arrives whole, from
/// A (`a_addr`), to the group; after the leave (QP still attached) the
/// second does not.
fn receive_until_left(ctl: &mut Control, m: &Member<'_>, av: &AhAttr, id: &CmId, a_addr: Ipv4Addr) {
    let (me, qp, buf) = (m.me, m.qp, m.buf);
    qp.attach_mcast(av.dgid, av.dlid)
        .unwrap_or_else(|e| panic!("{me}: attach_mcast: {e}"));
    for (k, wr_id) in [(0, 0xb1), (1, 0xb2)] {
        let slot = &buf[k * 4096..k * 4096 + GRH + LEN];
        // SAFETY: `buf` stays mapped and registered until the QP is
        // destroyed, and is read only after this receive's completion.
        unsafe { post_recv_into(qp, wr_id, slot, m.mr, me) };
    }
    ctl.barrier("attached");
    let sender: u32 = ctl.expect("sent").parse().expect("A's QP number");
    let what = format!("{me}: A's SEND to {GROUP}");
    let wc = wait_checked(m.cq, &what, WcOpcode::Recv, qp, 0xb1);
    assert_eq!(wc.byte_len(), (GRH + LEN) as u32, "{what}: {wc:?}");
    assert_eq!(wc.src_qp(), sender, "{what}: {wc:?}");
    same_bytes(&buf[GRH..GRH + LEN], &pattern(SEED, LEN), &what);
    assert_eq!(buf[32..36], a_addr.octets(), "{what}: the IPv4 source");
    assert_eq!(buf[36..40], GROUP.octets(), "{what}: the IPv4 destination");

    let left = id.leave_multicast(SocketAddr::from((GROUP, 0)));
    assert_eq!(left.unwrap_or_else(|e| panic!("{me}: leave: {e}")), 1);
    ctl.barrier("left");
    ctl.expect("sent-again");
    std::thread::sleep(QUIET);
    assert_no_completion(m.cq, &format!("{me}: received after leaving {GROUP}"));
    qp.detach_mcast(av.dgid, av.dlid)
        .unwrap_or_else(|e| panic!("{me}: detach_mcast: {e}"));
    loud(&format!(
        "{me}: A's SEND to {GROUP} arrived through the cm's join; after leaving, the next did not"
    ));
    ctl.barrier("done");
}
