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

use ring_core::{ClaimError, DeliveryClass, Error, ReadError, Reclaimed, READ_RETRIES};

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
                })
                .collect(),
        }
    }

    /// Slot of sequence `seq`.
    pub fn slot_of(&self, seq: u64) -> usize {
        (seq % self.n) as usize
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
        let (_, slot) = r.holds.remove(k);
        if !self.registered(r) {
            return; // Reclaimed: the entry and its bits are not the reader's any more.
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
        let need = (self.head + 1).saturating_sub(self.n);
        for (i, e) in self.entries.iter().enumerate() {
            if e.active && e.class == DeliveryClass::Gating as u32 && e.cursor < need {
                return Err(ClaimError::Full {
                    consumer: i,
                    cursor: e.cursor,
                });
            }
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
            let slot = self.slot_of(seq);
            let s = &self.slots[slot];
            let want = 2 * seq + 2;
            if s.writer || s.stamp > want {
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
        self.entries
            .iter()
            .filter(|e| e.active && e.class == DeliveryClass::Gating as u32)
            .map(|e| e.cursor)
            .min()
            .unwrap_or(u64::MAX)
            >= self.head
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
