//! Consumers: registration, pinned (zero-copy) reads, seqlock copy-out reads, delivery classes.

use crate::class::DeliveryClass;
use crate::error::{Error, ReadError};
use crate::layout::{ConsumerEntry, CONSUMER_ACTIVE};
use crate::memory::{Memory, OpenJoin};
use crate::owner::OwnerId;
use crate::sync::Ordering;

mod copy;
mod fast;
mod history;
mod hold;
mod member;
mod pinned;
mod read;
mod register;
pub(crate) mod route;
mod wait;
use hold::HoldSet;
pub use hold::{Hold, DEFAULT_MAX_HOLDS, MAX_HOLDS};
use member::Member;
pub use pinned::BatchItem;
use wait::wake_producer;
pub use wait::PROGRESS_EVERY;

/// How many times one read re-targets after finding its message overwritten before it reports
/// [`ReadError::Lagging`]. Bounds every read (invariant 6 in `docs/DESIGN.md`).
pub const READ_RETRIES: u32 = 16;

/// A registered reader of the ring.
///
/// # Examples
///
/// ```
/// use ring_core::{Config, Consumer, DeliveryClass, HeapSegment, OwnerId, Producer, ReadError};
/// let seg = HeapSegment::new(&Config::new(4, 64), OwnerId::new(1).unwrap()).unwrap();
/// let mut producer = Producer::new(&seg, OwnerId::new(1).unwrap()).unwrap();
/// let mut reader = Consumer::new(&seg, DeliveryClass::SkipOnLag, OwnerId::new(2).unwrap()).unwrap();
/// for i in 0..6u8 {
///     producer.try_publish(&[i; 10]).unwrap();
/// }
/// // Six messages into four slots: the two oldest are gone, and the reader is told so.
/// let msg = reader.try_pin()?;
/// assert_eq!((msg.seq(), msg.missed()), (2, 2));
/// assert_eq!(msg.bytes(), &[2u8; 10]);
/// # Ok::<(), ReadError>(())
/// ```
#[derive(Debug)]
pub struct Consumer<M: Memory> {
    mem: M,
    index: usize,
    owner: OwnerId,
    class: DeliveryClass,
    /// Next sequence to read (gating, skip-on-lag), or first sequence not yet seen (latest-only).
    next: u64,
    received: u64,
    missed_total: u64,
    /// The entry generation this consumer registered with (see [`ConsumerEntry::generation`]).
    generation: u64,
    /// The slot of the last pin handed out, until that `Pinned` is dropped. Still set at the
    /// next read only if the `Pinned` was leaked (`mem::forget`): the read then takes the pin
    /// back, so a leaked pin cannot wedge its slot.
    held: Option<usize>,
    /// The messages held by [`try_hold`](Self::try_hold) and not yet released.
    holds: HoldSet,
    /// Set for a group member ([`join_group`](Self::join_group)): its reads take messages from
    /// the group.
    member: Option<Member>,
    /// For a gating consumer that started back ([`rewind`](Self::rewind)): the head it joined
    /// at. Messages below it are read like a skip-on-lag reader's (pinned by the reader bit,
    /// lost ones counted as missed): the producer's cached gate may cover them. 0 for a gating
    /// consumer that did not, `u64::MAX` for the other classes (every read of theirs pins with
    /// the bit): so `pins(seq)` is `seq < gate_from`, one compare.
    gate_from: u64,
    /// The first sequence whose copy our cursor protects from a claim (a protected copy is
    /// validated by our generation, any other by the slot's claim marker: `check_copy`):
    /// `gate_from` for a gating consumer of a default ring, `u64::MAX` (none) otherwise. So
    /// `seq >= guarded_from` is `!never_stall && !pins(seq)` in one compare.
    guarded_from: u64,
    /// Whether the ring is never-stall (its geometry says so; cached for the read path): reads
    /// find a message's slot through its home slot's route.
    never_stall: bool,
    /// Which one-pass reads (`consumer/fast.rs`) this consumer may take, from what never
    /// changes after registration (class, never-stall, pin-only, group membership: a member's
    /// is 0): [`FAST_PIN`] and [`FAST_COPY`] bits, so the per-call test of those conditions is
    /// one load ([`fast_bits`]).
    fast: u8,
    /// The one-pass read's count of empty polls in a row for one message (`not_yet`).
    idle: fast::IdlePolls,
    /// Reads whose progress (cursor and statistics) this consumer has not published to its
    /// entry yet. Always 0 for a gating consumer; one that does not gate publishes every
    /// [`PROGRESS_EVERY`] reads, and whenever a read finds nothing, it parks, or a batch ends
    /// (`consumer/wait.rs`).
    unpublished: u32,
}

