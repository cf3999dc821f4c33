//! loom models of the allocator (one mutator, a concurrent reader in another "process") and of
//! the futex-style wait/wake handshakes (no lost wake-up).
//!
//! Run as `loom_ring.rs` says.
#![cfg(ring_loom)]
#![allow(clippy::std_instead_of_core, reason = "std test")]

use loom::thread;
use ring_core::arena::{region_len, AllocConfig, AllocError, Allocator};
use ring_core::{AtomicU64, DeliveryClass};
use ring_verification::support::futex::{futex_ring, FutexWait};
use ring_verification::support::model;
use std::sync::Arc;

fn region(arena: u64, max_live: u32) -> Arc<Vec<AtomicU64>> {
    let words = region_len(arena, max_live).expect("valid region") / 8;
    Arc::new((0..words).map(|_| AtomicU64::new(0)).collect())
}

/// An allocator of `arena` bytes and `max_live` entries (byte ceiling: the arena) over
/// `words`, a [`region`] of that shape.
fn init(words: &[AtomicU64], arena: u64, max_live: u32) -> Allocator<'_> {
    let config = AllocConfig {
        arena_bytes: arena,
        max_live,
        byte_ceiling: arena,
    };
    Allocator::init(words, config).unwrap()
}

/// Runs `body` as a loom model twice on a fresh [`region`] of `arena` bytes and `max_live`
/// entries, with `yield_first` false, then true: `body`'s reader (its main thread) yields first
/// when it is true. loom only explores a load reading a store that already ran, and runs the
/// main thread first: the yield lets the mutator's stores exist when the reader loads (and loom
/// pick stale or new values for each load).
fn reader_late_then_early(arena: u64, max_live: u32, body: fn(Arc<Vec<AtomicU64>>, bool)) {
    for yield_first in [false, true] {
        model(move || body(region(arena, max_live), yield_first));
    }
}

/// Alloc/free/reuse racing a reader: the arena is one granule and the entry table one entry,
/// so the second allocation reuses both. A reader holding the first handle gets its entry and
/// its bytes whole, or `InvalidHandle`, never the second allocation's fields or bytes.
/// Run with the reader yielding first and not ([`reader_late_then_early`]).
#[test]
fn reader_never_sees_a_reused_allocation() {
    reader_late_then_early(64, 1, |words, yield_first| {
        let mut alloc = init(&words, 64, 1);
        let a = alloc.alloc(16, 1, 0).unwrap();
        alloc.writer(&a).unwrap().write(&[0xAA; 16]).unwrap();
        let w2 = words.clone();
        let t = thread::spawn(move || {
            let mut alloc = Allocator::attach(&w2).unwrap();
            alloc.free(a.handle, 1).unwrap();
            // A different length, so a lookup that mixed the two entries' fields shows.
            let b = alloc.alloc(8, 2, 1).unwrap();
            assert_eq!(b.offset, a.offset, "one granule: reused");
            alloc.writer(&b).unwrap().write(&[0xBB; 8]).unwrap();
        });
        if yield_first {
            thread::yield_now();
        }
        let reader = Allocator::attach(&words).unwrap();
        match reader.lookup(a.handle) {
            Ok(got) => assert_eq!(got, a, "lookup mixed two allocations"),
            Err(e) => assert_eq!(e, AllocError::InvalidHandle { handle: a.handle }),
        }
        let mut out = [0u8; 16];
        match reader.read(&a, &mut out) {
            Ok(n) => assert_eq!(&out[..n], &[0xAA; 16], "read a reused allocation"),
            Err(AllocError::InvalidHandle { .. }) => {}
            Err(e) => panic!("unexpected {e}"),
        }
        t.join().unwrap();
    });
}

/// The allocator's cycle of one entry (allocate, free, allocate again with another length)
/// runs in its own thread while a reader looks up the *new* allocation's handle: the lookup
/// returns that allocation exactly or `InvalidHandle`, never the new meta word with the old
/// allocation's fields. The entry's meta store (Release) is what publishes the fields written
/// before it (the `fence(Release)` before them orders only the earlier free): with it Relaxed
/// (mutant `alloc-meta-release`) loom returns the new meta with the old length, 16 for 8. The
/// reader has seen none of the mutator's stores and yields first (see
/// `reader_never_sees_a_reused_allocation`), so loom can offer it the old fields.
///
/// This model was once `#[ignore]`d as "failing on the unmutated code". It does not: it passes
/// on that code at every preemption bound tried (2, 3 and unbounded, 83,238 executions), at the
/// commit that ignored it as well, and fails only with `alloc-meta-release` applied. The
/// likely source of the wrong observation: at that commit `alloc-meta-release` was the last
/// line of `mutants.txt`, and `mutants.sh` used to leave the last mutant applied in its scratch
/// copy (`target/mutants/src`), so a run there tests the mutant, not the code. `mutants.sh` now
/// restores the scratch copy when it exits.
#[test]
fn reader_never_sees_a_half_published_allocation() {
    let cfg = AllocConfig {
        arena_bytes: 64,
        max_live: 1,
        byte_ceiling: 64,
    };
    let cycle = |alloc: &mut Allocator<'_>| {
        let a = alloc.alloc(16, 1, 0).unwrap();
        alloc.free(a.handle, 1).unwrap();
        alloc.alloc(8, 2, 1).unwrap()
    };
    model(move || {
        // The handle the cycle ends with, from a dry run on a region of its own.
        let dry = region(64, 1);
        let want = cycle(&mut Allocator::init(&dry, cfg).unwrap());
        let words = region(64, 1);
        Allocator::init(&words, cfg).unwrap();
        let w2 = words.clone();
        let t = thread::spawn(move || {
            assert_eq!(cycle(&mut Allocator::attach(&w2).unwrap()), want);
        });
        thread::yield_now();
        let reader = Allocator::attach(&words).unwrap();
        match reader.lookup(want.handle) {
            Ok(got) => assert_eq!(got, want, "lookup saw the new meta with old fields"),
            Err(e) => assert_eq!(
                e,
                AllocError::InvalidHandle {
                    handle: want.handle
                }
            ),
        }
        t.join().unwrap();
    });
}

