//! [`BridgeOut`]: a consumer of a local ring that publishes every message it reads to a Zenoh
//! key expression, with the [wire header](crate::wire) as the sample's attachment.

use core::sync::atomic::{AtomicBool, Ordering};
use core::time::Duration;
use std::sync::{Arc, Condvar, Mutex};

use ring_core::{DeliveryClass, ReadError};
use ring_os::prelude::{Ring, Subscriber};
use ring_os::raw::{ConsumerExt as _, ShmReadError, TRUNCATED};
use zenoh::Wait as _;

use crate::error::zenoh;
use crate::wire::{BatchWriter, Header, Kind, RECORD_HEADER_LEN};
use crate::{congestion_control, new_epoch, poll_briefly, BridgeError, End, POLL};

/// What a [`BridgeOut`] has done so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OutStats {
    /// Messages published to Zenoh.
    pub forwarded: u64,
    /// Messages of the origin ring the bridge's consumer skipped (latest-only, skip-on-lag),
    /// as the ring reported them; each count also travels in the next sample's header.
    pub missed: u64,
    /// Payload bytes published.
    pub bytes: u64,
    /// Times the bridge stopped reading because the key's last matching subscriber went away.
    pub paused: u64,
    /// Batch samples published (each carries several of the `forwarded` messages).
    pub batches: u64,
}

/// The most bytes a sending bridge packs into one batch frame: with its sample's header and
/// key it fits one Zenoh batch on TCP (at most 65,535 bytes), and a receiving bridge's
/// [`MAX_BATCH_BYTES`](crate::wire::MAX_BATCH_BYTES) is far above it.
pub const BATCH_BYTES: usize = 48 * 1024;

/// What one step read.
struct Ready {
    /// The messages that fit the batch frame.
    writer: BatchWriter,
    /// A message too large for the frame (sent after it).
    single: Option<(Header, Vec<u8>)>,
    messages: u64,
    missed: u64,
    bytes: u64,
    /// The last message's sequence number.
    last: Option<u64>,
}

/// Whether a subscriber matches the publisher's key, kept current by a matching listener.
#[derive(Debug, Default)]
struct Matching {
    now: Mutex<bool>,
    changed: Condvar,
}

impl Matching {
    fn set(&self, matching: bool) {
        if let Ok(mut now) = self.now.lock() {
            *now = matching;
        }
        self.changed.notify_all();
    }

    fn get(&self) -> bool {
        self.now.lock().map(|now| *now).unwrap_or(false)
    }

    /// Waits at most `timeout` for a match; true when there is one.
    fn wait(&self, timeout: Duration) -> bool {
        let Ok(now) = self.now.lock() else {
            return false;
        };
        self.changed
            .wait_timeout_while(now, timeout, |m| !*m)
            .map(|(now, _)| *now)
            .unwrap_or(false)
    }
}

/// The origin side of a bridge: a subscriber of a local ring and a Zenoh publisher.
///
/// The bridge reads only while at least one Zenoh subscriber matches its key: a gating bridge
/// then holds the local producer back (a full ring) until the far side is there again, and a
/// latest-only or skip-on-lag bridge has the ring count what it skips meanwhile, which the
/// next sample's header carries to the far side.
///
/// # Examples
///
/// ```no_run
/// use ring_os::prelude::*;
/// use ring_zenoh::{BridgeOut, ZenohOptions};
/// # fn main() -> Result<(), ring_zenoh::BridgeError> {
/// let ring = Ring::builder("camera").open()?;
/// let session = ZenohOptions::new().listen("tcp/127.0.0.1:7447").open()?;
/// let mut bridge = BridgeOut::new(&session, &ring, "robot/camera", DeliveryClass::LatestOnly)?;
/// let stop = std::sync::atomic::AtomicBool::new(false);
/// let end = bridge.run(&stop)?; // until the ring's producer closes it
/// println!("{end:?}: {:?}", bridge.stats());
/// # Ok(())
/// # }
/// ```
pub struct BridgeOut {
    subscriber: Subscriber,
    publisher: zenoh::pubsub::Publisher<'static>,
    /// Close and abort samples: always blocking, so they are not dropped behind the data.
    control: zenoh::pubsub::Publisher<'static>,
    matching: Arc<Matching>,
    _listener: zenoh::matching::MatchingListener<()>,
    class: DeliveryClass,
    epoch: u64,
    /// The origin ring's next sequence number as far as this bridge knows.
    next_seq: u64,
    /// Where this bridge started reading the origin ring (known from its first message).
    start: Option<u64>,
    /// Whether the last step found a matching subscriber.
    was_matched: bool,
    /// The origin ring's slot capacity (what one message can be at most).
    capacity: usize,
    /// The last step moved messages (so the next one polls before it parks).
    active: bool,
    /// A frame buffer to fill next (one that went out with a sample is Zenoh's).
    spare: Vec<u8>,
    stats: OutStats,
}

