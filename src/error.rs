//! Errors: every failure names the operation, the device and the errno.
//!
//! One style throughout: [`Error`] for every operation but re-registration,
//! [`ReregError`] for re-registration (it carries libibverbs' outcome), and
//! named structs that hand an object back with the error
//! ([`DeregError`](crate::mr::DeregError), [`DeallocError`](crate::device::DeallocError),
//! [`BufferDeregError`](crate::mr::BufferDeregError), …).
//!
//! [`Errno`] is rustix's, re-exported on purpose: rustix 1.x is a
//! semver-stable crate this library is built on, its `Errno` is exactly the
//! raw `errno` value with the platform's named constants (`Errno::INVAL`) and
//! conversions to and from `std::io::Error`, and wrapping it would only add a
//! second name for the same number. Users need no rustix dependency of their
//! own: `uverbs::error::Errno` is the type. A future rustix 2 would be a breaking
//! release of this crate too.

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

pub use rustix::io::Errno;

/// The operation that failed, named like the verb a C programmer knows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Op {
    /// Listing devices in sysfs (`ibv_get_device_list`).
    ListDevices,
    /// Opening `/dev/infiniband/uverbsN` (`ibv_open_device`).
    Open,
    /// Choosing between the ioctl and write() transports.
    ProbeTransport,
    /// `GET_CONTEXT`.
    GetContext,
    /// `QUERY_DEVICE` (`ibv_query_device`).
    QueryDevice,
    /// `ALLOC_PD` (`ibv_alloc_pd`).
    AllocPd,
    /// `DEALLOC_PD` (`ibv_dealloc_pd`).
    DeallocPd,
    /// `REG_MR` (`ibv_reg_mr`).
    RegMr,
    /// `REREG_MR` (`ibv_rereg_mr`).
    ReregMr,
    /// `DEREG_MR` (`ibv_dereg_mr`).
    DeregMr,
    /// `UVERBS_METHOD_INFO_HANDLES`: counting the kernel's live objects.
    InfoHandles,
    /// `QUERY_PORT` (`ibv_query_port`).
    QueryPort,
    /// `QUERY_GID_ENTRY` or its sysfs fallback (`ibv_query_gid`, `ibv_query_gid_ex`).
    QueryGid,
    /// `QUERY_GID_TABLE` or its sysfs fallback (`ibv_query_gid_table`).
    QueryGidTable,
    /// `QUERY_CONTEXT` (`ibv_query_context`-like: completion vectors, core support).
    QueryContext,
    /// `UVERBS_METHOD_QUERY_MR` (the kernel's view of an MR).
    QueryMr,
    /// A raw command sent through [`Context::execute`](crate::Context::execute).
    Raw,
    /// `CREATE_COMP_CHANNEL` (`ibv_create_comp_channel`).
    CreateCompChannel,
    /// Reading a completion event (`ibv_get_cq_event`).
    GetCqEvent,
    /// Acknowledging completion events (`ibv_ack_cq_events`).
    AckCqEvents,
    /// `CREATE_CQ` and mapping its ring (`ibv_create_cq`).
    CreateCq,
    /// `DESTROY_CQ` (`ibv_destroy_cq`).
    DestroyCq,
    /// `REQ_NOTIFY_CQ` (`ibv_req_notify_cq`).
    ReqNotifyCq,
    /// Reading completions from a CQ's ring (`ibv_poll_cq`).
    PollCq,
    /// `CREATE_QP` and mapping its rings (`ibv_create_qp`).
    CreateQp,
    /// `MODIFY_QP` (`ibv_modify_qp`).
    ModifyQp,
    /// `QUERY_QP` (`ibv_query_qp`; the state refresh).
    QueryQp,
    /// `DESTROY_QP` (`ibv_destroy_qp`).
    DestroyQp,
    /// `ATTACH_MCAST` (`ibv_attach_mcast`).
    AttachMcast,
    /// `DETACH_MCAST` (`ibv_detach_mcast`).
    DetachMcast,
    /// Writing send WQEs and ringing the doorbell (`ibv_post_send`).
    PostSend,
    /// Writing receive WQEs (`ibv_post_recv`).
    PostRecv,
    /// `CREATE_AH` (`ibv_create_ah`).
    CreateAh,
    /// `DESTROY_AH` (`ibv_destroy_ah`).
    DestroyAh,
    /// Reading an event from the context's async-event file (`ibv_get_async_event`).
    GetAsyncEvent,
    /// Opening `/dev/infiniband/rdma_cm` (`rdma_create_event_channel`).
    CmOpen,
    /// rdma_cm `CREATE_ID` (`rdma_create_id`).
    CmCreateId,
    /// rdma_cm `DESTROY_ID` (`rdma_destroy_id`).
    CmDestroyId,
    /// rdma_cm `BIND_IP`/`BIND` (`rdma_bind_addr`).
    CmBind,
    /// rdma_cm `RESOLVE_IP`/`RESOLVE_ADDR` (`rdma_resolve_addr`).
    CmResolveAddr,
    /// rdma_cm `RESOLVE_ROUTE` (`rdma_resolve_route`).
    CmResolveRoute,
    /// rdma_cm `QUERY`/`QUERY_ROUTE` (addresses, paths, GIDs).
    CmQuery,
    /// rdma_cm `LISTEN` (`rdma_listen`).
    CmListen,
    /// rdma_cm `CONNECT` (`rdma_connect`).
    CmConnect,
    /// rdma_cm `ACCEPT` (`rdma_accept`, `rdma_establish`).
    CmAccept,
    /// rdma_cm `REJECT` (`rdma_reject`).
    CmReject,
    /// rdma_cm `DISCONNECT` (`rdma_disconnect`).
    CmDisconnect,
    /// rdma_cm `INIT_QP_ATTR` (`rdma_init_qp_attr`).
    CmInitQpAttr,
    /// rdma_cm `GET_EVENT` (`rdma_get_cm_event`).
    CmGetEvent,
    /// rdma_cm `NOTIFY` (`rdma_notify`).
    CmNotify,
    /// rdma_cm `SET_OPTION` (`rdma_set_option`).
    CmSetOption,
    /// rdma_cm `JOIN_MCAST` (`rdma_join_multicast`).
    CmJoinMulticast,
    /// rdma_cm `LEAVE_MCAST` (`rdma_leave_multicast`).
    CmLeaveMulticast,
    /// `EX_QUERY_DEVICE` / `UVERBS_METHOD_QUERY_DEVICE` extended attributes (`ibv_query_device_ex`).
    QueryDeviceEx,
    /// `RESIZE_CQ` and remapping the ring (`ibv_resize_cq`).
    ResizeCq,
    /// `CREATE_SRQ` and mapping its ring (`ibv_create_srq`).
    CreateSrq,
    /// `MODIFY_SRQ` (`ibv_modify_srq`).
    ModifySrq,
    /// `QUERY_SRQ` (`ibv_query_srq`).
    QuerySrq,
    /// `DESTROY_SRQ` (`ibv_destroy_srq`).
    DestroySrq,
    /// Writing receive WQEs to a shared receive queue (`ibv_post_srq_recv`).
    PostSrqRecv,
    /// `ALLOC_MW` (`ibv_alloc_mw`).
    AllocMw,
    /// `DEALLOC_MW` (`ibv_dealloc_mw`).
    DeallocMw,
    /// Binding a memory window (`ibv_bind_mw`, a `BIND_MW` work request).
    BindMw,
    /// `UVERBS_METHOD_REG_DMABUF_MR` (`ibv_reg_dmabuf_mr`).
    RegDmabufMr,
}

