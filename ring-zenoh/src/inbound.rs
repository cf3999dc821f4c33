//! [`BridgeIn`]: a Zenoh subscriber that is the producer of a local ring.
//!
//! Samples go from Zenoh's receiving thread into a small inbox and from there, on the caller's
//! thread, into the ring. The inbox keeps the delivery class's semantics: gating and
//! skip-on-lag samples wait for room (which holds Zenoh's receiving thread back, so TCP's
//! window and the sender's blocking congestion control carry the backpressure to the origin
//! ring), a latest-only sample replaces the older latest-only samples still waiting (latest
//! value). Every sample's header is validated before anything is written; an invalid sample is
//! counted and dropped.

use core::sync::atomic::{AtomicBool, Ordering};
use core::time::Duration;
use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex};

use ring_core::{ClaimError, DeliveryClass};
use ring_os::prelude::{Publisher, Ring};
use ring_os::raw::{ProducerExt as _, TRUNCATED};
use zenoh::sample::Sample;
use zenoh::Wait as _;

use crate::error::zenoh;
use crate::wire::{Batch, Header, Kind, WireError, HEADER_LEN};
use crate::{poll_briefly, BridgeError, End, POLL};

/// Samples the inbox holds before a gating or skip-on-lag sample waits for room.
const INBOX: usize = 16;

/// Messages of a batch published into the ring at once (at most).
const RUN: usize = 64;

/// What a [`BridgeIn`] has done so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct InStats {
    /// Messages received in valid data samples (a batch sample counts each of its messages).
    pub received: u64,
    /// Messages written into the ring.
    pub written: u64,
    /// Messages of the origin ring that were not written here: gaps in the origin sequence
    /// (what the sending bridge skipped plus what was dropped on the way) and messages too
    /// large for this ring's slots. For skip-on-lag over a blocking link this equals the
    /// sending bridge's `missed`.
    pub missed: u64,
    /// The part of `missed` the sending bridge reported in its headers (skipped by its ring
    /// consumer).
    pub missed_upstream: u64,
    /// Samples refused: no or invalid header (see `last_rejection`).
    pub rejected: u64,
    /// Samples of the current sending bridge with a sequence number already seen (dropped).
    pub out_of_order: u64,
    /// Messages larger than this ring's slots (dropped, counted in `missed`).
    pub too_large: u64,
    /// Times a new sending bridge (a new epoch) took over the stream.
    pub resumes: u64,
    /// Why the last refused sample was refused.
    pub last_rejection: Option<WireError>,
    /// Valid batch samples received (each carries several of the `received` messages).
    pub batches: u64,
}

/// Whether a message was written or the caller's stop flag ended the wait for room.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Written {
    Yes,
    Stopped,
}

#[derive(Default)]
struct Queue {
    samples: VecDeque<Sample>,
    closed: bool,
    /// The writer waits for a sample (so a push must wake it: a notify is a system call, made
    /// only when someone waits).
    reader_waits: bool,
    /// Zenoh's thread waits for room.
    pusher_waits: bool,
}

/// Samples between Zenoh's receiving thread and the ring writer.
#[derive(Default)]
struct Inbox {
    queue: Mutex<Queue>,
    readable: Condvar,
    writable: Condvar,
}

/// True for a latest-only data sample (a quick look: the writer validates the whole header).
fn is_latest_data(sample: &Sample) -> bool {
    sample.attachment().is_some_and(|a| {
        let b = a.to_bytes();
        b.len() == HEADER_LEN && b.get(5) == Some(&0) && b.get(6) == Some(&1)
    })
}

