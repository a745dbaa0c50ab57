//! Runs this binary's measured loop under callgrind and reads the counts
//! back from callgrind's output file (its own text format; no
//! callgrind_annotate, which is perl).

use std::collections::HashMap;
use std::path::Path;
use std::process::Command;

use crate::{Counts, CHILD};

/// One implementation: its name on the `--impl` option and in the result
/// line, and the two functions callgrind collects inside, by the names
/// callgrind gives them (demangled; `--toggle-collect` matches them
/// whole, so a closure or helper of the same prefix does not toggle).
pub struct Impl {
    pub name: &'static str,
    pub post: &'static str,
    pub poll: &'static str,
}

pub const IMPLS: &[Impl] = &[
    Impl {
        name: "ours",
        post: "uverbs::qp::QueuePair::post_send",
        poll: "uverbs::cq::CompletionQueue::poll",
    },
    Impl {
        name: "libibverbs",
        post: "rxe_post_send",
        poll: "rxe_poll_cq",
    },
];

/// What one callgrind run counted.
#[derive(Debug, PartialEq, Eq)]
pub struct Measured {
    /// Instructions executed inside the measured functions.
    pub ir_total: u64,
    /// Calls callgrind saw of the post and of the poll function.
    pub posts: u64,
    pub polls: u64,
    /// The polls that found nothing (the child's own count).
    pub empty_polls: u64,
    /// callgrind's version, from the file's `creator:` line.
    pub version: String,
    /// Self Ir per function, the largest first.
    pub top: Vec<(String, u64)>,
    /// The post and the poll function's calls, each inclusive.
    pub post: Calls,
    pub poll: Calls,
}

/// The valgrind launcher: `valgrind.bin` where Debian installs it behind
/// its `valgrind` shell wrapper (which only adds debug-library paths).
pub fn default_valgrind() -> String {
    let bin = "/usr/bin/valgrind.bin";
    if Path::new(bin).exists() {
        bin.into()
    } else {
        "valgrind".into()
    }
}

/// Runs `imp`'s loop of `iters` pairs under callgrind and reads its file.
pub fn run(
    valgrind: &str,
    imp: &Impl,
    device: &str,
    iters: usize,
    mtu: u32,
) -> Result<Measured, String> {
    let (file, stdout) = run_child_with_output(
        valgrind,
        imp.name,
        &[imp.post, imp.poll],
        &[
            "--impl",
            imp.name,
            "--device",
            device,
            "--iters",
            &iters.to_string(),
            "--mtu",
            &mtu.to_string(),
        ],
    )?;
    let child = stdout
        .lines()
        .find_map(|l| l.strip_prefix(CHILD))
        .and_then(parse_child)
        .ok_or_else(|| format!("the measured run printed no {CHILD} line: {stdout}"))?;
    let calls = |f: &str| file.calls.get(f).copied().unwrap_or_default();
    let (post, poll) = (calls(imp.post), calls(imp.poll));
    let (posts, polls) = (post.count, poll.count);
    // callgrind must have seen exactly the calls the loop made: otherwise a
    // name did not match (nothing collected) or a call was inlined away.
    if posts != child.posts || polls != child.polls {
        return Err(format!(
            "callgrind saw {posts} calls of {} and {polls} of {}, the loop made {} and {}",
            imp.post, imp.poll, child.posts, child.polls
        ));
    }
    let mut top: Vec<(String, u64)> = file.self_ir.into_iter().filter(|(_, ir)| *ir > 0).collect();
    top.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    Ok(Measured {
        top,
        post,
        poll,
        ir_total: file.ir_total,
        posts,
        polls,
        empty_polls: child.empty_polls,
        version: file.version,
    })
}

/// Runs this binary with `args` under callgrind, collecting only inside
/// the `toggles` functions, and reads callgrind's file (named after `tag`).
pub fn run_child(
    valgrind: &str,
    tag: &str,
    toggles: &[&str],
    args: &[&str],
) -> Result<File, String> {
    run_child_with_output(valgrind, tag, toggles, args).map(|(file, _)| file)
}

/// [`run_child`], and what the child printed.
fn run_child_with_output(
    valgrind: &str,
    tag: &str,
    toggles: &[&str],
    args: &[&str],
) -> Result<(File, String), String> {
    let exe = std::env::current_exe().map_err(|e| format!("current_exe: {e}"))?;
    let out_file = format!("/tmp/cg.{tag}");
    let _ = std::fs::remove_file(&out_file);
    let out = Command::new(valgrind)
        .arg("--tool=callgrind")
        .args(toggles.iter().map(|t| format!("--toggle-collect={t}")))
        .arg("--dump-instr=no")
        .arg("--collect-systime=yes")
        .arg(format!("--callgrind-out-file={out_file}"))
        .arg(&exe)
        .args(args)
        .output()
        .map_err(|e| format!("starting {valgrind}: {e}"))?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        let tail: Vec<&str> = stderr.lines().rev().take(6).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        return Err(format!(
            "{valgrind} exited {}: {}",
            out.status,
            tail.join(" | ")
        ));
    }
    let text =
        std::fs::read_to_string(&out_file).map_err(|e| format!("reading {out_file}: {e}"))?;
    let file = parse(&text)?;
    Ok((file, String::from_utf8_lossy(&out.stdout).into_owned()))
}