/// [`Consumer::own_entry`] on the fields it reads (so a caller that goes on to change other
/// fields can keep the entry): entry `index` of `mem`, if it is still held by `owner` in
/// `generation` and ACTIVE.
#[inline(always)]
fn entry_if_owned<M: Memory>(
    mem: &M,
    index: usize,
    generation: u64,
    owner: OwnerId,
) -> Result<&ConsumerEntry, ReadError> {
    let e = mem.consumer_entry(index);
    // Relaxed: our own entry; a reclaim changes these (the generation first), and we only
    // detect it. Whoever reclaims promised we are not inside a call meanwhile.
    if e.generation.load(Ordering::Relaxed) != generation
        || e.owner.load(Ordering::Relaxed) != owner.get()
        || e.state.load(Ordering::Relaxed) != CONSUMER_ACTIVE
    {
        return Err(ReadError::Evicted);
    }
    Ok(e)
}

/// Entry `index` of `mem` if its generation is still `generation`: the check of a consumer
/// whose entry was found ours (owner, generation, ACTIVE) at registration or by an earlier
/// check. Between the two, only a reclaim can change the entry (registering another owner
/// needs it freed first, and a consumer frees its entry only when it drops), and a reclaim
/// moves the generation before it writes anything else (P17), so the generation alone tells
/// (C0g in docs/PROTOCOL.md). The general read keeps the full check.
#[inline(always)]
fn entry_if_current<M: Memory>(mem: &M, index: usize, generation: u64) -> Option<&ConsumerEntry> {
    let e = mem.consumer_entry(index);
    // Relaxed: our own entry; we only detect a reclaim, as `entry_if_owned` does.
    (e.generation.load(Ordering::Relaxed) == generation).then_some(e)
}

/// [`Consumer::fast`]: the one-pass pin may be taken (a gating or skip-on-lag reader of a
/// default, not never-stall, ring).
const FAST_PIN: u8 = 1;
/// [`Consumer::fast`]: the one-pass copy may be taken (as [`FAST_PIN`], and not pin-only).
const FAST_COPY: u8 = 2;

/// The [`Consumer::fast`] bits for a reader of `class` on a ring configured as `config`.
fn fast_bits(class: DeliveryClass, config: &crate::Config) -> u8 {
    if class == DeliveryClass::LatestOnly || config.never_stall {
        return 0; // Latest-only reads from `head`; never-stall follows routes.
    }
    if config.pin_only {
        FAST_PIN // Copies pin there (`copy_pinned_seq`).
    } else {
        FAST_PIN | FAST_COPY
    }
}

/// A pinned message: a zero-copy view the producer cannot overwrite until it is dropped.
#[derive(Debug)]
pub struct Pinned<'a, M: Memory> {
    consumer: &'a mut Consumer<M>,
    // `PinParts`' fields, flat: a `PinParts` field would be copied with its padding bytes
    // where `try_pin` builds the pin (5 instructions more per 64 B pin).
    slot: usize,
    seq: u64,
    len: usize,
    missed: u64,
    claim: u8,
    again: bool,
}

/// [`Pinned`]'s claim word when it is not a group member's.
const NO_CLAIM: u8 = u8::MAX;

/// What a pin holds besides its borrow of the consumer: what the read paths of `try_pin`
/// return, so `try_pin` builds its [`Pinned`] in one place. The join of its one-pass and
/// general paths then holds a few words, not a `Result<Pinned, _>` built in memory by each
/// and copied (64 B: 13 instructions per pin, `benches/icount.sh`).
#[derive(Clone, Copy, Debug)]
struct PinParts {
    slot: usize,
    seq: u64,
    len: usize,
    missed: u64,
    /// For a group member: the claim word holding the message ([`NO_CLAIM`] otherwise); one
    /// byte, so the single-consumer `Pinned` stays as small as it was.
    claim: u8,
    /// For a group member: whether the message is a redelivery.
    again: bool,
}

impl PinParts {
    /// The pin these parts describe, holding `consumer`.
    #[inline(always)]
    fn pinned<M: Memory>(self, consumer: &mut Consumer<M>) -> Pinned<'_, M> {
        let Self {
            slot,
            seq,
            len,
            missed,
            claim,
            again,
        } = self;
        Pinned {
            consumer,
            slot,
            seq,
            len,
            missed,
            claim,
            again,
        }
    }

    /// A pin that is not a group member's (its cursor or its reader bit holds the slot).
    #[inline(always)]
    fn lone(slot: usize, seq: u64, len: usize, missed: u64) -> Self {
        Self {
            slot,
            seq,
            len,
            missed,
            claim: NO_CLAIM,
            again: false,
        }
    }
}

/// What a copy-out read returned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Copied {
    /// The message's sequence number.
    pub seq: u64,
    /// Bytes copied into the buffer.
    pub len: usize,
    /// Messages skipped before this one (0 for a gating consumer).
    pub missed: u64,
    /// The message's metadata words.
    pub meta: [u64; 2],
    /// A group member's message that was handed out before (to a member that died, or by a
    /// read that did not finish): at-least-once delivery says it again. Always false outside
    /// groups.
    pub redelivered: bool,
}

/// Why one attempt at one sequence failed.
enum Miss {
    /// The slot already holds a later message (or is being rewritten for one).
    Overrun,
    Fatal(ReadError),
}

