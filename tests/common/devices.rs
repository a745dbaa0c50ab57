//! The device fixtures: which devices to test (the device gate), opening
//! them with the transport the environment asks for, a guard that proves no
//! kernel object leaked, and what an MR reports about itself.
//!
//! The gate: `UVERBS_REQUIRE_DEVICES=rxe,siw` (set by `cargo vm test`) makes
//! every named driver prefix mandatory, so a missing device FAILS the test.
//! Without it, a machine with no RDMA device prints a loud `SKIPPED:` line
//! and the tests return early.

use std::io::Write;
use std::ops::Deref;

use memmap2::MmapMut;

use super::{anon, fresh_mr, RW_READ};
use uverbs::device::{DriverId, OpenOptions};
use uverbs::error::{Errno, Op};
use uverbs::transport::TransportKind;
use uverbs::uverbs_uapi::{
    UVERBS_OBJECT_AH, UVERBS_OBJECT_CQ, UVERBS_OBJECT_MR, UVERBS_OBJECT_PD, UVERBS_OBJECT_QP,
    UVERBS_OBJECT_SRQ,
};
use uverbs::{
    AccessFlags, CompletionQueue, Context, Device, Error, MemoryRegion, ProtectionDomain,
};

/// Writes to stderr past libtest's output capture (which only catches the
/// print macros), so the line shows even when the test passes.
pub fn loud(msg: &str) {
    let _ = writeln!(std::io::stderr(), "{msg}");
}

/// The driver prefixes named by `UVERBS_REQUIRE_DEVICES`, if it is set.
pub fn required_prefixes() -> Option<Vec<String>> {
    let value = std::env::var("UVERBS_REQUIRE_DEVICES").ok()?;
    let list: Vec<String> = value
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(String::from)
        .collect();
    Some(list)
}

/// The devices `test` must run on.
///
/// With `UVERBS_REQUIRE_DEVICES` set: the devices whose names start with one
/// of its prefixes; panics unless every prefix matches at least one device.
/// Without it: every device; if there is none, prints a loud SKIPPED line
/// and returns an empty list. A failure to list devices always panics: it
/// is not the same as having none.
pub fn devices_under_test(test: &str) -> Vec<Device> {
    let required = required_prefixes();
    let all =
        uverbs::devices().unwrap_or_else(|e| panic!("{test}: listing RDMA devices failed: {e}"));
    let Some(prefixes) = required else {
        if all.is_empty() {
            loud(&format!(
                "SKIPPED: {test}: no RDMA device (set UVERBS_REQUIRE_DEVICES to make this fail)"
            ));
        }
        return all;
    };
    assert!(
        !prefixes.is_empty(),
        "{test}: UVERBS_REQUIRE_DEVICES is set but names no driver (expected e.g. `rxe,siw`)"
    );
    // Where the devices are required (the VM), the binary also fails if
    // any kernel object is left when it exits (see `leaks`).
    super::leaks::check_at_exit();
    let names: Vec<&str> = all.iter().map(Device::name).collect();
    for prefix in &prefixes {
        assert!(
            names.iter().any(|n| n.starts_with(prefix.as_str())),
            "{test}: UVERBS_REQUIRE_DEVICES={} requires a `{prefix}*` device, but the devices found are {names:?}",
            prefixes.join(",")
        );
    }
    all.into_iter()
        .filter(|d| prefixes.iter().any(|p| d.name().starts_with(p.as_str())))
        .collect()
}

/// The transport `UVERBS_TRANSPORT` demands, if it names one. Unset (or
/// `auto`) it is Auto's choice on a kernel with the ioctl framework (every
/// device here has one, and a driver id): write+methods.
pub fn required_transport() -> Option<TransportKind> {
    match std::env::var("UVERBS_TRANSPORT").as_deref() {
        Ok("ioctl") => Some(TransportKind::Ioctl),
        Ok("write") => Some(TransportKind::Write),
        Ok("auto") | Err(_) => Some(TransportKind::WriteWithMethods),
        _ => None,
    }
}

/// An opened device under test: a [`Context`] (reached through `Deref`)
/// whose transport was checked against `UVERBS_TRANSPORT`.
#[derive(Clone)]
pub struct Dut {
    ctx: Context,
    dev: Device,
}

impl Deref for Dut {
    type Target = Context;

    fn deref(&self) -> &Context {
        &self.ctx
    }
}

/// Opens `dev` with `Device::open_with(&OpenOptions::new())` (which honours
/// `UVERBS_TRANSPORT`) and checks that the context really uses the
/// transport asked for.
pub fn open(dev: &Device) -> Dut {
    let ctx = dev.open_with(&OpenOptions::new()).unwrap_or_else(|e| {
        panic!(
            "{}: opening {} failed: {e}",
            dev.name(),
            dev.path().display()
        )
    });
    check_transport(dev, &ctx);
    Dut {
        ctx,
        dev: dev.clone(),
    }
}

