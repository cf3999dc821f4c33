//! Behaviour of the public API on a heap segment, one operation at a time.
#![cfg(not(any(ring_loom, ring_shuttle)))]

use ring_core::inspect::{consumer_info, producer_info, total_pins, EntryState};
use ring_core::{
    ClaimError, Config, Consumer, DeliveryClass, Error, OwnedSegment, Producer, ReadError, Spin,
};

mod common;
use common::{consumer, copy_next, id, open, open_shared, producer, publish_bytes, seg};

#[test]
fn publish_then_pin_and_copy_see_the_message() {
    let (s, mut p, [mut pin, mut copy]) = open_shared(
        seg(4, 64),
        [DeliveryClass::Gating, DeliveryClass::SkipOnLag],
    );
    let mut slot = p.try_claim().unwrap();
    slot.write(b"hello world").unwrap();
    slot.set_meta([11, 22]);
    assert_eq!(slot.publish(), Ok(0));
    {
        let m = pin.try_pin().unwrap();
        assert_eq!(m.bytes(), b"hello world");
        assert_eq!(m.meta(), [11, 22]);
        assert_eq!((m.seq(), m.missed()), (0, 0));
        // A gating reader's cursor is its pin: no reader bit, the gating check holds the slot.
        assert_eq!(total_pins(&s), 0);
    }
    assert_eq!(total_pins(&s), 0);
    let mut buf = [0u8; 64];
    let c = copy.try_copy(&mut buf).unwrap();
    assert_eq!(&buf[..c.len], b"hello world");
    assert_eq!(c.meta, [11, 22]);
    assert_eq!(pin.try_pin().unwrap_err(), ReadError::Empty);
    assert_eq!(copy.try_copy(&mut buf).unwrap_err(), ReadError::Empty);
}

#[test]
fn gating_consumer_holds_the_producer_back_and_is_named() {
    let (_, mut p, [mut g]) = open_shared(seg(2, 16), [DeliveryClass::Gating]);
    p.try_publish(b"a").unwrap();
    p.try_publish(b"b").unwrap();
    assert_eq!(
        p.try_publish(b"c"),
        Err(ClaimError::Full {
            consumer: g.index(),
            cursor: 0
        })
    );
    let mut buf = [0u8; 16];
    assert_eq!(g.try_copy(&mut buf).unwrap().seq, 0);
    assert_eq!(p.try_publish(b"c"), Ok(2));
    // Every message, in order, none missed.
    assert_eq!(g.try_copy(&mut buf).unwrap().seq, 1);
    assert_eq!(g.try_copy(&mut buf).unwrap().seq, 2);
    assert_eq!(g.missed(), 0);
}

#[test]
fn a_pinned_slot_cannot_be_claimed() {
    let (_, mut p, [mut c]) = open_shared(seg(1, 16), [DeliveryClass::LatestOnly]);
    p.try_publish(b"x").unwrap();
    let bit = 1u32 << c.index();
    let m = c.try_pin().unwrap();
    assert_eq!(
        p.try_publish(b"y"),
        Err(ClaimError::Pinned {
            slot: 0,
            readers: bit
        })
    );
    assert_eq!(m.bytes(), b"x");
    drop(m);
    assert_eq!(p.try_publish(b"y"), Ok(1));
}

#[test]
fn skip_on_lag_counts_exactly_what_it_missed() {
    let (_, mut p, [mut c]) = open_shared(seg(4, 16), [DeliveryClass::SkipOnLag]);
    publish_bytes(&mut p, 0..10);
    let mut buf = [0u8; 16];
    let first = c.try_copy(&mut buf).unwrap();
    assert_eq!((first.seq, first.missed, buf[0]), (6, 6, 6));
    for want in 7..10 {
        let got = c.try_copy(&mut buf).unwrap();
        assert_eq!((got.seq, got.missed, u64::from(buf[0])), (want, 0, want));
    }
    assert_eq!(c.missed() + c.received(), 10);
}

