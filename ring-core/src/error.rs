//! Error types. Every variant says what went wrong and what to do about it; nothing here panics.

use core::fmt;

/// A [`Config`](crate::Config) that cannot be laid out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LayoutError {
    /// Slot count outside `1..=max`.
    Slots {
        /// The value given.
        value: u32,
        /// The largest allowed.
        max: u32,
    },
    /// Consumer count outside `1..=max`.
    Consumers {
        /// The value given.
        value: u32,
        /// The largest allowed.
        max: u32,
    },
    /// Slot capacity outside `8..=max`.
    SlotCapacity {
        /// The value given.
        value: u32,
        /// The largest allowed.
        max: u32,
    },
    /// Allocator arena or ceiling out of range (arena too large, or one of the two zero).
    Allocator,
    /// History longer than the ring (`0..=slots`).
    History {
        /// The value given.
        value: u32,
        /// The largest allowed (the slot count).
        max: u32,
    },
    /// A never-stall ring with fewer than 3 slots (one holds the newest message, one takes
    /// the next, and a reader needs one to pin).
    NeverStallSlots {
        /// The slot count given.
        value: u32,
    },
    /// The segment size does not fit in the address space.
    Overflow,
    /// The memory given is shorter than the geometry needs.
    TooShort {
        /// Bytes needed.
        needed: usize,
        /// Bytes given.
        len: usize,
    },
    /// The memory given is not aligned to [`CACHE_LINE`](crate::CACHE_LINE).
    Misaligned,
}

impl fmt::Display for LayoutError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Slots { value, max } => {
                write!(f, "slot count {value} is out of range: choose 1..={max}")
            }
            Self::Consumers { value, max } => {
                write!(
                    f,
                    "consumer count {value} is out of range: choose 1..={max}"
                )
            }
            Self::SlotCapacity { value, max } => {
                write!(
                    f,
                    "slot capacity {value} bytes is out of range: choose 8..={max}"
                )
            }
            Self::History { value, max } => write!(
                f,
                "history {value} is longer than the ring: at most the slot count ({max})"
            ),
            Self::NeverStallSlots { value } => write!(
                f,
                "a never-stall ring needs at least 3 slots, got {value}: the producer keeps the \
                 newest message and writes the next while readers pin (slots >= pins + 2)"
            ),
            Self::Allocator => f.write_str(
                "allocator arena/ceiling out of range: give both a non-zero arena (at most 1 TiB) \
                 and a non-zero live ceiling, or neither",
            ),
            Self::Overflow => {
                f.write_str("segment size overflows the address space: use fewer or smaller slots")
            }
            Self::TooShort { needed, len } => {
                write!(
                    f,
                    "memory of {len} bytes is too short for this geometry ({needed} bytes needed)"
                )
            }
            Self::Misaligned => write!(
                f,
                "segment memory must be aligned to {} bytes",
                crate::CACHE_LINE
            ),
        }
    }
}

/// Why existing bytes were refused as a segment. The bytes are untrusted; this names the first
/// field found wrong.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttachError {
    /// Fewer bytes than a header, or than the header's geometry says.
    Truncated {
        /// Bytes the segment needs.
        needed: u64,
        /// Bytes that are there.
        len: u64,
    },
    /// The memory is not aligned to [`CACHE_LINE`](crate::CACHE_LINE).
    Misaligned,
    /// The first word is not [`MAGIC`](crate::layout::MAGIC): not a ring segment.
    BadMagic {
        /// The word found.
        found: u64,
    },
    /// Created by an incompatible version of this library.
    AbiMismatch {
        /// Version in the segment.
        found: u32,
        /// Version of this library.
        expected: u32,
    },
    /// Created with another layout (other architecture, cache-line size or build).
    LayoutMismatch {
        /// Fingerprint in the segment.
        found: u64,
        /// Fingerprint of this build.
        expected: u64,
    },
    /// The creator has not finished initialising it (or died while doing so).
    NotInitialized {
        /// The init state word found.
        state: u32,
    },
    /// The geometry fields do not describe a valid ring.
    BadGeometry(LayoutError),
    /// A region offset or length in the header disagrees with the geometry.
    FieldMismatch {
        /// Which header field.
        field: &'static str,
        /// Value in the segment.
        found: u64,
        /// Value the geometry implies.
        expected: u64,
    },
}

impl fmt::Display for AttachError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Truncated { needed, len } => write!(
                f,
                "segment truncated: {len} bytes present, {needed} needed (a peer shrank it, or it is not a ring)"
            ),
            Self::Misaligned => write!(f, "segment memory is not aligned to {} bytes", crate::CACHE_LINE),
            Self::BadMagic { found } => write!(f, "not a ring segment (magic {found:#018x})"),
            Self::AbiMismatch { found, expected } => write!(
                f,
                "segment ABI version {found} is not supported (this build speaks {expected}): use matching library versions"
            ),
            Self::LayoutMismatch { found, expected } => write!(
                f,
                "segment layout fingerprint {found:#018x} differs from this build's {expected:#018x}: peers must share architecture and build"
            ),
            Self::NotInitialized { state } => write!(
                f,
                "segment is not initialised (state {state}): its creator is still formatting it or died doing so; retry, or remove it"
            ),
            Self::BadGeometry(e) => write!(f, "segment header has an invalid geometry: {e}"),
            Self::FieldMismatch { field, found, expected } => write!(
                f,
                "segment header field `{field}` is {found}, but the geometry implies {expected}: the segment is corrupt"
            ),
        }
    }
}

