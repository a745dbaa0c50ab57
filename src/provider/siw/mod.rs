//! Soft iWARP (`siw`).
//!
//! Its data path shares three bare arrays with the kernel: the send queue
//! (`num_sqe` × `siw_sqe`, 120 bytes), the receive queue (`num_rqe` ×
//! `siw_rqe`, 112 bytes) and the completion queue (`num_cqe` × `siw_cqe`,
//! 32 bytes, then the 8-byte `siw_cq_ctrl` arming word), each mapped at the
//! key of its create response. There is no header and no shared index: each
//! element's `flags` word carries `SIW_WQE_VALID` while the consumer owns it,
//! and each side counts its own position modulo the (power-of-two) size.
//!
//! * Posting a send: fill an SQE whose flags lack VALID, then store its flags
//!   with VALID (release). The kernel copies the SQE out and clears the flags
//!   (`smp_store_mb`). Write the POST_SEND doorbell only if the SQE just
//!   before the batch is no longer VALID (the kernel may be idle); if it is
//!   still VALID the kernel has yet to take it and will walk on to the new
//!   ones.
//! * Posting a receive: the same, with flags exactly VALID; no system call.
//! * Polling: a CQE whose flags have VALID (acquire) is copied out, then its
//!   flags are cleared (release). No system call.
//! * Arming: one store to the arming word (solicited: 1, any: 3); the kernel
//!   fires the completion event at the next matching CQE and clears the word.
//!   No system call.
//!
//! **x86-64 only.** The protocol is sound only where the kernel's hand-back
//! of a slot (`smp_store_mb`) is a release and its CQE publication is
//! ordered: on x86-64 (TSO, `xchg`). Elsewhere creating a siw CQ or QP
//! answers [`Error::Unsupported`](crate::Error::Unsupported); see
//! [`DATA_PATH_SOUND`].
//!
//! [`queue`] is that ownership protocol (the views over the mappings and the
//! orderings each shared word needs), [`wqe`] the translation of the crate's
//! work requests and completions, [`rings`] the rings a CQ or QP owns (the
//! create answers, the mappings, unmapping before the destroy). Tests drive
//! `queue` and `wqe` against `kernel_model`, an in-process model of the
//! kernel's side.

use crate::command::{QpType, TransportType};
use crate::error::Errno;
use crate::provider::driver::DriverId;
use crate::provider::rings::QpRingConfig;
use crate::provider::{Driver, QpRequest};
use crate::transport::Transport;
use uverbs_uapi as sys;

/// Whether siw's rings can be used soundly on this CPU: on x86-64 only.
///
/// The kernel hands an SQE or RQE back with `smp_store_mb(flags, 0)`. On
/// x86 that is `xchg`, a locked read-modify-write: no earlier load of the
/// kernel (its copy of the element) can be reordered after it, and with x86-64's
/// TSO a user load that sees the flags clear sees a kernel that has finished
/// reading, so our next write into the slot cannot reach its copy. Everywhere
/// else it is asm-generic's `WRITE_ONCE(flags, 0); smp_mb()`: the barrier
/// comes after the store, so on arm64 or POWER the store may become visible
/// while the kernel's reads of the slot are still pending, and a slot user
/// space sees free may still be read: our next WQE would be mixed into the
/// kernel's copy of the previous one. No user-space barrier can order the
/// kernel's own accesses. The CQE side needs TSO too: the kernel writes a
/// CQE's fields and then `WRITE_ONCE`s its VALID flag with no `smp_wmb`.
/// So elsewhere, creating a siw CQ or QP is refused
/// ([`Error::Unsupported`](crate::Error::Unsupported)) before anything is
/// sent; the rest of the verbs (contexts, PDs, MRs, the connection
/// manager) work.
pub(crate) const DATA_PATH_SOUND: bool = cfg!(target_arch = "x86_64");

/// What a siw CQ or QP create answers where [`DATA_PATH_SOUND`] is false.
pub(crate) const WEAKLY_ORDERED_CPU: &str =
    "siw's kernel hands ring slots back with smp_store_mb, which is a release only on x86 \
     (xchg); on this weakly ordered CPU the kernel may still read a slot user space sees free, \
     so siw's data path is built for x86-64 only";

// A few inspection helpers (capacities, counts) serve only the tests.
#[cfg_attr(not(test), allow(dead_code))]
pub(crate) mod queue;
pub(crate) mod rings;
#[cfg_attr(not(test), allow(dead_code))]
pub(crate) mod wqe;

#[cfg(test)]
mod ir_probe;
#[cfg(test)]
mod kernel_model;
#[cfg(test)]
mod ring_props;
#[cfg(test)]
mod wiring_tests;
#[cfg(test)]
mod writer_tests;

/// Whether a `QUERY_QP` answer's `qp_state` reports the QP's state. siw's
/// `siw_query_qp` fills it only in later kernels (6.12 has it, mapping its
/// idle state to INIT, so it never reports RESET); Linux 6.1 leaves it
/// zero, RESET, for every QP. A RESET answer therefore means "not
/// reported".
pub(crate) fn query_qp_reports_state(qp_state: u8) -> bool {
    qp_state != crate::command::QpState::Reset as u8
}

