//! Completions: what a completion queue hands back, one per ended work
//! request.
//!
//! A [`WorkCompletion`] is the kernel's `ib_uverbs_wc` itself, the 48 bytes
//! rxe writes into a CQ slot, behind typed accessors: polling rxe copies
//! each slot whole, and nothing is decoded until asked for (siw's CQEs are
//! translated into the same layout as they are read). [`WcStatus`] and
//! [`WcOpcode`] keep a value this crate does not know as `Unknown(raw)`.

use std::fmt;

use bitflags::bitflags;

use uverbs_uapi::{
    ib_uverbs_wc, IB_UVERBS_WC_BIND_MW, IB_UVERBS_WC_COMP_SWAP, IB_UVERBS_WC_FETCH_ADD,
    IB_UVERBS_WC_LOCAL_INV, IB_UVERBS_WC_RDMA_READ, IB_UVERBS_WC_RDMA_WRITE, IB_UVERBS_WC_SEND,
};

bitflags! {
    /// Completion flags as the kernel writes them (its `IB_WC_*` flags:
    /// note WITH_INVALIDATE is 4, where libibverbs' `IBV_WC_WITH_INV` is 8).
    #[doc(alias = "ibv_wc_flags")]
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
    pub struct WcFlags: u32 {
        /// A GRH was present (always on rxe receives).
        const GRH = 1;
        /// The completion carries immediate data
        /// ([`WorkCompletion::imm_data`]).
        const WITH_IMM = 2;
        /// The completion carries the rkey it invalidated
        /// ([`WorkCompletion::invalidated_rkey`]).
        const WITH_INVALIDATE = 4;
    }
}

kernel_enum! {
    /// Completion status (the kernel's `enum ib_wc_status`, libibverbs'
    /// `enum ibv_wc_status`).
    #[doc(alias = "ibv_wc_status")]
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    #[non_exhaustive]
    pub enum WcStatus {
        /// A value this crate does not know.
        Unknown(u32),
        /// Success.
        Success = 0,
        /// Local length error.
        LocLenErr = 1,
        /// Local QP operation error.
        LocQpOpErr = 2,
        /// Local EE context operation error.
        LocEecOpErr = 3,
        /// Local protection error (e.g. an lkey of another PD).
        LocProtErr = 4,
        /// Flushed: the QP went to the error state first.
        WrFlushErr = 5,
        /// Memory window bind error.
        MwBindErr = 6,
        /// Bad response.
        BadRespErr = 7,
        /// Local access error.
        LocAccessErr = 8,
        /// Remote invalid request.
        RemInvReqErr = 9,
        /// Remote access error (e.g. the rkey lacks REMOTE_WRITE).
        RemAccessErr = 10,
        /// Remote operation error.
        RemOpErr = 11,
        /// Transport retry counter exceeded.
        RetryExcErr = 12,
        /// RNR retry counter exceeded.
        RnrRetryExcErr = 13,
        /// Local RDD violation.
        LocRddViolErr = 14,
        /// Remote invalid RD request.
        RemInvRdReqErr = 15,
        /// Remote aborted.
        RemAbortErr = 16,
        /// Invalid EE context number.
        InvEecnErr = 17,
        /// Invalid EE context state.
        InvEecStateErr = 18,
        /// Fatal error.
        FatalErr = 19,
        /// Response timeout.
        RespTimeoutErr = 20,
        /// General error.
        GeneralErr = 21,
    }
}

impl WcStatus {
    /// What the status means, in a few words (`"remote access error"`),
    /// for messages: also its `Display`.
    #[doc(alias = "ibv_wc_status_str")]
    pub fn description(self) -> &'static str {
        match self {
            WcStatus::Unknown(_) => "a status this crate does not know",
            WcStatus::Success => "success",
            WcStatus::LocLenErr => "local length error",
            WcStatus::LocQpOpErr => "local QP operation error",
            WcStatus::LocEecOpErr => "local EE context operation error",
            WcStatus::LocProtErr => "local protection error",
            WcStatus::WrFlushErr => "flushed: the QP went to the error state first",
            WcStatus::MwBindErr => "memory window bind error",
            WcStatus::BadRespErr => "bad response",
            WcStatus::LocAccessErr => "local access error",
            WcStatus::RemInvReqErr => "remote invalid request",
            WcStatus::RemAccessErr => "remote access error",
            WcStatus::RemOpErr => "remote operation error",
            WcStatus::RetryExcErr => "transport retry counter exceeded",
            WcStatus::RnrRetryExcErr => "RNR retry counter exceeded",
            WcStatus::LocRddViolErr => "local RDD violation",
            WcStatus::RemInvRdReqErr => "remote invalid RD request",
            WcStatus::RemAbortErr => "remote aborted",
            WcStatus::InvEecnErr => "invalid EE context number",
            WcStatus::InvEecStateErr => "invalid EE context state",
            WcStatus::FatalErr => "fatal error",
            WcStatus::RespTimeoutErr => "response timeout",
            WcStatus::GeneralErr => "general error",
        }
    }
}

