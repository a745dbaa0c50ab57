//! `CompletionQueue` and `QueuePair` on siw against a fake kernel that
//! answers siw's CQ and QP commands, serves each ring as a memfd it can read
//! and write itself, and records, at each destroy, whether the object's
//! rings were still mapped (/proc/self/maps names each memfd uniquely).
//! Under Miri, which has neither memfds nor /proc, each ring is heap pages
//! instead, read and written directly, and "still mapped" is whether a
//! mapping still holds them.

use std::collections::HashMap;
#[cfg(not(miri))]
use std::os::fd::{AsFd, OwnedFd};
#[cfg(not(miri))]
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use zerocopy::{FromBytes, IntoBytes};

use crate::command::{QpAttr, QpState, QpType};
use crate::cq::CompletionQueue;
use crate::cq_routing::Reader;
use crate::device::OpenOptions;
use crate::error::{Errno, Error, Op};
use crate::fork::{ForkMode, ForkSafety, MadviseAdvisor};
use crate::provider::driver::DriverId;
use crate::qp::QpInit;
use crate::transport::{RawCommand, RecordingTransport, SharedMapping, Transport, TransportKind};
use crate::wr::{
    Payload, PostError, RecvWr, SendOp, SendWr, Sge, WcOpcode, WcStatus, WorkCompletion,
};
use crate::Context;
use uverbs_uapi::{self as sys, SIW_INVAL_UOBJ_KEY, SIW_WQE_VALID};

const CQ_KEY: u64 = 0x1000;
const SQ_KEY: u64 = 0x2000;
const RQ_KEY: u64 = 0x3000;
const NUM_CQE: u32 = 4;
const NUM_SQE: u32 = 4;
const NUM_RQE: u32 = 2;
/// The number CREATE_COMP_CHANNEL answers (the fake's own, no real fd).
#[cfg(not(miri))]
const COMP_CHANNEL_FD: u32 = 1000;

/// What serves one ring: a memfd, or under Miri heap pages.
#[cfg(not(miri))]
type Ring = Arc<OwnedFd>;
#[cfg(miri)]
type Ring = Arc<crate::transport::mapping::HeapPages>;

/// Names memfds uniquely within the process.
#[cfg(not(miri))]
static NEXT_RING: AtomicU32 = AtomicU32::new(0);

#[derive(Debug, Default)]
struct State {
    /// The memfd behind each key, and its name in /proc/self/maps.
    rings: HashMap<u64, (Ring, String)>,
    /// What happened, in order.
    log: Vec<String>,
    /// The CQ key the next CREATE_CQ answers.
    cq_key: Option<u64>,
    /// Whether key SIW_INVAL_UOBJ_KEY is a ring (Linux 6.x: the ring at
    /// page offset 0x90) or no mapping at all (the mmap fails).
    inval_key_is_a_ring: bool,
    /// The next DESTROY_CQ or DESTROY_QP answers EBUSY.
    busy_once: bool,
    /// The next DESTROY_QP panics.
    panic_once: bool,
    /// The state QUERY_QP answers (what the kernel's CM moved the QP to).
    qp_state: u8,
    /// The mask of each MODIFY_QP.
    modify_masks: Vec<u32>,
    /// What the doorbell write answers instead of success.
    doorbell_errno: Option<Errno>,
    /// The read end of the completion channel CREATE_COMP_CHANNEL made,
    /// until adopted.
    #[cfg(not(miri))]
    comp_channel: Option<OwnedFd>,
    /// Its write end: 8 bytes written are one completion event.
    #[cfg(not(miri))]
    comp_events: Option<std::os::unix::net::UnixStream>,
}

#[derive(Debug)]
struct SiwFake {
    /// Opens the context (GET_CONTEXT, QUERY_DEVICE, PDs).
    inner: RecordingTransport,
    state: Mutex<State>,
}

impl SiwFake {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap()
    }

    #[cfg(miri)]
    fn mapped(&self, key: u64) -> bool {
        // The fake's own reference, and one per live mapping.
        self.state()
            .rings
            .get(&key)
            .is_some_and(|(pages, _)| Arc::strong_count(pages) > 1)
    }

    #[cfg(not(miri))]
    fn mapped(&self, key: u64) -> bool {
        let name = match self.state().rings.get(&key) {
            Some((_, name)) => name.clone(),
            None => return false,
        };
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        maps.lines()
            .any(|l| l.ends_with(&format!("{name} (deleted)")))
    }

    fn ring(&self, key: u64) -> Ring {
        self.state().rings[&key].0.clone()
    }

    #[cfg(not(miri))]
    fn read(&self, key: u64, at: u64, buf: &mut [u8]) {
        rustix::io::pread(self.ring(key).as_fd(), buf, at).unwrap();
    }

    #[cfg(not(miri))]
    fn write(&self, key: u64, at: u64, bytes: &[u8]) {
        rustix::io::pwrite(self.ring(key).as_fd(), bytes, at).unwrap();
    }

    /// Reads ring bytes as the kernel would through its own mapping.
    #[cfg(miri)]
    fn read(&self, key: u64, at: u64, buf: &mut [u8]) {
        let pages = self.ring(key);
        let at = usize::try_from(at).unwrap();
        assert!(at + buf.len() <= pages.len());
        // SAFETY: inside the pages (checked above), which `pages` keeps
        // alive; the tests run the library on this thread only, so nothing
        // writes them meanwhile.
        unsafe {
            std::ptr::copy_nonoverlapping(
                pages.as_ptr().as_ptr().add(at),
                buf.as_mut_ptr(),
                buf.len(),
            )
        };
    }

    /// Writes ring bytes as the kernel would through its own mapping.
    #[cfg(miri)]
    fn write(&self, key: u64, at: u64, bytes: &[u8]) {
        let pages = self.ring(key);
        let at = usize::try_from(at).unwrap();
        assert!(at + bytes.len() <= pages.len());
        // SAFETY: as in `read`; the library reaches ring memory only through
        // raw pointers and atomics, never references it keeps.
        unsafe {
            std::ptr::copy_nonoverlapping(
                bytes.as_ptr(),
                pages.as_ptr().as_ptr().add(at),
                bytes.len(),
            )
        };
    }

    fn log(&self) -> Vec<String> {
        self.state().log.clone()
    }
}

fn put<T: IntoBytes + zerocopy::Immutable>(out: &mut [u8], v: &T) -> usize {
    let b = v.as_bytes();
    out[..b.len()].copy_from_slice(b);
    b.len()
}

// SAFETY: writes only inside the given output buffers and returns the UHW
// bytes it wrote; everything else is RecordingTransport's, which upholds the
// contract; mappings are fresh memfds of its own.
unsafe impl Transport for SiwFake {
    fn kind(&self) -> TransportKind {
        // Write commands only: no native methods to answer.
        TransportKind::Write
    }

    unsafe fn execute(&self, cmd: &mut RawCommand<'_>) -> Result<usize, Errno> {
        let mut st = self.state();
        match cmd.code {
            sys::IB_USER_VERBS_CMD_CREATE_CQ => {
                let key = st.cq_key.unwrap_or(CQ_KEY);
                st.log.push("create_cq".into());
                put(
                    cmd.core_out,
                    &sys::ib_uverbs_create_cq_resp {
                        cq_handle: 7,
                        cqe: NUM_CQE,
                    },
                );
                let resp = sys::siw_uresp_create_cq {
                    cq_id: 1,
                    num_cqe: NUM_CQE,
                    cq_key: key,
                };
                Ok(put(cmd.uhw_out, &resp))
            }
            sys::IB_USER_VERBS_CMD_DESTROY_CQ => {
                drop(st);
                let mapped = self.mapped(CQ_KEY);
                let mut st = self.state();
                let busy = std::mem::take(&mut st.busy_once);
                st.log
                    .push(format!("destroy_cq mapped={mapped} busy={busy}"));
                if busy {
                    return Err(Errno::BUSY);
                }
                put(cmd.core_out, &sys::ib_uverbs_destroy_cq_resp::default());
                Ok(0)
            }
            sys::IB_USER_VERBS_CMD_CREATE_QP => {
                let req = sys::ib_uverbs_create_qp::read_from_prefix(cmd.core_in)
                    .map_err(|_| Errno::INVAL)?
                    .0;
                st.log.push("create_qp".into());
                put(
                    cmd.core_out,
                    &sys::ib_uverbs_create_qp_resp {
                        qp_handle: 9,
                        qpn: 0x42,
                        max_send_wr: req.max_send_wr,
                        max_recv_wr: req.max_recv_wr,
                        max_send_sge: req.max_send_sge,
                        max_recv_sge: req.max_recv_sge,
                        max_inline_data: req.max_inline_data,
                        ..Default::default()
                    },
                );
                let resp = sys::siw_uresp_create_qp {
                    qp_id: 0x42,
                    num_sqe: NUM_SQE,
                    num_rqe: NUM_RQE,
                    pad: 0,
                    sq_key: SQ_KEY,
                    rq_key: RQ_KEY,
                };
                Ok(put(cmd.uhw_out, &resp))
            }
            sys::IB_USER_VERBS_CMD_DESTROY_QP => {
                drop(st);
                let (sq, rq) = (self.mapped(SQ_KEY), self.mapped(RQ_KEY));
                let mut st = self.state();
                st.log
                    .push(format!("destroy_qp sq_mapped={sq} rq_mapped={rq}"));
                if std::mem::take(&mut st.panic_once) {
                    drop(st); // not poisoned: the unwind destroys the QP again
                    panic!("the fake's DESTROY_QP panics, as asked");
                }
                if std::mem::take(&mut st.busy_once) {
                    return Err(Errno::BUSY);
                }
                put(cmd.core_out, &sys::ib_uverbs_destroy_qp_resp::default());
                Ok(0)
            }
            sys::IB_USER_VERBS_CMD_MODIFY_QP => {
                let req = sys::ib_uverbs_modify_qp::read_from_prefix(cmd.core_in)
                    .map_err(|_| Errno::INVAL)?
                    .0;
                st.modify_masks.push(req.attr_mask);
                Ok(0)
            }
            sys::IB_USER_VERBS_CMD_QUERY_QP => {
                st.log.push("query_qp".into());
                let resp = sys::ib_uverbs_query_qp_resp {
                    qp_state: st.qp_state,
                    ..Default::default()
                };
                put(cmd.core_out, &resp);
                Ok(0)
            }
            #[cfg(not(miri))]
            sys::IB_USER_VERBS_CMD_CREATE_COMP_CHANNEL => {
                let (read, write) =
                    std::os::unix::net::UnixStream::pair().map_err(|_| Errno::NFILE)?;
                st.comp_channel = Some(read.into());
                st.comp_events = Some(write);
                let resp = sys::ib_uverbs_create_comp_channel_resp {
                    fd: COMP_CHANNEL_FD,
                };
                put(cmd.core_out, &resp);
                Ok(0)
            }
            sys::IB_USER_VERBS_CMD_REQ_NOTIFY_CQ => {
                st.log.push("req_notify_cq".into());
                Ok(0)
            }
            _ => {
                drop(st);
                // SAFETY: forwarded; the fake writes only its buffers.
                unsafe { self.inner.execute(cmd) }
            }
        }
    }

