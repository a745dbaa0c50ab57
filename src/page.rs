//! The size of this process's base pages.

/// The base page size, from the C library (`sysconf(_SC_PAGESIZE)`).
///
/// Not `rustix::param::page_size()`: rustix reads the auxiliary vector
/// itself, with `prctl(PR_GET_AUXV)` on Linux 6.4 and later, and under
/// valgrind that call returns the host's vector, whose vDSO address rustix
/// then reads though valgrind's guest has nothing mapped there (rustix issue
/// #1559): memcheck reports an invalid read, and some builds (one codegen
/// unit, as with LTO) die of SIGSEGV at the first call. The C library
/// answers from the vector the process was started with, which valgrind
/// rewrites for its guest. `tools/memcheck.sh` checks this; the fork tracker's
/// `real_smaps_reports_base_pages_for_heap_memory` checks it against the
/// kernel's `KernelPageSize`.
pub(crate) fn page_size() -> usize {
    // SAFETY: `sysconf` takes a constant and touches no memory of ours.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    match usize::try_from(size) {
        Ok(size) if size.is_power_of_two() => size,
        // Linux always has a page size; this is not input that can be bad.
        _ => panic!("sysconf(_SC_PAGESIZE) answered {size}"),
    }
}
