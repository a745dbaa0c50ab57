//! The one fixture set of the test suite. Every test binary compiles it as
//! `mod common;` and uses a subset:
//!
//! - [`devices`]: the device gate (`UVERBS_REQUIRE_DEVICES`), opened devices
//!   (`Dut`), the kernel handle-count guard, MR snapshots;
//! - [`fake`]: a context over the recording fake kernel, with PDs and
//!   buffers (`FakeKernel`);
//! - [`fork`]: forked children with bounded waits (`in_child!`,
//!   `child_reads`) and fork advisors that record, fail or block;
//! - [`kernel`]: what the kernel under test answers differently by release
//!   (6.1 and 6.12), where a test asserts an exact answer;
//! - [`leaks`]: the exit check of every device test binary in the VM: no
//!   kernel object of a user process may be left (`rdma res show`'s view);
//! - [`mapping`]: page-aligned, untouched and holed mappings;
//! - [`rc`]: the attribute sequence that takes an RC QP to RTS;
//! - [`traffic`]: the requester side of the re-registration traffic
//!   tests (WRITE, READ, FETCH_ADD checked byte for byte; refusals);
//! - [`two_host`]: roles and the control connection of the two-host run;
//! - here: the access flags every test means by `RW` and `RW_READ`, the
//!   serial lock, a fresh MR, the replace-fallback calls, and a bounded
//!   poll for readability.

// Each test binary uses a different subset of these helpers.
#![allow(dead_code, unused_imports)]

#[macro_use]
pub mod devices;
pub mod cm;
pub mod fake;
#[macro_use]
pub mod fork;
pub mod kernel;
pub mod leaks;
pub mod mapping;
pub mod rc;
pub mod thread_io;
pub mod tokio_rt;
pub mod traffic;
pub mod two_host;

use std::sync::{Mutex, MutexGuard};

use uverbs::mr::{ReregError, ReregFallback, ReregFlags, ReregPath};
use uverbs::{AccessFlags, MemoryRegion, ProtectionDomain};

pub use devices::*;
pub use fake::*;
pub use fork::*;
pub use mapping::*;
pub use rc::*;
pub use tokio_rt::*;

/// Written locally and remotely: `LOCAL_WRITE | REMOTE_WRITE`.
pub const RW: AccessFlags = AccessFlags::LOCAL_WRITE.union(AccessFlags::REMOTE_WRITE);
/// [`RW`] and read remotely: `LOCAL_WRITE | REMOTE_READ | REMOTE_WRITE`.
pub const RW_READ: AccessFlags = RW.union(AccessFlags::REMOTE_READ);
/// What an owned [`BufferMr`](uverbs::BufferMr) may be registered with
/// (no peer may write it): `LOCAL_WRITE | REMOTE_READ`.
pub const OWNED: AccessFlags = AccessFlags::LOCAL_WRITE.union(AccessFlags::REMOTE_READ);
/// One mebibyte.
pub const MIB: usize = 1 << 20;

/// poll(2) for `POLLIN` on `fd`, up to `wait`: its answer (1 once
/// readable, 0 at the time-out, -1 with errno set on an error).
pub fn poll_in(fd: std::os::fd::RawFd, wait: std::time::Duration) -> i32 {
    let mut pfd = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd, for the duration of the call.
    unsafe { libc::poll(&mut pfd, 1, wait.as_millis() as i32) }
}

/// A deterministic byte pattern for `seed` (never all zero).
pub fn pattern(seed: u64, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| {
            let x = seed
                .wrapping_mul(0x9e37_79b9_7f4a_7c15)
                .rotate_left((i % 61) as u32);
            (x as u8) ^ (i as u8) ^ 0x5a
        })
        .collect()
}

/// Makes the tests of one binary that hold it run one at a time: those
/// that unmap memory and then register it (which must not race with other
/// threads mapping memory), that fork, or that read process-wide state.
pub fn serial() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Registers all of `buf` in `pd` with `access`, failing the test with the
/// device's name. Every caller keeps `buf` mapped until the MR is gone or
/// points elsewhere.
pub fn fresh_mr(pd: &ProtectionDomain, buf: &mut [u8], access: AccessFlags) -> MemoryRegion {
    // SAFETY: see above: every caller keeps `buf` until the MR is gone.
    unsafe { pd.reg_mr(buf.as_mut_ptr(), buf.len(), access) }.unwrap_or_else(|e| {
        panic!(
            "{}: reg_mr of {} bytes: {e}",
            pd.context().device_name(),
            buf.len()
        )
    })
}

/// One input case of a re-registration: (what it is, flags, pd, addr,
/// length, access).
pub type ReregCase<'a> = (
    &'a str,
    ReregFlags,
    Option<&'a ProtectionDomain>,
    *mut u8,
    usize,
    AccessFlags,
);

/// `rereg_with(Replace, flags, pd, …, access)` of a change without
/// TRANSLATION: no new memory.
pub fn replace(
    mr: &mut MemoryRegion,
    flags: ReregFlags,
    pd: Option<&ProtectionDomain>,
    access: AccessFlags,
) -> Result<ReregPath, ReregError> {
    // SAFETY: no range is handed over (null, 0); a TRANSLATION flag among
    // `flags` is refused as input before anything reaches the kernel.
    unsafe {
        mr.rereg_with(
            ReregFallback::Replace,
            flags,
            pd,
            std::ptr::null_mut(),
            0,
            access,
        )
    }
}

/// `rereg_with(Replace, TRANSLATION, None, addr, len, empty)`: moves `mr`
/// to `[addr, addr + len)`.
///
/// # Safety
///
/// As for `MemoryRegion::rereg_with`: the range stays mapped while `mr`
/// covers it.
pub unsafe fn replace_range(
    mr: &mut MemoryRegion,
    addr: *mut u8,
    len: usize,
) -> Result<ReregPath, ReregError> {
    // SAFETY: forwarded to the caller.
    unsafe {
        mr.rereg_with(
            ReregFallback::Replace,
            ReregFlags::TRANSLATION,
            None,
            addr,
            len,
            AccessFlags::empty(),
        )
    }
}
