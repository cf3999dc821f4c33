//! Anonymous segments on macOS: there is no `memfd_create` and no file seals, so a segment a peer
//! hands over could be shrunk under its mapping at any time. Both entry points refuse with a
//! clear error; share a named or file segment instead (see `docs/OS.md`, the portable backend).

use std::os::fd::OwnedFd;

use super::check::SizeCheck;
use super::{CreateOptions, Segment};
use crate::Error;

/// What the refusals say.
const WHY: &str = "anonymous (memfd) segments need memfd_create and file seals (Linux, FreeBSD); \
                   on macOS use a named or file segment";

/// The seals a memfd segment must carry elsewhere (`F_SEAL_SEAL | F_SEAL_SHRINK | F_SEAL_GROW`,
/// as bits); nothing on macOS can carry them.
pub const REQUIRED_SEALS: u32 = 0x1 | 0x2 | 0x4;

impl Segment {
    /// Refused on macOS (no memfd): [`Error::Io`] saying so.
    ///
    /// # Errors
    ///
    /// Always.
    pub fn create_memfd(_len: u64, _opts: CreateOptions) -> Result<Self, Error> {
        Err(Error::io(
            "memfd_create",
            std::io::Error::new(std::io::ErrorKind::Unsupported, WHY),
        ))
    }

    /// Refused on macOS: a received descriptor cannot be checked for seals, so it could be
    /// shrunk under the mapping. [`Error::MissingSeals`] naming all of them.
    ///
    /// # Errors
    ///
    /// Always.
    pub fn from_fd(fd: OwnedFd, _size: SizeCheck) -> Result<Self, Error> {
        drop(fd);
        Err(Error::MissingSeals {
            have: 0,
            missing: REQUIRED_SEALS,
        })
    }
}
