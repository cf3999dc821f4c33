//! A claimed slot: writing the message (copy, at an offset, or in place) and publishing it.

#[cfg(not(any(ring_loom, ring_shuttle)))]
use super::LoanError;
use super::{Overflow, Producer, WriteSlot};
use crate::error::ClaimError;
use crate::layout::{ProducerLine, SlotHeader, INLINE_CAPACITY, INLINE_WORDS, WRITER};
use crate::memory::Memory;
use crate::sync::{AtomicU64, Ordering};

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

    /// The slot this message is written into: `seq % slots` on a default ring; any slot no
    /// reader pins on a never-stall ring (per-slot bookkeeping must use this, not the
    /// sequence).
    pub fn slot(&self) -> usize {
        self.slot
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
        // Written into the payload area, small messages too (`write_at` may add to it), and
        // `finish` copies a small one into the message line. Only `try_publish` and
        // `try_publish_batch` (through `fill`) write a small message into the line alone.
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
        // The message line no longer matches what the payload area will hold: `finish` copies.
        self.inlined = false;
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

    /// Sets the message length. Bytes beyond what was written read as whatever the slot's
    /// payload area held: what the claim API last wrote there, or zeros before any. (A small
    /// message sent with [`Producer::try_publish`] or [`Producer::try_publish_batch`] is
    /// written into the slot's header only, so it is never among them.)
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

    /// Writes `data` as the whole message (the caller checked it fits the slot). A small one
    /// goes into the message line only, its last word padded: what readers of a small message
    /// read (`message_words`), written once. The payload area keeps what was last written
    /// through it (see [`set_len`](Self::set_len)).
    #[inline]
    pub(super) fn fill(&mut self, data: &[u8]) {
        if data.len() <= INLINE_CAPACITY {
            let hdr = self.producer.mem.slot_header(self.slot);
            write_line_outlined(&hdr.inline, data);
            self.loaned = false;
            self.inlined = true;
            self.len = data.len();
            return;
        }
        let ok = self.write(data);
        debug_assert!(ok.is_ok(), "the caller checked the length");
    }

    /// Completes the message in its slot (the stamp is its publication) without storing
    /// `head`; returns its sequence.
    pub(super) fn finish(&mut self) -> Result<u64, ClaimError> {
        self.done = true;
        let p = &mut *self.producer;
        let seq = self.seq;
        let len = self.len;
        if self.inlined {
            // `fill` wrote the message line, padded.
        } else if !self.loaned {
            // Zero the last word past `len`, so `Pinned::words` shows a padded word even where
            // a shorter message overwrote a longer one (partial-word writes keep the old bytes).
            pad_last_word(p.mem.payload(self.slot), len);
        }
        if len <= INLINE_CAPACITY && !self.inlined {
            // A small message travels in the message line: the reader then touches only that
            // line. (The padded last word comes along.)
            let hdr = p.mem.slot_header(self.slot);
            copy_words(p.mem.payload(self.slot), &hdr.inline, len);
        }
        p.seal(self.slot, seq, len, self.meta)
    }

    /// Gives the slot back without publishing; the sequence number is reused.
    pub fn abort(mut self) {
        self.release();
    }

    pub(super) fn release(&mut self) {
        if self.done {
            return;
        }
        self.done = true;
        if self.producer.is_displaced() {
            return; // The slot's WRITER bit, if set, is the successor's now.
        }
        let hdr = self.producer.mem.slot_header(self.slot);
        // Relaxed: ordered by the Release below. The old message may be partly overwritten,
        // so the stamp stops naming it (odd: no message): a pinner that finds WRITER clear
        // then sees this stamp and refuses. (Copy readers of it also see the claim marker.)
        hdr.stamp.store(2 * self.seq + 1, Ordering::Relaxed);
        // Release: hands the slot back to pinning readers (their Acquire `fetch_or`), after
        // the odd stamp above.
        hdr.state.fetch_and(!WRITER, Ordering::Release);
    }
}

