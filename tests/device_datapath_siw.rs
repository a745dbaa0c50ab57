//! siw0's data path as far as it goes without a connection: a siw QP
//! reaches RTS only through the iWARP connection manager, so this tests what
//! RESET, INIT and ERR allow. CQs and QPs are created over the path of the
//! configuration (native method over ioctl, write command over write()),
//! their rings are mapped at the sizes siw's answers name (seen in
//! /proc/self/maps), receives posted in INIT are flushed into the CQ by the
//! move to ERR, arming is a store that a flush completion answers with a
//! channel event, refused sends come back typed, a refused CQ destroy hands
//! back a working CQ, and every mapping and kernel object is gone at the
//! end. post_recv, poll and req_notify make no read or write system call
//! (per-thread counts of /proc/thread-self/io). rxe0 is covered by the
//! other device_datapath tests: noted and skipped here.

mod common;

use std::os::fd::AsRawFd;
use std::time::Duration;

use common::thread_io::read_write_calls;
use common::*;
use uverbs::cq::CreatePath;
use uverbs::error::{Errno, Op};
use uverbs::post::{Local, RecvRequest};
use uverbs::qp::{QpAttr, QpState};
use uverbs::transport::TransportKind;
use uverbs::wr::{Payload, PostError, RecvWr, Remote, SendFlags, SendOp, SendWr, WcStatus};
use uverbs::{AccessFlags, CompletionQueue, Context, Error, OwnedQp, QpInit, QpType, QueuePair};

/// Sizes of this process's mappings of a uverbs command file, sorted.
fn uverbs_mappings() -> Vec<usize> {
    let maps = std::fs::read_to_string("/proc/self/maps").expect("/proc/self/maps");
    let mut sizes: Vec<usize> = maps
        .lines()
        .filter(|l| l.contains("/dev/infiniband/uverbs"))
        .map(|l| {
            let range = l.split_whitespace().next().unwrap();
            let (a, b) = range.split_once('-').unwrap();
            usize::from_str_radix(b, 16).unwrap() - usize::from_str_radix(a, 16).unwrap()
        })
        .collect();
    sizes.sort_unstable();
    sizes
}

/// `want` added to `before`, sorted.
fn plus(before: &[usize], want: &[usize]) -> Vec<usize> {
    let mut v: Vec<usize> = before.iter().chain(want).copied().collect();
    v.sort_unstable();
    v
}

fn pages(bytes: usize) -> usize {
    bytes.div_ceil(page_size()) * page_size()
}

/// Runs `f` and asserts it made no read or write system call (the calls
/// the counting itself makes are measured first and subtracted).
fn without_read_or_write<T>(name: &str, what: &str, f: impl FnOnce() -> T) -> T {
    let Some(a) = read_write_calls() else {
        loud(&format!(
            "NOTE: {name}: no /proc/thread-self/io, {what} not counted"
        ));
        return f();
    };
    let b = read_write_calls().unwrap();
    let own = (b.0 - a.0, b.1 - a.1);
    let out = f();
    let c = read_write_calls().unwrap();
    assert_eq!(
        (c.0 - b.0, c.1 - b.1),
        own,
        "{name}: {what} made read/write system calls (the count's own: {own:?})"
    );
    out
}

fn expected_path(ctx: &Context) -> CreatePath {
    match ctx.transport_kind() {
        TransportKind::Write | TransportKind::WriteWithMethods => CreatePath::WriteCommand,
        _ => CreatePath::NativeMethod,
    }
}

/// [`on_each_device`] for siw only (anything else skipped loudly), under
/// [`serial`]: /proc/self/maps and the mapping counts are process-wide.
fn on_each_siw(test: &str, mut body: impl FnMut(&str, &Context, &HandleCounts)) {
    on_each_device(test, |name, dut, counts| {
        match driver(&dut) {
            Driver::Siw => {}
            Driver::Rxe => {
                return loud(&format!(
                    "NOTE: {name}: rxe's data path is tested by device_datapath_rc/ud/uc/owned"
                ))
            }
            Driver::Other => return loud(&format!("NOTE: {name}: not siw, skipped")),
        }
        let _serial = serial();
        body(name, &dut, counts)
    });
}

