//! QP states, the attribute mask, and the builder of `MODIFY_QP`'s
//! attributes whose mask is derived from the fields set.
//!
//! The legal transitions and the attributes each one requires or allows are
//! the kernel's `qp_state_table` (`drivers/infiniband/core/verbs.c`, Linux
//! 6.12; libibverbs has no table of its own and relies on it), encoded here
//! as data for RC, UC and UD. [`QpAttr::check`] applies the kernel's
//! `ib_modify_qp_is_ok` to it, so a bad transition is a typed error before
//! any system call.
//!
//! iWARP QPs follow another table ([`iwarp_transition_rule`]): their
//! connection manager answers other attributes (`iw_cm_init_qp_attr`:
//! STATE, ACCESS_FLAGS and PORT for INIT and RTR, PORT alone for RTS), and
//! only the CM moves them to RTS. [`QpAttr::check_on`] picks the table by
//! [`TransportType`].

use bitflags::bitflags;
use uverbs_uapi as sys;

use crate::flags::AccessFlags;
use crate::gid::Gid;

kernel_enum! {
    /// A queue pair's state (`enum ib_qp_state`; the values go on the wire).
    #[doc(alias = "ibv_qp_state")]
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
    pub enum QpState {
        /// Just created, or reset: nothing is processed (`IBV_QPS_RESET`).
        Reset = 0,
        /// Initialised: receives may be posted (`IBV_QPS_INIT`).
        Init = 1,
        /// Ready to receive (`IBV_QPS_RTR`).
        Rtr = 2,
        /// Ready to send (`IBV_QPS_RTS`).
        Rts = 3,
        /// Send queue drained (`IBV_QPS_SQD`).
        Sqd = 4,
        /// Send queue error (`IBV_QPS_SQE`, UC/UD only).
        Sqe = 5,
        /// Error: outstanding work completes with flush errors (`IBV_QPS_ERR`).
        Err = 6,
    }
    /// The state for the kernel's number (`QUERY_QP`'s `qp_state`), `None`
    /// for a number that is no state.
    fn from_raw;
}

/// The QP transport types the data path supports.
#[doc(alias = "ibv_qp_type")]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum QpType {
    /// Reliable connected (`IBV_QPT_RC`).
    Rc,
    /// Unreliable connected (`IBV_QPT_UC`).
    Uc,
    /// Unreliable datagram (`IBV_QPT_UD`).
    Ud,
}

impl QpType {
    /// The kernel's number (`IB_UVERBS_QPT_*`).
    pub fn raw(self) -> u8 {
        let raw = match self {
            QpType::Rc => sys::IB_UVERBS_QPT_RC,
            QpType::Uc => sys::IB_UVERBS_QPT_UC,
            QpType::Ud => sys::IB_UVERBS_QPT_UD,
        };
        raw as u8
    }

    fn index(self) -> usize {
        match self {
            QpType::Rc => 0,
            QpType::Uc => 1,
            QpType::Ud => 2,
        }
    }
}

/// How a device's QPs connect (`enum ibv_transport_type`): it decides
/// which transition table [`QpAttr::check_on`] applies.
#[doc(alias = "ibv_transport_type")]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TransportType {
    /// InfiniBand and RoCE (rxe): the kernel's `qp_state_table`
    /// (`IBV_TRANSPORT_IB`).
    Ib,
    /// iWARP (siw): RTS only through the connection manager
    /// (`IBV_TRANSPORT_IWARP`).
    Iwarp,
}

bitflags! {
    /// Which attributes a `MODIFY_QP` carries (`enum ib_qp_attr_mask` of
    /// `include/rdma/ib_verbs.h`, identical to libibverbs' `IBV_QP_*`).
    #[doc(alias = "ibv_qp_attr_mask")]
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
    pub struct QpAttrMask: u32 {
        /// `qp_state`.
        const STATE = 1 << 0;
        /// `cur_qp_state`.
        const CUR_STATE = 1 << 1;
        /// `en_sqd_async_notify`.
        const EN_SQD_ASYNC_NOTIFY = 1 << 2;
        /// `qp_access_flags`.
        const ACCESS_FLAGS = 1 << 3;
        /// `pkey_index`.
        const PKEY_INDEX = 1 << 4;
        /// `port_num`.
        const PORT = 1 << 5;
        /// `qkey`.
        const QKEY = 1 << 6;
        /// `dest` (the address vector).
        const AV = 1 << 7;
        /// `path_mtu`.
        const PATH_MTU = 1 << 8;
        /// `timeout`.
        const TIMEOUT = 1 << 9;
        /// `retry_cnt`.
        const RETRY_CNT = 1 << 10;
        /// `rnr_retry`.
        const RNR_RETRY = 1 << 11;
        /// `rq_psn`.
        const RQ_PSN = 1 << 12;
        /// `max_rd_atomic`.
        const MAX_QP_RD_ATOMIC = 1 << 13;
        /// `alt_dest` and the other alternate-path fields.
        const ALT_PATH = 1 << 14;
        /// `min_rnr_timer`.
        const MIN_RNR_TIMER = 1 << 15;
        /// `sq_psn`.
        const SQ_PSN = 1 << 16;
        /// `max_dest_rd_atomic`.
        const MAX_DEST_RD_ATOMIC = 1 << 17;
        /// `path_mig_state`.
        const PATH_MIG_STATE = 1 << 18;
        /// Queue capacities (`IB_QP_CAP`).
        const CAP = 1 << 19;
        /// `dest_qp_num`.
        const DEST_QPN = 1 << 20;
    }
}

kernel_enum! {
    /// A path MTU (`enum ib_mtu`).
    #[doc(alias = "ibv_mtu")]
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
    pub enum Mtu {
        /// 256 bytes.
        Mtu256 = 1,
        /// 512 bytes.
        Mtu512 = 2,
        /// 1024 bytes (rxe on a 1500-byte netdev).
        Mtu1024 = 3,
        /// 2048 bytes.
        Mtu2048 = 4,
        /// 4096 bytes.
        Mtu4096 = 5,
    }
    /// The MTU for the kernel's number (`enum ib_mtu`: 1 = 256 … 5 =
    /// 4096, as a port's `active_mtu` or `QUERY_QP`'s `path_mtu` carry
    /// it); `None` for a number that is no MTU.
    fn from_raw;
}

impl Mtu {
    /// The MTU in bytes (256 … 4096).
    #[doc(alias = "ibv_mtu_to_num")]
    pub fn bytes(self) -> u32 {
        128 << (self as u8)
    }
}