impl Dut {
    /// Another, independent context on the same device.
    pub fn reopen(&self) -> Dut {
        open(&self.dev)
    }

    /// The device this context was opened on.
    pub fn device(&self) -> &Device {
        &self.dev
    }
}

fn check_transport(dev: &Device, ctx: &Context) {
    if let Some(kind) = required_transport() {
        assert_eq!(
            ctx.transport_kind(),
            kind,
            "{}: UVERBS_TRANSPORT asks for {kind} but the context uses {}",
            dev.name(),
            ctx.transport_kind()
        );
    }
}

/// The soft-RDMA drivers whose behaviour the tests know exactly.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Driver {
    /// Soft RoCE.
    Rxe,
    /// Soft iWARP.
    Siw,
    /// Anything else: only driver-independent checks apply.
    Other,
}

/// Which driver a context talks to.
pub fn driver(ctx: &Context) -> Driver {
    match ctx.driver_id() {
        Some(DriverId::RXE) => Driver::Rxe,
        Some(DriverId::SIW) => Driver::Siw,
        _ => Driver::Other,
    }
}

/// Which of the two REREG_MR behaviours the device has, named by the driver
/// that shows it on 6.12: [`Driver::Rxe`] where REREG_MR changes an MR in
/// place (rxe, whose kernel has `rereg_user_mr`), [`Driver::Siw`] where the
/// kernel refuses every REREG_MR with EOPNOTSUPP before any check (siw, and
/// rxe on Linux 6.1, whose REREG_MR method is disabled exactly as siw's is:
/// [`kernel::rxe_rereg_in_place`](super::kernel::rxe_rereg_in_place)).
pub fn rereg_behaviour(ctx: &Context) -> Driver {
    match driver(ctx) {
        Driver::Rxe if !super::kernel::rxe_rereg_in_place() => Driver::Siw,
        d => d,
    }
}

/// Says loudly that `test` has no reference behaviour for `dev` and checks
/// only what is driver-independent there.
pub fn note_unknown_driver(test: &str, ctx: &Context) {
    loud(&format!(
        "NOTE: {test}: {} (driver id {:?}) has no reference behaviour; only driver-independent checks ran on it",
        ctx.device_name(),
        ctx.driver_id()
    ));
}

/// Records how many MRs and PDs a context holds in the kernel
/// (`UVERBS_METHOD_INFO_HANDLES`) and, when dropped, asserts that the
/// counts are back where they started: no kernel object leaked, on success
/// or error paths. Declare it before the objects it watches so that it is
/// dropped after them.
pub struct HandleCounts {
    dut: Dut,
    what: String,
    mr: u32,
    pd: u32,
    /// CQs and QPs at the start, checked when dropped.
    cq_qp: (u32, u32),
    /// Address handles at the start, checked when dropped.
    ah: u32,
    /// Shared receive queues at the start, checked when dropped.
    srq: u32,
}

impl HandleCounts {
    /// Records the current counts of `dut`; `what` names the test.
    pub fn new(dut: &Dut, what: &str) -> Self {
        let (mr, pd) = counts(dut);
        HandleCounts {
            dut: dut.clone(),
            what: format!("{what} on {}", dut.device_name()),
            mr,
            pd,
            cq_qp: cq_qp_counts(dut),
            ah: ah_count(dut),
            srq: srq_count(dut),
        }
    }

    /// Asserts that the context holds exactly `srqs` SRQs more than at
    /// the start.
    pub fn assert_extra_srq(&self, srqs: u32, when: &str) {
        let now = srq_count(&self.dut);
        assert_eq!(
            now,
            self.srq + srqs,
            "{}: {when}: kernel holds {now} SRQs, expected {} + {srqs}",
            self.what,
            self.srq
        );
    }

    /// Asserts that the context holds exactly `ahs` address handles more
    /// than at the start.
    pub fn assert_extra_ah(&self, ahs: u32, when: &str) {
        let now = ah_count(&self.dut);
        assert_eq!(
            now,
            self.ah + ahs,
            "{}: {when}: kernel holds {now} AHs, expected {} + {ahs}",
            self.what,
            self.ah
        );
    }

    /// The CQ and QP counts now: (CQs, QPs).
    pub fn cq_qp_now(&self) -> (u32, u32) {
        cq_qp_counts(&self.dut)
    }