impl<M: Memory> Producer<M> {
    /// Completes message `seq` of `len` bytes, written in `slot`: its length and metadata,
    /// the slot back to pinning readers, the final stamp (the publication), and the local
    /// `head`. `head` itself is stored by `announce`. Returns `seq`.
    ///
    /// A producer displaced since the claim publishes nothing and leaves the slot (now its
    /// successor's) alone: [`ClaimError::Displaced`].
    #[inline(always)]
    pub(super) fn seal(
        &mut self,
        slot: usize,
        seq: u64,
        len: usize,
        meta: [u64; 2],
    ) -> Result<u64, ClaimError> {
        self.seal_at(
            self.mem.producer_line(),
            self.mem.slot_header(slot),
            seq,
            len,
            meta,
        )?;
        if self.never_stall {
            self.route_published(seq, slot);
        }
        self.head = seq + 1;
        Ok(seq)
    }

    /// [`seal`](Self::seal)'s check and stores, into `hdr` (the slot's header, already looked
    /// up; `line` is the producer line): everything but the never-stall route and the local
    /// `head`, which the caller sets. The epoch re-check is for a slot claimed in an earlier
    /// call (a `WriteSlot`): a take-over may have come between the calls.
    #[inline(always)]
    pub(super) fn seal_at(
        &self,
        line: &ProducerLine,
        hdr: &SlotHeader,
        seq: u64,
        len: usize,
        meta: [u64; 2],
    ) -> Result<(), ClaimError> {
        self.check_epoch_in(line)?;
        self.seal_stores(hdr, seq, len, meta);
        Ok(())
    }

    /// [`seal_at`](Self::seal_at)'s stores, without its epoch re-check: for a claim made in
    /// the same call (the one-pass publish and batch), whose check at the claim covers the
    /// whole call: a take-over never comes inside a call of the producer it displaces (the
    /// `take_over` contract; ring-os takes over only once the kernel released the displaced
    /// process's lock), so the epoch cannot change between that check and this seal.
    #[inline(always)]
    pub(super) fn seal_stores(&self, hdr: &SlotHeader, seq: u64, len: usize, meta: [u64; 2]) {
        // Relaxed: inside the seqlock write window; ordered by the stamp's Release store.
        hdr.len.store(len as u64, Ordering::Relaxed);
        hdr.meta[0].store(meta[0], Ordering::Relaxed);
        hdr.meta[1].store(meta[1], Ordering::Relaxed);
        // Release: hands the slot to pinning readers; pairs with their Acquire `fetch_or`.
        // Before the final stamp: a reader that saw the final stamp and then finds WRITER set
        // knows a *later* claim is under way (an overrun), never this message's own.
        open_slot(&hdr.state, Ordering::Release);
        // Release: the publication. Ends the seqlock write; pairs with the Acquire stamp loads
        // of consumers that follow the slot and of copy readers.
        hdr.stamp.store(2 * seq + 2, Ordering::Release);
    }
}

impl<M: Memory> Drop for WriteSlot<'_, M> {
    fn drop(&mut self) {
        self.release();
    }
}

/// Zeroes the bytes of the word holding byte `len` that lie past `len` (nothing when `len` is a
/// multiple of 8 or beyond `words`). Relaxed: inside the seqlock write window.
pub(super) fn pad_last_word(words: &[AtomicU64], len: usize) {
    if len % 8 == 0 {
        return;
    }
    if let Some(w) = words.get(len / 8) {
        let mut bytes = w.load(Ordering::Relaxed).to_ne_bytes();
        bytes[len % 8..].fill(0);
        w.store(u64::from_ne_bytes(bytes), Ordering::Relaxed);
    }
}

