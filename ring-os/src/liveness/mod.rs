//! Kernel-vouched liveness: who holds which role of a ring, as the kernel says (a lock is
//! released when its holder dies), never guessed from a pid.
//!
//! - [`lock`]: one role lock per participant; the backend is chosen per platform, one file each:
//!   `ofd.rs` (Linux: open-file-description byte-range locks on the segment's own file),
//!   `flock.rs` (macOS, the BSDs and the `portable` feature: `flock` on one lock file per
//!   role), `windows.rs` (one named mutex per role, abandoned when its holder dies);
//! - `role.rs`: the roles and the verdict a probe gives, shared by the backends;
//! - `roles.rs`: every ring-core call that registers, takes over or reclaims, each backed by its
//!   role lock ([`RoleFile`]);
//! - `participants.rs`: the roles a ring's header records, each with its lock's verdict;
//! - [`owner`]: owner ids, diagnostic text only.

#[cfg(unix)]
mod ident;
#[cfg_attr(all(unix, not(ring_portable)), path = "ofd.rs")]
#[cfg_attr(ring_portable, path = "flock.rs")]
#[cfg_attr(windows, path = "windows.rs")]
pub mod lock;
pub mod owner;
mod participants;
mod role;
pub(crate) mod roles;

pub(crate) use participants::participants;
pub use participants::Participant;
pub use roles::RoleFile;
