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
