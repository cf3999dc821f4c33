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
    /// The SIGBUS guard's record of the mapping; declared first so it is dropped (unregistered)
    /// before `map` is unmapped.
    guard: crate::sigbus::Registration,
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
        // Installs the handler before the first mapping exists, so no fault can precede it.
        crate::sigbus::install()?;
        let map = mo
            .map_raw(fd.as_raw_fd())
            .map_err(|e| Error::io("mmap", e))?;
        let guard = crate::sigbus::register(map.as_ptr(), len_usize, granule(fd.as_fd()))?;
        Ok(Self {
            guard,
            map,
            fd,
            kind,
            unlink_on_drop: false,
        })
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
