//! Faults around a cm connection inside one host, on rxe0 over 192.0.2.1
//! and on siw0 over 198.51.100.1 (issue 11, item 6; a connect nobody
//! listens to and a listener destroyed with a pending request are in
//! `device_cm_loopback.rs`):
//!
//! - a peer process killed mid-transfer: a forked child (forked before
//!   anything is opened) is the server; it accepts, and is SIGKILLed while
//!   the parent streams RDMA WRITEs into its buffer. The kernel's cleanup
//!   of the dead process destroys its cm id. RoCE: the IB CM sends a DREQ;
//!   iWARP: the TCP stream closes. Either way the parent gets DISCONNECTED
//!   (status 0, a few ms after the kill), moves its QP to ERR as a consumer
//!   does, the WRITEs still outstanding flush (one may fail first: on rxe
//!   REM_ACCESS_ERR, the dead process's MRs go before its QP; on siw
//!   LOC_QP_OP_ERR, the WRITE on the wire when the socket broke), and
//!   everything it made is released;
//! - destroying ids with events queued and never read: no hang, the
//!   kernel's count is the events read, the queued ones are gone, and an
//!   unread DISCONNECTED destroyed still answers the peer;
//! - a connect to an address no host has. RoCE: nothing answers for
//!   seconds (the IB CM retries its REQ for over a minute before
//!   UNREACHABLE), and destroying the id ends the attempt at once. iWARP:
//!   siw makes the TCP connection inside the connect call (a blocking
//!   `kernel_bindconnect`), so the call itself does not return while the
//!   SYNs go unanswered; a forked child makes it and is killed, which ends
//!   it at once.
//!
//! - a forked child holding the parent's channel and id, with an event
//!   queued: every call answers `ForeignProcess` (the kernel would answer
//!   its commands `EACCES` and give it the parent's event), so the parent
//!   still reads the event and the kernel counts it for the parent's id.
//!
//! There is no link-down case in this binary (none on rxe either).
//!
//! Every wait is bounded. The tests of this binary fork or count a
//! context's objects, so they run one at a time (`serial`).

#[macro_use]
mod common;

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use common::cm::*;
use common::*;
use nix::sys::signal::{kill, Signal};
use nix::sys::wait::WaitStatus;
use nix::unistd::{fork, ForkResult, Pid};
use uverbs::cm::{CmId, ConnParam, EventChannel, EventKind, Param};
use uverbs::device::DriverId;
use uverbs::error::{Errno, Op};
use uverbs::qp::{QpAttr, QpState};
use uverbs::wr::{RecvWr, SendOp, WcStatus, WorkCompletion};
use uverbs::{CompletionQueue, Context, Device, Error, QpType, QueuePair};

/// WRITEs in flight at once, and the bytes of each.
const WINDOW: usize = 16;
const SLOT: usize = 4096;
/// Batches that land before the child is killed.
const KILL_AFTER: usize = 8;
/// The longest the stream, the flush or the child may take.
const LIMIT: Duration = Duration::from_secs(30);
/// The wr_id of the parent's one receive.
const MARKER: u64 = 0x3a7c_0000_0000;

/// What a process is doing, from /proc: its state line, where it waits
/// and its kernel stack where readable. For a stream that stalls after its
/// peer was killed: a rare siw0 run once saw no completion for 30 s, and
/// whether the dead child's exit was stuck in the kernel (and where) is
/// what tells the cause.
fn proc_report(pid: Pid) -> String {
    let read = |file: &str| {
        std::fs::read_to_string(format!("/proc/{pid}/{file}"))
            .map(|s| s.trim().replace('\n', " | "))
            .unwrap_or_else(|e| format!("({e})"))
    };
    format!(
        "child {pid}: stat {}; wchan {}; stack {}",
        read("stat"),
        read("wchan"),
        read("stack")
    )
}

/// The rxe and siw devices under test, not opened (a child is forked
/// first); none without the rdma_cm device ([`cm_present`] says so).
fn cm_devices(test: &str) -> Vec<Device> {
    if !cm_present(test) {
        return Vec::new();
    }
    devices_under_test(test)
        .into_iter()
        .filter(|d| {
            let known = matches!(d.driver_id(), Some(DriverId::RXE) | Some(DriverId::SIW));
            if !known {
                loud(&format!(
                    "NOTE: {test}: {}: not rxe or siw: skipped",
                    d.name()
                ));
            }
            known
        })
        .collect()
}

