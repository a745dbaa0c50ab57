//! Runs this binary's measured loop under callgrind and reads the counts
//! back from callgrind's output file (its own text format; no
//! callgrind_annotate, which is perl).

use std::collections::HashMap;
use std::path::Path;
use std::process::Command;

use crate::{Case, Counts, Setup, CHILD};

/// The API functions one implementation's loops call, by the names
/// callgrind gives them (demangled; `--toggle-collect` matches them whole,
/// so a closure or helper of the same prefix does not toggle). These are
/// the measured functions: change them here when the API's names change.
pub struct Symbols {
    pub post_send: &'static str,
    pub post_recv: &'static str,
    pub poll: &'static str,
}

impl Symbols {
    /// The functions callgrind collects inside for `case`: `post_recv`
    /// only where the case measures it (in case 4 the receiver's posts
    /// before the loop are not measured).
    pub fn measured(&self, case: Case) -> Vec<&'static str> {
        if case.measures_post_recv() {
            vec![self.post_recv, self.post_send, self.poll]
        } else {
            vec![self.post_send, self.poll]
        }
    }
}

/// One implementation: its name on the `--impl` option and in the result
/// lines, and its measured functions per driver (`""`: any driver).
pub struct Impl {
    pub name: &'static str,
    pub symbols: &'static [(&'static str, Symbols)],
}

impl Impl {
    /// The measured functions on a device of `driver` (`rxe`, `siw`).
    pub fn symbols(&self, driver: &str) -> Result<&'static Symbols, String> {
        self.symbols
            .iter()
            .find(|(d, _)| d.is_empty() || *d == driver)
            .map(|(_, s)| s)
            .ok_or_else(|| format!("{}: no measured functions for driver {driver}", self.name))
    }
}

pub const IMPLS: &[Impl] = &[
    Impl {
        name: "ours",
        symbols: &[(
            "",
            Symbols {
                post_send: "uverbs::qp::post_send_locked",
                post_recv: "uverbs::qp::post_recv_locked",
                poll: "uverbs::cq::fast_poll",
            },
        )],
    },
    Impl {
        name: "ours-exclusive",
        symbols: &[(
            "",
            Symbols {
                post_send: "uverbs::qp::post_send_unlocked",
                post_recv: "uverbs::qp::post_recv_unlocked",
                poll: "uverbs::cq::fast_poll",
            },
        )],
    },
    Impl {
        name: "libibverbs",
        symbols: &[
            (
                "rxe",
                Symbols {
                    post_send: "rxe_post_send",
                    post_recv: "rxe_post_recv",
                    poll: "rxe_poll_cq",
                },
            ),
            (
                "siw",
                Symbols {
                    post_send: "siw_post_send",
                    post_recv: "siw_post_recv",
                    poll: "siw_poll_cq",
                },
            ),
        ],
    },
];

/// What one callgrind run counted.
#[derive(Debug, PartialEq, Eq)]
pub struct Measured {
    /// Instructions executed inside the measured functions.
    pub ir_total: u64,
    /// Calls callgrind saw of the post, poll and post_recv functions.
    pub posts: u64,
    pub polls: u64,
    pub post_recvs: u64,
    /// The polls that found nothing (the child's own count).
    pub empty_polls: u64,
    /// callgrind's version, from the file's `creator:` line.
    pub version: String,
    /// Self Ir per function, the largest first.
    pub top: Vec<(String, u64)>,
    /// The post, poll and post_recv functions' calls, each inclusive.
    pub post: Calls,
    pub poll: Calls,
    pub post_recv: Calls,
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

/// Runs `imp`'s loop of `case` on `device` under callgrind and reads its
/// file.
pub fn run(
    valgrind: &str,
    imp: &Impl,
    case: Case,
    device: &str,
    setup: &Setup,
    iters: usize,
) -> Result<Measured, String> {
    let symbols = imp.symbols(setup.driver)?;
    let (iters_s, mtu) = (iters.to_string(), (setup.mtu as u8).to_string());
    let mut args = vec![
        "--impl",
        imp.name,
        "--case",
        case.op(),
        "--device",
        device,
        "--iters",
        &iters_s,
        "--mtu",
        &mtu,
    ];
    if let Some(cm) = &setup.cm {
        args.extend(["--cm", cm.as_str()]);
    }
    let (file, stdout) = run_child_with_output(
        valgrind,
        &format!("{}-{device}-{}", imp.name, case.op()),
        &symbols.measured(case),
        &args,
    )?;
    let child = stdout
        .lines()
        .find_map(|l| l.strip_prefix(CHILD))
        .and_then(parse_child)
        .ok_or_else(|| format!("the measured run printed no {CHILD} line: {stdout}"))?;
    let calls = |f: &str| file.calls.get(f).copied().unwrap_or_default();
    let (post, poll) = (calls(symbols.post_send), calls(symbols.poll));
    let post_recv = if case.measures_post_recv() {
        calls(symbols.post_recv)
    } else {
        Calls::default()
    };
    // callgrind must have seen exactly the calls the loop made: otherwise a
    // name did not match (nothing collected) or a call was inlined away.
    for (name, seen, made) in [
        (symbols.post_send, post.count, child.posts),
        (symbols.poll, poll.count, child.polls),
        (symbols.post_recv, post_recv.count, child.post_recvs),
    ] {
        if seen != made {
            return Err(format!(
                "callgrind saw {seen} calls of {name}, the loop made {made}"
            ));
        }
    }
    let mut top: Vec<(String, u64)> = file.self_ir.into_iter().filter(|(_, ir)| *ir > 0).collect();
    top.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    Ok(Measured {
        top,
        post,
        poll,
        post_recv,
        ir_total: file.ir_total,
        posts: post.count,
        polls: poll.count,
        post_recvs: post_recv.count,
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
        return Err(format!(
            "{valgrind} exited {}: {}",
            out.status,
            stderr_tail(&stderr)
        ));
    }
    let text =
        std::fs::read_to_string(&out_file).map_err(|e| format!("reading {out_file}: {e}"))?;
    let file = parse(&text)?;
    Ok((file, String::from_utf8_lossy(&out.stdout).into_owned()))
}

/// The last lines of a failed child's stderr, its own (what valgrind
/// writes starts with `==pid==`: its summary at exit would push the
/// child's message out), or valgrind's if the child wrote none.
fn stderr_tail(stderr: &str) -> String {
    let own: Vec<&str> = stderr.lines().filter(|l| !l.starts_with("==")).collect();
    let lines: Vec<&str> = if own.is_empty() {
        stderr.lines().collect()
    } else {
        own
    };
    lines[lines.len().saturating_sub(6)..].join(" | ")
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
        post_recvs: field(words, "post_recvs").unwrap_or(0),
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
