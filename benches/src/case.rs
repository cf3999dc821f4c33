//! What is measured: transports, metrics, sizes and how many iterations each case gets.

use serde::{Deserialize, Serialize};
use std::fmt;

/// A transport under test. The names (see [`Transport::name`]) are the ones the JSON uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Transport {
    /// Cache-line ping-pong between two processes on a shared mapping: the hardware floor.
    Floor,
    /// A 64-byte message ping-pong through rings of 128-byte message lines laid out as the slot
    /// ring's, with no protocol: the floor of the ring's layout (`link::floor_msg`).
    FloorMsg,
    /// Single-thread `memcpy` in the measuring process: the bandwidth floor.
    Memcpy,
    /// The slot ring, zero-copy: the consumer pins the slot and reads it in place.
    RingPinned,
    /// The slot ring, copy-out: the consumer copies the slot out under the seqlock.
    ///
    /// In every `ring-*` transport but `ring-futex` the producer publishes a message that fits
    /// the slot's message line (96 bytes on x86_64) with `try_publish`, the one-pass copy into
    /// the line, and a larger one through a claim written in place (`link::ring`).
    RingCopy,
    /// The slot ring with a blocking (futex) consumer.
    RingFutex,
    /// The slot ring, batched (throughput only): the child publishes groups of messages with
    /// `Producer::try_publish_batch` (one `head` store and one fence per group), the busy-polling
    /// parent reads them with `Consumer::try_read_batch` (one cursor store per batch), zero-copy.
    RingBatch,
    /// iceoryx2 publish-subscribe, busy-polling subscriber.
    Iceoryx2,
    /// iceoryx2 publish-subscribe woken by its event listener (blocking).
    Iceoryx2Event,
    /// Unix stream socket with 4 MiB send and receive buffers.
    Unix,
    /// Anonymous-style pipe (a FIFO pair), default pipe size.
    Pipe,
    /// TCP over loopback with `TCP_NODELAY`.
    Tcp,
}

impl Transport {
    /// Every transport, in table order.
    pub const ALL: [Transport; 12] = [
        Transport::Floor,
        Transport::FloorMsg,
        Transport::Memcpy,
        Transport::RingPinned,
        Transport::RingCopy,
        Transport::RingFutex,
        Transport::RingBatch,
        Transport::Iceoryx2,
        Transport::Iceoryx2Event,
        Transport::Unix,
        Transport::Pipe,
        Transport::Tcp,
    ];

    /// The name used in tables and JSON.
    pub fn name(self) -> &'static str {
        match self {
            Transport::Floor => "floor",
            Transport::FloorMsg => "floor-msg",
            Transport::Memcpy => "memcpy",
            Transport::RingPinned => "ring-pinned",
            Transport::RingCopy => "ring-copy",
            Transport::RingFutex => "ring-futex",
            Transport::RingBatch => "ring-batch",
            Transport::Iceoryx2 => "iceoryx2",
            Transport::Iceoryx2Event => "iceoryx2-event",
            Transport::Unix => "unix",
            Transport::Pipe => "pipe",
            Transport::Tcp => "tcp",
        }
    }

    /// Parses a name as printed by [`Transport::name`].
    pub fn from_name(name: &str) -> Option<Transport> {
        Transport::ALL.into_iter().find(|t| t.name() == name)
    }

    /// Whether a peer crate implements this transport (iceoryx2): only benches/compare's
    /// `transport-bench-compare`, outside the workspace, can run it (see [`crate::link::Peers`]).
    pub fn is_peer(self) -> bool {
        matches!(self, Transport::Iceoryx2 | Transport::Iceoryx2Event)
    }

    /// Whether this transport's receivers busy-poll (rather than sleep in the kernel).
    pub fn polls(self) -> bool {
        matches!(
            self,
            Transport::Floor
                | Transport::FloorMsg
                | Transport::Memcpy
                | Transport::RingPinned
                | Transport::RingCopy
                | Transport::RingBatch
                | Transport::Iceoryx2
        )
    }

    /// Whether this transport takes part in `metric` at `bytes`.
    pub fn supports(self, metric: Metric, bytes: usize) -> bool {
        match self {
            Transport::Floor | Transport::FloorMsg => metric == Metric::RoundTrip && bytes == 64,
            Transport::Memcpy => metric == Metric::Acquire,
            Transport::RingBatch => metric == Metric::Throughput && bytes == 64,
            _ => true,
        }
    }
}

