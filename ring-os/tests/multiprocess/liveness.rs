//! Liveness the kernel vouches for (role locks), both sides: participants in another pid
//! namespace, a zombie leader, a forked heir, a creator killed while formatting.
//!
//! Each scenario fails on a pid-based liveness check: a pid from another namespace is not in
//! our `/proc`, a zombie leader shows `Z`, the heir of a fork runs under another pid than the one
//! recorded, and a half-created segment records no owner at all.

use std::io::Write as _;
use std::time::{Duration, Instant};

use ring_core::inspect::{consumer_info, EntryState};
use ring_core::{ClaimError, Config, DeliveryClass, ReadError};
use ring_os::{
    raw::{
        ConsumerExt as _, CreateOptions, ProducerExt as _, SegmentName, ShmReadError, ShmRing,
        LIVENESS_PERIOD,
    },
    Error,
};

use crate::support::{clean_only, field, named_ring, unique_name, Child, Unlink};

const SECS: fn(u64) -> Duration = Duration::from_secs;

/// A new pid namespace (and `/proc` for it) around a child; SIGKILLing `unshare` kills the
/// child too.
const NEW_PID_NS: &[&str] = &["unshare", "--pid", "--fork", "--mount-proc", "--kill-child"];

/// Prints a line and flushes it at once (the parent waits for it).
macro_rules! say {
    ($($t:tt)*) => {{
        println!($($t)*);
        let _ = std::io::stdout().flush();
    }};
}

fn ring_name() -> SegmentName {
    crate::support::child_ring_name()
}

/// The child roles of this file; `None` for a role it does not know.
pub fn run_role(role: &str) -> Option<i32> {
    Some(match role {
        "ns-consumer" => ns_consumer(),
        "ns-producer" => ns_producer(),
        "ns-reader" => ns_reader(),
        #[cfg(target_os = "linux")]
        "zombie-leader" => zombie_leader_role(),
        "fork-heir" => fork_heir_role(),
        "half-creator" => half_creator(),
        _ => return None,
    })
}

/// Why pid-namespace tests cannot run here, if they cannot.
fn no_pid_namespaces() -> Option<String> {
    if rustix::process::geteuid().as_raw() != 0 {
        return Some("not root: `unshare --pid` needs CAP_SYS_ADMIN".to_owned());
    }
    match std::process::Command::new("unshare")
        .args(["--pid", "--fork", "--mount-proc", "true"])
        .status()
    {
        Err(e) => Some(format!("no `unshare` command: {e}")),
        Ok(_) => None,
    }
}

/// Waits (at most `timeout`) for `done`; panics with `what` otherwise.
fn within(timeout: Duration, what: &str, mut done: impl FnMut() -> bool) -> Duration {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < timeout, "{what} (after {timeout:?})");
        std::thread::sleep(Duration::from_millis(2));
    }
    start.elapsed()
}

/// Checks for a few liveness periods that `p` reclaims nobody and entry `index` keeps `owner`.
fn never_reclaimed(p: &mut ring_os::raw::ShmProducer, index: usize, what: &str) {
    let owner = consumer_info(p.memory(), index).expect("entry").owner;
    for _ in 0..5 {
        assert!(p.reclaim_dead().is_empty(), "{what} was reclaimed");
        std::thread::sleep(LIVENESS_PERIOD);
    }
    let now = consumer_info(p.memory(), index).expect("entry");
    assert_eq!(
        (now.owner, now.state),
        (owner, EntryState::Active),
        "{what}"
    );
}

