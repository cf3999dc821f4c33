//! Shared-memory segments on Windows: a section object plus a read-write view of all of it.
//!
//! Three kinds, one type ([`Segment`]), as on Unix:
//! - **named** ([`Segment::create_named`], [`Segment::open_named`]): a pagefile-backed section
//!   `Local\shmring.<name>` in this session's namespace, created with a DACL that admits only the
//!   creating user; "already exists" is [`Error::AlreadyExists`], never a silent reuse;
//! - **anonymous** ([`Segment::create_memfd`]): an unnamed pagefile-backed section, for rings
//!   used within one process (Windows has no descriptor passing over sockets here);
//! - **file-backed** ([`Segment::create_file`], [`Segment::open_file`]): a file at a path
//!   (`file.rs`).
//!
//! A pagefile-backed section commits its whole size at creation (`SEC_COMMIT`), so exhaustion is
//! [`Error::NoSpace`] from `create_*`, never a fault at first touch; a file segment reserves its
//! clusters (`FileAllocationInfo`) first. A section never shrinks and a mapped file cannot be
//! truncated (`ERROR_USER_MAPPED_FILE`), so a mapping never loses pages under it: there is no
//! `SIGBUS` counterpart to guard against. A section has no name to remove: it vanishes with its
//! last handle (see `docs/OS.md`, Windows).

use core::ptr::NonNull;
use std::path::PathBuf;

use windows_sys::Win32::Foundation::{
    ERROR_ACCESS_DENIED, ERROR_COMMITMENT_LIMIT, ERROR_DISK_FULL, ERROR_FILE_NOT_FOUND,
    ERROR_INVALID_HANDLE, ERROR_NOT_ENOUGH_MEMORY, ERROR_OUTOFMEMORY, ERROR_PATH_NOT_FOUND,
    INVALID_HANDLE_VALUE,
};
use windows_sys::Win32::System::Memory::{
    CreateFileMappingW, MapViewOfFile, OpenFileMappingW, UnmapViewOfFile, VirtualQuery,
    FILE_MAP_ALL_ACCESS, MEMORY_BASIC_INFORMATION, MEMORY_MAPPED_VIEW_ADDRESS, PAGE_READWRITE,
    SEC_COMMIT,
};
use windows_sys::Win32::System::SystemInformation::{GetSystemInfo, SYSTEM_INFO};

mod file;

use super::{CreateOptions, SegmentKind, SizeCheck};

use crate::liveness::lock::{self, Liveness, Role, RoleLock, Roles};
use crate::segment::SegmentName;
use crate::wait::windows::{self as wait_objects, Registration, Waits};
use crate::windows::sys::{self, Handle, OwnerOnly};
use crate::Error;

/// An open, mapped shared-memory segment (Windows: a section and a view of it).
///
/// The view is shared and read-write and covers the whole section (its length rounded up to a
/// page). Dropping the segment unmaps it and closes its handles; a named section vanishes when
/// the last process closes it.
///
/// # Examples
///
/// ```
/// use ring_os::{Error, raw::{CreateOptions, Segment, SegmentName, SizeCheck}};
/// let name = SegmentName::new(&format!("doc-seg-{}", std::process::id()))?;
/// let seg = Segment::create_named(&name, 4096, CreateOptions::new())?;
/// // A second creation under the same name is an error, never a silent reuse.
/// assert!(matches!(Segment::create_named(&name, 4096, CreateOptions::new()), Err(Error::AlreadyExists { .. })));
/// let same = Segment::open_named(&name, SizeCheck::Exactly(4096))?;
/// assert_eq!(same.len(), 4096);
/// # Ok::<(), Error>(())
/// ```
#[derive(Debug)]
pub struct Segment {
    /// The range's entry in the wait registry; dropped (explicitly) before the view is unmapped.
    waits: Option<Registration>,
    /// The view's first byte.
    view: *mut core::ffi::c_void,
    /// Its length.
    len: usize,
    /// The section (keeps a named section alive).
    _section: Handle,
    /// The file of a file-backed segment.
    file: Option<std::fs::File>,
    /// What the segment is.
    kind: SegmentKind,
    /// The ring's role mutexes.
    roles: Roles,
    /// Remove the file when dropped (a file segment's creator, until formatted).
    unlink_on_drop: bool,
    /// The creator's role lock, held from creation for the segment's life.
    creator: Option<RoleLock>,
}

