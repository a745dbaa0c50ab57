//! The data-path bench's readers of perf's and perftest's output
//! (`benches/datapath/parse.rs`), on fixed text: host-only, no device.

#[path = "../benches/datapath/parse.rs"]
#[allow(dead_code)]
mod parse;

use parse::{ours, perftest, Measured};

#[test]
fn reads_perf_lines() {
    let out = "hello\n@@PERF side=server device=rxe0 test=write_lat\n\
               @@PERF side=client device=rxe0 conn=loopback test=write_lat size=2 iters=300 qd=1 inline=220 median_ns=1500 p10_ns=1200 p90_ns=2100 p99_ns=9 avg_ns=1 min_ns=1\n";
    assert_eq!(
        ours(out).unwrap(),
        Measured::Latency {
            median: 1500,
            p10: 1200,
            p90: 2100,
            n: 300
        }
    );
    let bw = "@@PERF side=client device=siw0 conn=cm test=write_bw size=65536 iters=100 qd=64 inline=0 bytes=6553600 elapsed_ns=1 mib_per_s=28.5 msg_per_s=456.0\n";
    assert_eq!(ours(bw).unwrap(), Measured::Bandwidth { mib_per_s: 28.5 });
    assert!(ours("@@PERF side=client test=x status=error error=\"boom\"\n").is_err());
    assert!(ours("nothing\n").is_err());
}

#[test]
fn reads_perftest_latency_samples() {
    let out = " #bytes #iterations ...\n#, usec\n1, 50.5\n2, 60\n3, 70.25\n4, 80\n5, 90\n \
               2       5          50.50          ...\n";
    let got = perftest(out, true).unwrap();
    assert_eq!(
        got,
        Measured::Latency {
            median: 70250,
            p10: 50500,
            p90: 90000,
            n: 5
        }
    );
    assert!(perftest("no samples\n", true).is_err());
}

#[test]
fn reads_perftest_bandwidth_row() {
    let out = "---------------------------------------------------------------------------------------\n \
               #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]\n \
               65536      1000             28.93              28.90              0.000462\n\
               ---------------------------------------------------------------------------------------\n";
    assert_eq!(
        perftest(out, false).unwrap(),
        Measured::Bandwidth { mib_per_s: 28.90 }
    );
    assert!(perftest("#bytes BW average[MB/sec]\n", false).is_err());
}
