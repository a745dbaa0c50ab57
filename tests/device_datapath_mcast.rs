//! Multicast on rxe0: UD queue pairs attached to a group receive a SEND to
//! it, a detached one does not; the kernel destroys no QP with a group
//! attached (rxe's `EBUSY`), so `QueuePair::destroy`, `OwnedQp::destroy`,
//! `AsyncQp::destroy` and every drop detach the QP's groups first, and the
//! kernel's counts are back at the end. siw0 has no UD: the calls are refused
//! there before the kernel, typed.
//!
//! On RoCE the IP layer must be a member of the group too, or the looped
//! or received packet never reaches rxe: the connection manager's join
//! does that; here a UDP socket joins the group on rxe0's netdev.

mod common;

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};
use std::time::Duration;

use common::*;
use uverbs::device::Gid;
use uverbs::error::{Errno, Op};
use uverbs::post::{Ended, Local, RecvRequest};
use uverbs::qp::AhAttr;
use uverbs::wr::{UdDest, WcFlags, WcOpcode};
use uverbs::{AccessFlags, BufferMr, Context, Error, OwnedQp, ProtectionDomain, QpInit, QpType};

/// The Q_Key of the group's members and its sender.
const QKEY: u32 = 0x1111_1111;
/// The QP number a multicast SEND is addressed to (`IB_MULTICAST_QPN`).
const MULTICAST_QPN: u32 = 0xff_ffff;
/// What rxe puts in front of every UD receive (the packet's IP header).
const GRH: usize = 40;
/// The SEND's payload.
const LEN: usize = 256;

/// A group of the family of `sgid` (rxe0's GID 0): the transient
/// link-local IPv6 group ff12::75:7662 for an IPv6 GID, else the
/// IPv4-mapped 239.117.118.98.
fn group_for(sgid: Gid) -> Gid {
    let group = match Ipv6Addr::from(sgid.raw()).to_ipv4_mapped() {
        Some(_) => Ipv4Addr::new(239, 117, 118, 98).to_ipv6_mapped(),
        None => Ipv6Addr::new(0xff12, 0, 0, 0, 0, 0, 0x75, 0x7662),
    };
    Gid::from_raw(group.octets())
}

/// A UDP socket that has joined `group` on the netdev behind rxe0's GID
/// 0: the IP-level membership the kernel needs to loop a multicast packet
/// back and to deliver it to rxe. Kept while the test sends.
fn join_on_netdev(ctx: &Context, group: Gid, name: &str) -> UdpSocket {
    let entry = ctx
        .query_gid_entry(PORT, GID_INDEX)
        .unwrap_or_else(|e| panic!("{name}: query_gid_entry: {e}"));
    let ip = Ipv6Addr::from(group.raw());
    let joined = match ip.to_ipv4_mapped() {
        Some(v4) => {
            let own = Ipv6Addr::from(entry.gid.raw())
                .to_ipv4_mapped()
                .expect("an IPv4-mapped GID for an IPv4 group");
            UdpSocket::bind(SocketAddr::from((own, 0)))
                .and_then(|s| s.join_multicast_v4(&v4, &own).map(|()| s))
        }
        None => UdpSocket::bind(SocketAddr::from((Ipv6Addr::UNSPECIFIED, 0)))
            .and_then(|s| s.join_multicast_v6(&ip, entry.netdev_ifindex).map(|()| s)),
    };
    joined.unwrap_or_else(|e| {
        panic!(
            "{name}: joining {ip} on ifindex {}: {e}",
            entry.netdev_ifindex
        )
    })
}

/// siw0 (RC only): both calls refused before the kernel, nothing changed.
fn siw_refuses(ctx: &Context, name: &str) {
    let pd = alloc_pd(ctx);
    let cq = ctx.create_cq(8, None).unwrap();
    let rc = qp_on(&pd, QpType::Rc, &cq, name);
    let group = group_for(Gid::default());
    for (err, op) in [
        (rc.attach_mcast(group, 0).unwrap_err(), Op::AttachMcast),
        (rc.detach_mcast(group, 0).unwrap_err(), Op::DetachMcast),
    ] {
        assert!(matches!(err, Error::InvalidInput { .. }), "{name}: {err:?}");
        assert_eq!(err.op(), op, "{name}: {err}");
    }
    loud(&format!(
        "NOTE: {name}: siw has no UD; multicast refused before the kernel"
    ));
}

