//! Receive work requests: the buffers an incoming message is scattered
//! into.

use super::sge::Sge;

/// One receive work request.
#[doc(alias = "ibv_recv_wr")]
#[derive(Clone, Copy, Debug)]
pub struct RecvWr<'a> {
    /// Returned in the completion.
    pub wr_id: u64,
    /// Buffers the incoming message is scattered into.
    pub sges: &'a [Sge],
}

impl<'a> RecvWr<'a> {
    /// A receive into `sges`, returning `wr_id` in its completion.
    pub fn new(wr_id: u64, sges: &'a [Sge]) -> Self {
        RecvWr { wr_id, sges }
    }
}
