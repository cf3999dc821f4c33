//! In-process stress: one producer thread and three consumer threads, one per delivery class,
//! over 10^6 checksummed messages of varying length (sized down under Miri).
//!
//! Checks: no read ever returns a message whose bytes do not match its sequence number (no torn
//! message), the gating consumer sees every message in order, and for the other two classes
//! `received + missed` is exactly the number of messages published.
#![cfg(not(any(ring_loom, ring_shuttle)))]
#![allow(
    clippy::disallowed_methods,
    reason = "the test's own threads yield; the façade rule is for the protocol code"
)]

use ring_core::{
    ClaimError, Config, Consumer, DeliveryClass, HeapSegment, OwnerId, Producer, ReadError,
    SpinThenYield,
};
use std::sync::Barrier;

const MESSAGES: u64 = if cfg!(miri) { 300 } else { 1_000_000 };
const CAPACITY: usize = 256;

/// The length and bytes message `seq` carries.
fn fill(seq: u64, out: &mut [u8; CAPACITY]) -> usize {
    let len = 1 + (seq.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 56) as usize % CAPACITY;
    let mut x = seq ^ 0xa076_1d64_78bd_642f;
    for b in out[..len].iter_mut() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        *b = x as u8;
    }
    len
}

fn checksum(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    })
}

fn check(seq: u64, meta: [u64; 2], bytes: &[u8]) {
    let mut want = [0u8; CAPACITY];
    let len = fill(seq, &mut want);
    assert_eq!(meta[0], seq, "metadata names another message");
    assert_eq!(
        bytes,
        &want[..len],
        "torn or wrong payload for message {seq}"
    );
    assert_eq!(meta[1], checksum(bytes));
}

struct Tally {
    received: u64,
    missed: u64,
    last: Option<u64>,
}

fn consume(
    seg: &HeapSegment,
    class: DeliveryClass,
    owner: u64,
    pin: bool,
    start: &Barrier,
) -> Tally {
    let mut c = Consumer::new(seg, class, OwnerId::new(owner).unwrap()).unwrap();
    start.wait();
    let mut t = Tally {
        received: 0,
        missed: 0,
        last: None,
    };
    let mut buf = [0u8; CAPACITY];
    loop {
        let got = if pin {
            c.try_pin().map(|m| {
                check(m.seq(), m.meta(), m.bytes());
                (m.seq(), m.missed())
            })
        } else {
            c.try_copy(&mut buf).map(|r| {
                check(r.seq, r.meta, &buf[..r.len]);
                (r.seq, r.missed)
            })
        };
        match got {
            Ok((seq, missed)) => {
                let expected = t.last.map_or(0, |l| l + 1) + missed;
                assert_eq!(seq, expected, "{class:?}: sequence does not add up");
                t.received += 1;
                t.missed += missed;
                t.last = Some(seq);
            }
            Err(ReadError::Empty) | Err(ReadError::Lagging) => std::thread::yield_now(),
            Err(ReadError::Closed) => return t,
            Err(e) => panic!("{class:?}: unexpected {e}"),
        }
    }
}

#[test]
fn one_producer_three_classes_million_messages() {
    let cfg = Config::new(8, CAPACITY as u32).with_consumers(4);
    let seg = HeapSegment::new(&cfg, OwnerId::new(1).unwrap()).unwrap();
    let start = Barrier::new(4);
    let (gating, latest, skip) = std::thread::scope(|s| {
        let g = s.spawn(|| consume(&seg, DeliveryClass::Gating, 2, true, &start));
        let l = s.spawn(|| consume(&seg, DeliveryClass::LatestOnly, 3, false, &start));
        let k = s.spawn(|| consume(&seg, DeliveryClass::SkipOnLag, 4, false, &start));
        let mut p = Producer::new(&seg, OwnerId::new(1).unwrap()).unwrap();
        start.wait();
        let mut msg = [0u8; CAPACITY];
        for seq in 0..MESSAGES {
            let len = fill(seq, &mut msg);
            let mut slot = loop {
                match p.claim(&mut SpinThenYield::new(64, 1 << 20)) {
                    Ok(slot) => break slot,
                    Err(ClaimError::Closed) => unreachable!(),
                    Err(_) => continue,
                }
            };
            slot.write(&msg[..len]).unwrap();
            slot.set_meta([seq, checksum(&msg[..len])]);
            assert_eq!(slot.publish().unwrap(), seq);
        }
        p.close();
        (g.join().unwrap(), l.join().unwrap(), k.join().unwrap())
    });
    assert_eq!(
        (gating.received, gating.missed),
        (MESSAGES, 0),
        "gating lost messages"
    );
    assert_eq!(gating.last, Some(MESSAGES - 1));
    for (name, t) in [("latest-only", &latest), ("skip-on-lag", &skip)] {
        assert_eq!(
            t.received + t.missed,
            MESSAGES,
            "{name}: received + missed != published"
        );
        assert_eq!(
            t.last,
            Some(MESSAGES - 1),
            "{name}: did not see the last message"
        );
    }
}
