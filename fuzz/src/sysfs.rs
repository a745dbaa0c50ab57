//! sysfs entries: the strict parsers of `src/device.rs` on arbitrary text,
//! and the whole listing (`uverbs::device::device_listing_in`) over a scratch
//! directory made from the input.
//!
//! Input (decoded with `arbitrary`): the class directory's global
//! `abi_version` and a list of entries, each with a name (`uverbsN`,
//! `uverbs` + bytes, or any bytes) and optional `ibdev`, `abi_version` and
//! `dev` files whose contents are numbers, device numbers, words or raw
//! bytes, with zero, one or more trailing newlines.
//!
//! Properties:
//! * nothing panics;
//! * `parse_decimal(s)` accepts exactly the strings that are some `u32`'s
//!   `to_string()`, and gives that `u32`; `parse_dev(s)` accepts
//!   `"{major}:{minor}"` of any two `u32`s, and whatever it accepts formats
//!   back to `s` (a round trip);
//! * the listing is exactly what its documentation promises: a missing
//!   global `abi_version` lists nothing, a global ABI other than `6` fails,
//!   every entry named `uverbs…` is either a device or skipped (with an
//!   `Error::Sysfs`); a device's every field, formatted again, gives back
//!   its file's contents modulo one trailing newline; devices come in
//!   uverbs index order, skipped entries in name order.

use std::collections::BTreeSet;
use std::ffi::OsStr;
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use arbitrary::{Arbitrary, Unstructured};
use uverbs::__fuzz::sysfs::{parse_decimal, parse_dev};

/// Runs the target on one input.
pub fn run(data: &[u8]) {
    let mut u = Unstructured::new(data);
    let Ok(global_abi) = GlobalAbi::arbitrary(&mut u) else {
        return;
    };
    let entries: Vec<EntrySpec> = crate::many(&mut u, 16);
    let case = Listing {
        global_abi: global_abi.text(),
        entries: entries.iter().map(EntrySpec::entry).collect(),
    };
    let texts = std::iter::once(&case.global_abi).flatten().chain(
        case.entries
            .iter()
            .flat_map(|e| [&e.ibdev, &e.abi, &e.dev])
            .flatten(),
    );
    for text in texts {
        if let Ok(s) = std::str::from_utf8(&text.bytes()) {
            check_parsers(s);
            check_parsers(s.strip_suffix('\n').unwrap_or(s));
        }
    }
    check_listing(&case);
}

/// The concrete class directory to write.
#[derive(Debug)]
struct Listing {
    global_abi: Option<Text>,
    entries: Vec<Entry>,
}

/// The class directory's own `abi_version`: mostly the supported 6.
#[derive(Arbitrary, Debug)]
enum GlobalAbi {
    Six,
    SixNewline,
    Missing,
    Other(Text),
}

impl GlobalAbi {
    fn text(&self) -> Option<Text> {
        match self {
            GlobalAbi::Six => Some(Text::Decimal(6, Newlines::None)),
            GlobalAbi::SixNewline => Some(Text::Decimal(6, Newlines::One)),
            GlobalAbi::Missing => None,
            GlobalAbi::Other(t) => Some(t.clone()),
        }
    }
}

/// An entry as a real node would have it, one with a single defect, or
/// one made of anything.
#[derive(Arbitrary, Debug)]
enum EntrySpec {
    Good(Good),
    Good2(Good),
    Defect(Good, Defect),
    Free(Entry),
}

#[derive(Arbitrary, Debug)]
struct Good {
    index: u16,
    ibdev: IbName,
    abi: u8,
    major: u16,
    minor: u32,
    newlines: [bool; 3],
}

#[derive(Arbitrary, Debug)]
enum IbName {
    Rxe(u8),
    Siw(u8),
    Mlx(u8, u8),
    Any(String),
}

#[derive(Arbitrary, Debug, Clone)]
enum Defect {
    Name(Name),
    NoIbdev,
    NoAbi,
    NoDev,
    Ibdev(Text),
    Abi(Text),
    Dev(Text),
    /// A near miss in the `dev` file's major or minor.
    DevNearMiss(u32, NearMiss, bool),
}