/// [`WcStatus::description`], and the raw value of an unknown status.
impl std::fmt::Display for WcStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WcStatus::Unknown(raw) => write!(f, "unknown completion status {raw}"),
            known => f.write_str(known.description()),
        }
    }
}

/// The kernel's completion opcode of a receive (`IB_WC_RECV`).
pub(crate) const IB_WC_RECV: u32 = 1 << 7;
/// The kernel's completion opcode of an RDMA WRITE with immediate that
/// consumed a receive (`IB_WC_RECV_RDMA_WITH_IMM`).
const IB_WC_RECV_RDMA_WITH_IMM: u32 = IB_WC_RECV + 1;

/// Completion opcode (`IB_UVERBS_WC_*`, and the kernel's `IB_WC_RECV*` for
/// receives; libibverbs' `enum ibv_wc_opcode`).
#[doc(alias = "ibv_wc_opcode")]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum WcOpcode {
    /// SEND.
    Send,
    /// RDMA WRITE.
    RdmaWrite,
    /// RDMA READ.
    RdmaRead,
    /// Compare-and-swap.
    CompSwap,
    /// Fetch-and-add.
    FetchAdd,
    /// Memory window bind.
    BindMw,
    /// Local invalidate.
    LocalInv,
    /// A receive (`IB_WC_RECV`, 128).
    Recv,
    /// An RDMA WRITE with immediate consumed a receive (`IB_WC_RECV_RDMA_WITH_IMM`, 129).
    RecvRdmaWithImm,
    /// A value this crate does not know.
    Unknown(u32),
}

impl WcOpcode {
    /// The opcode the kernel's `raw` stands for.
    #[inline]
    pub(crate) const fn from_raw(raw: u32) -> Self {
        match raw {
            IB_UVERBS_WC_SEND => WcOpcode::Send,
            IB_UVERBS_WC_RDMA_WRITE => WcOpcode::RdmaWrite,
            IB_UVERBS_WC_RDMA_READ => WcOpcode::RdmaRead,
            IB_UVERBS_WC_COMP_SWAP => WcOpcode::CompSwap,
            IB_UVERBS_WC_FETCH_ADD => WcOpcode::FetchAdd,
            IB_UVERBS_WC_BIND_MW => WcOpcode::BindMw,
            IB_UVERBS_WC_LOCAL_INV => WcOpcode::LocalInv,
            IB_WC_RECV => WcOpcode::Recv,
            IB_WC_RECV_RDMA_WITH_IMM => WcOpcode::RecvRdmaWithImm,
            other => WcOpcode::Unknown(other),
        }
    }

    /// The kernel's value (`Unknown` gives back its own).
    pub(crate) const fn to_raw(self) -> u32 {
        match self {
            WcOpcode::Send => IB_UVERBS_WC_SEND,
            WcOpcode::RdmaWrite => IB_UVERBS_WC_RDMA_WRITE,
            WcOpcode::RdmaRead => IB_UVERBS_WC_RDMA_READ,
            WcOpcode::CompSwap => IB_UVERBS_WC_COMP_SWAP,
            WcOpcode::FetchAdd => IB_UVERBS_WC_FETCH_ADD,
            WcOpcode::BindMw => IB_UVERBS_WC_BIND_MW,
            WcOpcode::LocalInv => IB_UVERBS_WC_LOCAL_INV,
            WcOpcode::Recv => IB_WC_RECV,
            WcOpcode::RecvRdmaWithImm => IB_WC_RECV_RDMA_WITH_IMM,
            WcOpcode::Unknown(raw) => raw,
        }
    }
}

