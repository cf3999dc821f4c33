//! A reference model of one ring driven from one thread: what every producer and consumer
//! call must return, and what every shared word must hold afterwards.
//!
//! It is written from the protocol's rules (`docs/DESIGN.md` and `docs/PROTOCOL.md`), not from the
//! implementation's data structures: a slot is a stamp, a writer flag, a reader mask and its
//! bytes; a consumer is a cursor and two counters. Two rules are spelled out here because the
//! implementation has to get them exactly right:
//! - **accounting**: every sequence a consumer moves past is either received or counted as
//!   missed, so `next - start == received + missed` at all times, and a gating consumer never
//!   misses anything;
//! - **gating**: a claim of sequence `s` fails with `Full` exactly when an active gating entry's
//!   cursor is below `s + 1 - slots` (the first such entry in table order is named).
//!
//! Used by the `ops` and `hostile_peer` oracles (the latter drops the model at the first
//! overwrite, since a hostile peer's words have no specified meaning).

//!
//! This is the one ring model of the verification tree: the op-level state machine
//! ([`machine`](crate::machine), which the proptest state machine, the conformance suite and
//! the `model_ops` fuzz target run) keeps its ring here too. Files by job: this one holds the
//! state and the producer (claims, never-stall slot choice, publish); `read.rs` registration
//! and reads; `groups.rs` groups and their floor; `reclaim.rs` reclaims. `alloc.rs` is the
//! one model of the segment's allocator ([`AllocModel`]), which the state machine, the
//! `allocator` oracle and ring-core's allocator test share.

mod alloc;
mod groups;
mod read;
mod reclaim;

pub use alloc::{read_back, AllocModel, LiveAlloc};

use ring_core::layout::{CLASS_GROUP, GROUP_CLAIMS};
use ring_core::{ClaimError, DeliveryClass, Error, INLINE_CAPACITY};
use std::collections::{BTreeMap, BTreeSet};

/// One slot: seqlock stamp, claim and pin state, and the message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SlotModel {
    /// `2 * seq + 2` once message `seq` is published; `2 * seq + 1` after an aborted (or a
    /// dead producer's) claim for `seq`; 0 before any. A claim leaves it alone.
    pub stamp: u64,
    /// The claim marker: `2 * seq + 1` from the claim of `seq` on; 0 before any.
    pub claim: u64,
    /// The producer holds the slot.
    pub writer: bool,
    /// Bit `i`: consumer entry `i` holds a pin.
    pub readers: u32,
    /// Length of the last published message.
    pub len: usize,
    /// Metadata of the last published message.
    pub meta: [u64; 2],
    /// Every payload byte of the slot (writes change only the bytes they cover).
    pub bytes: Vec<u8>,
    /// The slot header's inline words ([`INLINE_CAPACITY`] bytes): a message of at most that
    /// many bytes travels there (written by `try_publish`/`try_publish_batch` directly, or
    /// copied from the payload area at a claim's publish; its last word padded); nothing else
    /// writes them.
    pub inline: Vec<u8>,
}

impl SlotModel {
    /// The published message's bytes: in the inline words when it is small, else in the
    /// payload area.
    pub fn message(&self) -> &[u8] {
        &self.words()[..self.len]
    }

    /// Where readers of the published message read it, from byte 0: the inline words when it
    /// is small, else the payload area (its padded last word included).
    pub fn words(&self) -> &[u8] {
        if self.len <= INLINE_CAPACITY {
            &self.inline
        } else {
            &self.bytes
        }
    }
}

/// One consumer-table entry as peers see it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EntryModel {
    /// Registered (a dead consumer stays registered until it is reclaimed).
    pub active: bool,
    /// Stored delivery class (0 until first used; kept after the entry is freed).
    pub class: u32,
    /// Owner id (0 when free).
    pub owner: u64,
    /// Shared cursor: set at registration, then after each completed read.
    pub cursor: u64,
    /// Shared received count, as of the last completed read.
    pub received: u64,
    /// Shared missed count, as of the last completed read.
    pub missed: u64,
    /// Group key: a member's or a record's (kept after the entry is freed), 0 for a lone
    /// consumer.
    pub group: u64,
    /// Claim words: a member's messages taken and not finished, a record's redelivery queue
    /// (each 0 or `seq + 1`).
    pub claims: [u64; GROUP_CLAIMS],
}

