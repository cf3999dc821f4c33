//! The demo's producer process: paced, checksummed frames with an allocator descriptor each;
//! reclaims dead consumers (when they hold it back, and every few milliseconds) and carries on.

use std::time::{Duration, Instant};

use ring_core::arena::Allocator;
use ring_core::{ClaimError, Memory, WriteSlot};
use ring_os::raw::{FutexWait, Mapping, ProducerExt as _, ShmProducer, ShmRing, LIVENESS_PERIOD};

use super::report::ProducerReport;
use crate::cli::{Fault, ProducerArgs};
use crate::error::{CliError, Result};
use crate::frame::{self, FrameSize};
use crate::ring;

/// The allocator owner tag of the producer's descriptors.
pub const DESCRIPTOR_OWNER: u16 = 1;
/// How often the producer looks for dead consumers while nothing holds it back.
const SWEEP_EVERY: Duration = Duration::from_millis(20);
/// How long one claim may be held back (by consumers that are alive) before the run fails.
const STALL_LIMIT: Duration = Duration::from_secs(10);

/// What writing one frame needs besides the slot.
struct Writer<'a> {
    /// The ring's allocator (the producer is its only mutator).
    alloc: Allocator<'a>,
    /// The descriptor handle of the message in each slot (0: none).
    descriptors: Vec<u64>,
    /// The frame being built.
    buf: Vec<u8>,
    /// Frame size and dimensions.
    size: FrameSize,
    /// Descriptors allocated.
    allocations: u64,
    /// A deliberate fault (tests).
    fault: Option<Fault>,
}

impl Writer<'_> {
    /// Frees the slot's previous descriptor, allocates this frame's, fills the frame, writes and
    /// publishes it.
    fn write(&mut self, mut slot: WriteSlot<'_, std::sync::Arc<Mapping>>) -> Result<u64> {
        let seq = slot.seq();
        // The slot the ring chose: `seq % slots` on a default ring, any free one on a
        // never-stall ring. Its previous message is gone (we hold the slot, so no one pins it,
        // and no gating consumer needs it): free its descriptor.
        let index = slot.slot();
        let leak = self.fault == Some(Fault::Leak) && seq % 5 == 0;
        if let Some(old) = self.descriptors.get_mut(index) {
            if *old != 0 {
                self.alloc.free(*old, DESCRIPTOR_OWNER)?;
                *old = 0;
            }
        }
        let a = self.alloc.alloc(
            frame::DESCRIPTOR_BYTES as u64,
            DESCRIPTOR_OWNER,
            ring::epoch_ms(),
        )?;
        self.allocations += 1;
        if let Some(d) = self.descriptors.get_mut(index).filter(|_| !leak) {
            *d = a.handle;
        }
        let mut sum = frame::fill(&mut self.buf, seq, a.handle);
        let d = frame::descriptor(seq, self.buf.len(), self.size.dims, sum);
        self.alloc.writer(&a)?.write(&d)?;
        slot.write(&self.buf)
            .map_err(|e| CliError::Usage(e.to_string()))?;
        if self.fault == Some(Fault::Checksum) && seq % 7 == 3 {
            sum ^= 1;
        }
        slot.set_meta([ring::monotonic_ns(), sum]);
        Ok(slot.publish()?)
    }

    /// Writes the next frame into the slot a claim gave (see [`write`](Self::write)), moving
    /// `seq` past it: `None`; or the claim's refusal (a closed ring is an error).
    fn write_claimed(
        &mut self,
        claimed: core::result::Result<WriteSlot<'_, std::sync::Arc<Mapping>>, ClaimError>,
        seq: &mut u64,
    ) -> Result<Option<ClaimError>> {
        match claimed {
            Ok(slot) => {
                *seq = self.write(slot)? + 1;
                Ok(None)
            }
            Err(ClaimError::Closed) => Err(ClaimError::Closed.into()),
            Err(e) => Ok(Some(e)),
        }
    }
}

/// Runs the producer role; prints its report as one JSON line.
pub fn run(args: &ProducerArgs) -> Result<()> {
    let name = ring::segment_name(&args.name)?;
    let ring = ring::open_wait(&name, Duration::from_secs(10))?;
    let bytes = args.frame_size.bytes;
    if bytes > ring.geometry().slot_capacity() {
        return Err(CliError::Usage(format!(
            "frame of {bytes} bytes does not fit the ring's {}-byte slots",
            ring.geometry().slot_capacity()
        )));
    }
    let mut producer = ShmRing::producer(&ring)?;
    let mut w = Writer {
        alloc: Allocator::attach(ring.alloc_words())?,
        descriptors: vec![0; ring.geometry().slots()],
        buf: vec![0; bytes],
        size: args.frame_size,
        allocations: 0,
        fault: args.inject_fault,
    };
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
        if w.write_claimed(producer.try_claim(), &mut seq)?.is_none() {
            continue;
        }
        // Held back (a gating consumer's cursor or a pin): wait, reclaiming dead holders (counted
        // here, which is why this does not use ring-os's `claim_with`).
        report.stalls += 1;
        let since = Instant::now();
        loop {
            let claimed = producer.claim(&mut FutexWait::new(LIVENESS_PERIOD));
            let Some(err) = w.write_claimed(claimed, &mut seq)? else {
                break;
            };
            sweep(&mut producer, &mut report);
            if since.elapsed() > STALL_LIMIT {
                return Err(CliError::Timeout(format!(
                    "producer held back for {} s: {err}",
                    STALL_LIMIT.as_secs()
                )));
            }
        }
    }
    report.elapsed_s = start.elapsed().as_secs_f64();
    report.published = producer.published();
    report.allocations = w.allocations;
    producer.close();
    sweep(&mut producer, &mut report);
    report.live_descriptors = w.descriptors.into_iter().filter(|&h| h != 0).collect();
    let line = serde_json::to_string(&report)
        .map_err(|e| CliError::Child(format!("producer report: {e}")))?;
    println!("{line}");
    Ok(())
}

/// Reclaims dead consumers and counts them.
fn sweep(producer: &mut ShmProducer, report: &mut ProducerReport) {
    for r in producer.reclaim_dead() {
        report.reclaimed_consumers += 1;
        report.reclaimed_pins += u64::from(r.pins_cleared);
    }
}
