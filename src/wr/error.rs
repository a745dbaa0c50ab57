//! Why a work request was not queued: the checks every provider makes
//! before it writes a byte, and those of a driver that cannot do what was
//! asked. [`PostError::errno`] is what rdma-core returns for the same
//! mistake.

use crate::error::Errno;

/// Why a work request was not queued. Nothing was written to the queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PostError {
    /// More SGEs (or inline segments) than the queue takes.
    #[error("{op}: {n} SGEs, the queue takes at most {max} (EINVAL)")]
    TooManySges {
        /// `post_send` or `post_recv`.
        op: &'static str,
        /// SGEs given.
        n: usize,
        /// SGEs a WQE holds.
        max: u32,
    },
    /// Inline data longer than the queue takes.
    #[error("post_send: {len} bytes of inline data, the queue takes at most {max} (EINVAL)")]
    InlineTooLong {
        /// Bytes given.
        len: u64,
        /// Inline bytes a WQE holds.
        max: u32,
    },
    /// Inline data on an operation that carries no local data out.
    #[error("post_send: {opcode} cannot take inline data (EINVAL)")]
    InlineNotAllowed {
        /// The opcode.
        opcode: &'static str,
    },
    /// An atomic needs one 8-byte local buffer and an 8-byte aligned remote address.
    #[error("post_send: {opcode} needs at least 8 local bytes and an 8-byte aligned remote address, got {len} bytes at remote {remote_addr:#x} (EINVAL)")]
    BadAtomic {
        /// The opcode.
        opcode: &'static str,
        /// Total local length given.
        len: u64,
        /// Remote address given.
        remote_addr: u64,
    },
    /// The total length does not fit the WQE's 32-bit length.
    #[error("{op}: total length {len} exceeds 4 GiB - 1 (EINVAL)")]
    TooLong {
        /// `post_send` or `post_recv`.
        op: &'static str,
        /// Total length given.
        len: u64,
    },
    /// A UD destination on something other than a send.
    #[error("post_send: {opcode} cannot have a UD destination (EINVAL)")]
    UdNotSend {
        /// The opcode.
        opcode: &'static str,
    },
    /// An operation the QP's transport does not carry: UC has no RDMA
    /// READ or atomics, UD only sends.
    #[error("post_send: {opcode} is not an operation of a {qp_type:?} QP (EINVAL)")]
    OpNotOnQpType {
        /// The opcode.
        opcode: &'static str,
        /// The QP's type.
        qp_type: crate::command::QpType,
    },
    /// A UD QP's send without a destination, or a destination on an RC or
    /// UC QP (which has one peer, set when it was connected).
    #[error("post_send: a {qp_type:?} QP's send {} a UD destination (EINVAL)", if *.missing { "needs" } else { "cannot have" })]
    UdDestination {
        /// The QP's type.
        qp_type: crate::command::QpType,
        /// True when the destination is missing, false when one was given.
        missing: bool,
    },
    /// The QP's state does not allow this post: a send needs RTS (or a
    /// later state: SQD, SQE, ERR), a receive any state but RESET.
    #[error("{op}: the QP is in {state:?}, which does not allow it (EINVAL)")]
    WrongState {
        /// `post_send` or `post_recv`.
        op: &'static str,
        /// The state the QP was last moved to.
        state: crate::command::QpState,
    },
    /// Something the QP's driver cannot do, refused before anything was
    /// written: on siw immediate data, atomics, a UD destination, a fenced
    /// RDMA READ (rdma-core's siw provider answers EINVAL for each).
    #[error("post_send: {driver} does not support {what} (EINVAL)")]
    NotSupported {
        /// The driver (`siw`).
        driver: &'static str,
        /// The opcode or feature.
        what: &'static str,
    },
    /// A request that must be signalled was posted unsignalled: on an
    /// [`OwnedQp`](crate::OwnedQp), RDMA READ and atomics (their memory
    /// comes back only with their own completion), and every request on
    /// siw (which completes out of order, and sends unsignalled payloads
    /// from 4 KiB up zero-copy).
    #[error("post_send: {opcode} must be signalled here: {why} (EINVAL)")]
    MustBeSignalled {
        /// The opcode.
        opcode: &'static str,
        /// Why.
        why: &'static str,
    },
    /// A receive posted to a QP that takes its receives from a shared
    /// receive queue: post to the SRQ instead.
    #[error("post_recv: the QP receives from a shared receive queue; post to the SRQ (EINVAL)")]
    ReceivesFromSrq,
    /// A raw send on a QP whose receives come from an
    /// [`OwnedSrq`](crate::post::OwnedSrq) carried a `wr_id` with the top bit set:
    /// that bit marks the owner's receive ids in the CQs they share.
    #[error(
        "post_send: wr_id {wr_id:#x} has the top bit set, which marks the receive ids of the \
         OwnedSrq this QP receives from (EINVAL)"
    )]
    ReservedWrId {
        /// The id given.
        wr_id: u64,
    },
    /// No free slot.
    #[error("{op}: queue full, {capacity} work requests outstanding (ENOMEM)")]
    QueueFull {
        /// `post_send` or `post_recv`.
        op: &'static str,
        /// Work requests the queue holds.
        capacity: u32,
    },
}

impl PostError {
    /// The errno rdma-core's rxe provider returns for the same mistake.
    pub fn errno(&self) -> Errno {
        match self {
            PostError::QueueFull { .. } => Errno::NOMEM,
            _ => Errno::INVAL,
        }
    }
}
