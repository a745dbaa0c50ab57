//! The framing section of docs/benchmarks.md: the `framing` results of
//! `verbs --framing` (which system call libibverbs and ours make for each
//! control operation, traced by strace in the VM), as one table per device.

use super::markdown::section;
use super::units::{distinct, or_if_empty};
use serde::Deserialize;
use std::fmt::Write as _;

/// One framing result (`"kind":"framing"`): an operation's calls, or a
/// device's (or the whole trace's) failure.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct Line {
    /// Empty when the trace failed before any device.
    pub device: String,
    /// `libibverbs` or `ours`; empty on an error line.
    #[serde(rename = "impl")]
    pub imp: String,
    pub op: String,
    /// The calls, `+`-separated (`write:ALLOC_PD`, `ioctl`, `none`).
    pub calls: String,
    /// Set on an error line: the bench's message.
    pub error: Option<String>,
}

/// How a call list reads in the table.
fn spelled(calls: &str) -> String {
    if calls == "none" {
        return "no system call".into();
    }
    calls
        .split('+')
        .map(|c| match c.strip_prefix("write:") {
            Some(cmd) => format!("`write` {cmd}"),
            None => format!("`{c}`"),
        })
        .collect::<Vec<_>>()
        .join(" + ")
}

/// The section, from its `##` heading; `None` without framing lines.
pub fn markdown(lines: &[Line]) -> Option<String> {
    let mut s = section(
        lines,
        "## What each implementation sends",
        "The system calls each implementation makes on the uverbs file for one control \
         operation, traced by strace in the VM (`verbs --framing`: one call of each operation \
         per implementation, a marker `write` to fd -1 before each). A `write` is named by the \
         command in its header; strace cannot see inside an ioctl, so an `ioctl` is only counted \
         (ours over Auto, `write+methods`, sends native methods only for queries). libibverbs' \
         rxe and siw providers have no `rereg_mr`: it answers `EOPNOTSUPP` without a system \
         call. Ours' rereg row is the strict in-place command.\n\n",
    )?;
    let devices = distinct(
        lines
            .iter()
            .map(|l| l.device.as_str())
            .filter(|d| !d.is_empty()),
    );
    for l in lines.iter().filter(|l| l.error.is_some()) {
        let _ = writeln!(
            s,
            "- {}: tracing failed: {}",
            or_if_empty(&l.device, "all devices"),
            l.error.as_deref().unwrap_or("")
        );
    }
    for d in devices {
        let rows: Vec<&Line> = lines
            .iter()
            .filter(|l| l.device == d && l.error.is_none())
            .collect();
        if rows.is_empty() {
            continue;
        }
        let ops = distinct(rows.iter().map(|r| r.op.as_str()));
        let _ = writeln!(s, "**{d}**\n");
        s.push_str("| operation | libibverbs | ours (Auto) |\n|---|---|---|\n");
        for op in ops {
            let of = |imp: &str| {
                rows.iter()
                    .find(|r| r.op == op && r.imp == imp)
                    .map_or("not traced".to_string(), |r| spelled(&r.calls))
            };
            let _ = writeln!(s, "| {op} | {} | {} |", of("libibverbs"), of("ours"));
        }
        s.push('\n');
    }
    Some(s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::markdown::check_section;

    #[test]
    fn lines_become_one_table_per_device() {
        let console = r#"@@RESULT {"kind":"framing","device":"rxe0","impl":"libibverbs","op":"alloc_pd","calls":"write:ALLOC_PD"}
junk
@@RESULT {"kind":"framing","device":"rxe0","impl":"ours","op":"alloc_pd","calls":"write:ALLOC_PD"}
@@RESULT {"kind":"framing","device":"rxe0","impl":"libibverbs","op":"dealloc_pd","calls":"ioctl"}
@@RESULT {"kind":"framing","device":"rxe0","impl":"libibverbs","op":"rereg_access","calls":"none"}
@@RESULT {"kind":"framing","device":"siw0","error":"traced child: exit status: 1"}
@@RESULT {"kind":"framing","error":"strace: not found"}
"#;
        let lines = check_section(
            console,
            |r| r.framing,
            markdown,
            &[
                "| alloc_pd | `write` ALLOC_PD | `write` ALLOC_PD |",
                "| dealloc_pd | `ioctl` | not traced |",
                "| rereg_access | no system call | not traced |",
                "- siw0: tracing failed: traced child: exit status: 1",
                "- all devices: tracing failed: strace: not found",
            ],
        );
        assert_eq!(lines.len(), 6);
        assert_eq!(
            lines[4].error.as_deref(),
            Some("traced child: exit status: 1")
        );
    }
}
