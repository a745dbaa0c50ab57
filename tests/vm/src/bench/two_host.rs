//! The two-host part of `cargo vm bench`: round trips across the two
//! guests of `cargo vm test`'s two-host plan (one vCPU each, rxe0 on eth0,
//! siw0 on eth1, each NIC a link of its own; tests/vm/README.md), ours
//! (`tools/pingpong.rs --cm`) beside perftest's `ib_send_lat` and
//! `ib_write_lat` (`-R`: connected by the rdma_cm, as ours is), on rxe0
//! and on siw0. B serves, A is the client; the host reads A's console.
//!
//! Each run is named `two_host_bench_<program>_<device>`; its figures are
//! what A printed between the run's `@@UVERBS-RUN` and `@@UVERBS-RESULT`
//! markers: pingpong's latency line (round trips), or perftest's summary
//! row (`t_typical`, its median, and `99% percentile`: half a round trip,
//! as perftest divides SEND and WRITE latencies by two).

use crate::guest::{GuestRun, Kind, PerHost};
use crate::markers::{self, RESULT, RUN};
use std::fmt::Write as _;

/// The prefix of the runs' names (`UVERBS_BENCH_ONLY=two_host` selects
/// them all).
pub const RUN_PREFIX: &str = "two_host_bench_";
/// Round trips per run, ours and perftest's.
pub const ITERS: usize = 300;
/// The message size of every run (pingpong's default).
pub const SIZE: usize = 64;
/// Each side's time limit per attempt in the guest (a run takes seconds,
/// 300 round trips of 53 ms at worst so far; a perftest pair that hangs
/// is killed at this).
pub const RUN_TIMEOUT_SECS: u32 = 60;
/// How often A starts perftest's client while it fails (one second
/// apart): it does not retry a connect B's server is not listening for
/// yet. Ours retries by itself (10 s).
pub const CLIENT_ATTEMPTS: u32 = 10;
/// How often B starts perftest's server while it fails: on siw0,
/// `ib_send_lat -R` once hung in its set-up exchange (the client's first
/// completion flushed) until the server was killed; A's next attempt then
/// meets a new server.
pub const SERVER_ATTEMPTS: u32 = 3;
/// The devices, in the report's order.
const DEVICES: [Kind; 2] = [Kind::Rxe, Kind::Siw];

/// What a run measures with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Program {
    /// `tools/pingpong.rs --cm`: SEND answered by a SEND, each side
    /// busy-polling its CQ.
    Pingpong,
    /// The same with `--wait event`: each side polls a while, then arms
    /// its CQ and sleeps on the completion channel.
    PingpongEvent,
    /// perftest's `ib_send_lat -R`: SEND answered by a SEND.
    SendLat,
    /// perftest's `ib_write_lat -R`: RDMA WRITE answered by a WRITE.
    WriteLat,
}

/// Every program, in the report's order.
const PROGRAMS: [Program; 4] = [
    Program::Pingpong,
    Program::PingpongEvent,
    Program::SendLat,
    Program::WriteLat,
];

impl Program {
    /// Its word in the run's name.
    fn key(self) -> &'static str {
        match self {
            Program::Pingpong => "pingpong",
            Program::PingpongEvent => "pingpong_event",
            Program::SendLat => "send_lat",
            Program::WriteLat => "write_lat",
        }
    }

    /// The report's name for it.
    fn label(self) -> &'static str {
        match self {
            Program::Pingpong => "uverbs `pingpong --cm`",
            Program::PingpongEvent => "uverbs `pingpong --cm --wait event`",
            Program::SendLat => "perftest `ib_send_lat -R`",
            Program::WriteLat => "perftest `ib_write_lat -R`",
        }
    }

    /// The exchange it times.
    fn exchange(self) -> &'static str {
        match self {
            Program::Pingpong | Program::PingpongEvent | Program::SendLat => "SEND / RECV",
            Program::WriteLat => "RDMA WRITE",
        }
    }

    /// True for perftest (half round trips, its table).
    fn is_perftest(self) -> bool {
        matches!(self, Program::SendLat | Program::WriteLat)
    }
}

/// The run of `program` on `device`'s link.
fn run_name(program: Program, device: Kind) -> String {
    format!("{RUN_PREFIX}{}_{}", program.key(), device.device())
}

