//! RC traffic on rxe0: two queue pairs of one context, connected to each
//! other over the port's RoCE v2 GID (loopback), move bytes with SEND,
//! RDMA WRITE and RDMA READ; every completion's fields and every byte are
//! checked, every wait is bounded, and the kernel's CQ, QP, MR and PD
//! counts are back where they started at the end. On siw0 the two QPs are
//! connected through the iWARP connection manager (`common::rc::cm_connect`:
//! a siw QP reaches RTS no other way) and carry the same traffic.

mod common;

use std::os::fd::AsRawFd;
use std::time::Duration;

use common::*;
use uverbs::qp::{Mtu, QpAttr, QpState};
use uverbs::wr::{Payload, RecvWr, Remote, SendOp, SendWr, WcOpcode};
use uverbs::{AccessFlags, QpInit, QpType};

#[test]
fn rc_send_write_read_between_two_qps_of_one_context() {
    on_each_data_path_device_counted(
        "rc_send_write_read_between_two_qps_of_one_context",
        |name, ctx, counts| {
            loud(&format!(
                "{name} over {}: {}",
                ctx.transport_kind(),
                match driver(ctx) {
                    Driver::Siw => "connected through the iWARP cm".to_string(),
                    _ => {
                        let (gid, mtu) = roce_path(ctx, name);
                        format!("GID index {GID_INDEX} = {gid:?}, path MTU {mtu:?}")
                    }
                }
            ));

            let q = connected_rc_pair(ctx, name, 32, None);
            let TwoQps {
                qp_a,
                qp_b,
                cq_a,
                cq_b,
                pd,
                cm,
            } = q;
            loud(&format!(
                "{name}: QP A qpn {} caps {:?}, QP B qpn {} caps {:?}, CQs of {} and {} entries",
                qp_a.qp_num(),
                qp_a.caps(),
                qp_b.qp_num(),
                qp_b.caps(),
                cq_a.cqe(),
                cq_b.cqe()
            ));
            counts.assert_extra_cq_qp(2, 2, "with two CQs and two QPs");

            const LEN: usize = 16 << 10;
            let mut a_buf = anon(LEN);
            let mut b_buf = anon(LEN);
            let a_mr = fresh_mr(&pd, &mut a_buf, RW_READ);
            let b_mr = fresh_mr(&pd, &mut b_buf, RW_READ);
            let a_addr = a_buf.as_ptr() as u64;
            let b_addr = b_buf.as_ptr() as u64;

            // SEND of 64 bytes into a posted receive.
            for (i, byte) in a_buf[..64].iter_mut().enumerate() {
                *byte = 0xa0 ^ i as u8;
            }
            // SAFETY: b_buf[..64] stays mapped and registered and is not touched
            // until the receive's completion is polled below.
            unsafe { post_recv_into(&qp_b, 0xb0b, &b_buf[..64], &b_mr, name) };
            let send_sge = sge(a_addr, 64, &a_mr);
            let send = signalled(0xa5e, SendOp::Send { imm: None }, &send_sge);
            // SAFETY: a_buf[..64] is only read by the device and not written
            // until the send's completion is polled below.
            unsafe { qp_a.post_send(&[send]) }
                .unwrap_or_else(|e| panic!("{name}: post_send SEND: {e}"));
            wait_checked(&cq_a, "SEND, sender", WcOpcode::Send, &qp_a, 0xa5e);
            let wc = wait_checked(&cq_b, "SEND, receiver", WcOpcode::Recv, &qp_b, 0xb0b);
            assert_eq!(wc.byte_len(), 64, "{wc:?}");
            assert_eq!(&b_buf[..64], &a_buf[..64], "{name}: the SEND's bytes");

            // RDMA WRITE of 4 KiB into the peer's MR at offset 4 KiB.
            let (src, dst, len) = (4096usize, 4096usize, 4096usize);
            for (i, byte) in a_buf[src..src + len].iter_mut().enumerate() {
                *byte = (i * 7 + 3) as u8;
            }
            let src_sge = sge(a_addr + src as u64, len, &a_mr);
            let remote = Remote {
                addr: b_addr + dst as u64,
                rkey: b_mr.rkey(),
            };
            let write = signalled_write(0x3417e, &src_sge, remote);
            // SAFETY: the source is only read, the target (b_buf) not touched by
            // the program, until the completion below.
            unsafe { qp_a.post_send(&[write]) }
                .unwrap_or_else(|e| panic!("{name}: post_send WRITE: {e}"));
            wait_checked(&cq_a, "RDMA WRITE", WcOpcode::RdmaWrite, &qp_a, 0x3417e);
            assert!(
                b_buf[dst..dst + len] == a_buf[src..src + len],
                "{name}: the RDMA WRITE's 4 KiB did not land"
            );
            assert!(
                b_buf[64..dst].iter().all(|&b| b == 0),
                "{name}: bytes before the target touched"
            );

            // RDMA READ of those 4 KiB back into A at offset 8 KiB.
            let back = 8192usize;
            let back_sge = sge(a_addr + back as u64, len, &a_mr);
            let read = signalled(0x7ead, SendOp::RdmaRead { remote }, &back_sge);
            // SAFETY: a_buf[back..back + len] is not touched until the completion.
            unsafe { qp_a.post_send(&[read]) }
                .unwrap_or_else(|e| panic!("{name}: post_send READ: {e}"));
            let wc = wait_checked(&cq_a, "RDMA READ", WcOpcode::RdmaRead, &qp_a, 0x7ead);
            assert_eq!(wc.byte_len(), len as u32, "{wc:?}");
            assert!(
                a_buf[back..back + len] == b_buf[dst..dst + len],
                "{name}: the RDMA READ's 4 KiB"
            );
            assert_no_completion(&cq_a, &format!("{name}: a stray completion on A"));
            assert_no_completion(&cq_b, &format!("{name}: a stray completion on B"));
            loud(&format!(
                "{name}: SEND 64 B, RDMA WRITE 4 KiB, RDMA READ 4 KiB: all landed"
            ));

            // The CQs outlive the QPs whatever the drop order.
            drop(cq_a);
            drop(cq_b);
            counts.assert_extra_cq_qp(2, 2, "CQs dropped while QPs use them");
            drop((qp_a, qp_b, a_mr, b_mr, pd, cm));
            counts.assert_extra_cq_qp(0, 0, "after dropping everything");
        },
    );
}