/// A gating consumer and then a producer, each in a pid namespace of its own: alive while they
/// run (not reclaimed, not `ProducerGone`, not taken over), dead once SIGKILLed.
pub fn other_pid_namespace() {
    if let Some(why) = no_pid_namespaces() {
        println!("  skipped: {why}");
        return;
    }
    let config = Config::new(4, 64).with_consumers(4);
    let (name, _u, ring) = named_ring("pidns", &config);
    let env = [("RING_NAME", name.as_str().to_owned())];

    // A consumer over there, the producer here.
    let mut p = ShmRing::producer(&ring).expect("producer");
    let mut c = Child::spawn_under(NEW_PID_NS, "ns-consumer", &env);
    let line = c.expect_line("READY", SECS(20));
    assert_eq!(field(&line, "pid"), 1, "pid 1 of its own namespace: {line}");
    let index = usize::try_from(field(&line, "index")).expect("index");
    never_reclaimed(&mut p, index, "a live consumer in another pid namespace");
    // It gates: a full ring holds the producer back instead of reclaiming the consumer.
    for i in 0..4u8 {
        p.publish(&[i], SECS(1)).expect("room");
    }
    assert!(
        matches!(p.publish(&[9], SECS(0)), Err(ClaimError::Full { .. })),
        "the live gating consumer must hold the ring back"
    );
    assert!(
        matches!(
            p.publish(&[9], Duration::from_millis(200)),
            Err(ClaimError::Full { .. })
        ),
        "a blocked publish reclaimed a live consumer in another pid namespace"
    );
    c.sigkill();
    let start = Instant::now();
    p.publish(&[10], SECS(5))
        .expect("a SIGKILLed consumer is judged dead and reclaimed");
    let recovered = start.elapsed();
    assert_eq!(
        consumer_info(&*ring, index).expect("entry").state,
        EntryState::Free
    );
    drop(p);

    // The producer over there, a consumer here.
    let mut host = ShmRing::consumer(&ring, DeliveryClass::LatestOnly).expect("host consumer");
    let mut prod = Child::spawn_under(NEW_PID_NS, "ns-producer", &env);
    prod.expect_line("PRODUCING", SECS(20));
    let mut buf = [0u8; 64];
    let got = host.recv(&mut buf, SECS(5)).expect("its message");
    assert_eq!(&buf[..got.len], b"from another namespace");
    assert_eq!(
        host.recv(&mut buf, Duration::from_millis(300)),
        Err(ReadError::Timeout.into()),
        "a live producer in another pid namespace was reported gone"
    );
    assert!(
        matches!(ShmRing::producer(&ring), Err(Error::ProducerAlive { .. })),
        "a second producer took over a live one in another pid namespace"
    );
    prod.sigkill();
    let start = Instant::now();
    assert_eq!(
        host.recv(&mut buf, SECS(5)),
        Err(ShmReadError::ProducerGone)
    );
    let gone = start.elapsed();
    let _p = ShmRing::producer(&ring).expect("a dead producer is taken over");
    println!("  pid namespace: consumer reclaimed {recovered:.2?} and producer gone {gone:.2?} after SIGKILL");
}

/// A slow gating consumer in a pid namespace of its own receives every message of a producer
/// here, in order: it is never reclaimed while it lags.
pub fn gating_reader_in_other_pid_namespace() {
    if let Some(why) = no_pid_namespaces() {
        println!("  skipped: {why}");
        return;
    }
    let n: u64 = 300;
    let config = Config::new(8, 64).with_consumers(2);
    let (name, _u, ring) = named_ring("pidns-reader", &config);
    let mut p = ShmRing::producer(&ring).expect("producer");
    let mut c = Child::spawn_under(
        NEW_PID_NS,
        "ns-reader",
        &[
            ("RING_NAME", name.as_str().to_owned()),
            ("RING_N", n.to_string()),
        ],
    );
    c.expect_line("READY", SECS(20));
    for seq in 0..n {
        p.publish(&seq.to_le_bytes(), SECS(10))
            .expect("the reader keeps up eventually");
    }
    let line = c.expect_line("RESULT", SECS(30));
    assert_eq!(field(&line, "received"), n, "{line}");
    assert_eq!(field(&line, "in_order"), n, "{line}");
    assert!(c.wait(SECS(10)), "reader failed");
    println!("  pid namespace: a slow gating reader got all {n} messages in order");
}

