//! The fork tracker beside libibverbs': uverbs' `ForkSafety` and rdma-core
//! 44's `ibv_dontfork_range` / `ibv_dofork_range` (Debian's static
//! libibverbs, unmodified, linked into this binary; its tracker is a tree
//! of page ranges with reference counts), each with N live ranges, on the
//! host (no device is involved: both mark pages with `madvise`).
//!
//! The scenarios are those of `benches/fork_ranges.rs` and
//! `src/fork/ir_probe.rs`, on real memory (untouched `MAP_NORESERVE`
//! mappings, one per implementation) with the real `madvise`:
//!
//! * `gap`: N disjoint one-page ranges, one page every other page, and a
//!   one-page range in a gap between two of them;
//! * `live`: a second reference on part of one of those ranges;
//! * `overlap`: N three-page ranges every two pages (an entry per page,
//!   counts 1, 2, 1, 2…) and a five-page range among them.
//!
//! N is 1,000 and 10,000 for all three, and 100,000 for `overlap` only:
//! every disjoint `MADV_DONTFORK` range is a VMA of its own in the kernel,
//! and 100,000 of them pass `vm.max_map_count` (65,530 by default) with
//! either library, while overlapping ones make one VMA.
//!
//! Two measures per call, mark and unmark:
//!
//! * **time**: the median (and p90) of single calls, `SAMPLES` mark/unmark
//!   pairs per scenario, including the kernel's `madvise`. The libraries
//!   differ there by design: uverbs applies `MADV_DONTFORK` to the whole
//!   range on every mark (a page unmapped and mapped anew since the last
//!   mark would otherwise stay inheritable while counted; see
//!   `src/fork/ranges.rs`), libibverbs only to the pages whose count goes
//!   0 → 1, so on `live` and `overlap` marks it makes no system call and
//!   uverbs one. Both call `madvise(MADV_DOFORK)` only for pages going 1 → 0.
//! * **instructions**: callgrind's inclusive user-space count of one call
//!   (the kernel is not counted), `PAIRS` pairs per scenario: this binary
//!   re-runs itself under callgrind once per N (`--child N`), collecting
//!   only inside its `probe_*` functions.
//!
//! `cargo bench -p uverbs-oracle --bench fork_tracker` (with the archives
//! `cargo vm` unpacks, `UVERBS_VM_CACHE` naming its cache, or
//! `UVERBS_ORACLE_LIBDIRS`; without them it says SKIPPED). Options:
//! `--valgrind PATH`; `--no-ir` skips the callgrind part. Prints the
//! markdown tables of docs/growth.md.

#[cfg(not(oracle_linked))]
fn main() {
    eprintln!(
        "SKIPPED: fork_tracker: libibverbs is not linked ({})",
        env!("UVERBS_ORACLE_MISSING")
    );
}

// The wrapped system calls' answers: libibverbs is linked with them
// wrapped (build.rs); here everything but its RDMA netlink socket goes to
// the C library.
#[cfg(oracle_linked)]
#[allow(dead_code)]
#[path = "../tests/shim/mod.rs"]
mod shim;

// The places drawn, as in the other tracker benches.
#[cfg(oracle_linked)]
#[path = "../../benches/common/xorshift.rs"]
mod xorshift;

// The page size and the untouched memory the fork tests and benches use.
#[cfg(oracle_linked)]
#[path = "../../tests/common/mapping.rs"]
mod mapping;

#[cfg(oracle_linked)]
fn main() {
    linked::main()
}

#[cfg(oracle_linked)]
mod linked {
    use std::ffi::{c_int, c_void};
    use std::hint::black_box;
    use std::path::Path;
    use std::process::Command;
    use std::time::Instant;

    use uverbs::fork::{ForkMode, ForkSafety, MadviseAdvisor, PageSizing};

    use super::mapping::{page_size, Untouched};
    use super::xorshift::Rng;

