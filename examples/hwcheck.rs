//! Hardware check: runs the verbs this crate offers on every RDMA device of
//! the machine (rxe, siw, mlx5, anything) and prints a table to paste into
//! a bug report. Per device: open, query device and port, GID 0, a PD, an
//! MR re-registered in place (access, then translation; strict and with
//! the replace fallback), a CQ, an RC QP, a loopback RC RDMA WRITE and
//! SEND between two QPs connected by the connection manager, and a UD SEND
//! to itself where the driver has UD.
//!
//! ```text
//! cargo run --example hwcheck -- [--device rxe0] [--addr 192.0.2.1]
//! cargo vm demo    # runs it on rxe0 (192.0.2.1) and siw0 (198.51.100.1) in a VM
//! ```
//!
//! `--addr` is an IP address of the device's network interface, which the
//! connection manager finds the device by; without it each of the
//! machine's addresses (`/proc/net/fib_trie`, `/proc/net/if_inet6`) is
//! bound to in turn until one lands on the device. Each row says `ok`,
//! `FAILED`, `skipped` (a step it needs failed) or `unsupported` (the
//! device refused with `EOPNOTSUPP`, typed: e.g. UD on siw), with a
//! one-line detail; a failing step never ends the run. The last line per
//! device is `hwcheck: <device>: N ok, M failed, K skipped, U unsupported`,
//! and the exit status is 1 if any row FAILED. docs/hwcheck.md explains
//! each row.

use std::error::Error;
use std::fmt::Display;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use uverbs::cm::{EventChannel, LocalConnection, PortSpace};
use uverbs::device::{DriverId, LinkLayer};
use uverbs::error::Errno;
use uverbs::mr::{MrState, ReregError, ReregFallback, ReregFlags};
use uverbs::post::{Local, RecvRequest, SendRequest};
use uverbs::qp::{AhAttr, QpAttr, QpState};
use uverbs::wr::WcStatus;
use uverbs::{
    uverbs_uapi as sys, AccessFlags, BufferMr, CompletionQueue, Context, Device, MemoryRegion,
    OwnedQp, PageBuffer, ProtectionDomain, QpInit, QpType,
};

/// Registered memory is pages of its own, not `Vec`s: with fork safety
/// forced a registered heap page would be missing in a forked child.
type Mem = BufferMr<PageBuffer>;

/// The longest wait for a completion or a connection.
const WAIT: Duration = Duration::from_secs(10);

/// Two RC QPs of one device connected to each other through the cm; the
/// QPs drop before the connection.
struct Pair {
    a: OwnedQp<Mem>,
    b: OwnedQp<Mem>,
    _connection: LocalConnection,
}

/// Connects two new RC QPs of `pd` on `cq` over `addr`, an address of
/// `ctx`'s device.
fn connect(
    ctx: &Context,
    pd: &ProtectionDomain,
    cq: &CompletionQueue,
    addr: IpAddr,
) -> Result<Pair, Box<dyn Error>> {
    let init = QpInit::new(QpType::Rc, cq, cq);
    let (a, b) = (OwnedQp::create(pd, &init)?, OwnedQp::create(pd, &init)?);
    let _connection = uverbs::cm::connect_pair(ctx, &a, &b, addr, WAIT)?;
    Ok(Pair { a, b, _connection })
}

/// The memory of `qp`'s next request to come back, which must have
/// succeeded.
fn wait(qp: &OwnedQp<Mem>, what: &str) -> Result<Mem, Box<dyn Error>> {
    let done = qp.wait(WAIT)?;
    if done.status() != Some(WcStatus::Success) {
        return Err(format!("{what}: {:?}", done.ended).into());
    }
    Ok(done.into_memory().ok_or("no memory came back")?)
}

const MESSAGE: &[u8] = b"hwcheck: hello over RDMA";
/// What a UD receive starts with: room for the 40-byte GRH.
const GRH: usize = 40;
/// The Q_Key of the UD check.
const QKEY: u32 = 0x1111_1111;

/// A row's result.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Verdict {
    Ok,
    Failed,
    Skipped,
    Unsupported,
}

impl Verdict {
    fn word(self) -> &'static str {
        match self {
            Verdict::Ok => "ok",
            Verdict::Failed => "FAILED",
            Verdict::Skipped => "skipped",
            Verdict::Unsupported => "unsupported",
        }
    }
}

