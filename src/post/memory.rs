//! Memory a work request may own: registered buffers whose bytes the device
//! can reach through an lkey, and slices of them.
//!
//! Two promises, two traits. [`DeviceReadable`] memory stays mapped,
//! registered and unwritten while the value lives: the device may read it
//! (SEND, RDMA WRITE). [`DeviceWritable`] memory is in addition reached by
//! nothing else while the value lives: the device may write it (receives,
//! RDMA READ, atomics). A [`BufferMr`] is both, since it is the only way to
//! its buffer; an `Arc<BufferMr<B>>` is only readable, since its clones may
//! read the bytes at the same time.

use std::ops::Range;
use std::sync::Arc;

use crate::buffer::{BufferMr, StableBuffer};
use crate::mr::OutOfRange;
use crate::wr::{PostError, Sge};

/// Registered memory the device may read while the value lives.
///
/// # Safety
///
/// `registered()` returns the same `(addr, len, lkey)` every time it is
/// called on one value, even after the value was moved; the `len` bytes at
/// `addr` stay mapped and registered under `lkey` and are not written by
/// anyone (through this value or any other) for as long as the value lives.
pub unsafe trait DeviceReadable: Send + 'static {
    /// The first byte, the length, and the lkey of the registration that
    /// covers them.
    fn registered(&self) -> (u64, usize, u32);
}

/// Registered memory the device may also write while the value lives.
///
/// # Safety
///
/// As [`DeviceReadable`], and in addition nothing but the device reads or
/// writes the bytes while the value lives: the value is the only way to
/// them (it is not shared, and cannot hand out a reference to them that
/// outlives a borrow of it).
pub unsafe trait DeviceWritable: DeviceReadable {}

// SAFETY: a BufferMr owns its buffer (a StableBuffer: the bytes never move)
// and its registration; the buffer is reached only through `&self`/`&mut
// self` of the region, so while the region is owned by a work request
// nothing else reads or writes it. The region registers the whole buffer.
unsafe impl<B: StableBuffer + Send + 'static> DeviceReadable for BufferMr<B> {
    fn registered(&self) -> (u64, usize, u32) {
        let bytes = self.buffer();
        (bytes.as_ptr() as u64, bytes.len(), self.lkey())
    }
}

// SAFETY: see DeviceReadable: an owned BufferMr is the only way to its bytes.
unsafe impl<B: StableBuffer + Send + 'static> DeviceWritable for BufferMr<B> {}

// SAFETY: every clone of the Arc reaches the buffer only through `&BufferMr`,
// which reads it and cannot write it (writing needs `&mut`, which
// `Arc::get_mut` gives only while no other clone exists, so never while a
// work request holds one). The region lives as long as the last clone.
unsafe impl<B: StableBuffer + Send + Sync + 'static> DeviceReadable for Arc<BufferMr<B>> {
    fn registered(&self) -> (u64, usize, u32) {
        (**self).registered()
    }
}

/// Memory of type `Self` that can carry a `W` through a work request, so
/// that one [`OwnedQp`](crate::OwnedQp) takes more than one kind of memory
/// (e.g. [`OwnedOrShared`]: a WRITE from an `Arc<BufferMr<B>>` and a READ
/// into a `BufferMr<B>` on one queue pair). Every memory type holds itself.
///
/// A request's constructor checks what the operation needs on `W` (a READ
/// or a receive wants [`DeviceWritable`]); the queue pair keeps the `Self`
/// that [`hold`](Self::hold) made until the device is done with it.
///
/// # Safety
///
/// `Self::hold(w).registered()` equals `w.registered()`, and `hold` keeps
/// no handle to `w`'s bytes and makes none: the result reaches them only
/// as `w` did (so one made from [`DeviceWritable`] memory is the only way
/// to its bytes while it lives).
pub unsafe trait Holds<W>: DeviceReadable {
    /// `w`, as this type.
    fn hold(w: W) -> Self;
}

// SAFETY: the identity changes nothing.
unsafe impl<M: DeviceReadable> Holds<M> for M {
    fn hold(m: M) -> M {
        m
    }
}

/// A registered buffer owned by one request or shared with others: the
/// memory type of an [`OwnedQp`](crate::OwnedQp) that both sends shared
/// bytes and receives or READs into owned ones. Requests are built from
/// either kind ([`Holds`]); completions hand this back.
///
/// ```no_run
/// # fn demo(qp: &uverbs::OwnedQp<uverbs::post::OwnedOrShared<memmap2::MmapMut>>,
/// #         shared: std::sync::Arc<uverbs::BufferMr<memmap2::MmapMut>>,
/// #         owned: uverbs::BufferMr<memmap2::MmapMut>,
/// #         remote: uverbs::wr::Remote) -> Result<(), uverbs::Error> {
/// use uverbs::post::{Local, SendRequest};
///
/// // One QP: a WRITE of bytes others may read too, a READ into a buffer of its own.
/// qp.post_send(SendRequest::write(1, Local::whole(shared), remote))?;
/// qp.post_send(SendRequest::read(2, Local::whole(owned), remote))?;
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub enum OwnedOrShared<B: StableBuffer> {
    /// A buffer only this value reaches: the device may write it.
    Owned(BufferMr<B>),
    /// A buffer whose clones may read it at the same time.
    Shared(Arc<BufferMr<B>>),
}

