//! uverbs' mlx5 provider against the emulated mlx5 kernel driver (no
//! archives needed): the context and a PD come up where a provider without
//! mlx5's driver data is refused, as Linux 6.12's mlx5_ib refuses it.

use std::sync::Arc;

// build.rs wraps the system calls for every test binary of this package:
// the wrappers must exist here too (uninstalled, they only pass through).
#[cfg(oracle_linked)]
#[allow(dead_code)]
mod shim;

use uverbs::device::{DriverId, OpenOptions};
use uverbs::error::Errno;
use uverbs::Context;
use uverbs_oracle::file::EmulatedFile;
use uverbs_oracle::fixtures::{connect_steps, infiniband_context, ud_steps, QKEY};
use uverbs_uapi::*;

/// Connects two RC QPs of one context to each other (RTS, with `access`
/// for the remote side).
fn connect(a: &uverbs::QueuePair, b: &uverbs::QueuePair, access: uverbs::AccessFlags) {
    for (qp, peer) in [(a, b.qp_num()), (b, a.qp_num())] {
        for step in connect_steps(peer, access, true) {
            qp.modify(&step).unwrap();
        }
    }
}

#[test]
fn uverbs_opens_the_emulated_mlx5_and_makes_a_pd() {
    let file = Arc::new(EmulatedFile::default());
    let ctx = Context::with_transport(
        "mlx5_0",
        Some(DriverId::MLX5),
        Box::new(file.clone()),
        &OpenOptions::new(),
    )
    .expect("GET_CONTEXT with mlx5's driver data");
    let pd = ctx
        .alloc_pd()
        .expect("ALLOC_PD with room for the PD number");
    {
        let k = file.kernel();
        assert_eq!(k.pds.len(), 1);
        let req = k.context.expect("a context");
        assert_eq!((req.total_num_bfregs, req.num_low_latency_bfregs), (16, 4));
        assert!(k.log.iter().all(|c| c.errno == 0), "{:?}", k.log);
    }
    // A CQ: 32 CQEs of 64 bytes in memory of uverbs' own, named in
    // mlx5_ib_create_cq with the context's non-cached UAR page.
    let cq = ctx
        .create_cq(16, None)
        .expect("CREATE_CQ with mlx5's driver data");
    assert_eq!(cq.cqe(), 31);
    {
        let k = file.kernel();
        let kcq = k.cqs.values().next().expect("the CQ");
        assert_eq!((kcq.entries, kcq.req.cqe_size), (32, 64));
        assert!(k
            .dyn_uars
            .values()
            .any(|u| u32::from(kcq.req.uar_page_index) == u.page_id));
    }
    drop(cq);
    assert!(file.kernel().cqs.is_empty());
    pd.dealloc().expect("DEALLOC_PD");
    assert!(file.kernel().pds.is_empty());
}

/// What uverbs sent before it had an mlx5 provider: no driver data. The
/// emulated mlx5_ib refuses the context (EINVAL) as the real one does.
#[test]
fn a_context_without_mlx5_driver_data_is_refused() {
    let file = Arc::new(EmulatedFile::default());
    let err = Context::with_transport("mlx5_0", None, Box::new(file.clone()), &OpenOptions::new())
        .unwrap_err();
    assert_eq!(err.errno(), Some(Errno::INVAL), "{err}");
    let k = file.kernel();
    assert_eq!(k.log.len(), 1);
    assert_eq!(k.log[0].write_cmd, Some(IB_USER_VERBS_CMD_GET_CONTEXT));
    assert!(k.log[0].uhw_in.is_empty());
}

/// uverbs' own WQEs, executed by the device model: two RC QPs of one
/// context connected to each other, a SEND with immediate into a posted
/// receive and an RDMA WRITE, polled through uverbs' CQ.
#[test]
fn uverbs_traffic_through_the_device_model() {
    use uverbs::command::QpType;

    use uverbs::wr::{
        Payload, RecvWr, Remote, SendOp, SendWr, Sge, WcOpcode, WcStatus, WorkCompletion,
    };
    use uverbs::{AccessFlags, QpInit};
    let (file, ctx) = infiniband_context();
    let pd = ctx.alloc_pd().unwrap();
    let mut mem = memmap2::MmapMut::map_anon(1 << 14).unwrap();
    let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ;
    // SAFETY: `mem` outlives the MR (dropped at the end of the test, after it).
    let mr = unsafe { pd.reg_mr(mem.as_mut_ptr(), 1 << 14, access) }.unwrap();
    let cq = ctx.create_cq(16, None).unwrap();
    let init = QpInit::new(QpType::Rc, &cq, &cq);
    let (a, b) = (pd.create_qp(&init).unwrap(), pd.create_qp(&init).unwrap());
    connect(&a, &b, access);
    let base = mem.as_ptr() as u64;
    mem[..64].copy_from_slice(&[0x5a; 64]);
    let (lkey, rkey) = (mr.lkey(), mr.rkey());
    let recv_sge = [Sge {
        addr: base + 4096,
        length: 64,
        lkey,
    }];
    let send_sge = [Sge {
        addr: base,
        length: 64,
        lkey,
    }];
    // SAFETY: buffers of the registered `mem`, untouched until polled.
    unsafe {
        b.post_recv(&[RecvWr::new(7, &recv_sge)]).unwrap();
        a.post_send(&[
            SendWr::new(
                1,
                SendOp::Send { imm: Some(0x1234) },
                Payload::Sges(&send_sge),
            ),
            SendWr::new(
                2,
                SendOp::RdmaWrite {
                    remote: Remote {
                        addr: base + 8192,
                        rkey,
                    },
                    imm: None,
                },
                Payload::Sges(&send_sge),
            ),
        ])
        .unwrap();
    }
    // SAFETY: every object and buffer of the emulated kernel is live.
    let executed = unsafe { file.kernel().run_device() };
    assert!(executed >= 2, "{executed} WQEs executed");
    let mut wcs = [WorkCompletion::default(); 8];
    let n = cq.poll(&mut wcs).unwrap();
    let mut seen: Vec<(u64, Option<WcOpcode>, WcStatus, u32)> = wcs[..n]
        .iter()
        .map(|w| (w.wr_id(), w.opcode(), w.status(), w.byte_len()))
        .collect();
    seen.sort_by_key(|s| s.0);
    assert_eq!(
        seen,
        vec![
            (1, Some(WcOpcode::Send), WcStatus::Success, 0),
            (2, Some(WcOpcode::RdmaWrite), WcStatus::Success, 0),
            (7, Some(WcOpcode::Recv), WcStatus::Success, 64),
        ],
        "{:?}",
        &wcs[..n]
    );
    let recv = wcs[..n].iter().find(|w| w.wr_id() == 7).unwrap();
    assert_eq!(recv.imm_data(), Some(0x1234));
    assert_eq!(&mem[4096..4160], &[0x5a; 64]);
    assert_eq!(&mem[8192..8256], &[0x5a; 64]);
    drop((a, b, cq, mr));
}

