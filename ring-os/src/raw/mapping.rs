//! [`Mapping`]: a ring segment mapped from the OS, implementing [`ring_core::Memory`].

use ring_core::layout::SegmentHeader;
use ring_core::{AtomicU32, Config, Memory, RawMemory};

use crate::liveness::owner;
use crate::segment::{Segment, SizeCheck};
use crate::wait::futex;
use crate::Error;

/// A ring segment in OS shared memory: the mapped [`Segment`] plus ring-core's validated view of
/// it. Make producers and consumers from an `Arc<Mapping>` (ring-core implements `Memory` for
/// `Arc<T>`), so the mapping lives as long as any of them.
///
/// Its [`Memory::notify`] wakes futex waiters in every process that maps the segment.
#[derive(Debug)]
pub struct Mapping {
    /// ring-core's view; points into `segment`'s mapping, so it is declared (and dropped) first.
    raw: RawMemory,
    /// The mapping and its descriptor.
    segment: Segment,
    /// Futex wake system calls made through this mapping (process-local statistics).
    wakes: std::sync::atomic::AtomicU64,
    /// The ring is marked for asymmetric fences (`RING_ASYMMETRIC_FENCES`, validated at attach).
    asymmetric: bool,
}

/// The smallest file that can hold a segment header, for the size check before mapping.
pub(crate) const MIN_SEGMENT_LEN: u64 = core::mem::size_of::<SegmentHeader>() as u64;

impl Mapping {
    /// Formats a freshly created `segment` as a ring for `config`, recording this process as its
    /// creator.
    ///
    /// # Errors
    ///
    /// [`Error::Layout`] when the configuration is invalid or the segment too small.
    pub fn initialize(segment: Segment, config: &Config) -> Result<Self, Error> {
        let creator = owner::current()?;
        // SAFETY:
        // - the mapping is `segment.len()` bytes, readable and writable, and stays mapped for as
        //   long as `segment`, which the returned value owns (and drops after `raw`);
        // - the segment was just created (O_EXCL or an anonymous memfd), so no other process
        //   touches it until this returns; afterwards every access goes through ring-core.
        let raw =
            unsafe { RawMemory::initialize(segment.as_ptr(), segment.len(), config, creator)? };
        Ok(Self::new(raw, segment))
    }

    /// Validates an opened `segment` as a ring, treating its bytes as untrusted.
    ///
    /// # Errors
    ///
    /// [`Error::Attach`] naming the first thing wrong with the header.
    pub fn attach(segment: Segment) -> Result<Self, Error> {
        // SAFETY: the mapping is `segment.len()` bytes, readable and writable (other processes
        // write it only through atomics), and stays mapped for as long as `segment`, which the
        // returned value owns (and drops after `raw`).
        let raw = unsafe { RawMemory::attach(segment.as_ptr(), segment.len()) };
        // A truncation while the header was read shows as zeros: report it as what it is.
        segment.check_truncated()?;
        let raw = raw?;
        Ok(Self::new(raw, segment))
    }

    fn new(raw: RawMemory, segment: Segment) -> Self {
        let asymmetric = raw.geometry().config().asymmetric_fences;
        if asymmetric {
            // Probe (and register) now, not at the first message; and from now on this
            // process's sleeps are bounded if it cannot run the barrier its peers rely on.
            crate::wait::barrier::joined_asymmetric_ring();
        }
        Self {
            raw,
            segment,
            wakes: std::sync::atomic::AtomicU64::new(0),
            asymmetric,
        }
    }

    /// The size check an opener applies before mapping a ring segment.
    pub(crate) const fn open_check() -> SizeCheck {
        SizeCheck::AtLeast(MIN_SEGMENT_LEN)
    }

    /// The underlying segment (its descriptor, kind, length).
    #[must_use]
    pub fn segment(&self) -> &Segment {
        &self.segment
    }

    /// Stops a creator's mapping from removing the segment's name on drop (set during creation
    /// so a failed format leaves nothing behind).
    pub(crate) fn keep_name(&mut self) {
        self.segment.set_unlink_on_drop(false);
    }

