//! The mlx5 provider on its own: the control path's driver data on the
//! recording fake kernel, the data path refused there before any system
//! call, and the queue sizing and CQE reading with numbers libmlx5 44 was
//! seen to use. (Against rdma-core's libmlx5 itself: `oracle/tests/`.)

use std::sync::Arc;

use uverbs_uapi as sys;
use zerocopy::FromBytes;

use super::GET_CONTEXT_REQ;
use crate::provider::driver::DriverId;
use crate::transport::RecordingTransport;
use crate::{Context, Error};

fn mlx5_context() -> (Arc<RecordingTransport>, Context) {
    let fake = Arc::new(RecordingTransport::new());
    let ctx = Context::over_fake(Some(DriverId::MLX5), Box::new(fake.clone()));
    (fake, ctx)
}

#[test]
fn get_context_carries_the_request_mlx5_requires_and_room_for_its_answer() {
    let (fake, _ctx) = mlx5_context();
    let cmds = fake.commands();
    let get = cmds
        .iter()
        .find(|c| c.code == sys::IB_USER_VERBS_CMD_GET_CONTEXT)
        .expect("GET_CONTEXT sent");
    let (req, rest) = sys::mlx5_ib_alloc_ucontext_req_v2::read_from_prefix(&get.uhw_in).unwrap();
    assert!(rest.is_empty(), "exactly the 32-byte v2 request");
    assert_eq!(req, GET_CONTEXT_REQ);
    assert_eq!(
        (req.total_num_bfregs, req.num_low_latency_bfregs, req.flags),
        (16, 4, 0),
        "libmlx5's defaults, without DEVX"
    );
    assert_eq!(req.max_cqe_version, 1);
    assert_eq!(
        req.lib_caps,
        sys::MLX5_LIB_CAP_4K_UAR | sys::MLX5_LIB_CAP_DYN_UAR
    );
    assert_eq!(get.uhw_out_len, 72, "room for mlx5_ib_alloc_ucontext_resp");
}

#[test]
fn alloc_pd_leaves_room_for_the_pd_number() {
    let (fake, ctx) = mlx5_context();
    let _pd = ctx.alloc_pd().unwrap();
    let alloc = fake
        .commands()
        .into_iter()
        .find(|c| c.code == sys::IB_USER_VERBS_CMD_ALLOC_PD)
        .expect("ALLOC_PD sent");
    assert_eq!(alloc.uhw_out_len, 4, "mlx5_ib_alloc_pd_resp");
    assert!(alloc.uhw_in.is_empty());
}

#[test]
fn the_data_path_is_refused_before_any_system_call() {
    let (fake, ctx) = mlx5_context();
    let sent = fake.count();
    let err = ctx.create_cq(16, None).unwrap_err();
    assert!(matches!(err, Error::Unsupported { .. }), "{err:?}");
    assert!(err.to_string().contains("mlx5"), "{err}");
    assert_eq!(fake.count(), sent, "nothing sent");
    let pd = ctx.alloc_pd().unwrap();
    let sent = fake.count();
    let err = pd.create_srq(&crate::qp::SrqInit::new(16, 1)).unwrap_err();
    assert!(matches!(err, Error::Unsupported { .. }), "{err:?}");
    assert_eq!(fake.count(), sent, "no CREATE_SRQ sent");
}