/// Reads `RING_N` messages slowly (gating), then reports how many came in order.
fn ns_reader() -> i32 {
    let n: u64 = std::env::var("RING_N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let ring = ShmRing::open_named(&ring_name()).expect("open");
    let mut c = ShmRing::consumer(&ring, DeliveryClass::Gating).expect("register");
    say!("READY index={}", c.index());
    let (mut received, mut in_order) = (0u64, 0u64);
    let mut buf = [0u8; 64];
    while received < n {
        match c.recv(&mut buf, SECS(10)) {
            Ok(m) => {
                let seq = buf[..m.len].try_into().map(u64::from_le_bytes).ok();
                if seq == Some(received) {
                    in_order += 1;
                }
                received += 1;
            }
            Err(e) => {
                say!("ERR {e}");
                return 2;
            }
        }
        // Slower than the producer: it is held back, never allowed to reclaim us.
        if received % 50 == 0 {
            std::thread::sleep(LIVENESS_PERIOD * 3);
        }
    }
    say!("RESULT received={received} in_order={in_order}");
    0
}

/// Registers a gating consumer and holds it (reading nothing) until killed.
fn ns_consumer() -> i32 {
    let ring = ShmRing::open_named(&ring_name()).expect("open");
    let c = ShmRing::consumer(&ring, DeliveryClass::Gating).expect("register");
    say!(
        "READY index={} pid={}",
        c.index(),
        rustix::process::getpid().as_raw_nonzero()
    );
    std::thread::sleep(SECS(60));
    0
}

/// Becomes the producer, publishes one message and stays until killed.
fn ns_producer() -> i32 {
    let ring = ShmRing::open_named(&ring_name()).expect("open");
    let mut p = ShmRing::producer(&ring).expect("producer");
    p.try_publish(b"from another namespace").expect("publish");
    say!("PRODUCING");
    std::thread::sleep(SECS(60));
    0
}

/// Field 3 of `/proc/<pid>/stat`: the process state.
#[cfg(target_os = "linux")]
fn proc_state(pid: u32) -> Option<char> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    text[text.rfind(')')? + 1..]
        .split_whitespace()
        .next()?
        .chars()
        .next()
}

/// A process whose main thread exited while a worker thread holds a consumer: `/proc` shows
/// the leader as a zombie, yet the consumer is alive and keeps reading.
#[cfg(target_os = "linux")]
pub fn zombie_leader() {
    let config = Config::new(4, 64).with_consumers(2);
    let (name, _u, ring) = named_ring("zombie", &config);
    let mut p = ShmRing::producer(&ring).expect("producer");
    let mut c = Child::spawn("zombie-leader", &[("RING_NAME", name.as_str().to_owned())]);
    let index = usize::try_from(field(&c.expect_line("READY", SECS(20)), "index")).expect("index");
    let pid = c.pid();
    within(SECS(10), "the leader never became a zombie", || {
        proc_state(pid) == Some('Z')
    });
    never_reclaimed(&mut p, index, "a consumer of a zombie leader's live thread");
    p.publish(b"after the leader", SECS(1)).expect("publish");
    let line = c.expect_line("GOT", SECS(10));
    assert_eq!(field(&line, "len"), 16, "{line}");
    c.sigkill();
    let took = within(SECS(5), "the killed consumer was never reclaimed", || {
        !p.reclaim_dead().is_empty()
    });
    println!("  zombie leader: alive while its thread ran, reclaimed {took:.2?} after SIGKILL");
}

/// Registers in a worker thread, then exits the main thread only.
#[cfg(target_os = "linux")]
fn zombie_leader_role() -> i32 {
    let ring = ShmRing::open_named(&ring_name()).expect("open");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut c = ShmRing::consumer(&ring, DeliveryClass::Gating).expect("register");
        let _ = tx.send(c.index());
        let mut buf = [0u8; 64];
        match c.recv(&mut buf, SECS(30)) {
            Ok(m) => say!("GOT len={}", m.len),
            Err(e) => say!("ERR {e}"),
        }
        std::thread::sleep(SECS(60));
        std::process::exit(0);
    });
    let index = rx.recv().expect("worker registered");
    say!("READY index={index}");
    // SAFETY: SYS_exit ends only the calling thread (the process lives on in the worker); this
    // thread owns nothing the worker needs, and no destructor of it has to run.
    unsafe { libc::syscall(libc::SYS_exit, 0) };
    unreachable!("SYS_exit returned")
}

