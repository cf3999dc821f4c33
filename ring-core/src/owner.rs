//! [`OwnerId`]: who takes part in a ring.

use core::num::NonZeroU64;

/// An opaque, non-zero identity of a process (or thread) taking part in a ring, stored in the
/// segment so that others can check whether it is alive. `ring-os` derives it from the pid and
/// the process start time, so a reused pid is a different owner.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct OwnerId(NonZeroU64);

impl OwnerId {
    /// Wraps a non-zero id; `None` for 0 (0 means "no owner" in the segment).
    pub const fn new(id: u64) -> Option<Self> {
        match NonZeroU64::new(id) {
            Some(v) => Some(Self(v)),
            None => None,
        }
    }

    /// The raw id.
    pub const fn get(self) -> u64 {
        self.0.get()
    }
}
