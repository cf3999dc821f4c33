//! The producer's side of never-stall rings: slots decoupled from sequence numbers.
//!
//! On a ring created with [`Config::with_never_stall`](crate::Config::with_never_stall) the
//! producer writes message `seq` into any slot that no reader pins and no gating consumer or
//! group still needs, and stores in the home slot's (`seq % slots`) route word where it went
//! (docs/PROTOCOL.md, "Never-stall rings"). The choice:
//! 1. the home slot, when nothing holds it and its message is at least a lap old (the common
//!    case: the route then lies in the line the reader reads anyway);
//! 2. otherwise the slot with the oldest message among those nobody pins, never the slot of
//!    the newest message (a latest-only reader always finds the newest), and only below the
//!    gating bound (gating consumers and groups still hold the producer back, by design).
//!
//! So pins of latest-only and skip-on-lag readers make the producer wait only when every slot
//! but the newest is pinned: never while `slots >= pinned + 2`.

use super::Producer;
use crate::consumer::route::{decode, Route};
use crate::error::ClaimError;
use crate::layout::{route_word, SEQ_LIMIT};
use crate::memory::Memory;
use crate::sync::Ordering;

/// How many times a claim picks another slot after a pin won the race for the one it chose.
/// Racing pins can still win every pick: `try_claim` then reports `Pinned` although a slot is
/// free (a retry succeeds); the waiting `claim` retries at once, since `is_claimable` sees the
/// free slot and it does not sleep.
const PICKS: usize = 8;

/// No slot known (the newest message's slot before the first publish).
pub(super) const NO_SLOT: usize = usize::MAX;

impl<M: Memory> Producer<M> {
    /// The message slot `slot` holds, as far as a claim of `seq` cares: `None` when it holds
    /// none (a fresh slot, or an aborted or crashed write's odd stamp) or a stamp from the
    /// future (a scribble: nobody can be reading a message not yet published).
    ///
    /// Acquire: pairs with the Release stamp store of the producer that wrote it (this one,
    /// or a predecessor this one took over from), so the value is that slot's latest message
    /// and never an older one: an older value could let us overwrite a message a gating
    /// consumer still needs.
    fn message_in(&self, slot: usize, seq: u64) -> Option<u64> {
        let stamp = self.mem.slot_header(slot).stamp.load(Ordering::Acquire);
        if stamp == 0 || stamp % 2 == 1 {
            return None;
        }
        Some(stamp / 2 - 1).filter(|&m| m < seq)
    }

    /// Whether every gating consumer and group is done with message `m` (`None`: no message).
    /// Below the cached bound no scan is needed; above it, one scan per claim refreshes it.
    fn gating_done(&mut self, m: Option<u64>, seq: u64, scan: &mut Option<(u64, usize)>) -> bool {
        let Some(m) = m else { return true };
        let n = self.mem.geometry().slots() as u64;
        if m < self.gate_ok_below.saturating_sub(n) {
            return true;
        }
        if scan.is_none() {
            self.prepare_scan(seq);
            let (cursor, consumer) = self.lowest_gating_cursor();
            // A gating consumer this scan did not see joins at a head of at least `seq`
            // (registration handshake): messages below `min(cursor, seq)` are done.
            self.gate_ok_below = cursor.min(seq).saturating_add(n);
            *scan = Some((cursor, consumer));
        }
        m < self.gate_ok_below.saturating_sub(n)
    }

    /// The claim of `seq` on a never-stall ring; returns the claimed slot. Out of line: the
    /// default ring's claim stays as small as it was.
    #[inline(never)]
    pub(super) fn claim_never_stall(&mut self, seq: u64, n: u64) -> Result<usize, ClaimError> {
        let home = self.mem.geometry().slot_of(seq);
        let mut scan = None;
        if home != self.newest_slot {
            let m = self.message_in(home, seq);
            if m.is_none_or(|m| m.saturating_add(n) <= seq)
                && self.gating_done(m, seq, &mut scan)
                && self.claim_cas(home, seq).is_ok()
            {
                return Ok(home);
            }
        }
        for _ in 0..PICKS {
            let Some((slot, m)) = self.oldest_unpinned(seq) else {
                break;
            };
            if !self.gating_done(m, seq, &mut scan) {
                // The oldest message nobody pins is still needed, so every other one is too.
                let (cursor, consumer) = scan.unwrap_or((0, 0));
                return Err(ClaimError::Full { consumer, cursor });
            }
            if self.claim_cas(slot, seq).is_ok() {
                return Ok(slot);
            }
        }
        Err(self.all_pinned(home))
    }

