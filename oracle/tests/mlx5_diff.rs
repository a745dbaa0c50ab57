//! The differential suite of issue 39: the same verbs through rdma-core's
//! libmlx5 44 (Debian's static archives, unmodified, with
//! `MLX5_SCATTER_TO_CQE=0`: uverbs never asks for scatter-to-CQE) and
//! through uverbs' mlx5 provider, each against its own emulated mlx5
//! kernel, compared byte for byte:
//!
//! - CREATE_CQ's and CREATE_QP's driver data and capacities;
//! - after every post: the whole SQ or RQ, the doorbell record, and the
//!   QP's BlueFlame register (doorbell or whole WQE) in its UAR page, for
//!   generated requests (every opcode of RC and UC × SGE counts 0, 1, 2,
//!   max × inline sizes 1, max, max+1 × the fence/signalled/solicited
//!   flags), on queues small enough to wrap many times;
//! - after every post, the same CQE bytes (requester, responder, error
//!   syndromes; the owner bit across the CQ's wrap) written into both CQs:
//!   the same work completion;
//! - `req_notify` (solicited and any): the same doorbell record and UAR
//!   doorbell.
//!
//! It prints `mlx5 oracle: N cases, 0 differ` and names each case that
//! differs. Without the archives it says SKIPPED (fails with
//! `UVERBS_REQUIRE_ORACLE`).

