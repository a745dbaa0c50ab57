//! libmlx5's own data path (Debian's static rdma-core 44, unmodified)
//! against the emulated mlx5 kernel and its device model: RC, UD traffic,
//! RC traffic onto two QPs on one SRQ, and error completions posted and
//! polled through libibverbs' public API,
//! the WQEs executed by `Mlx5Kernel::run_device`. libmlx5's WQEs producing
//! the right bytes and work completions is what proves the model, before
//! uverbs' own mlx5 provider is compared with it.
//!
//! One test function: the shim's emulated kernel is process-global.
//! Without the archives the test says SKIPPED (and fails with
//! `UVERBS_REQUIRE_ORACLE` set), as tests/libmlx5.rs.

#[cfg(not(oracle_linked))]
#[test]
fn libmlx5_traffic_through_the_device_model() {
    let why = env!("UVERBS_ORACLE_MISSING");
    assert!(
        std::env::var_os("UVERBS_REQUIRE_ORACLE").is_none(),
        "UVERBS_REQUIRE_ORACLE is set but libmlx5 is not linked: {why}"
    );
    eprintln!("SKIPPED: libmlx5_traffic_through_the_device_model: libmlx5 is not linked ({why})");
}

#[cfg(oracle_linked)]
mod cverbs;
#[cfg(oracle_linked)]
mod shim;

#[cfg(oracle_linked)]
mod linked {
    use std::ffi::{c_int, c_void};

    use uverbs_oracle::fixtures::loud;
    use uverbs_oracle::qp::QpState;
    use uverbs_oracle::sysfs;

    use super::cverbs::*;
    use super::shim;

    fn errno() -> std::io::Error {
        std::io::Error::last_os_error()
    }

    /// The device model, run as if every doorbell had rung.
    fn run_device() -> usize {
        // SAFETY: every QP, CQ and MR of the emulated kernel is live: the
        // test destroys them only after its last run, and keeps its
        // buffers mapped until after deregistering them.
        shim::with_kernel_mut(|k| unsafe { k.run_device() })
    }

    /// The test's verbs objects and buffers.
    struct Env {
        ctx: *mut c_void,
        pd: *mut c_void,
        mem: memmap2::MmapMut,
        mr: *mut IbvMr,
        /// A region with local write only: no remote access.
        local: memmap2::MmapMut,
        local_mr: *mut IbvMr,
        cqs: Vec<*mut c_void>,
        qps: Vec<*mut IbvQp>,
        checked: usize,
    }

    impl Env {
        fn addr(&self, off: usize) -> u64 {
            self.mem.as_ptr() as u64 + off as u64
        }

        fn lkey(&self) -> u32 {
            // SAFETY: a live MR.
            unsafe { (*self.mr).lkey }
        }

        fn rkey(&self) -> u32 {
            // SAFETY: a live MR.
            unsafe { (*self.mr).rkey }
        }

        /// A QP of `qp_type` with its own CQ for both queues.
        fn qp(&mut self, qp_type: u32) -> *mut IbvQp {
            self.qp_on(qp_type, std::ptr::null_mut())
        }

        /// The same, receiving from `srq` if not null (then no RQ).
        fn qp_on(&mut self, qp_type: u32, srq: *mut c_void) -> *mut IbvQp {
            // SAFETY: plain libibverbs calls on live objects.
            unsafe {
                let cq = ibv_create_cq(self.ctx, 32, std::ptr::null_mut(), std::ptr::null_mut(), 0);
                assert!(!cq.is_null(), "ibv_create_cq: {}", errno());
                let mut attr = IbvQpInitAttr {
                    qp_context: std::ptr::null_mut(),
                    send_cq: cq,
                    recv_cq: cq,
                    srq,
                    cap: IbvQpCap {
                        max_send_wr: 16,
                        max_recv_wr: if srq.is_null() { 16 } else { 0 },
                        max_send_sge: 2,
                        max_recv_sge: 2,
                        max_inline_data: 64,
                    },
                    qp_type,
                    sq_sig_all: 0,
                };
                let qp = ibv_create_qp(self.pd, &mut attr);
                assert!(
                    !qp.is_null(),
                    "ibv_create_qp: {}\n{:?}",
                    errno(),
                    shim::with_kernel(|k| k.log.last().cloned())
                );
                self.cqs.push(cq);
                self.qps.push(qp);
                qp
            }
        }

