//! RC ping-pong between two processes on one RDMA device, like rdma-core's
//! `ibv_rc_pingpong`, with no connection manager: each side describes
//! itself with a [`uverbs::Endpoint`] line (GID, QP number, PSN, address
//! and rkey of its buffer) and the two swap those lines over TCP.
//!
//! ```text
//! pingpong [OPTIONS]                         server here, the client spawned as a second process
//! pingpong --server [--listen ADDR] [OPTIONS]   one side only (another terminal or host) ...
//! pingpong --client --connect ADDR [OPTIONS]    ... and the other
//! pingpong --count-syscalls [OPTIONS]        system calls per post_send / post_recv / poll_cq, by strace
//! pingpong --cm [--server --bind ADDR:PORT | --client --connect ADDR:PORT] [OPTIONS]
//!                                            connected by the RDMA connection manager instead
//!                                            (no role: both here, the client to 192.0.2.1)
//!
//! OPTIONS: --device NAME (default: every device; rxe, and with --cm also siw,
//!                         whose QPs reach RTS only through the cm)
//!          --size BYTES (ping message, default 64)    --iters N (pings and writes, default 1000)
//!          --write-size BYTES (default 65536)        --gid-index I (default 0)
//!          --wait busy|event (how a side waits for a completion, default busy)
//! ```
//!
//! The client measures two things:
//!
//! 1. latency: `--iters` round trips of a `--size`-byte SEND answered by a
//!    SEND from the server (each side's receive posted before), median and
//!    99th percentile in µs;
//! 2. bandwidth: `--iters` RDMA WRITEs of `--write-size` bytes into the
//!    server's buffer (at most 16 in flight), in MB/s; the server then
//!    checks the bytes that landed.
//!
//! With `--cm` the connection manager sets the QPs up (`pingpong/cm.rs`);
//! the measurements and the printout are the same.
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
//! Every wait is bounded (10 s). `UVERBS_TRANSPORT=ioctl|write` picks the
//! transport; `cargo vm demo` runs this in a VM on rxe0, and `cargo vm
//! test`'s two-host run runs `--cm` across two guests on rxe0 and on siw0
//! (tests/vm/README.md).

use std::error::Error;
use std::net::{TcpListener, TcpStream};

use line_channel::{accept_within, LineChannel};
use std::process::{Child, Command, ExitCode};
use std::time::{Duration, Instant};

use memmap2::MmapMut;
use std::os::fd::AsRawFd;
use uverbs::{
    AccessFlags, CompletionChannel, CompletionQueue, Context, Device, DriverId, Endpoint,
    MemoryRegion, OpenOptions, Payload, QpInit, QueuePair, RecvWr, Remote, SendFlags, SendOp,
    SendWr, Sge, WcOpcode, WcStatus, WorkCompletion,
};
use uverbs::{Mtu, QpAttr, QpState, QpType};

#[path = "pingpong/cm.rs"]
mod cm;
#[path = "common/line_channel.rs"]
mod line_channel;
#[path = "pingpong/syscalls.rs"]
mod syscalls;

type Result<T, E = Box<dyn Error>> = std::result::Result<T, E>;

/// How long any single wait (a completion, a line, the peer process) may take.
const WAIT: Duration = Duration::from_secs(10);
/// RDMA WRITEs in flight at once in the bandwidth run.
const WINDOW: usize = 16;
/// With `--wait event`: empty polls before the CQ is armed and the side
/// sleeps on its completion channel.
const SPIN_POLLS: u32 = 200;
const PORT: u8 = 1;

const USAGE: &str =
    "usage: pingpong [--server [--listen ADDR] | --client --connect ADDR | --count-syscalls]
       pingpong --cm [--server --bind ADDR:PORT | --client --connect ADDR:PORT]
                [--device NAME] [--size BYTES] [--iters N] [--write-size BYTES] [--gid-index I]
                [--wait busy|event]";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Role {
    /// Server here, client spawned: the default.
    Both,
    Server,
    Client,
    /// Runs the probe below under strace and reports the counts.
    CountSyscalls,
    /// The measured program of `CountSyscalls` (internal).
    SyscallProbe,
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
    /// `--listen` (or `--bind`) for the server, `--connect` for the client.
    addr: String,
    size: usize,
    iters: usize,
    write_size: usize,
    gid_index: u32,
    wait: Wait,
}