/// `body(name, ctx, counts, group)` on rxe, with a group of its port's
/// address family; on siw the refusals of [`siw_refuses`]; other devices
/// are skipped with a note.
fn on_rxe_with_group(test: &str, mut body: impl FnMut(&str, &Context, &HandleCounts, Gid)) {
    on_each_device(test, |name, dut, counts| match driver(&dut) {
        Driver::Rxe => body(name, &dut, counts, group_for(roce_path(&dut, name).0)),
        Driver::Siw => siw_refuses(&dut, name),
        Driver::Other => loud(&format!("NOTE: {name}: not rxe, no data path")),
    });
}

/// A UD `OwnedQp` on `cq`, attached to `group`, in INIT.
fn owned_member(
    pd: &ProtectionDomain,
    cq: &uverbs::CompletionQueue,
    group: Gid,
    name: &str,
) -> OwnedQp<BufferMr<Vec<u8>>> {
    let qp = pd
        .create_qp(&QpInit::new(QpType::Ud, cq, cq))
        .unwrap_or_else(|e| panic!("{name}: create_qp: {e}"));
    let owned = OwnedQp::new(qp).unwrap_or_else(|e| panic!("{name}: OwnedQp::new: {e}"));
    owned
        .attach_mcast(group, 0)
        .unwrap_or_else(|e| panic!("{name}: attach_mcast: {e}"));
    owned
        .modify(&to_init().qkey(QKEY))
        .unwrap_or_else(|e| panic!("{name}: RESET->INIT: {e}"));
    owned
}

/// A receive `wr_id` of [`GRH`] + [`LEN`] bytes of `fill`, in `pd`.
fn recv_request(
    pd: &ProtectionDomain,
    (wr_id, fill): (u64, u8),
    name: &str,
) -> RecvRequest<BufferMr<Vec<u8>>> {
    let buf = pd
        .reg_buffer(vec![fill; GRH + LEN], AccessFlags::LOCAL_WRITE)
        .unwrap_or_else(|e| panic!("{name}: reg_buffer: {}", e.error));
    RecvRequest::new(wr_id, Local::whole(buf))
}

/// The receive of [`recv_request`], back from the destroy: `wr_id`,
/// [`Ended::Destroyed`], its buffer still all `fill`.
fn assert_back_untouched(
    done: uverbs::post::Completed<BufferMr<Vec<u8>>>,
    (wr_id, fill): (u64, u8),
    name: &str,
) {
    assert_eq!(
        (done.wr_id, done.ended),
        (wr_id, Ended::Destroyed),
        "{name}"
    );
    let buf = done.into_memory().expect("the receive's buffer");
    assert!(buf.buffer().iter().all(|&x| x == fill), "{name}: untouched");
}