impl Inbox {
    /// Called on Zenoh's receiving thread.
    fn push(&self, sample: Sample) {
        let latest = is_latest_data(&sample);
        let Ok(mut q) = self.queue.lock() else {
            return;
        };
        if latest {
            // Latest value: older latest-only samples still waiting are superseded (their
            // sequence numbers become a counted gap).
            q.samples.retain(|s| !is_latest_data(s));
        } else {
            while q.samples.len() >= INBOX && !q.closed {
                q.pusher_waits = true;
                q = match self.writable.wait_timeout(q, POLL) {
                    Ok((q, _)) => q,
                    Err(_) => return,
                };
            }
            q.pusher_waits = false;
        }
        if q.closed {
            return;
        }
        q.samples.push_back(sample);
        let wake = q.reader_waits;
        drop(q);
        if wake {
            self.readable.notify_one();
        }
    }

    fn pop(&self, timeout: Duration) -> Option<Sample> {
        let mut q = self.queue.lock().ok()?;
        if q.samples.is_empty() && !q.closed {
            q.reader_waits = true;
            q = self
                .readable
                .wait_timeout_while(q, timeout, |q| q.samples.is_empty() && !q.closed)
                .ok()?
                .0;
            q.reader_waits = false;
        }
        let sample = q.samples.pop_front();
        let wake = q.pusher_waits;
        drop(q);
        if wake {
            self.writable.notify_one();
        }
        sample
    }

    fn close(&self) {
        if let Ok(mut q) = self.queue.lock() {
            q.closed = true;
        }
        self.writable.notify_all();
        self.readable.notify_all();
    }
}

/// The far side of a bridge: a Zenoh subscriber and the local ring's publisher.
///
/// # Examples
///
/// ```no_run
/// use ring_os::prelude::*;
/// use ring_zenoh::{BridgeIn, ZenohOptions};
/// # fn main() -> Result<(), ring_zenoh::BridgeError> {
/// let ring = Ring::builder("camera-remote").slots(4).slot_size(1920 * 1080 * 4).open_or_create()?;
/// let session = ZenohOptions::new().connect("tcp/127.0.0.1:7447").open()?;
/// let mut bridge = BridgeIn::new(&session, &ring, "robot/camera")?;
/// let stop = std::sync::atomic::AtomicBool::new(false);
/// let end = bridge.run(&stop)?;
/// println!("{end:?}: {:?}", bridge.stats());
/// # Ok(())
/// # }
/// ```
pub struct BridgeIn {
    publisher: Publisher,
    capacity: usize,
    inbox: Arc<Inbox>,
    subscriber: zenoh::pubsub::Subscriber<()>,
    /// The current sending bridge's epoch and the origin sequence number expected next.
    expected: Option<(u64, u64)>,
    /// The ring had messages before this bridge took it over (a restarted bridge): what its
    /// predecessor wrote last is unknown, so the first sample's gap is not counted.
    resumed: bool,
    /// A batch frame that arrived in several pieces is put together here (reused: it grows
    /// to the largest such frame, at most `wire::MAX_BATCH_BYTES`).
    scratch: Vec<u8>,
    stats: InStats,
}

impl core::fmt::Debug for BridgeIn {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("BridgeIn")
            .field("key", &self.subscriber.key_expr().as_str())
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

impl BridgeIn {
    /// Becomes `ring`'s publisher (taking over from a dead one, as a restarted bridge does)
    /// and subscribes to `key`.
    ///
    /// # Errors
    ///
    /// [`BridgeError::Ring`] (`ProducerAlive`: another live bridge or producer owns the ring),
    /// [`BridgeError::Key`], [`BridgeError::Zenoh`].
    pub fn new(session: &zenoh::Session, ring: &Ring, key: &str) -> Result<Self, BridgeError> {
        Self::with_publisher(session, ring.publisher()?, ring.slot_size(), key)
    }

