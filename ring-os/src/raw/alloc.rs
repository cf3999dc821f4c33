//! Variable-size payloads through ring-core's in-segment allocator, on OS rings.
//!
//! The binding itself (the `meta = [handle, len]` convention, freeing a payload when its slot is
//! claimed again, sweeping a dead producer's orphans) is ring-core's `arena` module
//! ([`PayloadProducer`], [`PayloadReader`]); this module adds what is the OS's: the wall clock
//! that stamps allocations (milliseconds since the Unix epoch, comparable across processes), the
//! waiting claim of [`ProducerExt::claim_with`](crate::raw::ProducerExt::claim_with), and the SIGBUS
//! guard's verdict on a copy that touched truncated pages.
//!
//! [`AllocProducer`] wraps a producer: each message's bytes go into an allocation in the
//! segment's arena. The allocations are the producer's (allocator owner
//! [`PRODUCER_ALLOC_OWNER`]) and are freed automatically when their slot is claimed for a later
//! message, so consumers cannot leak anything, and the live count never exceeds the slot count.
//! Readers pin the message and copy the allocation with [`AllocReader::read_pinned`] while the
//! pin keeps it alive. After a producer crash, [`AllocProducer::new`] on the new producer frees
//! the dead producer's allocations that no slot references, so take-over leaks nothing either.

use core::time::Duration;
use std::sync::Arc;

use ring_core::arena::{self, Leak, LeakTotals, PayloadProducer, PayloadReader, Stats};
use ring_core::{Memory, Pinned, Producer};

use crate::Error;

use crate::raw::ProducerExt as _;

use crate::liveness::roles::RoleFile;

use crate::raw::ShmProducer;

/// The allocator owner id under which the producer's payload allocations are accounted.
pub const PRODUCER_ALLOC_OWNER: u16 = arena::PRODUCER_OWNER;

/// The allocator's clock for leak ages: milliseconds since the Unix epoch (comparable across
/// processes).
#[derive(Clone, Copy, Debug, Default)]
pub struct UnixMillis;

impl arena::Clock for UnixMillis {
    fn now(&self) -> u64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
    }
}

/// Global allocation statistics of a ring (any process may read them).
///
/// # Errors
///
/// [`Error::Alloc`] when the ring has no allocator or its region is corrupt.
pub fn stats<M: Memory + ?Sized>(mem: &M) -> Result<Stats, Error> {
    arena::stats(mem).map_err(Error::Alloc)
}

/// Statistics of one allocator owner (`0..MAX_OWNERS`; the producer is
/// [`PRODUCER_ALLOC_OWNER`]).
///
/// # Errors
///
/// As [`stats`]; [`Error::Alloc`] for an owner out of range.
pub fn owner_stats<M: Memory + ?Sized>(mem: &M, owner: u16) -> Result<Stats, Error> {
    arena::owner_stats(mem, owner).map_err(Error::Alloc)
}

/// Every live allocation (owner, handle, size, age in ms) and the totals.
///
/// # Errors
///
/// As [`stats`].
pub fn leak_report<M: Memory + ?Sized>(mem: &M) -> Result<(Vec<Leak>, LeakTotals), Error> {
    arena::leak_report(mem, &UnixMillis).map_err(Error::Alloc)
}

/// A consumer-side view of a ring's allocator, attached (and validated) once.
pub struct AllocReader<T: Memory> {
    /// ring-core's reader, rebound to the pin's memory for each copy.
    reader: PayloadReader,
    /// The ring, for [`stats`](Self::stats).
    mem: Arc<T>,
}

impl<T: Memory> core::fmt::Debug for AllocReader<T> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("AllocReader").finish_non_exhaustive()
    }
}

impl<T: Memory> AllocReader<T> {
    /// Attaches to the allocator of `ring`.
    ///
    /// # Errors
    ///
    /// [`Error::Alloc`] when the ring has no allocator or its region is corrupt.
    pub fn new(ring: &Arc<T>) -> Result<Self, Error> {
        Ok(Self {
            reader: PayloadReader::new(&**ring).map_err(Error::Alloc)?,
            mem: Arc::clone(ring),
        })
    }

    /// Copies the allocation a pinned message of this ring refers to (`meta = [handle, len]`)
    /// into `out` (resized to the message length, at most `max_len` bytes: the length comes from
    /// shared memory, so it never sizes an allocation beyond the caller's bound). The pin keeps
    /// the allocation alive.
    ///
    /// # Errors
    ///
    /// [`Error::MessageTooLarge`] (nothing allocated) when the message claims more than
    /// `max_len` bytes; [`Error::Alloc`] when the handle is not live or the lengths disagree (a
    /// corrupt or hostile segment); [`Error::Truncated`] when a peer truncated the segment.
    pub fn read_pinned<N: Memory>(
        &self,
        pinned: &Pinned<'_, N>,
        out: &mut Vec<u8>,
        max_len: usize,
    ) -> Result<(), Error> {
        self.reader
            .read_pinned(pinned, out, max_len, |mem, failed| {
                // The copy touched the allocation's pages: a lost one faulted into zeros and the
                // SIGBUS guard's mark.
                if crate::segment::sigbus::memory_truncated(mem, failed) {
                    return Err(Error::Truncated {
                        mapped: mem.geometry().total_len() as u64,
                        actual: None,
                    });
                }
                Ok(())
            })
    }

