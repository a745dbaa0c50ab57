//! Fork safety at the kernel's `vm.max_map_count` limit, with the real
//! `madvise`.
//!
//! Every one-page `MADV_DONTFORK` range in the middle of a larger mapping
//! splits it into three, adding two mappings (VMAs). This test marks one page
//! every other page of a big untouched mapping until `madvise` refuses,
//! checks that it answers `EAGAIN` after about `(limit - mappings) / 2`
//! ranges, and that a `DOFORK` which would split a mapping at the limit also
//! fails with `EAGAIN` yet releases its references (issue 9, defect 6).
//! Run with `--nocapture` to see the numbers.
//!
//! This file holds a single test: while it runs the process is at the limit,
//! where any `mmap` (a thread stack, a large allocation) fails.

mod common;

use common::{child_reads, Seen, Untouched};
use rustix::mm::MprotectFlags;
use uverbs::error::Errno;
use uverbs::fork::{max_map_count, ForkMode, ForkSafety, MadviseAdvisor, PageSizing};

fn mappings() -> usize {
    std::fs::read_to_string("/proc/self/maps")
        .expect("/proc/self/maps")
        .lines()
        .count()
}

/// Whether a forked child can read the byte at `addr` (it dies of SIGSEGV
/// if the page was not inherited). The child makes only async-signal-safe
/// calls, so this works at the limit.
fn inherited(addr: usize) -> bool {
    matches!(child_reads(addr as *const u8), Seen::Value(_))
}

#[test]
fn scattered_ranges_stop_at_max_map_count_with_eagain() {
    let p = common::mapping::page_size();
    let limit = max_map_count().expect("/proc/sys/vm/max_map_count");
    let fs = ForkSafety::with_page_sizing(
        ForkMode::Enabled,
        Box::new(MadviseAdvisor),
        PageSizing::Fixed(p),
    );

    // Five pages fenced by PROT_NONE pages 0 and 4, so pages 1-3 can merge
    // with no neighbour: two overlapping ranges, A = pages 1-3 and B = page
    // 2, make one DONTFORK mapping with counts 1, 2, 1.
    let fenced = Untouched::new(5 * p);
    for fence in [0, 4] {
        // SAFETY: a page of our own mapping, never accessed.
        unsafe {
            rustix::mm::mprotect(
                (fenced.addr + fence * p) as *mut _,
                p,
                MprotectFlags::empty(),
            )
        }
        .expect("mprotect");
    }
    let a = (fenced.addr + p, 3 * p);
    let b = (fenced.addr + 2 * p, p);
    fs.dontfork_range(a.0, a.1).unwrap();
    fs.dontfork_range(b.0, b.1).unwrap();

    // Room for more ranges than the limit allows.
    let pairs = limit / 2 + 1024;
    let big = Untouched::new(2 * pairs * p);
    let before = mappings();

    // --- at the limit from here on: no allocation beyond small ones ---
    let mut marked = 0;
    let mut failure = None;
    while marked < pairs {
        match fs.dontfork_range(big.addr + 2 * marked * p, p) {
            Ok(()) => marked += 1,
            Err(e) => {
                failure = Some(e);
                break;
            }
        }
    }
    let at_limit = mappings_cheap();
    let spawn_at_limit = std::thread::Builder::new().spawn(|| ()).map(|h| h.join());
    // Giving back pages 1 and 3 of A would split the DONTFORK mapping.
    let release_a = fs.dofork_range(a.0, a.1);
    let entries_after_release = fs.tracker().len();
    let page1_inherited = inherited(fenced.addr + p);
    let page2_inherited = inherited(fenced.addr + 2 * p);
    // Back below the limit.
    let mut cleanup_errors = 0;
    for i in 0..marked {
        if fs.dofork_range(big.addr + 2 * i * p, p).is_err() {
            cleanup_errors += 1;
        }
    }
    // --- below the limit again ---

    let failure = failure.expect("DONTFORK never failed: the limit was not reached");
    println!(
        "vm.max_map_count {limit}: {before} mappings before, {marked} one-page ranges \
         marked, then {failure} ({at_limit:?} mappings); thread::spawn at the limit: {}",
        match &spawn_at_limit {
            Ok(_) => "ok".to_string(),
            Err(e) => format!("failed: {e}"),
        }
    );
    assert_eq!(cleanup_errors, 0);
    assert_eq!(failure, Errno::AGAIN, "{failure}");
    // Each range adds two mappings; a few more may come and go meanwhile.
    let expected = limit.saturating_sub(before) / 2;
    assert!(
        marked + 16 >= expected && marked <= expected + 16,
        "{marked} ranges, expected about {expected}"
    );

    // The failed DOFORK answered EAGAIN and still released A: only B's page
    // is counted. Pages 1 and 3 stay DONTFORK (over-protected), page 2 is
    // protected as counted.
    let err = release_a.expect_err("DOFORK splitting a mapping at the limit");
    assert_eq!(err, Errno::AGAIN);
    assert_eq!(entries_after_release, 1 + marked);
    assert_eq!(fs.marked_ranges(), vec![(b.0, b.0 + p, 1)]);
    assert!(
        !page1_inherited,
        "page 1 stays DONTFORK after the failed DOFORK"
    );
    assert!(!page2_inherited, "page 2 is counted, hence DONTFORK");

    // Below the limit a new registration of A marks and releases normally.
    fs.dontfork_range(a.0, a.1).unwrap();
    fs.dofork_range(a.0, a.1).unwrap();
    assert!(inherited(fenced.addr + p));
    assert!(inherited(fenced.addr + 3 * p));
    assert!(!inherited(fenced.addr + 2 * p));
    fs.dofork_range(b.0, b.1).unwrap();
    assert!(inherited(fenced.addr + 2 * p));
    assert!(fs.marked_ranges().is_empty());
}

/// The number of mappings without a large allocation (usable at the limit):
/// counts newlines of `/proc/self/maps` through a small stack buffer.
fn mappings_cheap() -> Option<usize> {
    use std::io::Read;
    let mut file = std::fs::File::open("/proc/self/maps").ok()?;
    let mut buf = [0u8; 4096];
    let mut lines = 0;
    loop {
        match file.read(&mut buf) {
            Ok(0) => return Some(lines),
            Ok(n) => lines += buf[..n].iter().filter(|&&c| c == b'\n').count(),
            Err(_) => return None,
        }
    }
}
