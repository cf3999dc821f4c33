//! File-backed segments: a file at a path (macOS, containers sharing a directory, hugetlbfs).

use std::os::fd::{AsFd as _, OwnedFd};
use std::path::Path;

use rustix::fs::{Mode, OFlags};
use rustix::io::Errno;

use super::check::{self, SizeCheck};
use super::{CreateOptions, Segment, SegmentKind};
use crate::Error;

/// `HUGETLBFS_MAGIC` from `linux/magic.h`: the `f_type` of a hugetlbfs mount.
#[cfg(target_os = "linux")]
const HUGETLBFS_MAGIC: u64 = 0x9584_58f6;

/// Maps an `open`/`unlink` error to ours.
fn open_error(path: &Path, e: Errno, op: &'static str) -> Error {
    super::open_error(format!("segment file {}", path.display()), e, op)
}

/// Checks that `fd` is on hugetlbfs and returns its huge page size.
#[cfg(target_os = "linux")]
fn huge_page_size(fd: std::os::fd::BorrowedFd<'_>, path: &Path) -> Result<u64, Error> {
    let fs = rustix::fs::fstatfs(fd).map_err(|e| Error::io("fstatfs", e))?;
    // `f_type`'s integer type differs between targets; widen it without sign games.
    #[allow(
        clippy::useless_conversion,
        clippy::cast_sign_loss,
        reason = "width varies by target"
    )]
    let magic = fs.f_type as u64;
    if magic != HUGETLBFS_MAGIC {
        return Err(Error::HugePages {
            reason: format!(
                "{} is not on a hugetlbfs mount; mount one (`mount -t hugetlbfs none /dev/hugepages`) \
                 and put the file there",
                path.display()
            ),
        });
    }
    #[allow(
        clippy::useless_conversion,
        clippy::cast_sign_loss,
        reason = "width varies by target"
    )]
    let page = fs.f_bsize as u64;
    Ok(page.max(1))
}

/// Huge pages need hugetlbfs, which only Linux has.
#[cfg(not(target_os = "linux"))]
fn huge_page_size(_fd: std::os::fd::BorrowedFd<'_>, _path: &Path) -> Result<u64, Error> {
    Err(Error::HugePages {
        reason: "huge-page file segments need Linux hugetlbfs".into(),
    })
}

impl Segment {
    /// Creates a segment file at `path`: mode 0600, `O_CREAT|O_EXCL|O_NOFOLLOW`, every page
    /// reserved. With huge pages the path must be on hugetlbfs and the length is rounded up to a
    /// whole number of huge pages.
    ///
    /// # Errors
    ///
    /// [`Error::AlreadyExists`], [`Error::NoSpace`], [`Error::HugePages`], [`Error::BadLength`],
    /// [`Error::Io`].
    pub fn create_file(path: &Path, len: u64, opts: CreateOptions) -> Result<Self, Error> {
        if len == 0 {
            return Err(Error::BadLength { len });
        }
        let flags =
            OFlags::CREATE | OFlags::EXCL | OFlags::RDWR | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        super::create_claimed(
            &SegmentKind::File(path.to_owned()),
            || {
                let fd = rustix::fs::open(path, flags, Mode::RUSR | Mode::WUSR)
                    .map_err(|e| open_error(path, e, "open"))?;
                Ok((fd, Some(path.to_owned())))
            },
            |fd| Self::finish_create_file(fd, path, len, opts),
        )
    }

    /// Reserves and maps a freshly created segment file.
    fn finish_create_file(
        fd: OwnedFd,
        path: &Path,
        len: u64,
        opts: CreateOptions,
    ) -> Result<Self, Error> {
        let len = if opts.huge_pages {
            let page = huge_page_size(fd.as_fd(), path)?;
            len.checked_next_multiple_of(page)
                .ok_or(Error::BadLength { len })?
        } else {
            len
        };
        check::reserve(fd.as_fd(), len, opts.huge_pages)?;
        Self::map(fd, len, SegmentKind::File(path.to_owned()), opts)
    }

    /// Opens and maps an existing segment file after checking it: a regular file of this user
    /// (no symlink), not writable by others, whose size passes `size`.
    ///
    /// # Errors
    ///
    /// [`Error::NotFound`], [`Error::PermissionDenied`], [`Error::Insecure`],
    /// [`Error::NotRegularFile`], [`Error::SizeMismatch`], [`Error::Io`].
    pub fn open_file(path: &Path, size: SizeCheck) -> Result<Self, Error> {
        let flags = OFlags::RDWR | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let fd = rustix::fs::open(path, flags, Mode::empty())
            .map_err(|e| open_error(path, e, "open"))?;
        let len = check::inspect(fd.as_fd(), &path.display().to_string(), size, true)?;
        Self::map(
            fd,
            len,
            SegmentKind::File(path.to_owned()),
            CreateOptions::new(),
        )
    }
}

/// Removes a segment file.
pub(super) fn unlink(path: &Path) -> Result<(), Error> {
    rustix::fs::unlink(path).map_err(|e| open_error(path, e, "unlink"))
}