    /// As [`new`](Self::new) with a publisher the caller made (for example after waiting for
    /// the ring's subscribers with [`Publisher::wait_for_subscribers`], so that nothing is
    /// accepted from Zenoh before they are there). `slot_size` is the ring's.
    ///
    /// # Errors
    ///
    /// As [`new`](Self::new).
    pub fn with_publisher(
        session: &zenoh::Session,
        publisher: Publisher,
        slot_size: usize,
        key: &str,
    ) -> Result<Self, BridgeError> {
        let key = crate::key_expr(key)?;
        let inbox = Arc::new(Inbox::default());
        let subscriber = {
            let inbox = Arc::clone(&inbox);
            session
                .declare_subscriber(key)
                .callback(move |sample| inbox.push(sample))
                .wait()
                .map_err(zenoh("declaring the subscriber"))?
        };
        let resumed = publisher.sent() > 0;
        Ok(Self {
            publisher,
            resumed,
            capacity: slot_size,
            inbox,
            subscriber,
            expected: None,
            scratch: Vec::new(),
            stats: InStats::default(),
        })
    }

    /// What the bridge has done so far.
    #[must_use]
    pub fn stats(&self) -> InStats {
        self.stats
    }

    /// Writes samples into the ring until the stream ends or `stop` is set. On a close from
    /// the far side the ring is closed (its subscribers drain, then are disconnected); on an
    /// abort it is aborted with the same code.
    ///
    /// # Errors
    ///
    /// As [`step`](Self::step).
    pub fn run(&mut self, stop: &AtomicBool) -> Result<End, BridgeError> {
        loop {
            // Relaxed: a flag polled every slice; it orders nothing else.
            if stop.load(Ordering::Relaxed) {
                return Ok(End::Stopped);
            }
            if let Some(end) = self.step(POLL, stop)? {
                return Ok(end);
            }
        }
    }

    /// Handles at most one sample (one message, or a batch of them), waiting at most
    /// `timeout` for one; `Some` when the stream ended. A full ring is waited for (gating
    /// backpressure) until `stop` is set.
    ///
    /// A batch sample is validated whole before any of its messages is written: a malformed
    /// one is refused (`rejected`) as a single sample is.
    ///
    /// # Errors
    ///
    /// [`BridgeError::Write`] when the ring cannot be written for good (truncated, another
    /// producer took it over).
    pub fn step(
        &mut self,
        timeout: Duration,
        stop: &AtomicBool,
    ) -> Result<Option<End>, BridgeError> {
        let Some(sample) = self.inbox.pop(timeout) else {
            return Ok(None);
        };
        let payload = sample.payload();
        let header = match sample.attachment() {
            None => Err(WireError::Missing),
            Some(a) => Header::decode(&a.to_bytes(), payload.len()),
        };
        let header = match header {
            Ok(h) => h,
            Err(e) => {
                self.reject(e);
                return Ok(None);
            }
        };
        if header.kind == Kind::Batch {
            return self.write_batch(&header, payload, stop).map(|()| None);
        }
        if !self.account(&header) {
            return Ok(None);
        }
        match header.kind {
            Kind::Close => {
                self.publisher.close();
                return Ok(Some(End::Closed));
            }
            Kind::Abort => {
                self.publisher.abort(header.code);
                return Ok(Some(End::Aborted(header.code)));
            }
            Kind::Data | Kind::Batch => {}
        }
        self.stats.received += 1;
        if payload.len() > self.capacity {
            self.stats.too_large += 1;
            self.stats.missed += 1;
            return Ok(None);
        }
        self.write(&header, payload.len(), || payload.slices(), stop)?;
        Ok(None)
    }

    fn reject(&mut self, e: WireError) {
        self.stats.rejected += 1;
        self.stats.last_rejection = Some(e);
    }

    /// Validates a batch sample's frame whole, then writes its messages in order.
    fn write_batch(
        &mut self,
        header: &Header,
        payload: &zenoh::bytes::ZBytes,
        stop: &AtomicBool,
    ) -> Result<(), BridgeError> {
        // Zenoh hands a frame that arrived in one piece over as one slice (no copy); one that
        // arrived in several (fragmented) is put together in the reused scratch buffer. Its
        // length was checked against the header's, which is at most MAX_BATCH_BYTES.
        let mut scratch = core::mem::take(&mut self.scratch);
        let mut slices = payload.slices();
        let frame = match (slices.next(), slices.next()) {
            (Some(one), None) => one,
            (None, _) => &[],
            (Some(_), Some(_)) => {
                scratch.clear();
                for part in payload.slices() {
                    scratch.extend_from_slice(part);
                }
                &scratch[..]
            }
        };
        let result = self.write_frame(header, frame, stop);
        self.scratch = scratch;
        result
    }

