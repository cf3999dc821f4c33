//! The single producer: claim → write → publish (or abort), gating, recovery and reclaim.

use crate::class::DeliveryClass;
use crate::error::{ClaimError, Error};
use crate::group::claims_floor;
use crate::layout::{
    ABORT_CODE_SHIFT, CLASS_GROUP, CONSUMER_ACTIVE, CONSUMER_FREE, CONSUMER_RECLAIMING,
    FLAG_ABORTED, FLAG_CLOSED, INLINE_CAPACITY, OWNER_SWEEPING, READER_MASK, SEQ_LIMIT, WRITER,
};
use crate::memory::{Memory, OpenJoin};
use crate::owner::OwnerId;
use crate::sync::AtomicU64;
use crate::sync::{fence, Ordering};
use crate::wait::WaitStrategy;

mod group;
mod never_stall;

/// The ring's one writer.
///
/// There is at most one `Producer` per segment: [`Producer::new`] claims the producer line's
/// owner word with a compare-and-swap, so a second producer (in any process) gets
/// [`Error::ProducerExists`].
///
/// # Examples
///
/// ```
/// use ring_core::{ClaimError, Config, HeapSegment, OwnerId, Producer};
/// let seg = HeapSegment::new(&Config::new(2, 16), OwnerId::new(1).unwrap()).unwrap();
/// let mut producer = Producer::new(&seg, OwnerId::new(1).unwrap()).unwrap();
/// let mut slot = producer.try_claim()?;
/// slot.write(b"frame 0").unwrap();
/// slot.set_meta([7, 0]);
/// assert_eq!(slot.publish()?, 0);
/// assert_eq!(producer.published(), 1);
/// # Ok::<(), ClaimError>(())
/// ```
#[derive(Debug)]
pub struct Producer<M: Memory> {
    mem: M,
    owner: OwnerId,
    /// Local copy of the publish cursor (the producer is its only writer): every sequence below
    /// it is complete in its slot (its stamp is final).
    head: u64,
    /// The `head` value last stored to the producer line. Equal to `head` except inside a
    /// batch, which stores `head` once at its end.
    stored_head: u64,
    /// Claims of sequences below this bound need no gating scan: the smallest gating cursor
    /// seen (or the scanned sequence, if smaller), plus the slot count. Cursors only grow, and a
    /// consumer that joins later starts at a head at least the scanned sequence, so the bound
    /// stays valid.
    gate_ok_below: u64,
    /// Whether a SeqCst fence has run since the last `head` store (see `try_claim`).
    fenced: bool,
    /// On a never-stall ring, the slot of the newest published message (`usize::MAX`: none
    /// known): the producer never claims it, so a latest-only reader always finds the newest.
    newest_slot: usize,
    /// Whether the ring is never-stall (cached from the geometry for the claim and publish).
    never_stall: bool,
    /// The producer line's epoch this producer started with (its fencing token).
    epoch: u32,
    /// The consumers this producer reclaimed (readers that died without leaving).
    lost: LostReaders,
}

/// A claimed slot. Write the message, then [`publish`](WriteSlot::publish) it; dropping it
/// without publishing aborts (the sequence number is reused by the next claim).
#[derive(Debug)]
pub struct WriteSlot<'a, M: Memory> {
    producer: &'a mut Producer<M>,
    slot: usize,
    seq: u64,
    len: usize,
    meta: [u64; 2],
    done: bool,
    /// The payload was lent out as `&mut [u8]` ([`WriteSlot::loan`]), which zeroed the last
    /// word's padding itself: `publish` then stores no payload word (it never mixes an atomic
    /// store into memory just written through a plain reference).
    loaned: bool,
}

/// What [`Producer::reclaim`] cleared for a dead consumer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reclaimed {
    /// The consumer-table index.
    pub index: usize,
    /// The owner the entry belonged to.
    pub owner: u64,
    /// Slots whose pin by this consumer was cleared.
    pub pins_cleared: u32,
    /// The consumer's cursor when it was reclaimed.
    pub cursor: u64,
    /// False when the entry was already free (reclaim is idempotent).
    pub was_registered: bool,
}

/// A consumer that ended without leaving: its holder died (or was judged dead), and this
/// producer reclaimed its entry. A consumer that finished leaves its entry itself and is never
/// one of these.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LostReader {
    /// What the reclaim cleared (entry, owner, pins, the reader's cursor).
    pub reclaimed: Reclaimed,
    /// The reader's class as its entry recorded it (`None`: a value no class has).
    pub class: Option<DeliveryClass>,
    /// Messages this producer had published when it reclaimed the reader: a gating reader
    /// whose `reclaimed.cursor` is below this died before it consumed everything.
    pub published: u64,
}

impl LostReader {
    /// Messages a gating reader had not consumed when it died (0 for other classes, which
    /// never promised to read everything).
    pub fn unread(&self) -> u64 {
        match self.class {
            Some(DeliveryClass::Gating) => self.published.saturating_sub(self.reclaimed.cursor),
            _ => 0,
        }
    }
}

/// The readers a producer lost: [`Producer::lost_readers`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LostReaders {
    /// Readers reclaimed so far.
    pub total: u64,
    /// Of those, gating readers (the stream's lossless readers).
    pub gating: u64,
    /// The most recent one.
    pub last: Option<LostReader>,
    /// The first gating reader that died with messages unread, if any.
    pub first_gating_unread: Option<LostReader>,
}

/// Why [`WriteSlot::loan`] refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LoanError {
    /// The ring has optimistic copy readers, which may read the slot while it is written:
    /// create it pin-only, or write with `write_at`.
    NotPinOnly,
    /// The loan is longer than the slot.
    TooLarge {
        /// Bytes asked for.
        len: usize,
        /// The slot capacity.
        capacity: usize,
    },
}

impl core::fmt::Display for LoanError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::NotPinOnly => f.write_str(
                "in-place writes need a pin-only ring (Config::with_pin_only): copy readers may \
                 read the slot while it is written; write with write_at instead",
            ),
            Self::TooLarge { len, capacity } => {
                write!(
                    f,
                    "a loan of {len} bytes does not fit in a {capacity}-byte slot"
                )
            }
        }
    }
}

impl core::error::Error for LoanError {}

/// The message is larger than the slot (or the allocation): nothing was written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Overflow {
    /// Bytes the reservation holds.
    pub reserved: usize,
    /// End offset the write would have reached.
    pub attempted: usize,
}

impl core::fmt::Display for Overflow {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(
            f,
            "write of {} bytes refused: the reservation holds {} (nothing was written)",
            self.attempted, self.reserved
        )
    }
}

impl core::error::Error for Overflow {}

