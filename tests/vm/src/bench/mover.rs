//! The data mover's section of docs/benchmarks.md: the `mover` results of
//! `tools/mover.rs` (a writer streaming WRITEs into a pool of buffers
//! whose exposure rotates, per scheme), as a table per device and buffer
//! size with each scheme's throughput against dereg + reg's.

use super::markdown::section;
use super::results::nan;
use crate::bench::units::{distinct, ratio_name, size_name, time_name};
use serde::Deserialize;
use std::fmt::Write as _;

/// One mover result (`"kind":"mover"`): a scheme's run, or its failure.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Line {
    pub device: String,
    pub scheme: String,
    /// `inplace`, `replaced`, `mixed` or `none`.
    #[serde(default = "dash")]
    pub path: String,
    #[serde(default)]
    pub buffer: u64,
    #[serde(default)]
    pub write: u64,
    #[serde(default = "nan")]
    pub writes_per_s: f64,
    #[serde(default = "nan")]
    pub mib_per_s: f64,
    /// Nanoseconds per rotation (hide + expose; for fresh-per-write the
    /// registration and deregistration around each WRITE).
    #[serde(default = "nan")]
    pub rotate_median_ns: f64,
    #[serde(default = "nan")]
    pub rotate_p10_ns: f64,
    #[serde(default = "nan")]
    pub rotate_p90_ns: f64,
    /// Set when the scheme failed: the runner's message.
    pub error: Option<String>,
}

fn dash() -> String {
    "-".into()
}

/// Each successful rereg-access line with the dereg-reg line of the same
/// device and buffer size, where both ran.
fn rereg_and_dereg(lines: &[Line]) -> impl Iterator<Item = (&Line, &Line)> {
    lines
        .iter()
        .filter(|l| l.scheme == "rereg-access" && l.error.is_none())
        .filter_map(|l| {
            let d = lines.iter().find(|d| {
                d.scheme == "dereg-reg"
                    && d.device == l.device
                    && d.buffer == l.buffer
                    && d.error.is_none()
            })?;
            Some((l, d))
        })
}

/// In-place rereg rotation throughput ÷ dereg + reg rotation's, per
/// (device, buffer size) where both ran.
pub fn speedups(lines: &[Line]) -> Vec<(String, u64, f64)> {
    rereg_and_dereg(lines)
        .map(|(l, d)| (l.device.clone(), l.buffer, l.writes_per_s / d.writes_per_s))
        .collect()
}

/// The rotation step alone: dereg + reg's median ÷ in-place rereg's, per
/// (device, buffer size) where both ran (the other reading of the target:
/// how much faster the exposure change itself is, the WRITEs left out).
pub fn rotation_speedups(lines: &[Line]) -> Vec<(String, u64, f64)> {
    rereg_and_dereg(lines)
        .map(|(l, d)| {
            (
                l.device.clone(),
                l.buffer,
                d.rotate_median_ns / l.rotate_median_ns,
            )
        })
        .collect()
}

