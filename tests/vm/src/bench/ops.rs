//! The instruction counts' section of docs/benchmarks.md: the `ops`
//! results of benches/ops (user-space instructions per data-path operation
//! on rxe and siw, ours and libibverbs' providers, counted by callgrind
//! inside the VM), as one table per device with the ratio, the target of
//! case 1 on rxe, and case 1's per-function split.

use super::markdown::section;
use super::results::nan;
use super::units::{distinct, ratio_name};
use serde::Deserialize;
use std::fmt::Write as _;

/// The data-path cases' `op=` values, in the order the tables list them.
/// Case 1 keeps the name its lines always had.
pub const CASES: &[&str] = &[
    "post_send+poll_cq",
    "write_batch4",
    "send_recv",
    "inline_send",
    "read",
    "write_gather2",
];

/// The case the target is about, and the per-function lines.
const PAIR_OP: &str = "post_send+poll_cq";
/// How many functions the section lists per implementation.
const TOP: usize = 8;

/// The target: ours at most this multiple of libibverbs' instructions
/// (case 1 on rxe) ...
const TARGET_RATIO: f64 = 1.0;
/// ... and the multiple it reaches for.
const STRETCH_RATIO: f64 = 0.8;

/// Whether `op` is one of the data-path cases (the other ops lines, the
/// control operations, are control_ops.rs's).
pub fn is_case(op: &str) -> bool {
    CASES.contains(&op)
}

/// One ops result (`"kind":"ops"`): a data-path case, or a control pair
/// (control_ops.rs's).
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Line {
    pub device: String,
    /// `ours`, `ours-exclusive` or `libibverbs`.
    #[serde(rename = "impl")]
    pub imp: String,
    /// One of [`CASES`], or a control pair (`alloc_pd+dealloc_pd`).
    pub op: String,
    /// A case's instructions per iteration of its loop.
    #[serde(default = "nan")]
    pub ir_per_iter: f64,
    /// A control pair's instructions per pair, and its system calls.
    #[serde(default = "nan")]
    pub ir_per_pair: f64,
    #[serde(default = "nan")]
    pub syscalls_per_pair: f64,
    #[serde(default)]
    pub iters: u64,
    #[serde(default)]
    pub posts: u64,
    #[serde(default)]
    pub polls: u64,
    #[serde(default)]
    pub empty_polls: u64,
    #[serde(default)]
    pub post_recvs: u64,
    /// Work requests per `post_send`, and how many of them signalled.
    #[serde(default = "one")]
    pub wrs_per_post: u64,
    #[serde(default = "one")]
    pub signalled_per_post: u64,
    /// Instructions and system calls per call of each measured function
    /// (its calls' inclusive cost ÷ their number).
    #[serde(default = "nan")]
    pub ir_per_post: f64,
    #[serde(default = "nan")]
    pub ir_per_poll: f64,
    #[serde(default = "nan")]
    pub ir_per_post_recv: f64,
    #[serde(default = "nan")]
    pub syscalls_per_post: f64,
    #[serde(default = "nan")]
    pub syscalls_per_poll: f64,
    #[serde(default = "unknown")]
    pub valgrind: String,
    /// Set when the run failed: the bench's message.
    pub error: Option<String>,
}

fn one() -> u64 {
    1
}

fn unknown() -> String {
    "?".into()
}

impl Line {
    /// Instructions per work request (per iteration ÷ the requests one
    /// post carries).
    pub fn ir_per_wr(&self) -> f64 {
        self.ir_per_iter / self.wrs_per_post.max(1) as f64
    }
}

/// The data-path cases' lines of `lines` (not the control pairs').
pub fn cases(lines: &[Line]) -> Vec<Line> {
    lines.iter().filter(|l| is_case(&l.op)).cloned().collect()
}

/// A function's self (exclusive) instructions per pair inside the
/// measured functions of case 1 (`"kind":"ops_fn"`).
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Function {
    pub device: String,
    #[serde(rename = "impl")]
    pub imp: String,
    pub self_ir_per_pair: f64,
    #[serde(rename = "fn")]
    pub name: String,
}

