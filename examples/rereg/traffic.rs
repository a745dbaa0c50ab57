//! The RDMA WRITE that proves each row of the demo on rxe: a peer QP
//! writes to the region with the rkey the row's outcome says is valid, and
//! the demo prints whether the bytes landed or the write failed, next to
//! what the region's state says should happen.
//!
//! Two RC QPs of one context in pd1, connected to each other over the
//! port's RoCE v2 GID at index 0 (loopback): `writer` makes the WRITE,
//! `owner` is the QP the region is reached through, so the responder
//! checks the region's PD against pd1 and its access for REMOTE_WRITE. A
//! refused WRITE moves both QPs to ERR; they are reset and reconnected.

use std::time::{Duration, Instant};

use memmap2::MmapMut;
use uverbs::command::{Mtu, QpAttr, QpState, QpType};
use uverbs::{
    AccessFlags, CompletionQueue, Context, MemoryRegion, Payload, ProtectionDomain, QpInit,
    QueuePair, RecvWr, Remote, SendFlags, SendOp, SendWr, Sge, WcStatus, WorkCompletion,
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

/// The peer QP pair and the writer's source buffer.
pub struct Peer {
    writer: QueuePair,
    owner: QueuePair,
    writer_cq: CompletionQueue,
    owner_cq: CompletionQueue,
    gid: [u8; 16],
    mtu: Mtu,
    /// Declared before `src`: deregistered before it is unmapped.
    src_mr: MemoryRegion,
    src: MmapMut,
    /// A fresh pattern per WRITE.
    seed: u8,
}

/// What a WRITE did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Written {
    /// Completed successfully, and exactly its bytes are at the target.
    Landed,
    /// Completed with this error; the target bytes are untouched.
    Failed(WcStatus),
    /// Something else: the text says what.
    Broken(&'static str),
}

impl std::fmt::Display for Written {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Written::Landed => write!(f, "landed"),
            Written::Failed(WcStatus::RemAccessErr) => write!(f, "remote access error"),
            Written::Failed(s) => write!(f, "failed: {s:?}"),
            Written::Broken(why) => write!(f, "BROKEN: {why}"),
        }
    }
}

impl Peer {
    /// Two connected RC QPs in `pd` (of `ctx`) and a registered source.
    pub fn new(ctx: &Context, pd: &ProtectionDomain) -> Fallible<Peer> {
        let gid = ctx.query_gid(1, 0)?.raw();
        let mtu = match ctx.query_port(1)?.active_mtu {
            1 => Mtu::Mtu256,
            2 => Mtu::Mtu512,
            _ => Mtu::Mtu1024,
        };
        let writer_cq = ctx.create_cq(16, None)?;
        let owner_cq = ctx.create_cq(16, None)?;
        let writer = pd.create_qp(&QpInit::new(QpType::Rc, &writer_cq, &writer_cq))?;
        let owner = pd.create_qp(&QpInit::new(QpType::Rc, &owner_cq, &owner_cq))?;
        let mut src = MmapMut::map_anon(4096)?;
        // SAFETY: `src` is unmapped only after `src_mr` (field order).
        let src_mr = unsafe { pd.reg_mr(src.as_mut_ptr(), src.len(), AccessFlags::LOCAL_WRITE) }?;
        let peer = Peer {
            writer,
            owner,
            writer_cq,
            owner_cq,
            gid,
            mtu,
            src_mr,
            src,
            seed: 0,
        };
        peer.connect()?;
        Ok(peer)
    }

    /// RESET -> INIT -> RTR -> RTS, each QP towards the other.
    fn connect(&self) -> Fallible<()> {
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
                    .path_mtu(self.mtu)
                    .dest_qpn(peer.qp_num())
                    .rq_psn(0)
                    .max_dest_rd_atomic(1)
                    .min_rnr_timer(12)
                    .av(QpAttr::roce_dest(self.gid, 0, 1, 1)),
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

    /// After a failed WRITE (both QPs in ERR, or about to be): a marker
    /// receive on each, both moved to ERR, both markers' flushes seen (so
    /// the device's own move to ERR is over), then RESET and reconnect.
    fn recover(&self) -> Fallible<()> {
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
            while poll_one(cq)?.map(|wc| wc.wr_id) != Some(MARKER) {
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
        let wr = SendWr {
            wr_id: u64::from(self.seed),
            op: SendOp::RdmaWrite { remote, imm: None },
            flags: SendFlags::SIGNALED,
            payload: Payload::Sges(&sge),
            ud: None,
        };
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
        if wc.status == WcStatus::Success {
            return Ok(if now == &data[..] {
                Written::Landed
            } else {
                Written::Broken("completed, but the bytes are not there")
            });
        }
        self.recover()?;
        Ok(if now.iter().all(|&b| b == 0) {
            Written::Failed(wc.status)
        } else {
            Written::Broken("failed, but the target bytes changed")
        })
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