impl Options {
    fn parse(args: impl IntoIterator<Item = String>) -> Result<Options, String> {
        let mut o = Options {
            role: Role::Both,
            cm: false,
            device: None,
            addr: "127.0.0.1:18515".into(),
            size: 64,
            iters: 1000,
            write_size: 64 << 10,
            gid_index: 0,
            wait: Wait::Busy,
        };
        let mut args = args.into_iter();
        while let Some(arg) = args.next() {
            let mut value = |name: &str| args.next().ok_or(format!("{name} needs a value"));
            let mut number = |name: &str| {
                let v = value(name)?;
                v.parse::<usize>()
                    .map_err(|_| format!("{name} wants a number, got {v:?}"))
            };
            match arg.as_str() {
                "--server" => o.role = Role::Server,
                "--client" => o.role = Role::Client,
                "--count-syscalls" => o.role = Role::CountSyscalls,
                "--syscall-probe" => o.role = Role::SyscallProbe,
                "--cm" => o.cm = true,
                "--listen" | "--bind" | "--connect" => o.addr = value(&arg)?,
                "--device" => o.device = Some(value("--device")?),
                "--size" => o.size = number("--size")?,
                "--iters" => o.iters = number("--iters")?,
                "--write-size" => o.write_size = number("--write-size")?,
                "--gid-index" => {
                    o.gid_index = u32::try_from(number("--gid-index")?)
                        .map_err(|_| "--gid-index is too large".to_string())?
                }
                "--wait" => {
                    o.wait = match value("--wait")?.as_str() {
                        "busy" => Wait::Busy,
                        "event" => Wait::Event,
                        v => return Err(format!("--wait wants busy or event, got {v:?}")),
                    }
                }
                "-h" | "--help" => return Err(String::new()),
                other => return Err(format!("unknown argument {other:?}")),
            }
        }
        if o.size == 0 || o.size > 1 << 30 || o.write_size == 0 || o.write_size > 1 << 30 {
            return Err("--size and --write-size must be 1 B ..= 1 GiB".into());
        }
        if o.iters == 0 || o.iters > 1_000_000 {
            return Err("--iters must be 1 ..= 1000000".into());
        }
        if o.cm && matches!(o.role, Role::CountSyscalls | Role::SyscallProbe) {
            return Err("--cm and --count-syscalls do not go together".into());
        }
        if o.wait == Wait::Event && matches!(o.role, Role::CountSyscalls | Role::SyscallProbe) {
            return Err("--count-syscalls counts the busy poll: no --wait event".into());
        }
        Ok(o)
    }

    /// The arguments that make a spawned client match this run.
    fn client_args(&self, device: Option<&str>, addr: &str) -> Vec<String> {
        let mut v: Vec<String> = ["--client", "--connect", addr].map(String::from).into();
        if let Some(device) = device {
            v.extend(["--device".into(), device.into()]);
        }
        if self.cm {
            v.push("--cm".into());
        }
        for (flag, n) in [
            ("--size", self.size),
            ("--iters", self.iters),
            ("--write-size", self.write_size),
            ("--gid-index", self.gid_index as usize),
        ] {
            v.push(flag.into());
            v.push(n.to_string());
        }
        v.extend(["--wait".into(), self.wait.name().into()]);
        v
    }
}

