//! The claim: choosing and locking the slot of the next message, gating, and waiting for room.

use super::{Producer, WriteSlot};
use crate::class::DeliveryClass;
use crate::error::ClaimError;
use crate::group::claims_floor;
use crate::layout::{
    SlotHeader, CLASS_GROUP, CONSUMER_ACTIVE, FLAG_CLOSED, OWNER_SWEEPING, READER_MASK, SEQ_LIMIT,
    WRITER,
};
use crate::memory::Memory;
use crate::sync::{fence, Ordering};
use crate::wait::WaitStrategy;

impl<M: Memory> Producer<M> {
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

    pub(super) fn write_slot(&mut self, slot: usize) -> WriteSlot<'_, M> {
        let seq = self.head;
        WriteSlot {
            producer: self,
            slot,
            seq,
            len: 0,
            meta: [0; 2],
            done: false,
            loaned: false,
            inlined: false,
        }
    }

    /// The claim protocol; returns the claimed slot index.
    pub(super) fn claim_slot(&mut self) -> Result<usize, ClaimError> {
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
    pub(super) fn prepare_scan(&mut self, seq: u64) {
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
            // (Publish runs the same fence after its `head` store when its light fence is a
            // full one, and `fenced` skips a second.
            // After a start it is needed even though every publish fences: the predecessor
            // may have died between its last `head` store and that fence.)
            fence(Ordering::SeqCst);
            self.fenced = true;
        }
    }

    /// Claims `slot` for message `seq`: the claim CAS (0 → `WRITER`), then the claim marker.
    /// On failure, clears bits nobody owns and reports the readers that hold it.
    #[inline]
    pub(super) fn claim_cas(&self, slot: usize, seq: u64) -> Result<(), ClaimError> {
        self.claim_cas_at(self.mem.slot_header(slot), slot, seq)
    }

    /// [`claim_cas`](Self::claim_cas) with `hdr`, slot `slot`'s header, already looked up.
    #[inline(always)]
    pub(super) fn claim_cas_at(
        &self,
        hdr: &SlotHeader,
        slot: usize,
        seq: u64,
    ) -> Result<(), ClaimError> {
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
        // The claim marker (P2), then a Release fence (P3), then the payload. A copy reader that
        // sees any payload word we write after the fence, and then runs its Acquire fence,
        // loads this marker (or a later one) in its check, so it refuses the copy. The stamp
        // keeps the previous message's value until the publication: the message line is
        // written once per message.
        hdr.claim.store(2 * seq + 1, Ordering::Relaxed);
        fence(Ordering::Release);
        Ok(())
    }

    /// Slot `slot` is busy with state `cur`: clears the bits nobody owns and returns the
    /// readers that hold it.
    pub(super) fn clear_stale_bits(&self, slot: usize, cur: u64) -> u32 {
        let valid = self.valid_readers();
        if cur & !valid != 0 {
            // Bits no consumer owns (a stale WRITER, bits of entries beyond the table, or
            // bits 32..62) were written by a corrupt or hostile peer; no one would ever clear
            // them, so clear them here and report the slot busy this once. Relaxed: those
            // bits guard no data, but a stale WRITER may guard a partly overwritten message:
            // mark it dropped first (Release: as an abort, P14).
            let hdr = self.mem.slot_header(slot);
            if cur & WRITER != 0 {
                drop_claim(hdr);
                hdr.state.fetch_and(valid, Ordering::Release);
            } else {
                hdr.state.fetch_and(valid, Ordering::Relaxed);
            }
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
    pub(super) fn sweep_free_bits(&self, slot: usize, bits: u64) -> u32 {
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
    pub(super) fn valid_readers(&self) -> u64 {
        let n = self.mem.geometry().consumers();
        ((1u64 << n) - 1) & READER_MASK
    }

    /// Checks every active gating consumer for the claim of `seq`; returns the new bound below
    /// which no scan is needed.
    pub(super) fn gate(&self, seq: u64, n: u64) -> Result<u64, ClaimError> {
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
}

impl<M: Memory> Producer<M> {
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
    pub(super) fn park<W: WaitStrategy>(
        &self,
        wait: &mut W,
        ready: impl Fn(&Self) -> bool,
    ) -> bool {
        let line = self.mem.producer_line();
        // Acquire: pairs with the consumers' Release bump of `drain_futex`.
        let seen = line.drain_futex.load(Ordering::Acquire);
        // Relaxed + the heavy fence below: the Dekker handshake with consumers, which advance,
        // run the light fence, then load `producer_waiting`: either they see 1 and wake us, or the re-check of `ready`
        // after our fence sees their progress. (Without the re-check, a consumer that advanced
        // before our store would leave us asleep: a lost wake-up, found by the loom model.)
        line.producer_waiting.store(1, Ordering::Relaxed);
        // The heavy side of the pair (`Memory::heavy_fence`: SeqCst, or `membarrier(2)` where
        // the consumers' side is a compiler fence).
        self.mem.heavy_fence();
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
    pub(super) fn lowest_gating_cursor(&self) -> (u64, usize) {
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
}

/// A claim of `hdr`'s slot ends without a publication (its producer died, or a peer left a stale
/// `WRITER`): unless the slot's stamp already names the claimed message or a later one, store
/// the claim marker as the stamp, odd, so pinners and stamp readers take the slot for "no
/// message" (the previous message may be partly overwritten). The caller then clears `WRITER`
/// with a Release RMW, which orders this store before any later pin (P14).
///
/// A claim that died before its marker store wrote nothing (the marker precedes every payload
/// word): the marker then names the stamp's own message (`marker + 1 == stamp`) and the stamp
/// stays, so that message stays readable. A scribbled marker moves the stamp at most to an odd
/// value: readers report an overrun or `Corrupt`, never a message.
pub(super) fn drop_claim(hdr: &crate::layout::SlotHeader) {
    // Relaxed: the producer's own words (the caller holds or owns the slot).
    let marker = hdr.claim.load(Ordering::Relaxed) | 1;
    if marker > hdr.stamp.load(Ordering::Relaxed) {
        hdr.stamp.store(marker, Ordering::Relaxed);
    }
}
