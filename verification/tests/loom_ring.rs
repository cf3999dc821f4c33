//! loom models of the ring protocol: ring-core itself, built with `--cfg ring_loom` so that its
//! sync façade hands out loom's atomics, over the loom-shaped `OwnedSegment`.
//!
//! Run: `RUSTFLAGS="--cfg ring_loom" LOOM_MAX_PREEMPTIONS=2 CARGO_TARGET_DIR=target/loom \
//!       cargo test -p ring-verification --release --test 'loom_*'`
//!
//! Payloads are two words (16 bytes) of one repeated byte per message, so a torn read (words of
//! two messages) is visible as mixed bytes.
#![cfg(ring_loom)]
#![allow(clippy::std_instead_of_core, reason = "std test")]

use loom::thread;
use ring_core::{ClaimError, Consumer, DeliveryClass, Producer, ReadError};
use ring_verification::support::{
    assert_pinned16, assert_whole16 as assert_whole, bytes_of, config16, id, model, msg16,
    publish16 as publish, publish16_within, publish_range, ring, ring_with, Seg,
};

/// Publish vs optimistic copy: the producer rewrites the only slot while a reader copies the
/// old message out. The copy is the old message whole, the new one whole, or refused.
/// A ring of `slots` 16-byte slots, its producer and a consumer of `class`, with message 0
/// published after the consumer registered.
fn published0(slots: u32, class: DeliveryClass) -> (Producer<Seg>, Consumer<Seg>) {
    let (_, mut p, c) = ring_with(&config16(slots, 1), class);
    publish(&mut p, 0).unwrap();
    (p, c)
}

#[test]
fn copy_is_whole_or_refused() {
    model(|| {
        let (mut p, mut c) = published0(1, DeliveryClass::SkipOnLag);
        let t = thread::spawn(move || {
            publish(&mut p, 1).unwrap();
        });
        let mut buf = [0u8; 16];
        match c.try_copy(&mut buf) {
            Ok(got) => {
                assert_whole(&buf[..got.len], got.seq);
                assert_eq!(
                    got.missed, got.seq,
                    "skip-on-lag must count what it skipped"
                );
            }
            // Overwritten while copying, and the new message not yet published.
            Err(ReadError::Empty) => assert_eq!(c.missed(), 1),
            Err(e) => panic!("unexpected {e}"),
        }
        t.join().unwrap();
    });
}

/// Publish vs pin: a claim never succeeds on a pinned slot, and a pin never sees a partial or
/// foreign message, even when the slot was rewritten between the reader's target and its pin.
#[test]
fn pin_excludes_claim_and_sees_one_message() {
    model(|| {
        let (mut p, mut c) = published0(1, DeliveryClass::SkipOnLag);
        let t = thread::spawn(move || {
            // Either it claims (no pin held), or it is refused because of the pin.
            match publish(&mut p, 1) {
                Ok(seq) => assert_eq!(seq, 1),
                Err(ClaimError::Pinned { readers, .. }) => assert_eq!(readers, 1),
                Err(e) => panic!("unexpected {e}"),
            }
        });
        if let Ok(m) = c.try_pin() {
            assert_pinned16(&m);
            // Still the same message: the pin keeps the producer out.
            assert_pinned16(&m);
        }
        t.join().unwrap();
    });
}

