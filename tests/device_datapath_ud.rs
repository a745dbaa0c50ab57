//! UD traffic on rxe0: two UD queue pairs of one context exchange SEND and
//! SEND_WITH_IMM through an address handle on the port's RoCE v2 GID
//! (loopback). The receiver's buffer starts with the 40-byte GRH slot rxe
//! fills with the packet's IP header; every byte, every completion field
//! (src_qp, GRH flag, immediate, byte_len = payload + 40) is checked, every
//! wait is bounded, and the kernel's CQ, QP, AH, MR and PD counts are back
//! where they started. siw0 is RC only: a UD QP (and an address handle)
//! is refused there with EOPNOTSUPP, typed, and nothing is left behind.

mod common;

use std::time::Duration;

use common::*;
use uverbs::device::Gid;
use uverbs::qp::{AddressHandle, AhAttr, QpAttr, QpState};
use uverbs::wr::{RecvWr, UdDest, WcFlags, WcOpcode, WcStatus};
use uverbs::{CompletionQueue, Context, ProtectionDomain, QpInit, QpType, QueuePair};

/// The Q_Key both QPs use (rdma-core's ud_pingpong uses the same value).
const QKEY: u32 = 0x1111_1111;
/// What rxe puts in front of every UD receive: an IPv6 header, or 20
/// zero bytes then an IPv4 header.
const GRH: usize = 40;

fn ah_to(pd: &uverbs::ProtectionDomain, gid: Gid, name: &str) -> AddressHandle {
    let attr = AhAttr::roce(gid, GID_INDEX as u8, PORT);
    pd.create_ah(&attr)
        .unwrap_or_else(|e| panic!("{name}: create_ah to {gid}: {e}"))
}

/// The GRH slot holds the packet's IP header, from `gid` to `gid`
/// (loopback): an IPv6 header for an IPv6 GID, else 20 zero bytes and an
/// IPv4 header for an IPv4-mapped one.
fn check_grh(grh: &[u8], gid: Gid, what: &str) {
    let gid = gid.raw();
    let v4_mapped = gid[..10].iter().all(|&b| b == 0) && gid[10..12] == [0xff, 0xff];
    if v4_mapped {
        assert!(grh[..20].iter().all(|&b| b == 0), "{what}: {grh:02x?}");
        assert_eq!(grh[20] >> 4, 4, "{what}: IPv4 version: {grh:02x?}");
        assert_eq!(&grh[32..36], &gid[12..], "{what}: IPv4 source");
        assert_eq!(&grh[36..40], &gid[12..], "{what}: IPv4 destination");
    } else {
        assert_eq!(grh[0] >> 4, 6, "{what}: IPv6 version: {grh:02x?}");
        assert_eq!(&grh[8..24], &gid, "{what}: IPv6 source = the sender's GID");
        assert_eq!(
            &grh[24..40],
            &gid,
            "{what}: IPv6 destination = the AH's GID"
        );
    }
}

/// Two UD QPs in `pd` (Q_Key [`QKEY`]), each on a CQ of its own, in RTS:
/// `(cq_a, cq_b, qp_a, qp_b)`.
fn ud_pair(
    ctx: &Context,
    pd: &ProtectionDomain,
    name: &str,
) -> (CompletionQueue, CompletionQueue, QueuePair, QueuePair) {
    let cq_a = ctx.create_cq(16, None).unwrap();
    let cq_b = ctx.create_cq(16, None).unwrap();
    let qp_a = ud_qp(pd, &cq_a, QKEY, 0, name);
    let qp_b = ud_qp(pd, &cq_b, QKEY, 0, name);
    (cq_a, cq_b, qp_a, qp_b)
}

