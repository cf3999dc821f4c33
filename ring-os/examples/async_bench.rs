//! Wake-up latency and 64 B throughput of a subscriber, three ways, in one run:
//! `recv_async` on tokio (woken by the reactor thread), the blocking `recv` on a thread of its
//! own, and the work-around users write today: a blocking thread that `recv`s and forwards
//! into a tokio `mpsc` channel that a task awaits. Prints a markdown table of the medians and
//! the ratios to the blocking `recv` (docs/benchmarks.md).
//!
//! ```sh
//! cargo run --release -p ring-os --features async --example async_bench [-- --quick]
//! ```

use core::time::Duration;
use std::sync::OnceLock;
use std::time::Instant;

use ring_os::prelude::*;

const SIZE: usize = 64;

/// Nanoseconds since the first call: a clock both threads read.
fn now_ns() -> u64 {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    let epoch = *EPOCH.get_or_init(Instant::now);
    u64::try_from(epoch.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Way {
    Async,
    Blocking,
    Mpsc,
}

impl Way {
    fn name(self) -> &'static str {
        match self {
            Self::Async => "`recv_async` on tokio (current-thread runtime)",
            Self::Blocking => "blocking `recv` on its own thread",
            Self::Mpsc => "work-around: blocking `recv` thread → tokio `mpsc` → task",
        }
    }
}

/// The receiving side of `way`: calls `each(bytes)` per message until the ring is closed.
fn receive(way: Way, mut subscriber: Subscriber, mut each: impl FnMut(&[u8]) + Send + 'static) {
    let mut buf = [0u8; SIZE];
    match way {
        Way::Blocking => {
            while let Ok(m) = subscriber.recv(&mut buf) {
                each(&buf[..m.len]);
            }
        }
        Way::Async => {
            let rt = tokio::runtime::Builder::new_current_thread()
                .build()
                .expect("runtime");
            rt.block_on(async {
                while let Ok(m) = subscriber.recv_async(&mut buf).await {
                    each(&buf[..m.len]);
                }
            });
        }
        Way::Mpsc => {
            let (tx, mut rx) = tokio::sync::mpsc::channel::<[u8; SIZE]>(64);
            let forwarder = std::thread::spawn(move || {
                while let Ok(m) = subscriber.recv(&mut buf) {
                    let mut copy = [0u8; SIZE];
                    copy[..m.len].copy_from_slice(&buf[..m.len]);
                    if tx.blocking_send(copy).is_err() {
                        break;
                    }
                }
            });
            let rt = tokio::runtime::Builder::new_current_thread()
                .build()
                .expect("runtime");
            rt.block_on(async {
                while let Some(m) = rx.recv().await {
                    each(&m);
                }
            });
            forwarder.join().expect("forwarder");
        }
    }
}

/// A gating ring of `slots` 64 B slots with its subscriber and publisher.
fn ring(slots: u32) -> (Ring, Subscriber, Publisher) {
    let ring = Ring::memfd()
        .slots(slots)
        .slot_size(SIZE as u32)
        .create()
        .expect("ring");
    let subscriber = ring.subscriber(DeliveryClass::Gating).expect("subscriber");
    let publisher = ring.publisher().expect("publisher");
    (ring, subscriber, publisher)
}

/// Median and 99th percentile of publish → received, with the receiver parked before each
/// message (the publisher pauses 200 µs between messages).
fn latency(way: Way, samples: usize) -> (u64, u64) {
    let (_ring, subscriber, mut publisher) = ring(8);
    let (tx, rx) = std::sync::mpsc::channel();
    let receiver = std::thread::spawn(move || {
        let mut lat = Vec::with_capacity(samples);
        receive(way, subscriber, move |m| {
            let sent = u64::from_le_bytes(m[..8].try_into().expect("8 bytes"));
            lat.push(now_ns().saturating_sub(sent));
            if lat.len() == samples {
                let _ = tx.send(core::mem::take(&mut lat));
            }
        });
    });
    for _ in 0..samples {
        std::thread::sleep(Duration::from_micros(200)); // the receiver parks meanwhile
        let mut m = [0u8; SIZE];
        m[..8].copy_from_slice(&now_ns().to_le_bytes());
        publisher.send(&m).expect("send");
    }
    let mut lat = rx.recv().expect("latencies");
    publisher.close();
    receiver.join().expect("receiver");
    lat.sort_unstable();
    (lat[lat.len() / 2], lat[lat.len() * 99 / 100])
}

/// Messages per second of `n` 64 B messages sent as fast as the ring takes them.
fn throughput(way: Way, n: u64) -> f64 {
    let (_ring, subscriber, mut publisher) = ring(64);
    let (tx, rx) = std::sync::mpsc::channel();
    let receiver = std::thread::spawn(move || {
        let mut count = 0u64;
        let mut sum = 0u64;
        receive(way, subscriber, move |m| {
            sum = sum.wrapping_add(u64::from_le_bytes(m[..8].try_into().expect("8 bytes")));
            count += 1;
            if count == n {
                let _ = tx.send((Instant::now(), sum));
            }
        });
    });
    let start = Instant::now();
    let mut m = [0u8; SIZE];
    for i in 0..n {
        m[..8].copy_from_slice(&i.to_le_bytes());
        publisher.send(&m).expect("send");
    }
    let (end, sum) = rx.recv().expect("done");
    assert_eq!(sum, n * (n - 1) / 2, "{way:?}: messages lost or damaged");
    publisher.close();
    receiver.join().expect("receiver");
    n as f64 / end.duration_since(start).as_secs_f64()
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let (samples, n, rounds) = if quick {
        (200, 20_000, 1)
    } else {
        (2_000, 500_000, 3)
    };
    let ways = [Way::Blocking, Way::Async, Way::Mpsc];
    let mut lat = [
        (Vec::new(), Vec::new()),
        (Vec::new(), Vec::new()),
        (Vec::new(), Vec::new()),
    ];
    let mut tput = [Vec::new(), Vec::new(), Vec::new()];
    // Rounds alternate the ways, so that a slow spell of the machine hits each of them.
    for _ in 0..rounds {
        for (i, &way) in ways.iter().enumerate() {
            let (p50, p99) = latency(way, samples);
            lat[i].0.push(p50);
            lat[i].1.push(p99);
            tput[i].push(throughput(way, n));
        }
    }
    let median_u = |v: &mut Vec<u64>| {
        v.sort_unstable();
        v[v.len() / 2]
    };
    let median_f = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let base_lat = median_u(&mut lat[0].0.clone()) as f64;
    let base_tput = median_f(&mut tput[0].clone());
    println!(
        "reactor on futex_waitv: {}; {samples} wake-ups and {n} messages per way, median of \
         {rounds} rounds",
        ring_os::asyncio::uses_futex_waitv()
    );
    println!();
    println!(
        "| subscriber | wake-up p50 | p99 | p50 vs blocking | 64 B throughput | vs blocking |"
    );
    println!("|---|---|---|---|---|---|");
    for (i, &way) in ways.iter().enumerate() {
        let p50 = median_u(&mut lat[i].0);
        let p99 = median_u(&mut lat[i].1);
        let t = median_f(&mut tput[i]);
        println!(
            "| {} | {:.1} µs | {:.1} µs | {:.2}x | {:.2} M msg/s | {:.2}x |",
            way.name(),
            p50 as f64 / 1e3,
            p99 as f64 / 1e3,
            p50 as f64 / base_lat,
            t / 1e6,
            t / base_tput
        );
    }
}