fn main() -> ExitCode {
    let opts = match Options::parse(std::env::args().skip(1)) {
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
        Role::Server if opts.cm => cm::listen(&opts.addr).and_then(|(ch, listener, local)| {
            println!("pingpong server (cm): listening on {local}");
            cm::server(&opts, &ch, &listener, None)
        }),
        Role::Client if opts.cm => cm::client(&opts),
        Role::Both => both_on_each_device(&opts),
        Role::Server => open(&opts).and_then(|ctx| {
            let listener = TcpListener::bind(&opts.addr)?;
            println!("pingpong server: listening on {}", listener.local_addr()?);
            server(&ctx, &listener, &opts, None)
        }),
        Role::Client => open(&opts).and_then(|ctx| client(&ctx, &opts)),
        Role::CountSyscalls => syscalls::count_under_strace(&opts),
        Role::SyscallProbe => open(&opts).and_then(|ctx| syscalls::probe(&ctx, &opts)),
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
        Some(name) => vec![uverbs::device(name)?.ok_or(format!("no RDMA device {name}"))?],
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
/// this program, spawned, is the client.
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
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let addr = listener.local_addr()?.to_string();
        println!(
            "pingpong {} over {}: server here (pid {}), client spawned, endpoints over TCP {addr}",
            dev.name(),
            ctx.transport_kind(),
            std::process::id()
        );
        let mut child = Command::new(std::env::current_exe()?)
            .args(opts.client_args(Some(dev.name()), &addr))
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
    let deadline = Instant::now() + WAIT;
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok(status);
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            child.wait()?;
            return Err(format!("the client did not exit within {WAIT:?}; killed").into());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

// ---- One side: its QP, CQ and buffer -------------------------------------

/// Offsets in each side's buffer: the message sent, the message received,
/// and the RDMA WRITE area (the target on the server, the source on the
/// client). Each rounded to pages.
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
            write_size: opts.write_size,
        };
        let pd = ctx.alloc_pd()?;
        let channel = match opts.wait {
            Wait::Busy => None,
            Wait::Event => Some(ctx.create_comp_channel()?),
        };
        let cq = ctx.create_cq(2 * WINDOW as u32 + 8, channel.as_ref())?;
        let qp = pd.create_qp(&QpInit {
            max_send_wr: 2 * WINDOW as u32,
            ..QpInit::new(QpType::Rc, &cq, &cq)
        })?;
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

    /// What the peer needs: this QP, a PSN of our own, and the WRITE area.
    fn endpoint(&self, gid_index: u32) -> Result<Endpoint> {
        let ep = Endpoint::local(&self.qp, u32::from(PORT), gid_index, &self.mr)?;
        Ok(Endpoint {
            psn: std::process::id() & 0xff_ffff,
            addr: self.addr(self.layout.write_area()),
            ..ep
        })
    }

    /// RESET -> INIT -> RTR -> RTS towards `peer`, with rc_pingpong's values.
    fn connect(&self, me: &Endpoint, peer: &Endpoint, gid_index: u32) -> Result<()> {
        Side::connect_qp(&self.qp, me, peer, gid_index)
    }

    /// [`connect`](Self::connect) of any QP: `me` gives our first PSN,
    /// `peer` its QPN, first PSN and GID.
    fn connect_qp(qp: &QueuePair, me: &Endpoint, peer: &Endpoint, gid_index: u32) -> Result<()> {
        let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;
        let init = QpAttr::new()
            .state(QpState::Init)
            .pkey_index(0)
            .port(PORT)
            .access_flags(access);
        let rtr = QpAttr::new()
            .state(QpState::Rtr)
            .path_mtu(Mtu::Mtu1024)
            .dest_qpn(peer.qpn)
            .rq_psn(peer.psn)
            .max_dest_rd_atomic(1)
            .min_rnr_timer(12)
            .av(peer.roce_dest(gid_index as u8, PORT));
        let rts = QpAttr::new()
            .state(QpState::Rts)
            .timeout(14)
            .retry_cnt(7)
            .rnr_retry(7)
            .sq_psn(me.psn)
            .max_rd_atomic(1);
        for attr in [init, rtr, rts] {
            qp.modify(&attr)?;
        }
        Ok(())
    }

    /// Posts the one receive into the receive area.
    fn post_recv(&self) -> Result<()> {
        let sge = self.sge(self.layout.recv(), self.layout.size);
        // SAFETY: the receive area is read only after this receive's
        // completion, and re-posted only after that read.
        unsafe {
            self.qp.post_recv(&[RecvWr {
                wr_id: 0,
                sges: &sge,
            }])?
        };
        Ok(())
    }

    /// Posts a signalled send of `op` from `sges`.
    fn post(&self, wr_id: u64, op: SendOp, sges: &[Sge]) -> Result<()> {
        let wr = SendWr {
            wr_id,
            op,
            flags: SendFlags::SIGNALED,
            payload: Payload::Sges(sges),
            ud: None,
        };
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

// ---- The measured phases (the same over TCP endpoints and over the cm) ----

/// The server's half of the latency run: answers `opts.iters` pings, each
/// by re-posting the receive first (so the next ping finds it), then a
/// reply with the same number. One receive stays posted at the end.
fn answer_pings(side: &mut Side, opts: &Options) -> Result<usize> {
    let mut wcs = [WorkCompletion::default(); 4];
    let (mut pings, mut replies) = (0, 0);
    while replies < opts.iters {
        for wc in side.poll(&mut wcs, "server")? {
            match wc.opcode() {
                WcOpcode::Recv => {
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
                WcOpcode::Send => replies += 1,
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

/// The client's latency run: `opts.iters` pings, each waiting for both its
/// completion and the reply; the round-trip times. One receive stays
/// posted at the end.
fn measure_latency(side: &mut Side, opts: &Options) -> Result<Vec<Duration>> {
    let mut rtt = Vec::with_capacity(opts.iters);
    let mut wcs = [WorkCompletion::default(); 4];
    for i in 0..opts.iters {
        side.stamp(Layout::SEND, i);
        let sge = side.sge(Layout::SEND, opts.size);
        let start = Instant::now();
        side.post(i as u64, SendOp::Send { imm: None }, &sge)?;
        let (mut sent, mut replied) = (false, false);
        while !(sent && replied) {
            for wc in side.poll(&mut wcs, "client")? {
                match wc.opcode() {
                    WcOpcode::Send => sent = true,
                    WcOpcode::Recv => replied = true,
                    other => return Err(format!("client: unexpected completion {other:?}").into()),
                }
            }
        }
        rtt.push(start.elapsed());
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

/// The client's printout: the latency and bandwidth lines.
fn report(ctx: &Context, opts: &Options, mut rtt: Vec<Duration>, secs: f64, verdict: &str) {
    rtt.sort();
    let at = |q: f64| rtt[((rtt.len() as f64 * q).ceil() as usize).clamp(1, rtt.len()) - 1];
    let micros = |d: Duration| d.as_secs_f64() * 1e6;
    let bytes = (opts.iters * opts.write_size) as f64;
    let how = if opts.cm { " (cm)" } else { "" };
    let waiting = match opts.wait {
        Wait::Busy => "",
        Wait::Event => ", waiting on events",
    };
    println!(
        "pingpong {}{how} over {}{waiting}: latency: {} round trips of {} B SEND/RECV: median {:.1} µs, p99 {:.1} µs",
        ctx.device_name(),
        ctx.transport_kind(),
        opts.iters,
        opts.size,
        micros(at(0.5)),
        micros(at(0.99)),
    );
    println!(
        "pingpong {}{how} over {}{waiting}: bandwidth: {} RDMA WRITEs of {} B ({WINDOW} in flight): {:.1} MB in {:.3} s = {:.1} MB/s; server: {verdict}",
        ctx.device_name(),
        ctx.transport_kind(),
        opts.iters,
        opts.write_size,
        bytes / 1e6,
        secs,
        bytes / 1e6 / secs,
    );
}

// ---- The two roles over TCP endpoints -----------------------------------

fn server(
    ctx: &Context,
    listener: &TcpListener,
    opts: &Options,
    client: Option<&mut Child>,
) -> Result<()> {
    let mut client = client;
    // Gives up early if the spawned client has already exited.
    let stream = accept_within(listener, WAIT, || match client.as_deref_mut() {
        Some(c) => match c.try_wait()? {
            Some(status) => Err(format!("the client exited before connecting ({status})").into()),
            None => Ok(()),
        },
        None => Ok(()),
    })?;
    let mut chan = LineChannel::new(stream, WAIT)?;
    let mut side = Side::new(ctx, opts)?;
    let me = side.endpoint(opts.gid_index)?;
    let peer = chan.swap(&me)?;
    println!("pingpong server: {me}");
    side.connect(&me, &peer, opts.gid_index)?;
    side.post_recv()?;
    chan.sync("ready", WAIT)?;
    let pings = answer_pings(&mut side, opts)?;
    chan.sync("pings done", WAIT)?;

    // The client's RDMA WRITEs land without us doing anything; check them.
    let line = chan.recv("the client's WRITE stream")?;
    let verdict = check_write_area(&side, opts);
    chan.send(&verdict)?;
    println!(
        "pingpong server: {pings} pings answered; after \"{line}\" the WRITE area was {verdict}"
    );
    Ok(())
}

fn client(ctx: &Context, opts: &Options) -> Result<()> {
    let mut chan = LineChannel::new(TcpStream::connect_timeout(&opts.addr.parse()?, WAIT)?, WAIT)?;
    let mut side = Side::new(ctx, opts)?;
    let me = side.endpoint(opts.gid_index)?;
    let peer = chan.swap(&me)?;
    println!("pingpong client: {me}");
    side.connect(&me, &peer, opts.gid_index)?;
    side.post_recv()?;
    chan.sync("ready", WAIT)?;
    let rtt = measure_latency(&mut side, opts)?;
    chan.sync("pings done", WAIT)?;
    // The server's record names its WRITE area and the rkey for it.
    let secs = stream_writes(&mut side, opts, peer.remote())?;
    chan.send(&format!(
        "{} writes of {} bytes",
        opts.iters, opts.write_size
    ))?;
    let verdict = chan.recv("the server's check")?;
    report(ctx, opts, rtt, secs, &verdict);
    if verdict != "verified" {
        return Err(format!("the server found the WRITE area {verdict}").into());
    }
    Ok(())
}
