//! A reference model of the ring and its allocator, and the operations both understand.
//!
//! [`Model`] is an executable specification in plain data (no atomics, no unsafe): slots with a
//! stamp, bytes and a pin set; a consumer table; the producer's claim; the allocator's live set
//! and granule map. [`Real`](crate::real::Real) drives a real ring over any
//! [`Memory`](ring_core::Memory) with the same [`Op`]s. [`run`](crate::real::run) applies a
//! sequence to both, compares every [`Outcome`], and after every step checks every invariant of
//! `docs/DESIGN.md` ([`Real::check`](crate::real::Real::check) against the model). The proptest
//! state machine, the conformance suite and the fuzz targets all go through it.
//!
//! Allocator placement is policy (next-fit today): the model does not predict offsets. It checks
//! that the offset the real allocator chose is valid (aligned, inside the arena, overlapping no
//! live allocation) and that `OutOfSpace` is reported exactly when no free run is long enough.

use arbitrary::Arbitrary;
use ring_core::arena::{AllocError, Allocation, GRANULE_BYTES};
use ring_core::layout::{GROUP_CLAIMS, OWNER_GROUP};
use ring_core::{
    ClaimError, Config, Error, ReadError, Reclaimed, INLINE_CAPACITY, MAX_HOLDS, READ_RETRIES,
};
use std::collections::BTreeSet;

/// A delivery class, as an operation parameter: the fuzz oracles' type, one copy for both.
pub use ring_oracles::ops::Class;

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
    /// up front. Messages are written into the payload area; small ones are copied into the
    /// message line at publish.
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
    /// (`Consumer::join_group`), allowed [`MAX_HOLDS`] holds. A member's `CopyRead` and
    /// `Hold` take messages from the group ([`Outcome::Taken`]), `Release` finishes a hold,
    /// `Kill` leaves its claims behind for `Reclaim` to hand to the group's redelivery queue;
    /// `Pin`, `Unpin`, `ForgetPin`, `ReadBatch` and `ReclaimLive` skip members.
    Join {
        /// Which group (modulo [`GROUPS`]).
        group: u8,
    },
}

/// Distinct group names the ops use.
pub const GROUPS: u8 = 2;

/// The name of group `group` (modulo [`GROUPS`]).
pub fn group_name(group: u8) -> &'static str {
    ["workers", "loggers"][usize::from(group % GROUPS)]
}

/// The messages [`Op::PublishBatch`] publishes: message `k` has `len` bytes (`k` even) or
/// `len / 2` (`k` odd), so one batch mixes payload-area and inline messages when `len` is
/// above [`INLINE_CAPACITY`]; its bytes are [`pattern`]`(seed + 31 k, ..)`.
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
    /// ([`Model::never_stall_slot`] is the choice).
    pub never_stall: bool,
}

impl ModelConfig {
    /// A small ring that wraps often: 4 slots of 32 bytes, 3 consumers, a 1 KiB arena with 6
    /// live allocations at most.
    pub const fn small() -> Self {
        Self {
            slots: 4,
            capacity: 32,
            consumers: 3,
            arena: 1024,
            max_live: 6,
            never_stall: false,
        }
    }

