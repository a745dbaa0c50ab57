//! Async owned posting (`uverbs::tokio`) on rxe0 and siw0: futures resolve
//! with their request's memory and completion, routed by each CQ's task to
//! the right QP and request among many; a dropped future's memory stays
//! with the QP until the device is done with it; a peer gone resolves every
//! pending future (nothing hangs); a forked child touches nothing. Every
//! wait is bounded and the kernel's counts are back at the end. On siw0
//! the QPs are connected through the iWARP connection manager.
#![cfg(feature = "tokio")]

#[macro_use]
mod common;

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::*;
use uverbs::post::{Ended, Local, PostSendError, RecvRequest, SendRequest};
use uverbs::qp::{QpAttr, QpState};
use uverbs::tokio::{AsyncCq, AsyncCqOptions, AsyncQp, CompletionFuture};
use uverbs::wr::{Remote, WcStatus};
use uverbs::{AccessFlags, BufferMr, Context, Error, OwnedQp, ProtectionDomain, QpInit, QpType};

/// The bound on every await of these tests.
const LIMIT: Duration = Duration::from_secs(20);

type Mem = BufferMr<Watched>;

/// `fut` within [`LIMIT`], or the test fails naming `what`.
async fn bounded<T>(what: &str, fut: impl Future<Output = T>) -> T {
    within(LIMIT, what, fut).await
}

fn reg(pd: &ProtectionDomain, bytes: Vec<u8>, drops: &Arc<AtomicUsize>) -> Mem {
    pd.reg_buffer(Watched::new(&bytes, drops), AccessFlags::LOCAL_WRITE)
        .unwrap_or_else(|e| panic!("reg_buffer: {}", e.error))
}

/// Connected async pairs: `n` QPs on CQ A, `n` on CQ B, QP i of A talking
/// to QP i of B.
struct Pairs {
    a: Vec<Arc<AsyncQp<Mem>>>,
    b: Vec<Arc<AsyncQp<Mem>>>,
    /// The cm connections (siw), kept while the QPs are used.
    links: Vec<Option<CmLink>>,
}

fn pairs(
    ctx: &Context,
    pd: &ProtectionDomain,
    name: &str,
    n: usize,
    options: &AsyncCqOptions,
) -> Pairs {
    let cq_a =
        AsyncCq::with_options(ctx, options).unwrap_or_else(|e| panic!("{name}: AsyncCq: {e}"));
    let cq_b =
        AsyncCq::with_options(ctx, options).unwrap_or_else(|e| panic!("{name}: AsyncCq: {e}"));
    let (mut a, mut b, mut links) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..n {
        let make = |cq: &AsyncCq| {
            let mut init = QpInit::new(QpType::Rc, cq.cq(), cq.cq());
            init.max_send_wr = 32;
            init.max_recv_wr = 32;
            let qp = pd
                .create_qp(&init)
                .unwrap_or_else(|e| panic!("{name}: create_qp: {e}"));
            OwnedQp::new(qp).unwrap_or_else(|e| panic!("{name}: OwnedQp::new: {e}"))
        };
        let (qa, qb) = (make(&cq_a), make(&cq_b));
        links.push(connect_qps(ctx, name, &qa, &qb, QP_ACCESS));
        let wrap = |qp, cq: &AsyncCq| {
            Arc::new(
                AsyncQp::new(qp, &[cq]).unwrap_or_else(|e| panic!("{name}: AsyncQp::new: {e}")),
            )
        };
        a.push(wrap(qa, &cq_a));
        b.push(wrap(qb, &cq_b));
    }
    // The QPs keep their CQs (and the CQs' tasks) alive.
    drop((cq_a, cq_b));
    Pairs { a, b, links }
}

/// What every test starts with: a runtime, a PD, and the count of
/// buffers dropped (see [`reg`]).
fn setup(ctx: &Context) -> (tokio::runtime::Runtime, ProtectionDomain, Arc<AtomicUsize>) {
    (
        tokio_runtime(),
        alloc_pd(ctx),
        Arc::new(AtomicUsize::new(0)),
    )
}