#[test]
fn latest_only_returns_the_newest_and_counts_skips() {
    let (_, mut p, [mut c]) = open_shared(seg(4, 16), [DeliveryClass::LatestOnly]);
    publish_bytes(&mut p, 0..3);
    let m = c.try_pin().unwrap();
    assert_eq!((m.seq(), m.missed(), m.bytes()[0]), (2, 2, 2));
    drop(m);
    assert_eq!(c.try_pin().unwrap_err(), ReadError::Empty);
    p.try_publish(&[3]).unwrap();
    assert_eq!(c.try_pin().unwrap().seq(), 3);
}

#[test]
fn close_lets_consumers_drain_then_reports_closed() {
    let (_, mut p, [mut c]) = open_shared(seg(4, 16), [DeliveryClass::Gating]);
    p.try_publish(b"last").unwrap();
    p.close();
    assert_eq!(p.try_publish(b"more"), Err(ClaimError::Closed));
    let mut buf = [0u8; 16];
    assert_eq!(c.try_copy(&mut buf).unwrap().seq, 0);
    assert_eq!(c.try_copy(&mut buf).unwrap_err(), ReadError::Closed);
    assert_eq!(c.wait_ready(&mut Spin::new(10)), Ok(()));
}

#[test]
fn one_producer_only_and_takeover_after_death() {
    let s = seg(2, 16);
    let p = producer(&s);
    assert_eq!(
        Producer::new(&s, id(9)).unwrap_err(),
        Error::ProducerExists { owner: 1 }
    );
    // Simulate a crash mid-write: claim, then leak the producer without dropping it.
    let mut p = p;
    let slot = p.try_claim().unwrap();
    core::mem::forget(slot);
    core::mem::forget(p);
    assert_eq!(producer_info(&s).writing, 1);
    assert_eq!(
        // SAFETY: the producer was leaked, and its `WriteSlot` before it: nothing will write
        // through them again.
        unsafe { Producer::take_over(&s, id(7), id(8)) }.unwrap_err(),
        Error::OwnerMismatch { found: 1 }
    );
    // SAFETY: as above.
    let mut p2 = unsafe { Producer::take_over(&s, id(7), id(1)) }.unwrap();
    assert_eq!(producer_info(&s).writing, 0);
    assert_eq!(
        producer_info(&s).epoch,
        2,
        "one start by new, one by take_over"
    );
    assert_eq!(p2.try_publish(b"again"), Ok(0));
}

#[test]
fn reclaim_clears_exactly_the_dead_consumers_pins_and_cursor() {
    let s = seg(2, 16);
    // `dead` is skip-on-lag: its reads set a reader bit (a gating reader's pin is its cursor).
    let (mut p, [mut dead, mut live]) =
        open(&s, [DeliveryClass::SkipOnLag, DeliveryClass::LatestOnly]);
    p.try_publish(b"a").unwrap();
    p.try_publish(b"b").unwrap();
    let live_pin = live.try_pin().unwrap();
    assert_eq!(live_pin.seq(), 1);
    // The dead consumer pins slot 0 and "dies" holding it.
    let pin = dead.try_pin().unwrap();
    core::mem::forget(pin);
    let dead_index = dead.index();
    core::mem::forget(dead);
    assert!(matches!(
        p.try_publish(b"c"),
        Err(ClaimError::Pinned { .. })
    ));
    assert_eq!(
        // SAFETY: the dead consumer and its pin were leaked: they make no calls.
        unsafe { p.reclaim(dead_index, id(99)) }.unwrap_err(),
        Error::OwnerMismatch { found: 2 }
    );
    // SAFETY: as above.
    let r = unsafe { p.reclaim(dead_index, id(2)) }.unwrap();
    assert_eq!((r.pins_cleared, r.was_registered, r.cursor), (1, true, 0));
    // Idempotent.
    // SAFETY: as above.
    let again = unsafe { p.reclaim(dead_index, id(2)) }.unwrap();
    assert!(!again.was_registered);
    assert_eq!(
        consumer_info(&s, dead_index).unwrap().state,
        EntryState::Free
    );
    // The live consumer's pin on slot 1 is untouched.
    assert_eq!(total_pins(&s), 1);
    assert_eq!(p.try_publish(b"c"), Ok(2));
    drop(live_pin);
}

