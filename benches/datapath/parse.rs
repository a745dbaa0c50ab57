//! Reading what the two tools print: our `perf`'s `@@PERF` line, and
//! perftest's sorted latency samples (`-H`) and bandwidth table row.
//! Tested on the host by `tests/bench_datapath_parse.rs` (a bench target
//! without the test harness runs no `#[test]`).

/// What one run measured.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Measured {
    /// Latency order statistics, in nanoseconds, of `n` samples.
    Latency {
        median: u64,
        p10: u64,
        p90: u64,
        n: usize,
    },
    /// Bandwidth in MiB/s (2^20 bytes per second, perftest's "MB/sec").
    Bandwidth { mib_per_s: f64 },
}

/// The value of `key=` among the words of `line`.
fn field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    line.split_whitespace()
        .find_map(|w| w.strip_prefix(key)?.strip_prefix('='))
}

/// Our client's `@@PERF side=client …` line.
pub fn ours(stdout: &str) -> Result<Measured, String> {
    let line = stdout
        .lines()
        .rev()
        .find(|l| l.starts_with("@@PERF ") && field(l, "side") == Some("client"))
        .ok_or("perf printed no `@@PERF side=client` line")?;
    if field(line, "status") == Some("error") {
        return Err(format!("perf failed: {line}"));
    }
    let num = |k: &str| -> Result<u64, String> {
        field(line, k)
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| format!("perf's line has no {k}: {line}"))
    };
    if let Some(v) = field(line, "mib_per_s") {
        let mib_per_s = v
            .parse()
            .map_err(|_| format!("perf's mib_per_s {v:?}: {line}"))?;
        return Ok(Measured::Bandwidth { mib_per_s });
    }
    Ok(Measured::Latency {
        median: num("median_ns")?,
        p10: num("p10_ns")?,
        p90: num("p90_ns")?,
        n: num("iters")? as usize,
    })
}

/// perftest's latency samples as `-H` prints them after `#, usec`: one
/// `index, microseconds` line each, sorted (its two largest left out).
pub fn perftest_samples(stdout: &str) -> Vec<f64> {
    let mut out = Vec::new();
    let mut inside = false;
    for line in stdout.lines() {
        let l = line.trim();
        if l == "#, usec" {
            inside = true;
            out.clear();
            continue;
        }
        if !inside {
            continue;
        }
        let sample = l
            .split_once(',')
            .filter(|(i, _)| i.trim().parse::<u64>().is_ok())
            .and_then(|(_, v)| v.trim().parse::<f64>().ok());
        match sample {
            Some(us) => out.push(us),
            None => inside = false,
        }
    }
    out
}

/// Order statistics (nearest rank) of `us` microsecond samples, in ns.
pub fn latency_of(mut us: Vec<f64>) -> Option<Measured> {
    if us.is_empty() {
        return None;
    }
    us.sort_by(f64::total_cmp);
    let at = |q: f64| (us[((us.len() - 1) as f64 * q).round() as usize] * 1000.0).round() as u64;
    Some(Measured::Latency {
        median: at(0.5),
        p10: at(0.1),
        p90: at(0.9),
        n: us.len(),
    })
}

/// perftest's client output: a latency test's `-H` samples, or the
/// bandwidth table's "BW average[MB/sec]" (the row after the header).
pub fn perftest(stdout: &str, latency: bool) -> Result<Measured, String> {
    if latency {
        return latency_of(perftest_samples(stdout))
            .ok_or_else(|| "perftest printed no `#, usec` samples (-H)".to_string());
    }
    let mut lines = stdout.lines();
    while let Some(l) = lines.next() {
        // "#bytes #iterations BW peak[MB/sec] BW average[MB/sec] MsgRate[Mpps]":
        // the value columns are bytes, iterations, peak, average, rate.
        if !l.contains("average[MB/sec]") {
            continue;
        }
        for row in lines.by_ref() {
            let v: Vec<&str> = row.split_whitespace().collect();
            if v.len() >= 4 && v[0].parse::<u64>().is_ok() {
                let mib_per_s = v[3]
                    .parse()
                    .map_err(|_| format!("perftest's average {:?}: {row}", v[3]))?;
                return Ok(Measured::Bandwidth { mib_per_s });
            }
        }
    }
    Err("perftest printed no bandwidth row".into())
}