    #[cfg(not(miri))]
    unsafe fn adopt_fd(&self, fd: u32) -> Option<OwnedFd> {
        match fd {
            COMP_CHANNEL_FD => self.state().comp_channel.take(),
            _ => None,
        }
    }

    unsafe fn map_queue(&self, offset: u64, len: usize) -> Result<SharedMapping, Errno> {
        let mut st = self.state();
        st.log.push(format!("map {offset:#x} {len}"));
        if offset == SIW_INVAL_UOBJ_KEY && !st.inval_key_is_a_ring {
            return Err(Errno::INVAL); // no mmap entry there
        }
        serve_ring(&mut st, offset, len)
    }

    unsafe fn write_prepared(&self, frame: &[u8]) -> Result<usize, Errno> {
        let mut st = self.state();
        st.log.push("doorbell".into());
        match st.doorbell_errno {
            Some(errno) => Err(errno),
            None => Ok(frame.len()),
        }
    }
}

/// Maps the ring at `offset` (a memfd of 4 KiB, made at its first map).
#[cfg(not(miri))]
fn serve_ring(st: &mut State, offset: u64, len: usize) -> Result<SharedMapping, Errno> {
    let fd = match st.rings.get(&offset) {
        Some((fd, _)) => fd.clone(),
        None => {
            let name = format!(
                "uverbs-siw-fake-{}-{}",
                std::process::id(),
                NEXT_RING.fetch_add(1, Ordering::Relaxed)
            );
            let fd = rustix::fs::memfd_create(&name, rustix::fs::MemfdFlags::CLOEXEC)?;
            rustix::fs::ftruncate(&fd, 4096)?;
            let fd = Arc::new(fd);
            st.rings
                .insert(offset, (fd.clone(), format!("/memfd:{name}")));
            fd
        }
    };
    // SAFETY: a memfd of our own; no Rust memory aliases it.
    unsafe { SharedMapping::map(fd.as_fd(), 0, len) }
}

/// Under Miri: maps the ring at `offset` (4 KiB of heap pages, made at its
/// first map); a second map sees the same bytes, as with the memfd.
#[cfg(miri)]
fn serve_ring(st: &mut State, offset: u64, len: usize) -> Result<SharedMapping, Errno> {
    let (pages, _) = st.rings.entry(offset).or_insert_with(|| {
        let pages = crate::transport::mapping::HeapPages::new(4096);
        (pages, format!("heap ring {offset:#x}"))
    });
    if len > pages.len() {
        return Err(Errno::INVAL);
    }
    Ok(SharedMapping::over_heap(pages, len))
}

fn siw_ctx() -> (Arc<SiwFake>, Context) {
    let fake = Arc::new(SiwFake {
        inner: RecordingTransport::new(),
        state: Mutex::new(State::default()),
    });
    let ctx = Context::with_transport(
        "siw_fake0",
        Some(DriverId::SIW),
        Box::new(fake.clone()),
        // A private fork-safety instance: the global one asks the kernel
        // over netlink first, which a fake needs not (and Miri cannot open
        // a socket).
        &OpenOptions::new().fork_safety(Arc::new(ForkSafety::new(
            ForkMode::Disabled,
            Box::new(MadviseAdvisor),
        ))),
    )
    .unwrap();
    (fake, ctx)
}

fn rc_init(cq: &CompletionQueue) -> QpInit<'_> {
    let mut init = QpInit::new(QpType::Rc, cq, cq);
    init.max_send_wr = NUM_SQE;
    init.max_recv_wr = NUM_RQE;
    init
}

/// The CQ is mapped at siw's key with `num_cqe × 32 + 8` bytes; a CQE the
/// kernel writes is polled and its slot handed back; arming is a store to
/// the control word and no command; dropping unmaps before DESTROY_CQ.
/// RESET → INIT on port 1, P_Key index 0, no remote access.
fn to_init() -> QpAttr {
    QpAttr::new()
        .state(QpState::Init)
        .pkey_index(0)
        .port(1)
        .access_flags(Default::default())
}

#[test]
fn a_siw_cq_is_mapped_polled_armed_and_unmapped_before_its_destroy() {
    let (fake, ctx) = siw_ctx();
    let cq = ctx.create_cq(3, None).unwrap();
    assert_eq!(cq.cqe(), NUM_CQE);
    assert_eq!(
        fake.log(),
        [
            "create_cq".to_string(),
            format!("map {CQ_KEY:#x} {}", 4 * 32 + 8)
        ]
    );
    let mut wc = [Default::default(); 4];
    assert_eq!(cq.poll(&mut wc).unwrap(), 0);
    let cqe = sys::siw_cqe {
        id: 0xabc,
        flags: SIW_WQE_VALID as u8,
        opcode: sys::SIW_OP_RECEIVE,
        status: sys::SIW_WC_WR_FLUSH_ERR,
        qp_id: 0x42,
        ..Default::default()
    };
    fake.write(CQ_KEY, 0, cqe.as_bytes());
    assert_eq!(cq.poll(&mut wc).unwrap(), 1);
    assert_eq!(
        (wc[0].wr_id(), wc[0].status(), wc[0].qp_num()),
        (0xabc, WcStatus::WrFlushErr, 0x42)
    );
    let mut flags = [0xffu8; 1];
    fake.read(CQ_KEY, 8, &mut flags);
    assert_eq!(flags[0], 0, "the slot is handed back");

    cq.req_notify(false).unwrap();
    let mut ctrl = [0u8; 4];
    fake.read(CQ_KEY, u64::from(NUM_CQE) * 32, &mut ctrl);
    assert_eq!(
        u32::from_ne_bytes(ctrl),
        sys::SIW_NOTIFY_SOLICITED | sys::SIW_NOTIFY_NEXT_COMPLETION
    );
    cq.req_notify(true).unwrap();
    fake.read(CQ_KEY, u64::from(NUM_CQE) * 32, &mut ctrl);
    assert_eq!(u32::from_ne_bytes(ctrl), sys::SIW_NOTIFY_SOLICITED);
    assert!(
        !fake.log().iter().any(|l| l == "req_notify_cq"),
        "no command"
    );

    drop(cq);
    assert_eq!(
        fake.log().last().unwrap(),
        "destroy_cq mapped=false busy=false",
        "siw: unmapped before the destroy"
    );
}

