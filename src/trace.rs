//! The events of the `tracing` feature: what the library tells a
//! [`tracing`](https://docs.rs/tracing/0.1) subscriber, for debugging a
//! handshake or a refused command without a debugger.
//!
//! Off by default. Without the feature every event below compiles to
//! nothing (the functions that emit them are empty and inlined away) and
//! `tracing` is not a dependency; this module then holds only the target
//! names. With it, each event goes to whatever subscriber the program
//! installed; where none is interested (none installed, or a filter that
//! leaves `uverbs` out), an event site costs a check of `tracing`'s global
//! maximum level, and its fields are not computed.
//!
//! Every event has a fixed target (the module path of the layer that emits
//! it, one of the constants below), a fixed name, a level and structured
//! fields, so a filter can pick by any of them (`RUST_LOG=uverbs=debug`,
//! `uverbs::qp=debug,uverbs::transport=trace`, …). Nothing is logged above
//! `DEBUG`: an error the caller gets as an [`Error`](crate::Error) is the
//! caller's to report, and a library must not shout about it.
//!
//! | target | name | level | fields | when |
//! |---|---|---|---|---|
//! | [`TRANSPORT`] | `command` | TRACE | `command`, `code`, `handle`?, `ok`, `errno`? | every uverbs write command sent, [`Context::execute`](crate::Context::execute)'s included |
//! | [`TRANSPORT`] | `method` | TRACE | `object`, `method`, `name`, `ok`, `errno`? | every native ioctl method sent ([`Method::invoke`](crate::transport::Method::invoke)), and the transport probe |
//! | [`CM`] | `cm_command` | TRACE | `command`, `code`, `ok`, `errno`? | every rdma_cm command sent, `GET_EVENT` included |
//! | [`CM`] | `cm_event` | DEBUG | `event`, `status`, `id`, `uid` | every event read from a cm channel |
//! | [`QP`] | `qp_modify` | DEBUG | `qp_num`, `handle`, `from`, `to`?, `mask`, `ok`, `errno`?, `reason`? | every [`QueuePair::modify`](crate::QueuePair::modify): sent, refused by the kernel, or refused before sending |
//! | [`ERROR`] | `error` | DEBUG | `op`, `device`, `errno`, `outcome`? | an [`Error::Os`](crate::Error::Os), [`Error::Doorbell`](crate::Error::Doorbell) or [`Error::ForkSafety`](crate::Error::ForkSafety) built (the errno of a kernel command or system call, or one the library answers in the kernel's stead), or a re-registration's fork marking failed: once per failure; refused input ([`Error::InvalidInput`](crate::Error::InvalidInput), [`ReregOutcome::Input`]) is not reported |
//!
//! The fields (`?`: only where it applies):
//! - `command`: the kernel's command name without its prefix (`REG_MR`,
//!   `EX_QUERY_DEVICE`; cm: `CONNECT`, `GET_EVENT`), `code` its number.
//! - `handle`: the kernel handle of the object a command acts on
//!   ([`WriteCommand::handle`]):
//!   destroy, modify, query, notify, resize, re-register, multicast; absent
//!   for commands that create an object.
//! - `object`, `method`: the ioctl method's ids (`UVERBS_OBJECT_*`,
//!   `UVERBS_METHOD_*`); `name` the method's name (`QP_CREATE`, `QUERY_PORT`,
//!   `INVOKE_WRITE` for the probe), `UNKNOWN` for one this crate never sends.
//! - `ok`: whether the kernel accepted; `errno`: the raw errno it answered
//!   otherwise.
//! - `event`: `rdma_event_str`'s name (`RDMA_CM_EVENT_ESTABLISHED`);
//!   `status` the event's status (0, a negative errno or a reject reason);
//!   `id` the kernel's handle of the cm id ([`CmId::handle`](crate::cm::CmId::handle),
//!   for a connect request the new id's) and `uid` the id's user value
//!   ([`CmId::uid`](crate::cm::CmId::uid), for a connect request the
//!   listener's).
//! - `qp_num`, `handle`: the QP's number and kernel handle; `from` the state
//!   the library last knew ([`QueuePair::state`](crate::QueuePair::state)),
//!   `to` the state asked for (absent when the modify changes attributes
//!   only), both as libibverbs spells them without `IBV_QPS_` (`RESET`,
//!   `INIT`, `RTR`, `RTS`, `SQD`, `SQE`, `ERR`); `mask` the attribute mask
//!   (`IBV_QP_*` bits); `reason` why the library refused before sending.
//! - `op`: the operation's name ([`Op::name`]: `reg_mr`,
//!   `rdma_connect`, …); `device` the device (`rxe0`, or the cm channel's
//!   `rdma_cm`); `outcome` the [`ReregOutcome`] of a re-registration whose
//!   fork marking failed (`DontForkNew`, `DoForkOld`; a refused `REREG_MR`
//!   is reported like any refused command, without it).
//!
//! Not reported: the data path (posting, polling, the completion and
//! async-event reads), where an event per call would cost in the hot path;
//! a `POST_SEND` doorbell `write()` (siw) appears only when it fails, as an
//! `error`. An `EAGAIN` that only means "nothing queued yet" (a
//! non-blocking `GET_EVENT`) is a `cm_command` with `ok = false` but no
//! `error`.

