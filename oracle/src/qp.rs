//! mlx5_ib's QPs (Linux 6.12, `drivers/infiniband/hw/mlx5/qp.c` and the
//! core's `uverbs_std_types_qp.c`, `uverbs_cmd.c`): CREATE_QP as the ioctl
//! method libibverbs 44 sends it, with mlx5's driver data (the queue
//! buffer, doorbell record and UAR page libmlx5 chose), MODIFY_QP as the
//! write command libibverbs sends through `INVOKE_WRITE`, with the core's
//! state-transition table for RC, UC and UD, and DESTROY_QP.
//!
//! What the device does with a QP once it is ready is `device.rs`.

use uverbs_uapi::*;
use zerocopy::{FromBytes, IntoBytes};

use crate::ioctl::{Call, Errno};
use crate::kernel::Mlx5Kernel;

/// The QP numbers handed out start here, one more for each QP (24-bit,
/// never reused within a kernel: the same sequence of commands gives the
/// same numbers, which the WQE comparisons rely on).
pub const FIRST_QPN: u32 = 0x100;
/// `MLX5_IB_INVALID_BFREG`: the answer's `bfreg_index` when libmlx5 named
/// the UAR page itself.
pub const INVALID_BFREG: u32 = 1 << 31;
/// `MLX5_USER_ASSIGNED_UIDX_MASK`: a user index is 24 bits; the all-ones
/// value is `MLX5_IB_DEFAULT_UIDX` and refused with CQE version 1.
const UIDX_MASK: u32 = 0x00ff_ffff;
/// `1 << log_max_qp_sz` of the emulated device (a ConnectX-5's 2^15).
pub const MAX_QP_WQES: u32 = 1 << 15;

/// `IB_QPT_*` the emulation models.
pub const QPT_RC: u8 = 2;
/// Unreliable connected.
pub const QPT_UC: u8 = 3;
/// Unreliable datagram.
pub const QPT_UD: u8 = 4;

/// `IB_QPS_*`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum QpState {
    /// Just created, or reset.
    Reset = 0,
    /// Initialised: receives may be posted.
    Init = 1,
    /// Ready to receive.
    Rtr = 2,
    /// Ready to send.
    Rts = 3,
    /// The error state: every WQE completes with a flush error.
    Err = 6,
}

impl QpState {
    fn from_raw(s: u8) -> Result<QpState, Errno> {
        Ok(match s {
            0 => QpState::Reset,
            1 => QpState::Init,
            2 => QpState::Rtr,
            3 => QpState::Rts,
            6 => QpState::Err,
            // SQD and SQE: not modelled.
            4 | 5 => return Err(libc::EOPNOTSUPP),
            _ => return Err(libc::EINVAL),
        })
    }
}

/// `IB_QP_*` attribute-mask bits (`ib_verbs.h`).
pub mod mask {
    /// The new state.
    pub const STATE: u32 = 1;
    /// The state the caller believes the QP is in.
    pub const CUR_STATE: u32 = 1 << 1;
    /// Remote access the QP allows.
    pub const ACCESS_FLAGS: u32 = 1 << 3;
    /// P_Key index.
    pub const PKEY_INDEX: u32 = 1 << 4;
    /// Port.
    pub const PORT: u32 = 1 << 5;
    /// Q_Key (UD).
    pub const QKEY: u32 = 1 << 6;
    /// The primary path.
    pub const AV: u32 = 1 << 7;
    /// Path MTU.
    pub const PATH_MTU: u32 = 1 << 8;
    /// Local ACK timeout.
    pub const TIMEOUT: u32 = 1 << 9;
    /// Retry count.
    pub const RETRY_CNT: u32 = 1 << 10;
    /// RNR retry count.
    pub const RNR_RETRY: u32 = 1 << 11;
    /// Receive PSN.
    pub const RQ_PSN: u32 = 1 << 12;
    /// Outstanding reads/atomics as initiator.
    pub const MAX_QP_RD_ATOMIC: u32 = 1 << 13;
    /// The alternate path.
    pub const ALT_PATH: u32 = 1 << 14;
    /// Minimum RNR NAK timer.
    pub const MIN_RNR_TIMER: u32 = 1 << 15;
    /// Send PSN.
    pub const SQ_PSN: u32 = 1 << 16;
    /// Outstanding reads/atomics as responder.
    pub const MAX_DEST_RD_ATOMIC: u32 = 1 << 17;
    /// Path migration state.
    pub const PATH_MIG_STATE: u32 = 1 << 18;
    /// Queue sizes (not modifiable here).
    pub const CAP: u32 = 1 << 19;
    /// The remote QP (RC, UC).
    pub const DEST_QPN: u32 = 1 << 20;
    /// `IB_QP_ATTR_STANDARD_BITS`: everything up to `IB_QP_RATE_LIMIT`'s
    /// neighbours that a write command may carry.
    pub const STANDARD: u32 = (1 << 21) - 1;
}