/// One completion: the kernel's `ib_uverbs_wc`, read through accessors.
///
/// It is the 48 bytes a CQ slot holds, unchanged (`#[repr(transparent)]`):
/// [`CompletionQueue::poll`](crate::CompletionQueue::poll) copies each one
/// out whole, and an accessor decodes only the field it reads.
/// [`from_raw`](Self::from_raw) builds one from the kernel's struct (for
/// tests, or completions from elsewhere); [`as_raw`](Self::as_raw) gives
/// it back. [`Default`] is all zero: a buffer for `poll` to fill.
///
/// ```
/// use uverbs::wr::{WcFlags, WcOpcode, WcStatus, WorkCompletion};
/// use uverbs::uverbs_uapi::ib_uverbs_wc;
///
/// let wc = WorkCompletion::from_raw(ib_uverbs_wc {
///     wr_id: 7,
///     opcode: 128, // IB_WC_RECV
///     byte_len: 64,
///     wc_flags: WcFlags::WITH_IMM.bits(),
///     ex: 0x1234_5678u32.to_be(), // imm_data is big-endian
///     ..Default::default()
/// });
/// assert!(wc.is_success());
/// assert_eq!((wc.wr_id(), wc.status(), wc.opcode()), (7, WcStatus::Success, Some(WcOpcode::Recv)));
/// assert_eq!(wc.imm_data(), Some(0x1234_5678));
/// assert_eq!(wc.invalidated_rkey(), None);
/// ```
#[doc(alias = "ibv_wc")]
#[doc(alias = "ib_uverbs_wc")]
#[repr(transparent)]
#[derive(Clone, Copy, Default, PartialEq, Eq)]
pub struct WorkCompletion {
    raw: ib_uverbs_wc,
}

const _: () = assert!(size_of::<WorkCompletion>() == size_of::<ib_uverbs_wc>());
const _: () = assert!(align_of::<WorkCompletion>() == align_of::<ib_uverbs_wc>());

impl WorkCompletion {
    /// The completion the kernel's `raw` is.
    #[inline]
    pub const fn from_raw(raw: ib_uverbs_wc) -> Self {
        WorkCompletion { raw }
    }

    /// `out` as the kernel's structs, for a provider to copy CQ slots into.
    #[inline]
    pub(crate) fn as_raw_slice_mut(out: &mut [WorkCompletion]) -> &mut [ib_uverbs_wc] {
        let len = out.len();
        // SAFETY: `WorkCompletion` is `#[repr(transparent)]` over
        // `ib_uverbs_wc`, so the slice has the same layout, length and
        // validity (every bit pattern of the struct is a valid completion);
        // the borrow of `out` carries over.
        unsafe { std::slice::from_raw_parts_mut(out.as_mut_ptr().cast::<ib_uverbs_wc>(), len) }
    }

    /// The kernel's struct, as the CQ held it.
    #[inline]
    pub const fn as_raw(&self) -> &ib_uverbs_wc {
        &self.raw
    }

    /// This completion with its work request id replaced (an owned QP
    /// gives back the caller's id in place of its tagged one).
    pub(crate) fn with_wr_id(mut self, wr_id: u64) -> Self {
        self.raw.wr_id = wr_id;
        self
    }

    /// The id of the completed work request.
    #[inline]
    pub fn wr_id(&self) -> u64 {
        self.raw.wr_id
    }

    /// Its status.
    #[inline]
    pub fn status(&self) -> WcStatus {
        WcStatus::from_raw(self.raw.status)
    }

    /// Whether the status is [`WcStatus::Success`].
    #[inline]
    pub fn is_success(&self) -> bool {
        self.raw.status == WcStatus::Success.to_raw()
    }

    /// Its opcode, on success only: `None` on an error completion, whose
    /// opcode libibverbs documents as undefined (rxe and siw leave there
    /// whatever the ring slot held, which reads as `Send` as often as not).
    #[inline]
    #[doc(alias = "ibv_wc_read_opcode")]
    pub fn opcode(&self) -> Option<WcOpcode> {
        self.is_success()
            .then(|| WcOpcode::from_raw(self.raw.opcode))
    }

    /// The opcode field whatever the status (the providers' tests check
    /// what their CQE translation wrote there, error completions too).
    #[cfg(test)]
    pub(crate) fn raw_opcode(&self) -> WcOpcode {
        WcOpcode::from_raw(self.raw.opcode)
    }

