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
    let exe = std::env::current_exe().map_err(|e| format!("current_exe: {e}"))?;
    let out_file = format!("/tmp/cg.{}", imp.name);
    let _ = std::fs::remove_file(&out_file);
    let out = Command::new(valgrind)
        .arg("--tool=callgrind")
        .arg(format!("--toggle-collect={}", imp.post))
        .arg(format!("--toggle-collect={}", imp.poll))
        .arg("--dump-instr=no")
        .arg(format!("--callgrind-out-file={out_file}"))
        .arg(&exe)
        .args(["--impl", imp.name, "--device", device])
        .args(["--iters", &iters.to_string(), "--mtu", &mtu.to_string()])
        .output()
        .map_err(|e| format!("starting {valgrind}: {e}"))?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    let tail: Vec<&str> = stderr.lines().rev().take(6).collect();
    if !out.status.success() {
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        return Err(format!(
            "{valgrind} exited {}: {}",
            out.status,
            tail.join(" | ")
        ));
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    let child = stdout
        .lines()
        .find_map(|l| l.strip_prefix(CHILD))
        .and_then(parse_child)
        .ok_or_else(|| format!("the measured run printed no {CHILD} line: {stdout}"))?;
    let text =
        std::fs::read_to_string(&out_file).map_err(|e| format!("reading {out_file}: {e}"))?;
    let file = parse(&text)?;
    let calls = |f: &str| file.calls.get(f).copied().unwrap_or(0);
    let (posts, polls) = (calls(imp.post), calls(imp.poll));
    // callgrind must have seen exactly the calls the loop made: otherwise a
    // name did not match (nothing collected) or a call was inlined away.
    if posts != child.posts || polls != child.polls {
        return Err(format!(
            "callgrind saw {posts} calls of {} and {polls} of {}, the loop made {} and {}",
            imp.post, imp.poll, child.posts, child.polls
        ));
    }
    Ok(Measured {
        ir_total: file.ir_total,
        posts,
        polls,
        empty_polls: child.empty_polls,
        version: file.version,
    })
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

/// What [`parse`] reads from a callgrind output file.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct File {
    /// The `totals:` (else `summary:`) Ir: everything collected.
    pub ir_total: u64,
    /// Call counts per callee name (`cfn=` then `calls=` lines).
    pub calls: HashMap<String, u64>,
    pub version: String,
}

/// Reads a callgrind output file (format version 1, with or without name
/// compression: `fn=(id) name` defines an id, `fn=(id)` refers to it).
pub fn parse(text: &str) -> Result<File, String> {
    let mut names: HashMap<String, String> = HashMap::new();
    let mut file = File::default();
    let mut cfn: Option<String> = None;
    let (mut totals, mut summary) = (None, None);
    for line in text.lines() {
        if let Some(v) = line.strip_prefix("creator: ") {
            file.version = v.trim().trim_start_matches("callgrind-").to_string();
        } else if let Some(v) = line.strip_prefix("totals:") {
            totals = v.split_whitespace().next().and_then(|n| n.parse().ok());
        } else if let Some(v) = line.strip_prefix("summary:") {
            summary = v.split_whitespace().next().and_then(|n| n.parse().ok());
        } else if let Some(v) = line.strip_prefix("fn=") {
            resolve(&mut names, v);
        } else if let Some(v) = line.strip_prefix("cfn=") {
            cfn = Some(resolve(&mut names, v));
        } else if let Some(v) = line.strip_prefix("calls=") {
            let n: u64 = v
                .split_whitespace()
                .next()
                .and_then(|n| n.parse().ok())
                .ok_or_else(|| format!("callgrind file: unreadable line {line:?}"))?;
            let callee = cfn
                .take()
                .ok_or_else(|| format!("callgrind file: {line:?} without cfn="))?;
            *file.calls.entry(callee).or_default() += n;
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
