//! `ibv_rc_pingpong` in pure Rust, the same on the wire: without `--cm`
//! this program and rdma-core's C `ibv_rc_pingpong` are each other's peer,
//! in either role, on RoCE (rxe) and InfiniBand.
//!
//! ```text
//! pingpong [OPTIONS]                       both here: a server, and a copy of this program
//!                                          spawned as its client, on every rxe device
//! pingpong --server [OPTIONS]              a server, waiting for one client on --port
//!                                          (ibv_rc_pingpong without a host)
//! pingpong [--client] HOST [OPTIONS]       a client of the server on HOST
//! pingpong --cm [--server [--bind ADDR:PORT] | --client --connect ADDR:PORT] [OPTIONS]
//!                                          connected by the RDMA connection manager instead
//!                                          (no role: both here, the client to 192.0.2.1)
//!
//! OPTIONS, with ibv_rc_pingpong's spellings and defaults:
//!   -p, --port PORT        TCP port of the exchange (18515)
//!   -d, --ib-dev, --device NAME   the RDMA device (default: every device;
//!                          rxe, and with --cm also siw)
//!   -i, --ib-port PORT     the device's port (1)
//!   -s, --size BYTES       message size (4096)
//!   -m, --mtu BYTES        path MTU: 256, 512, 1024, 2048, 4096 (1024)
//!   -r, --rx-depth N       receives posted at a time (500)
//!   -n, --iters N          messages each way (1000)
//!   -l, --sl SL            service level (0)
//!   -e, --events           sleep on CQ events (= --wait event)
//!   -g, --gid-idx, --gid-index I   the local GID's index (see below)
//! and this program's own:
//!   --wait busy|event      how a side waits for a completion (busy)
//!   --write-size BYTES     --cm: the RDMA WRITEs' size (65536)
//! ```
//!
//! Run ours against the C tool (two hosts, or one with both sides on one
//! device):
//!
//! ```text
//! host A:  ibv_rc_pingpong -d rxe0 -g 1              (or: pingpong --server -d rxe0 -g 1)
//! host B:  pingpong --client A -d rxe0 -g 1         (or: ibv_rc_pingpong -d rxe0 -g 1 A)
//! ```
//!
//! The wire (`pingpong/exchange.rs` has the details): the client connects
//! to the server's TCP port and the two swap rc_pingpong's 52-byte
//! messages (`"%04x:%06x:%06x:%s"`: LID, QPN, a random 24-bit PSN, the
//! GID in wire form) and the client's `"done"`; the server moves its QP to
//! RTR and RTS before it answers, the client after. Both QPs get
//! rc_pingpong's attributes: INIT with no remote access, RTR with the
//! path MTU of `-m`, `max_dest_rd_atomic` 1, `min_rnr_timer` 12 and a GRH
//! (hop limit 1, source GID `-g`) when the peer sent a GID, RTS with
//! timeout 14, retry 7, RNR retry 7, `max_rd_atomic` 1. Then its traffic:
//! `-r` receives posted (again up to `-r` when one is left), and each side
//! SENDs `-s` bytes whenever its last SEND has completed and a message
//! has arrived, the client first, until each has sent and received `-n`.
//! Both print rc_pingpong's lines (the addresses, `N bytes in S seconds =
//! M Mbit/sec`, `N iters in S seconds = U usec/iter`); the client adds
//! the median and 99th percentile of its round trips.
//!
//! The GID: rc_pingpong sends the zero GID without `-g`, and a peer given
//! the zero GID builds no GRH, which RoCE cannot do without: run the C
//! program with `-g` on RoCE. This program, given no `-g` on an Ethernet
//! port, takes the RoCE v2 GID of the local address its TCP exchange runs
//! from (`Context::find_gid`: the client's source address towards HOST,
//! the address the server was reached at); where that address has none
//! (the exchange runs over another network, or loopback), the port's
//! first IPv4 RoCE v2 GID (else its first GID). It says which. A message
//! size must match on both sides (`-s`); a message of another size is an
//! error here.
//!
//! `--cm` (`pingpong/cm.rs`) is Rust on both sides: the connection manager
//! sets the QPs up (on rxe and on siw, whose iWARP QPs reach RTS only
//! through it), and the client measures two things: latency, `--iters`
//! round trips of a `--size`-byte SEND answered by a SEND, and bandwidth,
//! `--iters` RDMA WRITEs of `--write-size` bytes into the server's buffer
//! (at most 16 in flight, MB/s), whose bytes the server then checks. The
//! WRITEs need the server's address and rkey, which rc_pingpong's message
//! has no room for: they run with `--cm` only (the server's accept carries
//! them).
//!
//! `--wait` picks how both sides wait for a completion: `busy` polls the
//! CQ (no system call), yielding the CPU every 64 empty polls; `event`
//! polls [`SPIN_POLLS`] times, then arms the CQ (`req_notify`), polls once
//! more and sleeps on its completion channel until the kernel reports a
//! completion. On a machine with one CPU a busy poller competes with the
//! kernel work that produces its completion (rxe runs its requester,
//! responder and completer as deferred work); `cargo vm bench`'s
//! two-host part runs both on rxe0 to tell.
//!
//! Every wait is bounded (10 s; 30 s for the peer to connect or listen). `UVERBS_TRANSPORT=ioctl|write` picks the
//! transport; `cargo vm demo` runs this in a VM on rxe0, `cargo vm test`
//! runs it against the C `ibv_rc_pingpong` in both roles on rxe0 and
//! `--cm` across two guests on rxe0 and on siw0 (tests/vm/README.md).

use std::error::Error;
use std::hash::{BuildHasher, Hasher};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, ToSocketAddrs, UdpSocket};
use std::os::fd::AsRawFd;
use std::process::{Child, Command, ExitCode};
use std::time::{Duration, Instant};

