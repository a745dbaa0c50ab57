//! Native ioctl methods: a typed builder for `RDMA_VERBS_IOCTL` frames.
//!
//! A [`Method`] is one [`IoctlFrame`] (the only wire layout) plus the
//! borrows of every buffer its attributes point at. Each pusher takes its
//! buffer as a reference that must outlive the method (`'a`), so filling a
//! frame is safe: no attribute can point at memory that is gone or that
//! something else writes while the kernel may. Only sending the frame,
//! [`Method::invoke`], is `unsafe`, and only for what the method *does*
//! (hand memory to the device through an address given as a plain number,
//! destroy an object that someone else owns), not for its pointers.
//!
//! The attribute kinds follow the kernel's (`uverbs_ioctl.c`,
//! `uverbs_process_attr`):
//!
//! | pusher | kernel type | wire |
//! |---|---|---|
//! | [`const_in`](Method::const_in) | `UVERBS_ATTR_CONST_IN` | `len` 8, value inline |
//! | [`ptr_in`](Method::ptr_in), [`inline_in`](Method::inline_in) | `PTR_IN` | up to 8 bytes inline in `data`, longer by pointer |
//! | [`enum_in`](Method::enum_in) | `ENUM_IN` | a `PTR_IN` with `attr_data.enum_data.elem_id` |
//! | [`ptr_out`](Method::ptr_out), [`bytes_out`](Method::bytes_out) | `PTR_OUT` | pointer + length; read back only if the kernel set `VALID_OUTPUT` |
//! | [`idr_in`](Method::idr_in), [`idr_destroy`](Method::idr_destroy) | `IDR` (read/write/destroy access) | `len` 0, handle in `data` |
//! | [`idr_new`](Method::idr_new) | `IDR` (new) | `len` 0; the kernel writes the new handle into `data` |
//! | [`fd_new`](Method::fd_new) | `FD` (new) | `len` 0; the kernel writes the new descriptor into `data` |
//! | [`idr_array`](Method::idr_array) | `IDRS_ARRAY` | `len` 4·n, inline up to two handles |
//! | [`uhw_in`](Method::uhw_in), [`uhw_out`](Method::uhw_out) | `UVERBS_ATTR_UHW()` | ids `0x1000`/`0x1001`, the driver namespace |
//!
//! Attributes are mandatory (`UVERBS_ATTR_F_MANDATORY`, as rdma-core sends
//! them: a kernel that does not know one answers `EPROTONOSUPPORT`);
//! [`optional`](Method::optional) clears the flag of the last one. Driver
//! attributes other than UHW use ids in the driver namespace,
//! [`driver_attr`] (the kernel's `UVERBS_API_NS_FLAG`, bit 12).
//!
//! A buffer cannot go away while a method points at it:
//!
//! ```compile_fail,E0597
//! use uverbs::transport::Method;
//! use uverbs::uverbs_uapi as sys;
//!
//! let mut method = Method::new(sys::UVERBS_OBJECT_DEVICE, sys::UVERBS_METHOD_QUERY_CONTEXT, 14);
//! {
//!     let mut comp_vectors = 0u32;
//!     let _out = method.ptr_out(sys::UVERBS_ATTR_QUERY_CONTEXT_NUM_COMP_VECTORS, &mut comp_vectors);
//! } // `comp_vectors` dropped here while still borrowed
//! let _bytes = method.as_bytes();
//! ```
//!
//! nor be used while the method may still write it:
//!
//! ```compile_fail,E0503
//! use uverbs::transport::Method;
//! use uverbs::uverbs_uapi as sys;
//!
//! let mut comp_vectors = 0u32;
//! let mut method = Method::new(sys::UVERBS_OBJECT_DEVICE, sys::UVERBS_METHOD_QUERY_CONTEXT, 14);
//! let out = method.ptr_out(sys::UVERBS_ATTR_QUERY_CONTEXT_NUM_COMP_VECTORS, &mut comp_vectors);
//! let peek = comp_vectors; // still borrowed by `out`
//! drop(out);
//! ```

