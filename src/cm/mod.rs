//! The RDMA connection manager over the kernel's rdma_cm interface
//! (`/dev/infiniband/rdma_cm`, ucma ABI 4), without librdmacm.
//!
//! Layers, like the verbs': [`uverbs_uapi`]'s `rdma_user_cm` structs,
//! [`command`] (one typed, golden-tested encoder per ucma command),
//! [`EventChannel`] (the opened file: `write()` of a command, typed
//! [`Event`]s, `AsFd` for poll loops), and [`CmId`] (bind, resolve, listen,
//! connect, accept, reject, disconnect, `INIT_QP_ATTR` as a
//! [`QpAttr`](crate::command::QpAttr)). `FakeCm` (with the `test-util` feature) is an in-process model
//! of the kernel's side for host tests.
//!
//! An RC connection, active side: `create_id(Tcp)`, `resolve_addr` →
//! `ADDR_RESOLVED`, `resolve_route` → `ROUTE_RESOLVED`, create the QP on the
//! id's device, `init_qp_attr(Init)` + modify, `connect` →
//! `CONNECT_RESPONSE`, `init_qp_attr(Rtr)`/`(Rts)` + modify, `establish`
//! (no event follows on this side). Passive side: `bind`, `listen` → `CONNECT_REQUEST` (with a
//! new id), QP to INIT, RTR, RTS with that id's `init_qp_attr`, `accept` →
//! `ESTABLISHED`. UD multicast: a UDP id, bound or resolved,
//! [`join_multicast`](CmId::join_multicast) → `MULTICAST_JOIN`, whose
//! address vector the QP attaches to and sends through. See
//! `docs/connection-manager.md`.
//!
//! ```
//! use std::sync::Arc;
//! use std::time::Duration;
//! use uverbs::cm::{ConnParam, EventChannel, EventKind, FakeCm, PortSpace};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let ch = EventChannel::with_fake(Arc::new(FakeCm::new()?)); // EventChannel::open() on a host
//! let listener = ch.create_id(PortSpace::Tcp)?;
//! listener.bind("192.0.2.1:7471".parse()?)?;
//! listener.listen(8)?;
//! let client = ch.create_id(PortSpace::Tcp)?;
//! client.resolve_addr(None, "192.0.2.1:7471".parse()?, 2000)?;
//! let ev = ch.wait_event(Duration::from_secs(2))?.ok_or("no event")?;
//! assert!(matches!(ev.kind, EventKind::AddrResolved));
//! # Ok(()) }
//! ```

pub(crate) mod channel;
pub mod command;
mod error;
mod event;
#[cfg(any(test, feature = "test-util"))]
#[cfg_attr(docsrs, doc(cfg(feature = "test-util")))]
mod fake;
pub(crate) mod handshake;
mod id;
mod pair;

#[cfg(test)]
mod golden_tests;
#[cfg(test)]
mod tests;

pub use channel::{EventChannel, RDMA_CM_ABI_PATH, RDMA_CM_PATH};
pub use command::{
    CmCommand, CmOption, ConnParam, PortSpace, PrivateDataTooLong, RejectReason,
    MAX_ACCEPT_PRIVATE_DATA, MAX_CONNECT_PRIVATE_DATA, MAX_REJECT_PRIVATE_DATA,
    MAX_UD_ACCEPT_PRIVATE_DATA, MAX_UD_CONNECT_PRIVATE_DATA, UDP_QKEY,
};
pub use error::CmError;
pub use event::{event_name, raw as event_number, Event, EventKind, Param, PeerParam, UdPeer};
#[cfg(any(test, feature = "test-util"))]
pub use fake::{FakeCm, RecordedCm};
pub use id::{AddrInfo, CmId, Membership, Route};
pub use pair::{connect_pair, LocalConnection};
