//! Kernel-vouched liveness without OFD locks: `flock(2)` on one lock file per role.
//!
//! macOS and the BSDs have no open-file-description byte-range locks, but `flock` locks have the
//! same lifetime: they belong to an open file description, a `fork`ed child shares them, and the
//! kernel drops them when the last descriptor of the description closes, which for a killed
//! process happens at exit. `flock` has no byte ranges, so each role gets a file of its own in a
//! per-user lock directory ([`lock_dir`]), named after the segment's key ([`Roles`]):
//! `<key>.creator`, `<key>.producer`, `<key>.c<i>`, plus `<key>.gate`.
//!
//! - **A holder** takes the gate shared, then its role's file exclusive (each on a description of
//!   its own, `LOCK_NB`), and keeps both until it drops.
//! - **A probe** takes the role's file shared for a moment: refused means a holder exists
//!   ([`Liveness::Alive`]); granted, or no file at all, means none does ([`Liveness::Dead`]);
//!   any other error is alive. [`probe_any`] takes the gate exclusive for a moment: refused while
//!   anyone holds a role.
//! - **A cleaner** ([`AllRoles`]) holds the gate exclusive: nobody can take a role meanwhile.
//! - **Lock files are removed only under the gate held exclusive** (by a cleaner, or by the last
//!   holder of the segment on its way out), when nobody holds a role. Whoever locks a file checks
//!   afterwards that its path still names the file it locked, and starts again if not, so a
//!   lock on a removed file is never mistaken for the role's lock.
//!
//! On Linux a program built without `portable` holds its roles through OFD locks in the segment
//! file instead (`ofd.rs`), so there every probe, role lock and cleaner lock of this backend also
//! asks those (`cross.rs`): a role is dead only when both kinds are free.
//!
//! **Momentary locks are unlocked before they close.** A lock is released when the last
//! reference to its open file description closes, and a child `fork`ed without `exec` (Python's
//! `multiprocessing` workers) holds a reference for its whole life. A lock that is only taken for
//! a moment (a probe's, a refused attempt's, a cleaner's gate, the last holder's tidy-up) is
//! therefore released with `LOCK_UN` before its descriptor closes (`Flocked`), so such a
//! child holds nothing. So is a [`RoleLock`] taken only for a moment (a reclaim's, a registration
//! or take-over given up: `RoleLock::release`). A role lock a participant holds is released by
//! the close alone, by design: a forked heir keeps the role alive while it lives (`docs/OS.md`).
//!
//! A probe's momentary shared lock can refuse a holder's exclusive request, and a cleaner's
//! momentary gate lock a holder's shared one: acquisitions retry for about 2 ms before they report
//! the role held.
//!
//! **Limits** (see `docs/OS.md`, the portable backend): every participant must use the same lock
//! directory (the default is fixed per user and host; `SHMRING_LOCK_DIR` overrides it for all of
//! them or none); a process that never takes a role (a plain mapper) is invisible, as on Linux;
//! a peer of the same user can remove lock files and make live roles look dead, which the
//! ring's fencing (generations, epochs) keeps from breaking a live pin.
//!
//! # References
//! - `flock(2)` (FreeBSD, macOS, Linux); the lock-file protocol is the one `flock(1)` users
//!   follow, with the path re-check after locking that makes removing lock files safe.

