//! The plumbing under the front door, for code that needs more than [`Ring`](crate::Ring),
//! [`Publisher`](crate::Publisher) and [`Subscriber`](crate::Subscriber) give: ring-core's
//! lower-level API over OS memory, segments, liveness, waits, cleanup and descriptor passing.
//!
//! - **Participants**: [`ShmRing`] creates, opens and joins rings; [`ShmProducer`] and
//!   [`ShmConsumer`] are ring-core's producer and consumer holding their role locks, with the
//!   blocking operations of [`ProducerExt`] and [`ConsumerExt`]; [`Mapping`] is a mapped ring
//!   (ring-core's [`Memory`](ring_core::Memory)); [`LocalSegment`] is a ring for the threads of
//!   one process, with asymmetric fences and futex wake-ups; [`AllocProducer`] and [`AllocReader`] carry
//!   variable-size payloads through the in-segment allocator ([`alloc`]).
//! - **Segments** (`src/segment/`): [`Segment`] with [`CreateOptions`], [`SegmentKind`],
//!   [`SizeCheck`] and [`SegmentName`]; the SIGBUS guard ([`sigbus`]); listing and cleaning
//!   stale segments ([`stale`]).
//! - **Liveness** (`src/liveness/`): the kernel-held role locks ([`lock`]), the roles a segment
//!   records ([`RoleFile`], [`Participant`]), owner ids ([`owner`]).
//! - **Waits** (`src/wait/`): futex wait and wake on shared words ([`futex`]) and ring-core's
//!   [`WaitStrategy`](ring_core::WaitStrategy) over them ([`FutexWait`]).
//! - **Passing rings between processes** (Unix): descriptors over Unix sockets ([`fdpass`]) and
//!   the memfd rendezvous ([`rendezvous`]).
//!
//! Nothing here is needed for ordinary pub/sub; everything here keeps the same promises
//! (`docs/DESIGN.md`), but leaves more to the caller (deadlines, liveness checks, the order of
//! drops).

pub mod alloc;
mod blocking;
mod local;
mod mapping;
#[cfg(unix)]
pub mod rendezvous;
mod ring;
#[cfg(test)]
mod testing;

pub use alloc::{AllocProducer, AllocReader};
pub use blocking::{ConsumerExt, ProducerExt, LIVENESS_PERIOD, TRUNCATED};
pub use local::LocalSegment;
pub use mapping::Mapping;
pub use ring::{ShmConsumer, ShmProducer, ShmRing};

pub use crate::error::ShmReadError;
pub use crate::liveness::{lock, owner, Participant, RoleFile};
#[cfg(unix)]
pub use crate::segment::fdpass;
/// The seals every memfd segment carries (`F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL`).
#[cfg(unix)]
pub use crate::segment::REQUIRED_SEALS;
pub use crate::segment::{
    name::{MAX_LEN as MAX_NAME_LEN, PREFIX as NAME_PREFIX},
    sigbus, stale, CreateOptions, Segment, SegmentKind, SegmentName, SizeCheck,
};
pub use crate::wait::{deadline_after, futex, FutexWait};