    fn write_frame(
        &mut self,
        header: &Header,
        frame: &[u8],
        stop: &AtomicBool,
    ) -> Result<(), BridgeError> {
        let batch = match Batch::parse(header, frame) {
            Ok(batch) => batch,
            Err(e) => {
                self.reject(e);
                return Ok(());
            }
        };
        self.stats.batches += 1;
        // Messages without metadata words go into the ring in runs, each run published with
        // one `head` store and one wake-up check (ring-core's `try_publish_batch`), so a far
        // reader that keeps up is woken once per run, not once per message. A message with
        // metadata goes on its own (ring-core's batch publish leaves the words 0), through the
        // one-pass publish with its words (`write_one`).
        let mut run: [&[u8]; RUN] = [&[]; RUN];
        let mut queued = 0;
        for record in batch.records() {
            if !self.account(&record.header) {
                continue;
            }
            self.stats.received += 1;
            if record.payload.len() > self.capacity {
                self.stats.too_large += 1;
                self.stats.missed += 1;
                continue;
            }
            let part = record.payload;
            if record.header.meta == [0; 2] {
                run[queued] = part;
                queued += 1;
                if queued < RUN {
                    continue;
                }
            }
            let run_written = self.write_run(&run[..queued], stop)?;
            queued = 0;
            if run_written == Written::Stopped {
                return Ok(());
            }
            if record.header.meta != [0; 2]
                && self.write_one(&record.header, part, stop)? == Written::Stopped
            {
                // Told to stop while the ring was full: the rest of the batch is not waited
                // for either.
                return Ok(());
            }
        }
        self.write_run(&run[..queued], stop).map(|_| ())
    }

    /// Writes `run` (messages without metadata, each checked against the slot size) into the
    /// ring in order: as many as there is room for in one batch publish, the next one through
    /// the blocking claim when the ring is full (which waits, and reclaims dead subscribers).
    fn write_run(&mut self, run: &[&[u8]], stop: &AtomicBool) -> Result<Written, BridgeError> {
        let zero = Header::data(DeliveryClass::Gating, 1, 0, 0, [0; 2]);
        let mut done = 0;
        while let Some(rest) = run.get(done..).filter(|rest| !rest.is_empty()) {
            match self.publisher.inner().try_publish_batch(rest) {
                Ok(n) => {
                    // A write straight through ring-core: was the segment cut meanwhile?
                    if self.publisher.inner().memory().is_truncated() {
                        return Err(BridgeError::Write(ClaimError::Corrupt(TRUNCATED)));
                    }
                    done += n;
                    self.stats.written += n as u64;
                }
                Err(ClaimError::Full { .. } | ClaimError::Pinned { .. }) => {
                    let part = rest[0];
                    if self.write(&zero, part.len(), || core::iter::once(part), stop)?
                        == Written::Stopped
                    {
                        return Ok(Written::Stopped);
                    }
                    done += 1;
                }
                Err(e) => return Err(BridgeError::Write(e)),
            }
        }
        Ok(Written::Yes)
    }

    /// Writes one message of one part with its metadata: the one-pass publish (ring-os's
    /// truncation-checked `try_publish_checked_with_meta`) while the ring has room, else the
    /// blocking claim of [`write`](Self::write), which waits for room.
    fn write_one(
        &mut self,
        h: &Header,
        part: &[u8],
        stop: &AtomicBool,
    ) -> Result<Written, BridgeError> {
        match self
            .publisher
            .inner()
            .try_publish_checked_with_meta(part, h.meta)
        {
            Ok(_seq) => {
                self.stats.written += 1;
                Ok(Written::Yes)
            }
            // Nothing changed: wait in the claim.
            Err(ClaimError::Full { .. } | ClaimError::Pinned { .. }) => {
                self.write(h, part.len(), || core::iter::once(part), stop)
            }
            Err(e) => Err(BridgeError::Write(e)),
        }
    }

