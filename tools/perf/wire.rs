//! perftest's wire protocol (perftest 4.5, `src/perftest_communication.c`),
//! so either side of a run may be perftest's own C program.
//!
//! Every exchange is perftest's `ctx_xchg_data`: the client sends first and
//! then reads, the server reads first and then sends, each message of a
//! fixed size. In order:
//! 1. the version, 16 bytes of text ("6.06" and NULs); a peer older than
//!    5.70 is refused, as perftest refuses it;
//! 2. the cycle buffer and the cache-line size, 4 bytes each in network
//!    order (`check_sys_data`); the larger of each side's wins;
//! 3. the port's MTU as its enum number in text, 2 bytes ("3" and a NUL,
//!    `check_mtu`); the smaller wins;
//! 4. key exchanges (`ctx_hand_shake`), each both sides' [`Dest`]: how
//!    many, and where they fall around connecting, depends on the test
//!    (`side::hand_shakes`);
//! 5. for write_bw the client's report (`xchg_bw_reports`: five 8-byte
//!    values), and last, in every test but write_lat, a key exchange that
//!    ends the run (`ctx_close_connection`), after which a TCP side writes
//!    "done"; write_lat.c ends with its loop (`side::Ending`).
//!
//! By hand the messages go over TCP, the keys as 108 bytes of text
//! (`KEY_PRINT_FMT_GID`). With perftest's `-R` they go over a first
//! rdma_cm connection of its own, a control QP that SENDs each message into
//! the peer's one posted receive, the keys as perftest's
//! `struct pingpong_dest` in network order (56 bytes); the measured QP is a
//! second rdma_cm connection to the same port. Neither connection carries
//! private data (perftest's is empty on IPv4).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use memmap2::MmapMut;
use uverbs::qp::Mtu;
use uverbs::wr::{Payload, RecvWr, SendOp, SendWr, Sge, WcStatus, WorkCompletion};
use uverbs::{AccessFlags, CompletionQueue, Context, MemoryRegion, QpInit, QpType, QueuePair};

use super::Result;

/// The version we announce: perftest 4.5-0.17's (Debian 12's package), so
/// a perftest peer takes the paths it takes with itself.
pub const VERSION: &str = "6.06";
/// The oldest version perftest (and we) accept (`check_version_compatibility`).
const OLDEST: f64 = 5.70;
/// perftest's `MAX_VERSION`.
const VERSION_LEN: usize = 16;
/// The text keys with a GID (`KEY_MSG_SIZE_GID`): 107 characters and a NUL.
const KEY_TEXT_LEN: usize = 108;
/// `struct pingpong_dest` on x86-64: the binary keys over the control QP.
const KEY_BIN_LEN: usize = 56;
/// The binary keys up to the end of the GID: what we need of them.
const KEY_BIN_USED: usize = 48;
/// The control QP's work request id (perftest's `SYNC_SPEC_ID`).
const SYNC_ID: u64 = 5;
/// Our cycle buffer (perftest's default: the page size) and cache line.
pub const CYCLE_BUFFER: u32 = 4096;
const CACHE_LINE: u32 = 64;
/// The largest cycle buffer or cache line we accept from a peer.
const MAX_CYCLE_BUFFER: u32 = 1 << 30;
const MAX_CACHE_LINE: u32 = 4096;

/// One side's keys (perftest's `struct pingpong_dest`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Dest {
    pub lid: u32,
    pub out_reads: u32,
    pub qpn: u32,
    pub psn: u32,
    pub rkey: u32,
    pub vaddr: u64,
    pub gid: [u8; 16],
    pub srqn: u32,
}

impl Dest {
    /// The text form, `%04x:%04x:%06x:%06x:%08x:%016llx:` then each GID
    /// byte as `%02x:` and the SRQ number as `%08x:`, NUL-padded to 108.
    pub fn to_text(self) -> Result<[u8; KEY_TEXT_LEN]> {
        let mut s = format!(
            "{:04x}:{:04x}:{:06x}:{:06x}:{:08x}:{:016x}:",
            self.lid, self.out_reads, self.qpn, self.psn, self.rkey, self.vaddr
        );
        for b in self.gid {
            s.push_str(&format!("{b:02x}:"));
        }
        s.push_str(&format!("{:08x}:", self.srqn));
        // A field wider than its format would overflow perftest's buffer.
        if s.len() >= KEY_TEXT_LEN {
            return Err(
                format!("our keys {s:?} do not fit perftest's {KEY_TEXT_LEN} bytes").into(),
            );
        }
        let mut out = [0u8; KEY_TEXT_LEN];
        out[..s.len()].copy_from_slice(s.as_bytes());
        Ok(out)
    }