use std::os::fd::{AsFd as _, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

use rustix::fs::{FlockOperation, Mode, OFlags};
use rustix::io::Errno;

pub(crate) use crate::liveness::ident::{identity, path_identity};
use crate::segment::SegmentName;
use crate::Error;

pub use crate::liveness::role::{Liveness, Role};

/// Role locks work here: a free role is reported dead, so reclaim and take-over run.
pub const SUPPORTED: bool = true;

/// The environment variable that overrides the lock directory (every participant must agree).
pub const LOCK_DIR_ENV: &str = "SHMRING_LOCK_DIR";

/// How often a lock file is opened again when its path kept naming another file.
const REOPEN_ATTEMPTS: usize = 8;

/// The back-off of an acquisition that met a momentary lock (a probe's or a cleaner's): 5 tries,
/// 100 µs doubling, about 1.5 ms in all.
const CONTENDED_TRIES: u32 = 5;

/// The lock files of one segment: `<lock dir>/<key>.<role>`.
#[derive(Debug, Clone)]
pub struct Roles {
    /// `<lock dir>/<key>`; a role's file is this plus `.<role>`.
    base: PathBuf,
    /// The segment file (a duplicate of the descriptor they were made from), whose OFD locks a
    /// program built without `portable` holds: probed beside the lock files (see `cross.rs`).
    #[cfg(all(ring_cross, ring_portable))]
    file: Option<std::sync::Arc<OwnedFd>>,
}

/// What [`RoleFile::role_file`](crate::raw::RoleFile::role_file) hands out with this backend.
pub type RoleFileRef<'a> = &'a Roles;

impl Roles {
    /// The lock files of the named segment `name`, keyed by its name (for macOS, whose
    /// shared-memory objects have no inode; a name removed and made again while a participant of
    /// the old segment lives shares that participant's locks).
    ///
    /// # Errors
    ///
    /// [`Error::Lock`] when the lock directory cannot be made or is not this user's alone.
    pub fn named(name: &SegmentName) -> Result<Self, Error> {
        Ok(Self::in_dir(
            lock_dir().map_err(dir_error)?,
            &format!("n.{}", name.as_str()),
        ))
    }

    /// The lock files of the segment file (or memfd) open as `file`, keyed by its device and inode.
    ///
    /// # Errors
    ///
    /// [`Error::Lock`] when the file cannot be `fstat`ed, has no inode number, or the lock
    /// directory is unusable.
    pub fn of_file(file: BorrowedFd<'_>) -> Result<Self, Error> {
        Self::of_file_in(file, lock_dir)
    }

    /// [`of_file`](Self::of_file) without making the lock directory: an [`Error::Lock`] of kind
    /// `NotFound` when it does not exist (the other backend's probes, `cross.rs`).
    #[cfg_attr(
        ring_portable,
        allow(dead_code, reason = "only the default build probes the lock files")
    )]
    pub(crate) fn of_existing_file(file: BorrowedFd<'_>) -> Result<Self, Error> {
        Self::of_file_in(file, existing_lock_dir)
    }

    fn of_file_in(
        file: BorrowedFd<'_>,
        dir: fn() -> std::io::Result<&'static Path>,
    ) -> Result<Self, Error> {
        let (dev, ino) = identity(file).map_err(dir_error)?;
        if ino == 0 {
            return Err(dir_error(std::io::Error::other(
                "the segment has no inode number to key its lock files by",
            )));
        }
        #[cfg_attr(
            not(all(ring_cross, ring_portable)),
            allow(unused_mut, reason = "only Linux keeps the segment file")
        )]
        let mut roles = Self::in_dir(dir().map_err(dir_error)?, &format!("i.{dev}.{ino}"));
        #[cfg(all(ring_cross, ring_portable))]
        {
            let dup = file.try_clone_to_owned().map_err(dir_error)?;
            roles.file = Some(std::sync::Arc::new(dup));
        }
        Ok(roles)
    }

    /// The lock files `<dir>/<key>.*` (for tests with a scratch directory).
    #[must_use]
    pub fn in_dir(dir: &Path, key: &str) -> Self {
        Self {
            base: dir.join(key),
            #[cfg(all(ring_cross, ring_portable))]
            file: None,
        }
    }

    /// The segment file these lock files belong to, when they were made from it
    /// ([`of_file`](Self::of_file)).
    #[cfg(all(ring_cross, ring_portable))]
    pub(crate) fn segment_file(&self) -> Option<&OwnedFd> {
        self.file.as_deref()
    }

    /// The file of `what` (`creator`, `producer`, `c<i>`, `gate`).
    fn file(&self, what: &str) -> PathBuf {
        let mut name = self.base.clone().into_os_string();
        name.push(".");
        name.push(what);
        PathBuf::from(name)
    }

    /// The file of `role`.
    fn role_file(&self, role: Role) -> PathBuf {
        match role {
            Role::Creator => self.file("creator"),
            Role::Producer => self.file("producer"),
            Role::Consumer(i) => self.file(&format!("c{i}")),
        }
    }

    /// Removes every lock file of this segment. Only for a caller that holds the gate
    /// exclusive (nobody holds a role, and nobody can take one meanwhile); the gate goes last.
    ///
    /// Only this segment's files: `<key>.` followed by a role's suffix, which has no `.` — names
    /// may contain dots, so a mere prefix match would take `n.cam.left.producer` (segment
    /// `cam.left`) for one of segment `cam`'s.
    fn remove_files(&self) {
        let (Some(dir), Some(key)) = (self.base.parent(), self.base.file_name()) else {
            return;
        };
        let mut prefix = key.to_os_string();
        prefix.push(".");
        if let Ok(entries) = std::fs::read_dir(dir) {
            for entry in entries.flatten() {
                let name = entry.file_name();
                let suffix = name
                    .as_encoded_bytes()
                    .strip_prefix(prefix.as_encoded_bytes());
                if suffix.is_some_and(is_role_suffix) {
                    let _ = std::fs::remove_file(entry.path());
                }
            }
        }
        let _ = std::fs::remove_file(self.file("gate"));
    }
}

