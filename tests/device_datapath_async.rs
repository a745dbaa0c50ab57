//! The context's async events on rxe0: a CQ overrun raises a typed CQ error
//! event naming that CQ, and a QP moved to SQD raises "SQ drained" naming
//! that QP; the descriptor is readable under poll(2) exactly while an event
//! is pending, every wait is bounded, and events are counted per object.
//!
//! rxe (Linux 6.12) raises no QP fatal, request-error or access-error event
//! (drivers/infiniband/sw/rxe raises only CQ_ERR, SQ_DRAINED,
//! QP_LAST_WQE_REACHED for SRQ QPs, SRQ_LIMIT_REACHED and port events): a
//! remote access error moves the QPs to ERR with error completions only,
//! so those kinds are covered by the host tests of the decoding alone.
//! On siw0 the QPs are connected through the iWARP connection manager: a
//! CQ overrun raises the same CQ error events (siw drops the CQE, raises
//! IB_EVENT_CQ_ERR); RTS -> SQD is siw's CLOSING: the connection drops, and
//! with nothing to flush siw raises no "SQ drained".

mod common;

use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use common::*;
use uverbs::device::{AsyncElement, AsyncEvent, AsyncEventKind, AsyncEvents};
use uverbs::qp::{QpAttr, QpState};
use uverbs::wr::{Remote, WcOpcode, WorkCompletion};
use uverbs::{Context, QpType};

/// Asserts no async event comes within `wait`; `what` says which
/// (the event that came, if any, is shown).
fn assert_no_async_event(events: &AsyncEvents, wait: Duration, what: &str) {
    assert!(
        !readable_within(events, wait),
        "{what}: {:?}",
        events.try_get_event()
    );
}

/// [`on_each_data_path_device`] with the context's async events opened,
/// then an RC pair connected (CQs of 8), for `body`.
fn on_each_pair_with_events(
    test: &str,
    mut body: impl FnMut(&str, &Context, &AsyncEvents, TwoQps),
) {
    on_each_data_path_device(test, |name, ctx| {
        let events = ctx.async_events().unwrap();
        let q = connected_rc_pair(ctx, name, 8, None);
        body(name, ctx, &events, q)
    });
}

/// True if `fd` is readable within `timeout` (poll(2)).
fn readable_within(fd: impl AsFd, timeout: Duration) -> bool {
    let mut fds = [rustix::event::PollFd::new(
        &fd,
        rustix::event::PollFlags::IN,
    )];
    let ts = rustix::event::Timespec {
        tv_sec: timeout.as_secs() as _,
        tv_nsec: timeout.subsec_nanos() as _,
    };
    loop {
        match rustix::event::poll(&mut fds, Some(&ts)) {
            Ok(n) => return n == 1,
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => panic!("poll on the async-event fd: {e}"),
        }
    }
}

/// Waits (poll, bounded by [`WAIT`]) for events until `want` of them
/// satisfy `pred`; returns every event read. Fails with what came.
fn wait_events(
    events: &AsyncEvents,
    what: &str,
    want: usize,
    pred: impl Fn(&AsyncEvent) -> bool,
) -> Vec<AsyncEvent> {
    let deadline = Instant::now() + WAIT;
    let mut seen = Vec::new();
    while seen.iter().filter(|e| pred(e)).count() < want {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() || !readable_within(events, left) {
            panic!("{what}: {want} events expected within {WAIT:?}, got {seen:?}");
        }
        if let Some(event) = events
            .try_get_event()
            .unwrap_or_else(|e| panic!("{what}: try_get_event: {e}"))
        {
            loud(&format!("{what}: async event {event:?}"));
            seen.push(event);
        }
    }
    seen
}

