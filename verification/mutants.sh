#!/usr/bin/env bash
# Mutation check: proves the verification suite can fail.
#
# Copies the workspace to a scratch directory (target/mutants/src), then for each mutant in
# verification/mutants.txt applies ONE textual change to the scratch copy of ring-core or
# ring-os (both are restored from pristine copies before every mutant), runs
# the test layers the mutant names, and counts it caught when any of them fails. The real tree
# is never modified. Prints caught/total and names every survivor; exits non-zero if any
# mutant survived or could not be applied.
#
# Usage: verification/mutants.sh [ID_FILTER_REGEX]
#   MUTANTS_JOBS   cargo -j (default 2)
#   MUTANTS_LAYER_TIMEOUT  seconds one layer may run, its build included (default 1500); a layer
#                  still running then is stopped, and the mutant counts as caught by it (a
#                  test suite that never finishes does not pass: a lost wake-up hangs, say)
#
# mutants.txt: one mutant per line, fields separated by " ;; ":
#   id ;; file (relative to the workspace) ;; exact original text ;; replacement ;; layers ;; description
# The original text must occur exactly once in the file. `\n` in either text is a newline.
# A mutant of several edits separates them with " &&& " (in both texts) and names one file, or
# one file per edit separated by commas.
# Layers (comma-separated, run in order until one fails):
#   loom[=FILTER]   loom models (RUSTFLAGS=--cfg ring_loom, LOOM_MAX_PREEMPTIONS=2)
#   shuttle         shuttle whole-ring runs (300 iterations per scheduler)
#   proptest        proptest state machine (300 cases)
#   conformance     conformance suite (heap, owned, ring-os memfd)
#   miri[=FILTER]   conformance under Miri (threaded_stress, data races)
#   miri-alloc      tests/alloc_race.rs under Miri (weak-memory emulation of the allocator snapshot)
#   miri-core=[TEST:]FILTER  ring-core's tests/TEST.rs (default ownership) under Miri, tests
#                   matching FILTER
#   core[=TEST]     ring-core's own unit and integration tests (only tests/TEST.rs when given)
#   os=TEST         ring-os's tests/TEST.rs
#   os-lib=FILTER   ring-os's unit tests matching FILTER
#   os-lib-portable=FILTER  the same, built with the `portable` feature
#   os-async-lib=FILTER  ring-os's unit tests matching FILTER, with the `async` feature
#   os-async=TEST   ring-os's tests/TEST.rs, with the `async` feature
#   zenoh=TEST      ring-zenoh's tests/TEST.rs (two Zenoh sessions in one process)
#   doc=CRATE       CRATE's doctests (the compile_fail ones are the safe-API checks)
#   clippy          clippy on ring-core with -D warnings (the façade's disallowed-types rule)
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
filter=${1:-.}
work="$root/target/mutants"
src="$work/src"
list="$root/verification/mutants.txt"
jobs=${MUTANTS_JOBS:-2}
layer_timeout=${MUTANTS_LAYER_TIMEOUT:-1500}
log="$work/log"
mkdir -p "$work" "$log"

echo "mutants: copying the workspace to $src"
rm -rf "$src"
mkdir -p "$src"
# Everything cargo needs to load the workspace; no target, no git, no fuzz (excluded).
tar -C "$root" --exclude=./target --exclude=./.git --exclude=./fuzz -cf - . | tar -C "$src" -xf -
# Read the list from the copy: the loop reads it line by line while it runs, and an edit of the
# real list meanwhile would shift what it reads (lines run twice or skipped).
list="$src/verification/mutants.txt"
mutable=(ring-core ring-os ring-zenoh)
for crate in "${mutable[@]}"; do
    rm -rf "$work/$crate.orig"
    cp -a "$src/$crate" "$work/$crate.orig"