/// `mlx5_alloc_srq_buf`'s numbers: twice the requests and one for the
/// wait queue, rounded up to a power of two; WQEs of the next power of
/// two of 16 + 16 per SGE bytes, at least 32; the free list's tail one
/// below the next power of two above `max_wr`.
#[test]
fn srq_layout_is_libmlx5s() {
    use super::srq::SrqLayout;
    let p = cx5_params();
    let of = |wr, sge| {
        SrqLayout::of(
            p.max_srq_recv_wr,
            u32::from(p.max_rq_desc_sz),
            p.max_recv_wr,
            wr,
            sge,
        )
    };
    let l = of(16, 1).unwrap();
    assert_eq!((l.max, l.wqe_shift, l.max_gs, l.tail), (64, 5, 1, 31));
    assert_eq!(l.waitq, Some((32, 63)));
    assert_eq!(l.bytes(), 64 * 32);
    let l = of(100, 2).unwrap();
    assert_eq!((l.max, l.wqe_shift, l.max_gs, l.tail), (256, 6, 3, 127));
    let l = of(3, 0).unwrap();
    assert_eq!((l.max, l.wqe_shift, l.max_gs, l.tail), (8, 5, 1, 3));
    // Too large for a wait queue: one more than asked.
    let l = of(20_000, 31).unwrap();
    assert_eq!(
        (l.max, l.wqe_shift, l.max_gs, l.tail),
        (32_768, 9, 31, 32_767)
    );
    assert_eq!(l.waitq, None);
    assert_eq!(of(32_769, 1), Err(crate::error::Errno::INVAL));
    assert_eq!(of(16, 33), Err(crate::error::Errno::INVAL));
}

#[test]
fn other_drivers_send_no_context_request() {
    for driver in [None, Some(DriverId::RXE), Some(DriverId::SIW)] {
        let fake = Arc::new(RecordingTransport::new());
        let _ctx = Context::over_fake(driver, Box::new(fake.clone()));
        let cmds = fake.commands();
        let get = cmds
            .iter()
            .find(|c| c.code == sys::IB_USER_VERBS_CMD_GET_CONTEXT)
            .unwrap();
        assert!(get.uhw_in.is_empty(), "{driver:?}");
    }
}

/// The emulated ConnectX-5's answer (oracle/src/kernel.rs): 512-byte send
/// and receive descriptors, 2^15 basic blocks and receive WQEs.
fn cx5_params() -> super::Params {
    super::Params {
        max_sq_desc_sz: 512,
        max_rq_desc_sz: 512,
        max_send_wqebb: 1 << 15,
        max_recv_wr: 1 << 15,
        max_srq_recv_wr: 1 << 15,
        ece: false,
    }
}

fn cap(
    send_wr: u32,
    recv_wr: u32,
    send_sge: u32,
    recv_sge: u32,
    inline: u32,
) -> sys::ib_uverbs_qp_cap {
    sys::ib_uverbs_qp_cap {
        max_send_wr: send_wr,
        max_recv_wr: recv_wr,
        max_send_sge: send_sge,
        max_recv_sge: recv_sge,
        max_inline_data: inline,
    }
}

/// What libmlx5 44 sent in CREATE_QP for an RC QP of 16 requests, 2 SGEs
/// and 64 inline bytes (oracle/tests/model_traffic.rs): 128 basic blocks,
/// 16 receive WQEs of 32 bytes; and the limits it answered.
#[test]
fn qp_layout_is_libmlx5s() {
    let l = super::qp::Layout::of(
        &cx5_params(),
        crate::command::QpType::Rc,
        &cap(16, 16, 2, 2, 64),
    )
    .unwrap();
    assert_eq!((l.sq_wqe_cnt, l.rq_wqe_cnt, l.rq_wqe_shift), (128, 16, 5));
    // 320-byte WQEs (192 reserved + 68 of inline, in 64-byte blocks): 16
    // of them in 128 blocks, 124 inline bytes.
    assert_eq!(
        (l.sq_max_post, l.max_inline, l.sq_max_gs, l.rq_max_gs),
        (25, 124, 2, 2)
    );
    // One SGE, no inline: 208 bytes round up to 256.
    let l = super::qp::Layout::of(
        &cx5_params(),
        crate::command::QpType::Rc,
        &cap(8, 8, 1, 1, 0),
    )
    .unwrap();
    assert_eq!((l.sq_wqe_cnt, l.sq_max_post, l.max_inline), (32, 8, 60));
    assert_eq!((l.rq_wqe_cnt, l.rq_wqe_shift), (8, 4));
    // A receive queue of at least one 64-byte block: 2 receives get 4.
    let l = super::qp::Layout::of(
        &cx5_params(),
        crate::command::QpType::Rc,
        &cap(8, 2, 1, 1, 0),
    )
    .unwrap();
    assert_eq!((l.rq_wqe_cnt, l.rq_wqe_shift), (4, 4));
    // No send queue.
    let l = super::qp::Layout::of(
        &cx5_params(),
        crate::command::QpType::Rc,
        &cap(0, 4, 1, 1, 0),
    )
    .unwrap();
    assert_eq!((l.sq_wqe_cnt, l.max_inline), (0, 0));
}

