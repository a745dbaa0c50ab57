//! The `tracing` feature's events (`uverbs::trace`), seen by a subscriber of
//! this test's own over the fake kernel and the in-process rdma_cm: a
//! command, a failing command, an ioctl method, a refused re-registration,
//! QP transitions (accepted, refused before sending, refused by the kernel)
//! and cm events, each with its target, name, level and fields, and nothing
//! for what was not done.
//!
//! The subscriber is a few lines implementing `tracing::Subscriber` by hand
//! rather than `tracing-subscriber`: all it must do is keep each event's
//! metadata and fields, and that needs no second crate (nor its
//! dependencies) in the test build.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex, OnceLock};

use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Dispatch, Event, Level, Metadata, Subscriber};

use uverbs::cm::{event_number, EventChannel, EventKind, FakeCm, PortSpace};
use uverbs::device::{DriverId, Gid, OpenOptions};
use uverbs::error::Errno;
use uverbs::mr::ReregOutcome;
use uverbs::qp::{Mtu, QpAttr, QpState, RcConnect, RcPeer};
use uverbs::transport::RecordingTransport;
use uverbs::{uverbs_uapi as sys, AccessFlags, Context, QpInit, QpType};

/// One event as the subscriber saw it.
#[derive(Debug, Clone, PartialEq)]
struct Seen {
    target: String,
    name: String,
    level: Level,
    /// Every recorded field, as `Debug` prints it (strings without quotes).
    fields: BTreeMap<String, String>,
}

impl Seen {
    /// The field `name`, which the event must have.
    fn field(&self, name: &str) -> &str {
        self.fields
            .get(name)
            .unwrap_or_else(|| panic!("{} has no field {name}: {self:?}", self.name))
    }
}

/// Keeps every event; has no spans (the library opens none).
struct Recorder(Arc<Mutex<Vec<Seen>>>);

struct Fields(BTreeMap<String, String>);

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
    }
}

impl Subscriber for Recorder {
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        true
    }

    fn new_span(&self, span: &Attributes<'_>) -> Id {
        panic!("the library opened a span: {:?}", span.metadata());
    }

    fn record(&self, _: &Id, _: &Record<'_>) {}

    fn record_follows_from(&self, _: &Id, _: &Id) {}

    fn event(&self, event: &Event<'_>) {
        let mut fields = Fields(BTreeMap::new());
        event.record(&mut fields);
        let meta = event.metadata();
        self.0.lock().unwrap().push(Seen {
            target: meta.target().to_owned(),
            name: meta.name().to_owned(),
            level: *meta.level(),
            fields: fields.0,
        });
    }

    fn enter(&self, _: &Id) {}

    fn exit(&self, _: &Id) {}
}

/// What `body` emitted on this thread, with `body`'s answer. Every event
/// is at TRACE or DEBUG: the library reports, it never warns.
fn recorded<T>(body: impl FnOnce() -> T) -> (T, Vec<Seen>) {
    keep_interest();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let answer = tracing::subscriber::with_default(Recorder(seen.clone()), body);
    let seen = seen.lock().unwrap().clone();
    for event in &seen {
        assert!(
            event.level == Level::TRACE || event.level == Level::DEBUG,
            "louder than DEBUG: {event:?}"
        );
    }
    (answer, seen)
}

/// Registers, once for the test binary, a dispatcher that lives to its
/// end. tracing caches each callsite's interest over the dispatchers
/// registered when the callsite is first hit; the tests run in parallel,
/// and a callsite first hit on one thread outside `recorded` could cache
/// "never" while another thread's recorder is being registered, so that
/// recorder missed the event (CI saw `a_command_and_a_failing_command`
/// record nothing once). With a recorder always registered, no callsite is
/// ever cached as "never"; this one is no thread's default, so it records
/// nothing. Called first in every test.
fn keep_interest() {
    static KEEP: OnceLock<Dispatch> = OnceLock::new();
    KEEP.get_or_init(|| Dispatch::new(Recorder(Arc::default())));
}

/// The events' names, in order.
fn names(seen: &[Seen]) -> Vec<&str> {
    seen.iter().map(|e| e.name.as_str()).collect()
}