fn is_siw(dev: &Device) -> bool {
    dev.driver_id() == Some(DriverId::SIW)
}

/// A line from the child within [`CM_WAIT`]; `None` at EOF (it died).
fn line_from(child: &mut BufReader<UnixStream>, what: &str) -> Option<String> {
    let mut line = String::new();
    match child.read_line(&mut line) {
        Ok(0) => None,
        Ok(_) => Some(line.trim_end().to_owned()),
        Err(e) => panic!("{what}: reading from the child: {e}"),
    }
}

/// The child: a server on `dev` that accepts one connection with a buffer
/// of `WINDOW * SLOT` bytes for the parent's WRITEs (its address and rkey
/// in the accept's private data), reports `P<port>` and then `E` on
/// `report`, and waits to be killed (exit 3 if it is not, within
/// [`LIMIT`]).
fn child_server(dev: &Device, mut report: UnixStream) -> i32 {
    let dut = open(dev);
    let pd = alloc_pd(&dut);
    let cq = dut.create_cq(16, None).expect("child: create_cq");
    let qp = qp_on(&pd, QpType::Rc, &cq, "child");
    let mut buf = anon(WINDOW * SLOT);
    let mr = fresh_mr(&pd, &mut buf, RW);
    let (ch, listener, port) = cm_listener(1);
    writeln!(report, "P{port}").expect("child: report the port");
    let ev = next_event(&ch, "child: listener");
    let EventKind::ConnectRequest { id: server, .. } = ev.kind else {
        panic!("child: {:?}", ev.kind)
    };
    cm_modify(&server, &qp, QpState::Init, "child RESET->INIT");
    cm_modify(&server, &qp, QpState::Rtr, "child INIT->RTR");
    cm_modify(&server, &qp, QpState::Rts, "child RTR->RTS");
    let mut private = [0u8; 12];
    private[..8].copy_from_slice(&(buf.as_ptr() as u64).to_le_bytes());
    private[8..].copy_from_slice(&mr.rkey().to_le_bytes());
    server
        .accept(&ConnParam::new(qp.qp_num()).private_data(&private).unwrap())
        .expect("child: accept");
    let ev = next_event(&ch, "child: established");
    assert!(matches!(ev.kind, EventKind::Established(_)), "{ev:?}");
    writeln!(report, "E").expect("child: report established");
    let start = Instant::now();
    while start.elapsed() < LIMIT {
        std::thread::sleep(Duration::from_millis(50));
    }
    drop((listener, server, qp, mr, buf));
    3
}

/// A send posted on `qp` in ERR: rxe flushes it (the doorbell makes rxe run
/// the send queue); siw flushes it or leaves it in the ring.
fn send_posted_in_err(qp: &QueuePair, cq: &CompletionQueue, iwarp: bool, name: &str) {
    let send = signalled(0xf2, SendOp::Send { imm: None }, &[]);
    // SAFETY: a send without SGEs names no memory.
    unsafe { qp.post_send(&[send]) }.unwrap();
    if iwarp {
        // siw flushes a user QP's send ring when the stream closes
        // (siw_qp_llp_close, in siw's cm work, not ordered against
        // the DISCONNECTED we waited for). A WQE written to the ring
        // before that flush goes with the rest; one written after it
        // stays there (the doorbell of a QP in ERROR flushes only the
        // WRs it carries, and a user QP's carries none: siw_post_send).
        // Both orders were seen in the VM: nothing, or this send's
        // flush, and nothing else.
        std::thread::sleep(Duration::from_millis(500));
        let mut wcs = [WorkCompletion::default(); 4];
        let n = cq.poll(&mut wcs).unwrap();
        match &wcs[..n] {
            [] => println!("{name}: the send posted in ERR stays in the ring"),
            [c] => assert_eq!(
                (c.wr_id(), c.status()),
                (0xf2, WcStatus::WrFlushErr),
                "{name}: a send posted in ERR"
            ),
            more => panic!("{name}: a send posted in ERR: {more:?}"),
        }
    } else {
        let c = wait_one(cq, &format!("{name}: a send posted in ERR"));
        assert_eq!(
            (c.wr_id(), c.status()),
            (0xf2, WcStatus::WrFlushErr),
            "{name}"
        );
    }
}

