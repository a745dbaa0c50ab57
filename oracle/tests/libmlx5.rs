//! rdma-core's libmlx5 (Debian's static rdma-core 44, unmodified) against
//! the emulated mlx5 kernel driver: it finds the device, opens it, makes a
//! PD and a CQ and tears everything down, and each of its commands and
//! memory writes is what a ConnectX's kernel driver would get. What it
//! sends here is what uverbs' own mlx5 provider must send (issue 39).
//!
//! build.rs links the archives with the system calls below wrapped; each
//! `__wrap_NAME` answers for the emulated device and hands everything else
//! to `__real_NAME`, the C library's. Without the archives the test says
//! SKIPPED (and fails with `UVERBS_REQUIRE_ORACLE` set, as `cargo vm test`
//! sets it).

#[cfg(not(oracle_linked))]
#[test]
fn libmlx5_against_the_emulated_mlx5() {
    let why = env!("UVERBS_ORACLE_MISSING");
    assert!(
        std::env::var_os("UVERBS_REQUIRE_ORACLE").is_none(),
        "UVERBS_REQUIRE_ORACLE is set but libmlx5 is not linked: {why}"
    );
    eprintln!("SKIPPED: libmlx5_against_the_emulated_mlx5: libmlx5 is not linked ({why}); `cargo vm test` unpacks it");
}

#[cfg(oracle_linked)]
mod shim;

#[cfg(oracle_linked)]
mod linked {
    use std::ffi::{c_char, c_int, c_void, CStr};

    use std::sync::Arc;

    use uverbs_oracle::file::EmulatedFile;
    use uverbs_oracle::fixtures::loud;
    use uverbs_oracle::kernel::{Command, Mlx5Kernel};
    use uverbs_oracle::sysfs;
    use uverbs_uapi::*;
    use zerocopy::FromBytes;

    use super::shim;

    /// `struct ibv_cq`'s first fields (libibverbs 44's verbs.h).
    #[repr(C)]
    struct IbvCq {
        context: *mut c_void,
        channel: *mut c_void,
        cq_context: *mut c_void,
        handle: u32,
        cqe: c_int,
    }

    /// `struct ibv_mr` (libibverbs 44).
    #[repr(C)]
    struct IbvMr {
        context: *mut c_void,
        pd: *mut c_void,
        addr: *mut c_void,
        length: usize,
        handle: u32,
        lkey: u32,
        rkey: u32,
    }

    /// `struct ibv_pd` (libibverbs 44): the context, then the handle.
    #[repr(C)]
    struct IbvPd {
        context: *mut c_void,
        handle: u32,
    }

    extern "C" {
        static verbs_provider_mlx5: u8;
        fn ibv_reg_mr(pd: *mut c_void, addr: *mut c_void, len: usize, access: c_int) -> *mut IbvMr;
        fn ibv_rereg_mr(
            mr: *mut IbvMr,
            flags: c_int,
            pd: *mut c_void,
            addr: *mut c_void,
            len: usize,
            access: c_int,
        ) -> c_int;
        fn ibv_dereg_mr(mr: *mut IbvMr) -> c_int;
        fn ibv_static_providers(unused: *mut c_void, ...);
        fn ibv_get_device_list(num: *mut c_int) -> *mut *mut c_void;
        fn ibv_free_device_list(list: *mut *mut c_void);
        fn ibv_get_device_name(dev: *mut c_void) -> *const c_char;
        fn ibv_open_device(dev: *mut c_void) -> *mut c_void;
        fn ibv_close_device(ctx: *mut c_void) -> c_int;
        fn ibv_alloc_pd(ctx: *mut c_void) -> *mut c_void;
        fn ibv_dealloc_pd(pd: *mut c_void) -> c_int;
        fn ibv_create_cq(
            ctx: *mut c_void,
            cqe: c_int,
            cq_context: *mut c_void,
            channel: *mut c_void,
            comp_vector: c_int,
        ) -> *mut IbvCq;
        fn ibv_destroy_cq(cq: *mut IbvCq) -> c_int;
    }

    fn errno() -> std::io::Error {
        std::io::Error::last_os_error()
    }

