//! What one side of an RC connection tells the other, without a connection
//! manager: its GID, QP number and first PSN (to connect the QPs) and one
//! memory region's address and rkey (for the peer's RDMA WRITEs and READs).
//!
//! rdma-core's `rc_pingpong` swaps `LID:QPN:PSN:GID` over TCP; an
//! [`Endpoint`] adds the MR and has a fixed text line and a fixed 36-byte
//! binary form, so any byte channel (a pipe, a socket, a file) carries it.

use std::fmt;
use std::str::FromStr;

use crate::command::QpAttr;
use crate::error::Error;
use crate::gid::Gid;
use crate::mr::MemoryRegion;
use crate::qp::QueuePair;
use crate::wr::Remote;
use uverbs_uapi as sys;

/// One side of a connection: where its QP is and which memory the peer may
/// address.
///
/// Text form ([`Display`](fmt::Display) / [`FromStr`]): one line of five
/// lower-case hex fields of fixed width, separated by `:`:
/// `QPN:PSN:RKEY:ADDR:GID` with 8, 8, 8, 16 and 32 digits
/// ([`TEXT_LEN`](Self::TEXT_LEN) characters, no newline). Parsing accepts
/// upper-case digits and surrounding whitespace (a trailing `\n`), and
/// nothing else: every other input is a typed [`EndpointParseError`].
/// Binary form ([`to_bytes`](Self::to_bytes)): the same fields in the same
/// order, big-endian, [`BYTES`](Self::BYTES) bytes.
///
/// The QPN and PSN travel as 32-bit values; the wire uses 24 bits of each,
/// and [`QueuePair::modify`] refuses a larger one with a typed error.
///
/// ```
/// use uverbs::qp::Endpoint;
///
/// let ep = Endpoint {
///     gid: "fe80:0000:0000:0000:0211:22ff:fe33:4455".parse()?,
///     qpn: 0x11,
///     psn: 0x2a,
///     addr: 0x7f12_3456_7000,
///     rkey: 0x1234,
/// };
/// let line = ep.to_string();
/// assert_eq!(
///     line,
///     "00000011:0000002a:00001234:00007f1234567000:fe80000000000000021122fffe334455"
/// );
/// assert_eq!(line.parse::<Endpoint>()?, ep);
/// assert_eq!(Endpoint::from_bytes(&ep.to_bytes()), ep);
/// assert!("11:2a:1234:7f1234567000:fe80".parse::<Endpoint>().is_err());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Endpoint {
    /// The port GID the peer sends to (the destination of its path).
    pub gid: Gid,
    /// The QP number the peer connects to (`dest_qpn`).
    pub qpn: u32,
    /// The first PSN this side sends (the peer's `rq_psn`; this side's
    /// `sq_psn`).
    pub psn: u32,
    /// The first byte of the memory the peer may address.
    pub addr: u64,
    /// The rkey of that memory.
    pub rkey: u32,
}

/// The names and hex widths of the text form's fields, in order.
const FIELDS: [(&str, usize); 5] = [
    ("qpn", 8),
    ("psn", 8),
    ("rkey", 8),
    ("addr", 16),
    ("gid", 32),
];

impl Endpoint {
    /// Length of the binary form: 4 + 4 + 4 + 8 + 16 bytes.
    pub const BYTES: usize = 36;
    /// Length of the text form: 72 digits and 4 separators.
    pub const TEXT_LEN: usize = 76;

    /// This side of a connection: `qp`'s number, the GID at `gid_index` of
    /// `port` in `qp`'s context (one `query_gid`), all of `mr` (its first
    /// byte and rkey), and PSN 0 (set another with struct update syntax:
    /// `Endpoint { psn, ..ep }`).
    ///
    /// `mr` should be in `qp`'s protection domain: the device checks a
    /// peer's rkey against the PD of the QP it arrives on.
    pub fn local(
        qp: &QueuePair,
        port: u8,
        gid_index: u32,
        mr: &MemoryRegion,
    ) -> Result<Endpoint, Error> {
        Ok(Endpoint::of(
            qp,
            qp.context().query_gid(port, gid_index)?,
            mr,
        ))
    }

