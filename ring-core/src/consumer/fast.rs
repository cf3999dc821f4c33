//! The copy and the pin in one pass: what [`Consumer::try_copy`] and [`Consumer::try_pin`] do
//! for the common case — a gating or skip-on-lag reader of a default ring (not never-stall, not
//! a group member, no leaked pin; for a copy, not pin-only) whose next message is complete in
//! its slot — without the general read loop's re-targeting, retries and class dispatch.
//!
//! Each changes nothing that stays changed until it has its message (a refused pin takes its
//! bit back, as in the general read), so when anything is not the common case it returns
//! `None` and the caller runs the general read, which decides everything again. They are built
//! from the general read's pieces: `own_entry` (its generation test), the stamp test of
//! `target`, `copy_slot` (the seqlock copy) or `pin_slot`, and `advance`'s stores.

use super::wait::progress_due;
use super::{entry_if_current, Consumer, Copied, FAST_COPY, FAST_PIN};
use crate::class::DeliveryClass;
use crate::error::ReadError;
use crate::layout::SEQ_LIMIT;
use crate::memory::Memory;
use crate::sync::Ordering;

/// Why a one-pass read did not read (it changed nothing either way).
pub(super) enum Fallback {
    /// Not its case: the general read decides everything again.
    General,
    /// Its case, and the message is not published yet: [`Consumer::not_yet`] answers.
    NotYet,
}

impl<M: Memory> Consumer<M> {
    /// The common case of `try_copy`, or why not (nothing changed).
    #[inline(always)]
    pub(super) fn copy_fast(&mut self, buf: &mut [u8]) -> Result<Copied, Fallback> {
        // Not on a pin-only ring: copies pin there (`copy_pinned_seq`).
        let seq = self.plain_next(FAST_COPY).ok_or(Fallback::General)?;
        // Still registered (the generation check: `entry_if_current`), keeping the entry for
        // the stores below (borrowing only `mem`).
        let e =
            entry_if_current(&self.mem, self.index, self.generation).ok_or(Fallback::General)?;
        let slot = self.mem.geometry().slot_of(seq);
        let hdr = self.mem.slot_header(slot);
        // Acquire: pairs with the producer's Release stamp store that completed message `seq`.
        let s1 = hdr.stamp.load(Ordering::Acquire);
        if s1 < 2 * seq + 2 {
            return Err(Fallback::NotYet);
        }
        // Any other miss (overrun, a short buffer, a corrupt length): the general read decides
        // what it means.
        let (len, meta) = self
            .copy_slot_seen(hdr, slot, seq, s1, buf, Some(e))
            .map_err(|_| Fallback::General)?;
        // `advance`, into the entry checked above (no reclaim happens inside a call).
        // A gating reader publishes now and may release a parked producer; one that does not
        // gate publishes every `PROGRESS_EVERY` reads, and its copy released nothing.
        self.next = seq + 1;
        self.received += 1;
        if self.class == DeliveryClass::Gating {
            self.store_words(e);
            self.wake_producer();
        } else if progress_due(&mut self.unpublished) {
            self.store_words(e);
        }
        Ok(Copied {
            seq,
            len,
            missed: 0,
            meta,
            redelivered: false,
        })
    }

    /// The common case of `try_pin`: the message's sequence, slot and length, pinned (the
    /// caller records the pin), or why not.
    #[inline(always)]
    pub(super) fn pin_fast(&mut self) -> Result<(u64, usize, usize), Fallback> {
        let seq = self.plain_next(FAST_PIN).ok_or(Fallback::General)?;
        // Still registered (the generation check: `entry_if_current`).
        entry_if_current(&self.mem, self.index, self.generation).ok_or(Fallback::General)?;
        let slot = self.mem.geometry().slot_of(seq);
        // `target`'s test, before any pin-line access: only a published message is pinned (an
        // empty poll never touches the slot's state word). Acquire: pairs with the producer's
        // Release stamp store (as `stamp_at_home`).
        let hdr = self.mem.slot_header(slot);
        let stamp = hdr.stamp.load(Ordering::Acquire);
        if stamp != 2 * seq + 2 {
            return Err(if stamp < 2 * seq + 2 {
                Fallback::NotYet
            } else {
                Fallback::General
            });
        }
        let (slot, len) = self
            .pin_slot_at(hdr, seq, slot, true)
            .map_err(|_| Fallback::General)?;
        Ok((seq, slot, len))
    }

