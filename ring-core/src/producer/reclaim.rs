//! Reclaiming a dead consumer's entry: its pins, its gating cursor, a group member's claims.

use super::{LostReader, LostReaders, Producer, Reclaimed};
use crate::class::DeliveryClass;
use crate::error::Error;
use crate::layout::{CLASS_GROUP, CONSUMER_FREE, CONSUMER_RECLAIMING};
use crate::memory::Memory;
use crate::owner::OwnerId;
use crate::sync::Ordering;

impl<M: Memory> Producer<M> {
    /// Clears everything a dead consumer held: its pin in every slot and its table entry
    /// (so its gating cursor no longer holds the ring back), and gives back its count in the
    /// consumer-waiters word if it died parked. Idempotent.
    ///
    /// The entry's generation moves on first, so the reclaimed consumer, should it still run,
    /// gets [`ReadError::Evicted`](crate::ReadError::Evicted) from every later call and writes
    /// nothing to shared state again — not even into a consumer that registers into the same
    /// entry later with the same owner id. `expected` must be the entry's owner, so a new
    /// consumer that took the entry meanwhile is left alone.
    ///
    /// `ring-os` offers the safe form: it reclaims only entries whose liveness lock the kernel
    /// released.
    ///
    /// # Safety
    /// The consumer registered in entry `index` is not inside a call on this ring, holds no
    /// [`Pinned`](crate::Pinned) and no borrow of a held message's bytes
    /// ([`Consumer::held_bytes`](crate::Consumer::held_bytes), `held_words`) (a dead process
    /// holds none). Clearing a live pin would let the next claim rewrite bytes behind its
    /// `&[u8]`. A consumer reclaimed while it was alive (a wrong verdict that keeps to this
    /// contract) is fenced: every later call is refused with `Evicted` and its holds lend no
    /// bytes any more.
    ///
    /// Safe code cannot reach it (the old safe `reclaim` let a live `Pinned`'s bytes be
    /// rewritten):
    ///
    /// ```compile_fail,E0133
    /// use ring_core::{Config, HeapSegment, OwnerId, Producer};
    /// let seg = HeapSegment::new(&Config::new(2, 16), OwnerId::new(1).unwrap()).unwrap();
    /// let mut p = Producer::new(&seg, OwnerId::new(1).unwrap()).unwrap();
    /// let _ = p.reclaim(0, OwnerId::new(2).unwrap()); // error[E0133]: requires unsafe
    /// ```
    ///
    /// # Errors
    /// [`Error::NoSuchConsumer`], [`Error::OwnerMismatch`].
    pub unsafe fn reclaim(&mut self, index: usize, expected: OwnerId) -> Result<Reclaimed, Error> {
        // Relaxed: the class is only reported (and validated: a scribbled value reads as None).
        let class = (index < self.mem.geometry().consumers())
            .then(|| self.mem.consumer_entry(index).class.load(Ordering::Relaxed))
            .and_then(DeliveryClass::from_u32);
        // SAFETY: the caller's promise is `reclaim`'s.
        let r = unsafe { reclaim(&self.mem, index, expected) }?;
        if r.was_registered {
            self.lost.record(LostReader {
                reclaimed: r,
                class,
                published: self.head,
            });
        }
        Ok(r)
    }

    /// The readers this producer reclaimed because their holders died without leaving (a
    /// reader that finished leaves its entry and is not counted): how many, how many of them
    /// gated the stream, the last one and the first gating one that died with messages unread.
    /// A publisher that must not lose data checks `first_gating_unread` before it reports
    /// success.
    pub fn lost_readers(&self) -> LostReaders {
        self.lost
    }

    /// Information about consumer-table entry `index` (None beyond the table).
    pub fn consumer_info(&self, index: usize) -> Option<crate::ConsumerInfo> {
        crate::inspect::consumer_info(&self.mem, index)
    }
}

impl LostReaders {
    fn record(&mut self, lost: LostReader) {
        self.total += 1;
        if lost.class == Some(DeliveryClass::Gating) {
            self.gating += 1;
            if lost.unread() > 0 && self.first_gating_unread.is_none() {
                self.first_gating_unread = Some(lost);
            }
        }
        self.last = Some(lost);
    }
}

