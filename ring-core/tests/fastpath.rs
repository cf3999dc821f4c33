//! The small-message fast path (ABI 3): inline messages in the slot's message line, consumers
//! that follow the slot's stamp, batches, the take-over of a predecessor's final stamps.
//! Runs under Miri too (`ci/miri.sh`).
#![cfg(not(any(ring_loom, ring_shuttle)))]

use core::sync::atomic::Ordering::Relaxed;
use ring_core::inspect::{consumer_info, total_pins};
use ring_core::layout::SEQ_LIMIT;
use ring_core::{
    ClaimError, Config, DeliveryClass, HeapSegment, Memory, Producer, ReadError, INLINE_CAPACITY,
};

mod common;
use common::{consumer, id, open_shared, ring, seg};

fn data(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|i| (i as u8).wrapping_mul(7) ^ seed).collect()
}

/// Where a pinned message's bytes lie: the slot header's message line or the payload area.
fn lies_inline(s: &HeapSegment, slot: usize, ptr: *const u8) -> bool {
    let hdr = s.slot_header(slot) as *const _ as usize;
    let at = ptr as usize;
    let payload = s.payload(slot).as_ptr() as usize;
    if (hdr..hdr + core::mem::size_of::<ring_core::layout::SlotHeader>()).contains(&at) {
        true
    } else {
        assert_eq!(at, payload, "neither inline nor at the payload area");
        false
    }
}

#[test]
fn small_messages_lie_in_the_slot_line_and_large_ones_in_the_payload_area() {
    let cap = (INLINE_CAPACITY + 64) as u32;
    let (s, mut p, [mut c]) = open_shared(seg(4, cap), [DeliveryClass::Gating]);
    for (len, inline) in [
        (0, true),
        (10, true),
        (INLINE_CAPACITY, true),
        (INLINE_CAPACITY + 1, false),
        (cap as usize, false),
        (1, true),
    ] {
        let msg = data(len, len as u8);
        p.try_publish(&msg).unwrap();
        let m = c.try_pin().unwrap();
        assert_eq!(m.bytes(), &msg[..], "len {len}");
        assert_eq!(
            lies_inline(&s, m.slot(), m.bytes().as_ptr()),
            inline,
            "len {len}"
        );
    }
}

/// Every length, written three ways (one `write`, two `write_at` pieces, `set_len` over an
/// in-place write), reads back the same by pin, copy and words, with the last word padded.
#[test]
fn every_length_reads_back_the_same_whichever_way_it_was_written() {
    let cap = INLINE_CAPACITY + 40;
    let (_, mut p, [mut pin, mut copy]) = open_shared(
        seg(2, cap as u32),
        [DeliveryClass::Gating, DeliveryClass::SkipOnLag],
    );
    for len in (0..=cap).step_by(if cfg!(miri) { 13 } else { 1 }) {
        for way in 0..3 {
            let msg = data(len, (len + way) as u8);
            let mut slot = p.try_claim().unwrap();
            match way {
                0 => slot.write(&msg).unwrap(),
                1 => {
                    let half = len / 2;
                    slot.write_at(half, &msg[half..]).unwrap();
                    slot.write_at(0, &msg[..half]).unwrap();
                }
                _ => {
                    // Grow past the inline words, then shrink back: the bytes are the slot's.
                    slot.write(&msg).unwrap();
                    slot.set_len(cap).unwrap();
                    slot.write_at(0, &msg).unwrap();
                    slot.set_len(len).unwrap();
                }
            }
            slot.publish().unwrap();
            let m = pin.try_pin().unwrap();
            assert_eq!(m.bytes(), &msg[..], "pin: len {len} way {way}");
            let words = m.words();
            assert_eq!(words.len(), len.div_ceil(8));
            if let Some(last) = words.last() {
                let bytes = last.load(Relaxed).to_ne_bytes();
                let used = len - (words.len() - 1) * 8;
                assert!(
                    bytes[used..].iter().all(|&b| b == 0),
                    "len {len} way {way}: last word not padded: {bytes:?}"
                );
            }
            drop(m);
            let mut buf = vec![0u8; cap];
            let got = copy.try_copy(&mut buf).unwrap();
            assert_eq!(&buf[..got.len], &msg[..], "copy: len {len} way {way}");
        }
    }
}

