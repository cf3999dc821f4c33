#!/usr/bin/env bash
# The Windows backend, cross-compiled for x86_64-pc-windows-gnu (mingw-w64) and run under Wine:
# ring-os's unit, integration and multi-process tests, then `ringctl demo` (plain, and killing
# a consumer every 30 frames) with its integrity check. Installs what it needs, idempotently.
# Runner: .cargo/config.toml -> ci/wine/run.sh (headless, a throw-away prefix).
set -euo pipefail
cd "$(dirname "$0")/.."
target=x86_64-pc-windows-gnu
need=()
command -v x86_64-w64-mingw32-gcc >/dev/null 2>&1 || need+=(gcc-mingw-w64-x86-64)
command -v wine64 >/dev/null 2>&1 || [ -x /usr/lib/wine/wine64 ] || need+=(wine64)
if [ ${#need[@]} -gt 0 ]; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}"
fi
rustup target add "$target"
# A prefix of this run's own, removed at the end (the runner makes it on first use).
WINEPREFIX="$(mktemp -d "${TMPDIR:-/tmp}/shmring-wine.XXXXXX")"
export WINEPREFIX
wine="$(command -v wine64 || echo /usr/lib/wine/wine64)"
cleanup() {
    WINEPREFIX="$WINEPREFIX" "$(dirname "$wine")/wineserver" -k 2>/dev/null || true
    rm -rf "$WINEPREFIX"
}
trap cleanup EXIT
# 100,000 messages through the three-class stress scenario (1,000,000 natively).
export RING_OS_STRESS_N="${RING_OS_STRESS_N:-100000}"
cargo test --target "$target" -p ring-os
cargo build --target "$target" -p ringctl
ringctl=("${CARGO_TARGET_DIR:-target}/$target/debug/ringctl.exe")
# Runs `ringctl demo ARGS --json` under Wine; prints its summary; fails unless integrity is OK.
demo() {
    local out rc=0
    out="$(ci/wine/run.sh "${ringctl[@]}" demo "$@" --json | tail -n 1)" || rc=$?
    echo "$out"
    [ "$rc" -eq 0 ] && grep -q '"ok":true' <<<"$out"
}
echo "ringctl demo under Wine:"
demo --frame-size 320x240 --duration 2
# Kills 1.5 s apart: a Wine process takes a few hundred ms to start, and a replacement killed
# before it registered leaves no entry to reclaim (the demo would count a kill without one).
echo "ringctl demo under Wine, a consumer terminated every 30 frames:"
demo --frame-size 320x240 --fps 20 --duration 5 --kill-consumer-every 30
echo "windows: ok"
