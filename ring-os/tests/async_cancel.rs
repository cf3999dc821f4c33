//! The async futures' cancel safety: futures dropped at every poll lose no message, leak no pin,
//! hold and waiter count, and leave the subscriber (and publisher) usable; plus wake-ups on a
//! real executor.
#![cfg(feature = "async")]

use core::future::Future;
use core::pin::pin;
use core::task::{Context, Poll, Waker};
use core::time::Duration;
use std::time::Instant;

use ring_core::Memory as _;
use ring_os::prelude::*;

/// A tokio runtime with timers and I/O: `workers` worker threads, or the current thread for 0.
fn runtime(workers: usize) -> tokio::runtime::Runtime {
    let mut b = if workers == 0 {
        tokio::runtime::Builder::new_current_thread()
    } else {
        let mut b = tokio::runtime::Builder::new_multi_thread();
        b.worker_threads(workers);
        b
    };
    b.enable_all().build().unwrap()
}

/// Polls `f` once with a waker that does nothing, then drops it.
fn poll_once<F: Future>(f: F) -> Poll<F::Output> {
    let mut f = pin!(f);
    f.as_mut().poll(&mut Context::from_waker(Waker::noop()))
}

/// The ring's shared waiter accounting: (consumer_waiters, producer_waiting, parked entries).
/// Relaxed loads: values the test compares, read after the operations it checks returned on
/// this thread (or were joined).
fn accounting(ring: &Ring) -> (u32, u32, u32) {
    let m = ring.mapping();
    let line = m.producer_line();
    let parked = (0..m.geometry().consumers())
        .map(|i| {
            m.consumer_entry(i)
                .parked
                .load(core::sync::atomic::Ordering::Relaxed)
        })
        .sum();
    (
        line.consumer_waiters
            .load(core::sync::atomic::Ordering::Relaxed),
        line.producer_waiting
            .load(core::sync::atomic::Ordering::Relaxed),
        parked,
    )
}

/// A memfd ring of `slots` slots of `slot_size` bytes, a `class` subscriber and the publisher.
fn ends(slots: u32, slot_size: u32, class: DeliveryClass) -> (Ring, Subscriber, Publisher) {
    let ring = Ring::memfd()
        .slots(slots)
        .slot_size(slot_size)
        .create()
        .unwrap();
    let subscriber = ring.subscriber(class).unwrap();
    let publisher = ring.publisher().unwrap();
    (ring, subscriber, publisher)
}

/// Asserts that the median of 8 or more wake-up latencies is under 5 ms (a wake-up lost and
/// left to the 20 ms liveness deadline shows as a slow median).
fn assert_quick_median_wake_up(mut lat: Vec<Duration>) {
    lat.sort_unstable();
    assert!(
        lat[4] < Duration::from_millis(5),
        "median wake-up {:?}",
        lat[4]
    );
}

/// A message's bytes: its index, repeated, with a length that varies.
fn message(i: u32) -> Vec<u8> {
    let len = 1 + (i as usize * 7) % 200;
    (0..len).map(|k| (i as usize + k) as u8).collect()
}

/// A checksum over the messages in order (position-dependent, so a lost or repeated message
/// changes it).
fn fold(sum: u64, data: &[u8]) -> u64 {
    data.iter()
        .fold(sum.rotate_left(5) ^ data.len() as u64, |s, &b| {
            s.wrapping_mul(31).wrapping_add(u64::from(b))
        })
}

#[derive(Clone, Copy, Debug)]
enum Read {
    Copy,
    Pinned,
    Held,
}

