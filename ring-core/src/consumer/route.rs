//! Where message `seq` lives: slot `seq % slots`, or, on a never-stall ring, the slot its home
//! slot's route word names (docs/PROTOCOL.md, "Never-stall rings").
//!
//! Every read path asks here and then checks the slot's stamp exactly as before: the stamp
//! (2·seq+2, written with Release) stays the publication and the only synchronising word; the
//! route is a Relaxed hint that the stamp check validates, so a stale, reused or scribbled route
//! can only make a read report "not yet", an overrun or corruption, never hand over the wrong
//! message.

use super::{Consumer, Miss, ReadError};
use crate::layout::{ROUTE_SLOT_BITS, ROUTE_TAG_MASK};
use crate::memory::Memory;
use crate::sync::Ordering;

/// What a route word says about message `seq`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Route {
    /// The newest message routed through this home slot is `seq`, in this slot.
    At(usize),
    /// The home slot routes an older message (or none): `seq` is not published yet.
    NotYet,
    /// The home slot routes a later message: `seq` was overwritten (or its route was).
    Later,
    /// The route names a slot beyond the table: a peer scribbled it.
    Corrupt,
}

/// Decodes `word` (a route word of `seq`'s home slot) for `seq` on a ring of `slots` slots.
/// The tag is 40 bits of `seq + 1`; a difference below 2^39 is "later", above "not yet" (a
/// reader is never 2^39 messages from a route it reads: the producer rewrites each route every
/// `slots` messages).
#[inline]
pub(crate) fn decode(word: u64, seq: u64, slots: usize) -> Route {
    let tag = word >> ROUTE_SLOT_BITS;
    let d = tag.wrapping_sub(seq.wrapping_add(1)) & ROUTE_TAG_MASK;
    if d != 0 {
        return if d < 1 << 39 {
            Route::Later
        } else {
            Route::NotYet
        };
    }
    let slot = (word & ((1 << ROUTE_SLOT_BITS) - 1)) as usize;
    if slot < slots {
        Route::At(slot)
    } else {
        Route::Corrupt
    }
}

impl<M: Memory> Consumer<M> {
    /// The route of `seq` on a never-stall ring. Relaxed: a hint; the caller validates it with
    /// the named slot's stamp (Acquire), the only word that publishes a message.
    #[inline]
    fn route(&self, seq: u64) -> Route {
        let g = self.mem.geometry();
        let word = self
            .mem
            .slot_header(g.slot_of(seq))
            .route
            .load(Ordering::Relaxed);
        decode(word, seq, g.slots())
    }

    /// The slot message `seq` is in, for a read that already knows it is published (its
    /// stamp or route was seen, or `head` is past it). On a never-stall ring the route may say
    /// it was overwritten since (an overrun); "not yet" after that is a scribble.
    pub(super) fn slot_for(&self, seq: u64) -> Result<usize, Miss> {
        if !self.never_stall {
            return Ok(self.mem.geometry().slot_of(seq));
        }
        match self.route(seq) {
            Route::At(slot) => Ok(slot),
            Route::Later => Err(Miss::Overrun),
            Route::NotYet => Err(Miss::Fatal(ReadError::Corrupt(
                "the route of a published message is behind it",
            ))),
            Route::Corrupt => Err(Miss::Fatal(ReadError::Corrupt(
                "a route names a slot beyond the table",
            ))),
        }
    }

    /// The stamp of the slot message `seq` lives in. Acquire: pairs with the producer's
    /// Release stamp store that published it, so the message (and everything before it) is
    /// visible. On a never-stall ring, a route to an older message reads as stamp 0 ("not
    /// yet") and a route to a later one (or a scribbled one) as `u64::MAX` (an overrun; the
    /// read that follows reports a scribble as corruption).
    pub(super) fn stamp_of(&self, seq: u64) -> u64 {
        if !self.never_stall {
            return self.stamp_at_home(seq);
        }
        match self.route(seq) {
            // Acquire: as above.
            Route::At(slot) => self.mem.slot_header(slot).stamp.load(Ordering::Acquire),
            Route::NotYet => 0,
            Route::Later | Route::Corrupt => u64::MAX,
        }
    }

    /// The last word of slot `seq % slots`'s message line: on x86_64 the message line spans
    /// two cache lines and the stamp is in the first, so a small message past its first 32
    /// bytes lies (partly) in the line this word is in.
    #[inline(always)]
    pub(super) fn far_end_of_home(&self, seq: u64) -> &crate::sync::AtomicU64 {
        let slot = self.mem.geometry().slot_of(seq);
        let inline = &self.mem.slot_header(slot).inline;
        &inline[inline.len() - 1]
    }

    /// The stamp of slot `seq % slots` (a default ring's slot of `seq`). Acquire: as in
    /// [`stamp_of`](Self::stamp_of).
    #[inline(always)]
    pub(super) fn stamp_at_home(&self, seq: u64) -> u64 {
        let slot = self.mem.geometry().slot_of(seq);
        self.mem.slot_header(slot).stamp.load(Ordering::Acquire)
    }
}

#[cfg(test)]
mod tests {
    use super::{decode, Route};
    use crate::layout::route_word;

    #[test]
    fn a_route_word_decodes_to_its_slot_only_for_its_own_sequence() {
        let w = route_word(41, 3);
        assert_eq!(decode(w, 41, 8), Route::At(3));
        assert_eq!(decode(w, 42, 8), Route::NotYet);
        assert_eq!(decode(w, 49, 8), Route::NotYet);
        assert_eq!(decode(w, 40, 8), Route::Later);
        assert_eq!(decode(w, 33, 8), Route::Later);
        // Slot 3 does not exist in a 2-slot ring.
        assert_eq!(decode(w, 41, 2), Route::Corrupt);
        // A fresh ring: no message routed yet.
        assert_eq!(decode(0, 0, 8), Route::NotYet);
        assert_eq!(decode(0, 7, 8), Route::NotYet);
        // The 40-bit tag wraps without confusing neighbours.
        let far = (1u64 << 40) - 1;
        assert_eq!(decode(route_word(far, 1), far, 8), Route::At(1));
        assert_eq!(decode(route_word(far, 1), far + 1, 8), Route::NotYet);
        assert_eq!(decode(route_word(far + 1, 1), far, 8), Route::Later);
    }
}
