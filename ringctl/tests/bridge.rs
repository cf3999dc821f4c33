//! `ringctl bridge out` / `ringctl bridge in` end to end over `tcp/127.0.0.1`: this test
//! process is the origin ring's producer and the far ring's subscriber; two `ringctl bridge`
//! processes carry the stream through Zenoh in between.
//!
//! Every wait has a deadline, every ring name carries the pid, every port is picked free.
#![allow(
    clippy::std_instead_of_core,
    clippy::std_instead_of_alloc,
    reason = "std test crate"
)]

use std::io::{BufRead as _, BufReader};
use std::process::{Child, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use ring_core::ReadError;
use ring_os::prelude::*;
use ring_os::raw::{ConsumerExt as _, ProducerExt as _, ShmReadError};
use serde_json::Value;

mod common;

use common::{eventually, finish, free_port, spawn, unique, Cleanup};

const SECS: fn(u64) -> Duration = Duration::from_secs;

/// A `ringctl bridge` process and its stdout lines.
struct Bridge {
    child: Child,
    lines: Receiver<String>,
    last: Option<String>,
}

impl Bridge {
    fn spawn(args: &[&str]) -> Self {
        let args: Vec<&str> = ["bridge"].iter().chain(args).copied().collect();
        let mut child = spawn(&args, Stdio::null(), Stdio::piped(), Stdio::inherit());
        let stdout = child.stdout.take().expect("stdout");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        let mut b = Self {
            child,
            lines,
            last: None,
        };
        b.expect_ready(SECS(60));
        b
    }

    fn expect_ready(&mut self, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) if line.starts_with("ready") => return,
                Ok(_) => {}
                Err(_) => panic!("ringctl bridge printed no ready line within {timeout:?}"),
            }
        }
    }

    fn sigkill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Waits for the exit; returns its status and the JSON counts (the last line).
    fn finish(mut self, timeout: Duration) -> (bool, Value) {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                while let Ok(line) = self.lines.recv_timeout(Duration::from_millis(500)) {
                    self.last = Some(line);
                }
                let json = self
                    .last
                    .as_deref()
                    .and_then(|l| serde_json::from_str(l).ok())
                    .unwrap_or(Value::Null);
                return (status.success(), json);
            }
            while let Ok(line) = self.lines.try_recv() {
                self.last = Some(line);
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                panic!("ringctl bridge did not end within {timeout:?}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Bridge {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn mix(mut x: u64) -> u64 {
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// Message `index`: a length fixed by the index (8..=max), bytes fixed by the index, and its
/// checksum in meta word 1 (meta word 0 is the index).
fn message(index: u64, max: usize, buf: &mut Vec<u8>) -> [u64; 2] {
    let len = 8 + (mix(index) as usize) % (max - 7);
    buf.clear();
    buf.extend((0..len).map(|i| (mix(index ^ ((i as u64) << 40)) >> 56) as u8));
    [index, checksum(buf)]
}

fn checksum(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// Checks a received message against what `message` made for its index.
fn check_message(meta: [u64; 2], data: &[u8], max: usize, scratch: &mut Vec<u8>) {
    let want = message(meta[0], max, scratch);
    assert_eq!(want, meta, "metadata of message {}", meta[0]);
    assert_eq!(&scratch[..], data, "torn message {}", meta[0]);
}

/// The far ring's reader: every message checked; stops at the close (or the deadline).
/// Returns the indices received, in order.
fn far_reader(
    mut sub: Subscriber,
    max: usize,
    progress: Arc<AtomicU64>,
    deadline: Duration,
) -> JoinHandle<(Vec<u64>, u64)> {
    std::thread::spawn(move || {
        let end = Instant::now() + deadline;
        let mut buf = vec![0u8; max];
        let mut scratch = Vec::new();
        let mut got = Vec::new();
        let mut gone = 0;
        loop {
            assert!(Instant::now() < end, "the far ring was not closed in time");
            match sub.inner().recv(&mut buf, Duration::from_millis(200)) {
                Ok(c) => {
                    check_message(c.meta, &buf[..c.len], max, &mut scratch);
                    got.push(c.meta[0]);
                    progress.store(got.len() as u64, Ordering::Relaxed);
                }
                Err(ShmReadError::Read(ReadError::Closed)) => return (got, gone),
                // A killed bridge: its successor takes the ring over (docs/OS.md).
                Err(ShmReadError::ProducerGone) => gone += 1,
                Err(ShmReadError::Read(
                    ReadError::Timeout | ReadError::Empty | ReadError::Lagging,
                )) => {}
                Err(e) => panic!("far reader: {e}"),
            }
        }
    })
}

fn wait_until(what: &str, timeout: Duration, cond: impl FnMut() -> bool) {
    assert!(eventually(timeout, cond), "{what}: not within {timeout:?}");
}

/// The two rings a pair of bridges connects (an origin the test publishes into, a far ring it
/// reads), and the Zenoh endpoint and key between them.
struct Rings {
    origin: Ring,
    far: Ring,
    origin_name: String,
    far_name: String,
    ep: String,
    key: String,
    /// Declared last, so the names go after the rings are dropped.
    _unlink: (Cleanup, Cleanup),
}

impl Rings {
    /// Two rings named after `what` of `slots` slots of `slot_size` bytes, and a free port.
    fn new(what: &str, slots: u32, slot_size: usize) -> Self {
        let (origin_name, far_name) = (
            unique(&format!("{what}-origin")),
            unique(&format!("{what}-far")),
        );
        let _unlink = (Cleanup(origin_name.clone()), Cleanup(far_name.clone()));
        let ring = |name: &str| {
            Ring::builder(name)
                .slots(slots)
                .slot_size(slot_size as u32)
                .create()
                .expect("ring")
        };
        Self {
            origin: ring(&origin_name),
            far: ring(&far_name),
            ep: format!("tcp/127.0.0.1:{}", free_port()),
            key: format!("test/{origin_name}"),
            origin_name,
            far_name,
            _unlink,
        }
    }

    /// `ringctl bridge in`'s arguments: the key into the far ring, once one consumer is there.
    fn in_args(&self) -> [&str; 7] {
        [
            "in",
            &self.key,
            &self.far_name,
            "--connect",
            &self.ep,
            "--wait-consumers",
            "1",
        ]
    }

    /// `ringctl bridge out`'s arguments: the origin ring to the key, with `class` (the
    /// origin's delivery class) unless it is `None` (gating).
    fn out_args<'a>(&'a self, class: Option<&'a str>) -> Vec<&'a str> {
        let mut args = vec!["out", &self.origin_name, "--key", &self.key];
        if let Some(class) = class {
            args.extend(["--class", class]);
        }
        args.extend(["--listen", &self.ep]);
        args
    }

    /// The far ring's gating reader ([`far_reader`]).
    fn far_reader(&self, max: usize, progress: &Arc<AtomicU64>) -> JoinHandle<(Vec<u64>, u64)> {
        let sub = self.far.subscriber(DeliveryClass::Gating).expect("far sub");
        far_reader(sub, max, Arc::clone(progress), SECS(240))
    }
}

/// Publishes message `index` ([`message`]) into the origin ring, waiting for room at most a
/// minute; `what` says why room must come.
fn publish_message(
    publisher: &mut Publisher,
    index: u64,
    max: usize,
    buf: &mut Vec<u8>,
    what: &str,
) {
    let meta = message(index, max, buf);
    publisher
        .inner()
        .claim_with(SECS(60), |mut slot| {
            slot.write(buf).expect("fits");
            slot.set_meta(meta);
            slot.publish()
        })
        .expect(what)
        .expect("publish");
}

#[test]
fn gating_100k_mixed_sizes_arrive_whole_in_order() {
    const N: u64 = 100_000;
    const MAX: usize = 2048;
    let t0 = Instant::now();
    let rings = Rings::new("g", 256, MAX);
    let progress = Arc::new(AtomicU64::new(0));
    let reader = rings.far_reader(MAX, &progress);
    let inb = Bridge::spawn(&rings.in_args());
    let out = Bridge::spawn(&rings.out_args(None));
    let mut publisher = rings.origin.publisher().expect("origin publisher");
    assert!(publisher.wait_for_subscribers(1, SECS(30)));
    let mut buf = Vec::new();
    for i in 0..N {
        let why = "claim (the bridge holds the ring back at most while the far side is slow)";
        publish_message(&mut publisher, i, MAX, &mut buf, why);
    }
    publisher.close();
    let (got, _) = reader.join().expect("far reader");
    assert_eq!(got.len() as u64, N, "lost messages");
    assert!(got.iter().copied().eq(0..N), "out of order");
    let (ok, o) = out.finish(SECS(30));
    assert!(ok, "bridge out failed: {o}");
    assert_eq!(
        (o["end"].as_str(), o["forwarded"].as_u64()),
        (Some("closed"), Some(N))
    );
    let (ok, i) = inb.finish(SECS(30));
    assert!(ok, "bridge in failed: {i}");
    assert_eq!(i["written"].as_u64(), Some(N), "{i}");
    assert_eq!(i["missed"].as_u64(), Some(0), "{i}");
    assert_eq!(i["rejected"].as_u64(), Some(0), "{i}");
    // A stream of 10^5 small messages finds several ready at once somewhere: they travel as
    // batch samples, counted the same on both sides.
    let batches = o["batches"].as_u64().unwrap_or(0);
    assert!(batches > 0, "no batch sample: {o}");
    assert_eq!(i["batches"].as_u64(), Some(batches), "{i}");
    println!(
        "gating: {N} messages of 8..{MAX} B across the bridge in {:.1?}, {batches} batch samples",
        t0.elapsed()
    );
}

/// A 1080p BGRA frame: word `w` is `mix(index) + w * GOLDEN`; meta word 0 is the index.
fn fill_frame(index: u64, frame: &mut [u8]) {
    let seed = mix(index);
    for (w, chunk) in frame.chunks_exact_mut(8).enumerate() {
        let v = seed.wrapping_add((w as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15));
        chunk.copy_from_slice(&v.to_le_bytes());
    }
}

fn frame_whole(index: u64, frame: &[u8]) -> bool {
    let seed = mix(index);
    frame.chunks_exact(8).enumerate().all(|(w, chunk)| {
        let v = seed.wrapping_add((w as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15));
        chunk == v.to_le_bytes()
    })
}

#[test]
fn latest_1080p_frames_at_30_fps_whole_and_skips_counted() {
    const FRAME: usize = 1920 * 1080 * 4;
    const FRAMES: u64 = 90; // 3 s at 30 fps
    let rings = Rings::new("l", 4, FRAME);
    let mut far_sub = rings
        .far
        .subscriber(DeliveryClass::LatestOnly)
        .expect("far sub");
    let reader = std::thread::spawn(move || {
        let end = Instant::now() + SECS(120);
        let (mut delivered, mut last) = (0u64, None::<u64>);
        loop {
            assert!(Instant::now() < end, "the far ring was not closed in time");
            let closed = {
                let read = far_sub.inner().recv_pinned(Duration::from_millis(200));
                let closed = matches!(read, Err(ShmReadError::Read(ReadError::Closed)));
                match read {
                    Ok(p) => {
                        let index = p.meta()[0];
                        assert_eq!(p.len(), FRAME);
                        assert!(frame_whole(index, p.bytes()), "torn frame {index}");
                        assert!(
                            last.is_none_or(|l| index > l),
                            "frame {index} after {last:?}"
                        );
                        last = Some(index);
                        delivered += 1;
                    }
                    Err(ShmReadError::Read(
                        ReadError::Closed
                        | ReadError::Timeout
                        | ReadError::Empty
                        | ReadError::Lagging,
                    )) => {}
                    Err(e) => panic!("far reader: {e}"),
                }
                closed
            };
            if closed {
                return (delivered, far_sub.missed());
            }
        }
    });
    let inb = Bridge::spawn(&rings.in_args());
    let out = Bridge::spawn(&rings.out_args(Some("latest")));
    let mut publisher = rings.origin.publisher().expect("origin publisher");
    assert!(publisher.wait_for_subscribers(1, SECS(30)));
    let mut frame = vec![0u8; FRAME];
    let start = Instant::now();
    for i in 0..FRAMES {
        fill_frame(i, &mut frame);
        publisher
            .inner()
            .claim_with(SECS(30), |mut slot| {
                slot.write(&frame).expect("fits");
                slot.set_meta([i, 0]);
                slot.publish()
            })
            .expect("claim")
            .expect("publish");
        // 30 fps: frame i leaves at i/30 s (a late frame is not made up for by a burst).
        let due = start + Duration::from_secs_f64((i + 1) as f64 / 30.0);
        std::thread::sleep(due.saturating_duration_since(Instant::now()));
    }
    publisher.close();
    let (delivered, far_missed) = reader.join().expect("far reader");
    let (ok, o) = out.finish(SECS(30));
    assert!(ok, "bridge out failed: {o}");
    let (ok, i) = inb.finish(SECS(30));
    assert!(ok, "bridge in failed: {i}");
    let written = i["written"].as_u64().expect("written");
    let missed = i["missed"].as_u64().expect("missed");
    println!(
        "latest: {FRAMES} frames at 30 fps: bridge out forwarded {} (skipped {}), far ring got \
         {written} (bridge counted {missed} not forwarded), far reader {delivered} whole \
         (skipped {far_missed})",
        o["forwarded"], o["missed"]
    );
    assert!(delivered >= 3, "only {delivered} frames arrived");
    // Every frame is accounted for: written to the far ring or counted as not forwarded.
    assert_eq!(written + missed, FRAMES, "{i}");
    // The sending side's own skips are part of what the far side counted.
    assert!(i["missed_upstream"].as_u64() <= Some(missed), "{i}");
    assert_eq!(
        o["missed"].as_u64(),
        i["missed_upstream"].as_u64(),
        "{o} {i}"
    );
    // And the far reader's view adds up with the far ring's.
    assert_eq!(delivered + far_missed, written);
}

#[test]
fn sigkill_of_either_bridge_recovers_and_a_restarted_bridge_continues() {
    const N: u64 = 30_000;
    const MAX: usize = 512;
    let rings = Rings::new("k", 64, MAX);
    let progress = Arc::new(AtomicU64::new(0));
    let reader = rings.far_reader(MAX, &progress);
    let (in_args, out_args) = (rings.in_args(), rings.out_args(None));
    let inb = Bridge::spawn(&in_args);
    let out = Bridge::spawn(&out_args);
    // The producer, paced (~5000 messages/s) so that the stream outlives the restarts.
    let published = Arc::new(AtomicU64::new(0));
    let producer = {
        let published = Arc::clone(&published);
        let mut publisher = rings.origin.publisher().expect("origin publisher");
        assert!(publisher.wait_for_subscribers(1, SECS(30)));
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            for i in 0..N {
                // A dead bridge-out is reclaimed within a wait slice (ring-os recovery); a
                // dead bridge-in holds the ring back (backpressure) until its successor runs.
                let why = "the origin ring recovers from a killed bridge";
                publish_message(&mut publisher, i, MAX, &mut buf, why);
                published.store(i + 1, Ordering::Relaxed);
                if i % 10 == 0 {
                    std::thread::sleep(Duration::from_millis(2));
                }
            }
            publisher.close();
        })
    };
    // 1. Kill the receiving bridge mid-stream; the far reader sees ProducerGone, the sending
    //    bridge pauses (nothing matches), the origin producer is held back by its full ring.
    wait_until("first messages", SECS(60), || {
        progress.load(Ordering::Relaxed) >= 3_000
    });
    inb.sigkill();
    std::thread::sleep(Duration::from_millis(500));
    let held = published.load(Ordering::Relaxed);
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        published.load(Ordering::Relaxed) <= held + 64,
        "the origin producer ran on while the far side was down (gating)"
    );
    let before_restart = progress.load(Ordering::Relaxed);
    let inb = Bridge::spawn(&in_args); // takes the far ring over from the dead bridge
    wait_until("messages after the restart of bridge in", SECS(60), || {
        progress.load(Ordering::Relaxed) >= before_restart + 3_000
    });
    // 2. Kill the sending bridge mid-stream: the origin producer reclaims its entry and runs on
    //    (what it publishes meanwhile is not forwarded, and counted by the far side).
    out.sigkill();
    let dead_at = published.load(Ordering::Relaxed);
    wait_until("the origin producer recovers", SECS(30), || {
        published.load(Ordering::Relaxed) >= dead_at + 200
    });
    let out = Bridge::spawn(&out_args);
    let (got, gone) = reader.join().expect("far reader");
    producer.join().expect("producer");
    let (ok, o) = out.finish(SECS(30));
    assert!(ok, "restarted bridge out failed: {o}");
    let (ok, i) = inb.finish(SECS(30));
    assert!(ok, "restarted bridge in failed: {i}");
    assert!(
        gone > 0,
        "the far reader never saw the killed bridge's ProducerGone"
    );
    assert!(
        got.windows(2).all(|w| w[0] < w[1]),
        "out of order or duplicated"
    );
    assert_eq!(
        got.last(),
        Some(&(N - 1)),
        "the stream did not reach its end"
    );
    // Gaps the far reader saw after the restarted bridge-in's first message: exactly what
    // that bridge counted as not forwarded (the sending bridge's death).
    let first_after = before_restart as usize;
    let gaps_after: u64 = got[first_after..].windows(2).map(|w| w[1] - w[0] - 1).sum();
    assert_eq!(i["missed"].as_u64(), Some(gaps_after), "{i}");
    assert!(gaps_after > 0, "killing the sending bridge lost nothing?");
    assert_eq!(i["resumes"].as_u64(), Some(1), "{i}");
    let lost_in_flight = got[first_after] - got[first_after - 1] - 1;
    println!(
        "kill: far ring got {} of {N}; lost in flight when bridge in died: {lost_in_flight}; \
         not forwarded while bridge out was dead: {gaps_after} (counted by the bridge)",
        got.len()
    );
}

#[test]
fn bad_bridge_arguments_are_one_line_errors() {
    let run = |args: &[&str]| {
        let args: Vec<&str> = ["bridge"].iter().chain(args).copied().collect();
        let child = spawn(&args, Stdio::null(), Stdio::null(), Stdio::piped());
        let out = finish(child, SECS(60));
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let missing = unique("missing");
    let (code, err) = run(&["out", &missing, "--key", "k", "--timeout", "0.2"]);
    assert_eq!(code, Some(2), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    let far = unique("bad-endpoint");
    let _u = Cleanup(far.clone());
    let (code, err) = run(&["in", "k", &far, "--slot-size", "64", "--listen", "nonsense"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("listen/endpoints"), "{err}");
    let (code, err) = run(&["in", "bad key ?", &far, "--slot-size", "64"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("key expression"), "{err}");
}
