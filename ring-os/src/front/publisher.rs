//! [`Publisher`]: the ring's one writer, with crossbeam-channel names and in-place writes.

use core::time::Duration;

use ring_core::{ClaimError, LoanError, LostReaders, Memory as _, WriteSlot};

use super::errors::{SendError, SendTimeoutError, TrySendError};
use crate::raw::{Mapping, ProducerExt as _, ShmProducer, LIVENESS_PERIOD};
use crate::wait::FutexWait;

/// The ring's one writer. [`close`](Self::close) ends the stream as complete: subscribers drain
/// what is there, then see `Disconnected`. Dropping it without `close` (an error, a panic, an
/// early return) ends the stream as *aborted*: subscribers drain, then get
/// `Failed(ReadError::Aborted { .. })`, so nobody mistakes a failed stream for a finished one.
///
/// Blocking sends wait in slices and reclaim subscribers whose process died while they held
/// the ring back, so a crashed gating subscriber cannot stall the publisher.
#[derive(Debug)]
pub struct Publisher {
    inner: ShmProducer,
}

/// A slot claimed for writing in place ([`Publisher::loan`]): fill [`bytes`](Self::bytes),
/// then [`send`](Self::send). Dropping it without sending gives the slot back.
#[derive(Debug)]
pub struct Loan<'a> {
    slot: WriteSlot<'a, std::sync::Arc<Mapping>>,
    len: usize,
}

impl Publisher {
    pub(crate) fn new(inner: ShmProducer) -> Self {
        Self { inner }
    }

    /// Sends `data` if a slot is free now; returns its sequence number.
    ///
    /// # Errors
    ///
    /// [`TrySendError::Full`] (retry), `Closed`, `TooLarge`, `Failed`.
    pub fn try_send(&mut self, data: &[u8]) -> Result<u64, TrySendError> {
        self.inner
            .try_publish(data)
            .map_err(TrySendError::from_claim)
    }

    /// Sends `data`, waiting as long as the ring is full.
    ///
    /// # Errors
    ///
    /// [`SendError::Closed`], `TooLarge`, `Failed`.
    pub fn send(&mut self, data: &[u8]) -> Result<u64, SendError> {
        loop {
            match self.send_timeout(data, LIVENESS_PERIOD * 50) {
                Ok(seq) => return Ok(seq),
                Err(e) => {
                    if let Some(e) = SendError::from_timeout(e) {
                        return Err(e);
                    }
                }
            }
        }
    }

    /// Sends `data`, waiting at most `timeout` while the ring is full.
    ///
    /// # Errors
    ///
    /// [`SendTimeoutError::Timeout`], `Closed`, `TooLarge`, `Failed`.
    pub fn send_timeout(
        &mut self,
        data: &[u8],
        timeout: Duration,
    ) -> Result<u64, SendTimeoutError> {
        self.inner
            .publish(data, timeout)
            .map_err(SendTimeoutError::from_claim)
    }

