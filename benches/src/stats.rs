//! Latency histograms, the JSON records and the printed table.

use crate::case::{Metric, Transport};
use comfy_table::{presets, CellAlignment, ColumnConstraint, ContentArrangement, Table};
use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// One line of the JSON output.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Record {
    /// Transport name (`floor`, `memcpy`, `ring-pinned`, ..., `tcp`).
    pub transport: String,
    /// Metric name (`round_trip`, `acquire`, `throughput`, `fanout`).
    pub metric: String,
    /// Payload bytes.
    pub bytes: u64,
    /// Fastest sample, nanoseconds (per message for `throughput`).
    pub min_ns: u64,
    /// Median sample, nanoseconds.
    pub median_ns: u64,
    /// 99th-percentile sample, nanoseconds.
    pub p99_ns: u64,
    /// Messages per second at the median (`throughput` only).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub per_s: Option<f64>,
}

/// Key of one series: transport, metric, bytes.
pub type Key = (Metric, usize, Transport);

/// Histograms for every (metric, bytes, transport) measured so far.
pub struct Results {
    series: BTreeMap<Key, Histogram<u64>>,
    labels: BTreeMap<(Metric, usize), String>,
}

/// Largest value a histogram holds (one hour in ns); longer samples saturate.
const MAX_NS: u64 = 3_600_000_000_000;

impl Default for Results {
    fn default() -> Self {
        Self::new()
    }
}

impl Results {
    /// No results yet.
    pub fn new() -> Self {
        Self {
            series: BTreeMap::new(),
            labels: BTreeMap::new(),
        }
    }

    /// Records one sample of `ns` nanoseconds.
    pub fn record(&mut self, metric: Metric, bytes: usize, transport: Transport, ns: u64) {
        let h = self
            .series
            .entry((metric, bytes, transport))
            .or_insert_with(|| {
                // 3 significant figures: 0.1% resolution is far below the run-to-run noise.
                #[allow(clippy::expect_used, reason = "constant, valid bounds")]
                Histogram::new_with_bounds(1, MAX_NS, 3)
                    .expect("1 ns .. 1 h at 3 significant figures is valid")
            });
        h.saturating_record(ns.max(1));
    }

    /// Remembers a human label (frame size) for a size.
    pub fn label(&mut self, metric: Metric, bytes: usize, label: &str) {
        if !label.is_empty() {
            self.labels.insert((metric, bytes), label.to_owned());
        }
    }

    /// One record per series, in table order.
    pub fn records(&self) -> Vec<Record> {
        self.series
            .iter()
            .filter(|(_, h)| !h.is_empty())
            .map(|(&(metric, bytes, transport), h)| {
                let median = h.value_at_quantile(0.5);
                Record {
                    transport: transport.name().to_owned(),
                    metric: metric.name().to_owned(),
                    bytes: bytes as u64,
                    min_ns: h.min(),
                    median_ns: median,
                    p99_ns: h.value_at_quantile(0.99),
                    per_s: (metric == Metric::Throughput && median > 0)
                        .then(|| 1e9 / median as f64),
                }
            })
            .collect()
    }

    /// Number of samples in a series.
    pub fn samples(&self, metric: Metric, bytes: usize, transport: Transport) -> u64 {
        self.series
            .get(&(metric, bytes, transport))
            .map_or(0, Histogram::len)
    }

    /// The table: one block per (metric, bytes), ratios of medians to the floor and to `unix`;
    /// borderless, numbers right-aligned, cells never wrapped (comfy-table, as ringctl's).
    pub fn table(&self) -> String {
        let recs = self.records();
        let median = |t: Transport, m: Metric, b: usize| {
            recs.iter()
                .find(|r| r.transport == t.name() && r.metric == m.name() && r.bytes == b as u64)
                .map(|r| r.median_ns)
        };
        let mut t = Table::new();
        t.load_style(presets::NOTHING)
            .set_content_arrangement(ContentArrangement::Disabled)
            .set_header([
                "metric",
                "bytes",
                "transport",
                "min",
                "median",
                "p99",
                "x floor",
                "x unix",
                "msg/s",
            ]);
        for (i, col) in t.column_iter_mut().enumerate() {
            col.set_padding((0, 1));
            col.set_constraint(ColumnConstraint::ContentWidth);
            if ![0, 2].contains(&i) {
                col.set_cell_alignment(CellAlignment::Right);
            }
        }
        let mut last = None;
        for r in &recs {
            let Some(metric) = [
                Metric::RoundTrip,
                Metric::Acquire,
                Metric::Throughput,
                Metric::Fanout,
            ]
            .into_iter()
            .find(|m| m.name() == r.metric) else {
                continue;
            };
            let bytes = r.bytes as usize;
            if last != Some((metric, bytes)) {
                t.add_row([""; 9]); // a blank line between blocks
                last = Some((metric, bytes));
            }
            let floor = match metric {
                Metric::RoundTrip | Metric::Fanout => {
                    median(Transport::Floor, Metric::RoundTrip, 64)
                }
                Metric::Acquire => median(Transport::Memcpy, Metric::Acquire, bytes),
                Metric::Throughput => None,
            };
            let unix = median(Transport::Unix, metric, bytes);
            let ratio = |base: Option<u64>| match base {
                Some(b) if b > 0 => format!("{:.2}", r.median_ns as f64 / b as f64),
                _ => "-".to_owned(),
            };
            let size = match self.labels.get(&(metric, bytes)) {
                Some(l) => l.clone(),
                None => human_bytes(bytes),
            };
            t.add_row([
                r.metric.clone(),
                size,
                r.transport.clone(),
                human_ns(r.min_ns),
                human_ns(r.median_ns),
                human_ns(r.p99_ns),
                ratio(floor),
                ratio(unix),
                r.per_s.map_or_else(String::new, |p| format!("{p:.0}")),
            ]);
        }
        t.lines().map(|l| l.trim_end().to_owned() + "\n").collect()
    }
}

