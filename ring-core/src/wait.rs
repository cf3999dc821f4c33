//! Bounded wait strategies. ring-core has no clock and no OS: its strategies bound waits by a
//! number of spins and yields. `ring-os` adds a futex strategy with a timeout.

use crate::sync::{spin_loop, yield_now, AtomicU32, Ordering};

/// How a blocked producer or consumer waits for a word in shared memory to change.
pub trait WaitStrategy {
    /// Waits while `word` still holds `expected`, or returns early (spurious returns are fine:
    /// callers re-check). Returns `false` when this strategy's bound ran out.
    fn wait(&mut self, word: &AtomicU32, expected: u32) -> bool;
}

/// Busy-spins, for at most `budget` spins over the strategy's life.
#[derive(Clone, Copy, Debug)]
pub struct Spin {
    budget: u64,
}

impl Spin {
    /// A spin strategy with a total budget of `spins` spins.
    pub const fn new(spins: u64) -> Self {
        Self { budget: spins }
    }
}

impl WaitStrategy for Spin {
    fn wait(&mut self, word: &AtomicU32, expected: u32) -> bool {
        while self.budget > 0 {
            self.budget -= 1;
            // Acquire: pairs with the waker's Release store or bump of the word.
            if word.load(Ordering::Acquire) != expected {
                return true;
            }
            spin_loop();
        }
        false
    }
}

/// Spins `spins` times per wait, then yields the thread, for at most `yields` yields over the
/// strategy's life. Every call to `wait` counts as one yield at least, so the number of calls
/// that return `true` is bounded too.
#[derive(Clone, Copy, Debug)]
pub struct SpinThenYield {
    spins: u32,
    yields: u64,
}

impl SpinThenYield {
    /// Spin `spins` times per wait, then yield, at most `yields` times in all.
    pub const fn new(spins: u32, yields: u64) -> Self {
        Self { spins, yields }
    }
}

impl WaitStrategy for SpinThenYield {
    fn wait(&mut self, word: &AtomicU32, expected: u32) -> bool {
        // Every call spends at least one unit of the budget, whichever way it returns: a peer
        // that keeps changing the word cannot stretch a bounded wait without end.
        if self.yields == 0 {
            return false;
        }
        self.yields -= 1;
        for _ in 0..self.spins {
            // Acquire: pairs with the waker's Release store or bump of the word.
            if word.load(Ordering::Acquire) != expected {
                return true;
            }
            spin_loop();
        }
        loop {
            // Acquire: as above.
            if word.load(Ordering::Acquire) != expected {
                return true;
            }
            yield_now();
            if self.yields == 0 {
                return false;
            }
            self.yields -= 1;
        }
    }
}