/// `poll_into` hands back exactly the completions `poll` filled in, oldest
/// first, bounded by the buffer: empty when there are none.
#[test]
fn poll_into_returns_the_filled_prefix() {
    let (fake, ctx) = siw_ctx();
    let cq = ctx.create_cq(4, None).unwrap();
    let mut buf = [WorkCompletion::default(); 2];
    assert!(cq.poll_into(&mut buf).unwrap().is_empty());
    for (slot, id) in (0..3).zip(10u64..) {
        let cqe = sys::siw_cqe {
            id,
            flags: SIW_WQE_VALID as u8,
            opcode: sys::SIW_OP_SEND,
            bytes: 64,
            qp_id: 7,
            ..Default::default()
        };
        fake.write(CQ_KEY, slot * 32, cqe.as_bytes());
    }
    let mut seen = Vec::new();
    for wc in cq.poll_into(&mut buf).unwrap() {
        assert!(wc.is_success(), "{wc:?}");
        assert_eq!(
            (wc.opcode(), wc.byte_len(), wc.qp_num()),
            (Some(WcOpcode::Send), 64, 7)
        );
        seen.push(wc.wr_id());
    }
    assert_eq!(seen, [10, 11], "two: the buffer's length");
    let rest = cq.poll_into(&mut buf).unwrap();
    assert_eq!(rest.iter().map(|wc| wc.wr_id()).collect::<Vec<_>>(), [12]);
    assert!(cq.poll_into(&mut buf).unwrap().is_empty());
    assert!(cq.poll_into(&mut []).unwrap().is_empty());
}

/// A poll takes every ready completion its buffer has room for, in order,
/// past the ring's end, and stops at the first slot not VALID; each slot it
/// took is handed back.
#[test]
fn a_poll_takes_the_ready_completions_in_order_over_the_wrap() {
    let (fake, ctx) = siw_ctx();
    let cq = ctx.create_cq(4, None).unwrap();
    let write = |slot: u64, id: u64| {
        let cqe = sys::siw_cqe {
            id,
            flags: SIW_WQE_VALID as u8,
            opcode: sys::SIW_OP_WRITE,
            qp_id: 9,
            ..Default::default()
        };
        fake.write(CQ_KEY, slot * 32, cqe.as_bytes());
    };
    let mut wc = [WorkCompletion::default(); 8];
    let ids = |wc: &[WorkCompletion]| wc.iter().map(|c| c.wr_id()).collect::<Vec<_>>();
    for slot in 0..3 {
        write(slot, 100 + slot);
    }
    assert_eq!(cq.poll(&mut wc).unwrap(), 3);
    assert_eq!(ids(&wc[..3]), [100, 101, 102]);
    // Slot 3, then over the end into slots 0 and 1; slot 2 is free.
    for (slot, id) in [(3, 103), (0, 104), (1, 105)] {
        write(slot, id);
    }
    assert_eq!(
        cq.poll(&mut wc[..2]).unwrap(),
        2,
        "as many as the buffer holds"
    );
    assert_eq!(ids(&wc[..2]), [103, 104]);
    assert_eq!(cq.poll(&mut wc).unwrap(), 1);
    assert_eq!(ids(&wc[..1]), [105]);
    for slot in 0..4 {
        let mut flags = [0xffu8; 1];
        fake.read(CQ_KEY, slot * 32 + 8, &mut flags);
        assert_eq!(flags[0], 0, "slot {slot} handed back");
    }
    assert_eq!(cq.poll(&mut wc).unwrap(), 0);
}

/// A refused destroy (EBUSY) maps the CQ again at its key and position: the
/// CQ comes back working and still armed.
#[test]
fn a_refused_siw_cq_destroy_maps_the_ring_again() {
    let (fake, ctx) = siw_ctx();
    let cq = ctx.create_cq(4, None).unwrap();
    let cqe = |id| sys::siw_cqe {
        id,
        flags: SIW_WQE_VALID as u8,
        ..Default::default()
    };
    fake.write(CQ_KEY, 0, cqe(1).as_bytes());
    let mut wc = [Default::default(); 4];
    assert_eq!(cq.poll(&mut wc).unwrap(), 1);
    cq.req_notify(false).unwrap();
    fake.state().busy_once = true;
    let back = cq.destroy().unwrap_err();
    assert_eq!(back.error.errno(), Some(Errno::BUSY));
    let cq = back.cq;
    let log = fake.log();
    assert_eq!(
        &log[log.len() - 2..],
        [
            "destroy_cq mapped=false busy=true".to_string(),
            format!("map {CQ_KEY:#x} {}", 4 * 32 + 8)
        ]
    );
    let mut ctrl = [0u8; 4];
    fake.read(CQ_KEY, u64::from(NUM_CQE) * 32, &mut ctrl);
    assert_eq!(u32::from_ne_bytes(ctrl), 3, "the arm survived the remap");
    // The next CQE is at slot 1: the position survived too.
    fake.write(CQ_KEY, 32, cqe(2).as_bytes());
    assert_eq!(cq.poll(&mut wc).unwrap(), 1);
    assert_eq!(wc[0].wr_id(), 2);
    cq.destroy().unwrap();
}

/// A CQ answer with SIW_INVAL_UOBJ_KEY maps nothing: the CQ is destroyed
/// again and creation fails with ENOMEM naming create_cq.
#[test]
fn a_siw_cq_without_mapping_is_destroyed_again() {
    let (fake, ctx) = siw_ctx();
    fake.state().cq_key = Some(SIW_INVAL_UOBJ_KEY);
    let err = ctx.create_cq(4, None).unwrap_err();
    assert_eq!((err.op(), err.errno()), (Op::CreateCq, Some(Errno::NOMEM)));
    assert_eq!(
        fake.log(),
        [
            "create_cq",
            "map 0x90000 136",
            "destroy_cq mapped=false busy=false"
        ]
    );
}

/// On Linux 6.x a successful CREATE_CQ's key is always a ring, and the
/// ring at page offset 0x90 has siw's "no mapping" key: it is mapped and
/// used (issue 41: siw0's 72nd QP was refused this way, in libibverbs too).
#[test]
fn a_siw_ring_whose_key_is_0x90000_is_mapped() {
    let (fake, ctx) = siw_ctx();
    fake.state().cq_key = Some(SIW_INVAL_UOBJ_KEY);
    fake.state().inval_key_is_a_ring = true;
    let cq = ctx.create_cq(4, None).unwrap();
    assert_eq!(fake.log(), ["create_cq", "map 0x90000 136"]);
    cq.destroy().unwrap();
}

/// A siw QP: only RC (others refused with nothing sent); SQ mapped before
/// RQ at their keys and sizes; RQEs written with flags exactly VALID and no
/// system call; the doorbell only when the SQE before the batch was taken;
/// siw's refusals typed; rings unmapped before DESTROY_QP.
#[test]
fn a_siw_qp_maps_posts_rings_only_when_idle_and_unmaps_before_destroy() {
    let (fake, ctx) = siw_ctx();
    let cq = ctx.create_cq(4, None).unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let before = fake.log().len();
    for t in [QpType::Uc, QpType::Ud] {
        let err = pd.create_qp(&QpInit::new(t, &cq, &cq)).unwrap_err();
        assert_eq!(
            (err.op(), err.errno()),
            (Op::CreateQp, Some(Errno::OPNOTSUPP))
        );
    }
    assert_eq!(fake.log().len(), before, "nothing sent");

    let qp = pd.create_qp(&rc_init(&cq)).unwrap();
    assert_eq!(
        &fake.log()[before..],
        [
            "create_qp".to_string(),
            format!("map {SQ_KEY:#x} {}", 4 * 120),
            format!("map {RQ_KEY:#x} {}", 2 * 112)
        ]
    );
    let sge = [Sge {
        addr: 0x1000,
        length: 8,
        lkey: 5,
    }];
    let n = fake.log().len();
    // SAFETY: the fake kernel touches no memory.
    unsafe {
        qp.post_recv(&[RecvWr {
            wr_id: 1,
            sges: &sge,
        }])
    }
    .unwrap_err();
    qp.modify(&to_init()).unwrap();
    // SAFETY: as above.
    unsafe {
        qp.post_recv(&[RecvWr {
            wr_id: 0x77,
            sges: &sge,
        }])
    }
    .unwrap();
    assert_eq!(fake.log().len(), n, "no command, no doorbell");
    let mut rqe = [0u8; 112];
    fake.read(RQ_KEY, 0, &mut rqe);
    let rqe = sys::siw_rqe::read_from_bytes(&rqe[..]).unwrap();
    assert_eq!((rqe.id, rqe.flags, rqe.num_sge), (0x77, SIW_WQE_VALID, 1));

    qp.modify(&QpAttr::new().state(QpState::Err)).unwrap();
    let send = |wr_id| SendWr::new(wr_id, SendOp::Send { imm: None }, Payload::Sges(&sge));
    let doorbells = || fake.log().iter().filter(|l| *l == "doorbell").count();
    // SAFETY: as above.
    unsafe { qp.post_send(&[send(1)]) }.unwrap();
    assert_eq!(doorbells(), 1, "an idle kernel is woken");
    // SAFETY: as above.
    unsafe { qp.post_send(&[send(2)]) }.unwrap();
    assert_eq!(doorbells(), 1, "SQE 0 not yet taken: the kernel walks on");
    // The kernel takes both SQEs.
    for slot in 0..2u64 {
        fake.write(SQ_KEY, slot * 120 + 8, &0u16.to_ne_bytes());
    }
    // SAFETY: as above.
    unsafe { qp.post_send(&[send(3)]) }.unwrap();
    assert_eq!(doorbells(), 2, "taken: ring again");

    let imm = SendWr {
        op: SendOp::Send { imm: Some(1) },
        ..send(4)
    };
    // SAFETY: refused before anything is handed to the kernel.
    let err = unsafe { qp.post_send(&[send(4), imm]) }.unwrap_err();
    match &err {
        Error::Post {
            op,
            index,
            why: source,
            ..
        } => {
            assert_eq!((*op, *index), (Op::PostSend, 1));
            assert_eq!(
                **source,
                PostError::NotSupported {
                    driver: "siw",
                    what: "SEND_WITH_IMM"
                }
            );
        }
        other => panic!("{other}"),
    }
    assert_eq!(err.errno(), Some(Errno::INVAL));
    // The batch's first request was written into slot 3, but not
    // published: its flags word is still 0 (which siw_sq_flush would take
    // for an element were it not), and no doorbell.
    let mut flags = [0u8; 2];
    fake.read(SQ_KEY, 3 * 120 + 8, &mut flags);
    assert_eq!(flags, [0, 0], "the refused batch handed the kernel nothing");
    assert_eq!(doorbells(), 2);

    qp.destroy().unwrap();
    assert_eq!(
        fake.log().last().unwrap(),
        "destroy_qp sq_mapped=false rq_mapped=false"
    );
    drop((cq, pd));
}

