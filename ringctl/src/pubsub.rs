//! `ringctl pub` (stdin → ring) and `ringctl sub` (ring → stdout), for shell pipelines.

use std::io::{BufWriter, ErrorKind, Read, Write};
use std::time::{Duration, Instant};

use ring_core::{ClaimError, Config, Memory, ReadError, MAX_SLOT_CAPACITY};
use ring_os::raw::{ConsumerExt as _, ProducerExt as _, ShmReadError, ShmRing};

use crate::cli::{PubArgs, SubArgs};
use crate::error::{CliError, Result};
use crate::ring::{self, Ring};

/// Removes a ring this command created when the command ends, however it ends.
struct RemoveOnExit<'a>(Option<&'a Ring>);

impl Drop for RemoveOnExit<'_> {
    fn drop(&mut self) {
        if let Some(ring) = self.0 {
            let _ = ring.segment().unlink();
        }
    }
}

/// A positive, finite number of seconds (`--timeout` of `pub`, `sub` and `bridge`).
pub(crate) fn seconds(value: f64, what: &str) -> Result<Duration> {
    if value.is_finite() && value > 0.0 && value < 1e9 {
        Ok(Duration::from_secs_f64(value))
    } else {
        Err(CliError::Usage(format!(
            "{what} must be a positive number of seconds"
        )))
    }
}

/// The configuration of a ring `pub` creates.
fn config_of(args: &PubArgs) -> Result<Config> {
    let capacity = u32::try_from(args.frame_size.bytes).unwrap_or(u32::MAX);
    let config = Config::new(args.slots, capacity)
        .with_consumers(args.max_consumers)
        .with_asymmetric_fences(args.asymmetric_fences);
    match never_stall_pins(args) {
        Some(pins) => ring::never_stall(config, pins),
        None => Ok(config),
    }
}

/// `--never-stall [PINS]`: the pins asked for (1 without a value).
fn never_stall_pins(args: &PubArgs) -> Option<u32> {
    args.never_stall.map(|pins| pins.unwrap_or(1))
}

/// Opens the ring, or creates it for `args` when it does not exist. True when created. A ring
/// that exists must be never-stall enough when `--never-stall` asks for it.
fn open_or_create(args: &PubArgs) -> Result<(Ring, bool)> {
    let name = ring::segment_name(&args.name)?;
    let config = config_of(args)?;
    let (ring, created) = match ring::open(&name) {
        Ok(r) => (r, false),
        Err(CliError::Os(ring_os::Error::NotFound { .. })) => match ring::create(&name, &config) {
            Ok(r) => (r, true),
            // Someone else created it meanwhile: use theirs.
            Err(CliError::Os(ring_os::Error::AlreadyExists { .. })) => {
                (ring::open_wait(&name, Duration::from_secs(5))?, false)
            }
            Err(e) => return Err(e),
        },
        Err(e) => return Err(e),
    };
    if let (Some(pins), false) = (never_stall_pins(args), created) {
        ring::check_never_stall(&ring, pins)?;
    }
    Ok((ring, created))
}

/// Runs `ringctl pub`: `Ok(false)` when the stream was delivered but a gating reader died with
/// messages unread (exit status 1, the reader named on stderr).
pub fn publish(args: &PubArgs) -> Result<bool> {
    let timeout = seconds(args.timeout, "--timeout")?;
    let frame = args.frame_size.bytes;
    if frame == 0 || frame > MAX_SLOT_CAPACITY as usize {
        return Err(CliError::Usage(format!(
            "--frame-size must be between 1 and {MAX_SLOT_CAPACITY} bytes"
        )));
    }
    // A memfd ring is new, served until this command ends, and leaves nothing behind.
    let (ring, created, _server) = if args.memfd {
        #[cfg(windows)]
        return Err(ring::no_memfd());
        #[cfg(unix)]
        {
            let name = ring::segment_name(&args.name)?;
            let rdv = ring::rendezvous(&name, args.socket_dir.as_deref());
            let (ring, server) =
                rdv.create(&config_of(args)?, ring_os::raw::CreateOptions::new())?;
            (ring, false, Some(server))
        }
    } else {
        let (ring, created) = open_or_create(args)?;
        (ring, created, None::<ring::Server>)
    };
    let _remove = RemoveOnExit((created && !args.keep).then_some(&ring));
    if frame > ring.geometry().slot_capacity() {
        return Err(CliError::Usage(format!(
            "--frame-size {frame} exceeds the slots of ring {:?} ({} bytes)",
            args.name,
            ring.geometry().slot_capacity()
        )));
    }
    // Takes the ring over if its previous producer died.
    let mut producer = ShmRing::producer(&ring)?;
    if let Some(group) = &args.group {
        producer.create_group(group)?;
    }
    // A failure ends the stream as aborted with a code that says why (dropping the producer
    // would say only "dropped"), so `ringctl sub` can tell its reader what happened.
    if let Err(e) = stream(args, &ring, &mut producer, timeout) {
        producer.abort(abort_code_of(&e));
        return Err(e);
    }
    Ok(report_lost_readers(&producer.lost_readers()))
}

