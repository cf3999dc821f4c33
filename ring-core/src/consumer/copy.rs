//! Copying reads: the seqlock copy-out, a pin-only ring's pinned copy, and batch reads.

use super::fast::Fallback;
use super::{BatchItem, Consumer, Copied, Miss};
use crate::error::ReadError;
use crate::layout::ConsumerEntry;
use crate::memory::Memory;
use crate::sync::{fence, Ordering};

impl<M: Memory> Consumer<M> {
    /// Copies the next message (by delivery class) into `buf` with the seqlock, without
    /// pinning: the producer is never held back by a copy reader (except a gating one, by its
    /// cursor).
    ///
    /// # Errors
    /// As [`try_pin`](Self::try_pin), and [`ReadError::BufferTooSmall`] (the consumer does not
    /// advance: retry with a larger buffer).
    // Inlined into the caller: the one-pass path then costs no call, no frame of its own and
    // no result in memory; the general path stays out of line.
    #[inline(always)]
    pub fn try_copy(&mut self, buf: &mut [u8]) -> Result<Copied, ReadError> {
        match self.copy_fast(buf) {
            Ok(got) => Ok(got),
            Err(Fallback::NotYet) => Err(self.not_yet()),
            Err(Fallback::General) => self.copy_general(buf),
        }
    }

    /// `try_copy` in every case (out of line: the common case above keeps a small frame).
    #[inline(never)]
    fn copy_general(&mut self, buf: &mut [u8]) -> Result<Copied, ReadError> {
        if self.member.is_some() {
            return self.member_copy(buf);
        }
        let pin_only = self.mem.geometry().config().pin_only;
        let (seq, missed, (len, meta)) = self.read_next(|c, seq| {
            if pin_only {
                c.copy_pinned_seq(seq, buf)
            } else {
                c.copy_seq(seq, buf)
            }
        })?;
        self.advance(seq);
        Ok(Copied {
            seq,
            len,
            missed,
            meta,
            redelivered: false,
        })
    }

