//! Host tests of the cm over the fake kernel: the command sequences of
//! listen, connect, accept, reject and disconnect, the decoding of each
//! event, and the errors.

use std::sync::Arc;
use std::time::Duration;

use uverbs_uapi as sys;

use super::*;
use crate::command::{QpAttrMask, QpState, QpType};
use crate::error::{Errno, Op};

const WAIT: Duration = Duration::from_secs(2);

fn channel() -> (Arc<FakeCm>, EventChannel) {
    let fake = Arc::new(FakeCm::new().unwrap());
    (fake.clone(), EventChannel::with_fake(fake))
}

fn next(ch: &EventChannel) -> Event {
    ch.wait_event(WAIT).unwrap().expect("an event within 2 s")
}

/// A listener on 192.0.2.1:`port` and a client whose route is resolved.
fn listener_and_client(ch: &EventChannel, port: u16) -> (CmId, CmId) {
    let addr = format!("192.0.2.1:{port}").parse().unwrap();
    let listener = ch.create_id(PortSpace::Tcp).unwrap();
    listener.bind(addr).unwrap();
    listener.listen(4).unwrap();
    let client = ch.create_id(PortSpace::Tcp).unwrap();
    client.resolve_addr(None, addr, 1000).unwrap();
    let ev = next(ch);
    assert!(matches!(ev.kind, EventKind::AddrResolved), "{ev:?}");
    assert_eq!((ev.id, ev.uid), (client.handle(), client.uid()));
    client.resolve_route(1000).unwrap();
    assert!(matches!(next(ch).kind, EventKind::RouteResolved));
    (listener, client)
}

#[test]
fn connect_accept_establish_disconnect() {
    let (fake, ch) = channel();
    let (listener, client) = listener_and_client(&ch, 7471);
    let hello = ConnParam::new(0x11).private_data(b"hello").unwrap();
    client.connect(&hello).unwrap();

    let ev = next(&ch);
    assert_eq!(
        ev.uid,
        listener.uid(),
        "a request carries the listener's uid"
    );
    let EventKind::ConnectRequest { id: server, param } = ev.kind else {
        panic!("{ev:?}")
    };
    assert_eq!(ev.id, server.handle(), "and names the new id");
    let Param::Conn(peer) = param else { panic!() };
    assert_eq!(peer.qp_num, 0x11);
    // The IB CM reports its REQ's whole private-data area (56 bytes).
    assert_eq!(peer.private_data.len(), 56);
    assert_eq!(&peer.private_data[..5], b"hello");

    server
        .accept(&ConnParam::new(0x22).private_data(b"welcome").unwrap())
        .unwrap();
    let ev = next(&ch);
    assert_eq!(ev.id, client.handle());
    let EventKind::ConnectResponse(Param::Conn(peer)) = ev.kind else {
        panic!("{ev:?}")
    };
    assert_eq!(peer.qp_num, 0x22);
    assert_eq!(&peer.private_data[..7], b"welcome");
    client.establish().unwrap();
    // Only the passive side hears ESTABLISHED, under its accept uid; the
    // active side's answer was CONNECT_RESPONSE.
    let ev = next(&ch);
    assert!(matches!(ev.kind, EventKind::Established(_)), "{ev:?}");
    assert_eq!((ev.id, ev.uid), (server.handle(), server.uid()));
    assert!(ch.wait_event(Duration::from_millis(10)).unwrap().is_none());

    client.disconnect().unwrap();
    // The DREQ: the server hears it; the client waits for the DREP.
    let ev = next(&ch);
    assert!(matches!(ev.kind, EventKind::Disconnected), "{ev:?}");
    assert_eq!(ev.id, server.handle());
    assert!(ch.wait_event(Duration::from_millis(10)).unwrap().is_none());
    server.disconnect().unwrap();
    let ev = next(&ch);
    assert!(matches!(ev.kind, EventKind::Disconnected), "{ev:?}");
    assert_eq!(ev.id, client.handle());
    client.disconnect().unwrap(); // down already: a no-op, like the kernel's
    assert!(ch.wait_event(Duration::from_millis(10)).unwrap().is_none());

    use sys::*;
    assert_eq!(
        fake.command_codes(),
        [
            RDMA_USER_CM_CMD_CREATE_ID,
            RDMA_USER_CM_CMD_BIND,
            RDMA_USER_CM_CMD_LISTEN,
            RDMA_USER_CM_CMD_CREATE_ID,
            RDMA_USER_CM_CMD_RESOLVE_ADDR,
            RDMA_USER_CM_CMD_GET_EVENT,
            RDMA_USER_CM_CMD_RESOLVE_ROUTE,
            RDMA_USER_CM_CMD_GET_EVENT,
            RDMA_USER_CM_CMD_CONNECT,
            RDMA_USER_CM_CMD_GET_EVENT,
            RDMA_USER_CM_CMD_ACCEPT,
            RDMA_USER_CM_CMD_GET_EVENT,
            RDMA_USER_CM_CMD_ACCEPT,
            RDMA_USER_CM_CMD_GET_EVENT,
            // Each wait_event that found nothing: one GET_EVENT answered
            // EAGAIN (a wait tries the non-blocking read before poll()).
            RDMA_USER_CM_CMD_GET_EVENT,
            RDMA_USER_CM_CMD_DISCONNECT,
            RDMA_USER_CM_CMD_GET_EVENT,
            RDMA_USER_CM_CMD_GET_EVENT,
            RDMA_USER_CM_CMD_DISCONNECT,
            RDMA_USER_CM_CMD_GET_EVENT,
            RDMA_USER_CM_CMD_DISCONNECT,
            RDMA_USER_CM_CMD_GET_EVENT,
        ]
    );
    // The accept carried the server id's own (non-zero) uid; the RTU none.
    let accepts: Vec<sys::rdma_ucm_accept> = fake.requests(RDMA_USER_CM_CMD_ACCEPT);
    assert_eq!(accepts[0].uid, server.uid());
    assert_ne!(accepts[0].uid, 0);
    assert_eq!(
        (accepts[0].conn_param.valid, accepts[0].conn_param.qp_num),
        (1, 0x22)
    );
    assert_eq!((accepts[1].uid, accepts[1].conn_param.valid), (0, 0));

    // Every event the channel delivered is the kernel's count.
    let received = (
        listener.events_received(),
        client.events_received(),
        server.events_received(),
    );
    assert_eq!(received, (1, 4, 2));
    assert_eq!(server.destroy().unwrap(), 2);
    assert_eq!(client.destroy().unwrap(), 4);
    assert_eq!(listener.destroy().unwrap(), 1);
    assert_eq!(fake.live_ids(), 0);
}

