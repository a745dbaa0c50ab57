//! What a connection-manager operation that waits for events can fail
//! with: [`CmError`], shared by the blocking helpers ([`CmId::resolve`](super::CmId::resolve),
//! [`CmId::connect_qp`](super::CmId::connect_qp), ...) and the futures of `uverbs::tokio::cm`.

use std::time::Duration;

use super::{Event, EventKind};
use crate::error::{Errno, ErrnoDisplay, Error, Op};

/// A failed connection-manager operation: a failed command or read (the
/// crate's [`Error`]), or an event that ended the wait with a failure.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CmError {
    /// A command, the channel, or a QP state change failed (naming the
    /// operation and the errno; [`Error::ForeignProcess`] in a forked child).
    #[error(transparent)]
    Verbs(#[from] Error),
    /// The cm answered the operation with a failure event:
    /// `ADDR_ERROR` ([`Op::CmResolveAddr`]), `ROUTE_ERROR`
    /// ([`Op::CmResolveRoute`]), `UNREACHABLE` or `CONNECT_ERROR`
    /// ([`Op::CmConnect`], [`Op::CmAccept`]), `MULTICAST_ERROR`
    /// ([`Op::CmJoinMulticast`]).
    #[error("{op} on rdma_cm: {event}: {}", ErrnoDisplay(*errno))]
    Failed {
        /// What was being done.
        op: Op,
        /// The event's name (`RDMA_CM_EVENT_ADDR_ERROR`, ...).
        event: &'static str,
        /// The event's raw status.
        status: i32,
        /// The errno of the status (`EIO` when the status carries none).
        errno: Errno,
    },
    /// `REJECTED`: the peer, or its CM (nobody listens: the IB CM's status
    /// 8), refused the connection.
    #[error("{op} on rdma_cm: RDMA_CM_EVENT_REJECTED (status {status})")]
    Rejected {
        /// What was being done ([`Op::CmConnect`], or [`Op::CmAccept`]
        /// when the peer gave up after the accept).
        op: Op,
        /// The status: the IB CM's reject reason (8: nobody listens; 28:
        /// consumer defined, e.g. `rdma_reject`), or iWARP's negative errno.
        status: i32,
        /// The rejecter's private data.
        private_data: Vec<u8>,
    },
    /// No event came within the time a blocking helper was given
    /// ([`CmId::resolve`](super::CmId::resolve), [`CmId::connect_qp`](super::CmId::connect_qp), [`CmId::get_request`](super::CmId::get_request),
    /// [`CmId::accept_qp`](super::CmId::accept_qp), [`CmId::join_group`](super::CmId::join_group)). The id is as the wait left it: destroy it (its
    /// event may still come).
    #[error("{op} on rdma_cm: no event within {waited:?}")]
    TimedOut {
        /// What was being done.
        op: Op,
        /// How long was waited.
        waited: Duration,
    },
    /// An event the operation cannot continue after: `DEVICE_REMOVAL`,
    /// `DISCONNECTED` before the connection was up, an event of another
    /// stage (an id used out of order), or (blocking helpers) an event of
    /// another id of the channel.
    #[error("{op} on rdma_cm: unexpected {event} (status {status})")]
    Unexpected {
        /// What was being done.
        op: Op,
        /// The event's name.
        event: &'static str,
        /// The event's raw status.
        status: i32,
    },
}

impl CmError {
    /// The operation that failed.
    pub fn op(&self) -> Op {
        match self {
            CmError::Verbs(e) => e.op(),
            CmError::Failed { op, .. }
            | CmError::Rejected { op, .. }
            | CmError::TimedOut { op, .. }
            | CmError::Unexpected { op, .. } => *op,
        }
    }

    /// The errno: the error's, the failure event's, `ECONNREFUSED` for a
    /// rejection, `ETIMEDOUT` for a wait that ran out, for an unexpected event its status's (`EPROTO` when it
    /// carries none).
    pub fn errno(&self) -> Option<Errno> {
        match self {
            CmError::Verbs(e) => e.errno(),
            CmError::Failed { errno, .. } => Some(*errno),
            CmError::Rejected { .. } => Some(Errno::CONNREFUSED),
            CmError::TimedOut { .. } => Some(Errno::TIMEDOUT),
            CmError::Unexpected { status, .. } if *status < 0 => {
                Some(Errno::from_raw_os_error(-*status))
            }
            CmError::Unexpected { .. } => Some(Errno::PROTO),
        }
    }

    /// The typed error of event `ev`, which ended operation `op`.
    pub(crate) fn from_event(op: Op, ev: Event) -> Self {
        let (event, status) = (ev.name(), ev.status);
        match ev.kind {
            EventKind::Rejected { reason, param } => CmError::Rejected {
                op,
                status: reason,
                private_data: param.private_data().to_vec(),
            },
            EventKind::AddrError
            | EventKind::RouteError
            | EventKind::Unreachable
            | EventKind::ConnectError
            | EventKind::MulticastError => CmError::Failed {
                op,
                event,
                status,
                errno: ev.errno().unwrap_or(Errno::IO),
            },
            _ => CmError::Unexpected { op, event, status },
        }
    }
}

/// For `?` in functions returning `std::io::Result`: the errno's kind, the
/// error as payload.
impl From<CmError> for std::io::Error {
    fn from(e: CmError) -> Self {
        match e {
            CmError::Verbs(e) => e.into(),
            e => {
                let kind = e.errno().map_or(std::io::ErrorKind::Other, |n| {
                    std::io::Error::from_raw_os_error(n.raw_os_error()).kind()
                });
                std::io::Error::new(kind, e)
            }
        }
    }
}