/// Why a `MODIFY_QP` was refused before it was sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum QpTransitionError {
    /// The kernel's table has no such transition (e.g. RESET→RTR).
    #[error("modify_qp: {qp_type:?} QP cannot go from {from:?} to {to:?}")]
    InvalidTransition {
        /// The QP's type.
        qp_type: QpType,
        /// The current state.
        from: QpState,
        /// The requested state.
        to: QpState,
    },
    /// The transition requires attributes that were not set.
    #[error("modify_qp: {qp_type:?} {from:?}->{to:?} needs {missing:?}")]
    MissingAttributes {
        /// The QP's type.
        qp_type: QpType,
        /// The current state.
        from: QpState,
        /// The requested state.
        to: QpState,
        /// The required attributes not set.
        missing: QpAttrMask,
    },
    /// Attributes were set that the transition does not take (the kernel
    /// answers `EINVAL`).
    #[error("modify_qp: {qp_type:?} {from:?}->{to:?} does not take {extra:?}")]
    UnexpectedAttributes {
        /// The QP's type.
        qp_type: QpType,
        /// The current state.
        from: QpState,
        /// The requested state.
        to: QpState,
        /// The attributes set that are neither required nor optional.
        extra: QpAttrMask,
    },
    /// An iWARP QP was asked to enter RTS by `MODIFY_QP`: only the
    /// connection manager moves it there, when it hands the QP its TCP
    /// stream during connect or accept (siw answers `EINVAL`: no socket).
    #[error(
        "modify_qp: an iWARP QP reaches RTS only through the connection manager (from {from:?})"
    )]
    RtsOnlyThroughCm {
        /// The current state.
        from: QpState,
    },
    /// A field is outside the range the wire format or the IB spec allows.
    #[error("modify_qp: {field} = {value} is out of range (at most {max})")]
    OutOfRange {
        /// The attribute's name.
        field: &'static str,
        /// The value set.
        value: u32,
        /// The largest value allowed.
        max: u32,
    },
}

/// What one transition requires and allows, per QP type (RC, UC, UD).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TransitionRule {
    /// Attributes that must be set, indexed RC, UC, UD.
    required: [QpAttrMask; 3],
    /// Attributes that may be set, indexed RC, UC, UD.
    optional: [QpAttrMask; 3],
}

impl TransitionRule {
    /// The attributes `qp_type` must set.
    pub fn required(&self, qp_type: QpType) -> QpAttrMask {
        self.required[qp_type.index()]
    }

    /// The attributes `qp_type` may set besides the required ones.
    pub fn optional(&self, qp_type: QpType) -> QpAttrMask {
        self.optional[qp_type.index()]
    }
}

/// The kernel's `qp_state_table[from][to]` for RC, UC and UD: `None` when
/// the transition is invalid. Note that RESET→ERR is invalid there (only
/// RESET→RESET and RESET→INIT leave RESET).
#[doc(alias = "ibv_modify_qp")]
pub fn transition_rule(from: QpState, to: QpState) -> Option<TransitionRule> {
    use QpAttrMask as M;
    use QpState::*;
    const NONE: [QpAttrMask; 3] = [M::empty(); 3];
    let rule = |required: [QpAttrMask; 3], optional: [QpAttrMask; 3]| {
        Some(TransitionRule { required, optional })
    };
    // Shorthands for the table rows, in the kernel's words.
    let pkey_port = M::PKEY_INDEX.union(M::PORT);
    let rc_uc_init = pkey_port.union(M::ACCESS_FLAGS);
    let ud_init = pkey_port.union(M::QKEY);
    let uc_rtr = M::AV.union(M::PATH_MTU).union(M::DEST_QPN).union(M::RQ_PSN);
    let rc_rtr = uc_rtr.union(M::MAX_DEST_RD_ATOMIC).union(M::MIN_RNR_TIMER);
    let rc_uc_rtr_opt = M::ALT_PATH.union(M::ACCESS_FLAGS).union(M::PKEY_INDEX);
    let ud_pkey_qkey = M::PKEY_INDEX.union(M::QKEY);
    let rc_rts = M::TIMEOUT
        .union(M::RETRY_CNT)
        .union(M::RNR_RETRY)
        .union(M::SQ_PSN)
        .union(M::MAX_QP_RD_ATOMIC);
    let ud_to_rts_opt = M::CUR_STATE.union(M::QKEY);
    let uc_to_rts_opt = M::CUR_STATE
        .union(M::ALT_PATH)
        .union(M::ACCESS_FLAGS)
        .union(M::PATH_MIG_STATE);
    let rc_to_rts_opt = uc_to_rts_opt.union(M::MIN_RNR_TIMER);
    match (from, to) {
        // Every state may be reset; every state but RESET may fail.
        (_, Reset) => rule(NONE, NONE),
        (Reset, Err) => None,
        (_, Err) => rule(NONE, NONE),
        (Reset, Init) => rule([rc_uc_init, rc_uc_init, ud_init], NONE),
        (Init, Init) => rule(NONE, [rc_uc_init, rc_uc_init, ud_init]),
        (Init, Rtr) => rule(
            [rc_rtr, uc_rtr, M::empty()],
            [rc_uc_rtr_opt, rc_uc_rtr_opt, ud_pkey_qkey],
        ),
        (Rtr, Rts) => rule(
            [rc_rts, M::SQ_PSN, M::SQ_PSN],
            [rc_to_rts_opt, uc_to_rts_opt, ud_to_rts_opt],
        ),
        (Rts, Rts) | (Sqd, Rts) => rule(NONE, [rc_to_rts_opt, uc_to_rts_opt, ud_to_rts_opt]),
        (Rts, Sqd) => rule(NONE, [M::EN_SQD_ASYNC_NOTIFY; 3]),
        (Sqd, Sqd) => rule(
            NONE,
            [
                M::PORT
                    .union(M::AV)
                    .union(M::TIMEOUT)
                    .union(M::RETRY_CNT)
                    .union(M::RNR_RETRY)
                    .union(M::MAX_QP_RD_ATOMIC)
                    .union(M::MAX_DEST_RD_ATOMIC)
                    .union(M::ALT_PATH)
                    .union(M::ACCESS_FLAGS)
                    .union(M::PKEY_INDEX)
                    .union(M::MIN_RNR_TIMER)
                    .union(M::PATH_MIG_STATE),
                M::AV
                    .union(M::ALT_PATH)
                    .union(M::ACCESS_FLAGS)
                    .union(M::PKEY_INDEX)
                    .union(M::PATH_MIG_STATE),
                ud_pkey_qkey,
            ],
        ),
        (Sqe, Rts) => rule(
            NONE,
            [
                M::empty(),
                M::CUR_STATE.union(M::ACCESS_FLAGS),
                ud_to_rts_opt,
            ],
        ),
        _ => None,
    }
}

