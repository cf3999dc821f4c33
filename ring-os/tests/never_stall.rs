//! `RingBuilder::never_stall`: the rule `slots >= max_pins + 2` is checked at create and at
//! open (an error, never a panic), an open checks the ring is never-stall, and the ring says
//! what it is. The cross-process acceptance scenarios are in `tests/multiprocess/never_stall.rs`.
#![allow(clippy::std_instead_of_core, reason = "std test crate")]

use core::time::Duration;

use ring_core::Memory as _;
use ring_os::prelude::*;

mod common;

use common::small;

fn unique(what: &str) -> String {
    format!("never-stall-{what}-{}", std::process::id())
}

#[test]
fn create_refuses_fewer_slots_than_pins_plus_two() {
    for (slots, max_pins) in [(5, 4), (3, 2), (2, 0), (1, 0)] {
        let err = small(Ring::memfd(), slots)
            .never_stall(max_pins)
            .create()
            .err();
        assert!(
            matches!(err, Some(Error::NeverStallPins { slots: s, max_pins: m }) if s == slots && m == max_pins),
            "{slots} slots for {max_pins} pins: {err:?}"
        );
        let text = err.map(|e| e.to_string()).unwrap_or_default();
        assert!(text.contains("slots >= max_pins + 2"), "{text}");
    }
    for (slots, max_pins) in [(6, 4), (3, 1), (3, 0)] {
        let ring = small(Ring::memfd(), slots)
            .never_stall(max_pins)
            .create()
            .expect("enough slots");
        assert!(ring.mapping().geometry().config().never_stall);
    }
    let plain = small(Ring::memfd(), 2).create().unwrap();
    assert!(!plain.mapping().geometry().config().never_stall);
}

#[test]
fn open_checks_the_flag_and_the_pins() {
    let name = unique("open");
    let ring = small(Ring::builder(&name), 6)
        .never_stall(4)
        .create()
        .unwrap();
    let quick = |b: RingBuilder| b.open_timeout(Duration::from_millis(200)).open();
    // Without asking: opens, and says it is never-stall.
    let opened = quick(Ring::builder(&name)).unwrap();
    assert!(opened.mapping().geometry().config().never_stall);
    quick(Ring::builder(&name).never_stall(4)).unwrap();
    assert!(matches!(
        quick(Ring::builder(&name).never_stall(5)),
        Err(Error::NeverStallPins {
            slots: 6,
            max_pins: 5
        })
    ));
    drop((opened, ring));

    let plain_name = unique("plain");
    let _plain = small(Ring::builder(&plain_name), 6).create().unwrap();
    assert!(matches!(
        quick(Ring::builder(&plain_name).never_stall(1)),
        Err(Error::ConfigMismatch {
            field: "never_stall",
            found: 0,
            expected: 1
        })
    ));
}

#[test]
fn a_latest_only_hold_never_makes_the_publisher_wait() {
    let ring = small(Ring::memfd(), 3).never_stall(1).create().unwrap();
    let mut publisher = ring.publisher().unwrap();
    let mut grabber = ring.subscriber(DeliveryClass::LatestOnly).unwrap();
    publisher.send(b"first").unwrap();
    let held = grabber.recv_held_timeout(Duration::from_secs(1)).unwrap();
    for i in 0..30u64 {
        publisher
            .try_send(&i.to_le_bytes())
            .unwrap_or_else(|e| panic!("message {i} waited for the hold: {e}"));
    }
    assert_eq!(grabber.held_bytes(&held), Some(&b"first"[..]));
    grabber.release(held).unwrap();
}
