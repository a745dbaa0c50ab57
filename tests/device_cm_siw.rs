//! Bytes moved on siw through a connection the connection manager set up
//! (iWARP cannot connect any other way: the kernel hands the QP its TCP
//! stream during connect and accept), over siw0's own address,
//! 198.51.100.1 (`common::cm::SIW_CM_ADDR`), with the common fixtures
//! (`cm_connected_pair_with`, `disconnect_pair`): SEND/RECV, RDMA WRITE
//! and RDMA READ through the crate's post/poll with the data checked byte
//! for byte, and what is siw's own: a completion event after `req_notify`
//! (siw arms a CQ by a store to its control word, no system call) on the
//! client's CQ.
//!
//! Re-registration over the cm on siw (the replace fallback, proven by
//! traffic) is in `device_cm_rereg.rs`, beside rxe's in-place cases.
//! rxe devices are skipped loudly (this binary is siw's). Needs
//! `/dev/infiniband/rdma_cm`: with `UVERBS_REQUIRE_DEVICES` set its
//! absence fails the test.

mod common;

use std::os::fd::{AsRawFd, RawFd};

use common::cm::*;
use common::*;
use uverbs::cq::CompletionChannel;
use uverbs::wr::{RecvWr, Remote, SendOp, WcOpcode};

const LEN: usize = 4096;
const MSG: usize = 256;

fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31) ^ seed ^ 0x5a)
        .collect()
}

fn remote(buf: &[u8], rkey: u32) -> Remote {
    Remote {
        addr: buf.as_ptr() as u64,
        rkey,
    }
}

fn wait_readable(fd: RawFd, name: &str) {
    let ready = poll_in(fd, CM_WAIT);
    assert_eq!(ready, 1, "{name}: no completion event within {CM_WAIT:?}");
}

#[test]
fn siw_cm_send_write_read_and_an_armed_cq() {
    let test = "siw_cm_send_write_read_and_an_armed_cq";
    let _serial = serial();
    on_each_cm_device(test, |name, ctx, counts| {
        if driver(ctx) != Driver::Siw {
            return loud(&format!("NOTE: {test}: {name} skipped: this test is siw's"));
        }
        let channel: CompletionChannel = comp_channel(ctx, name);
        let pd = alloc_pd(ctx);
        let setup = CmSetup {
            cqe: 16,
            client_channel: Some(&channel),
            ..CmSetup::default()
        };
        let Some(c) = cm_connected_pair_with(ctx, name, &pd, &setup) else {
            return;
        };
        assert!(c.iwarp, "{name}: siw's QPs are iWARP");
        counts.assert_extra_cq_qp(2, 2, "connected");

        let mut a_buf = anon(LEN);
        let mut b_buf = anon(LEN);
        let a_mr = fresh_mr(&pd, &mut a_buf, RW_READ);
        let b_mr = fresh_mr(&pd, &mut b_buf, RW_READ);

        // SEND/RECV.
        let bytes = pattern(1, 64);
        a_buf[..64].copy_from_slice(&bytes);
        let recv_sge = sge(b_buf.as_ptr() as u64, 64, &b_mr);
        // SAFETY: b_buf[..64] is untouched until the receive's completion.
        unsafe {
            c.qp_b.post_recv(&[RecvWr {
                wr_id: 0xb0b,
                sges: &recv_sge,
            }])
        }
        .unwrap();
        let send_sge = sge(a_buf.as_ptr() as u64, 64, &a_mr);
        // SAFETY: a_buf[..64] is only read until the completion.
        unsafe {
            c.qp_a
                .post_send(&[signalled(0xa5e, SendOp::Send { imm: None }, &send_sge)])
        }
        .unwrap_or_else(|e| panic!("{name}: post SEND: {e}"));
        wait_checked(&c.cq_a, "SEND", WcOpcode::Send, &c.qp_a, 0xa5e);
        let wc = wait_checked(&c.cq_b, "RECV", WcOpcode::Recv, &c.qp_b, 0xb0b);
        assert_eq!(wc.byte_len(), 64);
        assert_eq!(&b_buf[..64], &bytes[..], "{name}: the SEND's bytes");

        // WRITE into the server's MR, then READ it back.
        let to = remote(&b_buf[1024..], b_mr.rkey());
        let bytes = pattern(2, MSG);
        a_buf[..MSG].copy_from_slice(&bytes);
        let s = sge(a_buf.as_ptr() as u64, MSG, &a_mr);
        // SAFETY: a_buf[..MSG] is only read by the device until the completion.
        unsafe { c.qp_a.post_send(&[signalled_write(1, &s, to)]) }
            .unwrap_or_else(|e| panic!("{name}: post WRITE: {e}"));
        wait_checked(&c.cq_a, "WRITE", WcOpcode::RdmaWrite, &c.qp_a, 1);
        assert_eq!(
            &b_buf[1024..1024 + MSG],
            &bytes[..],
            "{name}: the WRITE's bytes"
        );
        let back = sge(a_buf.as_ptr() as u64 + MSG as u64, MSG, &a_mr);
        // SAFETY: a_buf[MSG..2 MSG] is neither read nor written until the
        // completion.
        unsafe {
            c.qp_a
                .post_send(&[signalled(2, SendOp::RdmaRead { remote: to }, &back)])
        }
        .unwrap_or_else(|e| panic!("{name}: post READ: {e}"));
        wait_checked(&c.cq_a, "READ", WcOpcode::RdmaRead, &c.qp_a, 2);
        assert_eq!(&a_buf[MSG..2 * MSG], &bytes[..], "{name}: the READ's bytes");

        // Arming: a store to the control word; the event comes on the channel.
        c.cq_a.req_notify(false).unwrap();
        let s = sge(a_buf.as_ptr() as u64, 32, &a_mr);
        let to = remote(&b_buf[2048..], b_mr.rkey());
        // SAFETY: a_buf[..32] is only read until the completion.
        unsafe { c.qp_a.post_send(&[signalled_write(7, &s, to)]) }.unwrap();
        wait_readable(channel.as_raw_fd(), name);
        assert_eq!(channel.get_event().unwrap(), c.cq_a.event_id(), "{name}");
        wait_checked(&c.cq_a, "armed WRITE", WcOpcode::RdmaWrite, &c.qp_a, 7);
        c.cq_a.ack_events(1).unwrap();
        loud(&format!(
            "{name}: SEND, WRITE, READ and a CQ event over the iWARP CM"
        ));

        let reported = disconnect_pair(c, name);
        assert_eq!(
            reported,
            Reported::IWARP,
            "{name}: iWARP: no CONNECT_RESPONSE, no TIMEWAIT_EXIT"
        );
        drop((a_mr, b_mr, pd, channel));
        counts.assert_extra_cq_qp(0, 0, "after dropping everything");
        counts.assert_extra(0, 0, "after dropping everything");
    });
}
