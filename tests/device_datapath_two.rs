//! RC connections without a connection manager on rxe0: each side
//! describes itself with an [`Endpoint`] (GID, QPN, PSN, MR address and
//! rkey), the two exchange those records in their text form, and each
//! connects its QP from what it read. Once between two contexts of one
//! process, once between two processes (a forked child that opens the
//! device itself, talking over a socket pair). Every byte is checked, every
//! wait is bounded, the kernel's handle counts are back at their start.
//! On siw0 the records still carry the memory (address, rkey), but the
//! QPs are connected through the iWARP connection manager (a siw QP reaches
//! RTS no other way): between the two contexts by `common::rc::cm_connect`,
//! between the processes with the child listening (its port sent over the
//! socket) and the parent dialling.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::time::Duration;

use common::cm::{cm_listener, cm_present};
use common::*;
use memmap2::MmapMut;
use nix::unistd::{fork, ForkResult};
use uverbs::qp::{Endpoint, Mtu};
use uverbs::wr::{RecvWr, SendOp, WcOpcode};
use uverbs::{
    AccessFlags, CompletionQueue, Context, Device, MemoryRegion, ProtectionDomain, QpType,
    QueuePair,
};

/// One side of a connection: a QP on its own CQ, and one registered buffer.
/// Fields drop in order: the MR before the buffer it covers.
struct Side {
    qp: QueuePair,
    mr: MemoryRegion,
    cq: CompletionQueue,
    /// Kept alive with the side (the QP and MR hold it too).
    _pd: ProtectionDomain,
    buf: MmapMut,
}

const LEN: usize = 16 << 10;

fn side(ctx: &Context, who: &str, access: AccessFlags) -> Side {
    let pd = alloc_pd(ctx);
    let cq = ctx
        .create_cq(16, None)
        .unwrap_or_else(|e| panic!("{who}: create_cq: {e}"));
    let qp = qp_on(&pd, QpType::Rc, &cq, who);
    let mut buf = anon(LEN);
    let mr = fresh_mr(&pd, &mut buf, access);
    Side {
        qp,
        mr,
        cq,
        _pd: pd,
        buf,
    }
}

impl Side {
    /// This side's record, with its own first PSN.
    fn endpoint(&self, psn: u32) -> Endpoint {
        let ep = Endpoint::local(&self.qp, PORT, GID_INDEX, &self.mr)
            .unwrap_or_else(|e| panic!("Endpoint::local: {e}"));
        Endpoint { psn, ..ep }
    }

    fn addr(&self) -> u64 {
        self.buf.as_ptr() as u64
    }
}

/// RESET -> RTS towards `remote`, sending from `local_psn`: the common
/// sequence with the PSNs and the path taken from the records.
fn connect_to(qp: &QueuePair, local_psn: u32, remote: &Endpoint, mtu: Mtu) {
    let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ;
    let dest = remote.roce_dest(GID_INDEX as u8, PORT);
    let [(s1, init), (s2, rtr), (s3, rts)] = rc_to_rts(access, PORT, mtu, remote.qpn, dest);
    modify(qp, &init, s1);
    modify(qp, &rtr.rq_psn(remote.psn), s2);
    modify(qp, &rts.sq_psn(local_psn), s3);
}

/// What the peer reads of `ep`: its text line, parsed back.
fn through_text(ep: &Endpoint) -> Endpoint {
    let line = format!("{ep}\n");
    line.parse()
        .unwrap_or_else(|e| panic!("parsing our own endpoint line {line:?}: {e}"))
}

/// The bytes a test writes at offset `i` of message `seed`.
fn pattern(seed: u8, i: usize) -> u8 {
    (i as u8).wrapping_mul(31).wrapping_add(seed) ^ (i >> 8) as u8
}

fn fill(buf: &mut [u8], seed: u8) {
    for (i, b) in buf.iter_mut().enumerate() {
        *b = pattern(seed, i);
    }
}

fn holds(buf: &[u8], seed: u8) -> bool {
    buf.iter().enumerate().all(|(i, &b)| b == pattern(seed, i))
}

