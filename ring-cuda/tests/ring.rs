//! The device ring over emulated devices, in one process: threads stand in for processes, and
//! each peer has its own device, so every handle is exported and opened as between processes.
//! The cross-process run is in `tests/pipeline.rs`.
//!
//! Mutation check: built with `--cfg ring_mutant="cuda_skip_read_waits"` (the producer stops
//! waiting for the consumers' read events) or `--cfg ring_mutant="cuda_skip_write_wait"` (a
//! consumer stops waiting for the write event), `slow_peers_never_tear` must fail.
#![allow(clippy::std_instead_of_core, reason = "std test")]

use std::time::Duration;

use ring_cuda::{conformance, EmulatedDevice, EmulatedOptions};

/// A device for an in-process ring: threads stand in for processes, so same-process IPC
/// opens (which CUDA and the default emulation refuse) are allowed explicitly. The
/// cross-process runs with the strict default are in `tests/pipeline.rs`.
fn inproc() -> EmulatedDevice {
    EmulatedDevice::with_options(EmulatedOptions::in_process())
}

fn delayed(ms: u64) -> EmulatedDevice {
    EmulatedDevice::with_options(EmulatedOptions {
        op_delay: Duration::from_millis(ms),
        ..EmulatedOptions::in_process()
    })
}

#[test]
fn one_producer_three_gating_consumers() {
    conformance::device_ring(|_| inproc(), 3, 300, 64 << 10, 4).unwrap();
}

#[test]
fn slow_peers_never_tear() {
    // Slow consumers, fast producer: without the producer's wait on the read events, it would
    // overwrite a slot while a consumer's copy of it is still queued.
    conformance::device_ring(
        |i| {
            if i == 0 {
                inproc()
            } else {
                delayed(2)
            }
        },
        2,
        40,
        4096,
        2,
    )
    .unwrap();
    // Slow producer, fast consumers: without the consumers' wait on the write event, they would
    // copy a slot before the producer's writes to it ran.
    conformance::device_ring(
        |i| {
            if i == 0 {
                delayed(2)
            } else {
                inproc()
            }
        },
        2,
        40,
        4096,
        2,
    )
    .unwrap();
}

#[test]
fn two_slots_many_frames() {
    conformance::device_ring(|_| inproc(), 2, 1000, 1024, 2).unwrap();
}

/// The long run on the emulated device: 10,000 publish/consume cycles; afterwards every
/// device's live counts are back to zero, and each consumer opened each slot buffer once.
#[test]
fn ten_thousand_cycles_return_to_baseline() {
    conformance::device_ring(|_| inproc(), 1, 10_000, 256, 4).unwrap();
}

/// The VMM path through the ring: buffers exported as fds and handed to each consumer over a
/// Unix socket with ring-os fd passing; the events still travel through the table.
#[test]
fn fd_exported_buffers_through_fd_passing() {
    use ring_cuda::ExportKind;
    conformance::device_ring_with(|_| inproc(), 2, 200, 8192, 3, ExportKind::Fd).unwrap();
    conformance::device_ring_with(
        |i| {
            if i == 0 {
                inproc()
            } else {
                delayed(1)
            }
        },
        1,
        30,
        4096,
        2,
        ExportKind::Fd,
    )
    .unwrap();
}

