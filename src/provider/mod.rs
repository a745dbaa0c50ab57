//! What differs per kernel driver, in one place per driver, and which
//! driver a device has ([`driver::DriverId`]).
//!
//! The core (contexts, PDs, MRs, CQs, QPs) never asks which driver it talks
//! to; it asks the context's [`Provider`], chosen once at open from the
//! driver id (no `dlopen`, a closed set). Each driver's module holds its
//! driver-private (UHW) command tails, its ABI range, what its kernel code
//! does on failure and its data-path rings, and says so by implementing
//! [`Driver`] (and the ring traits of [`rings`]) for a zero-sized type;
//! [`generic`] is what holds for any driver.
//!
//! **One driver list.** The drivers are named once, in the `drivers!`
//! invocation below. It makes [`Provider`] and the ring enums objects store
//! ([`CqRing`], [`SendQueue`], [`RecvQueue`]), one variant per driver, and
//! the two matches everything else is written with: `with_driver!` (a
//! provider's driver as a type) and `each_ring!` (a ring enum's ring). A
//! new driver is its trait implementations plus one line in that list.
//! Why enums and not `dyn`: the set is closed, and a match over concrete
//! types lets the post and poll paths inline into the caller as they did
//! when each match was written by hand (the instruction probes of the rxe
//! and siw modules count them). Why a generating macro and not a generic
//! enum over a driver parameter: the objects hold one ring whose driver is
//! known only at run time, so something must list the variants; listing
//! them once is the least code.

#[cfg(all(test, not(miri)))]
pub(crate) mod call_probe;
pub(crate) mod driver;
pub(crate) mod generic;

use crate::command::{QpType, TransportType};
use crate::error::Errno;
use crate::flags::ReregFlags;
use crate::transport::Transport;
use driver::DriverId;
use rings::{CompletionRing, QpRingConfig, RecvRing, SendRing};

/// Room for the largest driver answer to GET_CONTEXT (mlx5's; checked
/// against each driver's at compile time, in the driver list).
pub(crate) const MAX_GET_CONTEXT_UHW_OUT: usize = 72;
/// Room for the largest driver answer to ALLOC_PD (mlx5's PD number).
pub(crate) const MAX_ALLOC_PD_UHW_OUT: usize = 8;

