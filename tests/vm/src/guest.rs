//! What happens inside the VM: the run-configuration tables and the
//! generated `/init` shell script (run by busybox as PID 1).
//!
//! The scripts print the machine-readable markers of [`crate::markers`] on
//! the console, which the host parses (see [`crate::report`]).

use crate::markers::{BOOTED, DONE, READY, RESULT, RETRY, RUN, SETUP_FAILED};
use crate::perf_test::Test as PerfTest;
use crate::setup::Module;
use crate::util::sh_quote;

/// A way to run every binary: a name and the environment it gets.
#[derive(Debug, Clone, Copy)]
pub struct RunConfig {
    /// Short name, shown in markers and the summary.
    pub name: &'static str,
    /// Environment variables set for the binary.
    pub env: &'static [(&'static str, &'static str)],
}

/// `cargo vm test`: every test binary runs once per row. Add rows here to
/// test more configurations.
pub const TEST_CONFIGS: &[RunConfig] = &[
    RunConfig {
        name: "ioctl",
        env: &[
            ("UVERBS_REQUIRE_DEVICES", "rxe,siw"),
            ("UVERBS_TRANSPORT", "ioctl"),
        ],
    },
    RunConfig {
        name: "write",
        env: &[
            ("UVERBS_REQUIRE_DEVICES", "rxe,siw"),
            ("UVERBS_TRANSPORT", "write"),
        ],
    },
    // Fork safety forced on (every registration madvises), with the
    // transport left to the probe.
    RunConfig {
        name: "fork-forced",
        env: &[
            ("UVERBS_REQUIRE_DEVICES", "rxe,siw"),
            ("UVERBS_FORK_SAFE", "force"),
        ],
    },
];

/// `cargo vm demo`: the example runs once per row.
pub const DEMO_CONFIGS: &[RunConfig] = &[
    RunConfig {
        name: "ioctl",
        env: &[("UVERBS_TRANSPORT", "ioctl")],
    },
    RunConfig {
        name: "write",
        env: &[("UVERBS_TRANSPORT", "write")],
    },
];

/// One program the guest runs under every configuration: a binary of
/// `/tests` with its arguments, reported under its own name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GuestRun {
    /// The name in the markers and the report's table.
    pub name: String,
    /// The binary, `/tests/<bin>` in the guest, or a program of the guest
    /// named by its absolute path (`cargo vm bench`'s perftest).
    pub bin: String,
    /// Its arguments.
    pub args: Vec<String>,
    /// Killed after this long (and counted as failed).
    pub timeout_secs: u32,
    /// In the two-host run: arguments per host instead of [`args`](Self::args),
    /// and what each host's output must show.
    pub per_host: Option<PerHost>,
    /// Run once more after a failure (in the two-host run by both guests
    /// when either failed; the report shows both attempts). `cargo vm
    /// test` sets it: under TCG on a loaded
    /// 2-core host a timing-sensitive step fails about once in a few
    /// hundred runs, and one such failure would hide every other result.
    pub retry_once: bool,
}

/// A two-host run's arguments and expected output, per host (index 0 for
/// A, 1 for B). Arguments may name the run's addresses and port, replaced
/// per host: `{local}`, `{peer}` (rxe0's link), `{siw_local}`,
/// `{siw_peer}` (siw0's link) and `{port}` (the run's
/// [`two_host_env::PORT`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PerHost {
    /// A's arguments and B's.
    pub args: [Vec<String>; 2],
    /// Text each host's output must contain (each string somewhere in it)
    /// for the run to pass there, on top of exit status 0.
    pub expect: [Vec<String>; 2],
    /// How many times each host runs its command while it fails, one
    /// second apart (1: once). For a client that does not retry a refused
    /// connect itself while its server, on the other host, is not
    /// listening yet (perftest); only the last attempt's output counts.
    pub attempts: [u32; 2],
}

impl PerHost {
    /// `host`'s arguments with the placeholders replaced.
    fn args_for(&self, host: Host, port: u16) -> Vec<String> {
        let i = host.index();
        self.args[i]
            .iter()
            .map(|a| {
                a.replace("{siw_local}", host.siw_addr())
                    .replace("{siw_peer}", host.peer().siw_addr())
                    .replace("{local}", host.addr())
                    .replace("{peer}", host.peer().addr())
                    .replace("{port}", &port.to_string())
            })
            .collect()
    }
}

impl GuestRun {
    /// The binary `bin` without arguments, reported as `bin`.
    pub fn plain(bin: &str) -> Self {
        GuestRun {
            name: bin.into(),
            bin: bin.into(),
            args: Vec::new(),
            timeout_secs: PER_BINARY_TIMEOUT_SECS,
            per_host: None,
            retry_once: false,
        }
    }

    /// This run, retried once after a failure ([`retry_once`](Self::retry_once)).
    pub fn retried_once(mut self) -> Self {
        self.retry_once = true;
        self
    }

    /// This run with another time limit (`cargo vm bench`'s long runs).
    pub fn with_timeout(mut self, secs: u32) -> Self {
        self.timeout_secs = secs;
        self
    }

    /// The names of `runs`, space-separated (for a progress line).
    pub fn names(runs: &[GuestRun]) -> String {
        runs.iter()
            .map(|r| r.name.as_str())
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// The `cargo vm demo` runs: [`DEMO_RUNS`], then the short examples
    /// on each device ([`GuestRun::short_examples`]).
    pub fn demo() -> Vec<GuestRun> {
        DEMO_RUNS
            .iter()
            .map(|(name, bin, args)| GuestRun {
                name: (*name).into(),
                bin: (*bin).into(),
                args: args.iter().map(|a| (*a).into()).collect(),
                timeout_secs: PER_BINARY_TIMEOUT_SECS,
                per_host: None,
                retry_once: false,
            })
            .chain(GuestRun::short_examples())
            .collect()
    }

    /// The [`SHORT_EXAMPLES`] on rxe0 and on siw0, each told its device
    /// (`--device`) and, if it takes one, the device's address in the
    /// single guest (`--addr`), named `example_<example>_<device>`.
    pub fn short_examples() -> Vec<GuestRun> {
        SHORT_EXAMPLES
            .iter()
            .flat_map(|&(example, takes_addr)| {
                LINK_KINDS.map(|kind| {
                    let mut args = vec!["--device".to_string(), kind.device().into()];
                    if takes_addr {
                        args.extend(["--addr".into(), Net::Dummy.addr(kind)]);
                    }
                    GuestRun {
                        name: format!("{SHORT_EXAMPLE_PREFIX}{example}_{}", kind.device()),
                        bin: example.into(),
                        args,
                        timeout_secs: PER_BINARY_TIMEOUT_SECS,
                        per_host: None,
                        retry_once: false,
                    }
                })
            })
            .collect()
    }

    /// The example runs of the two-host plan ([`TWO_HOST_EXAMPLE_RUNS`]).
    pub fn two_host_examples() -> Vec<GuestRun> {
        let owned = |v: &[&str]| v.iter().map(|a| (*a).to_string()).collect::<Vec<_>>();
        TWO_HOST_EXAMPLE_RUNS
            .iter()
            .map(|r| GuestRun {
                name: r.name.into(),
                bin: r.bin.into(),
                args: Vec::new(),
                timeout_secs: PER_BINARY_TIMEOUT_SECS,
                per_host: Some(PerHost {
                    args: [owned(r.args[0]), owned(r.args[1])],
                    expect: [owned(r.expect[0]), owned(r.expect[1])],
                    attempts: [1, 1],
                }),
                retry_once: false,
            })
            .collect()
    }
}

/// An example the two-host plan runs on both guests at once, with
/// arguments and expected output per host ([`PerHost`]).
pub struct TwoHostExample {
    /// The run's name (`two_host_...`: `UVERBS_VM_ONLY=two_host` selects it).
    pub name: &'static str,
    /// The example (`examples/<bin>.rs`, built statically).
    pub bin: &'static str,
    /// A's arguments and B's, with [`PerHost`]'s placeholders.
    pub args: [&'static [&'static str]; 2],
    /// What A's output and B's must contain.
    pub expect: [&'static [&'static str]; 2],
}