/// An [`uverbs::OwnedQp`] on mlx5: the buffers go to the device with the
/// requests and come back with their completions, as on rxe and siw; the
/// ids the owned QP tags its requests with travel through mlx5's own id
/// tables (a CQE carries none).
#[test]
fn an_owned_qp_on_mlx5_gets_its_buffers_back() {
    use uverbs::command::QpType;

    use uverbs::post::{Local, RecvRequest, SendRequest};
    use uverbs::wr::WcStatus;
    use uverbs::{AccessFlags, BufferMr, OwnedQp, QpInit};
    type Mem = BufferMr<memmap2::MmapMut>;
    let (file, ctx) = infiniband_context();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(16, None).unwrap();
    let init = QpInit::new(QpType::Rc, &cq, &cq);
    let owned = || -> OwnedQp<Mem> { OwnedQp::new(pd.create_qp(&init).unwrap()).unwrap() };
    let (a, b) = (owned(), owned());
    let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;
    for (qp, peer) in [(&a, b.qp_num()), (&b, a.qp_num())] {
        for step in connect_steps(peer, access, true) {
            qp.modify(&step).unwrap();
        }
    }
    let buffer = || -> Mem {
        pd.reg_buffer(
            memmap2::MmapMut::map_anon(4096).unwrap(),
            AccessFlags::LOCAL_WRITE,
        )
        .unwrap()
    };
    for id in 0..3 {
        b.post_recv(RecvRequest::new(100 + id, Local::whole(buffer())))
            .map_err(|r| r.error)
            .unwrap();
    }
    for id in 0..3u64 {
        let mut out = buffer();
        out.buffer_mut()[..8].copy_from_slice(&id.to_le_bytes());
        a.post_send(SendRequest::send(id, Local::slice(out, 0..8).unwrap()))
            .map_err(|r| r.error().to_string())
            .unwrap();
    }
    // SAFETY: every object and buffer of the emulated kernel is live.
    assert!(unsafe { file.kernel().run_device() } >= 3);
    let mut done = Vec::new();
    a.poll(&mut done).unwrap();
    b.poll(&mut done).unwrap();
    let mut sends = 0;
    let mut recvs = Vec::new();
    for c in done {
        assert_eq!(c.status(), Some(WcStatus::Success), "request {}", c.wr_id);
        let (is_recv, wr_id) = (c.is_recv, c.wr_id);
        let mem = c.into_memory().expect("the buffer comes back");
        if is_recv {
            recvs.push((
                wr_id,
                u64::from_le_bytes(mem.buffer()[..8].try_into().unwrap()),
            ));
        } else {
            sends += 1;
        }
    }
    recvs.sort();
    assert_eq!(sends, 3);
    assert_eq!(recvs, vec![(100, 0), (101, 1), (102, 2)]);
    assert_eq!((a.outstanding(), b.outstanding()), ((0, 0), (0, 0)));
}

