//! The control operations' instruction counts in docs/benchmarks.md: the
//! `ops` results of benches/ops with `op=alloc_pd+dealloc_pd` and
//! `op=reg_mr+dereg_mr` (user-space instructions per pair, ours and
//! libibverbs, counted by callgrind in the VM), as one table with the
//! ratio, beside the verbs bench's times.

use super::markdown::section;
use super::ops::{is_case, Line};
use super::units::{distinct, ratio_name};
use std::fmt::Write as _;

/// The section, from its `###` heading, of the control pairs among the
/// ops `lines`; `None` without any.
pub fn markdown(lines: &[Line]) -> Option<String> {
    let lines: Vec<&Line> = lines.iter().filter(|l| !is_case(&l.op)).collect();
    let mut s = section(
        &lines,
        "### Control operations",
        "The same count for the control operations the verbs bench times: `alloc_pd` + \
         `dealloc_pd`, and `reg_mr` + `dereg_mr` of one 4 KiB page, each pair 200 times in a loop \
         (ours over the default transport, fork safety off). Per pair: each function's calls' \
         inclusive instructions ÷ their number, summed. The kernel's work, which dominates the \
         times, is not counted.\n\n",
    )?;
    s.push_str(
        "| device | operations | ours Ir | libibverbs Ir | ours ÷ libibverbs | ours syscalls | libibverbs syscalls |\n\
         |---|---|---:|---:|---:|---:|---:|\n",
    );
    for (device, op) in distinct(lines.iter().map(|l| (l.device.as_str(), l.op.as_str()))) {
        let of = |imp: &str| {
            lines
                .iter()
                .find(|l| l.device == device && l.op == op && l.imp == imp)
                .copied()
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
    Some(s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::markdown::check_section;

    #[test]
    fn control_lines_become_one_table() {
        let console = r#"@@RESULT {"kind":"ops","device":"rxe0","impl":"ours","op":"post_send+poll_cq","ir_total":60000,"iters":200,"posts":200,"polls":201,"empty_polls":1,"ir_per_iter":300.0}
@@RESULT {"kind":"ops","device":"rxe0","impl":"ours","op":"send_recv","ir_per_iter":700.0,"ir_total":140000,"iters":200,"posts":200,"polls":400,"empty_polls":0,"post_recvs":200}
@@RESULT {"kind":"ops","device":"siw0","impl":"libibverbs","op":"inline_send","error":"x"}
@@RESULT {"kind":"ops","device":"rxe0","impl":"ours","op":"alloc_pd+dealloc_pd","ir_per_pair":900.0,"ir_first":500.0,"ir_second":400.0,"calls":"201+200","syscalls_per_pair":2.0,"iters":200,"valgrind":"3.19.0"}
@@RESULT {"kind":"ops","device":"rxe0","impl":"libibverbs","op":"alloc_pd+dealloc_pd","ir_per_pair":1200.0,"ir_first":700.0,"ir_second":500.0,"calls":"201+200","syscalls_per_pair":2.0,"iters":200,"valgrind":"3.19.0"}
@@RESULT {"kind":"ops","device":"rxe0","impl":"libibverbs","op":"reg_mr+dereg_mr","error":"libibverbs: ibv_reg_mr: errno 12"}
"#;
        let lines = check_section(
            console,
            |r| r.ops,
            markdown,
            &[
                "| rxe0 | `alloc_pd+dealloc_pd` | 900.0 | 1200.0 | 0.75× | 2.00 | 2.00 |",
                "| rxe0 | `reg_mr+dereg_mr` | — | failed: libibverbs: ibv_reg_mr: errno 12 | — | — | — |",
            ],
        );
        assert_eq!(lines.len(), 6, "{lines:?}");
    }
}
