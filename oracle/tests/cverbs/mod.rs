//! libibverbs 44's C API as the oracle tests call it: the structs of
//! verbs.h they fill or read, the exported functions, and the context ops
//! slots through which verbs.h's static inline post and poll calls go.
//! Constants are libibverbs' enum values.

#![allow(dead_code)]

use std::ffi::{c_int, c_void};

/// `pub struct ibv_qp`'s first fields (libibverbs 44's verbs.h).
#[repr(C)]
pub struct IbvQp {
    pub context: *mut c_void,
    pub qp_context: *mut c_void,
    pub pd: *mut c_void,
    pub send_cq: *mut c_void,
    pub recv_cq: *mut c_void,
    pub srq: *mut c_void,
    pub handle: u32,
    pub qp_num: u32,
}

/// `pub struct ibv_mr`.
#[repr(C)]
pub struct IbvMr {
    pub context: *mut c_void,
    pub pd: *mut c_void,
    pub addr: *mut c_void,
    pub length: usize,
    pub handle: u32,
    pub lkey: u32,
    pub rkey: u32,
}

/// `pub struct ibv_qp_cap`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct IbvQpCap {
    pub max_send_wr: u32,
    pub max_recv_wr: u32,
    pub max_send_sge: u32,
    pub max_recv_sge: u32,
    pub max_inline_data: u32,
}

/// `pub struct ibv_qp_init_attr`.
#[repr(C)]
pub struct IbvQpInitAttr {
    pub qp_context: *mut c_void,
    pub send_cq: *mut c_void,
    pub recv_cq: *mut c_void,
    pub srq: *mut c_void,
    pub cap: IbvQpCap,
    pub qp_type: u32,
    pub sq_sig_all: c_int,
}

/// `pub struct ibv_ah_attr` (with `pub struct ibv_global_route` first).
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct IbvAhAttr {
    pub dgid: [u8; 16],
    pub flow_label: u32,
    pub sgid_index: u8,
    pub hop_limit: u8,
    pub traffic_class: u8,
    pub dlid: u16,
    pub sl: u8,
    pub src_path_bits: u8,
    pub static_rate: u8,
    pub is_global: u8,
    pub port_num: u8,
}

/// `pub struct ibv_qp_attr`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct IbvQpAttr {
    pub qp_state: u32,
    pub cur_qp_state: u32,
    pub path_mtu: u32,
    pub path_mig_state: u32,
    pub qkey: u32,
    pub rq_psn: u32,
    pub sq_psn: u32,
    pub dest_qp_num: u32,
    pub qp_access_flags: u32,
    pub cap: IbvQpCap,
    pub ah_attr: IbvAhAttr,
    pub alt_ah_attr: IbvAhAttr,
    pub pkey_index: u16,
    pub alt_pkey_index: u16,
    pub en_sqd_async_notify: u8,
    pub sq_draining: u8,
    pub max_rd_atomic: u8,
    pub max_dest_rd_atomic: u8,
    pub min_rnr_timer: u8,
    pub port_num: u8,
    pub timeout: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    pub alt_port_num: u8,
    pub alt_timeout: u8,
    pub rate_limit: u32,
}

/// `pub struct ibv_srq_attr`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IbvSrqAttr {
    pub max_wr: u32,
    pub max_sge: u32,
    pub srq_limit: u32,
}

/// `pub struct ibv_srq_init_attr`.
#[repr(C)]
pub struct IbvSrqInitAttr {
    pub srq_context: *mut c_void,
    pub attr: IbvSrqAttr,
}

/// `pub struct ibv_sge`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct IbvSge {
    pub addr: u64,
    pub length: u32,
    pub lkey: u32,
}

/// `pub struct ibv_send_wr`: the `wr` union as four words (rdma: address,
/// rkey; atomic: address, compare_add, swap, rkey; ud: ah, remote QPN
/// and Q_Key), then the `qp_type` union and the bind/TSO union.
#[repr(C)]
pub struct IbvSendWr {
    pub wr_id: u64,
    pub next: *mut IbvSendWr,
    pub sg_list: *mut IbvSge,
    pub num_sge: c_int,
    pub opcode: u32,
    pub send_flags: u32,
    pub imm_data: u32,
    pub wr: [u64; 4],
    pub qp_type: u64,
    pub tail: [u64; 6],
}
const _: () = assert!(size_of::<IbvSendWr>() == 128);