    /// Reads up to `max` ready messages (by delivery class), handing each to `f` while it is
    /// pinned, then publishes the cursor once and checks for a parked producer once for the
    /// whole batch. Returns how many were read.
    ///
    /// If `f` panics, the message it was given stays unconsumed: the next read takes its pin
    /// back and reads it again. `max == 0` reads nothing and returns `Ok(0)` without looking
    /// at the ring's state (an eviction or the stream's end shows on the next read).
    ///
    /// # Errors
    /// When not even one message could be read, the error the first read gave (as
    /// [`try_pin`](Self::try_pin)); an error after the first message ends the batch and comes
    /// back from the next call.
    pub fn try_read_batch(
        &mut self,
        max: usize,
        mut f: impl FnMut(BatchItem<'_>),
    ) -> Result<usize, ReadError> {
        if self.member.is_some() {
            return self.member_batch(max, f);
        }
        let bit = 1u64 << self.index;
        let mut count = 0;
        while count < max {
            // The common case in one pass (as `try_pin`), else the general read, which decides
            // everything again.
            let got = match self.pin_fast() {
                Ok((seq, slot, len)) => Ok((seq, 0, (slot, len))),
                Err(Fallback::NotYet) => Err(self.not_yet()),
                Err(Fallback::General) => self.read_next(|c, seq| c.pin_seq(seq)),
            };
            let (seq, missed, (slot, len)) = match got {
                Ok(got) => got,
                Err(e) if count == 0 => return Err(e),
                Err(_) => break,
            };
            // Should `f` unwind, the next read takes the pin back (a leaked pin).
            self.held = Some(slot);
            let hdr = self.mem.slot_header(slot);
            // Relaxed: stable while pinned; ordered by the pin's Acquire.
            let meta = [
                hdr.meta[0].load(Ordering::Relaxed),
                hdr.meta[1].load(Ordering::Relaxed),
            ];
            f(BatchItem {
                words: &self.message_words(slot, len)[..len.div_ceil(8)],
                seq,
                len,
                missed,
                meta,
            });
            self.held = None;
            if self.pins(seq) {
                // Release: the unpin; pairs with the producer's Acquire claim CAS, so our
                // reads happen before its next writes to the slot. (The wake-up check is the
                // batch's.) A gating read's pin is its cursor, stored once below.
                hdr.state.fetch_and(!bit, Ordering::Release);
            }
            self.next = seq + 1;
            self.received += 1;
            count += 1;
        }
        self.publish_progress(true);
        Ok(count)
    }

    /// A copy read in a pin-only ring: pin message `seq`, copy it, unpin. The producer cannot
    /// claim the slot meanwhile, so its in-place writes never race with this read.
    pub(super) fn copy_pinned_seq(
        &self,
        seq: u64,
        buf: &mut [u8],
    ) -> Result<(usize, [u64; 2]), Miss> {
        let (slot, len) = self.pin_seq(seq)?;
        let hdr = self.mem.slot_header(slot);
        let bit = 1u64 << self.index;
        if len > buf.len() {
            // Release: an unpin (see `refuse_pin`).
            self.refuse_pin(hdr, bit, self.pins(seq));
            return Err(Miss::Fatal(ReadError::BufferTooSmall { needed: len }));
        }
        // Relaxed: stable while pinned; ordered by the pin's Acquire.
        let meta = [
            hdr.meta[0].load(Ordering::Relaxed),
            hdr.meta[1].load(Ordering::Relaxed),
        ];
        crate::words::read(self.message_words(slot, len), &mut buf[..len]);
        // Release: the unpin, pairing with the producer's claim CAS: our reads happen before
        // its next writes. (Wakes a producer parked on the pin.)
        self.refuse_pin(hdr, bit, self.pins(seq));
        Ok((len, meta))
    }

    /// One seqlock read of message `seq` into `buf`.
    #[inline]
    pub(super) fn copy_seq(&self, seq: u64, buf: &mut [u8]) -> Result<(usize, [u64; 2]), Miss> {
        if self.never_stall {
            return self.copy_routed(seq, buf);
        }
        self.copy_slot(seq, self.mem.geometry().slot_of(seq), buf, None)
    }

    /// [`copy_seq`](Self::copy_seq) on a never-stall ring (out of line, as `target_routed`).
    #[inline(never)]
    pub(super) fn copy_routed(&self, seq: u64, buf: &mut [u8]) -> Result<(usize, [u64; 2]), Miss> {
        let slot = self.slot_for(seq)?;
        self.copy_slot(seq, slot, buf, None)
    }

    /// One seqlock read of message `seq` from `slot` into `buf`; `own` is our consumer entry
    /// when the caller has it at hand (it is looked up otherwise).
    #[inline(always)]
    pub(super) fn copy_slot(
        &self,
        seq: u64,
        slot: usize,
        buf: &mut [u8],
        own: Option<&ConsumerEntry>,
    ) -> Result<(usize, [u64; 2]), Miss> {
        let hdr = self.mem.slot_header(slot);
        // Acquire: pairs with the producer's Release stamp store that completed message `seq`.
        let s1 = hdr.stamp.load(Ordering::Acquire);
        self.copy_slot_seen(hdr, slot, seq, s1, buf, own)
    }

    /// [`copy_slot`](Self::copy_slot) with the slot's header `hdr` looked up and its stamp
    /// `s1` loaded (Acquire) by the caller.
    #[inline(always)]
    pub(super) fn copy_slot_seen(
        &self,
        hdr: &crate::layout::SlotHeader,
        slot: usize,
        seq: u64,
        s1: u64,
        buf: &mut [u8],
        own: Option<&ConsumerEntry>,
    ) -> Result<(usize, [u64; 2]), Miss> {
        let want = 2 * seq + 2;
        if s1 != want {
            return Err(Miss::of_stamp(s1, want));
        }
        // Relaxed: inside the seqlock read window; validated by `check_copy` below.
        let len = hdr.len.load(Ordering::Relaxed);
        let meta = [
            hdr.meta[0].load(Ordering::Relaxed),
            hdr.meta[1].load(Ordering::Relaxed),
        ];
        let cap = self.mem.geometry().slot_capacity() as u64;
        let early = if len > cap {
            Some(Miss::Fatal(ReadError::Corrupt(
                "message length exceeds the slot capacity",
            )))
        } else if len > buf.len() as u64 {
            Some(Miss::Fatal(ReadError::BufferTooSmall {
                needed: len as usize,
            }))
        } else {
            crate::words::read(
                self.message_words_at(hdr, slot, len as usize),
                &mut buf[..len as usize],
            );
            None
        };
        // Acquire fence (C4): pairs with the Release fence after a later claim's marker store
        // (P3), and with the Release of a reclaim of our entry, through the claim after it.
        fence(Ordering::Acquire);
        self.check_copy(hdr, seq, own)?;
        match early {
            Some(e) => Err(e),
            None => Ok((len as usize, meta)),
        }
    }

    /// Validates a seqlock copy of message `seq` out of `hdr`'s slot, after the copy's Acquire
    /// fence (C4 in docs/PROTOCOL.md).
    ///
    /// - A read our cursor protects (a gating read at or past `gate_from` on a default ring:
    ///   exactly the reads that set no reader bit, [`pins`](Self::pins)): the producer claims
    ///   the slot again only once our cursor is past `seq`, which it is not before we are done,
    ///   unless our entry is reclaimed. A reclaim bumps our entry's generation first and
    ///   happens before any claim it lets through (the producer's own program order, or its
    ///   Acquire load of the entry the reclaim released), so before that claim's Release fence
    ///   and payload words: if we read any of them, the fence makes the change visible here.
    ///   Our entry's line is our own: no line moves.
    /// - Any other read: the claim marker. A word written by a later claim of the slot follows
    ///   that claim's marker store and Release fence, so this load sees that marker (or a
    ///   later one), never `2·seq+1`. The stamp needs no re-check: the marker changes at every
    ///   claim, and the stamp only after it.
    #[inline(always)]
    fn check_copy(
        &self,
        hdr: &crate::layout::SlotHeader,
        seq: u64,
        own: Option<&ConsumerEntry>,
    ) -> Result<(), Miss> {
        // `guarded_from` caches the condition (`register.rs`, `rewind`).
        debug_assert_eq!(
            seq >= self.guarded_from,
            !self.never_stall && !self.pins(seq)
        );
        if seq >= self.guarded_from {
            // Relaxed: ordered by the fence. The generation alone: a reclaim bumps it first
            // (P17's CAS, before anything it frees), and a registration into our entry bumps
            // it too (R1), so every change of the entry's holder changes it.
            let own = own.unwrap_or_else(|| self.mem.consumer_entry(self.index));
            return if own.generation.load(Ordering::Relaxed) == self.generation {
                Ok(())
            } else {
                Err(Miss::Fatal(ReadError::Evicted))
            };
        }
        // Relaxed: ordered by the fence.
        Miss::of_claim(hdr.claim.load(Ordering::Relaxed), seq)
    }
}