/// A byte count in binary units, as the table prints sizes (`bytesize`'s IEC format).
///
/// ```
/// use ring_benches::stats::human_bytes;
/// assert_eq!(human_bytes(64), "64 B");
/// assert_eq!(human_bytes(1536), "1.5 KiB");
/// assert_eq!(human_bytes(16 << 20), "16.0 MiB");
/// ```
pub fn human_bytes(b: usize) -> String {
    bytesize::ByteSize(b as u64).display().iec().to_string()
}

/// A duration given in nanoseconds: whole nanoseconds (`ns`) below 10 µs, then `us` and `ms`
/// with one decimal and `s` with two, each from 10 of its unit, so every figure keeps at least
/// three significant digits (ASCII units: `us`, not `µs`).
///
/// ```
/// use ring_benches::stats::human_ns;
/// assert_eq!(human_ns(999), "999 ns");
/// assert_eq!(human_ns(1_234_567), "1234.6 us");
/// assert_eq!(human_ns(12_345_678), "12.3 ms");
/// assert_eq!(human_ns(12_345_678_901), "12.35 s");
/// ```
pub fn human_ns(ns: u64) -> String {
    let f = ns as f64;
    if ns < 10_000 {
        format!("{ns} ns")
    } else if ns < 10_000_000 {
        format!("{:.1} us", f / 1e3)
    } else if ns < 10_000_000_000 {
        format!("{:.1} ms", f / 1e6)
    } else {
        format!("{:.2} s", f / 1e9)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_summarise_and_serialise() {
        let mut r = Results::new();
        for ns in 1..=100 {
            r.record(Metric::RoundTrip, 64, Transport::Unix, ns * 100);
            r.record(Metric::RoundTrip, 64, Transport::Floor, ns * 10);
        }
        r.record(Metric::Throughput, 64, Transport::Pipe, 500);
        let recs = r.records();
        let unix = recs.iter().find(|x| x.transport == "unix").unwrap();
        assert_eq!(unix.min_ns, 100);
        assert!(
            (4_950..=5_050).contains(&unix.median_ns),
            "{}",
            unix.median_ns
        );
        assert!(unix.p99_ns >= 9_800);
        assert!(unix.per_s.is_none());
        let pipe = recs.iter().find(|x| x.transport == "pipe").unwrap();
        assert!((pipe.per_s.unwrap() - 2e6).abs() < 1e4);
        let json = serde_json::to_string(&recs).unwrap();
        assert!(json.contains("\"per_s\""));
        let back: Vec<Record> = serde_json::from_str(&json).unwrap();
        assert_eq!(back, recs);
        let table = r.table();
        assert!(
            table.contains(" 10.0"),
            "unix median is 10x the floor:\n{table}"
        );
        let rows: Vec<&str> = table
            .lines()
            .filter(|l| l.starts_with("round_trip"))
            .collect();
        assert_eq!(rows.len(), 2, "{table}");
        assert_eq!(
            rows[0].len(),
            rows[1].len(),
            "right-aligned columns end together:\n{table}"
        );
        assert!(
            table.lines().nth(1).is_some_and(str::is_empty),
            "a blank line opens each block:\n{table}"
        );
    }

    #[test]
    fn human_units() {
        assert_eq!(human_bytes(64), "64 B");
        assert_eq!(human_bytes(1023), "1023 B");
        assert_eq!(human_bytes(1536), "1.5 KiB");
        assert_eq!(human_bytes(65536), "64.0 KiB");
        assert_eq!(human_bytes(16 << 20), "16.0 MiB");
        assert_eq!(human_ns(999), "999 ns");
        assert_eq!(human_ns(1_500_000), "1500.0 us");
        assert_eq!(human_ns(15_000_000), "15.0 ms");
    }
}