/// The iWARP CM's answers (INIT and RTR: STATE|ACCESS_FLAGS|PORT; RTS: PORT
/// alone) pass `modify` on a siw QP, which the IB table refused; entering
/// RTS by MODIFY_QP is refused before any command; after the kernel's CM
/// moved the QP to RTS, `refresh_state` (QUERY_QP) learns it and
/// `post_send` accepts. Where the kernel fills no state (6.1: every QP
/// reads RESET), `refresh_state` says so and `established` takes the cm's
/// word for RTS.
/// Only a single receive takes the post's inline path (`try_post_recv`);
/// a batch, a refusal and a full ring take the detailed one, locked or
/// exclusive, with the same outcome: all written, or nothing and the index
/// of the request that failed.
#[test]
fn siw_receive_batches_refusals_and_a_full_ring_take_the_detailed_post() {
    let (fake, ctx) = siw_ctx();
    let cq = ctx.create_cq(4, None).unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let mut qp = pd.create_qp(&rc_init(&cq)).unwrap();
    qp.modify(&to_init()).unwrap();
    let one = [Sge {
        addr: 0x1000,
        length: 8,
        lkey: 5,
    }];
    let two = [one[0], one[0]];
    let wr = |wr_id, sges| RecvWr { wr_id, sges };
    let refused_at = |err: Error| match err {
        Error::Post { op, index, .. } => {
            assert_eq!(op, Op::PostRecv);
            index
        }
        other => panic!("{other}"),
    };
    // SAFETY (throughout): the fake kernel touches no memory.
    let err = unsafe { qp.post_recv(&[wr(1, &one), wr(2, &two)]) }.unwrap_err();
    assert_eq!(refused_at(err), 1, "too many SGEs in the second");
    assert_eq!(posted_id(&fake, true, 0), 0, "nothing written");
    unsafe { qp.post_recv(&[wr(3, &one), wr(4, &one)]) }.unwrap();
    assert_eq!([3, 4], [0, 1].map(|slot| posted_id(&fake, true, slot)));
    let err = unsafe { qp.post_recv(&[wr(5, &one)]) }.unwrap_err();
    assert_eq!(refused_at(err), 0, "the ring is full");
    // The kernel takes both; the exclusive post writes a batch the same way.
    for slot in 0..u64::from(NUM_RQE) {
        fake.write(RQ_KEY, slot * 112 + 8, &0u16.to_ne_bytes());
    }
    let err = unsafe { qp.post_recv_exclusive(&[wr(6, &two)]) }.unwrap_err();
    assert_eq!(refused_at(err), 0);
    unsafe { qp.post_recv_exclusive(&[wr(7, &one), wr(8, &one)]) }.unwrap();
    assert_eq!([7, 8], [0, 1].map(|slot| posted_id(&fake, true, slot)));
}

#[test]
fn a_siw_qp_takes_the_iwarp_cm_answers_and_learns_rts_from_the_kernel() {
    use crate::command::{QpTransitionError, TransportType};
    use crate::flags::AccessFlags;
    let (fake, ctx) = siw_ctx();
    let cq = ctx.create_cq(4, None).unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let qp = pd.create_qp(&rc_init(&cq)).unwrap();
    assert_eq!(qp.transport_type(), TransportType::Iwarp);
    let rw = AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ;
    qp.modify(&QpAttr::new().state(QpState::Init).access_flags(rw).port(1))
        .unwrap();
    qp.modify(&QpAttr::new().state(QpState::Rtr).access_flags(rw).port(1))
        .unwrap();
    qp.modify(&QpAttr::new().port(1)).unwrap();
    assert_eq!(qp.state(), QpState::Rtr);
    assert_eq!(fake.state().modify_masks, [0x29, 0x29, 0x20]);

    let err = qp
        .modify(&QpAttr::new().state(QpState::Rts).sq_psn(0))
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::QpTransition {
                verdict: QpTransitionError::RtsOnlyThroughCm { from: QpState::Rtr },
                ..
            }
        ),
        "{err}"
    );
    assert_eq!(fake.state().modify_masks.len(), 3, "nothing sent");

    let sge = [Sge {
        addr: 0x1000,
        length: 8,
        lkey: 5,
    }];
    let send = SendWr::new(1, SendOp::Send { imm: None }, Payload::Sges(&sge));
    // SAFETY: the fake kernel touches no memory.
    let refused = unsafe { qp.post_send(&[send]) }.unwrap_err();
    assert!(
        matches!(&refused, Error::Post { why: source, .. }
            if matches!(**source, PostError::WrongState { state: QpState::Rtr, .. })),
        "{refused}"
    );
    // Linux 6.1's siw_query_qp: qp_state left zero.
    fake.state().qp_state = QpState::Reset as u8;
    let unreported = qp.refresh_state().unwrap_err();
    assert!(
        matches!(
            unreported,
            Error::NotReported {
                op: Op::QueryQp,
                ..
            }
        ),
        "{unreported}"
    );
    assert_eq!(unreported.errno(), Some(crate::error::Errno::OPNOTSUPP));
    assert_eq!(
        qp.state(),
        QpState::Rtr,
        "an unreported state changes nothing"
    );
    assert_eq!(qp.established().unwrap(), QpState::Rts);
    assert_eq!(qp.state(), QpState::Rts);
    // 6.12's: the state reported; established returns the kernel's answer.
    fake.state().qp_state = QpState::Err as u8;
    assert_eq!(qp.established().unwrap(), QpState::Err);
    fake.state().qp_state = QpState::Rts as u8;
    assert_eq!(qp.refresh_state().unwrap(), QpState::Rts);
    assert_eq!(qp.state(), QpState::Rts);
    // SAFETY: as above.
    unsafe { qp.post_send(&[send]) }.unwrap();
    assert!(fake
        .log()
        .ends_with(&["query_qp".into(), "doorbell".into()]));
}

/// A forked child's calls on the parent's siw CQ and QP are refused before
/// any store into the rings (which are `MAP_SHARED` memory of the parent's
/// live objects; before the fix the child's `req_notify` armed the parent's
/// CQ): after the child, the arming word, a ready CQE and the free SQE and
/// RQE slots are as the parent left them.
#[test]
#[cfg_attr(miri, ignore = "Miri cannot fork")]
fn a_forked_child_touches_none_of_the_parents_siw_rings() {
    let (fake, ctx) = siw_ctx();
    let cq = ctx.create_cq(4, None).unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let qp = pd.create_qp(&rc_init(&cq)).unwrap();
    qp.modify(&to_init()).unwrap();
    let cqe = sys::siw_cqe {
        id: 0x5eed,
        flags: SIW_WQE_VALID as u8,
        ..Default::default()
    };
    fake.write(CQ_KEY, 0, cqe.as_bytes());
    let snapshot = |key, len| {
        let mut b = vec![0u8; len];
        fake.read(key, 0, &mut b);
        b
    };
    let cq_len = NUM_CQE as usize * 32 + 8;
    let (sq_len, rq_len) = (NUM_SQE as usize * 120, NUM_RQE as usize * 112);
    let before = (
        snapshot(CQ_KEY, cq_len),
        snapshot(SQ_KEY, sq_len),
        snapshot(RQ_KEY, rq_len),
    );
    let sge = [Sge {
        addr: 0x1000,
        length: 8,
        lkey: 5,
    }];
    let foreign = |e: Error, op| matches!(e, Error::ForeignProcess { op: o, .. } if o == op);
    let child = || {
        let mut wc = [Default::default(); 4];
        let send = SendWr::new(2, SendOp::Send { imm: None }, Payload::Sges(&sge));
        [
            foreign(cq.req_notify(false).unwrap_err(), Op::ReqNotifyCq),
            foreign(cq.req_notify(true).unwrap_err(), Op::ReqNotifyCq),
            foreign(cq.poll(&mut wc).unwrap_err(), Op::PollCq),
            // SAFETY: refused before anything is written.
            foreign(
                unsafe {
                    qp.post_recv(&[RecvWr {
                        wr_id: 1,
                        sges: &sge,
                    }])
                }
                .unwrap_err(),
                Op::PostRecv,
            ),
            // SAFETY: as above.
            foreign(unsafe { qp.post_send(&[send]) }.unwrap_err(), Op::PostSend),
            foreign(
                qp.modify(&QpAttr::new().state(QpState::Err)).unwrap_err(),
                Op::ModifyQp,
            ),
            foreign(qp.refresh_state().unwrap_err(), Op::QueryQp),
        ]
        .iter()
        .position(|ok| !ok)
        .map_or(0, |i| i as i32 + 1)
    };
    // SAFETY: the child works on its own copies, makes no allocation the
    // parent could have left locked (glibc keeps malloc usable after fork).
    let code = unsafe { crate::test_serial::in_child(child) };
    assert_eq!(code, 0, "the child's check {code} failed (99: panic)");
    let after = (
        snapshot(CQ_KEY, cq_len),
        snapshot(SQ_KEY, sq_len),
        snapshot(RQ_KEY, rq_len),
    );
    assert!(after.0 == before.0, "CQ ring or arming word changed");
    assert!(after.1 == before.1, "send ring changed");
    assert!(after.2 == before.2, "receive ring changed");
    let mut wc = [Default::default(); 4];
    assert_eq!(
        cq.poll(&mut wc).unwrap(),
        1,
        "the parent still gets its CQE"
    );
    assert_eq!(wc[0].wr_id(), 0x5eed);
}

