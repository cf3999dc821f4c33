//! The operations the state machine understands, what each returned, and the ring shapes it
//! runs on.

use arbitrary::Arbitrary;
use ring_core::arena::{AllocError, Allocation};
use ring_core::{ClaimError, Config, Error, ReadError, Reclaimed};

pub use crate::model::{group_name, GROUPS};
/// A delivery class, as an operation parameter: the `ops` oracle's type, one copy for both.
pub use crate::ops::Class;

/// Which handle a [`Op::Free`] frees, and as whom.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Arbitrary)]
pub enum FreeMode {
    /// A live allocation, by its owner.
    Owner,
    /// A live allocation, by another owner (refused, nothing freed).
    Foreign,
    /// A handle freed earlier (double free, or stale once its entry is reused).
    Stale,
}

/// A call made by a consumer that was reclaimed while alive ([`Op::ReclaimLive`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Arbitrary)]
pub enum VictimCall {
    /// `try_pin`.
    Pin,
    /// `try_copy` into a slot-sized buffer.
    Copy,
    /// Drops the handle.
    Drop,
}

/// A call made by a producer that was taken over while alive ([`Op::TakeOverLive`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Arbitrary)]
pub enum DisplacedCall {
    /// `try_claim`.
    Claim,
    /// `try_publish`.
    Publish,
    /// `close`.
    Close,
    /// Drops the handle.
    Drop,
}

/// One step of a test: an operation of the producer, a consumer or the allocator.
///
/// Consumer operations name a consumer-table index (`consumer % consumers`); an operation that
/// does not apply (no claim to publish, no consumer there, a pin already held) is
/// [`Outcome::Skipped`] on both sides.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Arbitrary)]
pub enum Op {
    /// The producer claims the next slot (`try_claim`).
    Claim,
    /// Writes `len` bytes (`seed`, `seed + 1`, …) at `offset` of the claimed slot.
    Write {
        /// Byte offset.
        offset: u16,
        /// Byte count.
        len: u16,
        /// First byte of the pattern.
        seed: u8,
    },
    /// Publishes the claimed slot (metadata `[seq, len]`).
    Publish,
    /// Aborts the claim.
    Abort,
    /// Consumer pins its next message and holds the pin.
    Pin {
        /// Consumer-table index.
        consumer: u8,
    },
    /// Consumer drops its pin (consuming the message).
    Unpin {
        /// Consumer-table index.
        consumer: u8,
    },
    /// Consumer copies its next message out with the seqlock into a `buf`-byte buffer.
    CopyRead {
        /// Consumer-table index.
        consumer: u8,
        /// Buffer length in bytes.
        buf: u16,
    },
    /// A new consumer registers.
    Register {
        /// Its delivery class.
        class: Class,
    },
    /// A consumer leaves (drops its pin, then its handle).
    Deregister {
        /// Consumer-table index.
        consumer: u8,
    },
    /// A consumer dies: its handle and pin are forgotten, its entry and pin stay behind.
    Kill {
        /// Consumer-table index.
        consumer: u8,
    },
    /// The producer reclaims an entry: a dead consumer's (as its owner), a free one
    /// (idempotent), or a live one under a wrong owner (refused).
    Reclaim {
        /// Consumer-table index.
        consumer: u8,
    },
    /// Closes the ring.
    Close,
    /// The producer dies (claim and all) and a new one takes over.
    TakeOver,
    /// The adversarial liveness oracle: the producer reclaims a consumer that is in fact alive
    /// (between calls, holding no `Pinned`; a leaked pin is allowed), as its right owner. The
    /// victim keeps its handle; the entry is free for others.
    ReclaimLive {
        /// Consumer-table index.
        consumer: u8,
    },
    /// A reclaimed-while-alive consumer makes a call: it must fail with `Evicted` (or, for a
    /// drop, do nothing) and change nothing in the ring.
    Victim {
        /// Which victim (index into the victims, modulo their number).
        which: u8,
        /// The call.
        call: VictimCall,
    },
    /// A consumer registers with a victim's owner id (two consumers of one process): no call
    /// of the victim may disturb it.
    RegisterAs {
        /// Its delivery class.
        class: Class,
        /// Which victim's owner id.
        which: u8,
    },
    /// The adversarial liveness oracle, producer side: a new producer takes over from the
    /// current one, which is in fact alive (holding no claim) and keeps its handle.
    TakeOverLive {
        /// The new producer has the same owner id (a second handle of one process): only the
        /// epoch tells them apart.
        same_owner: bool,
    },
    /// A displaced producer makes a call: claims and publishes fail with `Displaced`, close
    /// and drop do nothing; the ring does not change.
    Displaced {
        /// Which displaced producer (modulo their number).
        which: u8,
        /// The call.
        call: DisplacedCall,
    },
    /// Consumer holds its next message (`try_hold`), up to the default limit of holds.
    Hold {
        /// Consumer-table index.
        consumer: u8,
    },
    /// Consumer releases one of its holds (`release`), reporting its bytes just before.
    Release {
        /// Consumer-table index.
        consumer: u8,
        /// Which hold, in the order they were taken (modulo how many there are).
        which: u8,
    },
    /// Consumer leaks its pin (`mem::forget`): the bit stays until its next read or its drop
    /// takes it back.
    ForgetPin {
        /// Consumer-table index.
        consumer: u8,
    },
    /// Allocates `len` bytes for `owner % 4`.
    Alloc {
        /// Requested bytes.
        len: u16,
        /// Owner id (mod 4).
        owner: u8,
    },
    /// Writes a live allocation through the bounded writer, then tries `extra` bytes more.
    AllocWrite {
        /// Which live allocation (index into the live set, modulo its size).
        which: u8,
        /// First byte of the pattern.
        seed: u8,
        /// Bytes to try past the reservation (refused when non-zero).
        extra: u8,
    },
    /// Frees an allocation.
    Free {
        /// Which handle (index into the live or freed set, modulo its size).
        which: u8,
        /// By whom, and which set.
        mode: FreeMode,
    },
    /// Frees every allocation of `owner % 4` (reclaiming a dead owner's allocations).
    FreeAllOf {
        /// Owner id (mod 4).
        owner: u8,
    },
    /// The producer publishes [`batch_messages`]`(count, len, seed)` with
    /// `try_publish_batch` (no claim held): the same as that many claim, write, publish in a
    /// row, stopping where a claim fails (an error only when the first one does), `TooLarge`
    /// up front. Longer messages are written into the payload area; small ones into the
    /// message line alone (the payload area keeps what the claim API last wrote there).
    PublishBatch {
        /// Messages in the batch.
        count: u8,
        /// Length of the even-numbered messages (the odd ones have half of it).
        len: u16,
        /// First byte of the first message's pattern.
        seed: u8,
    },
    /// Consumer reads up to `max` messages with `try_read_batch` (each pinned while the
    /// callback runs, then released): the same as that many pin-and-unpin reads, stopping at
    /// the first that fails (an error only when the first one does), the shared cursor stored
    /// once at the end.
    ReadBatch {
        /// Consumer-table index.
        consumer: u8,
        /// Most messages to read.
        max: u8,
    },
    /// The producer creates group [`group_name`]`(group)` (`Producer::create_group`,
    /// idempotent): a record entry whose cursor starts at `head`.
    CreateGroup {
        /// Which group (modulo [`GROUPS`]).
        group: u8,
    },
    /// A new consumer joins group [`group_name`]`(group)` as a member
    /// (`Consumer::join_group`), allowed [`MAX_HOLDS`](ring_core::MAX_HOLDS) holds. A member's `CopyRead` and
    /// `Hold` take messages from the group ([`Outcome::Taken`]), `Release` finishes a hold,
    /// `Kill` leaves its claims behind for `Reclaim` to hand to the group's redelivery queue;
    /// `Pin`, `Unpin`, `ForgetPin`, `ReadBatch` and `ReclaimLive` skip members.
    Join {
        /// Which group (modulo [`GROUPS`]).
        group: u8,
    },
    /// The producer publishes [`pattern`]`(seed, len)` with `try_publish_with_meta` and
    /// metadata `[seed, len]` (no claim held): the same as a claim, a write, `set_meta` and a
    /// publish, `TooLarge` up front. A long message goes into the payload area, a small one
    /// into the message line alone.
    PublishMeta {
        /// Message length.
        len: u16,
        /// First byte of its pattern, and its first metadata word.
        seed: u8,
    },
}

