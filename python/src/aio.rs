//! asyncio waits without a thread per wait: `Consumer.recv_async`, `Consumer.pin_async` and
//! the queue's `Receiver.get_async` (the coroutines are in `pysrc/shmring/_aio.py`).
//!
//! A waiting coroutine polls its consumer's `ring_os::asyncio::ReadyWait` (ring-os's readiness primitive: the
//! `wait_ready` handshake, then a registration with ring-os's one reactor thread per process,
//! which sleeps in `futex_waitv` on the rings' futex words). The waker registered there is the
//! consumer's [`Waiters`]: it calls no Python and never takes the GIL — it appends each
//! waiting coroutine's token to its event loop's [`Signal`] and, when that list was empty,
//! writes to the signal's readiness fd (an eventfd on Linux, a pipe on the other Unixes). The
//! loop watches that fd with `loop.add_reader`; its callback drains the tokens and resolves
//! the coroutines' futures, which then try a non-blocking read.
//!
//! On Linux >= 6.7 each loop's hub also holds a [`Driver`] (ring-os's io_uring driver) and
//! watches its fd: the waits are then io_uring futex waits, and the loop's own callback reaps
//! them (`Notifier::dispatch`), which runs the same [`Waiters`] wakers on the loop's thread and
//! takes the tokens at once, without ringing the loop's own eventfd for them: a publish in another process wakes the loop through the kernel, not
//! through the reactor thread and the eventfd (`SHMRING_ASYNC_DRIVER=0` turns it off).
//!
//! Between polls the subscriber stays in the consumer (no future borrows it), so blocking
//! calls, `close()` from another thread and other coroutines use it as before. What a pending
//! wait holds (its reactor registration and its count in `consumer_waiters`) is given back by
//! the next poll, by [`Waiters`]' last coroutine leaving (`_cancel_ready`, from the
//! coroutine's `finally`: also when its task is cancelled), or when the consumer's state is
//! dropped.
//!
//! Windows has no readiness fd an asyncio loop can watch in general (the default proactor
//! loop has no `add_reader`): [`Notifier`] raises `NotImplementedError` there.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::Wake;

use pyo3::prelude::*;

/// Locks `m`; nothing panics under these locks, so a poisoned one is still consistent.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// An event loop's doorbell: the tokens of its coroutines that were woken, and the fd the loop
/// watches. Shared (`Arc`) by the loop's `Notifier` and the consumers' [`Waiters`], so the fd
/// is closed only when nothing can write to it any more (never a write to a reused fd number).
pub(crate) struct Signal {
    /// Tokens woken since the loop last took them.
    ready: Mutex<Ready>,
    #[cfg(unix)]
    fd: fd::Doorbell,
}

/// A [`Signal`]'s woken tokens.
#[derive(Default)]
struct Ready {
    tokens: Vec<u64>,
    /// The loop's own thread is dispatching its driver ([`Notifier::dispatch`]) and takes the
    /// tokens right after: no doorbell for them (it would cost the loop an eventfd write and
    /// a read for what it takes anyway).
    quiet: bool,
}

impl Signal {
    /// Marks `token` woken; rings the doorbell when the list was empty and the loop is not
    /// dispatching (the loop drains the fd before it takes the list, so a token added to a
    /// non-empty list is taken with the rest; one added while it dispatches is taken when the
    /// dispatch ends, under this lock). Calls no Python: runs on the reactor's thread too.
    fn notify(&self, token: u64) {
        let mut ready = lock(&self.ready);
        let ring = ready.tokens.is_empty() && !ready.quiet;
        ready.tokens.push(token);
        drop(ready);
        if ring {
            #[cfg(unix)]
            self.fd.ring();
        }
    }

    /// Takes the tokens woken so far, ending a quiet dispatch.
    fn take(&self) -> Vec<u64> {
        let mut ready = lock(&self.ready);
        ready.quiet = false;
        core::mem::take(&mut ready.tokens)
    }
}

/// Ends a quiet dispatch however the dispatch returns.
struct Loud<'a>(&'a Signal);

impl Drop for Loud<'_> {
    fn drop(&mut self) {
        lock(&self.0.ready).quiet = false;
    }
}