/// 64 bytes of `byte`, registered in `pd` for a request to own.
fn local_in(
    pd: &crate::ProtectionDomain,
    byte: u8,
) -> crate::post::Local<crate::BufferMr<Vec<u8>>> {
    let mr = pd
        .reg_buffer(vec![byte; 64], crate::AccessFlags::LOCAL_WRITE)
        .unwrap();
    crate::post::Local::whole(mr)
}

/// An `OwnedQp` on siw in ERR (which takes posts, as the kernel's flush
/// does), with its SQ slots' ids readable and CQEs writable.
struct OwnedSiw {
    fake: Arc<SiwFake>,
    pd: crate::ProtectionDomain,
    qp: crate::OwnedQp<crate::BufferMr<Vec<u8>>>,
    _cq: CompletionQueue,
    next_cqe: u64,
}

impl OwnedSiw {
    fn new() -> Self {
        let (fake, ctx) = siw_ctx();
        let cq = ctx.create_cq(4, None).unwrap();
        let pd = ctx.alloc_pd().unwrap();
        let qp = crate::OwnedQp::new(pd.create_qp(&rc_init(&cq)).unwrap()).unwrap();
        let init = QpAttr::new()
            .state(QpState::Init)
            .access_flags(Default::default())
            .port(1);
        qp.modify(&init).unwrap();
        qp.modify(&QpAttr::new().state(QpState::Err)).unwrap();
        OwnedSiw {
            fake,
            pd,
            qp,
            _cq: cq,
            next_cqe: 0,
        }
    }

    fn local(&self, byte: u8) -> crate::post::Local<crate::BufferMr<Vec<u8>>> {
        local_in(&self.pd, byte)
    }

    /// The id our post wrote into SQ slot `slot`.
    fn sq_id(&self, slot: u64) -> u64 {
        let mut id = [0u8; 8];
        self.fake.read(SQ_KEY, slot * 120, &mut id);
        u64::from_ne_bytes(id)
    }

    /// The kernel completes SQ slot `slot` successfully.
    fn complete(&mut self, slot: u64, opcode: u8) {
        let cqe = sys::siw_cqe {
            id: self.sq_id(slot),
            flags: SIW_WQE_VALID as u8,
            opcode,
            status: sys::SIW_WC_SUCCESS,
            qp_id: u64::from(self.qp.qp_num()),
            ..Default::default()
        };
        self.fake.write(CQ_KEY, self.next_cqe * 32, cqe.as_bytes());
        self.next_cqe += 1;
    }

    fn poll(&self) -> Vec<crate::post::Completed<crate::BufferMr<Vec<u8>>>> {
        let mut done = Vec::new();
        self.qp.poll(&mut done).unwrap();
        done
    }
}

/// siw completes a SEND before an earlier RDMA READ (issue 18, defect 3):
/// the SEND's completion hands back the SEND's memory only; the READ's
/// comes back with its own completion, with the bytes the READ wrote.
#[test]
fn an_owned_siw_read_comes_back_only_with_its_own_completion() {
    use crate::post::Ended;
    let mut s = OwnedSiw::new();
    let remote = crate::wr::Remote {
        addr: 0x10000,
        rkey: 7,
    };
    s.qp.post_send(crate::post::SendRequest::read(10, s.local(2), remote))
        .unwrap();
    s.qp.post_send(crate::post::SendRequest::send(11, s.local(3)))
        .unwrap();
    s.complete(1, sys::SIW_OP_SEND);
    let done = s.poll();
    assert_eq!(done.len(), 1, "{done:?}");
    assert_eq!(done[0].wr_id, 11);
    assert!(matches!(done[0].ended, Ended::Completion(_)));
    assert_eq!(s.qp.outstanding(), (1, 0), "the READ's memory stays");
    s.complete(0, sys::SIW_OP_READ);
    let done = s.poll();
    assert_eq!(done.len(), 1, "{done:?}");
    assert_eq!(done[0].wr_id, 10);
    assert_eq!(done[0].status(), Some(WcStatus::Success));
    assert_eq!(s.qp.outstanding(), (0, 0));
}

/// On siw every owned request must be signalled (issue 18, defect 4: siw
/// sends unsignalled payloads of 4 KiB and more zero-copy, and completes
/// out of order): refused, typed, the request back, nothing written.
#[test]
fn an_owned_siw_qp_refuses_unsignalled_requests() {
    use crate::post::PostSendError;
    let s = OwnedSiw::new();
    let before = s.fake.log().len();
    let request = crate::post::SendRequest::send(1, s.local(1)).unsignaled();
    let Err(PostSendError::Refused(refused)) = s.qp.post_send(request) else {
        panic!("an unsignalled SEND on siw was queued");
    };
    assert!(
        matches!(&refused.error, Error::Post { why: source, .. }
            if matches!(**source, PostError::MustBeSignalled { opcode: "SEND", .. })),
        "{}",
        refused.error
    );
    assert_eq!(refused.request.wr_id(), 1);
    assert_eq!(s.qp.outstanding(), (0, 0));
    assert_eq!(s.fake.log().len(), before, "no doorbell");
    let mut flags = [0u8; 2];
    s.fake.read(SQ_KEY, 8, &mut flags);
    assert_eq!(flags, [0, 0], "no SQE written");
}

/// A doorbell that fails after the SQE was published (issue 18, defect 2:
/// EACCES after a credential change) leaves the request the device's: it is
/// reported as queued, stays outstanding, and its memory comes back only
/// with its completion.
#[test]
fn a_failed_doorbell_leaves_the_owned_request_with_the_device() {
    use crate::post::PostSendError;
    let mut s = OwnedSiw::new();
    s.fake.state().doorbell_errno = Some(Errno::ACCESS);
    let result =
        s.qp.post_send(crate::post::SendRequest::send(5, s.local(9)));
    let Err(PostSendError::Queued { wr_id, error }) = result else {
        panic!("a failed doorbell handed the request back: {result:?}");
    };
    assert_eq!(wr_id, 5);
    assert!(
        matches!(
            error,
            Error::Doorbell {
                errno: Errno::ACCESS,
                ..
            }
        ),
        "{error}"
    );
    assert_eq!(error.errno(), Some(Errno::ACCESS));
    assert_eq!(s.qp.outstanding(), (1, 0), "the device owns it");
    let mut flags = [0u8; 2];
    s.fake.read(SQ_KEY, 8, &mut flags);
    assert_ne!(
        u16::from_ne_bytes(flags) & SIW_WQE_VALID,
        0,
        "the SQE is published"
    );
    // The next request gets another id, so the orphan's completion cannot
    // release it.
    s.fake.state().doorbell_errno = None;
    s.qp.post_send(crate::post::SendRequest::send(6, s.local(8)))
        .unwrap();
    assert_ne!(s.sq_id(0), s.sq_id(1));
    s.complete(0, sys::SIW_OP_SEND);
    let done = s.poll();
    assert_eq!(done.len(), 1, "{done:?}");
    assert_eq!(done[0].wr_id, 5);
    assert_eq!(s.qp.outstanding(), (1, 0));
}

