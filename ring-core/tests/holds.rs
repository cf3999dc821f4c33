//! Holds: several messages pinned by one consumer, released in any order (`Consumer::try_hold`).
//! What each test pins down: the producer never reuses a held slot (gating: by the cursor,
//! which stays at the oldest hold; the other classes: by the reader bit), releases in any order
//! give exactly the right slots back, the limit is an error and not a hang, and neither a
//! scribbled `head` nor a death leaves a held slot writable or wedged. Run under Miri by
//! `ci/miri.sh`.
#![cfg(not(any(ring_loom, ring_shuttle)))]

use core::sync::atomic::Ordering;
use ring_core::layout::WRITER;
use ring_core::{
    ClaimError, Config, DeliveryClass, HeapSegment, Memory, ReadError, DEFAULT_MAX_HOLDS, MAX_HOLDS,
};

mod common;
use common::{consumer, id, msg, open_shared, producer, publish_msgs, ring};

fn seg(slots: u32) -> HeapSegment {
    // 200-byte slots: messages longer than the inline capacity live in the payload area.
    ring(&Config::new(slots, 200))
}

/// Message `i`: 150 bytes of `i` (in the payload area).
#[test]
fn a_gating_consumer_holds_several_and_the_producer_waits_for_the_oldest() {
    let (_, mut p, [mut c]) = open_shared(seg(4), [DeliveryClass::Gating]);
    publish_msgs(&mut p, 0..4);
    let h0 = c.try_hold().unwrap();
    let h1 = c.try_hold().unwrap();
    let h2 = c.try_hold().unwrap();
    assert_eq!((h0.seq(), h1.seq(), h2.seq(), c.holds()), (0, 1, 2, 3));
    // Message 4 needs slot 0, which holds message 0: held back, by us.
    assert!(matches!(
        p.try_publish(&msg(4)),
        Err(ClaimError::Full { cursor: 0, .. })
    ));
    c.release(h1).unwrap();
    assert!(
        matches!(p.try_publish(&msg(4)), Err(ClaimError::Full { .. })),
        "releasing a newer hold must not move the cursor past the oldest"
    );
    assert_eq!(c.held_bytes(&h0), Some(&msg(0)[..]));
    c.release(h0).unwrap();
    // The oldest held is now 2: slots 0 and 1 are free, slot 2 is not.
    p.try_publish(&msg(4)).unwrap();
    p.try_publish(&msg(5)).unwrap();
    assert!(matches!(
        p.try_publish(&msg(6)),
        Err(ClaimError::Full { .. })
    ));
    assert_eq!(
        c.held_bytes(&h2),
        Some(&msg(2)[..]),
        "a held message changed"
    );
    c.release(h2).unwrap();
    // Message 6 takes message 2's slot; message 7 needs message 3's, never held or read.
    p.try_publish(&msg(6)).unwrap();
    assert!(matches!(
        p.try_publish(&msg(7)),
        Err(ClaimError::Full { cursor: 3, .. })
    ));
    let m = c.try_pin().unwrap();
    assert_eq!(m.bytes(), &msg(3)[..]);
    drop(m);
    p.try_publish(&msg(7)).unwrap();
}

#[test]
fn a_non_gating_consumer_holds_slots_and_the_producer_uses_the_others() {
    for class in [DeliveryClass::SkipOnLag, DeliveryClass::LatestOnly] {
        let (s, mut p, [mut c]) = open_shared(seg(4), [class]);
        p.try_publish(&msg(0)).unwrap();
        let h0 = c.try_hold().unwrap();
        p.try_publish(&msg(1)).unwrap();
        let h1 = c.try_hold().unwrap();
        assert_eq!((h0.seq(), h1.seq()), (0, 1), "{class:?}");
        p.try_publish(&msg(2)).unwrap();
        p.try_publish(&msg(3)).unwrap();
        // Slot 0 (message 0) is held: the claim of message 4 is refused by our bit.
        assert!(
            matches!(p.try_publish(&msg(4)), Err(ClaimError::Pinned { .. })),
            "{class:?}"
        );
        c.release(h0).unwrap();
        p.try_publish(&msg(4)).unwrap();
        assert!(
            matches!(p.try_publish(&msg(5)), Err(ClaimError::Pinned { .. })),
            "{class:?}: slot 1 is still held"
        );
        assert_eq!(c.held_bytes(&h1), Some(&msg(1)[..]), "{class:?}");
        c.release(h1).unwrap();
        p.try_publish(&msg(5)).unwrap();
        assert_eq!(total_bits(&s), 0, "{class:?}: a release left a reader bit");
    }
}

