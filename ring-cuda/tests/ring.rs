//! The device ring across processes, on the strict emulated device (IPC handles open only in
//! another process, as with CUDA): the producer is the test, each consumer a child process
//! (this test binary re-run in a role, see `common`). Producer and consumers hold ring-os role
//! locks on the ring's segment, so a consumer that dies is reclaimed by the producer.
//!
//! Mutation check: built with `--cfg ring_mutant="cuda_skip_read_waits"` (the producer stops
//! waiting for the consumers' read events) or `--cfg ring_mutant="cuda_skip_write_wait"` (a
//! consumer stops waiting for the write event), `slow_peers_never_tear` must fail.
#![allow(clippy::std_instead_of_core, reason = "std test")]

mod common;

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{env, next_line, role, Child, T};
use ring_core::{Config, DeliveryClass, Memory};
use ring_cuda::ring::{DeviceConsumer, DeviceProducer, RingError, SharedRing, TableMemory};
use ring_cuda::{At, Device, EmulatedDevice, EmulatedOptions, Error, ExportKind, Mem, Owner};

type Ring = Arc<SharedRing>;
type Producer = DeviceProducer<EmulatedDevice, Ring, Ring>;
type Consumer = DeviceConsumer<EmulatedDevice, Ring, Ring>;

/// Bytes per frame.
const LEN: u64 = 4096;

fn device(delay_us: u64) -> EmulatedDevice {
    EmulatedDevice::with_options(EmulatedOptions {
        op_delay: Duration::from_micros(delay_us),
        ..EmulatedOptions::default()
    })
}

/// A fresh named ring for test `test` (unlinked when the last `Arc` goes).
fn create(test: &str, slots: u32, consumers: u32) -> (Ring, String) {
    let name = format!("ring-cuda-test-{test}-{}", std::process::id());
    let cfg = Config::new(slots, 16).with_consumers(consumers);
    (Arc::new(SharedRing::create(&name, &cfg).unwrap()), name)
}

fn producer(ring: &Ring, delay_us: u64, kind: ExportKind) -> Producer {
    let owner = ring_os::raw::owner::current().unwrap();
    let dev = Arc::new(device(delay_us));
    DeviceProducer::with_export(dev, Arc::clone(ring), Arc::clone(ring), owner, LEN, kind).unwrap()
}

/// The child's environment: the ring's name, and the consumer's device delay.
fn child_env(name: &str, delay_us: u64, frames: u64) -> Vec<(&'static str, String)> {
    vec![
        ("RING_CUDA_TEST_RING", name.to_string()),
        ("RING_CUDA_TEST_DELAY_US", delay_us.to_string()),
        ("RING_CUDA_TEST_FRAMES", frames.to_string()),
    ]
}

/// In a child (a role is set), its consumer ([`consumer`]); in the parent, `None`.
fn child_consumer() -> Option<Consumer> {
    role().is_some().then(consumer)
}

/// In a child: registers a gating consumer of the parent's ring and says so.
fn consumer() -> Consumer {
    let ring = Arc::new(SharedRing::open(&env("RING_CUDA_TEST_RING")).unwrap());
    let delay = env("RING_CUDA_TEST_DELAY_US").parse().unwrap();
    let c = DeviceConsumer::new(
        Arc::new(device(delay)),
        Arc::clone(&ring),
        ring,
        DeliveryClass::Gating,
        ring_os::raw::owner::current().unwrap(),
        T,
    )
    .unwrap();
    println!("REGISTERED index={}", c.ring().index());
    c
}

/// The fill byte of frame `seq`.
const fn pattern(seq: u64) -> u8 {
    (seq % 251) as u8 + 1
}

/// Publishes frame `seq`: `pattern(seq)` everywhere, `seq` in the first and last 8 bytes.
/// A publish that needs slot 0 reclaims the dead consumer in entry 0.
fn publish_reclaims_entry_0(p: &mut Producer) {
    publish(p).unwrap();
    assert_eq!(p.ring().consumer_info(0).unwrap().owner, 0, "reclaimed");
}