/// A publisher thread sends `n` messages (blocking sends, so the gating ring holds it back);
/// the subscriber makes a fresh future of `how` for every poll, polls it once and drops it.
fn every_poll_dropped(how: Read) {
    const N: u32 = 3000;
    let (ring, mut subscriber, mut publisher) = ends(4, 256, DeliveryClass::Gating);
    let sent = std::thread::scope(|s| {
        let sender = s.spawn(move || {
            let mut sum = 0;
            for i in 0..N {
                let m = message(i);
                // Bounded: a failing reader must fail the test, not hang it.
                if publisher.send_timeout(&m, Duration::from_secs(10)).is_err() {
                    return 0;
                }
                sum = fold(sum, &m);
                if i % 64 == 0 {
                    std::thread::sleep(Duration::from_micros(200)); // let the reader park
                }
            }
            publisher.close();
            sum
        });
        let (mut sum, mut got, mut pending) = (0, 0u32, 0u64);
        let mut buf = [0u8; 256];
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            assert!(Instant::now() < deadline, "stalled after {got} messages");
            let outcome = match how {
                Read::Copy => match poll_once(subscriber.recv_async(&mut buf)) {
                    Poll::Ready(Ok(c)) => Poll::Ready(Ok(buf[..c.len].to_vec())),
                    Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
                    Poll::Pending => Poll::Pending,
                },
                Read::Pinned => match poll_once(subscriber.recv_pinned_async()) {
                    Poll::Ready(Ok(p)) => Poll::Ready(Ok(p.bytes().to_vec())),
                    Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
                    Poll::Pending => Poll::Pending,
                },
                Read::Held => match poll_once(subscriber.recv_held_async()) {
                    Poll::Ready(Ok(h)) => {
                        let bytes = subscriber.held_bytes(&h).unwrap().to_vec();
                        subscriber.release(h).unwrap();
                        Poll::Ready(Ok(bytes))
                    }
                    Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
                    Poll::Pending => Poll::Pending,
                },
            };
            match outcome {
                Poll::Ready(Ok(data)) => {
                    assert_eq!(data, message(got), "message {got}");
                    sum = fold(sum, &data);
                    got += 1;
                }
                Poll::Ready(Err(RecvError::Disconnected)) => break,
                Poll::Ready(Err(e)) => panic!("{how:?}: {e}"),
                Poll::Pending => pending += 1,
            }
            // Every dropped future gave back what its wait took.
            let (waiters, _, parked) = accounting(&ring);
            assert_eq!((waiters, parked), (0, 0), "a dropped future kept its count");
        }
        assert!(pending > 0, "no future was ever dropped while pending");
        assert_eq!(got, N);
        (sum, sender.join().unwrap())
    });
    assert_eq!(sent.0, sent.1, "checksum of what arrived");
    // No pin or hold left behind, and the subscriber still reads.
    assert_eq!(subscriber.inner().holds(), 0);
    let mut buf = [0u8; 8];
    assert!(matches!(
        subscriber.try_recv(&mut buf),
        Err(TryRecvError::Disconnected)
    ));
}

#[test]
fn recv_async_dropped_at_every_poll_loses_nothing() {
    every_poll_dropped(Read::Copy);
}

#[test]
fn recv_pinned_async_dropped_at_every_poll_loses_nothing() {
    every_poll_dropped(Read::Pinned);
}

#[test]
fn recv_held_async_dropped_at_every_poll_loses_nothing() {
    every_poll_dropped(Read::Held);
}

#[test]
fn send_async_dropped_at_every_poll_sends_each_message_once() {
    const N: u32 = 2000;
    let (ring, mut subscriber, mut publisher) = ends(2, 256, DeliveryClass::Gating);
    let (sent, received) = std::thread::scope(|s| {
        let reader = s.spawn(|| {
            let mut sum = 0;
            let mut n = 0;
            let mut buf = [0u8; 256];
            // Bounded: a failing writer must fail the test, not hang it.
            while let Ok(c) = subscriber.recv_timeout(&mut buf, Duration::from_secs(10)) {
                let data = buf[..c.len].to_vec();
                assert_eq!(data, message(n));
                sum = fold(sum, &data);
                n += 1;
                if n % 50 == 0 {
                    std::thread::sleep(Duration::from_micros(300)); // fill the ring
                }
            }
            (n, sum)
        });
        let (mut i, mut sum, mut pending) = (0, 0, 0u64);
        let deadline = Instant::now() + Duration::from_secs(60);
        while i < N {
            assert!(Instant::now() < deadline, "stalled at {i}");
            let m = message(i);
            match poll_once(publisher.send_async(&m)) {
                Poll::Ready(Ok(seq)) => {
                    assert_eq!(seq, u64::from(i));
                    sum = fold(sum, &m);
                    i += 1;
                }
                Poll::Ready(Err(e)) => panic!("{e}"),
                Poll::Pending => pending += 1,
            }
            let (_, producer_waiting, _) = accounting(&ring);
            assert_eq!(producer_waiting, 0, "a dropped send kept producer_waiting");
        }
        assert!(pending > 0, "the ring was never full");
        publisher.close();
        ((N, sum), reader.join().unwrap())
    });
    assert_eq!(sent, received);
}

