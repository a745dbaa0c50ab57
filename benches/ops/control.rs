//! User-space instructions per control operation pair, beside the times of
//! benches/verbs: `alloc_pd` + `dealloc_pd` and `reg_mr` + `dereg_mr` of
//! one 4 KiB page, ours against libibverbs, counted by callgrind in the
//! same way as the post + poll pair (only inside the measured functions,
//! each inclusive of what it calls in user space; the kernel not counted).
//!
//! ```text
//! @@RESULT {"kind":"ops","device":"rxe0","impl":"ours","op":"alloc_pd+dealloc_pd","ir_per_pair":…,"calls":"200+200","syscalls_per_pair":2.0,"iters":200,"valgrind":"3.19.0"}
//! ```

use crate::profile::{self, Calls};
use crate::result;
use serde_json::{json, Value};

/// The two pairs, and each implementation's functions for them (the names
/// callgrind gives them).
pub struct Pair {
    pub op: &'static str,
    pub ours: [&'static str; 2],
    pub libibverbs: [&'static str; 2],
}

pub const PAIRS: &[Pair] = &[
    Pair {
        op: "alloc_pd+dealloc_pd",
        ours: [
            "uverbs::pd::<impl uverbs::context::Context>::alloc_pd",
            "uverbs::pd::ProtectionDomain::dealloc",
        ],
        libibverbs: ["ibv_alloc_pd", "ibv_dealloc_pd"],
    },
    Pair {
        op: "reg_mr+dereg_mr",
        ours: [
            "uverbs::mr::<impl uverbs::pd::ProtectionDomain>::reg_mr",
            "uverbs::mr::MemoryRegion::dereg",
        ],
        libibverbs: ["ibv_reg_mr", "ibv_dereg_mr"],
    },
];

/// The region registered: one page.
pub const REGION: usize = 4096;

/// The measured child: both loops of `imp` on `device`.
pub fn child(imp: &str, device: &str, iters: usize) -> Result<(), String> {
    let mut region = vec![0u8; 2 * REGION];
    // One page-aligned page inside the vector.
    let at = region.as_ptr().align_offset(REGION);
    let page = &mut region[at..at + REGION];
    match imp {
        "ours" => crate::ours::control(device, iters, page),
        #[cfg(feature = "libibverbs-peer")]
        "libibverbs" => crate::ibv::control(device, iters, page),
        #[cfg(not(feature = "libibverbs-peer"))]
        "libibverbs" => Err("built without the libibverbs-peer feature".into()),
        other => Err(format!("unknown implementation {other}")),
    }
}

/// The functions of `imp` (`ours` or `libibverbs`), in `PAIRS` order.
fn functions(imp: &str) -> Vec<&'static str> {
    PAIRS
        .iter()
        .flat_map(|p| if imp == "ours" { p.ours } else { p.libibverbs })
        .collect()
}

/// Runs the child of `imp` under callgrind and prints one `ops` result per
/// pair.
pub fn measure(valgrind: &str, imp: &str, device: &str, iters: usize) {
    let names = functions(imp);
    let run = profile::run_child(
        valgrind,
        &format!("{imp}-control"),
        &names,
        &[
            "--control",
            "--impl",
            imp,
            "--device",
            device,
            "--iters",
            &iters.to_string(),
        ],
    );
    for (i, pair) in PAIRS.iter().enumerate() {
        let fields = match &run {
            Ok(file) => {
                let calls = |f: &str| file.calls.get(f).copied().unwrap_or_default();
                let (a, b) = (calls(names[2 * i]), calls(names[2 * i + 1]));
                match fields(a, b, iters as u64) {
                    Ok(f) => f,
                    Err(e) => json!({ "error": e }),
                }
            }
            Err(e) => json!({ "error": e }),
        };
        let version = run.as_ref().ok().map(|f| json!({ "valgrind": f.version }));
        let key = json!({"device": device, "impl": imp, "op": pair.op});
        result::print("ops", [key, fields].into_iter().chain(version));
    }
}

/// The numbers of one pair's result, once callgrind saw at least `iters` calls
/// of each function (the loop makes `iters`, plus the PD the reg loop
/// uses): per pair, each function's inclusive Ir ÷ its calls, summed.
fn fields(a: Calls, b: Calls, iters: u64) -> Result<Value, String> {
    if a.count < iters || b.count < iters {
        return Err(format!(
            "callgrind saw {} and {} calls, the loop made at least {iters} of each (a name did not match, or a call was inlined)",
            a.count, b.count
        ));
    }
    let per = |c: Calls| {
        (
            c.ir as f64 / c.count as f64,
            c.syscalls as f64 / c.count as f64,
        )
    };
    let ((ir_a, sys_a), (ir_b, sys_b)) = (per(a), per(b));
    Ok(json!({
        "ir_per_pair": ir_a + ir_b,
        "ir_first": ir_a,
        "ir_second": ir_b,
        "calls": format!("{}+{}", a.count, b.count),
        "syscalls_per_pair": sys_a + sys_b,
        "iters": iters,
    }))
}
