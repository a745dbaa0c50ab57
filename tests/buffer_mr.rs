//! The buffer-owning MR on a recording fake kernel: retargeting hands the
//! old buffer back only after the kernel let go, failures return both
//! buffers, and a buffer is never freed while it may still be registered.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use common::{fork_safety_with, FakeKernel, RecordingAdvisor, OWNED};
use uverbs::device::OpenOptions;
use uverbs::error::Errno;
use uverbs::fork::{Advice, ForkMode};
use uverbs::mr::{
    MrState, ReregFallback, ReregFlags, ReregOutcome, ReregPath, RetargetBuffers, StableBuffer,
};
use uverbs::transport::RecordingTransport;
use uverbs::{uverbs_uapi as sys, AccessFlags, BufferMr, ProtectionDomain};

/// A fresh fake kernel and a PD in it.
fn setup() -> (Arc<RecordingTransport>, ProtectionDomain) {
    let FakeKernel { fake, pd1, .. } = FakeKernel::new();
    (fake, pd1)
}

/// A buffer MR over 4096 bytes of 1s, whose next REREG_MR the fake kernel
/// refuses with `errno`.
fn rereg_refused_with(errno: Errno) -> (Arc<RecordingTransport>, BufferMr<Vec<u8>>) {
    let (fake, pd) = setup();
    let mr = pd.reg_buffer(vec![1u8; 4096], OWNED).unwrap();
    fake.fail_next(sys::IB_USER_VERBS_CMD_REREG_MR, errno);
    (fake, mr)
}

/// A buffer that reports when it is dropped, and whether the fake kernel
/// still had a live MR at that moment.
#[derive(Debug)]
struct Watched {
    bytes: Box<[u8]>,
    dropped: Arc<AtomicBool>,
    dropped_while_registered: Arc<AtomicBool>,
    fake: Arc<RecordingTransport>,
}

impl Drop for Watched {
    fn drop(&mut self) {
        self.dropped.store(true, Ordering::SeqCst);
        if self.fake.live_mrs() != 0 {
            self.dropped_while_registered.store(true, Ordering::SeqCst);
        }
    }
}

// SAFETY: the boxed slice never moves or changes length.
unsafe impl StableBuffer for Watched {
    fn as_mut_ptr(&mut self) -> *mut u8 {
        self.bytes.as_mut_ptr()
    }
    fn len(&self) -> usize {
        self.bytes.len()
    }
    fn as_slice(&self) -> &[u8] {
        &self.bytes
    }
    fn as_mut_slice(&mut self) -> &mut [u8] {
        &mut self.bytes
    }
}

fn watched(fake: &Arc<RecordingTransport>) -> (Watched, Arc<AtomicBool>, Arc<AtomicBool>) {
    let dropped = Arc::new(AtomicBool::new(false));
    let early = Arc::new(AtomicBool::new(false));
    let buf = Watched {
        bytes: vec![0; 4096].into(),
        dropped: dropped.clone(),
        dropped_while_registered: early.clone(),
        fake: fake.clone(),
    };
    (buf, dropped, early)
}

#[test]
fn retarget_in_place_hands_the_old_buffer_back() {
    let (fake, pd) = setup();
    let mut mr = pd.reg_buffer(vec![1u8; 4096], OWNED).unwrap();
    mr.buffer_mut()[0] = 9;
    let handle = mr.handle();
    let done = mr.retarget(vec![2u8; 8192], ReregFallback::Strict).unwrap();
    assert_eq!(done.path, ReregPath::InPlace);
    assert_eq!(done.mr.handle(), handle);
    assert_eq!((done.old.len(), done.old[0]), (4096, 9));
    assert_eq!((done.mr.length(), done.mr.buffer()[0]), (8192, 2));
    assert_eq!(done.mr.addr() as *const u8, done.mr.buffer().as_ptr());
    assert!(done.fork_warning.is_none());
    assert_eq!(fake.live_mrs(), 1);
}

/// A strict retarget of a fresh region (buffer of 1s) to a buffer of 2s,
/// which the fake kernel refuses with `errno`; checks the outcome and the
/// MR state, and returns the fake, the old handle and where the buffers are.
fn strict_retarget_refused(
    errno: Errno,
    state: MrState,
) -> (Arc<RecordingTransport>, u32, RetargetBuffers<Vec<u8>>) {
    let (fake, mr) = rereg_refused_with(errno);
    let handle = mr.handle();
    let err = mr
        .retarget(vec![2u8; 4096], ReregFallback::Strict)
        .unwrap_err();
    assert_eq!(
        (err.error.outcome(), err.error.errno(), err.error.mr_state()),
        (ReregOutcome::Cmd, errno, state)
    );
    (fake, handle, err.buffers)
}

#[test]
fn strict_retarget_refused_without_change_keeps_the_region() {
    // EOPNOTSUPP comes before any driver changes anything: the MR is as it was.
    let (fake, handle, buffers) = strict_retarget_refused(Errno::OPNOTSUPP, MrState::Old);
    let RetargetBuffers::Kept { mr, new } = buffers else {
        panic!("an unchanged MR must be kept with its buffer")
    };
    assert_eq!((mr.handle(), mr.buffer()[0]), (handle, 1));
    assert_eq!(new.expect("nothing reaches the new buffer")[0], 2);
    assert_eq!(fake.live_mrs(), 1);
}

