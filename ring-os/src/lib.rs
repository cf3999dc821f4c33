//! OS shared-memory backend for `ring-core`: named, memfd and file-backed segments mapped with
//! `memmap2`, futex waits on the shared mapping, liveness from kernel-held role locks ([`lock`]),
//! descriptor passing over Unix sockets, crash recovery and cleanup of stale segments.
//!
//! Start with the front door: `use ring_os::prelude::*` ([`Ring`], [`Publisher`],
//! [`Subscriber`]); [`ShmRing`] is the plumbing underneath, for ring-core's lower-level API. See `docs/OS.md` for segment kinds, permissions, naming, cleanup,
//! container notes and crash semantics.
//!
//! On Windows the same API runs over section objects, with one named mutex per role (the kernel
//! reports a dead holder's mutex as abandoned) and named semaphores for waits across processes;
//! see `docs/OS.md`, Windows. On macOS and the BSDs (and on Linux with the `portable` feature)
//! the portable POSIX backend holds each role by `flock` on a lock file of its own and waits
//! through the platform's address wait; see `docs/OS.md`, the portable backend.
#![allow(
    clippy::std_instead_of_core,
    clippy::std_instead_of_alloc,
    reason = "std crate"
)]

pub mod alloc;
#[cfg(feature = "async")]
pub mod asyncio;
mod blocking;
mod error;
#[cfg(unix)]
pub mod fdpass;
mod front;
pub mod futex;
#[cfg(unix)]
mod ident;
#[cfg_attr(windows, path = "windows/lock.rs")]
#[cfg_attr(ring_portable, path = "posix/lock.rs")]
pub mod lock;
mod mapping;
mod name;
pub mod owner;
#[cfg(ring_portable)]
mod posix;
#[cfg(unix)]
pub mod rendezvous;
mod ring;
mod role;
mod roles;
#[cfg_attr(windows, path = "windows/segment.rs")]
mod segment;
#[cfg_attr(windows, path = "windows/sigbus.rs")]
pub mod sigbus;
#[cfg_attr(windows, path = "windows/stale.rs")]
pub mod stale;
mod wait;
#[cfg(windows)]
#[path = "windows/mod.rs"]
mod win;

pub use alloc::{AllocProducer, AllocReader};
pub use blocking::{ConsumerExt, ProducerExt, LIVENESS_PERIOD, TRUNCATED};
pub use error::{Error, ShmReadError};
pub use front::{
    check_never_stall, prelude, Iter, Loan, Message, Publisher, RecvError, RecvTimeoutError, Ring,
    RingBuilder, SendError, SendTimeoutError, Subscriber, TryRecvError, TrySendError,
};
pub use mapping::Mapping;
pub use name::{SegmentName, MAX_LEN as MAX_NAME_LEN, PREFIX as NAME_PREFIX};
pub use ring::{ShmConsumer, ShmProducer, ShmRing};
pub use roles::RoleFile;
pub use segment::{CreateOptions, Segment, SegmentKind, SizeCheck};
pub use wait::{deadline_after, FutexWait};

/// The seals every memfd segment carries (`F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL`).
#[cfg(unix)]
pub use segment::memfd::REQUIRED_SEALS;

// Cross-process rings need lock-free 64- and 32-bit atomics: a fallback lock would live in one
// process's memory, not in the segment.
const _: () = assert!(
    ring_core::CROSS_PROCESS_SAFE,
    "ring-os needs lock-free 64-bit atomics on this target (ring_core::CROSS_PROCESS_SAFE)"
);

/// The README's examples, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
pub struct ReadmeDoctests;
