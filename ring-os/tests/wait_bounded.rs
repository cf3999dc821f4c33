//! `FutexWait` stays bounded on every exit: a word that keeps changing (each `wait` would
//! return `true` from its spin, sending the caller round its loop once more) cannot stretch a
//! wait past its deadline (issue 13, defect 6).

use core::time::Duration;
use ring_core::{AtomicU32, WaitStrategy};
use ring_os::raw::FutexWait;

#[test]
fn a_changed_word_does_not_outlive_the_deadline() {
    // The word never holds `expected`: the spin would see a change at once.
    let word = AtomicU32::new(1);
    let mut wait = FutexWait::new(Duration::ZERO);
    assert!(
        !wait.wait(&word, 0),
        "a wait past its deadline reported a change instead of giving up"
    );
}

#[test]
fn a_peer_that_keeps_changing_the_word_cannot_stretch_the_wait() {
    let word = AtomicU32::new(0);
    let mut wait = FutexWait::new(Duration::from_millis(20));
    let start = std::time::Instant::now();
    let mut expected = 0;
    // Each round the "peer" changes the word before the wait looks at it.
    while {
        expected += 1;
        word.store(expected + 1, core::sync::atomic::Ordering::Relaxed);
        wait.wait(&word, expected)
    } {
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "the wait never gave up"
        );
    }
}
