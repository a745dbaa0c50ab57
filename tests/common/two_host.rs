//! The two-host run's fixtures: which host this process is (`Role`, from
//! the harness's `UVERBS_HOST_ROLE` and companions, the addresses of both
//! links: rxe0's and siw0's), a line-based control
//! connection between the two hosts with bounded waits (`Control`), and
//! byte patterns that tell every write apart, and the traffic steps both
//! sides take (SEND/RECV, WRITE, READ: each checked byte for byte by the
//! side whose memory it reached). Shared by every `tests/two_host_*.rs`
//! binary.

use std::io::{BufRead, BufReader, ErrorKind, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use uverbs::device::TransportType;
use uverbs::wr::{RecvWr, Remote, SendOp, WcOpcode, WcStatus, WorkCompletion};
use uverbs::{AccessFlags, CompletionQueue, MemoryRegion, ProtectionDomain, QueuePair};

use super::devices::{loud, open, Dut};
use super::rc::{check, sge, signalled, wait_checked, wait_one};
use super::{anon, fresh_mr, pattern, RW, RW_READ};

/// How long each side waits for the other to show up on the control
/// connection (the peer's previous run may still be finishing).
pub const MEET_WAIT: Duration = Duration::from_secs(120);
/// How long each side waits for the peer's next control message.
pub const CONTROL_WAIT: Duration = Duration::from_secs(60);

/// Each side's peer-addressable memory, and its local buffer (SEND
/// source, RECV target, WRITE source, READ landing area).
pub const LEN: usize = 256 << 10;
/// A SEND: bigger than the path MTU, so several packets.
pub const SEND_LEN: usize = 4000;
/// A WRITE or READ: 32 KiB, 32 packets at the rxe MTU of a 1500-byte link.
pub const RDMA_LEN: usize = 32 << 10;
/// Offsets in the peer's memory: the WRITEs of each step go to their own
/// place, the READ's source is filled by its owner.
pub const WRITE_AT: usize = 8 << 10;
pub const READ_AT: usize = 128 << 10;

/// Which side of the run this process is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    A,
    B,
}

impl Role {
    pub fn name(self) -> &'static str {
        match self {
            Role::A => "a",
            Role::B => "b",
        }
    }

    pub fn other(self) -> Role {
        match self {
            Role::A => Role::B,
            Role::B => Role::A,
        }
    }
}

impl std::fmt::Display for Role {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// What the two-host harness tells this process.
pub struct Peer {
    pub role: Role,
    /// This host's and the peer's addresses on rxe0's link (eth0).
    pub local: Ipv4Addr,
    pub peer: Ipv4Addr,
    /// This host's and the peer's addresses on siw0's link (eth1): the
    /// cm gives an id the first device with its source address, so siw0
    /// is reached over a netdev and addresses of its own.
    pub siw_local: Ipv4Addr,
    pub siw_peer: Ipv4Addr,
    pub port: u16,
    /// `<config>/<binary>`: both sides must be running the same thing.
    pub run: String,
}

/// The two-host environment, or `None` outside a two-host run (said
/// loudly: `test` is SKIPPED); a role with a missing or malformed
/// companion variable fails.
pub fn peer_from_env(test: &str) -> Option<Peer> {
    let Ok(role) = std::env::var("UVERBS_HOST_ROLE") else {
        loud(&format!(
            "SKIPPED: {test}: not in a two-host run (UVERBS_HOST_ROLE unset; `cargo vm test` sets it)"
        ));
        return None;
    };
    let role = match role.as_str() {
        "a" => Role::A,
        "b" => Role::B,
        other => panic!("{test}: UVERBS_HOST_ROLE={other:?}: expected `a` or `b`"),
    };
    let var = |name: &str| {
        std::env::var(name)
            .unwrap_or_else(|_| panic!("{test}: UVERBS_HOST_ROLE is set but {name} is not"))
    };
    let addr = |name: &str| -> Ipv4Addr {
        let v = var(name);
        v.parse()
            .unwrap_or_else(|e| panic!("{test}: {name}={v:?} is not an IPv4 address: {e}"))
    };
    let port = var("UVERBS_TWO_HOST_PORT");
    Some(Peer {
        role,
        local: addr("UVERBS_LOCAL_ADDR"),
        peer: addr("UVERBS_PEER_ADDR"),
        siw_local: addr("UVERBS_SIW_LOCAL_ADDR"),
        siw_peer: addr("UVERBS_SIW_PEER_ADDR"),
        port: port
            .parse()
            .unwrap_or_else(|e| panic!("{test}: UVERBS_TWO_HOST_PORT={port:?}: {e}")),
        run: var("UVERBS_TWO_HOST_RUN"),
    })
}

/// The control connection: one line per message, `<tag> <payload>`.
pub struct Control {
    reader: BufReader<TcpStream>,
    writer: TcpStream,
    me: Role,
}

impl Control {
    /// [`meet`](Self::meet), then [`greet`](Self::greet) with `plan`: the
    /// start of every two-host test.
    pub fn meet_and_greet(p: &Peer, plan: &str) -> Control {
        let mut ctl = Control::meet(p);
        ctl.greet(p, plan);
        ctl
    }

