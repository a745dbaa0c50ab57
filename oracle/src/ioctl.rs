//! A uverbs ioctl (`RDMA_VERBS_IOCTL`) as its caller laid it out: the
//! header, then `num_attrs` attributes; an input of at most 8 bytes is
//! inline in its attribute, a longer one and every output are pointed at;
//! a new object's handle (or file descriptor) is written into the
//! attribute itself.

use uverbs_uapi::{ib_uverbs_attr, ib_uverbs_ioctl_hdr, UVERBS_ATTR_F_VALID_OUTPUT};

/// `EINVAL`, `ENOSPC` and the like, as the kernel returns them negated.
pub type Errno = i32;

/// One ioctl, read from and answered into its caller's memory.
pub struct Call {
    hdr: ib_uverbs_ioctl_hdr,
    attrs: *mut ib_uverbs_attr,
}

impl Call {
    /// The call whose header is at `arg`.
    ///
    /// # Safety
    ///
    /// `arg` points at an `ib_uverbs_ioctl_hdr` followed by its
    /// `num_attrs` attributes, every pointer attribute at `len` bytes, all
    /// valid for reads and writes while the `Call` lives, and nothing else
    /// touches them meanwhile (the caller waits in its `ioctl`).
    pub unsafe fn from_raw(arg: *mut u8) -> Call {
        // SAFETY: the header is readable (the caller's promise); unaligned
        // reads take any address.
        let hdr = unsafe { arg.cast::<ib_uverbs_ioctl_hdr>().read_unaligned() };
        Call {
            hdr,
            // SAFETY: the attributes follow the 24-byte header.
            attrs: unsafe { arg.add(size_of::<ib_uverbs_ioctl_hdr>()) }.cast(),
        }
    }

    /// The object (`UVERBS_OBJECT_*`, mlx5's at 0x1000 and up).
    pub fn object(&self) -> u16 {
        self.hdr.object_id
    }

    /// The method of the object.
    pub fn method(&self) -> u16 {
        self.hdr.method_id
    }

    /// The driver id the caller named (`RDMA_DRIVER_*`).
    pub fn driver_id(&self) -> u32 {
        self.hdr.driver_id
    }

    /// The header and the attributes as they are now, byte for byte.
    pub fn frame_bytes(&self) -> Vec<u8> {
        let mut out = zerocopy::IntoBytes::as_bytes(&self.hdr).to_vec();
        for a in self.attrs() {
            out.extend_from_slice(zerocopy::IntoBytes::as_bytes(&a));
        }
        out
    }

    /// The attributes, copied out.
    pub fn attrs(&self) -> Vec<ib_uverbs_attr> {
        (0..usize::from(self.hdr.num_attrs))
            // SAFETY: `num_attrs` attributes follow the header (from_raw).
            .map(|i| unsafe { self.attrs.add(i).read_unaligned() })
            .collect()
    }

    fn index(&self, id: u16) -> Option<usize> {
        self.attrs().iter().position(|a| a.attr_id == id)
    }

    /// The bytes of input attribute `id`: inline up to 8 bytes, else read
    /// where it points.
    pub fn input(&self, id: u16) -> Option<Vec<u8>> {
        let a = self.attrs()[self.index(id)?];
        let len = usize::from(a.len);
        if len <= 8 {
            return Some(a.data.to_le_bytes()[..len].to_vec());
        }
        let mut out = vec![0; len];
        // SAFETY: a pointer attribute of `len` readable bytes (from_raw).
        unsafe { std::ptr::copy_nonoverlapping(a.data as *const u8, out.as_mut_ptr(), len) };
        Some(out)
    }

    /// Input attribute `id` as a little-endian integer of up to 8 bytes.
    pub fn input_u64(&self, id: u16) -> Option<u64> {
        let bytes = self.input(id)?;
        let mut word = [0; 8];
        word[..bytes.len().min(8)].copy_from_slice(&bytes[..bytes.len().min(8)]);
        Some(u64::from_le_bytes(word))
    }

    /// The object handle (or file descriptor) attribute `id` names: its
    /// `data` itself, whatever its length.
    pub fn handle(&self, id: u16) -> Option<u64> {
        Some(self.attrs()[self.index(id)?].data)
    }

    /// The room of output attribute `id`.
    pub fn output_len(&self, id: u16) -> Option<usize> {
        Some(usize::from(self.attrs()[self.index(id)?].len))
    }

