//! [`LocalSegment`]: a ring inside one process, on the heap, with the kernel's asymmetric fences
//! and futex wake-ups.

use std::sync::atomic::{compiler_fence, fence, AtomicBool, Ordering};

use ring_core::{AtomicU32, Config, HeapSegment, LayoutError, Memory, OwnerId};

use crate::wait::{barrier, futex};

/// A ring segment for threads of one process: ring-core's [`HeapSegment`] with the two OS
/// services a heap buffer lacks.
///
/// - **Asymmetric fences.** Each message's wake-up fence (`Memory::light_fence`) is a compiler
///   fence where this process could register for `membarrier(2)`'s private expedited command,
///   and a thread about to park issues that barrier instead (`Memory::heavy_fence`;
///   docs/PROTOCOL.md, "Asymmetric fences"). The private command interrupts every CPU running
///   a thread of this process, which is every thread that can use this memory. A plain
///   `HeapSegment` runs a `SeqCst` fence on both sides of every message, because ring-core has
///   no OS. Where the kernel lacks the command or a seccomp filter refuses it, both fences are
///   `SeqCst`, as on a `HeapSegment`.
/// - **Futex wake-ups.** [`Memory::notify`] wakes the threads parked on the word, so the
///   blocking reads and claims with [`FutexWait`](crate::raw::FutexWait) sleep in the kernel
///   and wake at the next message (a `HeapSegment`'s waits only spin).
///
/// The configuration is marked for asymmetric fences
/// ([`Config::with_asymmetric_fences`]), so `inspect` reports what the ring runs. Participants
/// are made by safe code, as on a heap segment ([`ring_core::OpenJoin`]): nothing here judges
/// anyone dead.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use ring_core::{Config, Consumer, DeliveryClass, OwnerId, Producer};
/// use ring_os::raw::{FutexWait, LocalSegment};
///
/// let me = OwnerId::new(1).unwrap();
/// let seg = LocalSegment::new(&Config::new(8, 64), me)?;
/// let mut tx = Producer::new(&seg, me).unwrap();
/// let mut rx = Consumer::new(&seg, DeliveryClass::Gating, me).unwrap();
/// std::thread::scope(|s| {
///     s.spawn(move || tx.try_publish(b"hello").unwrap());
///     let mut buf = [0u8; 64];
///     // Parks in the kernel until the message comes (or 10 s pass).
///     let got = rx.copy(&mut buf, &mut FutexWait::new(Duration::from_secs(10))).unwrap();
///     assert_eq!(&buf[..got.len], b"hello");
/// });
/// # Ok::<(), ring_core::LayoutError>(())
/// ```
#[derive(Debug)]
pub struct LocalSegment {
    /// The bytes and ring-core's view of them; never handed out (a second `Memory` over the same
    /// bytes with `SeqCst`-only fences would park without reaching our compiler fences).
    heap: HeapSegment,
    /// Whether the light fence is a compiler fence: this process registered for the private
    /// barrier before the segment existed. Cleared for good if the barrier ever stops running.
    asymmetric: AtomicBool,
}

impl LocalSegment {
    /// Allocates and formats a segment for `config` (marked for asymmetric fences), created by
    /// `creator`, and registers this process for the private barrier (once per process; the
    /// kernel answers at once after the first).
    ///
    /// # Errors
    /// [`LayoutError`] when the config is invalid.
    pub fn new(config: &Config, creator: OwnerId) -> Result<Self, LayoutError> {
        let heap = HeapSegment::new(&config.with_asymmetric_fences(true), creator)?;
        Ok(Self {
            heap,
            asymmetric: AtomicBool::new(barrier::private::register()),
        })
    }

    /// Whether this segment's per-message fences are compiler fences (this process runs the
    /// private barrier when it parks); `false` where the kernel lacks the command or refuses it.
    #[must_use]
    pub fn is_asymmetric(&self) -> bool {
        // Relaxed: a process-local switch; see `light_fence`.
        self.asymmetric.load(Ordering::Relaxed)
    }

    /// A copy of the segment's bytes, read through the atomics (race-free while peers run), for
    /// inspection: `ring_core::inspect` takes them.
    #[must_use]
    pub fn to_bytes(&self) -> Vec<u8> {
        self.heap.to_bytes()
    }
}

// SAFETY: the heap segment is `OpenJoin` (nothing judges its participants' liveness), and this
// type hands out no other `Memory` over its bytes.
unsafe impl ring_core::OpenJoin for LocalSegment {}

// SAFETY: forwards the accessors to the `HeapSegment`, which owns the bytes for as long as
// `self`. The fences keep the pair's promise: a compiler fence per message only while every
// parking thread issues a barrier that interrupts every thread of this process (the private
// one, or the global non-expedited one where that fails).
unsafe impl Memory for LocalSegment {
    ring_core::forward_memory_accessors!(|s| &s.heap);

    fn notify(&self, word: &AtomicU32) {
        // A shared-futex wake works on private memory too (the kernel keys it by address
        // space and address), and `FutexWait` parks with the same flags.
        let _ = futex::wake_all(futex::as_futex(word));
    }

    /// A compiler fence where this process is registered for the private barrier; a `SeqCst`
    /// fence otherwise.
    #[inline(always)]
    fn light_fence(&self) -> bool {
        // Relaxed: set before any participant existed (participants reach other threads
        // through a happens-before edge, so they read it), and cleared only when the barrier
        // stops running; a thread that still reads `true` then may lose a wake-up to the
        // weakened pair, which costs a wait its bound, never memory safety.
        if self.asymmetric.load(Ordering::Relaxed) {
            compiler_fence(Ordering::SeqCst);
            false
        } else {
            // SeqCst: the per-message side (P9, C10); pairs with the parking side's SeqCst
            // fence in `heavy_fence` (W2, W4).
            fence(Ordering::SeqCst);
            true
        }
    }

