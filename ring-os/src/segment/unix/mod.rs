//! Shared-memory segments: a file descriptor plus a shared read-write mapping of all of it.
//!
//! Three kinds, one type ([`Segment`]):
//! - **named** ([`Segment::create_named`], [`Segment::open_named`]): POSIX shared memory, a file
//!   `shmring.<name>` in `/dev/shm` on Linux;
//! - **memfd** ([`Segment::create_memfd`], [`Segment::from_fd`]): anonymous, sealed against shrink
//!   and grow, handed to another process over a Unix socket ([`crate::raw::fdpass`]);
//! - **file-backed** ([`Segment::create_file`], [`Segment::open_file`]): a file at a path (macOS;
//!   containers that share a directory; hugetlbfs mounts).
//!
//! Creation reserves every page (`posix_fallocate`), so a full file system is
//! [`Error::NoSpace`] at once and never a `SIGBUS` at first touch. Opening treats the file as
//! untrusted: it must be a regular file of this user, not writable by others, of the expected
//! size (and, for a memfd, carry the seals).

mod check;
mod file;
// macOS has no memfd (nor seals): anonymous segments are refused there.
#[cfg_attr(target_os = "macos", path = "no_memfd.rs")]
pub(crate) mod memfd;
mod named;

use core::ptr::NonNull;
use std::os::fd::{AsFd, AsRawFd as _, BorrowedFd, OwnedFd};
use std::path::PathBuf;

use std::path::Path;

use memmap2::{MmapOptions, MmapRaw};

use super::{CreateOptions, SegmentKind};
#[cfg(any(ring_portable, ring_cross))]
pub(crate) use check::mode_bits;

use crate::liveness::lock::{self, Liveness, Role, RoleLock};
use crate::Error;

/// How often a creation is retried after a cleaner removed the file it had just created.
const CREATE_ATTEMPTS: usize = 16;

/// An open, mapped shared-memory segment.
///
/// The mapping is shared and read-write, page-aligned, and covers the whole file. Dropping the
/// segment unmaps it and closes the descriptor; the name or path stays unless
/// [`unlink`](Self::unlink) is called or [`set_unlink_on_drop`](Self::set_unlink_on_drop) is set.
///
/// # Examples
///
/// ```
/// use ring_os::{Error, raw::{CreateOptions, Segment, SizeCheck}};
/// let seg = Segment::create_memfd(4096, CreateOptions::new())?;
/// // What a receiver does with a descriptor it got from a peer: checks seals and size, then maps.
/// let fd = seg.fd().try_clone_to_owned().unwrap();
/// let same = Segment::from_fd(fd, SizeCheck::Exactly(4096))?;
/// assert_eq!(same.len(), 4096);
/// let fd = seg.fd().try_clone_to_owned().unwrap();
/// assert!(matches!(Segment::from_fd(fd, SizeCheck::AtLeast(8192)), Err(Error::SizeMismatch { .. })));
/// # Ok::<(), Error>(())
/// ```
#[derive(Debug)]
pub struct Segment {
    /// The SIGBUS guard's record of the mapping; declared first so it is dropped (unregistered)
    /// before `map` is unmapped.
    guard: crate::segment::sigbus::Registration,
    /// The mapping of the whole file.
    map: MmapRaw,
    /// The descriptor the mapping was made from (kept to re-check the size and to pass it on).
    fd: OwnedFd,
    /// What kind of segment this is.
    kind: SegmentKind,
    /// Whether dropping removes the name or path.
    unlink_on_drop: bool,
    /// The file's `(st_dev, st_ino)`: [`unlink`](Self::unlink) removes the name only while it
    /// still names this very file.
    ident: (u64, u64),
    /// [`Role::Creator`]'s lock, held by the creating handle from before formatting until it
    /// drops (`None` for a segment that was opened).
    creator: Option<RoleLock>,
    /// The portable backend's lock files of this segment (OFD locks live in the file itself).
    #[cfg(ring_portable)]
    roles: lock::Roles,
}

impl Segment {
    /// The first byte of the mapping (page-aligned).
    #[must_use]
    pub fn as_ptr(&self) -> NonNull<u8> {
        // memmap2 never returns a null mapping for a non-empty length (lengths are checked > 0
        // before mapping); fall back to dangling only to avoid an unwrap.
        NonNull::new(self.map.as_mut_ptr()).unwrap_or(NonNull::dangling())
    }

