//! What a child process does, by role. Each role prints `KEY ...` lines for the parent and ends
//! on its own deadline even if the parent forgets it.

use std::io::Write as _;
use std::time::{Duration, Instant};

use ring_core::{DeliveryClass, ReadError};
#[cfg(unix)]
use ring_os::raw::fdpass;
use ring_os::raw::{alloc, ConsumerExt as _, SegmentName, ShmConsumer, ShmReadError, ShmRing};
#[cfg(unix)]
use ring_os::Error;

use crate::support::{check_payload, child_env, child_ring_name, make_payload};

/// Prints a line and flushes it at once (the parent waits for it).
macro_rules! say {
    ($($t:tt)*) => {{
        println!($($t)*);
        let _ = std::io::stdout().flush();
    }};
}

fn class() -> DeliveryClass {
    match child_env("RING_CLASS").as_str() {
        "gating" => DeliveryClass::Gating,
        "latest" => DeliveryClass::LatestOnly,
        _ => DeliveryClass::SkipOnLag,
    }
}

fn name() -> SegmentName {
    child_ring_name()
}

/// A consumer of class `RING_CLASS` on the ring named `RING_NAME`.
fn registered() -> ShmConsumer {
    let ring = ShmRing::open_named(&name()).expect("open");
    ShmRing::consumer(&ring, class()).expect("register")
}

/// Reports a role's failure `e` (`ERR <e>`); the role's exit code for it.
fn failed(e: impl core::fmt::Display) -> i32 {
    say!("ERR {e}");
    2
}

/// Runs `role`; returns the exit code.
pub fn run(role: &str) -> i32 {
    match role {
        "stress-consumer" => stress_consumer(),
        "pin-holder" => pin_holder(),
        "holder" => holder(),
        "member" => member(),
        "late-reader" => late_reader(),
        "echo" => echo(),
        "frame-grabber" => crate::never_stall::grabber_role(),
        "slow-producer" => slow_producer(),
        "gone-consumer" => gone_consumer(),
        "corrupt-peer" => corrupt_peer(),
        #[cfg(unix)]
        "memfd-consumer" => memfd_consumer(),
        #[cfg(unix)]
        "creator" => creator(),
        #[cfg(unix)]
        "stream-producer" => stream_producer(),
        #[cfg(unix)]
        "stream-consumer" => stream_consumer(),
        #[cfg(unix)]
        "truncate-third" => truncate_third(),
        #[cfg(unix)]
        "guard-chain" => crate::guard::chain_role(true),
        #[cfg(unix)]
        "guard-default" => crate::guard::chain_role(false),
        #[cfg(unix)]
        "rendezvous-sub" => crate::guard::rendezvous_sub(),
        #[cfg(unix)]
        "rendezvous-pub" => crate::guard::rendezvous_pub(),
        #[cfg(unix)]
        "unbacked" => crate::guard::unbacked_role(),
        #[cfg(windows)]
        "truncate-file" => truncate_file(),
        #[cfg(windows)]
        "hold-producer" => crate::windows::hold_producer(),
        #[cfg(windows)]
        "park-word" => crate::windows::park_word(),
        #[cfg(windows)]
        other => {
            eprintln!("unknown role {other}");
            2
        }
        #[cfg(unix)]
        other => crate::liveness::run_role(other).unwrap_or_else(|| {
            eprintln!("unknown role {other}");
            3
        }),
    }
}

