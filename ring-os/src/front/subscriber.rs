//! [`Subscriber`]: a reader of the ring, with crossbeam-channel names, pinned (zero-copy) and
//! copying forms, and iteration.

use core::time::Duration;

use ring_core::{Copied, Hold, Memory as _, ReadError};

use crate::ShmReadError;

use super::errors::{RecvError, RecvTimeoutError, TryRecvError};
use crate::raw::{ConsumerExt as _, Mapping, ShmConsumer, LIVENESS_PERIOD};

/// How long one round of a wait without timeout waits before it starts another.
const ROUND: Duration = Duration::from_secs(1);

/// A message pinned in the ring, read in place ([`Subscriber::recv_pinned`]): ring-core's
/// [`Pinned`](ring_core::Pinned) over this crate's mapping. Its bytes stay valid and the
/// publisher cannot overwrite its slot for as long as it lives; drop it to let the slot go.
pub type Pinned<'a> = ring_core::Pinned<'a, std::sync::Arc<Mapping>>;

/// A registered reader. Dropping it leaves the ring (its pins and its hold on a gating ring go
/// with it).
#[derive(Debug)]
pub struct Subscriber {
    inner: ShmConsumer,
    /// When the producer's liveness lock was last probed, and what the probe said: a probe is a
    /// system call, so a polling `try_recv_pinned` asks at most once per liveness period.
    probed: core::cell::Cell<Option<(std::time::Instant, bool)>>,
}

/// One message, copied out ([`Subscriber::iter`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Message {
    /// Its sequence number.
    pub seq: u64,
    /// Messages skipped just before it (latest-only and skip-on-lag subscribers).
    pub missed: u64,
    /// Its two metadata words.
    pub meta: [u64; 2],
    /// A group member's message that was handed out before (to a member that died): delivery
    /// in a group is at-least-once, and a repeat says so.
    pub redelivered: bool,
    /// Its bytes.
    pub data: Vec<u8>,
}

/// Iterates over a subscriber's messages until the ring is disconnected ([`Subscriber::iter`]).
#[derive(Debug)]
pub struct Iter<'a> {
    subscriber: &'a mut Subscriber,
    buf: Vec<u8>,
    done: bool,
}

impl Subscriber {
    pub(crate) fn new(inner: ShmConsumer) -> Self {
        Self {
            inner,
            probed: core::cell::Cell::new(None),
        }
    }

    /// Copies the next message into `buf` if one is there.
    ///
    /// # Errors
    ///
    /// [`TryRecvError::Empty`], `Disconnected`, `Failed` (for example `BufferTooSmall`).
    pub fn try_recv(&mut self, buf: &mut [u8]) -> Result<Copied, TryRecvError> {
        self.inner.try_copy(buf).map_err(|e| match e {
            // Nothing to read and the producer may be dead: say so rather than Empty forever.
            ReadError::Empty if self.producer_dead() => TryRecvError::Disconnected,
            e => TryRecvError::from_read(e),
        })
    }

    /// Copies the next message into `buf`, waiting as long as it takes.
    ///
    /// # Errors
    ///
    /// [`RecvError::Disconnected`], `Failed`.
    pub fn recv(&mut self, buf: &mut [u8]) -> Result<Copied, RecvError> {
        loop {
            match self.recv_timeout(buf, ROUND) {
                Ok(m) => return Ok(m),
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => return Err(RecvError::Disconnected),
                Err(RecvTimeoutError::Failed(e)) => return Err(RecvError::Failed(e)),
            }
        }
    }

