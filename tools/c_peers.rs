//! uverbs against rdma-core's own C programs: each run spawns one C tool
//! (librdmacm's `rdma_server` / `rdma_client` examples, libibverbs'
//! `ibv_rc_pingpong`) and meets it with a peer in pure Rust: for the
//! rdma_cm pair this program, through the safe API (`OwnedQp`: every
//! request owns its `BufferMr` until its completion); for
//! `ibv_rc_pingpong` the `pingpong` example, which speaks its protocol
//! (`tools/pingpong/exchange.rs`). A C peer is the one test no shared
//! misunderstanding can pass: if both sides were ours, a wrong wire format
//! or QP attribute on both would still meet.
//!
//! ```text
//! c_peers rdma_server --device D --addr A [--port P]    C rdma_server -s A -p P, a Rust client
//! c_peers rdma_client --device D --addr A [--port P]    a Rust server on A:P, C rdma_client -s A -p P
//! c_peers rc_pingpong_server --device D --addr A [--port P] [--size B] [--iters N]
//!     C  ibv_rc_pingpong -d D -g G -p P -s B -n N          (G: the index of A's RoCE v2 GID)
//!     pingpong --client A -d D -g G -p P -s B -n N
//! c_peers rc_pingpong_client --device D --addr A [--port P] [--size B] [--iters N]
//!     pingpong --server -d D -g G -p P -s B -n N
//!     C  ibv_rc_pingpong -d D -g G -p P -s B -n N A        (once pingpong listens)
//! c_peers perftest_server --test T --device D --addr A [--port P] [--size B] [--iters N]
//!     C  ib_T -d D -F -x G -p P -s B -n N                   (siw: -R instead of -x G)
//!     perf --client A --test T --device D --gid-index G --port P --size B --iters N
//!                                                          (siw: --cm A instead of --gid-index G)
//! c_peers perftest_client --test T --device D --addr A [--port P] [--size B] [--iters N]
//!     perf --server --test T ... (as above)
//!     C  ib_T ... A                                         (once perf listens)
//! ```
//!
//! - `rdma_server` / `rdma_client` (port 7471 by default): exactly the C
//!   examples' exchange over the rdma_cm (RC, port space TCP). The
//!   server posts a 16-byte receive, accepts, waits for the client's 16
//!   bytes, then SENDs 16 bytes (its never-written `send_msg`: zeros) and
//!   disconnects; the client posts its receive, connects, SENDs 16 bytes
//!   (its zeroed `send_msg`) and waits for the reply. Both ask for 16
//!   inline bytes, send inline when the QP has them (else from a
//!   registered buffer), and signal every send (`sq_sig_all`). The Rust
//!   side does the same, fills its receive buffer with 0xff first and
//!   checks that exactly 16 zero bytes landed; as the server it sends back
//!   the 16 bytes it got. RoCE (rxe) and iWARP (siw) alike.
//! - `rc_pingpong_*` (port 18515, size 4096, 1000 iterations by default:
//!   the C program's): `ibv_rc_pingpong` and the `pingpong` example (the
//!   program next to this one: `cargo vm` puts both in `/tests`), each
//!   given `-g`, the index of the RoCE v2 GID of `--addr` (the C program
//!   needs it on RoCE for its GRH). Both
//!   must exit 0 and print `N iters in`. Not on iWARP: an iWARP QP reaches
//!   RTS only through the connection manager (the TCP stream carries
//!   it), and ibv_rc_pingpong connects its QP by hand, so siw cannot run
//!   it; this program refuses siw0 with that reason.
//! - `perftest_*` (port 18515, T any test of the `perf` tool: `write_lat`,
//!   `send_lat`, `read_lat`, `write_bw`, `send_bw`): perftest's `ib_T` and
//!   the `perf` tool, which speaks perftest's protocol. On RoCE (rxe) by
//!   hand over TCP, both given the index of the RoCE v2 GID of `--addr`
//!   (`-x`); on iWARP (siw) through the rdma_cm as perftest's `-R` (its
//!   QPs reach RTS only that way), on `--addr`. perftest is given `-F`
//!   (the emulated CPU's frequency varies). Both must exit 0: perftest
//!   with its result row (`B  N ...`; its write_bw server prints the
//!   report our client sent; its read_lat server, which only answers
//!   READs, prints no row: its banner `RDMA_Read Latency Test` then),
//!   perf with `the run ended as ib_T's does` (each test's own ending:
//!   write_lat has no closing exchange).
//!
//! Each spawned program's output is captured and printed (each line
//! prefixed with its name); the run fails unless every program exits 0 and
//! prints its success line. Every wait is bounded ([`WAIT`]); a program is
//! killed if it outlives the run.
//!
//! `cargo vm test` runs the pairings in the VM (rxe0 and siw0 for the
//! rdma_cm pair and for perftest, every test both ways; rxe0 for
//! rc_pingpong), one line each in its summary; see tests/vm/README.md.

