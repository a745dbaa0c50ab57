//! The emulated mlx5 kernel's `UVERBS_METHOD_REG_MR` as Linux 6.17
//! answers it, frame by frame (and as 6.12, which does not have it).

use std::sync::Arc;

// build.rs wraps the system calls for every test binary of this package:
// the wrappers must exist here too (uninstalled, they only pass through).
#[cfg(oracle_linked)]
#[allow(dead_code)]
mod shim;

use uverbs::transport::{Method, Transport};
use uverbs::Errno;
use uverbs_oracle::file::EmulatedFile;
use uverbs_oracle::fixtures::uverbs_context;
use uverbs_uapi::*;

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

/// 6.12's core does not have the method: `EPROTONOSUPPORT`, nothing made.
#[test]
fn a_6_12_core_does_not_have_the_method() {
    let file = Arc::new(EmulatedFile::default());
    let ctx = uverbs_context(&file);
    let pd = ctx.alloc_pd().unwrap();
    let lw = IB_UVERBS_ACCESS_LOCAL_WRITE;
    let addr = 0x7f00_0000_1000u64;
    let answer = send(&file, pd.handle(), Some(addr), addr, lw, false);
    assert_eq!(answer, Err(Errno::PROTONOSUPPORT));
    assert!(file.kernel().mrs.is_empty());
}