    /// Copies the next message into `buf`, waiting at most `timeout`.
    ///
    /// # Errors
    ///
    /// [`RecvTimeoutError::Timeout`], `Disconnected`, `Failed`.
    pub fn recv_timeout(
        &mut self,
        buf: &mut [u8],
        timeout: Duration,
    ) -> Result<Copied, RecvTimeoutError> {
        let deadline = crate::wait::deadline_after(timeout);
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match self.inner.recv(buf, left) {
                // Overwritten faster than we read: try again within the timeout.
                Err(ShmReadError::Read(ReadError::Lagging)) if !left.is_zero() => {}
                other => return other.map_err(RecvTimeoutError::from_read),
            }
        }
    }

    /// Pins the next message if one is there: a zero-copy view the publisher cannot
    /// overwrite until it is dropped.
    ///
    /// # Errors
    ///
    /// As [`try_recv`](Self::try_recv).
    pub fn try_recv_pinned(&mut self) -> Result<Pinned<'_>, TryRecvError> {
        let dead = self.producer_dead();
        self.inner.try_pin().map_err(|e| match e {
            ReadError::Empty if dead => TryRecvError::Disconnected,
            e => TryRecvError::from_read(e),
        })
    }

    /// Pins the next message, waiting as long as it takes.
    ///
    /// # Errors
    ///
    /// As [`recv`](Self::recv).
    pub fn recv_pinned(&mut self) -> Result<Pinned<'_>, RecvError> {
        loop {
            match self.inner.wait_message(ROUND) {
                Ok(()) => break,
                Err(ShmReadError::Read(ReadError::Timeout)) => {}
                Err(e) => {
                    return Err(match RecvTimeoutError::from_read(e) {
                        RecvTimeoutError::Failed(e) => RecvError::Failed(e),
                        _ => RecvError::Disconnected,
                    })
                }
            }
        }
        self.inner
            .try_pin()
            .map_err(|e| match RecvTimeoutError::from_read(e) {
                RecvTimeoutError::Failed(e) => RecvError::Failed(e),
                RecvTimeoutError::Disconnected => RecvError::Disconnected,
                // Overwritten between the wait and the pin (latest-only, skip-on-lag).
                RecvTimeoutError::Timeout => RecvError::Failed(ReadError::Lagging),
            })
    }

    /// Pins the next message, waiting at most `timeout`.
    ///
    /// # Errors
    ///
    /// As [`recv_timeout`](Self::recv_timeout).
    pub fn recv_pinned_timeout(
        &mut self,
        timeout: Duration,
    ) -> Result<Pinned<'_>, RecvTimeoutError> {
        self.inner
            .recv_pinned(timeout)
            .map_err(RecvTimeoutError::from_read)
    }

    /// Holds the next message, waiting at most `timeout`: the message stays pinned, readable
    /// through [`held_bytes`](Self::held_bytes), until [`release`](Self::release), while this
    /// subscriber goes on reading and holding (up to [`max_holds`](Self::max_holds) at once,
    /// released in any order). For streams that keep earlier messages alive while they read
    /// the next (an RPC stream's Arrow batches, a pipeline's frames).
    ///
    /// # Errors
    ///
    /// As [`recv_timeout`](Self::recv_timeout); `Failed(TooManyHolds)` at once when
    /// `max_holds` messages are held.
    ///
    /// # Examples
    ///
    /// ```
    /// use ring_os::prelude::*;
    /// # use core::time::Duration;
    /// let ring = Ring::memfd().slots(4).slot_size(64).create()?;
    /// let mut publisher = ring.publisher()?;
    /// let mut subscriber = ring.subscriber(DeliveryClass::Gating)?;
    /// publisher.send(b"batch 0")?;
    /// publisher.send(b"batch 1")?;
    /// let t = Duration::from_secs(1);
    /// let first = subscriber.recv_held_timeout(t)?;
    /// let second = subscriber.recv_held_timeout(t)?; // the first is still held
    /// assert_eq!(subscriber.held_bytes(&first), Some(&b"batch 0"[..]));
    /// assert_eq!(subscriber.held_bytes(&second), Some(&b"batch 1"[..]));
    /// subscriber.release(first)?;
    /// subscriber.release(second)?;
    /// # Ok::<(), ring_os::Error>(())
    /// ```
    pub fn recv_held_timeout(&mut self, timeout: Duration) -> Result<Hold, RecvTimeoutError> {
        self.inner
            .recv_held(timeout)
            .map_err(RecvTimeoutError::from_read)
    }

    /// A held message's bytes, zero-copy (`None` for a hold that is not this subscriber's).
    #[must_use]
    pub fn held_bytes(&self, hold: &Hold) -> Option<&[u8]> {
        self.inner.held_bytes(hold)
    }

    /// Gives a held message back (see [`recv_held_timeout`](Self::recv_held_timeout)).
    ///
    /// # Errors
    ///
    /// `ReadError::NotHeld` when `hold` is not one of this subscriber's holds.
    pub fn release(&mut self, hold: Hold) -> Result<(), ReadError> {
        self.inner.release(hold)
    }

    /// Starts this skip-on-lag subscriber up to `n` messages back, as far as the ring still
    /// holds them (history for a late joiner); returns how many back it starts. Before the
    /// first read only (see `ring_core::Consumer::rewind`).
    ///
    /// # Errors
    ///
    /// `ReadError::NotSupported` for a gating or latest-only subscriber or after a read;
    /// `Evicted`, `Corrupt`.
    pub fn rewind(&mut self, n: u64) -> Result<u64, ReadError> {
        self.inner.rewind(n)
    }

    /// How many messages this subscriber may hold at once (4 unless set).
    #[must_use]
    pub fn max_holds(&self) -> usize {
        self.inner.max_holds()
    }

    /// Sets how many messages this subscriber may hold at once, up to
    /// [`MAX_HOLDS`](ring_core::MAX_HOLDS).
    ///
    /// # Errors
    ///
    /// `ReadError::TooManyHolds` above `MAX_HOLDS` or below the number held now.
    pub fn set_max_holds(&mut self, max: usize) -> Result<(), ReadError> {
        self.inner.set_max_holds(max)
    }

    /// Iterates over copies of the messages until the ring is disconnected; a failed read is
    /// yielded once as an error and ends the iteration.
    ///
    /// # Examples
    ///
    /// ```
    /// use ring_os::prelude::*;
    /// let ring = Ring::memfd().slots(4).slot_size(64).create()?;
    /// let mut subscriber = ring.subscriber(DeliveryClass::Gating)?;
    /// let mut publisher = ring.publisher()?;
    /// for i in 0..3u8 {
    ///     publisher.send(&[i])?;
    /// }
    /// publisher.close();
    /// let seqs: Vec<u64> = subscriber.iter().map(|m| m.map(|m| m.seq)).collect::<Result<_, _>>()?;
    /// assert_eq!(seqs, [0, 1, 2]);
    /// # Ok::<(), ring_os::Error>(())
    /// ```
    pub fn iter(&mut self) -> Iter<'_> {
        // Sized by the local, validated geometry: never by a length a peer wrote.
        let capacity = self.inner.memory().geometry().slot_capacity();
        Iter {
            subscriber: self,
            buf: vec![0; capacity],
            done: false,
        }
    }

    /// Messages received so far.
    #[must_use]
    pub fn received(&self) -> u64 {
        self.inner.received()
    }

    /// Messages skipped so far (latest-only and skip-on-lag).
    #[must_use]
    pub fn missed(&self) -> u64 {
        self.inner.missed()
    }

    /// ring-core's consumer, for the lower-level API.
    pub fn inner(&mut self) -> &mut ShmConsumer {
        &mut self.inner
    }

    fn producer_dead(&self) -> bool {
        let now = std::time::Instant::now();
        if let Some((at, dead)) = self.probed.get() {
            if now.duration_since(at) < LIVENESS_PERIOD {
                return dead;
            }
        }
        let owner = self.inner.producer_owner();
        let dead =
            owner != 0 && self.inner.producer_liveness() == crate::liveness::owner::Liveness::Dead;
        self.probed.set(Some((now, dead)));
        dead
    }
}

impl Iterator for Iter<'_> {
    type Item = Result<Message, RecvError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        match self.subscriber.recv(&mut self.buf) {
            Ok(c) => Some(Ok(Message {
                seq: c.seq,
                missed: c.missed,
                meta: c.meta,
                redelivered: c.redelivered,
                data: self.buf[..c.len].to_vec(),
            })),
            Err(RecvError::Disconnected) => {
                self.done = true;
                None
            }
            Err(e) => {
                self.done = true;
                Some(Err(e))
            }
        }
    }
}

// Keeps the liveness period in the docs' sense: a blocked call notices a dead publisher within
// about one period.
const _: () = assert!(LIVENESS_PERIOD.as_millis() < ROUND.as_millis());
