//! OS shared-memory backend for `ring-core`: named, memfd and file-backed segments mapped with
//! `memmap2`, futex waits on the shared mapping, owner identities that survive PID reuse,
//! descriptor passing over Unix sockets, and cleanup of stale segments.
//!
//! See `docs/OS.md` for segment kinds, permissions, naming, cleanup, container notes and crash
//! semantics.
#![allow(
    clippy::std_instead_of_core,
    clippy::std_instead_of_alloc,
    reason = "std crate"
)]

mod error;
pub mod fdpass;
pub mod futex;
mod name;
pub mod owner;
mod segment;
pub mod stale;

pub use error::Error;
pub use name::{SegmentName, MAX_LEN as MAX_NAME_LEN, PREFIX as NAME_PREFIX};
pub use segment::{CreateOptions, Segment, SegmentKind, SizeCheck};

/// The seals every memfd segment carries (`F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL`).
pub use segment::memfd::REQUIRED_SEALS;