// SAFETY: the view is shared memory that every user accesses through atomics (ring-core's
// contract); handles are process-wide.
unsafe impl Send for Segment {}
// SAFETY: as above.
unsafe impl Sync for Segment {}

/// The page size, to which section lengths are rounded.
fn page_size() -> u64 {
    // SAFETY: an all-zero SYSTEM_INFO is a valid value (plain integers and pointers), and
    // GetSystemInfo fills it in.
    let mut info: SYSTEM_INFO = unsafe { core::mem::zeroed() };
    // SAFETY: `info` is a valid out pointer.
    unsafe { GetSystemInfo(&raw mut info) };
    u64::from(info.dwPageSize).max(4096)
}

/// The error for a failed create or open of `what`, from the last Win32 error (read before
/// anything else runs: even an allocation may overwrite it).
fn os_error(what: impl FnOnce() -> String, op: &'static str, len: u64) -> Error {
    let code = sys::last_code();
    let e = std::io::Error::from_raw_os_error(i32::try_from(code).unwrap_or(i32::MAX));
    let what = what();
    match code {
        ERROR_FILE_NOT_FOUND | ERROR_PATH_NOT_FOUND => Error::NotFound { what },
        // No section of that name (Wine answers a missing name so; Windows, a name that
        // another kind of object holds).
        ERROR_INVALID_HANDLE if op == "OpenFileMapping" => Error::NotFound { what },
        ERROR_ACCESS_DENIED => Error::PermissionDenied { what },
        // Another kind of object holds the name.
        ERROR_INVALID_HANDLE => Error::AlreadyExists { what },
        ERROR_COMMITMENT_LIMIT | ERROR_NOT_ENOUGH_MEMORY | ERROR_OUTOFMEMORY | ERROR_DISK_FULL => {
            Error::NoSpace {
                needed: len,
                available: 0,
            }
        }
        _ => Error::io(op, e),
    }
}

/// A unique key for an anonymous section's objects.
fn anonymous_key() -> String {
    static NEXT: core::sync::atomic::AtomicU64 = core::sync::atomic::AtomicU64::new(0);
    // Relaxed: a counter for uniqueness only.
    let n = NEXT.fetch_add(1, core::sync::atomic::Ordering::Relaxed);
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("shmring-anon#{}.{n}.{t}", std::process::id())
}

impl Segment {
    /// Creates the named segment `name` of `len` bytes (rounded up to a page) as a
    /// pagefile-backed section that only this user may open.
    ///
    /// # Errors
    ///
    /// [`Error::AlreadyExists`] when the name is taken (never reused), [`Error::NoSpace`] when
    /// the commit limit cannot cover it, [`Error::HugePages`] when asked for large pages,
    /// [`Error::BadLength`], [`Error::Io`].
    pub fn create_named(name: &SegmentName, len: u64, opts: CreateOptions) -> Result<Self, Error> {
        let key = name.file_name();
        Self::create_section(
            Some(&key),
            key.clone(),
            len,
            opts,
            SegmentKind::Named(name.clone()),
        )
    }

    /// Opens the named segment `name`, checking its size.
    ///
    /// # Errors
    ///
    /// [`Error::NotFound`], [`Error::PermissionDenied`] (another user's section),
    /// [`Error::SizeMismatch`], [`Error::Io`].
    pub fn open_named(name: &SegmentName, size: SizeCheck) -> Result<Self, Error> {
        let key = name.file_name();
        let wname = sys::object_name(&key, "");
        // SAFETY: `wname` is NUL-terminated and lives across the call.
        let raw = unsafe { OpenFileMappingW(FILE_MAP_ALL_ACCESS, 0, wname.as_ptr()) };
        let section = Handle::new(raw).ok_or_else(|| {
            os_error(
                || format!("shared-memory segment {name}"),
                "OpenFileMapping",
                0,
            )
        })?;
        let seg = Self::map(section, None, 0, key, SegmentKind::Named(name.clone()))?;
        size.check(seg.len as u64)?;
        Ok(seg)
    }

    /// Creates an anonymous segment of `len` bytes (rounded up to a page): an unnamed
    /// pagefile-backed section, for rings used within this process.
    ///
    /// # Errors
    ///
    /// As [`create_named`](Self::create_named), without `AlreadyExists`.
    pub fn create_memfd(len: u64, opts: CreateOptions) -> Result<Self, Error> {
        Self::create_section(None, anonymous_key(), len, opts, SegmentKind::Memfd)
    }

