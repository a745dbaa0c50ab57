//! Typed uverbs write commands.
//!
//! Each kernel command is a tiny builder in the shape of io-uring's opcodes:
//! required fields in `new`, optional ones as chained setters, a `CODE`
//! constant, and one [`WriteCommand::request`] that fills the kernel's
//! request struct. The raw layout lives in [`uverbs_uapi`]; how the bytes
//! reach the kernel (ioctl or write()) is the [`transport`](crate::transport)'s
//! business, not the command's.
//!
//! The commands are public so that callers can build their own tools (or a
//! benchmark floor) on the same encoder; sending one is
//! [`Context::execute`](crate::Context::execute), which is `unsafe` because a
//! raw command can hand memory to the device.

#[macro_use]
mod patterns;

mod ah;
mod comp_channel;
mod context;
mod cq;
mod mr;
mod mw;
mod pd;
mod port;
mod post;
mod qp;
mod qp_attr;
mod srq;

pub use ah::{CreateAh, DestroyAh};
pub use comp_channel::CreateCompChannel;
pub use context::{GetContext, QueryDevice, QueryDeviceEx};
pub use cq::{CreateCq, DestroyCq, ReqNotifyCq, ResizeCq};
pub use mr::{DeregMr, RegMr, ReregMr};
pub use mw::{AllocMw, DeallocMw};
pub use pd::{AllocPd, DeallocPd};
pub use port::QueryPort;
pub use post::{PostSendDoorbell, DOORBELL_LEN, DOORBELL_WQE_SIZE};
pub use qp::{AttachMcast, CreateQp, DestroyQp, DetachMcast, ModifyQp, QueryQp};
pub use qp_attr::{
    iwarp_transition_rule, transition_rule, Mtu, QpAttr, QpAttrMask, QpState, QpTransitionError,
    QpType, TransitionRule, TransportType,
};
pub use srq::{CreateSrq, DestroySrq, ModifySrq, QuerySrq, SRQ_LIMIT, SRQ_MAX_WR};

use zerocopy::{FromBytes, Immutable, IntoBytes};

/// A uverbs write command: its number, its request and response layouts, and
/// its driver-private (UHW) input.
///
/// Implementing it is safe. The bounds make `Request` and `Response` plain
/// data, proven by zerocopy's derives (which every [`uverbs_uapi`] struct
/// has): no padding bytes, so viewing them as bytes reads only initialised
/// memory, and every bit pattern valid, so whatever bytes the kernel writes
/// into a response are a valid value. The transports write only inside the
/// buffers they are given, so no choice of types here can make userspace
/// memory unsound.
///
/// What is still promised, for *correctness* rather than memory safety:
/// `Request` and `Response` mirror the kernel's structs for
/// [`CODE`](WriteCommand::CODE) byte for byte, and a command with a response
/// has a request that starts with the kernel's `u64 response` field (the
/// write() transport stores the response pointer there, and refuses with
/// `EINVAL` a request shorter than 8 bytes), unless it is an extended
/// command (`CODE` with `IB_USER_VERBS_CMD_FLAG_EXTENDED`, whose request,
/// response and UHW are whole 64-bit words and carry no `response` field).
/// A command without response uses `()`. A wrong layout makes the kernel
/// misread the command; that is why
/// sending one, [`Context::execute`](crate::Context::execute), is `unsafe`:
/// its caller vouches for what the kernel does with [`request`](Self::request)'s
/// bytes.
///
/// A type that is not plain data is refused at compile time, e.g. a
/// reference as the response (the kernel's bytes could make it null):
///
/// ```compile_fail,E0277
/// use uverbs::command::WriteCommand;
/// use uverbs::uverbs_uapi as sys;
///
/// struct Bad;
/// impl WriteCommand for Bad {
///     const CODE: u32 = sys::IB_USER_VERBS_CMD_ALLOC_PD;
///     type Request = sys::ib_uverbs_alloc_pd;
///     type Response = &'static u64;
///     fn request(&self) -> Self::Request {
///         sys::ib_uverbs_alloc_pd::default()
///     }
/// }
/// ```
pub trait WriteCommand {
    /// The command number, `IB_USER_VERBS_CMD_*` (or an
    /// `IB_USER_VERBS_EX_CMD_*` with `IB_USER_VERBS_CMD_FLAG_EXTENDED`).
    const CODE: u32;
    /// The kernel's request struct (after the 8-byte command header).
    type Request: Copy + IntoBytes + Immutable;
    /// The kernel's core response struct, or `()` when there is none.
    type Response: Copy + FromBytes + IntoBytes;

    /// The request struct, zeroed and then filled from the builder.
    fn request(&self) -> Self::Request;

    /// Driver-private input that follows the core request (UHW in).
    fn uhw_in(&self) -> &[u8] {
        &[]
    }

    /// The kernel handle of the object the command acts on (the QP a
    /// `MODIFY_QP` modifies, the MR a `DEREG_MR` frees), `None` for a
    /// command that names none or creates one. Only reported: the
    /// `tracing` feature's `command` events carry it ([`crate::trace`]).
    fn handle(&self) -> Option<u32> {
        None
    }
}
