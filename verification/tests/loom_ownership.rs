//! loom models of the ownership orderings no other model exercises: registration into an entry
//! another thread is freeing, `attach` racing the creator across the init barrier, and the
//! producer's sweep of free entries' reader bits racing a consumer that registers and pins.
//!
//! Run: `RUSTFLAGS="--cfg ring_loom" LOOM_MAX_PREEMPTIONS=2 CARGO_TARGET_DIR=target/loom \
//!       cargo test -p ring-verification --release --test loom_ownership`
#![cfg(ring_loom)]
#![allow(clippy::std_instead_of_core, reason = "std test")]

use core::sync::atomic::Ordering;
use loom::thread;
use ring_core::{
    AttachError, ClaimError, Config, Consumer, DeliveryClass, Memory, OwnedSegment, Producer,
    ReadError, Spin, INLINE_CAPACITY,
};
use ring_verification::support::{assert_pinned16, config16, id, model, owned, ring, ring_with};
use std::sync::Arc;

/// Registration into an entry its previous holder is freeing (`Consumer::drop`: FREE, then the
/// owner word 0, both Release), or that the producer is reclaiming (the same two stores). The registrant has no synchronisation with the freeing thread
/// but its owner CAS, so that CAS's Acquire is all that orders its `state` load after the
/// holder's FREE: the registration must succeed, into a fresh generation, and the new consumer
/// must work. A Relaxed CAS lets the `state` load read the old JOINING or ACTIVE, and the
/// registration is refused as a corrupt entry.
///
/// How the model gets there: the old consumer registers and leaves in its own thread, so the
/// registrant has seen none of its `state` stores (loom never returns, after a yield, a store
/// the thread saw before it); the registrant yields first (loom runs the main thread first)
/// and then tries only once the old consumer has left, which it learns from a Relaxed flag
/// (no synchronisation: loom's RMWs read the newest store, so the CAS then reads the 0 the
/// old consumer's drop stored).
#[test]
fn registration_into_an_entry_being_freed() {
    // Freed by the holder's drop, then by the producer's reclaim of the dead holder.
    for by_reclaim in [false, true] {
        model(move || registration_into_freed_entry(by_reclaim));
    }
}

fn registration_into_freed_entry(by_reclaim: bool) {
    let (s, mut p) = ring(&config16(1, 1));
    let left = Arc::new(loom::sync::atomic::AtomicBool::new(false));
    let (s2, left2) = (s.clone(), left.clone());
    let t = thread::spawn(move || {
        let old = Consumer::new(s2, DeliveryClass::SkipOnLag, id(2)).unwrap();
        let generation = old.generation();
        if by_reclaim {
            std::mem::forget(old);
            // SAFETY: the consumer was leaked: it makes no more calls.
            assert!(unsafe { p.reclaim(0, id(2)) }.unwrap().was_registered);
        } else {
            drop(old);
        }
        // Relaxed: deliberately no synchronisation with the registrant.
        left2.store(true, Ordering::Relaxed);
        (p, generation)
    });
    thread::yield_now();
    // Relaxed: as above.
    if !left.load(Ordering::Relaxed) {
        t.join().unwrap();
        return;
    }
    let mut c = match Consumer::new_at(s.clone(), 0, DeliveryClass::SkipOnLag, id(3)) {
        Ok(c) => c,
        Err((_, e)) => panic!("registration into a freed entry refused: {e}"),
    };
    assert!(c.is_registered());
    let (mut p, old_generation) = t.join().unwrap();
    assert_ne!(
        c.generation(),
        old_generation,
        "a registration bumps the generation"
    );
    assert_eq!(p.try_publish(&[7; 16]), Ok(0));
    let m = c.try_pin().unwrap();
    let mut got = [0u8; 16];
    assert_eq!((m.seq(), m.copy_to(&mut got), got), (0, 16, [7; 16]));
}

/// `attach` racing the creator across the init barrier: the attacher validates the header
/// (`OwnedSegment::attach_check`, the function `RawMemory::attach` runs) while the creator
/// formats it (`OwnedSegment::initialize`, the code `RawMemory::initialize` runs). It sees "not
/// a segment yet" (no magic, or not ready) or the whole, right geometry — never a half-written
/// header. Weakening the creator's Release store of READY or the attacher's Acquire load of it
/// lets the attacher read READY and then a stale (zero) field after it.
#[test]
fn attach_races_initialize_across_the_init_barrier() {
    model(|| {
        let cfg = config16(2, 2);
        let s = Arc::new(OwnedSegment::unformatted(&cfg).expect("valid config"));
        let creator = s.clone();
        let t = thread::spawn(move || creator.initialize(id(1)));
        match s.attach_check() {
            Ok(g) => assert_eq!(g, *s.geometry(), "attached with a wrong geometry"),
            Err(AttachError::BadMagic { .. } | AttachError::NotInitialized { .. }) => {}
            Err(e) => panic!("attach saw a half-initialised header: {e}"),
        }
        t.join().unwrap();
        assert_eq!(s.attach_check(), Ok(*s.geometry()));
    });
}