use std::fmt;
use std::marker::PhantomData;
use std::os::fd::RawFd;
use std::ptr::NonNull;

use super::frame::{self, attr_const, attr_in, attr_out, is_valid_output, user_addr, IoctlFrame};
use super::Transport;
use crate::error::Errno;
use uverbs_uapi as sys;
use zerocopy::{FromBytes, Immutable, IntoBytes};

/// The id of driver-specific attribute `id` (the driver namespace: bit 12,
/// the kernel's `UVERBS_API_NS_FLAG`). `UVERBS_ATTR_UHW_IN` is
/// `driver_attr(0)`, `UVERBS_ATTR_UHW_OUT` is `driver_attr(1)`.
pub const fn driver_attr(id: u16) -> u16 {
    sys::UVERBS_ID_DRIVER_NS | id
}

/// One ioctl method being framed: object, method, driver id and attributes,
/// with the borrows (`'a`) of every buffer the attributes point at.
///
/// Pushers never fail on the spot: the first problem (a full frame,
/// `E2BIG`; a buffer longer than 0xffff bytes, `EINVAL`) is kept and
/// [`invoke`](Self::invoke) returns it without sending anything.
///
/// ```
/// use uverbs::transport::{Method, RecordingTransport};
/// use uverbs::uverbs_uapi as sys;
///
/// let fake = RecordingTransport::new();
/// let (mut comp_vectors, mut core_support) = (0u32, 0u64);
/// let mut m = Method::new(sys::UVERBS_OBJECT_DEVICE, sys::UVERBS_METHOD_QUERY_CONTEXT, 14);
/// let n = m.ptr_out(sys::UVERBS_ATTR_QUERY_CONTEXT_NUM_COMP_VECTORS, &mut comp_vectors);
/// let cs = m.ptr_out(sys::UVERBS_ATTR_QUERY_CONTEXT_CORE_SUPPORT, &mut core_support);
/// // SAFETY: QUERY_CONTEXT hands no memory to the device and destroys nothing.
/// let done = unsafe { m.invoke(&fake) }.unwrap();
/// assert_eq!(done.read(n), Some(1));
/// assert_eq!(done.read(cs), Some(sys::IB_UVERBS_CORE_SUPPORT_OPTIONAL_MR_ACCESS));
/// ```
pub struct Method<'a> {
    frame: IoctlFrame,
    error: Option<Errno>,
    _borrows: PhantomData<&'a mut [u8]>,
}

impl fmt::Debug for Method<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Method")
            .field("header", self.frame.header())
            .field("attrs", &self.frame.attrs())
            .field("error", &self.error)
            .finish()
    }
}

/// An output attribute the kernel may write: read it, after the call,
/// with [`Invoked::read`].
#[derive(Debug)]
#[must_use = "an output is read through Invoked::read"]
pub struct Out<'a, T> {
    ptr: NonNull<T>,
    index: usize,
    attr_id: u16,
    _borrow: PhantomData<&'a mut T>,
}

/// An output byte buffer: read it with [`Invoked::read_bytes`].
#[derive(Debug)]
#[must_use = "an output is read through Invoked::read_bytes"]
pub struct OutBytes<'a> {
    ptr: NonNull<u8>,
    len: usize,
    index: usize,
    attr_id: u16,
    _borrow: PhantomData<&'a mut [u8]>,
}

/// An IDR attribute the kernel fills with a new object's handle: read it
/// with [`Invoked::handle`].
#[derive(Clone, Copy, Debug)]
#[must_use = "the new handle is read through Invoked::handle"]
pub struct NewHandle {
    index: usize,
    attr_id: u16,
}

