//! The command line of `transport-bench`, shared by the workspace's binary (every transport
//! but the peer crates') and benches/compare's (which adds iceoryx2 through [`Peers`]).
//!
//! ```text
//! cargo run --release -p ring-benches --bin transport-bench -- [--quick] [--json FILE]
//! cargo run --release --manifest-path benches/compare/Cargo.toml -- [--quick] [--json FILE]
//! ```
//!
//! Prints a table (min, median, p99 per transport, metric and size, with the median's ratio to
//! the floor and to `unix` measured in the same run) and, with `--json`, writes the records.

use crate::case::{Metric, Transport, ROUND_TRIP_DEPTH};
use crate::link::{self, Peers};
use crate::runner::{self, Options};
use crate::BenchError;
use clap::Parser;
use std::path::PathBuf;
use std::process::ExitCode;

/// Cross-process transport comparison: the slot ring against the hardware floor, Unix sockets,
/// pipes and TCP loopback (and iceoryx2 in benches/compare's build), measured in one run.
#[derive(Parser, Debug)]
#[command(version)]
struct Args {
    /// Fewer iterations: finishes in about a minute.
    #[arg(long)]
    quick: bool,
    /// Write the records as a JSON array to FILE.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// Comma-separated transports to run (default: all this build has).
    #[arg(long, value_delimiter = ',', value_name = "NAMES")]
    transports: Vec<String>,
    /// Comma-separated metrics to run: round_trip, acquire, throughput, fanout (default: all).
    #[arg(long, value_delimiter = ',', value_name = "NAMES")]
    metrics: Vec<String>,
    /// Slots of a round trip's rings (and iceoryx2's subscriber buffer there): a slot is reused
    /// after this many messages. A depth of 2 makes a gating producer read its consumer's cursor
    /// line every other message (docs/benchmarks.md, "The round trip's ring depth").
    #[arg(long, value_name = "N", default_value_t = ROUND_TRIP_DEPTH,
          value_parser = clap::value_parser!(u16).range(2..=1024))]
    round_trip_depth: u16,
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

/// Every transport this build can run: all but the peer crates', unless `peers` has them.
pub fn transports(peers: Option<&Peers>) -> Vec<Transport> {
    Transport::ALL
        .into_iter()
        .filter(|&t| link::built(t, peers))
        .collect()
}

/// Runs `transport-bench` with the arguments of this process: as the measuring parent, as one
/// of its children (`--child`), or as the check of a JSON file (`--verify-json`).
pub fn main(peers: Option<Peers>) -> ExitCode {
    let args = Args::parse();
    if let (Some(index), Some(ctl)) = (args.child, &args.ctl) {
        return match crate::child::main(index, ctl, &args.cpus, peers.as_ref()) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("transport-bench child {index}: {e}");
                ExitCode::FAILURE
            }
        };
    }
    if let Some(path) = &args.verify_json {
        return match verify(path, &transports(peers.as_ref())) {
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
    match parent(&args, peers) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(2),
        Err(e) => {
            eprintln!("transport-bench: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Parses a `--json` file and checks that every one of `transports` and every metric has a
/// record.
fn verify(path: &std::path::Path, transports: &[Transport]) -> Result<usize, BenchError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| BenchError::io(format!("read {}", path.display()), e))?;
    let records: Vec<crate::stats::Record> =
        serde_json::from_str(&text).map_err(|e| BenchError::Usage {
            what: format!("{} is not a JSON array of records: {e}", path.display()),
        })?;
    let missing: Vec<&str> = transports
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
fn parent(args: &Args, peers: Option<Peers>) -> Result<bool, BenchError> {
    let opts = Options {
        quick: args.quick,
        transports: parse_list(
            &args.transports,
            &transports(peers.as_ref()),
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
        peers,
        round_trip_depth: usize::from(args.round_trip_depth),
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

#[cfg(test)]
mod tests {
    use super::*;

    fn no_link(_: &mut [crate::ctl::Setup]) -> Result<link::Pending, BenchError> {
        Err(BenchError::Usage {
            what: "test".to_owned(),
        })
    }

    fn no_child(_: &crate::ctl::Setup) -> Result<link::Link, BenchError> {
        Err(BenchError::Usage {
            what: "test".to_owned(),
        })
    }

    /// `--round-trip-depth`: 64 unless given, 2 (the depth every round trip had before the
    /// flag) to 1024 accepted, anything else refused with a usage error.
    #[test]
    fn round_trip_depth_defaults_to_64_and_is_bounded() {
        let parse = |extra: &[&str]| {
            Args::try_parse_from(["transport-bench"].iter().chain(extra))
                .map(|a| a.round_trip_depth)
        };
        assert_eq!(parse(&[]).unwrap(), ROUND_TRIP_DEPTH);
        assert_eq!(ROUND_TRIP_DEPTH, 64);
        assert_eq!(parse(&["--round-trip-depth", "2"]).unwrap(), 2);
        assert_eq!(parse(&["--round-trip-depth", "1024"]).unwrap(), 1024);
        for bad in ["0", "1", "1025", "-3", "many"] {
            assert!(parse(&["--round-trip-depth", bad]).is_err(), "{bad}");
        }
    }

    /// The workspace's build runs every transport but iceoryx2's; benches/compare's adds them.
    #[test]
    fn peer_transports_only_where_built() {
        let own = transports(None);
        assert!(own.contains(&Transport::RingPinned) && own.contains(&Transport::Unix));
        assert!(!own.iter().any(|t| t.is_peer()), "{own:?}");
        let peers = Peers {
            transports: &[Transport::Iceoryx2, Transport::Iceoryx2Event],
            parent_begin: no_link,
            child_setup: no_child,
        };
        assert_eq!(transports(Some(&peers)), Transport::ALL.to_vec());
    }

    /// Asking the workspace's build for iceoryx2 says where it is measured.
    #[test]
    fn a_peer_transport_without_its_links_points_to_benches_compare() {
        let setup = crate::ctl::Setup {
            transport: Transport::Iceoryx2,
            case: crate::case::plan(true, crate::case::ROUND_TRIP_DEPTH.into()).remove(0),
            child: 0,
            children: 1,
            dir: std::env::temp_dir(),
            tag: "t".to_owned(),
            port: 0,
        };
        let Err(e) = link::child_setup(&setup, None) else {
            panic!("iceoryx2 set up without its links");
        };
        assert!(e.to_string().contains("benches/compare"), "{e}");
    }
}