    /// The length of the mapping in bytes.
    #[must_use]
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Always false: segments are never empty.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.map.len() == 0
    }

    /// The segment's file descriptor (for [`crate::raw::fdpass::send_fd`]).
    #[must_use]
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// What kind of segment this is.
    #[must_use]
    pub fn kind(&self) -> &SegmentKind {
        &self.kind
    }

    /// Re-checks that the file still has the mapped length: first the SIGBUS guard's mark
    /// ([`is_truncated`](Self::is_truncated)), then `fstat`.
    ///
    /// A named or file-backed segment can be truncated by any process of the same user; the
    /// guard turns a touch of a lost page into zeros and a mark instead of a `SIGBUS` (memfd
    /// segments are sealed and cannot change size).
    ///
    /// # Errors
    ///
    /// [`Error::Truncated`] when the file shrank or the guard repaired a fault in the mapping,
    /// [`Error::SizeMismatch`] when it grew, [`Error::Io`] when `fstat` fails.
    pub fn check_len(&self) -> Result<(), Error> {
        self.check_truncated()?;
        let actual = check::file_len(self.fd.as_fd())?;
        let expected = self.map.len() as u64;
        if actual == expected {
            Ok(())
        } else if actual < expected {
            Err(Error::Truncated {
                mapped: expected,
                actual: Some(actual),
            })
        } else {
            Err(Error::SizeMismatch { expected, actual })
        }
    }

    /// Whether a peer truncated the file under this mapping (or its pages could not be backed):
    /// touches the mapping's last byte (a truncation always cuts the tail, so if anything is
    /// lost, that page is), which the SIGBUS guard turns into zeros and a mark if it is gone.
    /// Cheap: one load, no system call unless the page is gone.
    #[must_use]
    pub fn is_truncated(&self) -> bool {
        if let Some(last) = self.map.len().checked_sub(1) {
            // SAFETY: `last < len`, so the byte lies in our live mapping; peers write the
            // mapping only through atomics, and this is an atomic load of one byte.
            let byte =
                unsafe { core::sync::atomic::AtomicU8::from_ptr(self.map.as_mut_ptr().add(last)) };
            // Relaxed: only the page's presence matters.
            core::hint::black_box(byte.load(core::sync::atomic::Ordering::Relaxed));
        }
        self.guard.is_truncated()
    }

    /// [`Error::Truncated`] when [`is_truncated`](Self::is_truncated), naming the file's size now.
    ///
    /// # Errors
    ///
    /// [`Error::Truncated`].
    pub fn check_truncated(&self) -> Result<(), Error> {
        if self.is_truncated() {
            Err(self.truncated_error())
        } else {
            Ok(())
        }
    }

    /// The [`Error::Truncated`] for this mapping.
    pub(crate) fn truncated_error(&self) -> Error {
        Error::Truncated {
            mapped: self.map.len() as u64,
            actual: check::file_len(self.fd.as_fd()).ok(),
        }
    }

    /// The path of the segment's file, where it has one (file segments; named ones on Linux).
    #[must_use]
    pub fn path(&self) -> Option<PathBuf> {
        match &self.kind {
            SegmentKind::Named(name) => named::path(name),
            SegmentKind::File(path) => Some(path.clone()),
            SegmentKind::Memfd => None,
        }
    }

    /// Takes `role`'s lock on this segment's file (see [`crate::raw::lock`]); `Ok(None)` when it is
    /// held.
    ///
    /// # Errors
    ///
    /// [`Error::Lock`].
    pub fn lock_role(&self, role: Role) -> Result<Option<RoleLock>, Error> {
        #[cfg(not(ring_portable))]
        return RoleLock::try_acquire_or_path(self.fd.as_fd(), role, self.path().as_deref());
        #[cfg(ring_portable)]
        return RoleLock::try_acquire(&self.roles, role);
    }

    /// Takes every role's lock of this segment at once, as a cleaner does before it removes a
    /// segment (nobody can become a participant while it is held); `Ok(None)` when any role is
    /// held.
    ///
    /// # Errors
    ///
    /// [`Error::Lock`].
    pub fn lock_all_roles(&self) -> Result<Option<lock::AllRoles>, Error> {
        #[cfg(not(ring_portable))]
        return lock::AllRoles::try_acquire(self.fd.as_fd(), self.path().as_deref());
        #[cfg(ring_portable)]
        return lock::AllRoles::try_acquire(&self.roles);
    }

    /// Whether some process holds `role` on this segment (see [`lock::probe`]).
    #[must_use]
    pub fn probe(&self, role: Role) -> Liveness {
        #[cfg(not(ring_portable))]
        return lock::probe(self.fd.as_fd(), role);
        #[cfg(ring_portable)]
        return lock::probe(&self.roles, role);
    }

    /// The lock files of this segment's roles (the portable backend).
    #[cfg(ring_portable)]
    #[must_use]
    pub fn roles(&self) -> &lock::Roles {
        &self.roles
    }

    /// Removes the segment's name (named) or path (file-backed); a memfd has none. The memory
    /// stays until every mapping and descriptor is gone. The name is removed only while it
    /// still names this segment's file (same device and inode): one that was removed and
    /// re-created by someone else is left alone.
    ///
    /// # Errors
    ///
    /// [`Error::NotFound`] when it was already removed, [`Error::Replaced`] when it names another
    /// file now, [`Error::Io`] otherwise.
    pub fn unlink(&self) -> Result<(), Error> {
        match &self.kind {
            SegmentKind::Named(name) => {
                if let Some(path) = named::path(name) {
                    same_file(&path, self.ident, || name.to_string())?;
                }
                named::unlink(name)
            }
            SegmentKind::File(path) => {
                same_file(path, self.ident, || path.display().to_string())?;
                file::unlink(path)
            }
            SegmentKind::Memfd => Ok(()),
        }
    }

    /// Whether dropping this handle removes the name or path (default: no).
    pub fn set_unlink_on_drop(&mut self, on: bool) {
        self.unlink_on_drop = on;
    }

    /// Maps `len` bytes of `fd` shared and read-write.
    fn map(fd: OwnedFd, len: u64, kind: SegmentKind, opts: CreateOptions) -> Result<Self, Error> {
        let len_usize = usize::try_from(len).map_err(|_| Error::BadLength { len })?;
        if len_usize == 0 {
            return Err(Error::BadLength { len });
        }
        let mut mo = MmapOptions::new();
        mo.len(len_usize);
        if opts.populate {
            mo.populate();
        }
        // Installs the handler before the first mapping exists, so no fault can precede it.
        crate::segment::sigbus::install()?;
        let ident = lock::identity(fd.as_fd()).map_err(|e| Error::io("fstat", e))?;
        #[cfg(ring_portable)]
        let roles = roles_of(&kind, fd.as_fd())?;
        let map = mo
            .map_raw(fd.as_raw_fd())
            .map_err(|e| Error::io("mmap", e))?;
        let guard = crate::segment::sigbus::register(map.as_ptr(), len_usize, granule(fd.as_fd()))?;
        Ok(Self {
            guard,
            map,
            fd,
            kind,
            unlink_on_drop: false,
            ident,
            creator: None,
            #[cfg(ring_portable)]
            roles,
        })
    }

    /// Keeps the creator's lock for as long as this handle lives.
    fn with_creator(mut self, lock: RoleLock) -> Self {
        self.creator = Some(lock);
        self
    }
}

