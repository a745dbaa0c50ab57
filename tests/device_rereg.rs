//! Re-registration in place (REREG_MR) on real devices: every row of the
//! kernel 6.12 table in shared/reference/soft-rdma-vm.md, through the
//! library's API, plus the input checks that never reach the kernel. On
//! Linux 6.1 rxe refuses every REREG_MR as siw does, and is held to siw's
//! rows (`common::rereg_behaviour`).
//!
//! Each case starts from a fresh 1 MiB MR on pd1 with access
//! LOCAL_WRITE | REMOTE_READ | REMOTE_WRITE.

#[macro_use]
mod common;

use common::{
    alloc_pd, anon, dealloc_refused_busy, fresh_mr, loud, pd_and_fresh_mr, rereg_behaviour, snap,
    Driver, Dut, HandleCounts, ReregCase, Snapshot, MIB, RW_READ,
};
use uverbs::error::Errno;
use uverbs::mr::{MrState, ReregError, ReregFlags, ReregOutcome};
use uverbs::{AccessFlags, MemoryRegion};

/// Asserts a refusal's outcome and libibverbs' code for it, its errno,
/// and the MR known to be unchanged (mr_state Old).
fn assert_unchanged_by(
    err: &ReregError,
    (outcome, code): (ReregOutcome, i32),
    errno: Errno,
    name: &str,
    case: &str,
) {
    assert_eq!(err.outcome(), outcome, "{name}: {case}: outcome ({err})");
    assert_eq!(err.code(), code, "{name}: {case}: code ({err})");
    assert_eq!(err.errno(), errno, "{name}: {case}: errno ({err})");
    assert_eq!(
        err.mr_state(),
        MrState::Old,
        "{name}: {case}: mr_state ({err})"
    );
}

/// Asserts a kernel refusal: outcome Cmd (−4), the given errno, and the MR
/// known to be unchanged (rxe and siw refuse before changing anything).
fn assert_cmd(name: &str, case: &str, result: Result<(), ReregError>, errno: Errno) {
    let err = result
        .err()
        .unwrap_or_else(|| panic!("{name}: {case}: succeeded, expected Cmd/{errno:?}"));
    loud(&format!("{name}: {case}: {err}"));
    assert_unchanged_by(&err, (ReregOutcome::Cmd, -4), errno, name, case);
    assert_eq!(err.device(), name, "{name}: {case}: device ({err})");
}

/// Asserts a refusal before the kernel: outcome Input (−1), EINVAL, MR unchanged.
fn assert_input(name: &str, case: &str, result: Result<(), ReregError>) {
    let err = result
        .err()
        .unwrap_or_else(|| panic!("{name}: {case}: succeeded, expected Input/EINVAL"));
    assert_unchanged_by(&err, (ReregOutcome::Input, -1), Errno::INVAL, name, case);
    assert!(
        err.reason().is_some(),
        "{name}: {case}: an Input error says why ({err})"
    );
}

fn dereg_ok(name: &str, case: &str, mr: MemoryRegion) {
    mr.dereg()
        .unwrap_or_else(|e| panic!("{name}: {case}: explicit dereg afterwards failed: {e}"));
}

device_test!(change_access_to_local_write, |name, ctx, counts| {
    let (_pd1, _buf, mut mr) = pd_and_fresh_mr(&ctx, MIB);
    let before = snap(&mr);
    let result = mr.set_access(AccessFlags::LOCAL_WRITE);
    match rereg_behaviour(&ctx) {
        Driver::Rxe => {
            result.unwrap_or_else(|e| panic!("{name}: ACCESS -> LOCAL_WRITE: {e}"));
            let after = snap(&mr);
            assert_eq!(
                after,
                Snapshot {
                    access: AccessFlags::LOCAL_WRITE,
                    ..before
                },
                "{name}: in place: same handle, keys unchanged, new access"
            );
            // And back again: a second in-place change on the same MR.
            mr.set_access(RW_READ)
                .unwrap_or_else(|e| panic!("{name}: ACCESS -> RW_READ again: {e}"));
            assert_eq!(snap(&mr), before, "{name}: back to the original access");
        }
        Driver::Siw => {
            assert_cmd(name, "ACCESS -> LOCAL_WRITE", result, Errno::OPNOTSUPP);
            assert_eq!(
                snap(&mr),
                before,
                "{name}: the old attributes are still reported"
            );
        }
        Driver::Other => common::note_unknown_driver("change_access_to_local_write", &ctx),
    }
    counts.assert_extra(1, 1, "after the rereg");
    dereg_ok(name, "ACCESS", mr);
});