#[test]
fn ud_send_and_send_with_imm_through_an_address_handle() {
    on_each_device(
        "ud_send_and_send_with_imm_through_an_address_handle",
        |name, dut, counts| {
            match driver(&dut) {
                Driver::Rxe => {}
                Driver::Siw => {
                    assert_siw_refuses_qp_type(&dut, name, counts, QpType::Ud);
                    // No address handles either: siw has no AH verb.
                    let pd = alloc_pd(&dut);
                    let err = pd
                        .create_ah(&AhAttr::roce(Gid::from_raw([0; 16]), 0, PORT))
                        .map(|_| ())
                        .expect_err("siw created an address handle");
                    assert_eq!(
                        err.errno(),
                        Some(uverbs::error::Errno::OPNOTSUPP),
                        "{name}: {err}"
                    );
                    counts.assert_extra_ah(0, "after the refused AH");
                    return loud(&format!("NOTE: {name}: siw has no AH: {err}"));
                }
                Driver::Other => return loud(&format!("NOTE: {name}: not rxe, no data path yet")),
            }
            let ctx: &Context = &dut;
            let (gid, _) = roce_path(ctx, name);
            let pd = alloc_pd(ctx);
            let (cq_a, cq_b, qp_a, qp_b) = ud_pair(ctx, &pd, name);
            counts.assert_extra_cq_qp(2, 2, "with two CQs and two UD QPs");
            let ah = ah_to(&pd, gid, name);
            counts.assert_extra_ah(1, "with one AH");
            loud(&format!(
                "{name} over {}: UD QPs {} -> {}, AH {ah:?}",
                ctx.transport_kind(),
                qp_a.qp_num(),
                qp_b.qp_num()
            ));

            const LEN: usize = 8192;
            let mut a_buf = anon(LEN);
            let mut b_buf = anon(LEN);
            let a_mr = fresh_mr(&pd, &mut a_buf, RW_READ);
            let b_mr = fresh_mr(&pd, &mut b_buf, RW_READ);
            let (a_addr, b_addr) = (a_buf.as_ptr() as u64, b_buf.as_ptr() as u64);
            // Two receives: GRH slot + 256 bytes at 0, GRH slot + 512 bytes at 4096.
            let (small, large) = (256usize, 512usize);
            let recv_1 = sge(b_addr, GRH + small, &b_mr);
            let recv_2 = sge(b_addr + 4096, GRH + large, &b_mr);
            // SAFETY: b_buf's two ranges stay mapped and registered and are not
            // touched until their completions are polled below.
            unsafe {
                qp_b.post_recv(&[
                    RecvWr {
                        wr_id: 0xb1,
                        sges: &recv_1,
                    },
                    RecvWr {
                        wr_id: 0xb2,
                        sges: &recv_2,
                    },
                ])
            }
            .unwrap_or_else(|e| panic!("{name}: post_recv: {e}"));
            for (i, byte) in a_buf[..small + large].iter_mut().enumerate() {
                *byte = (i * 13 + 5) as u8;
            }

            // SEND of 256 bytes.
            let src_1 = sge(a_addr, small, &a_mr);
            let dest = UdDest::new(&ah, qp_b.qp_num(), QKEY);
            // SAFETY: a_buf[..256] is only read by the device and not written
            // until the completion below; the AH lives past it.
            unsafe { qp_a.post_send(&[ud_send(0xa1, None, &src_1, dest)]) }
                .unwrap_or_else(|e| panic!("{name}: post_send UD SEND: {e}"));
            wait_checked(&cq_a, "UD SEND, sender", WcOpcode::Send, &qp_a, 0xa1);
            let wc = wait_checked(&cq_b, "UD SEND, receiver", WcOpcode::Recv, &qp_b, 0xb1);
            assert_eq!(wc.byte_len(), (GRH + small) as u32, "payload + GRH: {wc:?}");
            assert_eq!(wc.src_qp(), qp_a.qp_num(), "{wc:?}");
            assert_eq!(wc.wc_flags(), WcFlags::GRH, "{wc:?}");
            check_grh(&b_buf[..GRH], gid, "UD SEND");
            assert!(
                b_buf[GRH..GRH + small] == a_buf[..small],
                "{name}: the UD SEND's bytes"
            );
            assert!(
                b_buf[GRH + small..4096].iter().all(|&b| b == 0),
                "{name}: bytes past the SEND touched"
            );

            // SEND_WITH_IMM of 512 bytes.
            let src_2 = sge(a_addr + small as u64, large, &a_mr);
            let imm = 0x1234_5678;
            // SAFETY: as above.
            unsafe { qp_a.post_send(&[ud_send(0xa2, Some(imm), &src_2, dest)]) }
                .unwrap_or_else(|e| panic!("{name}: post_send UD SEND_WITH_IMM: {e}"));
            wait_checked(
                &cq_a,
                "UD SEND_WITH_IMM, sender",
                WcOpcode::Send,
                &qp_a,
                0xa2,
            );
            let what = "UD SEND_WITH_IMM, receiver";
            let wc = wait_checked(&cq_b, what, WcOpcode::Recv, &qp_b, 0xb2);
            assert_eq!(wc.byte_len(), (GRH + large) as u32, "payload + GRH: {wc:?}");
            assert_eq!(wc.src_qp(), qp_a.qp_num(), "{wc:?}");
            assert_eq!(wc.wc_flags(), WcFlags::GRH | WcFlags::WITH_IMM, "{wc:?}");
            assert_eq!(wc.imm_data(), Some(imm), "{wc:?}");
            check_grh(&b_buf[4096..4096 + GRH], gid, "UD SEND_WITH_IMM");
            assert!(
                b_buf[4096 + GRH..4096 + GRH + large] == a_buf[small..small + large],
                "{name}: the UD SEND_WITH_IMM's bytes"
            );
            assert!(
                b_buf[4096 + GRH + large..].iter().all(|&b| b == 0),
                "{name}: bytes past the SEND_WITH_IMM touched"
            );

            // A wrong Q_Key: the sender completes (UD is unreliable), the
            // receiver drops the packet, its posted receive stays unused.
            let recv_3 = sge(b_addr, GRH + small, &b_mr);
            // SAFETY: b_buf[..296] is not touched by the program any more
            // until the QP is dropped.
            unsafe {
                qp_b.post_recv(&[RecvWr {
                    wr_id: 0xb3,
                    sges: &recv_3,
                }])
            }
            .unwrap_or_else(|e| panic!("{name}: post_recv: {e}"));
            let wrong = UdDest::new(&ah, qp_b.qp_num(), QKEY ^ 1);
            // SAFETY: as above.
            unsafe { qp_a.post_send(&[ud_send(0xa3, None, &src_1, wrong)]) }
                .unwrap_or_else(|e| panic!("{name}: post_send with a wrong Q_Key: {e}"));
            wait_checked(&cq_a, "UD SEND, wrong Q_Key", WcOpcode::Send, &qp_a, 0xa3);
            std::thread::sleep(Duration::from_millis(100));
            assert_no_completion(
                &cq_b,
                &format!("{name}: a packet with a wrong Q_Key arrived"),
            );
            assert_no_completion(&cq_a, &format!("{name}: a stray completion on A"));
            loud(&format!(
                "{name}: UD SEND 256 B and SEND_WITH_IMM 512 B landed behind their GRH; a wrong Q_Key was dropped"
            ));

            drop(ah);
            counts.assert_extra_ah(0, "after dropping the AH");
            drop((qp_a, qp_b, cq_a, cq_b, a_mr, b_mr, pd));
            counts.assert_extra_cq_qp(0, 0, "after dropping everything");
        },
    );
}

