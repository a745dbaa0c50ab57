//! The safe posting model on rxe0: work requests own their memory
//! (`BufferMr`, `Arc<BufferMr>`, both on one QP), the device moves bytes through it, and
//! `OwnedQp::poll` hands it back with the completion; flush completes what
//! is outstanding with FLUSH_ERR and hands that back too; dropping an
//! `OwnedQp` with requests outstanding destroys the QP before their memory
//! is freed, and `OwnedQp::destroy` hands that memory back instead. Every
//! byte is checked, every wait bounded, and the kernel's counts are back at
//! their start at the end. On siw0 the owned QPs are
//! connected through the iWARP connection manager (`OwnedQp::modify` with
//! the cm's answers, then `established`); what siw cannot do (immediate
//! data, atomics) is refused before the ring with the memory handed back.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use uverbs::mr::RemoteBufferMr;
use uverbs::post::{
    Completed, DeviceReadable, Ended, Local, OwnedOrShared, PostRefused, PostSendError,
    RecvRequest, SendRequest,
};
use uverbs::qp::QpAttr;
use uverbs::wr::{PostError, Remote, WcOpcode, WcStatus};
use uverbs::{AccessFlags, BufferMr, Context, OwnedQp, ProtectionDomain, QpInit, QpType};

type Owned = OwnedQp<BufferMr<Vec<u8>>>;

/// Two owned RC QPs (memory types `A` and `B`), each on a CQ of its own,
/// connected to each other: on rxe by hand, on siw through the cm (the
/// link comes back too: keep it until the QPs are gone).
fn owned_pair<A: DeviceReadable, B: DeviceReadable>(
    ctx: &Context,
    pd: &ProtectionDomain,
    name: &str,
) -> (OwnedQp<A>, OwnedQp<B>, Option<CmLink>) {
    let cq_a = ctx.create_cq(32, None).unwrap();
    let cq_b = ctx.create_cq(32, None).unwrap();
    let qp_a = qp_on(pd, QpType::Rc, &cq_a, name);
    let qp_b = qp_on(pd, QpType::Rc, &cq_b, name);
    // The QPs keep their CQs alive: the handles may go.
    drop((cq_a, cq_b));
    let a = OwnedQp::new(qp_a).unwrap_or_else(|e| panic!("{name}: OwnedQp::new A: {e}"));
    let b = OwnedQp::new(qp_b).unwrap_or_else(|e| panic!("{name}: OwnedQp::new B: {e}"));
    let link = connect_qps(ctx, name, &a, &b, QP_ACCESS_ATOMIC);
    (a, b, link)
}

/// siw has no immediate data and no atomics: `request` is refused before
/// the ring, typed (`NotSupported` by siw, EINVAL), handed back with its
/// memory, and nothing is outstanding.
fn siw_refuses<M: DeviceReadable>(qp: &OwnedQp<M>, request: SendRequest<'_, M>, what: &str) -> M {
    let wr_id = request.wr_id();
    let before = qp.outstanding();
    let refused = refused(qp.post_send(request), what);
    assert!(
        matches!(
            &refused.error,
            uverbs::Error::Post { why: source, .. }
                if matches!(**source, uverbs::wr::PostError::NotSupported { driver: "siw", .. })
        ),
        "{what}: {}",
        refused.error
    );
    assert_eq!(
        refused.error.errno(),
        Some(uverbs::error::Errno::INVAL),
        "{what}"
    );
    assert_eq!(refused.request.wr_id(), wr_id, "{what}: the request back");
    assert_eq!(qp.outstanding(), before, "{what}: nothing queued");
    loud(&format!("NOTE: {what}: siw refuses it: {}", refused.error));
    refused
        .request
        .into_local()
        .expect("the request's memory")
        .into_inner()
}

/// The refusal of a post that must be refused (not queued).
fn refused<T>(result: Result<(), PostSendError<T>>, what: &str) -> PostRefused<T> {
    match result {
        Err(PostSendError::Refused(r)) => r,
        Err(e) => panic!("{what}: queued with a failed doorbell: {e}"),
        Ok(()) => panic!("{what}: posted"),
    }
}

/// An unsignalled `request` that must be signalled on `qp` is refused,
/// typed, with its memory back; nothing is outstanding.
fn must_be_signalled<M: DeviceReadable>(
    qp: &OwnedQp<M>,
    request: SendRequest<'_, M>,
    what: &str,
) -> M {
    let before = qp.outstanding();
    let r = refused(qp.post_send(request), what);
    assert!(
        matches!(&r.error, uverbs::Error::Post { why: source, .. }
            if matches!(**source, PostError::MustBeSignalled { .. })),
        "{what}: {}",
        r.error
    );
    assert_eq!(qp.outstanding(), before, "{what}: nothing queued");
    r.request.into_local().expect("its memory").into_inner()
}

/// A buffer a peer may write, registered for it.
fn reg_target(
    pd: &ProtectionDomain,
    bytes: Vec<u8>,
    access: AccessFlags,
) -> RemoteBufferMr<Vec<u8>> {
    pd.reg_remote_buffer(bytes, access)
        .unwrap_or_else(|e| panic!("reg_remote_buffer: {}", e.error))
}

