//! [`Driver`]: the io_uring readiness source a runtime polls so that its own thread is woken
//! by the kernel (Linux >= 6.7).

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};

use super::reactor::{reactor, Reactor};

/// Lets a runtime's own thread be woken by a publish, in this process or another, without the
/// reactor's helper thread in between (Linux >= 6.7; io_uring's futex wait).
///
/// While a `Driver` lives, every future of this process that waits on a ring arms an
/// `IORING_OP_FUTEX_WAIT` on the ring's futex word (shared, as the blocking waits) in the
/// reactor's io_uring instead of handing the word to the helper thread. The io_uring's fd
/// ([`AsRawFd`], [`AsFd`]) is readable while completions wait: register it with the runtime's
/// event loop (tokio's `AsyncFd`, async-io's `Async`, Python's `loop.add_reader`) and call
/// [`dispatch`](Self::dispatch) when it is readable. `dispatch` wakes the futures on the
/// calling thread, so a publish costs the runtime's thread one kernel wake-up, as it costs a
/// thread blocked in `recv`.
///
/// The helper thread stays: it keeps each wait's liveness deadline (a dead publisher still ends
/// a pending `recv_async` with `Disconnected`), and if the fd is not polled it reaps the
/// completions itself at the next deadline (a liveness period, 20 ms): a stalled driver costs
/// latency, never a lost message. Dropping the last `Driver` hands every armed wait back to the
/// helper. Futures stay runtime-agnostic and cancel-safe exactly as without a driver.
///
/// One driver per event loop: every `Driver` of the process shares one io_uring (the same
/// fd), so two loops may both poll it; whichever dispatches first wakes the futures.
///
/// # Errors
///
/// [`Driver::new`] fails with [`io::ErrorKind::Unsupported`] where io_uring or its futex wait
/// is unavailable (`ENOSYS`; `EPERM` under `kernel.io_uring_disabled`; a kernel before 6.7;
/// the `portable` backend, whose producers wake no futex): the futures then keep the helper
/// thread's `futex_waitv`, which needs nothing from the runtime.
///
/// # Examples
///
/// On tokio (feature `net` for `AsyncFd`):
///
/// ```no_run
/// # async fn run() -> std::io::Result<()> {
/// use tokio::io::unix::AsyncFd;
/// let driver = ring_os::asyncio::Driver::new()?;
/// // SAFETY: a driver's fd is the reactor's io_uring, open until the process exits.
/// let driver = unsafe { AsyncFd::register(driver) }.map_err(std::io::Error::from)?;
/// tokio::spawn(async move {
///     loop {
///         let Ok(mut ready) = driver.readable().await else { break };
///         ready.clear_ready(); // before reaping: a completion after this is a new edge
///         ready.get_inner().dispatch();
///     }
/// });
/// // ... `subscriber.recv_async(&mut buf).await` anywhere on this runtime ...
/// # Ok(()) }
/// ```
pub struct Driver {
    reactor: &'static Reactor,
    fd: RawFd,
}

impl Driver {
    /// Attaches a driver to the process's reactor (making its io_uring on first use).
    ///
    /// # Errors
    ///
    /// [`io::ErrorKind::Unsupported`] where io_uring's futex wait is unavailable (see the type's
    /// docs), with the kernel's reason in the message.
    pub fn new() -> io::Result<Self> {
        Self::on(reactor())
    }

    /// A driver of `reactor` (tests use their own reactors).
    pub(crate) fn on(reactor: &'static Reactor) -> io::Result<Self> {
        if cfg!(ring_portable) {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "the portable backend's producers wake no futex",
            ));
        }
        let fd = reactor.attach()?;
        Ok(Self { reactor, fd })
    }

    /// Reaps the completed futex waits and wakes their futures on the calling thread (waits
    /// woken without a change are armed again); returns the completions reaped (0: nothing
    /// was ready). Call it when the fd is readable; calling it at other times is harmless.
    pub fn dispatch(&self) -> usize {
        self.reactor.dispatch_uring()
    }

    /// Futures woken through drivers' [`dispatch`](Self::dispatch) so far in this process
    /// (for tests and diagnostics; the helper thread's wake-ups are not counted).
    #[must_use]
    pub fn wakeups(&self) -> u64 {
        self.reactor.uring_woken()
    }
}

impl core::fmt::Debug for Driver {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Driver").field("fd", &self.fd).finish()
    }
}

impl AsRawFd for Driver {
    fn as_raw_fd(&self) -> RawFd {
        self.fd
    }
}

impl AsFd for Driver {
    fn as_fd(&self) -> BorrowedFd<'_> {
        // SAFETY: the fd is the reactor's io_uring, which is never closed (the reactor lives
        // until the process exits), so it outlives `self`.
        unsafe { BorrowedFd::borrow_raw(self.fd) }
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        self.reactor.detach();
    }
}