impl Op {
    /// The libibverbs-style name of the operation, e.g. `"reg_mr"`.
    pub fn name(self) -> &'static str {
        match self {
            Op::ListDevices => "get_device_list",
            Op::Open => "open_device",
            Op::ProbeTransport => "probe_transport",
            Op::GetContext => "get_context",
            Op::QueryDevice => "query_device",
            Op::AllocPd => "alloc_pd",
            Op::DeallocPd => "dealloc_pd",
            Op::RegMr => "reg_mr",
            Op::ReregMr => "rereg_mr",
            Op::DeregMr => "dereg_mr",
            Op::InfoHandles => "info_handles",
            Op::QueryPort => "query_port",
            Op::QueryGid => "query_gid",
            Op::QueryGidTable => "query_gid_table",
            Op::QueryContext => "query_context",
            Op::QueryMr => "query_mr",
            Op::Raw => "raw_command",
            Op::CreateCompChannel => "create_comp_channel",
            Op::GetCqEvent => "get_cq_event",
            Op::AckCqEvents => "ack_cq_events",
            Op::CreateCq => "create_cq",
            Op::DestroyCq => "destroy_cq",
            Op::ReqNotifyCq => "req_notify_cq",
            Op::PollCq => "poll_cq",
            Op::CreateQp => "create_qp",
            Op::ModifyQp => "modify_qp",
            Op::QueryQp => "query_qp",
            Op::DestroyQp => "destroy_qp",
            Op::AttachMcast => "attach_mcast",
            Op::DetachMcast => "detach_mcast",
            Op::PostSend => "post_send",
            Op::PostRecv => "post_recv",
            Op::CreateAh => "create_ah",
            Op::DestroyAh => "destroy_ah",
            Op::GetAsyncEvent => "get_async_event",
            Op::CmOpen => "rdma_create_event_channel",
            Op::CmCreateId => "rdma_create_id",
            Op::CmDestroyId => "rdma_destroy_id",
            Op::CmBind => "rdma_bind_addr",
            Op::CmResolveAddr => "rdma_resolve_addr",
            Op::CmResolveRoute => "rdma_resolve_route",
            Op::CmQuery => "rdma_query",
            Op::CmListen => "rdma_listen",
            Op::CmConnect => "rdma_connect",
            Op::CmAccept => "rdma_accept",
            Op::CmReject => "rdma_reject",
            Op::CmDisconnect => "rdma_disconnect",
            Op::CmInitQpAttr => "rdma_init_qp_attr",
            Op::CmGetEvent => "rdma_get_cm_event",
            Op::CmNotify => "rdma_notify",
            Op::CmSetOption => "rdma_set_option",
            Op::CmJoinMulticast => "rdma_join_multicast",
            Op::CmLeaveMulticast => "rdma_leave_multicast",
            Op::QueryDeviceEx => "query_device_ex",
            Op::ResizeCq => "resize_cq",
            Op::CreateSrq => "create_srq",
            Op::ModifySrq => "modify_srq",
            Op::QuerySrq => "query_srq",
            Op::DestroySrq => "destroy_srq",
            Op::PostSrqRecv => "post_srq_recv",
            Op::AllocMw => "alloc_mw",
            Op::DeallocMw => "dealloc_mw",
            Op::BindMw => "bind_mw",
            Op::RegDmabufMr => "reg_dmabuf_mr",
        }
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Formats an errno as `EINVAL (22): Invalid argument`.
pub(crate) struct ErrnoDisplay(pub Errno);

impl fmt::Display for ErrnoDisplay {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let raw = self.0.raw_os_error();
        let io = std::io::Error::from_raw_os_error(raw);
        let text = io.to_string();
        // std renders "Invalid argument (os error 22)"; keep the words only.
        let words = text.split(" (os error").next().unwrap_or(&text);
        match errno_name(raw) {
            Some(name) => write!(f, "{name} ({raw}): {words}"),
            None => write!(f, "errno {raw}: {words}"),
        }
    }
}

