//! The copy in one pass: what [`Consumer::try_copy`] does for the common case — a gating or
//! skip-on-lag reader of a default ring (not pin-only, not never-stall, not a group member, no
//! leaked pin) whose next message is complete in its slot — without the general read loop's
//! re-targeting, retries and class dispatch.
//!
//! It changes nothing until it has a whole, validated copy, so when anything is not the common
//! case it returns `None` and `try_copy` runs the general read, which decides everything again.
//! It is built from the general read's pieces: `check_registered`, `copy_slot` (the seqlock
//! copy) and `advance`.

use super::{Consumer, Copied};
use crate::class::DeliveryClass;
use crate::layout::SEQ_LIMIT;
use crate::memory::Memory;

impl<M: Memory> Consumer<M> {
    /// The common case of `try_copy`, or `None` (nothing changed) for the general read.
    #[inline(always)]
    pub(super) fn copy_fast(&mut self, buf: &mut [u8]) -> Option<Copied> {
        let seq = self.next;
        let geometry = self.mem.geometry();
        if self.class == DeliveryClass::LatestOnly
            || self.never_stall
            || self.member.is_some()
            || self.held.is_some()
            || seq >= SEQ_LIMIT
            || geometry.config().pin_only
        {
            return None;
        }
        self.check_registered().ok()?;
        // Any miss (not published yet, overrun, a short buffer, a corrupt length): the general
        // read decides what it means.
        let (len, meta) = self.copy_slot(seq, geometry.slot_of(seq), buf).ok()?;
        self.advance(seq, false);
        Some(Copied {
            seq,
            len,
            missed: 0,
            meta,
            redelivered: false,
        })
    }
}