/// The examples of the two-host plan, each under every [`TEST_CONFIGS`]
/// row after the `two_host_*` binaries: `pingpong --cm` across the guests,
/// B the server listening on its own address of the device's link, A the
/// client connecting to it (retrying while B is not listening yet), once
/// on rxe0 (eth0) and once on siw0 (eth1). Each passes when both exit 0,
/// A printed its latency and bandwidth lines with the server's verdict
/// `verified` and B its end line.
pub const TWO_HOST_EXAMPLE_RUNS: &[TwoHostExample] = &[
    TwoHostExample {
        name: "two_host_pingpong_rxe",
        bin: "pingpong",
        args: [
            &[
                "--cm",
                "--client",
                "--connect",
                "{peer}:{port}",
                "--device",
                "rxe0",
                "--iters",
                "200",
            ],
            &[
                "--cm",
                "--server",
                "--bind",
                "{local}:{port}",
                "--device",
                "rxe0",
                "--iters",
                "200",
            ],
        ],
        expect: [
            &[
                "pingpong rxe0 (cm) over ",
                ": latency: 200 round trips",
                ": bandwidth: 200 RDMA WRITEs",
                "server: verified",
            ],
            &[
                "pingpong server (cm): rxe0 connected from",
                "200 pings answered; the WRITE area was verified; disconnected",
            ],
        ],
    },
    TwoHostExample {
        name: "two_host_pingpong_siw",
        bin: "pingpong",
        args: [
            &[
                "--cm",
                "--client",
                "--connect",
                "{siw_peer}:{port}",
                "--device",
                "siw0",
                "--iters",
                "200",
            ],
            &[
                "--cm",
                "--server",
                "--bind",
                "{siw_local}:{port}",
                "--device",
                "siw0",
                "--iters",
                "200",
            ],
        ],
        expect: [
            &[
                "pingpong siw0 (cm) over ",
                ": latency: 200 round trips",
                ": bandwidth: 200 RDMA WRITEs",
                "server: verified",
            ],
            &[
                "pingpong server (cm): siw0 connected from",
                "200 pings answered; the WRITE area was verified; disconnected",
            ],
        ],
    },
];

/// The tool `cargo vm test` runs against rdma-core's C programs
/// (`tools/c_peers.rs`; the programs come from [`crate::peer::C_PEERS`]).
pub const C_PEERS_TOOL: &str = "c_peers";

/// The programs the C-peer runs need in `/tests`: [`C_PEERS_TOOL`],
/// the `pingpong` example, which it runs against `ibv_rc_pingpong`, and
/// the `perf` tool, which it runs against perftest.
pub const C_PEERS_PROGRAMS: &[&str] = &[C_PEERS_TOOL, "pingpong", "perf"];

/// How long one C-peer pairing may take in the guest (the tool bounds
/// each of its waits at 30 s; under TCG `ibv_rc_pingpong`'s 1000 round
/// trips of 4 KiB take seconds).
pub const C_PEER_TIMEOUT_SECS: u32 = 180;

/// The C-peer pairings of the single guest besides perftest's
/// ([`perftest_pairings`]), (run name, the tool's pairing, device): a Rust
/// client against librdmacm's `rdma_server` and `rdma_client` against a
/// Rust server on rxe0 and on siw0, and `ibv_rc_pingpong` as server
/// against `pingpong --client` and as client against `pingpong --server`
/// on rxe0 (not on siw0: an iWARP QP reaches RTS only through the cm, and
/// ibv_rc_pingpong connects by hand). The run's name says which C program
/// is the peer (`_server`: the C program serves); the pairing may carry
/// arguments of its own.
pub const C_PEER_RUNS: &[(&str, &str, Kind)] = &[
    ("c_peer_rdma_server_rxe0", "rdma_server", Kind::Rxe),
    ("c_peer_rdma_client_rxe0", "rdma_client", Kind::Rxe),
    ("c_peer_rdma_server_siw0", "rdma_server", Kind::Siw),
    ("c_peer_rdma_client_siw0", "rdma_client", Kind::Siw),
    (
        "c_peer_rc_pingpong_server_rxe0",
        "rc_pingpong_server",
        Kind::Rxe,
    ),
    (
        "c_peer_rc_pingpong_client_rxe0",
        "rc_pingpong_client",
        Kind::Rxe,
    ),
];

/// The iterations of each perftest pairing (`-n`; the size is the tool's
/// default, 4096 B): few, for CI's time, yet enough that a lost message
/// or a miscounted ending stalls the run.
pub const PERFTEST_ITERS: u32 = 200;

/// perftest's pairings with the `perf` tool: every test the tool offers
/// (`tools/perf/test_kind.rs`, [`PerfTest::ALL`]: `ib_write_lat`,
/// `ib_send_lat`, `ib_read_lat`, `ib_write_bw`, `ib_send_bw`), in both
/// roles (`_server`: perftest serves, `perf --client` connects; `_client`
/// the other way round), on rxe0 (by hand over TCP) and on siw0
/// (perftest's `-R`, through the rdma_cm), [`PERFTEST_ITERS`] each:
/// (run name `c_peer_perftest_<test>_<role>_<device>`, the tool's
/// pairing, device).
pub fn perftest_pairings() -> Vec<(String, String, Kind)> {
    let mut runs = Vec::new();
    for kind in [Kind::Rxe, Kind::Siw] {
        for test in PerfTest::ALL {
            for role in ["server", "client"] {
                runs.push((
                    format!("c_peer_perftest_{}_{role}_{}", test.name(), kind.device()),
                    format!(
                        "perftest_{role} --test {} --iters {PERFTEST_ITERS}",
                        test.name()
                    ),
                    kind,
                ));
            }
        }
    }
    runs
}

impl GuestRun {
    /// The single guest's C-peer runs ([`C_PEER_RUNS`]): the tool with
    /// its pairing, the device and the device's address in that guest,
    /// retried once like the test binaries.
    pub fn c_peers() -> Vec<GuestRun> {
        C_PEER_RUNS
            .iter()
            .map(|(name, pairing, kind)| (name.to_string(), pairing.to_string(), *kind))
            .chain(perftest_pairings())
            .map(|(name, pairing, kind)| GuestRun {
                name,
                bin: C_PEERS_TOOL.into(),
                args: pairing
                    .split_whitespace()
                    .map(String::from)
                    .chain([
                        "--device".into(),
                        kind.device().into(),
                        "--addr".into(),
                        Net::Dummy.addr(kind),
                    ])
                    .collect(),
                timeout_secs: C_PEER_TIMEOUT_SECS,
                per_host: None,
                retry_once: true,
            })
            .collect()
    }
}

/// The short examples a user copies (`examples/<name>.rs`), run on rxe0
/// and siw0 by `cargo vm demo` and `cargo vm test` (so CI runs them):
/// (example, whether it takes the device's address, `--addr`; the ones
/// that connect two QPs through the cm do).
pub const SHORT_EXAMPLES: &[(&str, bool)] = &[
    ("devinfo", false),
    ("loopback", true),
    ("owned", true),
    ("events", true),
    ("rereg", false),
    ("multicast", true),
    ("hwcheck", true),
    ("read", true),
    ("tokio_read", true),
];

/// The names of the [`SHORT_EXAMPLES`]' runs start with this:
/// `UVERBS_VM_ONLY=example_` selects them all (and no test binary).
pub const SHORT_EXAMPLE_PREFIX: &str = "example_";

/// The examples the single guest runs in `cargo vm test`, (run name,
/// example, device kind, extra arguments): `tokio_pingpong` (the async
/// layer over the cm, server and client in one process) on rxe0 and siw0,
/// sleeping on the completion channel and busy polling. The
/// [`SHORT_EXAMPLES`] follow them ([`GuestRun::examples`]).
pub const EXAMPLE_RUNS: &[(&str, &str, Kind, &[&str])] = &[
    ("tokio_pingpong_rxe0", "tokio_pingpong", Kind::Rxe, &[]),
    ("tokio_pingpong_siw0", "tokio_pingpong", Kind::Siw, &[]),
    (
        "tokio_pingpong_busy_rxe0",
        "tokio_pingpong",
        Kind::Rxe,
        &["--busy-poll", "200"],
    ),
    (
        "tokio_pingpong_busy_siw0",
        "tokio_pingpong",
        Kind::Siw,
        &["--busy-poll", "200"],
    ),
];

