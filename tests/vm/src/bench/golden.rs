//! The golden test: a fixture console (testdata/console.log, 40 verbs
//! result lines and a benches/ops run, in the benches' real format) renders to
//! exactly the committed testdata/benchmarks.md (the report and the
//! instruction counts' section) and testdata/benchmarks.svg, and a fixture
//! of host a's console in the two-host part (testdata/console-two-host-a.log)
//! renders to testdata/benchmarks-two-host.md, so changes to this
//! module cannot change the report by accident. After an intended change of
//! the report, `UVERBS_BENCH_BLESS=1 cargo test -p uverbs-vm golden`
//! rewrites the files; review their diff.

use super::headline::headline;
use super::markdown::assert_holds;
use super::meta::Meta;
use super::model::{CellKey, Run, Verdict};
use super::ops;
use super::plot;
use super::results::read_all;
use super::targets::Targets;
use super::wire::{Operation, Transport};
use std::path::Path;

/// The verbs cells of `console`, every result line readable.
fn parse(console: &str) -> Run {
    Run::new(&read_all(console))
}

/// The report's verbs part with the committed targets.
fn markdown(run: &Run, meta: &Meta) -> String {
    super::markdown::markdown(run, meta, &Targets::load().unwrap())
}

/// The instruction counts' section of `console`.
fn ops_section(console: &str) -> String {
    let results = read_all(console);
    ops::markdown(&ops::cases(&results.ops), &results.ops_fn).expect("the fixture's ops lines")
}

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
/// kernel lines in between; every ops case on both devices, one failed)
/// is byte for byte the committed markdown and
/// svg: a refactoring of this module must not change what it writes.
#[test]
fn golden_report() {
    let console = include_str!("testdata/console.log");
    let run = parse(console);
    assert_eq!(run.rows.len(), 40);
    let md = markdown(&run, &fixed_meta()) + "\n" + &ops_section(console);
    check_golden("benchmarks.md", &md);
    check_golden("benchmarks.svg", &plot::verbs(&run));
    // From a saved log only the wall-time line differs.
    let mut from_log = fixed_meta();
    from_log.vm_secs = None;
    assert_eq!(
        markdown(&run, &from_log) + "\n" + &ops_section(console),
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
        r#"@@RESULT {"kind":"verbs","device":"rxe0","impl":"ours","transport":"ioctl","fork":"off","op":"reg_dereg","size":1048576,"median_ns":200000,"p10_ns":190000,"p90_ns":220000,"n":50}
@@RESULT {"kind":"verbs","device":"rxe0","impl":"ours","transport":"ioctl","fork":"off","op":"rereg_access","size":1048576,"path":"inplace","median_ns":5000,"p10_ns":4900,"p90_ns":5200,"n":900}
@@RESULT {"kind":"verbs","device":"rxe0","impl":"floor","transport":"ioctl","fork":"off","op":"rereg_access","size":1048576,"median_ns":4900,"p10_ns":4800,"p90_ns":5000,"n":900}
@@RESULT {"kind":"verbs","device":"rxe0","impl":"libibverbs","transport":"auto","fork":"off","op":"rereg_access","size":1048576,"status":"unsupported","detail":"errno=95 ret=-4"}
"#,
    );
    let h = headline(&run);
    assert_holds(
        &h,
        &[
            "| reg+dereg ÷ rereg ACCESS (ours, ioctl; in place): speed-up of rereg | — | — | 40.0× | — | — |",
            "| ours ÷ floor, rereg ACCESS (ioctl) | — | — | 1.02× | — | — |",
        ],
    );
    let t = Targets::load().unwrap().check(&run);
    assert_eq!((t[0].measured.as_str(), t[0].met), ("40.0×", Some(false)));
    assert_eq!((t[1].measured.as_str(), t[1].met), ("not measured", None));
    assert!(t.iter().any(|t| t.label.contains("floor")
        && t.measured == "worst 1.02× (rxe0 1 MiB) of 1 cells"
        && t.met == Some(true)));
}