fn assert_post_refused(err: &Error, op: Op, index: usize, want: &PostError) {
    match err {
        Error::Post {
            op: got_op,
            index: got_index,
            why: source,
            ..
        } => {
            assert_eq!((*got_op, *got_index), (op, index), "{err}");
            assert_eq!(&**source, want, "{err}");
        }
        other => panic!("expected a refused post, got {other}"),
    }
    assert_eq!(err.errno(), Some(want.errno()), "{err}");
}

fn to_init(qp: &QueuePair) {
    let init = QpAttr::new()
        .state(QpState::Init)
        .pkey_index(0)
        .port(PORT)
        .access_flags(AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE);
    modify(qp, &init, "RESET->INIT");
}

fn rc_init<'a>(cq: &'a CompletionQueue, send: u32, recv: u32) -> QpInit<'a> {
    let mut init = QpInit::new(QpType::Rc, cq, cq);
    init.max_send_wr = send;
    init.max_recv_wr = recv;
    init.max_send_sge = 2;
    init.max_recv_sge = 2;
    init.max_inline = 64;
    init
}

/// Creation (path, rounded sizes, mapped bytes), refusals in RESET and
/// INIT, receives in INIT flushed by ERR with their ids and an event for
/// the in-memory arm, typed refusals of what siw cannot send, a refused CQ
/// destroy, and teardown back to the start.
#[test]
fn siw_cq_qp_rings_flush_and_teardown() {
    on_each_siw("siw_cq_qp_rings_flush_and_teardown", |name, ctx, counts| {
        let maps0 = uverbs_mappings();
        let channel = comp_channel(ctx, name);
        // 200 CQEs round up to 256: 256 × 32 + 8 bytes, three pages.
        let cq = ctx
            .create_cq(200, Some(&channel))
            .unwrap_or_else(|e| panic!("{name}: create_cq: {e}"));
        assert_eq!(cq.cqe(), 256, "{name}: siw rounds the CQ to a power of two");
        assert_eq!(cq.create_path(), expected_path(ctx), "{name}");
        assert_eq!(
            uverbs_mappings(),
            plus(&maps0, &[pages(256 * 32 + 8)]),
            "{name}: the CQ and its arming word are mapped"
        );
        counts.assert_extra_cq_qp(1, 0, "with a CQ");

        let pd = alloc_pd(ctx);
        // Only RC: refused before any system call, nothing created.
        for qp_type in [QpType::Uc, QpType::Ud] {
            let err = pd
                .create_qp(&QpInit::new(qp_type, &cq, &cq))
                .expect_err("siw has RC QPs only");
            assert_eq!(
                (err.op(), err.errno()),
                (Op::CreateQp, Some(Errno::OPNOTSUPP)),
                "{name}: {qp_type:?}: {err}"
            );
        }
        counts.assert_extra_cq_qp(1, 0, "after the refused UC and UD QPs");

        // 40 SQEs and 40 RQEs round up to 64: 64 × 120 and 64 × 112 bytes.
        let qp = pd
            .create_qp(&rc_init(&cq, 40, 40))
            .unwrap_or_else(|e| panic!("{name}: create_qp: {e}"));
        assert_eq!(qp.create_path(), expected_path(ctx), "{name}");
        assert_eq!(
            uverbs_mappings(),
            plus(
                &maps0,
                &[pages(256 * 32 + 8), pages(64 * 120), pages(64 * 112)]
            ),
            "{name}: the SQ and RQ are mapped"
        );
        counts.assert_extra_cq_qp(1, 1, "with a CQ and a QP");
        loud(&format!(
            "{name} over {}: QP {} caps {:?}, maps {:?}",
            ctx.transport_kind(),
            qp.qp_num(),
            qp.caps(),
            uverbs_mappings()
        ));

        let mut buf = anon(4096);
        let mr = fresh_mr(&pd, &mut buf, AccessFlags::LOCAL_WRITE);
        let addr = buf.as_ptr() as u64;
        let one = sge(addr, 64, &mr);
        let send = SendWr::new(1, SendOp::Send { imm: None }, Payload::Sges(&one));
        let wrong = |state| PostError::WrongState {
            op: "post_send",
            state,
        };
        // RESET: neither queue takes anything.
        // SAFETY: refused before anything is written (asserted).
        let err = unsafe { qp.post_send(&[send]) }.unwrap_err();
        assert_post_refused(&err, Op::PostSend, 0, &wrong(QpState::Reset));
        let recv = |wr_id| RecvWr { wr_id, sges: &one };
        // SAFETY: as above.
        let err = unsafe { qp.post_recv(&[recv(9)]) }.unwrap_err();
        assert_post_refused(
            &err,
            Op::PostRecv,
            0,
            &PostError::WrongState {
                op: "post_recv",
                state: QpState::Reset,
            },
        );

        to_init(&qp);
        // SAFETY: refused before anything is written (asserted).
        let err = unsafe { qp.post_send(&[send]) }.unwrap_err();
        assert_post_refused(&err, Op::PostSend, 0, &wrong(QpState::Init));

        // Three receives in INIT: written into the RQ, no system call.
        let ids = [0x5101, 0x5102, 0x5103];
        let wrs = ids.map(recv);
        without_read_or_write(name, "post_recv", || {
            // SAFETY: buf[..64] stays mapped and registered and is not
            // touched until the flushed completions are polled below.
            unsafe { qp.post_recv(&wrs) }
        })
        .unwrap_or_else(|e| panic!("{name}: post_recv in INIT: {e}"));

        // A CQ a QP uses cannot be destroyed; siw's ring was unmapped for
        // the attempt and comes back mapped and working.
        let cq = match cq.destroy() {
            Ok(d) => panic!("{name}: destroyed a CQ in use: {d:?}"),
            Err(e) => {
                assert_eq!(e.error.errno(), Some(Errno::BUSY), "{name}: {}", e.error);
                e.cq
            }
        };
        assert_eq!(
            uverbs_mappings(),
            plus(
                &maps0,
                &[pages(256 * 32 + 8), pages(64 * 120), pages(64 * 112)]
            ),
            "{name}: the CQ is mapped again after the refused destroy"
        );
        let mut wc = [Default::default(); 8];
        let n = without_read_or_write(name, "poll", || cq.poll(&mut wc)).unwrap();
        assert_eq!(n, 0, "{name}: nothing completed yet: {:?}", &wc[..n]);

        // Arm (a store), then ERR flushes the receives and raises the event.
        without_read_or_write(name, "req_notify", || cq.req_notify(false))
            .unwrap_or_else(|e| panic!("{name}: req_notify: {e}"));
        modify(&qp, &QpAttr::new().state(QpState::Err), "INIT->ERR");
        let flushed = wait_n::<3>(&cq, &format!("{name}: flushed receives"));
        for (c, id) in flushed.iter().zip(ids) {
            assert_eq!(c.wr_id(), id, "{name}: in posting order: {c:?}");
            assert_eq!(c.status(), WcStatus::WrFlushErr, "{name}: {c:?}");
            assert_eq!(
                c.opcode(),
                None,
                "{name}: an error carries no opcode: {c:?}"
            );
            assert_eq!(c.qp_num(), qp.qp_num(), "{name}: {c:?}");
        }
        let ready = poll_in(channel.as_raw_fd(), WAIT);
        assert_eq!(
            ready, 1,
            "{name}: the armed CQ raised no event within {WAIT:?}"
        );
        assert_eq!(channel.get_event().unwrap(), cq.event_id(), "{name}");
        cq.ack_events(1).unwrap();

        // In ERR the state allows a send: what siw cannot do is refused typed.
        let remote = Remote {
            addr: addr + 512,
            rkey: mr.rkey(),
        };
        let two = [one[0], sge(addr + 128, 64, &mr)[0]];
        let long = [0u8; 65];
        let long_segs: [&[u8]; 1] = [&long[..]];
        let cases: Vec<(SendOp, SendFlags, Payload<'_>, PostError)> = vec![
            (
                SendOp::Send { imm: Some(7) },
                SendFlags::SIGNALED,
                Payload::Sges(&one),
                PostError::NotSupported {
                    driver: "siw",
                    what: "SEND_WITH_IMM",
                },
            ),
            (
                SendOp::RdmaWrite {
                    remote,
                    imm: Some(7),
                },
                SendFlags::SIGNALED,
                Payload::Sges(&one),
                PostError::NotSupported {
                    driver: "siw",
                    what: "RDMA_WRITE_WITH_IMM",
                },
            ),
            (
                SendOp::CompareSwap {
                    remote,
                    compare: 1,
                    swap: 2,
                },
                SendFlags::SIGNALED,
                Payload::Sges(&one),
                PostError::NotSupported {
                    driver: "siw",
                    what: "ATOMIC_CMP_AND_SWP",
                },
            ),
            (
                SendOp::FetchAdd { remote, add: 1 },
                SendFlags::SIGNALED,
                Payload::Sges(&one),
                PostError::NotSupported {
                    driver: "siw",
                    what: "ATOMIC_FETCH_AND_ADD",
                },
            ),
            (
                SendOp::RdmaRead { remote },
                SendFlags::SIGNALED | SendFlags::FENCE,
                Payload::Sges(&one),
                PostError::NotSupported {
                    driver: "siw",
                    what: "a fenced RDMA_READ",
                },
            ),
            (
                SendOp::RdmaRead { remote },
                SendFlags::SIGNALED,
                Payload::Sges(&two),
                PostError::TooManySges {
                    op: "post_send",
                    n: 2,
                    max: 1,
                },
            ),
            (
                SendOp::Send { imm: None },
                SendFlags::SIGNALED,
                Payload::Inline(&long_segs),
                PostError::InlineTooLong { len: 65, max: 64 },
            ),
        ];
        for (op, flags, payload, want) in cases {
            let bad = SendWr::new(2, op, payload).flags(flags);
            // A valid request first: the batch is all or nothing, refused
            // at index 1.
            // SAFETY: refused before anything is written (asserted).
            let err = unsafe { qp.post_send(&[send, bad]) }.unwrap_err();
            assert_post_refused(&err, Op::PostSend, 1, &want);
        }
        let n = cq.poll(&mut wc).unwrap();
        assert_eq!(n, 0, "{name}: refused sends completed: {:?}", &wc[..n]);

        // Teardown: the QP's two rings go with it, then the CQ's.
        qp.destroy()
            .unwrap_or_else(|e| panic!("{name}: destroy_qp: {}", e.error));
        assert_eq!(
            uverbs_mappings(),
            plus(&maps0, &[pages(256 * 32 + 8)]),
            "{name}: the QP's rings are unmapped"
        );
        counts.assert_extra_cq_qp(1, 0, "after destroying the QP");
        let done = cq
            .destroy()
            .unwrap_or_else(|e| panic!("{name}: destroy_cq: {}", e.error));
        assert_eq!(done.comp_events_reported, 1, "{name}: {done:?}");
        assert_eq!(done.unacked(), 0, "{name}: {done:?}");
        assert_eq!(uverbs_mappings(), maps0, "{name}: every ring is unmapped");
        counts.assert_extra_cq_qp(0, 0, "after destroying the CQ");
        drop((mr, pd, channel));
    });
}

