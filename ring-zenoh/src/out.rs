//! [`BridgeOut`]: a consumer of a local ring that publishes every message it reads to a Zenoh
//! key expression, with the [wire header](crate::wire) as the sample's attachment.

use core::sync::atomic::{AtomicBool, Ordering};
use core::time::Duration;
use std::sync::{Arc, Condvar, Mutex};

use ring_core::{DeliveryClass, ReadError};
use ring_os::prelude::{Ring, Subscriber};
use ring_os::raw::{ConsumerExt as _, ShmReadError};
use zenoh::Wait as _;

use crate::error::zenoh;
use crate::wire::{Header, Kind};
use crate::{congestion_control, new_epoch, BridgeError, End, POLL};

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

    /// Forwards at most one message, waiting at most about `timeout`; `Some` when the stream
    /// ended.
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
        let msg = match self.subscriber.inner().recv_pinned(timeout) {
            Ok(pinned) => {
                let mut header = Header::data(
                    self.class,
                    self.epoch,
                    pinned.seq(),
                    pinned.missed(),
                    pinned.meta(),
                );
                let start = *self
                    .start
                    .get_or_insert(pinned.seq().saturating_sub(pinned.missed()));
                header.start = start;
                // A slot holds at most u32::MAX bytes (the ring's geometry is u32).
                header.len = u32::try_from(pinned.len()).unwrap_or(u32::MAX);
                let data = pinned.bytes().to_vec();
                // The pin is released here, before the network is involved.
                drop(pinned);
                Ok((header, data))
            }
            Err(e) => Err(e),
        };
        let (header, data) = match msg {
            Ok(m) => m,
            Err(ShmReadError::Read(ReadError::Timeout | ReadError::Empty | ReadError::Lagging)) => {
                return Ok(None)
            }
            // The origin producer died: a new one may take the ring over; wait.
            Err(ShmReadError::ProducerGone) => return Ok(None),
            Err(ShmReadError::Read(ReadError::Closed)) => {
                return self.finish(Kind::Close, 0).map(Some)
            }
            Err(ShmReadError::Read(ReadError::Aborted { code })) => {
                return self.finish(Kind::Abort, code).map(Some)
            }
            Err(ShmReadError::Read(e)) => return Err(BridgeError::Read(e)),
        };
        let len = data.len() as u64;
        self.publisher
            .put(data)
            .attachment(header.encode().to_vec())
            .wait()
            .map_err(zenoh("publishing"))?;
        self.next_seq = header.seq + 1;
        self.stats.forwarded += 1;
        self.stats.missed += header.missed;
        self.stats.bytes += len;
        Ok(None)
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
            .attachment(header.encode().to_vec())
            .wait()
            .map_err(zenoh("publishing the end of the stream"))?;
        Ok(match kind {
            Kind::Abort => End::Aborted(code),
            _ => End::Closed,
        })
    }
}
