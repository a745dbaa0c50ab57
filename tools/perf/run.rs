//! The measured loops, each after its perftest 4.5 counterpart in
//! src/perftest_resources.c (`run_iter_lat_write`, `run_iter_lat_send`,
//! `run_iter_lat`, `run_iter_bw`, `run_iter_bw_server`). They post with the
//! raw `unsafe` verbs, poll into stack arrays, allocate nothing (the time
//! stamps go into a Vec reserved before) and make no system call except
//! rxe's POST_SEND doorbell and the vDSO clock.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use uverbs::wr::{Payload, Remote, SendFlags, SendOp, SendWr, Sge, WcStatus, WorkCompletion};
use uverbs::CompletionQueue;

use super::side::Side;
use super::{Result, WAIT};

/// Empty polls between two looks at the clock for the deadline.
const SPINS_PER_CHECK: u32 = 1 << 12;

/// `--yield N`: give the CPU away (sched_yield) after every N empty polls;
/// 0 (the default, perftest's way) never.
pub static YIELD_EVERY: AtomicU32 = AtomicU32::new(0);

/// The last [`bw_client`] run's time (ns), for perftest's report to the
/// server (write_bw's `xchg_bw_reports`).
pub static BW_ELAPSED_NS: AtomicU64 = AtomicU64::new(0);

/// A bounded busy wait: fails after [`WAIT`] without progress, looking at
/// the clock only every [`SPINS_PER_CHECK`] empty spins.
struct Spin {
    spins: u32,
    yield_every: u32,
    moved: bool,
    deadline: Instant,
}

impl Spin {
    fn new() -> Spin {
        Spin {
            spins: 0,
            yield_every: YIELD_EVERY.load(Ordering::Relaxed),
            moved: false,
            deadline: Instant::now() + WAIT,
        }
    }

    fn progress(&mut self) {
        self.moved = true;
    }

    #[inline]
    fn idle(&mut self, what: &str, count: u64) -> Result<()> {
        self.spins = self.spins.wrapping_add(1);
        if self.yield_every > 0 && self.spins % self.yield_every == 0 {
            std::thread::yield_now();
        }
        if self.spins % SPINS_PER_CHECK == 0 {
            let now = Instant::now();
            if self.moved {
                self.moved = false;
                self.deadline = now + WAIT;
            } else if now >= self.deadline {
                return Err(format!("{what}: no progress within {WAIT:?} (at {count})").into());
            }
        }
        Ok(())
    }
}

/// Polls `cq` once, without waiting, into `wcs`: how many completions it
/// read (maybe none); fails on a bad one.
#[inline]
fn poll_checked(
    cq: &CompletionQueue,
    wcs: &mut [WorkCompletion],
    what: &str,
    count: u64,
) -> Result<usize> {
    let n = cq.poll(wcs)?;
    if let Some(bad) = wcs[..n].iter().find(|wc| wc.status() != WcStatus::Success) {
        return Err(format!("{what}: completion failed at {count}: {bad:?}").into());
    }
    Ok(n)
}

/// Polls `cq` until at least one completion; fails on a bad one.
#[inline]
fn poll_some<'a>(
    cq: &CompletionQueue,
    wcs: &'a mut [WorkCompletion],
    spin: &mut Spin,
    what: &str,
    count: u64,
) -> Result<&'a [WorkCompletion]> {
    loop {
        let n = poll_checked(cq, wcs, what, count)?;
        if n > 0 {
            spin.progress();
            return Ok(&wcs[..n]);
        }
        spin.idle(what, count)?;
    }
}

/// `SIGNALED` when `signalled`, else no flag.
fn signalled_if(signalled: bool) -> SendFlags {
    if signalled {
        SendFlags::SIGNALED
    } else {
        SendFlags::empty()
    }
}