/// The address placeholders of `device`'s link ([`PerHost`]).
fn placeholders(device: Kind) -> (&'static str, &'static str) {
    match device {
        Kind::Rxe => ("{local}", "{peer}"),
        Kind::Siw => ("{siw_local}", "{siw_peer}"),
    }
}

/// The guest runs: every program on rxe0, then on siw0.
pub fn runs() -> Vec<GuestRun> {
    let owned = |v: &[&str]| v.iter().map(|a| (*a).to_string()).collect::<Vec<_>>();
    let mut out = Vec::new();
    for device in DEVICES {
        let dev = device.device();
        let (local, peer) = placeholders(device);
        let (iters, size) = (ITERS.to_string(), SIZE.to_string());
        for program in PROGRAMS {
            let wait = match program {
                Program::PingpongEvent => "event",
                _ => "busy",
            };
            let (bin, a, b, expect_a) = match program {
                Program::Pingpong | Program::PingpongEvent => {
                    // A short WRITE stream (pingpong measures it too; this
                    // report does not show it).
                    let common = [
                        "--device",
                        dev,
                        "--iters",
                        &iters,
                        "--size",
                        &size,
                        "--write-size",
                        "4096",
                        "--wait",
                        wait,
                    ];
                    let mut a = owned(&["--cm", "--client", "--connect"]);
                    a.push(format!("{peer}:{{port}}"));
                    a.extend(owned(&common));
                    let mut b = owned(&["--cm", "--server", "--bind"]);
                    b.push(format!("{local}:{{port}}"));
                    b.extend(owned(&common));
                    (
                        "pingpong".to_string(),
                        a,
                        b,
                        owned(&[": latency: ", "server: verified"]),
                    )
                }
                Program::SendLat | Program::WriteLat => {
                    // -F: do not fail on the emulated CPU's frequency
                    // warnings; -R: the rdma_cm connects (siw needs it).
                    let b = owned(&[
                        "-d", dev, "-F", "-R", "-s", &size, "-n", &iters, "-p", "{port}",
                    ]);
                    let mut a = b.clone();
                    a.push(peer.to_string());
                    (
                        format!("/usr/bin/ib_{}", program.key()),
                        a,
                        b,
                        owned(&["t_typical"]),
                    )
                }
            };
            let attempts = if program.is_perftest() {
                [CLIENT_ATTEMPTS, SERVER_ATTEMPTS]
            } else {
                [1, 1]
            };
            out.push(GuestRun {
                name: run_name(program, device),
                bin,
                args: Vec::new(),
                timeout_secs: RUN_TIMEOUT_SECS,
                per_host: Some(PerHost {
                    args: [a, b],
                    expect: [expect_a, Vec::new()],
                    attempts,
                }),
                retry_once: false,
            });
        }
    }
    out
}

/// One run's outcome as A saw it.
#[derive(Debug, Clone, PartialEq)]
pub struct Measured {
    /// rxe0 or siw0.
    pub device: Kind,
    /// What measured.
    pub program: Program,
    /// A's exit status (`None`: no result marker).
    pub rc: Option<i32>,
    /// Median and 99th percentile as the program printed them, in µs
    /// (perftest: half round trips), if it printed them.
    pub printed: Option<(f64, f64)>,
}

impl Measured {
    /// Median and p99 round trip in µs.
    pub fn round_trip(&self) -> Option<(f64, f64)> {
        let f = if self.program.is_perftest() { 2.0 } else { 1.0 };
        self.printed.map(|(m, p)| (m * f, p * f))
    }
}

/// The number before ` µs` after `key` in `line`.
fn micros_after(line: &str, key: &str) -> Option<f64> {
    let rest = &line[line.find(key)? + key.len()..];
    rest.split_whitespace().next()?.parse().ok()
}

/// pingpong's latency line: `...: latency: N round trips of S B
/// SEND/RECV: median X µs, p99 Y µs`.
fn pingpong_figures(output: &[&str]) -> Option<(f64, f64)> {
    output.iter().rev().find_map(|l| {
        l.contains(": latency: ")
            .then(|| Some((micros_after(l, "median ")?, micros_after(l, "p99 ")?)))?
    })
}

