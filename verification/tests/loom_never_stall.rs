//! loom models of never-stall rings (`Config::with_never_stall`): the producer chooses a slot
//! no reader pins and routes the message from its home slot; readers find it through the
//! route and validate it with the slot's stamp (docs/PROTOCOL.md, "Never-stall rings").
//!
//! Run: `RUSTFLAGS="--cfg ring_loom" LOOM_MAX_PREEMPTIONS=2 CARGO_TARGET_DIR=target/loom \
//!       cargo test -p ring-verification --release --test loom_never_stall`
//!
//! Payloads are two words of one repeated byte per message, so a torn read (words of two
//! messages) shows as mixed bytes.
#![cfg(ring_loom)]
#![allow(clippy::std_instead_of_core, reason = "std test")]

use loom::thread;
use ring_core::{Consumer, DeliveryClass, Producer, ReadError};
use ring_verification::support::{
    assert_whole16 as assert_whole, bytes_of, config16, id, model, msg16, publish16 as publish,
    publish_range, ring, Seg,
};

/// A never-stall ring of `slots` 16-byte slots and `consumers` entries, and its producer.
fn never_stall(slots: u32, consumers: u32) -> (Seg, Producer<Seg>) {
    ring(&config16(slots, consumers).with_never_stall(true))
}

/// The producer chooses slots while a latest-only reader lets go of the message it read last
/// and pins the newest: with one pin at a time on 3 slots (`slots >= pinned + 2`) every publish
/// succeeds at once, whichever slot the reader's bit is on when the producer looks (a pin that
/// lands between the producer's look and its claim CAS makes it pick again), and every pin
/// sees one whole message, the one it names.
#[test]
fn a_producer_chooses_a_slot_while_a_reader_pins_the_one_it_read_last() {
    model(|| {
        let (s, mut p) = never_stall(3, 1);
        let mut r = Consumer::new(s.clone(), DeliveryClass::LatestOnly, id(2)).unwrap();
        for seq in 0..3 {
            publish(&mut p, seq).unwrap();
        }
        let first = r.try_pin().unwrap();
        assert_eq!(first.seq(), 2);
        let mut a = [0u8; 16];
        first.copy_to(&mut a);
        let t = thread::spawn(move || {
            for seq in 3..5 {
                assert_eq!(
                    publish(&mut p, seq).expect("one pin never stalls a 3-slot ring"),
                    seq
                );
            }
            p // Kept alive: dropping it would end the stream.
        });
        assert_whole(&a, 2);
        drop(first);
        let mut seen = 2;
        match r.try_pin() {
            Ok(m) => {
                assert!(m.seq() > 2);
                let mut b = [0u8; 16];
                m.copy_to(&mut b);
                assert_whole(&b, m.seq());
                seen = m.seq();
            }
            // Only the message it already read is there yet, or every try met a rewrite.
            Err(ReadError::Empty | ReadError::Lagging) => {}
            Err(e) => panic!("reader: {e}"),
        }
        let _p = t.join().unwrap();
        if seen < 4 {
            let m = r.try_pin().unwrap();
            assert_eq!(m.seq(), 4, "the newest message is always there to pin");
            let mut b = [0u8; 16];
            m.copy_to(&mut b);
            assert_whole(&b, 4);
        }
    });
}

