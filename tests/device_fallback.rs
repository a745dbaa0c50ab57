//! The replace fallback (`ReregFallback::Replace`, `BufferMr::retarget`) on
//! real devices, and every row of the device table in docs/rereg.md, in
//! both its strict and its replace column.
//!
//! After every replace the kernel is asked directly: its handle counts must
//! show exactly one live MR, a raw DEREG_MR of the old handle must fail
//! (the old registration is gone), and the new registration must cover the
//! new range (registering that range again works, the previous buffer can be
//! unmapped, the MR still deregisters cleanly).
//!
//! The tests of this file run one at a time (see [`serial`]): some unmap
//! memory and then register it, which must not race with other threads
//! mapping memory, and the fork-safety checks read the process-wide tracker.

#[macro_use]
mod common;

use common::{
    alloc_pd, anon, dealloc_refused_busy, fresh_mr, loud, page_size, replace, replace_range,
    rereg_behaviour, serial, snap, Driver, Dut, HandleCounts, Holed, Snapshot, MIB, OWNED, RW_READ,
};
use memmap2::MmapMut;
use uverbs::command::DeregMr;
use uverbs::error::Errno;
use uverbs::fork::ForkMode;
use uverbs::mr::{
    MrState, RemoteBufferMr, ReregError, ReregFallback, ReregFlags, ReregOutcome, ReregPath,
    RetargetBuffers, RetargetError, Retargeted, StableBuffer,
};
use uverbs::{AccessFlags, Context, MemoryRegion};

/// What the kernel (6.12) answers a DEREG_MR of a handle that no longer
/// exists in the context, on both transports: the uobject lookup
/// (`lookup_get_idr_uobject`) finds nothing.
const GONE_ERRNO: Errno = Errno::NOENT;

/// The four changes the replace fallback exists for.
const CHANGES: [ReregFlags; 4] = [
    ReregFlags::ACCESS,
    ReregFlags::PD,
    ReregFlags::TRANSLATION,
    ReregFlags::all(),
];

fn flags_name(flags: ReregFlags) -> String {
    if flags == ReregFlags::all() {
        return "all three".into();
    }
    if flags.is_empty() {
        return "flags = 0".into();
    }
    let names: Vec<&str> = flags.iter_names().map(|(n, _)| n).collect();
    names.join("|")
}

/// The path docs/rereg.md promises for `flags` with `Replace`.
fn documented_path(d: Driver, flags: ReregFlags) -> Option<ReregPath> {
    match d {
        Driver::Siw => Some(ReregPath::Replaced),
        Driver::Rxe if flags.contains(ReregFlags::TRANSLATION) => Some(ReregPath::Replaced),
        Driver::Rxe => Some(ReregPath::InPlace),
        Driver::Other => None,
    }
}

/// Proves that `handle` no longer names an MR in the kernel: a raw
/// DEREG_MR of it must fail with [`GONE_ERRNO`]. Must be called before
/// anything else is created in the context, so the number cannot have
/// been reused.
fn assert_handle_gone(ctx: &Context, case: &str, handle: u32) {
    let name = ctx.device_name();
    // SAFETY: no live object of this test owns `handle` any more; if the
    // kernel still knew it, the library leaked it and the test fails here.
    let result = unsafe { ctx.execute(&DeregMr::new(handle), &mut []) };
    match result {
        Ok(()) => panic!(
            "{name}: {case}: a raw DEREG_MR of the old handle {handle} succeeded: \
             the old registration was still alive in the kernel"
        ),
        Err(e) => {
            loud(&format!(
                "{name}: {case}: raw DEREG_MR of the old handle {handle}: {e}"
            ));
            assert_eq!(
                e.errno(),
                Some(GONE_ERRNO),
                "{name}: {case}: DEREG_MR of the old handle {handle}: {e}"
            );
        }
    }
}

/// Moves `mr` to `[addr, addr + len)` through `Replace`, which must
/// replace it (rxe and siw refuse TRANSLATION in place), and proves the old
/// registration gone.
///
/// # Safety
///
/// The range stays mapped while `mr` covers it.
unsafe fn move_by_replacement(
    ctx: &Context,
    case: &str,
    mr: &mut MemoryRegion,
    addr: *mut u8,
    len: usize,
) {
    let name = ctx.device_name();
    let old = mr.handle();
    // SAFETY: forwarded to the caller.
    let path =
        unsafe { replace_range(mr, addr, len) }.unwrap_or_else(|e| panic!("{name}: {case}: {e}"));
    assert_eq!(path, ReregPath::Replaced, "{name}: {case}");
    assert_handle_gone(ctx, case, old);
}

/// Asserts what a re-registration of `before` into `after` did to the
/// handle and keys: kept in place, all new when replaced.
fn assert_keys(name: &str, case: &str, in_place: bool, before: &Snapshot, after: &Snapshot) {
    if in_place {
        assert_eq!(
            (after.handle, after.lkey, after.rkey),
            (before.handle, before.lkey, before.rkey),
            "{name}: {case}: in place keeps the handle and (rxe) the keys"
        );
    } else {
        assert_ne!(after.handle, before.handle, "{name}: {case}: new handle");
        assert_ne!(after.lkey, before.lkey, "{name}: {case}: new lkey");
        assert_ne!(after.rkey, before.rkey, "{name}: {case}: new rkey");
    }
}