/// Symbolic names of the errnos the uverbs calls are documented to return.
fn errno_name(raw: i32) -> Option<&'static str> {
    let names: &[(Errno, &str)] = &[
        (Errno::PERM, "EPERM"),
        (Errno::NOENT, "ENOENT"),
        (Errno::INTR, "EINTR"),
        (Errno::IO, "EIO"),
        (Errno::BADF, "EBADF"),
        (Errno::AGAIN, "EAGAIN"),
        (Errno::NOMEM, "ENOMEM"),
        (Errno::ACCESS, "EACCES"),
        (Errno::FAULT, "EFAULT"),
        (Errno::BUSY, "EBUSY"),
        (Errno::EXIST, "EEXIST"),
        (Errno::NODEV, "ENODEV"),
        (Errno::INVAL, "EINVAL"),
        (Errno::MFILE, "EMFILE"),
        (Errno::NOTTY, "ENOTTY"),
        (Errno::NOSPC, "ENOSPC"),
        (Errno::RANGE, "ERANGE"),
        (Errno::NOSYS, "ENOSYS"),
        (Errno::PROTO, "EPROTO"),
        (Errno::OVERFLOW, "EOVERFLOW"),
        (Errno::PROTONOSUPPORT, "EPROTONOSUPPORT"),
        (Errno::OPNOTSUPP, "EOPNOTSUPP"),
        (Errno::AFNOSUPPORT, "EAFNOSUPPORT"),
        (Errno::TOOBIG, "E2BIG"),
        (Errno::TIMEDOUT, "ETIMEDOUT"),
        (Errno::CONNREFUSED, "ECONNREFUSED"),
        (Errno::NETUNREACH, "ENETUNREACH"),
        (Errno::HOSTUNREACH, "EHOSTUNREACH"),
        (Errno::ADDRINUSE, "EADDRINUSE"),
        (Errno::ADDRNOTAVAIL, "EADDRNOTAVAIL"),
        (Errno::ISCONN, "EISCONN"),
        (Errno::NODATA, "ENODATA"),
        (Errno::NXIO, "ENXIO"),
    ];
    names
        .iter()
        .find(|(e, _)| e.raw_os_error() == raw)
        .map(|(_, n)| *n)
}

/// An error from any operation of this crate except re-registration, which
/// has its own [`ReregError`].
///
/// Its `Display` names the operation, the device and the errno, and for
/// the errors of a first hour with RDMA (no `rdma_ucm`, no device, no
/// permission on the device file, a low locked-memory limit) says what to
/// check. Its `Debug`, which `fn main() -> Result<(), Box<dyn Error>>`
/// prints, leads with that message and adds the variant and its fields;
/// `{:#?}` shows the fields alone.
#[derive(thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The kernel (or the operating system) refused the operation.
    #[error("{op} on {device}: {}{}", ErrnoDisplay(*errno), Hint::for_errno(*op, *errno))]
    Os {
        /// What was being done.
        op: Op,
        /// The device (`rxe0`, …).
        device: Arc<str>,
        /// The errno the kernel answered.
        errno: Errno,
    },
    /// Fork safety is enabled and `madvise` refused to mark (or un-mark) the
    /// range; nothing was sent to the kernel. `ENOMEM` means part of the
    /// range is not mapped (libibverbs' `ibv_reg_mr` fails the same way);
    /// `EAGAIN` that the process reached `vm.max_map_count` mappings (every
    /// separate `MADV_DONTFORK` range splits its mapping; see
    /// [`fork::max_map_count`](crate::fork::max_map_count)). The message
    /// names the limit, read when it is displayed.
    #[error("{op} on {device}: fork safety: madvise(MADV_DONTFORK/MADV_DOFORK) of the range failed: {}", crate::fork::MadviseErrnoDisplay(*errno))]
    ForkSafety {
        /// What was being done.
        op: Op,
        /// The device (`rxe0`, …).
        device: Arc<str>,
        /// madvise's errno.
        errno: Errno,
    },
    /// The input was refused before anything was sent to the kernel.
    #[error("{op} on {device}: invalid input: {reason}")]
    InvalidInput {
        /// What was being done.
        op: Op,
        /// The device (`rxe0`, …).
        device: Arc<str>,
        /// Why the input was refused.
        reason: &'static str,
    },
    /// A sysfs file could not be read or parsed.
    #[error("{op}: {}: {error}", path.display())]
    Sysfs {
        /// What was being done.
        op: Op,
        /// The file.
        path: PathBuf,
        /// Why it failed (part of the message, not a `source()`).
        error: std::io::Error,
    },
    /// The kernel speaks an ABI version this crate does not.
    #[error("{op} on {device}: unsupported {what} ABI version {found} (supported: {supported})")]
    Abi {
        /// What was being done.
        op: Op,
        /// The device, or `uverbs` for the global ABI.
        device: Arc<str>,
        /// Which ABI (`uverbs`, `rxe driver`, …).
        what: &'static str,
        /// The version found.
        found: u32,
        /// The versions this crate supports, e.g. `"6"` or `"1..=2"`.
        supported: &'static str,
    },
    /// The object was created in another process: this is a child forked
    /// since, which inherited copies of the parent's objects. Nothing was
    /// sent to the kernel; the parent's object is untouched (dropping the
    /// copy here does nothing either). The errno is `EACCES`, what the
    /// kernel answers a child over `write()`.
    #[error("{op} on {device}: the object belongs to the process that created it, not to this forked child; nothing was sent")]
    ForeignProcess {
        /// What was being done.
        op: Op,
        /// The device (`rxe0`, …).
        device: Arc<str>,
    },
    /// The character device that was opened is not the one sysfs announced.
    #[error("{op} on {device}: {path} is device {found:?}, sysfs announced {expected:?}")]
    WrongCharDevice {
        /// What was being done.
        op: Op,
        /// The device.
        device: Arc<str>,
        /// The path that was opened.
        path: String,
        /// The (major, minor) found by fstat.
        found: (u32, u32),
        /// The (major, minor) sysfs announced.
        expected: (u32, u32),
    },
    /// A work request was refused before anything was queued: none of the
    /// call's work requests reached the queue or the kernel.
    #[error("{op} on {device}: work request {index} of the call: {why}")]
    Post {
        /// [`Op::PostSend`] or [`Op::PostRecv`].
        op: Op,
        /// The device (`rxe0`, …).
        device: Arc<str>,
        /// Which work request of the slice (0 = first).
        index: usize,
        /// Why (boxed: errors stay small). Part of the message, not a
        /// `source()`: a chain printer would say it twice.
        why: Box<crate::wr::PostError>,
    },
    /// A QP state change was refused before it was sent (see
    /// [`QpAttr::check`](crate::command::QpAttr::check)).
    #[error("{op} on {device}: {verdict}")]
    QpTransition {
        /// [`Op::ModifyQp`].
        op: Op,
        /// The device (`rxe0`, …).
        device: Arc<str>,
        /// The table's verdict (part of the message, not a `source()`).
        verdict: crate::command::QpTransitionError,
    },
    /// The work requests were queued (written into the ring and published)
    /// but the doorbell `write()` that announces them failed: they belong to
    /// the device now, which may still run them (on rxe once a later
    /// doorbell or a move to ERR reaches them). `EACCES` is what the kernel
    /// answers every `write()` on the file once the process's credentials
    /// changed since it was opened (`setuid`, `setgid`, `capset`:
    /// `ib_safe_file_access`); siw may also answer `ENOTCONN` while its QP
    /// state lock is contended, and any driver `ENOMEM`.
    #[error("{op} on {device}: the work requests were queued but the doorbell write failed: {}; the device owns them", ErrnoDisplay(*errno))]
    Doorbell {
        /// [`Op::PostSend`].
        op: Op,
        /// The device (`rxe0`, …).
        device: Arc<str>,
        /// The errno of the doorbell write.
        errno: Errno,
    },
    /// The operation cannot be done soundly here, whatever the kernel would
    /// answer: nothing was sent. Creating a CQ or QP on a driver this crate
    /// has no data path for (anything but rxe and siw), or on siw off
    /// x86-64; the reason says which. The errno is `EOPNOTSUPP`.
    #[error("{op} on {device}: not supported here: {reason}")]
    Unsupported {
        /// What was being done.
        op: Op,
        /// The device (`siw0`, …).
        device: Arc<str>,
        /// Why.
        reason: &'static str,
    },
    /// The kernel answered, but its answer does not carry what was asked:
    /// siw's `QUERY_QP` on Linux 6.1 fills no QP state (every QP reads back
    /// RESET, which siw never reports where it does fill it, as on 6.12).
    #[error("{op} on {device}: this kernel does not report {what}")]
    NotReported {
        /// What was being done.
        op: Op,
        /// The device (`rxe0`, …).
        device: Arc<str>,
        /// What the answer lacks.
        what: &'static str,
    },
    /// No RDMA device of that name, or none at all
    /// ([`Device::by_name`](crate::Device::by_name),
    /// [`Device::first`](crate::Device::first)). The errno is `ENODEV`.
    #[error("{}{}", NoDeviceDisplay { wanted: wanted.as_deref(), found }, Hint::NoDevice)]
    NoDevice {
        /// The name asked for; `None` when any device would have done.
        wanted: Option<String>,
        /// The devices there are.
        found: Vec<String>,
    },
    /// Nothing came within the time given
    /// ([`OwnedQp::wait`](crate::OwnedQp::wait)). The errno is
    /// `ETIMEDOUT`.
    #[error("{op} on {device}: nothing came within {after:?}")]
    TimedOut {
        /// What was being waited for.
        op: Op,
        /// The device (`rxe0`, …).
        device: Arc<str>,
        /// How long was waited.
        after: std::time::Duration,
    },
}