/// The section, from its `##` heading; `None` without mover lines.
pub fn markdown(lines: &[Line]) -> Option<String> {
    let mut s = section(
        lines,
        "## The re-registering data mover (`tools/mover.rs`)",
        "A writer streams RDMA WRITEs into a pool of 8 buffers of which 4 are exposed; after every WRITE \
         the target hides the oldest exposed buffer and exposes the next. *rereg-access* toggles \
         REMOTE_WRITE with `rereg` ACCESS, *rereg-pd* moves the buffer to a parking PD and back, \
         *dereg-reg* deregisters and registers anew, *fresh-per-write* registers the target for each \
         WRITE and deregisters it after. Every WRITE must succeed and its stamp land. Throughput counts \
         the rotations; a rotation is one hide + one expose (for fresh-per-write: the registration and \
         deregistration around one WRITE). The ratio is the scheme's WRITEs per second ÷ dereg-reg's. \
         On siw every rereg is a replace (the kernel refuses REREG_MR in place).\n\n",
    )?;
    for (device, buffer, write) in
        distinct(lines.iter().map(|l| (l.device.as_str(), l.buffer, l.write)))
    {
        let _ = writeln!(
            s,
            "**{device}**, {} buffers, {} WRITEs\n",
            size_name(buffer),
            size_name(write)
        );
        s.push_str(
            "| scheme | path | WRITEs/s | MiB/s | rotation median (p10–p90) | ÷ dereg-reg |\n",
        );
        s.push_str("|---|---|---:|---:|---|---:|\n");
        let base = lines
            .iter()
            .find(|l| {
                l.device == device
                    && l.buffer == buffer
                    && l.scheme == "dereg-reg"
                    && l.error.is_none()
            })
            .map(|l| l.writes_per_s);
        for l in lines
            .iter()
            .filter(|l| l.device == device && l.buffer == buffer && l.write == write)
        {
            match &l.error {
                Some(e) => {
                    let _ = writeln!(s, "| {} | failed: {e} | | | | |", l.scheme);
                }
                None => {
                    let ratio = base.map_or("—".into(), |b| ratio_name(l.writes_per_s / b));
                    let _ = writeln!(
                        s,
                        "| {} | {} | {:.0} | {:.2} | {} ({}–{}) | {ratio} |",
                        l.scheme,
                        l.path,
                        l.writes_per_s,
                        l.mib_per_s,
                        time_name(l.rotate_median_ns),
                        time_name(l.rotate_p10_ns),
                        time_name(l.rotate_p90_ns),
                    );
                }
            }
        }
        s.push('\n');
    }
    let rxe_1m = speedups(lines)
        .into_iter()
        .find(|(d, b, _)| d.starts_with("rxe") && *b == 1 << 20);
    let _ = writeln!(
        s,
        "Target: in-place rereg rotation ≥ 10× the throughput of dereg+reg rotation at 1 MiB buffers on rxe0: {}.\n",
        match rxe_1m {
            Some((_, _, r)) if r >= 10.0 => format!("{} — met", ratio_name(r)),
            Some((_, _, r)) => format!("{} — **not met**", ratio_name(r)),
            None => "not measured".into(),
        }
    );
    if let Some((_, _, r)) = rotation_speedups(lines)
        .into_iter()
        .find(|(d, b, _)| d.starts_with("rxe") && *b == 1 << 20)
    {
        let _ = writeln!(
            s,
            "The rotation step alone (medians, the WRITEs left out: under TCG each WRITE costs \
             more than either rotation): rereg-access's is {} faster than dereg-reg's on rxe0 at \
             1 MiB.\n",
            ratio_name(r)
        );
    }
    Some(s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::markdown::check_section;

    #[test]
    fn lines_tables_and_the_target() {
        let console = r#"@@RESULT {"kind":"mover","device":"rxe0","scheme":"rereg-access","path":"inplace","buffer":1048576,"write":4096,"buffers":8,"exposed":4,"rotate_every":1,"writes":2000,"seconds":1,"writes_per_s":3000.0,"mib_per_s":11.7,"rotate_median_ns":20000,"rotate_p10_ns":18000,"rotate_p90_ns":25000}
[ 1.2] noise @@RESULT {"kind":"mover","device":"rxe0","scheme":"dereg-reg","path":"none","buffer":1048576,"write":4096,"buffers":8,"exposed":4,"rotate_every":1,"writes":2000,"seconds":4,"writes_per_s":1000.0,"mib_per_s":3.9,"rotate_median_ns":600000,"rotate_p10_ns":500000,"rotate_p90_ns":700000}
@@RESULT {"kind":"mover","device":"siw0","scheme":"rereg-pd","error":"rereg: boom"}
"#;
        let lines = check_section(
            console,
            |r| r.mover,
            markdown,
            &[
                "| rereg-access | inplace | 3000 | 11.70 | 20.0 µs (18.0 µs–25.0 µs) | 3.00× |",
                "| rereg-pd | failed: rereg: boom |",
                "3.00× — **not met**",
                "rereg-access's is 30.0× faster",
            ],
        );
        assert_eq!(lines.len(), 3);
        assert_eq!(speedups(&lines), vec![("rxe0".to_string(), 1 << 20, 3.0)]);
        // The rotation step alone: 600 µs ÷ 20 µs.
        assert_eq!(
            rotation_speedups(&lines),
            vec![("rxe0".to_string(), 1 << 20, 30.0)]
        );
    }
}
