//! Never-stall rings (`Config::with_never_stall`): slots decoupled from sequence numbers.
//! What each test pins down: pins and holds of latest-only and skip-on-lag readers never make
//! the producer wait while `slots >= pinned + 2` (and it waits exactly when that breaks), a held
//! message is never overwritten, the newest message is always readable, gating consumers and
//! groups still hold the producer back, overruns are counted exactly, and a take-over finds
//! what its predecessor published. Run under Miri by `ci/miri.sh`.
#![cfg(not(any(ring_loom, ring_shuttle)))]

use ring_core::layout::route_word;
use ring_core::{
    ClaimError, Config, DeliveryClass, HeapSegment, LayoutError, Memory, Producer, ReadError,
};

mod common;
use common::{consumer, id, members, open, open_shared, producer, publish_msgs, ring};

fn seg(slots: u32) -> HeapSegment {
    // 200-byte slots: messages of 150 bytes live in the payload area, 8-byte ones inline.
    ring(&Config::new(slots, 200).with_never_stall(true))
}

/// Message `i`: 150 bytes, each `i` (payload area).
fn big(i: u64) -> [u8; 150] {
    [i as u8; 150]
}

const LAPS: u64 = if cfg!(miri) { 5 } else { 40 };

#[test]
fn a_never_stall_ring_needs_three_slots() {
    let err = HeapSegment::new(&Config::new(2, 64).with_never_stall(true), id(1)).unwrap_err();
    assert!(
        format!("{err:?}").contains("NeverStallSlots"),
        "two slots cannot keep the newest, the next and a pin: {err:?}"
    );
    assert!(matches!(
        ring_core::Geometry::new(&Config::new(2, 64).with_never_stall(true)),
        Err(LayoutError::NeverStallSlots { value: 2 })
    ));
    ring(&Config::new(3, 64).with_never_stall(true));
}

#[test]
fn a_latest_only_pin_never_stalls_the_producer_and_keeps_its_bytes() {
    let (_, mut p, [mut grabber]) = open_shared(seg(4), [DeliveryClass::LatestOnly]);
    p.try_publish(&big(0)).unwrap();
    let held = grabber.try_hold().unwrap();
    assert_eq!(held.seq(), 0);
    for i in 1..LAPS * 4 {
        assert_eq!(
            p.try_publish(&big(i)).unwrap(),
            i,
            "message {i} waited for a pin"
        );
    }
    assert_eq!(grabber.held_bytes(&held), Some(&big(0)[..]));
    // The newest is always there for the grabber.
    let newest = grabber.try_hold().unwrap();
    assert_eq!(newest.seq(), LAPS * 4 - 1);
    assert_eq!(grabber.held_bytes(&newest), Some(&big(LAPS * 4 - 1)[..]));
    grabber.release(held).unwrap();
    grabber.release(newest).unwrap();
}

#[test]
fn the_producer_waits_exactly_when_slots_fall_below_pins_plus_two() {
    // 5 slots: 3 pinned messages leave the newest and one to write.
    let (_, mut p, [mut r]) = open_shared(seg(5), [DeliveryClass::LatestOnly]);
    let mut holds = Vec::new();
    for i in 0..3u64 {
        p.try_publish(&big(i)).unwrap();
        holds.push(r.try_hold().unwrap());
    }
    publish_msgs(&mut p, 3..3 + LAPS * 5);
    // A fourth pin, on the newest: the producer still has the fifth slot.
    holds.push(r.try_hold().unwrap());
    p.try_publish(&big(98)).unwrap();
    // Now 5 < 4 + 2 and the newest is not pinned: the producer is held back (by a pin, not by
    // gating), since it never writes over the newest message.
    assert!(
        matches!(p.try_publish(&big(99)), Err(ClaimError::Pinned { .. })),
        "every slot but the newest is pinned"
    );
    assert!(!p.is_claimable());
    // Give one back: the producer goes on at once.
    let h = holds.remove(1);
    r.release(h).unwrap();
    assert!(p.is_claimable());
    p.try_publish(&big(100)).unwrap();
    for (k, h) in holds.iter().enumerate() {
        let want = if k == 0 { 0 } else { h.seq() };
        assert_eq!(
            r.held_bytes(h),
            Some(&big(want)[..]),
            "hold {k} was overwritten"
        );
    }
}

