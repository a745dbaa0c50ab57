//! libFuzzer entry for the `netlink` target; the checks live in
//! `uverbs_fuzz::netlink` (also replayed on stable by `tests/replay.rs`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| uverbs_fuzz::netlink::run(data));