        /// RESET to RTS, connected to `dest` (RC).
        fn connect(&self, qp: *mut IbvQp, dest: *mut IbvQp) {
            // SAFETY: live QPs of libibverbs.
            unsafe { c_modify_all(qp, c_connect_steps((*dest).qp_num, true)) };
        }

        /// RESET to RTS of a UD QP.
        fn ud_ready(&self, qp: *mut IbvQp) {
            // SAFETY: a live QP of libibverbs.
            unsafe { c_modify_all(qp, c_ud_steps()) };
        }

        /// Posts one receive of `len` bytes at `off`.
        fn recv(&self, qp: *mut IbvQp, wr_id: u64, off: usize, len: u32) {
            let mut sge = IbvSge {
                addr: self.addr(off),
                length: len,
                lkey: self.lkey(),
            };
            let mut wr = IbvRecvWr {
                wr_id,
                next: std::ptr::null_mut(),
                sg_list: &mut sge,
                num_sge: 1,
            };
            let mut bad = std::ptr::null_mut();
            // SAFETY: libmlx5's post_recv on a live QP; the WR lives
            // through the call.
            let ret = unsafe { op::<PostRecv>(self.ctx, POST_RECV)(qp, &mut wr, &mut bad) };
            assert_eq!(ret, 0, "ibv_post_recv");
        }

        /// Posts one send WR: `sge` is (offset, length, lkey).
        #[allow(clippy::too_many_arguments)]
        fn send(
            &self,
            qp: *mut IbvQp,
            wr_id: u64,
            opcode: u32,
            flags: u32,
            sge: Option<(usize, u32, u32)>,
            imm: u32,
            wr: [u64; 4],
        ) {
            let mut sge = sge.map(|(off, len, lkey)| IbvSge {
                addr: self.addr(off),
                length: len,
                lkey,
            });
            let mut w = IbvSendWr {
                wr_id,
                next: std::ptr::null_mut(),
                sg_list: sge
                    .as_mut()
                    .map_or(std::ptr::null_mut(), std::ptr::from_mut),
                num_sge: c_int::from(sge.is_some()),
                opcode,
                send_flags: flags,
                imm_data: imm.to_be(),
                wr,
                qp_type: 0,
                tail: [0; 6],
            };
            let mut bad = std::ptr::null_mut();
            // SAFETY: libmlx5's post_send on a live QP; the WR and its SGE
            // live through the call (inline data is copied by it).
            let ret = unsafe { op::<PostSend>(self.ctx, POST_SEND)(qp, &mut w, &mut bad) };
            assert_eq!(ret, 0, "ibv_post_send opcode {opcode}: {}", errno());
        }

        /// Everything the CQ of `qp` holds, through libmlx5's poll.
        fn poll(&self, qp: *mut IbvQp) -> Vec<IbvWc> {
            let mut out = Vec::new();
            loop {
                let mut wc = IbvWc::default();
                // SAFETY: libmlx5's poll_cq on a live CQ, one entry.
                let n = unsafe {
                    op::<PollCq>(self.ctx, POLL_CQ)((*qp).send_cq, 1, std::ptr::from_mut(&mut wc))
                };
                assert!(n >= 0, "ibv_poll_cq: {n}");
                if n == 0 {
                    return out;
                }
                out.push(wc);
            }
        }