/// Reader bits set in every slot header.
fn total_bits(s: &HeapSegment) -> u32 {
    (0..s.geometry().slots())
        .map(|i| (s.slot_header(i).state.load(Ordering::Relaxed) & !WRITER).count_ones())
        .sum()
}

#[test]
fn the_limit_is_an_error_and_release_checks_its_hold() {
    let (s, mut p, [mut c, mut other]) =
        open_shared(seg(8), [DeliveryClass::SkipOnLag, DeliveryClass::SkipOnLag]);
    publish_msgs(&mut p, 0..8);
    assert_eq!(c.max_holds(), DEFAULT_MAX_HOLDS);
    let mut held: Vec<_> = (0..DEFAULT_MAX_HOLDS)
        .map(|_| c.try_hold().unwrap())
        .collect();
    let next = c.cursor();
    assert_eq!(
        c.try_hold(),
        Err(ReadError::TooManyHolds {
            max: DEFAULT_MAX_HOLDS
        })
    );
    assert_eq!(c.cursor(), next, "a refused hold must read nothing");
    assert_eq!(
        c.set_max_holds(MAX_HOLDS + 1),
        Err(ReadError::TooManyHolds { max: MAX_HOLDS })
    );
    assert_eq!(
        c.set_max_holds(1),
        Err(ReadError::TooManyHolds {
            max: DEFAULT_MAX_HOLDS
        }),
        "the limit cannot drop below what is held"
    );
    c.set_max_holds(DEFAULT_MAX_HOLDS + 1).unwrap();
    held.push(c.try_hold().unwrap());
    // Another consumer's hold is not ours: refused, and ours stays.
    let theirs = other.try_hold().unwrap();
    assert_eq!(c.held_bytes(&theirs), None);
    assert_eq!(c.release(theirs), Err(ReadError::NotHeld));
    assert_eq!(c.holds(), DEFAULT_MAX_HOLDS + 1);
    // A dropped hold stays held until release_all.
    assert!(held.pop().is_some());
    for h in held.drain(..) {
        c.release(h).unwrap();
    }
    assert_eq!(c.holds(), 1);
    assert_eq!(c.release_all(), 1);
    assert_eq!(c.holds(), 0);
    // `other` still holds message 0's slot (its own hold): one bit is left, its.
    assert_eq!(total_bits(&s), 1);
}

#[test]
fn a_scribbled_head_cannot_make_a_read_release_a_held_slot() {
    let (s, mut p, [mut c]) = open_shared(seg(4), [DeliveryClass::LatestOnly]);
    p.try_publish(&msg(0)).unwrap();
    let h = c.try_hold().unwrap();
    p.try_publish(&msg(1)).unwrap();
    // A peer scribbles `head` to 5: a latest-only read targets message 4, whose slot is 0,
    // the held one.
    s.producer_line().head.store(5, Ordering::Relaxed);
    assert!(matches!(c.try_hold(), Err(ReadError::Corrupt(_))));
    assert_eq!(c.held_bytes(&h), Some(&msg(0)[..]));
    s.producer_line().head.store(2, Ordering::Relaxed);
    publish_msgs(&mut p, 2..4);
    assert!(
        matches!(p.try_publish(&msg(4)), Err(ClaimError::Pinned { .. })),
        "the held slot lost its pin"
    );
    c.release(h).unwrap();
}

#[test]
fn a_consumer_that_dies_holding_messages_is_reclaimed_exactly() {
    let s = seg(4);
    let mut p = producer(&s);
    for class in [DeliveryClass::Gating, DeliveryClass::SkipOnLag] {
        let mut c = consumer(&s, class, 2);
        let index = c.index();
        let base = p.published();
        for i in 0..3 {
            p.try_publish(&msg(base as u8 + i)).unwrap();
        }
        let _held = [c.try_hold().unwrap(), c.try_hold().unwrap()];
        core::mem::forget(c); // Its process dies: no destructor.
                              // SAFETY: the consumer was forgotten (dead): inside no call, using no held bytes.
        let r = unsafe { p.reclaim(index, id(2)) }.unwrap();
        let expect = if class == DeliveryClass::Gating { 0 } else { 2 };
        assert_eq!(r.pins_cleared, expect, "{class:?}");
        publish_msgs(&mut p, 0..4);
        assert_eq!(total_bits(&s), 0);
    }
}