    /// The allocator's global statistics.
    #[must_use]
    pub fn stats(&self) -> Stats {
        // The reader attached to this very memory, so rebinding cannot fail.
        self.reader.stats(&*self.mem).unwrap_or_default()
    }
}

/// A producer whose messages live in allocator regions (see the module docs).
pub struct AllocProducer<T: Memory> {
    /// The ring's producer, with its role lock.
    producer: ShmProducer<T>,
    /// ring-core's binding, stamping allocations with the Unix clock.
    payloads: PayloadProducer<UnixMillis>,
}

impl<T: Memory> core::fmt::Debug for AllocProducer<T> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("AllocProducer")
            .field("payloads", &self.payloads)
            .finish_non_exhaustive()
    }
}

impl<T: RoleFile> AllocProducer<T> {
    /// Wraps `producer` (a [`ShmProducer`], or a bare ring-core producer, which holds no role
    /// lock). Frees producer allocations that no slot references (left by a producer that died
    /// while filling one).
    ///
    /// # Errors
    ///
    /// [`Error::Alloc`] when the ring has no allocator or its region is corrupt.
    pub fn new(producer: impl Into<ShmProducer<T>>) -> Result<Self, Error> {
        let producer = producer.into();
        let payloads = PayloadProducer::new(producer.memory(), UnixMillis).map_err(Error::Alloc)?;
        Ok(Self { producer, payloads })
    }

    /// The wrapped producer (for `close`, `consumer_info`, `reclaim_dead`...).
    pub fn producer(&mut self) -> &mut Producer<Arc<T>> {
        &mut self.producer
    }

    /// Publishes `data` in a fresh allocation, waiting at most `timeout` for a slot (reclaiming
    /// dead consumers, see [`ProducerExt::claim_with`](crate::raw::ProducerExt::claim_with)). Frees the
    /// allocation of the message the slot held before.
    ///
    /// # Errors
    ///
    /// [`Error::Claim`] (closed, or held back past the timeout); [`Error::Alloc`] (out of arena
    /// space or a ceiling: the slot is aborted, nothing is published).
    pub fn publish(&mut self, data: &[u8], timeout: Duration) -> Result<u64, Error> {
        let payloads = &mut self.payloads;
        let result = self
            .producer
            .claim_with(timeout, |slot| payloads.fill(slot, data));
        match result {
            Ok(r) => r.map_err(Error::from),
            Err(e) => Err(Error::Claim(e)),
        }
    }

    /// Closes the ring: consumers drain what is readable, then get `Closed`. The allocations
    /// stay until [`free_all`](Self::free_all).
    pub fn close(&mut self) {
        self.producer.close();
    }

