//! Progress and waiting: publishing the cursor, waking a parked producer, blocking reads, and
//! leaving (the consumer's drop).

use super::{Consumer, Copied, Pinned};
use crate::class::DeliveryClass;
use crate::error::ReadError;
use crate::layout::{ConsumerEntry, CONSUMER_FREE, SEQ_LIMIT};
use crate::memory::Memory;
use crate::sync::Ordering;
use crate::wait::WaitStrategy;

/// Reads a consumer that does not gate (skip-on-lag, latest-only) makes between two
/// publications of its cursor and statistics to its consumer-table entry.
///
/// Nobody waits for such a consumer's cursor: the producer's gating scan skips it, and what
/// its pins hold back is in the slots' state words, released by every unpin. Its entry's
/// cursor, `received` and `missed` are for inspection (`ring_core::inspect`, `ringctl
/// inspect`) and for the report of a reclaim. So a one-message read stores them only every
/// `PROGRESS_EVERY` reads, and always when a read finds nothing (or fails), before the
/// consumer parks in a blocking read, and at the end of a batch or a hold: an idle or waiting
/// consumer's entry is exact, a streaming one's is at most `PROGRESS_EVERY - 1` reads behind
/// its own [`Consumer::cursor`]. A gating consumer publishes on every read (its cursor is
/// what the producer waits for).
pub const PROGRESS_EVERY: u32 = 32;

/// Counts one read of a consumer that does not gate: true when its progress is due
/// (`PROGRESS_EVERY` reads since the last publication; the count starts again), false when it
/// stays local for now. A field, not `&mut Consumer`: the one-pass reads call it while they
/// hold their entry (a borrow of `mem`).
#[inline(always)]
pub(super) fn progress_due(unpublished: &mut u32) -> bool {
    *unpublished += 1;
    if *unpublished < PROGRESS_EVERY {
        return false;
    }
    *unpublished = 0;
    true
}

impl<M: Memory> Consumer<M> {
    /// Marks copy `seq` consumed (a copy released no pin): the local cursor, then the shared
    /// cursor and a producer wake at once for a gating consumer, the shared cursor every
    /// [`PROGRESS_EVERY`] reads otherwise (`Pinned`'s drop does the same for a pin).
    pub(super) fn advance(&mut self, seq: u64) {
        self.next = seq + 1;
        self.received += 1;
        if self.class != DeliveryClass::Gating && !progress_due(&mut self.unpublished) {
            return;
        }
        self.publish_progress(false);
    }

    /// Publishes the local cursor and statistics to the entry now (after a read of a gating
    /// consumer, a batch, a hold, a rewind, or to flush deferred progress), then wakes a
    /// parked producer if `unpinned` or gating.
    #[inline]
    pub(super) fn publish_progress(&mut self, unpinned: bool) {
        self.unpublished = 0;
        let Ok(e) = self.own_entry() else {
            return; // Reclaimed: the entry is not ours to write.
        };
        self.store_progress(e, unpinned);
    }

    /// Publishes the progress a consumer that does not gate deferred (`PROGRESS_EVERY`), if
    /// any: a read that found nothing, or a wait about to park, leaves the entry exact.
    #[inline(always)]
    pub(super) fn flush_progress(&mut self) {
        if self.unpublished != 0 {
            self.publish_deferred();
        }
    }

    /// The store of [`flush_progress`](Self::flush_progress), out of line: it runs once per
    /// idle spell (the count is 0 after it), and inlined into the read loops it costs the
    /// batch read's loop registers (5 instructions per message, `benches/icount.sh`).
    #[cold]
    #[inline(never)]
    fn publish_deferred(&mut self) {
        self.publish_progress(false);
    }

    /// `publish_progress` into entry `e`, which the caller checked is still ours earlier in
    /// this same call (no reclaim happens inside a call: the reclaim contract).
    #[inline(always)]
    pub(super) fn store_progress(&self, e: &ConsumerEntry, unpinned: bool) {
        self.store_words(e);
        // The producer waits only for gating cursors and pins: a copy read by a non-gating
        // consumer can release nothing it waits for, so it skips the fence and the check.
        if unpinned || self.class == DeliveryClass::Gating {
            self.wake_producer();
        }
    }

