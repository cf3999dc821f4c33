//! The bridge's overhead: the same payloads through raw Zenoh publish/subscribe and through
//! ring → bridge out → Zenoh → bridge in → ring, alternating in one run, over
//! `tcp/127.0.0.1`. Both lossless (blocking congestion control; gating rings).
//!
//! `cargo bench -p ring-zenoh --bench bridge [-- --rounds R]`; prints one table (medians of R
//! rounds, default 3) and the bridge/raw throughput ratio per payload.
#![allow(
    clippy::std_instead_of_core,
    clippy::std_instead_of_alloc,
    missing_docs,
    reason = "bench binary"
)]

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ring_os::prelude::*;
use ring_zenoh::zenoh::qos::CongestionControl;
use ring_zenoh::zenoh::{Session, Wait as _};
use ring_zenoh::{BridgeIn, BridgeOut, ZenohOptions};

struct Case {
    name: &'static str,
    bytes: usize,
    count: u64,
    slots: u32,
}

const CASES: [Case; 2] = [
    Case {
        name: "64 B messages",
        bytes: 64,
        count: 200_000,
        slots: 256,
    },
    Case {
        name: "1920x1080 BGRA frames",
        bytes: 1920 * 1080 * 4,
        count: 150,
        slots: 4,
    },
];

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

fn wait_matched(publisher: &ring_zenoh::zenoh::pubsub::Publisher<'_>) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !publisher
        .matching_status()
        .wait()
        .is_ok_and(|s| s.matching())
    {
        assert!(Instant::now() < deadline, "no subscriber matched");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Raw Zenoh: a publisher puts `count` payloads (a fresh copy each, as the bridge makes one
/// out of the ring), a callback subscriber counts them. Seconds from the first put to the
/// last arrival.
fn raw(a: &Session, b: &Session, key: &str, case: &Case) -> f64 {
    let got = Arc::new(AtomicU64::new(0));
    let _sub = {
        let got = Arc::clone(&got);
        b.declare_subscriber(key.to_owned())
            .callback(move |s| {
                // Release: pairs with the Acquire poll below (a count, nothing else).
                got.fetch_add(u64::from(!s.payload().is_empty()), Ordering::Release);
            })
            .wait()
            .expect("subscriber")
    };
    let publisher = a
        .declare_publisher(key.to_owned())
        .congestion_control(CongestionControl::Block)
        .wait()
        .expect("publisher");
    wait_matched(&publisher);
    let payload = vec![0x5Au8; case.bytes];
    let t0 = Instant::now();
    for _ in 0..case.count {
        publisher.put(payload.clone()).wait().expect("put");
    }
    // Acquire: pairs with the callback's Release increment.
    while got.load(Ordering::Acquire) < case.count {
        assert!(t0.elapsed() < Duration::from_secs(120), "raw run stalled");
        std::thread::yield_now();
    }
    t0.elapsed().as_secs_f64()
}

/// The bridge: a producer thread writes `count` payloads into a gating ring, the two bridges
/// carry them, this thread reads them from the far ring (pinned). Seconds from the first send
/// to the last read.
fn bridged(a: &Session, b: &Session, key: &str, case: &Case) -> f64 {
    let slot = u32::try_from(case.bytes).expect("slot size");
    let origin = Ring::memfd()
        .slots(case.slots)
        .slot_size(slot)
        .create()
        .expect("ring");
    let far = Ring::memfd()
        .slots(case.slots)
        .slot_size(slot)
        .create()
        .expect("ring");
    let mut reader = far
        .subscriber(DeliveryClass::Gating)
        .expect("far subscriber");
    let mut inbound = BridgeIn::new(b, &far, key).expect("bridge in");
    let mut out = BridgeOut::new(a, &origin, key, DeliveryClass::Gating).expect("bridge out");
    assert!(out.wait_matched(Duration::from_secs(20)));
    let stop = AtomicBool::new(false);
    let stop = &stop;
    std::thread::scope(|s| {
        s.spawn(move || out.run(stop).expect("bridge out"));
        s.spawn(move || inbound.run(stop).expect("bridge in"));
        let mut publisher = origin.publisher().expect("publisher");
        assert!(publisher.wait_for_subscribers(1, Duration::from_secs(20)));
        let payload = vec![0x5Au8; case.bytes];
        let t0 = Instant::now();
        s.spawn(move || {
            for _ in 0..case.count {
                publisher.send(&payload).expect("send");
            }
            publisher.close();
        });
        let mut n = 0;
        while n < case.count {
            let m = reader.recv_pinned().expect("far read");
            assert_eq!(m.len(), case.bytes);
            n += 1;
        }
        t0.elapsed().as_secs_f64()
    })
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let mut rounds = 3;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        if arg == "--rounds" {
            rounds = args
                .next()
                .and_then(|r| r.parse().ok())
                .filter(|&r| r > 0)
                .expect("--rounds N");
        }
    }
    let ep = format!("tcp/127.0.0.1:{}", free_port());
    let a = ZenohOptions::new().listen(&ep).open().expect("session a");
    let b = ZenohOptions::new().connect(&ep).open().expect("session b");
    println!(
        "| payload | messages | raw Zenoh (msg/s) | bridge ring→ring (msg/s) | bridge / raw |"
    );
    println!("|---|---|---|---|---|");
    let mut run_id = 0;
    for case in &CASES {
        let (mut raws, mut bridges) = (Vec::new(), Vec::new());
        for _ in 0..rounds {
            run_id += 1;
            let key = format!("bench/{}/{run_id}", std::process::id());
            raws.push(raw(&a, &b, &format!("{key}/raw"), case));
            bridges.push(bridged(&a, &b, &format!("{key}/bridge"), case));
        }
        let (r, br) = (median(raws), median(bridges));
        let rate = |secs: f64| case.count as f64 / secs;
        println!(
            "| {} | {} | {:.0} ({:.0} MB/s) | {:.0} ({:.0} MB/s) | {:.2} |",
            case.name,
            case.count,
            rate(r),
            rate(r) * case.bytes as f64 / 1e6,
            rate(br),
            rate(br) * case.bytes as f64 / 1e6,
            r / br,
        );
    }
}