/// One connected async pair (A, B); keep the [`Pairs`] while they are used.
fn one_pair(
    ctx: &Context,
    pd: &ProtectionDomain,
    name: &str,
) -> (Pairs, Arc<AsyncQp<Mem>>, Arc<AsyncQp<Mem>>) {
    let p = pairs(ctx, pd, name, 1, &AsyncCqOptions::new(64));
    let (a, b) = (p.a[0].clone(), p.b[0].clone());
    (p, a, b)
}

/// The future of a request that must have been posted.
fn posted<T>(r: Result<CompletionFuture<Mem>, PostSendError<T>>) -> CompletionFuture<Mem> {
    r.unwrap_or_else(|e| panic!("post: {}", e.error()))
}

fn ok(
    result: Result<uverbs::post::Completed<Mem>, impl Into<Error>>,
    what: &str,
) -> uverbs::post::Completed<Mem> {
    let done = result.unwrap_or_else(|e| panic!("{what}: {}", e.into()));
    assert_eq!(done.status(), Some(WcStatus::Success), "{what}: {done:?}");
    done
}

/// SEND + RECV, WRITE and READ through futures: the memory comes back with
/// the caller's ids and the bytes the device moved.
#[test]
fn futures_resolve_with_memory_and_completion() {
    on_each_data_path_device_counted(
        "futures_resolve_with_memory_and_completion",
        |name, ctx, _counts| {
            let (rt, pd, drops) = setup(ctx);
            rt.block_on(async {
                let (p, a, b) = one_pair(ctx, &pd, name);
                let buf = reg(&pd, vec![0; 256], &drops);
                let msg = reg(&pd, (0..256).map(|i| i as u8).collect(), &drops);
                // Posted at the calls, in order: the receive before the
                // send (siw, iWARP, has no RNR: a SEND finding no receive
                // breaks the connection).
                let (got, sent) = bounded("recv + send", async {
                    tokio::join!(
                        posted(b.post_recv(uverbs::post::RecvRequest::new(41, Local::whole(buf)))),
                        posted(a.post_send(SendRequest::send(42, Local::whole(msg))))
                    )
                })
                .await;
                let sent = ok(sent, "send");
                assert_eq!(sent.wr_id, 42);
                let got = ok(got, "recv");
                assert_eq!(got.wr_id, 41);
                assert_eq!(got.completion().map(|wc| wc.byte_len()), Some(256));
                let landed = got.into_memory().expect("the receive buffer");
                assert!(
                    landed
                        .buffer()
                        .iter()
                        .enumerate()
                        .all(|(i, &x)| x == i as u8),
                    "{name}: received bytes"
                );

                // WRITE into the peer's buffer, READ it back into ours.
                let access =
                    AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ;
                let mut target = pd
                    .reg_remote_buffer(vec![0u8; 128], access)
                    .unwrap_or_else(|e| panic!("reg_remote_buffer: {}", e.error));
                let remote = Remote {
                    addr: target.addr(),
                    rkey: target.rkey(),
                };
                let src = reg(&pd, vec![0xab; 128], &drops);
                ok(
                    bounded("write", posted(a.write(Local::whole(src), remote))).await,
                    "write",
                );
                let mut written = [0u8; 128];
                target.copy_out(0, &mut written).expect("inside");
                assert!(written.iter().all(|&x| x == 0xab), "{name}: written");
                let dst = reg(&pd, vec![0; 128], &drops);
                let read = ok(
                    bounded("read", posted(a.read(Local::whole(dst), remote))).await,
                    "read",
                );
                let back = read.into_memory().expect("the read buffer");
                assert!(
                    back.buffer().iter().all(|&x| x == 0xab),
                    "{name}: read back"
                );
                assert_eq!((a.outstanding(), b.outstanding()), ((0, 0), (0, 0)));
                assert_eq!((a.waiting(), b.waiting()), (0, 0));
                drop((landed, target, back, p));
            });
            drop((rt, pd));
            assert_eq!(
                drops.load(Ordering::SeqCst),
                4, // received, sent, written from, read into
                "{name}: every buffer freed once"
            );
        },
    );
}

