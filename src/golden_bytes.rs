//! The byte builder the golden tests write their expected frames with:
//! little-endian fields (and network-order ports) appended by hand, field
//! by field, from the C layouts. Shared by the uverbs (`transport`) and
//! ucma (`cm`) golden tests.

/// Expected bytes, built field by field.
#[derive(Default)]
pub(crate) struct Bytes(pub(crate) Vec<u8>);

impl Bytes {
    pub(crate) fn u8(self, v: u8) -> Self {
        self.raw(&[v])
    }
    pub(crate) fn u16(self, v: u16) -> Self {
        self.raw(&v.to_le_bytes())
    }
    /// A big-endian (network order) `u16`, e.g. a port.
    pub(crate) fn be16(self, v: u16) -> Self {
        self.raw(&v.to_be_bytes())
    }
    pub(crate) fn u32(self, v: u32) -> Self {
        self.raw(&v.to_le_bytes())
    }
    pub(crate) fn u64(self, v: u64) -> Self {
        self.raw(&v.to_le_bytes())
    }
    pub(crate) fn raw(mut self, v: &[u8]) -> Self {
        self.0.extend_from_slice(v);
        self
    }
    pub(crate) fn zeros(mut self, n: usize) -> Self {
        self.0.resize(self.0.len() + n, 0);
        self
    }
}
