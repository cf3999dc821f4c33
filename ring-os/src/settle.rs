//! For tests: verdicts that a lock release must change, asked until they settle.
//!
//! A role lock (an OFD lock in the segment file, or a `flock` on a lock file) is released when
//! the last reference to its open file description closes. A child that another test of the
//! same binary spawns meanwhile (`fork`/`clone`, then `exec`) holds a copy of every descriptor
//! of this process until its `exec` closes them (they are close-on-exec), and with it any held
//! role lock just dropped (its release is the close alone, by design; momentary locks, a
//! probe's or a refused attempt's, are unlocked before they close: [`heirs`]). So a verdict that
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

/// For tests of momentary locks: a child forked (without `exec`) just before such a lock is
/// released, as a `multiprocessing` worker forked at that instant would be. It inherits a copy
/// of the lock's open file description; the lock must be free all the same once released.
#[cfg(unix)]
pub(crate) mod heirs {
    use std::cell::RefCell;

    thread_local! {
        /// The children forked on this thread while armed; `None` when not armed.
        static FORKED: RefCell<Option<Vec<libc::pid_t>>> = const { RefCell::new(None) };
    }

    /// Called by every momentary lock just before it is released: when this thread is armed
    /// ([`forking`]), forks a child that only sleeps (at most 30 s) and exits.
    pub(crate) fn at_release() {
        FORKED.with_borrow_mut(|forked| {
            let Some(forked) = forked else { return };
            // SAFETY: the child runs only async-signal-safe calls (`nanosleep`, `_exit`) and
            // touches no memory the parent's other threads may have left inconsistent.
            let pid = unsafe { libc::fork() };
            if pid == 0 {
                let nap = libc::timespec {
                    tv_sec: 30,
                    tv_nsec: 0,
                };
                // SAFETY: `nap` is a valid timespec; the remainder pointer may be null. `_exit`
                // ends the child without running the parent's destructors or atexit handlers.
                unsafe {
                    libc::nanosleep(&raw const nap, core::ptr::null_mut());
                    libc::_exit(0);
                }
            }
            assert!(pid > 0, "fork failed");
            forked.push(pid);
        });
    }

    /// The children [`forking`] forked; killed and reaped on drop.
    pub(crate) struct Heirs(pub(crate) Vec<libc::pid_t>);

    impl Heirs {
        /// Whether each child is still running (so it still holds its copies); one that exited is
        /// reaped here and left out of the kill on drop.
        pub(crate) fn all_alive(&mut self) -> bool {
            let before = self.0.len();
            self.0.retain(|&pid| {
                let mut status = 0;
                // SAFETY: `pid` is our unreaped child; WNOHANG never blocks; `status` is valid.
                unsafe { libc::waitpid(pid, &raw mut status, libc::WNOHANG) == 0 }
            });
            self.0.len() == before
        }
    }

    impl Drop for Heirs {
        fn drop(&mut self) {
            for &pid in &self.0 {
                let mut status = 0;
                // SAFETY: `pid` is our child, not reaped yet (`all_alive` drops those it reaps),
                // so the pid is no one else's; `status` is valid.
                unsafe {
                    libc::kill(pid, libc::SIGKILL);
                    libc::waitpid(pid, &raw mut status, 0);
                }
            }
        }
    }

    /// Runs `f` with this thread armed: every momentary lock it releases forks a child first.
    pub(crate) fn forking<T>(f: impl FnOnce() -> T) -> (T, Heirs) {
        FORKED.with_borrow_mut(|forked| *forked = Some(Vec::new()));
        let value = f();
        let forked = FORKED.with_borrow_mut(Option::take).unwrap_or_default();
        (value, Heirs(forked))
    }

    /// Runs `act` (true: the verdict it must give) armed, then asks `free` once, at once, while
    /// every child forked before a momentary lock's release still lives: the lock must be free
    /// all the same. `Err` (naming `what`) when the verdict was wrong, no momentary lock was
    /// released, or the lock is still held.
    pub(crate) fn released(
        what: &str,
        act: impl FnOnce() -> bool,
        free: impl FnOnce() -> bool,
    ) -> Result<(), String> {
        let (verdict, mut heirs) = forking(act);
        if !verdict {
            return Err(format!("{what}: wrong verdict"));
        }
        if heirs.0.is_empty() {
            return Err(format!("{what}: released no momentary lock"));
        }
        let free = free();
        assert!(heirs.all_alive(), "{what}: a forked child died early");
        if free {
            Ok(())
        } else {
            Err(format!(
                "{what}: the lock stays held by a child forked before its release"
            ))
        }
    }

    /// [`released`], which must hold.
    pub(crate) fn assert_released(
        what: &str,
        act: impl FnOnce() -> bool,
        free: impl FnOnce() -> bool,
    ) {
        if let Err(why) = released(what, act, free) {
            panic!("{why}");
        }
    }
}
