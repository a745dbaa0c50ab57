//! The framing probe's reader of strace output (`benches/verbs/trace.rs`),
//! on fixed text: host-only, no device.

#[path = "../benches/verbs/trace.rs"]
mod trace;

use trace::{calls_between_marks, command_name, unquote};

#[test]
fn a_trace_is_split_at_the_markers() {
    let trace = "\
4242  write(-1, \"@@FRAMING-MARK libibverbs alloc_pd\", 35) = -1 EBADF (Bad file descriptor)
4242  write(3, \"\\x03\\x00\\x00\\x00\\x04\\x00\\x02\\x00\", 16) = 16
4242  write(-1, \"@@FRAMING-MARK libibverbs dealloc_pd\", 37) = -1 EBADF (Bad file descriptor)
4242  ioctl(3, _IOC(_IOC_READ|_IOC_WRITE, 0x1b, 0x1, 0x18), 0x7ffc) = 0
4242  ioctl(1, TCGETS, 0x7ffc) = -1 ENOTTY
4242  write(-1, \"@@FRAMING-MARK ours reg_mr\", 26) = -1 EBADF (Bad file descriptor)
4242  write(4, \"\\t\\x00\\x00\\x00\\f\\x00\\x06\\x00\", 64) = 64
4242  ioctl(4, RDMA_VERBS_IOCTL, 0x7ffc) = 0
write(-1, \"@@FRAMING-MARK ours dealloc_pd\", 30) = -1 EBADF (Bad file descriptor)
write(-1, \"@@FRAMING-MARK end end\", 22) = -1 EBADF (Bad file descriptor)
";
    assert_eq!(
        calls_between_marks(trace),
        vec![
            (
                "libibverbs".into(),
                "alloc_pd".into(),
                "write:ALLOC_PD".into()
            ),
            ("libibverbs".into(), "dealloc_pd".into(), "ioctl".into()),
            ("ours".into(), "reg_mr".into(), "write:REG_MR+ioctl".into()),
            ("ours".into(), "dealloc_pd".into(), "none".into()),
        ]
    );
}

#[test]
fn strace_quoting_is_undone() {
    assert_eq!(
        unquote("\\x0b\\\"a\\\\\\n\\0"),
        vec![0x0b, b'"', b'a', b'\\', b'\n', 0]
    );
    assert_eq!(command_name(0x8000_0001), "EX_QUERY_DEVICE");
    assert_eq!(command_name(13), "DEREG_MR");
    assert_eq!(command_name(77), "77");
}