/// `{:?}` leads with the message; `{:#?}` is the fields alone.
impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if f.alternate() {
            return self.fields(f);
        }
        write!(f, "{self} [")?;
        self.fields(f)?;
        f.write_str("]")
    }
}

impl Error {
    /// The variant and its fields, as a derived `Debug` would print them.
    fn fields(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let errno = |e: &Errno| ErrnoName(*e);
        match self {
            Error::Os {
                op,
                device,
                errno: e,
            } => f
                .debug_struct("Os")
                .field("op", op)
                .field("device", device)
                .field("errno", &errno(e))
                .finish(),
            Error::ForkSafety {
                op,
                device,
                errno: e,
            } => f
                .debug_struct("ForkSafety")
                .field("op", op)
                .field("device", device)
                .field("errno", &errno(e))
                .finish(),
            Error::InvalidInput { op, device, reason } => f
                .debug_struct("InvalidInput")
                .field("op", op)
                .field("device", device)
                .field("reason", reason)
                .finish(),
            Error::Sysfs { op, path, error } => f
                .debug_struct("Sysfs")
                .field("op", op)
                .field("path", path)
                .field("error", error)
                .finish(),
            Error::Abi {
                op,
                device,
                what,
                found,
                supported,
            } => f
                .debug_struct("Abi")
                .field("op", op)
                .field("device", device)
                .field("what", what)
                .field("found", found)
                .field("supported", supported)
                .finish(),
            Error::ForeignProcess { op, device } => f
                .debug_struct("ForeignProcess")
                .field("op", op)
                .field("device", device)
                .finish(),
            Error::WrongCharDevice {
                op,
                device,
                path,
                found,
                expected,
            } => f
                .debug_struct("WrongCharDevice")
                .field("op", op)
                .field("device", device)
                .field("path", path)
                .field("found", found)
                .field("expected", expected)
                .finish(),
            Error::Post {
                op,
                device,
                index,
                why,
            } => f
                .debug_struct("Post")
                .field("op", op)
                .field("device", device)
                .field("index", index)
                .field("why", why)
                .finish(),
            Error::QpTransition {
                op,
                device,
                verdict,
            } => f
                .debug_struct("QpTransition")
                .field("op", op)
                .field("device", device)
                .field("verdict", verdict)
                .finish(),
            Error::Doorbell {
                op,
                device,
                errno: e,
            } => f
                .debug_struct("Doorbell")
                .field("op", op)
                .field("device", device)
                .field("errno", &errno(e))
                .finish(),
            Error::Unsupported { op, device, reason } => f
                .debug_struct("Unsupported")
                .field("op", op)
                .field("device", device)
                .field("reason", reason)
                .finish(),
            Error::NotReported { op, device, what } => f
                .debug_struct("NotReported")
                .field("op", op)
                .field("device", device)
                .field("what", what)
                .finish(),
            Error::NoDevice { wanted, found } => f
                .debug_struct("NoDevice")
                .field("wanted", wanted)
                .field("found", found)
                .finish(),
            Error::TimedOut { op, device, after } => f
                .debug_struct("TimedOut")
                .field("op", op)
                .field("device", device)
                .field("after", after)
                .finish(),
        }
    }
}

