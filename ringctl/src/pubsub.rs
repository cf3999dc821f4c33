//! `ringctl pub` (stdin → ring) and `ringctl sub` (ring → stdout), for shell pipelines.

use std::io::{BufWriter, ErrorKind, Read, Write};
use std::time::{Duration, Instant};

use ring_core::inspect::{consumer_info, EntryState};
use ring_core::{
    ClaimError, Config, Consumer, Error, Memory, OwnerId, Producer, ReadError, MAX_SLOT_CAPACITY,
};

use crate::cli::{PubArgs, SubArgs};
use crate::error::{CliError, Result};
use crate::ring::{self, reclaim_dead, FutexWait, Ring};

/// Removes a ring this command created when the command ends, however it ends.
struct RemoveOnExit<'a>(Option<&'a Ring>);

impl Drop for RemoveOnExit<'_> {
    fn drop(&mut self) {
        if let Some(ring) = self.0 {
            let _ = ring.unlink();
        }
    }
}

/// A positive, finite number of seconds.
fn seconds(value: f64, what: &str) -> Result<Duration> {
    if value.is_finite() && value > 0.0 && value < 1e9 {
        Ok(Duration::from_secs_f64(value))
    } else {
        Err(CliError::Usage(format!(
            "{what} must be a positive number of seconds"
        )))
    }
}

/// Opens the ring, or creates it for `args` when it does not exist. True when created.
fn open_or_create(args: &PubArgs) -> Result<(Ring, bool)> {
    let name = ring::segment_name(&args.name)?;
    match Ring::open(&name) {
        Ok(r) => return Ok((r, false)),
        Err(CliError::Os(ring_os::Error::NotFound { .. })) => {}
        Err(e) => return Err(e),
    }
    let capacity = u32::try_from(args.frame_size.bytes).unwrap_or(u32::MAX);
    let config = Config::new(args.slots, capacity).with_consumers(args.max_consumers);
    match Ring::create(&name, &config) {
        Ok(r) => Ok((r, true)),
        // Someone else created it meanwhile: use theirs.
        Err(CliError::Os(ring_os::Error::AlreadyExists { .. })) => {
            Ok((Ring::open_wait(&name, Duration::from_secs(5))?, false))
        }
        Err(e) => Err(e),
    }
}

/// Runs `ringctl pub`.
pub fn publish(args: &PubArgs) -> Result<()> {
    let timeout = seconds(args.timeout, "--timeout")?;
    let frame = args.frame_size.bytes;
    if frame == 0 || frame > MAX_SLOT_CAPACITY as usize {
        return Err(CliError::Usage(format!(
            "--frame-size must be between 1 and {MAX_SLOT_CAPACITY} bytes"
        )));
    }
    let (ring, created) = open_or_create(args)?;
    let _remove = RemoveOnExit((created && !args.keep).then_some(&ring));
    if frame > ring.geometry().slot_capacity() {
        return Err(CliError::Usage(format!(
            "--frame-size {frame} exceeds the slots of ring {:?} ({} bytes)",
            args.name,
            ring.geometry().slot_capacity()
        )));
    }
    let me = ring::owner()?;
    let mut producer = match Producer::new(&ring, me) {
        Ok(p) => p,
        Err(Error::ProducerExists { owner }) if ring::alive(owner) == Some(false) => {
            let dead = OwnerId::new(owner).ok_or(Error::ProducerExists { owner })?;
            Producer::take_over(&ring, me, dead)?
        }
        Err(e) => return Err(e.into()),
    };
    wait_for_consumers(&ring, args.wait_consumers, timeout)?;
    let mut stdin = std::io::stdin().lock();
    let mut buf = vec![0u8; frame];
    loop {
        let n = fill(&mut stdin, &mut buf)?;
        if n == 0 {
            break;
        }
        let data = buf.get(..n).unwrap_or(&[]);
        let since = Instant::now();
        loop {
            let wait = &mut FutexWait::new(Duration::from_millis(50), Duration::from_millis(10));
            let err = match producer.claim(wait) {
                Ok(mut slot) => {
                    slot.write(data)
                        .map_err(|e| CliError::Usage(e.to_string()))?;
                    slot.publish();
                    break;
                }
                Err(e) => e,
            };
            if err == ClaimError::Closed {
                return Err(err.into());
            }
            reclaim_dead(&mut producer);
            if since.elapsed() > timeout {
                return Err(CliError::Timeout(format!(
                    "consumers held the ring back for {:.0} s: {err}",
                    timeout.as_secs_f64()
                )));
            }
        }
    }
    producer.close();
    let drained = producer.wait_drained(&mut FutexWait::new(timeout, Duration::from_millis(20)));
    if !drained {
        return Err(CliError::Timeout(format!(
            "gating consumers did not read everything within {:.0} s",
            timeout.as_secs_f64()
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

/// Waits until `n` consumers are registered.
fn wait_for_consumers(ring: &Ring, n: u32, timeout: Duration) -> Result<()> {
    let deadline = Instant::now() + timeout;
    loop {
        let active = (0..ring.geometry().consumers())
            .filter_map(|i| consumer_info(ring, i))
            .filter(|c| c.state == EntryState::Active)
            .count();
        if active >= n as usize {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(CliError::Timeout(format!(
                "{active} of {n} consumers registered within {:.0} s (start `ringctl sub {}`, or \
                 pass --wait-consumers 0)",
                timeout.as_secs_f64(),
                ring.name().as_str()
            )));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Runs `ringctl sub`.
pub fn subscribe(args: &SubArgs) -> Result<()> {
    let timeout = seconds(args.timeout, "--timeout")?;
    let name = ring::segment_name(&args.name)?;
    let ring = Ring::open_wait(&name, timeout)?;
    let mut consumer = Consumer::new(&ring, args.class.delivery(), ring::owner()?)?;
    let mut out = BufWriter::with_capacity(1 << 20, std::io::stdout().lock());
    let write_err = |e| CliError::io("writing stdout", e);
    let mut idle_since = Instant::now();
    loop {
        let wait = &mut FutexWait::new(Duration::from_millis(200), Duration::from_millis(50));
        let err = match consumer.pin(wait) {
            Ok(msg) => {
                out.write_all(msg.bytes()).map_err(write_err)?;
                idle_since = Instant::now();
                continue;
            }
            Err(e) => e,
        };
        match err {
            ReadError::Closed => break,
            ReadError::Timeout | ReadError::Empty | ReadError::Lagging | ReadError::Busy => {
                out.flush().map_err(write_err)?;
                match ring::alive(consumer.producer_owner()) {
                    Some(false) => return Err(ReadError::ProducerGone.into()),
                    None if idle_since.elapsed() > timeout => {
                        return Err(CliError::Timeout(format!(
                            "ring {:?} has had no producer for {:.0} s",
                            args.name,
                            timeout.as_secs_f64()
                        )));
                    }
                    _ => {}
                }
            }
            e => return Err(e.into()),
        }
    }
    out.flush().map_err(write_err)?;
    if consumer.missed() > 0 {
        eprintln!(
            "ringctl: sub: {} messages were skipped ({} class)",
            consumer.missed(),
            args.class.as_str()
        );
    }
    Ok(())
}
