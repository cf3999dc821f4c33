//! The reactor: one helper thread per process that waits on many futex words at once and wakes
//! the [`Waker`] registered for each word that changed (or whose deadline passed).
//!
//! A future registers `(word, expected, waker, deadline)` after the participant's own
//! handshake (see `wait.rs`) and returns `Pending`; the helper wakes it when the word no longer
//! holds `expected`, or at the deadline (the liveness period, when the future re-checks its
//! peers as the blocking calls do between wait slices). A subscriber's entry also names its
//! ring: at the deadline the helper asks the kernel itself whether the ring's publisher is alive
//! (one probe per ring, however many subscribers wait on it) and wakes the future only when
//! the publisher is gone or the segment was cut, so idle subscribers cost no wake-ups.
//!
//! A publisher in this process does not wait for the helper: the ring's `notify` calls
//! [`wake_local`] before its futex wake, which wakes the entries on that word at once on the
//! publishing thread (the futex wake still follows, for other processes and as the path that
//! loses nothing).
//!
//! With an `asyncio::Driver` attached (Linux >= 6.7, `reactor/uring.rs`), a registration arms an
//! io_uring futex wait instead: the runtime that polls the driver's fd reaps it and wakes the
//! waker on its own thread; the helper keeps only the entry's deadline (and reaps then, in
//! case the driver stopped), and takes the entries back when the last driver is dropped.
//!
//! The helper's backends, chosen once per process:
//! - **`futex_waitv`** (Linux >= 5.16): the helper sleeps in one system call on up to 128
//!   words: its own kick word plus up to 127 distinct registered words (beyond that it waits
//!   on the first 127 with a 1 ms timeout and polls the rest). Shared futexes, as the blocking
//!   waits use, so a producer in another process wakes it through the page.
//! - **wait semaphores** (Windows): the segment's named semaphores that the blocking waits use
//!   (`wait/windows.rs`): the helper counts itself on the bucket of every registered word, fences,
//!   re-checks the words, and sleeps in `WaitForMultipleObjects` on the buckets' semaphores and
//!   its own kick event (at most 64 handles; beyond that, or for a word outside any segment, it
//!   also wakes every millisecond and polls).
//! - **polling** (older kernels: `ENOSYS`; other platforms; `SHMRING_ASYNC_POLL=1`): the helper
//!   loads every word, then sleeps on a condition variable for 50 µs doubling to 1 ms while
//!   nothing changes; a registration wakes it at once.
//!
//! # References
//!
//! - futex2 `futex_waitv(2)`: <https://docs.kernel.org/userspace-api/futex2.html> (Linux 5.16).
//! - The same shape as a runtime's I/O driver (tokio's `mio` thread, async-io's "async-io"
//!   thread): one blocking call for all registered sources, wakers collected and woken outside
//!   the lock.

use core::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use core::task::Waker;
use core::time::Duration;
use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};
use std::time::Instant;

use crate::liveness::lock::{Liveness, Role};
use crate::raw::{Mapping, LIVENESS_PERIOD};
use crate::segment::sigbus::memory_truncated;

mod sleep;
#[cfg(target_os = "linux")]
mod uring;

/// Words one `futex_waitv` call can wait on (`FUTEX_WAITV_MAX`).
#[cfg(any(target_os = "linux", target_os = "android"))]
const WAITV_MAX: usize = 128;

/// The polling backend's first and longest nap.
const NAP_MIN: Duration = Duration::from_micros(50);
const NAP_MAX: Duration = Duration::from_millis(1);

/// A registration's handle, to cancel it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Token(u64);

/// A word's address. It is read only while the entry that holds it (and its `keep`) lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Word(*const AtomicU32);

// SAFETY: the pointer is only dereferenced (atomically) by `Entry::load`, while the entry's
// `keep` keeps the memory behind it alive; an atomic is safe to read from any thread.
unsafe impl Send for Word {}

