//! The one result format of the bench programs: each result is one line
//! `@@RESULT {json}`, a JSON object whose `kind` says what it is
//! ([`Record`]), printed by benches/verbs, benches/datapath, benches/ops,
//! benches/async_tax and tools/mover. The marker may follow other text on
//! the console line (kernel messages interleave with the guest's output);
//! the JSON runs to the line's end.
//!
//! [`read`] picks them out of a console log into [`Results`]; a line that
//! is not a record of a known kind goes to [`Results::skipped`] with its line
//! number and what was wrong, so a disagreement between a bench and this
//! module is reported, never a silent gap.

use super::model::Row;
use super::{async_tax, datapath, framing, growth, mover, ops};
use crate::markers::{self, BOOTED};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::fmt;

/// The marker of a result line.
pub const MARKER: &str = "@@RESULT";

// The benches' writer, so that a test proves both sides agree.
#[cfg(test)]
#[allow(dead_code)]
#[path = "../../../../benches/result.rs"]
mod writer;

/// Information about a run (`verbs_info`, `datapath_info`): its fields as
/// text (`"cell_ms":500` reads as `cell_ms` = `500`).
pub type Info = BTreeMap<String, String>;

/// One result line, by its `kind`.
#[derive(Debug, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Record {
    /// One control-path cell of benches/verbs (one pass and round).
    Verbs(super::model::Line),
    /// About the verbs run: its sampling, a device, its time.
    VerbsInfo(BTreeMap<String, serde_json::Value>),
    /// One run of ours or perftest in benches/datapath.
    Datapath(datapath::Line),
    /// About the data-path run.
    DatapathInfo(BTreeMap<String, serde_json::Value>),
    /// One scheme of tools/mover.
    Mover(mover::Line),
    /// One callgrind count of benches/ops (a data-path case or a control pair).
    Ops(ops::Line),
    /// A function's self instructions in benches/ops' case 1.
    OpsFn(ops::Function),
    /// One control operation's system calls (`verbs --framing`).
    Framing(framing::Line),
    /// One measurement of benches/async_tax.
    Async(async_tax::Line),
    /// One operation timed with N live objects (benches/growth).
    Growth(growth::Line),
    /// How many QPs one context got (benches/growth).
    GrowthLimit(growth::Limit),
}

/// A result line that could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skipped {
    /// Its line number in the console (from 1).
    pub line: usize,
    /// The text after the marker.
    pub text: String,
    /// What was wrong with it.
    pub error: String,
}

impl fmt::Display for Skipped {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "console line {}: {}: {}",
            self.line, self.error, self.text
        )
    }
}

/// Every result of a console, by kind, in the order printed.
#[derive(Debug, Default)]
pub struct Results {
    /// The verbs cells, each with the line as printed.
    pub verbs: Vec<Row>,
    pub verbs_info: Vec<Info>,
    pub datapath: Vec<datapath::Line>,
    pub datapath_info: Vec<Info>,
    pub mover: Vec<mover::Line>,
    pub ops: Vec<ops::Line>,
    pub ops_fn: Vec<ops::Function>,
    pub framing: Vec<framing::Line>,
    pub asyncs: Vec<async_tax::Line>,
    pub growth: Vec<growth::Line>,
    pub growth_limits: Vec<growth::Limit>,
    /// The guest's kernel release, from the boot marker.
    pub guest_kernel: String,
    /// Result lines left out, with the reason.
    pub skipped: Vec<Skipped>,
}

/// A JSON value as the report shows it: a string without its quotes.
fn text(v: serde_json::Value) -> String {
    match v {
        serde_json::Value::String(s) => s,
        other => other.to_string(),
    }
}

fn info(fields: BTreeMap<String, serde_json::Value>) -> Info {
    fields.into_iter().map(|(k, v)| (k, text(v))).collect()
}

/// Reads every result line of `console`.
pub fn read(console: &str) -> Results {
    let mut r = Results::default();
    for (i, line) in console.lines().enumerate() {
        if let Some(kernel) = markers::find(line, BOOTED).and_then(|r| r.strip_prefix("kernel=")) {
            r.guest_kernel = kernel.trim().to_string();
        }
        let Some(json) = markers::find(line, MARKER) else {
            continue;
        };
        let json = json.trim_end();
        let record = match serde_json::from_str::<Record>(json) {
            Ok(record) => record,
            Err(e) => {
                r.skipped.push(Skipped {
                    line: i + 1,
                    text: json.to_string(),
                    error: e.to_string(),
                });
                continue;
            }
        };
        match record {
            Record::Verbs(l) => r.verbs.push(l.row(json)),
            Record::VerbsInfo(f) => r.verbs_info.push(info(f)),
            Record::Datapath(l) => r.datapath.push(l),
            Record::DatapathInfo(f) => r.datapath_info.push(info(f)),
            Record::Mover(l) => r.mover.push(l),
            Record::Ops(l) => r.ops.push(l),
            Record::OpsFn(f) => r.ops_fn.push(f),
            Record::Framing(l) => r.framing.push(l),
            Record::Async(l) => r.asyncs.push(l),
            Record::Growth(l) => r.growth.push(l),
            Record::GrowthLimit(l) => r.growth_limits.push(l),
        }
    }
    r
}

