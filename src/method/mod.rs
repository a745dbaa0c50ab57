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
//! | `RegDmabufMr` | `MR` | 5.12 (no write() command exists; the driver needs `reg_user_mr_dmabuf`: not rxe, not siw) |
//! | `RegMr` | `MR` | 6.17 (the native form of the write command `REG_MR`, no driver data; tried first over the ioctl transport, once per context, then the write command after `EPROTONOSUPPORT`/`ENOTTY`: [`ProtectionDomain::reg_mr`](crate::ProtectionDomain::reg_mr)) |
//! | [`CqCreate`], [`CqDestroy`] | `CQ` | default-on since the ioctl framework (rdma-core's first choice) |
//! | [`QpCreate`], [`QpDestroy`] | `QP` | 5.8 |
//!
//! The device and MR queries are crate-internal (the [`Context`](crate::Context)
//! wraps them); the CQ and QP methods are public building blocks.

/// A method that destroys one object named by its handle (IDR destroy) and
/// answers one response struct: `CQ_DESTROY`, `QP_DESTROY`.
macro_rules! destroy_method {
    (
        $(#[$doc:meta])*
        $name:ident, $object:ident, $method:ident, $handle_attr:ident, $resp_attr:ident,
        $resp:ident, $handle:ident, $what:literal, $resp_len:literal
    ) => {
        $(#[$doc])*
        #[derive(Debug)]
        pub struct $name {
            $handle: u32,
            resp: sys::$resp,
        }

        impl $name {
            #[doc = concat!("Destroy ", $what, " `", stringify!($handle), "`.")]
            pub fn new($handle: u32) -> Self {
                $name {
                    $handle,
                    resp: Default::default(),
                }
            }

            #[doc = concat!("The frame: HANDLE (IDR destroy), RESP (", $resp_len, " bytes out).")]
            pub fn method(&mut self, driver_id: u32) -> (Method<'_>, Out<'_, sys::$resp>) {
                let mut m = Method::new(sys::$object, sys::$method, driver_id);
                m.idr_destroy(sys::$handle_attr, self.$handle);
                let resp = m.ptr_out(sys::$resp_attr, &mut self.resp);
                (m, resp)
            }

            /// Sends the method.
            ///
            /// # Safety
            ///
            #[doc = concat!("The ", $what, " must be the caller's to destroy (no object owns it any more).")]
            pub unsafe fn run(
                mut self,
                transport: &dyn Transport,
                driver_id: u32,
            ) -> Result<sys::$resp, Errno> {
                let (method, resp) = self.method(driver_id);
                // SAFETY: the caller's promise.
                let done = unsafe { method.invoke(transport) }?;
                done.read(resp).ok_or(Errno::PROTO)
            }
        }
    };
}

mod cq;
mod device;
mod mr;
mod qp;

use crate::error::Errno;
use crate::transport::{Invoked, Method, Out, Transport};
use zerocopy::{FromBytes, IntoBytes};

/// True when a refused native method should be retried as the write
/// command, as rdma-core's `execute_ioctl_fallback` decides: `ENOTTY` (no
/// ioctl framework) or `EPROTONOSUPPORT` (the method, or a mandatory
/// attribute, is unknown). Any other errno is the kernel's answer.
pub(crate) fn native_refused(errno: Errno) -> bool {
    matches!(errno, Errno::NOTTY | Errno::PROTONOSUPPORT)
}

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
pub(crate) use mr::{DmabufMrKeys, MrKeys, QueryMr, RegDmabufMr, RegMr};
pub use qp::{QpCreate, QpCreateOuts, QpCreated, QpDestroy};
