//! The instruction counts' section of docs/benchmarks.md: the `@@OPS`
//! lines of benches/ops (user-space instructions per `post_send` +
//! `poll_cq` pair on rxe, ours and libibverbs' rxe provider, counted by
//! callgrind inside the VM), as a table with the ratio and the target.

use crate::markers::{error_of, field, find};
use std::fmt::Write as _;

/// The marker of an ops line.
pub const OPS: &str = "@@OPS";

/// The operation of the post + poll lines.
const PAIR_OP: &str = "post_send+poll_cq";

/// The marker of a per-function line (self Ir; the name ends the line).
pub const OPS_FN: &str = "@@OPS-FN";
/// How many functions the section lists per implementation.
const TOP: usize = 8;

/// The target: ours at most this fraction of libibverbs' instructions.
const TARGET_RATIO: f64 = 0.8;

/// One `@@OPS` line.
#[derive(Debug, Clone, PartialEq)]
pub struct Line {
    pub device: String,
    /// `ours` or `libibverbs`.
    pub imp: String,
    pub ir_per_pair: f64,
    pub iters: u64,
    pub posts: u64,
    pub polls: u64,
    pub empty_polls: u64,
    /// Instructions and system calls per call of each measured function
    /// (its calls' inclusive cost ÷ their number).
    pub ir_per_post: f64,
    pub ir_per_poll: f64,
    pub syscalls_per_post: f64,
    pub syscalls_per_poll: f64,
    pub valgrind: String,
    /// Set when the run failed: the bench's message.
    pub error: Option<String>,
}

/// Every ops line of `console` (those without device or impl left out).
pub fn parse(console: &str) -> Vec<Line> {
    console
        .lines()
        .filter_map(|l| find(l, OPS))
        // The control operations' lines are control_ops.rs's.
        .filter(|w| field(w, "op").is_none_or(|op| op == PAIR_OP))
        .filter_map(|w| {
            let num = |k: &str| field(w, k).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
            let real = |k: &str| {
                field(w, k)
                    .and_then(|v| v.parse::<f64>().ok())
                    .unwrap_or(f64::NAN)
            };
            let error = error_of(w);
            Some(Line {
                device: field(w, "device")?.into(),
                imp: field(w, "impl")?.into(),
                ir_per_pair: real("ir_per_pair"),
                ir_per_post: real("ir_per_post"),
                ir_per_poll: real("ir_per_poll"),
                syscalls_per_post: real("syscalls_per_post"),
                syscalls_per_poll: real("syscalls_per_poll"),
                iters: num("iters"),
                posts: num("posts"),
                polls: num("polls"),
                empty_polls: num("empty_polls"),
                valgrind: field(w, "valgrind").unwrap_or("?").into(),
                error,
            })
        })
        .collect()
}

/// One `@@OPS-FN` line: a function's self (exclusive) instructions per
/// pair inside the measured functions.
#[derive(Debug, Clone, PartialEq)]
pub struct Function {
    pub device: String,
    pub imp: String,
    pub self_ir_per_pair: f64,
    pub name: String,
}

/// Every per-function line of `console`, in order.
pub fn parse_functions(console: &str) -> Vec<Function> {
    console
        .lines()
        .filter_map(|l| find(l, OPS_FN))
        .filter_map(|w| {
            let (head, name) = w.split_once(" fn=")?;
            Some(Function {
                device: field(head, "device")?.into(),
                imp: field(head, "impl")?.into(),
                self_ir_per_pair: field(head, "self_ir_per_pair")?.parse().ok()?,
                name: name.trim().into(),
            })
        })
        .collect()
}