        /// Asserts one work completion's fields.
        fn check(
            &mut self,
            wc: &IbvWc,
            wr_id: u64,
            status: u32,
            opcode: Option<u32>,
            qp: *mut IbvQp,
        ) {
            assert_eq!((wc.wr_id, wc.status), (wr_id, status), "{wc:?}");
            if let Some(op) = opcode {
                assert_eq!(wc.opcode, op, "{wc:?}");
            }
            // SAFETY: a live QP.
            assert_eq!(wc.qp_num, unsafe { (*qp).qp_num }, "{wc:?}");
            self.checked += 1;
        }

        fn bytes(&self, off: usize, len: usize) -> &[u8] {
            &self.mem[off..off + len]
        }
    }

    /// Fills `len` bytes at `off` with a pattern seeded by `seed`.
    fn fill(mem: &mut [u8], off: usize, len: usize, seed: u8) {
        for (i, b) in mem[off..off + len].iter_mut().enumerate() {
            *b = seed.wrapping_add(i as u8).wrapping_mul(7);
        }
    }

    #[test]
    fn libmlx5_traffic_through_the_device_model() {
        uverbs_oracle::fixtures::clear_environment();
        let root = std::env::temp_dir().join(format!("uverbs-model-{}", std::process::id()));
        sysfs::create(&root).expect("the fake sysfs tree");
        shim::install(&root);
        // UD over InfiniBand: an address handle is libmlx5's alone.
        shim::with_kernel_mut(|k| k.infiniband_port = true);

        register_mlx5();
        // SAFETY: plain libibverbs calls, each checked before the next
        // uses what it returned; every object is destroyed before the
        // buffers it names are unmapped.
        unsafe {
            let mut n = 0;
            let list = ibv_get_device_list(&mut n);
            assert_eq!(n, 1);
            let ctx = ibv_open_device(*list);
            assert!(!ctx.is_null(), "ibv_open_device: {}", errno());
            let pd = ibv_alloc_pd(ctx);
            assert!(!pd.is_null());
            let mut mem = memmap2::MmapMut::map_anon(1 << 16).unwrap();
            let mr = ibv_reg_mr(pd, mem.as_mut_ptr().cast(), mem.len(), ALL_ACCESS as c_int);
            assert!(!mr.is_null(), "ibv_reg_mr: {}", errno());
            let mut local = memmap2::MmapMut::map_anon(1 << 12).unwrap();
            let local_mr = ibv_reg_mr(pd, local.as_mut_ptr().cast(), local.len(), LOCAL_WRITE);
            assert!(!local_mr.is_null());
            let mut env = Env {
                ctx,
                pd,
                mem,
                mr,
                local,
                local_mr,
                cqs: Vec::new(),
                qps: Vec::new(),
                checked: 0,
            };

            rc_traffic(&mut env);
            shim::with_kernel(check_create_qp);
            ud_traffic(&mut env);
            errors(&mut env);
            let srq = srq_traffic(&mut env);

            for qp in std::mem::take(&mut env.qps) {
                assert_eq!(ibv_destroy_qp(qp), 0, "ibv_destroy_qp: {}", errno());
            }
            assert_eq!(ibv_destroy_srq(srq), 0, "ibv_destroy_srq: {}", errno());
            for cq in std::mem::take(&mut env.cqs) {
                assert_eq!(ibv_destroy_cq(cq), 0, "ibv_destroy_cq: {}", errno());
            }
            assert_eq!(ibv_dereg_mr(env.mr), 0);
            assert_eq!(ibv_dereg_mr(env.local_mr), 0);
            let _ = (&env.local, &mut env.mem);
            assert_eq!(ibv_dealloc_pd(pd), 0);
            assert_eq!(ibv_close_device(ctx), 0);
            ibv_free_device_list(list);
            let (checked, qps_made) = (env.checked, shim::with_kernel(|k| k.qps.len()));
            assert_eq!(qps_made, 0, "every QP destroyed");
            let refused: Vec<_> = shim::with_kernel(|k| {
                k.log
                    .iter()
                    .filter(|c| c.errno != 0 && c.object == uverbs_uapi::UVERBS_OBJECT_QP)
                    .cloned()
                    .collect()
            });
            assert!(refused.is_empty(), "QP commands refused: {refused:?}");
            loud(&format!(
                "mlx5 model: libmlx5 traffic: {checked} operations checked"
            ));
        }
        let _ = std::fs::remove_dir_all(&root);
    }