/// One device's table, printed row by row as the checks run (so a hang
/// shows where it happened).
struct Table {
    device: String,
    rows: Vec<Verdict>,
}

impl Table {
    fn new(device: &str) -> Self {
        println!();
        println!("== {device} ==");
        println!("{:<28} {:<11} detail", "check", "result");
        Table {
            device: device.into(),
            rows: Vec::new(),
        }
    }

    fn row(&mut self, check: &str, verdict: Verdict, detail: impl Display) {
        println!("{check:<28} {:<11} {detail}", verdict.word());
        self.rows.push(verdict);
    }

    fn ok(&mut self, check: &str, detail: impl Display) {
        self.row(check, Verdict::Ok, detail);
    }

    fn failed(&mut self, check: &str, detail: impl Display) {
        self.row(check, Verdict::Failed, detail);
    }

    fn skipped(&mut self, check: &str, needs: &str) {
        self.row(check, Verdict::Skipped, format!("needs {needs}"));
    }

    /// `Some` of an `Ok` (a row with `detail` of it), `None` after a
    /// FAILED row with the error's message.
    fn step<T, E: Display>(
        &mut self,
        check: &str,
        result: Result<T, E>,
        detail: impl FnOnce(&T) -> String,
    ) -> Option<T> {
        match result {
            Ok(value) => {
                let d = detail(&value);
                self.ok(check, d);
                Some(value)
            }
            Err(e) => {
                self.failed(check, e);
                None
            }
        }
    }

    /// [`step`](Self::step) for a verb: a refusal with `EOPNOTSUPP` (the
    /// device lacks it, typed) is `unsupported`, not FAILED.
    fn verb<T>(
        &mut self,
        check: &str,
        result: Result<T, uverbs::Error>,
        detail: impl FnOnce(&T) -> String,
    ) -> Option<T> {
        match result {
            Err(e) if is_unsupported(&e) => {
                self.row(check, Verdict::Unsupported, e);
                None
            }
            result => self.step(check, result, detail),
        }
    }

    /// The summary line; true when no row FAILED.
    fn finish(self) -> bool {
        let n = |v: Verdict| self.rows.iter().filter(|&&r| r == v).count();
        let (ok, failed) = (n(Verdict::Ok), n(Verdict::Failed));
        let (skipped, unsupported) = (n(Verdict::Skipped), n(Verdict::Unsupported));
        println!(
            "hwcheck: {}: {ok} ok, {failed} failed, {skipped} skipped, {unsupported} unsupported",
            self.device
        );
        failed == 0
    }
}

struct Args {
    device: Option<String>,
    addr: Option<IpAddr>,
}

fn args() -> Result<Args, lexopt::Error> {
    use lexopt::prelude::*;
    let (mut device, mut addr, mut parser) = (None, None, lexopt::Parser::from_env());
    while let Some(arg) = parser.next()? {
        match arg {
            Long("device") => device = Some(parser.value()?.string()?),
            Long("addr") => addr = Some(parser.value()?.parse()?),
            _ => return Err(arg.unexpected()),
        }
    }
    Ok(Args { device, addr })
}

fn main() {
    let args = match args() {
        Ok(args) => args,
        Err(e) => {
            eprintln!("hwcheck: {e}");
            eprintln!("usage: hwcheck [--device NAME] [--addr IP]");
            std::process::exit(2);
        }
    };
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease");
    let kernel = kernel.map_or_else(|e| format!("? ({e})"), |k| k.trim().to_string());
    println!(
        "hwcheck: uverbs {}, Linux {kernel}, {}",
        env!("CARGO_PKG_VERSION"),
        std::env::consts::ARCH
    );
    if let Ok(transport) = std::env::var("UVERBS_TRANSPORT") {
        println!("hwcheck: UVERBS_TRANSPORT={transport}");
    }
    let mut devices = match uverbs::devices() {
        Ok(devices) => devices,
        Err(e) => {
            println!("hwcheck: listing the devices FAILED: {e}");
            std::process::exit(1);
        }
    };
    devices.retain(|d| args.device.as_ref().map_or(true, |name| name == d.name()));
    if devices.is_empty() {
        let which = args.device.as_deref().unwrap_or("at all");
        println!(
            "hwcheck: FAILED: no RDMA device {which} (ls /dev/infiniband /sys/class/infiniband)"
        );
        std::process::exit(1);
    }
    let names: Vec<_> = devices.iter().map(|d| d.name()).collect();
    println!("hwcheck: devices: {}", names.join(" "));
    let mut all_ok = true;
    for device in &devices {
        let mut table = Table::new(device.name());
        check_device(&mut table, device, args.addr);
        all_ok &= table.finish();
    }
    if !all_ok {
        std::process::exit(1);
    }
}

