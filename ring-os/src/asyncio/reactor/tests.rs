//! The reactor's own tests (each backend: changes, deadlines, cancellations, many words).

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

/// A waker that records the name of the thread that woke it.
#[cfg(target_os = "linux")]
struct Where(Mutex<Option<String>>);
#[cfg(target_os = "linux")]
impl Wake for Where {
    fn wake(self: Arc<Self>) {
        let name = std::thread::current().name().unwrap_or("?").to_owned();
        *self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(name);
    }
}

#[cfg(target_os = "linux")]
impl Where {
    fn new() -> Arc<Self> {
        Arc::new(Self(Mutex::new(None)))
    }
    fn woken_on(&self) -> Option<String> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }
}

/// Registers a wait on `word` for `expected` with a waker that records its thread.
#[cfg(target_os = "linux")]
fn wait_on(
    r: &Reactor,
    word: &Arc<AtomicU32>,
    expected: u32,
    deadline: Instant,
) -> (Arc<Where>, Token) {
    let woke = Where::new();
    let keep: Arc<dyn Send + Sync> = word.clone();
    // SAFETY: the word lives inside `keep`.
    let token = unsafe {
        r.register(
            word,
            expected,
            Waker::from(woke.clone()),
            deadline,
            None,
            keep,
        )
    };
    (woke, token)
}

/// A driver on `r`, or `None` (with the reason printed) where io_uring's futex wait is
/// unavailable (an old kernel, `kernel.io_uring_disabled`, a sandbox).
#[cfg(target_os = "linux")]
fn driver_or_skip(r: &'static Reactor) -> Option<crate::asyncio::Driver> {
    match crate::asyncio::Driver::on(r) {
        Ok(d) => Some(d),
        Err(e) => {
            println!("skipped: no io_uring driver here: {e}");
            None
        }
    }
}

/// A reactor of its own with a driver and one wait armed on a word holding 0 (far deadline).
#[cfg(target_os = "linux")]
struct Armed {
    r: &'static Reactor,
    driver: crate::asyncio::Driver,
    word: Arc<AtomicU32>,
    /// Where the armed wait's waker was woken.
    woke: Arc<Where>,
    token: Token,
    far: Instant,
}

/// [`Armed`], or `None` (said why) where no driver can be made.
#[cfg(target_os = "linux")]
fn armed_wait() -> Option<Armed> {
    let r = Reactor::start(Backend::Waitv);
    let driver = driver_or_skip(r)?;
    let far = Instant::now() + Duration::from_secs(3600);
    let word = Arc::new(AtomicU32::new(0));
    let (woke, token) = wait_on(r, &word, 0, far);
    Some(Armed {
        r,
        driver,
        word,
        woke,
        token,
        far,
    })
}

/// Bumps `word` and wakes its futex from another thread, as a producer in another process
/// would (no in-process shortcut: this reactor is not the process's).
#[cfg(target_os = "linux")]
fn bump_elsewhere(word: &Arc<AtomicU32>) {
    let w = Arc::clone(word);
    std::thread::spawn(move || {
        // Release: pairs with the Acquire load of the dispatch.
        w.fetch_add(1, Ordering::Release);
        let _ = crate::wait::futex::wake_all(&w);
    })
    .join()
    .expect("bumper");
}

/// Whether `fd` turns readable within 5 s.
#[cfg(target_os = "linux")]
fn readable(d: &crate::asyncio::Driver) -> bool {
    use rustix::event::{poll, PollFd, PollFlags};
    let mut fds = [PollFd::new(d, PollFlags::IN)];
    let timeout = rustix::event::Timespec {
        tv_sec: 5,
        tv_nsec: 0,
    };
    poll(&mut fds, Some(&timeout)).unwrap_or(0) == 1
}

#[test]
#[cfg(target_os = "linux")]
fn a_driver_wakes_on_its_own_thread_without_the_helper() {
    let Some(Armed {
        r,
        driver,
        word,
        woke,
        far,
        ..
    }) = armed_wait()
    else {
        return;
    };
    // The helper does not wait on an armed word: the change reaches only the io_uring.
    bump_elsewhere(&word);
    assert!(readable(&driver), "the io_uring fd never turned readable");
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(
        woke.woken_on(),
        None,
        "woken before dispatch (by the helper?)"
    );
    assert_eq!(driver.dispatch(), 1);
    let here = std::thread::current().name().unwrap_or("?").to_owned();
    assert_eq!(
        woke.woken_on(),
        Some(here),
        "not woken by the dispatching thread"
    );
    assert_eq!((r.uring_woken(), r.woken(), r.waiting()), (1, 1, 0));
    // A word changed before it was armed completes at once (EAGAIN), nothing lost.
    let (woke, _) = wait_on(r, &word, 0, far);
    assert!(readable(&driver), "a stale registration never completed");
    assert_eq!(driver.dispatch(), 1);
    assert!(woke.woken_on().is_some(), "a stale registration was lost");
    assert_eq!(r.uring_woken(), 2);
}

#[test]
#[cfg(target_os = "linux")]
fn without_a_driver_the_helper_takes_the_waits_back() {
    let Some(Armed {
        r,
        driver,
        word,
        woke,
        token,
        far: _,
    }) = armed_wait()
    else {
        return;
    };
    // Dropped while armed: the wait goes back to the helper's futex_waitv.
    drop(driver);
    bump_elsewhere(&word);
    until("woken by the helper", || woke.woken_on().is_some());
    assert_eq!(woke.woken_on().as_deref(), Some("shmring-reactor"));
    assert!(!r.cancel(token));
    assert_eq!(r.uring_woken(), 0);
}

#[test]
#[cfg(target_os = "linux")]
fn a_driver_nobody_polls_costs_a_deadline_not_a_wake_up() {
    let r = Reactor::start(Backend::Waitv);
    let Some(_driver) = driver_or_skip(r) else {
        return;
    };
    let word = Arc::new(AtomicU32::new(0));
    let soon = Instant::now() + Duration::from_millis(30);
    let (woke, _) = wait_on(r, &word, 0, soon);
    bump_elsewhere(&word);
    // Nobody dispatches: the helper reaps (or scans) at the deadline.
    until("woken at the deadline", || woke.woken_on().is_some());
    assert_eq!(woke.woken_on().as_deref(), Some("shmring-reactor"));
    // A cancelled armed wait is not woken, and its io_uring wait is cancelled.
    let far = Instant::now() + Duration::from_secs(3600);
    let (woke, token) = wait_on(r, &word, 1, far);
    assert!(r.cancel(token));
    bump_elsewhere(&word);
    std::thread::sleep(Duration::from_millis(50));
    let _ = r.dispatch_uring();
    assert_eq!(woke.woken_on(), None, "a cancelled wait was woken");
}

#[test]
#[cfg(target_os = "linux")]
fn the_in_process_shortcut_leaves_armed_waits_to_the_driver() {
    let Some(Armed {
        r,
        driver,
        word,
        woke,
        ..
    }) = armed_wait()
    else {
        return;
    };
    // A publish in this process: the word changes, the shortcut runs, then the futex wake.
    // Release: pairs with the Acquire loads of the shortcut and the dispatch.
    word.fetch_add(1, Ordering::Release);
    r.wake_word(&word);
    assert_eq!(woke.woken_on(), None, "the shortcut woke an armed wait");
    let _ = crate::wait::futex::wake_all(&word);
    assert!(readable(&driver), "the io_uring fd never turned readable");
    assert_eq!(driver.dispatch(), 1);
    let here = std::thread::current().name().unwrap_or("?").to_owned();
    assert_eq!(woke.woken_on(), Some(here));
}
