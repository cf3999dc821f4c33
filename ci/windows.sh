#!/usr/bin/env bash
# The Windows backend, cross-compiled for x86_64-pc-windows-gnu (mingw-w64) and run under Wine:
# ring-os's unit, integration and multi-process tests, then `ringctl demo` (plain, and killing
# a consumer every 30 frames) with its integrity check, and `ringctl grab` refused (exit 2);
# the C ABI (shmring.dll, libshmring.a) with ring-ffi's C peer built by mingw-w64 against it:
# its error paths, and messages from a C publisher to a C subscriber and to `ringctl sub`,
# checked; the Python extension module (_shmring.pyd, abi3) built (not imported: no Windows
# CPython here).
# Installs what it needs, idempotently.
# Runner: .cargo/config.toml -> ci/wine/run.sh (headless, a throw-away prefix).
set -euo pipefail
cd "$(dirname "$0")/.."
target=x86_64-pc-windows-gnu
need=()
command -v x86_64-w64-mingw32-gcc >/dev/null 2>&1 || need+=(gcc-mingw-w64-x86-64)
# The frame server (examples/frame-server/wine.sh) is C++.
command -v x86_64-w64-mingw32-g++ >/dev/null 2>&1 || need+=(g++-mingw-w64-x86-64)
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
work="$(mktemp -d "${TMPDIR:-/tmp}/shmring-win.XXXXXX")"
cleanup() {
    WINEPREFIX="$WINEPREFIX" "$(dirname "$wine")/wineserver" -k 2>/dev/null || true
    rm -rf "$WINEPREFIX" "$work"
}
trap cleanup EXIT
# 100,000 messages through the three-class stress scenario (1,000,000 natively).
export RING_OS_STRESS_N="${RING_OS_STRESS_N:-100000}"
cargo clippy --target "$target" -p ring-os -p ringctl -p ring-ffi --all-targets -- -D warnings
# The Python extension's Rust for Windows (lint only: its wheel is not built here).
(cd python && cargo clippy --target "$target" --all-targets -- -D warnings)
cargo test --target "$target" -p ring-os
# The async feature: its reactor sleeps on the segments' wait semaphores here (a publish through
# a second view reaches it through one), and the futures' cancel-safety tests.
cargo clippy --target "$target" -p ring-os --features async --all-targets -- -D warnings
cargo test --target "$target" -p ring-os --features async --lib asyncio
cargo test --target "$target" -p ring-os --features async --test async_cancel
cargo build --target "$target" -p ringctl
out="${CARGO_TARGET_DIR:-target}/$target/debug"
ringctl=("$out/ringctl.exe")
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
echo "ringctl grab under Wine: a usage error (exit 2), its capture endpoint is a Unix socket"
rc=0
ci/wine/run.sh "${ringctl[@]}" grab r --socket endpoint.sock 2>"$work/grab.err" || rc=$?
cat "$work/grab.err"
[ "$rc" -eq 2 ] && grep -q "Unix socket" "$work/grab.err"

echo "C ABI under Wine: ring-ffi/tests/c/peer.c against shmring.dll and libshmring.a"
cargo build --target "$target" -p ring-ffi
cc=(x86_64-w64-mingw32-gcc -std=c11 -Wall -Wextra -Werror -Iinclude ring-ffi/tests/c/peer.c)
mkdir -p "$work/dll" "$work/static"
"${cc[@]}" -L"$out" -lshmring -o "$work/dll/peer.exe"
cp "$out/shmring.dll" "$work/dll/" # found next to the executable
# The system libraries Rust's std and windows-sys need in a static link.
"${cc[@]}" "$out/libshmring.a" -lws2_32 -luserenv -lntdll -lbcrypt -ladvapi32 -lkernel32 \
    -lsynchronization -o "$work/static/peer-static.exe"
ci/wine/run.sh "$work/dll/peer.exe" errors "ffi-win-$$"
ci/wine/run.sh "$work/static/peer-static.exe" errors "ffi-win-static-$$"
# Starts `peer create-pub NAME N` (a C publisher that creates ring NAME) in the background and
# returns once it has created the ring; its pid in $pub_pid, its output in $work/pub-NAME.
start_pub() {
    local log="$work/pub-$1"
    ci/wine/run.sh "$work/dll/peer.exe" create-pub "$1" "$2" >"$log" 2>&1 &
    pub_pid=$!
    for _ in $(seq 600); do # 60 s at most: a loaded machine starts Wine slowly
        grep -q '^created' "$log" && return 0
        kill -0 "$pub_pid" 2>/dev/null || break
        sleep 0.1
    done
    cat "$log" >&2
    echo "windows: the C publisher did not create ring $1" >&2
    return 1
}
n=2000
echo "C publisher -> C subscriber (two Wine processes, $n messages, each one checked):"
start_pub "ffi-win-c-$$" "$n"
# (msvcrt's text-mode stdout ends lines with CR LF)
got="$(timeout 120 ci/wine/run.sh "$work/dll/peer.exe" sub "ffi-win-c-$$" "$n" | tr -d '\r')"
wait "$pub_pid"
echo "$got"
grep -qx "sub: $n ok" <<<"$got"
echo "C publisher -> ringctl sub (Rust), $n messages compared byte for byte:"
start_pub "ffi-win-r-$$" "$n"
timeout 120 ci/wine/run.sh "${ringctl[@]}" sub "ffi-win-r-$$" >"$work/sub.bin"
wait "$pub_pid"
for ((i = 0; i < n; i++)); do printf 'msg %d' "$i"; done >"$work/want.bin"
cmp "$work/want.bin" "$work/sub.bin"
echo "ringctl sub: $(wc -c <"$work/sub.bin") bytes, as published"

echo "Python extension module for Windows (built and its exports checked; not imported)"
cargo build --manifest-path python/Cargo.toml --target "$target"
pyd="$work/_shmring.pyd"
cp "${CARGO_TARGET_DIR:-python/target}/$target/debug/_shmring.dll" "$pyd"
dump="$(x86_64-w64-mingw32-objdump -p "$pyd")"
grep -q 'PyInit__shmring' <<<"$dump"         # the module's entry point
grep -q 'DLL Name: python3.dll' <<<"$dump"   # abi3: the stable-ABI DLL, any CPython >= 3.11
echo "_shmring.pyd: $(wc -c <"$pyd") bytes, exports PyInit__shmring, imports python3.dll"
echo "the frame server and a C UnrealCV-protocol client under Wine (TCP + a named section)"
bash examples/frame-server/wine.sh

echo "windows: ok"