#[test]
fn a_send_async_is_woken_by_the_read_that_makes_room() {
    let (ring, mut subscriber, mut publisher) = ends(1, 64, DeliveryClass::Gating);
    let (rt, start) = (runtime(1), Instant::now());
    let task = rt.spawn(async move {
        let mut sent = Vec::new();
        for i in 0..10u8 {
            // The one slot holds the last message until the reader takes it: each send waits.
            publisher.send_async(&[i]).await.unwrap();
            sent.push(start.elapsed());
        }
        publisher.close();
        sent
    });
    let mut read = Vec::new();
    let mut buf = [0u8; 8];
    for i in 0..10u8 {
        std::thread::sleep(Duration::from_millis(5));
        read.push(start.elapsed());
        let m = subscriber
            .recv_timeout(&mut buf, Duration::from_secs(10))
            .unwrap();
        assert_eq!(&buf[..m.len], &[i]);
    }
    let sent = rt.block_on(task).unwrap();
    // The send of message i+1 waited for the read of message i: woken by that read's bump of
    // the drain word, not by the liveness deadline (20 ms).
    let lat: Vec<Duration> = sent[1..]
        .iter()
        .zip(&read)
        .map(|(s, r)| s.saturating_sub(*r))
        .collect();
    assert_quick_median_wake_up(lat);
    assert_eq!(accounting(&ring).1, 0);
}

#[test]
fn loan_async_waits_for_room_and_a_dropped_one_claims_nothing() {
    let ring = Ring::memfd()
        .slots(2)
        .slot_size(64)
        .pin_only(true)
        .create()
        .unwrap();
    let mut subscriber = ring.subscriber(DeliveryClass::Gating).unwrap();
    let mut publisher = ring.publisher().unwrap();
    publisher.send(b"0").unwrap();
    publisher.send(b"1").unwrap();
    // Full: pending, and dropping it leaves the publisher able to send later.
    assert!(poll_once(publisher.loan_async(3)).is_pending());
    assert_eq!(accounting(&ring).1, 0);
    let rt = runtime(0);
    rt.block_on(async {
        let mut buf = [0u8; 64];
        let read = async {
            tokio::time::sleep(Duration::from_millis(30)).await;
            subscriber.recv_async(&mut buf).await.unwrap().len
        };
        let write = async {
            let mut loan = publisher.loan_async(3).await.unwrap();
            loan.bytes().copy_from_slice(b"two");
            loan.send().unwrap()
        };
        let (len, seq) = tokio::join!(read, write);
        assert_eq!((len, seq), (1, 2));
    });
    // A ring that is not pin-only refuses at once, without waiting.
    let plain = Ring::memfd().slots(2).slot_size(64).create().unwrap();
    let mut p = plain.publisher().unwrap();
    assert!(matches!(
        poll_once(p.loan_async(3)),
        Poll::Ready(Err(SendError::Failed(_)))
    ));
}

#[test]
fn a_tokio_task_is_woken_by_a_publish_from_another_thread() {
    let (ring, mut subscriber, mut publisher) = ends(4, 64, DeliveryClass::SkipOnLag);
    let (rt, start) = (runtime(2), Instant::now());
    let task = rt.spawn(async move {
        use futures_core::Stream;
        let mut stream = pin!(subscriber.stream());
        let mut got = Vec::new();
        while let Some(m) = core::future::poll_fn(|cx| stream.as_mut().poll_next(cx)).await {
            got.push((m.unwrap().data[0], start.elapsed()));
        }
        got
    });
    let mut sent = Vec::new();
    for i in 0..9u8 {
        // Each publish finds the task parked (no spinning in the futures): a wake-up each.
        std::thread::sleep(Duration::from_millis(5));
        sent.push(start.elapsed());
        publisher.send(&[i]).unwrap();
    }
    publisher.close();
    let got = rt.block_on(task).unwrap();
    assert_eq!(
        got.iter().map(|g| g.0).collect::<Vec<_>>(),
        (0..9).collect::<Vec<_>>()
    );
    // Woken by the publish itself, not by the liveness deadline (20 ms after the wait began,
    // some 15 ms after the publish): a lost wake-up shows as a slow median.
    let lat: Vec<Duration> = got.iter().zip(&sent).map(|(g, s)| g.1 - *s).collect();
    assert_quick_median_wake_up(lat);
    assert_eq!(accounting(&ring).0, 0);
}