impl GuestRun {
    /// The single guest's example runs ([`EXAMPLE_RUNS`], each on its
    /// device's address, then [`GuestRun::short_examples`]), retried once
    /// like the test binaries.
    pub fn examples() -> Vec<GuestRun> {
        EXAMPLE_RUNS
            .iter()
            .map(|(name, example, kind, extra)| {
                let mut args = vec!["--addr".to_string(), Net::Dummy.addr(*kind)];
                args.extend(extra.iter().map(|a| a.to_string()));
                GuestRun {
                    name: (*name).into(),
                    bin: (*example).into(),
                    args,
                    timeout_secs: PER_BINARY_TIMEOUT_SECS,
                    per_host: None,
                    retry_once: false,
                }
            })
            .chain(GuestRun::short_examples())
            .map(GuestRun::retried_once)
            .collect()
    }
}

/// A binary's name is its run without arguments.
impl From<&str> for GuestRun {
    fn from(bin: &str) -> Self {
        GuestRun::plain(bin)
    }
}

/// `cargo vm demo`: (name, example or tool, arguments), each run under
/// every [`DEMO_CONFIGS`] row, then the [`SHORT_EXAMPLES`] on each device.
/// `rereg_tour` re-registers every kind of change strict and replaced on
/// every device and proves each with a WRITE. `pingpong_cm` connects with the rdma_cm over
/// 192.0.2.1 (rxe0). `syscalls` runs the syscalls tool's probe under
/// `strace` and fails unless `post_recv` and `poll_cq` make no system call
/// and `post_send` exactly one `write()`. `perf_selftest` runs every test
/// of the perftest-like tool once, small, on rxe0 by hand and through the
/// cm (192.0.2.1) and on siw0 through the cm (198.51.100.1).
pub const DEMO_RUNS: &[(&str, &str, &[&str])] = &[
    ("rereg_tour", "rereg_tour", &[]),
    ("pingpong", "pingpong", &[]),
    ("pingpong_cm", "pingpong", &["--cm"]),
    ("syscalls", "syscalls", &["--iters", "1000"]),
    ("perf_selftest", "perf", &["--self-test"]),
];

/// The soft-RDMA links created in the guest: (link name, rdma link type).
/// Each sits on a netdev of its own with an IPv4 address of its own
/// ([`Net::netdev`], [`Net::addr`]): the kernel gives a cm id the first
/// device whose port has the id's source address, so two devices on one
/// netdev would leave the second unreachable through the rdma_cm.
pub const LINKS: &[(&str, &str)] = &[("rxe0", "rxe"), ("siw0", "siw")];

/// A soft-RDMA device type of [`LINKS`], as the guest's netdevs and
/// addresses are laid out per device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// rxe0 (RoCE v2): dummy0 / eth0, 192.0.2.0/24.
    Rxe,
    /// siw0 (iWARP): dummy1 / eth1, 198.51.100.0/24.
    Siw,
}

impl Kind {
    /// By `rdma link` type.
    fn of(kind: &str) -> Kind {
        match kind {
            "siw" => Kind::Siw,
            _ => Kind::Rxe,
        }
    }

    /// The device's name in [`LINKS`].
    pub fn device(self) -> &'static str {
        match self {
            Kind::Rxe => "rxe0",
            Kind::Siw => "siw0",
        }
    }

    /// The /24 of this device's addresses (both are documentation ranges
    /// that exist only inside the guests).
    fn net(self) -> &'static str {
        match self {
            Kind::Rxe => "192.0.2",
            Kind::Siw => "198.51.100",
        }
    }
}

/// The test binaries of the two-host run are the ones whose names start
/// with this (`tests/two_host_*.rs`); they run only there, and every other
/// binary only in the single guest.
pub const TWO_HOST_PREFIX: &str = "two_host_";

/// Whether `bin` runs in the two-host run (and not in the single guest).
pub fn is_two_host(bin: &str) -> bool {
    bin.starts_with(TWO_HOST_PREFIX)
}

/// The two-host run's guests, joined by one virtual Ethernet link (a
/// virtio NIC each, `eth0`, addresses from the documentation range
/// 192.0.2.0/24 that exist only on that link).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Host {
    /// Listens: its qemu listens for the link, its binaries for the peer.
    A,
    /// Connects to A.
    B,
}

impl Host {
    /// Both, in start order.
    pub const BOTH: [Host; 2] = [Host::A, Host::B];

    /// The role a binary is told (`UVERBS_HOST_ROLE`) and the markers carry.
    pub fn role(self) -> &'static str {
        match self {
            Host::A => "a",
            Host::B => "b",
        }
    }

    /// The guest's IPv4 address on the link of rxe0 (eth0).
    pub fn addr(self) -> &'static str {
        match self {
            Host::A => "192.0.2.1",
            Host::B => "192.0.2.2",
        }
    }

    /// The guest's IPv4 address on the link of siw0 (eth1).
    pub fn siw_addr(self) -> &'static str {
        match self {
            Host::A => "198.51.100.1",
            Host::B => "198.51.100.2",
        }
    }

    /// The last octet of both addresses.
    fn octet(self) -> u8 {
        match self {
            Host::A => 1,
            Host::B => 2,
        }
    }

    /// 0 for A, 1 for B: where its entries are in per-host pairs.
    pub fn index(self) -> usize {
        match self {
            Host::A => 0,
            Host::B => 1,
        }
    }

    /// The other guest.
    pub fn peer(self) -> Host {
        match self {
            Host::A => Host::B,
            Host::B => Host::A,
        }
    }

    /// The MAC address of the NIC under `kind`'s device (qemu gives every
    /// NIC the same one otherwise).
    pub fn mac(self, kind: Kind) -> String {
        let link = match kind {
            Kind::Rxe => 2,
            Kind::Siw => 3,
        };
        format!("52:54:00:00:{link:02x}:{:02x}", self.octet())
    }
}

/// The prefix length of the link's addresses.
pub const LINK_PREFIX_LEN: u8 = 24;
/// The NIC under rxe0 in a two-host guest (no udev renames it; the init
/// script checks its MAC).
pub const LINK_NIC: &str = "eth0";
/// The NIC under siw0 in a two-host guest.
pub const SIW_LINK_NIC: &str = "eth1";
/// The two-host guests' NICs, in qemu's (and the guest's) order.
pub const LINK_KINDS: [Kind; 2] = [Kind::Rxe, Kind::Siw];
/// How many one-second pings a two-host guest sends to its peer before its
/// set-up fails (the peer boots at the same time, give or take seconds).
pub const PEER_PINGS: u32 = 90;
/// The TCP port a two-host binary's run uses to meet its peer is this plus
/// the run's index in the plan: a run never meets another run's peer.
pub const TWO_HOST_BASE_PORT: u16 = 7470;
/// The ports where the hosts exchange their exit statuses after each
/// attempt of a run start here ([`exchange_port`]); far enough above
/// [`TWO_HOST_BASE_PORT`] for any plan.
pub const TWO_HOST_EXCHANGE_BASE_PORT: u16 = 7700;
/// How long a host waits for its peer's exit status: longer than one run
/// may take ([`PER_BINARY_TIMEOUT_SECS`], then it is killed), so the hosts
/// start every run together however long the slower one took. Without
/// that, a run that hangs on one host (killed at its limit) while the
/// other's failed at once leaves the hosts a run apart for good: each
/// later run waits for a peer that is at another run, and fails (the
/// likeliest reading of a CI run on Linux 6.1: a siw READ stalled, then
/// 12 of 15 runs failed, rxe's too).
pub const EXCHANGE_WAIT_SECS: u32 = PER_BINARY_TIMEOUT_SECS + 60;