use std::error::Error;
use std::ffi::OsString;
use std::io::{BufRead, BufReader, Read};
use std::net::{Ipv4Addr, SocketAddr};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use uverbs::cm::{CmId, ConnParam, Event, EventChannel, EventKind, PortSpace};
use uverbs::device::{DriverId, Gid, GidType};
use uverbs::post::{Completed, Local, RecvRequest, SendRequest};
use uverbs::qp::QpState;
use uverbs::wr::WcStatus;
use uverbs::{AccessFlags, BufferMr, Context, OwnedQp, ProtectionDomain, QpInit, QpType};

// The perf tool's tests: each is perftest's `ib_<test>`.
#[allow(dead_code)]
#[path = "perf/test_kind.rs"]
mod test_kind;
use test_kind::Test;

type Result<T, E = Box<dyn Error>> = std::result::Result<T, E>;

/// The bound on any single wait: a completion, a cm event, a line, the C
/// program's exit.
const WAIT: Duration = Duration::from_secs(30);
/// The rdma_cm examples' message size.
const MSG: usize = 16;
/// Address and route resolution time-outs (ms).
const RESOLVE_MS: u32 = 2000;
/// How long a refused connect waits before it tries again (the C server
/// may not listen yet).
const RETRY_AFTER: Duration = Duration::from_millis(200);

/// Registered memory the requests own.
type Buf = BufferMr<Vec<u8>>;

const USAGE: &str = "usage: c_peers rdma_server|rdma_client|rc_pingpong_server|rc_pingpong_client
                --device NAME --addr IPV4 [--port P] [--size BYTES] [--iters N]
       c_peers perftest_server|perftest_client
                --test write_lat|send_lat|read_lat|write_bw|send_bw
                --device NAME --addr IPV4 [--port P] [--size BYTES] [--iters N]";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Pairing {
    /// The C `rdma_server`, a Rust client.
    RdmaServer,
    /// A Rust server, the C `rdma_client`.
    RdmaClient,
    /// The C `ibv_rc_pingpong` as server, the `pingpong` example its client.
    RcPingpongServer,
    /// The `pingpong` example as server, the C `ibv_rc_pingpong` its client.
    RcPingpongClient,
    /// perftest's C program as server, the `perf` tool its client.
    PerftestServer,
    /// The `perf` tool as server, perftest's C program its client.
    PerftestClient,
}

impl Pairing {
    fn parse(name: &str) -> Result<Pairing, &'static str> {
        Ok(match name {
            "rdma_server" => Pairing::RdmaServer,
            "rdma_client" => Pairing::RdmaClient,
            "rc_pingpong_server" => Pairing::RcPingpongServer,
            "rc_pingpong_client" => Pairing::RcPingpongClient,
            "perftest_server" => Pairing::PerftestServer,
            "perftest_client" => Pairing::PerftestClient,
            _ => return Err("unknown pairing"),
        })
    }
}

#[derive(Debug)]
struct Options {
    pairing: Pairing,
    device: String,
    addr: Ipv4Addr,
    port: u16,
    size: usize,
    iters: usize,
    /// The perftest pairings' test: any of the perf tool's.
    test: Option<Test>,
}

impl Options {
    fn parse(args: impl IntoIterator<Item = OsString>) -> Result<Options, lexopt::Error> {
        use lexopt::prelude::*;
        let (mut pairing, mut device, mut addr, mut port) = (None, None, None, None);
        let (mut size, mut iters, mut test) = (4096, 1000, None);
        let mut p = lexopt::Parser::from_args(args);
        while let Some(arg) = p.next()? {
            match arg {
                Value(v) if pairing.is_none() => pairing = Some(v.parse_with(Pairing::parse)?),
                Long("device") => device = Some(p.value()?.string()?),
                Long("addr") => addr = Some(p.value()?.parse()?),
                Long("port") => port = Some(p.value()?.parse()?),
                Long("size") => size = p.value()?.parse()?,
                Long("iters") => iters = p.value()?.parse()?,
                Long("test") => {
                    let v = p.value()?.string()?;
                    test = Some(Test::parse(&v).ok_or_else(|| {
                        let all = Test::ALL.map(Test::name).join(" | ");
                        format!("--test: {v:?} is none of {all}")
                    })?);
                }
                _ => return Err(arg.unexpected()),
            }
        }
        let pairing = pairing.ok_or("a pairing is needed")?;
        let rdma_cm = matches!(pairing, Pairing::RdmaServer | Pairing::RdmaClient);
        if size == 0 || iters == 0 {
            return Err("--size and --iters must be positive".into());
        }
        let perftest = matches!(pairing, Pairing::PerftestServer | Pairing::PerftestClient);
        if perftest != test.is_some() {
            return Err("--test goes with the perftest pairings, and only with them".into());
        }
        Ok(Options {
            pairing,
            device: device.ok_or("--device is required")?,
            addr: addr.ok_or("--addr is required")?,
            // The C programs' defaults.
            port: port.unwrap_or(if rdma_cm { 7471 } else { 18515 }),
            size,
            iters,
            test,
        })
    }
}

