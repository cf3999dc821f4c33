//! The allocator's ring binding: variable-size payloads for a ring's messages.
//!
//! [`PayloadProducer`] fills claimed slots: each message's bytes go into an allocation in the
//! segment's arena, and the slot carries `meta = [handle, len]`. The allocations are the
//! producer's (allocator owner [`PRODUCER_OWNER`]) and are freed when their slot is claimed for a
//! later message — a claim succeeds only when no reader pins the slot and no gating consumer
//! still needs it — so consumers cannot leak anything, and the live count never exceeds the slot
//! count. Readers pin the message and copy the allocation with [`PayloadReader::read_pinned`]
//! while the pin keeps it alive.
//!
//! After a producer crash, [`PayloadProducer::new`] on the new producer frees the dead
//! producer's allocations that no slot references (the one it may have been filling), so
//! take-over leaks nothing either.
//!
//! The only thing a backend supplies is the [`Clock`] that stamps allocations (leak ages); the
//! memory comes from the slot or pin at hand, so neither side keeps a borrow of it.
//!
//! # Examples
//!
//! ```
//! use ring_core::arena::{stats, PayloadProducer, PayloadReader};
//! use ring_core::{Config, Consumer, DeliveryClass, HeapSegment, OwnerId, Producer};
//!
//! let config = Config::new(4, 64).with_allocator(1 << 12, 16);
//! let seg = HeapSegment::new(&config, OwnerId::new(1).unwrap())?;
//! let mut tx = Producer::new(&seg, OwnerId::new(1).unwrap())?;
//! let mut rx = Consumer::new(&seg, DeliveryClass::Gating, OwnerId::new(2).unwrap())?;
//! let mut payloads = PayloadProducer::new(&seg, || 0)?;
//! let reader = PayloadReader::new(&seg)?;
//!
//! let big = [7u8; 1000]; // far more than a 64-byte slot holds
//! payloads.fill(tx.try_claim()?, &big)?;
//! let mut out = Vec::new();
//! reader.read_pinned(&rx.try_pin()?, &mut out, 4096, |_, _| Ok::<(), ring_core::arena::PayloadError>(()))?;
//! assert_eq!(out, big);
//! assert_eq!(stats(&seg)?.live, 1);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use alloc::vec::Vec;

use super::{AllocError, Allocator, Detached, Leak, LeakTotals, Stats};
use crate::consumer::Pinned;
use crate::memory::Memory;
use crate::producer::WriteSlot;
use crate::sync::{AtomicU64, Ordering};

pub use super::error::PayloadError;

/// The allocator owner id under which the producer's payload allocations are accounted.
pub const PRODUCER_OWNER: u16 = 0;

/// The clock that stamps allocations (the unit of [`Leak::age`]); a backend's only part in the
/// binding. Any `Fn() -> u64` is one.
pub trait Clock {
    /// The time now, in the units leak ages are reported in (ring-os: milliseconds since the
    /// Unix epoch, comparable across processes).
    fn now(&self) -> u64;
}

impl<F: Fn() -> u64> Clock for F {
    fn now(&self) -> u64 {
        self()
    }
}

/// The allocator over `mem`'s region, validated.
fn attach<M: Memory + ?Sized>(mem: &M) -> Result<Allocator<'_>, AllocError> {
    attach_words(mem.alloc_words())
}

/// The allocator over `words`, validated; a ring without an allocator region says so.
fn attach_words(words: &[AtomicU64]) -> Result<Allocator<'_>, AllocError> {
    if words.is_empty() {
        return Err(AllocError::Corrupt {
            what: "ring has no allocator",
            index: 0,
        });
    }
    Allocator::attach(words)
}

/// Global allocation statistics of a ring (any process may read them).
///
/// # Errors
///
/// [`AllocError`] when the ring has no allocator or its region is corrupt.
pub fn stats<M: Memory + ?Sized>(mem: &M) -> Result<Stats, AllocError> {
    Ok(attach(mem)?.stats())
}

