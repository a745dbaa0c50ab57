//! Bad input on real devices reaches a typed error, never a panic, and
//! leaves no kernel object behind. Every kernel answer is printed.
//!
//! The tests of this file run one at a time (see [`serial`]): one of them
//! forks, and the address-space tricks (unmapping a range, then
//! registering it) must not race with other threads mapping memory.

#[macro_use]
mod common;

use common::{
    alloc_pd, anon, devices_under_test, driver, loud, open, page_size, serial, Driver, Dut,
    HandleCounts, Holed, RW_READ,
};
use nix::sys::resource::{setrlimit, Resource};
use nix::sys::wait::{waitpid, WaitStatus};
use nix::unistd::{fork, ForkResult};
use uverbs::device::OpenOptions;
use uverbs::error::{Errno, Op};
use uverbs::fork::ForkMode;
use uverbs::mr::ReregOutcome;
use uverbs::{AccessFlags, Device, Error, ProtectionDomain};

/// A PD to register in and the counts that must not move.
struct Target<'a> {
    name: &'a str,
    pd: ProtectionDomain,
    counts: &'a HandleCounts,
}

impl<'a> Target<'a> {
    /// A new PD in `ctx`, watched by `counts`.
    fn new(name: &'a str, ctx: &Dut, counts: &'a HandleCounts) -> Self {
        Target {
            name,
            pd: alloc_pd(ctx),
            counts,
        }
    }
}

/// Registers `[addr, addr + len)` and expects the kernel to refuse with
/// `errno`; prints the answer and checks no MR was left behind.
fn expect_reg_refused(
    t: &Target<'_>,
    case: &str,
    addr: *mut u8,
    len: usize,
    access: AccessFlags,
    errno: Errno,
) {
    expect_refused(t, case, (addr, len, access), errno, Mapped::Maybe);
}

/// Whether the range of a refused registration is mapped.
#[derive(PartialEq)]
enum Mapped {
    /// Entirely: fork safety's madvise succeeds, the kernel answers.
    Yes,
    /// Perhaps not: with fork safety on, an unmapped range fails at
    /// madvise(MADV_DONTFORK) with ENOMEM, before REG_MR (as in
    /// libibverbs), where the kernel would answer EFAULT.
    Maybe,
}

/// [`expect_reg_refused`] of `(addr, len, access)` over a range `mapped`.
fn expect_refused(
    t: &Target<'_>,
    case: &str,
    (addr, len, access): (*mut u8, usize, AccessFlags),
    errno: Errno,
    mapped: Mapped,
) {
    let (name, pd, counts) = (t.name, &t.pd, t.counts);
    let fork_first = mapped == Mapped::Maybe
        && errno == Errno::FAULT
        && pd.context().fork_safety().mode() == ForkMode::Enabled;
    // SAFETY: the registration is expected to fail; if it does not, the MR
    // is dropped at once below, before the caller changes the range.
    let result = unsafe { pd.reg_mr(addr, len, access) };
    match result {
        Ok(mr) => {
            let text = format!("{mr:?}");
            drop(mr);
            panic!("{name}: {case}: registered ({text}), expected the kernel to answer {errno:?}");
        }
        Err(e) => {
            loud(&format!("{name}: {case}: kernel answered: {e}"));
            assert_eq!(e.op(), Op::RegMr, "{name}: {case}: op ({e})");
            if fork_first {
                assert!(
                    matches!(e, Error::ForkSafety { .. }),
                    "{name}: {case}: a fork-safety error, got {e:?}"
                );
                assert_eq!(e.errno(), Some(Errno::NOMEM), "{name}: {case}: errno ({e})");
            } else {
                assert!(
                    matches!(e, Error::Os { .. }),
                    "{name}: {case}: an Os error from the kernel, got {e:?}"
                );
                assert_eq!(e.errno(), Some(errno), "{name}: {case}: errno ({e})");
            }
        }
    }
    counts.assert_extra(0, 1, case);
}

device_test!(zero_length_is_refused_by_the_kernel, |name, ctx, counts| {
    let _serial = serial();
    let t = Target::new(name, &ctx, counts);
    let mut buf = anon(page_size());
    expect_reg_refused(&t, "length 0", buf.as_mut_ptr(), 0, RW_READ, Errno::INVAL);
});