    /// The kernel's log as one line per command, for failure messages.
    fn log_lines(k: &Mlx5Kernel) -> String {
        k.log
            .iter()
            .map(|c| {
                format!(
                    "object {:#x} method {:#x} write {:?} uhw_in {} bytes errno {}\n",
                    c.object,
                    c.method,
                    c.write_cmd,
                    c.uhw_in.len(),
                    c.errno
                )
            })
            .collect()
    }

    /// libmlx5's environment knobs change what it sends: none may be set.

    #[test]
    fn libmlx5_against_the_emulated_mlx5() {
        uverbs_oracle::fixtures::clear_environment();
        let root = std::env::temp_dir().join(format!("uverbs-oracle-{}", std::process::id()));
        sysfs::create(&root).expect("the fake sysfs tree");
        shim::install(&root);

        // SAFETY: the provider's descriptor is a static of the linked
        // archive; the list ends with NULL as the function requires.
        unsafe {
            ibv_static_providers(
                std::ptr::null_mut(),
                std::ptr::addr_of!(verbs_provider_mlx5),
                std::ptr::null::<c_void>(),
            )
        };
        let mut n = 0;
        // SAFETY: plain libibverbs calls on the objects it handed out, in
        // order, each checked before the next uses it.
        unsafe {
            let list = ibv_get_device_list(&mut n);
            assert!(!list.is_null(), "ibv_get_device_list: {}", errno());
            assert_eq!(n, 1, "libmlx5 matches the one emulated device");
            let name = CStr::from_ptr(ibv_get_device_name(*list)).to_str().unwrap();
            assert_eq!(name, sysfs::IBDEV);

            let ctx = ibv_open_device(*list);
            assert!(
                !ctx.is_null(),
                "ibv_open_device: {}\n{}",
                errno(),
                shim::with_kernel(log_lines)
            );
            let pd = ibv_alloc_pd(ctx);
            assert!(!pd.is_null(), "ibv_alloc_pd: {}", errno());
            let cq = ibv_create_cq(ctx, 16, std::ptr::null_mut(), std::ptr::null_mut(), 0);
            assert!(
                !cq.is_null(),
                "ibv_create_cq: {}\n{}",
                errno(),
                shim::with_kernel(log_lines)
            );
            let cq_cqe = (*cq).cqe;

            shim::with_kernel(|k| check_open_and_cq(k, cq_cqe));

            let pd2 = ibv_alloc_pd(ctx);
            assert!(!pd2.is_null(), "ibv_alloc_pd: {}", errno());
            let theirs = rereg_cases_through_libibverbs(pd, pd2);
            assert_eq!(ibv_dealloc_pd(pd2), 0, "ibv_dealloc_pd: {}", errno());
            let ours = rereg_cases_through_uverbs();
            let mut rereg_differ = Vec::new();
            for ((case, t), o) in rereg_cases().iter().zip(&theirs).zip(&ours) {
                if t != o {
                    rereg_differ.push(format!("{case:?}: libibverbs {t:?}, uverbs {o:?}"));
                }
            }
            loud(&format!(
                "mlx5 oracle: ibv_rereg_mr: {} cases, {} differ",
                theirs.len(),
                rereg_differ.len()
            ));
            if std::env::var_os("UVERBS_ORACLE_ALL").is_some() {
                for d in &rereg_differ {
                    println!("differ: {d}");
                }
            }
            assert!(
                rereg_differ.is_empty(),
                "{} differ, the first: {:#?}",
                rereg_differ.len(),
                &rereg_differ[..rereg_differ.len().min(5)]
            );

            assert_eq!(ibv_destroy_cq(cq), 0, "ibv_destroy_cq: {}", errno());
            assert_eq!(ibv_dealloc_pd(pd), 0, "ibv_dealloc_pd: {}", errno());
            assert_eq!(ibv_close_device(ctx), 0, "ibv_close_device: {}", errno());
            ibv_free_device_list(list);
        }
        shim::with_kernel(|k| {
            let (pds, cqs, uars) = k.closed.expect("libmlx5 closed the uverbs file");
            assert_eq!(
                (pds, cqs),
                (0, 0),
                "the PD and CQ destroyed before the close"
            );
            assert!(k.uars.is_empty(), "every UAR page unmapped");
            println!("mlx5 oracle: {uars} UAR objects left for the close to destroy");
            assert!(k.async_fds.is_empty(), "the async event file closed");
            let answered = k.log.iter().filter(|c| c.errno == 0).count();
            print!("mlx5 oracle: the commands:\n{}", log_lines(k));
            println!(
                "mlx5 oracle: libmlx5 44 opened the emulated {} (PD, CQ, teardown): {} commands, {answered} answered, the rest refused as a kernel without them",
                sysfs::IBDEV,
                k.log.len()
            );
        });
        let _ = std::fs::remove_dir_all(&root);

        let theirs = shim::with_kernel(|k| k.log.clone());
        let ours = uverbs_commands();
        let (cases, differ) = compare(&theirs, &ours);
        loud(&format!(
            "mlx5 oracle: driver data: {cases} cases, {} differ",
            differ.len()
        ));
        assert!(differ.is_empty(), "differ: {differ:#?}");
    }

