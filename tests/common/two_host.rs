//! The two-host run's fixtures: which host this process is (`Role`, from
//! the harness's `UVERBS_HOST_ROLE` and companions), a line-based control
//! connection between the two hosts with bounded waits (`Control`), and
//! byte patterns that tell every write apart. Shared by every
//! `tests/two_host_*.rs` binary.

use std::io::{BufRead, BufReader, ErrorKind, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

/// How long each side waits for the other to show up on the control
/// connection (the peer's previous run may still be finishing).
pub const MEET_WAIT: Duration = Duration::from_secs(120);
/// How long each side waits for the peer's next control message.
pub const CONTROL_WAIT: Duration = Duration::from_secs(60);

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

/// What the two-host harness tells this process.
pub struct Peer {
    pub role: Role,
    pub local: Ipv4Addr,
    pub peer: Ipv4Addr,
    pub port: u16,
    /// `<config>/<binary>`: both sides must be running the same thing.
    pub run: String,
}

/// The two-host environment, or `None` outside a two-host run; a role
/// with a missing or malformed companion variable fails.
pub fn peer_from_env(test: &str) -> Option<Peer> {
    let role = match std::env::var("UVERBS_HOST_ROLE").ok()?.as_str() {
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
}

/// A deterministic byte pattern for `seed` (never all zero).
pub fn pattern(seed: u64, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| {
            let x = seed
                .wrapping_mul(0x9e37_79b9_7f4a_7c15)
                .rotate_left((i % 61) as u32);
            (x as u8) ^ (i as u8) ^ 0x5a
        })
        .collect()
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
