//! UC traffic on rxe0: two unreliable-connected QPs of one context,
//! connected over the port's RoCE v2 GID, carry RDMA WRITE and
//! SEND_WITH_IMM byte for byte; an RDMA READ or an atomic (which UC does
//! not have) is refused before the ring with a typed error and nothing is
//! queued. Counts back at their start at the end. siw0 is RC only: creating a UC
//! QP there is refused with EOPNOTSUPP, typed, and nothing is left behind.

mod common;

use common::*;
use uverbs::qp::{QpAttr, QpState};
use uverbs::wr::{Payload, PostError, RecvWr, Remote, SendOp, SendWr, WcFlags, WcOpcode};
use uverbs::{AccessFlags, Error, QpType, QueuePair};

/// RESET -> INIT -> RTR -> RTS for UC: no acknowledgements, so no
/// timeout, retries or RDMA-read depths.
fn connect_uc(qp: &QueuePair, peer_qpn: u32, gid: uverbs::device::Gid, mtu: uverbs::qp::Mtu) {
    let steps = [
        (
            "RESET->INIT",
            to_init().access_flags(AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE),
        ),
        (
            "INIT->RTR",
            QpAttr::new()
                .state(QpState::Rtr)
                .path_mtu(mtu)
                .dest_qpn(peer_qpn)
                .rq_psn(0)
                .av(QpAttr::roce_dest(gid, GID_INDEX as u8, 1, PORT)),
        ),
        ("RTR->RTS", QpAttr::new().state(QpState::Rts).sq_psn(0)),
    ];
    for (step, attr) in steps {
        modify(qp, &attr, step);
    }
}

#[test]
fn uc_write_and_send_land_and_read_is_refused_before_the_ring() {
    on_each_device_for_qp_type(
        "uc_write_and_send_land_and_read_is_refused_before_the_ring",
        QpType::Uc,
        |name, ctx| {
            let (gid, mtu) = roce_path(ctx, name);
            let pd = alloc_pd(ctx);
            let cq_a = ctx.create_cq(16, None).unwrap();
            let cq_b = ctx.create_cq(16, None).unwrap();
            let a = qp_on(&pd, QpType::Uc, &cq_a, name);
            let b = qp_on(&pd, QpType::Uc, &cq_b, name);
            connect_uc(&a, b.qp_num(), gid, mtu);
            connect_uc(&b, a.qp_num(), gid, mtu);

            let mut buf = anon(8192);
            for (i, x) in buf[..2048].iter_mut().enumerate() {
                *x = (i as u8).wrapping_mul(3) ^ 0xa5;
            }
            let mr = fresh_mr(&pd, &mut buf, RW);
            let addr = buf.as_ptr() as u64;
            let remote = |off: u64| Remote {
                addr: addr + off,
                rkey: mr.rkey(),
            };

            // RDMA WRITE of 1 KiB from [0, 1K) to [4K, 5K).
            let src = sge(addr, 1024, &mr);
            // SAFETY: buf stays mapped and unwritten until the completion.
            unsafe { a.post_send(&[signalled_write(1, &src, remote(4096))]) }.unwrap();
            wait_checked(&cq_a, "UC WRITE", WcOpcode::RdmaWrite, &a, 1);

            // SEND_WITH_IMM of 512 B from [1K, 1.5K) into B's receive at [6K, 7K).
            let rx = sge(addr + 6144, 1024, &mr);
            // SAFETY: B's receive target is not touched until its completion.
            unsafe {
                b.post_recv(&[RecvWr {
                    wr_id: 2,
                    sges: &rx,
                }])
            }
            .unwrap();
            let msg = sge(addr + 1024, 512, &mr);
            let send = signalled(
                3,
                SendOp::Send {
                    imm: Some(0xc0ffee),
                },
                &msg,
            );
            // SAFETY: as above.
            unsafe { a.post_send(&[send]) }.unwrap();
            wait_checked(&cq_a, "UC SEND", WcOpcode::Send, &a, 3);
            let got = wait_checked(&cq_b, "UC RECV", WcOpcode::Recv, &b, 2);
            assert_eq!(got.byte_len(), 512, "{got:?}");
            assert!(got.wc_flags().contains(WcFlags::WITH_IMM), "{got:?}");
            assert_eq!(got.imm_data(), Some(0xc0ffee), "{got:?}");

            // READ and FETCH_ADD: UC has neither; refused, nothing queued.
            let dst = sge(addr + 7168, 8, &mr);
            for (op, opcode) in [
                (SendOp::RdmaRead { remote: remote(0) }, "RDMA_READ"),
                (
                    SendOp::FetchAdd {
                        remote: remote(0),
                        add: 1,
                    },
                    "ATOMIC_FETCH_AND_ADD",
                ),
            ] {
                let wr = SendWr::new(9, op, Payload::Sges(&dst));
                // SAFETY: refused before the ring (asserted), so the device
                // never sees it.
                let e = unsafe { a.post_send(&[wr]) }.expect_err(opcode);
                match &e {
                    Error::Post {
                        index: 0,
                        why: source,
                        ..
                    } => assert_eq!(
                        **source,
                        PostError::OpNotOnQpType {
                            opcode,
                            qp_type: QpType::Uc
                        },
                        "{e}"
                    ),
                    other => panic!("{name}: {opcode} on UC: {other}"),
                }
                loud(&format!("{name}: {opcode} on a UC QP: {e}"));
            }
            assert_no_completion(&cq_a, "after the refused posts");

            // The queue is as it was: the next WRITE is the only completion.
            // SAFETY: as for the first WRITE.
            unsafe { a.post_send(&[signalled_write(4, &src, remote(5120))]) }.unwrap();
            wait_checked(&cq_a, "UC WRITE after", WcOpcode::RdmaWrite, &a, 4);

            let expect: Vec<u8> = (0..2048)
                .map(|i| (i as u8).wrapping_mul(3) ^ 0xa5)
                .collect();
            assert_eq!(&buf[4096..5120], &expect[..1024], "{name}: first WRITE");
            assert_eq!(&buf[5120..6144], &expect[..1024], "{name}: second WRITE");
            assert_eq!(&buf[6144..6656], &expect[1024..1536], "{name}: SEND");
            assert!(buf[6656..].iter().all(|&x| x == 0), "{name}: nothing else");
            drop((a, b, cq_a, cq_b, mr, pd));
        },
    );
}