/// A skip-on-lag reader looks a sequence up through its route while the producer reuses the
/// slot the route names for a later message, which itself goes to a slot that is not its home
/// (a held message pins that home). The reader gets whole messages, each the one it names,
/// with `missed` counting exactly the sequences it stepped over, copy or pin.
#[test]
fn a_reader_looks_up_a_sequence_whose_slot_is_reused() {
    for pin in [false, true] {
        model(move || {
            // 4 slots: the holder's pin and the reader's leave the newest and one to write.
            let (s, mut p) = never_stall(4, 2);
            let mut r = Consumer::new(s.clone(), DeliveryClass::SkipOnLag, id(2)).unwrap();
            let mut holder = Consumer::new(s.clone(), DeliveryClass::LatestOnly, id(3)).unwrap();
            for seq in 0..4 {
                publish(&mut p, seq).unwrap();
            }
            // Message 3 stays in slot 3: message 7 (home 3) must go elsewhere, into the slot
            // of the oldest message nobody pins (4's, slot 0, unless the reader pins it).
            let held = holder.try_hold().unwrap();
            let mut buf = [0u8; 16];
            for seq in 0..4 {
                let c = r.try_copy(&mut buf).unwrap();
                assert_eq!((c.seq, c.missed), (seq, 0));
            }
            publish(&mut p, 4).unwrap();
            publish(&mut p, 5).unwrap();
            let t = thread::spawn(move || {
                publish(&mut p, 6).unwrap();
                publish(&mut p, 7).unwrap();
                p
            });
            let (seq, missed) = if pin {
                match r.try_pin() {
                    Ok(m) => {
                        let mut b = [0u8; 16];
                        m.copy_to(&mut b);
                        assert_whole(&b, m.seq());
                        (m.seq(), m.missed())
                    }
                    // Lagging: every try met a rewrite. Empty: it saw a message overwritten by
                    // a later claim before the next one's route (a Relaxed hint) reached it; a
                    // default ring's stamp can be as late (an abort's odd stamp is Relaxed).
                    Err(ReadError::Lagging | ReadError::Empty) => (u64::MAX, 0),
                    Err(e) => panic!("reader: {e}"),
                }
            } else {
                match r.try_copy(&mut buf) {
                    Ok(c) => {
                        assert_whole(&buf[..c.len], c.seq);
                        (c.seq, c.missed)
                    }
                    Err(ReadError::Lagging | ReadError::Empty) => (u64::MAX, 0),
                    Err(e) => panic!("reader: {e}"),
                }
            };
            if seq != u64::MAX {
                assert!((4..8).contains(&seq));
                assert_eq!(
                    missed,
                    seq - 4,
                    "missed counts exactly the skipped sequences"
                );
            }
            let _p = t.join().unwrap();
            if seq == u64::MAX {
                // Everything is visible after the join: the next read finds a whole message.
                let c = r.try_copy(&mut buf).unwrap();
                assert_whole(&buf[..c.len], c.seq);
                assert!((5..8).contains(&c.seq));
            }
            assert_whole(&bytes_of(holder.held_words(&held).unwrap(), 16), 3);
            holder.release(held).unwrap();
        });
    }
}

/// A gating reader on a never-stall ring while a latest-only reader's hold moves the producer
/// off its home slots: the producer waits for the gating reader (`Full`), never overwrites a
/// message it has not consumed, and the gating reader gets every message once, in order.
#[test]
fn a_gating_reader_loses_nothing_while_a_hold_moves_the_producer() {
    model(|| {
        let (s, mut p) = never_stall(3, 2);
        let mut g = Consumer::new(s.clone(), DeliveryClass::Gating, id(2)).unwrap();
        let mut holder = Consumer::new(s.clone(), DeliveryClass::LatestOnly, id(3)).unwrap();
        publish(&mut p, 0).unwrap();
        let held = holder.try_hold().unwrap(); // message 0, slot 0
        publish(&mut p, 1).unwrap();
        let t = thread::spawn(move || {
            let mut sent = 2;
            publish_range(&mut p, &mut sent, 4, 4, false, msg16, |_| {});
            sent
        });
        let mut buf = [0u8; 16];
        let mut next = 0;
        for _ in 0..2 {
            match g.try_copy(&mut buf) {
                Ok(c) => {
                    assert_eq!((c.seq, c.missed), (next, 0));
                    assert_whole(&buf[..c.len], next);
                    next += 1;
                }
                Err(ReadError::Empty) => {}
                Err(e) => panic!("gating reader: {e}"),
            }
        }
        let sent = t.join().unwrap();
        while let Ok(c) = g.try_copy(&mut buf) {
            assert_eq!((c.seq, c.missed), (next, 0));
            assert_whole(&buf[..c.len], next);
            next += 1;
        }
        assert_eq!(next, sent, "the gating reader got every published message");
        assert_whole(&bytes_of(holder.held_words(&held).unwrap(), 16), 0);
        holder.release(held).unwrap();
    });
}