    /// A listens on its address and takes the first connection; B connects
    /// to A, retrying while A is not there yet. Both give up after
    /// [`MEET_WAIT`].
    pub fn meet(p: &Peer) -> Control {
        let deadline = Instant::now() + MEET_WAIT;
        let stream = match p.role {
            Role::A => {
                let listener = TcpListener::bind((p.local, p.port))
                    .unwrap_or_else(|e| panic!("a: listening on {}:{}: {e}", p.local, p.port));
                listener.set_nonblocking(true).unwrap();
                loop {
                    match listener.accept() {
                        Ok((s, from)) => {
                            assert_eq!(
                                from.ip(),
                                p.peer,
                                "a: a connection from {from}, not from the peer"
                            );
                            break s;
                        }
                        Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                        Err(e) => panic!("a: accept on {}:{}: {e}", p.local, p.port),
                    }
                    assert!(
                        Instant::now() < deadline,
                        "a: host b did not connect to {}:{} within {MEET_WAIT:?}",
                        p.local,
                        p.port
                    );
                    std::thread::sleep(Duration::from_millis(20));
                }
            }
            Role::B => {
                let to = SocketAddr::from((p.peer, p.port));
                loop {
                    let why = match TcpStream::connect_timeout(&to, Duration::from_secs(2)) {
                        Ok(s) => break s,
                        Err(e) => e,
                    };
                    assert!(
                        Instant::now() < deadline,
                        "b: could not connect to host a at {to} within {MEET_WAIT:?}: {why}"
                    );
                    std::thread::sleep(Duration::from_millis(200));
                }
            }
        };
        stream.set_nonblocking(false).unwrap();
        stream.set_nodelay(true).unwrap();
        stream.set_read_timeout(Some(CONTROL_WAIT)).unwrap();
        stream.set_write_timeout(Some(CONTROL_WAIT)).unwrap();
        Control {
            reader: BufReader::new(stream.try_clone().unwrap()),
            writer: stream,
            me: p.role,
        }
    }

    pub fn send(&mut self, tag: &str, payload: &str) {
        let me = self.me.name();
        writeln!(self.writer, "{tag} {payload}")
            .unwrap_or_else(|e| panic!("{me}: sending `{tag}` to the peer: {e}"));
    }

    /// The payload of the peer's next message, which must be `tag`.
    pub fn expect(&mut self, tag: &str) -> String {
        let me = self.me.name();
        let mut line = String::new();
        match self.reader.read_line(&mut line) {
            Ok(0) => panic!("{me}: the peer closed the control connection while {me} waited for `{tag}` (it failed: see its console)"),
            Ok(_) => {}
            Err(e) => panic!("{me}: waiting up to {CONTROL_WAIT:?} for `{tag}` from the peer: {e}"),
        }
        let line = line.trim_end();
        let (got, payload) = line.split_once(' ').unwrap_or((line, ""));
        assert_eq!(
            got, tag,
            "{me}: expected `{tag}` from the peer, got `{line}`"
        );
        payload.to_string()
    }

    /// Both sides say `tag` and wait for the other's: neither goes past
    /// this point before both reached it.
    pub fn barrier(&mut self, tag: &str) {
        self.send(tag, "");
        self.expect(tag);
    }

