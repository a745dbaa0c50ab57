//! Fork safety for registered memory.
//!
//! # Why
//!
//! Registering a memory region pins its pages and gives the device their
//! physical addresses. On kernels older than 5.13, `fork()` then marks the
//! parent's private pages copy-on-write; the first write *by the parent*
//! after the fork gets a fresh physical page, while the device keeps
//! DMA-ing to the old one, which now belongs to the child. The parent's RDMA
//! silently breaks. The classic cure (libibverbs' `ibv_fork_init`) is to
//! `madvise(MADV_DONTFORK)` every registered range, so the child does not
//! inherit those pages at all (touching them in the child faults with
//! `SIGSEGV`), and `madvise(MADV_DOFORK)` when the last registration covering
//! a page goes away.
//!
//! Since Linux 5.13 the kernel copies pinned pages eagerly at fork
//! ("copy-on-fork", reported over RDMA netlink as
//! `RDMA_NLDEV_SYS_ATTR_COPY_ON_FORK`), so the parent stays correct without
//! any `madvise`; the mode is then [`ForkMode::Unneeded`].
//!
//! # Contract (as in libibverbs)
//!
//! * Fork safety is off by default ([`ForkMode::Disabled`]): registration
//!   costs no extra system call.
//! * [`fork_init`] must run before the first registration. Once a
//!   registration was handled while disabled, enabling would leave that
//!   range unprotected and its later release unbalanced, so `fork_init` fails
//!   with `EINVAL` ("too late").
//! * When enabled, the core calls [`ForkSafety::dontfork_range`] before
//!   registering a range and [`ForkSafety::dofork_range`] after deregistering
//!   it (or when a registration fails). Ranges are rounded out to whole pages
//!   and reference-counted, so overlapping registrations are fine: a page is
//!   given back to children only when the last registration covering it is
//!   gone. Unaligned buffers protect whole pages, including unrelated data
//!   sharing those pages.
//!
//! # What the tracker promises
//!
//! A page it counts ([`ForkSafety::marked_ranges`]) is `MADV_DONTFORK`:
//!
//! * every `dontfork_range` applies `MADV_DONTFORK` to its whole range, also
//!   to pages other registrations already cover, so a page that was unmapped
//!   and mapped anew at the same address is protected again by the next
//!   registration (until then it is not: unmapping registered memory breaks
//!   the registration contract);
//! * a failed `dontfork_range` changes no count;
//! * a failed `dofork_range` releases its references all the same (a
//!   registration that is gone holds none); the pages whose `MADV_DOFORK`
//!   failed stay `MADV_DONTFORK`, which only means children do not inherit
//!   them. Never retry it.
//!
//! # Limit: `vm.max_map_count`
//!
//! Each `MADV_DONTFORK` range that is not adjacent to another one splits the
//! mapping it lies in, adding up to two kernel mappings (VMAs). At the
//! per-process limit `vm.max_map_count` ([`max_map_count`], 65 530 by
//! default) `madvise` fails with `EAGAIN`: then `dontfork_range` fails (and
//! so does registration), and `dofork_range` of part of a larger
//! `MADV_DONTFORK` mapping can fail too. With the default limit, about
//! 32 700 one-page registrations on separate pages fit; after that `mmap`
//! fails as well (for example `std::thread::spawn`). Raise the limit with
//! `sysctl -w vm.max_map_count=262144` (as root).
//!
//! # Forked children
//!
//! In a child of `fork()` the tracker starts empty, with a lock of its own
//! (see [`RangeTracker`]): the parent's registrations are not the child's,
//! and their pages do not exist there. A child that registers memory of its
//! own therefore never waits for a lock a parent thread held at `fork()`,
//! and `dofork_range` of a parent's range answers `EINVAL` in the child.
//!
//! # Environment variables
//!
//! Read once, when [`ForkSafety::global`] is first used:
//!
//! * `RDMAV_FORK_SAFE`, `IBV_FORK_SAFE`: when set to anything but `0`, run
//!   [`fork_init`] automatically (libibverbs compatible). A failure is printed
//!   to stderr and fork safety stays as it was.
//! * `UVERBS_FORK_SAFE=force`: run [`fork_init_forced`] automatically, i.e.
//!   enable `MADV_DONTFORK` even on a copy-on-fork kernel. Any other value
//!   except `0` behaves like `RDMAV_FORK_SAFE`.
//! * `RDMAV_HUGEPAGES_SAFE`: when set (to anything), round each range to the
//!   page size of the mapping that contains it (from `/proc/self/smaps`), as
//!   needed for huge-page backed buffers. Costs a read of `/proc/self/smaps`
//!   per registration. Read by every [`ForkSafety::new`].
//!
//! # Example
//!
//! ```
//! use uverbs::fork::{self, ForkMode, ForkSafety, MadviseAdvisor};
//!
//! // A private instance (the library itself uses `ForkSafety::global()`).
//! let safety = ForkSafety::new(ForkMode::Enabled, Box::new(MadviseAdvisor));
//! let buf = vec![0u8; 3 * 4096];
//! safety.dontfork_range(buf.as_ptr() as usize, buf.len())?;
//! assert!(!safety.marked_ranges().is_empty());
//! safety.dofork_range(buf.as_ptr() as usize, buf.len())?;
//! assert!(safety.marked_ranges().is_empty());
//!
//! // Process-wide: ask for fork safety before registering anything.
//! match fork::fork_init() {
//!     Ok(()) => assert_ne!(fork::fork_status(), ForkMode::Disabled),
//!     Err(e) => eprintln!("fork safety unavailable: {e}"),
//! }
//! # Ok::<(), uverbs::error::Errno>(())
//! ```

