#!/usr/bin/env bash
# Builds every cargo-fuzz target of fuzz/ (nightly, AddressSanitizer) and runs each for SECONDS
# (default 60). Fails if any target crashes, times out on an input, leaks or runs out of memory.
#
#   bash ci/fuzz.sh            # 60 s per target (the CI budget)
#   bash ci/fuzz.sh 600        # 10 minutes per target
#   FUZZ_JOBS=2 bash ci/fuzz.sh 3600   # two targets at a time, an hour each
#   FUZZ_TARGETS="ops allocator" bash ci/fuzz.sh 120
#
# New corpus entries go to fuzz/corpus/<target>/ (git keeps only the seed-* files); crashes go to
# fuzz/artifacts/<target>/ and are reproduced with `cargo +nightly fuzz run <target> <file>`.
# Per-target logs, with libFuzzer's final stats (execs, execs/s), go to $FUZZ_LOGS
# (default fuzz/target/fuzz-logs).
set -euo pipefail

# The whole script is one function, called on the last line, so bash has read all of it before
# it runs: editing this file while a long run is going cannot break that run.
main() {
    cd "$(dirname "$0")/.."

    secs="${1:-60}"
    jobs="${FUZZ_JOBS:-1}"
    read -r -a targets <<<"${FUZZ_TARGETS:-attach ops hostile_peer allocator model_ops}"
    logs="${FUZZ_LOGS:-$PWD/fuzz/target/fuzz-logs}"

    if ! rustup toolchain list | grep -q '^nightly'; then
        rustup toolchain install nightly --profile minimal
    fi
    if ! cargo fuzz --version >/dev/null 2>&1; then
        cargo install cargo-fuzz --locked
    fi

    cd fuzz
    mkdir -p "$logs"
    cargo +nightly fuzz build

    # Per-target libFuzzer options: attach takes whole segments (the allocator seed is ~10 KiB).
    max_len() {
        case "$1" in
            attach) echo 16384 ;;
            *) echo 4096 ;;
        esac
    }

    run_one() {
        local t="$1"
        mkdir -p "corpus/$t"
        # -timeout: one input running 10 s is a hang (every loop in ring-core is bounded).
        if cargo +nightly fuzz run "$t" "corpus/$t" -- \
            -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 \
            -max_len="$(max_len "$t")" -print_final_stats=1 >"$logs/$t.log" 2>&1; then
            echo "fuzz $t: ok ($(summary "$t"))"
        else
            echo "fuzz $t: FAILED; last lines of $logs/$t.log:"
            tail -n 40 "$logs/$t.log"
            return 1
        fi
    }

    summary() {
        local f="$logs/$1.log" runs rate
        runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$f" | tail -n 1)
        rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$f" | tail -n 1)
        echo "${runs:-?} execs, ${rate:-?} execs/s in ${secs} s"
    }

    failed=0
    pids=()
    names=()
    for t in "${targets[@]}"; do
        run_one "$t" &
        pids+=("$!")
        names+=("$t")
        # Keep at most $jobs targets running.
        while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do
            sleep 1
        done
    done
    for i in "${!pids[@]}"; do
        if ! wait "${pids[$i]}"; then
            failed=1
            echo "fuzz ${names[$i]}: crash or error (see above)"
        fi
    done
    exit "$failed"
}

main "$@"
