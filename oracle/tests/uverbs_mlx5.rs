//! uverbs' mlx5 provider against the emulated mlx5 kernel driver (no
//! archives needed): the context and a PD come up where a provider without
//! mlx5's driver data is refused, as Linux 6.12's mlx5_ib refuses it.

use std::sync::Arc;

// build.rs wraps the system calls for every test binary of this package:
// the wrappers must exist here too (uninstalled, they only pass through).
#[cfg(oracle_linked)]
#[allow(dead_code)]
mod shim;

use uverbs::{Context, DriverId, Errno, Error, OpenOptions};
use uverbs_oracle::file::EmulatedFile;
use uverbs_uapi::*;

#[test]
fn uverbs_opens_the_emulated_mlx5_and_makes_a_pd() {
    let file = Arc::new(EmulatedFile::default());
    let ctx = Context::with_transport(
        "mlx5_0",
        Some(DriverId::MLX5),
        Box::new(file.clone()),
        &OpenOptions::new(),
    )
    .expect("GET_CONTEXT with mlx5's driver data");
    let pd = ctx
        .alloc_pd()
        .expect("ALLOC_PD with room for the PD number");
    {
        let k = file.kernel();
        assert_eq!(k.pds.len(), 1);
        let req = k.context.expect("a context");
        assert_eq!((req.total_num_bfregs, req.num_low_latency_bfregs), (16, 4));
        assert!(k.log.iter().all(|c| c.errno == 0), "{:?}", k.log);
    }
    let err = ctx.create_cq(16, None).unwrap_err();
    assert!(matches!(err, Error::Unsupported { .. }), "{err}");
    pd.dealloc().expect("DEALLOC_PD");
    assert!(file.kernel().pds.is_empty());
}

/// What uverbs sent before it had an mlx5 provider: no driver data. The
/// emulated mlx5_ib refuses the context (EINVAL) as the real one does.
#[test]
fn a_context_without_mlx5_driver_data_is_refused() {
    let file = Arc::new(EmulatedFile::default());
    let err = Context::with_transport("mlx5_0", None, Box::new(file.clone()), &OpenOptions::new())
        .unwrap_err();
    assert_eq!(err.errno(), Some(Errno::INVAL), "{err}");
    let k = file.kernel();
    assert_eq!(k.log.len(), 1);
    assert_eq!(k.log[0].write_cmd, Some(IB_USER_VERBS_CMD_GET_CONTEXT));
    assert!(k.log[0].uhw_in.is_empty());
}