    /// A uverbs context of the mlx5 provider on an emulated kernel of its
    /// own.
    fn uverbs_context() -> (Arc<EmulatedFile>, uverbs::Context) {
        let file = Arc::new(EmulatedFile::default());
        let ctx = uverbs::Context::with_transport(
            sysfs::IBDEV,
            Some(uverbs::device::DriverId::MLX5),
            Box::new(file.clone()),
            &uverbs::device::OpenOptions::new(),
        )
        .expect("uverbs: GET_CONTEXT");
        (file, ctx)
    }

    /// uverbs' mlx5 provider through the same verbs, against an emulated
    /// kernel of its own: open, PD, teardown. Its commands.
    fn uverbs_commands() -> Vec<Command> {
        let (file, ctx) = uverbs_context();
        let pd = ctx.alloc_pd().expect("uverbs: ALLOC_PD");
        pd.dealloc().expect("uverbs: DEALLOC_PD");
        drop(ctx);
        let log = file.kernel().log.clone();
        log
    }

    /// The successful command of `theirs` and `ours` for one verb: the
    /// write command `write` (or the native GET_CONTEXT, for
    /// `IB_USER_VERBS_CMD_GET_CONTEXT`).
    fn answered(log: &[Command], write: u32) -> Option<&Command> {
        log.iter().find(|c| {
            c.errno == 0
                && (c.write_cmd == Some(write)
                    || (write == IB_USER_VERBS_CMD_GET_CONTEXT
                        && (c.object, c.method)
                            == (UVERBS_OBJECT_DEVICE, UVERBS_METHOD_GET_CONTEXT)))
        })
    }

    /// Compares the driver data of each verb both libraries issued: what
    /// went in (`uhw_in`, byte for byte) and the room given for the answer.
    /// The cases and the names of those that differ.
    fn compare(theirs: &[Command], ours: &[Command]) -> (usize, Vec<String>) {
        let mut cases = 0;
        let mut differ = Vec::new();
        for (verb, write) in [
            ("GET_CONTEXT", IB_USER_VERBS_CMD_GET_CONTEXT),
            ("ALLOC_PD", IB_USER_VERBS_CMD_ALLOC_PD),
        ] {
            let (Some(t), Some(o)) = (answered(theirs, write), answered(ours, write)) else {
                differ.push(format!("{verb}: answered for libmlx5 and uverbs"));
                continue;
            };
            cases += 2;
            if t.uhw_in != o.uhw_in {
                differ.push(format!(
                    "{verb}: driver input: libmlx5 {:02x?}, uverbs {:02x?}",
                    t.uhw_in, o.uhw_in
                ));
            }
            if t.uhw_out_len != o.uhw_out_len {
                differ.push(format!(
                    "{verb}: room for the driver answer: libmlx5 {}, uverbs {}",
                    t.uhw_out_len, o.uhw_out_len
                ));
            }
        }
        (cases, differ)
    }