#[test]
fn skip_on_lag_readers_count_every_message_they_lose_while_they_pin() {
    let (_, mut p, [mut r]) = open_shared(seg(4), [DeliveryClass::SkipOnLag]);
    let mut next_expected = 0;
    let mut missed = 0;
    let total = LAPS * 4;
    let mut published = 0;
    p.try_publish(&big(0)).unwrap();
    published += 1;
    while published < total {
        // The reader pins one message while the producer publishes three more.
        let m = r.try_pin().unwrap();
        assert!(m.seq() >= next_expected);
        missed += m.missed();
        assert_eq!(m.seq() - next_expected, m.missed(), "missed must be exact");
        assert_eq!(m.bytes(), &big(m.seq())[..]);
        next_expected = m.seq() + 1;
        drop(m);
        for _ in 0..3 {
            p.try_publish(&big(published)).unwrap();
            published += 1;
        }
    }
    let mut buf = [0u8; 200];
    loop {
        match r.try_copy(&mut buf) {
            Ok(c) => {
                missed += c.missed;
                assert_eq!(&buf[..c.len], &big(c.seq)[..]);
                next_expected = c.seq + 1;
            }
            Err(ReadError::Empty) => break,
            Err(e) => panic!("{e:?}"),
        }
    }
    assert_eq!(next_expected, published, "the reader reached the newest");
    assert!(missed < total, "the reader got some");
}

#[test]
fn gating_consumers_still_hold_the_producer_back_and_lose_nothing() {
    let (_, mut p, [mut gate, mut grab]) =
        open_shared(seg(4), [DeliveryClass::Gating, DeliveryClass::LatestOnly]);
    publish_msgs(&mut p, 0..4);
    assert!(matches!(
        p.try_publish(&big(4)),
        Err(ClaimError::Full { cursor: 0, .. })
    ));
    let mut buf = [0u8; 200];
    let mut seen = 0;
    let mut held = grab.try_hold().unwrap();
    for i in 4..LAPS * 4 {
        // The gating reader makes room for one; a latest-only reader keeps a hold throughout.
        let c = gate.try_copy(&mut buf).unwrap();
        assert_eq!((c.seq, c.missed), (seen, 0));
        assert_eq!(&buf[..c.len], &big(seen)[..]);
        seen += 1;
        match p.try_publish(&big(i)) {
            Ok(_) => {}
            // The hold took a slot the gating reader freed: one more read makes room.
            Err(ClaimError::Full { .. }) => {
                let c = gate.try_copy(&mut buf).unwrap();
                assert_eq!(c.seq, seen);
                seen += 1;
                p.try_publish(&big(i)).unwrap();
            }
            Err(e) => panic!("{e:?}"),
        }
        if i % 7 == 0 {
            let h = grab.try_hold().unwrap();
            assert_eq!(grab.held_bytes(&h), Some(&big(h.seq())[..]));
            grab.release(core::mem::replace(&mut held, h)).unwrap();
        }
    }
    while let Ok(c) = gate.try_copy(&mut buf) {
        assert_eq!((c.seq, &buf[..c.len]), (seen, &big(seen)[..]));
        seen += 1;
    }
    assert_eq!(
        seen,
        LAPS * 4,
        "the gating reader got every message, in order"
    );
    grab.release(held).unwrap();
}