/// [`on_each_device`], under [`serial`], for rxe and for siw with the
/// rdma_cm; `body` learns whether it is siw (connected through the cm).
/// siw without the rdma_cm is skipped, any other driver noted and skipped.
fn on_rxe_or_siw(test: &str, mut body: impl FnMut(&str, Dut, &HandleCounts, bool)) {
    let _serial = serial();
    on_each_device(test, |name, dut, counts| {
        let siw = match driver(&dut) {
            Driver::Rxe => false,
            Driver::Siw if cm_present(name) => true,
            Driver::Siw => return,
            Driver::Other => return loud(&format!("NOTE: {name}: not rxe or siw: skipped")),
        };
        body(name, dut, counts, siw)
    });
}

/// Two QPs in two contexts (two opens of the device) of one process,
/// connected from each other's endpoint lines: SEND/RECV both ways, RDMA
/// WRITE into the other's MR and RDMA READ back, each side using only the
/// address and rkey its peer's record named.
#[test]
fn rc_between_two_contexts_connected_from_endpoint_lines() {
    on_rxe_or_siw(
        "rc_between_two_contexts_connected_from_endpoint_lines",
        |name, dut, counts_a, siw| {
            let other = dut.reopen();
            let counts_b = HandleCounts::new(&other, "the second context");
            let mtu = mtu_for(&dut);
            let mut a = side(&dut, "A", RW_READ);
            let mut b = side(&other, "B", RW_READ);
            counts_a.assert_extra_cq_qp(1, 1, "A's side");
            counts_b.assert_extra_cq_qp(1, 1, "B's side");
            counts_b.assert_extra(1, 1, "B's side");

            // Distinct PSNs: a side that took the wrong one would see its
            // peer's packets as out of sequence and never complete.
            let a_ep = a.endpoint(0x00a1a1);
            let b_ep = b.endpoint(0x00b2b2);
            let (a_sees, b_sees) = (through_text(&b_ep), through_text(&a_ep));
            assert_eq!((a_sees, b_sees), (b_ep, a_ep));
            assert_eq!(b_sees.addr, a.addr());
            loud(&format!("{name}: A = {a_ep}\n{name}: B = {b_ep}"));
            let cm = if siw {
                // iWARP: the records' QPN and PSN mean nothing to a siw QP,
                // which reaches RTS only through the cm; the records still
                // say where the peer's memory is (address, rkey).
                loud(&format!(
                    "NOTE: {name}: siw: the two contexts' QPs are connected through the cm; \
                     the records give only the memory"
                ));
                Some(
                    cm_connect(&dut, name, &a.qp, &b.qp)
                        .unwrap_or_else(|| panic!("{name}: no cm connection")),
                )
            } else {
                connect_to(&a.qp, a_ep.psn, &a_sees, mtu);
                connect_to(&b.qp, b_ep.psn, &b_sees, mtu);
                None
            };

            // SEND A -> B and B -> A, 100 bytes each.
            fill(&mut a.buf[..100], 1);
            fill(&mut b.buf[..100], 2);
            let a_recv = sge(a.addr() + 1024, 100, &a.mr);
            let b_recv = sge(b.addr() + 1024, 100, &b.mr);
            // SAFETY: bytes 1024..1124 of both buffers are not touched by the
            // program until the receives' completions below.
            unsafe {
                a.qp.post_recv(&[RecvWr {
                    wr_id: 0xa,
                    sges: &a_recv,
                }])
                .unwrap();
                b.qp.post_recv(&[RecvWr {
                    wr_id: 0xb,
                    sges: &b_recv,
                }])
                .unwrap();
            }
            let a_msg = sge(a.addr(), 100, &a.mr);
            let b_msg = sge(b.addr(), 100, &b.mr);
            let send = SendOp::Send { imm: None };
            // SAFETY: the first 100 bytes of each buffer are only read by the
            // devices and not written until the completions below.
            unsafe {
                a.qp.post_send(&[signalled(1, send, &a_msg)])
                    .unwrap_or_else(|e| panic!("{name}: post_send A: {e}"));
                b.qp.post_send(&[signalled(2, send, &b_msg)])
                    .unwrap_or_else(|e| panic!("{name}: post_send B: {e}"));
            }
            let mut seen_a = wait_n::<2>(&a.cq, "A: its SEND and B's");
            let mut seen_b = wait_n::<2>(&b.cq, "B: its SEND and A's");
            seen_a.sort_by_key(|wc| wc.wr_id());
            seen_b.sort_by_key(|wc| wc.wr_id());
            check(&seen_a[0], "A's SEND", WcOpcode::Send, &a.qp, 1);
            check(&seen_a[1], "B's SEND at A", WcOpcode::Recv, &a.qp, 0xa);
            check(&seen_b[0], "B's SEND", WcOpcode::Send, &b.qp, 2);
            check(&seen_b[1], "A's SEND at B", WcOpcode::Recv, &b.qp, 0xb);
            assert_eq!((seen_a[1].byte_len(), seen_b[1].byte_len()), (100, 100));
            assert!(holds(&a.buf[1024..1124], 2), "{name}: B's SEND at A");
            assert!(holds(&b.buf[1024..1124], 1), "{name}: A's SEND at B");

            // RDMA WRITE of 4 KiB from A into B's MR at B's record's address
            // + 4 KiB, then RDMA READ of it back into A at 8 KiB.
            fill(&mut a.buf[4096..8192], 3);
            let src = sge(a.addr() + 4096, 4096, &a.mr);
            let mut target = a_sees.remote();
            target.addr += 4096;
            let write = signalled_write(3, &src, target);
            // SAFETY: A's source is only read, B's buffer not touched by the
            // program, until the completion below.
            unsafe { a.qp.post_send(&[write]) }
                .unwrap_or_else(|e| panic!("{name}: post_send WRITE: {e}"));
            wait_checked(&a.cq, "RDMA WRITE A -> B", WcOpcode::RdmaWrite, &a.qp, 3);
            assert!(
                holds(&b.buf[4096..8192], 3),
                "{name}: the WRITE landed in B"
            );
            assert!(
                b.buf[8192..].iter().all(|&x| x == 0),
                "{name}: B past the target"
            );
            let back = sge(a.addr() + 8192, 4096, &a.mr);
            let read = signalled(4, SendOp::RdmaRead { remote: target }, &back);
            // SAFETY: A's bytes 8192..12288 are not touched until the completion.
            unsafe { a.qp.post_send(&[read]) }
                .unwrap_or_else(|e| panic!("{name}: post_send READ: {e}"));
            let wc = wait_checked(&a.cq, "RDMA READ A <- B", WcOpcode::RdmaRead, &a.qp, 4);
            assert_eq!(wc.byte_len(), 4096);
            assert!(holds(&a.buf[8192..12288], 3), "{name}: the READ's bytes");
            assert_no_completion(&a.cq, &format!("{name}: stray on A"));
            assert_no_completion(&b.cq, &format!("{name}: stray on B"));
            loud(&format!(
                "{name}: two contexts: SEND both ways, WRITE 4 KiB and READ it back: all landed"
            ));
            drop((a, b, cm));
            counts_b.assert_extra_cq_qp(0, 0, "B after dropping its side");
            counts_a.assert_extra_cq_qp(0, 0, "A after dropping its side");
        },
    );
}