/// One registered wait.
struct Entry {
    word: Word,
    expected: u32,
    waker: Waker,
    deadline: Instant,
    /// The ring whose publisher the waiter needs alive: checked here at the deadline.
    watch: Option<Arc<Mapping>>,
    /// Keeps the memory of `word` mapped for as long as the entry is registered (held; the
    /// semaphore backend clones it while it sleeps).
    _keep: Arc<dyn Send + Sync>,
    /// An io_uring futex wait is armed for it (a driver reaps it; the helper does not sleep on
    /// its word, only keeps its deadline).
    armed: bool,
}

impl Entry {
    fn load(&self) -> u32 {
        // SAFETY: `register`'s caller promised that `word` stays valid while `keep` lives, and
        // the entry owns `keep`.
        let word = unsafe { &*self.word.0 };
        // Acquire: pairs with the waker's Release bump of the word (the producer's P8, a
        // consumer's C11), as the blocking wait's load does.
        word.load(Ordering::Acquire)
    }
}

/// Whether a subscriber waiting on `ring` must be woken to report an ending the ring's words do
/// not show: its publisher's process died (a free role lock), or the segment was truncated.
fn publisher_gone(ring: &Mapping) -> bool {
    use ring_core::Memory as _;
    // Relaxed: an identity to check, as `Consumer::producer_owner`.
    let owner = ring
        .producer_line()
        .owner
        .load(core::sync::atomic::Ordering::Relaxed);
    memory_truncated(ring, true)
        || (owner != 0 && crate::liveness::roles::liveness(ring, Role::Producer) == Liveness::Dead)
}

/// Wakes the helper sleeping in `futex_waitv` on its kick word (a plain futex wake, whatever
/// backend the rings' own words use).
#[cfg(any(target_os = "linux", target_os = "android"))]
fn wake_kick(kick: &AtomicU32) {
    use rustix::thread::futex;
    // Shared, as the helper's wait on it (FUTEX2 flags without PRIVATE).
    let _ = futex::wake(kick, futex::Flags::empty(), 1);
}

/// No `futex_waitv` here: the helper turns to polling on its first sleep, and polls.
#[cfg(not(any(target_os = "linux", target_os = "android")))]
fn wake_kick(_kick: &AtomicU32) {}

/// Wakes (and empties) `wakers`. A waker is the executor's code: one that panics must not end
/// the helper thread, which every other pending future of the process relies on.
fn wake_all(wakers: &mut Vec<Waker>) {
    for w in wakers.drain(..) {
        let _ = std::panic::catch_unwind(core::panic::AssertUnwindSafe(|| w.wake()));
    }
}

/// The backend that sleeps on the words' own wait objects: `futex_waitv` on Linux. The
/// portable backend's producers wake no futex (they use the platform's address wait): poll
/// there, as on every platform without futex_waitv.
#[cfg(all(any(target_os = "linux", target_os = "android"), not(ring_portable)))]
fn native_backend() -> Backend {
    Backend::Waitv
}

/// The backend that sleeps on the words' own wait objects: the segments' wait semaphores.
#[cfg(windows)]
fn native_backend() -> Backend {
    Backend::Sems
}

/// No wait objects the helper can sleep on for many words at once: it polls.
#[cfg(not(any(
    all(any(target_os = "linux", target_os = "android"), not(ring_portable)),
    windows
)))]
fn native_backend() -> Backend {
    Backend::Poll
}

/// The semaphore backend's kick event (auto-reset, unnamed); `None` when it cannot be made.
#[cfg(windows)]
fn new_event() -> Option<crate::windows::sys::Handle> {
    // SAFETY: no attributes, no name: a private auto-reset event, initially clear.
    let raw = unsafe {
        windows_sys::Win32::System::Threading::CreateEventW(
            core::ptr::null(),
            0,
            0,
            core::ptr::null(),
        )
    };
    crate::windows::sys::Handle::new(raw)
}

/// Which way the helper sleeps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Backend {
    /// `futex_waitv` on every registered word at once.
    Waitv,
    /// Load every word, nap, repeat.
    Poll,
    /// The segments' wait semaphores, many at once (Windows).
    #[cfg(windows)]
    Sems,
}

