//! Send work requests: what a send does ([`SendOp`]), with which local
//! memory ([`Payload`]), how ([`SendFlags`]) and, on a UD QP, to whom
//! ([`UdDest`]).

use std::marker::PhantomData;

use bitflags::bitflags;

use super::sge::Sge;

bitflags! {
    /// Send flags user space sets (`IB_SEND_*` of the kernel's `ib_verbs.h`,
    /// equal to libibverbs' `IBV_SEND_*`); `INLINE` (8) is set by the writer
    /// from the payload.
    #[doc(alias = "ibv_send_flags")]
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
    pub struct SendFlags: u32 {
        /// Wait for earlier RDMA READs and atomics before this one.
        const FENCE = 1;
        /// Produce a completion on success.
        const SIGNALED = 2;
        /// Set the solicited-event bit for the receiver.
        const SOLICITED = 4;
    }
}

/// A remote buffer: its address and the rkey of its region.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Remote {
    /// Remote virtual address.
    pub addr: u64,
    /// Remote key.
    pub rkey: u32,
}

/// What a send work request does. Immediate data is given in host order and
/// travels in network order, as libibverbs' `htonl(imm)`.
#[doc(alias = "ibv_wr_opcode")]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SendOp {
    /// SEND, or SEND_WITH_IMM with `imm`.
    #[doc(alias = "ibv_wr_send")]
    #[doc(alias = "ibv_wr_send_imm")]
    #[doc(alias = "rdma_post_send")]
    #[doc(alias = "rdma_post_sendv")]
    Send {
        /// Immediate data.
        imm: Option<u32>,
    },
    /// RDMA WRITE, or RDMA_WRITE_WITH_IMM with `imm`.
    #[doc(alias = "ibv_wr_rdma_write")]
    #[doc(alias = "ibv_wr_rdma_write_imm")]
    #[doc(alias = "rdma_post_write")]
    #[doc(alias = "rdma_post_writev")]
    RdmaWrite {
        /// Target.
        remote: Remote,
        /// Immediate data.
        imm: Option<u32>,
    },
    /// RDMA READ into the local SGEs.
    #[doc(alias = "ibv_wr_rdma_read")]
    #[doc(alias = "rdma_post_read")]
    #[doc(alias = "rdma_post_readv")]
    RdmaRead {
        /// Source.
        remote: Remote,
    },
    /// 64-bit compare-and-swap; the old value lands in the local SGE.
    #[doc(alias = "ibv_wr_atomic_cmp_swp")]
    CompareSwap {
        /// Target (8-byte aligned).
        remote: Remote,
        /// Expected value.
        compare: u64,
        /// New value.
        swap: u64,
    },
    /// 64-bit fetch-and-add; the old value lands in the local SGE.
    #[doc(alias = "ibv_wr_atomic_fetch_add")]
    FetchAdd {
        /// Target (8-byte aligned).
        remote: Remote,
        /// Addend.
        add: u64,
    },
    /// BIND_MW: binds a memory window to part of a memory region, as
    /// [`MemoryWindow::bind_request`](crate::mr::MemoryWindow::bind_request)
    /// built it; no payload (`Payload::Sges(&[])`). RC and UC QPs, rxe
    /// only. It completes as [`WcOpcode::BindMw`](crate::wr::WcOpcode::BindMw);
    /// a bind the device refuses completes with
    /// [`WcStatus::MwBindErr`](crate::wr::WcStatus::MwBindErr) and moves the
    /// QP to ERR.
    #[doc(alias = "IBV_WR_BIND_MW")]
    #[doc(alias = "ibv_wr_bind_mw")]
    BindMw(MwBind),
    /// LOCAL_INV: invalidates `rkey`, the key of a type-2 memory window
    /// bound through this QP; no payload. RC QPs, rxe only. It completes
    /// as [`WcOpcode::LocalInv`](crate::wr::WcOpcode::LocalInv); an rkey that
    /// names no valid type-2 window completes with
    /// [`WcStatus::LocQpOpErr`](crate::wr::WcStatus::LocQpOpErr) (the QP to ERR).
    #[doc(alias = "IBV_WR_LOCAL_INV")]
    #[doc(alias = "ibv_wr_local_inv")]
    LocalInv {
        /// The key to invalidate.
        rkey: u32,
    },
    /// SEND_WITH_INV: a SEND whose receiver also invalidates `rkey` (a
    /// type-2 window of the receiver's); its receive completion carries
    /// [`WcFlags::WITH_INVALIDATE`](crate::wr::WcFlags::WITH_INVALIDATE) and
    /// the key ([`WorkCompletion::invalidated_rkey`](crate::wr::WorkCompletion::invalidated_rkey)).
    /// RC QPs, rxe only.
    #[doc(alias = "IBV_WR_SEND_WITH_INV")]
    #[doc(alias = "ibv_wr_send_inv")]
    SendWithInv {
        /// The receiver's key to invalidate.
        rkey: u32,
    },
}

