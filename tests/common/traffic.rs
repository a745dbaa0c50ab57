//! The requester side of the re-registration traffic tests, one for both
//! rigs: `device_rereg_traffic` (RC QPs connected by hand, by the cm on
//! siw) and `device_cm_rereg` (connected by the rdma_cm). A posts WRITEs,
//! READs and atomics from its source buffer into memory of B's whose MR is
//! re-registered; what lands, what comes back and what is refused is
//! checked byte for byte. Each rig says how it reaches its QPs and how it
//! recovers from a refusal ([`Requester`]); the rest is here.

use std::time::Duration;

use uverbs::error::Errno;
use uverbs::mr::{MrState, RemoteBufferMr, ReregError, ReregFlags, ReregOutcome, ReregPath};
use uverbs::wr::{RecvWr, Remote, SendOp, WcOpcode, WcStatus, WorkCompletion};
use uverbs::{AccessFlags, CompletionQueue, MemoryRegion, ProtectionDomain, QueuePair};

use super::{
    anon, assert_no_completion, check, fresh_mr, loud, pattern, replace, sge, signalled, wait_one,
    HandleCounts, RW,
};

/// What the requester sees when the responder refuses an rkey, whatever
/// the reason (access bits, PD, unknown key): rxe's responder finds no MR
/// for (PD, access, rkey) (`lookup_mr`), NAKs with "remote access error",
/// and the requester completes with `IB_WC_REM_ACCESS_ERR`. (rdma-core's
/// PD case expects "remote operation error", what mlx5 answers.)
pub const REFUSED: WcStatus = WcStatus::RemAccessErr;

/// The receive without SGEs that B holds while a refused request is in
/// flight: the device flushes it when it moves B to ERR, which is how the
/// responder's side of a refusal shows.
pub const PROBE: u64 = 0x9e0be;

/// Bytes of each WRITE, and where in the target buffer it goes (so that
/// the bytes on both sides of it can be checked too).
pub const MSG: usize = 256;
pub const AT: usize = 512;
/// The size of each buffer.
pub const LEN: usize = 4096;

/// What an atomic's target MR grants.
pub const ATOMIC: AccessFlags = AccessFlags::LOCAL_WRITE.union(AccessFlags::REMOTE_ATOMIC);
/// The value at the atomic's target ([`AT`]) before the first FETCH_ADD.
pub const OLD: u64 = 0x1122_3344_5566_7788;
/// What each FETCH_ADD adds.
pub const ADD: u64 = 0x0101_0000_0000_0003;
/// Where in A's source buffer a FETCH_ADD returns the old value.
pub const RESULT_AT: usize = 1024;

/// Every byte of `b` now. The device writes memory the program holds a
/// shared borrow of (a target buffer, passed down as `&[u8]`), so each
/// read is volatile: the compiler may neither reuse an earlier read nor
/// take the bytes for unchanged (in release builds a FETCH_ADD's second
/// sum was read as its first before this).
pub fn now(b: &[u8]) -> Vec<u8> {
    b.iter()
        // SAFETY: each pointer is to a byte of `b`, valid and aligned.
        .map(|x| unsafe { std::ptr::read_volatile(x) })
        .collect()
}

/// The word at [`AT`] now: an atomic's target.
pub fn target_word(dst: &[u8]) -> u64 {
    u64::from_ne_bytes(now(&dst[AT..AT + 8]).try_into().unwrap())
}

/// `remote` at offset [`AT`] of `target`.
pub fn at(target: &[u8], rkey: u32) -> Remote {
    at_addr(target.as_ptr() as u64, rkey)
}

/// `remote` at offset [`AT`] of memory at `base`.
pub fn at_addr(base: u64, rkey: u32) -> Remote {
    Remote {
        addr: base + AT as u64,
        rkey,
    }
}

/// (handle, lkey, rkey).
pub fn keys(mr: &MemoryRegion) -> (u32, u32, u32) {
    (mr.handle(), mr.lkey(), mr.rkey())
}