#![deny(missing_docs)]

mod advisor;
#[cfg(test)]
mod ir_probe;
mod plateaus;
// pub(crate) for the smaps parser's fuzz entry point (`crate::__fuzz`).
pub(crate) mod ranges;

use std::{fmt, io};

use crate::error::Errno;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, OnceLock};

pub use advisor::{Advice, Advisor, MadviseAdvisor};
pub use ranges::{PageSizing, RangeTracker};

/// Whether registered memory is protected from being inherited by children.
///
/// The discriminants are those of libibverbs' `enum ibv_fork_status`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[repr(u8)]
#[doc(alias = "ibv_fork_status")]
pub enum ForkMode {
    /// No `madvise` on registration (the default). Children inherit
    /// registered pages; on kernels before 5.13 a fork can break the parent's
    /// RDMA on those pages.
    #[default]
    #[doc(alias = "IBV_FORK_DISABLED")]
    Disabled = 0,
    /// Registered ranges are `MADV_DONTFORK` while registered.
    #[doc(alias = "IBV_FORK_ENABLED")]
    Enabled = 1,
    /// The kernel copies pinned pages at fork (copy-on-fork, Linux 5.13+),
    /// so no `madvise` is needed; registration costs no extra system call.
    #[doc(alias = "IBV_FORK_UNNEEDED")]
    Unneeded = 2,
}

const MODE_MASK: u8 = 0b11;
/// Set once a range was handled while not enabled.
const TOO_LATE: u8 = 0b100;

fn mode_of(state: u8) -> ForkMode {
    match state & MODE_MASK {
        1 => ForkMode::Enabled,
        2 => ForkMode::Unneeded,
        _ => ForkMode::Disabled,
    }
}

/// Why fork safety could not be enabled.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ForkInitError {
    /// A range was already registered (or released) while fork safety was
    /// not enabled; enabling now would leave it unprotected. `EINVAL`.
    #[error("fork safety must be enabled before any memory is registered")]
    TooLate,
    /// `madvise(MADV_DONTFORK)` / `madvise(MADV_DOFORK)` failed on a probe
    /// page. `ENOSYS`.
    #[error("madvise(MADV_DONTFORK/MADV_DOFORK) is not usable: {0}")]
    Unsupported(Errno),
}

