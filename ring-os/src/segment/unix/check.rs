//! Checks shared by every segment kind: the file's type, owner, mode and size, and reserving its
//! space at creation.

use std::os::fd::BorrowedFd;

use rustix::fs::{fallocate, fstat, fstatvfs, ftruncate, FallocateFlags, FileType};
use rustix::io::Errno;

use crate::Error;

pub(crate) use crate::segment::SizeCheck;

/// The file's current size.
pub(crate) fn file_len(fd: BorrowedFd<'_>) -> Result<u64, Error> {
    let st = fstat(fd).map_err(|e| Error::io("fstat", e))?;
    // A negative size is impossible for a regular file; report it as 0 rather than wrap.
    Ok(u64::try_from(st.st_size).unwrap_or(0))
}

/// Validates an opened file as untrusted: a regular file of the expected size and, when `secure`,
/// owned by this user and writable by nobody else. Returns its size.
pub(crate) fn inspect(
    fd: BorrowedFd<'_>,
    what: &str,
    size: SizeCheck,
    secure: bool,
) -> Result<u64, Error> {
    let st = fstat(fd).map_err(|e| Error::io("fstat", e))?;
    if !is_regular(&st) {
        return Err(Error::NotRegularFile {
            what: what.to_owned(),
        });
    }
    if secure {
        let me = rustix::process::geteuid().as_raw();
        if st.st_uid != me || mode_bits(&st) & 0o022 != 0 {
            return Err(Error::Insecure {
                what: what.to_owned(),
                uid: st.st_uid,
                mode: mode_bits(&st),
            });
        }
    }
    let actual = u64::try_from(st.st_size).unwrap_or(0);
    size.check(actual)?;
    Ok(actual)
}

/// The permission bits of `st` (`st_mode` is a `u16` on macOS, a `u32` elsewhere).
pub(crate) fn mode_bits(st: &rustix::fs::Stat) -> u32 {
    #[allow(clippy::useless_conversion, reason = "u16 on macOS, u32 elsewhere")]
    let mode = u32::from(st.st_mode);
    mode & 0o7777
}

/// Whether `st` is a regular file. macOS reports a shared-memory object with no file type bits
/// at all (only its permissions), so there a type of 0 passes too: only `shm_open` hands out
/// such descriptors, and a path always has a type.
#[allow(clippy::useless_conversion, reason = "u16 on macOS, u32 elsewhere")]
fn is_regular(st: &rustix::fs::Stat) -> bool {
    FileType::from_raw_mode(st.st_mode) == FileType::RegularFile
        || (cfg!(target_os = "macos") && u32::from(st.st_mode) & 0o170_000 == 0)
}

/// Bytes available to this user on the file system holding `fd`, or `None` when it reports no
/// limit (an unlimited tmpfs, such as the one behind memfds, reports 0 blocks).
pub(crate) fn available(fd: BorrowedFd<'_>) -> Option<u64> {
    let vfs = fstatvfs(fd).ok()?;
    (vfs.f_blocks != 0).then(|| vfs.f_bavail.saturating_mul(vfs.f_frsize))
}

/// Sizes the file to `len` and reserves every page, so that touching the mapping later cannot
/// fail for lack of space.
pub(crate) fn reserve(fd: BorrowedFd<'_>, len: u64, huge: bool) -> Result<(), Error> {
    let avail = available(fd);
    if let Some(available) = avail {
        if len > available {
            return Err(Error::NoSpace {
                needed: len,
                available,
            });
        }
    }
    match fallocate(fd, FallocateFlags::empty(), 0, len) {
        Ok(()) => Ok(()),
        Err(Errno::NOSPC | Errno::NOMEM) if huge => Err(Error::HugePages {
            reason: format!(
                "no free huge pages for {len} bytes; reserve some (`sysctl vm.nr_hugepages=N`) or \
                 create the segment without huge pages"
            ),
        }),
        Err(Errno::NOSPC) => Err(Error::NoSpace {
            needed: len,
            available: avail.unwrap_or(0),
        }),
        Err(Errno::FBIG) => Err(Error::BadLength { len }),
        // File systems without fallocate (and non-Linux kernels): size the file and rely on the
        // caller's pre-fault; see docs/OS.md for what that does not guarantee.
        Err(Errno::OPNOTSUPP | Errno::NOSYS) => {
            ftruncate(fd, len).map_err(|e| Error::io("ftruncate", e))
        }
        // Other kernels refuse in their own words: FreeBSD's ZFS and shared memory say EINVAL,
        // macOS's `F_PREALLOCATE` fails on shared-memory objects. Size the file instead.
        #[cfg(not(target_os = "linux"))]
        Err(_) => ftruncate(fd, len).map_err(|e| Error::io("ftruncate", e)),
        #[cfg(target_os = "linux")]
        Err(e) => Err(Error::io("fallocate", e)),
    }
}