use accept::accept_within;
use exchange::Dest;
use memmap2::MmapMut;
use uverbs::cq::CompletionChannel;
use uverbs::device::{DriverId, GidType, LinkLayer, OpenOptions};
use uverbs::qp::{Mtu, QpAttr, QpState};
use uverbs::uverbs_uapi::ib_uverbs_qp_dest;
use uverbs::wr::{
    Payload, RecvWr, Remote, SendOp, SendWr, Sge, WcOpcode, WcStatus, WorkCompletion,
};
use uverbs::{
    AccessFlags, CompletionQueue, Context, Device, MemoryRegion, QpInit, QpType, QueuePair,
};

#[path = "pingpong/cm.rs"]
mod cm;
#[path = "pingpong/exchange.rs"]
mod exchange;
// Shared with tools/perf.rs: the bounded accept.
#[path = "common/accept.rs"]
mod accept;
// Shared with tools/perf.rs: the bounded wait for the client's process.
#[path = "common/reap.rs"]
mod reap;

type Result<T, E = Box<dyn Error>> = std::result::Result<T, E>;

/// How long any single wait (a completion, the exchange, the peer
/// process) may take.
const WAIT: Duration = Duration::from_secs(10);
/// How long a server waits for its client to connect, and a client for
/// its server to listen: the peer may be another program, starting at the
/// same time.
const EXCHANGE_WAIT: Duration = Duration::from_secs(30);
/// RDMA WRITEs in flight at once in the bandwidth run.
const WINDOW: usize = 16;
/// With `--wait event`: empty polls before the CQ is armed and the side
/// sleeps on its completion channel.
const SPIN_POLLS: u32 = 200;

const USAGE: &str = "usage: pingpong [--server | [--client] HOST] [OPTIONS]
       pingpong --cm [--server [--bind ADDR:PORT] | --client --connect ADDR:PORT] [OPTIONS]
OPTIONS: [-p PORT] [-d DEVICE] [-i IB_PORT] [-s BYTES] [-m MTU] [-r RX_DEPTH] [-n ITERS]
         [-l SL] [-e] [-g GID_INDEX] [--wait busy|event] [--write-size BYTES]
         (long forms: --port --ib-dev|--device --ib-port --size --mtu --rx-depth --iters
          --sl --events --gid-idx|--gid-index)";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Role {
    /// Server here, client spawned: the default.
    Both,
    Server,
    Client,
}

/// How a side waits for a completion (`--wait`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Wait {
    /// Poll the CQ, yielding the CPU every 64 empty polls.
    Busy,
    /// Poll [`SPIN_POLLS`] times, then arm the CQ and sleep on its
    /// completion channel.
    Event,
}

impl Wait {
    fn name(self) -> &'static str {
        match self {
            Wait::Busy => "busy",
            Wait::Event => "event",
        }
    }
}

#[derive(Clone, Debug)]
struct Options {
    role: Role,
    /// Connect with the RDMA connection manager (`--cm`).
    cm: bool,
    device: Option<String>,
    /// The server's host (the client's HOST).
    host: Option<String>,
    /// `--cm`: `--bind` (or `--listen`) of the server, `--connect` of the
    /// client.
    cm_addr: Option<String>,
    /// TCP port of the exchange (`-p`).
    port: u16,
    /// The device's port (`-i`).
    ib_port: u8,
    size: usize,
    mtu: Mtu,
    rx_depth: u32,
    iters: usize,
    sl: u8,
    /// `-g`; `None`: see [`gid_index`].
    gid_index: Option<u32>,
    write_size: usize,
    wait: Wait,
}

impl Default for Options {
    /// ibv_rc_pingpong's defaults.
    fn default() -> Self {
        Options {
            role: Role::Both,
            cm: false,
            device: None,
            host: None,
            cm_addr: None,
            port: 18515,
            ib_port: 1,
            size: 4096,
            mtu: Mtu::Mtu1024,
            rx_depth: 500,
            iters: 1000,
            sl: 0,
            gid_index: None,
            write_size: 64 << 10,
            wait: Wait::Busy,
        }
    }
}

/// A number as `strtoul(s, NULL, 0)` takes it (decimal or `0x` hex), in
/// `T`'s range.
fn number<T: TryFrom<u64>>(v: std::ffi::OsString, name: &str) -> Result<T, String> {
    let s = v.to_string_lossy();
    let n = match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => s.parse(),
    };
    n.ok()
        .and_then(|n| T::try_from(n).ok())
        .ok_or_else(|| format!("{name} wants a number in range, got {s:?}"))
}

/// The value of the option just read.
fn value(p: &mut lexopt::Parser) -> Result<std::ffi::OsString, String> {
    p.value().map_err(|e| e.to_string())
}