/// Target of the events about commands and methods sent to the uverbs file.
pub const TRANSPORT: &str = "uverbs::transport";
/// Target of the QP state transitions.
pub const QP: &str = "uverbs::qp";
/// Target of the rdma_cm commands and events.
pub const CM: &str = "uverbs::cm";
/// Target of the errors built from a kernel failure.
pub const ERROR: &str = "uverbs::error";

use crate::command::{QpAttr, QpState, WriteCommand};
use crate::error::{Errno, Op, ReregOutcome};

/// The raw errno of a failed outcome, `None` for success.
#[cfg(feature = "tracing")]
fn errno_of<T>(outcome: &Result<T, Errno>) -> Option<i32> {
    outcome.as_ref().err().map(|e| e.raw_os_error())
}

/// The uverbs write command `cmd` has been answered with `outcome`.
#[inline(always)]
pub(crate) fn command<C: WriteCommand, T>(cmd: &C, outcome: &Result<T, Errno>) {
    #[cfg(feature = "tracing")]
    tracing::trace!(
        name: "command",
        target: TRANSPORT,
        command = names::write_command(C::CODE),
        code = C::CODE,
        handle = cmd.handle(),
        ok = outcome.is_ok(),
        errno = errno_of(outcome),
    );
    #[cfg(not(feature = "tracing"))]
    let _ = (cmd, outcome);
}

/// The ioctl method `method` of object `object` has been answered with
/// `outcome`.
#[inline(always)]
pub(crate) fn method<T>(object: u16, method: u16, outcome: &Result<T, Errno>) {
    #[cfg(feature = "tracing")]
    tracing::trace!(
        name: "method",
        target: TRANSPORT,
        object,
        method,
        name = names::method(object, method),
        ok = outcome.is_ok(),
        errno = errno_of(outcome),
    );
    #[cfg(not(feature = "tracing"))]
    let _ = (object, method, outcome);
}

/// The rdma_cm command `code` has been answered with `outcome`.
#[inline(always)]
pub(crate) fn cm_command<T>(code: u32, outcome: &Result<T, Errno>) {
    #[cfg(feature = "tracing")]
    tracing::trace!(
        name: "cm_command",
        target: CM,
        command = names::cm_command(code),
        code,
        ok = outcome.is_ok(),
        errno = errno_of(outcome),
    );
    #[cfg(not(feature = "tracing"))]
    let _ = (code, outcome);
}

/// An event has been read from a cm channel; `name` names its number
/// (`cm::event_name`, handed in by the caller so that this file, called by
/// the lowest layers, names nothing of the cm).
#[inline(always)]
pub(crate) fn cm_event(
    name: impl Fn(u32) -> &'static str,
    event: u32,
    status: i32,
    id: u32,
    uid: u64,
) {
    #[cfg(feature = "tracing")]
    tracing::debug!(
        name: "cm_event",
        target: CM,
        event = name(event),
        status,
        id,
        uid,
    );
    #[cfg(not(feature = "tracing"))]
    let _ = (name, event, status, id, uid);
}

