//! A scatter/gather element: one local buffer of a work request.
//!
//! [`Sge`] is laid out exactly as the SGE both drivers' rings hold (rxe's
//! `rxe_sge`, siw's `siw_sge`: address, length, key; 16 bytes), which the
//! assertions below check at compile time, so a provider copies a request's
//! whole SGE list into a slot with one `memcpy` of its bytes.

use std::mem::{align_of, offset_of, size_of};

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

use uverbs_uapi::{rxe_sge, siw_sge};

/// One scatter/gather element: a local buffer in a registered region.
#[doc(alias = "ibv_sge")]
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct Sge {
    /// Virtual address of the buffer.
    pub addr: u64,
    /// Length in bytes.
    pub length: u32,
    /// Local key of the memory region holding the buffer.
    pub lkey: u32,
}

impl Sge {
    /// The total length of `sges`, `None` past a `u32` (which every
    /// provider refuses as `TooLong`, on its general path). For the
    /// providers' direct writers: an early-exit sum, as a plain one was
    /// unrolled, its set-up costing more than two SGEs' adds.
    #[inline(always)]
    pub(crate) fn total_length(sges: &[Sge]) -> Option<u32> {
        sges.iter()
            .try_fold(0u32, |total, sge| total.checked_add(sge.length))
    }
}

// rxe's layout.
const _: () = assert!(size_of::<Sge>() == size_of::<rxe_sge>());
const _: () = assert!(align_of::<Sge>() == align_of::<rxe_sge>());
const _: () = assert!(offset_of!(Sge, addr) == offset_of!(rxe_sge, addr));
const _: () = assert!(offset_of!(Sge, length) == offset_of!(rxe_sge, length));
const _: () = assert!(offset_of!(Sge, lkey) == offset_of!(rxe_sge, lkey));
// siw's layout (its address field is `laddr`).
const _: () = assert!(size_of::<Sge>() == size_of::<siw_sge>());
const _: () = assert!(align_of::<Sge>() == align_of::<siw_sge>());
const _: () = assert!(offset_of!(Sge, addr) == offset_of!(siw_sge, laddr));
const _: () = assert!(offset_of!(Sge, length) == offset_of!(siw_sge, length));
const _: () = assert!(offset_of!(Sge, lkey) == offset_of!(siw_sge, lkey));

#[cfg(test)]
mod tests {
    use super::*;

    /// An SGE's bytes are the driver's SGE's bytes, field for field.
    #[test]
    fn an_sge_is_both_drivers_sge_byte_for_byte() {
        let sge = Sge {
            addr: 0x0102_0304_0506_0708,
            length: 0x1112_1314,
            lkey: 0x2122_2324,
        };
        let rxe = rxe_sge {
            addr: sge.addr,
            length: sge.length,
            lkey: sge.lkey,
        };
        let siw = siw_sge {
            laddr: sge.addr,
            length: sge.length,
            lkey: sge.lkey,
        };
        assert_eq!(sge.as_bytes(), rxe.as_bytes());
        assert_eq!(sge.as_bytes(), siw.as_bytes());
        assert_eq!(Sge::read_from_bytes(rxe.as_bytes()).unwrap(), sge);
    }
}