    /// Asserts that the context holds exactly `cqs` CQs and `qps` QPs more
    /// than at the start.
    pub fn assert_extra_cq_qp(&self, cqs: u32, qps: u32, when: &str) {
        let now = self.cq_qp_now();
        let start = self.cq_qp;
        assert_eq!(
            now,
            (start.0 + cqs, start.1 + qps),
            "{}: {when}: kernel holds (CQs, QPs) = {now:?}, expected ({} + {cqs}, {} + {qps})",
            self.what,
            start.0,
            start.1
        );
    }

    /// The counts now: (MRs, PDs).
    pub fn now(&self) -> (u32, u32) {
        counts(&self.dut)
    }

    /// Asserts that the context holds exactly `mrs` MRs and `pds` PDs more
    /// than at the start.
    pub fn assert_extra(&self, mrs: u32, pds: u32, when: &str) {
        let (mr, pd) = self.now();
        assert_eq!(
            (mr, pd),
            (self.mr + mrs, self.pd + pds),
            "{}: {when}: kernel holds (MRs, PDs) = ({mr}, {pd}), expected ({} + {mrs}, {} + {pds})",
            self.what,
            self.mr,
            self.pd
        );
    }
}

impl Drop for HandleCounts {
    fn drop(&mut self) {
        if std::thread::panicking() {
            return; // the first failure is the one worth reading
        }
        self.assert_extra(0, 0, "at the end (a kernel object leaked)");
        self.assert_extra_cq_qp(0, 0, "at the end (a kernel object leaked)");
        self.assert_extra_ah(0, "at the end (a kernel object leaked)");
        self.assert_extra_srq(0, "at the end (a kernel object leaked)");
    }
}

fn counts(dut: &Dut) -> (u32, u32) {
    let count = |object: u16, name: &str| {
        dut.kernel_handle_count(object).unwrap_or_else(|e| {
            panic!("{}: counting {name} handles failed: {e}", dut.device_name())
        })
    };
    (count(UVERBS_OBJECT_MR, "MR"), count(UVERBS_OBJECT_PD, "PD"))
}

fn cq_qp_counts(dut: &Dut) -> (u32, u32) {
    let count = |object: u16, name: &str| {
        dut.kernel_handle_count(object).unwrap_or_else(|e| {
            panic!("{}: counting {name} handles failed: {e}", dut.device_name())
        })
    };
    (count(UVERBS_OBJECT_CQ, "CQ"), count(UVERBS_OBJECT_QP, "QP"))
}

/// The AHs `dut` holds; 0 on a device whose driver has no AH verb (siw:
/// the kernel's object tree then lacks the AH type and answers `ENOENT`).
fn ah_count(dut: &Dut) -> u32 {
    match dut.kernel_handle_count(UVERBS_OBJECT_AH) {
        Ok(n) => n,
        Err(e) if e.errno() == Some(Errno::NOENT) && driver(dut) != Driver::Rxe => 0,
        Err(e) => panic!("{}: counting AH handles failed: {e}", dut.device_name()),
    }
}

/// The SRQs `dut` holds; 0 on a device whose driver has no SRQ verb (the
/// kernel's object tree then lacks the SRQ type and answers `ENOENT`).
fn srq_count(dut: &Dut) -> u32 {
    match dut.kernel_handle_count(UVERBS_OBJECT_SRQ) {
        Ok(n) => n,
        Err(e) if e.errno() == Some(Errno::NOENT) && driver(dut) == Driver::Other => 0,
        Err(e) => panic!("{}: counting SRQ handles failed: {e}", dut.device_name()),
    }
}

/// Allocates a PD, failing the test with the device's name.
pub fn alloc_pd(ctx: &Context) -> ProtectionDomain {
    ctx.alloc_pd()
        .unwrap_or_else(|e| panic!("{}: alloc_pd: {e}", ctx.device_name()))
}

/// Deallocates `pd`, which must fail with `EBUSY` (an MR is still in it),
/// and returns the PD handed back; `what` names the check.
pub fn dealloc_refused_busy(pd: ProtectionDomain, what: &str) -> ProtectionDomain {
    let name = pd.context().device_name().to_owned();
    let err = match pd.dealloc() {
        Ok(()) => panic!("{name}: {what}: a PD with an MR in it was deallocated"),
        Err(e) => e,
    };
    assert_eq!(
        err.error.op(),
        Op::DeallocPd,
        "{name}: {what}: {}",
        err.error
    );
    assert_eq!(
        err.error.errno(),
        Some(Errno::BUSY),
        "{name}: {what}: {}",
        err.error
    );
    err.pd
}