impl Options {
    /// `Err("")` asks for the usage only.
    fn parse(args: impl IntoIterator<Item = std::ffi::OsString>) -> Result<Options, String> {
        use lexopt::prelude::*;
        let mut o = Options::default();
        let mut role = None;
        let mut p = lexopt::Parser::from_args(args);
        let text = |v: std::ffi::OsString| v.string().map_err(|e| e.to_string());
        while let Some(arg) = p.next().map_err(|e| e.to_string())? {
            let name = match &arg {
                Short(c) => format!("-{c}"),
                Long(l) => format!("--{l}"),
                Value(_) => String::new(),
            };
            match arg {
                Long("server") => role = Some(Role::Server),
                Long("client") => role = Some(Role::Client),
                Long("cm") => o.cm = true,
                Long("bind" | "listen" | "connect") => o.cm_addr = Some(text(value(&mut p)?)?),
                Short('d') | Long("ib-dev" | "device") => o.device = Some(text(value(&mut p)?)?),
                Short('p') | Long("port") => o.port = number(value(&mut p)?, &name)?,
                Short('i') | Long("ib-port") => o.ib_port = number(value(&mut p)?, &name)?,
                Short('s') | Long("size") => o.size = number(value(&mut p)?, &name)?,
                Short('m') | Long("mtu") => {
                    o.mtu = match number::<u32>(value(&mut p)?, &name)? {
                        256 => Mtu::Mtu256,
                        512 => Mtu::Mtu512,
                        1024 => Mtu::Mtu1024,
                        2048 => Mtu::Mtu2048,
                        4096 => Mtu::Mtu4096,
                        m => return Err(format!("{name}: no MTU of {m} bytes")),
                    }
                }
                Short('r') | Long("rx-depth") => o.rx_depth = number(value(&mut p)?, &name)?,
                Short('n') | Long("iters") => o.iters = number(value(&mut p)?, &name)?,
                Short('l') | Long("sl") => o.sl = number(value(&mut p)?, &name)?,
                Short('e') | Long("events") => o.wait = Wait::Event,
                Short('g') | Long("gid-idx" | "gid-index") => {
                    o.gid_index = Some(number(value(&mut p)?, &name)?)
                }
                Long("write-size") => o.write_size = number(value(&mut p)?, &name)?,
                Long("wait") => {
                    o.wait = match text(value(&mut p)?)?.as_str() {
                        "busy" => Wait::Busy,
                        "event" => Wait::Event,
                        v => return Err(format!("--wait wants busy or event, got {v:?}")),
                    }
                }
                Short('h') | Long("help") => return Err(String::new()),
                Value(host) if o.host.is_none() => o.host = Some(text(host)?),
                other => return Err(other.unexpected().to_string()),
            }
        }
        // A host alone makes a client, as for ibv_rc_pingpong.
        o.role = role.unwrap_or(if o.host.is_some() {
            Role::Client
        } else {
            Role::Both
        });
        if o.size == 0 || o.size > 1 << 30 || o.write_size == 0 || o.write_size > 1 << 30 {
            return Err("--size and --write-size must be 1 B ..= 1 GiB".into());
        }
        if o.iters == 0 || o.iters > 1_000_000 {
            return Err("--iters must be 1 ..= 1000000".into());
        }
        if o.rx_depth == 0 || o.ib_port == 0 {
            return Err("--rx-depth and --ib-port must be at least 1".into());
        }
        if o.role == Role::Client && o.host.is_none() && !(o.cm && o.cm_addr.is_some()) {
            return Err("the client needs the server's HOST".into());
        }
        if o.role != Role::Client && o.host.is_some() {
            return Err("only a client takes a HOST".into());
        }
        Ok(o)
    }

    /// `--cm`: where the server listens, or the client connects.
    fn cm_addr(&self) -> String {
        match (&self.cm_addr, &self.host) {
            (Some(addr), _) => addr.clone(),
            (None, Some(host)) => format!("{host}:{}", self.port),
            (None, None) => format!("0.0.0.0:{}", self.port),
        }
    }

    /// The arguments that make a spawned client match this run: of the
    /// server on `host` (by hand) or at `addr` (`--cm`), port `port`.
    fn client_args(&self, device: Option<&str>, host: &str, port: u16) -> Vec<String> {
        let mut v: Vec<String> = vec!["--client".into()];
        if self.cm {
            v.extend(["--cm".into(), "--connect".into(), format!("{host}:{port}")]);
        } else {
            v.push(host.into());
        }
        if let Some(device) = device {
            v.extend(["-d".into(), device.into()]);
        }
        if let Some(g) = self.gid_index {
            v.extend(["-g".into(), g.to_string()]);
        }
        let mtu = 128usize << self.mtu as u8;
        for (flag, n) in [
            ("-p", usize::from(port)),
            ("-i", usize::from(self.ib_port)),
            ("-s", self.size),
            ("-m", mtu),
            ("-r", self.rx_depth as usize),
            ("-n", self.iters),
            ("-l", usize::from(self.sl)),
            ("--write-size", self.write_size),
        ] {
            v.push(flag.into());
            v.push(n.to_string());
        }
        v.extend(["--wait".into(), self.wait.name().into()]);
        v
    }
}