/// The producer's sweep of a free entry's reader bit races a consumer that registers into that
/// entry and pins the slot. The bit is garbage left in the slot (a pin its consumer leaked and
/// never took back) while entry 0 is free. Whatever the order: a pinned message is whole and
/// stays the same while pinned (the sweep never clears a registered consumer's bit), the claim
/// is refused only by that pin, and at the end nothing is wedged.
///
/// Ordering note: the sweep locks the entry with a CAS on its owner word, so its success and
/// the registrant's owner CAS are ordered by that word's modification order whatever their
/// orderings (two RMWs cannot both read the same 0): the sweep succeeds only when no
/// registration holds the entry, and then the registrant's Acquire CAS (reading the sweep's
/// Release store of 0) orders its pin after the sweep's clear. The pin `fetch_or`'s Release
/// half and the claim CAS's failure Acquire are not needed for the sweep (see the equivalent
/// mutants in `verification/mutants.txt`).
#[test]
fn sweep_of_free_bits_races_a_registering_pinner() {
    model(|| {
        let (s, mut p) = ring(&config16(1, 1));
        assert_eq!(p.try_publish(&[0xA0; 16]), Ok(0));
        // Garbage: the bit of free entry 0 (Relaxed: before the threads start).
        s.slot_header(0).state.fetch_or(1, Ordering::Relaxed);
        let s2 = s.clone();
        let t = thread::spawn(move || {
            let mut r = p.try_publish(&[0xA1; 16]);
            if let Err(ClaimError::Pinned { readers: 0, .. }) = r {
                // Refused while it swept the garbage bit: the retry must not be.
                r = p.try_publish(&[0xA1; 16]);
            } else if r.is_err() {
                // Held off by a pin: one more try, which a wrongly cleared bit would let in.
                thread::yield_now();
                r = p.try_publish(&[0xA1; 16]);
            }
            (p, r)
        });
        let mut registered = false;
        match Consumer::new(s2, DeliveryClass::SkipOnLag, id(2)) {
            Ok(mut c) => {
                registered = true;
                if let Ok(m) = c.try_pin() {
                    assert_pinned16(&m);
                    thread::yield_now();
                    // Unchanged under the pin.
                    assert_pinned16(&m);
                }
            }
            // The sweep held the entry (owner word locked) at that moment.
            Err(ring_core::Error::ConsumerTableFull { .. }) => {}
            Err(e) => panic!("registration: {e}"),
        }
        let (mut p, r) = t.join().unwrap();
        match r {
            // Published, or refused while the sweep cleared a bit a free entry held (the
            // consumer had left by then): a transient refusal, retried below.
            Ok(1) | Err(ClaimError::Pinned { readers: 0, .. }) => {}
            // Held off twice by the registered consumer's bit (its pin, or the garbage bit its
            // entry now owns until its drop takes it back).
            Err(ClaimError::Pinned { readers: 1, .. }) => {
                assert!(
                    registered,
                    "refused by a free entry's bit, which the sweep must clear"
                );
            }
            other => panic!("unexpected claim result {other:?}"),
        }
        // Everyone is gone: the garbage bit was swept or taken back by the consumer's drop.
        assert_eq!(ring_core::inspect::total_pins(&*s), 0, "a slot is wedged");
        let head = p.published();
        assert_eq!(p.try_publish(&[0xA2; 16]), Ok(head));
        let mut c = Consumer::new(s.clone(), DeliveryClass::SkipOnLag, id(3)).unwrap();
        match c.try_pin() {
            Err(ReadError::Empty) => {}
            other => panic!(
                "a fresh consumer should start at head: {:?}",
                other.map(|m| m.seq())
            ),
        };
    });
}

