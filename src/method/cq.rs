//! Completion-queue methods: `UVERBS_METHOD_CQ_CREATE` and `CQ_DESTROY`
//! (object `UVERBS_OBJECT_CQ`; attribute specs of Linux 6.12's
//! `uverbs_std_types_cq.c`).

use std::os::fd::RawFd;

use crate::error::Errno;
use crate::transport::{Method, NewHandle, Out, OutBytes, Transport};
use uverbs_uapi as sys;

/// `CQ_CREATE`: a completion queue, with the driver's answer (rxe:
/// `rxe_create_cq_resp`, 16 bytes) in the caller's `uhw_out`.
#[doc(alias = "ibv_create_cq")]
#[doc(alias = "ibv_icmd_create_cq")]
#[derive(Debug)]
pub struct CqCreate<'a> {
    cqe: u32,
    user_handle: u64,
    comp_vector: u32,
    comp_channel: Option<RawFd>,
    event_fd: Option<RawFd>,
    flags: u32,
    resp_cqe: u32,
    uhw_in: &'a [u8],
    uhw_out: &'a mut [u8],
}

/// The outputs of a framed [`CqCreate`].
#[derive(Debug)]
pub struct CqCreateOuts<'a> {
    /// The new CQ's handle.
    pub handle: NewHandle,
    /// The real number of entries.
    pub cqe: Out<'a, u32>,
    /// The driver's answer.
    pub uhw: OutBytes<'a>,
}

/// What `CQ_CREATE` answered (the driver's answer is in `uhw_out`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CqCreated {
    /// The CQ's handle.
    pub handle: u32,
    /// The real number of entries (rxe: slots - 1).
    pub cqe: u32,
}

impl<'a> CqCreate<'a> {
    /// A CQ of at least `cqe` entries whose events carry `user_handle`, on
    /// vector 0, without channel; the driver writes into `uhw_out`.
    pub fn new(cqe: u32, user_handle: u64, uhw_out: &'a mut [u8]) -> Self {
        CqCreate {
            cqe,
            user_handle,
            comp_vector: 0,
            comp_channel: None,
            event_fd: None,
            flags: 0,
            resp_cqe: 0,
            uhw_in: &[],
            uhw_out,
        }
    }

    setters! {
        /// Completion events go to this completion channel.
        pub fn comp_channel(fd: RawFd) => comp_channel = Some(fd);
        /// The completion vector (default 0).
        pub fn comp_vector(vector: u32) => comp_vector = vector;
        /// Async events about the CQ go to this async event file (sent as an
        /// optional attribute, as rdma-core does, so older kernels ignore it).
        pub fn event_fd(fd: RawFd) => event_fd = Some(fd);
        /// `IB_UVERBS_CQ_FLAGS_*` (rxe refuses any with `EOPNOTSUPP`); sent
        /// only when not zero.
        pub fn flags(flags: u32) => flags = flags;
    }

    /// The frame: HANDLE (IDR new), CQE (u32), USER_HANDLE (u64),
    /// COMP_CHANNEL (FD, if set), COMP_VECTOR (u32), FLAGS (if not 0),
    /// RESP_CQE (u32 out), EVENT_FD (FD, optional, if set), UHW_OUT.
    pub fn method(&mut self, driver_id: u32) -> (Method<'_>, CqCreateOuts<'_>) {
        let mut m = Method::new(
            sys::UVERBS_OBJECT_CQ,
            sys::UVERBS_METHOD_CQ_CREATE,
            driver_id,
        );
        let handle = m.idr_new(sys::UVERBS_ATTR_CREATE_CQ_HANDLE);
        m.ptr_in(sys::UVERBS_ATTR_CREATE_CQ_CQE, &self.cqe)
            .ptr_in(sys::UVERBS_ATTR_CREATE_CQ_USER_HANDLE, &self.user_handle);
        if let Some(fd) = self.comp_channel {
            // An FD attribute has the IDR's wire: len 0, the number in data.
            m.idr_in(sys::UVERBS_ATTR_CREATE_CQ_COMP_CHANNEL, fd as u32);
        }
        m.ptr_in(sys::UVERBS_ATTR_CREATE_CQ_COMP_VECTOR, &self.comp_vector);
        if self.flags != 0 {
            m.ptr_in(sys::UVERBS_ATTR_CREATE_CQ_FLAGS, &self.flags);
        }
        let cqe = m.ptr_out(sys::UVERBS_ATTR_CREATE_CQ_RESP_CQE, &mut self.resp_cqe);
        if let Some(fd) = self.event_fd {
            m.idr_in(sys::UVERBS_ATTR_CREATE_CQ_EVENT_FD, fd as u32)
                .optional();
        }
        if !self.uhw_in.is_empty() {
            m.uhw_in(self.uhw_in);
        }
        let uhw = m.uhw_out(self.uhw_out);
        (m, CqCreateOuts { handle, cqe, uhw })
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
    /// As [`Method::invoke`]: the CQ is new, so nothing is destroyed, but
    /// the descriptors must be this context's completion channel and async
    /// event file.
    pub unsafe fn run(
        mut self,
        transport: &dyn Transport,
        driver_id: u32,
    ) -> Result<CqCreated, Errno> {
        let (method, outs) = self.method(driver_id);
        // SAFETY: the caller's promise; the frame points only at `self`'s
        // fields and `uhw_out`, borrowed across the call.
        let done = unsafe { method.invoke(transport) }?;
        let handle = done.handle(outs.handle).ok_or(Errno::PROTO)?;
        let cqe = done.read(outs.cqe).ok_or(Errno::PROTO)?;
        // The kernel marks UHW_OUT written after every successful method
        // that has driver data.
        done.read_bytes(outs.uhw).ok_or(Errno::PROTO)?;
        Ok(CqCreated { handle, cqe })
    }
}

destroy_method!(
    /// `CQ_DESTROY`: destroys a CQ; answers its event counts.
    #[doc(alias = "ibv_destroy_cq")]
    CqDestroy,
    UVERBS_OBJECT_CQ,
    UVERBS_METHOD_CQ_DESTROY,
    UVERBS_ATTR_DESTROY_CQ_HANDLE,
    UVERBS_ATTR_DESTROY_CQ_RESP,
    ib_uverbs_destroy_cq_resp,
    cq_handle,
    "CQ",
    8
);