fn main() -> ExitCode {
    let opts = match Options::parse(std::env::args_os().skip(1)) {
        Ok(o) => o,
        Err(e) => {
            if !e.is_empty() {
                eprintln!("pingpong: {e}");
            }
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    let result = match opts.role {
        Role::Both if opts.cm => cm::both(&opts),
        Role::Server if opts.cm => cm::listen(&opts.cm_addr()).and_then(|(ch, listener, local)| {
            println!("pingpong server (cm): listening on {local}");
            cm::server(&opts, &ch, &listener, None)
        }),
        Role::Client if opts.cm => cm::client(&opts),
        Role::Both => both_on_each_device(&opts),
        Role::Server => open(&opts).and_then(|ctx| {
            let listener = exchange::listen(opts.port)?;
            println!(
                "pingpong server: {} listening on {}",
                ctx.device_name(),
                listener.local_addr()?
            );
            server(&ctx, &listener, &opts, None)
        }),
        Role::Client => open(&opts).and_then(|ctx| client(&ctx, &opts)),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("pingpong: error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The devices to run on: `--device`, or every device.
fn devices(opts: &Options) -> Result<Vec<Device>> {
    let all = match &opts.device {
        Some(name) => vec![uverbs::Device::by_name(name)?],
        None => uverbs::devices()?,
    };
    if all.is_empty() {
        return Err("no RDMA device".into());
    }
    Ok(all)
}

/// The devices of the runs without the cm: rxe (siw's iWARP QPs reach RTS
/// only through the connection manager: `--cm`).
fn connects_by_hand(dev: &Device) -> bool {
    dev.driver_id() == Some(DriverId::RXE)
}

/// The first device of [`devices`] whose QPs pingpong connects by hand.
fn data_path_device(opts: &Options) -> Result<Device> {
    Ok(devices(opts)?
        .into_iter()
        .find(connects_by_hand)
        .ok_or("no rxe device: without --cm pingpong connects RoCE QPs by hand (siw connects only with --cm)")?)
}

/// Opens [`data_path_device`] (`UVERBS_TRANSPORT` picks the transport).
fn open(opts: &Options) -> Result<Context> {
    Ok(data_path_device(opts)?.open_with(&OpenOptions::new())?)
}

/// The default run: on every device, this process serves and a copy of
/// this program, spawned, is the client, over the device's IPv4 address
/// (as its port's GID table shows it; 127.0.0.1 if it has none) and a
/// port of the kernel's choosing; each side finds its GID by that address.
fn both_on_each_device(opts: &Options) -> Result<()> {
    for dev in devices(opts)? {
        if !connects_by_hand(&dev) {
            println!(
                "pingpong {}: skipped: an iWARP QP connects only through the connection manager (run pingpong --cm)",
                dev.name()
            );
            continue;
        }
        let ctx = dev.open_with(&OpenOptions::new())?;
        let host = match first_ipv4_gid(&ctx, opts.ib_port)? {
            Some(e) => e.gid.to_ip(),
            None => IpAddr::V4(Ipv4Addr::LOCALHOST),
        };
        let listener = TcpListener::bind(SocketAddr::new(host, 0))?;
        let port = listener.local_addr()?.port();
        println!(
            "pingpong {} over {}: server here (pid {}), client spawned, rc_pingpong's exchange over TCP {host}:{port}",
            dev.name(),
            ctx.transport_kind(),
            std::process::id()
        );
        let mut child = Command::new(std::env::current_exe()?)
            .args(opts.client_args(Some(dev.name()), &host.to_string(), port))
            .spawn()?;
        let served = server(&ctx, &listener, opts, Some(&mut child));
        let status = reap(&mut child)?;
        served?;
        if !status.success() {
            return Err(format!("the client failed ({status})").into());
        }
    }
    Ok(())
}

/// Waits at most [`WAIT`] for `child` to exit, then kills it.
fn reap(child: &mut Child) -> Result<std::process::ExitStatus> {
    reap::reap(child, WAIT, "the client")
}

// ---- One side: its QP, CQ and buffer -------------------------------------

/// Offsets in each side's buffer: the message sent, the message received,
/// and the RDMA WRITE area of `--cm` (the target on the server, the source
/// on the client). Each rounded to pages.
#[derive(Clone, Copy)]
struct Layout {
    size: usize,
    write_size: usize,
}

impl Layout {
    const SEND: usize = 0;
    fn page(n: usize) -> usize {
        n.div_ceil(4096) * 4096
    }
    fn recv(&self) -> usize {
        Self::page(self.size)
    }
    fn write_area(&self) -> usize {
        2 * Self::page(self.size)
    }
    fn len(&self) -> usize {
        self.write_area() + Self::page(self.write_size)
    }
}

/// Everything one side owns. Fields drop in order: the QP first (it stops
/// using the buffer), the MR before the memory it covers.
struct Side {
    qp: QueuePair,
    cq: CompletionQueue,
    /// The CQ's completion channel with `--wait event`.
    channel: Option<CompletionChannel>,
    mr: MemoryRegion,
    buf: MmapMut,
    layout: Layout,
}

impl Side {
    fn new(ctx: &Context, opts: &Options) -> Result<Side> {
        let layout = Layout {
            size: opts.size,
            write_size: if opts.cm { opts.write_size } else { 0 },
        };
        let pd = ctx.alloc_pd()?;
        let channel = match opts.wait {
            Wait::Busy => None,
            Wait::Event => Some(ctx.create_comp_channel()?),
        };
        // rc_pingpong's CQ holds rx_depth + 1; --cm's WRITE window more.
        let cqe = (opts.rx_depth + 1).max(2 * WINDOW as u32 + 8);
        let cq = ctx.create_cq(cqe, channel.as_ref())?;
        let init = QpInit::new(QpType::Rc, &cq, &cq)
            .max_send_wr(2 * WINDOW as u32)
            .max_recv_wr(opts.rx_depth);
        let qp = pd.create_qp(&init)?;
        let mut buf = MmapMut::map_anon(layout.len())?;
        let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;
        // SAFETY: `buf` is a mapping of its own that outlives the MR (see
        // the field order of `Side`).
        let mr = unsafe { pd.reg_mr(buf.as_mut_ptr(), buf.len(), access)? };
        Ok(Side {
            qp,
            cq,
            channel,
            mr,
            buf,
            layout,
        })
    }

    fn addr(&self, offset: usize) -> u64 {
        self.buf.as_ptr() as u64 + offset as u64
    }

    fn sge(&self, offset: usize, len: usize) -> [Sge; 1] {
        [Sge {
            addr: self.addr(offset),
            length: len as u32,
            lkey: self.mr.lkey(),
        }]
    }

    /// Posts `n` receives into the receive area.
    fn post_recvs(&self, n: u32) -> Result<()> {
        let sge = self.sge(self.layout.recv(), self.layout.size);
        for _ in 0..n {
            // SAFETY: the receive area is only written by the device: no
            // receive's bytes are read (by hand) or they are read after
            // its completion and before the next message can arrive
            // (`--cm`: one receive at a time, re-posted after the read).
            unsafe {
                self.qp.post_recv(&[RecvWr {
                    wr_id: 0,
                    sges: &sge,
                }])?
            };
        }
        Ok(())
    }

    /// Posts the one receive of `--cm`.
    fn post_recv(&self) -> Result<()> {
        self.post_recvs(1)
    }

    /// Posts a signalled send of `op` from `sges`.
    fn post(&self, wr_id: u64, op: SendOp, sges: &[Sge]) -> Result<()> {
        let wr = SendWr::new(wr_id, op, Payload::Sges(sges));
        // SAFETY: every caller leaves the bytes of `sges` alone until this
        // request's completion is polled.
        unsafe { self.qp.post_send(&[wr])? };
        Ok(())
    }

    /// Waits (as `--wait` says, at most [`WAIT`]) for at least one
    /// completion; fails on one that did not succeed.
    fn poll<'a>(&self, out: &'a mut [WorkCompletion], what: &str) -> Result<&'a [WorkCompletion]> {
        let deadline = Instant::now() + WAIT;
        let mut empty = 0u32;
        // With `--wait event`: the CQ was armed since the last poll, so a
        // completion after that poll raises an event (one before it was
        // seen by it).
        let mut armed = false;
        loop {
            let n = self.cq.poll(out)?;
            if let Some(bad) = out[..n].iter().find(|wc| wc.status() != WcStatus::Success) {
                return Err(format!("{what}: a completion failed: {bad:?}").into());
            }
            if n > 0 {
                return Ok(&out[..n]);
            }
            if Instant::now() >= deadline {
                return Err(format!("{what}: no completion within {WAIT:?}").into());
            }
            empty += 1;
            match &self.channel {
                Some(channel) if armed => {
                    sleep_until_event(&self.cq, channel, deadline)?;
                    (armed, empty) = (false, 0);
                }
                Some(_) if empty >= SPIN_POLLS => {
                    self.cq.req_notify(false)?;
                    armed = true;
                }
                // Polling makes no system call; on a machine with few CPUs
                // let the other side (and the kernel's rxe work) run now
                // and then.
                _ if empty % 64 == 0 => std::thread::yield_now(),
                _ => {}
            }
        }
    }

    /// The message number stamped into the first bytes of a message.
    fn stamp(&mut self, at: usize, i: usize) {
        let n = self.layout.size.min(4);
        self.buf[at..at + n].copy_from_slice(&(i as u32).to_le_bytes()[..n]);
    }

    fn stamped(&self, at: usize, i: usize) -> bool {
        let n = self.layout.size.min(4);
        self.buf[at..at + n] == (i as u32).to_le_bytes()[..n]
    }
}

/// Sleeps until `channel` reports an event (the armed `cq` got a
/// completion) or `deadline` passes; reads and acknowledges the event.
/// An event left over from an earlier arm only makes the caller poll once
/// more.
fn sleep_until_event(
    cq: &CompletionQueue,
    channel: &CompletionChannel,
    deadline: Instant,
) -> Result<()> {
    let mut pfd = libc::pollfd {
        fd: channel.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    let ms = deadline
        .saturating_duration_since(Instant::now())
        .as_millis()
        .clamp(1, i32::MAX as u128) as i32;
    // SAFETY: one valid pollfd, for the duration of the call.
    let ready = unsafe { libc::poll(&mut pfd, 1, ms) };
    if ready < 0 {
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::Interrupted {
            return Err(format!("poll on the completion channel: {e}").into());
        }
    }
    if ready > 0 {
        channel.get_event()?;
        cq.ack_events(1)?;
    }
    Ok(())
}

/// The bytes the client writes: a pattern the server can check.
fn pattern(i: usize) -> u8 {
    (i as u8).wrapping_mul(7) ^ (i >> 9) as u8
}

// ---- The measured phases of --cm -------------------------------------------

/// The server's half of the latency run: answers `opts.iters` pings, each
/// by re-posting the receive first (so the next ping finds it), then a
/// reply with the same number. One receive stays posted at the end.
fn answer_pings(side: &mut Side, opts: &Options) -> Result<usize> {
    let mut wcs = [WorkCompletion::default(); 4];
    let (mut pings, mut replies) = (0, 0);
    while replies < opts.iters {
        for wc in side.poll(&mut wcs, "server")? {
            match wc.opcode() {
                Some(WcOpcode::Recv) => {
                    if wc.byte_len() as usize != opts.size
                        || !side.stamped(side.layout.recv(), pings)
                    {
                        return Err(format!(
                            "ping {pings}: wrong message ({} bytes)",
                            wc.byte_len()
                        )
                        .into());
                    }
                    side.post_recv()?;
                    side.stamp(Layout::SEND, pings);
                    let sge = side.sge(Layout::SEND, opts.size);
                    side.post(pings as u64, SendOp::Send { imm: None }, &sge)?;
                    pings += 1;
                }
                Some(WcOpcode::Send) => replies += 1,
                other => return Err(format!("server: unexpected completion {other:?}").into()),
            }
        }
    }
    Ok(pings)
}

/// The server's check of what the client's WRITEs left in its WRITE area.
fn check_write_area(side: &Side, opts: &Options) -> String {
    let target = &side.buf[side.layout.write_area()..][..opts.write_size];
    match target.iter().enumerate().find(|&(i, &b)| b != pattern(i)) {
        None => "verified".to_string(),
        Some((i, b)) => format!("mismatch at byte {i}: {b:#04x}"),
    }
}

/// Posts a `size`-byte SEND (work request `wr_id`) stamped `n` and waits
/// for both its completion and the peer's answer (a receive); the time from
/// the post to the later of the two.
fn ping(side: &mut Side, wr_id: u64, n: usize, size: usize, what: &str) -> Result<Duration> {
    side.stamp(Layout::SEND, n);
    let sge = side.sge(Layout::SEND, size);
    let mut wcs = [WorkCompletion::default(); 4];
    let start = Instant::now();
    side.post(wr_id, SendOp::Send { imm: None }, &sge)?;
    let (mut sent, mut answered) = (false, false);
    while !(sent && answered) {
        for wc in side.poll(&mut wcs, what)? {
            match wc.opcode() {
                Some(WcOpcode::Send) => sent = true,
                Some(WcOpcode::Recv) => answered = true,
                other => return Err(format!("{what}: unexpected completion {other:?}").into()),
            }
        }
    }
    Ok(start.elapsed())
}

/// The client's latency run: `opts.iters` pings, each waiting for both its
/// completion and the reply; the round-trip times. One receive stays
/// posted at the end.
fn measure_latency(side: &mut Side, opts: &Options) -> Result<Vec<Duration>> {
    let mut rtt = Vec::with_capacity(opts.iters);
    for i in 0..opts.iters {
        rtt.push(ping(side, i as u64, i, opts.size, "client")?);
        if !side.stamped(side.layout.recv(), i) {
            return Err(format!("reply {i} carries the wrong number").into());
        }
        side.post_recv()?;
    }
    Ok(rtt)
}

/// The client's bandwidth run: `opts.iters` RDMA WRITEs of the pattern into
/// `remote` (the server's WRITE area), [`WINDOW`] in flight; the seconds.
fn stream_writes(side: &mut Side, opts: &Options, remote: Remote) -> Result<f64> {
    let src = side.layout.write_area();
    for (i, b) in side.buf[src..src + opts.write_size].iter_mut().enumerate() {
        *b = pattern(i);
    }
    let sge = side.sge(src, opts.write_size);
    let mut wcs = [WorkCompletion::default(); 4];
    let start = Instant::now();
    let (mut posted, mut done) = (0, 0);
    while done < opts.iters {
        while posted < opts.iters && posted - done < WINDOW {
            side.post(posted as u64, SendOp::RdmaWrite { remote, imm: None }, &sge)?;
            posted += 1;
        }
        done += side.poll(&mut wcs, "client WRITE stream")?.len();
    }
    Ok(start.elapsed().as_secs_f64())
}

/// The client's latency line (`rtt`: its round trips).
fn print_latency(ctx: &Context, opts: &Options, rtt: &mut [Duration]) {
    rtt.sort();
    let at = |q: f64| rtt[((rtt.len() as f64 * q).ceil() as usize).clamp(1, rtt.len()) - 1];
    let micros = |d: Duration| d.as_secs_f64() * 1e6;
    println!(
        "pingpong {}{} over {}{}: latency: {} round trips of {} B SEND/RECV: median {:.1} µs, p99 {:.1} µs",
        ctx.device_name(),
        how(opts),
        ctx.transport_kind(),
        waiting(opts),
        rtt.len(),
        opts.size,
        micros(at(0.5)),
        micros(at(0.99)),
    );
}

/// What the printout says of the connection: ` (cm)` or nothing.
fn how(opts: &Options) -> &'static str {
    if opts.cm {
        " (cm)"
    } else {
        ""
    }
}

/// What the printout says of `--wait`.
fn waiting(opts: &Options) -> &'static str {
    match opts.wait {
        Wait::Busy => "",
        Wait::Event => ", waiting on events",
    }
}

/// The `--cm` client's printout: the latency and bandwidth lines.
fn report(ctx: &Context, opts: &Options, mut rtt: Vec<Duration>, secs: f64, verdict: &str) {
    print_latency(ctx, opts, &mut rtt);
    let bytes = (opts.iters * opts.write_size) as f64;
    println!(
        "pingpong {}{} over {}{}: bandwidth: {} RDMA WRITEs of {} B ({WINDOW} in flight): {:.1} MB in {:.3} s = {:.1} MB/s; server: {verdict}",
        ctx.device_name(),
        how(opts),
        ctx.transport_kind(),
        waiting(opts),
        opts.iters,
        opts.write_size,
        bytes / 1e6,
        secs,
        bytes / 1e6 / secs,
    );
}

// ---- Without the cm: ibv_rc_pingpong ----------------------------------------

/// The local GID's index: `-g`; without it, on an Ethernet port (RoCE,
/// which needs a GRH) the RoCE v2 GID of `local`, the address this side's
/// exchange runs from ([`Context::find_gid`]), else the port's first IPv4
/// RoCE v2 GID, else its first GID, said on stdout; on InfiniBand none (no
/// GRH, as rc_pingpong).
fn gid_index(ctx: &Context, opts: &Options, local: Option<IpAddr>) -> Result<Option<u32>> {
    if opts.gid_index.is_some() {
        return Ok(opts.gid_index);
    }
    if ctx.query_port(opts.ib_port)?.link_layer != LinkLayer::Ethernet {
        return Ok(None);
    }
    let found = match local {
        Some(addr) => ctx.find_gid(opts.ib_port, addr, GidType::RoceV2)?,
        None => None,
    };
    let (pick, why) = match (found, local) {
        (Some(e), Some(addr)) => (e, format!("the RoCE v2 GID of {addr}")),
        (_, local) => {
            let not_here =
                local.map_or(String::new(), |a| format!("{a} has no RoCE v2 GID here: "));
            match first_ipv4_gid(ctx, opts.ib_port)? {
                Some(e) => (e, format!("{not_here}the port's first IPv4 RoCE v2 GID")),
                None => {
                    let first = ctx
                        .query_gid_table()?
                        .into_iter()
                        .find(|e| e.port_num == opts.ib_port);
                    let first = first.ok_or_else(|| {
                        format!(
                            "{} port {}: an empty GID table",
                            ctx.device_name(),
                            opts.ib_port
                        )
                    })?;
                    (first, format!("{not_here}the port's first GID"))
                }
            }
        }
    };
    println!(
        "pingpong: no -g: GID index {} of {} port {} ({}, {:?}): {why}; give the C ibv_rc_pingpong -g {0}",
        pick.gid_index,
        ctx.device_name(),
        opts.ib_port,
        pick.gid.to_ip(),
        pick.gid_type,
    );
    Ok(Some(pick.gid_index))
}

/// The port's first RoCE v2 GID of an IPv4 address: the lowest index of
/// the address the port's netdev got first.
fn first_ipv4_gid(ctx: &Context, port: u8) -> Result<Option<uverbs::device::GidEntry>> {
    Ok(ctx
        .query_gid_table()?
        .into_iter()
        .filter(|e| e.port_num == port && e.gid_type == GidType::RoceV2 && e.gid.to_ip().is_ipv4())
        .min_by_key(|e| e.gid_index))
}

/// The local address the kernel sends from towards `host`:`port`: that of
/// a UDP socket connected there (no packet leaves); `None` if `host` does
/// not resolve or has no route.
fn source_addr(host: &str, port: u16) -> Option<IpAddr> {
    let dest = (host, port).to_socket_addrs().ok()?.next()?;
    let any = match dest {
        SocketAddr::V4(_) => SocketAddr::from((Ipv4Addr::UNSPECIFIED, 0)),
        SocketAddr::V6(_) => SocketAddr::from((std::net::Ipv6Addr::UNSPECIFIED, 0)),
    };
    let socket = UdpSocket::bind(any).ok()?;
    socket.connect(dest).ok()?;
    Some(socket.local_addr().ok()?.ip())
}

/// A random 24-bit PSN (rc_pingpong: `lrand48() & 0xffffff`).
fn random_psn() -> u32 {
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(std::process::id());
    h.finish() as u32 & 0xff_ffff
}

/// This side as the exchange describes it, and what connecting needs.
struct Local {
    dest: Dest,
    gid_index: Option<u32>,
    /// RoCE: the peer must send a GID.
    ethernet: bool,
}

/// rc_pingpong's set-up before the exchange: the QP to INIT (no remote
/// access), `--rx-depth` receives posted, this side's address (printed),
/// its GID found by `local`, the IP address the exchange runs from.
fn prepare(
    ctx: &Context,
    side: &Side,
    opts: &Options,
    role: &str,
    local: Option<IpAddr>,
) -> Result<Local> {
    to_init(&side.qp, opts)?;
    side.post_recvs(opts.rx_depth)?;
    let port = ctx.query_port(opts.ib_port)?;
    let ethernet = port.link_layer == LinkLayer::Ethernet;
    if !ethernet && port.lid == 0 {
        return Err(format!(
            "{} port {}: no local LID (is the port active?)",
            ctx.device_name(),
            opts.ib_port
        )
        .into());
    }
    let gid_index = gid_index(ctx, opts, local)?;
    let gid = match gid_index {
        Some(i) => ctx.query_gid(opts.ib_port, i)?,
        None => uverbs::device::Gid::default(),
    };
    let dest = Dest {
        lid: port.lid,
        qpn: side.qp.qp_num(),
        psn: random_psn(),
        gid,
    };
    println!("pingpong {role}:  local address:  {}", dest.describe());
    Ok(Local {
        dest,
        gid_index,
        ethernet,
    })
}

/// RESET to INIT as rc_pingpong (`pp_init_ctx`): no remote access.
fn to_init(qp: &QueuePair, opts: &Options) -> Result<()> {
    qp.modify(
        &QpAttr::new()
            .state(QpState::Init)
            .pkey_index(0)
            .port(opts.ib_port)
            .access_flags(AccessFlags::empty()),
    )?;
    Ok(())
}

/// RTR and RTS towards `peer` with rc_pingpong's attributes
/// (`pp_connect_ctx`): a GRH when the peer sent a GID.
fn to_rts(qp: &QueuePair, opts: &Options, me: &Local, peer: &Dest) -> Result<()> {
    let av = if peer.is_global() {
        let sgid = me.gid_index.ok_or(
            "the peer sent a GID and this side has none: give it -g (the local GID's index)",
        )?;
        let grh = QpAttr::roce_dest(peer.gid, sgid as u8, 1, opts.ib_port);
        ib_uverbs_qp_dest {
            dlid: peer.lid,
            sl: opts.sl,
            ..grh
        }
    } else if me.ethernet {
        return Err("the peer sent no GID, and RoCE needs one: run ibv_rc_pingpong with -g (the index of its GID)".into());
    } else {
        ib_uverbs_qp_dest {
            dlid: peer.lid,
            sl: opts.sl,
            port_num: opts.ib_port,
            ..Default::default()
        }
    };
    let rtr = QpAttr::new()
        .state(QpState::Rtr)
        .path_mtu(opts.mtu)
        .dest_qpn(peer.qpn)
        .rq_psn(peer.psn)
        .max_dest_rd_atomic(1)
        .min_rnr_timer(12)
        .av(av);
    let rts = QpAttr::new()
        .state(QpState::Rts)
        .timeout(14)
        .retry_cnt(7)
        .rnr_retry(7)
        .sq_psn(me.dest.psn)
        .max_rd_atomic(1);
    qp.modify(&rtr)?;
    qp.modify(&rts)?;
    Ok(())
}

/// rc_pingpong's traffic (its `parse_single_wc`): each side SENDs its
/// message whenever its last SEND has completed and a message has arrived
/// (the client sends its first at once), until it has sent and received
/// `--iters`; a receive is re-posted up to `--rx-depth` when one is left.
/// The time from each SEND's post to the next one's (on the client: the
/// round trips).
fn rc_traffic(side: &Side, opts: &Options, client: bool) -> Result<Vec<Duration>> {
    const RECV: u8 = 1;
    const SEND: u8 = 2;
    let sge = side.sge(Layout::SEND, opts.size);
    let (mut sent, mut received, mut routs) = (0, 0, opts.rx_depth);
    let mut pending = RECV;
    let mut times = Vec::with_capacity(opts.iters);
    let mut posted = Instant::now();
    if client {
        side.post(0, SendOp::Send { imm: None }, &sge)?;
        pending |= SEND;
    }
    let mut wcs = [WorkCompletion::default(); 2];
    while sent < opts.iters || received < opts.iters {
        for wc in side.poll(&mut wcs, "the ping-pong")? {
            match wc.opcode() {
                Some(WcOpcode::Send) => {
                    sent += 1;
                    pending &= !SEND;
                }
                Some(WcOpcode::Recv) => {
                    if wc.byte_len() as usize != opts.size {
                        return Err(format!(
                            "message {received}: {} bytes, not {} (is the peer's -s the same?)",
                            wc.byte_len(),
                            opts.size
                        )
                        .into());
                    }
                    routs -= 1;
                    if routs <= 1 {
                        side.post_recvs(opts.rx_depth - routs)?;
                        routs = opts.rx_depth;
                    }
                    received += 1;
                    pending &= !RECV;
                }
                other => return Err(format!("unexpected completion {other:?}").into()),
            }
            if sent < opts.iters && pending == 0 {
                let now = Instant::now();
                times.push(now - posted);
                posted = now;
                side.post(sent as u64, SendOp::Send { imm: None }, &sge)?;
                pending = RECV | SEND;
            }
        }
    }
    times.push(posted.elapsed());
    Ok(times)
}

/// rc_pingpong's closing lines.
fn summary(role: &str, opts: &Options, elapsed: Duration) {
    let usec = elapsed.as_secs_f64() * 1e6;
    let bytes = (opts.size * opts.iters * 2) as f64;
    println!(
        "pingpong {role}: {bytes} bytes in {:.2} seconds = {:.2} Mbit/sec",
        usec / 1e6,
        bytes * 8.0 / usec
    );
    println!(
        "pingpong {role}: {} iters in {:.2} seconds = {:.2} usec/iter",
        opts.iters,
        usec / 1e6,
        usec / opts.iters as f64
    );
}

/// The server: waits on `listener` for one client (giving up early if
/// the spawned `client` has exited), then its set-up (the GID of the
/// address the client reached), rc_pingpong's exchange and traffic.
fn server(
    ctx: &Context,
    listener: &TcpListener,
    opts: &Options,
    client: Option<&mut Child>,
) -> Result<()> {
    let side = Side::new(ctx, opts)?;
    let mut client = client;
    let stream = accept_within(listener, EXCHANGE_WAIT, || match client.as_deref_mut() {
        Some(c) => match c.try_wait()? {
            Some(status) => Err(format!("the client exited before connecting ({status})").into()),
            None => Ok(()),
        },
        None => Ok(()),
    })?;
    // The GID is the one of the address the client reached.
    let reached = stream.local_addr().ok().map(|a| a.ip());
    let me = prepare(ctx, &side, opts, "server", reached)?;
    let peer = exchange::serve(stream, WAIT, &me.dest, |peer| {
        to_rts(&side.qp, opts, &me, peer)
    })?;
    println!("pingpong server:  remote address: {}", peer.describe());
    let start = Instant::now();
    rc_traffic(&side, opts, false)?;
    summary("server", opts, start.elapsed());
    Ok(())
}

/// The client of the server on `opts.host`.
fn client(ctx: &Context, opts: &Options) -> Result<()> {
    let host = opts.host.as_deref().ok_or("no server HOST")?;
    let side = Side::new(ctx, opts)?;
    let me = prepare(ctx, &side, opts, "client", source_addr(host, opts.port))?;
    let peer = exchange::call(host, opts.port, EXCHANGE_WAIT, &me.dest)?;
    println!("pingpong client:  remote address: {}", peer.describe());
    to_rts(&side.qp, opts, &me, &peer)?;
    let start = Instant::now();
    let mut rtt = rc_traffic(&side, opts, true)?;
    summary("client", opts, start.elapsed());
    print_latency(ctx, opts, &mut rtt);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &str) -> Result<Options, String> {
        Options::parse(args.split_whitespace().map(std::ffi::OsString::from))
    }

    #[test]
    fn the_source_address_is_the_one_the_route_takes() {
        let local = |host: &str| source_addr(host, 18515);
        assert_eq!(local("127.0.0.1"), Some(IpAddr::V4(Ipv4Addr::LOCALHOST)));
        assert_eq!(local("127.0.0.9"), Some(IpAddr::V4(Ipv4Addr::LOCALHOST)));
    }

    #[test]
    fn takes_rc_pingpongs_options_and_the_harness_command_lines() {
        let o = parse("-d rxe0 -g 1 -p 7000 -s 64 -n 10 -m 2048 -r 8 -e 192.0.2.1").unwrap();
        assert_eq!(o.role, Role::Client);
        assert_eq!(o.host.as_deref(), Some("192.0.2.1"));
        assert_eq!((o.port, o.size, o.iters, o.rx_depth), (7000, 64, 10, 8));
        assert_eq!(
            (o.gid_index, o.mtu, o.wait),
            (Some(1), Mtu::Mtu2048, Wait::Event)
        );
        let d = parse("").unwrap();
        assert_eq!(
            (d.role, d.port, d.size, d.iters),
            (Role::Both, 18515, 4096, 1000)
        );
        assert_eq!((d.mtu, d.rx_depth, d.gid_index), (Mtu::Mtu1024, 500, None));
        assert_eq!(
            parse("--server --ib-dev rxe0 --gid-idx 0x1")
                .unwrap()
                .gid_index,
            Some(1)
        );
        // cargo vm test's two-host runs and cargo vm bench's.
        let c = parse("--cm --client --connect 192.0.2.2:7470 --device rxe0 --iters 200").unwrap();
        assert_eq!(
            (c.role, c.cm_addr()),
            (Role::Client, "192.0.2.2:7470".into())
        );
        let s = parse("--cm --server --bind 192.0.2.2:7470 --device siw0 --iters 300 --size 64 --write-size 4096 --wait event").unwrap();
        assert_eq!(
            (s.role, s.cm_addr(), s.wait),
            (Role::Server, "192.0.2.2:7470".into(), Wait::Event)
        );
        // A spawned client gets what it needs.
        let spawned = d.client_args(Some("rxe0"), "127.0.0.1", 4000).join(" ");
        let back = parse(&spawned).unwrap();
        assert_eq!(
            (back.role, back.host.as_deref(), back.port),
            (Role::Client, Some("127.0.0.1"), 4000)
        );
        assert!(parse("--client").is_err());
        assert!(parse("--server 192.0.2.1").is_err());
        assert!(parse("-m 1000").is_err());
    }
}