    /// Writes `bytes` to output attribute `id` and marks it valid, as
    /// `uverbs_copy_to` does: `ENOSPC` where it has less room, `EINVAL`
    /// where the caller gave no such attribute.
    pub fn write_output(&mut self, id: u16, bytes: &[u8]) -> Result<(), Errno> {
        let i = self.index(id).ok_or(libc::EINVAL)?;
        let mut a = self.attrs()[i];
        if usize::from(a.len) < bytes.len() {
            return Err(libc::ENOSPC);
        }
        // SAFETY: a pointer attribute of `len` writable bytes (from_raw),
        // `bytes.len() <= len`.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), a.data as *mut u8, bytes.len()) };
        a.flags |= UVERBS_ATTR_F_VALID_OUTPUT;
        // SAFETY: attribute `i` exists and is writable (from_raw).
        unsafe { self.attrs.add(i).write_unaligned(a) };
        Ok(())
    }

    /// Writes `value` into attribute `id` itself: a new object's handle or
    /// file descriptor.
    pub fn set_data(&mut self, id: u16, value: u64) -> Result<(), Errno> {
        let i = self.index(id).ok_or(libc::EINVAL)?;
        let mut a = self.attrs()[i];
        a.data = value;
        // SAFETY: attribute `i` exists and is writable (from_raw).
        unsafe { self.attrs.add(i).write_unaligned(a) };
        Ok(())
    }
}

/// Builds calls as a caller lays them out, for the unit tests.
#[cfg(test)]
pub(crate) mod testing {
    use super::*;

    /// A header and `attrs` in one buffer, as a caller lays them out.
    pub(crate) fn frame(object: u16, method: u16, attrs: &[ib_uverbs_attr]) -> Vec<u64> {
        let hdr = ib_uverbs_ioctl_hdr {
            length: (24 + 16 * attrs.len()) as u16,
            object_id: object,
            method_id: method,
            num_attrs: attrs.len() as u16,
            driver_id: 1,
            ..Default::default()
        };
        let mut words = vec![0u64; 3 + 2 * attrs.len()];
        let bytes: &mut [u8] = zerocopy::IntoBytes::as_mut_bytes(&mut words[..]);
        bytes[..24].copy_from_slice(zerocopy::IntoBytes::as_bytes(&hdr));
        for (i, a) in attrs.iter().enumerate() {
            bytes[24 + 16 * i..40 + 16 * i].copy_from_slice(zerocopy::IntoBytes::as_bytes(a));
        }
        words
    }

    /// An input attribute of at most 8 bytes, inline.
    pub(crate) fn inline(attr_id: u16, len: u16, data: u64) -> ib_uverbs_attr {
        ib_uverbs_attr {
            attr_id,
            len,
            data,
            ..Default::default()
        }
    }

    /// An attribute pointing at `buf`.
    pub(crate) fn pointing(attr_id: u16, buf: &mut [u8]) -> ib_uverbs_attr {
        ib_uverbs_attr {
            attr_id,
            len: buf.len() as u16,
            data: buf.as_mut_ptr() as u64,
            ..Default::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::testing::frame;
    use super::*;

    #[test]
    fn inputs_inline_and_pointed_at_and_outputs_marked_valid() {
        let long = [7u8; 12];
        let mut out = [0u8; 4];
        let attrs = [
            ib_uverbs_attr {
                attr_id: 1,
                len: 4,
                data: 0x1122_3344,
                ..Default::default()
            },
            ib_uverbs_attr {
                attr_id: 2,
                len: 12,
                data: long.as_ptr() as u64,
                ..Default::default()
            },
            ib_uverbs_attr {
                attr_id: 3,
                len: 4,
                data: out.as_mut_ptr() as u64,
                ..Default::default()
            },
        ];
        let mut words = frame(3, 0, &attrs);
        // SAFETY: the frame and the buffers it points at live through the test.
        let mut call = unsafe { Call::from_raw(words.as_mut_ptr().cast()) };
        assert_eq!((call.object(), call.method(), call.driver_id()), (3, 0, 1));
        assert_eq!(call.input_u64(1), Some(0x1122_3344));
        assert_eq!(call.input(2).unwrap(), long);
        assert_eq!(call.write_output(3, &[1, 2, 3, 4, 5]), Err(libc::ENOSPC));
        call.write_output(3, &[9, 8, 7, 6]).unwrap();
        assert_eq!(out, [9, 8, 7, 6]);
        assert_eq!(call.attrs()[2].flags & UVERBS_ATTR_F_VALID_OUTPUT, 2);
        call.set_data(1, 42).unwrap();
        assert_eq!(call.input_u64(1), Some(42));
        assert_eq!(call.write_output(9, &[]), Err(libc::EINVAL));
    }
}
