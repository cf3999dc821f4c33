//! Helpers every test layer shares (one copy each): owner ids, the models' segment, ring and
//! messages and, under loom, the model runner.

use ring_core::{
    ClaimError, Config, Consumer, DeliveryClass, Memory, OwnedSegment, OwnerId, Pinned, Producer,
};
use std::sync::Arc;

/// Owner id `n` (non-zero).
///
/// # Panics
///
/// When `n` is 0 (a test's own mistake).
#[must_use]
pub fn id(n: u64) -> OwnerId {
    OwnerId::new(n).expect("non-zero")
}

/// The segment of the loom and shuttle models: an owned segment (the loom shape: typed
/// atomics) shared by the model's threads.
pub type Seg = Arc<OwnedSegment>;

/// A [`Seg`] of `config`, created by owner 1.
///
/// # Panics
///
/// When `config` is invalid (a test's own mistake).
#[must_use]
pub fn owned(config: &Config) -> Seg {
    Arc::new(OwnedSegment::new(config, id(1)).expect("valid config"))
}

/// An [`owned`] segment of `config` and its producer (owner 1).
///
/// # Panics
///
/// As [`owned`].
#[must_use]
pub fn ring(config: &Config) -> (Seg, Producer<Seg>) {
    let seg = owned(config);
    let p = Producer::new(seg.clone(), id(1)).expect("the first producer");
    (seg, p)
}

/// A [`ring`] and a consumer of `class` on it (owner 2), registered after the producer.
///
/// # Panics
///
/// As [`owned`].
#[must_use]
pub fn ring_with(config: &Config, class: DeliveryClass) -> (Seg, Producer<Seg>, Consumer<Seg>) {
    let (seg, p) = ring(config);
    let c = Consumer::new(seg.clone(), class, id(2)).expect("the first consumer");
    (seg, p, c)
}

/// `slots` slots of 16 bytes (one [`msg16`]) and `consumers` consumer entries.
#[must_use]
pub fn config16(slots: u32, consumers: u32) -> Config {
    Config::new(slots, 16).with_consumers(consumers)
}

/// Publishes [`msg16`]`(seq)`.
///
/// # Errors
///
/// The claim's refusal.
pub fn publish16(p: &mut Producer<Seg>, seq: u64) -> Result<u64, ClaimError> {
    p.try_publish(&msg16(seq))
}

/// Yields to the scheduler: loom's or shuttle's under their cfgs, the OS's otherwise.
pub fn yield_now() {
    #[cfg(ring_loom)]
    loom::thread::yield_now();
    #[cfg(ring_shuttle)]
    shuttle::thread::yield_now();
    #[cfg(not(any(ring_loom, ring_shuttle)))]
    std::thread::yield_now();
}

/// Publishes `msg(seq)` for `seq` in `*next..end`, in order, each under its own sequence
/// number, in at most `tries` attempts; `*next` is how far it got. A `Full` refusal (and
/// `Pinned` where `pinned_ok`) calls `wait` (a reclaim of the dead, say), then yields; any
/// other refusal fails the model.
///
/// # Panics
///
/// On a refusal not allowed, or a sequence number other than the one expected.
pub fn publish_range<B: AsRef<[u8]>>(
    p: &mut Producer<Seg>,
    next: &mut u64,
    end: u64,
    tries: usize,
    pinned_ok: bool,
    msg: impl Fn(u64) -> B,
    mut wait: impl FnMut(&mut Producer<Seg>),
) {
    for _ in 0..tries {
        if *next == end {
            break;
        }
        match p.try_publish(msg(*next).as_ref()) {
            Ok(s) => {
                assert_eq!(s, *next, "a sequence number published twice or skipped");
                *next += 1;
            }
            Err(ClaimError::Full { .. }) => {
                wait(p);
                yield_now();
            }
            Err(ClaimError::Pinned { .. }) if pinned_ok => {
                wait(p);
                yield_now();
            }
            Err(e) => panic!("producer, message {}: {e:?}", *next),
        }
    }
}

/// [`publish_range`] of the one message `seq` ([`msg16`]) in at most `tries` attempts; true
/// when it went in.
pub fn publish16_within(p: &mut Producer<Seg>, seq: u64, tries: usize, pinned_ok: bool) -> bool {
    let mut next = seq;
    publish_range(p, &mut next, seq + 1, tries, pinned_ok, msg16, |_| {});
    next > seq
}

/// Copies pinned message `m` out and asserts it is [`msg16`] of the sequence it names.
///
/// # Panics
///
/// When it is not (a torn or wrong read: the model failed).
pub fn assert_pinned16<M: Memory>(m: &Pinned<'_, M>) {
    let mut a = [0u8; 16];
    assert_eq!(m.copy_to(&mut a), 16, "message {} is not 16 bytes", m.seq());
    assert_whole16(&a, m.seq());
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
    use ring_core::{Config, Consumer, DeliveryClass, OwnedSegment, Producer, WaitStrategy};
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

    /// A [`futex_seg`], its producer (owner 1) and a consumer of `class` (owner 2).
    ///
    /// # Panics
    ///
    /// When either cannot join (a test's own mistake).
    #[allow(
        clippy::type_complexity,
        reason = "the three handles a parking model starts from"
    )]
    pub fn futex_ring(
        slots: u32,
        capacity: u32,
        class: DeliveryClass,
    ) -> (
        Arc<FutexSegment>,
        Producer<Arc<FutexSegment>>,
        Consumer<Arc<FutexSegment>>,
    ) {
        let s = futex_seg(slots, capacity);
        let p = Producer::new(s.clone(), super::id(1)).unwrap();
        let c = Consumer::new(s.clone(), class, super::id(2)).unwrap();
        (s, p, c)
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