#[test]
fn strict_retarget_left_undefined_releases_both_buffers() {
    // On an unknown driver an EINVAL may come from midway: undefined.
    let (fake, _, buffers) = strict_retarget_refused(Errno::INVAL, MrState::Undefined);
    match buffers {
        RetargetBuffers::Released { old, new } => assert_eq!((old[0], new[0]), (1, 2)),
        RetargetBuffers::Kept { .. } => {
            panic!("an undefined MR must be deregistered and both buffers returned")
        }
    }
    assert_eq!(fake.live_mrs(), 0);
}

#[test]
fn replace_retarget_works_where_the_kernel_refuses() {
    let (fake, mr) = rereg_refused_with(Errno::OPNOTSUPP);
    let handle = mr.handle();
    let done = mr
        .retarget(vec![2u8; 4096], ReregFallback::Replace)
        .unwrap();
    assert_eq!(done.path, ReregPath::Replaced);
    assert_ne!(done.mr.handle(), handle);
    assert_eq!((done.old[0], done.mr.buffer()[0]), (1, 2));
    assert_eq!(fake.live_mrs(), 1);
}

#[test]
fn failed_replace_keeps_the_region_and_returns_the_new_buffer() {
    let (fake, mr) = rereg_refused_with(Errno::OPNOTSUPP);
    let handle = mr.handle();
    fake.fail_next(sys::IB_USER_VERBS_CMD_REG_MR, Errno::FAULT);
    let err = mr
        .retarget(vec![2u8; 4096], ReregFallback::Replace)
        .unwrap_err();
    assert_eq!(
        (err.error.errno(), err.error.mr_state()),
        (Errno::FAULT, MrState::Old)
    );
    let RetargetBuffers::Kept { mut mr, new } = err.buffers else {
        panic!("the old MR is valid: it must be kept")
    };
    assert_eq!(
        (
            mr.handle(),
            mr.buffer()[0],
            new.expect("no registration reaches the new buffer")[0]
        ),
        (handle, 1, 2)
    );
    mr.set_access(AccessFlags::LOCAL_WRITE).unwrap();
}

#[test]
fn empty_new_buffer_is_input_and_sends_nothing() {
    let (fake, pd) = setup();
    let mr = pd.reg_buffer(vec![1u8; 4096], OWNED).unwrap();
    let sent = fake.count();
    let err = mr.retarget(Vec::new(), ReregFallback::Replace).unwrap_err();
    assert_eq!(err.error.outcome(), ReregOutcome::Input);
    assert_eq!(fake.count(), sent);
    assert!(matches!(err.buffers, RetargetBuffers::Kept { .. }));
}

#[test]
fn translation_through_rereg_with_is_refused() {
    let (fake, pd) = setup();
    let mut mr = pd.reg_buffer(vec![1u8; 4096], OWNED).unwrap();
    let sent = fake.count();
    let err = mr
        .rereg_with(
            ReregFallback::Replace,
            ReregFlags::TRANSLATION,
            None,
            AccessFlags::empty(),
        )
        .unwrap_err();
    assert_eq!(err.outcome(), ReregOutcome::Input);
    assert_eq!(fake.count(), sent);
    let pd2 = pd.context().alloc_pd().unwrap();
    fake.fail_next(sys::IB_USER_VERBS_CMD_REREG_MR, Errno::OPNOTSUPP);
    let path = mr
        .rereg_with(
            ReregFallback::Replace,
            ReregFlags::PD,
            Some(&pd2),
            AccessFlags::empty(),
        )
        .unwrap();
    assert_eq!(path, ReregPath::Replaced);
    assert!(mr.is_in(&pd2));
}

#[test]
fn the_buffer_is_freed_only_after_deregistration() {
    let (fake, pd) = setup();
    let (buf, dropped, early) = watched(&fake);
    let mr = pd.reg_buffer(buf, OWNED).unwrap();
    drop(mr);
    assert!(dropped.load(Ordering::SeqCst));
    assert!(
        !early.load(Ordering::SeqCst),
        "the buffer was dropped while still registered"
    );
}

#[test]
fn a_buffer_that_cannot_be_deregistered_is_leaked_not_freed() {
    let (fake, pd) = setup();
    let (buf, dropped, _) = watched(&fake);
    let mr = pd.reg_buffer(buf, OWNED).unwrap();
    // Both the BufferMr's dereg and the MemoryRegion's retry fail.
    fake.fail_next(sys::IB_USER_VERBS_CMD_DEREG_MR, Errno::BUSY);
    fake.fail_next(sys::IB_USER_VERBS_CMD_DEREG_MR, Errno::BUSY);
    drop(mr);
    assert!(
        !dropped.load(Ordering::SeqCst),
        "memory the device may reach must never be freed"
    );
    assert_eq!(fake.live_mrs(), 1);
}

