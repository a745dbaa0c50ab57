//! Multicast through the connection manager (`rdma_join_multicast`) on
//! rxe0: a UDP id joins an IPv4 group, the `MULTICAST_JOIN` event's
//! address vector, Q_Key and QP number are all a sender and a receiver
//! need, and the kernel's join is the IP-level membership too (no socket
//! joins here: with the group left, the same SEND no longer arrives).
//! siw0: iWARP has no multicast, and the kernel refuses the join
//! (`ENOSYS`).

mod common;

use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

use common::cm::{bound_udp_id, cm_addr, join_group, on_rxe_and_siw};
use common::*;
use uverbs::cm::{UdPeer, UDP_QKEY};
use uverbs::device::Gid;
use uverbs::error::{Errno, Op};
use uverbs::wr::{UdDest, WcOpcode};
use uverbs::{Context, Error};

/// The group: an administratively scoped IPv4 address only this test uses.
const GROUP: Ipv4Addr = Ipv4Addr::new(239, 117, 118, 99);
/// What rxe puts in front of every UD receive (the packet's IP header).
const GRH: usize = 40;
/// The SEND's payload.
const LEN: usize = 128;

/// rxe0: join, attach, send to the group through the event's address
/// vector; then leave (still attached) and see the next SEND not arrive.
fn joined_group_carries_a_send(name: &str, ctx: &Context, counts: &HandleCounts) {
    let local: SocketAddr = format!("{}:0", cm_addr(ctx)).parse().unwrap();
    let group = SocketAddr::from((GROUP, 0));
    let (id, peer) = join_group(local, group, false, name);
    let UdPeer { qp_num, qkey, .. } = peer;
    let av = peer.to_ah_attr();
    assert_eq!((qp_num, qkey), (0xff_ffff, UDP_QKEY), "{name}");
    assert_eq!(
        av.dgid,
        Gid::from_raw(GROUP.to_ipv6_mapped().octets()),
        "{name}"
    );

    let pd = alloc_pd(ctx);
    let [cq_s, cq_r] = [0; 2].map(|_| ctx.create_cq(16, None).unwrap());
    let sender = ud_qp(&pd, &cq_s, qkey, 0, name);
    let receiver = ud_qp(&pd, &cq_r, qkey, 0, name);
    receiver
        .attach_mcast(av.dgid, av.dlid)
        .unwrap_or_else(|e| panic!("{name}: attach_mcast: {e}"));
    let mut src = anon(4096);
    let mut dst = anon(2 * 4096);
    let src_mr = fresh_mr(&pd, &mut src, RW_READ);
    let dst_mr = fresh_mr(&pd, &mut dst, RW_READ);
    src[..LEN].copy_from_slice(&pattern(0x6d63, LEN));
    let payload = sge(src.as_ptr() as u64, LEN, &src_mr);
    for (k, wr_id) in [(0, 0xb1), (1, 0xb2)] {
        let slot = &dst[k * 4096..k * 4096 + GRH + LEN];
        // SAFETY: `dst` stays mapped and registered until both QPs are
        // gone, and is read only after this receive's completion (or
        // after the QPs are destroyed).
        unsafe { post_recv_into(&receiver, wr_id, slot, &dst_mr, name) };
    }
    let ah = pd
        .create_ah(&av)
        .unwrap_or_else(|e| panic!("{name}: create_ah from the event: {e}"));
    let dest = UdDest::new(&ah, qp_num, qkey);
    // SAFETY: src[..LEN] is not written again, and stays mapped and
    // registered, while `send` is used; the AH outlives it.
    let send = unsafe { ud_sender(&sender, &cq_s, &payload, dest, format!("{name}: SEND")) };

    send(0xa1);
    let what = format!("{name}: the group's SEND");
    let wc = wait_checked(&cq_r, &what, WcOpcode::Recv, &receiver, 0xb1);
    assert_eq!(wc.byte_len(), (GRH + LEN) as u32, "{what}: {wc:?}");
    assert_eq!(wc.src_qp(), sender.qp_num(), "{what}: {wc:?}");
    assert!(dst[GRH..GRH + LEN] == src[..LEN], "{what}: the bytes");
    assert_eq!(dst[36..40], GROUP.octets(), "{what}: IPv4 destination");

    // Left, but still attached: the kernel's IGMP membership is gone, so
    // the IP layer no longer hands the group's packets to rxe.
    assert_eq!(
        id.leave_multicast(group)
            .unwrap_or_else(|e| panic!("{name}: leave_multicast: {e}")),
        1,
        "{name}: the events reported for the membership"
    );
    send(0xa2);
    std::thread::sleep(Duration::from_millis(200));
    assert_no_completion(&cq_r, &format!("{name}: received after leaving"));
    loud(&format!(
        "{name}: the cm's join carried a SEND to {GROUP}; after leaving, none arrived"
    ));

    receiver
        .detach_mcast(av.dgid, av.dlid)
        .unwrap_or_else(|e| panic!("{name}: detach_mcast: {e}"));
    drop(send);
    drop((ah, sender, receiver));
    counts.assert_extra_cq_qp(2, 0, "after destroying the QPs");
    drop((src_mr, dst_mr, pd));
    // The kernel counts the membership's event for the id too.
    assert_eq!(
        id.destroy().unwrap(),
        1,
        "{name}: events reported for the id"
    );
}

/// siw0: the kernel refuses the join (iWARP has no multicast); the id
/// keeps no membership.
fn iwarp_refuses_the_join(name: &str, ctx: &Context) {
    let local: SocketAddr = format!("{}:0", cm_addr(ctx)).parse().unwrap();
    let id = bound_udp_id(local, name);
    let err = id
        .join_multicast(SocketAddr::from((GROUP, 0)), false)
        .expect_err("iWARP has no multicast");
    assert!(matches!(err, Error::Os { .. }), "{name}: {err:?}");
    // cma.c's rdma_join_multicast: neither RoCE nor IB.
    assert_eq!(
        (err.op(), err.errno()),
        (Op::CmJoinMulticast, Some(Errno::NOSYS)),
        "{name}: {err}"
    );
    assert!(id.memberships().is_empty(), "{name}");
    let ch = id.channel();
    assert!(ch.try_get_event().unwrap().is_none(), "{name}: no event");
    loud(&format!("{name}: the kernel refused the join: {err}"));
}

#[test]
fn a_cm_join_carries_a_send_to_the_group() {
    let test = "a_cm_join_carries_a_send_to_the_group";
    on_rxe_and_siw(test, joined_group_carries_a_send, iwarp_refuses_the_join);
}
