//! The bytes that cross processes: segment header, producer line, consumer table entries and slot
//! headers.
//!
//! Every type here is `#[repr(C)]`, pointer-free (offsets, never pointers), built only from
//! fixed-width atomics, aligned to [`CACHE_LINE`] and checked at compile time (size, alignment,
//! field offsets). All fields are atomics because a peer process may write any of them at any
//! time: even the "immutable" geometry fields are read with atomic loads, so a hostile writer is a
//! wrong value, never a data race. `docs/LAYOUT.md` gives the byte offsets in a table.
//!
//! # References
//! - Cache-line table: crossbeam-utils `cache_padded.rs` (Intel's spatial prefetcher pulls pairs of
//!   64-byte lines, so 128 on x86_64; Apple M-series and Neoverse cores have 128-byte lines on
//!   aarch64; POWER has 128-byte lines; 32-byte lines on the small ARM, RISC-V and MIPS cores).

use crate::sync::{AtomicU32, AtomicU64};

/// The cache-line size this target's layout is padded to, from a per-architecture table.
///
/// | architectures | bytes | why |
/// |---|---|---|
/// | x86_64, aarch64, powerpc64, arm64ec | 128 | adjacent-line prefetch (Intel), 128-byte lines (Apple M, Neoverse V, POWER) |
/// | arm, riscv32, mips, sparc, hexagon | 32 | small in-order cores with 32-byte lines |
/// | everything else | 64 | the common line size |
#[cfg(any(
    target_arch = "x86_64",
    target_arch = "aarch64",
    target_arch = "powerpc64",
    target_arch = "arm64ec"
))]
pub const CACHE_LINE: usize = 128;
/// The cache-line size this target's layout is padded to (see the table on the 128-byte variant).
#[cfg(any(
    target_arch = "arm",
    target_arch = "riscv32",
    target_arch = "mips",
    target_arch = "sparc",
    target_arch = "hexagon"
))]
pub const CACHE_LINE: usize = 32;
/// The cache-line size this target's layout is padded to (see the table on the 128-byte variant).
#[cfg(not(any(
    target_arch = "x86_64",
    target_arch = "aarch64",
    target_arch = "powerpc64",
    target_arch = "arm64ec",
    target_arch = "arm",
    target_arch = "riscv32",
    target_arch = "mips",
    target_arch = "sparc",
    target_arch = "hexagon"
)))]
pub const CACHE_LINE: usize = 64;

