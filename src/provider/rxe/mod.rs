//! Soft RoCE (`rdma_rxe`): the driver this crate knows best.
//!
//! [`queue`] is the shared-ring protocol (header, indices, memory ordering),
//! [`wqe`] what goes into the rings (send and receive WQEs) and comes out
//! (completions), [`rings`] the rings a CQ or QP owns (the create answers,
//! the mappings). Tests drive `queue` and `wqe` against `kernel_model`, an
//! in-process model of the kernel's side of the same memory.

use crate::error::Errno;
use crate::provider::driver::DriverId;
use crate::provider::rings::QpRingConfig;
use crate::provider::{AhCreation, Driver, QpRequest};
use crate::transport::Transport;

// A few inspection helpers (capacities, counts) serve only the tests.
#[cfg_attr(not(test), allow(dead_code))]
pub(crate) mod queue;
pub(crate) mod rings;
#[cfg_attr(not(test), allow(dead_code))]
pub(crate) mod wqe;

#[cfg(all(test, not(miri)))]
mod call_probe;
#[cfg(test)]
mod common_send_tests;
#[cfg(test)]
mod ir_probe;
#[cfg(test)]
mod kernel_model;
#[cfg(test)]
mod ring_props;

/// The rxe provider.
pub(crate) struct Rxe;

impl Driver for Rxe {
    const ID: DriverId = DriverId::RXE;
    /// The versions rdma-core's rxe provider accepts.
    const ABI: (u32, u32, &'static str) = (1, 2, "1..=2");
    const CREATE_CQ_UHW_OUT: usize = rings::CREATE_CQ_UHW_OUT;
    const CREATE_QP_UHW_OUT: usize = rings::CREATE_QP_UHW_OUT;
    const RESET_EMPTIES_QUEUES: bool = true;
    const SENDS_ALLOC_MW: bool = true;
    const AH_CREATION: AhCreation = AhCreation::Command;

    type State = ();
    type CqPrep = ();
    type QpPrep = ();
    type SrqPrep = ();
    type Cq = rings::CqRing;
    type Sq = rings::SendQueue;
    type Rq = rings::RecvQueue;

    /// `rxe_rereg_user_mr` (Linux 6.12) makes all its checks (flags, the
    /// umem check, access bits) before it changes the PD or the access, and
    /// the core checks before calling it; the only step after the change
    /// that can fail is copying the response back (`EFAULT`).
    fn rereg_refusal_leaves_mr_unchanged(errno: Errno) -> bool {
        errno != Errno::FAULT
    }

    fn open_state(_: &dyn Transport, _: &[u8]) -> Result<(), Errno> {
        Ok(())
    }

    fn prepare_cq(_: &(), cqe: u32) -> Result<((), u32), Errno> {
        Ok(((), cqe))
    }

    fn prepare_qp(_: &(), _: &dyn Transport, req: QpRequest) -> Result<((), QpRequest), Errno> {
        Ok(((), req))
    }

    fn map_cq(
        _: &(),
        _: (),
        transport: &dyn Transport,
        uhw: &[u8],
        written: usize,
    ) -> Result<rings::CqRing, Errno> {
        rings::CqRing::map(transport, uhw, written)
    }

    fn map_qp(
        _: &(),
        _: (),
        transport: &dyn Transport,
        uhw: &[u8],
        written: usize,
        _qpn: u32,
        cfg: QpRingConfig,
    ) -> Result<(rings::SendQueue, Option<rings::RecvQueue>), Errno> {
        let limits = wqe::SendLimits {
            max_sge: cfg.max_send_sge,
            max_inline: cfg.max_inline,
        };
        rings::map_qp(
            transport,
            uhw,
            written,
            cfg.qp_type,
            limits,
            cfg.max_recv_sge,
            cfg.has_srq,
        )
    }

    const CREATE_SRQ_UHW_OUT: Option<usize> = Some(rings::CREATE_SRQ_UHW_OUT);
    const MODIFY_SRQ_UHW_IN: &'static [u8] = &rings::MODIFY_SRQ_UHW_IN;

    fn map_srq(
        _: &(),
        transport: &dyn Transport,
        uhw: &[u8],
        written: usize,
        max_sge: u32,
    ) -> Result<rings::RecvQueue, Errno> {
        rings::RecvQueue::map_srq(transport, uhw, written, max_sge)
    }
}