/// A QP without a receive queue (`max_recv_wr` 0): only its SQ is mapped
/// and a receive is refused as a full queue of 0; drop (not destroy) tears
/// it down, the CQ last, and nothing is left mapped.
#[test]
fn siw_qp_without_receive_queue_and_drop_teardown() {
    on_each_siw(
        "siw_qp_without_receive_queue_and_drop_teardown",
        |name, ctx, counts| {
            let maps0 = uverbs_mappings();
            let cq = ctx
                .create_cq(1, None)
                .unwrap_or_else(|e| panic!("{name}: create_cq: {e}"));
            assert_eq!(cq.cqe(), 1, "{name}");
            let pd = alloc_pd(ctx);
            let qp = pd
                .create_qp(&rc_init(&cq, 1, 0))
                .unwrap_or_else(|e| panic!("{name}: create_qp: {e}"));
            assert_eq!(
                uverbs_mappings(),
                plus(&maps0, &[pages(32 + 8), pages(120)]),
                "{name}: a one-CQE CQ and a one-SQE SQ, no RQ"
            );
            to_init(&qp);
            let mut buf = anon(4096);
            let mr = fresh_mr(&pd, &mut buf, AccessFlags::LOCAL_WRITE);
            let one = sge(buf.as_ptr() as u64, 64, &mr);
            // SAFETY: refused before anything is written (asserted).
            let err = unsafe {
                qp.post_recv(&[RecvWr {
                    wr_id: 1,
                    sges: &one,
                }])
            }
            .unwrap_err();
            assert_post_refused(
                &err,
                Op::PostRecv,
                0,
                &PostError::QueueFull {
                    op: "post_recv",
                    capacity: 0,
                },
            );
            counts.assert_extra_cq_qp(1, 1, "with a CQ and a QP");
            // The CQ handle first: the QP keeps it alive until it goes.
            drop(cq);
            counts.assert_extra_cq_qp(1, 1, "the QP keeps its CQ");
            drop(qp);
            counts.assert_extra_cq_qp(0, 0, "after dropping the QP");
            assert_eq!(uverbs_mappings(), maps0, "{name}: nothing left mapped");
            drop((mr, pd));
        },
    );
}

