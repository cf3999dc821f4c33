//! Publishing: one message or a batch, the announce that wakes parked readers, and the end of
//! the stream (close, abort, drop).

use super::fast::StepError;
use super::Producer;
use crate::error::ClaimError;
use crate::layout::{ProducerLine, ABORT_CODE_SHIFT, FLAG_ABORTED, FLAG_CLOSED};
use crate::memory::Memory;
use crate::sync::{fence, Ordering};

impl<M: Memory> Producer<M> {
    /// Claims, writes `data` and publishes it in one call. Returns the message's sequence.
    ///
    /// # Errors
    /// As [`try_claim`](Self::try_claim), and [`ClaimError::TooLarge`] (nothing claimed) when
    /// `data` does not fit in a slot.
    // Inlined into the caller: the one-pass path then costs no call, no frame of its own and
    // no result in memory; the general path stays out of line.
    #[inline(always)]
    pub fn try_publish(&mut self, data: &[u8]) -> Result<u64, ClaimError> {
        self.try_publish_with_meta(data, [0; 2])
    }

    /// [`try_publish`](Self::try_publish) with the message's two metadata words (what
    /// [`WriteSlot::set_meta`](super::WriteSlot::set_meta) sets on a claimed slot, and
    /// [`Copied::meta`](crate::Copied) and `Pinned::meta` read back): the same one-pass
    /// publish, with `meta` stored beside the length.
    ///
    /// # Errors
    /// As `try_publish`.
    ///
    /// # Examples
    ///
    /// ```
    /// use ring_core::{Config, Consumer, DeliveryClass, HeapSegment, OwnerId, Producer};
    /// let seg = HeapSegment::new(&Config::new(4, 64), OwnerId::new(1).unwrap()).unwrap();
    /// let mut producer = Producer::new(&seg, OwnerId::new(1).unwrap()).unwrap();
    /// let mut consumer =
    ///     Consumer::new(&seg, DeliveryClass::Gating, OwnerId::new(2).unwrap()).unwrap();
    /// let frame_no = 7;
    /// producer.try_publish_with_meta(b"frame", [frame_no, 1_700_000_000]).unwrap();
    /// let mut buf = [0u8; 64];
    /// let got = consumer.try_copy(&mut buf).unwrap();
    /// assert_eq!((&buf[..got.len], got.meta), (&b"frame"[..], [7, 1_700_000_000]));
    /// ```
    #[inline(always)]
    pub fn try_publish_with_meta(
        &mut self,
        data: &[u8],
        meta: [u64; 2],
    ) -> Result<u64, ClaimError> {
        match self.publish_fast(data, meta) {
            Some(seq) => Ok(seq),
            None => self.publish_general(data, meta),
        }
    }

    /// `try_publish_with_meta` in every case (out of line: the common case above keeps a small
    /// frame).
    #[inline(never)]
    fn publish_general(&mut self, data: &[u8], meta: [u64; 2]) -> Result<u64, ClaimError> {
        self.check_fits(data.len())?;
        let mut slot = self.try_claim()?;
        slot.fill(data);
        slot.set_meta(meta);
        slot.publish()
    }

    pub(super) fn check_fits(&self, len: usize) -> Result<(), ClaimError> {
        let capacity = self.mem.geometry().slot_capacity();
        if len > capacity {
            return Err(ClaimError::TooLarge { len, capacity });
        }
        Ok(())
    }

