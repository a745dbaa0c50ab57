//! smaps: `parse_kernel_page_size` / `mapping_header` of
//! `src/fork/ranges.rs` on arbitrary text and addresses.
//!
//! Input: the first byte picks the mode. Even: an address (8 bytes) and
//! arbitrary text (lossy UTF-8). Odd: decoded with `arbitrary` into a list
//! of mappings as `/proc/self/smaps` prints them (header, field lines, a
//! `KernelPageSize:` line that may be missing, odd or malformed) and an
//! address inside one of them or anywhere.
//!
//! Properties:
//! * nothing panics;
//! * a returned page size is a power of two and a whole number of KiB, and
//!   a header line of the text contains the address;
//! * every header `mapping_header` accepts re-formats (`{lo:x}-{hi:x}`)
//!   to the same range;
//! * on generated smaps, the answer is the documented one: the
//!   `KernelPageSize` of the first mapping containing the address, `None`
//!   when that mapping has none, when it is malformed or not a power of
//!   two, or when no mapping contains the address.

use arbitrary::{Arbitrary, Unstructured};
use uverbs::__fuzz::smaps::{mapping_header, parse_kernel_page_size};

/// Runs the target on one input.
pub fn run(data: &[u8]) {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    if mode % 2 == 0 {
        let mut addr = [0u8; 8];
        let n = rest.len().min(8);
        addr[..n].copy_from_slice(&rest[..n]);
        let text = String::from_utf8_lossy(&rest[n..]);
        check_text(&text, u64::from_ne_bytes(addr) as usize);
    } else {
        let mut u = Unstructured::new(rest);
        let Ok(addr) = Addr::arbitrary(&mut u) else {
            return;
        };
        let smaps = Smaps {
            addr,
            mappings: crate::many(&mut u, 8),
        };
        let (text, addr, expected) = smaps.render();
        let got = check_text(&text, addr);
        assert_eq!(got, expected, "addr {addr:#x} in\n{text}");
    }
}

/// The checks that hold for any text; returns the parser's answer.
fn check_text(text: &str, addr: usize) -> Option<usize> {
    let got = parse_kernel_page_size(text, addr);
    let mut contained = false;
    for line in text.lines() {
        if let Some((lo, hi)) = mapping_header(line) {
            assert_eq!(
                mapping_header(&format!("{lo:x}-{hi:x}")),
                Some((lo, hi)),
                "{line:?}"
            );
            contained |= lo <= addr && addr < hi;
        }
    }
    if let Some(size) = got {
        assert!(size.is_power_of_two(), "page size {size} from {text:?}");
        assert_eq!(size % 1024, 0, "page size {size} is not whole KiB");
        assert!(contained, "a page size for {addr:#x}, in no mapping");
    }
    got
}

#[derive(Debug)]
struct Smaps {
    mappings: Vec<Mapping>,
    addr: Addr,
}

#[derive(Arbitrary, Debug)]
struct Mapping {
    /// Start page (4 KiB) and length in pages; may be empty or reversed.
    start_page: u32,
    pages: i16,
    name: Option<String>,
    before: Vec<Field>,
    page_size: PageSize,
    after: Vec<Field>,
}

#[derive(Arbitrary, Debug)]
enum Addr {
    Inside { mapping: u8, offset: u32 },
    Anywhere(usize),
}

#[derive(Arbitrary, Debug)]
enum PageSize {
    Missing,
    /// `1 << (n % 32)` kB: a power of two, mostly.
    PowerOfTwo(u8),
    Kb(u32),
    /// The value in other spacing (`KernelPageSize:4kB`, tabs).
    OddSpacing(u32),
    Malformed(Malformed),
}

#[derive(Arbitrary, Debug, Clone, Copy)]
enum Malformed {
    NoUnit,
    OtherUnit,
    Negative,
    NotANumber,
    Empty,
    Hex,
}

/// Lines that are not mapping headers.
#[derive(Arbitrary, Debug, Clone, Copy)]
enum Field {
    Size(u32),
    Rss(u32),
    MmuPageSize(u32),
    VmFlags,
    ThpEligible(bool),
}

impl Field {
    fn render(self) -> String {
        match self {
            Field::Size(kb) => format!("Size:           {kb:>8} kB"),
            Field::Rss(kb) => format!("Rss:            {kb:>8} kB"),
            Field::MmuPageSize(kb) => format!("MMUPageSize:    {kb:>8} kB"),
            Field::VmFlags => "VmFlags: rd wr mr mw me ac sd".to_owned(),
            Field::ThpEligible(b) => format!("THPeligible:    {}", u8::from(b)),
        }
    }
}

impl Malformed {
    fn render(self) -> &'static str {
        match self {
            Malformed::NoUnit => "4",
            Malformed::OtherUnit => "4 MB",
            Malformed::Negative => "-4 kB",
            Malformed::NotANumber => "x kB",
            Malformed::Empty => "",
            Malformed::Hex => "0x4 kB",
        }
    }
}

const PAGE: usize = 4096;

impl Smaps {
    /// The text, the address, and the answer the parser must give.
    fn render(&self) -> (String, usize, Option<usize>) {
        let range = |m: &Mapping| {
            let lo = m.start_page as usize * PAGE;
            let hi = (m.start_page as usize)
                .wrapping_add(m.pages as isize as usize)
                .wrapping_mul(PAGE);
            (lo, hi)
        };
        let addr = match self.addr {
            Addr::Inside { mapping, offset } if !self.mappings.is_empty() => {
                let m = &self.mappings[usize::from(mapping) % self.mappings.len()];
                let (lo, hi) = range(m);
                match hi.checked_sub(lo) {
                    Some(len) if len > 0 => lo + offset as usize % len,
                    _ => lo,
                }
            }
            Addr::Inside { offset, .. } => offset as usize,
            Addr::Anywhere(a) => a,
        };
        let mut text = String::new();
        let mut expected = None;
        let mut decided = false;
        for m in &self.mappings {
            let (lo, hi) = range(m);
            text.push_str(&format!(
                "{lo:08x}-{hi:08x} rw-p 00000000 00:00 0          {}\n",
                m.name.as_deref().unwrap_or("").replace(['\n', '\r'], " ")
            ));
            for f in &m.before {
                text.push_str(&f.render());
                text.push('\n');
            }
            // What the parser must answer for a `kb` line: its size in bytes
            // when that is a power of two, else nothing.
            let bytes_if_page_size = |kb: u64| {
                (kb as usize)
                    .checked_mul(1024)
                    .filter(|s| s.is_power_of_two())
            };
            let value = match m.page_size {
                PageSize::Missing => None,
                PageSize::PowerOfTwo(n) => {
                    let kb = 1u64 << (n % 32);
                    text.push_str(&format!("KernelPageSize:   {kb:>8} kB\n"));
                    Some(bytes_if_page_size(kb))
                }
                PageSize::Kb(kb) => {
                    text.push_str(&format!("KernelPageSize:   {kb:>8} kB\n"));
                    Some(bytes_if_page_size(u64::from(kb)))
                }
                PageSize::OddSpacing(kb) => {
                    text.push_str(&format!("KernelPageSize:\t{kb}kB\t\n"));
                    Some(bytes_if_page_size(u64::from(kb)))
                }
                PageSize::Malformed(bad) => {
                    text.push_str(&format!("KernelPageSize: {}\n", bad.render()));
                    Some(None)
                }
            };
            for f in &m.after {
                text.push_str(&f.render());
                text.push('\n');
            }
            if !decided && lo <= addr && addr < hi {
                decided = true;
                expected = value.flatten();
            }
        }
        (text, addr, expected)
    }
}
