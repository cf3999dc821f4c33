//! Which file a descriptor or a path names: `(st_dev, st_ino)`, the identity role locks, unlinks
//! and cleaners compare before they act (shared by the Unix lock backends).

use std::os::fd::BorrowedFd;
use std::path::Path;

/// The device and inode of an open file.
pub(crate) fn identity(file: BorrowedFd<'_>) -> std::io::Result<(u64, u64)> {
    Ok(dev_ino(&rustix::fs::fstat(file)?))
}

/// The device and inode a path names now (without following a final symlink).
pub(crate) fn path_identity(path: &Path) -> std::io::Result<(u64, u64)> {
    Ok(dev_ino(&rustix::fs::lstat(path)?))
}

/// The `(st_dev, st_ino)` pair that names a file.
fn dev_ino(st: &rustix::fs::Stat) -> (u64, u64) {
    // Widths and signedness differ between targets (macOS: an `i32` device); both are
    // identifiers, compared only for equality.
    #[allow(
        clippy::useless_conversion,
        clippy::unnecessary_cast,
        clippy::cast_sign_loss,
        reason = "width varies by target"
    )]
    (st.st_dev as u64, st.st_ino as u64)
}
