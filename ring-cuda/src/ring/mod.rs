//! The device ring: ring-core's protocol in host shared memory, payloads in device memory.
//!
//! - The ring segment (ring-core, in host shared memory: a [`SharedRing`], a ring-os named
//!   segment with the table after the ring) carries the protocol. A message's two meta words
//!   are `(buffer index, length)`; its 8-byte payload is the producer's monotonic publish time.
//!   Producer and consumers are processes (CUDA opens IPC handles only in another process) and
//!   hold ring-os role locks on the segment's file for as long as they live, so each sees the
//!   other's death from the kernel (see [`DeviceProducer::reclaim_dead_consumer`]).
//! - Each slot's payload is a device buffer the producer allocates and exports **once**; each
//!   consumer opens each buffer **once** (a [`MappingCache`](crate::MappingCache)).
//! - The [`table`] (host memory next to the ring) carries the handles: per slot the buffer and
//!   its *write event*; per consumer row that consumer's *read events*, one per slot.
//! - Producer, per message: claim the slot (ring-core: no pin, gating cursors allow) → make its
//!   stream wait on every registered consumer's read event for the slot (the consumers' copies
//!   of the previous message in it have completed) → enqueue the writes → record the slot's
//!   write event → publish. No host sync.
//! - Consumer, per message: pin → make its stream wait on the slot's write event → enqueue its
//!   reads → record its read event for the slot → unpin. No host sync.
//!
//! A consumer records its read event before it unpins, and the producer claims the slot only
//! after that unpin (ring-core's claim CAS acquires it), so the producer's stream wait covers the
//! consumer's last read of the slot: the device never overwrites a buffer a consumer is still
//! copying, while the host never blocks on the device.

mod consumer;
mod producer;
mod shared;
pub mod table;

use core::fmt;

pub use consumer::{DeviceConsumer, Frame};
pub use producer::DeviceProducer;
pub use shared::SharedRing;
pub use table::{table_words, TableMemory};

use crate::error::Error;

/// Errors of the device ring.
#[derive(Debug)]
#[non_exhaustive]
pub enum RingError {
    /// A device operation failed.
    Device(Error),
    /// ring-core refused to create or attach the producer or consumer.
    Ring(ring_core::Error),
    /// The producer could not claim a slot (`Full` and `Pinned` are transient: retry).
    Claim(ring_core::ClaimError),
    /// The consumer could not read (`Empty` is transient: retry).
    Read(ring_core::ReadError),
    /// The device table is not published yet (or was withdrawn): the producer is not ready.
    NotReady,
    /// A message or table entry is impossible: a peer corrupted shared memory.
    Corrupt(&'static str),
    /// The shared-memory segment could not be created or opened, or fd passing failed (ring-os).
    Segment(ring_os::Error),
    /// A consumer's read event could not be used: the producer could not open it (and the
    /// consumer is alive: a dead one is reclaimed instead), or the consumer could not record
    /// it. Nothing was written without the wait it requires.
    ReadEvent {
        /// The consumer's ring index (its table row).
        consumer: usize,
        /// What the device said.
        source: Error,
    },
    /// This consumer could neither record its read event nor confirm on the host that its
    /// copy finished, so it keeps the message pinned (the producer cannot overwrite a buffer
    /// a copy may still be reading). Drop the consumer; the producer reclaims its entry.
    PinHeld {
        /// The sequence number left pinned.
        seq: u64,
    },
}

impl fmt::Display for RingError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Device(e) => write!(f, "device: {e}"),
            Self::Ring(e) => write!(f, "ring: {e}"),
            Self::Claim(e) => write!(f, "claim: {e}"),
            Self::Read(e) => write!(f, "read: {e}"),
            Self::NotReady => f.write_str(
                "the device table is not ready: start the producer first, or wait for it",
            ),
            Self::Corrupt(what) => write!(f, "corrupt shared state: {what}"),
            Self::Segment(e) => write!(f, "ring-os: {e}"),
            Self::ReadEvent { consumer, source } => write!(
                f,
                "the read event of consumer {consumer} cannot be used ({source}); nothing was \
                 written without the wait it requires (the consumer holds its role lock, so it \
                 is alive and was not reclaimed)"
            ),
            Self::PinHeld { seq } => write!(
                f,
                "message {seq} stays pinned: its read event was not recorded and the copy could \
                 not be confirmed finished; drop this consumer and let the producer reclaim it"
            ),
        }
    }
}

impl std::error::Error for RingError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Device(e) | Self::ReadEvent { source: e, .. } => Some(e),
            _ => None,
        }
    }
}

impl From<Error> for RingError {
    fn from(e: Error) -> Self {
        Self::Device(e)
    }
}

impl From<ring_core::ClaimError> for RingError {
    fn from(e: ring_core::ClaimError) -> Self {
        Self::Claim(e)
    }
}

impl From<ring_core::ReadError> for RingError {
    fn from(e: ring_core::ReadError) -> Self {
        Self::Read(e)
    }
}

impl RingError {
    /// Whether retrying later can succeed (ring full or pinned, nothing new yet, not ready).
    #[must_use]
    pub const fn is_transient(&self) -> bool {
        matches!(
            self,
            Self::Claim(ring_core::ClaimError::Full { .. } | ring_core::ClaimError::Pinned { .. })
                | Self::Read(ring_core::ReadError::Empty)
                | Self::NotReady
        )
    }
}

/// Monotonic clock in nanoseconds (`CLOCK_MONOTONIC`: comparable between processes of one
/// machine), used for publish timestamps and latencies.
#[must_use]
pub fn monotonic_ns() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    (t.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(t.tv_nsec as u64)
}

/// A unique non-zero token for a table registration (time, pid and a counter).
pub(crate) fn new_token() -> u64 {
    use core::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(1);
    let pid = u64::from(
        rustix::process::getpid()
            .as_raw_nonzero()
            .get()
            .unsigned_abs(),
    );
    // Relaxed: uniqueness only.
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    (monotonic_ns() ^ (pid << 44) ^ n.wrapping_mul(0x9E37_79B9_7F4A_7C15)) | 1
}

/// Sleeps a little more each call, up to 200 µs: the retry pacing of the blocking helpers.
pub(crate) fn backoff(round: &mut u32) {
    *round = round.saturating_add(1);
    if *round < 64 {
        core::hint::spin_loop();
    } else if *round < 256 {
        std::thread::yield_now();
    } else {
        std::thread::sleep(core::time::Duration::from_micros(u64::from(
            (*round - 255).min(200),
        )));
    }
}
