//! [`Subscriber`]'s futures and its [`Stream`](futures_core::Stream) of messages.
//!
//! Each future reads only in the poll that returns `Ready`: a future dropped at any earlier
//! point has read nothing, pinned nothing and holds nothing, and gives back its reactor entry
//! and waiter count in its `Drop`.

use core::future::Future;
use core::pin::Pin;
use core::task::{Context, Poll};

use ring_core::{Copied, Hold, Memory as _, ReadError};

use super::wait::{EntryRef, SubWait};
use crate::raw::{ShmConsumer, TRUNCATED};
use crate::segment::sigbus::memory_truncated;
use crate::{Message, Pinned, RecvError, RecvTimeoutError, ShmReadError, Subscriber};

/// Reads per poll before a future yields (each overrun by the producer: `Lagging`).
const READS: usize = 8;

/// The blocking `recv`'s error for the same outcome.
fn recv_error(e: impl Into<ShmReadError>) -> RecvError {
    match RecvTimeoutError::from_read(e) {
        RecvTimeoutError::Disconnected => RecvError::Disconnected,
        RecvTimeoutError::Failed(e) => RecvError::Failed(e),
        // Not produced by a wait without a deadline; reported as the read's own reason.
        RecvTimeoutError::Timeout => RecvError::Failed(ReadError::Timeout),
    }
}

/// `Corrupt(TRUNCATED)` when the segment was cut under its mapping: a read hands out bytes the
/// caller uses later, so the blocking reads probe after every read, and so do these.
fn truncated(c: &ShmConsumer) -> Result<(), ReadError> {
    if memory_truncated(c.memory(), true) {
        Err(ReadError::Corrupt(TRUNCATED))
    } else {
        Ok(())
    }
}

/// Waits, then runs `read` (a read that finds nothing, or is overrun, waits or retries).
fn poll_read<R>(
    c: &mut ShmConsumer,
    wait: &mut SubWait,
    cx: &Context<'_>,
    mut read: impl FnMut(&mut ShmConsumer) -> Result<R, ReadError>,
) -> Poll<Result<R, RecvError>> {
    for _ in 0..READS {
        if let Err(e) = core::task::ready!(wait.poll_ready(c, cx)) {
            return Poll::Ready(Err(recv_error(e)));
        }
        match read(c) {
            Ok(r) => return Poll::Ready(Ok(r)),
            // Overwritten while we read (or gone between the check and the read): again.
            Err(ReadError::Lagging | ReadError::Empty) => {}
            Err(e) => return Poll::Ready(Err(recv_error(e))),
        }
    }
    cx.waker().wake_by_ref();
    Poll::Pending
}

/// [`Subscriber::recv_async`]'s future.
#[derive(Debug)]
#[must_use = "futures do nothing unless polled"]
pub struct Recv<'a> {
    subscriber: &'a mut Subscriber,
    buf: &'a mut [u8],
    wait: SubWait,
}

impl Future for Recv<'_> {
    type Output = Result<Copied, RecvError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let buf = &mut *this.buf;
        poll_read(this.subscriber.inner(), &mut this.wait, cx, |c| {
            let m = c.try_copy(buf)?;
            truncated(c).map(|()| m)
        })
    }
}

impl Drop for Recv<'_> {
    fn drop(&mut self) {
        self.wait.unpark(self.subscriber.inner());
    }
}

/// [`Subscriber::recv_held_async`]'s future.
#[derive(Debug)]
#[must_use = "futures do nothing unless polled"]
pub struct RecvHeld<'a> {
    subscriber: &'a mut Subscriber,
    wait: SubWait,
}

impl Future for RecvHeld<'_> {
    type Output = Result<Hold, RecvError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        poll_read(this.subscriber.inner(), &mut this.wait, cx, |c| {
            let hold = c.try_hold()?;
            if let Err(e) = truncated(c) {
                // Not handed out: give the hold back.
                let _ = c.release(hold);
                return Err(e);
            }
            Ok(hold)
        })
    }
}

impl Drop for RecvHeld<'_> {
    fn drop(&mut self) {
        self.wait.unpark(self.subscriber.inner());
    }
}

/// [`Subscriber::recv_pinned_async`]'s future.
#[derive(Debug)]
#[must_use = "futures do nothing unless polled"]
pub struct RecvPinned<'a> {
    /// `None` once the pin was handed out.
    subscriber: Option<&'a mut Subscriber>,
    wait: SubWait,
}