#[test]
fn in_place_writes_of_a_small_message_travel_inline() {
    let config = Config::new(2, 256).with_consumers(1).with_pin_only(true);
    let (s, mut p, [mut c]) = open_shared(ring(&config), [DeliveryClass::Gating]);
    let mut slot = p.try_claim().unwrap();
    slot.loan(5).unwrap().copy_from_slice(b"drawn");
    slot.publish().unwrap();
    let m = c.try_pin().unwrap();
    assert_eq!(m.bytes(), b"drawn");
    assert!(lies_inline(&s, m.slot(), m.bytes().as_ptr()));
}

/// Gating and skip-on-lag consumers learn of a message from its slot's stamp: a `head` a peer
/// scribbled does not stop them; latest-only readers, which need `head`, report it.
#[test]
fn gating_consumers_follow_the_stamp_not_head() {
    let (s, mut p, [mut gating, mut latest]) = open_shared(
        seg(4, 64),
        [DeliveryClass::Gating, DeliveryClass::LatestOnly],
    );
    p.try_publish(b"zero").unwrap();
    p.try_publish(b"one").unwrap();
    s.producer_line().head.store(SEQ_LIMIT + 5, Relaxed);
    assert_eq!(gating.try_pin().unwrap().bytes(), b"zero");
    assert_eq!(gating.try_pin().unwrap().bytes(), b"one");
    assert_eq!(gating.try_pin().unwrap_err(), ReadError::Empty);
    assert!(matches!(latest.try_pin(), Err(ReadError::Corrupt(_))));
}

#[test]
fn a_batch_publishes_a_prefix_and_says_why_not_more() {
    let (s, mut p, [mut c]) = open_shared(seg(4, 64), [DeliveryClass::Gating]);
    let msgs: Vec<Vec<u8>> = (0..6).map(|i| data(8 + i, i as u8)).collect();
    assert_eq!(p.try_publish_batch::<Vec<u8>>(&[]), Ok(0));
    assert_eq!(
        p.try_publish_batch(&msgs),
        Ok(4),
        "four slots, one gating reader"
    );
    assert_eq!(p.published(), 4);
    assert_eq!(s.producer_line().head.load(Relaxed), 4, "one head store");
    assert!(matches!(
        p.try_publish_batch(&msgs),
        Err(ClaimError::Full { .. })
    ));
    let too_large = [data(8, 0), data(65, 0)];
    assert!(matches!(
        p.try_publish_batch(&too_large),
        Err(ClaimError::TooLarge { len: 65, .. })
    ));
    assert_eq!(
        p.published(),
        4,
        "a batch with a message too large publishes nothing"
    );
    for (i, msg) in msgs.iter().take(4).enumerate() {
        let m = c.try_pin().unwrap();
        assert_eq!((m.seq(), m.bytes()), (i as u64, &msg[..]));
    }
}

#[test]
fn a_batch_read_reads_at_most_max_in_order_and_stores_its_cursor_once() {
    let (s, mut p, [mut c]) = open_shared(seg(8, 64), [DeliveryClass::Gating]);
    for i in 0..5u8 {
        p.try_publish(&[i; 9]).unwrap();
    }
    let mut seen = Vec::new();
    let n = c
        .try_read_batch(3, |m| {
            // A gating reader's pin is its cursor: no reader bit, and the shared cursor stays
            // at the batch's first message until the batch ends.
            assert_eq!(total_pins(&s), 0);
            assert_eq!(consumer_info(&s, 0).unwrap().cursor, 0);
            seen.push((m.seq(), m.bytes().to_vec()));
        })
        .unwrap();
    assert_eq!(n, 3);
    assert_eq!(
        seen,
        (0..3u8)
            .map(|i| (u64::from(i), vec![i; 9]))
            .collect::<Vec<_>>()
    );
    assert_eq!(total_pins(&s), 0);
    assert_eq!(consumer_info(&s, c.index()).unwrap().cursor, 3);
    assert_eq!(c.try_read_batch(10, |_| {}), Ok(2));
    assert_eq!(c.try_read_batch(10, |_| {}), Err(ReadError::Empty));
    assert_eq!(c.received(), 5);
    // The producer can wrap: everything was consumed.
    for _ in 0..8 {
        p.try_publish(b"again").unwrap();
    }
}