/// Whether `suffix` names a role's lock file: `creator`, `producer` or `c<digits>`.
fn is_role_suffix(suffix: &[u8]) -> bool {
    match suffix {
        b"creator" | b"producer" => true,
        [b'c', digits @ ..] => !digits.is_empty() && digits.iter().all(u8::is_ascii_digit),
        _ => false,
    }
}

/// A `flock` on a description of our own. Dropping it closes the description; unless it is
/// `kept` (a held role: `RoleLock::kept`) it is unlocked (`LOCK_UN`) first, so a copy of the
/// description that a child forked meanwhile inherited holds nothing (the lock was momentary).
#[derive(Debug)]
struct Flocked {
    fd: OwnedFd,
    /// Released by the close alone (a held [`RoleLock`]: a forked heir keeps it).
    kept: bool,
}

impl Flocked {
    /// `op` (non-blocking) on `fd`: `Ok(None)` when refused.
    fn take(fd: OwnedFd, op: FlockOperation) -> rustix::io::Result<Option<Self>> {
        match rustix::fs::flock(&fd, op) {
            Ok(()) => Ok(Some(Self { fd, kept: false })),
            Err(Errno::WOULDBLOCK) => Ok(None),
            Err(e) => Err(e),
        }
    }
}

impl std::os::fd::AsFd for Flocked {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

impl Drop for Flocked {
    fn drop(&mut self) {
        if !self.kept {
            #[cfg(test)]
            crate::settle::heirs::at_release();
            let _ = rustix::fs::flock(&self.fd, FlockOperation::Unlock);
        }
    }
}

/// A held role: the segment's gate shared and the role's file exclusive, each on a description
/// of its own. Dropping it releases both by closing them (so does the kernel when the process
/// dies; a child forked without `exec` shares them and keeps the role alive until it exits); the
/// last holder of a segment removes its lock files.
///
// The example only where this file is `lock` (on Linux without `portable` it is the other
// kind, whose items the public paths do not name).
#[cfg_attr(
    ring_portable,
    doc = r#"# Examples

```
use ring_os::raw::lock::{probe, Liveness, Role, RoleLock, Roles};
let dir = std::env::temp_dir().join(format!("shmring-lock-doc.{}", std::process::id()));
std::fs::create_dir_all(&dir).unwrap();
let roles = Roles::in_dir(&dir, "ring");
let held = RoleLock::try_acquire(&roles, Role::Consumer(3))?.expect("free");
assert_eq!(probe(&roles, Role::Consumer(3)), Liveness::Alive); // seen by this process too
assert!(RoleLock::try_acquire(&roles, Role::Consumer(3))?.is_none()); // refused to a second
drop(held);
assert_eq!(probe(&roles, Role::Consumer(3)), Liveness::Dead);
# std::fs::remove_dir_all(&dir).unwrap();
# Ok::<(), ring_os::Error>(())
```"#
)]
#[derive(Debug)]
pub struct RoleLock {
    /// The role's file, locked exclusive; declared first so it is released before the gate.
    file: Option<Flocked>,
    /// The gate, locked shared.
    gate: Option<Flocked>,
    /// The role it vouches for.
    role: Role,
    /// Where the segment's lock files are (to remove them when this was the last holder).
    roles: Roles,
}

