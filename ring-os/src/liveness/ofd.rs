//! Kernel-vouched liveness: one open-file-description (OFD) byte-range lock per role on the
//! segment's own file.
//!
//! Each participant (the creator, the producer, each consumer entry) holds a write lock
//! (`F_OFD_SETLK`) on one byte of the segment's file, at an offset fixed by its [`Role`]. The
//! kernel drops the lock when the last descriptor of that open file description closes — when the
//! process exits or is killed — so "the byte is free" proves "no process holds that role". The
//! lock is keyed on the inode, not on a pid, so it holds across pid namespaces and containers that
//! share the file; a zombie leader whose worker threads still run keeps it (the descriptor table
//! lives on); pid reuse cannot fool it.
//!
//! OFD locks never conflict with locks of the *same* open file description, so every
//! [`RoleLock`] re-opens the file (`/proc/thread-self/fd/<n>`) to get a description of its own,
//! and [`probe`] asks through the mapping's descriptor, which never holds a lock, with
//! `F_OFD_GETLK`: it sees locks held by other processes *and* by this one.
//!
//! "Dead" needs the kernel to say the byte is free; any doubt (an error, a file system without
//! OFD locks) is "alive", so nothing live is ever reclaimed. See `docs/OS.md` (liveness).
//!
//! A program built with `portable` holds its roles through lock files instead (`flock.rs`), so
//! where this file is [`lock`](crate::raw::lock) every probe, role lock and cleaner lock also asks
//! those (`cross.rs`): a role is dead only when both kinds are free.
//!
//! **Momentary locks are unlocked before they close.** A lock is released when the last
//! reference to its open file description closes, and a child `fork`ed without `exec` (Python's
//! `multiprocessing` workers) holds a reference for its whole life. A lock taken only for a
//! moment (a role lock refused after the other kind's probe, a cleaner's [`AllRoles`]) is
//! therefore unlocked (`F_OFD_SETLK`, `F_UNLCK`, same range) before its descriptor closes
//! (`OfdLocked`), so such a child holds nothing. So is a [`RoleLock`] taken only for a moment (a
//! reclaim's, a registration or take-over given up: `RoleLock::release`). A role lock a
//! participant holds is released by the close alone, by design: a forked heir keeps the role
//! alive while it lives (see `docs/OS.md`).
//! Probes take no lock (`F_OFD_GETLK`).
//!
//! rustix exposes OFD locks only as whole-file `flock`-style locks (`fcntl_lock`), without byte
//! ranges or `F_OFD_GETLK`, so this module — and only this one — calls `fcntl` through `libc`.
//!
//! # References
//! - `fcntl(2)`, "Open file description locks (non-POSIX)" (Linux 3.15).

use std::os::fd::{AsFd as _, BorrowedFd, OwnedFd};
use std::path::Path;

pub(crate) use crate::liveness::ident::{identity, path_identity};
use crate::Error;

/// Whether this platform has OFD locks (Linux, Android). Where it has not, role locks hold
/// nothing and every probe answers "alive", so nothing is reclaimed, taken over or cleaned.
pub const SUPPORTED: bool = cfg!(any(target_os = "linux", target_os = "android"));

pub use crate::liveness::role::{Liveness, Role};

impl Role {
    /// The byte offset of this role's lock; `None` when it does not fit a file offset.
    #[must_use]
    pub fn offset(self) -> Option<i64> {
        match self {
            Self::Creator => Some(0),
            Self::Producer => Some(1),
            Self::Consumer(i) => i64::try_from(i).ok()?.checked_add(2),
        }
    }
}

/// An OFD write lock on `[start, start + len)` of a description of our own. Dropping it closes
/// the description; unless it was [`kept`](Self::kept) the range is unlocked first, so a copy of
/// the description that a child forked meanwhile inherited holds nothing (the lock was momentary).
#[derive(Debug)]
struct OfdLocked {
    fd: OwnedFd,
    start: i64,
    len: i64,
    /// Released by the close alone (a held [`RoleLock`]: a forked heir keeps it).
    kept: bool,
}

impl OfdLocked {
    /// A write lock on `[start, start + len)` of `fd`: `Ok(None)` when another description holds
    /// a conflicting one.
    fn take(fd: OwnedFd, start: i64, len: i64) -> std::io::Result<Option<Self>> {
        Ok(
            sys::set_write_lock(fd.as_fd(), start, len)?.then_some(Self {
                fd,
                start,
                len,
                kept: false,
            }),
        )
    }