impl fmt::Display for Transport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What one sample measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Metric {
    /// Parent sends `bytes`, the child echoes `bytes`: one round trip.
    RoundTrip,
    /// Parent requests (8 bytes), the child publishes a prepared `bytes` message: request → every
    /// byte usable by the parent (1 KiB .. 16 MiB and the BGRA frames).
    Acquire,
    /// The child streams a batch of `bytes` messages; a sample is the time per message.
    Throughput,
    /// Parent publishes `bytes` once to two children; each acknowledges with 8 bytes.
    Fanout,
}

impl Metric {
    /// The name used in tables and JSON.
    pub fn name(self) -> &'static str {
        match self {
            Metric::RoundTrip => "round_trip",
            Metric::Acquire => "acquire",
            Metric::Throughput => "throughput",
            Metric::Fanout => "fanout",
        }
    }

    /// How many child processes take part.
    pub fn children(self) -> usize {
        match self {
            Metric::Fanout => 2,
            _ => 1,
        }
    }
}

impl fmt::Display for Metric {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Size of the request (parent → child) in acquire and throughput cases, and of fan-out acks.
pub const REQUEST_BYTES: usize = 8;

/// Messages per throughput sample.
pub const THROUGHPUT_BATCH: usize = 2000;

/// The depth of a throughput case's rings: the producer streams up to this far ahead.
pub const THROUGHPUT_DEPTH: usize = 256;

/// The default depth of a round trip's rings, as deep as `floor-msg`'s rings of message lines:
/// a message's slot was last used 64 messages earlier in both. One message is in flight at a
/// time, so the depth changes no semantics; it decides how often a gating producer re-reads its
/// consumer's cursor line (once per `depth` messages), which the consumer wrote on its own
/// core. At a depth of 2 that is every other publish, a cache-line transfer on the round trip's
/// path ("The round trip's ring depth" in docs/benchmarks.md; `--round-trip-depth`).
pub const ROUND_TRIP_DEPTH: u16 = 64;

/// One case: a metric at one size, with its iteration plan.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Case {
    /// What is measured.
    pub metric: Metric,
    /// Payload size in bytes.
    pub bytes: usize,
    /// A label for the table ("1920x1080" for frames, otherwise empty).
    pub label: String,
    /// Unrecorded iterations per transport before the first round.
    pub warmup: usize,
    /// Interleaved rounds.
    pub rounds: usize,
    /// Recorded iterations per transport per round.
    pub iters: usize,
    /// Messages a peer may have queued at once: the ring's slot count and iceoryx2's subscriber
    /// buffer, in both directions ([`ROUND_TRIP_DEPTH`] for round trips unless the command line
    /// says otherwise, [`THROUGHPUT_DEPTH`] for throughput, 2 for acquisitions and fan-outs).
    pub depth: usize,
}

impl Case {
    /// How often pollers yield in this case (`wait::set_yield_every` takes it): a
    /// ping-pong keeps its core, a stream or a fan-out yields often.
    #[must_use]
    pub fn yield_every(&self) -> u32 {
        match self.metric {
            Metric::RoundTrip | Metric::Acquire => 100,
            Metric::Throughput | Metric::Fanout => 1,
        }
    }

    /// Bytes the parent sends per iteration (to each child).
    pub fn down_bytes(&self) -> usize {
        match self.metric {
            Metric::RoundTrip | Metric::Fanout => self.bytes,
            Metric::Acquire | Metric::Throughput => REQUEST_BYTES,
        }
    }

    /// Bytes each child sends per message.
    pub fn up_bytes(&self) -> usize {
        match self.metric {
            Metric::RoundTrip | Metric::Acquire | Metric::Throughput => self.bytes,
            Metric::Fanout => REQUEST_BYTES,
        }
    }

    /// Largest message in either direction.
    pub fn max_bytes(&self) -> usize {
        self.down_bytes().max(self.up_bytes())
    }
}

/// The BGRA frames of the frame-grabber seed table: (label, width, height).
pub const FRAMES: [(&str, usize, usize); 6] = [
    ("640x480", 640, 480),
    ("1280x720", 1280, 720),
    ("1920x1080", 1920, 1080),
    ("2560x1440", 2560, 1440),
    ("3840x2160", 3840, 2160),
    ("7680x4320", 7680, 4320),
];

const KIB: usize = 1024;
const MIB: usize = 1024 * 1024;

/// The fewest rounds (samples) a `--quick` case of the small-message metrics takes: the
/// median of 7 is decided by the 4th, so up to three samples that a preemption stretched (a
/// shared 2-core machine) cannot move it; with 4 samples, one could (seen: throughput 0.47x
/// iceoryx2 in one quick run, 2.9x in the next).
pub const QUICK_MIN_ROUNDS: usize = 7;

