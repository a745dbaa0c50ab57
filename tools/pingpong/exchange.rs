//! `ibv_rc_pingpong`'s side channel, byte for byte (rdma-core's
//! libibverbs/examples/rc_pingpong.c and pingpong.c), the one copy in this
//! tree: `pingpong` without `--cm` speaks it, and `cargo vm test` runs it
//! against the C program in both directions (`tools/c_peers.rs`).
//!
//! Over one TCP connection (the client connects to the server's port,
//! 18515 by default):
//!
//! 1. the client writes its message: `"%04x:%06x:%06x:%s"` of LID, QPN,
//!    PSN and its GID in wire form, with the terminating NUL: 52 bytes;
//! 2. the server reads it, moves its QP to RTR and RTS towards the client,
//!    then writes its own 52 bytes;
//! 3. the client reads them and writes `"done"` with its NUL (5 bytes);
//!    the server reads that, and both close the connection. The client
//!    moves its QP to RTR and RTS after the exchange.
//!
//! A GID's wire form is its 16 bytes in order, two hex digits each
//! (`gid_to_wire_gid`: four big-endian 32-bit words as `%08x`). A side run
//! without `-g` sends the zero GID; the peer then builds no GRH (its
//! `pp_connect_ctx` looks at the GID's interface ID), which RoCE cannot do
//! without.

use std::io::{Read, Write};
use std::net::{Ipv6Addr, TcpListener, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use uverbs::device::Gid;

use super::Result;

/// rc_pingpong's message: `"%04x:%06x:%06x:%s"` and its NUL.
pub const WIRE_LEN: usize = 52;
/// The client's last word, NUL included.
const DONE: &[u8; 5] = b"done\0";
/// How long a client waits between connect attempts while the server does
/// not listen yet.
const RETRY_AFTER: Duration = Duration::from_millis(100);

/// One side as rc_pingpong describes it (`struct pingpong_dest`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Dest {
    pub lid: u16,
    pub qpn: u32,
    pub psn: u32,
    /// Zero when the side was run without `-g`.
    pub gid: Gid,
}

impl Dest {
    /// The 52 bytes rc_pingpong writes.
    pub fn to_wire(self) -> [u8; WIRE_LEN] {
        let gid: String = self.gid.raw().iter().map(|b| format!("{b:02x}")).collect();
        let text = format!("{:04x}:{:06x}:{:06x}:{gid}", self.lid, self.qpn, self.psn);
        let mut out = [0u8; WIRE_LEN];
        out[..text.len()].copy_from_slice(text.as_bytes());
        out
    }

    /// What rc_pingpong's `sscanf("%x:%x:%x:%s")` and `wire_gid_to_gid`
    /// read from the 52 bytes (strictly: every field must be there).
    pub fn from_wire(wire: &[u8; WIRE_LEN]) -> Result<Dest> {
        let end = wire.iter().position(|&b| b == 0).unwrap_or(WIRE_LEN);
        let text = std::str::from_utf8(&wire[..end])?;
        let bad = || format!("not an rc_pingpong address: {text:?}");
        let mut parts = text.splitn(4, ':');
        let mut field = |max: u32| -> Result<u32> {
            let v = u32::from_str_radix(parts.next().ok_or_else(bad)?, 16).map_err(|_| bad())?;
            if v > max {
                return Err(bad().into());
            }
            Ok(v)
        };
        let lid = field(0xffff)? as u16;
        let qpn = field(0xff_ffff)?;
        let psn = field(0xff_ffff)?;
        let hex = parts.next().ok_or_else(bad)?;
        if hex.len() != 32 {
            return Err(bad().into());
        }
        let mut raw = [0u8; 16];
        for (i, b) in raw.iter_mut().enumerate() {
            *b = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).map_err(|_| bad())?;
        }
        Ok(Dest {
            lid,
            qpn,
            psn,
            gid: Gid::from_raw(raw),
        })
    }

    /// Whether the peer builds a GRH towards this side: rc_pingpong's
    /// test, a non-zero interface ID (the GID's last 8 bytes).
    pub fn is_global(&self) -> bool {
        self.gid.raw()[8..] != [0; 8]
    }

    /// rc_pingpong's printout of an address (`inet_ntop` for the GID).
    pub fn describe(&self) -> String {
        format!(
            "LID 0x{:04x}, QPN 0x{:06x}, PSN 0x{:06x}, GID {}",
            self.lid,
            self.qpn,
            self.psn,
            Ipv6Addr::from(self.gid.raw())
        )
    }
}

