//! Segments: the shared memory a ring lives in, and what keeps using it safe.
//!
//! - [`Segment`]: a mapped segment, one type over three kinds (named, anonymous, file); the
//!   backend is chosen per platform, one folder each: `unix/` (POSIX shared memory, sealed
//!   memfds, files; `unix/no_memfd.rs` on macOS) and `windows/` (section objects);
//! - `options.rs`: what is portable about them ([`CreateOptions`], [`SegmentKind`],
//!   [`SizeCheck`]); `name.rs`: validated names ([`SegmentName`]);
//! - [`sigbus`]: the guard that turns a peer's truncation into an error (`windows/sigbus.rs`:
//!   nothing to guard there);
//! - [`stale`]: listing our named segments and removing abandoned ones (`windows/stale.rs`:
//!   none are left behind there);
//! - [`fdpass`] (Unix): handing a segment's descriptor to another process.

#[cfg(unix)]
pub mod fdpass;
pub(crate) mod name;
mod options;
#[cfg_attr(windows, path = "windows/sigbus.rs")]
pub mod sigbus;
#[cfg_attr(windows, path = "windows/stale.rs")]
pub mod stale;
#[cfg(unix)]
mod unix;
#[cfg(windows)]
mod windows;

pub use name::SegmentName;
pub use options::{CreateOptions, SegmentKind, SizeCheck};
#[cfg(unix)]
pub use unix::memfd::REQUIRED_SEALS;
#[cfg(any(ring_portable, ring_cross))]
pub(crate) use unix::mode_bits;
#[cfg(ring_portable)]
pub(crate) use unix::roles_of;
#[cfg(unix)]
pub use unix::Segment;
#[cfg(windows)]
pub use windows::Segment;
