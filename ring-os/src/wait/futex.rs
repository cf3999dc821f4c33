//! Futex wait and wake on a 32-bit word in a mapping shared between processes.
//!
//! The futexes here are *shared* (no `FUTEX_PRIVATE_FLAG`): the kernel keys them by the backing
//! page, not by the address space, so a waiter in one process is woken by a wake in another that
//! maps the same segment at a different address. Every wait carries a timeout.
//!
//! Without futexes (the portable backend: macOS, the BSDs, Linux with the `portable` feature) a
//! wait goes through the platform's shared address wait (`os_sync_wait_on_address` or
//! `__ulock_wait` on macOS, `_umtx_op` on FreeBSD), and where there is none [`wait`] polls the
//! word with a bounded sleep back-off and [`wake_all`] does nothing; waits still end on time. On
//! Windows, words in a ring-os segment sleep on named semaphores of that segment (see
//! `docs/OS.md`, Windows).
//!
//! # References
//!
//! - futex(2), futex(7); Ulrich Drepper, "Futexes Are Tricky" (2011).

use core::sync::atomic::AtomicU32;
use core::time::Duration;

/// How a [`wait`] ended. A wait may also end spuriously (a signal, a wake meant for a different
/// value): callers re-check their condition in a loop, as with any futex.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WaitOutcome {
    /// Woken by [`wake_all`], a signal, or spuriously.
    Woken,
    /// The word did not hold `expected` when the wait began: nothing to wait for.
    Changed,
    /// The timeout ran out.
    TimedOut,
}

/// Sleeps until `word` is woken, provided it still holds `expected`, for at most `timeout`.
#[must_use = "a timed-out wait must be handled"]
pub fn wait(word: &AtomicU32, expected: u32, timeout: Duration) -> WaitOutcome {
    imp::wait(word, expected, timeout)
}

/// Wakes every process and thread waiting on `word`; returns how many were woken (0 on targets
/// without futexes).
pub fn wake_all(word: &AtomicU32) -> usize {
    imp::wake_all(word)
}

#[cfg(all(any(target_os = "linux", target_os = "android"), not(ring_portable)))]
mod imp {
    use core::sync::atomic::AtomicU32;
    use core::time::Duration;

    use rustix::io::Errno;
    use rustix::thread::futex;

    use super::WaitOutcome;

    pub(super) fn wait(word: &AtomicU32, expected: u32, timeout: Duration) -> WaitOutcome {
        let ts = futex::Timespec {
            tv_sec: i64::try_from(timeout.as_secs()).unwrap_or(i64::MAX),
            tv_nsec: timeout.subsec_nanos().into(),
        };
        // Shared futex: no PRIVATE flag, so waiters in other processes are found by page.
        match futex::wait(word, futex::Flags::empty(), expected, Some(&ts)) {
            Ok(()) | Err(Errno::INTR) => WaitOutcome::Woken,
            Err(Errno::AGAIN) => WaitOutcome::Changed,
            Err(Errno::TIMEDOUT) => WaitOutcome::TimedOut,
            // EFAULT/EINVAL cannot happen for a valid reference; treat as a spurious wake so the
            // caller re-checks (its own deadline bounds the loop).
            Err(_) => WaitOutcome::Woken,
        }
    }

    pub(super) fn wake_all(word: &AtomicU32) -> usize {
        // Shared futex, as in `wait`. `i32::MAX` waiters means all of them.
        futex::wake(word, futex::Flags::empty(), i32::MAX.unsigned_abs()).unwrap_or(0)
    }
}

/// Elsewhere the platform's own wait where it has one for the word, else polling: the
/// portable backend's address wait (`address.rs`: macOS, FreeBSD; polling on the other BSDs and
/// on Linux with the `portable` feature), and on Windows the segment's named semaphores
/// (`windows.rs`; polling for a word outside every segment).
#[cfg(any(ring_portable, windows))]
mod imp {
    use core::sync::atomic::AtomicU32;
    use core::time::Duration;

    use super::WaitOutcome;
    #[cfg(ring_portable)]
    use crate::wait::address as native;
    #[cfg(windows)]
    use crate::wait::windows as native;

    pub(super) fn wait(word: &AtomicU32, expected: u32, timeout: Duration) -> WaitOutcome {
        native::wait(word, expected, timeout)
            .unwrap_or_else(|| super::poll::wait(word, expected, timeout))
    }

    pub(super) fn wake_all(word: &AtomicU32) -> usize {
        native::wake_all(word)
    }
}

