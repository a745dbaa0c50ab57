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

mod context;
mod mr;
mod pd;

pub use context::{GetContext, QueryDevice};
pub use mr::{DeregMr, RegMr, ReregMr};
pub use pd::{AllocPd, DeallocPd};

/// A uverbs write command: its number, its request and response layouts, and
/// its driver-private (UHW) input.
///
/// # Safety
///
/// `Request` and `Response` must be `#[repr(C)]` plain-old-data structs that
/// mirror the kernel's structs for [`CODE`](WriteCommand::CODE) exactly, with
/// no padding bytes and with every bit pattern valid, because they are passed
/// to the kernel and filled by it as raw bytes. If the command has a response,
/// the request must start with the kernel's `u64 response` field (the write()
/// transport stores the response pointer there). A command without response
/// uses `()`.
pub unsafe trait WriteCommand {
    /// The command number, `IB_USER_VERBS_CMD_*`.
    const CODE: u32;
    /// The kernel's request struct (after the 8-byte command header).
    type Request: Copy;
    /// The kernel's core response struct, or `()` when there is none.
    type Response: Copy + Default;

    /// The request struct, zeroed and then filled from the builder.
    fn request(&self) -> Self::Request;

    /// Driver-private input that follows the core request (UHW in).
    fn uhw_in(&self) -> &[u8] {
        &[]
    }
}

/// The bytes of a plain-old-data value.
pub(crate) fn bytes_of_mut<T: Copy>(value: &mut T) -> &mut [u8] {
    // SAFETY: callers only pass `WriteCommand` request/response types (or
    // kernel attribute structs), which the trait's contract makes padding-free
    // POD: every byte is initialised and any byte pattern written is valid.
    unsafe { std::slice::from_raw_parts_mut((value as *mut T).cast::<u8>(), size_of::<T>()) }
}
