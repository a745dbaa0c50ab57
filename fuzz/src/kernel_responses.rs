//! Kernel responses: the framing of commands (`src/transport/frame.rs`),
//! the kernel file's response handling, and the typed response decoding of
//! the API, against a kernel that answers with arbitrary bytes.
//!
//! Input (decoded with `arbitrary`): one of
//! * a `write()` frame to encode (any code, request, UHW in, response
//!   pointer and length), twice into the same frame;
//! * a sequence of `IoctlFrame` operations: pushes of constant, input and
//!   output attributes of any length, and flag words "written back by the
//!   kernel" into attributes;
//! * a raw command of any lengths through `KernelFile` over `/dev/null`
//!   (legacy `write()`: swallowed, so the answer is the zeroed buffer;
//!   ioctl: refused with `ENOTTY`);
//! * a session of API calls (`Context::with_transport`, `query_device`,
//!   `alloc_pd`, `reg_mr`, re-registrations, `dereg`, `dealloc`,
//!   `kernel_handle_count`, drops) over a hostile fake kernel that answers
//!   each command with the next scripted answer: an errno, or arbitrary
//!   response bytes, UHW bytes and written count, attribute flags and a
//!   handle total.
//!
//! Properties:
//! * nothing panics;
//! * `WriteFrame::encode` fails exactly when its documented conditions
//!   hold, and otherwise gives `8 + core_in + uhw_in` bytes: the header's
//!   code and word counts, the request with the response pointer in its
//!   first 8 bytes (when there is a response), the UHW input;
//! * an `IoctlFrame` holds at most `MAX_ATTRS` attributes (`E2BIG` past
//!   that, unchanged), `hdr.length` is always `24 + 16 * num_attrs` and is
//!   the length of its bytes, `attr(id)` finds the first attribute with
//!   that id, `is_valid_output` reads exactly `UVERBS_ATTR_F_VALID_OUTPUT`;
//! * `KernelFile` returns at most `uhw_out.len()` and writes only zeros
//!   where no kernel wrote;
//! * the API hands the hostile kernel response buffers of exactly the
//!   kernel struct's size, requests of exactly the request struct's size,
//!   and returns what the kernel wrote (context, device attributes, PD
//!   handle, MR handle and keys, handle count) or an `Error` with the
//!   kernel's errno.

use std::collections::VecDeque;
use std::os::fd::OwnedFd;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use arbitrary::{Arbitrary, Unstructured};
use uverbs::device::{DeviceAttr, DriverId, OpenOptions};
use uverbs::error::Errno;
use uverbs::fork::{Advice, Advisor, ForkMode, ForkSafety};
use uverbs::transport::frame::{
    attr_const, attr_in, attr_out, is_valid_output, IoctlFrame, WriteFrame, MAX_ATTRS,
    MAX_WRITE_BYTES,
};
use uverbs::transport::{KernelFile, RawCommand, Transport, TransportKind};
use uverbs::uverbs_uapi as sys;
use uverbs::{AccessFlags, Context};
use zerocopy::{FromBytes, IntoBytes};

/// Runs the target on one input.
pub fn run(data: &[u8]) {
    let mut u = Unstructured::new(data);
    let Ok(case) = u.choose_index(4) else {
        return;
    };
    let _ = match case {
        0 => u.arbitrary().map(|(a, b): (WriteCase, WriteCase)| {
            let mut frame = WriteFrame::default();
            check_write_frame(&mut frame, &a);
            check_write_frame(&mut frame, &b);
        }),
        1 => {
            check_ioctl_frame(&crate::many(&mut u, 32));
            Ok(())
        }
        2 => u.arbitrary().map(|c: RawCase| check_kernel_file(&c)),
        _ => Session::decode(&mut u).map(check_session),
    };
}

// ---------------------------------------------------------------- write()

#[derive(Arbitrary, Debug)]
struct WriteCase {
    code: u32,
    core_in: Vec<u8>,
    uhw_in: Vec<u8>,
    response_ptr: u64,
    response_len: Len,
}

/// A length, usually small, sometimes huge.
#[derive(Arbitrary, Debug, Clone, Copy)]
enum Len {
    Small(u8),
    Medium(u16),
    Large(u32),
}