/// True when the process-wide fork safety marks ranges (the fork-forced
/// configuration).
fn fork_marking(ctx: &Context) -> bool {
    ctx.fork_safety().mode() == ForkMode::Enabled
}

/// Whether the mapping containing `addr` is `MADV_DONTFORK` (VM_DONTCOPY,
/// `dc` in /proc/self/smaps' VmFlags).
fn dontfork_in_smaps(addr: usize) -> bool {
    let smaps = std::fs::read_to_string("/proc/self/smaps").expect("reading /proc/self/smaps");
    let mut inside = false;
    for line in smaps.lines() {
        let first = line.split_whitespace().next().unwrap_or("");
        if let Some((lo, hi)) = first.split_once('-') {
            if let (Ok(lo), Ok(hi)) = (usize::from_str_radix(lo, 16), usize::from_str_radix(hi, 16))
            {
                inside = (lo..hi).contains(&addr);
                continue;
            }
        }
        if inside {
            if let Some(flags) = line.strip_prefix("VmFlags:") {
                return flags.split_whitespace().any(|f| f == "dc");
            }
        }
    }
    panic!("{addr:#x} is in no mapping of /proc/self/smaps");
}

/// With fork marking on: the tracker holds exactly `[addr, addr + len)`
/// once, and smaps agrees for it and for `released` (no longer marked).
fn assert_fork_marks(ctx: &Context, case: &str, addr: usize, len: usize, released: Option<usize>) {
    if !fork_marking(ctx) {
        return;
    }
    let name = ctx.device_name();
    assert_eq!(
        ctx.fork_safety().marked_ranges(),
        vec![(addr, addr + len, 1)],
        "{name}: {case}: the fork tracker holds exactly the registered range, once"
    );
    assert!(
        dontfork_in_smaps(addr),
        "{name}: {case}: the registered range is MADV_DONTFORK"
    );
    if let Some(old) = released {
        assert!(
            !dontfork_in_smaps(old),
            "{name}: {case}: the released range is inheritable again"
        );
    }
}

rereg_device_test!(
    replace_takes_the_documented_path_and_leaves_one_live_mr,
    |_, ctx, _, d| {
        let _serial = serial();
        for flags in CHANGES {
            replace_case(&ctx, d, flags);
        }
    }
);

/// One change through `Replace` on a fresh MR, and everything that must
/// hold afterwards.
fn replace_case(ctx: &Dut, d: Driver, flags: ReregFlags) {
    let name = ctx.device_name();
    let case = format!("Replace {}", flags_name(flags));
    let translation = flags.contains(ReregFlags::TRANSLATION);
    ctx.forget_rereg_refusals();
    let counts = HandleCounts::new(ctx, &case);
    let pd1 = alloc_pd(ctx);
    let pd2 = alloc_pd(ctx);
    let mut old_buf = anon(MIB);
    let mut new_buf = anon(2 * MIB);
    old_buf.fill(0x11);
    new_buf.fill(0x22);
    let mut mr = fresh_mr(&pd1, &mut old_buf, RW_READ);
    let before = snap(&mr);
    assert_fork_marks(ctx, &case, before.addr, MIB, None);

    let new_access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ;
    let (addr, len) = if translation {
        (new_buf.as_mut_ptr(), new_buf.len())
    } else {
        (std::ptr::null_mut(), 0)
    };
    let pd = flags.contains(ReregFlags::PD).then_some(&pd2);
    let access = if flags.contains(ReregFlags::ACCESS) {
        new_access
    } else {
        AccessFlags::empty()
    };
    // SAFETY: `new_buf` stays mapped until the MR is deregistered.
    let path = unsafe { mr.rereg_with(ReregFallback::Replace, flags, pd, addr, len, access) }
        .unwrap_or_else(|e| panic!("{name}: {case}: {e}"));
    let after = snap(&mr);
    loud(&format!(
        "{name}: {case}: {path:?}: handle {} -> {}, lkey {:#x} -> {:#x}, rkey {:#x} -> {:#x}",
        before.handle, after.handle, before.lkey, after.lkey, before.rkey, after.rkey
    ));
    assert_eq!(
        Some(path),
        documented_path(d, flags),
        "{name}: {case}: the path docs/rereg.md documents"
    );

    // The recorded attributes are the requested ones.
    let attrs = Snapshot {
        addr: if translation {
            new_buf.as_ptr() as usize
        } else {
            before.addr
        },
        length: if translation { 2 * MIB } else { MIB },
        access: if flags.contains(ReregFlags::ACCESS) {
            new_access
        } else {
            RW_READ
        },
        pd_handle: if flags.contains(ReregFlags::PD) {
            pd2.handle()
        } else {
            pd1.handle()
        },
        ..after
    };
    assert_eq!(after, attrs, "{name}: {case}: the new attributes");
    assert_eq!(
        mr.is_in(&pd2),
        flags.contains(ReregFlags::PD),
        "{name}: {case}: is_in(pd2)"
    );
    assert_keys(name, &case, path == ReregPath::InPlace, &before, &after);
    counts.assert_extra(1, 2, &format!("{case}: exactly one live MR"));
    if path == ReregPath::Replaced {
        assert_handle_gone(ctx, &case, before.handle);
        counts.assert_extra(1, 2, &format!("{case}: after the raw DEREG_MR"));
    }
    assert_fork_marks(
        ctx,
        &case,
        after.addr,
        after.length,
        translation.then_some(before.addr),
    );

    // The refusal is remembered for exactly this combination.
    for other in [
        ReregFlags::ACCESS,
        ReregFlags::PD,
        ReregFlags::TRANSLATION,
        ReregFlags::PD | ReregFlags::ACCESS,
        ReregFlags::all(),
    ] {
        assert_eq!(
            ctx.rereg_known_unsupported(other),
            other == flags && path == ReregPath::Replaced,
            "{name}: {case}: rereg_known_unsupported({})",
            flags_name(other)
        );
    }

    // The kernel holds the MR in the PD it reports: the other PD is free.
    let (free, busy) = if flags.contains(ReregFlags::PD) {
        (pd1, pd2)
    } else {
        (pd2, pd1)
    };
    free.dealloc()
        .unwrap_or_else(|e| panic!("{name}: {case}: dealloc of the PD the MR is not in: {e}"));
    let busy = dealloc_refused_busy(busy, &format!("{case}: dealloc of the MR's PD"));
    counts.assert_extra(1, 1, &format!("{case}: after the PD checks"));

    // The new registration covers its range: register exactly that range
    // again (TRANSLATION is refused in place on both devices, so replaced).
    let again = snap(&mr);
    let same = format!("{case}, same range again");
    // SAFETY: the same range as now, which stays mapped.
    unsafe { move_by_replacement(ctx, &same, &mut mr, again.addr as *mut u8, again.length) };
    let now = snap(&mr);
    assert_eq!(
        (now.addr, now.length, now.access, now.pd_handle),
        (again.addr, again.length, again.access, again.pd_handle),
        "{name}: {same}: the attributes are kept"
    );
    assert_ne!(now.handle, again.handle, "{name}: {same}: a new handle");
    counts.assert_extra(1, 1, &format!("{case}: after the same range again"));
    assert_fork_marks(
        ctx,
        &format!("{case}, same range again"),
        now.addr,
        now.length,
        None,
    );

    // On rxe a strict in-place change works on the replacement too.
    if d == Driver::Rxe {
        mr.set_access(AccessFlags::LOCAL_WRITE)
            .unwrap_or_else(|e| panic!("{name}: {case}: strict set_access afterwards: {e}"));
        assert_eq!(
            mr.handle(),
            now.handle,
            "{name}: {case}: strict in place afterwards"
        );
    }

    // The previous buffer is no longer registered: unmapping it is harmless.
    if translation {
        drop(old_buf);
        new_buf[..4096].fill(0x33);
    }
    mr.dereg()
        .unwrap_or_else(|e| panic!("{name}: {case}: dereg at the end: {e}"));
    counts.assert_extra(0, 1, &format!("{case}: after dereg"));
    if fork_marking(ctx) {
        assert_eq!(
            ctx.fork_safety().marked_ranges(),
            vec![],
            "{name}: {case}: nothing stays marked"
        );
    }
    busy.dealloc()
        .unwrap_or_else(|e| panic!("{name}: {case}: dealloc after dereg: {e}"));
}