/// UD on mlx5: an address handle of uverbs' own (InfiniBand: the address
/// vector alone, no kernel object), a SEND with immediate from one UD QP
/// to another through it, the receive's source QP and bytes (after the
/// 40-byte GRH area) checked.
#[test]
fn a_ud_send_through_an_address_handle() {
    use uverbs::command::QpType;
    use uverbs::qp::AhAttr;
    use uverbs::wr::{
        Payload, RecvWr, SendOp, SendWr, Sge, UdDest, WcOpcode, WcStatus, WorkCompletion,
    };
    use uverbs::{AccessFlags, QpInit};
    let (file, ctx) = infiniband_context();
    let pd = ctx.alloc_pd().unwrap();
    let mut mem = memmap2::MmapMut::map_anon(1 << 14).unwrap();
    // SAFETY: `mem` outlives the MR.
    let mr = unsafe { pd.reg_mr(mem.as_mut_ptr(), 1 << 14, AccessFlags::LOCAL_WRITE) }.unwrap();
    let cq = ctx.create_cq(16, None).unwrap();
    let init = QpInit::new(QpType::Ud, &cq, &cq);
    let (a, b) = (pd.create_qp(&init).unwrap(), pd.create_qp(&init).unwrap());
    for qp in [&a, &b] {
        for step in ud_steps() {
            qp.modify(&step).unwrap();
        }
    }
    let commands = file.kernel().log.len();
    let ah = pd.create_ah(&AhAttr::lid(1, 1)).unwrap();
    // On InfiniBand the AH is the address vector alone: the port query,
    // no CREATE_AH.
    assert_eq!(
        file.kernel().log.len(),
        commands + 1,
        "the port query alone"
    );
    assert_eq!(ah.handle(), 0);
    let base = mem.as_ptr() as u64;
    mem[..32].copy_from_slice(&[0xa7; 32]);
    let lkey = mr.lkey();
    let recv = [Sge {
        addr: base + 4096,
        length: 40 + 64,
        lkey,
    }];
    let send = [Sge {
        addr: base,
        length: 32,
        lkey,
    }];
    // SAFETY: buffers of the registered `mem`, untouched until polled.
    unsafe {
        b.post_recv(&[RecvWr::new(9, &recv)]).unwrap();
        let mut wr = SendWr::new(3, SendOp::Send { imm: Some(0x42) }, Payload::Sges(&send));
        wr.ud = Some(UdDest::new(&ah, b.qp_num(), QKEY));
        a.post_send(&[wr]).unwrap();
    }
    // SAFETY: every object and buffer of the emulated kernel is live.
    assert!(unsafe { file.kernel().run_device() } >= 1);
    let mut wcs = [WorkCompletion::default(); 4];
    let n = cq.poll(&mut wcs).unwrap();
    let mut seen: Vec<_> = wcs[..n]
        .iter()
        .map(|w| (w.wr_id(), w.status(), w.opcode(), w.src_qp()))
        .collect();
    seen.sort_by_key(|s| s.0);
    assert_eq!(
        seen,
        vec![
            (3, WcStatus::Success, Some(WcOpcode::Send), 0),
            (9, WcStatus::Success, Some(WcOpcode::Recv), a.qp_num()),
        ],
        "{:?}",
        &wcs[..n]
    );
    let r = wcs[..n].iter().find(|w| w.wr_id() == 9).unwrap();
    assert_eq!((r.byte_len(), r.imm_data()), (40 + 32, Some(0x42)));
    assert_eq!(&mem[4096 + 40..4096 + 72], &[0xa7; 32]);
    drop((a, b, ah, cq, mr));
}

/// Rereg under traffic on mlx5: a region written by RDMA WRITEs through
/// the device model loses REMOTE_WRITE in place (same keys: the next
/// WRITE fails with a remote access error), gets it back, then moves to
/// another range (new keys: the old rkey fails, the new one lands in the
/// new range). Each phase on a fresh connected pair (an error moves the
/// requester to ERR).
#[test]
fn rereg_under_traffic() {
    use uverbs::command::QpType;
    use uverbs::mr::ReregFlags;
    use uverbs::wr::{Payload, Remote, SendOp, SendWr, Sge, WcStatus, WorkCompletion};
    use uverbs::{AccessFlags, CompletionQueue, ProtectionDomain, QpInit, QueuePair};
    let (file, ctx) = infiniband_context();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(64, None).unwrap();
    let remote = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;
    let mut src = memmap2::MmapMut::map_anon(4096).unwrap();
    let mut a_range = memmap2::MmapMut::map_anon(4096).unwrap();
    let mut b_range = memmap2::MmapMut::map_anon(4096).unwrap();
    src[..64].copy_from_slice(&[0x3c; 64]);
    // SAFETY: the mappings outlive the MRs (dropped at the end, after them).
    let src_mr = unsafe { pd.reg_mr(src.as_mut_ptr(), 4096, AccessFlags::LOCAL_WRITE) }.unwrap();
    // SAFETY: as above.
    let mut target = unsafe { pd.reg_mr(a_range.as_mut_ptr(), 4096, remote) }.unwrap();
    let pair = |pd: &ProtectionDomain, cq: &CompletionQueue| -> (QueuePair, QueuePair) {
        let init = QpInit::new(QpType::Rc, cq, cq);
        let (a, b) = (pd.create_qp(&init).unwrap(), pd.create_qp(&init).unwrap());
        for (qp, peer) in [(&a, b.qp_num()), (&b, a.qp_num())] {
            for step in connect_steps(peer, remote, true) {
                qp.modify(&step).unwrap();
            }
        }
        (a, b)
    };
    let sge = [Sge {
        addr: src.as_ptr() as u64,
        length: 64,
        lkey: src_mr.lkey(),
    }];
    // One WRITE of the 64 bytes to `addr` with `rkey`: its status.
    let write = |qp: &QueuePair, addr: u64, rkey: u32| -> WcStatus {
        let wr = SendWr::new(
            1,
            SendOp::RdmaWrite {
                remote: Remote { addr, rkey },
                imm: None,
            },
            Payload::Sges(&sge),
        );
        // SAFETY: the source is registered and untouched until polled.
        unsafe { qp.post_send(&[wr]) }.unwrap();
        // SAFETY: every object and buffer of the emulated kernel is live.
        assert_eq!(unsafe { file.kernel().run_device() }, 1);
        let mut wcs = [WorkCompletion::default(); 2];
        assert_eq!(cq.poll(&mut wcs).unwrap(), 1);
        wcs[0].status()
    };
    let (a_addr, b_addr) = (a_range.as_ptr() as u64, b_range.as_ptr() as u64);

    let (a, _b) = pair(&pd, &cq);
    let r1 = target.rkey();
    assert_eq!(write(&a, a_addr, r1), WcStatus::Success);
    assert_eq!(&a_range[..64], &[0x3c; 64]);

    // Access changed in place: the keys stay, remote writes are refused.
    target.set_access(AccessFlags::LOCAL_WRITE).unwrap();
    assert_eq!(target.rkey(), r1, "an access change keeps the keys");
    assert_eq!(write(&a, a_addr, r1), WcStatus::RemAccessErr);

    let (a, _b) = pair(&pd, &cq);
    target.set_access(remote).unwrap();
    a_range[..64].fill(0);
    assert_eq!(write(&a, a_addr, r1), WcStatus::Success);
    assert_eq!(&a_range[..64], &[0x3c; 64]);

    // A new translation: new keys, the old rkey refused, the new one
    // lands in the new range.
    // SAFETY: `b_range` stays mapped while registered.
    unsafe {
        target.rereg(
            ReregFlags::TRANSLATION,
            None,
            b_range.as_mut_ptr(),
            4096,
            // Access unchanged: no CHANGE_ACCESS, so none may be given.
            AccessFlags::empty(),
        )
    }
    .unwrap();
    let r2 = target.rkey();
    assert_ne!(r2, r1, "a new translation gets new keys");
    assert_eq!(write(&a, b_addr, r1), WcStatus::RemAccessErr);
    let (a, _b) = pair(&pd, &cq);
    assert_eq!(write(&a, b_addr, r2), WcStatus::Success);
    assert_eq!(&b_range[..64], &[0x3c; 64]);
    drop((a, _b, target, src_mr));
}