impl EntryModel {
    /// Whether this is a group's record.
    pub fn is_record(&self) -> bool {
        self.active && self.class == CLASS_GROUP
    }

    /// Whether this is a group member's entry (alive or dead).
    pub fn is_member(&self) -> bool {
        self.active && self.class == DeliveryClass::Gating as u32 && self.group != 0
    }
}

/// The lowest `seq` of words holding `seq + 1` (`u64::MAX` when all are 0).
pub fn words_floor(words: &[u64]) -> u64 {
    words
        .iter()
        .filter(|&&v| v != 0)
        .map(|v| v - 1)
        .min()
        .unwrap_or(u64::MAX)
}

/// What a group member knows of its group.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemberModel {
    /// The table index of the group's record.
    pub record: usize,
    /// The claim word of a message handed out and not finished (a buffer too small, a pin):
    /// the next read hands it out again, flagged.
    pub pending: Option<usize>,
}

/// A message a member's read took.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Taken {
    /// Sequence.
    pub seq: u64,
    /// Slot.
    pub slot: usize,
    /// Length in bytes.
    pub len: usize,
    /// Metadata.
    pub meta: [u64; 2],
    /// Handed out before.
    pub redelivered: bool,
    /// The member's claim word holding it.
    pub word: usize,
}

/// A group's exactly-once ledger.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Ledger {
    /// Every message handed out to a member at least once.
    pub handed: BTreeSet<u64>,
    /// Messages owed a redelivery: handed out, not finished, given back (by the reclaim of
    /// the dead member that held them, or by a read that did not finish).
    pub owed: BTreeSet<u64>,
}

/// Distinct group names the operations use.
pub const GROUPS: u8 = 2;

/// The name of group `group` (modulo [`GROUPS`]): the groups the operations create and join.
pub fn group_name(group: u8) -> &'static str {
    ["workers", "loggers"][usize::from(group % GROUPS)]
}

/// A live `Consumer` as the model sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReaderModel {
    /// Consumer-table index.
    pub index: usize,
    /// Owner id.
    pub owner: u64,
    /// Delivery class.
    pub class: DeliveryClass,
    /// Next sequence to read.
    pub next: u64,
    /// `head` at registration.
    pub start: u64,
    /// Messages received.
    pub received: u64,
    /// Messages missed.
    pub missed: u64,
    /// One-message reads not yet published to the entry: a reader that does not gate stores
    /// its cursor and counters every [`ring_core::PROGRESS_EVERY`] reads, when a read fails,
    /// and before it waits (always 0 for a gating reader).
    pub unpublished: u32,
    /// Messages held (`try_hold`), in the order taken: (sequence, slot).
    pub holds: Vec<(u64, usize)>,
    /// Set for a group member.
    pub member: Option<MemberModel>,
}

impl ReaderModel {
    /// The cursor the entry shows: a gating reader's stays at its oldest hold.
    pub fn shared_cursor(&self) -> u64 {
        match self.holds.iter().map(|h| h.0).min() {
            Some(oldest) if self.class == DeliveryClass::Gating => oldest.min(self.next),
            _ => self.next,
        }
    }
}

/// A successful read as the model predicts it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReadOk {
    /// Sequence read.
    pub seq: u64,
    /// Slot it lies in.
    pub slot: usize,
    /// Length in bytes.
    pub len: usize,
    /// Missed before it, by this read.
    pub missed: u64,
    /// Metadata.
    pub meta: [u64; 2],
}

