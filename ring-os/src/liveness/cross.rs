//! Both Linux backends at once: the role locks of the backend this build did not choose
//! ([`other`](crate::liveness::other)), asked beside its own ([`lock`](crate::liveness::lock)).
//!
//! On Linux a ring may be held through either backend: the default one keeps OFD locks inside
//! the segment file, a program built with `portable` keeps `flock` locks on lock files beside it.
//! Each sees only its own kind, so alone a cleaner of one kind judges the other's live rings
//! unheld and removes them, and a producer of one kind takes over a live producer of the other.
//! So every verdict of [`lock`](crate::liveness::lock) that can lead to a removal, a take-over or
//! a reclaim asks both kinds here:
//!
//! - a **probe** is [`Liveness::Dead`] only when both kinds say nobody holds the role (or any
//!   role); a missing lock file is "no portable holder", never "dead" on its own;
//! - a **role lock** is granted only when the other kind's probe of that role says free *after*
//!   this kind's lock was taken: two participants of different kinds that race both take their
//!   own lock first and then probe the other's, so at least one of them sees the other (the
//!   kernel orders the lock operations), and neither displaces a live one;
//! - a **cleaner** ([`AllRoles`](crate::liveness::lock::AllRoles)) holds both kinds' every-role
//!   locks while it removes a segment, so no participant of either kind can join meanwhile.
//!
//! Doubt is "alive", as in each backend, with one exception: a portable lock directory that
//! cannot exist for this user (missing and impossible to make, or refused as not this user's
//! private directory) holds no lock files of any participant of this user, so it says "no
//! portable holder" rather than keeping every ring alive for ever (another user could otherwise
//! plant `/dev/shm/shmring-locks.<uid>` and stop every take-over and clean of a default build).
//! A probe of the default build never makes that directory: where it does not exist, no
//! portable participant has made a lock file (each makes the directory first), and one that
//! starts after the probe takes its own lock and then sees ours. Only a cleaner makes it, to
//! hold the portable gate while it removes a segment.

use crate::liveness::lock::{Liveness, Role};
use crate::liveness::other;
use crate::Error;

/// [`Liveness::Dead`] only when `own` and the other kind's verdict (asked only when `own` is
/// dead) both are.
pub(crate) fn both(own: Liveness, other: impl FnOnce() -> Liveness) -> Liveness {
    match own {
        Liveness::Alive => Liveness::Alive,
        Liveness::Dead => other(),
    }
}

/// The default build (OFD locks): the other kind is the portable backend's lock files of the
/// segment file, keyed by its device and inode as a portable build keys them on Linux.
#[cfg(not(ring_portable))]
mod imp {
    use std::os::fd::BorrowedFd;
    use std::path::Path;

    use super::{other, Error, Liveness, Role};

    /// What a cleaner holds of the other kind: its gate exclusive, or nothing where no lock file
    /// can exist.
    pub(crate) type Hold = Option<other::AllRoles>;

    /// The portable backend's lock files of the segment open as `file`; `Ok(None)` when no
    /// participant of this user can have made any (see the module docs). Only a cleaner
    /// (`make`) makes the lock directory: a probe where it does not exist leaves none behind.
    fn lock_files(file: BorrowedFd<'_>, make: bool) -> Result<Option<other::Roles>, Error> {
        use std::io::ErrorKind;
        let roles = if make {
            other::Roles::of_file(file)
        } else {
            other::Roles::of_existing_file(file)
        };
        match roles {
            Ok(roles) => Ok(Some(roles)),
            Err(Error::Lock { source, .. })
                if matches!(
                    source.kind(),
                    ErrorKind::NotFound | ErrorKind::PermissionDenied
                ) =>
            {
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    /// Whether a portable participant holds `role` of the segment open as `file`.
    pub(crate) fn probe(file: BorrowedFd<'_>, role: Role) -> Liveness {
        match lock_files(file, false) {
            Ok(Some(roles)) => other::probe(&roles, role),
            Ok(None) => Liveness::Dead,
            Err(_) => Liveness::Alive,
        }
    }

    /// Whether a portable participant holds any role of the segment open as `file`.
    pub(crate) fn probe_any(file: BorrowedFd<'_>) -> Liveness {
        match lock_files(file, false) {
            Ok(Some(roles)) => other::probe_any(&roles),
            Ok(None) => Liveness::Dead,
            Err(_) => Liveness::Alive,
        }
    }

    /// Every portable role of the segment open as `file` (its gate exclusive); `Ok(None)` when a
    /// portable participant holds one.
    ///
    /// # Errors
    ///
    /// [`Error::Lock`] when the gate cannot be made or locked.
    pub(crate) fn hold_all(
        file: BorrowedFd<'_>,
        _path: Option<&Path>,
    ) -> Result<Option<Hold>, Error> {
        match lock_files(file, true)? {
            None => Ok(Some(None)),
            Some(roles) => Ok(other::AllRoles::try_acquire(&roles)?.map(Some)),
        }
    }
}

/// The portable build on Linux (lock files): the other kind is the OFD locks in the segment file,
/// probed through the descriptor the lock files were made from (`Roles::of_file` keeps it).
/// Lock files without a segment file ([`Roles::in_dir`](crate::liveness::lock::Roles::in_dir),
/// tests and examples) have no other kind to ask.
#[cfg(ring_portable)]
mod imp {
    use std::os::fd::AsFd as _;

    use super::{other, Error, Liveness, Role};
    use crate::liveness::lock::Roles;

    /// What a cleaner holds of the other kind: the OFD lock on the whole segment file.
    pub(crate) type Hold = Option<other::AllRoles>;

    /// Whether a default-backend participant holds `role` of the segment `roles` belong to.
    pub(crate) fn probe(roles: &Roles, role: Role) -> Liveness {
        roles
            .segment_file()
            .map_or(Liveness::Dead, |file| other::probe(file.as_fd(), role))
    }

    /// Whether a default-backend participant holds any role of the segment `roles` belong to.
    pub(crate) fn probe_any(roles: &Roles) -> Liveness {
        roles
            .segment_file()
            .map_or(Liveness::Dead, |file| other::probe_any(file.as_fd()))
    }

    /// The OFD lock on the whole segment file; `Ok(None)` when a default-backend participant
    /// holds a role of it.
    ///
    /// # Errors
    ///
    /// [`Error::Lock`] when the file cannot be re-opened or the file system refuses OFD locks.
    pub(crate) fn hold_all(roles: &Roles) -> Result<Option<Hold>, Error> {
        match roles.segment_file() {
            None => Ok(Some(None)),
            Some(file) => Ok(other::AllRoles::try_acquire(file.as_fd(), None)?.map(Some)),
        }
    }
}

pub(crate) use imp::{hold_all, probe, probe_any, Hold};

#[cfg(test)]
#[path = "cross/tests.rs"]
mod tests;
