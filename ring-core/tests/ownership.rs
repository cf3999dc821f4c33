//! Ownership when the liveness verdict lies or the API is misused: generation-tagged consumer
//! entries, epoch-fenced producers, leaked pins, futex words that never repeat, waits that stay
//! bounded, waiter counts that reclaim repairs. Each test reproduces a defect of the previous
//! protocol (it fails there) and runs under Miri (`ci/miri.sh`).
#![cfg(not(any(ring_loom, ring_shuttle)))]
#![allow(
    clippy::disallowed_methods,
    reason = "real threads, never loom's: the spin hint is core's, not the façade's (crate-private)"
)]

extern crate alloc;

use alloc::sync::Arc;

use core::hint::spin_loop;
use core::sync::atomic::Ordering;
use ring_core::inspect::{consumer_info, total_pins};
use ring_core::layout::WRITER;

use ring_core::AtomicU32;
use ring_core::{
    ClaimError, Config, Consumer, DeliveryClass, HeapSegment, Memory, Producer, ReadError,
    SpinThenYield, WaitStrategy,
};

mod common;
use common::{consumer, copy_next, id, open, open_shared, producer, publish_bytes, seg};

/// Defect 2: after A is reclaimed (while in fact alive) and B registers into the same entry
/// with the same owner id (two consumers of one process), nothing A does touches B.
#[test]
fn a_reclaimed_consumer_writes_nothing_into_its_entrys_next_occupant() {
    let (s, mut p, [mut a]) = open_shared(seg(2, 16), [DeliveryClass::SkipOnLag]);
    p.try_publish(b"m0").unwrap();
    // SAFETY: `a` is between calls and holds no pin (the lying-oracle case the contract allows).
    let r = unsafe { p.reclaim(a.index(), id(2)) }.unwrap();
    assert!(r.was_registered);
    assert!(!a.is_registered());
    let mut b = consumer(&s, DeliveryClass::SkipOnLag, 2);
    assert_eq!(b.index(), a.index(), "B takes the freed entry");
    assert_ne!(b.generation(), a.generation());
    p.try_publish(b"m1").unwrap();
    let b_index = b.index();
    let pin = b.try_pin().unwrap();
    assert_eq!(pin.bytes(), b"m1");
    // Every call of A fails and writes nothing.
    let mut buf = [0u8; 16];
    assert_eq!(a.try_copy(&mut buf).unwrap_err(), ReadError::Evicted);
    assert_eq!(a.try_pin().unwrap_err(), ReadError::Evicted);
    let before = consumer_info(&s, b_index).unwrap();
    drop(a);
    let after = consumer_info(&s, b_index).unwrap();
    assert_eq!(before, after, "A's drop changed B's entry");
    // Skip-on-lag readers pin with a reader bit (a gating reader's pin is its cursor).
    assert_eq!(total_pins(&s), 1, "A's drop cleared B's pin");
    // B's pin still holds the producer off its slot (1).
    assert_eq!(p.try_publish(b"m2"), Ok(2));
    assert!(matches!(
        p.try_publish(b"m3"),
        Err(ClaimError::Full { .. } | ClaimError::Pinned { .. })
    ));
    drop(pin);
    assert_eq!(p.try_publish(b"m3"), Ok(3));
}

/// Defect 2, cursor form: A's copy reads after its reclaim must not advance B's cursor.
#[test]
fn a_reclaimed_consumers_reads_do_not_move_the_new_occupants_cursor() {
    let (s, mut p, [mut a]) = open_shared(seg(4, 16), [DeliveryClass::Gating]);
    // SAFETY: as above: `a` is between calls and holds no pin.
    unsafe { p.reclaim(a.index(), id(2)) }.unwrap();
    let b = consumer(&s, DeliveryClass::Gating, 2);
    publish_bytes(&mut p, 0..3);
    let mut buf = [0u8; 16];
    for _ in 0..3 {
        assert_eq!(a.try_copy(&mut buf).unwrap_err(), ReadError::Evicted);
    }
    assert_eq!(consumer_info(&s, b.index()).unwrap().cursor, 0);
    assert_eq!(p.try_publish(b"x"), Ok(3));
    assert!(matches!(p.try_publish(b"y"), Err(ClaimError::Full { .. })));
}