/// A receive passed over by a later receive's completion (its own lost,
/// say in a CQ overrun; a receive queue completes in order) comes back, as
/// the device is done with it, but as `Ended::WithoutCompletion` with no
/// status: never success (issue 18, defect 7).
#[test]
fn a_receive_whose_completion_was_lost_is_not_reported_as_success() {
    use crate::post::Ended;
    let s = OwnedSiw::new();
    for (wr_id, byte) in [(1, 1), (2, 2)] {
        let local = s.local(byte);
        s.qp.post_recv(crate::post::RecvRequest::new(wr_id, local))
            .unwrap();
    }
    let rq_id = |slot: u64| {
        let mut id = [0u8; 8];
        s.fake.read(RQ_KEY, slot * 112, &mut id);
        u64::from_ne_bytes(id)
    };
    // Only the second receive's completion arrives.
    let cqe = sys::siw_cqe {
        id: rq_id(1),
        flags: SIW_WQE_VALID as u8,
        opcode: sys::SIW_OP_RECEIVE,
        status: sys::SIW_WC_SUCCESS,
        qp_id: u64::from(s.qp.qp_num()),
        ..Default::default()
    };
    s.fake.write(CQ_KEY, 0, cqe.as_bytes());
    let done = s.poll();
    assert_eq!(done.len(), 2, "{done:?}");
    assert_eq!(
        (done[0].wr_id, done[0].ended),
        (1, Ended::WithoutCompletion)
    );
    assert_eq!(done[0].status(), None, "not success");
    assert!(done[0].completion().is_none());
    assert_eq!(done[1].wr_id, 2);
    assert_eq!(done[1].status(), Some(WcStatus::Success));
    assert_eq!(s.qp.outstanding(), (0, 0));
}

/// What siw leaves in its ring never completes (a request posted after the
/// kernel's own flush, as here: the fake completes nothing). `destroy`
/// hands back first what completed, with its completion, then the rest as
/// `Ended::Destroyed`, after DESTROY_QP; a refused destroy hands the QP
/// back with its requests still outstanding.
#[test]
fn a_destroyed_owned_siw_qp_hands_back_what_never_completed() {
    use crate::post::Ended;
    let mut s = OwnedSiw::new();
    s.qp.post_send(crate::post::SendRequest::send(1, s.local(1)))
        .unwrap();
    s.qp.post_send(crate::post::SendRequest::send(2, s.local(2)))
        .unwrap();
    s.qp.post_recv(crate::post::RecvRequest::new(3, s.local(3)))
        .unwrap();
    s.complete(0, sys::SIW_OP_SEND);

    s.fake.state().busy_once = true;
    let mut back = Vec::new();
    let refused = s.qp.destroy(&mut back).unwrap_err();
    assert_eq!(refused.error.errno(), Some(Errno::BUSY));
    assert_eq!(back.len(), 1, "the completed send came back: {back:?}");
    assert_eq!(
        (back[0].wr_id, back[0].status()),
        (1, Some(WcStatus::Success))
    );
    let qp = refused.qp;
    assert_eq!(qp.outstanding(), (1, 1), "the rest stays with the device");

    let mut back = Vec::new();
    qp.destroy(&mut back).unwrap();
    let log = s.fake.log();
    assert!(
        log.iter().filter(|l| l.starts_with("destroy_qp")).count() == 2,
        "{log:?}"
    );
    let got: Vec<_> = back
        .iter()
        .map(|c| (c.wr_id, c.ended, c.is_recv, c.status()))
        .collect();
    assert_eq!(
        got,
        [
            (2, Ended::Destroyed, false, None),
            (3, Ended::Destroyed, true, None)
        ]
    );
    let bytes: Vec<u8> = back
        .into_iter()
        .map(|c| c.into_memory().expect("memory").buffer()[0])
        .collect();
    assert_eq!(bytes, [2, 3], "each request's own buffer");
}

/// A destroy that unwinds (here the fake panics in DESTROY_QP) frees none
/// of the outstanding requests' memory: their MRs are never deregistered,
/// their buffers leaked, as a drop that unwinds leaks them.
#[test]
#[cfg_attr(miri, ignore = "it leaks on purpose, which Miri's leak check reports")]
fn an_owned_siw_destroy_that_unwinds_frees_no_memory() {
    let s = OwnedSiw::new();
    s.qp.post_recv(crate::post::RecvRequest::new(1, s.local(1)))
        .unwrap();
    let deregs = |fake: &SiwFake| {
        let cmds = fake.inner.commands();
        cmds.iter()
            .filter(|c| c.code == sys::IB_USER_VERBS_CMD_DEREG_MR)
            .count()
    };
    let before = deregs(&s.fake);
    s.fake.state().panic_once = true;
    let OwnedSiw { fake, qp, .. } = s;
    let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        qp.destroy(&mut Vec::new()).is_ok()
    }));
    assert!(unwound.is_err(), "the fake's DESTROY_QP panicked");
    assert_eq!(deregs(&fake), before, "the receive's MR stays registered");
}

/// `AsyncQp::destroy` on siw: a refused destroy resolves the future whose
/// completion it polled, hands the `AsyncQp` back still served by its CQ's
/// task (a later completion reaches its future at the next event), and a
/// destroy then resolves the future of a request that never completed
/// with `Ended::Destroyed` and its own buffer.
#[cfg(all(feature = "tokio", not(miri)))] // Miri: no epoll for the reactor
#[tokio::test]
async fn an_async_siw_destroy_resolves_the_futures_and_survives_a_refusal() {
    use crate::post::Ended;
    use std::io::Write;
    use std::time::Duration;
    let (fake, ctx) = siw_ctx();
    let cq = crate::tokio::AsyncCq::new(&ctx, 4).unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let qp: crate::OwnedQp<crate::BufferMr<Vec<u8>>> =
        crate::OwnedQp::new(pd.create_qp(&rc_init(cq.cq())).unwrap()).unwrap();
    qp.modify(&to_init()).unwrap();
    qp.modify(&QpAttr::new().state(QpState::Err)).unwrap();
    let qpn = qp.qp_num();
    let qp = crate::tokio::AsyncQp::new(qp, &[&cq]).unwrap();
    drop(cq);
    let send = |byte: u8| {
        let mr = pd
            .reg_buffer(vec![byte; 64], crate::AccessFlags::LOCAL_WRITE)
            .unwrap();
        qp.post_send(crate::post::SendRequest::send(
            u64::from(byte),
            crate::post::Local::whole(mr),
        ))
        .unwrap()
    };
    let (first, second, third) = (send(1), send(2), send(3));
    let mut next_cqe = 0;
    let mut complete = |slot: u64| {
        let mut id = [0u8; 8];
        fake.read(SQ_KEY, slot * size_of::<sys::siw_sqe>() as u64, &mut id);
        let cqe = sys::siw_cqe {
            id: u64::from_ne_bytes(id),
            flags: SIW_WQE_VALID as u8,
            opcode: sys::SIW_OP_SEND,
            status: sys::SIW_WC_SUCCESS,
            qp_id: u64::from(qpn),
            ..Default::default()
        };
        fake.write(CQ_KEY, next_cqe * 32, cqe.as_bytes());
        next_cqe += 1;
    };
    let within = |f| tokio::time::timeout(Duration::from_secs(10), f);

    // The first completes with no event: only the destroy's poll finds it.
    complete(0);
    fake.state().busy_once = true;
    let refused = qp.destroy().unwrap_err();
    assert_eq!(refused.error.errno(), Some(Errno::BUSY));
    let qp = refused.qp;
    let done = within(first)
        .await
        .expect("resolved by the destroy")
        .unwrap();
    assert_eq!((done.wr_id, done.status()), (1, Some(WcStatus::Success)));
    assert_eq!(qp.outstanding(), (2, 0), "the rest stays with the device");

    // Served again: the second's completion reaches it at the next event.
    complete(1);
    let events = fake.state().comp_events.take().expect("the channel");
    (&events).write_all(&7u64.to_ne_bytes()).unwrap();
    let done = within(second)
        .await
        .expect("the task serves the QP again")
        .unwrap();
    assert_eq!((done.wr_id, done.status()), (2, Some(WcStatus::Success)));

    // The third never completes: the destroy ends it.
    qp.destroy().unwrap();
    let done = within(third)
        .await
        .expect("resolved by the destroy")
        .unwrap();
    assert_eq!((done.wr_id, done.ended), (3, Ended::Destroyed));
    assert_eq!(done.into_memory().expect("its buffer").buffer()[0], 3);
    let log = fake.log();
    assert_eq!(
        log.iter().filter(|l| l.starts_with("destroy_qp")).count(),
        2,
        "{log:?}"
    );
}

/// A CQE of siw for QP `qpn` ending the request whose id is `id`, written
/// into CQ slot `slot` (each test writes at most [`NUM_CQE`]).
fn write_cqe(fake: &SiwFake, slot: u64, qpn: u32, id: u64, opcode: u8) {
    let cqe = sys::siw_cqe {
        id,
        flags: SIW_WQE_VALID as u8,
        opcode,
        status: sys::SIW_WC_SUCCESS,
        qp_id: u64::from(qpn),
        ..Default::default()
    };
    fake.write(CQ_KEY, slot * 32, cqe.as_bytes());
}