impl Len {
    fn get(self) -> usize {
        match self {
            Len::Small(n) => usize::from(n),
            Len::Medium(n) => usize::from(n),
            Len::Large(n) => n as usize,
        }
    }
}

fn check_write_frame(frame: &mut WriteFrame, c: &WriteCase) {
    let response_len = c.response_len.get();
    let len = 8 + c.core_in.len() + c.uhw_in.len();
    let mut allowed = Vec::new();
    if !len.is_multiple_of(4)
        || !response_len.is_multiple_of(4)
        || response_len / 4 > usize::from(u16::MAX)
    {
        allowed.push(Errno::INVAL);
    }
    if response_len != 0 && c.core_in.len() < 8 {
        allowed.push(Errno::INVAL);
    }
    if len > MAX_WRITE_BYTES {
        allowed.push(Errno::TOOBIG);
    }
    let result = frame
        .encode(c.code, &c.core_in, &c.uhw_in, c.response_ptr, response_len)
        .map(<[u8]>::to_vec);
    let bytes = match result {
        Err(e) => {
            assert!(allowed.contains(&e), "{c:?}: {e:?}, allowed {allowed:?}");
            return;
        }
        Ok(bytes) => {
            assert!(allowed.is_empty(), "{c:?} accepted, expected {allowed:?}");
            bytes
        }
    };
    assert_eq!(bytes, frame.as_bytes(), "as_bytes after encode");
    assert_eq!(bytes.len(), len, "frame length");
    let hdr = sys::ib_uverbs_cmd_hdr::read_from_bytes(&bytes[..8]).unwrap();
    assert_eq!(hdr.command, c.code);
    assert_eq!(usize::from(hdr.in_words), len / 4);
    assert_eq!(usize::from(hdr.out_words), response_len / 4);
    let mut request = c.core_in.clone();
    if response_len != 0 {
        request[..8].copy_from_slice(&c.response_ptr.to_ne_bytes());
    }
    assert_eq!(&bytes[8..8 + request.len()], &request[..], "request bytes");
    assert_eq!(&bytes[8 + request.len()..], &c.uhw_in[..], "UHW in bytes");
}

// ------------------------------------------------------------------ ioctl

#[derive(Arbitrary, Debug)]
enum FrameOp {
    Const(u16, u64),
    In(u16, Vec<u8>),
    /// An input of `len` bytes (may exceed the `u16` length field).
    InOfLen(u16, Len),
    Out(u16, u64, Len),
    /// The kernel writes back flags into the first attribute with this id.
    KernelFlags(u16, u16),
    InvokeWrite {
        code: u32,
        core_in: Len,
        uhw_in: Len,
        core_out: Len,
        uhw_out: Len,
    },
}

