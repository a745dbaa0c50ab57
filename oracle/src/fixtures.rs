//! What every oracle test and bench sets up the same way: a process
//! environment without the variables that change libibverbs' and
//! libmlx5's behaviour, uverbs' context on an emulated file, and the
//! attribute sequences that bring a QP to RTS on the emulated port
//! (InfiniBand, LID 1, as `Mlx5Kernel::infiniband_port` makes it).

use std::sync::Arc;

use uverbs::command::{QpAttr, QpState};
use uverbs::device::{DriverId, OpenOptions};
use uverbs::qp::Mtu;
use uverbs::{uverbs_uapi as sys, AccessFlags, Context};

use crate::file::EmulatedFile;

/// A line for the CI log: stderr directly, which the test harness does
/// not capture (the oracle's counts must show in every run).
pub fn loud(line: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "{line}");
}

/// The valgrind a bench re-runs itself under: `given` (its `--valgrind`
/// option), else Debian's `/usr/bin/valgrind.bin` (the real program behind
/// the `valgrind` wrapper script) where it exists, else `valgrind` on the
/// `PATH`.
pub fn valgrind(given: Option<String>) -> String {
    given.unwrap_or_else(|| {
        if std::path::Path::new("/usr/bin/valgrind.bin").exists() {
            "/usr/bin/valgrind.bin".into()
        } else {
            "valgrind".into()
        }
    })
}

/// The Q_Key of the tests' UD QPs.
pub const QKEY: u32 = 0x1111_1111;

/// Removes every `MLX5_*`, `IBV_*` and `RDMAV_*` variable: about twenty of
/// them change what libmlx5 sends (docs/mlx5.md).
pub fn clear_environment() {
    for (key, _) in std::env::vars_os() {
        let key = key.to_string_lossy().into_owned();
        if ["MLX5_", "IBV_", "RDMAV_"]
            .iter()
            .any(|p| key.starts_with(p))
        {
            std::env::remove_var(&key);
        }
    }
}

/// uverbs' context on `file`, as the device `mlx5_0` of driver mlx5.
pub fn uverbs_context(file: &Arc<EmulatedFile>) -> Context {
    Context::with_transport(
        "mlx5_0",
        Some(DriverId::MLX5),
        Box::new(file.clone()),
        &OpenOptions::new(),
    )
    .expect("uverbs opens the emulated mlx5_0")
}

/// A fresh emulated file whose port is InfiniBand, and uverbs' context on
/// it.
pub fn infiniband_context() -> (Arc<EmulatedFile>, Context) {
    let file = Arc::new(EmulatedFile::default());
    file.kernel().infiniband_port = true;
    let ctx = uverbs_context(&file);
    (file, ctx)
}

/// RESET → INIT → RTR → RTS of an RC QP (or UC, without the RC-only
/// values: `rc` false) towards QP `peer` over the InfiniBand port (LID 1),
/// allowing `access`: rc_pingpong's values.
pub fn connect_steps(peer: u32, access: AccessFlags, rc: bool) -> [QpAttr; 3] {
    let dest = sys::ib_uverbs_qp_dest {
        dlid: 1,
        port_num: 1,
        ..Default::default()
    };
    let init = QpAttr::new()
        .state(QpState::Init)
        .pkey_index(0)
        .port(1)
        .access_flags(access);
    let rtr = QpAttr::new()
        .state(QpState::Rtr)
        .av(dest)
        .path_mtu(Mtu::Mtu1024)
        .dest_qpn(peer)
        .rq_psn(0);
    let rts = QpAttr::new().state(QpState::Rts).sq_psn(0);
    if !rc {
        return [init, rtr, rts];
    }
    [
        init,
        rtr.max_dest_rd_atomic(1).min_rnr_timer(12),
        rts.timeout(14).retry_cnt(7).rnr_retry(7).max_rd_atomic(1),
    ]
}

/// RESET → INIT (Q_Key [`QKEY`]) → RTR → RTS of a UD QP.
pub fn ud_steps() -> [QpAttr; 3] {
    [
        QpAttr::new()
            .state(QpState::Init)
            .pkey_index(0)
            .port(1)
            .qkey(QKEY),
        QpAttr::new().state(QpState::Rtr),
        QpAttr::new().state(QpState::Rts).sq_psn(0),
    ]
}
