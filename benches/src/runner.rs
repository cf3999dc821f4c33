//! The parent: runs the plan case by case, interleaving rounds across transports.

use crate::case::{plan, Case, Metric, Transport, REQUEST_BYTES, THROUGHPUT_BATCH};
use crate::child::{self, ChildProc, Watchdog};
use crate::ctl::{Msg, Setup};
use crate::link::{self, Link, Peers, Tx};
use crate::stats::{human_bytes, Results};
use crate::wait::RUN_TIMEOUT;
use crate::BenchError;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// What to run.
#[derive(Clone, Debug)]
pub struct Options {
    /// Smaller iteration counts (about a minute in all).
    pub quick: bool,
    /// Transports to run (all by default).
    pub transports: Vec<Transport>,
    /// Metrics to run (all by default).
    pub metrics: Vec<Metric>,
    /// The peer crates' links, where this binary has them (benches/compare's).
    pub peers: Option<Peers>,
    /// Round trips' ring depth ([`ROUND_TRIP_DEPTH`](crate::case::ROUND_TRIP_DEPTH) by default).
    pub round_trip_depth: usize,
}

/// The outcome of a run.
pub struct Outcome {
    /// Every measured series.
    pub results: Results,
    /// One line per transport failure (the transport is dropped for the rest of that case).
    pub failures: Vec<String>,
}

/// Removes the run directory on every exit path.
struct RunDir(PathBuf);

impl Drop for RunDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Free space the run directory needs: the 7680x4320 case maps two 133 MB slots per ring
/// transport at once.
const RUN_DIR_SPACE: u64 = 2 << 30;

/// `/dev/shm` where it exists and has room (Docker's default is 64 MB), else the temp directory.
fn run_base() -> PathBuf {
    let shm = Path::new("/dev/shm");
    let roomy = rustix::fs::statvfs(shm)
        .map(|st| st.f_bavail.saturating_mul(st.f_frsize) >= RUN_DIR_SPACE)
        .unwrap_or(false);
    if roomy {
        shm.to_path_buf()
    } else {
        std::env::temp_dir()
    }
}

/// Number of child processes (fan-out needs two).
const CHILDREN: usize = 2;

struct Parent {
    dir: PathBuf,
    /// The CPUs the harness may use, read before the parent pins itself.
    cpus: Vec<usize>,
    children: Vec<ChildProc>,
    watchdog: Watchdog,
    failures: Vec<String>,
    peers: Option<Peers>,
}

impl Parent {
    fn respawn(&mut self) -> Result<(), BenchError> {
        self.children.clear();
        self.children = child::spawn(CHILDREN, &self.dir.join("ctl.sock"), &self.cpus)?;
        self.watchdog
            .guard(self.children.iter().map(|c| c.proc.id()).collect());
        Ok(())
    }

    fn fail(&mut self, case: &Case, t: Transport, e: &BenchError) {
        let line = format!("{} {} {t}: {e}", case.metric, human_bytes(case.bytes));
        eprintln!("transport-bench: FAILED {line}");
        self.failures.push(line);
    }

    /// Builds every transport of the case on both sides; failures are recorded and skipped.
    fn setup(
        &mut self,
        case: &Case,
        ci: usize,
        attempt: usize,
        transports: &[Transport],
    ) -> Result<BTreeMap<Transport, Link>, BenchError> {
        let dir = self.dir.join(format!("c{ci}a{attempt}"));
        std::fs::create_dir_all(&dir).map_err(|e| BenchError::io("create case directory", e))?;
        let mut links = BTreeMap::new();
        let n = case.metric.children();
        for (ti, &t) in transports.iter().enumerate() {
            if t == Transport::Memcpy {
                continue;
            }
            let mut setups: Vec<Setup> = (0..n)
                .map(|child| Setup {
                    transport: t,
                    case: case.clone(),
                    child,
                    children: n,
                    dir: dir.clone(),
                    tag: format!("ringbench{}c{ci}a{attempt}t{ti}", std::process::id()),
                    port: 0,
                })
                .collect();
            let result = (|| {
                let pending = link::parent_begin(&mut setups, self.peers.as_ref())?;
                for (s, c) in setups.iter().zip(&mut self.children) {
                    c.ctl.send(&Msg::Setup(Box::new(s.clone())))?;
                }
                let mut first_err = None;
                for c in self.children.iter_mut().take(n) {
                    if let Err(e) = c.ctl.expect_ok() {
                        first_err.get_or_insert(e);
                    }
                }
                if let Some(e) = first_err {
                    return Err(e);
                }
                pending(Instant::now() + Duration::from_secs(10))
            })();
            match result {
                Ok(l) => {
                    links.insert(t, l);
                }
                Err(e) => self.fail(case, t, &e),
            }
        }
        Ok(links)
    }

