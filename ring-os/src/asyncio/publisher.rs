//! [`Publisher`]'s futures and its [`Sink`](futures_sink::Sink): backpressure from gating
//! subscribers (and pins) without blocking the thread.
//!
//! Each future writes only in the poll that returns `Ready`: a future dropped earlier has sent
//! nothing and claimed nothing, and stops announcing itself as a waiting producer in its `Drop`.

use core::future::Future;
use core::pin::Pin;
use core::task::{Context, Poll};
use core::time::Duration;

use ring_core::{ClaimError, Memory as _, WriteSlot};

use super::wait::PubWait;
use crate::raw::LIVENESS_PERIOD;
use crate::{Loan, Publisher, SendError, SendTimeoutError};

/// The blocking `send`'s error for a claim that failed for good.
fn send_error(e: ClaimError) -> SendError {
    SendError::from_timeout(SendTimeoutError::from_claim(e))
        // Held back (`Full`, `Pinned`) is never a final outcome of these futures.
        .unwrap_or(SendError::Failed(e))
}

/// `TooLarge` before any wait, as the blocking `send`.
fn check_len(publisher: &mut Publisher, len: usize) -> Result<(), SendError> {
    let capacity = publisher.inner().memory().geometry().slot_capacity();
    if len > capacity {
        return Err(SendError::TooLarge { len, capacity });
    }
    Ok(())
}

/// [`Publisher::send_async`]'s future.
#[derive(Debug)]
#[must_use = "futures do nothing unless polled"]
pub struct Send<'a> {
    publisher: &'a mut Publisher,
    data: &'a [u8],
    wait: PubWait,
}

impl Future for Send<'_> {
    type Output = Result<u64, SendError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        if let Err(e) = check_len(this.publisher, this.data.len()) {
            return Poll::Ready(Err(e));
        }
        let data = this.data;
        this.wait
            .poll(this.publisher.inner(), cx, |p| p.try_publish(data).into())
            .map_err(send_error)
    }
}

impl Drop for Send<'_> {
    fn drop(&mut self) {
        self.wait.unpark(self.publisher.inner());
    }
}

/// [`Publisher::loan_async`]'s future.
#[derive(Debug)]
#[must_use = "futures do nothing unless polled"]
pub struct LoanAsync<'a> {
    /// `None` once the loan was handed out.
    publisher: Option<&'a mut Publisher>,
    len: usize,
    wait: PubWait,
}

impl<'a> Future for LoanAsync<'a> {
    type Output = Result<Loan<'a>, SendError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let Some(publisher) = this.publisher.as_mut() else {
            return Poll::Ready(Err(SendError::Failed(ClaimError::Corrupt(
                "this loan_async future already returned its loan",
            ))));
        };
        if let Err(e) = check_len(publisher, this.len) {
            return Poll::Ready(Err(e));
        }
        if !publisher.inner().memory().geometry().config().pin_only {
            return Poll::Ready(Err(SendError::Failed(ClaimError::Corrupt(
                "in-place writes need a pin-only ring (RingBuilder::pin_only): copy readers may \
                 read a slot while it is written",
            ))));
        }
        // Wait until a slot can be claimed, and claim and give it back (its old message now
        // reads as overwritten, so no reader pins it again), as the blocking `loan` does.
        let claimed = this.wait.poll(publisher.inner(), cx, |p| {
            p.try_claim().map(WriteSlot::abort).into()
        });
        if let Err(e) = core::task::ready!(claimed) {
            return Poll::Ready(Err(send_error(e)));
        }
        let Some(publisher) = this.publisher.take() else {
            return Poll::Pending; // Unreachable: checked above.
        };
        // The slot is free now and no reader can pin its old message: the loan's claim goes
        // through at once (it waits, blocking, only on a reader's transient pin bit, and for at
        // most one liveness period).
        Poll::Ready(
            publisher
                .loan(this.len, LIVENESS_PERIOD)
                .map_err(|e| match e {
                    SendTimeoutError::Timeout => SendError::Failed(ClaimError::Corrupt(
                        "a slot claimed a moment ago stayed pinned for a liveness period: a \
                         reader breaks the pin protocol",
                    )),
                    SendTimeoutError::Closed => SendError::Closed,
                    SendTimeoutError::TooLarge { len, capacity } => {
                        SendError::TooLarge { len, capacity }
                    }
                    SendTimeoutError::Failed(e) => SendError::Failed(e),
                }),
        )
    }
}

impl Drop for LoanAsync<'_> {
    fn drop(&mut self) {
        if let Some(publisher) = self.publisher.as_mut() {
            self.wait.unpark(publisher.inner());
        }
    }
}