impl<B: StableBuffer> OwnedOrShared<B> {
    /// The owned buffer, or `self` back if it is shared.
    pub fn into_owned(self) -> Result<BufferMr<B>, Self> {
        match self {
            OwnedOrShared::Owned(mr) => Ok(mr),
            shared => Err(shared),
        }
    }

    /// The buffer as a shared one (an owned one moves into a new `Arc`).
    pub fn into_shared(self) -> Arc<BufferMr<B>> {
        match self {
            OwnedOrShared::Owned(mr) => Arc::new(mr),
            OwnedOrShared::Shared(mr) => mr,
        }
    }

    /// The region, either way.
    pub fn region(&self) -> &BufferMr<B> {
        match self {
            OwnedOrShared::Owned(mr) => mr,
            OwnedOrShared::Shared(mr) => mr,
        }
    }
}

impl<B: StableBuffer> From<BufferMr<B>> for OwnedOrShared<B> {
    fn from(mr: BufferMr<B>) -> Self {
        OwnedOrShared::Owned(mr)
    }
}

impl<B: StableBuffer> From<Arc<BufferMr<B>>> for OwnedOrShared<B> {
    fn from(mr: Arc<BufferMr<B>>) -> Self {
        OwnedOrShared::Shared(mr)
    }
}

// SAFETY: each variant is DeviceReadable (above) and answers as it does;
// the enum is not DeviceWritable, as its Shared variant may be read
// elsewhere: writes into it are checked on the variant a request is built
// from (Holds).
unsafe impl<B: StableBuffer + Send + Sync + 'static> DeviceReadable for OwnedOrShared<B> {
    fn registered(&self) -> (u64, usize, u32) {
        self.region().registered()
    }
}

// SAFETY: moves the region into the enum; registered() answers as the
// region's own; no other handle is made.
unsafe impl<B: StableBuffer + Send + Sync + 'static> Holds<BufferMr<B>> for OwnedOrShared<B> {
    fn hold(mr: BufferMr<B>) -> Self {
        OwnedOrShared::Owned(mr)
    }
}

// SAFETY: moves this clone of the Arc into the enum; registered() answers
// as the region's own; no other clone is made.
unsafe impl<B: StableBuffer + Send + Sync + 'static> Holds<Arc<BufferMr<B>>> for OwnedOrShared<B> {
    fn hold(mr: Arc<BufferMr<B>>) -> Self {
        OwnedOrShared::Shared(mr)
    }
}

/// A byte range of registered memory `M`, owned: what a work request's
/// local side is. [`into_inner`](Self::into_inner) gives the memory back.
#[derive(Debug)]
pub struct Local<M> {
    mem: M,
    range: Range<usize>,
}

impl<M: DeviceReadable> Local<M> {
    /// All of `mem` as a request's local memory (one SGE over every byte
    /// it registered): `Local::whole(mr)`; a part is
    /// [`slice`](Self::slice).
    #[doc(alias = "sge")]
    pub fn whole(mem: M) -> Self {
        let (_, len, _) = mem.registered();
        Local { mem, range: 0..len }
    }

    /// The bytes `range` of `mem`; a range past its end (or reversed) is
    /// refused with the memory handed back.
    pub fn slice(mem: M, range: Range<usize>) -> Result<Self, OutOfRange<M>> {
        let (_, len, _) = mem.registered();
        if range.start > range.end || range.end > len {
            return Err(OutOfRange {
                mem,
                start: range.start,
                end: range.end,
                len,
            });
        }
        Ok(Local { mem, range })
    }

    /// The SGE naming the range; one longer than the WQE's 32-bit length
    /// is refused.
    pub(crate) fn sge(&self) -> Result<Sge, PostError> {
        let (addr, _, lkey) = self.mem.registered();
        let len = self.range.len();
        let length = u32::try_from(len).map_err(|_| PostError::TooLong {
            op: "post",
            len: len as u64,
        })?;
        Ok(Sge {
            addr: addr + self.range.start as u64,
            length,
            lkey,
        })
    }
}

impl<W> Local<W> {
    /// The same range of `W` held as an `M` (same bytes: [`Holds`]).
    pub(crate) fn held<M: Holds<W>>(self) -> Local<M> {
        Local {
            mem: M::hold(self.mem),
            range: self.range,
        }
    }
}

impl<M> Local<M> {
    /// The range, relative to the start of the memory.
    pub fn range(&self) -> Range<usize> {
        self.range.clone()
    }

    /// The memory.
    pub fn memory(&self) -> &M {
        &self.mem
    }

    /// Gives the memory back.
    pub fn into_inner(self) -> M {
        self.mem
    }
}