impl Miss {
    /// A slot's stamp is not message `want`'s (`2·seq+2`): a later one is an overrun, an
    /// earlier one after the message was seen published is a scribble.
    fn of_stamp(stamp: u64, want: u64) -> Self {
        if stamp > want {
            Self::Overrun
        } else {
            Self::Fatal(ReadError::Corrupt(
                "slot stamp is behind the published head",
            ))
        }
    }

    /// A slot's claim marker against message `seq`'s (`2·seq+1`): equal, the slot was not
    /// claimed since; higher, a later claim (an overrun); lower, a scribble.
    #[inline(always)]
    fn of_claim(marker: u64, seq: u64) -> Result<(), Self> {
        let want = 2 * seq + 1;
        if marker == want {
            Ok(())
        } else if marker > want {
            Err(Self::Overrun)
        } else {
            Err(Self::Fatal(ReadError::Corrupt(
                "slot claim marker is behind its message",
            )))
        }
    }
}

impl<M: OpenJoin> Consumer<M> {
    /// Registers a consumer of `class` in the first free consumer-table entry, on memory that
    /// carries no liveness contract ([`OpenJoin`]; for any other memory see
    /// [`new_unchecked`](Self::new_unchecked)).
    ///
    /// A gating or skip-on-lag consumer starts at the current head: it receives messages
    /// published from now on. A latest-only consumer starts at the newest message present when
    /// it joins (a frame grabber that opens the ring after the frame was published gets it).
    ///
    /// ```compile_fail,E0277
    /// // RawMemory (what an OS mapping opens) is not `OpenJoin`: a consumer registered there
    /// // without its liveness lock would be reclaimed, and its pinned bytes overwritten, by a
    /// // producer that judges it dead.
    /// use ring_core::{Consumer, DeliveryClass, OwnerId, RawMemory};
    /// fn join(raw: &RawMemory) {
    ///     let _ = Consumer::new(raw, DeliveryClass::Gating, OwnerId::new(9).unwrap());
    /// }
    /// ```
    ///
    /// # Errors
    /// [`Error::ConsumerTableFull`].
    pub fn new(mem: M, class: DeliveryClass, owner: OwnerId) -> Result<Self, Error> {
        // SAFETY: `M: OpenJoin`: nothing judges participants on this memory dead, so only an
        // `unsafe` `Producer::reclaim` (whose caller answers for it) can reclaim us.
        unsafe { Self::new_unchecked(mem, class, owner) }
    }

    /// Registers a consumer of `class` in consumer-table entry `index`, if it is free.
    /// On failure the memory comes back with the error.
    ///
    /// # Errors
    /// [`Error::NoSuchConsumer`] beyond the table, [`Error::EntryBusy`] when the entry is
    /// taken.
    #[allow(
        clippy::result_large_err,
        reason = "the memory handle is given back to the caller"
    )]
    pub fn new_at(
        mem: M,
        index: usize,
        class: DeliveryClass,
        owner: OwnerId,
    ) -> Result<Self, (M, Error)> {
        // SAFETY: as in `new`.
        unsafe { Self::new_at_unchecked(mem, index, class, owner) }
    }
}

impl<M: Memory> Consumer<M> {
    /// This consumer's consumer-table index (its reader bit is `1 << index`).
    pub fn index(&self) -> usize {
        self.index
    }

    /// The delivery class.
    pub fn class(&self) -> DeliveryClass {
        self.class
    }

    /// The memory this consumer reads.
    pub fn memory(&self) -> &M {
        &self.mem
    }

    /// Messages received so far.
    pub fn received(&self) -> u64 {
        self.received
    }

    /// Messages skipped so far (0 for a gating consumer, except history it started back into
    /// and found overwritten: see [`rewind`](Self::rewind)).
    pub fn missed(&self) -> u64 {
        self.missed_total
    }

    /// The next sequence this consumer will read.
    pub fn cursor(&self) -> u64 {
        self.next
    }

    /// The owner id of the ring's producer (0 when none), for liveness checks by the caller.
    pub fn producer_owner(&self) -> u64 {
        // Relaxed: an identity to check, not a synchronisation point.
        self.mem.producer_line().owner.load(Ordering::Relaxed)
    }

    /// This consumer's entry, if it still holds it: same owner, same generation, ACTIVE. Every
    /// write to shared state goes through this check, so a consumer whose entry was reclaimed
    /// (see [`Producer::reclaim`](crate::Producer::reclaim)) writes nothing.
    fn own_entry(&self) -> Result<&ConsumerEntry, ReadError> {
        entry_if_owned(&self.mem, self.index, self.generation, self.owner)
    }

    fn check_registered(&self) -> Result<(), ReadError> {
        self.own_entry().map(|_| ())
    }

    /// True while this consumer still holds its entry (it was not reclaimed).
    pub fn is_registered(&self) -> bool {
        self.own_entry().is_ok()
    }

    /// The entry generation this consumer registered with.
    pub fn generation(&self) -> u64 {
        self.generation
    }
}