#[test]
fn init_qp_attr_gives_a_checked_qp_attr() {
    let (_fake, ch) = channel();
    let (_listener, client) = listener_and_client(&ch, 1);
    let init = client.init_qp_attr(QpState::Init).unwrap();
    assert_eq!(init.mask().bits(), 0x39);
    assert!(init.check(QpType::Rc, QpState::Reset).is_ok());
    let rtr = client.init_qp_attr(QpState::Rtr).unwrap();
    assert!(rtr.mask().contains(QpAttrMask::AV | QpAttrMask::DEST_QPN));
    assert!(rtr.check(QpType::Rc, QpState::Init).is_ok());
    let rts = client.init_qp_attr(QpState::Rts).unwrap();
    assert!(rts.check(QpType::Rc, QpState::Rtr).is_ok());
    // ERR has no attributes in the fake: the kernel's errno, named.
    let err = client.init_qp_attr(QpState::Err).unwrap_err();
    assert_eq!(
        (err.op(), err.errno()),
        (Op::CmInitQpAttr, Some(Errno::INVAL))
    );
}

#[test]
fn unsupported_init_qp_attr_mask_is_refused_not_dropped() {
    let raw = sys::ib_uverbs_qp_attr {
        qp_attr_mask: (QpAttrMask::STATE | QpAttrMask::ALT_PATH).bits(),
        qp_state: 2,
        ..Default::default()
    };
    assert!(id::qp_attr_from_kernel(&raw).is_err());
    let raw = sys::ib_uverbs_qp_attr {
        qp_attr_mask: (QpAttrMask::STATE | QpAttrMask::PATH_MTU).bits(),
        qp_state: 2,
        path_mtu: 9,
        ..Default::default()
    };
    assert!(id::qp_attr_from_kernel(&raw).is_err(), "MTU 9 is no ib_mtu");
}

#[test]
fn reject_reaches_the_client_with_reason_and_private_data() {
    let (_fake, ch) = channel();
    let (_listener, client) = listener_and_client(&ch, 2);
    client.connect(&ConnParam::new(1)).unwrap();
    let EventKind::ConnectRequest { id: server, .. } = next(&ch).kind else {
        panic!()
    };
    server
        .reject(RejectReason::ConsumerDefined, b"busy")
        .unwrap();
    let ev = next(&ch);
    assert_eq!(ev.id, client.handle());
    let EventKind::Rejected { reason, param } = ev.kind else {
        panic!("{ev:?}")
    };
    assert_eq!(reason, 28);
    assert_eq!(&param.private_data()[..4], b"busy");
    // 149 bytes do not fit a REJ: refused before the write.
    let err = server
        .reject(RejectReason::ConsumerDefined, &[0; 149])
        .unwrap_err();
    assert_eq!((err.op(), err.errno()), (Op::CmReject, Some(Errno::INVAL)));
}