/// The environment a two-host binary gets on top of its configuration's;
/// the test binaries read the same names (`tests/two_host_*.rs`).
pub mod two_host_env {
    /// `a` or `b` ([`super::Host::role`]).
    pub const ROLE: &str = "UVERBS_HOST_ROLE";
    /// This guest's address on rxe0's link (eth0).
    pub const LOCAL_ADDR: &str = "UVERBS_LOCAL_ADDR";
    /// The peer's address on rxe0's link.
    pub const PEER_ADDR: &str = "UVERBS_PEER_ADDR";
    /// This guest's address on siw0's link (eth1).
    pub const SIW_LOCAL_ADDR: &str = "UVERBS_SIW_LOCAL_ADDR";
    /// The peer's address on siw0's link.
    pub const SIW_PEER_ADDR: &str = "UVERBS_SIW_PEER_ADDR";
    /// The TCP port of this run (A listens on it, B connects to it).
    pub const PORT: &str = "UVERBS_TWO_HOST_PORT";
    /// `<config>/<run name>`: both sides check that they run the same thing.
    pub const RUN: &str = "UVERBS_TWO_HOST_RUN";
}

/// Where a guest's RDMA devices sit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Net {
    /// The single guest: no NIC; rxe0 on dummy0 (192.0.2.1), siw0 on
    /// dummy1 (198.51.100.1).
    Dummy,
    /// One of the two-host guests: rxe0 on eth0, siw0 on eth1, each NIC
    /// a link of its own to the peer's.
    Link(Host),
}

impl Net {
    /// The netdev under `kind`'s device.
    pub fn netdev(self, kind: Kind) -> &'static str {
        match (self, kind) {
            (Net::Dummy, Kind::Rxe) => "dummy0",
            (Net::Dummy, Kind::Siw) => "dummy1",
            (Net::Link(_), Kind::Rxe) => LINK_NIC,
            (Net::Link(_), Kind::Siw) => SIW_LINK_NIC,
        }
    }

    /// This guest's IPv4 address on that netdev.
    pub fn addr(self, kind: Kind) -> String {
        let octet = match self {
            Net::Dummy => 1,
            Net::Link(h) => h.octet(),
        };
        format!("{}.{octet}", kind.net())
    }
}

/// Where binaries live inside the guest.
pub const GUEST_BIN_DIR: &str = "tests";
/// Where modules live inside the guest.
pub const GUEST_MODULE_DIR: &str = "lib/modules";

/// What the guest does once its devices are up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Run every binary under every configuration, then power off.
    Run,
    /// Start an interactive shell on the console; power off when it exits.
    Shell,
}

/// Where the output of a run with expected output ([`PerHost::expect`])
/// is kept in the guest to be searched.
pub const RUN_OUTPUT: &str = "/tmp/run-output";

/// How long one binary may run in the guest before it is killed (and
/// counted as failed), so that one hung test cannot use up qemu's timeout
/// for all the runs after it; a [`GuestRun`] may set another.
pub const PER_BINARY_TIMEOUT_SECS: u32 = 600;

/// The `/run-all` script: every run under every configuration, each
/// under its time limit ([`PER_BINARY_TIMEOUT_SECS`] unless the run says
/// otherwise) and followed by its result marker.
pub fn run_all_script(configs: &[RunConfig], runs: &[GuestRun]) -> String {
    run_all(configs, runs, None)
}

/// The `/run-all` script of `host` in the two-host run: [`run_all_script`]
/// with the role's environment ([`two_host_env`]) added to every run, and
/// `role=<a|b>` in the markers. Both guests run the same plan in the same
/// order, so run `i` meets its peer on port [`TWO_HOST_BASE_PORT`]` + i`.
pub fn two_host_run_all_script(configs: &[RunConfig], runs: &[GuestRun], host: Host) -> String {
    run_all(configs, runs, Some(host))
}

fn run_all(configs: &[RunConfig], runs: &[GuestRun], host: Option<Host>) -> String {
    let mut s = String::from("#!/bin/sh\n# Generated by uverbs-vm: runs every binary under every configuration.\ncd /tmp\n");
    if let Some(h) = host {
        s.push_str(&exchange_function(h));
    }
    let mut index: u16 = 0;
    for c in configs {
        for r in runs {
            let mut env: Vec<String> = c
                .env
                .iter()
                .map(|(k, v)| format!("{k}={}", sh_quote(v)))
                .collect();
            let port = TWO_HOST_BASE_PORT + index;
            let (args, expect, attempts) = match (host, &r.per_host) {
                (Some(h), Some(p)) => (
                    p.args_for(h, port),
                    p.expect[h.index()].clone(),
                    p.attempts[h.index()].max(1),
                ),
                _ => (r.args.clone(), Vec::new(), 1),
            };
            let args: String = args.iter().map(|a| format!(" {}", sh_quote(a))).collect();
            let mut marker = format!("config={} bin={}", sh_quote(c.name), sh_quote(&r.name));
            if let Some(h) = host {
                use two_host_env as e;
                let run = format!("{}/{}", c.name, r.name);
                env.extend([
                    format!("{}={}", e::ROLE, h.role()),
                    format!("{}={}", e::LOCAL_ADDR, h.addr()),
                    format!("{}={}", e::PEER_ADDR, h.peer().addr()),
                    format!("{}={}", e::PORT, port),
                    format!("{}={}", e::RUN, sh_quote(&run)),
                    format!("{}={}", e::SIW_LOCAL_ADDR, h.siw_addr()),
                    format!("{}={}", e::SIW_PEER_ADDR, h.peer().siw_addr()),
                ]);
                marker.push_str(&format!(" role={}", h.role()));
            }
            let program = if r.bin.starts_with('/') {
                sh_quote(&r.bin)
            } else {
                format!("/{GUEST_BIN_DIR}/{}", sh_quote(&r.bin))
            };
            let command = format!(
                "timeout -s KILL {} env {} {program}{args}",
                r.timeout_secs,
                env.join(" "),
            );
            let attempt = attempt_body(&command, &expect, attempts, &r.name);
            s.push_str(&format!("echo\necho \"{RUN} {marker}\"\n{attempt}"));
            match host {
                None if r.retry_once => s.push_str(&format!(
                    "if [ $rc -ne 0 ]; then\necho \"{RETRY} {marker} rc=$rc\"\n{attempt}fi\n"
                )),
                None => {}
                Some(h) => {
                    // Both hosts learn both exit statuses, so both retry
                    // (or not) alike, and neither starts its next run
                    // before the other has finished this one.
                    let diagnose = after_a_failure(h);
                    let first = exchange_port(index, 0);
                    s.push_str(&format!("{diagnose}peer_rc=$(exchange {first} $rc)\n"));
                    if r.retry_once {
                        let second = exchange_port(index, 1);
                        s.push_str(&format!(
                            "if [ -n \"$peer_rc\" ] && {{ [ $rc -ne 0 ] || [ \"$peer_rc\" != 0 ]; }}; then\n\
                             echo \"{RETRY} {marker} rc=$rc peer_rc=$peer_rc\"\n{attempt}{diagnose}\
                             peer_rc=$(exchange {second} $rc)\nfi\n"
                        ));
                    }
                }
            }
            s.push_str(&format!("echo \"{RESULT} {marker} rc=$rc\"\n"));
            index += 1;
        }
    }
    s.push_str(&format!("echo \"{DONE}\"\n"));
    s
}

