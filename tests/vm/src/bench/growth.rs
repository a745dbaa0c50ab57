//! The growth section of docs/benchmarks.md: benches/growth's `growth`
//! lines (one control operation timed with N live objects of its kind,
//! ours and libibverbs) and `growth_limit` lines (how many QPs one context
//! got before the device refused one), as three tables.

use super::markdown::section;
use super::results::nan;
use super::units::{distinct, ratio_name, time_name};
use serde::Deserialize;
use std::fmt::Write as _;
use std::path::Path;
use std::process::Command;

/// One `growth` line: an operation's time with `live` objects of its kind.
#[derive(Debug, Clone, Deserialize)]
pub struct Line {
    pub device: String,
    /// `ours` or `libibverbs`.
    #[serde(rename = "impl")]
    pub imp: String,
    /// Fork safety: `off` or `on` (ours only).
    #[serde(default)]
    pub fork: String,
    /// `reg_mr`, `rereg_access`, `dereg_mr`, `create_qp` or `destroy_qp`.
    pub op: String,
    /// The objects live while it runs, the measured one included.
    pub live: u64,
    /// The median of the single calls (the line's percentiles and sample
    /// count are not shown).
    #[serde(default = "nan")]
    pub median_ns: f64,
    /// A rereg's path: `inplace`, `replaced` or `mixed`.
    #[serde(default)]
    pub path: Option<String>,
    #[serde(default)]
    pub error: Option<String>,
}

/// One `growth_limit` line: QPs of one size created in one context until
/// the device refused one (or `cap` stood).
#[derive(Debug, Clone, Deserialize)]
pub struct Limit {
    pub device: String,
    #[serde(rename = "impl")]
    pub imp: String,
    pub max_send_wr: u32,
    pub max_recv_wr: u32,
    pub cap: u64,
    #[serde(default)]
    pub created: Option<u64>,
    /// The refusal's errno; none when the cap was reached.
    #[serde(default)]
    pub errno: Option<i32>,
    /// One more QP in a second context: `ok` or `errno N`.
    #[serde(default)]
    pub other_context: Option<String>,
    /// One more QP once one of the first context's was destroyed.
    #[serde(default)]
    pub after_destroy: Option<String>,
    #[serde(default)]
    pub vmalloc_kib_before: Option<u64>,
    #[serde(default)]
    pub vmalloc_kib_at_limit: Option<u64>,
    #[serde(default)]
    pub error: Option<String>,
}

/// The host's callgrind counts of the code whose cost could grow with the
/// objects a program holds: `tools/routing-ir.sh` and `tools/fork-ir.sh`.
#[derive(Debug, Clone, PartialEq)]
pub struct HostCounts {
    /// `valgrind --version`.
    pub valgrind: String,
    /// (owners on the CQ, completions routed, Ir per completion).
    pub routing: Vec<(u64, u64, f64)>,
    /// (live ranges as the script names them, scenario, Ir per mark, Ir per unmark).
    pub fork: Vec<(String, String, f64, f64)>,
}

/// Runs `tools/<script>` in `workspace` and returns its stdout.
fn script(workspace: &Path, name: &str) -> Result<String, String> {
    let out = Command::new("bash")
        .arg(workspace.join("tools").join(name))
        .current_dir(workspace)
        .output()
        .map_err(|e| format!("tools/{name}: {e}"))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        let tail: Vec<&str> = err.lines().rev().take(5).collect();
        return Err(format!(
            "tools/{name} failed ({}): {}",
            out.status,
            tail.into_iter().rev().collect::<Vec<_>>().join(" / ")
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The rows of `tools/routing-ir.sh`'s table: `owners completions Ir`.
pub fn parse_routing(table: &str) -> Result<Vec<(u64, u64, f64)>, String> {
    let rows: Result<Vec<_>, String> = table
        .lines()
        .skip(1)
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            match f[..] {
                [o, c, ir] => match (o.parse(), c.parse(), ir.parse()) {
                    (Ok(o), Ok(c), Ok(ir)) => Ok((o, c, ir)),
                    _ => Err(format!("tools/routing-ir.sh: unreadable row {l:?}")),
                },
                _ => Err(format!("tools/routing-ir.sh: unreadable row {l:?}")),
            }
        })
        .collect();
    rows.and_then(|r| match r.is_empty() {
        true => Err("tools/routing-ir.sh printed no rows".into()),
        false => Ok(r),
    })
}

/// The rows of `tools/fork-ir.sh`'s table: `N scenario mark unmark`.
pub fn parse_fork(table: &str) -> Result<Vec<(String, String, f64, f64)>, String> {
    let rows: Result<Vec<_>, String> = table
        .lines()
        .skip(1)
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            match f[..] {
                [n, sc, m, u] => match (m.parse(), u.parse()) {
                    (Ok(m), Ok(u)) => Ok((n.to_string(), sc.to_string(), m, u)),
                    _ => Err(format!("tools/fork-ir.sh: unreadable row {l:?}")),
                },
                _ => Err(format!("tools/fork-ir.sh: unreadable row {l:?}")),
            }
        })
        .collect();
    rows.and_then(|r| match r.is_empty() {
        true => Err("tools/fork-ir.sh printed no rows".into()),
        false => Ok(r),
    })
}