/// One kernel driver's provider, implemented by a zero-sized type in its
/// module. The defaults are those of a driver that needs no private data.
pub(crate) trait Driver {
    /// Its kernel driver id.
    const ID: DriverId;
    /// Driver ABI versions this crate speaks with it: `(lowest, highest,
    /// text for errors)`.
    const ABI: (u32, u32, &'static str);
    /// Bytes of driver-private GET_CONTEXT output the kernel requires.
    const GET_CONTEXT_UHW_OUT: usize = 0;
    /// Bytes of driver-private ALLOC_PD output the kernel writes.
    const ALLOC_PD_UHW_OUT: usize = 0;
    /// Driver-private REG_MR input, and the size of its output.
    const REG_MR_UHW: (&'static [u8], usize) = (&[], 0);
    /// Whether a registration may go as the native `UVERBS_METHOD_REG_MR`
    /// (Linux 6.17), which carries no driver data: the kernel calls the
    /// driver's `reg_user_mr` with a `NULL` udata. True where the driver's
    /// answer is then the one the write command gets with [`REG_MR_UHW`]
    /// (rxe and mlx5 read no udata there; siw: see its provider); a driver
    /// that needs its udata must say false and keep the write command.
    ///
    /// [`REG_MR_UHW`]: Self::REG_MR_UHW
    const REG_MR_METHOD: bool = true;
    /// Bytes of driver answer a CQ create needs room for.
    const CREATE_CQ_UHW_OUT: usize;
    /// Bytes of driver answer a QP create needs room for.
    const CREATE_QP_UHW_OUT: usize;
    /// Why its rings cannot be used on this CPU, if they cannot.
    const DATA_PATH_REFUSAL: Option<&'static str> = None;
    /// Whether `DEREG_MR` stops the RDMA READ responses being sent from
    /// the region: once it returns, no byte of it leaves (hardware, rxe).
    const DEREG_FENCES_PEER_READS: bool = true;
    /// Whether a QP's send queue completes in posting order (siw does not:
    /// a later request may complete before an earlier one).
    const SEND_COMPLETES_IN_ORDER: bool = true;
    /// Why an owned QP's SEND or WRITE must be signalled on this driver,
    /// if it must (siw: it completes out of order and sends unsignalled
    /// payloads zero-copy, so only a request's own completion frees its
    /// memory).
    const OWNED_SENDS_MUST_BE_SIGNALLED: Option<&'static str> = None;
    /// Whether a move to RESET empties the QP's queues without a
    /// completion for what was outstanding (rxe's `rxe_qp_reset`; siw
    /// keeps its rings, its QP staying in ERR).
    const RESET_EMPTIES_QUEUES: bool = false;
    /// How its QPs connect: IB and RoCE, or iWARP (siw).
    const TRANSPORT: TransportType = TransportType::Ib;
    /// Whether this crate sends ALLOC_MW for it (rxe binds memory windows;
    /// siw's kernel answers `EOPNOTSUPP` for itself).
    const SENDS_ALLOC_MW: bool = false;
    /// How it makes an address handle.
    const AH_CREATION: AhCreation = AhCreation::Unsupported;

    /// Whether a `QUERY_QP` answer's `qp_state` (raw) reports the QP's
    /// state (siw's early kernels leave it zero, RESET, for every QP).
    fn query_qp_reports_state(_qp_state: u8) -> bool {
        true
    }

    /// What the driver keeps per context (mlx5: the sizes GET_CONTEXT
    /// answered, its UAR pages, its QP table); `()` for rxe and siw.
    type State: Send + Sync;
    /// What a CQ create needs before the command (mlx5: the CQE buffer and
    /// doorbell record it hands the kernel, and the driver data naming them).
    type CqPrep: UhwIn;
    /// The same for a QP create.
    type QpPrep: UhwIn;

    /// A CQ's ring.
    type Cq: CompletionRing;
    /// A QP's send queue.
    type Sq: SendRing;
    /// A QP's receive queue.
    type Rq: RecvRing;

    /// Driver-private GET_CONTEXT input the kernel requires.
    fn get_context_uhw_in() -> &'static [u8] {
        &[]
    }

    /// Beyond [`generic::rereg_refusal_leaves_mr_unchanged`]: whether its
    /// answer `errno` to a REREG_MR guarantees that nothing was changed.
    fn rereg_refusal_leaves_mr_unchanged(errno: Errno) -> bool;

    /// Whether it creates QPs of this type.
    fn supports_qp_type(_qp_type: QpType) -> bool {
        true
    }

    /// The context's state, from the GET_CONTEXT answer (`uhw_out`, the
    /// driver's part); runs once per context, after GET_CONTEXT.
    fn open_state(transport: &dyn Transport, uhw_out: &[u8]) -> Result<Self::State, Errno>;

    /// Why this context has no data path although the driver has one
    /// (mlx5: a kernel answer without what its queues need); checked
    /// before a CQ or QP create sends anything.
    fn state_refusal(_state: &Self::State) -> Option<&'static str> {
        None
    }

    /// Prepares a CQ of at least `cqe` entries: what to hand the kernel,
    /// and the `cqe` to ask it for.
    fn prepare_cq(state: &Self::State, cqe: u32) -> Result<(Self::CqPrep, u32), Errno>;

    /// Reads the CREATE_CQ answer (`written` bytes of `uhw`) and maps the
    /// ring (or takes over the prepared memory).
    fn map_cq(
        state: &Self::State,
        prep: Self::CqPrep,
        transport: &dyn Transport,
        uhw: &[u8],
        written: usize,
    ) -> Result<Self::Cq, Errno>;

    /// Prepares a QP: what to hand the kernel, and the capacities to ask
    /// for (the driver may size its own queues, as mlx5 does).
    fn prepare_qp(
        state: &Self::State,
        transport: &dyn Transport,
        req: QpRequest,
    ) -> Result<(Self::QpPrep, QpRequest), Errno>;