/// Errors of registration, ownership and recovery.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Error {
    /// Another producer owns the ring.
    ProducerExists {
        /// Its owner id.
        owner: u64,
    },
    /// The producer named as dead is not the ring's producer (someone else took over).
    OwnerMismatch {
        /// The owner id found.
        found: u64,
    },
    /// Every consumer-table entry is taken.
    ConsumerTableFull {
        /// Number of entries.
        capacity: u32,
    },
    /// A consumer-table index beyond the table.
    NoSuchConsumer {
        /// The index given.
        index: usize,
    },
    /// The consumer-table entry asked for is taken (or not in a state a registration can use).
    EntryBusy {
        /// The index given.
        index: usize,
    },
    /// The consumer's entry was reclaimed: the consumer is no longer registered.
    Evicted,
    /// No group of that name exists on the ring (the producer creates groups:
    /// [`Producer::create_group`](crate::Producer::create_group)).
    NoSuchGroup,
    /// A dead group member's unfinished messages do not fit in its group's redelivery queue
    /// yet: it stays registered (its messages keep gating) until members take queued ones.
    RedeliveryFull {
        /// Messages to hand over.
        needed: usize,
        /// Free words in the queue.
        free: usize,
    },
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::ProducerExists { owner } => write!(
                f,
                "the ring already has a producer (owner {owner:#x}); if it died, take over with Producer::take_over"
            ),
            Self::OwnerMismatch { found } => {
                write!(f, "the entry is owned by {found:#x}, not the owner named: nothing was changed")
            }
            Self::ConsumerTableFull { capacity } => write!(
                f,
                "all {capacity} consumer entries are taken: reclaim dead consumers or create the ring with more"
            ),
            Self::NoSuchConsumer { index } => write!(f, "no consumer entry {index}"),
            Self::EntryBusy { index } => {
                write!(f, "consumer entry {index} is taken: register into another entry")
            }
            Self::Evicted => f.write_str(
                "this consumer's entry was reclaimed (it was judged dead): register again",
            ),
            Self::NoSuchGroup => f.write_str(
                "no group of that name on this ring: the producer creates groups (create_group)",
            ),
            Self::RedeliveryFull { needed, free } => write!(
                f,
                "a dead member's {needed} unfinished messages do not fit in its group's redelivery queue ({free} free): retry once members took some"
            ),
        }
    }
}

/// Why the producer could not claim the next slot. All are transient except `Closed`,
/// `Corrupt`, `Displaced` and `TooLarge`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClaimError {
    /// A gating consumer has not consumed the message the next slot holds.
    Full {
        /// Its consumer-table index.
        consumer: usize,
        /// Its cursor (next sequence it will read).
        cursor: u64,
    },
    /// Readers pin the next slot.
    Pinned {
        /// The slot index.
        slot: usize,
        /// Bit `i` set: consumer `i` holds a pin.
        readers: u32,
    },
    /// The ring was closed.
    Closed,
    /// A sequence number or word in shared memory is impossible: a peer corrupted the segment.
    Corrupt(&'static str),
    /// Another producer took the ring over (the producer line's owner or epoch changed since
    /// this producer started): this producer publishes nothing any more. Not transient.
    Displaced {
        /// The producer line's owner id now.
        owner: u64,
        /// The producer line's epoch now.
        epoch: u32,
    },
    /// The message does not fit in a slot (nothing was claimed or written).
    TooLarge {
        /// The message length.
        len: usize,
        /// The slot capacity.
        capacity: usize,
    },
}

impl fmt::Display for ClaimError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Full { consumer, cursor } => write!(
                f,
                "ring full: gating consumer {consumer} has not consumed message {cursor}; wait, or reclaim it if its process died"
            ),
            Self::Pinned { slot, readers } => {
                write!(f, "slot {slot} is pinned by readers {readers:#b}; retry after they release it")
            }
            Self::Closed => f.write_str("the ring is closed"),
            Self::Corrupt(what) => write!(f, "corrupt segment: {what}"),
            Self::Displaced { owner, epoch } => write!(
                f,
                "this producer was displaced: owner {owner:#x} (epoch {epoch}) took the ring over; nothing was published"
            ),
            Self::TooLarge { len, capacity } => write!(
                f,
                "message of {len} bytes does not fit in a {capacity}-byte slot: use the allocator or larger slots"
            ),
        }
    }
}