    /// Reads the text form: 6 hex fields, 16 GID bytes and the SRQ
    /// number, each ended by ':', up to the first NUL.
    pub fn from_text(bytes: &[u8]) -> Result<Dest> {
        let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
        let text = std::str::from_utf8(&bytes[..end])
            .map_err(|_| format!("the peer's keys are not text: {:02x?}", &bytes[..end]))?;
        let fields: Vec<&str> = text.split(':').collect();
        // 23 fields, each followed by ':', so the last piece is empty.
        if fields.len() != 24 || !fields[23].is_empty() {
            return Err(format!(
                "the peer's keys {text:?} are not perftest's 23 ':'-ended hex fields"
            )
            .into());
        }
        let hex = |i: usize, name: &str| -> Result<u64> {
            u64::from_str_radix(fields[i], 16).map_err(|_| {
                format!(
                    "the peer's keys {text:?}: {name} {:?} is not hex",
                    fields[i]
                )
                .into()
            })
        };
        let narrow = |i: usize, name: &str| -> Result<u32> {
            u32::try_from(hex(i, name)?)
                .map_err(|_| format!("the peer's keys {text:?}: {name} is too large").into())
        };
        let mut gid = [0u8; 16];
        for (k, g) in gid.iter_mut().enumerate() {
            *g = u8::try_from(hex(6 + k, "a GID byte")?)
                .map_err(|_| format!("the peer's keys {text:?}: GID byte {k} is too large"))?;
        }
        Ok(Dest {
            lid: narrow(0, "the LID")?,
            out_reads: narrow(1, "out_reads")?,
            qpn: narrow(2, "the QPN")?,
            psn: narrow(3, "the PSN")?,
            rkey: narrow(4, "the rkey")?,
            vaddr: hex(5, "the address")?,
            gid,
            srqn: narrow(22, "the SRQ number")?,
        })
    }

    /// The binary form: `struct pingpong_dest` with every field in network
    /// order (perftest built with `HAVE_ENDIAN`, as Debian's is); the
    /// padding after `rkey` and the trailing `gid_index` are zero.
    pub fn to_binary(self) -> [u8; KEY_BIN_LEN] {
        let mut b = [0u8; KEY_BIN_LEN];
        for (at, v) in [
            (0, self.lid),
            (4, self.out_reads),
            (8, self.qpn),
            (12, self.psn),
            (16, self.rkey),
            (48, self.srqn),
        ] {
            b[at..at + 4].copy_from_slice(&v.to_be_bytes());
        }
        b[24..32].copy_from_slice(&self.vaddr.to_be_bytes());
        b[32..48].copy_from_slice(&self.gid);
        b
    }

    /// Reads the binary form (at least the fields up to the GID).
    pub fn from_binary(b: &[u8]) -> Result<Dest> {
        if b.len() < KEY_BIN_USED {
            return Err(format!(
                "the peer's keys are {} bytes, not perftest's {KEY_BIN_LEN}",
                b.len()
            )
            .into());
        }
        let word = |at: usize| u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]);
        let mut vaddr = [0u8; 8];
        vaddr.copy_from_slice(&b[24..32]);
        let mut gid = [0u8; 16];
        gid.copy_from_slice(&b[32..48]);
        Ok(Dest {
            lid: word(0),
            out_reads: word(4),
            qpn: word(8),
            psn: word(12),
            rkey: word(16),
            vaddr: u64::from_be_bytes(vaddr),
            gid,
            srqn: if b.len() >= 52 { word(48) } else { 0 },
        })
    }
}

/// Whether a GID is IPv4-mapped (`::ffff:a.b.c.d`), perftest's test of
/// two sides' GID compatibility.
pub fn v4_mapped(gid: &[u8; 16]) -> bool {
    gid[..10].iter().all(|&b| b == 0) && gid[10] == 0xff && gid[11] == 0xff
}