    /// Reads the CREATE_QP answer and maps the rings; on an error none is
    /// left mapped. `cfg` holds the kernel's answer; a driver that sized
    /// the queues itself answers its own limits in [`qp_caps`](Self::qp_caps).
    /// A QP on an SRQ (`cfg.has_srq`) has no receive ring: `None`.
    fn map_qp(
        state: &Self::State,
        prep: Self::QpPrep,
        transport: &dyn Transport,
        uhw: &[u8],
        written: usize,
        qpn: u32,
        cfg: QpRingConfig,
    ) -> Result<(Self::Sq, Option<Self::Rq>), Errno>;

    /// What the QP holds: by default the kernel's answer, raised to what
    /// the rings hold where that is more ([`SendRing::ring_capacity`]).
    fn qp_caps(
        sq: &Self::Sq,
        rq: Option<&Self::Rq>,
        kernel: uverbs_uapi::ib_uverbs_qp_cap,
    ) -> uverbs_uapi::ib_uverbs_qp_cap {
        uverbs_uapi::ib_uverbs_qp_cap {
            max_send_wr: sq
                .ring_capacity()
                .map_or(kernel.max_send_wr, |c| c.max(kernel.max_send_wr)),
            max_recv_wr: rq
                .and_then(RecvRing::ring_capacity)
                .map_or(kernel.max_recv_wr, |c| c.max(kernel.max_recv_wr)),
            ..kernel
        }
    }

    /// Bytes of driver answer an SRQ create needs room for; `None` (the
    /// default) where this crate has no SRQ for the driver: creating one
    /// answers [`Error::Unsupported`](crate::Error::Unsupported) unsent.
    const CREATE_SRQ_UHW_OUT: Option<usize> = None;
    /// Driver-private input every MODIFY_SRQ carries (rxe's 8 bytes).
    const MODIFY_SRQ_UHW_IN: &'static [u8] = &[];

    /// What an SRQ create needs before the command: nothing (`()`) where
    /// the kernel allocates the ring (rxe, siw); mlx5's WQE buffer, doorbell
    /// record and the driver data naming them (`Some`).
    type SrqPrep: UhwIn + Default;

    /// Prepares an SRQ of at least `max_wr` requests of `max_sge` SGEs:
    /// what to hand the kernel, and the `(max_wr, max_sge)` to ask it for.
    /// By default nothing, and the sizes asked.
    fn prepare_srq(
        _state: &Self::State,
        max_wr: u32,
        max_sge: u32,
    ) -> Result<(Self::SrqPrep, u32, u32), Errno> {
        Ok((Self::SrqPrep::default(), max_wr, max_sge))
    }

    /// Reads the CREATE_SRQ answer and maps the SRQ's ring, a receive
    /// queue of requests of at most `max_sge` SGEs (the kernel's answer).
    fn map_srq(
        _state: &Self::State,
        _transport: &dyn Transport,
        _uhw: &[u8],
        _written: usize,
        _max_sge: u32,
    ) -> Result<Self::Rq, Errno> {
        Err(Errno::OPNOTSUPP)
    }

    /// [`map_srq`](Self::map_srq) for a driver that prepared the SRQ
    /// (`prep`), which QPs name by its kernel `handle`
    /// ([`QpRingConfig::srq`]). By default the preparation is dropped and
    /// `map_srq` maps the kernel's ring.
    fn map_prepared_srq(
        state: &Self::State,
        _prep: Self::SrqPrep,
        transport: &dyn Transport,
        uhw: &[u8],
        written: usize,
        _handle: u32,
        max_sge: u32,
    ) -> Result<Self::Rq, Errno> {
        Self::map_srq(state, transport, uhw, written, max_sge)
    }

    /// What an SRQ holds, told its ring and the kernel's answer: by
    /// default the larger (rxe on 6.1 rounds its ring up).
    fn srq_max_wr(rq: &Self::Rq, kernel_max_wr: u32) -> u32 {
        rq.ring_capacity()
            .map_or(kernel_max_wr, |c| c.max(kernel_max_wr))
    }
}