impl<M: OpenJoin> Producer<M> {
    /// Becomes the ring's producer, on memory that carries no liveness contract.
    ///
    /// The unchecked form, for memory whose participants some liveness oracle may judge dead
    /// (ring-os's role locks), is [`new_unchecked`](Self::new_unchecked): a producer built
    /// there without taking part in that oracle would be "taken over" while it still writes.
    ///
    /// ```compile_fail,E0277
    /// // RawMemory (what an OS mapping opens) is not `OpenJoin`: no safe producer on it.
    /// use ring_core::{OwnerId, Producer, RawMemory};
    /// fn join(raw: &RawMemory) {
    ///     let _ = Producer::new(raw, OwnerId::new(1).unwrap()); // error[E0277]: not OpenJoin
    /// }
    /// ```
    ///
    /// # Errors
    /// [`Error::ProducerExists`] when another producer owns the ring.
    pub fn new(mem: M, owner: OwnerId) -> Result<Self, Error> {
        // SAFETY: `M: OpenJoin`: no liveness oracle judges participants on this memory, so
        // only an `unsafe` `take_over` (whose caller answers for it) can displace us.
        unsafe { Self::new_unchecked(mem, owner) }
    }
}

impl<M: Memory> Producer<M> {
    /// Becomes the ring's producer on any memory.
    ///
    /// Reopens a ring a previous producer closed; clears a `WRITER` bit a previous producer left
    /// behind (its unpublished message is dropped).
    ///
    /// # Safety
    /// For as long as the returned producer (or a [`WriteSlot`] of it) lives, whatever judges
    /// the liveness of this ring's participants judges it alive: no [`take_over`](Self::take_over)
    /// of it runs on a "the owner is dead" verdict. ring-os, for example, takes the producer's
    /// role lock first and holds it for the producer's whole life; the safe
    /// [`new`](Self::new) is for [`OpenJoin`] memory, where no such verdict exists.
    ///
    /// # Errors
    /// [`Error::ProducerExists`] when another producer owns the ring.
    pub unsafe fn new_unchecked(mem: M, owner: OwnerId) -> Result<Self, Error> {
        let line = mem.producer_line();
        // Success AcqRel: Acquire synchronises with the previous producer's Release store of 0
        // in `Drop`, so its last `head` is visible; Release publishes nothing yet but keeps a
        // takeover's later stores after the claim. Failure Relaxed: we only report the value.
        line.owner
            .compare_exchange(0, owner.get(), Ordering::AcqRel, Ordering::Relaxed)
            .map_err(|found| Error::ProducerExists { owner: found })?;
        Ok(Self::start(mem, owner))
    }

    /// Takes the ring over from a producer that died (`dead` is its owner id).
    ///
    /// The slot the dead producer was writing, if any, is released and its half-written
    /// message dropped (its stamp stays odd, so copy readers of the old message see an
    /// overrun, and the sequence number is reused). Messages it published stay readable.
    /// The producer line's epoch moves on, so the displaced producer, should it still run,
    /// gets [`ClaimError::Displaced`] from every later claim and publish and writes nothing
    /// to the ring's shared state again.
    ///
    /// `ring-os` offers the safe form: it takes over only after the kernel released the dead
    /// producer's liveness lock.
    ///
    /// # Safety
    /// The producer `dead` is not inside a call on this ring and holds no [`WriteSlot`] (a dead
    /// process holds none). A live producer's `WriteSlot` would keep writing payload words that
    /// readers of the new producer's messages may have pinned as `&[u8]`.
    ///
    /// ```compile_fail,E0133
    /// use ring_core::{Config, HeapSegment, OwnerId, Producer};
    /// let seg = HeapSegment::new(&Config::new(2, 16), OwnerId::new(1).unwrap()).unwrap();
    /// let id = |n| OwnerId::new(n).unwrap();
    /// let _ = Producer::take_over(&seg, id(2), id(1)); // error[E0133]: requires unsafe
    /// ```
    ///
    /// # Errors
    /// [`Error::OwnerMismatch`] when `dead` is not the current producer.
    pub unsafe fn take_over(mem: M, owner: OwnerId, dead: OwnerId) -> Result<Self, Error> {
        let line = mem.producer_line();
        // As in `new`: Acquire pairs with the dead producer's last Release stores.
        line.owner
            .compare_exchange(dead.get(), owner.get(), Ordering::AcqRel, Ordering::Relaxed)
            .map_err(|found| Error::OwnerMismatch { found })?;
        // A producer that died parked left its flag up; no one else parks on the drain word.
        // Relaxed: only the producer parks; read by consumers after their SeqCst fence.
        line.producer_waiting.store(0, Ordering::Relaxed);
        Ok(Self::start(mem, owner))
    }

    fn start(mem: M, owner: OwnerId) -> Self {
        let line = mem.producer_line();
        // Relaxed: the fencing token is compared, not synchronised on. A displaced producer
        // that runs again sees a different epoch at its next claim or publish (the caller of
        // `take_over` guaranteed it is not inside one now).
        let epoch = line.epoch.fetch_add(1, Ordering::Relaxed).wrapping_add(1);
        // Relaxed: only the producer writes `flags`, and we own the line now. Reopens the ring
        // and forgets how the previous stream ended.
        line.flags.store(0, Ordering::Relaxed);
        for i in 0..mem.geometry().slots() {
            // Release: a slot the previous producer held is handed to readers again; pairs with
            // their Acquire `fetch_or` in a pin.
            mem.slot_header(i)
                .state
                .fetch_and(!WRITER, Ordering::Release);
        }
        // Relaxed: ordered after the owner CAS (Acquire) above.
        let stored = line.head.load(Ordering::Relaxed);
        let mem_never_stall = mem.geometry().config().never_stall;
        let (head, newest_slot) = if mem_never_stall {
            never_stall::start_head(&mem, stored)
        } else {
            (Self::start_head(&mem, stored), never_stall::NO_SLOT)
        };
        if head != stored {
            // Release: pairs with consumers' Acquire `head` loads.
            line.head.store(head, Ordering::Release);
        }
        Self {
            mem,
            owner,
            head,
            stored_head: head,
            gate_ok_below: 0,
            fenced: false,
            newest_slot,
            never_stall: mem_never_stall,
            epoch,
            lost: LostReaders::default(),
        }
    }

    /// At a (re)start: `head` moved past the messages a predecessor published (final stamp)
    /// without storing `head`.
    fn start_head(mem: &M, mut head: u64) -> u64 {
        // A message is published by its stamp; `head` follows. A predecessor that died between
        // a final stamp and its `head` store (or inside a batch) left complete messages beyond
        // `head` that stamp-following consumers may have read already: move `head` past them
        // rather than rewrite those sequences. At most one lap of slots.
        let n = mem.geometry().slots() as u64;
        let start_head = head;
        while head < SEQ_LIMIT && head - start_head < n {
            // Acquire: pairs with the predecessor's Release stamp store, so the message is
            // complete for whoever reads `head` after our Release store below.
            let stamp = mem
                .slot_header(mem.geometry().slot_of(head))
                .stamp
                .load(Ordering::Acquire);
            if stamp != 2 * head + 2 {
                break;
            }
            head += 1;
        }
        head
    }

