//! The truncation guard's Windows counterpart: nothing to guard. A pagefile-backed section never
//! shrinks, and a file with a mapped view cannot be truncated (`SetEndOfFile` fails with
//! `ERROR_USER_MAPPED_FILE`), so a mapping never loses its pages and no access faults because a
//! peer cut the file. The functions the rest of the crate calls answer accordingly.

use crate::Error;

/// Nothing to install on Windows.
///
/// # Errors
///
/// None on Windows.
pub fn install() -> Result<(), Error> {
    Ok(())
}

/// Faults repaired so far: always 0 on Windows.
#[must_use]
pub fn repaired_faults() -> u64 {
    0
}

/// Whether `mem` lies in a truncated range: never on Windows.
pub(crate) fn memory_truncated<M: ring_core::Memory + ?Sized>(_mem: &M, _probe: bool) -> bool {
    false
}

/// Whether the mapping holding `addr` was truncated: never on Windows.
///
/// # Safety
///
/// None needed on Windows; kept `unsafe` to match the Unix signature its callers use.
pub(crate) unsafe fn probe_at(_addr: usize) -> bool {
    false
}
