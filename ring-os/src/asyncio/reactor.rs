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
//! Two backends, chosen once per process:
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
            }),
            kick: AtomicU32::new(0),
            cond: Condvar::new(),
            registered: AtomicUsize::new(0),
            #[cfg(windows)]
            event: new_event(),
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
            },
        );
        self.count(&st);
        let kick = core::mem::replace(&mut st.idle, false);
        let backend = st.backend;
        drop(st);
        if kick {
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
        token
    }

    /// Forgets a registration (its waker is not woken); false when it was gone already
    /// (woken, or never there).
    pub(crate) fn cancel(&self, token: Token) -> bool {
        let mut st = self.lock();
        let gone = st.entries.remove(&token).is_some();
        self.count(&st);
        gone
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
            let woken = e.word == target && e.load() != e.expected;
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
            st.entries.retain(|_, e| {
                let woken = e.load() != e.expected
                    || (now >= e.deadline
                        && e.watch.as_ref().is_none_or(|m| {
                            let key = Arc::as_ptr(m) as usize;
                            *gone.entry(key).or_insert_with(|| publisher_gone(m))
                        }));
                if woken {
                    wakers.push(e.waker.clone());
                } else if now >= e.deadline {
                    e.deadline = now + LIVENESS_PERIOD;
                }
                !woken
            });
            st.woken += wakers.len() as u64;
            self.count(&st);
            let next = st.entries.values().map(|e| e.deadline).min();
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

    /// The words to sleep on: the kick word first, then each distinct registered word once
    /// (with the value every entry on it expects: entries that expected another value were
    /// woken by the scan just before), at most `WAITV_MAX` in all.
    fn waitv_list(&self, st: &State) -> Vec<(Word, u32)> {
        // Acquire: pairs with `register`'s Release bump: a registration made after this load
        // changes the word, so the coming `futex_waitv` returns at once.
        let kick = self.kick.load(Ordering::Acquire);
        let mut list = vec![(Word(core::ptr::from_ref(&self.kick)), kick)];
        let mut seen = std::collections::HashSet::new();
        for e in st.entries.values() {
            if seen.insert(e.word) {
                list.push((e.word, e.expected));
            }
        }
        list
    }

    /// The semaphore backend's words: each distinct registered word once, with the value its
    /// entries expect and a clone of what keeps it mapped (the helper reads the words itself
    /// after the lock is dropped, so an entry cancelled meanwhile must not unmap them).
    #[cfg(windows)]
    fn sems_list(&self, st: &State) -> Vec<(Word, u32, Arc<dyn Send + Sync>)> {
        let mut seen = std::collections::HashSet::new();
        st.entries
            .values()
            .filter(|e| seen.insert(e.word))
            .map(|e| (e.word, e.expected, Arc::clone(&e._keep)))
            .collect()
    }

    /// Sleeps on the semaphores of the buckets of `list`'s words and the kick event until one
    /// is signalled or `deadline`: counts itself on each bucket, fences, and sleeps only if
    /// every word still holds the value expected (the blocking wait's handshake, many buckets
    /// at once); the counts go back when it returns.
    #[cfg(windows)]
    fn sleep_sems(&self, list: &[(Word, u32, Arc<dyn Send + Sync>)], deadline: Option<Instant>) {
        use crate::wait::windows::Bucket;
        use windows_sys::Win32::System::Threading::{WaitForMultipleObjects, INFINITE};
        /// `MAXIMUM_WAIT_OBJECTS`.
        const MAX_HANDLES: usize = 64;
        let Some(event) = &self.event else {
            return;
        };
        let mut handles = vec![event.raw()];
        let mut held = Vec::new();
        let mut keys = std::collections::HashSet::new();
        // A word outside any segment, or more buckets than one wait takes: poll as well.
        let mut poll = false;
        for (word, _, _) in list {
            // SAFETY: the list holds the entry's `keep`, which keeps the word mapped.
            let Some(bucket) = Bucket::of(unsafe { &*word.0 }) else {
                poll = true;
                continue;
            };
            if !keys.insert(bucket.key()) {
                continue;
            }
            if handles.len() == MAX_HANDLES {
                poll = true;
                continue;
            }
            match bucket.announce() {
                Some(announced) => {
                    handles.push(announced.handle());
                    held.push(announced);
                }
                None => poll = true,
            }
        }
        // SeqCst: the Dekker pair with the waker's fence in `wait::windows::wake_all` (after its
        // change of the word): either it sees our counts and releases permits, or we see its
        // change below and do not sleep.
        core::sync::atomic::fence(Ordering::SeqCst);
        let changed = list.iter().any(|(w, e, _)| {
            // SAFETY: as above, the list's `keep` holds each word's memory. Acquire: as
            // `Entry::load`.
            let now = unsafe { &*w.0 }.load(Ordering::Acquire);
            now != *e
        });
        if changed {
            return; // A word changed: the next scan wakes its entries.
        }
        let now = Instant::now();
        let mut left = deadline.map(|d| d.saturating_duration_since(now));
        if poll {
            left = Some(left.map_or(NAP_MAX, |l| l.min(NAP_MAX)));
        }
        let ms = left.map_or(INFINITE, crate::windows::sys::wait_ms);
        let count = u32::try_from(handles.len()).unwrap_or(1);
        // SAFETY: `handles` holds `count` open handles: the reactor's event and the semaphores
        // that `held` keeps open. Any outcome (a handle, a timeout, a failure) sends the helper
        // round its loop, which re-scans; a failure naps first so that it cannot spin.
        let r = unsafe { WaitForMultipleObjects(count, handles.as_ptr(), 0, ms) };
        if r == windows_sys::Win32::Foundation::WAIT_FAILED {
            std::thread::sleep(NAP_MAX);
        }
        let mut st = self.lock();
        st.sem_wakes += u64::from(
            r > windows_sys::Win32::Foundation::WAIT_OBJECT_0
                && r < windows_sys::Win32::Foundation::WAIT_OBJECT_0 + count,
        );
        drop(st);
        drop(held);
    }

    /// Sleeps in `futex_waitv` until a word in `list` changes, is woken, or `deadline`; false
    /// when the kernel lacks the system call.
    #[cfg(any(target_os = "linux", target_os = "android"))]
    fn sleep_waitv(&self, list: &[(Word, u32)], deadline: Option<Instant>) -> bool {
        use rustix::io::Errno;
        use rustix::thread::futex;

        let overflow = list.len() > WAITV_MAX;
        let waits: Vec<futex::Wait> = list
            .iter()
            .take(WAITV_MAX)
            .map(|&(word, val)| {
                let mut w = futex::Wait::new();
                w.val = u64::from(val);
                w.uaddr = futex::WaitPtr::new(word.0.cast_mut().cast());
                // Shared (no FUTEX2_PRIVATE): the kernel keys the word by its page, so a
                // waker in another process mapping the segment finds us.
                w.flags = futex::WaitFlags::SIZE_U32;
                w
            })
            .collect();
        let now = Instant::now();
        // More words than one call takes: poll the rest every millisecond.
        let deadline = if overflow {
            Some(deadline.map_or(now + NAP_MAX, |d| d.min(now + NAP_MAX)))
        } else {
            deadline
        };
        // futex_waitv takes an absolute CLOCK_MONOTONIC time (Instant's clock on Linux).
        let timeout = deadline.map(|d| {
            let left = d.saturating_duration_since(now);
            let base = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
            let nanos = u64::try_from(base.tv_nsec).unwrap_or(0) + u64::from(left.subsec_nanos());
            rustix::time::Timespec {
                tv_sec: base
                    .tv_sec
                    .saturating_add(i64::try_from(left.as_secs()).unwrap_or(i64::MAX / 2))
                    .saturating_add(i64::try_from(nanos / 1_000_000_000).unwrap_or(0)),
                tv_nsec: i64::try_from(nanos % 1_000_000_000).unwrap_or(0),
            }
        });
        // The words in `list` belong to entries that may be cancelled (and their mappings
        // unmapped) while we sleep: the kernel reads them itself and reports a bad address as
        // EFAULT, never touching our memory unsafely; the next scan drops the entry.
        match futex::waitv(
            &waits,
            futex::WaitvFlags::empty(),
            timeout.as_ref(),
            futex::ClockId::Monotonic,
        ) {
            Err(Errno::NOSYS) => false,
            // Woken (the index of a word), a word that already changed (AGAIN), a timeout, a
            // signal or a fault: the next scan sorts it out.
            _ => true,
        }
    }

    /// No `futex_waitv` here: the helper polls.
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    fn sleep_waitv(&self, _list: &[(Word, u32)], _deadline: Option<Instant>) -> bool {
        false
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;
    use std::task::Wake;

    /// A waker that records that it was woken.
    pub(in crate::asyncio) struct Flag(pub(in crate::asyncio) AtomicBool);
    impl Wake for Flag {
        fn wake(self: Arc<Self>) {
            // Relaxed: the test reads it after a bounded wait, nothing else is published.
            self.0.store(true, Ordering::Relaxed);
        }
    }

    /// Waits (boundedly) for `f`. The flags it reads are Relaxed: each is a value the test
    /// checks, not a publication of other memory.
    pub(in crate::asyncio) fn until(what: &str, f: impl Fn() -> bool) {
        let end = Instant::now() + Duration::from_secs(10);
        while !f() {
            assert!(Instant::now() < end, "never: {what}");
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// Words changed before and after registration, deadlines and cancellations, on `backend`.
    fn wakes_on_change_deadline_not_after_cancel(backend: Backend) {
        let r = Reactor::start(backend);
        let far = Instant::now() + Duration::from_secs(3600);
        let words: Vec<Arc<AtomicU32>> = (0..200).map(|_| Arc::new(AtomicU32::new(0))).collect();
        let flags: Vec<Arc<Flag>> = (0..200)
            .map(|_| Arc::new(Flag(AtomicBool::new(false))))
            .collect();
        // Word 0 changed before its registration: woken at once (no lost wake-up).
        // Relaxed: only the value matters here.
        words[0].store(1, Ordering::Relaxed);
        // 200 words: more than one futex_waitv call takes.
        let tokens: Vec<Token> = (0..200)
            .map(|i| {
                let keep: Arc<dyn Send + Sync> = words[i].clone();
                // SAFETY: the word lives inside `keep`.
                unsafe { r.register(&words[i], 0, Waker::from(flags[i].clone()), far, None, keep) }
            })
            .collect();
        until("word 0 woken", || flags[0].0.load(Ordering::Relaxed));
        // Changed after registration, bumped like a producer does: 5 and 150 (past 127).
        for i in [5, 150] {
            // Release: pairs with the reactor's Acquire load.
            words[i].fetch_add(1, Ordering::Release);
            let _ = crate::wait::futex::wake_all(&words[i]);
            until("changed word woken", || flags[i].0.load(Ordering::Relaxed));
        }
        // A cancelled entry is not woken by a change.
        assert!(r.cancel(tokens[7]));
        // Release: as a producer's bump.
        words[7].fetch_add(1, Ordering::Release);
        let _ = crate::wait::futex::wake_all(&words[7]);
        // A deadline wakes without a change.
        let flag = Arc::new(Flag(AtomicBool::new(false)));
        let keep: Arc<dyn Send + Sync> = words[9].clone();
        // SAFETY: as above.
        let _ = unsafe {
            r.register(
                &words[9],
                0,
                Waker::from(flag.clone()),
                Instant::now() + Duration::from_millis(30),
                None,
                keep,
            )
        };
        until("deadline", || flag.0.load(Ordering::Relaxed));
        std::thread::sleep(Duration::from_millis(20));
        // Relaxed flags: see `until`.
        assert!(
            !flags[7].0.load(Ordering::Relaxed),
            "a cancelled entry was woken"
        );
        let untouched = (0..200)
            .filter(|&i| i != 0 && i != 5 && i != 150 && i != 7)
            .filter(|&i| flags[i].0.load(Ordering::Relaxed))
            .count();
        assert_eq!(untouched, 0, "entries woken without a change");
        assert_eq!(r.waiting(), 200 - 4 + 1 - 1); // word 9's first entry still waits
        assert_eq!(r.woken(), 4);
        assert_eq!(r.backend(), expect_backend(backend), "the backend changed");
    }

    /// What a reactor started with `backend` should still use: `futex_waitv` falls back to
    /// polling only on kernels older than 5.16.
    fn expect_backend(backend: Backend) -> Backend {
        let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
        let mut parts = release.split(|c: char| !c.is_ascii_digit());
        let major: u32 = parts.next().and_then(|p| p.parse().ok()).unwrap_or(0);
        let minor: u32 = parts.next().and_then(|p| p.parse().ok()).unwrap_or(0);
        if (major, minor) >= (5, 16) {
            backend
        } else {
            Backend::Poll
        }
    }

    /// A waker whose `wake` panics.
    struct Bomb;
    impl Wake for Bomb {
        fn wake(self: Arc<Self>) {
            panic!("a waker that panics");
        }
    }

    #[test]
    fn a_panicking_waker_does_not_stop_the_helper() {
        let r = Reactor::start(Backend::Waitv);
        let word = Arc::new(AtomicU32::new(1));
        let keep: Arc<dyn Send + Sync> = word.clone();
        let soon = Instant::now() + Duration::from_millis(1);
        // SAFETY: the word lives inside `keep`.
        let _ = unsafe { r.register(&word, 0, Waker::from(Arc::new(Bomb)), soon, None, keep) };
        until("the bomb went off", || r.woken() == 1);
        let flag = Arc::new(Flag(AtomicBool::new(false)));
        let keep: Arc<dyn Send + Sync> = word.clone();
        // SAFETY: as above.
        let _ = unsafe { r.register(&word, 0, Waker::from(flag.clone()), soon, None, keep) };
        until("woken after the panic", || flag.0.load(Ordering::Relaxed));
    }

    #[test]
    #[cfg(any(target_os = "linux", target_os = "android"))]
    fn waitv_backend() {
        wakes_on_change_deadline_not_after_cancel(Backend::Waitv);
    }

    #[test]
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    fn no_waitv_here_means_polling() {
        let r = Reactor::start(Backend::Waitv);
        until("fell back", || r.backend() == Backend::Poll);
    }

    #[test]
    fn polling_backend() {
        wakes_on_change_deadline_not_after_cancel(Backend::Poll);
    }
}