/// The shared abort code ([`ring_core::abort_code`]) a failure of `pub` ends the stream with.
fn abort_code_of(e: &CliError) -> u16 {
    use ring_core::abort_code;
    match e {
        CliError::Timeout(_) => abort_code::TIMED_OUT,
        CliError::Io { .. } => abort_code::INPUT_FAILED,
        CliError::Interrupted => abort_code::INTERRUPTED,
        CliError::Os(ring_os::Error::Truncated { .. }) => abort_code::SEGMENT_BROKEN,
        _ => abort_code::DROPPED,
    }
}

/// Tells stderr about every reader that died without leaving; false when a gating reader died
/// with messages unread (the stream did not reach everyone it promised to).
fn report_lost_readers(lost: &ring_core::LostReaders) -> bool {
    if lost.total == 0 {
        return true;
    }
    let who = |l: &ring_core::LostReader| {
        let class = l.class.map_or("unknown-class", |c| match c {
            ring_core::DeliveryClass::Gating => "gating",
            ring_core::DeliveryClass::LatestOnly => "latest-only",
            ring_core::DeliveryClass::SkipOnLag => "skip-on-lag",
        });
        let owner = ring_core::OwnerId::new(l.reclaimed.owner)
            .map_or_else(|| "no owner".to_owned(), ring_os::raw::owner::describe);
        format!("{class} reader in entry {} ({owner})", l.reclaimed.index)
    };
    match &lost.first_gating_unread {
        Some(l) => {
            eprintln!(
                "ringctl: pub: the {} died with {} of {} messages unread; {} reader(s) died in \
                 all",
                who(l),
                l.unread(),
                l.published,
                lost.total
            );
            false
        }
        None => {
            if let Some(l) = &lost.last {
                eprintln!(
                    "ringctl: pub: {} reader(s) died without leaving (last: the {}); no gating \
                     reader lost messages",
                    lost.total,
                    who(l)
                );
            }
            true
        }
    }
}

/// Streams stdin into the ring, then closes it and waits for the gating readers.
fn stream(
    args: &PubArgs,
    ring: &Ring,
    producer: &mut ring_os::raw::ShmProducer,
    timeout: Duration,
) -> Result<()> {
    let frame = args.frame_size.bytes;
    wait_for_consumers(producer, ring, args.wait_consumers, timeout)?;
    let mut stdin = std::io::stdin().lock();
    let mut buf = vec![0u8; frame];
    loop {
        let n = fill(&mut stdin, &mut buf)?;
        if n == 0 {
            break;
        }
        // Waits for slow consumers at most `timeout`, reclaiming dead ones.
        producer
            .publish(buf.get(..n).unwrap_or(&[]), timeout)
            .map_err(|e| match e {
                ClaimError::Full { .. } | ClaimError::Pinned { .. } => CliError::Timeout(format!(
                    "consumers held the ring back for {}: {e}",
                    crate::table::duration(timeout)
                )),
                e => ring::or_truncated(ring, e),
            })?;
    }
    producer.close();
    if !producer.wait_drained_for(timeout) {
        ring.check_truncated()?;
        return Err(CliError::Timeout(format!(
            "gating consumers did not read everything within {}",
            crate::table::duration(timeout)
        )));
    }
    Ok(())
}

/// Reads until `buf` is full or the input ends; returns the bytes read.
fn fill(input: &mut impl Read, buf: &mut [u8]) -> Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match input.read(buf.get_mut(filled..).unwrap_or(&mut [])) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(CliError::io("reading stdin", e)),
        }
    }
    Ok(filled)
}