fn main() -> std::process::ExitCode {
    let opts = match Options::parse(std::env::args_os().skip(1)) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("c_peers: {e}\n{USAGE}");
            return std::process::ExitCode::from(2);
        }
    };
    let what = match opts.pairing {
        Pairing::RdmaServer => "C rdma_server <- Rust client",
        Pairing::RdmaClient => "C rdma_client -> Rust server",
        Pairing::RcPingpongServer => "C ibv_rc_pingpong (server) <- pingpong --client",
        Pairing::RcPingpongClient => "C ibv_rc_pingpong (client) -> pingpong --server",
        Pairing::PerftestServer => "C perftest (server) <- perf --client",
        Pairing::PerftestClient => "C perftest (client) -> perf --server",
    };
    let result = match opts.pairing {
        Pairing::RdmaServer => rdma_server(&opts),
        Pairing::RdmaClient => rdma_client(&opts),
        Pairing::RcPingpongServer | Pairing::RcPingpongClient => rc_pingpong(&opts),
        Pairing::PerftestServer | Pairing::PerftestClient => perftest(&opts),
    };
    match result {
        Ok(()) => {
            println!(
                "c_peers: {what} on {} ({}:{}): passed",
                opts.device, opts.addr, opts.port
            );
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            println!(
                "c_peers: {what} on {} ({}:{}): FAILED: {e}",
                opts.device, opts.addr, opts.port
            );
            std::process::ExitCode::FAILURE
        }
    }
}

// ---- The C program -------------------------------------------------------

/// A spawned program (a C peer, or the `pingpong` example), killed and
/// reaped if the run ends before it does; its stdout and stderr are read
/// as they come, each line prefixed with its name (a C program's stdout is
/// a pipe, so its lines come when it exits, and a killed one's buffered
/// lines are lost; its stderr, unbuffered, is not).
struct Peer {
    name: &'static str,
    child: Option<Child>,
    lines: Arc<Mutex<Vec<String>>>,
    readers: Vec<JoinHandle<()>>,
}

impl Peer {
    /// librdmacm's example `program` (`rdma_server`, `rdma_client`) on
    /// `--addr` and `--port`.
    fn spawn_cm_example(program: &'static str, opts: &Options) -> Result<Peer> {
        let args = [
            "-s".into(),
            opts.addr.to_string(),
            "-p".into(),
            opts.port.to_string(),
        ];
        Peer::spawn(program, program.as_ref(), &args)
    }