/// The payload of a SEND or WRITE of the source area: inline when the size
/// fits what the QP takes (perftest: `size <= inline_size`).
fn payload<'a>(side: &Side, sge: &'a [uverbs::wr::Sge], bytes: &'a [&'a [u8]]) -> Payload<'a> {
    if side.size <= side.inline {
        Payload::Inline(bytes)
    } else {
        Payload::Sges(sge)
    }
}

/// write_lat, both sides: wait until the peer's WRITE changed the last
/// byte of our target area to the count, then WRITE the next count into
/// its; the server writes first (perftest's `run_iter_lat_write`). Every
/// WRITE is signalled and its completion polled before the next wait.
/// Returns the post time stamps.
pub fn write_lat(
    side: &mut Side,
    peer: Remote,
    iters: usize,
    server: bool,
) -> Result<Vec<Instant>> {
    let mut posted = Vec::with_capacity(iters);
    let size = side.size;
    let src = side.buf.as_mut_ptr();
    // SAFETY: both are inside the mapping (the target area starts a page
    // multiple past the source and is `size` long).
    let (post_last, poll_last) = unsafe {
        (
            src.add(size - 1),
            src.add((side.target() - side.source()) as usize + size - 1),
        )
    };
    let sge = [side.sge(side.source())];
    let mut wcs = [WorkCompletion::default(); 1];
    let mut spin = Spin::new();
    let (mut scnt, mut rcnt, mut ccnt) = (0usize, 0usize, 0usize);
    while scnt < iters || ccnt < iters || rcnt < iters {
        // The server writes first: it waits only once it has written.
        if rcnt < iters && (!server || scnt >= 1) {
            rcnt += 1;
            // SAFETY: `poll_last` is in our registered target area; the
            // peer's WRITE changes it behind the compiler's back, hence
            // the volatile read (no reference to the byte is formed).
            while unsafe { poll_last.read_volatile() } != rcnt as u8 {
                spin.idle("waiting for the peer's WRITE", rcnt as u64)?;
            }
            spin.progress();
        }
        if scnt < iters {
            posted.push(Instant::now());
            scnt += 1;
            // SAFETY: the source's last byte; the previous WRITE out of it
            // has completed (polled below), so the device reads it no more.
            unsafe { post_last.write_volatile(scnt as u8) };
            // SAFETY: the same source bytes, read by the device until this
            // WRITE's completion, polled below before they change again.
            let bytes: [&[u8]; 1] = [unsafe { std::slice::from_raw_parts(src, size) }];
            let wr = SendWr::new(
                scnt as u64,
                SendOp::RdmaWrite {
                    remote: peer,
                    imm: None,
                },
                payload(side, &sge, &bytes),
            );
            // SAFETY: see above; the remote area is the peer's target,
            // registered for REMOTE_WRITE under that rkey.
            unsafe { side.qp.post_send(&[wr])? };
        }
        if ccnt < iters {
            poll_some(
                &side.scq,
                &mut wcs,
                &mut spin,
                "WRITE completion",
                ccnt as u64,
            )?;
            ccnt += 1;
        }
    }
    Ok(posted)
}