/// An errno in a `Debug`: its symbolic name where known (`ENOENT`).
struct ErrnoName(Errno);

impl fmt::Debug for ErrnoName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let raw = self.0.raw_os_error();
        match errno_name(raw) {
            Some(name) => f.write_str(name),
            None => write!(f, "errno {raw}"),
        }
    }
}

/// [`Error::NoDevice`]'s message without its hint.
struct NoDeviceDisplay<'a> {
    wanted: Option<&'a str>,
    found: &'a [String],
}

impl fmt::Display for NoDeviceDisplay<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.wanted {
            Some(name) => write!(f, "no RDMA device named {name}")?,
            None => f.write_str("no RDMA device")?,
        }
        match self.found {
            [] => f.write_str(" (there is none)"),
            found => write!(f, " (there are: {})", found.join(", ")),
        }
    }
}

/// What to check after the failures a first hour with RDMA meets: written
/// after the message as `; check: …`, or nothing.
enum Hint {
    None,
    NoRdmaCm,
    NoCmPermission,
    NoUverbsFile,
    NoUverbsPermission,
    Memlock,
    NoDevice,
}

impl Hint {
    fn for_errno(op: Op, errno: Errno) -> Hint {
        let missing = [Errno::NOENT, Errno::NODEV, Errno::NXIO].contains(&errno);
        let denied = [Errno::ACCESS, Errno::PERM].contains(&errno);
        match op {
            Op::CmOpen if missing => Hint::NoRdmaCm,
            Op::CmOpen if denied => Hint::NoCmPermission,
            Op::Open if missing => Hint::NoUverbsFile,
            Op::Open if denied => Hint::NoUverbsPermission,
            // ib_umem_get's answer when the pinned pages would pass the
            // limit (and the process lacks CAP_IPC_LOCK).
            Op::RegMr | Op::ReregMr if errno == Errno::NOMEM => Hint::Memlock,
            _ => Hint::None,
        }
    }
}

impl fmt::Display for Hint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let text = match self {
            Hint::None => return Ok(()),
            Hint::NoRdmaCm => "is the rdma_ucm module loaded? (`modprobe rdma_ucm`)",
            Hint::NoCmPermission => {
                "the user may not open /dev/infiniband/rdma_cm (its mode and group, usually set by udev)"
            }
            Hint::NoUverbsFile => {
                "is ib_uverbs loaded, and is the device still there? (`modprobe ib_uverbs`, `rdma link`)"
            }
            Hint::NoUverbsPermission => {
                "the user may not open /dev/infiniband/uverbsN: see its mode and group (often `rdma`), set by udev"
            }
            Hint::Memlock => {
                let limit = rustix::process::getrlimit(rustix::process::Resource::Memlock).current;
                return match limit {
                    Some(bytes) => write!(
                        f,
                        "; check: registered memory counts against the locked-memory limit, {} KiB here (`ulimit -l`, RLIMIT_MEMLOCK)",
                        bytes / 1024
                    ),
                    None => f.write_str("; check: the locked-memory limit (`ulimit -l`, RLIMIT_MEMLOCK)"),
                };
            }
            Hint::NoDevice => {
                "is a driver loaded? A soft device needs no hardware: `modprobe rdma_rxe` and `rdma link add rxe0 type rxe netdev eth0` (or `modprobe siw`, `type siw`)"
            }
        };
        write!(f, "; check: {text}")
    }
}

impl Error {
    pub(crate) fn os(op: Op, device: &Arc<str>, errno: Errno) -> Self {
        crate::trace::error(op, device, errno);
        Error::Os {
            op,
            device: device.clone(),
            errno,
        }
    }

    pub(crate) fn input(op: Op, device: &Arc<str>, reason: &'static str) -> Self {
        Error::InvalidInput {
            op,
            device: device.clone(),
            reason,
        }
    }

    /// The operation that failed.
    pub fn op(&self) -> Op {
        match self {
            Error::Os { op, .. }
            | Error::ForkSafety { op, .. }
            | Error::InvalidInput { op, .. }
            | Error::Sysfs { op, .. }
            | Error::Abi { op, .. }
            | Error::ForeignProcess { op, .. }
            | Error::WrongCharDevice { op, .. }
            | Error::Post { op, .. }
            | Error::QpTransition { op, .. }
            | Error::Unsupported { op, .. }
            | Error::NotReported { op, .. }
            | Error::TimedOut { op, .. }
            | Error::Doorbell { op, .. } => *op,
            Error::NoDevice { .. } => Op::ListDevices,
        }
    }

    /// The errno, for errors that carry one (`EINVAL` for refused input,
    /// `EACCES` for [`Error::ForeignProcess`]).
    pub fn errno(&self) -> Option<Errno> {
        match self {
            Error::Os { errno, .. }
            | Error::ForkSafety { errno, .. }
            | Error::Doorbell { errno, .. } => Some(*errno),
            Error::InvalidInput { .. } => Some(Errno::INVAL),
            Error::ForeignProcess { .. } => Some(Errno::ACCESS),
            Error::Sysfs { error, .. } => error.raw_os_error().map(Errno::from_raw_os_error),
            Error::Abi { .. } | Error::WrongCharDevice { .. } => None,
            Error::Post { why, .. } => Some(why.errno()),
            Error::QpTransition { .. } => Some(Errno::INVAL),
            Error::NotReported { .. } | Error::Unsupported { .. } => Some(Errno::OPNOTSUPP),
            Error::NoDevice { .. } => Some(Errno::NODEV),
            Error::TimedOut { .. } => Some(Errno::TIMEDOUT),
        }
    }
}

