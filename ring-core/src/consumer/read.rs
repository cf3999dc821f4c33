//! Reading: choosing the next sequence by delivery class, and pinning it (a reader bit, or a
//! gating reader's cursor).

use super::{Consumer, Miss, PinParts, Pinned, READ_RETRIES};
use crate::class::DeliveryClass;
use crate::error::ReadError;
use crate::layout::{
    ABORT_CODE_SHIFT, FLAG_ABORTED, FLAG_CLOSED, INLINE_CAPACITY, SEQ_LIMIT, WRITER,
};
use crate::memory::Memory;
use crate::sync::{AtomicU64, Ordering};

impl<M: Memory> Consumer<M> {
    /// Chooses the sequence to read next by delivery class, or says why there is none.
    ///
    /// Gating and skip-on-lag consumers follow the slot: message `next` is published once slot
    /// `next % n` holds its final stamp, so the common case reads that one line (which carries
    /// a small message too) and never the producer's `head` line. `head` is read only by
    /// latest-only consumers and by a consumer whose slot already holds a later message (it
    /// must learn how far behind it is).
    #[inline]
    pub(super) fn target(&self) -> Result<(u64, u64), ReadError> {
        if self.never_stall {
            return self.target_routed();
        }
        self.target_with(|c, seq| c.stamp_at_home(seq))
    }

    /// [`target`](Self::target) on a never-stall ring: the stamp of the slot the route names.
    /// Out of line, and the default ring's path calls nothing, so it keeps its small frame.
    #[inline(never)]
    pub(super) fn target_routed(&self) -> Result<(u64, u64), ReadError> {
        self.target_with(Self::stamp_of)
    }

    #[inline(always)]
    pub(super) fn target_with(
        &self,
        stamp_of: impl Fn(&Self, u64) -> u64,
    ) -> Result<(u64, u64), ReadError> {
        match self.class {
            DeliveryClass::LatestOnly => self.target_by_head(),
            DeliveryClass::Gating | DeliveryClass::SkipOnLag => {
                let seq = self.next;
                if seq >= SEQ_LIMIT {
                    // The start point came from a corrupt `head`; stamps would overflow.
                    return Err(ReadError::Corrupt(
                        "the consumer's cursor is beyond the sequence range",
                    ));
                }
                let want = 2 * seq + 2;
                let stamp = stamp_of(self, seq);
                if stamp == want {
                    Ok((seq, 0))
                } else if stamp < want {
                    // Not published yet (an older message, or this one being written).
                    // Ask for the far end of the message line meanwhile: it then crosses to us
                    // with the stamp's half, not after it ("Empty polls" in PROTOCOL.md). (A
                    // one-pass reader's empty poll ends in `not_yet` instead, which does the same.)
                    crate::sync::prefetch(self.far_end_of_home(seq));
                    Err(self.empty_or_closed(|c| c.stamp_of(seq) < want))
                } else {
                    self.target_by_head()
                }
            }
        }
    }

    /// Chooses the sequence to read from `head`: the newest for latest-only, the oldest still
    /// in the ring for a consumer that was overrun.
    pub(super) fn target_by_head(&self) -> Result<(u64, u64), ReadError> {
        let line = self.mem.producer_line();
        // Acquire: pairs with the producer's Release `head` store.
        let head = line.head.load(Ordering::Acquire);
        if head >= SEQ_LIMIT {
            // Only a corrupt peer writes such a head; computing stamps from it would overflow.
            return Err(ReadError::Corrupt(
                "the published head is beyond the sequence range",
            ));
        }
        // Acquire: as above; a re-check after a close (see `empty_or_closed`).
        let unchanged = |c: &Self| c.mem.producer_line().head.load(Ordering::Acquire) == head;
        let n = self.mem.geometry().slots() as u64;
        let (seq, skipped) = match self.class {
            DeliveryClass::LatestOnly => {
                if head == 0 || head - 1 < self.next {
                    return Err(self.empty_or_closed(unchanged));
                }
                (head - 1, head - 1 - self.next)
            }
            DeliveryClass::Gating | DeliveryClass::SkipOnLag => {
                if self.next >= head {
                    return Err(self.empty_or_closed(unchanged));
                }
                let oldest = head.saturating_sub(n);
                if self.next < oldest {
                    (oldest, oldest - self.next)
                } else {
                    (self.next, 0)
                }
            }
        };
        Ok((seq, skipped))
    }