/// send_lat, both sides: wait for the peer's SEND (re-posting the
/// receive while more are to come), then SEND; the client sends first
/// (perftest's `run_iter_lat_send`). With tx depth 1 perftest's CQ
/// moderation is 1: every SEND is signalled and polled.
pub fn send_lat(
    side: &mut Side,
    iters: usize,
    server: bool,
    cq_mod: usize,
) -> Result<Vec<Instant>> {
    let mut posted = Vec::with_capacity(iters);
    let size = side.size;
    let src = side.buf.as_ptr();
    let sge = [side.sge(side.source())];
    // SAFETY: the source area, which nothing writes during the run.
    let bytes: [&[u8]; 1] = [unsafe { std::slice::from_raw_parts(src, size) }];
    let mut wcs = [WorkCompletion::default(); 1];
    let mut spin = Spin::new();
    let rx_depth = side.rx_depth;
    let (mut scnt, mut rcnt) = (0usize, 0usize);
    while scnt < iters || rcnt < iters {
        // The client sends first: it waits only once it has sent.
        if rcnt < iters && (server || scnt >= 1) {
            let wc = poll_some(&side.rcq, &mut wcs, &mut spin, "receive", rcnt as u64)?[0];
            rcnt += 1;
            if rcnt + rx_depth <= iters {
                side.post_recv(wc.wr_id())?;
            }
        }
        if scnt < iters {
            posted.push(Instant::now());
            scnt += 1;
            let signalled = scnt % cq_mod == 0 || scnt == iters;
            let wr = SendWr::new(
                scnt as u64,
                SendOp::Send { imm: None },
                payload(side, &sge, &bytes),
            )
            .flags(signalled_if(signalled));
            // SAFETY: the source area is never written during the run;
            // the buffer outlives the QP.
            unsafe { side.qp.post_send(&[wr])? };
            if signalled {
                poll_some(
                    &side.scq,
                    &mut wcs,
                    &mut spin,
                    "SEND completion",
                    scnt as u64,
                )?;
            }
        }
    }
    Ok(posted)
}

/// read_lat, client: one signalled READ of the peer's target area into
/// ours at a time, polled (perftest's `run_iter_lat`).
pub fn read_lat(side: &mut Side, peer: Remote, iters: usize) -> Result<Vec<Instant>> {
    let mut posted = Vec::with_capacity(iters);
    let sge = [side.sge(side.target())];
    let mut wcs = [WorkCompletion::default(); 1];
    let mut spin = Spin::new();
    for i in 0..iters {
        posted.push(Instant::now());
        let wr = SendWr::new(
            i as u64,
            SendOp::RdmaRead { remote: peer },
            Payload::Sges(&sge),
        );
        // SAFETY: the device writes our target area until the completion,
        // polled right after; nothing reads it.
        unsafe { side.qp.post_send(&[wr])? };
        poll_some(&side.scq, &mut wcs, &mut spin, "READ completion", i as u64)?;
    }
    Ok(posted)
}

/// write_bw / send_bw, client: keep up to `tx_depth` requests outstanding,
/// request `i` (from 0) signalled when `(i + 1) % cq_mod == 0` or it is the
/// last (perftest's `run_iter_bw`); a completion of request `i` retires
/// every request up to it. With receive credits ([`Side::credits`]) a
/// SEND is posted only while fewer than `rx_depth` are beyond the
/// server's last credit. The time from the first post to the last
/// completion.
pub fn bw_client(
    side: &mut Side,
    peer: Remote,
    iters: usize,
    tx_depth: usize,
    cq_mod: usize,
    write: bool,
) -> Result<Duration> {
    let size = side.size;
    let src = side.buf.as_ptr();
    let sge = [side.sge(side.source())];
    // SAFETY: the source area, which nothing writes during the run.
    let bytes: [&[u8]; 1] = [unsafe { std::slice::from_raw_parts(src, size) }];
    let op = if write {
        SendOp::RdmaWrite {
            remote: peer,
            imm: None,
        }
    } else {
        SendOp::Send { imm: None }
    };
    // The word the server's credit WRITEs change behind the compiler's
    // back: read volatile, never through a reference.
    let credit_word = side.credits.then(|| {
        // SAFETY: the credit word is inside the mapping (the control page
        // after the two areas), 4-byte aligned.
        unsafe { src.add((side.credit_word() - side.source()) as usize) as *const u32 }
    });
    let rx_depth = side.rx_depth;
    let payload = payload(side, &sge, &bytes);
    let mut queue = SideQueue {
        side,
        op,
        payload,
        credit_word,
        wcs: [WorkCompletion::default(); 16],
    };
    let what = if write {
        "WRITE completion"
    } else {
        "SEND completion"
    };
    let start = Instant::now();
    bw_loop(&mut queue, iters, tx_depth, cq_mod, rx_depth, what)?;
    let elapsed = start.elapsed();
    BW_ELAPSED_NS.store(elapsed.as_nanos() as u64, Ordering::Relaxed);
    Ok(elapsed)
}