/// An FD attribute the kernel fills with a new descriptor: read it with
/// [`Invoked::fd`].
#[derive(Clone, Copy, Debug)]
#[must_use = "the new descriptor is read through Invoked::fd"]
pub struct NewFd {
    index: usize,
    attr_id: u16,
}

// SAFETY (Send/Sync): the pointers stand for `&'a mut` borrows the handles
// hold (PhantomData); sending a handle is sending that borrow.
unsafe impl<T: Send> Send for Out<'_, T> {}
// SAFETY: as above; a shared `Out` gives no access to the buffer.
unsafe impl<T: Sync> Sync for Out<'_, T> {}
// SAFETY: as above, for a `&'a mut [u8]`.
unsafe impl Send for OutBytes<'_> {}
// SAFETY: as above.
unsafe impl Sync for OutBytes<'_> {}

impl<'a> Method<'a> {
    /// An empty method `method_id` of object `object_id`, for a device
    /// whose driver is `driver_id` (`RDMA_DRIVER_*`: the kernel refuses any
    /// other with `EINVAL`).
    pub fn new(object_id: u16, method_id: u16, driver_id: u32) -> Self {
        Method {
            frame: IoctlFrame::new(object_id, method_id, driver_id),
            error: None,
            _borrows: PhantomData,
        }
    }

    /// `UVERBS_METHOD_INVOKE_WRITE`: write command `code` with its core
    /// request and response and the driver's (UHW) tails; an empty
    /// `core_out`, `uhw_in` or `uhw_out` is left out. The outputs are
    /// zeroed here. The attributes are [`IoctlFrame::set_invoke_write`]'s.
    pub fn invoke_write(
        driver_id: u32,
        code: u32,
        core_in: &'a [u8],
        uhw_in: &'a [u8],
        core_out: &'a mut [u8],
        uhw_out: &'a mut [u8],
    ) -> (Self, InvokeWriteOuts<'a>) {
        let mut method = Self::new(
            sys::UVERBS_OBJECT_DEVICE,
            sys::UVERBS_METHOD_INVOKE_WRITE,
            driver_id,
        );
        core_out.fill(0);
        uhw_out.fill(0);
        let (core_len, uhw_len) = (core_out.len(), uhw_out.len());
        // The frame's addresses come from the same pointers the output
        // handles keep; `user_addr` exposes them (the kernel writes there).
        let core_ptr = NonNull::from(core_out).cast::<u8>();
        let uhw_ptr = NonNull::from(uhw_out).cast::<u8>();
        if let Err(e) = method.frame.set_invoke_write(
            code,
            core_in,
            uhw_in,
            (user_addr(core_ptr.as_ptr()), core_len),
            (user_addr(uhw_ptr.as_ptr()), uhw_len),
        ) {
            method.error = Some(e);
        }
        let out = |ptr: NonNull<u8>, len: usize, attr_id: u16| {
            let index = method
                .frame
                .attrs()
                .iter()
                .position(|a| a.attr_id == attr_id)?;
            Some(OutBytes {
                ptr,
                len,
                index,
                attr_id,
                _borrow: PhantomData,
            })
        };
        let outs = InvokeWriteOuts {
            core: out(core_ptr, core_len, sys::UVERBS_ATTR_CORE_OUT),
            uhw: out(uhw_ptr, uhw_len, sys::UVERBS_ATTR_UHW_OUT),
        };
        (method, outs)
    }

    /// The frame as framed so far.
    pub fn frame(&self) -> &IoctlFrame {
        &self.frame
    }

    /// The bytes the kernel would read (header and attributes).
    pub fn as_bytes(&self) -> &[u8] {
        self.frame.as_bytes()
    }

    /// The first framing error, if any (then nothing will be sent).
    pub fn error(&self) -> Option<Errno> {
        self.error
    }

