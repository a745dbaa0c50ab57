//! The two byte framings of a write command, as pure functions.
//!
//! Nothing here performs a system call: the encoders build the exact bytes
//! that [`KernelFile`](super::KernelFile) hands to `write()` or to
//! `ioctl(RDMA_VERBS_IOCTL)`, so unit tests can pin them byte for byte.

use std::fmt;
use std::mem::MaybeUninit;

use crate::error::Errno;
use uverbs_uapi as sys;
use zerocopy::{Immutable, IntoBytes};

/// The most attributes a frame carries: room for the largest native method
/// (`REG_MR` of Linux 6.17: 11 attributes, plus UHW in and out) with some to
/// spare. The kernel reads only `hdr.length` bytes, so unused room costs
/// nothing but stack.
pub const MAX_ATTRS: usize = 16;

/// The largest write() buffer built here, in bytes (header included).
pub const MAX_WRITE_BYTES: usize = 256;

/// A legacy `write()` buffer: `ib_uverbs_cmd_hdr` + core request + UHW in.
#[derive(Clone, Copy)]
pub struct WriteFrame {
    // Only the first `len` bytes are initialised (and ever read): zeroing
    // the whole buffer on every command costs more than the command's own
    // encoding.
    words: MaybeUninit<[u64; MAX_WRITE_BYTES / 8]>,
    len: usize,
}

impl fmt::Debug for WriteFrame {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WriteFrame")
            .field("bytes", &self.as_bytes())
            .finish()
    }
}

impl Default for WriteFrame {
    fn default() -> Self {
        WriteFrame {
            words: MaybeUninit::uninit(),
            len: 0,
        }
    }
}

impl WriteFrame {
    /// Frames command `code` into a new frame; see [`encode`](Self::encode).
    pub fn new(
        code: u32,
        core_in: &[u8],
        uhw_in: &[u8],
        response_ptr: u64,
        response_len: usize,
    ) -> Result<Self, Errno> {
        let mut frame = WriteFrame::default();
        frame.encode(code, core_in, uhw_in, response_ptr, response_len)?;
        Ok(frame)
    }

