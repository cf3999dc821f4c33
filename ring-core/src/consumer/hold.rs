//! Holds: several messages pinned by one consumer at once, released in any order.
//!
//! A [`Pinned`](crate::Pinned) borrows its consumer, so a consumer has at most one. A transport
//! that keeps an earlier message alive while it reads the next (an RPC stream keeping an Arrow
//! batch, a pipeline stage keeping the frame it works on) needs several: [`Consumer::try_hold`]
//! pins the next message and hands back a [`Hold`], a token that borrows nothing;
//! [`Consumer::held_bytes`] lends its bytes; [`Consumer::release`] gives it back, in any order.
//!
//! What keeps a held message's slot from the producer is what keeps a `Pinned` one:
//! - latest-only and skip-on-lag consumers set their reader bit in the slot (the claim CAS
//!   fails while any reader bit is set), and the release clears it (Release, pairing with the
//!   claim's Acquire CAS), exactly as a `Pinned` drop does;
//! - a gating consumer's pin is its shared cursor: it stores the *oldest* message it holds, or
//!   the next one to read when it holds none ([`Consumer::shared_cursor`]), so the gating check
//!   keeps the producer off every held slot, and a release that frees the oldest hold moves the
//!   cursor on (the Release cursor store of every read, pairing with the gating scan's Acquire).
//!
//! A consumer that dies holding messages is reclaimed as before: the producer clears its bit in
//! every slot, and its entry stops gating.

use super::{Consumer, ReadError};
use crate::class::DeliveryClass;
use crate::memory::Memory;
use crate::sync::{AtomicU64, Ordering};

/// The most messages one consumer can hold at once.
pub const MAX_HOLDS: usize = 8;

/// How many messages a consumer may hold until [`Consumer::set_max_holds`] says otherwise.
pub const DEFAULT_MAX_HOLDS: usize = 4;

/// The (sequence, slot) pairs a consumer holds, unordered.
#[derive(Clone, Copy, Debug)]
pub(super) struct HoldSet {
    seqs: [u64; MAX_HOLDS],
    slots: [usize; MAX_HOLDS],
    len: usize,
    max: usize,
}

impl HoldSet {
    pub(super) const fn new() -> Self {
        Self {
            seqs: [0; MAX_HOLDS],
            slots: [0; MAX_HOLDS],
            len: 0,
            max: DEFAULT_MAX_HOLDS,
        }
    }

    /// Whether `slot` is the slot of a held message.
    #[inline]
    pub(super) fn holds_slot(&self, slot: usize) -> bool {
        // The common case, no holds, in one compare (the per-message read path).
        self.len != 0 && self.holds_slot_slow(slot)
    }

    #[cold]
    #[inline(never)]
    fn holds_slot_slow(&self, slot: usize) -> bool {
        self.slots[..self.len.min(MAX_HOLDS)].contains(&slot)
    }

    /// The oldest held sequence.
    #[inline]
    fn oldest(&self) -> Option<u64> {
        self.seqs[..self.len.min(MAX_HOLDS)].iter().copied().min()
    }

    /// Where `(seq, slot)` is held.
    fn position(&self, seq: u64, slot: usize) -> Option<usize> {
        (0..self.len).find(|&i| self.seqs[i] == seq && self.slots[i] == slot)
    }

    fn insert(&mut self, seq: u64, slot: usize) {
        // The caller checked `len < max <= MAX_HOLDS`.
        if self.len < MAX_HOLDS {
            self.seqs[self.len] = seq;
            self.slots[self.len] = slot;
            self.len += 1;
        }
    }

    fn remove(&mut self, i: usize) {
        self.len -= 1;
        self.seqs[i] = self.seqs[self.len];
        self.slots[i] = self.slots[self.len];
    }
}

/// A message a consumer holds pinned ([`Consumer::try_hold`]): its bytes stay as they are, and
/// readable through [`Consumer::held_bytes`], until [`Consumer::release`] gives it back. It
/// borrows nothing, so a consumer can hold several at once (up to
/// [`Consumer::max_holds`]) and release them in any order.
///
/// Dropping a `Hold` does not release it (it has no access to its consumer): the message stays
/// held until `release`, [`Consumer::release_all`] or the consumer's drop.
#[must_use = "a hold keeps its message pinned until Consumer::release gives it back"]
#[derive(Debug, PartialEq, Eq)]
pub struct Hold {
    index: usize,
    generation: u64,
    seq: u64,
    slot: usize,
    len: usize,
    missed: u64,
    meta: [u64; 2],
    redelivered: bool,
}

impl Hold {
    /// Whether a group member's message was handed out before (see
    /// [`Copied::redelivered`](crate::Copied::redelivered)).
    pub fn redelivered(&self) -> bool {
        self.redelivered
    }

    /// The message's sequence number.
    pub fn seq(&self) -> u64 {
        self.seq
    }

    /// The message length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True for a zero-length message.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Messages skipped before this one (0 for a gating consumer).
    pub fn missed(&self) -> u64 {
        self.missed
    }