/// A driver's name, as rdma-core's providers are named.
fn driver_name(id: Option<DriverId>) -> String {
    const NAMES: &[(u32, &str)] = &[
        (sys::RDMA_DRIVER_MLX5, "mlx5"),
        (sys::RDMA_DRIVER_MLX4, "mlx4"),
        (sys::RDMA_DRIVER_CXGB4, "cxgb4"),
        (sys::RDMA_DRIVER_MTHCA, "mthca"),
        (sys::RDMA_DRIVER_BNXT_RE, "bnxt_re"),
        (sys::RDMA_DRIVER_OCRDMA, "ocrdma"),
        (sys::RDMA_DRIVER_IRDMA, "irdma"),
        (sys::RDMA_DRIVER_VMW_PVRDMA, "vmw_pvrdma"),
        (sys::RDMA_DRIVER_QEDR, "qedr"),
        (sys::RDMA_DRIVER_HNS, "hns"),
        (sys::RDMA_DRIVER_USNIC, "usnic"),
        (sys::RDMA_DRIVER_RXE, "rxe"),
        (sys::RDMA_DRIVER_HFI1, "hfi1"),
        (sys::RDMA_DRIVER_QIB, "qib"),
        (sys::RDMA_DRIVER_EFA, "efa"),
        (sys::RDMA_DRIVER_SIW, "siw"),
        (sys::RDMA_DRIVER_ERDMA, "erdma"),
        (sys::RDMA_DRIVER_MANA, "mana"),
        (sys::RDMA_DRIVER_IONIC, "ionic"),
    ];
    match id {
        None => "unknown".into(),
        Some(DriverId(n)) => NAMES
            .iter()
            .find(|(id, _)| *id == n)
            .map_or_else(|| format!("driver id {n}"), |(_, name)| (*name).into()),
    }
}

/// Whether an error is the device saying "not here" (`EOPNOTSUPP`, typed
/// as `Error::Unsupported` where nothing was sent).
fn is_unsupported(e: &uverbs::Error) -> bool {
    e.errno() == Some(Errno::OPNOTSUPP)
}