/// libmlx5's refusals: more SGEs or inline bytes than a 512-byte
/// descriptor holds, more receives than the device has.
#[test]
fn qp_layout_refuses_what_libmlx5_refuses() {
    let p = cx5_params();
    // (512 - 192) / 16 = 20 SGEs at most.
    assert!(super::qp::Layout::of(&p, crate::command::QpType::Rc, &cap(1, 1, 20, 1, 0)).is_ok());
    assert!(super::qp::Layout::of(&p, crate::command::QpType::Rc, &cap(1, 1, 21, 1, 0)).is_err());
    // 192 + align(4 + 316, 16) = 512; one byte more does not fit.
    assert!(super::qp::Layout::of(&p, crate::command::QpType::Rc, &cap(1, 1, 1, 1, 316)).is_ok());
    assert!(super::qp::Layout::of(&p, crate::command::QpType::Rc, &cap(1, 1, 1, 1, 317)).is_err());
    assert!(super::qp::Layout::of(
        &p,
        crate::command::QpType::Rc,
        &cap(1, (1 << 15) + 1, 1, 1, 0)
    )
    .is_err());
    assert!(super::qp::Layout::of(&p, crate::command::QpType::Rc, &cap(1, 1, 1, 33, 0)).is_err());
}

/// A responder CQE with immediate data and a GRH, and an error CQE,
/// become the completions libmlx5 makes of them.
#[test]
fn cqes_become_libmlx5s_work_completions() {
    use super::cq::{completion, Cqe, CqeBytes};
    let mut b = [0u8; 64];
    b[17] = 0x83; // ml_path: path bits 3
    b[22..24].copy_from_slice(&7u16.to_be_bytes()); // slid
    b[24..28].copy_from_slice(&(2u32 << 28 | 5 << 24 | 0x1234).to_be_bytes());
    b[32..36].copy_from_slice(&9u32.to_be_bytes()); // user index
    b[36..40].copy_from_slice(&0xdead_0003u32.to_be_bytes());
    b[44..48].copy_from_slice(&100u32.to_be_bytes());
    b[56..60].copy_from_slice(&0x42u32.to_be_bytes());
    b[63] = 0x3 << 4; // RESP_SEND_IMM, owner 0
    let b = CqeBytes(b);
    let cqe = Cqe::of(&b);
    assert_eq!(cqe.opcode(), 3);
    assert_eq!((cqe.uidx(), cqe.qpn(), cqe.byte_cnt()), (9, 0x42, 100));
    let ids = super::qp::WrIds::for_tests(&[0x77]);
    let wc = completion(&cqe, &ids).unwrap();
    assert_eq!(
        (wc.wr_id, wc.status, wc.opcode, wc.byte_len),
        (0x77, 0, 128, 100)
    );
    assert_eq!(
        (wc.src_qp, wc.sl, wc.slid, wc.dlid_path_bits),
        (0x1234, 5, 7, 3)
    );
    assert_eq!(wc.wc_flags, 1 | 2, "GRH and WITH_IMM");
    assert_eq!(
        wc.ex.to_ne_bytes(),
        [0xde, 0xad, 0x00, 0x03],
        "immediate in network order"
    );
    assert_eq!(wc.pkey_index, 3);
    // A requester error: remote access, the vendor syndrome passed on.
    let mut e = [0u8; 64];
    e[54] = 0x88;
    e[55] = 0x13;
    e[60..62].copy_from_slice(&0u16.to_be_bytes());
    e[63] = 0xd << 4;
    let wc = completion(&Cqe::of(&CqeBytes(e)), &ids).unwrap();
    assert_eq!((wc.status, wc.vendor_err), (10, 0x88));
}