#[test]
fn connect_where_nobody_listens_is_rejected() {
    let (_fake, ch) = channel();
    let client = ch.create_id(PortSpace::Tcp).unwrap();
    client
        .resolve_addr(None, "192.0.2.1:9999".parse().unwrap(), 1000)
        .unwrap();
    next(&ch);
    client.resolve_route(1000).unwrap();
    next(&ch);
    client.connect(&ConnParam::new(1)).unwrap();
    let ev = next(&ch);
    assert!(
        matches!(ev.kind, EventKind::Rejected { reason: 8, .. }),
        "{ev:?}"
    );
    assert_eq!(ev.name(), "RDMA_CM_EVENT_REJECTED");
}

#[test]
fn address_error_carries_the_errno() {
    let (_fake, ch) = channel();
    let id = ch.create_id(PortSpace::Tcp).unwrap();
    id.resolve_addr(None, "198.51.100.7:1".parse().unwrap(), 1000)
        .unwrap();
    let ev = next(&ch);
    assert!(matches!(ev.kind, EventKind::AddrError));
    assert_eq!(ev.errno(), Some(Errno::NETUNREACH));
}

#[test]
fn private_data_over_the_connect_limit_is_refused_before_the_write() {
    let (fake, ch) = channel();
    let (_listener, client) = listener_and_client(&ch, 3);
    let before = fake.commands().len();
    let p = ConnParam::new(1).private_data(&[1; 57]).unwrap();
    let err = client.connect(&p).unwrap_err();
    assert_eq!((err.op(), err.errno()), (Op::CmConnect, Some(Errno::INVAL)));
    assert_eq!(fake.commands().len(), before, "nothing was sent");
}

#[test]
fn destroying_a_listener_drops_its_unreported_requests() {
    let (fake, ch) = channel();
    let (listener, client) = listener_and_client(&ch, 4);
    client.connect(&ConnParam::new(1)).unwrap();
    assert_eq!(fake.live_ids(), 3, "listener, client and the request's id");
    assert_eq!(listener.destroy().unwrap(), 0);
    assert_eq!(fake.live_ids(), 1, "the unreported request's id went too");
    // The request's event went with it; the requester is rejected.
    let ev = next(&ch);
    assert_eq!(ev.id, client.handle());
    assert!(
        matches!(ev.kind, EventKind::Rejected { reason: 28, .. }),
        "{ev:?}"
    );
    assert_eq!(fake.queued_events(), 0);
    assert!(!ch.poll_readable(Duration::ZERO).unwrap());
}

#[test]
fn dropping_a_connect_request_destroys_its_id() {
    let (fake, ch) = channel();
    let (_listener, client) = listener_and_client(&ch, 5);
    client.connect(&ConnParam::new(1)).unwrap();
    let ev = next(&ch);
    assert!(matches!(ev.kind, EventKind::ConnectRequest { .. }));
    assert_eq!(fake.live_ids(), 3);
    drop(ev);
    assert_eq!(fake.live_ids(), 2);
    assert_eq!(
        fake.command_codes().last(),
        Some(&sys::RDMA_USER_CM_CMD_DESTROY_ID)
    );
    let ev = next(&ch);
    assert_eq!(ev.id, client.handle());
    assert!(
        matches!(ev.kind, EventKind::Rejected { reason: 28, .. }),
        "{ev:?}"
    );
}

#[test]
fn try_get_event_is_none_when_empty_and_poll_follows_the_queue() {
    let (fake, ch) = channel();
    assert!(ch.try_get_event().unwrap().is_none());
    assert!(!ch.poll_readable(Duration::ZERO).unwrap());
    let id = ch.create_id(PortSpace::Udp).unwrap();
    fake.inject_event(id.handle(), event_number::DEVICE_REMOVAL, 0);
    fake.inject_event(id.handle(), 42, 0);
    assert!(ch.poll_readable(Duration::ZERO).unwrap());
    assert!(matches!(
        ch.try_get_event().unwrap().unwrap().kind,
        EventKind::DeviceRemoval
    ));
    assert!(ch.poll_readable(Duration::ZERO).unwrap(), "one more queued");
    let ev = ch.get_event().unwrap();
    assert!(matches!(ev.kind, EventKind::Unknown(42)));
    assert_eq!(ev.name(), "RDMA_CM_EVENT_UNKNOWN");
    assert!(!ch.poll_readable(Duration::ZERO).unwrap());
    assert!(ch.wait_event(Duration::from_millis(5)).unwrap().is_none());
}