/// A QP the kernel made, and the device's view of its queues.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Qp {
    /// The uverbs handle.
    pub handle: u32,
    /// Its number (24 bits).
    pub qpn: u32,
    /// `IB_QPT_*`.
    pub qp_type: u8,
    /// The PD (a uverbs handle).
    pub pd: u32,
    /// The CQ handles for send and receive completions.
    pub send_cq: u32,
    /// See `send_cq`.
    pub recv_cq: u32,
    /// The capabilities answered (what libibverbs asked, receive sizes
    /// zeroed for a QP without an RQ, as mlx5_ib's `set_rq_size`).
    pub cap: ib_uverbs_qp_cap,
    /// The driver data it was created with.
    pub req: mlx5_ib_create_qp,
    /// The state MODIFY_QP last set.
    pub state: QpState,
    /// The connected peer (RC, UC), from MODIFY_QP.
    pub dest_qpn: u32,
    /// The Q_Key (UD).
    pub qkey: u32,
    /// `IB_ACCESS_REMOTE_*` the QP allows as responder.
    pub access: u32,
    /// The port (1).
    pub port: u8,
    /// The device's send consumer counter: basic blocks executed (the
    /// doorbell record's send counter is compared with its low 16 bits).
    pub sq_ci: u32,
    /// The device's receive consumer counter: receive WQEs consumed.
    pub rq_ci: u32,
    /// The SRQ it receives from (a uverbs handle), if any.
    pub srq: Option<u32>,
}

impl Qp {
    /// Bytes of the RQ, which the SQ follows in the buffer.
    pub fn sq_offset(&self) -> u64 {
        u64::from(self.req.rq_wqe_count) << self.req.rq_wqe_shift
    }
}

/// `ib_modify_qp_is_ok`'s table for the transitions of RC, UC and UD QPs
/// this emulation models: the attributes required and those allowed.
fn transition(cur: QpState, next: QpState, qp_type: u8) -> Option<(u32, u32)> {
    use mask::*;
    use QpState::*;
    let (ud, rc) = (qp_type == QPT_UD, qp_type == QPT_RC);
    Some(match (cur, next) {
        (_, Reset) | (_, Err) => (0, 0),
        (Reset, Init) if ud => (PKEY_INDEX | PORT | QKEY, 0),
        (Reset, Init) => (PKEY_INDEX | PORT | ACCESS_FLAGS, 0),
        (Init, Init) if ud => (0, PKEY_INDEX | PORT | QKEY),
        (Init, Init) => (0, PKEY_INDEX | PORT | ACCESS_FLAGS),
        (Init, Rtr) if ud => (0, PKEY_INDEX | QKEY),
        (Init, Rtr) => {
            let base = AV | PATH_MTU | DEST_QPN | RQ_PSN;
            let req = if rc {
                base | MAX_DEST_RD_ATOMIC | MIN_RNR_TIMER
            } else {
                base
            };
            (req, ALT_PATH | ACCESS_FLAGS | PKEY_INDEX)
        }
        (Rtr, Rts) if ud => (SQ_PSN, CUR_STATE | QKEY),
        (Rtr, Rts) => {
            let req = if rc {
                SQ_PSN | TIMEOUT | RETRY_CNT | RNR_RETRY | MAX_QP_RD_ATOMIC
            } else {
                SQ_PSN
            };
            let opt = CUR_STATE | ALT_PATH | ACCESS_FLAGS | PATH_MIG_STATE;
            (req, if rc { opt | MIN_RNR_TIMER } else { opt })
        }
        (Rts, Rts) if ud => (0, CUR_STATE | QKEY),
        (Rts, Rts) => (
            0,
            CUR_STATE
                | ACCESS_FLAGS
                | ALT_PATH
                | PATH_MIG_STATE
                | if rc { MIN_RNR_TIMER } else { 0 },
        ),
        _ => return None,
    })
}