/// Arming on mlx5 (`req_notify`: the arm word in the doorbell record and
/// the UAR's CQ doorbell, no system call) through the device model: an
/// armed CQ raises one event on its completion channel for its next
/// completion; until it is armed again (with the next sequence number,
/// as counted from the events read), completions raise none.
#[test]
fn an_armed_cq_raises_one_event_per_arm() {
    use std::time::Duration;
    use uverbs::command::QpType;
    use uverbs::wr::{Payload, SendOp, SendWr, Sge, WorkCompletion};
    use uverbs::{AccessFlags, QpInit};
    let (file, ctx) = infiniband_context();
    let channel = ctx.create_comp_channel().expect("a completion channel");
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(16, Some(&channel)).unwrap();
    let init = QpInit::new(QpType::Rc, &cq, &cq);
    let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;
    let (a, b) = (pd.create_qp(&init).unwrap(), pd.create_qp(&init).unwrap());
    connect(&a, &b, access);
    let mut mem = memmap2::MmapMut::map_anon(4096).unwrap();
    // SAFETY: `mem` outlives the MR.
    let mr = unsafe { pd.reg_mr(mem.as_mut_ptr(), 4096, access) }.unwrap();
    let sge = [Sge {
        addr: mem.as_ptr() as u64,
        length: 8,
        lkey: mr.lkey(),
    }];
    let write = |id: u64| {
        let op = SendOp::RdmaWrite {
            remote: uverbs::wr::Remote {
                addr: mem.as_ptr() as u64 + 2048,
                rkey: mr.rkey(),
            },
            imm: None,
        };
        // SAFETY: registered memory, untouched until polled.
        unsafe { a.post_send(&[SendWr::new(id, op, Payload::Sges(&sge))]) }.unwrap();
        // SAFETY: every object and buffer of the emulated kernel is live.
        assert_eq!(unsafe { file.kernel().run_device() }, 1);
        let mut wcs = [WorkCompletion::default(); 2];
        assert_eq!(cq.poll(&mut wcs).unwrap(), 1);
        assert_eq!(wcs[0].wr_id(), id);
    };
    let no_wait = Duration::from_millis(0);
    // Not armed: no event.
    write(1);
    assert_eq!(channel.wait_event(no_wait).unwrap(), None);
    // Armed: one event for the next completion, and only one.
    cq.req_notify(false).unwrap();
    write(2);
    assert_eq!(channel.wait_event(no_wait).unwrap(), Some(cq.event_id()));
    cq.ack_events(1).unwrap();
    write(3);
    assert_eq!(channel.wait_event(no_wait).unwrap(), None, "fired once");
    // Armed again (sequence number 1 now): another event.
    cq.req_notify(false).unwrap();
    write(4);
    assert_eq!(channel.wait_event(no_wait).unwrap(), Some(cq.event_id()));
    cq.ack_events(1).unwrap();
    assert_eq!(cq.events_received(), 2);
    drop((a, b, cq, mr));
}

/// An [`uverbs::tokio::AsyncQp`] on mlx5: its CQ's task arms the CQ
/// (mlx5's doorbells), the device model's CQE raises the channel event,
/// and the WRITE's future resolves with its buffer and completion. (The
/// package's `tokio` feature: `cargo vm test`'s host suite turns it on.)
#[cfg(feature = "tokio")]
#[test]
fn an_async_qp_on_mlx5_resolves_through_the_model() {
    use uverbs::command::QpType;
    use uverbs::post::Local;
    use uverbs::tokio::{AsyncCq, AsyncQp};
    use uverbs::wr::{Remote, WcStatus};
    use uverbs::{AccessFlags, BufferMr, OwnedQp, QpInit};
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let (file, ctx) = infiniband_context();
        let pd = ctx.alloc_pd().unwrap();
        let cq = AsyncCq::new(&ctx, 16).expect("an async CQ: channel, CQ, task");
        let init = QpInit::new(QpType::Rc, cq.cq(), cq.cq());
        let owned = || -> OwnedQp<BufferMr<Vec<u8>>> {
            OwnedQp::new(pd.create_qp(&init).unwrap()).unwrap()
        };
        let (a, b) = (owned(), owned());
        let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;
        for (qp, peer) in [(&a, b.qp_num()), (&b, a.qp_num())] {
            for step in connect_steps(peer, access, true) {
                qp.modify(&step).unwrap();
            }
        }
        let a = AsyncQp::new(a, &[&cq]).map_err(|e| e.error).unwrap();
        let mut target = vec![0u8; 4096];
        // SAFETY: `target` outlives the MR (dropped before it).
        let target_mr = unsafe { pd.reg_mr(target.as_mut_ptr(), 4096, access) }.unwrap();
        let buf = pd
            .reg_buffer(vec![0x6b; 64], AccessFlags::LOCAL_WRITE)
            .unwrap();
        let remote = Remote {
            addr: target.as_ptr() as u64,
            rkey: target_mr.rkey(),
        };
        let done = a
            .write(Local::whole(buf), remote)
            .map_err(|e| e.error().to_string())
            .unwrap();
        // Let the CQ's task arm the CQ, then run the device.
        tokio::task::yield_now().await;
        // SAFETY: every object and buffer of the emulated kernel is live.
        assert_eq!(unsafe { file.kernel().run_device() }, 1);
        let done = tokio::time::timeout(std::time::Duration::from_secs(10), done)
            .await
            .expect("the completion within 10 s")
            .unwrap();
        assert_eq!(done.status(), Some(WcStatus::Success));
        assert!(done.into_memory().is_some(), "the buffer comes back");
        drop(target_mr);
        assert_eq!(&target[..64], &[0x6b; 64]);
        drop((a, b, cq));
    });
}

