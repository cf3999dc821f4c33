//! Never-stall rings across processes (`RingBuilder::never_stall`): this process publishes
//! 1080p frames as fast as it can while a reader in another process pins them for a long
//! time. A latest-only reader's pins must never make the producer fail a claim; a gating
//! reader must still hold it back.
//!
//! Every frame is checkable whole: each 4 KiB page starts with the frame's sequence number
//! and is filled with its low byte, so a frame overwritten (even in part) while pinned is seen.

use std::io::Write as _;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use ring_core::{ClaimError, DeliveryClass, Memory as _, ReadError};
use ring_os::{
    raw::{SegmentName, ShmRing},
    Ring,
};

use crate::support::{child_env, child_ring_name, field, unique_name, Child};

/// A 1080p BGRA frame.
const FRAME: usize = 1920 * 1080 * 4;
/// Slots of the rings: the newest frame, the next one, and up to 4 pins.
const SLOTS: u32 = 6;
/// The pattern's page.
const PAGE: usize = 4096;

/// Writes frame `seq` into `buf` (one memset and a stamp per page: cheap in debug builds).
fn fill(buf: &mut [u8], seq: u64) {
    for page in buf.chunks_mut(PAGE) {
        page[8..].fill(seq as u8);
        page[..8].copy_from_slice(&seq.to_le_bytes());
    }
}

/// Whether `buf` holds frame `seq` whole and untorn.
fn intact(buf: &[u8], seq: u64) -> bool {
    let filler = [seq as u8; PAGE];
    buf.len() == FRAME
        && buf
            .chunks(PAGE)
            .all(|page| page[..8] == seq.to_le_bytes() && page[8..] == filler[8..page.len()])
}

/// What the producer saw while the reader ran.
struct Run {
    /// Frames published.
    published: u64,
    /// Claims refused because readers pinned the slots.
    pinned: u64,
    /// Claims refused because a gating reader (or group) had not read far enough.
    full: u64,
    /// Frames published between the reader's `HELD` line and its `DONE` line.
    during_hold: u64,
    /// The reader's `DONE` line.
    done: String,
}

/// Publishes frames into `ring` as fast as it can until `reader` prints `DONE`, counting every
/// claim that failed and why.
fn produce(ring: &Ring, reader: &Child) -> Run {
    let mut p = ShmRing::producer(ring.mapping()).expect("producer");
    reader.expect_line("READY", Duration::from_secs(20));
    let (mut pinned, mut full) = (0u64, 0u64);
    let mut held_at = None;
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        for line in reader.drain() {
            if line.starts_with("HELD") {
                held_at = Some(p.published());
            }
            if line.starts_with("ERR") {
                panic!("reader: {line}");
            }
            if line.starts_with("DONE") {
                let published = p.published();
                return Run {
                    published,
                    pinned,
                    full,
                    during_hold: held_at.map_or(0, |h| published - h),
                    done: line,
                };
            }
        }
        assert!(Instant::now() < deadline, "the reader never finished");
        match p.try_claim() {
            Ok(mut w) => {
                let seq = w.seq();
                fill(w.loan(FRAME).expect("loan a frame"), seq);
                w.publish().expect("publish");
            }
            Err(ClaimError::Pinned { .. }) => {
                pinned += 1;
                std::thread::yield_now();
            }
            Err(ClaimError::Full { .. }) => {
                full += 1;
                std::thread::yield_now();
            }
            Err(e) => panic!("claim: {e}"),
        }
    }
}

/// A never-stall ring named after `tag`, a frame-grabber reading it as `class` and holding
/// pins by `mode`, and the producer's run against it: checks that the reader found no frame
/// torn, then `check`s the run, then that the reader exits cleanly (the ring outlives its last
/// read).
fn scenario(tag: &str, class: &str, mode: &str, check: impl FnOnce(&Run)) {
    let name = unique_name(tag);
    let ring = create(&name);
    let mut reader = grabber(&name, class, mode);
    let run = produce(&ring, &reader);
    assert_eq!(field(&run.done, "torn"), 0, "{}", run.done);
    check(&run);
    assert!(reader.wait(Duration::from_secs(20)), "the reader failed");
}

/// A pin-only never-stall ring of 6 1080p slots (pin-only: the producer writes in place).
fn create(name: &SegmentName) -> Ring {
    Ring::builder(name.as_str())
        .slots(SLOTS)
        .slot_size(FRAME as u32)
        .consumers(4)
        .pin_only(true)
        .never_stall(4)
        .create()
        .expect("create a never-stall ring")
}

fn grabber(name: &SegmentName, class: &str, mode: &str) -> Child {
    Child::spawn(
        "frame-grabber",
        &[
            ("RING_NAME", name.as_str().to_owned()),
            ("RING_CLASS", class.to_owned()),
            ("GRAB_MODE", mode.to_owned()),
        ],
    )
}