/// Reads until `Closed`, pinning each message and copying its allocation; checks checksums and
/// order.
fn stress_consumer() -> i32 {
    let ring = ShmRing::open_named(&name()).expect("open");
    let class = class();
    let mut c = ShmRing::consumer(&ring, class).expect("register");
    let reader = alloc::AllocReader::new(&ring).expect("allocator");
    say!("READY");
    let (mut received, mut missed, mut torn, mut order, mut alloc_err) =
        (0u64, 0u64, 0u64, 0u64, 0u64);
    let mut next = 0u64;
    let mut buf = Vec::new();
    loop {
        let pin = match c.recv_pinned(Duration::from_secs(30)) {
            Ok(p) => p,
            Err(ShmReadError::Read(ReadError::Closed)) => break,
            Err(e) => return failed(e),
        };
        let seq = pin.seq();
        missed += pin.missed();
        match reader.read_pinned(&pin, &mut buf, 1 << 20) {
            Ok(()) => match check_payload(&buf) {
                Some(s) if s == seq => {}
                _ => torn += 1,
            },
            Err(_) => alloc_err += 1,
        }
        drop(pin);
        received += 1;
        if class == DeliveryClass::Gating && seq != next {
            order += 1;
        }
        if seq < next {
            order += 1;
        }
        next = seq + 1;
    }
    say!(
        "RESULT received={received} missed={missed} torn={torn} order={order} alloc_err={alloc_err} last={}",
        next.saturating_sub(1)
    );
    0
}

/// Registers (gating), pins one message and holds it until killed.
fn pin_holder() -> i32 {
    let ring = ShmRing::open_named(&name()).expect("open");
    // A gating reader's pin is its cursor; a skip-on-lag reader's is a reader bit.
    let class = match std::env::var("PIN_CLASS").as_deref() {
        Ok("skip") => DeliveryClass::SkipOnLag,
        _ => DeliveryClass::Gating,
    };
    let mut c = ShmRing::consumer(&ring, class).expect("register");
    say!("REGISTERED index={}", c.index());
    let pin = match c.recv_pinned(Duration::from_secs(20)) {
        Ok(p) => p,
        Err(e) => return failed(e),
    };
    say!("PINNED seq={}", pin.seq());
    std::thread::sleep(Duration::from_secs(60));
    drop(pin);
    0
}

/// Holds 8 messages at once (`try_hold`), reads the 9th while they are held, checks all nine,
/// then releases the 8 in reverse order (`HOLD_DIE=1`: sleeps holding them, to be killed).
/// A member of group `GROUP`: takes messages until the ring closes, printing `M seq=S again=0|1`
/// for each. With `MEMBER_HOLD_FROM=k` it keeps the first message whose sequence is at least `k`
/// and sleeps, printing `HELD seq=S` (the parent kills it holding that message).
fn member() -> i32 {
    let ring = ShmRing::open_named(&name()).expect("open");
    let mut c = ShmRing::group_member(&ring, &child_env("GROUP")).expect("join");
    say!("JOINED index={}", c.index());
    let hold_from: Option<u64> = std::env::var("MEMBER_HOLD_FROM")
        .ok()
        .and_then(|v| v.parse().ok());
    loop {
        match c.recv_held(Duration::from_secs(30)) {
            Ok(h) => {
                let bytes = c.held_bytes(&h).unwrap_or_default();
                if check_payload(bytes) != Some(h.seq()) {
                    say!("ERR torn seq={}", h.seq());
                    return 1;
                }
                say!("M seq={} again={}", h.seq(), u8::from(h.redelivered()));
                if hold_from.is_some_and(|k| h.seq() >= k) {
                    say!("HELD seq={}", h.seq());
                    std::thread::sleep(Duration::from_secs(60));
                    return 0;
                }
                if let Err(e) = c.release(h) {
                    say!("ERR release: {e}");
                    return 2;
                }
            }
            Err(ShmReadError::Read(ReadError::Closed)) => {
                say!("DONE");
                return 0;
            }
            Err(e) => return failed(e),
        }
    }
}

/// A reader of class `RING_CLASS` that joins a ring created with history after messages were
/// published: prints `M seq=S` for each message until the ring closes, then `DONE missed=N`.
fn late_reader() -> i32 {
    let mut c = registered();
    say!("JOINED cursor={}", c.cursor());
    let mut buf = vec![0u8; 4096];
    loop {
        match c.recv(&mut buf, Duration::from_secs(20)) {
            Ok(m) => {
                if check_payload(&buf[..m.len]) != Some(m.seq) {
                    say!("ERR torn seq={}", m.seq);
                    return 1;
                }
                say!("M seq={}", m.seq);
            }
            Err(ShmReadError::Read(ReadError::Closed)) => {
                say!("DONE missed={}", c.missed());
                return 0;
            }
            Err(e) => return failed(e),
        }
    }
}

