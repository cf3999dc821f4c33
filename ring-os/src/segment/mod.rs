//! Shared-memory segments: a file descriptor plus a shared read-write mapping of all of it.
//!
//! Three kinds, one type ([`Segment`]):
//! - **named** ([`Segment::create_named`], [`Segment::open_named`]): POSIX shared memory, a file
//!   `shmring.<name>` in `/dev/shm` on Linux;
//! - **memfd** ([`Segment::create_memfd`], [`Segment::from_fd`]): anonymous, sealed against shrink
//!   and grow, handed to another process over a Unix socket ([`crate::fdpass`]);
//! - **file-backed** ([`Segment::create_file`], [`Segment::open_file`]): a file at a path (macOS;
//!   containers that share a directory; hugetlbfs mounts).
//!
//! Creation reserves every page (`posix_fallocate`), so a full file system is
//! [`Error::NoSpace`] at once and never a `SIGBUS` at first touch. Opening treats the file as
//! untrusted: it must be a regular file of this user, not writable by others, of the expected
//! size (and, for a memfd, carry the seals).

mod check;
mod file;
pub(crate) mod memfd;
mod named;

use core::ptr::NonNull;
use std::os::fd::{AsFd, AsRawFd as _, BorrowedFd, OwnedFd};
use std::path::PathBuf;

use memmap2::{MmapOptions, MmapRaw};

pub use check::SizeCheck;

use crate::{Error, SegmentName};

/// Options for creating a segment.
#[derive(Clone, Copy, Debug, Default)]
pub struct CreateOptions {
    /// Back the segment with huge pages (memfd: `MFD_HUGETLB`; file: the path must be on
    /// hugetlbfs). Named segments live on tmpfs and refuse this with [`Error::HugePages`].
    pub huge_pages: bool,
    /// Pre-fault the mapping (`MAP_POPULATE`) so first touches do not page-fault.
    pub populate: bool,
}

impl CreateOptions {
    /// The defaults: ordinary pages, no pre-faulting.
    #[must_use]
    pub const fn new() -> Self {
        Self {
            huge_pages: false,
            populate: false,
        }
    }

    /// Sets [`huge_pages`](Self::huge_pages).
    #[must_use]
    pub const fn huge_pages(mut self, on: bool) -> Self {
        self.huge_pages = on;
        self
    }

    /// Sets [`populate`](Self::populate).
    #[must_use]
    pub const fn populate(mut self, on: bool) -> Self {
        self.populate = on;
        self
    }
}

/// Where a segment's file lives.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SegmentKind {
    /// A POSIX shared-memory object.
    Named(SegmentName),
    /// An anonymous, sealed memfd.
    Memfd,
    /// A file at a path.
    File(PathBuf),
}

/// An open, mapped shared-memory segment.
///
/// The mapping is shared and read-write, page-aligned, and covers the whole file. Dropping the
/// segment unmaps it and closes the descriptor; the name or path stays unless
/// [`unlink`](Self::unlink) is called or [`set_unlink_on_drop`](Self::set_unlink_on_drop) is set.
///
/// # Examples
///
/// ```
/// use ring_os::{CreateOptions, Error, Segment, SizeCheck};
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
    /// The mapping of the whole file.
    map: MmapRaw,
    /// The descriptor the mapping was made from (kept to re-check the size and to pass it on).
    fd: OwnedFd,
    /// What kind of segment this is.
    kind: SegmentKind,
    /// Whether dropping removes the name or path.
    unlink_on_drop: bool,
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

    /// The segment's file descriptor (for [`crate::fdpass::send_fd`]).
    #[must_use]
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// What kind of segment this is.
    #[must_use]
    pub fn kind(&self) -> &SegmentKind {
        &self.kind
    }

    /// Re-checks with `fstat` that the file still has the mapped length.
    ///
    /// A named or file-backed segment can be truncated by any process of the same user; touching
    /// a truncated page raises `SIGBUS`. Call this before trusting a segment again after a peer
    /// misbehaved (memfd segments are sealed and cannot change size).
    ///
    /// # Errors
    ///
    /// [`Error::SizeMismatch`] when the size changed, [`Error::Io`] when `fstat` fails.
    pub fn check_len(&self) -> Result<(), Error> {
        let actual = check::file_len(self.fd.as_fd())?;
        let expected = self.map.len() as u64;
        if actual == expected {
            Ok(())
        } else {
            Err(Error::SizeMismatch { expected, actual })
        }
    }

    /// Removes the segment's name (named) or path (file-backed); a memfd has none. The memory
    /// stays until every mapping and descriptor is gone.
    ///
    /// # Errors
    ///
    /// [`Error::NotFound`] when it was already removed, [`Error::Io`] otherwise.
    pub fn unlink(&self) -> Result<(), Error> {
        match &self.kind {
            SegmentKind::Named(name) => named::unlink(name),
            SegmentKind::File(path) => file::unlink(path),
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
        let map = mo
            .map_raw(fd.as_raw_fd())
            .map_err(|e| Error::io("mmap", e))?;
        Ok(Self {
            map,
            fd,
            kind,
            unlink_on_drop: false,
        })
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