/// The producer wraps a 2-slot ring (three messages) under two consumers of different classes,
/// one pinning and one copying; every read is whole and the counts are exact.
#[test]
fn producer_wraps_two_slots_under_two_consumers() {
    model(|| {
        let (s, mut p, mut latest) = ring_with(&config16(2, 2), DeliveryClass::LatestOnly);
        let mut lag = Consumer::new(s.clone(), DeliveryClass::SkipOnLag, id(3)).unwrap();
        publish(&mut p, 0).unwrap();
        let tp = thread::spawn(move || {
            for seq in 1..3 {
                // No gating consumer and no pin can hold it back except a pin on the slot.
                let _ = publish(&mut p, seq);
            }
        });
        let tl = thread::spawn(move || {
            if let Ok(m) = latest.try_pin() {
                assert_pinned16(&m);
                assert_eq!(
                    m.missed(),
                    m.seq(),
                    "latest-only counts every message it skipped"
                );
            }
            assert_eq!(latest.received() + latest.missed(), latest.cursor());
        });
        let mut buf = [0u8; 16];
        let mut last = None;
        for _ in 0..2 {
            if let Ok(got) = lag.try_copy(&mut buf) {
                assert_whole(&buf[..got.len], got.seq);
                assert!(last.is_none_or(|l| got.seq > l), "sequence went backwards");
                last = Some(got.seq);
            }
        }
        assert_eq!(lag.received() + lag.missed(), lag.cursor());
        tp.join().unwrap();
        tl.join().unwrap();
    });
}

/// A gating consumer on a 2-slot ring: the producer is refused (never overwrites) until the
/// consumer has consumed; the consumer receives every message, in order, none missed.
#[test]
fn gating_consumer_loses_nothing() {
    model(|| {
        let (mut p, mut g) = published0(2, DeliveryClass::Gating);
        publish(&mut p, 1).unwrap();
        let t = thread::spawn(move || {
            // Message 2 needs slot 0, which holds the unconsumed message 0 until the consumer
            // moves on.
            publish16_within(&mut p, 2, 3, true)
        });
        let mut buf = [0u8; 16];
        let got = g.try_copy(&mut buf).unwrap();
        assert_eq!((got.seq, got.missed), (0, 0));
        assert_whole(&buf[..got.len], 0);
        let m = g.try_pin().unwrap();
        assert_eq!((m.seq(), m.missed()), (1, 0));
        assert_pinned16(&m);
        drop(m);
        if t.join().unwrap() {
            let got = g.try_copy(&mut buf).unwrap();
            assert_eq!((got.seq, got.missed), (2, 0));
            assert_whole(&buf[..got.len], 2);
        }
        assert_eq!(g.missed(), 0);
    });
}

/// A gating consumer registering while the producer publishes (the SeqCst registration
/// handshake): whatever head it starts at, it never finds its first message overwritten.
#[test]
fn registration_races_publish() {
    model(|| {
        let (s, mut p) = ring(&config16(1, 1));
        publish(&mut p, 0).unwrap();
        let s2 = s.clone();
        let t = thread::spawn(move || {
            let mut g = Consumer::new(s2, DeliveryClass::Gating, id(2)).unwrap();
            let start = g.cursor();
            let mut buf = [0u8; 16];
            match g.try_copy(&mut buf) {
                Ok(got) => {
                    assert_eq!((got.seq, got.missed), (start, 0), "gating consumer missed");
                    assert_whole(&buf[..got.len], got.seq);
                }
                Err(ReadError::Empty) => {}
                Err(e) => panic!("gating consumer: {e}"),
            }
            assert_eq!(g.missed(), 0);
        });
        // Message 1 overwrites message 0; message 2 would overwrite message 1.
        for seq in 1..3 {
            if publish(&mut p, seq).is_err() {
                break;
            }
        }
        t.join().unwrap();
    });
}