fn check_device(t: &mut Table, device: &Device, addr: Option<IpAddr>) {
    let path = device.path().display().to_string();
    let abi = device.driver_abi_version();
    let opened = device.open();
    let Some(ctx) = t.step("open", opened, |ctx| {
        let kind = ctx.transport_kind();
        format!("{path}, transport {kind:?}, driver ABI {abi}")
    }) else {
        for check in ["query_device", "alloc_pd", "rest of the checks"] {
            t.skipped(check, "open");
        }
        return;
    };

    let attr = ctx.query_device();
    let ports = t.step("query_device", attr, |a| {
        let (vendor, part) = (a.vendor_id, a.vendor_part_id);
        format!(
            "driver {}, fw {}, vendor {vendor:#x} part {part:#x} hw {}, {} port(s), max_qp {} max_cqe {} max_mr_size {:#x}",
            driver_name(ctx.driver_id()),
            a.fw_ver_string(),
            a.hw_ver,
            a.phys_port_cnt,
            a.max_qp,
            a.max_cqe,
            a.max_mr_size,
        )
    });
    let ports = ports.map_or(1, |a| a.phys_port_cnt.max(1));
    let mut link_layer = None;
    for port in 1..=ports {
        let check = format!("query_port {port}");
        if let Some(p) = t.step(&check, ctx.query_port(port), |p| {
            let mtu = |b: Option<u32>| b.map_or("?".into(), |b| b.to_string());
            format!(
                "{:?}, link layer {:?}, MTU {} (max {}), lid {:#x}, {} GID entries",
                p.state,
                p.link_layer,
                mtu(p.active_mtu_bytes()),
                mtu(p.max_mtu_bytes()),
                p.lid,
                p.gid_tbl_len
            )
        }) {
            if port == 1 {
                link_layer = Some((p.link_layer, p.lid));
            }
        }
    }
    let gid = match ctx.query_gid_entry(1, 0) {
        Ok(e) if e.gid.is_zero() => {
            t.ok("gid 0", "empty (all zeros)");
            None
        }
        Ok(e) => {
            let (gid, kind, ifindex) = (e.gid, e.gid_type, e.netdev_ifindex);
            t.ok("gid 0", format!("{gid} {kind:?}, netdev ifindex {ifindex}"));
            Some(gid)
        }
        Err(e) => {
            t.failed("gid 0", e);
            None
        }
    };

    let Some(pd) = t.step("alloc_pd", ctx.alloc_pd(), |pd| {
        format!("handle {}", pd.handle())
    }) else {
        for check in ["reg_mr", "create_cq", "rest of the checks"] {
            t.skipped(check, "alloc_pd");
        }
        return;
    };
    check_mr(t, &pd);

    let cq = ctx.create_cq(16, None);
    let Some(cq) = t.verb("create_cq", cq, |cq| {
        format!("16 asked, {} entries", cq.cqe())
    }) else {
        for check in ["create_qp RC", "rc connect", "ud create_qp"] {
            t.skipped(check, "create_cq");
        }
        return;
    };
    let rc = pd.create_qp(&QpInit::new(QpType::Rc, &cq, &cq));
    let rc = t.verb("create_qp RC", rc, |qp| {
        format!("qpn {:#x}, destroyed again", qp.qp_num())
    });
    if rc.is_some() {
        check_rc(t, &ctx, &pd, &cq, addr);
    } else {
        for check in ["rc connect", "rc write", "rc send"] {
            t.skipped(check, "create_qp RC");
        }
    }
    check_ud(t, &pd, &cq, link_layer, gid);
}

/// How a failed re-registration is reported, and whether the MR is still
/// usable (its old or new registration valid). Sets `still_registered` when
/// a replace could release neither registration: the new one then lasts
/// until the context is closed.
fn rereg_failed(t: &mut Table, check: &str, e: &ReregError, still_registered: &mut bool) -> bool {
    *still_registered |= e.new_range_still_registered();
    let state = e.mr_state();
    let detail = format!("{e}; the MR is {state:?}");
    if e.errno() == Errno::OPNOTSUPP && state == MrState::Old {
        t.row(check, Verdict::Unsupported, detail);
    } else {
        t.failed(check, detail);
    }
    state != MrState::Undefined
}

fn keys(mr: &MemoryRegion) -> String {
    format!("lkey {:#x} rkey {:#x}", mr.lkey(), mr.rkey())
}