/// The id our post wrote into SQ (or, `recv`, RQ) slot `slot`.
fn posted_id(fake: &SiwFake, recv: bool, slot: u64) -> u64 {
    let (key, size) = if recv {
        (RQ_KEY, size_of::<sys::siw_rqe>())
    } else {
        (SQ_KEY, size_of::<sys::siw_sqe>())
    };
    let mut id = [0u8; 8];
    fake.read(key, slot * size as u64, &mut id);
    u64::from_ne_bytes(id)
}

/// A dead QP's completions are kept for nobody (issue 38, defect 2): when
/// an owned QP is dropped, the completions of its that another owner had
/// read (held under its number) and those still in the ring are dropped
/// with it. Before the fix both stayed, for a plain poll nobody makes: the
/// CQ held one, and the plain poll below returned two.
#[test]
fn a_dropped_owned_qps_completions_are_not_kept_on_its_cq() {
    let s = OwnedSiw::new();
    let cq = s._cq.share();
    let qpn = s.qp.qp_num();
    for byte in [1, 2] {
        s.qp.post_send(crate::post::SendRequest::send(
            u64::from(byte),
            s.local(byte),
        ))
        .unwrap();
    }
    // Another owner on the same CQ reads the first completion: it is held
    // for this QP.
    let other = 0x77;
    cq.adopt(other).unwrap();
    write_cqe(
        &s.fake,
        0,
        qpn,
        posted_id(&s.fake, false, 0),
        sys::SIW_OP_SEND,
    );
    let mut wc = [WorkCompletion::default(); 4];
    assert_eq!(cq.poll_routed(Reader::Owner(other), &mut wc).unwrap(), 0);
    assert_eq!(cq.held(), 1, "held for the live QP");
    // The second is still in the ring, with an unowned QP's after it.
    write_cqe(
        &s.fake,
        1,
        qpn,
        posted_id(&s.fake, false, 1),
        sys::SIW_OP_SEND,
    );
    write_cqe(&s.fake, 2, 0x99, 0xabc, sys::SIW_OP_SEND);

    let OwnedSiw { fake, qp, _cq, .. } = s;
    drop(qp);
    assert!(
        fake.log().iter().any(|l| l.starts_with("destroy_qp")),
        "{:?}",
        fake.log()
    );
    assert_eq!(cq.held(), 1, "only the unowned QP's completion stays");
    assert_eq!(cq.poll_routed(Reader::Owner(other), &mut wc).unwrap(), 0);
    let n = cq.poll(&mut wc).unwrap();
    let got: Vec<_> = wc[..n].iter().map(|c| (c.qp_num(), c.wr_id())).collect();
    assert_eq!(got, [(0x99, 0xabc)], "the dead QP's completions are gone");
    assert_eq!(cq.held(), 0);
    cq.release(other);
}

/// A move to RESET on siw keeps the rings (the kernel's QP stays in
/// ERR): the requests stay outstanding, the device's, until they complete
/// or the QP is destroyed.
#[test]
fn an_owned_siw_qp_keeps_its_requests_across_reset() {
    let s = OwnedSiw::new();
    s.qp.post_recv(crate::post::RecvRequest::new(1, s.local(1)))
        .unwrap();
    s.qp.modify(&QpAttr::new().state(QpState::Reset)).unwrap();
    assert!(s.poll().is_empty());
    assert_eq!(s.qp.outstanding(), (0, 1), "still the device's");
}

/// An `AsyncQp` over the siw fake, in ERR (which takes posts), served by
/// one `AsyncCq`: the fake, the PD, the QP number, and a way to raise a
/// completion event.
#[cfg(all(feature = "tokio", not(miri)))]
struct AsyncSiw {
    fake: Arc<SiwFake>,
    pd: crate::ProtectionDomain,
    cq: crate::tokio::AsyncCq,
}

#[cfg(all(feature = "tokio", not(miri)))]
impl AsyncSiw {
    fn new() -> Self {
        let (fake, ctx) = siw_ctx();
        let cq = crate::tokio::AsyncCq::new(&ctx, 4).unwrap();
        let pd = ctx.alloc_pd().unwrap();
        AsyncSiw { fake, pd, cq }
    }

    fn owned_qp(&self) -> crate::OwnedQp<crate::BufferMr<Vec<u8>>> {
        let qp = crate::OwnedQp::new(self.pd.create_qp(&rc_init(self.cq.cq())).unwrap()).unwrap();
        qp.modify(&to_init()).unwrap();
        qp.modify(&QpAttr::new().state(QpState::Err)).unwrap();
        qp
    }

    fn local(&self, byte: u8) -> crate::post::Local<crate::BufferMr<Vec<u8>>> {
        local_in(&self.pd, byte)
    }

    /// One completion event on the CQ's channel.
    fn event(&self) {
        use std::io::Write;
        let events = self.fake.state().comp_events.take().expect("the channel");
        (&events).write_all(&1u64.to_ne_bytes()).unwrap();
        self.fake.state().comp_events = Some(events);
    }
}

/// Issue 38, defect 1: a receive posted on the `OwnedQp` before it is
/// wrapped, under the caller's id 1, and a send posted through the
/// `AsyncQp` under the caller's id 1 as well. `AsyncQp::new` refuses such a
/// QP, typed, with the QP back; `adopt` gives the receive a future of its
/// own. The send's completion resolves the send's future with the send's
/// buffer, and the receive's its own: before the fix (keys from 1 sharing
/// the callers' id space) the first awaited future resolved with the
/// receive's buffer and the receive's message was dropped.
#[cfg(all(feature = "tokio", not(miri)))]
#[tokio::test]
async fn requests_posted_before_wrapping_resolve_to_their_own_futures() {
    use std::time::Duration;
    let a = AsyncSiw::new();
    let qp = a.owned_qp();
    let qpn = qp.qp_num();
    qp.post_recv(crate::post::RecvRequest::new(1, a.local(0xee)))
        .unwrap();

    let refused = crate::tokio::AsyncQp::new(qp, &[&a.cq]).unwrap_err();
    assert!(
        matches!(refused.error, Error::InvalidInput { .. }),
        "{}",
        refused.error
    );
    assert!(
        refused.error.to_string().contains("adopt"),
        "{}",
        refused.error
    );
    let qp = refused.qp;
    assert_eq!(qp.outstanding(), (0, 1), "handed back as it was");

    let (qp, earlier) = crate::tokio::AsyncQp::adopt(qp, &[&a.cq]).unwrap();
    assert_eq!(earlier.len(), 1);
    assert_eq!(earlier[0].wr_id(), 1);
    let sent = qp
        .post_send(crate::post::SendRequest::send(1, a.local(0x55)))
        .unwrap();
    let within = |f| tokio::time::timeout(Duration::from_secs(10), f);

    write_cqe(
        &a.fake,
        0,
        qpn,
        posted_id(&a.fake, false, 0),
        sys::SIW_OP_SEND,
    );
    a.event();
    let done = within(sent).await.expect("the send resolves").unwrap();
    assert!(!done.is_recv, "{done:?}");
    assert_eq!(done.wr_id, 1);
    assert_eq!(done.into_memory().expect("memory").buffer()[0], 0x55);
    assert_eq!(qp.outstanding(), (0, 1), "the receive is still queued");

    write_cqe(
        &a.fake,
        1,
        qpn,
        posted_id(&a.fake, true, 0),
        sys::SIW_OP_RECEIVE,
    );
    a.event();
    let mut earlier = earlier;
    let message = within(earlier.remove(0))
        .await
        .expect("the receive resolves")
        .unwrap();
    assert!(message.is_recv);
    assert_eq!(message.wr_id, 1);
    assert_eq!(message.into_memory().expect("memory").buffer()[0], 0xee);
    assert_eq!((qp.outstanding(), qp.waiting()), ((0, 0), 0));
}

/// A CQ's task that its runtime drops before ever polling it still ends
/// the CQ: a current-thread runtime runs spawned tasks only while it
/// waits, and `block_on` here never waits. Before the fix the guard that
/// ends the dispatch was made inside the task's body, so this CQ looked
/// alive forever and a QP wrapped with it would wait for nothing.
#[cfg(all(feature = "tokio", not(miri)))]
#[test]
fn a_task_dropped_before_its_first_poll_still_ends_its_cq() {
    let (_fake, ctx) = siw_ctx();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let never_polled = runtime
        .block_on(async { crate::tokio::AsyncCq::new(&ctx, 4) })
        .unwrap();
    drop(runtime);
    let pd = ctx.alloc_pd().unwrap();
    let mut init = QpInit::new(QpType::Rc, never_polled.cq(), never_polled.cq());
    init.max_send_wr = NUM_SQE;
    init.max_recv_wr = NUM_RQE;
    let qp: crate::OwnedQp<crate::BufferMr<Vec<u8>>> =
        crate::OwnedQp::new(pd.create_qp(&init).unwrap()).unwrap();
    let refused = crate::tokio::AsyncQp::new(qp, &[&never_polled]).unwrap_err();
    assert_eq!(
        refused.error.errno(),
        Some(Errno::CANCELED),
        "{}",
        refused.error
    );
}