    /// This lock, released only when the last reference to its description closes.
    fn kept(mut self) -> Self {
        self.kept = true;
        self
    }
}

impl Drop for OfdLocked {
    fn drop(&mut self) {
        if !self.kept {
            #[cfg(test)]
            crate::settle::heirs::at_release();
            let _ = sys::unlock(self.fd.as_fd(), self.start, self.len);
        }
    }
}

/// An OFD write lock on one role's byte, on an open file description of its own. Dropping it
/// releases the lock by closing the description; so does the kernel when the process dies (a
/// child forked without `exec` shares the description and keeps the role alive until it exits).
///
// The example only where this file is `lock` (with `portable` it is the other kind, whose
// items the public paths do not name).
#[cfg_attr(
    not(ring_portable),
    doc = r#"# Examples

```
use ring_os::raw::lock::{probe, Liveness, Role, RoleLock};
use ring_os::raw::{CreateOptions, Segment};
let seg = Segment::create_memfd(4096, CreateOptions::new())?;
let held = RoleLock::try_acquire(seg.fd(), Role::Consumer(3))?.expect("free");
// Seen through the segment's own descriptor, even from this process...
assert_eq!(probe(seg.fd(), Role::Consumer(3)), Liveness::Alive);
// ...and refused to a second holder.
assert!(RoleLock::try_acquire(seg.fd(), Role::Consumer(3))?.is_none());
drop(held);
assert_eq!(probe(seg.fd(), Role::Consumer(3)), Liveness::Dead);
# Ok::<(), ring_os::Error>(())
```"#
)]
#[derive(Debug)]
pub struct RoleLock {
    /// The description the lock belongs to; closing it releases the lock.
    lock: OfdLocked,
    /// The role it vouches for.
    role: Role,
}

impl RoleLock {
    /// Takes `role`'s lock on the file behind `file`; `Ok(None)` when another open file
    /// description (of this or another process) holds it, or (Linux) a program built with
    /// `portable` holds the role through its lock file (see `cross.rs`).
    ///
    /// # Errors
    ///
    /// [`Error::Lock`] when the file cannot be re-opened or the file system refuses OFD locks.
    pub fn try_acquire(file: BorrowedFd<'_>, role: Role) -> Result<Option<Self>, Error> {
        Self::try_acquire_or_path(file, role, None)
    }

    /// [`try_acquire`](Self::try_acquire), re-opening `path` (checked to be the same file) when
    /// `/proc` is not mounted.
    ///
    /// # Errors
    ///
    /// As `try_acquire`.
    pub fn try_acquire_or_path(
        file: BorrowedFd<'_>,
        role: Role,
        path: Option<&Path>,
    ) -> Result<Option<Self>, Error> {
        let start = role.offset().ok_or_else(|| Error::Lock {
            role: role.to_string(),
            source: std::io::Error::from(std::io::ErrorKind::InvalidInput),
        })?;
        let own = reopen(file, path).map_err(|source| Error::Lock {
            role: role.to_string(),
            source,
        })?;
        match OfdLocked::take(own, start, 1) {
            // Ours is taken first, the other kind probed after (see `cross.rs`): refused, ours
            // is unlocked again as it drops (momentary).
            #[cfg(not(ring_portable))]
            Ok(Some(_)) if crate::liveness::cross::probe(file, role) == Liveness::Alive => Ok(None),
            Ok(Some(taken)) => Ok(Some(Self {
                lock: taken.kept(),
                role,
            })),
            Ok(None) => Ok(None),
            Err(source) => Err(Error::Lock {
                role: role.to_string(),
                source,
            }),
        }
    }

    /// The role this lock vouches for.
    #[must_use]
    pub fn role(&self) -> Role {
        self.role
    }

    /// Lets the role go now, unlocking before closing: for a lock taken only for a moment (a
    /// reclaim, a registration or take-over given up), which a child forked meanwhile must not
    /// keep. A drop leaves the role to such a child (see the module docs).
    pub(crate) fn release(mut self) {
        self.lock.kept = false;
    }
}