/// The iWARP table: which transitions an iWARP QP takes by `MODIFY_QP`,
/// with the attributes its connection manager answers (`rdma_init_qp_attr`
/// of `drivers/infiniband/core/cma.c` and `iw_cm_init_qp_attr` of
/// `iwcm.c`, Linux 6.12; librdmacm applies them as answered). Same for
/// every QP type (iWARP has RC only):
///
/// - RESET→INIT needs ACCESS_FLAGS and PORT (the CM's INIT answer, before
///   and after connect), may set PKEY_INDEX (the IB-style INIT);
/// - INIT→RTR takes ACCESS_FLAGS and PORT, needs nothing (the CM's RTR
///   answer; siw keeps the QP idle until the connection is up);
/// - a change without a new state from INIT, RTR or RTS takes ACCESS_FLAGS,
///   PORT and, from INIT, PKEY_INDEX (the CM's RTS answer is PORT alone,
///   no state);
/// - RTS→SQD (librdmacm's iWARP shutdown), any state to RESET, any
///   started state to ERR, as on IB;
/// - entering RTS from another state is [`QpTransitionError::RtsOnlyThroughCm`].
///
/// `Err(None)` for any other pair: no such transition.
pub fn iwarp_transition_rule(
    from: QpState,
    to: QpState,
) -> Result<TransitionRule, Option<QpTransitionError>> {
    use QpAttrMask as M;
    use QpState::*;
    let rule = |required: QpAttrMask, optional: QpAttrMask| {
        Ok(TransitionRule {
            required: [required; 3],
            optional: [optional; 3],
        })
    };
    let access_port = M::ACCESS_FLAGS.union(M::PORT);
    match (from, to) {
        (_, Reset) => rule(M::empty(), M::empty()),
        (Reset, Err) => Result::Err(None),
        (_, Err) => rule(M::empty(), M::empty()),
        (Reset, Init) => rule(access_port, M::PKEY_INDEX),
        (Init, Init) => rule(M::empty(), access_port.union(M::PKEY_INDEX)),
        (Init, Rtr) | (Rtr, Rtr) | (Rts, Rts) => rule(M::empty(), access_port),
        (Rts, Sqd) => rule(M::empty(), M::empty()),
        (from, Rts) => Result::Err(Some(QpTransitionError::RtsOnlyThroughCm { from })),
        _ => Result::Err(None),
    }
}