/// perftest 4.5's latency summary: the row of numbers under the header
/// `#bytes #iterations t_min[usec] t_max[usec] t_typical[usec]
/// t_avg[usec] t_stdev[usec] 99% percentile[usec] 99.9% percentile[usec]`;
/// `t_typical` (the median) and the 99th percentile.
fn perftest_figures(output: &[&str]) -> Option<(f64, f64)> {
    let header = output.iter().rposition(|l| l.contains("t_typical"))?;
    output[header + 1..].iter().find_map(|l| {
        let v: Vec<f64> = l
            .split_whitespace()
            .map(|w| w.parse::<f64>())
            .collect::<Result<_, _>>()
            .ok()?;
        (v.len() >= 9).then(|| (v[4], v[7]))
    })
}

/// The runs' outcomes in A's console, in the report's order (a run not
/// in the console is left out).
pub fn parse(console_a: &str) -> Vec<Measured> {
    let lines: Vec<&str> = console_a.lines().collect();
    let mut out = Vec::new();
    for device in DEVICES {
        for program in PROGRAMS {
            let name = run_name(program, device);
            let is_run = |l: &str, marker: &str| {
                markers::find(l, marker).is_some_and(|w| {
                    markers::field(w, "bin") == Some(name.as_str())
                        && markers::field(w, "role") == Some("a")
                })
            };
            let Some(start) = lines.iter().rposition(|l| is_run(l, RUN)) else {
                continue;
            };
            let end = lines[start..]
                .iter()
                .position(|l| is_run(l, RESULT))
                .map(|i| start + i);
            let output = &lines[start + 1..end.unwrap_or(lines.len())];
            let rc = end.and_then(|e| {
                markers::field(markers::find(lines[e], RESULT)?, "rc")?
                    .parse()
                    .ok()
            });
            let printed = if program.is_perftest() {
                perftest_figures(output)
            } else {
                pingpong_figures(output)
            };
            out.push(Measured {
                device,
                program,
                rc,
                printed,
            });
        }
    }
    out
}

/// A number of µs with a thousands gap and one decimal: `52 596.0`.
fn micros(us: f64) -> String {
    let s = format!("{us:.1}");
    let (int, frac) = s.split_once('.').unwrap_or((&s, "0"));
    let mut grouped = String::new();
    for (i, c) in int.chars().enumerate() {
        if i > 0 && (int.len() - i) % 3 == 0 {
            grouped.push(' ');
        }
        grouped.push(c);
    }
    format!("{grouped}.{frac}")
}

/// The report's section: one row per run, ours and perftest side by side.
pub fn markdown(runs: &[Measured]) -> String {
    let mut s = String::from("\n## Two hosts: ours and perftest across two guests\n\n");
    let _ = writeln!(
        s,
        "After the single guest, `cargo vm bench` boots `cargo vm test`'s two \
         guests (one vCPU each; rxe0 on eth0, siw0 on eth1, each NIC a virtual \
         Ethernet link of its own to the peer's) and runs a client on host A \
         against a server on host B: {ITERS} round trips of {SIZE} B, connected \
         by the rdma_cm. perftest prints half a round trip (`t_typical`, its \
         median, and `99% percentile`); the table doubles it and shows what it \
         printed in the last column. Every side busy-polls its CQ but `--wait event`'s, which polls 200 times, then arms the CQ and sleeps on its completion channel.\n"
    );
    if runs.is_empty() {
        s.push_str("Not run (the two-host guests were not booted).\n");
        return s;
    }
    s.push_str(
        "| device | program | exchange | median round trip | p99 round trip | as printed |\n",
    );
    s.push_str("|---|---|---|---:|---:|---|\n");
    for r in runs {
        let (median, p99, printed) = match (r.round_trip(), r.printed) {
            (Some((m, p)), Some((pm, pp))) => {
                let how = if r.program.is_perftest() {
                    format!("t_typical {pm:.2} µs, 99% {pp:.2} µs (one way)")
                } else {
                    format!("median {pm:.1} µs, p99 {pp:.1} µs")
                };
                (
                    format!("{} µs", micros(m)),
                    format!("{} µs", micros(p)),
                    how,
                )
            }
            _ => {
                let why = match r.rc {
                    Some(rc) => format!("failed: no figures (exit status {rc})"),
                    None => "failed: no result (the run did not end)".into(),
                };
                ("—".into(), "—".into(), why)
            }
        };
        let _ = writeln!(
            s,
            "| {} | {} | {} | {median} | {p99} | {printed} |",
            r.device.device(),
            r.program.label(),
            r.program.exchange()
        );
    }
    s
}