#[test]
fn a_panic_inside_retarget_leaks_the_buffers_instead_of_freeing_them() {
    let armed = RecordingAdvisor::default();
    let fork = fork_safety_with(ForkMode::Enabled, armed.clone());
    let FakeKernel { fake, pd1: pd, .. } =
        FakeKernel::with_options(&OpenOptions::new().fork_safety(fork));
    let (old, old_dropped, old_early) = watched(&fake);
    let (new, new_dropped, new_early) = watched(&fake);
    let mr = pd.reg_buffer(old, OWNED).unwrap();
    armed.panic_once_on(Advice::DontFork);
    // Marking the new buffer for fork panics while the old one is registered.
    let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        mr.retarget(new, ReregFallback::Strict).is_ok()
    }));
    assert!(unwound.is_err(), "the advisor's panic propagates");
    assert!(
        !old_early.load(Ordering::SeqCst),
        "old buffer freed while registered"
    );
    assert!(
        !new_early.load(Ordering::SeqCst),
        "new buffer freed while registered"
    );
    assert!(
        !old_dropped.load(Ordering::SeqCst) && !new_dropped.load(Ordering::SeqCst),
        "both buffers are leaked"
    );
    assert_eq!(
        fake.live_mrs(),
        0,
        "unwinding still deregistered the region"
    );
}

#[test]
fn replace_retarget_whose_deregistrations_fail_never_returns_the_new_buffer() {
    let (fake, pd) = setup();
    let (old, old_dropped, _) = watched(&fake);
    let (new, new_dropped, _) = watched(&fake);
    let mr = pd.reg_buffer(old, OWNED).unwrap();
    fake.fail_next(sys::IB_USER_VERBS_CMD_REREG_MR, Errno::OPNOTSUPP);
    fake.fail_next(sys::IB_USER_VERBS_CMD_DEREG_MR, Errno::IO); // the old registration
    fake.fail_next(sys::IB_USER_VERBS_CMD_DEREG_MR, Errno::IO); // the new one
    let err = mr.retarget(new, ReregFallback::Replace).unwrap_err();
    assert!(err.error.new_range_still_registered(), "{}", err.error);
    let RetargetBuffers::Kept { mr, new } = err.buffers else {
        panic!("the old MR is valid: it must be kept")
    };
    assert!(
        new.is_none(),
        "a buffer a registration reaches must not come back"
    );
    assert!(
        !new_dropped.load(Ordering::SeqCst),
        "and it is leaked, not freed"
    );
    assert_eq!(fake.live_mrs(), 2);
    // The kept region still deregisters and frees its own buffer; the
    // abandoned registration stays until the context closes.
    drop(mr);
    assert!(old_dropped.load(Ordering::SeqCst));
    assert_eq!(fake.live_mrs(), 1);
}

#[test]
fn strict_retarget_left_undefined_and_not_deregistered_keeps_the_new_buffer_away() {
    let (fake, pd) = setup();
    let (old, _, _) = watched(&fake);
    let mr = pd.reg_buffer(old, OWNED).unwrap();
    let (new, new_dropped, _) = watched(&fake);
    fake.fail_next(sys::IB_USER_VERBS_CMD_REREG_MR, Errno::FAULT);
    fake.fail_next(sys::IB_USER_VERBS_CMD_DEREG_MR, Errno::IO);
    let err = mr.retarget(new, ReregFallback::Strict).unwrap_err();
    assert_eq!(err.error.mr_state(), MrState::Undefined);
    let RetargetBuffers::Kept { new, .. } = err.buffers else {
        panic!("the region could not be deregistered: it must be kept")
    };
    assert!(
        new.is_none(),
        "the undefined region may reach the new buffer"
    );
    assert!(!new_dropped.load(Ordering::SeqCst));
}

/// Every access a remote peer could write through, alone and with others.
fn peer_writable_access() -> Vec<AccessFlags> {
    let lw = AccessFlags::LOCAL_WRITE;
    vec![
        lw | AccessFlags::REMOTE_WRITE,
        lw | AccessFlags::REMOTE_READ | AccessFlags::REMOTE_WRITE,
        lw | AccessFlags::REMOTE_ATOMIC,
        lw | AccessFlags::MW_BIND,
        lw | AccessFlags::from_bits_retain(1 << 30),
    ]
}

/// A BufferMr hands out plain slices, so no peer may write it: such access
/// is refused at registration with the buffer back and nothing sent.
#[test]
fn a_buffer_mr_refuses_access_a_peer_could_write_through() {
    let (fake, pd) = setup();
    for access in peer_writable_access() {
        let sent = fake.count();
        let err = pd.reg_buffer(vec![5u8; 64], access).unwrap_err();
        assert_eq!(err.buffer, vec![5u8; 64], "{access:?}: the buffer back");
        assert_eq!(err.error.errno(), Some(Errno::INVAL), "{access:?}");
        assert!(
            err.error.to_string().contains("reg_remote_buffer"),
            "{access:?}: {}",
            err.error
        );
        assert_eq!(fake.count(), sent, "{access:?}: nothing sent");
    }
    assert_eq!(fake.live_mrs(), 0);
}