/// Asserts a send refused before the ring in `state`: the first request
/// (index 0), EINVAL.
fn assert_send_refused(err: &uverbs::Error, state: &str) {
    assert!(
        matches!(err, uverbs::Error::Post { index: 0, .. }),
        "{state}: {err}"
    );
    assert_eq!(
        err.errno(),
        Some(uverbs::error::Errno::INVAL),
        "{state}: {err}"
    );
}

/// Posting sends on a QP in RESET or INIT is refused, typed, with nothing
/// queued; receives in RESET too. The QP then still works normally
/// (nothing stale in its rings).
#[test]
fn posting_in_a_state_that_forbids_it_is_refused_before_the_ring() {
    on_each_data_path_device(
        "posting_in_a_state_that_forbids_it_is_refused_before_the_ring",
        |name, ctx| {
            let pd = alloc_pd(ctx);
            let cq = ctx.create_cq(8, None).unwrap();
            let qp = pd.create_qp(&QpInit::new(QpType::Rc, &cq, &cq)).unwrap();
            let wr = SendWr::new(1, SendOp::Send { imm: None }, Payload::Inline(&[]));
            // SAFETY: refused before anything is queued (an empty inline payload
            // names no memory anyway).
            let err = unsafe { qp.post_send(&[wr]) }.unwrap_err();
            assert_send_refused(&err, "RESET");
            let recv = RecvWr {
                wr_id: 2,
                sges: &[],
            };
            // SAFETY: refused before anything is queued.
            let err = unsafe { qp.post_recv(&[recv]) }.unwrap_err();
            assert!(err.to_string().contains("Reset"), "{err}");
            // A transition the table refuses sends nothing and changes nothing.
            let err = qp.modify(&QpAttr::new().state(QpState::Rts)).unwrap_err();
            assert!(matches!(err, uverbs::Error::QpTransition { .. }), "{err}");
            assert_eq!(qp.state(), QpState::Reset);
            loud(&format!("{name}: refused as expected: {err}"));
            // INIT: sends are still refused; receives may be posted (as in
            // rdma-core), so a later RTR can take them.
            let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;
            let dest = QpAttr::roce_dest(uverbs::device::Gid::default(), GID_INDEX as u8, 1, PORT);
            let (step, init) = rc_to_rts(access, PORT, Mtu::Mtu1024, 0, dest)
                .into_iter()
                .next()
                .expect("the RESET->INIT step");
            modify(&qp, &init, step);
            assert_eq!(qp.state(), QpState::Init);
            // SAFETY: refused before anything is queued.
            let err = unsafe { qp.post_send(&[wr]) }.unwrap_err();
            assert_send_refused(&err, "INIT");
            let recv = RecvWr {
                wr_id: 3,
                sges: &[],
            };
            // SAFETY: an empty SGE list names no memory.
            unsafe { qp.post_recv(&[recv]) }
                .unwrap_or_else(|e| panic!("{name}: post_recv in INIT: {e}"));
            loud(&format!(
                "{name}: in INIT a send is refused ({err}), a receive accepted"
            ));
            let _ = (&cq, &pd);
        },
    );
}