    /// The vendor error syndrome.
    #[inline]
    #[doc(alias = "ibv_wc_read_vendor_err")]
    pub fn vendor_err(&self) -> u32 {
        self.raw.vendor_err
    }

    /// Bytes transferred (receives, READ, atomics).
    #[inline]
    #[doc(alias = "ibv_wc_read_byte_len")]
    pub fn byte_len(&self) -> u32 {
        self.raw.byte_len
    }

    /// The immediate data, in host order, when the completion carries some
    /// ([`WcFlags::WITH_IMM`]); the kernel writes it big-endian.
    #[inline]
    #[doc(alias = "ibv_wc_read_imm_data")]
    pub fn imm_data(&self) -> Option<u32> {
        self.has(WcFlags::WITH_IMM)
            .then_some(u32::from_be(self.raw.ex))
    }

    /// The rkey the completed request invalidated, when the completion
    /// carries one ([`WcFlags::WITH_INVALIDATE`]); the kernel writes it in
    /// host order.
    #[doc(alias = "invalidate_rkey")]
    #[inline]
    #[doc(alias = "ibv_wc_read_invalidated_rkey")]
    pub fn invalidated_rkey(&self) -> Option<u32> {
        self.has(WcFlags::WITH_INVALIDATE).then_some(self.raw.ex)
    }

    /// The local QP number.
    #[inline]
    #[doc(alias = "ibv_wc_read_qp_num")]
    pub fn qp_num(&self) -> u32 {
        self.raw.qp_num
    }

    /// The source QP number (UD receives).
    #[inline]
    #[doc(alias = "ibv_wc_read_src_qp")]
    pub fn src_qp(&self) -> u32 {
        self.raw.src_qp
    }

    /// Its flags (bits this crate does not name are kept).
    #[inline]
    #[doc(alias = "ibv_wc_read_wc_flags")]
    pub fn wc_flags(&self) -> WcFlags {
        WcFlags::from_bits_retain(self.raw.wc_flags)
    }

    /// The P_Key index.
    #[inline]
    pub fn pkey_index(&self) -> u16 {
        self.raw.pkey_index
    }

    /// The source LID.
    #[inline]
    #[doc(alias = "ibv_wc_read_slid")]
    pub fn slid(&self) -> u16 {
        self.raw.slid
    }

    /// The service level.
    #[inline]
    #[doc(alias = "ibv_wc_read_sl")]
    pub fn sl(&self) -> u8 {
        self.raw.sl
    }

    /// The destination LID path bits.
    #[inline]
    #[doc(alias = "ibv_wc_read_dlid_path_bits")]
    pub fn dlid_path_bits(&self) -> u8 {
        self.raw.dlid_path_bits
    }

    /// The port number.
    #[inline]
    pub fn port_num(&self) -> u8 {
        self.raw.port_num
    }

    fn has(&self, flag: WcFlags) -> bool {
        self.raw.wc_flags & flag.bits() != 0
    }
}

impl From<ib_uverbs_wc> for WorkCompletion {
    fn from(raw: ib_uverbs_wc) -> Self {
        Self::from_raw(raw)
    }
}

impl fmt::Debug for WorkCompletion {
    /// The typed fields (status and opcode as enums, immediate data and
    /// the invalidated rkey only when the flags say they are there).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WorkCompletion")
            .field("wr_id", &self.wr_id())
            .field("status", &self.status())
            .field("opcode", &self.opcode())
            .field("vendor_err", &self.vendor_err())
            .field("byte_len", &self.byte_len())
            .field("imm_data", &self.imm_data())
            .field("invalidated_rkey", &self.invalidated_rkey())
            .field("qp_num", &self.qp_num())
            .field("src_qp", &self.src_qp())
            .field("wc_flags", &self.wc_flags())
            .field("pkey_index", &self.pkey_index())
            .field("slid", &self.slid())
            .field("sl", &self.sl())
            .field("dlid_path_bits", &self.dlid_path_bits())
            .field("port_num", &self.port_num())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_status_reads_as_words() {
        for raw in 0..22 {
            let status = super::WcStatus::from_raw(raw);
            let text = status.to_string();
            assert!(
                !text.is_empty() && !text.contains("unknown"),
                "{raw}: {text}"
            );
        }
        assert_eq!(
            super::WcStatus::RemAccessErr.to_string(),
            "remote access error"
        );
        assert_eq!(
            super::WcStatus::from_raw(99).to_string(),
            "unknown completion status 99"
        );
    }