/// The messages [`Op::PublishBatch`] publishes: message `k` has `len` bytes (`k` even) or
/// `len / 2` (`k` odd), so one batch mixes payload-area and inline messages when `len` is
/// above [`INLINE_CAPACITY`](ring_core::INLINE_CAPACITY); its bytes are [`pattern`]`(seed + 31 k, ..)`.
pub fn batch_messages(count: u8, len: u16, seed: u8) -> Vec<Vec<u8>> {
    (0..count)
        .map(|k| {
            let l = if k % 2 == 0 { len } else { len / 2 };
            pattern(seed.wrapping_add(k.wrapping_mul(31)), l as usize)
        })
        .collect()
}

/// What one operation did, compared between the model and the real ring.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The operation did not apply.
    Skipped,
    /// A claim succeeded for this sequence.
    Claimed(u64),
    /// A claim failed.
    ClaimFailed(ClaimError),
    /// A write into the claimed slot.
    Wrote(Result<(), (usize, usize)>),
    /// Published this sequence.
    Published(u64),
    /// Aborted the claim.
    Aborted,
    /// A read (pin or copy) returned a message.
    Read {
        /// Its sequence.
        seq: u64,
        /// Messages skipped before it.
        missed: u64,
        /// Its bytes.
        bytes: Vec<u8>,
        /// Its metadata.
        meta: [u64; 2],
    },
    /// A read failed.
    ReadFailed(ReadError),
    /// A pin was dropped.
    Unpinned,
    /// A hold was released; its message's sequence and bytes just before the release (the
    /// bytes it had when it was taken, or the producer overwrote a held slot).
    Released {
        /// The held message's sequence.
        seq: u64,
        /// Its bytes.
        bytes: Vec<u8>,
    },
    /// Registered at this table index.
    Registered(usize),
    /// Registration failed.
    RegisterFailed(Error),
    /// A consumer left or died.
    Gone,
    /// A reclaim.
    Reclaim(Result<Reclaimed, Error>),
    /// The ring was closed.
    Closed,
    /// A new producer took over.
    TookOver,
    /// A pin was leaked.
    Leaked,
    /// An allocation.
    Alloc(Result<Allocation, AllocError>),
    /// A bounded write: the in-bounds part's result, then the overflowing part's.
    AllocWrote(Result<(), AllocError>, Result<(), AllocError>),
    /// A free.
    Free(Result<u64, AllocError>),
    /// `free_all_of`: count and bytes.
    FreedAll(Result<(u64, u64), AllocError>),
    /// `try_publish_batch`: how many were published, or the error.
    PublishedBatch(Result<usize, ClaimError>),
    /// `try_read_batch`: each message read (as [`Outcome::Read`]), or the error.
    ReadBatch(Result<Vec<Outcome>, ReadError>),
    /// `create_group`: the record's table index, or the error.
    Group(Result<usize, Error>),
    /// A group member's read (copy or hold) took a message.
    Taken {
        /// Its sequence.
        seq: u64,
        /// Its bytes.
        bytes: Vec<u8>,
        /// Its metadata.
        meta: [u64; 2],
        /// Handed out before (to a member that died, or by a read that did not finish).
        redelivered: bool,
    },
    /// The real side saw a property broken inside a call (the model never returns this, so
    /// the step fails naming it).
    Broken(String),
}