impl core::fmt::Debug for BridgeOut {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("BridgeOut")
            .field("key", &self.publisher.key_expr().as_str())
            .field("class", &self.class)
            .field("epoch", &self.epoch)
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

impl BridgeOut {
    /// Registers a subscriber of `class` on `ring` and declares a publisher on `key` with the
    /// class's quality of service (see the crate docs).
    ///
    /// # Errors
    ///
    /// [`BridgeError::Key`], [`BridgeError::Ring`] (`ConsumerTableFull`), [`BridgeError::Zenoh`].
    pub fn new(
        session: &zenoh::Session,
        ring: &Ring,
        key: &str,
        class: DeliveryClass,
    ) -> Result<Self, BridgeError> {
        let key = crate::key_expr(key)?;
        let publisher = session
            .declare_publisher(key.clone())
            .congestion_control(congestion_control(class))
            .wait()
            .map_err(zenoh("declaring the publisher"))?;
        let control = session
            .declare_publisher(key)
            .congestion_control(zenoh::qos::CongestionControl::Block)
            .wait()
            .map_err(zenoh("declaring the control publisher"))?;
        let matching = Arc::new(Matching::default());
        let listener = {
            let matching = Arc::clone(&matching);
            publisher
                .matching_listener()
                .callback(move |status| matching.set(status.matching()))
                .wait()
                .map_err(zenoh("declaring the matching listener"))?
        };
        // The listener reports changes; start from the current state.
        let now = publisher
            .matching_status()
            .wait()
            .map_err(zenoh("reading the matching status"))?;
        if now.matching() {
            matching.set(true);
        }
        let subscriber = ring.subscriber(class)?;
        Ok(Self {
            subscriber,
            publisher,
            control,
            matching,
            _listener: listener,
            class,
            epoch: new_epoch(),
            next_seq: 0,
            start: None,
            was_matched: false,
            capacity: ring.slot_size(),
            active: false,
            spare: Vec::new(),
            stats: OutStats::default(),
        })
    }

    /// This bridge instance's id (in every header it sends).
    #[must_use]
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// What the bridge has done so far.
    #[must_use]
    pub fn stats(&self) -> OutStats {
        self.stats
    }

    /// True while a Zenoh subscriber matches the key.
    #[must_use]
    pub fn matched(&self) -> bool {
        self.matching.get()
    }

    /// Waits at most `timeout` until a Zenoh subscriber matches the key.
    #[must_use]
    pub fn wait_matched(&self, timeout: Duration) -> bool {
        self.matching.wait(timeout)
    }