/// A producer hands the ring to the next one: it publishes twice, then drops (its Release CAS
/// of the owner word to 0); the next producer has no synchronisation with it but its owner CAS,
/// and must start at the published head, or it would publish a sequence number twice.
/// Weakening the drop's Release or the new producer's Acquire owner CAS lets it read the stale
/// head 1. (Set up as `registration_into_an_entry_being_freed`: the old producer lives in its
/// own thread, the new one yields first and starts once a Relaxed flag says the old one left.)
#[test]
fn producer_handoff_starts_at_the_last_head() {
    model(|| {
        let s = owned(&config16(2, 1));
        let left = Arc::new(loom::sync::atomic::AtomicBool::new(false));
        let (s2, left2) = (s.clone(), left.clone());
        let t = thread::spawn(move || {
            let mut old = Producer::new(s2, id(1)).unwrap();
            assert_eq!(old.try_publish(&[0xA0; 16]), Ok(0));
            assert_eq!(old.try_publish(&[0xA1; 16]), Ok(1));
            drop(old);
            // Relaxed: deliberately no synchronisation with the next producer.
            left2.store(true, Ordering::Relaxed);
        });
        thread::yield_now();
        // Relaxed: as above.
        if !left.load(Ordering::Relaxed) {
            t.join().unwrap();
            return;
        }
        let mut new = Producer::new(s.clone(), id(2)).unwrap();
        assert_eq!(new.published(), 2, "the new producer missed the last head");
        t.join().unwrap();
        assert_eq!(new.try_publish(&[0xA2; 16]), Ok(2));
    });
}

/// A message published just before `close` is never lost: a consumer that reads `Closed` has
/// received it. The consumer learns of the close from the flags word (Acquire, pairing with
/// the close's Release), then re-loads `head`; weakening either lets the re-load read the old
/// head, and the consumer reports `Closed` with the last message unread.
#[test]
fn close_after_publish_loses_nothing() {
    model(|| {
        let (_, mut p, mut c) = ring_with(&config16(2, 1), DeliveryClass::Gating);
        let t = thread::spawn(move || {
            assert_eq!(p.try_publish(&[0xA0; 16]), Ok(0));
            p.close();
            p
        });
        let mut buf = [0u8; 16];
        for _ in 0..3 {
            match c.try_copy(&mut buf) {
                Ok(got) => assert_eq!((got.seq, buf), (0, [0xA0; 16])),
                Err(ReadError::Closed) => {
                    assert_eq!(c.received(), 1, "Closed reported before the last message");
                    break;
                }
                Err(ReadError::Empty) => thread::yield_now(),
                Err(e) => panic!("unexpected {e}"),
            }
        }
        drop(t.join().unwrap());
    });
}

/// A producer dies mid-write (slot claimed, claim marker stored, half the payload rewritten) and
/// a new producer, which learned of the death by joining it, takes over while a reader pins the
/// slot. The reader sees the old message whole or is refused, never the half-written bytes: the
/// take-over makes the stamp odd and hands the slot back with a Release clear of WRITER, and the
/// reader's Acquire pin pairs with it and then sees the odd stamp and the dead claim's marker.
/// With a Relaxed clear nothing orders the marker (written in another thread) before the pin,
/// and loom lets the pin read the old stamp and marker and then the half-written word (mutant
/// `takeover-writer-release`).
///
/// The reader registers before message 0 is published, so message 0 is its to read (a reader
/// registered after it starts at head 1 and only ever reads `Empty`: the model's first version
/// did that and could not fail).
///
/// Message 0 is longer than `INLINE_CAPACITY`, so the reader reads it from the payload area,
/// where the dead producer's half write lies. (A small message would be read from its copy in
/// the message line, which a write never touches before `finish` — with 16-byte messages the
/// model stopped telling the mutant apart once ABI 3 put small messages inline.)
#[test]
fn take_over_hands_back_a_half_written_slot() {
    const LEN: usize = INLINE_CAPACITY + 8;
    model(|| {
        let cfg = Config::new(1, LEN as u32).with_consumers(1);
        let s = Arc::new(OwnedSegment::new(&cfg, id(1)).expect("valid config"));
        let mut p = Producer::new(s.clone(), id(1)).unwrap();
        let mut c = Consumer::new(s.clone(), DeliveryClass::SkipOnLag, id(2)).unwrap();
        assert_eq!(p.try_publish(&[0xA0; LEN]), Ok(0));
        let reader = thread::spawn(move || {
            thread::yield_now();
            if let Ok(m) = c.try_pin() {
                let mut a = [0u8; LEN];
                m.copy_to(&mut a);
                assert_eq!((m.seq(), a), (0, [0xA0; LEN]), "pinned a half-written slot");
            }
        });
        let dying = thread::spawn(move || {
            if let Ok(mut slot) = p.try_claim() {
                slot.write(&[0xA1; 8]).unwrap();
                std::mem::forget(slot);
            }
            std::mem::forget(p);
        });
        dying.join().unwrap();
        // SAFETY: the dead producer's thread was joined after leaking its handle and claim.
        let mut new = unsafe { Producer::take_over(s.clone(), id(3), id(1)) }.unwrap();
        reader.join().unwrap();
        // The reader is gone: the slot is the new producer's.
        let head = new.published();
        assert_eq!(new.try_publish(&[0xA2; 16]), Ok(head));
    });
}

