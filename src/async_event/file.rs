//! The context's end of the kernel's async-event file, and what an event
//! is about: the part of async events the context itself holds (no CQ, QP
//! or context type is named here, so the context can own it).

use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::sync::Mutex;

/// What an event is about: a CQ, QP, SRQ or WQ by the id it was created
/// with, a port by number, or the whole device.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AsyncElement {
    /// The CQ whose [`CompletionQueue::event_id`](crate::CompletionQueue::event_id) this is.
    Cq(u64),
    /// The QP whose [`QueuePair::event_id`](crate::QueuePair::event_id) this is.
    Qp(u64),
    /// An SRQ's `user_handle`.
    Srq(u64),
    /// A WQ's `user_handle`.
    Wq(u64),
    /// A port, 1-based.
    Port(u32),
    /// The device (for [`AsyncEventKind::DeviceFatal`](super::AsyncEventKind::DeviceFatal)).
    Device,
    /// The raw element of an event of unknown kind.
    Unknown(u64),
}

/// The context's end of the kernel's async-event file.
pub(crate) struct AsyncEventFile {
    pub(super) fd: OwnedFd,
    /// Events read so far, per element. An entry lives as long as the
    /// context (16 bytes per object that ever had an event).
    reported: Mutex<HashMap<AsyncElement, u32>>,
}

impl AsyncEventFile {
    pub(crate) fn new(fd: OwnedFd) -> Self {
        AsyncEventFile {
            fd,
            reported: Mutex::new(HashMap::new()),
        }
    }

    pub(super) fn count(&self, element: AsyncElement) {
        let mut map = self.reported.lock().unwrap_or_else(|p| p.into_inner());
        *map.entry(element).or_insert(0) += 1;
    }

    pub(super) fn reported(&self, element: AsyncElement) -> u32 {
        let map = self.reported.lock().unwrap_or_else(|p| p.into_inner());
        map.get(&element).copied().unwrap_or(0)
    }
}
