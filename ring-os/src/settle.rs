//! For tests: verdicts that a lock release must change, asked until they settle.
//!
//! A role lock (an OFD lock in the segment file, or a `flock` on a lock file) is released when
//! the last reference to its open file description closes. A child that another test of the
//! same binary spawns meanwhile (`fork`/`clone`, then `exec`) holds a copy of every descriptor
//! of this process until its `exec` closes them (they are close-on-exec), and with it any lock
//! just dropped, or taken for a moment by a probe of the portable backend. So a verdict that
//! needs a lock to be free (dead, stale, granted, removed) is asked again until it holds; the
//! wait is capped, so a lock that really stays held still fails the test. Verdicts that need a
//! lock to be held are asked once: a copy can only keep a lock, never free it.

use std::time::{Duration, Instant};

/// How long a release may take to be seen: far past any `exec` of a loaded machine.
const CAP: Duration = Duration::from_secs(10);

/// Retries `attempt` (every 2 ms, for at most 10 s) until it gives a value; panics with `what`
/// when it never did.
pub(crate) fn settles<T>(what: &str, mut attempt: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + CAP;
    loop {
        if let Some(value) = attempt() {
            return value;
        }
        assert!(Instant::now() < deadline, "{what}");
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Runs `round` (numbered from 0) until one returns `Ok`, at most `rounds` times; panics with
/// the last round's error. For a check whose release is acted on once, at the release itself
/// (a tidy-up by the last holder out): asking again cannot help, so the whole round is run
/// again, on fresh files. A check that never passes fails every round.
pub(crate) fn in_some_round(rounds: u32, mut round: impl FnMut(u32) -> Result<(), String>) {
    let mut outcome = Ok(());
    for n in 0..rounds {
        outcome = round(n);
        if outcome.is_ok() {
            return;
        }
    }
    if let Err(why) = outcome {
        panic!("{why} (in each of {rounds} rounds)");
    }
}
