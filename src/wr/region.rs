//! [`RemoteRegion`]: what a peer must know of a registered region to READ
//! or WRITE it, and a fixed byte form to send it in (a connection's
//! private data, a TCP exchange).

use super::Remote;

/// A registered region as a peer addresses it: its first byte's address,
/// its remote key and its length. [`MemoryRegion::region`](crate::MemoryRegion::region)
/// makes one; [`to_bytes`](Self::to_bytes) and
/// [`from_bytes`](Self::from_bytes) carry it to the peer, whose requests
/// then name [`remote`](Self::remote) or [`at`](Self::at).
///
/// ```
/// use uverbs::wr::RemoteRegion;
/// let region = RemoteRegion { addr: 0x7f00_0000_1000, rkey: 0x1234, len: 4096 };
/// // The IB CM delivers the whole zero-padded private-data area: the
/// // length travels inside, so padding does not matter.
/// let mut private_data = [0u8; 56];
/// private_data[..RemoteRegion::BYTES].copy_from_slice(&region.to_bytes());
/// assert_eq!(RemoteRegion::from_bytes(&private_data)?, region);
/// # Ok::<(), uverbs::wr::ShortRegionBytes>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RemoteRegion {
    /// The address of the region's first byte, as the peer names it.
    pub addr: u64,
    /// The remote key.
    pub rkey: u32,
    /// The region's length in bytes.
    pub len: u64,
}

/// [`RemoteRegion::from_bytes`] was given fewer than
/// [`RemoteRegion::BYTES`] bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("a remote region takes {} bytes, got {got}", RemoteRegion::BYTES)]
pub struct ShortRegionBytes {
    /// How many bytes there were.
    pub got: usize,
}

impl RemoteRegion {
    /// The length of the byte form: the address (8 bytes), the length (8)
    /// and the rkey (4), each in network byte order (big-endian), so a C
    /// peer reads them with `be64toh` and `be32toh`.
    pub const BYTES: usize = 20;

    /// The byte form (see [`BYTES`](Self::BYTES)).
    pub fn to_bytes(&self) -> [u8; Self::BYTES] {
        let mut out = [0u8; Self::BYTES];
        out[..8].copy_from_slice(&self.addr.to_be_bytes());
        out[8..16].copy_from_slice(&self.len.to_be_bytes());
        out[16..].copy_from_slice(&self.rkey.to_be_bytes());
        out
    }

    /// Reads the byte form from the first [`BYTES`](Self::BYTES) bytes of
    /// `bytes`; what follows is ignored (a connection's private data
    /// arrives padded with zeros to the transport's size).
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, ShortRegionBytes> {
        let fields = || {
            let (addr, rest) = bytes.split_first_chunk::<8>()?;
            let (len, rest) = rest.split_first_chunk::<8>()?;
            Some((addr, len, rest.first_chunk::<4>()?))
        };
        let (addr, len, rkey) = fields().ok_or(ShortRegionBytes { got: bytes.len() })?;
        Ok(RemoteRegion {
            addr: u64::from_be_bytes(*addr),
            len: u64::from_be_bytes(*len),
            rkey: u32::from_be_bytes(*rkey),
        })
    }

    /// The region's first byte as the remote side of a request.
    pub fn remote(&self) -> Remote {
        Remote {
            addr: self.addr,
            rkey: self.rkey,
        }
    }

    /// The byte at `offset` as the remote side of a request, or `None`
    /// past the region's end (an offset equal to the length is the end,
    /// where only an empty request fits).
    pub fn at(&self, offset: u64) -> Option<Remote> {
        (offset <= self.len).then(|| Remote {
            addr: self.addr.wrapping_add(offset),
            rkey: self.rkey,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_byte_form_is_big_endian_and_round_trips() {
        let region = RemoteRegion {
            addr: 0x0102_0304_0506_0708,
            rkey: 0x1122_3344,
            len: 0x0000_0001_0000_0000,
        };
        let bytes = region.to_bytes();
        assert_eq!(bytes[..8], [1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(bytes[8..16], [0, 0, 0, 1, 0, 0, 0, 0]);
        assert_eq!(bytes[16..], [0x11, 0x22, 0x33, 0x44]);
        let mut padded = bytes.to_vec();
        padded.resize(196, 0);
        assert_eq!(RemoteRegion::from_bytes(&padded), Ok(region));
        assert_eq!(
            RemoteRegion::from_bytes(&bytes[..19]),
            Err(ShortRegionBytes { got: 19 })
        );
        assert_eq!(
            region.at(region.len).map(|r| r.addr),
            Some(region.addr + region.len)
        );
        assert_eq!(region.at(region.len + 1), None);
        assert_eq!(region.remote(), region.at(0).unwrap());
    }
}
