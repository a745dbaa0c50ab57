//! The attribute sequence that takes an RC queue pair from RESET to RTS,
//! with the values of rdma-core's tests and rc_pingpong: one place for
//! the device test that connects two QPs and the fake-kernel test that
//! checks the masks each step sends.

use uverbs::command::{Mtu, QpAttr, QpState};
use uverbs::uverbs_uapi as sys;
use uverbs::AccessFlags;

/// RESET -> INIT -> RTR -> RTS towards `dest_qpn` over `dest` (a RoCE
/// destination from [`QpAttr::roce_dest`]) on `port`, each step with its
/// name.
pub fn rc_to_rts(
    access: AccessFlags,
    port: u8,
    mtu: Mtu,
    dest_qpn: u32,
    dest: sys::ib_uverbs_qp_dest,
) -> [(&'static str, QpAttr); 3] {
    let init = QpAttr::new()
        .state(QpState::Init)
        .pkey_index(0)
        .port(port)
        .access_flags(access);
    let rtr = QpAttr::new()
        .state(QpState::Rtr)
        .path_mtu(mtu)
        .dest_qpn(dest_qpn)
        .rq_psn(0)
        .max_dest_rd_atomic(1)
        .min_rnr_timer(12)
        .av(dest);
    let rts = QpAttr::new()
        .state(QpState::Rts)
        .timeout(14)
        .retry_cnt(7)
        .rnr_retry(7)
        .sq_psn(0)
        .max_rd_atomic(1);
    [("RESET->INIT", init), ("INIT->RTR", rtr), ("RTR->RTS", rts)]
}