fn check_ioctl_frame(ops: &[FrameOp]) {
    let mut frame = IoctlFrame::new(sys::UVERBS_OBJECT_DEVICE, 1, 0);
    let mut model: Vec<sys::ib_uverbs_attr> = Vec::new();
    let mut inputs: Vec<Vec<u8>> = Vec::new(); // alive while pointed to
    for op in ops {
        let attr = match op {
            FrameOp::Const(id, v) => Ok(attr_const(*id, *v)),
            FrameOp::In(id, bytes) => {
                let a = attr_in(*id, bytes);
                if let Ok(a) = &a {
                    assert_eq!(usize::from(a.len), bytes.len());
                    if bytes.len() <= 8 {
                        let mut inline = [0u8; 8];
                        inline[..bytes.len()].copy_from_slice(bytes);
                        assert_eq!(a.data, u64::from_ne_bytes(inline), "inline data");
                    } else {
                        assert_eq!(a.data, bytes.as_ptr() as u64, "pointer data");
                    }
                }
                a
            }
            FrameOp::InOfLen(id, len) => {
                let bytes = vec![0xa5u8; len.get().min(70_000)];
                let a = attr_in(*id, &bytes);
                assert_eq!(
                    a.is_err(),
                    bytes.len() > 0xffff,
                    "attr_in of {}",
                    bytes.len()
                );
                inputs.push(bytes);
                a
            }
            FrameOp::Out(id, ptr, len) => {
                let a = attr_out(*id, *ptr, len.get());
                assert_eq!(a.is_err(), len.get() > 0xffff, "attr_out of {}", len.get());
                a
            }
            FrameOp::KernelFlags(id, flags) => {
                let got = frame.attr_mut(*id).map(|a| a.flags = *flags).is_some();
                let want = model.iter_mut().find(|a| a.attr_id == *id);
                assert_eq!(got, want.is_some(), "attr_mut({id})");
                if let Some(a) = want {
                    a.flags = *flags;
                }
                check_frame(&frame, &model);
                continue;
            }
            FrameOp::InvokeWrite {
                code,
                core_in,
                uhw_in,
                core_out,
                uhw_out,
            } => {
                let core_in = vec![0x11u8; core_in.get().min(70_000)];
                let uhw_in = vec![0x22u8; uhw_in.get().min(70_000)];
                let (co, uo) = (core_out.get(), uhw_out.get());
                let f = IoctlFrame::invoke_write(
                    7,
                    *code,
                    &core_in,
                    &uhw_in,
                    (0x1000, co),
                    (0x2000, uo),
                );
                let too_long = [core_in.len(), uhw_in.len(), co, uo]
                    .iter()
                    .any(|&l| l > 0xffff);
                match f {
                    Err(e) => assert!(too_long && e == Errno::INVAL, "invoke_write: {e:?}"),
                    Ok(f) => {
                        assert!(!too_long, "invoke_write accepted a length over 0xffff");
                        let ids: Vec<u16> = f.attrs().iter().map(|a| a.attr_id).collect();
                        let mut want = vec![sys::UVERBS_ATTR_WRITE_CMD, sys::UVERBS_ATTR_CORE_IN];
                        if co != 0 {
                            want.push(sys::UVERBS_ATTR_CORE_OUT);
                        }
                        if !uhw_in.is_empty() {
                            want.push(sys::UVERBS_ATTR_UHW_IN);
                        }
                        if uo != 0 {
                            want.push(sys::UVERBS_ATTR_UHW_OUT);
                        }
                        assert_eq!(ids, want, "INVOKE_WRITE attributes");
                        assert_eq!(
                            f.attr(sys::UVERBS_ATTR_WRITE_CMD).map(|a| a.data),
                            Some(u64::from(*code))
                        );
                        check_frame(&f, f.attrs());
                    }
                }
                continue;
            }
        };
        let Ok(attr) = attr else {
            continue;
        };
        let pushed = frame.push(attr);
        if model.len() == MAX_ATTRS {
            assert_eq!(pushed, Err(Errno::TOOBIG), "push into a full frame");
        } else {
            assert_eq!(pushed, Ok(()), "push");
            model.push(attr);
        }
        check_frame(&frame, &model);
    }
}

fn check_frame(frame: &IoctlFrame, model: &[sys::ib_uverbs_attr]) {
    let hdr = frame.header();
    assert_eq!(frame.attrs(), model, "attributes");
    assert!(frame.attrs().len() <= MAX_ATTRS);
    assert_eq!(usize::from(hdr.num_attrs), model.len());
    assert_eq!(usize::from(hdr.length), 24 + 16 * model.len(), "hdr.length");
    let bytes = frame.as_bytes();
    assert_eq!(bytes.len(), usize::from(hdr.length), "as_bytes length");
    assert_eq!(&bytes[..24], hdr.as_bytes());
    assert_eq!(&bytes[24..], model.as_bytes(), "attribute bytes");
    for a in model {
        let first = model.iter().find(|b| b.attr_id == a.attr_id);
        assert_eq!(frame.attr(a.attr_id), first, "attr({})", a.attr_id);
        assert_eq!(
            is_valid_output(a),
            a.flags & sys::UVERBS_ATTR_F_VALID_OUTPUT != 0
        );
    }
}

// ------------------------------------------------------------- KernelFile

#[derive(Arbitrary, Debug)]
struct RawCase {
    ioctl: bool,
    code: u32,
    core_in: Vec<u8>,
    uhw_in: Vec<u8>,
    core_out: Len,
    uhw_out: Len,
}

