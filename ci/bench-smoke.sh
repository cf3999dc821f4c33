#!/usr/bin/env bash
# Smoke test for the benches: they build, and transport-bench --quick runs to the end and writes
# a JSON file that lists every transport and metric. It checks that the harness ran, never how
# fast anything was, so it passes on a slow or busy machine.
set -euo pipefail
cd "$(dirname "$0")/.."

cargo bench -p ring-benches --no-run
mkdir -p target
out=target/bench-smoke.json
rm -f "$out"
# transport-bench bounds every wait itself; the outer timeout only guards against the unforeseen.
timeout 900 cargo run --release -p ring-benches --bin transport-bench -- --quick --json "$out"
cargo run --release -p ring-benches --bin transport-bench -- --verify-json "$out"