done
# Leave the scratch copy unmutated when we exit, however we exit: a test run there afterwards
# must test the code, not whichever mutant happened to be applied last.
restore() {
    for crate in "${mutable[@]}"; do
        rm -rf "${src:?}/$crate" && cp -a "$work/$crate.orig" "$src/$crate"
    done
}
trap restore EXIT

run_layer() {
    local layer=$1 name=${1%%=*} arg=
    [[ $layer == *=* ]] && arg=${layer#*=}
    case $name in
        loom)
            RUSTFLAGS="--cfg ring_loom" LOOM_MAX_PREEMPTIONS=2 CARGO_TARGET_DIR="$work/t-loom" \
                cargo test -q -j "$jobs" -p ring-verification --release \
                --test loom_ring --test loom_alloc_wait --test loom_ownership --test loom_fastpath \
                --test loom_groups --test loom_never_stall \
                -- ${arg:+"$arg"} ;;
        shuttle)
            RUSTFLAGS="--cfg ring_shuttle" SHUTTLE_SILENCE_WARNINGS=1 SHUTTLE_ITERATIONS=300 \
                CARGO_TARGET_DIR="$work/t-shuttle" \
                cargo test -q -j "$jobs" -p ring-verification --release --test shuttle_ring ;;
        proptest)
            PROPTEST_CASES=300 CARGO_TARGET_DIR="$work/t-normal" \
                cargo test -q -j "$jobs" -p ring-verification --release --test proptest_model ;;
        conformance)
            CARGO_TARGET_DIR="$work/t-normal" \
                cargo test -q -j "$jobs" -p ring-verification --release --test conformance ;;
        miri)
            MIRIFLAGS="-Zmiri-strict-provenance -Zmiri-seed=1" CARGO_TARGET_DIR="$work/t-miri" \
                cargo +nightly miri test -q -j "$jobs" -p ring-verification --test conformance \
                -- ${arg:-owned_segment_conforms} ;;
        miri-alloc)
            MIRIFLAGS="-Zmiri-strict-provenance -Zmiri-seed=1" CARGO_TARGET_DIR="$work/t-miri" \
                cargo +nightly miri test -q -j "$jobs" -p ring-verification --test alloc_race ;;
        miri-core)
            local test=ownership
            [[ $arg == *:* ]] && test=${arg%%:*} arg=${arg#*:}
            MIRIFLAGS="-Zmiri-strict-provenance -Zmiri-seed=1" CARGO_TARGET_DIR="$work/t-miri" \
                cargo +nightly miri test -q -j "$jobs" -p ring-core --test "$test" -- "$arg" ;;
        core)
            CARGO_TARGET_DIR="$work/t-normal" cargo test -q -j "$jobs" -p ring-core --release \
                ${arg:+--test "$arg"} ;;
        os)
            CARGO_TARGET_DIR="$work/t-normal" cargo test -q -j "$jobs" -p ring-os --release \
                --test "$arg" ;;
        os-lib)
            CARGO_TARGET_DIR="$work/t-normal" cargo test -q -j "$jobs" -p ring-os --release \
                --lib -- "$arg" ;;
        os-async-lib)
            CARGO_TARGET_DIR="$work/t-async" cargo test -q -j "$jobs" -p ring-os --release \
                --features async --lib -- "$arg" ;;
        os-async)
            CARGO_TARGET_DIR="$work/t-async" cargo test -q -j "$jobs" -p ring-os --release \
                --features async --test "$arg" ;;
        os-lib-portable)
            CARGO_TARGET_DIR="$work/t-portable" cargo test -q -j "$jobs" -p ring-os --release \
                --features portable --lib -- "$arg" ;;
        zenoh)
            CARGO_TARGET_DIR="$work/t-normal" cargo test -q -j "$jobs" -p ring-zenoh --release \
                --test "$arg" ;;
        doc)
            CARGO_TARGET_DIR="$work/t-normal" cargo test -q -j "$jobs" -p "$arg" --doc ;;
        clippy)
            CARGO_TARGET_DIR="$work/t-clippy" cargo clippy -q -j "$jobs" -p ring-core -- -D warnings ;;
        *) echo "unknown layer $name" >&2; return 2 ;;
    esac
}
# Each layer runs under `timeout`, in a shell of its own (which needs the function and what it
# reads); `timeout` signals the layer's whole process group, the test binaries included.
export -f run_layer
export work jobs