/// A CQ made with a completion channel and armed with `req_notify` raises
/// one event there when a completion arrives: the channel's descriptor
/// becomes readable (waited for with poll(2), bounded) and `get_event`
/// names the CQ.
#[test]
fn an_armed_cq_reports_a_completion_on_its_channel() {
    on_each_data_path_device(
        "an_armed_cq_reports_a_completion_on_its_channel",
        |name, ctx| {
            let channel = comp_channel(ctx, name);
            let q = connected_rc_pair(ctx, name, 8, Some(&channel));
            q.cq_a
                .req_notify(false)
                .unwrap_or_else(|e| panic!("{name}: req_notify: {e}"));

            let mut buf = anon(4096);
            let mr = fresh_mr(&q.pd, &mut buf, RW_READ);
            let addr = buf.as_ptr() as u64;
            let src = sge(addr, 256, &mr);
            let remote = remote_in(&buf, 1024, &mr);
            let write = signalled_write(9, &src, remote);
            // SAFETY: buf stays mapped and untouched until the completion below.
            unsafe { q.qp_a.post_send(&[write]) }
                .unwrap_or_else(|e| panic!("{name}: post_send: {e}"));

            let ready = poll_in(channel.as_raw_fd(), WAIT);
            assert_eq!(
                ready,
                1,
                "{name}: no completion event within {WAIT:?} (poll: {ready}, {})",
                std::io::Error::last_os_error()
            );
            let id = channel
                .get_event()
                .unwrap_or_else(|e| panic!("{name}: get_event: {e}"));
            assert_eq!(
                id,
                q.cq_a.event_id(),
                "{name}: the event names the armed CQ"
            );
            let what = "RDMA WRITE with an event";
            wait_checked(&q.cq_a, what, WcOpcode::RdmaWrite, &q.qp_a, 9);
            loud(&format!(
                "{name}: completion event for CQ {} (event id {id}) on fd {:?}",
                q.cq_a.handle(),
                channel
            ));
            drop((q.qp_a, q.qp_b, q.cq_a, q.cq_b, mr, q.pd));
        },
    );
}

/// Several work requests go out with one doorbell; a batch with one bad
/// request (more SGEs than the QP takes) is refused whole, naming it, and
/// nothing of it runs: the next good batch completes exactly its own
/// requests, in order.
#[test]
fn a_batch_is_all_or_nothing_and_rings_once() {
    on_each_data_path_device("a_batch_is_all_or_nothing_and_rings_once", |name, ctx| {
        let q = connected_rc_pair(ctx, name, 16, None);
        let mut buf = anon(8192);
        let mr = fresh_mr(&q.pd, &mut buf, RW_READ);
        let addr = buf.as_ptr() as u64;
        for (i, b) in buf[..1024].iter_mut().enumerate() {
            *b = i as u8 ^ 0x5a;
        }
        let one = sge(addr, 256, &mr);
        let two = [one[0], sge(addr + 256, 256, &mr)[0]];
        let rkey = mr.rkey();
        let write = |wr_id, sges, to| {
            signalled_write(
                wr_id,
                sges,
                Remote {
                    addr: addr + to,
                    rkey,
                },
            )
        };
        assert_eq!(
            q.qp_a.caps().max_send_sge,
            1,
            "{name}: the test needs max_send_sge 1"
        );
        let bad = [
            write(1, &one, 4096),
            write(2, &one, 4352),
            write(3, &two, 4608),
        ];
        // SAFETY: refused before anything is queued.
        let err = unsafe { q.qp_a.post_send(&bad) }.unwrap_err();
        assert!(matches!(err, uverbs::Error::Post { index: 2, .. }), "{err}");
        loud(&format!("{name}: refused batch: {err}"));
        let good = [
            write(11, &one, 4096),
            write(12, &one, 4352),
            write(13, &one, 4608),
        ];
        // SAFETY: buf[..256] is only read and buf[4096..4864] not touched
        // until the three completions below.
        unsafe { q.qp_a.post_send(&good) }
            .unwrap_or_else(|e| panic!("{name}: post_send of 3: {e}"));
        let wcs = wait_n::<3>(&q.cq_a, "batched RDMA WRITEs");
        for (wc, wr_id) in wcs.iter().zip([11, 12, 13]) {
            check(
                wc,
                "batched RDMA WRITE",
                WcOpcode::RdmaWrite,
                &q.qp_a,
                wr_id,
            );
        }
        std::thread::sleep(Duration::from_millis(50));
        assert_no_completion(&q.cq_a, &format!("{name}: the refused batch ran after all"));
        for at in [4096usize, 4352, 4608] {
            assert!(buf[at..at + 256] == buf[..256], "{name}: the WRITE to {at}");
        }
        assert!(
            buf[4864..].iter().all(|&b| b == 0),
            "{name}: bytes past the targets"
        );
        drop((q.qp_a, q.qp_b, q.cq_a, q.cq_b, mr, q.pd));
    });
}