    /// The stores of [`store_progress`](Self::store_progress): cursor, `received`, `missed`.
    #[inline(always)]
    pub(super) fn store_words(&self, e: &ConsumerEntry) {
        // Release: pairs with the producer's Acquire cursor load in its gating scan, so that a
        // `wait_drained` that sees this cursor returns after our reads up to it (and whatever we
        // did while they were pinned). The overwrite of a slot is ordered by the unpin (pins) or
        // refused by the seqlock re-check (copies) already.
        e.cursor.store(self.shared_cursor(), Ordering::Release);
        // Relaxed: statistics for inspection.
        e.received.store(self.received, Ordering::Relaxed);
        e.missed.store(self.missed_total, Ordering::Relaxed);
    }

    #[inline]
    pub(super) fn wake_producer(&self) {
        wake_producer(&self.mem);
    }

    /// True when a read would find a message (or the ring closed), by delivery class.
    pub(super) fn ready(&self) -> bool {
        if let Some(m) = &self.member {
            return self.member_ready(m);
        }
        // Anything but `Empty` is ready: a message, `Closed`, or an error the read will report.
        !matches!(self.target(), Err(ReadError::Empty))
    }

    /// Before parking: a consumer that follows the slot reads `Empty` while its slot's stamp
    /// says "not yet"; if `head` says the message was published, a peer scribbled the stamp,
    /// and waiting would only time out. (Non-blocking reads do not look at `head` on an empty
    /// poll, so they report `Empty` for such a slot.)
    pub(super) fn check_stamp_not_behind_head(&self) -> Result<(), ReadError> {
        if self.class == DeliveryClass::LatestOnly || self.member.is_some() {
            return Ok(()); // It reads from `head` (or its group's cursor) already.
        }
        // Acquire: pairs with the producer's Release `head` store, which follows the stamp
        // store of every message below it: the re-load below sees their final stamps.
        let head = self.mem.producer_line().head.load(Ordering::Acquire);
        if self.next < head && self.next < SEQ_LIMIT && self.stamp_of(self.next) < 2 * self.next + 2
        {
            return Err(ReadError::Corrupt(
                "slot stamp is behind the published head",
            ));
        }
        Ok(())
    }

    /// Waits with `wait` until a read would find a message or the ring is closed.
    ///
    /// # Errors
    /// [`ReadError::Timeout`] when `wait`'s bound ran out; [`ReadError::Evicted`];
    /// [`ReadError::Corrupt`] when the slot's stamp is behind the published `head`.
    pub fn wait_ready<W: WaitStrategy>(&mut self, wait: &mut W) -> Result<(), ReadError> {
        loop {
            self.check_registered()?;
            if self.ready() {
                return Ok(());
            }
            self.check_stamp_not_behind_head()?;
            // Before parking: the entry shows where we stand while we wait.
            self.flush_progress();
            let line = self.mem.producer_line();
            // Acquire: pairs with the producer's Release store of the futex word.
            let seen = line.publish_futex.load(Ordering::Acquire);
            // Relaxed + the heavy fence below: the Dekker handshake with the publish (stamp and
            // head stores, light fence, waiters load): either we see the new message now, or it
            // sees us and wakes us.
            line.consumer_waiters.fetch_add(1, Ordering::Relaxed);
            // After the increment, before the decrement: a reclaim that sees 1 gives back a
            // count that was really taken (an over-count is harmless, an under-count would
            // lose a wake-up). Relaxed: read only by a reclaimer of this (dead) entry.
            let e = self.mem.consumer_entry(self.index);
            e.parked.store(1, Ordering::Relaxed);
            // The heavy side of the pair (`Memory::heavy_fence`: SeqCst, or `membarrier(2)`
            // where the publish's side is a compiler fence).
            self.mem.heavy_fence();
            let ok = self.ready() || wait.wait(&line.publish_futex, seen);
            if self.check_registered().is_err() {
                // Reclaimed while parked: the reclaimer gave our count back already (or will
                // find `parked` clear because a new registration reset it): touch nothing.
                return Err(ReadError::Evicted);
            }
            e.parked.store(0, Ordering::Relaxed);
            line.consumer_waiters.fetch_sub(1, Ordering::Relaxed);
            if !ok {
                return Err(ReadError::Timeout);
            }
        }
    }

