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

use ring_core::layout::{CLASS_GROUP, GROUP_CLAIMS, OWNER_GROUP};
use ring_core::{group_key, ClaimError, DeliveryClass, Error, ReadError, Reclaimed, READ_RETRIES};
use std::collections::{BTreeMap, BTreeSet};

/// One slot: seqlock stamp, claim and pin state, and the message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SlotModel {
    /// `2 * seq + 2` once message `seq` is published; `2 * seq + 1` while (or after an aborted)
    /// claim for `seq`; 0 before any.
    pub stamp: u64,
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

/// The names of the groups the `ops` operations create and join.
pub fn group_name(group: u8) -> &'static str {
    ["workers", "loggers"][usize::from(group % 2)]
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
                    writer: false,
                    readers: 0,
                    len: 0,
                    meta: [0; 2],
                    bytes: vec![0; cap],
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

    /// The stamp a reader finds for `seq` (0: not yet, `u64::MAX`: overwritten).
    fn stamp_of(&self, seq: u64) -> u64 {
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

    /// `Consumer::new`: the first free entry, starting at the current head.
    pub fn register(&mut self, class: DeliveryClass, owner: u64) -> Result<ReaderModel, Error> {
        // Latest-only readers start at the newest message present (one back from head).
        let head = match class {
            DeliveryClass::LatestOnly => self.head.saturating_sub(1),
            _ => self.head,
        };
        let Some(index) = self.entries.iter().position(|e| !e.active) else {
            return Err(Error::ConsumerTableFull {
                capacity: self.entries.len() as u32,
            });
        };
        self.entries[index] = EntryModel {
            active: true,
            class: class as u32,
            owner,
            cursor: head,
            received: 0,
            missed: 0,
            group: 0,
            claims: [0; GROUP_CLAIMS],
        };
        Ok(ReaderModel {
            index,
            owner,
            class,
            next: head,
            start: head,
            received: 0,
            missed: 0,
            holds: Vec::new(),
            member: None,
        })
    }

    /// Whether `r` still owns its entry (not reclaimed).
    pub fn registered(&self, r: &ReaderModel) -> bool {
        let e = &self.entries[r.index];
        e.active && e.owner == r.owner
    }

    /// Dropping a `Consumer`: takes its bit back from every slot (its holds, a leaked pin)
    /// and frees its entry, if it still owns it.
    pub fn leave(&mut self, r: &ReaderModel) {
        if self.registered(r) {
            for s in &mut self.slots {
                s.readers &= !(1 << r.index);
            }
            let e = &mut self.entries[r.index];
            e.active = false;
            e.owner = 0;
            // A member's unfinished claims end with it (a hold not released was delivered).
            e.claims = [0; GROUP_CLAIMS];
        }
    }

    /// A read of `seq` in `slot` by `r` became a hold: the reader moves on, the slot stays
    /// pinned (a reader bit, or the gating cursor at the oldest hold).
    pub fn hold(&mut self, r: &mut ReaderModel, seq: u64, slot: usize) {
        r.holds.push((seq, slot));
        if r.class != DeliveryClass::Gating {
            self.slots[slot].readers |= 1 << r.index;
        }
        self.advance(r, seq);
    }

    /// Hold `k` of `r` released.
    pub fn release(&mut self, r: &mut ReaderModel, k: usize) {
        let (seq, slot) = r.holds.remove(k);
        if !self.registered(r) {
            return; // Reclaimed: the entry and its bits are not the reader's any more.
        }
        if r.member.is_some() {
            if let Some(word) = self.entries[r.index]
                .claims
                .iter()
                .position(|&v| v == seq + 1)
            {
                self.finish(r, word);
            }
            return;
        }
        if r.class != DeliveryClass::Gating {
            self.slots[slot].readers &= !(1 << r.index);
        }
        self.entries[r.index].cursor = r.shared_cursor();
    }

    /// `Producer::new` / `take_over` common start: a new epoch, reopen, drop a dead producer's
    /// claim.
    fn start(&mut self) {
        self.closed = false;
        self.aborted = false;
        self.epoch = self.epoch.wrapping_add(1);
        for s in &mut self.slots {
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

    /// The claim succeeded: the slot is the producer's, its stamp odd.
    pub fn begin(&mut self, slot: usize) {
        let s = &mut self.slots[slot];
        s.writer = true;
        s.stamp = 2 * self.head + 1;
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
        let seq = self.head;
        let s = &mut self.slots[slot];
        // The last word is zero-padded past `len` (what `Pinned::words` promises).
        s.bytes[len..len.div_ceil(8) * 8].fill(0);
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

    /// `WriteSlot::abort` (or drop): the slot goes back, its stamp stays odd.
    pub fn abort(&mut self, slot: usize) {
        self.slots[slot].writer = false;
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
        self.begin(slot);
        self.write_at(slot, 0, data);
        Ok(self.publish(slot, data.len(), [0; 2]))
    }

    fn empty_or_closed(&self) -> ReadError {
        if self.closed && self.aborted {
            ReadError::Aborted { code: 0 }
        } else if self.closed {
            ReadError::Closed
        } else {
            ReadError::Empty
        }
    }

    /// Which sequence `r` reads next and how many it skips to get there.
    fn target(&self, r: &ReaderModel) -> Result<(u64, u64), ReadError> {
        let head = self.head;
        match r.class {
            DeliveryClass::LatestOnly => {
                if head == 0 || head - 1 < r.next {
                    return Err(self.empty_or_closed());
                }
                Ok((head - 1, head - 1 - r.next))
            }
            DeliveryClass::Gating | DeliveryClass::SkipOnLag => {
                if r.next >= head {
                    return Err(self.empty_or_closed());
                }
                let oldest = head.saturating_sub(self.n);
                Ok(if r.next < oldest {
                    (oldest, oldest - r.next)
                } else {
                    (r.next, 0)
                })
            }
        }
    }

    /// `try_pin` (`buf = None`) or `try_copy` into `buf` bytes, up to the point where the read
    /// succeeds: the caller then pins (and later calls [`advance`](Self::advance)) or copies
    /// (and calls `advance` at once).
    ///
    /// Every sequence the reader moves past is counted as missed, whatever the call returns.
    pub fn read(&self, r: &mut ReaderModel, buf: Option<usize>) -> Result<ReadOk, ReadError> {
        if !self.registered(r) {
            return Err(ReadError::Evicted);
        }
        let mut lost = 0;
        for _ in 0..READ_RETRIES {
            let (seq, skipped) = match self.target(r) {
                Ok(t) => t,
                Err(e) => {
                    r.missed += lost;
                    return Err(e);
                }
            };
            let located = self.locate(seq);
            let slot = located.unwrap_or(self.slot_of(seq));
            let s = &self.slots[slot];
            let want = 2 * seq + 2;
            if located.is_none() || s.writer || s.stamp > want {
                // Overwritten (or being overwritten): gone for good.
                lost += skipped + 1;
                r.next = seq + 1;
                continue;
            }
            if s.stamp < want {
                r.missed += lost;
                return Err(ReadError::Corrupt(
                    "slot stamp is behind the published head",
                ));
            }
            if let Some(b) = buf {
                if s.len > b {
                    r.missed += lost;
                    return Err(ReadError::BufferTooSmall { needed: s.len });
                }
            }
            r.missed += lost + skipped;
            return Ok(ReadOk {
                seq,
                slot,
                len: s.len,
                missed: lost + skipped,
                meta: s.meta,
            });
        }
        r.missed += lost;
        Err(ReadError::Lagging)
    }

    /// A read of `seq` completed: the cursor moves past it and the shared entry says so.
    pub fn advance(&mut self, r: &mut ReaderModel, seq: u64) {
        r.next = seq + 1;
        r.received += 1;
        let e = &mut self.entries[r.index];
        e.cursor = r.shared_cursor();
        e.received = r.received;
        e.missed = r.missed;
    }

    /// Whether a read by `r` would find a message (or the ring closed).
    pub fn ready(&self, r: &ReaderModel) -> bool {
        if let Some(m) = r.member {
            // A pending or queued message, the group's next message published, or the end.
            let g = &self.entries[m.record];
            // The end counts only once no other member holds an unfinished message.
            let others_hold = self.entries.iter().enumerate().any(|(j, e)| {
                j != r.index
                    && e.is_member()
                    && e.group == g.group
                    && e.claims.iter().any(|&v| v != 0)
            });
            return m.pending.is_some()
                || g.claims.iter().any(|&v| v != 0)
                || (self.closed && !others_hold)
                || self.stamp_of(g.cursor) >= 2 * g.cursor + 2;
        }
        self.closed
            || match r.class {
                DeliveryClass::LatestOnly => self.head > r.next,
                _ => r.next < self.head,
            }
    }

    /// `wait_ready` with a bounded strategy that runs out.
    pub fn wait_ready(&self, r: &ReaderModel) -> Result<(), ReadError> {
        if !self.registered(r) {
            Err(ReadError::Evicted)
        } else if self.ready(r) {
            Ok(())
        } else {
            Err(ReadError::Timeout)
        }
    }

    /// `wait_drained` with a bounded strategy that runs out.
    pub fn drained(&self) -> bool {
        self.gating_floor().0 >= self.head
    }

    /// The lowest sequence the producer must keep and whose entry keeps it (`u64::MAX` and 0
    /// when nothing gates): a lone gating consumer's cursor; a group's cursor or queued
    /// message; a message a member (alive or dead, until reclaimed) took and did not finish.
    /// Ties go to the first in table order, a record before any member.
    pub fn gating_floor(&self) -> (u64, usize) {
        let mut lowest = (u64::MAX, 0);
        for (i, e) in self.entries.iter().enumerate() {
            let v = if e.is_record() {
                e.cursor.min(words_floor(&e.claims))
            } else if e.active && e.class == DeliveryClass::Gating as u32 && e.group == 0 {
                e.cursor
            } else {
                continue;
            };
            if v < lowest.0 {
                lowest = (v, i);
            }
        }
        for (i, e) in self.entries.iter().enumerate() {
            if e.is_member() && words_floor(&e.claims) < lowest.0 {
                lowest = (words_floor(&e.claims), i);
            }
        }
        lowest
    }

    /// The record of group `name`, if created.
    pub fn record_of(&self, name: &str) -> Option<usize> {
        let key = group_key(name);
        self.entries
            .iter()
            .position(|e| e.is_record() && e.group == key)
    }

    /// `Producer::create_group` (idempotent): a record starting at `head`.
    pub fn create_group(&mut self, name: &str) -> Result<usize, Error> {
        if let Some(i) = self.record_of(name) {
            return Ok(i);
        }
        let Some(i) = self.entries.iter().position(|e| !e.active) else {
            return Err(Error::ConsumerTableFull {
                capacity: self.entries.len() as u32,
            });
        };
        self.entries[i] = EntryModel {
            active: true,
            class: CLASS_GROUP,
            owner: OWNER_GROUP,
            cursor: self.head,
            received: 0,
            missed: 0,
            group: group_key(name),
            claims: [0; GROUP_CLAIMS],
        };
        self.ledgers.insert(i, Ledger::default());
        Ok(i)
    }

    /// `Consumer::join_group`: a gating entry whose key names the group.
    pub fn join(&mut self, name: &str, owner: u64) -> Result<ReaderModel, Error> {
        let Some(record) = self.record_of(name) else {
            return Err(Error::NoSuchGroup);
        };
        let mut r = self.register(DeliveryClass::Gating, owner)?;
        self.entries[r.index].group = group_key(name);
        r.member = Some(MemberModel {
            record,
            pending: None,
        });
        Ok(r)
    }

    /// Checks a member's read the real ring returned against its group's ledger: a message
    /// goes to one member only unless it is redelivered, and only a message owed a
    /// redelivery is redelivered.
    pub fn check_ledger(&self, r: &ReaderModel, seq: u64, redelivered: bool) -> Result<(), String> {
        let Some(l) = r.member.and_then(|m| self.ledgers.get(&m.record)) else {
            return Ok(());
        };
        if redelivered && !l.owed.contains(&seq) {
            return Err(format!(
                "message {seq} redelivered, but no reclaimed member or unfinished read gave it \
                 back (owed: {:?})",
                l.owed
            ));
        }
        if !redelivered && l.handed.contains(&seq) {
            return Err(format!(
                "message {seq} handed out a second time, not flagged as redelivered"
            ));
        }
        Ok(())
    }

    /// A member's read up to the hand-out: its pending message, else the first queued
    /// redelivery, else the group's next message; the claim is stored (the caller finishes
    /// it, keeps it as a hold, or marks it pending).
    pub fn member_take(&mut self, r: &mut ReaderModel) -> Result<Taken, ReadError> {
        let Some(mut m) = r.member else {
            return Err(ReadError::NotSupported("not a group member"));
        };
        let own = r.index;
        let (word, seq, redelivered) = if let Some(word) = m.pending.take() {
            r.member = Some(m);
            (word, self.entries[own].claims[word] - 1, true)
        } else {
            if !self.registered(r) {
                return Err(ReadError::Evicted);
            }
            let Some(word) = self.entries[own].claims.iter().position(|&v| v == 0) else {
                return Err(ReadError::TooManyHolds { max: GROUP_CLAIMS });
            };
            let queue = &mut self.entries[m.record].claims;
            let (seq, redelivered) = if let Some(q) = queue.iter().position(|&v| v != 0) {
                (core::mem::take(&mut queue[q]) - 1, true)
            } else {
                let seq = self.entries[m.record].cursor;
                let stamp = self.stamp_of(seq);
                if stamp < 2 * seq + 2 {
                    // The group's stream ends for this member only when no other member (alive,
                    // or dead and not yet reclaimed) holds an unfinished message.
                    let key = self.entries[m.record].group;
                    let others_hold = self.entries.iter().enumerate().any(|(j, e)| {
                        j != own
                            && e.is_member()
                            && e.group == key
                            && e.claims.iter().any(|&v| v != 0)
                    });
                    return Err(match self.empty_or_closed() {
                        ReadError::Closed | ReadError::Aborted { .. } if others_hold => {
                            ReadError::Empty
                        }
                        other => other,
                    });
                }
                if stamp > 2 * seq + 2 {
                    return Err(ReadError::Corrupt(
                        "the group's next message was overwritten while the group gated it",
                    ));
                }
                self.entries[m.record].cursor = seq + 1;
                (seq, false)
            };
            self.entries[own].claims[word] = seq + 1;
            r.received += 1;
            (word, seq, redelivered)
        };
        if let Some(l) = self.ledgers.get_mut(&m.record) {
            if redelivered {
                l.owed.remove(&seq);
            } else {
                l.handed.insert(seq);
            }
        }
        let slot = self.locate(seq).unwrap_or(self.slot_of(seq));
        let s = &self.slots[slot];
        Ok(Taken {
            seq,
            slot,
            len: s.len,
            meta: s.meta,
            redelivered,
            word,
        })
    }

    /// A member's read handed `t` out but did not finish it: the next read hands it out
    /// again.
    pub fn keep_pending(&mut self, r: &mut ReaderModel, t: &Taken) {
        if let Some(m) = r.member.as_mut() {
            m.pending = Some(t.word);
            if let Some(l) = self.ledgers.get_mut(&m.record) {
                l.owed.insert(t.seq);
            }
        }
    }

    /// A member finished the message in claim `word`.
    pub fn finish(&mut self, r: &mut ReaderModel, word: usize) {
        if let Some(m) = r.member.as_mut() {
            if m.pending == Some(word) {
                m.pending = None;
            }
        }
        if self.registered(r) {
            let e = &mut self.entries[r.index];
            e.claims[word] = 0;
            e.received = r.received;
        }
    }

    /// Moves dead member `index`'s claims to its group's queue (all or none).
    fn hand_claims_to_group(&mut self, index: usize) -> Result<(), Error> {
        let key = self.entries[index].group;
        let Some(record) = (0..self.entries.len())
            .find(|&i| self.entries[i].is_record() && self.entries[i].group == key)
        else {
            self.entries[index].claims = [0; GROUP_CLAIMS];
            return Ok(());
        };
        let g = self.entries[record].clone();
        let moving: Vec<u64> = self.entries[index]
            .claims
            .iter()
            .copied()
            .filter(|&v| v != 0 && v - 1 < g.cursor && !g.claims.contains(&v))
            .collect();
        let free = g.claims.iter().filter(|&&v| v == 0).count();
        if free < moving.len() {
            return Err(Error::RedeliveryFull {
                needed: moving.len(),
                free,
            });
        }
        let mut next = moving.iter();
        for w in &mut self.entries[record].claims {
            if *w == 0 {
                match next.next() {
                    Some(&v) => *w = v,
                    None => break,
                }
            }
        }
        if let Some(l) = self.ledgers.get_mut(&record) {
            l.owed.extend(moving.iter().map(|v| v - 1));
        }
        self.entries[index].claims = [0; GROUP_CLAIMS];
        Ok(())
    }

    /// `Producer::reclaim`.
    pub fn reclaim(&mut self, index: usize, expected: u64) -> Result<Reclaimed, Error> {
        let Some(e) = self.entries.get(index) else {
            return Err(Error::NoSuchConsumer { index });
        };
        if !e.active {
            return Ok(Reclaimed {
                index,
                owner: e.owner,
                pins_cleared: 0,
                cursor: 0,
                was_registered: false,
            });
        }
        if e.owner != expected {
            return Err(Error::OwnerMismatch { found: e.owner });
        }
        if e.is_record() {
            // A group's record belongs to the ring: no verdict reclaims it.
            return Ok(Reclaimed {
                index,
                owner: e.owner,
                pins_cleared: 0,
                cursor: 0,
                was_registered: false,
            });
        }
        if e.is_member() {
            self.hand_claims_to_group(index)?;
        }
        let e = &self.entries[index];
        let (owner, cursor) = (e.owner, e.cursor);
        let bit = 1u32 << index;
        let mut pins_cleared = 0;
        for s in &mut self.slots {
            if s.readers & bit != 0 {
                s.readers &= !bit;
                pins_cleared += 1;
            }
        }
        let e = &mut self.entries[index];
        e.active = false;
        e.owner = 0;
        Ok(Reclaimed {
            index,
            owner,
            pins_cleared,
            cursor,
            was_registered: true,
        })
    }

    /// Pins held in entry `index`'s name.
    pub fn pins_of(&self, index: usize) -> u32 {
        self.slots
            .iter()
            .filter(|s| s.readers & (1 << index) != 0)
            .count() as u32
    }

    /// Slots the producer holds.
    pub fn writing(&self) -> u32 {
        self.slots.iter().filter(|s| s.writer).count() as u32
    }
}