/// The coroutines waiting on one consumer: the waker its `ReadyWait` registers. Woken, it
/// hands every token to its loop's [`Signal`] and forgets them (each coroutine adds itself
/// again when it polls again).
#[derive(Default)]
pub(crate) struct Waiters {
    list: Mutex<Vec<(Arc<Signal>, u64)>>,
}

impl Waiters {
    /// Adds the coroutine `token` of the loop `signal` (once).
    pub(crate) fn add(&self, signal: &Arc<Signal>, token: u64) {
        let mut list = lock(&self.list);
        if !list
            .iter()
            .any(|(s, t)| *t == token && Arc::ptr_eq(s, signal))
        {
            list.push((Arc::clone(signal), token));
        }
    }

    /// Removes the coroutine `token` of `signal`; whether no coroutine is left.
    pub(crate) fn remove(&self, signal: &Arc<Signal>, token: u64) -> bool {
        let mut list = lock(&self.list);
        list.retain(|(s, t)| !(*t == token && Arc::ptr_eq(s, signal)));
        list.is_empty()
    }

    /// Wakes every waiting coroutine (a message, the stream's end, `close()`).
    pub(crate) fn wake_all(&self) {
        let woken = core::mem::take(&mut *lock(&self.list));
        for (signal, token) in woken {
            signal.notify(token);
        }
    }
}

impl Wake for Waiters {
    fn wake(self: Arc<Self>) {
        self.wake_all();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.wake_all();
    }
}

/// What a consumer's `_poll_ready` found.
pub(crate) const READY: u8 = 0;
/// Registered: await the token's future.
pub(crate) const PENDING: u8 = 1;
/// A blocking call of another thread has the consumer: try again shortly.
pub(crate) const BUSY: u8 = 2;

/// An event loop's readiness fd and the tokens woken (one per loop, made by `shmring._aio`).
#[pyclass(module = "shmring", name = "_Notifier", frozen)]
pub(crate) struct Notifier {
    pub(crate) signal: Arc<Signal>,
}

#[pymethods]
impl Notifier {
    /// A new doorbell (an eventfd on Linux, a pipe on other Unixes); `NotImplementedError` on
    /// Windows.
    #[new]
    fn new() -> PyResult<Self> {
        #[cfg(unix)]
        {
            let fd = fd::Doorbell::new()
                .map_err(|e| pyo3::exceptions::PyOSError::new_err(e.to_string()))?;
            Ok(Self {
                signal: Arc::new(Signal {
                    ready: Mutex::default(),
                    fd,
                }),
            })
        }
        #[cfg(not(unix))]
        {
            Err(pyo3::exceptions::PyNotImplementedError::new_err(
                "shmring's asyncio waits need a readiness file descriptor (Linux, macOS, BSD); \
                 on Windows wait in a thread: loop.run_in_executor(None, consumer.recv)",
            ))
        }
    }

    /// The fd to watch with `loop.add_reader`.
    fn fileno(&self) -> i64 {
        #[cfg(unix)]
        {
            i64::from(self.signal.fd.raw())
        }
        #[cfg(not(unix))]
        {
            -1
        }
    }

    /// Empties the fd, then takes the tokens woken since the last call.
    fn drain(&self) -> Vec<u64> {
        #[cfg(unix)]
        self.signal.fd.drain();
        self.signal.take()
    }

    /// Runs `driver.dispatch()` (on the loop's thread, when the driver's fd is readable) and
    /// takes the tokens woken so far: those its dispatch wakes for this loop come back here
    /// without ringing the doorbell (the loop's fd is not made readable for them).
    fn dispatch(&self, driver: &Driver) -> Vec<u64> {
        lock(&self.signal.ready).quiet = true;
        let loud = Loud(&self.signal);
        driver.dispatch();
        drop(loud);
        self.signal.take()
    }
}

/// `shmring._shmring._Driver`: ring-os's io_uring driver (`ring_os::asyncio::Driver`, Linux >=
/// 6.7) for an event loop. While one lives, the consumers' waits are io_uring futex waits; the
/// loop watches `fileno()` with `add_reader` and calls `dispatch()`, which wakes the waiting
/// consumers' [`Waiters`] on the loop's own thread (so a publish in another process wakes the
/// loop through the kernel, not through ring-os's reactor thread). `OSError` where io_uring's
/// futex wait is unavailable, `NotImplementedError` off Linux: the loop then keeps the
/// reactor's path ([`Notifier`]).
#[pyclass(module = "shmring", name = "_Driver", frozen)]
pub(crate) struct Driver {
    #[cfg(target_os = "linux")]
    inner: ring_os::asyncio::Driver,
}

