//! OS waits: a 32-bit word in shared memory that a thread in one process sleeps on until a
//! thread in another changes it and wakes it, always with a deadline.
//!
//! - [`futex`]: wait and wake on a shared word: the Linux futex; elsewhere `address.rs` (the
//!   portable backend's address waits: macOS, FreeBSD) or `windows.rs` (a segment's named
//!   semaphores), with a polling fallback where the platform offers none;
//! - [`FutexWait`] (this file): ring-core's [`WaitStrategy`] over it, spinning a little first;
//!   [`deadline_after`] for deadlines that cannot overflow;
//! - `barrier`: the asymmetric fences of the wake-up handshakes (`membarrier(2)`), and the
//!   bound on sleeps where they cannot be exact.

#[cfg(ring_portable)]
mod address;
pub(crate) mod barrier;
pub mod futex;
#[cfg(windows)]
pub(crate) mod windows;

use core::time::Duration;
use std::time::Instant;

use core::sync::atomic::Ordering;
use ring_core::{AtomicU32, WaitStrategy};

use futex::{wait_word, WaitOutcome};

/// Spin for a budget, then park on the futex with a deadline.
///
/// The deadline covers the strategy's whole life (every `wait` call it serves): make one per
/// blocking operation. `wait` returns `false` once the deadline has passed.
///
/// # Examples
///
/// ```
/// use core::time::Duration;
/// use ring_core::{AtomicU32, WaitStrategy};
/// use ring_os::raw::FutexWait;
/// let word = AtomicU32::new(0);
/// let mut wait = FutexWait::new(Duration::from_millis(5));
/// // Nobody changes the word: the wait ends at the deadline and says so.
/// assert!(!wait.wait(&word, 0));
/// ```
#[derive(Clone, Copy, Debug)]
pub struct FutexWait {
    /// Loads of the word before parking, per `wait` call.
    spins: u32,
    /// When the strategy gives up.
    deadline: Instant,
}

impl FutexWait {
    /// The default spin budget per wait: about a microsecond of polling before the syscall.
    pub const DEFAULT_SPINS: u32 = 200;

    /// A strategy that gives up `timeout` from now, with the default spin budget.
    #[must_use]
    pub fn new(timeout: Duration) -> Self {
        Self::until(deadline_after(timeout))
    }

    /// A strategy that gives up at `deadline`, with the default spin budget.
    #[must_use]
    pub fn until(deadline: Instant) -> Self {
        Self {
            spins: Self::DEFAULT_SPINS,
            deadline,
        }
    }

    /// Sets the spin budget per wait (0: park at once).
    #[must_use]
    pub fn spins(mut self, spins: u32) -> Self {
        self.spins = spins;
        self
    }

    /// The deadline.
    #[must_use]
    pub fn deadline(&self) -> Instant {
        self.deadline
    }
}

/// `now + timeout`, saturating at about a century for huge timeouts (`Duration::MAX` means
/// "practically forever", not a panic).
#[must_use]
pub fn deadline_after(timeout: Duration) -> Instant {
    let now = Instant::now();
    now.checked_add(timeout)
        .or_else(|| now.checked_add(Duration::from_secs(100 * 365 * 24 * 3600)))
        .unwrap_or(now)
}

impl WaitStrategy for FutexWait {
    fn wait(&mut self, word: &AtomicU32, expected: u32) -> bool {
        // Every exit checks the deadline: a peer that keeps changing the word must not stretch
        // a bounded wait (each `true` sends the caller round its loop once more).
        if Instant::now() >= self.deadline {
            return false;
        }
        for _ in 0..self.spins {
            // Acquire: pairs with the waker's Release store or bump of the word.
            if word.load(Ordering::Acquire) != expected {
                return true;
            }
            core::hint::spin_loop();
        }
        let now = Instant::now();
        if now >= self.deadline {
            return false;
        }
        let left = self.deadline - now;
        // Where a wake-up can be lost (this process cannot run the heavy fence that its peers'
        // light ones rely on: `barrier`), sleep at most a nap, then let the caller re-check.
        let (sleep, napping) = match barrier::nap() {
            Some(nap) if nap < left => (nap, true),
            _ => (left, false),
        };
        match wait_word(word, expected, sleep) {
            WaitOutcome::Woken | WaitOutcome::Changed => true,
            WaitOutcome::TimedOut => napping,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn a_word_that_keeps_changing_cannot_stretch_the_deadline() {
        // The word never holds the expected value: every call sees a change at once. The
        // wait must still end at its deadline (the old spin path returned `true` forever).
        let word = AtomicU32::new(1);
        let start = Instant::now();
        let mut wait = FutexWait::new(Duration::from_millis(20));
        while wait.wait(&word, 0) {
            assert!(
                start.elapsed() < Duration::from_secs(5),
                "a changing word kept the wait alive past its deadline"
            );
        }
        assert!(start.elapsed() >= Duration::from_millis(20));
    }

    #[test]
    fn wakes_on_change_and_gives_up_at_the_deadline() {
        let word = Arc::new(AtomicU32::new(0));
        let w2 = Arc::clone(&word);
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            // Release: pairs with the waiter's Acquire.
            w2.store(1, Ordering::Release);
            let _ = crate::wait::futex::wake_all(crate::wait::futex::as_futex(&w2));
        });
        let mut wait = FutexWait::new(Duration::from_secs(10)).spins(0);
        let start = Instant::now();
        // Acquire: pairs with the store above.
        while word.load(Ordering::Acquire) == 0 {
            assert!(wait.wait(&word, 0), "deadline passed before the wake");
        }
        assert!(start.elapsed() < Duration::from_secs(5));
        t.join().unwrap();
        let mut short = FutexWait::new(Duration::from_millis(10));
        assert!(!short.wait(&word, 1));
        // A huge timeout is "forever", not an overflow panic.
        assert!(
            FutexWait::new(Duration::MAX).deadline() > Instant::now() + Duration::from_secs(3600)
        );
    }
}
