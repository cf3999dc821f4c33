//! The parent side of the segment scenarios (issue 3, tests 4-6, and stale-segment cleanup).

#[cfg(unix)]
#[cfg_attr(
    target_os = "macos",
    allow(unused_imports, reason = "memfd tests are not built on macOS")
)]
use std::os::fd::AsFd as _;
use std::time::{Duration, Instant};

#[cfg(unix)]
use ring_core::Geometry;
use ring_core::{Config, DeliveryClass};
#[cfg(unix)]
#[cfg_attr(
    target_os = "macos",
    allow(unused_imports, reason = "memfd tests are not built on macOS")
)]
use ring_os::raw::fdpass;
use ring_os::{
    raw::{ConsumerExt as _, CreateOptions, ProducerExt as _, ShmRing},
    Error,
};

#[cfg(unix)]
use crate::support::clean_only;
#[cfg(unix)]
#[cfg_attr(
    target_os = "macos",
    allow(unused_imports, reason = "memfd tests are not built on macOS")
)]
use crate::support::{field, publish_payloads};
use crate::support::{unique_name, Child, Unlink};

const SECS: fn(u64) -> Duration = Duration::from_secs;

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
    truncation(&config);
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

/// Truncation: the size check refuses before anything is mapped; the old mapping notices.
#[cfg(unix)]
fn truncation(config: &Config) {
    let name = unique_name("trunc");
    let _u = Unlink(name.clone());
    let ring = ShmRing::create_named(&name, config, CreateOptions::new()).expect("create");
    peer(&name, "truncate", 0);
    match ShmRing::open_named(&name) {
        Err(e @ Error::SizeMismatch { actual: 100, .. }) => println!("  truncated: {e}"),
        other => panic!("truncation gave {other:?}"),
    }
    assert!(matches!(
        ring.check_len(),
        Err(Error::Truncated {
            actual: Some(100),
            ..
        })
    ));
    drop(ring);
}

/// Windows: a peer cannot truncate a mapped file segment at all (`ERROR_USER_MAPPED_FILE`), and
/// a section has no size to change; the ring keeps its length.
#[cfg(windows)]
fn truncation(config: &Config) {
    let path = std::env::temp_dir().join(format!("mp-trunc-{}.ring", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let ring = ShmRing::create_file(&path, config, CreateOptions::new()).expect("create");
    let mut c = Child::spawn(
        "truncate-file",
        &[("RING_PATH", path.display().to_string())],
    );
    let line = c.expect_line("TRUNCATE", SECS(10));
    assert!(c.wait(SECS(10)), "peer failed");
    assert!(line.starts_with("TRUNCATE REFUSED"), "{line}");
    ring.check_len().expect("the length is intact");
    let again = ShmRing::open_file(&path).expect("reopen");
    assert_eq!(again.segment().len(), ring.segment().len());
    println!("  truncation: {line}");
    drop((ring, again));
    let _ = std::fs::remove_file(&path);
}

/// Runs the corrupt-peer role against `name`.
fn peer(name: &ring_os::raw::SegmentName, what: &str, seed: u64) {
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
#[cfg(unix)]
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
#[cfg(all(unix, not(target_os = "macos")))]
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
    publish_payloads(&mut p, n);
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
    let small = ring_os::raw::Segment::create_memfd(64, CreateOptions::new()).expect("small memfd");
    fdpass::send_fd(&conn, small.fd(), b"x").expect("send small");
    let line = child.expect_line("", SECS(20));
    assert!(line.starts_with("REFUSED small"), "{line}");
    assert!(child.wait(SECS(10)), "memfd consumer failed");
    let _ = std::fs::remove_dir_all(&dir);
    println!("  memfd: {n} messages across processes; bad descriptors refused");
}

/// Stale segments: a ring whose creator, producer and consumer were all one killed process is
/// listed as stale and removed by `clean`; a ring with a live owner is kept.
#[cfg(unix)]
pub fn stale() {
    let dead_name = unique_name("stale-dead");
    let live_name = unique_name("stale-live");
    let _u1 = Unlink(dead_name.clone());
    let _u2 = Unlink(live_name.clone());
    let live = ShmRing::create_named(&live_name, &Config::new(4, 64), CreateOptions::new())
        .expect("create live");
    let mut child = Child::spawn("creator", &[("RING_NAME", dead_name.as_str().to_owned())]);
    child.expect_line("CREATED", SECS(20));
    let listed = ring_os::raw::stale::list().expect("list");
    let find = |list: &[ring_os::raw::stale::SegmentInfo], n: &ring_os::raw::SegmentName| {
        list.iter().find(|i| &i.name == n).cloned()
    };
    let info = find(&listed, &dead_name).expect("listed");
    assert!(!info.is_stale(), "owner still alive: {info:?}");
    let ring_os::raw::stale::Owners::Known(owners) = &info.owners else {
        panic!("{info:?}")
    };
    assert_eq!(owners.len(), 3, "creator, producer, consumer: {owners:?}");
    for p in owners {
        let id = ring_core::OwnerId::new(p.owner).expect("recorded");
        assert_eq!(ring_os::raw::owner::pid_of(id), child.pid(), "{p:?}");
        assert_eq!(p.liveness, ring_os::raw::lock::Liveness::Alive, "{p:?}");
    }
    child.sigkill();
    assert!(!child.wait(SECS(5)), "a SIGKILLed child cannot succeed");
    let listed = ring_os::raw::stale::list().expect("list");
    assert!(find(&listed, &dead_name).expect("listed").is_stale());
    assert!(!find(&listed, &live_name).expect("listed").is_stale());
    let report = clean_only(&[&dead_name, &live_name]);
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
