//! Many threads on one shared Context: register, re-register, deregister,
//! over and over. Defaults to 8 threads × 1000 iterations per device;
//! `UVERBS_TEST_THREADS` and `UVERBS_TEST_ITERATIONS` override them.

mod common;

use std::time::Instant;

use common::{
    alloc_pd, anon, devices_under_test, loud, open, rereg_behaviour, Driver, HandleCounts,
};
use uverbs::error::Errno;
use uverbs::mr::ReregOutcome;
use uverbs::AccessFlags;

fn env_count(var: &str, default: usize) -> usize {
    match std::env::var(var) {
        Ok(v) => v
            .parse()
            .unwrap_or_else(|_| panic!("{var}={v:?} is not a count")),
        Err(_) => default,
    }
}

#[test]
fn threads_register_reregister_and_deregister_on_one_context() {
    let threads = env_count("UVERBS_TEST_THREADS", 8);
    let iterations = env_count("UVERBS_TEST_ITERATIONS", 1000);
    assert!(
        threads > 0 && iterations > 0,
        "need at least one thread and one iteration"
    );
    for dev in devices_under_test("threads_register_reregister_and_deregister_on_one_context") {
        let name = dev.name().to_owned();
        let ctx = open(&dev);
        let d = rereg_behaviour(&ctx);
        if d == Driver::Other {
            common::note_unknown_driver(
                "threads_register_reregister_and_deregister_on_one_context",
                &ctx,
            );
        }
        let counts = HandleCounts::new(&ctx, "threads");
        // One PD shared by every thread, and one per thread from the cloned context.
        let shared_pd = alloc_pd(&ctx);
        let start = Instant::now();
        std::thread::scope(|s| {
            for t in 0..threads {
                let ctx = ctx.clone();
                let (shared_pd, name) = (&shared_pd, &name);
                s.spawn(move || {
                    let own_pd = ctx
                        .alloc_pd()
                        .unwrap_or_else(|e| panic!("{name}: thread {t}: alloc_pd: {e}"));
                    let mut buf = anon(64 << 10);
                    for i in 0..iterations {
                        let pd = if i % 2 == 0 { shared_pd } else { &own_pd };
                        let len = 4096 * (1 + (t + i) % 16);
                        let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ;
                        // SAFETY: `buf` outlives every MR of this loop.
                        let mut mr = unsafe { pd.reg_mr(buf.as_mut_ptr(), len, access) }
                            .unwrap_or_else(|e| {
                                panic!("{name}: thread {t} iteration {i}: reg_mr: {e}")
                            });
                        let (handle, lkey) = (mr.handle(), mr.lkey());
                        let new_access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;
                        match (d, mr.set_access(new_access)) {
                            (Driver::Rxe, Ok(())) => {
                                assert_eq!(
                                    (mr.handle(), mr.lkey()),
                                    (handle, lkey),
                                    "{name}: thread {t} iteration {i}"
                                );
                                assert_eq!(
                                    mr.access(),
                                    new_access,
                                    "{name}: thread {t} iteration {i}"
                                );
                            }
                            (Driver::Siw, Err(e))
                                if e.outcome() == ReregOutcome::Cmd
                                    && e.errno() == Errno::OPNOTSUPP => {}
                            (Driver::Other, _) => {}
                            (_, result) => {
                                panic!("{name}: thread {t} iteration {i}: set_access: {result:?}")
                            }
                        }
                        mr.dereg().unwrap_or_else(|e| {
                            panic!("{name}: thread {t} iteration {i}: dereg: {e}")
                        });
                    }
                    own_pd
                        .dealloc()
                        .unwrap_or_else(|e| panic!("{name}: thread {t}: dealloc: {e}"));
                });
            }
        });
        let elapsed = start.elapsed();
        loud(&format!(
            "{name}: {threads} threads x {iterations} iterations of reg + rereg + dereg in {:.2} s ({:.1} µs per iteration per thread)",
            elapsed.as_secs_f64(),
            elapsed.as_secs_f64() * 1e6 / iterations as f64
        ));
        counts.assert_extra(0, 1, "after every thread finished");
        shared_pd
            .dealloc()
            .unwrap_or_else(|e| panic!("{name}: dealloc of the shared PD: {e}"));
    }
}