/// Stores `data` (at most as long as `words`) from word 0 of `words`, the last word padded
/// with zeros. Relaxed: the producer's own words, inside the seqlock write window.
#[inline(always)]
pub(super) fn write_line(words: &[AtomicU64; INLINE_WORDS], data: &[u8]) {
    if data.len() > INLINE_CAPACITY {
        debug_assert!(false, "the caller checked the length");
        return;
    }
    // Straight-line blocks of whole words (the line's length is known: no bound checks).
    let Some((words, rest)) = crate::words::store_whole(words, data) else {
        return; // Unreachable: the line holds `INLINE_CAPACITY` bytes.
    };
    if let Some(x) = words.first().filter(|_| !rest.is_empty()) {
        x.store(tail_word(data, rest), Ordering::Relaxed);
    }
}

/// The last word of `data`, whose last 1 to 7 bytes are `rest`: `rest` zero-padded to a word.
#[inline(always)]
fn tail_word(data: &[u8], rest: &[u8]) -> u64 {
    debug_assert!((1..8).contains(&rest.len()));
    if let Some(last) = data.last_chunk::<8>() {
        // The last 8 bytes end with `rest`: as a little-endian number, `rest` is its top bytes;
        // shifted down, they leave zeros above them (the padding).
        let v = u64::from_le_bytes(*last) >> (8 * (8 - rest.len()));
        return u64::from_ne_bytes(v.to_le_bytes());
    }
    let mut w = [0u8; 8];
    for (to, from) in w.iter_mut().zip(rest) {
        *to = *from;
    }
    u64::from_ne_bytes(w)
}

/// [`write_line`] as a call: `fill` (a batch publishes through it) keeps its frame small.
#[inline(never)]
fn write_line_outlined(words: &[AtomicU64; INLINE_WORDS], data: &[u8]) {
    write_line(words, data);
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

/// The seal's clear of WRITER (P6 in docs/PROTOCOL.md): a plain store of 0 into the slot's
/// state word, not an RMW.
///
/// While WRITER is set, every reader bit in the word is transient: the claim set WRITER with
/// its CAS from 0, so no bit was there before it, and a pin whose `fetch_or` returns WRITER is
/// refused and takes its bit back with `fetch_and(!bit)`, which is a no-op once the store
/// erased it. So the store takes nothing from anyone who holds the slot. Readers whose
/// `fetch_or` reads this 0, or a later RMW in its release sequence, synchronise with it. It is
/// a plain store because a locked RMW here waits for every store of the message to leave the
/// store buffer first (x86): `docs/benchmarks.md`, "The seal as a plain store".
///
/// Under loom it is a `swap(0)`: an RMW that writes the same value. loom 0.7 does not keep a
/// location's modification order between a plain store and RMWs of other threads
/// (tokio-rs/loom#282, #389): with the store, the producer's own load right after it read the
/// WRITER the store had replaced. The swap erases exactly what the store does, so the models
/// check the protocol the store implements; shuttle and Miri run the store itself.
#[inline(always)]
fn open_slot(state: &AtomicU64, order: Ordering) {
    #[cfg(not(ring_loom))]
    state.store(0, order);
    #[cfg(ring_loom)]
    let _ = state.swap(0, order);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `write_line` at every length of the message line, over a line full of old bytes: the
    /// words covering the message hold it, the last one zero-padded; the words after it keep
    /// their old value.
    #[test]
    fn write_line_pads_the_last_word_and_keeps_the_rest() {
        const OLD: u64 = 0xeeee_eeee_eeee_eeee;
        for len in 0..=INLINE_CAPACITY {
            let words: [AtomicU64; INLINE_WORDS] = core::array::from_fn(|_| AtomicU64::new(OLD));
            let data: std::vec::Vec<u8> =
                (0..len).map(|i| (i as u8).wrapping_mul(13) | 1).collect();
            write_line(&words, &data);
            for (i, w) in words.iter().enumerate() {
                let want = if i * 8 < len {
                    let mut b = [0u8; 8];
                    let end = len.min(i * 8 + 8);
                    b[..end - i * 8].copy_from_slice(&data[i * 8..end]);
                    u64::from_ne_bytes(b)
                } else {
                    OLD
                };
                assert_eq!(w.load(Ordering::Relaxed), want, "len {len} word {i}");
            }
        }
    }
}