/// What became of a `MODIFY_QP`.
#[cfg_attr(not(feature = "tracing"), allow(dead_code))]
pub(crate) enum Modified<'a> {
    /// Sent: the kernel accepted (`None`) or answered this error.
    Sent(Option<&'a crate::Error>),
    /// Refused before sending, for this reason.
    Refused(&'a dyn std::fmt::Display),
}

/// What a `qp_modify` event reads of the QP. A trait, which qp.rs
/// implements, so that this file, called by the lowest layers (transport/,
/// error.rs), names no QP: the layers below would otherwise reach qp.rs
/// through it.
#[cfg_attr(not(feature = "tracing"), allow(dead_code))]
pub(crate) trait ModifiedQp {
    /// The QP number.
    fn qp_num(&self) -> u32;
    /// The kernel's handle.
    fn handle(&self) -> u32;
    /// The state the library last knew.
    fn state(&self) -> QpState;
}

/// A modify of `qp` with `attr` ended as `how`; called before the QP's
/// [`state`](crate::QueuePair::state) changes, which is where it was
/// modified from.
#[inline(always)]
pub(crate) fn qp_modify(qp: &impl ModifiedQp, attr: &QpAttr, how: Modified<'_>) {
    #[cfg(feature = "tracing")]
    {
        let (ok, errno, reason) = match how {
            Modified::Sent(e) => (e.is_none(), e.and_then(|e| e.errno()), None),
            Modified::Refused(why) => (false, None, Some(tracing::field::display(why))),
        };
        tracing::debug!(
            name: "qp_modify",
            target: QP,
            qp_num = qp.qp_num(),
            handle = qp.handle(),
            from = names::qp_state(qp.state()),
            to = attr.target_state().map(names::qp_state),
            mask = attr.mask().bits(),
            ok,
            errno = errno.map(|e| e.raw_os_error()),
            reason,
        );
    }
    #[cfg(not(feature = "tracing"))]
    let _ = (qp, attr, how);
}

/// An error of `op` on `device` has been built from the `errno` the kernel
/// (or the system) answered. `EAGAIN` ("nothing yet" to a non-blocking
/// read) is left out.
#[inline(always)]
pub(crate) fn error(op: Op, device: &str, errno: Errno) {
    #[cfg(feature = "tracing")]
    emit_error(op, device, errno, None);
    #[cfg(not(feature = "tracing"))]
    let _ = (op, device, errno);
}

/// A re-registration on `device` failed with `outcome` and `errno`.
/// Reported here only where the errno is the fork marking's (`madvise`):
/// a refused `REREG_MR` (or a failed registration of the replace
/// fallback) was reported where its [`Error`](crate::Error) was built,
/// and refused arguments (nothing sent) are not reported, as
/// [`Error::InvalidInput`](crate::Error::InvalidInput) is not.
#[inline(always)]
pub(crate) fn rereg_error(outcome: ReregOutcome, device: &str, errno: Errno) {
    #[cfg(feature = "tracing")]
    if matches!(outcome, ReregOutcome::DontForkNew | ReregOutcome::DoForkOld) {
        emit_error(Op::ReregMr, device, errno, Some(outcome));
    }
    #[cfg(not(feature = "tracing"))]
    let _ = (outcome, device, errno);
}

#[cfg(feature = "tracing")]
fn emit_error(op: Op, device: &str, errno: Errno, outcome: Option<ReregOutcome>) {
    if errno != Errno::AGAIN {
        tracing::debug!(
            name: "error",
            target: ERROR,
            op = op.name(),
            device,
            errno = errno.raw_os_error(),
            outcome = outcome.map(tracing::field::debug),
        );
    }
}

/// The kernel's names of the commands, methods and states, as the events
/// report them.
#[cfg(feature = "tracing")]
mod names {
    use crate::command::QpState;
    use uverbs_uapi as sys;

    /// Write commands `0..=40` by number (`IB_USER_VERBS_CMD_*`).
    const WRITE: [&str; 41] = [
        "GET_CONTEXT",
        "QUERY_DEVICE",
        "QUERY_PORT",
        "ALLOC_PD",
        "DEALLOC_PD",
        "CREATE_AH",
        "MODIFY_AH",
        "QUERY_AH",
        "DESTROY_AH",
        "REG_MR",
        "REG_SMR",
        "REREG_MR",
        "QUERY_MR",
        "DEREG_MR",
        "ALLOC_MW",
        "BIND_MW",
        "DEALLOC_MW",
        "CREATE_COMP_CHANNEL",
        "CREATE_CQ",
        "RESIZE_CQ",
        "DESTROY_CQ",
        "POLL_CQ",
        "PEEK_CQ",
        "REQ_NOTIFY_CQ",
        "CREATE_QP",
        "QUERY_QP",
        "MODIFY_QP",
        "DESTROY_QP",
        "POST_SEND",
        "POST_RECV",
        "ATTACH_MCAST",
        "DETACH_MCAST",
        "CREATE_SRQ",
        "MODIFY_SRQ",
        "QUERY_SRQ",
        "DESTROY_SRQ",
        "POST_SRQ_RECV",
        "OPEN_XRCD",
        "CLOSE_XRCD",
        "CREATE_XSRQ",
        "OPEN_QP",
    ];

    /// `code`'s name: a write command, or an extended one
    /// (`IB_USER_VERBS_CMD_FLAG_EXTENDED`) as `EX_…`.
    pub(super) fn write_command(code: u32) -> &'static str {
        if code & sys::IB_USER_VERBS_CMD_FLAG_EXTENDED == 0 {
            return WRITE.get(code as usize).copied().unwrap_or("UNKNOWN");
        }
        match code & sys::IB_USER_VERBS_CMD_COMMAND_MASK {
            sys::IB_USER_VERBS_EX_CMD_QUERY_DEVICE => "EX_QUERY_DEVICE",
            sys::IB_USER_VERBS_EX_CMD_CREATE_CQ => "EX_CREATE_CQ",
            sys::IB_USER_VERBS_EX_CMD_CREATE_QP => "EX_CREATE_QP",
            sys::IB_USER_VERBS_EX_CMD_MODIFY_QP => "EX_MODIFY_QP",
            sys::IB_USER_VERBS_EX_CMD_CREATE_FLOW => "EX_CREATE_FLOW",
            sys::IB_USER_VERBS_EX_CMD_DESTROY_FLOW => "EX_DESTROY_FLOW",
            sys::IB_USER_VERBS_EX_CMD_CREATE_WQ => "EX_CREATE_WQ",
            sys::IB_USER_VERBS_EX_CMD_MODIFY_WQ => "EX_MODIFY_WQ",
            sys::IB_USER_VERBS_EX_CMD_DESTROY_WQ => "EX_DESTROY_WQ",
            sys::IB_USER_VERBS_EX_CMD_CREATE_RWQ_IND_TBL => "EX_CREATE_RWQ_IND_TBL",
            sys::IB_USER_VERBS_EX_CMD_DESTROY_RWQ_IND_TBL => "EX_DESTROY_RWQ_IND_TBL",
            sys::IB_USER_VERBS_EX_CMD_MODIFY_CQ => "EX_MODIFY_CQ",
            _ => "UNKNOWN",
        }
    }

    /// The name of method `method` of object `object`, for the methods this
    /// crate sends.
    pub(super) fn method(object: u16, method: u16) -> &'static str {
        match (object, method) {
            (sys::UVERBS_OBJECT_DEVICE, sys::UVERBS_METHOD_INVOKE_WRITE) => "INVOKE_WRITE",
            (sys::UVERBS_OBJECT_DEVICE, sys::UVERBS_METHOD_INFO_HANDLES) => "INFO_HANDLES",
            (sys::UVERBS_OBJECT_DEVICE, sys::UVERBS_METHOD_QUERY_PORT) => "QUERY_PORT",
            (sys::UVERBS_OBJECT_DEVICE, sys::UVERBS_METHOD_GET_CONTEXT) => "GET_CONTEXT",
            (sys::UVERBS_OBJECT_DEVICE, sys::UVERBS_METHOD_QUERY_CONTEXT) => "QUERY_CONTEXT",
            (sys::UVERBS_OBJECT_DEVICE, sys::UVERBS_METHOD_QUERY_GID_TABLE) => "QUERY_GID_TABLE",
            (sys::UVERBS_OBJECT_DEVICE, sys::UVERBS_METHOD_QUERY_GID_ENTRY) => "QUERY_GID_ENTRY",
            (sys::UVERBS_OBJECT_PD, sys::UVERBS_METHOD_PD_DESTROY) => "PD_DESTROY",
            (sys::UVERBS_OBJECT_MR, sys::UVERBS_METHOD_MR_DESTROY) => "MR_DESTROY",
            (sys::UVERBS_OBJECT_MR, sys::UVERBS_METHOD_QUERY_MR) => "QUERY_MR",
            (sys::UVERBS_OBJECT_MR, sys::UVERBS_METHOD_REG_DMABUF_MR) => "REG_DMABUF_MR",
            (sys::UVERBS_OBJECT_MR, sys::UVERBS_METHOD_REG_MR) => "REG_MR",
            (sys::UVERBS_OBJECT_CQ, sys::UVERBS_METHOD_CQ_CREATE) => "CQ_CREATE",
            (sys::UVERBS_OBJECT_CQ, sys::UVERBS_METHOD_CQ_DESTROY) => "CQ_DESTROY",
            (sys::UVERBS_OBJECT_SRQ, sys::UVERBS_METHOD_SRQ_CREATE) => "SRQ_CREATE",
            (sys::UVERBS_OBJECT_SRQ, sys::UVERBS_METHOD_SRQ_DESTROY) => "SRQ_DESTROY",
            (sys::UVERBS_OBJECT_QP, sys::UVERBS_METHOD_QP_CREATE) => "QP_CREATE",
            (sys::UVERBS_OBJECT_QP, sys::UVERBS_METHOD_QP_DESTROY) => "QP_DESTROY",
            _ => "UNKNOWN",
        }
    }

    /// rdma_cm commands by number (`RDMA_USER_CM_CMD_*`).
    const CM: [&str; 23] = [
        "CREATE_ID",
        "DESTROY_ID",
        "BIND_IP",
        "RESOLVE_IP",
        "RESOLVE_ROUTE",
        "QUERY_ROUTE",
        "CONNECT",
        "LISTEN",
        "ACCEPT",
        "REJECT",
        "DISCONNECT",
        "INIT_QP_ATTR",
        "GET_EVENT",
        "GET_OPTION",
        "SET_OPTION",
        "NOTIFY",
        "JOIN_IP_MCAST",
        "LEAVE_MCAST",
        "MIGRATE_ID",
        "QUERY",
        "BIND",
        "RESOLVE_ADDR",
        "JOIN_MCAST",
    ];

    /// The rdma_cm command `code`'s name.
    pub(super) fn cm_command(code: u32) -> &'static str {
        CM.get(code as usize).copied().unwrap_or("UNKNOWN")
    }

    /// `IBV_QPS_*` without the prefix.
    pub(super) fn qp_state(state: QpState) -> &'static str {
        match state {
            QpState::Reset => "RESET",
            QpState::Init => "INIT",
            QpState::Rtr => "RTR",
            QpState::Rts => "RTS",
            QpState::Sqd => "SQD",
            QpState::Sqe => "SQE",
            QpState::Err => "ERR",
        }
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        /// The tables follow the kernel's numbering: a shifted entry would
        /// name every later command wrongly.
        #[test]
        fn names_sit_at_the_kernels_numbers() {
            assert_eq!(
                write_command(sys::IB_USER_VERBS_CMD_GET_CONTEXT),
                "GET_CONTEXT"
            );
            assert_eq!(write_command(sys::IB_USER_VERBS_CMD_REG_MR), "REG_MR");
            assert_eq!(write_command(sys::IB_USER_VERBS_CMD_MODIFY_QP), "MODIFY_QP");
            assert_eq!(
                write_command(sys::IB_USER_VERBS_CMD_DESTROY_SRQ),
                "DESTROY_SRQ"
            );
            assert_eq!(write_command(sys::IB_USER_VERBS_CMD_OPEN_QP), "OPEN_QP");
            assert_eq!(write_command(sys::IB_USER_VERBS_CMD_OPEN_QP + 1), "UNKNOWN");
            let ex = sys::IB_USER_VERBS_CMD_FLAG_EXTENDED;
            assert_eq!(
                write_command(ex | sys::IB_USER_VERBS_EX_CMD_QUERY_DEVICE),
                "EX_QUERY_DEVICE"
            );
            assert_eq!(
                write_command(ex | sys::IB_USER_VERBS_EX_CMD_MODIFY_CQ),
                "EX_MODIFY_CQ"
            );
            assert_eq!(cm_command(sys::RDMA_USER_CM_CMD_CREATE_ID), "CREATE_ID");
            assert_eq!(cm_command(sys::RDMA_USER_CM_CMD_GET_EVENT), "GET_EVENT");
            assert_eq!(cm_command(sys::RDMA_USER_CM_CMD_JOIN_MCAST), "JOIN_MCAST");
            assert_eq!(cm_command(sys::RDMA_USER_CM_CMD_JOIN_MCAST + 1), "UNKNOWN");
            assert_eq!(
                method(sys::UVERBS_OBJECT_QP, sys::UVERBS_METHOD_QP_CREATE),
                "QP_CREATE"
            );
            assert_eq!(method(sys::UVERBS_OBJECT_FLOW, 0), "UNKNOWN");
        }
    }
}
