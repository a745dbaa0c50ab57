//! Queue-pair methods: `UVERBS_METHOD_QP_CREATE` and `QP_DESTROY` (object
//! `UVERBS_OBJECT_QP`; attribute specs of Linux 6.12's
//! `uverbs_std_types_qp.c`). There is no MODIFY_QP method.

use std::os::fd::RawFd;

use crate::command::QpType;
use crate::error::Errno;
use crate::transport::{Method, NewHandle, Out, OutBytes, Transport};
use uverbs_uapi as sys;

/// `QP_CREATE`: a queue pair, with the driver's answer (rxe:
/// `rxe_create_qp_resp` {rq_mi, sq_mi}, 32 bytes) in the caller's `uhw_out`.
#[doc(alias = "ibv_create_qp")]
#[doc(alias = "ibv_create_qp_ex")]
#[derive(Debug)]
pub struct QpCreate<'a> {
    qp_type: QpType,
    pd_handle: u32,
    send_cq: u32,
    recv_cq: u32,
    srq: Option<u32>,
    user_handle: u64,
    cap: sys::ib_uverbs_qp_cap,
    flags: u32,
    event_fd: Option<RawFd>,
    resp_cap: sys::ib_uverbs_qp_cap,
    resp_qp_num: u32,
    uhw_in: &'a [u8],
    uhw_out: &'a mut [u8],
}

/// The outputs of a framed [`QpCreate`].
#[derive(Debug)]
pub struct QpCreateOuts<'a> {
    /// The new QP's handle.
    pub handle: NewHandle,
    /// The real capacities.
    pub cap: Out<'a, sys::ib_uverbs_qp_cap>,
    /// The QP number.
    pub qp_num: Out<'a, u32>,
    /// The driver's answer.
    pub uhw: OutBytes<'a>,
}

/// What `QP_CREATE` answered (the driver's answer is in `uhw_out`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QpCreated {
    /// The QP's handle.
    pub handle: u32,
    /// The QP number.
    pub qp_num: u32,
    /// The real capacities.
    pub cap: sys::ib_uverbs_qp_cap,
}

impl<'a> QpCreate<'a> {
    /// A `qp_type` QP in PD `pd_handle` completing on `send_cq` and
    /// `recv_cq`, with at least `cap`; the driver writes into `uhw_out`.
    pub fn new(
        qp_type: QpType,
        pd_handle: u32,
        send_cq: u32,
        recv_cq: u32,
        cap: sys::ib_uverbs_qp_cap,
        uhw_out: &'a mut [u8],
    ) -> Self {
        QpCreate {
            qp_type,
            pd_handle,
            send_cq,
            recv_cq,
            srq: None,
            user_handle: 0,
            cap,
            flags: 0,
            event_fd: None,
            resp_cap: Default::default(),
            resp_qp_num: 0,
            uhw_in: &[],
            uhw_out,
        }
    }

    setters! {
        /// The value async events about the QP carry (default 0).
        pub fn user_handle(user_handle: u64) => user_handle = user_handle;
        /// Receive from shared receive queue `srq_handle`.
        pub fn srq(srq_handle: u32) => srq = Some(srq_handle);
    }

    /// Every send WR is signalled (`IB_UVERBS_QP_CREATE_SQ_SIG_ALL`).
    pub fn sq_sig_all(mut self, all: bool) -> Self {
        if all {
            self.flags |= sys::IB_UVERBS_QP_CREATE_SQ_SIG_ALL;
        } else {
            self.flags &= !sys::IB_UVERBS_QP_CREATE_SQ_SIG_ALL;
        }
        self
    }

    setters! {
        /// Async events about the QP go to this async event file (optional).
        pub fn event_fd(fd: RawFd) => event_fd = Some(fd);
    }