    /// The first exchange: both sides must run the same configuration and
    /// binary (`p.run`) with the same `plan` (e.g. the devices), each in
    /// its own role.
    pub fn greet(&mut self, p: &Peer, plan: &str) {
        let me = self.me.name();
        self.send("hello", &format!("{} {} {plan}", p.run, p.role.name()));
        let theirs = self.expect("hello");
        assert_eq!(
            theirs,
            format!("{} {} {plan}", p.run, p.role.other().name()),
            "{me}: the peer runs something else, or on other devices"
        );
    }
}

/// The rxe device of `devices`, opened; `None` (and a loud `SKIPPED`
/// line for `test` on host `me`) without one: the device gate has failed
/// already if rxe was required.
pub fn open_rxe(devices: Vec<uverbs::Device>, test: &str, me: &str) -> Option<Dut> {
    match devices.into_iter().find(|d| d.name().starts_with("rxe")) {
        Some(dev) => Some(open(&dev)),
        None => {
            loud(&format!("SKIPPED: {test}: {me}: no rxe device"));
            None
        }
    }
}

/// Fails with the first differing offset unless `got == want`.
pub fn same_bytes(got: &[u8], want: &[u8], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    if let Some(i) = got.iter().zip(want).position(|(g, w)| g != w) {
        panic!(
            "{what}: byte {i} of {} differs: {:#04x}, expected {:#04x}",
            got.len(),
            got[i],
            want[i]
        );
    }
}

/// One side's memory in a two-host test: its peer-addressable memory
/// (`REMOTE_WRITE | REMOTE_READ`) with the model of what that must hold,
/// and its local buffer; [`LEN`] bytes each, registered in one PD.
pub struct Buffers {
    pub mem_mr: MemoryRegion,
    pub mem: memmap2::MmapMut,
    pub model: Vec<u8>,
    pub local_mr: MemoryRegion,
    pub local: memmap2::MmapMut,
}

impl Buffers {
    /// Both buffers, new and registered in `pd`: the peer-addressable one
    /// [`RW_READ`], the local one [`RW`]; the model all zeros.
    pub fn new(pd: &ProtectionDomain) -> Buffers {
        let mut mem = anon(LEN);
        let mem_mr = fresh_mr(pd, &mut mem, RW_READ);
        let mut local = anon(LEN);
        let local_mr = fresh_mr(pd, &mut local, RW);
        Buffers {
            mem_mr,
            mem,
            model: vec![0; LEN],
            local_mr,
            local,
        }
    }

    /// Deregisters both MRs, drops `pd` (their PD, its last user), then
    /// unmaps the memory.
    pub fn release(self, pd: ProtectionDomain) {
        let Buffers {
            mem_mr,
            mem,
            local_mr,
            local,
            ..
        } = self;
        drop((mem_mr, local_mr, pd));
        drop((mem, local));
    }
}

/// One side of a two-host test, as the shared traffic steps see it: who
/// it is, its current QP and CQ, its [`Buffers`], and where the peer's
/// memory is. The binaries differ in how they connect, not in these.
pub trait Traffic {
    /// `a (192.0.2.1)`, for messages.
    fn me(&self) -> &str;
    /// Which host this is.
    fn role(&self) -> Role;
    /// The current connection's QP.
    fn qp(&self) -> &QueuePair;
    /// Its CQ (send and receive).
    fn cq(&self) -> &CompletionQueue;
    /// The local buffer and the peer-addressable memory.
    fn bufs(&self) -> &Buffers;
    fn bufs_mut(&mut self) -> &mut Buffers;
    /// The start of the peer's memory and its rkey.
    fn peer_mem(&self) -> (u64, u32);

    /// The local buffer and its registration.
    fn local(&self) -> &[u8] {
        &self.bufs().local
    }
    fn local_mut(&mut self) -> &mut [u8] {
        &mut self.bufs_mut().local
    }
    fn local_mr(&self) -> &MemoryRegion {
        &self.bufs().local_mr
    }
    /// The peer-addressable memory and its model.
    fn mem(&self) -> &[u8] {
        &self.bufs().mem
    }
    fn mem_mut(&mut self) -> &mut [u8] {
        &mut self.bufs_mut().mem
    }
    fn model(&self) -> &[u8] {
        &self.bufs().model
    }
    fn model_mut(&mut self) -> &mut [u8] {
        &mut self.bufs_mut().model
    }
    /// Where in the peer's memory `at` is.
    fn remote(&self, at: usize) -> Remote {
        let (addr, rkey) = self.peer_mem();
        Remote {
            addr: addr + at as u64,
            rkey,
        }
    }