/// How long either process waits for a line from the other.
const LINE_WAIT: Duration = Duration::from_secs(20);
/// How long the parent waits for the child to exit.
const CHILD_LIMIT: Duration = Duration::from_secs(60);

/// Reads one line (without its newline), waiting at most [`LINE_WAIT`].
fn read_line(from: &mut BufReader<UnixStream>, what: &str) -> Result<String, String> {
    let mut line = String::new();
    match from.read_line(&mut line) {
        Ok(0) => Err(format!("{what}: the other process closed the socket")),
        Ok(_) => Ok(line.trim_end().to_string()),
        Err(e) => Err(format!("{what}: no line within {LINE_WAIT:?}: {e}")),
    }
}

fn read_endpoint(from: &mut BufReader<UnixStream>, what: &str) -> Result<Endpoint, String> {
    let line = read_line(from, what)?;
    line.parse()
        .map_err(|e| format!("{what}: {line:?} is no endpoint: {e}"))
}

/// The child's side: opens the device itself (nothing of the parent's is
/// used), exposes an MR with REMOTE_WRITE, posts a receive, and checks
/// what the parent WRITEs and SENDs. Its handle counts must be back at
/// their start before it answers.
fn target_child(dev: &Device, sock: UnixStream, siw: bool) -> Result<(), String> {
    let mut reader = BufReader::new(sock.try_clone().map_err(|e| e.to_string())?);
    let mut writer = sock;
    let ctx = open(dev);
    let counts = HandleCounts::new(&ctx, "the child");
    let mtu = mtu_for(&ctx);
    // A forked child lays out its mappings like its parent: without this
    // its buffer would sit at the parent's buffer's address, and a parent
    // writing to its own address would pass for one using the record.
    let _shift = anon(16 * 4096);
    let t = side(&ctx, "child", RW);
    let mine = t.endpoint(0x00c4c4);
    let parent = read_endpoint(&mut reader, "child: the parent's endpoint")?;
    let recv = sge(t.addr(), 256, &t.mr);
    // The receive for the parent's SEND.
    let post_recv = || {
        // SAFETY: the first 256 bytes are not touched until the receive's
        // completion (`child_checks`); the rest of the buffer is the WRITE's
        // target and is read only after that completion (RC: the WRITE
        // before it landed).
        unsafe {
            t.qp.post_recv(&[RecvWr {
                wr_id: 0xc1,
                sges: &recv,
            }])
        }
        .map_err(|e| format!("child: post_recv: {e}"))
    };
    if siw {
        // siw: the child is the cm's passive side; its receive is posted
        // once the connection is up, and only then does it say READY.
        let (ch, listener, port) = cm_listener(1);
        writeln!(writer, "{mine}").map_err(|e| format!("child: sending its endpoint: {e}"))?;
        writeln!(writer, "cm {port}").map_err(|e| format!("child: sending its port: {e}"))?;
        let server = cm_accept(&ch, &t.qp, "child");
        cm_established(&ch, &server, &t.qp, "child");
        post_recv()?;
        writeln!(writer, "READY").map_err(|e| format!("child: READY: {e}"))?;
        let verdict = child_checks(&t);
        drop(t);
        drop((server, listener, ch));
        drop(counts);
        return verdict;
    }
    connect_to(&t.qp, mine.psn, &parent, mtu);
    post_recv()?;
    writeln!(writer, "{mine}").map_err(|e| format!("child: sending its endpoint: {e}"))?;
    let verdict = child_checks(&t);
    drop(t);
    drop(counts); // asserts the child's counts are back at their start
    verdict
}