    /// [`local`](Self::local) with a GID already known (e.g. from
    /// [`Context::query_gid`](crate::Context::query_gid)); no system call.
    pub fn of(qp: &QueuePair, gid: Gid, mr: &MemoryRegion) -> Endpoint {
        Endpoint {
            gid,
            qpn: qp.qp_num(),
            psn: 0,
            addr: mr.addr(),
            rkey: mr.rkey(),
        }
    }

    /// Where the peer's RDMA operations go: this endpoint's address and rkey.
    pub fn remote(&self) -> Remote {
        Remote {
            addr: self.addr,
            rkey: self.rkey,
        }
    }

    /// The RoCE path to this endpoint for the INIT→RTR step
    /// ([`QpAttr::av`]): its GID as destination, sent from the local GID at
    /// `sgid_index` of `port`, hop limit 1 (one subnet), as rc_pingpong.
    pub fn roce_dest(&self, sgid_index: u8, port: u8) -> sys::ib_uverbs_qp_dest {
        QpAttr::roce_dest(self.gid, sgid_index, 1, port)
    }

    /// The binary form: QPN, PSN, rkey, address, GID, big-endian.
    pub fn to_bytes(&self) -> [u8; Self::BYTES] {
        let mut out = [0u8; Self::BYTES];
        out[0..4].copy_from_slice(&self.qpn.to_be_bytes());
        out[4..8].copy_from_slice(&self.psn.to_be_bytes());
        out[8..12].copy_from_slice(&self.rkey.to_be_bytes());
        out[12..20].copy_from_slice(&self.addr.to_be_bytes());
        out[20..36].copy_from_slice(&self.gid.raw());
        out
    }

    /// Reads the binary form of [`to_bytes`](Self::to_bytes). Every 36
    /// bytes are some endpoint; a slice of another length is refused by
    /// its `try_into()` to `&[u8; 36]`.
    pub fn from_bytes(bytes: &[u8; Self::BYTES]) -> Endpoint {
        let word = |at: usize| {
            u32::from_be_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]])
        };
        let mut addr = [0u8; 8];
        addr.copy_from_slice(&bytes[12..20]);
        let mut gid = [0u8; 16];
        gid.copy_from_slice(&bytes[20..36]);
        Endpoint {
            qpn: word(0),
            psn: word(4),
            rkey: word(8),
            addr: u64::from_be_bytes(addr),
            gid: Gid::from_raw(gid),
        }
    }
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:08x}:{:08x}:{:08x}:{:016x}:",
            self.qpn, self.psn, self.rkey, self.addr
        )?;
        for byte in self.gid.raw() {
            write!(f, "{byte:02x}")?;
        }
        Ok(())
    }
}

/// A text that is not an [`Endpoint`] line.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EndpointParseError {
    /// Not five `:`-separated fields.
    #[error("endpoint text: {found} ':'-separated fields, expected 5 (QPN:PSN:RKEY:ADDR:GID)")]
    FieldCount {
        /// How many fields the text has.
        found: usize,
    },
    /// A field of the wrong length.
    #[error("endpoint text: field {field} has {found} characters, expected {expected} hex digits")]
    Width {
        /// The field's name (`qpn`, `psn`, `rkey`, `addr` or `gid`).
        field: &'static str,
        /// Hex digits the field has in the text form.
        expected: usize,
        /// Characters (not bytes) it has.
        found: usize,
    },
    /// A field with a character that is not a hex digit.
    #[error("endpoint text: field {field} is not hexadecimal")]
    NotHex {
        /// The field's name.
        field: &'static str,
    },
}