    /// Frames command `code` in place and returns the bytes to write. When
    /// `response_len` is not zero, the first eight bytes of `core_in` (the
    /// `response` field) are replaced by `response_ptr`; `response_len` is
    /// the core response plus the UHW out length, which the kernel reads as
    /// one contiguous buffer. (In place, because moving a 256-byte frame
    /// out of a function costs more than encoding it.)
    ///
    /// Fails with `EINVAL` when a length is not a multiple of four or the
    /// words do not fit the header's `u16` fields, and with `E2BIG` when the
    /// frame exceeds [`MAX_WRITE_BYTES`].
    #[inline]
    pub fn encode(
        &mut self,
        code: u32,
        core_in: &[u8],
        uhw_in: &[u8],
        response_ptr: u64,
        response_len: usize,
    ) -> Result<&[u8], Errno> {
        let hdr_len = size_of::<sys::ib_uverbs_cmd_hdr>();
        let len = hdr_len + core_in.len() + uhw_in.len();
        if len % 4 != 0 || response_len % 4 != 0 {
            return Err(Errno::INVAL);
        }
        if len > MAX_WRITE_BYTES {
            return Err(Errno::TOOBIG);
        }
        let in_words = u16::try_from(len / 4).map_err(|_| Errno::INVAL)?;
        let out_words = u16::try_from(response_len / 4).map_err(|_| Errno::INVAL)?;
        if response_len != 0 && core_in.len() < 8 {
            return Err(Errno::INVAL);
        }
        let base = self.words.as_mut_ptr().cast::<u8>();
        let put = |offset: usize, bytes: &[u8]| {
            debug_assert!(offset + bytes.len() <= len);
            // SAFETY: `offset + bytes.len() <= len <= MAX_WRITE_BYTES`, inside
            // the buffer; the source is a distinct slice.
            unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), base.add(offset), bytes.len()) };
        };
        let hdr = sys::ib_uverbs_cmd_hdr {
            command: code,
            in_words,
            out_words,
        };
        put(0, hdr.as_bytes());
        put(hdr_len, core_in);
        if response_len != 0 {
            put(hdr_len, &response_ptr.to_ne_bytes());
        }
        put(hdr_len + core_in.len(), uhw_in);
        // Every byte in `0..len` was written above: header, request, UHW in.
        self.len = len;
        Ok(self.as_bytes())
    }

    /// Frames extended command `code` (which carries
    /// `IB_USER_VERBS_CMD_FLAG_EXTENDED`) in place and returns the bytes to
    /// write: `ib_uverbs_cmd_hdr` with the core request and response in
    /// 64-bit words, `ib_uverbs_ex_cmd_hdr` with `response_ptr` and the UHW
    /// lengths in 64-bit words, then the core request (which has no
    /// `response` field) and UHW in. The kernel writes the core response
    /// and UHW out as one buffer at `response_ptr`; with no response room
    /// at all the pointer is sent as zero, as the kernel wants.
    ///
    /// Fails with `EINVAL` when a length is not a multiple of eight or does
    /// not fit the headers' `u16` fields, and with `E2BIG` when the frame
    /// exceeds [`MAX_WRITE_BYTES`].
    pub fn encode_extended(
        &mut self,
        code: u32,
        core_in: &[u8],
        uhw_in: &[u8],
        response_ptr: u64,
        (core_out_len, uhw_out_len): (usize, usize),
    ) -> Result<&[u8], Errno> {
        let words = |len: usize| -> Result<u16, Errno> {
            if len % 8 != 0 {
                return Err(Errno::INVAL);
            }
            u16::try_from(len / 8).map_err(|_| Errno::INVAL)
        };
        let hdr = sys::ib_uverbs_cmd_hdr {
            command: code,
            in_words: words(core_in.len())?,
            out_words: words(core_out_len)?,
        };
        let no_response = core_out_len == 0 && uhw_out_len == 0;
        let ex_hdr = sys::ib_uverbs_ex_cmd_hdr {
            response: if no_response { 0 } else { response_ptr },
            provider_in_words: words(uhw_in.len())?,
            provider_out_words: words(uhw_out_len)?,
            cmd_hdr_reserved: 0,
        };
        let headers = size_of_val(&hdr) + size_of_val(&ex_hdr);
        let len = headers + core_in.len() + uhw_in.len();
        if len > MAX_WRITE_BYTES {
            return Err(Errno::TOOBIG);
        }
        let parts: [&[u8]; 4] = [hdr.as_bytes(), ex_hdr.as_bytes(), core_in, uhw_in];
        self.fill(len, &parts);
        Ok(self.as_bytes())
    }

    /// Copies `parts` one after the other to the start of the buffer and
    /// makes the frame `len` bytes long; their lengths must add up to `len`.
    fn fill(&mut self, len: usize, parts: &[&[u8]]) {
        debug_assert_eq!(parts.iter().map(|p| p.len()).sum::<usize>(), len);
        let base = self.words.as_mut_ptr().cast::<u8>();
        let mut offset = 0;
        for part in parts {
            assert!(offset + part.len() <= MAX_WRITE_BYTES);
            // SAFETY: the assertion keeps the copy inside the buffer; the
            // source is a distinct slice.
            unsafe { std::ptr::copy_nonoverlapping(part.as_ptr(), base.add(offset), part.len()) };
            offset += part.len();
        }
        // Every byte in `0..offset` was written above.
        self.len = offset;
    }

    /// The bytes to write.
    pub fn as_bytes(&self) -> &[u8] {
        // SAFETY: `new` initialised exactly the first `len` bytes, and
        // `len <= MAX_WRITE_BYTES`.
        unsafe { std::slice::from_raw_parts(self.words.as_ptr().cast::<u8>(), self.len) }
    }
}

