//! 100 subscribers waiting at once cost the process at most two extra threads (the reactor's
//! helper, and nothing per wait). Alone in its binary: it counts `/proc/self/task`.
#![cfg(all(feature = "async", target_os = "linux"))]

use core::time::Duration;
use std::time::Instant;

use ring_os::prelude::*;

fn threads() -> usize {
    std::fs::read_dir("/proc/self/task").unwrap().count()
}

#[test]
fn a_hundred_waiting_subscribers_use_at_most_two_extra_threads() {
    const RINGS: usize = 100;
    let rings: Vec<Ring> = (0..RINGS)
        .map(|_| Ring::memfd().slots(4).slot_size(64).create().unwrap())
        .collect();
    let mut publishers: Vec<Publisher> = rings.iter().map(|r| r.publisher().unwrap()).collect();
    let subscribers: Vec<Subscriber> = rings
        .iter()
        .map(|r| r.subscriber(DeliveryClass::Gating).unwrap())
        .collect();
    let before = threads();
    // One thread runs every task: the test's own.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let tasks: Vec<_> = subscribers
            .into_iter()
            .enumerate()
            .map(|(i, mut s)| {
                tokio::spawn(async move {
                    let mut buf = [0u8; 64];
                    let got = s.recv_async(&mut buf).await.unwrap();
                    assert_eq!(&buf[..got.len], format!("ring {i}").as_bytes());
                    i
                })
            })
            .collect();
        let end = Instant::now() + Duration::from_secs(20);
        while ring_os::asyncio::pending_waits() < RINGS {
            assert!(Instant::now() < end, "the subscribers never all waited");
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        // Five liveness periods with nothing published: the reactor checks the publishers
        // itself, so no subscriber is woken (a wake-up per subscriber and period otherwise).
        let woken = ring_os::asyncio::wakeups();
        std::thread::sleep(5 * ring_os::raw::LIVENESS_PERIOD);
        assert_eq!(
            ring_os::asyncio::wakeups() - woken,
            0,
            "idle subscribers were woken"
        );
        assert_eq!(ring_os::asyncio::pending_waits(), RINGS);
        let waiting = threads();
        eprintln!(
            "threads: {before} before, {waiting} with {RINGS} waits pending (futex_waitv: {})",
            ring_os::asyncio::uses_futex_waitv()
        );
        assert!(
            waiting <= before + 2,
            "{RINGS} waits took {} extra threads",
            waiting - before
        );
        // Every one of them is woken by its own ring's message, and only by it.
        for (i, p) in publishers.iter_mut().enumerate().rev() {
            p.send(format!("ring {i}").as_bytes()).unwrap();
        }
        let mut done = Vec::new();
        for t in tasks {
            done.push(t.await.unwrap());
        }
        assert_eq!(done, (0..RINGS).collect::<Vec<_>>());
        assert!(threads() <= before + 2);
        assert_eq!(ring_os::asyncio::pending_waits(), 0);
    });
}
