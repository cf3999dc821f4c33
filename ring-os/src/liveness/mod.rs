//! Kernel-vouched liveness: who holds which role of a ring, as the kernel says (a lock is
//! released when its holder dies), never guessed from a pid.
//!
//! - [`lock`]: one role lock per participant; the backend is chosen per platform, one file each:
//!   `ofd.rs` (Linux: open-file-description byte-range locks on the segment's own file),
//!   `flock.rs` (macOS, the BSDs and the `portable` feature: `flock` on one lock file per
//!   role), `windows.rs` (one named mutex per role, abandoned when its holder dies);
//! - `cross.rs` (Linux, Android): the other of the two Unix backends, probed beside [`lock`]
//!   before any verdict that leads to a removal, take-over or reclaim, so programs built with
//!   and without the `portable` feature see each other's participants;
//! - `role.rs`: the roles and the verdict a probe gives, shared by the backends;
//! - `roles.rs`: every ring-core call that registers, takes over or reclaims, each backed by its
//!   role lock ([`RoleFile`]);
//! - `participants.rs`: the roles a ring's header records, each with its lock's verdict;
//! - [`owner`]: owner ids, diagnostic text only.

#[cfg(ring_cross)]
pub(crate) mod cross;
#[cfg(unix)]
mod ident;
#[cfg_attr(all(unix, not(ring_portable)), path = "ofd.rs")]
#[cfg_attr(ring_portable, path = "flock.rs")]
#[cfg_attr(windows, path = "windows.rs")]
pub mod lock;
/// The Unix backend [`lock`] is not (Linux and Android compile both): the OFD locks with
/// `portable`, the lock files without. Only `cross.rs` uses it, and only its probes and cleaner
/// locks (tests also hold its roles, as a program built the other way would).
#[cfg(ring_cross)]
#[cfg_attr(not(ring_portable), path = "flock.rs")]
#[cfg_attr(ring_portable, path = "ofd.rs")]
#[allow(
    dead_code,
    unused_imports,
    reason = "the other backend: only its probes and cleaner locks are used"
)]
pub(crate) mod other;
pub mod owner;
mod participants;
mod role;
pub(crate) mod roles;

pub(crate) use participants::participants;
pub use participants::Participant;
pub use roles::RoleFile;