    /// Frees every allocation the slots still reference and returns the allocator statistics
    /// afterwards (`live` is 0 unless the region is corrupt). Call it once the consumers are
    /// done (after [`close`](Self::close) and their `Closed`): a reader still copying a freed
    /// allocation gets an allocator error (the copy is re-checked), never stale bytes.
    ///
    /// # Errors
    ///
    /// [`Error::Alloc`].
    pub fn free_all(&mut self) -> Result<Stats, Error> {
        self.payloads
            .free_all(self.producer.memory())
            .map_err(Error::Alloc)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::raw::{ConsumerExt as _, ShmRing};
    use crate::segment::CreateOptions;
    use ring_core::arena::AllocError;
    use ring_core::{Config, DeliveryClass};

    #[test]
    fn payloads_round_trip_and_nothing_leaks() {
        let config = Config::new(4, 64).with_allocator(1 << 16, 64);
        let ring = ShmRing::create_memfd(&config, CreateOptions::new()).unwrap();
        let mut p = AllocProducer::new(ShmRing::producer(&ring).unwrap()).unwrap();
        let mut c = ShmRing::consumer(&ring, DeliveryClass::Gating).unwrap();
        let reader = AllocReader::new(&ring).unwrap();
        let mut out = Vec::new();
        for i in 0..100_u32 {
            let msg: Vec<u8> = (0..(i * 37 % 3000) + 1).map(|b| (b ^ i) as u8).collect();
            p.publish(&msg, Duration::from_secs(5)).unwrap();
            let pin = c.recv_pinned(Duration::from_secs(5)).unwrap();
            reader.read_pinned(&pin, &mut out, 4096).unwrap();
            assert_eq!(out, msg);
            drop(pin);
            assert!(
                stats(&*ring).unwrap().live <= 4,
                "live bounded by the slot count"
            );
        }
        p.close();
        let s = p.free_all().unwrap();
        assert_eq!(s.live, 0);
        assert_eq!(s.allocs, 100);
        let (leaks, totals) = leak_report(&*ring).unwrap();
        assert!(leaks.is_empty());
        assert_eq!(totals.count, 0);
    }

    #[test]
    fn a_hostile_length_never_sizes_the_readers_buffer() {
        let config = Config::new(4, 64).with_allocator(1 << 16, 64);
        let ring = ShmRing::create_memfd(&config, CreateOptions::new()).unwrap();
        let mut p = AllocProducer::new(ShmRing::producer(&ring).unwrap()).unwrap();
        let mut c = ShmRing::consumer(&ring, DeliveryClass::Gating).unwrap();
        let reader = AllocReader::new(&ring).unwrap();
        p.publish(b"honest", Duration::from_secs(5)).unwrap();
        // A hostile peer rewrites the message's length word to 1 TiB.
        // Relaxed: a peer's scribble, ordered before our pin by nothing but program order here.
        ring.slot_header(0).meta[1].store(1 << 40, core::sync::atomic::Ordering::Relaxed);
        let pin = c.recv_pinned(Duration::from_secs(5)).unwrap();
        let mut out = Vec::new();
        assert!(matches!(
            reader.read_pinned(&pin, &mut out, 4096),
            Err(Error::MessageTooLarge { len, max: 4096 }) if len == 1 << 40
        ));
        assert!(
            out.capacity() <= 4096,
            "the reader's buffer grew past its bound"
        );
    }

    #[test]
    fn the_live_ceiling_refuses_cleanly_and_publishes_nothing() {
        // 4 slots but room for only 2 live allocations.
        let config = Config::new(4, 64).with_allocator(1 << 12, 2);
        let ring = ShmRing::create_memfd(&config, CreateOptions::new()).unwrap();
        let mut p = AllocProducer::new(ShmRing::producer(&ring).unwrap()).unwrap();
        let t = Duration::from_secs(1);
        assert_eq!(p.publish(b"one", t).unwrap(), 0);
        assert_eq!(p.publish(b"two", t).unwrap(), 1);
        match p.publish(b"three", t) {
            Err(Error::Alloc(AllocError::LiveCeiling { max_live: 2 })) => {}
            other => panic!("expected the live ceiling, got {other:?}"),
        }
        assert_eq!(
            p.producer().published(),
            2,
            "the refused message was not published"
        );
        let s = owner_stats(&*ring, PRODUCER_ALLOC_OWNER).unwrap();
        assert_eq!((s.live, s.ceiling_hits), (2, 1));
        let (leaks, _) = leak_report(&*ring).unwrap();
        assert_eq!(leaks.len(), 2);
        assert!(leaks
            .iter()
            .all(|l| l.owner == PRODUCER_ALLOC_OWNER && l.len == 3));
        p.close();
        assert_eq!(p.free_all().unwrap().live, 0);
    }

    #[test]
    fn take_over_frees_the_dead_producers_orphan_and_keeps_published_payloads() {
        let config = Config::new(4, 64).with_allocator(1 << 12, 16);
        let ring = ShmRing::create_memfd(&config, CreateOptions::new()).unwrap();
        let dead = crate::liveness::owner::dead_owner();
        let mut c = ShmRing::consumer(&ring, DeliveryClass::Gating).unwrap();
        // SAFETY: `old` stands for a process that died: it is forgotten below, before anyone
        // could take it over, and never used again.
        let old = unsafe { Producer::new_unchecked(Arc::clone(&ring), dead) }.unwrap();
        let mut old = AllocProducer::new(old).unwrap();
        old.publish(b"first", Duration::from_secs(1)).unwrap();
        old.publish(b"second", Duration::from_secs(1)).unwrap();
        // The dead producer had allocated and filled a third payload, then died before publishing.
        ring_core::arena::Allocator::attach(ring.alloc_words())
            .unwrap()
            .alloc(100, PRODUCER_ALLOC_OWNER, 0)
            .unwrap();
        core::mem::forget(old);
        assert_eq!(stats(&*ring).unwrap().live, 3);

        let mut new = AllocProducer::new(ShmRing::producer(&ring).unwrap()).unwrap();
        assert_eq!(
            stats(&*ring).unwrap().live,
            2,
            "the orphan is freed, published payloads kept"
        );
        let reader = AllocReader::new(&ring).unwrap();
        let mut out = Vec::new();
        for want in [&b"first"[..], b"second"] {
            let pin = c.recv_pinned(Duration::from_secs(1)).unwrap();
            reader.read_pinned(&pin, &mut out, 64).unwrap();
            assert_eq!(out, want);
        }
        new.publish(b"third", Duration::from_secs(1)).unwrap();
        let pin = c.recv_pinned(Duration::from_secs(1)).unwrap();
        assert_eq!(pin.seq(), 2, "the sequence continues after the take-over");
        drop(pin);
        new.close();
        assert_eq!(new.free_all().unwrap().live, 0);
    }

    #[test]
    fn a_ring_without_allocator_says_so() {
        let ring = ShmRing::create_memfd(&Config::new(4, 64), CreateOptions::new()).unwrap();
        assert!(matches!(stats(&*ring), Err(Error::Alloc(_))));
    }
}