/// Four QP pairs on two CQs, each QP with 16 sends in flight at once from
/// as many tasks: every receive lands on its own QP with its own message,
/// every future resolves once. With busy polling too.
#[test]
fn concurrent_requests_and_shared_cqs_route_each_completion() {
    on_each_data_path_device_counted(
        "concurrent_requests_and_shared_cqs_route_each_completion",
        |name, ctx, _counts| {
            for busy in [0, 64] {
                let (rt, pd, drops) = setup(ctx);
                const QPS: usize = 4;
                const MSGS: usize = 16;
                rt.block_on(async {
                    let p = pairs(
                        ctx,
                        &pd,
                        name,
                        QPS,
                        &AsyncCqOptions::new(256).busy_poll(busy),
                    );
                    let mut recvs = tokio::task::JoinSet::new();
                    for (q, b) in p.b.iter().enumerate() {
                        for m in 0..MSGS {
                            let b = b.clone();
                            let buf = reg(&pd, vec![0; 64], &drops);
                            let id = (q * 1000 + m) as u64;
                            recvs.spawn(async move {
                                (
                                    q,
                                    id,
                                    posted(b.post_recv(uverbs::post::RecvRequest::new(
                                        id,
                                        Local::whole(buf),
                                    )))
                                    .await,
                                )
                            });
                        }
                    }
                    // Every receive posted before the first send (no RNR on siw).
                    bounded("the receives posted", async {
                        while p.b.iter().any(|b| b.outstanding().1 < MSGS) {
                            tokio::time::sleep(Duration::from_millis(1)).await;
                        }
                    })
                    .await;
                    let mut sends = tokio::task::JoinSet::new();
                    for (q, a) in p.a.iter().enumerate() {
                        for m in 0..MSGS {
                            let a = a.clone();
                            let msg = reg(&pd, vec![q as u8 + 1; 64], &drops);
                            let id = (q * 1000 + m) as u64;
                            sends.spawn(async move {
                                (
                                    id,
                                    posted(a.post_send(SendRequest::send(id, Local::whole(msg))))
                                        .await,
                                )
                            });
                        }
                    }
                    let mut sent = Vec::new();
                    while let Some(r) = bounded("sends", sends.join_next()).await {
                        let (id, result) = r.expect("send task");
                        let done = ok(result, &format!("{name}: send {id}"));
                        assert_eq!(done.wr_id, id);
                        sent.push(id);
                    }
                    sent.sort();
                    assert_eq!(sent.len(), QPS * MSGS, "{name}: busy {busy}");
                    let mut got = Vec::new();
                    while let Some(r) = bounded("recvs", recvs.join_next()).await {
                        let (q, id, result) = r.expect("recv task");
                        let done = ok(result, &format!("{name}: recv {id}"));
                        assert_eq!(done.wr_id, id);
                        let buf = done.into_memory().expect("the buffer");
                        assert!(
                            buf.buffer().iter().all(|&x| x == q as u8 + 1),
                            "{name}: QP {q} got another QP's message"
                        );
                        got.push(id);
                    }
                    got.sort();
                    assert_eq!(got, sent, "{name}: busy {busy}: one receive per send");
                    for qp in p.a.iter().chain(&p.b) {
                        assert_eq!((qp.outstanding(), qp.waiting()), ((0, 0), 0));
                    }
                    drop(p);
                });
                drop((rt, pd));
                assert_eq!(
                    drops.load(Ordering::SeqCst),
                    2 * QPS * MSGS,
                    "{name}: every buffer freed"
                );
            }
        },
    );
}