total=0 caught=0
survivors=() broken=()
start=$(date +%s)
while IFS= read -r line; do
    [[ -z $line || $line == \#* ]] && continue
    id=$(awk -F' ;; ' '{print $1}' <<<"$line")
    [[ $id =~ $filter ]] || continue
    total=$((total + 1))
    restore
    if ! python3 - "$src" "$line" <<'EOF'
import sys
src, line = sys.argv[1], sys.argv[2]
f = line.split(" ;; ")
if len(f) != 6:
    sys.exit(f"bad line ({len(f)} fields): {line}")
_, paths, olds, news, _, _ = f
# Several edits: texts separated by " &&& ", one file for all or one file per edit.
olds, news, paths = olds.split(" &&& "), news.split(" &&& "), paths.split(",")
if len(olds) != len(news) or len(paths) not in (1, len(olds)):
    sys.exit(f"edit and file counts differ: {line}")
for i, (old, new) in enumerate(zip(olds, news)):
    old, new = old.replace("\\n", "\n"), new.replace("\\n", "\n")
    path = paths[i if len(paths) > 1 else 0]
    p = f"{src}/{path}"
    s = open(p).read()
    n = s.count(old)
    if n != 1:
        sys.exit(f"original text found {n} times in {path}: {old!r}")
    open(p, "w").write(s.replace(old, new))
EOF
    then
        echo "[$id] NOT APPLIED (the code changed: update mutants.txt)"
        broken+=("$id")
        continue
    fi
    layers=$(awk -F' ;; ' '{print $5}' <<<"$line")
    verdict=SURVIVED
    t0=$(date +%s)
    for layer in ${layers//,/ }; do
        rc=0
        timeout -k 30 "$layer_timeout" bash -c 'cd "$1" && run_layer "$2"' _ "$src" "$layer" \
            >"$log/$id.$layer.log" 2>&1 || rc=$?
        if [[ $rc -eq 124 || $rc -eq 137 ]]; then
            verdict="caught by $layer (still running after ${layer_timeout}s: stopped)"
            break
        fi
        if [[ $rc -ne 0 ]]; then
            # A mutant that does not compile proves nothing: report it as broken.
            # (rustc's hard errors carry a code, E0xxx; lint failures and test failures do not.)
            # Nor does a layer that could not run (a tool missing, say): caught means a test
            # failed (libtest's FAILED, or a test process that died: a Miri error, an abort)
            # or clippy refused the code.
            if grep -q "^error\[E[0-9]*\]" "$log/$id.$layer.log"; then
                verdict="BROKEN (does not compile, see $log/$id.$layer.log)"
            elif grep -qE "test result: FAILED|process didn't exit successfully|could not compile .* due to [0-9]+ previous error" \
                "$log/$id.$layer.log"; then
                verdict="caught by $layer"
            else
                verdict="BROKEN (layer $layer did not run, see $log/$id.$layer.log)"
            fi
            break
        fi
    done
    echo "[$id] $verdict ($(( $(date +%s) - t0 ))s) — $(awk -F' ;; ' '{print $6}' <<<"$line")"
    case $verdict in
        caught*) caught=$((caught + 1)) ;;
        BROKEN*) broken+=("$id") ;;
        *) survivors+=("$id") ;;
    esac
done <"$list"

echo
echo "mutants: $caught/$total caught in $(( $(date +%s) - start ))s ($(date -u +%Y-%m-%d))"
((${#survivors[@]})) && echo "survivors: ${survivors[*]}"
((${#broken[@]})) && echo "not applied or broken: ${broken[*]}"
[[ $caught -eq $total ]]