impl RoleLock {
    /// Takes `role`'s lock; `Ok(None)` when another open file description (of this or another
    /// process) holds it, a cleaner holds the segment, or (Linux) a program built without
    /// `portable` holds the role through its OFD lock in the segment file (see `cross.rs`).
    ///
    /// # Errors
    ///
    /// [`Error::Lock`] when a lock file cannot be made or locked.
    pub fn try_acquire(roles: &Roles, role: Role) -> Result<Option<Self>, Error> {
        let err = |source| Error::Lock {
            role: role.to_string(),
            source,
        };
        let Some(gate) =
            contended(|| lock_file(&roles.file("gate"), FlockOperation::NonBlockingLockShared))
                .map_err(err)?
        else {
            return Ok(None);
        };
        let Some(file) = contended(|| {
            lock_file(
                &roles.role_file(role),
                FlockOperation::NonBlockingLockExclusive,
            )
        })
        .map_err(err)?
        else {
            return Ok(None);
        };
        // Momentary until it is ours for good, so that a refusal below is the drop of a lock
        // taken for a moment: unlocked before closing, the files tidied up (`Drop`).
        let lock = Self {
            file: Some(file),
            gate: Some(gate),
            role,
            roles: roles.clone(),
        };
        // Ours is taken first, the other kind probed after (see `cross.rs`).
        #[cfg(all(ring_cross, ring_portable))]
        if crate::liveness::cross::probe(roles, role) == Liveness::Alive {
            return Ok(None);
        }
        Ok(Some(lock.kept()))
    }

    /// The lock, kept: its drop leaves the role to a child forked meanwhile (see the module
    /// docs). [`release`](Self::release) undoes it.
    fn kept(mut self) -> Self {
        for lock in [&mut self.file, &mut self.gate].into_iter().flatten() {
            lock.kept = true;
        }
        self
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
        for lock in [&mut self.file, &mut self.gate].into_iter().flatten() {
            lock.kept = false;
        }
    }
}

impl Drop for RoleLock {
    fn drop(&mut self) {
        drop(self.file.take());
        drop(self.gate.take());
        tidy_up(&self.roles);
    }
}

/// The last holder out tidies up: the gate exclusive is granted only when nobody holds a role of
/// this segment (the lock files are this backend's alone: no other kind asked); whether it was
/// granted.
fn tidy_up(roles: &Roles) -> bool {
    AllRoles::gate(roles).is_ok_and(|all| all.is_some())
}

/// Every role of one segment at once (its gate, exclusive): what a cleaner holds while it removes
/// a segment, so nobody can become a participant meanwhile. On Linux it also holds the OFD lock
/// on the whole segment file (see `cross.rs`), so neither can a program built without `portable`.
/// Dropping it removes the segment's lock files (nobody holds any) and unlocks the gate (it is
/// never left to a forked child: see the module docs).
#[derive(Debug)]
pub struct AllRoles {
    /// The gate, locked exclusive (momentary).
    _gate: Flocked,
    /// Whose lock files these are.
    roles: Roles,
    /// The other kind's every-role lock (`None` for a tidy-up, which needs only the gate).
    #[cfg(all(ring_cross, ring_portable))]
    _other: Option<crate::liveness::cross::Hold>,
}

impl AllRoles {
    /// Takes the gate exclusive; `Ok(None)` when any role is held (through either backend).
    ///
    /// # Errors
    ///
    /// [`Error::Lock`] when the gate cannot be made or locked, or (Linux) the segment file cannot
    /// be re-opened for its OFD lock.
    pub fn try_acquire(roles: &Roles) -> Result<Option<Self>, Error> {
        #[cfg_attr(
            not(all(ring_cross, ring_portable)),
            allow(unused_mut, reason = "only Linux has another kind to hold")
        )]
        let Some(mut all) = Self::gate(roles)?
        else {
            return Ok(None);
        };
        // Refused or failed: `all` drops, releasing the gate (its tidy-up removes lock files
        // nobody holds: the gate was ours).
        #[cfg(all(ring_cross, ring_portable))]
        match crate::liveness::cross::hold_all(roles)? {
            Some(other) => all._other = Some(other),
            None => return Ok(None),
        }
        Ok(Some(all))
    }

    /// The gate exclusive alone: what removing this backend's own lock files needs.
    fn gate(roles: &Roles) -> Result<Option<Self>, Error> {
        let gate = lock_file(
            &roles.file("gate"),
            FlockOperation::NonBlockingLockExclusive,
        )
        .map_err(|source| Error::Lock {
            role: "every role".to_owned(),
            source,
        })?;
        Ok(gate.map(|gate| Self {
            _gate: gate,
            roles: roles.clone(),
            #[cfg(all(ring_cross, ring_portable))]
            _other: None,
        }))
    }
}