/// Abort codes with a meaning every party shares: what [`Producer::abort`] is given and
/// [`ReadError::Aborted`] carries. Codes below [`APPLICATION`](abort_code::APPLICATION) are
/// reserved for these; an application's own codes start there.
///
/// [`Producer::abort`]: crate::Producer::abort
///
/// ```
/// use ring_core::{abort_code, ReadError};
/// let e = ReadError::Aborted { code: abort_code::TIMED_OUT };
/// assert!(e.to_string().contains("gave up waiting"));
/// assert_eq!(abort_code::describe(abort_code::APPLICATION + 7), None);
/// ```
pub mod abort_code {
    /// The producer was dropped without closing the ring (an error, a panic or an early
    /// return that said nothing more).
    pub const DROPPED: u16 = 0;
    /// The producer gave up waiting: its consumers held the ring back past its timeout.
    pub const TIMED_OUT: u16 = 1;
    /// The producer's own input failed (a read error, a source that broke).
    pub const INPUT_FAILED: u16 = 2;
    /// A gating reader died with messages unread, and the producer ended the stream.
    pub const READER_LOST: u16 = 3;
    /// The producer was interrupted (SIGINT, SIGTERM, a cancellation).
    pub const INTERRUPTED: u16 = 4;
    /// The segment was truncated or corrupted under the producer.
    pub const SEGMENT_BROKEN: u16 = 5;
    /// The first code an application may give its own meaning.
    pub const APPLICATION: u16 = 256;

    /// What a shared code means; `None` for an application's code or an unassigned one.
    pub const fn describe(code: u16) -> Option<&'static str> {
        match code {
            DROPPED => Some("the producer was dropped without closing the stream"),
            TIMED_OUT => Some("the producer gave up waiting for its consumers"),
            INPUT_FAILED => Some("the producer's input failed"),
            READER_LOST => Some("a gating reader died with messages unread"),
            INTERRUPTED => Some("the producer was interrupted"),
            SEGMENT_BROKEN => Some("the segment was truncated or corrupted under the producer"),
            _ => None,
        }
    }
}

/// Why a consumer read returned no message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadError {
    /// Nothing new has been published.
    Empty,
    /// The producer closed the ring and everything readable was read: the stream is complete.
    Closed,
    /// The producer aborted the stream (it failed, or was dropped without closing) and
    /// everything readable was read: messages may be missing at the end.
    Aborted {
        /// The producer's abort code ([`abort_code`]; 0 when it was dropped without one).
        code: u16,
    },
    /// The message was overwritten while being read, more often than the retry bound allows
    /// (the consumer is far too slow for the producer): retry.
    Lagging,
    /// The caller's buffer is shorter than the message.
    BufferTooSmall {
        /// The message length.
        needed: usize,
    },
    /// A length or stamp in shared memory is impossible: a peer corrupted the segment.
    Corrupt(&'static str),
    /// This consumer's entry was reclaimed (the producer judged it dead): register again.
    Evicted,
    /// The wait bound ran out.
    Timeout,
    /// The consumer already holds as many messages as it may
    /// ([`Consumer::max_holds`](crate::Consumer::max_holds)): release one first. Nothing was
    /// read.
    TooManyHolds {
        /// The consumer's limit.
        max: usize,
    },
    /// The [`Hold`](crate::Hold) is not one this consumer has: released already (or by
    /// [`Consumer::release_all`](crate::Consumer::release_all)), or another consumer's.
    NotHeld,
    /// The call does not apply to this consumer (the reason says why); nothing changed.
    NotSupported(&'static str),
}

impl fmt::Display for ReadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Empty => f.write_str("no new message"),
            Self::Closed => f.write_str("the ring is closed and drained"),
            Self::Aborted { code } => {
                write!(f, "the producer aborted the stream (code {code}")?;
                if let Some(why) = abort_code::describe(*code) {
                    write!(f, ": {why}")?;
                }
                f.write_str(") and the ring is drained: messages may be missing at the end")
            }
            Self::Lagging => {
                f.write_str("messages were overwritten faster than they could be read; retry")
            }
            Self::BufferTooSmall { needed } => {
                write!(f, "buffer too small: the message has {needed} bytes")
            }
            Self::Corrupt(what) => write!(f, "corrupt segment: {what}"),
            Self::Evicted => f.write_str("this consumer was reclaimed as dead; register again"),
            Self::Timeout => f.write_str("timed out waiting for a message"),
            Self::TooManyHolds { max } => write!(
                f,
                "this consumer already holds {max} messages, its limit: release one first"
            ),
            Self::NotSupported(why) => write!(f, "not supported: {why}"),
            Self::NotHeld => f.write_str(
                "this hold is not one this consumer has (released already, or another \
                 consumer's)",
            ),
        }
    }
}

impl core::error::Error for LayoutError {}
impl core::error::Error for AttachError {}
impl core::error::Error for Error {}
impl core::error::Error for ClaimError {}
impl core::error::Error for ReadError {}