    /// Timed mark/unmark pairs per scenario.
    const SAMPLES: usize = 20_000;
    /// Mark/unmark pairs per scenario under callgrind.
    const PAIRS: usize = 1_000;
    /// `IBV_FORK_ENABLED` of `enum ibv_fork_status` (infiniband/verbs.h).
    const IBV_FORK_ENABLED: c_int = 1;

    extern "C" {
        fn ibv_fork_init() -> c_int;
        fn ibv_is_fork_initialized() -> c_int;
        fn ibv_dontfork_range(base: *mut c_void, size: usize) -> c_int;
        fn ibv_dofork_range(base: *mut c_void, size: usize) -> c_int;
    }

    #[derive(Clone, Copy, PartialEq, Eq)]
    enum Scenario {
        Gap = 0,
        Live = 1,
        Overlap = 2,
    }

    impl Scenario {
        fn name(self) -> &'static str {
            match self {
                Scenario::Gap => "gap",
                Scenario::Live => "live",
                Scenario::Overlap => "overlap",
            }
        }

        /// The ranges live while the scenario runs: N disjoint one-page
        /// ranges, or N overlapping three-page ones.
        fn live(self, base: usize, p: usize, n: usize) -> impl Iterator<Item = (usize, usize)> {
            let len = if self == Scenario::Overlap { 3 } else { 1 } * p;
            (0..n).map(move |i| (base + 2 * i * p, len))
        }