/// Reclaims consumer entry `index` (see [`Producer::reclaim`]).
///
/// # Safety
/// As [`Producer::reclaim`].
pub(crate) unsafe fn reclaim<M: Memory + ?Sized>(
    mem: &M,
    index: usize,
    expected: OwnerId,
) -> Result<Reclaimed, Error> {
    if index >= mem.geometry().consumers() {
        return Err(Error::NoSuchConsumer { index });
    }
    let e = mem.consumer_entry(index);
    // Acquire: pairs with the consumer's Release stores (cursor, unpins, FREE) in case it got
    // that far before dying.
    let owner = e.owner.load(Ordering::Acquire);
    let nothing = Reclaimed {
        index,
        owner,
        pins_cleared: 0,
        cursor: 0,
        was_registered: false,
    };
    if owner == 0 {
        // Nobody holds the entry (it was never taken, or already reclaimed): idempotent.
        return Ok(nothing);
    }
    if owner != expected.get() {
        return Err(Error::OwnerMismatch { found: owner });
    }
    // Relaxed: written before the entry's owner became `owner` (ordered by the Acquire above).
    if e.class.load(Ordering::Relaxed) == CLASS_GROUP {
        // A group's record belongs to the ring, not to a process: no verdict reclaims it.
        return Ok(nothing);
    }
    // Fence the victim out first: its every later call compares this word. Success AcqRel:
    // Acquire orders us after the registration's bump; Release orders the bump before our
    // clearing below for anyone who reads it. Failure: a concurrent registration or reclaim
    // changed the entry: it is not the one the caller judged dead.
    // Relaxed load: the CAS validates it.
    let generation = e.generation.load(Ordering::Relaxed);
    if e.generation
        .compare_exchange(
            generation,
            generation.wrapping_add(1),
            Ordering::AcqRel,
            Ordering::Relaxed,
        )
        .is_err()
        // Acquire: as the first owner load.
        || e.owner.load(Ordering::Acquire) != owner
    {
        return Err(Error::OwnerMismatch { found: owner });
    }
    // A group member's unfinished messages go to another member; when the group's queue has
    // no room yet, the entry stays as it is (still gating) and a later reclaim moves them.
    super::group::hand_claims_to_group(mem, e)?;
    // Relaxed: ordered before others' view by the Release store of FREE below.
    e.ready.store(0, Ordering::Relaxed);
    // Whatever state the consumer died in (FREE right after it claimed the owner word, JOINING,
    // ACTIVE, or a corrupt value), the entry becomes RECLAIMING. Relaxed: ordered by the owner
    // load above; the producer is the only reclaimer.
    e.state.store(CONSUMER_RECLAIMING, Ordering::Relaxed);
    let bit = 1u64 << index;
    let mut pins_cleared = 0;
    for i in 0..mem.geometry().slots() {
        // Release: a pin cleared here hands the slot to the producer, whose claim CAS
        // (Acquire) pairs with it. The dead consumer makes no further reads.
        let prev = mem.slot_header(i).state.fetch_and(!bit, Ordering::Release);
        if prev & bit != 0 {
            pins_cleared += 1;
        }
    }
    // Relaxed: read for the report.
    let cursor = e.cursor.load(Ordering::Relaxed);
    let line = mem.producer_line();
    // A consumer that died parked still counts in `consumer_waiters` (every publish would make
    // a wake syscall for it forever): give its count back. Relaxed: the count only decides
    // whether a publisher calls wake, and an over-count is harmless.
    if e.parked.swap(0, Ordering::Relaxed) != 0 {
        // A decrement that never goes below zero (a peer may have scribbled the count); the
        // loop ends because every retry saw the count change, at most a few times in practice,
        // and is bounded anyway: giving up leaves an over-count.
        for _ in 0..crate::READ_RETRIES {
            let n = line.consumer_waiters.load(Ordering::Relaxed);
            if n == 0
                || line
                    .consumer_waiters
                    .compare_exchange(n, n - 1, Ordering::Relaxed, Ordering::Relaxed)
                    .is_ok()
            {
                break;
            }
        }
    }
    // Release: the entry stops gating; pairs with the producer's Acquire state loads.
    e.state.store(CONSUMER_FREE, Ordering::Release);
    // Release: pairs with the next registrant's Acquire owner CAS, which then sees FREE and
    // no pins of this index anywhere.
    e.owner.store(0, Ordering::Release);
    // A producer held back by this consumer re-checks: bump the drain word.
    line.drain_futex.fetch_add(1, Ordering::Release);
    mem.notify(&line.drain_futex);
    Ok(Reclaimed {
        index,
        owner,
        pins_cleared,
        cursor,
        was_registered: true,
    })
}