/// The successful line of `imp` for `op` on `device`.
fn ok<'a>(lines: &'a [Line], device: &str, op: &str, imp: &str) -> Option<&'a Line> {
    lines
        .iter()
        .find(|l| l.device == device && l.op == op && l.imp == imp && l.error.is_none())
}

/// Ours' instructions per iteration ÷ libibverbs', per device and case
/// where both ran: `(device, op, ratio)`, devices in console order.
pub fn ratios(lines: &[Line]) -> Vec<(String, String, f64)> {
    let mut out = Vec::new();
    for device in devices(lines) {
        for op in CASES {
            if let (Some(o), Some(i)) = (
                ok(lines, device, op, "ours"),
                ok(lines, device, op, "libibverbs"),
            ) {
                out.push((
                    device.to_string(),
                    op.to_string(),
                    o.ir_per_iter / i.ir_per_iter,
                ));
            }
        }
    }
    out
}

/// The devices of `lines`, in console order.
fn devices(lines: &[Line]) -> Vec<&str> {
    distinct(lines.iter().map(|l| l.device.as_str()))
}

/// What a case's row is called: the operation, and how many requests of
/// a batch were signalled (siw wants every request signalled).
fn case_name(l: &Line) -> String {
    match l.op.as_str() {
        "post_send+poll_cq" => "1. WRITE".into(),
        "write_batch4" if l.error.is_some() => "2. 4 × WRITE".into(),
        "write_batch4" => format!(
            "2. {} × WRITE, {} signalled",
            l.wrs_per_post,
            if l.signalled_per_post >= l.wrs_per_post {
                "all".to_string()
            } else {
                format!("{} of {}", l.signalled_per_post, l.wrs_per_post)
            }
        ),
        "send_recv" => "3. SEND + RECV".into(),
        "inline_send" => "4. inline SEND (sender only)".into(),
        "read" => "5. RDMA READ".into(),
        "write_gather2" => "6. WRITE of 2 SGEs".into(),
        other => other.into(),
    }
}