/// An SRQ on mlx5 through the device model: two RC QPs on one SRQ, each
/// with its own receive CQ, take the SRQ's WQEs in list order; each
/// completion gives back the id of the WQE the device took (its data in
/// that request's buffer), the CQs polled in the other order than the
/// sends, so that WQEs return to the free list out of order while the list
/// wraps (24 requests through 15 WQEs); then the limit (one event, then
/// disarmed), an error completion's id, the WQE of a CQE a destroyed QP
/// left given back at poll, and DESTROY_SRQ refused while the QPs use it.
#[test]
fn an_srq_feeds_two_qps_through_the_device_model() {
    use uverbs::command::QpType;
    use uverbs::qp::SrqInit;
    use uverbs::wr::{Payload, RecvWr, SendOp, SendWr, Sge, WcStatus, WorkCompletion};
    use uverbs::{AccessFlags, QpInit};
    let (file, ctx) = infiniband_context();
    let pd = ctx.alloc_pd().unwrap();
    let mut mem = memmap2::MmapMut::map_anon(1 << 15).unwrap();
    let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ;
    // SAFETY: `mem` outlives the MR (dropped at the end of the test, after it).
    let mr = unsafe { pd.reg_mr(mem.as_mut_ptr(), 1 << 15, access) }.unwrap();
    let lkey = mr.lkey();
    let srq = pd.create_srq(&SrqInit::new(8, 2)).unwrap();
    // libmlx5's answer: the free list's WQEs (16 with the tail; the kernel
    // counts the wait queue too).
    assert_eq!((srq.max_wr(), srq.max_sge()), (15, 3));
    assert_eq!(srq.query().unwrap().max_wr, 31);
    let (send_cq, cq1, cq2) = (
        ctx.create_cq(32, None).unwrap(),
        ctx.create_cq(16, None).unwrap(),
        ctx.create_cq(16, None).unwrap(),
    );
    let sender = QpInit::new(QpType::Rc, &send_cq, &send_cq);
    let (a1, a2) = (
        pd.create_qp(&sender).unwrap(),
        pd.create_qp(&sender).unwrap(),
    );
    let b1 = pd
        .create_qp(&QpInit::new(QpType::Rc, &send_cq, &cq1).srq(&srq))
        .unwrap();
    let b2 = pd
        .create_qp(&QpInit::new(QpType::Rc, &send_cq, &cq2).srq(&srq))
        .unwrap();
    assert_eq!(b1.caps().max_recv_wr, 0, "no RQ of its own");
    {
        let k = file.kernel();
        let on_srq: Vec<_> = k.qps.values().filter(|q| q.srq.is_some()).collect();
        assert_eq!(on_srq.len(), 2);
        assert!(on_srq.iter().all(|q| q.req.rq_wqe_count == 0));
    }
    for (qp, peer) in [(&a1, &b1), (&b1, &a1), (&a2, &b2), (&b2, &a2)] {
        for step in connect_steps(peer.qp_num(), access, true) {
            qp.modify(&step).unwrap();
        }
    }
    let base = mem.as_ptr() as u64;
    let payload = |round: usize, i: usize| -> Vec<u8> {
        (0..40).map(|j| (round * 31 + i * 7 + j) as u8).collect()
    };
    let recv_buf = |j: usize| 8192 + j * 256;
    let mut wcs = [WorkCompletion::default(); 16];
    for round in 0..4usize {
        // Six receives, of one or two SGEs (16 bytes, then the rest).
        let sges: Vec<Vec<Sge>> = (0..6)
            .map(|j| {
                let at = base + recv_buf(j) as u64;
                if j % 2 == 0 {
                    vec![Sge {
                        addr: at,
                        length: 128,
                        lkey,
                    }]
                } else {
                    vec![
                        Sge {
                            addr: at,
                            length: 16,
                            lkey,
                        },
                        Sge {
                            addr: at + 16,
                            length: 112,
                            lkey,
                        },
                    ]
                }
            })
            .collect();
        let wrs: Vec<RecvWr<'_>> = sges
            .iter()
            .enumerate()
            .map(|(j, s)| RecvWr::new((round * 100 + j) as u64, s))
            .collect();
        for i in 0..6 {
            mem[i * 64..i * 64 + 40].copy_from_slice(&payload(round, i));
        }
        let send_sges: Vec<[Sge; 1]> = (0..6)
            .map(|i| {
                [Sge {
                    addr: base + (i * 64) as u64,
                    length: 40,
                    lkey,
                }]
            })
            .collect();
        // SAFETY: buffers of the registered `mem`, untouched until polled.
        unsafe {
            srq.post_recv(&wrs).unwrap();
            for (i, s) in send_sges.iter().enumerate() {
                let qp = if i % 2 == 0 { &a1 } else { &a2 };
                let imm = (i % 2 == 1).then_some(0xab00 + i as u32);
                let mut wr = SendWr::new(i as u64, SendOp::Send { imm }, Payload::Sges(s));
                wr.flags = uverbs::wr::SendFlags::SIGNALED;
                qp.post_send(&[wr]).unwrap();
            }
        }
        // SAFETY: every object and buffer of the emulated kernel is live.
        let executed = unsafe { file.kernel().run_device() };
        assert_eq!(executed, 6, "round {round}");
        // The device runs a1's sends first (the lower handle): they take
        // the SRQ's first three WQEs in list order, a2's the next three.
        for (cq, qp, first, sends) in [(&cq2, &b2, 3, 1), (&cq1, &b1, 0, 0)] {
            let n = cq.poll(&mut wcs).unwrap();
            assert_eq!(n, 3, "round {round}");
            for (k, w) in wcs[..n].iter().enumerate() {
                let j = first + k;
                assert_eq!(w.status(), WcStatus::Success, "{w:?}");
                assert_eq!(w.wr_id(), (round * 100 + j) as u64, "{w:?}");
                assert_eq!(w.qp_num(), qp.qp_num());
                assert_eq!(w.byte_len(), 40);
                let i = sends + 2 * k;
                assert_eq!(
                    &mem[recv_buf(j)..recv_buf(j) + 40],
                    &payload(round, i)[..],
                    "round {round}: WQE of request {j} holds send {i}"
                );
                assert_eq!(w.imm_data(), (i % 2 == 1).then_some(0xab00 + i as u32));
            }
        }
        let n = send_cq.poll(&mut wcs).unwrap();
        assert_eq!(n, 6, "round {round}: the senders' completions");
        assert!(wcs[..n].iter().all(|w| w.status() == WcStatus::Success));
    }

    // The limit: armed at 3; four posted and two taken leave two.
    srq.modify_limit(3).unwrap();
    assert_eq!(srq.query().unwrap().srq_limit, 3);
    assert!(
        srq.modify_limit(32).is_err(),
        "a limit above the SRQ's WQEs"
    );
    let one = [Sge {
        addr: base + 8192,
        length: 128,
        lkey,
    }];
    let small = [Sge {
        addr: base + 8192,
        length: 8,
        lkey,
    }];
    let send = [Sge {
        addr: base,
        length: 40,
        lkey,
    }];
    // SAFETY: as above.
    unsafe {
        srq.post_recv(&[
            RecvWr::new(900, &one),
            RecvWr::new(901, &one),
            RecvWr::new(902, &one),
            RecvWr::new(903, &one),
        ])
        .unwrap();
        for id in [10, 11] {
            let mut wr = SendWr::new(id, SendOp::Send { imm: None }, Payload::Sges(&send));
            wr.flags = uverbs::wr::SendFlags::SIGNALED;
            a1.post_send(&[wr]).unwrap();
        }
    }
    // SAFETY: as above.
    unsafe { file.kernel().run_device() };
    {
        let k = file.kernel();
        let s = k.srqs.values().next().unwrap();
        assert_eq!((s.limit_events, s.limit), (1, 0), "one event, disarmed");
    }
    assert_eq!(srq.query().unwrap().srq_limit, 0);
    assert_eq!(cq1.poll(&mut wcs).unwrap(), 2);
    assert_eq!((wcs[0].wr_id(), wcs[1].wr_id()), (900, 901));
    assert_eq!(send_cq.poll(&mut wcs).unwrap(), 2);

    // Too small a receive: the responder's error completion names it.
    // SAFETY: as above.
    unsafe {
        srq.post_recv(&[RecvWr::new(950, &small)]).unwrap();
    }
    // The two already posted go first: 902 and 903, then 950 too small.
    // SAFETY: as above.
    unsafe {
        for id in [20, 21, 22] {
            let mut wr = SendWr::new(id, SendOp::Send { imm: None }, Payload::Sges(&send));
            wr.flags = uverbs::wr::SendFlags::SIGNALED;
            a2.post_send(&[wr]).unwrap();
        }
        file.kernel().run_device();
    }
    let n = cq2.poll(&mut wcs).unwrap();
    let got: Vec<(u64, WcStatus)> = wcs[..n].iter().map(|w| (w.wr_id(), w.status())).collect();
    assert_eq!(
        got,
        vec![
            (902, WcStatus::Success),
            (903, WcStatus::Success),
            (950, WcStatus::LocLenErr)
        ]
    );

    // A QP destroyed with a completion still queued: the CQE is dropped
    // at poll, its SRQ WQE given back. Two posted, one taken by b1 (b2
    // is in error now): 13 free before the poll, 14 after.
    // SAFETY: as above.
    unsafe {
        srq.post_recv(&[RecvWr::new(960, &one), RecvWr::new(961, &one)])
            .unwrap();
        let mut wr = SendWr::new(70, SendOp::Send { imm: None }, Payload::Sges(&send));
        wr.flags = uverbs::wr::SendFlags::SIGNALED;
        a1.post_send(&[wr]).unwrap();
        file.kernel().run_device();
    }
    drop(b1);
    assert_eq!(cq1.poll(&mut wcs).unwrap(), 0, "the gone QP's CQE dropped");
    let many: Vec<RecvWr<'_>> = (0..14).map(|i| RecvWr::new(1000 + i, &one)).collect();
    // SAFETY: as above.
    unsafe { srq.post_recv(&many) }.expect("the dropped CQE's WQE is free again");

    // DESTROY_SRQ while QPs use it: EBUSY, the SRQ back and usable.
    let srq = srq.destroy().unwrap_err().srq;
    assert_eq!(srq.query().unwrap().max_wr, 31);
    drop((a1, a2, b2));
    srq.destroy().expect("DESTROY_SRQ once no QP uses it");
    assert!(file.kernel().srqs.is_empty());
    drop((send_cq, cq1, cq2, mr));
}

