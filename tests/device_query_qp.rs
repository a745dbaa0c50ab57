//! `QueuePair::query` on real devices: on rxe0 an RC QP connected by hand
//! with distinct PSNs reads back its state, peer QPN, PSNs, path MTU and
//! port once in RTS, and a UD QP its Q_Key (udaddy's question); on siw0 an
//! RC QP connected through the cm reads back RTS (siw on Linux 6.1 reports
//! no state: then `get_state` is `None`, as `refresh_state` says). The
//! kernel's object counts are back where they started.

mod common;

use common::*;
use uverbs::qp::{Mtu, QpAttr, QpAttrMask, QpState};
use uverbs::QueuePair;

/// The send PSNs A and B start with: each is the other's receive PSN.
const PSN_A: u32 = 0x12_3456;
const PSN_B: u32 = 0xab_cdef;
const QKEY: u32 = 0x1111_1111;

/// `qp` RESET -> RTS towards `peer` at `gid`, first sending `sq_psn` and
/// expecting `rq_psn`.
fn connect_psns(
    qp: &QueuePair,
    peer: u32,
    gid: uverbs::device::Gid,
    mtu: Mtu,
    sq_psn: u32,
    rq_psn: u32,
) {
    let dest = QpAttr::roce_dest(gid, GID_INDEX as u8, 1, PORT);
    let [(s1, init), (s2, rtr), (s3, rts)] = rc_to_rts(QP_ACCESS, PORT, mtu, peer, dest);
    modify(qp, &init, s1);
    modify(qp, &rtr.rq_psn(rq_psn), s2);
    modify(qp, &rts.sq_psn(sq_psn), s3);
}

fn rxe_rc_reads_back(ctx: &uverbs::Context, name: &str) {
    let q = two_rc_qps(ctx, name, 8, None);
    let (gid, mtu) = roce_path(ctx, name);
    connect_psns(&q.qp_a, q.qp_b.qp_num(), gid, mtu, PSN_A, PSN_B);
    connect_psns(&q.qp_b, q.qp_a.qp_num(), gid, mtu, PSN_B, PSN_A);
    let asked = RC_PATH_ATTRS;
    for (qp, peer, sq, rq) in [
        (&q.qp_a, &q.qp_b, PSN_A, PSN_B),
        (&q.qp_b, &q.qp_a, PSN_B, PSN_A),
    ] {
        let a = qp
            .query(asked)
            .unwrap_or_else(|e| panic!("{name}: query_qp: {e}"));
        loud(&format!("{name}: QP {:#x} answered {a:?}", qp.qp_num()));
        assert_eq!(a.get_state(), Some(QpState::Rts), "{name}");
        assert_eq!(a.get_dest_qpn(), Some(peer.qp_num()), "{name}");
        assert_eq!(
            (a.get_sq_psn(), a.get_rq_psn()),
            (Some(sq), Some(rq)),
            "{name}: PSNs"
        );
        assert_eq!(
            (a.get_path_mtu(), a.get_port()),
            (Some(mtu), Some(PORT)),
            "{name}"
        );
        assert_eq!(
            (a.get_timeout(), a.get_retry_cnt(), a.get_rnr_retry()),
            (Some(14), Some(7), Some(7)),
            "{name}: rc_to_rts's RTS values"
        );
        let av = a.get_av().unwrap();
        assert_eq!((av.dgid, av.is_global), (gid.raw(), 1), "{name}: the path");
        assert_eq!(qp.state(), QpState::Rts);
    }
}

fn rxe_ud_qkey(ctx: &uverbs::Context, name: &str) {
    let pd = alloc_pd(ctx);
    let cq = ctx
        .create_cq(4, None)
        .unwrap_or_else(|e| panic!("{name}: create_cq: {e}"));
    let qp = ud_qp(&pd, &cq, QKEY, PSN_A, name);
    let a = qp
        .query(QpAttrMask::QKEY | QpAttrMask::STATE | QpAttrMask::SQ_PSN)
        .unwrap_or_else(|e| panic!("{name}: query_qp UD: {e}"));
    assert_eq!(a.get_qkey(), Some(QKEY), "{name}: the Q_Key reads back");
    assert_eq!(a.get_state(), Some(QpState::Rts), "{name}");
    assert_eq!(a.get_sq_psn(), Some(PSN_A), "{name}");
    assert_eq!(a.get_dest_qpn(), None, "{name}: not asked");
}

fn siw_state(ctx: &uverbs::Context, name: &str) {
    let q = connected_rc_pair(ctx, name, 8, None);
    for qp in [&q.qp_a, &q.qp_b] {
        let a = qp
            .query(QpAttrMask::STATE)
            .unwrap_or_else(|e| panic!("{name}: query_qp: {e}"));
        loud(&format!("{name}: QP {:#x} answered {a:?}", qp.qp_num()));
        match a.get_state() {
            Some(state) => assert_eq!(state, QpState::Rts, "{name}"),
            None => {
                // siw on Linux 6.1: no state in the answer.
                let err = qp.refresh_state().unwrap_err();
                assert!(matches!(err, uverbs::Error::NotReported { .. }), "{err}");
            }
        }
        assert_eq!(qp.state(), QpState::Rts, "{name}: established");
    }
}

#[test]
fn query_qp_reads_back_the_connection() {
    on_each_data_path_device_counted("query_qp_reads_back_the_connection", |name, ctx, _| {
        match driver(ctx) {
            Driver::Rxe => {
                rxe_rc_reads_back(ctx, name);
                rxe_ud_qkey(ctx, name);
            }
            _ => siw_state(ctx, name),
        }
    });
}
