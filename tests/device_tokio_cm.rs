//! The async connection manager (`uverbs::tokio::cm`) on rxe0 (over
//! 192.0.2.1) and siw0 (over 198.51.100.1; `common::cm::cm_addr`):
//!
//! - a client and a server on **one** async channel (so each side's
//!   futures read the other's events and route them): resolve, listen,
//!   accept and connect awaited together, both RC QPs moved by the futures
//!   to RTS (RoCE: by the cm's attributes; iWARP: by the kernel's CM,
//!   learnt on ESTABLISHED), a SEND across with plain `post_send` /
//!   `post_recv` and polling, then disconnect (the client's DREQ, the
//!   server's DREP) awaited; every id's kernel count of events is the
//!   channel's;
//! - cancellation: a pending accept and a pending connect dropped (by a
//!   timeout), then the listener: the kernel holds as many cm ids as
//!   before (`rdma res show cm_id`), no QP or CQ is left, and a
//!   connect after the dropped accept is still accepted;
//! - multicast: a membership's `MULTICAST_JOIN` has a route of its own
//!   (rxe0), siw0's `ENOSYS` leaves nothing routed.
//!
//! Every wait is bounded. With `UVERBS_REQUIRE_DEVICES` set (the VM) a
//! missing device, rdma_cm or address fails the test; otherwise it is
//! skipped loudly.

#![cfg(feature = "tokio")]

mod common;

use std::future::Future;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use common::cm::*;
use common::*;
use uverbs::cm::{ConnParam, EventKind, PortSpace, UDP_QKEY};
use uverbs::error::Errno;
use uverbs::qp::QpState;
use uverbs::tokio::cm::{AsyncCmId, AsyncEventChannel, CmError, Listener};
use uverbs::{CompletionQueue, Context, ProtectionDomain, QpType, QueuePair};

/// How long a future that must stay pending is given before it is dropped.
const PENDING: Duration = Duration::from_millis(300);

/// `fut` within [`CM_WAIT`], or the test fails naming `what`.
async fn bounded<T>(what: &str, fut: impl Future<Output = T>) -> T {
    within(CM_WAIT, what, fut).await
}

/// The cm ids the kernel holds (`rdma res show cm_id`), `None` (loudly;
/// failing in the VM) without the `rdma` tool. All of them, not this
/// process's: the `pid` it shows is the creating thread's id (a tokio
/// worker's, perhaps gone by the end), and in the VM nothing else makes
/// cm ids while this binary runs (its tests hold `serial`).
fn kernel_cm_ids(what: &str) -> Option<usize> {
    let out = match std::process::Command::new("rdma")
        .args(["res", "show", "cm_id"])
        .output()
    {
        Ok(out) if out.status.success() => out,
        other => {
            let why = format!("`rdma res show cm_id` failed: {other:?}");
            if required_prefixes().is_some() {
                panic!("{what}: {why}");
            }
            loud(&format!("NOTE: {what}: {why}: cm ids not counted"));
            return None;
        }
    };
    let text = String::from_utf8_lossy(&out.stdout);
    let n = text.lines().filter(|l| l.contains("cm-idn")).count();
    loud(&format!("{what}: {n} cm id(s):\n{text}"));
    Some(n)
}