    /// What libmlx5 sent and wrote while opening the device and making the
    /// CQ: the facts uverbs' provider must reproduce.
    fn check_open_and_cq(k: &Mlx5Kernel, cq_cqe: c_int) {
        let log = log_lines(k);
        // GET_CONTEXT: the full request first, with DEVX; refused (EPERM),
        // then the same without DEVX.
        let contexts: Vec<_> = k
            .log
            .iter()
            .filter(|c| (c.object, c.method) == (UVERBS_OBJECT_DEVICE, UVERBS_METHOD_GET_CONTEXT))
            .collect();
        assert!(contexts.len() >= 2, "{log}");
        let (first, last) = (contexts[0], contexts[contexts.len() - 1]);
        assert_eq!((first.errno, last.errno), (libc::EPERM, 0), "{log}");
        let (req, _) = mlx5_ib_alloc_ucontext_req_v2::read_from_prefix(&last.uhw_in).unwrap();
        assert_eq!(last.uhw_in.len(), 32, "the v2 request: {log}");
        assert_eq!(req.flags, 0, "DEVX dropped after the refusal");
        assert_eq!(
            (req.total_num_bfregs, req.num_low_latency_bfregs),
            (16, 4),
            "libmlx5's default blue-flame registers: {req:?}"
        );
        assert_eq!(req.max_cqe_version, 1, "{req:?}");
        assert_eq!(
            req.lib_caps,
            MLX5_LIB_CAP_4K_UAR | MLX5_LIB_CAP_DYN_UAR,
            "{req:?}"
        );

        // No blue-flame registers with GET_CONTEXT (libmlx5 asks for
        // dynamic UARs): each UAR page is an object, mapped once at the
        // offset its allocation answered.
        assert_eq!(k.tot_bfregs, 0, "{log}");
        assert!(!k.dyn_uars.is_empty(), "libmlx5 allocates UARs: {log}");
        let mut offsets: Vec<u64> = k.uars.iter().map(|u| u.offset).collect();
        offsets.sort_unstable();
        let mut want: Vec<u64> = k.dyn_uars.values().map(|u| u.mmap_offset).collect();
        want.sort_unstable();
        assert_eq!(offsets, want, "each UAR object mapped once, at its offset");

        // The CQ: 16 asked for, 32 entries of 64 bytes, every CQE
        // initialised as the hardware expects before it writes one.
        assert_eq!(k.cqs.len(), 1, "{log}");
        let cq = k.cqs.values().next().unwrap();
        assert_eq!(cq.entries, 32, "{cq:?}");
        assert_eq!(cq_cqe, 31, "ibv_cq.cqe is what the kernel answered");
        assert_eq!(cq.req.cqe_size, 64, "{cq:?}");
        assert_eq!(cq.req.cqe_comp_en, 0, "{cq:?}");
        assert_eq!(
            u32::from(cq.req.flags),
            MLX5_IB_CREATE_CQ_FLAGS_UAR_PAGE_INDEX,
            "{cq:?}"
        );
        assert!(
            k.dyn_uars
                .values()
                .any(|u| u.page_id == u32::from(cq.req.uar_page_index)),
            "the CQ's doorbell UAR is one libmlx5 allocated: {cq:?} {:?}",
            k.dyn_uars
        );
        // SAFETY: the CQ lives (destroyed after this check) and its buffer
        // holds `entries` CQEs of `cqe_size` bytes, written by libmlx5
        // before CREATE_CQ and by nothing since (the emulated device writes
        // no CQE in this test).
        let buf = unsafe {
            std::slice::from_raw_parts(cq.req.buf_addr as *const u8, cq.entries as usize * 64)
        };
        for (i, cqe) in buf.chunks(64).enumerate() {
            assert_eq!(
                cqe[63], 0xf0,
                "CQE {i}: op_own is the invalid opcode (0xf) with owner bit 0"
            );
        }
        // SAFETY: the doorbell record is 8 bytes of live user memory (as
        // for the buffer above).
        let db = unsafe { std::slice::from_raw_parts(cq.req.db_addr as *const u8, 8) };
        assert_eq!(db, [0; 8], "consumer index and arm word start at 0");
        println!(
            "mlx5 oracle: CREATE_CQ driver data {:?}; UAR objects {:?}",
            cq.req, k.dyn_uars
        );
    }

    /// Bytes of a page here.
    const PAGE: usize = 4096;
    /// The registered range (A) and the one a new translation points at (B).
    const A_LEN: usize = 8 * PAGE;
    const B_LEN: usize = 4 * PAGE;

    /// One generated `ibv_rereg_mr` case.
    #[derive(Clone, Copy, Debug)]
    struct Case {
        /// The MR's access when registered.
        initial: u32,
        /// The flags (an unsupported bit in some).
        flags: u32,
        /// The PD argument: 0 none (NULL), 1 the MR's own, 2 the other.
        pd: u8,
        /// The range: 0 B's, 1 a null address, 2 B with length 0.
        range: u8,
        /// The new access.
        access: u32,
        /// The errno the kernel's driver answers with, if any.
        fail: Option<i32>,
    }