/// What the preamble settled.
pub struct Agreed {
    /// The larger cycle buffer: the peer may address this much of our
    /// target area (or `size`, if larger).
    pub cycle_buffer: usize,
    pub mtu: Mtu,
}

/// The channel perftest's messages travel on.
pub enum Control {
    Tcp(TcpStream),
    Qp(Box<ControlQp>),
}

impl Control {
    pub fn tcp(stream: TcpStream) -> Result<Control> {
        stream.set_nodelay(true)?;
        Ok(Control::Tcp(stream))
    }

    /// One exchange: ours out and the peer's in, the client first. The
    /// peer's message is `len` bytes (over the control QP at least `min`).
    fn xchg(
        &mut self,
        client: bool,
        mine: &[u8],
        min: usize,
        len: usize,
        what: &str,
        timeout: Duration,
    ) -> Result<Vec<u8>> {
        if client {
            self.send(mine, what)?;
            self.recv(min, len, what, timeout)
        } else {
            let got = self.recv(min, len, what, timeout)?;
            self.send(mine, what)?;
            Ok(got)
        }
    }

    fn send(&mut self, mine: &[u8], what: &str) -> Result<()> {
        match self {
            // One write: perftest reads each message with one read().
            Control::Tcp(s) => s
                .write_all(mine)
                .map_err(|e| format!("{what}: sending {} bytes: {e}", mine.len()).into()),
            Control::Qp(q) => q.send(mine, what),
        }
    }

    fn recv(&mut self, min: usize, len: usize, what: &str, timeout: Duration) -> Result<Vec<u8>> {
        match self {
            Control::Tcp(s) => {
                s.set_read_timeout(Some(timeout))?;
                let mut buf = vec![0u8; len];
                s.read_exact(&mut buf).map_err(|e| match e.kind() {
                    std::io::ErrorKind::UnexpectedEof => format!("{what}: the peer hung up"),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => {
                        format!("{what}: nothing from the peer within {timeout:?}")
                    }
                    _ => format!("{what}: {e}"),
                })?;
                Ok(buf)
            }
            Control::Qp(q) => q.recv(min, len, what, timeout),
        }
    }

    /// The version, system data and MTU exchanges that open every run.
    pub fn preamble(&mut self, client: bool, port_mtu: Mtu, timeout: Duration) -> Result<Agreed> {
        let mut v = [0u8; VERSION_LEN];
        v[..VERSION.len()].copy_from_slice(VERSION.as_bytes());
        let rem = self.xchg(client, &v, VERSION_LEN, VERSION_LEN, "the version", timeout)?;
        let version = peer_version(&rem)?;
        if version < OLDEST {
            return Err(format!(
                "the peer speaks perftest {version}; perftest's protocol needs {OLDEST:.2} or later"
            )
            .into());
        }
        let mut int = |mine: u32, what: &str, max: u32| -> Result<u32> {
            let rem = self.xchg(client, &mine.to_be_bytes(), 4, 4, what, timeout)?;
            let v = u32::from_be_bytes([rem[0], rem[1], rem[2], rem[3]]);
            if v == 0 || v > max {
                return Err(format!("{what}: the peer's {v} is not within 1 ..= {max}").into());
            }
            Ok(v.max(mine))
        };
        let cycle_buffer = int(CYCLE_BUFFER, "the cycle buffer", MAX_CYCLE_BUFFER)?;
        int(CACHE_LINE, "the cache line size", MAX_CACHE_LINE)?;
        let mine = [b'0' + port_mtu as u8, 0];
        let rem = self.xchg(client, &mine, 2, 2, "the MTU", timeout)?;
        let text = rem.split(|&b| b == 0).next().unwrap_or(&[]);
        let theirs = std::str::from_utf8(text)
            .ok()
            .and_then(|t| t.parse::<u8>().ok())
            .and_then(Mtu::from_raw)
            .ok_or_else(|| format!("the MTU: the peer's {rem:02x?} is no MTU number (1 ..= 5)"))?;
        let mtu = if (theirs as u8) < (port_mtu as u8) {
            theirs
        } else {
            port_mtu
        };
        Ok(Agreed {
            cycle_buffer: cycle_buffer as usize,
            mtu,
        })
    }

