//! `ringctl demo`: creates a ring, spawns a producer and consumer processes (this executable
//! re-run with hidden subcommands), watches them, kills consumers on request, and reports.

pub mod consumer;
mod finish;
pub mod producer;
pub mod report;

use core::sync::atomic::{AtomicBool, Ordering};
use std::io::{IsTerminal as _, Read as _};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use ring_core::inspect::{consumer_info, producer_info, EntryState};
use ring_core::{Config, Memory, MAX_CONSUMERS, MAX_SLOT_CAPACITY};

use crate::cli::{Class, DemoArgs, Fault, ReadMode};
use crate::error::{CliError, Result};
use crate::frame;
use crate::ring::{self, Ring};
use report::{ConsumerReport, ProducerReport};

/// Allocator arena of the demo ring (descriptors are 32 bytes, one per slot at most).
const ARENA_BYTES: u64 = 64 * 1024;
/// Live-allocation ceiling of the demo ring's allocator.
const MAX_LIVE: u32 = 64;
/// How long the children get, beyond the streaming time, to start and finish.
const GRACE: Duration = Duration::from_secs(60);

/// A consumer process and what became of it.
struct ConsumerProc {
    /// Spawn order.
    id: usize,
    /// Delivery class.
    class: Class,
    /// The process, until it is reaped.
    child: Option<Child>,
    /// Whether we killed it.
    killed: bool,
    /// Its report, once it finished.
    report: Option<ConsumerReport>,
}

/// Children that are killed if the demo ends early (an error, a panic-free early return).
struct Children {
    /// The producer process.
    producer: Option<Child>,
    /// The consumer processes, killed ones included.
    consumers: Vec<ConsumerProc>,
}

