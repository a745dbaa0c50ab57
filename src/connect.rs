//! Connecting RC QPs by hand: the three `MODIFY_QP` steps (RESET → INIT →
//! RTR → RTS) towards a peer whose QP number, first PSN and GID came by
//! any side channel (a TCP exchange like `ibv_rc_pingpong`'s, a file, the
//! same process).
//!
//! This is what rdma-core's examples and tests write out by hand each
//! time, with their values (MTU from the port, timeout 14, 7 retries, RNR
//! timer 12, one outstanding READ each way). It is for RoCE (and IB with a
//! GRH): an iWARP QP (siw) reaches RTS only through the connection manager
//! ([`crate::cm`]), and the kernel refuses these steps on one.

use crate::command::{Mtu, QpAttr, QpState};
use crate::connectable::Connectable;
use crate::error::Error;
use crate::flags::AccessFlags;
use crate::gid::Gid;

/// The far end of an RC connection, as the peer describes itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct RcPeer {
    /// The peer's QP number.
    pub qp_num: u32,
    /// The first PSN the peer sends with (its `sq_psn`; our `rq_psn`).
    pub psn: u32,
    /// The peer's GID (RoCE: its IPv4-mapped or link-local address).
    pub gid: Gid,
}

impl RcPeer {
    /// A peer whose QP `qp_num` at `gid` starts at PSN 0.
    pub fn new(qp_num: u32, gid: Gid) -> Self {
        RcPeer {
            qp_num,
            psn: 0,
            gid,
        }
    }

    setters! {
        /// The first PSN the peer sends with.
        pub fn psn(psn: u32) => psn;
    }
}

/// How to connect an RC QP by hand: the local side's choices, applied to
/// a QP and an [`RcPeer`] by [`connect`](Self::connect).
///
/// ```no_run
/// # fn demo(ctx: &uverbs::Context, a: &uverbs::QueuePair, b: &uverbs::QueuePair) -> Result<(), uverbs::Error> {
/// use uverbs::qp::{RcConnect, RcPeer};
///
/// // Two QPs on one RoCE device, connected to each other over GID 0.
/// let gid = ctx.query_gid(1, 0)?;
/// let how = RcConnect::new(uverbs::qp::Mtu::Mtu1024);
/// how.connect(a, RcPeer::new(b.qp_num(), gid))?;
/// how.connect(b, RcPeer::new(a.qp_num(), gid))?;
/// # Ok(()) }
/// ```
#[doc(alias = "ibv_modify_qp")]
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct RcConnect {
    /// The path MTU (at most the port's active MTU).
    pub path_mtu: Mtu,
    /// The local port (default 1).
    pub port: u8,
    /// The local GID index the GRH carries as its source (default 0).
    pub gid_index: u8,
    /// What the peer may do on this QP (default local write, remote
    /// write and remote read).
    pub access: AccessFlags,
    /// The first PSN this side sends with (default 0; the peer's
    /// [`RcPeer::psn`]).
    pub psn: u32,
    /// The ACK timeout exponent: 4.096 µs × 2^timeout (default 14).
    pub timeout: u8,
    /// Retries after a timeout (default 7).
    pub retry_cnt: u8,
    /// Retries after an RNR NAK; 7 is "for ever" (default 7).
    pub rnr_retry: u8,
    /// The RNR NAK timer code this side answers with (default 12).
    pub min_rnr_timer: u8,
    /// READs and atomics outstanding at once, each way (default 1).
    pub rd_atomic: u8,
}

impl RcConnect {
    /// rdma-core's values over `path_mtu`: port 1, GID index 0, remote
    /// write and read allowed, PSN 0, timeout 14, 7 retries, RNR timer 12,
    /// one READ outstanding each way.
    pub fn new(path_mtu: Mtu) -> Self {
        RcConnect {
            path_mtu,
            port: 1,
            gid_index: 0,
            access: AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ,
            psn: 0,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            min_rnr_timer: 12,
            rd_atomic: 1,
        }
    }

