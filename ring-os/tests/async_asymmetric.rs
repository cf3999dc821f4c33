//! A ring marked for asymmetric fences under the async waits: a publisher task that keeps
//! filling a 4-slot ring (its `send_async` parks whenever the ring is full) and a subscriber
//! task that reads every message (`recv_async` parks whenever it is empty), on two runtime
//! threads. Both parks run the heavy fence (`membarrier`) against the other side's compiler
//! fences; a lost wake-up would leave a task asleep and fail the test's deadline.
#![cfg(all(feature = "async", target_os = "linux"))]

use core::time::Duration;

use ring_os::prelude::*;

#[test]
fn async_parks_on_a_ring_marked_for_asymmetric_fences_lose_no_wake_up() {
    const MESSAGES: u64 = 5000;
    let ring = Ring::memfd()
        .slots(4)
        .slot_size(64)
        .asymmetric_fences(true)
        .create()
        .unwrap();
    let mut publisher = ring.publisher().unwrap();
    let mut subscriber = ring.subscriber(DeliveryClass::Gating).unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let send = tokio::spawn(async move {
            for i in 0..MESSAGES {
                publisher.send_async(&i.to_le_bytes()).await.unwrap();
            }
            publisher
        });
        let recv = tokio::spawn(async move {
            let mut buf = [0u8; 64];
            for i in 0..MESSAGES {
                let got = subscriber.recv_async(&mut buf).await.unwrap();
                assert_eq!(&buf[..got.len], &i.to_le_bytes(), "message {i}");
            }
        });
        let both = async {
            let publisher = send.await.unwrap();
            recv.await.unwrap();
            publisher
        };
        tokio::time::timeout(Duration::from_secs(30), both)
            .await
            .expect("5000 messages within 30 s");
    });
}
