//! A forked child must not destroy its parent's kernel objects, on real
//! devices and over both transports. Before the fix, a child's
//! `drop(mr); _exit(0)` made the parent's `dereg()` answer `ENOENT` over
//! ioctl (over `write()` the kernel refuses the child with `EACCES`).

#[macro_use]
mod common;

use std::time::Duration;

use common::{alloc_pd, anon};
use uverbs::{AccessFlags, Error};

/// How long a child may run.
const LIMIT: Duration = Duration::from_secs(30);

device_test!(
    a_child_dropping_copies_leaves_the_parents_mr_and_pd,
    |name, ctx, counts| {
        let pd = alloc_pd(&ctx);
        let spare = alloc_pd(&ctx);
        let mut buf = anon(1 << 20);
        // SAFETY: `buf` outlives the MR.
        let mr = unsafe { pd.reg_mr(buf.as_mut_ptr(), buf.len(), AccessFlags::LOCAL_WRITE) }
            .unwrap_or_else(|e| panic!("{name}: reg_mr: {e}"));
        let code = in_child!(LIMIT, {
            let foreign = |e: &Error| matches!(e, Error::ForeignProcess { .. });
            let err = spare.dealloc().unwrap_err();
            assert!(foreign(&err.error), "{}", err.error);
            drop(err);
            drop(mr);
            drop(pd);
            0
        });
        assert_eq!(code, 0, "{name}: the child's checks failed");
        counts.assert_extra(1, 2, "after the child exited");
        mr.dereg()
            .unwrap_or_else(|e| panic!("{name}: the parent's dereg after the child's drop: {e}"));
        spare
            .dealloc()
            .unwrap_or_else(|e| panic!("{name}: the parent's dealloc: {}", e.error));
        pd.dealloc()
            .unwrap_or_else(|e| panic!("{name}: the parent's dealloc: {}", e.error));
    }
);

device_test!(
    a_child_that_unwinds_leaves_the_parents_buffer_mr,
    |name, ctx, counts| {
        let pd = alloc_pd(&ctx);
        let mut mr = pd
            .reg_buffer(anon(1 << 16), AccessFlags::LOCAL_WRITE)
            .unwrap_or_else(|e| panic!("{name}: reg_buffer: {}", e.error));
        mr.buffer_mut()[0] = 0x5a;
        let code = in_child!(LIMIT, {
            let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                let _copies = (mr, pd);
                panic!("the child unwinds through copies of the parent's objects");
            }));
            i32::from(unwound.is_ok())
        });
        assert_eq!(code, 0, "{name}: the child did not unwind as planned");
        counts.assert_extra(1, 1, "after the child exited");
        let buf = mr
            .dereg()
            .unwrap_or_else(|e| panic!("{name}: the parent's dereg after the child: {e}"));
        assert_eq!(buf[0], 0x5a);
        pd.dealloc()
            .unwrap_or_else(|e| panic!("{name}: the parent's dealloc: {}", e.error));
    }
);