#[test]
fn a_panicking_batch_callback_leaves_its_message_unread() {
    let (s, mut p, [mut c]) = open_shared(seg(2, 64), [DeliveryClass::Gating]);
    p.try_publish(b"first").unwrap();
    p.try_publish(b"second").unwrap();
    let r = std::panic::catch_unwind(core::panic::AssertUnwindSafe(|| {
        c.try_read_batch(4, |m| {
            assert_ne!(m.seq(), 1, "the callback fails on message 1")
        })
    }));
    assert!(r.is_err());
    // Message 0 was consumed, message 1 was not; its pin is taken back by the next read.
    let m = c.try_pin().unwrap();
    assert_eq!((m.seq(), m.bytes()), (1, &b"second"[..]));
    drop(m);
    assert_eq!(total_pins(&s), 0);
    p.try_publish(b"third").unwrap();
    p.try_publish(b"fourth").unwrap();
}

/// A predecessor that died between a final stamp and its `head` store published that message
/// (a stamp-following consumer may have read it): the successor moves `head` past it instead
/// of rewriting the sequence.
#[test]
fn a_successor_moves_head_past_its_predecessors_final_stamps() {
    let s = seg(4, 64);
    let mut c = consumer(&s, DeliveryClass::Gating, 2);
    let mut p = Producer::new(&s, id(7)).unwrap();
    p.try_publish(b"zero").unwrap();
    p.try_publish(b"one").unwrap();
    // The death: message 1 is complete, `head` still says 1.
    s.producer_line().head.store(1, Relaxed);
    core::mem::forget(p);
    assert_eq!(c.try_pin().unwrap().bytes(), b"zero");
    assert_eq!(c.try_pin().unwrap().bytes(), b"one");
    // SAFETY: producer 7 is not inside a call and holds no slot (it was forgotten).
    let mut next = unsafe { Producer::take_over(&s, id(8), id(7)) }.unwrap();
    assert_eq!(next.published(), 2);
    assert_eq!(s.producer_line().head.load(Relaxed), 2);
    assert_eq!(next.try_publish(b"two"), Ok(2));
    let m = c.try_pin().unwrap();
    assert_eq!((m.seq(), m.bytes()), (2, &b"two"[..]));
}

#[test]
fn is_claimable_agrees_with_try_claim() {
    let (s, mut p, [mut c]) = open_shared(seg(2, 64), [DeliveryClass::Gating]);
    assert!(p.is_claimable());
    p.try_publish(b"a").unwrap();
    p.try_publish(b"b").unwrap();
    assert!(!p.is_claimable());
    assert!(matches!(p.try_claim(), Err(ClaimError::Full { .. })));
    let m = c.try_pin().unwrap();
    // Consumed up to 0 only once the pin is dropped.
    assert!(!p.is_claimable());
    drop(m);
    assert!(p.is_claimable());
    p.try_publish(b"c").unwrap();
    drop(c.try_pin().unwrap());
    drop(c.try_pin().unwrap());
    // Slot 1 is pinned by a skip-on-lag reader while the gating one is done with it.
    let mut skip = consumer(&s, DeliveryClass::SkipOnLag, 3);
    p.try_publish(b"d").unwrap();
    let held = skip.try_pin().unwrap();
    assert_eq!(held.bytes(), b"d");
    drop(c.try_pin().unwrap());
    p.try_publish(b"e").unwrap();
    drop(c.try_pin().unwrap());
    assert!(!p.is_claimable(), "slot 1 is pinned");
    assert!(matches!(p.try_claim(), Err(ClaimError::Pinned { .. })));
    drop(held);
    assert!(p.is_claimable());
}