fn publish(p: &mut Producer) -> Result<u64, RingError> {
    let seq = p.ring().published();
    p.publish_with(LEN, T, |d, s, buf| {
        d.fill(s, buf, 0, LEN, pattern(seq))?;
        d.write(s, buf, 0, &seq.to_le_bytes())?;
        d.write(s, buf, LEN - 8, &seq.to_le_bytes())
    })
}

/// In a child: reads up to `n` frames (until the ring closes), each copied into a private
/// buffer on the consumer's stream and checked there; returns (received, torn, skipped).
fn read_frames(c: &mut Consumer, n: u64) -> (u64, u64, u64) {
    let dev = Arc::clone(c.device());
    let private = Mem::Buffer(dev.alloc(Owner(0x77), LEN, ExportKind::Ipc).unwrap());
    let (mut received, mut torn, mut skipped, mut next) = (0, 0, 0, None);
    while received < n {
        let frame = match c.read_with(T, |d, s, slot, len| {
            d.copy(s, At(private, 0), At(slot, 0), len)
        }) {
            Ok(f) => f,
            Err(RingError::Read(ring_core::ReadError::Closed)) => break,
            Err(e) => panic!("read: {e}"),
        };
        let s = c.stream().unwrap();
        let (mut head, mut tail, mut mid) = ([0u8; 8], [0u8; 8], [0u8; 1]);
        dev.read(s, At(private, 0), &mut head, T).unwrap();
        dev.read(s, At(private, LEN - 8), &mut tail, T).unwrap();
        dev.read(s, At(private, LEN / 2), &mut mid, T).unwrap();
        let ok = u64::from_le_bytes(head) == frame.seq
            && u64::from_le_bytes(tail) == frame.seq
            && mid[0] == pattern(frame.seq);
        torn += u64::from(!ok);
        // A consumer starts at the frame after the newest published when it registered.
        skipped += frame.missed + next.map_or(0, |n: u64| frame.seq.saturating_sub(n));
        next = Some(frame.seq + 1);
        received += 1;
    }
    let Mem::Buffer(b) = private else {
        unreachable!()
    };
    dev.free(b).unwrap();
    (received, torn, skipped)
}

/// Child role `reader`: registers, reads `RING_CUDA_TEST_FRAMES` frames, reports, leaves (the
/// teardown protocol) and reports what its device still holds.
fn reader() {
    let mut c = consumer();
    let n = env("RING_CUDA_TEST_FRAMES").parse().unwrap();
    let (received, torn, skipped) = read_frames(&mut c, n);
    println!("RESULT received={received} torn={torn} skipped={skipped}");
    let (dev, opens) = (Arc::clone(c.device()), c.mapping_stats().opens);
    drop(c);
    println!(
        "LEFT live={} opens={opens}",
        dev.ledger().totals().live_total()
    );
}

/// Drops the producer while its consumers leave: its drop returns once they closed their
/// mappings (the teardown protocol), well before any of its bounds.
fn stop(p: Producer) {
    let dev = Arc::clone(p.device());
    let start = Instant::now();
    drop(p);
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "the teardown waited for a timeout"
    );
    assert_eq!(
        dev.ledger().totals().live_total(),
        0,
        "producer device leaked"
    );
}

/// Runs `frames` frames through a ring of `slots` slots from a producer (device delay
/// `producer_us`) to `consumers` reader processes (device delay `consumer_us`); every child
/// A two-slot ring for test `name`, its producer, and one registered reader process that
/// reads one frame (see [`reader`]).
fn one_reader(name: &str) -> (Ring, Producer, Child) {
    let (ring, ring_name) = create(name, 2, 1);
    let p = producer(&ring, 0, ExportKind::Ipc);
    let mut child = Child::spawn(name, "reader", &child_env(&ring_name, 0, 1));
    child.expect("REGISTERED");
    (ring, p, child)
}