/// What a strict in-place change must leave: same handle, same keys.
pub fn same_keys(mr: &MemoryRegion, keys: (u32, u32, u32), what: &str) {
    assert_eq!(
        (mr.handle(), mr.lkey(), mr.rkey()),
        keys,
        "{what}: an in-place change keeps the handle and the keys"
    );
}

/// A change the device refuses in place (siw always; rxe a translation):
/// `Cmd`, `EOPNOTSUPP`, the MR `Old`: same handle and keys as before.
pub fn refused_in_place(mr: &MemoryRegion, k: (u32, u32, u32), err: ReregError, what: &str) {
    assert_eq!(
        (err.outcome(), err.errno(), err.mr_state()),
        (ReregOutcome::Cmd, Errno::OPNOTSUPP, MrState::Old),
        "{what}: {err}"
    );
    same_keys(mr, k, what);
    loud(&format!("NOTE: {what}: refused in place: {err}"));
}

/// `path` is the replace fallback's: a new registration, with a new handle
/// and a new rkey, where `old` were the keys before.
pub fn assert_replaced(
    mr: &MemoryRegion,
    old: (u32, u32, u32),
    path: Result<ReregPath, ReregError>,
    what: &str,
) {
    let path = path.unwrap_or_else(|e| panic!("{what}: replace: {e}"));
    assert_eq!(path, ReregPath::Replaced, "{what}: not in place");
    assert_ne!(mr.handle(), old.0, "{what}: a replaced MR has a new handle");
    assert_ne!(mr.rkey(), old.2, "{what}: a replaced MR has a new rkey");
    loud(&format!(
        "{what}: replaced: handle {} -> {}, rkey {:#x} -> {:#x}",
        old.0,
        mr.handle(),
        old.2,
        mr.rkey()
    ));
}

/// `replace(…)` of a change without TRANSLATION that must give a new
/// registration (siw: always).
pub fn replaced(
    mr: &mut MemoryRegion,
    flags: ReregFlags,
    pd: Option<&ProtectionDomain>,
    access: AccessFlags,
    what: &str,
) {
    let old = keys(mr);
    let path = replace(mr, flags, pd, access);
    assert_replaced(mr, old, path, what);
}

/// The end of every case: the kernel holds no MR, PD, CQ or QP more than
/// at the start.
pub fn assert_all_gone(counts: &HandleCounts) {
    counts.assert_extra(0, 0, "after dropping everything");
    counts.assert_extra_cq_qp(0, 0, "after dropping everything");
}

/// Memory a WRITE or READ of the rig targets: a buffer the test manages
/// itself (under a raw registration), or a region a peer may write, read
/// only by copies.
pub enum Target<'t> {
    Plain(&'t [u8]),
    Remote(&'t mut RemoteBufferMr<Vec<u8>>),
}

impl<'t> From<&'t [u8]> for Target<'t> {
    fn from(b: &'t [u8]) -> Self {
        Target::Plain(b)
    }
}

impl<'t> From<&'t Vec<u8>> for Target<'t> {
    fn from(b: &'t Vec<u8>) -> Self {
        Target::Plain(b)
    }
}

impl<'t> From<&'t memmap2::MmapMut> for Target<'t> {
    fn from(b: &'t memmap2::MmapMut) -> Self {
        Target::Plain(b)
    }
}

impl<'t> From<&'t mut RemoteBufferMr<Vec<u8>>> for Target<'t> {
    fn from(mr: &'t mut RemoteBufferMr<Vec<u8>>) -> Self {
        Target::Remote(mr)
    }
}

impl Target<'_> {
    fn base(&self) -> u64 {
        match self {
            Target::Plain(b) => b.as_ptr() as u64,
            Target::Remote(mr) => mr.addr(),
        }
    }

    /// Every byte, now.
    fn bytes(&mut self) -> Vec<u8> {
        match self {
            Target::Plain(b) => now(b),
            Target::Remote(mr) => {
                let mut out = vec![0; mr.len()];
                mr.copy_out(0, &mut out).expect("the whole buffer");
                out
            }
        }
    }
}

