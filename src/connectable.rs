//! [`Connectable`]: what the connection helpers need of a queue pair, so
//! that one helper serves [`QueuePair`], [`OwnedQp`], `tokio::AsyncQp` and
//! a caller's own wrapper around one of them.
//!
//! Two kinds of helper use it: [`RcConnect`](crate::qp::RcConnect) (the three
//! `MODIFY_QP`s by hand) and the connection manager's handshakes
//! ([`CmId::connect_qp`](crate::cm::CmId::connect_qp) and
//! [`accept_qp`](crate::cm::CmId::accept_qp), and their futures in
//! `uverbs::tokio::cm`), which also need the transport (RoCE and iWARP
//! connect differently) and the state.

use crate::command::{QpAttr, QpState, TransportType};
use crate::error::Error;
use crate::post::OwnedQp;
use crate::qp::QueuePair;

/// A queue pair the connection helpers can move through its states.
///
/// Implemented by [`QueuePair`], [`OwnedQp`] and (with the `tokio`
/// feature) `tokio::AsyncQp`. A type that owns one of them implements it
/// by forwarding each call.
#[doc(alias = "CmQp")]
pub trait Connectable {
    /// The QP number the peer addresses.
    fn qp_num(&self) -> u32;
    /// How the QP's device connects (RoCE/IB or iWARP).
    fn transport_type(&self) -> TransportType;
    /// The QP's state as last known.
    fn state(&self) -> QpState;
    /// Applies `attr` (one `MODIFY_QP`).
    fn modify(&self, attr: &QpAttr) -> Result<(), Error>;
    /// Learns the state the kernel's connection manager moved an iWARP QP
    /// to once the connection is up ([`QueuePair::established`]).
    fn established(&self) -> Result<QpState, Error>;
}

/// [`Connectable`] for QP types (`[generics] Type;`) with the same five
/// inherent calls.
macro_rules! connectable {
    ($([$($generics:tt)*] $ty:ty;)*) => {$(
        impl<$($generics)*> Connectable for $ty {
            fn qp_num(&self) -> u32 {
                <$ty>::qp_num(self)
            }
            fn transport_type(&self) -> TransportType {
                <$ty>::transport_type(self)
            }
            fn state(&self) -> QpState {
                <$ty>::state(self)
            }
            fn modify(&self, attr: &QpAttr) -> Result<(), Error> {
                <$ty>::modify(self, attr)
            }
            fn established(&self) -> Result<QpState, Error> {
                <$ty>::established(self)
            }
        }
    )*};
}

connectable! {
    [] QueuePair;
    [M] OwnedQp<M>;
}
#[cfg(feature = "tokio")]
connectable! {
    [M: crate::post::DeviceReadable + Send + Sync + 'static] crate::tokio::AsyncQp<M>;
}

/// A QP that records the states the cm's attributes move it to: the
/// handshakes' host tests (blocking and async) drive it with the fake cm.
#[cfg(test)]
pub(crate) mod mock {
    use std::sync::Mutex;

    use super::Connectable;
    use crate::command::{QpAttr, QpState, TransportType};
    use crate::error::Error;

    pub(crate) struct MockQp {
        qp_num: u32,
        transport: TransportType,
        state: Mutex<QpState>,
        moves: Mutex<Vec<Option<QpState>>>,
    }

    impl MockQp {
        /// An IB/RoCE QP numbered `qp_num`, in RESET.
        pub(crate) fn new(qp_num: u32) -> Self {
            MockQp {
                qp_num,
                transport: TransportType::Ib,
                state: Mutex::new(QpState::Reset),
                moves: Mutex::new(Vec::new()),
            }
        }

        /// The states each `modify` asked for, in order.
        pub(crate) fn moves(&self) -> Vec<Option<QpState>> {
            self.moves.lock().unwrap().clone()
        }
    }

    impl Connectable for MockQp {
        fn qp_num(&self) -> u32 {
            self.qp_num
        }
        fn transport_type(&self) -> TransportType {
            self.transport
        }
        fn state(&self) -> QpState {
            *self.state.lock().unwrap()
        }
        fn modify(&self, attr: &QpAttr) -> Result<(), Error> {
            let to = attr.target_state();
            self.moves.lock().unwrap().push(to);
            if let Some(s) = to {
                *self.state.lock().unwrap() = s;
            }
            Ok(())
        }
        fn established(&self) -> Result<QpState, Error> {
            Ok(self.state())
        }
    }
}