/// A latest-only reader in another process holds each frame it pins for 10 ms: the producer
/// never fails a claim, every frame the reader gets is at least as new as the newest published
/// when it asked, and none is torn.
pub fn latest_only_pins_never_stall() {
    scenario("nostall-each", "latest", "each", |run| {
        assert_eq!(
            field(&run.done, "stale"),
            0,
            "a frame older than the newest one published when the reader asked: {}",
            run.done
        );
        assert_eq!(field(&run.done, "frames"), GRABS, "{}", run.done);
        assert_eq!(
            (run.pinned, run.full),
            (0, 0),
            "the producer waited for the reader's pins ({} frames published)",
            run.published
        );
        // The reader held frames for at least GRABS * 10 ms: a producer that waited on each pin
        // would have published about one frame per grab.
        assert!(
            run.published > 2 * GRABS,
            "only {} frames published during {GRABS} grabs",
            run.published
        );
    });
}

/// One latest-only reader holds 4 frames at once for a second (6 slots = 4 pins + 2): the
/// producer goes on publishing meanwhile without a failed claim, and the 4 frames stay intact.
pub fn four_pins_for_a_second_never_stall() {
    scenario("nostall-four", "latest", "four", |run| {
        assert_eq!(field(&run.done, "frames"), 4, "{}", run.done);
        assert_eq!(
            (run.pinned, run.full),
            (0, 0),
            "the producer waited for the reader's 4 pins"
        );
        assert!(
            run.during_hold >= 4 * u64::from(SLOTS),
            "only {} frames published while 4 were held for a second",
            run.during_hold
        );
    });
}

/// The same ring with a gating reader that holds each frame for 10 ms: it still holds the
/// producer back (it may be at most the ring's slots ahead of the reader), and it reads every
/// frame in order, none torn.
pub fn gating_reader_still_holds_the_producer_back() {
    scenario("nostall-gating", "gating", "each", |run| {
        assert_eq!(field(&run.done, "stale"), 0, "out of order: {}", run.done);
        let frames = field(&run.done, "frames");
        assert_eq!(frames, GRABS, "{}", run.done);
        assert!(run.full > 0, "a gating reader never held the producer back");
        assert!(
            run.published <= frames + u64::from(SLOTS),
            "the producer ran {} frames ahead of a gating reader that read {frames}",
            run.published
        );
    });
}

/// Frames a `each` grabber takes.
const GRABS: u64 = 40;

/// Prints a line and flushes it at once (the parent waits for it).
fn say(line: &str) {
    println!("{line}");
    let _ = std::io::stdout().flush();
}

/// Child role `frame-grabber`: `GRAB_MODE=each` holds `GRABS` frames one at a time for 10 ms
/// each; `four` holds 4 frames at once for a second. Checks every frame whole after its hold;
/// prints `DONE frames= torn= stale=` (stale: a latest-only frame older than the newest
/// published when it asked, or a gating frame out of order), then lingers so that a gating
/// reader keeps holding the producer back until the parent has read the line.
pub fn grabber_role() -> i32 {
    let name = child_ring_name();
    let class = match child_env("RING_CLASS").as_str() {
        "gating" => DeliveryClass::Gating,
        _ => DeliveryClass::LatestOnly,
    };
    let ring = ShmRing::open_named(&name).expect("open");
    let mut c = ShmRing::consumer(&ring, class).expect("register");
    say("READY");
    let deadline = Instant::now() + Duration::from_secs(20);
    let (mut frames, mut torn, mut stale) = (0u64, 0u64, 0u64);
    let mut next = 0u64;
    // Holds the next frame: the newest (latest-only) or the next in order (gating).
    let mut hold = |c: &mut ring_os::raw::ShmConsumer, stale: &mut u64| loop {
        // Acquire: the head is stored after the newest frame's stamp (and route).
        let head = ring.producer_line().head.load(Ordering::Acquire);
        match c.try_hold() {
            Ok(h) => {
                let fresh = match class {
                    DeliveryClass::Gating => h.seq() == next,
                    _ => h.seq() + 1 >= head,
                };
                if !fresh {
                    *stale += 1;
                }
                next = h.seq() + 1;
                return Some(h);
            }
            Err(ReadError::Empty | ReadError::Lagging) => {
                if Instant::now() > deadline {
                    say("ERR no frame within 20 s");
                    return None;
                }
                std::thread::yield_now();
            }
            Err(e) => {
                say(&format!("ERR {e}"));
                return None;
            }
        }
    };
    if child_env("GRAB_MODE") == "four" {
        let mut held = Vec::new();
        while held.len() < 4 {
            let Some(h) = hold(&mut c, &mut stale) else {
                return 2;
            };
            held.push(h);
        }
        say("HELD");
        std::thread::sleep(Duration::from_secs(1));
        for h in held {
            if !c.held_bytes(&h).is_some_and(|b| intact(b, h.seq())) {
                torn += 1;
            }
            frames += 1;
            c.release(h).expect("release");
        }
    } else {
        for _ in 0..GRABS {
            let Some(h) = hold(&mut c, &mut stale) else {
                return 2;
            };
            std::thread::sleep(Duration::from_millis(10));
            if !c.held_bytes(&h).is_some_and(|b| intact(b, h.seq())) {
                torn += 1;
            }
            frames += 1;
            c.release(h).expect("release");
        }
    }
    say(&format!("DONE frames={frames} torn={torn} stale={stale}"));
    std::thread::sleep(Duration::from_millis(500));
    0
}