    /// Appends `attr`, remembering the first failure; returns its index.
    fn push(&mut self, attr: Result<sys::ib_uverbs_attr, Errno>) -> usize {
        let index = self.frame.attrs().len();
        if self.error.is_none() {
            if let Err(e) = attr.and_then(|a| self.frame.push(a)) {
                self.error = Some(e);
            }
        }
        index
    }

    /// A constant input (`UVERBS_ATTR_CONST_IN`: 8 bytes inline, whatever
    /// the kernel's type; it checks the range).
    pub fn const_in(&mut self, attr_id: u16, value: u64) -> &mut Self {
        self.push(Ok(attr_const(attr_id, value)));
        self
    }

    /// A pointer input: `value`'s bytes, inline in the attribute when at
    /// most 8 bytes long (the kernel then reads them from `data`), else by
    /// pointer. `T` may be a slice (`[u8]`, `[u32]`, a slice of structs).
    pub fn ptr_in<T: IntoBytes + Immutable + ?Sized>(
        &mut self,
        attr_id: u16,
        value: &'a T,
    ) -> &mut Self {
        self.push(attr_in(attr_id, value.as_bytes()));
        self
    }

    /// A pointer input of at most 8 bytes, copied inline (no borrow).
    /// Larger types do not compile.
    pub fn inline_in<T: IntoBytes + Immutable>(&mut self, attr_id: u16, value: T) -> &mut Self {
        const { assert!(size_of::<T>() <= 8, "inline_in takes at most 8 bytes") };
        self.push(attr_in(attr_id, value.as_bytes()));
        self
    }

    /// An enum input (`UVERBS_ATTR_ENUM_IN`): alternative `elem_id` of the
    /// attribute, with its pointer-input data.
    pub fn enum_in<T: IntoBytes + Immutable + ?Sized>(
        &mut self,
        attr_id: u16,
        elem_id: u8,
        value: &'a T,
    ) -> &mut Self {
        let attr = attr_in(attr_id, value.as_bytes()).map(|mut a| {
            // `enum_data { u8 elem_id; u8 reserved; }`: elem_id first in memory.
            a.attr_data = u16::from_ne_bytes([elem_id, 0]);
            a
        });
        self.push(attr);
        self
    }

