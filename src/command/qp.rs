//! Queue-pair commands: CREATE_QP, MODIFY_QP, QUERY_QP, DESTROY_QP,
//! ATTACH_MCAST and DETACH_MCAST (the write() forms; the native
//! `UVERBS_METHOD_QP_CREATE` is [`crate::method::QpCreate`]). MODIFY_QP and
//! the multicast commands have no native method: rdma-core always sends
//! them as write().

use super::qp_attr::{QpAttr, QpAttrMask, QpState, QpTransitionError, QpType};
use uverbs_uapi as sys;

/// `CREATE_QP`: a queue pair of `qp_type` in PD `pd_handle`, completing on
/// `send_cq` and `recv_cq`, with at least the capacities `cap`.
///
/// rxe answers `rxe_create_qp_resp` (RQ ring first, then SQ) as UHW out:
/// give the transport a 32-byte `uhw_out`. rxe refuses any UHW in.
#[doc(alias = "ibv_create_qp")]
#[doc(alias = "ibv_cmd_create_qp")]
#[derive(Clone, Copy, Debug)]
pub struct CreateQp {
    req: sys::ib_uverbs_create_qp,
}

impl CreateQp {
    /// A QP without SRQ whose WRs are signalled only when they ask.
    pub fn new(
        qp_type: QpType,
        pd_handle: u32,
        send_cq: u32,
        recv_cq: u32,
        cap: sys::ib_uverbs_qp_cap,
    ) -> Self {
        CreateQp {
            req: sys::ib_uverbs_create_qp {
                pd_handle,
                send_cq_handle: send_cq,
                recv_cq_handle: recv_cq,
                max_send_wr: cap.max_send_wr,
                max_recv_wr: cap.max_recv_wr,
                max_send_sge: cap.max_send_sge,
                max_recv_sge: cap.max_recv_sge,
                max_inline_data: cap.max_inline_data,
                qp_type: qp_type.raw(),
                ..Default::default()
            },
        }
    }

    setters! {
        /// The value async events about this QP carry (default 0).
        pub fn user_handle(user_handle: u64) => req.user_handle;
    }

    /// Every send WR completes with a completion (`sq_sig_all`).
    pub fn sq_sig_all(mut self, all: bool) -> Self {
        self.req.sq_sig_all = all.into();
        self
    }

    /// Receive from the shared receive queue `srq_handle`.
    pub fn srq(mut self, srq_handle: u32) -> Self {
        self.req.srq_handle = srq_handle;
        self.req.is_srq = 1;
        self
    }
}

// Mirrors ib_uverbs_create_qp{,_resp}; the request starts with `response`.
write_command_of_request!(
    CreateQp,
    IB_USER_VERBS_CMD_CREATE_QP,
    ib_uverbs_create_qp,
    uverbs_uapi::ib_uverbs_create_qp_resp
);

/// `MODIFY_QP`: the 112-byte `ib_uverbs_modify_qp` whose `attr_mask` comes
/// from the [`QpAttr`] fields set. No response.
#[doc(alias = "ibv_modify_qp")]
#[doc(alias = "ibv_cmd_modify_qp")]
#[derive(Clone, Copy, Debug)]
pub struct ModifyQp {
    req: sys::ib_uverbs_modify_qp,
}

impl ModifyQp {
    /// Apply `attr` to QP `qp_handle`, unchecked: the kernel judges it.
    pub fn new(qp_handle: u32, attr: &QpAttr) -> Self {
        ModifyQp {
            req: attr.request(qp_handle),
        }
    }

    /// Apply `attr` to a `qp_type` QP now in `current`, after
    /// [`QpAttr::check`]: an invalid transition or a missing attribute is a
    /// typed error and nothing is built.
    pub fn checked(
        qp_handle: u32,
        qp_type: QpType,
        current: QpState,
        attr: &QpAttr,
    ) -> Result<Self, QpTransitionError> {
        attr.check(qp_type, current)?;
        Ok(Self::new(qp_handle, attr))
    }

    /// The mask that will be sent.
    pub fn mask(&self) -> QpAttrMask {
        QpAttrMask::from_bits_retain(self.req.attr_mask)
    }
}

// Mirrors ib_uverbs_modify_qp; no response (and no `response` field).
write_command_of_request!(
    ModifyQp,
    IB_USER_VERBS_CMD_MODIFY_QP,
    ib_uverbs_modify_qp,
    (),
    handle = qp_handle
);

/// `QUERY_QP`: a QP's current attributes (the kernel fills every field
/// whatever the mask; libibverbs sends the caller's mask).
#[doc(alias = "ibv_query_qp")]
#[doc(alias = "ibv_cmd_query_qp")]
#[derive(Clone, Copy, Debug)]
pub struct QueryQp {
    req: sys::ib_uverbs_query_qp,
}

impl QueryQp {
    /// Query QP `qp_handle` for the attributes in `mask`.
    pub fn new(qp_handle: u32, mask: QpAttrMask) -> Self {
        QueryQp {
            req: sys::ib_uverbs_query_qp {
                qp_handle,
                attr_mask: mask.bits(),
                ..Default::default()
            },
        }
    }
}

// Mirrors ib_uverbs_query_qp{,_resp}; the request starts with `response`.
write_command_of_request!(
    QueryQp,
    IB_USER_VERBS_CMD_QUERY_QP,
    ib_uverbs_query_qp,
    uverbs_uapi::ib_uverbs_query_qp_resp,
    handle = qp_handle
);

destroy_by_handle!(
    /// `DESTROY_QP`: destroys a QP; the answer counts the async events
    /// reported for it.
    #[doc(alias = "ibv_destroy_qp")]
    #[doc(alias = "ibv_cmd_destroy_qp")]
    DestroyQp,
    IB_USER_VERBS_CMD_DESTROY_QP,
    ib_uverbs_destroy_qp,
    ib_uverbs_destroy_qp_resp,
    qp_handle,
    "QP"
);

/// ATTACH_MCAST and DETACH_MCAST: the same request under two codes.
macro_rules! multicast_command {
    ($(#[$doc:meta])* $name:ident, $code:ident, $request:ident) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug)]
        pub struct $name {
            req: sys::$request,
        }

        impl $name {
            /// QP `qp_handle` and the group with GID `gid` (network order)
            /// and LID `mlid` (ignored on RoCE).
            pub fn new(qp_handle: u32, gid: [u8; 16], mlid: u16) -> Self {
                $name {
                    req: sys::$request {
                        gid,
                        qp_handle,
                        mlid,
                        reserved: 0,
                    },
                }
            }
        }

        // Mirrors the kernel's request; no response (and no `response`
        // field).
        write_command_of_request!($name, $code, $request, (), handle = qp_handle);
    };
}

multicast_command!(
    /// `ATTACH_MCAST`: QP `qp_handle` (UD) receives what is sent to the
    /// group. The kernel answers 0 for a group the QP is attached to
    /// already, and refuses to destroy the QP while any is attached
    /// (`EBUSY`).
    #[doc(alias = "ibv_attach_mcast")]
    #[doc(alias = "ibv_cmd_attach_mcast")]
    AttachMcast,
    IB_USER_VERBS_CMD_ATTACH_MCAST,
    ib_uverbs_attach_mcast
);

multicast_command!(
    /// `DETACH_MCAST`: QP `qp_handle` leaves the group; `EINVAL` if it
    /// was not attached to it.
    #[doc(alias = "ibv_detach_mcast")]
    #[doc(alias = "ibv_cmd_detach_mcast")]
    DetachMcast,
    IB_USER_VERBS_CMD_DETACH_MCAST,
    ib_uverbs_detach_mcast
);