    fn teardown(&mut self, links: BTreeMap<Transport, Link>) -> Result<(), BenchError> {
        for c in &mut self.children {
            c.ctl.send(&Msg::Teardown)?;
            c.ctl.expect_ok()?;
        }
        drop(links);
        Ok(())
    }
}

/// The parent's half of `iters` iterations of `case` on `t`; `record` gets each sample in ns.
fn run_link(
    case: &Case,
    t: Transport,
    link: &mut Link,
    cpus: &[usize],
    children: &mut [ChildProc],
    iters: usize,
    record: &mut dyn FnMut(u64),
) -> Result<(), BenchError> {
    let n = case.metric.children();
    crate::wait::set_yield_every(case.yield_every());
    let active = children.get_mut(..n).ok_or_else(|| BenchError::Usage {
        what: "not enough children".to_owned(),
    })?;
    for c in active.iter_mut() {
        c.ctl.send(&Msg::Run {
            transport: t,
            iters,
        })?;
    }
    crate::wait::place(t, cpus, 0);
    let deadline = Instant::now() + RUN_TIMEOUT;
    let (down, up) = (case.down_bytes(), case.up_bytes());
    let Link { tx, rx } = link;
    for _ in 0..iters {
        match case.metric {
            Metric::RoundTrip => {
                let t0 = Instant::now();
                tx.send(down, &mut || Ok(()))?;
                rx.recv(0, up, deadline)?;
                record(elapsed_ns(t0));
            }
            Metric::Acquire => {
                if let Some(c) = active.first_mut() {
                    c.ctl.send(&Msg::Next)?;
                    c.ctl.expect_ready()?;
                }
                // The producer is idle when the request comes (a frame grabber asks a renderer
                // that is waiting): give a blocking peer time to park, so that `ring-futex`,
                // `iceoryx2-event` and the sockets pay their real wake-up.
                std::thread::sleep(IDLE_BEFORE_REQUEST);
                let t0 = send_timed(tx.as_mut(), REQUEST_BYTES)?;
                rx.recv(0, up, deadline)?;
                record(elapsed_ns(t0));
            }
            Metric::Throughput => {
                let t0 = send_timed(tx.as_mut(), REQUEST_BYTES)?;
                for _ in 0..THROUGHPUT_BATCH {
                    rx.recv(0, up, deadline)?;
                }
                record(elapsed_ns(t0) / THROUGHPUT_BATCH as u64);
            }
            Metric::Fanout => {
                let t0 = send_timed(tx.as_mut(), down)?;
                for peer in 0..n {
                    rx.recv(peer, up, deadline)?;
                }
                record(elapsed_ns(t0));
            }
        }
    }
    for c in active.iter_mut() {
        c.ctl.expect_ok()?;
    }
    Ok(())
}

/// Sends a `len`-byte message; the instant right before it became visible to the peers.
fn send_timed(tx: &mut dyn Tx, len: usize) -> Result<Instant, BenchError> {
    let mut t0 = Instant::now();
    tx.send(len, &mut || {
        t0 = Instant::now();
        Ok(())
    })?;
    Ok(t0)
}

