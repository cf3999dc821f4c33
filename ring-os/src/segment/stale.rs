//! Listing our named segments and removing the abandoned ones, without races.
//!
//! A named segment outlives its processes: if every process that used it died without unlinking
//! it, its memory stays in `/dev/shm` until reboot. [`list`] finds ours (file names starting with
//! [`PREFIX`](crate::raw::NAME_PREFIX)), reads the participants recorded in each (creator, producer,
//! registered consumers) as diagnostic text, and asks the kernel whether any role lock of the
//! file is held (see [`crate::raw::lock`]). [`clean`] removes a segment only when no role lock is held
//! *and* it is one of ours: a valid ring, or a half-created one whose creator died before it
//! opened the init barrier. Foreign, corrupt or truncated files are reported and left alone.
//!
//! Removal is re-checked immediately before it happens: the candidate is re-opened, must still be
//! the same file (`st_dev` + `st_ino`) as listed, the cleaner takes every role lock of it (so no
//! one can join it meanwhile), and the name must still name that file when it is removed. A
//! creator takes its creator lock before formatting and re-checks its name after, so a cleaner
//! that removes a file a creator had just made only makes that creator create again.

use std::os::fd::{AsFd as _, BorrowedFd, OwnedFd};
use std::path::Path;

use ring_core::AttachError;

use crate::liveness::lock::{self, AllRoles, Liveness};
pub use crate::liveness::Participant;
pub use crate::segment::name::{is_spill_of, spill_queue};
use crate::segment::{Segment, SegmentName, SizeCheck};
use crate::Error;

/// The directory POSIX shared memory lives in on Linux.
pub const SHM_DIR: &str = "/dev/shm";

/// What a segment file is, as far as its bytes tell.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Owners {
    /// A valid ring: the participants its header records, each with its role lock's verdict.
    Known(Vec<Participant>),
    /// One of ours whose creator has not finished (or never will finish) formatting it: zero
    /// length, zeroed header, init barrier closed; the detail.
    HalfCreated(String),
    /// Not a usable ring of ours (foreign, corrupt, truncated, not a regular file); the reason.
    /// Such files are never removed.
    Unreadable(String),
}

/// One of our segments in `/dev/shm`.
#[derive(Clone, Debug)]
pub struct SegmentInfo {
    /// Its name (without the prefix).
    pub name: SegmentName,
    /// Its size in bytes.
    pub len: u64,
    /// Its participants, or why they are unknown.
    pub owners: Owners,
    /// Whether any role lock of the file is held (the creator's, the producer's, a consumer's,
    /// or a cleaner's).
    pub locks: Liveness,
    /// The file's `(st_dev, st_ino)` when listed (`None` when it could not be opened).
    pub ident: Option<(u64, u64)>,
}

impl SegmentInfo {
    /// True when no role lock is held and the file is one of ours (a ring, or a half-created
    /// one): what [`clean`] removes.
    #[must_use]
    pub fn is_stale(&self) -> bool {
        self.locks == Liveness::Dead
            && self.ident.is_some()
            && matches!(self.owners, Owners::Known(_) | Owners::HalfCreated(_))
    }

    /// One word for the state: `live`, `stale`, `creating`, `abandoned` or `unreadable`.
    #[must_use]
    pub fn status(&self) -> &'static str {
        match (&self.owners, self.is_stale()) {
            (Owners::Unreadable(_), _) => "unreadable",
            (Owners::HalfCreated(_), true) => "abandoned",
            (Owners::HalfCreated(_), false) => "creating",
            (Owners::Known(_), true) => "stale",
            (Owners::Known(_), false) => "live",
        }
    }
}

/// What [`clean`] did.
#[derive(Clone, Debug, Default)]
pub struct CleanReport {
    /// Segments removed (no role lock held).
    pub removed: Vec<SegmentName>,
    /// Segments kept, with why.
    pub kept: Vec<(SegmentName, String)>,
}

/// Lists our segments in `dir` (`/dev/shm`, or a scratch directory of segment files).
///
/// # Errors
///
/// [`Error::Io`] when the directory cannot be read. A file that cannot be opened or read is
/// listed with [`Owners::Unreadable`], never an error.
pub fn list_in(dir: &Path) -> Result<Vec<SegmentInfo>, Error> {
    let entries = std::fs::read_dir(dir).map_err(|e| Error::io("read_dir", e))?;
    let mut out = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| Error::io("read_dir", e))?;
        let Some(name) = entry
            .file_name()
            .to_str()
            .and_then(SegmentName::from_file_name)
        else {
            continue;
        };
        out.push(inspect(dir, name));
    }
    out.sort_by(|a, b| a.name.as_str().cmp(b.name.as_str()));
    Ok(out)
}