/// Asserts a failed replace that left the old MR valid: `Cmd` with the
/// REG_MR errno, or `DontForkNew` when fork safety's madvise refused the new
/// range before any command.
fn assert_replace_failed(
    name: &str,
    case: &str,
    result: Result<ReregPath, ReregError>,
    (outcome, errno): (ReregOutcome, Errno),
) {
    let err = match result {
        Ok(path) => panic!("{name}: {case}: succeeded ({path:?}), expected {outcome:?}/{errno:?}"),
        Err(e) => e,
    };
    loud(&format!("{name}: {case}: {err}"));
    assert_eq!(err.outcome(), outcome, "{name}: {case}: outcome ({err})");
    assert_eq!(err.code(), outcome.code(), "{name}: {case}: code ({err})");
    assert_eq!(err.errno(), errno, "{name}: {case}: errno ({err})");
    assert_eq!(
        err.mr_state(),
        MrState::Old,
        "{name}: {case}: the old MR is valid ({err})"
    );
    if outcome == ReregOutcome::Cmd {
        assert!(
            err.reason().is_some(),
            "{name}: {case}: a failed replace says why ({err})"
        );
    }
}

rereg_device_test!(
    a_failed_new_registration_leaves_the_old_mr_valid,
    |name, ctx, counts, d| {
        let _serial = serial();
        let pd = alloc_pd(&ctx);
        let mut buf = anon(MIB);
        let mut good = anon(2 * MIB);
        let mut mr = fresh_mr(&pd, &mut buf, RW_READ);
        // Mapped but read-only: REG_MR cannot pin it for writing (the MR
        // has write access), while madvise has nothing against it.
        let mut read_only = anon(2 * page_size());
        read_only.fill(0x55);
        let read_only = read_only
            .make_read_only()
            .unwrap_or_else(|e| panic!("mprotect(PROT_READ): {e}"));
        let holed = Holed::new();
        let gone = anon(MIB).as_ptr() as *mut u8; // unmapped again at once
        assert!(
            !ctx.rereg_known_unsupported(ReregFlags::TRANSLATION),
            "{name}: a fresh context knows no refusal"
        );
        // Not all mapped: with fork safety marking, madvise(MADV_DONTFORK)
        // refuses the range first (ENOMEM), as in libibverbs.
        let unmapped = if fork_marking(&ctx) {
            (ReregOutcome::DontForkNew, Errno::NOMEM)
        } else {
            (ReregOutcome::Cmd, Errno::FAULT)
        };
        let cases = [
            // The first goes through REREG_MR (EOPNOTSUPP), then REG_MR.
            (
                "TRANSLATION to a read-only mapping",
                read_only.as_ptr() as *mut u8,
                read_only.len(),
                (ReregOutcome::Cmd, Errno::FAULT),
            ),
            // The others skip REREG_MR: the refusal is remembered.
            (
                "TRANSLATION past the end of a mapping",
                holed.base,
                4 * holed.page,
                unmapped,
            ),
            ("TRANSLATION to unmapped memory", gone, MIB, unmapped),
        ];
        for (i, (case, addr, len, expected)) in cases.into_iter().enumerate() {
            let before = snap(&mr);
            // SAFETY: the registration fails (the range is not all mapped);
            // if it did not, the MR is dropped before the range changes.
            let result = unsafe { replace_range(&mut mr, addr, len) };
            assert_replace_failed(name, case, result, expected);
            assert_eq!(
                snap(&mr),
                before,
                "{name}: {case}: same handle, keys, range"
            );
            counts.assert_extra(1, 1, case);
            assert!(
                ctx.rereg_known_unsupported(ReregFlags::TRANSLATION),
                "{name}: {case}: the in-place refusal is remembered"
            );
            assert_fork_marks(&ctx, case, before.addr, before.length, None);
            // The old MR is usable: a following re-registration works.
            let access = if i % 2 == 0 {
                AccessFlags::LOCAL_WRITE
            } else {
                RW_READ
            };
            let path = replace(&mut mr, ReregFlags::ACCESS, None, access)
                .unwrap_or_else(|e| panic!("{name}: ACCESS change after {case}: {e}"));
            assert_eq!(
                Some(path),
                documented_path(d, ReregFlags::ACCESS),
                "{name}: ACCESS change after {case}"
            );
            assert_eq!(mr.access(), access, "{name}: access after {case}");
            if path == ReregPath::Replaced {
                assert_handle_gone(&ctx, &format!("ACCESS after {case}"), before.handle);
            } else {
                assert_eq!(mr.handle(), before.handle, "{name}: in place after {case}");
            }
            counts.assert_extra(1, 1, &format!("ACCESS change after {case}"));
        }
        // And a valid TRANSLATION replace still works.
        let (addr, len) = (good.as_mut_ptr(), good.len());
        let case = "valid TRANSLATION after the failures";
        // SAFETY: `good` stays mapped until the MR is gone.
        unsafe { move_by_replacement(&ctx, case, &mut mr, addr, len) };
        counts.assert_extra(1, 1, "after the valid TRANSLATION");
        drop(buf);
        mr.dereg()
            .unwrap_or_else(|e| panic!("{name}: dereg after the failures: {e}"));
        counts.assert_extra(0, 1, "after dereg");
        drop(holed);
        drop(read_only);
        drop(good);
    }
);

