//! History for late joiners: a consumer that starts some messages back.
//!
//! A consumer starts at the head (a latest-only one at the newest message present). A gating or
//! skip-on-lag consumer may instead start up to `n` messages back, as far as the ring still
//! holds them ([`Consumer::rewind`], or every registration on a ring created with
//! [`Config::with_history`](crate::Config::with_history)), before its first read: it then
//! reads them in order, and the read path's own overrun handling counts any that are
//! overwritten meanwhile as missed.
//!
//! A skip-on-lag reader gates nothing, so this needs nothing from the producer. A gating
//! reader's cursor is the producer's gate, but the producer caches its gate: a bound computed
//! before this consumer joined may let it overwrite any message below the head the consumer
//! joined at (never one at or above it: the registration handshake). So below that head
//! (`gate_from`) a rewound gating consumer reads like a skip-on-lag one: its pins set its
//! reader bit (the claim CAS keeps the producer off a pinned slot), copies use the seqlock,
//! and a message overwritten before it got there is counted as missed. From its join head on
//! it is lossless, as every gating consumer.

use super::{Consumer, ReadError};
use crate::class::DeliveryClass;
use crate::layout::SEQ_LIMIT;
use crate::memory::Memory;
use crate::sync::Ordering;

impl<M: Memory> Consumer<M> {
    /// Starts this gating or skip-on-lag consumer up to `n` messages back from where it joined,
    /// as far back as the ring still holds messages (`slots` at most): iceoryx2's history for a
    /// late joiner. Returns how many messages back it now starts. Call it before the first
    /// read. A gating consumer is lossless from where it joined; of the history before it, a
    /// message overwritten before it was read is counted in [`missed`](Self::missed).
    ///
    /// ```
    /// use ring_core::{Config, Consumer, DeliveryClass, HeapSegment, OwnerId, Producer};
    /// let id = |n| OwnerId::new(n).unwrap();
    /// let seg = HeapSegment::new(&Config::new(4, 16), id(1)).unwrap();
    /// let mut producer = Producer::new(&seg, id(1)).unwrap();
    /// for i in 0..6u8 {
    ///     producer.try_publish(&[i]).unwrap();
    /// }
    /// let mut late = Consumer::new(&seg, DeliveryClass::SkipOnLag, id(2)).unwrap();
    /// assert_eq!(late.rewind(3)?, 3); // messages 3, 4 and 5 are still there
    /// let mut buf = [0u8; 16];
    /// assert_eq!(late.try_copy(&mut buf)?.seq, 3);
    /// # Ok::<(), ring_core::ReadError>(())
    /// ```
    ///
    /// # Errors
    /// [`ReadError::NotSupported`] for a latest-only consumer or a group member, or after this
    /// consumer read (or skipped) anything; [`ReadError::Evicted`]; [`ReadError::Corrupt`] when
    /// the published head is impossible.
    pub fn rewind(&mut self, n: u64) -> Result<u64, ReadError> {
        if self.member.is_some() {
            return Err(ReadError::NotSupported(
                "a group member reads from its group's cursor",
            ));
        }
        if self.class == DeliveryClass::LatestOnly {
            return Err(ReadError::NotSupported(
                "a latest-only consumer already starts at the newest message present",
            ));
        }
        if self.received != 0 || self.missed_total != 0 || self.holds() != 0 {
            return Err(ReadError::NotSupported(
                "history is for a consumer that has not read yet",
            ));
        }
        self.check_registered()?;
        // Acquire: pairs with the producer's Release `head` store (P7), as every read's.
        let head = self.mem.producer_line().head.load(Ordering::Acquire);
        if head >= SEQ_LIMIT {
            return Err(ReadError::Corrupt(
                "the published head is beyond the sequence range",
            ));
        }
        let oldest = head.saturating_sub(self.mem.geometry().slots() as u64);
        let start = self.next.min(head).saturating_sub(n).max(oldest);
        let back = self.next.saturating_sub(start);
        if self.class == DeliveryClass::Gating && back > 0 {
            // Below the head we joined at, the producer's cached gate may not cover us: pin
            // with the reader bit there (`Consumer::pins`).
            self.gate_from = self.next;
            // Unless no copy is protected (never-stall): from here on, as `pins` says.
            self.guarded_from = self.guarded_from.max(self.next);
        }
        self.next = start;
        // The entry's cursor shows where it stands (a skip-on-lag reader gates nothing; a
        // gating one holds the producer back from here once it rescans); no wake-up needed.
        self.publish_progress(false);
        Ok(back)
    }
}