    /// `Empty`, or the ring's ending once it is closed and `still_empty` confirms that nothing
    /// was published before the close.
    pub(super) fn empty_or_closed(&self, still_empty: impl Fn(&Self) -> bool) -> ReadError {
        let line = self.mem.producer_line();
        // Acquire: pairs with the producer's Release `fetch_or` in `close`, which follows every
        // publish of that producer: the re-check below sees them.
        let flags = line.flags.load(Ordering::Acquire);
        if flags & FLAG_CLOSED != 0 && still_empty(self) {
            if flags & FLAG_ABORTED != 0 {
                return ReadError::Aborted {
                    code: (flags >> ABORT_CODE_SHIFT) as u16,
                };
            }
            return ReadError::Closed;
        }
        ReadError::Empty
    }

    /// The words message `len` bytes long lies in: the header's inline words for a small one,
    /// the payload area otherwise (`len` ≤ the slot capacity, checked by the caller).
    #[inline]
    pub(super) fn message_words(&self, slot: usize, len: usize) -> &[AtomicU64] {
        self.message_words_at(self.mem.slot_header(slot), slot, len)
    }

    /// [`message_words`](Self::message_words) with `hdr`, slot `slot`'s header, already
    /// looked up.
    #[inline(always)]
    pub(super) fn message_words_at<'a>(
        &'a self,
        hdr: &'a crate::layout::SlotHeader,
        slot: usize,
        len: usize,
    ) -> &'a [AtomicU64] {
        if len <= INLINE_CAPACITY {
            &hdr.inline
        } else {
            self.mem.payload(slot)
        }
    }

    /// Pins the next message (by delivery class) without blocking.
    ///
    /// # Errors
    /// [`ReadError::Empty`], [`ReadError::Closed`], [`ReadError::Lagging`] (overwritten
    /// [`READ_RETRIES`] times in a row), [`ReadError::Evicted`], [`ReadError::Corrupt`].
    // Inlined into the caller: the one-pass path then costs no call, no frame of its own and
    // no result in memory; the general path stays out of line.
    #[inline(always)]
    pub fn try_pin(&mut self) -> Result<Pinned<'_, M>, ReadError> {
        let at = match self.pin_fast() {
            Ok((seq, slot, len)) => {
                self.held = Some(slot);
                PinParts::lone(slot, seq, len, 0)
            }
            Err(super::fast::Fallback::NotYet) => return Err(self.not_yet()),
            Err(super::fast::Fallback::General) => self.pin_general()?,
        };
        Ok(at.pinned(self))
    }

    /// `try_pin` in every case, its pin recorded (out of line: the common case above keeps a
    /// small frame).
    #[inline(never)]
    fn pin_general(&mut self) -> Result<PinParts, ReadError> {
        if self.member.is_some() {
            return self.member_pin();
        }
        let (seq, missed, (slot, len)) = self.read_next(|c, seq| c.pin_seq(seq))?;
        self.held = Some(slot);
        Ok(PinParts::lone(slot, seq, len, missed))
    }

    /// The read loop both kinds of read share: target the next sequence by delivery class,
    /// `attempt` it, and on an overrun count the lost message and re-target, at most
    /// [`READ_RETRIES`] times. Returns the sequence read, the messages skipped before it, and
    /// what `attempt` returned.
    pub(super) fn read_next<T>(
        &mut self,
        mut attempt: impl FnMut(&Self, u64) -> Result<T, Miss>,
    ) -> Result<(u64, u64, T), ReadError> {
        self.check_registered()?;
        if let Some(slot) = self.held.take() {
            // The last `Pinned` was leaked (its drop would have cleared `held`): no borrow of
            // its bytes can be alive now, so take the pin back. The message is not consumed.
            let hdr = self.mem.slot_header(slot);
            // A gating reader's bit is set only below `gate_from`; clearing a clear bit is
            // harmless, so this clears it whenever it may be set.
            self.refuse_pin(hdr, 1u64 << self.index, self.pins(0));
        }
        let start = self.next;
        let mut missed = 0;
        for _ in 0..READ_RETRIES {
            let (seq, skipped) = match self.target() {
                Ok(t) => t,
                Err(e) => return Err(self.count_skipped(start, e)),
            };
            missed += skipped;
            match attempt(self, seq) {
                Ok(got) => {
                    self.missed_total += missed;
                    // The skipped messages are counted: step past them now, so a read after a
                    // leaked pin (which never advances) does not count them a second time.
                    self.next = seq;
                    return Ok((seq, missed, got));
                }
                Err(Miss::Overrun) => {
                    // The message is gone: count it and re-target.
                    missed += 1;
                    self.next = seq + 1;
                }
                Err(Miss::Fatal(e)) => return Err(self.count_skipped(start, e)),
            }
        }
        Err(self.count_skipped(start, ReadError::Lagging))
    }

    /// A read that returns no message counts, as missed, exactly the messages it stepped
    /// `next` past (they were overwritten while it tried). Messages it only targeted past are
    /// not counted yet: `next` did not move, so the next read skips (and counts) them again.
    pub(super) fn count_skipped(&mut self, start: u64, e: ReadError) -> ReadError {
        self.missed_total += self.next - start;
        // A read that returns no message leaves the entry exact (`PROGRESS_EVERY`).
        self.flush_progress();
        e
    }

    /// Takes back a pin bit set by a refused pin. Release: an unpin, pairing with the
    /// producer's claim CAS. A producer whose claim failed on this transient bit may have
    /// parked, so it is woken like after any unpin.
    pub(super) fn refuse_pin(&self, hdr: &crate::layout::SlotHeader, bit: u64, pinned: bool) {
        if !pinned {
            return; // A gating read sets no bit (its cursor is its pin).
        }
        hdr.state.fetch_and(!bit, Ordering::Release);
        self.wake_producer();
    }

    /// Pins slot `seq % n` if it holds message `seq`; returns the slot and the length.
    #[inline]
    pub(super) fn pin_seq(&self, seq: u64) -> Result<(usize, usize), Miss> {
        if self.never_stall {
            return self.pin_routed(seq);
        }
        self.pin_slot(seq, self.mem.geometry().slot_of(seq))
    }

    /// [`pin_seq`](Self::pin_seq) on a never-stall ring (out of line, as `target_routed`).
    #[inline(never)]
    pub(super) fn pin_routed(&self, seq: u64) -> Result<(usize, usize), Miss> {
        let slot = self.slot_for(seq)?;
        self.pin_slot(seq, slot)
    }

    /// Pins `slot` if it holds message `seq`.
    #[inline(always)]
    pub(super) fn pin_slot(&self, seq: u64, slot: usize) -> Result<(usize, usize), Miss> {
        self.pin_slot_at(self.mem.slot_header(slot), seq, slot, false)
    }

    /// [`pin_slot`](Self::pin_slot) with `hdr`, slot `slot`'s header, already looked up;
    /// `stamp_seen`: this call already loaded the slot's stamp with Acquire and found `seq`
    /// published (the one-pass pin), so a read the cursor holds need not load it again.
    #[inline(always)]
    pub(super) fn pin_slot_at(
        &self,
        hdr: &crate::layout::SlotHeader,
        seq: u64,
        slot: usize,
        stamp_seen: bool,
    ) -> Result<(usize, usize), Miss> {
        if self.holds.holds_slot(slot) {
            // A held message keeps the producer off its slot, so no later message can be
            // published there: only a scribbled `head` or stamp targets it. Touching the bit
            // (a refused pin clears it) would release the hold under its borrowed bytes.
            return Err(Miss::Fatal(ReadError::Corrupt(
                "a read targets a slot this consumer holds: head or a stamp was scribbled",
            )));
        }
        if !self.pins(seq) {
            if stamp_seen {
                // Our cursor keeps the producer off the slot since that Acquire load, so the
                // stamp still names `seq`: only the length is left to check.
                return self.cursor_pin_len(hdr, slot);
            }
            return self.hold_by_cursor(hdr, slot, seq);
        }
        let bit = 1u64 << self.index;
        // Acquire: pairs with the producer's Release `fetch_and` that cleared WRITER after the
        // message was written (before its final stamp), so the payload is visible. One word
        // for pins and claims gives
        // them a single total order: if our bit went in first, the claim CAS fails.
        // Release: pairs with the failure Acquire of a claim CAS that sees our bit, so the
        // producer's sweep of free entries sees our registration and leaves the bit alone.
        let prev = hdr.state.fetch_or(bit, Ordering::AcqRel);
        if prev & WRITER != 0 {
            // The producer is rewriting the slot for a later message: we saw `seq` published
            // (its final stamp, or a `head` stored after it), and the producer clears this
            // message's WRITER bit before that. Release: pairs with its claim CAS, as any
            // unpin does.
            self.refuse_pin(hdr, bit, true);
            return Err(Miss::Overrun);
        }
        // Relaxed: our target read saw `seq` published (the final stamp, or a `head` after it)
        // with Acquire, so by coherence these loads see that stamp (and its claim marker) or
        // later ones. A later claim whose WRITER clear the Acquire above saw (a publication,
        // whose stamp it precedes, or an abort, after its odd stamp) made its marker visible:
        // the marker check refuses it even before its final stamp. Same line as the RMW.
        let stamp = hdr.stamp.load(Ordering::Relaxed);
        let want = 2 * seq + 2;
        let marker = hdr.claim.load(Ordering::Relaxed);
        if stamp != want {
            // Release: an unpin (see above).
            self.refuse_pin(hdr, bit, true);
            return Err(Miss::of_stamp(stamp, want));
        }
        if let Err(miss) = Miss::of_claim(marker, seq) {
            // Release: an unpin (see above).
            self.refuse_pin(hdr, bit, true);
            return Err(miss);
        }
        // Relaxed: stable while pinned; ordered by the Acquire above.
        let len = hdr.len.load(Ordering::Relaxed);
        let cap = self.mem.geometry().slot_capacity() as u64;
        if len > cap {
            // Release: an unpin.
            self.refuse_pin(hdr, bit, true);
            return Err(Miss::Fatal(ReadError::Corrupt(
                "message length exceeds the slot capacity",
            )));
        }
        Ok((slot, len as usize))
    }

    /// Whether this consumer's reads set a reader bit. A gating consumer's cursor is its pin:
    /// the producer claims the slot of message `seq` only once every gating cursor is past
    /// `seq` (its gating check, P12 with the consumer's Release cursor store C8), and our
    /// shared cursor stays at the message we read until we are done with it. So a gating read
    /// touches neither the pin line nor a locked instruction: only the message line.
    ///
    /// A gating consumer that started back ([`rewind`](Self::rewind)) pins the messages below
    /// the head it joined at with its bit: the producer's cached gate may cover their slots.
    /// One compare: `gate_from` is `u64::MAX` for the other classes (`Consumer::new`).
    #[inline]
    pub(super) fn pins(&self, seq: u64) -> bool {
        seq < self.gate_from
    }

    /// `pin_seq` for a gating consumer: message `seq` is ours to read in place while our
    /// shared cursor is at most `seq` (see [`pins`](Self::pins)); check that the slot holds it.
    pub(super) fn hold_by_cursor(
        &self,
        hdr: &crate::layout::SlotHeader,
        slot: usize,
        seq: u64,
    ) -> Result<(usize, usize), Miss> {
        // Acquire: pairs with the producer's Release stamp store that published `seq`, so the
        // message's words are visible (the target's load already did, this re-load is for
        // reads that targeted through `head`).
        let stamp = hdr.stamp.load(Ordering::Acquire);
        let want = 2 * seq + 2;
        if stamp != want {
            // The gating check keeps the producer off this slot: another stamp is a peer's
            // scribble (or a reclaimed, still running consumer, which `own_entry` reports).
            return Err(Miss::of_stamp(stamp, want));
        }
        self.cursor_pin_len(hdr, slot)
    }

    /// The rest of [`hold_by_cursor`](Self::hold_by_cursor) once the slot's stamp was seen to
    /// name the message (with Acquire, in this call): its length, checked against the capacity.
    #[inline(always)]
    fn cursor_pin_len(
        &self,
        hdr: &crate::layout::SlotHeader,
        slot: usize,
    ) -> Result<(usize, usize), Miss> {
        // Relaxed: stable while our cursor holds the slot; ordered by the stamp's Acquire load.
        let len = hdr.len.load(Ordering::Relaxed);
        if len > self.mem.geometry().slot_capacity() as u64 {
            return Err(Miss::Fatal(ReadError::Corrupt(
                "message length exceeds the slot capacity",
            )));
        }
        Ok((slot, len as usize))
    }
}
