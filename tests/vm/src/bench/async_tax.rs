//! The async tax in docs/benchmarks.md: the `async` results of
//! benches/async_tax (the same traffic through the blocking `OwnedQp` and
//! through `uverbs::tokio`'s `AsyncQp`, in one process per device), as one
//! table per test with each async variant's ratio to the blocking one and
//! the issue's goals beside it.

use super::markdown::section;
use super::units::{distinct, ratio_name};
use serde::Deserialize;
use std::fmt::Write as _;

/// One async-tax result (`"kind":"async"`): a measurement, or a device's
/// failure.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Line {
    pub device: String,
    /// `send_lat` or `write_bw`; empty on an error line.
    #[serde(default)]
    pub test: String,
    #[serde(default)]
    pub size: u64,
    /// `blocking`, `async` or `async_busy`.
    #[serde(default, rename = "impl")]
    pub imp: String,
    /// send_lat's one-way median (µs).
    pub median_us: Option<f64>,
    /// write_bw's MB/s.
    pub mb_per_s: Option<f64>,
    /// Set when the device's run failed: the bench's message.
    pub error: Option<String>,
}

impl Line {
    /// The test's number: the median (µs) for send_lat, MB/s for write_bw.
    pub fn value(&self) -> f64 {
        let v = if self.test == "send_lat" {
            self.median_us
        } else {
            self.mb_per_s
        };
        v.unwrap_or(f64::NAN)
    }
}

/// The section, from its `###` heading; `None` without lines.
pub fn markdown(lines: &[Line]) -> Option<String> {
    let mut s = section(
        lines,
        "### The async tax (`uverbs::tokio`)",
        "benches/async_tax: one RC QP pair per device in one process, the same traffic through \
         the blocking `OwnedQp` (busy polling) and through `AsyncQp` on a current-thread tokio \
         runtime, its CQ tasks sleeping on the completion channel (`async`) or polling 200 \
         times first (`async_busy`). send_lat: 64-byte SEND ping-pong, receive posted first, \
         one-way median (half the round trip). write_bw: signalled WRITEs, 64 outstanding \
         (64 tasks awaiting in turn for async). Goals: bandwidth within 5 % of blocking at \
         queue depth 64, busy-poll latency within 10 %. perftest's `ib_send_lat` and \
         `ib_write_bw` in the same run are in the data-path table above (two processes, \
         perftest's own loop).\n\n",
    )?;
    for l in lines.iter().filter(|l| l.error.is_some()) {
        let _ = writeln!(
            s,
            "- {}: failed: {}",
            l.device,
            l.error.as_deref().unwrap_or("")
        );
    }
    s.push_str(
        "| device | test | size | blocking | async | async ÷ blocking | async_busy | async_busy ÷ blocking |\n\
         |---|---|---:|---:|---:|---:|---:|---:|\n",
    );
    let ok = lines.iter().filter(|l| l.error.is_none());
    for (device, test, size) in distinct(ok.map(|l| (l.device.as_str(), l.test.as_str(), l.size))) {
        let of = |imp: &str| {
            lines
                .iter()
                .find(|l| l.device == device && l.test == test && l.size == size && l.imp == imp)
                .map(Line::value)
        };
        let unit = if test == "send_lat" { "µs" } else { "MB/s" };
        let cell = |v: Option<f64>| v.map_or("—".into(), |v| format!("{v:.2} {unit}"));
        let ratio = |v: Option<f64>| match (v, of("blocking")) {
            (Some(v), Some(b)) if b > 0.0 => ratio_name(v / b),
            _ => "—".into(),
        };
        let _ = writeln!(
            s,
            "| {device} | {test} | {size} | {} | {} | {} | {} | {} |",
            cell(of("blocking")),
            cell(of("async")),
            ratio(of("async")),
            cell(of("async_busy")),
            ratio(of("async_busy")),
        );
    }
    s.push('\n');
    Some(s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::markdown::check_section;

    #[test]
    fn async_lines_become_one_table() {
        let console = r#"@@RESULT {"kind":"async","device":"rxe0","test":"send_lat","size":64,"impl":"blocking","iters":300,"median_us":100.0,"p99_us":200.0}
@@RESULT {"kind":"async","device":"rxe0","test":"send_lat","size":64,"impl":"async","iters":300,"median_us":150.0,"p99_us":300.0}
@@RESULT {"kind":"async","device":"rxe0","test":"send_lat","size":64,"impl":"async_busy","iters":300,"median_us":105.0,"p99_us":210.0}
@@RESULT {"kind":"async","device":"rxe0","test":"write_bw","size":65536,"qd":64,"impl":"blocking","writes":256,"mb_per_s":200.0}
@@RESULT {"kind":"async","device":"rxe0","test":"write_bw","size":65536,"qd":64,"impl":"async","writes":256,"mb_per_s":190.0}
@@RESULT {"kind":"async","device":"siw0","error":"cm: no event"}
"#;
        let lines = check_section(
            console,
            |r| r.asyncs,
            markdown,
            &[
                "| rxe0 | send_lat | 64 | 100.00 µs | 150.00 µs | 1.50× | 105.00 µs | 1.05× |",
                "| rxe0 | write_bw | 65536 | 200.00 MB/s | 190.00 MB/s | 0.95× | — | — |",
                "- siw0: failed: cm: no event",
            ],
        );
        assert_eq!(lines.len(), 6, "{lines:?}");
    }
}