#[test]
fn a_reclaimed_consumer_learns_it_was_evicted() {
    let (_, mut p, [mut c]) = open_shared(seg(2, 16), [DeliveryClass::Gating]);
    // SAFETY: `c` is alive but between calls and holds no pin: the lying-oracle case the
    // contract allows.
    unsafe { p.reclaim(c.index(), id(2)) }.unwrap();
    assert_eq!(c.try_pin().unwrap_err(), ReadError::Evicted);
}

#[test]
fn the_consumer_table_fills_and_frees() {
    let s = seg(2, 16);
    let cs: Vec<_> = (0..4)
        .map(|i| Consumer::new(&s, DeliveryClass::SkipOnLag, id(10 + i)).unwrap())
        .collect();
    assert_eq!(
        Consumer::new(&s, DeliveryClass::Gating, id(20)).unwrap_err(),
        Error::ConsumerTableFull { capacity: 4 }
    );
    drop(cs);
    assert!(Consumer::new(&s, DeliveryClass::Gating, id(20)).is_ok());
}

#[test]
fn oversized_messages_and_small_buffers_are_refused() {
    let (_, mut p, [mut c]) = open_shared(seg(2, 16), [DeliveryClass::Gating]);
    assert_eq!(
        p.try_publish(&[0; 17]),
        Err(ClaimError::TooLarge {
            len: 17,
            capacity: 16
        })
    );
    let mut slot = p.try_claim().unwrap();
    assert!(slot.write_at(10, &[1; 7]).is_err());
    slot.write(&[5; 16]).unwrap();
    slot.publish().unwrap();
    let mut small = [0u8; 8];
    assert_eq!(
        c.try_copy(&mut small),
        Err(ReadError::BufferTooSmall { needed: 16 })
    );
    let mut big = [0u8; 16];
    assert_eq!(c.try_copy(&mut big).unwrap().len, 16);
    assert_eq!(big, [5; 16]);
}

#[test]
fn bounded_waits_time_out() {
    let (_, mut p, [mut c]) = open_shared(seg(2, 16), [DeliveryClass::Gating]);
    assert_eq!(c.wait_ready(&mut Spin::new(100)), Err(ReadError::Timeout));
    p.try_publish(b"a").unwrap();
    p.try_publish(b"b").unwrap();
    assert!(matches!(
        p.claim(&mut Spin::new(100)),
        Err(ClaimError::Full { .. })
    ));
    assert!(!p.wait_drained(&mut Spin::new(100)));
    let mut buf = [0u8; 16];
    c.try_copy(&mut buf).unwrap();
    c.try_copy(&mut buf).unwrap();
    assert!(p.wait_drained(&mut Spin::new(100)));
}

#[test]
fn aborted_claims_reuse_the_sequence() {
    let (_, mut p, [mut c]) = open_shared(seg(2, 16), [DeliveryClass::Gating]);
    let mut slot = p.try_claim().unwrap();
    slot.write(b"never").unwrap();
    slot.abort();
    assert_eq!(p.try_publish(b"real"), Ok(0));
    let m = c.try_pin().unwrap();
    assert_eq!(m.bytes(), b"real");
}

#[test]
fn owned_segment_runs_the_same_protocol() {
    let (_, mut p, [mut c]) = open_shared(
        OwnedSegment::new(&Config::new(2, 16).with_consumers(2), id(1)).unwrap(),
        [DeliveryClass::Gating],
    );
    p.try_publish(b"typed").unwrap();
    assert_eq!(copy_next(&mut c).1, b"typed");
}

#[test]
fn a_gating_consumer_that_joins_late_is_still_gated() {
    // The producer caches a bound below which it skips the gating scan; a gating consumer that
    // joins after a scan that found none must still hold the producer back.
    let s = seg(2, 16);
    let mut p = producer(&s);
    publish_bytes(&mut p, 0..5);
    let mut g = consumer(&s, DeliveryClass::Gating, 2);
    p.try_publish(b"a").unwrap();
    p.try_publish(b"b").unwrap();
    assert!(matches!(
        p.try_publish(b"c"),
        Err(ClaimError::Full { cursor: 5, .. })
    ));
    let mut buf = [0u8; 16];
    assert_eq!(g.try_copy(&mut buf).unwrap().seq, 5);
}