/// Defect 4: `mem::forget(pin)` then `drop(consumer)`: the slot must not stay wedged.
#[test]
fn a_leaked_pin_is_taken_back_when_its_consumer_drops() {
    let (s, mut p, [mut c]) = open_shared(seg(2, 16), [DeliveryClass::LatestOnly]);
    p.try_publish(b"a").unwrap();
    core::mem::forget(c.try_pin().unwrap());
    drop(c);
    assert_eq!(total_pins(&s), 0);
    for i in 0..6u8 {
        assert!(p.try_publish(&[i]).is_ok(), "slot wedged at {i}");
    }
}

/// Defect 4, consumer still alive: its next read takes the leaked pin back.
#[test]
fn a_leaked_pin_is_taken_back_by_the_next_read() {
    let (s, mut p, [mut c]) = open_shared(seg(2, 16), [DeliveryClass::LatestOnly]);
    p.try_publish(b"a").unwrap();
    core::mem::forget(c.try_pin().unwrap());
    assert_eq!(total_pins(&s), 1);
    p.try_publish(b"b").unwrap();
    let m = c.try_pin().unwrap();
    assert_eq!(m.bytes(), b"b");
    assert_eq!(
        total_pins(&s),
        1,
        "the leaked pin of slot 0 is gone, slot 1 is pinned"
    );
    drop(m);
    for i in 0..4u8 {
        assert!(p.try_publish(&[i]).is_ok(), "slot wedged at {i}");
    }
}

/// A leaked pin of a message the read reached by skipping others: the read that takes the pin
/// back re-reads that message but must not count the skipped ones a second time.
#[test]
fn a_leaked_pin_does_not_count_its_skipped_messages_twice() {
    let (_, mut p, [mut c]) = open_shared(seg(2, 16), [DeliveryClass::SkipOnLag]);
    // Four messages in two slots: 0 and 1 are overwritten before the consumer reads.
    (0..4u8).for_each(|i| assert_eq!(p.try_publish(&[i]), Ok(u64::from(i))));
    let m = c.try_pin().unwrap();
    assert_eq!((m.seq(), m.missed()), (2, 2));
    core::mem::forget(m);
    let m = c.try_pin().unwrap();
    assert_eq!(
        (m.seq(), m.missed()),
        (2, 0),
        "the skipped messages were counted already"
    );
    drop(m);
    assert_eq!((c.received(), c.missed(), c.cursor()), (1, 2, 3));
}

/// Bits of free entries (a peer's garbage, or a leak no drop cleaned) are cleared by the
/// producer; bits of registered entries are not.
#[test]
fn the_producer_sweeps_bits_of_free_entries_only() {
    let (s, mut p, [c]) = open_shared(seg(2, 16), [DeliveryClass::Gating]);
    let free_bit = 1u64 << 3;
    let live_bit = 1u64 << c.index();
    s.slot_header(0)
        .state
        .fetch_or(free_bit | live_bit, Ordering::Relaxed);
    match p.try_publish(b"x") {
        Err(ClaimError::Pinned { readers, .. }) => assert_eq!(u64::from(readers), live_bit),
        other => panic!("expected Pinned by the live bit only, got {other:?}"),
    }
    assert_eq!(s.slot_header(0).state.load(Ordering::Relaxed), live_bit);
    s.slot_header(0)
        .state
        .fetch_and(!live_bit, Ordering::Relaxed);
    assert_eq!(p.try_publish(b"x"), Ok(0));
}