    /// Two connected RC QPs: SEND, SEND with immediate, WRITE (+imm), an
    /// unsignalled WRITE, READ, CAS, FAA and an inline SEND.
    fn rc_traffic(env: &mut Env) {
        let (a, b) = (env.qp(RC), env.qp(RC));
        env.connect(a, b);
        env.connect(b, a);
        shim::with_kernel(|k| {
            assert!(k.qps.values().all(|q| q.state == QpState::Rts));
        });
        // A's sources at 0x0000.., B's receive buffers at 0x1000.., B's
        // RDMA target at 0x2000.., A's READ/atomic results at 0x3000...
        fill(&mut env.mem, 0, 0x400, 1);
        fill(&mut env.mem, 0x2400, 0x100, 9);
        env.mem[0x2800..0x2808].copy_from_slice(&5u64.to_be_bytes());
        for i in 0..4 {
            env.recv(b, 100 + i, 0x1000 + 0x100 * i as usize, 0x100);
        }
        let (lk, rk) = (env.lkey(), env.rkey());
        let rdma = |off: usize| [env.addr(off), u64::from(rk), 0, 0];
        env.send(a, 1, WR_SEND, SIGNALED, Some((0, 100, lk)), 0, [0; 4]);
        env.send(
            a,
            2,
            WR_SEND_IMM,
            SIGNALED,
            Some((0x100, 50, lk)),
            0xdead_beef,
            [0; 4],
        );
        env.send(
            a,
            3,
            WR_WRITE,
            SIGNALED,
            Some((0x200, 64, lk)),
            0,
            rdma(0x2000),
        );
        env.send(
            a,
            4,
            WR_WRITE_IMM,
            SIGNALED,
            Some((0x300, 32, lk)),
            0x1234,
            rdma(0x2100),
        );
        env.send(a, 5, WR_WRITE, 0, Some((0x340, 16, lk)), 0, rdma(0x2200));
        env.send(
            a,
            6,
            WR_READ,
            SIGNALED,
            Some((0x3000, 128, lk)),
            0,
            rdma(0x2400),
        );
        let atomic = |compare: u64, swap: u64| [env.addr(0x2800), compare, swap, u64::from(rk)];
        env.send(
            a,
            7,
            WR_CAS,
            SIGNALED,
            Some((0x3100, 8, lk)),
            0,
            atomic(5, 9),
        );
        env.send(
            a,
            8,
            WR_FAA,
            SIGNALED,
            Some((0x3108, 8, lk)),
            0,
            atomic(3, 0),
        );
        env.send(
            a,
            9,
            WR_SEND,
            SIGNALED | INLINE,
            Some((0x380, 20, lk)),
            0,
            [0; 4],
        );
        // What libmlx5 rang: a doorbell (or BlueFlame copy) of its last
        // WQE in A's UAR page, at one of its two registers.
        let page = shim::with_kernel(|k| {
            let qp = k
                .qps
                .values()
                .find(|q| q.qpn == unsafe { (*a).qp_num })
                .unwrap();
            *k.uar_page(qp.req.bfreg_index)
                .expect("A's UAR page is mapped")
        });
        assert!(
            page[0x800..0xa00].iter().any(|&x| x != 0),
            "libmlx5 wrote a doorbell to a blue-flame register"
        );

        assert_eq!(run_device(), 9, "every WQE executed");

        let sent = env.poll(a);
        let want = [
            (1, WC_SEND),
            (2, WC_SEND),
            (3, WC_WRITE),
            (4, WC_WRITE),
            (6, WC_READ),
            (7, WC_CAS),
            (8, WC_FAA),
            (9, WC_SEND),
        ];
        assert_eq!(sent.len(), want.len(), "signalled WRs only: {sent:?}");
        for (wc, (id, op)) in sent.iter().zip(want) {
            env.check(wc, id, SUCCESS, Some(op), a);
        }
        assert_eq!(sent[4].byte_len, 128, "READ's length");
        assert_eq!((sent[5].byte_len, sent[6].byte_len), (8, 8));

        let got = env.poll(b);
        assert_eq!(got.len(), 4, "{got:?}");
        let want = [
            (100, WC_RECV, 100, None),
            (101, WC_RECV, 50, Some(0xdead_beef)),
            (102, WC_RECV_IMM, 32, Some(0x1234)),
            (103, WC_RECV, 20, None),
        ];
        for (wc, (id, op, len, imm)) in got.iter().zip(want) {
            env.check(wc, id, SUCCESS, Some(op), b);
            assert_eq!(wc.byte_len, len, "{wc:?}");
            assert_eq!(
                wc.wc_flags & WITH_IMM != 0,
                imm.is_some(),
                "immediate flag: {wc:?}"
            );
            if let Some(imm) = imm {
                assert_eq!(u32::from_be(wc.imm_data), imm, "{wc:?}");
            }
        }
        // The bytes moved.
        assert_eq!(env.bytes(0x1000, 100), env.bytes(0, 100), "SEND");
        assert_eq!(env.bytes(0x1100, 50), env.bytes(0x100, 50), "SEND with imm");
        assert_eq!(env.bytes(0x2000, 64), env.bytes(0x200, 64), "WRITE");
        assert_eq!(
            env.bytes(0x2100, 32),
            env.bytes(0x300, 32),
            "WRITE with imm"
        );
        assert_eq!(
            env.bytes(0x2200, 16),
            env.bytes(0x340, 16),
            "unsignalled WRITE"
        );
        assert_eq!(env.bytes(0x3000, 128), env.bytes(0x2400, 128), "READ");
        // 20 bytes: scattered into B's CQE by the device, copied into the
        // receive buffer by libmlx5's poll.
        assert_eq!(env.bytes(0x1300, 20), env.bytes(0x380, 20), "inline SEND");
        assert_eq!(
            env.bytes(0x3100, 8),
            5u64.to_be_bytes(),
            "CAS returns the old value"
        );
        assert_eq!(
            env.bytes(0x3108, 8),
            9u64.to_be_bytes(),
            "FAA returns the swapped value"
        );
        assert_eq!(
            env.bytes(0x2800, 8),
            12u64.to_be_bytes(),
            "5, swapped to 9, plus 3"
        );
        env.checked += 10;

        // libmlx5 recorded what it consumed in B's CQ doorbell record.
        shim::with_kernel(|k| {
            let qp = k
                .qps
                .values()
                .find(|q| q.qpn == unsafe { (*b).qp_num })
                .unwrap();
            let cq = k.cqs[&qp.recv_cq];
            // SAFETY: the CQ's live doorbell record.
            let ci = unsafe { std::slice::from_raw_parts(cq.req.db_addr as *const u8, 4) };
            assert_eq!(u32::from_be_bytes(ci.try_into().unwrap()) & 0xff_ffff, 4);
        });
    }