#[test]
fn a_cq_overrun_raises_a_cq_error_event_for_that_cq() {
    on_each_data_path_device(
        "a_cq_overrun_raises_a_cq_error_event_for_that_cq",
        |name, ctx| {
            let events = ctx
                .async_events()
                .unwrap_or_else(|e| panic!("{name}: async_events: {e}"));
            assert_no_async_event(
                &events,
                Duration::ZERO,
                &format!("{name}: the async fd is readable before anything happened"),
            );
            let pd = alloc_pd(ctx);
            let small = ctx
                .create_cq(1, None)
                .unwrap_or_else(|e| panic!("{name}: create_cq(1): {e}"));
            let cq_b = ctx.create_cq(8, None).unwrap();
            let qp_a = qp_on(&pd, QpType::Rc, &small, name);
            let qp_b = qp_on(&pd, QpType::Rc, &cq_b, name);
            let cm = connect_rc_qps(ctx, name, &qp_a, &qp_b);
            let room = small.cqe() as usize;
            let n = room + 2;
            loud(&format!(
                "{name}: CQ {} of {room} entries (event id {}), {n} signalled WRITEs",
                small.handle(),
                small.event_id()
            ));

            let mut buf = anon(8192);
            let mr = fresh_mr(&pd, &mut buf, RW_READ);
            let addr = buf.as_ptr() as u64;
            for (i, b) in buf[..64].iter_mut().enumerate() {
                *b = i as u8 | 0x80;
            }
            let src = sge(addr, 64, &mr);
            let writes: Vec<_> = (0..n as u64)
                .map(|i| {
                    let remote = Remote {
                        addr: addr + 4096 + 64 * i,
                        rkey: mr.rkey(),
                    };
                    signalled_write(100 + i, &src, remote)
                })
                .collect();
            // SAFETY: buf[..64] is only read and buf[4096..] not touched by
            // the program until the completions and events below.
            unsafe { qp_a.post_send(&writes) }.unwrap_or_else(|e| panic!("{name}: post_send: {e}"));

            // Every completion that found the CQ full raised one CQ error.
            let dropped = n - room;
            let is_overrun =
                |e: &AsyncEvent| e.kind == AsyncEventKind::CqErr && e.is_about_cq(&small);
            let seen = wait_events(&events, name, dropped, is_overrun);
            assert!(
                seen.iter().all(is_overrun),
                "{name}: other events: {seen:?}"
            );
            assert_eq!(
                seen[0],
                AsyncEvent {
                    kind: AsyncEventKind::CqErr,
                    element: AsyncElement::Cq(small.event_id())
                }
            );
            // No more than one per dropped completion.
            assert_no_async_event(
                &events,
                Duration::from_millis(100),
                &format!("{name}: more events than dropped completions"),
            );
            assert_eq!(events.try_get_event().unwrap(), None, "{name}");
            assert_eq!(small.async_events_reported(), dropped as u32, "{name}");
            assert_eq!(
                events.reported(AsyncElement::Cq(small.event_id())),
                dropped as u32
            );
            assert_eq!(cq_b.async_events_reported(), 0, "{name}");
            assert_eq!(qp_a.async_events_reported(), 0, "{name}");

            // The CQ holds the first `room` completions; every WRITE landed.
            let mut wc = vec![WorkCompletion::default(); n + 4];
            let got = small.poll(&mut wc).unwrap();
            assert_eq!(got, room, "{name}: {:?}", &wc[..got]);
            for (i, c) in wc[..got].iter().enumerate() {
                check(
                    c,
                    "a completion that fit",
                    WcOpcode::RdmaWrite,
                    &qp_a,
                    100 + i as u64,
                );
            }
            for i in 0..n {
                let at = 4096 + 64 * i;
                assert!(
                    buf[at..at + 64] == buf[..64],
                    "{name}: WRITE {i} did not land"
                );
            }
            // Another context on the device saw nothing: the events are per context.
            let other = ctx_reopen(ctx);
            let other_events = other.async_events().unwrap();
            assert!(!readable_within(&other_events, Duration::from_millis(20)));
            loud(&format!(
                "{name}: {dropped} CQ error events for CQ event id {}, fd {:?}",
                small.event_id(),
                events
            ));
            drop((qp_a, qp_b, small, cq_b, mr, pd, cm));
        },
    );
}

