//! uverbs' memory registration against the emulated mlx5 kernel as Linux
//! 6.12 and as 6.17 answer it: without `UVERBS_METHOD_REG_MR` the method is
//! refused once (`EPROTONOSUPPORT`) and the write command follows; with it
//! the region comes from the method, and the device model moves bytes with
//! its keys. The emulated method's own checks, frame by frame.

use std::sync::Arc;

// build.rs wraps the system calls for every test binary of this package:
// the wrappers must exist here too (uninstalled, they only pass through).
#[cfg(oracle_linked)]
#[allow(dead_code)]
mod shim;

use uverbs::command::QpType;
use uverbs::error::Errno;
use uverbs::transport::{Method, Transport};
use uverbs::wr::{Payload, Remote, SendOp, SendWr, Sge, WcOpcode, WcStatus, WorkCompletion};
use uverbs::{AccessFlags, QpInit};
use uverbs_oracle::file::EmulatedFile;
use uverbs_oracle::fixtures::{connect_steps, infiniband_context, uverbs_context};
use uverbs_oracle::kernel::Command;
use uverbs_uapi::*;

const RW: AccessFlags = AccessFlags::LOCAL_WRITE
    .union(AccessFlags::REMOTE_WRITE)
    .union(AccessFlags::REMOTE_READ);

fn is_native(c: &Command) -> bool {
    (c.object, c.method) == (UVERBS_OBJECT_MR, UVERBS_METHOD_REG_MR)
}

fn is_write_reg(c: &Command) -> bool {
    c.write_cmd == Some(IB_USER_VERBS_CMD_REG_MR)
}

/// 6.12's core: one refused method, then write commands, remembered.
#[test]
fn a_6_12_core_refuses_the_method_once_and_gets_write_commands() {
    let file = Arc::new(EmulatedFile::default());
    let ctx = uverbs_context(&file);
    let pd = ctx.alloc_pd().unwrap();
    let mut mem = vec![0u8; 3 * 4096];
    let (first, rest) = mem.split_at_mut(4096);
    // SAFETY: `mem` outlives both regions (dropped before it).
    let a = unsafe { pd.reg_mr(first.as_mut_ptr(), first.len(), RW) }.unwrap();
    // SAFETY: as above.
    let b = unsafe { pd.reg_mr(rest.as_mut_ptr(), rest.len(), RW) }.unwrap();
    assert!(ctx.reg_mr_method_refused());
    {
        let k = file.kernel();
        let native: Vec<&Command> = k.log.iter().filter(|c| is_native(c)).collect();
        assert_eq!(native.len(), 1, "{:?}", k.log);
        assert_eq!(native[0].errno, libc::EPROTONOSUPPORT);
        let writes: Vec<&Command> = k.log.iter().filter(|c| is_write_reg(c)).collect();
        assert_eq!(writes.len(), 2);
        assert!(writes.iter().all(|c| c.errno == 0));
        assert_eq!(k.mrs.len(), 2, "one MR each, none leaked");
        for mr in [&a, &b] {
            assert_eq!(k.mrs[&mr.handle()].key, mr.lkey());
        }
    }
    drop((a, b));
    assert!(file.kernel().mrs.is_empty());
}

/// 6.17's core: the region comes from the method (no driver data, no
/// write command), and the device model accepts its keys: an RDMA WRITE
/// and a SEND between two QPs of the context, in and out of the region.
#[test]
fn a_6_17_core_registers_by_the_method_and_the_device_uses_its_keys() {
    let (file, ctx) = infiniband_context();
    file.kernel().reg_mr_method = true;
    let pd = ctx.alloc_pd().unwrap();
    let mut mem = memmap2::MmapMut::map_anon(1 << 14).unwrap();
    // SAFETY: `mem` outlives the MR (dropped before it, at the end).
    let mr = unsafe { pd.reg_mr(mem.as_mut_ptr(), 1 << 14, RW) }.unwrap();
    assert!(!ctx.reg_mr_method_refused());
    {
        let k = file.kernel();
        let native: Vec<&Command> = k.log.iter().filter(|c| is_native(c)).collect();
        assert_eq!(native.len(), 1, "{:?}", k.log);
        assert_eq!(native[0].errno, 0);
        assert!(native[0].uhw_in.is_empty() && native[0].uhw_out_len == 0);
        assert!(!k.log.iter().any(is_write_reg), "no write command");
        let kmr = &k.mrs[&mr.handle()];
        assert_eq!((kmr.key, kmr.key), (mr.lkey(), mr.rkey()));
        assert_eq!((kmr.start, kmr.length), (mem.as_ptr() as u64, 1 << 14));
    }
    let cq = ctx.create_cq(16, None).unwrap();
    let init = QpInit::new(QpType::Rc, &cq, &cq);
    let (a, b) = (pd.create_qp(&init).unwrap(), pd.create_qp(&init).unwrap());
    for (qp, peer) in [(&a, b.qp_num()), (&b, a.qp_num())] {
        for step in connect_steps(peer, RW, true) {
            qp.modify(&step).unwrap();
        }
    }
    let base = mem.as_ptr() as u64;
    mem[..64].copy_from_slice(&[0xa7; 64]);
    let sge = [Sge {
        addr: base,
        length: 64,
        lkey: mr.lkey(),
    }];
    let write = SendWr::new(
        1,
        SendOp::RdmaWrite {
            remote: Remote {
                addr: base + 8192,
                rkey: mr.rkey(),
            },
            imm: None,
        },
        Payload::Sges(&sge),
    );
    // SAFETY: buffers of the registered `mem`, untouched until polled.
    unsafe { a.post_send(&[write]) }.unwrap();
    // SAFETY: every object and buffer of the emulated kernel is live.
    let executed = unsafe { file.kernel().run_device() };
    assert!(executed >= 1, "{executed} WQEs executed");
    let mut wcs = [WorkCompletion::default(); 4];
    let n = cq.poll(&mut wcs).unwrap();
    let seen: Vec<(u64, Option<WcOpcode>, WcStatus)> = wcs[..n]
        .iter()
        .map(|w| (w.wr_id(), w.opcode(), w.status()))
        .collect();
    assert_eq!(
        seen,
        vec![(1, Some(WcOpcode::RdmaWrite), WcStatus::Success)],
        "{:?}",
        &wcs[..n]
    );
    assert_eq!(&mem[8192..8256], &[0xa7; 64]);
    drop((a, b, cq, mr));
    assert!(file.kernel().mrs.is_empty());
}

