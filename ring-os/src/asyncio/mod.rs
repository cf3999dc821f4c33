//! Async waits without a thread per wait (feature `async`): futures on [`Subscriber`] and
//! [`Publisher`], a [`Stream`](futures_core::Stream) and a [`Sink`](futures_sink::Sink),
//! runtime-agnostic (std [`Waker`](core::task::Waker)s only; tokio, smol, async-std or a
//! hand-written executor all drive them).
//!
//! | method | waits for | cancel safety (the future dropped before it is ready) |
//! |---|---|---|
//! | [`Subscriber::recv_async`] | a message to copy out | nothing read, no message lost |
//! | [`Subscriber::recv_pinned_async`] | a message to pin | nothing pinned, no message lost |
//! | [`Subscriber::recv_held_async`] | a message to hold | nothing held, no message lost |
//! | [`Subscriber::stream`] | each message (`poll_next`) | as `recv_async`, per item |
//! | [`Subscriber::poll_ready`] with a [`ReadyWait`] | a message to read (reads nothing; borrows nothing between polls) | nothing to lose; the wait's drop gives its count back |
//! | [`Publisher::send_async`] | room in the ring (gating subscribers, pins) | nothing sent |
//! | [`Publisher::loan_async`] | room, then claims a slot to write in place | nothing claimed |
//! | [`Publisher::sink`] | room, for the item given to `start_send` | the item is sent by the next `poll_ready`/`poll_flush`/`poll_close` |
//! | `Driver::dispatch` (Linux) | nothing: reaps the io_uring's completions, wakes their futures on the calling thread | not a future; a completion it does not reap stays for the next call or the helper |
//!
//! Every future reads or writes only in the poll that returns `Ready`, so one dropped at any
//! earlier poll leaves the ring and the participant exactly as a non-blocking call that found
//! nothing would. Its `Drop` gives back what the wait took (below).
//!
//! # How a future waits
//!
//! The futures use the futex words and the accounting of the blocking calls, so publishers and
//! subscribers in other processes (blocking or async, any language) need no change:
//!
//! - A subscriber's future runs ring-core's `Consumer::wait_ready` handshake (W1–W2 in
//!   `docs/PROTOCOL.md`): it loads `publish_futex`, counts itself in `consumer_waiters`, sets
//!   its entry's `parked`, fences (SeqCst) and re-checks the ring. Where the blocking call
//!   would sleep in `futex(FUTEX_WAIT)`, the future registers (word, value seen, waker) with
//!   the reactor and returns `Pending`, still counted: so the next publish bumps the word and
//!   wakes the reactor's thread, which wakes the task. Its next poll (or its drop) gives the
//!   count back; a reclaimer gives back the count of a process that died while pending, as it
//!   does for a blocked one.
//! - A publisher's future runs `Producer::park`'s handshake (W3–W4): it loads `drain_futex`,
//!   sets `producer_waiting`, fences and re-checks whether a slot can be claimed, then
//!   registers the drain word; a subscriber's progress bumps it.
//! - The reactor (`src/asyncio/reactor.rs`) is one helper thread per process, started by the first
//!   registration, that sleeps in **`futex_waitv`** (Linux >= 5.16) on up to 128 words at once
//!   and wakes the wakers of words that changed. On Windows it sleeps in
//!   `WaitForMultipleObjects` on the segments' wait semaphores (the ones the blocking waits
//!   use), counted on each bucket as a blocking waiter is. Where the kernel lacks
//!   `futex_waitv` (ENOSYS), on the other platforms, or with `SHMRING_ASYNC_POLL=1`, it polls
//!   the words instead (50 µs doubling to 1 ms), on the same one thread.
//! - **With a `Driver`** (Linux >= 6.7, `asyncio::Driver`): while one lives, a pending future
//!   arms an io_uring `IORING_OP_FUTEX_WAIT` on its word (shared futex, the same value check)
//!   instead of joining the helper's list. The io_uring's fd is a readiness source any runtime
//!   registers (tokio's `AsyncFd`, async-io's `Async`, asyncio's `loop.add_reader`); when it is
//!   readable the runtime calls `Driver::dispatch`, which reaps the completions and wakes the
//!   futures on the runtime's own thread: a publish in another process wakes that thread
//!   through the kernel, one hand-off as for a blocking `recv`, not two (the helper thread,
//!   then the runtime's). Futures are unchanged (std wakers, the same cancel safety: a dropped
//!   future's armed wait is cancelled in the io_uring). The helper thread remains the fallback:
//!   it keeps every armed wait's liveness deadline, reaps the completions itself when one
//!   passes (a driver nobody polls costs up to a liveness period, never a lost wake-up), and
//!   takes the waits back when the last driver is dropped. Where io_uring or its futex wait is
//!   unavailable (`ENOSYS`; `EPERM` under `kernel.io_uring_disabled`; an older kernel; the
//!   `portable` backend), `Driver::new` fails with `Unsupported` and the helper serves as before.
//! - A publish (or a consumer's progress) made by this process wakes this process's futures
//!   waiting on that word itself, on the publishing thread, before its futex wake: one thread
//!   hand-off to the executor instead of two (the reactor's thread, then the executor's). The
//!   words are matched by address, so a ring mapped twice in one process takes the reactor's
//!   path; waiters in other processes always do. Waits armed in a driver's io_uring are left
//!   to it (the futex wake completes them), so that the runtime is not woken twice.
//! - Peers' liveness: every entry also has a deadline one
//!   [`LIVENESS_PERIOD`](crate::raw::LIVENESS_PERIOD) away. For a subscriber's entry the reactor
//!   then asks the kernel whether the publisher's role lock is held (once per ring, however
//!   many subscribers wait on it) and checks the segment's length, and wakes the future only
//!   when one of them reports an ending (a dead publisher is
//!   [`RecvError::Disconnected`](crate::RecvError::Disconnected), as for the blocking `recv`), so
//!   idle subscribers cost no wake-ups. A publisher's future is woken at each deadline and
//!   reclaims dead subscribers that hold it back, as the blocking `send` does.
//!
//! # Examples
//!
//! ```
//! use ring_os::prelude::*;
//! # fn block_on<F: core::future::Future>(f: F) -> F::Output {
//! #     let mut f = core::pin::pin!(f);
//! #     let mut cx = core::task::Context::from_waker(core::task::Waker::noop());
//! #     loop { if let core::task::Poll::Ready(v) = f.as_mut().poll(&mut cx) { return v; } }
//! # }
//! let ring = Ring::memfd().slots(4).slot_size(64).create()?;
//! let mut subscriber = ring.subscriber(DeliveryClass::Gating)?;
//! let mut publisher = ring.publisher()?;
//! let got = std::thread::scope(|s| {
//!     s.spawn(|| {
//!         for i in 0..10u8 {
//!             publisher.send(&[i]).unwrap(); // a blocking publisher; async would do as well
//!         }
//!         publisher.close();
//!     });
//!     // `block_on` stands for any executor (tokio::runtime, futures::executor, smol).
//!     block_on(async {
//!         use futures_core::Stream;
//!         let mut stream = core::pin::pin!(subscriber.stream());
//!         let mut got = Vec::new();
//!         while let Some(m) = core::future::poll_fn(|cx| stream.as_mut().poll_next(cx)).await {
//!             got.push(m?.data[0]);
//!         }
//!         Ok::<_, RecvError>(got)
//!     })
//! })?;
//! assert_eq!(got, (0..10).collect::<Vec<u8>>());
//! # Ok::<(), Error>(())
//! ```
//!
//! # References
//!
//! - `futex_waitv(2)`, futex2: <https://docs.kernel.org/userspace-api/futex2.html>.
//! - io_uring futex operations (`IORING_OP_FUTEX_WAIT`, Linux 6.7): `io_uring_prep_futex_wait(3)`;
//!   the `io-uring` crate's `opcode::FutexWait`.
//! - Ulrich Drepper, "Futexes Are Tricky" (2011): the value check that makes a registration
//!   after the fence lose no wake-up.
//! - tokio's I/O driver and async-io's reactor thread: one blocking call for many sources,
//!   wakers woken outside the lock.

#[cfg(target_os = "linux")]
mod driver;
mod publisher;
pub(crate) mod reactor;
mod subscriber;
mod wait;

#[cfg(target_os = "linux")]
pub use driver::Driver;
pub use publisher::{LoanAsync, MessageSink, Send};
pub use subscriber::{MessageStream, ReadyWait, Recv, RecvHeld, RecvPinned};

use crate::{Publisher, Subscriber};

/// Registrations the process's reactor holds now (futures pending on a ring), for tests and
/// diagnostics.
#[must_use]
pub fn pending_waits() -> usize {
    reactor::reactor().waiting()
}

/// Wake-ups the process's reactor delivered so far (a watched word changed, or a deadline
/// passed with an ending to report), for tests and diagnostics.
#[must_use]
pub fn wakeups() -> u64 {
    reactor::reactor().woken()
}

/// Whether the process's reactor sleeps in `futex_waitv` (`true`) or polls (`false`: an older
/// kernel, another platform, or `SHMRING_ASYNC_POLL=1`).
#[must_use]
pub fn uses_futex_waitv() -> bool {
    reactor::reactor().backend() == reactor::Backend::Waitv
}

// The rustdoc links above name these.
const _: Option<(&Subscriber, &Publisher)> = None;