/// A fresh context of the same device as `ctx`, on the transport the
/// environment asks for.
fn ctx_reopen(ctx: &Context) -> Context {
    let name = ctx.device_name();
    let dev = uverbs::Device::by_name(name).unwrap_or_else(|e| panic!("{name}: {e}"));
    (*open(&dev)).clone()
}

/// RTS -> SQD with nothing outstanding: rxe reports "SQ drained" for the
/// QP, under the id the QP was created with; SQD -> RTS then works and
/// the QP sends again.
#[test]
fn moving_a_qp_to_sqd_reports_sq_drained_for_that_qp() {
    on_each_pair_with_events(
        "moving_a_qp_to_sqd_reports_sq_drained_for_that_qp",
        |name, _ctx, events, q| {
            assert_ne!(q.qp_a.event_id(), q.qp_b.event_id());
            let mut buf = anon(4096);
            let mr = fresh_mr(&q.pd, &mut buf, RW_READ);
            let addr = buf.as_ptr() as u64;
            let src = sge(addr, 32, &mr);
            let remote = remote_in(&buf, 2048, &mr);
            // SAFETY: buf stays mapped and untouched until the completion.
            unsafe { q.qp_a.post_send(&[signalled_write(1, &src, remote)]) }.unwrap();
            wait_checked(&q.cq_a, "WRITE before SQD", WcOpcode::RdmaWrite, &q.qp_a, 1);
            assert_no_async_event(
                events,
                Duration::ZERO,
                &format!("{name}: nothing pending yet"),
            );

            if let Some(link) = &q.cm {
                return siw_sqd_closes(&q, link, events, name);
            }
            modify(&q.qp_a, &QpAttr::new().state(QpState::Sqd), "RTS->SQD");
            let drained =
                |e: &AsyncEvent| e.kind == AsyncEventKind::SqDrained && e.is_about_qp(&q.qp_a);
            let seen = wait_events(events, name, 1, drained);
            assert_eq!(
                seen,
                [AsyncEvent {
                    kind: AsyncEventKind::SqDrained,
                    element: AsyncElement::Qp(q.qp_a.event_id())
                }],
                "{name}"
            );
            assert_eq!(q.qp_a.async_events_reported(), 1);
            assert_eq!(q.qp_b.async_events_reported(), 0);

            modify(&q.qp_a, &QpAttr::new().state(QpState::Rts), "SQD->RTS");
            // SAFETY: as above.
            unsafe { q.qp_a.post_send(&[signalled_write(2, &src, remote)]) }.unwrap();
            wait_checked(&q.cq_a, "WRITE after SQD", WcOpcode::RdmaWrite, &q.qp_a, 2);
            assert_no_async_event(
                events,
                Duration::from_millis(50),
                &format!("{name}: a stray event"),
            );
            loud(&format!(
                "{name}: SQ drained for QP {} (event id {})",
                q.qp_a.qp_num(),
                q.qp_a.event_id()
            ));
            drop((q.qp_a, q.qp_b, q.cq_a, q.cq_b, mr, q.pd));
        },
    );
}