/// The fields `pairs`, and nothing else.
fn fields(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// A context named `fake0` over a fresh fake kernel serving rxe's rings.
fn fake_rxe() -> (Arc<RecordingTransport>, Context) {
    keep_interest();
    let fake = Arc::new(RecordingTransport::new());
    fake.serve_rings();
    let ctx = Context::with_transport(
        "fake0",
        Some(DriverId::RXE),
        Box::new(fake.clone()),
        &OpenOptions::new(),
    )
    .expect("a context over the fake kernel");
    (fake, ctx)
}

#[test]
fn a_command_and_a_failing_command() {
    let (fake, ctx) = fake_rxe();

    let (pd, seen) = recorded(|| ctx.alloc_pd().expect("alloc_pd"));
    assert_eq!(names(&seen), ["command"], "{seen:?}");
    let alloc = &seen[0];
    assert_eq!(
        (alloc.target.as_str(), alloc.level),
        ("uverbs::transport", Level::TRACE)
    );
    // ALLOC_PD names no object: no handle; it succeeded: no errno.
    let code = sys::IB_USER_VERBS_CMD_ALLOC_PD.to_string();
    assert_eq!(
        alloc.fields,
        fields(&[("command", "ALLOC_PD"), ("code", &code), ("ok", "true")])
    );

    let handle = pd.handle();
    fake.fail_next(sys::IB_USER_VERBS_CMD_DEALLOC_PD, Errno::BUSY);
    let (answer, seen) = recorded(|| pd.dealloc());
    let refused = answer.expect_err("the fake refuses DEALLOC_PD");
    assert_eq!(refused.error.errno(), Some(Errno::BUSY));
    assert_eq!(names(&seen), ["command", "error"], "{seen:?}");
    let (command, error) = (&seen[0], &seen[1]);
    let code = sys::IB_USER_VERBS_CMD_DEALLOC_PD.to_string();
    let busy = Errno::BUSY.raw_os_error().to_string();
    assert_eq!(
        command.fields,
        fields(&[
            ("command", "DEALLOC_PD"),
            ("code", &code),
            ("handle", &handle.to_string()),
            ("ok", "false"),
            ("errno", &busy),
        ])
    );
    assert_eq!(
        (error.target.as_str(), error.level),
        ("uverbs::error", Level::DEBUG)
    );
    assert_eq!(
        error.fields,
        fields(&[("op", "dealloc_pd"), ("device", "fake0"), ("errno", &busy)])
    );
}

#[test]
fn a_refused_reregistration_and_refused_input() {
    let (fake, ctx) = fake_rxe();
    let pd = ctx.alloc_pd().unwrap();
    let mut buf = vec![0u8; 4096];
    // SAFETY: `buf` stays alive and unmoved until after the MR is dropped
    // (at the end of this test, in reverse order of declaration).
    let mut mr = unsafe { pd.reg_mr(buf.as_mut_ptr(), buf.len(), AccessFlags::LOCAL_WRITE) }
        .expect("reg_mr on the fake kernel");

    // The kernel refuses: the command, and one error (where the kernel's
    // errno became an error; the ReregError built from it adds none).
    fake.fail_next(sys::IB_USER_VERBS_CMD_REREG_MR, Errno::PERM);
    let (answer, seen) =
        recorded(|| mr.set_access(AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ));
    assert_eq!(
        answer.expect_err("the fake refuses REREG_MR").outcome(),
        ReregOutcome::Cmd
    );
    assert_eq!(names(&seen), ["command", "error"], "{seen:?}");
    let perm = Errno::PERM.raw_os_error().to_string();
    assert_eq!(seen[0].field("command"), "REREG_MR");
    assert_eq!(seen[0].field("handle"), mr.handle().to_string());
    assert_eq!(seen[0].field("errno"), perm);
    assert_eq!(
        seen[1].fields,
        fields(&[("op", "rereg_mr"), ("device", "fake0"), ("errno", &perm)])
    );

    // Refused input (a PD of another context): nothing sent, and no error
    // event, as for any refused input.
    let (_other_fake, other) = fake_rxe();
    let foreign = other.alloc_pd().unwrap();
    let (answer, seen) = recorded(|| mr.set_pd(&foreign));
    assert_eq!(
        answer.expect_err("a foreign PD").outcome(),
        ReregOutcome::Input
    );
    assert_eq!(seen, []);
}

#[test]
fn qp_transitions_sent_refused_and_failed() {
    let (fake, ctx) = fake_rxe();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(8, None).unwrap();

    // The fake kernel creates QPs by the native method, as Linux does.
    let (qp, seen) = recorded(|| pd.create_qp(&QpInit::new(QpType::Rc, &cq, &cq)).unwrap());
    assert_eq!(names(&seen), ["method"], "{seen:?}");
    assert_eq!(seen[0].target, "uverbs::transport");
    assert_eq!(seen[0].field("name"), "QP_CREATE");
    assert_eq!(seen[0].field("object"), sys::UVERBS_OBJECT_QP.to_string());
    assert_eq!(
        seen[0].field("method"),
        sys::UVERBS_METHOD_QP_CREATE.to_string()
    );
    assert_eq!(seen[0].field("ok"), "true");

    let [(_, init), (_, rtr), (_, rts)] = RcConnect::new(Mtu::Mtu1024)
        .access(AccessFlags::LOCAL_WRITE)
        .steps(RcPeer::new(0x12, Gid::from_raw([0xfe; 16])));
    let qpn = qp.qp_num().to_string();
    let handle = qp.handle().to_string();

    // Accepted: the command, then the transition.
    let (answer, seen) = recorded(|| qp.modify(&init));
    answer.expect("RESET -> INIT");
    assert_eq!(names(&seen), ["command", "qp_modify"], "{seen:?}");
    assert_eq!(seen[0].field("command"), "MODIFY_QP");
    assert_eq!(seen[0].field("handle"), handle);
    let transition = &seen[1];
    assert_eq!(
        (transition.target.as_str(), transition.level),
        ("uverbs::qp", Level::DEBUG)
    );
    let mask = init.mask().bits().to_string();
    assert_eq!(
        transition.fields,
        fields(&[
            ("qp_num", &qpn),
            ("handle", &handle),
            ("from", "RESET"),
            ("to", "INIT"),
            ("mask", &mask),
            ("ok", "true"),
        ])
    );

    // Refused before sending (INIT -> RTS skips RTR): no command, no
    // kernel error, the reason.
    let sent_before = fake.count();
    let (answer, seen) = recorded(|| qp.modify(&rts));
    answer.expect_err("INIT -> RTS is no transition");
    assert_eq!(fake.count(), sent_before, "nothing reached the kernel");
    assert_eq!(names(&seen), ["qp_modify"], "{seen:?}");
    assert_eq!(seen[0].field("from"), "INIT");
    assert_eq!(seen[0].field("to"), "RTS");
    assert_eq!(seen[0].field("ok"), "false");
    assert!(!seen[0].fields.contains_key("errno"), "{seen:?}");
    assert!(!seen[0].field("reason").is_empty());

    // Refused by the kernel: the failed command, the error, the transition
    // that did not happen; the QP stays INIT.
    fake.fail_next(sys::IB_USER_VERBS_CMD_MODIFY_QP, Errno::INVAL);
    let (answer, seen) = recorded(|| qp.modify(&rtr));
    answer.expect_err("the fake refuses MODIFY_QP");
    let inval = Errno::INVAL.raw_os_error().to_string();
    assert_eq!(names(&seen), ["command", "error", "qp_modify"], "{seen:?}");
    assert_eq!(seen[0].field("errno"), inval);
    assert_eq!(seen[1].field("op"), "modify_qp");
    assert_eq!(seen[1].field("errno"), inval);
    assert_eq!(seen[2].field("from"), "INIT");
    assert_eq!(seen[2].field("to"), "RTR");
    assert_eq!(seen[2].field("ok"), "false");
    assert_eq!(seen[2].field("errno"), inval);
    assert!(!seen[2].fields.contains_key("reason"), "{seen:?}");
    assert_eq!(qp.state(), QpState::Init);

    // What stays in this process emits nothing.
    let ((), seen) = recorded(|| {
        assert_eq!(qp.state(), QpState::Init);
        let _ = QpAttr::new().state(QpState::Rtr).mask();
        let _ = (pd.handle(), cq.handle(), ctx.device_name());
    });
    assert_eq!(seen, []);
}

#[test]
fn cm_commands_and_events() {
    keep_interest();
    let fake = Arc::new(FakeCm::new().expect("the in-process rdma_cm"));
    let channel = EventChannel::with_fake(fake.clone());

    let (id, seen) = recorded(|| channel.create_id(PortSpace::Tcp).unwrap());
    assert_eq!(names(&seen), ["cm_command"], "{seen:?}");
    assert_eq!(
        (seen[0].target.as_str(), seen[0].level),
        ("uverbs::cm", Level::TRACE)
    );
    let code = sys::RDMA_USER_CM_CMD_CREATE_ID.to_string();
    assert_eq!(
        seen[0].fields,
        fields(&[("command", "CREATE_ID"), ("code", &code), ("ok", "true")])
    );

    // An event read: the GET_EVENT, then the event with its kind, status
    // and id.
    fake.inject_event(id.handle(), event_number::ADDR_ERROR, -110);
    let (event, seen) = recorded(|| channel.try_get_event().unwrap().expect("an event"));
    assert!(matches!(event.kind, EventKind::AddrError), "{event:?}");
    assert_eq!(names(&seen), ["cm_command", "cm_event"], "{seen:?}");
    assert_eq!(seen[0].field("command"), "GET_EVENT");
    let cm_event = &seen[1];
    assert_eq!(
        (cm_event.target.as_str(), cm_event.level),
        ("uverbs::cm", Level::DEBUG)
    );
    assert_eq!(
        cm_event.fields,
        fields(&[
            ("event", "RDMA_CM_EVENT_ADDR_ERROR"),
            ("status", "-110"),
            ("id", &id.handle().to_string()),
            ("uid", &id.uid().to_string()),
        ])
    );

    // Nothing queued: the GET_EVENT answers EAGAIN, which is no error to
    // the caller and none in the trace; no event was read.
    let (nothing, seen) = recorded(|| channel.try_get_event().unwrap());
    assert!(nothing.is_none());
    assert_eq!(names(&seen), ["cm_command"], "{seen:?}");
    assert_eq!(seen[0].field("ok"), "false");
    assert_eq!(
        seen[0].field("errno"),
        Errno::AGAIN.raw_os_error().to_string()
    );
}