/// The safe layer on siw: OwnedQp takes a siw QP, owns receive buffers
/// posted in INIT, and its flush (to ERR, then polling the siw CQ) hands
/// every one back with WR_FLUSH_ERR, untouched.
#[test]
fn siw_owned_qp_flush_hands_back_receives() {
    on_each_siw(
        "siw_owned_qp_flush_hands_back_receives",
        |name, ctx, _counts| {
            let cq = ctx
                .create_cq(16, None)
                .unwrap_or_else(|e| panic!("{name}: create_cq: {e}"));
            let pd = alloc_pd(ctx);
            let qp = pd
                .create_qp(&rc_init(&cq, 4, 4))
                .unwrap_or_else(|e| panic!("{name}: create_qp: {e}"));
            let owned: OwnedQp<uverbs::BufferMr<Vec<u8>>> =
                OwnedQp::new(qp).unwrap_or_else(|e| panic!("{name}: OwnedQp::new: {}", e.error));
            owned
                .modify(
                    &QpAttr::new()
                        .state(QpState::Init)
                        .pkey_index(0)
                        .port(PORT)
                        .access_flags(AccessFlags::LOCAL_WRITE),
                )
                .unwrap_or_else(|e| panic!("{name}: RESET->INIT: {e}"));
            for i in 0..3u64 {
                let buf = pd
                    .reg_buffer(vec![i as u8; 256], AccessFlags::LOCAL_WRITE)
                    .unwrap_or_else(|e| panic!("{name}: reg_buffer: {}", e.error));
                owned
                    .post_recv(RecvRequest::new(i, Local::whole(buf)))
                    .unwrap_or_else(|e| panic!("{name}: post_recv: {}", e.error));
            }
            assert_eq!(owned.outstanding(), (0, 3));
            let mut done = Vec::new();
            owned
                .flush(Duration::from_secs(5), &mut done)
                .unwrap_or_else(|e| panic!("{name}: flush: {e} ({done:?})"));
            assert_eq!(done.len(), 3, "{name}: {done:?}");
            for (i, c) in done.into_iter().enumerate() {
                assert_eq!(c.wr_id, i as u64, "{name}");
                assert_eq!(c.status(), Some(WcStatus::WrFlushErr), "{name}: {c:?}");
                let buf = c.into_memory().unwrap();
                assert!(buf.buffer().iter().all(|&x| x == i as u8), "untouched");
            }
            assert_eq!(owned.outstanding(), (0, 0));
            drop((owned, cq, pd));
        },
    );
}