    /// Fails with [`ClaimError::Displaced`] when another producer started on this ring since
    /// this one did (the owner word or the epoch moved).
    fn check_epoch(&self) -> Result<(), ClaimError> {
        let line = self.mem.producer_line();
        // Relaxed: a fencing check, not a synchronisation point (see `start`).
        let epoch = line.epoch.load(Ordering::Relaxed);
        let owner = line.owner.load(Ordering::Relaxed);
        if epoch != self.epoch || owner != self.owner.get() {
            return Err(ClaimError::Displaced { owner, epoch });
        }
        Ok(())
    }

    /// True when another producer took the ring over: this one can no longer publish.
    pub fn is_displaced(&self) -> bool {
        self.check_epoch().is_err()
    }

    /// The memory this producer writes.
    pub fn memory(&self) -> &M {
        &self.mem
    }

    /// This producer's owner id.
    pub fn owner(&self) -> OwnerId {
        self.owner
    }

    /// Number of messages published so far (the next sequence number).
    pub fn published(&self) -> u64 {
        self.head
    }

    /// Claims the slot for the next message without blocking.
    ///
    /// # Errors
    /// [`ClaimError::Full`] (a gating consumer has not consumed the slot's message),
    /// [`ClaimError::Pinned`] (readers hold the slot), [`ClaimError::Closed`],
    /// [`ClaimError::Corrupt`] (the segment's `head` was beyond [`SEQ_LIMIT`] when this producer
    /// started).
    pub fn try_claim(&mut self) -> Result<WriteSlot<'_, M>, ClaimError> {
        let slot = self.claim_slot()?;
        Ok(self.write_slot(slot))
    }

    fn write_slot(&mut self, slot: usize) -> WriteSlot<'_, M> {
        let seq = self.head;
        WriteSlot {
            producer: self,
            slot,
            seq,
            len: 0,
            meta: [0; 2],
            done: false,
            loaned: false,
        }
    }

    /// The claim protocol; returns the claimed slot index.
    fn claim_slot(&mut self) -> Result<usize, ClaimError> {
        self.check_epoch()?;
        let line = self.mem.producer_line();
        // Relaxed: only this producer writes `flags`.
        if line.flags.load(Ordering::Relaxed) & FLAG_CLOSED != 0 {
            return Err(ClaimError::Closed);
        }
        let n = self.mem.geometry().slots() as u64;
        let seq = self.head;
        if seq >= SEQ_LIMIT {
            // `head` came from shared memory when this producer started: a corrupt peer wrote
            // it. Refuse rather than overflow the stamp arithmetic below.
            return Err(ClaimError::Corrupt(
                "the published head is beyond the sequence range",
            ));
        }
        if self.never_stall {
            return self.claim_never_stall(seq, n);
        }
        if seq >= self.gate_ok_below {
            self.prepare_scan(seq);
            self.gate_ok_below = self.gate(seq, n)?;
        }
        let slot = self.mem.geometry().slot_of(seq);
        self.claim_cas(slot, seq)?;
        Ok(slot)
    }

    /// Before a gating scan for the claim of `seq`: store `head` if a batch left it behind,
    /// and run the registration handshake's fence.
    fn prepare_scan(&mut self, seq: u64) {
        let line = self.mem.producer_line();
        if self.stored_head != seq {
            // Inside a batch: the messages below `seq` are complete but `head` was not
            // stored. The registration handshake below needs it stored (a consumer that
            // registers without being seen must start at or after `seq`), so store it now.
            // Release: pairs with consumers' Acquire `head` loads.
            line.head.store(seq, Ordering::Release);
            self.stored_head = seq;
            self.fenced = false;
        }
        if !self.fenced {
            // SeqCst: registration handshake. A joining consumer stores ACTIVE, runs a
            // SeqCst fence, then loads `head`; we stored `head`, run this fence, then load
            // the states. Either we see it ACTIVE, or it saw our `head` and starts at or
            // after `seq`, so overwriting `seq - n` cannot lose anything it will read.
            // (Publish runs the same fence after its `head` store; `fenced` skips a second.
            // After a start it is needed even though every publish fences: the predecessor
            // may have died between its last `head` store and that fence.)
            fence(Ordering::SeqCst);
            self.fenced = true;
        }
    }

    /// Claims `slot` for message `seq`: the claim CAS (0 → `WRITER`), then the seqlock's odd
    /// stamp. On failure, clears bits nobody owns and reports the readers that hold it.
    #[inline]
    fn claim_cas(&self, slot: usize, seq: u64) -> Result<(), ClaimError> {
        let hdr = self.mem.slot_header(slot);
        // Success Acquire: synchronises with every reader's Release `fetch_and` (unpin), so their
        // reads of the old message happen before our writes. Failure Acquire: synchronises with
        // the Release half of the pin `fetch_or` that set a bit we see, so that pinner's
        // registration (its owner CAS) is visible to `sweep_free_bits` below.
        if let Err(cur) =
            hdr.state
                .compare_exchange(0, WRITER, Ordering::Acquire, Ordering::Acquire)
        {
            let readers = self.clear_stale_bits(slot, cur);
            return Err(ClaimError::Pinned { slot, readers });
        }
        // Seqlock: odd stamp, then a Release fence, then the payload. A copy reader that sees any
        // payload word we write after the fence, and then runs its Acquire fence, loads this odd
        // stamp (or later) in its re-check, so it refuses the copy.
        hdr.stamp.store(2 * seq + 1, Ordering::Relaxed);
        fence(Ordering::Release);
        Ok(())
    }

    /// Slot `slot` is busy with state `cur`: clears the bits nobody owns and returns the
    /// readers that hold it.
    fn clear_stale_bits(&self, slot: usize, cur: u64) -> u32 {
        let valid = self.valid_readers();
        if cur & !valid != 0 {
            // Bits no consumer owns (a stale WRITER, bits of entries beyond the table, or
            // bits 32..62) were written by a corrupt or hostile peer; no one would ever clear
            // them, so clear them here and report the slot busy this once. Relaxed: those
            // bits guard no data.
            self.mem
                .slot_header(slot)
                .state
                .fetch_and(valid, Ordering::Relaxed);
        }
        self.sweep_free_bits(slot, cur & valid)
    }

    /// Clears, in slot `slot`, the reader bits among `bits` whose consumer-table entry is free
    /// (a pin its consumer leaked and never took back, or a peer's garbage): nobody would ever
    /// clear them, and the slot would stay wedged. Returns the bits that remain (registered
    /// readers).
    ///
    /// A free entry is first locked against registration (owner word 0 → [`OWNER_SWEEPING`]), so
    /// no consumer can register into it and pin this slot between our check and our clear.
    fn sweep_free_bits(&self, slot: usize, bits: u64) -> u32 {
        let mut remaining = bits;
        let mut rest = bits;
        while rest != 0 {
            let i = rest.trailing_zeros() as usize;
            rest &= rest - 1;
            let e = self.mem.consumer_entry(i);
            // Success Acquire: pairs with the last holder's Release store of 0 (leave or
            // reclaim), after which it touches no slot. Failure Relaxed: the entry is held by
            // a registered consumer (or a registration in progress): its bit stays.
            if e.owner
                .compare_exchange(0, OWNER_SWEEPING, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
            {
                // Release: like an unpin, pairs with the claim CAS (Acquire).
                self.mem
                    .slot_header(slot)
                    .state
                    .fetch_and(!(1u64 << i), Ordering::Release);
                // Release: pairs with the next registrant's Acquire owner CAS.
                e.owner.store(0, Ordering::Release);
                remaining &= !(1u64 << i);
            }
        }
        remaining as u32
    }

    /// The reader bits that belong to consumer-table entries.
    fn valid_readers(&self) -> u64 {
        let n = self.mem.geometry().consumers();
        ((1u64 << n) - 1) & READER_MASK
    }

    /// Checks every active gating consumer for the claim of `seq`; returns the new bound below
    /// which no scan is needed.
    fn gate(&self, seq: u64, n: u64) -> Result<u64, ClaimError> {
        let need = (seq + 1).saturating_sub(n);
        let (cursor, consumer) = self.lowest_gating_cursor();
        if cursor < need {
            return Err(ClaimError::Full { consumer, cursor });
        }
        // A gating consumer this scan did not see joins at a head ≥ `seq` (registration
        // handshake), so claims below `min(cursor, seq) + n` cannot overwrite anything it will
        // read.
        Ok(cursor.min(seq).saturating_add(n))
    }

    /// Claims, writes `data` and publishes it in one call. Returns the message's sequence.
    ///
    /// # Errors
    /// As [`try_claim`](Self::try_claim), and [`ClaimError::TooLarge`] (nothing claimed) when
    /// `data` does not fit in a slot.
    pub fn try_publish(&mut self, data: &[u8]) -> Result<u64, ClaimError> {
        self.check_fits(data.len())?;
        let mut slot = self.try_claim()?;
        slot.fill(data);
        slot.publish()
    }

    fn check_fits(&self, len: usize) -> Result<(), ClaimError> {
        let capacity = self.mem.geometry().slot_capacity();
        if len > capacity {
            return Err(ClaimError::TooLarge { len, capacity });
        }
        Ok(())
    }

    /// Publishes `msgs` in order, one slot each, with one `head` store and one wake-up check
    /// for the whole batch. Returns how many were published: all of them, or the prefix that
    /// fit before a claim failed (a gating consumer or a pin holds the next slot).
    ///
    /// Consumers that follow the slots see each message as soon as its stamp is final, before
    /// the batch ends.
    ///
    /// # Errors
    /// [`ClaimError::TooLarge`] (nothing published) when any message does not fit in a slot;
    /// the error of the first claim when not even one message could be published;
    /// [`ClaimError::Displaced`] when another producer took over meanwhile.
    ///
    /// # Examples
    ///
    /// ```
    /// use ring_core::{Config, Consumer, DeliveryClass, HeapSegment, OwnerId, Producer};
    /// let seg = HeapSegment::new(&Config::new(4, 64), OwnerId::new(1).unwrap()).unwrap();
    /// let mut tx = Producer::new(&seg, OwnerId::new(1).unwrap()).unwrap();
    /// let mut rx = Consumer::new(&seg, DeliveryClass::Gating, OwnerId::new(2).unwrap()).unwrap();
    /// // Four slots and a gating reader: the fifth message does not fit yet.
    /// assert_eq!(tx.try_publish_batch(&[b"a", b"b", b"c", b"d", b"e"]).unwrap(), 4);
    /// let mut seen = Vec::new();
    /// assert_eq!(rx.try_read_batch(8, |m| seen.push(m.bytes().to_vec())).unwrap(), 4);
    /// assert_eq!(seen, [b"a", b"b", b"c", b"d"]);
    /// ```
    pub fn try_publish_batch<T: AsRef<[u8]>>(&mut self, msgs: &[T]) -> Result<usize, ClaimError> {
        for m in msgs {
            self.check_fits(m.as_ref().len())?;
        }
        let mut published = 0;
        for m in msgs {
            let slot = match self.claim_slot() {
                Ok(slot) => slot,
                Err(e) if published == 0 => return Err(e),
                Err(_) => break,
            };
            let mut w = self.write_slot(slot);
            w.fill(m.as_ref());
            w.finish()?;
            published += 1;
        }
        if published > 0 {
            self.announce();
        }
        Ok(published)
    }

    /// Makes every finished message visible to `head` readers and wakes parked consumers: one
    /// `head` store, one SeqCst fence and one load of the waiter count, for one message or a
    /// batch.
    fn announce(&mut self) {
        let line = self.mem.producer_line();
        // Release: pairs with consumers' Acquire `head` loads (latest-only reads, lagging
        // readers, registration): every message below it is complete.
        line.head.store(self.head, Ordering::Release);
        self.stored_head = self.head;
        // SeqCst: the Dekker handshake with parking consumers (they bump `consumer_waiters`,
        // fence, then re-check their slot's stamp or `head`): either they see our stamps and
        // `head` now, or we see them counted below and wake them. Also the registration
        // handshake of the next claim.
        fence(Ordering::SeqCst);
        self.fenced = true;
        // Relaxed: ordered by the fence above.
        if line.consumer_waiters.load(Ordering::Relaxed) != 0 {
            // Release: pairs with a waiter's Acquire load of the futex word. A bump, never a
            // store of a value derived from `head`: the word only moves forward (see the
            // layout). Only when someone parks, so the control line stays unwritten while
            // consumers poll.
            line.publish_futex.fetch_add(1, Ordering::Release);
            self.mem.notify(&line.publish_futex);
        }
    }

    /// Claims the next slot, waiting with `wait` while consumers hold the ring back.
    ///
    /// # Errors
    /// [`ClaimError::Closed`], or the last transient error when `wait`'s bound ran out.
    pub fn claim<W: WaitStrategy>(&mut self, wait: &mut W) -> Result<WriteSlot<'_, M>, ClaimError> {
        loop {
            match self.claim_slot() {
                Ok(slot) => return Ok(self.write_slot(slot)),
                // Not transient: waiting cannot help.
                Err(
                    e @ (ClaimError::Closed
                    | ClaimError::Corrupt(_)
                    | ClaimError::Displaced { .. }
                    | ClaimError::TooLarge { .. }),
                ) => return Err(e),
                Err(e) => {
                    if !self.park(wait, Self::is_claimable) {
                        return Err(e);
                    }
                }
            }
        }
    }

    /// Parks on the drain word once, unless `ready` holds once we are announced as waiting;
    /// false when the strategy's bound ran out.
    fn park<W: WaitStrategy>(&self, wait: &mut W, ready: impl Fn(&Self) -> bool) -> bool {
        let line = self.mem.producer_line();
        // Acquire: pairs with the consumers' Release bump of `drain_futex`.
        let seen = line.drain_futex.load(Ordering::Acquire);
        // Relaxed + SeqCst fence: the Dekker handshake with consumers, which advance, fence, then
        // load `producer_waiting`: either they see 1 and wake us, or the re-check of `ready`
        // after our fence sees their progress. (Without the re-check, a consumer that advanced
        // before our store would leave us asleep: a lost wake-up, found by the loom model.)
        line.producer_waiting.store(1, Ordering::Relaxed);
        fence(Ordering::SeqCst);
        let ok = ready(self) || wait.wait(&line.drain_futex, seen);
        line.producer_waiting.store(0, Ordering::Relaxed);
        ok
    }

    /// Whether a claim of the next sequence would pass the gating check and find its slot
    /// free of readers (the condition `claim` parks on), without claiming: a busy-polling
    /// producer spins on this and then claims once, so it never claims and aborts.
    ///
    /// It is never true while [`try_claim`](Self::try_claim) would fail with `Full` or
    /// `Pinned` (`claim` relies on that, or it would spin without spending its wait budget):
    /// the slot test is the claim CAS's own (`state == 0`, not just "no reader or writer bit":
    /// a corrupt peer can set the other bits). It may be false a moment before the claim would
    /// succeed, and `try_claim` may still fail for another reason (`Closed`, `Displaced`).
    pub fn is_claimable(&self) -> bool {
        if self.never_stall {
            return self.is_claimable_never_stall();
        }
        let n = self.mem.geometry().slots() as u64;
        let slot = self.mem.geometry().slot_of(self.head);
        // Acquire: pairs with the readers' Release unpins, as the claim CAS does.
        let state = self.mem.slot_header(slot).state.load(Ordering::Acquire);
        if state != 0 {
            return false;
        }
        // Below the cached bound no gating scan is needed (see `gate_ok_below`).
        let need = self.head.saturating_add(1).saturating_sub(n);
        self.head < self.gate_ok_below || self.lowest_gating_cursor().0 >= need
    }

    /// Waits until every active gating consumer has consumed everything published (an "ack
    /// all"). Returns false when `wait`'s bound ran out first.
    ///
    /// A true return happens after the consumption (or the departure) of every gating consumer
    /// whose registration happened before the call: what such a consumer did before it
    /// consumed the last message or left (work on a pinned message, say) is visible after the
    /// return.
    /// Its Release cursor store (or FREE store, when it leaves) pairs with the Acquire loads of
    /// the gating scan.
    pub fn wait_drained<W: WaitStrategy>(&mut self, wait: &mut W) -> bool {
        let drained = |p: &Self| p.lowest_gating_cursor().0 >= p.head;
        loop {
            if drained(self) {
                return true;
            }
            if !self.park(wait, drained) {
                return drained(self);
            }
        }
    }

    /// Number of registered consumers whose start point is final: each of them receives (by
    /// its delivery class) every message published from now on. Consumers still registering
    /// are not counted, so a producer that starts publishing once this reaches `n` loses
    /// nothing to a subscriber that was "half registered".
    pub fn ready_consumers(&self) -> usize {
        (0..self.mem.geometry().consumers())
            .filter(|&i| {
                let e = self.mem.consumer_entry(i);
                // Acquire: pairs with the consumer's `ready` store (and the SeqCst fence of its
                // registration before it, a release fence), so what it did before registering
                // is visible once it is counted. Relaxed state: the entry is ours to count only
                // while ACTIVE.
                e.ready.load(Ordering::Acquire) == 1
                    && e.state.load(Ordering::Relaxed) == CONSUMER_ACTIVE
            })
            .count()
    }

    /// Waits until at least `n` consumers are ready (see
    /// [`ready_consumers`](Self::ready_consumers)); false when `wait`'s bound ran out first.
    /// What a counted consumer's thread did before it registered happens before a true return
    /// (its registration's SeqCst fence, then its `ready` store, pairs with the Acquire `ready`
    /// load here).
    ///
    /// # Examples
    ///
    /// ```
    /// use ring_core::{Config, Consumer, DeliveryClass, HeapSegment, OwnerId, Producer, Spin};
    /// let seg = HeapSegment::new(&Config::new(4, 64), OwnerId::new(1).unwrap()).unwrap();
    /// let mut producer = Producer::new(&seg, OwnerId::new(1).unwrap()).unwrap();
    /// assert!(!producer.wait_for_consumers(1, &mut Spin::new(100)));
    /// let _sub = Consumer::new(&seg, DeliveryClass::Gating, OwnerId::new(2).unwrap()).unwrap();
    /// assert!(producer.wait_for_consumers(1, &mut Spin::new(100)));
    /// ```
    pub fn wait_for_consumers<W: WaitStrategy>(&mut self, n: usize, wait: &mut W) -> bool {
        let enough = |p: &Self| p.ready_consumers() >= n;
        loop {
            if enough(self) {
                return true;
            }
            if !self.park(wait, enough) {
                return enough(self);
            }
        }
    }

    /// The lowest cursor of the active gating consumers and groups, and whose it is
    /// (`u64::MAX` and 0 when there are none).
    ///
    /// A group's floor is the lowest of its cursor, its redelivery queue and its members'
    /// claims. A member stores its claim *before* the cursor CAS (or queue CAS) that takes the
    /// message, so the records are scanned first and the members after: a taken message is
    /// either still below the cursor or in the queue we read, or its claim is visible through
    /// the Acquire load that saw it taken (docs/PROTOCOL.md, "Groups").
    fn lowest_gating_cursor(&self) -> (u64, usize) {
        let mut lowest = (u64::MAX, 0);
        let mut members = 0u64;
        for i in 0..self.mem.geometry().consumers() {
            let e = self.mem.consumer_entry(i);
            // Acquire: pairs with the consumer's Release store of ACTIVE, so its cursor store
            // before that is visible below, and with its Release store of FREE when it leaves
            // (`wait_drained` returns after what it did). Relaxed class and group: written
            // before ACTIVE.
            if e.state.load(Ordering::Acquire) != CONSUMER_ACTIVE {
                continue;
            }
            let class = e.class.load(Ordering::Relaxed);
            let cursor = if class == DeliveryClass::Gating as u32 {
                if e.group.load(Ordering::Relaxed) != 0 {
                    members |= 1 << i;
                    continue;
                }
                // Acquire: pairs with the consumer's Release cursor store after it finished
                // reading, so its reads of message `cursor - 1` (and its work while it held
                // the pin) happen before a `wait_drained` that sees the cursor returns.
                e.cursor.load(Ordering::Acquire)
            } else if class == CLASS_GROUP {
                // Acquire: pairs with the members' AcqRel cursor CAS (a release sequence), so
                // the claim each stored before taking a message is visible to the member scan.
                e.cursor.load(Ordering::Acquire).min(claims_floor(e))
            } else {
                continue;
            };
            if cursor < lowest.0 {
                lowest = (cursor, i);
            }
        }
        while members != 0 {
            let i = members.trailing_zeros() as usize;
            members &= members - 1;
            let floor = claims_floor(self.mem.consumer_entry(i));
            if floor < lowest.0 {
                lowest = (floor, i);
            }
        }
        lowest
    }

    /// Closes the ring: no more messages. Consumers read what is still readable, then get
    /// [`ReadError::Closed`](crate::ReadError::Closed). Unread messages of latest-only and
    /// skip-on-lag consumers may still be overwritten by nothing (no more writes), so they stay
    /// readable until the segment is destroyed.
    ///
    /// A displaced producer (see [`take_over`](Self::take_over)) closes nothing: the ring is
    /// its successor's. Closing marks the stream *finished*; a producer dropped without closing
    /// marks it aborted (see [`abort`](Self::abort)). The first close or abort wins.
    pub fn close(&mut self) {
        self.end(FLAG_CLOSED);
    }

    /// Closes the ring as *aborted* with `code`: consumers read what is there, then get
    /// [`ReadError::Aborted`](crate::ReadError::Aborted) instead of `Closed`, so nobody
    /// downstream mistakes a failed stream for a complete one. Dropping the producer without
    /// closing aborts with code 0.
    pub fn abort(&mut self, code: u16) {
        self.end(FLAG_CLOSED | FLAG_ABORTED | (u32::from(code) << ABORT_CODE_SHIFT));
    }

    /// True once this producer closed or aborted the ring.
    pub fn is_closed(&self) -> bool {
        // Relaxed: only the producer writes `flags`.
        self.mem.producer_line().flags.load(Ordering::Relaxed) & FLAG_CLOSED != 0
    }

    fn end(&mut self, flags: u32) {
        if self.is_displaced() || self.is_closed() {
            return;
        }
        let line = self.mem.producer_line();
        // Release: pairs with consumers' Acquire load of `flags`, after which they re-load `head`
        // and see every message published before the close.
        line.flags.fetch_or(flags, Ordering::Release);
        self.wake_consumers();
    }

    fn wake_consumers(&self) {
        let line = self.mem.producer_line();
        // Release: pairs with a waiter's Acquire load of the futex word.
        line.publish_futex.fetch_add(1, Ordering::Release);
        fence(Ordering::SeqCst);
        // Relaxed: ordered by the fence (Dekker handshake with `Consumer::wait_ready`).
        if line.consumer_waiters.load(Ordering::Relaxed) != 0 {
            self.mem.notify(&line.publish_futex);
        }
    }

    /// Clears everything a dead consumer held: its pin in every slot and its table entry
    /// (so its gating cursor no longer holds the ring back), and gives back its count in the
    /// consumer-waiters word if it died parked. Idempotent.
    ///
    /// The entry's generation moves on first, so the reclaimed consumer, should it still run,
    /// gets [`ReadError::Evicted`](crate::ReadError::Evicted) from every later call and writes
    /// nothing to shared state again — not even into a consumer that registers into the same
    /// entry later with the same owner id. `expected` must be the entry's owner, so a new
    /// consumer that took the entry meanwhile is left alone.
    ///
    /// `ring-os` offers the safe form: it reclaims only entries whose liveness lock the kernel
    /// released.
    ///
    /// # Safety
    /// The consumer registered in entry `index` is not inside a call on this ring, holds no
    /// [`Pinned`](crate::Pinned) and no borrow of a held message's bytes
    /// ([`Consumer::held_bytes`](crate::Consumer::held_bytes), `held_words`) (a dead process
    /// holds none). Clearing a live pin would let the next claim rewrite bytes behind its
    /// `&[u8]`. A consumer reclaimed while it was alive (a wrong verdict that keeps to this
    /// contract) is fenced: every later call is refused with `Evicted` and its holds lend no
    /// bytes any more.
    ///
    /// Safe code cannot reach it (the old safe `reclaim` let a live `Pinned`'s bytes be
    /// rewritten):
    ///
    /// ```compile_fail,E0133
    /// use ring_core::{Config, HeapSegment, OwnerId, Producer};
    /// let seg = HeapSegment::new(&Config::new(2, 16), OwnerId::new(1).unwrap()).unwrap();
    /// let mut p = Producer::new(&seg, OwnerId::new(1).unwrap()).unwrap();
    /// let _ = p.reclaim(0, OwnerId::new(2).unwrap()); // error[E0133]: requires unsafe
    /// ```
    ///
    /// # Errors
    /// [`Error::NoSuchConsumer`], [`Error::OwnerMismatch`].
    pub unsafe fn reclaim(&mut self, index: usize, expected: OwnerId) -> Result<Reclaimed, Error> {
        // Relaxed: the class is only reported (and validated: a scribbled value reads as None).
        let class = (index < self.mem.geometry().consumers())
            .then(|| self.mem.consumer_entry(index).class.load(Ordering::Relaxed))
            .and_then(DeliveryClass::from_u32);
        // SAFETY: the caller's promise is `reclaim`'s.
        let r = unsafe { reclaim(&self.mem, index, expected) }?;
        if r.was_registered {
            self.lost.record(LostReader {
                reclaimed: r,
                class,
                published: self.head,
            });
        }
        Ok(r)
    }

    /// The readers this producer reclaimed because their holders died without leaving (a
    /// reader that finished leaves its entry and is not counted): how many, how many of them
    /// gated the stream, the last one and the first gating one that died with messages unread.
    /// A publisher that must not lose data checks `first_gating_unread` before it reports
    /// success.
    pub fn lost_readers(&self) -> LostReaders {
        self.lost
    }

    /// Information about consumer-table entry `index` (None beyond the table).
    pub fn consumer_info(&self, index: usize) -> Option<crate::ConsumerInfo> {
        crate::inspect::consumer_info(&self.mem, index)
    }
}