/// reg_mr, then re-registration of its access and of its translation, each
/// strict (`MemoryRegion::rereg`) and with `ReregFallback::Replace`.
fn check_mr(t: &mut Table, pd: &ProtectionDomain) {
    // Declared before the MR: they stay mapped until it is dropped.
    let maps = (0..3)
        .map(|i| PageBuffer::new((64 << 10) << i))
        .collect::<Result<Vec<_>, _>>();
    let Some(mut maps) = t.step("map memory", maps, |m| {
        let sizes: Vec<_> = m.iter().map(|m| format!("{} KiB", m.len() >> 10)).collect();
        format!("anonymous mappings of {}", sizes.join(", "))
    }) else {
        t.skipped("reg_mr", "map memory");
        return;
    };
    let lw = AccessFlags::LOCAL_WRITE;
    let (ptr, len) = (maps[0].as_mut_ptr(), maps[0].len());
    // SAFETY: `maps` outlives `mr` (declared before it, so dropped after;
    // leaked when a registration may outlive `mr`), and nothing touches the
    // mapping while it is registered.
    let registered = unsafe { pd.reg_mr(ptr, len, lw) };
    let detail =
        |mr: &MemoryRegion| format!("{} KiB, {:?}, {}", mr.length() >> 10, mr.access(), keys(mr));
    let Some(mut mr) = t.step("reg_mr", registered, detail) else {
        for check in ["rereg access", "rereg translation"] {
            t.skipped(check, "reg_mr");
        }
        return;
    };

    // Set when a registration may outlive `mr`: then `maps` is never unmapped.
    let mut still_registered = false;
    // Access: LOCAL_WRITE -> LOCAL_WRITE | REMOTE_READ in place, then back
    // with the replace fallback.
    let before = keys(&mr);
    let access = lw | AccessFlags::REMOTE_READ;
    let null = std::ptr::null_mut();
    // SAFETY: no TRANSLATION: no new memory is handed to the device.
    let strict = unsafe { mr.rereg(ReregFlags::ACCESS, None, null, 0, access) };
    let mut usable = match strict {
        Ok(()) => {
            let after = format!("{:?}: {before} -> {}", mr.access(), keys(&mr));
            t.ok("rereg access", format!("in place, {after}"));
            true
        }
        Err(e) => rereg_failed(t, "rereg access", &e, &mut still_registered),
    };
    if usable {
        let before = keys(&mr);
        let fallback = ReregFallback::Replace;
        // SAFETY: as above, no TRANSLATION.
        let replace = unsafe { mr.rereg_with(fallback, ReregFlags::ACCESS, None, null, 0, lw) };
        usable = match replace {
            Ok(path) => {
                let after = format!("{:?}: {before} -> {}", mr.access(), keys(&mr));
                t.ok("rereg access (replace)", format!("{path:?}, {after}"));
                true
            }
            Err(e) => rereg_failed(t, "rereg access (replace)", &e, &mut still_registered),
        };
    } else {
        t.skipped("rereg access (replace)", "an MR left valid");
    }

    // Translation: to the second mapping strictly, to the third with the
    // replace fallback.
    for (i, check, fallback) in [
        (1, "rereg translation", ReregFallback::Strict),
        (2, "rereg translation (replace)", ReregFallback::Replace),
    ] {
        if !usable {
            t.skipped(check, "an MR left valid");
            continue;
        }
        let before = keys(&mr);
        let (ptr, len) = (maps[i].as_mut_ptr(), maps[i].len());
        let flags = ReregFlags::TRANSLATION;
        // SAFETY: `maps` outlives `mr` (see above), and is never unmapped
        // when a registration outlives `mr` (`still_registered`), so the
        // new range stays mapped while registered.
        let result =
            unsafe { mr.rereg_with(fallback, flags, None, ptr, len, AccessFlags::empty()) };
        usable = match result {
            Ok(path) => {
                let after = format!("{} KiB: {before} -> {}", mr.length() >> 10, keys(&mr));
                t.ok(check, format!("{path:?}, {after}"));
                true
            }
            Err(e) => rereg_failed(t, check, &e, &mut still_registered),
        };
    }
    if usable {
        let dereg = t.step("dereg_mr", mr.dereg(), |_| "deregistered".into());
        // A failed deregistration is abandoned: it lasts until the context
        // is closed.
        still_registered |= dereg.is_none();
    } else {
        // Undefined: dropping deregisters what is left, and cannot say
        // whether that worked: keep the mappings.
        drop(mr);
        still_registered = true;
        t.skipped("dereg_mr", "an MR left valid");
    }
    if still_registered {
        std::mem::forget(maps); // the device may still reach them: never unmapped
    }
}

/// The device's IP address for the connection manager: `--addr` if a cm
/// id bound to it lands on this device, else the first of the machine's
/// addresses that does; and where it came from.
fn find_addr(ctx: &Context, given: Option<IpAddr>) -> Result<(IpAddr, String), String> {
    let ch = EventChannel::open().map_err(|e| e.to_string())?;
    let on_device = |addr: IpAddr| -> Result<bool, String> {
        let id = ch.create_id(PortSpace::Tcp).map_err(|e| e.to_string())?;
        Ok(id.bind(SocketAddr::new(addr, 0)).is_ok() && id.is_on(ctx).unwrap_or(false))
    };
    let note = match given {
        Some(addr) if on_device(addr)? => return Ok((addr, "given by --addr".into())),
        Some(addr) => format!(" (--addr {addr} is another device's)"),
        None => String::new(),
    };
    let name = ctx.device_name();
    for addr in local_addrs() {
        if on_device(addr)? {
            return Ok((addr, format!("the machine's first address on {name}{note}")));
        }
    }
    Err(format!(
        "no IP address of this machine is on {name}{note}: give one with --addr"
    ))
}

