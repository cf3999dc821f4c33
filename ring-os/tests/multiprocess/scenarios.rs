//! The parent side of each multi-process scenario (issue 3, tests 1-6).

use std::os::fd::AsFd as _;
use std::time::{Duration, Instant};

use ring_core::inspect::{consumer_info, producer_info, EntryState};
use ring_core::{Config, DeliveryClass, Geometry};
use ring_os::{
    alloc, fdpass, AllocProducer, ConsumerExt as _, CreateOptions, Error, ProducerExt as _, ShmRing,
};

use crate::support::{field, make_payload, unique_name, Child, Unlink};

const SECS: fn(u64) -> Duration = Duration::from_secs;

/// Test 1: 1 producer (this process) + 3 consumer processes, one per delivery class, N
/// checksummed variable-size payloads through the allocator.
pub fn stress() {
    let n: u64 = std::env::var("RING_OS_STRESS_N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    let name = unique_name("stress");
    let _u = Unlink(name.clone());
    let config = Config::new(256, 64)
        .with_consumers(4)
        .with_allocator(1 << 20, 4094);
    let ring = ShmRing::create_named(&name, &config, CreateOptions::new()).expect("create");
    let kids: Vec<Child> = ["gating", "latest", "skip"]
        .iter()
        .map(|class| {
            Child::spawn(
                "stress-consumer",
                &[
                    ("RING_NAME", name.as_str().to_owned()),
                    ("RING_CLASS", (*class).to_owned()),
                ],
            )
        })
        .collect();
    for k in &kids {
        k.expect_line("READY", SECS(30));
    }
    let mut p = AllocProducer::new(ShmRing::producer(&ring).expect("producer")).expect("alloc");
    let start = Instant::now();
    let mut buf = Vec::new();
    for seq in 0..n {
        make_payload(seq, 200, &mut buf);
        assert_eq!(p.publish(&buf, SECS(20)).expect("publish"), seq);
    }
    assert!(
        p.producer().wait_drained_for(SECS(30)),
        "gating consumer did not drain"
    );
    let elapsed = start.elapsed();
    p.close();
    let mut results = Vec::new();
    for mut k in kids {
        let line = k.expect_line("RESULT", SECS(60));
        assert!(k.wait(SECS(20)), "consumer failed");
        results.push(line);
    }
    for line in &results {
        assert_eq!(field(line, "torn"), 0, "{line}");
        assert_eq!(field(line, "order"), 0, "{line}");
        assert_eq!(field(line, "alloc_err"), 0, "{line}");
        assert_eq!(field(line, "last"), n - 1, "{line}");
    }
    let (gating, latest, skip) = (&results[0], &results[1], &results[2]);
    assert_eq!(field(gating, "received"), n, "{gating}");
    assert_eq!(field(gating, "missed"), 0, "{gating}");
    assert!(field(latest, "received") >= 1, "{latest}");
    assert_eq!(field(skip, "received") + field(skip, "missed"), n, "{skip}");
    let stats = p.free_all().expect("free");
    assert_eq!(stats.live, 0, "{stats:?}");
    assert_eq!(stats.allocs, n);
    let (leaks, totals) = alloc::leak_report(&*ring).expect("leaks");
    assert!(leaks.is_empty() && totals.count == 0, "{leaks:?}");
    println!(
        "  stress: {n} messages in {elapsed:.2?} ({:.0} msg/s); gating/latest/skip: {gating} | {latest} | {skip}",
        n as f64 / elapsed.as_secs_f64()
    );
}

/// Test 2: SIGKILL a gating consumer while it holds a pin, 20 times; the producer recovers
/// within a bounded time, and pins and allocations return to baseline.
pub fn kill_consumer() {
    let name = unique_name("killc");
    let _u = Unlink(name.clone());
    let config = Config::new(8, 64)
        .with_consumers(2)
        .with_allocator(1 << 16, 64);
    let slots = 8u64;
    let ring = ShmRing::create_named(&name, &config, CreateOptions::new()).expect("create");
    let mut p = AllocProducer::new(ShmRing::producer(&ring).expect("producer")).expect("alloc");
    let mut buf = Vec::new();
    let mut seq = 0u64;
    let mut worst = Duration::ZERO;
    for round in 0..20 {
        let mut child = Child::spawn("pin-holder", &[("RING_NAME", name.as_str().to_owned())]);
        child.expect_line("REGISTERED", SECS(20));
        make_payload(seq, 120, &mut buf);
        p.publish(&buf, SECS(5)).expect("publish for the holder");
        seq += 1;
        child.expect_line("PINNED", SECS(20));
        child.sigkill();
        let t0 = Instant::now();
        if round % 2 == 0 {
            // Automatic: the dead consumer's cursor, then its pin, hold the producer back until
            // the blocked claim checks its owner and reclaims it.
            for _ in 0..=slots {
                make_payload(seq, 120, &mut buf);
                p.publish(&buf, SECS(5))
                    .expect("publish past the dead consumer");
                seq += 1;
            }
        } else {
            // Explicit: reclaim() reports exactly what it cleared.
            let reclaimed = loop {
                let r = p.producer().reclaim_dead();
                if !r.is_empty() {
                    break r;
                }
                assert!(t0.elapsed() < SECS(5), "killed consumer never looked dead");
                std::thread::sleep(Duration::from_millis(1));
            };
            assert_eq!(reclaimed.len(), 1, "{reclaimed:?}");
            assert_eq!(reclaimed[0].pins_cleared, 1, "{reclaimed:?}");
            assert!(reclaimed[0].was_registered);
        }
        let recovery = t0.elapsed();
        worst = worst.max(recovery);
        assert!(
            recovery < SECS(3),
            "round {round}: recovery took {recovery:?}"
        );
        for i in 0..2 {
            let info = consumer_info(&*ring, i).expect("entry");
            assert_eq!(info.state, EntryState::Free, "round {round}: {info:?}");
            assert_eq!(info.pins, 0, "round {round}: {info:?}");
        }
        let live = alloc::stats(&*ring).expect("stats").live;
        assert_eq!(
            live,
            seq.min(slots),
            "round {round}: live allocations off baseline"
        );
        assert!(!child.wait(SECS(5)), "a SIGKILLed child cannot succeed");
    }
    p.close();
    assert_eq!(p.free_all().expect("free").live, 0);
    println!("  kill consumer: 20 rounds, worst recovery {worst:.2?}");
}

/// Test 3: SIGKILL the producer; every consumer reports `ProducerGone` within a bounded time;
/// then a new producer takes the ring over.
pub fn kill_producer() {
    let name = unique_name("killp");
    let _u = Unlink(name.clone());
    let config = Config::new(16, 64).with_consumers(4);
    let ring = ShmRing::create_named(&name, &config, CreateOptions::new()).expect("create");
    let consumers: Vec<Child> = ["gating", "latest", "skip"]
        .iter()
        .map(|class| {
            Child::spawn(
                "gone-consumer",
                &[
                    ("RING_NAME", name.as_str().to_owned()),
                    ("RING_CLASS", (*class).to_owned()),
                ],
            )
        })
        .collect();
    for c in &consumers {
        c.expect_line("READY", SECS(20));
    }
    let mut producer = Child::spawn("slow-producer", &[("RING_NAME", name.as_str().to_owned())]);
    producer.expect_line("PRODUCING", SECS(20));
    for c in &consumers {
        c.expect_line("GOT", SECS(20));
    }
    producer.sigkill();
    let t0 = Instant::now();
    let mut worst = Duration::ZERO;
    for mut c in consumers {
        c.expect_line("GONE", SECS(5));
        worst = worst.max(t0.elapsed());
        assert!(c.wait(SECS(5)), "consumer failed");
    }
    assert!(worst < SECS(3), "ProducerGone took {worst:?}");
    assert!(!producer.wait(SECS(5)), "a SIGKILLed child cannot succeed");
    // Take-over: the dead producer's ring gets a new producer; a new consumer reads from it.
    let epoch_before = producer_info(&*ring).epoch;
    let mut p = ShmRing::producer(&ring).expect("take over");
    assert_eq!(producer_info(&*ring).epoch, epoch_before + 1);
    assert_eq!(producer_info(&*ring).writing, 0, "in-flight slot released");
    let mut c = ShmRing::consumer(&ring, DeliveryClass::Gating).expect("consumer");
    let mut buf = Vec::new();
    make_payload(7, 48, &mut buf);
    let seq = p.publish(&buf, SECS(5)).expect("publish after take-over");
    let mut out = [0u8; 64];
    let got = c.recv(&mut out, SECS(5)).expect("read after take-over");
    assert_eq!((got.seq, &out[..got.len]), (seq, &buf[..]));
    // A live producer cannot be displaced.
    assert!(matches!(
        ShmRing::producer(&ring),
        Err(Error::ProducerAlive { .. })
    ));
    println!("  kill producer: ProducerGone after {worst:.2?}; take-over at sequence {seq}");
}

/// Test 4: a peer truncates the file or scribbles over the header and slot headers; the other
/// side gets a clear error, never a SIGBUS, panic or hang.
pub fn corrupt() {
    let config = Config::new(8, 64).with_consumers(2);
    // Header garbage: opening fails with a validation error.
    for seed in 1..=10u64 {
        let name = unique_name(&format!("hdr{seed}"));
        let _u = Unlink(name.clone());
        let ring = ShmRing::create_named(&name, &config, CreateOptions::new()).expect("create");
        peer(&name, "header", seed);
        match ShmRing::open_named(&name) {
            Err(e @ Error::Attach(_)) => assert!(!e.to_string().is_empty()),
            other => panic!("header garbage gave {other:?}"),
        }
        drop(ring);
    }
    // Truncation: the size check refuses before anything is mapped; the old mapping notices.
    let name = unique_name("trunc");
    let _u = Unlink(name.clone());
    let ring = ShmRing::create_named(&name, &config, CreateOptions::new()).expect("create");
    peer(&name, "truncate", 0);
    match ShmRing::open_named(&name) {
        Err(e @ Error::SizeMismatch { actual: 100, .. }) => println!("  truncated: {e}"),
        other => panic!("truncation gave {other:?}"),
    }
    assert!(matches!(
        ring.check_len(),
        Err(Error::SizeMismatch { actual: 100, .. })
    ));
    drop(ring);
    // Slot, consumer-table and producer-line garbage under live endpoints: every operation
    // returns (an error or a message) within its timeout.
    let mut outcomes = std::collections::BTreeMap::<String, u32>::new();
    for seed in 1..=12u64 {
        let name = unique_name(&format!("slots{seed}"));
        let _u = Unlink(name.clone());
        let ring = ShmRing::create_named(&name, &config, CreateOptions::new()).expect("create");
        let mut p = ShmRing::producer(&ring).expect("producer");
        let mut gating = ShmRing::consumer(&ring, DeliveryClass::Gating).expect("consumer");
        let mut skip = ShmRing::consumer(&ring, DeliveryClass::SkipOnLag).expect("consumer");
        for i in 0..5u8 {
            p.publish(&[i; 40], SECS(1)).expect("publish");
        }
        peer(
            &name,
            if seed % 2 == 0 {
                "slot-headers"
            } else {
                "slots"
            },
            seed,
        );
        let t0 = Instant::now();
        let mut out = [0u8; 64];
        for _ in 0..10 {
            let r = p.publish(&[9; 40], Duration::from_millis(15));
            *outcomes
                .entry(format!("publish {:?}", r.map(|_| ())))
                .or_default() += 1;
            let r = gating.recv(&mut out, Duration::from_millis(15));
            *outcomes
                .entry(format!("copy {:?}", r.map(|_| ())))
                .or_default() += 1;
            let r = skip.recv_pinned(Duration::from_millis(15)).map(|m| m.len());
            *outcomes
                .entry(format!("pin {:?}", r.map(|_| ())))
                .or_default() += 1;
        }
        assert!(
            t0.elapsed() < SECS(10),
            "operations on a corrupt segment took {:?}",
            t0.elapsed()
        );
        let _ = p.reclaim_dead();
    }
    println!("  corrupt slots: {outcomes:?}");
}

/// Runs the corrupt-peer role against `name`.
fn peer(name: &ring_os::SegmentName, what: &str, seed: u64) {
    let mut c = Child::spawn(
        "corrupt-peer",
        &[
            ("RING_NAME", name.as_str().to_owned()),
            ("RING_WHAT", what.to_owned()),
            ("RING_SEED", seed.to_string()),
        ],
    );
    c.expect_line("DONE", SECS(10));
    assert!(c.wait(SECS(10)), "peer failed");
}

/// Test 5: a creation that cannot be backed returns `NoSpace` and leaves nothing behind.
pub fn no_space() {
    let vfs = rustix::fs::statvfs("/dev/shm").expect("statvfs /dev/shm");
    let available = vfs.f_bavail * vfs.f_frsize;
    let capacity = 1u32 << 30;
    let slots = u32::try_from(available / u64::from(capacity) + 2).expect("slot count");
    let config = Config::new(slots, capacity);
    let needed = Geometry::new(&config).expect("geometry").total_len() as u64;
    let name = unique_name("nospace");
    let _u = Unlink(name.clone());
    match ShmRing::create_named(&name, &config, CreateOptions::new()) {
        Err(e @ Error::NoSpace { .. }) => {
            let Error::NoSpace { needed: n, .. } = e else {
                unreachable!()
            };
            assert_eq!(n, needed);
            println!("  {e}");
        }
        other => panic!("expected NoSpace, got {other:?}"),
    }
    assert!(matches!(
        ShmRing::open_named(&name),
        Err(Error::NotFound { .. })
    ));
}

/// Test 6: a memfd ring passed over a Unix socket to another process works; an unsealed memfd
/// and a too-small one are refused by the receiver.
pub fn memfd() {
    let n = 20_000u64;
    let dir = std::env::temp_dir().join(format!("ring-os-mp-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("dir");
    let path = dir.join("sock");
    let listener = std::os::unix::net::UnixListener::bind(&path).expect("bind");
    listener.set_nonblocking(true).expect("nonblocking");
    let config = Config::new(16, 256).with_consumers(1);
    let ring = ShmRing::create_memfd(&config, CreateOptions::new()).expect("memfd ring");
    let mut child = Child::spawn(
        "memfd-consumer",
        &[
            ("RING_SOCK", path.display().to_string()),
            ("RING_N", n.to_string()),
        ],
    );
    let deadline = Instant::now() + SECS(20);
    let conn = loop {
        match listener.accept() {
            Ok((c, _)) => break c,
            Err(_) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(2)),
            Err(e) => panic!("no connection: {e}"),
        }
    };
    fdpass::send_fd(
        &conn,
        ring.segment().fd(),
        &(ring.segment().len() as u64).to_le_bytes(),
    )
    .expect("send ring");
    child.expect_line("READY", SECS(20));
    let mut p = ShmRing::producer(&ring).expect("producer");
    let mut buf = Vec::new();
    for i in 0..n {
        make_payload(i, 200, &mut buf);
        p.publish(&buf, SECS(10)).expect("publish");
    }
    let line = child.expect_line("RESULT", SECS(30));
    assert_eq!(field(&line, "received"), n);
    // Unsealed: a plain memfd of the right size.
    let unsealed = rustix::fs::memfd_create(
        "unsealed",
        rustix::fs::MemfdFlags::CLOEXEC | rustix::fs::MemfdFlags::ALLOW_SEALING,
    )
    .expect("memfd");
    rustix::fs::ftruncate(&unsealed, ring.segment().len() as u64).expect("size");
    fdpass::send_fd(&conn, unsealed.as_fd(), b"x").expect("send unsealed");
    let line = child.expect_line("", SECS(20));
    assert!(
        line.starts_with("REFUSED unsealed") && line.contains("seal"),
        "{line}"
    );
    // Sealed but too small to hold even a header.
    let small = ring_os::Segment::create_memfd(64, CreateOptions::new()).expect("small memfd");
    fdpass::send_fd(&conn, small.fd(), b"x").expect("send small");
    let line = child.expect_line("", SECS(20));
    assert!(line.starts_with("REFUSED small"), "{line}");
    assert!(child.wait(SECS(10)), "memfd consumer failed");
    let _ = std::fs::remove_dir_all(&dir);
    println!("  memfd: {n} messages across processes; bad descriptors refused");
}

/// Stale segments: a ring whose creator, producer and consumer were all one killed process is
/// listed as stale and removed by `clean`; a ring with a live owner is kept.
pub fn stale() {
    let dead_name = unique_name("stale-dead");
    let live_name = unique_name("stale-live");
    let _u1 = Unlink(dead_name.clone());
    let _u2 = Unlink(live_name.clone());
    let live = ShmRing::create_named(&live_name, &Config::new(4, 64), CreateOptions::new())
        .expect("create live");
    let mut child = Child::spawn("creator", &[("RING_NAME", dead_name.as_str().to_owned())]);
    child.expect_line("CREATED", SECS(20));
    let listed = ring_os::stale::list().expect("list");
    let find = |list: &[ring_os::stale::SegmentInfo], n: &ring_os::SegmentName| {
        list.iter().find(|i| &i.name == n).cloned()
    };
    let info = find(&listed, &dead_name).expect("listed");
    assert!(!info.is_stale(), "owner still alive: {info:?}");
    let ring_os::stale::Owners::Known(owners) = &info.owners else {
        panic!("{info:?}")
    };
    assert_eq!(owners.len(), 1, "creator = producer = consumer: {owners:?}");
    assert_eq!(ring_os::owner::pid_of(owners[0].0), child.pid());
    child.sigkill();
    assert!(!child.wait(SECS(5)), "a SIGKILLed child cannot succeed");
    let listed = ring_os::stale::list().expect("list");
    assert!(find(&listed, &dead_name).expect("listed").is_stale());
    assert!(!find(&listed, &live_name).expect("listed").is_stale());
    let report = ring_os::stale::clean().expect("clean");
    assert!(report.removed.contains(&dead_name), "{report:?}");
    assert!(!report.removed.contains(&live_name), "{report:?}");
    assert!(matches!(
        ShmRing::open_named(&dead_name),
        Err(Error::NotFound { .. })
    ));
    assert!(ShmRing::open_named(&live_name).is_ok());
    drop(live);
    println!(
        "  stale: removed {} segment(s), kept {}",
        report.removed.len(),
        report.kept.len()
    );
}
