//! This crate's side of the growth bench: the typed API a user calls.

use std::sync::Arc;
use std::time::{Duration, Instant};

use memmap2::MmapMut;
use uverbs::device::OpenOptions;
use uverbs::fork::{ForkMode, ForkSafety, MadviseAdvisor};
use uverbs::mr::{ReregFallback, ReregFlags, ReregPath};
use uverbs::{
    AccessFlags, CompletionQueue, Context, Error, ProtectionDomain, QpInit, QpType, QueuePair,
};

use crate::{Limit, MrTimes, PAGE, QP_DEPTH};

const ACCESS_A: AccessFlags = AccessFlags::LOCAL_WRITE
    .union(AccessFlags::REMOTE_READ)
    .union(AccessFlags::REMOTE_WRITE);
const ACCESS_B: AccessFlags = AccessFlags::LOCAL_WRITE.union(AccessFlags::REMOTE_READ);

fn open(device: &str, fork: bool) -> Result<Context, String> {
    let dev = uverbs::devices()
        .map_err(|e| format!("ours: listing devices: {e}"))?
        .into_iter()
        .find(|d| d.name() == device)
        .ok_or_else(|| format!("ours: no device {device}"))?;
    let mode = if fork {
        ForkMode::Enabled
    } else {
        ForkMode::Disabled
    };
    let fork = Arc::new(ForkSafety::new(mode, Box::new(MadviseAdvisor)));
    dev.open_with(&OpenOptions::new().fork_safety(fork))
        .map_err(|e| format!("ours: opening {device}: {e}"))
}

/// A touched anonymous buffer of `pages` pages.
pub fn buffer(pages: usize) -> MmapMut {
    let mut m = MmapMut::map_anon(pages * PAGE).expect("mmap of a benchmark buffer");
    m.fill(1);
    m
}

/// Part 1: with `live - 1` regions on every other page of a buffer, `n`
/// times reg, ACCESS rereg (replace fallback) and dereg of one more page.
pub fn mrs(device: &str, live: usize, fork: bool, n: usize) -> Result<MrTimes, String> {
    let ctx = open(device, fork)?;
    let pd = ctx.alloc_pd().map_err(|e| format!("ours: alloc_pd: {e}"))?;
    // Page 2k for the k-th live region, the last even page for the measured one.
    let mut buf = buffer(2 * live);
    let base = buf.as_mut_ptr();
    let mut held = Vec::with_capacity(live);
    for k in 0..live - 1 {
        // SAFETY: `buf` outlives every region (they drop at the end of this
        // function, before it).
        let mr = unsafe { pd.reg_mr(base.add(2 * k * PAGE), PAGE, ACCESS_A) }
            .map_err(|e| format!("ours: reg_mr of live region {k}: {e}"))?;
        held.push(mr);
    }
    // SAFETY: inside `buf`, as above.
    let page = unsafe { base.add(2 * (live - 1) * PAGE) };
    let mut t = MrTimes::default();
    let (mut in_place, mut replaced) = (0, 0);
    for i in 0..=n {
        let s = Instant::now();
        // SAFETY: as above.
        let mut mr =
            unsafe { pd.reg_mr(page, PAGE, ACCESS_A) }.map_err(|e| format!("ours: reg_mr: {e}"))?;
        let reg = s.elapsed();
        let s = Instant::now();
        // SAFETY: no TRANSLATION: no new memory reaches the device.
        let p = unsafe {
            mr.rereg_with(
                ReregFallback::Replace,
                ReregFlags::ACCESS,
                None,
                std::ptr::null_mut(),
                0,
                ACCESS_B,
            )
        }
        .map_err(|e| format!("ours: rereg_mr: {e:?}"))?;
        let rereg = s.elapsed();
        let s = Instant::now();
        mr.dereg()
            .map_err(|e| format!("ours: dereg_mr: {}", e.error))?;
        let dereg = s.elapsed();
        match p {
            ReregPath::InPlace => in_place += 1,
            ReregPath::Replaced => replaced += 1,
        }
        // The first round warms up.
        if i > 0 {
            t.reg.push(reg);
            t.rereg.push(rereg);
            t.dereg.push(dereg);
        }
    }
    t.path = Some(match (in_place, replaced) {
        (_, 0) => "inplace",
        (0, _) => "replaced",
        _ => "mixed",
    });
    drop(held);
    Ok(t)
}