/// A consumer of an fd-exported ring that never received the descriptors gets a clear error,
/// and a producer of an IPC ring refuses to send descriptors.
#[test]
fn fd_ring_misuse_is_an_error() {
    use std::sync::Arc;

    use ring_core::{Config, DeliveryClass, HeapSegment, OwnerId};
    use ring_cuda::pipeline::produce;
    use ring_cuda::ring::{DeviceConsumer, DeviceProducer, HeapTable, RingError};
    use ring_cuda::{Error, ExportKind};

    let t = Duration::from_secs(10);
    let id = |n| OwnerId::new(n).unwrap();
    let seg = Arc::new(HeapSegment::new(&Config::new(2, 16).with_consumers(2), id(1)).unwrap());
    let table = Arc::new(HeapTable::new(2, 2));
    let dev = Arc::new(inproc());
    let mut p = DeviceProducer::with_export(
        Arc::clone(&dev),
        Arc::clone(&seg),
        Arc::clone(&table),
        id(1),
        64,
        ExportKind::Fd,
    )
    .unwrap();
    let mut c = DeviceConsumer::new(
        Arc::new(inproc()),
        seg,
        table,
        DeliveryClass::Gating,
        id(2),
        t,
    )
    .unwrap();
    assert_eq!(c.export_kind(), ExportKind::Fd);
    produce(&mut p, 1, 64, None, t).unwrap();
    let r = c.try_read_with(|_, _, _, _| Ok(()));
    assert!(
        matches!(r, Err(RingError::Device(Error::InvalidOperation(_)))),
        "{r:?}"
    );
    teardown(p, c);

    let seg = Arc::new(HeapSegment::new(&Config::new(2, 16), id(1)).unwrap());
    let table = Arc::new(HeapTable::new(2, 8));
    let p = DeviceProducer::new(dev, seg, table, id(1), 64).unwrap();
    let (a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
    assert!(matches!(
        p.send_buffers(&a),
        Err(RingError::Device(Error::InvalidOperation(_)))
    ));
}

/// A consumer that leaves and another that takes its table row: the producer drops the old
/// consumer's opened read events (row token changed) and opens the new one's; nothing leaks.
#[test]
fn a_consumer_row_changing_hands_is_followed() {
    use std::sync::Arc;

    use ring_core::{Config, DeliveryClass, HeapSegment, OwnerId};
    use ring_cuda::pipeline::{consume, produce};
    use ring_cuda::ring::{DeviceConsumer, DeviceProducer, HeapTable};
    use ring_cuda::Device;

    let t = Duration::from_secs(10);
    let id = |n| OwnerId::new(n).unwrap();
    let seg = Arc::new(HeapSegment::new(&Config::new(3, 16).with_consumers(2), id(1)).unwrap());
    let table = Arc::new(HeapTable::new(3, 2));
    let pdev = Arc::new(inproc());
    let mut p = DeviceProducer::new(
        Arc::clone(&pdev),
        Arc::clone(&seg),
        Arc::clone(&table),
        id(1),
        256,
    )
    .unwrap();
    for round in 0..3u64 {
        let cdev = Arc::new(inproc());
        let mut c = DeviceConsumer::new(
            Arc::clone(&cdev),
            Arc::clone(&seg),
            Arc::clone(&table),
            DeliveryClass::Gating,
            id(10 + round),
            t,
        )
        .unwrap();
        assert_eq!(c.ring().index(), 0, "the freed row is reused");
        let reader = std::thread::spawn(move || {
            let s = consume(&mut c, 20, t).unwrap();
            drop(c);
            s
        });
        produce(&mut p, 20, 256, None, t).unwrap();
        // The departing consumer waits for the producer's acknowledgement.
        while !reader.is_finished() {
            p.serve_departures().unwrap();
            std::thread::yield_now();
        }
        let s = reader.join().unwrap();
        assert_eq!((s.received, s.torn, s.skipped), (20, 0, 0));
        assert_eq!(
            cdev.ledger().totals().live_total(),
            0,
            "consumer device leaked"
        );
        // Producer: 3 write events, plus at most 3 read events of the current row.
        let events = pdev.ledger().totals().events.live;
        assert!(events <= 6, "round {round}: producer holds {events} events");
    }
    drop(p);
    assert_eq!(pdev.ledger().totals().live_total(), 0);
}

/// A consumer whose producer never publishes the table gives up after its timeout.
#[test]
fn no_producer_is_not_ready_within_the_timeout() {
    use std::sync::Arc;
    use std::time::Instant;

    use ring_core::{Config, DeliveryClass, HeapSegment, OwnerId};
    use ring_cuda::ring::{DeviceConsumer, HeapTable, RingError};

    let seg = Arc::new(HeapSegment::new(&Config::new(2, 16), OwnerId::new(1).unwrap()).unwrap());
    let table = Arc::new(HeapTable::new(2, 8));
    let start = Instant::now();
    let r = DeviceConsumer::new(
        Arc::new(inproc()),
        seg,
        table,
        DeliveryClass::LatestOnly,
        OwnerId::new(2).unwrap(),
        Duration::from_millis(50),
    );
    assert!(matches!(r, Err(RingError::NotReady)), "{r:?}");
    assert!(start.elapsed() < Duration::from_secs(5));
}

type HeapSeg = std::sync::Arc<ring_core::HeapSegment>;
type Table = std::sync::Arc<ring_cuda::ring::HeapTable>;
type Producer = ring_cuda::ring::DeviceProducer<EmulatedDevice, HeapSeg, Table>;
type Consumer = ring_cuda::ring::DeviceConsumer<EmulatedDevice, HeapSeg, Table>;

/// Drops a producer and its consumer the way the teardown protocol wants two processes to:
/// concurrently (the producer's drop waits for the consumer to close its mappings, the
/// consumer's for the producer to stop waiting on its events).
fn teardown<D, M, T>(
    p: ring_cuda::ring::DeviceProducer<D, M, T>,
    c: ring_cuda::ring::DeviceConsumer<D, M, T>,
) where
    D: ring_cuda::Device + 'static,
    M: ring_core::Memory + Send + 'static,
    T: ring_cuda::ring::TableMemory + 'static,
{
    let start = std::time::Instant::now();
    let producer = std::thread::spawn(move || drop(p));
    drop(c);
    producer.join().unwrap();
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "the teardown waited for a timeout"
    );
}

