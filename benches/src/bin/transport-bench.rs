//! `transport-bench`: the cross-process transport comparison.
//!
//! ```text
//! cargo run --release -p ring-benches --bin transport-bench -- [--quick] [--json FILE]
//! ```
//!
//! Prints a table (min, median, p99 per transport, metric and size, with the median's ratio to
//! the floor and to `unix` measured in the same run) and, with `--json`, writes the records.
#![allow(
    clippy::std_instead_of_core,
    clippy::std_instead_of_alloc,
    reason = "std crate"
)]

use clap::Parser;
use ring_benches::case::{Metric, Transport};
use ring_benches::runner::{self, Options};
use ring_benches::BenchError;
use std::path::PathBuf;
use std::process::ExitCode;

/// Cross-process transport comparison: the slot ring against the hardware floor, iceoryx2, Unix
/// sockets, pipes and TCP loopback, measured in one run.
#[derive(Parser, Debug)]
#[command(version)]
struct Args {
    /// Fewer iterations: finishes in about a minute.
    #[arg(long)]
    quick: bool,
    /// Write the records as a JSON array to FILE.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// Comma-separated transports to run (default: all).
    #[arg(long, value_delimiter = ',', value_name = "NAMES")]
    transports: Vec<String>,
    /// Comma-separated metrics to run: round_trip, acquire, throughput, fanout (default: all).
    #[arg(long, value_delimiter = ',', value_name = "NAMES")]
    metrics: Vec<String>,
    /// Check that FILE (written by --json) parses and lists every transport and metric, then
    /// exit; runs nothing (used by ci/bench-smoke.sh; judges presence, never speed).
    #[arg(long, value_name = "FILE", conflicts_with_all = ["json", "quick"])]
    verify_json: Option<PathBuf>,
    /// Internal: run as child N (the harness starts its own peers).
    #[arg(long, hide = true, requires = "ctl")]
    child: Option<usize>,
    /// Internal: the parent's control socket.
    #[arg(long, hide = true)]
    ctl: Option<PathBuf>,
    /// Internal: the CPUs the harness uses.
    #[arg(long, hide = true, value_delimiter = ',')]
    cpus: Vec<usize>,
}

fn parse_list<T: Copy>(
    names: &[String],
    all: &[T],
    from: impl Fn(&str) -> Option<T>,
    what: &str,
) -> Result<Vec<T>, BenchError> {
    if names.is_empty() {
        return Ok(all.to_vec());
    }
    names
        .iter()
        .map(|n| {
            from(n.trim()).ok_or_else(|| BenchError::Usage {
                what: format!("unknown {what} {n:?}"),
            })
        })
        .collect()
}

fn metric_from(name: &str) -> Option<Metric> {
    [
        Metric::RoundTrip,
        Metric::Acquire,
        Metric::Throughput,
        Metric::Fanout,
    ]
    .into_iter()
    .find(|m| m.name() == name)
}

fn main() -> ExitCode {
    let args = Args::parse();
    if let (Some(index), Some(ctl)) = (args.child, &args.ctl) {
        return match ring_benches::child::main(index, ctl, &args.cpus) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("transport-bench child {index}: {e}");
                ExitCode::FAILURE
            }
        };
    }
    if let Some(path) = &args.verify_json {
        return match verify(path) {
            Ok(n) => {
                println!(
                    "transport-bench: {} lists every transport and metric ({n} records)",
                    path.display()
                );
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("transport-bench: {e}");
                ExitCode::FAILURE
            }
        };
    }
    match parent(&args) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(2),
        Err(e) => {
            eprintln!("transport-bench: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Parses a `--json` file and checks that every transport and every metric has a record.
fn verify(path: &std::path::Path) -> Result<usize, BenchError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| BenchError::io(format!("read {}", path.display()), e))?;
    let records: Vec<ring_benches::stats::Record> =
        serde_json::from_str(&text).map_err(|e| BenchError::Usage {
            what: format!("{} is not a JSON array of records: {e}", path.display()),
        })?;
    let missing: Vec<&str> = Transport::ALL
        .iter()
        .map(|t| t.name())
        .filter(|name| !records.iter().any(|r| r.transport == *name))
        .chain(
            [
                Metric::RoundTrip,
                Metric::Acquire,
                Metric::Throughput,
                Metric::Fanout,
            ]
            .iter()
            .map(|m| m.name())
            .filter(|name| !records.iter().any(|r| r.metric == *name)),
        )
        .collect();
    if missing.is_empty() {
        Ok(records.len())
    } else {
        Err(BenchError::Usage {
            what: format!(
                "{} has no records for: {}",
                path.display(),
                missing.join(", ")
            ),
        })
    }
}

/// Runs the harness; `Ok(false)` when some transport failed (the rest is still reported).
fn parent(args: &Args) -> Result<bool, BenchError> {
    let opts = Options {
        quick: args.quick,
        transports: parse_list(
            &args.transports,
            &Transport::ALL,
            Transport::from_name,
            "transport",
        )?,
        metrics: parse_list(
            &args.metrics,
            &[
                Metric::RoundTrip,
                Metric::Acquire,
                Metric::Throughput,
                Metric::Fanout,
            ],
            metric_from,
            "metric",
        )?,
    };
    let outcome = runner::run(&opts)?;
    println!("{}", outcome.results.table());
    if let Some(path) = &args.json {
        let json = serde_json::to_string_pretty(&outcome.results.records()).map_err(|e| {
            BenchError::Usage {
                what: format!("cannot encode the results: {e}"),
            }
        })?;
        std::fs::write(path, json + "\n")
            .map_err(|e| BenchError::io(format!("write {}", path.display()), e))?;
        eprintln!("transport-bench: wrote {}", path.display());
    }
    for f in &outcome.failures {
        eprintln!("transport-bench: failed: {f}");
    }
    Ok(outcome.failures.is_empty())
}