device_test!(change_pd_moves_the_mr_in_the_kernel, |name, ctx, counts| {
    let (pd1, _buf, mut mr) = pd_and_fresh_mr(&ctx, MIB);
    let pd2 = alloc_pd(&ctx);
    let before = snap(&mr);
    let result = mr.set_pd(&pd2);
    match rereg_behaviour(&ctx) {
        Driver::Rxe => {
            result.unwrap_or_else(|e| panic!("{name}: PD -> pd2: {e}"));
            assert_eq!(
                snap(&mr),
                Snapshot {
                    pd_handle: pd2.handle(),
                    ..before
                },
                "{name}: in place: same handle and keys, now in pd2"
            );
            assert!(
                mr.is_in(&pd2) && !mr.is_in(&pd1),
                "{name}: is_in after the move"
            );
            // The kernel really moved it: pd2 is busy, pd1 is free.
            let pd2 = dealloc_refused_busy(pd2, "dealloc(pd2) after the move");
            pd1.dealloc()
                .unwrap_or_else(|e| panic!("{name}: dealloc(pd1) after the MR left it: {e}"));
            counts.assert_extra(1, 1, "after the move and pd1's dealloc");
            dereg_ok(name, "PD", mr);
            pd2.dealloc()
                .unwrap_or_else(|e| panic!("{name}: dealloc(pd2) after the MR is gone: {e}"));
        }
        Driver::Siw => {
            assert_cmd(name, "PD -> pd2", result, Errno::OPNOTSUPP);
            assert_eq!(snap(&mr), before, "{name}: the old PD is still reported");
            assert!(mr.is_in(&pd1), "{name}: still in pd1");
            // Nothing moved: pd2 is free, pd1 is busy.
            pd2.dealloc()
                .unwrap_or_else(|e| panic!("{name}: dealloc(pd2) after the refused move: {e}"));
            let pd1 = dealloc_refused_busy(pd1, "dealloc(pd1), which still holds the MR");
            dereg_ok(name, "PD", mr);
            pd1.dealloc()
                .unwrap_or_else(|e| panic!("{name}: dealloc(pd1) after dereg: {e}"));
        }
        Driver::Other => common::note_unknown_driver("change_pd_moves_the_mr_in_the_kernel", &ctx),
    }
});

device_test!(
    change_translation_to_a_new_2mib_buffer_is_refused,
    |name, ctx, counts| {
        let (_pd1, _buf, mut mr) = pd_and_fresh_mr(&ctx, MIB);
        let mut new_buf = anon(2 * MIB);
        let before = snap(&mr);
        // SAFETY: `new_buf` outlives the MR.
        let result = unsafe { mr.set_range(new_buf.as_mut_ptr(), new_buf.len()) };
        match rereg_behaviour(&ctx) {
            // rxe: "flags = 0x1 not supported"; siw: no rereg at all.
            Driver::Rxe | Driver::Siw => {
                assert_cmd(name, "TRANSLATION -> 2 MiB", result, Errno::OPNOTSUPP);
                assert_eq!(snap(&mr), before, "{name}: the old range is still reported");
            }
            Driver::Other => common::note_unknown_driver(
                "change_translation_to_a_new_2mib_buffer_is_refused",
                &ctx,
            ),
        }
        counts.assert_extra(1, 1, "the MR survives the refused command in the kernel");
        dereg_ok(name, "TRANSLATION", mr);
        counts.assert_extra(0, 1, "after dereg");
    }
);