impl ForkInitError {
    /// The errno libibverbs' `ibv_fork_init` returns for this error.
    pub fn raw_os_error(&self) -> i32 {
        match self {
            ForkInitError::TooLate => Errno::INVAL.raw_os_error(),
            ForkInitError::Unsupported(_) => Errno::NOSYS.raw_os_error(),
        }
    }
}

impl From<ForkInitError> for io::Error {
    fn from(e: ForkInitError) -> io::Error {
        io::Error::from_raw_os_error(e.raw_os_error())
    }
}

/// Fork-safety state: the mode plus the tracker of `MADV_DONTFORK` ranges.
///
/// The library uses the process-wide [`ForkSafety::global`] instance; private
/// instances ([`ForkSafety::new`]) are independent of it and of each other,
/// which keeps tests isolated and lets users supply their own [`Advisor`].
///
/// Mode changes are race-free: the mode and the "too late" flag live in one
/// atomic, so a range handled concurrently with [`ForkSafety::init`] is either
/// tracked (init won) or makes init fail with [`ForkInitError::TooLate`].
pub struct ForkSafety {
    state: AtomicU8,
    tracker: RangeTracker,
}

impl fmt::Debug for ForkSafety {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ForkSafety")
            .field("mode", &self.mode())
            .field("too_late", &self.too_late())
            .field("tracker", &self.tracker)
            .finish()
    }
}

/// What the environment asks the global instance to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum EnvRequest {
    None,
    Init,
    Force,
}

fn env_request(get: impl Fn(&str) -> Option<std::ffi::OsString>) -> EnvRequest {
    let enabled = |name: &str| get(name).filter(|v| v != "0");
    if let Some(v) = enabled("UVERBS_FORK_SAFE") {
        if v.eq_ignore_ascii_case("force") {
            return EnvRequest::Force;
        }
        return EnvRequest::Init;
    }
    if enabled("RDMAV_FORK_SAFE").is_some() || enabled("IBV_FORK_SAFE").is_some() {
        return EnvRequest::Init;
    }
    EnvRequest::None
}

static GLOBAL: OnceLock<Arc<ForkSafety>> = OnceLock::new();

impl ForkSafety {
    /// The process-wide instance used by memory registration, created on
    /// first use.
    ///
    /// Creation asks the kernel over RDMA netlink whether it does
    /// copy-on-fork (mode [`ForkMode::Unneeded`] if so, else
    /// [`ForkMode::Disabled`]; an unanswered query counts as "no"), then
    /// honours `UVERBS_FORK_SAFE`, `RDMAV_FORK_SAFE` and `IBV_FORK_SAFE` (see
    /// the [module documentation](self)), printing a warning to stderr if the
    /// requested initialisation fails.
    pub fn global() -> Arc<ForkSafety> {
        GLOBAL
            .get_or_init(|| {
                let copy_on_fork = crate::netlink::copy_on_fork().unwrap_or(false);
                let mode = if copy_on_fork {
                    ForkMode::Unneeded
                } else {
                    ForkMode::Disabled
                };
                let safety = ForkSafety::new(mode, Box::new(MadviseAdvisor));
                let result = match env_request(|name| std::env::var_os(name)) {
                    EnvRequest::None => Ok(()),
                    EnvRequest::Init => safety.init(),
                    EnvRequest::Force => safety.init_forced(),
                };
                if let Err(e) = result {
                    eprintln!(
                        "uverbs: warning: fork safety requested by the environment failed: {e}"
                    );
                }
                Arc::new(safety)
            })
            .clone()
    }

    /// A private instance starting in `mode`, applying advice through
    /// `advisor`, with page rounding from [`PageSizing::from_env`].
    pub fn new(mode: ForkMode, advisor: Box<dyn Advisor>) -> ForkSafety {
        ForkSafety::with_page_sizing(mode, advisor, PageSizing::from_env())
    }