/// `pub struct ibv_recv_wr`.
#[repr(C)]
pub struct IbvRecvWr {
    pub wr_id: u64,
    pub next: *mut IbvRecvWr,
    pub sg_list: *mut IbvSge,
    pub num_sge: c_int,
}

/// `pub struct ibv_wc` (compared field by field with uverbs' completions:
/// [`ours_wc`]).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct IbvWc {
    pub wr_id: u64,
    pub status: u32,
    pub opcode: u32,
    pub vendor_err: u32,
    pub byte_len: u32,
    pub imm_data: u32,
    pub qp_num: u32,
    pub src_qp: u32,
    pub wc_flags: u32,
    pub pkey_index: u16,
    pub slid: u16,
    pub sl: u8,
    pub dlid_path_bits: u8,
}
const _: () = assert!(size_of::<IbvWc>() == 48);

extern "C" {
    pub static verbs_provider_mlx5: u8;
    pub fn ibv_static_providers(unused: *mut c_void, ...);
    pub fn ibv_get_device_list(num: *mut c_int) -> *mut *mut c_void;
    pub fn ibv_free_device_list(list: *mut *mut c_void);
    pub fn ibv_open_device(dev: *mut c_void) -> *mut c_void;
    pub fn ibv_close_device(ctx: *mut c_void) -> c_int;
    pub fn ibv_alloc_pd(ctx: *mut c_void) -> *mut c_void;
    pub fn ibv_dealloc_pd(pd: *mut c_void) -> c_int;
    pub fn ibv_reg_mr(pd: *mut c_void, addr: *mut c_void, len: usize, access: c_int) -> *mut IbvMr;
    pub fn ibv_dereg_mr(mr: *mut IbvMr) -> c_int;
    pub fn ibv_create_cq(
        ctx: *mut c_void,
        cqe: c_int,
        cq_context: *mut c_void,
        channel: *mut c_void,
        comp_vector: c_int,
    ) -> *mut c_void;
    pub fn ibv_destroy_cq(cq: *mut c_void) -> c_int;
    pub fn ibv_create_qp(pd: *mut c_void, attr: *mut IbvQpInitAttr) -> *mut IbvQp;
    pub fn ibv_modify_qp(qp: *mut IbvQp, attr: *mut IbvQpAttr, mask: c_int) -> c_int;
    pub fn ibv_destroy_qp(qp: *mut IbvQp) -> c_int;
    pub fn ibv_create_ah(pd: *mut c_void, attr: *mut IbvAhAttr) -> *mut c_void;
    pub fn ibv_create_srq(pd: *mut c_void, attr: *mut IbvSrqInitAttr) -> *mut c_void;
    pub fn ibv_modify_srq(srq: *mut c_void, attr: *mut IbvSrqAttr, mask: c_int) -> c_int;
    pub fn ibv_query_srq(srq: *mut c_void, attr: *mut IbvSrqAttr) -> c_int;
    pub fn ibv_destroy_srq(srq: *mut c_void) -> c_int;
    pub fn ibv_destroy_ah(ah: *mut c_void) -> c_int;
}

pub type PostSend = unsafe extern "C" fn(*mut IbvQp, *mut IbvSendWr, *mut *mut IbvSendWr) -> c_int;
pub type PostRecv = unsafe extern "C" fn(*mut IbvQp, *mut IbvRecvWr, *mut *mut IbvRecvWr) -> c_int;
pub type PollCq = unsafe extern "C" fn(*mut c_void, c_int, *mut IbvWc) -> c_int;
pub type PostSrqRecv =
    unsafe extern "C" fn(*mut c_void, *mut IbvRecvWr, *mut *mut IbvRecvWr) -> c_int;