/// Reclaiming a dead owner's allocations (`free_all_of`) racing a reader's lookup and leak
/// report: the reader sees each allocation live or gone, never a half-freed one, and the
/// accounting ends exact.
#[test]
fn reclaim_of_a_dead_owner_races_a_reader() {
    reader_late_then_early(128, 2, |words, yield_first| {
        let mut alloc = init(&words, 128, 2);
        let a = alloc.alloc(10, 3, 0).unwrap();
        let b = alloc.alloc(40, 4, 0).unwrap();
        let w2 = words.clone();
        let t = thread::spawn(move || {
            let mut alloc = Allocator::attach(&w2).unwrap();
            let freed = alloc.free_all_of(3).unwrap();
            assert_eq!((freed.count, freed.bytes, freed.corrupt), (1, 10, 0));
        });
        if yield_first {
            thread::yield_now();
        }
        let reader = Allocator::attach(&words).unwrap();
        match reader.lookup(a.handle) {
            Ok(got) => assert_eq!(got, a),
            Err(e) => assert_eq!(e, AllocError::InvalidHandle { handle: a.handle }),
        }
        assert_eq!(reader.lookup(b.handle), Ok(b));
        let totals = reader.leak_report(0, |_| {});
        assert_eq!(totals.corrupt, 0);
        assert!((1..=2).contains(&totals.count));
        t.join().unwrap();
        let after = Allocator::attach(&words).unwrap();
        assert_eq!(after.stats().live, 1);
        assert_eq!(after.owner_stats(3).unwrap().live, 0);
    });
}

/// A consumer parks until a message arrives; the producer publishes once. No lost wake-up
/// (the publish / `wait_ready` Dekker handshake), and the message is there when it wakes.
#[test]
fn consumer_wait_has_no_lost_wakeup() {
    model(|| {
        let (s, mut p, mut c) = futex_ring(2, 8, DeliveryClass::Gating);
        let t = thread::spawn(move || {
            p.try_publish(&[7; 8]).unwrap();
        });
        let mut w = FutexWait(s.clone());
        c.wait_ready(&mut w).unwrap();
        let mut buf = [0u8; 8];
        assert_eq!(c.try_copy(&mut buf).unwrap().seq, 0);
        t.join().unwrap();
    });
}

/// A consumer parks until the ring closes; the producer closes it (no message). No lost
/// wake-up: `close` bumps the futex word and runs the same Dekker handshake as a publish
/// (`wake_consumers`: bump, SeqCst fence, waiters load) against `wait_ready`'s (waiters bump,
/// SeqCst fence, re-check of head and flags). Without the close's fence (mutant
/// `close-wake-fence`) the consumer's re-check can miss the closed flag while the producer's
/// load misses the waiter, and the consumer sleeps forever (loom reports the deadlock).
#[test]
fn consumer_wait_wakes_on_close() {
    model(|| {
        let (s, mut p, mut c) = futex_ring(2, 8, DeliveryClass::Gating);
        let t = thread::spawn(move || {
            p.close();
            p
        });
        let mut w = FutexWait(s.clone());
        c.wait_ready(&mut w).unwrap();
        let mut buf = [0u8; 8];
        assert_eq!(c.try_copy(&mut buf), Err(ring_core::ReadError::Closed));
        drop(t.join().unwrap());
    });
}

/// The producer parks while a gating consumer holds the ring full; the consumer consumes once.
/// No lost wake-up (the consumer-advance / `park` handshake), and the claim then succeeds.
#[test]
fn producer_wait_has_no_lost_wakeup() {
    model(|| {
        let (s, mut p, mut c) = futex_ring(1, 8, DeliveryClass::Gating);
        p.try_publish(&[1; 8]).unwrap();
        let t = thread::spawn(move || {
            let mut buf = [0u8; 8];
            assert_eq!(c.try_copy(&mut buf).unwrap().seq, 0);
            c
        });
        let mut w = FutexWait(s.clone());
        let slot = p.claim(&mut w).unwrap();
        assert_eq!(slot.seq(), 1);
        drop(slot);
        drop(t.join().unwrap());
    });
}

/// The producer parks on a slot a skip-on-lag reader has pinned; the reader lets the pin go.
/// That read's progress stays local (`PROGRESS_EVERY`), but the unpin is what the producer
/// waits for: it must still be woken (no lost wake-up), and the claim then succeeds.
#[test]
fn producer_parked_on_a_deferred_unpin_is_woken() {
    model(|| {
        let (s, mut p, mut c) = futex_ring(1, 8, DeliveryClass::SkipOnLag);
        p.try_publish(&[1; 8]).unwrap();
        let t = thread::spawn(move || {
            // Refused only if the claim below came first (the message is being overwritten).
            if let Ok(pin) = c.try_pin() {
                assert_eq!(pin.seq(), 0);
                drop(pin);
            }
            c
        });
        let mut w = FutexWait(s.clone());
        let slot = p.claim(&mut w).unwrap();
        assert_eq!(slot.seq(), 1);
        drop(slot);
        drop(t.join().unwrap());
    });
}
