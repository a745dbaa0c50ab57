//! The RDMA WRITE that proves each row of the demo: a peer QP writes to
//! the region with the rkey the row's outcome says is valid, and the demo
//! prints whether the bytes landed or the write failed, next to what the
//! region's state says should happen.
//!
//! Two RC QPs of one context in pd1: `writer` makes the WRITE, `owner` is
//! the QP the region is reached through, so the responder checks the
//! region's PD against pd1 and its access for REMOTE_WRITE. How they are
//! joined depends on the device:
//!
//! - **RoCE (rxe)**: to each other over the port's RoCE v2 GID at index 0
//!   (loopback), by hand. A refused WRITE moves both QPs to ERR, with
//!   `RemAccessErr` on the writer; they are reset and reconnected.
//! - **iWARP (siw)**: through the rdma_cm, the only way an iWARP QP gets a
//!   connection, at an IPv4 address of the device's netdev (found by
//!   binding a cm id to each local address). siw completes a WRITE once it
//!   is on the wire, so a refused one completes *successfully* on the
//!   writer; the responder terminates the stream and both cm ids hear
//!   DISCONNECTED. The bytes tell landed from refused, the DISCONNECTED
//!   confirms it, and the QPs and ids are replaced by a new connection.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use memmap2::MmapMut;
use uverbs::cm::{EventChannel, EventKind, LocalConnection, PortSpace};
use uverbs::device::{GidEntry, GidType, TransportType};
use uverbs::qp::{Mtu, QpAttr, QpState};
use uverbs::wr::{Payload, RecvWr, Remote, SendOp, SendWr, Sge, WcStatus, WorkCompletion};
use uverbs::{
    AccessFlags, CompletionQueue, Context, MemoryRegion, ProtectionDomain, QpInit, QpType,
    QueuePair,
};

/// Any failure of the traffic itself (not of the WRITE, which is the result).
pub type Fallible<T> = Result<T, Box<dyn std::error::Error>>;

/// Bytes per WRITE.
const LEN: usize = 64;
/// How long to wait for a completion.
const WAIT: Duration = Duration::from_secs(5);
/// The receive posted on each QP before a reset, whose flush shows that the
/// QP has reached ERR.
const MARKER: u64 = u64::MAX;

/// The peer QP pair and the writer's source buffer. Fields drop in
/// order: the QPs, then the cm connection (if any), the CQs, the source.
pub struct Peer<'a> {
    writer: QueuePair,
    owner: QueuePair,
    /// The cm ids of the connection, on iWARP.
    conn: Option<LocalConnection>,
    writer_cq: CompletionQueue,
    owner_cq: CompletionQueue,
    link: Link,
    pd: &'a ProtectionDomain,
    /// Declared before `src`: deregistered before it is unmapped.
    src_mr: MemoryRegion,
    src: MmapMut,
    /// A fresh pattern per WRITE.
    seed: u8,
}

/// How the two QPs are joined.
enum Link {
    /// RoCE loopback by hand, over one GID of port 1 ([`loopback_gid`]).
    Loopback { gid: GidEntry, mtu: Mtu },
    /// Through the rdma_cm at this address of the device's (iWARP).
    Cm { addr: Ipv4Addr },
}

/// What a WRITE did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Written {
    /// Completed successfully, and exactly its bytes are at the target.
    Landed,
    /// Completed with this error; the target bytes are untouched.
    Failed(WcStatus),
    /// Completed successfully on the writer, yet the bytes never came and
    /// the responder dropped the connection (iWARP's refusal).
    Terminated,
    /// Something else: the text says what.
    Broken(&'static str),
}

impl std::fmt::Display for Written {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Written::Landed => write!(f, "landed"),
            Written::Failed(WcStatus::RemAccessErr) => write!(f, "remote access error"),
            Written::Failed(s) => write!(f, "failed: {s:?}"),
            Written::Terminated => write!(
                f,
                "refused by the responder: nothing landed, the connection was dropped (DISCONNECTED)"
            ),
            Written::Broken(why) => write!(f, "BROKEN: {why}"),
        }
    }
}

