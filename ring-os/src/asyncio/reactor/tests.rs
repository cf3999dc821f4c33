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