/// Lines of several passes and rounds fold into one row per cell; the
/// ratio is taken per round, then per pass, and passes that disagree by
/// more than 10 % make it noisy.
#[test]
fn rounds_and_passes_fold_and_ratios_reproduce_or_are_noisy() {
    let line = |pass, round, imp: &str, transport: &str, op: &str, median: u32| {
        format!(
            r#"@@RESULT {{"kind":"verbs","pass":{pass},"round":{round},"device":"rxe0","impl":"{imp}","transport":"{transport}","fork":"off","op":"{op}","size":0,"median_ns":{median},"p10_ns":{median},"p90_ns":{median},"n":10}}"#
        ) + "\n"
    };
    let mut console = String::new();
    for (pass, round, ours_pd, ibv_pd, ours_open, ibv_open) in [
        // alloc+dealloc: 0.90, 0.92 in pass 1 (median 0.91); 0.93, 0.95 in pass 2 (0.94).
        // open: 1.0, 1.0 in pass 1; 1.3, 1.3 in pass 2 (noisy).
        (1, 1, 900, 1000, 100, 100),
        (1, 2, 920, 1000, 200, 200),
        (2, 1, 930, 1000, 130, 100),
        (2, 2, 1900, 2000, 260, 200),
    ] {
        console += &line(pass, round, "ours", "auto", "alloc_dealloc_pd", ours_pd);
        console += &line(
            pass,
            round,
            "libibverbs",
            "auto",
            "alloc_dealloc_pd",
            ibv_pd,
        );
        console += &line(pass, round, "ours", "auto", "context_open", ours_open);
        console += &line(pass, round, "libibverbs", "auto", "context_open", ibv_open);
    }
    let run = parse(&console);
    assert_eq!(run.rows.len(), 4, "one row per cell");
    let pd = CellKey::ours("rxe0", Transport::Auto, Operation::AllocDeallocPd);
    let row = run.get(&pd, 0).unwrap();
    assert_eq!(row.rounds.len(), 4);
    assert_eq!(row.n, 40);
    assert_eq!(row.median, (920.0 + 930.0) / 2.0);
    let ibv = |op| CellKey::libibverbs("rxe0", op);
    match run.verdict(&pd, &ibv(Operation::AllocDeallocPd), 0) {
        Some(Verdict::Measured(r)) => assert!((r - (0.91 + 0.94) / 2.0).abs() < 1e-9, "{r}"),
        other => panic!("{other:?}"),
    }
    let open = CellKey::ours("rxe0", Transport::Auto, Operation::ContextOpen);
    assert_eq!(
        run.verdict(&open, &ibv(Operation::ContextOpen), 0),
        Some(Verdict::Noisy(vec![1.0, 1.3]))
    );
    assert_eq!(run.ratio(&open, &ibv(Operation::ContextOpen), 0), None);
    let h = headline(&run);
    assert_holds(
        &h,
        &[
            "| ours (auto) ÷ libibverbs, alloc+dealloc PD | 0.93× (size-independent) |",
            "| ours (auto) ÷ libibverbs, context open+close | noisy (1.00× / 1.30×) (size-independent) |",
        ],
    );
}

/// The two-host section of a fixture console (host a's, from a real run
/// of the two-host part, trimmed to its runs' output; siw0's ib_send_lat
/// failed in it) is byte for byte the committed
/// testdata/benchmarks-two-host.md.
#[test]
fn golden_two_host_section() {
    let console = include_str!("testdata/console-two-host-a.log");
    let runs = super::two_host::parse(console);
    assert_eq!(runs.len(), 8, "every run of the plan, in order");
    check_golden("benchmarks-two-host.md", &super::two_host::markdown(&runs));
    // Without the two-host boot the section says so.
    assert!(super::two_host::markdown(&[]).contains("Not run"));
}