/// Kills `child` when dropped unless disarmed: a failing parent never
/// leaves its server running.
struct KillOnDrop(Option<Pid>);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if let Some(pid) = self.0.take() {
            let _ = kill(pid, Signal::SIGKILL);
            let _ = wait_within(pid, Duration::from_secs(5));
        }
    }
}

/// Forks a child that runs `body` on its end of a new socket pair and
/// leaves with `_exit` (its exit code `body`'s answer, 99 on a panic).
/// The parent gets the child, guarded (killed if the test fails before
/// reaping it), and its own end, each read bounded by [`CM_WAIT`].
///
/// # Safety
///
/// The caller has nothing of the test's open yet: the child builds its own
/// objects.
unsafe fn fork_reporting(
    body: impl FnOnce(UnixStream) -> i32,
) -> (Pid, KillOnDrop, BufReader<UnixStream>) {
    let (to_parent, child_end) = UnixStream::pair().expect("socketpair");
    // SAFETY: the caller's promise; the child leaves with _exit (glibc
    // keeps malloc usable).
    let child = match unsafe { fork() }.expect("fork") {
        ForkResult::Child => {
            drop(to_parent);
            let code = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| body(child_end)))
                .unwrap_or(99);
            // SAFETY: _exit never returns and runs no atexit handlers.
            unsafe { nix::libc::_exit(code) }
        }
        ForkResult::Parent { child } => child,
    };
    drop(child_end);
    let guard = KillOnDrop(Some(child));
    to_parent.set_read_timeout(Some(CM_WAIT)).unwrap();
    (child, guard, BufReader::new(to_parent))
}