/// The whole ring.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RingModel {
    /// Slot count.
    pub n: u64,
    /// Slot capacity in bytes.
    pub cap: usize,
    /// Messages published.
    pub head: u64,
    /// The closed flag.
    pub closed: bool,
    /// The stream ended as aborted (a producer dropped without closing).
    pub aborted: bool,
    /// The producer line's owner word (a dead producer's id stays until a takeover).
    pub owner_word: u64,
    /// Takeovers.
    pub epoch: u32,
    /// Slots.
    pub slots: Vec<SlotModel>,
    /// Consumer table.
    pub entries: Vec<EntryModel>,
    /// Each group's ledger, by its record's table index.
    pub ledgers: BTreeMap<usize, Ledger>,
    /// A never-stall ring: the producer writes each message into a slot nobody pins and
    /// routes it from its home slot (see [`claim`](Self::claim)).
    pub never_stall: bool,
    /// Never-stall: each home slot's route, `(seq, slot)` of the newest message published
    /// whose home it is.
    pub routes: Vec<Option<(u64, usize)>>,
    /// Never-stall: the newest message's slot, which the producer never claims.
    pub newest: Option<usize>,
}

impl RingModel {
    /// A freshly formatted ring.
    pub fn new(slots: usize, cap: usize, consumers: usize) -> Self {
        Self {
            n: slots as u64,
            cap,
            head: 0,
            closed: false,
            aborted: false,
            owner_word: 0,
            epoch: 0,
            slots: (0..slots)
                .map(|_| SlotModel {
                    stamp: 0,
                    claim: 0,
                    writer: false,
                    readers: 0,
                    len: 0,
                    meta: [0; 2],
                    bytes: vec![0; cap],
                    inline: vec![0; INLINE_CAPACITY],
                })
                .collect(),
            entries: (0..consumers)
                .map(|_| EntryModel {
                    active: false,
                    class: 0,
                    owner: 0,
                    cursor: 0,
                    received: 0,
                    missed: 0,
                    group: 0,
                    claims: [0; GROUP_CLAIMS],
                })
                .collect(),
            ledgers: BTreeMap::new(),
            never_stall: false,
            routes: vec![None; slots],
            newest: None,
        }
    }

    /// This ring as a never-stall one (or not).
    #[must_use]
    pub fn with_never_stall(mut self, never_stall: bool) -> Self {
        self.never_stall = never_stall;
        self
    }

    /// The home slot of sequence `seq`: where it lives on a plain ring.
    pub fn slot_of(&self, seq: u64) -> usize {
        (seq % self.n) as usize
    }

    /// Where published message `seq` is, as a reader finds it: its home slot, or on a
    /// never-stall ring the slot its home slot's route names (`None`: the route names a later
    /// message, an overrun).
    pub fn locate(&self, seq: u64) -> Option<usize> {
        let home = self.slot_of(seq);
        if !self.never_stall {
            return Some(home);
        }
        match self.routes[home] {
            Some((s, slot)) if s == seq => Some(slot),
            _ => None,
        }
    }

    /// The route word ring-core keeps in slot `home`'s pin line (0: none; always 0 on a plain
    /// ring).
    pub fn route_word(&self, home: usize) -> u64 {
        self.routes[home].map_or(0, |(seq, slot)| ring_core::layout::route_word(seq, slot))
    }

    /// The stamp a reader finds for `seq` (0: not yet, `u64::MAX`: overwritten).
    pub(super) fn stamp_of(&self, seq: u64) -> u64 {
        match (self.never_stall, self.routes[self.slot_of(seq)]) {
            (false, _) => self.slots[self.slot_of(seq)].stamp,
            (true, Some((s, slot))) if s == seq => self.slots[slot].stamp,
            (true, Some((s, _))) if s > seq => u64::MAX,
            _ => 0,
        }
    }