/// A consumer's (or registrant's) own work, outside the ring: a loom atomic it sets to
/// [`STARTED`] when its thread starts and to [`FINISHED`] when the work is done; the producer
/// must see [`FINISHED`] once the ring tells it the work is over.
///
/// Why two stores: loom never offers a thread, after it yields, a store it had seen before the
/// yield (here the initial 0, which the main thread created), so the stale value the producer
/// could wrongly read must be a store of the worker's own: [`STARTED`].
type Work = Arc<loom::sync::atomic::AtomicU64>;
const STARTED: u64 = 1;
const FINISHED: u64 = 2;

fn work() -> Work {
    Arc::new(loom::sync::atomic::AtomicU64::new(0))
}

/// The work-visibility models: `worker` runs on a thread with a [`Work`] it marks [`STARTED`]
/// first and [`FINISHED`] when it calls its argument (Relaxed, both: the ring is what must order
/// them). The main thread yields first (loom runs it first: the worker's stores then exist when
/// it loads) and, when `ring_says_over` reports the work over, must see [`FINISHED`] (`what`
/// says what it saw otherwise). What `worker` returns is dropped after it is joined.
fn work_is_visible_once<T: Send + 'static>(
    worker: impl FnOnce(&dyn Fn()) -> T + Send + 'static,
    ring_says_over: impl FnOnce() -> bool,
    what: &str,
) {
    let w = work();
    let done = w.clone();
    let t = thread::spawn(move || {
        done.store(STARTED, Ordering::Relaxed);
        worker(&|| done.store(FINISHED, Ordering::Relaxed))
    });
    thread::yield_now();
    if ring_says_over() {
        // Relaxed: ordered (or not) by the ring.
        assert_eq!(w.load(Ordering::Relaxed), FINISHED, "{what}");
    }
    drop(t.join().unwrap());
}

/// `wait_drained` is an "ack all": when it returns true, whatever a gating consumer did before
/// it consumed the last message (here, work done while the message was pinned) happens before
/// the return. The consumer's Release cursor store (`advance`, after the unpin) pairs with the
/// producer's Acquire cursor load in its gating scan; the unpin's own Release pairs only with a
/// claim CAS, which `wait_drained` never runs. Weakening either side of the cursor pair lets
/// the producer see the new cursor and still read the work's old value (mutants
/// `advance-cursor-release`, `gating-cursor-acquire`).
///
/// The producer yields first (loom runs the main thread first) so that the consumer's stores
/// exist when it loads; its wait has no budget, so it never parks (a park's Acquire load of the
/// drain word could synchronise by another path).
#[test]
fn drained_after_consume_orders_the_consumers_work() {
    model(|| {
        let (_, mut p, mut c) = ring_with(&config16(2, 1), DeliveryClass::Gating);
        assert_eq!(p.try_publish(&[0xA0; 16]), Ok(0));
        work_is_visible_once(
            move |finish| {
                let m = c.try_pin().unwrap();
                let mut a = [0u8; 16];
                m.copy_to(&mut a);
                assert_eq!(a, [0xA0; 16]);
                finish();
                drop(m);
                c
            },
            // Ordered (or not) by the ring's cursor pair.
            || p.wait_drained(&mut Spin::new(0)),
            "drained, but the consumer's work is not visible",
        );
    });
}

/// `wait_drained` returns true when the last gating consumer leaves: what it did before it left
/// happens before the return. `Consumer::drop`'s Release store of FREE pairs with the gating
/// scan's Acquire state load; weakening either lets the producer skip the freed entry and still
/// read the consumer's work's old value (mutants `drop-free-release`, `gating-state-acquire`).
/// Set up as `drained_after_consume_orders_the_consumers_work`.
#[test]
fn drained_after_leave_orders_the_consumers_work() {
    model(|| {
        let (_, mut p, c) = ring_with(&config16(2, 1), DeliveryClass::Gating);
        assert_eq!(p.try_publish(&[0xA0; 16]), Ok(0));
        work_is_visible_once(
            move |finish| {
                finish();
                // Leaves with message 0 unread.
                drop(c);
            },
            // Ordered (or not) by FREE's Release / the scan's Acquire.
            || p.wait_drained(&mut Spin::new(0)),
            "drained by a leaving consumer, but its work is not visible",
        );
    });
}