    /// A one-pass read found its message's home slot with an older stamp: what the general
    /// read's `target` answers for a gating or skip-on-lag reader then (`Empty`, or the ring's
    /// ending once it is closed), asking for the far end of the message line meanwhile once
    /// the reader waits on an idle producer (`IdlePolls`; "Empty polls" in docs/PROTOCOL.md).
    /// The general read would first check the whole registration; the one-pass read's
    /// generation check is enough (C0g). Out of line: a polling reader's empty polls are the
    /// one-pass read's checks, a call and this.
    #[inline(never)]
    pub(super) fn not_yet(&mut self) -> ReadError {
        // A read that finds nothing leaves the entry exact (`PROGRESS_EVERY`).
        self.flush_progress();
        let seq = self.next;
        if self.idle.waiting(seq) {
            crate::sync::prefetch(self.far_end_of_home(seq));
        }
        self.empty_or_closed(|c| c.stamp_at_home(seq) < 2 * seq + 2)
    }

    /// The next sequence when this read is the common case of both: a reader whose
    /// registration allows the one-pass read `kind` ([`FAST_PIN`] or [`FAST_COPY`] in `fast`:
    /// a gating or skip-on-lag reader (latest-only ones read from `head`) of a default ring,
    /// for a copy not pin-only), not a group member, no leaked pin to take back, and a
    /// sequence in range. The caller then checks the entry is still ours (its generation:
    /// `entry_if_current`; the general read starts with the full `check_registered`).
    ///
    /// The never-stall test (in `fast`) only saves a wasted attempt: there the home slot may
    /// hold another message, and the general read follows the route; but a home slot whose
    /// stamp names `seq` holds that message (stamps are unique per message), so reading it
    /// would be correct too. (The mutation check confirms it: without the test every check
    /// passes.)
    #[inline(always)]
    fn plain_next(&self, kind: u8) -> Option<u64> {
        let seq = self.next;
        // A group member's `fast` is 0 (`join_group`), so this also rules members out.
        if self.fast & kind == 0 || self.held.is_some() || seq >= SEQ_LIMIT {
            return None;
        }
        Some(seq)
    }
}

/// Empty polls in a row for one message after which a one-pass reader counts as waiting on an
/// idle producer rather than streaming right behind a busy one.
///
/// The far-end prefetch of an empty poll (`not_yet`) pays when the producer is idle until the
/// reader's own request is answered: the message's second cache line then crosses while the
/// reader spins, beside the stamp's. Right behind a producer that publishes back to back it
/// costs: each prefetch takes the line back from a producer that is writing it, so the
/// producer's next locked claim waits for it once more. Measured (64 B, `transport-bench`,
/// 60 alternated runs): with the hint on every empty poll, copy throughput 146.5 ns per
/// message; from the second empty poll on, 139.0 ns, round trips unchanged (614.5 against
/// 613.0 ns); with no hint, 141.0 ns and round trips 17 % longer. A streaming reader makes
/// under one empty poll per message on average there, a waiting one about 13.
const STREAMING_POLLS: u32 = 1;

/// How many empty polls in a row a one-pass reader has made for message `seq`. Local to the
/// consumer: nothing in shared memory.
#[derive(Debug, Clone, Copy)]
pub(super) struct IdlePolls {
    seq: u64,
    polls: u32,
}

impl IdlePolls {
    /// No empty poll yet.
    pub(super) const fn new() -> Self {
        IdlePolls {
            seq: u64::MAX,
            polls: 0,
        }
    }

    /// Counts an empty poll for `seq`: whether the reader now waits on an idle producer (more
    /// than [`STREAMING_POLLS`] empty polls in a row for `seq`).
    #[inline(always)]
    pub(super) fn waiting(&mut self, seq: u64) -> bool {
        if self.seq == seq {
            self.polls = self.polls.saturating_add(1);
        } else {
            self.seq = seq;
            self.polls = 1;
        }
        self.polls > STREAMING_POLLS
    }
}

#[cfg(test)]
mod tests {
    use super::{IdlePolls, STREAMING_POLLS};

    #[test]
    fn a_reader_waits_after_more_than_the_streaming_polls_for_one_message() {
        let mut idle = IdlePolls::new();
        for _ in 0..STREAMING_POLLS {
            assert!(!idle.waiting(7), "streaming polls are not waiting");
        }
        assert!(idle.waiting(7));
        assert!(idle.waiting(7));
        // The next message starts the count again.
        for _ in 0..STREAMING_POLLS {
            assert!(!idle.waiting(8));
        }
        assert!(idle.waiting(8));
        // The count saturates rather than wraps back below the threshold.
        let mut long = IdlePolls {
            seq: 3,
            polls: u32::MAX,
        };
        assert!(long.waiting(3));
    }
}
