//! Work requests and completions: what goes into a queue pair's rings and
//! what comes out of a completion queue's.
//!
//! The types are rxe's (the layouts the rings hold are described in
//! `provider::rxe::wqe`); they are what [`QueuePair::post_send`](crate::QueuePair::post_send),
//! [`QueuePair::post_recv`](crate::QueuePair::post_recv) and
//! [`CompletionQueue::poll`](crate::CompletionQueue::poll) take.

pub use crate::provider::rxe::wqe::{
    Payload, PostError, RecvWr, Remote, SendFlags, SendOp, SendWr, Sge, UdDest, WcFlags, WcOpcode,
    WcStatus, WorkCompletion,
};
