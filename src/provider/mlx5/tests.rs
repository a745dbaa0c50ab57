//! The mlx5 control path's driver data on the recording fake kernel: what
//! each command carries, and the data path refused before any system call.
//! (Against rdma-core's libmlx5 itself: `oracle/tests/libmlx5.rs`.)

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