/// Take-over of a producer that is in fact alive: the displaced one publishes nothing, closes
/// nothing and leaves the owner word alone; readers see each sequence once.
#[test]
fn a_displaced_producer_publishes_nothing() {
    let s = seg(4, 16);
    let mut old = producer(&s);
    let mut c = consumer(&s, DeliveryClass::Gating, 3);
    old.try_publish(b"old0").unwrap();
    // Same owner id (one process, two handles): only the epoch tells them apart.
    // SAFETY: `old` is between calls and holds no `WriteSlot`.
    let mut new = unsafe { Producer::take_over(&s, id(1), id(1)) }.unwrap();
    assert!(old.is_displaced());
    assert!(!new.is_displaced());
    assert!(matches!(
        old.try_publish(b"evil"),
        Err(ClaimError::Displaced { .. })
    ));
    assert!(matches!(old.try_claim(), Err(ClaimError::Displaced { .. })));
    assert_eq!(new.try_publish(b"new1"), Ok(1));
    old.close();
    drop(old);
    assert_eq!(new.try_publish(b"new2"), Ok(2));
    let mut buf = [0u8; 16];
    for (seq, want) in [(0u64, &b"old0"[..]), (1, b"new1"), (2, b"new2")] {
        let got = c.try_copy(&mut buf).unwrap();
        assert_eq!((got.seq, &buf[..got.len]), (seq, want));
    }
    assert_eq!(c.try_copy(&mut buf).unwrap_err(), ReadError::Empty);
}

/// A claim taken before the take-over cannot be published after it.
#[test]
fn a_claim_taken_before_a_take_over_is_not_published() {
    let s = seg(4, 16);
    let mut old = producer(&s);
    let mut c = consumer(&s, DeliveryClass::Gating, 3);
    let mut slot = old.try_claim().unwrap();
    slot.write(b"torn").unwrap();
    // SAFETY: the old producer makes no call while `take_over` runs and writes no payload
    // after it: `publish` below fails before touching the slot.
    let mut new = unsafe { Producer::take_over(&s, id(2), id(1)) }.unwrap();
    assert!(matches!(slot.publish(), Err(ClaimError::Displaced { .. })));
    assert_eq!(new.try_publish(b"good"), Ok(0));
    assert_eq!(copy_next(&mut c).1, b"good");
}

/// Publishes `msg` (message 0) into `s` with a producer of owner 1, lets `die` run as that
/// producer's last steps, forgets it, and takes the ring over as owner 2.
fn die_after<'a>(
    s: &'a HeapSegment,
    msg: &[u8],
    die: impl FnOnce(&mut Producer<&'a HeapSegment>),
) -> Producer<&'a HeapSegment> {
    let mut old = producer(s);
    old.try_publish(msg).unwrap();
    die(&mut old);
    core::mem::forget(old);
    // SAFETY: the old producer (and any claim `die` leaked) was forgotten: no call or write of
    // it follows.
    unsafe { Producer::take_over(s, id(2), id(1)) }.unwrap()
}

/// A producer killed between its claim CAS and its claim-marker store wrote nothing into the
/// slot (the marker precedes every payload word): the take-over keeps the old message's stamp,
/// since the marker still names that message, and a reader still gets it.
#[test]
fn a_claim_that_died_before_its_marker_leaves_the_old_message_readable() {
    let s = seg(1, 16);
    let mut c = consumer(&s, DeliveryClass::SkipOnLag, 3);
    // The dead producer's claim CAS (0 -> WRITER), and nothing after it.
    let _new = die_after(&s, b"kept", |_| {
        s.slot_header(0).state.fetch_or(WRITER, Ordering::Relaxed);
    });
    assert_eq!(s.slot_header(0).stamp.load(Ordering::Relaxed), 2);
    assert_eq!(s.slot_header(0).state.load(Ordering::Relaxed), 0);
    assert_eq!(copy_next(&mut c).1, b"kept");
}

/// A producer killed after its claim marker may have overwritten part of the old message: the
/// take-over turns the stamp into the dead claim's odd one, so neither a pin nor a copy takes
/// the slot for the old message (it was overrun), and the sequence is reused.
#[test]
fn a_claim_that_died_after_its_marker_leaves_no_message() {
    let s = seg(1, 16);
    let mut c = consumer(&s, DeliveryClass::SkipOnLag, 3);
    let mut pinner = consumer(&s, DeliveryClass::SkipOnLag, 4);
    let mut new = die_after(&s, b"gone", |old| {
        let mut slot = old.try_claim().unwrap();
        slot.write(b"torn").unwrap();
        core::mem::forget(slot);
    });
    assert_eq!(s.slot_header(0).stamp.load(Ordering::Relaxed), 3); // 2·1+1
    let mut buf = [0u8; 16];
    assert_eq!(c.try_copy(&mut buf).unwrap_err(), ReadError::Empty);
    assert_eq!(c.missed(), 1);
    assert!(matches!(pinner.try_pin(), Err(ReadError::Empty)));
    assert_eq!(pinner.missed(), 1);
    assert_eq!(new.try_publish(b"new1"), Ok(1));
    assert_eq!(copy_next(&mut c).1, b"new1");
}

