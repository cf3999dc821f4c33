//! Anonymous segments: a sealed memfd, passed to peers over a Unix socket.

use std::os::fd::{AsFd as _, OwnedFd};

use rustix::fs::{fcntl_add_seals, fcntl_get_seals, memfd_create, MemfdFlags, SealFlags};
use rustix::io::Errno;

use super::check::{self, SizeCheck};
use super::{CreateOptions, Segment, SegmentKind};
use crate::Error;

/// The seals a memfd segment must carry: its size can neither shrink (a mapping would `SIGBUS`)
/// nor grow, and no further seal (such as `F_SEAL_WRITE`) can be added.
pub const REQUIRED_SEALS: SealFlags = SealFlags::SHRINK
    .union(SealFlags::GROW)
    .union(SealFlags::SEAL);

impl Segment {
    /// Creates an anonymous memfd segment of `len` bytes (rounded up to whole huge pages with
    /// huge pages), reserves every page, then seals it with [`REQUIRED_SEALS`].
    ///
    /// # Errors
    ///
    /// [`Error::NoSpace`], [`Error::HugePages`], [`Error::BadLength`], [`Error::Io`].
    pub fn create_memfd(len: u64, opts: CreateOptions) -> Result<Self, Error> {
        if len == 0 {
            return Err(Error::BadLength { len });
        }
        let mut flags = MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING;
        if opts.huge_pages {
            flags |= MemfdFlags::HUGETLB;
        }
        let fd = memfd_create("shmring", flags).map_err(|e| match e {
            Errno::INVAL | Errno::NOENT | Errno::NOSYS if opts.huge_pages => Error::HugePages {
                reason: format!(
                    "this kernel cannot make hugetlb memfds ({e}); create the segment without \
                     huge pages"
                ),
            },
            e => Error::io("memfd_create", e),
        })?;
        let len = if opts.huge_pages {
            let st = rustix::fs::fstat(&fd).map_err(|e| Error::io("fstat", e))?;
            // On hugetlbfs st_blksize is the huge page size.
            let page = u64::try_from(st.st_blksize).unwrap_or(0).max(1);
            len.checked_next_multiple_of(page)
                .ok_or(Error::BadLength { len })?
        } else {
            len
        };
        // Nobody else can reach a new memfd, so its creator lock cannot be contended.
        let creator = super::lock_new(fd.as_fd(), &SegmentKind::Memfd, None, super::Role::Creator)?
            .ok_or_else(|| {
                Error::io(
                    "lock a new memfd",
                    std::io::Error::other("creator lock held"),
                )
            })?;
        check::reserve(fd.as_fd(), len, opts.huge_pages)?;
        fcntl_add_seals(&fd, REQUIRED_SEALS).map_err(|e| Error::io("fcntl(F_ADD_SEALS)", e))?;
        Ok(Self::map(fd, len, SegmentKind::Memfd, opts)?.with_creator(creator))
    }

    /// Maps a memfd received from a peer, after checking it as untrusted: a regular file carrying
    /// [`REQUIRED_SEALS`], whose size passes `size`.
    ///
    /// # Errors
    ///
    /// [`Error::MissingSeals`] for a memfd that can still change size (or any other file),
    /// [`Error::NotRegularFile`], [`Error::SizeMismatch`], [`Error::Io`].
    pub fn from_fd(fd: OwnedFd, size: SizeCheck) -> Result<Self, Error> {
        let have = match fcntl_get_seals(&fd) {
            Ok(seals) => seals,
            // Not a file that supports seals at all (a pipe, a socket, a disk file).
            Err(Errno::INVAL) => SealFlags::empty(),
            Err(e) => return Err(Error::io("fcntl(F_GET_SEALS)", e)),
        };
        if !have.contains(REQUIRED_SEALS) {
            return Err(Error::MissingSeals {
                have: have.bits(),
                missing: REQUIRED_SEALS.difference(have).bits(),
            });
        }
        // A memfd's owner and mode do not matter: only holders of the descriptor can reach it.
        let len = check::inspect(fd.as_fd(), "received memfd", size, false)?;
        Self::map(fd, len, SegmentKind::Memfd, CreateOptions::new())
    }
}