#[test]
fn dropping_the_producer_aborts_the_stream_and_close_finishes_it() {
    let s = seg(2, 16);
    let mut c = consumer(&s, DeliveryClass::Gating, 2);
    let mut buf = [0u8; 16];
    {
        // Dropped without closing (a failure, a panic, an early return): aborted, code 0.
        let mut p = producer(&s);
        p.try_publish(b"bye").unwrap();
    }
    assert_eq!(c.try_copy(&mut buf).unwrap().seq, 0);
    assert_eq!(
        c.try_copy(&mut buf).unwrap_err(),
        ReadError::Aborted { code: 0 }
    );
    // A new producer reopens the ring and forgets how the last stream ended.
    let mut p = Producer::new(&s, id(3)).unwrap();
    assert_eq!(p.try_publish(b"again"), Ok(1));
    p.abort(7);
    p.close(); // the first end wins
    assert_eq!(c.try_copy(&mut buf).unwrap().seq, 1);
    assert_eq!(
        c.try_copy(&mut buf).unwrap_err(),
        ReadError::Aborted { code: 7 }
    );
    drop(p);
    let mut p = Producer::new(&s, id(4)).unwrap();
    p.try_publish(b"last").unwrap();
    p.close();
    drop(p); // after a close, dropping does not turn the stream into an abort
    assert_eq!(c.try_copy(&mut buf).unwrap().seq, 2);
    assert_eq!(c.try_copy(&mut buf).unwrap_err(), ReadError::Closed);
}

#[test]
fn a_consumer_that_died_while_joining_is_reclaimed() {
    use ring_core::Memory;
    let (s, mut p, []) = open_shared(seg(2, 16), []);
    // A consumer that died right after claiming entry 0's owner word: owner set, state FREE.
    s.consumer_entry(0)
        .owner
        .store(42, core::sync::atomic::Ordering::Relaxed);
    let c = consumer(&s, DeliveryClass::Gating, 2);
    assert_eq!(c.index(), 1, "a claimed owner word keeps the entry taken");
    // SAFETY: owner 42 is no consumer handle at all: nothing can call through it.
    let r = unsafe { p.reclaim(0, id(42)) }.unwrap();
    assert!(r.was_registered);
    assert_eq!(consumer_info(&s, 0).unwrap().owner, 0);
    assert_eq!(
        Consumer::new(&s, DeliveryClass::Gating, id(3))
            .unwrap()
            .index(),
        0
    );
}

#[test]
fn stray_reader_bits_beyond_the_table_are_cleared_by_the_producer() {
    use ring_core::Memory;
    let (s, mut p, []) = open_shared(seg(1, 16), []);
    // The table has 4 entries; bit 20 and bit 40 belong to no one.
    s.slot_header(0)
        .state
        .store((1 << 20) | (1 << 40), core::sync::atomic::Ordering::Relaxed);
    assert_eq!(
        p.try_publish(b"x"),
        Err(ClaimError::Pinned {
            slot: 0,
            readers: 0
        })
    );
    assert_eq!(p.try_publish(b"x"), Ok(0));
}

#[test]
fn every_class_reports_an_abort_after_draining() {
    let s = seg(4, 16);
    let classes = [
        DeliveryClass::Gating,
        DeliveryClass::LatestOnly,
        DeliveryClass::SkipOnLag,
    ];
    let mut cs: Vec<_> = classes
        .iter()
        .enumerate()
        .map(|(k, &class)| Consumer::new(&s, class, id(10 + k as u64)).unwrap())
        .collect();
    let mut p = producer(&s);
    publish_bytes(&mut p, 0..3);
    p.abort(42);
    let mut buf = [0u8; 16];
    for c in &mut cs {
        // Whatever the class reads, it reads it first; the abort comes after.
        let mut last = None;
        loop {
            match c.try_copy(&mut buf) {
                Ok(m) => last = Some(m.seq),
                Err(e) => {
                    assert_eq!(e, ReadError::Aborted { code: 42 }, "{:?}", c.class());
                    break;
                }
            }
        }
        assert_eq!(last, Some(2), "{:?} did not drain first", c.class());
    }
}