#[test]
fn kernel_errors_name_the_operation_and_errno() {
    let (fake, ch) = channel();
    fake.fail_next(sys::RDMA_USER_CM_CMD_CREATE_ID, Errno::NOMEM);
    let err = ch.create_id(PortSpace::Tcp).unwrap_err();
    assert_eq!(
        (err.op(), err.errno()),
        (Op::CmCreateId, Some(Errno::NOMEM))
    );
    let id = ch.create_id(PortSpace::Tcp).unwrap();
    let err = id.bind("203.0.113.1:1".parse().unwrap()).unwrap_err();
    assert_eq!(err.errno(), Some(Errno::ADDRNOTAVAIL));
    assert!(
        err.to_string()
            .starts_with("rdma_bind_addr on fake_rdma_cm: EADDRNOTAVAIL"),
        "{err}"
    );
    let err = id.listen(1).unwrap_err();
    assert_eq!((err.op(), err.errno()), (Op::CmListen, Some(Errno::INVAL)));
}

#[test]
fn query_reports_addresses_and_the_device_guid() {
    let (_fake, ch) = channel();
    let id = ch.create_id(PortSpace::Tcp).unwrap();
    assert_eq!(id.node_guid().unwrap(), None, "no device before bind");
    let addr = "192.0.2.1:7000".parse().unwrap();
    id.bind(addr).unwrap();
    let info = id.query_addr().unwrap();
    assert_eq!(info.src, Some(addr));
    assert_eq!(info.node_guid, Some(FakeCm::NODE_GUID));
    assert_eq!((info.port_num, info.pkey), (1, 0xffff));
    let route = id.query_route().unwrap();
    assert_eq!(
        (route.src, route.node_guid),
        (Some(addr), Some(FakeCm::NODE_GUID))
    );
}

/// A uverbs class directory under `root` with a `uverbsN` node per name
/// (and an empty device directory), listed.
fn uverbs_class_under(
    root: &std::path::Path,
    names: &[&str],
) -> Result<Vec<crate::Device>, crate::Error> {
    let (sysfs, dev) = (root.join("uverbs"), root.join("dev"));
    for (i, name) in names.iter().enumerate() {
        let d = sysfs.join(format!("uverbs{i}"));
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("ibdev"), format!("{name}\n")).unwrap();
        std::fs::write(d.join("abi_version"), "1\n").unwrap();
        std::fs::write(d.join("dev"), format!("231:{}\n", 192 + i)).unwrap();
    }
    std::fs::write(sysfs.join("abi_version"), "6\n").unwrap();
    std::fs::create_dir_all(&dev).unwrap();
    crate::device::devices_in(&sysfs, &dev)
}

#[test]
fn matching_devices_compares_sysfs_node_guids() {
    let (_fake, ch) = channel();
    let id = ch.create_id(PortSpace::Tcp).unwrap();
    id.bind("192.0.2.1:7001".parse().unwrap()).unwrap();
    let root = std::env::temp_dir().join(format!("uverbs-cm-guid-{}", std::process::id()));
    let class = root.join("class");
    for (name, guid) in [
        ("rxe0", "0200:5eff:fe00:0001"),
        ("mlx5_0", "0000:0000:0000:0002"),
    ] {
        std::fs::create_dir_all(class.join(name)).unwrap();
        std::fs::write(class.join(name).join("node_guid"), format!("{guid}\n")).unwrap();
    }
    let devices = uverbs_class_under(&root, &["rxe0", "mlx5_0"]).unwrap();
    assert_eq!(devices.len(), 2);
    let found = id.matching_devices_in(&devices, &class).unwrap();
    let names: Vec<&str> = found.iter().map(|d| d.name()).collect();
    assert_eq!(names, ["rxe0"]);
    let _ = std::fs::remove_dir_all(&root);
    assert_eq!(
        id::parse_sysfs_guid("0200:5eff:fe00:0001\n"),
        Some(FakeCm::NODE_GUID)
    );
    assert_eq!(id::parse_sysfs_guid("0200:5eff"), None);
}

