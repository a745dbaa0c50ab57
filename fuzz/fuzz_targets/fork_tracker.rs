//! libFuzzer entry for the `fork_tracker` target; the checks live in
//! `uverbs_fuzz::fork_tracker` (also replayed on stable by `tests/replay.rs`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| uverbs_fuzz::fork_tracker::run(data));