/// Waits (up to [`CM_WAIT`]) until the kernel holds `want` cm ids again.
fn assert_cm_ids_back(want: Option<usize>, what: &str) {
    let Some(want) = want else { return };
    let deadline = Instant::now() + CM_WAIT;
    loop {
        let now = kernel_cm_ids(what).unwrap_or(want);
        if now == want {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: the kernel holds {now} cm ids, {want} at the start"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// [`on_each_cm_device`] under [`serial`]: `body` gets the kernel's count
/// of cm ids at the start; once it returns, no CQ or QP is left and the
/// count is back (`end` names that moment).
fn on_each_cm_device_counting_ids(
    test: &str,
    end: &str,
    mut body: impl FnMut(&str, &Context, Option<usize>),
) {
    let _serial = serial();
    on_each_cm_device(test, |name, ctx, counts| {
        let cm_ids = kernel_cm_ids(&format!("{name}: at the start"));
        body(name, ctx, cm_ids);
        counts.assert_extra_cq_qp(0, 0, end);
        assert_cm_ids_back(cm_ids, &format!("{name}: {end}"));
    });
}

/// A listener on `ch` (any port) and the address on `ctx`'s device that
/// reaches it.
fn listening(ch: &AsyncEventChannel, ctx: &Context, name: &str) -> (Listener, SocketAddr) {
    let listener = ch
        .listen("0.0.0.0:0".parse().unwrap(), 4)
        .unwrap_or_else(|e| panic!("{name}: listen: {e}"));
    let port = listener.local_addr().unwrap().port();
    let dst = format!("{}:{port}", cm_addr(ctx)).parse().unwrap();
    (listener, dst)
}

/// A client id resolved to `dst`, or `None` (after [`cm_unavailable`])
/// when the environment lacks the address.
async fn resolve(ch: &AsyncEventChannel, dst: SocketAddr, test: &str) -> Option<AsyncCmId> {
    match bounded(
        "resolve",
        ch.resolve(dst, Duration::from_millis(RESOLVE_MS.into())),
    )
    .await
    {
        Ok(id) => Some(id),
        Err(e)
            if e.errno() == Some(Errno::ADDRNOTAVAIL)
                || e.op() == uverbs::error::Op::CmResolveAddr =>
        {
            cm_unavailable(test, &format!("{dst}: {e}"));
            None
        }
        Err(e) => panic!("{test}: resolve {dst}: {e}"),
    }
}

/// An RC QP with a CQ of its own on `ctx`.
fn rc_qp(ctx: &Context, pd: &ProtectionDomain, what: &str) -> (CompletionQueue, QueuePair) {
    let cq = ctx
        .create_cq(16, None)
        .unwrap_or_else(|e| panic!("{what}: create_cq: {e}"));
    let qp = qp_on(pd, QpType::Rc, &cq, what);
    (cq, qp)
}

#[test]
fn tokio_cm_connect_accept_send_disconnect() {
    let test = "tokio_cm_connect_accept_send_disconnect";
    on_each_cm_device_counting_ids(test, "after dropping everything", |name, ctx, cm_ids| {
        tokio_runtime().block_on(async {
            let ch = AsyncEventChannel::open().unwrap_or_else(|e| panic!("{name}: open: {e}"));
            let (listener, dst) = listening(&ch, ctx, name);
            let Some(client) = resolve(&ch, dst, test).await else {
                return;
            };
            assert!(
                landed_on(&client, ctx),
                "{name}: the client's id is not on {name}"
            );
            if let (Some(start), Some(now)) = (cm_ids, kernel_cm_ids(&format!("{name}: resolved")))
            {
                // The count sees this process's ids: the listener's on
                // the device and the client's.
                assert!(
                    now > start,
                    "{name}: {now} cm ids with a listener and a client, {start} before"
                );
            }

            let pd = alloc_pd(ctx);
            let (cq_a, qp_a) = rc_qp(ctx, &pd, "client");
            let (cq_b, qp_b) = rc_qp(ctx, &pd, "server");
            let hello = ConnParam::new(qp_a.qp_num())
                .private_data(b"uverbs tokio hello")
                .unwrap();
            let welcome = ConnParam::new(qp_b.qp_num())
                .private_data(b"welcome")
                .unwrap();
            let server_side = async {
                let request = listener
                    .accept()
                    .await
                    .unwrap_or_else(|e| panic!("{name}: accept: {e}"));
                assert!(
                    request.private_data().starts_with(b"uverbs tokio hello"),
                    "{name}: {:?}",
                    request.private_data()
                );
                assert!(landed_on(request.id(), ctx), "{name}: the request's id");
                request
                    .accept(&qp_b, welcome)
                    .await
                    .unwrap_or_else(|e| panic!("{name}: accept the request: {e}"))
            };
            let client_side = async {
                client
                    .connect(&qp_a, hello)
                    .await
                    .unwrap_or_else(|e| panic!("{name}: connect: {e}"))
            };
            let ((client, response), (server, _)) = bounded("connect and accept", async {
                tokio::join!(client_side, server_side)
            })
            .await;
            assert!(
                response.private_data.starts_with(b"welcome"),
                "{name}: {:?}",
                response.private_data
            );
            assert_eq!(
                (qp_a.state(), qp_b.state()),
                (QpState::Rts, QpState::Rts),
                "{name}"
            );
            loud(&format!(
                "{name}: async cm connection up: QP {} <-> QP {} ({:?})",
                qp_a.qp_num(),
                qp_b.qp_num(),
                qp_a.transport_type()
            ));

            // A SEND over it, with the blocking data path.
            send_64_lands(
                &pd,
                (&qp_a, &cq_a),
                (&qp_b, &cq_b),
                0x5a,
                name,
                "the async cm connection",
            );

            // The client's DREQ; the server hears it and answers (DREP).
            bounded("disconnect", async {
                tokio::join!(
                    async {
                        client
                            .disconnect()
                            .await
                            .unwrap_or_else(|e| panic!("{name}: client disconnect: {e}"))
                    },
                    async {
                        let ev = server.next_event().await.unwrap();
                        assert!(matches!(ev.kind, EventKind::Disconnected), "{name}: {ev:?}");
                        server
                            .disconnect()
                            .await
                            .unwrap_or_else(|e| panic!("{name}: server disconnect: {e}"));
                    }
                )
            })
            .await;
            drop((qp_a, qp_b, cq_a, cq_b));
            // RoCE's TIMEWAIT_EXITs come afterwards: let them be read (or
            // not) and check the counts agree either way.
            tokio::time::sleep(Duration::from_millis(200)).await;
            let _ = (client.try_next_event(), server.try_next_event());
            for (id, side) in [(client, "client"), (server, "server")] {
                let received = id.events_received();
                let reported = id
                    .destroy()
                    .unwrap_or_else(|e| panic!("{name}: destroy {side}: {e}"));
                loud(&format!("{name}: {side}: {reported} events reported"));
                assert_eq!(
                    reported, received,
                    "{name}: {side}: the kernel's count is the channel's"
                );
            }
            listener.destroy().unwrap();
            assert_eq!(ch.routed_ids(), 0);
            assert_eq!(ch.discarded_events(), 0, "{name}: every event had its id");
            drop(pd);
        });
    });
}

#[test]
fn tokio_cm_dropped_accept_and_connect_leak_nothing() {
    let test = "tokio_cm_dropped_accept_and_connect_leak_nothing";
    on_each_cm_device_counting_ids(test, "after the cancellations", |name, ctx, cm_ids| {
        tokio_runtime().block_on(async {
            let ch = AsyncEventChannel::open().unwrap_or_else(|e| panic!("{name}: open: {e}"));
            let (listener, dst) = listening(&ch, ctx, name);

            // 1. An accept nobody connects to, dropped.
            assert!(
                tokio::time::timeout(PENDING, listener.accept())
                    .await
                    .is_err(),
                "{name}: a request out of nowhere"
            );

            // 2. A connect nobody accepts, dropped: its id is destroyed.
            let Some(client) = resolve(&ch, dst, test).await else {
                return;
            };
            let pd = alloc_pd(ctx);
            let (cq_a, qp_a) = rc_qp(ctx, &pd, "client");
            let param = ConnParam::new(qp_a.qp_num());
            let pending = tokio::time::timeout(PENDING, client.connect(&qp_a, param)).await;
            assert!(
                pending.is_err(),
                "{name}: connected without an accept: {pending:?}"
            );
            assert_eq!(ch.routed_ids(), 1, "{name}: the listener's route alone");
            drop((qp_a, cq_a));

            // 3. The request of the dropped connect (read by now, or
            // still in the kernel) goes with the listener.
            let with_listener = kernel_cm_ids(&format!("{name}: after the dropped connect"));
            if let (Some(start), Some(now)) = (cm_ids, with_listener) {
                assert!(now > start, "{name}: the listener's ids are not counted");
            }
            drop(listener);
            assert_eq!(ch.routed_ids(), 0);

            // 4. After all that, a connect to a new listener still gets
            // through on the same channel.
            let (listener, dst) = listening(&ch, ctx, name);
            let client = resolve(&ch, dst, test)
                .await
                .expect("resolved once already");
            let (cq_a, qp_a) = rc_qp(ctx, &pd, "client 2");
            let (cq_b, qp_b) = rc_qp(ctx, &pd, "server 2");
            let (c, s) = bounded("connect after the cancellations", async {
                tokio::join!(
                    client.connect(&qp_a, ConnParam::new(qp_a.qp_num())),
                    async {
                        let request = listener.accept().await?;
                        request.accept(&qp_b, ConnParam::new(qp_b.qp_num())).await
                    }
                )
            })
            .await;
            let (client, _) = c.unwrap_or_else(|e| panic!("{name}: connect: {e}"));
            let (server, _) = s.unwrap_or_else(|e: CmError| panic!("{name}: accept: {e}"));
            assert_eq!(
                (qp_a.state(), qp_b.state()),
                (QpState::Rts, QpState::Rts),
                "{name}"
            );
            // Torn down without a disconnect: dropping destroys the ids.
            drop((client, server, listener));
            drop((qp_a, qp_b, cq_a, cq_b, pd));
            assert_eq!(ch.routed_ids(), 0);
        });
    });
}

/// rxe0: a UDP id on the async channel joins an IPv4 group; the
/// membership's `MULTICAST_JOIN` reaches `next_multicast_event`, not the
/// id's stream, and is the kernel's answer (Q_Key, QP 0xFFFFFF, the group
/// as GID); leaving ends its route, dropping the id leaves a second join.
/// siw0: the kernel's `ENOSYS`, and nothing stays routed.
#[test]
fn tokio_cm_multicast_join_has_a_route_of_its_own() {
    let test = "tokio_cm_multicast_join_has_a_route_of_its_own";
    on_each_cm_device_counting_ids(test, "after leaving", |name, ctx, _| {
        tokio_runtime().block_on(async {
            let ch = AsyncEventChannel::open().unwrap_or_else(|e| panic!("{name}: open: {e}"));
            let id = ch.create_id(PortSpace::Udp).unwrap();
            let local: SocketAddr = format!("{}:0", cm_addr(ctx)).parse().unwrap();
            id.bind(local).unwrap();
            let group = SocketAddr::from(([239, 117, 118, 101], 0));
            let joined = id.join_multicast(group, false);
            if driver(ctx) == Driver::Siw {
                let err = joined.expect_err("iWARP has no multicast");
                assert_eq!(err.errno(), Some(Errno::NOSYS), "{name}: {err}");
                drop(id);
                return assert_eq!(ch.routed_ids(), 0, "{name}");
            }
            let member = joined.unwrap_or_else(|e| panic!("{name}: join_multicast: {e}"));
            let ev = bounded("the join", id.next_multicast_event(&member))
                .await
                .unwrap_or_else(|e| panic!("{name}: next_multicast_event: {e}"));
            let EventKind::MulticastJoin(peer) = ev.kind else {
                panic!("{name}: {ev:?}")
            };
            assert_eq!((peer.qp_num, peer.qkey), (0xff_ffff, UDP_QKEY), "{name}");
            let mapped = std::net::Ipv4Addr::new(239, 117, 118, 101).to_ipv6_mapped();
            assert_eq!(peer.to_ah_attr().dgid.raw(), mapped.octets(), "{name}");
            assert!(
                id.try_next_event().unwrap().is_none(),
                "{name}: not the id's"
            );
            assert_eq!(id.leave_multicast(group).unwrap(), 1, "{name}");
            assert_eq!(ch.routed_ids(), 1, "{name}: the id's route only");
            id.join_multicast(group, false).unwrap();
            drop(id);
            assert_eq!((ch.routed_ids(), ch.discarded_events()), (0, 0), "{name}");
        });
    });
}
