//! The demo's producer process: paced, checksummed frames with an allocator descriptor each;
//! reclaims dead consumers (on a stall and every few milliseconds) and carries on.

use std::time::{Duration, Instant};

use ring_core::alloc::Allocator;
use ring_core::{ClaimError, Memory, Producer};

use super::report::ProducerReport;
use crate::cli::ProducerArgs;
use crate::error::{CliError, Result};
use crate::frame;
use crate::ring::{self, reclaim_dead, FutexWait, Ring};

/// The allocator owner tag of the producer's descriptors.
pub const DESCRIPTOR_OWNER: u16 = 1;
/// How often the producer looks for dead consumers while nothing holds it back.
const SWEEP_EVERY: Duration = Duration::from_millis(20);
/// How long one claim may be held back (by consumers that are alive) before the run fails.
const STALL_LIMIT: Duration = Duration::from_secs(10);

/// Runs the producer role; prints its report as one JSON line.
pub fn run(args: &ProducerArgs) -> Result<()> {
    let name = ring::segment_name(&args.name)?;
    let ring = Ring::open_wait(&name, Duration::from_secs(10))?;
    let bytes = args.frame_size.bytes;
    if bytes > ring.geometry().slot_capacity() {
        return Err(CliError::Usage(format!(
            "frame of {bytes} bytes does not fit the ring's {}-byte slots",
            ring.geometry().slot_capacity()
        )));
    }
    let mut producer = Producer::new(&ring, ring::owner()?)?;
    let mut alloc = Allocator::attach(ring.alloc_words())?;
    let slots = ring.geometry().slots();
    let mut descriptors = vec![0u64; slots];
    let mut buf = vec![0u8; bytes];
    let mut report = ProducerReport::default();
    let period = (args.fps > 0.0).then(|| Duration::from_secs_f64(1.0 / args.fps));
    let duration = Duration::from_secs_f64(args.duration.max(0.0));
    let start = Instant::now();
    let mut next_sweep = start + SWEEP_EVERY;
    let mut seq = 0u64;
    loop {
        let done = match args.messages {
            Some(m) => seq >= m,
            None => start.elapsed() >= duration,
        };
        if done {
            break;
        }
        if let Some(p) = period {
            let due = start + p.mul_f64(seq as f64);
            let now = Instant::now();
            if due > now {
                std::thread::sleep(due - now);
            }
        }
        if Instant::now() >= next_sweep {
            sweep(&mut producer, &mut report);
            next_sweep = Instant::now() + SWEEP_EVERY;
        }
        let stalled_since = Instant::now();
        loop {
            let wait = &mut FutexWait::new(Duration::from_millis(20), Duration::from_millis(5));
            let err = match producer.claim(wait) {
                Ok(mut slot) => {
                    seq = slot.seq();
                    let index = (seq % slots as u64) as usize;
                    // The slot's previous message is gone (we hold the slot, so no pins):
                    // free its descriptor.
                    if let Some(old) = descriptors.get_mut(index) {
                        if *old != 0 {
                            alloc.free(*old, DESCRIPTOR_OWNER)?;
                            *old = 0;
                        }
                    }
                    let a = alloc.alloc(
                        frame::DESCRIPTOR_BYTES as u64,
                        DESCRIPTOR_OWNER,
                        ring::monotonic_ns() / 1_000_000,
                    )?;
                    let sum = frame::fill(&mut buf, seq, a.handle);
                    let d = frame::descriptor(seq, bytes, args.frame_size.dims, sum);
                    alloc.writer(&a)?.write(&d)?;
                    report.allocations += 1;
                    if let Some(slot_desc) = descriptors.get_mut(index) {
                        *slot_desc = a.handle;
                    }
                    slot.write(&buf)
                        .map_err(|e| CliError::Usage(e.to_string()))?;
                    slot.set_meta([ring::monotonic_ns(), sum]);
                    seq = slot.publish() + 1;
                    break;
                }
                Err(e) => e,
            };
            if err == ClaimError::Closed {
                return Err(err.into());
            }
            report.stalls += 1;
            sweep(&mut producer, &mut report);
            if stalled_since.elapsed() > STALL_LIMIT {
                return Err(CliError::Timeout(format!(
                    "producer held back for {} s: {err}",
                    STALL_LIMIT.as_secs()
                )));
            }
        }
    }
    report.elapsed_s = start.elapsed().as_secs_f64();
    report.published = producer.published();
    producer.close();
    sweep(&mut producer, &mut report);
    report.live_descriptors = descriptors.into_iter().filter(|&h| h != 0).collect();
    let line = serde_json::to_string(&report)
        .map_err(|e| CliError::Child(format!("producer report: {e}")))?;
    println!("{line}");
    Ok(())
}

/// Reclaims dead consumers and counts them.
fn sweep<M: Memory>(producer: &mut Producer<M>, report: &mut ProducerReport) {
    let s = reclaim_dead(producer);
    report.reclaimed_consumers += s.entries;
    report.reclaimed_pins += s.pins;
}