/// What a BIND_MW work request carries ([`SendOp::BindMw`]): the window's
/// key before and after the bind, the region's lkey, and the bound range
/// and access. Built only by
/// [`MemoryWindow::bind_request`](crate::mr::MemoryWindow::bind_request),
/// which checks it against the window and the region.
#[doc(alias = "ibv_mw_bind")]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MwBind {
    /// The window's key now (`mw_rkey`), which the device checks.
    pub(crate) mw_rkey: u32,
    /// The window's key once bound (`rkey`): the device takes its low 8 bits.
    pub(crate) rkey: u32,
    /// The region's lkey (`mr_lkey`).
    pub(crate) mr_lkey: u32,
    /// The first byte of the window (a virtual address in the region).
    pub(crate) addr: u64,
    /// The window's length in bytes (never 0).
    pub(crate) length: u64,
    /// `IB_UVERBS_ACCESS_REMOTE_*` bits of the window.
    pub(crate) access: u32,
}

impl MwBind {
    /// The window's key once this bind has been done: give it to the peer.
    pub fn rkey(&self) -> u32 {
        self.rkey
    }

    /// The window's key before the bind.
    pub fn previous_rkey(&self) -> u32 {
        self.mw_rkey
    }

    /// The address of the window's first byte.
    pub fn addr(&self) -> u64 {
        self.addr
    }

    /// The window's length in bytes.
    pub fn length(&self) -> u64 {
        self.length
    }
}

impl SendOp {
    /// The opcode's name, as errors report it.
    pub(crate) fn name(&self) -> &'static str {
        match self {
            SendOp::Send { imm: None } => "SEND",
            SendOp::Send { imm: Some(_) } => "SEND_WITH_IMM",
            SendOp::RdmaWrite { imm: None, .. } => "RDMA_WRITE",
            SendOp::RdmaWrite { imm: Some(_), .. } => "RDMA_WRITE_WITH_IMM",
            SendOp::RdmaRead { .. } => "RDMA_READ",
            SendOp::CompareSwap { .. } => "ATOMIC_CMP_AND_SWP",
            SendOp::FetchAdd { .. } => "ATOMIC_FETCH_AND_ADD",
            SendOp::BindMw(_) => "BIND_MW",
            SendOp::LocalInv { .. } => "LOCAL_INV",
            SendOp::SendWithInv { .. } => "SEND_WITH_INV",
        }
    }
}

/// The local side of a send: registered buffers, or bytes copied into the WQE.
#[derive(Clone, Copy, Debug)]
pub enum Payload<'a> {
    /// Gather from (or, for READ and atomics, scatter into) these buffers.
    #[doc(alias = "ibv_wr_set_sge")]
    #[doc(alias = "ibv_wr_set_sge_list")]
    Sges(&'a [Sge]),
    /// Copy these segments into the WQE now (`IBV_SEND_INLINE`): the buffers
    /// may be reused as soon as the writer returns, and need no lkey.
    #[doc(alias = "IBV_SEND_INLINE")]
    #[doc(alias = "ibv_wr_set_inline_data")]
    #[doc(alias = "ibv_wr_set_inline_data_list")]
    Inline(&'a [&'a [u8]]),
}