/// The only driver ABI version the siw kernel and rdma-core speak.
pub(crate) const ABI: (u32, u32, &str) = (sys::SIW_ABI_VERSION, sys::SIW_ABI_VERSION, "1");

/// siw refuses a context without room for `siw_uresp_alloc_ctx`.
pub(crate) const GET_CONTEXT_UHW_OUT: usize = size_of::<sys::siw_uresp_alloc_ctx>();

/// A zeroed `siw_ureq_reg_mr`: asks for key byte 0.
pub(crate) const REG_MR_UHW_IN: [u8; size_of::<sys::siw_ureq_reg_mr>()] =
    [0; size_of::<sys::siw_ureq_reg_mr>()];

/// Room for `siw_uresp_reg_mr`.
pub(crate) const REG_MR_UHW_OUT: usize = size_of::<sys::siw_uresp_reg_mr>();

/// The siw provider.
pub(crate) struct Siw;

impl Driver for Siw {
    const ID: DriverId = DriverId::SIW;
    const ABI: (u32, u32, &'static str) = ABI;
    const GET_CONTEXT_UHW_OUT: usize = GET_CONTEXT_UHW_OUT;
    const REG_MR_UHW: (&'static [u8], usize) = (&REG_MR_UHW_IN, REG_MR_UHW_OUT);
    /// `siw_reg_user_mr` reads `siw_ureq_reg_mr` and writes
    /// `siw_uresp_reg_mr` only when it is given a udata: without one (the
    /// native method) it ORs no key byte into the STag, which is what the
    /// zeroed request asks for anyway, and the answered `stag` is never
    /// read here (the keys come from the core answer). So the method gives
    /// the same lkey and rkey.
    const REG_MR_METHOD: bool = true;
    const CREATE_CQ_UHW_OUT: usize = rings::CREATE_CQ_UHW_OUT;
    const CREATE_QP_UHW_OUT: usize = rings::CREATE_QP_UHW_OUT;
    /// See [`DATA_PATH_SOUND`].
    const DATA_PATH_REFUSAL: Option<&'static str> = match DATA_PATH_SOUND {
        true => None,
        false => Some(WEAKLY_ORDERED_CPU),
    };
    /// siw checks a READ's key once, when its response starts
    /// (`siw_check_sgl_tx`), keeps a reference to the memory until the last
    /// byte is handed to TCP, and hands pages of 4 KiB and more to TCP by
    /// reference (`MSG_SPLICE_PAGES`, kept until acknowledged):
    /// `siw_dereg_mr` only clears the key. Bytes written after it returned
    /// still reach the peer (docs/data-path.md, issue 38).
    const DEREG_FENCES_PEER_READS: bool = false;
    const SEND_COMPLETES_IN_ORDER: bool = false;
    const OWNED_SENDS_MUST_BE_SIGNALLED: Option<&'static str> =
        Some("siw completes out of order and sends unsignalled payloads zero-copy");
    const TRANSPORT: TransportType = TransportType::Iwarp;
    const SENDS_ALLOC_MW: bool = true;

    type State = ();
    type CqPrep = ();
    type QpPrep = ();
    type SrqPrep = ();
    type Cq = rings::CqRing;
    type Sq = rings::SendQueue;
    type Rq = rings::RecvQueue;

    /// siw has no `rereg_user_mr`: the kernel refuses every REREG_MR before
    /// looking at the MR, so no refusal can have changed it.
    fn rereg_refusal_leaves_mr_unchanged(_errno: Errno) -> bool {
        true
    }

    /// RC only: `siw_create_qp` answers EOPNOTSUPP for any other type.
    fn query_qp_reports_state(qp_state: u8) -> bool {
        query_qp_reports_state(qp_state)
    }

    fn supports_qp_type(qp_type: QpType) -> bool {
        qp_type == QpType::Rc
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
        rings::CqRing::map(transport, uhw, written).map_err(|e| e.errno())
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
        let send = wqe::SendConfig {
            max_sge: cfg.max_send_sge,
            max_inline: cfg.max_inline,
            sig_all: cfg.sq_sig_all,
        };
        // On an SRQ the kernel answers no receive array (`num_rqe` 0).
        let (_qp_id, sq, rq) = rings::map_qp(transport, uhw, written, send, cfg.max_recv_sge)
            .map_err(|e| e.errno())?;
        Ok((sq, (!cfg.has_srq).then_some(rq)))
    }

    const CREATE_SRQ_UHW_OUT: Option<usize> = Some(rings::CREATE_SRQ_UHW_OUT);

    /// rdma-core's siw provider destroys an SRQ first and unmaps after
    /// (unlike its QPs and CQs); the SRQ core keeps that order for every
    /// driver.
    fn map_srq(
        _: &(),
        transport: &dyn Transport,
        uhw: &[u8],
        written: usize,
        max_sge: u32,
    ) -> Result<rings::RecvQueue, Errno> {
        rings::RecvQueue::map_srq(transport, uhw, written, max_sge).map_err(|e| e.errno())
    }
}