/// Counts both on this host with its valgrind (a release build of the
/// library's unit tests, then one callgrind run per N; about a second each).
pub fn host_counts(workspace: &Path) -> Result<HostCounts, String> {
    let version = Command::new("valgrind")
        .arg("--version")
        .output()
        .map_err(|e| format!("no valgrind on the host ({e}); install it and rerun, or run tools/routing-ir.sh and tools/fork-ir.sh where it is"))?;
    let valgrind = String::from_utf8_lossy(&version.stdout).trim().to_string();
    Ok(HostCounts {
        valgrind,
        routing: parse_routing(&script(workspace, "routing-ir.sh")?)?,
        fork: parse_fork(&script(workspace, "fork-ir.sh")?)?,
    })
}

/// The host subsection: `None` when the counts were not taken (a
/// regeneration from a saved log).
fn host_markdown(s: &mut String, host: &Result<HostCounts, String>) {
    s.push_str(
        "### On the host: CQ routing and the fork tracker\n\nUser-space instructions counted by \
         callgrind on the host that ran `cargo vm bench` (no device; release build of the \
         library's unit tests), as docs/growth.md describes them. Routing \
         (`tools/routing-ir.sh`): each round every one of N owned QPs sharing one CQ completes \
         one request, then every owner polls; Ir per completion is the measured poll's inclusive \
         count ÷ the completions routed. Fork tracker (`tools/fork-ir.sh`): one mark \
         (`dontfork_range`) and one unmark with N live ranges and an advisor that does nothing, \
         1,000 pairs per scenario (*gap*: a one-page range between two of N disjoint ones; \
         *live*: a second reference on part of one; *overlap*: a five-page range over N \
         overlapping three-page ones).\n\n",
    );
    let h = match host {
        Ok(h) => h,
        Err(e) => {
            let _ = writeln!(s, "Not counted: {e}.\n");
            return;
        }
    };
    let _ = writeln!(s, "{}.\n", h.valgrind);
    s.push_str("| owners on the CQ |");
    for (o, _, _) in &h.routing {
        let _ = write!(s, " {} |", count_name(*o));
    }
    s.push_str("\n|---|");
    s.push_str(&"---:|".repeat(h.routing.len()));
    s.push_str("\n| Ir per completion |");
    for (_, _, ir) in &h.routing {
        let _ = write!(s, " {ir:.1} |");
    }
    s.push_str(
        "\n\n| live ranges | scenario | Ir per mark | Ir per unmark |\n|---:|---|---:|---:|\n",
    );
    for (n, sc, m, u) in &h.fork {
        let n = n
            .replace("100k", "100,000")
            .replace("10k", "10,000")
            .replace("1k", "1,000");
        let _ = writeln!(s, "| {n} | {sc} | {m:.1} | {u:.1} |");
    }
    s.push('\n');
}

/// `12 (ENOMEM)` for the errnos a QP refusal can carry, else the number.
pub fn errno_name(e: i32) -> String {
    let name = match e {
        12 => "ENOMEM",
        22 => "EINVAL",
        28 => "ENOSPC",
        95 => "EOPNOTSUPP",
        24 => "EMFILE",
        23 => "ENFILE",
        _ => return e.to_string(),
    };
    format!("{e} ({name})")
}

