//! One error story (issue 42): every refusal type is a `std::error::Error`
//! with a `Display`, they share one accessor (`error()`, `into_error()`),
//! `?` takes each into `uverbs::Error` and into `Box<dyn Error>`, and
//! `Error`'s `Debug` (what `fn main() -> Result<(), Box<dyn Error>>`
//! prints) leads with the message, with a hint for first-hour failures.

use std::error::Error as StdError;
use std::sync::Arc;

use uverbs::error::{Errno, Op};
use uverbs::Error;

/// Compiles only if `E` is an error that `?` boxes.
fn boxes<E: StdError + 'static>() {}

/// Compiles only if `E` is a refusal that hands something back: an error
/// `?` boxes, and one that converts into `uverbs::Error`.
fn refusal<E: StdError + Into<Error> + 'static>() {}

type Buf = memmap2::MmapMut;

#[test]
fn every_refusal_type_is_an_error_with_the_same_accessor() {
    // The types that hand an object back with the error.
    refusal::<uverbs::mr::DeregError>();
    refusal::<uverbs::device::DeallocError>();
    refusal::<uverbs::cq::DestroyCqError>();
    refusal::<uverbs::qp::DestroyQpError>();
    refusal::<uverbs::qp::DestroySrqError>();
    refusal::<uverbs::mr::RegDmabufError>();
    refusal::<uverbs::post::NotOwnable>();
    refusal::<uverbs::post::SrqNotOwnable>();
    refusal::<uverbs::mr::RegBufferError<Buf>>();
    refusal::<uverbs::mr::BufferDeregError<Buf>>();
    refusal::<uverbs::mr::RemoteDeregError<Buf>>();
    refusal::<uverbs::post::PostRefused<uverbs::post::RecvRequest<uverbs::BufferMr<Buf>>>>();
    refusal::<uverbs::post::PostSendError<uverbs::post::SendRequest<'static, uverbs::BufferMr<Buf>>>>(
    );
    refusal::<uverbs::post::NotDestroyed<uverbs::OwnedQp<uverbs::BufferMr<Buf>>>>();
    refusal::<uverbs::post::OwnedSrqNotDestroyed<uverbs::BufferMr<Buf>>>();
    // Re-registration's refusal carries a ReregError, not an Error.
    boxes::<uverbs::mr::RetargetError<Buf>>();
    // The plain errors.
    boxes::<Error>();
    boxes::<uverbs::mr::ReregError>();
    boxes::<uverbs::wr::PostError>();
    boxes::<uverbs::post::OutOfRange<Buf>>();
    boxes::<uverbs::mr::OutsideBuffer>();
    boxes::<uverbs::qp::QpTransitionError>();
    boxes::<uverbs::qp::AhFromWcError>();
    boxes::<uverbs::qp::EndpointParseError>();
    boxes::<uverbs::device::GidParseError>();
    boxes::<uverbs::fork::ForkInitError>();
    boxes::<uverbs::cm::CmError>();
}

#[cfg(feature = "tokio")]
#[test]
fn the_async_refusal_is_an_error_too() {
    refusal::<uverbs::tokio::NotAsync<uverbs::BufferMr<Buf>>>();
}

#[test]
fn debug_leads_with_the_message_and_names_the_variant() {
    let e = Error::Os {
        op: Op::CmOpen,
        device: Arc::from("rdma_cm"),
        errno: Errno::NOENT,
    };
    let debug = format!("{e:?}");
    assert!(debug.starts_with(&e.to_string()), "{debug}");
    assert!(
        debug.ends_with(r#"[Os { op: CmOpen, device: "rdma_cm", errno: ENOENT }]"#),
        "{debug}"
    );
    // What `fn main() -> Result<(), Box<dyn Error>>` prints: the Debug.
    let boxed: Box<dyn StdError> = e.into();
    assert!(
        format!("{boxed:?}").contains("modprobe rdma_ucm"),
        "{boxed:?}"
    );
    // `{:#?}`: the fields alone.
    let e = Error::NoDevice {
        wanted: None,
        found: vec![],
    };
    assert!(format!("{e:#?}").starts_with("NoDevice {"), "{e:#?}");
}

#[test]
fn first_hour_failures_say_what_to_check() {
    let os = |op, errno| Error::Os {
        op,
        device: Arc::from("rxe0"),
        errno,
    };
    let cases = [
        (os(Op::CmOpen, Errno::NOENT), "modprobe rdma_ucm"),
        (os(Op::CmOpen, Errno::ACCESS), "/dev/infiniband/rdma_cm"),
        (
            os(Op::Open, Errno::ACCESS),
            "may not open /dev/infiniband/uverbsN",
        ),
        (os(Op::Open, Errno::NOENT), "modprobe ib_uverbs"),
        (os(Op::RegMr, Errno::NOMEM), "ulimit -l"),
        (os(Op::ReregMr, Errno::NOMEM), "ulimit -l"),
        (
            Error::NoDevice {
                wanted: Some("rxe0".into()),
                found: vec!["siw0".into()],
            },
            "rdma link add rxe0 type rxe",
        ),
    ];
    for (e, hint) in &cases {
        let text = e.to_string();
        assert!(text.contains("; check: "), "{text}");
        assert!(text.contains(hint), "{text} lacks {hint}");
    }
    println!("{} first-hour failures carry their hint", cases.len());
    // Other failures carry none.
    for e in [os(Op::RegMr, Errno::INVAL), os(Op::AllocPd, Errno::NOMEM)] {
        assert!(!e.to_string().contains("check:"), "{e}");
    }
    let e = Error::NoDevice {
        wanted: Some("rxe0".into()),
        found: vec!["siw0".into(), "mlx5_0".into()],
    };
    assert!(
        e.to_string()
            .starts_with("no RDMA device named rxe0 (there are: siw0, mlx5_0); "),
        "{e}"
    );
    assert_eq!(e.errno(), Some(Errno::NODEV));
}
