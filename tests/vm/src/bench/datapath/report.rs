//! The data-path section of docs/benchmarks.md and its console headline.

use super::{Cell, DataPath, Key, Value, Verdict, AGREE};
use crate::bench::units::{ratio_name, size_name, time_name};
use std::fmt::Write as _;

/// The tests in report order, with what they measure.
const TESTS: [(&str, &str); 5] = [
    (
        "write_lat",
        "RDMA WRITE latency (ping-pong, half the round trip)",
    ),
    ("send_lat", "SEND latency (ping-pong, half the round trip)"),
    (
        "read_lat",
        "RDMA READ latency (one READ, the whole round trip)",
    ),
    ("write_bw", "RDMA WRITE bandwidth"),
    ("send_bw", "SEND bandwidth"),
];

/// The issue's targets: latency ours ÷ perftest at most this at every size...
pub const LAT_TARGET: f64 = 0.95;
/// ... and bandwidth ours ÷ perftest at least this.
pub const BW_TARGET: f64 = 1.0;

fn value_text(v: Option<Value>) -> String {
    match v {
        Some(Value::Latency { median, p10, p90 }) => format!(
            "{} ({}–{})",
            time_name(median),
            time_name(p10),
            time_name(p90)
        ),
        Some(Value::Bandwidth(b)) => format!("{b:.1} MiB/s"),
        None => "—".into(),
    }
}

/// Each pass's median ratio with its rounds' spread.
fn passes_text(cell: &Cell) -> String {
    let parts: Vec<String> = cell
        .passes
        .iter()
        .map(|(n, p)| match p.ratio() {
            Some(r) => {
                let lo = p.ratios.iter().copied().fold(f64::MAX, f64::min);
                let hi = p.ratios.iter().copied().fold(f64::MIN, f64::max);
                format!(
                    "{n}: {} ({}–{})",
                    ratio_name(r),
                    ratio_name(lo),
                    ratio_name(hi)
                )
            }
            None => format!("{n}: —"),
        })
        .collect();
    parts.join("; ")
}

fn verdict_text(cell: &Cell) -> String {
    match cell.verdict() {
        Verdict::Measured(r) => format!("**{}**", ratio_name(r)),
        Verdict::Noisy(r) => {
            let v: Vec<String> = r.iter().map(|&x| ratio_name(x)).collect();
            format!("noisy ({})", v.join(" / "))
        }
        Verdict::Missing => "failed".into(),
    }
}

/// Whether a measured ratio meets the target of its kind.
fn meets(key: &Key, r: f64) -> bool {
    if key.is_latency() {
        r <= LAT_TARGET
    } else {
        r >= BW_TARGET
    }
}