/// Defect 5: `publish_futex` must not repeat a value across close and reopen (a parked
/// consumer compares against the value it saw).
#[test]
fn the_publish_futex_never_repeats_across_close_and_reopen() {
    let s = seg(4, 16);
    let mut seen = std::vec::Vec::new();
    let word = || s.producer_line().publish_futex.load(Ordering::Relaxed);
    seen.push(word());
    for round in 0..3 {
        let mut p = producer(&s);
        for _ in 0..=round {
            p.try_publish(b"x").unwrap();
            seen.push(word());
        }
        p.close();
        seen.push(word());
        drop(p);
        seen.push(word());
    }
    let mut dedup = seen.clone();
    dedup.dedup();
    let mut sorted = dedup.clone();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(
        sorted.len(),
        dedup.len(),
        "a futex value repeated: {seen:?}"
    );
}

/// A wait strategy that counts its calls and lets a test decide when it returns.
struct Gate {
    entered: Arc<AtomicU32>,
    release: Arc<AtomicU32>,
}

impl WaitStrategy for Gate {
    fn wait(&mut self, _word: &AtomicU32, _expected: u32) -> bool {
        self.entered.store(1, Ordering::SeqCst);
        while self.release.load(Ordering::SeqCst) == 0 {
            spin_loop();
        }
        false
    }
}

/// Defect 7: a consumer reclaimed while parked gives its waiter count back; when it wakes it
/// is told it was evicted and does not decrement again.
#[test]
fn reclaim_repairs_the_consumer_waiter_count() {
    let (s, mut p, []) = open_shared(seg(2, 16), []);
    let entered = Arc::new(AtomicU32::new(0));
    let release = Arc::new(AtomicU32::new(0));
    let mut gate = Gate {
        entered: Arc::clone(&entered),
        release: Arc::clone(&release),
    };
    let s2 = Arc::clone(&s);
    let mut c = Consumer::new(s2, DeliveryClass::Gating, id(2)).unwrap();
    let index = c.index();
    let t = std::thread::spawn(move || c.wait_ready(&mut gate));
    while entered.load(Ordering::SeqCst) == 0 {
        spin_loop();
    }
    let waiters = || s.producer_line().consumer_waiters.load(Ordering::Relaxed);
    assert_eq!(waiters(), 1);
    // SAFETY: the parked consumer holds no pin and writes only its own entry's words and the
    // waiter count after waking, all atomics; this is the "killed while parked" reclaim.
    unsafe { p.reclaim(index, id(2)) }.unwrap();
    assert_eq!(waiters(), 0, "reclaim left the dead waiter counted");
    release.store(1, Ordering::SeqCst);
    assert_eq!(t.join().unwrap(), Err(ReadError::Evicted));
    assert_eq!(waiters(), 0, "the evicted consumer decremented again");
}

/// Defect 7, producer side: a take-over resets the parked-producer flag.
#[test]
fn take_over_resets_the_producer_waiting_flag() {
    let s = seg(2, 16);
    let p = producer(&s);
    // What a producer killed inside `park` leaves behind.
    s.producer_line()
        .producer_waiting
        .store(1, Ordering::Relaxed);
    core::mem::forget(p);
    // SAFETY: the old producer was leaked: it makes no calls.
    let _new = unsafe { Producer::take_over(&s, id(2), id(1)) }.unwrap();
    assert_eq!(
        s.producer_line().producer_waiting.load(Ordering::Relaxed),
        0
    );
}