#[test]
fn a_group_still_gets_every_message_exactly_once() {
    let s = HeapSegment::new(
        &Config::new(4, 64).with_never_stall(true).with_consumers(4),
        id(1),
    )
    .unwrap();
    let mut p = producer(&s);
    p.create_group("w").unwrap();
    let [mut a, mut b] = members(&s, "w");
    let mut grab = consumer(&s, DeliveryClass::LatestOnly, 4);
    let mut got = Vec::new();
    let mut buf = [0u8; 64];
    let mut held = None;
    let mut i = 0u64;
    // Bounded: a broken ring that never makes room must fail the test, not hang it.
    for _ in 0..LAPS * 40 {
        if i == LAPS * 4 {
            break;
        }
        match p.try_publish(&i.to_le_bytes()) {
            Ok(_) => i += 1,
            Err(ClaimError::Full { .. }) => {
                for m in [&mut a, &mut b] {
                    if let Ok(c) = m.try_copy(&mut buf) {
                        got.push(u64::from_le_bytes(buf[..8].try_into().unwrap()));
                        assert_eq!(c.seq, got[got.len() - 1]);
                    }
                }
            }
            Err(e) => panic!("{e:?}"),
        }
        if i % 5 == 0 && held.is_none() {
            held = grab.try_hold().ok();
        } else if let Some(h) = held.take() {
            grab.release(h).unwrap();
        }
    }
    assert_eq!(i, LAPS * 4, "the producer stopped making progress");
    for m in [&mut a, &mut b] {
        while let Ok(c) = m.try_copy(&mut buf) {
            got.push(c.seq);
        }
    }
    got.sort_unstable();
    assert_eq!(got, (0..LAPS * 4).collect::<Vec<_>>());
}

#[test]
fn messages_move_out_of_their_home_slot_only_while_it_is_pinned() {
    let (s, mut p, [mut r]) = open_shared(seg(4), [DeliveryClass::LatestOnly]);
    let route = |seq: u64| {
        s.slot_header((seq % 4) as usize)
            .route
            .load(core::sync::atomic::Ordering::Relaxed)
    };
    for i in 0..4 {
        p.try_publish(&big(i)).unwrap();
        assert_eq!(route(i), route_word(i, i as usize), "unpinned: home slot");
    }
    let h = r.try_hold().unwrap(); // message 3, slot 3
    publish_msgs(&mut p, 4..7);
    // Message 7's home (slot 3) is pinned: it goes to the slot of the oldest message (4, slot 0),
    // and the claim says so (per-slot bookkeeping keys on it, not on `seq % slots`).
    let mut w = p.try_claim().unwrap();
    assert_eq!((w.seq(), w.slot()), (7, 0));
    w.write(&big(7)).unwrap();
    w.publish().unwrap();
    assert_eq!(route(7), route_word(7, 0));
    r.release(h).unwrap();
    // Message 8's home (slot 0) holds message 7, not a lap old: the oldest is message 3, in
    // slot 3, no longer pinned.
    p.try_publish(&big(8)).unwrap();
    assert_eq!(route(8), route_word(8, 3));
    // Message 9's home (slot 1) holds message 5, a lap old: home again.
    p.try_publish(&big(9)).unwrap();
    assert_eq!(route(9), route_word(9, 1));
    let mut buf = [0u8; 200];
    let c = r.try_copy(&mut buf).unwrap();
    assert_eq!((c.seq, &buf[..c.len]), (9, &big(9)[..]));
}