impl<'a> Peer<'a> {
    /// Two connected RC QPs in `pd` (of `ctx`) and a registered source.
    pub fn new(ctx: &Context, pd: &'a ProtectionDomain) -> Fallible<Peer<'a>> {
        Self::with_source(ctx, pd, 4096)
    }

    /// [`new`](Self::new) with a source of `len` bytes (at least [`LEN`]),
    /// for [`stream`](Self::stream)s of up to that many.
    pub fn with_source(ctx: &Context, pd: &'a ProtectionDomain, len: usize) -> Fallible<Peer<'a>> {
        let writer_cq = ctx.create_cq(16, None)?;
        let owner_cq = ctx.create_cq(16, None)?;
        let writer = pd.create_qp(&QpInit::new(QpType::Rc, &writer_cq, &writer_cq))?;
        let owner = pd.create_qp(&QpInit::new(QpType::Rc, &owner_cq, &owner_cq))?;
        let link = if writer.transport_type() == TransportType::Iwarp {
            Link::Cm {
                addr: cm_addr_of(ctx)?,
            }
        } else {
            Link::Loopback {
                gid: loopback_gid(ctx)?,
                // At most 1024, as before: the tour's peers agree on it.
                mtu: (ctx.query_port(1)?.active_mtu())
                    .map_or(Mtu::Mtu1024, |m| m.min(Mtu::Mtu1024)),
            }
        };
        let mut src = MmapMut::map_anon(len.max(LEN))?;
        src.fill(0x5a);
        // SAFETY: `src` is unmapped only after `src_mr` (field order).
        let src_mr = unsafe { pd.reg_mr(src.as_mut_ptr(), src.len(), AccessFlags::LOCAL_WRITE) }?;
        let mut peer = Peer {
            writer,
            owner,
            conn: None,
            writer_cq,
            owner_cq,
            link,
            pd,
            src_mr,
            src,
            seed: 0,
        };
        peer.connect()?;
        Ok(peer)
    }

    /// How the QPs are joined, for the demo's heading.
    pub fn describe(&self) -> String {
        match &self.link {
            Link::Loopback { gid, .. } => format!(
                "RoCE loopback over GID {} ({}, {:?})",
                gid.gid_index,
                gid.gid.to_ip(),
                gid.gid_type
            ),
            Link::Cm { addr } => format!("connected by the rdma_cm at {addr}"),
        }
    }

    /// Joins the two QPs as [`Link`] says.
    fn connect(&mut self) -> Fallible<()> {
        match self.link {
            Link::Loopback { gid, mtu } => self.connect_loopback(&gid, mtu),
            Link::Cm { addr } => {
                self.conn = Some(self.connect_cm(addr)?);
                Ok(())
            }
        }
    }

    /// RESET -> INIT -> RTR -> RTS, each QP towards the other.
    fn connect_loopback(&self, gid: &GidEntry, mtu: Mtu) -> Fallible<()> {
        let sgid_index = u8::try_from(gid.gid_index)
            .map_err(|_| format!("GID index {} does not fit an address vector", gid.gid_index))?;
        let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;
        for (qp, peer) in [(&self.writer, &self.owner), (&self.owner, &self.writer)] {
            qp.modify(
                &QpAttr::new()
                    .state(QpState::Init)
                    .pkey_index(0)
                    .port(1)
                    .access_flags(access),
            )?;
            qp.modify(
                &QpAttr::new()
                    .state(QpState::Rtr)
                    .path_mtu(mtu)
                    .dest_qpn(peer.qp_num())
                    .rq_psn(0)
                    .max_dest_rd_atomic(1)
                    .min_rnr_timer(12)
                    .av(QpAttr::roce_dest(gid.gid, sgid_index, 1, 1)),
            )?;
            qp.modify(
                &QpAttr::new()
                    .state(QpState::Rts)
                    .timeout(14)
                    .retry_cnt(7)
                    .rnr_retry(7)
                    .sq_psn(0)
                    .max_rd_atomic(1),
            )?;
        }
        Ok(())
    }

    /// The writer as the cm's client, the owner as the server accepting on
    /// `addr` (a port the kernel picks), in iWARP's order: the client's QP
    /// to INIT before the connect; the server's to INIT and RTR (its RTS
    /// answer carries no state); at establishment the kernel's CM moves
    /// both to RTS, which both QPs then report.
    fn connect_cm(&self, addr: Ipv4Addr) -> Fallible<LocalConnection> {
        let ctx = self.writer.context();
        let (a, b) = (&self.writer, &self.owner);
        let conn = uverbs::cm::connect_pair(ctx, a, b, IpAddr::V4(addr), WAIT)?;
        for qp in [a, b] {
            let state = qp.state();
            if state != QpState::Rts {
                return Err(format!("QP {} is {state:?} after ESTABLISHED", qp.qp_num()).into());
            }
        }
        Ok(conn)
    }

    /// After a failed WRITE: on RoCE a marker receive on each QP, both
    /// moved to ERR, both markers' flushes seen (so the device's own move
    /// to ERR is over), then RESET and reconnect; on iWARP the dead
    /// connection's QPs and ids are replaced by new ones.
    fn recover(&mut self) -> Fallible<()> {
        if let Link::Cm { .. } = self.link {
            let writer =
                self.pd
                    .create_qp(&QpInit::new(QpType::Rc, &self.writer_cq, &self.writer_cq))?;
            let owner =
                self.pd
                    .create_qp(&QpInit::new(QpType::Rc, &self.owner_cq, &self.owner_cq))?;
            // The old QPs go before their cm ids.
            drop(std::mem::replace(&mut self.writer, writer));
            drop(std::mem::replace(&mut self.owner, owner));
            drop(self.conn.take());
            for cq in [&self.writer_cq, &self.owner_cq] {
                while poll_one(cq)?.is_some() {}
            }
            return self.connect();
        }
        for qp in [&self.writer, &self.owner] {
            let marker = RecvWr {
                wr_id: MARKER,
                sges: &[],
            };
            // SAFETY: a receive without SGEs names no memory.
            unsafe { qp.post_recv(&[marker]) }?;
            qp.modify(&QpAttr::new().state(QpState::Err))?;
        }
        for cq in [&self.writer_cq, &self.owner_cq] {
            let deadline = Instant::now() + WAIT;
            while poll_one(cq)?.map(|wc| wc.wr_id()) != Some(MARKER) {
                if Instant::now() > deadline {
                    return Err("recovery: a marker receive was not flushed within 5 s".into());
                }
                std::thread::sleep(Duration::from_micros(100));
            }
        }
        for qp in [&self.writer, &self.owner] {
            qp.modify(&QpAttr::new().state(QpState::Reset))?;
        }
        self.connect()
    }

    /// One RDMA WRITE of [`LEN`] fresh bytes to `target` (the region's
    /// first bytes, which this zeroes first) with `rkey`; checks the bytes
    /// there afterwards and recovers the QPs after a failure.
    ///
    /// # Safety
    ///
    /// `target` must point to [`LEN`] bytes of mapped memory the program
    /// does not use meanwhile (the demo's buffers).
    pub unsafe fn write(&mut self, target: *mut u8, rkey: u32) -> Fallible<Written> {
        self.seed = self.seed.wrapping_add(1);
        let data: Vec<u8> = (0..LEN as u8)
            .map(|i| i.wrapping_mul(29) ^ self.seed.wrapping_mul(101) | 1)
            .collect();
        self.src[..LEN].copy_from_slice(&data);
        // SAFETY: the caller's promise: LEN bytes of ours, unused meanwhile.
        unsafe { std::ptr::write_bytes(target, 0, LEN) };
        let sge = [Sge {
            addr: self.src.as_ptr() as u64,
            length: LEN as u32,
            lkey: self.src_mr.lkey(),
        }];
        let remote = Remote {
            addr: target as u64,
            rkey,
        };
        let wr = SendWr::new(
            u64::from(self.seed),
            SendOp::RdmaWrite { remote, imm: None },
            Payload::Sges(&sge),
        );
        // SAFETY: `src[..LEN]` stays registered and unwritten until the
        // completion is polled below (or the QP is dropped, before `src`).
        unsafe { self.writer.post_send(&[wr]) }?;
        let deadline = Instant::now() + WAIT;
        let wc = loop {
            if let Some(wc) = poll_one(&self.writer_cq)? {
                break wc;
            }
            if Instant::now() > deadline {
                return Ok(Written::Broken("no completion within 5 s"));
            }
            std::thread::sleep(Duration::from_micros(100));
        };
        // SAFETY: as above; the WRITE is complete, nothing else writes there.
        let now = unsafe { std::slice::from_raw_parts(target, LEN) };
        if let (Some(conn), WcStatus::Success) = (&self.conn, wc.status()) {
            // iWARP: the completion says the WRITE left; the bytes arrive
            // or the responder hangs up.
            let outcome = landed_or_dropped(conn, target, &data)?;
            if outcome == Written::Terminated {
                self.recover()?;
            }
            return Ok(outcome);
        }
        if wc.status() == WcStatus::Success {
            return Ok(if now == &data[..] {
                Written::Landed
            } else {
                Written::Broken("completed, but the bytes are not there")
            });
        }
        self.recover()?;
        Ok(if now.iter().all(|&b| b == 0) {
            Written::Failed(wc.status())
        } else {
            Written::Broken("failed, but the target bytes changed")
        })
    }
}

/// After an iWARP WRITE completed on the writer: [`Written::Landed`] once
/// the bytes are at `target`, [`Written::Terminated`] when both ids hear
/// DISCONNECTED first with the bytes untouched; within [`WAIT`].
fn landed_or_dropped(conn: &LocalConnection, target: *const u8, data: &[u8]) -> Fallible<Written> {
    let deadline = Instant::now() + WAIT;
    let mut dropped = [false; 2];
    loop {
        // SAFETY: `target` is LEN bytes of the caller's; the device writes
        // them, if at all, only as a whole WRITE's payload.
        let now = unsafe { std::slice::from_raw_parts(target, LEN) };
        if now == data {
            return Ok(Written::Landed);
        }
        if dropped == [true; 2] {
            return Ok(if now.iter().all(|&b| b == 0) {
                Written::Terminated
            } else {
                Written::Broken("the connection dropped, but the target bytes changed")
            });
        }
        if Instant::now() > deadline {
            return Ok(Written::Broken(
                "completed, but within 5 s neither the bytes came nor the connection dropped",
            ));
        }
        // Each side's id reports on a channel of its own.
        for (side, id) in [conn.active(), conn.passive()].into_iter().enumerate() {
            if let Some(ev) = id.channel().wait_event(Duration::from_millis(5))? {
                if matches!(ev.kind, EventKind::Disconnected) && ev.id == id.handle() {
                    dropped[side] = true;
                }
            }
        }
    }
}

/// An IPv4 address of `ctx`'s netdev: the first local address (from
/// /proc/net/fib_trie) on which a bound cm id lands on this device.
fn cm_addr_of(ctx: &Context) -> Fallible<Ipv4Addr> {
    let trie = std::fs::read_to_string("/proc/net/fib_trie")?;
    let ch = EventChannel::open()?;
    for addr in local_addrs(&trie) {
        let id = ch.create_id(PortSpace::Tcp)?;
        if id.bind(SocketAddr::from((addr, 0))).is_ok() && id.is_on(ctx)? {
            return Ok(addr);
        }
    }
    Err(format!(
        "{}: no local IPv4 address whose cm ids land on it (the rdma_cm needs one on its netdev)",
        ctx.device_name()
    )
    .into())
}

/// The GID the RoCE loopback runs over: the RoCE v2 GID of the first
/// local IPv4 address that has one on port 1 ([`Context::find_gid`]), else
/// the port's GID 0 (its default GID, from the MAC).
fn loopback_gid(ctx: &Context) -> Fallible<GidEntry> {
    let trie = std::fs::read_to_string("/proc/net/fib_trie").unwrap_or_default();
    for addr in local_addrs(&trie) {
        if let Some(entry) = ctx.find_gid(1, addr.into(), GidType::RoceV2)? {
            return Ok(entry);
        }
    }
    Ok(ctx.query_gid_entry(1, 0)?)
}

/// The local unicast IPv4 addresses in a /proc/net/fib_trie listing (each
/// `|-- ADDR` line followed by `/32 host LOCAL`), loopback left out.
fn local_addrs(trie: &str) -> Vec<Ipv4Addr> {
    let mut found = Vec::new();
    let mut last: Option<Ipv4Addr> = None;
    for line in trie.lines() {
        let t = line.trim();
        if let Some(a) = t.strip_prefix("|-- ") {
            last = a.parse().ok();
        } else if t.contains("/32 host LOCAL") {
            if let Some(a) = last.filter(|a| !a.is_loopback() && !found.contains(a)) {
                found.push(a);
            }
        }
    }
    found
}

impl Peer<'_> {
    /// One RDMA WRITE of `len` bytes of the source to `target` with `rkey`
    /// that must succeed (a streaming writer's step): its first 8 bytes are
    /// a fresh stamp, and the call returns once the completion came and the
    /// stamp is at the target (on iWARP the completion only says the WRITE
    /// left). Returns how long that took. Nothing is recovered: a failure
    /// is an error.
    ///
    /// # Safety
    ///
    /// `target` must point to `len` bytes of mapped memory the program does
    /// not use meanwhile, and `len` must not exceed the source.
    pub unsafe fn stream(&mut self, target: *mut u8, len: usize, rkey: u32) -> Fallible<Duration> {
        let t = Instant::now();
        self.seed = self.seed.wrapping_add(1);
        let stamp = (u64::from(self.seed) << 32 | 0x6d6f_7665).to_ne_bytes();
        self.src[..8].copy_from_slice(&stamp);
        let sge = [Sge {
            addr: self.src.as_ptr() as u64,
            length: len as u32,
            lkey: self.src_mr.lkey(),
        }];
        let wr = SendWr::new(
            u64::from(self.seed),
            SendOp::RdmaWrite {
                remote: Remote {
                    addr: target as u64,
                    rkey,
                },
                imm: None,
            },
            Payload::Sges(&sge),
        );
        // SAFETY: `src[..len]` stays registered and unwritten until the
        // completion is polled below (or the QP is dropped, before `src`).
        unsafe { self.writer.post_send(&[wr]) }?;
        let deadline = t + WAIT;
        let wc = loop {
            if let Some(wc) = poll_one(&self.writer_cq)? {
                break wc;
            }
            if Instant::now() > deadline {
                return Err("stream: no completion within 5 s".into());
            }
            std::hint::spin_loop();
        };
        if wc.status() != WcStatus::Success {
            return Err(format!(
                "stream: WRITE of {len} B with rkey {rkey:#x}: {:?}",
                wc.status()
            )
            .into());
        }
        loop {
            // SAFETY: the caller's promise; the device writes there only as
            // this WRITE's payload. Volatile: the device, not this thread,
            // stores the bytes.
            let now: [u8; 8] = unsafe { std::ptr::read_volatile(target.cast::<[u8; 8]>()) };
            if now == stamp {
                return Ok(t.elapsed());
            }
            if Instant::now() > deadline {
                return Err("stream: completed, but the bytes did not land within 5 s".into());
            }
            std::hint::spin_loop();
        }
    }
}

fn poll_one(cq: &CompletionQueue) -> Fallible<Option<WorkCompletion>> {
    let mut wc = [WorkCompletion::default(); 1];
    Ok((cq.poll(&mut wc)? == 1).then_some(wc[0]))
}

/// Whether a WRITE by the peer (a QP in `pd`) with this MR's rkey should
/// land, and if not, why.
pub fn expectation(mr: &MemoryRegion, pd: &ProtectionDomain) -> Result<(), &'static str> {
    if !mr.is_in(pd) {
        Err("the MR is in another PD than the QP")
    } else if !mr.access().contains(AccessFlags::REMOTE_WRITE) {
        Err("the MR lacks REMOTE_WRITE")
    } else {
        Ok(())
    }
}