/// The two connected RC QPs of a rig, A the requester, B the responder.
pub struct Qps<'a> {
    pub qp_a: &'a QueuePair,
    pub cq_a: &'a CompletionQueue,
    pub qp_b: &'a QueuePair,
    pub cq_b: &'a CompletionQueue,
}

/// A's source buffer and its MR ([`RW`]). The MR is declared first: it
/// is deregistered before the buffer is unmapped.
pub struct Source {
    pub mr: MemoryRegion,
    pub buf: memmap2::MmapMut,
}

impl Source {
    /// `len` new bytes registered in `pd`.
    pub fn new(pd: &ProtectionDomain, len: usize) -> Source {
        let mut buf = anon(len);
        let mr = fresh_mr(pd, &mut buf, RW);
        Source { mr, buf }
    }
}

/// B's region for a case: [`LEN`] new bytes registered in `pd` with
/// `access`, with the MR's keys and the [`Remote`] of its first byte.
pub fn fresh_target(
    pd: &ProtectionDomain,
    access: AccessFlags,
) -> (memmap2::MmapMut, MemoryRegion, (u32, u32, u32), Remote) {
    let mut dst = anon(LEN);
    let mr = fresh_mr(pd, &mut dst, access);
    let (k, remote) = (keys(&mr), at(&dst, mr.rkey()));
    (dst, mr, k, remote)
}

/// A rig whose A makes requests from its source buffer (registered in the
/// QPs' PD) into B's memory.
pub trait Requester {
    /// The device's name, for messages.
    fn name(&self) -> &str;
    fn qps(&self) -> Qps<'_>;
    /// A's source buffer and its MR.
    fn source(&self) -> &Source;
    fn source_mut(&mut self) -> &mut Source;
    /// The QPs' PD, where B's regions are registered.
    fn pd(&self) -> &ProtectionDomain;

    /// A's request `wr_id` completed with `status` and B refused it (RC):
    /// checks both sides ([`Requester::assert_refused_on_both`]) and
    /// recovers the rig's way.
    fn refused(&mut self, wc: &WorkCompletion, wr_id: u64, status: WcStatus, what: &str);

    /// A WRITE that must be refused by B's responder, `target` untouched:
    /// RoCE's way ([`write_refused_rc`]) unless the rig says otherwise.
    fn write_refused(&mut self, wr_id: u64, remote: Remote, target: &[u8], what: &str) {
        write_refused_rc(self, wr_id, remote, target, what)
    }

    /// Posts `op` from A with `src[at..at + len]` as its local buffer and
    /// returns its completion, whatever its status.
    fn post_a(&self, wr_id: u64, op: SendOp, at: usize, len: usize, what: &str) -> WorkCompletion {
        let sges = sge(
            self.source().buf.as_ptr() as u64 + at as u64,
            len,
            &self.source().mr,
        );
        let wr = signalled(wr_id, op, &sges);
        // SAFETY: `src[at..at + len]` stays mapped and registered and is
        // neither written nor (for atomics) read by the program until the
        // completion is polled below (`wait_one` returns only then, or
        // panics, and then the rig's QPs are dropped before its source).
        unsafe { self.qps().qp_a.post_send(&[wr]) }
            .unwrap_or_else(|e| panic!("{}: {what}: post_send: {e}", self.name()));
        wait_one(self.qps().cq_a, &format!("{}: {what}", self.name()))
    }

    /// An RDMA WRITE of [`MSG`] bytes from A to `remote`: the bytes are
    /// `pattern(wr_id)`, so WRITEs of other ids carry other bytes. Returns
    /// the bytes sent and the completion.
    fn write(&mut self, wr_id: u64, remote: Remote, what: &str) -> (Vec<u8>, WorkCompletion) {
        let data = pattern(wr_id, MSG);
        self.source_mut().buf[..MSG].copy_from_slice(&data);
        let op = SendOp::RdmaWrite { remote, imm: None };
        let wc = self.post_a(wr_id, op, 0, MSG, what);
        (data, wc)
    }