fn check_kernel_file(c: &RawCase) {
    let Ok(null) = std::fs::OpenOptions::new().write(true).open("/dev/null") else {
        return;
    };
    let kind = if c.ioctl {
        TransportKind::Ioctl
    } else {
        TransportKind::Write
    };
    let file = KernelFile::new(OwnedFd::from(null), kind, Some(sys::RDMA_DRIVER_RXE)).unwrap();
    let mut core_out = vec![0xffu8; c.core_out.get().min(70_000)];
    let mut uhw_out = vec![0xffu8; c.uhw_out.get().min(70_000)];
    let uhw_len = uhw_out.len();
    let mut cmd = RawCommand {
        code: c.code,
        core_in: &c.core_in,
        uhw_in: &c.uhw_in,
        core_out: &mut core_out,
        uhw_out: &mut uhw_out,
    };
    // SAFETY: /dev/null neither reads nor writes through the frame's
    // pointers, and an ioctl on it fails with ENOTTY.
    let result = unsafe { file.execute(&mut cmd) };
    match result {
        Ok(written) => {
            assert!(!c.ioctl, "an ioctl on /dev/null succeeded");
            assert!(written <= uhw_len, "{written} > {uhw_len}");
            // Swallowed by /dev/null: the answer is the zeroed buffer.
            assert!(core_out.iter().all(|&b| b == 0), "core out not zeroed");
            assert!(uhw_out.iter().all(|&b| b == 0), "uhw out not zeroed");
        }
        Err(e) => assert!(
            [Errno::INVAL, Errno::TOOBIG, Errno::NOTTY].contains(&e),
            "{c:?}: {e:?}"
        ),
    }
}

// --------------------------------------------------------- hostile kernel

#[derive(Debug)]
struct Session {
    driver: Option<u8>,
    get_context: Answer,
    /// Each operation with the answer to the next command the kernel gets
    /// (most operations send one).
    ops: Vec<(ApiOp, Answer)>,
}

impl Session {
    fn decode(u: &mut Unstructured<'_>) -> arbitrary::Result<Session> {
        Ok(Session {
            driver: u.arbitrary()?,
            get_context: u.arbitrary()?,
            ops: crate::many(u, 32),
        })
    }
}

#[derive(Arbitrary, Debug, Clone)]
struct Answer {
    /// Success, mostly, or an errno (1..=133) instead of an answer.
    outcome: Outcome,
    /// Response bytes, repeated over the response buffer (zeros if empty).
    core: Vec<u8>,
    uhw_fill: u8,
    uhw_written: u8,
    /// `ioctl` methods: flags written back into every attribute, and the
    /// `INFO_HANDLES` total.
    flags: u16,
    total: Total,
}

#[derive(Arbitrary, Debug, Clone, Copy)]
enum Outcome {
    Answer,
    Answer2,
    Answer3,
    Errno(u8),
}

/// A handle total: small (it fits the first list) or any.
#[derive(Arbitrary, Debug, Clone, Copy)]
enum Total {
    Small(u8),
    Any(u32),
}

impl Total {
    fn get(self) -> u32 {
        match self {
            Total::Small(n) => u32::from(n % 64),
            Total::Any(n) => n,
        }
    }
}

#[derive(Arbitrary, Debug)]
enum ApiOp {
    QueryDevice,
    AllocPd,
    RegMr {
        pd: u8,
        offset: u16,
        len: u16,
        access: u32,
    },
    SetAccess {
        mr: u8,
        access: u32,
    },
    SetPd {
        mr: u8,
        pd: u8,
    },
    SetRange {
        mr: u8,
        offset: u16,
        len: u16,
    },
    Dereg {
        mr: u8,
    },
    Dealloc {
        pd: u8,
    },
    DropMr {
        mr: u8,
    },
    DropPd {
        pd: u8,
    },
    HandleCount {
        object: u16,
    },
}

/// What the hostile kernel last did.
#[derive(Debug, Default)]
struct Hostile {
    answers: VecDeque<Answer>,
    /// The last command's code and the core response it wrote.
    last: Option<(u32, Vec<u8>)>,
    /// The last `INFO_HANDLES` answer: (flags, total).
    last_invoke: Option<(u16, u32)>,
    last_errno: Option<Errno>,
}