/// The refusals that hand an object back with an [`Error`] (its `error`
/// field): one accessor for all of them, `error()` and `into_error()`, and
/// `?` into [`Error`] (dropping what came back, which releases it as its
/// drop does).
macro_rules! hands_back_with_error {
    ($( [$($g:tt)*] $t:ty, $what:literal; )*) => {$(
        impl<$($g)*> $t {
            /// Why: the error (also the field `error`).
            pub fn error(&self) -> &$crate::error::Error {
                &self.error
            }

            #[doc = concat!("The error, dropping ", $what, ".")]
            pub fn into_error(self) -> $crate::error::Error {
                self.error
            }
        }

        #[doc = concat!("For `?`: the error, dropping ", $what, ".")]
        impl<$($g)*> From<$t> for $crate::error::Error {
            fn from(e: $t) -> $crate::error::Error {
                e.error
            }
        }
    )*};
}
// Invoked beside each refusal type, so this file imports none of them.
pub(crate) use hands_back_with_error;

/// The `std::io::ErrorKind` an errno stands for (`EAGAIN` is `WouldBlock`,
/// which tokio's `AsyncFd::try_io` relies on).
fn io_kind(errno: Option<Errno>) -> std::io::ErrorKind {
    match errno {
        Some(e) => std::io::Error::from_raw_os_error(e.raw_os_error()).kind(),
        None => std::io::ErrorKind::Other,
    }
}

/// For `?` in functions returning `std::io::Result` (tokio's
/// `AsyncFd::try_io` among them). The `io::Error`'s kind is the errno's
/// (`Other` for errors with none) and the error itself is its payload, so
/// nothing is lost: the message still names the operation and the device,
/// and the errno is `Error::errno` of the payload.
///
/// ```
/// # fn f(ctx: &uverbs::Context) -> std::io::Result<()> {
/// let pd = ctx.alloc_pd()?; // uverbs::Error -> std::io::Error
/// # drop(pd); Ok(()) }
/// # fn g(e: std::io::Error) -> Option<uverbs::error::Errno> {
/// // And back, for the errno:
/// e.get_ref()?.downcast_ref::<uverbs::Error>()?.errno()
/// # }
/// ```
impl From<Error> for std::io::Error {
    fn from(e: Error) -> Self {
        std::io::Error::new(io_kind(e.errno()), e)
    }
}

/// As for [`Error`]: the errno's kind, the error as payload.
impl From<ReregError> for std::io::Error {
    fn from(e: ReregError) -> Self {
        std::io::Error::new(io_kind(Some(e.errno())), e)
    }
}

/// The five failure outcomes of `ibv_rereg_mr(3)`, with libibverbs' codes.
///
/// An outcome says *which step* failed. It does not say whether the MR is
/// usable: ask the error, [`ReregError::mr_state`], which knows what the
/// code alone cannot (a `Cmd` refusal the kernel makes before changing
/// anything leaves the MR [`MrState::Old`]). The code's own promise, as the
/// man page words it, is [`man_page_guarantee`](Self::man_page_guarantee).
#[doc(alias = "ibv_rereg_mr_err_code")]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReregOutcome {
    /// The arguments were refused; nothing was sent (`IBV_REREG_MR_ERR_INPUT`,
    /// −1). The man page: the old MR is valid.
    #[doc(alias = "IBV_REREG_MR_ERR_INPUT")]
    Input,
    /// Marking the new range `MADV_DONTFORK` failed; nothing was sent
    /// (`IBV_REREG_MR_ERR_DONT_FORK_NEW`, −2). The man page: the old MR is
    /// valid.
    #[doc(alias = "IBV_REREG_MR_ERR_DONT_FORK_NEW")]
    DontForkNew,
    /// The kernel re-registered the MR, but un-marking the old range failed
    /// (`IBV_REREG_MR_ERR_DO_FORK_OLD`, −3). The man page: the new MR is
    /// valid.
    #[doc(alias = "IBV_REREG_MR_ERR_DO_FORK_OLD")]
    DoForkOld,
    /// The kernel refused the command (`IBV_REREG_MR_ERR_CMD`, −4). The man
    /// page: the MR should not be used. Many refusals provably change
    /// nothing; [`ReregError::mr_state`] says whether this one did.
    #[doc(alias = "IBV_REREG_MR_ERR_CMD")]
    Cmd,
    /// The kernel refused the command and un-marking the new range failed
    /// too (`IBV_REREG_MR_ERR_CMD_AND_DO_FORK_NEW`, −5). The man page: the
    /// MR should not be used.
    #[doc(alias = "IBV_REREG_MR_ERR_CMD_AND_DO_FORK_NEW")]
    CmdAndDoForkNew,
}

/// Which registration a failed re-registration left valid: the answer of
/// [`ReregError::mr_state`], the one place that says it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MrState {
    /// The MR is unchanged: old translation, PD, access and keys.
    Old,
    /// The MR carries its new attributes and keys.
    New,
    /// The man page calls the MR undefined: it can only be deregistered
    /// (dropping it does that).
    Undefined,
}

/// What `ibv_rereg_mr(3)` promises for a failure code, read from the code
/// alone ([`ReregOutcome::man_page_guarantee`]).
///
/// A floor, not the MR's state: the state of the MR after a given failure
/// is [`ReregError::mr_state`], which is always one the guarantee
/// [`admits`](Self::admits), and may know more (after a `Cmd` refusal the
/// kernel makes before changing anything it is [`MrState::Old`], although
/// the code alone promises nothing).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ManPageGuarantee {
    /// "Old MR is valid" (`INPUT`, `DONT_FORK_NEW`).
    OldMrValid,
    /// "New MR is valid" (`DO_FORK_OLD`).
    NewMrValid,
    /// "MR shouldn't be used" (`CMD`, `CMD_AND_DO_FORK_NEW`): the code
    /// promises nothing; whether this failure left the MR intact is the
    /// error's to say.
    Nothing,
}

impl ManPageGuarantee {
    /// Whether a failure with this guarantee may leave the MR in `state`:
    /// [`OldMrValid`](Self::OldMrValid) only [`MrState::Old`],
    /// [`NewMrValid`](Self::NewMrValid) only [`MrState::New`],
    /// [`Nothing`](Self::Nothing) any state.
    pub fn admits(self, state: MrState) -> bool {
        match self {
            ManPageGuarantee::OldMrValid => state == MrState::Old,
            ManPageGuarantee::NewMrValid => state == MrState::New,
            ManPageGuarantee::Nothing => true,
        }
    }