/// What [`bw_loop`] does with a QP: post, poll without waiting, read the
/// receive credit. A trait so that the loop's rules run on the host
/// against a model of the peer (the tests below).
trait BwQueue {
    /// Posts request `id`, signalled or not.
    fn post(&mut self, id: u64, signalled: bool) -> Result<()>;
    /// One poll, no waiting: the largest id among the completions read,
    /// `None` when there were none. A failed completion is an error.
    fn poll(&mut self, count: u64, what: &str) -> Result<Option<u64>>;
    /// The server's receive count so far; `None` without credits.
    fn credit(&self) -> Option<u32>;
}

/// The measured QP of a bw client.
struct SideQueue<'a> {
    side: &'a Side,
    op: SendOp,
    payload: Payload<'a>,
    credit_word: Option<*const u32>,
    wcs: [WorkCompletion; 16],
}

impl BwQueue for SideQueue<'_> {
    #[inline]
    fn post(&mut self, id: u64, signalled: bool) -> Result<()> {
        let wr = SendWr::new(id, self.op, self.payload).flags(signalled_if(signalled));
        // SAFETY: the source area is never written during the run; the
        // remote area is the peer's target, registered for REMOTE_WRITE
        // under that rkey (or a posted receive).
        unsafe { self.side.qp.post_send(&[wr])? };
        Ok(())
    }

    #[inline]
    fn poll(&mut self, count: u64, what: &str) -> Result<Option<u64>> {
        let n = poll_checked(&self.side.scq, &mut self.wcs, what, count)?;
        Ok(self.wcs[..n].iter().map(|wc| wc.wr_id()).max())
    }

    #[inline]
    fn credit(&self) -> Option<u32> {
        // SAFETY: see `bw_client`; the peer WRITEs the word, we only read
        // it, volatile.
        self.credit_word.map(|word| unsafe { word.read_volatile() })
    }
}

/// perftest's `run_iter_bw` over `queue`: post while the window, the
/// queue's depth and the credit allow, then poll once **without waiting**
/// and go round again. A client blocked by the credit may have nothing
/// signalled in flight (the requests since the last signalled one never
/// complete on their own), so the loop must read the credit again between
/// polls rather than wait for a completion: waiting stalled the run
/// whenever the server's credit came after the client had used its window
/// (siw, in `cargo vm test`). Fails after [`WAIT`] without progress: no
/// completion and no new credit.
fn bw_loop(
    queue: &mut impl BwQueue,
    iters: usize,
    tx_depth: usize,
    cq_mod: usize,
    rx_depth: usize,
    what: &str,
) -> Result<()> {
    let mut spin = Spin::new();
    let mut last_credit = 0u32;
    let (mut scnt, mut ccnt) = (0usize, 0usize);
    while ccnt < iters {
        let mut credit_blocked = false;
        while scnt < iters && scnt < ccnt + tx_depth {
            if let Some(granted) = queue.credit() {
                if granted != last_credit {
                    last_credit = granted;
                    spin.progress();
                }
                if !credit_allows(scnt, granted, rx_depth) {
                    credit_blocked = true;
                    break;
                }
            }
            let signalled = (scnt + 1) % cq_mod == 0 || scnt + 1 == iters;
            queue.post(scnt as u64, signalled)?;
            scnt += 1;
        }
        match queue.poll(ccnt as u64, what)? {
            Some(id) => {
                ccnt = ccnt.max(id as usize + 1);
                spin.progress();
            }
            None if credit_blocked => {
                spin.idle("waiting for the server's receive credit", scnt as u64)?
            }
            None => spin.idle(what, ccnt as u64)?,
        }
    }
    Ok(())
}

