//! The io_uring path (Linux >= 6.7): futex waits armed in an io_uring whose fd the runtime's own
//! event loop polls, so that a publish in another process wakes the runtime's thread directly
//! instead of the helper thread first.
//!
//! While a [`Driver`](crate::asyncio::Driver) lives, [`Reactor::register`] arms an
//! `IORING_OP_FUTEX_WAIT` on the registered word (shared futex, `FUTEX2_SIZE_U32` without
//! `FUTEX2_PRIVATE`, as the blocking waits: a producer in another process wakes it through the
//! page) instead of adding the word to the helper's `futex_waitv` list. A futex wake completes
//! the request; the ring's fd turns readable; the runtime's event loop (tokio's `epoll`,
//! async-io's, asyncio's) wakes its own thread and calls [`Reactor::dispatch_uring`], which reaps
//! the completions and wakes the wakers on that thread. The helper thread still keeps each
//! entry's deadline (the publisher's liveness) and, when an armed entry's deadline passes,
//! reaps completions itself, so a driver that stops being polled costs latency (at most a
//! liveness period), never a lost wake-up. The last `Driver` dropped hands every armed entry
//! back to the helper.
//!
//! Locks: the reactor's `state` before the ring's, never the other way round (dispatch reaps
//! under the ring's lock alone, then takes `state`).

use std::io;
use std::os::fd::{AsRawFd as _, RawFd};
use std::sync::{Mutex, MutexGuard};

use io_uring::{opcode, squeue, IoUring};

use super::{wake_all, Reactor, State, Token, Word};

/// `user_data` of the cancel requests (their completions are ignored); the futex waits carry
/// their entry's token, which never has this bit.
const CANCEL: u64 = 1 << 63;

/// `FUTEX_BITSET_MATCH_ANY` (linux/futex.h): the mask a plain `FUTEX_WAKE` matches.
const MATCH_ANY: u64 = 0xffff_ffff;

/// Submission queue entries (each registration submits at once, so a few are in the queue at
/// most; the requests in flight are not bounded by it).
const ENTRIES: u32 = 256;

/// The reactor's io_uring.
pub(crate) struct Uring {
    ring: Mutex<IoUring>,
    fd: RawFd,
}

/// Why the io_uring path is unavailable, as an [`io::Error`].
fn unsupported(what: &str, e: &io::Error) -> io::Error {
    io::Error::new(
        io::ErrorKind::Unsupported,
        format!("io_uring futex waits unavailable ({what}: {e})"),
    )
}

impl Uring {
    /// A new ring, if the kernel offers io_uring (not `ENOSYS`, not disabled by
    /// `kernel.io_uring_disabled`: `EPERM`) and its `FUTEX_WAIT` operation (Linux >= 6.7).
    ///
    /// No setup flags. `COOP_TASKRUN` was measured not better (docs/benchmarks.md, "Where the
    /// current-thread runtime's slow runs lose time"): a parked runtime thread is woken the
    /// same way, and a running one would post a completion only at its next syscall, which
    /// no other thread can do for it. `SINGLE_ISSUER`/`DEFER_TASKRUN` do not fit: waits are
    /// armed by whichever thread polls a future, cancelled by a detaching one, and the helper
    /// must be able to reap a stalled driver's completions.
    pub(crate) fn new() -> io::Result<Self> {
        let ring = IoUring::new(ENTRIES).map_err(|e| unsupported("io_uring_setup", &e))?;
        let mut probe = io_uring::Probe::new();
        ring.submitter()
            .register_probe(&mut probe)
            .map_err(|e| unsupported("probe", &e))?;
        if !probe.is_supported(opcode::FutexWait::CODE) {
            return Err(unsupported(
                "probe",
                &io::Error::other("IORING_OP_FUTEX_WAIT not offered (Linux < 6.7)"),
            ));
        }
        let fd = ring.as_raw_fd();
        Ok(Self {
            ring: Mutex::new(ring),
            fd,
        })
    }

    /// The ring's fd (readable while completions wait to be reaped).
    pub(crate) fn fd(&self) -> RawFd {
        self.fd
    }

    fn lock(&self) -> MutexGuard<'_, IoUring> {
        // Nothing under this lock leaves the ring half-changed on a panic: keep going.
        self.ring
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Pushes `entries` and submits them; false when the kernel took none.
    fn submit(&self, entries: &[squeue::Entry]) -> bool {
        let mut ring = self.lock();
        for e in entries {
            // SAFETY: the entries are futex waits on words that their reactor entries keep
            // mapped until the wait is cancelled or completes (the kernel reads the word once,
            // at issue, inside the `submit` below, while the caller holds the reactor's state
            // lock), or cancels, which point at nothing.
            while unsafe { ring.submission().push(e) }.is_err() {
                // Full: hand the queued ones to the kernel first.
                if ring.submit().is_err() {
                    return false;
                }
            }
        }
        ring.submit().is_ok()
    }

    /// Arms a futex wait on `word` for the value `expected`, completing with `token`.
    pub(super) fn arm(&self, word: Word, expected: u32, token: Token) -> bool {
        let wait = opcode::FutexWait::new(
            word.0.cast(),
            u64::from(expected),
            MATCH_ANY,
            rustix::thread::futex::WaitFlags::SIZE_U32.bits(),
        )
        .build()
        .user_data(token.0);
        self.submit(&[wait])
    }