/// Nor can a registered BufferMr gain such access in place: set_access,
/// apply and rereg_with refuse it (INPUT, nothing sent, the MR unchanged).
#[test]
fn a_buffer_mr_never_becomes_peer_writable() {
    let (fake, pd) = setup();
    let mut mr = pd.reg_buffer(vec![1u8; 4096], OWNED).unwrap();
    for access in peer_writable_access() {
        let sent = fake.count();
        let errors = [
            mr.set_access(access).unwrap_err(),
            mr.apply(
                &uverbs::mr::Rereg::new().access(access),
                ReregFallback::Replace,
            )
            .unwrap_err(),
            mr.rereg_with(ReregFallback::Replace, ReregFlags::ACCESS, None, access)
                .map(drop)
                .unwrap_err(),
        ];
        for e in errors {
            assert_eq!(e.outcome(), ReregOutcome::Input, "{access:?}: {e}");
            assert_eq!(e.mr_state(), MrState::Old, "{access:?}");
        }
        assert_eq!(fake.count(), sent, "{access:?}: nothing sent");
        assert_eq!(mr.access(), OWNED);
    }
    // Access no peer can write through still changes.
    mr.set_access(AccessFlags::LOCAL_WRITE).unwrap();
    assert_eq!(mr.access(), AccessFlags::LOCAL_WRITE);
}

/// A remotely writable region: its bytes through volatile copies and an
/// atomic word only; the buffer comes back plain after dereg.
#[test]
fn a_remote_buffer_is_reached_by_copies_and_atomics() {
    let (fake, pd) = setup();
    let rw = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;
    let mut mr = pd.reg_remote_buffer(vec![0u8; 4096], rw).unwrap();
    assert_eq!((mr.len(), mr.mr().access()), (4096, rw));
    assert_eq!(fake.live_mrs(), 1);
    mr.copy_in(100, b"hello").unwrap();
    let mut out = [0u8; 5];
    mr.copy_out(100, &mut out).unwrap();
    assert_eq!(&out, b"hello");
    // Out of range: typed, nothing copied.
    let err = mr.copy_out(4094, &mut out).unwrap_err();
    assert_eq!((err.start, err.end, err.len), (4094, 4099, 4096));
    assert!(mr.copy_in(usize::MAX, b"x").is_err());
    // An aligned word is an atomic; an unaligned or outside one is not.
    let base = mr.addr() as usize;
    let aligned = (8 - base % 8) % 8;
    mr.atomic_u64(aligned)
        .unwrap()
        .store(0xfeed, Ordering::Release);
    assert!(mr.atomic_u64(aligned + 1).is_none());
    assert!(mr.atomic_u64(4096 - 4).is_none());
    let mut word = [0u8; 8];
    mr.copy_out(aligned, &mut word).unwrap();
    assert_eq!(u64::from_ne_bytes(word), 0xfeed);
    // Removing REMOTE_WRITE in place keeps it a remote region.
    mr.set_access(AccessFlags::LOCAL_WRITE).unwrap();
    let plain = mr.dereg().unwrap();
    assert_eq!(&plain[100..105], b"hello");
    assert_eq!(fake.live_mrs(), 0);
}

/// A remote region retargets like a BufferMr and stays remote.
#[test]
fn a_remote_buffer_retargets_and_stays_remote() {
    let (fake, pd) = setup();
    let rw = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;
    let mut mr = pd.reg_remote_buffer(vec![1u8; 4096], rw).unwrap();
    mr.copy_in(0, &[9]).unwrap();
    let done = mr
        .retarget(vec![2u8; 8192], ReregFallback::Replace)
        .unwrap();
    assert_eq!(done.old[0], 9, "the old buffer back, plain");
    let mut mr = done.mr;
    assert_eq!(mr.len(), 8192);
    let mut b = [0u8; 1];
    mr.copy_out(8191, &mut b).unwrap();
    assert_eq!(b, [2]);
    drop(mr);
    assert_eq!(fake.live_mrs(), 0);
}

/// `MemoryRegion::sge` and `remote`: checked ranges of a raw MR, named by
/// its address and keys; a range past the end or reversed is refused with
/// the numbers, and nothing reaches the kernel.
#[test]
fn a_raw_mrs_sge_and_remote_are_checked_ranges() {
    let mut k = FakeKernel::new();
    let mr = k.reg(AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE);
    let before = k.fake.count();
    let (addr, len) = (mr.addr(), mr.length());
    let sge = mr.sge(64..128).unwrap();
    assert_eq!((sge.addr, sge.length, sge.lkey), (addr + 64, 64, mr.lkey()));
    let all = mr.sge(..).unwrap();
    assert_eq!((all.addr, all.length as usize), (addr, len));
    let tail = mr.sge(len - 8..=len - 1).unwrap();
    assert_eq!((tail.addr, tail.length), (addr + len as u64 - 8, 8));
    assert_eq!(mr.sge(len..).unwrap().length, 0, "empty at the end");
    let remote = mr.remote(4096..).unwrap();
    assert_eq!((remote.addr, remote.rkey), (addr + 4096, mr.rkey()));
    let err = mr.sge(len - 1..len + 1).unwrap_err();
    assert_eq!((err.start, err.end, err.len), (len - 1, len + 1, len));
    assert_eq!(
        err.to_string(),
        format!(
            "range {}..{} is outside the {len} registered bytes",
            len - 1,
            len + 1
        )
    );
    #[allow(clippy::reversed_empty_ranges)]
    let reversed = mr.remote(10..5).unwrap_err();
    assert_eq!((reversed.start, reversed.end), (10, 5));
    assert!(mr.remote(..=len).is_err());
    assert_eq!(k.fake.count(), before, "nothing sent");
}

