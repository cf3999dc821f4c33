#!/usr/bin/env bash
# Miri over ring-core and the in-process verification tests, with strict provenance, once per
# seed (each seed is a different thread schedule and weak-memory outcome).
#
# Usage: ci/miri.sh [SEEDS] [all]
#   SEEDS  space-separated seeds (default "1"); e.g. ci/miri.sh "$(seq 1 32)"
#   all    also ring-core's heavy test binaries (stress, fuzz oracles): slow under Miri
# Test sizes shrink under cfg(miri) (fewer proptest cases, shorter sequences, fewer messages).
set -euo pipefail
cd "$(dirname "$0")/.."
seeds=${1:-1}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-target/miri}
core_tests=(--lib --test arena_model --test api --test malformed --test ownership --test fastpath --test single_route --test holds --test groups --test never_stall --test lying_verdict)
[[ ${2:-} == all ]] && core_tests=()
for seed in $seeds; do
    echo "=== miri seed $seed"
    export MIRIFLAGS="-Zmiri-strict-provenance -Zmiri-seed=$seed"
    cargo +nightly miri test -q -p ring-core "${core_tests[@]}"
    cargo +nightly miri test -q -p ring-verification --test conformance --test proptest_model
done
