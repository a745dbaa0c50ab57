//! libFuzzer entry for the `kernel_responses` target; the checks live in
//! `uverbs_fuzz::kernel_responses` (also replayed on stable by `tests/replay.rs`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| uverbs_fuzz::kernel_responses::run(data));