    /// The message's metadata words.
    pub fn meta(&self) -> [u64; 2] {
        self.meta
    }
}

impl<M: Memory> Consumer<M> {
    /// How many messages this consumer may hold at once ([`DEFAULT_MAX_HOLDS`] unless set).
    pub fn max_holds(&self) -> usize {
        self.holds.max
    }

    /// How many messages this consumer holds now.
    pub fn holds(&self) -> usize {
        self.holds.len
    }

    /// Sets how many messages this consumer may hold at once, 0 to [`MAX_HOLDS`]. A gating
    /// consumer that holds as many messages as the ring has slots stops the producer until it
    /// releases one (that is what holding them means); a latest-only or skip-on-lag one keeps
    /// the producer off the held slots only.
    ///
    /// # Errors
    /// [`ReadError::TooManyHolds`] (with `MAX_HOLDS`) above `MAX_HOLDS`, or (with the current
    /// count) below the number held now; nothing changes.
    pub fn set_max_holds(&mut self, max: usize) -> Result<(), ReadError> {
        if max > MAX_HOLDS {
            return Err(ReadError::TooManyHolds { max: MAX_HOLDS });
        }
        if max < self.holds.len {
            return Err(ReadError::TooManyHolds {
                max: self.holds.len,
            });
        }
        self.holds.max = max;
        Ok(())
    }

    /// Pins the next message (by delivery class) and holds it until [`release`](Self::release):
    /// unlike [`try_pin`](Self::try_pin), the consumer stays free for further reads and
    /// holds, so several messages can be kept at once.
    ///
    /// ```
    /// use ring_core::{Config, Consumer, DeliveryClass, HeapSegment, OwnerId, Producer};
    /// let id = |n| OwnerId::new(n).unwrap();
    /// let seg = HeapSegment::new(&Config::new(4, 16), id(1)).unwrap();
    /// let mut producer = Producer::new(&seg, id(1)).unwrap();
    /// let mut reader = Consumer::new(&seg, DeliveryClass::Gating, id(2)).unwrap();
    /// for batch in [b"one", b"two"] {
    ///     producer.try_publish(batch).unwrap();
    /// }
    /// let first = reader.try_hold()?;
    /// let second = reader.try_hold()?; // the first is still held
    /// assert_eq!(reader.held_bytes(&first), Some(&b"one"[..]));
    /// reader.release(second)?; // in any order
    /// assert_eq!(reader.held_bytes(&first), Some(&b"one"[..]));
    /// reader.release(first)?;
    /// # Ok::<(), ring_core::ReadError>(())
    /// ```
    ///
    /// # Errors
    /// [`ReadError::TooManyHolds`] when [`max_holds`](Self::max_holds) messages are held
    /// (nothing is read); otherwise as [`try_pin`](Self::try_pin).
    pub fn try_hold(&mut self) -> Result<Hold, ReadError> {
        if self.holds.len >= self.holds.max {
            return Err(ReadError::TooManyHolds {
                max: self.holds.max,
            });
        }
        if self.member.is_some() {
            return self.member_hold();
        }
        let (seq, missed, (slot, len)) = self.read_next(|c, seq| c.pin_seq(seq))?;
        let hdr = self.mem.slot_header(slot);
        // Relaxed: stable while held; ordered by the pin's Acquire (or the gating stamp load).
        let meta = [
            hdr.meta[0].load(Ordering::Relaxed),
            hdr.meta[1].load(Ordering::Relaxed),
        ];
        self.holds.insert(seq, slot);
        self.next = seq + 1;
        self.received += 1;
        // A gating consumer's shared cursor stays at its oldest hold (`shared_cursor`).
        self.publish_progress(false);
        Ok(Hold {
            index: self.index,
            generation: self.generation,
            seq,
            slot,
            len,
            missed,
            meta,
            redelivered: false,
        })
    }

    /// [`try_hold`](Self::try_hold) for a group member: the hold is a claim.
    #[cold]
    #[inline(never)]
    fn member_hold(&mut self) -> Result<Hold, ReadError> {
        let c = self.claim_from_group()?;
        let hdr = self.mem.slot_header(c.slot);
        // Relaxed: stable while claimed; ordered by the stamp's Acquire of the claim's check.
        let meta = [
            hdr.meta[0].load(Ordering::Relaxed),
            hdr.meta[1].load(Ordering::Relaxed),
        ];
        self.holds.insert(c.seq, c.slot);
        Ok(Hold {
            index: self.index,
            generation: self.generation,
            seq: c.seq,
            slot: c.slot,
            len: c.len,
            missed: 0,
            meta,
            redelivered: c.redelivered,
        })
    }

    /// Where `hold` is in this consumer's set, if it is one of its holds.
    fn hold_position(&self, hold: &Hold) -> Option<usize> {
        if hold.index != self.index || hold.generation != self.generation {
            return None;
        }
        self.holds.position(hold.seq, hold.slot)
    }