    use super::*;
    use crate::wr::Sge;

    /// A completion with every field set to a distinct value.
    fn raw() -> ib_uverbs_wc {
        ib_uverbs_wc {
            wr_id: 0x0102_0304_0506_0708,
            status: 0,
            opcode: IB_WC_RECV,
            vendor_err: 0x11,
            byte_len: 0x2233,
            ex: 0,
            qp_num: 0x44_5566,
            src_qp: 0x77_8899,
            wc_flags: 0,
            pkey_index: 0xaabb,
            slid: 0xccdd,
            sl: 0xe,
            dlid_path_bits: 0x7f,
            port_num: 2,
            reserved: 0,
        }
    }

    #[test]
    fn a_completion_is_the_kernels_struct() {
        assert_eq!(size_of::<WorkCompletion>(), size_of::<ib_uverbs_wc>());
        assert_eq!(size_of::<WorkCompletion>(), 48);
        assert_eq!(align_of::<WorkCompletion>(), align_of::<ib_uverbs_wc>());
        let wc = WorkCompletion::from_raw(raw());
        assert_eq!(*wc.as_raw(), raw());
        assert_eq!(WorkCompletion::from(raw()), wc);
        assert_eq!(*WorkCompletion::default().as_raw(), ib_uverbs_wc::default());
    }

    #[test]
    fn each_accessor_reads_its_field() {
        let wc = WorkCompletion::from_raw(raw());
        assert_eq!(wc.wr_id(), 0x0102_0304_0506_0708);
        assert_eq!(wc.status(), WcStatus::Success);
        assert!(wc.is_success());
        assert_eq!(wc.opcode(), Some(WcOpcode::Recv));
        assert_eq!(wc.vendor_err(), 0x11);
        assert_eq!(wc.byte_len(), 0x2233);
        assert_eq!(wc.qp_num(), 0x44_5566);
        assert_eq!(wc.src_qp(), 0x77_8899);
        assert_eq!(wc.wc_flags(), WcFlags::empty());
        assert_eq!(wc.pkey_index(), 0xaabb);
        assert_eq!(wc.slid(), 0xccdd);
        assert_eq!(wc.sl(), 0xe);
        assert_eq!(wc.dlid_path_bits(), 0x7f);
        assert_eq!(wc.port_num(), 2);
        assert_eq!((wc.imm_data(), wc.invalidated_rkey()), (None, None));
        assert_eq!(wc.with_wr_id(9).wr_id(), 9);
    }

    /// `ex` is big-endian immediate data with WITH_IMM, a host-order rkey
    /// with WITH_INVALIDATE, and nothing without either flag.
    #[test]
    fn immediate_data_and_invalidated_rkey_follow_the_flags() {
        let imm = WorkCompletion::from_raw(ib_uverbs_wc {
            wc_flags: WcFlags::GRH.bits() | WcFlags::WITH_IMM.bits(),
            ex: 0x1234_5678u32.to_be(),
            ..raw()
        });
        assert_eq!(imm.wc_flags(), WcFlags::GRH | WcFlags::WITH_IMM);
        assert_eq!(imm.imm_data(), Some(0x1234_5678));
        assert_eq!(imm.invalidated_rkey(), None);
        // The bytes as they travel: most significant first.
        assert_eq!(imm.as_raw().ex.to_ne_bytes(), [0x12, 0x34, 0x56, 0x78]);

        let inv = WorkCompletion::from_raw(ib_uverbs_wc {
            wc_flags: WcFlags::WITH_INVALIDATE.bits(),
            ex: 0x1234_5678,
            ..raw()
        });
        assert_eq!(inv.invalidated_rkey(), Some(0x1234_5678));
        assert_eq!(inv.imm_data(), None);

        let neither = WorkCompletion::from_raw(ib_uverbs_wc {
            ex: 0x1234_5678,
            ..raw()
        });
        assert_eq!(
            (neither.imm_data(), neither.invalidated_rkey()),
            (None, None)
        );

        let unknown_bit = WorkCompletion::from_raw(ib_uverbs_wc {
            wc_flags: 1 << 9,
            ..raw()
        });
        assert_eq!(unknown_bit.wc_flags().bits(), 1 << 9, "kept");
    }