/// One attempt of a run: `command`, its exit status in `$rc`; with
/// `attempts` above 1 again while it fails, one second apart; with
/// `expect`, its output kept to be searched, then printed, and each
/// missing string a failure.
fn attempt_body(command: &str, expect: &[String], attempts: u32, name: &str) -> String {
    if expect.is_empty() && attempts == 1 {
        return format!("{command}\nrc=$?\n");
    }
    let mut s = if attempts > 1 {
        // Again while it fails, a second apart; each failed attempt's
        // output is printed, the last one's kept.
        format!(
            "attempt=1\nwhile :; do\n{command} >{RUN_OUTPUT} 2>&1\nrc=$?\n\
             [ $rc -eq 0 ] && break\n[ $attempt -ge {attempts} ] && break\n\
             cat {RUN_OUTPUT}\n\
             echo \"uverbs-vm: attempt $attempt of {attempts} failed (rc=$rc); again in 1 s\"\n\
             attempt=$((attempt+1))\nsleep 1\ndone\n"
        )
    } else {
        format!("{command} >{RUN_OUTPUT} 2>&1\nrc=$?\n")
    };
    // The output is kept to be searched, then printed.
    s.push_str(&format!("cat {RUN_OUTPUT}\n"));
    for e in expect {
        s.push_str(&format!(
            "grep -qF -e {q} {RUN_OUTPUT} || {{ echo {missing}; [ $rc -ne 0 ] || rc=1; }}\n",
            q = sh_quote(e),
            missing = sh_quote(&format!("FAILED: {name}: the output lacks `{e}`")),
        ));
    }
    s
}

/// What a two-host guest prints after a failed attempt, for whoever reads
/// the console: its TCP connections with their queues (siw's and the
/// control connection's), the RDMA QPs left, the kernel's last messages.
fn after_a_failure(host: Host) -> String {
    format!(
        "if [ $rc -ne 0 ]; then\n\
         echo \"uverbs-vm: host {r} after the failed attempt (rc=$rc): netstat -tn, rdma res show qp, dmesg | tail\"\n\
         netstat -tn 2>&1 | tail -n 20\nrdma res show qp 2>&1 | tail -n 20\ndmesg 2>&1 | tail -n 20\nfi\n",
        r = host.role()
    )
}

/// The TCP port on rxe0's link (eth0) where the two hosts tell each other
/// the exit status of attempt `attempt` (0, 1) of run `index`: a port per
/// exchange, so that hosts out of step never take each other's word for
/// another run's.
fn exchange_port(index: u16, attempt: u16) -> u16 {
    TWO_HOST_EXCHANGE_BASE_PORT + 2 * index + attempt
}

/// The two-host `/run-all`'s shell function `exchange PORT WORD`: sends
/// WORD (this host's exit status) to the peer and prints the peer's, over
/// busybox's `nc` on rxe0's link (eth0): A listens on PORT, B connects,
/// again each second while A is not listening yet. Each waits up to
/// [`EXCHANGE_WAIT_SECS`], then prints nothing: the peer is gone, and the
/// runs go on without it.
fn exchange_function(host: Host) -> String {
    let wait = EXCHANGE_WAIT_SECS;
    match host {
        Host::A => format!(
            "exchange() {{\n\
             echo \"$2\" | timeout -s KILL {wait} nc -l -p \"$1\" 2>/dev/null | head -n 1\n}}\n"
        ),
        Host::B => format!(
            "exchange() {{\n\
             end=$(( $(date +%s) + {wait} ))\n\
             while [ \"$(date +%s)\" -lt $end ]; do\n\
             got=$(echo \"$2\" | timeout -s KILL 10 nc {a} \"$1\" 2>/dev/null | head -n 1)\n\
             [ -n \"$got\" ] && {{ echo \"$got\"; return 0; }}\n\
             sleep 1\n\
             done\n}}\n",
            a = Host::A.addr()
        ),
    }
}

