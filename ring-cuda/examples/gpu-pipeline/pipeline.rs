//! The frame pipeline of `gpu-pipeline`: a producer publishing patterned frames and consumers
//! that copy each frame into a private device buffer and check it for tearing.
//!
//! Frame `seq` is `len` bytes of `pattern_byte(seq)` with `seq` (little endian) in its first
//! and last 8 bytes. A consumer copies the slot into its own buffer on its stream (after the
//! device-side wait on the write event), then reads back the head, the middle byte and the
//! tail: a frame overwritten during the copy, or copied before it was written, shows up as a
//! mismatch (`torn`).

use core::time::Duration;
use std::time::Instant;

use hdrhistogram::Histogram;
use ring_cuda::ring::{monotonic_ns, DeviceConsumer, DeviceProducer, RingError, TableMemory};
use ring_cuda::{At, Device, Error, ExportKind, Mem, Owner};
use ring_os::raw::RoleFile;

/// The fill byte of frame `seq`.
#[must_use]
pub const fn pattern_byte(seq: u64) -> u8 {
    (seq % 251) as u8 + 1
}

/// What a producer run did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProducerStats {
    /// Frames published.
    pub published: u64,
    /// Wall time of the run.
    pub elapsed: Duration,
}

/// What a consumer run saw.
#[derive(Clone, Debug)]
pub struct ConsumerStats {
    /// Frames read.
    pub received: u64,
    /// Frames whose copy did not match the pattern of their sequence.
    pub torn: u64,
    /// Frames skipped (reported missed, plus gaps in the sequence).
    pub skipped: u64,
    /// Latency of every frame after the first `slots` ones, nanoseconds: from the producer
    /// beginning the frame (before its writes) to the consumer's host seeing its copy done.
    pub latencies: Histogram<u64>,
    /// The same for the first `slots` frames, reported apart (each is the first use of its
    /// slot: first waits on each event, caches warming up).
    pub first: Histogram<u64>,
}

/// A latency histogram: 1 ns to 100 s, 3 significant digits.
fn histogram() -> Histogram<u64> {
    // The bounds are constants that hdrhistogram accepts (low >= 1, high >= 2 * low, 3 digits).
    Histogram::new_with_bounds(1, 100_000_000_000, 3).unwrap_or_else(|_| {
        Histogram::new(3).unwrap_or_else(|_| unreachable!("3 significant digits are valid"))
    })
}

impl ConsumerStats {
    fn new() -> Self {
        Self {
            received: 0,
            torn: 0,
            skipped: 0,
            latencies: histogram(),
            first: histogram(),
        }
    }

    /// The `q` quantile (0.0..=1.0) of the latencies after the first `slots` frames,
    /// nanoseconds (0 when empty).
    #[must_use]
    pub fn quantile_ns(&self, q: f64) -> u64 {
        self.latencies.value_at_quantile(q.clamp(0.0, 1.0))
    }

    /// The largest latency among the first `slots` frames, nanoseconds (0 when empty).
    #[must_use]
    pub fn first_max_ns(&self) -> u64 {
        self.first.max()
    }
}

/// Publishes `frames` patterned frames of `len` bytes, one per `interval` (or as fast as the
/// ring allows), waiting at most `timeout` for each slot; with `host_sync`, the producer waits
/// on the host for each frame's writes before publishing it (how pipelines without
/// interprocess events hand frames over; the baseline a latency with events is compared with).
///
/// # Errors
/// The first ring or device error.
pub fn produce_with<D: Device, M: RoleFile, T: TableMemory>(
    p: &mut DeviceProducer<D, M, T>,
    frames: u64,
    len: u64,
    interval: Option<Duration>,
    timeout: Duration,
    host_sync: bool,
) -> Result<ProducerStats, RingError> {
    if len < 16 {
        return Err(RingError::Device(Error::InvalidLength { len }));
    }
    let start = Instant::now();
    for i in 0..frames {
        if let Some(iv) = interval {
            let due = start + iv * u32::try_from(i).unwrap_or(u32::MAX);
            let now = Instant::now();
            if due > now {
                std::thread::sleep(due - now);
            }
        }
        let seq = p.ring().published();
        p.publish_with(len, timeout, |d, s, buf| {
            d.fill(s, buf, 0, len, pattern_byte(seq))?;
            d.write(s, buf, 0, &seq.to_le_bytes())?;
            d.write(s, buf, len - 8, &seq.to_le_bytes())?;
            if host_sync {
                d.sync_stream(s, timeout)?;
            }
            Ok(())
        })?;
    }
    p.sync(timeout)?;
    Ok(ProducerStats {
        published: frames,
        elapsed: start.elapsed(),
    })
}

/// Reads until `frames` frames arrived or the ring closed, checking each (see the module docs);
/// waits at most `timeout` for each frame.
///
/// # Errors
/// The first ring or device error other than the ring closing.
pub fn consume<D: Device, M: RoleFile, T: TableMemory>(
    c: &mut DeviceConsumer<D, M, T>,
    frames: u64,
    timeout: Duration,
) -> Result<ConsumerStats, RingError> {
    let dev = std::sync::Arc::clone(c.device());
    let owner = Owner(c.ring().index() as u64 + 0x1000);
    let private = dev.alloc(owner, c.buffer_len(), ExportKind::Ipc)?;
    let result = consume_into(c, &*dev, Mem::Buffer(private), frames, timeout);
    let freed = dev.free(private);
    let stats = result?;
    freed?;
    Ok(stats)
}

fn consume_into<D: Device, M: RoleFile, T: TableMemory>(
    c: &mut DeviceConsumer<D, M, T>,
    dev: &D,
    private: Mem,
    frames: u64,
    timeout: Duration,
) -> Result<ConsumerStats, RingError> {
    let slots = c.ring().memory().geometry().slots() as u64;
    let mut st = ConsumerStats::new();
    let mut expect: Option<u64> = None;
    while st.received < frames {
        let frame = match c.read_with(timeout, |d, s, slot, len| {
            d.copy(s, At(private, 0), At(slot, 0), len)
        }) {
            Ok(f) => f,
            Err(RingError::Read(ring_core::ReadError::Closed)) => break,
            Err(e) => return Err(e),
        };
        let stream = c.stream()?;
        // Latency ends when the host sees the copy done (one host sync); the checks after it
        // are not part of it.
        dev.sync_stream(stream, timeout)?;
        let done = monotonic_ns();
        let (mut head, mut tail, mut mid) = ([0u8; 8], [0u8; 8], [0u8; 1]);
        dev.read(stream, At(private, 0), &mut head, timeout)?;
        dev.read(stream, At(private, frame.len - 8), &mut tail, timeout)?;
        dev.read(stream, At(private, frame.len / 2), &mut mid, timeout)?;
        let ok = u64::from_le_bytes(head) == frame.seq
            && u64::from_le_bytes(tail) == frame.seq
            && mid[0] == pattern_byte(frame.seq);
        st.torn += u64::from(!ok);
        st.skipped += frame.missed;
        if let Some(e) = expect {
            st.skipped += frame.seq.saturating_sub(e + frame.missed);
        }
        expect = Some(frame.seq + 1);
        st.received += 1;
        // Saturated at the histogram's top (100 s): no frame waits that long within a run.
        let latency = done.saturating_sub(frame.published_ns).max(1);
        let h = if st.received <= slots {
            &mut st.first
        } else {
            &mut st.latencies
        };
        h.saturating_record(latency);
    }
    Ok(st)
}