rereg_device_test!(
    refusals_are_remembered_per_context_and_flag_combination,
    |name, ctx, _, d| {
        let _serial = serial();
        let other = ctx.reopen();
        let counts = HandleCounts::new(&ctx, "refusal cache");
        let combos: Vec<ReregFlags> = (0..8).map(ReregFlags::from_bits_retain).collect();
        for &c in &combos {
            assert!(
                !ctx.rereg_known_unsupported(c),
                "{name}: fresh context: rereg_known_unsupported({})",
                flags_name(c)
            );
        }
        let pd1 = alloc_pd(&ctx);
        let pd2 = alloc_pd(&ctx);
        let mut buf1 = anon(MIB);
        let mut buf2 = anon(MIB);
        let mut mr = fresh_mr(&pd1, &mut buf1, RW_READ);

        // The first refused TRANSLATION (through Replace).
        let (addr, len) = (buf2.as_mut_ptr(), buf2.len());
        // SAFETY: buf2 stays mapped until the MR is gone.
        unsafe { move_by_replacement(&ctx, "first TRANSLATION", &mut mr, addr, len) };
        assert!(
            ctx.rereg_known_unsupported(ReregFlags::TRANSLATION),
            "{name}: TRANSLATION is known refused after the first refusal"
        );
        for &c in &combos {
            if c != ReregFlags::TRANSLATION {
                assert!(
                    !ctx.rereg_known_unsupported(c),
                    "{name}: only TRANSLATION is remembered, not {}",
                    flags_name(c)
                );
            }
            assert!(
                !other.rereg_known_unsupported(c),
                "{name}: another context remembers nothing ({})",
                flags_name(c)
            );
        }

        // ACCESS and PD: stay unknown on rxe (in place), remembered on siw.
        for (flags, pd, access) in [
            (ReregFlags::ACCESS, None, AccessFlags::LOCAL_WRITE),
            (ReregFlags::PD, Some(&pd2), AccessFlags::empty()),
        ] {
            let h = mr.handle();
            let path = replace(&mut mr, flags, pd, access)
                .unwrap_or_else(|e| panic!("{name}: {}: {e}", flags_name(flags)));
            assert_eq!(
                Some(path),
                documented_path(d, flags),
                "{name}: {}",
                flags_name(flags)
            );
            if path == ReregPath::Replaced {
                assert_handle_gone(&ctx, &flags_name(flags), h);
            }
            assert_eq!(
                ctx.rereg_known_unsupported(flags),
                d == Driver::Siw,
                "{name}: rereg_known_unsupported({}) after it {path:?}",
                flags_name(flags)
            );
        }
        assert!(
            ctx.rereg_known_unsupported(ReregFlags::TRANSLATION),
            "{name}: TRANSLATION is still remembered"
        );
        counts.assert_extra(1, 2, "after the remembered changes");

        // A remembered refusal skips straight to the replacement.
        let (addr, len) = (buf1.as_mut_ptr(), buf1.len());
        // SAFETY: buf1 stays mapped until the MR is gone.
        unsafe { move_by_replacement(&ctx, "remembered TRANSLATION", &mut mr, addr, len) };

        // Forgetting clears every combination.
        ctx.forget_rereg_refusals();
        for &c in &combos {
            assert!(
                !ctx.rereg_known_unsupported(c),
                "{name}: after forget_rereg_refusals: {}",
                flags_name(c)
            );
        }

        // A strict refusal is remembered too (and leaves the MR unchanged).
        // SAFETY: buf2 stays mapped until the MR is gone.
        let err = unsafe { mr.set_range(buf2.as_mut_ptr(), buf2.len()) }
            .expect_err("strict TRANSLATION is refused on rxe and siw");
        assert_eq!(
            (err.outcome(), err.errno()),
            (ReregOutcome::Cmd, Errno::OPNOTSUPP),
            "{name}: strict TRANSLATION ({err})"
        );
        assert!(
            ctx.rereg_known_unsupported(ReregFlags::TRANSLATION),
            "{name}: a strict refusal is remembered"
        );
        mr.dereg()
            .unwrap_or_else(|e| panic!("{name}: dereg after the strict refusal: {e}"));
        counts.assert_extra(0, 2, "after dereg");
    }
);