/// Inline data (copied into the WQE at post time, no lkey): a SEND and an
/// RDMA WRITE of up to the QP's `max_inline` bytes land byte for byte, and
/// the source may be overwritten as soon as `post_send` returns. siw takes
/// inline on SEND and WRITE up to 80 bytes; rxe up to what it answered.
#[test]
fn inline_send_and_write_land() {
    on_each_data_path_device("inline_send_and_write_land", |name, ctx| {
        let q = connected_rc_pair_init(ctx, name, 16, &|init| init.max_inline(64));
        let max_inline = q.qp_a.caps().max_inline;
        assert!(max_inline >= 64, "{name}: max_inline {max_inline}");
        let mut buf = anon(4096);
        let mr = fresh_mr(&q.pd, &mut buf, RW_READ);
        let addr = buf.as_ptr() as u64;
        // SAFETY: buf[..256] is not touched until the receive's completion.
        unsafe { post_recv_into(&q.qp_b, 0x1e, &buf[..256], &mr, name) };
        let mut msg: Vec<u8> = (0..48u8).map(|i| i ^ 0x3c).collect();
        let sent = msg.clone();
        let segs = [&msg[..]];
        let send = SendWr::new(0x5e, SendOp::Send { imm: None }, Payload::Inline(&segs));
        // SAFETY: inline data is copied into the WQE by post_send.
        unsafe { q.qp_a.post_send(&[send]) }
            .unwrap_or_else(|e| panic!("{name}: post_send inline SEND: {e}"));
        msg.fill(0xee);
        wait_checked(&q.cq_a, "inline SEND", WcOpcode::Send, &q.qp_a, 0x5e);
        let wc = wait_checked(
            &q.cq_b,
            "inline SEND, receiver",
            WcOpcode::Recv,
            &q.qp_b,
            0x1e,
        );
        assert_eq!(wc.byte_len(), 48, "{wc:?}");
        assert_eq!(&buf[..48], &sent[..], "{name}: the inline SEND's bytes");

        let bytes: Vec<u8> = (0..64u8).map(|i| i.wrapping_mul(5) ^ 0x81).collect();
        let segs = [&bytes[..]];
        let write = SendWr::new(
            0x3e,
            SendOp::RdmaWrite {
                remote: Remote {
                    addr: addr + 1024,
                    rkey: mr.rkey(),
                },
                imm: None,
            },
            Payload::Inline(&segs),
        );
        // SAFETY: inline data is copied; buf[1024..1088] is not touched
        // until the completion.
        unsafe { q.qp_a.post_send(&[write]) }
            .unwrap_or_else(|e| panic!("{name}: post_send inline WRITE: {e}"));
        wait_checked(&q.cq_a, "inline WRITE", WcOpcode::RdmaWrite, &q.qp_a, 0x3e);
        assert_eq!(
            &buf[1024..1088],
            &bytes[..],
            "{name}: the inline WRITE's bytes"
        );
        assert!(
            buf[1088..].iter().all(|&b| b == 0),
            "{name}: past the target"
        );
        assert_no_completion(&q.cq_b, &format!("{name}: a WRITE completes nothing on B"));
        loud(&format!(
            "{name}: inline SEND 48 B and WRITE 64 B landed (max_inline {max_inline})"
        ));
        drop((q.qp_a, q.qp_b, mr));
    });
}

