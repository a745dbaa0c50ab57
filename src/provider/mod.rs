//! What differs per kernel driver, in one place per driver, and which
//! driver a device has ([`driver::DriverId`]).
//!
//! The core (contexts, PDs, MRs) never asks which driver it talks to; it asks
//! the context's [`Provider`], chosen once at open from the driver id (no
//! `dlopen`, a closed set). Each driver's module holds its driver-private
//! (UHW) command tails, its ABI range and what its kernel code does on
//! failure; [`generic`] is what holds for any driver, [`rings`] the data-path
//! rings a CQ or QP owns, per driver.

pub(crate) mod driver;
pub(crate) mod generic;
pub(crate) mod rings;
pub(crate) mod rxe;
pub(crate) mod siw;

use crate::error::Errno;
use crate::flags::ReregFlags;
use driver::DriverId;

/// The ring property tests' proptest configuration: `cases` cases, or under
/// Miri (thousands of times slower) a handful, with no failure persistence
/// (it writes files, which Miri's isolation refuses; a failing case prints
/// its seed anyway).
#[cfg(test)]
pub(crate) fn ring_prop_config(cases: u32) -> proptest::test_runner::Config {
    let config = proptest::test_runner::Config {
        cases,
        ..proptest::test_runner::Config::default()
    };
    if cfg!(miri) {
        proptest::test_runner::Config {
            cases: 4,
            failure_persistence: None,
            ..config
        }
    } else {
        config
    }
}

/// `n` elements for a ring test, or under Miri `under_miri` (enough to lap
/// small rings several times; the full count would take hours there).
#[cfg(test)]
pub(crate) const fn ring_test_len(n: u64, under_miri: u64) -> u64 {
    if cfg!(miri) {
        under_miri
    } else {
        n
    }
}

/// The driver behind a context.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Provider {
    /// Soft RoCE (`rdma_rxe`).
    Rxe,
    /// Soft iWARP (`siw`).
    Siw,
    /// Any other driver, or an unknown one: only what every driver shares.
    Generic,
}

impl Provider {
    /// The provider for a driver id (`Generic` when unknown).
    pub(crate) fn for_driver(id: Option<DriverId>) -> Provider {
        match id {
            Some(DriverId::RXE) => Provider::Rxe,
            Some(DriverId::SIW) => Provider::Siw,
            _ => Provider::Generic,
        }
    }

    /// Driver ABI versions this crate speaks with the driver, where known:
    /// `(lowest, highest, text for errors)`.
    pub(crate) fn supported_abi(self) -> Option<(u32, u32, &'static str)> {
        match self {
            Provider::Rxe => Some(rxe::ABI),
            Provider::Siw => Some(siw::ABI),
            Provider::Generic => None,
        }
    }

    /// Bytes of driver-private GET_CONTEXT output the kernel requires.
    pub(crate) fn get_context_uhw_out_len(self) -> usize {
        match self {
            Provider::Siw => siw::GET_CONTEXT_UHW_OUT,
            Provider::Rxe | Provider::Generic => 0,
        }
    }

    /// Driver-private REG_MR input, and the size of its output.
    pub(crate) fn reg_mr_uhw(self) -> (&'static [u8], usize) {
        match self {
            Provider::Siw => (&siw::REG_MR_UHW_IN, siw::REG_MR_UHW_OUT),
            Provider::Rxe | Provider::Generic => (&[], 0),
        }
    }

    /// True when the kernel's answer `errno` to a REREG_MR with `flags`
    /// guarantees that nothing was changed: the MR keeps its old
    /// translation, PD, access and keys ([`MrState::Old`](crate::MrState)).
    /// False means the man page's "undefined" may be real.
    pub(crate) fn rereg_refusal_leaves_mr_unchanged(self, flags: ReregFlags, errno: Errno) -> bool {
        generic::rereg_refusal_leaves_mr_unchanged(flags, errno)
            || match self {
                Provider::Rxe => rxe::rereg_refusal_leaves_mr_unchanged(errno),
                Provider::Siw => siw::rereg_refusal_leaves_mr_unchanged(errno),
                Provider::Generic => false,
            }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn driver_ids_choose_providers() {
        assert_eq!(Provider::for_driver(Some(DriverId::RXE)), Provider::Rxe);
        assert_eq!(Provider::for_driver(Some(DriverId::SIW)), Provider::Siw);
        assert_eq!(Provider::for_driver(Some(DriverId(1))), Provider::Generic);
        assert_eq!(Provider::for_driver(None), Provider::Generic);
    }

    #[test]
    fn siw_needs_eight_byte_tails() {
        assert_eq!(Provider::Siw.get_context_uhw_out_len(), 8);
        assert_eq!(Provider::Siw.reg_mr_uhw().0.len(), 8);
        assert_eq!(Provider::Siw.reg_mr_uhw().1, 8);
        assert_eq!(Provider::Rxe.get_context_uhw_out_len(), 0);
        assert_eq!(Provider::Rxe.reg_mr_uhw(), (&[][..], 0));
        assert_eq!(Provider::Generic.reg_mr_uhw(), (&[][..], 0));
    }

    #[test]
    fn abi_ranges() {
        assert_eq!(Provider::Rxe.supported_abi(), Some((1, 2, "1..=2")));
        assert_eq!(Provider::Siw.supported_abi(), Some((1, 1, "1")));
        assert_eq!(Provider::Generic.supported_abi(), None);
    }

    #[test]
    fn which_rereg_refusals_leave_the_mr_unchanged() {
        let access = ReregFlags::ACCESS;
        // Every driver: the core's own checks, and the umem check drivers
        // make before changing anything.
        for p in [Provider::Rxe, Provider::Siw, Provider::Generic] {
            assert!(
                p.rereg_refusal_leaves_mr_unchanged(access, Errno::OPNOTSUPP),
                "{p:?}"
            );
            assert!(
                p.rereg_refusal_leaves_mr_unchanged(access, Errno::ACCESS),
                "{p:?}"
            );
            assert!(
                p.rereg_refusal_leaves_mr_unchanged(ReregFlags::empty(), Errno::INVAL),
                "{p:?}"
            );
        }
        // rxe checks everything before changing; only a failed response
        // copy (EFAULT) comes after the change.
        assert!(Provider::Rxe.rereg_refusal_leaves_mr_unchanged(access, Errno::INVAL));
        assert!(Provider::Rxe.rereg_refusal_leaves_mr_unchanged(access, Errno::NOENT));
        assert!(!Provider::Rxe.rereg_refusal_leaves_mr_unchanged(access, Errno::FAULT));
        // siw has no rereg at all: nothing can have changed.
        assert!(Provider::Siw.rereg_refusal_leaves_mr_unchanged(access, Errno::FAULT));
        // Elsewhere an EINVAL may come from a driver midway.
        assert!(!Provider::Generic.rereg_refusal_leaves_mr_unchanged(access, Errno::INVAL));
        assert!(!Provider::Generic.rereg_refusal_leaves_mr_unchanged(access, Errno::FAULT));
    }
}
