#!/usr/bin/env bash
# The verification layers CI runs (docs/VERIFICATION.md says what each checks and how long it
# takes): loom at preemption bound 2, Miri (one seed), proptest (1000 cases), shuttle (1000
# iterations per scheduler) and the conformance suite. Each model checker builds ring-core with
# its own cfg in its own target dir, so the normal build is never invalidated.
#
# Usage: ci/verify-quick.sh            (CI: ~10 minutes on 2 cores, builds included)
#        LOOM_MAX_PREEMPTIONS=3 MIRI_SEEDS="$(seq 1 8)" ci/verify-quick.sh   (longer)
set -euo pipefail
cd "$(dirname "$0")/.."
t() { local s=$SECONDS; "$@"; echo "--- $1 ${*:2:3}: $((SECONDS - s)) s"; }
layer() { echo; echo "=== verification: $1 ($(date -u +%H:%M:%S))"; }

layer "mutation list: every mutant still applies to the code (no layer run)"
t python3 verification/mutants_apply_check.py

layer "loom (LOOM_MAX_PREEMPTIONS=${LOOM_MAX_PREEMPTIONS:-2})"
t env RUSTFLAGS="--cfg ring_loom" LOOM_MAX_PREEMPTIONS="${LOOM_MAX_PREEMPTIONS:-2}" \
    CARGO_TARGET_DIR=target/loom \
    cargo test -p ring-verification --release --test 'loom_*'

layer "shuttle (random + PCT, ${SHUTTLE_ITERATIONS:-1000} iterations each)"
t env RUSTFLAGS="--cfg ring_shuttle" SHUTTLE_SILENCE_WARNINGS=1 \
    SHUTTLE_ITERATIONS="${SHUTTLE_ITERATIONS:-1000}" CARGO_TARGET_DIR=target/shuttle \
    cargo test -p ring-verification --release --test shuttle_ring

layer "proptest state machine (${PROPTEST_CASES:-1000} cases) and conformance suite"
t env PROPTEST_CASES="${PROPTEST_CASES:-1000}" \
    cargo test -p ring-verification --release --test proptest_model --test conformance

layer "Miri (seeds: ${MIRI_SEEDS:-1})"
t bash ci/miri.sh "${MIRI_SEEDS:-1}"
