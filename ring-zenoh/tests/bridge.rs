//! ring-zenoh in one process over `tcp/127.0.0.1`: skip-on-lag accounting on both sides, small
//! messages in batches, and a receiving bridge fed garbage (single and batch samples) by a
//! plain Zenoh publisher.
#![allow(
    clippy::std_instead_of_core,
    clippy::std_instead_of_alloc,
    reason = "std test crate"
)]

use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use ring_os::prelude::*;
use ring_os::raw::ProducerExt as _;
use ring_zenoh::wire::{Header, WireError};
use ring_zenoh::zenoh::Wait as _;
use ring_zenoh::{BridgeIn, BridgeOut, End, InStats, OutStats, ZenohOptions};

const SECS: fn(u64) -> Duration = Duration::from_secs;

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// Two sessions connected over loopback.
fn sessions() -> (ring_zenoh::zenoh::Session, ring_zenoh::zenoh::Session) {
    let ep = format!("tcp/127.0.0.1:{}", free_port());
    let a = ZenohOptions::new()
        .listen(&ep)
        .open()
        .expect("listening session");
    let b = ZenohOptions::new()
        .connect(&ep)
        .open()
        .expect("connecting session");
    (a, b)
}

/// An origin ring, a far ring with a gating reader, and the two bridges between them over
/// loopback, matched.
struct Pair {
    origin: Ring,
    far_reader: Subscriber,
    inbound: BridgeIn,
    out: BridgeOut,
    _far: Ring,
    _sessions: (ring_zenoh::zenoh::Session, ring_zenoh::zenoh::Session),
}

impl Pair {
    fn new(what: &str, class: DeliveryClass, slots: (u32, u32), slot_size: u32) -> Self {
        let ring = |n| {
            Ring::memfd()
                .slots(n)
                .slot_size(slot_size)
                .create()
                .expect("ring")
        };
        let (origin, far) = (ring(slots.0), ring(slots.1));
        let (a, b) = sessions();
        let key = format!("test/{what}/{}", std::process::id());
        let far_reader = far.subscriber(DeliveryClass::Gating).expect("far sub");
        let inbound = BridgeIn::new(&b, &far, &key).expect("bridge in");
        let out = BridgeOut::new(&a, &origin, &key, class).expect("out");
        assert!(out.wait_matched(SECS(20)));
        Self {
            origin,
            far_reader,
            inbound,
            out,
            _far: far,
            _sessions: (a, b),
        }
    }
}

type Bridges<'s> = (
    std::thread::ScopedJoinHandle<'s, (End, OutStats)>,
    std::thread::ScopedJoinHandle<'s, (End, InStats)>,
);

/// Runs both bridges on threads of `s`.
fn spawn_bridges<'s>(
    s: &'s std::thread::Scope<'s, '_>,
    mut out: BridgeOut,
    mut inbound: BridgeIn,
    stop: &'s AtomicBool,
) -> Bridges<'s> {
    (
        s.spawn(move || (out.run(stop).expect("bridge out"), out.stats())),
        s.spawn(move || (inbound.run(stop).expect("bridge in"), inbound.stats())),
    )
}

/// Waits for both bridges, which must have seen the stream closed; their counts.
fn join_closed((out_thread, in_thread): Bridges<'_>) -> (OutStats, InStats) {
    let (out_end, out_stats) = out_thread.join().expect("out thread");
    let (in_end, in_stats) = in_thread.join().expect("in thread");
    assert_eq!((out_end, in_end), (End::Closed, End::Closed));
    (out_stats, in_stats)
}

