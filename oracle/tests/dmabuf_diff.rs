//! `ibv_reg_dmabuf_mr` (libibverbs 44 with libmlx5, Debian's static
//! archives) and uverbs' `ProtectionDomain::reg_dmabuf_mr`, each against
//! its own emulated mlx5 kernel, over generated inputs (offset, length,
//! iova, access): the `UVERBS_METHOD_REG_DMABUF_MR` ioctl each sends must
//! be the same bytes, header and every attribute in order, but for what
//! each side owns (the output pointers, the PD's handle and the buffer's
//! descriptor number, compared as "the case's own"); and both must get the
//! same answer.
//!
//! It prints `mlx5 oracle: ibv_reg_dmabuf_mr: N cases, 0 differ`. Without
//! the archives it says SKIPPED (fails with `UVERBS_REQUIRE_ORACLE`).

#[cfg(not(oracle_linked))]
#[test]
fn reg_dmabuf_mr_sends_what_libibverbs_sends() {
    let why = env!("UVERBS_ORACLE_MISSING");
    assert!(
        std::env::var_os("UVERBS_REQUIRE_ORACLE").is_none(),
        "UVERBS_REQUIRE_ORACLE is set but libmlx5 is not linked: {why}"
    );
    eprintln!("SKIPPED: reg_dmabuf_mr_sends_what_libibverbs_sends: libmlx5 is not linked ({why})");
}

#[cfg(oracle_linked)]
mod cverbs;
#[cfg(oracle_linked)]
mod shim;

#[cfg(oracle_linked)]
mod linked {
    use std::ffi::{c_int, c_void};
    use std::os::fd::{AsRawFd, OwnedFd};
    use std::sync::Arc;

    use uverbs::mr::DmaBuf;
    use uverbs_oracle::file::EmulatedFile;
    use uverbs_oracle::fixtures::loud;
    use uverbs_oracle::kernel::Command;
    use uverbs_oracle::sysfs;
    use uverbs_uapi::*;
    use zerocopy::FromBytes;

    use super::cverbs::*;
    use super::shim;

    /// `struct ibv_pd` (libibverbs 44): the context, then the handle.
    #[repr(C)]
    struct IbvPd {
        context: *mut c_void,
        handle: u32,
    }

    extern "C" {
        fn ibv_reg_dmabuf_mr(
            pd: *mut c_void,
            offset: u64,
            length: usize,
            iova: u64,
            fd: c_int,
            access: c_int,
        ) -> *mut IbvMr;
    }

    /// The attributes of REG_DMABUF_MR that name what each side owns.
    const PD_HANDLE: u16 = 1;
    const FD: u16 = 5;
    const RESP_LKEY: u16 = 7;
    const RESP_RKEY: u16 = 8;

    /// One generated case.
    #[derive(Clone, Copy, Debug)]
    struct Case {
        offset: u64,
        length: usize,
        iova: u64,
        access: u32,
    }

    /// 4 offsets × 4 lengths × 4 iovas (one with the offset's page
    /// offset, others without: the kernel's EINVAL) × 6 accesses (one
    /// that needs LOCAL_WRITE without it: EINVAL).
    fn cases() -> Vec<Case> {
        let lw = IB_UVERBS_ACCESS_LOCAL_WRITE;
        let (rw, rr) = (IB_UVERBS_ACCESS_REMOTE_WRITE, IB_UVERBS_ACCESS_REMOTE_READ);
        let ra = IB_UVERBS_ACCESS_REMOTE_ATOMIC;
        let ro = IB_UVERBS_ACCESS_RELAXED_ORDERING;
        let mut out = Vec::new();
        for offset in [0, 0x1000, 0x1234, 1 << 32] {
            for length in [1, 0x1000, 0x1_0000, 1 << 31] {
                for iova in [offset, 0, 0x7f00_0000_0234, 0x20_0000 | (offset & 0xfff)] {
                    for access in [0, lw, lw | rr, lw | rw | rr | ra, rr | ro, rw] {
                        out.push(Case {
                            offset,
                            length,
                            iova,
                            access,
                        });
                    }
                }
            }
        }
        out
    }

    /// What one side did with one case: its frame with what it owns
    /// replaced by markers, and the errno (0: registered).
    #[derive(Clone, Debug, PartialEq, Eq)]
    struct Seen {
        frame: Vec<u8>,
        errno: i32,
    }

    /// The REG_DMABUF_MR of `log[from..]`, with the output pointers
    /// zeroed, the PD handle `pd` as 1 and the descriptor `fd` as 1
    /// (anything else is left as it is, to differ).
    fn seen(log: &[Command], from: usize, pd: u32, fd: i32) -> Option<Seen> {
        let c = log[from..]
            .iter()
            .find(|c| (c.object, c.method) == (UVERBS_OBJECT_MR, UVERBS_METHOD_REG_DMABUF_MR))?;
        let mut frame = c.frame.clone();
        let hdr = size_of::<ib_uverbs_ioctl_hdr>();
        for chunk in frame[hdr..].chunks_exact_mut(size_of::<ib_uverbs_attr>()) {
            let mut a = ib_uverbs_attr::read_from_bytes(chunk).unwrap();
            match a.attr_id {
                RESP_LKEY | RESP_RKEY if a.data != 0 => a.data = 0,
                PD_HANDLE if a.data == u64::from(pd) => a.data = 1,
                FD if a.data == fd as u32 as u64 => a.data = 1,
                _ => {}
            }
            chunk.copy_from_slice(zerocopy::IntoBytes::as_bytes(&a));
        }
        Some(Seen {
            frame,
            errno: c.errno,
        })
    }

