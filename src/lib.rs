//! # uverbs: RDMA verbs over the kernel's uverbs interface, in pure Rust
//!
//! `uverbs` opens `/dev/infiniband/uverbsN` itself and speaks the kernel's
//! uverbs ABI directly: no libibverbs, no librdmacm, no C, so it links into
//! static binaries. It covers the control path (devices, ports, GIDs,
//! protection domains, memory regions and their re-registration in place,
//! `ibv_rereg_mr(3)` with its five outcomes), the data path (completion
//! queues, RC/UC/UD queue pairs, post and poll on the shared rings), safe
//! posting ([`OwnedQp`]: requests own their memory until their completion),
//! fork safety, the RDMA connection manager ([`cm`]) and, with the `tokio`
//! feature, async completions, events and connections ([`tokio`](crate#async)).
//!
//! ## Supported devices
//!
//! | device | control path: discovery, PD, MR, rereg | data path: CQ, QP, post, poll | connection manager |
//! |---|---|---|---|
//! | rxe (soft RoCE) | ✓ (rereg of PD and access in place on 6.12; 6.1's rxe has none: [`ReregFallback::Replace`](mr::ReregFallback::Replace)) | ✓ | ✓ |
//! | siw (soft iWARP) | ✓ (no rereg in the kernel: [`ReregFallback::Replace`](mr::ReregFallback::Replace)) | ✓ (x86-64) | ✓ (RC reaches RTS only through it) |
//! | mlx5 (ConnectX) | ✓ | RC, UC, UD and SRQs (x86-64), byte-identical to libmlx5 44 on an emulated device; not yet run on a ConnectX | not yet tried |
//! | anything else (efa, …) | ✓ | ✗: [`Context::create_cq`] and `create_qp` answer [`Error::Unsupported`] (errno `EOPNOTSUPP`, nothing sent), whose message says so | ids and address resolution; no QP to connect |
//!
//! Both soft devices are tested in a VM on Debian 12's 6.1 and 6.12
//! kernels, against rdma-core's own C tools as peers.
//!
//! ## Getting started
//!
//! `uverbs = "0.1"` in `Cargo.toml` (`features = ["tokio"]` for the async
//! layer). The host needs an RDMA device (none? `modprobe rdma_rxe && rdma
//! link add rxe0 type rxe netdev eth0` makes a soft RoCE one on any
//! interface), `rdma_ucm` loaded for the connection manager, permission
//! on `/dev/infiniband/*`, and a locked-memory limit (`ulimit -l`) above
//! what it registers. Each of these failing comes back as an [`Error`]
//! whose message says what to check.
//!
//! A client and server that RDMA-READ a buffer through the connection
//! manager, in 80 lines blocking and 76 on tokio:
//! [`examples/read.rs`](https://docs.rs/crate/uverbs/latest/source/examples/read.rs),
//! [`examples/tokio_read.rs`](https://docs.rs/crate/uverbs/latest/source/examples/tokio_read.rs).
//! They use the helpers every program needs: [`CmId::open_device`](cm::CmId::open_device)
//! (the device behind a connection), [`PageBuffer`] (memory to register),
//! [`RemoteRegion`](wr::RemoteRegion) (a buffer's address, rkey and length for the peer, as
//! bytes for private data) and [`OwnedQp::wait`] (the next completion,
//! with a timeout).
//!
//! ## A loopback in 25 lines
//!
//! Two RC queue pairs of one rxe device, connected to each other by hand
//! (RoCE only: an iWARP QP reaches RTS only through the [`cm`]), and a
//! SEND whose buffer comes back with its completion:
//!
//! ```no_run
//! use std::time::Duration;
//! use uverbs::post::{Local, RecvRequest, SendRequest};
//! use uverbs::qp::{Mtu, RcConnect};
//! use uverbs::{AccessFlags, BufferMr, Device, OwnedQp, PageBuffer, QpInit, QpType};
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let ctx = Device::by_name("rxe0")?.open()?;
//! let (pd, cq) = (ctx.alloc_pd()?, ctx.create_cq(16, None)?);
//! // The memory the QPs' requests own: whole pages (see PageBuffer).
//! type Qp = OwnedQp<BufferMr<PageBuffer>>;
//! let qp = || -> Result<Qp, uverbs::Error> { Ok(Qp::new(pd.create_qp(&QpInit::new(QpType::Rc, &cq, &cq))?)?) };
//! let (a, b) = (qp()?, qp()?);
//! // RESET -> INIT -> RTR -> RTS, each towards the other, over GID 0.
//! RcConnect::new(Mtu::Mtu1024).connect_pair(&a, &b, ctx.query_gid(1, 0)?)?;
//! let inbox = pd.reg_buffer(PageBuffer::new(64)?, AccessFlags::LOCAL_WRITE)?;
//! b.post_recv(RecvRequest::new(1, Local::whole(inbox)))?;
//! let hello = pd.reg_buffer(PageBuffer::copied_from(b"hello")?, AccessFlags::LOCAL_WRITE)?;
//! a.post_send(SendRequest::send(2, Local::whole(hello)))?;
//! let sent = a.wait(Duration::from_secs(5))?; // each QP reads only its own completions
//! let received = b.wait(Duration::from_secs(5))?;
//! assert_eq!(&received.into_memory().ok_or("no inbox")?.buffer()[..5], b"hello");
//! # drop(sent); Ok(()) }
//! ```
//!
//! ## Map
//!
//! The root holds the modules and the types nearly every program names;
//! everything else is one module down:
//!
//! | module | what |
//! |---|---|
//! | [`device`] | discovery ([`devices`], [`Device`]), the opened device ([`Context`]) and what it answers and owns: attributes, ports ([`Context::query_port`]), GIDs ([`device::Gid`]), async events, protection domains ([`ProtectionDomain`]) |
//! | [`mr`] | registration ([`MemoryRegion`], [`AccessFlags`]), re-registration in place ([`mr::Rereg`], [`mr::ReregError`]), memory a region owns ([`BufferMr`], [`PageBuffer`], [`mr::RemoteBufferMr`]), memory windows |
//! | [`cq`] | completion queues and channels ([`CompletionQueue`], [`cq::CompletionChannel`]) |
//! | [`qp`] | queue pairs ([`QueuePair`], [`QpInit`], [`QpType`]), their states ([`qp::QpAttr`]), RC connections made by hand ([`qp::RcConnect`], RoCE), address handles, shared receive queues |
//! | [`wr`] | what a raw post takes and a poll gives back ([`wr::SendWr`], [`wr::RecvWr`], [`wr::WorkCompletion`]), a buffer described to a peer ([`wr::RemoteRegion`]) |
//! | [`post`] | safe posting: requests own their memory until their completion ([`OwnedQp`], [`post::Local`], [`post::SendRequest`], [`post::Completed`]) |
//! | [`cm`] | the RDMA connection manager: ids, events, blocking handshakes ([`cm::CmId::connect_qp`]), UD multicast groups ([`cm::CmId::join_multicast`]) |
//! | [`error`] | [`Error`], and what it is made of ([`error::Errno`], [`error::Op`]) |
//! | [`fork`] | fork safety (`MADV_DONTFORK` tracking) |
//! | [`command`], [`method`], [`transport`], [`uverbs_uapi`] | the layers below: typed commands, native ioctl methods, the two framings, the kernel's structs |
//! | [`trace`] | the targets of the `tracing` feature's events |
//! | `tokio` (feature) | [`AsyncSource`](crate#async), `AsyncCq`/`AsyncQp`, async `cm`: see docs/async.md |
//!
//! Numbers keep one type across the API: a port is a `u8` (as the kernel's
//! `phys_port_cnt`), a GID-table index a `u32` where a table is read
//! ([`Context::query_gid`]; rxe's table has 1024 entries) and a `u8` where
//! an address vector carries it (`sgid_index`, the ABI's width); a GID is a
//! [`Gid`](device::Gid) everywhere above the [`command`] layer.
//!
//! ## Async
//!
//! With `features = ["tokio"]`, the module `uverbs::tokio` awaits every
//! event source (completion channel, async events, cm channel: each is a
//! non-blocking [`EventSource`](device::EventSource) from creation), connects through the cm,
//! and posts owned requests whose futures resolve with their memory; a
//! dropped future never frees memory the device may still use.
//!
//! ## Re-registration in place
//!
//! ```no_run
//! use uverbs::mr::ReregFlags;
//! use uverbs::AccessFlags;
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
//! ## Features
//!
//! | feature | default | what it adds | what it pulls in |
//! |---|:-:|---|---|
//! | `memmap2` | ✓ | [`StableBuffer`](mr::StableBuffer) for `memmap2::MmapMut`, so that a mapping can be registered safely ([`BufferMr`], [`RemoteBufferMr`](mr::RemoteBufferMr)) | `memmap2` |
//! | `tokio` | | the module `uverbs::tokio`: async event sources, completions, cm connections and owned posting whose futures resolve with the request's memory (docs/async.md) | `tokio` (features `net`, `rt`, `sync`, `macros`; Rust 1.85), `futures-core` |
//! | `tracing` | | structured events through the `tracing` crate: every command sent to the kernel (TRACE), QP state transitions, cm events and errors from kernel failures (DEBUG), on the targets of [`trace`]; without it nothing is compiled in (docs/tracing.md) | `tracing` (no default features) |
//! | `test-util` | | test doubles, for tests (this crate's own turn it on), not for production: `transport::RecordingTransport` (a fake kernel that records every command), `cm::FakeCm` (an in-process rdma_cm, through `cm::EventChannel::with_fake`) and `TransportKind::Fake` | nothing |
//!
//! A fifth, `fuzzing`, exposes entry points to crate-private parsers for
//! the fuzz targets in `fuzz/`; it is hidden and not part of the API. On
//! docs.rs, which documents `tokio`, `tracing` and `test-util`, each item a feature
//! adds says which.
#![cfg_attr(docsrs, feature(doc_cfg))]
#![deny(missing_docs)]
#![deny(unsafe_op_in_unsafe_fn)]