/// A latest-only consumer joining while the producer publishes (a late-joining frame grabber):
/// message 0 was published before it joined, so it gets the newest message present, whole and
/// not below its start; its first read may only come back empty-handed when that message was
/// being rewritten by a newer one (2 slots: message 2 reuses message 0's), and then, once the
/// producer is done, its next read gets that newer message.
#[test]
fn a_late_latest_only_consumer_races_a_publish() {
    model(|| {
        let (s, mut p) = ring(&config16(2, 1));
        publish(&mut p, 0).unwrap();
        let t = thread::spawn(move || {
            for seq in 1..3 {
                publish(&mut p, seq).unwrap();
            }
            p
        });
        let mut l = Consumer::new(s.clone(), DeliveryClass::LatestOnly, id(2)).unwrap();
        let start = l.cursor();
        let mut buf = [0u8; 16];
        let first = l.try_copy(&mut buf);
        let _p = t.join().unwrap();
        match first {
            Ok(got) => {
                assert!(got.seq >= start, "read {} below its start {start}", got.seq);
                assert_whole(&buf[..got.len], got.seq);
            }
            Err(ReadError::Empty | ReadError::Lagging) => {
                // Only an overrun explains it: the read moved past the message it found
                // rewritten (with a start at the head, this was a plain "nothing yet").
                assert!(
                    l.cursor() > start || l.missed() > 0,
                    "the message present when it joined was not read"
                );
                let got = l
                    .try_copy(&mut buf)
                    .expect("the newest message, once published");
                assert_eq!(got.seq, 2, "not the newest");
                assert_whole(&buf[..got.len], got.seq);
            }
            Err(e) => panic!("a late latest-only consumer: {e}"),
        }
    });
}

/// A consumer that dies after `k` steps (0: just registered; 1: holding a pin; 2: after the
/// unpin; 3: after a copy)
/// while the producer publishes; once its death is known the producer reclaims it, exactly,
/// and then owns every slot again.
#[test]
fn reclaim_after_crash_at_any_step() {
    for k in 0..4 {
        model(move || {
            let (s, mut p, mut c) = ring_with(&config16(2, 1), DeliveryClass::Gating);
            let index = c.index();
            publish(&mut p, 0).unwrap();
            let t = thread::spawn(move || {
                // Death: whatever it holds right now (entry, pin) stays behind.
                if k == 0 {
                    std::mem::forget(c);
                    return;
                }
                match c.try_pin() {
                    Ok(m) if k == 1 => std::mem::forget(m),
                    Ok(m) => drop(m),
                    Err(_) => {}
                }
                if k >= 3 {
                    let mut buf = [0u8; 16];
                    let _ = c.try_copy(&mut buf);
                }
                std::mem::forget(c);
            });
            let _ = publish(&mut p, 1);
            t.join().unwrap();
            // SAFETY: the consumer thread was joined after leaking its handle: it makes no
            // more calls.
            let r = unsafe { p.reclaim(index, id(2)) }.unwrap();
            assert!(r.was_registered && r.pins_cleared <= 1);
            assert_eq!(ring_core::inspect::total_pins(&*s), 0, "reclaim left a pin");
            // Nothing holds the producer back any more: two more messages wrap the ring.
            let head = p.published();
            for seq in head..head + 2 {
                assert_eq!(publish(&mut p, seq), Ok(seq));
            }
            assert!(
                // SAFETY: as above.
                !unsafe { p.reclaim(index, id(2)) }.unwrap().was_registered,
                "reclaim is idempotent"
            );
        });
    }
}

/// A gating copy that a wrong liveness verdict reclaims mid-read (outside `reclaim`'s
/// contract: the victim is inside a call) while the producer, no longer gated by it, rewrites
/// the slot. The copy's cursor protected it until the reclaim, so its only validation is the
/// re-check of its registration after its fence (C4p): the reclaim's generation bump happens
/// before the rewrite, so the copy is message 0 whole or `Evicted`, never torn.
#[test]
fn a_gating_copy_reclaimed_mid_read_is_whole_or_evicted() {
    model(|| {
        let (_s, mut p, mut c) = ring_with(&config16(1, 1), DeliveryClass::Gating);
        let index = c.index();
        publish(&mut p, 0).unwrap();
        let t = thread::spawn(move || {
            // SAFETY: deliberately outside the contract (the consumer may be inside a copy):
            // copies read atomics only, so the model checks what the copy accepts, not UB.
            let r = unsafe { p.reclaim(index, id(2)) }.unwrap();
            assert!(r.was_registered);
            assert_eq!(publish(&mut p, 1), Ok(1));
        });
        let mut buf = [0u8; 16];
        match c.try_copy(&mut buf) {
            Ok(got) => {
                assert_eq!(got.seq, 0);
                assert_whole(&buf[..got.len], got.seq);
            }
            Err(ReadError::Evicted) => {}
            Err(e) => panic!("unexpected {e}"),
        }
        t.join().unwrap();
    });
}

