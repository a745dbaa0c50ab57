//! The native ioctl methods the crate sends, one family per file.
//!
//! Each method is a small type in the shape of the write commands
//! ([`crate::command`]): its inputs in `new`, a `method` that frames it with
//! the typed [`Method`] builder (outputs borrowed
//! from the value, so golden tests can pin the exact frame), and a `run`
//! that sends it and decodes the answer. Every output the answer needs must
//! come back marked `UVERBS_ATTR_F_VALID_OUTPUT`, else `EPROTO`.
//!
//! | method | object | kernel |
//! |---|---|---|
//! | `InfoHandles` | `DEVICE` | 5.0 |
//! | `QueryPort` | `DEVICE` | 5.0 |
//! | `QueryContext` | `DEVICE` | 5.9 (needs the driver's `query_ucontext`: not rxe, not siw) |
//! | `QueryGidEntry`, `QueryGidTable` | `DEVICE` | 5.10 |
//! | `QueryMr` | `MR` | 5.9 (no write() command exists) |
//! | [`CqCreate`], [`CqDestroy`] | `CQ` | default-on since the ioctl framework (rdma-core's first choice) |
//! | [`QpCreate`], [`QpDestroy`] | `QP` | 5.8 |
//!
//! The device and MR queries are crate-internal (the [`Context`](crate::Context)
//! wraps them); the CQ and QP methods are public building blocks.

mod cq;
mod device;
mod mr;
mod qp;

use crate::error::Errno;
use crate::transport::{Invoked, Method, Out, Transport};
use zerocopy::{FromBytes, IntoBytes};

/// Sends a query method: one that only reads kernel state and writes the
/// outputs it borrowed, so nothing beyond the builder's borrows is promised.
fn send_query<'a>(method: Method<'a>, transport: &dyn Transport) -> Result<Invoked<'a>, Errno> {
    // SAFETY: every caller passes a query (INFO_HANDLES, QUERY_*): it hands
    // no memory to the device and changes no object; the builder vouches
    // for the output pointers.
    unsafe { method.invoke(transport) }
}

/// A query method's one output, which the kernel must have marked written.
fn query_one<T: FromBytes + IntoBytes + Copy>(
    method: Method<'_>,
    out: Out<'_, T>,
    transport: &dyn Transport,
) -> Result<T, Errno> {
    send_query(method, transport)?.read(out).ok_or(Errno::PROTO)
}

pub use cq::{CqCreate, CqCreateOuts, CqCreated, CqDestroy};
pub(crate) use device::{InfoHandles, QueryContext, QueryGidEntry, QueryGidTable, QueryPort};
pub(crate) use mr::QueryMr;
pub use qp::{QpCreate, QpCreateOuts, QpCreated, QpDestroy};