device_test!(all_three_flags_are_refused, |name, ctx, counts| {
    let (_pd1, _buf, mut mr) = pd_and_fresh_mr(&ctx, MIB);
    let pd2 = alloc_pd(&ctx);
    let mut new_buf = anon(2 * MIB);
    let before = snap(&mr);
    // SAFETY: `new_buf` outlives the MR.
    let result = unsafe {
        mr.rereg(
            ReregFlags::all(),
            Some(&pd2),
            new_buf.as_mut_ptr(),
            new_buf.len(),
            AccessFlags::LOCAL_WRITE,
        )
    };
    match rereg_behaviour(&ctx) {
        Driver::Rxe | Driver::Siw => {
            assert_cmd(name, "TRANSLATION|PD|ACCESS", result, Errno::OPNOTSUPP);
            assert_eq!(
                snap(&mr),
                before,
                "{name}: old range, PD and access still reported"
            );
            // The kernel did not move it either.
            pd2.dealloc()
                .unwrap_or_else(|e| panic!("{name}: dealloc(pd2) after the refused move: {e}"));
        }
        Driver::Other => common::note_unknown_driver("all_three_flags_are_refused", &ctx),
    }
    counts.assert_extra(1, 1, "the MR survives");
    dereg_ok(name, "all flags", mr);
});

/// The test body for a change that rxe refuses with EINVAL and siw with
/// EOPNOTSUPP, on a fresh MR: outcome Cmd with the MR unchanged, still
/// registered, and deregistered cleanly afterwards.
fn refused_on_a_fresh_mr(
    test: &'static str,
    case: &'static str,
    change: impl Fn(&mut MemoryRegion) -> Result<(), ReregError>,
) -> impl FnMut(&str, Dut, &HandleCounts) {
    move |name, ctx, counts| {
        let (_pd1, _buf, mut mr) = pd_and_fresh_mr(&ctx, MIB);
        let before = snap(&mr);
        let result = change(&mut mr);
        match rereg_behaviour(&ctx) {
            Driver::Rxe => assert_cmd(name, case, result, Errno::INVAL),
            Driver::Siw => assert_cmd(name, case, result, Errno::OPNOTSUPP),
            Driver::Other => common::note_unknown_driver(test, &ctx),
        }
        assert_eq!(snap(&mr), before, "{name}: {case}: nothing changed");
        counts.assert_extra(1, 1, "the MR survives");
        dereg_ok(name, case, mr);
    }
}

device_test!(
    no_flags_go_to_the_kernel_and_are_refused,
    refused_on_a_fresh_mr(
        "no_flags_go_to_the_kernel_and_are_refused",
        "flags = 0",
        // SAFETY: no TRANSLATION, no memory handed over.
        |mr| unsafe {
            mr.rereg(
                ReregFlags::empty(),
                None,
                std::ptr::null_mut(),
                0,
                AccessFlags::empty(),
            )
        },
    )
);

device_test!(
    remote_write_without_local_write_is_refused,
    refused_on_a_fresh_mr(
        "remote_write_without_local_write_is_refused",
        "ACCESS -> REMOTE_WRITE",
        |mr| mr.set_access(AccessFlags::REMOTE_WRITE),
    )
);

device_test!(
    access_and_pd_together_in_one_command,
    |name, ctx, counts| {
        // Not a row of the reference table: rxe's rereg supports PD | ACCESS
        // (RXE_MR_REREG_SUPPORTED), so both must change in one command.
        let (pd1, _buf, mut mr) = pd_and_fresh_mr(&ctx, MIB);
        let pd2 = alloc_pd(&ctx);
        let before = snap(&mr);
        let new_access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ;
        // SAFETY: no TRANSLATION, no memory handed over.
        let result = unsafe {
            mr.rereg(
                ReregFlags::PD | ReregFlags::ACCESS,
                Some(&pd2),
                std::ptr::null_mut(),
                0,
                new_access,
            )
        };
        match rereg_behaviour(&ctx) {
            Driver::Rxe => {
                result.unwrap_or_else(|e| panic!("{name}: PD|ACCESS: {e}"));
                assert_eq!(
                    snap(&mr),
                    Snapshot {
                        pd_handle: pd2.handle(),
                        access: new_access,
                        ..before
                    },
                    "{name}: both changed in place"
                );
                pd1.dealloc()
                    .unwrap_or_else(|e| panic!("{name}: dealloc(pd1) after the move: {e}"));
            }
            Driver::Siw => {
                assert_cmd(name, "PD|ACCESS", result, Errno::OPNOTSUPP);
                assert_eq!(snap(&mr), before, "{name}: nothing changed");
                pd2.dealloc()
                    .unwrap_or_else(|e| panic!("{name}: dealloc(pd2) after the refused move: {e}"));
            }
            Driver::Other => {
                common::note_unknown_driver("access_and_pd_together_in_one_command", &ctx)
            }
        }
        counts.assert_extra(1, 1, "after the rereg and one dealloc");
        dereg_ok(name, "PD|ACCESS", mr);
    }
);

