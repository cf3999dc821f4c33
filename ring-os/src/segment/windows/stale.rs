//! Stale segments on Windows: there are none to clean. A section is a kernel object that exists
//! while some process holds a handle to it and vanishes with the last one, so a ring whose every
//! participant died is gone; nothing is left in a directory for `ringctl list/clean` to find (the
//! object namespace is not listed through Win32). File segments stay on disk like any file; a
//! ring's participants are read from the ring itself ([`Mapping::participants`](crate::raw::Mapping::participants)).

pub use crate::liveness::Participant;
pub use crate::segment::name::{is_spill_of, spill_queue};