    /// One key exchange (`ctx_hand_shake`): our keys out, the peer's in.
    pub fn keys(
        &mut self,
        client: bool,
        mine: &Dest,
        what: &str,
        timeout: Duration,
    ) -> Result<Dest> {
        match self {
            Control::Tcp(_) => {
                let rem = self.xchg(
                    client,
                    &mine.to_text()?,
                    KEY_TEXT_LEN,
                    KEY_TEXT_LEN,
                    what,
                    timeout,
                )?;
                Dest::from_text(&rem).map_err(|e| format!("{what}: {e}").into())
            }
            Control::Qp(_) => {
                let rem = self.xchg(
                    client,
                    &mine.to_binary(),
                    KEY_BIN_USED,
                    KEY_BIN_LEN,
                    what,
                    timeout,
                )?;
                Dest::from_binary(&rem).map_err(|e| format!("{what}: {e}").into())
            }
        }
    }

    /// write_bw's reports (`xchg_bw_reports`): message size, iterations,
    /// peak and average bandwidth (MiB/s) and message rate (Mpps), each
    /// 8 bytes in network order; the peer's, as `[size, iters]` and
    /// `[peak, avg, rate]`.
    pub fn reports(
        &mut self,
        client: bool,
        mine: ([u64; 2], [f64; 3]),
        timeout: Duration,
    ) -> Result<([u64; 2], [f64; 3])> {
        let mut ints = [0u64; 2];
        for (k, what) in ["the report's size", "the report's iterations"]
            .iter()
            .enumerate()
        {
            let rem = self.xchg(client, &mine.0[k].to_be_bytes(), 8, 8, what, timeout)?;
            ints[k] = u64::from_be_bytes(rem[..8].try_into()?);
        }
        let mut floats = [0f64; 3];
        for (k, what) in [
            "the report's peak",
            "the report's average",
            "the report's rate",
        ]
        .iter()
        .enumerate()
        {
            let rem = self.xchg(
                client,
                &mine.1[k].to_bits().to_be_bytes(),
                8,
                8,
                what,
                timeout,
            )?;
            floats[k] = f64::from_bits(u64::from_be_bytes(rem[..8].try_into()?));
        }
        Ok((ints, floats))
    }

    /// The end of `ctx_close_connection` over TCP: "done" and its NUL, which
    /// nobody reads; the peer may have closed already, so a failure is no
    /// error.
    pub fn done(&mut self) {
        if let Control::Tcp(s) = self {
            let _ = s.write_all(b"done\0");
        }
    }
}

/// The peer's version text as a number (perftest's `atof`).
fn peer_version(bytes: &[u8]) -> Result<f64> {
    let text = bytes.split(|&b| b == 0).next().unwrap_or(&[]);
    let s = String::from_utf8_lossy(text);
    let number: String = s
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '.')
        .collect();
    number
        .parse::<f64>()
        .map_err(|_| format!("the version: the peer's {s:?} is no perftest version").into())
}

/// perftest's control QP of an rdma_cm run: an RC QP with one receive
/// posted at a time; each message is one SEND.
pub struct ControlQp {
    pub qp: QueuePair,
    scq: CompletionQueue,
    rcq: CompletionQueue,
    mr: MemoryRegion,
    buf: MmapMut,
}

/// Where receives land and sends go from, in the control QP's page.
const RECV_AT: usize = 0;
const SEND_AT: usize = 128;
const SLOT: usize = 128;

impl ControlQp {
    pub fn new(ctx: &Context) -> Result<ControlQp> {
        let pd = ctx.alloc_pd()?;
        let scq = ctx.create_cq(4, None)?;
        let rcq = ctx.create_cq(4, None)?;
        let init = QpInit::new(QpType::Rc, &scq, &rcq)
            .max_send_wr(2)
            .max_recv_wr(2);
        let qp = pd.create_qp(&init)?;
        let mut buf = MmapMut::map_anon(4096)?;
        // SAFETY: `buf` is a mapping of its own that outlives the MR (the
        // field order of `ControlQp`: the QP, CQs and MR drop before it).
        let mr = unsafe { pd.reg_mr(buf.as_mut_ptr(), buf.len(), AccessFlags::LOCAL_WRITE)? };
        Ok(ControlQp {
            qp,
            scq,
            rcq,
            mr,
            buf,
        })
    }

