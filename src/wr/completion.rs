//! Completions: what a completion queue hands back, one per ended work
//! request.
//!
//! A [`WorkCompletion`] is read from the kernel's `ib_uverbs_wc` (the 48
//! bytes rxe writes into a CQ slot; siw's CQEs are translated).
//! [`WcStatus`] and [`WcOpcode`] keep a value this crate does not know as
//! `Unknown(raw)`.

use bitflags::bitflags;
use zerocopy::FromBytes;

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
        /// `imm` holds immediate data.
        const WITH_IMM = 2;
        /// `invalidate_rkey` holds the invalidated rkey.
        const WITH_INVALIDATE = 4;
    }
}

/// An enum of the kernel's values 0, 1, 2, … (each name given with its
/// value, in order) and `Unknown(u32)` for any other (listed first,
/// declared last), with `from_raw` (a bounds-checked table lookup) and
/// `to_raw`. A compile-time check fails if a value is out of order.
macro_rules! raw_enum {
    (
        $(#[$meta:meta])*
        $vis:vis enum $ty:ident {
            $(#[$umeta:meta])*
            Unknown(u32),
            $($(#[$vmeta:meta])* $name:ident = $raw:literal,)*
        }
    ) => {
        $(#[$meta])*
        $vis enum $ty {
            $($(#[$vmeta])* $name,)*
            $(#[$umeta])*
            Unknown(u32),
        }

        impl $ty {
            /// Every named value, at the index of its raw value.
            const TABLE: &'static [$ty] = &[$($ty::$name),*];

            /// The value the kernel's `raw` stands for.
            #[inline]
            pub(crate) fn from_raw(raw: u32) -> Self {
                match Self::TABLE.get(raw as usize) {
                    Some(known) => *known,
                    None => $ty::Unknown(raw),
                }
            }

            /// The kernel's value (`Unknown` gives back its own).
            pub(crate) const fn to_raw(self) -> u32 {
                match self {
                    $($ty::$name => $raw,)*
                    $ty::Unknown(raw) => raw,
                }
            }
        }

        const _: () = {
            let mut i = 0;
            while i < $ty::TABLE.len() {
                assert!($ty::TABLE[i].to_raw() == i as u32, "values listed out of order");
                i += 1;
            }
        };
    };
}

raw_enum! {
    /// Completion status (the kernel's `enum ib_wc_status`, libibverbs'
    /// `enum ibv_wc_status`).
    #[doc(alias = "ibv_wc_status")]
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
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

/// The kernel's completion opcode of a receive (`IB_WC_RECV`).
const IB_WC_RECV: u32 = 1 << 7;
/// The kernel's completion opcode of an RDMA WRITE with immediate that
/// consumed a receive (`IB_WC_RECV_RDMA_WITH_IMM`).
const IB_WC_RECV_RDMA_WITH_IMM: u32 = IB_WC_RECV + 1;

/// Completion opcode (`IB_UVERBS_WC_*`, and the kernel's `IB_WC_RECV*` for
/// receives; libibverbs' `enum ibv_wc_opcode`).
#[doc(alias = "ibv_wc_opcode")]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
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
    /// A value this crate does not know (unset on error completions).
    Unknown(u32),
}

impl WcOpcode {
    /// The opcode the kernel's `raw` stands for.
    #[inline]
    pub(crate) fn from_raw(raw: u32) -> Self {
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
}

/// One completion, read from an `ib_uverbs_wc`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WorkCompletion {
    /// Work request id of the completed request.
    pub wr_id: u64,
    /// Status.
    pub status: WcStatus,
    /// Opcode (meaningful on success only).
    pub opcode: WcOpcode,
    /// Vendor error syndrome.
    pub vendor_err: u32,
    /// Bytes transferred (receives, READ, atomics).
    pub byte_len: u32,
    /// Immediate data in host order (with [`WcFlags::WITH_IMM`]), or the
    /// invalidated rkey (with [`WcFlags::WITH_INVALIDATE`]).
    pub imm_or_inval: u32,
    /// Local QP number.
    pub qp_num: u32,
    /// Source QP number (UD receives).
    pub src_qp: u32,
    /// Flags.
    pub wc_flags: WcFlags,
    /// P_Key index.
    pub pkey_index: u16,
    /// Source LID.
    pub slid: u16,
    /// Service level.
    pub sl: u8,
    /// Destination LID path bits.
    pub dlid_path_bits: u8,
    /// Port number.
    pub port_num: u8,
}

impl WorkCompletion {
    /// Reads a completion from the first bytes of a CQ slot (`None` if the slot
    /// is shorter than an `ib_uverbs_wc`).
    pub(crate) fn from_slot(slot: &[u8]) -> Option<Self> {
        // A view in place, not a copy: the conversion reads each field once.
        let (wc, _) = ib_uverbs_wc::ref_from_prefix(slot).ok()?;
        Some(Self::from_raw(wc))
    }

    /// The typed view of `wc`.
    pub(crate) fn from_raw(wc: &ib_uverbs_wc) -> Self {
        let flags = WcFlags::from_bits_retain(wc.wc_flags);
        WorkCompletion {
            wr_id: wc.wr_id,
            status: WcStatus::from_raw(wc.status),
            opcode: WcOpcode::from_raw(wc.opcode),
            vendor_err: wc.vendor_err,
            byte_len: wc.byte_len,
            // imm_data is __be32; invalidate_rkey is host order.
            imm_or_inval: if flags.contains(WcFlags::WITH_IMM) {
                u32::from_be(wc.ex)
            } else {
                wc.ex
            },
            qp_num: wc.qp_num,
            src_qp: wc.src_qp,
            wc_flags: flags,
            pkey_index: wc.pkey_index,
            slid: wc.slid,
            sl: wc.sl,
            dlid_path_bits: wc.dlid_path_bits,
            port_num: wc.port_num,
        }
    }
}

impl Default for WorkCompletion {
    /// An all-zero `ib_uverbs_wc` (a slot for [`CompletionQueue::poll`](crate::CompletionQueue::poll) to fill).
    fn default() -> Self {
        Self::from_raw(&ib_uverbs_wc::default())
    }
}
