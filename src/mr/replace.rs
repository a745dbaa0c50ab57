//! The replace fallback: where the device cannot re-register in place,
//! register the new attributes first and deregister the old registration
//! after, inside the same [`MemoryRegion`] object.

use crate::error::{Errno, ReregError, ReregOutcome};

use super::rereg::{Rereg, ReregPath};
use super::{MemoryRegion, RegFailure};

impl MemoryRegion {
    /// Registers what `change` describes (the current range, PD and access
    /// where it changes none), then deregisters the old registration. On
    /// any failure before the old registration is gone, the old MR is kept
    /// and valid.
    pub(super) fn replace(&mut self, change: &Rereg<'_>) -> Result<ReregPath, ReregError> {
        let pd = change
            .new_pd()
            .map_or_else(|| self.pd.clone(), |pd| pd.inner.clone());
        let (start, length) = change
            .new_range()
            .unwrap_or((self.addr as *mut u8, self.length));
        let access = change.new_access().unwrap_or(self.access);
        // SAFETY: a new range was promised by the change set's maker
        // (Rereg::translation); otherwise it is the range already
        // registered, which the caller keeps mapped for this MR.
        let mut old = match unsafe { MemoryRegion::register(&pd, start, length, access) } {
            Ok(new) => new,
            Err(RegFailure::DontFork(e)) => {
                return Err(
                    self.rereg_error(ReregOutcome::DontForkNew, e.errno().unwrap_or(Errno::IO))
                );
            }
            Err(RegFailure::Input(e) | RegFailure::Cmd(e)) => {
                return Err(self.replace_failed(
                    e.errno().unwrap_or(Errno::IO),
                    "replace fallback: registering the new range failed; the old MR is untouched and valid",
                ));
            }
        };
        // `self` becomes the new registration, `old` the previous one.
        std::mem::swap(self, &mut old);
        if let Err(e) = old.dereg_command() {
            // Keep the caller's MR as it was and release the new one.
            std::mem::swap(self, &mut old);
            let mut new = old;
            let errno = e.errno().unwrap_or(Errno::IO);
            if new.dereg_in_place().is_ok() {
                return Err(self.replace_failed(
                    errno,
                    "replace fallback: deregistering the old MR failed; the new registration was released",
                ));
            }
            new.abandon();
            return Err(ReregError {
                new_range_registered: true,
                ..self.replace_failed(
                    errno,
                    "replace fallback: deregistering the old MR failed, and so did releasing the new registration: the new range stays registered until the context is closed",
                )
            });
        }
        if let Err(errno) = old.unmark(old.addr, old.length) {
            return Err(self.rereg_error(ReregOutcome::DoForkOld, errno));
        }
        Ok(ReregPath::Replaced)
    }

    /// The replace fallback failed before touching the old registration:
    /// `Cmd`, but the old MR is known to be valid.
    fn replace_failed(&self, errno: Errno, reason: &'static str) -> ReregError {
        ReregError {
            reason: Some(reason),
            ..self.rereg_error(ReregOutcome::Cmd, errno).known_unchanged()
        }
    }
}