/// What the child checks once the parent's WRITE and SEND came.
fn child_checks(t: &Side) -> Result<(), String> {
    let wc = wait_one(&t.cq, "child: the parent's SEND");
    check(&wc, "child: the parent's SEND", WcOpcode::Recv, &t.qp, 0xc1);
    if wc.byte_len() != 256 {
        return Err(format!(
            "child: received {} bytes, expected 256",
            wc.byte_len()
        ));
    }
    if !holds(&t.buf[..256], 5) {
        return Err("child: the SEND's bytes are wrong".into());
    }
    if !holds(&t.buf[4096..12288], 6) {
        return Err("child: the RDMA WRITE's 8 KiB did not land".into());
    }
    if !t.buf[12288..].iter().all(|&b| b == 0) || !t.buf[256..4096].iter().all(|&b| b == 0) {
        return Err("child: bytes outside the WRITE's target changed".into());
    }
    assert_no_completion(&t.cq, "child: a stray completion");
    Ok(())
}

/// RC across two processes: a child forked before it opens anything opens
/// rxe0 itself, and the two swap endpoint lines over a socket pair. The
/// parent RDMA WRITEs 8 KiB into the child's MR (found by the child's
/// record alone) and then SENDs 256 bytes; the child checks both and
/// answers its verdict; the parent reaps it within a bound and checks its
/// exit status.
#[test]
fn rc_between_two_processes_over_a_socket_pair() {
    on_rxe_or_siw(
        "rc_between_two_processes_over_a_socket_pair",
        |name, dut, counts, siw| {
            let (to_child, in_child) = UnixStream::pair().expect("socketpair");
            for s in [&to_child, &in_child] {
                s.set_read_timeout(Some(LINE_WAIT)).unwrap();
                s.set_write_timeout(Some(LINE_WAIT)).unwrap();
            }
            let dev = dut.device().clone();
            // Forked before the parent makes anything of its own: the child
            // inherits only the parent's context, which it never uses.
            // SAFETY: the child runs the target side and leaves with _exit;
            // the tests of this binary hold `serial()`, so no other thread of
            // ours is inside the library at the fork, and glibc keeps malloc
            // usable in the child.
            let child = match unsafe { fork() }.expect("fork") {
                ForkResult::Child => {
                    drop(to_child);
                    let verdict = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        target_child(&dev, in_child.try_clone().expect("dup"), siw)
                    }))
                    .unwrap_or_else(|_| Err("child: panicked (see above)".into()));
                    let mut out = &in_child;
                    let code = match &verdict {
                        Ok(()) => {
                            let _ = writeln!(out, "OK");
                            0
                        }
                        Err(why) => {
                            let _ = writeln!(out, "FAILED {why}");
                            1
                        }
                    };
                    // SAFETY: _exit never returns and runs no atexit handlers.
                    unsafe { nix::libc::_exit(code) }
                }
                ForkResult::Parent { child } => child,
            };
            drop(in_child);

            let mtu = mtu_for(&dut);
            let mut p = side(&dut, "parent", RW);
            let mine = p.endpoint(0x00d5d5);
            let mut reader = BufReader::new(to_child.try_clone().unwrap());
            let mut writer = &to_child;
            // The parent's cm id and channel on siw: dropped after its QP.
            let mut parent_cm = None;
            // Caught so that the child is reaped whatever fails here.
            let talk = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                writeln!(writer, "{mine}").map_err(|e| format!("sending our endpoint: {e}"))?;
                let target = read_endpoint(&mut reader, "the child's endpoint")?;
                loud(&format!("{name}: parent {mine}\n{name}: child  {target}"));
                // Not the address: the child maps its buffer after the fork,
                // and may get the very address ours has (seen on 6.1).
                if target.qpn == mine.qpn {
                    return Err(format!("the child's record repeats ours: {target}"));
                }
                if siw {
                    // The child listens and says on which port; the parent
                    // dials it, and waits until the child's receive is
                    // posted (iWARP has no RNR: a SEND before it is fatal).
                    let line = read_line(&mut reader, "the child's cm port")?;
                    let port: u16 = line
                        .strip_prefix("cm ")
                        .and_then(|p| p.parse().ok())
                        .ok_or_else(|| format!("not a cm port line: {line:?}"))?;
                    let (ch, client) = cm_dial(&dut, name, port, &p.qp)
                        .ok_or_else(|| "no cm address".to_string())?;
                    cm_established(&ch, &client, &p.qp, &format!("{name}: parent"));
                    parent_cm = Some((client, ch));
                    let ready = read_line(&mut reader, "the child's receive")?;
                    if ready != "READY" {
                        return Err(format!("the child said {ready:?}"));
                    }
                } else {
                    connect_to(&p.qp, mine.psn, &target, mtu);
                }
                fill(&mut p.buf[..256], 5);
                fill(&mut p.buf[4096..12288], 6);
                let src = sge(p.addr() + 4096, 8192, &p.mr);
                let mut at = target.remote();
                at.addr += 4096;
                let msg = sge(p.addr(), 256, &p.mr);
                let wrs = [
                    signalled_write(7, &src, at),
                    signalled(8, SendOp::Send { imm: None }, &msg),
                ];
                // SAFETY: the parent's buffer is only read by the device and
                // not written until both completions below.
                unsafe { p.qp.post_send(&wrs) }.map_err(|e| format!("post_send: {e}"))?;
                let [w, s] = wait_n::<2>(&p.cq, "the parent's WRITE and SEND");
                check(&w, "parent's RDMA WRITE", WcOpcode::RdmaWrite, &p.qp, 7);
                check(&s, "parent's SEND", WcOpcode::Send, &p.qp, 8);
                read_line(&mut reader, "the child's verdict")
            }));
            let code = wait_exit_code(child, CHILD_LIMIT);
            let talk = talk.unwrap_or_else(|panic| {
                loud(&format!(
                    "{name}: the parent failed; the child exited with {code}"
                ));
                std::panic::resume_unwind(panic)
            });
            let verdict = talk.unwrap_or_else(|e| panic!("{name}: {e} (child exit code {code})"));
            assert_eq!(verdict, "OK", "{name}: the child's verdict");
            assert_eq!(code, 0, "{name}: the child's exit code");
            loud(&format!(
                "{name}: two processes: WRITE 8 KiB + SEND 256 B landed in the child (verdict {verdict}, exit {code})"
            ));
            drop(p);
            drop(parent_cm);
            counts.assert_extra_cq_qp(0, 0, "the parent after dropping its side");
        },
    );
}