/// `pub struct ibv_context_ops` slots (after the context's device pointer):
/// the static inline `ibv_post_send`, `ibv_post_recv`, `ibv_poll_cq`,
/// `ibv_post_srq_recv` of verbs.h call through these.
pub const OPS: usize = 8;
pub const POLL_CQ: usize = 11;
pub const POST_SRQ_RECV: usize = 20;
pub const POST_SEND: usize = 25;
pub const POST_RECV: usize = 26;

/// The context's function pointer in ops slot `slot`.
///
/// # Safety
///
/// `ctx` is a live `pub struct ibv_context`; `F` is the slot's type.
pub unsafe fn op<F: Copy>(ctx: *mut c_void, slot: usize) -> F {
    // SAFETY: the ops table follows the device pointer; each slot is a
    // function pointer, which libmlx5 filled for these three.
    unsafe { ctx.cast::<u8>().add(OPS + 8 * slot).cast::<F>().read() }
}

// ibv_qp_type, ibv_qp_state, ibv_wr_opcode, ibv_send_flags,
// ibv_wc_opcode, ibv_wc_status, ibv_access_flags, ibv_qp_attr_mask.
pub const RC: u32 = 2;
pub const UD: u32 = 4;
pub const INIT: u32 = 1;
pub const RTR: u32 = 2;
pub const RTS: u32 = 3;
pub const WR_WRITE: u32 = 0;
pub const WR_WRITE_IMM: u32 = 1;
pub const WR_SEND: u32 = 2;
pub const WR_SEND_IMM: u32 = 3;
pub const WR_READ: u32 = 4;
pub const WR_CAS: u32 = 5;
pub const WR_FAA: u32 = 6;
pub const SIGNALED: u32 = 2;
pub const INLINE: u32 = 8;
pub const WC_SEND: u32 = 0;
pub const WC_WRITE: u32 = 1;
pub const WC_READ: u32 = 2;
pub const WC_CAS: u32 = 3;
pub const WC_FAA: u32 = 4;
pub const WC_RECV: u32 = 128;
pub const WC_RECV_IMM: u32 = 129;
pub const SUCCESS: u32 = 0;
pub const LOC_PROT_ERR: u32 = 4;
pub const WR_FLUSH_ERR: u32 = 5;
pub const REM_ACCESS_ERR: u32 = 10;
pub const WITH_IMM: u32 = 2;
pub const LOCAL_WRITE: c_int = 1;
pub const ALL_ACCESS: u32 = 1 | 2 | 4 | 8;
pub const QKEY: u32 = 0x1111_1111;

pub const UC: u32 = 3;
pub const FENCE: u32 = 1;
pub const SOLICITED: u32 = 4;

/// `ibv_qp_attr_mask` bits the steps below use.
mod mask {
    pub const STATE: i32 = 1;
    pub const ACCESS_FLAGS: i32 = 1 << 3;
    pub const PKEY_INDEX: i32 = 1 << 4;
    pub const PORT: i32 = 1 << 5;
    pub const QKEY: i32 = 1 << 6;
    pub const AV: i32 = 1 << 7;
    pub const PATH_MTU: i32 = 1 << 8;
    pub const TIMEOUT: i32 = 1 << 9;
    pub const RETRY_CNT: i32 = 1 << 10;
    pub const RNR_RETRY: i32 = 1 << 11;
    pub const RQ_PSN: i32 = 1 << 12;
    pub const MAX_QP_RD_ATOMIC: i32 = 1 << 13;
    pub const MIN_RNR_TIMER: i32 = 1 << 15;
    pub const SQ_PSN: i32 = 1 << 16;
    pub const MAX_DEST_RD_ATOMIC: i32 = 1 << 17;
    pub const DEST_QPN: i32 = 1 << 20;
}

