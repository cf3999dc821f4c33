//! What the demo's processes report, the integrity checks over it, and the table and JSON.

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

use crate::error::CliError;

/// The producer process's report (one JSON line on its stdout).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct ProducerReport {
    /// Messages published.
    pub published: u64,
    /// Seconds from the first claim to the close.
    pub elapsed_s: f64,
    /// Dead consumer entries the producer reclaimed.
    pub reclaimed_consumers: u64,
    /// Pins cleared in them.
    pub reclaimed_pins: u64,
    /// Claims that had to wait (a gating consumer or a pin held the slot).
    pub stalls: u64,
    /// Allocator handles of descriptors still live at exit (the messages still in the ring).
    pub live_descriptors: Vec<u64>,
    /// Descriptors allocated.
    pub allocations: u64,
}

/// A consumer process's report (one JSON line on its stdout).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct ConsumerReport {
    /// Delivery class.
    pub class: String,
    /// Read mode.
    pub read: String,
    /// Its cursor when it registered: the first message of its span.
    pub start: u64,
    /// Its cursor at the end: one past the last message of its span.
    pub end: u64,
    /// Messages it received and verified.
    pub delivered: u64,
    /// Messages it was told it skipped (gaps in the sequence it saw).
    pub skipped: u64,
    /// The skip count ring-core kept for it (must equal `skipped`).
    pub ring_missed: u64,
    /// Frames whose checksum or header did not match.
    pub torn: u64,
    /// Frames whose allocator descriptor was missing or wrong (pinned reads only).
    pub descriptor_errors: u64,
    /// Messages that arrived out of order (a sequence at or below one already seen).
    pub order_errors: u64,
    /// Seconds from registration to the close.
    pub elapsed_s: f64,
    /// Latency histogram, as (nanoseconds, count) pairs.
    pub latency_ns: Vec<(u64, u64)>,
}

/// One row of the table.
#[derive(Clone, Debug, Serialize)]
pub struct Row {
    /// Process number in spawn order.
    pub id: usize,
    /// Delivery class.
    pub class: String,
    /// Read mode.
    pub read: String,
    /// `done` or `killed`.
    pub status: String,
    /// Frames delivered.
    pub frames: u64,
    /// Frames per second over its life.
    pub fps: f64,
    /// Median latency in µs.
    pub p50_us: f64,
    /// 99th percentile latency in µs.
    pub p99_us: f64,
    /// Torn frames.
    pub torn: u64,
    /// Skipped messages (reported).
    pub skipped: u64,
    /// Lost messages (neither delivered nor reported).
    pub lost: u64,
}

/// The whole run, as printed with `--json`.
#[derive(Clone, Debug, Serialize)]
pub struct Summary {
    /// Messages published.
    pub messages: u64,
    /// Consumer processes that ran to the end.
    pub consumers: usize,
    /// Consumer processes killed by `--kill-consumer-every`.
    pub killed: u64,
    /// Torn frames, all consumers.
    pub torn: u64,
    /// Lost messages, all consumers.
    pub lost: u64,
    /// Skipped messages, all consumers.
    pub skipped: u64,
    /// Pins of dead consumers cleared.
    pub reclaimed_pins: u64,
    /// Dead consumer entries reclaimed (by the producer while running, then at the end).
    pub reclaimed_consumers: u64,
    /// Allocator allocations still live after cleanup.
    pub leaked_allocations: u64,
    /// Descriptor allocations made.
    pub allocations: u64,
    /// Median latency over all consumers, µs.
    pub p50_us: f64,
    /// 99th percentile latency over all consumers, µs.
    pub p99_us: f64,
    /// Producer frames per second.
    pub fps: f64,
    /// Producer seconds.
    pub duration_s: f64,
    /// Bytes per frame.
    pub frame_bytes: usize,
    /// Slots in the ring.
    pub slots: u32,
    /// Whether the ring was never-stall (`--never-stall`).
    pub never_stall: bool,
    /// Producer claims that waited.
    pub stalls: u64,
    /// Whether every integrity check passed.
    pub ok: bool,
    /// The checks that failed.
    pub failures: Vec<String>,
    /// Per consumer.
    pub per_consumer: Vec<Row>,
}

/// A latency histogram in nanoseconds (1 ns to 100 s, 3 significant figures).
pub fn histogram() -> Result<Histogram<u64>, CliError> {
    Histogram::new_with_bounds(1, 100_000_000_000, 3)
        .map_err(|e| CliError::Usage(format!("latency histogram: {e}")))
}