#[test]
fn cm_peer_killed_mid_transfer() {
    let _serial = serial();
    let test = "cm_peer_killed_mid_transfer";
    for dev in cm_devices(test) {
        let name = dev.name().to_owned();
        let iwarp = is_siw(&dev);
        // SAFETY: nothing of the test's is open yet.
        let (child, mut guard, mut from_child) =
            unsafe { fork_reporting(|child_end| child_server(&dev, child_end)) };
        let Some(port) = line_from(&mut from_child, "the port")
            .and_then(|l| l.strip_prefix('P').and_then(|p| p.parse::<u16>().ok()))
        else {
            panic!("{name}: the child reported no port (it failed; see its output)")
        };

        let dut = open(&dev);
        let counts = HandleCounts::new(&dut, test);
        let pd = alloc_pd(&dut);
        let cq = dut.create_cq(2 * WINDOW as u32 + 8, None).unwrap();
        let qp = qp_on(&pd, QpType::Rc, &cq, &name);
        let mut src = anon(WINDOW * SLOT);
        let src_mr = fresh_mr(&pd, &mut src, RW);
        for (i, b) in src.iter_mut().enumerate() {
            *b = (i as u8).wrapping_mul(13) ^ 0x3c;
        }
        let ch = EventChannel::open().unwrap();
        let client = match resolved_client(&ch, &dut, port) {
            Ok(c) => c,
            Err(why) => return cm_unavailable(test, &why),
        };
        cm_modify(&client, &qp, QpState::Init, "parent RESET->INIT");
        // Retry count 3: a WRITE to a dead QP gives up sooner (RoCE).
        client
            .connect(&ConnParam::new(qp.qp_num()).retry_count(3))
            .unwrap_or_else(|e| panic!("{name}: connect: {e}"));
        let ev = next_event(&ch, "parent connect");
        let peer = if iwarp {
            // iWARP: the kernel's CM moved the QP; the accept's private
            // data comes with ESTABLISHED.
            let EventKind::Established(Param::Conn(peer)) = ev.kind else {
                panic!("{name}: {:?}", ev.kind)
            };
            assert_eq!(qp.established().unwrap(), QpState::Rts, "{name}");
            peer
        } else {
            let EventKind::ConnectResponse(Param::Conn(peer)) = ev.kind else {
                panic!("{name}: {:?}", ev.kind)
            };
            cm_modify(&client, &qp, QpState::Init, "parent INIT->INIT");
            cm_modify(&client, &qp, QpState::Rtr, "parent INIT->RTR");
            cm_modify(&client, &qp, QpState::Rts, "parent RTR->RTS");
            client.establish().unwrap();
            peer
        };
        let addr = u64::from_le_bytes(peer.private_data[..8].try_into().unwrap());
        let rkey = u32::from_le_bytes(peer.private_data[8..12].try_into().unwrap());
        assert_eq!(
            line_from(&mut from_child, "established").as_deref(),
            Some("E"),
            "{name}: the child saw ESTABLISHED"
        );
        counts.assert_extra_cq_qp(1, 1, "the parent's CQ and QP");
        // A receive that only a flush completes (the child never SENDs):
        // rxe flushes a user QP's receive queue when the QP is moved to
        // ERR, not for a receive posted later (posting makes no syscall).
        let marker = RecvWr {
            wr_id: MARKER,
            sges: &[],
        };
        // SAFETY: a receive without SGEs names no memory.
        unsafe { qp.post_recv(&[marker]) }.unwrap();
        let mut marker_flushed = false;

        // The stream: batches of WINDOW signalled WRITEs; the child is
        // killed right after the batch KILL_AFTER is posted. The cm is
        // watched between polls; on DISCONNECTED the QP goes to ERR.
        let sges: Vec<_> = (0..WINDOW)
            .map(|i| sge(src.as_ptr() as u64 + (i * SLOT) as u64, SLOT, &src_mr))
            .collect();
        let mut statuses: Vec<WcStatus> = Vec::new();
        let mut killed_at: Option<Instant> = None;
        let mut disconnected: Option<(Duration, i32)> = None;
        let mut left_in_ring = 0;
        let mut wc = [WorkCompletion::default(); 32];
        let mut batch = 0;
        loop {
            let first = statuses.len() as u64;
            let wrs = signalled_writes(first, &sges, addr, SLOT, rkey);
            // SAFETY: `src` is not written while WRITEs are outstanding;
            // the QP is dropped before it.
            unsafe { qp.post_send(&wrs) }
                .unwrap_or_else(|e| panic!("{name}: post_send of batch {batch}: {e}"));
            if batch == KILL_AFTER {
                kill(child, Signal::SIGKILL).expect("kill the child");
                killed_at = Some(Instant::now());
                loud(&format!(
                    "{name}: child {child} SIGKILLed with batch {batch} in flight"
                ));
            }
            batch += 1;
            let deadline = Instant::now() + LIMIT;
            let mut got = 0;
            while got < WINDOW {
                let n = cq.poll(&mut wc).unwrap();
                for c in &wc[..n] {
                    if c.wr_id() == MARKER {
                        assert_eq!(c.status(), WcStatus::WrFlushErr, "{name}: {c:?}");
                        marker_flushed = true;
                        continue;
                    }
                    assert_eq!(c.wr_id(), statuses.len() as u64, "{name}: in order: {c:?}");
                    statuses.push(c.status());
                    got += 1;
                }
                if disconnected.is_none() {
                    if let Some(ev) = ch.wait_event(Duration::ZERO).unwrap() {
                        let after = killed_at.map(|k| k.elapsed());
                        loud(&format!(
                            "{name}: {} (status {}) {after:?} after the kill",
                            ev.name(),
                            ev.status
                        ));
                        assert!(matches!(ev.kind, EventKind::Disconnected), "{name}: {ev:?}");
                        let after = after.expect("DISCONNECTED before the kill");
                        disconnected = Some((after, ev.status));
                        modify(
                            &qp,
                            &QpAttr::new().state(QpState::Err),
                            "->ERR on DISCONNECTED",
                        );
                    }
                }
                if Instant::now() >= deadline {
                    // siw flushes a user QP's send ring once, as the QP
                    // enters ERR when the stream closes (in siw's cm work,
                    // not ordered against the DISCONNECTED it causes); a
                    // WQE written to the ring after that flush is never
                    // completed, and our own move to ERR finds the QP
                    // there already (see the send posted in ERR below). A
                    // batch posted between that flush and our seeing
                    // DISCONNECTED keeps what it wrote after the flush:
                    // its tail, or all of it. Nothing else may stall.
                    if iwarp && disconnected.is_some() {
                        left_in_ring = WINDOW - got;
                        loud(&format!(
                            "{name}: batch {batch}: {left_in_ring} of {WINDOW} WRITEs \
                             posted after siw's flush stay in the ring"
                        ));
                        break;
                    }
                    panic!(
                        "{name}: batch {batch}: {got} of {WINDOW} completions within {LIMIT:?} \
                         ({:?} after the kill; DISCONNECTED: {disconnected:?}); {}",
                        killed_at.map(|k| k.elapsed()),
                        proc_report(child)
                    );
                }
                if n == 0 {
                    std::thread::sleep(Duration::from_micros(200));
                }
            }
            let failed = statuses.iter().any(|&s| s != WcStatus::Success);
            if failed || disconnected.is_some() {
                break;
            }
            if let Some(k) = killed_at {
                assert!(
                    k.elapsed() < LIMIT,
                    "{name}: WRITEs still land {LIMIT:?} after the kill"
                );
            }
        }
        let killed_at = killed_at.expect("the stream ends only after the kill");
        let (after, status) = match disconnected {
            Some(d) => d,
            None => {
                let ev = next_event(&ch, "parent: waiting for DISCONNECTED");
                assert!(matches!(ev.kind, EventKind::Disconnected), "{name}: {ev:?}");
                modify(
                    &qp,
                    &QpAttr::new().state(QpState::Err),
                    "->ERR on DISCONNECTED",
                );
                (killed_at.elapsed(), ev.status)
            }
        };
        // RoCE: the dead peer's DREQ; iWARP: the stream's close (siw's
        // CLOSE upcall carries 0). Not a time-out either way.
        assert_eq!(
            status, 0,
            "{name}: the dead peer's DREQ or FIN (not a time-out)"
        );
        assert!(
            after < CM_WAIT,
            "{name}: DISCONNECTED {after:?} after the kill"
        );

        // The completions: successes, then perhaps one error, then
        // flushes; nothing else. The one error, when a WRITE got there
        // while the dead process was being torn down: REM_ACCESS_ERR (its
        // MRs are destroyed before its QP: the rkey is unknown; measured),
        // or RETRY_EXC_ERR (its QP is gone: nothing answers).
        let landed = statuses
            .iter()
            .take_while(|&&s| s == WcStatus::Success)
            .count();
        let rest = &statuses[landed..];
        let errors: Vec<WcStatus> = rest
            .iter()
            .copied()
            .filter(|&s| s != WcStatus::WrFlushErr)
            .collect();
        let flushed = rest.len() - errors.len();
        loud(&format!(
            "{name}: {} WRITEs of {SLOT} B posted: {landed} landed, errors {errors:?}, \
             {flushed} flushed, {left_in_ring} left in the ring; DISCONNECTED {after:?} \
             after the kill",
            statuses.len() + left_in_ring
        ));
        assert!(landed >= KILL_AFTER * WINDOW, "{name}: {statuses:?}");
        match errors[..] {
            [] => {}
            // siw completes a WRITE once it is on the wire (the dead peer's
            // MRs are never consulted: the requester learns nothing of
            // them) and flushes the rest when the stream closes; the one
            // WRITE being transmitted when the socket broke, if any, fails
            // LOC_QP_OP_ERR (measured: none in some runs, one in others).
            [WcStatus::LocQpOpErr] if iwarp => {
                assert_eq!(
                    rest[0], errors[0],
                    "{name}: the error comes first: {rest:?}"
                )
            }
            [WcStatus::RemAccessErr] | [WcStatus::RetryExcErr] if !iwarp => {
                assert_eq!(
                    rest[0], errors[0],
                    "{name}: the error comes first: {rest:?}"
                )
            }
            _ => panic!("{name}: after the successes: {rest:?}"),
        }

        // In ERR the QP flushed the receive it held; rxe flushes a send
        // posted now (the doorbell makes rxe run the send queue).
        if !marker_flushed {
            let c = wait_one(&cq, &format!("{name}: the receive's flush"));
            assert_eq!(
                (c.wr_id(), c.status()),
                (MARKER, WcStatus::WrFlushErr),
                "{name}"
            );
        }
        if left_in_ring == 0 {
            send_posted_in_err(&qp, &cq, iwarp, &name);
        } else {
            // The batch left in the ring shows it already (and may have
            // filled the send queue).
            println!("{name}: sends posted in ERR stay in the ring");
        }

        // The child died of the signal.
        match wait_within(child, LIMIT) {
            Some(WaitStatus::Signaled(_, Signal::SIGKILL, _)) => guard.0 = None,
            other => panic!("{name}: the child: {other:?}"),
        }

        // RoCE: our DREP to the dead peer; then only TIMEWAIT_EXIT may
        // come. iWARP: the id is idle again (the close ended it), the
        // disconnect is a no-op and nothing follows.
        client
            .disconnect()
            .unwrap_or_else(|e| panic!("{name}: disconnect after DISCONNECTED: {e}"));
        while let Some(ev) = ch.wait_event(Duration::from_secs(3)).unwrap() {
            loud(&format!(
                "{name}: after the DREP: {} status {}",
                ev.name(),
                ev.status
            ));
            assert!(
                !iwarp && matches!(ev.kind, EventKind::TimewaitExit),
                "{name}: {ev:?}"
            );
        }
        let got = client.events_received();
        assert_eq!(
            client.destroy().unwrap(),
            got,
            "{name}: the kernel's count is ours"
        );
        drop((qp, cq, src_mr, pd));
        drop(src);
        counts.assert_extra(0, 0, "after dropping everything");
        counts.assert_extra_cq_qp(0, 0, "after dropping everything");
    }
}