    /// The never-stall claim: the home slot when it is not the newest message's, is free, holds
    /// no message or one a lap old that no gating consumer or group needs; else the free slot
    /// (not the newest's) with the oldest message (none first, lowest index on ties), `Full`
    /// when a gating consumer or group still needs it, `Pinned` when there is none (naming the
    /// home slot when it is busy and not the newest's, else the first busy one).
    fn claim_never_stall(&self) -> Result<usize, ClaimError> {
        let seq = self.head;
        let home = self.slot_of(seq);
        let (cursor, consumer) = self.gating_floor();
        let bound = cursor.min(seq);
        let message = |slot: usize| {
            let stamp = self.slots[slot].stamp;
            (stamp != 0 && stamp % 2 == 0)
                .then(|| stamp / 2 - 1)
                .filter(|&m| m < seq)
        };
        let done = |m: Option<u64>| m.is_none_or(|m| m < bound);
        let free = |slot: usize| !self.slots[slot].writer && self.slots[slot].readers == 0;
        let other = |slot: usize| self.newest != Some(slot);
        let m = message(home);
        if other(home) && free(home) && done(m) && m.is_none_or(|m| m + self.n <= seq) {
            return Ok(home);
        }
        // Oldest first: no message sorts before any message; `min_by_key` keeps the first.
        let best = (0..self.slots.len())
            .filter(|&s| other(s) && free(s))
            .min_by_key(|&s| message(s).map_or(0, |m| m + 1));
        match best {
            Some(slot) if done(message(slot)) => Ok(slot),
            Some(_) => Err(ClaimError::Full { consumer, cursor }),
            None => {
                let slot = if other(home) {
                    home
                } else {
                    (0..self.slots.len()).find(|&s| other(s)).unwrap_or(home)
                };
                Err(ClaimError::Pinned {
                    slot,
                    readers: self.slots[slot].readers,
                })
            }
        }
    }

    /// `Producer::new` / `take_over` common start: a new epoch, reopen, drop a dead producer's
    /// claim.
    fn start(&mut self) {
        self.closed = false;
        self.aborted = false;
        self.epoch = self.epoch.wrapping_add(1);
        for s in &mut self.slots {
            if s.writer && s.claim | 1 > s.stamp {
                // The dead producer's claim: the stamp stops naming the old message.
                s.stamp = s.claim | 1;
            }
            s.writer = false;
        }
    }

    /// `Producer::new`.
    pub fn producer_new(&mut self, owner: u64) -> Result<(), Error> {
        if self.owner_word != 0 {
            return Err(Error::ProducerExists {
                owner: self.owner_word,
            });
        }
        self.owner_word = owner;
        self.start();
        Ok(())
    }

    /// `Producer::take_over`.
    pub fn take_over(&mut self, owner: u64, dead: u64) -> Result<(), Error> {
        if self.owner_word != dead {
            return Err(Error::OwnerMismatch {
                found: self.owner_word,
            });
        }
        self.owner_word = owner;
        self.start();
        Ok(())
    }

    /// `Producer::close`: the first end of the stream wins.
    pub fn close(&mut self) {
        self.closed = true;
    }

    /// Dropping a `Producer`: it aborts the stream unless it was closed, then releases the
    /// producer line.
    pub fn producer_drop(&mut self, owner: u64) {
        if !self.closed {
            self.closed = true;
            self.aborted = true;
        }
        if self.owner_word == owner {
            self.owner_word = 0;
        }
    }

    /// `try_claim`: the slot for sequence `head`, or why not.
    pub fn claim(&self) -> Result<usize, ClaimError> {
        if self.closed {
            return Err(ClaimError::Closed);
        }
        self.claim_slot()
    }

    /// Why a claim of the next sequence would be refused for a gating consumer or a pin
    /// (`Full`, `Pinned`), if it would: what `Producer::is_claimable` tells without claiming.
    pub fn claim_blocked(&self) -> Option<ClaimError> {
        self.claim_slot().err()
    }