/// Receive credits, client: whether SEND number `scnt` (from 0) may go
/// with `granted` receives credited so far (perftest's `run_iter_bw`:
/// `swindow = scnt + 1 - credit_buf` in 32 bits, no post once it reaches
/// `rx_depth`).
pub fn credit_allows(scnt: usize, granted: u32, rx_depth: usize) -> bool {
    let window = (scnt as u32).wrapping_add(1).wrapping_sub(granted);
    (window as usize) < rx_depth
}

/// Receive credits, server: whether the `rcnt`-th receive (from 1) sends
/// a credit (perftest's `run_iter_bw_server`: `rcnt % rx_depth` is a
/// multiple of `credit_cnt = rx_depth / 3`; at least 1 here, where
/// perftest would divide by 0).
pub fn credit_due(rcnt: usize, rx_depth: usize) -> bool {
    let every = (rx_depth / 3).max(1);
    (rcnt % rx_depth.max(1)) % every == 0
}

/// send_bw, server: count `iters` receives, re-posting one per completion
/// while more are to come (perftest's `run_iter_bw_server`); with receive
/// credits ([`Side::credits`]) WRITE the count so far into the client's
/// credit word (`peer`) at every `rx_depth / 3`-th receive (counted
/// modulo `rx_depth`), each WRITE signalled, at most `tx_depth` of them
/// outstanding, all completed before the end. The time from the first
/// receive completion to the last.
pub fn send_bw_server(
    side: &mut Side,
    peer: Remote,
    iters: usize,
    tx_depth: usize,
    first_wait: Duration,
) -> Result<Duration> {
    let mut wcs = [WorkCompletion::default(); 16];
    let mut swcs = [WorkCompletion::default(); 16];
    let mut spin = Spin::new();
    // The client may still be setting up: the first receive gets longer.
    spin.deadline = Instant::now() + first_wait;
    let mut posted = side.rx_depth;
    let mut rcnt = 0usize;
    let mut first = None;
    let ctrl = side
        .buf
        .as_mut_ptr()
        .wrapping_add((side.ctrl_word() - side.source()) as usize) as *mut u32;
    let ctrl_sge = [Sge {
        addr: side.ctrl_word(),
        length: 4,
        lkey: side.mr.lkey(),
    }];
    let mut credits_out = 0usize;
    while rcnt < iters {
        let done = poll_some(&side.rcq, &mut wcs, &mut spin, "receive", rcnt as u64)?;
        first.get_or_insert_with(Instant::now);
        for wc in done {
            rcnt += 1;
            if posted < iters {
                side.post_recv(wc.wr_id())?;
                posted += 1;
            }
            if side.credits && credit_due(rcnt, side.rx_depth) {
                while credits_out == tx_depth {
                    let n =
                        poll_some(&side.scq, &mut swcs, &mut spin, "credit WRITE", rcnt as u64)?;
                    credits_out -= n.len();
                }
                // SAFETY: the control word is inside the mapping (the
                // control page), 4-byte aligned; a credit WRITE still in
                // flight may read it as it changes, as perftest's do (the
                // count only grows).
                unsafe { ctrl.write_volatile(rcnt as u32) };
                let wr = SendWr::new(
                    rcnt as u64,
                    SendOp::RdmaWrite {
                        remote: peer,
                        imm: None,
                    },
                    Payload::Sges(&ctrl_sge),
                )
                .flags(SendFlags::SIGNALED);
                // SAFETY: the source is our registered control word (see
                // above); the remote is the client's credit word, which
                // its keys name, registered for REMOTE_WRITE.
                unsafe { side.qp.post_send(&[wr])? };
                credits_out += 1;
            }
        }
    }
    // perftest's clean_scq_credit: every credit WRITE completes.
    while credits_out > 0 {
        let n = poll_some(&side.scq, &mut swcs, &mut spin, "credit WRITE", rcnt as u64)?;
        credits_out -= n.len();
    }
    Ok(first.map_or(Duration::ZERO, |t| t.elapsed()))
}