/// The ring's shape for a model run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ModelConfig {
    /// Slots.
    pub slots: u32,
    /// Bytes per slot (a multiple of 8).
    pub capacity: u32,
    /// Consumer-table entries.
    pub consumers: u32,
    /// Allocator arena bytes (0: no allocator, allocator ops are skipped).
    pub arena: u64,
    /// Allocator live ceiling.
    pub max_live: u32,
    /// A never-stall ring (`Config::with_never_stall`, at least 3 slots): the producer writes
    /// each message into a slot nobody pins and routes it from its home slot
    /// (`RingModel::claim` makes the choice).
    pub never_stall: bool,
}

impl ModelConfig {
    /// A small ring that wraps often: 4 slots of 32 bytes, 3 consumers, a 1 KiB arena with 6
    /// live allocations at most.
    pub const fn small() -> Self {
        Self::shape(4, 32, 3, 1024, 6)
    }

    /// A plain ring of `slots` slots of `capacity` bytes and `consumers` entries, with an
    /// allocator of `arena` bytes and `max_live` entries (`arena` 0: none).
    pub const fn shape(
        slots: u32,
        capacity: u32,
        consumers: u32,
        arena: u64,
        max_live: u32,
    ) -> Self {
        Self {
            slots,
            capacity,
            consumers,
            arena,
            max_live,
            never_stall: false,
        }
    }

    /// A plain ring without an allocator ([`shape`](Self::shape) with no arena).
    pub const fn ring(slots: u32, capacity: u32, consumers: u32) -> Self {
        Self::shape(slots, capacity, consumers, 0, 0)
    }

    /// Slots wider than the message line: 4 slots of 160 bytes, so messages of up to
    /// [`INLINE_CAPACITY`](ring_core::INLINE_CAPACITY) bytes travel inline and longer ones in the payload area; 3
    /// consumers, a 1 KiB arena with 6 live allocations at most.
    pub const fn wide() -> Self {
        Self::shape(4, 160, 3, 1024, 6)
    }

    /// This shape as a never-stall ring (or not).
    #[must_use]
    pub const fn with_never_stall(mut self, never_stall: bool) -> Self {
        self.never_stall = never_stall;
        self
    }

    /// The ring-core configuration.
    pub fn config(&self) -> Config {
        let c = Config::new(self.slots, self.capacity)
            .with_consumers(self.consumers)
            .with_never_stall(self.never_stall);
        if self.arena == 0 {
            c
        } else {
            c.with_allocator(self.arena, self.max_live)
        }
    }
}

/// Owner ids: the producer's first, then takeovers count up.
pub const PRODUCER_OWNER: u64 = 1;
/// Consumer owner ids are `CONSUMER_OWNER_BASE + n` for the n-th registration.
pub const CONSUMER_OWNER_BASE: u64 = 100;
/// Allocator owners used by the ops.
pub const ALLOC_OWNERS: u8 = 4;

/// Bytes written by [`Op::Write`] and [`Op::AllocWrite`].
pub fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len).map(|i| seed.wrapping_add(i as u8)).collect()
}

/// A model/real disagreement or a broken invariant, with a description.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failure(pub String);

impl core::fmt::Display for Failure {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Failure {}

impl From<String> for Failure {
    fn from(s: String) -> Self {
        Self(s)
    }
}