const REREG: u32 = sys::IB_USER_VERBS_CMD_REREG_MR;
const REG: u32 = sys::IB_USER_VERBS_CMD_REG_MR;
const DEREG: u32 = sys::IB_USER_VERBS_CMD_DEREG_MR;

/// What a remote region was registered with in the fallback tests: a peer
/// may read it, not write it.
const READ_ONLY_FOR_PEERS: AccessFlags = OWNED;
/// What it is given: a peer may write it too.
const PEER_WRITABLE: AccessFlags = AccessFlags::LOCAL_WRITE
    .union(AccessFlags::REMOTE_READ)
    .union(AccessFlags::REMOTE_WRITE);

/// A remote region over 4096 bytes holding 0..=255 repeated.
fn remote_region(pd: &ProtectionDomain) -> uverbs::mr::RemoteBufferMr<Vec<u8>> {
    let bytes: Vec<u8> = (0..4096).map(|i| i as u8).collect();
    pd.reg_remote_buffer(bytes, READ_ONLY_FOR_PEERS).unwrap()
}

/// Every byte of a remote region, copied out.
fn remote_bytes(mr: &mut uverbs::mr::RemoteBufferMr<Vec<u8>>) -> Vec<u8> {
    let mut out = vec![0; mr.len()];
    mr.copy_out(0, &mut out).unwrap();
    out
}

/// (handle, lkey, rkey).
fn keys(mr: &uverbs::MemoryRegion) -> (u32, u32, u32) {
    (mr.handle(), mr.lkey(), mr.rkey())
}

/// issue 38, item 4: a device that refuses ACCESS in place (siw; rxe on
/// 6.1) answers `set_access` with EOPNOTSUPP; `rereg_with(Replace, …)`
/// registers the same buffer anew with the new access, then deregisters the
/// old registration: new handle and keys, the memory and its bytes kept,
/// one live MR. Remotely writable access is what a RemoteBufferMr is for, so
/// it is accepted (a BufferMr refuses it).
#[test]
fn a_remote_buffer_changes_access_by_replacement_where_refused_in_place() {
    let (fake, pd) = setup();
    let mut mr = remote_region(&pd);
    let before = keys(mr.mr());
    let (addr, len) = (mr.addr(), mr.len());
    let bytes = remote_bytes(&mut mr);

    // Strict, as before: refused, nothing changed.
    fake.fail_next(REREG, Errno::OPNOTSUPP);
    let err = mr.set_access(PEER_WRITABLE).unwrap_err();
    assert_eq!(
        (err.outcome(), err.errno(), err.mr_state()),
        (ReregOutcome::Cmd, Errno::OPNOTSUPP, MrState::Old)
    );
    assert_eq!(keys(mr.mr()), before);
    assert_eq!(mr.mr().access(), READ_ONLY_FOR_PEERS);
    pd.context().forget_rereg_refusals();

    // The fallback: REREG_MR refused, then REG_MR of the same buffer, then
    // DEREG_MR of the old handle.
    fake.fail_next(REREG, Errno::OPNOTSUPP);
    let sent = fake.count();
    let path = mr
        .rereg_with(
            ReregFallback::Replace,
            ReregFlags::ACCESS,
            None,
            PEER_WRITABLE,
        )
        .unwrap();
    assert_eq!(path, ReregPath::Replaced);
    let codes: Vec<u32> = fake.commands()[sent..].iter().map(|c| c.code).collect();
    assert_eq!(codes, [REREG, REG, DEREG]);
    let reg: sys::ib_uverbs_reg_mr = fake.commands()[sent + 1].request().unwrap();
    assert_eq!(
        (reg.start, reg.length, reg.access_flags),
        (addr, len as u64, PEER_WRITABLE.bits()),
        "the same buffer, with the new access"
    );
    let dereg: sys::ib_uverbs_dereg_mr = fake.commands().last().unwrap().request().unwrap();
    assert_eq!(dereg.mr_handle, before.0, "the old registration is gone");
    let after = keys(mr.mr());
    assert_ne!(after.0, before.0, "a new handle");
    assert_ne!(after.1, before.1, "a new lkey");
    assert_ne!(after.2, before.2, "a new rkey");
    assert_eq!(mr.rkey(), after.2);
    assert_eq!(mr.mr().access(), PEER_WRITABLE);
    assert_eq!((mr.addr(), mr.len()), (addr, len), "the same memory");
    assert_eq!(remote_bytes(&mut mr), bytes, "its bytes kept");
    assert_eq!(fake.live_mrs(), 1, "exactly one live MR");
    assert!(pd.context().rereg_known_unsupported(ReregFlags::ACCESS));

    // Remembered: the next one skips the doomed REREG_MR.
    let sent = fake.count();
    let path = mr
        .rereg_with(
            ReregFallback::Replace,
            ReregFlags::ACCESS,
            None,
            READ_ONLY_FOR_PEERS,
        )
        .unwrap();
    assert_eq!(path, ReregPath::Replaced);
    let codes: Vec<u32> = fake.commands()[sent..].iter().map(|c| c.code).collect();
    assert_eq!(codes, [REG, DEREG]);
    assert_eq!(mr.mr().access(), READ_ONLY_FOR_PEERS);
    assert_eq!(fake.live_mrs(), 1);

    // Where the kernel accepts (rxe on 6.12), in place: same handle.
    pd.context().forget_rereg_refusals();
    let handle = mr.mr().handle();
    let path = mr
        .rereg_with(
            ReregFallback::Replace,
            ReregFlags::ACCESS,
            None,
            PEER_WRITABLE,
        )
        .unwrap();
    assert_eq!(path, ReregPath::InPlace);
    assert_eq!(mr.mr().handle(), handle);
    assert_eq!(mr.mr().access(), PEER_WRITABLE);

    let plain = mr.dereg().unwrap();
    assert_eq!(plain, bytes, "the buffer back, plain, with its bytes");
    assert_eq!(fake.live_mrs(), 0);
}