/// Declares a cache-line-aligned `#[repr(C)]` struct; the alignment follows [`CACHE_LINE`].
macro_rules! cache_aligned {
    ($(#[$m:meta])* pub struct $name:ident { $($(#[$fm:meta])* pub $f:ident : $t:ty,)* }) => {
        $(#[$m])*
        #[derive(Debug)]
        #[repr(C)]
        #[cfg_attr(any(target_arch = "x86_64", target_arch = "aarch64",
            target_arch = "powerpc64", target_arch = "arm64ec"), repr(align(128)))]
        #[cfg_attr(any(target_arch = "arm", target_arch = "riscv32", target_arch = "mips",
            target_arch = "sparc", target_arch = "hexagon"), repr(align(32)))]
        #[cfg_attr(not(any(target_arch = "x86_64", target_arch = "aarch64",
            target_arch = "powerpc64", target_arch = "arm64ec", target_arch = "arm",
            target_arch = "riscv32", target_arch = "mips", target_arch = "sparc",
            target_arch = "hexagon")), repr(align(64)))]
        pub struct $name { $($(#[$fm])* pub $f: $t,)* }
    };
}

/// `"SHMRING\0"` as a little-endian `u64`: the first word of every segment.
pub const MAGIC: u64 = u64::from_le_bytes(*b"SHMRING\0");
/// Bumped whenever the meaning of any shared byte changes.
pub const ABI_VERSION: u32 = 5;

/// [`SegmentHeader::init_state`]: the bytes are not (yet) a segment.
pub const INIT_NONE: u32 = 0;
/// [`SegmentHeader::init_state`]: the creator is formatting the segment.
pub const INIT_BUSY: u32 = 1;
/// [`SegmentHeader::init_state`]: formatted; the init barrier is open.
pub const INIT_READY: u32 = 2;

cache_aligned! {
    /// The first bytes of a segment: identity, geometry and region offsets.
    ///
    /// Written by the creator before it opens the init barrier (`init_state = INIT_READY`,
    /// Release); read once by every attacher after an Acquire load of `init_state`, copied into a
    /// local [`Geometry`](crate::Geometry) and validated. Never trusted afterwards.
    pub struct SegmentHeader {
        /// [`MAGIC`].
        pub magic: AtomicU64,
        /// [`ABI_VERSION`].
        pub abi_version: AtomicU32,
        /// Init barrier: [`INIT_NONE`] → [`INIT_BUSY`] → [`INIT_READY`]. Written by the creator only.
        pub init_state: AtomicU32,
        /// [`LAYOUT_FINGERPRINT`]: catches peers compiled with another layout.
        pub fingerprint: AtomicU64,
        /// Number of slots, `1..=MAX_SLOTS`.
        pub slots: AtomicU32,
        /// Payload capacity per slot in bytes, a multiple of 8.
        pub slot_capacity: AtomicU32,
        /// Consumer-table entries, `1..=MAX_CONSUMERS`.
        pub consumers: AtomicU32,
        /// Allocator live-allocation ceiling (0 when there is no allocator).
        pub alloc_max_live: AtomicU32,
        /// Allocator arena size in bytes (0 = no allocator).
        pub alloc_arena: AtomicU64,
        /// Byte offset of the [`ProducerLine`].
        pub producer_off: AtomicU64,
        /// Byte offset of the consumer table.
        pub consumers_off: AtomicU64,
        /// Byte offset of the slot headers.
        pub slots_off: AtomicU64,
        /// Byte offset of the payload areas.
        pub payloads_off: AtomicU64,
        /// Byte offset of the allocator region.
        pub alloc_off: AtomicU64,
        /// Length of the allocator region in bytes.
        pub alloc_len: AtomicU64,
        /// Total segment length in bytes.
        pub total_len: AtomicU64,
        /// Owner id of the process that created the segment.
        pub creator: AtomicU64,
        /// `RING_*` mode bits, fixed at creation ([`RING_PIN_ONLY`]); attachers refuse unknown
        /// bits.
        pub ring_flags: AtomicU64,
        /// History for late joiners, fixed at creation: a consumer that registers starts up
        /// to this many messages back (`Config::history`, at most `slots`).
        pub history: AtomicU32,
        /// Zero; reserved.
        pub header_reserved: AtomicU32,
    }
}

/// [`SegmentHeader::ring_flags`] bit: consumers only ever read a slot while they pin it
/// (copy reads pin, copy and unpin), so a claimed slot is the producer's alone and it may write
/// it through `&mut [u8]` ([`WriteSlot::loan`](crate::WriteSlot::loan)).
pub const RING_PIN_ONLY: u64 = 1;
/// [`SegmentHeader::ring_flags`] bit: slots are decoupled from sequence numbers. The producer
/// writes each message into a slot that no reader pins (its home slot `seq % slots` when it
/// can), and publishes where it is in the home slot's [`SlotHeader::route`]; so pins of
/// latest-only and skip-on-lag readers never make it wait while a slot is free
/// (`docs/PROTOCOL.md`, "Never-stall rings"). Attachers of an older ABI refuse the bit.
pub const RING_NEVER_STALL: u64 = 2;
/// [`SegmentHeader::ring_flags`] bit: asymmetric fences
/// ([`Config::asymmetric_fences`](crate::Config::asymmetric_fences)): participants may run the
/// per-message side of the wake-up handshakes as a compiler fence, so every parking side must
/// run the process-wide barrier (`docs/PROTOCOL.md`, "Asymmetric fences"). Attachers that do
/// not know the bit refuse it: they would park with a plain fence.
pub const RING_ASYMMETRIC_FENCES: u64 = 4;
/// Every `RING_*` bit this ABI knows.
pub const RING_KNOWN_FLAGS: u64 = RING_PIN_ONLY | RING_NEVER_STALL | RING_ASYMMETRIC_FENCES;

/// Bits of a route word that name the slot (the low bits; `MAX_SLOTS` is `1 << 24`).
pub const ROUTE_SLOT_BITS: u32 = 24;
/// Mask of the sequence tag in a route word (after the shift): 40 bits of `seq + 1`.
pub const ROUTE_TAG_MASK: u64 = (1 << (64 - ROUTE_SLOT_BITS)) - 1;

/// The route word saying "message `seq` is in slot `slot`": `(seq + 1) mod 2^40` above the
/// slot index, so 0 means "no message yet".
#[inline]
pub const fn route_word(seq: u64, slot: usize) -> u64 {
    ((seq.wrapping_add(1) & ROUTE_TAG_MASK) << ROUTE_SLOT_BITS) | slot as u64
}

/// [`ProducerLine::flags`] bit: the producer closed the ring; no more messages will come.
pub const FLAG_CLOSED: u32 = 1;
/// [`ProducerLine::flags`] bit, with [`FLAG_CLOSED`]: the stream was aborted, not finished (a
/// producer that failed, or was dropped without [`Producer::close`](crate::Producer::close)).
/// Bits 16..32 then hold the producer's abort code.
pub const FLAG_ABORTED: u32 = 2;
/// Shift of the abort code in [`ProducerLine::flags`].
pub const ABORT_CODE_SHIFT: u32 = 16;

/// Sequence numbers (and so [`ProducerLine::head`]) stay below this bound, which keeps every
/// seqlock stamp (`2 * seq + 2`) and cursor (`seq + 1`) free of overflow. At a billion messages a
/// second it takes 146 years to reach; a `head` at or above it was written by a corrupt or
/// hostile peer, and producers and consumers report it as corruption instead of computing with it.
pub const SEQ_LIMIT: u64 = 1 << 62;

/// `AtomicU64` words in one [`CACHE_LINE`].
pub const LINE_WORDS: usize = CACHE_LINE / 8;

cache_aligned! {
    /// The producer's region: three cache lines, each with one writer in the steady state.
    ///
    /// - line 0, `head`: written by the producer on every publish (once per batch); consumers
    ///   read it only when they must learn how far behind they are (latest-only reads, a
    ///   skip-on-lag consumer that was overrun, registration);
    /// - line 1, control (`owner`, `flags`, `epoch`, `publish_futex`): written by the producer
    ///   when it starts or ends, and `publish_futex` only when a consumer announced that it
    ///   parks; consumers read `flags` on an empty poll, so that read hits a line nobody writes;
    /// - line 2, wake (`consumer_waiters`, `drain_futex`, `producer_waiting`): written only by
    ///   whoever parks or wakes a parked peer.
    pub struct ProducerLine {
        /// Number of messages published, i.e. the next sequence number: a hint a consumer
        /// follows when it must, since a message is published by its slot's stamp
        /// (`docs/PROTOCOL.md`). Written by the producer only (Release); loaded with Acquire.
        pub head: AtomicU64,
        /// Pads `head` to a line of its own; never read or written.
        pub pad_head: [AtomicU64; LINE_WORDS - 1],
        /// The producer's owner id, 0 when there is none. Claimed with a CAS.
        pub owner: AtomicU64,
        /// [`FLAG_CLOSED`], [`FLAG_ABORTED`] and the abort code (bits 16..32). Written by the
        /// producer: once when it closes, cleared when a producer starts.
        pub flags: AtomicU32,
        /// The producer's fencing token: bumped by every producer start ([`Producer::new`] and
        /// [`Producer::take_over`]). A producer checks that it still holds the epoch it started
        /// with before every claim and publish, so a displaced producer publishes nothing.
        /// Wraps modulo 2^32.
        ///
        /// [`Producer::new`]: crate::Producer::new
        /// [`Producer::take_over`]: crate::Producer::take_over
        pub epoch: AtomicU32,
        /// Futex word consumers sleep on: bumped by one (wrapping) by a publish that finds a
        /// consumer parked (`consumer_waiters` non-zero after its SeqCst fence) and by every
        /// close, by the producer only. It only moves forward, so a value a parked consumer
        /// saw cannot come back within 2^32 changes (a reopened ring never repeats one).
        pub publish_futex: AtomicU32,
        /// Zero; reserved.
        pub control_reserved: AtomicU32,
        /// Pads the control words to a line of their own; never read or written.
        pub pad_control: [AtomicU64; LINE_WORDS - 3],
        /// Number of consumers parked (or about to park) on `publish_futex`. May over-count
        /// (a consumer killed while parked), never under-count: a reclaim gives back the count of
        /// a consumer whose entry says it was parked ([`ConsumerEntry::parked`]).
        pub consumer_waiters: AtomicU32,
        /// Futex word the producer sleeps on while held back: bumped by consumers that make
        /// progress while `producer_waiting` is set.
        pub drain_futex: AtomicU32,
        /// Non-zero while the producer is parked (or about to park) on `drain_futex`.
        pub producer_waiting: AtomicU32,
        /// Zero; reserved.
        pub wake_reserved: AtomicU32,
    }
}

/// [`ConsumerEntry::state`]: free for registration.
pub const CONSUMER_FREE: u32 = 0;
/// [`ConsumerEntry::state`]: a consumer is registering.
pub const CONSUMER_JOINING: u32 = 1;
/// [`ConsumerEntry::state`]: registered and reading.
pub const CONSUMER_ACTIVE: u32 = 2;
/// [`ConsumerEntry::state`]: being reclaimed by the producer after its owner died.
pub const CONSUMER_RECLAIMING: u32 = 3;

/// [`ConsumerEntry::owner`] while the producer sweeps a free entry's leftover reader bits: no
/// registration can take the entry meanwhile (its owner word is not 0).
pub const OWNER_SWEEPING: u64 = u64::MAX;

cache_aligned! {
    /// One consumer-table entry. Entry `i` owns reader bit `1 << i` in every slot's state word.
    pub struct ConsumerEntry {
        /// `CONSUMER_*`. A registering consumer first claims the entry with a CAS of `owner`
        /// from 0, then stores JOINING and ACTIVE; it stores FREE when it leaves. The producer
        /// moves it to RECLAIMING and then FREE when it reclaims a dead owner.
        pub state: AtomicU32,
        /// The delivery class (`DeliveryClass as u32`).
        pub class: AtomicU32,
        /// The owner id of the registered consumer.
        pub owner: AtomicU64,
        /// Next sequence this consumer will read. For a gating consumer, every message below it is
        /// consumed (stored with Release after the reads; the producer loads it with Acquire).
        pub cursor: AtomicU64,
        /// Messages this consumer skipped (skip-on-lag and latest-only), for inspection.
        pub missed: AtomicU64,
        /// Messages this consumer received, for inspection.
        pub received: AtomicU64,
        /// The registration's generation: bumped by every registration into this entry and by
        /// every reclaim of it (wrapping). A consumer remembers the generation it registered
        /// with and checks it before every write to shared state, so a consumer whose entry was
        /// reclaimed (and perhaps re-registered by another consumer of the same owner id)
        /// writes nothing, ever again.
        pub generation: AtomicU64,
        /// 1 while the registered consumer counts itself in
        /// [`ProducerLine::consumer_waiters`] (set after the increment, cleared before the
        /// decrement), so a reclaim knows whether to give that count back.
        pub parked: AtomicU32,
        /// 1 once the registered consumer's start point is final (stored Release after its
        /// final cursor store); 0 while it registers and after it left. Only consumers with
        /// `ready == 1` count for [`Producer::wait_for_consumers`](crate::Producer::wait_for_consumers).
        pub ready: AtomicU32,
        /// 0 for a lone consumer. For a group's record ([`CLASS_GROUP`]) and for each of its
        /// members: the group's key ([`group_key`](crate::group_key) of its name, never 0).
        pub group: AtomicU64,
        /// A group record's redelivery queue, or a member's claims: each word 0 (empty) or
        /// `seq + 1`. A member's claim is a message it took from the group and has not
        /// finished; a record's word is a message a dead member claimed, waiting for another
        /// member (docs/PROTOCOL.md, "Groups"). Unused (0) for lone consumers.
        pub claims: [AtomicU64; GROUP_CLAIMS],
    }
}

/// [`ConsumerEntry::class`] of a group's record: the entry holds the group's shared cursor and
/// redelivery queue, reads nothing, and gates the producer for the whole group. It is not a
/// [`DeliveryClass`](crate::DeliveryClass).
pub const CLASS_GROUP: u32 = 4;

/// [`ConsumerEntry::owner`] of a group's record: the group belongs to the ring, not to a
/// process, so no liveness verdict ever reclaims it.
pub const OWNER_GROUP: u64 = u64::MAX - 1;

/// Words of [`ConsumerEntry::claims`]: the most messages one group member holds at once, and
/// the length of a group's redelivery queue.
pub const GROUP_CLAIMS: usize = 8;

/// Slot state word: set while the producer owns the slot.
pub const WRITER: u64 = 1 << 63;
/// Slot state word: the reader bits, one per consumer-table entry.
pub const READER_MASK: u64 = (1 << 32) - 1;

/// Bytes of each of the two lines of a [`SlotHeader`]: a cache line, at least 64.
pub const SLOT_LINE: usize = if CACHE_LINE >= 64 { CACHE_LINE } else { 64 };
/// Bytes of one [`SlotHeader`]: the pin line and the message line.
pub const SLOT_HEADER_BYTES: usize = 2 * SLOT_LINE;
/// Payload words that travel in the slot's message line (beside stamp, length and meta).
pub const INLINE_WORDS: usize = (SLOT_LINE - 32) / 8;
/// Messages of at most this many bytes travel in their slot's message line
/// ([`SlotHeader::inline`]) instead of the slot's payload area: 96 bytes where
/// [`CACHE_LINE`] is 128, 32 where it is 64 or 32.
pub const INLINE_CAPACITY: usize = INLINE_WORDS * 8;

cache_aligned! {
    /// One slot's header, two lines:
    /// - the pin line: the pin/claim word, which pinning consumers write;
    /// - the message line: the seqlock stamp, the message's length and metadata and, for a
    ///   message of at most [`INLINE_CAPACITY`] bytes, the message itself. Only the producer
    ///   writes it, so a consumer polling the stamp reads a line nobody else writes, and a
    ///   small message is that one line.
    pub struct SlotHeader {
        /// `WRITER | reader bits`: the producer claims with a CAS from 0 to `WRITER`; consumer `i`
        /// pins by setting bit `i` only while `WRITER` is clear. One word, so every pin and claim
        /// is totally ordered (no SeqCst needed).
        pub state: AtomicU64,
        /// Only on a never-stall ring ([`RING_NEVER_STALL`]): where the newest published
        /// message whose sequence is this slot's index modulo the slot count lives,
        /// [`route_word`]`(seq, slot)` (0 before the first). Written by the producer after the
        /// message's final stamp; a hint that readers check against the named slot's stamp.
        /// Zero and unused on every other ring.
        pub route: AtomicU64,
        /// The claim marker: `2·seq + 1` from the claim of message `seq` on (stored before the
        /// claim's Release fence, so before any of its payload words), 0 before the slot's
        /// first claim. Readers that the gating check does not protect validate a copy (and a
        /// pin) with it: a later claim of the slot has changed it. On the pin line, which the
        /// claim writes anyway, so the message line is written once per message.
        pub claim: AtomicU64,
        /// Pads the pin line; never read or written.
        pub pad_state: [AtomicU64; SLOT_LINE / 8 - 3],
        /// The publication: `2·seq + 2` once message `seq` is complete (consumers poll it), 0
        /// before the slot's first message. A claim leaves it alone (the claim marker says a
        /// write is under way); an aborted or crashed claim of `seq` sets it to `2·seq + 1`
        /// before the slot goes back to pinning readers (odd: no message).
        pub stamp: AtomicU64,
        /// Length in bytes of the message in the slot (≤ the slot capacity; checked by readers).
        pub len: AtomicU64,
        /// Two words of user metadata (e.g. an allocator handle, a timestamp).
        pub meta: [AtomicU64; 2],
        /// The message's bytes when `len ≤ INLINE_CAPACITY` (the last word zero-padded);
        /// otherwise unused and the message is in the slot's payload area.
        pub inline: [AtomicU64; INLINE_WORDS],
    }
}

/// A compile-time FNV-1a fingerprint of the layout facts peers must agree on.
pub const LAYOUT_FINGERPRINT: u64 = {
    let facts: [u64; 16] = [
        ABI_VERSION as u64,
        CACHE_LINE as u64,
        INLINE_WORDS as u64,
        core::mem::offset_of!(ProducerLine, owner) as u64,
        core::mem::offset_of!(ProducerLine, consumer_waiters) as u64,
        core::mem::size_of::<SegmentHeader>() as u64,
        core::mem::size_of::<ProducerLine>() as u64,
        core::mem::size_of::<ConsumerEntry>() as u64,
        core::mem::size_of::<SlotHeader>() as u64,
        core::mem::offset_of!(SlotHeader, stamp) as u64,
        core::mem::offset_of!(SlotHeader, claim) as u64,
        core::mem::offset_of!(ConsumerEntry, cursor) as u64,
        core::mem::offset_of!(ConsumerEntry, generation) as u64,
        core::mem::offset_of!(ConsumerEntry, claims) as u64,
        WRITER,
        cfg!(target_endian = "little") as u64,
    ];
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut i = 0;
    while i < facts.len() {
        let bytes = facts[i].to_le_bytes();
        let mut j = 0;
        while j < 8 {
            h ^= bytes[j] as u64;
            h = h.wrapping_mul(0x0100_0000_01b3);
            j += 1;
        }
        i += 1;
    }
    h
};

// Layout checks. Under loom the atomics are model objects of another size, and no shared bytes
// exist, so these hold for real builds only.
#[cfg(not(any(ring_loom, ring_shuttle)))]
mod checks {
    use super::*;
    use core::mem::{align_of, offset_of, size_of};
    use static_assertions::const_assert_eq;

    const_assert_eq!(size_of::<AtomicU64>(), 8);
    const_assert_eq!(size_of::<AtomicU32>(), 4);
    const_assert_eq!(align_of::<SegmentHeader>(), CACHE_LINE);
    const_assert_eq!(align_of::<ProducerLine>(), CACHE_LINE);
    const_assert_eq!(align_of::<ConsumerEntry>(), CACHE_LINE);
    const_assert_eq!(align_of::<SlotHeader>(), CACHE_LINE);
    const_assert_eq!(size_of::<SegmentHeader>() % CACHE_LINE, 0);
    const_assert_eq!(
        size_of::<SegmentHeader>(),
        if CACHE_LINE >= 128 { CACHE_LINE } else { 128 }
    );
    const_assert_eq!(size_of::<ProducerLine>(), 3 * CACHE_LINE);
    const_assert_eq!(
        size_of::<ConsumerEntry>(),
        if CACHE_LINE >= 128 { CACHE_LINE } else { 128 }
    );
    const_assert_eq!(size_of::<SlotHeader>(), SLOT_HEADER_BYTES);
    const_assert_eq!(
        offset_of!(SlotHeader, inline) + INLINE_CAPACITY,
        SLOT_HEADER_BYTES
    );
    const_assert_eq!(SLOT_LINE % CACHE_LINE, 0);

    const_assert_eq!(offset_of!(SegmentHeader, magic), 0);
    const_assert_eq!(offset_of!(SegmentHeader, abi_version), 8);
    const_assert_eq!(offset_of!(SegmentHeader, init_state), 12);
    const_assert_eq!(offset_of!(SegmentHeader, fingerprint), 16);
    const_assert_eq!(offset_of!(SegmentHeader, slots), 24);
    const_assert_eq!(offset_of!(SegmentHeader, slot_capacity), 28);
    const_assert_eq!(offset_of!(SegmentHeader, consumers), 32);
    const_assert_eq!(offset_of!(SegmentHeader, alloc_max_live), 36);
    const_assert_eq!(offset_of!(SegmentHeader, alloc_arena), 40);
    const_assert_eq!(offset_of!(SegmentHeader, producer_off), 48);
    const_assert_eq!(offset_of!(SegmentHeader, consumers_off), 56);
    const_assert_eq!(offset_of!(SegmentHeader, slots_off), 64);
    const_assert_eq!(offset_of!(SegmentHeader, payloads_off), 72);
    const_assert_eq!(offset_of!(SegmentHeader, alloc_off), 80);
    const_assert_eq!(offset_of!(SegmentHeader, alloc_len), 88);
    const_assert_eq!(offset_of!(SegmentHeader, total_len), 96);
    const_assert_eq!(offset_of!(SegmentHeader, creator), 104);
    const_assert_eq!(offset_of!(SegmentHeader, ring_flags), 112);
    const_assert_eq!(offset_of!(SegmentHeader, history), 120);

    // Three lines, one writer each (see the type's doc).
    const_assert_eq!(offset_of!(ProducerLine, head), 0);
    const_assert_eq!(offset_of!(ProducerLine, owner), CACHE_LINE);
    const_assert_eq!(offset_of!(ProducerLine, flags), CACHE_LINE + 8);
    const_assert_eq!(offset_of!(ProducerLine, epoch), CACHE_LINE + 12);
    const_assert_eq!(offset_of!(ProducerLine, publish_futex), CACHE_LINE + 16);
    const_assert_eq!(offset_of!(ProducerLine, control_reserved), CACHE_LINE + 20);
    const_assert_eq!(offset_of!(ProducerLine, consumer_waiters), 2 * CACHE_LINE);
    const_assert_eq!(offset_of!(ProducerLine, drain_futex), 2 * CACHE_LINE + 4);
    const_assert_eq!(
        offset_of!(ProducerLine, producer_waiting),
        2 * CACHE_LINE + 8
    );

    const_assert_eq!(offset_of!(ConsumerEntry, state), 0);
    const_assert_eq!(offset_of!(ConsumerEntry, class), 4);
    const_assert_eq!(offset_of!(ConsumerEntry, owner), 8);
    const_assert_eq!(offset_of!(ConsumerEntry, cursor), 16);
    const_assert_eq!(offset_of!(ConsumerEntry, missed), 24);
    const_assert_eq!(offset_of!(ConsumerEntry, received), 32);
    const_assert_eq!(offset_of!(ConsumerEntry, generation), 40);
    const_assert_eq!(offset_of!(ConsumerEntry, parked), 48);
    const_assert_eq!(offset_of!(ConsumerEntry, ready), 52);
    const_assert_eq!(offset_of!(ConsumerEntry, group), 56);
    const_assert_eq!(offset_of!(ConsumerEntry, claims), 64);
    const_assert_eq!(GROUP_CLAIMS, crate::MAX_HOLDS);

    // The pin line (state, route, claim marker), then the message line.
    const_assert_eq!(offset_of!(SlotHeader, state), 0);
    const_assert_eq!(offset_of!(SlotHeader, route), 8);
    const_assert_eq!(offset_of!(SlotHeader, claim), 16);
    const_assert_eq!(offset_of!(SlotHeader, stamp), SLOT_LINE);
    const_assert_eq!(offset_of!(SlotHeader, len), SLOT_LINE + 8);
    const_assert_eq!(offset_of!(SlotHeader, meta), SLOT_LINE + 16);
    const_assert_eq!(offset_of!(SlotHeader, inline), SLOT_LINE + 32);
}