/// An `ib_uverbs_ioctl_hdr` followed by its attributes, as the kernel reads it.
///
/// `IntoBytes` (proven padding-free by its derive) gives the byte view; the
/// frame is deliberately not `FromBytes`, so `hdr.length` and `num_attrs`
/// only ever change through [`push`](Self::push).
#[repr(C)]
#[derive(Clone, Copy, Debug, IntoBytes, Immutable)]
pub struct IoctlFrame {
    hdr: sys::ib_uverbs_ioctl_hdr,
    attrs: [sys::ib_uverbs_attr; MAX_ATTRS],
}

impl IoctlFrame {
    /// An empty frame for method `method_id` of object `object_id`.
    pub fn new(object_id: u16, method_id: u16, driver_id: u32) -> Self {
        let mut frame = IoctlFrame {
            hdr: sys::ib_uverbs_ioctl_hdr::default(),
            attrs: [sys::ib_uverbs_attr::default(); MAX_ATTRS],
        };
        frame.hdr.object_id = object_id;
        frame.hdr.method_id = method_id;
        frame.hdr.driver_id = driver_id;
        frame.hdr.length = size_of::<sys::ib_uverbs_ioctl_hdr>() as u16;
        frame
    }

    /// Frames write command `code` as `UVERBS_METHOD_INVOKE_WRITE`; see
    /// [`set_invoke_write`](Self::set_invoke_write).
    pub fn invoke_write(
        driver_id: u32,
        code: u32,
        core_in: &[u8],
        uhw_in: &[u8],
        core_out: (u64, usize),
        uhw_out: (u64, usize),
    ) -> Result<Self, Errno> {
        let mut frame = Self::new(
            sys::UVERBS_OBJECT_DEVICE,
            sys::UVERBS_METHOD_INVOKE_WRITE,
            driver_id,
        );
        frame.set_invoke_write(code, core_in, uhw_in, core_out, uhw_out)?;
        Ok(frame)
    }

    /// Fills an empty `INVOKE_WRITE` frame in place: `WRITE_CMD` inline,
    /// `CORE_IN`, then `CORE_OUT`, `UHW_IN` and `UHW_OUT` only when not
    /// empty. The output pointers are where the kernel writes.
    #[inline]
    pub fn set_invoke_write(
        &mut self,
        code: u32,
        core_in: &[u8],
        uhw_in: &[u8],
        core_out: (u64, usize),
        uhw_out: (u64, usize),
    ) -> Result<(), Errno> {
        self.push(attr_const(sys::UVERBS_ATTR_WRITE_CMD, code.into()))?;
        self.push(attr_in(sys::UVERBS_ATTR_CORE_IN, core_in)?)?;
        if core_out.1 != 0 {
            self.push(attr_out(sys::UVERBS_ATTR_CORE_OUT, core_out.0, core_out.1)?)?;
        }
        if !uhw_in.is_empty() {
            self.push(attr_in(sys::UVERBS_ATTR_UHW_IN, uhw_in)?)?;
        }
        if uhw_out.1 != 0 {
            self.push(attr_out(sys::UVERBS_ATTR_UHW_OUT, uhw_out.0, uhw_out.1)?)?;
        }
        Ok(())
    }

    /// Appends an attribute; `E2BIG` when the frame is full.
    pub fn push(&mut self, attr: sys::ib_uverbs_attr) -> Result<(), Errno> {
        let n = usize::from(self.hdr.num_attrs);
        if n == MAX_ATTRS {
            return Err(Errno::TOOBIG);
        }
        self.attrs[n] = attr;
        self.hdr.num_attrs += 1;
        self.hdr.length += size_of::<sys::ib_uverbs_attr>() as u16;
        Ok(())
    }