    /// A WRITE that must land: success, and the bytes at `remote` in
    /// `target` are exactly the ones sent, nothing else of `target`
    /// changed, nothing completed on B.
    fn write_lands<'t>(
        &mut self,
        wr_id: u64,
        remote: Remote,
        target: impl Into<Target<'t>>,
        what: &str,
    ) {
        let mut target = target.into();
        let before = target.bytes();
        let (data, wc) = self.write(wr_id, remote, what);
        let (name, q) = (self.name(), self.qps());
        check(&wc, what, WcOpcode::RdmaWrite, q.qp_a, wr_id);
        let at = (remote.addr - target.base()) as usize;
        let target = target.bytes();
        assert!(
            target[at..at + MSG] == data[..],
            "{name}: {what}: the WRITE completed but its {MSG} bytes did not land"
        );
        assert!(
            target[..at] == before[..at] && target[at + MSG..] == before[at + MSG..],
            "{name}: {what}: bytes outside the WRITE's target changed"
        );
        assert_no_completion(q.cq_b, &format!("{name}: {what}: B"));
        loud(&format!(
            "{name}: {what}: WRITE with rkey {:#x} -> landed ({MSG} bytes checked)",
            remote.rkey
        ));
    }

    /// An RDMA READ of [`MSG`] bytes from `remote` (inside `target`) into
    /// `src[MSG..2 MSG]`: succeeds and brings exactly those bytes.
    fn read_lands<'t>(
        &mut self,
        wr_id: u64,
        remote: Remote,
        target: impl Into<Target<'t>>,
        what: &str,
    ) {
        let mut target = target.into();
        self.source_mut().buf[MSG..2 * MSG].fill(0);
        let wc = self.post_a(wr_id, SendOp::RdmaRead { remote }, MSG, MSG, what);
        let name = self.name();
        check(&wc, what, WcOpcode::RdmaRead, self.qps().qp_a, wr_id);
        assert_eq!(wc.byte_len() as usize, MSG, "{name}: {what}: {wc:?}");
        let at = (remote.addr - target.base()) as usize;
        assert!(
            self.source().buf[MSG..2 * MSG] == target.bytes()[at..at + MSG],
            "{name}: {what}: the READ's {MSG} bytes are not the target's"
        );
        loud(&format!(
            "{name}: {what}: READ with rkey {:#x} -> {MSG} bytes checked",
            remote.rkey
        ));
    }

    /// [`Requester::write_lands`], then a READ (`wr_id + 1000`) of the
    /// same bytes back.
    fn write_read_lands(&mut self, wr_id: u64, remote: Remote, target: &[u8], what: &str) {
        self.write_lands(wr_id, remote, target, what);
        self.read_lands(wr_id + 1000, remote, target, what);
    }

    /// Posts the [`PROBE`] receive on B, before a request B must refuse.
    fn arm_probe(&self, what: &str) {
        let probe = RecvWr {
            wr_id: PROBE,
            sges: &[],
        };
        // SAFETY: a receive without SGEs names no memory.
        unsafe { self.qps().qp_b.post_recv(&[probe]) }
            .unwrap_or_else(|e| panic!("{}: {what}: post_recv of the probe: {e}", self.name()));
    }

    /// A refusal on both sides: A's request `wr_id` completed with
    /// `status`; B moved itself to ERR, which flushed its probe receive
    /// (the only completion B shows: nothing names the refused request
    /// there); nothing else came on A.
    fn assert_refused_on_both(
        &self,
        wc: &WorkCompletion,
        wr_id: u64,
        status: WcStatus,
        what: &str,
    ) {
        let (name, q) = (self.name(), self.qps());
        assert_eq!(
            wc.status(),
            status,
            "{name}: {what}: the requester's completion: {wc:?}"
        );
        assert_eq!(
            (wc.wr_id(), wc.qp_num()),
            (wr_id, q.qp_a.qp_num()),
            "{name}: {what}: {wc:?}"
        );
        let b = wait_one(q.cq_b, &format!("{name}: {what}: the responder's side"));
        assert_eq!(
            (b.wr_id(), b.status(), b.qp_num()),
            (PROBE, WcStatus::WrFlushErr, q.qp_b.qp_num()),
            "{name}: {what}: B's probe receive is flushed (B went to ERR): {b:?}"
        );
        assert_no_completion(q.cq_a, &format!("{name}: {what}: A after the refusal"));
    }

    /// A FETCH_ADD of [`ADD`] at `remote` (the word at [`AT`] of `dst`)
    /// that B refuses with `status`: `dst` and A's result slot untouched;
    /// the rig recovers ([`Requester::refused`]).
    fn fetch_add_refused(
        &mut self,
        wr_id: u64,
        remote: Remote,
        dst: &[u8],
        status: WcStatus,
        what: &str,
    ) {
        let before = now(dst);
        self.source_mut().buf[RESULT_AT..RESULT_AT + 8].fill(0xee);
        self.arm_probe(what);
        let op = SendOp::FetchAdd { remote, add: ADD };
        let wc = self.post_a(wr_id, op, RESULT_AT, 8, what);
        self.refused(&wc, wr_id, status, what);
        let name = self.name();
        assert!(
            now(dst) == before,
            "{name}: {what}: a refused FETCH_ADD changed the target"
        );
        assert_eq!(
            self.source().buf[RESULT_AT..RESULT_AT + 8],
            [0xee; 8],
            "{name}: {what}: a refused FETCH_ADD wrote a result"
        );
        loud(&format!(
            "{name}: {what}: FETCH_ADD with rkey {:#x} -> {status:?}, target untouched",
            remote.rkey
        ));
    }

    /// Two FETCH_ADDs of [`ADD`] at `remote` (the word at [`AT`] of `dst`,
    /// [`OLD`] before, the rest of `dst` zero): each returns the value
    /// before it and leaves the sum; nothing beside the word changes.
    fn fetch_add_twice(&mut self, first_wr_id: u64, remote: Remote, dst: &[u8], what: &str) {
        for (i, expected_old) in [OLD, OLD.wrapping_add(ADD)].into_iter().enumerate() {
            let what = format!("{what}: FETCH_ADD #{}", i + 1);
            let wr_id = first_wr_id + i as u64;
            let wc = self.post_a(
                wr_id,
                SendOp::FetchAdd { remote, add: ADD },
                RESULT_AT,
                8,
                &what,
            );
            let name = self.name();
            check(&wc, &what, WcOpcode::FetchAdd, self.qps().qp_a, wr_id);
            let got = u64::from_ne_bytes(
                self.source().buf[RESULT_AT..RESULT_AT + 8]
                    .try_into()
                    .unwrap(),
            );
            assert_eq!(got, expected_old, "{name}: {what}: the value returned");
            assert_eq!(
                target_word(dst),
                expected_old.wrapping_add(ADD),
                "{name}: {what}: the target holds the sum"
            );
            assert!(
                now(&dst[..AT])
                    .iter()
                    .chain(&now(&dst[AT + 8..]))
                    .all(|&b| b == 0),
                "{name}: {what}: bytes beside the target changed"
            );
        }
        loud(&format!(
            "{}: {what}: FETCH_ADD with rkey {:#x} returned {OLD:#x}, then {:#x}; target {:#x}",
            self.name(),
            remote.rkey,
            OLD.wrapping_add(ADD),
            target_word(dst)
        ));
    }

    /// siw has no atomics (atomic_cap 0): a FETCH_ADD at `remote` (the
    /// word at [`AT`] of `dst`, holding [`OLD`]) is refused at post,
    /// typed, whatever the MR and the QP grant; nothing completes, the
    /// target and A's result slot stay.
    fn siw_fetch_add_refused_at_post(&mut self, remote: Remote, dst: &[u8], what: &str) {
        self.source_mut().buf[RESULT_AT..RESULT_AT + 8].fill(0xee);
        let sges = sge(
            self.source().buf.as_ptr() as u64 + RESULT_AT as u64,
            8,
            &self.source().mr,
        );
        let wr = signalled(1, SendOp::FetchAdd { remote, add: ADD }, &sges);
        let (name, q) = (self.name(), self.qps());
        // SAFETY: refused before anything is queued (asserted below).
        let err = unsafe { q.qp_a.post_send(&[wr]) }.expect_err("siw has no atomics");
        loud(&format!("NOTE: {name}: {what}: siw has no atomics: {err}"));
        match &err {
            uverbs::Error::Post { index: 0, why, .. } => assert_eq!(
                &**why,
                &uverbs::wr::PostError::NotSupported {
                    driver: "siw",
                    what: "ATOMIC_FETCH_AND_ADD"
                },
                "{name}: {what}: {err}"
            ),
            other => panic!("{name}: {what}: expected a refused post, got {other}"),
        }
        assert_eq!(err.errno(), Some(Errno::INVAL), "{name}: {what}: {err}");
        // Time for a completion that should not come.
        std::thread::sleep(Duration::from_millis(100));
        assert_no_completion(q.cq_a, &format!("{name}: {what}: A"));
        assert_eq!(target_word(dst), OLD, "{name}: {what}: the target");
        assert_eq!(
            self.source().buf[RESULT_AT..RESULT_AT + 8],
            [0xee; 8],
            "{name}: {what}: a result"
        );
    }
}