impl FromStr for Endpoint {
    type Err = EndpointParseError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let fields: Vec<&str> = s.trim().split(':').collect();
        if fields.len() != FIELDS.len() {
            return Err(EndpointParseError::FieldCount {
                found: fields.len(),
            });
        }
        for (text, (field, width)) in fields.iter().zip(FIELDS) {
            // Checked before any slicing or radix parsing: only ASCII hex
            // digits remain, so byte offsets are character offsets and
            // `from_str_radix` sees no sign.
            if text.chars().count() != width {
                return Err(EndpointParseError::Width {
                    field,
                    expected: width,
                    found: text.chars().count(),
                });
            }
            if !text.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(EndpointParseError::NotHex { field });
            }
        }
        // Fixed widths of hex digits: none of these can fail.
        let word = |text: &str| u32::from_str_radix(text, 16).unwrap_or_default();
        let mut gid = [0u8; 16];
        for (i, byte) in gid.iter_mut().enumerate() {
            *byte = u8::from_str_radix(&fields[4][2 * i..2 * i + 2], 16).unwrap_or_default();
        }
        Ok(Endpoint {
            qpn: word(fields[0]),
            psn: word(fields[1]),
            rkey: word(fields[2]),
            addr: u64::from_str_radix(fields[3], 16).unwrap_or_default(),
            gid: Gid::from_raw(gid),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn sample() -> Endpoint {
        let mut gid = [0u8; 16];
        for (i, b) in gid.iter_mut().enumerate() {
            *b = 0xf0 | i as u8;
        }
        Endpoint {
            gid: Gid::from_raw(gid),
            qpn: 0x00ab_cdef,
            psn: 0x0012_3456,
            addr: 0x0000_7f00_dead_b000,
            rkey: 0x8765_4321,
        }
    }

    #[test]
    fn text_form_is_fixed() {
        let line = sample().to_string();
        assert_eq!(
            line,
            "00abcdef:00123456:87654321:00007f00deadb000:f0f1f2f3f4f5f6f7f8f9fafbfcfdfeff"
        );
        assert_eq!(line.len(), Endpoint::TEXT_LEN);
        assert_eq!(line.parse::<Endpoint>(), Ok(sample()));
        // A line read with its newline, or in upper case, is the same.
        assert_eq!(format!("  {line}\n").parse::<Endpoint>(), Ok(sample()));
        assert_eq!(line.to_uppercase().parse::<Endpoint>(), Ok(sample()));
        let zero = Endpoint::default().to_string();
        assert_eq!(zero.len(), Endpoint::TEXT_LEN);
        assert_eq!(zero.parse::<Endpoint>(), Ok(Endpoint::default()));
    }

    #[test]
    fn binary_form_is_fixed() {
        let bytes = sample().to_bytes();
        assert_eq!(
            &bytes[..12],
            &[0, 0xab, 0xcd, 0xef, 0, 0x12, 0x34, 0x56, 0x87, 0x65, 0x43, 0x21]
        );
        assert_eq!(&bytes[12..20], &[0, 0, 0x7f, 0, 0xde, 0xad, 0xb0, 0]);
        assert_eq!(bytes[20], 0xf0);
        assert_eq!(bytes[35], 0xff);
        assert_eq!(Endpoint::from_bytes(&bytes), sample());
        let short: &[u8] = &bytes[..35];
        assert!(<&[u8; Endpoint::BYTES]>::try_from(short).is_err());
    }

    #[test]
    fn bad_text_is_a_typed_error() {
        use EndpointParseError::*;
        let good = sample().to_string();
        let cases: Vec<(String, EndpointParseError)> = vec![
            (String::new(), FieldCount { found: 1 }),
            ("   \n".into(), FieldCount { found: 1 }),
            (":::".into(), FieldCount { found: 4 }),
            (format!("{good}:"), FieldCount { found: 6 }),
            (format!("{good}:00"), FieldCount { found: 6 }),
            (good.replacen(':', "", 1), FieldCount { found: 4 }),
            // rc_pingpong's LID:QPN:PSN:GID has four fields too.
            ("0000:000011:000000:fe80000000000000021122fffe334455".into(), FieldCount { found: 4 }),
            (good.replacen("00abcdef", "abcdef", 1), Width { field: "qpn", expected: 8, found: 6 }),
            (good.replacen("00abcdef", "000abcdef", 1), Width { field: "qpn", expected: 8, found: 9 }),
            (good.replacen("00123456", "0x123456", 1), NotHex { field: "psn" }),
            (good.replacen("00123456", "+0123456", 1), NotHex { field: "psn" }),
            (good.replacen("00123456", "-0123456", 1), NotHex { field: "psn" }),
            (good.replacen("87654321", "8765 321", 1), NotHex { field: "rkey" }),
            (good.replacen("00007f00deadb000", "00007f00deadb00g", 1), NotHex { field: "addr" }),
            (good.replacen("00007f00deadb000", "7f00deadb000", 1), Width { field: "addr", expected: 16, found: 12 }),
            // A GID in its sysfs form has colons: too many fields.
            (
                "00abcdef:00123456:87654321:00007f00deadb000:fe80:0000:0000:0000:0211:22ff:fe33:4455".into(),
                FieldCount { found: 12 },
            ),
            (good[..good.len() - 1].into(), Width { field: "gid", expected: 32, found: 31 }),
            (format!("{good}0"), Width { field: "gid", expected: 32, found: 33 }),
            // Non-ASCII: counted in characters, never sliced mid-character.
            (good.replacen("f0f1", "f0é", 1), Width { field: "gid", expected: 32, found: 31 }),
            (good.replacen("f0f1", "f0éf", 1), NotHex { field: "gid" }),
            (good.replacen("00abcdef", "00abcdeé", 1), NotHex { field: "qpn" }),
            (good.replacen('0', "\u{0660}", 1), NotHex { field: "qpn" }),
            (good.replace(':', ";"), FieldCount { found: 1 }),
            (format!("{good}\n{good}"), FieldCount { found: 9 }),
        ];
        for (text, want) in cases {
            assert_eq!(text.parse::<Endpoint>(), Err(want.clone()), "{text:?}");
            assert!(!want.to_string().is_empty());
        }
    }

    proptest! {
        #[test]
        fn every_endpoint_round_trips(
            qpn in any::<u32>(), psn in any::<u32>(), rkey in any::<u32>(),
            addr in any::<u64>(), gid in any::<[u8; 16]>(),
        ) {
            let ep = Endpoint { gid: Gid::from_raw(gid), qpn, psn, addr, rkey };
            let text = ep.to_string();
            prop_assert_eq!(text.len(), Endpoint::TEXT_LEN);
            prop_assert_eq!(text.parse::<Endpoint>(), Ok(ep));
            prop_assert_eq!(Endpoint::from_bytes(&ep.to_bytes()), ep);
        }

        /// Arbitrary text never panics the parser; what it accepts prints
        /// back as the canonical form of the same value.
        #[test]
        fn any_text_parses_or_fails_typed(text in "\\PC{0,90}") {
            if let Ok(ep) = text.parse::<Endpoint>() {
                prop_assert_eq!(ep.to_string(), text.trim().to_lowercase());
            }
        }

        /// Near misses of a valid line: one character replaced.
        #[test]
        fn one_changed_character_is_caught_or_harmless(at in 0usize..Endpoint::TEXT_LEN, c in any::<char>()) {
            let good = sample().to_string();
            let mut chars: Vec<char> = good.chars().collect();
            chars[at] = c;
            let text: String = chars.into_iter().collect();
            match text.parse::<Endpoint>() {
                Ok(ep) => {
                    prop_assert!(c.is_ascii_hexdigit() || text == good);
                    prop_assert_eq!(ep.to_string(), text.to_lowercase());
                }
                Err(_) => prop_assert!(!c.is_ascii_hexdigit() || good.as_bytes()[at] == b':'),
            }
        }
    }
}