device_test!(an_unmapped_address_is_efault, |name, ctx, counts| {
    let _serial = serial();
    let t = Target::new(name, &ctx, counts);
    // A range that was mapped and is no longer.
    let addr = {
        let mut gone = anon(1 << 20);
        gone.as_mut_ptr()
    };
    expect_reg_refused(
        &t,
        "a munmapped 1 MiB range",
        addr,
        1 << 20,
        RW_READ,
        Errno::FAULT,
    );
    // The first page, which nothing can map (below vm.mmap_min_addr).
    expect_reg_refused(
        &t,
        "address 0x1000",
        0x1000 as *mut u8,
        4096,
        RW_READ,
        Errno::FAULT,
    );
});

device_test!(
    a_range_running_past_the_end_of_a_mapping_is_efault,
    |name, ctx, counts| {
        let _serial = serial();
        let t = Target::new(name, &ctx, counts);
        // 3 mapped pages followed by a hole.
        let holed = Holed::new();
        let (base, page) = (holed.base, holed.page);
        // Inside the mapping first: works.
        // SAFETY: the 3 pages stay mapped until the MR is gone.
        let mr = unsafe { t.pd.reg_mr(base, 3 * page, RW_READ) }
            .unwrap_or_else(|e| panic!("{name}: reg of the mapped part: {e}"));
        mr.dereg().unwrap_or_else(|e| panic!("{name}: dereg: {e}"));
        expect_reg_refused(
            &t,
            "4 pages of which the last is unmapped",
            base,
            4 * page,
            RW_READ,
            Errno::FAULT,
        );
        expect_reg_refused(
            &t,
            "from mid-mapping one byte into the hole",
            base.wrapping_add(page + 17),
            2 * page,
            RW_READ,
            Errno::FAULT,
        );
        drop(holed); // no MR uses it now
    }
);

device_test!(
    a_range_wrapping_around_is_refused_before_the_kernel,
    |name, ctx, counts| {
        let _serial = serial();
        let pd = alloc_pd(&ctx);
        // SAFETY: refused before any system call (checked below).
        let result = unsafe { pd.reg_mr((usize::MAX - 4095) as *mut u8, 8192, RW_READ) };
        let e = result
            .err()
            .unwrap_or_else(|| panic!("{name}: a wrapping range was registered"));
        assert!(
            matches!(e, Error::InvalidInput { op: Op::RegMr, .. }),
            "{name}: {e:?}"
        );
        assert_eq!(e.errno(), Some(Errno::INVAL), "{name}: {e}");
        counts.assert_extra(0, 1, "after the refused wrapping range");
    }
);

device_test!(
    a_prot_none_mapping_registers_read_only_on_6_1_only,
    |name, ctx, counts| {
        let _serial = serial();
        let t = Target::new(name, &ctx, counts);
        let len = 2 * page_size();
        // SAFETY: a fresh private anonymous mapping, unmapped below.
        let addr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(addr, libc::MAP_FAILED, "{name}: mmap PROT_NONE");
        let addr = addr.cast::<u8>();
        let read_only = AccessFlags::REMOTE_READ;
        if common::kernel::prot_none_registers_read_only() {
            // SAFETY: the mapping stays until the MR is gone.
            let mr = unsafe { t.pd.reg_mr(addr, len, read_only) }.unwrap_or_else(|e| {
                panic!("{name}: 6.1 registers a read-only PROT_NONE range, answered {e}")
            });
            loud(&format!(
                "{name}: PROT_NONE, REMOTE_READ: registered (6.1 pins with FOLL_FORCE): {mr:?}"
            ));
            mr.dereg().unwrap_or_else(|e| panic!("{name}: dereg: {e}"));
        } else {
            let case = "PROT_NONE, REMOTE_READ";
            expect_refused(&t, case, (addr, len, read_only), Errno::FAULT, Mapped::Yes);
        }
        let case = "PROT_NONE, LOCAL_WRITE";
        expect_refused(&t, case, (addr, len, RW_READ), Errno::FAULT, Mapped::Yes);
        // SAFETY: no MR uses the mapping now.
        unsafe { libc::munmap(addr.cast(), len) };
    }
);