/// siw's answer to RTS -> SQD (Linux 6.12, `siw_qp_nextstate_from_rts`):
/// SQD is siw's CLOSING, librdmacm's iWARP shutdown: the modify succeeds,
/// the connection is dropped (both ids hear DISCONNECTED) and, with the
/// send queue empty, nothing is flushed, so no "SQ drained" event comes
/// (siw raises it only from a flush that completed requests). The QP does
/// not come back to RTS: iWARP reaches RTS only through a new connection.
fn siw_sqd_closes(q: &TwoQps, link: &CmLink, events: &AsyncEvents, name: &str) {
    modify(&q.qp_a, &QpAttr::new().state(QpState::Sqd), "RTS->SQD");
    let cm = cm_events(link, Duration::from_secs(3));
    let state = common::kernel::reported_state(q.qp_a.refresh_state(), name);
    loud(&format!(
        "NOTE: {name}: siw: RTS->SQD is a close: cm events {cm:?}, QP A then {state:?}"
    ));
    assert_disconnected(link, &cm, name);
    assert_no_async_event(
        events,
        Duration::from_millis(200),
        &format!("{name}: siw raised an async event for an SQD with an empty SQ"),
    );
    assert_eq!(q.qp_a.async_events_reported(), 0, "{name}");
    // Measured (every configuration): the kernel reports SQD (siw's
    // CLOSING) after the close.
    if let Some(state) = state {
        assert_eq!(state, QpState::Sqd, "{name}: QP A after the close");
    }
    let err = q
        .qp_a
        .modify(&QpAttr::new().state(QpState::Rts))
        .unwrap_err();
    assert!(
        matches!(err, uverbs::Error::QpTransition { .. }),
        "{name}: {err}"
    );
    loud(&format!("{name}: back to RTS by hand refused: {err}"));
}

/// A local protection error (a WRITE out of an MR of another PD): on siw
/// (Linux 6.12, `siw_qp_sq_process`) the request completes with
/// LOC_QP_OP_ERR and siw raises QP_FATAL naming the requester's QP (and
/// drops the connection); rxe raises no QP event at all (module docs): the
/// completion is the only report.
#[test]
fn a_local_protection_error_raises_qp_fatal_on_siw_only() {
    on_each_pair_with_events(
        "a_local_protection_error_raises_qp_fatal_on_siw_only",
        |name, ctx, events, q| {
            let other_pd = alloc_pd(ctx);
            let mut mine = anon(4096);
            let mut foreign = anon(4096);
            let mr = fresh_mr(&q.pd, &mut mine, RW_READ);
            let foreign_mr = fresh_mr(&other_pd, &mut foreign, RW_READ);
            let bad = sge(foreign.as_ptr() as u64, 64, &foreign_mr);
            let remote = remote_in(&mine, 1024, &mr);
            // SAFETY: both buffers stay mapped and untouched by the program
            // until the completion below (and the QPs go before them).
            unsafe { q.qp_a.post_send(&[signalled_write(1, &bad, remote)]) }
                .unwrap_or_else(|e| panic!("{name}: post_send: {e}"));
            let wc = wait_one(
                &q.cq_a,
                &format!("{name}: the WRITE out of another PD's MR"),
            );
            loud(&format!("{name}: {wc:?}"));
            assert_ne!(wc.status(), uverbs::wr::WcStatus::Success, "{name}: {wc:?}");
            if q.iwarp() {
                assert_eq!(
                    wc.status(),
                    uverbs::wr::WcStatus::LocQpOpErr,
                    "{name}: {wc:?}"
                );
                let fatal =
                    |e: &AsyncEvent| e.kind == AsyncEventKind::QpFatal && e.is_about_qp(&q.qp_a);
                let seen = wait_events(events, name, 1, fatal);
                loud(&format!("{name}: siw's async events: {seen:?}"));
                assert!(
                    seen.iter().all(|e| e.is_about_qp(&q.qp_a)),
                    "{name}: events about other objects: {seen:?}"
                );
                assert_eq!(q.qp_b.async_events_reported(), 0, "{name}");
            } else {
                assert_no_async_event(
                    events,
                    Duration::from_millis(200),
                    &format!("{name}: rxe raised an async event"),
                );
                assert_eq!(q.qp_a.async_events_reported(), 0, "{name}");
            }
            assert!(
                mine[1024..1088].iter().all(|&x| x == 0),
                "{name}: the WRITE landed"
            );
            drop((q.qp_a, q.qp_b, mr, foreign_mr, other_pd));
        },
    );
}