    /// The state to assume when nothing more is known about a failure.
    pub(crate) fn worst_case(self) -> MrState {
        match self {
            ManPageGuarantee::OldMrValid => MrState::Old,
            ManPageGuarantee::NewMrValid => MrState::New,
            ManPageGuarantee::Nothing => MrState::Undefined,
        }
    }
}

impl ReregOutcome {
    /// libibverbs' return code (`IBV_REREG_MR_ERR_*`, −1 … −5).
    pub fn code(self) -> i32 {
        match self {
            ReregOutcome::Input => -1,
            ReregOutcome::DontForkNew => -2,
            ReregOutcome::DoForkOld => -3,
            ReregOutcome::Cmd => -4,
            ReregOutcome::CmdAndDoForkNew => -5,
        }
    }

    /// What `ibv_rereg_mr(3)` promises about the MR for this code alone.
    /// To know whether *your* MR is valid after a failure, ask
    /// [`ReregError::mr_state`] instead: it never contradicts this promise,
    /// but after [`Cmd`](Self::Cmd) it often knows the MR is unchanged where
    /// the code promises nothing.
    pub fn man_page_guarantee(self) -> ManPageGuarantee {
        match self {
            ReregOutcome::Input | ReregOutcome::DontForkNew => ManPageGuarantee::OldMrValid,
            ReregOutcome::DoForkOld => ManPageGuarantee::NewMrValid,
            ReregOutcome::Cmd | ReregOutcome::CmdAndDoForkNew => ManPageGuarantee::Nothing,
        }
    }

    /// The C name of the outcome, e.g. `"IBV_REREG_MR_ERR_CMD"`.
    pub fn c_name(self) -> &'static str {
        match self {
            ReregOutcome::Input => "IBV_REREG_MR_ERR_INPUT",
            ReregOutcome::DontForkNew => "IBV_REREG_MR_ERR_DONT_FORK_NEW",
            ReregOutcome::DoForkOld => "IBV_REREG_MR_ERR_DO_FORK_OLD",
            ReregOutcome::Cmd => "IBV_REREG_MR_ERR_CMD",
            ReregOutcome::CmdAndDoForkNew => "IBV_REREG_MR_ERR_CMD_AND_DO_FORK_NEW",
        }
    }
}

impl fmt::Display for ReregOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.c_name(), self.code())
    }
}

/// A failed re-registration: which of the five outcomes, the errno, and
/// whether the old MR, the new MR or neither is valid
/// ([`mr_state`](Self::mr_state), the one answer to that question).
#[derive(Debug, thiserror::Error)]
#[error("rereg_mr on {device}: {outcome}: {}{}", ErrnoDisplay(*errno), reason.map(|r| format!(" ({r})")).unwrap_or_default())]
#[non_exhaustive]
pub struct ReregError {
    pub(crate) outcome: ReregOutcome,
    pub(crate) mr_state: MrState,
    pub(crate) errno: Errno,
    pub(crate) device: Arc<str>,
    pub(crate) reason: Option<&'static str>,
    pub(crate) fork_errno: Option<Errno>,
    pub(crate) new_range_registered: bool,
}

impl ReregError {
    /// A failure with `outcome`, the MR in the state its code guarantees
    /// (undefined where it guarantees nothing) until
    /// [`known_unchanged`](Self::known_unchanged) says more.
    pub(crate) fn new(outcome: ReregOutcome, errno: Errno, device: Arc<str>) -> ReregError {
        crate::trace::rereg_error(outcome, &device, errno);
        ReregError {
            outcome,
            mr_state: outcome.man_page_guarantee().worst_case(),
            errno,
            device,
            reason: None,
            fork_errno: None,
            new_range_registered: false,
        }
    }

    /// Records that this failure is known to have left the MR unchanged
    /// ([`MrState::Old`]). Only for outcomes whose code admits it: the
    /// error never contradicts the man page.
    pub(crate) fn known_unchanged(mut self) -> ReregError {
        debug_assert!(
            self.outcome.man_page_guarantee().admits(MrState::Old),
            "{:?} cannot leave the MR unchanged",
            self.outcome
        );
        self.mr_state = MrState::Old;
        self
    }

    /// Which of `ibv_rereg_mr`'s failure outcomes this is (which step
    /// failed; whether the MR is valid is [`mr_state`](Self::mr_state)).
    pub fn outcome(&self) -> ReregOutcome {
        self.outcome
    }

    /// The errno: `EINVAL` for refused input, madvise's for fork failures,
    /// the kernel's for command failures.
    pub fn errno(&self) -> Errno {
        self.errno
    }

    /// libibverbs' return code (−1 … −5).
    pub fn code(&self) -> i32 {
        self.outcome.code()
    }

    /// What is valid now: the old MR, the new one, or neither. This is the
    /// answer for this failure; ask it rather than the outcome. It is always
    /// a state the outcome's [`man_page_guarantee`](ReregOutcome::man_page_guarantee)
    /// admits, and it is [`MrState::Old`] after a [`ReregOutcome::Cmd`]
    /// known to have changed nothing: a refusal the kernel makes before
    /// touching the MR (`EOPNOTSUPP`, `EACCES`, `EINVAL` for empty flags on
    /// every driver; more on rxe and siw, see docs/rereg.md) or a failed
    /// replace fallback. Otherwise a `Cmd` leaves it [`MrState::Undefined`].
    pub fn mr_state(&self) -> MrState {
        self.mr_state
    }

