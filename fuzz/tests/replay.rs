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

/// One test per target: the checked-in corpus, then `$cases` fixed-seed
/// inputs of at most `$max_len` bytes, seeded with `$seed`.
macro_rules! replay_test {
    ($target:ident, $seed:expr, $cases:expr, $max_len:expr) => {
        #[test]
        fn $target() {
            let name = stringify!($target);
            let seeds = replay(name, uverbs_fuzz::$target::run, $seed, $cases, $max_len);
            assert!(seeds > 0, "no {name} corpus");
        }
    };
}

replay_test!(netlink, 1, cases(5000), 512);
// Each sysfs input writes a small directory tree: fewer inputs.
replay_test!(sysfs, 2, cases(5000) / 5, 512);
replay_test!(smaps, 3, cases(5000), 1024);
replay_test!(kernel_responses, 4, cases(5000), 1024);
replay_test!(fork_tracker, 5, cases(5000), 1024);