/// Destroys `cq`, which must fail with `EBUSY` (a QP still uses it),
/// typed (`Error::Os` naming `DestroyCq`), and returns the CQ handed back
/// (the same handle); `what` names the check.
pub fn destroy_cq_refused_busy(cq: CompletionQueue, what: &str) -> CompletionQueue {
    let handle = cq.handle();
    let err = match cq.destroy() {
        Ok(done) => panic!("{what}: a CQ in use was destroyed: {done:?}"),
        Err(e) => e,
    };
    assert!(
        matches!(
            err.error,
            Error::Os {
                op: Op::DestroyCq,
                errno: Errno::BUSY,
                ..
            }
        ),
        "{what}: {}",
        err.error
    );
    assert!(err.to_string().starts_with("destroy_cq"), "{what}: {err}");
    loud(&format!("{what}: destroy of CQ {handle} in use: {err}"));
    let cq = err.cq;
    assert_eq!(cq.handle(), handle, "{what}: the CQ handed back");
    cq
}

/// A new PD in `ctx` and a fresh [`RW_READ`] MR in it over a new
/// `len`-byte mapping. Keep the mapping until the MR is gone (bind the
/// three in this order: the MR is dropped first).
pub fn pd_and_fresh_mr(ctx: &Context, len: usize) -> (ProtectionDomain, MmapMut, MemoryRegion) {
    let pd = alloc_pd(ctx);
    let mut buf = anon(len);
    let mr = fresh_mr(&pd, &mut buf, RW_READ);
    (pd, buf, mr)
}

/// Everything an MR reports about itself.
#[derive(Debug, PartialEq, Eq, Clone, Copy)]
pub struct Snapshot {
    pub handle: u32,
    pub lkey: u32,
    pub rkey: u32,
    pub addr: usize,
    pub length: usize,
    pub access: AccessFlags,
    pub pd_handle: u32,
}

/// What `mr` reports now.
pub fn snap(mr: &MemoryRegion) -> Snapshot {
    Snapshot {
        handle: mr.handle(),
        lkey: mr.lkey(),
        rkey: mr.rkey(),
        addr: mr.addr() as usize,
        length: mr.length(),
        access: mr.access(),
        pd_handle: mr.pd_handle(),
    }
}

/// Runs `body(name, ctx, counts)` on every device under `test`, freshly
/// opened; `counts` checks, once `body` has returned and dropped what it
/// made, that no kernel object leaked.
pub fn on_each_device(test: &str, mut body: impl FnMut(&str, Dut, &HandleCounts)) {
    for dev in devices_under_test(test) {
        let ctx = open(&dev);
        let counts = HandleCounts::new(&ctx, test);
        body(dev.name(), ctx, &counts);
    }
}

/// [`on_each_device`] for the drivers whose behaviour the tests know
/// (`body(name, ctx, counts, driver)`); any other device is noted loudly
/// and skipped.
pub fn on_each_known_device(test: &str, mut body: impl FnMut(&str, Dut, &HandleCounts, Driver)) {
    on_each_device(test, |name, ctx, counts| match driver(&ctx) {
        Driver::Other => note_unknown_driver(test, &ctx),
        d => body(name, ctx, counts, d),
    });
}

/// [`on_each_known_device`] with the device's REREG_MR behaviour
/// ([`rereg_behaviour`]) for the driver: rxe on Linux 6.1 as siw.
pub fn on_each_rereg_device(test: &str, mut body: impl FnMut(&str, Dut, &HandleCounts, Driver)) {
    on_each_known_device(test, |name, ctx, counts, _| {
        let d = rereg_behaviour(&ctx);
        body(name, ctx, counts, d)
    });
}

/// `device_test!(name, |name, ctx, counts| { … })` defines the test `name`,
/// which runs the closure through [`on_each_device`];
/// `known_device_test!(name, |name, ctx, counts, driver| { … })` through
/// [`on_each_known_device`].
#[allow(unused_macros)]
macro_rules! device_test {
    ($test:ident, $body:expr) => {
        device_test!(@with on_each_device, $test, $body);
    };
    (@with $runner:ident, $test:ident, $body:expr) => {
        #[test]
        fn $test() {
            $crate::common::$runner(stringify!($test), $body)
        }
    };
}

/// See [`device_test!`].
#[allow(unused_macros)]
macro_rules! known_device_test {
    ($test:ident, $body:expr) => {
        device_test!(@with on_each_known_device, $test, $body);
    };
}

/// `rereg_device_test!(name, |name, ctx, counts, rereg| { … })`: through
/// [`on_each_rereg_device`].
#[allow(unused_macros)]
macro_rules! rereg_device_test {
    ($test:ident, $body:expr) => {
        device_test!(@with on_each_rereg_device, $test, $body);
    };
}