    /// Publishes `msgs` in order, one slot each, with one `head` store and one wake-up check
    /// for the whole batch. Returns how many were published: all of them, or the prefix that
    /// fit before a claim failed (a gating consumer or a pin holds the next slot).
    ///
    /// Consumers that follow the slots see each message as soon as its stamp is final, before
    /// the batch ends.
    ///
    /// # Errors
    /// [`ClaimError::TooLarge`] (nothing published) when any message does not fit in a slot;
    /// the error of the first claim when not even one message could be published;
    /// [`ClaimError::Displaced`] when another producer took over meanwhile.
    ///
    /// # Examples
    ///
    /// ```
    /// use ring_core::{Config, Consumer, DeliveryClass, HeapSegment, OwnerId, Producer};
    /// let seg = HeapSegment::new(&Config::new(4, 64), OwnerId::new(1).unwrap()).unwrap();
    /// let mut tx = Producer::new(&seg, OwnerId::new(1).unwrap()).unwrap();
    /// let mut rx = Consumer::new(&seg, DeliveryClass::Gating, OwnerId::new(2).unwrap()).unwrap();
    /// // Four slots and a gating reader: the fifth message does not fit yet.
    /// assert_eq!(tx.try_publish_batch(&[b"a", b"b", b"c", b"d", b"e"]).unwrap(), 4);
    /// let mut seen = Vec::new();
    /// assert_eq!(rx.try_read_batch(8, |m| seen.push(m.bytes().to_vec())).unwrap(), 4);
    /// assert_eq!(seen, [b"a", b"b", b"c", b"d"]);
    /// ```
    pub fn try_publish_batch<T: AsRef<[u8]>>(&mut self, msgs: &[T]) -> Result<usize, ClaimError> {
        for m in msgs {
            self.check_fits(m.as_ref().len())?;
        }
        // The checks that hold for the whole call (displaced, closed), once: the first claim's
        // error when they fail, as a claim would report it (an empty batch claims nothing).
        if !msgs.is_empty() {
            self.call_checks(self.mem.producer_line())?;
        }
        let mut published = 0;
        for m in msgs {
            let data: &[u8] = m.as_ref();
            // The common case in one pass (as `try_publish`, without the announce), else the
            // claim API.
            let step = match self.fast_seq(data) {
                Some(seq) => self
                    .publish_step(seq, data, [0; 2])
                    .map(|()| seq + 1)
                    .map_err(StepError::Claim),
                None => self.batch_step(data),
            };
            match step {
                Ok(next) => self.head = next,
                Err(StepError::Claim(e)) if published == 0 => return Err(e),
                Err(StepError::Claim(_)) => break,
                Err(StepError::Seal(e)) => return Err(e),
            }
            published += 1;
        }
        if published > 0 {
            self.announce();
        }
        Ok(published)
    }

    /// One message of a batch through the claim API (any ring, any case); returns the local
    /// `head` after it (`finish` has set it).
    #[inline(never)]
    fn batch_step(&mut self, data: &[u8]) -> Result<u64, StepError> {
        let slot = self.claim_slot().map_err(StepError::Claim)?;
        let mut w = self.write_slot(slot);
        w.fill(data);
        // `finish` set the local `head` to `seq + 1` already.
        w.finish().map(|seq| seq + 1).map_err(StepError::Seal)
    }

    /// Makes every finished message visible to `head` readers and wakes parked consumers: one
    /// `head` store, one SeqCst fence and one load of the waiter count, for one message or a
    /// batch.
    pub(super) fn announce(&mut self) {
        self.fenced = self.announce_in(self.mem.producer_line());
        self.stored_head = self.head;
    }

