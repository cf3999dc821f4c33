//! A tokio service that subscribes to 100 rings with a handful of threads: one task per ring
//! awaits `recv_async`, all woken by the process's one reactor thread; a publisher thread per
//! ten rings feeds them. It checks its own result: every message arrives, in order, with the
//! right checksum, and the process never runs more than the threads it started plus two.
//!
//! ```sh
//! cargo run --release -p ring-os --features async --example async_many
//! ```

use core::time::Duration;
use std::time::Instant;

use ring_os::prelude::*;

const RINGS: usize = 100;
const MESSAGES: u64 = 2_000;
const FEEDERS: usize = 10;

fn threads() -> usize {
    std::fs::read_dir("/proc/self/task").map_or(0, Iterator::count)
}

/// The bytes of message `seq` on ring `ring`.
fn message(ring: usize, seq: u64) -> [u8; 16] {
    let mut m = [0u8; 16];
    m[..8].copy_from_slice(&(ring as u64).to_le_bytes());
    m[8..].copy_from_slice(&seq.to_le_bytes());
    m
}

fn main() -> Result<(), Box<dyn core::error::Error>> {
    let rings: Vec<Ring> = (0..RINGS)
        .map(|_| Ring::memfd().slots(8).slot_size(64).create())
        .collect::<Result<_, _>>()?;
    let subscribers: Vec<Subscriber> = rings
        .iter()
        .map(|r| r.subscriber(DeliveryClass::Gating))
        .collect::<Result<_, _>>()?;
    let mut publishers: Vec<(usize, Publisher)> = rings
        .iter()
        .map(Ring::publisher)
        .enumerate()
        .map(|(i, p)| p.map(|p| (i, p)))
        .collect::<Result<_, _>>()?;
    let before = threads();
    let workers = 2;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .enable_all()
        .build()?;
    let start = Instant::now();
    let tasks: Vec<_> = subscribers
        .into_iter()
        .enumerate()
        .map(|(i, mut s)| {
            rt.spawn(async move {
                let mut buf = [0u8; 64];
                let mut next = 0;
                loop {
                    match s.recv_async(&mut buf).await {
                        Ok(m) => {
                            assert_eq!(buf[..m.len], message(i, next), "ring {i}");
                            next += 1;
                        }
                        Err(RecvError::Disconnected) => return next,
                        Err(e) => panic!("ring {i}: {e}"),
                    }
                }
            })
        })
        .collect();
    // Feeders: each sends to ten rings in turn, blocking when a ring is full (its reader is
    // behind), with a pause now and then so that the readers park and are woken.
    let peak = std::thread::scope(|s| {
        for chunk in publishers.chunks_mut(RINGS / FEEDERS) {
            s.spawn(move || {
                for seq in 0..MESSAGES {
                    for (ring, p) in chunk.iter_mut() {
                        p.send(&message(*ring, seq)).expect("send");
                    }
                    if seq % 100 == 0 {
                        std::thread::sleep(Duration::from_millis(1));
                    }
                }
                for (_, p) in chunk.iter_mut() {
                    p.close();
                }
            });
        }
        // While everything runs: the threads are this `main`, the feeders, the runtime's
        // workers and the one reactor thread (nothing per waiting subscriber).
        let mut peak = 0;
        for _ in 0..20 {
            peak = peak.max(threads());
            std::thread::sleep(Duration::from_millis(5));
        }
        peak
    });
    let mut total = 0;
    for t in tasks {
        let got = rt.block_on(t)?;
        assert_eq!(got, MESSAGES, "a ring lost messages");
        total += got;
    }
    let elapsed = start.elapsed();
    let allowed = before + FEEDERS + workers + 2;
    println!(
        "{total} messages from {RINGS} rings in {elapsed:?} ({:.0} msg/s); threads: {before} \
         before, peak {peak} with {FEEDERS} feeders and {workers} workers (at most {allowed}); \
         reactor on futex_waitv: {}",
        total as f64 / elapsed.as_secs_f64(),
        ring_os::asyncio::uses_futex_waitv()
    );
    assert_eq!(total, RINGS as u64 * MESSAGES);
    assert!(
        peak <= allowed,
        "{peak} threads: more than one per feeder and worker, plus the reactor"
    );
    Ok(())
}