// First: their macros (the one setter maker, the one enum maker) serve
// the modules below.
#[macro_use]
mod setters;
#[macro_use]
mod kernel_enum;
// Second: its driver list makes `with_driver!`, which the objects use.
#[macro_use]
mod provider;

mod ah;
mod async_event;
mod buffer;
pub mod cm;
pub mod command;
mod connect;
mod connectable;
mod context;
pub mod cq;
mod cq_routing;
pub mod device;
mod device_attr;
mod endpoint;
pub mod error;
mod event_fd;
mod flags;
pub mod fork;
mod gid;
#[cfg(test)]
mod golden_bytes;
pub mod method;
pub mod mr;
mod mw;
pub(crate) mod netlink;
mod page;
mod page_buffer;
mod pd;
mod port;
pub mod post;
mod process;
pub mod qp;
mod query;
mod remote_buffer;
mod ring_lock;
mod srq;
#[cfg(test)]
mod test_serial;
#[cfg(feature = "tokio")]
pub mod tokio;
pub mod trace;
pub mod transport;
pub mod wr;

/// Entry points to crate-private parsers for the fuzz targets in `fuzz/`;
/// not part of the API (only with the `fuzzing` feature).
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod __fuzz;

// The root holds the modules and the handful of types every program
// names; everything else is found in the module a reader browses for it
// (`device`, `mr`, `qp`, `cq`, `wr`, `post`, `cm`, …), each a public face
// that gathers its items by `pub use` wherever they are defined.
pub use buffer::BufferMr;
pub use command::QpType;
pub use context::Context;
pub use cq::CompletionQueue;
pub use device::{devices, Device};
pub use error::Error;
pub use flags::AccessFlags;
pub use mr::MemoryRegion;
pub use page_buffer::PageBuffer;
pub use pd::ProtectionDomain;
pub use post::OwnedQp;
pub use qp::{QpInit, QueuePair};
pub use uverbs_uapi;

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
    send_sync::<mr::RemoteBufferMr<Vec<u8>>>();
    send_sync::<Error>();
    send_sync::<CompletionQueue>();
    send_sync::<cq::CompletionChannel>();
    send_sync::<QueuePair>();
    send_sync::<qp::AddressHandle>();
    send_sync::<device::AsyncEvents>();
    send_sync::<mr::ReregError>();
    send_sync::<cm::EventChannel>();
    send_sync::<cm::CmId>();
};