/// Publishes `frames` frames, stops the producer, and checks that the reader process got
/// every one whole.
fn reader_gets(mut p: Producer, mut child: Child, frames: u64) {
    for _ in 0..frames {
        publish(&mut p).unwrap();
    }
    stop(p);
    let result = child.expect("RESULT");
    assert!(
        result.ends_with(&format!("received={frames} torn=0 skipped=0")),
        "{result}"
    );
    child.finish();
}

/// must receive every frame, untorn, and leave with nothing live.
fn run(test: &str, slots: u32, consumers: u32, frames: u64, producer_us: u64, consumer_us: u64) {
    let (ring, name) = create(test, slots, consumers);
    let mut p = producer(&ring, producer_us, ExportKind::Ipc);
    let mut children: Vec<_> = (0..consumers)
        .map(|_| Child::spawn(test, "reader", &child_env(&name, consumer_us, frames)))
        .collect();
    // Gating consumers registered before the first frame: none may miss one.
    for c in &mut children {
        c.expect("REGISTERED");
    }
    for _ in 0..frames {
        publish(&mut p).unwrap();
    }
    stop(p);
    for mut c in children {
        let result = c.expect("RESULT");
        assert!(
            result.ends_with(&format!("received={frames} torn=0 skipped=0")),
            "{test}: {result}"
        );
        let left = c.expect("LEFT");
        assert!(
            left.ends_with(&format!("live=0 opens={slots}")),
            "{test}: each slot opened once, nothing left: {left}"
        );
        c.finish();
    }
}

#[test]
fn one_producer_three_consumer_processes() {
    if role().is_some() {
        return reader();
    }
    run("one_producer_three_consumer_processes", 2, 3, 1000, 0, 0);
}

#[test]
fn slow_peers_never_tear() {
    if role().is_some() {
        return reader();
    }
    // Slow consumers, fast producer: without the producer's wait on the read events, it would
    // overwrite a slot while a consumer's copy of it is still queued.
    run("slow_peers_never_tear", 2, 2, 40, 0, 2000);
    // Slow producer, fast consumers: without the consumers' wait on the write event, they
    // would copy a slot before the producer's writes to it ran.
    run("slow_peers_never_tear", 2, 2, 40, 2000, 0);
}

/// A read event the producer cannot open, of a consumer that is alive (it holds its role
/// lock), refuses the publish (checked failing before the fix: the producer counted it as
/// "unusable" and wrote the slot with no wait); once the handle is good again, publishing
/// goes on.
#[test]
fn an_unusable_read_event_refuses_the_publish() {
    const NAME: &str = "an_unusable_read_event_refuses_the_publish";
    if role().is_some() {
        return reader();
    }
    let (ring, mut p, child) = one_reader(NAME);
    // Consumer row 0, slot 0's read-event handle: after the header (8 words) and two slot rows
    // (18 words each), skipping the row's 4 words (token, leave, ack, owner). Flipping its
    // magic makes it unopenable.
    let at = 8 + 2 * 18 + 4;
    ring.table()[at].fetch_xor(0xFF, Ordering::Relaxed);
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
    assert_ne!(
        p.ring().consumer_info(0).unwrap().owner,
        0,
        "a live consumer is not reclaimed"
    );
    ring.table()[at].fetch_xor(0xFF, Ordering::Relaxed);
    reader_gets(p, child, 1);
}

