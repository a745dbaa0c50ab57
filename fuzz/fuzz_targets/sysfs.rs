//! libFuzzer entry for the `sysfs` target; the checks live in
//! `uverbs_fuzz::sysfs` (also replayed on stable by `tests/replay.rs`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| uverbs_fuzz::sysfs::run(data));