/// A latest-only consumer that joins after messages were published starts at the newest one
/// present (the frame grabber's flow: request, descriptor, open, read the frame that is
/// there); gating and skip-on-lag consumers start at the head. On an empty ring it waits, and
/// after a close it gets the last message before `Closed`.
#[test]
fn a_late_latest_only_consumer_gets_the_newest_message_present() {
    let (s, mut p, [mut early]) = open_shared(seg(4, 16), [DeliveryClass::LatestOnly]);
    assert_eq!(
        early.try_pin().unwrap_err(),
        ReadError::Empty,
        "nothing yet"
    );
    publish_bytes(&mut p, 0..6);
    let mut late = consumer(&s, DeliveryClass::LatestOnly, 3);
    let mut gating = consumer(&s, DeliveryClass::Gating, 4);
    let mut skip = consumer(&s, DeliveryClass::SkipOnLag, 5);
    let m = late.try_pin().unwrap();
    assert_eq!((m.seq(), m.missed(), m.bytes()), (5, 0, &[5u8][..]));
    drop(m);
    assert_eq!(late.try_pin().unwrap_err(), ReadError::Empty, "read once");
    let mut buf = [0u8; 16];
    assert_eq!(gating.try_copy(&mut buf).unwrap_err(), ReadError::Empty);
    assert_eq!(skip.try_copy(&mut buf).unwrap_err(), ReadError::Empty);
    drop((gating, skip));
    p.try_publish(&[6]).unwrap();
    p.close();
    let mut closed_late = consumer(&s, DeliveryClass::LatestOnly, 6);
    assert_eq!(
        closed_late.try_copy(&mut buf).unwrap().seq,
        6,
        "the last frame"
    );
    assert_eq!(
        closed_late.try_copy(&mut buf).unwrap_err(),
        ReadError::Closed
    );
    assert_eq!(late.try_copy(&mut buf).unwrap().seq, 6);
    assert_eq!(early.try_copy(&mut buf).unwrap().seq, 6);
}

/// History for a late skip-on-lag joiner: it starts up to `n` back, as far as the ring still
/// holds messages; overwritten ones count as missed; only before its first read, and never for
/// a gating or latest-only consumer.
#[test]
fn a_late_skip_on_lag_consumer_starts_with_history() {
    let s = seg(4, 16);
    let mut p = producer(&s);
    publish_bytes(&mut p, 0..6);
    let mut buf = [0u8; 16];
    // Three back: messages 3, 4, 5.
    let mut c = consumer(&s, DeliveryClass::SkipOnLag, 2);
    assert_eq!(c.rewind(3), Ok(3));
    for want in 3..6u64 {
        let got = c.try_copy(&mut buf).unwrap();
        assert_eq!((got.seq, got.missed, u64::from(buf[0])), (want, 0, want));
    }
    assert_eq!(c.try_copy(&mut buf).unwrap_err(), ReadError::Empty);
    assert!(
        matches!(c.rewind(1), Err(ReadError::NotSupported(_))),
        "after a read"
    );
    drop(c);
    // Ten back: only the ring's 4 are there (2..6).
    let mut far = consumer(&s, DeliveryClass::SkipOnLag, 3);
    assert_eq!(far.rewind(10), Ok(4));
    assert_eq!(far.cursor(), 2);
    // Two more messages overwrite 2 and 3 before it reads: it reports exactly those missed.
    p.try_publish(&[6]).unwrap();
    p.try_publish(&[7]).unwrap();
    let got = far.try_copy(&mut buf).unwrap();
    assert_eq!((got.seq, got.missed), (4, 2));
    assert_eq!(far.missed() + far.received(), 4 - 2 + 1);
    // A latest-only reader starts at the newest message already; a gating one may start back
    // (tests/holds.rs covers how it reads its history).
    let mut c = consumer(&s, DeliveryClass::LatestOnly, 4);
    assert!(matches!(c.rewind(1), Err(ReadError::NotSupported(_))));
    drop(c);
    let mut c = consumer(&s, DeliveryClass::Gating, 4);
    assert_eq!(c.rewind(1), Ok(1));
}