/// `OwnedSrq` over mlx5's SRQ: buffers posted through the owner come back
/// from its poll, holding what the device wrote, with the completion of the
/// QP (plain or an `OwnedQp`) that consumed them; the plain poll of the
/// shared receive CQ and the `OwnedQp`'s poll see none of them.
#[test]
fn an_owned_srq_hands_mlx5_buffers_back_through_the_device_model() {
    use uverbs::command::QpType;
    use uverbs::post::{Local, OwnedSrq, RecvRequest};
    use uverbs::qp::SrqInit;
    use uverbs::wr::{Payload, SendOp, SendWr, Sge, WcStatus, WorkCompletion};
    use uverbs::{AccessFlags, BufferMr, OwnedQp, QpInit};
    let (file, ctx) = infiniband_context();
    let pd = ctx.alloc_pd().unwrap();
    let mut mem = memmap2::MmapMut::map_anon(1 << 12).unwrap();
    let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ;
    // SAFETY: `mem` outlives the MR (dropped at the end of the test, after it).
    let mr = unsafe { pd.reg_mr(mem.as_mut_ptr(), 1 << 12, access) }.unwrap();
    let srq: OwnedSrq<BufferMr<Vec<u8>>> =
        OwnedSrq::new(pd.create_srq(&SrqInit::new(8, 1)).unwrap()).unwrap();
    let (send_cq, rcq) = (
        ctx.create_cq(16, None).unwrap(),
        ctx.create_cq(16, None).unwrap(),
    );
    let sender = QpInit::new(QpType::Rc, &send_cq, &send_cq);
    let (a1, a2) = (
        pd.create_qp(&sender).unwrap(),
        pd.create_qp(&sender).unwrap(),
    );
    let on_srq = QpInit::new(QpType::Rc, &rcq, &rcq).srq(srq.srq());
    let b1 = pd.create_qp(&on_srq).unwrap();
    let b2: OwnedQp<BufferMr<Vec<u8>>> = OwnedQp::new(pd.create_qp(&on_srq).unwrap()).unwrap();
    for step in connect_steps(b1.qp_num(), access, true) {
        a1.modify(&step).unwrap();
    }
    for step in connect_steps(a1.qp_num(), access, true) {
        b1.modify(&step).unwrap();
    }
    for step in connect_steps(b2.qp_num(), access, true) {
        a2.modify(&step).unwrap();
    }
    for step in connect_steps(a2.qp_num(), access, true) {
        b2.modify(&step).unwrap();
    }
    let message = |i: usize| -> Vec<u8> { (0..48).map(|j| (i * 37 + j) as u8).collect() };
    let mut completions = 0;
    for round in 0..3usize {
        for k in 0..4u64 {
            let buf = pd
                .reg_buffer(vec![0u8; 64], AccessFlags::LOCAL_WRITE)
                .unwrap_or_else(|e| panic!("reg_buffer: {}", e.error));
            srq.post_recv(RecvRequest::new(round as u64 * 10 + k, Local::whole(buf)))
                .unwrap_or_else(|e| panic!("post_recv: {}", e.error));
        }
        let sges: Vec<[Sge; 1]> = (0..4)
            .map(|i| {
                mem[i * 64..i * 64 + 48].copy_from_slice(&message(round * 4 + i));
                [Sge {
                    addr: mem.as_ptr() as u64 + (i * 64) as u64,
                    length: 48,
                    lkey: mr.lkey(),
                }]
            })
            .collect();
        for (i, s) in sges.iter().enumerate() {
            let qp = if i % 2 == 0 { &a1 } else { &a2 };
            let mut wr = SendWr::new(i as u64, SendOp::Send { imm: None }, Payload::Sges(s));
            wr.flags = uverbs::wr::SendFlags::SIGNALED;
            // SAFETY: `mem` is registered and untouched until polled.
            unsafe { qp.post_send(&[wr]) }.unwrap();
        }
        // SAFETY: every object and buffer of the emulated kernel is live.
        assert_eq!(unsafe { file.kernel().run_device() }, 4, "round {round}");
        let mut done = Vec::new();
        assert_eq!(srq.poll(&mut done).unwrap(), 4, "round {round}");
        for c in done {
            let wc = *c.completion().unwrap();
            assert_eq!(wc.status(), WcStatus::Success, "{wc:?}");
            assert_eq!(wc.wr_id(), c.wr_id, "the caller's id");
            // a1's sends run first and take the oldest requests (0, 1),
            // a2's the next (2, 3): the k-th request holds send 2k (a1) or
            // 2(k-2)+1 (a2).
            let k = (c.wr_id % 10) as usize;
            let (send, qpn) = if k < 2 {
                (2 * k, b1.qp_num())
            } else {
                (2 * (k - 2) + 1, b2.qp_num())
            };
            assert_eq!(wc.qp_num(), qpn, "{wc:?}");
            let buf = c.into_memory().unwrap();
            assert_eq!(
                &buf.buffer()[..48],
                &message(round * 4 + send)[..],
                "round {round}, request {k}"
            );
            completions += 1;
        }
        let mut wcs = [WorkCompletion::default(); 16];
        assert_eq!(
            rcq.poll(&mut wcs).unwrap(),
            0,
            "the plain poll gets none of the SRQ's"
        );
        let mut none = Vec::new();
        assert_eq!(
            b2.poll(&mut none).unwrap(),
            0,
            "the OwnedQp gets none of the SRQ's"
        );
        assert_eq!(
            send_cq.poll(&mut wcs).unwrap(),
            4,
            "the senders' completions"
        );
    }
    assert_eq!(completions, 12);
    assert_eq!(srq.outstanding(), 0);
    drop((b1, b2, a1, a2));
    assert!(srq.destroy().unwrap().is_empty());
}

