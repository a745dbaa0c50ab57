//! `ibv_create_ah_from_wc` on rxe0: a UD echo whose reply is addressed
//! with nothing but the received completion and its GRH. For every RoCE v2
//! GID of port 1 (the link-local one: an IPv6 GRH; an IPv4-mapped one, if
//! the netdev has an address: an IPv4 header in the GRH's last 20 bytes),
//! A sends to B from that GID; B makes its address handle back with
//! `create_ah_from_wc` (the sender's GID as destination, the same GID
//! index as source) and replies to the completion's source QP; A receives
//! the reply from B. siw has no UD: skipped with a note.

mod common;

use common::*;
use uverbs::device::GidType;
use uverbs::qp::{AhAttr, GRH_LEN};
use uverbs::wr::{RecvWr, UdDest, WcOpcode};

const QKEY: u32 = 0x1111_1111;
const LEN: usize = 64;

#[test]
fn a_ud_reply_is_addressed_from_the_completion_and_its_grh() {
    on_each_ud_device(
        "a_ud_reply_is_addressed_from_the_completion_and_its_grh",
        |name, ctx, _| {
            let table = ctx.query_gid_table().expect("query_gid_table");
            let v2: Vec<_> = table
                .iter()
                .filter(|e| e.port_num == PORT && e.gid_type == GidType::RoceV2)
                .collect();
            assert!(!v2.is_empty(), "{name}: no RoCE v2 GID: {table:?}");
            let pd = alloc_pd(ctx);
            let (cq_a, cq_b) = (
                ctx.create_cq(8, None).unwrap(),
                ctx.create_cq(8, None).unwrap(),
            );
            let (qp_a, qp_b) = (
                ud_qp(&pd, &cq_a, QKEY, 0, name),
                ud_qp(&pd, &cq_b, QKEY, 0, name),
            );
            let mut a_buf = anon(4096);
            let mut b_buf = anon(4096);
            let a_mr = fresh_mr(&pd, &mut a_buf, RW_READ);
            let b_mr = fresh_mr(&pd, &mut b_buf, RW_READ);
            let (a_addr, b_addr) = (a_buf.as_ptr() as u64, b_buf.as_ptr() as u64);
            for (round, entry) in v2.iter().enumerate() {
                let what = format!("{name}: GID {} ({})", entry.gid_index, entry.gid);
                let index = u8::try_from(entry.gid_index).unwrap();
                // A's receive for the reply at 2048, B's for the request at 0.
                let a_recv = sge(a_addr + 2048, GRH_LEN + LEN, &a_mr);
                let b_recv = sge(b_addr, GRH_LEN + LEN, &b_mr);
                // SAFETY: each range stays mapped and registered and untouched
                // until its completion is polled below.
                unsafe {
                    qp_a.post_recv(&[RecvWr {
                        wr_id: 0xa0,
                        sges: &a_recv,
                    }])
                    .unwrap();
                    qp_b.post_recv(&[RecvWr {
                        wr_id: 0xb0,
                        sges: &b_recv,
                    }])
                    .unwrap();
                }
                a_buf[..LEN].fill(0x40 + round as u8);
                let to_b = pd
                    .create_ah(&AhAttr::roce(entry.gid, index, PORT))
                    .unwrap_or_else(|e| panic!("{what}: create_ah: {e}"));
                let src = sge(a_addr, LEN, &a_mr);
                let request = ud_send(0xa1, None, &src, UdDest::new(&to_b, qp_b.qp_num(), QKEY));
                // SAFETY: a_buf[..LEN] is only read, and the AH lives, until
                // the completion below.
                unsafe { qp_a.post_send(&[request]) }.unwrap();
                wait_checked(&cq_a, &what, WcOpcode::Send, &qp_a, 0xa1);
                let wc = wait_checked(&cq_b, &what, WcOpcode::Recv, &qp_b, 0xb0);

                // B answers with what it received, and nothing else.
                let grh = &b_buf[..GRH_LEN];
                let back = AhAttr::from_wc(ctx, PORT, &wc, grh)
                    .unwrap_or_else(|e| panic!("{what}: init_ah_from_wc ({grh:02x?}): {e}"));
                loud(&format!("{what}: the way back: {back:?}"));
                assert_eq!(back.dgid, entry.gid, "{what}: to the sender's GID");
                assert_eq!(
                    back.sgid_index, index,
                    "{what}: from the GID it was sent to"
                );
                assert!(back.is_global && back.port == PORT, "{what}: {back:?}");
                assert_ne!(back.hop_limit, 0, "{what}: a hop limit from the header");
                let to_a = pd
                    .create_ah_from_wc(PORT, &wc, grh)
                    .unwrap_or_else(|e| panic!("{what}: create_ah_from_wc: {e}"));
                assert_eq!(to_a.attr(), &back);
                b_buf[GRH_LEN..GRH_LEN + LEN]
                    .iter_mut()
                    .for_each(|b| *b ^= 0xff);
                let echo = sge(b_addr + GRH_LEN as u64, LEN, &b_mr);
                let reply = ud_send(0xb1, None, &echo, UdDest::new(&to_a, wc.src_qp(), QKEY));
                // SAFETY: as above, for b_buf's payload and `to_a`.
                unsafe { qp_b.post_send(&[reply]) }.unwrap();
                wait_checked(&cq_b, &what, WcOpcode::Send, &qp_b, 0xb1);
                let got = wait_checked(&cq_a, &what, WcOpcode::Recv, &qp_a, 0xa0);
                assert_eq!(got.src_qp(), qp_b.qp_num(), "{what}: the reply is B's");
                let reply = &a_buf[2048 + GRH_LEN..2048 + GRH_LEN + LEN];
                assert!(
                    reply.iter().all(|&b| b == !(0x40 + round as u8)),
                    "{what}: the echoed bytes: {reply:02x?}"
                );
            }
        },
    );
}

/// `AhAttr::lid` is InfiniBand's address vector (no GRH); on a RoCE port
/// the kernel refuses it (`rdma_check_ah_attr`: EINVAL) and no AH exists.
#[test]
fn a_lid_only_address_vector_is_refused_on_roce() {
    on_each_ud_device(
        "a_lid_only_address_vector_is_refused_on_roce",
        |name, ctx, _| {
            let pd = alloc_pd(ctx);
            let attr = AhAttr::lid(1, PORT);
            assert!(!attr.is_global && attr.dlid == 1 && attr.port == PORT);
            let err = pd
                .create_ah(&attr)
                .expect_err("a RoCE port took an AH without a GRH");
            assert_eq!(
                err.errno(),
                Some(uverbs::error::Errno::INVAL),
                "{name}: {err}"
            );
            // The PD is still whole: a RoCE AH on it works.
            let gid = ctx.query_gid(PORT, 0).expect("query_gid");
            drop(
                pd.create_ah(&AhAttr::roce(gid, 0, PORT))
                    .expect("create_ah (GRH)"),
            );
        },
    );
}