    /// An output the kernel writes (`PTR_OUT`), `size_of::<T>()` bytes at
    /// `out`, which is zeroed first (the kernel may write fewer bytes).
    pub fn ptr_out<T: FromBytes + IntoBytes>(
        &mut self,
        attr_id: u16,
        out: &'a mut T,
    ) -> Out<'a, T> {
        *out = T::new_zeroed();
        let ptr = NonNull::from(out);
        let index = self.push(attr_out(attr_id, user_addr(ptr.as_ptr()), size_of::<T>()));
        Out {
            ptr,
            index,
            attr_id,
            _borrow: PhantomData,
        }
    }

    /// An output byte buffer (`PTR_OUT` of `out.len()` bytes), zeroed first.
    pub fn bytes_out(&mut self, attr_id: u16, out: &'a mut [u8]) -> OutBytes<'a> {
        out.fill(0);
        let len = out.len();
        let ptr = NonNull::from(out).cast::<u8>();
        let index = self.push(attr_out(attr_id, user_addr(ptr.as_ptr()), len));
        OutBytes {
            ptr,
            len,
            index,
            attr_id,
            _borrow: PhantomData,
        }
    }

    fn object(attr_id: u16, data: u64) -> sys::ib_uverbs_attr {
        sys::ib_uverbs_attr {
            attr_id,
            len: 0,
            flags: sys::UVERBS_ATTR_F_MANDATORY,
            attr_data: 0,
            data,
        }
    }

    /// An existing object by handle (`UVERBS_ATTR_IDR`, read or write access).
    pub fn idr_in(&mut self, attr_id: u16, handle: u32) -> &mut Self {
        self.push(Ok(Self::object(attr_id, handle.into())));
        self
    }

    /// The object the method destroys (an IDR with destroy access: the
    /// same wire as [`idr_in`](Self::idr_in)).
    pub fn idr_destroy(&mut self, attr_id: u16, handle: u32) -> &mut Self {
        self.idr_in(attr_id, handle)
    }

    /// The object the method creates; the kernel writes its handle.
    pub fn idr_new(&mut self, attr_id: u16) -> NewHandle {
        let index = self.push(Ok(Self::object(attr_id, 0)));
        NewHandle { index, attr_id }
    }

    /// The descriptor the method creates; the kernel writes its number.
    pub fn fd_new(&mut self, attr_id: u16) -> NewFd {
        let index = self.push(Ok(Self::object(attr_id, 0)));
        NewFd { index, attr_id }
    }

    /// Several objects by handle (`UVERBS_ATTR_IDRS_ARRAY`): inline for up
    /// to two handles, else by pointer.
    pub fn idr_array(&mut self, attr_id: u16, handles: &'a [u32]) -> &mut Self {
        self.push(attr_in(attr_id, handles.as_bytes()));
        self
    }

    /// Driver-private input (`UVERBS_ATTR_UHW_IN`).
    pub fn uhw_in(&mut self, data: &'a [u8]) -> &mut Self {
        self.ptr_in(sys::UVERBS_ATTR_UHW_IN, data)
    }

    /// Driver-private output (`UVERBS_ATTR_UHW_OUT`).
    pub fn uhw_out(&mut self, out: &'a mut [u8]) -> OutBytes<'a> {
        self.bytes_out(sys::UVERBS_ATTR_UHW_OUT, out)
    }

    /// Clears `UVERBS_ATTR_F_MANDATORY` on the attribute pushed last: a
    /// kernel that does not know it ignores it instead of answering
    /// `EPROTONOSUPPORT`.
    pub fn optional(&mut self) -> &mut Self {
        if let Some(id) = self.frame.attrs().last().map(|a| a.attr_id) {
            if let Some(attr) = self.frame.attr_mut(id) {
                attr.flags &= !sys::UVERBS_ATTR_F_MANDATORY;
            }
        }
        self
    }

    /// Sends the method through `transport` (one `ioctl` on the kernel's
    /// file). A framing error is returned without sending anything.
    ///
    /// # Safety
    ///
    /// The builder vouches for every pointer it framed: each points at a
    /// live buffer of the attribute's length, borrowed for `'a`. What
    /// remains is what the *method* does with the device and the kernel's
    /// objects: it must not give the device access to memory other than
    /// through those borrowed buffers (e.g. a `REG_MR` whose address travels
    /// as a [`const_in`](Self::const_in) number needs that range to stay
    /// mapped while registered), and must not destroy or change an object
    /// that other code owns (an MR or PD handle held by a
    /// [`MemoryRegion`](crate::MemoryRegion) or
    /// [`ProtectionDomain`](crate::ProtectionDomain)). Query methods need
    /// nothing.
    pub unsafe fn invoke(mut self, transport: &dyn Transport) -> Result<Invoked<'a>, Errno> {
        if let Some(e) = self.error {
            return Err(e);
        }
        let (object, method) = (self.frame.header().object_id, self.frame.header().method_id);
        // SAFETY: every pointer in the frame was made by a pusher from a
        // reference borrowed for 'a (alive, not otherwise used), with its
        // exact length, through `user_addr` (exposed); the method's own
        // effects are the caller's promise.
        let sent = unsafe { transport.invoke(&mut self.frame) };
        // An INVOKE_WRITE carries a write command, which `transport::run`
        // reports as that command.
        if (object, method) != (sys::UVERBS_OBJECT_DEVICE, sys::UVERBS_METHOD_INVOKE_WRITE) {
            crate::trace::method(object, method, &sent);
        }
        sent?;
        Ok(Invoked {
            frame: self.frame,
            _borrows: PhantomData,
        })
    }
}