struct State {
    entries: HashMap<Token, Entry>,
    next: u64,
    /// The helper is about to sleep or sleeping on the list it built: a registration must
    /// kick it. Set and cleared under the lock.
    idle: bool,
    backend: Backend,
    /// Wake-ups delivered (word changed or deadline).
    woken: u64,
    /// Sleeps of the semaphore backend that a bucket's semaphore ended (for its test).
    #[cfg(windows)]
    sem_wakes: u64,
    /// Live drivers (`asyncio::Driver`): while any, registrations arm io_uring waits.
    #[cfg(target_os = "linux")]
    drivers: usize,
    /// Wake-ups delivered by a driver's dispatch (the io_uring path).
    #[cfg(target_os = "linux")]
    uring_woken: u64,
    /// When the sleeping helper wakes by itself (its nearest deadline; `None`: never), so a
    /// registration armed in the io_uring kicks it only for an earlier deadline.
    sleep_until: Option<Instant>,
}

/// The registry and its helper thread.
pub(crate) struct Reactor {
    state: Mutex<State>,
    /// Bumped to kick the `futex_waitv` helper out of its sleep (a registration came in).
    kick: AtomicU32,
    /// Wakes the polling helper.
    cond: Condvar,
    /// `entries.len()`, stored under the lock after each change: lets [`wake_local`] skip
    /// the lock when nothing waits.
    registered: AtomicUsize,
    /// Kicks the semaphore backend's helper (an auto-reset event; `None`: polling).
    #[cfg(windows)]
    event: Option<crate::windows::sys::Handle>,
    /// The io_uring of the driver path, made by the first driver (`Err`: why it cannot be).
    #[cfg(target_os = "linux")]
    uring: OnceLock<Result<uring::Uring, String>>,
}

static REACTOR: OnceLock<&'static Reactor> = OnceLock::new();

/// The process's reactor; the helper thread starts with the first registration.
pub(crate) fn reactor() -> &'static Reactor {
    REACTOR.get_or_init(|| {
        let forced = std::env::var_os("SHMRING_ASYNC_POLL").is_some_and(|v| v != "0");
        let backend = if forced {
            Backend::Poll
        } else {
            native_backend()
        };
        Reactor::start(backend)
    })
}

/// Wakes at once, on the calling thread, the futures of this process registered on `word`
/// that it changed: the in-process shortcut of a publish (or a consumer's progress), called
/// by the ring's `notify` before its futex wake. The futex wake still follows, for waiters in
/// other processes and as the path that loses nothing (a registration this misses, the helper
/// finds changed). Costs one load when no future of the process waits.
pub(crate) fn wake_local(word: &AtomicU32) {
    if let Some(r) = REACTOR.get() {
        r.wake_word(word);
    }
}