/// How a driver makes an address handle ([`Driver::AH_CREATION`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum AhCreation {
    /// None here: `EOPNOTSUPP` (siw has no UD; unknown drivers).
    Unsupported,
    /// The kernel's CREATE_AH, whose driver answer names the AH (rxe).
    Command,
    /// An address vector built in user space (mlx5).
    UserSpace,
}

/// The driver data a prepared create carries to the kernel (`UHW_IN`).
pub(crate) trait UhwIn {
    /// The bytes; empty for a driver that sends none.
    fn uhw_in(&self) -> &[u8];
}

impl UhwIn for () {
    fn uhw_in(&self) -> &[u8] {
        &[]
    }
}

impl<T: UhwIn> UhwIn for Option<T> {
    fn uhw_in(&self) -> &[u8] {
        self.as_ref().map_or(&[], UhwIn::uhw_in)
    }
}

/// What a QP create asks for, before the driver's preparation.
#[derive(Clone, Copy, Debug)]
pub(crate) struct QpRequest {
    /// The QP's type.
    pub(crate) qp_type: QpType,
    /// The capacities asked for.
    pub(crate) cap: uverbs_uapi::ib_uverbs_qp_cap,
}

/// A driver of the driver list: its [`Driver::State`] in a context's
/// [`DriverState`], its rings in the ring enums (made by the list).
pub(crate) trait StateOf: Driver {
    /// The state, if `state` is this driver's.
    fn state_of(state: &DriverState) -> Option<&Self::State>;
    /// The CQ ring as the enum holds it.
    fn cq_ring(ring: Self::Cq) -> CqRing;
    /// This driver's ring, if the enum holds one (it always does for a CQ
    /// this driver made: a ring never changes driver).
    fn cq_ring_mut(ring: &mut CqRing) -> Option<&mut Self::Cq>;
    /// The QP's queues as the enums hold them.
    fn queues(sq: Self::Sq, rq: Option<Self::Rq>) -> (SendQueue, Option<RecvQueue>);
    /// This driver's send queue, if the enum holds one (it always does for
    /// a QP this driver made).
    fn send_queue_mut(sq: &mut SendQueue) -> Option<&mut Self::Sq>;
    /// A receive queue (an SRQ's) as the enum holds it.
    fn recv_queue(rq: Self::Rq) -> RecvQueue;
    /// This driver's receive queue, if the enum holds one (it always does
    /// for a QP this driver made).
    fn recv_queue_mut(rq: &mut RecvQueue) -> Option<&mut Self::Rq>;
}