    /// The attributes pushed so far (after the ioctl: with the kernel's flags).
    pub fn attrs(&self) -> &[sys::ib_uverbs_attr] {
        &self.attrs[..usize::from(self.hdr.num_attrs)]
    }

    /// The attribute with id `attr_id`, if present.
    pub fn attr(&self, attr_id: u16) -> Option<&sys::ib_uverbs_attr> {
        self.attrs().iter().find(|a| a.attr_id == attr_id)
    }

    /// The header, as the kernel reads it.
    pub fn header(&self) -> &sys::ib_uverbs_ioctl_hdr {
        &self.hdr
    }

    /// The attribute with id `attr_id`, if present, for patching in place
    /// (e.g. a handle inside inline `CORE_IN` data).
    pub fn attr_mut(&mut self, attr_id: u16) -> Option<&mut sys::ib_uverbs_attr> {
        let n = usize::from(self.hdr.num_attrs);
        self.attrs[..n].iter_mut().find(|a| a.attr_id == attr_id)
    }

    /// The `hdr.length` bytes the kernel reads.
    pub fn as_bytes(&self) -> &[u8] {
        // `push` keeps `length` within the frame, so this never panics.
        &IntoBytes::as_bytes(self)[..usize::from(self.hdr.length)]
    }
}

/// The address a frame gives the kernel for a buffer it reads or writes.
///
/// A pointer-to-integer `as` cast, which *exposes* the pointer's provenance
/// (it is what `<*const T>::expose_provenance` does; that method is stable
/// only since Rust 1.84, after this crate's MSRV). Exposure is what makes
/// the kernel's writes visible: the system call gets the buffer only as an
/// integer inside the frame, and the compiler must assume that an opaque
/// call (a foreign function, or an asm block without `readonly`/`nomem`)
/// may access any memory whose provenance was exposed.
#[inline]
pub fn user_addr<T>(ptr: *const T) -> u64 {
    ptr as usize as u64
}

/// A mandatory constant input, inline in `data` (`len` 8, as rdma-core sends it).
pub fn attr_const(attr_id: u16, value: u64) -> sys::ib_uverbs_attr {
    sys::ib_uverbs_attr {
        attr_id,
        len: 8,
        flags: sys::UVERBS_ATTR_F_MANDATORY,
        attr_data: 0,
        data: value,
    }
}

/// A mandatory pointer input: up to 8 bytes inline in `data`, longer ones by
/// pointer. `EINVAL` above 0xffff bytes.
pub fn attr_in(attr_id: u16, bytes: &[u8]) -> Result<sys::ib_uverbs_attr, Errno> {
    let len = u16::try_from(bytes.len()).map_err(|_| Errno::INVAL)?;
    let data = if bytes.len() <= 8 {
        let mut inline = [0u8; 8];
        inline[..bytes.len()].copy_from_slice(bytes);
        u64::from_ne_bytes(inline)
    } else {
        user_addr(bytes.as_ptr())
    };
    Ok(sys::ib_uverbs_attr {
        attr_id,
        len,
        flags: sys::UVERBS_ATTR_F_MANDATORY,
        attr_data: 0,
        data,
    })
}

/// A mandatory output buffer of `len` bytes at `ptr` (made with
/// [`user_addr`], so that its provenance is exposed). `EINVAL` above 0xffff.
pub fn attr_out(attr_id: u16, ptr: u64, len: usize) -> Result<sys::ib_uverbs_attr, Errno> {
    let len = u16::try_from(len).map_err(|_| Errno::INVAL)?;
    Ok(sys::ib_uverbs_attr {
        attr_id,
        len,
        flags: sys::UVERBS_ATTR_F_MANDATORY,
        attr_data: 0,
        data: ptr,
    })
}

/// True when the kernel marked the attribute as written.
pub fn is_valid_output(attr: &sys::ib_uverbs_attr) -> bool {
    attr.flags & sys::UVERBS_ATTR_F_VALID_OUTPUT != 0
}
