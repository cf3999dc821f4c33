//! Helpers every test layer shares (one copy each): owner ids and, under loom, the model runner.

use ring_core::OwnerId;

/// Owner id `n` (non-zero).
///
/// # Panics
///
/// When `n` is 0 (a test's own mistake).
#[must_use]
pub fn id(n: u64) -> OwnerId {
    OwnerId::new(n).expect("non-zero")
}

/// The first `len` bytes of `words` (a held message's, lent as atomic words), read with
/// Relaxed loads.
#[must_use]
pub fn bytes_of(words: &[ring_core::AtomicU64], len: usize) -> Vec<u8> {
    let mut out: Vec<u8> = words
        .iter()
        .flat_map(|w| w.load(core::sync::atomic::Ordering::Relaxed).to_ne_bytes())
        .collect();
    out.truncate(len);
    out
}

/// The 16 bytes of message `seq` in the loom and shuttle models: one repeated byte, so a torn
/// read (words of two messages) shows as mixed bytes.
#[must_use]
pub fn msg16(seq: u64) -> [u8; 16] {
    [0xA0 + seq as u8; 16]
}

/// Asserts `bytes` is exactly [`msg16`]`(seq)`: whole, and the message asked for.
///
/// # Panics
///
/// When it is not (a torn or wrong read: the model failed).
pub fn assert_whole16(bytes: &[u8], seq: u64) {
    assert_eq!(
        bytes,
        msg16(seq),
        "message {seq} read torn or wrong: {bytes:?}"
    );
}

/// `loom::model` with room for the allocator's and the segment's initialisation (thousands of
/// single-threaded atomic steps count as branches); `LOOM_MAX_PREEMPTIONS` etc. still apply.
/// Prints (shown with `--nocapture`) how many executions loom explored.
#[cfg(ring_loom)]
pub fn model<F: Fn() + Sync + Send + 'static>(f: F) {
    use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
    use std::sync::Arc;
    let mut b = loom::model::Builder::new();
    b.max_branches = 1_000_000;
    let runs = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&runs);
    b.check(move || {
        counted.fetch_add(1, Relaxed);
        f();
    });
    eprintln!("loom explored {} executions", runs.load(Relaxed));
}

/// A futex modelled for loom, one copy for every model that parks (`loom_alloc_wait.rs`,
/// `loom_fastpath.rs`): `wait` sleeps only if the word still holds the expected value *under
/// the lock*, `notify` takes the lock (the kernel's atomicity), and nothing times out, so a
/// lost wake-up is a deadlock loom reports.
#[cfg(ring_loom)]
pub mod futex {
    use loom::sync::{Condvar, Mutex};
    use ring_core::AtomicU32;
    use ring_core::{Config, OwnedSegment, WaitStrategy};
    use std::sync::Arc;

    /// The modelled kernel: a lock and a condition variable.
    #[derive(Default)]
    pub struct Kernel {
        lock: Mutex<()>,
        cv: Condvar,
    }

    /// A segment whose `notify` wakes the modelled futex.
    pub struct FutexSegment {
        seg: OwnedSegment,
        kernel: Kernel,
    }

    // SAFETY: forwards every accessor to the `OwnedSegment`, which keeps its promises.
    unsafe impl ring_core::Memory for FutexSegment {
        ring_core::forward_memory_accessors!(|s| &s.seg);
        fn notify(&self, _word: &AtomicU32) {
            let _g = self.kernel.lock.lock().unwrap();
            self.kernel.cv.notify_all();
        }
    }

    // SAFETY: in-process memory of a loom model, whose only reclaims and take-overs are the
    // models' explicit `unsafe` calls: nothing judges its participants dead.
    unsafe impl ring_core::OpenJoin for FutexSegment {}

    /// Sleeps on the modelled futex with no timeout.
    pub struct FutexWait(pub Arc<FutexSegment>);

    impl WaitStrategy for FutexWait {
        fn wait(&mut self, word: &AtomicU32, expected: u32) -> bool {
            let k = &self.0.kernel;
            let g = k.lock.lock().unwrap();
            // Relaxed: the futex compares under its lock; ordering comes from the callers'
            // handshake (their fences), exactly as with the kernel's futex.
            if word.load(core::sync::atomic::Ordering::Relaxed) != expected {
                return true;
            }
            drop(k.cv.wait(g).unwrap());
            true
        }
    }

    /// A one-consumer segment of `slots` slots of `capacity` bytes over the modelled futex.
    pub fn futex_seg(slots: u32, capacity: u32) -> Arc<FutexSegment> {
        Arc::new(FutexSegment {
            seg: OwnedSegment::new(
                &Config::new(slots, capacity).with_consumers(1),
                super::id(1),
            )
            .unwrap(),
            kernel: Kernel::default(),
        })
    }
}