    /// [`announce`](Self::announce)'s stores, fence and wake-up, with `line`, this ring's
    /// producer line, already looked up; the caller then records what it did (`stored_head`
    /// is `head`; `fenced` is the returned value: whether the fence was a full one), which
    /// `announce` does.
    #[inline(always)]
    pub(super) fn announce_in(&self, line: &ProducerLine) -> bool {
        // Release: pairs with consumers' Acquire `head` loads (latest-only reads, lagging
        // readers, registration): every message below it is complete.
        line.head.store(self.head, Ordering::Release);
        // The light side of the Dekker handshake with parking consumers (they bump
        // `consumer_waiters`, run the heavy fence, then re-check their slot's stamp or `head`):
        // either they see our stamps and `head` now, or we see them counted below and wake
        // them. A SeqCst fence by default; a compiler fence where the memory pairs it with
        // `membarrier(2)` ("Asymmetric fences" in PROTOCOL.md). When it was a full fence it is
        // also the registration handshake's fence of the next claim (the returned `fenced`).
        let full = self.mem.light_fence();
        // Relaxed: ordered by the fence pair.
        if line.consumer_waiters.load(Ordering::Relaxed) != 0 {
            // Release: pairs with a waiter's Acquire load of the futex word. A bump, never a
            // store of a value derived from `head`: the word only moves forward (see the
            // layout). Only when someone parks, so the control line stays unwritten while
            // consumers poll.
            line.publish_futex.fetch_add(1, Ordering::Release);
            self.mem.notify(&line.publish_futex);
        }
        full
    }
}

impl<M: Memory> Producer<M> {
    /// Closes the ring: no more messages. Consumers read what is still readable, then get
    /// [`ReadError::Closed`](crate::ReadError::Closed). Unread messages of latest-only and
    /// skip-on-lag consumers may still be overwritten by nothing (no more writes), so they stay
    /// readable until the segment is destroyed.
    ///
    /// A displaced producer (see [`take_over`](Self::take_over)) closes nothing: the ring is
    /// its successor's. Closing marks the stream *finished*; a producer dropped without closing
    /// marks it aborted (see [`abort`](Self::abort)). The first close or abort wins.
    pub fn close(&mut self) {
        self.end(FLAG_CLOSED);
    }

    /// Closes the ring as *aborted* with `code`: consumers read what is there, then get
    /// [`ReadError::Aborted`](crate::ReadError::Aborted) instead of `Closed`, so nobody
    /// downstream mistakes a failed stream for a complete one. Dropping the producer without
    /// closing aborts with code 0.
    pub fn abort(&mut self, code: u16) {
        self.end(FLAG_CLOSED | FLAG_ABORTED | (u32::from(code) << ABORT_CODE_SHIFT));
    }

    /// True once this producer closed or aborted the ring.
    pub fn is_closed(&self) -> bool {
        // Relaxed: only the producer writes `flags`.
        self.mem.producer_line().flags.load(Ordering::Relaxed) & FLAG_CLOSED != 0
    }

    pub(super) fn end(&mut self, flags: u32) {
        if self.is_displaced() || self.is_closed() {
            return;
        }
        let line = self.mem.producer_line();
        // Release: pairs with consumers' Acquire load of `flags`, after which they re-load `head`
        // and see every message published before the close.
        line.flags.fetch_or(flags, Ordering::Release);
        self.wake_consumers();
    }

    pub(super) fn wake_consumers(&self) {
        let line = self.mem.producer_line();
        // Release: pairs with a waiter's Acquire load of the futex word.
        line.publish_futex.fetch_add(1, Ordering::Release);
        fence(Ordering::SeqCst);
        // Relaxed: ordered by the fence (Dekker handshake with `Consumer::wait_ready`).
        if line.consumer_waiters.load(Ordering::Relaxed) != 0 {
            self.mem.notify(&line.publish_futex);
        }
    }
}

/// Dropping the producer ends the stream — as *aborted* (code 0) unless [`Producer::close`] ran
/// first, so a producer that unwinds or bails out early is never mistaken for one that finished
/// — and releases the producer line, so a new producer may start (which reopens it).
impl<M: Memory> Drop for Producer<M> {
    fn drop(&mut self) {
        if self.is_displaced() {
            return; // The ring is the successor's: leave its owner word alone.
        }
        self.abort(0);
        let line = self.mem.producer_line();
        // Release: pairs with the next producer's Acquire owner CAS, which then sees our head.
        let _ =
            line.owner
                .compare_exchange(self.owner.get(), 0, Ordering::Release, Ordering::Relaxed);
    }
}