    /// What libmlx5 sent for its QPs: CREATE_QP as the ioctl method with
    /// its driver data naming a blue-flame UAR page it allocated, MODIFY_QP
    /// as the write command through INVOKE_WRITE without driver data.
    fn check_create_qp(k: &uverbs_oracle::kernel::Mlx5Kernel) {
        use uverbs_uapi::*;
        let creates: Vec<_> = k
            .log
            .iter()
            .filter(|c| (c.object, c.method) == (UVERBS_OBJECT_QP, UVERBS_METHOD_QP_CREATE))
            .collect();
        assert_eq!(creates.len(), 2, "one ioctl per RC QP so far");
        for (c, qp) in creates.iter().zip(k.qps.values()) {
            assert_eq!(c.uhw_in.len(), size_of::<mlx5_ib_create_qp>(), "{c:?}");
            assert_eq!(c.uhw_out_len, size_of::<mlx5_ib_create_qp_resp>(), "{c:?}");
            let r = qp.req;
            // Scatter-to-CQE asked for by default: the device puts a
            // receive of up to 32 bytes into the CQE itself.
            assert_eq!(
                r.flags,
                MLX5_QP_FLAG_UAR_PAGE_INDEX | MLX5_QP_FLAG_SCATTER_CQE,
                "{r:?}"
            );
            let uar = k.dyn_uars.values().find(|u| u.page_id == r.bfreg_index);
            assert_eq!(
                uar.map(|u| u.alloc_type),
                Some(MLX5_IB_UAPI_UAR_ALLOC_TYPE_BF),
                "{r:?}"
            );
            println!(
                "mlx5 model: CREATE_QP driver data: sq_wqe_count {} rq_wqe_count {} rq_wqe_shift {} flags {:#x} uidx {} bfreg_index {:#x} ece {:#x}; qpn {:#x}",
                r.sq_wqe_count, r.rq_wqe_count, r.rq_wqe_shift, r.flags, r.uidx, r.bfreg_index, r.ece_options, qp.qpn
            );
        }
        let modifies: Vec<_> = k
            .log
            .iter()
            .filter(|c| c.write_cmd == Some(IB_USER_VERBS_CMD_MODIFY_QP))
            .collect();
        assert_eq!(modifies.len(), 6, "RESET to RTS, twice");
        for m in modifies {
            assert_eq!(m.core_in.len(), size_of::<ib_uverbs_modify_qp>(), "{m:?}");
            assert!(m.uhw_in.is_empty() && m.errno == 0, "{m:?}");
        }
    }

