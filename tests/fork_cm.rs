//! A forked child holds copies of its parent's rdma_cm event channels and
//! ids (issue 18, defect 14, the cm part). Over the inherited file the
//! kernel answers its commands `EACCES`, but its `GET_EVENT` and `poll()`
//! would see the parent's events. Every cm entry point checks the process
//! first and answers [`Error::ForeignProcess`], as the verbs objects do,
//! sending and reading nothing; dropping the copies there destroys
//! nothing. On the fake cm: the child checks its own copy of the fake's
//! log and queue and reports through its exit code.

#[macro_use]
mod common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use uverbs::cm::command::GetEvent;
use uverbs::cm::{CmOption, ConnParam, EventChannel, EventKind, FakeCm, PortSpace, RejectReason};
use uverbs::error::{Errno, Op};
use uverbs::qp::QpState;
use uverbs::Error;

/// How long a child may run.
const LIMIT: Duration = Duration::from_secs(10);

/// `ForeignProcess` for `op`, with `EACCES` as its errno.
fn foreign<T: std::fmt::Debug>(result: Result<T, Error>, op: Op) {
    match result {
        Err(e @ Error::ForeignProcess { .. }) => {
            assert_eq!((e.op(), e.errno()), (op, Some(Errno::ACCESS)), "{e}");
        }
        other => panic!("{op}: expected ForeignProcess, got {other:?}"),
    }
}

#[test]
fn a_child_takes_no_event_and_sends_no_command_on_the_parents_channel() {
    let fake = Arc::new(FakeCm::new().unwrap());
    let ch = EventChannel::with_fake(fake.clone());
    let addr: SocketAddr = "192.0.2.1:7471".parse().unwrap();
    let listener = ch.create_id(PortSpace::Tcp).unwrap();
    listener.bind(addr).unwrap();
    listener.listen(4).unwrap();
    let client = ch.create_id(PortSpace::Tcp).unwrap();
    client.resolve_addr(None, addr, 2000).unwrap();
    // ADDR_RESOLVED is queued: the channel is readable.
    assert!(ch.poll_readable(Duration::ZERO).unwrap());
    let (sent, queued) = (fake.commands().len(), fake.queued_events());
    assert_eq!(queued, 1);

    let code = in_child!(LIMIT, {
        assert!(!ch.is_owned_by_this_process());
        // The event stays the parent's: no poll, no GET_EVENT, and no wait
        // (refused at once, not after the timeout).
        let start = Instant::now();
        foreign(ch.wait_event(LIMIT), Op::CmGetEvent);
        assert!(start.elapsed() < LIMIT / 2, "wait_event waited");
        foreign(ch.poll_readable(Duration::ZERO), Op::CmGetEvent);
        foreign(ch.get_event(), Op::CmGetEvent);
        // SAFETY: GET_EVENT's layouts are the kernel's; it is refused
        // before anything is sent.
        let raw = unsafe { ch.execute(&GetEvent) };
        assert_eq!(raw.map(|_| ()), Err(Errno::ACCESS));
        foreign(ch.try_get_event(), Op::CmGetEvent);
        foreign(ch.create_id(PortSpace::Tcp), Op::CmCreateId);

        // Every command of an id, refused before its input is looked at.
        foreign(client.bind(addr), Op::CmBind);
        foreign(client.resolve_addr(None, addr, 2000), Op::CmResolveAddr);
        foreign(client.resolve_route(2000), Op::CmResolveRoute);
        foreign(listener.listen(4), Op::CmListen);
        foreign(client.connect(&ConnParam::new(1)), Op::CmConnect);
        let too_long = ConnParam::new(1)
            .private_data(&[0; uverbs::cm::MAX_UD_CONNECT_PRIVATE_DATA])
            .unwrap();
        foreign(client.connect(&too_long), Op::CmConnect);
        foreign(client.accept(&ConnParam::new(1)), Op::CmAccept);
        foreign(client.establish(), Op::CmAccept);
        foreign(
            client.reject(RejectReason::ConsumerDefined, &[0; 512]),
            Op::CmReject,
        );
        foreign(client.disconnect(), Op::CmDisconnect);
        foreign(client.init_qp_attr(QpState::Init), Op::CmInitQpAttr);
        foreign(client.query_route(), Op::CmQuery);
        foreign(client.query_addr(), Op::CmQuery);
        foreign(client.query_gids(), Op::CmQuery);
        foreign(client.query_paths(), Op::CmQuery);
        foreign(client.node_guid(), Op::CmQuery);
        foreign(
            client.matching_devices_in(&[], std::path::Path::new("/nonexistent")),
            Op::CmQuery,
        );
        foreign(client.set_option(CmOption::Tos(1)), Op::CmSetOption);
        foreign(client.notify(0), Op::CmNotify);
        // A TCP id and a group not joined: the input errors come second.
        let group: SocketAddr = "239.1.2.3:0".parse().unwrap();
        foreign(client.join_multicast(group, false), Op::CmJoinMulticast);
        foreign(client.leave_multicast(group), Op::CmLeaveMulticast);
        foreign(client.destroy(), Op::CmDestroyId);
        drop(listener); // DESTROY_ID refused, silently

        // A channel the child opens itself is the child's.
        let own = EventChannel::with_fake(Arc::new(FakeCm::new().unwrap()));
        assert!(own.is_owned_by_this_process());
        own.create_id(PortSpace::Tcp).unwrap();

        let untouched = fake.commands().len() == sent && fake.queued_events() == queued;
        drop(ch);
        i32::from(!untouched)
    });
    assert_eq!(
        code, 0,
        "the child sent commands or took events (or an assertion failed: 99)"
    );

    // The parent's channel, ids and event are as they were.
    assert!(ch.is_owned_by_this_process());
    assert_eq!(fake.commands().len(), sent);
    let ev = ch.wait_event(LIMIT).unwrap().expect("the parent's event");
    assert!(matches!(ev.kind, EventKind::AddrResolved), "{ev:?}");
    assert_eq!(ev.uid, client.uid());
    client.destroy().unwrap();
    drop(listener);
    assert_eq!(fake.live_ids(), 0);
}
