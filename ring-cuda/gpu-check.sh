#!/usr/bin/env bash
# GPU check for ring-cuda (issue 6).
#
#   ring-cuda/gpu-check.sh build   # here (no GPU needed): build the release test binaries and
#                                  # gpu-pipeline into target/gpu-check/ (small enough to carry)
#   ring-cuda/gpu-check.sh run     # on the GPU machine: run the prebuilt binaries (no cargo needed)
#   ring-cuda/gpu-check.sh         # both, in one go (needs cargo on the GPU machine)
#
# The run phase takes about a minute on a modern GPU and is bounded by `timeout` at every step
# (well under 10 minutes in all):
#   (a) the device tests against GPU 0 (RING_CUDA_REQUIRE_GPU=1: a missing GPU fails, no skips)
#       plus the emulated-device and ring suites as a control;
#   (b) the cross-process pipeline: NV12 1920x1080 (3,110,400 bytes), 1 producer x 3 consumer
#       processes, 500 frames at 30 fps, then the same at full speed: torn 0, skipped 0, p50/p99
#       latency per consumer;
#       and once more at full speed with VMM buffers (fds passed over a Unix socket);
#   (c) the leak run: 10,000 publish/consume cycles, device memory and live counts back to
#       baseline.
# Output goes to stdout and to target/gpu-check/report.txt; exit status is non-zero on any failure.
set -euo pipefail

cd "$(dirname "$0")/.."
OUT=target/gpu-check
BIN=$OUT/bin
mode=${1:-all}

build() {
    mkdir -p "$BIN"
    cargo build -p ring-cuda --release --bin gpu-pipeline
    cp target/release/gpu-pipeline "$BIN/"
    # The test executables, by target name (gpu, emulated, ring, pipeline).
    cargo test -p ring-cuda --release --no-run --message-format=json 2>/dev/null |
        grep -o '"target":{[^}]*"name":"[a-z_]*"[^}]*}.*"executable":"[^"]*"' |
        sed -E 's/.*"name":"([a-z_]*)".*"executable":"([^"]*)".*/\1 \2/' |
        while read -r name exe; do
            case $name in
                gpu | emulated | ring) cp "$exe" "$BIN/test-$name" ;;
            esac
        done
    # Debug info is most of their size; stripped, all four fit the device tool's carry limit.
    if command -v strip >/dev/null; then strip --strip-debug "$BIN"/*; fi
    ls -la "$BIN"
}

run() {
    [ -x "$BIN/gpu-pipeline" ] || { echo "no prebuilt binaries in $BIN: run '$0 build' first" >&2; exit 2; }
    mkdir -p "$OUT"
    local report=$OUT/report.txt status=0
    : >"$report"
    step() {
        local title=$1 limit=$2
        shift 2
        echo "== $title: $*" | tee -a "$report"
        if timeout "$limit" "$@" 2>&1 | tee -a "$report"; then
            echo "-- $title: PASS" | tee -a "$report"
        else
            echo "-- $title: FAIL" | tee -a "$report"
            status=1
        fi
    }
    { date -u; uname -a; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>&1 || true; } | tee -a "$report"
    export RING_CUDA_REQUIRE_GPU=1
    step "(a) device tests on the GPU" 180 "$BIN/test-gpu" --test-threads=1 --nocapture
    step "(a) emulated device control" 120 "$BIN/test-emulated" --test-threads=2
    step "(a) device ring (emulated) control" 120 "$BIN/test-ring" --test-threads=2
    step "(b) pipeline NV12 1080p 30 fps, 1x3, 500 frames" 120 \
        "$BIN/gpu-pipeline" --frames 500 --consumers 3 --fps 30
    step "(b) pipeline NV12 1080p full speed, 1x3, 500 frames" 120 \
        "$BIN/gpu-pipeline" --frames 500 --consumers 3 --full-speed
    step "(b) pipeline NV12 1080p full speed, 1x3, 500 frames, VMM fd export" 120 \
        "$BIN/gpu-pipeline" --frames 500 --consumers 3 --full-speed --export fd
    step "(c) leak run, 10000 cycles" 240 "$BIN/gpu-pipeline" --leak-cycles 10000
    echo "report: $report"
    return $status
}

case $mode in
    build) build ;;
    run) run ;;
    all) build && run ;;
    *) echo "usage: $0 [build|run|all]" >&2; exit 2 ;;
esac