/// Answers every message of the ring `RING_NAME` with the same bytes on the ring
/// `RING_NAME_UP`, blocking for each (every wait that finds nothing parks at once), until the
/// first ring closes. `ECHOED n` at the end.
fn echo() -> i32 {
    let down = ShmRing::open_named(&name()).expect("open down");
    let up_name = SegmentName::new(&child_env("RING_NAME_UP")).expect("name");
    let up = ShmRing::open_named(&up_name).expect("open up");
    let mut c = ShmRing::consumer(&down, DeliveryClass::Gating).expect("register");
    let mut p = ShmRing::producer(&up).expect("producer");
    say!("READY");
    let mut buf = [0u8; 64];
    let mut n = 0u64;
    loop {
        let mut wait = ring_os::raw::FutexWait::new(Duration::from_secs(10)).spins(0);
        match c.copy(&mut buf, &mut wait) {
            Ok(m) => {
                if let Err(e) = p.try_publish(&buf[..m.len]) {
                    return failed(e);
                }
                n += 1;
            }
            Err(ReadError::Closed) => {
                say!("ECHOED n={n}");
                return 0;
            }
            Err(e) => return failed(e),
        }
    }
}

fn holder() -> i32 {
    let mut c = registered();
    c.set_max_holds(8).expect("8 holds");
    say!("REGISTERED index={}", c.index());
    let t = Duration::from_secs(20);
    let mut holds = Vec::new();
    for _ in 0..8 {
        match c.recv_held(t) {
            Ok(h) => holds.push(h),
            Err(e) => {
                say!("ERR hold: {e}");
                return 2;
            }
        }
    }
    say!("HELD {}", holds.len());
    if std::env::var("HOLD_DIE").is_ok() {
        std::thread::sleep(Duration::from_secs(60));
        return 0;
    }
    // Go on once the parent has checked that the producer is held back (it creates the file).
    let go = std::path::PathBuf::from(child_env("HOLD_GO"));
    let deadline = std::time::Instant::now() + t;
    while !go.exists() {
        if std::time::Instant::now() > deadline {
            say!("ERR no go");
            return 2;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let mut buf = vec![0u8; 4096];
    let ninth = match c.recv(&mut buf, t) {
        Ok(m) => m,
        Err(e) => {
            say!("ERR ninth: {e}");
            return 2;
        }
    };
    if check_payload(&buf[..ninth.len]) != Some(ninth.seq) {
        say!("ERR ninth torn");
        return 1;
    }
    for (k, h) in holds.iter().enumerate() {
        let bytes = c.held_bytes(h).unwrap_or_default();
        if check_payload(bytes) != Some(h.seq()) || h.seq() != k as u64 {
            say!("ERR hold {k} torn or out of order (seq {})", h.seq());
            return 1;
        }
    }
    say!("NINTH seq={}", ninth.seq);
    for h in holds.into_iter().rev() {
        if let Err(e) = c.release(h) {
            say!("ERR release: {e}");
            return 2;
        }
    }
    say!("RELEASED");
    0
}

/// Becomes the producer and publishes a message every few milliseconds until killed.
fn slow_producer() -> i32 {
    let ring = ShmRing::open_named(&name()).expect("open");
    let mut p = ShmRing::producer(&ring).expect("producer");
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut seq = 0u64;
    let mut buf = Vec::new();
    while Instant::now() < deadline {
        make_payload(seq, 48, &mut buf);
        // Non-gating consumers only: never blocks for long.
        if ring_os::raw::ProducerExt::publish(&mut *p, &buf, Duration::from_secs(1)).is_ok() {
            if seq == 0 {
                say!("PRODUCING");
            }
            seq += 1;
        }
        std::thread::sleep(Duration::from_millis(3));
    }
    0
}

/// Registers a consumer of `RING_CLASS` and reads checksummed messages (copy-out) until an
/// operation fails; says `READY` first and `GOT` after the first message. Returns how many it
/// read and the error, or `None` after saying `torn` for a message whose checksum failed.
fn read_until_error(
    ring: &std::sync::Arc<ring_os::raw::Mapping>,
    torn: &str,
    timeout: Duration,
) -> Option<(u64, ShmReadError)> {
    let mut c = ShmRing::consumer(ring, class()).expect("register");
    say!("READY");
    let mut buf = [0u8; 256];
    let mut got = 0u64;
    loop {
        match c.recv(&mut buf, timeout) {
            Ok(m) => {
                if check_payload(&buf[..m.len]).is_none() {
                    say!("{torn}");
                    return None;
                }
                got += 1;
                if got == 1 {
                    say!("GOT");
                }
            }
            Err(e) => return Some((got, e)),
        }
    }
}

/// Reads (copy-out) until the producer is gone; prints `GONE` then.
fn gone_consumer() -> i32 {
    let ring = ShmRing::open_named(&name()).expect("open");
    match read_until_error(&ring, "ERR torn", Duration::from_secs(30)) {
        Some((got, ShmReadError::ProducerGone)) => {
            say!("GONE got={got}");
            0
        }
        Some((_, e)) => failed(e),
        None => 2,
    }
}

/// Scribbles over a named segment: `RING_WHAT` = `header`, `slots` or `truncate`.
fn corrupt_peer() -> i32 {
    let seg = ring_os::raw::Segment::open_named(&name(), ring_os::raw::SizeCheck::AtLeast(1))
        .expect("open");
    let base = seg.as_ptr().as_ptr();
    let seed: u64 = child_env("RING_SEED").parse().unwrap_or(1);
    let mut x = seed;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    match child_env("RING_WHAT").as_str() {
        "header" => {
            for i in 0..128 {
                // SAFETY: the segment is longer than its 128-byte header.
                unsafe { base.add(i).write_volatile(next() as u8) };
            }
        }
        "slots" => {
            // Everything after the header: producer line, consumer table, slot headers.
            let end = seg.len().min(64 * 1024);
            for _ in 0..2000 {
                let i = 128 + (next() as usize % (end - 128));
                // SAFETY: `i < end <= seg.len()`.
                unsafe { base.add(i).write_volatile(next() as u8) };
            }
        }
        "slot-headers" => {
            // Only the slot headers (state, stamp, len, meta): whole random words.
            // SAFETY: the mapping is `seg.len()` bytes and stays mapped while `seg` lives.
            let raw =
                unsafe { ring_core::RawMemory::attach(seg.as_ptr(), seg.len()) }.expect("attach");
            let [_, _, slots_off, payloads_off, _] = ring_core::Memory::geometry(&raw).offsets();
            let words = (payloads_off - slots_off) / 8;
            for _ in 0..64 {
                let i = slots_off + 8 * (next() as usize % words);
                // SAFETY: `i + 8 <= payloads_off <= seg.len()`, 8-aligned; peers use atomics.
                unsafe { base.add(i).cast::<u64>().write_volatile(next()) };
            }
        }
        #[cfg(unix)]
        "truncate" => {
            rustix::fs::ftruncate(seg.fd(), 100).expect("ftruncate");
        }
        other => panic!("unknown corruption {other}"),
    }
    say!("DONE");
    0
}

/// Receives a memfd ring over a socket and reads `RING_N` messages; then receives two bad
/// descriptors and reports how they were refused.
#[cfg(unix)]
fn memfd_consumer() -> i32 {
    let sock = std::os::unix::net::UnixStream::connect(child_env("RING_SOCK")).expect("connect");
    let n: u64 = child_env("RING_N").parse().expect("RING_N");
    let mut note = [0u8; 8];
    let (fd, _) = fdpass::recv_fd(&sock, &mut note, Duration::from_secs(20)).expect("recv ring");
    let ring = ShmRing::from_fd(fd).expect("from_fd");
    let mut c = ShmRing::consumer(&ring, DeliveryClass::Gating).expect("register");
    say!("READY");
    let mut buf = [0u8; 256];
    for i in 0..n {
        match c.recv(&mut buf, Duration::from_secs(20)) {
            Ok(m) if check_payload(&buf[..m.len]) == Some(i) => {}
            other => {
                say!("ERR message {i}: {other:?}");
                return 2;
            }
        }
    }
    say!("RESULT received={n}");
    for label in ["unsealed", "small"] {
        let (fd, _) = fdpass::recv_fd(&sock, &mut note, Duration::from_secs(20)).expect("recv bad");
        match ShmRing::from_fd(fd) {
            Err(
                e @ (Error::MissingSeals { .. } | Error::SizeMismatch { .. } | Error::Attach(_)),
            ) => {
                say!("REFUSED {label} {e}");
            }
            Err(e) => say!("ODD {label} {e}"),
            Ok(_) => say!("ACCEPTED {label}"),
        }
    }
    0
}

/// Creates a named ring, becomes its producer and a consumer, then waits to be killed.
#[cfg(unix)]
fn creator() -> i32 {
    let config = ring_core::Config::new(4, 64).with_consumers(1);
    let ring = ShmRing::create_named(&name(), &config, ring_os::raw::CreateOptions::new())
        .expect("create");
    let _p = ShmRing::producer(&ring).expect("producer");
    let _c = ShmRing::consumer(&ring, DeliveryClass::Gating).expect("consumer");
    say!("CREATED");
    std::thread::sleep(Duration::from_secs(60));
    0
}

/// The ring the parent made: the file at `RING_PATH` when set, else the named `RING_NAME`.
#[cfg(unix)]
fn open_ring() -> Result<std::sync::Arc<ring_os::raw::Mapping>, Error> {
    match std::env::var("RING_PATH") {
        Ok(path) => ShmRing::open_file(std::path::Path::new(&path)),
        Err(_) => ShmRing::open_named(&name()),
    }
}

/// Prints how an endpoint ended (`END truncated=0|1 ...`); exit 0 when the truncation was
/// reported clearly, 2 otherwise.
#[cfg(unix)]
fn ended(ring: &ring_os::raw::Mapping, what: &str, sent: u64) -> i32 {
    let truncated = ring.is_truncated();
    let clear = what.contains(ring_os::raw::TRUNCATED)
        && matches!(ring.check_len(), Err(Error::Truncated { .. }));
    say!(
        "END truncated={} clear={} n={sent} {what}",
        u8::from(truncated),
        u8::from(clear)
    );
    if clear {
        0
    } else {
        2
    }
}

/// Publishes as fast as the gating consumer allows until an operation fails.
#[cfg(unix)]
fn stream_producer() -> i32 {
    let ring = open_ring().expect("open");
    let mut p = ShmRing::producer(&ring).expect("producer");
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut buf = Vec::new();
    let mut seq = 0u64;
    while Instant::now() < deadline {
        make_payload(seq, 200, &mut buf);
        match ring_os::raw::ProducerExt::publish(&mut *p, &buf, Duration::from_secs(3)) {
            Ok(_) => {
                if seq == 0 {
                    say!("PRODUCING");
                }
                seq += 1;
            }
            Err(e) => return ended(&ring, &e.to_string(), seq),
        }
    }
    say!("END deadline");
    2
}

/// Reads (copy-out) until an operation fails; a torn message is a failure.
#[cfg(unix)]
fn stream_consumer() -> i32 {
    let ring = open_ring().expect("open");
    match read_until_error(&ring, "END torn", Duration::from_secs(3)) {
        Some((got, e)) => ended(&ring, &e.to_string(), got),
        None => 2,
    }
}

/// Truncates the parent's ring file to a third of its size, like a careless peer.
#[cfg(unix)]
fn truncate_third() -> i32 {
    let path =
        std::env::var("RING_PATH").unwrap_or_else(|_| format!("/dev/shm/{}", name().file_name()));
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .expect("open ring file");
    let len = file.metadata().expect("stat").len();
    file.set_len(len / 3).expect("truncate");
    say!("DONE");
    0
}

/// Windows: tries to truncate the mapped file segment at `RING_PATH` to 100 bytes; says whether
/// Windows refused.
#[cfg(windows)]
fn truncate_file() -> i32 {
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(child_env("RING_PATH"))
        .expect("open");
    match file.set_len(100) {
        Err(e) => say!("TRUNCATE REFUSED {e}"),
        Ok(()) => say!("TRUNCATE DONE"),
    }
    0
}
