//! Where a consumer's entry shows it stands (`ring_core::inspect`, a reclaim's report): a gating
//! consumer publishes its cursor and counters on every read; one that does not gate publishes
//! them every `PROGRESS_EVERY` one-message reads, and whenever a read finds nothing, before it
//! parks, and at the end of a batch or a hold (`ring_core::PROGRESS_EVERY`).
#![cfg(not(any(ring_loom, ring_shuttle)))]

use ring_core::inspect::consumer_info;
use ring_core::{Config, Consumer, DeliveryClass, Memory, ReadError, Spin, PROGRESS_EVERY};

mod common;
use common::{open_shared, ring};

/// (cursor, received, missed) as consumer `c`'s entry shows them.
fn shown<M: Memory>(s: &M, c: &Consumer<M>) -> (u64, u64, u64) {
    let e = consumer_info(s, c.index()).unwrap();
    (e.cursor, e.received, e.missed)
}

/// One message read the one-message way: a copy, or a pin let go at once.
fn read_one<M: Memory>(c: &mut Consumer<M>, pin: bool) -> u64 {
    if pin {
        c.try_pin().unwrap().seq()
    } else {
        let mut buf = [0u8; 64];
        c.try_copy(&mut buf).unwrap().seq
    }
}

#[test]
fn a_reader_that_does_not_gate_publishes_every_progress_every_reads_and_when_it_finds_nothing() {
    let every = u64::from(PROGRESS_EVERY);
    for class in [DeliveryClass::SkipOnLag, DeliveryClass::LatestOnly] {
        for pin in [false, true] {
            let (s, mut p, [mut c]) = open_shared(ring(&Config::new(4, 64)), [class]);
            // Streaming right behind the producer: one message published, one read, and no
            // read finds nothing. Up to `PROGRESS_EVERY - 1` reads stay local.
            for i in 0..every - 1 {
                p.try_publish(&[7; 40]).unwrap();
                assert_eq!(read_one(&mut c, pin), i);
                assert_eq!(shown(&s, &c), (0, 0, 0), "{class:?} pin {pin}: read {i}");
            }
            // The `PROGRESS_EVERY`-th read publishes all of them.
            p.try_publish(&[7; 40]).unwrap();
            assert_eq!(read_one(&mut c, pin), every - 1);
            assert_eq!(shown(&s, &c), (every, every, 0), "{class:?} pin {pin}");
            // Three more stay local until a read finds nothing.
            for _ in 0..3 {
                p.try_publish(&[7; 40]).unwrap();
                read_one(&mut c, pin);
            }
            assert_eq!(shown(&s, &c).0, every, "{class:?} pin {pin}");
            let mut buf = [0u8; 64];
            assert_eq!(c.try_copy(&mut buf).unwrap_err(), ReadError::Empty);
            assert_eq!(
                shown(&s, &c),
                (every + 3, every + 3, 0),
                "{class:?} pin {pin}: an empty read leaves the entry exact"
            );
            assert_eq!(c.cursor(), every + 3);
        }
    }
}

#[test]
fn a_gating_reader_publishes_on_every_read() {
    // The one-pass reads (a default ring) and the general read (a never-stall ring).
    for never_stall in [false, true] {
        for pin in [false, true] {
            let config = Config::new(4, 64).with_never_stall(never_stall);
            let (s, mut p, [mut c]) = open_shared(ring(&config), [DeliveryClass::Gating]);
            for i in 0..40 {
                p.try_publish(&[1; 40]).unwrap();
                assert_eq!(read_one(&mut c, pin), i);
                let want = (i + 1, i + 1, 0);
                assert_eq!(shown(&s, &c), want, "never-stall {never_stall} pin {pin}");
            }
        }
    }
}

#[test]
fn a_gating_reader_publishes_each_read_of_its_history() {
    // Below the head it joined at, a rewound gating reader pins with its reader bit, as one
    // that does not gate; its cursor is still what the producer waits for.
    for pin in [false, true] {
        let s = std::sync::Arc::new(ring(&Config::new(8, 64)));
        let mut p = common::producer(std::sync::Arc::clone(&s));
        for _ in 0..6 {
            p.try_publish(&[5; 40]).unwrap();
        }
        let mut c = common::consumer(std::sync::Arc::clone(&s), DeliveryClass::Gating, 2);
        assert_eq!(c.rewind(6), Ok(6));
        for i in 0..6 {
            assert_eq!(read_one(&mut c, pin), i);
            assert_eq!(shown(&s, &c), (i + 1, i + 1, 0), "pin {pin}");
        }
    }
}

#[test]
fn a_reader_about_to_wait_publishes_what_it_deferred() {
    let (s, mut p, [mut c]) = open_shared(ring(&Config::new(8, 64)), [DeliveryClass::SkipOnLag]);
    for _ in 0..3 {
        p.try_publish(&[2; 40]).unwrap();
    }
    for _ in 0..3 {
        read_one(&mut c, false);
    }
    assert_eq!(shown(&s, &c), (0, 0, 0));
    // A wait that finds nothing to read shows where the reader stands while it waits (here a
    // bounded spin that runs out).
    assert_eq!(c.wait_ready(&mut Spin::new(4)), Err(ReadError::Timeout));
    assert_eq!(shown(&s, &c), (3, 3, 0));
}

#[test]
fn a_skipped_message_is_shown_as_missed_once_published() {
    let (s, mut p, [mut c]) = open_shared(ring(&Config::new(2, 64)), [DeliveryClass::SkipOnLag]);
    for _ in 0..5 {
        p.try_publish(&[3; 40]).unwrap();
    }
    // Messages 0..3 are overwritten: the read of 3 counts them as missed.
    let mut buf = [0u8; 64];
    let got = c.try_copy(&mut buf).unwrap();
    assert_eq!((got.seq, got.missed), (3, 3));
    assert_eq!(shown(&s, &c), (0, 0, 0), "one read: still local");
    assert_eq!(read_one(&mut c, false), 4);
    assert_eq!(c.try_copy(&mut buf).unwrap_err(), ReadError::Empty);
    assert_eq!(shown(&s, &c), (5, 2, 3));
}

#[test]
fn a_batch_and_a_hold_publish_at_once() {
    let (s, mut p, [mut c]) = open_shared(ring(&Config::new(8, 64)), [DeliveryClass::SkipOnLag]);
    for _ in 0..6 {
        p.try_publish(&[4; 40]).unwrap();
    }
    read_one(&mut c, false);
    assert_eq!(shown(&s, &c), (0, 0, 0));
    assert_eq!(c.try_read_batch(2, |_| {}), Ok(2));
    assert_eq!(shown(&s, &c), (3, 3, 0), "the batch's end publishes");
    read_one(&mut c, true);
    assert_eq!(shown(&s, &c), (3, 3, 0));
    let h = c.try_hold().unwrap();
    assert_eq!(shown(&s, &c), (5, 5, 0), "a hold publishes");
    read_one(&mut c, true);
    assert_eq!(shown(&s, &c), (5, 5, 0));
    c.release(h).unwrap();
    assert_eq!(
        shown(&s, &c),
        (6, 6, 0),
        "a release publishes the deferred read too"
    );
}