/// Lists our segments in `/dev/shm` (headers validated as untrusted input).
///
/// # Errors
///
/// [`Error::Io`] when `/dev/shm` cannot be read, and on every system but Linux, which has no
/// directory of shared-memory objects to read.
pub fn list() -> Result<Vec<SegmentInfo>, Error> {
    if !cfg!(target_os = "linux") {
        return Err(Error::io(
            "list named segments",
            std::io::Error::new(
                std::io::ErrorKind::Unsupported,
                "only Linux keeps POSIX shared memory in a directory (/dev/shm) that can be \
                 listed; remove a dead named ring by its name (shm_unlink)",
            ),
        ));
    }
    list_in(Path::new(SHM_DIR))
}

/// Removes our segments in `/dev/shm` that no process holds; see [`CleanReport`]. With the
/// portable backend it first sweeps the lock directory (`lock::sweep`).
///
/// # Errors
///
/// As [`list`]: [`Error::Io`] when `/dev/shm` cannot be read, and on every system but Linux.
pub fn clean() -> Result<CleanReport, Error> {
    // The portable backend's lock files of segments whose last participant was killed (each
    // removed only with its gate held, so never a live role's; best effort).
    #[cfg(ring_portable)]
    let _ = lock::sweep();
    Ok(clean_listed(Path::new(SHM_DIR), list()?))
}

/// Opens a file in `dir` without blocking (a FIFO planted under our prefix must not hang us) and
/// without following a symlink.
fn open_raw(path: &Path) -> Result<OwnedFd, String> {
    use rustix::fs::{Mode, OFlags};
    let flags = OFlags::RDWR | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NONBLOCK;
    rustix::fs::open(path, flags, Mode::empty()).map_err(|e| format!("cannot open: {e}"))
}

/// Everything [`list_in`] says about one file; never fails, never panics.
fn inspect(dir: &Path, name: SegmentName) -> SegmentInfo {
    let path = dir.join(name.file_name());
    let mut info = SegmentInfo {
        name,
        len: 0,
        owners: Owners::Unreadable(String::new()),
        // Until the kernel says otherwise.
        locks: Liveness::Alive,
        ident: None,
    };
    let fd = match open_raw(&path) {
        Ok(fd) => fd,
        Err(why) => {
            info.owners = Owners::Unreadable(why);
            return info;
        }
    };
    let st = match rustix::fs::fstat(&fd) {
        Ok(st) => st,
        Err(e) => {
            info.owners = Owners::Unreadable(format!("fstat: {e}"));
            return info;
        }
    };
    info.len = u64::try_from(st.st_size).unwrap_or(0);
    info.ident = lock::identity(fd.as_fd()).ok();
    info.locks = any_role(dir, &info.name, fd.as_fd());
    info.owners = read_owners(dir, &info, &st);
    info
}

/// Why a file is not one of ours to manage (not a regular file, another user's, writable by
/// others); `None` when it is.
fn not_ours(st: &rustix::fs::Stat) -> Option<String> {
    use rustix::fs::FileType;
    if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
        return Some("not a regular file".to_owned());
    }
    if st.st_uid != rustix::process::geteuid().as_raw() || st.st_mode & 0o022 != 0 {
        return Some(format!(
            "foreign: uid {} mode {:o}",
            st.st_uid,
            st.st_mode & 0o7777
        ));
    }
    None
}

/// Classifies a file by its type, owner, size and header.
fn read_owners(dir: &Path, info: &SegmentInfo, st: &rustix::fs::Stat) -> Owners {
    if let Some(why) = not_ours(st) {
        return Owners::Unreadable(why);
    }
    if info.len == 0 {
        return Owners::HalfCreated("zero length: its creator has not sized it".to_owned());
    }
    let seg = match open_in(dir, &info.name) {
        Ok(seg) => seg,
        Err(e) => return Owners::Unreadable(e.to_string()),
    };
    if lock::identity(seg.fd()).ok() != info.ident {
        return Owners::Unreadable("replaced while being listed".to_owned());
    }
    match ring_participants(&seg) {
        Ok(participants) => Owners::Known(participants),
        Err(e @ (AttachError::NotInitialized { .. } | AttachError::BadMagic { found: 0 })) => {
            Owners::HalfCreated(format!("not formatted ({e})"))
        }
        Err(e) => Owners::Unreadable(e.to_string()),
    }
}

/// The participants a mapped segment's ring header records, each with its role lock's verdict.
///
/// # Errors
///
/// The header's first fault, as ring-core's validation reports it.
pub fn ring_participants(seg: &Segment) -> Result<Vec<Participant>, AttachError> {
    // SAFETY: the mapping is `seg.len()` bytes, readable and writable, and stays mapped while
    // `seg` is borrowed, which outlives the `RawMemory` made here.
    let raw = unsafe { ring_core::RawMemory::attach(seg.as_ptr(), seg.len()) }?;
    Ok(crate::liveness::participants(&raw, seg))
}