/// A batch whose second request is refused publishes nothing, on either
/// queue: the first request's WQE, written into a free slot, is neither
/// executed nor completed, and the next post reuses the slot. Also a
/// batch past the SQ's room: refused at the first request that does not
/// fit, nothing executed.
#[test]
fn a_refused_request_in_a_batch_publishes_nothing() {
    use uverbs::command::QpType;
    use uverbs::wr::{
        Payload, PostError, RecvWr, Remote, SendOp, SendWr, Sge, WcOpcode, WcStatus, WorkCompletion,
    };
    use uverbs::{AccessFlags, Error, QpInit};
    fn refused_at(e: &Error) -> (usize, PostError) {
        match e {
            Error::Post { index, why, .. } => (*index, **why),
            other => panic!("not a refused post: {other}"),
        }
    }
    let (file, ctx) = infiniband_context();
    let pd = ctx.alloc_pd().unwrap();
    let mut mem = memmap2::MmapMut::map_anon(1 << 14).unwrap();
    let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ;
    // SAFETY: `mem` outlives the MR (dropped at the end of the test, after it).
    let mr = unsafe { pd.reg_mr(mem.as_mut_ptr(), 1 << 14, access) }.unwrap();
    let cq = ctx.create_cq(64, None).unwrap();
    let init = QpInit::new(QpType::Rc, &cq, &cq);
    let (a, b) = (pd.create_qp(&init).unwrap(), pd.create_qp(&init).unwrap());
    connect(&a, &b, access);
    let base = mem.as_ptr() as u64;
    let lkey = mr.lkey();
    let sge = |at: u64| Sge {
        addr: base + at,
        length: 64,
        lkey,
    };
    let one = [sge(0)];
    let too_many: Vec<Sge> = (0..=a.caps().max_send_sge)
        .map(|i| sge(64 * u64::from(i)))
        .collect();
    // Every WRITE of the test lands at `to`.
    let to = Remote {
        addr: base + 8192,
        rkey: mr.rkey(),
    };
    fn write(id: u64, remote: Remote, sges: &[Sge]) -> SendWr<'_> {
        SendWr::new(
            id,
            SendOp::RdmaWrite { remote, imm: None },
            Payload::Sges(sges),
        )
    }
    mem[..64].copy_from_slice(&[0x6b; 64]);
    let mut wcs = [WorkCompletion::default(); 64];

    // Sends: the second of two has an SGE too many.
    // SAFETY: buffers of the registered `mem`; refused, nothing queued.
    let err = unsafe { a.post_send(&[write(1, to, &one), write(2, to, &too_many)]) }.unwrap_err();
    assert!(
        matches!(refused_at(&err), (1, PostError::TooManySges { .. })),
        "{err}"
    );
    // SAFETY: every object and buffer of the emulated kernel is live.
    assert_eq!(
        unsafe { file.kernel().run_device() },
        0,
        "nothing published"
    );
    assert_eq!(cq.poll(&mut wcs).unwrap(), 0);
    assert_eq!(
        &mem[8192..8256],
        &[0; 64],
        "the refused batch wrote nothing"
    );

    // Receives: the second of two has an SGE too many.
    let recv_too_many: Vec<Sge> = (0..=b.caps().max_recv_sge)
        .map(|i| sge(4096 + 64 * u64::from(i)))
        .collect();
    let recv_one = [sge(4096)];
    // SAFETY: as above.
    let err = unsafe { b.post_recv(&[RecvWr::new(7, &recv_one), RecvWr::new(8, &recv_too_many)]) }
        .unwrap_err();
    assert!(
        matches!(refused_at(&err), (1, PostError::TooManySges { .. })),
        "{err}"
    );

    // The next posts take the same slots and complete with their own ids.
    // SAFETY: buffers of the registered `mem`, untouched until polled.
    unsafe {
        b.post_recv(&[RecvWr::new(9, &recv_one)]).unwrap();
        a.post_send(&[
            write(3, to, &one),
            SendWr::new(4, SendOp::Send { imm: None }, Payload::Sges(&one)),
        ])
        .unwrap();
    }
    // SAFETY: as above.
    assert!(unsafe { file.kernel().run_device() } >= 2);
    let n = cq.poll(&mut wcs).unwrap();
    let mut seen: Vec<(u64, Option<WcOpcode>, WcStatus)> = wcs[..n]
        .iter()
        .map(|w| (w.wr_id(), w.opcode(), w.status()))
        .collect();
    seen.sort_by_key(|s| s.0);
    assert_eq!(
        seen,
        vec![
            (3, Some(WcOpcode::RdmaWrite), WcStatus::Success),
            (4, Some(WcOpcode::Send), WcStatus::Success),
            (9, Some(WcOpcode::Recv), WcStatus::Success),
        ]
    );
    assert_eq!(&mem[8192..8256], &[0x6b; 64]);
    assert_eq!(&mem[4096..4160], &[0x6b; 64]);

    // Past the room: every slot but one taken, then a batch of two.
    let room = a.caps().max_send_wr as usize;
    let fill: Vec<SendWr<'_>> = (0..room - 1)
        .map(|i| write(100 + i as u64, to, &one))
        .collect();
    // SAFETY: as above.
    unsafe { a.post_send(&fill) }.unwrap();
    // SAFETY: refused, nothing queued.
    let err = unsafe { a.post_send(&[write(200, to, &one), write(201, to, &one)]) }.unwrap_err();
    assert!(
        matches!(refused_at(&err), (1, PostError::QueueFull { .. })),
        "{err}"
    );
    // SAFETY: as above.
    let executed = unsafe { file.kernel().run_device() };
    assert_eq!(executed, room - 1, "only the filling batch");
    let mut got = 0;
    loop {
        let n = cq.poll(&mut wcs).unwrap();
        if n == 0 {
            break;
        }
        assert!(wcs[..n].iter().all(|w| (100..200).contains(&w.wr_id())));
        got += n;
    }
    assert_eq!(got, room - 1);
    drop((a, b, cq, mr));
}
