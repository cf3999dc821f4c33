#!/usr/bin/env bash
# Smoke test for the benches: they build, and transport-bench --quick runs to the end and writes
# a JSON file that lists every transport and metric. It checks that the harness ran, never how
# fast anything was, so it passes on a slow or busy machine.
#
# The comparison with peer crates (iceoryx2, rtrb, crossbeam-queue) is benches/compare, a
# workspace of its own with its own Cargo.lock: its transport-bench-compare is the workspace's
# harness plus iceoryx2, so that is the one run here (every transport in one run).
set -euo pipefail
cd "$(dirname "$0")/.."
# The workspace's target dir for both: the registry crates they share are built once (their
# binaries have different names: transport-bench, transport-bench-compare).
manifest=(--manifest-path benches/compare/Cargo.toml)
compare=("${manifest[@]}" --target-dir "${CARGO_TARGET_DIR:-target}")

cargo bench -p ring-benches --no-run
cargo fmt "${manifest[@]}" -- --check
cargo clippy "${compare[@]}" --all-targets -- -D warnings
cargo bench "${compare[@]}" --no-run
mkdir -p target
out=target/bench-smoke.json
rm -f "$out"
# transport-bench bounds every wait itself; the outer timeout only guards against the unforeseen.
# Exit status 2 means the run finished but some (transport, case) failed, e.g. for lack of shared
# memory in a small container: it is reported, and the check below still demands that every
# transport and metric produced records.
rc=0
timeout 900 cargo run --release "${compare[@]}" -- --quick --json "$out" || rc=$?
if [ "$rc" -ne 0 ] && [ "$rc" -ne 2 ]; then
    echo "bench-smoke: transport-bench failed with status $rc" >&2
    exit "$rc"
fi
[ "$rc" -eq 2 ] && echo "bench-smoke: WARNING: some cases failed (see above)" >&2
cargo run --release "${compare[@]}" -- --verify-json "$out"

# Instructions per message under callgrind (deterministic, never timed): a smoke test that the
# counting runs (ci/setup.sh installs valgrind); the figures and their before/after are in docs/benchmarks.md.
ICOUNT_N=500 ICOUNT_LENS=64 ICOUNT_CASES="copy pin hold" bash benches/icount.sh

# The alternated before/after runner, with one build under two names for one round: it must
# print a row for each transport, with a figure under each name (never judged on the figure).
cargo build --release -p ring-benches --bin transport-bench
tb="${CARGO_TARGET_DIR:-target}/release/transport-bench"
ab=$(bash benches/ab.sh 1 a="$tb" b="$tb")
echo "$ab"
for t in floor ring-copy ring-pinned; do
    grep -Eq "^round_trip +$t +[0-9.]+ +[0-9.]+$" <<<"$ab" ||
        { echo "bench-smoke: benches/ab.sh printed no round trip for $t" >&2; exit 1; }
done
