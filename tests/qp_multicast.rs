//! Multicast groups on the recording fake kernel, over both framings: what
//! `attach_mcast` and `detach_mcast` send, what they refuse before sending,
//! that a QP with a group attached is not destroyed (the kernel's `EBUSY`,
//! the QP handed back whole) and that dropping one detaches it first, so
//! nothing is left in the kernel. rxe0 runs the same, and `OwnedQp` and
//! `AsyncQp` with them, in tests/device_datapath_mcast.rs.

mod common;

use uverbs::transport::RecordingTransport;
use uverbs::uverbs_uapi as sys;
use uverbs::{
    CompletionQueue, Errno, Error, Gid, Op, ProtectionDomain, QpInit, QpType, QueuePair,
    TransportKind,
};

/// The IPv4-mapped group 239.1.2.3.
const GROUP: [u8; 16] = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 239, 1, 2, 3];
/// An IPv6 group (ff0e::1:2).
const GROUP6: [u8; 16] = [0xff, 0x0e, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 2];

fn qp(pd: &ProtectionDomain, cq: &CompletionQueue, qp_type: QpType) -> QueuePair {
    pd.create_qp(&QpInit::new(qp_type, cq, cq)).unwrap()
}

/// The multicast commands the fake received, in order: (code, request).
fn multicast_log(fake: &RecordingTransport) -> Vec<(u32, sys::ib_uverbs_attach_mcast)> {
    fake.commands()
        .iter()
        .filter(|c| {
            [
                sys::IB_USER_VERBS_CMD_ATTACH_MCAST,
                sys::IB_USER_VERBS_CMD_DETACH_MCAST,
            ]
            .contains(&c.code)
        })
        .map(|c| (c.code, c.request().expect("a 24-byte request")))
        .collect()
}

fn request(qp_handle: u32, gid: [u8; 16], mlid: u16) -> sys::ib_uverbs_attach_mcast {
    sys::ib_uverbs_attach_mcast {
        gid,
        qp_handle,
        mlid,
        reserved: 0,
    }
}

fn assert_input(err: &Error, op: Op, what: &str) {
    assert!(matches!(err, Error::InvalidInput { .. }), "{what}: {err:?}");
    assert_eq!(err.op(), op, "{what}: {err}");
    assert!(err.to_string().starts_with(op.name()), "{what}: {err}");
}

#[test]
fn attach_and_detach_send_the_group_and_the_qp() {
    common::on_each_fake_framing(|kind, (fake, _ctx, pd, cq)| {
        let ud = qp(&pd, &cq, QpType::Ud);
        let h = ud.handle();
        ud.attach_mcast(Gid::from_raw(GROUP), 0).unwrap();
        ud.attach_mcast(Gid::from_raw(GROUP6), 0xc001).unwrap();
        ud.detach_mcast(Gid::from_raw(GROUP6), 0xc001).unwrap();
        // Not attached any more: the kernel's EINVAL, typed as an OS error.
        let err = ud.detach_mcast(Gid::from_raw(GROUP6), 0xc001).unwrap_err();
        assert_eq!(
            (err.op(), err.errno()),
            (Op::DetachMcast, Some(Errno::INVAL))
        );
        assert!(matches!(err, Error::Os { .. }), "{kind:?}: {err:?}");
        let (attach, detach) = (
            sys::IB_USER_VERBS_CMD_ATTACH_MCAST,
            sys::IB_USER_VERBS_CMD_DETACH_MCAST,
        );
        assert_eq!(
            multicast_log(&fake),
            [
                (attach, request(h, GROUP, 0)),
                (attach, request(h, GROUP6, 0xc001)),
                (detach, request(h, GROUP6, 0xc001)),
                (detach, request(h, GROUP6, 0xc001)),
            ],
            "{kind:?}"
        );
    });
}

#[test]
fn a_qp_that_is_not_ud_or_a_gid_that_is_not_multicast_is_refused_before_sending() {
    let (fake, _ctx, pd, cq) = common::fake_data_path(TransportKind::Ioctl);
    let rc = qp(&pd, &cq, QpType::Rc);
    let ud = qp(&pd, &cq, QpType::Ud);
    let before = fake.count();
    let unicast_v4 = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 192, 0, 2, 1];
    let link_local = [0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
    let cases = [
        (&rc, GROUP, "an RC QP"),
        (&ud, unicast_v4, "an IPv4 unicast GID"),
        (&ud, link_local, "an IPv6 unicast GID"),
        // ff.. in the IPv4-mapped form is 255.x: not an IPv4 group.
        (
            &ud,
            [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0, 0, 1],
            "IPv4 255.0.0.1",
        ),
    ];
    for (qp, gid, what) in cases {
        let gid = Gid::from_raw(gid);
        assert_input(&qp.attach_mcast(gid, 0).unwrap_err(), Op::AttachMcast, what);
        assert_input(&qp.detach_mcast(gid, 0).unwrap_err(), Op::DetachMcast, what);
    }
    assert_eq!(fake.count(), before, "nothing sent");
}

/// `destroy` answers the kernel's EBUSY while a group is attached and hands
/// the QP back, usable; after the detach it is destroyed.
#[test]
fn a_qp_with_a_group_attached_is_handed_back_by_destroy() {
    common::on_each_fake_framing(|kind, (fake, ctx, pd, cq)| {
        let ud = qp(&pd, &cq, QpType::Ud);
        let group = Gid::from_raw(GROUP);
        ud.attach_mcast(group, 0).unwrap();
        let refused = ud.destroy().unwrap_err();
        assert_eq!(
            (refused.error.op(), refused.error.errno()),
            (Op::DestroyQp, Some(Errno::BUSY)),
            "{kind:?}: {}",
            refused.error
        );
        assert_eq!(fake.live_cqs_qps(), (1, 1), "{kind:?}");
        let ud = *refused.qp;
        ud.detach_mcast(group, 0).unwrap();
        ud.destroy().unwrap();
        assert_eq!(fake.live_cqs_qps(), (1, 0), "{kind:?}");
        assert_eq!(ctx.abandoned_queue_pairs(), 0, "{kind:?}");
    });
}

/// A dropped QP detaches every group it attached (once each, however often
/// it was attached), then is destroyed: nothing abandoned.
#[test]
fn dropping_a_qp_detaches_its_groups_then_destroys_it() {
    common::on_each_fake_framing(|kind, (fake, ctx, pd, cq)| {
        let ud = qp(&pd, &cq, QpType::Ud);
        let h = ud.handle();
        for _ in 0..2 {
            ud.attach_mcast(Gid::from_raw(GROUP), 0).unwrap();
        }
        ud.attach_mcast(Gid::from_raw(GROUP6), 0).unwrap();
        drop(ud);
        let detach = sys::IB_USER_VERBS_CMD_DETACH_MCAST;
        let detaches: Vec<_> = multicast_log(&fake)
            .into_iter()
            .filter(|(code, _)| *code == detach)
            .map(|(_, req)| req)
            .collect();
        assert_eq!(
            detaches,
            [request(h, GROUP, 0), request(h, GROUP6, 0)],
            "{kind:?}"
        );
        assert_eq!(fake.live_cqs_qps(), (1, 0), "{kind:?}: destroyed");
        assert_eq!(ctx.abandoned_queue_pairs(), 0, "{kind:?}");
    });
}