    /// Creates a pagefile-backed section (named when `name` is), maps it and takes the creator
    /// role.
    fn create_section(
        name: Option<&str>,
        key: String,
        len: u64,
        opts: CreateOptions,
        kind: SegmentKind,
    ) -> Result<Self, Error> {
        check_options(len, opts)?;
        let page = page_size();
        let len = len
            .checked_next_multiple_of(page)
            .ok_or(Error::BadLength { len })?;
        let what = || match &kind {
            SegmentKind::Named(n) => format!("shared-memory segment {n}"),
            _ => "an anonymous segment".to_owned(),
        };
        let sd = OwnerOnly::get().map_err(|e| Error::io("build the owner-only DACL", e))?;
        let attrs = sd.attributes();
        let wname = name.map(|n| sys::object_name(n, ""));
        #[allow(clippy::cast_possible_truncation, reason = "the halves of a u64")]
        let (high, low) = ((len >> 32) as u32, len as u32);
        // A fresh creation leaves the last error alone on some systems: clear it, so that
        // `existed` below reads this call's answer.
        sys::clear_error();
        // SAFETY: INVALID_HANDLE_VALUE asks for a pagefile-backed section; `attrs` and `wname`
        // (NUL-terminated) live across the call.
        let raw = unsafe {
            CreateFileMappingW(
                INVALID_HANDLE_VALUE,
                &raw const attrs,
                PAGE_READWRITE | SEC_COMMIT,
                high,
                low,
                wname.as_ref().map_or(core::ptr::null(), |w| w.as_ptr()),
            )
        };
        let section = Handle::new(raw).ok_or_else(|| os_error(what, "CreateFileMapping", len))?;
        if sys::existed() {
            // Someone else's section: close our handle, never reuse it.
            return Err(Error::AlreadyExists { what: what() });
        }
        let mut seg = Self::map(section, None, len, key, kind)?;
        seg.claim_creator()?;
        Ok(seg)
    }

    /// Takes [`Role::Creator`] for the segment's life.
    fn claim_creator(&mut self) -> Result<(), Error> {
        match RoleLock::try_acquire(&self.roles, Role::Creator)? {
            Some(held) => {
                self.creator = Some(held);
                Ok(())
            }
            // A creator of a former segment under this key is still running.
            None => Err(Error::AlreadyExists {
                what: format!("a live creator of {}", self.roles.key()),
            }),
        }
    }

    /// Maps all of `section` (`len` 0: the section's size) and opens its wait objects.
    fn map(
        section: Handle,
        file: Option<std::fs::File>,
        len: u64,
        key: String,
        kind: SegmentKind,
    ) -> Result<Self, Error> {
        let want = usize::try_from(len).map_err(|_| Error::BadLength { len })?;
        // SAFETY: `section` is an open section handle; a view of `want` bytes (0: all of it).
        let view = unsafe { MapViewOfFile(section.raw(), FILE_MAP_ALL_ACCESS, 0, 0, want) };
        if view.Value.is_null() {
            return Err(os_error(|| key, "MapViewOfFile", len));
        }
        let len = if want != 0 {
            want
        } else {
            // SAFETY: all-zero is a valid MEMORY_BASIC_INFORMATION; `view` is our mapping.
            let mut info: MEMORY_BASIC_INFORMATION = unsafe { core::mem::zeroed() };
            // SAFETY: `info` is a valid out buffer of the size passed.
            let got = unsafe {
                VirtualQuery(
                    view.Value,
                    &raw mut info,
                    core::mem::size_of::<MEMORY_BASIC_INFORMATION>(),
                )
            };
            if got == 0 {
                let e = sys::last_error();
                // SAFETY: our view, unmapped once.
                unsafe { UnmapViewOfFile(view) };
                return Err(Error::io("VirtualQuery", e));
            }
            info.RegionSize
        };
        let waits = match Waits::open(&key) {
            Ok(w) => w,
            Err(e) => {
                // SAFETY: our view, unmapped once.
                unsafe { UnmapViewOfFile(view) };
                return Err(Error::io("open the segment's wait objects", e));
            }
        };
        let registration = wait_objects::register(view.Value as usize, len, waits);
        Ok(Self {
            waits: Some(registration),
            view: view.Value,
            len,
            _section: section,
            file,
            kind,
            roles: Roles::new(key),
            unlink_on_drop: false,
            creator: None,
        })
    }

