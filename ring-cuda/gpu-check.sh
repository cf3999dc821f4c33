#!/usr/bin/env bash
# GPU check for ring-cuda (issues 6 and 22).
#
#   ring-cuda/gpu-check.sh build   # here (no GPU needed): build the release test binaries and
#                                  # the gpu-pipeline example into target/gpu-check/bin (carry
#                                  # that folder)
#   ring-cuda/gpu-check.sh run     # on the GPU machine: run the prebuilt binaries (no cargo needed)
#   ring-cuda/gpu-check.sh         # both, in one go (needs cargo on the GPU machine)
#
# `run` fits in one 450 s device command: every step runs under `timeout` with its own budget
# (the budgets add up to 420 s; `timeout -k 5` kills a step 5 s after its budget at the latest),
# and a step that could end past 450 s, kill grace included, is skipped and fails.
# (GPU_CHECK_BUDGET replaces the 450 s, GPU_CHECK_BIN the binary folder: tests/gpu_check.rs
# runs `run` against fake binaries that way.)
#   (a) the device tests against GPU 0 (RING_CUDA_REQUIRE_GPU=1: a missing GPU fails, no skips)
#       plus the emulated-device and ring suites as a control;
#   (b) the cross-process pipeline: NV12 1920x1080 (3,110,400 bytes), 1 producer x 3 consumer
#       processes, 500 frames at 30 fps with events and again host-synced (p99 with events
#       checked as a ratio, <= 1.0, to the host-synced p99 of the same run); at full speed; at
#       full speed with VMM buffers;
#   (c) the leak run: 10,000 publish/consume cycles, 3 consumer processes, every process's
#       device memory (after a warm-up cycle) and live counts back to baseline.
# The report goes to ${OUT:-target/gpu-check}/report.txt (the device tool brings $OUT back),
# one verdict line per scenario to stdout and ${OUT:-target/gpu-check}/verdicts.txt; the exit
# status is non-zero if any scenario failed.
set -euo pipefail

cd "$(dirname "$0")/.."
BIN=${GPU_CHECK_BIN:-target/gpu-check/bin}
REPORT_DIR=${OUT:-target/gpu-check}
BUDGET=${GPU_CHECK_BUDGET:-450}
# Seconds `timeout` waits after a step's budget before it kills the step.
GRACE=5
TARGET=${CARGO_TARGET_DIR:-target}
mode=${1:-all}

build() {
    mkdir -p "$BIN"
    cargo build -p ring-cuda --release --example gpu-pipeline
    cp "$TARGET/release/examples/gpu-pipeline" "$BIN/"
    # The test executables, by target name (gpu, emulated, ring).
    cargo test -p ring-cuda --release --no-run --message-format=json 2>/dev/null |
        grep -o '"target":{[^}]*"name":"[a-z_]*"[^}]*}.*"executable":"[^"]*"' |
        sed -E 's/.*"name":"([a-z_]*)".*"executable":"([^"]*)".*/\1 \2/' |
        while read -r name exe; do
            case $name in
                gpu | emulated | ring) cp "$exe" "$BIN/test-$name" ;;
            esac
        done
    # Debug info is most of their size; stripped, they fit the device tool's carry limit.
    if command -v strip >/dev/null; then strip --strip-debug "$BIN"/*; fi
    for b in gpu-pipeline test-gpu test-emulated test-ring; do
        [ -x "$BIN/$b" ] || { echo "build: $BIN/$b is missing" >&2; exit 1; }
    done
    ls -la "$BIN"
}

run() {
    [ -x "$BIN/gpu-pipeline" ] || { echo "no prebuilt binaries in $BIN: run '$0 build' first" >&2; exit 2; }
    mkdir -p "$REPORT_DIR"
    local report=$REPORT_DIR/report.txt verdicts=$REPORT_DIR/verdicts.txt status=0 start=$SECONDS
    : >"$report"
    : >"$verdicts"
    verdict() {
        echo "VERDICT $1: $2" | tee -a "$report" "$verdicts"
    }
    # step NAME LIMIT_S COMMAND...: runs COMMAND under `timeout`, records its output and one
    # verdict line.
    step() {
        local name=$1 limit=$2 t0=$SECONDS rc=0
        shift 2
        if (( SECONDS - start + limit + GRACE > BUDGET )); then
            verdict "$name" "FAIL (skipped: ${limit}s would pass the ${BUDGET}s budget)"
            status=1
            return
        fi
        echo "== $name (limit ${limit}s): $*" >>"$report"
        timeout -k "$GRACE" "$limit" "$@" >>"$report" 2>&1 || rc=$?
        if (( rc == 0 )); then
            verdict "$name" "PASS ($(( SECONDS - t0 ))s)"
        else
            [ "$rc" -eq 124 ] && rc="$rc, timed out"
            verdict "$name" "FAIL (exit $rc, $(( SECONDS - t0 ))s; see report.txt)"
            status=1
        fi
    }
    { date -u; uname -a; timeout -k 2 10 nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>&1 || true; } >>"$report"
    export RING_CUDA_REQUIRE_GPU=1
    step "device-tests-gpu" 90 "$BIN/test-gpu" --test-threads=1 --nocapture
    step "emulated-control" 40 "$BIN/test-emulated" --test-threads=2
    step "ring-control" 40 "$BIN/test-ring" --test-threads=2
    # Twice 500 frames at 30 fps (17 s each): with events, then host-synced; the p99 with
    # events must not exceed the host-synced p99 measured in the same run.
    step "pipeline-nv12-30fps-1x3-vs-host-sync" 80 "$BIN/gpu-pipeline" --frames 500 --consumers 3 --fps 30 \
        --compare-host-sync --max-p99-ratio 1.0 --timeout 20
    step "pipeline-nv12-full-speed-1x3" 40 "$BIN/gpu-pipeline" --frames 500 --consumers 3 --full-speed --timeout 20
    step "pipeline-nv12-full-speed-1x3-vmm" 40 "$BIN/gpu-pipeline" --frames 500 --consumers 3 --full-speed --export fd --timeout 20
    step "leak-10000-cycles-1x3" 90 "$BIN/gpu-pipeline" --leak-cycles 10000 --consumers 3 --timeout 20
    echo "total $(( SECONDS - start ))s; report: $report" | tee -a "$report"
    return $status
}

case $mode in
    build) build ;;
    run) run ;;
    all) build && run ;;
    *) echo "usage: $0 [build|run|all]" >&2; exit 2 ;;
esac
