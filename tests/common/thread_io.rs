//! This thread's read and write system call counts, from
//! `/proc/thread-self/io`: the device tests' and `tools/perf.rs`'s
//! (through `#[path]`) proof that a data-path call made none.

/// This thread's read and write system calls so far (`syscr`, `syscw`),
/// if the kernel counts them (`CONFIG_TASK_IO_ACCOUNTING`).
pub fn read_write_calls() -> Option<(u64, u64)> {
    let io = std::fs::read_to_string("/proc/thread-self/io").ok()?;
    let field = |name: &str| {
        io.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().parse::<u64>().ok())
    };
    Some((field("syscr:")?, field("syscw:")?))
}