/// rxe looks an AH number up device-wide and refuses one of another PD
/// than the QP's: it marks the send LOC_QP_OP_ERR and moves the QP to ERR,
/// whose flush then completes the send with WR_FLUSH_ERR (Linux 6.12: the
/// requester and then the completer run in the same task, so the flush
/// always wins; Linux 6.1 completes it LOC_QP_OP_ERR); nothing arrives.
#[test]
fn a_ud_send_through_an_ah_of_another_pd_fails_locally() {
    on_each_device_for_qp_type(
        "a_ud_send_through_an_ah_of_another_pd_fails_locally",
        QpType::Ud,
        |name, ctx| {
            let (gid, _) = roce_path(ctx, name);
            let pd = alloc_pd(ctx);
            let other_pd = alloc_pd(ctx);
            let (cq_a, cq_b, qp_a, qp_b) = ud_pair(ctx, &pd, name);
            let foreign = ah_to(&other_pd, gid, name);
            let mut buf = anon(4096);
            let mr = fresh_mr(&pd, &mut buf, RW_READ);
            let addr = buf.as_ptr() as u64;
            let recv = sge(addr + 1024, GRH + 64, &mr);
            // SAFETY: buf stays mapped and untouched until the QPs are dropped.
            unsafe {
                qp_b.post_recv(&[RecvWr {
                    wr_id: 1,
                    sges: &recv,
                }])
            }
            .unwrap();
            let src = sge(addr, 64, &mr);
            let dest = UdDest::new(&foreign, qp_b.qp_num(), QKEY);
            // SAFETY: as above.
            unsafe { qp_a.post_send(&[ud_send(2, None, &src, dest)]) }
                .unwrap_or_else(|e| panic!("{name}: post_send: {e}"));
            let wc = wait_one(&cq_a, "UD SEND through another PD's AH");
            loud(&format!("{name}: AH of another PD: {wc:?}"));
            assert_eq!(
                wc.status(),
                common::kernel::rxe_requester_failure_status(),
                "{wc:?}"
            );
            assert_eq!((wc.wr_id(), wc.qp_num()), (2, qp_a.qp_num()), "{wc:?}");
            // The QP is in ERR now: a send through a good AH is flushed too.
            let good = ah_to(&pd, gid, name);
            let dest = UdDest::new(&good, qp_b.qp_num(), QKEY);
            // SAFETY: as above.
            unsafe { qp_a.post_send(&[ud_send(3, None, &src, dest)]) }
                .unwrap_or_else(|e| panic!("{name}: post_send: {e}"));
            let wc = wait_one(&cq_a, "UD SEND after the failure");
            assert_eq!(
                (wc.status(), wc.wr_id()),
                (WcStatus::WrFlushErr, 3),
                "{wc:?}"
            );
            std::thread::sleep(Duration::from_millis(100));
            assert_no_completion(&cq_b, &format!("{name}: something arrived"));
            drop((qp_a, qp_b, good, foreign, cq_a, cq_b, mr, pd, other_pd));
        },
    );
}

