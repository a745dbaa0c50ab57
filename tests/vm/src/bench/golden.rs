//! The golden test: a fixture console (testdata/console.log, 40 lines in
//! the bench's real format) renders to exactly the committed
//! testdata/benchmarks.md and testdata/benchmarks.svg, so changes to this
//! module cannot change the report by accident. After an intended change of
//! the report, `UVERBS_BENCH_BLESS=1 cargo test -p uverbs-vm golden`
//! rewrites the files; review their diff.

use super::headline::headline;
use super::markdown::markdown;
use super::meta::Meta;
use super::parse::parse;
use super::svg::svg;
use super::targets::targets;
use std::path::Path;

/// The host facts of the golden report, fixed so that it does not
/// depend on the machine or the clock.
fn fixed_meta() -> Meta {
    Meta {
        date: "2026-11-29 14:15 UTC".into(),
        host_cpu: "Intel(R) Xeon(R) Processor".into(),
        host_cores: 2,
        host_kernel: "6.18.44-fc-v669".into(),
        qemu: "QEMU emulator version 7.2.22 (Debian 1:7.2+dfsg-7+deb12u18+b3)".into(),
        rustc: "rustc 1.95.0 (59807616e 2026-04-14)".into(),
        libibverbs: "44.0-2".into(),
        vm_secs: Some(142.4),
        total_secs: 145.2,
    }
}

/// Compares `actual` with the committed file `testdata/<name>`, or
/// rewrites that file when `UVERBS_BENCH_BLESS=1`.
fn check_golden(name: &str, actual: &str) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("src/bench/testdata")
        .join(name);
    if std::env::var_os("UVERBS_BENCH_BLESS").is_some_and(|v| v == "1") {
        std::fs::write(&path, actual).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    if let Some((i, (want, got))) = expected
        .lines()
        .zip(actual.lines())
        .enumerate()
        .find(|(_, (a, b))| a != b)
    {
        panic!(
            "{name} differs at line {}:\n  expected: {want}\n  actual:   {got}",
            i + 1
        );
    }
    assert!(
        expected == actual,
        "{name}: {} lines expected, {} rendered (or the line ends differ)",
        expected.lines().count(),
        actual.lines().count()
    );
}

/// The report of a fixture console (both devices, every implementation,
/// transport and fork mode, unsupported and failed cells, a mixed path,
/// kernel lines in between) is byte for byte the committed markdown and
/// svg: a refactoring of this module must not change what it writes.
#[test]
fn golden_report() {
    let run = parse(include_str!("testdata/console.log"));
    assert_eq!(run.rows.len(), 40);
    let md = markdown(&run, &fixed_meta());
    check_golden("benchmarks.md", &md);
    check_golden("benchmarks.svg", &svg(&run));
    // From a saved log only the wall-time line differs.
    let mut from_log = fixed_meta();
    from_log.vm_secs = None;
    assert_eq!(
        markdown(&run, &from_log),
        md.replace(
            "| wall time | 145 s for `cargo vm bench` (build, boot and 142 s of qemu) |",
            "| wall time | (regenerated from a saved log) |"
        )
    );
}

/// The ratios and targets of a small run, checked by value.
#[test]
fn small_run_ratios_and_targets() {
    let run = parse(
        "\
@@BENCH device=rxe0 impl=ours transport=ioctl fork=off op=reg_dereg size=1048576 median_ns=200000 p10_ns=190000 p90_ns=220000 n=50
@@BENCH device=rxe0 impl=ours transport=ioctl fork=off op=rereg_access size=1048576 path=inplace median_ns=5000 p10_ns=4900 p90_ns=5200 n=900
@@BENCH device=rxe0 impl=floor transport=ioctl fork=off op=rereg_access size=1048576 median_ns=4900 p10_ns=4800 p90_ns=5000 n=900
@@BENCH device=rxe0 impl=libibverbs transport=auto fork=off op=rereg_access size=1048576 status=unsupported errno=95 ret=-4
",
    );
    let h = headline(&run);
    assert!(
        h.contains("| reg+dereg ÷ rereg ACCESS (ours, ioctl; in place): speed-up of rereg | — | — | 40.0× | — | — |"),
        "{h}"
    );
    assert!(
        h.contains("| ours ÷ floor, rereg ACCESS (ioctl) | — | — | 1.02× | — | — |"),
        "{h}"
    );
    let t = targets(&run);
    assert_eq!((t[0].measured.as_str(), t[0].met), ("40.0×", Some(false)));
    assert_eq!((t[1].measured.as_str(), t[1].met), ("not measured", None));
    assert!(t.iter().any(|t| t.label.contains("floor")
        && t.measured == "worst 1.02× (rxe0 1 MiB) of 1 cells"
        && t.met == Some(true)));
}