#[test]
fn skip_on_lag_gaps_are_counted_the_same_on_both_sides() {
    const N: u64 = 3_000;
    let mut pair = Pair::new("skip", DeliveryClass::SkipOnLag, (8, 8), 64);
    let stop_flag = AtomicBool::new(false);
    let stop = &stop_flag;
    let (out_stats, in_stats, delivered) = std::thread::scope(|s| {
        let bridges = spawn_bridges(s, pair.out, pair.inbound, stop);
        // A slow far reader: the far ring fills, the receiving bridge waits, Zenoh's blocking
        // congestion control holds the sending bridge, which lags on the origin ring.
        let reader = s.spawn(move || {
            let mut buf = [0u8; 64];
            let mut last = None::<u64>;
            let mut n = 0u64;
            while let Ok(m) = pair.far_reader.recv(&mut buf) {
                let index = u64::from_le_bytes(buf[..8].try_into().expect("8 bytes"));
                assert_eq!(m.meta, [index, !index], "metadata travels with the payload");
                assert!(last.is_none_or(|l| index > l), "{index} after {last:?}");
                last = Some(index);
                n += 1;
                if n % 4 == 0 {
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
            n
        });
        let mut publisher = pair.origin.publisher().expect("publisher");
        assert!(publisher.wait_for_subscribers(1, SECS(20)));
        for i in 0..N {
            let mut loan = i.to_le_bytes().to_vec();
            loan.resize(8 + (i % 56) as usize, 0xA5);
            publisher
                .inner()
                .claim_with(SECS(20), |mut slot| {
                    slot.write(&loan).expect("fits");
                    slot.set_meta([i, !i]);
                    slot.publish()
                })
                .expect("a skip-on-lag bridge never holds the producer back")
                .expect("publish");
        }
        publisher.close();
        let (out_stats, in_stats) = join_closed(bridges);
        (out_stats, in_stats, reader.join().expect("reader"))
    });
    println!("skip: out {out_stats:?}; in {in_stats:?}; far reader {delivered}");
    assert!(
        out_stats.missed > 0,
        "the slow far side made the bridge lag"
    );
    assert_eq!(in_stats.missed, out_stats.missed, "{in_stats:?}");
    assert_eq!(in_stats.missed_upstream, out_stats.missed);
    assert_eq!(in_stats.written + in_stats.missed, N);
    assert_eq!(out_stats.forwarded, in_stats.written);
    assert_eq!(delivered, in_stats.written);
}

/// Runs the receiving bridge until `done` says its counts are complete (or a deadline).
fn pump(inbound: &mut BridgeIn, done: impl Fn(&InStats) -> bool) -> InStats {
    let stop = AtomicBool::new(false);
    let deadline = Instant::now() + SECS(30);
    while !done(&inbound.stats()) {
        assert!(Instant::now() < deadline, "stuck at {:?}", inbound.stats());
        inbound
            .step(Duration::from_millis(50), &stop)
            .expect("the bridge survives garbage");
    }
    inbound.stats()
}

/// A far ring of `slots` 64-byte slots with a gating reader, a receiving bridge into it, and a
/// plain Zenoh publisher on the bridge's key that the bridge matches.
struct RawFeed {
    reader: Subscriber,
    inbound: BridgeIn,
    raw: ring_zenoh::zenoh::pubsub::Publisher<'static>,
    _far: Ring,
    _sessions: (ring_zenoh::zenoh::Session, ring_zenoh::zenoh::Session),
}

impl RawFeed {
    fn new(what: &str, slots: u32) -> Self {
        let far = Ring::memfd()
            .slots(slots)
            .slot_size(64)
            .create()
            .expect("ring");
        let reader = far.subscriber(DeliveryClass::Gating).expect("sub");
        let (a, b) = sessions();
        let key = format!("test/{what}/{}", std::process::id());
        let inbound = BridgeIn::new(&b, &far, &key).expect("bridge in");
        let raw = a.declare_publisher(key).wait().expect("publisher");
        let deadline = Instant::now() + SECS(20);
        while !raw.matching_status().wait().expect("status").matching() {
            assert!(Instant::now() < deadline, "no match");
            std::thread::sleep(Duration::from_millis(10));
        }
        Self {
            reader,
            inbound,
            raw,
            _far: far,
            _sessions: (a, b),
        }
    }
}

#[test]
fn garbage_samples_are_refused_and_counted_never_written() {
    let mut feed = RawFeed::new("garbage", 4);
    let raw = &feed.raw;
    let mut good = Header::data(DeliveryClass::Gating, 5, 0, 0, [11, 22]);
    good.len = 3;
    let mut bad_magic = good.encode();
    bad_magic[0] ^= 0xff;
    let mut bad_version = good.encode();
    bad_version[4] = 9;
    let mut too_large = good;
    too_large.seq = 1;
    too_large.len = 65;
    let mut last = good;
    last.seq = 2;
    let put = |payload: Vec<u8>, attachment: Option<Vec<u8>>| {
        let put = raw.put(payload);
        match attachment {
            Some(a) => put.attachment(a).wait(),
            None => put.wait(),
        }
        .expect("put");
    };
    put(b"abc".to_vec(), None);
    put(b"abc".to_vec(), Some(vec![1, 2, 3]));
    put(b"abc".to_vec(), Some(bad_magic.to_vec()));
    put(b"abc".to_vec(), Some(bad_version.to_vec()));
    put(b"abcd".to_vec(), Some(good.encode().to_vec())); // length mismatch
    put(b"abc".to_vec(), Some(good.encode().to_vec())); // valid: seq 0
    put(vec![0; 65], Some(too_large.encode().to_vec())); // larger than a slot
    put(b"xyz".to_vec(), Some(last.encode().to_vec())); // valid: seq 2
    let s = pump(&mut feed.inbound, |s| {
        s.written + s.rejected + s.too_large >= 8
    });
    assert_eq!(s.rejected, 5, "{s:?}");
    assert_eq!(
        s.last_rejection,
        Some(WireError::PayloadLength {
            header: 3,
            payload: 4
        })
    );
    assert_eq!((s.written, s.too_large, s.missed), (2, 1, 1), "{s:?}");
    let mut buf = [0u8; 64];
    let m = feed.reader.recv(&mut buf).expect("the valid sample");
    assert_eq!((&buf[..m.len], m.meta), (&b"abc"[..], [11, 22]));
    let m = feed.reader.recv(&mut buf).expect("the second valid sample");
    assert_eq!(&buf[..m.len], b"xyz");
    assert!(matches!(
        feed.reader.try_recv(&mut buf),
        Err(TryRecvError::Empty)
    ));
}

/// Message `i` of the batching test: 8..=100 bytes fixed by `i`, starting with `i`.
fn small_message(i: u64) -> Vec<u8> {
    let len = 8 + (i * 37 % 93) as usize;
    let mut m = i.to_le_bytes().to_vec();
    m.extend((8..len).map(|b| (i as usize * 31 + b) as u8));
    m
}

/// Message `i`'s metadata: every third message has some (those go into the far ring one by
/// one), the others none (those go in runs).
fn small_meta(i: u64) -> [u64; 2] {
    if i % 3 == 0 {
        [i, !i]
    } else {
        [0; 2]
    }
}

#[test]
fn gating_small_messages_travel_in_batches_whole_and_in_order() {
    const N: u64 = 4_000;
    let mut pair = Pair::new("batch", DeliveryClass::Gating, (64, 16), 128);
    let mut publisher = pair.origin.publisher().expect("publisher");
    // The bridge's subscriber is registered and not reading yet: the first 64 messages fill
    // the origin ring, so its first step finds them all ready (one batch at least).
    let publish = |publisher: &mut Publisher, i: u64| {
        let msg = small_message(i);
        publisher
            .inner()
            .claim_with(SECS(20), |mut slot| {
                slot.write(&msg).expect("fits");
                slot.set_meta(small_meta(i));
                slot.publish()
            })
            .expect("room within 20 s")
            .expect("publish");
    };
    for i in 0..64 {
        publish(&mut publisher, i);
    }
    let stop_flag = AtomicBool::new(false);
    let stop = &stop_flag;
    let (out_stats, in_stats) = std::thread::scope(|s| {
        let bridges = spawn_bridges(s, pair.out, pair.inbound, stop);
        let reader = s.spawn(move || {
            let mut buf = [0u8; 128];
            let mut next = 0u64;
            while let Ok(m) = pair.far_reader.recv(&mut buf) {
                let index = u64::from_le_bytes(buf[..8].try_into().expect("8 bytes"));
                assert_eq!(index, next, "in order");
                assert_eq!(m.meta, small_meta(next), "metadata intact");
                assert_eq!(
                    &buf[..m.len],
                    &small_message(next)[..],
                    "message {next} whole"
                );
                next += 1;
            }
            next
        });
        for i in 64..N {
            publish(&mut publisher, i);
        }
        publisher.close();
        let (out_stats, in_stats) = join_closed(bridges);
        assert_eq!(
            reader.join().expect("reader"),
            N,
            "the far reader got every message"
        );
        (out_stats, in_stats)
    });
    println!("batch: out {out_stats:?}; in {in_stats:?}");
    assert_eq!((out_stats.forwarded, out_stats.missed), (N, 0));
    assert_eq!((in_stats.received, in_stats.written), (N, N));
    assert_eq!((in_stats.missed, in_stats.rejected), (0, 0), "{in_stats:?}");
    assert!(out_stats.batches >= 1, "{out_stats:?}");
    assert_eq!(in_stats.batches, out_stats.batches);
}

#[test]
fn hostile_batch_samples_are_refused_whole_and_valid_ones_written() {
    use ring_zenoh::wire::{BatchWriter, BATCH_PREFIX_LEN, MAX_BATCH_BYTES};
    let mut feed = RawFeed::new("hostile-batch", 8);
    let raw = &feed.raw;
    let put = |(header, frame): (Header, Vec<u8>)| {
        raw.put(frame)
            .attachment(header.encode().to_vec())
            .wait()
            .expect("put");
    };
    let batch = |first: u64, lens: &[usize]| {
        let mut w = BatchWriter::new(Vec::new());
        for (i, &len) in lens.iter().enumerate() {
            let seq = first + i as u64;
            w.push(seq, 0, [seq, 7], &vec![seq as u8; len])
                .expect("push");
        }
        w.finish(DeliveryClass::Gating, 5, 0)
    };
    // A record whose length runs past the frame's end (a naive reader slices out of bounds).
    let (h, mut past_end) = batch(0, &[3, 3]);
    past_end[BATCH_PREFIX_LEN..BATCH_PREFIX_LEN + 4].copy_from_slice(&u32::MAX.to_le_bytes());
    put((h, past_end));
    // A count of 4 billion records in a 100-byte frame (a naive reader reserves room for them).
    let (h, mut huge_count) = batch(0, &[3, 3]);
    huge_count[..4].copy_from_slice(&u32::MAX.to_le_bytes());
    put((h, huge_count));
    // The frame cut short (the header's length agreeing): the first record would fit.
    let (mut h, mut cut) = batch(0, &[3, 30]);
    cut.truncate(cut.len() - 1);
    h.len -= 1;
    put((h, cut));
    // A batch header that says version 1, and one announcing more than any batch may hold.
    let (h, frame) = batch(0, &[3, 3]);
    let mut v1 = h.encode();
    v1[4] = 1;
    raw.put(frame.clone())
        .attachment(v1.to_vec())
        .wait()
        .expect("put");
    let mut too_long = h;
    too_long.len = (MAX_BATCH_BYTES + 1) as u32;
    put((too_long, frame));
    // Valid: three messages, then a batch with one message too large for the far slots.
    put(batch(0, &[1, 2, 3]));
    put(batch(3, &[65, 4]));
    let s = pump(&mut feed.inbound, |s| {
        s.rejected + s.written + s.too_large >= 10
    });
    println!("hostile batches: {s:?}");
    assert_eq!(s.rejected, 5, "{s:?}");
    assert_eq!((s.written, s.too_large, s.batches), (4, 1, 2), "{s:?}");
    assert_eq!((s.received, s.missed), (5, 1), "{s:?}");
    assert_eq!(s.last_rejection, Some(WireError::Field("len")));
    let mut buf = [0u8; 64];
    for (seq, len) in [(0u64, 1usize), (1, 2), (2, 3), (4, 4)] {
        let m = feed.reader.recv(&mut buf).expect("a valid record");
        assert_eq!((m.len, m.meta), (len, [seq, 7]));
        assert!(buf[..len].iter().all(|&b| b == seq as u8));
    }
    assert!(matches!(
        feed.reader.try_recv(&mut buf),
        Err(TryRecvError::Empty)
    ));
}