    /// Forwards until the origin ring's stream ends or `stop` is set.
    ///
    /// A dead origin producer is waited out (a new one takes the ring over, see
    /// `docs/OS.md`); the stream's end (close or abort) is forwarded to the far side.
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
            if let Some(end) = self.step(POLL)? {
                return Ok(end);
            }
        }
    }

    /// Forwards what is ready, waiting at most about `timeout` for a first message; `Some`
    /// when the stream ended.
    ///
    /// Messages that are ready together go out together: a gating or skip-on-lag bridge reads
    /// them in one ring batch (one cursor store) and packs those that fit into one batch
    /// sample of at most [`BATCH_BYTES`] ([wire](crate::wire), version 2); a message alone,
    /// or one too large for the batch, goes as a single sample (version 1, its bytes
    /// unchanged as the payload). A latest-only bridge forwards one message per step.
    ///
    /// # Errors
    ///
    /// [`BridgeError::Read`] when the origin ring is unusable (corrupt, truncated, this
    /// subscriber evicted); [`BridgeError::Zenoh`] when a put fails.
    pub fn step(&mut self, timeout: Duration) -> Result<Option<End>, BridgeError> {
        if !self.matching.get() {
            if core::mem::take(&mut self.was_matched) {
                self.stats.paused += 1;
            }
            let _ = self.matching.wait(timeout);
            return Ok(None);
        }
        self.was_matched = true;
        // What is there now; after a step that moved messages, a short poll for more (see
        // `POLL_BEFORE_PARK`); then a wait on the ring.
        let mut got = self.read_ready();
        if matches!(got, Err(ReadError::Empty)) && self.active {
            let _ = poll_briefly(|| {
                got = self.read_ready();
                !matches!(got, Err(ReadError::Empty))
            });
        }
        if matches!(got, Err(ReadError::Empty)) {
            if let Err(e) = self.subscriber.inner().wait_message(timeout) {
                self.active = false;
                return self.read_error(e);
            }
            got = self.read_ready();
        }
        self.active = got.is_ok();
        let ready = match got {
            Ok(ready) => ready,
            Err(e) => return self.read_error(ShmReadError::Read(e)),
        };
        let Ready {
            writer,
            single,
            messages,
            missed,
            bytes,
            last,
        } = ready;
        let start = self.start.unwrap_or(0);
        if !writer.is_empty() {
            match writer.into_single(self.class, self.epoch, start) {
                Ok((header, data)) => self.put(&header, data)?,
                Err(writer) => {
                    let (header, frame) = writer.finish(self.class, self.epoch, start);
                    self.put(&header, frame)?;
                    self.stats.batches += 1;
                }
            }
        }
        if let Some((header, data)) = single {
            self.put(&header, data)?;
        }
        if let Some(last) = last {
            self.next_seq = last + 1;
        }
        self.stats.forwarded += messages;
        self.stats.missed += missed;
        self.stats.bytes += bytes;
        Ok(None)
    }

    /// What a read error means for the stream: nothing yet, its end, or a broken ring.
    fn read_error(&mut self, e: ShmReadError) -> Result<Option<End>, BridgeError> {
        match e {
            ShmReadError::Read(ReadError::Timeout | ReadError::Empty | ReadError::Lagging) => {
                Ok(None)
            }
            // The origin producer died: a new one may take the ring over; wait.
            ShmReadError::ProducerGone => Ok(None),
            ShmReadError::Read(ReadError::Closed) => self.finish(Kind::Close, 0).map(Some),
            ShmReadError::Read(ReadError::Aborted { code }) => {
                self.finish(Kind::Abort, code).map(Some)
            }
            ShmReadError::Read(e) => Err(BridgeError::Read(e)),
        }
    }

    /// Reads the messages that are ready (see [`step`](Self::step)), copying each straight
    /// from its pinned slot into the batch frame (or, too large for it, into a buffer of its
    /// own, after which reading stops). The error of the first read when nothing was read.
    fn read_ready(&mut self) -> Result<Ready, ReadError> {
        let batching = self.class != DeliveryClass::LatestOnly;
        let per_message = RECORD_HEADER_LEN + self.capacity;
        let reserve = if batching && per_message <= BATCH_BYTES / 2 {
            BATCH_BYTES
        } else {
            0
        };
        let mut frame = core::mem::take(&mut self.spare);
        frame.reserve(reserve);
        let mut ready = Ready {
            writer: BatchWriter::new(frame),
            single: None,
            messages: 0,
            missed: 0,
            bytes: 0,
            last: None,
        };
        let (class, epoch) = (self.class, self.epoch);
        let start = &mut self.start;
        let consumer = self.subscriber.inner();
        loop {
            let room = BATCH_BYTES.saturating_sub(ready.writer.frame_len());
            // So many that each fits whatever its length; at least one (which may not fit).
            let max = if batching {
                (room / per_message).max(1)
            } else {
                1
            };
            let got = consumer.try_read_batch(max, |item| {
                let (seq, missed) = (item.seq(), item.missed());
                let start = *start.get_or_insert(seq.saturating_sub(missed));
                ready.messages += 1;
                ready.missed += missed;
                ready.bytes += item.len() as u64;
                ready.last = Some(seq);
                let fits = ready.writer.frame_len() + RECORD_HEADER_LEN + item.len() <= BATCH_BYTES;
                if fits
                    && ready
                        .writer
                        .push(seq, missed, item.meta(), item.bytes())
                        .is_ok()
                {
                    return;
                }
                let mut header = Header::data(class, epoch, seq, missed, item.meta());
                header.start = start;
                // A slot holds at most u32::MAX bytes (the ring's geometry is u32).
                header.len = u32::try_from(item.len()).unwrap_or(u32::MAX);
                ready.single = Some((header, item.bytes().to_vec()));
            });
            match got {
                Ok(n) => {
                    let full = BATCH_BYTES - ready.writer.frame_len() < RECORD_HEADER_LEN;
                    if n < max || !batching || ready.single.is_some() || full {
                        break;
                    }
                }
                Err(e) if ready.messages == 0 => {
                    self.spare = ready.writer.into_buffer();
                    return Err(e);
                }
                // The next step reads it again and reports it.
                Err(_) => break,
            }
        }
        // The bytes were read from shared memory: was the segment cut under us meanwhile?
        if consumer.memory().is_truncated() {
            return Err(ReadError::Corrupt(TRUNCATED));
        }
        Ok(ready)
    }

    /// Publishes one sample.
    fn put(&self, header: &Header, payload: Vec<u8>) -> Result<(), BridgeError> {
        self.publisher
            .put(payload)
            .attachment(header.encode())
            .wait()
            .map_err(zenoh("publishing"))
    }

    /// Sends the stream's end to the far side.
    fn finish(&mut self, kind: Kind, code: u16) -> Result<End, BridgeError> {
        let header = Header {
            kind,
            code,
            start: self.start.unwrap_or(self.next_seq),
            ..Header::data(self.class, self.epoch, self.next_seq, 0, [0; 2])
        };
        self.control
            .put(Vec::new())
            .attachment(header.encode())
            .wait()
            .map_err(zenoh("publishing the end of the stream"))?;
        Ok(match kind {
            Kind::Abort => End::Aborted(code),
            _ => End::Closed,
        })
    }
}