#[cfg(not(oracle_linked))]
#[test]
fn uverbs_and_libmlx5_write_the_same_bytes() {
    let why = env!("UVERBS_ORACLE_MISSING");
    assert!(
        std::env::var_os("UVERBS_REQUIRE_ORACLE").is_none(),
        "UVERBS_REQUIRE_ORACLE is set but libmlx5 is not linked: {why}"
    );
    eprintln!("SKIPPED: uverbs_and_libmlx5_write_the_same_bytes: libmlx5 is not linked ({why})");
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
    use uverbs::device::Gid;
    use uverbs::qp::{AddressHandle, AhAttr};
    use uverbs::wr::{
        Payload, RecvWr, Remote, SendFlags, SendOp, SendWr, Sge, UdDest, WorkCompletion,
    };
    use uverbs::{
        uverbs_uapi as sys, AccessFlags, CompletionQueue, Context, MemoryRegion, ProtectionDomain,
        QpInit, QueuePair,
    };
    use uverbs_oracle::file::EmulatedFile;
    use uverbs_oracle::fixtures::{clear_environment, connect_steps, infiniband_context, ud_steps};
    use uverbs_oracle::kernel::Mlx5Kernel;
    use uverbs_oracle::sysfs;

    use super::cverbs::*;
    use super::shim;

    const MEM: usize = 1 << 16;

    /// One QP configuration both libraries create.
    #[derive(Clone, Copy, Debug)]
    struct Config {
        qp_type: u32,
        send_sge: u32,
        recv_sge: u32,
        inline: u32,
        all_flags: bool,
    }

    const CONFIGS: &[Config] = &[
        Config {
            qp_type: RC,
            send_sge: 2,
            recv_sge: 2,
            inline: 64,
            all_flags: true,
        },
        Config {
            qp_type: RC,
            send_sge: 1,
            recv_sge: 1,
            inline: 0,
            all_flags: false,
        },
        Config {
            qp_type: RC,
            send_sge: 4,
            recv_sge: 3,
            inline: 100,
            all_flags: false,
        },
        Config {
            qp_type: UC,
            send_sge: 2,
            recv_sge: 1,
            inline: 32,
            all_flags: true,
        },
        Config {
            qp_type: RC,
            send_sge: 20,
            recv_sge: 4,
            inline: 0,
            all_flags: false,
        },
        Config {
            qp_type: RC,
            send_sge: 1,
            recv_sge: 1,
            inline: 220,
            all_flags: false,
        },
        Config {
            qp_type: UD,
            send_sge: 1,
            recv_sge: 1,
            inline: 0,
            all_flags: true,
        },
        Config {
            qp_type: UD,
            send_sge: 3,
            recv_sge: 2,
            inline: 100,
            all_flags: false,
        },
    ];

    /// What both libraries do with one request.
    #[derive(Clone, Debug)]
    struct Post {
        wr_id: u64,
        opcode: u32,
        flags: u32,
        /// (offset into the shared memory, length)
        sges: Vec<(usize, u32)>,
        inline: bool,
        remote: u64,
        imm: u32,
        compare: u64,
        swap: u64,
    }

    /// One side's objects in its kernel.
    struct Seen {
        sq: Vec<u8>,
        rq: Vec<u8>,
        db: [u8; 8],
        bf: Vec<u8>,
        cq_db: [u8; 8],
        cq_uar: [u8; 8],
    }

    /// The queues of the kernel's only QP and CQ, read as the device would.
    fn seen(k: &Mlx5Kernel) -> Seen {
        let qp = *k.qps.values().next().expect("a QP");
        let cq = *k.cqs.values().next().expect("a CQ");
        let read = |addr: u64, len: usize| {
            // SAFETY: memory the library handed the kernel for this QP or
            // CQ, live while the objects are.
            unsafe { std::slice::from_raw_parts(addr as *const u8, len) }.to_vec()
        };
        let rq_len = qp.sq_offset() as usize;
        let sq_len = qp.req.sq_wqe_count as usize * 64;
        let page = k.uar_page(qp.req.bfreg_index).expect("the QP's UAR page");
        let cq_page = k
            .uar_page(u32::from(cq.req.uar_page_index))
            .expect("the CQ's UAR page");
        Seen {
            rq: read(qp.req.buf_addr, rq_len),
            sq: read(qp.req.buf_addr + rq_len as u64, sq_len),
            db: read(qp.req.db_addr, 8).try_into().unwrap(),
            bf: page[0x800..0xc00].to_vec(),
            cq_db: read(cq.req.db_addr, 8).try_into().unwrap(),
            cq_uar: cq_page[0x20..0x28].try_into().unwrap(),
        }
    }

    /// Writes CQE `bytes` (owner bit set for consumer index `ci`) into the
    /// kernel's only CQ, as the device would.
    fn write_cqe(k: &Mlx5Kernel, ci: u32, mut bytes: [u8; 64]) {
        let cq = *k.cqs.values().next().expect("a CQ");
        let slot = (ci & (cq.entries - 1)) as usize * 64;
        bytes[63] |= u8::from(ci & cq.entries != 0);
        // SAFETY: a CQE of the CQ's buffer, which the library polls only
        // after this returns.
        unsafe {
            std::ptr::copy_nonoverlapping(
                bytes.as_ptr(),
                (cq.req.buf_addr as *mut u8).add(slot),
                64,
            )
        };
    }

    /// A requester or responder CQE.
    #[allow(clippy::too_many_arguments)]
    fn cqe(
        opcode: u8,
        wqe_op: u8,
        qpn: u32,
        uidx: u32,
        wqe_counter: u16,
        byte_cnt: u32,
        imm: u32,
        flags_rqpn: u32,
        syndrome: u8,
    ) -> [u8; 64] {
        let mut b = [0u8; 64];
        b[17] = 0x15; // ml_path
        b[22..24].copy_from_slice(&0x0042u16.to_be_bytes()); // slid
        b[24..28].copy_from_slice(&flags_rqpn.to_be_bytes());
        b[32..36].copy_from_slice(&uidx.to_be_bytes());
        b[36..40].copy_from_slice(&imm.to_be_bytes());
        b[44..48].copy_from_slice(&byte_cnt.to_be_bytes());
        b[54] = syndrome.wrapping_mul(3);
        b[55] = syndrome;
        b[56..60].copy_from_slice(&(u32::from(wqe_op) << 24 | qpn).to_be_bytes());
        b[60..62].copy_from_slice(&wqe_counter.to_be_bytes());
        b[63] = opcode << 4;
        b
    }

    /// libmlx5's side.
    struct Theirs {
        ctx: *mut c_void,
        pd: *mut c_void,
        mr: *mut IbvMr,
        cq: *mut c_void,
        qp: *mut IbvQp,
        /// The address handle of a UD QP's sends (to itself).
        ah: *mut c_void,
    }

    /// uverbs' side (fields dropped in order: QP before CQ and MR).
    struct Ours {
        ah: Option<AddressHandle>,
        qp: QueuePair,
        cq: CompletionQueue,
        _mr: MemoryRegion,
        _pd: ProtectionDomain,
        _ctx: Context,
        file: Arc<EmulatedFile>,
    }

    struct Suite {
        mem: memmap2::MmapMut,
        cases: usize,
        differ: Vec<String>,
        ci: u32,
    }

    impl Suite {
        fn addr(&self, off: usize) -> u64 {
            self.mem.as_ptr() as u64 + off as u64
        }

        /// Compares bytes, naming the first offset that differs.
        fn check_bytes(&mut self, what: &str, theirs: &[u8], ours: &[u8]) {
            self.cases += 1;
            if let Some(at) =
                (0..theirs.len().max(ours.len())).find(|&i| theirs.get(i) != ours.get(i))
            {
                let line = at / 16 * 16;
                let window = |b: &[u8]| b[line.min(b.len())..(line + 16).min(b.len())].to_vec();
                self.differ.push(format!(
                    "{what}: first at byte {at:#x}: libmlx5 {:02x?}, uverbs {:02x?}",
                    window(theirs),
                    window(ours)
                ));
            }
        }

        fn check<T: PartialEq + std::fmt::Debug>(&mut self, what: &str, theirs: T, ours: T) {
            self.cases += 1;
            if theirs != ours {
                self.differ
                    .push(format!("{what}: libmlx5 {theirs:?}, uverbs {ours:?}"));
            }
        }
    }

    /// The AH of a configuration's UD sends: LID 1, an SL and path bits,
    /// a static rate, and (second UD configuration) a GRH.
    fn ah_attr(cfg: Config) -> (AhAttr, IbvAhAttr) {
        let global = cfg.send_sge > 1;
        let dgid = [0xfe, 0x80, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8];
        let ours = AhAttr {
            dgid: Gid::from_raw(if global { dgid } else { [0; 16] }),
            sgid_index: if global { 1 } else { 0 },
            hop_limit: if global { 9 } else { 0 },
            traffic_class: if global { 0x20 } else { 0 },
            flow_label: if global { 0x1_2345 } else { 0 },
            port: 1,
            sl: 5,
            is_global: global,
            dlid: 1,
            static_rate: 3,
            src_path_bits: 3,
        };
        let theirs = IbvAhAttr {
            dgid: ours.dgid.raw(),
            flow_label: ours.flow_label,
            sgid_index: ours.sgid_index,
            hop_limit: ours.hop_limit,
            traffic_class: ours.traffic_class,
            dlid: ours.dlid,
            sl: ours.sl,
            src_path_bits: ours.src_path_bits,
            static_rate: ours.static_rate,
            is_global: u8::from(global),
            port_num: 1,
        };
        (ours, theirs)
    }

    fn open_theirs(cfg: Config, mem: &mut memmap2::MmapMut) -> Theirs {
        // SAFETY: libibverbs calls on objects made here; `mem` outlives
        // the MR (the caller drops both sides first).
        unsafe {
            let mut n = 0;
            let list = ibv_get_device_list(&mut n);
            assert_eq!(n, 1, "the emulated mlx5_0");
            let ctx = ibv_open_device(*list);
            ibv_free_device_list(list);
            assert!(!ctx.is_null(), "ibv_open_device");
            let pd = ibv_alloc_pd(ctx);
            let mr = ibv_reg_mr(
                pd,
                mem.as_mut_ptr().cast(),
                MEM,
                (LOCAL_WRITE as u32 | ALL_ACCESS) as c_int,
            );
            assert!(!mr.is_null());
            let cq = ibv_create_cq(ctx, 63, std::ptr::null_mut(), std::ptr::null_mut(), 0);
            assert!(!cq.is_null());
            let mut attr = IbvQpInitAttr {
                qp_context: std::ptr::null_mut(),
                send_cq: cq,
                recv_cq: cq,
                srq: std::ptr::null_mut(),
                cap: IbvQpCap {
                    max_send_wr: 8,
                    max_recv_wr: 8,
                    max_send_sge: cfg.send_sge,
                    max_recv_sge: cfg.recv_sge,
                    max_inline_data: cfg.inline,
                },
                qp_type: cfg.qp_type,
                sq_sig_all: 0,
            };
            let qp = ibv_create_qp(pd, &mut attr);
            assert!(!qp.is_null(), "ibv_create_qp {cfg:?}");
            let steps = if cfg.qp_type == UD {
                c_ud_steps()
            } else {
                c_connect_steps((*qp).qp_num, cfg.qp_type == RC)
            };
            c_modify_all(qp, steps);
            let ah = if cfg.qp_type == UD {
                let mut attr = ah_attr(cfg).1;
                let ah = ibv_create_ah(pd, &mut attr);
                assert!(!ah.is_null(), "ibv_create_ah");
                ah
            } else {
                std::ptr::null_mut()
            };
            Theirs {
                ctx,
                pd,
                mr,
                cq,
                qp,
                ah,
            }
        }
    }

    fn close_theirs(t: Theirs) {
        // SAFETY: the objects of `open_theirs`, destroyed children first.
        unsafe {
            assert_eq!(ibv_destroy_qp(t.qp), 0);
            if !t.ah.is_null() {
                assert_eq!(ibv_destroy_ah(t.ah), 0);
            }
            assert_eq!(ibv_destroy_cq(t.cq), 0);
            assert_eq!(ibv_dereg_mr(t.mr), 0);
            assert_eq!(ibv_dealloc_pd(t.pd), 0);
            assert_eq!(ibv_close_device(t.ctx), 0);
        }
    }

    fn open_ours(cfg: Config, mem: &mut memmap2::MmapMut) -> Ours {
        let (file, ctx) = infiniband_context();
        let pd = ctx.alloc_pd().expect("uverbs: alloc_pd");
        let access = AccessFlags::LOCAL_WRITE
            | AccessFlags::REMOTE_WRITE
            | AccessFlags::REMOTE_READ
            | AccessFlags::REMOTE_ATOMIC;
        // SAFETY: `mem` outlives the MR (dropped with `Ours` first).
        let mr = unsafe { pd.reg_mr(mem.as_mut_ptr(), MEM, access) }.expect("uverbs: reg_mr");
        let cq = ctx.create_cq(63, None).expect("uverbs: create_cq");
        let qp_type = match cfg.qp_type {
            RC => QpType::Rc,
            UC => QpType::Uc,
            _ => QpType::Ud,
        };
        let mut init = QpInit::new(qp_type, &cq, &cq);
        init.max_send_wr = 8;
        init.max_recv_wr = 8;
        init.max_send_sge = cfg.send_sge;
        init.max_recv_sge = cfg.recv_sge;
        init.max_inline = cfg.inline;
        let qp = pd.create_qp(&init).expect("uverbs: create_qp");
        let steps = if cfg.qp_type == UD {
            ud_steps()
        } else {
            connect_steps(qp.qp_num(), access, cfg.qp_type == RC)
        };
        for attr in steps {
            qp.modify(&attr).expect("uverbs: modify_qp");
        }
        let ah =
            (cfg.qp_type == UD).then(|| pd.create_ah(&ah_attr(cfg).0).expect("uverbs: create_ah"));
        Ours {
            ah,
            qp,
            cq,
            _mr: mr,
            _pd: pd,
            _ctx: ctx,
            file,
        }
    }

    /// The requests of one configuration, generated.
    fn posts(cfg: Config, max_inline: u32) -> Vec<Post> {
        let rc = cfg.qp_type == RC;
        let mut ops = vec![WR_SEND, WR_SEND_IMM];
        if cfg.qp_type != UD {
            ops.extend([WR_WRITE, WR_WRITE_IMM]);
        }
        if rc {
            ops.extend([WR_READ, WR_CAS, WR_FAA]);
        }
        let mut sge_counts = vec![0, 1, 2, cfg.send_sge];
        sge_counts.retain(|&n| n <= cfg.send_sge);
        sge_counts.dedup();
        let mut out = Vec::new();
        let mut n = 0u64;
        for &op in &ops {
            let atomic = op == WR_CAS || op == WR_FAA;
            let mut payloads: Vec<(Vec<(usize, u32)>, bool)> = Vec::new();
            for &k in &sge_counts {
                if atomic && k != 1 {
                    continue;
                }
                // SGE i: 8 bytes for atomics, else a length that varies,
                // one zero-length SGE among several.
                let sges = (0..k as usize)
                    .map(|i| {
                        let len = if atomic {
                            8
                        } else if k > 2 && i == 1 {
                            0
                        } else {
                            17 + 29 * i as u32 + n as u32 % 13
                        };
                        (256 * i + 64 * (n as usize % 4), len)
                    })
                    .collect();
                payloads.push((sges, false));
            }
            if !atomic && op != WR_READ && max_inline > 0 {
                for len in [1, max_inline, max_inline + 1] {
                    let sges = if len > 2 && cfg.send_sge >= 2 {
                        vec![(1000, len / 2), (3000, len - len / 2)]
                    } else {
                        vec![(1000, len)]
                    };
                    payloads.push((sges, true));
                }
            }
            for (sges, inline) in payloads {
                let flag_sets: Vec<u32> = if cfg.all_flags {
                    (0..8).collect()
                } else {
                    vec![(n % 8) as u32]
                };
                for f in flag_sets {
                    let flags =
                        ((f & 1) * FENCE) | ((f >> 1 & 1) * SIGNALED) | ((f >> 2 & 1) * SOLICITED);
                    n += 1;
                    out.push(Post {
                        wr_id: 0x1000 + n,
                        opcode: op,
                        flags: flags | if inline { INLINE } else { 0 },
                        sges: sges.clone(),
                        inline,
                        remote: 0x8000 + 8 * (n % 64),
                        imm: 0xa5a5_0000 | n as u32,
                        compare: n * 3,
                        swap: n * 5,
                    });
                }
            }
        }
        out
    }

    /// Posts `p` through libmlx5: its answer (0 or an errno).
    fn post_theirs(s: &Suite, t: &Theirs, p: &Post) -> c_int {
        let lkey = unsafe { (*t.mr).lkey };
        let rkey = unsafe { (*t.mr).rkey };
        let mut sges: Vec<IbvSge> = p
            .sges
            .iter()
            .map(|&(off, len)| IbvSge {
                addr: s.addr(off),
                length: len,
                lkey,
            })
            .collect();
        let remote = s.addr(p.remote as usize);
        let wr = match p.opcode {
            WR_CAS | WR_FAA => [
                remote,
                if p.opcode == WR_CAS {
                    p.compare
                } else {
                    p.swap
                },
                p.swap,
                u64::from(rkey),
            ],
            // UD: the AH, the destination QP (its own) and Q_Key.
            _ if !t.ah.is_null() => [
                t.ah as u64,
                // SAFETY: a live QP.
                u64::from(unsafe { (*t.qp).qp_num }) | u64::from(QKEY) << 32,
                0,
                0,
            ],
            _ => [remote, u64::from(rkey), 0, 0],
        };
        let mut w = IbvSendWr {
            wr_id: p.wr_id,
            next: std::ptr::null_mut(),
            sg_list: if sges.is_empty() {
                std::ptr::null_mut()
            } else {
                sges.as_mut_ptr()
            },
            num_sge: sges.len() as c_int,
            opcode: p.opcode,
            send_flags: p.flags,
            imm_data: p.imm.to_be(),
            wr,
            qp_type: 0,
            tail: [0; 6],
        };
        let mut bad = std::ptr::null_mut();
        // SAFETY: libmlx5's post_send on a live QP; the WR and SGEs live
        // through the call.
        unsafe { op::<PostSend>(t.ctx, POST_SEND)(t.qp, &mut w, &mut bad) }
    }

    /// Posts `p` through uverbs: whether it was taken.
    fn post_ours(s: &Suite, o: &Ours, p: &Post) -> bool {
        let rkey = o._mr.rkey();
        let lkey = o._mr.lkey();
        let remote = Remote {
            addr: s.addr(p.remote as usize),
            rkey,
        };
        let op = match p.opcode {
            WR_SEND => SendOp::Send { imm: None },
            WR_SEND_IMM => SendOp::Send { imm: Some(p.imm) },
            WR_WRITE => SendOp::RdmaWrite { remote, imm: None },
            WR_WRITE_IMM => SendOp::RdmaWrite {
                remote,
                imm: Some(p.imm),
            },
            WR_READ => SendOp::RdmaRead { remote },
            WR_CAS => SendOp::CompareSwap {
                remote,
                compare: p.compare,
                swap: p.swap,
            },
            _ => SendOp::FetchAdd {
                remote,
                add: p.swap,
            },
        };
        let sges: Vec<Sge> = p
            .sges
            .iter()
            .map(|&(off, len)| Sge {
                addr: s.addr(off),
                length: len,
                lkey,
            })
            .collect();
        let slices: Vec<&[u8]> = p
            .sges
            .iter()
            .map(|&(off, len)| &s.mem[off..off + len as usize])
            .collect();
        let payload = if p.inline {
            Payload::Inline(&slices)
        } else {
            Payload::Sges(&sges)
        };
        let mut wr = SendWr::new(p.wr_id, op, payload);
        wr.flags = SendFlags::from_bits_retain(p.flags & 7);
        wr.ud = o.ah.as_ref().map(|ah| UdDest::new(ah, o.qp.qp_num(), QKEY));
        // SAFETY: the SGEs are in the registered `mem`, which outlives the
        // QP; the device model never runs here.
        unsafe { o.qp.post_send(&[wr]) }.is_ok()
    }

    /// The mlx5 opcode a requester CQE of `opcode` repeats.
    fn wqe_opcode(opcode: u32) -> u8 {
        match opcode {
            WR_WRITE => 0x08,
            WR_WRITE_IMM => 0x09,
            WR_SEND => 0x0a,
            WR_SEND_IMM => 0x0b,
            WR_READ => 0x10,
            WR_CAS => 0x11,
            _ => 0x12,
        }
    }

    /// Polls one completion from each side and compares them.
    fn poll_both(s: &mut Suite, t: &Theirs, o: &Ours, what: &str) {
        let mut theirs = IbvWc::default();
        // SAFETY: libmlx5's poll_cq on a live CQ, one entry.
        let n = unsafe { op::<PollCq>(t.ctx, POLL_CQ)(t.cq, 1, &mut theirs) };
        let mut ours = [WorkCompletion::default(); 1];
        let m = o.cq.poll(&mut ours).expect("uverbs: poll");
        s.check(&format!("{what}: completions"), n, m as c_int);
        if n == 1 && m == 1 {
            s.check(
                &format!("{what}: work completion"),
                theirs,
                ours_wc(&ours[0]),
            );
        }
    }

    /// Writes the same CQE to both CQs.
    fn complete_both(s: &mut Suite, o: &Ours, bytes: [u8; 64]) {
        shim::with_kernel(|k| write_cqe(k, s.ci, bytes));
        write_cqe(&o.file.kernel(), s.ci, bytes);
        s.ci += 1;
    }

    fn compare_queues(s: &mut Suite, o: &Ours, what: &str, wqe: Option<(usize, usize)>) {
        let theirs = shim::with_kernel(seen);
        let ours = seen(&o.file.kernel());
        // The SQ: the WQE just posted (libmlx5 leaves what it wrote of a
        // refused request in the SQ, unpublished; uverbs writes nothing).
        if let Some((at, len)) = wqe {
            let wqe_of = |sq: &[u8]| {
                (0..len)
                    .map(|i| sq[(at + i) % sq.len()])
                    .collect::<Vec<u8>>()
            };
            s.check_bytes(
                &format!("{what}: WQE bytes"),
                &wqe_of(&theirs.sq),
                &wqe_of(&ours.sq),
            );
        }
        s.check_bytes(&format!("{what}: RQ bytes"), &theirs.rq, &ours.rq);
        s.check_bytes(&format!("{what}: doorbell record"), &theirs.db, &ours.db);
        s.check_bytes(&format!("{what}: BlueFlame register"), &theirs.bf, &ours.bf);
        s.check_bytes(
            &format!("{what}: CQ doorbell record"),
            &theirs.cq_db,
            &ours.cq_db,
        );
        s.check_bytes(
            &format!("{what}: CQ doorbell"),
            &theirs.cq_uar,
            &ours.cq_uar,
        );
    }

    fn run_config(s: &mut Suite, cfg: Config) {
        let mut mem = std::mem::replace(&mut s.mem, memmap2::MmapMut::map_anon(1).unwrap());
        let t = open_theirs(cfg, &mut mem);
        let o = open_ours(cfg, &mut mem);
        s.mem = mem;
        s.ci = 0;
        let tag = format!("{cfg:?}");
        // The creates' driver data and what each library answers.
        let (tq, tc) = shim::with_kernel(|k| {
            (
                *k.qps.values().next().unwrap(),
                *k.cqs.values().next().unwrap(),
            )
        });
        let (oq, oc) = {
            let k = o.file.kernel();
            (
                *k.qps.values().next().unwrap(),
                *k.cqs.values().next().unwrap(),
            )
        };
        let strip_qp = |q: sys::mlx5_ib_create_qp| {
            (
                q.sq_wqe_count,
                q.rq_wqe_count,
                q.rq_wqe_shift,
                q.flags,
                q.uidx,
                q.bfreg_index,
                q.ece_options,
                q.sq_buf_addr,
            )
        };
        s.check(
            &format!("{tag}: CREATE_QP driver data"),
            strip_qp(tq.req),
            strip_qp(oq.req),
        );
        s.check(&format!("{tag}: CREATE_QP capacities"), tq.cap, oq.cap);
        s.check(&format!("{tag}: QP number"), tq.qpn, oq.qpn);
        let strip_cq = |c: sys::mlx5_ib_create_cq| {
            (
                c.cqe_size,
                c.cqe_comp_en,
                c.cqe_comp_res_format,
                c.flags,
                c.uar_page_index,
            )
        };
        s.check(
            &format!("{tag}: CREATE_CQ driver data"),
            (strip_cq(tc.req), tc.entries),
            (strip_cq(oc.req), oc.entries),
        );
        let max_inline = o.qp.caps().max_inline;
        compare_queues(s, &o, &format!("{tag}: after create"), None);

        let mut counter = 0u16;
        for (i, p) in posts(cfg, max_inline).iter().enumerate() {
            let what = format!(
                "{tag} post {i} (op {}, flags {:#x}, sges {:?}, inline {})",
                p.opcode, p.flags, p.sges, p.inline
            );
            let theirs = post_theirs(s, &t, p);
            let ours = post_ours(s, &o, p);
            s.check(&format!("{what}: taken"), theirs == 0, ours);
            // The WQE at the send counter before the post: ds 16-byte
            // units, from libmlx5's control segment.
            let wqe = (theirs == 0).then(|| {
                let sq = shim::with_kernel(seen).sq;
                let at = usize::from(counter) * 64 % sq.len();
                (at, usize::from(sq[(at + 7) % sq.len()] & 0x3f) * 16)
            });
            compare_queues(s, &o, &what, wqe);
            if theirs != 0 || !ours {
                // libmlx5 left what it wrote of the refused request in its
                // SQ (unpublished); the same bytes go into uverbs' SQ, so
                // that the next BlueFlame copies, which carry a WQE's last
                // block whole, start from the same memory.
                let sq = shim::with_kernel(seen).sq;
                let k = o.file.kernel();
                let qp = *k.qps.values().next().unwrap();
                // SAFETY: uverbs' SQ, which the device does not read
                // (nothing published) and no post runs meanwhile.
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        sq.as_ptr(),
                        (qp.req.buf_addr + qp.sq_offset()) as *mut u8,
                        sq.len(),
                    )
                };
                continue;
            }
            // Complete it on both (every fifth with an error syndrome).
            let qpn = oq.qpn;
            let byte_cnt: u32 = p.sges.iter().map(|x| x.1).sum();
            let bytes = if i % 5 == 4 {
                let syndrome = [
                    0x01, 0x02, 0x04, 0x05, 0x06, 0x10, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x22,
                    0x7f,
                ][i / 5 % 14];
                cqe(
                    0xd,
                    wqe_opcode(p.opcode),
                    qpn,
                    oq.req.uidx,
                    counter,
                    0,
                    0,
                    0,
                    syndrome,
                )
            } else {
                cqe(
                    0x0,
                    wqe_opcode(p.opcode),
                    qpn,
                    oq.req.uidx,
                    counter,
                    byte_cnt,
                    0,
                    0,
                    0,
                )
            };
            // The next WQE starts at the send counter now in the record.
            let next = u32::from_be_bytes(seen(&o.file.kernel()).db[4..8].try_into().unwrap());
            complete_both(s, &o, bytes);
            poll_both(s, &t, &o, &what);
            counter = next as u16;
            if i % 16 == 15 {
                let solicited = i % 32 == 31;
                // SAFETY: libmlx5's req_notify_cq through libibverbs' export.
                let r = unsafe { ibv_req_notify_cq_export(t.cq, c_int::from(solicited)) };
                o.cq.req_notify(solicited).expect("uverbs: req_notify");
                s.check(&format!("{what}: req_notify answer"), r, 0);
                compare_queues(
                    s,
                    &o,
                    &format!("{what}: armed (solicited {solicited})"),
                    None,
                );
            }
        }

        // Receives: every SGE count up to the maximum, a zero-length SGE
        // among them, each completed by a responder CQE.
        // Responder opcodes (send, with immediate, write with immediate,
        // send with invalidate) and error CQEs (remote access, flush).
        let resp: [(u8, u8); 6] = [
            (0x2, 0),
            (0x3, 0),
            (0x1, 0),
            (0x4, 0),
            (0xe, 0x13),
            (0xe, 0x05),
        ];
        for i in 0..24usize {
            let k = i % (cfg.recv_sge as usize + 1);
            let sges: Vec<(usize, u32)> = (0..k)
                .map(|j| (512 * j, if k > 2 && j == 1 { 0 } else { 33 + j as u32 }))
                .collect();
            let what = format!("{tag} recv {i} (sges {sges:?})");
            let lkey = o._mr.lkey();
            let mut c_sges: Vec<IbvSge> = sges
                .iter()
                .map(|&(off, len)| IbvSge {
                    addr: s.addr(off),
                    length: len,
                    lkey,
                })
                .collect();
            let mut w = IbvRecvWr {
                wr_id: 0x9000 + i as u64,
                next: std::ptr::null_mut(),
                sg_list: if c_sges.is_empty() {
                    std::ptr::null_mut()
                } else {
                    c_sges.as_mut_ptr()
                },
                num_sge: c_sges.len() as c_int,
            };
            let mut bad = std::ptr::null_mut();
            // SAFETY: libmlx5's post_recv on a live QP.
            let theirs = unsafe { op::<PostRecv>(t.ctx, POST_RECV)(t.qp, &mut w, &mut bad) };
            let our_sges: Vec<Sge> = sges
                .iter()
                .map(|&(off, len)| Sge {
                    addr: s.addr(off),
                    length: len,
                    lkey,
                })
                .collect();
            // SAFETY: buffers of the registered `mem`; the device never runs.
            let ours =
                unsafe { o.qp.post_recv(&[RecvWr::new(0x9000 + i as u64, &our_sges)]) }.is_ok();
            s.check(&format!("{what}: taken"), theirs == 0, ours);
            compare_queues(s, &o, &what, None);
            let (opcode, syndrome) = resp[i % resp.len()];
            let flags_rqpn = (i as u32 % 4) << 28 | (i as u32 % 16) << 24 | 0x1234;
            let bytes = cqe(
                opcode,
                0,
                oq.qpn,
                oq.req.uidx,
                0,
                100 + i as u32,
                0xdead_0000 | i as u32,
                flags_rqpn,
                syndrome,
            );
            complete_both(s, &o, bytes);
            poll_both(s, &t, &o, &what);
        }
        drop(o);
        close_theirs(t);
    }

    /// `ibv_req_notify_cq`: verbs.h's inline through the CQ's context ops
    /// (slot 12, `req_notify_cq`).
    ///
    /// # Safety
    ///
    /// `cq` is a live CQ of libmlx5.
    unsafe fn ibv_req_notify_cq_export(cq: *mut c_void, solicited: c_int) -> c_int {
        type ReqNotify = unsafe extern "C" fn(*mut c_void, c_int) -> c_int;
        // SAFETY: `struct ibv_cq` starts with its context pointer.
        let ctx = unsafe { *cq.cast::<*mut c_void>() };
        // SAFETY: the caller's promise; slot 12 is `req_notify_cq`.
        unsafe { op::<ReqNotify>(ctx, 12)(cq, solicited) }
    }

    #[test]
    fn uverbs_and_libmlx5_write_the_same_bytes() {
        clear_environment();
        // uverbs never asks for scatter-to-CQE (docs/mlx5.md).
        std::env::set_var("MLX5_SCATTER_TO_CQE", "0");
        let root = std::env::temp_dir().join(format!("uverbs-diff-{}", std::process::id()));
        sysfs::create(&root).expect("the fake sysfs tree");
        shim::install(&root);
        register_mlx5();
        let mut s = Suite {
            mem: memmap2::MmapMut::map_anon(MEM).unwrap(),
            cases: 0,
            differ: Vec::new(),
            ci: 0,
        };
        for (i, b) in s.mem.iter_mut().enumerate() {
            *b = (i * 7 + i / 251) as u8;
        }
        for &cfg in CONFIGS {
            shim::with_kernel_mut(|k| {
                *k = Mlx5Kernel::default();
                k.infiniband_port = true;
            });
            run_config(&mut s, cfg);
        }
        let _ = std::fs::remove_dir_all(&root);
        let line = format!("mlx5 oracle: {} cases, {} differ", s.cases, s.differ.len());
        use std::io::Write;
        let _ = writeln!(std::io::stderr(), "{line}");
        for d in s.differ.iter().take(40) {
            let _ = writeln!(std::io::stderr(), "  differs: {d}");
        }
        assert!(s.differ.is_empty(), "{line}");
        assert!(s.cases >= 500, "{line}: too few cases");
    }
}