    /// The frame, in attribute-id order: HANDLE (IDR new), PD, SRQ (if
    /// set), SEND_CQ, RECV_CQ (IDRs), USER_HANDLE (u64), CAP (20 bytes),
    /// TYPE (const), FLAGS (if not 0), EVENT_FD (optional, if set),
    /// RESP_CAP (20 bytes out), RESP_QP_NUM (u32 out), UHW_OUT.
    pub fn method(&mut self, driver_id: u32) -> (Method<'_>, QpCreateOuts<'_>) {
        let mut m = Method::new(
            sys::UVERBS_OBJECT_QP,
            sys::UVERBS_METHOD_QP_CREATE,
            driver_id,
        );
        let handle = m.idr_new(sys::UVERBS_ATTR_CREATE_QP_HANDLE);
        m.idr_in(sys::UVERBS_ATTR_CREATE_QP_PD_HANDLE, self.pd_handle);
        if let Some(srq) = self.srq {
            m.idr_in(sys::UVERBS_ATTR_CREATE_QP_SRQ_HANDLE, srq);
        }
        m.idr_in(sys::UVERBS_ATTR_CREATE_QP_SEND_CQ_HANDLE, self.send_cq)
            .idr_in(sys::UVERBS_ATTR_CREATE_QP_RECV_CQ_HANDLE, self.recv_cq)
            .ptr_in(sys::UVERBS_ATTR_CREATE_QP_USER_HANDLE, &self.user_handle)
            .ptr_in(sys::UVERBS_ATTR_CREATE_QP_CAP, &self.cap)
            .const_in(sys::UVERBS_ATTR_CREATE_QP_TYPE, self.qp_type.raw().into());
        if self.flags != 0 {
            m.ptr_in(sys::UVERBS_ATTR_CREATE_QP_FLAGS, &self.flags);
        }
        if let Some(fd) = self.event_fd {
            m.idr_in(sys::UVERBS_ATTR_CREATE_QP_EVENT_FD, fd as u32)
                .optional();
        }
        let cap = m.ptr_out(sys::UVERBS_ATTR_CREATE_QP_RESP_CAP, &mut self.resp_cap);
        let qp_num = m.ptr_out(
            sys::UVERBS_ATTR_CREATE_QP_RESP_QP_NUM,
            &mut self.resp_qp_num,
        );
        if !self.uhw_in.is_empty() {
            m.uhw_in(self.uhw_in);
        }
        let uhw = m.uhw_out(self.uhw_out);
        (
            m,
            QpCreateOuts {
                handle,
                cap,
                qp_num,
                uhw,
            },
        )
    }

    /// Driver data for the create (`UHW_IN`; mlx5: the buffers it hands
    /// the kernel); none by default.
    pub fn uhw_in(mut self, uhw_in: &'a [u8]) -> Self {
        self.uhw_in = uhw_in;
        self
    }

    /// Sends the method; the driver's answer is then in `uhw_out`.
    ///
    /// # Safety
    ///
    /// As [`Method::invoke`]: the handles and the descriptor must be this
    /// context's; the QP is new, so nothing is destroyed.
    pub unsafe fn run(
        mut self,
        transport: &dyn Transport,
        driver_id: u32,
    ) -> Result<QpCreated, Errno> {
        let (method, outs) = self.method(driver_id);
        // SAFETY: the caller's promise; the frame points only at `self`'s
        // fields and `uhw_out`, borrowed across the call.
        let done = unsafe { method.invoke(transport) }?;
        let handle = done.handle(outs.handle).ok_or(Errno::PROTO)?;
        let cap = done.read(outs.cap).ok_or(Errno::PROTO)?;
        let qp_num = done.read(outs.qp_num).ok_or(Errno::PROTO)?;
        done.read_bytes(outs.uhw).ok_or(Errno::PROTO)?;
        Ok(QpCreated {
            handle,
            qp_num,
            cap,
        })
    }
}

destroy_method!(
    /// `QP_DESTROY`: destroys a QP; answers its async event count.
    #[doc(alias = "ibv_destroy_qp")]
    QpDestroy,
    UVERBS_OBJECT_QP,
    UVERBS_METHOD_QP_DESTROY,
    UVERBS_ATTR_DESTROY_QP_HANDLE,
    UVERBS_ATTR_DESTROY_QP_RESP,
    ib_uverbs_destroy_qp_resp,
    qp_handle,
    "QP",
    4
);