/// A producer and one gating consumer (separate devices) over a heap ring of `slots` slots.
fn pair(slots: u32) -> (Producer, Consumer, Table) {
    use std::sync::Arc;

    use ring_core::{Config, DeliveryClass, HeapSegment, OwnerId};
    use ring_cuda::ring::{DeviceConsumer, DeviceProducer, HeapTable};

    let id = |n| OwnerId::new(n).unwrap();
    let seg = Arc::new(HeapSegment::new(&Config::new(slots, 16).with_consumers(1), id(1)).unwrap());
    let table = Arc::new(HeapTable::new(slots as usize, 1));
    let p = DeviceProducer::new(
        Arc::new(inproc()),
        Arc::clone(&seg),
        Arc::clone(&table),
        id(1),
        64,
    )
    .unwrap();
    let c = DeviceConsumer::new(
        Arc::new(inproc()),
        seg,
        Arc::clone(&table),
        DeliveryClass::Gating,
        id(2),
        Duration::from_secs(10),
    )
    .unwrap();
    (p, c, table)
}

/// A read event the producer cannot open refuses the publish (checked failing before the fix:
/// the producer counted it as "unusable" and wrote the slot with no wait).
#[test]
fn an_unusable_read_event_refuses_the_publish() {
    use ring_cuda::ring::{table_words, RingError, TableMemory};
    use ring_cuda::Device;
    use ring_cuda::Error;
    use std::sync::atomic::Ordering;

    let (mut p, c, table) = pair(2);
    // Consumer row 0, slot 0's read-event handle: after the header (8 words) and two slot rows
    // (18 words each), skipping the row's 4 words (token, leave, ack, owner). Flipping its
    // magic makes it unopenable.
    let at = 8 + 2 * 18 + 4;
    assert!(at < table_words(2, 1));
    table.table()[at].fetch_xor(0xFF, Ordering::Relaxed);
    let r = p.try_publish_with(16, |d, s, buf| d.fill(s, buf, 0, 16, 1));
    assert!(
        matches!(
            r,
            Err(RingError::ReadEvent {
                consumer: 0,
                source: Error::InvalidHandle(_)
            })
        ),
        "{r:?}"
    );
    assert_eq!(
        p.ring().published(),
        0,
        "the slot was given back unpublished"
    );
    teardown(p, c);
}

/// A consumer whose read-event record fails and whose copy cannot be confirmed keeps the
/// message pinned, so the producer cannot overwrite it (checked failing before the fix: the
/// consumer unpinned anyway and the producer claimed the slot again).
#[test]
fn a_failed_read_record_keeps_the_pin() {
    use ring_cuda::ring::RingError;
    use ring_cuda::Device;

    let (mut p, mut c, _table) = pair(2);
    let t = Duration::from_secs(10);
    let fill = |d: &EmulatedDevice, s, buf| d.fill(s, buf, 0, 16, 1);
    p.publish_with(16, t, fill).unwrap();
    // The read closure destroys the consumer's own stream: the record then fails, and so does
    // the host sync that could have shown the copy finished.
    let r = c.try_read_with(|d, s, _, _| d.destroy_stream(s, t));
    assert!(matches!(r, Err(RingError::PinHeld { seq: 0 })), "{r:?}");
    let again = c.try_read_with(|_, _, _, _| Ok(()));
    assert!(
        matches!(again, Err(RingError::PinHeld { seq: 0 })),
        "{again:?}"
    );
    p.publish_with(16, t, fill).unwrap();
    let third = p.try_publish_with(16, fill);
    assert!(
        matches!(third, Err(ref e) if e.is_transient()),
        "slot 0 is still pinned: {third:?}"
    );
}

