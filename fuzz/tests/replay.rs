//! The fuzz targets on stable: each one over its checked-in corpus
//! (`corpus/<target>/*`), then over pseudo-random inputs from a fixed-seed
//! generator, so the same inputs run on every machine.
//!
//! `FUZZ_REPLAY_CASES` overrides the number of random inputs per target.

use std::path::Path;

/// xorshift64*: deterministic, no dependencies.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Bytes of a random length up to `max`, biased to short inputs.
    fn input(&mut self, max: usize) -> Vec<u8> {
        let len = match self.next() % 4 {
            0 => self.next() as usize % 16,
            1 | 2 => self.next() as usize % 128,
            _ => self.next() as usize % (max + 1),
        };
        (0..len).map(|_| self.next() as u8).collect()
    }
}

fn cases(default: usize) -> usize {
    std::env::var("FUZZ_REPLAY_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Runs `target` over `corpus/<name>` and `n` random inputs; returns how
/// many corpus files there were.
fn replay(name: &str, target: fn(&[u8]), seed: u64, n: usize, max_len: usize) -> usize {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("corpus")
        .join(name);
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    for path in &files {
        let data = std::fs::read(path).unwrap();
        let result = std::panic::catch_unwind(|| target(&data));
        assert!(
            result.is_ok(),
            "{name}: corpus input {} failed",
            path.display()
        );
    }
    let mut rng = Rng(seed);
    for i in 0..n {
        let data = rng.input(max_len);
        let result = std::panic::catch_unwind(|| target(&data));
        assert!(result.is_ok(), "{name}: random input #{i} failed: {data:?}");
    }
    files.len()
}

#[test]
fn netlink() {
    let seeds = replay("netlink", uverbs_fuzz::netlink::run, 1, cases(5000), 512);
    assert!(seeds > 0, "no netlink corpus");
}

#[test]
fn sysfs() {
    // Each input writes a small directory tree: fewer inputs.
    let seeds = replay("sysfs", uverbs_fuzz::sysfs::run, 2, cases(5000) / 5, 512);
    assert!(seeds > 0, "no sysfs corpus");
}

#[test]
fn smaps() {
    let seeds = replay("smaps", uverbs_fuzz::smaps::run, 3, cases(5000), 1024);
    assert!(seeds > 0, "no smaps corpus");
}

#[test]
fn kernel_responses() {
    let seeds = replay(
        "kernel_responses",
        uverbs_fuzz::kernel_responses::run,
        4,
        cases(5000),
        1024,
    );
    assert!(seeds > 0, "no kernel_responses corpus");
}

#[test]
fn fork_tracker() {
    let seeds = replay(
        "fork_tracker",
        uverbs_fuzz::fork_tracker::run,
        5,
        cases(5000),
        1024,
    );
    assert!(seeds > 0, "no fork_tracker corpus");
}