/// The machine's IPv4 addresses (local routes of `/proc/net/fib_trie`),
/// then its IPv6 ones but link-local (`/proc/net/if_inet6`); loopback last.
fn local_addrs() -> Vec<IpAddr> {
    let mut found: Vec<IpAddr> = Vec::new();
    let trie = std::fs::read_to_string("/proc/net/fib_trie").unwrap_or_default();
    let mut last = None;
    for line in trie.lines() {
        if let Some(at) = line.find("|-- ") {
            last = line[at + 4..].trim().parse::<IpAddr>().ok();
        } else if line.contains("/32 host LOCAL") {
            found.extend(last.take());
        }
    }
    let inet6 = std::fs::read_to_string("/proc/net/if_inet6").unwrap_or_default();
    for hex in inet6.lines().filter_map(|l| l.split_whitespace().next()) {
        if let Ok(bits) = u128::from_str_radix(hex, 16) {
            let ip = Ipv6Addr::from(bits);
            if ip.segments()[0] & 0xffc0 != 0xfe80 {
                found.push(IpAddr::V6(ip));
            }
        }
    }
    let mut seen = Vec::new();
    found.retain(|a| {
        !seen.contains(a) && {
            seen.push(*a);
            true
        }
    });
    found.sort_by_key(|a| a.is_loopback()); // stable: loopback last
    found
}

/// Two RC QPs connected through the connection manager; an RDMA WRITE
/// from A into B's memory and a SEND into a receive B posted.
fn check_rc(
    t: &mut Table,
    ctx: &Context,
    pd: &ProtectionDomain,
    cq: &uverbs::CompletionQueue,
    addr: Option<IpAddr>,
) {
    let addr = match find_addr(ctx, addr) {
        Ok((addr, from)) => {
            t.ok("cm address", format!("{addr}, {from}"));
            addr
        }
        Err(e) => {
            t.failed("cm address", e);
            for check in ["rc connect", "rc write", "rc send"] {
                t.skipped(check, "cm address");
            }
            return;
        }
    };
    let pair = connect(ctx, pd, cq, addr);
    let Some(pair) = t.step("rc connect", pair, |p| {
        format!(
            "QPs {:#x} <-> {:#x} in RTS over {addr}",
            p.a.qp_num(),
            p.b.qp_num()
        )
    }) else {
        for check in ["rc write", "rc send"] {
            t.skipped(check, "rc connect");
        }
        return;
    };

    let write = || -> Result<Mem, Box<dyn Error>> {
        let map = || PageBuffer::new(4096);
        let rw = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;
        let mut target = pd.reg_remote_buffer(map()?, rw)?;
        let mut out = pd.reg_buffer(map()?, AccessFlags::LOCAL_WRITE)?;
        out.buffer_mut()[..MESSAGE.len()].copy_from_slice(MESSAGE);
        let local = Local::slice(out, 0..MESSAGE.len())?;
        pair.a
            .post_send(SendRequest::write(2, local, target.region().remote()))?;
        let out = wait(&pair.a, "WRITE")?;
        let mut landed = vec![0u8; MESSAGE.len()];
        target.copy_out(0, &mut landed)?;
        if landed != MESSAGE {
            return Err(format!("the WRITE left {landed:?}").into());
        }
        Ok(out)
    };
    let len = MESSAGE.len();
    let verified = |_: &Mem| format!("{len} bytes written, {len} verified in the target");
    let out = t.step("rc write", write(), verified);

    let send = |out: Option<Mem>| -> Result<(), Box<dyn Error>> {
        let map = || PageBuffer::new(4096);
        let inbox = pd.reg_buffer(map()?, AccessFlags::LOCAL_WRITE)?;
        pair.b.post_recv(RecvRequest::new(1, Local::whole(inbox)))?;
        let out = match out {
            Some(out) => out,
            None => {
                let mut out = pd.reg_buffer(map()?, AccessFlags::LOCAL_WRITE)?;
                out.buffer_mut()[..len].copy_from_slice(MESSAGE);
                out
            }
        };
        pair.a
            .post_send(SendRequest::send(3, Local::slice(out, 0..len)?))?;
        wait(&pair.a, "SEND")?;
        let inbox = wait(&pair.b, "RECV")?;
        if &inbox.buffer()[..len] != MESSAGE {
            return Err(format!("the SEND delivered {:?}", &inbox.buffer()[..len]).into());
        }
        Ok(())
    };
    // A failed WRITE leaves the QPs in ERR: the SEND would only be flushed.
    if out.is_some() {
        let detail = |_: &()| format!("{len} bytes sent, {len} verified in the receive");
        t.step("rc send", send(out), detail);
    } else {
        t.skipped("rc send", "rc write (a failed WRITE leaves the QPs in ERR)");
    }
}