/// Teardown, consumer side: a departing consumer keeps its read events until the producer
/// acknowledged (its stream no longer waits on them). Checked failing before the change: the
/// consumer's drop destroyed them at once.
#[test]
fn a_departing_consumer_waits_for_the_producer_to_stop_waiting() {
    use ring_cuda::Device;

    let (mut p, mut c, _table) = pair(2);
    let t = Duration::from_secs(10);
    p.publish_with(16, t, |d, s, buf| d.fill(s, buf, 0, 16, 1))
        .unwrap();
    c.read_with(t, |_, _, _, _| Ok(())).unwrap();
    let cdev = std::sync::Arc::clone(c.device());
    let leaving = std::thread::spawn(move || drop(c));
    std::thread::sleep(Duration::from_millis(150));
    assert!(!leaving.is_finished(), "the consumer left without an ack");
    // Its two read events, and its opened copies of the two write events.
    assert_eq!(cdev.ledger().totals().events.live, 4, "read events kept");
    assert_eq!(p.serve_departures().unwrap(), 1);
    leaving.join().unwrap();
    assert_eq!(cdev.ledger().totals().live_total(), 0);
}

/// Teardown, producer side: the producer frees its buffers only once the importers closed
/// their mappings. Checked failing before the change: the producer's drop freed them at once.
#[test]
fn the_producer_frees_its_buffers_after_the_importers_closed() {
    use ring_cuda::Device;

    let (p, c, _table) = pair(2);
    let pdev = std::sync::Arc::clone(p.device());
    let stopping = std::thread::spawn(move || drop(p));
    std::thread::sleep(Duration::from_millis(150));
    assert!(!stopping.is_finished(), "the producer did not wait");
    assert_eq!(pdev.ledger().totals().buffers.live, 2, "buffers kept");
    drop(c);
    stopping.join().unwrap();
    assert_eq!(pdev.ledger().totals().live_total(), 0);
}