#[derive(Debug, Default)]
struct HostileKernel(Mutex<Hostile>);

impl HostileKernel {
    fn lock(&self) -> MutexGuard<'_, Hostile> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The next answer (success with zeros once the script is exhausted).
    fn next(&self) -> Answer {
        let mut h = self.lock();
        let a = h.answers.pop_front().unwrap_or(Answer {
            outcome: Outcome::Answer,
            core: Vec::new(),
            uhw_fill: 0,
            uhw_written: 0,
            flags: 0,
            total: Total::Small(0),
        });
        h.last_errno = match a.outcome {
            Outcome::Errno(e) => Some(Errno::from_raw_os_error(i32::from(e % 133) + 1)),
            _ => None,
        };
        a
    }
}

/// Request and response sizes of the commands the API sends.
fn sizes(code: u32) -> Option<(usize, usize)> {
    use std::mem::size_of;
    Some(match code {
        sys::IB_USER_VERBS_CMD_GET_CONTEXT => (
            size_of::<sys::ib_uverbs_get_context>(),
            size_of::<sys::ib_uverbs_get_context_resp>(),
        ),
        sys::IB_USER_VERBS_CMD_QUERY_DEVICE => (
            size_of::<sys::ib_uverbs_query_device>(),
            size_of::<sys::ib_uverbs_query_device_resp>(),
        ),
        sys::IB_USER_VERBS_CMD_ALLOC_PD => (
            size_of::<sys::ib_uverbs_alloc_pd>(),
            size_of::<sys::ib_uverbs_alloc_pd_resp>(),
        ),
        sys::IB_USER_VERBS_CMD_DEALLOC_PD => (size_of::<sys::ib_uverbs_dealloc_pd>(), 0),
        sys::IB_USER_VERBS_CMD_REG_MR => (
            size_of::<sys::ib_uverbs_reg_mr>(),
            size_of::<sys::ib_uverbs_reg_mr_resp>(),
        ),
        sys::IB_USER_VERBS_CMD_REREG_MR => (
            size_of::<sys::ib_uverbs_rereg_mr>(),
            size_of::<sys::ib_uverbs_rereg_mr_resp>(),
        ),
        sys::IB_USER_VERBS_CMD_DEREG_MR => (size_of::<sys::ib_uverbs_dereg_mr>(), 0),
        _ => return None,
    })
}

// SAFETY: each command is answered once; only the given output buffers are
// written (zeroed first, then filled), `execute` returns at most
// `uhw_out.len()`, and `invoke` writes only through the `TOTAL_HANDLES`
// pointer, for at most the attribute's length, which the caller vouches for
// (a native REG_MR is refused before anything is written).
// No descriptor is ever handed over (the default `adopt_fd`).
unsafe impl Transport for HostileKernel {
    fn kind(&self) -> TransportKind {
        TransportKind::Fake
    }

    unsafe fn execute(&self, cmd: &mut RawCommand<'_>) -> Result<usize, Errno> {
        let (req_len, resp_len) = sizes(cmd.code).expect("a command the API sends");
        assert_eq!(cmd.core_in.len(), req_len, "request size of {}", cmd.code);
        assert_eq!(
            cmd.core_out.len(),
            resp_len,
            "response size of {}",
            cmd.code
        );
        cmd.core_out.fill(0);
        cmd.uhw_out.fill(0);
        let answer = self.next();
        let mut h = self.lock();
        h.last = None;
        if let Some(errno) = h.last_errno {
            return Err(errno);
        }
        if !answer.core.is_empty() {
            for (b, v) in cmd.core_out.iter_mut().zip(answer.core.iter().cycle()) {
                *b = *v;
            }
        }
        cmd.uhw_out.fill(answer.uhw_fill);
        h.last = Some((cmd.code, cmd.core_out.to_vec()));
        Ok(usize::from(answer.uhw_written) % (cmd.uhw_out.len() + 1))
    }