/// The publish futex word moves only for parked consumers (and on close), so a publish
/// writes nothing to the control line that polling consumers read.
#[test]
fn the_futex_word_moves_only_for_parked_consumers() {
    let (s, mut p, [mut c]) = open_shared(seg(4, 64), [DeliveryClass::SkipOnLag]);
    let word = || s.producer_line().publish_futex.load(Relaxed);
    let before = word();
    for _ in 0..10 {
        p.try_publish(b"polled").unwrap();
        drop(c.try_pin().unwrap());
    }
    assert_eq!(word(), before, "no consumer was parked");
    s.producer_line().consumer_waiters.store(1, Relaxed);
    p.try_publish(b"parked").unwrap();
    assert_eq!(word(), before.wrapping_add(1));
    s.producer_line().consumer_waiters.store(0, Relaxed);
    p.close();
    assert_eq!(word(), before.wrapping_add(2), "a close always bumps");
}

/// A skip-on-lag reader pins each message of its batch (a reader bit) while the callback runs,
/// so the producer is refused that slot; a gating one holds it by its cursor instead.
#[test]
fn batch_reads_hold_their_message_while_the_callback_runs() {
    let (s, mut p, [mut skip]) = open_shared(seg(2, 64), [DeliveryClass::SkipOnLag]);
    p.try_publish(b"zero").unwrap();
    p.try_publish(b"one").unwrap();
    let mut calls = 0;
    let n = skip
        .try_read_batch(1, |m| {
            calls += 1;
            assert_eq!(m.bytes(), b"zero");
            assert_eq!(total_pins(&s), 1);
        })
        .unwrap();
    assert_eq!((n, calls), (1, 1));
    assert_eq!(total_pins(&s), 0);
    let mut gating = consumer(&s, DeliveryClass::Gating, 3);
    p.try_publish(b"two").unwrap();
    let pinned = gating.try_pin().unwrap();
    assert_eq!(pinned.bytes(), b"two");
    // Slot 0 holds message 2 and the gating reader is at 2: the producer may claim slot 1
    // (message 3) but not slot 0 again (message 4) until the reader is done.
    assert_eq!(p.try_publish(b"three"), Ok(3));
    assert!(matches!(
        p.try_publish(b"four"),
        Err(ClaimError::Full { .. })
    ));
    assert_eq!(pinned.bytes(), b"two");
    drop(pinned);
    drop(gating.try_pin().unwrap());
    assert_eq!(p.try_publish(b"four"), Ok(4));
}

/// `try_publish_with_meta`'s two words reach copies and pins on both paths: the general one
/// (the first claim of a ring runs the gating scan; every claim of a never-stall ring) and the
/// one-pass one (every later claim below the cached bound), inline and in the payload area.
#[test]
fn metadata_travels_on_the_one_pass_and_the_general_publish() {
    let cap = (INLINE_CAPACITY + 64) as u32;
    for never_stall in [false, true] {
        let config = Config::new(4, cap)
            .with_consumers(4)
            .with_never_stall(never_stall);
        let (_s, mut p, [mut copier, mut pinner]) = open_shared(
            ring(&config),
            [DeliveryClass::Gating, DeliveryClass::Gating],
        );
        let mut buf = vec![0u8; cap as usize];
        for i in 0..12u64 {
            let len = if i % 3 == 2 {
                INLINE_CAPACITY + 1
            } else {
                8 + i as usize
            };
            let msg = data(len, i as u8);
            let meta = [i ^ 0x5a5a, u64::MAX - i];
            let seq = p.try_publish_with_meta(&msg, meta).unwrap();
            let got = copier.try_copy(&mut buf).unwrap();
            assert_eq!(
                (got.seq, got.meta),
                (seq, meta),
                "copy {i}, never-stall {never_stall}"
            );
            assert_eq!(&buf[..got.len], &msg[..], "copy {i}");
            let m = pinner.try_pin().unwrap();
            assert_eq!(
                (m.seq(), m.meta()),
                (seq, meta),
                "pin {i}, never-stall {never_stall}"
            );
            assert_eq!(m.bytes(), &msg[..], "pin {i}");
        }
        // Plain `try_publish` still writes zero metadata over the words of a lap before.
        for i in 0..4 {
            p.try_publish(&data(8, i)).unwrap();
            assert_eq!(copier.try_copy(&mut buf).unwrap().meta, [0, 0], "plain {i}");
            assert_eq!(pinner.try_pin().unwrap().meta(), [0, 0], "plain {i}");
        }
    }
}