fn field(words: &str, key: &str) -> Option<u64> {
    words
        .split_whitespace()
        .find_map(|w| w.strip_prefix(key)?.strip_prefix('='))
        .and_then(|v| v.parse().ok())
}

fn parse_child(words: &str) -> Option<Counts> {
    Some(Counts {
        posts: field(words, "posts")?,
        polls: field(words, "polls")?,
        empty_polls: field(words, "empty_polls")?,
    })
}

/// The calls of one function the file records (`cfn=`, `calls=`, then
/// the calls' inclusive cost).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Calls {
    pub count: u64,
    /// Instructions inside the calls (collected ones only).
    pub ir: u64,
    /// System calls inside the calls (`sysCount`, from
    /// `--collect-systime`; callgrind counts these whether collecting or
    /// not).
    pub syscalls: u64,
}

/// What [`parse`] reads from a callgrind output file.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct File {
    /// The `totals:` (else `summary:`) Ir: everything collected.
    pub ir_total: u64,
    /// The calls per callee name.
    pub calls: HashMap<String, Calls>,
    /// Self (exclusive) Ir per function name: the cost lines under `fn=`
    /// that do not follow a `calls=` line (those are a call's inclusive
    /// cost).
    pub self_ir: HashMap<String, u64>,
    pub version: String,
}

/// Reads a callgrind output file (format version 1, one position column,
/// with or without name compression: `fn=(id) name` defines an id,
/// `fn=(id)` refers to it).
pub fn parse(text: &str) -> Result<File, String> {
    let mut names: HashMap<String, String> = HashMap::new();
    let mut file = File::default();
    // Column of Ir and of sysCount among the cost numbers (`events:`).
    let (mut ir_at, mut sys_at) = (Some(0), None);
    let mut current = String::new();
    // The callee of the `calls=` line just read, whose cost line is next.
    let mut cfn: Option<String> = None;
    let mut pending_call: Option<String> = None;
    let (mut totals, mut summary) = (None, None);
    let first = |v: &str| v.split_whitespace().next().and_then(|n| n.parse().ok());
    for line in text.lines() {
        if let Some(v) = line.strip_prefix("creator: ") {
            file.version = v.trim().trim_start_matches("callgrind-").to_string();
        } else if let Some(v) = line.strip_prefix("events:") {
            let events: Vec<&str> = v.split_whitespace().collect();
            ir_at = events.iter().position(|e| *e == "Ir");
            sys_at = events.iter().position(|e| *e == "sysCount");
        } else if let Some(v) = line.strip_prefix("totals:") {
            totals = first(v);
        } else if let Some(v) = line.strip_prefix("summary:") {
            summary = first(v);
        } else if let Some(v) = line.strip_prefix("fn=") {
            current = resolve(&mut names, v);
        } else if let Some(v) = line.strip_prefix("cfn=") {
            cfn = Some(resolve(&mut names, v));
        } else if let Some(v) = line.strip_prefix("calls=") {
            let n: u64 =
                first(v).ok_or_else(|| format!("callgrind file: unreadable line {line:?}"))?;
            let callee = cfn
                .take()
                .ok_or_else(|| format!("callgrind file: {line:?} without cfn="))?;
            file.calls.entry(callee.clone()).or_default().count += n;
            pending_call = Some(callee);
        } else if line.starts_with(|c: char| c.is_ascii_digit() || "+-*".contains(c)) {
            // A cost line: the position, then one number per event (those
            // left out at the end are 0).
            let nums: Vec<u64> = line
                .split_whitespace()
                .skip(1)
                .map(|n| n.parse().unwrap_or(0))
                .collect();
            let at = |i: Option<usize>| i.and_then(|i| nums.get(i).copied()).unwrap_or(0);
            match pending_call.take() {
                Some(callee) => {
                    let c = file.calls.entry(callee).or_default();
                    c.ir += at(ir_at);
                    c.syscalls += at(sys_at);
                }
                None => *file.self_ir.entry(current.clone()).or_default() += at(ir_at),
            }
        }
    }
    file.ir_total = totals
        .or(summary)
        .ok_or("callgrind file: no totals: or summary: line")?;
    Ok(file)
}

/// The name `(id) name`, `(id)` or `name` stands for, remembering a new id.
fn resolve(names: &mut HashMap<String, String>, v: &str) -> String {
    let v = v.trim();
    let Some(rest) = v.strip_prefix('(') else {
        return v.to_string();
    };
    let Some((id, name)) = rest.split_once(')') else {
        return v.to_string();
    };
    let name = name.trim();
    if name.is_empty() {
        names.get(id).cloned().unwrap_or_else(|| format!("({id})"))
    } else {
        names.insert(id.to_string(), name.to_string());
        name.to_string()
    }
}