#[pymethods]
impl Driver {
    #[new]
    fn new() -> PyResult<Self> {
        #[cfg(target_os = "linux")]
        {
            let inner = ring_os::asyncio::Driver::new()
                .map_err(|e| pyo3::exceptions::PyOSError::new_err(e.to_string()))?;
            Ok(Self { inner })
        }
        #[cfg(not(target_os = "linux"))]
        {
            Err(pyo3::exceptions::PyNotImplementedError::new_err(
                "io_uring drivers are Linux only",
            ))
        }
    }

    /// The io_uring's fd, readable while completions wait (watch it with `loop.add_reader`).
    fn fileno(&self) -> i64 {
        #[cfg(target_os = "linux")]
        {
            use std::os::fd::AsRawFd as _;
            i64::from(self.inner.as_raw_fd())
        }
        #[cfg(not(target_os = "linux"))]
        {
            -1
        }
    }

    /// Reaps the completed waits and wakes their consumers' coroutines (through the loop's
    /// [`Notifier`] tokens); returns the completions reaped. Calls no Python.
    fn dispatch(&self) -> usize {
        #[cfg(target_os = "linux")]
        {
            self.inner.dispatch()
        }
        #[cfg(not(target_os = "linux"))]
        {
            0
        }
    }

    /// Coroutines' wake-ups delivered through drivers so far (tests).
    fn wakeups(&self) -> u64 {
        #[cfg(target_os = "linux")]
        {
            self.inner.wakeups()
        }
        #[cfg(not(target_os = "linux"))]
        {
            0
        }
    }
}

/// `shmring._shmring._async_pending()`: registrations ring-os's reactor holds now (tests).
#[pyfunction]
pub(crate) fn _async_pending() -> usize {
    ring_os::asyncio::pending_waits()
}

#[cfg(unix)]
mod fd {
    //! The readiness fd: an eventfd (Linux, Android) or a pipe (the other Unixes), both
    //! non-blocking and close-on-exec.
    use std::os::fd::{AsRawFd as _, OwnedFd, RawFd};

    pub(super) struct Doorbell {
        read: OwnedFd,
        /// The pipe's write end (`None`: an eventfd, written through `read`).
        write: Option<OwnedFd>,
    }

    impl Doorbell {
        #[cfg(any(target_os = "linux", target_os = "android"))]
        pub(super) fn new() -> rustix::io::Result<Self> {
            use rustix::event::{eventfd, EventfdFlags};
            let read = eventfd(0, EventfdFlags::CLOEXEC | EventfdFlags::NONBLOCK)?;
            Ok(Self { read, write: None })
        }

        #[cfg(not(any(target_os = "linux", target_os = "android")))]
        pub(super) fn new() -> rustix::io::Result<Self> {
            use rustix::fs::{fcntl_getfl, fcntl_setfl, OFlags};
            use rustix::io::{fcntl_setfd, FdFlags};
            let (read, write) = rustix::pipe::pipe()?;
            for fd in [&read, &write] {
                fcntl_setfd(fd, FdFlags::CLOEXEC)?;
                fcntl_setfl(fd, fcntl_getfl(fd)? | OFlags::NONBLOCK)?;
            }
            Ok(Self {
                read,
                write: Some(write),
            })
        }

        pub(super) fn raw(&self) -> RawFd {
            self.read.as_raw_fd()
        }

        /// Makes the fd readable. A full pipe (EAGAIN) is readable already; other errors
        /// cannot happen on a live fd we own.
        pub(super) fn ring(&self) {
            let fd = self.write.as_ref().unwrap_or(&self.read);
            let _ = rustix::io::write(fd, &1u64.to_ne_bytes());
        }

        /// Empties the fd: one read resets an eventfd; a pipe may hold several bytes, read
        /// until empty.
        pub(super) fn drain(&self) {
            let mut buf = [0u8; 64];
            if self.write.is_none() {
                let _ = rustix::io::read(&self.read, &mut buf);
                return;
            }
            while matches!(rustix::io::read(&self.read, &mut buf), Ok(n) if n > 0) {}
        }
    }
}