/// Defect 6: a word that keeps changing cannot stretch a bounded wait.
#[test]
fn spin_then_yield_is_bounded_even_when_the_word_keeps_changing() {
    let word = AtomicU32::new(7);
    let mut w = SpinThenYield::new(4, 100);
    let mut trues = 0u32;
    // The word never holds `expected`: every wait sees a change.
    while w.wait(&word, 0) {
        trues += 1;
        assert!(trues <= 100, "the wait budget never ran out");
    }
    assert!(trues <= 100);
}

/// Registration into an explicit entry, as ring-os does after taking that entry's lock.
#[test]
fn new_at_registers_into_the_given_entry_or_says_why_not() {
    let s = seg(2, 16);
    let c = Consumer::new_at(&s, 2, DeliveryClass::Gating, id(2)).unwrap();
    assert_eq!(c.index(), 2);
    let (_, e) = Consumer::new_at(&s, 2, DeliveryClass::Gating, id(3)).unwrap_err();
    assert_eq!(e, ring_core::Error::EntryBusy { index: 2 });
    let (_, e) = Consumer::new_at(&s, 4, DeliveryClass::Gating, id(3)).unwrap_err();
    assert_eq!(e, ring_core::Error::NoSuchConsumer { index: 4 });
}

/// Issue "front door", finding 1: a subscriber preempted between becoming ACTIVE and storing
/// its final start point is not counted as ready, so a producer that waits for it and then
/// publishes loses nothing.
#[test]
fn a_half_registered_subscriber_is_not_ready_and_loses_nothing() {
    let (s, mut p, []) = open_shared(seg(4, 16), []);
    let in_hook = Arc::new(AtomicU32::new(0));
    let go_on = Arc::new(AtomicU32::new(0));
    let (s2, h2, g2) = (Arc::clone(&s), Arc::clone(&in_hook), Arc::clone(&go_on));
    let t = std::thread::spawn(move || {
        // SAFETY: a heap segment: nothing judges this consumer dead.
        let joined = unsafe {
            Consumer::new_at_with_hook(s2, 0, DeliveryClass::Gating, id(2), || {
                h2.store(1, Ordering::SeqCst);
                while g2.load(Ordering::SeqCst) == 0 {
                    spin_loop();
                }
            })
        };
        let mut c = joined.map_err(|(_, e)| e).unwrap();
        let mut buf = [0u8; 16];
        let mut got = std::vec::Vec::new();
        loop {
            match c.try_copy(&mut buf) {
                Ok(m) => got.push(buf[..m.len].to_vec()),
                Err(ReadError::Empty) => spin_loop(),
                Err(ReadError::Closed) => return got,
                Err(e) => panic!("{e}"),
            }
        }
    });
    while in_hook.load(Ordering::SeqCst) == 0 {
        spin_loop();
    }
    // ACTIVE but not final: not ready. (The old handshake counted ACTIVE entries.)
    assert_eq!(p.ready_consumers(), 0);
    assert!(!p.wait_for_consumers(1, &mut SpinThenYield::new(8, 50)));
    p.try_publish(b"before").unwrap();
    go_on.store(1, Ordering::SeqCst);
    assert!(p.wait_for_consumers(1, &mut SpinThenYield::new(64, 1_000_000)));
    for i in 0..3u8 {
        let mut slot = p.claim(&mut SpinThenYield::new(64, 1_000_000)).unwrap();
        slot.write(&[i]).unwrap();
        slot.publish().unwrap();
    }
    p.close();
    drop(p);
    let got = t.join().unwrap();
    // Everything published after the wait is received; "before" may or may not be.
    let tail: std::vec::Vec<_> = got.iter().filter(|m| m.len() == 1).collect();
    assert_eq!(tail, [&[0u8][..], &[1], &[2]]);
}