#[test]
fn holds_mix_with_pins_copies_and_batches_in_order() {
    let (_, mut p, [mut c]) = open_shared(seg(8), [DeliveryClass::Gating]);
    publish_msgs(&mut p, 0..6);
    let h0 = c.try_hold().unwrap();
    let mut buf = [0u8; 200];
    assert_eq!(c.try_copy(&mut buf).unwrap().seq, 1);
    assert_eq!(c.try_pin().unwrap().seq(), 2);
    let mut seen = Vec::new();
    c.try_read_batch(2, |m| seen.push(m.seq())).unwrap();
    assert_eq!(seen, [3, 4]);
    let h5 = c.try_hold().unwrap();
    assert_eq!(h5.seq(), 5);
    // Every read after the hold left the gating cursor at message 0.
    publish_msgs(&mut p, 6..8);
    assert!(matches!(
        p.try_publish(&msg(8)),
        Err(ClaimError::Full { cursor: 0, .. })
    ));
    c.release(h0).unwrap();
    // Now the oldest hold is 5.
    publish_msgs(&mut p, 8..13);
    assert!(matches!(
        p.try_publish(&msg(13)),
        Err(ClaimError::Full { cursor: 5, .. })
    ));
    assert_eq!(c.held_bytes(&h5), Some(&msg(5)[..]));
    c.release(h5).unwrap();
}

/// A ring created with history: a late gating consumer starts back, reads the history whole
/// (pinned by its reader bit: the producer may still rewrite the rest), counts what it lost,
/// and is lossless from where it joined; a latest-only one starts at the newest message.
#[test]
fn a_late_gating_consumer_reads_the_rings_history_then_gates() {
    let s = ring(&Config::new(4, 200).with_history(3));
    let mut p = producer(&s);
    publish_msgs(&mut p, 0..6);
    let mut late = consumer(&s, DeliveryClass::Gating, 2);
    let mut latest = consumer(&s, DeliveryClass::LatestOnly, 3);
    assert_eq!(
        latest.try_pin().unwrap().seq(),
        5,
        "latest-only starts at the newest"
    );
    assert_eq!(late.cursor(), 3, "three back");
    // A history message is pinned by the bit: the producer cannot rewrite it meanwhile.
    let bit = 1u64 << late.index();
    let pinned = late.try_pin().unwrap();
    assert_eq!((pinned.seq(), pinned.bytes()), (3, &msg(3)[..]));
    assert_eq!(s.slot_header(3).state.load(Ordering::Relaxed), bit);
    drop(pinned);
    assert_eq!(
        s.slot_header(3).state.load(Ordering::Relaxed),
        0,
        "unpinned"
    );
    // It gates from its cursor (4) on: message 8 would overwrite message 4.
    publish_msgs(&mut p, 6..8);
    assert!(matches!(
        p.try_publish(&msg(8)),
        Err(ClaimError::Full { .. })
    ));
    let mut buf = [0u8; 200];
    assert_eq!(late.try_copy(&mut buf).unwrap().seq, 4);
    p.try_publish(&msg(8)).unwrap();
    // Past its join head (6) it gates without bits.
    let h = late.try_hold().unwrap();
    assert_eq!(h.seq(), 5);
    late.release(h).unwrap();
    let pinned = late.try_pin().unwrap();
    assert_eq!(pinned.seq(), 6);
    assert_eq!(
        s.slot_header(2).state.load(Ordering::Relaxed),
        0,
        "no bit from the join head on"
    );
    drop(pinned);
    assert_eq!(late.missed(), 0);
    // History longer than the ring is refused.
    assert!(HeapSegment::new(&Config::new(4, 200).with_history(5), id(1)).is_err());
}

/// History the producer overwrote before the late gating reader got there is missed, counted.
#[test]
fn overwritten_history_is_counted_as_missed() {
    let s = ring(&Config::new(4, 200));
    let mut p = producer(&s);
    // Six messages: the producer's last gate scan (at message 4, no reader) covers claims up
    // to message 7.
    publish_msgs(&mut p, 0..6);
    let mut late = consumer(&s, DeliveryClass::Gating, 2);
    assert_eq!(late.rewind(4).unwrap(), 4, "messages 2..5 are there");
    // Messages 6 and 7 go in without a scan: they overwrite history 2 and 3.
    publish_msgs(&mut p, 6..8);
    let mut buf = [0u8; 200];
    let got = late.try_copy(&mut buf).unwrap();
    assert_eq!(
        (got.seq, got.missed),
        (4, 2),
        "2 and 3 were overwritten: two missed"
    );
    assert_eq!(buf[..150], msg(4));
    // The next scan sees it: message 8 may overwrite 4 (read), message 9 may not.
    p.try_publish(&msg(8)).unwrap();
    assert!(matches!(
        p.try_publish(&msg(9)),
        Err(ClaimError::Full { .. })
    ));
    for want in 5..9 {
        assert_eq!(late.try_copy(&mut buf).unwrap().seq, want);
    }
    assert_eq!(late.missed(), 2);
}