/// Destination of a send on a UD QP: an address handle, the peer's QP
/// number and its Q_Key (`wr.ud` of `ibv_send_wr`).
///
/// Built only from a live [`AddressHandle`](crate::qp::AddressHandle)
/// ([`UdDest::new`]), which it borrows: no stale or invented AH number
/// can be posted, and the AH cannot be dropped while a work request
/// holding this destination exists. The borrow ends with the work request,
/// but rxe reads the AH when it sends the WQE, after `post_send` returned:
/// keep the AH until the send's completion has been polled (or the QP is
/// destroyed). If rxe finds no AH of the QP's PD under the number (the AH
/// was dropped early, or belongs to another PD) it moves the QP to ERR:
/// the send and every later one complete with an error (on Linux 6.12
/// [`WcStatus::WrFlushErr`](crate::wr::WcStatus::WrFlushErr), the flush
/// overriding rxe's `LOC_QP_OP_ERR`). If rxe already gave the number of an
/// AH dropped early to a new AH of the same PD, the send goes there instead.
///
/// The AH cannot go while a destination made from it is in use:
///
/// ```compile_fail,E0505
/// # fn f(pd: &uverbs::ProtectionDomain, attr: &uverbs::qp::AhAttr) -> Result<(), uverbs::Error> {
/// let ah = pd.create_ah(attr)?;
/// let dest = uverbs::wr::UdDest::new(&ah, 0x11, 0x1111_1111);
/// drop(ah); // error: `ah` is borrowed by `dest`
/// let _still_used = dest;
/// # Ok(()) }
/// ```
//
// The borrow is of `()`, not of the AH type, so that the model does not
// depend on the objects: `UdDest::new` (in `ah.rs`) ties `'a` to the AH.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[doc(alias = "ibv_wr_set_ud_addr")]
#[doc(alias = "rdma_post_ud_send")]
pub struct UdDest<'a> {
    /// `rxe_create_ah_resp.ah_num` of the borrowed AH.
    pub(crate) ah_num: u32,
    /// The destination QP number.
    pub(crate) remote_qpn: u32,
    /// The destination Q_Key.
    pub(crate) remote_qkey: u32,
    /// The AH's address vector, where the driver's WQEs carry one (mlx5);
    /// borrowed from the AH like the rest.
    pub(crate) av: Option<&'a [u8; 48]>,
    _ah: PhantomData<&'a ()>,
}

impl<'a> UdDest<'a> {
    /// A destination naming AH number `ah_num`, borrowing nothing: only
    /// [`UdDest::new`], which ties `'a` to a live AH, and the ring tests
    /// call it.
    pub(crate) fn from_raw(ah_num: u32, remote_qpn: u32, remote_qkey: u32) -> Self {
        UdDest {
            ah_num,
            remote_qpn,
            remote_qkey,
            av: None,
            _ah: PhantomData,
        }
    }

    /// The same destination carrying the AH's address vector `av`.
    pub(crate) fn with_av(self, av: Option<&'a [u8; 48]>) -> Self {
        UdDest { av, ..self }
    }

    /// The AH number the WQE carries (`wr.ud.ah_num`).
    pub fn ah_num(&self) -> u32 {
        self.ah_num
    }

    /// The destination QP number.
    pub fn remote_qpn(&self) -> u32 {
        self.remote_qpn
    }

    /// The destination Q_Key.
    pub fn remote_qkey(&self) -> u32 {
        self.remote_qkey
    }
}

/// One send work request.
///
/// Built with [`SendWr::new`] and the chained setters; the fields stay
/// public to read and to change. New fields may come (`ibv_send_wr` grew
/// several), so it is `#[non_exhaustive]`: outside this crate, start from
/// `new`.
///
/// ```
/// # fn f(mr: &uverbs::MemoryRegion, peer: uverbs::wr::Remote) -> Result<(), Box<dyn std::error::Error>> {
/// use uverbs::wr::{Payload, SendFlags, SendOp, SendWr};
/// let sge = [mr.sge(..64)?];
/// let write = SendWr::new(7, SendOp::RdmaWrite { remote: peer, imm: None }, Payload::Sges(&sge))
///     .flags(SendFlags::SIGNALED | SendFlags::FENCE);
/// assert_eq!(write.wr_id, 7);
/// # Ok(()) }
/// ```
#[doc(alias = "ibv_send_wr")]
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub struct SendWr<'a> {
    /// Returned in the completion.
    pub wr_id: u64,
    /// The operation.
    pub op: SendOp,
    /// Fence, signaled, solicited.
    pub flags: SendFlags,
    /// Local buffers or inline data.
    pub payload: Payload<'a>,
    /// Destination, for sends on a UD QP only.
    pub ud: Option<UdDest<'a>>,
}

impl<'a> SendWr<'a> {
    /// `op` on `payload`, returning `wr_id` in its completion; signalled
    /// ([`SendFlags::SIGNALED`]: a QP created without `sq_sig_all` would
    /// otherwise never report it) and with no UD destination.
    pub fn new(wr_id: u64, op: SendOp, payload: Payload<'a>) -> Self {
        SendWr {
            wr_id,
            op,
            flags: SendFlags::SIGNALED,
            payload,
            ud: None,
        }
    }

    setters! {
        /// Replaces the flags (clear [`SendFlags::SIGNALED`] for an
        /// unsignalled request).
        pub fn flags(flags: SendFlags) => flags;
    }

    /// Sends to `dest` (UD QPs only; other QP types refuse the request).
    pub fn ud(mut self, dest: UdDest<'a>) -> Self {
        self.ud = Some(dest);
        self
    }
}