/// Issue 38, defect 6: `AsyncQp::new` refused because one CQ's task has
/// ended, while the other CQ's task polls without pause. Before the fix
/// the QP was registered with the busy task first, which could hold it at
/// the refusal, and `new` panicked (`unreachable!`); now it joins every
/// task or none, and the QP comes back with the error, every time.
#[cfg(all(feature = "tokio", not(miri)))]
#[test]
fn a_refusal_by_an_ended_task_hands_the_qp_back_while_another_task_polls() {
    let (fake, ctx) = siw_ctx();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let options = crate::tokio::AsyncCqOptions::new(4).busy_poll(u32::MAX);
    let busy = runtime
        .block_on(async { crate::tokio::AsyncCq::with_options(&ctx, &options) })
        .unwrap();
    // A CQ whose task has ended: its runtime is gone.
    let other = tokio::runtime::Runtime::new().unwrap();
    let ended = other
        .block_on(async { crate::tokio::AsyncCq::new(&ctx, 4) })
        .unwrap();
    drop(other);
    let pd = ctx.alloc_pd().unwrap();
    let mut init = QpInit::new(QpType::Rc, busy.cq(), ended.cq());
    init.max_send_wr = NUM_SQE;
    init.max_recv_wr = NUM_RQE;
    let mut qp: crate::OwnedQp<crate::BufferMr<Vec<u8>>> =
        crate::OwnedQp::new(pd.create_qp(&init).unwrap()).unwrap();
    let _guard = runtime.enter();
    for _ in 0..2000 {
        let refused = crate::tokio::AsyncQp::new(qp, &[&busy, &ended]).unwrap_err();
        assert_eq!(
            refused.error.errno(),
            Some(Errno::CANCELED),
            "{}",
            refused.error
        );
        qp = refused.qp;
    }
    drop(qp);
    assert!(fake.log().iter().any(|l| l.starts_with("destroy_qp")));
}

/// The measured poll of [`cq_poll_loop`]: not inlined, so callgrind can
/// name it.
#[cfg(not(miri))]
#[inline(never)]
fn probe_cq_poll(cq: &CompletionQueue, out: &mut [WorkCompletion]) -> usize {
    cq.poll(out).unwrap_or(0)
}

/// An instruction-count probe of the whole `CompletionQueue::poll` on siw
/// (process check, ring lock, routing flag, ring), where
/// `provider::siw::ir_probe::poll_loop` counts the ring alone: each
/// iteration the fake kernel writes one CQE (pwrite to the ring's memfd,
/// not counted) and [`probe_cq_poll`] takes it.
///
/// ```text
/// valgrind --tool=callgrind --toggle-collect='*probe_cq_poll*' target/release/deps/uverbs-… \
///     --ignored --exact provider::siw::wiring_tests::cq_poll_loop --test-threads=1
/// ```
#[cfg(not(miri))]
#[test]
#[ignore = "an instruction-count probe, run under callgrind by hand"]
fn cq_poll_loop() {
    let (fake, ctx) = siw_ctx();
    let cq = ctx.create_cq(3, None).unwrap();
    let mut wc = [WorkCompletion::default(); 1];
    for i in 0..200u64 {
        let cqe = sys::siw_cqe {
            id: i,
            flags: SIW_WQE_VALID as u8,
            opcode: sys::SIW_OP_WRITE,
            status: sys::SIW_WC_SUCCESS,
            bytes: 64,
            qp_id: 17,
            ..Default::default()
        };
        fake.write(CQ_KEY, (i % u64::from(NUM_CQE)) * 32, cqe.as_bytes());
        assert_eq!(probe_cq_poll(&cq, &mut wc), 1);
        let w = &wc[0];
        assert_eq!(
            (w.wr_id(), w.status(), w.opcode(), w.qp_num()),
            (i, WcStatus::Success, Some(WcOpcode::RdmaWrite), 17)
        );
    }
}

/// The whole `CompletionQueue::poll`, `QueuePair::post_recv` and
/// `post_recv_exclusive` on siw, as `provider::rxe::call_probe` counts them
/// on rxe (see [`crate::provider::call_probe`]): each iteration posts one
/// receive, the fake kernel takes it (clears its flags: pwrite to the
/// ring's memfd, not counted) and writes its CQE, and the poll takes that.
#[cfg(not(miri))]
#[test]
#[ignore = "an instruction-count probe, run under callgrind by tools/ir-budget.sh"]
fn siw_calls_loop() {
    use crate::provider::call_probe::{
        probe_poll, probe_post_recv, probe_post_recv_exclusive, send_loop, ITERS,
    };
    let (fake, ctx) = siw_ctx();
    let cq = ctx.create_cq(NUM_CQE, None).unwrap();
    let pd = ctx.alloc_pd().unwrap();
    // The send loop's WRITEs of two and three SGEs (`probe_post_write_two`,
    // `probe_post_write_three`).
    let mut init = rc_init(&cq);
    init.max_send_sge = 3;
    // And its inline SENDs (`probe_post_inline`).
    init.max_inline = 64;
    let mut qp = pd.create_qp(&init).unwrap();
    qp.modify(&to_init()).unwrap();
    let sges = [Sge {
        addr: 0x1000,
        length: 64,
        lkey: 5,
    }];
    let rqe_len = std::mem::size_of::<sys::siw_rqe>() as u64;
    let flags_at = std::mem::offset_of!(sys::siw_rqe, flags) as u64;
    let mut wc = [WorkCompletion::default(); 1];
    let mut n = 0u64;
    for exclusive in [false, true] {
        for i in 0..ITERS {
            let wr = RecvWr {
                wr_id: i,
                sges: &sges,
            };
            let posted = match exclusive {
                false => probe_post_recv(&qp, &wr),
                true => probe_post_recv_exclusive(&mut qp, &wr),
            };
            assert!(posted);
            // The kernel takes the RQE: its flags back to 0 (siw_rqe_get).
            let slot = n % u64::from(NUM_RQE);
            fake.write(RQ_KEY, slot * rqe_len + flags_at, &0u16.to_ne_bytes());
            let cqe = sys::siw_cqe {
                id: i,
                flags: SIW_WQE_VALID as u8,
                opcode: sys::SIW_OP_RECEIVE,
                status: sys::SIW_WC_SUCCESS,
                bytes: 64,
                qp_id: 17,
                ..Default::default()
            };
            fake.write(CQ_KEY, (n % u64::from(NUM_CQE)) * 32, cqe.as_bytes());
            n += 1;
            assert_eq!(probe_poll(&cq, &mut wc), 1);
            let w = &wc[0];
            assert_eq!(
                (w.wr_id(), w.status(), w.opcode(), w.qp_num()),
                (i, WcStatus::Success, Some(WcOpcode::Recv), 17)
            );
        }
    }
    let sqe_len = std::mem::size_of::<sys::siw_sqe>() as u64;
    let sq_flags_at = std::mem::offset_of!(sys::siw_sqe, flags) as u64;
    let mut n = 0u64;
    send_loop(&mut qp, &sges, |posted| {
        // The kernel takes the SQEs (siw_sqe_get): an idle kernel, so each
        // post writes the doorbell, as in the guest's loop.
        for _ in 0..posted {
            let slot = n % u64::from(NUM_SQE);
            fake.write(SQ_KEY, slot * sqe_len + sq_flags_at, &0u16.to_ne_bytes());
            n += 1;
        }
    });
}

/// `OwnedQp::wait` (issue 42): a timeout loses nothing and says
/// ETIMEDOUT; a completion is handed back; of two read at once the first
/// is returned and the second stays for the next poll.
#[test]
fn an_owned_wait_hands_back_one_request_and_keeps_the_rest() {
    use std::time::{Duration, Instant};
    let mut s = OwnedSiw::new();
    s.qp.post_send(crate::post::SendRequest::send(21, s.local(1)))
        .unwrap();
    s.qp.post_send(crate::post::SendRequest::send(22, s.local(2)))
        .unwrap();
    let start = Instant::now();
    let e = s.qp.wait(Duration::from_millis(20)).unwrap_err();
    assert!(start.elapsed() >= Duration::from_millis(20));
    assert!(matches!(e, Error::TimedOut { .. }), "{e}");
    assert_eq!(e.errno(), Some(Errno::TIMEDOUT));
    assert_eq!(s.qp.outstanding(), (2, 0), "a timeout keeps both");

    s.complete(0, sys::SIW_OP_SEND);
    s.complete(1, sys::SIW_OP_SEND);
    let first = s.qp.wait(Duration::from_secs(1)).unwrap();
    assert_eq!(first.wr_id, 21);
    assert_eq!(first.status(), Some(WcStatus::Success));
    assert_eq!(first.into_memory().unwrap().buffer()[0], 1);
    let rest = s.poll();
    assert_eq!(rest.len(), 1, "{rest:?}");
    assert_eq!(rest[0].wr_id, 22);
    assert_eq!(s.qp.outstanding(), (0, 0));
}