    /// Every role the segment records, with its owner id (diagnostic) and whether its role lock
    /// is held: creator, producer, registered consumers.
    #[must_use]
    pub fn participants(&self) -> Vec<crate::liveness::Participant> {
        crate::liveness::participants(&self.raw, &self.segment)
    }

    /// How many futex wake system calls this process made through this mapping: the producer
    /// wakes only when a consumer is parked, so a ring whose consumers keep up makes none.
    #[must_use]
    pub fn wake_calls(&self) -> u64 {
        // Relaxed: a statistic.
        self.wakes.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Whether the header carries the asymmetric-fences mark now though it did not at attach
    /// (only a peer that wrote the header after its creation sets it: ring-core writes it once,
    /// at initialisation). Then this process also probes the barrier and bounds its sleeps, as
    /// for a ring marked from the start. Read at each park (parks are rare; a message is not).
    #[cold]
    fn marked_since_attach(&self) -> bool {
        use ring_core::layout::RING_ASYMMETRIC_FENCES;
        // Relaxed: a hint read again at every park. A participant that attached after the mark
        // read it there; a park that misses a mark stored meanwhile is bounded like every wait
        // of ring-os's blocking calls (their liveness period).
        let flags = self
            .raw
            .header()
            .ring_flags
            .load(std::sync::atomic::Ordering::Relaxed);
        let marked = flags & RING_ASYMMETRIC_FENCES != 0;
        if marked {
            crate::wait::barrier::joined_asymmetric_ring();
        }
        marked
    }

    /// Re-checks that nobody truncated the file under the mapping (see [`Segment::check_len`]).
    ///
    /// # Errors
    ///
    /// [`Error::Truncated`], [`Error::SizeMismatch`], [`Error::Io`].
    pub fn check_len(&self) -> Result<(), Error> {
        self.segment.check_len()
    }

    /// Whether a peer truncated the segment under this mapping (see [`Segment::is_truncated`]).
    /// Once true, every operation through ring-os on this mapping fails ([`Error::Truncated`],
    /// or ring-core's `Corrupt` read and claim errors from the blocking helpers); code that calls
    /// ring-core's `try_*` operations directly must check this before trusting what it read.
    #[must_use]
    pub fn is_truncated(&self) -> bool {
        self.segment.is_truncated()
    }

    /// [`Error::Truncated`] when [`is_truncated`](Self::is_truncated).
    ///
    /// # Errors
    ///
    /// [`Error::Truncated`].
    pub fn check_truncated(&self) -> Result<(), Error> {
        self.segment.check_truncated()
    }
}

// SAFETY: forwards to `RawMemory`, whose promises hold because `segment` keeps the bytes mapped
// for as long as `self`, and `geometry` is the validated local copy.
unsafe impl Memory for Mapping {
    ring_core::forward_memory_accessors!(|s| &s.raw);
    fn notify(&self, word: &AtomicU32) {
        // Relaxed: a statistic.
        self.wakes
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        // This process's futures waiting on the word, woken from here: one thread hand-off
        // (to the executor) instead of two (to the reactor's thread, then the executor).
        #[cfg(feature = "async")]
        crate::asyncio::reactor::wake_local(futex::as_futex(word));
        let _ = futex::wake_all(futex::as_futex(word));
    }

    /// On a ring marked for asymmetric fences, a compiler fence where this process is
    /// registered for the global `membarrier` (every parking side then issues it); a `SeqCst`
    /// fence otherwise (`wait::barrier`).
    #[inline(always)]
    fn light_fence(&self) -> bool {
        if self.asymmetric {
            crate::wait::barrier::light()
        } else {
            // SeqCst: the per-message side (P9, C10); pairs with the parking side's SeqCst
            // fence in `heavy_fence` below (W2, W4), in whichever process parks.
            core::sync::atomic::fence(core::sync::atomic::Ordering::SeqCst);
            true
        }
    }