    unsafe fn invoke(&self, frame: &mut IoctlFrame) -> Result<(), Errno> {
        let hdr = *frame.header();
        if (hdr.object_id, hdr.method_id) == (sys::UVERBS_OBJECT_MR, sys::UVERBS_METHOD_REG_MR) {
            // A kernel before 6.17: the registration falls back to the
            // write command, whose answers are the fuzzed ones.
            return Err(Errno::PROTONOSUPPORT);
        }
        assert_eq!(hdr.object_id, sys::UVERBS_OBJECT_DEVICE);
        assert_eq!(hdr.method_id, sys::UVERBS_METHOD_INFO_HANDLES);
        let answer = self.next();
        let mut h = self.lock();
        h.last_invoke = None;
        if let Some(errno) = h.last_errno {
            return Err(errno);
        }
        let ids: Vec<u16> = frame.attrs().iter().map(|a| a.attr_id).collect();
        for id in ids {
            let a = frame.attr_mut(id).expect("an attribute of this frame");
            if a.attr_id == sys::UVERBS_ATTR_INFO_TOTAL_HANDLES && a.len >= 4 {
                // SAFETY: the caller guarantees the pointer is valid for the
                // attribute's length (at least 4 bytes) and direction (out).
                unsafe { (a.data as usize as *mut u32).write_unaligned(answer.total.get()) };
            }
            a.flags = answer.flags;
        }
        h.last_invoke = Some((answer.flags, answer.total.get()));
        Ok(())
    }
}

/// An advisor that applies nothing: the session's memory is a plain `Vec`.
struct NoAdvice;

impl Advisor for NoAdvice {
    fn advise(&self, _: usize, _: usize, _: Advice) -> Result<(), uverbs::error::Errno> {
        Ok(())
    }
}

/// `i` as an index into a list of `len` (out of range when empty).
fn index(i: u8, len: usize) -> usize {
    usize::from(i) % len.max(1)
}

fn pick<T>(v: &mut Vec<T>, i: u8) -> Option<T> {
    if v.is_empty() {
        None
    } else {
        let n = usize::from(i) % v.len();
        Some(v.swap_remove(n))
    }
}

fn check_error(kernel: &HostileKernel, what: &str, e: &uverbs::Error) {
    // The kernel's errno comes back, or the library refused the input.
    let injected = kernel.lock().last_errno;
    let errno = e.errno();
    assert!(
        errno.is_some() && (errno == injected || injected.is_none() || errno == Some(Errno::INVAL)),
        "{what}: {e} (kernel answered {injected:?})"
    );
}