#[test]
fn a_take_over_finds_messages_published_past_head_and_the_newest_slot() {
    let s = seg(4);
    {
        let (mut p, [mut r]) = open(&s, [DeliveryClass::LatestOnly]);
        publish_msgs(&mut p, 0..3);
        let _h = r.try_hold().unwrap(); // keeps message 2 in slot 2
        p.try_publish(&big(3)).unwrap();
        // Three batch messages: the last two are published but `head` is stored only at the
        // batch's end; forget the producer before its announce by leaking it mid-batch is not
        // possible from safe code, so roll `head` back as a death between stamp and head would.
        p.try_publish_batch(&[big(4), big(5)]).unwrap();
        core::mem::forget(p);
        s.producer_line()
            .head
            .store(4, core::sync::atomic::Ordering::Relaxed);
        drop(r);
    }
    // SAFETY: the first producer is gone (forgotten, never called again).
    let mut p = unsafe { Producer::take_over(&s, id(3), id(1)) }.unwrap();
    assert_eq!(
        p.published(),
        6,
        "messages 4 and 5 were published by their stamps and routes"
    );
    // Message 6 must not go into message 5's slot (the newest), and nothing is lost for a
    // skip-on-lag reader that joins now and reads on.
    let mut r = consumer(&s, DeliveryClass::LatestOnly, 4);
    p.try_publish(&big(6)).unwrap();
    let mut buf = [0u8; 200];
    let c = r.try_copy(&mut buf).unwrap();
    assert_eq!((c.seq, &buf[..c.len]), (6, &big(6)[..]));
}

#[test]
fn a_scribbled_route_is_a_clear_error_or_an_overrun_never_a_wrong_message() {
    let (s, mut p, [mut r]) = open_shared(seg(4), [DeliveryClass::SkipOnLag]);
    publish_msgs(&mut p, 0..2);
    // Route message 0 to slot 1 (which holds message 1), and message 1 beyond the table.
    let relaxed = core::sync::atomic::Ordering::Relaxed;
    s.slot_header(0).route.store(route_word(0, 1), relaxed);
    s.slot_header(1).route.store(route_word(1, 77), relaxed);
    let mut buf = [0u8; 200];
    for _ in 0..4 {
        match r.try_copy(&mut buf) {
            Ok(c) => assert_eq!(&buf[..c.len], &big(c.seq)[..], "a wrong message"),
            Err(ReadError::Corrupt(_) | ReadError::Lagging | ReadError::Empty) => {}
            Err(e) => panic!("{e:?}"),
        }
    }
    match r.try_pin() {
        Ok(m) => assert_eq!(m.bytes(), &big(m.seq())[..]),
        Err(ReadError::Corrupt(_) | ReadError::Lagging | ReadError::Empty) => {}
        Err(e) => panic!("{e:?}"),
    };
}

/// A peer that scribbles both hints, a route and the claim marker of the slot it names, still
/// meets the slot's stamp: the reader never hands over the message the slot holds as the one
/// it looks for. (The marker alone would pass: it is what the scribbler wrote.)
#[test]
fn a_scribbled_route_and_claim_marker_still_meet_the_stamp() {
    for pin in [false, true] {
        let (s, mut p, [mut r]) = open_shared(seg(4), [DeliveryClass::SkipOnLag]);
        publish_msgs(&mut p, 0..4);
        let mut buf = [0u8; 200];
        for seq in 0..4 {
            assert_eq!(r.try_copy(&mut buf).unwrap().seq, seq);
        }
        // Message 4 is not published: its home (slot 0) holds message 0. Route it to slot 2,
        // which holds message 2, and give slot 2 message 4's claim marker.
        let relaxed = core::sync::atomic::Ordering::Relaxed;
        s.slot_header(0).route.store(route_word(4, 2), relaxed);
        s.slot_header(2).claim.store(2 * 4 + 1, relaxed);
        for _ in 0..3 {
            let got = if pin {
                r.try_pin().map(|m| (m.seq(), m.bytes().to_vec()))
            } else {
                r.try_copy(&mut buf).map(|c| (c.seq, buf[..c.len].to_vec()))
            };
            match got {
                Ok((seq, bytes)) => panic!("message {seq} handed over: {:?}..", &bytes[..4]),
                Err(ReadError::Corrupt(_) | ReadError::Empty | ReadError::Lagging) => {}
                Err(e) => panic!("{e:?}"),
            }
        }
    }
}

#[test]
fn attach_sees_the_never_stall_flag() {
    let s = seg(4);
    let g = *s.geometry();
    assert!(g.config().never_stall);
    let plain = ring(&Config::new(4, 200));
    assert!(!plain.geometry().config().never_stall);
}
