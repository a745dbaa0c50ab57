//! Real `fork()` tests: pages marked by an enabled `ForkSafety` (with the real
//! `madvise` advisor) are absent in a child, so touching them kills it with
//! `SIGSEGV`; released pages are inherited again.
//!
//! The child (`common::child_reads`) runs in a copy of a multi-threaded test
//! process, so it performs only async-signal-safe operations and exits with
//! the byte read as exit code.

mod common;

use common::{child_reads, page_size as page, Seen};
use memmap2::MmapMut;
use uverbs::fork::{ForkMode, ForkSafety, MadviseAdvisor};

/// A mapping of `pages` pages where page `i` is filled with `0x10 + i`.
fn mapping(pages: usize) -> MmapMut {
    let mut map = MmapMut::map_anon(pages * page()).expect("mmap");
    for (i, chunk) in map.chunks_mut(page()).enumerate() {
        chunk.fill(0x10 + i as u8);
    }
    map
}

/// [`mapping`] of 4 pages, an [`enabled`] tracker and the mapping's address.
fn four_pages_and_a_tracker() -> (MmapMut, ForkSafety, usize) {
    let map = mapping(4);
    let base = map.as_ptr() as usize;
    (map, enabled(), base)
}

fn enabled() -> ForkSafety {
    ForkSafety::new(ForkMode::Enabled, Box::new(MadviseAdvisor))
}

#[test]
fn unmarked_memory_is_inherited() {
    let map = mapping(2);
    assert_eq!(child_reads(&map[page() + 5]), Seen::Value(0x11));
}

#[test]
fn marked_page_is_not_inherited_until_unmarked() {
    let (map, fs, base) = four_pages_and_a_tracker();
    // Mark an unaligned slice inside page 1: the whole page is protected.
    fs.dontfork_range(base + page() + 100, 50).unwrap();
    assert_eq!(child_reads(&map[page()]), Seen::Segfault);
    assert_eq!(child_reads(&map[2 * page() - 1]), Seen::Segfault);
    // Neighbouring pages are untouched.
    assert_eq!(child_reads(&map[page() - 1]), Seen::Value(0x10));
    assert_eq!(child_reads(&map[2 * page()]), Seen::Value(0x12));

    fs.dofork_range(base + page() + 100, 50).unwrap();
    assert!(fs.marked_ranges().is_empty());
    assert_eq!(child_reads(&map[page() + 100]), Seen::Value(0x11));
}

#[test]
fn overlapping_marks_protect_until_the_last_release() {
    let (map, fs, base) = four_pages_and_a_tracker();
    let a = (base, 2 * page()); // pages 0-1
    let b = (base + page() + 1, page() + 10); // pages 1-2
    fs.dontfork_range(a.0, a.1).unwrap();
    fs.dontfork_range(b.0, b.1).unwrap();
    for p in 0..3 {
        assert_eq!(child_reads(&map[p * page()]), Seen::Segfault, "page {p}");
    }
    assert_eq!(child_reads(&map[3 * page()]), Seen::Value(0x13));

    // Releasing A gives back page 0 only; page 1 is still covered by B.
    fs.dofork_range(a.0, a.1).unwrap();
    assert_eq!(child_reads(&map[0]), Seen::Value(0x10));
    assert_eq!(child_reads(&map[page()]), Seen::Segfault);
    assert_eq!(child_reads(&map[2 * page()]), Seen::Segfault);

    fs.dofork_range(b.0, b.1).unwrap();
    assert!(fs.marked_ranges().is_empty());
    for p in 0..4 {
        assert_eq!(child_reads(&map[p * page()]), Seen::Value(0x10 + p as u8));
    }
}

#[test]
fn disabled_and_unneeded_modes_do_not_protect() {
    for mode in [ForkMode::Disabled, ForkMode::Unneeded] {
        let map = mapping(1);
        let fs = ForkSafety::new(mode, Box::new(MadviseAdvisor));
        fs.dontfork_range(map.as_ptr() as usize, page()).unwrap();
        assert_eq!(child_reads(&map[0]), Seen::Value(0x10), "{mode:?}");
        fs.dofork_range(map.as_ptr() as usize, page()).unwrap();
    }
}