    /// Waits for, then pins, the next message (see [`try_pin`](Self::try_pin)).
    ///
    /// # Errors
    /// As `try_pin` and [`wait_ready`](Self::wait_ready).
    pub fn pin<W: WaitStrategy>(&mut self, wait: &mut W) -> Result<Pinned<'_, M>, ReadError> {
        self.wait_ready(wait)?;
        // `head` only grows, so a read that `wait_ready` found ready stays ready.
        self.try_pin()
    }

    /// Waits for, then copies, the next message (see [`try_copy`](Self::try_copy)).
    ///
    /// # Errors
    /// As `try_copy` and [`wait_ready`](Self::wait_ready).
    pub fn copy<W: WaitStrategy>(
        &mut self,
        buf: &mut [u8],
        wait: &mut W,
    ) -> Result<Copied, ReadError> {
        loop {
            self.wait_ready(wait)?;
            match self.try_copy(buf) {
                Err(ReadError::Empty) => continue,
                other => return other,
            }
        }
    }
}

/// The consumer side of the producer-parking handshake: after progress the producer may wait
/// for (an unpin, a gating advance, leaving, becoming ready), wake it if it announced it parks.
#[inline]
pub(super) fn wake_producer<M: Memory + ?Sized>(mem: &M) {
    let line = mem.producer_line();
    // The light side of the Dekker handshake with `Producer::park` (it stores
    // `producer_waiting`, runs the heavy fence, then re-checks cursors and pins): either it
    // sees our progress or we see it waiting. SeqCst by default (`Memory::light_fence`).
    mem.light_fence();
    // Relaxed: ordered by the fence pair.
    if line.producer_waiting.load(Ordering::Relaxed) != 0 {
        wake_parked_producer(mem, line);
    }
}

/// The rare end of [`wake_producer`], out of line so that every read's inlined tail stays a
/// fence, a load and a branch.
#[cold]
#[inline(never)]
fn wake_parked_producer<M: Memory + ?Sized>(mem: &M, line: &crate::layout::ProducerLine) {
    // Release: pairs with the producer's Acquire load of the drain word.
    line.drain_futex.fetch_add(1, Ordering::Release);
    mem.notify(&line.drain_futex);
}

impl<M: Memory> Drop for Consumer<M> {
    fn drop(&mut self) {
        let Ok(e) = self.own_entry() else {
            return; // Reclaimed: the entry is not ours any more.
        };
        // Take our bit back from every slot: a `Pinned` leaked with `mem::forget` left it set,
        // and the entry is about to be free. No `Pinned` borrows us now, so no pinned bytes are
        // in use. Before FREE: once the entry is free, the bit may be a new holder's.
        let bit = 1u64 << self.index;
        for i in 0..self.mem.geometry().slots() {
            // Release: an unpin, pairing with the producer's claim CAS.
            self.mem
                .slot_header(i)
                .state
                .fetch_and(!bit, Ordering::Release);
        }
        // A member's unfinished claims end with it (a `Hold` not released was delivered).
        // Relaxed: ordered by the Release store of FREE below.
        for w in &e.claims {
            w.store(0, Ordering::Relaxed);
        }
        // Dropped while counted as parked (a panic unwound out of a wait strategy): give the
        // count back. Relaxed: as in `wait_ready`.
        if e.parked.swap(0, Ordering::Relaxed) != 0 {
            self.mem
                .producer_line()
                .consumer_waiters
                .fetch_sub(1, Ordering::Relaxed);
        }
        // Relaxed: the entry is about to be free; FREE below (Release) orders it.
        e.ready.store(0, Ordering::Relaxed);
        // Release: pairs with the producer's Acquire state load: our reads are done before the
        // entry stops gating the producer, and a `wait_drained` that sees FREE returns after
        // everything we did.
        e.state.store(CONSUMER_FREE, Ordering::Release);
        // Release: pairs with the next registrant's Acquire owner CAS (which then sees FREE).
        e.owner.store(0, Ordering::Release);
        self.wake_producer();
    }
}
