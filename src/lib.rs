//! # uverbs: RDMA verbs over the kernel's uverbs interface, in pure Rust
//!
//! `uverbs` opens `/dev/infiniband/uverbsN` itself and speaks the kernel's
//! uverbs ABI directly: no libibverbs, no C, so it links into static
//! binaries. Its focus is memory registration and, above all,
//! re-registration in place ([`MemoryRegion::rereg`], `ibv_rereg_mr(3)`):
//! change a region's translation, protection domain or access with one
//! command that keeps the kernel's handle, with libibverbs' input checks and
//! its five failure outcomes ([`ReregOutcome`]).
//!
//! ```no_run
//! use uverbs::{AccessFlags, ReregFlags};
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let device = uverbs::devices()?.into_iter().next().ok_or("no RDMA device")?;
//! let ctx = device.open()?;
//! let (pd1, pd2) = (ctx.alloc_pd()?, ctx.alloc_pd()?);
//! let mut buf = vec![0u8; 1 << 20].into_boxed_slice();
//! // SAFETY: `buf` outlives the region (dropped at the end of scope, after `mr`).
//! let mut mr = unsafe { pd1.reg_mr(buf.as_mut_ptr(), buf.len(), AccessFlags::LOCAL_WRITE)? };
//! mr.set_access(AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE)?; // in place
//! mr.set_pd(&pd2)?; // same handle, now in pd2
//! match mr.set_access(AccessFlags::REMOTE_WRITE) {
//!     Ok(()) => {}
//!     Err(e) => println!("{e}: the MR is now {:?}", e.mr_state()),
//! }
//! # drop(mr); Ok(()) }
//! ```
//!
//! Layers, from the bottom: [`uverbs_uapi`] (the kernel's structs),
//! [`command`] (one typed builder per uverbs command), [`transport`] (the
//! ioctl and write() framings, and a recording fake kernel for tests), then
//! [`Context`], [`ProtectionDomain`] and [`MemoryRegion`].
#![deny(missing_docs)]
#![deny(unsafe_op_in_unsafe_fn)]

mod ah;
mod async_event;
mod buffer;
pub mod cm;
pub mod command;
mod context;
mod cq;
mod cq_routing;
mod device;
mod device_attr;
mod endpoint;
mod error;
mod event_fd;
mod flags;
pub mod fork;
#[cfg(test)]
mod golden_bytes;
pub mod method;
mod mr;
pub(crate) mod netlink;
mod pd;
mod post;
mod process;
mod provider;
mod qp;
mod query;
mod remote_buffer;
#[cfg(test)]
mod test_serial;
#[cfg(feature = "tokio")]
pub mod tokio;
pub mod transport;
mod wr;

/// Entry points to crate-private parsers for the fuzz targets in `fuzz/`;
/// not part of the API (only with the `fuzzing` feature).
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod __fuzz;

pub use ah::{AddressHandle, AhAttr};
pub use async_event::{AsyncElement, AsyncEvent, AsyncEventKind, AsyncEvents};
pub use buffer::{
    BufferDeregError, BufferMr, RegBufferError, RetargetBuffers, RetargetError, Retargeted,
    StableBuffer,
};
pub use context::{Context, OpenOptions};
pub use cq::{CompletionChannel, CompletionQueue, CqDestroyed, CreatePath, DestroyCqError};
pub use device::{
    device, device_listing, device_listing_in, devices, devices_in, Device, DeviceListing,
    SkippedDevice, DEV_INFINIBAND, SYSFS_UVERBS,
};
pub use device_attr::DeviceAttr;
pub use endpoint::{Endpoint, EndpointParseError};
pub use error::{Errno, Error, ManPageGuarantee, MrState, Op, ReregError, ReregOutcome};
pub use event_fd::EventSource;
pub use flags::{AccessFlags, ReregFlags};
pub use mr::{DeregError, MemoryRegion, Rereg, ReregFallback, ReregPath};
pub use pd::{DeallocError, ProtectionDomain};
pub use post::{
    Completed, DeviceReadable, DeviceWritable, Ended, Local, NotOwnable, OutOfRange, OwnedQp,
    PostRefused, PostSendError, RecvRequest, SendRequest,
};
pub use provider::driver::DriverId;
pub use qp::{DestroyQpError, QpCaps, QpInit, QueuePair};
pub use query::{
    ContextAttr, Gid, GidEntry, GidParseError, GidType, LinkLayer, MrAttr, PortAttr, PortState,
};
pub use remote_buffer::{OutsideBuffer, RemoteBufferMr, RemoteDeregError};
pub use transport::{TransportKind, TransportMode};
pub use uverbs_uapi;
pub use wr::{
    Payload, PostError, RecvWr, Remote, SendFlags, SendOp, SendWr, Sge, UdDest, WcFlags, WcOpcode,
    WcStatus, WorkCompletion,
};

/// The README's and the guides' examples are compiled as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
#[doc = include_str!("../docs/rereg.md")]
#[doc = include_str!("../docs/fork-safety.md")]
struct GuideExamples;

/// docs/async.md's examples, with the `tokio` feature.
#[cfg(all(doctest, feature = "tokio"))]
#[doc = include_str!("../docs/async.md")]
struct AsyncGuideExamples;

/// Contexts, PDs and MRs are shared across threads: keep them `Send + Sync`.
const _: () = {
    const fn send_sync<T: Send + Sync>() {}
    send_sync::<Context>();
    send_sync::<ProtectionDomain>();
    send_sync::<MemoryRegion>();
    send_sync::<BufferMr<Vec<u8>>>();
    send_sync::<RemoteBufferMr<Vec<u8>>>();
    send_sync::<Error>();
    send_sync::<CompletionQueue>();
    send_sync::<CompletionChannel>();
    send_sync::<QueuePair>();
    send_sync::<AddressHandle>();
    send_sync::<AsyncEvents>();
    send_sync::<ReregError>();
    send_sync::<cm::EventChannel>();
    send_sync::<cm::CmId>();
};