    setters! {
        /// The local port.
        pub fn port(port: u8) => port;
        /// The local GID index.
        pub fn gid_index(gid_index: u8) => gid_index;
        /// What the peer may do on this QP.
        pub fn access(access: AccessFlags) => access;
        /// The first PSN this side sends with.
        pub fn psn(psn: u32) => psn;
        /// The ACK timeout exponent.
        pub fn timeout(timeout: u8) => timeout;
        /// Retries after a timeout.
        pub fn retry_cnt(retry_cnt: u8) => retry_cnt;
        /// Retries after an RNR NAK (7: for ever).
        pub fn rnr_retry(rnr_retry: u8) => rnr_retry;
        /// The RNR NAK timer code this side answers with.
        pub fn min_rnr_timer(min_rnr_timer: u8) => min_rnr_timer;
        /// READs and atomics outstanding at once, each way.
        pub fn rd_atomic(rd_atomic: u8) => rd_atomic;
    }

    /// The three steps towards `peer`, each with its name
    /// (`"RESET->INIT"`, `"INIT->RTR"`, `"RTR->RTS"`), for a caller that
    /// applies them itself.
    pub fn steps(&self, peer: RcPeer) -> [(&'static str, QpAttr); 3] {
        let init = QpAttr::new()
            .state(QpState::Init)
            .pkey_index(0)
            .port(self.port)
            .access_flags(self.access);
        let rtr = QpAttr::new()
            .state(QpState::Rtr)
            .path_mtu(self.path_mtu)
            .dest_qpn(peer.qp_num)
            .rq_psn(peer.psn)
            .max_dest_rd_atomic(self.rd_atomic)
            .min_rnr_timer(self.min_rnr_timer)
            .av(QpAttr::roce_dest(peer.gid, self.gid_index, 1, self.port));
        let rts = QpAttr::new()
            .state(QpState::Rts)
            .timeout(self.timeout)
            .retry_cnt(self.retry_cnt)
            .rnr_retry(self.rnr_retry)
            .sq_psn(self.psn)
            .max_rd_atomic(self.rd_atomic);
        [("RESET->INIT", init), ("INIT->RTR", rtr), ("RTR->RTS", rts)]
    }

    /// Takes `qp`, in RESET, to RTS towards `peer`: three `MODIFY_QP`s.
    /// The first refused one's error is returned, and the QP stays in the
    /// state the steps before it reached (its [`QueuePair::state`](crate::QueuePair::state)).
    pub fn connect<Q: Connectable + ?Sized>(&self, qp: &Q, peer: RcPeer) -> Result<(), Error> {
        for (_, attr) in self.steps(peer) {
            qp.modify(&attr)?;
        }
        Ok(())
    }

    /// Connects two QPs on one port to each other (a loopback: both ends
    /// use `gid`, the port's GID at [`gid_index`](Self::gid_index)).
    pub fn connect_pair<A, B>(&self, a: &A, b: &B, gid: Gid) -> Result<(), Error>
    where
        A: Connectable + ?Sized,
        B: Connectable + ?Sized,
    {
        self.connect(a, RcPeer::new(b.qp_num(), gid).psn(self.psn))?;
        self.connect(b, RcPeer::new(a.qp_num(), gid).psn(self.psn))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::command::QpAttrMask;

    /// The steps carry rdma-core's values and exactly the masks the
    /// kernel's transition table requires for RC (checked by the table).
    #[test]
    fn steps_are_valid_rc_transitions_with_the_peer_in_rtr() {
        let gid = Gid::from_raw([0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
        let how = RcConnect::new(Mtu::Mtu1024).psn(7).gid_index(1);
        let steps = how.steps(RcPeer::new(0x11, gid).psn(0x22));
        let names: Vec<&str> = steps.iter().map(|(n, _)| *n).collect();
        assert_eq!(names, ["RESET->INIT", "INIT->RTR", "RTR->RTS"]);
        let from = [QpState::Reset, QpState::Init, QpState::Rtr];
        for ((name, attr), current) in steps.iter().zip(from) {
            attr.check(crate::command::QpType::Rc, current)
                .unwrap_or_else(|e| panic!("{name}: {e}"));
        }
        // rc_pingpong's RTR (the defaults are rdma-core's) with the
        // peer's PSN.
        let expected_rtr = QpAttr::rc_pingpong_rtr(gid.raw()).rq_psn(0x22);
        assert_eq!(steps[1].1, expected_rtr);
        assert!(steps[1]
            .1
            .mask()
            .contains(QpAttrMask::AV | QpAttrMask::DEST_QPN));
        let expected_rts = QpAttr::new()
            .state(QpState::Rts)
            .timeout(14)
            .retry_cnt(7)
            .rnr_retry(7)
            .sq_psn(7)
            .max_rd_atomic(1);
        assert_eq!(steps[2].1, expected_rts);
    }
}