/// Gathers: a SEND from two SGEs, and RDMA WRITEs from two and from three
/// (the writers of both drivers take two SGEs on a path of their own and
/// more through their general loop) land as the SGEs' bytes in order, the
/// receive's length their total.
#[test]
fn gathered_send_and_writes_land() {
    on_each_data_path_device("gathered_send_and_writes_land", |name, ctx| {
        let q = connected_rc_pair_init(ctx, name, 16, &|init| init.max_send_sge(3));
        let max_sge = q.qp_a.caps().max_send_sge;
        assert!(max_sge >= 3, "{name}: max_send_sge {max_sge}");
        let mut buf = anon(4096);
        // The sources: three pieces of 16, 24 and 40 bytes, apart from each
        // other, at 0, 64 and 128.
        let pieces: [(usize, usize); 3] = [(0, 16), (64, 24), (128, 40)];
        for (at, len) in pieces {
            for (i, b) in buf[at..at + len].iter_mut().enumerate() {
                *b = (at + i) as u8 ^ 0xa5;
            }
        }
        let mr = fresh_mr(&q.pd, &mut buf, RW_READ);
        let addr = buf.as_ptr() as u64;
        let sges = pieces.map(|(at, len)| sge(addr + at as u64, len, &mr)[0]);
        let joined = |n: usize| -> Vec<u8> {
            pieces[..n]
                .iter()
                .flat_map(|&(at, len)| buf[at..at + len].to_vec())
                .collect()
        };
        let (two, three) = (joined(2), joined(3));

        // SAFETY: buf[1024..1280] is not touched until the receive's
        // completion.
        unsafe { post_recv_into(&q.qp_b, 0x2a, &buf[1024..1280], &mr, name) };
        let send = SendWr::new(0x2b, SendOp::Send { imm: None }, Payload::Sges(&sges[..2]));
        // SAFETY: the sources are not written until the completion.
        unsafe { q.qp_a.post_send(&[send]) }
            .unwrap_or_else(|e| panic!("{name}: post_send SEND of two SGEs: {e}"));
        wait_checked(&q.cq_a, "SEND of two SGEs", WcOpcode::Send, &q.qp_a, 0x2b);
        let wc = wait_checked(
            &q.cq_b,
            "SEND of two SGEs, receiver",
            WcOpcode::Recv,
            &q.qp_b,
            0x2a,
        );
        assert_eq!(wc.byte_len() as usize, two.len(), "{name}: {wc:?}");
        assert_eq!(
            &buf[1024..1024 + two.len()],
            &two[..],
            "{name}: the SEND's bytes"
        );

        for (n, want, target, wr_id) in [(2, &two, 2048, 0x2c), (3, &three, 3072, 0x2d)] {
            let write = SendWr::new(
                wr_id,
                SendOp::RdmaWrite {
                    remote: Remote {
                        addr: addr + target as u64,
                        rkey: mr.rkey(),
                    },
                    imm: None,
                },
                Payload::Sges(&sges[..n]),
            );
            // SAFETY: the sources are not written, and buf[target..] not
            // touched, until the completion.
            unsafe { q.qp_a.post_send(&[write]) }
                .unwrap_or_else(|e| panic!("{name}: post_send WRITE of {n} SGEs: {e}"));
            let what = format!("WRITE of {n} SGEs");
            wait_checked(&q.cq_a, &what, WcOpcode::RdmaWrite, &q.qp_a, wr_id);
            assert_eq!(
                &buf[target..target + want.len()],
                &want[..],
                "{name}: the {what}'s bytes"
            );
            assert!(
                buf[target + want.len()..target + 1024]
                    .iter()
                    .all(|&b| b == 0),
                "{name}: past the {what}'s target"
            );
        }
        assert_no_completion(&q.cq_b, &format!("{name}: a WRITE completes nothing on B"));
        loud(&format!(
            "{name}: a SEND of two SGEs ({} B) and WRITEs of two ({} B) and three ({} B) landed",
            two.len(),
            two.len(),
            three.len()
        ));
        drop((q.qp_a, q.qp_b, mr));
    });
}