    /// A `SeqCst` fence, then the private barrier where this process registered for it.
    fn heavy_fence(&self) {
        // Relaxed: as in `light_fence`.
        if self.asymmetric.load(Ordering::Relaxed) {
            if !barrier::private::heavy() {
                // Relaxed: as above.
                self.asymmetric.store(false, Ordering::Relaxed);
            }
        } else {
            // SeqCst: the parking side (W2, W4); pairs with the light fence above (P9, C10).
            fence(Ordering::SeqCst);
        }
    }
}

#[cfg(test)]
mod tests {
    use core::time::Duration;
    use std::time::Instant;

    use ring_core::{Config, Consumer, DeliveryClass, Memory, OwnerId, Producer};

    use super::LocalSegment;
    use crate::wait::barrier::MEMBARRIER_TESTS;
    use crate::wait::FutexWait;

    fn me() -> OwnerId {
        OwnerId::new(1).unwrap()
    }

    /// Light fences are compiler fences exactly where the process registered for the private
    /// barrier, and the segment says it is marked. (Named `barrier_` for the mutants' filter.)
    #[test]
    fn barrier_local_light_fence_is_a_compiler_fence_exactly_when_registered() {
        let seg = LocalSegment::new(&Config::new(4, 64), me()).unwrap();
        assert!(seg.geometry().config().asymmetric_fences);
        assert_eq!(seg.light_fence(), !seg.is_asymmetric());
        #[cfg(all(target_os = "linux", not(ring_portable)))]
        {
            // This machine's kernel has the command (Linux >= 4.14) and the tests run
            // without a seccomp filter.
            assert!(seg.is_asymmetric());
        }
    }

    /// A consumer parked in the kernel (one park of up to 10 s, no spinning) is woken by the
    /// publish: without the futex wake it would sleep the whole 10 s and time out.
    #[test]
    fn barrier_local_parked_consumer_is_woken_by_the_next_publish() {
        let _serial = MEMBARRIER_TESTS.lock().unwrap_or_else(|e| e.into_inner());
        let seg = LocalSegment::new(&Config::new(4, 64), me()).unwrap();
        let mut tx = Producer::new(&seg, me()).unwrap();
        let mut rx = Consumer::new(&seg, DeliveryClass::Gating, me()).unwrap();
        std::thread::scope(|s| {
            let reader = s.spawn(move || {
                let mut buf = [0u8; 64];
                let started = Instant::now();
                let wait = &mut FutexWait::new(Duration::from_secs(10)).spins(0);
                let got = rx.copy(&mut buf, wait).map(|m| buf[..m.len].to_vec());
                (got, started.elapsed())
            });
            std::thread::sleep(Duration::from_millis(100));
            tx.try_publish(b"wake up").unwrap();
            let (got, took) = reader.join().unwrap();
            assert_eq!(got, Ok(b"wake up".to_vec()));
            assert!(took < Duration::from_secs(5), "woken only after {took:?}");
        });
    }

    /// Blocking both ways, every wait parking at once, over two local rings: a lost wake-up
    /// would cost a 10 s timeout and fail the test.
    #[test]
    fn barrier_local_parking_ping_pong_loses_no_wake_up() {
        let _serial = MEMBARRIER_TESTS.lock().unwrap_or_else(|e| e.into_inner());
        let down = LocalSegment::new(&Config::new(4, 64), me()).unwrap();
        let up = LocalSegment::new(&Config::new(4, 64), me()).unwrap();
        let mut ask = Producer::new(&down, me()).unwrap();
        let mut asked = Consumer::new(&down, DeliveryClass::Gating, me()).unwrap();
        let mut answer = Producer::new(&up, me()).unwrap();
        let mut answered = Consumer::new(&up, DeliveryClass::Gating, me()).unwrap();
        crate::raw::testing::parking_ping_pong(&mut ask, &mut asked, &mut answer, &mut answered);
    }

    /// A producer parked on a full ring (one park of up to 10 s) is woken by the read that
    /// frees a slot: the consumer side of the handshake and its wake-up.
    #[test]
    fn barrier_local_parked_producer_is_woken_by_a_read() {
        let _serial = MEMBARRIER_TESTS.lock().unwrap_or_else(|e| e.into_inner());
        let seg = LocalSegment::new(&Config::new(2, 64), me()).unwrap();
        let mut tx = Producer::new(&seg, me()).unwrap();
        let mut rx = Consumer::new(&seg, DeliveryClass::Gating, me()).unwrap();
        tx.try_publish(b"one").unwrap();
        tx.try_publish(b"two").unwrap();
        assert!(tx.try_publish(b"three").is_err(), "the ring is full");
        std::thread::scope(|s| {
            let writer = s.spawn(move || {
                let started = Instant::now();
                let wait = &mut FutexWait::new(Duration::from_secs(10)).spins(0);
                let sent = tx.claim(wait).map(|mut w| {
                    w.write(b"three").unwrap();
                    w.publish().unwrap()
                });
                (sent, started.elapsed())
            });
            std::thread::sleep(Duration::from_millis(100));
            let mut buf = [0u8; 64];
            let got = rx.try_copy(&mut buf).unwrap();
            assert_eq!(&buf[..got.len], b"one");
            let (sent, took) = writer.join().unwrap();
            assert_eq!(sent, Ok(2));
            assert!(took < Duration::from_secs(5), "woken only after {took:?}");
        });
    }
}
