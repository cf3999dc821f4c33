#!/usr/bin/env bash
# Miri over ring-core and the in-process verification tests, with strict provenance, once per
# seed (each seed is a different thread schedule and weak-memory outcome).
#
# Usage: ci/miri.sh [SEEDS] [all]
#   SEEDS  space-separated seeds (default "1"); e.g. ci/miri.sh "$(seq 1 32)"
#   all    also ring-core's heavy test binaries (stress, fuzz oracles): slow under Miri
#   MIRI_JOBS=1 runs the three test sets of a seed one after another (default: side by side,
#   MIRI_JOBS at a time; Miri interprets one thread, so each set takes one core).
# Test sizes shrink under cfg(miri) (fewer proptest cases, shorter sequences, fewer messages).
set -euo pipefail
cd "$(dirname "$0")/.."
seeds=${1:-1}
jobs=${MIRI_JOBS:-$(nproc)}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-target/miri}
core_tests=(--lib --test arena_model --test api --test malformed --test ownership --test fastpath --test single_route --test holds --test groups --test never_stall --test lying_verdict)
[[ ${2:-} == all ]] && core_tests=()
# The three sets, each one `cargo miri test` argument list, slowest first (about 260 s, 235 s
# and 200 s on CI's machine): the verification suite's two binaries, then ring-core's tests.
sets=(
    "-p ring-verification --test proptest_model"
    "-p ring-verification --test conformance"
    "-p ring-core ${core_tests[*]}"
)
logs=$CARGO_TARGET_DIR/miri-logs
mkdir -p "$logs"
# The sysroot and every test binary are built first, one cargo at a time; only the runs overlap.
cargo +nightly miri setup
for seed in $seeds; do
    echo "=== miri seed $seed"
    export MIRIFLAGS="-Zmiri-strict-provenance -Zmiri-seed=$seed"
    for s in "${sets[@]}"; do
        # shellcheck disable=SC2086 # each set is an argument list
        cargo +nightly miri test -q --no-run $s
    done
    pids=()
    for i in "${!sets[@]}"; do
        # shellcheck disable=SC2086
        cargo +nightly miri test -q ${sets[$i]} >"$logs/seed$seed-set$i.log" 2>&1 &
        pids+=("$!")
        while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do
            sleep 1
        done
    done
    failed=0
    for i in "${!pids[@]}"; do
        if ! wait "${pids[$i]}"; then
            failed=1
        fi
        echo "--- miri seed $seed: ${sets[$i]}"
        cat "$logs/seed$seed-set$i.log"
    done
    if [ "$failed" != 0 ]; then
        echo "miri seed $seed: FAILED (see above)"
        exit 1
    fi
done