/// What one hand-built REG_MR frame gets from the emulated 6.17 core.
fn send(
    file: &EmulatedFile,
    pd: u32,
    addr: Option<u64>,
    iova: u64,
    access: u32,
    uhw: bool,
) -> Result<(), Errno> {
    let (mut lkey, mut rkey) = (0u32, 0u32);
    let uhw_in = [0u8; 8];
    let mut m = Method::new(UVERBS_OBJECT_MR, UVERBS_METHOD_REG_MR, RDMA_DRIVER_MLX5);
    let handle = m.idr_new(UVERBS_ATTR_REG_MR_HANDLE);
    m.idr_in(UVERBS_ATTR_REG_MR_PD_HANDLE, pd)
        .inline_in(UVERBS_ATTR_REG_MR_IOVA, iova)
        .inline_in(UVERBS_ATTR_REG_MR_LENGTH, 4096u64)
        .inline_in(UVERBS_ATTR_REG_MR_ACCESS_FLAGS, access);
    if let Some(addr) = addr {
        m.inline_in(UVERBS_ATTR_REG_MR_ADDR, addr);
    }
    if uhw {
        m.uhw_in(&uhw_in);
    }
    let l = m.ptr_out(UVERBS_ATTR_REG_MR_RESP_LKEY, &mut lkey);
    let r = m.ptr_out(UVERBS_ATTR_REG_MR_RESP_RKEY, &mut rkey);
    let transport: &dyn Transport = file;
    // SAFETY: the emulated kernel touches no memory of the range; the
    // outputs are borrowed by the method.
    let done = unsafe { m.invoke(transport) }?;
    assert!(done.handle(handle).is_some() && done.read(l).is_some() && done.read(r).is_some());
    Ok(())
}

/// The emulated method's checks, in the handler's order, each refusal
/// leaving no MR; a well-formed frame is answered.
#[test]
fn the_emulated_method_checks_like_6_17() {
    let file = Arc::new(EmulatedFile::default());
    file.kernel().reg_mr_method = true;
    let ctx = uverbs_context(&file);
    let pd_object = ctx.alloc_pd().unwrap();
    let pd = pd_object.handle();
    let lw = IB_UVERBS_ACCESS_LOCAL_WRITE;
    let addr = 0x7f00_0000_1000u64;
    // (what, ADDR, access, driver data, the answer); IOVA is `addr`.
    let cases = [
        ("driver data", Some(addr), lw, true, Errno::PROTONOSUPPORT),
        ("no ADDR, no FD", None, lw, false, Errno::INVAL),
        (
            "page offsets differ",
            Some(addr + 8),
            lw,
            false,
            Errno::INVAL,
        ),
        (
            "unknown access bit",
            Some(addr),
            1 << 30,
            false,
            Errno::INVAL,
        ),
        (
            "remote write without local write",
            Some(addr),
            IB_UVERBS_ACCESS_REMOTE_WRITE,
            false,
            Errno::INVAL,
        ),
        (
            "on demand (no ODP here)",
            Some(addr),
            IB_UVERBS_ACCESS_ON_DEMAND,
            false,
            Errno::OPNOTSUPP,
        ),
    ];
    for (what, a, access, uhw, errno) in cases {
        assert_eq!(send(&file, pd, a, addr, access, uhw), Err(errno), "{what}");
        assert!(file.kernel().mrs.is_empty(), "{what}: no MR");
    }
    // A different iova with the same page offset is fine.
    send(&file, pd, Some(addr + 8), 0x1008, lw, false).unwrap();
    assert_eq!(file.kernel().mrs.len(), 1);
    // An unknown PD: refused before the method's own checks.
    assert_eq!(
        send(&file, pd + 99, Some(addr), addr, lw, false),
        Err(Errno::INVAL)
    );
    drop(pd_object);
}