/// One row of the docs/rereg.md device table, as this test expects it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Expect {
    /// Success in place: same handle and keys.
    InPlace,
    /// Success through replacement: new handle and keys.
    Replaced,
    /// A `Cmd` error with this errno and MR state.
    Cmd(Errno, MrState),
}

/// The table of docs/rereg.md: (row, access at registration, flags, new
/// access), then (rxe strict, rxe replace, siw strict, siw replace).
type Row = (
    &'static str,
    AccessFlags,
    ReregFlags,
    AccessFlags,
    [Expect; 4],
);

fn device_table() -> Vec<Row> {
    use Expect::{Cmd, InPlace, Replaced};
    // rxe and siw refuse before changing anything: the MR stays valid.
    let unsupported = Cmd(Errno::OPNOTSUPP, MrState::Old);
    let invalid = Cmd(Errno::INVAL, MrState::Old);
    let read_only = AccessFlags::REMOTE_READ;
    vec![
        (
            "ACCESS",
            RW_READ,
            ReregFlags::ACCESS,
            AccessFlags::LOCAL_WRITE,
            [InPlace, InPlace, unsupported, Replaced],
        ),
        (
            "PD",
            RW_READ,
            ReregFlags::PD,
            AccessFlags::empty(),
            [InPlace, InPlace, unsupported, Replaced],
        ),
        (
            "TRANSLATION",
            RW_READ,
            ReregFlags::TRANSLATION,
            AccessFlags::empty(),
            [unsupported, Replaced, unsupported, Replaced],
        ),
        (
            "all three",
            RW_READ,
            ReregFlags::all(),
            AccessFlags::LOCAL_WRITE,
            [unsupported, Replaced, unsupported, Replaced],
        ),
        (
            "flags = 0",
            RW_READ,
            ReregFlags::empty(),
            AccessFlags::empty(),
            [invalid, invalid, unsupported, unsupported],
        ),
        (
            "REMOTE_WRITE without LOCAL_WRITE",
            RW_READ,
            ReregFlags::ACCESS,
            AccessFlags::REMOTE_WRITE,
            [invalid, invalid, unsupported, invalid],
        ),
        (
            "ACCESS: read-only MR made writable",
            read_only,
            ReregFlags::ACCESS,
            RW_READ,
            [
                Cmd(Errno::ACCESS, MrState::Old),
                Replaced,
                unsupported,
                Replaced,
            ],
        ),
    ]
}

rereg_device_test!(
    every_row_of_the_device_table_in_docs_rereg_md,
    |name, ctx, _, d| {
        let _serial = serial();
        // The rxe columns of a row come first, then the siw ones.
        let column = if d == Driver::Rxe { 0 } else { 2 };
        let mut contradictions = Vec::new();
        for (row, initial, flags, access, expect) in device_table() {
            for (i, fallback) in [ReregFallback::Strict, ReregFallback::Replace]
                .into_iter()
                .enumerate()
            {
                let case = format!("{row} ({fallback:?})");
                let change = (initial, flags, access);
                if let Some(c) = table_case(&ctx, &case, fallback, change, expect[column + i]) {
                    contradictions.push(c);
                }
            }
        }
        assert!(
            contradictions.is_empty(),
            "{name}: rows of docs/rereg.md the kernel contradicts:\n  {}",
            contradictions.join("\n  ")
        );
    }
);