impl Drop for AllRoles {
    fn drop(&mut self) {
        self.roles.remove_files();
    }
}

/// Whether some process holds `role`. [`Liveness::Dead`] only when the role's file is missing
/// or its shared lock is granted (on the file its path names), and (Linux) no program built
/// without `portable` holds the role through its OFD lock (see `cross.rs`); anything else is
/// alive.
#[must_use]
pub fn probe(roles: &Roles, role: Role) -> Liveness {
    let own = probe_file(
        &roles.role_file(role),
        FlockOperation::NonBlockingLockShared,
    );
    #[cfg(all(ring_cross, ring_portable))]
    let own = crate::liveness::cross::both(own, || crate::liveness::cross::probe(roles, role));
    own
}

/// [`Liveness::Dead`] only when the file `path` names is missing or `op` (non-blocking) on it is
/// granted and it is still named so; the momentary lock is released at once. Never makes the file.
fn probe_file(path: &Path, op: FlockOperation) -> Liveness {
    for _ in 0..REOPEN_ATTEMPTS {
        let fd = match open(path, false) {
            Ok(fd) => fd,
            // Never made since the last tidy-up: nobody holds it (holders make it first).
            Err(Errno::NOENT) => return Liveness::Dead,
            Err(_) => return Liveness::Alive,
        };
        // Momentary: unlocked again when it drops.
        let Ok(Some(taken)) = Flocked::take(fd, op) else {
            return Liveness::Alive;
        };
        match still_named(path, taken.as_fd()) {
            Ok(true) => return Liveness::Dead,
            // Removed or replaced after we opened it: look again.
            Ok(false) => {}
            Err(_) => return Liveness::Alive,
        }
    }
    Liveness::Alive
}

/// Removes the lock files in `dir` of every segment nobody holds a role of (their last holder
/// was killed before it could tidy up); returns how many segments' files were removed. Each is
/// removed under its gate held exclusive, as a cleaner does, so a held role is never touched.
///
/// # Errors
///
/// The error reading `dir`.
pub fn sweep_in(dir: &Path) -> std::io::Result<usize> {
    let mut keys = std::collections::BTreeSet::new();
    for entry in std::fs::read_dir(dir)? {
        let name = entry?.file_name();
        let bytes = name.as_encoded_bytes();
        if let Some(dot) = bytes.iter().rposition(|&b| b == b'.') {
            let (key, suffix) = (&bytes[..dot], &bytes[dot + 1..]);
            if !key.is_empty() && (suffix == b"gate" || is_role_suffix(suffix)) {
                keys.insert(String::from_utf8_lossy(key).into_owned());
            }
        }
    }
    let mut swept = 0;
    for key in keys {
        if tidy_up(&Roles::in_dir(dir, &key)) {
            swept += 1;
        }
    }
    Ok(swept)
}

/// [`sweep_in`] the lock directory ([`lock_dir`]).
///
/// # Errors
///
/// The error making or reading the lock directory.
pub fn sweep() -> std::io::Result<usize> {
    sweep_in(lock_dir()?)
}

/// Whether any role of the segment is held: its gate exists and cannot be taken exclusive
/// (holders make the gate first, and it is removed only with nobody holding a role), or (Linux)
/// a program built without `portable` holds an OFD lock in the segment file (see `cross.rs`).
/// A probe changes nothing: it makes no file and tidies nothing up.
#[must_use]
pub fn probe_any(roles: &Roles) -> Liveness {
    let own = probe_file(
        &roles.file("gate"),
        FlockOperation::NonBlockingLockExclusive,
    );
    #[cfg(all(ring_cross, ring_portable))]
    let own = crate::liveness::cross::both(own, || crate::liveness::cross::probe_any(roles));
    own
}

/// The per-user lock directory, made (mode 0700) on first use and checked every time it is
/// first looked up in a process: a real directory (no symlink), this user's, closed to others.
/// `$SHMRING_LOCK_DIR`, else `/dev/shm/shmring-locks.<uid>` on Linux (beside the segments, so
/// containers that share `/dev/shm` share it) and `/var/tmp/shmring-locks.<uid>` elsewhere: not
/// `/tmp`, whose daily clean-up on macOS (`periodic`, files unread for 3 days) would remove the
/// lock files of a long-lived ring and make its live participants look dead.
///
/// # Errors
///
/// The `mkdir`/`lstat` error, or one saying why the directory is refused.
pub fn lock_dir() -> std::io::Result<&'static Path> {
    find_lock_dir(true)
}