/// An id on a channel of its own whose ADDR_RESOLVED (towards port 9 of
/// the device's cm address) is queued and unread; `None` (skipped loudly)
/// where the address does not resolve.
fn addr_resolved_unread(ctx: &Context, name: &str) -> Option<(EventChannel, CmId)> {
    let ch = EventChannel::open().unwrap();
    let id = ch.create_id(uverbs::cm::PortSpace::Tcp).unwrap();
    let dst = format!("{}:9", cm_addr(ctx)).parse().unwrap();
    if let Err(e) = id.resolve_addr(None, dst, RESOLVE_MS) {
        cm_unavailable(name, &format!("resolve_addr {dst}: {e}"));
        return None;
    }
    assert!(
        ch.poll_readable(CM_WAIT).unwrap(),
        "{name}: the event is queued"
    );
    Some((ch, id))
}

/// Destroys `id`; the events the kernel reported for it and how long
/// DESTROY_ID took (it waits for the cm's work on the id).
fn destroy_timed(id: CmId, what: &str) -> (u32, Duration) {
    let start = Instant::now();
    let reported = id.destroy().unwrap();
    let took = start.elapsed();
    loud(&format!(
        "{what}: destroyed in {took:?}, reported {reported}"
    ));
    (reported, took)
}

/// A queued, unread ADDR_RESOLVED: destroying the id returns at once,
/// reports 0 events, and the event is gone from the channel (for rxe0's
/// address and siw0's).
#[test]
fn cm_destroy_id_with_an_unread_event() {
    let _serial = serial();
    on_each_cm_device("cm_destroy_id_with_an_unread_event", |name, ctx, _| {
        let Some((ch, id)) = addr_resolved_unread(ctx, name) else {
            return;
        };
        let (reported, took) = destroy_timed(id, &format!("{name}: with an unread event"));
        assert_eq!(reported, 0, "{name}: nothing was read");
        assert!(took < Duration::from_secs(1), "{name}: {took:?}");
        assert_no_event(&ch, Duration::from_millis(300), name);
    });
}