/// Statistics of one allocator owner (`0..MAX_OWNERS`; the producer is [`PRODUCER_OWNER`]).
///
/// # Errors
///
/// As [`stats`], and for an owner out of range.
pub fn owner_stats<M: Memory + ?Sized>(mem: &M, owner: u16) -> Result<Stats, AllocError> {
    attach(mem)?.owner_stats(owner)
}

/// Every live allocation (owner, handle, size, age in `clock`'s units) and the totals.
///
/// # Errors
///
/// As [`stats`].
pub fn leak_report<M: Memory + ?Sized>(
    mem: &M,
    clock: &impl Clock,
) -> Result<(Vec<Leak>, LeakTotals), AllocError> {
    let mut leaks = Vec::new();
    let totals = attach(mem)?.leak_report(clock.now(), |l| leaks.push(l));
    Ok((leaks, totals))
}

/// A consumer-side view of a ring's allocator, attached (and validated) once.
#[derive(Debug)]
pub struct PayloadReader {
    /// The validated geometry; the allocator is rebound to the pin's memory for each read.
    state: Detached,
}

impl PayloadReader {
    /// Attaches to the allocator of the ring behind `mem`.
    ///
    /// # Errors
    ///
    /// [`AllocError`] when the ring has no allocator or its region is corrupt.
    pub fn new<M: Memory + ?Sized>(mem: &M) -> Result<Self, AllocError> {
        Ok(Self {
            state: attach(mem)?.detach(),
        })
    }

    /// Copies the allocation a pinned message refers to (`meta = [handle, len]`) into `out`
    /// (resized to the message length, at most `max_len` bytes: the length comes from shared
    /// memory, so it never sizes an allocation beyond the caller's bound). The pin keeps the
    /// allocation alive; it must be a pin of the ring this reader attached to.
    ///
    /// `copied` runs right after the bytes are copied, with the pin's memory and whether the
    /// copy failed: a backend whose pages can vanish under it (ring-os's SIGBUS guard) reports
    /// the loss there, before the copy's own result is looked at.
    ///
    /// # Errors
    ///
    /// [`PayloadError::TooLarge`] (nothing allocated) when the message claims more than
    /// `max_len` bytes; [`PayloadError::Alloc`] when the handle is not live or the lengths
    /// disagree (a corrupt or hostile segment); whatever `copied` returns.
    pub fn read_pinned<M: Memory, E: From<PayloadError>>(
        &self,
        pinned: &Pinned<'_, M>,
        out: &mut Vec<u8>,
        max_len: usize,
        copied: impl FnOnce(&M, bool) -> Result<(), E>,
    ) -> Result<(), E> {
        let [handle, len] = pinned.meta();
        out.clear();
        if len == 0 {
            return Ok(());
        }
        if len > max_len as u64 {
            return Err(PayloadError::TooLarge {
                len,
                max: max_len as u64,
            }
            .into());
        }
        let alloc_err = |e| E::from(PayloadError::Alloc(e));
        let mem = pinned.memory();
        let alloc = Allocator::rebind(mem.alloc_words(), self.state).map_err(alloc_err)?;
        let invalid = AllocError::InvalidHandle { handle };
        let a = alloc.lookup(handle).map_err(alloc_err)?;
        if a.len != len {
            return Err(alloc_err(invalid));
        }
        let n = usize::try_from(len).map_err(|_| alloc_err(invalid))?;
        out.resize(n, 0);
        let got = alloc.read(&a, out);
        copied(mem, got.is_err())?;
        out.truncate(got.map_err(alloc_err)?);
        Ok(())
    }

    /// The allocator's global statistics, read from `mem` (the ring this reader attached to).
    ///
    /// # Errors
    ///
    /// [`AllocError::RegionTooSmall`] when `mem` is not that ring's memory.
    pub fn stats<M: Memory + ?Sized>(&self, mem: &M) -> Result<Stats, AllocError> {
        Ok(Allocator::rebind(mem.alloc_words(), self.state)?.stats())
    }
}