        /// The measured range, drawn by `r`.
        fn pick(self, r: &mut Rng, base: usize, p: usize, n: usize) -> (usize, usize) {
            match self {
                Scenario::Gap => (base + (2 * r.below(n - 1) + 1) * p, p),
                Scenario::Live => (base + 2 * r.below(n) * p + 17, 100),
                Scenario::Overlap => (base + r.below(2 * n - 5) * p + 5, 5 * p - 10),
            }
        }
    }

    /// The (N, scenario) rows of the tables.
    const ROWS: [(usize, Scenario); 7] = [
        (1_000, Scenario::Gap),
        (1_000, Scenario::Live),
        (1_000, Scenario::Overlap),
        (10_000, Scenario::Gap),
        (10_000, Scenario::Live),
        (10_000, Scenario::Overlap),
        (100_000, Scenario::Overlap),
    ];

    /// A mark or an unmark: 0 or an errno.
    type Call = fn(&ForkSafety, usize, usize) -> c_int;

    /// One library: its mark and unmark (for the live ranges), and the
    /// measured probes of each scenario, (mark, unmark), by `Scenario as
    /// usize`.
    #[derive(Clone, Copy)]
    struct Imp {
        name: &'static str,
        mark: Call,
        unmark: Call,
        probes: [(Call, Call); 3],
    }

    fn ours_mark(fs: &ForkSafety, addr: usize, len: usize) -> c_int {
        fs.dontfork_range(addr, len)
            .map_or_else(|e| e.raw_os_error(), |()| 0)
    }

    fn ours_unmark(fs: &ForkSafety, addr: usize, len: usize) -> c_int {
        fs.dofork_range(addr, len)
            .map_or_else(|e| e.raw_os_error(), |()| 0)
    }

    fn c_mark(_: &ForkSafety, addr: usize, len: usize) -> c_int {
        // SAFETY: libibverbs only reads the address range's bounds and
        // calls madvise on them; the pages are this process's mapping.
        unsafe { ibv_dontfork_range(addr as *mut c_void, len) }
    }

    fn c_unmark(_: &ForkSafety, addr: usize, len: usize) -> c_int {
        // SAFETY: as in `c_mark`.
        unsafe { ibv_dofork_range(addr as *mut c_void, len) }
    }

    /// The measured calls, one function per library, call and scenario,
    /// not inlined, so that callgrind counts each apart. Each passes its
    /// own name through `black_box` (a few instructions, the same in every
    /// probe) so that no two bodies are the same: identical functions are
    /// merged into one, and callgrind would see one name for them.
    macro_rules! probes {
        ($($name:ident => $call:ident;)*) => {$(
            #[inline(never)]
            fn $name(fs: &ForkSafety, addr: usize, len: usize) -> c_int {
                black_box(stringify!($name));
                $call(fs, addr, len)
            }
        )*};
    }

    probes! {
        probe_uverbs_mark_gap => ours_mark;
        probe_uverbs_unmark_gap => ours_unmark;
        probe_uverbs_mark_live => ours_mark;
        probe_uverbs_unmark_live => ours_unmark;
        probe_uverbs_mark_overlap => ours_mark;
        probe_uverbs_unmark_overlap => ours_unmark;
        probe_libibverbs_mark_gap => c_mark;
        probe_libibverbs_unmark_gap => c_unmark;
        probe_libibverbs_mark_live => c_mark;
        probe_libibverbs_unmark_live => c_unmark;
        probe_libibverbs_mark_overlap => c_mark;
        probe_libibverbs_unmark_overlap => c_unmark;
    }

    const UVERBS: Imp = Imp {
        name: "uverbs",
        mark: ours_mark,
        unmark: ours_unmark,
        probes: [
            (probe_uverbs_mark_gap, probe_uverbs_unmark_gap),
            (probe_uverbs_mark_live, probe_uverbs_unmark_live),
            (probe_uverbs_mark_overlap, probe_uverbs_unmark_overlap),
        ],
    };
    const LIBIBVERBS: Imp = Imp {
        name: "libibverbs",
        mark: c_mark,
        unmark: c_unmark,
        probes: [
            (probe_libibverbs_mark_gap, probe_libibverbs_unmark_gap),
            (probe_libibverbs_mark_live, probe_libibverbs_unmark_live),
            (
                probe_libibverbs_mark_overlap,
                probe_libibverbs_unmark_overlap,
            ),
        ],
    };

    /// Turns libibverbs' tracker on, failing loudly where it stays off (it
    /// does when the kernel says fork needs no help, which it asks over
    /// RDMA netlink; the shim makes that socket fail).
    fn c_fork_init() {
        // SAFETY: no arguments; called once, before any other verbs call.
        let rc = unsafe { ibv_fork_init() };
        assert_eq!(rc, 0, "ibv_fork_init");
        // SAFETY: no arguments, reads libibverbs' own state.
        let status = unsafe { ibv_is_fork_initialized() };
        assert_eq!(
            status, IBV_FORK_ENABLED,
            "libibverbs' fork tracker is not on (ibv_is_fork_initialized = {status})"
        );
    }

    /// One scenario with `n` live ranges for `imp`: sets the live ranges
    /// up on a fresh region, calls `each` with the probes and the region's
    /// base, and takes the ranges down again (checking that everything is
    /// released).
    fn with_live(
        imp: &Imp,
        fs: &ForkSafety,
        n: usize,
        scenario: Scenario,
        each: impl FnOnce(Call, Call, usize),
    ) {
        let p = page_size();
        let region = Untouched::new((2 * n + 2) * p);
        let base = region.addr;
        for (addr, len) in scenario.live(base, p, n) {
            let rc = (imp.mark)(fs, addr, len);
            assert_eq!(rc, 0, "{}: set-up mark of {n} ranges", imp.name);
        }
        let (mark, unmark) = imp.probes[scenario as usize];
        each(mark, unmark, base);
        for (addr, len) in scenario.live(base, p, n) {
            let rc = (imp.unmark)(fs, addr, len);
            assert_eq!(rc, 0, "{}: teardown unmark", imp.name);
        }
        assert!(fs.marked_ranges().is_empty());
    }

    /// `count` mark/unmark pairs at the places `scenario` draws; each
    /// pair's two durations go to `record` when it is given.
    fn pairs(
        mark: Call,
        unmark: Call,
        fs: &ForkSafety,
        (scenario, base, n): (Scenario, usize, usize),
        count: usize,
        mut record: Option<&mut Vec<(u64, u64)>>,
    ) {
        let p = page_size();
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        for _ in 0..count {
            let (addr, len) = scenario.pick(&mut rng, base, p, n);
            let t0 = Instant::now();
            let m = black_box(mark(fs, addr, len));
            let t1 = Instant::now();
            let u = black_box(unmark(fs, addr, len));
            let t2 = Instant::now();
            assert_eq!((m, u), (0, 0), "mark and unmark of {addr:#x}+{len}");
            if let Some(r) = record.as_deref_mut() {
                r.push(((t1 - t0).as_nanos() as u64, (t2 - t1).as_nanos() as u64));
            }
        }
    }

    fn tracker() -> ForkSafety {
        ForkSafety::with_page_sizing(
            ForkMode::Enabled,
            Box::new(MadviseAdvisor),
            PageSizing::System,
        )
    }

    /// The median and p90 of `ns`.
    fn median_p90(mut ns: Vec<u64>) -> (u64, u64) {
        ns.sort_unstable();
        (ns[ns.len() / 2], ns[ns.len() * 9 / 10])
    }

    fn ratio(ours: f64, theirs: f64) -> String {
        format!("{:.2}×", ours / theirs)
    }

    fn time_table() {
        println!("### Time per call (median, p90 in brackets; ns; {SAMPLES} pairs per row)\n");
        println!(
            "| N | scenario | mark uverbs | mark libibverbs | ratio | unmark uverbs | unmark libibverbs | ratio |"
        );
        println!("|---:|---|---:|---:|---:|---:|---:|---:|");
        let fs = tracker();
        for (n, scenario) in ROWS {
            let mut cells = Vec::new();
            for imp in [UVERBS, LIBIBVERBS] {
                let mut samples = Vec::with_capacity(SAMPLES);
                with_live(&imp, &fs, n, scenario, |mark, unmark, base| {
                    // One warm-up pass over the same places, untimed.
                    pairs(mark, unmark, &fs, (scenario, base, n), SAMPLES, None);
                    pairs(
                        mark,
                        unmark,
                        &fs,
                        (scenario, base, n),
                        SAMPLES,
                        Some(&mut samples),
                    );
                });
                let (marks, unmarks): (Vec<u64>, Vec<u64>) = samples.into_iter().unzip();
                cells.push((median_p90(marks), median_p90(unmarks)));
            }
            let ((um, uu), (cm, cu)) = (cells[0], cells[1]);
            println!(
                "| {n} | {} | {} ({}) | {} ({}) | {} | {} ({}) | {} ({}) | {} |",
                scenario.name(),
                um.0,
                um.1,
                cm.0,
                cm.1,
                ratio(um.0 as f64, cm.0 as f64),
                uu.0,
                uu.1,
                cu.0,
                cu.1,
                ratio(uu.0 as f64, cu.0 as f64),
            );
        }
        println!();
    }

    /// The child under callgrind: every row with `n` live ranges, both
    /// libraries, `PAIRS` pairs each.
    fn child(n: usize) {
        let fs = tracker();
        for (_, scenario) in ROWS.iter().filter(|(rn, _)| *rn == n) {
            for imp in [UVERBS, LIBIBVERBS] {
                with_live(&imp, &fs, n, *scenario, |mark, unmark, base| {
                    pairs(mark, unmark, &fs, (*scenario, base, n), PAIRS, None);
                });
            }
        }
    }

    /// Inclusive Ir per call of every probe, from one callgrind run of the
    /// child with `n` live ranges: `(probe name, Ir per call)`.
    fn instructions(valgrind: &str, exe: &Path, n: usize) -> Result<Vec<(String, f64)>, String> {
        let out_file =
            std::env::temp_dir().join(format!("cg.fork_tracker.{}.{n}", std::process::id()));
        let run = Command::new(valgrind)
            .arg("--tool=callgrind")
            .arg("--toggle-collect=*fork_tracker*probe_*")
            .arg(format!("--callgrind-out-file={}", out_file.display()))
            .arg(exe)
            .args(["--child", &n.to_string()])
            .output()
            .map_err(|e| format!("starting {valgrind}: {e}"))?;
        if !run.status.success() {
            let err = String::from_utf8_lossy(&run.stderr);
            let tail: Vec<&str> = err.lines().rev().take(8).collect();
            return Err(format!("{valgrind} exited {}: {tail:?}", run.status));
        }
        let annotated = Command::new("callgrind_annotate")
            .arg("--inclusive=yes")
            .arg(&out_file)
            .output()
            .map_err(|e| format!("starting callgrind_annotate: {e}"))?;
        let _ = std::fs::remove_file(&out_file);
        let text = String::from_utf8_lossy(&annotated.stdout);
        let mut found = Vec::new();
        for line in text.lines() {
            let Some((count, rest)) = line.trim_start().split_once(' ') else {
                continue;
            };
            let Some(name) = rest
                .split("::")
                .find_map(|part| part.strip_prefix("probe_"))
                .map(|n| n.split_whitespace().next().unwrap_or(n).to_string())
            else {
                continue;
            };
            let Ok(count) = count.replace(',', "").parse::<u64>() else {
                continue;
            };
            if !found.iter().any(|(f, _)| *f == name) {
                found.push((name, count as f64 / PAIRS as f64));
            }
        }
        Ok(found)
    }

    fn ir_table(valgrind: &str) -> Result<(), String> {
        let exe = std::env::current_exe().map_err(|e| format!("current_exe: {e}"))?;
        println!(
            "### Instructions per call (callgrind, user space, inclusive; {PAIRS} pairs per row)\n"
        );
        println!(
            "| N | scenario | mark uverbs | mark libibverbs | ratio | unmark uverbs | unmark libibverbs | ratio |"
        );
        println!("|---:|---|---:|---:|---:|---:|---:|---:|");
        for n in [1_000, 10_000, 100_000] {
            let found = instructions(valgrind, &exe, n)?;
            let get = |name: String| {
                found
                    .iter()
                    .find(|(f, _)| *f == name)
                    .map(|(_, ir)| *ir)
                    .ok_or_else(|| format!("callgrind counted no probe_{name} with N = {n}"))
            };
            for (_, scenario) in ROWS.iter().filter(|(rn, _)| *rn == n) {
                let s = scenario.name();
                let um = get(format!("uverbs_mark_{s}"))?;
                let cm = get(format!("libibverbs_mark_{s}"))?;
                let uu = get(format!("uverbs_unmark_{s}"))?;
                let cu = get(format!("libibverbs_unmark_{s}"))?;
                println!(
                    "| {n} | {s} | {um:.1} | {cm:.1} | {} | {uu:.1} | {cu:.1} | {} |",
                    ratio(um, cm),
                    ratio(uu, cu)
                );
            }
        }
        println!();
        Ok(())
    }

    pub fn main() {
        let args: Vec<String> = std::env::args().collect();
        let arg = |name: &str| {
            args.iter()
                .position(|a| a == name)
                .and_then(|i| args.get(i + 1).cloned())
        };
        // No RDMAV_HUGEPAGES_SAFE or RDMAV_FORK_SAFE from the caller's
        // environment: both libraries round to base pages here.
        uverbs_oracle::fixtures::clear_environment();
        c_fork_init();
        if let Some(n) = arg("--child") {
            child(n.parse().expect("--child N"));
            return;
        }
        println!(
            "fork tracker: uverbs beside libibverbs (rdma-core 44), real madvise, page size {}\n",
            page_size()
        );
        time_table();
        if args.iter().any(|a| a == "--no-ir") {
            return;
        }
        let valgrind = uverbs_oracle::fixtures::valgrind(arg("--valgrind"));
        if let Err(e) = ir_table(&valgrind) {
            eprintln!("fork_tracker: {e}");
            std::process::exit(1);
        }
    }
}