    /// Like [`ForkSafety::new`] with explicit page rounding.
    pub fn with_page_sizing(
        mode: ForkMode,
        advisor: Box<dyn Advisor>,
        sizing: PageSizing,
    ) -> ForkSafety {
        ForkSafety {
            state: AtomicU8::new(mode as u8),
            tracker: RangeTracker::new(advisor, sizing),
        }
    }

    /// The current mode.
    #[doc(alias = "ibv_is_fork_initialized")]
    pub fn mode(&self) -> ForkMode {
        mode_of(self.state.load(Ordering::Acquire))
    }

    /// Whether a range was handled while this instance was not enabled, so
    /// that [`ForkSafety::init`] can no longer succeed.
    pub fn too_late(&self) -> bool {
        self.state.load(Ordering::Acquire) & TOO_LATE != 0
    }

    /// The range tracker (for diagnostics).
    pub fn tracker(&self) -> &RangeTracker {
        &self.tracker
    }

    /// Protects `[addr, addr + len)` (rounded out to pages) from being
    /// inherited by children, for one more registration.
    ///
    /// Unless the mode is [`ForkMode::Enabled`] this does nothing but record
    /// that enabling is now too late. `len == 0` or `addr == 0` is a no-op.
    /// On error no count changed (see [`RangeTracker::mark`]); with the
    /// real `madvise`, `ENOMEM` means part of the range is not mapped and
    /// `EAGAIN` that the process reached `vm.max_map_count` mappings
    /// ([`max_map_count`]).
    #[doc(alias = "ibv_dontfork_range")]
    pub fn dontfork_range(&self, addr: usize, len: usize) -> Result<(), Errno> {
        self.when_enabled(|tracker| tracker.mark(addr, len))
    }

    /// Releases one registration's protection of `[addr, addr + len)`;
    /// pages no longer covered by any registration are inherited by children
    /// again.
    ///
    /// Unless the mode is [`ForkMode::Enabled`] this does nothing but record
    /// that enabling is now too late. `len == 0` or `addr == 0` is a no-op.
    /// Memory that is already unmapped is skipped.
    ///
    /// State after an error: `EINVAL` (a page of the range is not marked)
    /// changed nothing. Any other error (with the real `madvise`, `EAGAIN`:
    /// the process is at `vm.max_map_count`) has **still released** this
    /// registration's references; only the pages whose `MADV_DOFORK` failed
    /// stay `MADV_DONTFORK` (not inherited by children, harmless for the
    /// parent). So report or ignore the error, but never call `dofork_range`
    /// again for the same registration. See [`RangeTracker::unmark`].
    #[doc(alias = "ibv_dofork_range")]
    pub fn dofork_range(&self, addr: usize, len: usize) -> Result<(), Errno> {
        self.when_enabled(|tracker| tracker.unmark(addr, len))
    }

    /// Runs `apply` on the tracker when enabled; otherwise only notes that
    /// enabling is now too late.
    fn when_enabled(
        &self,
        apply: impl FnOnce(&RangeTracker) -> Result<(), Errno>,
    ) -> Result<(), Errno> {
        if self.enabled_or_note_too_late() {
            apply(&self.tracker)
        } else {
            Ok(())
        }
    }

    /// The protected ranges as `(start, end_exclusive, refcount)`.
    pub fn marked_ranges(&self) -> Vec<(usize, usize, u32)> {
        self.tracker.marked()
    }

    /// Enables fork safety on this instance, like [`fork_init`] on the
    /// global one: a no-op if already enabled or if the mode is
    /// [`ForkMode::Unneeded`]; [`ForkInitError::TooLate`] if a range was
    /// already handled; [`ForkInitError::Unsupported`] if a `DontFork` /
    /// `DoFork` probe on a fresh page fails.
    #[doc(alias = "ibv_fork_init")]
    pub fn init(&self) -> Result<(), ForkInitError> {
        self.enable(false)
    }

