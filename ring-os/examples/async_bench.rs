//! Wake-up latency and 64 B throughput of a subscriber, six ways, in one run: `recv_async` on
//! tokio's current-thread runtime and on its multi-thread runtime (a spawned task), each also
//! with an `asyncio::Driver` (io_uring futex waits, its fd in tokio's `AsyncFd`: the runtime's
//! thread woken by the kernel, Linux >= 6.7), the blocking `recv` on a thread of its own, and the
//! work-around users write today: a blocking thread that `recv`s and forwards into a tokio
//! `mpsc` channel that a task awaits. Wake-ups are
//! measured twice: with the publisher in this process (where a publish wakes this process's
//! futures itself) and in another process (this program run with `--publish`: the futures are
//! woken through the reactor thread). Prints a markdown table of the medians and the ratios to
//! the blocking `recv` (docs/benchmarks.md).
//!
//! ```sh
//! cargo run --release -p ring-os --features async --example async_bench [-- --quick] [--cross]
//! ```

use core::time::Duration;
use std::path::Path;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use ring_os::prelude::*;

const SIZE: usize = 64;

/// Nanoseconds of the system clock: one clock for the threads of this process and for the
/// publisher process of the cross-process rounds.
fn now_ns() -> u64 {
    let since = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    u64::try_from(since.as_nanos()).unwrap_or(u64::MAX)
}

/// Publishes `samples` stamped messages, each after a pause long enough for every receiver to
/// park, then closes the ring.
fn publish_stamped(publisher: &mut Publisher, samples: usize) {
    for _ in 0..samples {
        std::thread::sleep(Duration::from_micros(200)); // the receiver parks meanwhile
        let mut m = [0u8; SIZE];
        m[..8].copy_from_slice(&now_ns().to_le_bytes());
        publisher.send(&m).expect("send");
    }
    publisher.close();
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Way {
    Async,
    AsyncMulti,
    Uring,
    UringMulti,
    Blocking,
    Mpsc,
}

impl Way {
    fn name(self) -> &'static str {
        match self {
            Self::Async => "`recv_async` on tokio (current-thread runtime)",
            Self::AsyncMulti => "`recv_async` on tokio (multi-thread runtime, a spawned task)",
            Self::Uring => "`recv_async` + io_uring `Driver` (current-thread runtime)",
            Self::UringMulti => "`recv_async` + io_uring `Driver` (multi-thread runtime)",
            Self::Blocking => "blocking `recv` on its own thread",
            Self::Mpsc => "work-around: blocking `recv` thread → tokio `mpsc` → task",
        }
    }
}

/// Runs `asyncio::Driver` on the current tokio runtime: its io_uring fd in tokio's epoll, the
/// completions reaped (and the futures woken) on the runtime's thread. `false`: no io_uring
/// futex wait here (the futures keep the reactor thread).
#[cfg(target_os = "linux")]
fn spawn_driver() -> bool {
    let driver = match ring_os::asyncio::Driver::new() {
        Ok(d) => d,
        Err(e) => {
            eprintln!("no io_uring driver: {e}");
            return false;
        }
    };
    tokio_driver::drive_on_tokio(driver).is_ok()
}

#[cfg(target_os = "linux")]
#[path = "../tests/support/tokio_driver.rs"]
mod tokio_driver;

#[cfg(not(target_os = "linux"))]
fn spawn_driver() -> bool {
    false
}

