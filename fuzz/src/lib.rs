//! The fuzz targets of uverbs, as plain functions.
//!
//! Each module has one `run(data: &[u8])` that decodes the input, drives
//! one part of the library and panics when a property fails. The libFuzzer
//! binaries in `fuzz_targets/` call it on nightly; `tests/replay.rs` calls
//! it on stable over the checked-in corpus and fixed-seed random inputs.

pub mod fork_tracker;
pub mod kernel_responses;
pub mod netlink;
pub mod smaps;
pub mod sysfs;

use arbitrary::{Arbitrary, Unstructured};

/// Decodes `T`s until the input runs out, at most `max` of them. (The
/// collections of `arbitrary` read a "go on" bit before each element, so
/// random bytes make lists of about one element.)
pub(crate) fn many<'a, T: Arbitrary<'a>>(u: &mut Unstructured<'a>, max: usize) -> Vec<T> {
    let mut out = Vec::new();
    while out.len() < max && !u.is_empty() {
        match T::arbitrary(u) {
            Ok(t) => out.push(t),
            Err(_) => break,
        }
    }
    out
}