device_test!(access_bits_the_device_refuses, |name, ctx, counts| {
    let _serial = serial();
    let t = Target::new(name, &ctx, counts);
    let mut buf = anon(64 << 10);
    let (addr, len) = (buf.as_mut_ptr(), buf.len());
    let cases = [
        // Neither rxe nor siw offers on-demand paging: ib_check_mr_access
        // says EOPNOTSUPP on 6.12, EINVAL on 6.1.
        (
            "ON_DEMAND without ODP",
            AccessFlags::LOCAL_WRITE | AccessFlags::ON_DEMAND,
            common::kernel::odp_refusal_errno(),
        ),
        // Remote write needs local write (ib_check_mr_access).
        (
            "REMOTE_WRITE without LOCAL_WRITE",
            AccessFlags::REMOTE_WRITE,
            Errno::INVAL,
        ),
        (
            "REMOTE_ATOMIC without LOCAL_WRITE",
            AccessFlags::REMOTE_ATOMIC,
            Errno::INVAL,
        ),
        // A bit outside IB_ACCESS_SUPPORTED (and outside the optional range 20..29).
        (
            "unknown access bit 1<<30",
            AccessFlags::from_bits_retain(1 << 30) | AccessFlags::LOCAL_WRITE,
            Errno::INVAL,
        ),
    ];
    for (case, access, errno) in cases {
        expect_reg_refused(&t, case, addr, len, access, errno);
    }
    // An optional bit (RELAXED_ORDERING, in the optional range) is ignored, not refused.
    // SAFETY: `buf` outlives the MR.
    let mr = unsafe {
        t.pd.reg_mr(
            addr,
            len,
            AccessFlags::LOCAL_WRITE | AccessFlags::RELAXED_ORDERING,
        )
    }
    .unwrap_or_else(|e| panic!("{name}: RELAXED_ORDERING is optional, yet: {e}"));
    mr.dereg().unwrap_or_else(|e| panic!("{name}: dereg: {e}"));
});

device_test!(
    set_pd_with_a_pd_of_another_context_is_input,
    |name, ctx, _| {
        let _serial = serial();
        let other = ctx.reopen();
        let counts = HandleCounts::new(&ctx, "foreign PD");
        let other_counts = HandleCounts::new(&other, "foreign PD (other context)");
        let pd = alloc_pd(&ctx);
        let foreign = alloc_pd(&other);
        let mut buf = anon(64 << 10);
        // SAFETY: `buf` outlives the MR.
        let mut mr = unsafe { pd.reg_mr(buf.as_mut_ptr(), buf.len(), RW_READ) }
            .unwrap_or_else(|e| panic!("{name}: reg: {e}"));
        let e = mr
            .set_pd(&foreign)
            .err()
            .unwrap_or_else(|| panic!("{name}: moved into another context's PD"));
        loud(&format!("{name}: set_pd(PD of another context): {e}"));
        assert_eq!(e.outcome(), ReregOutcome::Input, "{name}: {e}");
        assert_eq!(e.errno(), Errno::INVAL, "{name}: {e}");
        assert_eq!(mr.pd_handle(), pd.handle(), "{name}: still in its PD");
        assert!(mr.is_in(&pd), "{name}: still in its PD");
        other_counts.assert_extra(0, 1, "the foreign PD is untouched");
        counts.assert_extra(1, 1, "the MR is untouched");
        mr.dereg().unwrap_or_else(|e| panic!("{name}: dereg: {e}"));
        foreign
            .dealloc()
            .unwrap_or_else(|e| panic!("{name}: dealloc of the foreign PD: {e}"));
    }
);

// ---- RLIMIT_MEMLOCK, in forked children ----

const LINUX_CAPABILITY_VERSION_3: u32 = 0x2008_0522;
const CAP_IPC_LOCK: u32 = 14;