/// A consumer whose read-event record fails and whose copy cannot be confirmed keeps the
/// message pinned, so the producer cannot overwrite it (checked failing before the fix: the
/// consumer unpinned anyway and the producer claimed the slot again). Once that consumer's
/// process is gone, the producer reclaims it and goes on.
#[test]
fn a_failed_read_record_keeps_the_pin() {
    const NAME: &str = "a_failed_read_record_keeps_the_pin";
    if let Some(mut c) = child_consumer() {
        // The read closure destroys the consumer's own stream: the record then fails, and so
        // does the host sync that could have shown the copy finished.
        let r = c.read_with(T, |d, s, _, _| d.destroy_stream(s, T));
        assert!(matches!(r, Err(RingError::PinHeld { seq: 0 })), "{r:?}");
        let again = c.try_read_with(|_, _, _, _| Ok(()));
        assert!(
            matches!(again, Err(RingError::PinHeld { seq: 0 })),
            "{again:?}"
        );
        println!("PINHELD");
        let _ = next_line();
        // Ends without destructors, the pin still held.
        std::process::exit(0);
    }
    let (ring, name) = create(NAME, 2, 1);
    let mut p = producer(&ring, 0, ExportKind::Ipc);
    let mut child = Child::spawn(NAME, "pin-holder", &child_env(&name, 0, 0));
    child.expect("REGISTERED");
    publish(&mut p).unwrap();
    child.expect("PINHELD");
    publish(&mut p).unwrap();
    let third = p.try_publish_with(16, |d, s, buf| d.fill(s, buf, 0, 16, 1));
    assert!(
        matches!(third, Err(ref e) if e.is_transient()),
        "slot 0 is still pinned: {third:?}"
    );
    child.send("EXIT");
    child.finish();
    // Its role lock went with it: the publish that needs slot 0 reclaims it.
    publish_reclaims_entry_0(&mut p);
    stop(p);
}

/// Teardown, consumer side: a departing consumer keeps its read events until the producer
/// acknowledged (its stream no longer waits on them). Checked failing before the change: the
/// consumer's drop destroyed them at once.
#[test]
fn a_departing_consumer_waits_for_the_producer_to_stop_waiting() {
    const NAME: &str = "a_departing_consumer_waits_for_the_producer_to_stop_waiting";
    if let Some(mut c) = child_consumer() {
        c.read_with(T, |_, _, _, _| Ok(())).unwrap();
        let dev = Arc::clone(c.device());
        let leaving = std::thread::spawn(move || drop(c));
        std::thread::sleep(Duration::from_millis(150));
        assert!(!leaving.is_finished(), "the consumer left without an ack");
        // Its two read events, and its opened copies of the two write events.
        println!("WAITING events={}", dev.ledger().totals().events.live);
        leaving.join().unwrap();
        println!("LEFT live={}", dev.ledger().totals().live_total());
        return;
    }
    let (ring, name) = create(NAME, 2, 1);
    let mut p = producer(&ring, 0, ExportKind::Ipc);
    let mut child = Child::spawn(NAME, "leaver", &child_env(&name, 0, 0));
    child.expect("REGISTERED");
    publish(&mut p).unwrap();
    assert!(
        child.expect("WAITING").ends_with("events=4"),
        "read events kept"
    );
    let start = Instant::now();
    while p.serve_departures().unwrap() == 0 {
        assert!(start.elapsed() < T, "the consumer never asked to leave");
        std::thread::sleep(Duration::from_millis(1));
    }
    assert!(child.expect("LEFT").ends_with("live=0"));
    child.finish();
    stop(p);
}

/// Teardown, producer side: the producer frees its buffers only once the importers closed
/// their mappings. Checked failing before the change: the producer's drop freed them at once.
#[test]
fn the_producer_frees_its_buffers_after_the_importers_closed() {
    const NAME: &str = "the_producer_frees_its_buffers_after_the_importers_closed";
    if let Some(c) = child_consumer() {
        let _ = next_line();
        drop(c);
        println!("LEFT");
        return;
    }
    let (ring, name) = create(NAME, 2, 1);
    let p = producer(&ring, 0, ExportKind::Ipc);
    let mut child = Child::spawn(NAME, "holder", &child_env(&name, 0, 0));
    child.expect("REGISTERED");
    let pdev = Arc::clone(p.device());
    let stopping = std::thread::spawn(move || drop(p));
    std::thread::sleep(Duration::from_millis(150));
    assert!(!stopping.is_finished(), "the producer did not wait");
    assert_eq!(pdev.ledger().totals().buffers.live, 2, "buffers kept");
    child.send("GO");
    child.expect("LEFT");
    stopping.join().unwrap();
    assert_eq!(pdev.ledger().totals().live_total(), 0);
    child.finish();
}