/// The section, starting with its `##` heading.
pub fn markdown(dp: &DataPath) -> String {
    let mut s = String::new();
    let info = |k: &str| dp.info(k).unwrap_or("?").to_string();
    let _ = writeln!(
        s,
        "## Data path: ours (`tools/perf.rs`) against perftest 4.5\n"
    );
    let _ = writeln!(
        s,
        "Both tools run in the same guest with the same parameters: message size, iterations \
         (`-n`), queue depth (`-t`, completions every min(depth, 100) as perftest's `-Q`), and the \
         same inline threshold ({} B for the latency tests: perftest 4.5 inlines nothing on devices it \
         does not recognise, rxe and siw among them, whatever `-I` says). Each run \
         is a fresh server and client process pair. Per cell the two tools run {} times, alternating \
         which goes first (A B, B A, …), and the ratio ours ÷ perftest is taken per round; the whole \
         set runs {} times (passes). A ratio is reported in bold as measured only where every pass's \
         median ratio is within {:.0} % of the others; otherwise it is *noisy*, with each pass's \
         value. Latency cells give the median and p10–p90 of one run's samples (perftest's own \
         samples, `-H`), taken as the median over all runs. Ratios below 1 mean ours is faster for \
         latency; above 1, more bandwidth. Latency iterations per run: {}; bandwidth: about {} \
         MiB per run (32 to 1000 messages).\n",
        dp.cells
            .iter()
            .find(|(k, _)| k.test == "write_lat")
            .map_or("?".into(), |(_, c)| c.inline.to_string()),
        info("rounds"),
        info("passes"),
        AGREE * 100.0,
        info("lat_iters"),
        dp.info("bw_bytes")
            .and_then(|b| b.parse::<u64>().ok())
            .map_or("?".into(), |b| (b >> 20).to_string()),
    );
    headline_table(&mut s, dp);
    for (device, conn) in dp.targets() {
        let how = if conn == "loopback" {
            "RoCE loopback by hand (GID 0), the out-of-band exchange over TCP"
        } else {
            "connected by the rdma_cm (perftest `-R`)"
        };
        let _ = writeln!(s, "### {device}, {conn}: {how}\n");
        for (test, what) in TESTS {
            let cells: Vec<(&Key, &Cell)> = dp
                .cells
                .iter()
                .filter(|(k, _)| k.device == device && k.conn == conn && k.test == test)
                .collect();
            if cells.is_empty() {
                continue;
            }
            let _ = writeln!(s, "**{test}**: {what}\n");
            let latency = cells[0].0.is_latency();
            if latency {
                s.push_str("| size | ours median (p10–p90) | perftest median (p10–p90) | ours ÷ perftest per pass (rounds' spread) | reported |\n");
                s.push_str("|---:|---|---|---|---|\n");
            } else {
                s.push_str("| size | depth | ours | perftest | ours ÷ perftest per pass (rounds' spread) | reported |\n");
                s.push_str("|---:|---:|---|---|---|---|\n");
            }
            for (k, c) in cells {
                let depth = if latency {
                    String::new()
                } else {
                    format!(" {} |", k.qd)
                };
                let _ = writeln!(
                    s,
                    "| {} |{depth} {} | {} | {} | {} |",
                    size_name(k.size),
                    value_text(c.summary(true)),
                    value_text(c.summary(false)),
                    passes_text(c),
                    verdict_text(c)
                );
            }
            s.push('\n');
        }
    }
    failures(&mut s, dp);
    s
}

/// Per target and kind: the range of measured ratios, how many cells met
/// the target, and how many were noisy or failed.
fn headline_table(s: &mut String, dp: &DataPath) {
    let _ = writeln!(
        s,
        "**Headline** (targets: latency ours ÷ perftest ≤ {LAT_TARGET} at every size, bandwidth ≥ {BW_TARGET}):\n"
    );
    s.push_str("| target | kind | measured ratios (min–max) | cells meeting the target | noisy | failed |\n");
    s.push_str("|---|---|---|---|---:|---:|\n");
    for row in headline_rows(dp) {
        let _ = writeln!(s, "{row}");
    }
    s.push('\n');
}

/// The headline table's rows (also printed on the console).
pub fn headline_rows(dp: &DataPath) -> Vec<String> {
    let mut rows = Vec::new();
    for (device, conn) in dp.targets() {
        for latency in [true, false] {
            let cells: Vec<(&Key, &Cell)> = dp
                .cells
                .iter()
                .filter(|(k, _)| k.device == device && k.conn == conn && k.is_latency() == latency)
                .collect();
            if cells.is_empty() {
                continue;
            }
            let (mut measured, mut met, mut noisy, mut failed) = (Vec::new(), 0, 0, 0);
            for (k, c) in &cells {
                match c.verdict() {
                    Verdict::Measured(r) => {
                        measured.push(r);
                        met += usize::from(meets(k, r));
                    }
                    Verdict::Noisy(_) => noisy += 1,
                    Verdict::Missing => failed += 1,
                }
            }
            let range = if measured.is_empty() {
                "—".to_string()
            } else {
                let lo = measured.iter().copied().fold(f64::MAX, f64::min);
                let hi = measured.iter().copied().fold(f64::MIN, f64::max);
                format!("{}–{}", ratio_name(lo), ratio_name(hi))
            };
            rows.push(format!(
                "| {device} {conn} | {} | {range} | {met} of {} measured ({} cells) | {noisy} | {failed} |",
                if latency { "latency" } else { "bandwidth" },
                measured.len(),
                cells.len()
            ));
        }
    }
    rows
}