/// Checks that `path` still names the file `ident`.
fn same_file(path: &Path, ident: (u64, u64), what: impl Fn() -> String) -> Result<(), Error> {
    match lock::path_identity(path) {
        Ok(now) if now == ident => Ok(()),
        Ok(_) => Err(Error::Replaced { what: what() }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(Error::NotFound { what: what() }),
        Err(e) => Err(Error::io("lstat", e)),
    }
}

/// What a creator finds once it holds its freshly created file's creator lock.
enum Claim {
    /// The name (if any) is ours and the lock is held: format it.
    Ours(RoleLock),
    /// A cleaner took the file (it held the file's locks, or already removed the name) before we
    /// locked it: create again.
    Lost,
}

/// Maps an `open`/`shm_open`/`unlink` error on `what` (a segment file or shared-memory object,
/// as the message names it) to ours.
fn open_error(what: String, e: rustix::io::Errno, op: &'static str) -> Error {
    use rustix::io::Errno;
    match e {
        Errno::EXIST => Error::AlreadyExists { what },
        Errno::NOENT => Error::NotFound { what },
        Errno::ACCESS | Errno::PERM => Error::PermissionDenied { what },
        // ELOOP: O_NOFOLLOW met a symlink where our segment should be.
        Errno::LOOP => Error::NotRegularFile { what },
        e => Error::io(op, e),
    }
}

/// Takes [`Role::Creator`] on a file this process just created with `O_EXCL`, *before*
/// formatting it, and checks that `path` still names it.
///
/// Between the `open` and the lock, a cleaner sees a file with no locks held (an abandoned one)
/// and may remove it; this tells the creator so, instead of formatting a file nobody can find.
fn claim_created(
    fd: BorrowedFd<'_>,
    path: Option<&Path>,
    kind: &SegmentKind,
) -> Result<Claim, Error> {
    let Some(held) = lock_new(fd, kind, path, Role::Creator)? else {
        // Only a cleaner locks a file nobody has formatted yet.
        return Ok(Claim::Lost);
    };
    if let Some(path) = path {
        let ident = lock::identity(fd).map_err(|e| Error::io("fstat", e))?;
        if lock::path_identity(path).ok() != Some(ident) {
            held.release();
            return Ok(Claim::Lost);
        }
    }
    Ok(Claim::Ours(held))
}

/// Runs `create` (an `O_EXCL` creation returning the new descriptor and its path) until the file
/// it made is claimed (see [`claim_created`]), then `finish` (reserve, map); removes the file if
/// `finish` fails. Retries while cleaners take freshly created files.
fn create_claimed(
    kind: &SegmentKind,
    mut create: impl FnMut() -> Result<(OwnedFd, Option<PathBuf>), Error>,
    finish: impl FnOnce(OwnedFd) -> Result<Segment, Error>,
) -> Result<Segment, Error> {
    let mut lost = false;
    for _ in 0..CREATE_ATTEMPTS {
        let (fd, path) = match create() {
            Ok(made) => made,
            // The file we lost may still be there while the cleaner removes it.
            Err(Error::AlreadyExists { .. }) if lost => {
                std::thread::sleep(core::time::Duration::from_millis(1));
                continue;
            }
            Err(e) => return Err(e),
        };
        match claim_created(fd.as_fd(), path.as_deref(), kind)? {
            Claim::Lost => lost = true,
            Claim::Ours(held) => {
                let ident = lock::identity(fd.as_fd()).map_err(|e| Error::io("fstat", e))?;
                return match finish(fd) {
                    Ok(seg) => Ok(seg.with_creator(held)),
                    Err(e) => {
                        // We created the name: do not leave a half-made segment behind (but only
                        // ours).
                        if let Some(path) = &path {
                            if same_file(path, ident, String::new).is_ok() {
                                let _ = std::fs::remove_file(path);
                            }
                        }
                        held.release();
                        Err(e)
                    }
                };
            }
        }
    }
    Err(Error::AlreadyExists {
        what: "a segment file that cleaners kept removing while it was being created".to_owned(),
    })
}

/// Takes `role` on the segment file `fd` of `kind` before it has a [`Segment`] (a creator's lock):
/// an OFD lock on the file itself (through `path` where `/proc` is missing), or the portable
/// backend's lock file.
fn lock_new(
    fd: BorrowedFd<'_>,
    kind: &SegmentKind,
    path: Option<&Path>,
    role: Role,
) -> Result<Option<RoleLock>, Error> {
    #[cfg(not(ring_portable))]
    {
        let _ = kind;
        RoleLock::try_acquire_or_path(fd, role, path)
    }
    #[cfg(ring_portable)]
    {
        let _ = path;
        RoleLock::try_acquire(&roles_of(kind, fd)?, role)
    }
}

/// The portable backend's lock files of a segment: keyed by its device and inode, except a
/// named segment on macOS, which has no inode (`fstat` of a shared-memory object reports only
/// mode, owner and size) and is keyed by its name.
#[cfg(ring_portable)]
pub(crate) fn roles_of(kind: &SegmentKind, fd: BorrowedFd<'_>) -> Result<lock::Roles, Error> {
    match kind {
        SegmentKind::Named(name) if cfg!(target_os = "macos") => lock::Roles::named(name),
        _ => lock::Roles::of_file(fd),
    }
}

/// The page size of mappings of `fd`: the system page, or the file system's block size where
/// that is a larger power of two (a huge page on hugetlbfs), so a repair never splits a page.
fn granule(fd: BorrowedFd<'_>) -> usize {
    let page = rustix::param::page_size();
    let block = rustix::fs::fstat(fd)
        .ok()
        .and_then(|st| usize::try_from(st.st_blksize).ok())
        .unwrap_or(0);
    if block > page && block.is_power_of_two() {
        block
    } else {
        page
    }
}

impl Drop for Segment {
    fn drop(&mut self) {
        if self.unlink_on_drop {
            // Best effort: someone may have removed it already.
            let _ = self.unlink();
        }
    }
}

#[cfg(test)]
mod tests;