    /// A memfd to stand for the DMA-BUF (the emulated kernel never looks).
    fn memfd() -> OwnedFd {
        // SAFETY: memfd_create reads the NUL-terminated name and returns a
        // new descriptor (or -1), which nothing else owns.
        let fd = unsafe { libc::memfd_create(c"oracle-dmabuf".as_ptr(), libc::MFD_CLOEXEC) };
        assert!(fd >= 0, "memfd_create: {}", std::io::Error::last_os_error());
        // SAFETY: a new descriptor, owned here alone.
        unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) }
    }

    /// Every case through libibverbs + libmlx5, on the shim's kernel.
    fn through_libibverbs() -> Vec<Option<Seen>> {
        let root = std::env::temp_dir().join(format!("uverbs-dmabuf-{}", std::process::id()));
        sysfs::create(&root).expect("the fake sysfs tree");
        shim::install(&root);
        register_mlx5();
        let buf = memfd();
        let mut n = 0;
        // SAFETY: plain libibverbs calls on the objects it handed out, in
        // order, each checked before the next uses it; the MRs are over a
        // descriptor kept open meanwhile.
        let out = unsafe {
            let list = ibv_get_device_list(&mut n);
            assert!(!list.is_null() && n == 1, "ibv_get_device_list");
            let ctx = ibv_open_device(*list);
            assert!(!ctx.is_null(), "ibv_open_device");
            let pd = ibv_alloc_pd(ctx);
            assert!(!pd.is_null(), "ibv_alloc_pd");
            let handle = (*pd.cast::<IbvPd>()).handle;
            let out = cases()
                .iter()
                .map(|c| {
                    let from = shim::with_kernel(|k| k.log.len());
                    let mr = ibv_reg_dmabuf_mr(
                        pd,
                        c.offset,
                        c.length,
                        c.iova,
                        buf.as_raw_fd(),
                        c.access as c_int,
                    );
                    if !mr.is_null() {
                        assert_eq!(ibv_dereg_mr(mr), 0, "ibv_dereg_mr");
                    }
                    shim::with_kernel(|k| seen(&k.log, from, handle, buf.as_raw_fd()))
                })
                .collect();
            let left = shim::with_kernel_mut(|k| std::mem::take(&mut k.mrs));
            assert!(left.is_empty(), "every MR deregistered: {left:?}");
            assert_eq!(ibv_dealloc_pd(pd), 0, "ibv_dealloc_pd");
            assert_eq!(ibv_close_device(ctx), 0, "ibv_close_device");
            ibv_free_device_list(list);
            out
        };
        let _ = std::fs::remove_dir_all(&root);
        out
    }

    /// Every case through uverbs, on an emulated kernel of its own; each
    /// registration over a descriptor of its own, closed with the region.
    fn through_uverbs() -> Vec<Option<Seen>> {
        let file = Arc::new(EmulatedFile::default());
        let ctx = uverbs_oracle::fixtures::uverbs_context(&file);
        let pd = ctx.alloc_pd().expect("uverbs: ALLOC_PD");
        let out = cases()
            .iter()
            .map(|c| {
                let buf = DmaBuf::from_fd(memfd());
                let fd = buf.as_raw_fd();
                let from = file.kernel().log.len();
                let access = uverbs::AccessFlags::from_bits_retain(c.access);
                match pd.reg_dmabuf_mr(buf, c.offset, c.length, c.iova, access) {
                    Ok(mr) => {
                        assert_eq!(mr.addr(), c.iova);
                        mr.dereg().expect("uverbs: dereg_mr");
                    }
                    Err(e) => assert!(
                        matches!(e.error, uverbs::Error::Os { .. }),
                        "{c:?}: refused by the kernel, not before: {}",
                        e.error
                    ),
                }
                seen(&file.kernel().log, from, pd.handle(), fd)
            })
            .collect();
        assert!(file.kernel().mrs.is_empty(), "every MR deregistered");
        drop((pd, ctx));
        out
    }

    #[test]
    fn reg_dmabuf_mr_sends_what_libibverbs_sends() {
        uverbs_oracle::fixtures::clear_environment();
        let theirs = through_libibverbs();
        let ours = through_uverbs();
        let all = cases();
        let mut differ = Vec::new();
        let mut refused = 0;
        for ((case, t), o) in all.iter().zip(&theirs).zip(&ours) {
            let frame_len = t.as_ref().map(|s| s.frame.len());
            assert_eq!(
                frame_len,
                Some(24 + 9 * 16),
                "{case:?}: libibverbs sent REG_DMABUF_MR, 9 attributes"
            );
            if t != o {
                differ.push(format!("{case:?}: libibverbs {t:02x?}, uverbs {o:02x?}"));
            }
            refused += usize::from(t.as_ref().is_some_and(|s| s.errno != 0));
        }
        loud(&format!(
            "mlx5 oracle: ibv_reg_dmabuf_mr: {} cases ({refused} refused by the kernel), {} differ",
            all.len(),
            differ.len()
        ));
        assert!(refused > 0 && refused < all.len(), "both answers seen");
        assert!(
            differ.is_empty(),
            "{} differ, the first: {:#?}",
            differ.len(),
            &differ[..differ.len().min(3)]
        );
    }
}