    /// The slot, other than the newest message's, that no reader pins and that holds the
    /// oldest message (or none); `None` when every such slot is pinned or being written.
    fn oldest_unpinned(&self, seq: u64) -> Option<(usize, Option<u64>)> {
        let mut best: Option<(usize, Option<u64>)> = None;
        for slot in 0..self.mem.geometry().slots() {
            // Relaxed: a hint; the claim CAS (Acquire) decides.
            if slot == self.newest_slot
                || self.mem.slot_header(slot).state.load(Ordering::Relaxed) != 0
            {
                continue;
            }
            let m = self.message_in(slot, seq);
            let older = match (best, m) {
                (None, _) => true,
                (Some((_, Some(b))), Some(m)) => m < b,
                (Some((_, Some(_))), None) => true,
                (Some((_, None)), _) => false,
            };
            if older {
                best = Some((slot, m));
                if m.is_none() {
                    break; // Nothing is older than no message.
                }
            }
        }
        best
    }

    /// Every slot but the newest message's is pinned: clears the bits nobody owns in each
    /// (so the next claim finds the slots they wedged) and reports the home slot's readers.
    fn all_pinned(&self, home: usize) -> ClaimError {
        let mut report = None;
        for slot in 0..self.mem.geometry().slots() {
            if slot == self.newest_slot {
                continue;
            }
            // Acquire: as the claim CAS's failure, so the sweep sees a pinner's registration.
            let cur = self.mem.slot_header(slot).state.load(Ordering::Acquire);
            if cur == 0 {
                continue; // Freed meanwhile: the next claim takes it.
            }
            let readers = self.clear_stale_bits(slot, cur);
            if slot == home || report.is_none() {
                report = Some(ClaimError::Pinned { slot, readers });
            }
        }
        report.unwrap_or(ClaimError::Pinned {
            slot: home,
            readers: 0,
        })
    }

    /// Whether a claim would find a slot now (see [`Producer::is_claimable`]).
    pub(super) fn is_claimable_never_stall(&self) -> bool {
        let seq = self.head;
        let n = self.mem.geometry().slots() as u64;
        let mut bound = self.gate_ok_below.saturating_sub(n);
        let mut scanned = false;
        for slot in 0..self.mem.geometry().slots() {
            // Acquire: pairs with the readers' Release unpins, as the claim CAS does.
            if slot == self.newest_slot
                || self.mem.slot_header(slot).state.load(Ordering::Acquire) != 0
            {
                continue;
            }
            let Some(m) = self.message_in(slot, seq) else {
                return true;
            };
            if m >= bound && !scanned {
                bound = self.lowest_gating_cursor().0.min(seq);
                scanned = true;
            }
            if m < bound {
                return true;
            }
        }
        false
    }

    /// After the final stamp of `seq` in `slot`: routes the home slot to it.
    #[inline(never)]
    pub(super) fn route_published(&mut self, seq: u64, slot: usize) {
        let g = self.mem.geometry();
        // Relaxed: a hint readers validate with the slot's stamp, stored (Release) before.
        self.mem
            .slot_header(g.slot_of(seq))
            .route
            .store(route_word(seq, slot), Ordering::Relaxed);
        self.newest_slot = slot;
    }
}

/// At a (re)start on a never-stall ring: moves `head` past the messages a predecessor
/// published (final stamp and route) without storing `head`, and finds the newest message's
/// slot. Returns the new head and that slot ([`NO_SLOT`]: none).
pub(super) fn start_head<M: Memory>(mem: &M, mut head: u64) -> (u64, usize) {
    let g = mem.geometry();
    let n = g.slots() as u64;
    // The slot of message `seq` if it is complete there. Acquire (the stamp): pairs with the
    // predecessor's Release stamp store, so the message is complete for whoever reads `head`
    // after our Release store. Relaxed (the route): the stamp check validates it.
    let complete = |seq: u64| -> Option<usize> {
        let word = mem
            .slot_header(g.slot_of(seq))
            .route
            .load(Ordering::Relaxed);
        match decode(word, seq, g.slots()) {
            Route::At(slot)
                if mem.slot_header(slot).stamp.load(Ordering::Acquire) == 2 * seq + 2 =>
            {
                Some(slot)
            }
            _ => None,
        }
    };
    let start = head;
    while head < SEQ_LIMIT && head - start < n && complete(head).is_some() {
        head += 1;
    }
    let newest = head
        .checked_sub(1)
        .filter(|&s| s < SEQ_LIMIT)
        .and_then(complete)
        .unwrap_or(NO_SLOT);
    (head, newest)
}