/// Runs one cell of the table on a fresh MR; returns a description of the
/// contradiction, if any. Post-conditions the library promises are asserted.
fn table_case(
    ctx: &Dut,
    case: &str,
    fallback: ReregFallback,
    (initial, flags, access): (AccessFlags, ReregFlags, AccessFlags),
    expect: Expect,
) -> Option<String> {
    let name = ctx.device_name();
    ctx.forget_rereg_refusals();
    let counts = HandleCounts::new(ctx, case);
    let pd1 = alloc_pd(ctx);
    let pd2 = alloc_pd(ctx);
    let mut buf = anon(MIB);
    let mut new_buf = anon(2 * MIB);
    let mut mr = fresh_mr(&pd1, &mut buf, initial);
    let before = snap(&mr);
    let (addr, len) = if flags.contains(ReregFlags::TRANSLATION) {
        (new_buf.as_mut_ptr(), new_buf.len())
    } else {
        (std::ptr::null_mut(), 0)
    };
    let pd = flags.contains(ReregFlags::PD).then_some(&pd2);
    // SAFETY: `new_buf` stays mapped until the MR is gone.
    let result = unsafe { mr.rereg_with(fallback, flags, pd, addr, len, access) };
    let after = snap(&mr);
    let seen = match &result {
        Ok(ReregPath::InPlace) => Expect::InPlace,
        Ok(ReregPath::Replaced) => Expect::Replaced,
        Err(e) if e.outcome() == ReregOutcome::Cmd => Expect::Cmd(e.errno(), e.mr_state()),
        Err(e) => panic!("{name}: {case}: unexpected outcome {:?}: {e}", e.outcome()),
    };
    match &result {
        Ok(path) => loud(&format!(
            "{name}: table: {case}: {path:?}, handle {} -> {}, lkey {:#x} -> {:#x}, rkey {:#x} -> {:#x}",
            before.handle, after.handle, before.lkey, after.lkey, before.rkey, after.rkey
        )),
        Err(e) => loud(&format!("{name}: table: {case}: {e}")),
    }
    let contradiction = (seen != expect)
        .then(|| format!("{case}: docs/rereg.md says {expect:?}, the kernel gave {seen:?}"));
    match seen {
        Expect::InPlace | Expect::Replaced => {
            assert_keys(name, case, seen == Expect::InPlace, &before, &after);
            if seen == Expect::Replaced {
                assert_handle_gone(ctx, case, before.handle);
            }
        }
        Expect::Cmd(_, state) => {
            assert_eq!(
                after, before,
                "{name}: {case}: the old attributes are reported"
            );
            if state == MrState::Old {
                // Valid: a following change works (replaced: siw).
                let path = replace(&mut mr, ReregFlags::ACCESS, None, AccessFlags::LOCAL_WRITE)
                    .unwrap_or_else(|e| {
                        panic!("{name}: {case}: a change of the valid old MR: {e}")
                    });
                if path == ReregPath::Replaced {
                    assert_handle_gone(ctx, &format!("{case}, then ACCESS"), before.handle);
                }
            }
        }
    }
    if flags.is_empty() {
        assert!(
            !ctx.rereg_known_unsupported(flags),
            "{name}: {case}: flags = 0 is never remembered"
        );
    }
    counts.assert_extra(1, 2, case);
    mr.dereg()
        .unwrap_or_else(|e| panic!("{name}: {case}: dereg afterwards: {e}"));
    drop((pd1, pd2, buf, new_buf));
    drop(counts);
    contradiction
}

/// Fills a buffer with a recognisable pattern.
fn pattern<B: StableBuffer>(mut b: B, seed: u8) -> B {
    for (i, byte) in b.as_mut_slice().iter_mut().enumerate() {
        *byte = (i as u8).wrapping_mul(31) ^ seed;
    }
    b
}

fn has_pattern(b: &[u8], seed: u8) -> bool {
    b.iter()
        .enumerate()
        .all(|(i, &byte)| byte == (i as u8).wrapping_mul(31) ^ seed)
}