#[test]
fn init_then_register_protects() {
    let map = mapping(1);
    let fs = ForkSafety::new(ForkMode::Disabled, Box::new(MadviseAdvisor));
    fs.init().unwrap();
    assert_eq!(fs.mode(), ForkMode::Enabled);
    fs.dontfork_range(map.as_ptr() as usize, page()).unwrap();
    assert_eq!(child_reads(&map[0]), Seen::Segfault);
    fs.dofork_range(map.as_ptr() as usize, page()).unwrap();
    assert_eq!(child_reads(&map[0]), Seen::Value(0x10));
}

/// Maps one fresh private page at `hint`, which must be a free hole
/// (`MAP_FIXED_NOREPLACE`: fails with `EEXIST` instead of replacing anything).
fn map_page_at(hint: usize) -> rustix::io::Result<usize> {
    // SAFETY: MAP_FIXED_NOREPLACE never replaces an existing mapping, so no
    // memory anyone refers to is affected; the page is unmapped by the caller.
    let ptr = unsafe {
        rustix::mm::mmap_anonymous(
            hint as *mut _,
            page(),
            rustix::mm::ProtFlags::READ | rustix::mm::ProtFlags::WRITE,
            rustix::mm::MapFlags::PRIVATE | rustix::mm::MapFlags::FIXED_NOREPLACE,
        )
    }?;
    Ok(ptr as usize)
}

/// A page that was marked, unmapped while still marked (a contract violation
/// for a registered range) and mapped anew at the same address comes back
/// without `MADV_DONTFORK`. The next mark of that page must protect it again,
/// even though the tracker still counts it.
#[test]
fn a_remapped_page_is_protected_by_the_next_mark() {
    let fs = enabled();
    let p = page();
    // Another thread of this test binary may take the freed hole between
    // munmap and mmap; then try again elsewhere (bounded).
    for _attempt in 0..10 {
        // SAFETY: a fresh mapping at a kernel-chosen address; only this test
        // uses it, through raw addresses.
        let first = unsafe {
            rustix::mm::mmap_anonymous(
                std::ptr::null_mut(),
                p,
                rustix::mm::ProtFlags::READ | rustix::mm::ProtFlags::WRITE,
                rustix::mm::MapFlags::PRIVATE,
            )
        }
        .expect("mmap") as usize;
        fs.dontfork_range(first, p).unwrap();
        // SAFETY: the page mapped above; nothing refers to it any more.
        unsafe { rustix::mm::munmap(first as *mut _, p) }.unwrap();
        let again = match map_page_at(first) {
            Ok(addr) => addr,
            Err(rustix::io::Errno::EXIST) => {
                fs.dofork_range(first, p).unwrap();
                continue;
            }
            Err(e) => panic!("mmap at the freed hole: {e}"),
        };
        assert_eq!(again, first);
        // SAFETY: `again` is a page of our own, writable, mapped just above.
        unsafe { std::ptr::write_volatile(again as *mut u8, 0x43) };

        fs.dontfork_range(again, p).unwrap();
        assert_eq!(fs.marked_ranges(), vec![(again, again + p, 2)]);
        assert_eq!(child_reads(again as *const u8), Seen::Segfault);

        fs.dofork_range(again, p).unwrap();
        fs.dofork_range(first, p).unwrap();
        assert!(fs.marked_ranges().is_empty());
        assert_eq!(child_reads(again as *const u8), Seen::Value(0x43));
        // SAFETY: the page mapped by `map_page_at`, no longer used.
        unsafe { rustix::mm::munmap(again as *mut _, p) }.unwrap();
        return;
    }
    panic!("the freed hole was taken by another mapping 10 times in a row");
}