    /// Slots wider than the message line: 4 slots of 160 bytes, so messages of up to
    /// [`INLINE_CAPACITY`] bytes travel inline and longer ones in the payload area; 3
    /// consumers, a 1 KiB arena with 6 live allocations at most.
    pub const fn wide() -> Self {
        Self {
            slots: 4,
            capacity: 160,
            consumers: 3,
            arena: 1024,
            max_live: 6,
            never_stall: false,
        }
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

/// One slot in the model.
#[derive(Clone, Debug)]
pub struct ModelSlot {
    /// Seqlock stamp: `2 seq + 1` while claimed for `seq` (or after an abort), `2 seq + 2`
    /// once `seq` is published.
    pub stamp: u64,
    /// All payload bytes of the slot (the payload area).
    pub bytes: Vec<u8>,
    /// The slot header's inline words ([`INLINE_CAPACITY`] bytes): where a message of at most
    /// that many bytes travels.
    pub inline: Vec<u8>,
    /// The published message's length.
    pub len: usize,
    /// The published message's metadata.
    pub meta: [u64; 2],
}

impl ModelSlot {
    /// The published message's bytes: in the inline words when it is small, else in the
    /// payload area.
    pub fn message(&self) -> &[u8] {
        if self.len <= INLINE_CAPACITY {
            &self.inline[..self.len]
        } else {
            &self.bytes[..self.len]
        }
    }
}

/// One consumer-table entry in the model.
#[derive(Clone, Debug)]
pub struct ModelConsumer {
    /// Owner id.
    pub owner: u64,
    /// Delivery class.
    pub class: Class,
    /// False once killed: the entry stays until reclaimed.
    pub alive: bool,
    /// The consumer's local next sequence.
    pub next: u64,
    /// The shared cursor (what the producer's gating sees).
    pub cursor: u64,
    /// Head when it registered.
    pub start: u64,
    /// Messages received.
    pub received: u64,
    /// Messages missed.
    pub missed: u64,
    /// The held pin: (slot, seq).
    pub pin: Option<(usize, u64)>,
    /// The held messages (`try_hold`), in the order taken: (slot, seq, bytes).
    pub holds: Vec<(usize, u64, Vec<u8>)>,
    /// The pin was leaked (`mem::forget`): its bit stays, but no `Pinned` exists.
    pub leaked: bool,
    /// A group member's state; `None` for a lone consumer.
    pub member: Option<ModelMember>,
}

/// A group member's own state (the rest is a gating [`ModelConsumer`]'s: its cursor stays at
/// `head` as of the join and gates nothing; it misses nothing).
#[derive(Clone, Debug)]
pub struct ModelMember {
    /// The table index of its group's record.
    pub record: usize,
    /// Its entry's claim words: 0, or `seq + 1` of a message taken and not finished, in the
    /// word the member stored it in (the first empty one).
    pub claims: [u64; GROUP_CLAIMS],
    /// The claim word of a message handed out but not finished (a buffer too small): the next
    /// read hands it out again, flagged.
    pub pending: Option<usize>,
}

/// A group's record (a consumer-table entry owned by the ring).
#[derive(Clone, Debug)]
pub struct ModelGroup {
    /// Which of the [`group_name`]s.
    pub group: u8,
    /// The next message no member has taken.
    pub cursor: u64,
    /// The redelivery queue's words: 0, or `seq + 1` of a dead member's unfinished message.
    pub queue: [u64; GROUP_CLAIMS],
    /// Every message handed out to a member at least once (the exactly-once ledger).
    pub handed: BTreeSet<u64>,
    /// Messages owed a redelivery: handed out, not finished, and given back (by a reclaim of
    /// the dead member that held them, or by a read that could not finish).
    pub owed: BTreeSet<u64>,
}

impl ModelGroup {
    /// The lowest sequence in the queue (`u64::MAX` when empty).
    fn queue_floor(&self) -> u64 {
        words_floor(&self.queue)
    }
}

/// The lowest `seq` of words holding `seq + 1` (`u64::MAX` when all are 0).
fn words_floor(words: &[u64]) -> u64 {
    words
        .iter()
        .filter(|&&v| v != 0)
        .map(|v| v - 1)
        .min()
        .unwrap_or(u64::MAX)
}

/// The producer's claim in the model.
#[derive(Clone, Copy, Debug)]
pub struct ModelClaim {
    /// Slot index.
    pub slot: usize,
    /// Sequence.
    pub seq: u64,
    /// Message length so far.
    pub len: usize,
}

/// A live allocation in the model.
#[derive(Clone, Debug)]
pub struct ModelAlloc {
    /// The allocation the real allocator returned (validated).
    pub alloc: Allocation,
    /// Owner.
    pub owner: u16,
    /// Contents, once written through the bounded writer.
    pub bytes: Option<Vec<u8>>,
}

/// The reference model.
#[derive(Clone, Debug)]
pub struct Model {
    /// Shape.
    pub cfg: ModelConfig,
    /// Messages published.
    pub head: u64,
    /// Closed flag.
    pub closed: bool,
    /// Current producer owner id.
    pub producer_owner: u64,
    /// The producer line's epoch (bumped by every producer start).
    pub epoch: u32,
    /// Owner ids of consumers reclaimed while alive that still hold their handles.
    pub victims: Vec<u64>,
    /// Producers taken over while alive that still hold their handles.
    pub displaced: usize,
    /// The claim in progress.
    pub claim: Option<ModelClaim>,
    /// Slots.
    pub slots: Vec<ModelSlot>,
    /// Consumer table.
    pub consumers: Vec<Option<ModelConsumer>>,
    /// Group records, by table index (an entry holds a consumer or a record, or is free).
    pub records: Vec<Option<ModelGroup>>,
    /// Registrations so far (for owner ids).
    pub registrations: u64,
    /// Live allocations, in allocation order.
    pub live: Vec<ModelAlloc>,
    /// Freed handles (most recent last), with the entry's handle history for staleness.
    pub freed: Vec<u64>,
    /// Granule map: true = allocated.
    pub granules: Vec<bool>,
    /// Never-stall rings: each home slot's route, `(seq, slot)` of the newest message published
    /// whose home it is (`None` before the first); always `None` on other rings.
    pub routes: Vec<Option<(u64, usize)>>,
    /// Never-stall rings: the slot of the newest published message (the producer never claims
    /// it); `None` before the first publish.
    pub newest: Option<usize>,
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

/// Returns `Err(Failure)` with a formatted message when `cond` is false.
#[macro_export]
macro_rules! ensure {
    ($cond:expr, $($msg:tt)+) => {
        if !$cond {
            return Err($crate::model::Failure(format!($($msg)+)));
        }
    };
}

impl Model {
    /// An empty ring of shape `cfg` (slot capacity rounded up to 8 as ring-core does).
    pub fn new(cfg: &ModelConfig) -> Self {
        let cap = cfg.capacity.div_ceil(8) as usize * 8;
        let granules = if cfg.arena == 0 {
            0
        } else {
            cfg.arena.div_ceil(GRANULE_BYTES) as usize
        };
        Self {
            cfg: *cfg,
            head: 0,
            closed: false,
            producer_owner: PRODUCER_OWNER,
            epoch: 1,
            victims: Vec::new(),
            displaced: 0,
            claim: None,
            slots: (0..cfg.slots)
                .map(|_| ModelSlot {
                    stamp: 0,
                    bytes: vec![0; cap],
                    inline: vec![0; INLINE_CAPACITY],
                    len: 0,
                    meta: [0; 2],
                })
                .collect(),
            consumers: vec![None; cfg.consumers as usize],
            records: vec![None; cfg.consumers as usize],
            registrations: 0,
            live: Vec::new(),
            freed: Vec::new(),
            granules: vec![false; granules],
            routes: vec![None; cfg.slots as usize],
            newest: None,
        }
    }

    /// The slot message `seq` (published) is in, as readers find it: its home slot on a plain
    /// ring; on a never-stall ring the slot its home slot's route names, `None` when the route
    /// names a later message (an overrun). The caller still checks the slot's stamp.
    pub fn locate(&self, seq: u64) -> Option<usize> {
        locate(&self.routes, self.cfg.never_stall, seq)
    }

    /// The route word ring-core keeps in slot `home`'s pin line (0: none).
    pub fn route_word(&self, home: usize) -> u64 {
        self.routes[home].map_or(0, |(seq, slot)| ring_core::layout::route_word(seq, slot))
    }

    /// Message `seq` got its final stamp in `slot`: on a never-stall ring its home slot routes
    /// to it and it is the newest.
    fn published(&mut self, seq: u64, slot: usize) {
        if self.cfg.never_stall {
            let n = self.slots.len() as u64;
            self.routes[(seq % n) as usize] = Some((seq, slot));
            self.newest = Some(slot);
        }
    }

    /// The message slot `slot` holds for the claim of `seq`: `None` for none (stamp 0 or odd)
    /// or one not below `seq`.
    fn message_in(&self, slot: usize, seq: u64) -> Option<u64> {
        let stamp = self.slots[slot].stamp;
        if stamp == 0 || stamp % 2 == 1 {
            return None;
        }
        Some(stamp / 2 - 1).filter(|&m| m < seq)
    }

    /// The never-stall claim of the next sequence: the slot it takes, or why it is refused.
    ///
    /// The home slot (`seq % slots`) when it is not the newest message's, nobody pins it, its
    /// message (if any) is at least a lap old and every gating consumer and group is done with
    /// it (below `min(gating floor, seq)`); else, among the slots other than the newest
    /// message's that nobody pins, the one with the oldest message (none beats any, the lowest
    /// index wins ties): refused `Full` when that one is still needed, `Pinned` (naming the
    /// home slot if it is pinned and not the newest's, else the first pinned slot) when there
    /// is none.
    pub fn never_stall_slot(&self) -> Result<usize, ClaimError> {
        let n = self.slots.len() as u64;
        let seq = self.head;
        let home = (seq % n) as usize;
        let (cursor, consumer) = self.gating_floor();
        let bound = cursor.min(seq);
        let done = |m: Option<u64>| m.is_none_or(|m| m < bound);
        let free = |slot: usize| self.readers(slot) == 0;
        let newest = |slot: usize| self.newest == Some(slot);
        let m = self.message_in(home, seq);
        if !newest(home) && m.is_none_or(|m| m + n <= seq) && done(m) && free(home) {
            return Ok(home);
        }
        let mut best: Option<(usize, Option<u64>)> = None;
        for slot in (0..self.slots.len()).filter(|&s| !newest(s) && free(s)) {
            let m = self.message_in(slot, seq);
            let older = match (best, m) {
                (None, _) | (Some((_, Some(_))), None) => true,
                (Some((_, Some(b))), Some(m)) => m < b,
                (Some((_, None)), _) => false,
            };
            if older {
                best = Some((slot, m));
            }
        }
        match best {
            Some((slot, m)) if done(m) => Ok(slot),
            Some(_) => Err(ClaimError::Full { consumer, cursor }),
            None => {
                let slot = if newest(home) {
                    (0..self.slots.len()).find(|&s| !newest(s)).unwrap_or(home)
                } else {
                    home
                };
                Err(ClaimError::Pinned {
                    slot,
                    readers: self.readers(slot),
                })
            }
        }
    }

    /// Slot capacity in bytes.
    pub fn capacity(&self) -> usize {
        self.slots.first().map_or(0, |s| s.bytes.len())
    }

    /// Reader bits of `slot`: bit `i` when consumer `i` (alive or dead) pins it. A gating
    /// consumer sets none: its pin is its cursor (the gating check keeps the producer off).
    pub fn readers(&self, slot: usize) -> u32 {
        let mut bits = 0;
        for (i, c) in self.consumers.iter().enumerate() {
            let Some(c) = c else { continue };
            if c.class == Class::Gating {
                continue;
            }
            let pinned = c.pin.is_some_and(|(s, _)| s == slot);
            if pinned || c.holds.iter().any(|h| h.0 == slot) {
                bits |= 1 << i;
            }
        }
        bits
    }

    fn index(&self, consumer: u8) -> usize {
        consumer as usize % self.consumers.len()
    }

    /// The next owner id a registration gets.
    pub fn next_consumer_owner(&self) -> u64 {
        CONSUMER_OWNER_BASE + self.registrations
    }

    /// Applies `op`; `observed` is the real ring's outcome of the same op, used only to learn
    /// where the allocator placed an allocation (after checking the placement is valid).
    ///
    /// # Errors
    /// A [`Failure`] when the real allocator's placement is invalid.
    pub fn apply(&mut self, op: Op, observed: &Outcome) -> Result<Outcome, Failure> {
        Ok(match op {
            Op::Claim => self.claim(),
            Op::Write { offset, len, seed } => self.write(offset as usize, len as usize, seed),
            Op::Publish => match self.claim.take() {
                None => Outcome::Skipped,
                Some(c) => {
                    let s = &mut self.slots[c.slot];
                    // Publish zeroes the last word past the message, so a pinned word view is
                    // padded even where a short message overwrote a longer one.
                    let pad_end = c.len.div_ceil(8) * 8;
                    s.bytes[c.len..pad_end].fill(0);
                    if c.len <= INLINE_CAPACITY {
                        // A small message written into the payload area travels inline: its
                        // padded words are copied into the message line.
                        s.inline[..pad_end].copy_from_slice(&s.bytes[..pad_end]);
                    }
                    s.stamp = 2 * c.seq + 2;
                    s.len = c.len;
                    s.meta = [c.seq, c.len as u64];
                    self.head = c.seq + 1;
                    self.published(c.seq, c.slot);
                    Outcome::Published(c.seq)
                }
            },
            Op::Abort => match self.claim.take() {
                None => Outcome::Skipped,
                Some(_) => Outcome::Aborted,
            },
            Op::Pin { consumer } if self.is_member(self.index(consumer)) => Outcome::Skipped,
            Op::Pin { consumer } => self.read(self.index(consumer), None),
            Op::Hold { consumer } if self.is_member(self.index(consumer)) => {
                self.member_take(self.index(consumer), None, observed)?
            }
            Op::Hold { consumer } => self.hold(self.index(consumer)),
            Op::Release { consumer, which } if self.is_member(self.index(consumer)) => {
                self.member_release(self.index(consumer), which)
            }
            Op::Release { consumer, which } => {
                let i = self.index(consumer);
                match &mut self.consumers[i] {
                    Some(c) if c.alive && (c.pin.is_none() || c.leaked) && !c.holds.is_empty() => {
                        let (_, seq, bytes) = c.holds.remove(which as usize % c.holds.len());
                        c.cursor = shared_cursor(c);
                        Outcome::Released { seq, bytes }
                    }
                    _ => Outcome::Skipped,
                }
            }
            Op::CopyRead { consumer, buf } if self.is_member(self.index(consumer)) => {
                self.member_take(self.index(consumer), Some(buf as usize), observed)?
            }
            Op::CopyRead { consumer, buf } => self.read(self.index(consumer), Some(buf as usize)),
            Op::Unpin { consumer } => {
                let i = self.index(consumer);
                match &mut self.consumers[i] {
                    Some(c) if c.alive && c.pin.is_some() && !c.leaked => {
                        let (_, seq) = c.pin.take().unwrap_or_default();
                        advance(c, seq);
                        Outcome::Unpinned
                    }
                    _ => Outcome::Skipped,
                }
            }
            Op::Register { class } => self.register(class, self.next_consumer_owner()),
            Op::Deregister { consumer } => {
                let i = self.index(consumer);
                match &self.consumers[i] {
                    Some(c) if c.alive => {
                        self.consumers[i] = None;
                        Outcome::Gone
                    }
                    _ => Outcome::Skipped,
                }
            }
            Op::Kill { consumer } => {
                let i = self.index(consumer);
                match &mut self.consumers[i] {
                    Some(c) if c.alive => {
                        c.alive = false;
                        Outcome::Gone
                    }
                    _ => Outcome::Skipped,
                }
            }
            Op::Reclaim { consumer } => self.reclaim(self.index(consumer)),
            Op::Close if self.claim.is_some() => Outcome::Skipped,
            Op::Close => {
                self.closed = true;
                Outcome::Closed
            }
            Op::TakeOver => {
                // The dead producer's claim is dropped (its stamp stays odd); the ring reopens.
                self.claim = None;
                self.closed = false;
                self.producer_owner += 1;
                self.epoch = self.epoch.wrapping_add(1);
                Outcome::TookOver
            }
            Op::ReclaimLive { consumer } if self.is_member(self.index(consumer)) => {
                Outcome::Skipped
            }
            Op::ReclaimLive { consumer } => self.reclaim_live(self.index(consumer)),
            Op::Victim { which, call } => {
                if self.victims.is_empty() {
                    return Ok(Outcome::Skipped);
                }
                match call {
                    VictimCall::Pin | VictimCall::Copy => Outcome::ReadFailed(ReadError::Evicted),
                    VictimCall::Drop => {
                        self.victims.remove(which as usize % self.victims.len());
                        Outcome::Gone
                    }
                }
            }
            Op::RegisterAs { class, which } => match self.victims.len() {
                0 => Outcome::Skipped,
                n => self.register(class, self.victims[which as usize % n]),
            },
            // The live producer holds a claim: the contract forbids taking over then.
            Op::TakeOverLive { .. } if self.claim.is_some() => Outcome::Skipped,
            Op::TakeOverLive { same_owner } => {
                self.closed = false;
                self.producer_owner += u64::from(!same_owner);
                self.epoch = self.epoch.wrapping_add(1);
                self.displaced += 1;
                Outcome::TookOver
            }
            Op::Displaced { .. } if self.displaced == 0 => Outcome::Skipped,
            Op::Displaced { call, .. } => match call {
                DisplacedCall::Claim | DisplacedCall::Publish => {
                    Outcome::ClaimFailed(ClaimError::Displaced {
                        owner: self.producer_owner,
                        epoch: self.epoch,
                    })
                }
                DisplacedCall::Close => Outcome::Closed,
                DisplacedCall::Drop => {
                    self.displaced -= 1;
                    Outcome::Gone
                }
            },
            Op::ForgetPin { consumer } => {
                let i = self.index(consumer);
                match &mut self.consumers[i] {
                    Some(c) if c.alive && c.pin.is_some() && !c.leaked => {
                        c.leaked = true;
                        Outcome::Leaked
                    }
                    _ => Outcome::Skipped,
                }
            }
            Op::Alloc { len, owner } => self.alloc(u64::from(len), owner, observed)?,
            Op::AllocWrite { which, seed, extra } => self.alloc_write(which, seed, extra),
            Op::Free { which, mode } => self.free(which, mode),
            Op::FreeAllOf { owner } => self.free_all_of(owner),
            Op::PublishBatch { count, len, seed } => self.publish_batch(count, len, seed),
            Op::ReadBatch { consumer, .. } if self.is_member(self.index(consumer)) => {
                Outcome::Skipped
            }
            Op::ReadBatch { consumer, max } => self.read_batch(self.index(consumer), max),
            Op::CreateGroup { group } => self.create_group(group),
            Op::Join { group } => self.join(group),
        })
    }

    /// [`Op::PublishBatch`].
    fn publish_batch(&mut self, count: u8, len: u16, seed: u8) -> Outcome {
        if self.claim.is_some() {
            // The claim borrows the producer.
            return Outcome::Skipped;
        }
        let msgs = batch_messages(count, len, seed);
        let cap = self.capacity();
        if let Some(m) = msgs.iter().find(|m| m.len() > cap) {
            return Outcome::PublishedBatch(Err(ClaimError::TooLarge {
                len: m.len(),
                capacity: cap,
            }));
        }
        let mut published = 0;
        for m in &msgs {
            match self.claim() {
                Outcome::Claimed(_) => {}
                Outcome::ClaimFailed(e) if published == 0 => {
                    return Outcome::PublishedBatch(Err(e));
                }
                _ => break,
            }
            let Some(c) = self.claim.take() else {
                return Outcome::Skipped;
            };
            let s = &mut self.slots[c.slot];
            let len = m.len();
            let pad_end = len.div_ceil(8) * 8;
            // Written whole into the payload area, the last word padded; a small message is
            // then copied into the message line (as `finish` does).
            s.bytes[..len].copy_from_slice(m);
            s.bytes[len..pad_end].fill(0);
            if len <= INLINE_CAPACITY {
                s.inline[..pad_end].copy_from_slice(&s.bytes[..pad_end]);
            }
            s.stamp = 2 * c.seq + 2;
            s.len = len;
            s.meta = [0; 2];
            self.head = c.seq + 1;
            self.published(c.seq, c.slot);
            published += 1;
        }
        Outcome::PublishedBatch(Ok(published))
    }

    /// [`Op::ReadBatch`].
    fn read_batch(&mut self, i: usize, max: u8) -> Outcome {
        match &self.consumers[i] {
            Some(c) if c.alive && (c.pin.is_none() || c.leaked) => {}
            _ => return Outcome::Skipped,
        }
        let mut items = Vec::new();
        while items.len() < usize::from(max) {
            let read = self.read(i, None);
            match read {
                Outcome::Read { seq, .. } => {
                    let c = self.consumers[i].as_mut().expect("checked above");
                    // Released right after the callback.
                    c.pin = None;
                    c.next = seq + 1;
                    c.received += 1;
                    items.push(read);
                }
                Outcome::ReadFailed(e) if items.is_empty() => {
                    return Outcome::ReadBatch(Err(e));
                }
                _ => break,
            }
        }
        // One cursor store for the batch: the consumer's next sequence (past any message a
        // failed last read stepped over).
        let c = self.consumers[i].as_mut().expect("checked above");
        c.cursor = shared_cursor(c);
        Outcome::ReadBatch(Ok(items))
    }

    /// Why a claim of the next sequence would be refused for a gating consumer or a pin
    /// (`Full`, `Pinned`), if it would: what `Producer::is_claimable` tells without claiming.
    pub fn claim_blocked(&self) -> Option<ClaimError> {
        if self.cfg.never_stall {
            return self.never_stall_slot().err();
        }
        let n = self.slots.len() as u64;
        let seq = self.head;
        let need = (seq + 1).saturating_sub(n);
        let (cursor, consumer) = self.gating_floor();
        if cursor < need {
            return Some(ClaimError::Full { consumer, cursor });
        }
        let slot = (seq % n) as usize;
        let readers = self.readers(slot);
        (readers != 0).then_some(ClaimError::Pinned { slot, readers })
    }

    /// The lowest sequence the producer must keep, and whose entry keeps it (`u64::MAX` and 0
    /// when nothing gates): a lone gating consumer's cursor; a group's cursor or queued
    /// message, or a message one of its members (alive or dead, until reclaimed) took and has
    /// not finished. Ties go to the first in table order, a record before any member.
    pub fn gating_floor(&self) -> (u64, usize) {
        let mut lowest = (u64::MAX, 0);
        for i in 0..self.consumers.len() {
            let v = match (&self.consumers[i], &self.records[i]) {
                (Some(c), _) if c.class == Class::Gating && c.member.is_none() => c.cursor,
                (_, Some(g)) => g.cursor.min(g.queue_floor()),
                _ => continue,
            };
            if v < lowest.0 {
                lowest = (v, i);
            }
        }
        for (i, c) in self.consumers.iter().enumerate() {
            if let Some(m) = c.as_ref().and_then(|c| c.member.as_ref()) {
                let v = words_floor(&m.claims);
                if v < lowest.0 {
                    lowest = (v, i);
                }
            }
        }
        lowest
    }

    /// Whether entry `i` holds a group member (alive or dead).
    pub fn is_member(&self, i: usize) -> bool {
        self.consumers[i]
            .as_ref()
            .is_some_and(|c| c.member.is_some())
    }

    /// The first entry holding neither a consumer nor a record.
    fn free_entry(&self) -> Option<usize> {
        (0..self.consumers.len())
            .find(|&i| self.consumers[i].is_none() && self.records[i].is_none())
    }

    /// The record of group `group`, if created.
    pub fn record_of(&self, group: u8) -> Option<usize> {
        self.records
            .iter()
            .position(|g| g.as_ref().is_some_and(|g| g.group == group % GROUPS))
    }

    /// [`Op::CreateGroup`].
    fn create_group(&mut self, group: u8) -> Outcome {
        if self.claim.is_some() {
            return Outcome::Skipped; // The claim borrows the producer.
        }
        if let Some(i) = self.record_of(group) {
            return Outcome::Group(Ok(i));
        }
        let Some(i) = self.free_entry() else {
            return Outcome::Group(Err(Error::ConsumerTableFull {
                capacity: self.cfg.consumers,
            }));
        };
        self.records[i] = Some(ModelGroup {
            group: group % GROUPS,
            cursor: self.head,
            queue: [0; GROUP_CLAIMS],
            handed: BTreeSet::new(),
            owed: BTreeSet::new(),
        });
        Outcome::Group(Ok(i))
    }

    /// [`Op::Join`].
    fn join(&mut self, group: u8) -> Outcome {
        let Some(record) = self.record_of(group) else {
            return Outcome::RegisterFailed(Error::NoSuchGroup);
        };
        let out = self.register(Class::Gating, self.next_consumer_owner());
        if let Outcome::Registered(i) = out {
            if let Some(c) = &mut self.consumers[i] {
                c.member = Some(ModelMember {
                    record,
                    claims: [0; GROUP_CLAIMS],
                    pending: None,
                });
            }
        }
        out
    }

    /// A member's `try_copy` (`buf = Some(len)`) or `try_hold` (`None`): the pending message,
    /// else the first queued redelivery, else the group's next message. `observed` (the real
    /// ring's outcome) is checked against the group's ledger: a message goes to one member
    /// only, unless it is redelivered, and only a message owed a redelivery is redelivered.
    ///
    /// # Errors
    /// A [`Failure`] naming the broken rule.
    fn member_take(
        &mut self,
        i: usize,
        buf: Option<usize>,
        observed: &Outcome,
    ) -> Result<Outcome, Failure> {
        let (n, closed) = (self.slots.len() as u64, self.closed);
        let never_stall = self.cfg.never_stall;
        // The group's stream ends for this member only when no other member (alive, or dead
        // and not yet reclaimed) holds a message it has not finished (`drained_for`).
        let record = self.consumers[i]
            .as_ref()
            .and_then(|c| c.member.as_ref())
            .map(|m| m.record);
        let others_hold = self.consumers.iter().enumerate().any(|(j, c)| {
            j != i
                && c.as_ref()
                    .and_then(|c| c.member.as_ref())
                    .is_some_and(|m| Some(m.record) == record && m.claims.iter().any(|&v| v != 0))
        });
        let Some(c) = self.consumers[i].as_mut().filter(|c| c.alive) else {
            return Ok(Outcome::Skipped);
        };
        let Some(m) = c.member.as_mut() else {
            return Ok(Outcome::Skipped);
        };
        let Some(g) = self.records[m.record].as_mut() else {
            return Ok(Outcome::Skipped);
        };
        if let Outcome::Taken {
            seq, redelivered, ..
        } = observed
        {
            if *redelivered {
                ensure!(
                    g.owed.contains(seq),
                    "message {seq} redelivered, but no reclaimed member or unfinished read \
                     gave it back (owed: {:?})",
                    g.owed
                );
            } else {
                ensure!(
                    !g.handed.contains(seq),
                    "message {seq} handed out a second time, not flagged as redelivered"
                );
            }
        }
        if buf.is_none() && c.holds.len() >= MAX_HOLDS {
            return Ok(Outcome::ReadFailed(ReadError::TooManyHolds {
                max: MAX_HOLDS,
            }));
        }
        let (word, seq, redelivered) = if let Some(word) = m.pending.take() {
            (word, m.claims[word] - 1, true)
        } else {
            let Some(word) = m.claims.iter().position(|&v| v == 0) else {
                return Ok(Outcome::ReadFailed(ReadError::TooManyHolds {
                    max: GROUP_CLAIMS,
                }));
            };
            if let Some(q) = g.queue.iter().position(|&v| v != 0) {
                let v = std::mem::take(&mut g.queue[q]);
                c.received += 1;
                (word, v - 1, true)
            } else {
                let seq = g.cursor;
                let stamp = stamp_of(&self.routes, &self.slots, never_stall, seq);
                if stamp < 2 * seq + 2 {
                    return Ok(Outcome::ReadFailed(if closed && !others_hold {
                        ReadError::Closed
                    } else {
                        ReadError::Empty
                    }));
                }
                if stamp > 2 * seq + 2 {
                    return Ok(Outcome::ReadFailed(ReadError::Corrupt(
                        "the group's next message was overwritten while the group gated it",
                    )));
                }
                g.cursor = seq + 1;
                c.received += 1;
                (word, seq, false)
            }
        };
        m.claims[word] = seq + 1;
        if redelivered {
            g.owed.remove(&seq);
        } else {
            g.handed.insert(seq);
        }
        let slot = locate(&self.routes, never_stall, seq).unwrap_or((seq % n) as usize);
        let s = &self.slots[slot];
        let taken = Outcome::Taken {
            seq,
            bytes: s.message().to_vec(),
            meta: s.meta,
            redelivered,
        };
        match buf {
            Some(b) if s.len > b => {
                // Kept: the retry (with a larger buffer, say) gets it again, flagged.
                m.pending = Some(word);
                g.owed.insert(seq);
                Ok(Outcome::ReadFailed(ReadError::BufferTooSmall {
                    needed: s.len,
                }))
            }
            Some(_) => {
                m.claims[word] = 0;
                Ok(taken)
            }
            None => {
                c.holds.push((slot, seq, s.message().to_vec()));
                Ok(taken)
            }
        }
    }

    /// A member's `release` of hold `which`: its claim ends.
    fn member_release(&mut self, i: usize, which: u8) -> Outcome {
        let Some(c) = self.consumers[i].as_mut().filter(|c| c.alive) else {
            return Outcome::Skipped;
        };
        if c.holds.is_empty() {
            return Outcome::Skipped;
        }
        let (_, seq, bytes) = c.holds.remove(which as usize % c.holds.len());
        if let Some(m) = c.member.as_mut() {
            for w in &mut m.claims {
                if *w == seq + 1 {
                    *w = 0;
                }
            }
        }
        Outcome::Released { seq, bytes }
    }

    /// Reclaim of dead member `i`: its unfinished messages go to its group's queue (all or
    /// none: `RedeliveryFull` leaves the entry as it is, still gating).
    fn reclaim_member(&mut self, i: usize) -> Outcome {
        let Some(c) = &self.consumers[i] else {
            return Outcome::Skipped;
        };
        let Some(m) = &c.member else {
            return Outcome::Skipped;
        };
        let Some(g) = self.records[m.record].as_mut() else {
            return Outcome::Skipped;
        };
        let moving: Vec<u64> = m.claims.iter().copied().filter(|&v| v != 0).collect();
        let free = g.queue.iter().filter(|&&v| v == 0).count();
        if free < moving.len() {
            return Outcome::Reclaim(Err(Error::RedeliveryFull {
                needed: moving.len(),
                free,
            }));
        }
        let mut next = moving.iter();
        for w in &mut g.queue {
            if *w == 0 {
                match next.next() {
                    Some(&v) => *w = v,
                    None => break,
                }
            }
        }
        g.owed.extend(moving.iter().map(|v| v - 1));
        self.free_reclaimed(i)
    }

    fn claim(&mut self) -> Outcome {
        if self.claim.is_some() {
            return Outcome::Skipped;
        }
        if self.closed {
            return Outcome::ClaimFailed(ClaimError::Closed);
        }
        let n = self.slots.len() as u64;
        let seq = self.head;
        let slot = if self.cfg.never_stall {
            match self.never_stall_slot() {
                Ok(slot) => slot,
                Err(e) => return Outcome::ClaimFailed(e),
            }
        } else {
            if let Some(e) = self.claim_blocked() {
                return Outcome::ClaimFailed(e);
            }
            (seq % n) as usize
        };
        self.slots[slot].stamp = 2 * seq + 1;
        self.claim = Some(ModelClaim { slot, seq, len: 0 });
        Outcome::Claimed(seq)
    }

    fn write(&mut self, offset: usize, len: usize, seed: u8) -> Outcome {
        let cap = self.capacity();
        let Some(c) = &mut self.claim else {
            return Outcome::Skipped;
        };
        let end = offset + len;
        if end > cap {
            return Outcome::Wrote(Err((cap, end)));
        }
        self.slots[c.slot].bytes[offset..end].copy_from_slice(&pattern(seed, len));
        c.len = c.len.max(end);
        Outcome::Wrote(Ok(()))
    }

    /// Which sequence consumer `c` reads next, and how many it skips to get there.
    fn target(&self, c: &ModelConsumer) -> Result<(u64, u64), ReadError> {
        let n = self.slots.len() as u64;
        let head = self.head;
        let empty = if self.closed {
            ReadError::Closed
        } else {
            ReadError::Empty
        };
        match c.class {
            Class::LatestOnly => {
                if head == 0 || head - 1 < c.next {
                    return Err(empty);
                }
                Ok((head - 1, head - 1 - c.next))
            }
            Class::Gating | Class::SkipOnLag => {
                if c.next >= head {
                    return Err(empty);
                }
                let oldest = head.saturating_sub(n);
                Ok(if c.next < oldest {
                    (oldest, oldest - c.next)
                } else {
                    (c.next, 0)
                })
            }
        }
    }

    /// A pin (`buf == None`) or a copy into `buf` bytes.
    fn read(&mut self, i: usize, buf: Option<usize>) -> Outcome {
        match &mut self.consumers[i] {
            Some(c) if c.alive && c.pin.is_none() => {}
            Some(c) if c.alive && c.leaked => {
                // The read takes the leaked pin back first (the message is not consumed).
                c.pin = None;
                c.leaked = false;
            }
            _ => return Outcome::Skipped,
        }
        let n = self.slots.len() as u64;
        let start = self.consumers[i].as_ref().map_or(0, |c| c.next);
        let mut missed = 0;
        for _ in 0..READ_RETRIES {
            let Some(c) = self.consumers[i].clone() else {
                return Outcome::Skipped;
            };
            let (seq, skipped) = match self.target(&c) {
                Ok(t) => t,
                Err(e) => {
                    // A read that returns nothing counts the messages it stepped past (found
                    // overwritten), not those it only targeted past: `next` did not move.
                    if let Some(c) = &mut self.consumers[i] {
                        c.missed += c.next - start;
                    }
                    return Outcome::ReadFailed(e);
                }
            };
            missed += skipped;
            // A never-stall ring's route naming a later message: overwritten, as a stamp.
            let located = self.locate(seq);
            let slot = located.unwrap_or((seq % n) as usize);
            let s = &self.slots[slot];
            let Some(c) = &mut self.consumers[i] else {
                return Outcome::Skipped;
            };
            if located.is_none() || s.stamp != 2 * seq + 2 {
                // Overwritten (or being rewritten): count it and re-target.
                missed += 1;
                c.next = seq + 1;
                continue;
            }
            if let Some(b) = buf {
                if s.len > b {
                    c.missed += c.next - start;
                    return Outcome::ReadFailed(ReadError::BufferTooSmall { needed: s.len });
                }
            }
            c.missed += missed;
            let out = Outcome::Read {
                seq,
                missed,
                bytes: s.message().to_vec(),
                meta: s.meta,
            };
            if buf.is_some() {
                advance(c, seq);
            } else {
                // The skipped messages are counted: a read after a leak starts at `seq`.
                c.next = seq;
                c.pin = Some((slot, seq));
            }
            return out;
        }
        if let Some(c) = &mut self.consumers[i] {
            c.missed += c.next - start;
        }
        Outcome::ReadFailed(ReadError::Lagging)
    }

    /// [`Op::Hold`]: a pin's read, kept as a hold (the consumer moves on).
    fn hold(&mut self, i: usize) -> Outcome {
        match &self.consumers[i] {
            Some(c) if c.alive && (c.pin.is_none() || c.leaked) => {
                // The limit is checked before anything is read (a leaked pin stays leaked).
                if c.holds.len() >= ring_core::DEFAULT_MAX_HOLDS {
                    return Outcome::ReadFailed(ReadError::TooManyHolds {
                        max: ring_core::DEFAULT_MAX_HOLDS,
                    });
                }
            }
            _ => return Outcome::Skipped,
        }
        let out = self.read(i, None);
        if let (Outcome::Read { seq, bytes, .. }, Some(c)) = (&out, &mut self.consumers[i]) {
            let (slot, _) = c.pin.take().unwrap_or_default();
            c.holds.push((slot, *seq, bytes.clone()));
            c.next = seq + 1;
            c.received += 1;
            c.cursor = shared_cursor(c);
        }
        out
    }

    fn register(&mut self, class: Class, owner: u64) -> Outcome {
        let Some(i) = self.free_entry() else {
            return Outcome::RegisterFailed(Error::ConsumerTableFull {
                capacity: self.cfg.consumers,
            });
        };
        // Latest-only consumers start at the newest message present (one back from head).
        let start = match class {
            Class::LatestOnly => self.head.saturating_sub(1),
            _ => self.head,
        };
        self.consumers[i] = Some(ModelConsumer {
            owner,
            class,
            alive: true,
            next: start,
            cursor: start,
            start,
            received: 0,
            missed: 0,
            pin: None,
            holds: Vec::new(),
            leaked: false,
            member: None,
        });
        self.registrations += 1;
        Outcome::Registered(i)
    }

    fn reclaim(&mut self, i: usize) -> Outcome {
        if self.claim.is_some() {
            // The claim borrows the producer, which owns `reclaim`.
            return Outcome::Skipped;
        }
        match &self.consumers[i] {
            // A group's record is the ring's: asked as its owner, reclaim leaves it alone.
            None => Outcome::Reclaim(Ok(Reclaimed {
                index: i,
                owner: if self.records[i].is_some() {
                    OWNER_GROUP
                } else {
                    0
                },
                pins_cleared: 0,
                cursor: 0,
                was_registered: false,
            })),
            Some(c) if c.alive => Outcome::Reclaim(Err(Error::OwnerMismatch { found: c.owner })),
            Some(c) if c.member.is_some() => self.reclaim_member(i),
            Some(_) => self.free_reclaimed(i),
        }
    }

    /// Frees taken entry `i` as a reclaim does and reports what the reclaim returns.
    fn free_reclaimed(&mut self, i: usize) -> Outcome {
        let Some(c) = self.consumers[i].take() else {
            return Outcome::Skipped;
        };
        Outcome::Reclaim(Ok(Reclaimed {
            index: i,
            owner: c.owner,
            pins_cleared: if c.class == Class::Gating {
                0
            } else {
                u32::from(c.pin.is_some()) + c.holds.len() as u32
            },
            cursor: c.cursor,
            was_registered: true,
        }))
    }

    /// [`Op::ReclaimLive`]: a live consumer that holds no `Pinned` (a leaked pin is allowed),
    /// reclaimed as its right owner. The victim keeps its handle.
    fn reclaim_live(&mut self, i: usize) -> Outcome {
        if self.claim.is_some() {
            return Outcome::Skipped;
        }
        match &self.consumers[i] {
            Some(c) if c.alive && (c.pin.is_none() || c.leaked) && c.holds.is_empty() => {
                self.victims.push(c.owner);
                self.free_reclaimed(i)
            }
            _ => Outcome::Skipped,
        }
    }

    fn live_bytes(&self) -> u64 {
        self.live.iter().map(|a| a.alloc.len).sum()
    }

    /// Length of the longest run of free granules.
    pub fn largest_free(&self) -> u64 {
        let (mut best, mut run) = (0u64, 0u64);
        for &used in &self.granules {
            run = if used { 0 } else { run + 1 };
            best = best.max(run);
        }
        best
    }

    fn alloc(&mut self, len: u64, owner: u8, observed: &Outcome) -> Result<Outcome, Failure> {
        if self.granules.is_empty() {
            return Ok(Outcome::Skipped);
        }
        let owner = u16::from(owner % ALLOC_OWNERS);
        if len == 0 {
            return Ok(Outcome::Alloc(Err(AllocError::ZeroSize)));
        }
        if self.live.len() >= self.cfg.max_live as usize {
            return Ok(Outcome::Alloc(Err(AllocError::LiveCeiling {
                max_live: self.cfg.max_live,
            })));
        }
        let live_bytes = self.live_bytes();
        // ring-core formats the segment's allocator with a byte ceiling equal to the arena.
        let ceiling = self.cfg.arena;
        if live_bytes + len > ceiling {
            return Ok(Outcome::Alloc(Err(AllocError::ByteCeiling {
                ceiling,
                live_bytes,
                requested: len,
            })));
        }
        let need = len.div_ceil(GRANULE_BYTES);
        if self.largest_free() < need {
            return Ok(Outcome::Alloc(Err(AllocError::OutOfSpace {
                requested: len,
                largest_free: self.largest_free() * GRANULE_BYTES,
            })));
        }
        let Outcome::Alloc(Ok(a)) = observed else {
            return Err(Failure(format!(
                "alloc({len}) should succeed (a free run of {need} granules exists), real: {observed:?}"
            )));
        };
        let first = a.offset / GRANULE_BYTES;
        ensure!(
            a.len == len && a.offset % GRANULE_BYTES == 0,
            "alloc({len}) returned a bad allocation {a:?}"
        );
        ensure!(
            first + need <= self.granules.len() as u64,
            "alloc({len}) at {a:?} runs past the arena"
        );
        ensure!(
            self.granules[first as usize..(first + need) as usize]
                .iter()
                .all(|u| !u),
            "alloc({len}) at {a:?} overlaps a live allocation"
        );
        let index = a.handle as u32;
        ensure!(
            index < self.cfg.max_live && !self.live.iter().any(|l| l.alloc.handle as u32 == index),
            "alloc returned handle {:#x} whose entry is in use or out of range",
            a.handle
        );
        ensure!(
            a.handle >> 32 != 0 && !self.freed.contains(&a.handle),
            "alloc returned a handle {:#x} that was used before",
            a.handle
        );
        for g in first..first + need {
            self.granules[g as usize] = true;
        }
        self.live.push(ModelAlloc {
            alloc: *a,
            owner,
            bytes: None,
        });
        Ok(Outcome::Alloc(Ok(*a)))
    }

    fn alloc_write(&mut self, which: u8, seed: u8, extra: u8) -> Outcome {
        if self.live.is_empty() {
            return Outcome::Skipped;
        }
        let k = which as usize % self.live.len();
        let a = &mut self.live[k];
        a.bytes = Some(pattern(seed, a.alloc.len as usize));
        let over = if extra == 0 {
            Ok(())
        } else {
            Err(AllocError::Overflow {
                reserved: a.alloc.len,
                attempted: a.alloc.len + u64::from(extra),
            })
        };
        Outcome::AllocWrote(Ok(()), over)
    }

    fn release(&mut self, k: usize) -> ModelAlloc {
        let a = self.live.remove(k);
        let first = a.alloc.offset / GRANULE_BYTES;
        for g in first..first + a.alloc.len.div_ceil(GRANULE_BYTES) {
            self.granules[g as usize] = false;
        }
        self.freed.push(a.alloc.handle);
        a
    }

    /// The handle a [`Op::Free`] names, and the owner it frees as (for both sides).
    pub fn free_target(&self, which: u8, mode: FreeMode) -> Option<(u64, u16)> {
        match mode {
            FreeMode::Owner | FreeMode::Foreign => {
                if self.live.is_empty() {
                    return None;
                }
                let a = &self.live[which as usize % self.live.len()];
                let owner = if mode == FreeMode::Owner {
                    a.owner
                } else {
                    (a.owner + 1) % u16::from(ALLOC_OWNERS)
                };
                Some((a.alloc.handle, owner))
            }
            FreeMode::Stale => {
                if self.freed.is_empty() {
                    return None;
                }
                Some((self.freed[which as usize % self.freed.len()], 0))
            }
        }
    }

    fn free(&mut self, which: u8, mode: FreeMode) -> Outcome {
        if self.granules.is_empty() {
            return Outcome::Skipped;
        }
        let Some((handle, owner)) = self.free_target(which, mode) else {
            return Outcome::Skipped;
        };
        let index = handle as u32;
        if let Some(k) = self.live.iter().position(|a| a.alloc.handle == handle) {
            let a = &self.live[k];
            if a.owner != owner {
                return Outcome::Free(Err(AllocError::ForeignFree {
                    owner,
                    actual: a.owner,
                }));
            }
            let len = self.release(k).alloc.len;
            return Outcome::Free(Ok(len));
        }
        // Not live: a double free while its entry is still free, otherwise stale.
        let reused = self.live.iter().any(|a| a.alloc.handle as u32 == index);
        let last_at_entry = self.freed.iter().rev().find(|h| **h as u32 == index);
        if !reused && last_at_entry == Some(&handle) {
            Outcome::Free(Err(AllocError::DoubleFree { handle }))
        } else {
            Outcome::Free(Err(AllocError::InvalidHandle { handle }))
        }
    }

    fn free_all_of(&mut self, owner: u8) -> Outcome {
        if self.granules.is_empty() {
            return Outcome::Skipped;
        }
        let owner = u16::from(owner % ALLOC_OWNERS);
        let (mut count, mut bytes) = (0, 0);
        while let Some(k) = self.live.iter().position(|a| a.owner == owner) {
            bytes += self.release(k).alloc.len;
            count += 1;
        }
        Outcome::FreedAll(Ok((count, bytes)))
    }
}

/// [`Model::locate`] over a model's routes (one per slot).
fn locate(routes: &[Option<(u64, usize)>], never_stall: bool, seq: u64) -> Option<usize> {
    let home = (seq % routes.len() as u64) as usize;
    if !never_stall {
        return Some(home);
    }
    match routes[home] {
        Some((s, slot)) if s == seq => Some(slot),
        _ => None,
    }
}

/// The stamp a reader finds for message `seq` (ring-core's `stamp_of`) over a model's routes
/// and slots: its slot's; on a never-stall ring 0 when the route names an older message or
/// none ("not yet") and `u64::MAX` when it names a later one.
fn stamp_of(
    routes: &[Option<(u64, usize)>],
    slots: &[ModelSlot],
    never_stall: bool,
    seq: u64,
) -> u64 {
    let home = (seq % routes.len() as u64) as usize;
    if !never_stall {
        return slots[home].stamp;
    }
    match routes[home] {
        Some((s, slot)) if s == seq => slots[slot].stamp,
        Some((s, _)) if s > seq => u64::MAX,
        _ => 0,
    }
}

/// Marks `seq` consumed by `c`.
fn advance(c: &mut ModelConsumer, seq: u64) {
    c.next = seq + 1;
    c.cursor = shared_cursor(c);
    c.received += 1;
}

/// The cursor `c` shows the producer: a gating consumer's stays at its oldest hold.
fn shared_cursor(c: &ModelConsumer) -> u64 {
    match c.holds.iter().map(|h| h.1).min() {
        Some(oldest) if c.class == Class::Gating => oldest.min(c.next),
        _ => c.next,
    }
}