/// A receive whose future is dropped stays owned: the memory is not
/// freed until its message has come (then the task drops it), and a
/// dropped QP with a cancelled receive outstanding destroys the QP before
/// freeing it.
#[test]
fn cancelled_futures_leave_memory_with_the_qp() {
    on_each_data_path_device_counted(
        "cancelled_futures_leave_memory_with_the_qp",
        |name, ctx, counts| {
            let (rt, pd, drops) = setup(ctx);
            rt.block_on(async {
                let (p, a, b) = one_pair(ctx, &pd, name);
                for _ in 0..2 {
                    let buf = reg(&pd, vec![0; 64], &drops);
                    let cancelled = tokio::time::timeout(
                        Duration::from_millis(50),
                        posted(b.recv(Local::whole(buf))),
                    )
                    .await;
                    assert!(
                        cancelled.is_err(),
                        "{name}: a receive completed with nothing sent"
                    );
                }
                assert_eq!(b.outstanding(), (0, 2), "{name}: still owned");
                assert_eq!(b.waiting(), 2);
                assert_eq!(
                    drops.load(Ordering::SeqCst),
                    0,
                    "{name}: freed under the device"
                );
                // One message: the first receive completes; its memory is
                // dropped by the CQ's task now that the device is done.
                let msg = reg(&pd, vec![7; 64], &drops);
                ok(
                    bounded("send", posted(a.send(Local::whole(msg)))).await,
                    "send",
                );
                let freed = bounded("the task dropping the memory", async {
                    while drops.load(Ordering::SeqCst) < 2 {
                        tokio::time::sleep(Duration::from_millis(2)).await;
                    }
                });
                freed.await;
                assert_eq!(b.outstanding(), (0, 1), "{name}");
                assert_eq!(b.waiting(), 1);
                // The second is still the device's; dropping its QP destroys
                // the QP first, then frees it.
                counts.assert_extra_cq_qp(2, 2, "two async QPs");
                drop((a, b, p));
            });
            drop(rt);
            assert_eq!(
                drops.load(Ordering::SeqCst),
                3,
                "{name}: freed once the QP is gone"
            );
            drop(pd);
        },
    );
}

/// `destroy` resolves every waiting future with its request's memory: a
/// receive whose message came with its completion, one that nothing will
/// complete `Ended::Destroyed` with its untouched buffer; the memory of a
/// receive whose future was dropped is freed by the destroy, not before.
#[test]
fn destroy_resolves_every_waiting_future_with_its_memory() {
    on_each_data_path_device_counted(
        "destroy_resolves_every_waiting_future_with_its_memory",
        |name, ctx, counts| {
            let (rt, pd, drops) = setup(ctx);
            rt.block_on(async {
                let mut p = pairs(ctx, &pd, name, 1, &AsyncCqOptions::new(64));
                let a = p.a.pop().expect("one pair");
                let b = Arc::into_inner(p.b.pop().expect("one pair")).expect("B's only handle");
                let recv = |wr_id: u64, fill: u8| {
                    let buf = reg(&pd, vec![fill; 64], &drops);
                    posted(b.post_recv(RecvRequest::new(wr_id, Local::whole(buf))))
                };
                let (landed, pending, dropped) = (recv(10, 1), recv(11, 2), recv(12, 3));
                drop(dropped);
                let msg = reg(&pd, vec![7; 64], &drops);
                // On RC the send completes once B's receive has the bytes.
                let sent = ok(
                    bounded("send", posted(a.send(Local::whole(msg)))).await,
                    "send",
                );
                assert_eq!(drops.load(Ordering::SeqCst), 0, "{name}: nothing freed");
                counts.assert_extra_cq_qp(2, 2, "two async QPs");

                b.destroy()
                    .unwrap_or_else(|e| panic!("{name}: destroy: {e}"));
                assert_eq!(
                    drops.load(Ordering::SeqCst),
                    1,
                    "{name}: the dropped future's memory freed by the destroy"
                );
                let landed = ok(bounded("the landed receive", landed).await, "landed");
                assert_eq!(landed.wr_id, 10, "{name}");
                let buf = landed.into_memory().expect("the receive's buffer");
                assert!(buf.buffer().iter().all(|&x| x == 7), "{name}: the message");
                let pending = bounded("the pending receive", pending)
                    .await
                    .unwrap_or_else(|e| panic!("{name}: pending: {e}"));
                assert_eq!(
                    (pending.wr_id, pending.ended, pending.status()),
                    (11, Ended::Destroyed, None),
                    "{name}"
                );
                let buf2 = pending.into_memory().expect("the receive's buffer");
                assert!(buf2.buffer().iter().all(|&x| x == 2), "{name}: untouched");
                assert_eq!(
                    drops.load(Ordering::SeqCst),
                    1,
                    "{name}: the caller's to drop"
                );
                drop((buf, buf2, sent, a, p));
            });
            drop(rt);
            assert_eq!(
                drops.load(Ordering::SeqCst),
                4,
                "{name}: all freed at the end"
            );
            drop(pd);
        },
    );
}