#[repr(C)]
struct CapHeader {
    version: u32,
    pid: i32,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

fn capget() -> Result<[CapData; 2], Errno> {
    let mut header = CapHeader {
        version: LINUX_CAPABILITY_VERSION_3,
        pid: 0,
    };
    let mut data = [CapData::default(); 2];
    // SAFETY: capget writes two CapData for version 3.
    let rc = unsafe { nix::libc::syscall(nix::libc::SYS_capget, &mut header, data.as_mut_ptr()) };
    if rc == 0 {
        Ok(data)
    } else {
        Err(Errno::from_raw_os_error(
            std::io::Error::last_os_error().raw_os_error().unwrap_or(0),
        ))
    }
}

fn has_ipc_lock() -> bool {
    capget()
        .map(|d| d[0].effective & (1 << CAP_IPC_LOCK) != 0)
        .unwrap_or(false)
}

/// Drops CAP_IPC_LOCK from this process's effective and permitted sets.
fn drop_ipc_lock() -> Result<(), Errno> {
    let mut data = capget()?;
    data[0].effective &= !(1 << CAP_IPC_LOCK);
    data[0].permitted &= !(1 << CAP_IPC_LOCK);
    let mut header = CapHeader {
        version: LINUX_CAPABILITY_VERSION_3,
        pid: 0,
    };
    // SAFETY: capset reads two CapData for version 3.
    let rc = unsafe { nix::libc::syscall(nix::libc::SYS_capset, &mut header, data.as_ptr()) };
    if rc == 0 {
        Ok(())
    } else {
        Err(Errno::from_raw_os_error(
            std::io::Error::last_os_error().raw_os_error().unwrap_or(0),
        ))
    }
}

// Child exit codes: 0 registered; 1..=199 the kernel's errno for REG_MR.
const CHILD_OTHER_ERROR: i32 = 200;
const CHILD_PANICKED: i32 = 201;
const CHILD_CAPSET_FAILED: i32 = 202;
const CHILD_SETRLIMIT_FAILED: i32 = 203;
const CHILD_SETUP_FAILED: i32 = 204;
const CHILD_STILL_CAPABLE: i32 = 205;

/// In a child process: lowers RLIMIT_MEMLOCK to `limit` bytes, optionally
/// drops CAP_IPC_LOCK, opens `dev` and registers `len` bytes. Returns the
/// child's exit code.
fn reg_in_child(
    dev: &Device,
    options: &OpenOptions,
    limit: u64,
    drop_cap: bool,
    len: usize,
) -> i32 {
    // Prepared before fork so the child only makes system calls and allocates.
    let mut buf = anon(len);
    let addr = buf.as_mut_ptr();
    // SAFETY: the tests of this file are serialized, so no other test thread
    // is inside the library; the child only allocates (glibc's malloc is
    // fork-safe), makes system calls and leaves with _exit, never unwinding
    // into the parent's state.
    match unsafe { fork() } {
        Ok(ForkResult::Child) => {
            let code = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                if setrlimit(Resource::RLIMIT_MEMLOCK, limit, limit).is_err() {
                    return CHILD_SETRLIMIT_FAILED;
                }
                if drop_cap {
                    if drop_ipc_lock().is_err() {
                        return CHILD_CAPSET_FAILED;
                    }
                    if has_ipc_lock() {
                        return CHILD_STILL_CAPABLE;
                    }
                }
                let Ok(ctx) = dev.open_with(options) else {
                    return CHILD_SETUP_FAILED;
                };
                let Ok(pd) = ctx.alloc_pd() else {
                    return CHILD_SETUP_FAILED;
                };
                // SAFETY: `buf` stays mapped until the child exits.
                match unsafe { pd.reg_mr(addr, len, RW_READ) } {
                    Ok(mr) => match mr.dereg() {
                        Ok(()) => 0,
                        Err(_) => CHILD_OTHER_ERROR,
                    },
                    Err(Error::Os {
                        op: Op::RegMr,
                        errno,
                        ..
                    }) if (1..200).contains(&errno.raw_os_error()) => errno.raw_os_error(),
                    Err(_) => CHILD_OTHER_ERROR,
                }
            }))
            .unwrap_or(CHILD_PANICKED);
            // SAFETY: leaves the child at once, running no parent destructors.
            unsafe { nix::libc::_exit(code) }
        }
        Ok(ForkResult::Parent { child }) => {
            let status = waitpid(child, None).expect("waitpid");
            drop(buf);
            match status {
                WaitStatus::Exited(_, code) => code,
                other => panic!("{}: the child did not exit normally: {other:?}", dev.name()),
            }
        }
        Err(e) => panic!("fork failed: {e}"),
    }
}