device_test!(
    bad_input_is_refused_before_the_kernel_and_leaves_the_mr_usable,
    |name, ctx, _| {
        let other_ctx = ctx.reopen();
        let counts = HandleCounts::new(&ctx, "rereg bad input");
        let other_counts = HandleCounts::new(&other_ctx, "rereg bad input (other context)");
        let pd1 = alloc_pd(&ctx);
        let pd2 = alloc_pd(&ctx);
        let foreign_pd = other_ctx
            .alloc_pd()
            .unwrap_or_else(|e| panic!("{name}: alloc_pd in a 2nd context: {e}"));
        let mut buf = anon(MIB);
        let mut new_buf = anon(2 * MIB);
        let new_ptr = new_buf.as_mut_ptr();
        let mut mr = fresh_mr(&pd1, &mut buf, RW_READ);
        let d = rereg_behaviour(&ctx);
        let null = std::ptr::null_mut::<u8>();
        let none = AccessFlags::empty();
        let cases: [ReregCase; 8] = [
            (
                "unknown flag bit 1<<3",
                ReregFlags::from_bits_retain(1 << 3),
                None,
                null,
                0,
                none,
            ),
            (
                "unknown flag bits with ACCESS",
                ReregFlags::from_bits_retain(0x104),
                None,
                null,
                0,
                RW_READ,
            ),
            (
                "TRANSLATION with zero length",
                ReregFlags::TRANSLATION,
                None,
                new_ptr,
                0,
                none,
            ),
            (
                "TRANSLATION with a null address",
                ReregFlags::TRANSLATION,
                None,
                null,
                2 * MIB,
                none,
            ),
            (
                "access without the ACCESS flag",
                ReregFlags::PD,
                Some(&pd2),
                null,
                0,
                AccessFlags::LOCAL_WRITE,
            ),
            ("PD flag without a PD", ReregFlags::PD, None, null, 0, none),
            (
                "PD of another context",
                ReregFlags::PD,
                Some(&foreign_pd),
                null,
                0,
                none,
            ),
            (
                "TRANSLATION range wrapping around",
                ReregFlags::TRANSLATION,
                None,
                usize::MAX as *mut u8,
                2,
                none,
            ),
        ];
        for (i, (case, flags, pd, addr, len, access)) in cases.into_iter().enumerate() {
            let before = snap(&mr);
            // SAFETY: every case is refused before the kernel; none hands memory over.
            let result = unsafe { mr.rereg(flags, pd, addr, len, access) };
            assert_input(name, case, result);
            assert_eq!(snap(&mr), before, "{name}: {case}: the MR is unchanged");
            counts.assert_extra(1, 2, case);
            // The MR is still usable: a valid rereg reaches the kernel.
            let next = if i % 2 == 0 {
                AccessFlags::LOCAL_WRITE
            } else {
                RW_READ
            };
            match d {
                Driver::Rxe => {
                    mr.set_access(next)
                        .unwrap_or_else(|e| panic!("{name}: valid rereg after {case}: {e}"));
                    assert_eq!(
                        mr.access(),
                        next,
                        "{name}: access after the valid rereg following {case}"
                    );
                }
                Driver::Siw => assert_cmd(
                    name,
                    &format!("valid rereg after {case}"),
                    mr.set_access(next),
                    Errno::OPNOTSUPP,
                ),
                Driver::Other => {}
            }
        }
        if d == Driver::Other {
            common::note_unknown_driver(
                "bad_input_is_refused_before_the_kernel_and_leaves_the_mr_usable",
                &ctx,
            );
        }
        // The foreign PD was not touched: its own context can free it.
        foreign_pd
            .dealloc()
            .unwrap_or_else(|e| panic!("{name}: dealloc of the other context's PD: {e}"));
        other_counts.assert_extra(0, 0, "other context after its PD is freed");
        dereg_ok(name, "bad input", mr);
        drop(new_buf);
    }
);