/// Every role's lock of one file at once (the whole file and beyond, `l_len = 0`): what a cleaner
/// holds while it removes a segment, so nobody can become a participant of it meanwhile. On
/// Linux it also holds the portable backend's gate of the file (see `cross.rs`), so neither can a
/// program built with `portable`. Dropping it unlocks (it is never left to a forked child: see
/// the module docs).
#[derive(Debug)]
pub struct AllRoles {
    /// The lock, on a description of its own (momentary).
    _file: OfdLocked,
    /// The other kind's every-role lock, where lock files can exist.
    #[cfg(not(ring_portable))]
    _other: crate::liveness::cross::Hold,
}

impl AllRoles {
    /// Takes every role's lock; `Ok(None)` when any of them is held (through either backend).
    ///
    /// # Errors
    ///
    /// [`Error::Lock`], as `RoleLock::try_acquire`, or when the portable backend's gate cannot be
    /// made or locked.
    pub fn try_acquire(file: BorrowedFd<'_>, path: Option<&Path>) -> Result<Option<Self>, Error> {
        let lock_err = |source| Error::Lock {
            role: "every role".to_owned(),
            source,
        };
        let own = reopen(file, path).map_err(lock_err)?;
        // Refused or failed after ours was taken: `own` drops, unlocked.
        match OfdLocked::take(own, 0, 0) {
            #[cfg(not(ring_portable))]
            Ok(Some(own)) => Ok(
                crate::liveness::cross::hold_all(file, path)?.map(|other| Self {
                    _file: own,
                    _other: other,
                }),
            ),
            #[cfg(ring_portable)]
            Ok(Some(own)) => Ok(Some(Self { _file: own })),
            Ok(None) => Ok(None),
            Err(source) => Err(lock_err(source)),
        }
    }
}

/// Whether some process holds `role` on the file behind `file`. [`Liveness::Dead`] only when the
/// kernel says the byte is free and (Linux) no program built with `portable` holds the role
/// through its lock file (see `cross.rs`); any error (`EINVAL`, `ENOLCK`, a file system without
/// OFD locks, a non-Linux kernel) is [`Liveness::Alive`].
///
/// `file` must not itself hold locks (a segment's own descriptor never does): a lock of the same
/// open file description never conflicts, so it would not be seen.
#[must_use]
pub fn probe(file: BorrowedFd<'_>, role: Role) -> Liveness {
    let own = match role.offset() {
        Some(start) => probe_range(file, start, 1),
        None => Liveness::Alive,
    };
    #[cfg(not(ring_portable))]
    let own = crate::liveness::cross::both(own, || crate::liveness::cross::probe(file, role));
    own
}

/// Whether any role of the file behind `file` is held (the whole file and beyond; on Linux also
/// through the portable backend's lock files).
#[must_use]
pub fn probe_any(file: BorrowedFd<'_>) -> Liveness {
    let own = probe_range(file, 0, 0);
    #[cfg(not(ring_portable))]
    let own = crate::liveness::cross::both(own, || crate::liveness::cross::probe_any(file));
    own
}

/// [`Liveness::Dead`] only when no lock conflicts with a write lock on `[start, start + len)`.
fn probe_range(file: BorrowedFd<'_>, start: i64, len: i64) -> Liveness {
    match sys::conflicting(file, start, len) {
        Ok(false) => Liveness::Dead,
        Ok(true) | Err(_) => Liveness::Alive,
    }
}

/// A new open file description of the file behind `file`: through `/proc/thread-self/fd` (which,
/// unlike `/proc/self`, still works after the main thread exited), `/proc/self/fd`, or `path`.
/// The result is checked to be the same inode.
fn reopen(file: BorrowedFd<'_>, path: Option<&Path>) -> std::io::Result<OwnedFd> {
    use std::os::fd::AsRawFd as _;
    let want = identity(file)?;
    let n = file.as_raw_fd();
    let mut candidates = vec![
        std::path::PathBuf::from(format!("/proc/thread-self/fd/{n}")),
        std::path::PathBuf::from(format!("/proc/self/fd/{n}")),
    ];
    candidates.extend(path.map(Path::to_path_buf));
    let mut last = std::io::Error::from(std::io::ErrorKind::NotFound);
    for candidate in candidates {
        match open_same(&candidate, want) {
            Ok(fd) => return Ok(fd),
            Err(e) => last = e,
        }
    }
    Err(last)
}

