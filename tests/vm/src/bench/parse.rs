//! Reading the console: `@@BENCH` lines into [`Row`]s, `@@BENCH-INFO` lines
//! and the guest's kernel release.

use super::model::{fold, CellKey, LineError, Row, Run, Skipped};
use super::wire::{Status, UnknownWord};
use crate::markers::{self, BENCH, BENCH_INFO, BOOTED};
use std::collections::BTreeMap;
use std::str::FromStr;

/// A line's `key=value` words.
type Words = BTreeMap<String, String>;

fn words(s: &str) -> Words {
    s.split_whitespace()
        .filter_map(|w| w.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// Reads every `@@BENCH` and `@@BENCH-INFO` line (markers may follow kernel
/// text on the same line). A `@@BENCH` line that cannot be read goes to
/// [`Run::skipped`] with the reason.
pub fn parse(console: &str) -> Run {
    let mut run = Run::default();
    for line in console.lines() {
        if let Some(kernel) = markers::find(line, BOOTED).and_then(|r| r.strip_prefix("kernel=")) {
            run.guest_kernel = kernel.trim().to_string();
        }
        if let Some(info) = markers::find(line, BENCH_INFO) {
            run.info.push(words(info));
            continue;
        }
        let Some(measurement) = markers::find(line, BENCH) else {
            continue;
        };
        let raw = measurement.trim().to_string();
        match row(&raw) {
            Ok(row) => run.rows.push(row),
            Err(error) => run.skipped.push(Skipped { line: raw, error }),
        }
    }
    // One row per cell, whatever the passes and rounds.
    run.rows = fold(std::mem::take(&mut run.rows));
    run
}

/// One measurement line (after the marker).
fn row(raw: &str) -> Result<Row, LineError> {
    let w = words(raw);
    let number = |key: &str| {
        w.get(key)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(f64::NAN)
    };
    let size = required(&w, "size")?;
    let status = optional_word(&w, "status")?.unwrap_or(Status::Ok);
    // Lines without pass= or round= (a single-pass run) are pass 1, round 1.
    let count = |key: &str| w.get(key).and_then(|v| v.parse().ok()).unwrap_or(1);
    let median = number("median_ns");
    Ok(Row {
        key: CellKey {
            device: required(&w, "device")?,
            imp: word(&w, "impl")?,
            transport: word(&w, "transport")?,
            fork: word(&w, "fork")?,
            op: word(&w, "op")?,
        },
        size: size.parse().map_err(|_| LineError::NotANumber {
            key: "size",
            word: size,
        })?,
        path: optional_word(&w, "path")?,
        status,
        median,
        p10: number("p10_ns"),
        p90: number("p90_ns"),
        n: w.get("n").and_then(|v| v.parse().ok()).unwrap_or(0),
        raw: raw.to_string(),
        rounds: if status == Status::Ok {
            vec![(count("pass"), count("round"), median)]
        } else {
            Vec::new()
        },
    })
}

fn required(w: &Words, key: &'static str) -> Result<String, LineError> {
    w.get(key).cloned().ok_or(LineError::Missing(key))
}

fn word<T: FromStr<Err = UnknownWord>>(w: &Words, key: &'static str) -> Result<T, LineError> {
    optional_word(w, key)?.ok_or(LineError::Missing(key))
}

fn optional_word<T: FromStr<Err = UnknownWord>>(
    w: &Words,
    key: &'static str,
) -> Result<Option<T>, LineError> {
    w.get(key)
        .map(|v| v.parse().map_err(LineError::Unknown))
        .transpose()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::wire::{ForkMode, Implementation, Operation, ReregPath, Transport};

    const LOG: &str = "\
@@UVERBS-BOOTED kernel=6.12.117+deb12-amd64
@@BENCH-INFO cell_ms=300 min_n=5
[ 3.1] x @@BENCH device=rxe0 impl=ours transport=ioctl fork=off op=reg_dereg size=1048576 median_ns=200000 p10_ns=190000 p90_ns=220000 n=50
@@BENCH device=rxe0 impl=ours transport=ioctl fork=on op=rereg_access size=1048576 path=inplace median_ns=5000 p10_ns=4900 p90_ns=5200 n=900
@@BENCH device=rxe0 impl=libibverbs transport=auto fork=off op=rereg_access size=1048576 status=unsupported errno=95 ret=-4
@@BENCH device=siw0 impl=floor transport=write fork=off op=alloc_pd size=0 status=error errno=12
";

    #[test]
    fn reads_typed_rows() {
        let run = parse(LOG);
        assert_eq!(run.rows.len(), 4);
        assert!(run.skipped.is_empty(), "{:?}", run.skipped);
        assert_eq!(run.guest_kernel, "6.12.117+deb12-amd64");
        assert_eq!(run.info("cell_ms"), Some("300"));
        assert_eq!(run.devices(), ["rxe0", "siw0"]);
        let key = CellKey {
            device: "rxe0".into(),
            imp: Implementation::Ours,
            transport: Transport::Ioctl,
            fork: ForkMode::On,
            op: Operation::ReregAccess,
        };
        let r = run.get(&key, 1 << 20).unwrap();
        assert_eq!(
            (r.path, r.status, r.median, r.n),
            (Some(ReregPath::InPlace), Status::Ok, 5000.0, 900)
        );
        // The same cell with fork safety off was not measured.
        assert!(run
            .get(
                &CellKey::ours("rxe0", Transport::Ioctl, Operation::ReregAccess),
                1 << 20
            )
            .is_none());
        let ibv = CellKey::libibverbs("rxe0", Operation::ReregAccess);
        assert_eq!(run.get(&ibv, 1 << 20).unwrap().status, Status::Unsupported);
        assert_eq!(run.median(&ibv, 1 << 20), None);
        let failed = &run.rows[3];
        assert_eq!(
            (failed.key.op, failed.status),
            (Operation::AllocPd, Status::Error)
        );
        assert_eq!(
            run.ratio(
                &CellKey::ours("rxe0", Transport::Ioctl, Operation::RegDereg),
                &CellKey::ours("rxe0", Transport::Ioctl, Operation::RegDereg),
                1 << 20
            ),
            Some(1.0)
        );
    }

    /// A line the report cannot read is not a silent gap: it is kept with
    /// the reason, and the other lines still count.
    #[test]
    fn skips_unreadable_lines_with_the_reason() {
        let cell = "device=rxe0 impl=ours transport=ioctl fork=off op=reg size=4096 median_ns=1";
        let console = [
            format!("@@BENCH {cell}"),
            format!("@@BENCH {}", cell.replace("fork=off", "fork=forced")),
            format!("@@BENCH {}", cell.replace("impl=ours", "impl=rdma-core")),
            format!("@@BENCH {}", cell.replace("op=reg", "op=rereg_mw")),
            format!("@@BENCH {} path=sideways", cell),
            format!("@@BENCH {} status=flaky", cell),
            format!("@@BENCH {}", cell.replace("size=4096", "size=4K")),
            format!("@@BENCH {}", cell.replace(" transport=ioctl", "")),
            format!("@@BENCH {}", cell.replace("device=rxe0 ", "")),
        ]
        .join("\n");
        let run = parse(&console);
        assert_eq!(run.rows.len(), 1);
        let reasons: Vec<String> = run.skipped.iter().map(|s| s.error.to_string()).collect();
        assert_eq!(
            reasons,
            [
                "unknown fork=\"forced\"",
                "unknown impl=\"rdma-core\"",
                "unknown op=\"rereg_mw\"",
                "unknown path=\"sideways\"",
                "unknown status=\"flaky\"",
                "size=\"4K\" is not a number",
                "no transport=",
                "no device=",
            ]
        );
        assert!(run.skipped[0].line.contains("fork=forced"));
    }
}
