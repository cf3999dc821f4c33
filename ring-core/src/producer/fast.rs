//! The publish in one pass: what [`Producer::try_publish`] does for the common case — a
//! default (not never-stall) ring, a claim below the cached gating bound, a message that fits
//! the slot — without building a [`WriteSlot`](super::WriteSlot).
//!
//! Before it changes anything it returns `None` when the case is not the common one, and
//! `try_publish` runs the general path, which decides everything again. From there it is the
//! general path's sequence, built from the same pieces: `claim_slot`'s checks, `claim_cas`,
//! `WriteSlot::fill`'s writes, `seal` (as `finish`) and `announce`. `try_publish_batch` runs
//! the same step (`publish_step`) for each message in the common case and announces once.

use super::write_slot::{pad_last_word, write_line};
use super::Producer;
use crate::error::ClaimError;
use crate::layout::{ProducerLine, FLAG_CLOSED, INLINE_CAPACITY, SEQ_LIMIT};
use crate::memory::Memory;
use crate::sync::Ordering;

/// Where a batch's publish step failed.
pub(super) enum StepError {
    /// The claim (nothing changed): as `claim_slot`'s error.
    Claim(ClaimError),
    /// The seal of a slot claimed through the claim API, after the claim and the write: the
    /// producer was displaced meanwhile.
    Seal(ClaimError),
}

impl<M: Memory> Producer<M> {
    /// The common case of `try_publish`: its sequence, or `None` (nothing changed) for the
    /// general path. Every refusal is `None`, its reason dropped: the general path, which
    /// decides everything again, finds and reports it (a displaced or closed producer, a
    /// pinned slot). So the common case carries no error payload, and the caller's join of
    /// both paths holds a sequence, not a `Result` built in memory (64 B: 14 instructions per
    /// publish, `benches/icount.sh`).
    #[inline(always)]
    pub(super) fn publish_fast(&mut self, data: &[u8], meta: [u64; 2]) -> Option<u64> {
        let seq = self.fast_seq(data)?;
        self.publish_at(seq, data, meta).ok()
    }

    /// The next sequence, when publishing `data` is the common case: a default (not
    /// never-stall) ring, a claim below the cached gating bound, a message that fits the slot.
    #[inline(always)]
    pub(super) fn fast_seq(&self, data: &[u8]) -> Option<u64> {
        let seq = self.head;
        if self.never_stall
            || seq >= self.gate_ok_below
            || seq >= SEQ_LIMIT
            || data.len() > self.mem.geometry().slot_capacity()
        {
            return None;
        }
        Some(seq)
    }

    /// `call_checks`, `publish_step`, then `announce`.
    #[inline(always)]
    fn publish_at(&mut self, seq: u64, data: &[u8], meta: [u64; 2]) -> Result<u64, ClaimError> {
        // One lookup of the producer line for the checks and the announce.
        let line = self.mem.producer_line();
        self.call_checks(line)?;
        self.publish_step(seq, data, meta)?;
        self.head = seq + 1;
        // `announce`, into the line looked up above.
        self.fenced = self.announce_in(line);
        self.stored_head = self.head;
        Ok(seq)
    }

    /// `claim_slot`'s checks that hold for a whole call (`line` is the producer line): the
    /// epoch (P0: not displaced) and the closed flag. Neither changes inside a call: a
    /// take-over never comes inside a call of the producer it displaces (the `take_over`
    /// contract; ring-os takes over only once the kernel released the displaced process's
    /// lock), and only this producer, through `&mut self`, closes. So the one-pass publish
    /// checks them once, and a batch once for all its messages.
    #[inline(always)]
    pub(super) fn call_checks(&self, line: &ProducerLine) -> Result<(), ClaimError> {
        self.check_epoch_in(line)?;
        // Relaxed: only this producer writes `flags`.
        if line.flags.load(Ordering::Relaxed) & FLAG_CLOSED != 0 {
            return Err(ClaimError::Closed);
        }
        Ok(())
    }

    /// `claim_slot` without the branches `fast_seq` ruled out and the checks `call_checks`
    /// made earlier in this call, the write, `seal`'s stores: message `seq` is then complete
    /// in its slot, and the caller sets the local `head` to `seq + 1` (and announces: a batch
    /// once at its end). A failure (only the claim's) changed nothing.
    #[inline(always)]
    pub(super) fn publish_step(
        &self,
        seq: u64,
        data: &[u8],
        meta: [u64; 2],
    ) -> Result<(), ClaimError> {
        let slot = self.mem.geometry().slot_of(seq);
        // One lookup of the slot's header for the claim, the write and the seal.
        let hdr = self.mem.slot_header(slot);
        self.claim_cas_at(hdr, slot, seq)?;
        if data.len() <= INLINE_CAPACITY {
            // The message line only, padded (as `WriteSlot::fill`).
            write_line(&hdr.inline, data);
        } else {
            self.write_payload(slot, data);
        }
        // `seal`'s stores, without its epoch re-check: `call_checks` covers this whole call
        // (see `seal_stores`). No never-stall route: the one-pass publish runs only on a
        // default ring. The caller sets the local `head`.
        self.seal_stores(hdr, seq, data.len(), meta);
        Ok(())
    }

    /// A message beyond the message line: as `fill` through `write`, then `finish`'s padding
    /// of the last word. Out of line, so the small message's path keeps a small frame (the
    /// copy of a long one costs far more than the call).
    #[inline(never)]
    fn write_payload(&self, slot: usize, data: &[u8]) {
        let payload = self.mem.payload(slot);
        crate::words::write(payload, 0, data);
        pad_last_word(payload, data.len());
    }
}
