//! A liveness oracle that lies: `Producer::reclaim` of a consumer that is still alive (inside
//! no call and borrowing no bytes, as the contract asks). The reclaimed consumer must be fenced
//! — every later call refused with `Evicted`, its holds lending no bytes, its drop writing
//! nothing — and what it held must go to others exactly as a dead one's would. Run under Miri by
//! `ci/miri.sh`, which reports a data race if a fenced consumer still reads a rewritten slot.
#![cfg(not(any(ring_loom, ring_shuttle)))]

use ring_core::{ClaimError, Config, DeliveryClass, ReadError, PROGRESS_EVERY};

mod common;
use common::{consumer, grouped, id, members, msg, open_shared, publish_msgs, ring};

#[test]
fn a_live_holder_reclaimed_by_a_wrong_verdict_is_fenced_and_its_slots_reused() {
    for class in [
        DeliveryClass::Gating,
        DeliveryClass::SkipOnLag,
        DeliveryClass::LatestOnly,
    ] {
        let (s, mut p, [mut victim]) = open_shared(ring(&Config::new(4, 200)), [class]);
        publish_msgs(&mut p, 0..4);
        let held = victim.try_hold().unwrap();
        assert_eq!(victim.held_bytes(&held), Some(&msg(held.seq() as u8)[..]));
        // The oracle says "dead"; the consumer is alive, inside no call, borrowing no bytes.
        // SAFETY: no call of `victim` runs and no borrow of its held bytes is alive.
        let r = unsafe { p.reclaim(victim.index(), id(2)) }.unwrap();
        assert!(r.was_registered);
        // Fenced: its holds lend nothing, every call is refused.
        assert_eq!(
            victim.held_bytes(&held),
            None,
            "{class:?}: a reclaimed hold lent bytes"
        );
        assert!(victim.held_words(&held).is_none());
        let mut buf = [0u8; 200];
        assert_eq!(victim.try_copy(&mut buf).unwrap_err(), ReadError::Evicted);
        assert!(matches!(victim.try_hold(), Err(ReadError::Evicted)));
        // The producer reuses every slot, the held one included, a lap and more.
        publish_msgs(&mut p, 4..12);
        // The fenced consumer's release and drop write nothing: a reader that registers into
        // the same entry meanwhile keeps its pins.
        let mut next = consumer(&s, DeliveryClass::SkipOnLag, 2);
        assert_eq!(next.index(), r.index, "the entry is reused");
        p.try_publish(&msg(12)).unwrap();
        let keep = next.try_hold().unwrap();
        assert_eq!(victim.release(held), Err(ReadError::Evicted));
        drop(victim);
        assert_eq!(next.held_bytes(&keep), Some(&msg(keep.seq() as u8)[..]));
        assert!(
            matches!(
                p.try_publish(&msg(99)),
                Ok(_) | Err(ClaimError::Pinned { .. })
            ),
            "the new reader's pin still holds"
        );
        assert_eq!(next.held_bytes(&keep), Some(&msg(keep.seq() as u8)[..]));
    }
}

#[test]
fn a_live_group_member_reclaimed_by_a_wrong_verdict_loses_its_claims_to_the_others() {
    let s = ring(&Config::new(8, 200).with_consumers(4));
    let mut p = grouped(&s, "q", 0..4);
    let [mut victim, mut other] = members(&s, "q");
    let h = victim.try_hold().unwrap();
    assert_eq!(h.seq(), 0);
    // SAFETY: no call of `victim` runs and no borrow of its held bytes is alive.
    let r = unsafe { p.reclaim(victim.index(), id(2)) }.unwrap();
    assert!(r.was_registered);
    assert_eq!(victim.held_bytes(&h), None);
    let mut buf = [0u8; 200];
    assert_eq!(victim.try_copy(&mut buf).unwrap_err(), ReadError::Evicted);
    // Message 0 goes to the other member, flagged; nothing is taken twice unflagged.
    let c = other.try_copy(&mut buf).unwrap();
    assert_eq!(
        (c.seq, c.redelivered, &buf[..c.len]),
        (0, true, &msg(0)[..])
    );
    let mut seen = vec![0];
    while let Ok(c) = other.try_copy(&mut buf) {
        assert!(!c.redelivered);
        seen.push(c.seq);
    }
    assert_eq!(seen, [0, 1, 2, 3]);
    // The fenced member's release and drop neither finish nor requeue anything.
    assert_eq!(victim.release(h), Err(ReadError::Evicted));
    drop(victim);
    for i in 4..20u8 {
        p.try_publish(&msg(i)).unwrap();
        let c = other.try_copy(&mut buf).unwrap();
        assert_eq!((c.seq, c.redelivered), (u64::from(i), false));
    }
}

#[test]
fn a_pin_dropped_after_its_consumer_was_reclaimed_writes_nothing() {
    // A reader that does not gate publishes its progress every `PROGRESS_EVERY` reads: the pin
    // is also made the read that would publish, so that its drop has something to write.
    let classes = [
        (DeliveryClass::Gating, 0),
        (DeliveryClass::SkipOnLag, 0),
        (DeliveryClass::SkipOnLag, u64::from(PROGRESS_EVERY) - 1),
    ];
    for (class, warm) in classes {
        let (s, mut p, [mut victim]) = open_shared(ring(&Config::new(4, 200)), [class]);
        for i in 0..warm {
            publish_msgs(&mut p, i..i + 1);
            assert_eq!(victim.try_pin().unwrap().seq(), i);
        }
        publish_msgs(&mut p, warm..warm + 3);
        let index = victim.index();
        let pin = victim.try_pin().unwrap();
        assert_eq!(pin.seq(), warm);
        // The oracle says "dead" while the pin is alive (the contract asks for no live pin: it
        // protects the pinned bytes, which this test never borrows, and no slot is written
        // until the pin is dropped). What is checked is the pin's drop: the entry is no longer
        // its consumer's, so it must write nothing there.
        // SAFETY: no call of `victim` runs; no borrow of the pinned bytes is ever made, and
        // nothing writes a slot while the pin lives.
        let r = unsafe { p.reclaim(index, id(2)) }.unwrap();
        assert!(r.was_registered);
        // A reader of the same process registers into the same entry, starting at `head`.
        let next = consumer(&s, DeliveryClass::Gating, 2);
        assert_eq!(next.index(), index, "the entry is reused");
        let before = ring_core::inspect::consumer_info(&s, index).unwrap();
        assert_eq!(before.cursor, warm + 3);
        drop(pin);
        let after = ring_core::inspect::consumer_info(&s, index).unwrap();
        assert_eq!(
            (after.cursor, after.received),
            (before.cursor, before.received),
            "{class:?}: a reclaimed consumer's pin wrote into the entry's new holder"
        );
        assert_eq!(victim.try_pin().unwrap_err(), ReadError::Evicted);
        drop(next);
    }
}
