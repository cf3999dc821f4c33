//! Endings reach every waiting future as the error the blocking `recv` returns for them: an
//! abort with a code, and a publisher whose process was killed.
#![cfg(all(feature = "async", unix))]

use core::sync::atomic::{AtomicUsize, Ordering};
use core::time::Duration;
use std::process::{Command, Stdio};
use std::time::Instant;

use ring_core::ReadError;
use ring_os::prelude::*;

/// Subscribers of every class on `ring`, waiting in tokio tasks once each read the first
/// message; returns their tasks after they all wait, and what a blocking subscriber got.
/// With `driver`, the runtime also polls an `asyncio::Driver` (io_uring futex waits, Linux):
/// `false` where none can be made here (the caller skips).
fn all_fail_alike(
    ring: &Ring,
    first: impl FnOnce(),
    end: impl FnOnce(),
    driver: bool,
) -> Option<(Vec<RecvError>, RecvError)> {
    const PER_CLASS: usize = 3;
    let classes = [
        DeliveryClass::Gating,
        DeliveryClass::LatestOnly,
        DeliveryClass::SkipOnLag,
    ];
    let subscribers: Vec<Subscriber> = classes
        .iter()
        .flat_map(|&c| (0..PER_CLASS).map(move |_| c))
        .map(|c| ring.subscriber(c).unwrap())
        .collect();
    let n = subscribers.len();
    let mut blocking = ring.subscriber(DeliveryClass::Gating).unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    if driver && !spawn_driver(&rt) {
        return None;
    }
    let firsts = std::sync::Arc::new(AtomicUsize::new(0));
    let tasks: Vec<_> = subscribers
        .into_iter()
        .map(|mut s| {
            let firsts = std::sync::Arc::clone(&firsts);
            rt.spawn(async move {
                let mut buf = [0u8; 64];
                let got = s.recv_async(&mut buf).await.unwrap();
                assert_eq!(&buf[..got.len], b"first");
                // Relaxed: a count the test polls, nothing else is published through it.
                firsts.fetch_add(1, Ordering::Relaxed);
                s.recv_async(&mut buf).await.unwrap_err()
            })
        })
        .collect();
    first();
    let (tx, blocked) = std::sync::mpsc::channel();
    let blocking_firsts = std::sync::Arc::clone(&firsts);
    std::thread::spawn(move || {
        let mut buf = [0u8; 64];
        blocking.recv(&mut buf).unwrap();
        // Relaxed: as above.
        blocking_firsts.fetch_add(1, Ordering::Relaxed);
        let _ = tx.send(blocking.recv(&mut buf).unwrap_err());
    });
    // Every reader read "first", and every task waits again (its first wait may still be
    // counted a moment after it was woken: wait for the "first"s before counting waits).
    let deadline = Instant::now() + Duration::from_secs(20);
    // Relaxed: as above.
    while firsts.load(Ordering::Relaxed) < n + 1 || ring_os::asyncio::pending_waits() < n {
        assert!(Instant::now() < deadline, "the futures never all waited");
        std::thread::sleep(Duration::from_millis(2));
    }
    let t = Instant::now();
    end();
    let bound = Duration::from_secs(10);
    let errors: Vec<RecvError> = tasks
        .into_iter()
        .map(|task| {
            rt.block_on(async { tokio::time::timeout(bound, task).await })
                .expect("a waiting future never saw the end")
                .unwrap()
        })
        .collect();
    eprintln!("{n} futures ended {:?} after the end", t.elapsed());
    let blocking = blocked
        .recv_timeout(bound)
        .expect("the blocking recv never saw the end");
    Some((errors, blocking))
}

/// Polls an `asyncio::Driver` on `rt`; false (saying why) where none can be made.
#[cfg(target_os = "linux")]
fn spawn_driver(rt: &tokio::runtime::Runtime) -> bool {
    let driver = match ring_os::asyncio::Driver::new() {
        Ok(d) => d,
        Err(e) => {
            println!("skipped: no io_uring driver here: {e}");
            return false;
        }
    };
    let _in = rt.enter();
    tokio_driver::drive_on_tokio(driver).expect("AsyncFd");
    true
}

#[cfg(target_os = "linux")]
#[path = "support/tokio_driver.rs"]
mod tokio_driver;

#[cfg(not(target_os = "linux"))]
fn spawn_driver(_rt: &tokio::runtime::Runtime) -> bool {
    println!("skipped: io_uring drivers are Linux only");
    false
}

#[test]
fn an_abort_reaches_every_waiting_future_with_its_code() {
    let ring = Ring::memfd()
        .slots(4)
        .slot_size(64)
        .consumers(16)
        .create()
        .unwrap();
    let mut publisher = ring.publisher().unwrap();
    let publisher = std::sync::Mutex::new(&mut publisher);
    let (errors, blocking) = all_fail_alike(
        &ring,
        || {
            publisher.lock().unwrap().send(b"first").unwrap();
        },
        || publisher.lock().unwrap().abort(300),
        false,
    )
    .unwrap();
    let want = RecvError::Failed(ReadError::Aborted { code: 300 });
    assert_eq!(blocking, want, "the blocking recv");
    assert!(errors.iter().all(|e| *e == want), "{errors:?}");
}

const CHILD: &str = "SHMRING_ASYNC_TEST_PUBLISHER";

/// Not a test on its own: the child process of the test below (it does nothing unless that
/// test started it). Opens the ring, publishes "first", then waits to be killed.
#[test]
fn child_publisher() {
    let Some(name) = std::env::var_os(CHILD) else {
        return;
    };
    let ring = Ring::builder(name.to_str().unwrap()).open().unwrap();
    let mut publisher = ring.publisher().unwrap();
    // Wait for the parent's subscribers (all registered before this process started).
    assert!(publisher.wait_for_subscribers(10, Duration::from_secs(20)));
    publisher.send(b"first").unwrap();
    std::thread::sleep(Duration::from_secs(60));
}

#[test]
fn a_killed_publisher_reaches_every_waiting_future_as_disconnected() {
    killed_publisher(false);
}

#[test]
fn a_killed_publisher_reaches_futures_waiting_through_a_driver() {
    killed_publisher(true);
}

/// The publisher's process, killed while the futures wait (with `driver`: armed in the
/// io_uring of an `asyncio::Driver` that the runtime polls).
fn killed_publisher(driver: bool) {
    let name = format!("async-ends-{}-{driver}", std::process::id());
    let ring = Ring::builder(&name)
        .slots(4)
        .slot_size(64)
        .consumers(16)
        .create()
        .unwrap();
    /// Kills the child also when the test fails before it does.
    struct Child(std::process::Child);
    impl Drop for Child {
        fn drop(&mut self) {
            let _ = self.0.kill(); // SIGKILL: no destructor runs, the ring is not closed
            let _ = self.0.wait();
        }
    }
    let child = core::cell::RefCell::new(None);
    let Some((errors, blocking)) = all_fail_alike(
        &ring,
        || {
            *child.borrow_mut() = Some(Child(
                Command::new(std::env::current_exe().unwrap())
                    .args(["--exact", "child_publisher", "--nocapture"])
                    .env(CHILD, &name)
                    .stdout(Stdio::null())
                    .spawn()
                    .unwrap(),
            ));
        },
        || drop(child.borrow_mut().take()),
        driver,
    ) else {
        return;
    };
    assert_eq!(blocking, RecvError::Disconnected, "the blocking recv");
    assert!(
        errors.iter().all(|e| *e == RecvError::Disconnected),
        "{errors:?}"
    );
}