    fn sge(&self, at: usize, len: usize) -> Sge {
        Sge {
            addr: self.buf.as_ptr() as u64 + at as u64,
            length: len as u32,
            lkey: self.mr.lkey(),
        }
    }

    /// Posts the one receive (perftest's `post_one_recv_wqe`).
    pub fn post_recv(&self) -> Result<()> {
        let sge = [self.sge(RECV_AT, SLOT)];
        // SAFETY: the receive slot is read only after this receive's
        // completion and before the next is posted (`recv`); the buffer
        // outlives the QP.
        unsafe { self.qp.post_recv(&[RecvWr::new(SYNC_ID, &sge)])? };
        Ok(())
    }

    fn send(&mut self, mine: &[u8], what: &str) -> Result<()> {
        if mine.len() > SLOT {
            return Err(format!("{what}: {} bytes do not fit the control slot", mine.len()).into());
        }
        // The previous SEND out of the slot has completed (polled below).
        self.buf[SEND_AT..SEND_AT + mine.len()].copy_from_slice(mine);
        let sge = [self.sge(SEND_AT, mine.len())];
        let wr = SendWr::new(SYNC_ID, SendOp::Send { imm: None }, Payload::Sges(&sge));
        // SAFETY: the send slot is not written again before this SEND's
        // completion, polled right here; the buffer outlives the QP.
        unsafe { self.qp.post_send(&[wr])? };
        poll_one(&self.scq, what, super::WAIT)?;
        Ok(())
    }

    fn recv(&mut self, min: usize, len: usize, what: &str, timeout: Duration) -> Result<Vec<u8>> {
        let wc = poll_one(&self.rcq, what, timeout)?;
        if wc.wr_id() != SYNC_ID {
            return Err(format!("{what}: a receive with id {} completed", wc.wr_id()).into());
        }
        let n = wc.byte_len() as usize;
        if n < min || n > len {
            return Err(format!("{what}: the peer sent {n} bytes, not {len}").into());
        }
        let got = self.buf[RECV_AT..RECV_AT + n].to_vec();
        self.post_recv()?;
        Ok(got)
    }
}

/// Polls `cq` for one successful completion within `timeout`.
fn poll_one(cq: &CompletionQueue, what: &str, timeout: Duration) -> Result<WorkCompletion> {
    let mut wcs = [WorkCompletion::default(); 1];
    let deadline = Instant::now() + timeout;
    loop {
        if cq.poll(&mut wcs)? == 1 {
            if wcs[0].status() != WcStatus::Success {
                return Err(
                    format!("{what}: the control QP's completion failed: {:?}", wcs[0]).into(),
                );
            }
            return Ok(wcs[0]);
        }
        if Instant::now() >= deadline {
            return Err(format!("{what}: nothing on the control QP within {timeout:?}").into());
        }
        std::thread::yield_now();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dest() -> Dest {
        Dest {
            lid: 0,
            out_reads: 1,
            qpn: 0x11,
            psn: 0xabcdef,
            rkey: 0x1234,
            vaddr: 0x7f00_0000_1000,
            gid: [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 192, 0, 2, 1],
            srqn: 0,
        }
    }

    #[test]
    fn text_keys_are_perftests_108_bytes() {
        let t = dest().to_text().unwrap();
        let s = std::str::from_utf8(&t[..107]).unwrap();
        assert_eq!(
            s,
            "0000:0001:000011:abcdef:00001234:00007f0000001000:00:00:00:00:00:00:00:00:00:00:ff:ff:c0:00:02:01:00000000:"
        );
        assert_eq!(t[107], 0);
        assert_eq!(Dest::from_text(&t).unwrap(), dest());
        assert!(Dest::from_text(b"0000:zz:").is_err());
        assert!(Dest::from_text(&[0xff; 108]).is_err());
    }

    #[test]
    fn binary_keys_round_trip() {
        let b = dest().to_binary();
        assert_eq!(&b[8..12], &[0, 0, 0, 0x11]);
        assert_eq!(Dest::from_binary(&b).unwrap(), dest());
        assert!(Dest::from_binary(&b[..20]).is_err());
    }

    #[test]
    fn versions_parse_like_atof() {
        assert_eq!(peer_version(b"6.06\0\0\0\0\0\0\0\0\0\0\0\0").unwrap(), 6.06);
        assert!(peer_version(b"abc\0").is_err());
    }
}
