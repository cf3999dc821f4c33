//! Rings in OS shared memory: named, sealed memfd and file-backed segments, woken by futexes,
//! with liveness the kernel vouches for and cleanup of what crashed processes leave behind.
//!
//! The front door is this page: [`Ring`] and its [`RingBuilder`], [`Publisher`] (with
//! [`Loan`]s for in-place writes) and [`Subscriber`] (copies into [`Copied`], zero-copy
//! [`Pinned`] reads, [`Message`]s from [`Iter`]), the errors named after crossbeam-channel's,
//! and `use ring_os::prelude::*` to bring them all. With the `async` feature, `asyncio` adds
//! futures, a `Stream` and a `Sink` for the same waits. Everything underneath (ring-core's
//! lower-level API over OS memory, segments, role locks, futexes, cleanup, descriptor passing)
//! is in [`raw`]. See `docs/OS.md` for segment kinds, permissions, naming, cleanup, container
//! notes and crash semantics.
//!
//! On Windows the same API runs over section objects, with one named mutex per role (the kernel
//! reports a dead holder's mutex as abandoned) and named semaphores for waits across processes;
//! see `docs/OS.md`, Windows. On macOS and the BSDs (and on Linux with the `portable` feature)
//! the portable POSIX backend holds each role by `flock` on a lock file of its own and waits
//! through the platform's address wait; see `docs/OS.md`, the portable backend.
//!
//! The source is laid out by job: `front/` (the front door), `asyncio/`, `segment/` (segments
//! per platform, the SIGBUS guard, cleanup), `liveness/` (role locks per platform, owners,
//! registration), `wait/` (futexes per platform), and `raw/` (the participants and their
//! blocking helpers, the mapping, the allocator binding; what [`raw`] exports from the other
//! folders too; `rendezvous.rs`, the memfd rendezvous). Passing a descriptor (`fdpass.rs`)
//! sits in `segment/`.
#![allow(
    clippy::std_instead_of_core,
    clippy::std_instead_of_alloc,
    reason = "std crate"
)]

#[cfg(feature = "async")]
pub mod asyncio;
mod error;
mod front;
mod liveness;
pub mod raw;
mod segment;
// Only the Unix lock tests use it.
#[cfg(all(test, unix))]
mod settle;
mod wait;
#[cfg(windows)]
mod windows;

pub use error::Error;
pub(crate) use error::ShmReadError;
pub use front::{
    check_never_stall, prelude, Iter, Loan, Message, Pinned, Publisher, RecvError,
    RecvTimeoutError, Ring, RingBuilder, SendError, SendTimeoutError, Subscriber, TryRecvError,
    TrySendError,
};
/// What a copying read returns (ring-core's type, named here so the front door is complete):
/// the message's length, sequence number and the messages missed before it.
pub use ring_core::Copied;

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