#[test]
fn the_sink_sends_everything_and_closing_it_completes_the_stream() {
    let (_ring, mut subscriber, mut publisher) = ends(2, 64, DeliveryClass::Gating);
    let rt = runtime(0);
    rt.block_on(async {
        use futures_sink::Sink;
        let write = async {
            let mut sink = pin!(publisher.sink::<Vec<u8>>());
            for i in 0..100u8 {
                core::future::poll_fn(|cx| sink.as_mut().poll_ready(cx))
                    .await
                    .unwrap();
                sink.as_mut().start_send(vec![i; 3]).unwrap();
            }
            core::future::poll_fn(|cx| sink.as_mut().poll_close(cx))
                .await
                .unwrap();
        };
        let read = async {
            use futures_core::Stream;
            let mut stream = pin!(subscriber.stream());
            let mut n = 0u8;
            while let Some(m) = core::future::poll_fn(|cx| stream.as_mut().poll_next(cx)).await {
                assert_eq!(m.unwrap().data, vec![n; 3]);
                n += 1;
            }
            n
        };
        let ((), n) = tokio::join!(write, read);
        assert_eq!(
            n, 100,
            "a 2-slot ring: the sink waited for the stream 98 times"
        );
    });
}

#[test]
fn group_members_awaiting_recv_async_share_the_stream_each_message_once() {
    const N: u32 = 3000;
    let ring = Ring::memfd().slots(4).slot_size(256).create().unwrap();
    let mut publisher = ring.publisher().unwrap();
    publisher.create_group("workers").unwrap();
    let members: Vec<Subscriber> = (0..3)
        .map(|_| ring.join_group("workers").unwrap())
        .collect();
    let rt = runtime(2);
    let tasks: Vec<_> = members
        .into_iter()
        .map(|mut m| {
            rt.spawn(async move {
                let mut buf = [0u8; 256];
                let mut got = Vec::new();
                loop {
                    match m.recv_async(&mut buf).await {
                        Ok(c) => {
                            assert_eq!(buf[..c.len], message(c.seq as u32)[..]);
                            got.push(c.seq);
                        }
                        Err(RecvError::Disconnected) => return got,
                        Err(e) => panic!("{e}"),
                    }
                }
            })
        })
        .collect();
    for i in 0..N {
        publisher
            .send_timeout(&message(i), Duration::from_secs(10))
            .unwrap();
        if i % 100 == 0 {
            std::thread::sleep(Duration::from_micros(500)); // let the members park
        }
    }
    publisher.close();
    let mut all: Vec<u64> = tasks
        .into_iter()
        .flat_map(|t| rt.block_on(t).unwrap())
        .collect();
    all.sort_unstable();
    assert_eq!(
        all,
        (0..u64::from(N)).collect::<Vec<_>>(),
        "each message once"
    );
}

#[test]
fn a_late_skip_on_lag_subscriber_awaits_its_history_first() {
    let ring = Ring::memfd().slots(8).slot_size(64).create().unwrap();
    let mut publisher = ring.publisher().unwrap();
    for i in 0..5u8 {
        publisher.send(&[i]).unwrap();
    }
    let mut late = ring.subscriber(DeliveryClass::SkipOnLag).unwrap();
    assert_eq!(late.rewind(3).unwrap(), 3);
    let mut buf = [0u8; 64];
    let mut got = Vec::new();
    for _ in 0..3 {
        match poll_once(late.recv_async(&mut buf)) {
            Poll::Ready(Ok(c)) => got.push(buf[..c.len][0]),
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(got, [2, 3, 4]);
    assert!(poll_once(late.recv_async(&mut buf)).is_pending());
}