/// [`QpAttr`] getters that each read one field of the request, `None`
/// unless that attribute's mask bit is set.
macro_rules! attribute_getters {
    ($( $(#[$doc:meta])* $getter:ident -> $t:ty = $bit:ident, $field:ident; )*) => {
        $(
            $(#[$doc])*
            pub fn $getter(&self) -> Option<$t> {
                self.get(QpAttrMask::$bit, self.req.$field)
            }
        )*
    };
}

/// The attributes of one `MODIFY_QP`, set field by field; the attribute
/// mask is derived from the fields set, never written by hand.
///
/// ```
/// use uverbs::command::{QpAttr, QpState, QpType};
/// use uverbs::AccessFlags;
///
/// // rc_pingpong's RESET -> INIT.
/// let init = QpAttr::new()
///     .state(QpState::Init)
///     .pkey_index(0)
///     .port(1)
///     .access_flags(AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE);
/// assert_eq!(init.mask().bits(), 0x39);
/// assert!(init.check(QpType::Rc, QpState::Reset).is_ok());
/// // RESET -> RTR is no transition of the kernel's table.
/// let rtr = QpAttr::new().state(QpState::Rtr);
/// assert!(rtr.check(QpType::Rc, QpState::Reset).is_err());
/// ```
#[doc(alias = "ibv_qp_attr")]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QpAttr {
    // The kernel's request without the handle; `attr_mask` is kept in step
    // with every setter.
    req: sys::ib_uverbs_modify_qp,
}

impl QpAttr {
    /// No attribute set (mask 0).
    pub fn new() -> Self {
        Self::default()
    }

    fn set(mut self, bit: QpAttrMask, f: impl FnOnce(&mut sys::ib_uverbs_modify_qp)) -> Self {
        f(&mut self.req);
        self.req.attr_mask |= bit.bits();
        self
    }

    /// The attributes set so far.
    pub fn mask(&self) -> QpAttrMask {
        QpAttrMask::from_bits_retain(self.req.attr_mask)
    }

    setters! {
        /// The state to move to (`IBV_QP_STATE`).
        pub fn state(state: QpState) => set(QpAttrMask::STATE): qp_state = state as u8;
        /// What remote peers may do (`IBV_QP_ACCESS_FLAGS`).
        pub fn access_flags(access: AccessFlags) => set(QpAttrMask::ACCESS_FLAGS): qp_access_flags = access.bits();
        /// The P_Key index (`IBV_QP_PKEY_INDEX`).
        pub fn pkey_index(index: u16) => set(QpAttrMask::PKEY_INDEX): pkey_index = index;
        /// The port, 1-based (`IBV_QP_PORT`).
        pub fn port(port: u8) => set(QpAttrMask::PORT): port_num = port;
        /// The Q_Key of a UD QP (`IBV_QP_QKEY`).
        pub fn qkey(qkey: u32) => set(QpAttrMask::QKEY): qkey = qkey;
        /// The primary path to the peer (`IBV_QP_AV`); see
        /// [`roce_dest`](Self::roce_dest).
        pub fn av(dest: sys::ib_uverbs_qp_dest) => set(QpAttrMask::AV): dest = dest;
        /// The path MTU (`IBV_QP_PATH_MTU`).
        pub fn path_mtu(mtu: Mtu) => set(QpAttrMask::PATH_MTU): path_mtu = mtu as u8;
        /// The local ACK timeout, 4.096 µs · 2^timeout, at most 31 (`IBV_QP_TIMEOUT`).
        pub fn timeout(timeout: u8) => set(QpAttrMask::TIMEOUT): timeout = timeout;
        /// Transport retries, at most 7 (`IBV_QP_RETRY_CNT`).
        pub fn retry_cnt(count: u8) => set(QpAttrMask::RETRY_CNT): retry_cnt = count;
        /// RNR retries, at most 7 = infinite (`IBV_QP_RNR_RETRY`).
        pub fn rnr_retry(count: u8) => set(QpAttrMask::RNR_RETRY): rnr_retry = count;
        /// The first PSN expected from the peer, 24 bits (`IBV_QP_RQ_PSN`).
        pub fn rq_psn(psn: u32) => set(QpAttrMask::RQ_PSN): rq_psn = psn;
        /// Outstanding RDMA reads/atomics as initiator (`IBV_QP_MAX_QP_RD_ATOMIC`).
        pub fn max_rd_atomic(n: u8) => set(QpAttrMask::MAX_QP_RD_ATOMIC): max_rd_atomic = n;
        /// The minimum RNR NAK timer code, at most 31 (`IBV_QP_MIN_RNR_TIMER`).
        pub fn min_rnr_timer(code: u8) => set(QpAttrMask::MIN_RNR_TIMER): min_rnr_timer = code;
        /// The first PSN sent, 24 bits (`IBV_QP_SQ_PSN`).
        pub fn sq_psn(psn: u32) => set(QpAttrMask::SQ_PSN): sq_psn = psn;
        /// Outstanding RDMA reads/atomics as target (`IBV_QP_MAX_DEST_RD_ATOMIC`).
        pub fn max_dest_rd_atomic(n: u8) => set(QpAttrMask::MAX_DEST_RD_ATOMIC): max_dest_rd_atomic = n;
        /// The peer's QP number, 24 bits (`IBV_QP_DEST_QPN`).
        pub fn dest_qpn(qpn: u32) => set(QpAttrMask::DEST_QPN): dest_qp_num = qpn;
    }

    /// The state requested, if any (for an answer of
    /// [`QueuePair::query`](crate::QueuePair::query): the QP's state, as
    /// [`get_state`](Self::get_state)).
    pub fn target_state(&self) -> Option<QpState> {
        self.get_state()
    }

    /// `value` if `bit` is set.
    fn get<T>(&self, bit: QpAttrMask, value: T) -> Option<T> {
        self.mask().contains(bit).then_some(value)
    }

    /// The state ([`STATE`](QpAttrMask::STATE)): the one to move to, or in
    /// a [`query`](crate::QueuePair::query) answer the QP's own. `None`
    /// when not set, or for a number that is no state.
    pub fn get_state(&self) -> Option<QpState> {
        self.get(QpAttrMask::STATE, self.req.qp_state)
            .and_then(QpState::from_raw)
    }

    /// The state the caller believes the QP is in
    /// ([`CUR_STATE`](QpAttrMask::CUR_STATE)), if set.
    pub fn get_cur_state(&self) -> Option<QpState> {
        self.get(QpAttrMask::CUR_STATE, self.req.cur_qp_state)
            .and_then(QpState::from_raw)
    }

    /// What remote peers may do ([`ACCESS_FLAGS`](QpAttrMask::ACCESS_FLAGS)), if set.
    pub fn get_access_flags(&self) -> Option<AccessFlags> {
        let bits = self.req.qp_access_flags;
        self.get(
            QpAttrMask::ACCESS_FLAGS,
            AccessFlags::from_bits_retain(bits),
        )
    }

    /// The path MTU ([`PATH_MTU`](QpAttrMask::PATH_MTU)), if set and a
    /// known MTU.
    pub fn get_path_mtu(&self) -> Option<Mtu> {
        self.get(QpAttrMask::PATH_MTU, self.req.path_mtu)
            .and_then(Mtu::from_raw)
    }

    attribute_getters! {
        /// The P_Key index ([`PKEY_INDEX`](QpAttrMask::PKEY_INDEX)), if set.
        get_pkey_index -> u16 = PKEY_INDEX, pkey_index;
        /// The port, 1-based ([`PORT`](QpAttrMask::PORT)), if set.
        get_port -> u8 = PORT, port_num;
        /// The Q_Key of a UD QP ([`QKEY`](QpAttrMask::QKEY)), if set.
        get_qkey -> u32 = QKEY, qkey;
        /// The primary path to the peer ([`AV`](QpAttrMask::AV)), if set.
        get_av -> sys::ib_uverbs_qp_dest = AV, dest;
        /// The local ACK timeout code ([`TIMEOUT`](QpAttrMask::TIMEOUT)), if set.
        get_timeout -> u8 = TIMEOUT, timeout;
        /// Transport retries ([`RETRY_CNT`](QpAttrMask::RETRY_CNT)), if set.
        get_retry_cnt -> u8 = RETRY_CNT, retry_cnt;
        /// RNR retries ([`RNR_RETRY`](QpAttrMask::RNR_RETRY)), if set.
        get_rnr_retry -> u8 = RNR_RETRY, rnr_retry;
        /// The first PSN expected from the peer ([`RQ_PSN`](QpAttrMask::RQ_PSN)), if set.
        get_rq_psn -> u32 = RQ_PSN, rq_psn;
        /// Outstanding RDMA reads/atomics as initiator
        /// ([`MAX_QP_RD_ATOMIC`](QpAttrMask::MAX_QP_RD_ATOMIC)), if set.
        get_max_rd_atomic -> u8 = MAX_QP_RD_ATOMIC, max_rd_atomic;
        /// The minimum RNR NAK timer code
        /// ([`MIN_RNR_TIMER`](QpAttrMask::MIN_RNR_TIMER)), if set.
        get_min_rnr_timer -> u8 = MIN_RNR_TIMER, min_rnr_timer;
        /// The first PSN sent ([`SQ_PSN`](QpAttrMask::SQ_PSN)), if set.
        get_sq_psn -> u32 = SQ_PSN, sq_psn;
        /// Outstanding RDMA reads/atomics as target
        /// ([`MAX_DEST_RD_ATOMIC`](QpAttrMask::MAX_DEST_RD_ATOMIC)), if set.
        get_max_dest_rd_atomic -> u8 = MAX_DEST_RD_ATOMIC, max_dest_rd_atomic;
        /// The peer's QP number ([`DEST_QPN`](QpAttrMask::DEST_QPN)), if set.
        get_dest_qpn -> u32 = DEST_QPN, dest_qp_num;
    }

    /// The attributes a `QUERY_QP` answered, as asked with `mask`: each
    /// attribute in `mask` reads back through its getter (the kernel fills
    /// the answer whatever the mask; only what was asked is kept).
    /// [`CAP`](QpAttrMask::CAP) and
    /// [`EN_SQD_ASYNC_NOTIFY`](QpAttrMask::EN_SQD_ASYNC_NOTIFY) have no
    /// place here and are dropped: the capacities are
    /// [`QueuePair::caps`](crate::QueuePair::caps).
    #[doc(alias = "ibv_cmd_query_qp")]
    pub fn from_query(resp: &sys::ib_uverbs_query_qp_resp, mask: QpAttrMask) -> Self {
        let kept = mask.difference(QpAttrMask::CAP | QpAttrMask::EN_SQD_ASYNC_NOTIFY);
        QpAttr {
            req: sys::ib_uverbs_modify_qp {
                dest: resp.dest,
                alt_dest: resp.alt_dest,
                attr_mask: kept.bits(),
                qkey: resp.qkey,
                rq_psn: resp.rq_psn,
                sq_psn: resp.sq_psn,
                dest_qp_num: resp.dest_qp_num,
                qp_access_flags: resp.qp_access_flags,
                pkey_index: resp.pkey_index,
                alt_pkey_index: resp.alt_pkey_index,
                qp_state: resp.qp_state,
                cur_qp_state: resp.cur_qp_state,
                path_mtu: resp.path_mtu,
                path_mig_state: resp.path_mig_state,
                max_rd_atomic: resp.max_rd_atomic,
                max_dest_rd_atomic: resp.max_dest_rd_atomic,
                min_rnr_timer: resp.min_rnr_timer,
                port_num: resp.port_num,
                timeout: resp.timeout,
                retry_cnt: resp.retry_cnt,
                rnr_retry: resp.rnr_retry,
                alt_port_num: resp.alt_port_num,
                alt_timeout: resp.alt_timeout,
                ..Default::default()
            },
        }
    }

    /// These attributes without `bits` (their getters answer `None`).
    pub fn without(mut self, bits: QpAttrMask) -> Self {
        self.req.attr_mask &= !bits.bits();
        self
    }

    /// A RoCE address vector: a GRH to `dgid` from local GID `sgid_index`
    /// on `port` (RoCE needs `is_global`; the kernel resolves the MAC).
    pub fn roce_dest(dgid: Gid, sgid_index: u8, hop_limit: u8, port: u8) -> sys::ib_uverbs_qp_dest {
        sys::ib_uverbs_qp_dest {
            dgid: dgid.raw(),
            sgid_index,
            hop_limit,
            is_global: 1,
            port_num: port,
            ..Default::default()
        }
    }

    /// Checks these attributes for a `qp_type` QP now in `current`, like the
    /// kernel's `ib_modify_qp_is_ok` (the target is [`state`](Self::state),
    /// or `current` when no state is set), plus the ranges of the fields.
    /// This is the IB/RoCE table: [`check_on`](Self::check_on) with
    /// [`TransportType::Ib`].
    pub fn check(&self, qp_type: QpType, current: QpState) -> Result<(), QpTransitionError> {
        self.check_on(TransportType::Ib, qp_type, current)
    }

    /// [`check`](Self::check) against `transport`'s table: IB/RoCE is the
    /// kernel's `qp_state_table` ([`transition_rule`]), iWARP what its
    /// connection manager answers ([`iwarp_transition_rule`]).
    pub fn check_on(
        &self,
        transport: TransportType,
        qp_type: QpType,
        current: QpState,
    ) -> Result<(), QpTransitionError> {
        let to = self.target_state().unwrap_or(current);
        let mask = self.mask();
        let ranges: [(QpAttrMask, &'static str, u32, u32); 6] = [
            (QpAttrMask::TIMEOUT, "timeout", self.req.timeout.into(), 31),
            (
                QpAttrMask::RETRY_CNT,
                "retry_cnt",
                self.req.retry_cnt.into(),
                7,
            ),
            (
                QpAttrMask::RNR_RETRY,
                "rnr_retry",
                self.req.rnr_retry.into(),
                7,
            ),
            (
                QpAttrMask::MIN_RNR_TIMER,
                "min_rnr_timer",
                self.req.min_rnr_timer.into(),
                31,
            ),
            (QpAttrMask::RQ_PSN, "rq_psn", self.req.rq_psn, 0xff_ffff),
            (QpAttrMask::SQ_PSN, "sq_psn", self.req.sq_psn, 0xff_ffff),
        ];
        let qpn = (
            QpAttrMask::DEST_QPN,
            "dest_qpn",
            self.req.dest_qp_num,
            0xff_ffff,
        );
        for (bit, field, value, max) in ranges.into_iter().chain([qpn]) {
            if mask.contains(bit) && value > max {
                return Err(QpTransitionError::OutOfRange { field, value, max });
            }
        }
        let invalid = QpTransitionError::InvalidTransition {
            qp_type,
            from: current,
            to,
        };
        // CUR_STATE is accepted only from RTR, RTS, SQD or SQE.
        if mask.contains(QpAttrMask::CUR_STATE)
            && !matches!(
                current,
                QpState::Rtr | QpState::Rts | QpState::Sqd | QpState::Sqe
            )
        {
            return Err(invalid);
        }
        let rule = match transport {
            TransportType::Ib => transition_rule(current, to).ok_or(invalid)?,
            TransportType::Iwarp => {
                iwarp_transition_rule(current, to).map_err(|e| e.unwrap_or(invalid))?
            }
        };
        let (required, optional) = (rule.required(qp_type), rule.optional(qp_type));
        let missing = required.difference(mask);
        if !missing.is_empty() {
            return Err(QpTransitionError::MissingAttributes {
                qp_type,
                from: current,
                to,
                missing,
            });
        }
        let extra = mask.difference(required | optional | QpAttrMask::STATE);
        if !extra.is_empty() {
            return Err(QpTransitionError::UnexpectedAttributes {
                qp_type,
                from: current,
                to,
                extra,
            });
        }
        Ok(())
    }

    /// The kernel's request for QP `qp_handle` (crate-internal: the
    /// command is [`ModifyQp`](super::ModifyQp)).
    pub(super) fn request(&self, qp_handle: u32) -> sys::ib_uverbs_modify_qp {
        sys::ib_uverbs_modify_qp {
            qp_handle,
            ..self.req
        }
    }
}

#[cfg(test)]
impl QpAttr {
    /// rc_pingpong's INIT -> RTR towards `dgid` (peer QPN 0x11, RQ PSN
    /// 0x1234): the fixture these tests and the golden bytes share.
    pub(crate) fn rc_pingpong_rtr(dgid: [u8; 16]) -> Self {
        QpAttr::new()
            .state(QpState::Rtr)
            .path_mtu(Mtu::Mtu1024)
            .dest_qpn(0x11)
            .rq_psn(0x1234)
            .max_dest_rd_atomic(1)
            .min_rnr_timer(12)
            .av(QpAttr::roce_dest(Gid::from_raw(dgid), 1, 1, 1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gid() -> [u8; 16] {
        [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 192, 0, 2, 1]
    }

    fn rc_init() -> QpAttr {
        QpAttr::new()
            .state(QpState::Init)
            .pkey_index(0)
            .port(1)
            .access_flags(
                AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_ATOMIC,
            )
    }

    fn rc_rtr() -> QpAttr {
        QpAttr::rc_pingpong_rtr(gid())
    }

    fn rc_rts() -> QpAttr {
        QpAttr::new()
            .state(QpState::Rts)
            .timeout(14)
            .retry_cnt(7)
            .rnr_retry(7)
            .sq_psn(0x4321)
            .max_rd_atomic(1)
    }

    #[test]
    fn rc_pingpong_masks_come_from_the_fields_alone() {
        assert_eq!(rc_init().mask().bits(), 0x39);
        assert_eq!(rc_rtr().mask().bits(), 0x12_9181);
        assert_eq!(rc_rts().mask().bits(), 0x1_2E01);
        // Setting a field twice does not change the mask.
        assert_eq!(rc_init().port(1).mask().bits(), 0x39);
    }

    #[test]
    fn mask_bits_are_the_kernels() {
        // enum ib_qp_attr_mask of include/rdma/ib_verbs.h (6.12).
        let bits = [
            (QpAttrMask::STATE, 1 << 0),
            (QpAttrMask::CUR_STATE, 1 << 1),
            (QpAttrMask::EN_SQD_ASYNC_NOTIFY, 1 << 2),
            (QpAttrMask::ACCESS_FLAGS, 1 << 3),
            (QpAttrMask::PKEY_INDEX, 1 << 4),
            (QpAttrMask::PORT, 1 << 5),
            (QpAttrMask::QKEY, 1 << 6),
            (QpAttrMask::AV, 1 << 7),
            (QpAttrMask::PATH_MTU, 1 << 8),
            (QpAttrMask::TIMEOUT, 1 << 9),
            (QpAttrMask::RETRY_CNT, 1 << 10),
            (QpAttrMask::RNR_RETRY, 1 << 11),
            (QpAttrMask::RQ_PSN, 1 << 12),
            (QpAttrMask::MAX_QP_RD_ATOMIC, 1 << 13),
            (QpAttrMask::ALT_PATH, 1 << 14),
            (QpAttrMask::MIN_RNR_TIMER, 1 << 15),
            (QpAttrMask::SQ_PSN, 1 << 16),
            (QpAttrMask::MAX_DEST_RD_ATOMIC, 1 << 17),
            (QpAttrMask::PATH_MIG_STATE, 1 << 18),
            (QpAttrMask::CAP, 1 << 19),
            (QpAttrMask::DEST_QPN, 1 << 20),
        ];
        for (flag, bit) in bits {
            assert_eq!(flag.bits(), bit, "{flag:?}");
        }
        assert_eq!(QpAttrMask::all().bits(), (1 << 21) - 1, "GENMASK(20, 0)");
    }

    #[test]
    fn each_setter_writes_its_field() {
        let r = rc_rtr().request(9);
        assert_eq!(
            (r.qp_handle, r.qp_state, r.path_mtu, r.dest_qp_num, r.rq_psn),
            (9, 2, 3, 0x11, 0x1234)
        );
        assert_eq!((r.max_dest_rd_atomic, r.min_rnr_timer), (1, 12));
        assert_eq!((r.dest.dgid, r.dest.sgid_index), (gid(), 1));
        assert_eq!(
            (r.dest.hop_limit, r.dest.is_global, r.dest.port_num),
            (1, 1, 1)
        );
        let r = rc_rts().request(9);
        assert_eq!(
            (
                r.timeout,
                r.retry_cnt,
                r.rnr_retry,
                r.sq_psn,
                r.max_rd_atomic
            ),
            (14, 7, 7, 0x4321, 1)
        );
        let r = rc_init().qkey(0x1111_1111).request(3);
        assert_eq!((r.pkey_index, r.port_num, r.qp_access_flags), (0, 1, 0xb));
        assert_eq!(r.qkey, 0x1111_1111);
    }

    #[test]
    fn rc_walks_reset_init_rtr_rts() {
        assert_eq!(rc_init().check(QpType::Rc, QpState::Reset), Ok(()));
        assert_eq!(rc_rtr().check(QpType::Rc, QpState::Init), Ok(()));
        assert_eq!(rc_rts().check(QpType::Rc, QpState::Rtr), Ok(()));
    }

    #[test]
    fn uc_and_ud_walks() {
        let uc_init = QpAttr::new()
            .state(QpState::Init)
            .pkey_index(0)
            .port(1)
            .access_flags(AccessFlags::REMOTE_WRITE);
        let uc_rtr = QpAttr::new()
            .state(QpState::Rtr)
            .path_mtu(Mtu::Mtu1024)
            .dest_qpn(5)
            .rq_psn(0)
            .av(QpAttr::roce_dest(Gid::from_raw(gid()), 1, 1, 1));
        let sq = QpAttr::new().state(QpState::Rts).sq_psn(0);
        assert_eq!(uc_init.check(QpType::Uc, QpState::Reset), Ok(()));
        assert_eq!(uc_rtr.check(QpType::Uc, QpState::Init), Ok(()));
        assert_eq!(sq.check(QpType::Uc, QpState::Rtr), Ok(()));
        let ud_init = QpAttr::new()
            .state(QpState::Init)
            .pkey_index(0)
            .port(1)
            .qkey(0x1111_1111);
        assert_eq!(ud_init.check(QpType::Ud, QpState::Reset), Ok(()));
        let ud_rtr = QpAttr::new().state(QpState::Rtr);
        assert_eq!(ud_rtr.check(QpType::Ud, QpState::Init), Ok(()));
        assert_eq!(sq.check(QpType::Ud, QpState::Rtr), Ok(()));
        // UC takes no RC-only attribute into RTR; UD no access flags at INIT.
        assert!(matches!(
            rc_rtr().check(QpType::Uc, QpState::Init),
            Err(QpTransitionError::UnexpectedAttributes { extra, .. })
                if extra == QpAttrMask::MAX_DEST_RD_ATOMIC | QpAttrMask::MIN_RNR_TIMER
        ));
        assert!(matches!(
            rc_init().check(QpType::Ud, QpState::Reset),
            Err(QpTransitionError::MissingAttributes {
                missing: QpAttrMask::QKEY,
                ..
            })
        ));
    }

    #[test]
    fn missing_attribute_is_named() {
        let no_psn = QpAttr::new()
            .state(QpState::Rts)
            .timeout(14)
            .retry_cnt(7)
            .rnr_retry(7)
            .max_rd_atomic(1);
        assert_eq!(
            no_psn.check(QpType::Rc, QpState::Rtr),
            Err(QpTransitionError::MissingAttributes {
                qp_type: QpType::Rc,
                from: QpState::Rtr,
                to: QpState::Rts,
                missing: QpAttrMask::SQ_PSN,
            })
        );
    }

    #[test]
    fn invalid_transitions_are_refused() {
        use QpState::*;
        for (from, to) in [
            (Reset, Rtr),
            (Reset, Rts),
            (Init, Rts),
            (Rtr, Init),
            (Reset, Err),
        ] {
            let attr = QpAttr::new().state(to);
            assert_eq!(
                attr.check(QpType::Rc, from),
                Result::Err(QpTransitionError::InvalidTransition {
                    qp_type: QpType::Rc,
                    from,
                    to
                }),
                "{from:?} -> {to:?}"
            );
        }
    }

    #[test]
    fn any_started_state_may_fail_and_any_state_may_reset() {
        use QpState::*;
        for qp_type in [QpType::Rc, QpType::Uc, QpType::Ud] {
            for from in [Reset, Init, Rtr, Rts, Sqd, Sqe, Err] {
                let reset = QpAttr::new().state(Reset);
                assert_eq!(reset.check(qp_type, from), Ok(()), "{from:?} -> RESET");
                let err = QpAttr::new().state(Err).check(qp_type, from);
                assert_eq!(err.is_ok(), from != Reset, "{qp_type:?} {from:?} -> ERR");
                // Nothing but the state goes with a reset.
                assert!(reset.port(1).check(qp_type, from).is_err());
            }
        }
    }

    /// The whole table for RC, UC and UD: which (from, to) pairs are valid.
    #[test]
    fn valid_pairs_are_exactly_the_kernels() {
        use QpState::*;
        let all = [Reset, Init, Rtr, Rts, Sqd, Sqe, Err];
        let mut valid = Vec::new();
        for from in all {
            for to in all {
                if transition_rule(from, to).is_some() {
                    valid.push((from, to));
                }
            }
        }
        let expected = vec![
            (Reset, Reset),
            (Reset, Init),
            (Init, Reset),
            (Init, Init),
            (Init, Rtr),
            (Init, Err),
            (Rtr, Reset),
            (Rtr, Rts),
            (Rtr, Err),
            (Rts, Reset),
            (Rts, Rts),
            (Rts, Sqd),
            (Rts, Err),
            (Sqd, Reset),
            (Sqd, Rts),
            (Sqd, Sqd),
            (Sqd, Err),
            (Sqe, Reset),
            (Sqe, Rts),
            (Sqe, Err),
            (Err, Reset),
            (Err, Err),
        ];
        assert_eq!(valid, expected);
    }

    #[test]
    fn required_and_optional_masks_per_type() {
        use QpAttrMask as M;
        use QpState::*;
        let r = transition_rule(Reset, Init).unwrap();
        assert_eq!(r.required(QpType::Rc).bits(), 0x38);
        assert_eq!(r.required(QpType::Uc).bits(), 0x38);
        assert_eq!(r.required(QpType::Ud).bits(), 0x70);
        let r = transition_rule(Init, Rtr).unwrap();
        assert_eq!(r.required(QpType::Rc).bits(), 0x12_9180);
        assert_eq!(r.required(QpType::Uc).bits(), 0x10_1180);
        assert_eq!(r.required(QpType::Ud), M::empty());
        assert_eq!(r.optional(QpType::Ud), M::PKEY_INDEX | M::QKEY);
        let r = transition_rule(Rtr, Rts).unwrap();
        assert_eq!(r.required(QpType::Rc).bits(), 0x1_2E00);
        assert_eq!(r.required(QpType::Uc), M::SQ_PSN);
        assert_eq!(r.required(QpType::Ud), M::SQ_PSN);
        assert!(r.optional(QpType::Rc).contains(M::MIN_RNR_TIMER));
        assert!(!r.optional(QpType::Uc).contains(M::MIN_RNR_TIMER));
    }

    #[test]
    fn rts_to_rts_may_change_access_only_where_allowed() {
        let access = QpAttr::new().access_flags(AccessFlags::REMOTE_READ);
        assert_eq!(access.check(QpType::Rc, QpState::Rts), Ok(()));
        assert!(access.check(QpType::Ud, QpState::Rts).is_err());
        // Without a state the target is the current state.
        assert_eq!(access.target_state(), None);
    }

    #[test]
    fn out_of_range_fields_are_refused() {
        let attr = rc_rts().timeout(32);
        assert_eq!(
            attr.check(QpType::Rc, QpState::Rtr),
            Err(QpTransitionError::OutOfRange {
                field: "timeout",
                value: 32,
                max: 31
            })
        );
        let attr = rc_rts().sq_psn(1 << 24);
        assert!(matches!(
            attr.check(QpType::Rc, QpState::Rtr),
            Err(QpTransitionError::OutOfRange {
                field: "sq_psn",
                ..
            })
        ));
        let attr = rc_rts().retry_cnt(8);
        assert!(matches!(
            attr.check(QpType::Rc, QpState::Rtr),
            Err(QpTransitionError::OutOfRange {
                field: "retry_cnt",
                ..
            })
        ));
    }

    /// What the iWARP CM answers (`iw_cm_init_qp_attr` + cma's PORT):
    /// INIT and RTR carry STATE, ACCESS_FLAGS and PORT, RTS PORT alone.
    fn iwarp_cm_answers() -> [QpAttr; 3] {
        let rw = AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ;
        [
            QpAttr::new().state(QpState::Init).access_flags(rw).port(1),
            QpAttr::new().state(QpState::Rtr).access_flags(rw).port(1),
            QpAttr::new().port(1),
        ]
    }

    #[test]
    fn the_iwarp_cm_answers_pass_the_iwarp_table_and_not_the_ib_one() {
        use QpState::{Init, Reset, Rtr, Rts};
        let [init, rtr, rts] = iwarp_cm_answers();
        assert_eq!(init.mask().bits(), 0x29);
        assert_eq!(rts.mask(), QpAttrMask::PORT);
        let iw = TransportType::Iwarp;
        assert_eq!(init.check_on(iw, QpType::Rc, Reset), Ok(()));
        assert_eq!(
            init.check_on(iw, QpType::Rc, Init),
            Ok(()),
            "librdmacm's INIT again"
        );
        assert_eq!(rtr.check_on(iw, QpType::Rc, Init), Ok(()));
        assert_eq!(
            rts.check_on(iw, QpType::Rc, Rtr),
            Ok(()),
            "no state: stays RTR"
        );
        assert_eq!(rts.check_on(iw, QpType::Rc, Rts), Ok(()));
        // The client's INIT before CONNECT (access 0) and the IB-style INIT.
        let ib_init = rc_init();
        assert_eq!(ib_init.check_on(iw, QpType::Rc, Reset), Ok(()));
        // The IB table refuses all three, as it did on siw before.
        assert!(matches!(
            init.check(QpType::Rc, Reset),
            Err(QpTransitionError::MissingAttributes {
                missing: QpAttrMask::PKEY_INDEX,
                ..
            })
        ));
        assert!(matches!(
            rtr.check(QpType::Rc, Init),
            Err(QpTransitionError::MissingAttributes { .. })
        ));
        assert!(matches!(
            rts.check(QpType::Rc, Rtr),
            Err(QpTransitionError::InvalidTransition { .. })
        ));
        // check is check_on(Ib): unchanged for IB's own walk.
        assert_eq!(
            rc_rtr().check_on(TransportType::Ib, QpType::Rc, Init),
            Ok(())
        );
        assert_eq!(
            rc_rts().check_on(TransportType::Ib, QpType::Rc, Rtr),
            Ok(())
        );
    }

    #[test]
    fn an_iwarp_qp_enters_rts_only_through_the_cm() {
        use QpState::{Init, Reset, Rtr, Rts, Sqd, Sqe};
        const ERR: QpState = QpState::Err;
        let iw = TransportType::Iwarp;
        for from in [Init, Rtr, Sqd, Sqe, ERR] {
            assert_eq!(
                rc_rts().check_on(iw, QpType::Rc, from),
                Err(QpTransitionError::RtsOnlyThroughCm { from }),
                "{from:?}"
            );
            assert_eq!(
                QpAttr::new().state(Rts).check_on(iw, QpType::Rc, from),
                Err(QpTransitionError::RtsOnlyThroughCm { from })
            );
        }
        // Invalid pairs stay invalid; IB's RTR attributes are not iWARP's.
        assert!(matches!(
            QpAttr::new().state(Rtr).check_on(iw, QpType::Rc, Reset),
            Err(QpTransitionError::InvalidTransition { .. })
        ));
        assert!(matches!(
            QpAttr::new().state(ERR).check_on(iw, QpType::Rc, Reset),
            Err(QpTransitionError::InvalidTransition { .. })
        ));
        assert!(matches!(
            rc_rtr().check_on(iw, QpType::Rc, Init),
            Err(QpTransitionError::UnexpectedAttributes { .. })
        ));
        // RESET, ERR and librdmacm's iWARP shutdown (RTS -> SQD).
        assert_eq!(
            QpAttr::new().state(Reset).check_on(iw, QpType::Rc, Rts),
            Ok(())
        );
        assert_eq!(
            QpAttr::new().state(ERR).check_on(iw, QpType::Rc, Rtr),
            Ok(())
        );
        assert_eq!(
            QpAttr::new().state(Sqd).check_on(iw, QpType::Rc, Rts),
            Ok(())
        );
        // INIT needs its access flags and port, as the CM always answers.
        assert!(matches!(
            QpAttr::new()
                .state(Init)
                .port(1)
                .check_on(iw, QpType::Rc, Reset),
            Err(QpTransitionError::MissingAttributes {
                missing: QpAttrMask::ACCESS_FLAGS,
                ..
            })
        ));
    }

    #[test]
    fn mtu_numbers_and_bytes() {
        let all = [
            Mtu::Mtu256,
            Mtu::Mtu512,
            Mtu::Mtu1024,
            Mtu::Mtu2048,
            Mtu::Mtu4096,
        ];
        for (raw, mtu) in (1..=5u8).zip(all) {
            assert_eq!(Mtu::from_raw(raw), Some(mtu));
            assert_eq!(mtu.bytes(), 128 << raw);
        }
        assert_eq!((Mtu::from_raw(0), Mtu::from_raw(6)), (None, None));
        assert_eq!(Mtu::Mtu4096.bytes(), 4096);
    }

    /// A `QUERY_QP` answer as the kernel lays it out (128 bytes, offsets of
    /// `ib_uverbs_query_qp_resp`): each asked attribute reads back, the
    /// others and CAP do not.
    #[test]
    fn a_query_answer_reads_back_what_was_asked() {
        use zerocopy::FromBytes;
        let mut b = [0u8; 128];
        b[..16].copy_from_slice(&gid()); // dest.dgid
        b[24] = 2; // dest.sgid_index
        b[25] = 64; // dest.hop_limit
        b[30] = 1; // dest.is_global
        b[31] = 1; // dest.port_num
        b[64..68].copy_from_slice(&15u32.to_ne_bytes()); // max_send_wr
        b[84..88].copy_from_slice(&0x1111_1111u32.to_ne_bytes()); // qkey
        b[88..92].copy_from_slice(&0x12_3456u32.to_ne_bytes()); // rq_psn
        b[92..96].copy_from_slice(&0xab_cdefu32.to_ne_bytes()); // sq_psn
        b[96..100].copy_from_slice(&0x77u32.to_ne_bytes()); // dest_qp_num
        b[100..104].copy_from_slice(&2u32.to_ne_bytes()); // access: REMOTE_WRITE
        b[108] = 3; // qp_state: RTS
        b[110] = 3; // path_mtu: 1024
        b[115] = 12; // min_rnr_timer
        b[116] = 1; // port_num
        b[117] = 14; // timeout
        b[118] = 7; // retry_cnt
        b[119] = 6; // rnr_retry
        let resp = sys::ib_uverbs_query_qp_resp::read_from_bytes(&b[..]).unwrap();
        let m = QpAttrMask::all();
        let a = QpAttr::from_query(&resp, m);
        assert_eq!(
            a.mask(),
            m - QpAttrMask::CAP - QpAttrMask::EN_SQD_ASYNC_NOTIFY
        );
        assert_eq!(
            (a.get_state(), a.get_qkey()),
            (Some(QpState::Rts), Some(0x1111_1111))
        );
        assert_eq!(
            (a.get_rq_psn(), a.get_sq_psn()),
            (Some(0x12_3456), Some(0xab_cdef))
        );
        assert_eq!((a.get_dest_qpn(), a.get_port()), (Some(0x77), Some(1)));
        assert_eq!(a.get_path_mtu(), Some(Mtu::Mtu1024));
        assert_eq!(a.get_access_flags(), Some(AccessFlags::REMOTE_WRITE));
        assert_eq!(
            (
                a.get_min_rnr_timer(),
                a.get_timeout(),
                a.get_retry_cnt(),
                a.get_rnr_retry()
            ),
            (Some(12), Some(14), Some(7), Some(6))
        );
        assert_eq!(
            a.get_av(),
            Some(QpAttr::roce_dest(Gid::from_raw(gid()), 2, 64, 1))
        );
        // Only what was asked.
        let a = QpAttr::from_query(&resp, QpAttrMask::QKEY);
        assert_eq!(
            (a.get_qkey(), a.get_state(), a.get_port()),
            (Some(0x1111_1111), None, None)
        );
        assert_eq!(a.without(QpAttrMask::QKEY).get_qkey(), None);
        // An unknown state or MTU number reads as none.
        let mut odd = resp;
        (odd.qp_state, odd.path_mtu) = (9, 0);
        let a = QpAttr::from_query(&odd, m);
        assert_eq!((a.get_state(), a.get_path_mtu()), (None, None));
    }

    #[test]
    fn state_numbers_round_trip() {
        for raw in 0..=6u8 {
            assert_eq!(QpState::from_raw(raw).map(|s| s as u8), Some(raw));
        }
        assert_eq!(QpState::from_raw(7), None);
        assert_eq!(QpType::Rc.raw(), 2);
        assert_eq!(QpType::Uc.raw(), 3);
        assert_eq!(QpType::Ud.raw(), 4);
    }
}