/// `wait_for_consumers` counts a subscriber only once its start point is final, and what the
/// subscriber did before it registered happens before the count: the registration's SeqCst
/// fence (a release fence) before its Relaxed-or-Release `ready` store pairs with the Acquire
/// `ready` load in `ready_consumers`. Weakening that load lets the producer count the consumer
/// and still read the work's old value (mutant `ready-acquire`).
#[test]
fn counted_consumer_orders_the_registrants_work() {
    model(|| {
        let (s, mut p) = ring(&config16(2, 1));
        let s2 = s.clone();
        work_is_visible_once(
            move |finish| {
                finish();
                Consumer::new(s2, DeliveryClass::Gating, id(2)).unwrap()
            },
            // Ordered (or not) by the `ready` pair.
            || p.wait_for_consumers(1, &mut Spin::new(0)),
            "counted a consumer whose earlier work is not visible",
        );
    });
}

/// A producer dies right after a publish's `head` store, before the publish's SeqCst fence (a
/// SIGKILL can land there), and a new producer takes over while a gating consumer registers.
/// The dead producer's fence never ran, so the registration handshake rests on the new
/// producer's fence before its first gating scan: either it sees the consumer ACTIVE (and is
/// held back), or the consumer's `head` load after its own fence sees the dead producer's last
/// head. Without that first-claim fence (mutant `first-claim-fence`) it is the store-buffering
/// pattern with one fence: the consumer starts at the stale head 1 while the new producer's
/// scan misses it and overwrites message 1 in the one slot, and a gating consumer loses it.
///
/// The death is emulated in the main thread (sequenced before the take-over, like a join): a
/// claim of message 1, its payload, and exactly the stores `WriteSlot::publish` makes up to and
/// including `head`, then the handles are leaked.
#[test]
fn take_over_after_death_before_the_publish_fence_loses_nothing() {
    model(|| {
        let s = owned(&config16(1, 1));
        let mut dead = Producer::new(s.clone(), id(1)).unwrap();
        assert_eq!(dead.try_publish(&[0xA0; 16]), Ok(0));
        let s2 = s.clone();
        let t = thread::spawn(move || Consumer::new(s2, DeliveryClass::Gating, id(2)).unwrap());
        {
            let mut slot = dead.try_claim().unwrap();
            assert_eq!(slot.seq(), 1);
            slot.write(&[0xA1; 16]).unwrap();
            std::mem::forget(slot);
            // `WriteSlot::publish`'s stores, in its order and orderings, up to `head`: the
            // 16-byte message is copied into the message line (it travels inline), then the
            // length, metadata, WRITER clear, final stamp and `head`.
            let hdr = s.slot_header(0);
            for w in hdr.inline.iter().take(2) {
                w.store(u64::from_ne_bytes([0xA1; 8]), Ordering::Relaxed);
            }
            hdr.len.store(16, Ordering::Relaxed);
            hdr.meta[0].store(0, Ordering::Relaxed);
            hdr.meta[1].store(0, Ordering::Relaxed);
            hdr.state
                .fetch_and(!ring_core::layout::WRITER, Ordering::Release);
            hdr.stamp.store(4, Ordering::Release); // 2 * seq + 2, seq 1
            s.producer_line().head.store(2, Ordering::Release);
            std::mem::forget(dead);
        }
        // SAFETY: the dead producer's handles were leaked: it makes no more calls.
        let mut new = unsafe { Producer::take_over(s.clone(), id(3), id(1)) }.unwrap();
        match new.try_publish(&[0xA2; 16]) {
            Ok(seq) => assert_eq!(seq, 2),
            // Held back by the consumer (it starts at 1, or its provisional cursor is 1).
            Err(ClaimError::Full { .. }) => {}
            Err(e) => panic!("unexpected {e}"),
        }
        let mut c = t.join().unwrap();
        let start = c.cursor();
        let mut buf = [0u8; 16];
        loop {
            match c.try_copy(&mut buf) {
                Ok(got) => assert_eq!(buf, [0xA0 + got.seq as u8; 16], "message torn"),
                Err(ReadError::Empty) => break,
                Err(e) => panic!("unexpected {e}"),
            }
        }
        assert_eq!(
            c.missed(),
            0,
            "a gating consumer that started at {start} lost a message to the new producer"
        );
    });
}