/// siw leaves a send posted after the kernel moved the QP to ERR itself
/// (the peer disconnected) in its ring: its future stays pending, and
/// `destroy` resolves it with its buffer, `Ended::Destroyed`. Should the
/// send have gone in before siw's flush (not ordered against
/// DISCONNECTED), it resolves flushed instead. siw only (rxe flushes every
/// send posted in ERR).
#[test]
fn destroy_resolves_a_send_siw_never_completes() {
    let test = "destroy_resolves_a_send_siw_never_completes";
    on_each_siw_device(test, |name, ctx| {
        let (rt, pd, drops) = setup(ctx);
        rt.block_on(async {
            let mut p = pairs(ctx, &pd, name, 1, &AsyncCqOptions::new(64));
            let link = p
                .links
                .pop()
                .flatten()
                .expect("siw connects through the cm");
            let a = Arc::into_inner(p.a.pop().expect("one pair")).expect("A's only handle");
            // Blocking: the runtime's other worker serves the CQ tasks.
            link.b_disconnects(name);
            let buf = reg(&pd, vec![0x5a; 256], &drops);
            let mut sent = posted(a.send(Local::whole(buf)));
            let done = match tokio::time::timeout(Duration::from_secs(2), &mut sent).await {
                Ok(flushed) => {
                    loud(&format!(
                        "NOTE: {name}: the send went in before siw's flush"
                    ));
                    let done = flushed.unwrap_or_else(|e| panic!("{name}: flushed: {e}"));
                    assert_eq!(done.status(), Some(WcStatus::WrFlushErr), "{name}");
                    a.destroy()
                        .unwrap_or_else(|e| panic!("{name}: destroy: {e}"));
                    done
                }
                Err(_) => {
                    loud(&format!("NOTE: {name}: the send stays in siw's ring"));
                    assert_eq!(a.outstanding(), (1, 0), "{name}: still owned");
                    assert_eq!(drops.load(Ordering::SeqCst), 0, "{name}: nothing freed");
                    a.destroy()
                        .unwrap_or_else(|e| panic!("{name}: destroy: {e}"));
                    let done = bounded("the destroyed send", sent)
                        .await
                        .unwrap_or_else(|e| panic!("{name}: destroyed: {e}"));
                    assert_eq!(done.ended, Ended::Destroyed, "{name}");
                    done
                }
            };
            assert_eq!(done.wr_id, 0, "{name}");
            let buf = done.into_memory().expect("the send's buffer");
            assert!(buf.buffer().iter().all(|&x| x == 0x5a), "{name}: its bytes");
            assert_eq!(
                drops.load(Ordering::SeqCst),
                0,
                "{name}: the caller's to drop"
            );
            drop((buf, p, link));
        });
        drop(rt);
        assert_eq!(drops.load(Ordering::SeqCst), 1, "{name}: freed once");
        drop(pd);
    });
}