    /// The slot a claim of `head` takes on an open ring, or why it is refused.
    fn claim_slot(&self) -> Result<usize, ClaimError> {
        if self.never_stall {
            return self.claim_never_stall();
        }
        let need = (self.head + 1).saturating_sub(self.n);
        let (cursor, consumer) = self.gating_floor();
        if cursor < need {
            return Err(ClaimError::Full { consumer, cursor });
        }
        let slot = self.slot_of(self.head);
        let s = &self.slots[slot];
        if s.writer || s.readers != 0 {
            return Err(ClaimError::Pinned {
                slot,
                readers: s.readers,
            });
        }
        Ok(slot)
    }

    /// The claim succeeded: the slot is the producer's, its claim marker `2 * head + 1` (the
    /// stamp still names the previous message).
    pub fn begin(&mut self, slot: usize) {
        let s = &mut self.slots[slot];
        s.writer = true;
        s.claim = 2 * self.head + 1;
    }

    /// A payload write into a claimed slot; false (nothing written) past the capacity.
    pub fn write_at(&mut self, slot: usize, offset: usize, data: &[u8]) -> bool {
        match offset.checked_add(data.len()) {
            Some(end) if end <= self.cap => {
                self.slots[slot].bytes[offset..end].copy_from_slice(data);
                true
            }
            _ => false,
        }
    }

    /// `WriteSlot::publish`: returns the sequence.
    pub fn publish(&mut self, slot: usize, len: usize, meta: [u64; 2]) -> u64 {
        let s = &mut self.slots[slot];
        // The last word is zero-padded past `len` (what `Pinned::words` promises).
        let pad_end = len.div_ceil(8) * 8;
        s.bytes[len..pad_end].fill(0);
        if len <= INLINE_CAPACITY {
            // A small message travels inline: its padded words are copied into the message
            // line.
            s.inline[..pad_end].copy_from_slice(&s.bytes[..pad_end]);
        }
        self.publish_line(slot, len, meta)
    }

    /// The end of every publish: length, metadata, stamp, `head` (and a never-stall ring's
    /// route), with the message's words already in place.
    fn publish_line(&mut self, slot: usize, len: usize, meta: [u64; 2]) -> u64 {
        let seq = self.head;
        let s = &mut self.slots[slot];
        s.len = len;
        s.meta = meta;
        s.stamp = 2 * seq + 2;
        s.writer = false;
        self.head = seq + 1;
        if self.never_stall {
            let home = self.slot_of(seq);
            self.routes[home] = Some((seq, slot));
            self.newest = Some(slot);
        }
        seq
    }

    /// `WriteSlot::abort` (or drop): the slot goes back with the odd stamp of the claimed
    /// sequence (the old message may be partly overwritten).
    pub fn abort(&mut self, slot: usize) {
        let s = &mut self.slots[slot];
        s.stamp = 2 * self.head + 1;
        s.writer = false;
    }

    /// `try_publish`.
    pub fn try_publish(&mut self, data: &[u8]) -> Result<u64, ClaimError> {
        if data.len() > self.cap {
            return Err(ClaimError::TooLarge {
                len: data.len(),
                capacity: self.cap,
            });
        }
        let slot = self.claim()?;
        Ok(self.fill_publish(slot, data, [0; 2]))
    }

    /// `try_publish` and `try_publish_batch` after a successful claim of `slot`: a message
    /// longer than the message line is written into the payload area; a small one goes into
    /// the message line alone, padded, and the payload area keeps what the claim API last
    /// wrote there (what a later `set_len` past the written bytes shows).
    pub fn fill_publish(&mut self, slot: usize, data: &[u8], meta: [u64; 2]) -> u64 {
        self.begin(slot);
        if data.len() > INLINE_CAPACITY {
            self.write_at(slot, 0, data);
            return self.publish(slot, data.len(), meta);
        }
        let s = &mut self.slots[slot];
        let pad_end = data.len().div_ceil(8) * 8;
        s.inline[..data.len()].copy_from_slice(data);
        s.inline[data.len()..pad_end].fill(0);
        self.publish_line(slot, data.len(), meta)
    }
}