fn create(
    pd: &ProtectionDomain,
    cq: &CompletionQueue,
    send: u32,
    recv: u32,
) -> Result<QueuePair, Error> {
    let init = QpInit::new(QpType::Rc, cq, cq)
        .max_send_wr(send)
        .max_recv_wr(recv)
        .max_send_sge(1)
        .max_recv_sge(1);
    pd.create_qp(&init)
}

/// Part 2: with `live - 1` QPs on one CQ, `n` times create and destroy one
/// more.
pub fn qps(device: &str, live: usize, n: usize) -> Result<[Vec<Duration>; 2], String> {
    let ctx = open(device, false)?;
    let pd = ctx.alloc_pd().map_err(|e| format!("ours: alloc_pd: {e}"))?;
    let cq = ctx
        .create_cq(16, None)
        .map_err(|e| format!("ours: create_cq: {e}"))?;
    let mut held = Vec::with_capacity(live);
    for k in 0..live - 1 {
        held.push(
            create(&pd, &cq, QP_DEPTH, QP_DEPTH)
                .map_err(|e| format!("ours: create_qp of live QP {k}: {e}"))?,
        );
    }
    let (mut c, mut d) = (Vec::new(), Vec::new());
    for i in 0..=n {
        let s = Instant::now();
        let qp =
            create(&pd, &cq, QP_DEPTH, QP_DEPTH).map_err(|e| format!("ours: create_qp: {e}"))?;
        let created = s.elapsed();
        let s = Instant::now();
        qp.destroy()
            .map_err(|e| format!("ours: destroy_qp: {e:?}"))?;
        if i > 0 {
            c.push(created);
            d.push(s.elapsed());
        }
    }
    drop(held);
    Ok([c, d])
}

fn errno(e: &Error) -> Option<i32> {
    e.errno().map(|e| e.raw_os_error())
}

/// Part 3: QPs of `send` × `recv` requests until the device refuses one.
pub fn limit(device: &str, (send, recv): (u32, u32)) -> Result<Limit, String> {
    let ctx = open(device, false)?;
    let pd = ctx.alloc_pd().map_err(|e| format!("ours: alloc_pd: {e}"))?;
    let cq = ctx
        .create_cq(16, None)
        .map_err(|e| format!("ours: create_cq: {e}"))?;
    let mut held = Vec::new();
    let mut refused = None;
    while held.len() < crate::LIMIT_CAP {
        match create(&pd, &cq, send, recv) {
            Ok(qp) => held.push(qp),
            Err(e) => {
                refused = Some(e);
                break;
            }
        }
    }
    let Some(refusal) = refused else {
        crate::note_vmalloc_at_limit();
        return Ok(Limit {
            created: held.len(),
            errno: None,
            other_context: "not tried".into(),
            after_destroy: "not tried".into(),
        });
    };
    eprintln!(
        "growth: ours on {device}: QP {} refused: {refusal}",
        held.len() + 1
    );
    let created = held.len();
    crate::note_vmalloc_at_limit();
    let other = (|| {
        let ctx2 = open(device, false).map_err(|_| None)?;
        let pd2 = ctx2.alloc_pd().map_err(|e| errno(&e))?;
        let cq2 = ctx2.create_cq(16, None).map_err(|e| errno(&e))?;
        create(&pd2, &cq2, send, recv)
            .map(drop)
            .map_err(|e| errno(&e))
    })();
    held.pop();
    let again = create(&pd, &cq, send, recv)
        .map(drop)
        .map_err(|e| errno(&e));
    drop(held);
    Ok(Limit {
        created,
        errno: errno(&refusal),
        other_context: crate::outcome(other),
        after_destroy: crate::outcome(again),
    })
}