/// Opens `path` read-write, refusing it unless it is the file `(dev, ino)`.
fn open_same(path: &Path, want: (u64, u64)) -> std::io::Result<OwnedFd> {
    use rustix::fs::{Mode, OFlags};
    let fd = rustix::fs::open(path, OFlags::RDWR | OFlags::CLOEXEC, Mode::empty())?;
    if identity(fd.as_fd())? == want {
        Ok(fd)
    } else {
        Err(std::io::Error::other("the path names another file now"))
    }
}

/// The `fcntl` calls, Linux (OFD locks exist since 3.15).
#[cfg(any(target_os = "linux", target_os = "android"))]
mod sys {
    use std::os::fd::{AsRawFd as _, BorrowedFd};

    /// A request of `kind` (`F_WRLCK`, `F_UNLCK`) on `[start, start + len)` (`len` 0: to the end
    /// and beyond).
    fn request(kind: i32, start: i64, len: i64) -> libc::flock {
        // SAFETY: `flock` is a plain C struct of integers (plus, on some targets, padding), for
        // which all-zero bytes are a valid value; `l_pid` must be 0 for OFD requests.
        let mut fl: libc::flock = unsafe { core::mem::zeroed() };
        // Both constants are tiny; the field type differs by target.
        #[allow(
            clippy::cast_possible_truncation,
            reason = "F_WRLCK, F_UNLCK and SEEK_SET are < 16"
        )]
        {
            fl.l_type = kind as _;
            fl.l_whence = libc::SEEK_SET as _;
        }
        fl.l_start = start;
        fl.l_len = len;
        fl
    }

    /// `F_OFD_SETLK` a write lock: true when taken, false when another description holds a
    /// conflicting one.
    pub(super) fn set_write_lock(
        fd: BorrowedFd<'_>,
        start: i64,
        len: i64,
    ) -> std::io::Result<bool> {
        let mut fl = request(libc::F_WRLCK, start, len);
        // SAFETY: `fd` is an open descriptor for the duration of the borrow, and `fl` is a valid,
        // exclusively borrowed `flock` that the kernel reads (and may write) during the call.
        let rc = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_OFD_SETLK, &raw mut fl) };
        if rc == 0 {
            return Ok(true);
        }
        let e = std::io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EAGAIN | libc::EACCES) => Ok(false),
            _ => Err(e),
        }
    }

    /// `F_OFD_SETLK` an unlock of `[start, start + len)`: this description's lock on it is gone,
    /// whoever else (a forked child) shares the description.
    pub(super) fn unlock(fd: BorrowedFd<'_>, start: i64, len: i64) -> std::io::Result<()> {
        let mut fl = request(libc::F_UNLCK, start, len);
        // SAFETY: as in `set_write_lock`.
        let rc = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_OFD_SETLK, &raw mut fl) };
        if rc == 0 {
            Ok(())
        } else {
            Err(std::io::Error::last_os_error())
        }
    }

    /// `F_OFD_GETLK` for a write lock: whether any other description holds a conflicting lock.
    pub(super) fn conflicting(fd: BorrowedFd<'_>, start: i64, len: i64) -> std::io::Result<bool> {
        let mut fl = request(libc::F_WRLCK, start, len);
        // SAFETY: as in `set_write_lock`; F_OFD_GETLK writes the conflicting lock (or F_UNLCK)
        // into `fl`.
        let rc = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_OFD_GETLK, &raw mut fl) };
        if rc != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(i32::from(fl.l_type) != libc::F_UNLCK)
    }
}

/// No OFD locks here (macOS, the BSDs): no role can be locked, and every probe answers "alive"
/// (see `docs/OS.md`, the fallback), so nothing is ever reclaimed or cleaned automatically.
#[cfg(not(any(target_os = "linux", target_os = "android")))]
mod sys {
    use std::os::fd::BorrowedFd;

    /// Pretends the lock was taken: there is nothing to take, and probes never say dead.
    pub(super) fn set_write_lock(_: BorrowedFd<'_>, _: i64, _: i64) -> std::io::Result<bool> {
        Ok(true)
    }

    /// Nothing was taken.
    pub(super) fn unlock(_: BorrowedFd<'_>, _: i64, _: i64) -> std::io::Result<()> {
        Ok(())
    }

    /// Unknown, so "alive".
    pub(super) fn conflicting(_: BorrowedFd<'_>, _: i64, _: i64) -> std::io::Result<bool> {
        Err(std::io::Error::from(std::io::ErrorKind::Unsupported))
    }
}

#[cfg(test)]
#[path = "ofd/tests.rs"]
mod tests;