impl Mlx5Kernel {
    /// `UVERBS_METHOD_QP_CREATE` and `mlx5_ib_create_qp` of a user RC, UC
    /// or UD QP.
    pub(crate) fn create_qp(&mut self, call: &mut Call) -> Result<(), Errno> {
        let context = self.context.ok_or(libc::EINVAL)?;
        let qp_type = call
            .input_u64(UVERBS_ATTR_CREATE_QP_TYPE)
            .ok_or(libc::EINVAL)? as u8;
        if !matches!(qp_type, QPT_RC | QPT_UC | QPT_UD) {
            // Raw packet, XRC, driver QPs: not modelled.
            return Err(libc::EOPNOTSUPP);
        }
        let obj = |id| call.handle(id).map(|h| h as u32).ok_or(libc::EINVAL);
        let (pd, send_cq, recv_cq) = (
            obj(UVERBS_ATTR_CREATE_QP_PD_HANDLE)?,
            obj(UVERBS_ATTR_CREATE_QP_SEND_CQ_HANDLE)?,
            obj(UVERBS_ATTR_CREATE_QP_RECV_CQ_HANDLE)?,
        );
        let srq = call
            .handle(UVERBS_ATTR_CREATE_QP_SRQ_HANDLE)
            .map(|h| h as u32);
        if srq.is_some_and(|h| !self.srqs.contains_key(&h)) {
            return Err(libc::EINVAL);
        }
        if !self.pds.contains_key(&pd)
            || !self.cqs.contains_key(&send_cq)
            || !self.cqs.contains_key(&recv_cq)
        {
            return Err(libc::EINVAL);
        }
        let cap_in = call.input(UVERBS_ATTR_CREATE_QP_CAP).ok_or(libc::EINVAL)?;
        let (mut cap, _) = ib_uverbs_qp_cap::read_from_prefix(&cap_in).map_err(|_| libc::EINVAL)?;
        let flags = call.input_u64(UVERBS_ATTR_CREATE_QP_FLAGS).unwrap_or(0) as u32;
        if flags & !IB_UVERBS_QP_CREATE_SQ_SIG_ALL != 0 {
            return Err(libc::EOPNOTSUPP);
        }
        // process_udata_size: a request shorter than up to ece_options is
        // taken as none (and a user QP needs one); check_ucmd_data: the
        // bytes past `reserved` must be zero.
        let uhw = call.input(UVERBS_ATTR_UHW_IN).unwrap_or_default();
        let min = std::mem::offset_of!(mlx5_ib_create_qp, ece_options);
        if uhw.len() < min {
            return Err(libc::EINVAL);
        }
        let last = std::mem::offset_of!(mlx5_ib_create_qp, reserved);
        if uhw.len() > last && uhw[last..].iter().any(|&b| b != 0) {
            return Err(libc::EINVAL);
        }
        let mut req = mlx5_ib_create_qp::default();
        let n = uhw.len().min(size_of::<mlx5_ib_create_qp>());
        req.as_mut_bytes()[..n].copy_from_slice(&uhw[..n]);

        // process_vendor_flags: what a ConnectX-5 allows an RC/UC/UD QP.
        let known = MLX5_QP_FLAG_SIGNATURE
            | MLX5_QP_FLAG_SCATTER_CQE
            | MLX5_QP_FLAG_ALLOW_SCATTER_CQE
            | MLX5_QP_FLAG_PACKET_BASED_CREDIT_MODE
            | MLX5_QP_FLAG_BFREG_INDEX
            | MLX5_QP_FLAG_UAR_PAGE_INDEX;
        if req.flags & !known != 0 {
            return Err(libc::EINVAL);
        }
        // get_qp_user_index / verify_assign_uidx with CQE version 1.
        if context.max_cqe_version >= 1 && (req.uidx & !UIDX_MASK != 0 || req.uidx == UIDX_MASK) {
            return Err(libc::EINVAL);
        }
        // _create_user_qp: the UAR page the QP rings.
        match req.flags & (MLX5_QP_FLAG_UAR_PAGE_INDEX | MLX5_QP_FLAG_BFREG_INDEX) {
            MLX5_QP_FLAG_UAR_PAGE_INDEX => {
                // The firmware refuses a page of another user.
                if !self.dyn_uars.values().any(|u| u.page_id == req.bfreg_index) {
                    return Err(libc::EINVAL);
                }
            }
            MLX5_QP_FLAG_BFREG_INDEX => {
                // bfregn_to_uar_index of a dynamic register: none here
                // (libmlx5 with dynamic UARs names pages).
                return Err(libc::EINVAL);
            }
            // alloc_bfreg from the context's static registers: none with
            // dynamic UARs.
            0 if self.tot_bfregs == 0 => return Err(libc::ENOMEM),
            0 => {}
            _ => return Err(libc::EINVAL),
        }
        // set_rq_size with driver data.
        if cap.max_recv_wr > MAX_QP_WQES {
            return Err(libc::EINVAL);
        }
        // qp_has_rq: none on an SRQ or without receive WQEs.
        if cap.max_recv_wr == 0 || srq.is_some() {
            cap.max_recv_wr = 0;
            cap.max_recv_sge = 0;
            req.rq_wqe_count = 0;
            req.rq_wqe_shift = 0;
        } else if req.rq_wqe_shift >= 31
            || (1u32 << req.rq_wqe_shift) / 16 < u32::from(req.flags & MLX5_QP_FLAG_SIGNATURE != 0)
        {
            return Err(libc::EINVAL);
        }
        // set_user_buf_size.
        if req.sq_wqe_count != 0 && !req.sq_wqe_count.is_power_of_two() {
            return Err(libc::EINVAL);
        }
        if req.sq_wqe_count > MAX_QP_WQES {
            return Err(libc::EINVAL);
        }
        let rq_bytes = u64::from(req.rq_wqe_count) << req.rq_wqe_shift;
        if rq_bytes > u64::from(i32::MAX as u32)
            || rq_bytes + (u64::from(req.sq_wqe_count) << 6) > u64::from(i32::MAX as u32)
        {
            return Err(libc::EINVAL);
        }
        // mlx5_umem_find_best_quantized_pgoff: the buffer's offset in its
        // page in 64-byte quanta.
        if req.buf_addr % 64 != 0 || req.db_addr == 0 {
            return Err(libc::EINVAL);
        }

        let (handle, qpn) = (self.handle(), FIRST_QPN + self.qps_created);
        let resp = mlx5_ib_create_qp_resp {
            bfreg_index: if req.flags & MLX5_QP_FLAG_UAR_PAGE_INDEX != 0 {
                INVALID_BFREG
            } else {
                0
            },
            ..Default::default()
        };
        call.set_data(UVERBS_ATTR_CREATE_QP_HANDLE, u64::from(handle))?;
        call.write_output(UVERBS_ATTR_CREATE_QP_RESP_CAP, cap.as_bytes())?;
        call.write_output(UVERBS_ATTR_CREATE_QP_RESP_QP_NUM, &qpn.to_le_bytes())?;
        let room = call.output_len(UVERBS_ATTR_UHW_OUT).unwrap_or(0);
        if room > 0 {
            let bytes = resp.as_bytes();
            call.write_output(UVERBS_ATTR_UHW_OUT, &bytes[..room.min(bytes.len())])?;
        }
        self.qps_created += 1;
        self.qps.insert(
            handle,
            Qp {
                handle,
                qpn,
                qp_type,
                pd,
                send_cq,
                recv_cq,
                cap,
                req,
                state: QpState::Reset,
                dest_qpn: 0,
                qkey: 0,
                access: 0,
                port: 0,
                sq_ci: 0,
                rq_ci: 0,
                srq,
            },
        );
        Ok(())
    }

