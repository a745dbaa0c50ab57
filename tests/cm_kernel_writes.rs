//! The rdma_cm stack reads the answer the kernel wrote through the response
//! pointer inside a command's frame, in every build (issue 18, defect 5).
//!
//! The kernel gets the response buffer only as an integer inside the
//! frame, so the system call that sends the frame must be one the compiler
//! assumes writes memory. rustix's `write` is an asm block marked
//! `readonly`; through it, an optimised build read back the zeros it had
//! stored before the call instead of the answer. This test needs no
//! device: the channel's "kernel" is this process's own memory file,
//! positioned at the response buffer, so that `write()` really writes that
//! buffer (with the frame's bytes), as the kernel's rdma_cm file does.
//!
//! Such a fault shows only in an optimised build (`cargo test --release`,
//! or the VM, whose test binaries are built like release code). The old
//! cm path (rustix's `write`, the response pointer made from a shared
//! borrow) passed this test even in release builds: the same `match` also
//! handed the buffer to the fake backend as a `&mut [u8]`, so the optimiser
//! could not assume it unchanged. The fault was latent (a `readonly` call
//! that writes, through a pointer whose borrow promised no writes), one
//! refactor away from losing every answer; this test keeps it away.

use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

use uverbs::cm::EventChannel;
use uverbs::Error;

/// No sysfs ABI file: `open_at` then trusts the device.
const NO_ABI: &str = "/nonexistent/uverbs-cm-abi";

/// `GET_EVENT`'s frame: the 8-byte `rdma_ucm_cmd_hdr` and the request,
/// whose only field is the response pointer.
const GET_EVENT_FRAME: usize = 16;

/// One `GET_EVENT` on `ch`, always from the same stack depth, so that
/// `get_event`'s response buffer has the same address on every call.
#[inline(never)]
fn take_event(ch: &EventChannel) -> Result<(u64, u32, u32, i32), Error> {
    let ev = ch.get_event()?;
    Ok((ev.uid, ev.id, ev.number(), ev.status))
}

fn scratch_file() -> PathBuf {
    let path = std::env::temp_dir().join(format!("uverbs-cm-frame-{}", std::process::id()));
    File::create(&path).unwrap();
    path
}

#[test]
fn get_event_returns_what_the_write_call_wrote_at_the_response_pointer() {
    // First to a plain file: it keeps the frame, which says where the
    // response buffer is; the "answer" is the zeroed buffer.
    let path = scratch_file();
    let plain = EventChannel::open_at(&path, Path::new(NO_ABI)).unwrap();
    assert_eq!(take_event(&plain).unwrap(), (0, 0, 0, 0));
    drop(plain);
    let mut frame = Vec::new();
    File::open(&path).unwrap().read_to_end(&mut frame).unwrap();
    std::fs::remove_file(&path).unwrap();
    assert_eq!(frame.len(), GET_EVENT_FRAME, "one GET_EVENT frame");
    let response_ptr = u64::from_ne_bytes(frame[8..16].try_into().unwrap());
    assert_ne!(response_ptr, 0);

    // Then to this process's memory, at that address: write() copies the
    // frame over the first 16 bytes of the response (`uid`, `id`, `event`),
    // as the kernel copies its answer there.
    let mem = EventChannel::open_at(Path::new("/proc/self/mem"), Path::new(NO_ABI)).unwrap();
    rustix::fs::seek(&mem, rustix::fs::SeekFrom::Start(response_ptr)).unwrap();
    let (uid, id, event, status) = take_event(&mem).unwrap();
    let word = |at: usize| u32::from_ne_bytes(frame[at..at + 4].try_into().unwrap());
    assert_eq!(
        uid,
        u64::from_ne_bytes(frame[..8].try_into().unwrap()),
        "uid: the frame's header (an optimised build that lost the answer reads 0)"
    );
    assert_eq!(id, word(8), "id: the response pointer's first half");
    assert_eq!(event, word(12), "event: the response pointer's second half");
    assert_eq!(status, 0, "status: not written");
}