    /// Enables fork safety even in mode [`ForkMode::Unneeded`], with the same
    /// too-late and probe rules as [`ForkSafety::init`].
    pub fn init_forced(&self) -> Result<(), ForkInitError> {
        self.enable(true)
    }

    /// True when enabled; otherwise sets the too-late flag (atomically, so
    /// that a concurrent [`enable`](Self::enable) either sees it or wins).
    fn enabled_or_note_too_late(&self) -> bool {
        let result =
            self.state
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |s| match mode_of(s) {
                    ForkMode::Enabled => None,
                    _ if s & TOO_LATE != 0 => None,
                    _ => Some(s | TOO_LATE),
                });
        matches!(result, Err(s) if mode_of(s) == ForkMode::Enabled)
    }

    fn enable(&self, forced: bool) -> Result<(), ForkInitError> {
        let s = self.state.load(Ordering::Acquire);
        match mode_of(s) {
            ForkMode::Enabled => return Ok(()),
            ForkMode::Unneeded if !forced => return Ok(()),
            _ if s & TOO_LATE != 0 => return Err(ForkInitError::TooLate),
            _ => {}
        }
        self.probe().map_err(ForkInitError::Unsupported)?;
        let mut outcome = Ok(());
        let _ = self
            .state
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |s| match mode_of(s) {
                ForkMode::Enabled => None,
                ForkMode::Unneeded if !forced => None,
                _ if s & TOO_LATE != 0 => {
                    outcome = Err(ForkInitError::TooLate);
                    None
                }
                _ => {
                    outcome = Ok(());
                    Some((s & !MODE_MASK) | ForkMode::Enabled as u8)
                }
            });
        outcome
    }

    /// Applies `DontFork` then `DoFork` to a freshly mapped page.
    fn probe(&self) -> Result<(), Errno> {
        let page = crate::page::page_size();
        // SAFETY: a fresh private anonymous mapping chosen by the kernel
        // (null hint) cannot alias any existing memory; it is unmapped below
        // and never exposed.
        let ptr = unsafe {
            rustix::mm::mmap_anonymous(
                std::ptr::null_mut(),
                page,
                rustix::mm::ProtFlags::READ | rustix::mm::ProtFlags::WRITE,
                rustix::mm::MapFlags::PRIVATE,
            )
        }?;
        let advisor = self.tracker.advisor();
        let result = advisor
            .advise(ptr as usize, page, Advice::DontFork)
            .and_then(|()| advisor.advise(ptr as usize, page, Advice::DoFork));
        // SAFETY: `ptr`/`page` is exactly the mapping created above, which
        // nothing else refers to.
        let _ = unsafe { rustix::mm::munmap(ptr, page) };
        result
    }
}

/// The kernel's per-process limit on memory mappings, `vm.max_map_count`
/// (read from `/proc/sys/vm/max_map_count`; 65 530 by default), or `None`
/// if it cannot be read.
///
/// Each separate `MADV_DONTFORK` range can add two mappings; at the limit
/// `madvise` answers `EAGAIN` (see the [module documentation](self)).
pub fn max_map_count() -> Option<usize> {
    std::fs::read_to_string("/proc/sys/vm/max_map_count")
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// Formats a fork-safety `madvise` errno with what it means here, e.g.
/// `EAGAIN (11): Resource temporarily unavailable: the process reached
/// vm.max_map_count (65530 mappings); raise it with sysctl`.
pub(crate) struct MadviseErrnoDisplay(pub rustix::io::Errno);

impl fmt::Display for MadviseErrnoDisplay {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use rustix::io::Errno;
        write!(f, "{}", crate::error::ErrnoDisplay(self.0))?;
        match self.0 {
            Errno::AGAIN => {
                f.write_str(": the process reached vm.max_map_count")?;
                if let Some(limit) = max_map_count() {
                    write!(f, " ({limit} mappings)")?;
                }
                f.write_str(
                    "; every separate MADV_DONTFORK range splits its mapping; \
                     raise the limit with `sysctl -w vm.max_map_count=N`",
                )
            }
            Errno::NOMEM => f.write_str(": part of the range is not mapped"),
            _ => Ok(()),
        }
    }
}

