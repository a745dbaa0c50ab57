//! The marker lines the guest prints on its serial console for the host to
//! read back, defined here once: [`crate::guest`] writes them into the
//! generated `/init` and `/run-all` scripts, [`crate::report`] and
//! [`crate::bench`] look for them with [`find`].
//!
//! ```text
//! @@UVERBS-BOOTED kernel=<release>                 /init started
//! @@UVERBS-READY                                   devices are up
//! @@UVERBS-RUN config=ioctl bin=vm_smoke           a binary starts
//! @@UVERBS-RESULT config=ioctl bin=vm_smoke rc=0   ... and its exit code
//! @@UVERBS-RETRY config=ioctl bin=vm_smoke rc=1    it failed and runs once more
//! @@UVERBS-SETUP-FAILED <what>                     the guest's set-up failed
//! @@UVERBS-DONE                                    all runs finished
//! ```
//!
//! The bench programs' results are lines of their own, `@@RESULT {json}`
//! (`crate::bench`'s `results` module reads them).

/// `/init` has started; followed by `kernel=<release>`.
pub const BOOTED: &str = "@@UVERBS-BOOTED";
/// The modules are loaded and the RDMA devices are up.
pub const READY: &str = "@@UVERBS-READY";
/// The guest's own set-up failed; followed by what failed.
pub const SETUP_FAILED: &str = "@@UVERBS-SETUP-FAILED";
/// A binary starts; followed by `config=<c> bin=<b>`.
pub const RUN: &str = "@@UVERBS-RUN";
/// A binary ended; followed by `config=<c> bin=<b> rc=<exit code>`.
pub const RESULT: &str = "@@UVERBS-RESULT";
/// A run that may be retried failed; it runs once more, and the
/// [`RESULT`] after it is the second attempt's. Followed by
/// `config=<c> bin=<b> rc=<first exit code>`.
pub const RETRY: &str = "@@UVERBS-RETRY";
/// Every planned run has finished.
pub const DONE: &str = "@@UVERBS-DONE";
/// Not ours: what a guest kernel prints when it panics (it then reboots,
/// which ends qemu: `panic=-1` and `-no-reboot`).
pub const KERNEL_PANIC: &str = "Kernel panic - not syncing";
/// The text after `marker` in a console line (leading spaces removed), if
/// the line carries that marker. The marker may follow other text (kernel
/// messages interleave with the guest's output) but must end at a space or
/// the line's end, so `@@UVERBS-RUN` does not match `@@UVERBS-RUNS`.
pub fn find<'a>(line: &'a str, marker: &str) -> Option<&'a str> {
    line.match_indices(marker).find_map(|(at, _)| {
        let rest = &line[at + marker.len()..];
        (rest.is_empty() || rest.starts_with([' ', '\t'])).then(|| rest.trim_start())
    })
}

/// The value of `key=` among the space-separated words of a marker
/// line's text (as [`find`] returns it), if the line has one.
pub fn field<'a>(words: &'a str, key: &str) -> Option<&'a str> {
    words
        .split_whitespace()
        .find_map(|w| w.strip_prefix(key)?.strip_prefix('='))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_markers_anywhere_but_whole() {
        assert_eq!(find("@@UVERBS-RUN a=1", RUN), Some("a=1"));
        assert_eq!(find("@@UVERBS-RUNS a=1", RUN), None);
        assert_eq!(find("@@UVERBS-RUNS a=1 @@UVERBS-RUN b=2", RUN), Some("b=2"));
        assert_eq!(find("[ 1.0] rxe: x @@UVERBS-DONE", DONE), Some(""));
        assert_eq!(find("@@UVERBS-RESULTS", RESULT), None);
        assert_eq!(find("nothing", READY), None);
        assert_eq!(field("pass=1 impl=ours size=2", "impl"), Some("ours"));
        assert_eq!(field("pass=1 implx=ours", "impl"), None);
    }
}