    /// The words a held message lies in (the last one zero-padded past its length); `None`
    /// when `hold` is not one of this consumer's holds, or when this consumer was reclaimed (a
    /// reclaim took its holds back: the producer may rewrite their slots).
    pub fn held_words(&self, hold: &Hold) -> Option<&[AtomicU64]> {
        self.hold_position(hold)?;
        // Relaxed: our own entry's generation; a reclaim moves it on first (and a later
        // registration into the entry moves it again), and the reclaimer promised no borrow of
        // held bytes is alive across it, so this is a check, not a synchronisation.
        if self
            .mem
            .consumer_entry(self.index)
            .generation
            .load(Ordering::Relaxed)
            != self.generation
        {
            return None;
        }
        Some(&self.message_words(hold.slot, hold.len)[..hold.len.div_ceil(8)])
    }

    /// A held message's bytes, zero-copy; `None` when `hold` is not one of this consumer's
    /// holds (released, or another consumer's), or when this consumer was reclaimed.
    #[cfg(not(any(ring_loom, ring_shuttle)))]
    pub fn held_bytes(&self, hold: &Hold) -> Option<&[u8]> {
        let words = self.held_words(hold)?;
        // SAFETY:
        // - `words` covers `len.div_ceil(8) * 8 ≥ len` bytes of the slot (`len` ≤ capacity was
        //   checked when the message was pinned; inline words only for small messages);
        // - `AtomicU64` has the layout of `u64`, so its bytes may be viewed as `u8`s;
        // - the message is held (it is in `holds`: checked above), so the producer cannot claim
        //   its slot: our reader bit is set (non-gating), or our shared cursor is at most its
        //   sequence (gating, `shared_cursor`); only `release`, `release_all` and the drop end
        //   a hold, and they take `&mut self`, which this borrow excludes; a reclaim (which
        //   clears holds behind our back) happened before the check in `held_words` or, by
        //   `Producer::reclaim`'s contract, not while this borrow lives. A hostile process
        //   could still write the bytes, which the threat model accepts for pinned reads, as
        //   for `Pinned::bytes`.
        Some(unsafe { core::slice::from_raw_parts(words.as_ptr().cast::<u8>(), hold.len) })
    }

    /// Gives a held message back: the producer may reuse its slot (and a gating consumer's
    /// cursor moves past it once no older message is held).
    ///
    /// # Errors
    /// [`ReadError::NotHeld`] when `hold` is not one of this consumer's holds (nothing
    /// changes); [`ReadError::Evicted`] when this consumer was reclaimed (the hold is gone, and
    /// nothing was written: a reclaim already took it back).
    pub fn release(&mut self, hold: Hold) -> Result<(), ReadError> {
        let i = self.hold_position(&hold).ok_or(ReadError::NotHeld)?;
        self.holds.remove(i);
        self.unhold(hold.seq, hold.slot)
    }

    /// Releases every held message (the ones whose [`Hold`] was dropped included); returns
    /// how many.
    pub fn release_all(&mut self) -> usize {
        let n = self.holds.len;
        while self.holds.len > 0 {
            let (seq, slot) = (
                self.holds.seqs[self.holds.len - 1],
                self.holds.slots[self.holds.len - 1],
            );
            self.holds.len -= 1;
            // A reclaimed consumer's holds are gone already: nothing to report per hold.
            let _ = self.unhold(seq, slot);
        }
        n
    }

    /// Ends the hold of `slot` (already removed from the set) in shared memory.
    /// `Evicted` (and nothing written) when this consumer was reclaimed.
    fn unhold(&mut self, seq: u64, slot: usize) -> Result<(), ReadError> {
        if let Some(word) = self.claim_word(seq) {
            self.finish(word); // A member's hold is a claim.
            return self.check_registered();
        }
        // Reclaimed: the bit and the cursor are no longer ours; write nothing.
        self.check_registered()?;
        if self.pins(seq) {
            // Release: the unpin; pairs with the producer's Acquire claim CAS, so our reads of
            // the message happen before its next writes to the slot.
            self.mem
                .slot_header(slot)
                .state
                .fetch_and(!(1u64 << self.index), Ordering::Release);
        }
        // Stores the cursor (a gating consumer's may move past the released message) and
        // wakes a parked producer.
        self.publish_progress(true);
        Ok(())
    }

    /// The cursor the entry shows the producer: a gating consumer's is its pin, so it stays at
    /// the oldest message it holds; everyone else's is the next message to read.
    #[inline]
    pub(super) fn shared_cursor(&self) -> u64 {
        // The common case, no holds, in one compare (every read publishes its cursor); the
        // rest out of line, so the read path stays as small as it was without holds.
        if self.holds.len == 0 {
            self.next
        } else {
            self.shared_cursor_holding()
        }
    }

    #[cold]
    #[inline(never)]
    fn shared_cursor_holding(&self) -> u64 {
        match (self.class, self.holds.oldest()) {
            (DeliveryClass::Gating, Some(oldest)) => oldest.min(self.next),
            _ => self.next,
        }
    }
}