/// `RemoteBufferMr::apply` with PD and access together, replaced; a
/// translation is refused before anything is sent (the buffer is owned:
/// `retarget` moves it), as for a BufferMr.
#[test]
fn a_remote_buffer_moves_pd_and_access_by_replacement_but_never_its_translation() {
    let (fake, pd) = setup();
    let pd2 = pd.context().alloc_pd().unwrap();
    let mut mr = remote_region(&pd);
    let bytes = remote_bytes(&mut mr);
    let sent = fake.count();
    for err in [
        mr.rereg_with(
            ReregFallback::Replace,
            ReregFlags::TRANSLATION,
            None,
            AccessFlags::empty(),
        )
        .unwrap_err(),
        mr.rereg_with(
            ReregFallback::Replace,
            ReregFlags::all(),
            Some(&pd2),
            PEER_WRITABLE,
        )
        .unwrap_err(),
    ] {
        assert_eq!(
            (err.outcome(), err.mr_state()),
            (ReregOutcome::Input, MrState::Old),
            "{err}"
        );
        assert!(err.to_string().contains("retarget"), "{err}");
    }
    assert_eq!(fake.count(), sent, "nothing sent");

    let handle = mr.mr().handle();
    fake.fail_next(REREG, Errno::OPNOTSUPP);
    let change = uverbs::mr::Rereg::new().pd(&pd2).access(PEER_WRITABLE);
    let path = mr.apply(&change, ReregFallback::Replace).unwrap();
    assert_eq!(path, ReregPath::Replaced);
    assert_ne!(mr.mr().handle(), handle);
    assert!(mr.mr().is_in(&pd2));
    assert_eq!(fake.mr_pd(mr.mr().handle()), Some(pd2.handle()));
    assert_eq!(mr.mr().access(), PEER_WRITABLE);
    assert_eq!(remote_bytes(&mut mr), bytes);
    assert_eq!(fake.live_mrs(), 1);
    drop(mr);
    assert_eq!(fake.live_mrs(), 0);
}

/// A failed replacement (REG_MR refused) leaves the remote region as it
/// was: `Cmd` with the REG_MR errno, `Old`, same keys, access and bytes,
/// one live MR; it still changes afterwards.
#[test]
fn a_failed_replacement_leaves_the_remote_buffer_as_it_was() {
    let (fake, pd) = setup();
    let mut mr = remote_region(&pd);
    let before = keys(mr.mr());
    let bytes = remote_bytes(&mut mr);
    fake.fail_next(REREG, Errno::OPNOTSUPP);
    fake.fail_next(REG, Errno::NOMEM);
    let err = mr
        .rereg_with(
            ReregFallback::Replace,
            ReregFlags::ACCESS,
            None,
            PEER_WRITABLE,
        )
        .unwrap_err();
    assert_eq!(
        (err.outcome(), err.errno(), err.mr_state()),
        (ReregOutcome::Cmd, Errno::NOMEM, MrState::Old),
        "{err}"
    );
    assert!(!err.new_range_still_registered());
    assert_eq!(keys(mr.mr()), before);
    assert_eq!(mr.mr().access(), READ_ONLY_FOR_PEERS);
    assert_eq!(remote_bytes(&mut mr), bytes);
    assert_eq!(fake.live_mrs(), 1);
    // Still valid: the next replacement works (the refusal is remembered).
    let path = mr
        .rereg_with(
            ReregFallback::Replace,
            ReregFlags::ACCESS,
            None,
            PEER_WRITABLE,
        )
        .unwrap();
    assert_eq!(path, ReregPath::Replaced);
    assert_eq!(fake.live_mrs(), 1);
    assert_eq!(mr.dereg().unwrap(), bytes);
}