/// Percentile `q` (0-100) of `h` in µs; 0 when empty.
pub fn percentile_us(h: &Histogram<u64>, q: f64) -> f64 {
    if h.is_empty() {
        0.0
    } else {
        h.value_at_percentile(q) as f64 / 1000.0
    }
}

/// Adds (ns, count) pairs to `h`.
pub fn merge(h: &mut Histogram<u64>, pairs: &[(u64, u64)]) {
    for &(v, n) in pairs {
        let _ = h.record_n(v.max(1), n);
    }
}

/// Messages of a finished consumer's span it neither received nor was told it skipped, plus
/// (for a gating consumer) every skip, plus messages after its end that it never saw.
pub fn lost(r: &ConsumerReport, published: u64) -> u64 {
    let span = r.end.saturating_sub(r.start);
    let unaccounted = span.abs_diff(r.delivered + r.skipped);
    let tail = published.saturating_sub(r.end);
    let gating_skips = if r.class == "gating" { r.skipped } else { 0 };
    unaccounted + tail + gating_skips
}

/// Renders the table.
pub fn table(s: &Summary, title: &str) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let _ = writeln!(out, "{title}");
    let mut t = crate::table::new(
        &[
            "#", "class", "read", "status", "frames", "fps", "p50 µs", "p99 µs", "torn", "skipped",
            "lost",
        ],
        &[4, 5, 6, 7, 8, 9, 10],
    );
    for r in &s.per_consumer {
        let head = [
            r.id.to_string(),
            r.class.clone(),
            r.read.clone(),
            r.status.clone(),
        ];
        let numbers = if r.status == "killed" {
            ["-"; 7].map(str::to_owned)
        } else {
            [
                r.frames.to_string(),
                format!("{:.1}", r.fps),
                format!("{:.1}", r.p50_us),
                format!("{:.1}", r.p99_us),
                r.torn.to_string(),
                r.skipped.to_string(),
                r.lost.to_string(),
            ]
        };
        t.add_row(head.into_iter().chain(numbers));
    }
    out.push_str(&crate::table::render(&t));
    // Bytes per second through the producer, in indicatif's binary units.
    let per_s = (s.fps * s.frame_bytes as f64) as u64;
    let _ = writeln!(
        out,
        "producer: {} frames in {:.2} s = {:.1} fps ({}/s), {} claims waited",
        s.messages,
        s.duration_s,
        s.fps,
        crate::table::bytes(per_s),
        s.stalls
    );
    let _ = writeln!(
        out,
        "recovery: {} consumers killed, {} dead entries reclaimed, {} pins reclaimed",
        s.killed, s.reclaimed_consumers, s.reclaimed_pins
    );
    let _ = writeln!(
        out,
        "allocator: {} descriptor allocations, {} leaked",
        s.allocations, s.leaked_allocations
    );
    let _ = writeln!(
        out,
        "latency (all consumers): p50 {:.1} µs, p99 {:.1} µs",
        s.p50_us, s.p99_us
    );
    if s.ok {
        let _ = writeln!(
            out,
            "integrity: OK (torn {}, lost {}, every skip reported, delivered + skipped = published)",
            s.torn, s.lost
        );
    } else {
        let _ = writeln!(out, "integrity: FAILED: {}", s.failures.join("; "));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(class: &str, start: u64, end: u64, delivered: u64, skipped: u64) -> ConsumerReport {
        ConsumerReport {
            class: class.to_owned(),
            start,
            end,
            delivered,
            skipped,
            ..ConsumerReport::default()
        }
    }

    #[test]
    fn lost_counts_gaps_tails_and_gating_skips() {
        assert_eq!(lost(&report("skip", 0, 100, 90, 10), 100), 0);
        assert_eq!(lost(&report("skip", 0, 100, 90, 5), 100), 5);
        assert_eq!(lost(&report("latest", 10, 90, 70, 10), 100), 10);
        assert_eq!(lost(&report("gating", 0, 100, 100, 0), 100), 0);
        assert_eq!(lost(&report("gating", 0, 100, 99, 1), 100), 1);
    }

    #[test]
    fn merged_percentiles_are_in_microseconds() {
        let mut h = histogram().unwrap();
        merge(&mut h, &[(1_000, 50), (100_000, 50)]);
        assert!((percentile_us(&h, 50.0) - 1.0).abs() < 0.01);
        assert!((percentile_us(&h, 99.0) - 100.0).abs() < 0.2);
        assert_eq!(percentile_us(&histogram().unwrap(), 50.0), 0.0);
    }
}