/// A SEND to the group lands in the receive of each attached QP, behind
/// its GRH (IP header to the group); after one QP detaches, the next SEND
/// reaches the other only.
#[test]
fn a_send_to_a_group_reaches_every_attached_qp() {
    let test = "a_send_to_a_group_reaches_every_attached_qp";
    on_rxe_with_group(test, |name, ctx, counts, group| {
        let _member = join_on_netdev(ctx, group, name);
        let pd = alloc_pd(ctx);
        let [cq_s, cq_b, cq_c] = [0; 3].map(|_| ctx.create_cq(16, None).unwrap());
        let sender = ud_qp(&pd, &cq_s, QKEY, 0, name);
        let b = ud_qp(&pd, &cq_b, QKEY, 0, name);
        let c = ud_qp(&pd, &cq_c, QKEY, 0, name);
        for qp in [&b, &c] {
            qp.attach_mcast(group, 0)
                .unwrap_or_else(|e| panic!("{name}: attach_mcast {group}: {e}"));
        }
        // Attaching again changes nothing (the kernel answers 0).
        b.attach_mcast(group, 0)
            .unwrap_or_else(|e| panic!("{name}: a second attach_mcast: {e}"));

        let mut src = anon(4096);
        let mut dst = anon(4 * 4096);
        let src_mr = fresh_mr(&pd, &mut src, RW_READ);
        let dst_mr = fresh_mr(&pd, &mut dst, RW_READ);
        for (i, byte) in src[..LEN].iter_mut().enumerate() {
            *byte = (i * 7 + 3) as u8;
        }
        let slot = |k: usize| &dst[k * 4096..k * 4096 + GRH + LEN];
        // SAFETY: `dst` stays mapped and registered until the QPs are
        // gone, and a slot is read only after its receive's completion.
        unsafe {
            post_recv_into(&b, 0xb1, slot(0), &dst_mr, name);
            post_recv_into(&c, 0xc1, slot(1), &dst_mr, name);
            post_recv_into(&b, 0xb2, slot(2), &dst_mr, name);
            post_recv_into(&c, 0xc2, slot(3), &dst_mr, name);
        }

        let ah = pd
            .create_ah(&AhAttr::roce(group, GID_INDEX as u8, PORT))
            .unwrap_or_else(|e| panic!("{name}: create_ah to {group}: {e}"));
        let dest = UdDest::new(&ah, MULTICAST_QPN, QKEY);
        let payload = sge(src.as_ptr() as u64, LEN, &src_mr);
        // SAFETY: src[..LEN] is not written again, and stays mapped and
        // registered, while `send` is used; the AH outlives it.
        let send = unsafe { ud_sender(&sender, &cq_s, &payload, dest, format!("{name}: SEND")) };

        send(0xa1);
        for (cq, qp, wr_id, k) in [(&cq_b, &b, 0xb1, 0), (&cq_c, &c, 0xc1, 1)] {
            let what = format!("{name}: the group's SEND at QP {}", qp.qp_num());
            let wc = wait_checked(cq, &what, WcOpcode::Recv, qp, wr_id);
            assert_eq!(wc.byte_len(), (GRH + LEN) as u32, "{what}: {wc:?}");
            assert_eq!(wc.src_qp(), sender.qp_num(), "{what}: {wc:?}");
            assert_eq!(wc.wc_flags(), WcFlags::GRH, "{what}: {wc:?}");
            assert!(slot(k)[GRH..] == src[..LEN], "{what}: the bytes");
            let to = &slot(k)[..GRH];
            match Ipv6Addr::from(group.raw()).to_ipv4_mapped() {
                Some(v4) => assert_eq!(to[36..40], v4.octets(), "{what}: IPv4 destination"),
                None => assert_eq!(to[24..40], group.raw(), "{what}: IPv6 destination"),
            }
        }

        c.detach_mcast(group, 0)
            .unwrap_or_else(|e| panic!("{name}: detach_mcast: {e}"));
        let again = c.detach_mcast(group, 0).unwrap_err();
        assert_eq!(
            (again.op(), again.errno()),
            (Op::DetachMcast, Some(Errno::INVAL)),
            "{name}: a group not attached: {again}"
        );
        send(0xa2);
        wait_checked(&cq_b, "the second SEND at B", WcOpcode::Recv, &b, 0xb2);
        std::thread::sleep(Duration::from_millis(200));
        assert_no_completion(&cq_c, &format!("{name}: the detached QP received"));
        loud(&format!(
            "{name}: a SEND to {group} reached both attached UD QPs, then only the one still attached"
        ));

        // B is still attached: its drop detaches it, then destroys it.
        drop(send);
        drop((ah, sender, b, c));
        counts.assert_extra_cq_qp(3, 0, "after dropping the QPs (B attached)");
        assert_eq!(ctx.abandoned_queue_pairs(), 0, "{name}");
        drop((src_mr, dst_mr, pd));
    });
}