impl EntrySpec {
    fn entry(&self) -> Entry {
        let (good, defect) = match self {
            EntrySpec::Free(e) => return e.clone(),
            EntrySpec::Good(g) | EntrySpec::Good2(g) => (g, None),
            EntrySpec::Defect(g, d) => (g, Some(d)),
        };
        let nl = |i: usize| {
            if good.newlines[i] {
                Newlines::One
            } else {
                Newlines::None
            }
        };
        let ibdev = match &good.ibdev {
            IbName::Rxe(n) => format!("rxe{n}"),
            IbName::Siw(n) => format!("siw{n}"),
            IbName::Mlx(a, b) => format!("mlx{a}_{b}"),
            IbName::Any(s) => s.clone(),
        };
        let mut e = Entry {
            name: Name::Canonical(good.index),
            ibdev: Some(Text::Word(ibdev, nl(0))),
            abi: Some(Text::Decimal(u32::from(good.abi), nl(1))),
            dev: Some(Text::Dev(u32::from(good.major), good.minor, nl(2))),
        };
        match defect.cloned() {
            None => {}
            Some(Defect::Name(n)) => e.name = n,
            Some(Defect::NoIbdev) => e.ibdev = None,
            Some(Defect::NoAbi) => e.abi = None,
            Some(Defect::NoDev) => e.dev = None,
            Some(Defect::Ibdev(t)) => e.ibdev = Some(t),
            Some(Defect::Abi(t)) => e.abi = Some(t),
            Some(Defect::Dev(t)) => e.dev = Some(t),
            Some(Defect::DevNearMiss(v, how, in_minor)) => {
                let near = Text::NearMiss(v, how, Newlines::None).bytes();
                let near = String::from_utf8(near).unwrap();
                let text = if in_minor {
                    format!("{}:{near}\n", good.major)
                } else {
                    format!("{near}:{}\n", good.minor)
                };
                e.dev = Some(Text::Word(text, Newlines::None));
            }
        }
        e
    }
}

#[derive(Arbitrary, Debug, Clone)]
struct Entry {
    name: Name,
    ibdev: Option<Text>,
    abi: Option<Text>,
    dev: Option<Text>,
}

#[derive(Arbitrary, Debug, Clone)]
enum Name {
    /// `uverbs{n}`.
    Canonical(u16),
    /// `uverbs` followed by these bytes.
    Prefixed(Vec<u8>),
    Raw(Vec<u8>),
}

#[derive(Arbitrary, Debug, Clone)]
enum Text {
    Decimal(u32, Newlines),
    Dev(u32, u32, Newlines),
    Word(String, Newlines),
    /// Almost a number: what a lenient parser would accept.
    NearMiss(u32, NearMiss, Newlines),
    Bytes(Vec<u8>),
}

#[derive(Arbitrary, Debug, Clone, Copy)]
enum NearMiss {
    LeadingZero,
    Plus,
    Minus,
    Space,
    Hex,
    Overflow,
    Underscore,
}

#[derive(Arbitrary, Debug, Clone, Copy)]
enum Newlines {
    None,
    One,
    Two,
    CrLf,
}

impl Newlines {
    fn as_str(self) -> &'static str {
        match self {
            Newlines::None => "",
            Newlines::One => "\n",
            Newlines::Two => "\n\n",
            Newlines::CrLf => "\r\n",
        }
    }
}

impl Text {
    fn bytes(&self) -> Vec<u8> {
        match self {
            Text::Decimal(v, nl) => format!("{v}{}", nl.as_str()).into_bytes(),
            Text::Dev(a, b, nl) => format!("{a}:{b}{}", nl.as_str()).into_bytes(),
            Text::Word(w, nl) => format!("{w}{}", nl.as_str()).into_bytes(),
            Text::NearMiss(v, how, nl) => {
                let text = match how {
                    NearMiss::LeadingZero => format!("0{v}"),
                    NearMiss::Plus => format!("+{v}"),
                    NearMiss::Minus => format!("-{v}"),
                    NearMiss::Space => format!(" {v}"),
                    NearMiss::Hex => format!("0x{v:x}"),
                    NearMiss::Overflow => format!("{}", u64::from(*v) + (1 << 32)),
                    NearMiss::Underscore => format!("{v}_0"),
                };
                format!("{text}{}", nl.as_str()).into_bytes()
            }
            Text::Bytes(b) => b.clone(),
        }
    }
}

impl Name {
    fn bytes(&self) -> Vec<u8> {
        match self {
            Name::Canonical(n) => format!("uverbs{n}").into_bytes(),
            Name::Prefixed(b) => [&b"uverbs"[..], b].concat(),
            Name::Raw(b) => b.clone(),
        }
    }
}

/// The spec of `parse_decimal`: exactly the `to_string()` of a `u32`.
fn canonical_u32(s: &str) -> Option<u32> {
    s.parse::<u32>().ok().filter(|v| v.to_string() == s)
}

/// The spec of `parse_dev`: two canonical decimals around one colon.
fn canonical_dev(s: &str) -> Option<(u32, u32)> {
    let (a, b) = s.split_once(':')?;
    Some((canonical_u32(a)?, canonical_u32(b)?))
}

/// `parse_decimal` and `parse_dev` meet their spec; `parse_dev`
/// round-trips.
fn check_parsers(s: &str) {
    assert_eq!(parse_decimal(s), canonical_u32(s), "parse_decimal({s:?})");
    assert_eq!(parse_dev(s), canonical_dev(s), "parse_dev({s:?})");
    if let Some((major, minor)) = parse_dev(s) {
        assert_eq!(format!("{major}:{minor}"), s, "parse_dev({s:?}) round trip");
    }
}

/// The file's text without one trailing newline, if it is UTF-8.
fn line(bytes: &[u8]) -> Option<&str> {
    let s = std::str::from_utf8(bytes).ok()?;
    Some(s.strip_suffix('\n').unwrap_or(s))
}

