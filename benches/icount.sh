#!/usr/bin/env bash
# Instructions per message, counted by valgrind's callgrind (deterministic: the same binary and
# arguments give the same count on a busy or an idle machine). Each case of
# benches/src/bin/icount.rs runs at two message counts; (I(2N) - I(N)) / N is the per-message
# cost, with setup and teardown cancelled out.
#   bash benches/icount.sh                 all cases at 64, 104 and 1024 bytes
#   ICOUNT_BIN=path bash benches/icount.sh another build of icount (a before/after comparison)
#   ICOUNT_CASES="copy pin" ICOUNT_LENS=64 bash benches/icount.sh
set -euo pipefail
cd "$(dirname "$0")/.."
command -v valgrind >/dev/null || { echo "icount: valgrind is missing (apt-get install valgrind)" >&2; exit 2; }
bin=${ICOUNT_BIN:-}
if [[ -z $bin ]]; then
    cargo build --quiet --release -p ring-benches --bin icount
    bin="${CARGO_TARGET_DIR:-target}/release/icount"
fi
cases=${ICOUNT_CASES:-copy pin skip-pin skip-copy loan batch fanout2 fanout3 hold}
lens=${ICOUNT_LENS:-64 104 1024}
n=${ICOUNT_N:-2000}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
count() { # CASE LEN N -> total instructions (Ir) of the run
    valgrind --tool=callgrind --callgrind-out-file="$tmp/out" "$bin" "$1" "$2" "$3" \
        >/dev/null 2>"$tmp/err" || { cat "$tmp/err" >&2; return 1; }
    sed -n 's/^summary: *//p' "$tmp/out"
}
printf '%-10s %6s %14s\n' case bytes instr/msg
for c in $cases; do
    for len in $lens; do
        a=$(count "$c" "$len" "$n") || { printf '%-10s %6s %14s\n' "$c" "$len" "n/a"; continue; }
        b=$(count "$c" "$len" $((2 * n)))
        printf '%-10s %6s %14s\n' "$c" "$len" "$(( (b - a) / n ))"
    done
done