impl LostReaders {
    fn record(&mut self, lost: LostReader) {
        self.total += 1;
        if lost.class == Some(DeliveryClass::Gating) {
            self.gating += 1;
            if lost.unread() > 0 && self.first_gating_unread.is_none() {
                self.first_gating_unread = Some(lost);
            }
        }
        self.last = Some(lost);
    }
}

/// Reclaims consumer entry `index` (see [`Producer::reclaim`]).
///
/// # Safety
/// As [`Producer::reclaim`].
pub(crate) unsafe fn reclaim<M: Memory + ?Sized>(
    mem: &M,
    index: usize,
    expected: OwnerId,
) -> Result<Reclaimed, Error> {
    if index >= mem.geometry().consumers() {
        return Err(Error::NoSuchConsumer { index });
    }
    let e = mem.consumer_entry(index);
    // Acquire: pairs with the consumer's Release stores (cursor, unpins, FREE) in case it got
    // that far before dying.
    let owner = e.owner.load(Ordering::Acquire);
    let nothing = Reclaimed {
        index,
        owner,
        pins_cleared: 0,
        cursor: 0,
        was_registered: false,
    };
    if owner == 0 {
        // Nobody holds the entry (it was never taken, or already reclaimed): idempotent.
        return Ok(nothing);
    }
    if owner != expected.get() {
        return Err(Error::OwnerMismatch { found: owner });
    }
    // Relaxed: written before the entry's owner became `owner` (ordered by the Acquire above).
    if e.class.load(Ordering::Relaxed) == CLASS_GROUP {
        // A group's record belongs to the ring, not to a process: no verdict reclaims it.
        return Ok(nothing);
    }
    // Fence the victim out first: its every later call compares this word. Success AcqRel:
    // Acquire orders us after the registration's bump; Release orders the bump before our
    // clearing below for anyone who reads it. Failure: a concurrent registration or reclaim
    // changed the entry: it is not the one the caller judged dead.
    // Relaxed load: the CAS validates it.
    let generation = e.generation.load(Ordering::Relaxed);
    if e.generation
        .compare_exchange(
            generation,
            generation.wrapping_add(1),
            Ordering::AcqRel,
            Ordering::Relaxed,
        )
        .is_err()
        // Acquire: as the first owner load.
        || e.owner.load(Ordering::Acquire) != owner
    {
        return Err(Error::OwnerMismatch { found: owner });
    }
    // A group member's unfinished messages go to another member; when the group's queue has
    // no room yet, the entry stays as it is (still gating) and a later reclaim moves them.
    group::hand_claims_to_group(mem, e)?;
    // Relaxed: ordered before others' view by the Release store of FREE below.
    e.ready.store(0, Ordering::Relaxed);
    // Whatever state the consumer died in (FREE right after it claimed the owner word, JOINING,
    // ACTIVE, or a corrupt value), the entry becomes RECLAIMING. Relaxed: ordered by the owner
    // load above; the producer is the only reclaimer.
    e.state.store(CONSUMER_RECLAIMING, Ordering::Relaxed);
    let bit = 1u64 << index;
    let mut pins_cleared = 0;
    for i in 0..mem.geometry().slots() {
        // Release: a pin cleared here hands the slot to the producer, whose claim CAS
        // (Acquire) pairs with it. The dead consumer makes no further reads.
        let prev = mem.slot_header(i).state.fetch_and(!bit, Ordering::Release);
        if prev & bit != 0 {
            pins_cleared += 1;
        }
    }
    // Relaxed: read for the report.
    let cursor = e.cursor.load(Ordering::Relaxed);
    let line = mem.producer_line();
    // A consumer that died parked still counts in `consumer_waiters` (every publish would make
    // a wake syscall for it forever): give its count back. Relaxed: the count only decides
    // whether a publisher calls wake, and an over-count is harmless.
    if e.parked.swap(0, Ordering::Relaxed) != 0 {
        // A decrement that never goes below zero (a peer may have scribbled the count); the
        // loop ends because every retry saw the count change, at most a few times in practice,
        // and is bounded anyway: giving up leaves an over-count.
        for _ in 0..crate::READ_RETRIES {
            let n = line.consumer_waiters.load(Ordering::Relaxed);
            if n == 0
                || line
                    .consumer_waiters
                    .compare_exchange(n, n - 1, Ordering::Relaxed, Ordering::Relaxed)
                    .is_ok()
            {
                break;
            }
        }
    }
    // Release: the entry stops gating; pairs with the producer's Acquire state loads.
    e.state.store(CONSUMER_FREE, Ordering::Release);
    // Release: pairs with the next registrant's Acquire owner CAS, which then sees FREE and
    // no pins of this index anywhere.
    e.owner.store(0, Ordering::Release);
    // A producer held back by this consumer re-checks: bump the drain word.
    line.drain_futex.fetch_add(1, Ordering::Release);
    mem.notify(&line.drain_futex);
    Ok(Reclaimed {
        index,
        owner,
        pins_cleared,
        cursor,
        was_registered: true,
    })
}