/// The outputs of an `INVOKE_WRITE` method: `None` for an empty buffer
/// (left out of the frame).
#[derive(Debug)]
pub struct InvokeWriteOuts<'a> {
    /// The core response (`UVERBS_ATTR_CORE_OUT`).
    pub core: Option<OutBytes<'a>>,
    /// The driver-private response (`UVERBS_ATTR_UHW_OUT`).
    pub uhw: Option<OutBytes<'a>>,
}

/// A method the kernel ran successfully: its frame as the kernel left it
/// (flags, written IDR and FD values), and the outputs to read.
pub struct Invoked<'a> {
    frame: IoctlFrame,
    _borrows: PhantomData<&'a mut [u8]>,
}

impl fmt::Debug for Invoked<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Invoked")
            .field("attrs", &self.frame.attrs())
            .finish()
    }
}

impl<'a> Invoked<'a> {
    /// The frame after the call (the kernel writes flags and handles back).
    pub fn frame(&self) -> &IoctlFrame {
        &self.frame
    }

    /// The attribute `index` if it is still the one with `attr_id` (a
    /// handle from another method gives `None`).
    fn attr(&self, index: usize, attr_id: u16) -> Option<&sys::ib_uverbs_attr> {
        self.frame
            .attrs()
            .get(index)
            .filter(|a| a.attr_id == attr_id)
    }

    /// True when the kernel set `UVERBS_ATTR_F_VALID_OUTPUT` on the output
    /// attribute at `index` that points at `addr`.
    fn written(&self, index: usize, attr_id: u16, addr: u64) -> bool {
        self.attr(index, attr_id)
            .is_some_and(|a| a.data == addr && is_valid_output(a))
    }

    /// The value the kernel wrote into `out`, or `None` when it did not
    /// mark the output written (`VALID_OUTPUT`): an optional output the
    /// method skipped, or a handle that belongs to another method.
    pub fn read<T: FromBytes + IntoBytes + Copy>(&self, out: Out<'a, T>) -> Option<T> {
        if !self.written(out.index, out.attr_id, user_addr(out.ptr.as_ptr())) {
            return None;
        }
        // SAFETY: `out.ptr` comes from a `&'a mut T` that `out` still holds
        // (nothing else can access it); the call is over, so the kernel no
        // longer writes it; any bytes are a valid `T` (FromBytes).
        Some(unsafe { out.ptr.as_ptr().read() })
    }

    /// The buffer the kernel wrote into `out`, or `None` when it did not
    /// mark it written. Gives back the borrow `out` held.
    pub fn read_bytes(&self, out: OutBytes<'a>) -> Option<&'a mut [u8]> {
        if !self.written(out.index, out.attr_id, user_addr(out.ptr.as_ptr())) {
            return None;
        }
        // SAFETY: `out` held the only use of this `&'a mut [u8]` of `len`
        // bytes and is consumed here, so handing the borrow back is sound.
        Some(unsafe { std::slice::from_raw_parts_mut(out.ptr.as_ptr(), out.len) })
    }

    /// The handle the kernel gave the new object, `None` if it is not a
    /// `u32` (the kernel's ids are) or `new` is not this method's.
    pub fn handle(&self, new: NewHandle) -> Option<u32> {
        self.attr(new.index, new.attr_id)
            .and_then(|a| u32::try_from(a.data).ok())
    }

    /// The descriptor number the kernel installed, `None` if it is not one
    /// or `new` is not this method's. It is not owned by anything yet: on
    /// the kernel's file, wrap it with `OwnedFd::from_raw_fd` at once.
    pub fn fd(&self, new: NewFd) -> Option<RawFd> {
        self.attr(new.index, new.attr_id)
            .and_then(|a| RawFd::try_from(a.data as i64).ok())
            .filter(|fd| *fd >= 0)
    }
}

/// The most attributes a [`Method`] carries.
pub const MAX_METHOD_ATTRS: usize = frame::MAX_ATTRS;