    /// `UVERBS_METHOD_QP_DESTROY`: no events were reported.
    pub(crate) fn destroy_qp(&mut self, call: &mut Call) -> Result<(), Errno> {
        let handle = call
            .handle(UVERBS_ATTR_DESTROY_QP_HANDLE)
            .ok_or(libc::EINVAL)?;
        self.qps.remove(&(handle as u32)).ok_or(libc::EINVAL)?;
        let resp = ib_uverbs_destroy_qp_resp::default();
        call.write_output(UVERBS_ATTR_DESTROY_QP_RESP, resp.as_bytes())
    }

    /// The write command MODIFY_QP (`ib_uverbs_modify_qp`, `modify_qp`),
    /// then what `mlx5_ib_modify_qp` checks of a path.
    pub(crate) fn modify_qp(&mut self, cmd: &ib_uverbs_modify_qp) -> Result<(), Errno> {
        if cmd.attr_mask & !mask::STANDARD != 0 {
            return Err(libc::EOPNOTSUPP);
        }
        let ethernet = !self.infiniband_port;
        let qp = self.qps.get_mut(&cmd.qp_handle).ok_or(libc::EINVAL)?;
        let m = cmd.attr_mask;
        if m & mask::PORT != 0 && cmd.port_num != 1 {
            return Err(libc::EINVAL);
        }
        if m & mask::AV != 0 {
            if cmd.dest.port_num != 1 && cmd.dest.port_num != 0 {
                return Err(libc::EINVAL);
            }
            // RoCE addresses by GID: a path without a GRH is refused
            // (mlx5_set_path: "AH without GRH on Ethernet").
            if ethernet && cmd.dest.is_global == 0 {
                return Err(libc::EINVAL);
            }
        }
        let cur = if m & mask::CUR_STATE != 0 {
            QpState::from_raw(cmd.cur_qp_state)?
        } else {
            qp.state
        };
        let next = if m & mask::STATE != 0 {
            QpState::from_raw(cmd.qp_state)?
        } else {
            cur
        };
        let (required, optional) = transition(cur, next, qp.qp_type).ok_or(libc::EINVAL)?;
        let given = m & !(mask::STATE | mask::CUR_STATE);
        if given & required != required || given & !(required | optional) != 0 {
            return Err(libc::EINVAL);
        }
        if m & mask::QKEY != 0 {
            qp.qkey = cmd.qkey;
        }
        if m & mask::DEST_QPN != 0 {
            qp.dest_qpn = cmd.dest_qp_num & 0x00ff_ffff;
        }
        if m & mask::ACCESS_FLAGS != 0 {
            qp.access = cmd.qp_access_flags;
        }
        if m & mask::PORT != 0 {
            qp.port = cmd.port_num;
        }
        qp.state = next;
        if next == QpState::Reset {
            // The hardware's queues start over (libmlx5 zeroes its
            // doorbell record and indices after a reset too).
            qp.sq_ci = 0;
            qp.rq_ci = 0;
        }
        Ok(())
    }
}