/// A replacement whose old registration cannot be deregistered, nor the
/// new one released again, abandons the new one: it reaches the buffer
/// until the context is closed. The region is valid and unchanged, but its
/// buffer is never handed back (dereg and retarget refuse, nothing sent)
/// and dropping it deregisters the region and leaks the buffer instead of
/// freeing memory a registration still reaches. For BufferMr and
/// RemoteBufferMr alike.
#[test]
fn a_buffer_an_abandoned_replacement_still_reaches_is_never_freed() {
    for remote in [false, true] {
        let (fake, pd) = setup();
        let (buf, dropped, _) = watched(&fake);
        let access = if remote { PEER_WRITABLE } else { OWNED };
        let to = AccessFlags::LOCAL_WRITE;
        // Both regions go through the same steps; the closures say how.
        let (handle, err, dereg_refused, retarget_refused): (u32, _, _, _) = if remote {
            let mut mr = pd.reg_remote_buffer(buf, access).unwrap();
            let handle = mr.mr().handle();
            abandon_next_replacement(&fake);
            let err = mr
                .rereg_with(ReregFallback::Replace, ReregFlags::ACCESS, None, to)
                .unwrap_err();
            assert_eq!(mr.mr().handle(), handle, "the old region is kept");
            let sent = fake.count();
            let mr = mr.dereg().unwrap_err();
            let dereg_err = mr.error.to_string();
            let mr = mr.mr;
            let (again, _, _) = watched(&fake);
            let retarget = mr.retarget(again, ReregFallback::Replace).unwrap_err();
            assert_eq!(fake.count(), sent, "remote: nothing sent");
            let RetargetBuffers::Kept { mr, new } = retarget.buffers else {
                panic!("remote: the region must be kept")
            };
            assert!(new.is_some(), "remote: the unregistered new buffer back");
            drop(mr);
            (handle, err, dereg_err, retarget.error)
        } else {
            let mut mr = pd.reg_buffer(buf, access).unwrap();
            let handle = mr.handle();
            abandon_next_replacement(&fake);
            let err = mr
                .rereg_with(ReregFallback::Replace, ReregFlags::ACCESS, None, to)
                .unwrap_err();
            assert_eq!(mr.handle(), handle, "the old region is kept");
            let sent = fake.count();
            let mr = mr.dereg().unwrap_err();
            let dereg_err = mr.error.to_string();
            let mr = mr.mr;
            let (again, _, _) = watched(&fake);
            let retarget = mr.retarget(again, ReregFallback::Replace).unwrap_err();
            assert_eq!(fake.count(), sent, "nothing sent");
            let RetargetBuffers::Kept { mr, new } = retarget.buffers else {
                panic!("the region must be kept")
            };
            assert!(new.is_some(), "the unregistered new buffer back");
            drop(mr);
            (handle, err, dereg_err, retarget.error)
        };
        let what = if remote { "RemoteBufferMr" } else { "BufferMr" };
        assert!(err.new_range_still_registered(), "{what}: {err}");
        assert_eq!(err.mr_state(), MrState::Old, "{what}: {err}");
        assert!(
            dereg_refused.contains("never handed back"),
            "{what}: {dereg_refused}"
        );
        assert_eq!(
            retarget_refused.outcome(),
            ReregOutcome::Input,
            "{what}: {retarget_refused}"
        );
        assert_eq!(pd.context().abandoned_registrations(), 1, "{what}");
        assert_eq!(
            fake.live_mrs(),
            1,
            "{what}: the region (handle {handle}) deregistered, the abandoned one left"
        );
        assert!(
            !dropped.load(Ordering::SeqCst),
            "{what}: a buffer a registration still reaches was freed"
        );
    }
}

/// The fake refuses the next REREG_MR (EOPNOTSUPP) and the two DEREG_MRs
/// after it: of the old registration, then of the new one.
fn abandon_next_replacement(fake: &RecordingTransport) {
    fake.fail_next(REREG, Errno::OPNOTSUPP);
    fake.fail_next(DEREG, Errno::IO);
    fake.fail_next(DEREG, Errno::IO);
}

/// A fresh fake kernel posing as siw (whose `DEREG_MR` does not stop READ
/// responses), and a PD in it.
fn siw_setup() -> (Arc<RecordingTransport>, ProtectionDomain) {
    let fake = Arc::new(RecordingTransport::new());
    let ctx = uverbs::Context::with_transport(
        "siw_fake0",
        Some(uverbs::device::DriverId::SIW),
        Box::new(fake.clone()),
        &OpenOptions::new(),
    )
    .unwrap();
    let pd = ctx.alloc_pd().unwrap();
    (fake, pd)
}

/// Issue 38 item 5: on siw a READ response keeps sending from the pages
/// after `DEREG_MR` returned, so a peer-readable buffer is handed back only
/// once the caller said the peers' READs are done. Before that, `dereg`
/// and `retarget` refuse with `InvalidInput`, sending nothing and keeping
/// the region registered with its buffer; afterwards both work as ever.
/// For BufferMr and RemoteBufferMr alike.
#[test]
fn on_siw_a_peer_readable_buffer_comes_back_only_after_the_peers_reads() {
    for remote in [false, true] {
        let what = if remote { "RemoteBufferMr" } else { "BufferMr" };
        let (fake, pd) = siw_setup();
        let (buf, dropped, early) = watched(&fake);
        let (again, _, _) = watched(&fake);
        // The same steps for both region types, which share these methods
        // but no trait: dereg and retarget refused (nothing sent, the
        // region and the new buffer back), then both allowed once told.
        macro_rules! refused_until_told {
            ($mr:expr) => {{
                let mr = $mr;
                assert!(mr.peer_reads_outlive_dereg(), "{what}");
                let sent = fake.count();
                let e = mr.dereg().unwrap_err();
                let dereg_err = e.error;
                let r = e.mr.retarget(again, ReregFallback::Replace).unwrap_err();
                let RetargetBuffers::Kept { mut mr, new } = r.buffers else {
                    panic!("{what}: the region must be kept")
                };
                assert!(new.is_some(), "{what}: the new buffer back");
                assert_eq!(fake.count(), sent, "{what}: nothing sent");
                // SAFETY: no peer exists: nothing reads the region.
                unsafe { mr.assume_peer_reads_done() };
                assert!(!mr.peer_reads_outlive_dereg(), "{what}");
                (sent, dereg_err, r.error, mr.dereg().unwrap())
            }};
        }
        let (sent, dereg_err, retarget_err, buf) = if remote {
            refused_until_told!(pd.reg_remote_buffer(buf, PEER_WRITABLE).unwrap())
        } else {
            refused_until_told!(pd.reg_buffer(buf, OWNED).unwrap())
        };
        assert_eq!(
            dereg_err.op(),
            uverbs::error::Op::DeregMr,
            "{what}: {dereg_err}"
        );
        assert!(
            matches!(dereg_err, uverbs::Error::InvalidInput { .. }),
            "{what}: {dereg_err:?}"
        );
        assert!(
            dereg_err.to_string().contains("assume_peer_reads_done"),
            "{what}: the error names the way out: {dereg_err}"
        );
        assert_eq!(retarget_err.outcome(), ReregOutcome::Input, "{what}");
        assert_eq!(retarget_err.mr_state(), MrState::Old, "{what}");
        assert_eq!(fake.count(), sent + 1, "{what}: one DEREG_MR, at the end");
        assert_eq!(fake.live_mrs(), 0, "{what}");
        assert!(
            !dropped.load(Ordering::SeqCst),
            "{what}: handed back, not dropped"
        );
        drop(buf);
        assert!(dropped.load(Ordering::SeqCst), "{what}");
        assert!(!early.load(Ordering::SeqCst), "{what}");
    }
}