    /// Two UD QPs: a SEND through an address handle, then one with the
    /// wrong Q_Key, which the responder drops.
    fn ud_traffic(env: &mut Env) {
        let (a, b) = (env.qp(UD), env.qp(UD));
        env.ud_ready(a);
        env.ud_ready(b);
        let mut ah_attr = IbvAhAttr {
            dlid: 1,
            port_num: 1,
            ..Default::default()
        };
        // SAFETY: a live PD.
        let ah = unsafe { ibv_create_ah(env.pd, &mut ah_attr) };
        assert!(!ah.is_null(), "ibv_create_ah: {}", errno());
        fill(&mut env.mem, 0x4000, 60, 3);
        env.recv(b, 200, 0x5000, 0x100);
        env.recv(b, 201, 0x5100, 0x100);
        let lk = env.lkey();
        // SAFETY: a live QP.
        let b_qpn = unsafe { (*b).qp_num };
        let ud = |qkey: u32| [ah as u64, u64::from(b_qpn) | u64::from(qkey) << 32, 0, 0];
        env.send(
            a,
            20,
            WR_SEND,
            SIGNALED,
            Some((0x4000, 60, lk)),
            0,
            ud(QKEY),
        );
        env.send(
            a,
            21,
            WR_SEND,
            SIGNALED,
            Some((0x4000, 60, lk)),
            0,
            ud(QKEY ^ 1),
        );
        assert_eq!(run_device(), 2);
        let sent = env.poll(a);
        assert_eq!(sent.len(), 2, "{sent:?}");
        env.check(&sent[0], 20, SUCCESS, Some(WC_SEND), a);
        env.check(&sent[1], 21, SUCCESS, Some(WC_SEND), a);
        let got = env.poll(b);
        assert_eq!(got.len(), 1, "the wrong Q_Key is dropped: {got:?}");
        env.check(&got[0], 200, SUCCESS, Some(WC_RECV), b);
        // SAFETY: a live QP.
        assert_eq!(got[0].src_qp, unsafe { (*a).qp_num }, "UD source QP");
        assert_eq!(got[0].byte_len, 60 + 40, "the GRH space counts");
        assert_eq!(got[0].wc_flags & 1, 0, "no GRH over InfiniBand");
        assert_eq!(
            env.bytes(0x5000 + 40, 60),
            env.bytes(0x4000, 60),
            "UD payload"
        );
        env.checked += 1;
        // SAFETY: the AH is unused now.
        assert_eq!(unsafe { ibv_destroy_ah(ah) }, 0);
    }