/// A consumer waiting for a frame parks on the ring's futex word (it counts as a waiter
/// there) instead of polling with a sleep back-off, and the publish wakes it. Checked failing
/// before the change: the waiter count stayed 0.
#[test]
fn a_consumer_waits_for_frames_on_the_futex() {
    const NAME: &str = "a_consumer_waits_for_frames_on_the_futex";
    if role().is_some() {
        return reader();
    }
    let (ring, p, child) = one_reader(NAME);
    // Relaxed: a counter read for the check only. Polled, so a loaded machine cannot make the
    // test fail by starting the reader late; a polling reader never counts as a waiter.
    let start = Instant::now();
    while ring
        .producer_line()
        .consumer_waiters
        .load(Ordering::Relaxed)
        != 1
    {
        assert!(
            start.elapsed() < T,
            "the consumer is not parked on the futex"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    reader_gets(p, child, 1);
}

/// Registration opens every slot's buffer and write event (milliseconds each on a GPU), so
/// the first frame per slot does not pay them. Checked failing before the change: nothing was
/// open until the first read of each slot.
#[test]
fn registration_opens_every_slot() {
    const NAME: &str = "registration_opens_every_slot";
    if let Some(c) = child_consumer() {
        let t = c.device().ledger().totals();
        // Three read events of its own, three opened write events, three mappings.
        println!(
            "COUNTS opens={} events={} mappings={}",
            c.mapping_stats().opens,
            t.events.live,
            t.mappings.live
        );
        return;
    }
    let (ring, name) = create(NAME, 3, 1);
    let p = producer(&ring, 0, ExportKind::Ipc);
    let mut child = Child::spawn(NAME, "counter", &child_env(&name, 0, 0));
    let counts = child.expect("COUNTS");
    assert!(counts.ends_with("opens=3 events=6 mappings=3"), "{counts}");
    stop(p);
    child.finish();
}

/// A consumer that dies while registered, before the producer opened its read events: the
/// first publish finds them gone, sees the consumer's role lock free, reclaims it (row, event
/// copies, ring-core entry) and publishes; the producer's drop then frees its buffers at once.
/// Checked failing before the change: the publish refused with `ReadEvent` and nothing
/// reclaimed it (`reclaim_dead_consumer` was an unsafe function nobody called).
#[test]
fn the_producer_does_not_wait_for_a_dead_importer() {
    const NAME: &str = "the_producer_does_not_wait_for_a_dead_importer";
    if let Some(c) = child_consumer() {
        assert_eq!(c.mapping_stats().opens, 2);
        // Dies: no destructor runs, the table row stays; the kernel releases its role lock.
        std::process::exit(0);
    }
    let (ring, name) = create(NAME, 2, 1);
    let mut p = producer(&ring, 0, ExportKind::Ipc);
    let mut child = Child::spawn(NAME, "dying", &child_env(&name, 0, 0));
    child.expect("REGISTERED");
    child.finish();
    publish_reclaims_entry_0(&mut p);
    assert!(
        !p.reclaim_dead_consumer(0).unwrap(),
        "nothing left to reclaim"
    );
    publish(&mut p).unwrap();
    stop(p);
}

/// A consumer process killed with SIGKILL while registered holds the ring back (it is gating,
/// its cursor stops); the producer's publishes see its role lock free and reclaim it — no
/// caller has to vouch for the death — while a live consumer that holds the ring back is
/// never reclaimed. Checked failing before the change: the publishes ran into `Full` until
/// their timeout.
#[test]
fn a_sigkilled_consumer_is_reclaimed_by_the_publishes_it_holds_back() {
    const NAME: &str = "a_sigkilled_consumer_is_reclaimed_by_the_publishes_it_holds_back";
    if let Some(mut c) = child_consumer() {
        let (received, torn, _) = read_frames(&mut c, 2);
        c.device().sync_stream(c.stream().unwrap(), T).unwrap();
        println!("READ {received} torn={torn}");
        // Waits to be killed (the parent keeps stdin open).
        let _ = next_line();
        std::process::exit(1);
    }
    let (ring, name) = create(NAME, 2, 1);
    let mut p = producer(&ring, 0, ExportKind::Ipc);
    let pdev = Arc::clone(p.device());
    let mut child = Child::spawn(NAME, "stuck", &child_env(&name, 0, 0));
    child.expect("REGISTERED");
    publish(&mut p).unwrap();
    publish(&mut p).unwrap();
    assert!(child.expect("READ").ends_with("READ 2 torn=0"));
    publish(&mut p).unwrap();
    publish(&mut p).unwrap();
    // The ring is full for that consumer; alive, it is waited for, not reclaimed.
    let fill = |d: &EmulatedDevice, s, buf| d.fill(s, buf, 0, 16, 1);
    let held = p.publish_with(16, Duration::from_millis(200), fill);
    assert!(
        matches!(held, Err(ref e) if e.is_transient()),
        "a live consumer holds the ring back: {held:?}"
    );
    assert_ne!(p.ring().consumer_info(0).unwrap().owner, 0);
    child.kill();
    let start = Instant::now();
    for _ in 0..6 {
        publish(&mut p).unwrap();
    }
    assert!(start.elapsed() < Duration::from_secs(5), "reclaimed late");
    assert_eq!(
        p.ring().consumer_info(0).unwrap().owner,
        0,
        "entry reclaimed"
    );
    // The row (token word after the header and two slot rows) is empty, the producer's copies
    // of the consumer's two read events are closed: its own two write events are left.
    assert_eq!(
        ring.table()[8 + 2 * 18].load(Ordering::Relaxed),
        0,
        "row emptied"
    );
    assert_eq!(pdev.ledger().totals().events.live, 2);
    stop(p);
}

/// A consumer that leaves and another (process) that takes its table row: the producer drops
/// the old consumer's opened read events (row token changed) and opens the new one's; nothing
/// leaks.
#[test]
fn a_consumer_row_changing_hands_is_followed() {
    const NAME: &str = "a_consumer_row_changing_hands_is_followed";
    if role().is_some() {
        return reader();
    }
    let (ring, name) = create(NAME, 3, 2);
    let mut p = producer(&ring, 0, ExportKind::Ipc);
    let pdev = Arc::clone(p.device());
    for round in 0..3 {
        let mut child = Child::spawn(NAME, "reader", &child_env(&name, 0, 20));
        let registered = child.expect("REGISTERED");
        assert!(
            registered.ends_with("index=0"),
            "the freed row is reused: {registered}"
        );
        for _ in 0..20 {
            publish(&mut p).unwrap();
        }
        let result = child.expect("RESULT");
        assert!(result.ends_with("received=20 torn=0 skipped=0"), "{result}");
        // The departing consumer waits for the producer's acknowledgement.
        let start = Instant::now();
        while p.serve_departures().unwrap() == 0 {
            assert!(
                start.elapsed() < T,
                "round {round}: the consumer never asked to leave"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        assert!(child.expect("LEFT").ends_with("live=0 opens=3"));
        child.finish();
        // Producer: 3 write events, plus at most 3 read events of the current row.
        let events = pdev.ledger().totals().events.live;
        assert!(events <= 6, "round {round}: producer holds {events} events");
    }
    stop(p);
}

/// The VMM path through the ring across processes: buffers exported as fds and handed to the
/// consumer over a Unix socket with ring-os fd passing (the events still travel through the
/// table); a consumer that did not receive them gets a clear error.
#[test]
fn fd_exported_buffers_through_fd_passing() {
    use std::os::linux::net::SocketAddrExt;
    use std::os::unix::net::{SocketAddr, UnixListener, UnixStream};

    const NAME: &str = "fd_exported_buffers_through_fd_passing";
    let addr = |name: &str| SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
    match role().as_deref() {
        Some("fd-reader") => {
            let mut c = consumer();
            assert_eq!(c.export_kind(), ExportKind::Fd);
            let sock = UnixStream::connect_addr(&addr(&env("RING_CUDA_TEST_RING"))).unwrap();
            c.receive_buffers(&sock, T).unwrap();
            let (received, torn, skipped) = read_frames(&mut c, 30);
            println!("RESULT received={received} torn={torn} skipped={skipped}");
            return;
        }
        Some(_) => {
            let mut c = consumer();
            let r = loop {
                match c.try_read_with(|_, _, _, _| Ok(())) {
                    Err(RingError::Read(ring_core::ReadError::Empty)) => {
                        std::thread::sleep(Duration::from_millis(1));
                    }
                    other => break other,
                }
            };
            assert!(
                matches!(r, Err(RingError::Device(Error::InvalidOperation(_)))),
                "{r:?}"
            );
            println!("REFUSED");
            return;
        }
        None => {}
    }
    let (ring, name) = create(NAME, 3, 1);
    let listener = UnixListener::bind_addr(&addr(&name)).unwrap();
    listener.set_nonblocking(true).unwrap();
    let p = producer(&ring, 0, ExportKind::Fd);
    let mut child = Child::spawn(NAME, "fd-reader", &child_env(&name, 1000, 0));
    child.expect("REGISTERED");
    let start = Instant::now();
    let sock = loop {
        match listener.accept() {
            Ok((sock, _)) => break sock,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock && start.elapsed() < T => {
                std::thread::sleep(Duration::from_millis(2));
            }
            Err(e) => panic!("accept: {e}"),
        }
    };
    sock.set_nonblocking(false).unwrap();
    p.send_buffers(&sock).unwrap();
    reader_gets(p, child, 30);

    let (ring, name) = create(&format!("{NAME}-2"), 2, 1);
    let mut p = producer(&ring, 0, ExportKind::Fd);
    let mut child = Child::spawn(NAME, "fd-unreceived", &child_env(&name, 0, 0));
    child.expect("REGISTERED");
    publish(&mut p).unwrap();
    child.expect("REFUSED");
    stop(p);
    child.finish();

    // A producer of an IPC ring refuses to send descriptors.
    let (ring, _) = create(&format!("{NAME}-3"), 2, 1);
    let p = producer(&ring, 0, ExportKind::Ipc);
    let (a, _b) = UnixStream::pair().unwrap();
    assert!(matches!(
        p.send_buffers(&a),
        Err(RingError::Device(Error::InvalidOperation(_)))
    ));
}

/// A consumer whose producer never publishes the table gives up after its timeout.
#[test]
fn no_producer_is_not_ready_within_the_timeout() {
    let (ring, _) = create("no_producer_is_not_ready_within_the_timeout", 2, 1);
    let start = Instant::now();
    let r = DeviceConsumer::new(
        Arc::new(EmulatedDevice::new()),
        Arc::clone(&ring),
        Arc::clone(&ring),
        DeliveryClass::LatestOnly,
        ring_os::raw::owner::current().unwrap(),
        Duration::from_millis(50),
    );
    assert!(matches!(r, Err(RingError::NotReady)), "{r:?}");
    assert!(start.elapsed() < Duration::from_secs(5));
}

/// A second producer of the same ring is refused while the first holds the role lock.
#[test]
fn a_second_producer_is_refused_while_the_first_lives() {
    let (ring, _) = create("a_second_producer_is_refused_while_the_first_lives", 2, 1);
    let p = producer(&ring, 0, ExportKind::Ipc);
    let second = DeviceProducer::new(
        Arc::new(EmulatedDevice::new()),
        Arc::clone(&ring),
        Arc::clone(&ring),
        ring_os::raw::owner::current().unwrap(),
        LEN,
    );
    assert!(
        matches!(
            second,
            Err(RingError::Segment(ring_os::Error::ProducerAlive { .. }))
        ),
        "{second:?}"
    );
    stop(p);
}