/// `retarget(new, Replace)` of a region over `old`: the old buffer comes
/// back with its contents, the region covers `new`.
fn retarget_replace<B: StableBuffer>(ctx: &Dut, what: &str, old: B, new: B) {
    let name = ctx.device_name();
    let case = format!("retarget {what} (Replace)");
    let counts = HandleCounts::new(ctx, &case);
    let pd = alloc_pd(ctx);
    let (old_len, new_len) = (old.len(), new.len());
    let mut mr = pd
        .reg_buffer(pattern(old, 0xa5), OWNED)
        .unwrap_or_else(|e| panic!("{name}: {case}: reg_buffer: {}", e.error));
    let before = snap(&mr);
    mr.buffer_mut()[0] ^= 0xff; // written through the region, must come back
                                // SAFETY: no peer knows this region's rkey: nothing READs it (siw
                                // hands a peer-readable buffer back only after this; issue 38).
    unsafe { mr.assume_peer_reads_done() };
    let result = mr.retarget(pattern(new, 0x3c), ReregFallback::Replace);
    let Retargeted {
        mr: mut moved,
        old,
        path,
        fork_warning,
    } = result.unwrap_or_else(|e| panic!("{name}: {case}: {}", e.error));
    let after = snap(&moved);
    loud(&format!(
        "{name}: {case}: {path:?}: handle {} -> {}, rkey {:#x} -> {:#x}",
        before.handle, after.handle, before.rkey, after.rkey
    ));
    assert_eq!(path, ReregPath::Replaced, "{name}: {case}: path");
    assert!(fork_warning.is_none(), "{name}: {case}: {fork_warning:?}");
    assert_ne!(after.handle, before.handle, "{name}: {case}: new handle");
    assert_ne!(after.rkey, before.rkey, "{name}: {case}: new rkey");
    assert_eq!(after.length, new_len, "{name}: {case}: new length");
    assert_eq!(old.len(), old_len, "{name}: {case}: the old buffer");
    let mut expected_old = pattern(vec![0u8; old_len], 0xa5);
    expected_old[0] ^= 0xff;
    assert!(
        old.as_slice() == expected_old.as_slice(),
        "{name}: {case}: the old buffer comes back with its contents"
    );
    assert!(
        has_pattern(moved.buffer(), 0x3c),
        "{name}: {case}: the region holds the new buffer"
    );
    counts.assert_extra(1, 1, &format!("{case}: one live MR"));
    assert_handle_gone(ctx, &case, before.handle);
    drop(old); // no longer registered: freeing it is harmless
    moved.buffer_mut().fill(7);
    // The region still changes as documented.
    let h = moved.handle();
    let path = moved
        .rereg_with(
            ReregFallback::Replace,
            ReregFlags::ACCESS,
            None,
            AccessFlags::LOCAL_WRITE,
        )
        .unwrap_or_else(|e| panic!("{name}: {case}: BufferMr::rereg_with ACCESS: {e}"));
    assert_eq!(
        Some(path),
        documented_path(rereg_behaviour(ctx), ReregFlags::ACCESS),
        "{name}: {case}: BufferMr::rereg_with ACCESS"
    );
    if path == ReregPath::Replaced {
        assert_handle_gone(ctx, &format!("{case}, then ACCESS"), h);
    }
    // SAFETY: no peer knows this region's rkey: nothing READs it (siw
    // hands a peer-readable buffer back only after this; issue 38).
    unsafe { moved.assume_peer_reads_done() };
    let back = match moved.dereg() {
        Ok(b) => b,
        Err(e) => panic!("{name}: {case}: dereg: {e}"),
    };
    assert!(
        back.as_slice().iter().all(|&b| b == 7),
        "{name}: {case}: dereg hands the new buffer back"
    );
    counts.assert_extra(0, 1, &format!("{case}: after dereg"));
    drop(pd);
}

rereg_device_test!(
    retarget_with_replace_hands_the_old_buffer_back_with_its_contents,
    |_, ctx, _, _| {
        let _serial = serial();
        ctx.forget_rereg_refusals();
        retarget_replace::<Box<[u8]>>(
            &ctx,
            "Box<[u8]>",
            vec![0u8; 64 << 10].into_boxed_slice(),
            vec![0u8; (128 << 10) + 100].into_boxed_slice(),
        );
        // Again on the same context: now the refusal is remembered.
        retarget_replace::<MmapMut>(&ctx, "MmapMut", anon(MIB), anon(2 * MIB));
    }
);

rereg_device_test!(
    strict_retarget_keeps_the_region_when_the_device_refuses,
    |name, ctx, counts, _| {
        let _serial = serial();
        let pd = alloc_pd(&ctx);
        let mut mr = pd
            .reg_buffer(pattern(anon(MIB), 0x17), OWNED)
            .unwrap_or_else(|e| panic!("{name}: reg_buffer: {}", e.error));
        // SAFETY: no peer knows this region's rkey: nothing READs it (siw
        // hands a peer-readable buffer back only after this; issue 38).
        unsafe { mr.assume_peer_reads_done() };
        let before = snap(&mr);
        let result = mr.retarget(pattern(anon(2 * MIB), 0x71), ReregFallback::Strict);
        let RetargetError { error, buffers, .. } = match result {
            Ok(r) => panic!("{name}: strict retarget succeeded ({:?})", r.path),
            Err(e) => e,
        };
        loud(&format!("{name}: strict retarget: {error}"));
        // rxe and siw refuse TRANSLATION before changing anything.
        assert_eq!(
            (error.outcome(), error.errno(), error.mr_state()),
            (ReregOutcome::Cmd, Errno::OPNOTSUPP, MrState::Old),
            "{name}: strict retarget ({error})"
        );
        let RetargetBuffers::Kept { mr, new } = buffers else {
            panic!("{name}: strict retarget released a region the kernel left unchanged")
        };
        assert_eq!(snap(&mr), before, "{name}: the region is unchanged");
        assert!(
            has_pattern(mr.buffer(), 0x17) && mr.buffer().len() == MIB,
            "{name}: the region keeps its buffer intact"
        );
        let new = new.unwrap_or_else(|| panic!("{name}: the new buffer must come back"));
        assert!(
            has_pattern(&new, 0x71) && new.len() == 2 * MIB,
            "{name}: the new buffer comes back intact"
        );
        counts.assert_extra(1, 1, "after the refused retarget");
        let old = mr
            .dereg()
            .unwrap_or_else(|e| panic!("{name}: dereg of the kept region: {e}"));
        assert!(has_pattern(&old, 0x17));
        counts.assert_extra(0, 1, "after dereg");
        assert_handle_gone(&ctx, "strict retarget, then dereg", before.handle);
        drop(pd);
    }
);

/// What the remote region of [`remote_buffer_access_changes_through_the_fallback`]
/// is given: a peer may write it.
const PEER_WRITABLE: AccessFlags = RW_READ;

/// Every byte of a remote region, copied out.
fn remote_bytes<B: StableBuffer>(mr: &mut RemoteBufferMr<B>) -> Vec<u8> {
    let mut out = vec![0; mr.len()];
    mr.copy_out(0, &mut out).expect("the whole buffer");
    out
}