/// Ours' instructions per pair ÷ libibverbs', per device where both ran.
pub fn ratios(lines: &[Line]) -> Vec<(String, f64)> {
    let ok = |imp: &str, device: &str| {
        lines
            .iter()
            .find(|l| l.imp == imp && l.device == device && l.error.is_none())
            .map(|l| l.ir_per_pair)
    };
    let mut out: Vec<(String, f64)> = Vec::new();
    for l in lines {
        if out.iter().any(|(d, _)| *d == l.device) {
            continue;
        }
        if let (Some(o), Some(i)) = (ok("ours", &l.device), ok("libibverbs", &l.device)) {
            out.push((l.device.clone(), o / i));
        }
    }
    out
}

/// The section, from its `##` heading; empty without ops lines.
pub fn markdown(lines: &[Line], functions: &[Function]) -> String {
    let mut s = String::new();
    if lines.is_empty() {
        return s;
    }
    s.push_str("## Instructions per post_send + poll_cq\n\n");
    let version = lines
        .iter()
        .find(|l| l.error.is_none())
        .map_or("?", |l| l.valgrind.as_str());
    let _ = write!(
        s,
        "User-space instructions (Ir) of one `post_send` + one `poll_cq`, counted by valgrind's \
         callgrind {version} in the VM (deterministic, unlike a clock under TCG). benches/ops \
         connects two RC QPs of one context to each other on the device and runs, per \
         implementation, a loop that posts one signalled 64-byte RDMA WRITE from an SGE (not \
         inline), sleeps 1 ms and polls once for its completion (sleeping again while the poll \
         finds nothing: such empty polls are counted in the total and listed). callgrind collects \
         only inside the measured functions, each inclusive of what it calls in user space \
         (locks, the doorbell's `write` wrapper); the kernel is not counted. Ours: \
         `QueuePair::post_send` and `CompletionQueue::poll`; libibverbs: its rxe provider's \
         `rxe_post_send` and `rxe_poll_cq` (what the inline `ibv_post_send` / `ibv_poll_cq` \
         call), statically linked into the same binary. Ir per pair is the total ÷ the loop's \
         iterations, the first (cold) pair included; per post_send and per poll are each function's \
         calls' inclusive cost ÷ their number, and so are its system calls (callgrind's \
         `sysCount`, `--collect-systime`).\n\n"
    );
    s.push_str(
        "| device | implementation | Ir per pair | Ir per post_send | Ir per poll | \
         syscalls per post_send | syscalls per poll | iterations | posts | polls | empty polls |\n",
    );
    s.push_str("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for l in lines {
        match &l.error {
            Some(e) => {
                let _ = writeln!(
                    s,
                    "| {} | {} | failed: {e} | | | | | | | | |",
                    l.device, l.imp
                );
            }
            None => {
                let _ = writeln!(
                    s,
                    "| {} | {} | {:.1} | {:.1} | {:.1} | {:.2} | {:.2} | {} | {} | {} | {} |",
                    l.device,
                    l.imp,
                    l.ir_per_pair,
                    l.ir_per_post,
                    l.ir_per_poll,
                    l.syscalls_per_post,
                    l.syscalls_per_poll,
                    l.iters,
                    l.posts,
                    l.polls,
                    l.empty_polls
                );
            }
        }
    }
    s.push('\n');
    let rxe = ratios(lines)
        .into_iter()
        .find(|(d, _)| d.starts_with("rxe"));
    let _ = writeln!(
        s,
        "Target: ours ≤ {TARGET_RATIO} × libibverbs' rxe provider: {}.\n",
        match rxe {
            Some((d, r)) if r <= TARGET_RATIO => format!("{r:.2}× on {d} — met"),
            Some((d, r)) => format!("{r:.2}× on {d} — **not met**"),
            None => "not measured".into(),
        }
    );
    let mut groups: Vec<(&str, &str)> = Vec::new();
    for f in functions {
        if !groups.contains(&(&f.device, &f.imp)) {
            groups.push((&f.device, &f.imp));
        }
    }
    if !groups.is_empty() {
        s.push_str(
            "Where they go: the functions with the most self (exclusive) instructions per pair \
             inside the measured ones.\n\n",
        );
    }
    for (device, imp) in groups {
        let _ = writeln!(s, "**{device}, {imp}**\n");
        s.push_str("| function | self Ir per pair |\n|---|---:|\n");
        for f in functions
            .iter()
            .filter(|f| f.device == device && f.imp == imp)
            .take(TOP)
        {
            let _ = writeln!(
                s,
                "| `{}` | {:.1} |",
                f.name.replace('|', "\\|"),
                f.self_ir_per_pair
            );
        }
        s.push('\n');
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_table_and_the_target() {
        let console = "\
@@OPS device=rxe0 impl=ours op=post_send+poll_cq ir_per_pair=300.0 ir_total=60000 iters=200 posts=200 polls=201 empty_polls=1 ir_per_post=200.0 ir_per_poll=99.5 syscalls_per_post=1.00 syscalls_per_poll=0.00 valgrind=3.19.0
[ 3.1] noise @@OPS device=rxe0 impl=libibverbs op=post_send+poll_cq ir_per_pair=400.0 ir_total=80000 iters=200 posts=200 polls=200 empty_polls=0 valgrind=3.19.0
@@OPS device=siw0 impl=ours op=post_send+poll_cq status=error error=\"ours: post_send 0: boom\"
@@OPS device=rxe0 impl=ours op=alloc_pd+dealloc_pd ir_per_pair=900.0 calls=201+200 syscalls_per_pair=2.00 iters=200
@@OPS-CHILD posts=1 polls=1 empty_polls=0
@@OPS-FN device=rxe0 impl=ours self_ir_per_pair=120.5 fn=uverbs::cq::CompletionQueue::poll
@@OPS-FN device=rxe0 impl=ours self_ir_per_pair=80.0 fn=<&T as core::fmt::Debug>::fmt | x
";
        let lines = parse(console);
        let functions = parse_functions(console);
        assert_eq!(functions.len(), 2, "{functions:?}");
        assert_eq!(functions[0].name, "uverbs::cq::CompletionQueue::poll");
        assert_eq!(lines.len(), 3, "{lines:?}");
        assert_eq!(lines[0].polls, 201);
        assert_eq!(ratios(&lines), vec![("rxe0".to_string(), 0.75)]);
        let md = markdown(&lines, &functions);
        assert!(
            md.contains("| `uverbs::cq::CompletionQueue::poll` | 120.5 |"),
            "{md}"
        );
        assert!(
            md.contains("| `<&T as core::fmt::Debug>::fmt \\| x` | 80.0 |"),
            "{md}"
        );
        assert!(
            md.contains(
                "| rxe0 | ours | 300.0 | 200.0 | 99.5 | 1.00 | 0.00 | 200 | 200 | 201 | 1 |"
            ),
            "{md}"
        );
        assert!(
            md.contains("| siw0 | ours | failed: ours: post_send 0: boom |"),
            "{md}"
        );
        assert!(md.contains("callgrind 3.19.0"), "{md}");
        assert!(md.contains("0.75× on rxe0 — met"), "{md}");
        assert!(markdown(&[], &[]).is_empty());
    }

    #[test]
    fn target_not_met_or_not_measured() {
        let over = parse(
            "@@OPS device=rxe0 impl=ours ir_per_pair=400 iters=1 posts=1 polls=1\n\
             @@OPS device=rxe0 impl=libibverbs ir_per_pair=400 iters=1 posts=1 polls=1\n",
        );
        assert!(markdown(&over, &[]).contains("1.00× on rxe0 — **not met**"));
        let failed = parse(
            "@@OPS device=rxe0 impl=ours ir_per_pair=100 iters=1 posts=1 polls=1\n\
             @@OPS device=rxe0 impl=libibverbs status=error error=\"x\"\n",
        );
        assert!(markdown(&failed, &[]).contains("libibverbs' rxe provider: not measured."));
    }
}
