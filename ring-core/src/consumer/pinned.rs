//! A pinned message (`Pinned`) and a batch item (`BatchItem`): zero-copy views.

use super::{entry_if_current, Pinned, NO_CLAIM};
use crate::class::DeliveryClass;
use crate::memory::Memory;
use crate::sync::{AtomicU64, Ordering};

impl<M: Memory> Pinned<'_, M> {
    /// The memory of the ring this pin holds a slot of (for the payload binding in `arena`).
    #[cfg(feature = "alloc")]
    pub(crate) fn memory(&self) -> &M {
        self.consumer.memory()
    }

    /// The message's sequence number.
    pub fn seq(&self) -> u64 {
        self.seq
    }

    /// Messages skipped before this one (0 for a gating consumer that keeps up).
    pub fn missed(&self) -> u64 {
        self.missed
    }

    /// Whether a group member's message was handed out before (see [`Copied::redelivered`](super::Copied::redelivered)).
    pub fn redelivered(&self) -> bool {
        self.again
    }

    /// The message length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True for a zero-length message.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The slot index the message lies in.
    pub fn slot(&self) -> usize {
        self.slot
    }

    /// The message's metadata words.
    pub fn meta(&self) -> [u64; 2] {
        let hdr = self.consumer.mem.slot_header(self.slot);
        // Relaxed: stable while pinned (the producer cannot claim the slot).
        [
            hdr.meta[0].load(Ordering::Relaxed),
            hdr.meta[1].load(Ordering::Relaxed),
        ]
    }

    /// The payload as atomic words (the last one zero-padded past `len`).
    pub fn words(&self) -> &[AtomicU64] {
        &self.consumer.message_words(self.slot, self.len)[..self.len.div_ceil(8)]
    }

    /// Copies the message into `out` (which must be at least `len()` bytes; extra is untouched).
    /// Returns the number of bytes copied.
    pub fn copy_to(&self, out: &mut [u8]) -> usize {
        let n = self.len.min(out.len());
        crate::words::read(
            self.consumer.message_words(self.slot, self.len),
            &mut out[..n],
        );
        n
    }

    /// The message bytes, zero-copy.
    #[cfg(not(any(ring_loom, ring_shuttle)))]
    #[inline]
    pub fn bytes(&self) -> &[u8] {
        let words = self.consumer.message_words(self.slot, self.len);
        // SAFETY:
        // - the words span `words.len() * 8 ≥ len` bytes (len ≤ capacity was checked at pin,
        //   and inline words are used only for `len ≤ INLINE_CAPACITY`);
        // - `AtomicU64` has the layout of `u64`, so its bytes may be viewed as `u8`s;
        // - while this pin is held the producer cannot claim the slot (the claim CAS needs a
        //   zero reader mask; for a gating consumer, whose pin is its cursor, the gating check
        //   needs our shared cursor past `seq`, which `Drop` stores only after the borrow; for
        //   a group member, whose pin is its claim, the gating scan sees the claim until
        //   `Drop` clears it after the borrow: G1–G4 in docs/PROTOCOL.md), so
        //   no one writes these bytes for the borrow's life; other readers only read. A hostile process could still write them: shared memory cannot stop a
        //   peer that ignores the protocol, which the threat model (`docs/DESIGN.md`) accepts for pinned reads.
        unsafe { core::slice::from_raw_parts(words.as_ptr().cast::<u8>(), self.len) }
    }
}

impl<M: Memory> Drop for Pinned<'_, M> {
    // Inlined where the pin ends (a group member's finish stays a call).
    #[inline(always)]
    fn drop(&mut self) {
        let c = &mut *self.consumer;
        if self.claim != NO_CLAIM {
            c.finish(usize::from(self.claim));
            return;
        }
        c.held = None;
        // The pin's call found the entry ours; since then only a reclaim can have changed it,
        // and that moves the generation first (`entry_if_current`, C0g).
        let Some(e) = entry_if_current(&c.mem, c.index, c.generation) else {
            // Reclaimed: the bit and the cursor are no longer ours (a new consumer may hold
            // this entry now, with the same owner id); write nothing.
            return;
        };
        c.next = self.seq + 1;
        c.received += 1;
        if c.pins(self.seq) {
            let hdr = c.mem.slot_header(self.slot);
            // Release: the unpin; pairs with the producer's Acquire claim CAS, so our reads of
            // the message happen before its next writes to the slot.
            hdr.state.fetch_and(!(1u64 << c.index), Ordering::Release);
            if c.class != DeliveryClass::Gating {
                // A reader that does not gate publishes every `PROGRESS_EVERY` reads; the
                // unpin may be what a parked producer waits for, so it wakes it either way.
                if super::wait::progress_due(&mut c.unpublished) {
                    c.store_words(e);
                }
                c.wake_producer();
                return;
            }
        }
        // A gating consumer's pin is its cursor: the Release cursor store (`advance`'s, into
        // the entry checked above: no reclaim happens inside a call) lets the producer's gating
        // scan (Acquire) past this message.
        c.store_progress(e, true);
    }
}

/// One message of [`Consumer::try_read_batch`](super::Consumer::try_read_batch), pinned while the callback runs.
#[derive(Debug)]
pub struct BatchItem<'a> {
    pub(super) words: &'a [AtomicU64],
    pub(super) seq: u64,
    pub(super) len: usize,
    pub(super) missed: u64,
    pub(super) meta: [u64; 2],
}

impl BatchItem<'_> {
    /// The message's sequence number.
    pub fn seq(&self) -> u64 {
        self.seq
    }

    /// Messages skipped before this one (0 for a gating consumer that keeps up).
    pub fn missed(&self) -> u64 {
        self.missed
    }

    /// The message length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True for a zero-length message.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The message's metadata words.
    pub fn meta(&self) -> [u64; 2] {
        self.meta
    }

    /// The payload as atomic words (the last one zero-padded past `len`).
    pub fn words(&self) -> &[AtomicU64] {
        self.words
    }

    /// Copies the message into `out`; returns the number of bytes copied.
    pub fn copy_to(&self, out: &mut [u8]) -> usize {
        let n = self.len.min(out.len());
        crate::words::read(self.words, &mut out[..n]);
        n
    }

    /// The message bytes, zero-copy.
    #[cfg(not(any(ring_loom, ring_shuttle)))]
    pub fn bytes(&self) -> &[u8] {
        // SAFETY: `words` covers `len.div_ceil(8) * 8 ≥ len` bytes of the pinned slot (cut by
        // `try_read_batch` after the pin checked `len`); `AtomicU64` has the layout of `u64`;
        // the pin is held until the callback this item was given to returns, and the item (a
        // higher-ranked borrow) cannot outlive that call, so no one writes the bytes meanwhile
        // (as for `Pinned::bytes`).
        unsafe { core::slice::from_raw_parts(self.words.as_ptr().cast::<u8>(), self.len) }
    }
}