/// libibverbs' form of `uverbs_oracle::fixtures::connect_steps`: RESET →
/// INIT → RTR → RTS towards QP `peer` over the InfiniBand port (LID 1),
/// every remote access allowed, with the RC-only values when `rc`.
pub fn c_connect_steps(peer: u32, rc: bool) -> [(IbvQpAttr, c_int); 3] {
    use mask::*;
    let init = IbvQpAttr {
        qp_state: INIT,
        port_num: 1,
        qp_access_flags: ALL_ACCESS,
        ..Default::default()
    };
    let mut rtr = IbvQpAttr {
        qp_state: RTR,
        path_mtu: 3,
        dest_qp_num: peer,
        ah_attr: IbvAhAttr {
            dlid: 1,
            port_num: 1,
            ..Default::default()
        },
        ..Default::default()
    };
    let mut rts = IbvQpAttr {
        qp_state: RTS,
        ..Default::default()
    };
    let (mut rtr_mask, mut rts_mask) = (STATE | AV | PATH_MTU | RQ_PSN | DEST_QPN, STATE | SQ_PSN);
    if rc {
        (rtr.max_dest_rd_atomic, rtr.min_rnr_timer) = (1, 12);
        rtr_mask |= MAX_DEST_RD_ATOMIC | MIN_RNR_TIMER;
        (rts.timeout, rts.retry_cnt, rts.rnr_retry, rts.max_rd_atomic) = (14, 7, 7, 1);
        rts_mask |= TIMEOUT | RETRY_CNT | RNR_RETRY | MAX_QP_RD_ATOMIC;
    }
    [
        (init, STATE | ACCESS_FLAGS | PKEY_INDEX | PORT),
        (rtr, rtr_mask),
        (rts, rts_mask),
    ]
}

/// libibverbs' form of `uverbs_oracle::fixtures::ud_steps`.
pub fn c_ud_steps() -> [(IbvQpAttr, c_int); 3] {
    use mask::*;
    [
        (
            IbvQpAttr {
                qp_state: INIT,
                port_num: 1,
                qkey: self::QKEY,
                ..Default::default()
            },
            STATE | PKEY_INDEX | PORT | mask::QKEY,
        ),
        (
            IbvQpAttr {
                qp_state: RTR,
                ..Default::default()
            },
            STATE,
        ),
        (
            IbvQpAttr {
                qp_state: RTS,
                ..Default::default()
            },
            STATE | SQ_PSN,
        ),
    ]
}

/// Applies `steps` to a libmlx5 QP, asserting each succeeds.
///
/// # Safety
///
/// `qp` is a live QP of libibverbs.
pub unsafe fn c_modify_all(qp: *mut IbvQp, steps: [(IbvQpAttr, c_int); 3]) {
    for (mut attr, mask) in steps {
        // SAFETY: the caller's promise; the attributes are libibverbs' layout.
        let ret = unsafe { ibv_modify_qp(qp, &mut attr, mask) };
        assert_eq!(ret, 0, "ibv_modify_qp to {}", attr.qp_state);
    }
}

/// Registers libmlx5 with the static libibverbs, which lists no device
/// without it (docs/mlx5.md: "Linking").
pub fn register_mlx5() {
    // SAFETY: the provider's descriptor is a static of the linked archive;
    // the list ends with NULL.
    unsafe {
        ibv_static_providers(
            std::ptr::null_mut(),
            std::ptr::addr_of!(verbs_provider_mlx5),
            std::ptr::null::<c_void>(),
        )
    };
}

/// uverbs' completion as libibverbs reports it, for comparison.
pub fn ours_wc(w: &uverbs::wr::WorkCompletion) -> IbvWc {
    let r = w.as_raw();
    IbvWc {
        wr_id: r.wr_id,
        status: r.status,
        opcode: r.opcode,
        vendor_err: r.vendor_err,
        byte_len: r.byte_len,
        imm_data: r.ex,
        qp_num: r.qp_num,
        src_qp: r.src_qp,
        // The kernel's flags as libibverbs': WITH_INVALIDATE 4 is 8.
        wc_flags: (r.wc_flags & 3) | if r.wc_flags & 4 != 0 { 8 } else { 0 },
        pkey_index: r.pkey_index,
        slid: r.slid,
        sl: r.sl,
        dlid_path_bits: r.dlid_path_bits,
    }
}
