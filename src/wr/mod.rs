//! The work-request model: what goes into a queue pair's rings and what
//! comes out of a completion queue's.
//!
//! A send ([`SendWr`]: an operation, flags, a [`Payload`] of [`Sge`]s or
//! inline bytes, a [`UdDest`] on UD) or a receive ([`RecvWr`]) is what
//! [`QueuePair::post_send`](crate::QueuePair::post_send) and
//! [`QueuePair::post_recv`](crate::QueuePair::post_recv) take; a refused
//! one is a [`PostError`]. A [`WorkCompletion`] is what
//! [`CompletionQueue::poll`](crate::CompletionQueue::poll) gives back: the
//! kernel's own `ib_uverbs_wc`, read through typed accessors.
//!
//! The model is the crate's, not a driver's. Each provider (under
//! `provider::`) encodes a request into its ring's layout and, for siw,
//! translates its completions into the kernel's; nothing public is defined
//! there.
//!
//! One concept per module: `sge` ([`Sge`], one local buffer, laid out as
//! both drivers' SGEs), `send` ([`SendWr`] and its parts), `recv`
//! ([`RecvWr`]), `error` ([`PostError`]), `completion`
//! ([`WorkCompletion`], [`WcStatus`], [`WcOpcode`], [`WcFlags`]).

mod completion;
mod error;
mod recv;
mod region;
mod send;
mod sge;

pub(crate) use completion::IB_WC_RECV;
pub use completion::{WcFlags, WcOpcode, WcStatus, WorkCompletion};
pub use error::PostError;
pub use region::{RemoteRegion, ShortRegionBytes};

/// Marks the receive ids of an owner ([`OwnedQp`](crate::OwnedQp)'s
/// receive queue, [`OwnedSrq`](crate::post::OwnedSrq)); its send ids have the
/// top bit clear. The CQ routing tells an owned SRQ's receive completions
/// from the sends of its QPs by it.
pub(crate) const RECV_TAG: u64 = 1 << 63;
pub use recv::RecvWr;
pub use send::{MwBind, Payload, Remote, SendFlags, SendOp, SendWr, UdDest};
pub use sge::Sge;