    /// Why the input was refused, for the [`ReregOutcome::Input`] outcome.
    pub fn reason(&self) -> Option<&'static str> {
        self.reason
    }

    /// For [`ReregOutcome::CmdAndDoForkNew`]: madvise's errno when
    /// un-marking the new range failed (the command's is [`errno`](Self::errno)).
    pub fn fork_errno(&self) -> Option<Errno> {
        self.fork_errno
    }

    /// True when the new range is still registered although the MR is in
    /// its old state: a replace fallback whose two deregistrations both
    /// failed. The kernel releases that registration when the context is
    /// closed; until then the new range must stay mapped (an owned buffer
    /// is never handed back in that case).
    pub fn new_range_still_registered(&self) -> bool {
        self.new_range_registered
    }

    /// The device the MR belongs to.
    pub fn device(&self) -> &str {
        &self.device
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Message or `source()`, never both: a chain printer (anyhow's
    /// `{:#}`) would otherwise say the reason twice.
    #[test]
    fn a_refused_post_reads_the_same_way_as_any_refusal() {
        let refused = crate::post::PostRefused {
            request: 7u32,
            error: Error::Unsupported {
                op: Op::PostSend,
                device: Arc::from("rxe0"),
                reason: "a test",
            },
        };
        assert_eq!(refused.error().errno(), Some(Errno::OPNOTSUPP));
        let send = crate::post::PostSendError::Refused(refused);
        assert_eq!(send.error().op(), Op::PostSend);
        let through_question_mark = || -> Result<(), Error> { Err(send)? };
        let e = through_question_mark().unwrap_err();
        assert_eq!(
            e.to_string(),
            "post_send on rxe0: not supported here: a test"
        );
    }

    #[test]
    fn reasons_are_in_the_message_and_not_again_as_a_source() {
        use std::error::Error as _;
        let dev: Arc<str> = Arc::from("rxe0");
        let post = Error::Post {
            op: Op::PostSend,
            device: dev.clone(),
            index: 0,
            why: Box::new(crate::wr::PostError::QueueFull {
                op: "post_send",
                capacity: 4,
            }),
        };
        let sysfs = Error::Sysfs {
            op: Op::ListDevices,
            path: "/sys/x".into(),
            error: std::io::Error::from_raw_os_error(2),
        };
        for e in [post, sysfs] {
            assert!(e.source().is_none(), "{e}");
        }
        let refused = crate::post::PostRefused {
            request: (),
            error: Error::os(Op::PostSend, &dev, Errno::NOMEM),
        };
        assert!(refused.source().is_none());
        assert_eq!(refused.to_string(), refused.error.to_string());
    }

    #[test]
    fn io_errors_keep_kind_message_and_errno() {
        let dev: Arc<str> = Arc::from("rxe0");
        let cases = [
            (
                Error::os(Op::PollCq, &dev, Errno::AGAIN),
                std::io::ErrorKind::WouldBlock,
            ),
            (
                Error::os(Op::PollCq, &dev, Errno::NOMEM),
                std::io::ErrorKind::OutOfMemory,
            ),
            (
                Error::input(Op::PostSend, &dev, "bad"),
                std::io::ErrorKind::InvalidInput,
            ),
            (
                Error::Abi {
                    op: Op::GetContext,
                    device: dev.clone(),
                    what: "rxe",
                    found: 9,
                    supported: "2",
                },
                std::io::ErrorKind::Other,
            ),
        ];
        for (e, kind) in cases {
            let (text, errno) = (e.to_string(), e.errno());
            let io: std::io::Error = e.into();
            assert_eq!(io.kind(), kind, "{text}");
            assert_eq!(io.to_string(), text);
            let back = io.get_ref().unwrap().downcast_ref::<Error>().unwrap();
            assert_eq!(back.errno(), errno);
        }
        let rereg = ReregError::new(ReregOutcome::Cmd, Errno::PERM, dev);
        let io: std::io::Error = rereg.into();
        assert_eq!(io.kind(), std::io::ErrorKind::PermissionDenied);
    }

    #[test]
    fn outcome_codes_and_guarantees_follow_the_man_page() {
        use ManPageGuarantee::*;
        use ReregOutcome::*;
        let table = [
            (Input, -1, OldMrValid, MrState::Old),
            (DontForkNew, -2, OldMrValid, MrState::Old),
            (DoForkOld, -3, NewMrValid, MrState::New),
            (Cmd, -4, Nothing, MrState::Undefined),
            (CmdAndDoForkNew, -5, Nothing, MrState::Undefined),
        ];
        let dev: Arc<str> = Arc::from("fake0");
        for (outcome, code, guarantee, worst) in table {
            assert_eq!(outcome.code(), code, "{outcome:?}");
            assert_eq!(outcome.man_page_guarantee(), guarantee, "{outcome:?}");
            let e = ReregError::new(outcome, Errno::IO, dev.clone());
            assert_eq!(e.mr_state(), worst, "{outcome:?}");
            assert!(guarantee.admits(e.mr_state()), "{outcome:?}");
        }
        // Only "nothing promised" admits more than one state.
        for state in [MrState::Old, MrState::New, MrState::Undefined] {
            assert_eq!(OldMrValid.admits(state), state == MrState::Old);
            assert_eq!(NewMrValid.admits(state), state == MrState::New);
            assert!(Nothing.admits(state));
        }
        let e = ReregError::new(Cmd, Errno::OPNOTSUPP, dev).known_unchanged();
        assert_eq!((e.outcome(), e.mr_state()), (Cmd, MrState::Old));
    }

    #[test]
    fn messages_name_operation_device_and_errno() {
        let dev: Arc<str> = Arc::from("rxe0");
        let e = Error::os(Op::RegMr, &dev, Errno::FAULT);
        let text = e.to_string();
        assert!(text.starts_with("reg_mr on rxe0: EFAULT (14): "), "{text}");
        assert_eq!(e.errno(), Some(Errno::FAULT));
        assert_eq!(e.op(), Op::RegMr);

        let r = ReregError::new(ReregOutcome::Cmd, Errno::OPNOTSUPP, dev);
        let text = r.to_string();
        assert!(
            text.starts_with("rereg_mr on rxe0: IBV_REREG_MR_ERR_CMD (-4): EOPNOTSUPP (95)"),
            "{text}"
        );
    }

    #[test]
    fn unknown_errno_still_prints_its_number() {
        let text = ErrnoDisplay(Errno::from_raw_os_error(133)).to_string();
        assert!(text.starts_with("errno 133: "), "{text}");
    }
}