/// Enables fork safety process-wide (on [`ForkSafety::global`]).
///
/// * `Ok(())` without doing anything if already enabled, or if the kernel
///   does copy-on-fork (mode [`ForkMode::Unneeded`]; use
///   [`fork_init_forced`] to enable anyway).
/// * [`ForkInitError::TooLate`] (`EINVAL`) if memory was already registered
///   or released while fork safety was off.
/// * [`ForkInitError::Unsupported`] (`ENOSYS`) if `MADV_DONTFORK` /
///   `MADV_DOFORK` do not work.
#[doc(alias = "ibv_fork_init")]
pub fn fork_init() -> Result<(), ForkInitError> {
    ForkSafety::global().init()
}

/// Enables fork safety process-wide even when the kernel does copy-on-fork,
/// for programs that do not want children to inherit registered buffers at
/// all. Same too-late and probe rules as [`fork_init`].
pub fn fork_init_forced() -> Result<(), ForkInitError> {
    ForkSafety::global().init_forced()
}

/// The process-wide fork-safety mode.
///
/// Unlike libibverbs' `ibv_is_fork_initialized`, a forced instance on a
/// copy-on-fork kernel reports [`ForkMode::Enabled`], because it does apply
/// `MADV_DONTFORK`.
#[doc(alias = "ibv_is_fork_initialized")]
pub fn fork_status() -> ForkMode {
    ForkSafety::global().mode()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsString;
    use std::sync::Mutex;

    #[derive(Default, Clone)]
    struct Log(Arc<Mutex<Vec<(usize, usize, Advice)>>>);

    impl Advisor for Log {
        fn advise(&self, addr: usize, len: usize, advice: Advice) -> Result<(), Errno> {
            self.0.lock().unwrap().push((addr, len, advice));
            Ok(())
        }
    }

    struct Broken;

    impl Advisor for Broken {
        fn advise(&self, _: usize, _: usize, _: Advice) -> Result<(), Errno> {
            Err(Errno::from_raw_os_error(Errno::INVAL.raw_os_error()))
        }
    }

    const P: usize = 4096;

    fn private(mode: ForkMode) -> (ForkSafety, Log) {
        let log = Log::default();
        let fs = ForkSafety::with_page_sizing(mode, Box::new(log.clone()), PageSizing::Fixed(P));
        (fs, log)
    }

    #[test]
    fn disabled_does_nothing_and_makes_init_too_late() {
        let (fs, log) = private(ForkMode::Disabled);
        assert!(!fs.too_late());
        fs.dontfork_range(0x10000, P).unwrap();
        assert!(fs.too_late());
        assert!(fs.marked_ranges().is_empty());
        assert!(log.0.lock().unwrap().is_empty());
        let err = fs.init().unwrap_err();
        assert!(matches!(err, ForkInitError::TooLate));
        assert_eq!(err.raw_os_error(), Errno::INVAL.raw_os_error());
        assert_eq!(
            io::Error::from(err).raw_os_error(),
            Some(Errno::INVAL.raw_os_error())
        );
        assert!(matches!(fs.init_forced(), Err(ForkInitError::TooLate)));
        assert_eq!(fs.mode(), ForkMode::Disabled);
    }

    #[test]
    fn dofork_while_disabled_is_also_too_late() {
        let (fs, _) = private(ForkMode::Disabled);
        fs.dofork_range(0x10000, P).unwrap();
        assert!(matches!(fs.init(), Err(ForkInitError::TooLate)));
    }

    #[test]
    fn init_enables_and_probes() {
        let (fs, log) = private(ForkMode::Disabled);
        fs.init().unwrap();
        assert_eq!(fs.mode(), ForkMode::Enabled);
        let calls = std::mem::take(&mut *log.0.lock().unwrap());
        assert_eq!(calls.len(), 2, "probe: DontFork then DoFork");
        assert_eq!(calls[0].2, Advice::DontFork);
        assert_eq!(calls[1].2, Advice::DoFork);
        assert_eq!(calls[0].0, calls[1].0);
        // Idempotent, no second probe.
        fs.init().unwrap();
        assert!(log.0.lock().unwrap().is_empty());
        // Now ranges are tracked, and a later init is still fine.
        fs.dontfork_range(0x10000, 1).unwrap();
        assert_eq!(fs.marked_ranges(), vec![(0x10000, 0x10000 + P, 1)]);
        assert!(!fs.too_late());
        fs.init().unwrap();
        fs.dofork_range(0x10000, 1).unwrap();
        assert!(fs.marked_ranges().is_empty());
    }

    #[test]
    fn probe_failure_is_enosys() {
        let fs = ForkSafety::new(ForkMode::Disabled, Box::new(Broken));
        let err = fs.init().unwrap_err();
        assert!(matches!(err, ForkInitError::Unsupported(_)));
        assert_eq!(err.raw_os_error(), Errno::NOSYS.raw_os_error());
        assert_eq!(fs.mode(), ForkMode::Disabled);
        assert!(!fs.too_late());
    }

    #[test]
    fn unneeded_init_is_a_noop_but_forced_enables() {
        let (fs, log) = private(ForkMode::Unneeded);
        fs.init().unwrap();
        assert_eq!(fs.mode(), ForkMode::Unneeded);
        assert!(log.0.lock().unwrap().is_empty());
        fs.init_forced().unwrap();
        assert_eq!(fs.mode(), ForkMode::Enabled);
    }

    #[test]
    fn unneeded_records_too_late_for_forced() {
        let (fs, _) = private(ForkMode::Unneeded);
        fs.dontfork_range(0x10000, P).unwrap();
        assert!(fs.marked_ranges().is_empty());
        fs.init().unwrap(); // still a no-op success
        assert!(matches!(fs.init_forced(), Err(ForkInitError::TooLate)));
        assert_eq!(fs.mode(), ForkMode::Unneeded);
    }

    #[test]
    fn enabled_instance_with_real_madvise() {
        let fs = ForkSafety::new(ForkMode::Enabled, Box::new(MadviseAdvisor));
        let v = vec![7u8; 3 * crate::page::page_size()];
        fs.dontfork_range(v.as_ptr() as usize, v.len()).unwrap();
        fs.dontfork_range(v.as_ptr() as usize + 10, 10).unwrap();
        assert!(!fs.marked_ranges().is_empty());
        fs.dofork_range(v.as_ptr() as usize, v.len()).unwrap();
        fs.dofork_range(v.as_ptr() as usize + 10, 10).unwrap();
        assert!(fs.marked_ranges().is_empty());
    }

    #[test]
    fn dofork_on_unmapped_memory_is_ignored() {
        let page = crate::page::page_size();
        let fs = ForkSafety::new(ForkMode::Enabled, Box::new(MadviseAdvisor));
        // SAFETY: a fresh anonymous mapping owned by this test only.
        let ptr = unsafe {
            rustix::mm::mmap_anonymous(
                std::ptr::null_mut(),
                4 * page,
                rustix::mm::ProtFlags::READ | rustix::mm::ProtFlags::WRITE,
                rustix::mm::MapFlags::PRIVATE,
            )
        }
        .unwrap();
        let addr = ptr as usize;
        fs.dontfork_range(addr, 4 * page).unwrap();
        // Unmap the middle two pages, as a program freeing memory before
        // deregistering would.
        // SAFETY: the range lies inside the mapping above; nothing refers to it.
        unsafe { rustix::mm::munmap((addr + page) as *mut _, 2 * page) }.unwrap();
        fs.dofork_range(addr, 4 * page).unwrap();
        assert!(fs.marked_ranges().is_empty());
        // Marking unmapped memory does fail (ENOMEM), leaving nothing behind.
        let err = fs.dontfork_range(addr + page, page).unwrap_err();
        assert_eq!(err, Errno::NOMEM);
        assert!(fs.marked_ranges().is_empty());
        // SAFETY: the remaining pages of the mapping above.
        unsafe {
            rustix::mm::munmap(addr as *mut _, page).unwrap();
            rustix::mm::munmap((addr + 3 * page) as *mut _, page).unwrap();
        }
    }

    #[test]
    fn concurrent_init_and_registration_never_lose_a_range() {
        for _ in 0..50 {
            let (fs, _) = private(ForkMode::Disabled);
            let fs = Arc::new(fs);
            let reg = {
                let fs = fs.clone();
                std::thread::spawn(move || fs.dontfork_range(0x20000, P).unwrap())
            };
            let init = fs.init();
            reg.join().unwrap();
            match init {
                // init won: the range was tracked.
                Ok(()) if !fs.marked_ranges().is_empty() => assert!(!fs.too_late()),
                // registration won: init failed.
                Err(ForkInitError::TooLate) => {
                    assert_eq!(fs.mode(), ForkMode::Disabled);
                    assert!(fs.marked_ranges().is_empty());
                }
                other => panic!("inconsistent outcome {other:?} / {fs:?}"),
            }
        }
    }

    #[test]
    fn environment_parsing() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |name: &str| {
                pairs
                    .iter()
                    .find(|(k, _)| *k == name)
                    .map(|(_, v)| OsString::from(v))
            }
        };
        type Vars = &'static [(&'static str, &'static str)];
        let table: &[(Vars, EnvRequest)] = &[
            (&[], EnvRequest::None),
            (&[("RDMAV_FORK_SAFE", "1")], EnvRequest::Init),
            (&[("IBV_FORK_SAFE", "")], EnvRequest::Init),
            (&[("RDMAV_FORK_SAFE", "0")], EnvRequest::None),
            (
                &[("RDMAV_FORK_SAFE", "0"), ("IBV_FORK_SAFE", "yes")],
                EnvRequest::Init,
            ),
            (&[("UVERBS_FORK_SAFE", "force")], EnvRequest::Force),
            (&[("UVERBS_FORK_SAFE", "FORCE")], EnvRequest::Force),
            (&[("UVERBS_FORK_SAFE", "1")], EnvRequest::Init),
            (
                &[("UVERBS_FORK_SAFE", "0"), ("RDMAV_FORK_SAFE", "1")],
                EnvRequest::Init,
            ),
        ];
        for &(vars, want) in table {
            assert_eq!(env_request(env(vars)), want, "{vars:?}");
        }
    }

    #[test]
    fn global_is_shared_and_consistent() {
        // Only read-only checks: other tests in this process may use the
        // global instance too.
        let a = ForkSafety::global();
        let b = ForkSafety::global();
        assert!(Arc::ptr_eq(&a, &b));
        assert_eq!(fork_status(), a.mode());
    }

    #[test]
    fn eagain_names_the_map_count_limit() {
        let text = MadviseErrnoDisplay(Errno::AGAIN).to_string();
        assert!(text.starts_with("EAGAIN (11): "), "{text}");
        assert!(text.contains("vm.max_map_count"), "{text}");
        if let Some(limit) = max_map_count() {
            assert!(text.contains(&format!("({limit} mappings)")), "{text}");
        }
        let text = MadviseErrnoDisplay(Errno::NOMEM).to_string();
        assert!(text.contains("not mapped"), "{text}");
        let text = MadviseErrnoDisplay(Errno::PERM).to_string();
        assert!(!text.contains("max_map_count"), "{text}");
    }

    #[test]
    fn types_are_send_and_sync() {
        fn check<T: Send + Sync>() {}
        check::<ForkSafety>();
        check::<RangeTracker>();
        check::<MadviseAdvisor>();
        check::<Arc<ForkSafety>>();
    }
}
