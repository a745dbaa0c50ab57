//! uverbs and rdma-core's libmlx5 44 on one emulated mlx5 device, each
//! with an RC QP connected to the other's, the device model moving the
//! bytes: uverbs' SEND with immediate, RDMA WRITE, READ and both atomics
//! against libmlx5's memory and receive queue, then libmlx5's SEND and
//! WRITE with immediate against uverbs'. Each side polls its own CQ; the
//! bytes and the work completions are checked. One library's WQEs having
//! the right effect on the other's QP is traffic in both directions.
//!
//! Without the archives it says SKIPPED (fails with `UVERBS_REQUIRE_ORACLE`).

#[cfg(not(oracle_linked))]
#[test]
fn uverbs_and_libmlx5_talk_through_the_device_model() {
    let why = env!("UVERBS_ORACLE_MISSING");
    assert!(
        std::env::var_os("UVERBS_REQUIRE_ORACLE").is_none(),
        "UVERBS_REQUIRE_ORACLE is set but libmlx5 is not linked: {why}"
    );
    eprintln!(
        "SKIPPED: uverbs_and_libmlx5_talk_through_the_device_model: libmlx5 is not linked ({why})"
    );
}

#[cfg(oracle_linked)]
mod cverbs;
#[cfg(oracle_linked)]
mod shim;

#[cfg(oracle_linked)]
mod linked {
    use std::ffi::{c_int, c_void};
    use std::sync::Arc;

    use uverbs::command::QpType;

    use uverbs::wr::{
        Payload, RecvWr, Remote, SendOp, SendWr, Sge, WcOpcode, WcStatus, WorkCompletion,
    };
    use uverbs::{AccessFlags, QpInit};
    use uverbs_oracle::file::EmulatedFile;
    use uverbs_oracle::fixtures::{clear_environment, connect_steps, uverbs_context};
    use uverbs_oracle::sysfs;

    use super::cverbs::*;
    use super::shim;

    const LEN: usize = 1 << 14;

    fn run_device() -> usize {
        // SAFETY: every QP, CQ and MR of the emulated kernel is live and its
        // memory mapped while the test runs the device.
        shim::with_kernel_mut(|k| unsafe { k.run_device() })
    }

    /// Everything libmlx5's CQ holds.
    fn poll_theirs(ctx: *mut c_void, cq: *mut c_void) -> Vec<IbvWc> {
        let mut out = Vec::new();
        loop {
            let mut wc = IbvWc::default();
            // SAFETY: libmlx5's poll_cq on a live CQ, one entry.
            let n = unsafe { op::<PollCq>(ctx, POLL_CQ)(cq, 1, &mut wc) };
            assert!(n >= 0, "ibv_poll_cq: {n}");
            if n == 0 {
                return out;
            }
            out.push(wc);
        }
    }