/// The producer side: fills claimed slots with allocations (see the module docs).
#[derive(Debug)]
pub struct PayloadProducer<C: Clock> {
    /// The validated allocator's state; rebound to the slot's memory for each message.
    state: Detached,
    /// The allocation handle each slot's message refers to (0: none).
    slot_handles: Vec<u64>,
    /// Stamps each allocation.
    clock: C,
}

impl<C: Clock> PayloadProducer<C> {
    /// Binds the allocator of the ring behind `mem` (the producer's memory) and frees producer
    /// allocations that no slot references (left by a producer that died while filling one).
    /// Call it only as the ring's producer: it is the allocator's one mutator.
    ///
    /// # Errors
    ///
    /// [`AllocError`] when the ring has no allocator or its region is corrupt.
    pub fn new<M: Memory + ?Sized>(mem: &M, clock: C) -> Result<Self, AllocError> {
        let mut alloc = attach(mem)?;
        let n = mem.geometry().slots();
        // Relaxed: only the producer (us, now) writes slot metadata.
        let slot_handles: Vec<u64> = (0..n)
            .map(|i| mem.slot_header(i).meta[0].load(Ordering::Relaxed))
            .collect();
        let mut referenced: Vec<u64> = slot_handles.iter().copied().filter(|&h| h != 0).collect();
        referenced.sort_unstable();
        let mut orphans = Vec::new();
        alloc.leak_report(clock.now(), |l| {
            if l.owner == PRODUCER_OWNER && referenced.binary_search(&l.handle).is_err() {
                orphans.push(l.handle);
            }
        });
        for h in orphans {
            let _ = alloc.free(h, PRODUCER_OWNER);
        }
        Ok(Self {
            state: alloc.detach(),
            slot_handles,
            clock,
        })
    }

    /// Writes `data` into a fresh allocation, points `slot` at it and publishes it; returns its
    /// sequence number. Frees the allocation of the message the slot held before (the claim
    /// proves no reader pins it and no gating consumer needs it).
    ///
    /// # Errors
    ///
    /// [`PayloadError::Alloc`] (out of arena space or a ceiling: the slot is aborted, nothing is
    /// published); [`PayloadError::Claim`] when the publish is refused.
    pub fn fill<M: Memory>(
        &mut self,
        mut slot: WriteSlot<'_, M>,
        data: &[u8],
    ) -> Result<u64, PayloadError> {
        let len = data.len() as u64;
        let slots = self.slot_handles.len() as u64;
        let index = usize::try_from(slot.seq().checked_rem(slots).unwrap_or(0)).unwrap_or(0);
        let handle = {
            let mut alloc = Allocator::rebind(slot.memory().alloc_words(), self.state)?;
            let handle = self.replace(&mut alloc, index, data);
            self.state = alloc.detach();
            handle?
        };
        if let Some(h) = self.slot_handles.get_mut(index) {
            *h = handle;
        }
        slot.set_meta([handle, len]);
        slot.publish().map_err(PayloadError::Claim)
    }

    /// Frees slot `index`'s old allocation and allocates and writes `data` (handle 0 when empty).
    fn replace(
        &mut self,
        alloc: &mut Allocator<'_>,
        index: usize,
        data: &[u8],
    ) -> Result<u64, AllocError> {
        if let Some(old) = self.slot_handles.get_mut(index) {
            if *old != 0 {
                // The slot is claimed: no reader pins it and no gating consumer needs it.
                let _ = alloc.free(*old, PRODUCER_OWNER);
                *old = 0;
            }
        }
        if data.is_empty() {
            return Ok(0);
        }
        let a = alloc.alloc(data.len() as u64, PRODUCER_OWNER, self.clock.now())?;
        alloc.writer(&a)?.write(data)?;
        Ok(a.handle)
    }