    /// The first byte of the view.
    #[must_use]
    pub fn as_ptr(&self) -> NonNull<u8> {
        NonNull::new(self.view.cast::<u8>()).unwrap_or(NonNull::dangling())
    }

    /// The mapped length in bytes.
    #[must_use]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the mapping is empty (never, for a segment that was created or opened).
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// What the segment is.
    #[must_use]
    pub fn kind(&self) -> &SegmentKind {
        &self.kind
    }

    /// The ring's role mutexes.
    #[must_use]
    pub fn roles(&self) -> &Roles {
        &self.roles
    }

    /// Re-checks a file segment's length against the mapping (a section cannot change size).
    ///
    /// # Errors
    ///
    /// [`Error::SizeMismatch`], [`Error::Io`].
    pub fn check_len(&self) -> Result<(), Error> {
        let Some(file) = &self.file else {
            return Ok(());
        };
        let actual = file
            .metadata()
            .map_err(|e| Error::io("GetFileInformation", e))?
            .len();
        let expected = self.len as u64;
        if actual == expected {
            Ok(())
        } else {
            Err(Error::SizeMismatch { expected, actual })
        }
    }

    /// Always false on Windows: a section never shrinks and a mapped file cannot be truncated.
    #[must_use]
    pub fn is_truncated(&self) -> bool {
        false
    }

    /// Always `Ok` on Windows (see [`is_truncated`](Self::is_truncated)).
    ///
    /// # Errors
    ///
    /// None on Windows.
    pub fn check_truncated(&self) -> Result<(), Error> {
        Ok(())
    }

    /// The file's path (file segments only: a section has no path).
    #[must_use]
    pub fn path(&self) -> Option<PathBuf> {
        match &self.kind {
            SegmentKind::File(path) => Some(path.clone()),
            SegmentKind::Named(_) | SegmentKind::Memfd => None,
        }
    }

    /// Takes `role`'s mutex for this ring.
    ///
    /// # Errors
    ///
    /// [`Error::Lock`].
    pub fn lock_role(&self, role: Role) -> Result<Option<RoleLock>, Error> {
        RoleLock::try_acquire(&self.roles, role)
    }

    /// Whether some process holds `role` of this ring.
    #[must_use]
    pub fn probe(&self, role: Role) -> Liveness {
        lock::probe(&self.roles, role)
    }

    /// Removes a file segment's file. A section has no name to remove (it vanishes with its
    /// last handle), so for named and anonymous segments this does nothing.
    ///
    /// # Errors
    ///
    /// [`Error::NotFound`], [`Error::Io`].
    pub fn unlink(&self) -> Result<(), Error> {
        match &self.kind {
            SegmentKind::File(path) => std::fs::remove_file(path).map_err(|e| {
                if e.kind() == std::io::ErrorKind::NotFound {
                    Error::NotFound {
                        what: path.display().to_string(),
                    }
                } else {
                    Error::io("DeleteFile", e)
                }
            }),
            SegmentKind::Named(_) | SegmentKind::Memfd => Ok(()),
        }
    }

    /// Whether dropping this segment removes its file (see [`unlink`](Self::unlink)).
    pub fn set_unlink_on_drop(&mut self, on: bool) {
        self.unlink_on_drop = on;
    }
}

/// Rejects what Windows sections cannot do.
fn check_options(len: u64, opts: CreateOptions) -> Result<(), Error> {
    if opts.huge_pages {
        return Err(Error::HugePages {
            reason: "large pages on Windows need SeLockMemoryPrivilege and SEC_LARGE_PAGES, \
                     which ring-os does not use; create the segment without huge pages"
                .into(),
        });
    }
    if len == 0 {
        return Err(Error::BadLength { len });
    }
    Ok(())
}

impl Drop for Segment {
    fn drop(&mut self) {
        // Out of the wait registry before the view goes.
        drop(self.waits.take());
        // SAFETY: the view came from MapViewOfFile and is unmapped once; ring-core's views of it
        // were dropped before (the owning `Mapping` declares them first).
        unsafe { UnmapViewOfFile(MEMORY_MAPPED_VIEW_ADDRESS { Value: self.view }) };
        if self.unlink_on_drop {
            let _ = self.unlink();
        }
    }
}

#[cfg(test)]
mod tests;