/// The requester's completion of a WRITE that siw's responder refuses:
/// SUCCESS when the WRITE was on the wire before the responder's TERMINATE
/// and close came back (most runs: siw completes a WRITE once sent);
/// LOC_QP_OP_ERR when the close reached the requester while it was still
/// sending (seen in CI in both rereg traffic tests): siw's transmit path
/// fails then.
pub fn assert_siw_refused_write_completion(
    wc: &WorkCompletion,
    wr_id: u64,
    qp_a: &QueuePair,
    what: &str,
) {
    assert!(
        matches!(wc.status(), WcStatus::Success | WcStatus::LocQpOpErr),
        "{what}: the requester's completion: {wc:?}"
    );
    assert_eq!(
        (wc.wr_id(), wc.qp_num()),
        (wr_id, qp_a.qp_num()),
        "{what}: {wc:?}"
    );
}

/// A new translation for B's region (test_mr_rereg_addr with a raw
/// `MemoryRegion`), the same on every device: refused in place (rxe and
/// siw change no translation in place; EOPNOTSUPP, the MR unchanged: its
/// rkey still lands in the old buffer and reads back); the replace
/// fallback gives a new handle and new keys over the new buffer: its rkey
/// lands there and reads back, the old rkey is refused (the rig's way),
/// the new one works after that refusal, and the old buffer is never
/// touched again. `counts` sees the rig's two MRs and PD throughout.
pub fn translation_replaced<R: Requester>(rig: &mut R, counts: &HandleCounts) {
    let name = rig.name().to_owned();
    let mut old_buf = super::anon(LEN);
    let mut new_buf = super::anon(2 * LEN);
    let mut mr = super::fresh_mr(rig.pd(), &mut old_buf, super::RW_READ);
    let k = keys(&mr);
    let old_remote = at(&old_buf, mr.rkey());

    // SAFETY: new_buf outlives the MR (dropped after it below).
    let err = unsafe { mr.set_range(new_buf.as_mut_ptr(), new_buf.len()) }
        .expect_err("rxe and siw change no translation in place");
    refused_in_place(&mr, k, err, &format!("{name}: the translation in place"));
    rig.write_read_lands(1, old_remote, &old_buf, "translation refused in place");

    // SAFETY: as above.
    let path = unsafe { super::replace_range(&mut mr, new_buf.as_mut_ptr(), new_buf.len()) };
    assert_replaced(&mr, k, path, &format!("{name}: the translation"));
    assert_eq!(
        (mr.addr(), mr.length()),
        (new_buf.as_mut_ptr() as u64, new_buf.len()),
        "{name}: the replaced MR covers the new buffer"
    );
    counts.assert_extra(2, 1, "after the replace: the old registration is gone");
    let old_bytes = now(&old_buf);
    let new_remote = at(&new_buf, mr.rkey());
    rig.write_read_lands(2, new_remote, &new_buf, "the new rkey into the new buffer");
    rig.write_refused(3, old_remote, &old_buf, "the old rkey after the replace");
    rig.write_read_lands(4, new_remote, &new_buf, "the new rkey after the refusal");
    assert!(now(&old_buf) == old_bytes, "{name}: the old buffer changed");
    drop(mr);
}