/// Removes the stale segments among `list` (see [`SegmentInfo::is_stale`]) from `dir`, each only
/// after re-checking it (see the module docs).
#[must_use]
pub fn clean_listed(dir: &Path, list: Vec<SegmentInfo>) -> CleanReport {
    let mut report = CleanReport::default();
    for info in list {
        if !info.is_stale() {
            let why = match &info.owners {
                Owners::Unreadable(why) => format!("unreadable: {why}"),
                Owners::HalfCreated(why) => format!("being created: {why}"),
                Owners::Known(_) => "a role lock is held: a participant is alive".to_owned(),
            };
            report.kept.push((info.name, why));
            continue;
        }
        match remove_if_still_stale(dir, &info) {
            Ok(()) => report.removed.push(info.name),
            Err(why) => report.kept.push((info.name, why)),
        }
    }
    report
}

/// Removes a listed file whatever its bytes (a spill segment, see [`spill_queue`]) when it is
/// one of ours to manage (a regular file of this user, writable by no one else), still the same
/// file as listed, no role lock of it is held (this call takes them all while it removes it)
/// and the name still names it. Whether the file should go (a spill's queue gone or dead) is
/// the caller's judgement.
///
/// # Errors
///
/// Why it was kept, as text.
pub fn remove_unheld(dir: &Path, info: &SegmentInfo) -> Result<(), String> {
    let fd = open_raw(&dir.join(info.name.file_name()))?;
    let st = rustix::fs::fstat(&fd).map_err(|e| format!("fstat: {e}"))?;
    if let Some(why) = not_ours(&st) {
        return Err(why);
    }
    drop(fd);
    remove_if_still_stale(dir, info)
}

/// Re-opens a listed candidate and removes it only if it is still the same file, no role lock
/// is held (we hold them all while removing it) and the name still names it.
fn remove_if_still_stale(dir: &Path, info: &SegmentInfo) -> Result<(), String> {
    let path = dir.join(info.name.file_name());
    let fd = open_raw(&path)?;
    if lock::identity(fd.as_fd()).ok() != info.ident {
        return Err("replaced since it was listed".to_owned());
    }
    let held = all_roles(dir, &info.name, fd.as_fd(), &path).map_err(|e| e.to_string())?;
    let Some(_held) = held else {
        return Err("a participant joined since it was listed".to_owned());
    };
    // The last look before the removal: the name must still name the file we hold.
    if lock::path_identity(&path).ok() != info.ident {
        return Err("replaced since it was listed".to_owned());
    }
    std::fs::remove_file(&path).map_err(|e| format!("remove failed: {e}"))
}

/// Whether any role of the listed file is held (OFD locks: on the file itself).
#[cfg(not(ring_portable))]
fn any_role(_dir: &Path, _name: &SegmentName, fd: BorrowedFd<'_>) -> Liveness {
    lock::probe_any(fd)
}

/// Whether any role of the listed file is held (the portable backend: its lock files, found as
/// the segment's own handle finds them).
#[cfg(ring_portable)]
fn any_role(dir: &Path, name: &SegmentName, fd: BorrowedFd<'_>) -> Liveness {
    listed_roles(dir, name, fd).map_or(Liveness::Alive, |roles| lock::probe_any(&roles))
}

/// Every role of the listed file at `path`, for its removal.
#[cfg(not(ring_portable))]
fn all_roles(
    _dir: &Path,
    _name: &SegmentName,
    fd: BorrowedFd<'_>,
    path: &Path,
) -> Result<Option<AllRoles>, Error> {
    AllRoles::try_acquire(fd, Some(path))
}

/// Every role of the listed file, for its removal (the portable backend's gate).
#[cfg(ring_portable)]
fn all_roles(
    dir: &Path,
    name: &SegmentName,
    fd: BorrowedFd<'_>,
    _path: &Path,
) -> Result<Option<AllRoles>, Error> {
    AllRoles::try_acquire(&listed_roles(dir, name, fd)?)
}

/// The lock files of a listed file, as its `Segment` finds them.
#[cfg(ring_portable)]
fn listed_roles(dir: &Path, name: &SegmentName, fd: BorrowedFd<'_>) -> Result<lock::Roles, Error> {
    let kind = if dir == Path::new(SHM_DIR) {
        crate::segment::SegmentKind::Named(name.clone())
    } else {
        crate::segment::SegmentKind::File(dir.join(name.file_name()))
    };
    crate::segment::roles_of(&kind, fd)
}

/// Opens a segment file in `dir` by name (the named-segment checks, through a path so tests can
/// use a scratch directory).
fn open_in(dir: &Path, name: &SegmentName) -> Result<Segment, Error> {
    if dir == Path::new(SHM_DIR) {
        Segment::open_named(name, SizeCheck::AtLeast(1))
    } else {
        Segment::open_file(&dir.join(name.file_name()), SizeCheck::AtLeast(1))
    }
}

#[cfg(test)]
mod tests;
