//! ring-zenoh in one process over `tcp/127.0.0.1`: skip-on-lag accounting on both sides, and a
//! receiving bridge fed garbage by a plain Zenoh publisher.
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
use ring_zenoh::{BridgeIn, BridgeOut, End, InStats, ZenohOptions};

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

#[test]
fn skip_on_lag_gaps_are_counted_the_same_on_both_sides() {
    const N: u64 = 3_000;
    let origin = Ring::memfd().slots(8).slot_size(64).create().expect("ring");
    let far = Ring::memfd().slots(8).slot_size(64).create().expect("ring");
    let (a, b) = sessions();
    let key = format!("test/skip/{}", std::process::id());
    let mut far_reader = far.subscriber(DeliveryClass::Gating).expect("far sub");
    let mut inbound = BridgeIn::new(&b, &far, &key).expect("bridge in");
    let mut out = BridgeOut::new(&a, &origin, &key, DeliveryClass::SkipOnLag).expect("out");
    assert!(out.wait_matched(SECS(20)));
    let stop_flag = AtomicBool::new(false);
    let stop = &stop_flag;
    let (out_stats, in_stats, delivered) = std::thread::scope(|s| {
        let out_thread = s.spawn(move || {
            let end = out.run(stop).expect("bridge out");
            (end, out.stats())
        });
        let in_thread = s.spawn(move || {
            let end = inbound.run(stop).expect("bridge in");
            (end, inbound.stats())
        });
        // A slow far reader: the far ring fills, the receiving bridge waits, Zenoh's blocking
        // congestion control holds the sending bridge, which lags on the origin ring.
        let reader = s.spawn(move || {
            let mut buf = [0u8; 64];
            let mut last = None::<u64>;
            let mut n = 0u64;
            while let Ok(m) = far_reader.recv(&mut buf) {
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
        let mut publisher = origin.publisher().expect("publisher");
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
        let (out_end, out_stats) = out_thread.join().expect("out thread");
        let (in_end, in_stats) = in_thread.join().expect("in thread");
        assert_eq!((out_end, in_end), (End::Closed, End::Closed));
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

#[test]
fn garbage_samples_are_refused_and_counted_never_written() {
    let far = Ring::memfd().slots(4).slot_size(64).create().expect("ring");
    let mut reader = far.subscriber(DeliveryClass::Gating).expect("sub");
    let (a, b) = sessions();
    let key = format!("test/garbage/{}", std::process::id());
    let mut inbound = BridgeIn::new(&b, &far, &key).expect("bridge in");
    let raw = a.declare_publisher(key.clone()).wait().expect("publisher");
    let deadline = Instant::now() + SECS(20);
    while !raw.matching_status().wait().expect("status").matching() {
        assert!(Instant::now() < deadline, "no match");
        std::thread::sleep(Duration::from_millis(10));
    }
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
    let s = pump(&mut inbound, |s| s.written + s.rejected + s.too_large >= 8);
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
    let m = reader.recv(&mut buf).expect("the valid sample");
    assert_eq!((&buf[..m.len], m.meta), (&b"abc"[..], [11, 22]));
    let m = reader.recv(&mut buf).expect("the second valid sample");
    assert_eq!(&buf[..m.len], b"xyz");
    assert!(matches!(
        reader.try_recv(&mut buf),
        Err(TryRecvError::Empty)
    ));
}