/// A WRITE (`wr_id` 1) to `remote` lands in `dst`; then REMOTE_WRITE is
/// removed from `mr` in place (same keys, `LOCAL_WRITE` alone) and the
/// next WRITE (`wr_id` 2) is refused, `dst` untouched. `mr` covers `dst`
/// with [`RW`] in the rig's PD; for a device that changes access in place
/// (rxe).
pub fn remote_write_removed_in_place<R: Requester>(
    rig: &mut R,
    mr: &mut MemoryRegion,
    dst: &[u8],
    remote: Remote,
) {
    let name = rig.name().to_owned();
    let k = keys(mr);
    rig.write_lands(1, remote, dst, "REMOTE_WRITE granted");
    mr.set_access(AccessFlags::LOCAL_WRITE)
        .unwrap_or_else(|e| panic!("{name}: set_access(LOCAL_WRITE) in place: {e}"));
    same_keys(mr, k, &name);
    assert_eq!(mr.access(), AccessFlags::LOCAL_WRITE, "{name}");
    rig.write_refused(2, remote, dst, "REMOTE_WRITE removed in place");
}

/// REMOTE_ATOMIC removed from `mr` in place (same keys): a FETCH_ADD at
/// [`AT`] of `dst` is refused ([`REFUSED`]), target and result untouched;
/// restored in place, two FETCH_ADDs return the old value and leave the
/// sum. `dst` holds [`OLD`] at [`AT`] and `mr` covers it with [`ATOMIC`] in
/// the rig's PD; for a device that changes access in place (rxe).
pub fn atomic_removed_and_restored_in_place<R: Requester>(
    rig: &mut R,
    mr: &mut MemoryRegion,
    dst: &[u8],
) {
    let name = rig.name().to_owned();
    let k = keys(mr);
    let remote = at(dst, mr.rkey());
    mr.set_access(AccessFlags::LOCAL_WRITE)
        .unwrap_or_else(|e| panic!("{name}: set_access(LOCAL_WRITE) in place: {e}"));
    same_keys(mr, k, &name);
    let what = "FETCH_ADD with REMOTE_ATOMIC removed in place";
    rig.fetch_add_refused(1, remote, dst, REFUSED, what);
    mr.set_access(ATOMIC)
        .unwrap_or_else(|e| panic!("{name}: set_access(ATOMIC) in place: {e}"));
    same_keys(mr, k, &name);
    rig.fetch_add_twice(2, remote, dst, "REMOTE_ATOMIC restored in place");
}

/// RoCE's refusal of a WRITE: B's responder NAKs it ([`REFUSED`] on A, B's
/// probe flushed; the rig recovers) and `target` is untouched.
pub fn write_refused_rc<R: Requester + ?Sized>(
    rig: &mut R,
    wr_id: u64,
    remote: Remote,
    target: &[u8],
    what: &str,
) {
    let before = now(target);
    rig.arm_probe(what);
    let (_, wc) = rig.write(wr_id, remote, what);
    rig.refused(&wc, wr_id, REFUSED, what);
    assert!(
        now(target) == before,
        "{}: {what}: a refused WRITE changed the target bytes",
        rig.name()
    );
    loud(&format!(
        "{}: {what}: WRITE with rkey {:#x} -> remote access error (target untouched)",
        rig.name(),
        remote.rkey
    ));
}
