//! Async verbs on tokio (the `tokio` feature).
//!
//! - [`AsyncSource`]: any event source (completion channel, async events,
//!   cm event channel) awaited with `next_event().await` or as a `Stream`.
//! - [`AsyncCq`] and [`AsyncQp`]: owned posting whose futures resolve with
//!   the request's memory and its completion. One task per CQ arms it,
//!   waits on its channel, polls it and hands each completion to the future
//!   waiting for it.
//! - [`cm`]: the connection manager: an event channel that routes each
//!   event to its id's future; resolve, connect, listen/accept and
//!   disconnect awaited, each cancellable by dropping it.
//!
//! **Cancellation.** Dropping a future never frees memory the device may
//! still use. A posted request's memory stays with the QP until its
//! completion (or a flush, or the QP's destruction); if its future is gone
//! by then, the memory is dropped there, as tokio-uring does. See
//! docs/async.md for the rules and the calls that may block.

pub mod cm;
mod source;

pub use source::AsyncSource;
mod cq;
mod qp;

pub use cq::{AsyncCq, AsyncCqOptions};
pub use qp::{AsyncQp, CompletionFuture, NotAsync};