/// [`lock_dir`] without making it: `NotFound` when it does not exist yet. For the other
/// backend's probes (`cross.rs`), which must not leave a directory behind: where it does not
/// exist, no participant of this user has made a lock file.
pub(crate) fn existing_lock_dir() -> std::io::Result<&'static Path> {
    find_lock_dir(false)
}

static DIR: OnceLock<PathBuf> = OnceLock::new();

fn find_lock_dir(make: bool) -> std::io::Result<&'static Path> {
    if let Some(dir) = DIR.get() {
        return Ok(dir);
    }
    let uid = rustix::process::geteuid().as_raw();
    let dir = match std::env::var_os(LOCK_DIR_ENV) {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ if cfg!(target_os = "linux") => PathBuf::from(format!("/dev/shm/shmring-locks.{uid}")),
        _ => PathBuf::from(format!("/var/tmp/shmring-locks.{uid}")),
    };
    if make {
        match rustix::fs::mkdir(&dir, Mode::RWXU) {
            Ok(()) | Err(Errno::EXIST) => {}
            Err(e) => return Err(e.into()),
        }
    }
    let st = rustix::fs::lstat(&dir)?;
    if rustix::fs::FileType::from_raw_mode(st.st_mode) != rustix::fs::FileType::Directory
        || st.st_uid != uid
        || crate::segment::mode_bits(&st) & 0o077 != 0
    {
        // PermissionDenied: no participant of this user can use it (see `cross.rs`).
        return Err(std::io::Error::new(
            std::io::ErrorKind::PermissionDenied,
            format!(
                "lock directory {} must be a directory of uid {uid} with mode 0700",
                dir.display()
            ),
        ));
    }
    Ok(DIR.get_or_init(|| dir))
}

/// An [`Error::Lock`] about the lock directory or a segment's key.
fn dir_error(source: std::io::Error) -> Error {
    Error::Lock {
        role: "lock directory".to_owned(),
        source,
    }
}

/// Opens a lock file read-write (created, mode 0600, when `create`), without following links.
fn open(path: &Path, create: bool) -> rustix::io::Result<OwnedFd> {
    let mut flags = OFlags::RDWR | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    if create {
        flags |= OFlags::CREATE;
    }
    rustix::fs::open(path, flags, Mode::RUSR | Mode::WUSR)
}

/// Whether `path` still names the file open as `fd`.
fn still_named(path: &Path, fd: BorrowedFd<'_>) -> std::io::Result<bool> {
    match path_identity(path) {
        Ok(now) => Ok(now == identity(fd)?),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(e),
    }
}

/// Locks the file `path` names (making it if needed) with `op` (non-blocking): `Ok(None)` when
/// refused. Re-opens while the path stops naming the locked file (a tidy-up removed it). The lock
/// is momentary until [`kept`](Flocked::kept).
fn lock_file(path: &Path, op: FlockOperation) -> std::io::Result<Option<Flocked>> {
    for _ in 0..REOPEN_ATTEMPTS {
        let Some(taken) = Flocked::take(open(path, true)?, op)? else {
            return Ok(None);
        };
        if still_named(path, taken.as_fd())? {
            return Ok(Some(taken));
        }
    }
    Err(std::io::Error::other(format!(
        "lock file {} kept being replaced",
        path.display()
    )))
}

/// Runs `attempt` again, with a short back-off, while it is refused: a refusal may be a probe's
/// or a cleaner's momentary lock rather than a holder's.
fn contended(
    mut attempt: impl FnMut() -> std::io::Result<Option<Flocked>>,
) -> std::io::Result<Option<Flocked>> {
    let mut nap = Duration::from_micros(100);
    for _ in 1..CONTENDED_TRIES {
        if let Some(fd) = attempt()? {
            return Ok(Some(fd));
        }
        std::thread::sleep(nap);
        nap *= 2;
    }
    attempt()
}

#[cfg(test)]
#[path = "flock/tests.rs"]
mod tests;