/// [`Publisher::sink`]: a [`Sink`](futures_sink::Sink) of messages. `start_send` keeps the one
/// item it is given until the ring has room (`poll_ready` and `poll_flush` send it);
/// `poll_close` sends it and closes the ring (the stream is complete).
#[derive(Debug)]
#[must_use = "sinks do nothing unless polled"]
pub struct MessageSink<'a, T> {
    publisher: &'a mut Publisher,
    pending: Option<T>,
    wait: PubWait,
}

// The item is never pinned (it is only read through `as_ref`), so the sink moves freely.
impl<T> Unpin for MessageSink<'_, T> {}

impl<T: AsRef<[u8]>> MessageSink<'_, T> {
    /// Sends the pending item, if any.
    fn poll_send(&mut self, cx: &Context<'_>) -> Poll<Result<(), SendError>> {
        let Some(item) = self.pending.as_ref() else {
            return Poll::Ready(Ok(()));
        };
        let data = item.as_ref();
        let sent = core::task::ready!(self
            .wait
            .poll(self.publisher.inner(), cx, |p| p.try_publish(data).into()));
        self.pending = None;
        Poll::Ready(sent.map(|_| ()).map_err(send_error))
    }
}

impl<T: AsRef<[u8]>> futures_sink::Sink<T> for MessageSink<'_, T> {
    type Error = SendError;

    fn poll_ready(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), SendError>> {
        self.get_mut().poll_send(cx)
    }

    fn start_send(self: Pin<&mut Self>, item: T) -> Result<(), SendError> {
        let this = self.get_mut();
        check_len(this.publisher, item.as_ref().len())?;
        // After `poll_ready` returned `Ready(Ok)` nothing is pending; a second item without
        // it is refused rather than dropping the first.
        if this.pending.is_some() {
            return Err(SendError::Failed(ClaimError::Corrupt(
                "start_send without poll_ready: the sink holds an unsent item",
            )));
        }
        this.pending = Some(item);
        Ok(())
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), SendError>> {
        self.get_mut().poll_send(cx)
    }

    fn poll_close(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), SendError>> {
        let this = self.get_mut();
        core::task::ready!(this.poll_send(cx))?;
        this.publisher.close();
        Poll::Ready(Ok(()))
    }
}

impl<T> Drop for MessageSink<'_, T> {
    fn drop(&mut self) {
        self.wait.unpark(self.publisher.inner());
    }
}

/// Futures and a sink (feature `async`): backpressure from gating subscribers wakes the
/// publisher through the ring's drain word and the process's one helper thread (see
/// [`crate::asyncio`]).
impl Publisher {
    /// Sends `data`, waiting without blocking the thread while the ring is full; returns its
    /// sequence number. Dead subscribers that hold the ring back are reclaimed as in
    /// [`send`](Self::send).
    ///
    /// **Cancel safety**: `data` is written in the poll that returns `Ready`; dropping the
    /// future earlier sends nothing (send `data` again).
    ///
    /// # Errors
    ///
    /// As [`send`](Self::send): [`SendError::Closed`], `TooLarge`, `Failed`.
    pub fn send_async<'a>(&'a mut self, data: &'a [u8]) -> Send<'a> {
        Send {
            publisher: self,
            data,
            wait: PubWait::default(),
        }
    }

    /// Claims the next slot of a pin-only ring for writing in place (as [`loan`](Self::loan)),
    /// waiting without blocking the thread while the ring is full.
    ///
    /// **Cancel safety**: the slot is claimed in the poll that returns the loan; dropping the
    /// future earlier claims nothing. (A slot may have been claimed and given back on the way,
    /// as the blocking `loan` does: its old message reads as overwritten.)
    ///
    /// # Errors
    ///
    /// As [`loan`](Self::loan) (without `Timeout`): `Failed(ClaimError::Corrupt(..))` on a
    /// ring that is not pin-only, `TooLarge`, `Closed`.
    pub fn loan_async(&mut self, len: usize) -> LoanAsync<'_> {
        LoanAsync {
            publisher: Some(self),
            len,
            wait: PubWait::default(),
        }
    }

    /// A [`Sink`](futures_sink::Sink) of messages (anything `AsRef<[u8]>`); closing it closes
    /// the ring as a complete stream.
    ///
    /// **Cancel safety**: an item given to `start_send` is sent by the next `poll_ready`,
    /// `poll_flush` or `poll_close`; a sink dropped before that drops it unsent (flush first).
    pub fn sink<T: AsRef<[u8]>>(&mut self) -> MessageSink<'_, T> {
        MessageSink {
            publisher: self,
            pending: None,
            wait: PubWait::default(),
        }
    }
}

// The loan's own wait is one liveness period: keep it short.
const _: () = assert!(LIVENESS_PERIOD.as_millis() < Duration::from_secs(1).as_millis());