/// Zero-copy writes: a pin-only ring lends the slot as `&mut [u8]`; copy reads there pin,
/// so they never race with the writer (Miri checks it with threads below). Elsewhere the loan
/// is refused.
#[test]
fn loans_are_sound_in_pin_only_rings_and_refused_elsewhere() {
    let plain = seg(2, 64);
    let mut p = producer(&plain);
    assert_eq!(
        p.try_claim().unwrap().loan(8).unwrap_err(),
        ring_core::LoanError::NotPinOnly
    );
    let s = Arc::new(
        HeapSegment::new(
            &Config::new(4, 256).with_consumers(4).with_pin_only(true),
            id(1),
        )
        .unwrap(),
    );
    let mut p = Producer::new(Arc::clone(&s), id(1)).unwrap();
    assert_eq!(
        p.try_claim().unwrap().loan(257).unwrap_err(),
        ring_core::LoanError::TooLarge {
            len: 257,
            capacity: 256
        }
    );
    let n: u8 = if cfg!(miri) { 20 } else { 200 };
    // A gating copy reader (k 0), a latest-only pinning reader (k 1) and a skip-on-lag copy
    // reader (k 2): the last one reads slots the producer is about to rewrite, which is where an
    // optimistic copy would race with the `&mut` loan.
    let classes = [
        DeliveryClass::Gating,
        DeliveryClass::LatestOnly,
        DeliveryClass::SkipOnLag,
    ];
    let readers: std::vec::Vec<_> = classes
        .into_iter()
        .enumerate()
        .map(|(k, class)| {
            let mut c = Consumer::new(Arc::clone(&s), class, id(10 + k as u64)).unwrap();
            std::thread::spawn(move || {
                let mut buf = [0u8; 256];
                let mut last = None;
                loop {
                    let r = if k != 1 {
                        c.try_copy(&mut buf).map(|m| (m.len, buf[0]))
                    } else {
                        c.try_pin().map(|m| {
                            let b = m.bytes();
                            assert!(b.iter().all(|&x| x == b[0]), "torn pinned frame");
                            (b.len(), b[0])
                        })
                    };
                    match r {
                        Ok((len, first)) => {
                            assert_eq!(len, loan_len(first));
                            if k != 1 {
                                assert!(buf[..len].iter().all(|&x| x == first), "torn copy");
                            }
                            if k == 0 {
                                assert_eq!(last.map_or(0, |l: u8| l + 1), first, "gating lost one");
                            }
                            last = Some(first);
                        }
                        Err(ReadError::Empty | ReadError::Lagging) => spin_loop(),
                        Err(ReadError::Closed) => return last,
                        Err(e) => panic!("{e}"),
                    }
                }
            })
        })
        .collect();
    for i in 0..n {
        let mut slot = p.claim(&mut SpinThenYield::new(64, u64::MAX)).unwrap();
        slot.loan(loan_len(i)).unwrap().fill(i);
        slot.publish().unwrap();
    }
    p.close();
    drop(p);
    let results: std::vec::Vec<_> = readers.into_iter().map(|t| t.join().unwrap()).collect();
    assert_eq!(
        results[0],
        Some(n - 1),
        "the gating copy reader saw every message"
    );
}

/// The length of loaned message `i`: even messages are longer than the slot header's inline
/// words (so readers read the loaned payload area itself), odd ones travel inline.
fn loan_len(i: u8) -> usize {
    let extra = if i % 2 == 0 {
        ring_core::INLINE_CAPACITY
    } else {
        0
    };
    usize::from(i % 100) + 1 + extra
}