#[cfg(test)]
mod tests {
    use super::{bw_loop, credit_allows, credit_due, BwQueue, Result};

    /// A send_bw server over siw, seen from the client: a signalled
    /// request completes as soon as it is posted (siw completes a SEND
    /// once it is on the wire), and the server's credit (its receive
    /// count) reaches the client only after the client has polled
    /// `credit_late` times in vain: the order in which the run stalled in
    /// `cargo vm test`.
    struct LateCredit {
        posted: Vec<(u64, bool)>,
        ready: Option<u64>,
        credit: u32,
        empty_polls: u32,
        credit_late: u32,
        rx_depth: usize,
    }

    impl BwQueue for LateCredit {
        fn post(&mut self, id: u64, signalled: bool) -> Result<()> {
            // The server has posted rx_depth receives and one more per
            // credit counted: a SEND beyond them would find none.
            assert!(
                (id as usize) < self.credit as usize + self.rx_depth,
                "SEND {id} overruns the server's receives (credit {})",
                self.credit
            );
            self.posted.push((id, signalled));
            if signalled {
                self.ready = Some(id);
            }
            Ok(())
        }

        fn poll(&mut self, _count: u64, _what: &str) -> Result<Option<u64>> {
            let done = self.ready.take();
            if done.is_none() {
                self.empty_polls += 1;
                if self.empty_polls == self.credit_late {
                    // Every SEND so far has arrived: the server credits them.
                    self.credit = self.posted.len() as u32;
                }
            }
            Ok(done)
        }

        fn credit(&self) -> Option<u32> {
            Some(self.credit)
        }
    }

    /// `ib_send_bw -n 200` against our client on siw: with no credit yet
    /// the client posts 199 SENDs, sees the 100th complete and has
    /// nothing signalled in flight; it must go on reading the credit and
    /// post the last SEND when it comes, not wait for a completion (it
    /// did, and failed after 10 s: "no progress ... (at 100)").
    #[test]
    fn a_client_blocked_by_the_credit_reads_it_again_between_polls() {
        let mut server = LateCredit {
            posted: Vec::new(),
            ready: None,
            credit: 0,
            empty_polls: 0,
            credit_late: 50,
            rx_depth: 200,
        };
        let start = std::time::Instant::now();
        bw_loop(&mut server, 200, 128, 100, 200, "SEND completion").unwrap();
        assert!(start.elapsed() < std::time::Duration::from_secs(5));
        let ids: Vec<u64> = server.posted.iter().map(|&(id, _)| id).collect();
        assert_eq!(ids, (0..200).collect::<Vec<u64>>());
        let signalled: Vec<u64> = server
            .posted
            .iter()
            .filter(|&&(_, s)| s)
            .map(|&(id, _)| id)
            .collect();
        assert_eq!(signalled, [99, 199]);
        assert_eq!(server.credit, 199, "the last SEND waited for the credit");
    }

    /// perftest's numbers for `ib_send_bw -n 200` on iWARP (rx_depth 200):
    /// without a credit its client sends 199 SENDs and waits (what a
    /// server that sent none saw: 199 receives, then nothing); the server
    /// credits at 66, 132, 198 and 200.
    #[test]
    fn credits_follow_perftests_window() {
        let sent_without_credit = (0..200).take_while(|&n| credit_allows(n, 0, 200)).count();
        assert_eq!(sent_without_credit, 199);
        assert!(credit_allows(199, 66, 200));
        assert!(!credit_allows(265, 66, 200));
        let due: Vec<usize> = (1..=200).filter(|&r| credit_due(r, 200)).collect();
        assert_eq!(due, [66, 132, 198, 200]);
        // rx_depth 512 (perftest's default): every 170th, and at 512.
        let due: Vec<usize> = (1..=1000).filter(|&r| credit_due(r, 512)).collect();
        assert_eq!(due, [170, 340, 510, 512, 682, 852]);
    }
}