/// The polling fallback, compiled everywhere so that it is tested on Linux too.
#[cfg_attr(
    any(
        all(any(target_os = "linux", target_os = "android"), not(ring_portable)),
        windows
    ),
    allow(
        dead_code,
        reason = "used on targets without futexes; tested everywhere"
    )
)]
mod poll {
    use core::sync::atomic::{AtomicU32, Ordering};
    use core::time::Duration;
    use std::time::Instant;

    use super::WaitOutcome;

    /// Polls `word` with a sleep back-off (20 µs doubling to 1 ms) until it changes or
    /// `timeout` passes.
    pub(super) fn wait(word: &AtomicU32, expected: u32, timeout: Duration) -> WaitOutcome {
        let now = Instant::now();
        let deadline = now
            .checked_add(timeout)
            .unwrap_or(now + Duration::from_secs(1 << 32));
        let mut nap = Duration::from_micros(20);
        loop {
            // Acquire: pairs with the waker's Release store, as a futex wake would.
            if word.load(Ordering::Acquire) != expected {
                return WaitOutcome::Changed;
            }
            let now = Instant::now();
            if now >= deadline {
                return WaitOutcome::TimedOut;
            }
            std::thread::sleep(nap.min(deadline - now));
            nap = (nap * 2).min(Duration::from_millis(1));
        }
    }

    /// Nothing to do: pollers see the new value on their next look.
    #[cfg_attr(
        ring_portable,
        allow(
            dead_code,
            reason = "the portable backend wakes address waiters, pollers need none"
        )
    )]
    pub(super) fn wake_all(_word: &AtomicU32) -> usize {
        0
    }
}

/// The futex word behind a ring-core atomic.
pub(crate) fn as_futex(word: &ring_core::AtomicU32) -> &core::sync::atomic::AtomicU32 {
    // SAFETY: ring-core's `AtomicU32` is portable-atomic's, which on targets where
    // `CROSS_PROCESS_SAFE` holds (asserted in lib.rs) is the native 32-bit atomic: same size and
    // alignment as `core`'s, and every access to the word is atomic. The pointer comes from a
    // reference, so it is valid for the returned borrow.
    unsafe { core::sync::atomic::AtomicU32::from_ptr(word.as_ptr()) }
}

/// Parks on a ring-core futex word (see [`wait`]).
pub(crate) fn wait_word(
    word: &ring_core::AtomicU32,
    expected: u32,
    timeout: core::time::Duration,
) -> WaitOutcome {
    wait(as_futex(word), expected, timeout)
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::sync::atomic::Ordering;
    use std::sync::Arc;
    use std::time::Instant;

    #[test]
    fn wait_on_a_changed_word_returns_at_once() {
        let w = AtomicU32::new(5);
        assert_eq!(wait(&w, 4, Duration::from_secs(5)), WaitOutcome::Changed);
    }

    #[test]
    fn wait_times_out() {
        let w = AtomicU32::new(0);
        let t = Instant::now();
        assert_eq!(
            wait(&w, 0, Duration::from_millis(30)),
            WaitOutcome::TimedOut
        );
        assert!(t.elapsed() >= Duration::from_millis(25));
    }

    #[test]
    fn polling_fallback_sees_changes_and_times_out() {
        let w = Arc::new(AtomicU32::new(0));
        assert_eq!(
            poll::wait(&w, 0, Duration::from_millis(5)),
            WaitOutcome::TimedOut
        );
        assert_eq!(
            poll::wait(&w, 1, Duration::from_secs(5)),
            WaitOutcome::Changed
        );
        let w2 = Arc::clone(&w);
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(10));
            // Release: pairs with the poller's Acquire.
            w2.store(1, Ordering::Release);
            let _ = poll::wake_all(&w2);
        });
        assert_eq!(
            poll::wait(&w, 0, Duration::from_secs(10)),
            WaitOutcome::Changed
        );
        t.join().unwrap();
    }

    #[test]
    fn wake_reaches_a_waiter() {
        let w = Arc::new(AtomicU32::new(0));
        let w2 = Arc::clone(&w);
        let waiter = std::thread::spawn(move || {
            let deadline = Instant::now() + Duration::from_secs(10);
            // Relaxed suffices in this test: only the value matters, not other memory.
            while w2.load(Ordering::Relaxed) == 0 {
                assert!(Instant::now() < deadline, "never woken");
                let _ = wait(&w2, 0, Duration::from_secs(10));
            }
        });
        std::thread::sleep(Duration::from_millis(20));
        // Relaxed: see above.
        w.store(1, Ordering::Relaxed);
        let _ = wake_all(&w);
        waiter.join().unwrap();
    }
}