fn check_session(s: Session) {
    const BUF: usize = 1 << 16;
    let mut buf = vec![0u8; BUF]; // outlives every MR below
    let base = buf.as_mut_ptr();
    let kernel = Arc::new(HostileKernel::default());
    let ops: Vec<ApiOp> = {
        let mut h = kernel.lock();
        h.answers.push_back(s.get_context);
        let mut ops = Vec::new();
        for (op, answer) in s.ops.into_iter().take(32) {
            h.answers.push_back(answer);
            ops.push(op);
        }
        ops
    };
    let driver = s.driver.map(|d| DriverId(u32::from(d % 24)));
    let fork = Arc::new(ForkSafety::new(ForkMode::Enabled, Box::new(NoAdvice)));
    let options = OpenOptions::new().fork_safety(fork);
    let ctx = match Context::with_transport("fuzz0", driver, Box::new(kernel.clone()), &options) {
        Ok(ctx) => ctx,
        Err(e) => {
            check_error(&kernel, "GET_CONTEXT", &e);
            return;
        }
    };
    let resp = response::<sys::ib_uverbs_get_context_resp>(&kernel);
    assert_eq!(ctx.num_comp_vectors(), resp.num_comp_vectors);

    let mut pds = Vec::new();
    let mut mrs = Vec::new();
    for op in ops {
        match op {
            ApiOp::QueryDevice => match ctx.query_device() {
                Ok(attr) => {
                    let resp = response::<sys::ib_uverbs_query_device_resp>(&kernel);
                    assert_eq!(attr, DeviceAttr::from(&resp), "device attributes");
                    let _ = attr.fw_ver_string();
                }
                Err(e) => check_error(&kernel, "QUERY_DEVICE", &e),
            },
            ApiOp::AllocPd => match ctx.alloc_pd() {
                Ok(pd) => {
                    let resp = response::<sys::ib_uverbs_alloc_pd_resp>(&kernel);
                    assert_eq!(pd.handle(), resp.pd_handle, "PD handle");
                    pds.push(pd);
                }
                Err(e) => check_error(&kernel, "ALLOC_PD", &e),
            },
            ApiOp::RegMr {
                pd,
                offset,
                len,
                access,
            } => {
                let Some(pd) = pds.get(usize::from(pd) % pds.len().max(1)) else {
                    continue;
                };
                let offset = usize::from(offset) % BUF;
                let len = usize::from(len).min(BUF - offset);
                let access = AccessFlags::from_bits_truncate(access);
                // SAFETY: `buf` outlives every MR (declared first, dropped
                // last); the fake kernel never touches it, nor does the
                // advisor.
                match unsafe { pd.reg_mr(base.add(offset), len, access) } {
                    Ok(mr) => {
                        let resp = response::<sys::ib_uverbs_reg_mr_resp>(&kernel);
                        assert_eq!(
                            (mr.handle(), mr.lkey(), mr.rkey()),
                            (resp.mr_handle, resp.lkey, resp.rkey),
                            "MR handle and keys"
                        );
                        assert_eq!(
                            (mr.addr(), mr.length()),
                            (base.wrapping_add(offset) as u64, len)
                        );
                        mrs.push(mr);
                    }
                    Err(e) => check_error(&kernel, "REG_MR", &e),
                }
            }
            ApiOp::SetAccess { mr, access } => {
                if let Some(mr) = {
                    let i = index(mr, mrs.len());
                    mrs.get_mut(i)
                } {
                    let _ = mr.set_access(AccessFlags::from_bits_truncate(access));
                }
            }
            ApiOp::SetPd { mr, pd } => {
                let pd = pds.get(usize::from(pd) % pds.len().max(1));
                if let (Some(mr), Some(pd)) = (
                    {
                        let i = index(mr, mrs.len());
                        mrs.get_mut(i)
                    },
                    pd,
                ) {
                    let _ = mr.set_pd(pd);
                }
            }
            ApiOp::SetRange { mr, offset, len } => {
                if let Some(mr) = {
                    let i = index(mr, mrs.len());
                    mrs.get_mut(i)
                } {
                    let offset = usize::from(offset) % BUF;
                    let len = usize::from(len).min(BUF - offset);
                    // SAFETY: as for REG_MR: inside `buf`, untouched.
                    let _ = unsafe { mr.set_range(base.add(offset), len) };
                }
            }
            ApiOp::Dereg { mr } => {
                if let Some(mr) = pick(&mut mrs, mr) {
                    if let Err(e) = mr.dereg() {
                        mrs.push(e.mr);
                    }
                }
            }
            ApiOp::Dealloc { pd } => {
                if let Some(pd) = pick(&mut pds, pd) {
                    if let Err(e) = pd.dealloc() {
                        pds.push(e.pd);
                    }
                }
            }
            ApiOp::DropMr { mr } => drop(pick(&mut mrs, mr)),
            ApiOp::DropPd { pd } => drop(pick(&mut pds, pd)),
            ApiOp::HandleCount { object } => match ctx.kernel_handle_count(object) {
                Ok(n) => {
                    let (flags, total) = kernel.lock().last_invoke.expect("an answer");
                    assert_eq!(n, total, "handle count");
                    assert_ne!(
                        flags & sys::UVERBS_ATTR_F_VALID_OUTPUT,
                        0,
                        "count not written"
                    );
                }
                // Without a driver id no ioctl header can be built: refused
                // before the kernel is asked.
                Err(e) if ctx.driver_id().is_none() => {
                    assert_eq!(e.errno(), Some(Errno::OPNOTSUPP), "INFO_HANDLES: {e}");
                }
                Err(e) => check_error(&kernel, "INFO_HANDLES", &e),
            },
        }
    }
    drop(mrs);
    drop(pds);
    drop(ctx);
    drop(buf);
}

/// The response the hostile kernel wrote for the last command.
fn response<T: FromBytes>(kernel: &HostileKernel) -> T {
    let h = kernel.lock();
    let (_, bytes) = h.last.as_ref().expect("the kernel answered");
    T::read_from_bytes(bytes).expect("a response of the struct's size")
}