/// A forked child with the parent's channel and id, an ADDR_RESOLVED
/// queued: its GET_EVENT, poll and commands all answer `ForeignProcess`
/// before reaching the kernel (which would have answered `EACCES` to the
/// commands and handed over the parent's event), and its drop of the id
/// destroys nothing; the parent then reads the event, and DESTROY_ID
/// reports it (for rxe0's address and siw0's; issue 18, defect 14).
#[test]
fn cm_a_forked_child_leaves_the_parents_channel_and_id_alone() {
    let _serial = serial();
    let test = "cm_a_forked_child_leaves_the_parents_channel_and_id_alone";
    on_each_cm_device(test, |name, ctx, _| {
        let Some((ch, id)) = addr_resolved_unread(ctx, name) else {
            return;
        };
        let foreign = |r: Result<(), Error>, op: Op| {
            matches!(&r, Err(e @ Error::ForeignProcess { .. })
                if e.op() == op && e.errno() == Some(Errno::ACCESS))
        };
        let code = in_child!(LIMIT, {
            let mut bad = 0;
            let get = ch.get_event().map(|_| ());
            if !foreign(get, Op::CmGetEvent) {
                bad |= 1;
            }
            let poll = ch.poll_readable(Duration::ZERO).map(|_| ());
            if !foreign(poll, Op::CmGetEvent) {
                bad |= 2;
            }
            if !foreign(id.resolve_route(RESOLVE_MS), Op::CmResolveRoute) {
                bad |= 4;
            }
            if !foreign(ch.try_get_event().map(|_| ()), Op::CmGetEvent) {
                bad |= 8;
            }
            drop(id);
            bad
        });
        assert_eq!(
            code, 0,
            "{name}: the child's calls (bits: 1 get_event, 2 poll, 4 resolve_route, \
             8 try_get_event; 99 a panic) were not all refused"
        );
        let ev = next_event(&ch, &format!("{name}: parent after the child"));
        assert!(matches!(ev.kind, EventKind::AddrResolved), "{name}: {ev:?}");
        assert_eq!(ev.uid, id.uid(), "{name}");
        assert_eq!(
            id.destroy().unwrap(),
            1,
            "{name}: the kernel counts the event for the parent's id"
        );
    });
}