    /// Cancels the armed waits of `tokens` (best effort: one that completed meanwhile reports
    /// `ENOENT`, ignored).
    pub(super) fn cancel(&self, tokens: &[Token]) {
        if tokens.is_empty() {
            return;
        }
        let cancels: Vec<squeue::Entry> = tokens
            .iter()
            .map(|t| {
                opcode::AsyncCancel::new(t.0)
                    .build()
                    .user_data(CANCEL | t.0)
            })
            .collect();
        let _ = self.submit(&cancels);
    }

    /// Takes every completion: `(token, result)` of the futex waits.
    fn reap(&self) -> Vec<(Token, i32)> {
        let mut ring = self.lock();
        ring.completion()
            .filter(|c| c.user_data() & CANCEL == 0)
            .map(|c| (Token(c.user_data()), c.result()))
            .collect()
    }
}

/// `ECANCELED`: the wait's submitting thread exited (the kernel cancels its requests).
const ECANCELED: i32 = -(rustix::io::Errno::CANCELED.raw_os_error());

impl Reactor {
    /// The io_uring, made by the first driver (`Err`: unavailable here, with the reason).
    pub(crate) fn uring(&self) -> io::Result<&Uring> {
        match self
            .uring
            .get_or_init(|| Uring::new().map_err(|e| e.to_string()))
        {
            Ok(u) => Ok(u),
            Err(why) => Err(io::Error::new(io::ErrorKind::Unsupported, why.clone())),
        }
    }

    /// Counts a driver in: registrations arm io_uring waits from now on.
    pub(crate) fn attach(&self) -> io::Result<RawFd> {
        let fd = self.uring()?.fd();
        self.lock().drivers += 1;
        Ok(fd)
    }

    /// Counts a driver out; the last one hands every armed entry back to the helper.
    pub(crate) fn detach(&self) {
        let mut st = self.lock();
        st.drivers = st.drivers.saturating_sub(1);
        if st.drivers > 0 {
            return;
        }
        let mut tokens = Vec::new();
        for (t, e) in &mut st.entries {
            if core::mem::take(&mut e.armed) {
                tokens.push(*t);
            }
        }
        if let Some(Ok(u)) = self.uring.get() {
            u.cancel(&tokens);
        }
        let kick = core::mem::replace(&mut st.idle, false);
        drop(st);
        if kick {
            self.kick_helper();
        }
    }

    /// Arms `token`'s entry (just inserted in `st`) in the io_uring when a driver is attached;
    /// whether it did (else the helper waits for it).
    pub(super) fn try_arm(&self, st: &mut State, token: Token) -> bool {
        if st.drivers == 0 {
            return false;
        }
        let (Some(Ok(u)), Some(e)) = (self.uring.get(), st.entries.get_mut(&token)) else {
            return false;
        };
        e.armed = u.arm(e.word, e.expected, token);
        e.armed
    }

    /// Cancels the io_uring wait of a removed entry that was armed.
    pub(super) fn disarm(&self, tokens: &[Token]) {
        if let Some(Ok(u)) = self.uring.get() {
            u.cancel(tokens);
        }
    }

    /// Reaps the io_uring's completions and wakes, on the calling thread, the wakers of the
    /// entries whose word changed; re-arms the ones woken without a change; hands the ones
    /// whose wait failed to the helper. Returns the completions reaped.
    pub(crate) fn dispatch_uring(&self) -> usize {
        let Some(Ok(u)) = self.uring.get() else {
            return 0;
        };
        let done = u.reap();
        if done.is_empty() {
            return 0;
        }
        let mut wakers = Vec::new();
        let mut st = self.lock();
        let mut to_helper = false;
        for &(token, res) in &done {
            let Some(e) = st.entries.get_mut(&token) else {
                continue; // Woken by the in-process shortcut, or cancelled.
            };
            if !e.armed {
                continue; // Handed to the helper meanwhile.
            }
            if e.load() != e.expected {
                if let Some(e) = st.entries.remove(&token) {
                    wakers.push(e.waker);
                }
            } else if res == 0 || res == ECANCELED {
                // Woken without a change, or its submitting thread exited: wait again (from
                // this thread), or let the helper wait.
                let (word, expected) = (e.word, e.expected);
                let again = st.drivers > 0 && u.arm(word, expected, token);
                if let Some(e) = st.entries.get_mut(&token) {
                    e.armed = again;
                }
                to_helper |= !again;
            } else {
                // EFAULT, EINVAL, an EAGAIN without a change: the helper's scan decides.
                e.armed = false;
                to_helper = true;
            }
        }
        st.woken += wakers.len() as u64;
        st.uring_woken += wakers.len() as u64;
        self.count(&st);
        let kick = to_helper && core::mem::replace(&mut st.idle, false);
        drop(st);
        wake_all(&mut wakers);
        if kick {
            self.kick_helper();
        }
        done.len()
    }

    /// Wake-ups delivered by [`dispatch_uring`](Self::dispatch_uring).
    pub(crate) fn uring_woken(&self) -> u64 {
        self.lock().uring_woken
    }
}