/// The runs that failed once and were run again, and the runs that
/// failed, each listed with its cell (the first 40).
fn failures(s: &mut String, dp: &DataPath) {
    let retried = runs(dp, |c| &c.retried);
    if !retried.is_empty() {
        let _ = writeln!(
            s,
            "**Runs that failed once and were run again** ({}; the second run's numbers stand):\n",
            retried.len()
        );
        list(s, &retried);
        s.push('\n');
    }
    let errors = runs(dp, |c| &c.errors);
    if errors.is_empty() {
        return;
    }
    s.push_str("**Failed runs** (as the runner reported them):\n\n");
    list(s, &errors);
    if errors.len() > LISTED {
        let _ = writeln!(s, "- … and {} more", errors.len() - LISTED);
    }
    s.push('\n');
}

/// How many runs [`failures`] lists of each kind.
const LISTED: usize = 40;

/// The runs `of` each cell names (its retried or failed runs), with
/// their cell.
fn runs(dp: &DataPath, of: fn(&Cell) -> &Vec<String>) -> Vec<(&Key, &String)> {
    dp.cells
        .iter()
        .flat_map(|(k, c)| of(c).iter().map(move |r| (k, r)))
        .collect()
}

/// The first [`LISTED`] of `runs`, one item each: the cell, then the run.
fn list(s: &mut String, runs: &[(&Key, &String)]) {
    for (k, r) in runs.iter().take(LISTED) {
        let _ = writeln!(
            s,
            "- {} {} {} {} depth {}: {r}",
            k.device,
            k.conn,
            k.test,
            size_name(k.size),
            k.qd
        );
    }
}

#[cfg(test)]
mod tests {
    use super::super::parse;
    use super::*;
    use crate::bench::markdown::assert_holds;

    #[test]
    fn sections_tables_and_verdicts() {
        let mut lines = vec![
            r#"@@RESULT {"kind":"datapath_info","rounds":2,"passes":2,"lat_iters":300,"bw_bytes":33554432,"cells":2}"#.to_string(),
        ];
        for pass in 1..=2 {
            for round in 1..=2 {
                for (imp, m) in [("ours", 90), ("perftest", 100)] {
                    let head = format!(
                        r#"@@RESULT {{"kind":"datapath","pass":{pass},"round":{round},"impl":"{imp}","device":"siw0","conn":"cm""#
                    );
                    lines.push(format!(r#"{head},"test":"write_lat","size":2,"qd":1,"inline":220,"iters":300,"median_ns":{m}000,"p10_ns":{m}000,"p90_ns":{m}000,"n":300}}"#));
                    lines.push(format!(r#"{head},"test":"write_bw","size":65536,"qd":64,"inline":0,"iters":512,"mib_per_s":{m}.0}}"#));
                }
            }
        }
        let dp = parse(&crate::bench::results::read(&lines.join("\n")));
        let md = markdown(&dp);
        assert_holds(
            &md,
            &[
                "### siw0, cm: connected by the rdma_cm",
                "| 2 B | 90.0 µs (90.0 µs–90.0 µs) | 100 µs (100 µs–100 µs) | 1: 0.90× (0.90×–0.90×); 2: 0.90× (0.90×–0.90×) | **0.90×** |",
                "| 64 KiB | 64 | 90.0 MiB/s | 100.0 MiB/s |",
            ],
        );
        let rows = headline_rows(&dp);
        assert_eq!(rows.len(), 2);
        assert!(
            rows[0].contains(
                "| siw0 cm | latency | 0.90×–0.90× | 1 of 1 measured (1 cells) | 0 | 0 |"
            ),
            "{rows:?}"
        );
        assert!(
            rows[1].contains("| bandwidth | 0.90×–0.90× | 0 of 1 measured"),
            "{rows:?}"
        );
        assert!(!md.contains("Failed runs"));
    }
}