/// The id's device is the one the kernel's index names, not the first of
/// the devices sharing its node GUID: rxe0 and siw0 on one netdev (one
/// GUID), the fake's index naming siw0. Before bind: no device; an index
/// netlink does not know: ENODEV; a failed netlink exchange: its errno.
#[test]
fn the_device_is_the_one_the_kernels_index_names() {
    let (_fake, ch) = channel();
    let id = ch.create_id(PortSpace::Tcp).unwrap();
    assert!(id.device().unwrap().is_none(), "no device before bind");
    id.bind("192.0.2.1:7002".parse().unwrap()).unwrap();
    let info = id.query_addr().unwrap();
    assert_eq!(info.ibdev_index, FakeCm::IBDEV_INDEX);
    let root = std::env::temp_dir().join(format!("uverbs-cm-index-{}", std::process::id()));
    let devices = || uverbs_class_under(&root, &["rxe0", "siw0"]);
    // The kernel numbers rxe0 4 and siw0 5.
    let names = |index: u32| {
        Ok([(4, "rxe0"), (5, "siw0")]
            .into_iter()
            .find(|(i, _)| *i == index)
            .map(|(_, n)| n.to_string()))
    };
    let found = id.device_among(&info, devices, names).unwrap();
    assert_eq!(found.map(|d| d.name().to_string()).as_deref(), Some("siw0"));
    let unknown = |_| Ok(None);
    let err = id.device_among(&info, devices, unknown).unwrap_err();
    assert_eq!((err.op(), err.errno()), (Op::CmQuery, Some(Errno::NODEV)));
    let gone = |_| Ok(Some("mlx5_0".to_string()));
    let err = id.device_among(&info, devices, gone).unwrap_err();
    assert_eq!(
        err.errno(),
        Some(Errno::NODEV),
        "no uverbs node of that name"
    );
    let refused = |_| Err(std::io::Error::from_raw_os_error(libc::EPERM));
    let err = id.device_among(&info, devices, refused).unwrap_err();
    assert_eq!((err.op(), err.errno()), (Op::CmQuery, Some(Errno::PERM)));
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn abi_other_than_4_is_refused() {
    let dir = std::env::temp_dir().join(format!("uverbs-cm-abi-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let abi = dir.join("abi_version");
    std::fs::write(&abi, "3\n").unwrap();
    let err = EventChannel::open_at(&dir.join("rdma_cm"), &abi).unwrap_err();
    assert!(matches!(err, crate::Error::Abi { found: 3, .. }), "{err}");
    std::fs::write(&abi, "4\n").unwrap();
    // ABI fine, no such device file: the open's errno, named.
    let err = EventChannel::open_at(&dir.join("rdma_cm"), &abi).unwrap_err();
    assert_eq!((err.op(), err.errno()), (Op::CmOpen, Some(Errno::NOENT)));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn blocking_get_event_wakes_when_another_thread_queues() {
    let (fake, ch) = channel();
    let id = ch.create_id(PortSpace::Tcp).unwrap();
    let handle = id.handle();
    let t = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(20));
        fake.inject_event(handle, event_number::TIMEWAIT_EXIT, 0);
    });
    let ev = ch.get_event().unwrap();
    assert!(matches!(ev.kind, EventKind::TimewaitExit));
    t.join().unwrap();
}

#[test]
fn ud_events_decode_the_ud_param_and_rc_events_the_conn_param() {
    use zerocopy::{FromZeros, IntoBytes};
    let mut ud = sys::rdma_ucm_ud_param::new_zeroed();
    ud.qp_num = 0x51;
    ud.qkey = 0x1111_1111;
    ud.ah_attr.dlid = 7;
    ud.ah_attr.is_global = 1;
    ud.private_data[..3].copy_from_slice(b"udp");
    ud.private_data_len = 3;
    let mut resp = sys::rdma_ucm_event_resp::new_zeroed();
    resp.event = event_number::ESTABLISHED;
    resp.id = 9;
    resp.uid = 77;
    resp.param.copy_from_slice(ud.as_bytes());
    let never = |_| unreachable!("no connect request here");
    let ev = event::decode(&resp, PortSpace::Udp, never);
    let EventKind::Established(Param::Ud(peer)) = &ev.kind else {
        panic!("{ev:?}")
    };
    assert_eq!((peer.qp_num, peer.qkey), (0x51, 0x1111_1111));
    assert_eq!((peer.ah_attr.dlid, peer.ah_attr.is_global), (7, 1));
    assert_eq!(peer.private_data, b"udp");
    assert_eq!((ev.id, ev.uid, ev.status), (9, 77, 0));
    // The same bytes read as an RC id's: qp_num and qkey are the first
    // fields of both; private data starts at byte 8 of conn_param.
    let ev = event::decode(&resp, PortSpace::Tcp, never);
    let EventKind::Established(Param::Conn(peer)) = &ev.kind else {
        panic!("{ev:?}")
    };
    assert_eq!(peer.qp_num, 0x51);
    // A rejected event's status is its reason; a failure's a negative errno.
    resp.event = event_number::UNREACHABLE;
    resp.status = (-Errno::TIMEDOUT.raw_os_error()) as u32;
    let ev = event::decode(&resp, PortSpace::Tcp, never);
    assert!(matches!(ev.kind, EventKind::Unreachable));
    assert_eq!(ev.errno(), Some(Errno::TIMEDOUT));
}

#[test]
fn multicast_events_decode_the_ud_param_whatever_the_port_space() {
    use zerocopy::{FromZeros, IntoBytes};
    let mut ud = sys::rdma_ucm_ud_param::new_zeroed();
    (ud.qp_num, ud.qkey, ud.ah_attr.dlid) = (0xff_ffff, UDP_QKEY, 0xc001);
    let mut resp = sys::rdma_ucm_event_resp::new_zeroed();
    (resp.event, resp.id, resp.uid) = (event_number::MULTICAST_JOIN, 4, 88);
    resp.param.copy_from_slice(ud.as_bytes());
    let never = |_| unreachable!("no connect request here");
    for ps in [PortSpace::Udp, PortSpace::Tcp] {
        let ev = event::decode(&resp, ps, never);
        let EventKind::MulticastJoin(group) = &ev.kind else {
            panic!("{ps:?}: {ev:?}")
        };
        assert_eq!(
            (group.qp_num, group.qkey, group.ah_attr.dlid),
            (0xff_ffff, UDP_QKEY, 0xc001)
        );
        assert_eq!(
            (ev.number(), ev.name()),
            (12, "RDMA_CM_EVENT_MULTICAST_JOIN")
        );
    }
    resp.event = event_number::MULTICAST_ERROR;
    resp.status = (-Errno::NETUNREACH.raw_os_error()) as u32;
    let ev = event::decode(&resp, PortSpace::Udp, never);
    assert!(matches!(ev.kind, EventKind::MulticastError), "{ev:?}");
    assert_eq!(
        (ev.number(), ev.name()),
        (13, "RDMA_CM_EVENT_MULTICAST_ERROR")
    );
    assert_eq!(ev.errno(), Some(Errno::NETUNREACH));
}

#[test]
fn set_option_and_notify_reach_the_kernel_with_their_values() {
    let (fake, ch) = channel();
    let id = ch.create_id(PortSpace::Tcp).unwrap();
    id.set_option(CmOption::ReuseAddr(true)).unwrap();
    id.set_option(CmOption::AckTimeout(14)).unwrap();
    let opts: Vec<sys::rdma_ucm_set_option> = fake.requests(sys::RDMA_USER_CM_CMD_SET_OPTION);
    let got: Vec<_> = opts
        .iter()
        .map(|o| (o.id, o.level, o.optname, o.optlen))
        .collect();
    assert_eq!(got, [(id.handle(), 0, 1, 4), (id.handle(), 0, 3, 1)]);
    // No device yet: the kernel refuses NOTIFY with EINVAL.
    let err = id.notify(9).unwrap_err();
    assert_eq!((err.op(), err.errno()), (Op::CmNotify, Some(Errno::INVAL)));
    id.bind("192.0.2.1:7002".parse().unwrap()).unwrap();
    id.notify(9).unwrap();
    let last = fake.commands().pop().unwrap();
    assert_eq!(
        last.request::<sys::rdma_ucm_notify>()
            .map(|n| (n.id, n.event)),
        Some((id.handle(), 9))
    );
}

// The blocking handshakes (`handshake.rs`). The fake has one event queue
// for all its channels, so the two sides of one connection cannot each
// wait on their own here: the happy path of connect_qp/accept_qp runs on
// the devices (the short examples, on rxe0 and siw0); here the waits,
// the event checks and the typed failures.

#[test]
fn blocking_resolve_reaches_the_route_and_types_an_unknown_address() {
    use crate::cm::CmError;
    let (_fake, ch) = channel();
    let id = ch.create_id(PortSpace::Tcp).unwrap();
    id.resolve(None, "192.0.2.1:7471".parse().unwrap(), WAIT)
        .expect("the fake's own address resolves");
    assert_eq!(id.events_received(), 2, "ADDR_RESOLVED, ROUTE_RESOLVED");
    let lost = ch.create_id(PortSpace::Tcp).unwrap();
    let err = lost
        .resolve(None, "203.0.113.9:7471".parse().unwrap(), WAIT)
        .expect_err("an address no device has");
    assert!(
        matches!(err, CmError::Failed { op: Op::CmResolveAddr, errno, .. } if errno == Errno::NETUNREACH),
        "{err:?}"
    );
    assert_eq!(err.errno(), Some(Errno::NETUNREACH));
}

#[test]
fn blocking_connect_to_nobody_is_rejected_with_the_qp_in_init() {
    use crate::cm::CmError;
    use crate::connectable::mock::MockQp;
    let (_fake, ch) = channel();
    let id = ch.create_id(PortSpace::Tcp).unwrap();
    id.resolve(None, "192.0.2.1:7999".parse().unwrap(), WAIT)
        .unwrap();
    let qp = MockQp::new(0x11);
    let err = id
        .connect_qp(&qp, &ConnParam::new(0x11), WAIT)
        .expect_err("nobody listens on 7999");
    assert!(
        matches!(
            err,
            CmError::Rejected {
                op: Op::CmConnect,
                status: 8,
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(err.errno(), Some(Errno::CONNREFUSED));
    assert_eq!(
        qp.moves(),
        [Some(QpState::Init)],
        "INIT before CONNECT only"
    );
}

#[test]
fn blocking_waits_are_bounded_and_take_only_their_own_ids_events() {
    use crate::cm::CmError;
    use crate::connectable::mock::MockQp;
    let (_fake, ch) = channel();
    let (listener, client) = listener_and_client(&ch, 7472);
    // Nothing queued: the wait runs out, typed.
    let short = Duration::from_millis(50);
    let err = listener.get_request(short).expect_err("no request yet");
    assert!(
        matches!(err, CmError::TimedOut { op: Op::CmListen, waited } if waited == short),
        "{err:?}"
    );
    assert_eq!(err.errno(), Some(Errno::TIMEDOUT));
    // One channel for both sides: the client's wait reads the listener's
    // CONNECT_REQUEST, which is not its own.
    let qp = MockQp::new(0x11);
    let err = client
        .connect_qp(&qp, &ConnParam::new(0x11), WAIT)
        .expect_err("another id's event");
    assert!(
        matches!(
            err,
            CmError::Unexpected {
                op: Op::CmConnect,
                event: "RDMA_CM_EVENT_CONNECT_REQUEST",
                ..
            }
        ),
        "{err:?}"
    );
    // On a fresh channel: a request read by its listener is a new id with
    // the requester's parameters.
    let (_fake, ch) = channel();
    let (listener, client) = listener_and_client(&ch, 7473);
    client.connect(&ConnParam::new(0x12)).unwrap();
    let (server, param) = listener.get_request(WAIT).expect("the request");
    let Param::Conn(peer) = param else {
        panic!("{param:?}")
    };
    assert_eq!(peer.qp_num, 0x12);
    assert_ne!(server.handle(), listener.handle());
}

/// `err` is a refusal of `op`'s input, made before anything was sent.
fn assert_input(err: &crate::Error, op: Op) {
    assert!(matches!(err, crate::Error::InvalidInput { .. }), "{err:?}");
    assert_eq!(err.op(), op, "{err}");
}

/// A UDP id bound to 192.0.2.1, as multicast needs it.
fn bound_udp_id(ch: &EventChannel) -> CmId {
    let id = ch.create_id(PortSpace::Udp).unwrap();
    id.bind("192.0.2.1:0".parse().unwrap()).unwrap();
    id
}

#[test]
fn a_udp_id_joins_and_leaves_a_group() {
    let (fake, ch) = channel();
    let id = bound_udp_id(&ch);
    let group = "239.1.2.3:0".parse().unwrap();
    let member = id.join_multicast(group, false).unwrap();
    assert_eq!(member.group(), group);
    assert_ne!(member.uid(), id.uid(), "a membership has a uid of its own");
    assert_eq!(id.memberships(), vec![member]);

    let req = fake.requests::<sys::rdma_ucm_join_mcast>(sys::RDMA_USER_CM_CMD_JOIN_MCAST);
    assert_eq!(req.len(), 1);
    assert_eq!((req[0].id, req[0].uid), (id.handle(), member.uid()));
    assert_eq!((req[0].addr_size, req[0].join_flags), (16, 0));
    assert_eq!(
        command::socket_addr_from(zerocopy::IntoBytes::as_bytes(&req[0].addr)),
        Some(group)
    );

    let ev = next(&ch);
    assert_eq!((ev.id, ev.uid), (member.handle(), member.uid()));
    assert_eq!(ev.name(), "RDMA_CM_EVENT_MULTICAST_JOIN");
    let EventKind::MulticastJoin(peer) = ev.kind else {
        panic!("{ev:?}")
    };
    assert_eq!((peer.qp_num, peer.qkey), (0xff_ffff, UDP_QKEY));
    let mapped = std::net::Ipv4Addr::new(239, 1, 2, 3).to_ipv6_mapped();
    assert_eq!(peer.ah_attr.grh.dgid, mapped.octets());
    assert_eq!(peer.to_ah_attr().dgid.raw(), mapped.octets());

    assert_eq!(id.leave_multicast(group).unwrap(), 1, "one event reported");
    assert_eq!(fake.live_memberships(), 0);
    assert!(id.memberships().is_empty());
    let sent = fake.command_codes().len();
    let err = id.leave_multicast(group).unwrap_err();
    assert_input(&err, Op::CmLeaveMulticast);
    assert_eq!(
        fake.command_codes().len(),
        sent,
        "nothing sent for a group not joined"
    );
}

#[test]
fn multicast_input_is_refused_before_the_write() {
    let (fake, ch) = channel();
    let group: std::net::SocketAddr = "239.1.2.3:0".parse().unwrap();
    let tcp = ch.create_id(PortSpace::Tcp).unwrap();
    tcp.bind("192.0.2.1:0".parse().unwrap()).unwrap();
    let udp = bound_udp_id(&ch);
    let sent = fake.command_codes().len();
    for (id, addr, why) in [
        (&tcp, group, "UDP-port-space"),
        (
            &udp,
            "192.0.2.9:0".parse().unwrap(),
            "not a multicast address",
        ),
        (
            &udp,
            "[2001:db8::1]:0".parse().unwrap(),
            "not a multicast address",
        ),
    ] {
        let err = id.join_multicast(addr, false).unwrap_err();
        assert_input(&err, Op::CmJoinMulticast);
        assert!(err.to_string().contains(why), "{err}");
    }
    assert_eq!(fake.command_codes().len(), sent, "nothing sent");

    udp.join_multicast(group, false).unwrap();
    let err = udp.join_multicast(group, true).unwrap_err();
    assert!(err.to_string().contains("already"), "{err}");
    assert_eq!(fake.live_memberships(), 1, "the second join sent nothing");

    // The kernel's refusals keep their errno: an id without a device.
    let unbound = ch.create_id(PortSpace::Udp).unwrap();
    let err = unbound.join_multicast(group, false).unwrap_err();
    assert_eq!(
        (err.op(), err.errno()),
        (Op::CmJoinMulticast, Some(Errno::INVAL))
    );
    assert!(unbound.memberships().is_empty());
}

#[test]
fn a_send_only_join_says_so_and_destroying_the_id_leaves_its_groups() {
    let (fake, ch) = channel();
    let id = bound_udp_id(&ch);
    let v6: std::net::SocketAddr = "[ff12::75:7662]:0".parse().unwrap();
    id.join_multicast("239.1.2.3:0".parse().unwrap(), false)
        .unwrap();
    id.join_multicast(v6, true).unwrap();
    let req = fake.requests::<sys::rdma_ucm_join_mcast>(sys::RDMA_USER_CM_CMD_JOIN_MCAST);
    assert_eq!((req[1].addr_size, req[1].join_flags), (28, 1));
    assert_eq!((fake.live_memberships(), fake.queued_events()), (2, 2));
    // Neither event read: the id's destroy leaves both groups and drops
    // their events, and the kernel counts none for the id.
    assert_eq!(id.destroy().unwrap(), 0);
    assert_eq!((fake.live_memberships(), fake.queued_events()), (0, 0));
    assert!(ch.try_get_event().unwrap().is_none());
}

#[test]
fn join_group_waits_for_the_join_and_leaves_again_on_failure() {
    let (fake, ch) = channel();
    let id = bound_udp_id(&ch);
    let group = "239.1.2.3:0".parse().unwrap();
    let (member, peer) = id.join_group(group, false, WAIT).unwrap();
    assert_eq!((peer.qp_num, peer.qkey), (0xff_ffff, UDP_QKEY));
    assert_eq!(id.memberships(), vec![member]);
    id.leave_multicast(group).unwrap();

    // Another id's event comes first: Unexpected, and the group is left.
    let other = ch.create_id(PortSpace::Tcp).unwrap();
    other
        .resolve_addr(None, "192.0.2.1:1".parse().unwrap(), 1000)
        .unwrap();
    let err = id.join_group(group, false, WAIT).unwrap_err();
    assert!(
        matches!(
            err,
            CmError::Unexpected {
                op: Op::CmJoinMulticast,
                event: "RDMA_CM_EVENT_ADDR_RESOLVED",
                ..
            }
        ),
        "{err}"
    );
    assert!(id.memberships().is_empty());
    assert_eq!(fake.live_memberships(), 0);
    // The kernel's refusal of the join itself: nothing to leave.
    fake.fail_next(sys::RDMA_USER_CM_CMD_JOIN_MCAST, Errno::NOMEM);
    let err = id.join_group(group, false, WAIT).unwrap_err();
    assert_eq!(err.errno(), Some(Errno::NOMEM), "{err}");
    assert!(id.memberships().is_empty());
}