/// `QueuePair::destroy` and `OwnedQp::destroy` with a group attached
/// detach it first (the kernel refuses DESTROY_QP while one is: rxe's
/// EBUSY), then destroy the QP, the receive's buffer coming back
/// `Ended::Destroyed`; and an `OwnedQp` *dropped* with a receive outstanding
/// and a group attached (issue 38, defect 3) is destroyed too: before the
/// fix its drop sent DESTROY_QP with the group attached, the kernel kept
/// the QP (in ERR), and its PD refused DEALLOC_PD with EBUSY.
#[test]
fn destroy_and_drop_detach_the_groups_first() {
    let test = "destroy_and_drop_detach_the_groups_first";
    on_rxe_with_group(test, |name, ctx, counts, group| {
        let pd = alloc_pd(ctx);
        let cq = ctx.create_cq(16, None).unwrap();

        let raw = ud_qp(&pd, &cq, QKEY, 0, name);
        raw.attach_mcast(group, 0).unwrap();
        raw.destroy()
            .unwrap_or_else(|e| panic!("{name}: QueuePair::destroy with {group} attached: {e}"));
        counts.assert_extra_cq_qp(1, 0, "QueuePair destroyed");

        let recv = (7, 0x5a);
        let owned = owned_member(&pd, &cq, group, name);
        owned
            .post_recv(recv_request(&pd, recv, name))
            .unwrap_or_else(|e| panic!("{name}: post_recv: {}", e.error));
        let mut back = Vec::new();
        owned
            .destroy(&mut back)
            .unwrap_or_else(|e| panic!("{name}: OwnedQp::destroy with {group} attached: {e}"));
        let [done] = <[_; 1]>::try_from(back).expect("the one receive back");
        assert_back_untouched(done, recv, name);
        counts.assert_extra_cq_qp(1, 0, "OwnedQp destroyed");

        let owned = owned_member(&pd, &cq, group, name);
        owned
            .post_recv(recv_request(&pd, (8, 0x6b), name))
            .unwrap_or_else(|e| panic!("{name}: post_recv: {}", e.error));
        drop(owned);
        counts.assert_extra_cq_qp(1, 0, "a dropped OwnedQp member (a receive outstanding)");
        assert_eq!(ctx.abandoned_queue_pairs(), 0, "{name}");
        drop(cq);
        pd.dealloc()
            .unwrap_or_else(|e| panic!("{name}: DEALLOC_PD after the members: {}", e.error));
        loud(&format!(
            "{name}: destroy and drop with {group} attached detached it, then destroyed the QP; the PD deallocated"
        ));
    });
}

/// `AsyncQp::destroy` with a group attached detaches it and destroys the
/// QP, its receive's future resolved `Ended::Destroyed` with its buffer;
/// an `AsyncQp` dropped with a receive outstanding and a group attached is
/// destroyed too (before the fix it was left in the kernel).
#[cfg(feature = "tokio")]
#[test]
fn an_async_qp_with_a_group_attached_is_destroyed_by_destroy_and_drop() {
    use uverbs::tokio::{AsyncCq, AsyncQp};
    let test = "an_async_qp_with_a_group_attached_is_destroyed_by_destroy_and_drop";
    on_rxe_with_group(test, |name, ctx, counts, group| {
        let pd = alloc_pd(ctx);
        let rt = tokio_runtime();
        rt.block_on(async {
            let cq = AsyncCq::new(ctx, 16).unwrap_or_else(|e| panic!("{name}: AsyncCq: {e}"));
            let member = || {
                let owned = owned_member(&pd, cq.cq(), group, name);
                AsyncQp::new(owned, &[&cq]).unwrap_or_else(|e| panic!("{name}: AsyncQp::new: {e}"))
            };
            let qp = member();
            let recv = (9, 0x3c);
            let pending = qp
                .post_recv(recv_request(&pd, recv, name))
                .unwrap_or_else(|e| panic!("{name}: post_recv: {}", e.error()));
            qp.destroy()
                .unwrap_or_else(|e| panic!("{name}: AsyncQp::destroy with {group} attached: {e}"));
            let done = within(Duration::from_secs(20), "the receive's future", pending)
                .await
                .unwrap_or_else(|e| panic!("{name}: the receive: {e}"));
            assert_back_untouched(done, recv, name);
            counts.assert_extra_cq_qp(1, 0, "AsyncQp destroyed");

            let qp = member();
            let pending = qp
                .post_recv(recv_request(&pd, (10, 0x4d), name))
                .unwrap_or_else(|e| panic!("{name}: post_recv: {}", e.error()));
            drop(qp);
            counts.assert_extra_cq_qp(1, 0, "a dropped AsyncQp member (a receive outstanding)");
            let gone = within(Duration::from_secs(20), "the dropped QP's future", pending).await;
            assert!(gone.is_err(), "{name}: {gone:?}");
            drop(cq);
        });
        drop(rt);
        counts.assert_extra_cq_qp(0, 0, "after the runtime");
        assert_eq!(ctx.abandoned_queue_pairs(), 0, "{name}");
        pd.dealloc()
            .unwrap_or_else(|e| panic!("{name}: DEALLOC_PD after the members: {}", e.error));
        loud(&format!(
            "{name}: AsyncQp destroy and drop with {group} attached detached it, then destroyed the QP"
        ));
    });
}
