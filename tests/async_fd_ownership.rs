//! A context over a test double never takes over (and closes) a descriptor
//! because the double's `GET_CONTEXT` answered its number, and an answer of
//! `-1` is not a panic.

mod common;

use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::fd::AsRawFd;
use std::sync::Arc;

use common::context_over;
use uverbs::device::OpenOptions;
use uverbs::transport::RecordingTransport;
use uverbs::Context;

fn context_answering(async_fd: Option<u32>) -> (Context, Arc<RecordingTransport>) {
    let fake = Arc::new(RecordingTransport::new());
    if let Some(number) = async_fd {
        fake.answer_async_fd(number);
    }
    let ctx = context_over(&fake, &OpenOptions::new());
    (ctx, fake)
}

#[test]
fn a_fake_answer_naming_an_open_file_does_not_close_it() {
    // An anonymous file: nothing to name or remove afterwards.
    let fd = rustix::fs::memfd_create("uverbs-foreign-fd", rustix::fs::MemfdFlags::CLOEXEC)
        .expect("memfd_create");
    let mut file = File::from(fd);
    let (ctx, fake) = context_answering(Some(file.as_raw_fd() as u32));
    assert_eq!(fake.count(), 1, "only GET_CONTEXT was sent");
    drop(ctx);
    // Before the fix the context owned this number and closed it on drop:
    // the write failed with EBADF (or went to whatever reused the number).
    file.write_all(b"still mine")
        .expect("the file is still open");
    file.seek(SeekFrom::Start(0)).unwrap();
    let mut back = String::new();
    file.read_to_string(&mut back).unwrap();
    assert_eq!(back, "still mine");
    drop(file);
}

#[test]
fn an_async_fd_of_minus_one_is_not_a_panic() {
    // Both the default answer and an explicit one.
    for answer in [None, Some(u32::MAX)] {
        let (ctx, _) = context_answering(answer);
        assert_eq!(ctx.num_comp_vectors(), 1);
        ctx.alloc_pd().expect("the context works");
        drop(ctx);
    }
}
