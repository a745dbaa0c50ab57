//! The control operations' instruction counts in docs/benchmarks.md: the
//! `@@OPS` lines of benches/ops with `op=alloc_pd+dealloc_pd` and
//! `op=reg_mr+dereg_mr` (user-space instructions per pair, ours and
//! libibverbs, counted by callgrind in the VM), as one table with the
//! ratio, beside the verbs bench's times.

use super::units::ratio_name;
use crate::markers::{error_of, field, find};
use std::fmt::Write as _;

use super::ops::{is_case, OPS};

/// One control `@@OPS` line.
#[derive(Debug, Clone, PartialEq)]
pub struct Line {
    pub device: String,
    /// `ours` or `libibverbs`.
    pub imp: String,
    pub op: String,
    pub ir_per_pair: f64,
    pub syscalls_per_pair: f64,
    /// Set when the run failed: the bench's message.
    pub error: Option<String>,
}

/// Every control line of `console` (not the data-path cases' ones).
pub fn parse(console: &str) -> Vec<Line> {
    console
        .lines()
        .filter_map(|l| find(l, OPS))
        .filter(|w| field(w, "op").is_some_and(|op| !is_case(op)))
        .filter_map(|w| {
            let real = |k: &str| {
                field(w, k)
                    .and_then(|v| v.parse::<f64>().ok())
                    .unwrap_or(f64::NAN)
            };
            Some(Line {
                device: field(w, "device")?.into(),
                imp: field(w, "impl")?.into(),
                op: field(w, "op")?.into(),
                ir_per_pair: real("ir_per_pair"),
                syscalls_per_pair: real("syscalls_per_pair"),
                error: error_of(w),
            })
        })
        .collect()
}

/// The section, from its `###` heading; empty without control lines.
pub fn markdown(lines: &[Line]) -> String {
    let mut s = String::new();
    if lines.is_empty() {
        return s;
    }
    s.push_str("### Control operations\n\n");
    s.push_str(
        "The same count for the control operations the verbs bench times: `alloc_pd` + \
         `dealloc_pd`, and `reg_mr` + `dereg_mr` of one 4 KiB page, each pair 200 times in a loop \
         (ours over the default transport, fork safety off). Per pair: each function's calls' \
         inclusive instructions ÷ their number, summed. The kernel's work, which dominates the \
         times, is not counted.\n\n",
    );
    s.push_str(
        "| device | operations | ours Ir | libibverbs Ir | ours ÷ libibverbs | ours syscalls | libibverbs syscalls |\n\
         |---|---|---:|---:|---:|---:|---:|\n",
    );
    let mut keys: Vec<(&str, &str)> = Vec::new();
    for l in lines {
        if !keys.contains(&(&l.device, &l.op)) {
            keys.push((&l.device, &l.op));
        }
    }
    for (device, op) in keys {
        let of = |imp: &str| {
            lines
                .iter()
                .find(|l| l.device == device && l.op == op && l.imp == imp)
        };
        let ir = |l: Option<&Line>| match l {
            Some(Line { error: Some(e), .. }) => format!("failed: {e}"),
            Some(l) => format!("{:.1}", l.ir_per_pair),
            None => "—".into(),
        };
        let sys = |l: Option<&Line>| match l {
            Some(l) if l.error.is_none() => format!("{:.2}", l.syscalls_per_pair),
            _ => "—".into(),
        };
        let (ours, ibv) = (of("ours"), of("libibverbs"));
        let ratio = match (ours, ibv) {
            (Some(o), Some(i)) if o.error.is_none() && i.error.is_none() => {
                ratio_name(o.ir_per_pair / i.ir_per_pair)
            }
            _ => "—".into(),
        };
        let _ = writeln!(
            s,
            "| {device} | `{op}` | {} | {} | {ratio} | {} | {} |",
            ir(ours),
            ir(ibv),
            sys(ours),
            sys(ibv)
        );
    }
    s.push('\n');
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_lines_become_one_table() {
        let console = "\
@@OPS device=rxe0 impl=ours op=post_send+poll_cq ir_per_pair=300.0 ir_total=60000 iters=200 posts=200 polls=201 empty_polls=1
@@OPS device=rxe0 impl=ours op=send_recv ir_per_iter=700.0 ir_total=140000 iters=200 posts=200 polls=400 empty_polls=0 post_recvs=200
@@OPS device=siw0 impl=libibverbs op=inline_send status=error error=\"x\"
@@OPS device=rxe0 impl=ours op=alloc_pd+dealloc_pd ir_per_pair=900.0 ir_first=500.0 ir_second=400.0 calls=201+200 syscalls_per_pair=2.00 iters=200 valgrind=3.19.0
@@OPS device=rxe0 impl=libibverbs op=alloc_pd+dealloc_pd ir_per_pair=1200.0 ir_first=700.0 ir_second=500.0 calls=201+200 syscalls_per_pair=2.00 iters=200 valgrind=3.19.0
@@OPS device=rxe0 impl=libibverbs op=reg_mr+dereg_mr status=error error=\"libibverbs: ibv_reg_mr: errno 12\"
";
        let lines = parse(console);
        assert_eq!(lines.len(), 3, "{lines:?}");
        let md = markdown(&lines);
        assert!(
            md.contains("| rxe0 | `alloc_pd+dealloc_pd` | 900.0 | 1200.0 | 0.75× | 2.00 | 2.00 |"),
            "{md}"
        );
        assert!(
            md.contains("| rxe0 | `reg_mr+dereg_mr` | — | failed: libibverbs: ibv_reg_mr: errno 12 | — | — | — |"),
            "{md}"
        );
        assert!(markdown(&[]).is_empty());
    }
}