/// The peer's QP destroyed while futures wait: the send fails (retries
/// exhausted, or the connection reset on iWARP), the QP goes to ERR and
/// every pending receive is flushed: each future resolves, none hangs.
#[test]
fn a_peer_gone_resolves_every_pending_future() {
    on_each_data_path_device_counted(
        "a_peer_gone_resolves_every_pending_future",
        |name, ctx, _counts| {
            let (rt, pd, drops) = setup(ctx);
            rt.block_on(async {
                let mut p = pairs(ctx, &pd, name, 1, &AsyncCqOptions::new(64));
                let a = p.a[0].clone();
                let mut recvs = tokio::task::JoinSet::new();
                for i in 0..4 {
                    let a = a.clone();
                    let buf = reg(&pd, vec![0; 64], &drops);
                    recvs.spawn(async move {
                        posted(a.post_recv(uverbs::post::RecvRequest::new(i, Local::whole(buf))))
                            .await
                    });
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
                // The peer goes: its QP destroyed, its cm id with it.
                p.b.clear();
                p.links.clear();
                let msg = reg(&pd, vec![1; 64], &drops);
                let mut send = posted(a.send(Local::whole(msg)));
                // The device may give up by itself (retries exhausted, the
                // connection reset): 3 s. Otherwise the application's bound
                // ends the wait: ERR flushes the send with the receives.
                let siw = driver(ctx) == Driver::Siw;
                let sent = match tokio::time::timeout(Duration::from_secs(3), &mut send).await {
                    Ok(sent) => {
                        loud(&format!(
                            "NOTE: {name}: the device failed the send by itself"
                        ));
                        Some(sent)
                    }
                    Err(_) => {
                        loud(&format!(
                            "NOTE: {name}: no answer within 3 s: QP moved to ERR"
                        ));
                        a.modify(&QpAttr::new().state(QpState::Err))
                            .expect("modify to ERR");
                        match tokio::time::timeout(Duration::from_secs(5), &mut send).await {
                            Ok(sent) => Some(sent),
                            // siw: a send posted once the kernel had moved the
                            // QP to ERR (the peer's close) is never consumed:
                            // its doorbell flushes nothing for a user QP. The
                            // memory stays owned until the QP is destroyed.
                            Err(_) if siw => {
                                loud(&format!(
                                    "NOTE: {name}: siw never completes a send posted after \
                                     its QP went to ERR: cancelled, the memory stays owned"
                                ));
                                None
                            }
                            Err(_) => panic!("{name}: the flushed send: nothing within 5 s"),
                        }
                    }
                };
                match &sent {
                    Some(Ok(done)) => {
                        assert_ne!(done.status(), Some(WcStatus::Success), "{name}: {done:?}")
                    }
                    Some(Err(e)) => panic!("{name}: {e}"),
                    None => assert_eq!(a.outstanding().0, 1, "{name}: the send still owned"),
                }
                if a.state() != QpState::Err {
                    a.modify(&QpAttr::new().state(QpState::Err))
                        .expect("modify to ERR");
                }
                while let Some(r) = bounded("the pending receives", recvs.join_next()).await {
                    let done = r
                        .expect("recv task")
                        .unwrap_or_else(|e| panic!("{name}: {e}"));
                    assert_eq!(
                        done.status(),
                        Some(WcStatus::WrFlushErr),
                        "{name}: {done:?}"
                    );
                }
                let unconsumed = usize::from(sent.is_none());
                assert_eq!(a.outstanding(), (unconsumed, 0), "{name}");
                assert_eq!(a.waiting(), unconsumed, "{name}");
                drop(sent);
                drop(p);
            });
            drop((rt, pd));
            assert_eq!(drops.load(Ordering::SeqCst), 5, "{name}");
        },
    );
}

/// In a forked child an async post is refused at once (the QP is the
/// parent's) with its request back, and nothing of the parent's changes:
/// afterwards the parent's traffic runs as before.
#[test]
fn a_forked_child_touches_nothing() {
    on_each_data_path_device_counted("a_forked_child_touches_nothing", |name, ctx, _counts| {
        let (rt, pd, drops) = setup(ctx);
        let p = rt.block_on(async { pairs(ctx, &pd, name, 1, &AsyncCqOptions::new(64)) });
        let a = p.a[0].clone();
        let msg = reg(&pd, vec![3; 64], &drops);
        let code = in_child!(Duration::from_secs(10), {
            // Refused at the call: no runtime is needed to see it.
            match a.send(Local::whole(msg)) {
                Err(PostSendError::Refused(r))
                    if matches!(r.error, Error::ForeignProcess { .. }) =>
                {
                    if r.request.into_local().is_some() && a.outstanding() == (0, 0) {
                        0
                    } else {
                        2
                    }
                }
                _ => 1,
            }
        });
        assert_eq!(
            code, 0,
            "{name}: the child's post was not refused (1), or took the memory (2)"
        );
        rt.block_on(async {
            let b = p.b[0].clone();
            let buf = reg(&pd, vec![0; 64], &drops);
            let msg = reg(&pd, vec![4; 64], &drops);
            // Posted at the calls, in order: the receive before the send.
            let (got, sent) = bounded("recv + send after the fork", async {
                tokio::join!(
                    posted(b.recv(Local::whole(buf))),
                    posted(a.send(Local::whole(msg)))
                )
            })
            .await;
            ok(sent, "send");
            let got = ok(got, "recv");
            assert!(got.into_memory().unwrap().buffer().iter().all(|&x| x == 4));
            drop((a, p));
        });
        drop((rt, pd));
    });
}

/// A receive posted on the `OwnedQp` before it is wrapped (issue 38,
/// defect 1), under the caller's id 1, and a second one through the
/// `AsyncQp`, also id 1: `AsyncQp::new` refuses the QP, typed, with it
/// back; `adopt` gives the first receive a future of its own. A's first
/// SEND lands in the first receive and resolves the adopted future with
/// that buffer; the second lands in the second, whose future resolves with
/// its own. Before the fix the async layer's first key (1) was the
/// pre-wrap receive's id: the second receive's future resolved with the
/// first's buffer while its own was still queued, and the second message
/// was dropped.
#[test]
fn a_receive_posted_before_wrapping_resolves_its_own_future() {
    on_each_data_path_device_counted(
        "a_receive_posted_before_wrapping_resolves_its_own_future",
        |name, ctx, _counts| {
            let (rt, pd, drops) = setup(ctx);
            rt.block_on(async {
                let cq = AsyncCq::new(ctx, 64).unwrap_or_else(|e| panic!("{name}: AsyncCq: {e}"));
                let make = || {
                    let mut init = QpInit::new(QpType::Rc, cq.cq(), cq.cq());
                    init.max_send_wr = 8;
                    init.max_recv_wr = 8;
                    let qp = pd
                        .create_qp(&init)
                        .unwrap_or_else(|e| panic!("{name}: create_qp: {e}"));
                    OwnedQp::<Mem>::new(qp).unwrap_or_else(|e| panic!("{name}: OwnedQp::new: {e}"))
                };
                let (qa, qb) = (make(), make());
                let link = connect_qps(ctx, name, &qa, &qb, QP_ACCESS);
                qb.post_recv(RecvRequest::new(
                    1,
                    Local::whole(reg(&pd, vec![0; 64], &drops)),
                ))
                .unwrap_or_else(|e| panic!("{name}: post_recv before wrapping: {}", e.error));

                let refused = AsyncQp::new(qb, &[&cq]).unwrap_err();
                assert!(
                    matches!(refused.error, Error::InvalidInput { .. }),
                    "{name}: {}",
                    refused.error
                );
                let (b, mut earlier) = AsyncQp::adopt(refused.qp, &[&cq])
                    .unwrap_or_else(|e| panic!("{name}: AsyncQp::adopt: {e}"));
                let a = AsyncQp::new(qa, &[&cq])
                    .unwrap_or_else(|e| panic!("{name}: AsyncQp::new: {e}"));
                assert_eq!(earlier.len(), 1, "{name}");
                let first = earlier.remove(0);
                let second = posted(b.post_recv(RecvRequest::new(
                    1,
                    Local::whole(reg(&pd, vec![0; 64], &drops)),
                )));
                for fill in [0x11u8, 0x22] {
                    let msg = reg(&pd, vec![fill; 64], &drops);
                    ok(
                        bounded(
                            "a SEND",
                            posted(a.post_send(SendRequest::send(7, Local::whole(msg)))),
                        )
                        .await,
                        "SEND",
                    );
                }
                for (future, fill, what) in [
                    (first, 0x11, "the adopted receive"),
                    (second, 0x22, "the async receive"),
                ] {
                    let done = ok(bounded(what, future).await, what);
                    assert_eq!((done.wr_id, done.is_recv), (1, true), "{name}: {what}");
                    let buf = done.into_memory().expect("its buffer");
                    assert!(
                        buf.buffer().iter().all(|&x| x == fill),
                        "{name}: {what}: not its message"
                    );
                }
                assert_eq!((b.outstanding(), b.waiting()), ((0, 0), 0), "{name}");
                drop((a, b, link));
            });
            loud(&format!(
                "{name}: a receive posted before wrapping resolved its own adopted future; the async one its own"
            ));
        },
    );
}

/// `AsyncQp::modify(RESET)` on rxe (issue 38, defect 7): rxe empties both
/// queues with no completion; the waiting futures resolve in the call,
/// `Ended::Reset`, each with its own untouched buffer. Before the fix they
/// waited until the QP was destroyed. siw keeps its rings across RESET
/// (the futures wait, as documented): noted and skipped.
#[test]
fn reset_resolves_every_waiting_future_on_rxe() {
    on_each_data_path_device_counted(
        "reset_resolves_every_waiting_future_on_rxe",
        |name, ctx, _counts| {
            if driver(ctx) != Driver::Rxe {
                loud(&format!(
                    "NOTE: {name}: siw keeps its rings across RESET; rxe only"
                ));
                return;
            }
            let (rt, pd, drops) = setup(ctx);
            rt.block_on(async {
                let (p, _a, b) = one_pair(ctx, &pd, name);
                let futures: Vec<_> = (0..3u8)
                    .map(|i| {
                        posted(b.post_recv(RecvRequest::new(
                            u64::from(i),
                            Local::whole(reg(&pd, vec![i; 64], &drops)),
                        )))
                    })
                    .collect();
                b.modify(&QpAttr::new().state(QpState::Reset))
                    .unwrap_or_else(|e| panic!("{name}: RTS->RESET: {e}"));
                assert_eq!(
                    (b.outstanding(), b.waiting()),
                    ((0, 0), 0),
                    "{name}: resolved in the call"
                );
                for (i, future) in futures.into_iter().enumerate() {
                    let done = bounded("a reset receive", future)
                        .await
                        .unwrap_or_else(|e| panic!("{name}: {e}"));
                    assert_eq!(
                        (done.wr_id, done.ended, done.status()),
                        (i as u64, Ended::Reset, None),
                        "{name}"
                    );
                    let buf = done.into_memory().expect("its buffer");
                    assert!(
                        buf.buffer().iter().all(|&x| x == i as u8),
                        "{name}: untouched"
                    );
                }
                drop(p);
            });
            loud(&format!(
                "{name}: RESET resolved 3 waiting receives with their buffers"
            ));
        },
    );
}
