//! libFuzzer entry for the `smaps` target; the checks live in
//! `uverbs_fuzz::smaps` (also replayed on stable by `tests/replay.rs`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| uverbs_fuzz::smaps::run(data));