impl Drop for Children {
    fn drop(&mut self) {
        let all = self
            .producer
            .iter_mut()
            .chain(self.consumers.iter_mut().filter_map(|c| c.child.as_mut()));
        for child in all {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Removes the demo's segment when the demo ends, however it ends.
struct Unlink<'a>(&'a Ring);

impl Drop for Unlink<'_> {
    fn drop(&mut self) {
        let _ = self.0.segment().unlink();
    }
}

/// Runs `ringctl demo`; returns whether every integrity check passed.
pub fn run(args: &DemoArgs) -> Result<bool> {
    let classes = classes(args)?;
    validate(args)?;
    let bytes = args.frame_size.bytes;
    let name = match &args.name {
        Some(n) => ring::segment_name(n)?,
        None => ring::segment_name(&format!("demo-{}", std::process::id()))?,
    };
    let entries = (classes.len() as u32 + 8).min(MAX_CONSUMERS);
    let mut config = Config::new(args.slots, bytes as u32)
        .with_consumers(entries)
        .with_allocator(ARENA_BYTES, MAX_LIVE);
    if let Some(pins) = args.never_stall {
        // By default one pin per latest or skip consumer (each pins one frame at a time).
        let readers = classes.iter().filter(|c| **c != Class::Gating).count();
        let pins = pins.unwrap_or(u32::try_from(readers).unwrap_or(u32::MAX));
        config = ring::never_stall(config, pins)?;
    }
    // Ctrl-C (or SIGTERM) sets the flag; the loops below notice it, and the guards kill the
    // children and remove the ring on the way out.
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, Arc::clone(&stop))
            .map_err(|e| CliError::io("installing a signal handler", e))?;
    }
    // Relaxed: the flag carries no data; a late look only delays the exit by one poll.
    let interrupted = || stop.load(Ordering::Relaxed);
    let ring = ring::create(&name, &config)?;
    let _unlink = Unlink(&ring);
    let exe = std::env::current_exe().map_err(|e| CliError::io("finding this executable", e))?;
    // A safety net only (the children end when the ring closes): the streaming time, or for
    // an unpaced --messages run, time for at least 10 frames a second.
    let stream_time = match args.messages {
        Some(m) if args.fps > 0.0 => m as f64 / args.fps,
        Some(m) => m as f64 / 10.0,
        None => args.duration,
    };
    let deadline_s = stream_time + GRACE.as_secs_f64();
    let spawn_consumer = |id: usize, class: Class| -> Result<ConsumerProc> {
        let child = Command::new(&exe)
            .arg("__demo-consumer")
            .arg(name.as_str())
            .args(["--class", class.as_str(), "--read", args.read.as_str()])
            .arg(format!("--deadline={deadline_s}"))
            .arg(format!("--hold-us={}", args.hold_us))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .map_err(|e| CliError::io("spawning a consumer process", e))?;
        Ok(ConsumerProc {
            id,
            class,
            child: Some(child),
            killed: false,
            report: None,
        })
    };
    let mut kids = Children {
        producer: None,
        consumers: Vec::new(),
    };
    for (id, &class) in classes.iter().enumerate() {
        kids.consumers.push(spawn_consumer(id, class)?);
    }
    wait_registered(&ring, &mut kids, classes.len(), &interrupted)?;
    let mut cmd = Command::new(&exe);
    cmd.arg("__demo-producer")
        .arg(name.as_str())
        .arg(format!("--fps={}", args.fps))
        .arg(format!("--duration={}", args.duration));
    match args.frame_size.dims {
        Some((w, h)) => cmd.arg(format!("--frame-size={w}x{h}")),
        None => cmd.arg(format!("--frame-size={bytes}")),
    };
    if let Some(m) = args.messages {
        cmd.arg(format!("--messages={m}"));
    }
    match args.inject_fault {
        Some(Fault::Checksum) => cmd.arg("--inject-fault=checksum"),
        Some(Fault::Leak) => cmd.arg("--inject-fault=leak"),
        None => &mut cmd,
    };
    kids.producer = Some(
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .map_err(|e| CliError::io("spawning the producer process", e))?,
    );

    let hard_deadline = Instant::now() + Duration::from_secs_f64(deadline_s);
    let (producer_status, kills) = stream(
        &ring,
        args,
        &mut kids,
        &spawn_consumer,
        hard_deadline,
        &interrupted,
    )?;
    let producer_out = take_stdout(kids.producer.take(), producer_status, "producer")?;
    let preport: ProducerReport = serde_json::from_str(producer_out.trim())
        .map_err(|e| CliError::Child(format!("producer report unreadable: {e}")))?;
    for c in &mut kids.consumers {
        let Some(child) = c.child.take() else {
            continue;
        };
        let status = wait_until(child, hard_deadline, &interrupted)?;
        let out = take_stdout(Some(status.0), status.1, "consumer")?;
        c.report = Some(
            serde_json::from_str(out.trim())
                .map_err(|e| CliError::Child(format!("consumer report unreadable: {e}")))?,
        );
    }
    let summary = finish::summarise(&ring, args, &preport, &kids.consumers, kills)?;
    let ok = summary.ok;
    if args.json {
        let line = serde_json::to_string(&summary)
            .map_err(|e| CliError::Child(format!("summary: {e}")))?;
        println!("{line}");
    } else {
        let title = format!(
            "ringctl demo: {} frames of {}, {} slots{}, {} consumers, ring {:?} ({})",
            summary.messages,
            args.frame_size.describe(),
            args.slots,
            if summary.never_stall {
                " (never-stall)"
            } else {
                ""
            },
            classes.len(),
            name.as_str(),
            crate::table::bytes(ring.segment().len())
        );
        print!("{}", report::table(&summary, &title));
    }
    Ok(ok)
}

