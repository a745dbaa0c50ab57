//! Multicast groups on the recording fake kernel, over both framings: what
//! `attach_mcast` and `detach_mcast` send, what they refuse before sending,
//! and that destroying or dropping a QP with a group attached (a plain one,
//! or an `OwnedQp` with receives outstanding) detaches it first, so nothing
//! is left in the kernel. rxe0 runs the same, and `OwnedQp` and
//! `AsyncQp` with them, in tests/device_datapath_mcast.rs.

mod common;

use uverbs::device::Gid;
use uverbs::error::{Errno, Op};
use uverbs::transport::{RecordingTransport, TransportKind};
use uverbs::{
    uverbs_uapi as sys, CompletionQueue, Error, ProtectionDomain, QpInit, QpType, QueuePair,
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

/// The DETACH_MCAST requests the fake received, in order.
fn detach_log(fake: &RecordingTransport) -> Vec<sys::ib_uverbs_attach_mcast> {
    let detach = sys::IB_USER_VERBS_CMD_DETACH_MCAST;
    multicast_log(fake)
        .into_iter()
        .filter(|(code, _)| *code == detach)
        .map(|(_, req)| req)
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

/// `destroy` detaches every group attached first (the kernel refuses
/// DESTROY_QP with one attached: `ibv_destroy_qp` would answer EBUSY and
/// leave it to the caller), then destroys the QP.
#[test]
fn destroy_detaches_every_group_first() {
    common::on_each_fake_framing(|kind, (fake, ctx, pd, cq)| {
        let ud = qp(&pd, &cq, QpType::Ud);
        let h = ud.handle();
        ud.attach_mcast(Gid::from_raw(GROUP), 0).unwrap();
        ud.attach_mcast(Gid::from_raw(GROUP6), 7).unwrap();
        ud.destroy()
            .unwrap_or_else(|e| panic!("{kind:?}: destroy: {}", e.error));
        let detaches = detach_log(&fake);
        assert_eq!(
            detaches,
            [request(h, GROUP, 0), request(h, GROUP6, 7)],
            "{kind:?}"
        );
        assert_eq!(fake.live_cqs_qps(), (1, 0), "{kind:?}");
        assert_eq!(ctx.abandoned_queue_pairs(), 0, "{kind:?}");
    });
}

/// An `OwnedQp` dropped with receives outstanding and a group attached (a
/// UD member waiting for messages: the ordinary case) detaches the group,
/// then destroys the QP: nothing is left in the kernel, nothing abandoned,
/// and its PD can be deallocated. Before the fix its drop sent DESTROY_QP
/// with the group attached, and the QP was abandoned in the kernel.
#[test]
fn a_dropped_owned_member_with_receives_outstanding_is_destroyed() {
    common::on_each_fake_framing(|kind, (fake, ctx, pd, cq)| {
        let ud = qp(&pd, &cq, QpType::Ud);
        let owned = uverbs::OwnedQp::<uverbs::BufferMr<Vec<u8>>>::new(ud).unwrap();
        let init = uverbs::qp::QpAttr::new()
            .state(uverbs::qp::QpState::Init)
            .pkey_index(0)
            .port(1)
            .qkey(0x1111_1111);
        owned.modify(&init).unwrap();
        let buf = pd
            .reg_buffer(vec![0u8; 256], uverbs::AccessFlags::LOCAL_WRITE)
            .unwrap();
        owned
            .post_recv(uverbs::post::RecvRequest::new(
                1,
                uverbs::post::Local::whole(buf),
            ))
            .unwrap_or_else(|e| panic!("{kind:?}: post_recv: {}", e.error));
        owned.attach_mcast(Gid::from_raw(GROUP), 0).unwrap();
        assert_eq!(owned.outstanding(), (0, 1));
        drop(owned);
        assert_eq!(fake.live_cqs_qps(), (1, 0), "{kind:?}: destroyed");
        assert_eq!(ctx.abandoned_queue_pairs(), 0, "{kind:?}");
        pd.dealloc()
            .unwrap_or_else(|e| panic!("{kind:?}: dealloc_pd: {}", e.error));
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
        let detaches = detach_log(&fake);
        assert_eq!(
            detaches,
            [request(h, GROUP, 0), request(h, GROUP6, 0)],
            "{kind:?}"
        );
        assert_eq!(fake.live_cqs_qps(), (1, 0), "{kind:?}: destroyed");
        assert_eq!(ctx.abandoned_queue_pairs(), 0, "{kind:?}");
    });
}