/// Makes, from the driver list, [`Provider`], the ring enums and the two
/// dispatch macros. `$d` is a `$` token: the macros it defines need their
/// own `$` metavariables, which a macro cannot write literally.
macro_rules! drivers {
    ($d:tt $($(#[doc = $doc:literal])* $V:ident($D:ty),)+) => {
        /// The driver behind a context.
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub(crate) enum Provider {
            $($(#[doc = $doc])* $V,)+
            /// Any other driver, or an unknown one: only what every driver
            /// shares.
            Generic,
        }

        impl Provider {
            /// The provider for a driver id (`Generic` when unknown).
            pub(crate) fn for_driver(id: Option<DriverId>) -> Provider {
                $(if id == Some(<$D as Driver>::ID) {
                    return Provider::$V;
                })+
                Provider::Generic
            }
        }

        /// What a context keeps for its driver ([`Driver::State`]).
        pub(crate) enum DriverState {
            $($(#[doc = $doc])* $V(<$D as Driver>::State),)+
            /// A driver without a data path here: nothing.
            Generic,
        }

        impl DriverState {
            /// Opens the state of `provider`'s driver from the GET_CONTEXT
            /// answer's driver part.
            pub(crate) fn open(
                provider: Provider,
                transport: &dyn Transport,
                uhw_out: &[u8],
            ) -> Result<DriverState, Errno> {
                match provider {
                    $(Provider::$V => <$D as Driver>::open_state(transport, uhw_out)
                        .map(DriverState::$V),)+
                    Provider::Generic => Ok(DriverState::Generic),
                }
            }
        }

        $(
            impl StateOf for $D {
                fn state_of(state: &DriverState) -> Option<&Self::State> {
                    match state {
                        DriverState::$V(s) => Some(s),
                        _ => None,
                    }
                }

                fn cq_ring(ring: Self::Cq) -> CqRing {
                    CqRing::$V(ring)
                }

                #[inline(always)]
                fn cq_ring_mut(ring: &mut CqRing) -> Option<&mut Self::Cq> {
                    #[allow(unreachable_patterns)]
                    match ring {
                        CqRing::$V(r) => Some(r),
                        _ => None,
                    }
                }

                fn queues(sq: Self::Sq, rq: Option<Self::Rq>) -> (SendQueue, Option<RecvQueue>) {
                    (SendQueue::$V(sq), rq.map(RecvQueue::$V))
                }

                #[inline(always)]
                fn send_queue_mut(sq: &mut SendQueue) -> Option<&mut Self::Sq> {
                    #[allow(unreachable_patterns)]
                    match sq {
                        SendQueue::$V(s) => Some(s),
                        _ => None,
                    }
                }

                fn recv_queue(rq: Self::Rq) -> RecvQueue {
                    RecvQueue::$V(rq)
                }

                #[inline(always)]
                fn recv_queue_mut(rq: &mut RecvQueue) -> Option<&mut Self::Rq> {
                    #[allow(unreachable_patterns)]
                    match rq {
                        RecvQueue::$V(r) => Some(r),
                        _ => None,
                    }
                }
            }
        )+

        /// A CQ's ring, per driver.
        pub(crate) enum CqRing {
            $($(#[doc = $doc])* $V(<$D as Driver>::Cq),)+
        }

        /// A QP's send queue, per driver.
        pub(crate) enum SendQueue {
            $($(#[doc = $doc])* $V(<$D as Driver>::Sq),)+
        }

        /// A QP's receive queue, per driver.
        pub(crate) enum RecvQueue {
            $($(#[doc = $doc])* $V(<$D as Driver>::Rq),)+
        }

        $(
            impl From<<$D as Driver>::Cq> for CqRing {
                fn from(ring: <$D as Driver>::Cq) -> CqRing {
                    CqRing::$V(ring)
                }
            }

            impl From<<$D as Driver>::Sq> for SendQueue {
                fn from(ring: <$D as Driver>::Sq) -> SendQueue {
                    SendQueue::$V(ring)
                }
            }

            impl From<<$D as Driver>::Rq> for RecvQueue {
                fn from(ring: <$D as Driver>::Rq) -> RecvQueue {
                    RecvQueue::$V(ring)
                }
            }

            const _: () = assert!(
                match <$D as Driver>::CREATE_SRQ_UHW_OUT {
                    Some(n) => n <= rings::MAX_CREATE_UHW_OUT,
                    None => true,
                }
            );
            const _: () = assert!(
                <$D as Driver>::CREATE_CQ_UHW_OUT <= rings::MAX_CREATE_UHW_OUT
                    && <$D as Driver>::CREATE_QP_UHW_OUT <= rings::MAX_CREATE_UHW_OUT
                    && <$D as Driver>::GET_CONTEXT_UHW_OUT <= MAX_GET_CONTEXT_UHW_OUT
                    && <$D as Driver>::ALLOC_PD_UHW_OUT <= MAX_ALLOC_PD_UHW_OUT
            );
        )+

        /// `with_driver!(provider, D => body, Generic => other)`: `body`
        /// with the type `D` the provider's [`Driver`], or `other`.
        macro_rules! with_driver {
            ($d provider:expr, $d D:ident => $d body:expr, Generic => $d generic:expr) => {
                match $d provider {
                    $($crate::provider::Provider::$V => {
                        type $d D = $D;
                        $d body
                    })+
                    $crate::provider::Provider::Generic => $d generic,
                }
            };
        }

        /// `each_ring!(self, r => body)`, in an `impl` of a ring enum:
        /// `body` with `r` the ring `self` holds.
        macro_rules! each_ring {
            ($d ring:expr, $d r:ident => $d body:expr) => {
                match $d ring {
                    $(Self::$V($d r) => $d body,)+
                }
            };
        }
    };
}

drivers! {$
    /// Soft RoCE (`rdma_rxe`).
    Rxe(crate::provider::rxe::Rxe),
    /// Soft iWARP (`siw`).
    Siw(crate::provider::siw::Siw),
    /// ConnectX (`mlx5_ib`): RC and UC over user-allocated queues
    /// (docs/mlx5.md).
    Mlx5(crate::provider::mlx5::Mlx5),
}

// After the list: these use its macros.
pub(crate) mod mlx5;
pub(crate) mod rings;
pub(crate) mod rxe;
pub(crate) mod siw;

impl Provider {
    /// Driver ABI versions this crate speaks with the driver, where known:
    /// `(lowest, highest, text for errors)`.
    pub(crate) fn supported_abi(self) -> Option<(u32, u32, &'static str)> {
        with_driver!(self, D => Some(D::ABI), Generic => None)
    }

    /// Bytes of driver-private GET_CONTEXT output the kernel requires.
    pub(crate) fn get_context_uhw_out_len(self) -> usize {
        with_driver!(self, D => D::GET_CONTEXT_UHW_OUT, Generic => 0)
    }

    /// Driver-private GET_CONTEXT input the kernel requires.
    pub(crate) fn get_context_uhw_in(self) -> &'static [u8] {
        with_driver!(self, D => D::get_context_uhw_in(), Generic => &[])
    }

    /// Bytes of driver-private ALLOC_PD output the kernel writes.
    pub(crate) fn alloc_pd_uhw_out_len(self) -> usize {
        with_driver!(self, D => D::ALLOC_PD_UHW_OUT, Generic => 0)
    }

    /// Bytes of driver answer an SRQ create needs room for; `None` where
    /// this crate has no SRQ for the driver.
    pub(crate) fn create_srq_uhw_out(self) -> Option<usize> {
        with_driver!(self, D => D::CREATE_SRQ_UHW_OUT, Generic => None)
    }

    /// Driver-private input every MODIFY_SRQ carries.
    pub(crate) fn modify_srq_uhw_in(self) -> &'static [u8] {
        with_driver!(self, D => D::MODIFY_SRQ_UHW_IN, Generic => &[])
    }

    /// Driver-private REG_MR input, and the size of its output.
    pub(crate) fn reg_mr_uhw(self) -> (&'static [u8], usize) {
        with_driver!(self, D => D::REG_MR_UHW, Generic => (&[], 0))
    }

    /// Whether a registration may go as the native `REG_MR`, which carries
    /// no driver data ([`Driver::REG_MR_METHOD`]). Not for unknown drivers:
    /// their `reg_user_mr` may need the udata the method does not pass (on
    /// Linux 6.17 mthca reads it without checking for `NULL`).
    pub(crate) fn reg_mr_method(self) -> bool {
        with_driver!(self, D => D::REG_MR_METHOD, Generic => false)
    }

    /// Whether `DEREG_MR` stops READ responses from the region (unknown
    /// drivers are taken to be hardware, which does).
    pub(crate) fn dereg_fences_peer_reads(self) -> bool {
        with_driver!(self, D => D::DEREG_FENCES_PEER_READS, Generic => true)
    }

    /// Whether a QP's send queue completes in posting order
    /// ([`Driver::SEND_COMPLETES_IN_ORDER`]; unknown drivers: yes).
    pub(crate) fn send_completes_in_order(self) -> bool {
        with_driver!(self, D => D::SEND_COMPLETES_IN_ORDER, Generic => true)
    }

    /// Why an owned QP's SEND or WRITE must be signalled here, if it must
    /// ([`Driver::OWNED_SENDS_MUST_BE_SIGNALLED`]).
    pub(crate) fn owned_sends_must_be_signalled(self) -> Option<&'static str> {
        with_driver!(self, D => D::OWNED_SENDS_MUST_BE_SIGNALLED, Generic => None)
    }

    /// Whether a move to RESET empties the queues without completions
    /// ([`Driver::RESET_EMPTIES_QUEUES`]).
    pub(crate) fn reset_empties_queues(self) -> bool {
        with_driver!(self, D => D::RESET_EMPTIES_QUEUES, Generic => false)
    }

    /// How its QPs connect ([`Driver::TRANSPORT`]; unknown drivers: IB).
    pub(crate) fn transport_type(self) -> TransportType {
        with_driver!(self, D => D::TRANSPORT, Generic => TransportType::Ib)
    }

    /// Whether this crate sends ALLOC_MW for it ([`Driver::SENDS_ALLOC_MW`]).
    pub(crate) fn sends_alloc_mw(self) -> bool {
        with_driver!(self, D => D::SENDS_ALLOC_MW, Generic => false)
    }

    /// How it makes an address handle ([`Driver::AH_CREATION`]).
    pub(crate) fn ah_creation(self) -> AhCreation {
        with_driver!(self, D => D::AH_CREATION, Generic => AhCreation::Unsupported)
    }

    /// Whether a `QUERY_QP` answer's raw `qp_state` reports the state
    /// ([`Driver::query_qp_reports_state`]).
    pub(crate) fn query_qp_reports_state(self, qp_state: u8) -> bool {
        with_driver!(self, D => D::query_qp_reports_state(qp_state), Generic => true)
    }

    /// True when the kernel's answer `errno` to a REREG_MR with `flags`
    /// guarantees that nothing was changed: the MR keeps its old
    /// translation, PD, access and keys ([`MrState::Old`](crate::mr::MrState)).
    /// False means the man page's "undefined" may be real.
    pub(crate) fn rereg_refusal_leaves_mr_unchanged(self, flags: ReregFlags, errno: Errno) -> bool {
        generic::rereg_refusal_leaves_mr_unchanged(flags, errno)
            || with_driver!(self, D => D::rereg_refusal_leaves_mr_unchanged(errno),
                Generic => false)
    }
}

/// The ring property tests' proptest configuration: `cases` cases, or under
/// Miri (thousands of times slower) a handful, with no failure persistence
/// (it writes files, which Miri's isolation refuses; a failing case prints
/// its seed anyway).
#[cfg(test)]
pub(crate) fn ring_prop_config(cases: u32) -> proptest::test_runner::Config {
    let config = proptest::test_runner::Config {
        cases,
        ..proptest::test_runner::Config::default()
    };
    if cfg!(miri) {
        proptest::test_runner::Config {
            cases: 4,
            failure_persistence: None,
            ..config
        }
    } else {
        config
    }
}

/// `n` elements for a ring test, or under Miri `under_miri` (enough to lap
/// small rings several times; the full count would take hours there).
#[cfg(test)]
pub(crate) const fn ring_test_len(n: u64, under_miri: u64) -> u64 {
    if cfg!(miri) {
        under_miri
    } else {
        n
    }
}

/// How long a two-thread ring test waits for the other side before it
/// calls the ring hung. A missed doorbell hangs for ever, so any bound
/// catches it; this one is long enough for the VM's emulated CPUs under the
/// fork-forced configuration, where 40,000 one-slot handshakes once took
/// more than a minute (CI of 2026-12-06, passed on its second attempt).
#[cfg(test)]
pub(crate) const RING_TEST_PATIENCE: std::time::Duration = std::time::Duration::from_secs(300);

/// The one SGE of the instruction-count probes' WRITEs (rxe's and siw's
/// `ir_probe`): 64 bytes at 0x1000, lkey 7.
#[cfg(test)]
pub(crate) const PROBE_SGE: crate::wr::Sge = crate::wr::Sge {
    addr: 0x1000,
    length: 64,
    lkey: 7,
};

/// The instruction-count probes' RDMA WRITE `wr_id` of `sges` to 0x2000,
/// rkey 9, without immediate data.
#[cfg(test)]
pub(crate) fn probe_write(wr_id: u64, sges: &[crate::wr::Sge]) -> crate::wr::SendWr<'_> {
    use crate::wr::{Payload, Remote, SendOp, SendWr};
    SendWr::new(
        wr_id,
        SendOp::RdmaWrite {
            remote: Remote {
                addr: 0x2000,
                rkey: 9,
            },
            imm: None,
        },
        Payload::Sges(sges),
    )
}

/// Spins until `cond` holds, failing the test at `deadline` (the
/// two-thread ring tests of rxe and siw, waiting for the other side).
#[cfg(test)]
pub(crate) fn wait_until(deadline: std::time::Instant, what: &str, mut cond: impl FnMut() -> bool) {
    while !cond() {
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        std::thread::yield_now();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn driver_ids_choose_providers() {
        assert_eq!(Provider::for_driver(Some(DriverId::RXE)), Provider::Rxe);
        assert_eq!(Provider::for_driver(Some(DriverId::SIW)), Provider::Siw);
        assert_eq!(Provider::for_driver(Some(DriverId::MLX5)), Provider::Mlx5);
        assert_eq!(Provider::for_driver(Some(DriverId(4))), Provider::Generic);
        assert_eq!(Provider::for_driver(None), Provider::Generic);
    }

    #[test]
    fn siw_needs_eight_byte_tails() {
        assert_eq!(Provider::Siw.get_context_uhw_out_len(), 8);
        assert_eq!(Provider::Siw.reg_mr_uhw().0.len(), 8);
        assert_eq!(Provider::Siw.reg_mr_uhw().1, 8);
        assert_eq!(Provider::Rxe.get_context_uhw_out_len(), 0);
        assert_eq!(Provider::Rxe.reg_mr_uhw(), (&[][..], 0));
        assert_eq!(Provider::Generic.reg_mr_uhw(), (&[][..], 0));
    }

    #[test]
    fn native_reg_mr_only_for_drivers_whose_reg_mr_was_read() {
        assert!(Provider::Rxe.reg_mr_method());
        assert!(Provider::Siw.reg_mr_method());
        assert!(Provider::Mlx5.reg_mr_method());
        assert!(!Provider::Generic.reg_mr_method());
    }

    #[test]
    fn abi_ranges() {
        assert_eq!(Provider::Rxe.supported_abi(), Some((1, 2, "1..=2")));
        assert_eq!(Provider::Siw.supported_abi(), Some((1, 1, "1")));
        assert_eq!(Provider::Generic.supported_abi(), None);
    }

    #[test]
    fn which_rereg_refusals_leave_the_mr_unchanged() {
        let access = ReregFlags::ACCESS;
        // Every driver: the core's own checks, and the umem check drivers
        // make before changing anything.
        for p in [Provider::Rxe, Provider::Siw, Provider::Generic] {
            assert!(
                p.rereg_refusal_leaves_mr_unchanged(access, Errno::OPNOTSUPP),
                "{p:?}"
            );
            assert!(
                p.rereg_refusal_leaves_mr_unchanged(access, Errno::ACCESS),
                "{p:?}"
            );
            assert!(
                p.rereg_refusal_leaves_mr_unchanged(ReregFlags::empty(), Errno::INVAL),
                "{p:?}"
            );
        }
        // rxe checks everything before changing; only a failed response
        // copy (EFAULT) comes after the change.
        assert!(Provider::Rxe.rereg_refusal_leaves_mr_unchanged(access, Errno::INVAL));
        assert!(Provider::Rxe.rereg_refusal_leaves_mr_unchanged(access, Errno::NOENT));
        assert!(!Provider::Rxe.rereg_refusal_leaves_mr_unchanged(access, Errno::FAULT));
        // siw has no rereg at all: nothing can have changed.
        assert!(Provider::Siw.rereg_refusal_leaves_mr_unchanged(access, Errno::FAULT));
        // Elsewhere an EINVAL may come from a driver midway.
        assert!(!Provider::Generic.rereg_refusal_leaves_mr_unchanged(access, Errno::INVAL));
        assert!(!Provider::Generic.rereg_refusal_leaves_mr_unchanged(access, Errno::FAULT));
    }
}