fn elapsed_ns(t0: Instant) -> u64 {
    u64::try_from(t0.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

/// How long an acquiring parent waits after the child said `Ready` (see `run_link`).
const IDLE_BEFORE_REQUEST: Duration = Duration::from_micros(100);

/// Offset of the memcpy destination from a page boundary relative to the source: half a page
/// apart, so that loads and stores never alias modulo 4 KiB (which made 16-64 KiB copies up to
/// 7x slower here and would have flattered every ratio to `memcpy`).
const MEMCPY_SKEW: usize = 2048;

/// Single-thread memcpy of `src.len()` bytes, `iters` times.
fn run_memcpy(src: &[u8], dst: &mut [u8], iters: usize, record: &mut dyn FnMut(u64)) {
    let Some(dst) = dst.get_mut(MEMCPY_SKEW..MEMCPY_SKEW + src.len()) else {
        return;
    };
    for _ in 0..iters {
        let t0 = Instant::now();
        dst.copy_from_slice(src);
        std::hint::black_box(&mut *dst);
        record(elapsed_ns(t0));
    }
}

/// Runs the whole plan.
pub fn run(opts: &Options) -> Result<Outcome, BenchError> {
    let dir = run_base().join(format!("ring-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| BenchError::io("create run directory", e))?;
    let _guard = RunDir(dir.clone());
    let mut p = Parent {
        dir,
        cpus: crate::wait::allowed_cpus(),
        children: Vec::new(),
        watchdog: Watchdog::start(),
        failures: Vec::new(),
        peers: opts.peers,
    };
    if p.cpus.len() < 2 {
        eprintln!("transport-bench: fewer than two CPUs; pollers will share a core");
    }
    p.respawn()?;
    let mut results = Results::new();
    let cases: Vec<Case> = plan(opts.quick, opts.round_trip_depth)
        .into_iter()
        .filter(|c| opts.metrics.contains(&c.metric))
        .collect();
    let started = Instant::now();
    for (ci, case) in cases.iter().enumerate() {
        let mut transports: Vec<Transport> = opts
            .transports
            .iter()
            .copied()
            .filter(|t| t.supports(case.metric, case.bytes))
            .collect();
        if transports.is_empty() {
            continue;
        }
        results.label(case.metric, case.bytes, &case.label);
        eprintln!(
            "transport-bench: [{:>5.1}s] case {}/{}: {} {} ({} rounds x {} iters)",
            started.elapsed().as_secs_f64(),
            ci + 1,
            cases.len(),
            case.metric,
            if case.label.is_empty() {
                human_bytes(case.bytes)
            } else {
                case.label.clone()
            },
            case.rounds,
            case.iters
        );
        let mut attempt = 0;
        let mut links = p.setup(case, ci, attempt, &transports)?;
        transports.retain(|t| *t == Transport::Memcpy || links.contains_key(t));
        let mut bufs = transports.contains(&Transport::Memcpy).then(|| {
            (
                link::pattern(case.bytes),
                vec![1u8; case.bytes + 2 * MEMCPY_SKEW],
            )
        });
        // Round 0 is the warm-up; then rounds rotate the order so that no transport always runs
        // first (or last) after a setup or a noisy neighbour.
        for round in 0..=case.rounds {
            let (iters, recording) = if round == 0 {
                (case.warmup, false)
            } else {
                (case.iters, true)
            };
            let k = transports.len();
            for i in 0..k {
                let Some(&t) = transports.get((i + round) % k) else {
                    continue;
                };
                let mut record = |ns: u64| {
                    if recording {
                        results.record(case.metric, case.bytes, t, ns);
                    }
                };
                if t == Transport::Memcpy {
                    crate::wait::place(t, &p.cpus, 0);
                    if let Some((src, dst)) = &mut bufs {
                        run_memcpy(src, dst, iters, &mut record);
                    }
                    continue;
                }
                let Some(l) = links.get_mut(&t) else {
                    continue;
                };
                p.watchdog.arm(RUN_TIMEOUT + Duration::from_secs(10));
                let r = run_link(case, t, l, &p.cpus, &mut p.children, iters, &mut record);
                let fired = p.watchdog.disarm();
                if let Err(e) = r {
                    let e = if fired {
                        BenchError::timeout(format!("{t} (watchdog killed the children): {e}"))
                    } else {
                        e
                    };
                    p.fail(case, t, &e);
                    // The children's state is unknown: start again with the survivors.
                    transports.retain(|&x| x != t);
                    drop(core::mem::take(&mut links));
                    p.respawn()?;
                    attempt += 1;
                    links = p.setup(case, ci, attempt, &transports)?;
                    transports.retain(|t| *t == Transport::Memcpy || links.contains_key(t));
                    break;
                }
            }
        }
        if let Err(e) = p.teardown(links) {
            eprintln!("transport-bench: teardown failed ({e}); restarting the children");
            p.respawn()?;
        }
        let _ = std::fs::remove_dir_all(p.dir.join(format!("c{ci}a{attempt}")));
    }
    p.children.clear();
    p.watchdog.stop();
    eprintln!(
        "transport-bench: done in {:.1}s",
        started.elapsed().as_secs_f64()
    );
    Ok(Outcome {
        results,
        failures: p.failures,
    })
}
