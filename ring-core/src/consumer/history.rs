//! History for late joiners: a skip-on-lag consumer that starts some messages back.
//!
//! A consumer starts at the head (a latest-only one at the newest message present). A
//! skip-on-lag consumer may instead start up to `n` messages back, as far as the ring still
//! holds them ([`Consumer::rewind`]), before its first read: it then reads them in order, and
//! the read path's own overrun handling counts any that are overwritten meanwhile as missed.
//! It needs nothing from the producer (a skip-on-lag reader gates nothing), which is why a
//! gating consumer cannot rewind: its cursor is the producer's gate, and the producer's
//! cached bound assumes a gating cursor never starts below the head it scanned.

use super::{Consumer, ReadError};
use crate::class::DeliveryClass;
use crate::layout::SEQ_LIMIT;
use crate::memory::Memory;
use crate::sync::Ordering;

impl<M: Memory> Consumer<M> {
    /// Starts this skip-on-lag consumer up to `n` messages back from where it joined, as far
    /// back as the ring still holds messages (`slots` at most): iceoryx2's history for a late
    /// joiner. Returns how many messages back it now starts. Call it before the first read.
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
    /// [`ReadError::NotSupported`] for a gating or latest-only consumer, or after this consumer
    /// read (or skipped) anything; [`ReadError::Evicted`]; [`ReadError::Corrupt`] when the
    /// published head is impossible.
    pub fn rewind(&mut self, n: u64) -> Result<u64, ReadError> {
        match self.class {
            DeliveryClass::SkipOnLag => {}
            DeliveryClass::Gating => {
                return Err(ReadError::NotSupported(
                    "a gating consumer cannot start back: its cursor is the producer's gate",
                ))
            }
            DeliveryClass::LatestOnly => {
                return Err(ReadError::NotSupported(
                    "a latest-only consumer already starts at the newest message present",
                ))
            }
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
        self.next = start;
        // The entry's cursor shows where it stands (it gates nothing); no wake-up needed.
        self.publish_progress(false);
        Ok(back)
    }
}