impl Reactor {
    /// A reactor with its helper thread (leaked: it serves the process until exit).
    pub(crate) fn start(backend: Backend) -> &'static Self {
        let reactor: &'static Self = Box::leak(Box::new(Self {
            state: Mutex::new(State {
                entries: HashMap::new(),
                next: 0,
                idle: false,
                backend,
                woken: 0,
                #[cfg(windows)]
                sem_wakes: 0,
                #[cfg(target_os = "linux")]
                drivers: 0,
                #[cfg(target_os = "linux")]
                uring_woken: 0,
                sleep_until: None,
            }),
            kick: AtomicU32::new(0),
            cond: Condvar::new(),
            registered: AtomicUsize::new(0),
            #[cfg(windows)]
            event: new_event(),
            #[cfg(target_os = "linux")]
            uring: OnceLock::new(),
        }));
        // Without its kick event the semaphore backend cannot be interrupted: poll instead.
        #[cfg(windows)]
        if backend == Backend::Sems && reactor.event.is_none() {
            reactor.lock().backend = Backend::Poll;
        }
        // A reactor whose helper cannot start would leave every future pending forever:
        // failing to spawn one thread is as fatal as failing to allocate.
        std::thread::Builder::new()
            .name("shmring-reactor".into())
            .spawn(move || reactor.run())
            .expect("ring-os: cannot start the async reactor's helper thread");
        reactor
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock leaves the map consistent (no user code runs under
        // it; wakers are woken after unlocking): keep going.
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Wakes `waker` once `word` no longer holds `expected`, or at `deadline`. The word is
    /// checked again by the helper before it sleeps, so a change that happened before this
    /// call is not lost.
    ///
    /// # Safety
    ///
    /// `word` must stay valid for atomic reads for as long as `keep` lives (it points into the
    /// mapping `keep` owns, or into `keep` itself).
    pub(crate) unsafe fn register(
        &self,
        word: &AtomicU32,
        expected: u32,
        waker: Waker,
        deadline: Instant,
        watch: Option<Arc<Mapping>>,
        keep: Arc<dyn Send + Sync>,
    ) -> Token {
        let mut st = self.lock();
        let token = Token(st.next);
        st.next += 1;
        st.entries.insert(
            token,
            Entry {
                word: Word(core::ptr::from_ref(word)),
                expected,
                waker,
                deadline,
                watch,
                _keep: keep,
                armed: false,
            },
        );
        self.count(&st);
        // Armed in the io_uring: the helper needs a kick only to keep an earlier deadline.
        #[cfg(target_os = "linux")]
        let armed = self.try_arm(&mut st, token);
        #[cfg(not(target_os = "linux"))]
        let armed = false;
        let kick = if armed && st.sleep_until.is_some_and(|t| t <= deadline) {
            false
        } else {
            core::mem::replace(&mut st.idle, false)
        };
        drop(st);
        if kick {
            self.kick_helper();
        }
        token
    }

    /// Wakes the idle helper (a registration it must see, or an entry handed back to it).
    fn kick_helper(&self) {
        let backend = self.lock().backend;
        {
            match backend {
                Backend::Waitv => {
                    // Release: pairs with the helper's Acquire load of `kick` before it
                    // sleeps; the bump makes its `futex_waitv` return at once (or not sleep).
                    self.kick.fetch_add(1, Ordering::Release);
                    wake_kick(&self.kick);
                }
                Backend::Poll => self.cond.notify_one(),
                #[cfg(windows)]
                Backend::Sems => {
                    if let Some(event) = &self.event {
                        // SAFETY: an open event handle, owned by the reactor (which lives for
                        // the process). Auto-reset: it stays set until the helper's next wait
                        // returns on it, so a kick before that wait is not lost.
                        unsafe { windows_sys::Win32::System::Threading::SetEvent(event.raw()) };
                    }
                }
            }
        }
    }

    /// Forgets a registration (its waker is not woken); false when it was gone already
    /// (woken, or never there).
    pub(crate) fn cancel(&self, token: Token) -> bool {
        let mut st = self.lock();
        let gone = st.entries.remove(&token);
        self.count(&st);
        #[cfg(target_os = "linux")]
        if gone.as_ref().is_some_and(|e| e.armed) {
            self.disarm(&[token]);
        }
        gone.is_some()
    }

    /// Stores `st.entries.len()` for [`wake_local`] (call under the lock, after a change).
    fn count(&self, st: &State) {
        // Relaxed: a hint for skipping the lock; `wake_local` misses nothing it must not (the
        // futex wake after it reaches every registration).
        self.registered.store(st.entries.len(), Ordering::Relaxed);
    }

    /// Wakes (and forgets) the entries on `word` whose value changed; see [`wake_local`].
    fn wake_word(&self, word: &AtomicU32) {
        // Relaxed: see `count`.
        if self.registered.load(Ordering::Relaxed) == 0 {
            return;
        }
        let target = Word(core::ptr::from_ref(word));
        let mut wakers = Vec::new();
        let mut st = self.lock();
        st.entries.retain(|_, e| {
            // An armed entry is left to its io_uring wait, which the futex wake after this
            // completes: woken here too, the runtime would also reap a stale completion (one
            // more event-loop wake-up per message; measured in docs/benchmarks.md).
            let woken = e.word == target && !e.armed && e.load() != e.expected;
            if woken {
                wakers.push(e.waker.clone());
            }
            !woken
        });
        st.woken += wakers.len() as u64;
        self.count(&st);
        drop(st);
        wake_all(&mut wakers);
    }

    /// Registrations waiting now.
    pub(crate) fn waiting(&self) -> usize {
        self.lock().entries.len()
    }

    /// Wake-ups delivered so far.
    pub(crate) fn woken(&self) -> u64 {
        self.lock().woken
    }

    /// Sleeps of the semaphore backend that a bucket's semaphore ended.
    #[cfg(all(windows, test))]
    pub(crate) fn sem_wakes(&self) -> u64 {
        self.lock().sem_wakes
    }

    /// The backend in use (a `futex_waitv` that the kernel refuses turns into polling).
    pub(crate) fn backend(&self) -> Backend {
        self.lock().backend
    }

    /// The helper thread's loop.
    fn run(&self) {
        let mut nap = NAP_MIN;
        let mut wakers = Vec::new();
        loop {
            let mut st = self.lock();
            let now = Instant::now();
            st.idle = false;
            // Wake every entry whose word changed or whose deadline passed (for a watched ring:
            // whose publisher is gone; one probe per ring per scan).
            let mut gone: HashMap<usize, bool> = HashMap::new();
            // Armed entries ended by a deadline (their io_uring waits to cancel), and whether an
            // armed entry's deadline passed (a driver may have stopped reaping: reap here).
            let mut disarm = Vec::new();
            let mut armed_due = false;
            st.entries.retain(|t, e| {
                let due = now >= e.deadline;
                // An armed entry is the driver's until its deadline (then, in case the driver
                // stopped, the helper wakes it as any other).
                let changed = (!e.armed || due) && e.load() != e.expected;
                armed_due |= e.armed && due;
                let woken = changed
                    || (due
                        && e.watch.as_ref().is_none_or(|m| {
                            let key = Arc::as_ptr(m) as usize;
                            *gone.entry(key).or_insert_with(|| publisher_gone(m))
                        }));
                if woken {
                    wakers.push(e.waker.clone());
                    if e.armed && !changed {
                        disarm.push(*t);
                    }
                } else if due {
                    e.deadline = now + LIVENESS_PERIOD;
                }
                !woken
            });
            st.woken += wakers.len() as u64;
            self.count(&st);
            if !disarm.is_empty() || armed_due {
                drop(st);
                #[cfg(target_os = "linux")]
                {
                    self.disarm(&disarm);
                    if armed_due {
                        let _ = self.dispatch_uring();
                    }
                }
                st = self.lock();
            }
            let next = st.entries.values().map(|e| e.deadline).min();
            st.sleep_until = next;
            match st.backend {
                Backend::Waitv => {
                    let list = self.waitv_list(&st);
                    st.idle = true;
                    drop(st);
                    wake_all(&mut wakers);
                    if !self.sleep_waitv(&list, next) {
                        // The kernel has no futex_waitv: poll from now on.
                        self.lock().backend = Backend::Poll;
                    }
                }
                #[cfg(windows)]
                Backend::Sems => {
                    let list = self.sems_list(&st);
                    st.idle = true;
                    drop(st);
                    wake_all(&mut wakers);
                    self.sleep_sems(&list, next);
                }
                Backend::Poll => {
                    let progress = !wakers.is_empty();
                    wake_all(&mut wakers);
                    nap = if progress {
                        NAP_MIN
                    } else {
                        (nap * 2).min(NAP_MAX)
                    };
                    let until = next.map_or(nap, |d| d.saturating_duration_since(now).min(nap));
                    st.idle = true;
                    // Woken early by a registration (`notify_one`) or spuriously: either way
                    // the loop re-scans; a registration also resets the nap.
                    let (st, timeout) = self
                        .cond
                        .wait_timeout(st, until)
                        .unwrap_or_else(std::sync::PoisonError::into_inner);
                    if !timeout.timed_out() {
                        nap = NAP_MIN;
                    }
                    drop(st);
                }
            }
        }
    }
}

#[cfg(test)]
pub(super) mod tests;