/// The section, from its `##` heading; `None` without ops lines.
pub fn markdown(lines: &[Line], functions: &[Function]) -> Option<String> {
    let version = lines
        .iter()
        .find(|l| l.error.is_none())
        .map_or("?", |l| l.valgrind.as_str());
    let intro = format!(
        "User-space instructions (Ir) of the data path's calls, counted by valgrind's callgrind \
         {version} in the VM (deterministic, unlike a clock under TCG). benches/ops connects two \
         RC QPs of one context to each other on the device (rxe: by hand; siw: through the \
         rdma_cm, the only way an iWARP QP reaches RTS) and runs, per case and implementation, a \
         loop in a callgrind run of its own; each wait for completions sleeps 5 ms and polls once, \
         sleeping 1 ms again while they are not all in (such empty polls are counted in the total \
         and listed). The cases, all 64-byte payloads:\n\n\
         1. one signalled RDMA WRITE from an SGE (not inline): `post_send` + `poll_cq`;\n\
         2. 4 such WRITEs (to 4 slots) in one `post_send`, only the last signalled (on siw all 4: \
         siw wants every request signalled), polled until the signalled completions are in;\n\
         3. `post_recv` of one receive on the receiving QP, `post_send` of one signalled SEND \
         from an SGE on the other, and the polls of both CQs (the SEND's, then the receive's);\n\
         4. one signalled SEND with its bytes inline (`Payload::Inline`, `IBV_SEND_INLINE`): only \
         the sender's `post_send` and its polls are counted; the receiver's receives are posted \
         before the loop and not counted;\n\
         5. one signalled RDMA READ of the other QP's source into an SGE: `post_send` + \
         `poll_cq`;\n\
         6. case 1 with the WRITE's bytes gathered from two SGEs of 32 (the QPs take two send \
         SGEs).\n\n\
         callgrind collects only inside the measured functions, each inclusive of what it calls \
         in user space (locks, the doorbell's `write` wrapper); the kernel is not counted. Ours: \
         the driver's functions that the inline `QueuePair::post_send`, `QueuePair::post_recv` \
         and `CompletionQueue::poll` call through the object's pointer, `post_send_locked`, \
         `post_recv_locked` and `fast_poll`, with the fork check, the lock and the state or \
         routing check in them; \
         ours-exclusive: the same through `post_send_exclusive` and `post_recv_exclusive` (`&mut \
         self`, no lock: for a caller that holds the QP alone; measured in `post_send_unlocked` \
         and `post_recv_unlocked`, behind their dispatch); libibverbs: \
         its provider's `rxe_post_send` / `siw_post_send`, `…_post_recv` and `…_poll_cq` (what \
         the inline `ibv_post_send`, `ibv_post_recv` and `ibv_poll_cq` call), statically linked \
         into the same binary. Ir per iteration is the total ÷ the loop's iterations, the first \
         (cold) one included; per work request, that ÷ the requests one `post_send` carries; per \
         post_send, post_recv and poll, each function's calls' inclusive cost ÷ their number, and \
         so are the system calls (callgrind's `sysCount`, `--collect-systime`). `ours ÷ \
         libibverbs` compares Ir per iteration.\n\n"
    );
    let mut s = section(lines, "## Instructions per post_send + poll_cq", &intro)?;
    for device in devices(lines) {
        let _ = writeln!(s, "**{device}**\n");
        s.push_str(
            "| case | implementation | Ir per iteration | Ir per work request | Ir per post_send | \
             Ir per post_recv | Ir per poll | syscalls per post_send | syscalls per poll | \
             iterations | polls | empty polls | ours ÷ libibverbs |\n",
        );
        s.push_str("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
        for op in CASES {
            for l in lines.iter().filter(|l| l.device == device && l.op == *op) {
                s.push_str(&row(lines, l));
            }
        }
        s.push('\n');
    }
    let rxe = ratios(lines)
        .into_iter()
        .find(|(d, op, _)| d.starts_with("rxe") && op == PAIR_OP);
    let _ = writeln!(
        s,
        "Target: case 1 (`post_send` + `poll_cq` of one WRITE), ours ≤ {TARGET_RATIO:.1} × \
         libibverbs' rxe provider (reaching for {STRETCH_RATIO}×): {}.\n",
        match rxe {
            Some((d, _, r)) if r <= STRETCH_RATIO => {
                format!("{r:.2}× on {d} — met, and {STRETCH_RATIO}× reached")
            }
            Some((d, _, r)) if r <= TARGET_RATIO => {
                format!("{r:.2}× on {d} — met ({STRETCH_RATIO}× not yet reached)")
            }
            Some((d, _, r)) => format!("{r:.2}× on {d} — **not met**"),
            None => "not measured".into(),
        }
    );
    let groups = distinct(
        functions
            .iter()
            .map(|f| (f.device.as_str(), f.imp.as_str())),
    );
    if !groups.is_empty() {
        s.push_str(
            "Where they go in case 1: the functions with the most self (exclusive) instructions \
             per pair inside the measured ones.\n\n",
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
    Some(s)
}

/// One table row: a failed run says so in its first number's cell; ours'
/// row carries the ratio.
fn row(lines: &[Line], l: &Line) -> String {
    let case = case_name(l);
    if let Some(e) = &l.error {
        return format!(
            "| {case} | {} | failed: {} | | | | | | | | | | |\n",
            l.imp,
            e.replace('|', "\\|")
        );
    }
    let ratio = if l.imp.starts_with("ours") {
        match ok(lines, &l.device, &l.op, "libibverbs") {
            Some(i) => ratio_name(l.ir_per_iter / i.ir_per_iter),
            None => "—".into(),
        }
    } else {
        String::new()
    };
    let post_recv = if l.post_recvs > 0 {
        format!("{:.1}", l.ir_per_post_recv)
    } else {
        "—".into()
    };
    format!(
        "| {case} | {} | {:.1} | {:.1} | {:.1} | {post_recv} | {:.1} | {:.2} | {:.2} | {} | {} | {} | {ratio} |\n",
        l.imp,
        l.ir_per_iter,
        l.ir_per_wr(),
        l.ir_per_post,
        l.ir_per_poll,
        l.syscalls_per_post,
        l.syscalls_per_poll,
        l.iters,
        l.polls,
        l.empty_polls
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::markdown::assert_holds;
    use crate::bench::results::read_all;

    fn parse(console: &str) -> Vec<Line> {
        cases(&read_all(console).ops)
    }

    #[test]
    fn lines_table_and_the_target() {
        let console = r#"@@RESULT {"kind":"ops","device":"rxe0","impl":"ours","op":"post_send+poll_cq","ir_total":60000,"iters":200,"posts":200,"polls":201,"empty_polls":1,"ir_per_post":200.0,"ir_per_poll":99.5,"syscalls_per_post":1.0,"syscalls_per_poll":0.0,"valgrind":"3.19.0","ir_per_iter":300.0}
[ 3.1] noise @@RESULT {"kind":"ops","device":"rxe0","impl":"libibverbs","op":"post_send+poll_cq","ir_total":80000,"iters":200,"posts":200,"polls":200,"empty_polls":0,"valgrind":"3.19.0","ir_per_iter":400.0}
@@RESULT {"kind":"ops","device":"siw0","impl":"ours","op":"post_send+poll_cq","error":"ours: post_send 0: boom"}
@@RESULT {"kind":"ops","device":"rxe0","impl":"ours","op":"alloc_pd+dealloc_pd","ir_per_pair":900.0,"calls":"201+200","syscalls_per_pair":2.0,"iters":200}
@@OPS-CHILD posts=1 polls=1 empty_polls=0
@@RESULT {"kind":"ops_fn","device":"rxe0","impl":"ours","self_ir_per_pair":120.5,"fn":"uverbs::cq::fast_poll"}
@@RESULT {"kind":"ops_fn","device":"rxe0","impl":"ours","self_ir_per_pair":80.0,"fn":"<&T as core::fmt::Debug>::fmt | x"}
"#;
        let lines = parse(console);
        let functions = read_all(console).ops_fn;
        assert_eq!(functions.len(), 2, "{functions:?}");
        assert_eq!(functions[0].name, "uverbs::cq::fast_poll");
        assert_eq!(lines.len(), 3, "{lines:?}");
        assert_eq!(lines[0].polls, 201);
        assert_eq!(lines[0].ir_per_iter, 300.0);
        assert_eq!(
            ratios(&lines),
            vec![("rxe0".to_string(), PAIR_OP.to_string(), 0.75)]
        );
        let md = markdown(&lines, &functions).unwrap();
        assert_holds(
            &md,
            &[
                "| `uverbs::cq::fast_poll` | 120.5 |",
                "| `<&T as core::fmt::Debug>::fmt \\| x` | 80.0 |",
                "| 1. WRITE | ours | 300.0 | 300.0 | 200.0 | — | 99.5 | 1.00 | 0.00 | 200 | 201 | 1 | 0.75× |",
                "**siw0**",
                "| 1. WRITE | ours | failed: ours: post_send 0: boom |",
                "callgrind 3.19.0",
                "0.75× on rxe0 — met, and 0.8× reached",
            ],
        );
        assert!(markdown(&[], &[]).is_none());
    }

    #[test]
    fn the_new_cases_parse_with_their_splits() {
        let console = r#"@@RESULT {"kind":"ops","device":"siw0","impl":"ours","op":"write_batch4","ir_per_iter":1600.0,"ir_total":320000,"iters":200,"posts":200,"polls":400,"empty_polls":200,"ir_per_post":900.0,"ir_per_poll":350.0,"syscalls_per_post":1.0,"syscalls_per_poll":0.0,"wrs_per_post":4,"signalled_per_post":4,"valgrind":"3.19.0"}
@@RESULT {"kind":"ops","device":"siw0","impl":"libibverbs","op":"write_batch4","ir_per_iter":1000.0,"ir_total":200000,"iters":200,"posts":200,"polls":200,"empty_polls":0,"ir_per_post":700.0,"ir_per_poll":300.0,"syscalls_per_post":1.0,"syscalls_per_poll":0.0,"wrs_per_post":4,"signalled_per_post":4,"valgrind":"3.19.0"}
@@RESULT {"kind":"ops","device":"siw0","impl":"ours","op":"send_recv","ir_per_iter":700.0,"ir_total":140000,"iters":200,"posts":200,"polls":400,"empty_polls":0,"ir_per_post":300.0,"ir_per_poll":150.0,"syscalls_per_post":1.0,"syscalls_per_poll":0.0,"post_recvs":200,"ir_per_post_recv":100.0,"syscalls_per_post_recv":0.0,"wrs_per_post":1,"signalled_per_post":1,"valgrind":"3.19.0"}
@@RESULT {"kind":"ops","device":"siw0","impl":"libibverbs","op":"send_recv","error":"libibverbs: post_recv 0: errno 12"}
@@RESULT {"kind":"ops","device":"rxe0","impl":"ours","op":"inline_send","ir_per_iter":400.0,"ir_total":80000,"iters":200,"posts":200,"polls":200,"empty_polls":0,"ir_per_post":250.0,"ir_per_poll":150.0,"syscalls_per_post":1.0,"syscalls_per_poll":0.0,"wrs_per_post":1,"signalled_per_post":1,"valgrind":"3.19.0"}
@@RESULT {"kind":"ops","device":"rxe0","impl":"libibverbs","op":"write_batch4","ir_per_iter":500.0,"iters":200,"posts":200,"polls":200,"wrs_per_post":4,"signalled_per_post":1,"valgrind":"3.19.0"}
@@RESULT {"kind":"ops","device":"rxe0","impl":"ours","op":"reg_mr+dereg_mr","ir_per_pair":597.0,"iters":200}
"#;
        let lines = parse(console);
        assert_eq!(lines.len(), 6, "{lines:?}");
        let batch = &lines[0];
        assert_eq!(
            (
                batch.op.as_str(),
                batch.wrs_per_post,
                batch.signalled_per_post
            ),
            ("write_batch4", 4, 4)
        );
        assert_eq!(batch.ir_per_wr(), 400.0);
        let sr = &lines[2];
        assert_eq!((sr.post_recvs, sr.ir_per_post_recv), (200, 100.0));
        assert_eq!(
            lines[3].error.as_deref(),
            Some("libibverbs: post_recv 0: errno 12")
        );
        assert_eq!(
            ratios(&lines),
            vec![("siw0".to_string(), "write_batch4".to_string(), 1.6)]
        );
        let md = markdown(&lines, &[]).unwrap();
        // siw first: the devices in console order, the cases in their order.
        assert!(md.find("**siw0**") < md.find("**rxe0**"), "{md}");
        assert_holds(
            &md,
            &[
                "| 2. 4 × WRITE, all signalled | ours | 1600.0 | 400.0 | 900.0 | — | 350.0 | 1.00 | 0.00 | 200 | 400 | 200 | 1.60× |",
                "| 2. 4 × WRITE, all signalled | libibverbs | 1000.0 | 250.0 | 700.0 | — | 300.0 | 1.00 | 0.00 | 200 | 200 | 0 |  |",
                "| 3. SEND + RECV | ours | 700.0 | 700.0 | 300.0 | 100.0 | 150.0 | 1.00 | 0.00 | 200 | 400 | 0 | — |",
                "| 3. SEND + RECV | libibverbs | failed: libibverbs: post_recv 0: errno 12 |",
                "| 4. inline SEND (sender only) | ours | 400.0 |",
                "| 2. 4 × WRITE, 1 of 4 signalled | libibverbs | 500.0 | 125.0 |",
                "libibverbs' rxe provider (reaching for 0.8×): not measured.",
            ],
        );
    }

    #[test]
    fn target_met_not_met_or_not_measured() {
        let pair = |ours: &str, ibv: &str| {
            let line = |imp: &str, rest: &str| {
                format!(
                    r#"@@RESULT {{"kind":"ops","device":"rxe0","impl":"{imp}","op":"post_send+poll_cq",{rest}}}"#
                )
            };
            parse(&(line("ours", ours) + "\n" + &line("libibverbs", ibv)))
        };
        for (ours, ibv, verdict) in [
            (
                r#""ir_per_iter":400"#,
                r#""ir_per_iter":380"#,
                "1.05× on rxe0 — **not met**",
            ),
            (
                r#""ir_per_iter":360"#,
                r#""ir_per_iter":400"#,
                "0.90× on rxe0 — met (0.8× not yet reached)",
            ),
            (
                r#""ir_per_iter":100"#,
                r#""error":"x""#,
                "libibverbs' rxe provider (reaching for 0.8×): not measured.",
            ),
        ] {
            assert_holds(&markdown(&pair(ours, ibv), &[]).unwrap(), &[verdict]);
        }
    }
}