/// The server's DISCONNECTED (the client's DREQ, or on iWARP the stream's
/// close) queued and never read: destroying the server id reports only
/// ESTABLISHED, discards the DISCONNECTED, and still answers the peer (the
/// IB CM sends the DREP when it destroys an id that received a DREQ; siw
/// closes the socket), so the client hears DISCONNECTED with status 0, not
/// a time-out; then TIMEWAIT_EXIT on RoCE, nothing on iWARP.
#[test]
fn cm_destroy_id_with_an_unread_disconnect() {
    let _serial = serial();
    on_each_cm_device(
        "cm_destroy_id_with_an_unread_disconnect",
        |name, ctx, counts| {
            let pd = alloc_pd(ctx);
            let Some(pair) = cm_connected_pair(ctx, name, &pd) else {
                return;
            };
            let (client, listener, ch_a, ch_b) = (pair.client, pair.listener, pair.ch_a, pair.ch_b);
            client.disconnect().unwrap();
            assert!(
                ch_b.poll_readable(CM_WAIT).unwrap(),
                "{name}: the DREQ arrived"
            );
            let what = format!("{name}: server id with DISCONNECTED unread");
            let (reported, took) = destroy_timed(pair.server, &what);
            assert_eq!(reported, 1, "{name}: ESTABLISHED only");
            assert!(took < Duration::from_secs(2), "{name}: {took:?}");
            let ev = next_event(&ch_a, "client");
            assert!(matches!(ev.kind, EventKind::Disconnected), "{name}: {ev:?}");
            assert_eq!(ev.status, 0, "{name}: answered, not timed out");
            if !pair.iwarp {
                let ev = next_event(&ch_a, "client timewait");
                assert!(matches!(ev.kind, EventKind::TimewaitExit), "{name}: {ev:?}");
            }
            assert_no_event(&ch_a, Duration::from_millis(500), name);
            assert_no_event(&ch_b, Duration::from_millis(300), name);
            let got = (client.events_received(), listener.events_received());
            assert_eq!(
                (client.destroy().unwrap(), listener.destroy().unwrap()),
                got
            );
            drop((pair.qp_a, pair.qp_b, pair.cq_a, pair.cq_b, pd));
            counts.assert_extra_cq_qp(0, 0, "after dropping everything");
        },
    );
}