fn describe(code: i32) -> String {
    match code {
        0 => "registered".into(),
        CHILD_OTHER_ERROR => "an unexpected error".into(),
        CHILD_PANICKED => "the child panicked".into(),
        CHILD_CAPSET_FAILED => "capset failed".into(),
        CHILD_SETRLIMIT_FAILED => "setrlimit failed".into(),
        CHILD_SETUP_FAILED => "open/alloc_pd failed".into(),
        CHILD_STILL_CAPABLE => "CAP_IPC_LOCK could not be dropped".into(),
        errno => {
            let name = match Errno::from_raw_os_error(errno) {
                Errno::NOMEM => "ENOMEM",
                Errno::PERM => "EPERM",
                Errno::FAULT => "EFAULT",
                Errno::INVAL => "EINVAL",
                Errno::OPNOTSUPP => "EOPNOTSUPP",
                _ => "errno",
            };
            format!("{name} ({errno})")
        }
    }
}

#[test]
fn rlimit_memlock_in_a_forked_child() {
    let _serial = serial();
    let capable = has_ipc_lock();
    loud(&format!(
        "rlimit_memlock: this process {} CAP_IPC_LOCK",
        if capable { "has" } else { "lacks" }
    ));
    for dev in devices_under_test("rlimit_memlock_in_a_forked_child") {
        let name = dev.name();
        // Opened in the parent first: the process-wide state the library
        // initializes lazily exists before fork.
        let ctx = open(&dev);
        let _counts = HandleCounts::new(&ctx, "rlimit_memlock (parent)");
        let d = driver(&ctx);
        let options = OpenOptions::new();
        let ok = 0;
        let enomem = Errno::NOMEM.raw_os_error();
        let eperm = Errno::PERM.raw_os_error();
        // (case, limit, drop CAP_IPC_LOCK, length, expected exit code)
        let mut cases: Vec<(&str, u64, bool, usize, i32)> = Vec::new();
        // Observed on 6.12, on rxe and siw alike (ib_umem_get's rule):
        // CAP_IPC_LOCK bypasses the limit; without it, over the limit is
        // ENOMEM and a limit of 0 is EPERM (can_do_mlock()). On 6.1 siw pins
        // by its own rule: over the limit is ENOMEM, CAP_IPC_LOCK or not,
        // and so is a limit of 0.
        let own_rule = d == Driver::Siw && common::kernel::siw_pins_by_its_own_rule();
        let inherited = if capable && !own_rule { ok } else { enomem };
        cases.push((
            "limit 64 KiB, caps as inherited, reg 1 MiB",
            64 << 10,
            false,
            1 << 20,
            inherited,
        ));
        if capable {
            cases.push((
                "limit 64 KiB, CAP_IPC_LOCK dropped, reg 1 MiB",
                64 << 10,
                true,
                1 << 20,
                enomem,
            ));
            cases.push((
                "limit 64 KiB, CAP_IPC_LOCK dropped, reg 16 KiB (under the limit)",
                64 << 10,
                true,
                16 << 10,
                ok,
            ));
            let zero = if own_rule { enomem } else { eperm };
            cases.push((
                "limit 0, CAP_IPC_LOCK dropped, reg 4 KiB",
                0,
                true,
                4 << 10,
                zero,
            ));
        }
        for (case, limit, drop_cap, len, expected) in cases {
            let code = reg_in_child(&dev, &options, limit, drop_cap, len);
            loud(&format!(
                "{name}: RLIMIT_MEMLOCK: {case}: {}",
                describe(code)
            ));
            if d == Driver::Other {
                assert!(
                    code < CHILD_OTHER_ERROR,
                    "{name}: {case}: {}",
                    describe(code)
                );
            } else {
                assert_eq!(
                    code,
                    expected,
                    "{name}: {case}: got {}, expected {}",
                    describe(code),
                    describe(expected)
                );
            }
        }
        if d == Driver::Other {
            common::note_unknown_driver("rlimit_memlock_in_a_forked_child", &ctx);
        }
    }
}

/// The kernel facts (`common::kernel`) are keyed on the release: its
/// parsing, and the running kernel's reads.
#[test]
fn kernel_releases_parse() {
    use common::kernel::{parse_release, release};
    assert_eq!(parse_release("6.1.0-57-amd64\n"), Some((6, 1)));
    assert_eq!(parse_release("6.12.117+deb12-amd64"), Some((6, 12)));
    assert_eq!(parse_release("junk"), None);
    let (major, _) = release();
    assert!(major >= 3, "{:?}", release());
}