/// Whether the io_uring driver's ways can run here.
fn uring_available() -> bool {
    #[cfg(target_os = "linux")]
    return ring_os::asyncio::Driver::new().is_ok();
    #[cfg(not(target_os = "linux"))]
    false
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
        Way::Async | Way::AsyncMulti | Way::Uring | Way::UringMulti => {
            let multi = matches!(way, Way::AsyncMulti | Way::UringMulti);
            let driver = matches!(way, Way::Uring | Way::UringMulti);
            let mut builder = if multi {
                let mut b = tokio::runtime::Builder::new_multi_thread();
                b.worker_threads(2);
                b
            } else {
                tokio::runtime::Builder::new_current_thread()
            };
            if driver {
                builder.enable_io(); // the driver's fd in tokio's epoll
            }
            let rt = builder.build().expect("runtime");
            let body = async move {
                if driver {
                    spawn_driver();
                }
                while let Ok(m) = subscriber.recv_async(&mut buf).await {
                    each(&buf[..m.len]);
                }
            };
            if multi {
                // The task runs on a worker thread (`block_on`'s own future would run on this
                // one).
                let task = rt.spawn(body);
                rt.block_on(task).expect("task");
            } else {
                rt.block_on(body);
            }
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
/// message (the publisher pauses 200 µs between messages). `cross`: the publisher is another
/// process (this program run with `--publish`), so no shortcut within the process applies.
fn latency(way: Way, samples: usize, cross: bool) -> (u64, u64) {
    let path = std::env::temp_dir().join(format!("async-bench-{}.ring", std::process::id()));
    let (ring, subscriber, publisher) = if cross {
        let ring = Ring::file(&path)
            .slots(8)
            .slot_size(SIZE as u32)
            .create()
            .expect("ring");
        let subscriber = ring.subscriber(DeliveryClass::Gating).expect("subscriber");
        (ring, subscriber, None)
    } else {
        let (ring, subscriber, publisher) = ring(8);
        (ring, subscriber, Some(publisher))
    };
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
    if let Some(mut publisher) = publisher {
        publish_stamped(&mut publisher, samples);
    } else {
        let status = std::process::Command::new(std::env::current_exe().expect("this program"))
            .arg("--publish")
            .arg(&path)
            .arg(samples.to_string())
            .status()
            .expect("publisher process");
        assert!(status.success(), "the publisher process failed: {status}");
    }
    let mut lat = rx.recv().expect("latencies");
    receiver.join().expect("receiver");
    drop(ring);
    let _ = std::fs::remove_file(&path);
    lat.sort_unstable();
    (lat[lat.len() / 2], lat[lat.len() * 99 / 100])
}

/// The cross-process rounds' publisher: opens the ring at `path` and publishes into it.
fn publisher_process(path: &Path, samples: usize) {
    let ring = Ring::file(path).open().expect("open the ring");
    let mut publisher = ring.publisher().expect("publisher");
    publish_stamped(&mut publisher, samples);
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
    let args: Vec<String> = std::env::args().collect();
    if let [_, flag, path, samples] = &args[..] {
        if flag == "--publish" {
            publisher_process(Path::new(path), samples.parse().expect("samples"));
            return;
        }
    }
    let quick = args.iter().any(|a| a == "--quick");
    let (samples, n, rounds) = if quick {
        (200, 20_000, 1)
    } else {
        (2_000, 500_000, 3)
    };
    let only_cross = args.iter().any(|a| a == "--cross");
    let uring = uring_available();
    let mut ways = vec![Way::Blocking, Way::Async, Way::AsyncMulti];
    if uring {
        ways.extend([Way::Uring, Way::UringMulti]);
    }
    ways.push(Way::Mpsc);
    // Per way: in-process p50s and p99s, cross-process p50s and p99s, throughputs.
    let mut lat: Vec<[Vec<u64>; 4]> = vec![Default::default(); ways.len()];
    let mut tput: Vec<Vec<f64>> = vec![Vec::new(); ways.len()];
    // Rounds alternate the ways, so that a slow spell of the machine hits each of them.
    for _ in 0..rounds {
        for (i, &way) in ways.iter().enumerate() {
            // `--cross`: the cross-process wake-ups only (the other columns repeat them).
            let (p50, p99) = if only_cross {
                (1, 1)
            } else {
                latency(way, samples, false)
            };
            lat[i][0].push(p50);
            lat[i][1].push(p99);
            let (p50, p99) = latency(way, samples, true);
            lat[i][2].push(p50);
            lat[i][3].push(p99);
            tput[i].push(if only_cross { 1.0 } else { throughput(way, n) });
        }
    }
    let median_u = |v: &[u64]| {
        let mut v = v.to_vec();
        v.sort_unstable();
        v[v.len() / 2]
    };
    let median_f = |v: &[f64]| {
        let mut v = v.to_vec();
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let base_in = median_u(&lat[0][0]) as f64;
    let base_cross = median_u(&lat[0][2]) as f64;
    let base_tput = median_f(&tput[0]);
    println!(
        "reactor on futex_waitv: {}; io_uring driver: {uring}; {samples} wake-ups per way and \
         place, {n} messages per way, median of {rounds} rounds",
        ring_os::asyncio::uses_futex_waitv()
    );
    println!();
    println!(
        "| subscriber | wake-up p50 (publisher in this process) | p99 | vs blocking | \
         wake-up p50 (publisher in another process) | p99 | vs blocking | 64 B throughput | \
         vs blocking |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    let us = |ns: u64| ns as f64 / 1e3;
    for (i, &way) in ways.iter().enumerate() {
        let (p50, p99) = (median_u(&lat[i][0]), median_u(&lat[i][1]));
        let (x50, x99) = (median_u(&lat[i][2]), median_u(&lat[i][3]));
        let t = median_f(&tput[i]);
        println!(
            "| {} | {:.1} µs | {:.1} µs | {:.2}x | {:.1} µs | {:.1} µs | {:.2}x | {:.2} M msg/s | \
             {:.2}x |",
            way.name(),
            us(p50),
            us(p99),
            p50 as f64 / base_in,
            us(x50),
            us(x99),
            x50 as f64 / base_cross,
            t / 1e6,
            t / base_tput
        );
    }
}