/// Leaked pins taken back while the producer keeps claiming the slot, with no other
/// synchronisation: the take-back (by the next read, `last` false, or by the drop, `last`
/// true) must order the leaked pin's reads of the bytes before the producer's rewrite. Under
/// Miri a Relaxed take-back is a data race on the pinned bytes.
fn leaked_pins_race_the_producer(last: bool) {
    let rounds: u8 = if cfg!(miri) { 6 } else { 200 };
    let s = Arc::new(seg(1, 16));
    let msg = |seq: u64| [seq as u8; 16];
    let mut p = Producer::new(Arc::clone(&s), id(1)).unwrap();
    let reader_seg = Arc::clone(&s);
    // Registered before the first publish, so the reader has something to read.
    let mut c = Consumer::new(Arc::clone(&reader_seg), DeliveryClass::SkipOnLag, id(2)).unwrap();
    let reader = std::thread::spawn(move || {
        let mut seen = 0u32;
        for _ in 0..10_000_000u64 {
            // Reads the pinned bytes, then leaks the pin.
            let read = c.try_pin().map(|m| {
                let whole = m.bytes() == msg(m.seq());
                core::mem::forget(m);
                whole
            });
            match read {
                Ok(whole) => {
                    assert!(whole, "pinned message torn");
                    seen += 1;
                    if last {
                        // The drop takes the pin back; a new consumer reads on.
                        drop(c);
                        c = Consumer::new(Arc::clone(&reader_seg), DeliveryClass::SkipOnLag, id(2))
                            .unwrap();
                    } else {
                        // The next read takes the pin back, then consumes the message by copy
                        // (a pin would re-pin the same message and starve the producer).
                        let mut buf = [0u8; 16];
                        match c.try_copy(&mut buf) {
                            Ok(_) | Err(ReadError::Empty | ReadError::Lagging) => {}
                            Err(ReadError::Closed) => break,
                            Err(e) => panic!("reader: {e}"),
                        }
                    }
                }
                Err(ReadError::Closed) => break,
                Err(ReadError::Empty | ReadError::Lagging) => spin_loop(),
                Err(e) => panic!("reader: {e}"),
            }
        }
        seen
    });
    let mut seq = 0u64;
    for _ in 0..10_000_000u64 {
        if seq == u64::from(rounds) {
            break;
        }
        match p.try_publish(&msg(seq)) {
            Ok(_) => seq += 1,
            Err(ClaimError::Pinned { .. }) => spin_loop(),
            Err(e) => panic!("producer: {e}"),
        }
    }
    assert_eq!(
        seq,
        u64::from(rounds),
        "the producer was held back for good"
    );
    p.close();
    assert!(reader.join().unwrap() > 0, "the reader saw nothing");
}

#[test]
fn a_leaked_pin_taken_back_by_the_next_read_races_nothing() {
    leaked_pins_race_the_producer(false);
}

#[test]
fn a_leaked_pin_taken_back_by_the_drop_races_nothing() {
    leaked_pins_race_the_producer(true);
}

/// Endings of readers are told apart: a reader that leaves (drop) is not lost; one that dies
/// (forgotten, then reclaimed) is, with its class, cursor and what it had not read; reclaiming
/// a free entry again counts nothing.
#[test]
fn a_producer_counts_the_readers_it_reclaimed_and_not_the_ones_that_left() {
    let s = seg(4, 16);
    let (mut p, [mut dying, finished, latest]) = open(
        &s,
        [
            DeliveryClass::Gating,
            DeliveryClass::Gating,
            DeliveryClass::LatestOnly,
        ],
    );
    let (dying_at, latest_at) = (dying.index(), latest.index());
    publish_bytes(&mut p, 0..3);
    let mut buf = [0u8; 16];
    dying.try_copy(&mut buf).unwrap();
    drop(finished);
    // Two processes die: they run no destructor.
    core::mem::forget(dying);
    core::mem::forget(latest);
    assert_eq!(p.lost_readers(), ring_core::LostReaders::default());
    // SAFETY: both consumers were forgotten (dead): inside no call, holding no pin.
    unsafe {
        p.reclaim(dying_at, id(2)).unwrap();
        p.reclaim(latest_at, id(4)).unwrap();
        // Already free: idempotent, and not a second loss.
        p.reclaim(dying_at, id(2)).unwrap();
    }
    let lost = p.lost_readers();
    assert_eq!((lost.total, lost.gating), (2, 1), "{lost:?}");
    let first = lost
        .first_gating_unread
        .expect("the gating reader died with 2 unread");
    assert_eq!(
        (first.reclaimed.index, first.reclaimed.owner),
        (dying_at, 2)
    );
    assert_eq!(
        (first.reclaimed.cursor, first.published, first.unread()),
        (1, 3, 2)
    );
    let last = lost.last.expect("a last one");
    assert_eq!(last.class, Some(DeliveryClass::LatestOnly));
    assert_eq!(
        last.unread(),
        0,
        "a latest-only reader never promised every message"
    );
}