    /// Frees every allocation the slots still reference and returns the allocator statistics
    /// afterwards (`live` is 0 unless the region is corrupt). `mem` is the producer's memory.
    /// Call it once the consumers are done (after the ring is closed and they saw `Closed`): a
    /// reader still copying a freed allocation gets an allocator error (the copy is re-checked),
    /// never stale bytes.
    ///
    /// # Errors
    ///
    /// [`AllocError::RegionTooSmall`] when `mem` is not the ring this producer bound.
    pub fn free_all<M: Memory + ?Sized>(&mut self, mem: &M) -> Result<Stats, AllocError> {
        let mut alloc = Allocator::rebind(mem.alloc_words(), self.state)?;
        for h in &mut self.slot_handles {
            if *h != 0 {
                let _ = alloc.free(*h, PRODUCER_OWNER);
                *h = 0;
            }
        }
        self.state = alloc.detach();
        Ok(alloc.stats())
    }
}

#[cfg(all(test, not(ring_loom)))]
mod tests {
    use super::*;
    use crate::{Config, Consumer, DeliveryClass, HeapSegment, OwnerId, Producer};

    fn id(n: u64) -> OwnerId {
        OwnerId::new(n).unwrap()
    }

    #[test]
    fn the_bound_state_carries_the_ceilings_and_a_rebind_sweeps_orphans() {
        // 4 slots, room for 2 live allocations: the live count must survive between fills.
        let seg = HeapSegment::new(&Config::new(4, 64).with_allocator(1 << 12, 2), id(1)).unwrap();
        let mut tx = Producer::new(&seg, id(1)).unwrap();
        let mut rx = Consumer::new(&seg, DeliveryClass::Gating, id(2)).unwrap();
        let mut p = PayloadProducer::new(&seg, || 5).unwrap();
        assert_eq!(p.fill(tx.try_claim().unwrap(), b"one").unwrap(), 0);
        assert_eq!(p.fill(tx.try_claim().unwrap(), b"two").unwrap(), 1);
        assert_eq!(
            p.fill(tx.try_claim().unwrap(), b"three"),
            Err(PayloadError::Alloc(AllocError::LiveCeiling { max_live: 2 }))
        );
        assert_eq!(tx.published(), 2, "the refused message was not published");
        let (leaks, _) = leak_report(&seg, &|| 7).unwrap();
        assert!(leaks
            .iter()
            .all(|l| l.age == 2 && l.owner == PRODUCER_OWNER));

        let reader = PayloadReader::new(&seg).unwrap();
        let mut out = Vec::new();
        let ok = |_: &&HeapSegment, _| Ok::<(), PayloadError>(());
        reader
            .read_pinned(&rx.try_pin().unwrap(), &mut out, 64, ok)
            .unwrap();
        assert_eq!(out, b"one");
        let lost = |_: &&HeapSegment, failed| {
            if failed {
                Ok(())
            } else {
                Err(PayloadError::TooLarge { len: 0, max: 0 })
            }
        };
        assert!(
            reader
                .read_pinned(&rx.try_pin().unwrap(), &mut out, 64, lost)
                .is_err(),
            "the hook's verdict is returned"
        );
    }

    #[test]
    fn a_new_binding_frees_a_dead_producers_orphan_and_keeps_published_payloads() {
        let seg = HeapSegment::new(&Config::new(4, 64).with_allocator(1 << 12, 16), id(1)).unwrap();
        let mut tx = Producer::new(&seg, id(1)).unwrap();
        let mut p = PayloadProducer::new(&seg, || 0).unwrap();
        p.fill(tx.try_claim().unwrap(), b"first").unwrap();
        p.fill(tx.try_claim().unwrap(), b"second").unwrap();
        // The producer had allocated a third payload, then died before publishing it.
        Allocator::attach(seg.alloc_words())
            .unwrap()
            .alloc(9, PRODUCER_OWNER, 0)
            .unwrap();
        assert_eq!(stats(&seg).unwrap().live, 3);
        let mut again = PayloadProducer::new(&seg, || 0).unwrap();
        assert_eq!(
            stats(&seg).unwrap().live,
            2,
            "the orphan is freed, published payloads kept"
        );
        assert_eq!(again.free_all(&seg).unwrap().live, 0);
    }
}
