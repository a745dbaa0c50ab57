//! Completion-queue commands: CREATE_CQ, DESTROY_CQ, REQ_NOTIFY_CQ and
//! RESIZE_CQ (the
//! write() forms; the native `UVERBS_METHOD_CQ_CREATE` is
//! [`crate::method::CqCreate`]).

use uverbs_uapi as sys;

/// `CREATE_CQ`: a completion queue of at least `cqe` entries.
///
/// rxe answers `rxe_create_cq_resp` (the ring's `mminfo`) as UHW out: give
/// [`transport::run`](crate::transport) a 16-byte `uhw_out`.
#[doc(alias = "ibv_create_cq")]
#[doc(alias = "ibv_cmd_create_cq")]
#[derive(Clone, Copy, Debug)]
pub struct CreateCq {
    req: sys::ib_uverbs_create_cq,
}

impl CreateCq {
    /// A CQ of at least `cqe` entries whose events carry `user_handle`, on
    /// completion vector 0, without completion channel.
    pub fn new(cqe: u32, user_handle: u64) -> Self {
        CreateCq {
            req: sys::ib_uverbs_create_cq {
                user_handle,
                cqe,
                comp_channel: -1,
                ..Default::default()
            },
        }
    }

    setters! {
        /// Completion events go to this completion channel descriptor.
        pub fn comp_channel(fd: i32) => req.comp_channel;
        /// The completion vector (default 0).
        pub fn comp_vector(vector: u32) => req.comp_vector;
    }
}

// Mirrors ib_uverbs_create_cq{,_resp}; the request starts with `response`.
write_command_of_request!(
    CreateCq,
    IB_USER_VERBS_CMD_CREATE_CQ,
    ib_uverbs_create_cq,
    uverbs_uapi::ib_uverbs_create_cq_resp
);

destroy_by_handle!(
    /// `DESTROY_CQ`: destroys a CQ (`EBUSY` while a QP uses it); the answer
    /// counts the completion and async events reported for it.
    #[doc(alias = "ibv_destroy_cq")]
    #[doc(alias = "ibv_cmd_destroy_cq")]
    DestroyCq,
    IB_USER_VERBS_CMD_DESTROY_CQ,
    ib_uverbs_destroy_cq,
    ib_uverbs_destroy_cq_resp,
    cq_handle,
    "CQ"
);

/// `REQ_NOTIFY_CQ`: arms a CQ so that its next completion (or next
/// solicited one) raises one event on its completion channel.
#[doc(alias = "ibv_req_notify_cq")]
#[doc(alias = "ibv_cmd_req_notify_cq")]
#[derive(Clone, Copy, Debug)]
pub struct ReqNotifyCq {
    req: sys::ib_uverbs_req_notify_cq,
}

impl ReqNotifyCq {
    /// Arm CQ `cq_handle`; `solicited_only` waits for a solicited completion.
    pub fn new(cq_handle: u32, solicited_only: bool) -> Self {
        ReqNotifyCq {
            req: sys::ib_uverbs_req_notify_cq {
                cq_handle,
                solicited_only: solicited_only.into(),
            },
        }
    }
}

// Mirrors ib_uverbs_req_notify_cq; no response.
write_command_of_request!(
    ReqNotifyCq,
    IB_USER_VERBS_CMD_REQ_NOTIFY_CQ,
    ib_uverbs_req_notify_cq,
    (),
    handle = cq_handle
);

/// `RESIZE_CQ`: gives a CQ room for at least `cqe` entries, keeping the
/// completions not yet polled.
///
/// rxe answers `rxe_resize_cq_resp` (the new ring's `mminfo`) as UHW out:
/// give [`transport::run`](crate::transport) a 16-byte `uhw_out`. Drivers
/// without `resize_cq` (siw) answer `EOPNOTSUPP`.
#[doc(alias = "ibv_resize_cq")]
#[doc(alias = "ibv_cmd_resize_cq")]
#[derive(Clone, Copy, Debug)]
pub struct ResizeCq {
    req: sys::ib_uverbs_resize_cq,
}

impl ResizeCq {
    /// Resize CQ `cq_handle` to at least `cqe` entries.
    pub fn new(cq_handle: u32, cqe: u32) -> Self {
        ResizeCq {
            req: sys::ib_uverbs_resize_cq {
                cq_handle,
                cqe,
                ..Default::default()
            },
        }
    }
}

// Mirrors ib_uverbs_resize_cq{,_resp}; the request starts with `response`.
write_command_of_request!(
    ResizeCq,
    IB_USER_VERBS_CMD_RESIZE_CQ,
    ib_uverbs_resize_cq,
    uverbs_uapi::ib_uverbs_resize_cq_resp,
    handle = cq_handle
);