/// A process registers a consumer, forks and dies at once (no destructors): its heir keeps the
/// descriptors and the mapping, so the consumer stays alive and keeps reading.
pub fn fork_heir() {
    let config = Config::new(4, 64).with_consumers(2);
    let (name, _u, ring) = named_ring("heir", &config);
    let mut p = ShmRing::producer(&ring).expect("producer");
    let mut c = Child::spawn("fork-heir", &[("RING_NAME", name.as_str().to_owned())]);
    let line = c.expect_line("READY", SECS(20));
    let index = usize::try_from(field(&line, "index")).expect("index");
    let heir = i32::try_from(field(&line, "heir")).expect("pid");
    let heir = rustix::process::Pid::from_raw(heir).expect("heir pid");
    assert!(c.wait(SECS(10)), "the registering process exits at once");
    never_reclaimed(&mut p, index, "the consumer a forked heir holds");
    p.publish(b"for the heir", SECS(1)).expect("publish");
    c.expect_line("GOT", SECS(10));
    rustix::process::kill_process(heir, rustix::process::Signal::KILL).expect("kill the heir");
    let took = within(
        SECS(5),
        "the killed heir's consumer was never reclaimed",
        || !p.reclaim_dead().is_empty(),
    );
    println!("  fork heir: alive after its registrant died, reclaimed {took:.2?} after SIGKILL");
}

/// Registers, forks; the parent reports and `_exit`s, the child reads on.
fn fork_heir_role() -> i32 {
    let ring = ShmRing::open_named(&ring_name()).expect("open");
    let mut c = ShmRing::consumer(&ring, DeliveryClass::Gating).expect("register");
    // SAFETY: this process runs one thread (child roles start none before this), so the forked
    // child may use everything it inherits.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        let mut buf = [0u8; 64];
        match c.recv(&mut buf, SECS(30)) {
            Ok(m) => say!("GOT len={}", m.len),
            Err(e) => say!("ERR {e}"),
        }
        std::thread::sleep(SECS(60));
        // SAFETY: ends the heir without running the parent's destructors a second time.
        unsafe { libc::_exit(0) };
    }
    if pid < 0 {
        return 2;
    }
    say!("READY index={} heir={pid}", c.index());
    // SAFETY: dies like a crash would: no destructor runs, so the consumer is not left.
    unsafe { libc::_exit(0) }
}

/// A creator SIGKILLed while formatting: `list` shows it being created while the creator lives
/// and abandoned after, and `clean` removes it, so the name is not wedged.
pub fn half_created() {
    let name = unique_name("half");
    let _u = Unlink(name.clone());
    let mut c = Child::spawn("half-creator", &[("RING_NAME", name.as_str().to_owned())]);
    c.expect_line("CREATING", SECS(20));
    let status = || {
        ring_os::raw::stale::list()
            .expect("list")
            .into_iter()
            .find(|i| i.name == name)
            .map(|i| i.status())
    };
    assert_eq!(status(), Some("creating"));
    let report = clean_only(&[&name]);
    assert!(
        !report.removed.contains(&name),
        "removed while being created"
    );
    c.sigkill();
    within(SECS(5), "never reported abandoned", || {
        status() == Some("abandoned")
    });
    let report = clean_only(&[&name]);
    assert!(report.removed.contains(&name), "{report:?}");
    let ring = ShmRing::create_named(&name, &Config::new(4, 64), CreateOptions::new())
        .expect("the name is free again");
    drop(ring);
    println!("  half-created: reported while creating, removed once its creator was killed");
}

/// Creates a named segment (taking the creator lock) and never formats it.
fn half_creator() -> i32 {
    let seg = ring_os::raw::Segment::create_named(&ring_name(), 1 << 16, CreateOptions::new())
        .expect("create");
    say!("CREATING len={}", seg.len());
    std::thread::sleep(SECS(60));
    0
}