/// On siw, dropping a region peers could read deregisters it and leaks the
/// buffer: freeing it could hand memory to the allocator that a READ
/// response still sends from.
#[test]
fn on_siw_a_dropped_peer_readable_buffer_is_deregistered_and_leaked() {
    for remote in [false, true] {
        let what = if remote { "RemoteBufferMr" } else { "BufferMr" };
        let (fake, pd) = siw_setup();
        let (buf, dropped, _) = watched(&fake);
        if remote {
            drop(pd.reg_remote_buffer(buf, PEER_WRITABLE).unwrap());
        } else {
            drop(pd.reg_buffer(buf, OWNED).unwrap());
        }
        assert_eq!(fake.live_mrs(), 0, "{what}: deregistered");
        assert!(
            !dropped.load(Ordering::SeqCst),
            "{what}: leaked, never freed"
        );
    }
}

/// Where `DEREG_MR` fences READs (here a driver the crate does not know,
/// taken to be hardware), or on siw where peers could never read the
/// region, the buffer comes back at once and a drop frees it.
#[test]
fn a_buffer_no_unfenced_read_can_reach_comes_back_at_once() {
    let (fake, pd) = setup();
    let mr = pd.reg_buffer(vec![1u8; 4096], OWNED).unwrap();
    assert!(!mr.peer_reads_outlive_dereg());
    assert_eq!(mr.dereg().unwrap().len(), 4096);
    assert_eq!(fake.live_mrs(), 0);

    let (fake, pd) = siw_setup();
    let (buf, dropped, _) = watched(&fake);
    let mr = pd.reg_buffer(buf, AccessFlags::LOCAL_WRITE).unwrap();
    assert!(!mr.peer_reads_outlive_dereg());
    drop(mr);
    assert!(dropped.load(Ordering::SeqCst), "freed after deregistration");
    let mr = pd
        .reg_buffer(vec![2u8; 4096], AccessFlags::LOCAL_WRITE)
        .unwrap();
    assert_eq!(mr.dereg().unwrap(), vec![2u8; 4096]);
}

/// The note is sticky: a region that let peers read keeps refusing after
/// REMOTE_READ is taken away (a READ taken before may still be sending),
/// and one that gains REMOTE_READ by replacement starts refusing.
#[test]
fn on_siw_remote_read_granted_at_any_time_counts() {
    let (fake, pd) = siw_setup();
    let mut mr = pd
        .reg_buffer(vec![1u8; 4096], AccessFlags::LOCAL_WRITE)
        .unwrap();
    assert!(!mr.peer_reads_outlive_dereg());
    fake.fail_next(sys::IB_USER_VERBS_CMD_REREG_MR, Errno::OPNOTSUPP);
    let path = mr
        .rereg_with(ReregFallback::Replace, ReregFlags::ACCESS, None, OWNED)
        .unwrap();
    assert_eq!(path, ReregPath::Replaced);
    assert!(mr.peer_reads_outlive_dereg(), "granted by replacement");
    fake.fail_next(sys::IB_USER_VERBS_CMD_REREG_MR, Errno::OPNOTSUPP);
    mr.rereg_with(
        ReregFallback::Replace,
        ReregFlags::ACCESS,
        None,
        AccessFlags::LOCAL_WRITE,
    )
    .unwrap();
    assert_eq!(mr.access(), AccessFlags::LOCAL_WRITE);
    assert!(mr.peer_reads_outlive_dereg(), "taken away: still noted");
    let mut mr = mr.dereg().unwrap_err().mr;
    // SAFETY: no peer exists: nothing reads the region.
    unsafe { mr.assume_peer_reads_done() };
    assert_eq!(mr.dereg().unwrap(), vec![1u8; 4096]);
    assert_eq!(fake.live_mrs(), 0);
}