    /// A bad local key (local protection error, the QP to error, what
    /// follows flushed) and a WRITE to a region without remote access.
    fn errors(env: &mut Env) {
        let (c, d) = (env.qp(RC), env.qp(RC));
        env.connect(c, d);
        env.connect(d, c);
        env.recv(d, 300, 0x6000, 0x100);
        env.recv(c, 301, 0x6100, 0x100);
        let lk = env.lkey();
        env.send(
            c,
            30,
            WR_SEND,
            SIGNALED,
            Some((0, 16, lk ^ 0xffff00)),
            0,
            [0; 4],
        );
        env.send(c, 31, WR_SEND, SIGNALED, Some((0, 16, lk)), 0, [0; 4]);
        assert_eq!(run_device(), 3, "the failed WQE, then two flushed");
        let got = env.poll(c);
        assert_eq!(got.len(), 3, "{got:?}");
        env.check(&got[0], 30, LOC_PROT_ERR, None, c);
        env.check(&got[1], 31, WR_FLUSH_ERR, None, c);
        env.check(&got[2], 301, WR_FLUSH_ERR, None, c);
        assert!(env.poll(d).is_empty(), "nothing reached the responder");
        shim::with_kernel(|k| {
            // SAFETY: a live QP.
            let qpn = unsafe { (*c).qp_num };
            let qp = k.qps.values().find(|q| q.qpn == qpn).unwrap();
            assert_eq!(qp.state, QpState::Err);
        });
        env.checked += 1;

        let (e, f) = (env.qp(RC), env.qp(RC));
        env.connect(e, f);
        env.connect(f, e);
        let local = env.local.as_ptr() as u64;
        // SAFETY: a live MR.
        let rkey = unsafe { (*env.local_mr).rkey };
        env.send(
            e,
            40,
            WR_WRITE,
            SIGNALED,
            Some((0, 16, lk)),
            0,
            [local, u64::from(rkey), 0, 0],
        );
        assert_eq!(run_device(), 1);
        let got = env.poll(e);
        assert_eq!(got.len(), 1, "{got:?}");
        env.check(&got[0], 40, REM_ACCESS_ERR, None, e);
        assert!(env.local[..16].iter().all(|&x| x == 0), "nothing written");
    }

    /// Posts `wrs` (wr_id, offset, length) to `srq` through libmlx5's
    /// `post_srq_recv`, one SGE each.
    fn srq_recv(env: &Env, srq: *mut c_void, wrs: &[(u64, usize, u32)]) {
        let mut sges: Vec<IbvSge> = wrs
            .iter()
            .map(|&(_, off, len)| IbvSge {
                addr: env.addr(off),
                length: len,
                lkey: env.lkey(),
            })
            .collect();
        let mut list: Vec<IbvRecvWr> = wrs
            .iter()
            .zip(sges.iter_mut())
            .map(|(&(wr_id, _, _), sge)| IbvRecvWr {
                wr_id,
                next: std::ptr::null_mut(),
                sg_list: sge,
                num_sge: 1,
            })
            .collect();
        for i in (1..list.len()).rev() {
            let next: *mut IbvRecvWr = &mut list[i];
            list[i - 1].next = next;
        }
        let mut bad = std::ptr::null_mut();
        // SAFETY: libmlx5's post_srq_recv on a live SRQ; the WRs and SGEs
        // live through the call.
        let ret =
            unsafe { op::<PostSrqRecv>(env.ctx, POST_SRQ_RECV)(srq, list.as_mut_ptr(), &mut bad) };
        assert_eq!(ret, 0, "ibv_post_srq_recv");
    }