/// The runs that failed, as `<name> (exit status ...)` for the summary.
pub fn failures(runs: &[Measured]) -> Vec<String> {
    runs.iter()
        .filter(|r| r.rc != Some(0) || r.printed.is_none())
        .map(|r| {
            format!(
                "{} (exit status {})",
                run_name(r.program, r.device),
                r.rc.map_or("missing".to_string(), |rc| rc.to_string())
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::markdown::assert_holds;
    use crate::guest::{two_host_run_all_script, Host, RunConfig, TWO_HOST_BASE_PORT};

    #[test]
    fn perftest_runs_b_serving_and_a_connecting_with_attempts() {
        let runs = runs();
        assert_eq!(runs.len(), 8);
        assert!(runs.iter().all(|r| crate::guest::is_two_host(&r.name)));
        let configs = [RunConfig {
            name: "bench",
            env: &[],
        }];
        let a = two_host_run_all_script(&configs, &runs, Host::A);
        let b = two_host_run_all_script(&configs, &runs, Host::B);
        // Run 6: ib_send_lat on siw0.
        let port = TWO_HOST_BASE_PORT + 6;
        assert!(b.contains(&format!(
            " /usr/bin/ib_send_lat -d siw0 -F -R -s 64 -n 300 -p {port} >"
        )));
        assert!(a.contains(&format!(
            " /usr/bin/ib_send_lat -d siw0 -F -R -s 64 -n 300 -p {port} 198.51.100.2 >"
        )));
        assert!(a.contains("[ $attempt -ge 10 ] && break"));
        assert!(b.contains("[ $attempt -ge 3 ] && break"));
        // Run 0: ours on rxe0.
        assert!(a.contains(&format!(
            "/tests/pingpong --cm --client --connect 192.0.2.2:{TWO_HOST_BASE_PORT} --device rxe0 --iters 300 --size 64 --write-size 4096 --wait busy >"
        )));
        assert!(b.contains(&format!(
            "/tests/pingpong --cm --server --bind 198.51.100.2:{} --device siw0 --iters 300 --size 64 --write-size 4096 --wait event\n",
            TWO_HOST_BASE_PORT + 5
        )));
    }

    #[test]
    fn figures_from_pingpong_and_perftest_output() {
        let console = "\
@@UVERBS-RUN config=bench bin=two_host_bench_pingpong_rxe0 role=a
pingpong rxe0 (cm) over ioctl: latency: 300 round trips of 64 B SEND/RECV: median 52596.0 µs, p99 64824.5 µs
@@UVERBS-RESULT config=bench bin=two_host_bench_pingpong_rxe0 role=a rc=0
@@UVERBS-RUN config=bench bin=two_host_bench_send_lat_rxe0 role=a
 #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] 
 64      300          20.10          90.00        25.50               26.00          3.00            40.25                  90.00   
@@UVERBS-RESULT config=bench bin=two_host_bench_send_lat_rxe0 role=a rc=0
@@UVERBS-RUN config=bench bin=two_host_bench_write_lat_rxe0 role=a
@@UVERBS-RESULT config=bench bin=two_host_bench_write_lat_rxe0 role=a rc=1
";
        let m = parse(console);
        assert_eq!(m.len(), 3);
        assert_eq!(m[0].round_trip(), Some((52596.0, 64824.5)));
        assert_eq!(m[1].printed, Some((25.5, 40.25)));
        assert_eq!(m[1].round_trip(), Some((51.0, 80.5)));
        assert_eq!((m[2].rc, m[2].printed), (Some(1), None));
        assert_eq!(
            failures(&m),
            ["two_host_bench_write_lat_rxe0 (exit status 1)"]
        );
        let md = markdown(&m);
        assert_holds(
            &md,
            &[
                "| rxe0 | uverbs `pingpong --cm` | SEND / RECV | 52 596.0 µs | 64 824.5 µs |",
                "| 51.0 µs | 80.5 µs | t_typical 25.50 µs, 99% 40.25 µs (one way) |",
                "failed: no figures (exit status 1)",
            ],
        );
    }
}