/// `len` bytes of `mr` at `at`, copied out.
fn read_out(mr: &mut RemoteBufferMr<Vec<u8>>, at: usize, len: usize) -> Vec<u8> {
    let mut out = vec![0; len];
    mr.copy_out(at, &mut out).expect("inside the buffer");
    out
}

/// Asserts the memory the completions hand back, in their order: one per
/// expected entry, holding its bytes (the entry's name says which failed).
fn assert_memory_back(
    back: Vec<Completed<BufferMr<Vec<u8>>>>,
    expected: &[(&[u8], &str)],
    name: &str,
) {
    assert_eq!(back.len(), expected.len(), "{name}: completions {back:?}");
    for (c, (bytes, what)) in back.into_iter().zip(expected) {
        let mem = c
            .into_memory()
            .unwrap_or_else(|| panic!("{name}: {what}: no memory back"));
        assert_eq!(mem.buffer(), *bytes, "{name}: {what}");
    }
}

/// Polls `qp` until `n` requests have come back or [`WAIT`] passes.
fn wait_back<M: DeviceReadable>(qp: &OwnedQp<M>, n: usize, what: &str) -> Vec<Completed<M>> {
    let deadline = Instant::now() + WAIT;
    let mut done = Vec::new();
    while done.len() < n {
        qp.poll(&mut done)
            .unwrap_or_else(|e| panic!("{what}: poll: {e}"));
        assert!(
            Instant::now() < deadline,
            "{what}: {} of {n} requests back within {WAIT:?}: {:?}",
            done.len(),
            done.iter().map(|c| (c.wr_id, c.ended)).collect::<Vec<_>>()
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(done.len(), n, "{what}: more requests back than posted");
    done
}

fn reg(pd: &ProtectionDomain, bytes: Vec<u8>, access: AccessFlags) -> BufferMr<Vec<u8>> {
    pd.reg_buffer(bytes, access)
        .unwrap_or_else(|e| panic!("reg_buffer: {}", e.error))
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|i| (i as u8).wrapping_mul(7) ^ seed).collect()
}

/// SEND/RECV and RDMA WRITE with memory moved into the requests: the
/// receiver's buffer comes back holding the message, the sender's comes
/// back unchanged, and the completions carry the caller's ids.
#[test]
fn owned_buffers_come_back_with_their_completions() {
    on_each_data_path_device(
        "owned_buffers_come_back_with_their_completions",
        |name, ctx| {
            let pd = alloc_pd(ctx);
            let (a, b, cm): (Owned, Owned, _) = owned_pair(ctx, &pd, name);
            let rx = reg(&pd, vec![0; 4096], AccessFlags::LOCAL_WRITE);
            b.post_recv(RecvRequest::new(41, Local::whole(rx)))
                .unwrap_or_else(|e| panic!("{name}: post_recv: {e}"));
            assert_eq!(b.outstanding(), (0, 1));
            let tx = reg(&pd, pattern(4096, 0x11), AccessFlags::LOCAL_WRITE);
            let msg = Local::slice(tx, 100..1100).unwrap();
            let imm = cm.is_none().then_some(0xfeed);
            let request = if cm.is_some() {
                // siw has no immediate data: refused, the buffer back, then
                // the same SEND without it.
                let what = format!("{name}: SEND_WITH_IMM");
                let tx = siw_refuses(&a, SendRequest::send_with_imm(42, msg, 0xfeed), &what);
                SendRequest::send(42, Local::slice(tx, 100..1100).unwrap())
            } else {
                SendRequest::send_with_imm(42, msg, 0xfeed)
            };
            a.post_send(request)
                .unwrap_or_else(|e| panic!("{name}: post_send: {e}"));

            let sent = wait_back(&a, 1, "SEND").remove(0);
            assert_eq!(sent.wr_id, 42);
            assert_eq!(sent.status(), Some(WcStatus::Success), "{name}: {sent:?}");
            assert_eq!(sent.completion().unwrap().opcode(), Some(WcOpcode::Send));
            let local = sent.local.unwrap();
            assert_eq!(local.range(), 100..1100);
            let tx = local.into_inner();
            assert_eq!(
                tx.buffer(),
                &pattern(4096, 0x11)[..],
                "{name}: sender's bytes"
            );

            let got = wait_back(&b, 1, "RECV").remove(0);
            let wc = *got.completion().unwrap();
            assert!(got.is_recv);
            assert_eq!(
                (got.wr_id, wc.wr_id(), wc.byte_len()),
                (41, 41, 1000),
                "{wc:?}"
            );
            if let Some(imm) = imm {
                assert_eq!(wc.imm_data(), Some(imm), "{wc:?}");
            }
            let rx = got.into_memory().unwrap();
            assert_eq!(&rx.buffer()[..1000], &pattern(4096, 0x11)[100..1100]);
            assert!(rx.buffer()[1000..].iter().all(|&x| x == 0));

            // The sender's buffer again, for an RDMA WRITE into a region the
            // peer may write: its bytes are reached only by copies.
            let mut wt = reg_target(&pd, vec![0; 4096], RW);
            let remote = Remote {
                addr: wt.addr() + 2048,
                rkey: wt.rkey(),
            };
            a.post_send(SendRequest::write(
                43,
                Local::slice(tx, 0..512).unwrap(),
                remote,
            ))
            .unwrap();
            let w = wait_back(&a, 1, "WRITE").remove(0);
            assert_eq!(
                (w.wr_id, w.status()),
                (43, Some(WcStatus::Success)),
                "{w:?}"
            );
            assert_eq!(read_out(&mut wt, 2048, 512), &pattern(4096, 0x11)[..512]);
            assert_eq!((a.outstanding(), b.outstanding()), ((0, 0), (0, 0)));
            let plain = wt.dereg().unwrap_or_else(|e| panic!("{name}: dereg: {e}"));
            assert_eq!(
                &plain[2048..2560],
                &pattern(4096, 0x11)[..512],
                "plain again"
            );
            drop((a, b, w, rx, pd, cm));
        },
    );
}

/// Memory shared through an `Arc` can be the source of several WRITEs at
/// once; each request holds a clone until it is back, after which the
/// region is the caller's alone again.
#[test]
fn shared_memory_is_sent_from_by_several_requests() {
    on_each_data_path_device(
        "shared_memory_is_sent_from_by_several_requests",
        |name, ctx| {
            let pd = alloc_pd(ctx);
            let (a, b, cm): (OwnedQp<Arc<BufferMr<Vec<u8>>>>, Owned, _) =
                owned_pair(ctx, &pd, name);
            let src = Arc::new(reg(&pd, pattern(8192, 0x5a), AccessFlags::LOCAL_WRITE));
            let mut dst = reg_target(&pd, vec![0; 8192], RW);
            let base = dst.addr();
            let mut batch: Vec<_> = (0..4u64)
                .map(|i| {
                    let range = (i as usize * 2048)..((i as usize + 1) * 2048);
                    let remote = Remote {
                        addr: base + 8192 - (i + 1) * 2048,
                        rkey: dst.rkey(),
                    };
                    SendRequest::write(i, Local::slice(src.clone(), range).unwrap(), remote)
                })
                .collect();
            a.post_send_batch(&mut batch)
                .unwrap_or_else(|e| panic!("{name}: post_send_batch: {e}"));
            assert!(batch.is_empty(), "the batch moved into the QP");
            assert_eq!(
                Arc::strong_count(&src),
                5,
                "four requests hold a clone each"
            );
            let back = wait_back(&a, 4, "4 WRITEs");
            let ids: Vec<u64> = back.iter().map(|c| c.wr_id).collect();
            assert_eq!(ids, [0, 1, 2, 3], "in order");
            assert!(
                back.iter().all(|c| c.status() == Some(WcStatus::Success)),
                "{back:?}"
            );
            drop(back);
            let src = Arc::try_unwrap(src).expect("every clone came back");
            for i in 0..4 {
                let to = 8192 - (i + 1) * 2048;
                assert_eq!(
                    read_out(&mut dst, to, 2048),
                    &src.buffer()[i * 2048..(i + 1) * 2048],
                    "{name}: chunk {i}"
                );
            }
            drop((a, b, src, dst, pd, cm));
        },
    );
}

/// RDMA READ and both atomics land in memory the request owns. An
/// unsignalled READ is refused with its memory back (a READ's memory comes
/// back only with its own completion); an unsignalled WRITE comes back with
/// the next signalled request on rxe, ended by it ([`Ended::AfterLater`]),
/// and is refused on siw.
#[test]
fn reads_and_atomics_write_owned_memory() {
    on_each_data_path_device("reads_and_atomics_write_owned_memory", |name, ctx| {
        let pd = alloc_pd(ctx);
        let (a, b, cm): (Owned, Owned, _) = owned_pair(ctx, &pd, name);
        let mut target = pattern(4096, 0x33);
        target[..8].copy_from_slice(&1000u64.to_ne_bytes());
        target[8..16].copy_from_slice(&7u64.to_ne_bytes());
        let mut target = reg_target(&pd, target, RW_READ | AccessFlags::REMOTE_ATOMIC);
        let (base, rkey) = (target.addr(), target.rkey());
        let at = |off: u64| Remote {
            addr: base + off,
            rkey,
        };
        let local = |len| Local::whole(reg(&pd, vec![0; len], AccessFlags::LOCAL_WRITE));

        let unsignalled_read = SendRequest::read(1, local(1024), at(1024)).unsignaled();
        let mem = must_be_signalled(&a, unsignalled_read, &format!("{name}: unsignalled READ"));
        assert!(mem.buffer().iter().all(|&x| x == 0), "untouched");
        if cm.is_some() {
            let write = SendRequest::write(9, Local::whole(mem), at(0)).unsignaled();
            must_be_signalled(&a, write, &format!("{name}: unsignalled WRITE on siw"));
            siw_reads_into_owned_memory(&a, local, at, name);
            drop((a, b, target, pd, cm));
            return;
        }
        let mut src = mem;
        src.buffer_mut().copy_from_slice(&pattern(1024, 0x44));
        a.post_send(SendRequest::write(0, Local::whole(src), at(2048)).unsignaled())
            .unwrap();
        a.post_send(SendRequest::read(1, local(1024), at(1024)))
            .unwrap();
        a.post_send(SendRequest::fetch_add(2, local(8), at(0), 5))
            .unwrap();
        let back = wait_back(&a, 3, "WRITE (unsignalled) + READ + FETCH_ADD");
        assert_eq!(back[0].wr_id, 0);
        assert_eq!(back[0].ended, Ended::AfterLater, "{:?}", back[0]);
        assert_eq!(back[0].status(), Some(WcStatus::Success));
        let mut back = back.into_iter();
        back.next();
        let back: Vec<_> = back.collect();
        assert_eq!((back[0].wr_id, back[1].wr_id), (1, 2));
        assert_eq!(
            back[0].completion().unwrap().opcode(),
            Some(WcOpcode::RdmaRead)
        );
        let wc = *back[1].completion().unwrap();
        assert_eq!(
            (wc.status(), wc.opcode()),
            (WcStatus::Success, Some(WcOpcode::FetchAdd))
        );
        assert_memory_back(
            back,
            &[
                (&pattern(4096, 0x33)[1024..2048], "READ"),
                (&1000u64.to_ne_bytes(), "FETCH_ADD old"),
            ],
            name,
        );
        assert_eq!(read_out(&mut target, 0, 8), &1005u64.to_ne_bytes());
        assert_eq!(
            read_out(&mut target, 2048, 1024),
            pattern(1024, 0x44),
            "{name}: WRITE"
        );

        a.post_send(SendRequest::compare_swap(3, local(8), at(8), 7, 99))
            .unwrap();
        let c = wait_back(&a, 1, "CMP_SWP").remove(0);
        assert_eq!(c.status(), Some(WcStatus::Success), "{c:?}");
        assert_eq!(c.into_memory().unwrap().buffer(), &7u64.to_ne_bytes());
        assert_eq!(read_out(&mut target, 8, 8), &99u64.to_ne_bytes());
        drop((a, b, target, pd, cm));
    });
}

/// One QP, two kinds of memory (`OwnedOrShared`): WRITEs from a buffer
/// shared by two requests and a READ into a buffer of its own; each comes
/// back as the kind it went in as, the READ's holding the peer's bytes.
#[test]
fn shared_and_owned_memory_on_one_queue_pair() {
    on_each_data_path_device("shared_and_owned_memory_on_one_queue_pair", |name, ctx| {
        let pd = alloc_pd(ctx);
        let (a, b, cm): (OwnedQp<OwnedOrShared<Vec<u8>>>, Owned, _) = owned_pair(ctx, &pd, name);
        let mut target = reg_target(&pd, pattern(4096, 0x21), RW_READ);
        let (base, rkey) = (target.addr(), target.rkey());
        let at = |off: u64| Remote {
            addr: base + off,
            rkey,
        };
        let shared = Arc::new(reg(&pd, pattern(1024, 0x6b), AccessFlags::LOCAL_WRITE));
        let owned = reg(&pd, vec![0; 512], AccessFlags::LOCAL_WRITE);
        a.post_send(SendRequest::write(1, Local::whole(shared.clone()), at(0)))
            .unwrap_or_else(|e| panic!("{name}: WRITE 1: {e}"));
        a.post_send(SendRequest::write(
            2,
            Local::whole(shared.clone()),
            at(1024),
        ))
        .unwrap_or_else(|e| panic!("{name}: WRITE 2: {e}"));
        a.post_send(SendRequest::read(3, Local::whole(owned), at(3072)))
            .unwrap_or_else(|e| panic!("{name}: READ: {e}"));
        assert_eq!(
            Arc::strong_count(&shared),
            3,
            "two requests hold a clone each"
        );
        let mut back = wait_back(&a, 3, "WRITE + WRITE + READ");
        back.sort_by_key(|c| c.wr_id);
        assert!(
            back.iter().all(|c| c.status() == Some(WcStatus::Success)),
            "{name}: {back:?}"
        );
        let mut back = back.into_iter().map(|c| c.into_memory().unwrap());
        for i in 0..2 {
            let mem = back.next().unwrap();
            assert!(
                matches!(mem, OwnedOrShared::Shared(_)),
                "{name}: WRITE {i} back shared"
            );
        }
        let read = back
            .next()
            .unwrap()
            .into_owned()
            .expect("the READ's buffer back owned");
        assert_eq!(
            read.buffer(),
            &pattern(4096, 0x21)[3072..3584],
            "{name}: READ"
        );
        let shared = Arc::try_unwrap(shared).expect("every clone came back");
        for off in [0, 1024] {
            assert_eq!(
                read_out(&mut target, off, 1024),
                shared.buffer(),
                "{name}: WRITE at {off}"
            );
        }
        assert_eq!(a.outstanding(), (0, 0));
        drop((a, b, target, shared, read, pd, cm));
    });
}

/// siw's half of [`reads_and_atomics_write_owned_memory`]: siw has no
/// atomics (`atomic_cap` 0): FETCH_ADD and CMP_SWP are refused before the
/// ring with their memory back. Two READs into memory the requests own
/// each come back with their own completion.
fn siw_reads_into_owned_memory(
    a: &Owned,
    local: impl Fn(usize) -> Local<BufferMr<Vec<u8>>>,
    at: impl Fn(u64) -> Remote,
    name: &str,
) {
    let back = siw_refuses(
        a,
        SendRequest::fetch_add(2, local(8), at(0), 5),
        &format!("{name}: FETCH_ADD"),
    );
    assert_eq!(
        back.buffer(),
        &[0; 8],
        "{name}: the FETCH_ADD's memory, untouched"
    );
    siw_refuses(
        a,
        SendRequest::compare_swap(3, local(8), at(8), 7, 99),
        &format!("{name}: CMP_SWP"),
    );
    a.post_send(SendRequest::read(1, local(1024), at(1024)))
        .unwrap();
    a.post_send(SendRequest::read(2, local(512), at(3072)))
        .unwrap();
    let mut back = wait_back(a, 2, "READ + READ");
    back.sort_by_key(|c| c.wr_id);
    assert_eq!((back[0].wr_id, back[1].wr_id), (1, 2));
    assert!(
        back.iter().all(|c| matches!(c.ended, Ended::Completion(_))),
        "{back:?}"
    );
    assert_eq!(back[0].status(), Some(WcStatus::Success));
    let wc = *back[1].completion().unwrap();
    assert_eq!(
        (wc.status(), wc.opcode(), wc.byte_len()),
        (WcStatus::Success, Some(WcOpcode::RdmaRead), 512)
    );
    let source = pattern(4096, 0x33);
    assert_memory_back(
        back,
        &[
            (&source[1024..2048], "READ 1"),
            (&source[3072..3584], "READ 2"),
        ],
        name,
    );
    assert_eq!(a.outstanding(), (0, 0));
}

/// Flush moves the QP to ERR and hands every outstanding receive back with
/// FLUSH_ERR, untouched; the QP can then be reset and used again.
#[test]
fn flush_hands_back_everything_outstanding() {
    on_each_data_path_device("flush_hands_back_everything_outstanding", |name, ctx| {
        let pd = alloc_pd(ctx);
        let (a, b, cm): (Owned, Owned, _) = owned_pair(ctx, &pd, name);
        for i in 0..4 {
            let buf = reg(&pd, vec![i as u8; 256], AccessFlags::LOCAL_WRITE);
            b.post_recv(RecvRequest::new(i, Local::whole(buf))).unwrap();
        }
        assert_eq!(b.outstanding(), (0, 4));
        let mut done = Vec::new();
        b.flush(WAIT, &mut done)
            .unwrap_or_else(|e| panic!("{name}: flush: {e} ({done:?})"));
        assert_eq!(done.len(), 4, "{done:?}");
        for (i, c) in done.into_iter().enumerate() {
            assert_eq!(c.wr_id, i as u64);
            assert_eq!(c.status(), Some(WcStatus::WrFlushErr), "{c:?}");
            let buf = c.into_memory().unwrap();
            assert!(buf.buffer().iter().all(|&x| x == i as u8), "untouched");
        }
        assert_eq!(b.outstanding(), (0, 0));
        let b = b.into_inner().expect("nothing outstanding");
        drop((a, b, pd, cm));
    });
}

/// Runs `end` on owned QP B (connected to A) with three receives
/// outstanding, receive `i` into 512 bytes of `i`, each buffer counting its
/// drop in `drops`; A, the PD and the cm link go afterwards.
fn with_three_receives(
    test: &str,
    end: impl Fn(&str, OwnedQp<BufferMr<Watched>>, &AtomicUsize, &HandleCounts),
) {
    on_each_data_path_device_counted(test, |name, ctx, counts| {
        let pd = alloc_pd(ctx);
        let (a, b, cm): (OwnedQp<BufferMr<Watched>>, OwnedQp<BufferMr<Watched>>, _) =
            owned_pair(ctx, &pd, name);
        let drops = Arc::new(AtomicUsize::new(0));
        for i in 0..3u8 {
            let buf = pd
                .reg_buffer(Watched::new(&[i; 512], &drops), AccessFlags::LOCAL_WRITE)
                .unwrap_or_else(|e| panic!("reg_buffer: {}", e.error));
            b.post_recv(RecvRequest::new(u64::from(i), Local::whole(buf)))
                .unwrap();
        }
        counts.assert_extra_cq_qp(2, 2, "two owned QPs");
        end(name, b, &drops, counts);
        drop((a, pd, cm));
    });
}

/// Dropping an OwnedQp with receives outstanding destroys the QP and only
/// then frees their memory (deregistering it): the buffers are dropped,
/// and the kernel's QP and MR counts are back (the fixture checks them at
/// the end too).
#[test]
fn dropping_with_requests_outstanding_destroys_then_frees() {
    with_three_receives(
        "dropping_with_requests_outstanding_destroys_then_frees",
        |name, b, drops, counts| {
            let (mrs, _) = counts.now();
            drop(b);
            assert_eq!(
                drops.load(Ordering::SeqCst),
                3,
                "{name}: the buffers were freed"
            );
            counts.assert_extra_cq_qp(1, 1, "after dropping B");
            assert_eq!(counts.now().0, mrs - 3, "{name}: their MRs deregistered");
        },
    );
}

/// `destroy` with receives outstanding (nothing will complete them)
/// destroys the QP and hands every one back, `Ended::Destroyed`, holding
/// its own untouched buffer, still registered: nothing is freed, and the
/// MRs go only when the caller drops the buffers.
#[test]
fn destroy_hands_back_what_is_outstanding() {
    with_three_receives(
        "destroy_hands_back_what_is_outstanding",
        |name, b, drops, counts| {
            let (mrs, _) = counts.now();
            let mut back = Vec::new();
            b.destroy(&mut back)
                .unwrap_or_else(|e| panic!("{name}: destroy: {e}"));
            counts.assert_extra_cq_qp(1, 1, "after destroying B");
            let got: Vec<_> = back
                .iter()
                .map(|c| (c.wr_id, c.ended, c.is_recv, c.status()))
                .collect();
            let want: Vec<_> = (0..3).map(|i| (i, Ended::Destroyed, true, None)).collect();
            assert_eq!(got, want, "{name}");
            assert_eq!(drops.load(Ordering::SeqCst), 0, "{name}: nothing freed");
            assert_eq!(counts.now().0, mrs, "{name}: the MRs stay registered");
            for (i, c) in back.into_iter().enumerate() {
                let buf = c.into_memory().expect("the receive's buffer");
                assert!(
                    buf.buffer().iter().all(|&x| x == i as u8),
                    "{name}: untouched"
                );
            }
            assert_eq!(
                drops.load(Ordering::SeqCst),
                3,
                "{name}: the caller's to drop"
            );
            assert_eq!(counts.now().0, mrs - 3, "{name}: deregistered then");
        },
    );
}

/// siw leaves a send posted after the kernel moved the QP to ERR itself
/// (the peer disconnected) in its ring: `flush` cannot bring it back
/// (`ETIMEDOUT`, still owned), `destroy` can. Should the send have been
/// written before siw's flush (which is not ordered against DISCONNECTED),
/// it comes back flushed instead. Either way it comes back exactly once,
/// with its buffer. (rxe flushes every send posted in ERR: siw only.)
#[test]
fn destroy_hands_back_what_siw_never_completes() {
    let test = "destroy_hands_back_what_siw_never_completes";
    on_each_siw_device(test, |name, ctx| {
        let pd = alloc_pd(ctx);
        let (a, b, cm): (Owned, Owned, _) = owned_pair(ctx, &pd, name);
        let link = cm.expect("siw connects through the cm");
        link.b_disconnects(name);
        let sent = pattern(256, 0x5a);
        let buf = reg(&pd, sent.clone(), AccessFlags::LOCAL_WRITE);
        a.post_send(SendRequest::send(7, Local::whole(buf)))
            .unwrap_or_else(|e| panic!("{name}: post in ERR: {e}"));
        let mut back = Vec::new();
        match a.flush(Duration::from_secs(2), &mut back) {
            Ok(()) => {
                loud(&format!(
                    "NOTE: {name}: the send went in before siw's flush"
                ));
                assert_eq!(back.len(), 1, "{name}: {back:?}");
                assert_eq!(back[0].status(), Some(WcStatus::WrFlushErr), "{name}");
            }
            Err(e) => {
                assert_eq!(
                    e.errno(),
                    Some(uverbs::error::Errno::TIMEDOUT),
                    "{name}: {e}"
                );
                assert!(back.is_empty(), "{name}: {back:?}");
                assert_eq!(a.outstanding(), (1, 0), "{name}: still owned");
                loud(&format!("NOTE: {name}: the send stays in siw's ring: {e}"));
            }
        }
        let flushed = back.len();
        a.destroy(&mut back)
            .unwrap_or_else(|e| panic!("{name}: destroy: {e}"));
        assert_eq!(back.len(), 1, "{name}: exactly once: {back:?}");
        if flushed == 0 {
            assert_eq!(back[0].ended, Ended::Destroyed, "{name}");
        }
        assert_eq!(back[0].wr_id, 7, "{name}");
        assert_memory_back(back, &[(&sent, "the send's buffer")], name);
        drop((b, pd, link));
    });
}

/// A request refused before the device saw it comes back whole, and a QP
/// that is not in RESET is not taken.
#[test]
fn refused_requests_and_queue_pairs_come_back() {
    on_each_data_path_device("refused_requests_and_queue_pairs_come_back", |_, ctx| {
        let pd = alloc_pd(ctx);
        let cq = ctx.create_cq(8, None).unwrap();
        let qp = pd.create_qp(&QpInit::new(QpType::Rc, &cq, &cq)).unwrap();
        let owned: Owned = OwnedQp::new(qp).unwrap();
        // In RESET: posting is refused, the request handed back.
        let buf = reg(&pd, pattern(64, 1), AccessFlags::LOCAL_WRITE);
        let refused = refused(
            owned.post_send(SendRequest::send(5, Local::whole(buf))),
            "a send in RESET",
        );
        assert!(
            refused.error.to_string().contains("in Reset"),
            "{}",
            refused.error
        );
        assert_eq!(refused.request.wr_id(), 5);
        let buf = refused.request.into_local().unwrap().into_inner();
        assert_eq!(buf.buffer(), &pattern(64, 1)[..]);
        // A range past the end is refused with the memory back.
        let err = Local::slice(buf, 10..65).expect_err("past the end");
        assert_eq!((err.start, err.end, err.len), (10, 65, 64));
        let refused = owned
            .post_recv(RecvRequest::new(6, Local::whole(err.mem)))
            .expect_err("a receive in RESET");
        drop(refused);
        assert_eq!(owned.outstanding(), (0, 0));
        // A QP out of RESET is handed back.
        let qp = owned.into_inner().unwrap();
        qp.modify(
            &QpAttr::new()
                .state(uverbs::qp::QpState::Init)
                .pkey_index(0)
                .port(PORT)
                .access_flags(AccessFlags::LOCAL_WRITE),
        )
        .unwrap();
        let back = OwnedQp::<BufferMr<Vec<u8>>>::new(qp).expect_err("INIT");
        assert!(back.error.to_string().contains("RESET"), "{}", back.error);
        drop((back.qp, cq, pd));
    });
}

/// Two owned QPs share one CQ (issue 18, defect 6): whichever reads the CQ
/// first, each completion reaches its own QP's `poll` (the other's are held
/// for it, not lost), and a plain poll of the shared CQ gets none of them.
#[test]
fn a_shared_cq_routes_each_completion_to_its_owner() {
    on_each_data_path_device(
        "a_shared_cq_routes_each_completion_to_its_owner",
        |name, ctx| {
            let pd = alloc_pd(ctx);
            let shared = ctx.create_cq(64, None).unwrap();
            let qp_on = |cq: &uverbs::CompletionQueue| {
                let qp = pd.create_qp(&QpInit::new(QpType::Rc, cq, cq)).unwrap();
                let owned: Owned = OwnedQp::new(qp).unwrap_or_else(|e| panic!("{name}: {e}"));
                owned
            };
            let (a1, a2) = (qp_on(&shared), qp_on(&shared));
            let (b1, b2) = (
                qp_on(&ctx.create_cq(32, None).unwrap()),
                qp_on(&ctx.create_cq(32, None).unwrap()),
            );
            let links = (
                connect_qps(ctx, name, &a1, &b1, QP_ACCESS_ATOMIC),
                connect_qps(ctx, name, &a2, &b2, QP_ACCESS_ATOMIC),
            );
            const N: u64 = 3;
            for i in 0..N {
                for b in [&b1, &b2] {
                    let rx = reg(&pd, vec![0; 64], AccessFlags::LOCAL_WRITE);
                    b.post_recv(RecvRequest::new(i, Local::whole(rx))).unwrap();
                }
            }
            for i in 0..N {
                for (a, seed) in [(&a1, 0x10), (&a2, 0x20)] {
                    let tx = reg(&pd, pattern(64, seed + i as u8), AccessFlags::LOCAL_WRITE);
                    a.post_send(SendRequest::send(seed as u64 + i, Local::whole(tx)))
                        .unwrap_or_else(|e| panic!("{name}: post_send: {e}"));
                }
            }
            // a1 reads the shared CQ first, and finds a2's completions there too.
            let back1 = wait_back(&a1, N as usize, "a1's SENDs on the shared CQ");
            let ids1: Vec<u64> = back1.iter().map(|c| c.wr_id).collect();
            assert_eq!(ids1, [0x10, 0x11, 0x12], "{name}: a1 gets its own");
            // Give a2's completions time to land, then poll the CQ plainly.
            std::thread::sleep(Duration::from_millis(200));
            let mut wc = [uverbs::wr::WorkCompletion::default(); 16];
            let plain = shared.poll(&mut wc).unwrap();
            assert_eq!(
                plain,
                0,
                "{name}: a plain poll took an owned QP's completion: {:?}",
                &wc[..plain]
            );
            let back2 = wait_back(&a2, N as usize, "a2's SENDs, held for it");
            let ids2: Vec<u64> = back2.iter().map(|c| c.wr_id).collect();
            assert_eq!(ids2, [0x20, 0x21, 0x22], "{name}: a2 gets its own");
            assert!(
                back1
                    .iter()
                    .chain(&back2)
                    .all(|c| c.status() == Some(WcStatus::Success)),
                "{name}: {back1:?} {back2:?}"
            );
            for (b, seed) in [(&b1, 0x10u8), (&b2, 0x20)] {
                let got = wait_back(b, N as usize, "RECVs");
                for (i, c) in got.into_iter().enumerate() {
                    let rx = c.into_memory().unwrap();
                    assert_eq!(
                        rx.buffer(),
                        &pattern(64, seed + i as u8)[..],
                        "{name}: message {i}"
                    );
                }
            }
            drop((a1, a2, b1, b2, shared, links, pd));
        },
    );
}

/// A peer's RDMA WRITE into a remotely writable region is seen by a poller
/// waiting on an atomic flag word (issue 18, defect 1: a plain `&[u8]` loop
/// over such memory never saw the write in a release build): the payload is
/// written first, then the flag, and once the flag is seen the payload is
/// there, read by copying.
#[test]
fn a_poller_sees_a_peers_write_through_an_atomic_flag() {
    on_each_data_path_device(
        "a_poller_sees_a_peers_write_through_an_atomic_flag",
        |name, ctx| {
            let pd = alloc_pd(ctx);
            let (a, b, cm): (Owned, Owned, _) = owned_pair(ctx, &pd, name);
            let mut target = reg_target(&pd, vec![0; 4096], RW);
            let (base, rkey) = (target.addr(), target.rkey());
            // The flag: the first 8-aligned word at or after offset 4000.
            let flag_at = (0..8usize)
                .map(|d| 4000 + d)
                .find(|&o| (base as usize + o) % 8 == 0)
                .unwrap();
            let payload = Local::slice(
                reg(&pd, pattern(1024, 0x5c), AccessFlags::LOCAL_WRITE),
                0..1024,
            )
            .unwrap();
            let mut flag_src = reg(&pd, vec![0; 8], AccessFlags::LOCAL_WRITE);
            flag_src
                .buffer_mut()
                .copy_from_slice(&0xfeed_f00du64.to_ne_bytes());
            let at = |off: usize| Remote {
                addr: base + off as u64,
                rkey,
            };
            let poller = std::thread::spawn(move || {
                let deadline = Instant::now() + WAIT;
                let seen = {
                    let flag = target.atomic_u64(flag_at).expect("aligned, inside");
                    loop {
                        let v = flag.load(Ordering::Acquire);
                        if v != 0 || Instant::now() >= deadline {
                            break v;
                        }
                        std::hint::spin_loop();
                    }
                };
                (seen, read_out(&mut target, 0, 1024), target)
            });
            a.post_send(SendRequest::write(1, payload, at(0))).unwrap();
            a.post_send(SendRequest::write(2, Local::whole(flag_src), at(flag_at)))
                .unwrap();
            let back = wait_back(&a, 2, "payload WRITE + flag WRITE");
            assert!(
                back.iter().all(|c| c.status() == Some(WcStatus::Success)),
                "{name}: {back:?}"
            );
            let (seen, bytes, target) = poller.join().expect("the poller");
            assert_eq!(
                seen, 0xfeed_f00d,
                "{name}: the poller saw the flag within {WAIT:?}"
            );
            assert_eq!(
                bytes,
                pattern(1024, 0x5c),
                "{name}: the payload, before the flag"
            );
            drop((a, b, target, pd, cm));
        },
    );
}

/// A dropped QP's completions are not kept on a shared CQ (issue 38,
/// defect 2): X's receives are flushed (X moved to ERR) and X is dropped
/// before anyone polls them; Y, another owned QP on the same CQ, then
/// polls, and a plain poll of the CQ finds nothing either. Before the fix
/// X's flush completions stayed, read by Y's poll and held for a plain poll
/// nobody makes (which the plain poll below would have returned).
#[test]
fn a_dropped_qps_completions_are_not_kept_on_a_shared_cq() {
    on_each_data_path_device_counted(
        "a_dropped_qps_completions_are_not_kept_on_a_shared_cq",
        |name, ctx, counts| {
            let pd = alloc_pd(ctx);
            let cq = ctx.create_cq(32, None).unwrap();
            let owned = |what| -> Owned {
                let qp = qp_on(&pd, QpType::Rc, &cq, name);
                let qp = OwnedQp::new(qp).unwrap_or_else(|e| panic!("{name}: {what}: {e}"));
                qp.modify(&to_init().access_flags(AccessFlags::LOCAL_WRITE))
                    .unwrap_or_else(|e| panic!("{name}: {what}: RESET->INIT: {e}"));
                qp
            };
            let (x, y) = (owned("X"), owned("Y"));
            for i in 0..4u8 {
                x.post_recv(RecvRequest::new(
                    u64::from(i),
                    Local::whole(reg(&pd, vec![i; 64], AccessFlags::LOCAL_WRITE)),
                ))
                .unwrap_or_else(|e| panic!("{name}: post_recv: {}", e.error));
            }
            x.modify(&QpAttr::new().state(uverbs::qp::QpState::Err))
                .unwrap_or_else(|e| panic!("{name}: X to ERR: {e}"));
            // The flush completions are written (siw flushes in the modify,
            // rxe in its responder task, soon after).
            std::thread::sleep(Duration::from_millis(200));
            drop(x);
            let mut back = Vec::new();
            assert_eq!(y.poll(&mut back).unwrap(), 0, "{name}: Y has none");
            let mut wc = [uverbs::wr::WorkCompletion::default(); 16];
            let n = cq.poll(&mut wc).unwrap();
            assert_eq!(
                n,
                0,
                "{name}: the dropped QP's completions are still on the CQ: {:?}",
                &wc[..n]
            );
            counts.assert_extra_cq_qp(1, 1, "Y left");
            loud(&format!(
                "{name}: a QP dropped with 4 flushed receives left nothing on the CQ it shared"
            ));
            drop((y, cq, pd));
        },
    );
}