/// Waits until `n` consumers are registered with a final start point (ring-core's
/// `ready` handshake): a consumer half way through registering is not counted, so a gating
/// consumer receives every message published after this returns.
fn wait_for_consumers(
    producer: &mut ring_os::raw::ShmProducer,
    ring: &Ring,
    n: u32,
    timeout: Duration,
) -> Result<()> {
    let n = n as usize;
    if producer.wait_for_consumers(n, &mut ring_os::raw::FutexWait::new(timeout)) {
        return Ok(());
    }
    Err(CliError::Timeout(format!(
        "{} of {n} consumers registered within {} (start `ringctl sub {}`, or pass \
         --wait-consumers 0)",
        producer.ready_consumers(),
        crate::table::duration(timeout),
        ring::name_of(ring)
    )))
}

/// Why `sub` stops writing.
enum Stop {
    /// The reader closed the pipe: end without an error.
    Quiet,
    /// A real error.
    Err(CliError),
}

impl Stop {
    fn into_result(self) -> Result<()> {
        match self {
            Self::Quiet => Ok(()),
            Self::Err(e) => Err(e),
        }
    }
}

/// Joins `group`, waiting up to `timeout` for the publisher to create it.
fn join_group_wait(
    ring: &std::sync::Arc<ring_os::raw::Mapping>,
    group: &str,
    timeout: Duration,
) -> Result<ring_os::raw::ShmConsumer> {
    let deadline = std::time::Instant::now() + timeout;
    loop {
        match ShmRing::group_member(ring, group) {
            Err(ring_os::Error::Ring(ring_core::Error::NoSuchGroup))
                if std::time::Instant::now() < deadline =>
            {
                std::thread::sleep(Duration::from_millis(10));
            }
            other => return Ok(other?),
        }
    }
}

/// Runs `ringctl sub`.
pub fn subscribe(args: &SubArgs) -> Result<()> {
    let timeout = seconds(args.timeout, "--timeout")?;
    let name = ring::segment_name(&args.name)?;
    let ring = if args.memfd {
        #[cfg(windows)]
        return Err(ring::no_memfd());
        #[cfg(unix)]
        ring::receive(&name, args.socket_dir.as_deref(), timeout)?
    } else {
        ring::open_wait(&name, timeout)?
    };
    let mut consumer = match &args.group {
        Some(group) => join_group_wait(&ring, group, timeout)?,
        None => ShmRing::consumer(&ring, args.class.delivery())?,
    };
    if args.history > 0 {
        consumer
            .rewind(args.history)
            .map_err(|e| CliError::Usage(format!("--history {}: {e}", args.history)))?;
    }
    let mut out = BufWriter::with_capacity(1 << 20, std::io::stdout().lock());
    // A reader that went away (`ringctl sub r | head`) ends the subscription quietly, as for
    // any Unix filter; other write errors are errors.
    let write_err = |e: std::io::Error| {
        if e.kind() == ErrorKind::BrokenPipe {
            Stop::Quiet
        } else {
            Stop::Err(CliError::io("writing stdout", e))
        }
    };
    let mut idle_since = Instant::now();
    loop {
        let err = match consumer.recv_pinned(Duration::from_millis(200)) {
            Ok(msg) => {
                if let Err(stop) = out.write_all(msg.bytes()).map_err(write_err) {
                    return stop.into_result();
                }
                // A peer that truncates the segment while we read zeroes what we copied: end
                // with the error rather than pass zeros on silently.
                drop(msg);
                ring.check_truncated()?;
                idle_since = Instant::now();
                continue;
            }
            Err(e) => e,
        };
        match err {
            ShmReadError::Read(ReadError::Closed) => break,
            ShmReadError::Read(ReadError::Timeout | ReadError::Empty | ReadError::Lagging) => {
                if let Err(stop) = out.flush().map_err(write_err) {
                    return stop.into_result();
                }
                // A dead producer is `ProducerGone` (below); a ring without one times out.
                if consumer.producer_owner() == 0 && idle_since.elapsed() > timeout {
                    return Err(CliError::Timeout(format!(
                        "ring {:?} has had no producer for {}",
                        args.name,
                        crate::table::duration(timeout)
                    )));
                }
            }
            e => return Err(ring::or_truncated(&ring, e)),
        }
    }
    if let Err(stop) = out.flush().map_err(write_err) {
        return stop.into_result();
    }
    if consumer.missed() > 0 {
        eprintln!(
            "ringctl: sub: {} messages were skipped ({} class)",
            consumer.missed(),
            args.class.as_str()
        );
    }
    Ok(())
}