    /// Claims the next slot (waiting at most `timeout`) and lends its first `len` bytes for
    /// writing in place: render or decode straight into shared memory, no staging copy. The
    /// ring must be pin-only ([`RingBuilder::pin_only`](super::RingBuilder::pin_only)).
    ///
    /// # Errors
    ///
    /// [`SendTimeoutError::Failed`] with `ClaimError::Corrupt` naming why a loan is refused
    /// (not a pin-only ring); `TooLarge`; otherwise as [`send_timeout`](Self::send_timeout).
    ///
    /// # Examples
    ///
    /// ```
    /// use ring_os::prelude::*;
    /// # use core::time::Duration;
    /// let ring = Ring::memfd().slots(2).slot_size(64).pin_only(true).create()?;
    /// let mut publisher = ring.publisher()?;
    /// let mut subscriber = ring.subscriber(DeliveryClass::LatestOnly)?;
    /// let mut loan = publisher.loan(5, Duration::from_secs(1))?;
    /// loan.bytes().copy_from_slice(b"frame");
    /// loan.send()?;
    /// assert_eq!(subscriber.recv_pinned()?.bytes(), b"frame");
    /// # Ok::<(), ring_os::Error>(())
    /// ```
    pub fn loan(&mut self, len: usize, timeout: Duration) -> Result<Loan<'_>, SendTimeoutError> {
        let geometry = *self.inner.memory().geometry();
        let capacity = geometry.slot_capacity();
        if len > capacity {
            return Err(SendTimeoutError::TooLarge { len, capacity });
        }
        if !geometry.config().pin_only {
            return Err(SendTimeoutError::Failed(ClaimError::Corrupt(
                "in-place writes need a pin-only ring (RingBuilder::pin_only): copy readers may \
                 read a slot while it is written",
            )));
        }
        // Wait (reclaiming dead subscribers) until a slot can be claimed, give it back, and
        // claim it again outside the wait: returning a borrow out of the waiting loop is what
        // the borrow checker cannot follow. One producer, so the second claim succeeds; the
        // slot's old message reads as overwritten in between, as it would once we write.
        self.inner
            .claim_with(timeout, |slot| slot.abort())
            .map_err(SendTimeoutError::from_claim)?;
        let mut slot = self
            .inner
            .try_claim()
            .map_err(SendTimeoutError::from_claim)?;
        match slot.loan(len) {
            Ok(_) => Ok(Loan { slot, len }),
            Err(LoanError::TooLarge { len, capacity }) => {
                Err(SendTimeoutError::TooLarge { len, capacity })
            }
            Err(LoanError::NotPinOnly) => Err(SendTimeoutError::Failed(ClaimError::Corrupt(
                "in-place writes need a pin-only ring",
            ))),
        }
    }

    /// Waits at most `timeout` until at least `n` subscribers are registered *and* their
    /// start point is final: each of them then receives (by its class) everything sent after
    /// this returns. False when the timeout ran out first.
    pub fn wait_for_subscribers(&mut self, n: usize, timeout: Duration) -> bool {
        self.inner
            .wait_for_consumers(n, &mut FutexWait::new(timeout))
    }

    /// Subscribers whose start point is final (see
    /// [`wait_for_subscribers`](Self::wait_for_subscribers)).
    #[must_use]
    pub fn subscribers(&self) -> usize {
        self.inner.ready_consumers()
    }

    /// Waits at most `timeout` until every gating subscriber consumed everything sent.
    pub fn wait_drained(&mut self, timeout: Duration) -> bool {
        self.inner.wait_drained_for(timeout)
    }

    /// Messages sent so far (the next sequence number).
    #[must_use]
    pub fn sent(&self) -> u64 {
        self.inner.published()
    }

    /// The subscribers this publisher reclaimed because their processes died without leaving
    /// (one that finished leaves by itself and is not counted): how many, how many gated the
    /// stream, and the first gating one that died with messages unread. A publisher that
    /// promised its gating subscribers every message checks this before it reports success.
    ///
    /// # Examples
    ///
    /// ```
    /// use ring_os::prelude::*;
    /// let ring = Ring::memfd().slots(2).slot_size(64).create()?;
    /// let mut publisher = ring.publisher()?;
    /// let subscriber = ring.subscriber(DeliveryClass::Gating)?;
    /// publisher.send(b"one")?;
    /// drop(subscriber); // finished, not lost
    /// assert_eq!(publisher.lost_subscribers().total, 0);
    /// # Ok::<(), ring_os::Error>(())
    /// ```
    #[must_use]
    pub fn lost_subscribers(&self) -> LostReaders {
        self.inner.lost_readers()
    }

    /// Creates group `name` (competing consumers, joined with [`Ring::join_group`](super::Ring::join_group)),
    /// or finds it; returns its consumer-table index. Messages sent from now on wait for the
    /// group: each goes to exactly one member, and the group holds the publisher back as one
    /// gating subscriber would, even before its first member joins.
    ///
    /// # Errors
    ///
    /// [`Error::Ring`](crate::Error::Ring) (`ConsumerTableFull`).
    pub fn create_group(&mut self, name: &str) -> Result<usize, crate::Error> {
        Ok(self.inner.create_group(name)?)
    }

    /// Ends the stream as complete (subscribers drain, then are disconnected).
    pub fn close(&mut self) {
        self.inner.close();
    }

    /// Ends the stream as aborted with `code` (subscribers drain, then get
    /// `ReadError::Aborted { code }`): one of [`abort_code`](ring_core::abort_code)'s shared
    /// codes, or an application's own from `abort_code::APPLICATION` up.
    pub fn abort(&mut self, code: u16) {
        self.inner.abort(code);
    }

    /// ring-core's producer, for the lower-level API.
    pub fn inner(&mut self) -> &mut ShmProducer {
        &mut self.inner
    }
}

impl Loan<'_> {
    /// The slot the message goes to: `seq % slots` on a default ring, any slot no reader pins
    /// on a never-stall ring. Per-slot bookkeeping (an allocation per slot, say) keys on this.
    pub fn slot(&self) -> usize {
        self.slot.slot()
    }

    /// The sequence number the message will have.
    pub fn seq(&self) -> u64 {
        self.slot.seq()
    }

    /// The lent bytes, to fill in place.
    pub fn bytes(&mut self) -> &mut [u8] {
        // The length was accepted when the loan was made; a second loan of the same slot and
        // length cannot fail, but an empty slice is the safe answer if it ever did.
        self.slot.loan(self.len).unwrap_or_default()
    }

    /// Sets the message's two metadata words.
    pub fn set_meta(&mut self, meta: [u64; 2]) {
        self.slot.set_meta(meta);
    }

    /// Publishes the message; returns its sequence number.
    ///
    /// # Errors
    ///
    /// [`SendTimeoutError::Failed`] with `Displaced` when another publisher took over.
    pub fn send(self) -> Result<u64, SendTimeoutError> {
        self.slot.publish().map_err(SendTimeoutError::from_claim)
    }
}