/// `10,000`.
fn count_name(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// The implementation as a row names it: `ours`, `ours, fork safety on`,
/// `libibverbs`.
fn who(l: &Line) -> String {
    match (l.imp.as_str(), l.fork.as_str()) {
        ("ours", "on") => "ours, fork safety on".into(),
        (imp, _) => imp.into(),
    }
}

/// One table of `lines` (those of `ops`): a row per device, operation and
/// implementation, a column per N, and the last N's median ÷ the first's.
fn table(s: &mut String, lines: &[&Line], ops: &[&str]) {
    let lines: Vec<&Line> = lines
        .iter()
        .copied()
        .filter(|l| ops.contains(&l.op.as_str()))
        .collect();
    let mut lives = distinct(lines.iter().map(|l| l.live));
    lives.sort_unstable();
    s.push_str("| device | operation | implementation |");
    for n in &lives {
        let _ = write!(s, " N = {} |", count_name(*n));
    }
    s.push_str(" largest N ÷ N = 1 |\n|---|---|---|");
    s.push_str(&"---:|".repeat(lives.len() + 1));
    s.push('\n');
    let rows = distinct(
        lines
            .iter()
            .map(|l| (l.device.as_str(), l.op.as_str(), who(l))),
    );
    for (device, op, imp) in rows {
        let of = |n: u64| {
            lines
                .iter()
                .find(|l| l.device == device && l.op == op && who(l) == imp && l.live == n)
        };
        let path = lines
            .iter()
            .find(|l| l.device == device && l.op == op && who(l) == imp)
            .and_then(|l| l.path.as_deref())
            .map(|p| format!(" ({p})"))
            .unwrap_or_default();
        let _ = write!(s, "| {device} | `{op}`{path} | {imp} |");
        let mut measured = Vec::new();
        for &n in &lives {
            let cell = match of(n) {
                Some(Line { error: Some(e), .. }) => format!("failed: {e}"),
                Some(l) => {
                    measured.push(l.median_ns);
                    time_name(l.median_ns)
                }
                None => "—".into(),
            };
            let _ = write!(s, " {cell} |");
        }
        // This row's largest N against its N = 1 (siw's QPs stop at 64).
        let growth = match (of(1), measured.last()) {
            (Some(a), Some(&last)) if a.error.is_none() && measured.len() > 1 => {
                ratio_name(last / a.median_ns)
            }
            _ => "—".into(),
        };
        let _ = writeln!(s, " {growth} |");
    }
    s.push('\n');
}

/// The growth section, from its `##` heading; `None` without any line.
pub fn markdown(
    lines: &[Line],
    limits: &[Limit],
    host: Option<&Result<HostCounts, String>>,
) -> Option<String> {
    if lines.is_empty() && limits.is_empty() && host.is_none() {
        return None;
    }
    let all: Vec<&Line> = lines.iter().collect();
    let mut s = section(
        &[()],
        "## Growth: one operation with N live objects",
        "benches/growth, in the same guest: the time of one control operation while N objects \
         of its kind are live in the same context (the measured one included), median of single \
         calls (101 for MRs, 50 for QPs, after one warm-up), ours over the default transport \
         beside libibverbs. Times are wall-clock under the VM's TCG, so they compare the two \
         implementations in the same run, not with a host. The routing of completions with N \
         owners on one CQ and the fork tracker's mark with N ranges have no device part: they \
         are counted on the host with callgrind (the last subsection; how they came to be flat: \
         [docs/growth.md](growth.md)).\n\n",
    )?;
    if !lines.is_empty() {
        s.push_str(
            "### Memory regions\n\nWith N − 1 one-page regions registered (every other page of \
             one buffer, so no two touch), `reg_mr` of one more page, an ACCESS rereg of it and its \
             `dereg_mr`. libibverbs has no rereg on these devices (its rxe and siw providers \
             lack `rereg_mr`); siw has none in the kernel, so ours replaces the region there (the \
             path in brackets). With fork safety on, each registration also marks its range \
             `MADV_DONTFORK` and in the fork tracker (and the dereg unmarks it).\n\n",
        );
        table(&mut s, &all, &["reg_mr", "rereg_access", "dereg_mr"]);
        s.push_str(
            "### Queue pairs\n\nWith N − 1 RC QPs (16 send and 16 receive requests, one SGE) \
             on one CQ, `create_qp` and `destroy_qp` of one more. libibverbs' siw provider fails \
             the 72nd QP of a context in this guest (below; ours maps it), so siw's largest N is \
             64 for both.\n\n",
        );
        table(&mut s, &all, &["create_qp", "destroy_qp"]);
    }
    if !limits.is_empty() {
        s.push_str(
            "### How many QPs one context gets\n\nRC QPs of one size created in one context, on \
             one CQ, until the device refuses one (or the bench's cap stands); then one more in a \
             second context of the same process, and one more in the first once one of its QPs \
             is destroyed. `VmallocUsed` is the guest kernel's, from `/proc/meminfo`, before the \
             first QP and with the QPs live. siw's kernel creates libibverbs' refused QP and \
             answers success, but one of its rings' mmap keys is 0x90000, the value siw's ABI \
             also uses for \"no mapping\": libibverbs' siw provider takes it for that and \
             destroys the QP again, setting no errno on that path (the column shows what `errno` \
             held from an earlier call); ours maps the key (Linux 6.x answers a successful create \
             with real keys only) and goes on. Why, and which QP it hits for which ring sizes: \
             [docs/growth.md](growth.md#siw-and-the-72nd-qp).\n\n\
             | device | implementation | send × receive requests | QPs created | refusal | second context | after one destroyed | VmallocUsed before → with the QPs live |\n\
             |---|---|---:|---:|---|---|---|---|\n",
        );
        for l in limits {
            let kib = |k: Option<u64>| k.map_or("?".into(), |k| format!("{} KiB", count_name(k)));
            if let Some(e) = &l.error {
                let _ = writeln!(
                    s,
                    "| {} | {} | {} × {} | failed: {e} | | | | |",
                    l.device, l.imp, l.max_send_wr, l.max_recv_wr
                );
                continue;
            }
            let created = l.created.unwrap_or(0);
            let refusal = match l.errno {
                Some(e) => format!("QP {}: errno {}", created + 1, errno_name(e)),
                None => format!("none up to the cap of {}", l.cap),
            };
            let _ = writeln!(
                s,
                "| {} | {} | {} × {} | {} | {refusal} | {} | {} | {} → {} |",
                l.device,
                l.imp,
                l.max_send_wr,
                l.max_recv_wr,
                count_name(created),
                l.other_context.as_deref().unwrap_or("—"),
                l.after_destroy.as_deref().unwrap_or("—"),
                kib(l.vmalloc_kib_before),
                kib(l.vmalloc_kib_at_limit),
            );
        }
        s.push('\n');
    }
    if let Some(host) = host {
        host_markdown(&mut s, host);
    }
    Some(s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::markdown::assert_holds;
    use crate::bench::results::read_all;

    const CONSOLE: &str = r#"@@RESULT {"kind":"growth","device":"rxe0","impl":"ours","fork":"off","op":"reg_mr","live":1,"median_ns":10000,"p10_ns":9000,"p90_ns":12000,"n":101}
@@RESULT {"kind":"growth","device":"rxe0","impl":"ours","fork":"off","op":"rereg_access","live":1,"path":"inplace","median_ns":5000,"p10_ns":4000,"p90_ns":6000,"n":101}
@@RESULT {"kind":"growth","device":"rxe0","impl":"ours","fork":"off","op":"reg_mr","live":10000,"median_ns":12500,"p10_ns":9000,"p90_ns":13000,"n":101}
@@RESULT {"kind":"growth","device":"rxe0","impl":"ours","fork":"on","op":"reg_mr","live":1,"median_ns":20000,"p10_ns":9000,"p90_ns":21000,"n":101}
@@RESULT {"kind":"growth","device":"rxe0","impl":"libibverbs","fork":"off","op":"reg_mr","live":1,"median_ns":11000,"p10_ns":9000,"p90_ns":12000,"n":101}
@@RESULT {"kind":"growth","device":"rxe0","impl":"libibverbs","fork":"off","op":"reg_mr","live":10000,"error":"libibverbs: ibv_reg_mr: errno 12"}
@@RESULT {"kind":"growth","device":"siw0","impl":"ours","fork":"off","op":"create_qp","live":64,"median_ns":150000,"p10_ns":1,"p90_ns":2,"n":50}
@@RESULT {"kind":"growth_limit","device":"siw0","impl":"ours","max_send_wr":16,"max_recv_wr":16,"cap":300,"created":71,"errno":12,"other_context":"ok","after_destroy":"ok","vmalloc_kib_before":1000,"vmalloc_kib_at_limit":20000}
@@RESULT {"kind":"growth_limit","device":"siw0","impl":"libibverbs","max_send_wr":16,"max_recv_wr":16,"cap":300,"created":71,"errno":22,"other_context":"errno 12","after_destroy":"ok"}
@@RESULT {"kind":"growth_limit","device":"rxe0","impl":"ours","max_send_wr":1,"max_recv_wr":1,"cap":300,"created":300,"errno":null,"other_context":"not tried","after_destroy":"not tried"}
"#;

    #[test]
    fn growth_lines_become_tables() {
        let r = read_all(CONSOLE);
        assert!(markdown(&[], &[], None).is_none());
        let md = markdown(&r.growth, &r.growth_limits, None).expect("a section");
        assert_holds(
            &md,
            &[
                "| device | operation | implementation | N = 1 | N = 10,000 | largest N ÷ N = 1 |",
                "| rxe0 | `reg_mr` | ours | 10.0 µs | 12.5 µs | 1.25× |",
                "| rxe0 | `rereg_access` (inplace) | ours | 5.00 µs | — | — |",
                "| rxe0 | `reg_mr` | ours, fork safety on | 20.0 µs | — | — |",
                "| rxe0 | `reg_mr` | libibverbs | 11.0 µs | failed: libibverbs: ibv_reg_mr: errno 12 | — |",
                "| siw0 | `create_qp` | ours | 150 µs |",
                "| siw0 | ours | 16 × 16 | 71 | QP 72: errno 12 (ENOMEM) | ok | ok | 1,000 KiB → 20,000 KiB |",
                "| siw0 | libibverbs | 16 × 16 | 71 | QP 72: errno 22 (EINVAL) | errno 12 | ok | ? → ? |",
                "| rxe0 | ours | 1 × 1 | 300 | none up to the cap of 300 |",
            ],
        );
        // The QP table has only the QP's N.
        assert!(md.contains("| device | operation | implementation | N = 64 | largest N ÷ N = 1 |"));
    }

    #[test]
    fn host_tables_are_read_and_shown() {
        let routing = "owners    completions  Ir/completion\n1               20000          148.0\n10000          100000          332.0\n";
        let fork = "N      scenario      Ir/mark    Ir/unmark\n1k     gap             602.5        653.8\n100k   overlap         926.6       1037.6\n";
        let host = HostCounts {
            valgrind: "valgrind-3.19.0".into(),
            routing: parse_routing(routing).expect("routing rows"),
            fork: parse_fork(fork).expect("fork rows"),
        };
        assert_eq!(
            host.routing,
            vec![(1, 20_000, 148.0), (10_000, 100_000, 332.0)]
        );
        assert!(parse_routing("owners completions Ir\n1 x 2\n").is_err());
        assert!(parse_fork("header only\n").is_err());
        let md = markdown(&[], &[], Some(&Ok(host))).expect("a section");
        assert_holds(
            &md,
            &[
                "valgrind-3.19.0.",
                "| owners on the CQ | 1 | 10,000 |",
                "| Ir per completion | 148.0 | 332.0 |",
                "| 1,000 | gap | 602.5 | 653.8 |",
                "| 100,000 | overlap | 926.6 | 1037.6 |",
            ],
        );
        let failed =
            markdown(&[], &[], Some(&Err("no valgrind on the host".into()))).expect("a section");
        assert_holds(&failed, &["Not counted: no valgrind on the host."]);
    }

    #[test]
    fn counts_have_separators() {
        assert_eq!(count_name(1_234_567), "1,234,567");
        assert_eq!(count_name(10_000), "10,000");
        assert_eq!(count_name(71), "71");
        assert_eq!(errno_name(12), "12 (ENOMEM)");
        assert_eq!(errno_name(5), "5");
    }
}
