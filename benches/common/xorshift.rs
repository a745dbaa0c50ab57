//! The small deterministic generator (xorshift64) that picks the places of
//! the fork-tracker benches (`benches/fork_ranges.rs`,
//! `oracle/benches/fork_tracker.rs`), so that both draw the same ranges as
//! `src/fork/ir_probe.rs`, which keeps its own copy inside the library.

/// xorshift64, seeded by its field.
pub struct Rng(pub u64);

impl Rng {
    /// The next number below `n`.
    pub fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
}