/// A UD QP sends to itself through an address handle of its own port.
fn check_ud(
    t: &mut Table,
    pd: &ProtectionDomain,
    cq: &uverbs::CompletionQueue,
    link_layer: Option<(LinkLayer, u16)>,
    gid: Option<uverbs::device::Gid>,
) {
    let qp = pd.create_qp(&QpInit::new(QpType::Ud, cq, cq));
    let Some(qp) = t.verb("ud create_qp", qp, |qp| format!("qpn {:#x}", qp.qp_num())) else {
        t.skipped("ud send to self", "ud create_qp");
        return;
    };
    let ah = match (link_layer, gid) {
        (Some((LinkLayer::InfiniBand, lid)), _) => Some(AhAttr::lid(lid, 1)),
        (_, Some(gid)) => Some(AhAttr::roce(gid, 0, 1)),
        _ => None,
    };
    let Some(ah) = ah else {
        t.skipped("ud send to self", "query_port 1 and gid 0");
        return;
    };
    let ah = pd.create_ah(&ah).map_err(|e| {
        let verdict = if is_unsupported(&e) {
            Verdict::Unsupported
        } else {
            Verdict::Failed
        };
        t.row("ud send to self", verdict, format!("create_ah: {e}"));
    });
    let Ok(ah) = ah.map(Arc::new) else {
        return;
    };
    let run = || -> Result<usize, Box<dyn Error>> {
        let qp: OwnedQp<Mem> = OwnedQp::new(qp)?;
        let init = QpAttr::new().state(QpState::Init).pkey_index(0).port(1);
        qp.modify(&init.qkey(QKEY))?;
        qp.modify(&QpAttr::new().state(QpState::Rtr))?;
        qp.modify(&QpAttr::new().state(QpState::Rts).sq_psn(0))?;
        let buffer = || -> Result<Mem, Box<dyn Error>> {
            Ok(pd.reg_buffer(PageBuffer::new(4096)?, AccessFlags::LOCAL_WRITE)?)
        };
        let inbox = Local::slice(buffer()?, 0..GRH + MESSAGE.len())?;
        qp.post_recv(RecvRequest::new(1, inbox))?;
        let mut out = buffer()?;
        out.buffer_mut()[..MESSAGE.len()].copy_from_slice(MESSAGE);
        let send = SendRequest::send(2, Local::slice(out, 0..MESSAGE.len())?);
        qp.post_send(send.ud(ah, qp.qp_num(), QKEY))?;
        // One CQ for both queues: the SEND and the RECV come in either order.
        let mut got = Vec::new();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while got.len() < 2 {
            if std::time::Instant::now() > deadline {
                return Err(format!("{} of 2 completions within 10 s", got.len()).into());
            }
            qp.poll(&mut got)?;
        }
        let mut verified = 0;
        for c in got {
            if c.status() != Some(WcStatus::Success) {
                return Err(format!("a completion: {:?}", c.ended).into());
            }
            let is_recv = c.is_recv;
            let mem = c.into_memory().ok_or("no memory came back")?;
            if is_recv {
                let data = &mem.buffer()[GRH..GRH + MESSAGE.len()];
                if data != MESSAGE {
                    return Err(format!("the SEND delivered {data:?}").into());
                }
                verified = data.len();
            }
        }
        Ok(verified)
    };
    let detail = |n: &usize| {
        format!(
            "{} bytes sent to its own QP, {n} verified after the {GRH}-byte GRH",
            MESSAGE.len()
        )
    };
    t.step("ud send to self", run(), detail);
}