/// Reads `console` in a test, every result line readable.
#[cfg(test)]
pub fn read_all(console: &str) -> Results {
    let r = read(console);
    assert!(r.skipped.is_empty(), "{:?}", r.skipped);
    r
}

/// The first value of `key` among `info` lines.
pub fn info_of<'a>(info: &'a [Info], key: &str) -> Option<&'a str> {
    info.iter().find_map(|m| m.get(key)).map(String::as_str)
}

/// `f64::NAN`, the default of a number a result line may leave out.
pub fn nan() -> f64 {
    f64::NAN
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the benches' writer prints, this module reads: the marker, the
    /// kind and the fields of a result of each kind as the benches fill them.
    #[test]
    fn reads_what_the_benches_write() {
        use serde_json::json;
        let lines = [
            writer::line("verbs_info", [json!({"cell_ms": 500, "sizes": "4096"})]),
            writer::line(
                "verbs",
                [
                    json!({"pass": 1, "round": 2, "device": "rxe0", "impl": "ours", "transport": "ioctl", "fork": "off", "op": "rereg_access", "size": 4096}),
                    json!({"median_ns": 10, "p10_ns": 9, "p90_ns": 11, "n": 5}),
                    json!({"path": "inplace"}),
                ],
            ),
            writer::line(
                "datapath",
                [
                    json!({"pass": 1, "round": 1, "impl": "ours", "retried": false, "device": "rxe0", "conn": "cm", "test": "write_bw", "size": 64, "qd": 1, "inline": 0, "iters": 3, "mib_per_s": 1.5}),
                ],
            ),
            writer::line(
                "ops",
                [
                    json!({"device": "rxe0", "impl": "ours", "op": "send_recv"}),
                    json!({"error": "x"}),
                ],
            ),
            writer::line(
                "ops_fn",
                [json!({"device": "rxe0", "impl": "ours", "self_ir_per_pair": 1.5, "fn": "f"})],
            ),
            writer::line("framing", [json!({"error": "e"})]),
            writer::line("async", [json!({"device": "siw0", "error": "e"})]),
            writer::line(
                "growth",
                [
                    json!({"device": "rxe0", "impl": "ours", "fork": "off", "op": "reg_mr", "live": 1, "median_ns": 5, "p10_ns": 4, "p90_ns": 6, "n": 3}),
                ],
            ),
            writer::line(
                "growth_limit",
                [
                    json!({"device": "siw0", "impl": "ours", "max_send_wr": 1, "max_recv_wr": 1, "cap": 300, "created": 71, "errno": 12}),
                ],
            ),
        ];
        let r = read(&lines.join("\n"));
        assert!(r.skipped.is_empty(), "{:?}", r.skipped);
        assert_eq!(r.verbs.len(), 1);
        assert_eq!(r.verbs[0].rounds, vec![(1, 2, 10.0)]);
        assert_eq!(r.datapath[0].value(), Ok(datapath::Value::Bandwidth(1.5)));
        assert_eq!(
            (r.ops.len(), r.ops_fn.len(), r.framing.len(), r.asyncs.len()),
            (1, 1, 1, 1)
        );
        assert_eq!(r.growth[0].median_ns, 5.0);
        assert_eq!(r.growth_limits[0].errno, Some(12));
    }

    #[test]
    fn reads_records_after_other_text_and_names_bad_lines() {
        let console = r#"@@UVERBS-BOOTED kernel=6.12.1
[ 3.1] rxe noise @@RESULT {"kind":"verbs_info","cell_ms":500,"peer":"libibverbs"}
@@RESULT {"kind":"mover","device":"rxe0","scheme":"dereg-reg","error":"boom"}
@@RESULT {"kind":"teleport","device":"rxe0"}
@@RESULT {"kind":"mover","device":"rxe0"
@@RESULTS are not results
"#;
        let r = read(console);
        assert_eq!(r.guest_kernel, "6.12.1");
        assert_eq!(info_of(&r.verbs_info, "cell_ms"), Some("500"));
        assert_eq!(info_of(&r.verbs_info, "peer"), Some("libibverbs"));
        assert_eq!(r.mover.len(), 1);
        assert_eq!(r.mover[0].error.as_deref(), Some("boom"));
        assert_eq!(r.skipped.len(), 2, "{:?}", r.skipped);
        assert_eq!(r.skipped[0].line, 4);
        assert!(
            r.skipped[0].error.contains("unknown variant `teleport`"),
            "{}",
            r.skipped[0]
        );
        assert_eq!(r.skipped[1].line, 5);
        assert!(r.skipped[1].to_string().starts_with("console line 5: "));
    }
}