/// The full list of cases; `quick` shrinks every iteration count (about a minute in all).
/// Round trips run at `round_trip_depth` ([`ROUND_TRIP_DEPTH`] by default).
pub fn plan(quick: bool, round_trip_depth: usize) -> Vec<Case> {
    let mut cases = Vec::new();
    let q = QUICK_MIN_ROUNDS;
    let (rt_rounds, rt_iters, rt_warm) = if quick { (q, 100, 50) } else { (10, 500, 200) };
    for bytes in [64, KIB] {
        cases.push(Case {
            depth: round_trip_depth,
            ..case(Metric::RoundTrip, bytes, "", rt_warm, rt_rounds, rt_iters)
        });
    }
    // Acquire: a byte budget per transport per round keeps big sizes cheap.
    let (acq_rounds, budget) = if quick { (3, 16 * MIB) } else { (8, 96 * MIB) };
    let mut sizes: Vec<(String, usize)> = vec![
        (String::new(), KIB),
        (String::new(), 64 * KIB),
        (String::new(), MIB),
        (String::new(), 16 * MIB),
    ];
    sizes.extend(FRAMES.iter().map(|&(l, w, h)| (l.to_owned(), w * h * 4)));
    for (label, bytes) in sizes {
        let iters = (budget / bytes).clamp(1, 200);
        let warm = (iters / 4).max(2);
        cases.push(case(
            Metric::Acquire,
            bytes,
            &label,
            warm,
            acq_rounds,
            iters,
        ));
    }
    let (tp_rounds, tp_iters) = if quick { (q + 2, 1) } else { (10, 3) };
    cases.push(Case {
        depth: THROUGHPUT_DEPTH,
        ..case(Metric::Throughput, 64, "", 1, tp_rounds, tp_iters)
    });
    let (fo_rounds, fo_iters, fo_warm) = if quick { (q, 50, 20) } else { (10, 200, 50) };
    cases.push(case(Metric::Fanout, 64, "", fo_warm, fo_rounds, fo_iters));
    let (fb_rounds, fb_iters) = if quick { (3, 4) } else { (8, 16) };
    cases.push(case(Metric::Fanout, MIB, "", 2, fb_rounds, fb_iters));
    cases
}

fn case(
    metric: Metric,
    bytes: usize,
    label: &str,
    warmup: usize,
    rounds: usize,
    iters: usize,
) -> Case {
    Case {
        metric,
        bytes,
        label: label.to_owned(),
        warmup,
        rounds,
        iters,
        depth: 2,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for t in Transport::ALL {
            assert_eq!(Transport::from_name(t.name()), Some(t));
        }
        assert_eq!(Transport::from_name("carrier-pigeon"), None);
    }

    /// A quick run's small-message medians are odd-sized samples of at least
    /// `QUICK_MIN_ROUNDS`, so a few preempted samples cannot decide them.
    #[test]
    fn quick_small_message_medians_survive_preempted_samples() {
        for c in plan(true, ROUND_TRIP_DEPTH.into()) {
            if c.bytes <= KIB && c.metric != Metric::Acquire {
                assert!(
                    c.rounds >= QUICK_MIN_ROUNDS && c.rounds % 2 == 1,
                    "{} {} B: {} rounds",
                    c.metric,
                    c.bytes,
                    c.rounds
                );
            }
        }
    }

    #[test]
    fn plan_covers_every_metric_and_frame() {
        let cases = plan(true, ROUND_TRIP_DEPTH.into());
        for m in [
            Metric::RoundTrip,
            Metric::Acquire,
            Metric::Throughput,
            Metric::Fanout,
        ] {
            assert!(cases.iter().any(|c| c.metric == m), "{m} missing");
        }
        for (label, w, h) in FRAMES {
            assert!(cases
                .iter()
                .any(|c| c.label == label && c.bytes == w * h * 4));
        }
        assert!(cases.iter().all(|c| c.iters >= 1 && c.rounds >= 1));
    }

    /// Round trips take the depth asked for, throughput its own, the rest 2, in full and
    /// quick plans alike.
    #[test]
    fn round_trips_run_at_the_depth_asked_for() {
        for quick in [false, true] {
            for asked in [2, 64, 1024] {
                for c in plan(quick, asked) {
                    let want = match c.metric {
                        Metric::RoundTrip => asked,
                        Metric::Throughput => THROUGHPUT_DEPTH,
                        Metric::Acquire | Metric::Fanout => 2,
                    };
                    assert_eq!(c.depth, want, "{} {} B", c.metric, c.bytes);
                }
            }
        }
    }
}