impl<'a> Future for RecvPinned<'a> {
    type Output = Result<Pinned<'a>, RecvError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let Some(subscriber) = this.subscriber.as_mut() else {
            return Poll::Ready(Err(RecvError::Failed(ReadError::NotSupported(
                "this recv_pinned_async future already returned its pin",
            ))));
        };
        if let Err(e) = core::task::ready!(this.wait.poll_ready(subscriber.inner(), cx)) {
            return Poll::Ready(Err(recv_error(e)));
        }
        let Some(subscriber) = this.subscriber.take() else {
            return Poll::Pending; // Unreachable: checked above.
        };
        let c = subscriber.inner();
        if let Err(e) = truncated(c) {
            return Poll::Ready(Err(RecvError::Failed(e)));
        }
        // `head` only grows, so the message found ready stays there to pin (or is overwritten,
        // which the pin reports: the blocking `recv_pinned` does the same).
        Poll::Ready(c.try_pin().map_err(recv_error))
    }
}

impl Drop for RecvPinned<'_> {
    fn drop(&mut self) {
        if let Some(subscriber) = self.subscriber.as_mut() {
            self.wait.unpark(subscriber.inner());
        }
    }
}

/// [`Subscriber::stream`]: copies of the messages until the ring is disconnected; a failed
/// read is yielded once as an error and ends the stream (as [`Subscriber::iter`]).
#[derive(Debug)]
#[must_use = "streams do nothing unless polled"]
pub struct MessageStream<'a> {
    subscriber: &'a mut Subscriber,
    buf: Vec<u8>,
    wait: SubWait,
    done: bool,
}

impl futures_core::Stream for MessageStream<'_> {
    type Item = Result<Message, RecvError>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        if this.done {
            return Poll::Ready(None);
        }
        let buf = &mut this.buf[..];
        let got = core::task::ready!(poll_read(
            this.subscriber.inner(),
            &mut this.wait,
            cx,
            |c| {
                let m = c.try_copy(buf)?;
                truncated(c).map(|()| m)
            }
        ));
        Poll::Ready(match got {
            Ok(c) => Some(Ok(Message {
                seq: c.seq,
                missed: c.missed,
                meta: c.meta,
                redelivered: c.redelivered,
                data: this.buf[..c.len].to_vec(),
            })),
            Err(RecvError::Disconnected) => {
                this.done = true;
                None
            }
            Err(e) => {
                this.done = true;
                Some(Err(e))
            }
        })
    }
}

impl futures_core::FusedStream for MessageStream<'_> {
    fn is_terminated(&self) -> bool {
        self.done
    }
}

impl Drop for MessageStream<'_> {
    fn drop(&mut self) {
        self.wait.unpark(self.subscriber.inner());
    }
}

/// A subscriber's wait for its next message that borrows nothing between polls: what
/// [`Subscriber::recv_async`]'s future does before it reads, for callers that cannot keep a
/// future borrowing the subscriber across awaits (a foreign event loop: the Python binding
/// keeps one next to its subscriber and polls it from its own tasks).
///
/// [`Subscriber::poll_ready`] runs the `wait_ready` handshake (count the consumer in
/// `consumer_waiters` and its entry's `parked`, SeqCst fence, re-check the ring); where the
/// blocking `recv` would sleep it registers (the publish word, the value seen, the waker) with
/// the process's reactor and returns `Pending`, keeping the count, so the next publish wakes
/// the waker. The count and the registration go back at the next `poll_ready`, at
/// [`Subscriber::cancel_ready`], or when the `ReadyWait` is dropped (which needs no
/// subscriber: it remembers the consumer-table entry, and gives nothing back to an entry that
/// was reclaimed since, whose reclaimer did).
///
/// It reads nothing: `Ready(Ok(()))` says a non-blocking read (`try_recv`, `recv_timeout`
/// with a zero timeout, a pin) would find a message or the stream's end now; that read may
/// still find nothing (a group member took it first, a latest-only message was overwritten):
/// poll again.
///
/// # Examples
///
/// ```
/// use core::task::{Context, Poll, Waker};
/// use ring_os::asyncio::ReadyWait;
/// use ring_os::prelude::*;
/// let ring = Ring::memfd().slots(4).slot_size(64).create()?;
/// let mut subscriber = ring.subscriber(DeliveryClass::Gating)?;
/// let mut publisher = ring.publisher()?;
/// let mut wait = ReadyWait::new();
/// let mut cx = Context::from_waker(Waker::noop());
/// assert!(subscriber.poll_ready(&mut wait, &mut cx).is_pending());
/// assert!(wait.is_pending()); // counted as a parked consumer: the publish wakes it
/// publisher.send(b"hi")?;
/// assert!(matches!(subscriber.poll_ready(&mut wait, &mut cx), Poll::Ready(Ok(()))));
/// let mut buf = [0u8; 64];
/// let got = subscriber.try_recv(&mut buf)?;
/// assert_eq!(&buf[..got.len], b"hi");
/// assert!(!wait.is_pending());
/// # Ok::<(), Error>(())
/// ```
#[derive(Debug, Default)]
pub struct ReadyWait {
    wait: SubWait,
    /// The entry the held count was taken for (set while pending).
    entry: Option<EntryRef>,
}