    #[test]
    fn uverbs_and_libmlx5_talk_through_the_device_model() {
        clear_environment();
        let root = std::env::temp_dir().join(format!("uverbs-cross-{}", std::process::id()));
        sysfs::create(&root).expect("the fake sysfs tree");
        shim::install(&root);
        shim::with_kernel_mut(|k| k.infiniband_port = true);
        register_mlx5();
        let mut theirs_mem = memmap2::MmapMut::map_anon(LEN).unwrap();
        let mut ours_mem = memmap2::MmapMut::map_anon(LEN).unwrap();
        let t_base = theirs_mem.as_ptr() as u64;
        let o_base = ours_mem.as_ptr() as u64;

        // libmlx5: device, PD, MR, CQ, RC QP.
        // SAFETY: libibverbs calls on objects made here; the memory
        // outlives the MR (deregistered before the end).
        let (tctx, tpd, tmr, tcq, tqp) = unsafe {
            let mut n = 0;
            let list = ibv_get_device_list(&mut n);
            assert_eq!(n, 1);
            let ctx = ibv_open_device(*list);
            ibv_free_device_list(list);
            let pd = ibv_alloc_pd(ctx);
            let mr = ibv_reg_mr(
                pd,
                theirs_mem.as_mut_ptr().cast(),
                LEN,
                (LOCAL_WRITE as u32 | ALL_ACCESS) as c_int,
            );
            assert!(!mr.is_null());
            let cq = ibv_create_cq(ctx, 16, std::ptr::null_mut(), std::ptr::null_mut(), 0);
            let mut attr = IbvQpInitAttr {
                qp_context: std::ptr::null_mut(),
                send_cq: cq,
                recv_cq: cq,
                srq: std::ptr::null_mut(),
                cap: IbvQpCap {
                    max_send_wr: 16,
                    max_recv_wr: 16,
                    max_send_sge: 1,
                    max_recv_sge: 1,
                    max_inline_data: 0,
                },
                qp_type: RC,
                sq_sig_all: 0,
            };
            let qp = ibv_create_qp(pd, &mut attr);
            assert!(!qp.is_null());
            (ctx, pd, mr, cq, qp)
        };

        // uverbs: on the same emulated kernel.
        let file = Arc::new(EmulatedFile::sharing(Box::new(shim::ShimKernel)));
        let ctx = uverbs_context(&file);
        let pd = ctx.alloc_pd().unwrap();
        let access = AccessFlags::LOCAL_WRITE
            | AccessFlags::REMOTE_WRITE
            | AccessFlags::REMOTE_READ
            | AccessFlags::REMOTE_ATOMIC;
        // SAFETY: `ours_mem` outlives the MR (dropped before it).
        let mr = unsafe { pd.reg_mr(ours_mem.as_mut_ptr(), LEN, access) }.unwrap();
        let cq = ctx.create_cq(16, None).unwrap();
        let qp = pd.create_qp(&QpInit::new(QpType::Rc, &cq, &cq)).unwrap();

        // Connect each to the other.
        // SAFETY: a live QP.
        let t_qpn = unsafe { (*tqp).qp_num };
        for step in connect_steps(t_qpn, access, true) {
            qp.modify(&step).expect("uverbs: modify_qp");
        }
        // SAFETY: a live QP of libibverbs.
        unsafe { c_modify_all(tqp, c_connect_steps(qp.qp_num(), true)) };

        // SAFETY: live MRs.
        let (t_lkey, t_rkey) = unsafe { ((*tmr).lkey, (*tmr).rkey) };
        let (o_lkey, o_rkey) = (mr.lkey(), mr.rkey());
        let mut checked = 0;

        // uverbs -> libmlx5: SEND with immediate into a libmlx5 receive,
        // WRITE, READ, CAS and FAA on libmlx5's memory.
        for (i, b) in ours_mem[..256].iter_mut().enumerate() {
            *b = i as u8 ^ 0x5a;
        }
        for (i, b) in theirs_mem[0x2000..0x2040].iter_mut().enumerate() {
            *b = i as u8 ^ 0xc3;
        }
        theirs_mem[0x3000..0x3008].copy_from_slice(&7u64.to_be_bytes());
        theirs_mem[0x3008..0x3010].copy_from_slice(&100u64.to_be_bytes());
        let mut rsge = IbvSge {
            addr: t_base + 0x1000,
            length: 128,
            lkey: t_lkey,
        };
        let mut rwr = IbvRecvWr {
            wr_id: 0x71,
            next: std::ptr::null_mut(),
            sg_list: &mut rsge,
            num_sge: 1,
        };
        let mut bad = std::ptr::null_mut();
        // SAFETY: libmlx5's post_recv on a live QP.
        assert_eq!(
            unsafe { op::<PostRecv>(tctx, POST_RECV)(tqp, &mut rwr, &mut bad) },
            0
        );
        let send = [Sge {
            addr: o_base,
            length: 100,
            lkey: o_lkey,
        }];
        let write = [Sge {
            addr: o_base + 100,
            length: 64,
            lkey: o_lkey,
        }];
        let read = [Sge {
            addr: o_base + 0x1000,
            length: 64,
            lkey: o_lkey,
        }];
        let cas = [Sge {
            addr: o_base + 0x2000,
            length: 8,
            lkey: o_lkey,
        }];
        let faa = [Sge {
            addr: o_base + 0x2008,
            length: 8,
            lkey: o_lkey,
        }];
        let remote = |addr: u64| Remote {
            addr: t_base + addr,
            rkey: t_rkey,
        };
        let wrs = [
            SendWr::new(1, SendOp::Send { imm: Some(0xabcd) }, Payload::Sges(&send)),
            SendWr::new(
                2,
                SendOp::RdmaWrite {
                    remote: remote(0x800),
                    imm: None,
                },
                Payload::Sges(&write),
            ),
            SendWr::new(
                3,
                SendOp::RdmaRead {
                    remote: remote(0x2000),
                },
                Payload::Sges(&read),
            ),
            SendWr::new(
                4,
                SendOp::CompareSwap {
                    remote: remote(0x3000),
                    compare: 7,
                    swap: 9,
                },
                Payload::Sges(&cas),
            ),
            SendWr::new(
                5,
                SendOp::FetchAdd {
                    remote: remote(0x3008),
                    add: 5,
                },
                Payload::Sges(&faa),
            ),
        ];
        // SAFETY: buffers of uverbs' registered memory, untouched until
        // their completions are polled below.
        unsafe { qp.post_send(&wrs) }.expect("uverbs: post_send");
        assert!(run_device() >= 5, "the device ran uverbs' WQEs");
        let mut wcs = [WorkCompletion::default(); 8];
        let n = cq.poll(&mut wcs).unwrap();
        let ours: Vec<_> = wcs[..n]
            .iter()
            .map(|w| (w.wr_id(), w.status(), w.opcode()))
            .collect();
        assert_eq!(
            ours,
            vec![
                (1, WcStatus::Success, Some(WcOpcode::Send)),
                (2, WcStatus::Success, Some(WcOpcode::RdmaWrite)),
                (3, WcStatus::Success, Some(WcOpcode::RdmaRead)),
                (4, WcStatus::Success, Some(WcOpcode::CompSwap)),
                (5, WcStatus::Success, Some(WcOpcode::FetchAdd)),
            ],
            "{:?}",
            &wcs[..n]
        );
        checked += n;
        let theirs = poll_theirs(tctx, tcq);
        assert_eq!(theirs.len(), 1, "{theirs:?}");
        let w = &theirs[0];
        assert_eq!(
            (
                w.wr_id,
                w.status,
                w.opcode,
                w.byte_len,
                w.wc_flags & WITH_IMM
            ),
            (0x71, SUCCESS, WC_RECV, 100, WITH_IMM),
            "{w:?}"
        );
        assert_eq!(u32::from_be(w.imm_data), 0xabcd);
        assert_eq!(w.qp_num, t_qpn);
        checked += 1;
        assert_eq!(&theirs_mem[0x1000..0x1064], &ours_mem[..100], "SEND bytes");
        assert_eq!(
            &theirs_mem[0x800..0x840],
            &ours_mem[100..164],
            "WRITE bytes"
        );
        assert_eq!(
            &ours_mem[0x1000..0x1040],
            &theirs_mem[0x2000..0x2040],
            "READ bytes"
        );
        assert_eq!(
            &ours_mem[0x2000..0x2008],
            &7u64.to_be_bytes(),
            "CAS old value"
        );
        assert_eq!(
            &theirs_mem[0x3000..0x3008],
            &9u64.to_be_bytes(),
            "CAS swapped"
        );
        assert_eq!(
            &ours_mem[0x2008..0x2010],
            &100u64.to_be_bytes(),
            "FAA old value"
        );
        assert_eq!(
            &theirs_mem[0x3008..0x3010],
            &105u64.to_be_bytes(),
            "FAA added"
        );
        checked += 5;

        // libmlx5 -> uverbs: SEND into a uverbs receive, WRITE with
        // immediate into uverbs' memory (consuming a second receive).
        let rsges = [
            Sge {
                addr: o_base + 0x3000,
                length: 256,
                lkey: o_lkey,
            },
            Sge {
                addr: o_base + 0x3100,
                length: 16,
                lkey: o_lkey,
            },
        ];
        // SAFETY: uverbs' registered memory, untouched until polled.
        unsafe {
            qp.post_recv(&[
                RecvWr::new(0x81, &rsges[..1]),
                RecvWr::new(0x82, &rsges[1..]),
            ])
        }
        .expect("uverbs: post_recv");
        for (i, b) in theirs_mem[0x100..0x200].iter_mut().enumerate() {
            *b = i as u8 ^ 0x3c;
        }
        let mut ssge = IbvSge {
            addr: t_base + 0x100,
            length: 200,
            lkey: t_lkey,
        };
        let mut wsge = IbvSge {
            addr: t_base + 0x100,
            length: 48,
            lkey: t_lkey,
        };
        let mut w2 = IbvSendWr {
            wr_id: 0x92,
            next: std::ptr::null_mut(),
            sg_list: &mut wsge,
            num_sge: 1,
            opcode: WR_WRITE_IMM,
            send_flags: SIGNALED,
            imm_data: 0x1357u32.to_be(),
            wr: [o_base + 0x3800, u64::from(o_rkey), 0, 0],
            qp_type: 0,
            tail: [0; 6],
        };
        let mut w1 = IbvSendWr {
            wr_id: 0x91,
            next: &mut w2,
            sg_list: &mut ssge,
            num_sge: 1,
            opcode: WR_SEND,
            send_flags: SIGNALED,
            imm_data: 0,
            wr: [0; 4],
            qp_type: 0,
            tail: [0; 6],
        };
        let mut bad = std::ptr::null_mut();
        // SAFETY: libmlx5's post_send on a live QP; the WRs live through it.
        assert_eq!(
            unsafe { op::<PostSend>(tctx, POST_SEND)(tqp, &mut w1, &mut bad) },
            0
        );
        assert!(run_device() >= 2, "the device ran libmlx5's WQEs");
        let theirs = poll_theirs(tctx, tcq);
        let t: Vec<_> = theirs
            .iter()
            .map(|w| (w.wr_id, w.status, w.opcode))
            .collect();
        assert_eq!(t, vec![(0x91, SUCCESS, WC_SEND), (0x92, SUCCESS, WC_WRITE)]);
        checked += 2;
        let n = cq.poll(&mut wcs).unwrap();
        assert_eq!(n, 2, "{:?}", &wcs[..n]);
        assert_eq!(
            (
                wcs[0].wr_id(),
                wcs[0].status(),
                wcs[0].opcode(),
                wcs[0].byte_len()
            ),
            (0x81, WcStatus::Success, Some(WcOpcode::Recv), 200)
        );
        assert_eq!(
            (
                wcs[1].wr_id(),
                wcs[1].opcode(),
                wcs[1].byte_len(),
                wcs[1].imm_data()
            ),
            (0x82, Some(WcOpcode::RecvRdmaWithImm), 48, Some(0x1357))
        );
        assert_eq!(wcs[0].qp_num(), qp.qp_num());
        checked += 2;
        assert_eq!(
            &ours_mem[0x3000..0x30c8],
            &theirs_mem[0x100..0x1c8],
            "SEND bytes"
        );
        assert_eq!(
            &ours_mem[0x3800..0x3830],
            &theirs_mem[0x100..0x130],
            "WRITE bytes"
        );
        checked += 2;

        drop((qp, cq, mr, pd, ctx));
        // SAFETY: libmlx5's objects, destroyed children first.
        unsafe {
            assert_eq!(ibv_destroy_qp(tqp), 0);
            assert_eq!(ibv_destroy_cq(tcq), 0);
            assert_eq!(ibv_dereg_mr(tmr), 0);
            assert_eq!(ibv_dealloc_pd(tpd), 0);
            assert_eq!(ibv_close_device(tctx), 0);
        }
        let _ = std::fs::remove_dir_all(&root);
        use std::io::Write;
        let _ = writeln!(
            std::io::stderr(),
            "mlx5 model: uverbs <-> libmlx5 traffic: {checked} operations checked"
        );
    }
}