/// Two holds released out of order while the producer tries to reuse their slots: every slot
/// stays the held message's until its release, for a gating consumer (its cursor stays at the
/// oldest hold) and a skip-on-lag one (its reader bits), and once both are released the
/// producer gets both slots back.
#[test]
fn two_holds_released_out_of_order_race_the_producer() {
    for class in [DeliveryClass::Gating, DeliveryClass::SkipOnLag] {
        model(move || {
            let (s, mut p) = ring(&config16(2, 1));
            let mut c = Consumer::new(s.clone(), class, id(2)).unwrap();
            publish(&mut p, 0).unwrap();
            publish(&mut p, 1).unwrap();
            let h0 = c.try_hold().unwrap();
            let h1 = c.try_hold().unwrap();
            let t = thread::spawn(move || {
                // Messages 2 and 3 need the held slots: each goes in only after its release.
                let mut sent = 2;
                publish_range(&mut p, &mut sent, 4, 4, true, msg16, |_| {});
                (p, sent)
            });
            let words =
                |c: &Consumer<Seg>, h: &ring_core::Hold| bytes_of(c.held_words(h).unwrap(), 16);
            assert_whole(&words(&c, &h1), 1);
            c.release(h1).unwrap();
            assert_whole(&words(&c, &h0), 0);
            c.release(h0).unwrap();
            let (mut p, sent) = t.join().unwrap();
            for seq in sent..4 {
                publish(&mut p, seq).expect("both slots are free again");
            }
        });
    }
}

/// A late gating reader starts two messages back (history) after the producer's last gate scan,
/// whose cached bound lets the producer overwrite that history without scanning again. The
/// reader's pin of a history message is its reader bit, so it reads the message whole or finds
/// it overwritten (and reads the next, counting one missed); it never reads a message being
/// rewritten.
#[test]
fn a_late_gating_reader_with_history_races_an_overwrite_of_it() {
    late_gating_reader_races_an_overwrite(true);
}

/// The same with a copy: its cursor does not protect a history message, so the copy validates
/// with the slot's claim marker (C4u), not its registration (`guarded_from`).
#[test]
fn a_late_gating_reader_copying_its_history_races_an_overwrite_of_it() {
    late_gating_reader_races_an_overwrite(false);
}

fn late_gating_reader_races_an_overwrite(pin: bool) {
    model(move || {
        let (s, mut p) = ring(&config16(2, 1));
        // The scan at message 2 (no reader) covers claims up to message 3.
        for seq in 0..3 {
            publish(&mut p, seq).unwrap();
        }
        let mut c = Consumer::new(s.clone(), DeliveryClass::Gating, id(2)).unwrap();
        assert_eq!(c.rewind(2), Ok(2), "messages 1 and 2 are there");
        let t = thread::spawn(move || {
            // Overwrites message 1's slot unless the reader pins it.
            let _ = publish(&mut p, 3);
        });
        let (seq, missed) = if pin {
            let m = c.try_pin().expect("a history message or the next");
            assert_pinned16(&m);
            (m.seq(), m.missed())
        } else {
            let mut buf = [0u8; 16];
            let got = c.try_copy(&mut buf).expect("a history message or the next");
            assert_whole(&buf[..got.len], got.seq);
            (got.seq, got.missed)
        };
        assert_eq!(missed, seq - 1, "an overwritten history message is missed");
        t.join().unwrap();
        assert_eq!(
            ring_core::inspect::total_pins(&*s),
            0,
            "the history pin's bit is gone"
        );
    });
}
