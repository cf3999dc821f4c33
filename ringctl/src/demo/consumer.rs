//! A demo consumer process: reads by its delivery class until the ring closes, verifying every
//! frame (header, checksum, allocator descriptor) and accounting for every sequence number.

use core::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use ring_core::arena::Allocator;
use ring_core::{Consumer, Memory, ReadError};
use ring_os::raw::{ConsumerExt as _, ShmReadError, ShmRing};

use super::report::{histogram, ConsumerReport};
use crate::cli::{ConsumerArgs, ReadMode};
use crate::error::{CliError, Result};
use crate::frame;
use crate::ring;

/// What one read found.
struct Seen {
    /// Sequence number.
    seq: u64,
    /// Publish-to-read latency in ns.
    latency_ns: u64,
    /// Whether the header and checksum matched.
    whole: bool,
    /// Whether the descriptor matched (always true for copy reads, which do not check it).
    descriptor_ok: bool,
}

/// Runs the consumer role; prints its report as one JSON line.
pub fn run(args: &ConsumerArgs) -> Result<()> {
    let name = ring::segment_name(&args.name)?;
    let ring = ring::open_wait(&name, Duration::from_secs(10))?;
    let mut consumer = ShmRing::consumer(&ring, args.class.delivery())?;
    let alloc = Allocator::attach(ring.alloc_words())?;
    let mode = args.read.for_class(args.class);
    let mut buf = match mode {
        ReadMode::Copy => vec![0u8; ring.geometry().slot_capacity()],
        _ => Vec::new(),
    };
    let started = Instant::now();
    let deadline = started + Duration::from_secs_f64(args.deadline.max(1.0));
    let mut hist: Histogram<u64> = histogram()?;
    let mut r = ConsumerReport {
        class: args.class.as_str().to_owned(),
        read: mode.as_str().to_owned(),
        start: consumer.cursor(),
        ..ConsumerReport::default()
    };
    let mut expect = r.start;
    loop {
        if Instant::now() > deadline {
            return Err(CliError::Timeout(format!(
                "consumer ({}) gave up after {:.0} s without the ring closing",
                r.class, args.deadline
            )));
        }
        let wait = Duration::from_millis(100);
        let hold = Duration::from_micros(args.hold_us);
        let seen = match mode {
            ReadMode::Copy => read_copy(&mut consumer, &mut buf, wait),
            _ => read_pinned(&mut consumer, &alloc, wait, hold),
        };
        match seen {
            Ok(s) => {
                let _ = hist.record(s.latency_ns.max(1));
                r.delivered += 1;
                if s.seq < expect {
                    r.order_errors += 1;
                } else {
                    r.skipped += s.seq - expect;
                }
                expect = s.seq + 1;
                r.torn += u64::from(!s.whole);
                r.descriptor_errors += u64::from(!s.descriptor_ok);
            }
            Err(ShmReadError::Read(ReadError::Closed)) => break,
            // Nothing yet, or overrun while reading: try again (a dead producer is reported as
            // `ProducerGone` by the wait).
            Err(ShmReadError::Read(ReadError::Timeout | ReadError::Empty | ReadError::Lagging)) => {
            }
            Err(e) => return Err(e.into()),
        }
    }
    r.end = consumer.cursor();
    r.ring_missed = consumer.missed();
    r.elapsed_s = started.elapsed().as_secs_f64();
    r.latency_ns = hist
        .iter_recorded()
        .map(|v| (v.value_iterated_to(), v.count_at_value()))
        .collect();
    drop(consumer);
    let line =
        serde_json::to_string(&r).map_err(|e| CliError::Child(format!("consumer report: {e}")))?;
    println!("{line}");
    Ok(())
}

/// Pins the next message and verifies it in place.
fn read_pinned<M: ring_os::raw::RoleFile>(
    consumer: &mut Consumer<M>,
    alloc: &Allocator<'_>,
    wait: Duration,
    hold: Duration,
) -> Result<Seen, ShmReadError> {
    let msg = consumer.recv_pinned(wait)?;
    let now = ring::monotonic_ns();
    let [stamp, sum] = msg.meta();
    let words = msg.words();
    // Relaxed: the slot is pinned, so the producer cannot write it; nothing else to order.
    let word = |i: usize| words.get(i).map_or(0, |w| w.load(Ordering::Relaxed));
    let seq = msg.seq();
    let len = msg.len();
    let whole = frame::header_ok(len, seq, word) && frame::checksum(len / 8, seq, word) == sum;
    let descriptor_ok = alloc
        .lookup(word(1))
        .ok()
        .and_then(|a| {
            let mut d = [0u8; frame::DESCRIPTOR_BYTES];
            alloc.read(&a, &mut d).ok().map(|_| d)
        })
        .is_some_and(|d| {
            let want = frame::descriptor(seq, len, None, sum);
            d[..16] == want[..16] && d[24..] == want[24..]
        });
    if !hold.is_zero() {
        // "Processing" the frame in place: the pin keeps the producer off this slot.
        std::thread::sleep(hold);
    }
    Ok(Seen {
        seq,
        latency_ns: now.saturating_sub(stamp),
        whole,
        descriptor_ok,
    })
}

/// Copies the next message out (seqlock) and verifies the copy.
fn read_copy<M: ring_os::raw::RoleFile>(
    consumer: &mut Consumer<M>,
    buf: &mut [u8],
    wait: Duration,
) -> Result<Seen, ShmReadError> {
    let c = consumer.recv(buf, wait)?;
    let now = ring::monotonic_ns();
    let data = buf.get(..c.len).unwrap_or(&[]);
    let word = |i: usize| frame::word_at(data, i);
    let whole = frame::header_ok(c.len, c.seq, word)
        && frame::checksum(c.len / 8, c.seq, word) == c.meta[1];
    Ok(Seen {
        seq: c.seq,
        latency_ns: now.saturating_sub(c.meta[0]),
        whole,
        descriptor_ok: true,
    })
}