/// The `/init` script: mounts, loads modules in order, creates the RDMA
/// links (on dummy0, or on the NIC of a two-host guest), waits for the
/// uverbs nodes (and a two-host guest for its peer), then runs or opens a
/// shell.
pub fn init_script(modules: &[Module], mode: Mode, net: Net) -> String {
    let mut s = format!(
        r#"#!/bin/busybox sh
# Generated by uverbs-vm (tests/vm/src/guest.rs).
/bin/busybox mkdir -p /bin /sbin /usr/bin /usr/sbin /proc /sys /dev /tmp /run
/bin/busybox --install -s
export PATH=/sbin:/usr/sbin:/bin:/usr/bin HOME=/tmp RUST_BACKTRACE=1
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mount -t tmpfs tmpfs /tmp
fail() {{ echo "{SETUP_FAILED} $*"; poweroff -f; sleep 60; }}
echo "{BOOTED} kernel=$(uname -r)"
"#
    );
    for m in modules {
        let file = format!("/{GUEST_MODULE_DIR}/{}.ko", m.name);
        let load = format!("insmod {file} {}", m.args).trim_end().to_string();
        if m.optional {
            s.push_str(&format!(
                "{load} || echo \"uverbs-vm: optional module {} not loaded\"\n",
                m.name
            ));
        } else {
            s.push_str(&format!("{load} || fail \"insmod {}\"\n", m.name));
        }
    }
    s.push_str("ip link set lo up || fail \"ip link set lo up\"\n");
    // Each device on a netdev of its own, with its address there before the
    // link is added (so rxe's GID table has it); the rdma_cm needs an IP
    // (127.0.0.1 fails at route resolution): documentation-range addresses
    // that exist only here.
    for (name, kind) in LINKS {
        let kind_of = Kind::of(kind);
        let (dev, addr) = (net.netdev(kind_of), net.addr(kind_of));
        match net {
            Net::Dummy if dev != "dummy0" => s.push_str(&format!(
                "ip link add {dev} type dummy || fail \"ip link add {dev} type dummy\"\n"
            )),
            Net::Dummy => {}
            Net::Link(h) => {
                // Two NICs: make sure this one is the one qemu was given for
                // the device (by its MAC), not its sibling.
                let mac = h.mac(kind_of);
                s.push_str(&format!(
                    "[ \"$(cat /sys/class/net/{dev}/address 2>/dev/null)\" = {mac} ] || fail \"{dev} is not the NIC with MAC {mac}: $(cat /sys/class/net/{dev}/address 2>&1)\"\n"
                ));
            }
        }
        s.push_str(&format!(
            "ip link set {dev} up || fail \"ip link set {dev} up\"\n\
             ip addr add {addr}/{LINK_PREFIX_LEN} dev {dev} || fail \"ip addr add {addr}/{LINK_PREFIX_LEN} on {dev}\"\n\
             rdma link add {name} type {kind} netdev {dev} || fail \"rdma link add {name}\"\n\
             echo \"uverbs-vm: {name} on {dev} ({addr}/{LINK_PREFIX_LEN})\"\n"
        ));
    }
    s.push_str(&format!(
        r#"i=0
while [ "$(ls /dev/infiniband/ 2>/dev/null | grep -c '^uverbs')" -lt {n} ]; do
  i=$((i+1)); [ $i -gt 300 ] && fail "waiting for {n} /dev/infiniband/uverbs* nodes"
  sleep 0.1
done
rdma link show
for d in /sys/class/infiniband_verbs/uverbs*; do echo "$d -> $(cat $d/ibdev)"; done
"#,
        n = LINKS.len()
    ));
    if let Net::Link(h) = net {
        // The peer boots alongside; a link that never carries a packet fails
        // here, once, rather than in every run.
        let peer = h.peer();
        for kind in LINK_KINDS {
            s.push_str(&format!(
                r#"i=0
until ping -c 1 -W 1 {p} >/dev/null 2>&1; do
  i=$((i+1)); [ $i -ge {PEER_PINGS} ] && fail "host {pr} ({p}) did not answer {PEER_PINGS} pings on {nic}"
  sleep 1
done
echo "uverbs-vm: host {pr} ({p}) answers on {nic}"
"#,
                p = Net::Link(peer).addr(kind),
                pr = peer.role(),
                nic = net.netdev(kind),
            ));
        }
    }
    // As RDMA hosts are set up: no cap on locked memory. The kernel's
    // default (8 MiB) is within reach of the suite's registrations, and
    // Linux 6.1's siw counts them against it even for root (its own
    // siw_umem_get ignores CAP_IPC_LOCK; 6.12's ib_umem_get does not). The
    // tests that are about the limit set their own in a child.
    s.push_str("ulimit -l unlimited || fail \"ulimit -l unlimited\"\n");
    s.push_str(&format!("echo \"{READY}\"\n"));
    match (mode, net) {
        (Mode::Run, _) => s.push_str("/bin/sh /run-all\n"),
        // B's console is a log file: its shell is reached from A over telnet
        // (bound to B's link address, which only A can reach).
        (Mode::Shell, Net::Link(Host::B)) => s.push_str(&format!(
            r#"mkdir -p /dev/pts
mount -t devpts devpts /dev/pts || fail "mount devpts"
cd /tmp
telnetd -l /bin/sh -b {addr}:23 || fail "telnetd on {addr}:23"
echo "uverbs-vm shell: host b: a shell is at telnet {addr} (from host a)"
while :; do sleep 3600; done
"#,
            addr = Host::B.addr()
        )),
        (Mode::Shell, _) => {
            s.push_str(&format!(
                r#"echo
echo "uverbs-vm shell: binaries are in /{GUEST_BIN_DIR}; '/run-all' runs them all as 'cargo vm test' does."
"#
            ));
            if net == Net::Link(Host::A) {
                s.push_str(&format!(
                    "echo \"uverbs-vm shell: this is host a ({}); 'telnet {}' opens a shell on host b (run '/run-all' on both at once).\"\n",
                    Host::A.addr(),
                    Host::B.addr()
                ));
            }
            s.push_str(
                r#"echo "Leave with 'poweroff -f' (or Ctrl-A X)."
cd /tmp
setsid cttyhack sh -l
"#,
            );
        }
    }
    s.push_str("poweroff -f\nsleep 60\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    #[test]
    fn run_all_has_a_marker_per_run() {
        let s = run_all_script(TEST_CONFIGS, &[GuestRun::plain("a"), GuestRun::plain("b")]);
        assert_eq!(s.matches(RESULT).count(), 2 * TEST_CONFIGS.len());
        assert!(s.contains(&format!(
            "timeout -s KILL {PER_BINARY_TIMEOUT_SECS} env UVERBS_REQUIRE_DEVICES=rxe,siw UVERBS_TRANSPORT=write /tests/b\n"
        )));
        assert!(s.contains(&format!("\"{RESULT} config=write bin=b rc=$rc\"")));
    }

    #[test]
    fn a_run_may_have_a_time_limit_of_its_own() {
        let runs = [
            GuestRun::plain("verbs"),
            GuestRun::plain("datapath").with_timeout(14400),
        ];
        let s = run_all_script(
            &[RunConfig {
                name: "bench",
                env: &[],
            }],
            &runs,
        );
        assert!(
            s.contains(&format!(
                "timeout -s KILL {PER_BINARY_TIMEOUT_SECS} env  /tests/verbs\n"
            )),
            "{s}"
        );
        assert!(
            s.contains("timeout -s KILL 14400 env  /tests/datapath\n"),
            "{s}"
        );
    }

    #[test]
    fn a_run_with_arguments_keeps_its_own_name() {
        let runs = GuestRun::demo();
        let s = run_all_script(DEMO_CONFIGS, &runs);
        assert_eq!(s.matches(RESULT).count(), runs.len() * DEMO_CONFIGS.len());
        assert!(s.contains(&format!(
            "timeout -s KILL {PER_BINARY_TIMEOUT_SECS} env UVERBS_TRANSPORT=ioctl /tests/syscalls --iters 1000\n"
        )));
        assert!(s.contains(&format!("\"{RESULT} config=write bin=syscalls rc=$rc\"")));
        assert!(s.contains("env UVERBS_TRANSPORT=write /tests/rereg_tour\n"));
        assert!(s.contains("env UVERBS_TRANSPORT=ioctl /tests/perf --self-test\n"));
        assert!(s.contains(&format!(
            "\"{RESULT} config=write bin=perf_selftest rc=$rc\""
        )));
    }

    #[test]
    fn short_examples_run_on_both_devices_in_demo_and_test() {
        let demo = GuestRun::demo();
        let s = run_all_script(DEMO_CONFIGS, &demo);
        assert!(s.contains(
            "env UVERBS_TRANSPORT=ioctl /tests/loopback --device siw0 --addr 198.51.100.1\n"
        ));
        assert!(s.contains("env UVERBS_TRANSPORT=write /tests/devinfo --device rxe0\n"));
        assert!(s.contains(
            "env UVERBS_TRANSPORT=write /tests/hwcheck --device siw0 --addr 198.51.100.1\n"
        ));
        assert!(s.contains(&format!(
            "\"{RESULT} config=write bin=example_rereg_siw0 rc=$rc\""
        )));
        let test = GuestRun::examples();
        let s = run_all_script(TEST_CONFIGS, &test);
        assert!(s.contains("UVERBS_TRANSPORT=write /tests/events --device rxe0 --addr 192.0.2.1\n"));
        for (example, takes_addr) in SHORT_EXAMPLES {
            let file = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join(format!("../../examples/{example}.rs"));
            assert!(file.is_file(), "{}", file.display());
            for kind in LINK_KINDS {
                let name = format!("example_{example}_{}", kind.device());
                let run = |runs: &[GuestRun]| runs.iter().find(|r| r.name == name).cloned();
                let (d, t) = (run(&demo).expect(&name), run(&test).expect(&name));
                assert_eq!(d.args, t.args);
                assert!(t.retry_once && !d.retry_once && !is_two_host(&name));
                assert_eq!(d.args.contains(&"--addr".to_string()), *takes_addr);
                assert_eq!(d.args[..2], ["--device", kind.device()]);
            }
        }
        // Every tokio_pingpong run is retried as well.
        assert!(test.iter().all(|r| r.retry_once));
    }

    #[test]
    fn init_loads_modules_in_order() {
        let m = |name: &str, optional: bool, args: &str| Module {
            name: name.into(),
            path: PathBuf::new(),
            optional,
            args: args.into(),
        };
        let s = init_script(
            &[
                m("dummy", false, "numdummies=1"),
                m("crc32-pclmul", true, ""),
            ],
            Mode::Run,
            Net::Dummy,
        );
        let a = s
            .find("insmod /lib/modules/dummy.ko numdummies=1 || fail")
            .unwrap();
        let b = s
            .find("insmod /lib/modules/crc32-pclmul.ko || echo")
            .unwrap();
        assert!(a < b);
        // Each device on its own netdev, the address there before the
        // link, so rxe's GID table has it.
        assert!(s.contains("rdma link add rxe0 type rxe netdev dummy0 ||"));
        assert!(s.contains("ip link add dummy1 type dummy ||"));
        // Locked memory uncapped before the runs start.
        let unlimited = s.find("ulimit -l unlimited || fail").unwrap();
        assert!(unlimited < s.find("/bin/sh /run-all").unwrap());
        assert!(s.contains("rdma link add siw0 type siw netdev dummy1 ||"));
        for (addr, dev, link) in [
            ("192.0.2.1", "dummy0", "rxe0"),
            ("198.51.100.1", "dummy1", "siw0"),
        ] {
            let at = s
                .find(&format!("ip addr add {addr}/24 dev {dev} || fail"))
                .unwrap();
            assert!(at < s.find(&format!("rdma link add {link}")).unwrap());
        }
        assert!(s.contains("/bin/sh /run-all"));
        assert!(init_script(&[], Mode::Shell, Net::Dummy).contains("cttyhack"));
        assert!(!s.contains(LINK_NIC));
    }

    /// Both hosts' `/run-all` run for real, by the busybox the guests get
    /// (its `sh`, `nc`, `timeout`), over 127.0.0.1 and with a stub for
    /// every binary: a run that fails on one host is retried by both, and
    /// a host whose run is quick waits for its peer's slow one before its
    /// next run starts.
    #[test]
    fn the_hosts_retry_together_and_start_each_run_together() {
        use crate::report::{parse, parse_retries, summarize_two_host};
        let cache = crate::util::cache_dir(&crate::util::workspace_root().unwrap());
        let Ok(tools) = crate::tools::Tools::read(&cache) else {
            // `cargo vm test` runs the host suite with the cache set up.
            assert!(
                std::env::var_os("UVERBS_VM_CACHE").is_none(),
                "no busybox in {}: run `cargo vm setup`",
                cache.display()
            );
            eprintln!(
                "SKIPPED: no busybox in {} (`cargo vm setup` fetches it)",
                cache.display()
            );
            return;
        };
        let dir = std::env::temp_dir().join(format!("uverbs-vm-two-host-{}", std::process::id()));
        let bin = dir.join("bin");
        std::fs::create_dir_all(&bin).unwrap();
        for applet in [
            "sh", "nc", "timeout", "date", "head", "sleep", "env", "cat", "tail", "echo", "tr",
        ] {
            std::os::unix::fs::symlink(tools.busybox(), bin.join(applet)).unwrap();
        }
        // The stub counts its attempts per host and run, notes when each
        // started, and fails: a's first attempt of ioctl/two_host_x; b's
        // every attempt of write/two_host_y. b's ioctl/two_host_y is slow.
        let stub = dir.join("stub");
        let d = dir.display();
        std::fs::write(
            &stub,
            format!(
                "#!{d}/bin/sh\nrun=$(echo $UVERBS_HOST_ROLE-$UVERBS_TWO_HOST_RUN | tr / _)\n\
                 n=$(cat {d}/count-$run 2>/dev/null || echo 0); n=$((n+1)); echo $n >{d}/count-$run\n\
                 date +%s >{d}/start-$run-$n\n\
                 case $run-$n in\n\
                 a-ioctl_two_host_x-1) exit 101;;\n\
                 b-ioctl_two_host_y-*) sleep 3;;\n\
                 b-write_two_host_y-*) exit 1;;\n\
                 esac\nexit 0\n"
            ),
        )
        .unwrap();
        std::fs::set_permissions(&stub, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        let runs = [
            GuestRun::plain("two_host_x").retried_once(),
            GuestRun::plain("two_host_y").retried_once(),
        ];
        let configs = &TEST_CONFIGS[..2];
        // Exchange ports of this test's own: each bound once by the system
        // (so free now), all held until every one is picked.
        let listeners: Vec<_> = (0..2 * configs.len() * runs.len())
            .map(|_| std::net::TcpListener::bind("127.0.0.1:0").unwrap())
            .collect();
        let ours: Vec<u16> = listeners
            .iter()
            .map(|l| l.local_addr().unwrap().port())
            .collect();
        drop(listeners);
        let children: Vec<_> = Host::BOTH
            .iter()
            .map(|&h| {
                let mut script = two_host_run_all_script(configs, &runs, h)
                    .replace(&format!("nc {} ", Host::A.addr()), "nc 127.0.0.1 ")
                    .replace("/tests/two_host_x", &stub.display().to_string())
                    .replace("/tests/two_host_y", &stub.display().to_string())
                    .replace("rdma res show qp", "true")
                    .replace("netstat -tn", "true")
                    .replace("dmesg", "true")
                    // A host waits 20 s for its peer here: out of step, the
                    // test fails in seconds, not in minutes.
                    .replace(&format!(" {EXCHANGE_WAIT_SECS} "), " 20 ");
                for (k, port) in (0..).zip(&ours) {
                    let planned = exchange_port(0, k);
                    script = script.replace(
                        &format!("exchange {planned} "),
                        &format!("exchange {port} "),
                    );
                }
                assert!(!script.contains(&format!("exchange {} ", exchange_port(0, 0))));
                std::process::Command::new(bin.join("sh"))
                    .arg("-c")
                    .arg(script)
                    .env("PATH", &bin)
                    .stdout(std::process::Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        let consoles: Vec<String> = children
            .into_iter()
            .map(|c| String::from_utf8(c.wait_with_output().unwrap().stdout).unwrap())
            .collect();
        let start = |run: &str, n: u32| -> u64 {
            let f = dir.join(format!("start-{run}-{n}"));
            std::fs::read_to_string(&f).map_or(0, |t| t.trim().parse().unwrap())
        };
        let attempts = |run: &str| std::fs::read_to_string(dir.join(format!("count-{run}"))).ok();
        // Both retried ioctl/two_host_x (a failed) and write/two_host_y
        // (b failed twice); nothing else.
        for h in ["a", "b"] {
            for (run, n) in [
                ("ioctl_two_host_x", "2\n"),
                ("ioctl_two_host_y", "1\n"),
                ("write_two_host_x", "1\n"),
                ("write_two_host_y", "2\n"),
            ] {
                assert_eq!(
                    attempts(&format!("{h}-{run}")).as_deref(),
                    Some(n),
                    "{h}-{run}"
                );
            }
        }
        // a's write/two_host_x started when b's slow run had ended.
        let (a, b) = (
            start("a-write_two_host_x", 1),
            start("b-write_two_host_x", 1),
        );
        assert!(
            a >= start("b-ioctl_two_host_y", 1) + 3 && a.abs_diff(b) <= 1,
            "{a} {b}"
        );
        let _ = std::fs::remove_dir_all(&dir);
        let results = [parse(&consoles[0]), parse(&consoles[1])];
        let retries: Vec<_> = consoles.iter().flat_map(|c| parse_retries(c)).collect();
        let names: Vec<String> = runs.iter().map(|r| r.name.clone()).collect();
        let configs: Vec<&str> = configs.iter().map(|c| c.name).collect();
        let (table, c) = summarize_two_host(&configs, &names, &results[0], &results[1], &retries);
        assert_eq!((c.passed, c.failed, c.missing), (3, 1, 0), "{table}");
        assert_eq!(
            c.second_attempt,
            ["two-host ioctl/two_host_x (first a=101 b=0)"]
        );
        assert!(table.contains("FAIL a=0 b=1"), "{table}");
    }

    #[test]
    fn two_host_runs_carry_the_role_and_a_port_per_run() {
        let runs = [GuestRun::plain("two_host_x"), GuestRun::plain("two_host_y")];
        let a = two_host_run_all_script(TEST_CONFIGS, &runs, Host::A);
        let b = two_host_run_all_script(TEST_CONFIGS, &runs, Host::B);
        assert_eq!(a.matches(RESULT).count(), 2 * TEST_CONFIGS.len());
        assert!(a.contains("\"@@UVERBS-RESULT config=ioctl bin=two_host_x role=a rc=$rc\""));
        assert!(b.contains("\"@@UVERBS-RESULT config=write bin=two_host_y role=b rc=$rc\""));
        // Run 3 (write, two_host_y): the same port on both sides, each told
        // its own and the peer's address.
        let port = TWO_HOST_BASE_PORT + 3;
        assert!(a.contains(&format!(
            "UVERBS_TRANSPORT=write UVERBS_HOST_ROLE=a UVERBS_LOCAL_ADDR=192.0.2.1 UVERBS_PEER_ADDR=192.0.2.2 UVERBS_TWO_HOST_PORT={port} UVERBS_TWO_HOST_RUN=write/two_host_y UVERBS_SIW_LOCAL_ADDR=198.51.100.1 UVERBS_SIW_PEER_ADDR=198.51.100.2 /tests/two_host_y\n"
        )));
        assert!(b.contains(&format!(
            "UVERBS_TRANSPORT=write UVERBS_HOST_ROLE=b UVERBS_LOCAL_ADDR=192.0.2.2 UVERBS_PEER_ADDR=192.0.2.1 UVERBS_TWO_HOST_PORT={port} UVERBS_TWO_HOST_RUN=write/two_host_y UVERBS_SIW_LOCAL_ADDR=198.51.100.2 UVERBS_SIW_PEER_ADDR=198.51.100.1 /tests/two_host_y\n"
        )));
        // Every run has a port of its own, the same on both sides.
        let ports = |s: &str| -> Vec<String> {
            s.split_whitespace()
                .filter_map(|w| w.strip_prefix("UVERBS_TWO_HOST_PORT="))
                .map(String::from)
                .collect()
        };
        let pa = ports(&a);
        assert_eq!(pa, ports(&b));
        assert_eq!(pa.len(), 2 * TEST_CONFIGS.len());
        let unique: std::collections::BTreeSet<_> = pa.iter().collect();
        assert_eq!(unique.len(), pa.len());
        // The single guest's script has none of it.
        let single = run_all_script(TEST_CONFIGS, &runs);
        assert!(!single.contains("UVERBS_HOST_ROLE") && !single.contains("role="));
    }

    #[test]
    fn two_host_init_puts_the_devices_on_the_nic_and_waits_for_the_peer() {
        let a = init_script(&[], Mode::Run, Net::Link(Host::A));
        let b = init_script(&[], Mode::Run, Net::Link(Host::B));
        assert!(a.contains("ip addr add 192.0.2.1/24 dev eth0 ||"));
        assert!(b.contains("ip addr add 192.0.2.2/24 dev eth0 ||"));
        assert!(a.contains("ip addr add 198.51.100.1/24 dev eth1 ||"));
        assert!(b.contains("ip addr add 198.51.100.2/24 dev eth1 ||"));
        assert!(
            b.contains("/sys/class/net/eth1/address 2>/dev/null)\" = 52:54:00:00:03:02 ] || fail")
        );
        for s in [&a, &b] {
            assert!(s.contains("rdma link add rxe0 type rxe netdev eth0 ||"));
            assert!(s.contains("rdma link add siw0 type siw netdev eth1 ||"));
            assert!(!s.contains("dummy0") && !s.contains("dummy1"));
            // The peer wait is bounded and comes before READY and the runs.
            let ping = s.find("until ping -c 1 -W 1").unwrap();
            assert!(s[ping..].contains(&format!("-ge {PEER_PINGS} ] && fail")));
            assert!(ping < s.find(READY).unwrap());
            assert!(s.find(READY).unwrap() < s.find("/bin/sh /run-all").unwrap());
        }
        assert!(a.contains("until ping -c 1 -W 1 192.0.2.2 "));
        assert!(a.contains("until ping -c 1 -W 1 198.51.100.2 "));
        assert!(b.contains("until ping -c 1 -W 1 192.0.2.1 "));
        assert!(b.contains("until ping -c 1 -W 1 198.51.100.1 "));
        // The shell: A on the terminal, B's shell over telnet on its link
        // address only.
        let sa = init_script(&[], Mode::Shell, Net::Link(Host::A));
        let sb = init_script(&[], Mode::Shell, Net::Link(Host::B));
        assert!(sa.contains("cttyhack") && sa.contains("telnet 192.0.2.2"));
        assert!(sb.contains("telnetd -l /bin/sh -b 192.0.2.2:23 ||"));
        assert!(!sb.contains("cttyhack") && !sb.contains("/run-all\n"));
    }

    #[test]
    fn two_host_examples_get_their_host_s_arguments_and_are_checked() {
        let mut runs = vec![GuestRun::plain("two_host_x")];
        runs.extend(GuestRun::two_host_examples());
        let names: Vec<&str> = runs.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "two_host_x",
                "two_host_pingpong_rxe",
                "two_host_pingpong_siw"
            ]
        );
        assert!(runs[1..].iter().all(|r| is_two_host(&r.name)));
        let a = two_host_run_all_script(TEST_CONFIGS, &runs, Host::A);
        let b = two_host_run_all_script(TEST_CONFIGS, &runs, Host::B);
        // Run 2 (ioctl, the siw pingpong): B serves on its siw address,
        // A connects there, both on the run's port.
        let port = TWO_HOST_BASE_PORT + 2;
        assert!(a.contains(&format!(
            "UVERBS_TWO_HOST_RUN=ioctl/two_host_pingpong_siw UVERBS_SIW_LOCAL_ADDR=198.51.100.1 UVERBS_SIW_PEER_ADDR=198.51.100.2 /tests/pingpong --cm --client --connect 198.51.100.2:{port} --device siw0 --iters 200 >{RUN_OUTPUT} 2>&1\n"
        )));
        assert!(b.contains(&format!(
            "/tests/pingpong --cm --server --bind 198.51.100.2:{port} --device siw0 --iters 200 >{RUN_OUTPUT} 2>&1\n"
        )));
        assert!(b.contains(&format!(
            "/tests/pingpong --cm --server --bind 192.0.2.2:{} --device rxe0",
            TWO_HOST_BASE_PORT + 1
        )));
        // Each expected line is searched for; a missing one fails the run.
        assert!(a.contains(&format!(
            "grep -qF -e ': latency: 200 round trips' {RUN_OUTPUT} || {{ echo 'FAILED: two_host_pingpong_rxe: the output lacks `: latency: 200 round trips`'; [ $rc -ne 0 ] || rc=1; }}\n"
        )));
        assert!(b.contains(
            "grep -qF -e '200 pings answered; the WRITE area was verified; disconnected'"
        ));
        assert!(!a.contains("{port}") && !b.contains("{peer}") && !b.contains("{siw_local}"));
        // The plain binary's output is not redirected.
        assert!(a.contains("/tests/two_host_x\nrc=$?\n"));
        // The single guest's script gives an example its plain arguments.
        let single = run_all_script(TEST_CONFIGS, &runs[1..2]);
        assert!(single.contains("/tests/pingpong\nrc=$?\n"));
    }

    #[test]
    fn c_peer_runs_name_their_device_and_its_address() {
        let runs = GuestRun::c_peers();
        assert!(runs.iter().all(|r| r.bin == C_PEERS_TOOL && r.retry_once));
        assert!(runs.iter().all(|r| !is_two_host(&r.name)));
        let s = run_all_script(TEST_CONFIGS, &runs);
        assert!(s.contains(&format!(
            "timeout -s KILL {C_PEER_TIMEOUT_SECS} env UVERBS_REQUIRE_DEVICES=rxe,siw UVERBS_TRANSPORT=ioctl /tests/c_peers rdma_server --device siw0 --addr 198.51.100.1\n"
        )));
        // ibv_rc_pingpong in both roles, against the pingpong tool
        // (in /tests with c_peers).
        assert!(s.contains("/tests/c_peers rc_pingpong_client --device rxe0 --addr 192.0.2.1\n"));
        assert!(s.contains("/tests/c_peers rc_pingpong_server --device rxe0 --addr 192.0.2.1\n"));
        // perftest in both roles, against the perf tool (in /tests too).
        assert!(s.contains(
            "/tests/c_peers perftest_client --test write_bw --iters 200 --device siw0 --addr 198.51.100.1\n"
        ));
        // Every test the perf tool offers, both roles, both devices.
        for test in PerfTest::ALL {
            for role in ["server", "client"] {
                for (dev, addr) in [("rxe0", "192.0.2.1"), ("siw0", "198.51.100.1")] {
                    let name = format!("c_peer_perftest_{}_{role}_{dev}", test.name());
                    let run = runs.iter().find(|r| r.name == name).expect(&name);
                    assert_eq!(
                        run.args.join(" "),
                        format!(
                            "perftest_{role} --test {} --iters {PERFTEST_ITERS} --device {dev} --addr {addr}",
                            test.name()
                        )
                    );
                }
            }
        }
        assert_eq!(runs.len(), C_PEER_RUNS.len() + PerfTest::ALL.len() * 2 * 2);
        assert!(C_PEERS_PROGRAMS.contains(&"perf"));
        assert!(C_PEERS_PROGRAMS.contains(&"pingpong"));
        assert!(s.contains(&format!(
            "\"{RESULT} config=write bin=c_peer_rdma_client_rxe0 rc=$rc\""
        )));
        // No rc_pingpong on iWARP.
        assert!(!runs
            .iter()
            .any(|r| r.name.contains("pingpong") && r.name.contains("siw")));
    }

    #[test]
    fn two_host_binaries_are_told_apart_by_name() {
        assert!(is_two_host("two_host_rc"));
        assert!(!is_two_host("device_datapath_two"));
        assert!(!is_two_host("two_hostile"));
        let macs: std::collections::BTreeSet<_> = Host::BOTH
            .iter()
            .flat_map(|h| LINK_KINDS.map(|k| h.mac(k)))
            .collect();
        assert_eq!(macs.len(), 4, "{macs:?}");
        assert_eq!(Host::B.mac(Kind::Siw), "52:54:00:00:03:02");
        assert_eq!(Host::A.peer(), Host::B);
    }
}