/// Applies the stream's bound to every read and write.
fn bounded(stream: TcpStream, wait: Duration) -> Result<TcpStream> {
    stream.set_read_timeout(Some(wait))?;
    stream.set_write_timeout(Some(wait))?;
    stream.set_nodelay(true)?;
    Ok(stream)
}

fn read_exact(stream: &mut TcpStream, buf: &mut [u8], what: &str) -> Result<()> {
    stream
        .read_exact(buf)
        .map_err(|e| format!("{what}: {e}").into())
}

/// The server's half on an accepted `stream`: reads the client's address,
/// lets `connect` take the QP to RTS towards it, answers with `me`, reads
/// `"done"`. The client's address.
pub fn serve(
    stream: TcpStream,
    wait: Duration,
    me: &Dest,
    connect: impl FnOnce(&Dest) -> Result<()>,
) -> Result<Dest> {
    let mut stream = bounded(stream, wait)?;
    let mut wire = [0u8; WIRE_LEN];
    read_exact(&mut stream, &mut wire, "the client's address")?;
    let peer = Dest::from_wire(&wire)?;
    // The server's QP is ready before it answers.
    connect(&peer)?;
    stream.write_all(&me.to_wire())?;
    let mut done = [0u8; DONE.len()];
    read_exact(&mut stream, &mut done, "the client's \"done\"")?;
    if &done != DONE {
        return Err(format!("the client wrote {done:02x?}, not \"done\"").into());
    }
    Ok(peer)
}

/// The client's half: connects to `host`:`port` (again every
/// [`RETRY_AFTER`] while nothing listens there, for at most `wait`),
/// writes `me`, reads the server's address, writes `"done"`. The server's
/// address (its QP is ready by then).
pub fn call(host: &str, port: u16, wait: Duration, me: &Dest) -> Result<Dest> {
    let deadline = Instant::now() + wait;
    let stream = loop {
        let (mut got, mut last) = (None, None);
        for addr in (host, port).to_socket_addrs()? {
            match TcpStream::connect_timeout(&addr, wait) {
                Ok(s) => {
                    got = Some(s);
                    break;
                }
                Err(e) => last = Some(e),
            }
        }
        if let Some(s) = got {
            break s;
        }
        if Instant::now() + RETRY_AFTER >= deadline {
            let why = last.map_or("no address".to_string(), |e| e.to_string());
            return Err(format!("connect to {host}:{port}: {why} (tried for {wait:?})").into());
        }
        std::thread::sleep(RETRY_AFTER);
    };
    let mut stream = bounded(stream, wait)?;
    stream.write_all(&me.to_wire())?;
    let mut wire = [0u8; WIRE_LEN];
    read_exact(&mut stream, &mut wire, "the server's address")?;
    stream.write_all(DONE)?;
    Dest::from_wire(&wire)
}

/// The listener rc_pingpong's server opens: every IPv4 address, `port`.
pub fn listen(port: u16) -> Result<TcpListener> {
    TcpListener::bind(("0.0.0.0", port)).map_err(|e| format!("listen on port {port}: {e}").into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wire_format_is_rc_pingpongs() {
        let mut raw = [0u8; 16];
        raw[10..].copy_from_slice(&[0xff, 0xff, 192, 0, 2, 1]);
        let d = Dest {
            lid: 0,
            qpn: 0x11,
            psn: 0xabcdef,
            gid: Gid::from_raw(raw),
        };
        let wire = d.to_wire();
        let text = "0000:000011:abcdef:00000000000000000000ffffc0000201";
        assert_eq!(text.len() + 1, WIRE_LEN);
        assert_eq!(&wire[..text.len()], text.as_bytes());
        assert_eq!(wire[WIRE_LEN - 1], 0);
        assert_eq!(Dest::from_wire(&wire).unwrap(), d);
        assert!(d.is_global());
        assert_eq!(
            d.describe(),
            "LID 0x0000, QPN 0x000011, PSN 0xabcdef, GID ::ffff:192.0.2.1"
        );
        // Without -g: the zero GID, no GRH.
        let none = Dest {
            gid: Gid::default(),
            ..d
        };
        assert!(!none.is_global());
        assert!(none.describe().ends_with("GID ::"));
        let mut short = [0u8; WIRE_LEN];
        short[..9].copy_from_slice(b"0000:0011");
        assert!(Dest::from_wire(&short).is_err());
    }
}