impl ReadyWait {
    /// A wait that holds nothing yet.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether the last [`Subscriber::poll_ready`] returned `Pending` and its registration and
    /// waiter count are still held.
    #[must_use]
    pub fn is_pending(&self) -> bool {
        self.wait.is_parked()
    }

    /// Gives back the registration and the waiter count (nothing once given back).
    fn release(&mut self) {
        if let Some(entry) = self.entry.take() {
            self.wait.unpark_entry(&entry);
        }
    }
}

impl Drop for ReadyWait {
    fn drop(&mut self) {
        self.release();
    }
}

/// Futures and a stream (feature `async`): wake-ups come from the ring's futex words through
/// one helper thread per process (see [`crate::asyncio`]), so any number of subscribers wait
/// without a thread each, on any executor.
impl Subscriber {
    /// Polls `wait` for this subscriber's next message (see [`ReadyWait`]): `Ready(Ok(()))`
    /// once a non-blocking read would find a message or the stream's end, `Pending` after
    /// registering `cx`'s waker with the process's reactor (woken by the next publish, by the
    /// stream's end, or by the publisher's death, noticed within about
    /// [`LIVENESS_PERIOD`](crate::raw::LIVENESS_PERIOD)). Reads nothing.
    ///
    /// **Cancel safety**: nothing to cancel but the wait itself: drop `wait` or call
    /// [`cancel_ready`](Self::cancel_ready).
    ///
    /// # Errors
    ///
    /// As [`recv_async`](Self::recv_async): [`RecvError::Disconnected`] when the publisher's
    /// process died; `Failed(Evicted)`, `Failed(Corrupt)` (a truncated segment too).
    pub fn poll_ready(
        &mut self,
        wait: &mut ReadyWait,
        cx: &mut Context<'_>,
    ) -> Poll<Result<(), RecvError>> {
        wait.release();
        let c = self.inner();
        let polled = wait.wait.poll_ready(c, cx);
        if wait.wait.is_parked() {
            wait.entry = Some(EntryRef::of(c));
        }
        polled.map_err(recv_error)
    }

    /// Gives back what a pending [`poll_ready`](Self::poll_ready) holds (its registration
    /// with the reactor and its waiter count); the waker is not woken. Does nothing when
    /// `wait` holds nothing.
    pub fn cancel_ready(&mut self, wait: &mut ReadyWait) {
        wait.release();
    }

    /// Copies the next message into `buf`, waiting as long as it takes, without blocking the
    /// thread: the future is woken by the publisher's next message (or its end).
    ///
    /// **Cancel safety**: the message is copied in the poll that returns it; dropping the
    /// future earlier reads nothing, loses no message and leaves the subscriber as it was.
    ///
    /// # Errors
    ///
    /// As [`recv`](Self::recv): [`RecvError::Disconnected`] once the ring was closed and
    /// drained or its publisher's process died (noticed within about
    /// [`LIVENESS_PERIOD`](crate::raw::LIVENESS_PERIOD)); `Failed(ReadError::Aborted { code })` for
    /// an aborted stream; `Failed` for the rest (`BufferTooSmall`, `Evicted`, `Corrupt`).
    ///
    /// # Examples
    ///
    /// ```
    /// use ring_os::prelude::*;
    /// # fn block_on<F: core::future::Future>(f: F) -> F::Output {
    /// #     let mut f = core::pin::pin!(f);
    /// #     let mut cx = core::task::Context::from_waker(core::task::Waker::noop());
    /// #     loop { if let core::task::Poll::Ready(v) = f.as_mut().poll(&mut cx) { return v; } }
    /// # }
    /// let ring = Ring::memfd().slots(4).slot_size(64).create()?;
    /// let mut subscriber = ring.subscriber(DeliveryClass::Gating)?;
    /// let mut publisher = ring.publisher()?;
    /// let mut buf = [0u8; 64];
    /// block_on(async {
    ///     publisher.send_async(b"hello").await?;
    ///     let got = subscriber.recv_async(&mut buf).await?;
    ///     assert_eq!(&buf[..got.len], b"hello");
    ///     Ok::<(), Error>(())
    /// })?;
    /// # Ok::<(), Error>(())
    /// ```
    pub fn recv_async<'a>(&'a mut self, buf: &'a mut [u8]) -> Recv<'a> {
        Recv {
            subscriber: self,
            buf,
            wait: SubWait::default(),
        }
    }