    #[test]
    fn statuses_decode_and_unknown_ones_are_kept() {
        for raw_status in 0..22 {
            let s = WcStatus::from_raw(raw_status);
            assert!(!matches!(s, WcStatus::Unknown(_)), "{raw_status}");
            assert_eq!(s.to_raw(), raw_status);
        }
        assert_eq!(WcStatus::from_raw(5), WcStatus::WrFlushErr);
        assert_eq!(WcStatus::from_raw(10), WcStatus::RemAccessErr);
        assert_eq!(WcStatus::from_raw(21), WcStatus::GeneralErr);
        for raw_status in [22, 1000, u32::MAX] {
            let wc = WorkCompletion::from_raw(ib_uverbs_wc {
                status: raw_status,
                ..raw()
            });
            assert_eq!(wc.status(), WcStatus::Unknown(raw_status));
            assert!(!wc.is_success());
            assert_eq!(wc.status().to_raw(), raw_status);
        }
        let flushed = WorkCompletion::from_raw(ib_uverbs_wc { status: 5, ..raw() });
        assert_eq!(flushed.status(), WcStatus::WrFlushErr);
        assert!(!flushed.is_success());
    }

    #[test]
    fn opcodes_decode_and_unknown_ones_are_kept() {
        let known = [
            (0, WcOpcode::Send),
            (1, WcOpcode::RdmaWrite),
            (2, WcOpcode::RdmaRead),
            (3, WcOpcode::CompSwap),
            (4, WcOpcode::FetchAdd),
            (5, WcOpcode::BindMw),
            (6, WcOpcode::LocalInv),
            (128, WcOpcode::Recv),
            (129, WcOpcode::RecvRdmaWithImm),
        ];
        for (raw_opcode, want) in known {
            let wc = WorkCompletion::from_raw(ib_uverbs_wc {
                opcode: raw_opcode,
                ..raw()
            });
            assert_eq!(wc.opcode(), Some(want));
            assert_eq!(want.to_raw(), raw_opcode);
        }
        for raw_opcode in [7, 127, 130, u32::MAX] {
            let wc = WorkCompletion::from_raw(ib_uverbs_wc {
                opcode: raw_opcode,
                ..raw()
            });
            assert_eq!(wc.opcode(), Some(WcOpcode::Unknown(raw_opcode)));
            assert_eq!(WcOpcode::Unknown(raw_opcode).to_raw(), raw_opcode);
        }
    }

    #[test]
    fn debug_prints_the_typed_fields() {
        let wc = WorkCompletion::from_raw(ib_uverbs_wc {
            status: 99,
            wc_flags: WcFlags::WITH_IMM.bits(),
            ex: 7u32.to_be(),
            ..raw()
        });
        let s = format!("{wc:?}");
        for part in [
            "WorkCompletion {",
            "wr_id: 72623859790382856",
            "status: Unknown(99)",
            "opcode: None",
            "imm_data: Some(7)",
            "invalidated_rkey: None",
            "qp_num: 4478310",
            "wc_flags: WcFlags(WITH_IMM)",
        ] {
            assert!(s.contains(part), "{part} in {s}");
        }
    }

    /// The SGE's layout is both drivers' (also asserted at compile time in
    /// `sge.rs`).
    #[test]
    fn the_sge_layout_is_the_drivers() {
        use std::mem::offset_of;
        use uverbs_uapi::{rxe_sge, siw_sge};
        assert_eq!(size_of::<Sge>(), 16);
        assert_eq!(size_of::<Sge>(), size_of::<rxe_sge>());
        assert_eq!(size_of::<Sge>(), size_of::<siw_sge>());
        assert_eq!(align_of::<Sge>(), align_of::<rxe_sge>());
        assert_eq!(align_of::<Sge>(), align_of::<siw_sge>());
        let ours = [
            offset_of!(Sge, addr),
            offset_of!(Sge, length),
            offset_of!(Sge, lkey),
        ];
        let rxe = [
            offset_of!(rxe_sge, addr),
            offset_of!(rxe_sge, length),
            offset_of!(rxe_sge, lkey),
        ];
        let siw = [
            offset_of!(siw_sge, laddr),
            offset_of!(siw_sge, length),
            offset_of!(siw_sge, lkey),
        ];
        assert_eq!(ours, [0, 8, 12]);
        assert_eq!(ours, rxe);
        assert_eq!(ours, siw);
    }
}