rereg_device_test!(
    remote_buffer_access_changes_through_the_fallback,
    |name, ctx, counts, d| {
        // issue 38, item 4: a RemoteBufferMr whose device refuses ACCESS in
        // place (siw; rxe on 6.1) gets it by replacement, with the same
        // outcomes as a MemoryRegion: new keys, the buffer and its bytes
        // kept, the old registration gone; rxe on 6.12 does it in place.
        let _serial = serial();
        ctx.forget_rereg_refusals();
        // Both PDs first: no object is created between a replacement and
        // the check that the old handle is gone.
        let pd1 = alloc_pd(&ctx);
        let pd2 = alloc_pd(&ctx);
        let mut mr = pd1
            .reg_remote_buffer(pattern(anon(MIB), 0x5e), OWNED)
            .unwrap_or_else(|e| panic!("{name}: reg_remote_buffer: {}", e.error));
        let before = snap(mr.mr());
        counts.assert_extra(1, 2, "registered");

        // Strict: in place on rxe 6.12; refused with the region unchanged
        // where the kernel cannot.
        match (d, mr.set_access(PEER_WRITABLE)) {
            (Driver::Rxe, Ok(())) => {
                assert_keys(name, "strict set_access", true, &before, &snap(mr.mr()));
                mr.set_access(OWNED)
                    .unwrap_or_else(|e| panic!("{name}: strict set_access back: {e}"));
            }
            (Driver::Siw, Err(e)) => {
                loud(&format!("{name}: RemoteBufferMr::set_access: {e}"));
                assert_eq!(
                    (e.outcome(), e.errno(), e.mr_state()),
                    (ReregOutcome::Cmd, Errno::OPNOTSUPP, MrState::Old),
                    "{name}: strict set_access ({e})"
                );
            }
            (d, r) => panic!("{name}: strict set_access as {d:?}: {r:?}"),
        }
        assert_eq!(
            snap(mr.mr()),
            before,
            "{name}: strict: the region as it was"
        );

        // The fallback.
        let case = "RemoteBufferMr::rereg_with(Replace, ACCESS)";
        let path = mr
            .rereg_with(
                ReregFallback::Replace,
                ReregFlags::ACCESS,
                None,
                PEER_WRITABLE,
            )
            .unwrap_or_else(|e| panic!("{name}: {case}: {e}"));
        let after = snap(mr.mr());
        loud(&format!(
            "{name}: {case}: {path:?}: handle {} -> {}, rkey {:#x} -> {:#x}",
            before.handle, after.handle, before.rkey, after.rkey
        ));
        assert_eq!(
            Some(path),
            documented_path(d, ReregFlags::ACCESS),
            "{name}: {case}: the path docs/rereg.md documents"
        );
        assert_keys(name, case, path == ReregPath::InPlace, &before, &after);
        assert_eq!(
            after,
            Snapshot {
                access: PEER_WRITABLE,
                handle: after.handle,
                lkey: after.lkey,
                rkey: after.rkey,
                ..before
            },
            "{name}: {case}: the same memory and PD, the new access"
        );
        assert_eq!(mr.rkey(), after.rkey, "{name}: {case}: rkey()");
        if path == ReregPath::Replaced {
            assert_handle_gone(&ctx, case, before.handle);
        }
        counts.assert_extra(1, 2, &format!("{case}: exactly one live MR"));
        assert!(
            has_pattern(&remote_bytes(&mut mr), 0x5e),
            "{name}: {case}: the bytes are kept"
        );

        // PD and access together, as a change set.
        let case = "RemoteBufferMr::apply(Replace, PD | ACCESS)";
        let h = mr.mr().handle();
        let change = uverbs::mr::Rereg::new().pd(&pd2).access(OWNED);
        let path = mr
            .apply(&change, ReregFallback::Replace)
            .unwrap_or_else(|e| panic!("{name}: {case}: {e}"));
        assert_eq!(
            Some(path),
            documented_path(d, ReregFlags::PD | ReregFlags::ACCESS),
            "{name}: {case}"
        );
        if path == ReregPath::Replaced {
            assert_handle_gone(&ctx, case, h);
        }
        assert!(mr.mr().is_in(&pd2), "{name}: {case}: in pd2");
        assert_eq!(mr.mr().access(), OWNED, "{name}: {case}");
        counts.assert_extra(1, 2, &format!("{case}: exactly one live MR"));
        pd1.dealloc()
            .unwrap_or_else(|e| panic!("{name}: {case}: pd1 is free: {}", e.error));
        let pd2 = dealloc_refused_busy(pd2, &format!("{case}: the region's PD"));

        // A translation is refused before anything is sent.
        let err = mr
            .rereg_with(
                ReregFallback::Replace,
                ReregFlags::TRANSLATION,
                None,
                AccessFlags::empty(),
            )
            .expect_err("an owned buffer moves through retarget");
        assert_eq!(err.outcome(), ReregOutcome::Input, "{name}: {err}");

        // SAFETY: no peer knows this region's rkey: nothing READs it (siw
        // hands a peer-readable buffer back only after this; issue 38).
        unsafe { mr.assume_peer_reads_done() };
        let bytes = mr
            .dereg()
            .unwrap_or_else(|e| panic!("{name}: dereg: {}", e.error));
        assert!(has_pattern(&bytes, 0x5e), "{name}: the buffer back, kept");
        counts.assert_extra(0, 1, "after dereg");
        drop(pd2);
    }
);
