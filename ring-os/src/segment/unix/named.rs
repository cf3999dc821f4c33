//! Named segments: POSIX shared-memory objects (`/dev/shm/shmring.<name>` on Linux).

use std::os::fd::{AsFd as _, OwnedFd};

use rustix::fs::Mode;
use rustix::io::Errno;
use rustix::shm;

use super::check::{self, SizeCheck};
use super::{CreateOptions, Segment, SegmentKind};
use crate::segment::SegmentName;
use crate::Error;

/// `O_NOFOLLOW` as an `shm_open` flag: rustix's Linux `shm_open` is an `open` under `/dev/shm`,
/// so the flag keeps a planted symlink from redirecting us.
#[cfg(target_os = "linux")]
fn nofollow() -> shm::OFlags {
    shm::OFlags::from_bits_retain(rustix::fs::OFlags::NOFOLLOW.bits())
}

/// Elsewhere `shm_open` takes no `O_NOFOLLOW` (and there is no directory to plant a link in).
#[cfg(not(target_os = "linux"))]
fn nofollow() -> shm::OFlags {
    shm::OFlags::empty()
}

/// macOS keeps a shared-memory object's size in whole pages (and `fstat` says so): size it that
/// way from the start, so that openers and `check_len` see the mapped length.
#[cfg(target_os = "macos")]
fn round_len(len: u64) -> u64 {
    let page = rustix::param::page_size() as u64;
    len.checked_next_multiple_of(page).unwrap_or(len)
}

/// Elsewhere the object has the size it was given.
#[cfg(not(target_os = "macos"))]
fn round_len(len: u64) -> u64 {
    len
}

/// Maps an `shm_open`/`shm_unlink` error to ours.
fn open_error(name: &SegmentName, e: Errno, op: &'static str) -> Error {
    super::open_error(format!("shared-memory segment {name}"), e, op)
}

impl Segment {
    /// Creates a named segment of `len` bytes: mode 0600, `O_CREAT|O_EXCL|O_NOFOLLOW`, every page
    /// reserved. The name stays in `/dev/shm` until [`unlink`](Self::unlink).
    ///
    /// # Errors
    ///
    /// [`Error::AlreadyExists`], [`Error::NoSpace`], [`Error::HugePages`] (tmpfs has no hugetlb
    /// pages), [`Error::BadLength`], [`Error::Io`].
    pub fn create_named(name: &SegmentName, len: u64, opts: CreateOptions) -> Result<Self, Error> {
        if opts.huge_pages {
            return Err(Error::HugePages {
                reason: "named segments live on /dev/shm (tmpfs), which has no hugetlb pages; use \
                         a memfd segment with huge pages, or a file segment on a hugetlbfs mount"
                    .into(),
            });
        }
        if len == 0 {
            return Err(Error::BadLength { len });
        }
        let flags = shm::OFlags::CREATE | shm::OFlags::EXCL | shm::OFlags::RDWR | nofollow();
        let len = round_len(len);
        super::create_claimed(
            &SegmentKind::Named(name.clone()),
            || {
                let fd = shm::open(name.shm_name(), flags, Mode::RUSR | Mode::WUSR)
                    .map_err(|e| open_error(name, e, "shm_open"))?;
                Ok((fd, path(name)))
            },
            |fd| Self::finish_create(fd, name, len, opts),
        )
    }

    /// Reserves and maps a freshly created named segment.
    fn finish_create(
        fd: OwnedFd,
        name: &SegmentName,
        len: u64,
        opts: CreateOptions,
    ) -> Result<Self, Error> {
        check::reserve(fd.as_fd(), len, false)?;
        Self::map(fd, len, SegmentKind::Named(name.clone()), opts)
    }

    /// Opens and maps an existing named segment after checking it: a regular file of this user,
    /// not writable by others, whose size passes `size`.
    ///
    /// # Errors
    ///
    /// [`Error::NotFound`], [`Error::PermissionDenied`], [`Error::Insecure`],
    /// [`Error::NotRegularFile`], [`Error::SizeMismatch`], [`Error::Io`].
    pub fn open_named(name: &SegmentName, size: SizeCheck) -> Result<Self, Error> {
        let fd = shm::open(
            name.shm_name(),
            shm::OFlags::RDWR | nofollow(),
            Mode::empty(),
        )
        .map_err(|e| open_error(name, e, "shm_open"))?;
        let len = check::inspect(fd.as_fd(), &name.to_string(), size, true)?;
        Self::map(
            fd,
            len,
            SegmentKind::Named(name.clone()),
            CreateOptions::new(),
        )
    }
}

/// The file behind a named segment, where POSIX shared memory is a directory (Linux).
#[cfg(target_os = "linux")]
pub(super) fn path(name: &SegmentName) -> Option<std::path::PathBuf> {
    Some(std::path::Path::new(crate::segment::stale::SHM_DIR).join(name.file_name()))
}

/// Elsewhere shared-memory objects have no path to check.
#[cfg(not(target_os = "linux"))]
pub(super) fn path(_name: &SegmentName) -> Option<std::path::PathBuf> {
    None
}

/// Removes a named segment's name.
///
/// # Errors
///
/// [`Error::NotFound`], [`Error::PermissionDenied`], [`Error::Io`].
pub fn unlink(name: &SegmentName) -> Result<(), Error> {
    shm::unlink(name.shm_name()).map_err(|e| open_error(name, e, "shm_unlink"))
}