    /// Checks the header's place in the origin sequence and counts gaps; false when the
    /// sample is to be dropped (already seen).
    fn account(&mut self, h: &Header) -> bool {
        match self.expected {
            Some((epoch, next)) if epoch == h.epoch => {
                if h.seq < next {
                    self.stats.out_of_order += 1;
                    return false;
                }
                self.stats.missed += h.seq - next;
            }
            Some((_, next)) => {
                // A new sending bridge. On the same origin ring its sequence numbers go on, and
                // what was published while no bridge read it is a gap; lower numbers mean a new
                // origin ring, whose stream starts afresh at the bridge's start.
                self.stats.resumes += 1;
                self.stats.missed += if h.seq >= next {
                    h.seq - next
                } else {
                    h.seq - h.start
                };
            }
            // The first sample: what the sending bridge read before it did not arrive (unless
            // a predecessor of this bridge may have written it).
            None if !self.resumed => self.stats.missed += h.seq - h.start,
            None => {}
        }
        if h.kind == Kind::Data {
            self.stats.missed_upstream += h.missed;
            self.expected = Some((h.epoch, h.seq + 1));
        } else {
            self.expected = Some((h.epoch, h.seq));
        }
        true
    }

    /// Writes one message of `len` bytes, given as the slices `parts` yields, into the ring
    /// (no staging copy); waits while the ring is full unless `stop` is set.
    fn write<'p, I: Iterator<Item = &'p [u8]>>(
        &mut self,
        h: &Header,
        len: usize,
        parts: impl Fn() -> I,
        stop: &AtomicBool,
    ) -> Result<Written, BridgeError> {
        loop {
            // A full ring: a short poll for room before the claim parks (see
            // `POLL_BEFORE_PARK`).
            if !self.publisher.inner().is_claimable() {
                let producer = self.publisher.inner();
                let _ = poll_briefly(|| producer.is_claimable());
            }
            let res = self.publisher.inner().claim_with(POLL, |mut slot| {
                let mut at = 0;
                for part in parts() {
                    // Cannot overflow: the total was checked against the capacity.
                    let _ = slot.write_at(at, part);
                    at += part.len();
                }
                let _ = slot.set_len(len);
                slot.set_meta(h.meta);
                slot.publish()
            });
            match res {
                Ok(Ok(_seq)) => {
                    self.stats.written += 1;
                    return Ok(Written::Yes);
                }
                Ok(Err(e)) => return Err(BridgeError::Write(e)),
                // Subscribers hold the ring back: wait (that is the backpressure), unless told
                // to stop.
                Err(ClaimError::Full { .. } | ClaimError::Pinned { .. }) => {
                    // Relaxed: a polled flag.
                    if stop.load(Ordering::Relaxed) {
                        return Ok(Written::Stopped);
                    }
                }
                Err(e) => return Err(BridgeError::Write(e)),
            }
        }
    }

    /// The ring's publisher (for example to wait until its gating subscribers drained).
    pub fn publisher(&mut self) -> &mut Publisher {
        &mut self.publisher
    }
}

impl Drop for BridgeIn {
    fn drop(&mut self) {
        // Unblocks Zenoh's receiving thread if it waits for room.
        self.inbox.close();
    }
}

// The class a latest-only sample is recognised by in `is_latest_data` is the wire code of
// `DeliveryClass::LatestOnly`.
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latest_code_matches_the_wire() {
        let h = Header::data(DeliveryClass::LatestOnly, 1, 0, 0, [0; 2]).encode();
        assert_eq!((h[5], h[6]), (0, 1));
    }
}
