#!/usr/bin/env bash
# Alternated runs of several builds of `transport-bench` on the same machine, for a before/after
# that the machine's drift cannot decide: round k runs every build once, in the order given,
# then round k+1; the medians of each build's per-run medians come out per metric and transport
# (64-byte messages). Build each tree with
#   cargo build --release -p ring-benches --bin transport-bench
# and copy target/release/transport-bench somewhere per build.
#   bash benches/ab.sh ROUNDS NAME=BINARY [NAME=BINARY ...]
#   AB_TRANSPORTS=floor,floor-msg,ring-copy AB_METRICS=round_trip bash benches/ab.sh 10 base=/tmp/tb-base new=/tmp/tb-new
set -euo pipefail
(($# >= 2)) || { echo "usage: ab.sh ROUNDS NAME=BINARY [NAME=BINARY ...]" >&2; exit 2; }
rounds=$1; shift
transports=${AB_TRANSPORTS:-floor,ring-copy,ring-pinned}
metrics=${AB_METRICS:-round_trip,throughput}
out=$(mktemp)
trap 'rm -f "$out" "$out.json" "$out.err"' EXIT
for _ in $(seq 1 "$rounds"); do
    for build in "$@"; do
        name=${build%%=*} bin=${build#*=}
        "$bin" --transports "$transports" --metrics "$metrics" --json "$out.json" >/dev/null \
            2>"$out.err" || { cat "$out.err" >&2; exit 1; }
        python3 - "$name" "$out.json" >>"$out" <<'PY'
import json, sys
name, path = sys.argv[1], sys.argv[2]
for r in json.load(open(path)):
    if r["bytes"] == 64:
        print(name, r["metric"], r["transport"], r["median_ns"])
PY
    done
done
python3 - "$out" "$@" <<'PY'
import collections, statistics, sys
path, builds = sys.argv[1], [b.split("=", 1)[0] for b in sys.argv[2:]]
runs = collections.defaultdict(list)
for line in open(path):
    name, metric, transport, ns = line.split()
    runs[(metric, transport, name)].append(float(ns))
keys = sorted({(m, t) for (m, t, _) in runs})
print("%-12s %-12s" % ("metric", "transport") + "".join("%10s" % b for b in builds))
for m, t in keys:
    cells = [runs.get((m, t, b)) for b in builds]
    print("%-12s %-12s" % (m, t) + "".join("%10.1f" % statistics.median(c) if c else "%10s" % "-" for c in cells))
print("(medians of the runs of each build, ns; throughput in ns per message)")
PY