/// A consumer of a shared (ring-os) ring waiting for a frame parks on the ring's futex word
/// (it counts as a waiter there) instead of polling with a sleep back-off, and the publish
/// wakes it. Checked failing before the change: the waiter count stayed 0.
#[test]
fn a_consumer_waits_for_frames_on_the_futex() {
    use std::sync::atomic::Ordering;
    use std::sync::Arc;

    use ring_core::{Config, DeliveryClass, Memory, OwnerId};
    use ring_cuda::ring::{DeviceConsumer, DeviceProducer, SharedRing};
    use ring_cuda::Device;

    let t = Duration::from_secs(10);
    let name = format!("ring-cuda-futex-test-{}", std::process::id());
    let ring = Arc::new(SharedRing::create(&name, &Config::new(2, 16).with_consumers(1)).unwrap());
    let owner = ring_os::owner::current().unwrap();
    let mut p = DeviceProducer::new(
        Arc::new(inproc()),
        Arc::clone(&ring),
        Arc::clone(&ring),
        owner,
        64,
    )
    .unwrap();
    let opened = Arc::new(SharedRing::open(&name).unwrap());
    let mut c = DeviceConsumer::new(
        Arc::new(inproc()),
        Arc::clone(&opened),
        Arc::clone(&opened),
        DeliveryClass::Gating,
        OwnerId::new(owner.get() ^ 2).unwrap(),
        t,
    )
    .unwrap();
    let reader = std::thread::spawn(move || {
        let f = c.read_with(t, |_, _, _, _| Ok(())).map(|f| f.seq);
        (f, c)
    });
    // Relaxed: a counter read for the check only. Polled, so a loaded machine cannot make the
    // test fail by starting the reader late; a polling reader never counts as a waiter.
    let start = std::time::Instant::now();
    while ring
        .producer_line()
        .consumer_waiters
        .load(Ordering::Relaxed)
        != 1
    {
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "the consumer is not parked on the futex"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    p.publish_with(16, t, |d, s, buf| d.fill(s, buf, 0, 16, 1))
        .unwrap();
    let (seq, c) = reader.join().unwrap();
    assert_eq!(seq.unwrap(), 0);
    teardown(p, c);
}

/// Registration opens every slot's buffer and write event (milliseconds each on a GPU), so
/// the first frame per slot does not pay them. Checked failing before the change: nothing was
/// open until the first read of each slot.
#[test]
fn registration_opens_every_slot() {
    use ring_cuda::Device;

    let (p, c, _table) = pair(3);
    assert_eq!(c.mapping_stats().opens, 3);
    // Three read events of its own, three opened write events.
    assert_eq!(c.device().ledger().totals().events.live, 6);
    assert_eq!(c.device().ledger().totals().mappings.live, 3);
    teardown(p, c);
}

/// Teardown with an importer that died: a consumer process (this test binary re-run as a
/// child, on the strict default device) registers, opening the buffers, and exits without
/// dropping anything. Publishing then refuses with `ReadEvent` naming it (its events are gone),
/// `reclaim_dead_consumer` frees its row and ring entry so publishing goes on, and the
/// producer's drop frees its buffers at once instead of waiting out the teardown bound (which
/// would fail the 5 s check).
#[test]
fn the_producer_does_not_wait_for_a_dead_importer() {
    use std::sync::Arc;

    use ring_core::{Config, DeliveryClass, OwnerId};
    use ring_cuda::ring::{DeviceConsumer, DeviceProducer, SharedRing};
    use ring_cuda::Device;

    const ROLE: &str = "RING_CUDA_TEST_ROLE";
    let t = Duration::from_secs(10);
    if std::env::var(ROLE).as_deref() == Ok("dying-consumer") {
        let name = std::env::var("RING_CUDA_TEST_RING").unwrap();
        let ring = Arc::new(SharedRing::open(&name).unwrap());
        let c = DeviceConsumer::new(
            Arc::new(EmulatedDevice::new()),
            Arc::clone(&ring),
            Arc::clone(&ring),
            DeliveryClass::Gating,
            ring_os::owner::current().unwrap(),
            t,
        )
        .unwrap();
        assert_eq!(c.mapping_stats().opens, 2);
        println!("REGISTERED");
        // Dies: no destructor runs, the table row stays.
        std::process::exit(0);
    }
    let name = format!("ring-cuda-dead-importer-{}", std::process::id());
    let ring = Arc::new(SharedRing::create(&name, &Config::new(2, 16).with_consumers(1)).unwrap());
    let owner: OwnerId = ring_os::owner::current().unwrap();
    let pdev = Arc::new(EmulatedDevice::new());
    let p = DeviceProducer::new(
        Arc::clone(&pdev),
        Arc::clone(&ring),
        Arc::clone(&ring),
        owner,
        64,
    )
    .unwrap();
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "the_producer_does_not_wait_for_a_dead_importer",
            "--exact",
            "--nocapture",
        ])
        .env(ROLE, "dying-consumer")
        .env("RING_CUDA_TEST_RING", &name)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && text.contains("REGISTERED"),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Its read events died with it: publishing names it, and reclaiming it lets the producer
    // go on.
    let fill = |d: &EmulatedDevice, s, buf| d.fill(s, buf, 0, 16, 1);
    let mut p = p;
    let r = p.try_publish_with(16, fill);
    assert!(
        matches!(
            r,
            Err(ring_cuda::ring::RingError::ReadEvent { consumer: 0, .. })
        ),
        "{r:?}"
    );
    // SAFETY: the consumer's process exited and was reaped (`output()` waited for it).
    assert!(unsafe { p.reclaim_dead_consumer(0) }.unwrap());
    // SAFETY: as above.
    let again = unsafe { p.reclaim_dead_consumer(0) }.unwrap();
    assert!(!again, "the row is empty now");
    p.publish_with(16, t, fill).unwrap();
    let start = std::time::Instant::now();
    drop(p);
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "the producer waited for a dead importer"
    );
    assert_eq!(pdev.ledger().totals().live_total(), 0);
}