    /// Compares all of the peer-addressable memory with the model.
    fn check_mem(&self, what: &str) {
        same_bytes(self.mem(), self.model(), &format!("{}: {what}", self.me()));
    }

    /// Posts one signalled `op` of `local[at..at + len]` and returns its
    /// completion, whatever its status.
    fn post(&self, wr_id: u64, op: SendOp, at: usize, len: usize, what: &str) -> WorkCompletion {
        let sges = sge(
            self.local().as_ptr() as u64 + at as u64,
            len,
            self.local_mr(),
        );
        let wr = signalled(wr_id, op, &sges);
        // SAFETY: `local[at..at + len]` stays mapped and registered and the
        // program neither writes nor reads it until the completion is
        // polled below (`wait_one` returns only then, or panics, and then
        // the QP goes before the buffer).
        unsafe { self.qp().post_send(&[wr]) }
            .unwrap_or_else(|e| panic!("{}: {what}: post_send: {e}", self.me()));
        wait_one(self.cq(), &format!("{}: {what}", self.me()))
    }
}

/// Where in the local buffer [`placed`]'s READ lands (no step uses it).
const PLACED_AT: usize = LEN - 64;

/// Returns once the WRITEs this side completed on its QP have been placed
/// in the peer's memory. On RoCE a WRITE completes when the responder
/// acknowledged it, so at once. On iWARP a WRITE completes as soon as it is
/// on the wire (siw: once sent), before the peer placed it (seen in the VM:
/// B found the last WRITE's bytes missing after A's completion); a READ on
/// the same QP is answered only after everything before it on the stream
/// was placed, so one small READ of the peer's memory at `at` waits for it.
pub fn placed(s: &impl Traffic, at: usize, what: &str) {
    if s.qp().transport_type() != TransportType::Iwarp {
        return;
    }
    let what = format!("{what}: the READ that waits for the placement");
    let op = SendOp::RdmaRead {
        remote: s.remote(at),
    };
    let wc = s.post(u64::MAX - 1, op, PLACED_AT, 8, &what);
    check(&wc, &what, WcOpcode::RdmaRead, s.qp(), u64::MAX - 1);
}

/// The request that `wc` completed brought exactly `data` into the local
/// buffer at `at`: its length and every byte.
fn arrived(s: &impl Traffic, wc: &WorkCompletion, at: usize, data: &[u8], what: &str) {
    let len = data.len();
    assert_eq!(wc.byte_len(), len as u32, "{}: {what}: {wc:?}", s.me());
    same_bytes(
        &s.local()[at..at + len],
        data,
        &format!("{}: {what}", s.me()),
    );
    loud(&format!("{}: {what}: {len} bytes checked", s.me()));
}

/// `sender` SENDs [`SEND_LEN`] bytes of `pattern(step)` into a receive the
/// other side posted first; the receiver checks every byte.
pub fn send_recv(s: &mut impl Traffic, ctl: &mut Control, sender: Role, step: u64) {
    let what = format!("step {step}: SEND {sender} -> {}", sender.other());
    let data = pattern(step, SEND_LEN);
    if s.role() == sender {
        ctl.expect("recv-posted");
        s.local_mut()[..SEND_LEN].copy_from_slice(&data);
        let wc = s.post(step, SendOp::Send { imm: None }, 0, SEND_LEN, &what);
        check(&wc, &what, WcOpcode::Send, s.qp(), step);
        ctl.expect("received");
    } else {
        const AT: usize = 64 << 10;
        s.local_mut()[AT..AT + SEND_LEN].fill(0);
        let sges = sge(
            s.local().as_ptr() as u64 + AT as u64,
            SEND_LEN,
            s.local_mr(),
        );
        // SAFETY: local[AT..AT + SEND_LEN] stays mapped and registered and
        // is not touched until the receive's completion is polled below.
        unsafe {
            s.qp().post_recv(&[RecvWr {
                wr_id: step,
                sges: &sges,
            }])
        }
        .unwrap_or_else(|e| panic!("{}: {what}: post_recv: {e}", s.me()));
        ctl.send("recv-posted", "");
        let wc = wait_checked(
            s.cq(),
            &format!("{}: {what}", s.me()),
            WcOpcode::Recv,
            s.qp(),
            step,
        );
        arrived(s, &wc, AT, &data, &format!("{what}: received"));
        ctl.send("received", "");
    }
}

/// `writer` RDMA WRITEs [`RDMA_LEN`] bytes of `pattern(100 + step)` to
/// the other side's memory at `at`; the owner checks all of its memory.
pub fn write(s: &mut impl Traffic, ctl: &mut Control, writer: Role, step: u64, at: usize) {
    let what = format!("step {step}: WRITE {writer} -> {}", writer.other());
    let data = pattern(100 + step, RDMA_LEN);
    if s.role() == writer {
        s.local_mut()[..RDMA_LEN].copy_from_slice(&data);
        let op = SendOp::RdmaWrite {
            remote: s.remote(at),
            imm: None,
        };
        let wc = s.post(100 + step, op, 0, RDMA_LEN, &what);
        check(&wc, &what, WcOpcode::RdmaWrite, s.qp(), 100 + step);
        placed(s, at, &what);
        ctl.send("written", &at.to_string());
        ctl.expect("checked");
    } else {
        let told = ctl.expect("written");
        assert_eq!(told, at.to_string(), "{}: {what}", s.me());
        s.model_mut()[at..at + RDMA_LEN].copy_from_slice(&data);
        s.check_mem(&what);
        loud(&format!(
            "{}: {what}: {RDMA_LEN} bytes landed at offset {at}, the rest of the {LEN} unchanged",
            s.me()
        ));
        ctl.send("checked", "");
    }
}

/// The other side fills its memory at [`READ_AT`] with `pattern(200 +
/// step)`; `reader` RDMA READs it and checks every byte.
pub fn read(s: &mut impl Traffic, ctl: &mut Control, reader: Role, step: u64) {
    let what = format!("step {step}: READ by {reader} from {}", reader.other());
    let data = pattern(200 + step, RDMA_LEN);
    if s.role() == reader {
        ctl.expect("filled");
        const LAND: usize = 128 << 10;
        s.local_mut()[LAND..LAND + RDMA_LEN].fill(0);
        let op = SendOp::RdmaRead {
            remote: s.remote(READ_AT),
        };
        let wc = s.post(200 + step, op, LAND, RDMA_LEN, &what);
        check(&wc, &what, WcOpcode::RdmaRead, s.qp(), 200 + step);
        arrived(s, &wc, LAND, &data, &format!("{what}: read"));
        ctl.send("read", "");
    } else {
        s.mem_mut()[READ_AT..READ_AT + RDMA_LEN].copy_from_slice(&data);
        s.model_mut()[READ_AT..READ_AT + RDMA_LEN].copy_from_slice(&data);
        ctl.send("filled", "");
        ctl.expect("read");
        // A READ leaves the source as it was.
        s.check_mem(&what);
    }
}

/// Where B's memory is re-registered while A writes.
pub const REREG_AT: usize = 192 << 10;

/// The receive without SGEs that B holds while its refusal is in flight:
/// flushed when B's QP goes to ERR.
pub const PROBE: u64 = 0x9e0be;

/// (handle, lkey, rkey) of `mr`.
pub fn keys(mr: &MemoryRegion) -> (u32, u32, u32) {
    (mr.handle(), mr.lkey(), mr.rkey())
}

/// A RDMA WRITEs [`RDMA_LEN`] bytes of `pattern(seed)` to B's memory at
/// [`REREG_AT`]; its completion, whatever its status.
fn rereg_write(s: &mut impl Traffic, seed: u64, what: &str) -> WorkCompletion {
    let data = pattern(seed, RDMA_LEN);
    s.local_mut()[..RDMA_LEN].copy_from_slice(&data);
    let op = SendOp::RdmaWrite {
        remote: s.remote(REREG_AT),
        imm: None,
    };
    s.post(seed, op, 0, RDMA_LEN, what)
}

/// The first half of the rereg case, B re-registering its memory in place
/// while A writes to it: a WRITE lands; B removes REMOTE_WRITE in place
/// (same keys) with a probe receive posted; A's next WRITE is refused with
/// a remote access error, B's probe is flushed (its QP went to ERR) and
/// B's memory is untouched. Both QPs are dead on return; how they come
/// back is the binary's. Returns B's keys before (A: its own, unused).
pub fn rereg_refused(s: &mut impl Traffic, ctl: &mut Control) -> (u32, u32, u32) {
    let me = s.me().to_string();
    let at = REREG_AT;
    let k = keys(&s.bufs().mem_mr);
    match s.role() {
        Role::A => {
            let what = "rereg: WRITE before";
            let wc = rereg_write(s, 301, what);
            check(&wc, what, WcOpcode::RdmaWrite, s.qp(), 301);
            ctl.send("written", "");

            ctl.expect("remote-write-removed");
            let what = "rereg: WRITE with REMOTE_WRITE removed";
            let wc = rereg_write(s, 302, what);
            assert_eq!(
                (wc.status(), wc.wr_id(), wc.qp_num()),
                (WcStatus::RemAccessErr, 302, s.qp().qp_num()),
                "{me}: {what}: refused with a remote access error: {wc:?}"
            );
            loud(&format!("{me}: {what}: {:?}", wc.status()));
            ctl.send("refused", "");
        }
        Role::B => {
            ctl.expect("written");
            s.model_mut()[at..at + RDMA_LEN].copy_from_slice(&pattern(301, RDMA_LEN));
            s.check_mem("rereg: WRITE before");

            // The probe shows B's QP going to ERR when it refuses.
            // SAFETY: a receive without SGEs names no memory.
            unsafe {
                s.qp().post_recv(&[RecvWr {
                    wr_id: PROBE,
                    sges: &[],
                }])
            }
            .unwrap_or_else(|e| panic!("{me}: post_recv of the probe: {e}"));
            s.bufs_mut()
                .mem_mr
                .set_access(AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ)
                .unwrap_or_else(|e| panic!("{me}: set_access without REMOTE_WRITE in place: {e}"));
            assert_eq!(
                keys(&s.bufs().mem_mr),
                k,
                "{me}: in place: same handle and keys"
            );
            ctl.send("remote-write-removed", "");

            ctl.expect("refused");
            let wc = wait_one(s.cq(), &format!("{me}: the refusal on b"));
            assert_eq!(
                (wc.wr_id(), wc.status(), wc.qp_num()),
                (PROBE, WcStatus::WrFlushErr, s.qp().qp_num()),
                "{me}: b's probe is flushed (b's QP went to ERR): {wc:?}"
            );
            s.check_mem("rereg: a refused WRITE leaves the memory untouched");
            loud(&format!(
                "{me}: rereg: the refused WRITE left all {LEN} bytes as they were"
            ));
        }
    }
    k
}

/// The second half of the rereg case, once both QPs are back: B restores
/// REMOTE_WRITE in place (the keys still `k`, from [`rereg_refused`]) and
/// A's next WRITE lands. `how` says what happened between the halves, for
/// B's note.
pub fn rereg_restored(s: &mut impl Traffic, ctl: &mut Control, k: (u32, u32, u32), how: &str) {
    let me = s.me().to_string();
    let at = REREG_AT;
    match s.role() {
        Role::A => {
            ctl.expect("remote-write-restored");
            let what = "rereg: WRITE with REMOTE_WRITE restored";
            let wc = rereg_write(s, 303, what);
            check(&wc, what, WcOpcode::RdmaWrite, s.qp(), 303);
            ctl.send("written", "");
            ctl.expect("checked");
        }
        Role::B => {
            s.bufs_mut().mem_mr.set_access(RW_READ).unwrap_or_else(|e| {
                panic!("{me}: set_access restoring REMOTE_WRITE in place: {e}")
            });
            assert_eq!(
                keys(&s.bufs().mem_mr),
                k,
                "{me}: in place: same handle and keys"
            );
            ctl.send("remote-write-restored", "");

            ctl.expect("written");
            s.model_mut()[at..at + RDMA_LEN].copy_from_slice(&pattern(303, RDMA_LEN));
            s.check_mem("rereg: WRITE with REMOTE_WRITE restored");
            loud(&format!(
                "{me}: rereg: REMOTE_WRITE removed in place -> a's WRITE refused; {how}restored -> it landed (rkey {:#x} throughout)",
                k.2
            ));
            ctl.send("checked", "");
        }
    }
}