/// Dropping the producer ends the stream — as *aborted* (code 0) unless [`Producer::close`] ran
/// first, so a producer that unwinds or bails out early is never mistaken for one that finished
/// — and releases the producer line, so a new producer may start (which reopens it).
impl<M: Memory> Drop for Producer<M> {
    fn drop(&mut self) {
        if self.is_displaced() {
            return; // The ring is the successor's: leave its owner word alone.
        }
        self.abort(0);
        let line = self.mem.producer_line();
        // Release: pairs with the next producer's Acquire owner CAS, which then sees our head.
        let _ =
            line.owner
                .compare_exchange(self.owner.get(), 0, Ordering::Release, Ordering::Relaxed);
    }
}

impl<M: Memory> WriteSlot<'_, M> {
    /// The memory of the ring this slot belongs to (for the payload binding in `arena`).
    #[cfg(feature = "alloc")]
    pub(crate) fn memory(&self) -> &M {
        &self.producer.mem
    }

    /// Payload capacity of the slot in bytes.
    pub fn capacity(&self) -> usize {
        self.producer.mem.geometry().slot_capacity()
    }

    /// The sequence number this message will have.
    pub fn seq(&self) -> u64 {
        self.seq
    }

    /// Writes `data` as the whole message (length `data.len()`).
    ///
    /// # Errors
    /// [`Overflow`] (and nothing written) when `data` is longer than the slot.
    pub fn write(&mut self, data: &[u8]) -> Result<(), Overflow> {
        // Every message is written into the payload area, small ones too: the payload area then
        // always holds what the slot held (what `set_len` past the written bytes shows), and
        // `finish` copies a small message into the message line. (Writing small messages only
        // inline left the payload area without them; the `ops` fuzz oracle found the
        // difference through a later `set_len`.)
        self.write_at(0, data)?;
        self.len = data.len();
        Ok(())
    }

    /// Writes `data` at byte `offset`; the message length grows to cover it.
    ///
    /// # Errors
    /// [`Overflow`] (and nothing written) when the write would pass the slot's end.
    pub fn write_at(&mut self, offset: usize, data: &[u8]) -> Result<(), Overflow> {
        let words = self.producer.mem.payload(self.slot);
        // Atomic word stores from here on: `publish` pads the last word atomically again.
        self.loaned = false;
        if !crate::words::write(words, offset, data) {
            return Err(Overflow {
                reserved: words.len() * 8,
                attempted: offset.saturating_add(data.len()),
            });
        }
        self.len = self.len.max(offset + data.len());
        Ok(())
    }

    /// Lends the first `len` bytes of the claimed slot for writing in place (zero-copy: render
    /// or decode straight into shared memory), and sets the message length to `len`.
    ///
    /// Only in a pin-only ring ([`Config::with_pin_only`](crate::Config::with_pin_only)): there
    /// every reader pins before it reads, and no pin succeeds while the slot is claimed, so
    /// nothing reads these bytes while the loan lives — `&mut` is sound. In a ring with
    /// optimistic (seqlock) copy readers the bytes may be read at any moment, so a `&mut [u8]`
    /// would race with them: use [`write_at`](Self::write_at) in chunks instead (no staging
    /// buffer needed either).
    ///
    /// # Errors
    /// [`LoanError::NotPinOnly`] in a ring with copy readers; [`LoanError::TooLarge`] when
    /// `len` exceeds the slot.
    ///
    /// # Examples
    ///
    /// ```
    /// use ring_core::{Config, Consumer, DeliveryClass, HeapSegment, OwnerId, Producer};
    /// let config = Config::new(2, 64).with_pin_only(true);
    /// let seg = HeapSegment::new(&config, OwnerId::new(1).unwrap()).unwrap();
    /// let mut tx = Producer::new(&seg, OwnerId::new(1).unwrap()).unwrap();
    /// let mut rx = Consumer::new(&seg, DeliveryClass::Gating, OwnerId::new(2).unwrap()).unwrap();
    /// let mut slot = tx.try_claim().unwrap();
    /// slot.loan(5).unwrap().copy_from_slice(b"drawn");
    /// slot.publish().unwrap();
    /// assert_eq!(rx.try_pin().unwrap().bytes(), b"drawn");
    /// ```
    #[cfg(not(any(ring_loom, ring_shuttle)))]
    pub fn loan(&mut self, len: usize) -> Result<&mut [u8], LoanError> {
        let geometry = self.producer.mem.geometry();
        if !geometry.config().pin_only {
            return Err(LoanError::NotPinOnly);
        }
        let capacity = geometry.slot_capacity();
        if len > capacity {
            return Err(LoanError::TooLarge { len, capacity });
        }
        self.len = len;
        self.loaned = true;
        let words = self.producer.mem.payload(self.slot);
        // The bytes past `len` up to the next word boundary, zeroed now so that `Pinned::words`
        // shows a padded last word (what `publish` does for `write`).
        let padded = len.next_multiple_of(8).min(capacity);
        // SAFETY:
        // - the words span `capacity ≥ padded ≥ len` bytes of the slot's payload area, valid for the
        //   memory's life (`Memory` contract), which outlives `&mut self`;
        // - `AtomicU64` is an `UnsafeCell`, so writing through a pointer derived from the
        //   shared slice is allowed, and it has the layout of `u64` (bytes may be viewed as u8);
        // - exclusivity for the borrow's life: we hold the slot's WRITER bit (claimed), so no
        //   pin succeeds, and in a pin-only ring no consumer reads a payload without a pin;
        //   the borrow of `self` keeps `publish` (which hands the slot to readers) after it. A
        //   hostile process that ignores the protocol can still write or read these bytes:
        //   shared memory cannot stop it (threat model), but it cannot make this process's
        //   accesses a data race under the protocol.
        let whole = unsafe {
            core::slice::from_raw_parts_mut(words.as_ptr().cast::<u8>().cast_mut(), padded)
        };
        whole[len..].fill(0);
        Ok(&mut whole[..len])
    }

    /// Sets the message length (bytes beyond what was written read as whatever the slot held).
    ///
    /// # Errors
    /// [`Overflow`] when `len` exceeds the capacity.
    pub fn set_len(&mut self, len: usize) -> Result<(), Overflow> {
        if len > self.capacity() {
            return Err(Overflow {
                reserved: self.capacity(),
                attempted: len,
            });
        }
        self.len = len;
        Ok(())
    }

    /// Sets the message's two metadata words.
    pub fn set_meta(&mut self, meta: [u64; 2]) {
        self.meta = meta;
    }

    /// Publishes the message and returns its sequence number.
    ///
    /// # Errors
    /// [`ClaimError::Displaced`] when another producer took the ring over since the claim:
    /// nothing is published, and the slot (now the successor's) is left alone.
    pub fn publish(mut self) -> Result<u64, ClaimError> {
        let seq = self.finish()?;
        self.producer.announce();
        Ok(seq)
    }

    /// Writes `data` as the whole message: into the header's inline words when it fits there,
    /// else into the payload area (the caller checked it fits the slot).
    fn fill(&mut self, data: &[u8]) {
        let ok = self.write(data);
        debug_assert!(ok.is_ok(), "the caller checked the length");
    }

    /// Completes the message in its slot (the stamp is its publication) without storing
    /// `head`; returns its sequence.
    fn finish(&mut self) -> Result<u64, ClaimError> {
        self.done = true;
        let p = &mut *self.producer;
        p.check_epoch()?;
        let seq = self.seq;
        let hdr = p.mem.slot_header(self.slot);
        let len = self.len;
        if !self.loaned {
            // Zero the last word past `len`, so `Pinned::words` shows a padded word even where
            // a shorter message overwrote a longer one (partial-word writes keep the old bytes).
            pad_last_word(p.mem.payload(self.slot), len);
        }
        if len <= INLINE_CAPACITY {
            // A small message travels in the message line: the reader then touches only that
            // line. (The padded last word comes along.)
            copy_words(p.mem.payload(self.slot), &hdr.inline, len);
        }
        // Relaxed: inside the seqlock write window; ordered by the stamp's Release store.
        hdr.len.store(len as u64, Ordering::Relaxed);
        hdr.meta[0].store(self.meta[0], Ordering::Relaxed);
        hdr.meta[1].store(self.meta[1], Ordering::Relaxed);
        // Release: hands the slot to pinning readers; pairs with their Acquire `fetch_or`.
        // Before the final stamp: a reader that saw the final stamp and then finds WRITER set
        // knows a *later* claim is under way (an overrun), never this message's own.
        // An RMW, not a store of 0: a plain store here (tried) let the loom model
        // `sweep_of_free_bits_races_a_registering_pinner` end with WRITER set after the
        // publish, next to a refused pin's `fetch_and` of its transient bit.
        hdr.state.fetch_and(!WRITER, Ordering::Release);
        // Release: the publication. Ends the seqlock write; pairs with the Acquire stamp loads
        // of consumers that follow the slot and of copy readers.
        hdr.stamp.store(2 * seq + 2, Ordering::Release);
        if p.never_stall {
            p.route_published(seq, self.slot);
        }
        p.head = seq + 1;
        Ok(seq)
    }

    /// Gives the slot back without publishing; the sequence number is reused.
    pub fn abort(mut self) {
        self.release();
    }

    fn release(&mut self) {
        if self.done {
            return;
        }
        self.done = true;
        if self.producer.is_displaced() {
            return; // The slot's WRITER bit, if set, is the successor's now.
        }
        let hdr = self.producer.mem.slot_header(self.slot);
        // Release: hands the slot back to pinning readers (their Acquire `fetch_or`). The stamp
        // stays odd: the old message may be partly overwritten, and readers of it see an overrun.
        hdr.state.fetch_and(!WRITER, Ordering::Release);
    }
}

impl<M: Memory> Drop for WriteSlot<'_, M> {
    fn drop(&mut self) {
        self.release();
    }
}

/// Zeroes the bytes of the word holding byte `len` that lie past `len` (nothing when `len` is a
/// multiple of 8 or beyond `words`). Relaxed: inside the seqlock write window.
fn pad_last_word(words: &[AtomicU64], len: usize) {
    if len % 8 == 0 {
        return;
    }
    if let Some(w) = words.get(len / 8) {
        let mut bytes = w.load(Ordering::Relaxed).to_ne_bytes();
        bytes[len % 8..].fill(0);
        w.store(u64::from_ne_bytes(bytes), Ordering::Relaxed);
    }
}

/// Copies the words covering the first `len` bytes of `from` into `to` (both at least that
/// long), zeroing the last word past `len`. Relaxed: the producer's own words, inside the
/// seqlock write window.
fn copy_words(from: &[AtomicU64], to: &[AtomicU64], len: usize) {
    for (f, t) in from.iter().zip(to).take(len.div_ceil(8)) {
        t.store(f.load(Ordering::Relaxed), Ordering::Relaxed);
    }
    pad_last_word(to, len);
}