    /// 2 initial accesses × 10 flag values × the PDs (the PD flag with
    /// none is left out: libibverbs dereferences the NULL, a crash rather
    /// than an outcome) × 3 ranges × 5 accesses × 2 kernel answers.
    fn rereg_cases() -> Vec<Case> {
        let lw = IB_UVERBS_ACCESS_LOCAL_WRITE;
        let (rw, rr) = (IB_UVERBS_ACCESS_REMOTE_WRITE, IB_UVERBS_ACCESS_REMOTE_READ);
        let mut out = Vec::new();
        for initial in [lw | rr, rr] {
            for flags in (0u32..8).chain([8, 1 << 31]) {
                let pds: &[u8] = if flags & 2 != 0 { &[1, 2] } else { &[0, 2] };
                for &pd in pds {
                    for range in 0..3 {
                        for access in [0, lw, lw | rw, rw, rr] {
                            for fail in [None, Some(libc::EFAULT)] {
                                out.push(Case {
                                    initial,
                                    flags,
                                    pd,
                                    range,
                                    access,
                                    fail,
                                });
                            }
                        }
                    }
                }
            }
        }
        out
    }

    /// Where an address in a command points.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    enum At {
        Null,
        A(u64),
        B(u64),
        Elsewhere,
    }

    /// The REREG_MR a side sent: flags, start, length, hca_va, the PD (0
    /// none, 1 own, 2 other, 99 unknown), access.
    type Sent = (u32, At, u64, At, u8, u32);

    /// What one side did with one case.
    #[derive(Clone, Debug, PartialEq, Eq)]
    struct Seen {
        /// 0, or `IBV_REREG_MR_ERR_*` (-1 INPUT to -5 CMD_AND_DO_FORK_NEW).
        ret: i32,
        /// The kernel's errno after a refused command (0 otherwise).
        errno: i32,
        sent: Option<Sent>,
        /// Whether the keys changed.
        keys_changed: bool,
    }

    /// The REREG_MR of `log[from..]`, normalised against the two ranges
    /// and the PD handles.
    fn sent_rereg(log: &[Command], from: usize, a: u64, b: u64, pds: (u32, u32)) -> Option<Sent> {
        let at = |x: u64| match x {
            0 => At::Null,
            x if x >= a && x < a + A_LEN as u64 => At::A(x - a),
            x if x >= b && x < b + B_LEN as u64 => At::B(x - b),
            _ => At::Elsewhere,
        };
        log[from..]
            .iter()
            .find(|c| c.write_cmd == Some(IB_USER_VERBS_CMD_REREG_MR))
            .map(|c| {
                let (cmd, _) = ib_uverbs_rereg_mr::read_from_prefix(&c.core_in).unwrap();
                let pd = match cmd.pd_handle {
                    0 => 0,
                    h if h == pds.0 => 1,
                    h if h == pds.1 => 2,
                    _ => 99,
                };
                (
                    cmd.flags,
                    at(cmd.start),
                    cmd.length,
                    at(cmd.hca_va),
                    pd,
                    cmd.access_flags,
                )
            })
    }

    /// The address and length a case passes, with `b` as B's start.
    fn range_of(case: &Case, b: *mut u8) -> (*mut u8, usize) {
        match case.range {
            0 => (b, B_LEN),
            1 => (std::ptr::null_mut(), B_LEN),
            _ => (b, 0),
        }
    }

    /// Two private anonymous mappings, A and B.
    fn ranges() -> (memmap2::MmapMut, memmap2::MmapMut) {
        let map = |len| memmap2::MmapMut::map_anon(len).expect("an anonymous mapping");
        (map(A_LEN), map(B_LEN))
    }

    /// Every case through libibverbs + libmlx5 (the shim's kernel), each on
    /// a fresh MR of A in `pd1`.
    fn rereg_cases_through_libibverbs(pd1: *mut c_void, pd2: *mut c_void) -> Vec<Seen> {
        let (mut a, mut b) = ranges();
        // SAFETY: the PDs are live libibverbs objects.
        let handles = unsafe { ((*pd1.cast::<IbvPd>()).handle, (*pd2.cast::<IbvPd>()).handle) };
        rereg_cases()
            .iter()
            .map(|case| {
                // SAFETY: plain libibverbs calls on live objects; A and B
                // stay mapped through the case, and the MR is deregistered
                // before the next.
                unsafe {
                    let mr = ibv_reg_mr(pd1, a.as_mut_ptr().cast(), A_LEN, case.initial as c_int);
                    assert!(!mr.is_null(), "ibv_reg_mr: {}", errno());
                    let before = ((*mr).lkey, (*mr).rkey);
                    let from = shim::with_kernel(|k| k.log.len());
                    shim::with_kernel_mut(|k| k.fail_next_rereg = case.fail);
                    let pd = match case.pd {
                        0 => std::ptr::null_mut(),
                        1 => pd1,
                        _ => pd2,
                    };
                    let (addr, len) = range_of(case, b.as_mut_ptr());
                    *libc::__errno_location() = 0;
                    let ret = ibv_rereg_mr(
                        mr,
                        case.flags as c_int,
                        pd,
                        addr.cast(),
                        len,
                        case.access as c_int,
                    );
                    let cmd_errno = if ret == -4 || ret == -5 {
                        *libc::__errno_location()
                    } else {
                        0
                    };
                    shim::with_kernel_mut(|k| k.fail_next_rereg = None);
                    let sent = shim::with_kernel(|k| {
                        sent_rereg(&k.log, from, a.as_ptr() as u64, b.as_ptr() as u64, handles)
                    });
                    let keys_changed = ((*mr).lkey, (*mr).rkey) != before;
                    assert_eq!(ibv_dereg_mr(mr), 0, "ibv_dereg_mr: {}", errno());
                    Seen {
                        ret,
                        errno: cmd_errno,
                        sent,
                        keys_changed,
                    }
                }
            })
            .collect()
    }

    /// Every case through uverbs, against an emulated kernel of its own.
    fn rereg_cases_through_uverbs() -> Vec<Seen> {
        let (file, ctx) = uverbs_context();
        let (pd1, pd2) = (ctx.alloc_pd().unwrap(), ctx.alloc_pd().unwrap());
        let handles = (pd1.handle(), pd2.handle());
        let (mut a, mut b) = ranges();
        let seen = rereg_cases()
            .iter()
            .map(|case| {
                let initial = uverbs::AccessFlags::from_bits_retain(case.initial);
                // SAFETY: A stays mapped until after the MR is gone.
                let mut mr = unsafe { pd1.reg_mr(a.as_mut_ptr(), A_LEN, initial) }.expect("reg_mr");
                let before = (mr.lkey(), mr.rkey());
                let from = file.kernel().log.len();
                file.kernel().fail_next_rereg = case.fail;
                let pd = match case.pd {
                    0 => None,
                    1 => Some(&pd1),
                    _ => Some(&pd2),
                };
                let (addr, len) = range_of(case, b.as_mut_ptr());
                // SAFETY: B stays mapped until after the MR is gone.
                let result = unsafe {
                    mr.rereg(
                        uverbs::mr::ReregFlags::from_bits_retain(case.flags),
                        pd,
                        addr,
                        len,
                        uverbs::AccessFlags::from_bits_retain(case.access),
                    )
                };
                file.kernel().fail_next_rereg = None;
                let (ret, errno) = match &result {
                    Ok(()) => (0, 0),
                    Err(e) => {
                        let ret = match e.outcome() {
                            uverbs::mr::ReregOutcome::Input => -1,
                            uverbs::mr::ReregOutcome::DontForkNew => -2,
                            uverbs::mr::ReregOutcome::DoForkOld => -3,
                            uverbs::mr::ReregOutcome::Cmd => -4,
                            uverbs::mr::ReregOutcome::CmdAndDoForkNew => -5,
                        };
                        let errno = if ret == -4 || ret == -5 {
                            e.errno().raw_os_error()
                        } else {
                            0
                        };
                        (ret, errno)
                    }
                };
                let sent = sent_rereg(
                    &file.kernel().log,
                    from,
                    a.as_ptr() as u64,
                    b.as_ptr() as u64,
                    handles,
                );
                let keys_changed = (mr.lkey(), mr.rkey()) != before;
                mr.dereg().expect("uverbs: dereg_mr");
                Seen {
                    ret,
                    errno,
                    sent,
                    keys_changed,
                }
            })
            .collect();
        drop((pd1, pd2, ctx));
        seen
    }
}