/// RoCE (rxe0's subnet; siw's counterpart is the next test): 192.0.2.2 is
/// on dummy0's subnet but no host has it. dummy0 does no ARP,
/// so address and route resolve; the REQ then goes nowhere and the IB CM
/// retries it (CMA_MAX_CM_RETRIES times the response timeout: over a
/// minute before UNREACHABLE): nothing is reported for seconds, and
/// destroying the id ends the attempt at once.
#[test]
fn cm_connect_to_an_address_nobody_has_is_silent_until_destroyed() {
    let _serial = serial();
    let test = "cm_connect_to_an_address_nobody_has_is_silent_until_destroyed";
    if !cm_present(test) {
        return;
    }
    let ch = EventChannel::open().unwrap();
    let id = ch.create_id(uverbs::cm::PortSpace::Tcp).unwrap();
    let dst = "192.0.2.2:7471".parse().unwrap();
    if let Err(e) = id.resolve_addr(None, dst, RESOLVE_MS) {
        return cm_unavailable(test, &format!("resolve_addr {dst}: {e}"));
    }
    let ev = next_event(&ch, "resolve_addr 192.0.2.2");
    assert!(matches!(ev.kind, EventKind::AddrResolved), "{test}: {ev:?}");
    id.resolve_route(RESOLVE_MS).unwrap();
    let ev = next_event(&ch, "resolve_route 192.0.2.2");
    assert!(
        matches!(ev.kind, EventKind::RouteResolved),
        "{test}: {ev:?}"
    );
    id.connect(&ConnParam::new(1)).unwrap();
    assert_no_event(&ch, Duration::from_secs(3), test);
    let start = Instant::now();
    let reported = id.destroy().unwrap();
    let took = start.elapsed();
    loud(&format!(
        "{test}: destroyed while connecting in {took:?}, reported {reported}"
    ));
    assert_eq!(reported, 2, "{test}: address and route");
    assert!(took < Duration::from_secs(2), "{test}: {took:?}");
}

/// 198.51.100.2 is on dummy1's subnet (siw0's) but no host has it. siw
/// makes the TCP connection inside the connect call (`siw_connect`: a
/// blocking `kernel_bindconnect`), so the SYNs that go nowhere keep the
/// call itself in the kernel (until TCP gives up, after its SYN retries:
/// about two minutes with the default `tcp_syn_retries`, not waited for
/// here): a forked child makes the call, reports before and (never)
/// after it; within 3 s nothing comes back, and SIGKILL ends the call and
/// the child at once (the wait is interruptible; measured: reaped 10-21 ms
/// after the signal). rxe's counterpart, where the call
/// returns and the REQ is retried in the background, is the test above.
#[test]
fn cm_siw_connect_to_an_address_nobody_has_blocks_in_the_call_until_killed() {
    let _serial = serial();
    let test = "cm_siw_connect_to_an_address_nobody_has_blocks_in_the_call_until_killed";
    for dev in cm_devices(test).into_iter().filter(is_siw) {
        let name = dev.name().to_owned();
        // SAFETY: nothing of the test's is open yet.
        let (child, mut guard, mut from_child) = unsafe {
            fork_reporting(|mut child_end| {
                let dut = open(&dev);
                let pd = alloc_pd(&dut);
                let cq = dut.create_cq(4, None).expect("child: create_cq");
                let qp = qp_on(&pd, QpType::Rc, &cq, "child");
                let ch = EventChannel::open().unwrap();
                let dst = "198.51.100.2:7471".parse().unwrap();
                let id = match resolved_client_to(&ch, dst) {
                    Ok(id) => id,
                    Err(why) => {
                        writeln!(child_end, "X{why}").unwrap();
                        return 4;
                    }
                };
                cm_modify(&id, &qp, QpState::Init, "child RESET->INIT");
                writeln!(child_end, "C").unwrap();
                let r = id.connect(&ConnParam::new(qp.qp_num()));
                writeln!(child_end, "R{r:?}").unwrap();
                drop((id, qp, cq, pd));
                5
            })
        };
        match line_from(&mut from_child, "before the connect").as_deref() {
            Some("C") => {}
            Some(why) if why.starts_with('X') => return cm_unavailable(test, &why[1..]),
            other => panic!("{name}: the child: {other:?}"),
        }
        let start = Instant::now();
        from_child
            .get_ref()
            .set_read_timeout(Some(Duration::from_secs(3)))
            .unwrap();
        let mut line = String::new();
        let quiet = from_child.read_line(&mut line);
        assert!(
            quiet.is_err(),
            "{name}: the connect call returned within 3 s: {line:?} ({quiet:?})"
        );
        let blocked = start.elapsed();
        kill(child, Signal::SIGKILL).expect("kill the child");
        let killed = Instant::now();
        match wait_within(child, Duration::from_secs(5)) {
            Some(WaitStatus::Signaled(_, Signal::SIGKILL, _)) => guard.0 = None,
            other => panic!("{name}: the child: {other:?}"),
        }
        let took = killed.elapsed();
        loud(&format!(
            "{name}: connect to 198.51.100.2 still in the call after {blocked:?}; \
             the killed child was reaped {took:?} after SIGKILL"
        ));
        assert!(took < Duration::from_secs(2), "{name}: {took:?}");
    }
}