    /// On a ring marked for asymmetric fences, a `SeqCst` fence and the global `membarrier`;
    /// a `SeqCst` fence otherwise.
    ///
    /// "Marked" is the header as it is now, not only as it was at attach: a peer that sets the
    /// mark later (a scribble, or a tool) makes every participant that attaches afterwards run
    /// compiler fences per message, and this side's parks must then reach them too.
    fn heavy_fence(&self) {
        if self.asymmetric || self.marked_since_attach() {
            crate::wait::barrier::heavy();
        } else {
            // SeqCst: the parking side (W2, W4); pairs with the light fence above (P9, C10).
            core::sync::atomic::fence(core::sync::atomic::Ordering::SeqCst);
        }
    }
}

#[cfg(test)]
mod tests {
    use core::time::Duration;

    use ring_core::{Config, DeliveryClass};

    use crate::segment::CreateOptions;

    use crate::raw::ShmRing;

    #[test]
    fn no_wake_syscall_unless_someone_is_parked() {
        let ring = ShmRing::create_memfd(&Config::new(64, 64), CreateOptions::new()).unwrap();
        let mut p = ShmRing::producer(&ring).unwrap();
        let mut c = ShmRing::consumer(&ring, DeliveryClass::Gating).unwrap();
        let mut buf = [0u8; 64];
        for i in 0..1000u32 {
            p.try_publish(&i.to_le_bytes()).unwrap();
            c.try_copy(&mut buf).unwrap();
        }
        assert_eq!(ring.wake_calls(), 0, "fast path made wake syscalls");
        // A parked consumer is woken by the next publish.
        let reader = std::thread::spawn(move || {
            // One park of up to 10 s (no liveness slices), so the publish below finds it parked.
            c.wait_ready(&mut crate::wait::FutexWait::new(Duration::from_secs(10)))?;
            let mut buf = [0u8; 64];
            c.try_copy(&mut buf).map(|m| m.len)
        });
        std::thread::sleep(Duration::from_millis(100));
        p.try_publish(b"wake up").unwrap();
        assert_eq!(reader.join().unwrap(), Ok(7));
        assert!(ring.wake_calls() >= 1);
    }

    /// Only a ring marked for asymmetric fences runs compiler fences per message; its peers
    /// park with the barrier only there. (Named `barrier_` for the mutants' filter.)
    #[test]
    fn barrier_only_a_marked_ring_runs_light_fences() {
        use ring_core::Memory as _;
        // Probe the mode first: in an asymmetric process (this one, on Linux) a mapping that
        // ignored its ring's flag would run a compiler fence below, which must show.
        let asymmetric = crate::wait::barrier::mode() == crate::wait::barrier::Mode::Asymmetric;
        #[cfg(all(target_os = "linux", not(ring_portable)))]
        assert!(asymmetric, "this process is not asymmetric");
        let plain = ShmRing::create_memfd(&Config::new(8, 64), CreateOptions::new()).unwrap();
        assert!(
            plain.light_fence(),
            "an unmarked ring's light fence must be a full one"
        );
        let marked = ShmRing::create_memfd(
            &Config::new(8, 64).with_asymmetric_fences(true),
            CreateOptions::new(),
        )
        .unwrap();
        assert_eq!(marked.light_fence(), !asymmetric);
    }

    /// Blocking both ways on a marked ring, every wait parking at once: no wake-up is lost
    /// (each would cost a timeout of 10 s and fail the test).
    #[test]
    fn barrier_parking_ping_pong_on_a_marked_ring_loses_no_wake_up() {
        // Its parks issue the command: not while a test counts the command's interrupts.
        let _serial = crate::wait::barrier::MEMBARRIER_TESTS
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let config = Config::new(4, 64).with_asymmetric_fences(true);
        let down = ShmRing::create_memfd(&config, CreateOptions::new()).unwrap();
        let up = ShmRing::create_memfd(&config, CreateOptions::new()).unwrap();
        let mut ask = ShmRing::producer(&down).unwrap();
        let mut asked = ShmRing::consumer(&down, DeliveryClass::Gating).unwrap();
        let mut answer = ShmRing::producer(&up).unwrap();
        let mut answered = ShmRing::consumer(&up, DeliveryClass::Gating).unwrap();
        crate::raw::testing::parking_ping_pong(&mut ask, &mut asked, &mut answer, &mut answered);
    }
}