/// Watches the run until the producer exits: progress, and the kills of
/// `--kill-consumer-every` (each victim replaced by a new consumer of its class). Returns the
/// producer's exit status and the number of kills.
fn stream(
    ring: &Ring,
    args: &DemoArgs,
    kids: &mut Children,
    spawn_consumer: &dyn Fn(usize, Class) -> Result<ConsumerProc>,
    hard_deadline: Instant,
    interrupted: &dyn Fn() -> bool,
) -> Result<(ExitStatus, u64)> {
    let bar = progress(args);
    let started = Instant::now();
    let mut next_kill = args.kill_consumer_every;
    let mut kills = 0u64;
    let status = loop {
        let head = producer_info(ring).head;
        if let Some(bar) = &bar {
            bar.set_position(match args.messages {
                Some(_) => head,
                None => started.elapsed().as_millis() as u64,
            });
            let secs = started.elapsed().as_secs_f64().max(1e-3);
            bar.set_message(format!("{head} frames, {:.0} fps", head as f64 / secs));
        }
        if let Some(p) = kids.producer.as_mut() {
            if let Some(status) = p.try_wait().map_err(|e| CliError::io("waiting", e))? {
                break status;
            }
        }
        while let Some(at) = next_kill.filter(|&at| head >= at) {
            let live: Vec<usize> = (0..kids.consumers.len())
                .filter(|&i| kids.consumers[i].child.is_some() && !kids.consumers[i].killed)
                .collect();
            // The oldest live consumer: replacements go to the end, so kills rotate through
            // the classes.
            if let Some(&victim) = live.first() {
                let v = &mut kids.consumers[victim];
                // A gating reader's pin is its cursor, not a reader bit in the slot (see
                // ring-core's `hold` module): there is no pin word to wait for or reclaim.
                let pins =
                    args.read.for_class(v.class) == ReadMode::Pin && v.class != Class::Gating;
                if let Some(child) = v.child.as_mut() {
                    // Kill a reader that pins with its bit while it holds a pin, so the run shows
                    // a pin reclaimed: wait (briefly, bounded) for one between two reads.
                    if pins {
                        wait_for_a_pin(ring, child.id());
                    }
                    let _ = child.kill();
                    let _ = child.wait();
                }
                v.killed = true;
                v.child = None;
                let class = v.class;
                let id = kids.consumers.len();
                kids.consumers.push(spawn_consumer(id, class)?);
                kills += 1;
            }
            next_kill = Some(at + args.kill_consumer_every.unwrap_or(u64::MAX));
        }
        if Instant::now() > hard_deadline {
            return Err(CliError::Timeout(
                "the demo producer did not finish in time".into(),
            ));
        }
        if interrupted() {
            return Err(CliError::Interrupted);
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    if let Some(bar) = &bar {
        bar.finish_and_clear();
    }
    Ok((status, kills))
}

/// Refuses option values the demo cannot run with.
fn validate(args: &DemoArgs) -> Result<()> {
    let bytes = args.frame_size.bytes;
    if bytes % 8 != 0 || bytes < frame::MIN_FRAME || bytes > MAX_SLOT_CAPACITY as usize {
        return Err(CliError::Usage(format!(
            "--frame-size {bytes}: demo frames must be a multiple of 8 bytes, from {} to {MAX_SLOT_CAPACITY}",
            frame::MIN_FRAME
        )));
    }
    if !(args.fps.is_finite() && args.fps >= 0.0) {
        return Err(CliError::Usage(
            "--fps must be 0 or a positive number".into(),
        ));
    }
    if !(args.duration.is_finite() && args.duration > 0.0 && args.duration < 86_400.0) {
        return Err(CliError::Usage(
            "--duration must be between 0 and 86400 seconds".into(),
        ));
    }
    if args.kill_consumer_every == Some(0) {
        return Err(CliError::Usage(
            "--kill-consumer-every must be at least 1".into(),
        ));
    }
    Ok(())
}

/// The consumers' classes: `--classes` repeated to `--consumers`.
fn classes(args: &DemoArgs) -> Result<Vec<Class>> {
    if args.classes.is_empty() {
        return Err(CliError::Usage("--classes needs at least one class".into()));
    }
    let n = args.consumers.unwrap_or(args.classes.len());
    if n == 0 || n > 16 {
        return Err(CliError::Usage(
            "--consumers must be between 1 and 16".into(),
        ));
    }
    Ok(args.classes.iter().copied().cycle().take(n).collect())
}

/// Waits up to 200 ms for the consumer process `pid` to hold a pin (it is killed anyway then).
fn wait_for_a_pin(ring: &Ring, pid: u32) {
    let deadline = Instant::now() + Duration::from_millis(200);
    while Instant::now() < deadline {
        let pinned = (0..ring.geometry().consumers())
            .filter_map(|i| consumer_info(ring, i))
            .any(|c| {
                c.state == EntryState::Active
                    && ring_core::OwnerId::new(c.owner)
                        .is_some_and(|o| ring_os::raw::owner::pid_of(o) == pid)
                    && c.pins > 0
            });
        if pinned {
            return;
        }
        std::thread::sleep(Duration::from_micros(200));
    }
}

/// Waits until `n` consumers are registered (or one of them failed), for at most 10 s.
fn wait_registered(
    ring: &Ring,
    kids: &mut Children,
    n: usize,
    interrupted: &dyn Fn() -> bool,
) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let active = (0..ring.geometry().consumers())
            .filter_map(|i| consumer_info(ring, i))
            .filter(|c| c.state == EntryState::Active)
            .count();
        if active >= n {
            return Ok(());
        }
        for c in &mut kids.consumers {
            if let Some(child) = c.child.as_mut() {
                if let Ok(Some(status)) = child.try_wait() {
                    return Err(CliError::Child(format!(
                        "a {} consumer process exited before registering ({status})",
                        c.class.as_str()
                    )));
                }
            }
        }
        if Instant::now() > deadline {
            return Err(CliError::Timeout(format!(
                "only {active} of {n} consumers registered within 10 s"
            )));
        }
        if interrupted() {
            return Err(CliError::Interrupted);
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Waits for `child` until `deadline`; kills it then.
fn wait_until(
    mut child: Child,
    deadline: Instant,
    interrupted: &dyn Fn() -> bool,
) -> Result<(Child, ExitStatus)> {
    loop {
        if interrupted() {
            let _ = child.kill();
            let _ = child.wait();
            return Err(CliError::Interrupted);
        }
        if let Some(status) = child.try_wait().map_err(|e| CliError::io("waiting", e))? {
            return Ok((child, status));
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Err(CliError::Timeout(
                "a demo consumer did not finish in time".into(),
            ));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Reads a finished child's stdout; an unsuccessful exit is an error.
fn take_stdout(child: Option<Child>, status: ExitStatus, role: &str) -> Result<String> {
    if !status.success() {
        return Err(CliError::Child(format!(
            "the demo {role} process failed ({status}); its error is above"
        )));
    }
    let mut out = String::new();
    if let Some(mut stdout) = child.and_then(|mut c| c.stdout.take()) {
        stdout
            .read_to_string(&mut out)
            .map_err(|e| CliError::io(format!("reading the {role}'s report"), e))?;
    }
    Ok(out)
}

/// A progress bar on stderr, only when stderr is a terminal and no JSON is asked for.
fn progress(args: &DemoArgs) -> Option<ProgressBar> {
    if args.json || !std::io::stderr().is_terminal() {
        return None;
    }
    let (len, template) = match args.messages {
        Some(m) => (m, "{bar:40} {pos}/{len} frames  {msg}"),
        None => ((args.duration * 1000.0) as u64, "{bar:40} {elapsed}  {msg}"),
    };
    let bar = ProgressBar::with_draw_target(Some(len), ProgressDrawTarget::stderr());
    if let Ok(style) = ProgressStyle::with_template(template) {
        bar.set_style(style);
    }
    Some(bar)
}