    /// An SRQ feeding two RC QPs (each with its own CQ): SENDs from two
    /// peers take its WQEs in list order; the CQs, polled in the other
    /// order, give back each WQE's id (its data in that request's buffer)
    /// while WQEs return to the free list out of order and the list wraps;
    /// a receive too small completes in error with its id; DESTROY_SRQ is
    /// refused while the QPs use the SRQ. Answers the SRQ, destroyed by the
    /// caller after the QPs.
    fn srq_traffic(env: &mut Env) -> *mut c_void {
        let mut init = IbvSrqInitAttr {
            srq_context: std::ptr::null_mut(),
            attr: IbvSrqAttr {
                max_wr: 8,
                max_sge: 1,
                srq_limit: 0,
            },
        };
        // SAFETY: a live PD of libibverbs.
        let srq = unsafe { ibv_create_srq(env.pd, &mut init) };
        assert!(!srq.is_null(), "ibv_create_srq: {}", errno());
        assert_eq!(init.attr.max_wr, 15, "libmlx5's free list");
        let (a1, a2) = (env.qp(RC), env.qp(RC));
        let (b1, b2) = (env.qp_on(RC, srq), env.qp_on(RC, srq));
        for (x, y) in [(a1, b1), (b1, a1), (a2, b2), (b2, a2)] {
            env.connect(x, y);
        }
        let lk = env.lkey();
        for round in 0..4usize {
            let wrs: Vec<(u64, usize, u32)> = (0..6)
                .map(|j| ((round * 100 + j) as u64, 0x8000 + j * 0x100, 0x80))
                .collect();
            srq_recv(env, srq, &wrs);
            for i in 0..6usize {
                fill(&mut env.mem, i * 64, 40, (round * 16 + i) as u8);
                let qp = if i % 2 == 0 { a1 } else { a2 };
                env.send(
                    qp,
                    i as u64,
                    WR_SEND,
                    SIGNALED,
                    Some((i * 64, 40, lk)),
                    0,
                    [0; 4],
                );
            }
            assert_eq!(run_device(), 6, "round {round}");
            // a1's sends (the lower handle) run first: the first three
            // WQEs in list order are b1's, the next three b2's.
            for (qp, first, sends) in [(b2, 3usize, 1usize), (b1, 0, 0)] {
                let got = env.poll(qp);
                assert_eq!(got.len(), 3, "round {round}: {got:?}");
                for (k, wc) in got.iter().enumerate() {
                    let j = first + k;
                    env.check(wc, (round * 100 + j) as u64, SUCCESS, Some(WC_RECV), qp);
                    assert_eq!(wc.byte_len, 40);
                    let i = sends + 2 * k;
                    assert_eq!(
                        env.bytes(0x8000 + j * 0x100, 40),
                        env.bytes(i * 64, 40),
                        "round {round}: the WQE of request {j} holds send {i}"
                    );
                }
            }
            for qp in [a1, a2] {
                let got = env.poll(qp);
                assert_eq!(got.len(), 3, "round {round}: {got:?}");
                assert!(got.iter().all(|w| w.status == SUCCESS), "{got:?}");
            }
        }
        // Too small: the responder's error completion carries its id.
        srq_recv(env, srq, &[(950, 0x8000, 8)]);
        env.send(a1, 60, WR_SEND, SIGNALED, Some((0, 40, lk)), 0, [0; 4]);
        assert_eq!(run_device(), 1);
        let got = env.poll(b1);
        assert_eq!(got.len(), 1, "{got:?}");
        env.check(&got[0], 950, 1, None, b1); // IBV_WC_LOC_LEN_ERR
                                              // SAFETY: a live SRQ which two QPs use.
        assert_ne!(unsafe { ibv_destroy_srq(srq) }, 0, "EBUSY under QPs");
        srq
    }
}