/// A directory for one run, removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new() -> Scratch {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let base = if Path::new("/dev/shm").is_dir() {
            PathBuf::from("/dev/shm")
        } else {
            std::env::temp_dir()
        };
        let dir = base.join(format!(
            "uverbs-fuzz-sysfs-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).expect("scratch directory");
        Scratch(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// What the listing must report for an entry named `uverbs…`: `Some((index,
/// ibdev, abi, dev))` for a usable device, `None` for a skipped one.
fn expected_device(name: &[u8], e: &Entry) -> Option<(u32, String, u32, (u32, u32))> {
    let index = canonical_u32(std::str::from_utf8(&name[b"uverbs".len()..]).ok()?)?;
    let ibdev = line(&e.ibdev.as_ref()?.bytes())?.to_owned();
    if ibdev.is_empty() || ibdev.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return None;
    }
    let abi = canonical_u32(line(&e.abi.as_ref()?.bytes())?)?;
    let dev = canonical_dev(line(&e.dev.as_ref()?.bytes())?)?;
    Some((index, ibdev, abi, dev))
}

fn check_listing(case: &Listing) {
    let scratch = Scratch::new();
    let root = &scratch.0;
    let dev_dir = Path::new("/dev/infiniband-fuzz");
    if let Some(abi) = &case.global_abi {
        fs::write(root.join("abi_version"), abi.bytes()).expect("write abi_version");
    }
    let mut names = BTreeSet::new();
    let mut devices = Vec::new();
    let mut skipped = Vec::new();
    for entry in &case.entries {
        let name = entry.name.bytes();
        let usable_name = !name.is_empty()
            && name.len() <= 255
            && !name.contains(&b'/')
            && !name.contains(&0)
            && name != b"."
            && name != b".."
            && name != b"abi_version";
        if !usable_name || !names.insert(name.clone()) {
            continue;
        }
        let dir = root.join(OsStr::from_bytes(&name));
        fs::create_dir(&dir).expect("create entry");
        for (file, text) in [
            ("ibdev", &entry.ibdev),
            ("abi_version", &entry.abi),
            ("dev", &entry.dev),
        ] {
            if let Some(text) = text {
                fs::write(dir.join(file), text.bytes()).expect("write entry file");
            }
        }
        if !name.starts_with(b"uverbs") {
            continue;
        }
        match expected_device(&name, entry) {
            Some(d) => devices.push((d, String::from_utf8(name).unwrap())),
            None => skipped.push(String::from_utf8_lossy(&name).into_owned()),
        }
    }
    devices.sort_by_key(|((index, ..), _)| *index);
    skipped.sort();

    let listing = uverbs::device::device_listing_in(root, dev_dir);
    let Some(abi) = &case.global_abi else {
        let listing = listing.expect("no abi_version: an empty listing");
        assert!(listing.devices.is_empty() && listing.skipped.is_empty());
        return;
    };
    let abi_bytes = abi.bytes();
    let global = line(&abi_bytes).and_then(canonical_u32);
    let listing = match (global, listing) {
        (Some(6), Ok(listing)) => listing,
        (Some(6), Err(e)) => panic!("ABI 6 refused: {e}"),
        (Some(found), Err(uverbs::Error::Abi { found: f, .. })) => {
            assert_eq!(found, f);
            return;
        }
        (None, Err(uverbs::Error::Sysfs { .. })) => return,
        (g, r) => panic!("global abi_version {abi_bytes:?} ({g:?}) gave {r:?}"),
    };

    let got: Vec<_> = listing
        .devices
        .iter()
        .map(|d| {
            (
                d.uverbs_name().to_owned(),
                d.name().to_owned(),
                d.driver_abi_version(),
                d.dev_number(),
                d.path().to_owned(),
            )
        })
        .collect();
    let want: Vec<_> = devices
        .iter()
        .map(|((_, ibdev, abi, dev), name)| {
            (name.clone(), ibdev.clone(), *abi, *dev, dev_dir.join(name))
        })
        .collect();
    assert_eq!(got, want, "devices");
    for (uverbs, ibdev, abi, dev, _) in &got {
        // Re-formatting gives back the name and the files (modulo one '\n').
        let index: u32 = uverbs["uverbs".len()..].parse().unwrap();
        assert_eq!(&format!("uverbs{index}"), uverbs);
        let entry = case
            .entries
            .iter()
            .find(|e| e.name.bytes() == uverbs.as_bytes())
            .unwrap();
        let file = |t: &Option<Text>| t.as_ref().unwrap().bytes();
        assert_eq!(line(&file(&entry.ibdev)), Some(ibdev.as_str()));
        assert_eq!(line(&file(&entry.abi)), Some(abi.to_string().as_str()));
        assert_eq!(
            line(&file(&entry.dev)),
            Some(format!("{}:{}", dev.0, dev.1).as_str())
        );
    }
    let got_skipped: Vec<_> = listing.skipped.iter().map(|s| s.entry.clone()).collect();
    assert_eq!(got_skipped, skipped, "skipped entries");
    for s in &listing.skipped {
        assert!(
            matches!(s.error, uverbs::Error::Sysfs { .. }),
            "{}: {}",
            s.entry,
            s.error
        );
    }
}
