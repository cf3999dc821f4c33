//! Windows-only scenarios: what the kernel reports about a terminated role holder, and a
//! consumer parked in another process woken through the segment's semaphore.

use core::sync::atomic::{AtomicU32, Ordering};
use std::io::Write as _;
use std::time::{Duration, Instant};

use ring_core::inspect::producer_info;
use ring_core::Config;
use ring_os::raw::lock::{Role, State};
use ring_os::raw::{CreateOptions, Segment, ShmRing, SizeCheck};

use crate::support::{child_env_parsed, child_ring_name, unique_name, Child};

const SECS: fn(u64) -> Duration = Duration::from_secs;

/// A child takes the producer role and is terminated (`TerminateProcess`): the role's mutex
/// then reports *abandoned* — the kernel's word, no pid involved — and a new producer takes over.
pub fn abandoned() {
    let name = unique_name("abandon");
    let ring =
        ShmRing::create_named(&name, &Config::new(8, 64), CreateOptions::new()).expect("create");
    let roles = ring.segment().roles();
    for round in 0..5 {
        let mut c = Child::spawn("hold-producer", &[("RING_NAME", name.as_str().to_owned())]);
        c.expect_line("HELD", SECS(20));
        assert_eq!(roles.state(Role::Producer).expect("state"), State::Held);
        c.child.kill().expect("TerminateProcess");
        let status = c.child.wait().expect("wait");
        assert!(!status.success());
        // The first look after the death sees the abandonment itself.
        assert_eq!(
            roles.state(Role::Producer).expect("state"),
            State::Abandoned,
            "round {round}"
        );
        let epoch = producer_info(&*ring).epoch;
        let p = ShmRing::producer(&ring).expect("take over from the terminated producer");
        assert_eq!(producer_info(&*ring).epoch, epoch + 1, "round {round}");
        drop(p);
    }
    println!("  abandoned: 5 terminated producers reported abandoned and taken over");
}

/// A child parks on a word of a named segment (20 s timeout); the parent changes the word and
/// wakes it: it must wake long before its timeout.
pub fn cross_process_wake() {
    let name = unique_name("wake");
    let seg = Segment::create_named(&name, 4096, CreateOptions::new()).expect("create");
    let mut worst = Duration::ZERO;
    for round in 0..5u32 {
        let c = Child::spawn(
            "park-word",
            &[
                ("RING_NAME", name.as_str().to_owned()),
                ("RING_EXPECT", round.to_string()),
            ],
        );
        c.expect_line("PARKING", SECS(20));
        // Give it time to sleep (the handshake is correct either way).
        std::thread::sleep(Duration::from_millis(100));
        let t0 = Instant::now();
        // Release: pairs with the waiter's Acquire re-check.
        word(&seg).store(round + 1, Ordering::Release);
        let _ = ring_os::raw::futex::wake_all(word(&seg));
        let line = c.expect_line("WOKEN", SECS(10));
        worst = worst.max(t0.elapsed());
        assert!(line.contains("Woken") || line.contains("Changed"), "{line}");
    }
    assert!(worst < SECS(5), "a parked peer took {worst:?} to wake");
    println!("  cross-process wake: worst {worst:.2?}");
}

/// The word the wake scenario parks on (offset 64 of the segment).
fn word(seg: &Segment) -> &AtomicU32 {
    // SAFETY: offset 64 is 4-aligned and inside the (at least 4096-byte) view, which lives as
    // long as the borrow of `seg`; every access to it is atomic.
    unsafe { AtomicU32::from_ptr(seg.as_ptr().as_ptr().add(64).cast()) }
}

/// Child: becomes the producer of `RING_NAME` and waits to be terminated.
pub fn hold_producer() -> i32 {
    let name = child_ring_name();
    let ring = ShmRing::open_named(&name).expect("open");
    let _p = ShmRing::producer(&ring).expect("producer");
    println!("HELD");
    let _ = std::io::stdout().flush();
    std::thread::sleep(SECS(30));
    1
}

/// Child: parks on the word of `RING_NAME` while it holds `RING_EXPECT`, for up to 20 s.
pub fn park_word() -> i32 {
    let name = child_ring_name();
    let expect: u32 = child_env_parsed("RING_EXPECT");
    let seg = Segment::open_named(&name, SizeCheck::AtLeast(4096)).expect("open");
    println!("PARKING");
    let _ = std::io::stdout().flush();
    let t0 = Instant::now();
    let outcome = ring_os::raw::futex::wait(word(&seg), expect, SECS(20));
    println!("WOKEN {outcome:?} after {:?}", t0.elapsed());
    let _ = std::io::stdout().flush();
    0
}
