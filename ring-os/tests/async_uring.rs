//! `asyncio::Driver` (io_uring futex waits, Linux >= 6.7): futures on a tokio runtime whose
//! event loop polls the driver's fd are woken through it, messages and the ending arrive, and
//! the reactor's helper thread delivers none of the wake-ups. Skips, saying why, where io_uring
//! or its futex wait is unavailable.
#![cfg(all(feature = "async", target_os = "linux"))]

use core::time::Duration;

use ring_os::asyncio::Driver;
use ring_os::prelude::*;

#[path = "support/tokio_driver.rs"]
mod tokio_driver;

fn spawn_driver(driver: Driver) {
    tokio_driver::drive_on_tokio(driver).expect("AsyncFd");
}

#[test]
fn a_publish_through_another_mapping_wakes_the_runtime_through_the_driver() {
    let probe = match Driver::new() {
        Ok(d) => d,
        Err(e) => {
            println!("skipped: no io_uring driver here: {e}");
            return;
        }
    };
    let before = (probe.wakeups(), ring_os::asyncio::wakeups());
    drop(probe);
    let path = std::env::temp_dir().join(format!("async-uring-{}.ring", std::process::id()));
    let ring = Ring::file(&path).slots(8).slot_size(64).create().unwrap();
    let mut subscriber = ring.subscriber(DeliveryClass::Gating).unwrap();
    // A second mapping of the same file: its publishes wake no future of this process by
    // address (the in-process shortcut), only through the futex, as another process's would.
    let other = Ring::file(&path).open().unwrap();
    let mut publisher = other.publisher().unwrap();
    const N: u64 = 200;
    let sender = std::thread::spawn(move || {
        for i in 0..N {
            std::thread::sleep(Duration::from_micros(300)); // the future parks meanwhile
            publisher.send(&i.to_le_bytes()).unwrap();
        }
        publisher.close();
    });
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .build()
        .unwrap();
    let (sum, count, wakeups) = rt.block_on(async {
        let driver = Driver::new().unwrap();
        let counter = Driver::new().unwrap();
        spawn_driver(driver);
        let mut buf = [0u8; 64];
        let (mut sum, mut count) = (0u64, 0u64);
        let read = async {
            loop {
                match subscriber.recv_async(&mut buf).await {
                    Ok(m) => {
                        sum += u64::from_le_bytes(buf[..m.len].try_into().unwrap());
                        count += 1;
                    }
                    Err(e) => break e,
                }
            }
        };
        let end = tokio::time::timeout(Duration::from_secs(30), read)
            .await
            .expect("the messages or the ending never arrived");
        assert_eq!(end, RecvError::Disconnected, "the close");
        (sum, count, counter.wakeups())
    });
    sender.join().unwrap();
    let _ = std::fs::remove_file(&path);
    assert_eq!(
        (count, sum),
        (N, N * (N - 1) / 2),
        "messages lost or damaged"
    );
    let through_driver = wakeups - before.0;
    let all = ring_os::asyncio::wakeups() - before.1;
    eprintln!("{all} wake-ups, {through_driver} through the driver");
    // The helper takes an armed wait only at its deadline (20 ms: a stall of this loaded
    // machine), so nearly all go through the driver (the unit test
    // `a_driver_wakes_on_its_own_thread_without_the_helper` checks the thread of each).
    assert!(
        through_driver > N / 2 && through_driver * 10 >= all * 9,
        "{through_driver} of {all} wake-ups through the driver"
    );
}

#[test]
fn a_segment_truncated_under_a_wait_armed_in_the_driver_ends_the_future_without_a_signal() {
    if let Err(e) = Driver::new() {
        println!("skipped: no io_uring driver here: {e}");
        return;
    }
    let path = std::env::temp_dir().join(format!("async-uring-cut-{}.ring", std::process::id()));
    let ring = Ring::file(&path).slots(8).slot_size(64).create().unwrap();
    let mut subscriber = ring.subscriber(DeliveryClass::Gating).unwrap();
    // The producer stays alive and silent: only the cut can end the wait.
    let _publisher = ring.publisher().unwrap();
    // Another thread cuts the file while the runtime's one future is parked, its wait armed in
    // the driver's io_uring: nothing polls the future again unless a wake-up comes.
    let cut_path = path.clone();
    let cutter = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(300));
        let file = std::fs::OpenOptions::new()
            .write(true)
            .open(&cut_path)
            .unwrap();
        file.set_len(0).unwrap();
        std::time::Instant::now()
    });
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .build()
        .unwrap();
    let (end, ended) = rt.block_on(async move {
        spawn_driver(Driver::new().unwrap());
        let mut buf = [0u8; 64];
        let end = tokio::time::timeout(Duration::from_secs(10), subscriber.recv_async(&mut buf))
            .await
            .expect("the cut never ended the wait");
        (end, std::time::Instant::now())
    });
    let cut = cutter.join().unwrap();
    let _ = std::fs::remove_file(&path);
    assert!(ended > cut, "the read ended before the cut: {end:?}");
    assert!(
        matches!(end, Err(RecvError::Failed(ReadError::Corrupt(why))) if why == ring_os::raw::TRUNCATED),
        "{end:?}"
    );
    // The helper keeps every armed wait's liveness deadline (20 ms), which sees the cut; 3 s
    // leaves room for a loaded machine (without the check it ends only at the 10 s bound).
    let after = ended - cut;
    eprintln!("the cut ended the armed wait after {after:?}");
    assert!(
        after < Duration::from_secs(3),
        "the cut ended the wait only after {after:?}"
    );
}