/// Polls `qp` until `n` requests are back, at most 10 s.
fn owned_back(
    qp: &uverbs::OwnedQp<uverbs::BufferMr<Vec<u8>>>,
    n: usize,
    what: &str,
) -> Vec<uverbs::post::Completed<uverbs::BufferMr<Vec<u8>>>> {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let mut done = Vec::new();
    while done.len() < n {
        qp.poll(&mut done)
            .unwrap_or_else(|e| panic!("{what}: poll: {e}"));
        assert!(
            std::time::Instant::now() < deadline,
            "{what}: {} of {n} back",
            done.len()
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    done
}

/// An owned UD send holds its address handle until its memory comes back
/// (issue 18, defect 10): the caller's handle may go right after the post;
/// the AH is destroyed only once the send is back. rxe only (siw has no UD).
#[test]
fn an_owned_ud_send_keeps_its_address_handle_until_it_comes_back() {
    use std::sync::Arc;
    use uverbs::post::{Local, RecvRequest, SendRequest};
    use uverbs::{AccessFlags, OwnedQp};
    on_each_ud_device(
        "an_owned_ud_send_keeps_its_address_handle_until_it_comes_back",
        |name, ctx, counts| {
            let (gid, _) = roce_path(ctx, name);
            let pd = alloc_pd(ctx);
            let owned = |cq: &uverbs::CompletionQueue| {
                let qp = pd.create_qp(&QpInit::new(QpType::Ud, cq, cq)).unwrap();
                let qp: OwnedQp<uverbs::BufferMr<Vec<u8>>> = OwnedQp::new(qp).unwrap();
                qp
            };
            let (cq_a, cq_b) = (
                ctx.create_cq(16, None).unwrap(),
                ctx.create_cq(16, None).unwrap(),
            );
            let (a, b) = (owned(&cq_a), owned(&cq_b));
            for qp in [&a, &b] {
                qp.modify(
                    &QpAttr::new()
                        .state(QpState::Init)
                        .pkey_index(0)
                        .port(PORT)
                        .qkey(QKEY),
                )
                .unwrap();
                qp.modify(&QpAttr::new().state(QpState::Rtr)).unwrap();
                qp.modify(&QpAttr::new().state(QpState::Rts).sq_psn(0))
                    .unwrap();
            }
            let reg = |bytes: Vec<u8>| {
                pd.reg_buffer(bytes, AccessFlags::LOCAL_WRITE)
                    .unwrap_or_else(|e| panic!("{name}: reg_buffer: {}", e.error))
            };
            b.post_recv(RecvRequest::new(1, Local::whole(reg(vec![0; GRH + 64]))))
                .unwrap();
            let payload: Vec<u8> = (0..64u8).map(|i| i ^ 0x6b).collect();
            let ah = Arc::new(ah_to(&pd, gid, name));
            let weak = Arc::downgrade(&ah);
            a.post_send(SendRequest::send(2, Local::whole(reg(payload.clone()))).ud(
                ah,
                b.qp_num(),
                QKEY,
            ))
            .unwrap_or_else(|e| panic!("{name}: post_send UD: {e}"));
            assert!(weak.upgrade().is_some(), "{name}: the request holds the AH");
            counts.assert_extra_ah(1, "while the send is outstanding, the caller's handle gone");
            let sent = owned_back(&a, 1, "the UD send");
            assert_eq!(
                sent[0].status(),
                Some(WcStatus::Success),
                "{name}: {:?}",
                sent[0]
            );
            assert!(
                weak.upgrade().is_none(),
                "{name}: the AH went with the request"
            );
            counts.assert_extra_ah(0, "once the send came back");
            let got = owned_back(&b, 1, "the UD receive");
            let wc = *got[0].completion().expect("its own completion");
            assert_eq!(wc.byte_len() as usize, GRH + 64, "{name}: {wc:?}");
            let rx = got.into_iter().next().unwrap().into_memory().unwrap();
            assert_eq!(&rx.buffer()[GRH..], &payload[..], "{name}: payload");
            drop((a, b, cq_a, cq_b, rx, pd));
        },
    );
}