    /// Pins the next message (zero-copy, as [`recv_pinned`](Self::recv_pinned)), waiting
    /// without blocking the thread.
    ///
    /// **Cancel safety**: the pin is taken in the poll that returns it; dropping the future
    /// earlier pins nothing and loses no message.
    ///
    /// # Errors
    ///
    /// As [`recv_async`](Self::recv_async); `Failed(Lagging)` when a latest-only or
    /// skip-on-lag message was overwritten between the wake-up and the pin (as `recv_pinned`).
    pub fn recv_pinned_async(&mut self) -> RecvPinned<'_> {
        RecvPinned {
            subscriber: Some(self),
            wait: SubWait::default(),
        }
    }

    /// Holds the next message (as [`recv_held_timeout`](Self::recv_held_timeout)), waiting
    /// without blocking the thread.
    ///
    /// **Cancel safety**: the hold is taken in the poll that returns it; dropping the future
    /// earlier holds nothing and loses no message.
    ///
    /// # Errors
    ///
    /// As [`recv_async`](Self::recv_async); `Failed(TooManyHolds)` at once when
    /// [`max_holds`](Self::max_holds) messages are held.
    pub fn recv_held_async(&mut self) -> RecvHeld<'_> {
        RecvHeld {
            subscriber: self,
            wait: SubWait::default(),
        }
    }

    /// A [`Stream`](futures_core::Stream) of copied messages that ends when the ring is
    /// disconnected (a failed read is yielded once and ends it), as [`iter`](Self::iter).
    ///
    /// **Cancel safety**: as [`recv_async`](Self::recv_async), per `poll_next`; dropping the
    /// stream loses no message that it has not yielded.
    pub fn stream(&mut self) -> MessageStream<'_> {
        // Sized by the local, validated geometry: never by a length a peer wrote.
        let capacity = self.inner().memory().geometry().slot_capacity();
        MessageStream {
            subscriber: self,
            buf: vec![0; capacity],
            wait: SubWait::default(),
            done: false,
        }
    }
}

#[cfg(test)]
mod tests {
    use core::task::{Context, Poll, Waker};
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    use ring_core::Memory as _;

    use super::super::reactor::tests::{until, Flag};
    use super::ReadyWait;
    use crate::prelude::*;

    fn waiters(s: &mut Subscriber) -> u32 {
        // Relaxed: a snapshot for the test.
        s.inner()
            .memory()
            .producer_line()
            .consumer_waiters
            .load(Ordering::Relaxed)
    }

    /// A `ReadyWait` holds one waiter count while pending (however often it is polled), is
    /// woken by a publish, and gives the count back on `cancel_ready` and on drop alike.
    #[test]
    fn ready_wait_counts_once_wakes_and_gives_back_on_cancel_and_drop() {
        let ring = Ring::memfd().slots(4).slot_size(64).create().unwrap();
        let mut sub = ring.subscriber(DeliveryClass::Gating).unwrap();
        let mut publisher = ring.publisher().unwrap();
        let flag = Arc::new(Flag(AtomicBool::new(false)));
        let waker = Waker::from(Arc::clone(&flag));
        let mut cx = Context::from_waker(&waker);

        let mut wait = ReadyWait::new();
        assert!(sub.poll_ready(&mut wait, &mut cx).is_pending());
        assert!(sub.poll_ready(&mut wait, &mut cx).is_pending());
        assert_eq!(waiters(&mut sub), 1, "a re-poll must not count twice");
        sub.cancel_ready(&mut wait);
        assert!(!wait.is_pending());
        assert_eq!(waiters(&mut sub), 0, "cancel_ready kept the count");

        assert!(sub.poll_ready(&mut wait, &mut cx).is_pending());
        drop(wait);
        assert_eq!(waiters(&mut sub), 0, "a dropped wait kept the count");

        let mut wait = ReadyWait::new();
        assert!(sub.poll_ready(&mut wait, &mut cx).is_pending());
        publisher.send(b"x").unwrap();
        // Relaxed: the flag is the value checked, nothing is published through it.
        until("the publish woke the wait", || {
            flag.0.load(Ordering::Relaxed)
        });
        assert!(matches!(
            sub.poll_ready(&mut wait, &mut cx),
            Poll::Ready(Ok(()))
        ));
        assert_eq!(waiters(&mut sub), 0);
        let mut buf = [0u8; 64];
        assert_eq!(sub.try_recv(&mut buf).unwrap().len, 1);
    }