    fn spawn(name: &'static str, program: &Path, args: &[String]) -> Result<Peer> {
        println!("c_peers: running {} {}", program.display(), args.join(" "));
        let mut child = Command::new(program)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot run {}: {e}", program.display()))?;
        let lines = Arc::new(Mutex::new(Vec::new()));
        let out = child
            .stdout
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>);
        let err = child
            .stderr
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>);
        let readers = [out, err]
            .into_iter()
            .flatten()
            .map(|pipe| {
                let lines = Arc::clone(&lines);
                std::thread::spawn(move || {
                    for line in BufReader::new(pipe).lines() {
                        let Ok(line) = line else { break };
                        lines.lock().expect("no reader panics").push(line);
                    }
                })
            })
            .collect();
        Ok(Peer {
            name,
            child: Some(child),
            lines,
            readers,
        })
    }

    /// Fails if the program has already exited (it gave up before us).
    fn alive(&mut self) -> Result<()> {
        let child = self.child.as_mut().expect("until finished");
        if let Some(status) = child.try_wait()? {
            let out = self.output();
            return Err(format!("{} exited early ({status}):\n{out}", self.name).into());
        }
        Ok(())
    }

    /// Waits (at most [`WAIT`]) until the program has printed a line
    /// containing `text`.
    fn wait_for(&mut self, text: &str) -> Result<()> {
        let deadline = Instant::now() + WAIT;
        loop {
            if self
                .lines
                .lock()
                .expect("no reader panics")
                .iter()
                .any(|l| l.contains(text))
            {
                return Ok(());
            }
            self.alive()?;
            if Instant::now() >= deadline {
                return Err(format!("{} printed no {text:?} within {WAIT:?}", self.name).into());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Everything it printed, each line prefixed with its name (all of it
    /// once it has exited: the readers then reach the pipes' end).
    fn output(&mut self) -> String {
        if self
            .child
            .as_mut()
            .is_some_and(|c| matches!(c.try_wait(), Ok(Some(_))))
        {
            for reader in self.readers.drain(..) {
                let _ = reader.join();
            }
        }
        let lines = self.lines.lock().expect("no reader panics");
        lines
            .iter()
            .map(|l| format!("{}| {l}\n", self.name))
            .collect()
    }

    /// Waits (at most [`WAIT`]) for the program to exit 0 with `expect`
    /// in its output, which is printed and returned.
    fn finish(mut self, expect: &str) -> Result<String> {
        let deadline = Instant::now() + WAIT;
        let status = loop {
            let child = self.child.as_mut().expect("until finished");
            if let Some(status) = child.try_wait()? {
                break status;
            }
            if Instant::now() >= deadline {
                return Err(format!("{} did not exit within {WAIT:?}", self.name).into());
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let out = self.output();
        print!("{out}");
        self.child = None;
        if !status.success() {
            return Err(format!("{} failed ({status})", self.name).into());
        }
        if !out.contains(expect) {
            return Err(format!("{}'s output lacks {expect:?}", self.name).into());
        }
        Ok(out)
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
            self.child = Some(child);
            print!("{}", self.output());
            self.child = None;
            println!("c_peers: {} killed", self.name);
        }
    }
}

// ---- The Rust side's resources --------------------------------------------

/// The device named `name`, opened.
fn open(name: &str) -> Result<Context> {
    let dev = uverbs::devices()?
        .into_iter()
        .find(|d| d.name() == name)
        .ok_or_else(|| format!("no RDMA device {name}"))?;
    Ok(dev.open()?)
}

/// A QP of the C examples' shape on `pd`, owned: one send and
/// `recv_depth` receives of one SGE, `inline` bytes inline.
fn owned_qp(
    ctx: &Context,
    pd: &ProtectionDomain,
    recv_depth: u32,
    inline: u32,
) -> Result<OwnedQp<Buf>> {
    // librdmacm's rdma_create_ep makes a CQ for each queue; so do we.
    let send_cq = ctx.create_cq(2, None)?;
    let recv_cq = ctx.create_cq(recv_depth + 1, None)?;
    let init = QpInit::new(QpType::Rc, &send_cq, &recv_cq)
        .max_send_wr(1)
        .max_recv_wr(recv_depth)
        .max_inline(inline)
        .sq_sig_all(true);
    let qp = pd.create_qp(&init)?;
    OwnedQp::new(qp).map_err(|refused| refused.error.into())
}

/// A registered buffer of `len` bytes of `fill`, local write only (what
/// the C programs register: nothing remote).
fn buffer(pd: &ProtectionDomain, len: usize, fill: u8) -> Result<Buf> {
    pd.reg_buffer(vec![fill; len], AccessFlags::LOCAL_WRITE)
        .map_err(|e| e.error.into())
}

/// Polls `qp` until at least one request comes back (at most [`WAIT`]);
/// fails on one that did not succeed.
fn poll(qp: &OwnedQp<Buf>, what: &str) -> Result<Vec<Completed<Buf>>> {
    let deadline = Instant::now() + WAIT;
    let mut done = Vec::new();
    let mut empty = 0u32;
    loop {
        qp.poll(&mut done)?;
        if let Some(bad) = done.iter().find(|c| c.status() != Some(WcStatus::Success)) {
            return Err(format!("{what}: a request ended badly: {:?}", bad.ended).into());
        }
        if !done.is_empty() {
            return Ok(done);
        }
        if Instant::now() >= deadline {
            let state = qp.refresh_state().map(|s| format!("{s:?}"));
            let (sends, recvs) = qp.outstanding();
            println!(
                "c_peers: {what}: nothing within {WAIT:?}; our QP {} is {state:?} with \
                 {sends} sends and {recvs} receives outstanding",
                qp.qp_num()
            );
            show_qps();
            return Err(format!("{what}: no completion within {WAIT:?}").into());
        }
        // The C peer and rxe's kernel work share the CPUs with us.
        empty += 1;
        if empty % 64 == 0 {
            std::thread::yield_now();
        }
    }
}

/// Prints the kernel's view of every QP (`rdma res show qp`: state and
/// PSNs of ours and of the C peer's), when the `rdma` tool is there: what
/// a stalled exchange leaves to look at.
fn show_qps() {
    match Command::new("rdma").args(["res", "show", "qp"]).output() {
        Ok(out) => {
            print!("{}", String::from_utf8_lossy(&out.stdout));
            print!("{}", String::from_utf8_lossy(&out.stderr));
        }
        Err(e) => println!("c_peers: rdma res show qp: {e}"),
    }
}

/// A 16-byte SEND as the C examples make it: inline when the QP takes 16
/// inline bytes, else from a registered buffer.
fn send16(qp: &OwnedQp<Buf>, pd: &ProtectionDomain, bytes: &[u8; MSG]) -> Result<()> {
    if qp.caps().max_inline as usize >= MSG {
        qp.post_send(SendRequest::send_inline(1, bytes))
            .map_err(uverbs::Error::from)?;
    } else {
        println!("c_peers: the QP takes no 16 inline bytes; sending from a registered buffer");
        let mut buf = buffer(pd, MSG, 0)?;
        buf.buffer_mut().copy_from_slice(bytes);
        qp.post_send(SendRequest::send(1, Local::whole(buf)))
            .map_err(uverbs::Error::from)?;
    }
    Ok(())
}

/// Waits for the 16-byte SEND's completion and the 16-byte receive's (in
/// either order, or only the receive when `sent` is already true) and
/// returns what was received.
fn exchange(qp: &OwnedQp<Buf>, mut sent: bool, what: &str) -> Result<Vec<u8>> {
    let mut got = None;
    while !sent || got.is_none() {
        for c in poll(qp, what)? {
            if !c.is_recv {
                sent = true;
                continue;
            }
            let len = c.completion().map_or(0, |wc| wc.byte_len() as usize);
            if len != MSG {
                return Err(format!("{what}: received {len} bytes, not {MSG}").into());
            }
            let buf = c.into_memory().ok_or("a receive without its buffer")?;
            got = Some(buf.buffer().to_vec());
        }
    }
    Ok(got.expect("loop ends with it"))
}

// ---- The rdma_cm pair: rdma_server / rdma_client ---------------------------

/// The next cm event within [`WAIT`].
fn next(ch: &EventChannel, what: &str) -> Result<Event> {
    ch.wait_event(WAIT)?
        .ok_or_else(|| format!("{what}: no cm event within {WAIT:?}").into())
}

fn unexpected(what: &str, ev: &Event) -> Box<dyn Error> {
    format!("{what}: {} (status {})", ev.name(), ev.status).into()
}

/// siw: iWARP, whose QPs the kernel's CM drives (the one iWARP device
/// with a data path in uverbs).
fn is_iwarp(ctx: &Context) -> bool {
    ctx.driver_id() == Some(DriverId::SIW)
}

fn to(id: &CmId, qp: &OwnedQp<Buf>, state: QpState) -> Result<()> {
    qp.modify(&id.init_qp_attr(state)?)?;
    Ok(())
}

/// After ESTABLISHED on iWARP: the kernel moved the QP to RTS itself.
fn learn_rts(qp: &OwnedQp<Buf>) -> Result<()> {
    let state = qp.established()?;
    if state != QpState::Rts {
        return Err(format!("the QP is {state:?} after ESTABLISHED, not RTS").into());
    }
    Ok(())
}

/// The id's device must be the one asked for.
fn check_device(id: &CmId, ctx: &Context) -> Result<()> {
    if !id.is_on(ctx)? {
        return Err(format!(
            "the cm put the connection on another device than {}",
            ctx.device_name()
        )
        .into());
    }
    Ok(())
}

/// The Rust client of the C `rdma_server`.
fn rdma_server(opts: &Options) -> Result<()> {
    let dst = SocketAddr::from((opts.addr, opts.port));
    let mut peer = Peer::spawn_cm_example("rdma_server", opts)?;
    let ctx = open(&opts.device)?;
    let pd = ctx.alloc_pd()?;
    let deadline = Instant::now() + WAIT;
    let mut attempt = 1;
    // Connects, a new id each attempt, until the server listens.
    let (ch, id, qp) = loop {
        peer.alive()?;
        let ch = EventChannel::open()?;
        let id = ch.create_id(PortSpace::Tcp)?;
        match connect(&ctx, &pd, &ch, &id, dst)? {
            Ok(qp) => break (ch, id, qp),
            Err(why) if Instant::now() + RETRY_AFTER < deadline => {
                println!("c_peers: attempt {attempt} to {dst}: {why}; trying again");
                attempt += 1;
                std::thread::sleep(RETRY_AFTER);
            }
            Err(why) => return Err(format!("connect to {dst}: {why}").into()),
        }
    };
    println!(
        "c_peers: {} connected to rdma_server at {dst} (QP {}, attempt {attempt})",
        ctx.device_name(),
        qp.qp_num()
    );
    // What the C client sends is its zeroed send_msg; ours says who we are.
    let mine: [u8; MSG] = *b"uverbs client 16";
    send16(&qp, &pd, &mine)?;
    let got = exchange(&qp, false, "the 16-byte SEND and rdma_server's reply")?;
    if got != [0u8; MSG] {
        return Err(format!("rdma_server's reply is not its 16 zero bytes: {got:02x?}").into());
    }
    println!(
        "c_peers: rdma_server's 16 bytes arrived (its send_msg: zeros), as rdma_client gets them"
    );
    // As rdma_client: disconnect once the reply is in; the server
    // disconnects too, after its send completed. Whoever is first, the
    // id hears DISCONNECTED.
    hang_up(&id, &ch, qp, peer)
}

/// How librdmacm's examples end: `rdma_disconnect` (which fails when the
/// C peer was first), then the id hears DISCONNECTED; the QP goes and the
/// C peer must exit reporting `end 0`.
fn hang_up(id: &CmId, ch: &EventChannel, qp: OwnedQp<Buf>, peer: Peer) -> Result<()> {
    if let Err(e) = id.disconnect() {
        println!("c_peers: rdma_disconnect: {e} ({} was first)", peer.name);
    }
    let ev = next(ch, "disconnect")?;
    if !matches!(ev.kind, EventKind::Disconnected) {
        return Err(unexpected("disconnect", &ev));
    }
    drop(qp);
    let end = format!("{}: end 0", peer.name);
    peer.finish(&end).map(drop)
}

/// One connect attempt of `id` to `dst`: `Ok(Err(why))` when the server
/// is not there yet (rejected, refused, unreachable).
fn connect(
    ctx: &Context,
    pd: &ProtectionDomain,
    ch: &EventChannel,
    id: &CmId,
    dst: SocketAddr,
) -> Result<std::result::Result<OwnedQp<Buf>, String>> {
    id.resolve_addr(None, dst, RESOLVE_MS)?;
    let ev = next(ch, "resolve_addr")?;
    if !matches!(ev.kind, EventKind::AddrResolved) {
        return Err(unexpected("resolve_addr", &ev));
    }
    id.resolve_route(RESOLVE_MS)?;
    let ev = next(ch, "resolve_route")?;
    if !matches!(ev.kind, EventKind::RouteResolved) {
        return Err(unexpected("resolve_route", &ev));
    }
    check_device(id, ctx)?;
    let qp = owned_qp(ctx, pd, 1, MSG as u32)?;
    let iwarp = is_iwarp(ctx);
    to(id, &qp, QpState::Init)?;
    // The receive first, as rdma_client posts it before rdma_connect.
    qp.post_recv(RecvRequest::new(0, Local::whole(buffer(pd, MSG, 0xff)?)))?;
    match id.connect(&ConnParam::new(qp.qp_num())) {
        Ok(()) => {}
        // iWARP connects the TCP stream in the call.
        Err(e) if e.errno() == Some(uverbs::error::Errno::CONNREFUSED) => {
            return Ok(Err(format!("rdma_connect: {e}")));
        }
        Err(e) => return Err(e.into()),
    }
    let ev = next(ch, "connect")?;
    match &ev.kind {
        EventKind::ConnectResponse(_) if !iwarp => {
            // librdmacm's order: INIT again with the connected id's
            // attributes, RTR, RTS, then the RTU.
            to(id, &qp, QpState::Init)?;
            to(id, &qp, QpState::Rtr)?;
            to(id, &qp, QpState::Rts)?;
            id.establish()?;
        }
        EventKind::Established(_) if iwarp => learn_rts(&qp)?,
        EventKind::Rejected { .. } | EventKind::Unreachable | EventKind::ConnectError => {
            return Ok(Err(format!("{} (status {})", ev.name(), ev.status)));
        }
        _ => return Err(unexpected("connect", &ev)),
    }
    Ok(Ok(qp))
}

/// The Rust server of the C `rdma_client`.
fn rdma_client(opts: &Options) -> Result<()> {
    let ctx = open(&opts.device)?;
    let bind = SocketAddr::from((opts.addr, opts.port));
    let ch = EventChannel::open()?;
    let listener = ch.create_id(PortSpace::Tcp)?;
    listener.bind(bind)?;
    listener.listen(0)?;
    let mut peer = Peer::spawn_cm_example("rdma_client", opts)?;
    let deadline = Instant::now() + WAIT;
    let ev = loop {
        if let Some(ev) = ch.wait_event(Duration::from_millis(100))? {
            break ev;
        }
        peer.alive()?;
        if Instant::now() >= deadline {
            return Err(format!("no connect request within {WAIT:?}").into());
        }
    };
    let EventKind::ConnectRequest { id, .. } = ev.kind else {
        return Err(unexpected("listening", &ev));
    };
    check_device(&id, &ctx)?;
    let pd = ctx.alloc_pd()?;
    let qp = owned_qp(&ctx, &pd, 1, MSG as u32)?;
    to(&id, &qp, QpState::Init)?;
    to(&id, &qp, QpState::Rtr)?;
    to(&id, &qp, QpState::Rts)?;
    // As rdma_server: the receive posted before the accept.
    qp.post_recv(RecvRequest::new(0, Local::whole(buffer(&pd, MSG, 0xff)?)))?;
    id.accept(&ConnParam::new(qp.qp_num()))?;
    let ev = next(&ch, "accept")?;
    if !matches!(ev.kind, EventKind::Established(_)) {
        return Err(unexpected("accept", &ev));
    }
    if is_iwarp(&ctx) {
        learn_rts(&qp)?;
    }
    println!(
        "c_peers: rdma_client connected to {} at {bind} (QP {})",
        ctx.device_name(),
        qp.qp_num()
    );
    let got = exchange(&qp, true, "rdma_client's 16 bytes")?;
    if got != [0u8; MSG] {
        return Err(
            format!("rdma_client's 16 bytes are not its zeroed send_msg: {got:02x?}").into(),
        );
    }
    // Back they go, as rdma_server sends its 16 bytes.
    let echo: [u8; MSG] = got.as_slice().try_into()?;
    send16(&qp, &pd, &echo)?;
    let mut sent = false;
    while !sent {
        sent = poll(&qp, "the 16-byte reply")?.iter().any(|c| !c.is_recv);
    }
    println!("c_peers: rdma_client's 16 bytes arrived and went back");
    // As rdma_server: disconnect after the send completed.
    hang_up(&id, &ch, qp, peer)
}

// ---- ibv_rc_pingpong against the pingpong tool ---------------------------

/// The IPv4-mapped GID of `addr` (`::ffff:a.b.c.d`).
fn ipv4_mapped(addr: Ipv4Addr) -> Gid {
    Gid::from_raw(addr.to_ipv6_mapped().octets())
}

/// The index of `addr`'s RoCE v2 GID on port 1: what `-g` names.
fn roce_v2_gid_index(ctx: &Context, addr: Ipv4Addr) -> Result<u32> {
    let want = ipv4_mapped(addr);
    let table = ctx.query_gid_table()?;
    table
        .iter()
        .find(|e| e.port_num == 1 && e.gid == want && e.gid_type == GidType::RoceV2)
        .map(|e| e.gid_index)
        .ok_or_else(|| format!("{}: no RoCE v2 GID {want} in {table:?}", ctx.device_name()).into())
}

/// Both rc_pingpong pairings: the C `ibv_rc_pingpong` and the `pingpong`
/// example (the program next to this one) with the same options, the
/// GID of `--addr` and the server's port; the client of `--addr`. Each
/// must exit 0 and print `N iters in`.
fn rc_pingpong(opts: &Options) -> Result<()> {
    let ctx = open(&opts.device)?;
    if is_iwarp(&ctx) {
        return Err(format!(
            "{} is iWARP: its QPs reach RTS only through the connection manager, and \
             ibv_rc_pingpong connects by hand; it runs on RoCE (rxe) and InfiniBand only",
            opts.device
        )
        .into());
    }
    let gid_index = roce_v2_gid_index(&ctx, opts.addr)?;
    drop(ctx);
    let common: Vec<String> = [
        "-d",
        &opts.device,
        "-g",
        &gid_index.to_string(),
        "-p",
        &opts.port.to_string(),
        "-s",
        &opts.size.to_string(),
        "-n",
        &opts.iters.to_string(),
    ]
    .map(String::from)
    .into();
    let pingpong = std::env::current_exe()?.with_file_name("pingpong");
    let with = |first: &[&str], last: &[&str]| -> Vec<String> {
        let mut v: Vec<String> = first.iter().map(|a| a.to_string()).collect();
        v.extend(common.iter().cloned());
        v.extend(last.iter().map(|a| a.to_string()));
        v
    };
    let addr = opts.addr.to_string();
    let passed = format!("{} iters in", opts.iters);
    if opts.pairing == Pairing::RcPingpongServer {
        // Ours connects again while the C server does not listen yet.
        let c = Peer::spawn("ibv_rc_pingpong", "ibv_rc_pingpong".as_ref(), &common)?;
        let ours = Peer::spawn("pingpong", &pingpong, &with(&["--client", &addr], &[]))?;
        ours.finish(&passed)?;
        c.finish(&passed).map(drop)
    } else {
        // The C client does not: it starts once ours listens.
        let mut ours = Peer::spawn("pingpong", &pingpong, &with(&["--server"], &[]))?;
        ours.wait_for("listening on")?;
        let c = Peer::spawn(
            "ibv_rc_pingpong",
            "ibv_rc_pingpong".as_ref(),
            &with(&[], &[&addr]),
        )?;
        c.finish(&passed)?;
        ours.finish(&passed).map(drop)
    }
}

// ---- perftest against the perf tool ----------------------------------------

/// Both perftest pairings: `ib_<test>` and the `perf` tool (the program
/// next to this one) with the same test, size, iterations and port; by
/// hand on RoCE with the RoCE v2 GID of `--addr` on both sides, through
/// the rdma_cm at `--addr` (perftest's `-R`) on iWARP. Each must exit 0,
/// perftest with its result row, perf with its closing line.
fn perftest(opts: &Options) -> Result<()> {
    let test = opts.test.ok_or("--test is required")?;
    let ctx = open(&opts.device)?;
    let iwarp = is_iwarp(&ctx);
    let (size, iters, port) = (
        opts.size.to_string(),
        opts.iters.to_string(),
        opts.port.to_string(),
    );
    let addr = opts.addr.to_string();
    let mut c_args: Vec<String> = [
        "-d",
        &opts.device,
        "-F",
        "-p",
        &port,
        "-s",
        &size,
        "-n",
        &iters,
    ]
    .map(String::from)
    .into();
    let mut ours: Vec<String> = [
        "--test",
        test.name(),
        "--device",
        &opts.device,
        "--port",
        &port,
        "--size",
        &size,
        "--iters",
        &iters,
    ]
    .map(String::from)
    .into();
    if iwarp {
        // An iWARP QP reaches RTS only through the cm: perftest's -R.
        c_args.push("-R".into());
        ours.extend(["--cm".into(), addr.clone()]);
    } else {
        let gid = roce_v2_gid_index(&ctx, opts.addr)?.to_string();
        c_args.extend(["-x".into(), gid.clone()]);
        ours.extend(["--gid-index".into(), gid]);
    }
    drop(ctx);
    let program = format!("ib_{}", test.name());
    let perf = std::env::current_exe()?.with_file_name("perf");
    // perf's last line before its result: it ended the run as the C
    // program does (`tools/perf/side.rs`, `Ending`).
    let done = format!("ended as ib_{}'s does", test.name());
    let c_serves = opts.pairing == Pairing::PerftestServer;
    // What the C program prints once it has run: its result row's header
    // (its write_bw server: the report our client sent), except read_lat's
    // server, which only answers READs and prints its banner.
    let (c_expect, row_expected) = if c_serves && test == Test::ReadLat {
        ("RDMA_Read Latency Test", false)
    } else {
        ("#bytes", true)
    };
    let c_out = if c_serves {
        let c = Peer::spawn("perftest", program.as_ref(), &c_args)?;
        // perf's client retries its connect while perftest does not listen.
        let mut client = vec!["--client".to_string(), addr.clone()];
        client.extend(ours);
        let ours = Peer::spawn("perf", &perf, &client)?;
        ours.finish(&done)?;
        c.finish(c_expect)?
    } else {
        let mut server = vec!["--server".to_string()];
        server.extend(ours);
        let mut ours = Peer::spawn("perf", &perf, &server)?;
        // perftest's client does not retry: it starts once perf listens.
        ours.wait_for("listening on")?;
        c_args.push(addr);
        let c = Peer::spawn("perftest", program.as_ref(), &c_args)?;
        let out = c.finish(c_expect)?;
        ours.finish(&done)?;
        out
    };
    let name = program;
    if !row_expected {
        println!("c_peers: {name} (server) answered the READs; its client, perf, has the result");
        return Ok(());
    }
    // The result row: message size and iterations first (its bw server
    // prints the report our client sent).
    let row = c_out.lines().any(|l| {
        let mut f = l.trim_start_matches("perftest| ").split_whitespace();
        f.next() == Some(size.as_str()) && f.next() == Some(iters.as_str())
    });
    if !row {
        return Err(format!("{name} printed no result row for {size} B x {iters}").into());
    }
    println!("c_peers: {name}'s result row is there");
    Ok(())
}