    /// A waker that records the thread that woke it.
    struct WokenOn(std::sync::Mutex<Option<std::thread::ThreadId>>);
    impl std::task::Wake for WokenOn {
        fn wake(self: Arc<Self>) {
            *self.0.lock().unwrap() = Some(std::thread::current().id());
        }
    }

    /// A publish made by this process wakes its pending futures itself, inside `send` on the
    /// publishing thread, not through the reactor's thread (the one-hand-off path that the
    /// wake-up benchmark's in-process rows measure).
    #[test]
    fn a_publish_in_this_process_wakes_the_future_on_the_publishing_thread() {
        let ring = Ring::memfd().slots(4).slot_size(64).create().unwrap();
        let mut sub = ring.subscriber(DeliveryClass::Gating).unwrap();
        let mut publisher = ring.publisher().unwrap();
        let mut buf = [0u8; 64];
        // The reactor's thread may rarely get there first (woken by another test's publish, it
        // scans our changed word before `send` reaches its shortcut): a few attempts; without
        // the shortcut every attempt is woken on the reactor's thread.
        let on_this_thread = (0..3).any(|_| {
            let woken = Arc::new(WokenOn(std::sync::Mutex::new(None)));
            let waker = Waker::from(Arc::clone(&woken));
            let mut cx = Context::from_waker(&waker);
            let mut wait = ReadyWait::new();
            assert!(sub.poll_ready(&mut wait, &mut cx).is_pending());
            publisher.send(b"x").unwrap();
            until("the publish woke the wait", || {
                woken.0.lock().unwrap().is_some()
            });
            let by = *woken.0.lock().unwrap();
            assert!(matches!(
                sub.poll_ready(&mut wait, &mut cx),
                Poll::Ready(Ok(()))
            ));
            assert_eq!(waiters(&mut sub), 0, "the woken wait kept its count");
            assert_eq!(sub.try_recv(&mut buf).unwrap().len, 1);
            by == Some(std::thread::current().id())
        });
        assert!(
            on_this_thread,
            "never woken by the publishing thread itself"
        );
    }

    /// Windows: a ring mapped twice (two views at different addresses, as two processes have
    /// it), so the in-process shortcut (matched by address) does not apply: a publish through
    /// one view wakes a wait on the other through the bucket's semaphore, which the reactor
    /// sleeps on (not by its polling, nor at a liveness deadline).
    #[test]
    #[cfg(windows)]
    fn a_publish_wakes_the_reactor_through_the_wait_semaphore() {
        use super::super::reactor::{reactor, Backend};
        let name = format!("reactor-sems-{}", std::process::id());
        let ring = Ring::builder(&name)
            .slots(4)
            .slot_size(64)
            .create()
            .unwrap();
        let other = Ring::builder(&name).open().unwrap();
        let mut sub = ring.subscriber(DeliveryClass::Gating).unwrap();
        let mut publisher = other.publisher().unwrap();
        let mut buf = [0u8; 64];
        let before = reactor().sem_wakes();
        for i in 0..10u8 {
            let flag = Arc::new(Flag(AtomicBool::new(false)));
            let waker = Waker::from(Arc::clone(&flag));
            let mut cx = Context::from_waker(&waker);
            let mut wait = ReadyWait::new();
            assert!(sub.poll_ready(&mut wait, &mut cx).is_pending());
            assert_eq!(reactor().backend(), Backend::Sems);
            // Let the helper announce itself and sleep on the semaphore, and publish well before
            // the wait's first liveness deadline (LIVENESS_PERIOD, 20 ms), when the helper wakes
            // to probe the publisher: a publish while it is awake is found by its re-check
            // instead (hence ten rounds).
            std::thread::sleep(std::time::Duration::from_millis(6));
            publisher.send(&[i]).unwrap();
            // Relaxed: the flag is the value checked.
            until("the publish woke the wait", || {
                flag.0.load(Ordering::Relaxed)
            });
            assert!(matches!(
                sub.poll_ready(&mut wait, &mut cx),
                Poll::Ready(Ok(()))
            ));
            assert_eq!(sub.try_recv(&mut buf).unwrap().len, 1);
        }
        assert!(
            reactor().sem_wakes() > before,
            "no publish reached the helper through a semaphore"
        );
    }
}
